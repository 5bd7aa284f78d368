// The Trainer's inputs: where training micro-batches come from (data.train's loader or a batch
// source the caller sets) and the graph's per-token inputs (kState tensors) it owns.
#include <algorithm>
#include <string>

#include "parallel/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/graph/validate.h"
#include "runtime/worker/train_batches.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

// The token file's loader (data.train), the default source of the training micro-batches.
Status Trainer::OpenTrainData(int64_t micro) {
  data::DataLoaderOptions d;
  d.path = config_.data.train;
  d.format = config_.data.format;
  d.batch = micro;
  d.seq = seq_;
  d.shuffle = config_.data.shuffle;
  d.seed = config_.data.seed;
  // Ulysses: the sp ranks of a group read the same micro-batches (each its chunk of them).
  const int sp = std::max(1, plan_->topology().sp());
  d.dp_rank = comm_->rank() / sp;
  d.dp_size = comm_->size() / sp;
  DS_ASSIGN_OR_RETURN(train_data_, data::DataLoader::Open(d));
  batches_->source = train_data_.get();
  return OkStatus();
}

// The graph's kState tensors (per-token inputs such as PPO's advantages): buffers of this rank,
// [micro, seq], the caller fills before each micro-batch (StateInput).
Status Trainer::BindStateInputs(const Graph& g, int64_t micro, exec::ExecutorOptions* eo) {
  std::vector<int> state;
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (g.tensors[t].role == TensorRole::kState) state.push_back(static_cast<int>(t));
  if (state.empty()) return OkStatus();
  if (!pipe_chunks_.empty() || device_memory_)
    return UnimplementedError("the graph's per-token inputs (\"" + g.tensors[state[0]].name +
                              "\") are bound on one stage on the host only: no pipeline, no "
                              "device.type cuda yet");
  DS_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs,
                      InferTensorSpecs(g, {{"batch", micro}, {"seq", seq_}}, g.name));
  for (int t : state) {
    const TensorSpec& spec = specs[t];
    if (DTypeSize(spec.dtype) != 4)
      return InvalidArgumentError("per-token input \"" + g.tensors[t].name + "\" is " +
                                  DTypeName(spec.dtype) + "; fp32 or int32 only");
    std::vector<float>& buf = state_inputs_[g.tensors[t].name];
    buf.assign(spec.numel(), 0.0f);
    eo->state[g.tensors[t].name] = Tensor(buf.data(), spec.shape, spec.dtype);
  }
  state_views_ = eo->state;
  return OkStatus();
}

StatusOr<Tensor> Trainer::StateInput(const std::string& name) const {
  auto it = state_views_.find(name);
  if (it == state_views_.end())
    return NotFoundError(config_.source + ": the model's graph has no per-token input \"" + name +
                         "\"");
  return it->second;
}

void Trainer::SetBatchSource(data::BatchSource* source) {
  batches_->source = source ? source : train_data_.get();
}

}  // namespace ds::worker
