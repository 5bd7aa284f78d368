// ParamStore: every trainable parameter of one rank in flat, contiguous buffers.
//
//   master  fp32, what the optimizer updates (the "fp32 master weights")
//   model   the copy forward/backward read: the master itself in fp32 training,
//           a separate bf16/fp16 buffer in mixed precision
//   grads   gradients in the model dtype, accumulated across micro-batches
//
// Flat buffers make ZeRO partitioning a matter of slicing offsets, and let the optimizer,
// norm and overflow checks run as single passes. Each parameter starts at an element offset
// aligned to 16 (64 bytes). Not thread-safe; owned by the worker.
//
// ZeRO (Shard()): this rank owns a list of flat segments, laid end to end in its "shard
// space" (ShardLayout, from the step plan's partition). What is partitioned:
//   stage >= 1, mixed precision   the fp32 master weights (and so the optimizer state)
//   stage >= 2                    the reduced gradients: a model-dtype gradient shard; the
//                                 flat gradient buffer is sparse and each bucket's range
//                                 is released once reduced
//   stage 3                       the model-dtype parameters: a parameter shard (the fp32
//                                 master shard itself in fp32 training), and the flat model
//                                 buffer is sparse: units are gathered into it before use
//                                 and released after (ReleaseModel)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/graph/graph.h"

namespace ds::zero {

// A flat element range [flat_begin, flat_begin + count) this rank owns, stored at
// [shard_offset, shard_offset + count) of its shard buffers.
struct ShardSegment {
  int64_t flat_begin = 0;
  int64_t count = 0;
  int64_t shard_offset = 0;
};

// Stages 2-3 (zero/plan/bucket_arena.h): the gradients of flat elements
// [flat_begin, flat_begin + count) live at [arena_offset, arena_offset + count) of one
// reusable bucket arena.
struct GradBlock {
  int64_t flat_begin = 0;
  int64_t count = 0;
  int64_t arena_offset = 0;
};

struct ShardLayout {
  std::vector<ShardSegment> segments;  // ascending flat_begin, disjoint
  int64_t shard_elements = 0;          // size of the shard buffers (>= the counts' sum)
  bool partition_grads = false;        // stages 2 and 3
  bool partition_params = false;       // stage 3
  // partition_grads: where unreduced gradients live. Empty: a sparse flat buffer whose
  // ranges are handed back once reduced; else these blocks (ascending flat_begin, covering
  // every parameter) of an arena of grad_arena_elements, zeroed (not handed back) once reduced.
  std::vector<GradBlock> grad_blocks;
  int64_t grad_arena_elements = 0;
  // offload_optimizer nvme: the optimizer states (and, with swap_master, the separate fp32
  // master) live in the swap file; their buffers here are sparse staging for initialization
  // and checkpoints (zero/optimizer_swapper.h).
  bool swap_states = false;
  bool swap_master = false;
  bool swap_params = false;  // offload_param nvme: the 16-bit parameter shard, the same way
};

struct ParamSlot {
  std::string name;
  int tensor = -1;  // graph tensor index
  Shape shape;
  int64_t offset = 0;  // element offset into the flat buffers
  int64_t numel = 0;
  bool decay = true;  // weight decay applies (matrices and embeddings, not biases/norms; an
                      // expert tensor by each expert's shape)
};

// Tensor parallelism: parameter `slot` (graph parameter order) is a slice of a tensor of
// full_numel(slot) values; take(slot, full, local) copies the slice out of the full values.
struct InitSlicer {
  std::function<int64_t(int slot)> full_numel;
  std::function<void(int slot, const float* full, float* local)> take;
  // The full tensor's [begin, end) element ranges `take` reads (a reader can skip the rest);
  // unset: all of them.
  std::function<std::vector<std::pair<int64_t, int64_t>>(int slot)> needed;
};

class ParamStore {
 public:
  // Lays out every param of `graph`; `model_dtype` is f32, bf16 or f16. `sparse_host`: the
  // model states live on a device (zero/device_states.h) and these buffers are
  // their host copies, used at initialization, checkpoints and exports: every buffer is
  // sparse (no memory until touched) and ReleaseHost() hands the pages back between uses.
  // `role` kFrozen: the store of the graph's frozen weights instead (LoRA's base model), read
  // by forward and backward and never trained: no gradient buffer (grads() is null), never
  // sharded; fill it as parameters are filled (Initialize, Fill) and read ModelView.
  ParamStore(const Graph& graph, DType model_dtype, bool sparse_host = false,
             TensorRole role = TensorRole::kParam);

