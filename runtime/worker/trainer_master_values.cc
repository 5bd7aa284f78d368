// Vectors in this rank's master layout (fp32 per owned parameter element, as the optimizer's
// states are: the RLHF actor's moving average) as whole weights, and back: gathered into the whole
// flat parameters on every rank, written as safetensors with the graph's names, read back.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

// Only layouts whose flat parameters are the whole model's: no tensor, expert or pipeline
// parallelism.
Status Trainer::CheckWholeFlat(const char* what) const {
  if (part_->sliced || part_->stage >= 0 || device_states_ || swapper_)
    return UnimplementedError(std::string(what) +
                              " in the master layout needs the whole model's parameters on each "
                              "rank's host: no tensor, expert or pipeline parallelism, no device "
                              "or NVMe model states");
  return OkStatus();
}

StatusOr<std::vector<float>> Trainer::MasterLayoutToFull(const std::vector<float>& values) {
  DS_RETURN_IF_ERROR(CheckWholeFlat("a vector"));
  const bool sharded = params_->master_sharded();
  const size_t want = sharded ? params_->shard_elements() : params_->total_elements();
  if (values.size() != want)
    return InvalidArgumentError("a master-layout vector of " + std::to_string(values.size()) +
                                " elements; this rank's master holds " + std::to_string(want));
  if (!sharded) return values;
  std::vector<float> full(params_->total_elements(), 0.0f);
  for (const zero::ShardSegment& s : params_->segments())
    std::copy_n(values.begin() + s.shard_offset, s.count, full.begin() + s.flat_begin);
  DS_RETURN_IF_ERROR(host_comm_->AllReduce(parallel::BufferView(full.data(), full.size()),
                                           parallel::ReduceOp::kSum));  // each element owned once
  return full;
}

std::vector<float> Trainer::FullToMasterLayout(const std::vector<float>& full) const {
  if (!params_->master_sharded()) return full;
  std::vector<float> out(params_->shard_elements(), 0.0f);
  for (const zero::ShardSegment& s : params_->segments())
    std::copy_n(full.begin() + s.flat_begin, s.count, out.begin() + s.shard_offset);
  return out;
}

Status Trainer::RankZeroWrites(const std::string& path, const std::function<Status()>& write) {
  const Status written = world_rank_ == 0 ? write() : OkStatus();
  int32_t failed = written.ok() ? 0 : 1;
  DS_RETURN_IF_ERROR(
      world_host_comm_->AllReduce(parallel::BufferView(&failed, 1), parallel::ReduceOp::kMax));
  if (failed && written.ok()) return InternalError(path + ": rank 0 could not write it");
  return written;
}

Status Trainer::WriteFullWeights(const std::vector<float>& full, const std::string& path) {
  if (full.size() != static_cast<size_t>(params_->total_elements()))
    return InvalidArgumentError(path + ": " + std::to_string(full.size()) + " values for " +
                                std::to_string(params_->total_elements()) + " parameters");
  return RankZeroWrites(path, [&]() {
    std::vector<ckpt::NamedTensor> tensors;
    for (const zero::ParamSlot& s : params_->slots())
      tensors.push_back(
          {s.name, Tensor(const_cast<float*>(full.data() + s.offset), s.shape, DType::kF32)});
    return ckpt::WriteSafetensors(path, tensors,
                                  {{"format", "ds-runtime"}, {"family", graph_.family}})
        .status();
  });
}

StatusOr<std::vector<float>> Trainer::ReadFullWeights(const std::string& path) const {
  DS_RETURN_IF_ERROR(CheckWholeFlat("reading whole weights"));
  DS_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file, ckpt::SafetensorsFile::Open(path));
  std::vector<float> full(params_->total_elements(), 0.0f);
  for (const zero::ParamSlot& s : params_->slots()) {
    auto t = file.Get(s.name);
    if (!t.ok()) return DataLossError(path + ": tensor \"" + s.name + "\" is missing");
    if (t->shape() != s.shape || t->dtype() != DType::kF32)
      return DataLossError(path + ": tensor \"" + s.name + "\" is " + DTypeName(t->dtype()) + " " +
                           ShapeToString(t->shape()) + "; the model's is f32 " +
                           ShapeToString(s.shape));
    std::copy_n(static_cast<const float*>(t->data()), s.numel, full.begin() + s.offset);
  }
  return full;
}

}  // namespace ds::worker
