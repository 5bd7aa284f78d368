// ParamStore: every trainable parameter of one rank in flat, contiguous buffers.
//
//   master  fp32, what the optimizer updates (the "fp32 master weights")
//   model   the copy forward/backward read: the master itself in fp32 training,
//           a separate bf16/fp16 buffer in mixed precision
//   grads   gradients in the model dtype, accumulated across micro-batches
//
// Flat buffers make the later ZeRO partitioning a matter of slicing offsets, and let the
// optimizer, norm and overflow checks run as single passes. Each parameter starts at an
// element offset aligned to 16 (64 bytes). Not thread-safe; owned by the worker.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/graph/graph.h"

namespace ds {

struct ParamSlot {
  std::string name;
  int tensor = -1;      // graph tensor index
  Shape shape;
  int64_t offset = 0;   // element offset into the flat buffers
  int64_t numel = 0;
  bool decay = true;    // weight decay applies (matrices and embeddings, not biases/norms)
};

class ParamStore {
 public:
  // Lays out every param of `graph`; `model_dtype` is f32, bf16 or f16.
  ParamStore(const Graph& graph, DType model_dtype);

  // Fills the master weights from each param's initializer with a generator seeded by
  // (seed, parameter name), so values do not depend on declaration order; syncs model.
  void Initialize(const Graph& graph, uint64_t seed);
  // Copies master -> model (no-op in fp32). With a sharded master, only the shard's part of
  // the model copy (the rest arrives by all-gather).
  void SyncModelFromMaster();

  // ZeRO (stage >= 1) in mixed precision: keep the fp32 master weights of flat elements
  // [begin, end) only; the 16-bit model copy stays whole. No-op in fp32 training, where the
  // master is the model. Call after the master holds the full initial values.
  void ShardMaster(int64_t begin, int64_t end);
  bool master_sharded() const { return master_end_ - master_begin_ != total_; }
  int64_t master_begin() const { return master_begin_; }
  int64_t master_end() const { return master_end_; }
  // Master element of flat index `i` (master_begin() <= i < master_end()).
  float* MasterAt(int64_t i) const { return master_.f32() + (i - master_begin_); }
  // Sets the whole model from full fp32 weights: the 16-bit copy everywhere, the master
  // where this rank keeps it.
  void SetFromFull(const float* full);
  void ZeroGrads();

  const std::vector<ParamSlot>& slots() const { return slots_; }
  const ParamSlot* Find(const std::string& name) const;
  int64_t total_elements() const { return total_; }
  int64_t num_parameters() const;  // without alignment padding
  DType model_dtype() const { return model_dtype_; }
  bool mixed() const { return model_dtype_ != DType::kF32; }

  // The fp32 master weights; unsharded only (see MasterAt for shards).
  float* master() const { return master_.f32(); }
  void* model() const { return mixed() ? model16_.data() : master_.data(); }
  void* grads() const { return grads_.data(); }
  float* grads_f32() const { return mixed() ? nullptr : grads_.f32(); }
  // Views of one parameter.
  Tensor MasterView(const ParamSlot& s) const;
  Tensor ModelView(const ParamSlot& s) const;
  Tensor GradView(const ParamSlot& s) const;
  // Slot of graph tensor `t`, or nullptr.
  const ParamSlot* ForTensor(int t) const;

 private:
  DType model_dtype_;
  std::vector<ParamSlot> slots_;
  std::map<int, int> by_tensor_;
  int64_t total_ = 0;
  int64_t master_begin_ = 0, master_end_ = 0;
  Buffer master_;
  Buffer model16_;
  Buffer grads_;
};

}  // namespace ds