  // Fills the master weights from each param's initializer with a generator seeded by
  // (seed, parameter name), so values do not depend on declaration order; syncs model.
  // `done`, when given, is called after each parameter with the flat end of what is set so far
  // and that parameter's elements (the NVMe swapper stores finished sub-groups meanwhile).
  // `slicer`, when given (tensor parallelism), draws each parameter's full tensor from the same
  // stream and keeps the rank's slice, so every tp degree starts from the same full weights.
  void Initialize(const Graph& graph, uint64_t seed,
                  const std::function<void(int64_t flat_end, int64_t numel)>& done = {},
                  const InitSlicer* slicer = nullptr);
  // Sets every parameter from `source`, one at a time as Initialize draws them (param_fill.cc):
  // source(slot, dst, whole, needed, first) writes slot's tensor (`whole` elements: the full
  // tensor under a slicer, which then keeps the rank's part and says which of the full tensor's
  // elements it reads) as fp32, at least its elements in `needed` (sorted, disjoint [begin,
  // end) ranges of the tensor; empty: all of them), element i at dst[i - first]. Given
  // `persistent` (the flat ranges of stage 3's units that stay gathered) with partitioned
  // parameters, a rank reads and stores only what it keeps, its owned segments and those
  // ranges, asked for in chunks of one range each (`first` its begin) and read straight into
  // the master; the rest of the flat copy is the caller's to release. No full-model buffer is
  // made: at most a scratch of the largest parameter. `done` as Initialize's. The first error
  // stops it.
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  static constexpr int64_t kFillChunk = int64_t{1} << 22;  // values per stage-3 Fill call
  using ParamSource = std::function<Status(int slot, float* dst, int64_t whole,
                                           const Ranges& needed, int64_t first)>;
  // What Initialize draws for `slot` (its whole tensor of `whole` elements).
  void DrawInitial(const Graph& graph, uint64_t seed, int slot, float* dst, int64_t whole) const;
  Status Fill(const ParamSource& source,
              const std::function<void(int64_t flat_end, int64_t numel)>& done = {},
              const InitSlicer* slicer = nullptr, const Ranges* persistent = nullptr);
  // What Fill asks `source` for, for `slot` with the same slicer and persistent ranges: the
  // needed element ranges of the tensor it passes (empty: all of them; {0, 0}: none), so a
  // reader can fetch the bytes ahead in the order Fill will want them.
  Ranges NeededRanges(int slot, const InitSlicer* slicer, const Ranges* persistent) const;
  // The elements of `slot` this rank keeps when parameters are partitioned (Fill's `needed`):
  // its owned segments (unless !owned) and the `persistent` flat ranges, merged.
  Ranges KeptRanges(int slot, const Ranges& persistent, bool owned = true) const;
  // The shard position below which every owned element has a flat index < flat_end.
  int64_t ShardBound(int64_t flat_end) const;
  // Copies master -> model copy where this rank owns it (no-op when the master is the
  // model): the flat 16-bit copy (stages 0-2) or the 16-bit parameter shard (stage 3). The
  // rest of the flat copy arrives by all-gather.
  void SyncModelFromMaster();

