// The op interface shared by every device: attributes, the arguments a kernel receives,
// and OpDef, which describes one op (arity, shape inference, cost, what backward needs).
//
// Conventions every kernel follows:
//  - Float tensors are fp32 in compute; token ids are int32.
//  - Forward writes `out` (and fills `saved`, op-private buffers sized by OpDef::saved).
//  - Backward ACCUMULATES into each defined `grad_in[i]` (+=); an undefined grad_in[i]
//    (no data) means that gradient is not wanted. The executor zeroes gradients, so a
//    tensor consumed by several nodes (residuals, tied weights) sums its gradients, and
//    parameter gradients accumulate across micro-batches for free.
//  - Kernels allocate nothing per call beyond small stack or thread-local scratch.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/core/tensor.h"

namespace ds::kernels {

// Node attributes (int, float or string), a copy of NodeDef.attrs without protobuf.
class Attrs {
 public:
  void SetInt(const std::string& k, int64_t v) { ints_[k] = v; }
  void SetFloat(const std::string& k, double v) { floats_[k] = v; }
  void SetString(const std::string& k, std::string v) { strings_[k] = std::move(v); }
  bool Has(const std::string& k) const {
    return ints_.count(k) || floats_.count(k) || strings_.count(k);
  }
  int64_t Int(const std::string& k, int64_t dflt) const;
  double Float(const std::string& k, double dflt) const;  // ints convert
  std::string String(const std::string& k, const std::string& dflt) const;
  // All attribute names, for validation against OpDef::attr_names.
  std::vector<std::string> Names() const;
  const std::map<std::string, int64_t>& ints() const { return ints_; }
  const std::map<std::string, double>& floats() const { return floats_; }
  const std::map<std::string, std::string>& strings() const { return strings_; }

 private:
  std::map<std::string, int64_t> ints_;
  std::map<std::string, double> floats_;
  std::map<std::string, std::string> strings_;
};

// What a kernel sees for one call. Owned by the caller; views only.
struct OpArgs {
  const Attrs* attrs = nullptr;
  std::vector<Tensor> in;        // inputs, in NodeDef order
  std::vector<Tensor> out;       // outputs (forward writes them; backward reads them)
  std::vector<Tensor> saved;     // op-private buffers from OpDef::saved (forward fills)
  std::vector<Tensor> grad_out;  // backward: dL/d out
  std::vector<Tensor> grad_in;   // backward: dL/d in, accumulated (+=); undefined = skip
  uint64_t seed = 0;             // per call (node, step, micro-batch): dropout's stream
  bool training = true;          // false: dropout is the identity
  // Matrix products' input precision (CPU linear): kF32, or kBF16 for bf16 mixed precision where
  // the CPU multiplies bf16 (inputs rounded to bf16, products accumulated in fp32; executor.h).
  DType matmul = DType::kF32;
  // Bit k: grad_in[k] holds nothing yet in this backward (it would be zeroed just before), so a
  // kernel with Kernel::overwrites_fresh_grads writes it instead of adding into it. The executor
  // sets it only for such kernels, and then skips the zeroing.
  uint32_t fresh_grads = 0;
};

using KernelFn = std::function<Status(const OpArgs&)>;

// How the tensor-parallel planner (parallel/tensor/tp_graph.h) partitions a node of this op over
// the tp ranks, from the sharding of its inputs (parallelism.md C, Megatron's rules):
enum class TpRule : uint8_t {
  kNone,          // cannot be partitioned: a graph holding it trains at tensor 1 only
  kReplicated,    // every rank runs it whole on replicated inputs (norms, position embedding)
  kElementwise,   // follows its inputs: sharded in, sharded out; replicated in, replicated out
  kLinear,        // by its weight's hint: column (output features), row (input features, the
                  // partial sums all-reduced), vocab (the head's rows)
  kHeads,         // attention and rope: the ranks' query heads and the key/value heads they read
  kEmbedding,     // vocab-parallel lookup: rows outside the rank's range give zeros, all-reduced
  kCrossEntropy,  // vocab-parallel: max, sum of exponentials and the target logit all-reduced
};

// Describes one op independent of device.
// What the op's host (CPU) kernel reads and writes in bf16 in a bf16 host step (bit k: input or
// output k; Note [bf16 activations] in runtime/graph/host_bf16.h): declared with the op so the
// planner counts the activations without linking any kernels. The host kernel's own flags
// (Kernel::bf16_act_inputs ... in kernels/registry.h) must equal them; kernels/cpu's op_def_test
// holds every op to it.
struct HostBf16 {
  uint32_t act_inputs = 0;
  uint32_t act_outputs = 0;
  uint32_t grad_inputs = 0;
  uint32_t grad_outputs = 0;
  bool overwrites_fresh_grads = false;
};

struct OpDef {
  std::string name;
  int min_inputs = 1;
  int max_inputs = 1;
  int num_outputs = 1;
  std::vector<std::string> attr_names;  // accepted attributes; others are errors
  // Output specs from input specs; errors name the problem (the caller adds the node).
  std::function<Status(const Attrs&, const std::vector<TensorSpec>& in,
                       std::vector<TensorSpec>* out)>
      infer;
  // Op-private fp32 buffers forward fills for backward (e.g. layernorm mean/rstd).
  std::function<std::vector<TensorSpec>(const Attrs&, const std::vector<TensorSpec>& in)> saved;
  // Forward FLOPs (multiply-add = 2) and backward FLOPs.
  std::function<double(const Attrs&, const std::vector<TensorSpec>& in)> forward_flops;
  std::function<double(const Attrs&, const std::vector<TensorSpec>& in)> backward_flops;
  // Which inputs / outputs backward reads (bit i = index i): with `saved`, this is the
  // op's saved-activation footprint.
  uint32_t backward_reads_inputs = 0;
  uint32_t backward_reads_outputs = 0;
  // Inputs that never take a gradient (token ids, targets).
  uint32_t non_differentiable_inputs = 0;
  TpRule tp_rule = TpRule::kNone;
  // An exchange node (the all-to-alls of expert parallelism and Ulysses): the plan's collective
  // writes the output from input 0 (and input 0's gradient from the output's), possibly while
  // other nodes run, so memory planning keeps the two buffers (and the two gradients) live over
  // both their ranges.
  bool exchange = false;
  HostBf16 host_bf16;
};

// FLOPs proportional to the first input's elements: `forward` and `backward` per element.
void SetPerElementFlops(OpDef* def, double forward, double backward);

// Bytes backward keeps alive for one call: the read inputs/outputs plus `saved`.
int64_t SavedActivationBytes(const OpDef& def, const Attrs& attrs,
                             const std::vector<TensorSpec>& in, const std::vector<TensorSpec>& out);

}  // namespace ds::kernels