  // ZeRO: keeps this rank's part as `layout` says (see the file comment). Call once, before
  // Initialize / SetFromFull (the buffers it makes start as zeros; a layout that keeps
  // everything changes nothing and may come later) and before anything takes views of the flat
  // buffers (executor, optimizer). Without a call, the rank owns everything as one segment.
  void Shard(const ShardLayout& layout);
  bool master_sharded() const { return master_sharded_; }
  bool grads_partitioned() const { return layout_.partition_grads; }
  bool params_partitioned() const { return layout_.partition_params; }
  bool states_swapped() const { return states_swapped_; }
  // Hands back the pages of master shard positions [pos, pos + n) (a sparse master; a dense one
  // is zeroed): the swapper moved them to the swap file.
  void ReleaseMasterRange(int64_t pos, int64_t n);
  // The same for the 16-bit parameter shard (offload_param nvme).
  void ReleaseParamShardRange(int64_t pos, int64_t n);
  bool params_swapped() const { return layout_.swap_params; }
  const std::vector<ShardSegment>& segments() const { return layout_.segments; }
  int64_t shard_elements() const { return layout_.shard_elements; }
  // Shard position of owned flat element `i`.
  int64_t ShardPos(int64_t i) const;
  // Master element of flat index `i` (owned when the master is sharded).
  float* MasterAt(int64_t i) const { return master_.f32() + (master_sharded_ ? ShardPos(i) : i); }
  // The fp32 master in shard space (sharded) or flat (not), for checkpoints.
  float* master_data() const { return master_.f32(); }
  // Where the optimizer writes the updated model-dtype value of owned element `i`; nullptr
  // when the master itself is what forward reads (fp32 stages 0-2) or the parameter shard
  // (fp32 stage 3).
  void* ModelOutAt(int64_t i) const;
  // The gradient the optimizer reads for owned element `i` (model dtype): the gradient
  // shard (stages 2-3) or the flat buffer.
  const void* GradAt(int64_t i) const;
  // Stage 3: this rank's model-dtype parameters in shard space (the source of gathers).
  void* param_shard() const;
  // Stages 2-3: this rank's reduced gradients in shard space (model dtype).
  void* grad_shard() const { return grad_shard_.data(); }
  // Sparse flat buffers: hands back flat elements [offset, offset + count) (whole pages go
  // back to the system, the partial ones at the ends are zeroed; all read as zero after):
  // stage 3 parameters after use, stages 2-3 gradients once reduced.
  void ReleaseModel(int64_t offset, int64_t count);
  void ReleaseGrads(int64_t offset, int64_t count);
  // Sets the whole model from full fp32 weights: the model copy everywhere (stage 3: the
  // caller releases what is not persistent), the master and parameter shard where owned.
  void SetFromFull(const float* full);
  // Zeroes gradients: the flat buffer (released when sparse) and the gradient shard.
  void ZeroGrads();
  // sparse_host: hands back every buffer's pages; everything reads zero until written again.
  void ReleaseHost();
  bool sparse_host() const { return sparse_host_; }
  // Counts changes of the model copy forward reads (initialization, loads, optimizer steps,
  // all-gathers): an executor that keeps the parameters on a device re-uploads them when it
  // moved. Whoever writes the model copy directly calls MarkModelChanged().
  uint64_t version() const { return version_; }
  void MarkModelChanged() { ++version_; }
  // Resident bytes per role, for memory profiles: "params" (the model copy; at stage 3 the
  // parameter shard and the flat ranges in `persistent`), "gathered" (stage 3: the rest of the
  // flat parameters), "grads" (the flat gradients, or the gradient shard), "grad buckets"
  // (stages 2-3: flat gradients not yet reduced) and "master" (a separate fp32 master).
  std::vector<std::pair<std::string, size_t>> ResidentBytes(
      const std::vector<std::pair<int64_t, int64_t>>& persistent = {}) const;

  const std::vector<ParamSlot>& slots() const { return slots_; }
  const ParamSlot* Find(const std::string& name) const;
  int64_t total_elements() const { return total_; }
  int64_t num_parameters() const;  // without alignment padding
  DType model_dtype() const { return model_dtype_; }
  bool mixed() const { return model_dtype_ != DType::kF32; }

  // The fp32 master weights; unsharded only (see MasterAt for shards).
  float* master() const { return master_sharded_ ? nullptr : master_.f32(); }
  // The flat model-dtype buffer forward and backward read.
  void* model() const { return model_.data() ? model_.data() : master_.data(); }
  // The flat gradient buffer; not with a bucket arena (use FlatGradPtr).
  void* grads() const { return grad_blocks_.empty() ? grads_.data() : nullptr; }
  float* grads_f32() const { return mixed() || !grad_blocks_.empty() ? nullptr : grads_.f32(); }
  // The model-dtype gradient of flat element `i`; the elements of one parameter (one bucket,
  // with a bucket arena) are contiguous from there.
  void* FlatGradPtr(int64_t i) const;
  // Where FlatGradPtr points into: the flat gradients, or the bucket arena, of
  // grad_storage_elements() model-dtype elements (a device copy of the gradients mirrors it).
  const void* grad_storage() const { return grads_.data(); }
  int64_t grad_storage_elements() const {
    return grad_blocks_.empty() ? total_ : layout_.grad_arena_elements;
  }
  // Views of one parameter.
  Tensor MasterView(const ParamSlot& s) const;
  Tensor ModelView(const ParamSlot& s) const;
  Tensor GradView(const ParamSlot& s) const;
  // Slot of graph tensor `t`, or nullptr.
  const ParamSlot* ForTensor(int t) const;
  // Parameter tensor `t` of `graph`, which may be another graph than the store was laid out
  // from (a pipeline rank's chunk over the store of all its chunks): by index when the names
  // agree, else by name; null when the store has no such parameter.
  const ParamSlot* ForParam(const Graph& graph, int t) const;

 private:
  // Sets flat elements [offset, offset + count) from fp32 `values` everywhere they live.
  // `flat_copy` false: the master and the parameter shard only, not the flat model copy.
  void SetRange(int64_t offset, int64_t count, const float* values, bool flat_copy = true);
  // The flat model copy of [offset, offset + count) only (stage 3's persistent units).
  void StoreFlatCopy(int64_t offset, int64_t count, const float* values);
  // The parameter shard's [pos, pos + count) from fp32 `values` (stage 3, mixed), else nothing.
  void StoreShard(int64_t pos, int64_t count, const float* values);
  // The master of flat [offset, offset + count) when one owned segment holds all of it, else
  // null.
  float* OwnedMaster(int64_t offset, int64_t count) const;
  // Fill's stage-3 path for one slot without a slicer (param_fill.cc); `chunk` holds one chunk.
  Status FillKept(int slot, const ParamSource& source, const Ranges& persistent, float* chunk);
  // A zeroed buffer: sparse with sparse_host_.
  Buffer Alloc(size_t bytes) const {
    return sparse_host_ ? Buffer::AllocateSparse(bytes) : Buffer::Allocate(bytes);
  }

  DType model_dtype_;
  bool sparse_host_ = false;
  std::vector<ParamSlot> slots_;
  std::map<int, int> by_tensor_;
  int64_t total_ = 0;
  ShardLayout layout_;
  bool master_sharded_ = false;
  bool states_swapped_ = false;
  uint64_t version_ = 0;
  Buffer master_;       // fp32: flat, or shard space when sharded
  Buffer model_;        // flat model copy when it is not the master (mixed, or fp32 stage 3)
  Buffer param_shard_;  // stage 3 mixed precision: model-dtype parameter shard
  Buffer grads_;        // flat, model dtype; or the bucket arena (grad_blocks_)
  std::vector<GradBlock> grad_blocks_;
  Buffer grad_shard_;  // stages 2-3: model dtype, shard space
};

}  // namespace ds::zero
