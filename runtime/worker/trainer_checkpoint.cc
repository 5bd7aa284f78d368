// Trainer checkpoints: what a resume needs to continue the exact same run.
//
//   model.safetensors      fp32 master weights, graph parameter names
//   optimizer.safetensors  exp_avg/<name>, exp_avg_sq/<name> (Adam) or momentum_buffer/<name>
//   state.json             engine (step, seed, precision), scheduler, loss_scaler, data, rng
//
// In mixed precision the 16-bit model copy is the rounded master, so it is rebuilt on load
// instead of stored. Stage 0 or one rank: rank 0 writes the files above with whole tensors.
// ZeRO (stage >= 1, dp > 1), tensor or pipeline parallelism: every rank writes
// zero_shard_rank_<r>.safetensors with its slices of the master and the optimizer states, as
// ranges of the whole parameters (Note [Sharded checkpoints]); rank 0 adds
// state.json, the manifest and, when it holds the whole fp32 master (stages 1-2 in fp32),
// model.safetensors. Loading reads each rank's part from either layout, at any world size
// and stage (Note [Loading at any topology]). Gradients are zero between steps and are not
// saved. Dropout streams are a pure function of (seed, step, micro-batch, node): the RNG
// state is the seed and step.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/json.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/ckpt/zero_shards.h"
#include "runtime/data/data_loader.h"
#include "runtime/graph/lora.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/checkpoint_slices.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/trainer.h"
#include "zero/device_states.h"
#include "zero/optimizer.h"
#include "zero/optimizer_swapper.h"
#include "zero/shard_layout.h"

namespace ds::worker {
namespace {

std::string EngineState(int64_t step, int64_t opt_step, uint64_t seed, DType dtype) {
  Json j = Json::Object();
  j.Set("step", Json::Int(step));
  j.Set("optimizer_step", Json::Int(opt_step));
  j.Set("seed", Json::Int(static_cast<int64_t>(seed)));
  j.Set("precision", Json::String(DTypeName(dtype)));
  return j.Dump();
}

// Copies a checkpoint tensor into an fp32 destination of the same shape.
Status CopyInto(const Tensor& src, const Tensor& dst, const std::string& what) {
  if (src.shape() != dst.shape())
    return DataLossError(what + " has shape " + ShapeToString(src.shape()) +
                         ", the model expects " + ShapeToString(dst.shape()));
  const int64_t n = dst.numel();
  switch (src.dtype()) {
    case DType::kF32:
      std::memcpy(dst.f32(), src.data(), n * 4);
      break;
    case DType::kBF16:
      ConvertBf16ToF32(static_cast<const uint16_t*>(src.data()), dst.f32(), n);
      break;
    case DType::kF16:
      ConvertF16ToF32(static_cast<const uint16_t*>(src.data()), dst.f32(), n);
      break;
    default:
      return DataLossError(what + " has non-float dtype " + std::string(DTypeName(src.dtype())));
  }
  return OkStatus();
}

}  // namespace

Status Trainer::ExportWeights(const std::string& path) {
  if (config_.model.lora.enabled) return ExportMerged(path);
  if (part_->sliced || part_->stage >= 0)
    return FailedPreconditionError(
        "ExportWeights holds one tensor-, expert- or pipeline-parallel rank's part; save a "
        "checkpoint and use ds-ckpt consolidate");
  if (params_->master_sharded()) return ExportGathered(path);
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  if (swapper_) DS_RETURN_IF_ERROR(swapper_->Load());
  std::vector<ckpt::NamedTensor> tensors;
  for (const zero::ParamSlot& s : params_->slots())
    tensors.push_back({s.name, params_->MasterView(s)});
  auto r =
      ckpt::WriteSafetensors(path, tensors, {{"format", "ds-runtime"}, {"family", graph_.family}});
  if (device_states_) device_states_->ReleaseHostCopies();
  if (swapper_) swapper_->ReleaseMemory();
  return r.status();
}

namespace {

// Note [Sharded checkpoints]
// With ZeRO (stage >= 1, dp > 1) no rank gathers anything: every rank writes the slices of
// its own segments (the fp32 master, "master", and every optimizer state) into
// zero_shard_rank_<r>.safetensors inside rank 0's temporary step directory, straight from
// its buffers (views, no copies). Rank 0 then needs each file's size and CRC and each
// slice's CRC for the manifest. Every rank can compute every rank's slice list from the plan
// (LayoutFor), so one all-gather of fixed-size int32 rows [ok, file crc, bytes lo, bytes hi,
// slice crcs...] carries all of it: no rank reads another's file, and rank 0's extra memory
// is W x (4 + max slices) integers. Collectives, in order, on every rank:
//   1. all-reduce max: rank 0 created the temporary directory (else everyone stops)
//   2. all-gather: the rows above (a failed writer reports ok = 0)
//   3. all-reduce max: rank 0 committed (rename, `latest`), so every rank returns the same
//      status and no rank returns before the checkpoint is visible.
// All ranks see the same filesystem (DeepSpeed assumes the same). The slices: checkpoint_slices.h.
std::vector<std::string> StateNames(zero::Optimizer& optimizer) {
  std::vector<std::string> names = {ckpt::kMasterState};
  for (const zero::Optimizer::StateBuffer& b : optimizer.state()) names.push_back(b.name);
  return names;
}

// Where owned flat elements [flat, flat + n) of a shard-space buffer are, or nullptr when they
// are not contiguous in shard space (they span segments).
const float* ShardSpan(const zero::ParamStore& ps, const float* base, int64_t flat, int64_t n) {
  for (const zero::ShardSegment& g : ps.segments())
    if (flat >= g.flat_begin && flat + n <= g.flat_begin + g.count)
      return base + g.shard_offset + (flat - g.flat_begin);
  return nullptr;
}

// A rank's row of the sharded save's all-gather: written (1) or not (0), the file's CRC-32C and
// size (two words), then each slice's CRC-32C; `row` words.
std::vector<int32_t> ShardRow(const StatusOr<ckpt::SafetensorsWriteResult>& written, size_t row) {
  std::vector<int32_t> mine(row, 0);
  if (!written.ok()) return mine;
  mine[0] = 1;
  mine[1] = static_cast<int32_t>(written->file_crc32c);
  mine[2] = static_cast<int32_t>(written->file_bytes & 0xffffffffu);
  mine[3] = static_cast<int32_t>(written->file_bytes >> 32);
  for (size_t i = 0; i < written->tensor_crc32c.size(); ++i)
    mine[4 + i] = static_cast<int32_t>(written->tensor_crc32c[i]);
  return mine;
}

// Rank 0: the manifest's files and slice records from every rank's row (ShardRow), the
// records by parameter (flat), then state, then position, so a reader can stream one
// parameter at a time; the ranks that wrote nothing in `failed`.
ckpt::WrittenFiles CollectShardFiles(const std::vector<std::vector<OwnedSlice>>& all,
                                     const std::vector<std::string>& states,
                                     const std::vector<int32_t>& rows, size_t row,
                                     std::vector<int>* failed) {
  auto u32 = [](int32_t v) { return static_cast<uint32_t>(v); };
  ckpt::WrittenFiles files;
  std::vector<std::pair<std::tuple<int64_t, size_t, int64_t>, ckpt::TensorRecord>> records;
  for (int k = 0; k < static_cast<int>(all.size()); ++k) {
    const int32_t* r = rows.data() + k * row;
    if (r[0] != 1) {
      failed->push_back(k);
      continue;
    }
    files.files.push_back(
        {ckpt::ZeroShardFileName(k), (uint64_t{u32(r[3])} << 32) | u32(r[2]), u32(r[1])});
    for (size_t i = 0; i < all[k].size(); ++i) {
      const OwnedSlice& o = all[k][i];
      const size_t si = std::find(states.begin(), states.end(), o.desc.state) - states.begin();
      records.push_back(
          {{o.param_flat, si, o.desc.begin}, ckpt::SliceRecord(k, o.desc, u32(r[4 + i]))});
    }
  }
  std::sort(records.begin(), records.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [key, rec] : records) files.tensors.push_back(std::move(rec));
  return files;
}

// Aborted naming the ranks that wrote no shard file, OK when none failed.
Status FailedWriters(const std::vector<int>& failed, int64_t step) {
  if (failed.empty()) return OkStatus();
  std::string list;
  for (int k : failed) list += (list.empty() ? "" : ", ") + std::to_string(k);
  return AbortedError("checkpoint step " + std::to_string(step) + ": rank(s) " + list +
                      " failed to write their shard file (see their logs)");
}

}  // namespace

StatusOr<bool> AnyRank(parallel::Communicator* comm, bool flag) {
  int32_t v = flag ? 1 : 0;
  DS_RETURN_IF_ERROR(comm->AllReduce(parallel::BufferView(&v, 1), parallel::ReduceOp::kMax));
  return v != 0;
}

// ZeRO over ranks: the fp32 model copy forward reads is whole (stage 3 after gathering it), so
// rank 0 writes it; every rank takes part and returns rank 0's outcome.
Status Trainer::ExportGathered(const std::string& path) {
  if (params_->mixed() || device_states_ || swapper_)
    return FailedPreconditionError("ExportWeights of a sharded " +
                                   std::string(params_->mixed() ? "16-bit" : "offloaded") +
                                   " model: save a checkpoint and use ds-ckpt consolidate");
  DS_RETURN_IF_ERROR(GatherParams());
  Status written;
  if (world_rank_ == 0) {
    const float* model = static_cast<const float*>(params_->model());
    std::vector<ckpt::NamedTensor> tensors;
    for (const zero::ParamSlot& s : params_->slots())
      tensors.push_back(
          {s.name, Tensor(const_cast<float*>(model + s.offset), s.shape, DType::kF32)});
    written =
        ckpt::WriteSafetensors(path, tensors, {{"format", "ds-runtime"}, {"family", graph_.family}})
            .status();
  }
  ReleaseParams();
  DS_ASSIGN_OR_RETURN(bool failed, AnyRank(world_host_comm_, !written.ok()));
  if (failed && written.ok()) return InternalError(path + ": rank 0 could not write the weights");
  return written;
}

// Stage 0 or one rank: rank 0 writes whole tensors (views into its buffers where a parameter is
// contiguous, else a copy of that parameter).
Status Trainer::SaveConsolidated(const ckpt::CheckpointContents& base) {
  if (comm_->rank() != 0) return OkStatus();
  ckpt::CheckpointContents c = base;
  std::deque<std::vector<float>> copies;
  auto view = [&](const float* shard_base, bool shard_space, const zero::ParamSlot& s) {
    const float* p =
        shard_space ? ShardSpan(*params_, shard_base, s.offset, s.numel) : shard_base + s.offset;
    if (p == nullptr) {
      copies.emplace_back(s.numel);
      for (int64_t i = 0; i < s.numel; ++i)
        copies.back()[i] = shard_base[params_->ShardPos(s.offset + i)];
      p = copies.back().data();
    }
    return Tensor(const_cast<float*>(p), s.shape, DType::kF32);
  };
  for (const zero::ParamSlot& s : params_->slots())
    c.model.push_back({s.name, view(params_->master_data(), params_->master_sharded(), s)});
  for (const zero::Optimizer::StateBuffer& b : optimizer_->state())
    for (const zero::ParamSlot& s : params_->slots())
      c.optimizer.push_back({b.name + "/" + s.name, view(b.data, true, s)});
  return ckpt::SaveCheckpoint(config_.checkpoint.dir, c, config_.checkpoint.keep_last);
}

// ZeRO, dp > 1: every rank writes its own shard file. See Note [Sharded checkpoints].
Status Trainer::SaveSharded(const ckpt::CheckpointContents& base) {
  const std::string& root = config_.checkpoint.dir;
  parallel::Communicator* comm = world_host_comm_;
  const int rank = world_rank_, world = comm->size();
  Status begun = rank == 0 ? ckpt::BeginCheckpoint(root, step_) : OkStatus();
  DS_ASSIGN_OR_RETURN(bool begin_failed, AnyRank(comm, !begun.ok()));
  if (begin_failed)
    return rank == 0 ? begun : AbortedError("checkpoint: rank 0 could not start the save");

  const std::vector<std::string> states = StateNames(*optimizer_);
  DS_ASSIGN_OR_RETURN(std::vector<std::vector<OwnedSlice>> all, SliceLists(states));
  size_t max_slices = 0;
  for (const std::vector<OwnedSlice>& list : all) max_slices = std::max(max_slices, list.size());
  // This rank's file, straight from its buffers.
  std::vector<float*> bases = {params_->master_data()};
  for (const zero::Optimizer::StateBuffer& b : optimizer_->state()) bases.push_back(b.data);
  std::vector<ckpt::SliceDesc> descs;
  std::vector<const float*> data;
  for (const OwnedSlice& o : all[rank]) {
    descs.push_back(o.desc);
    const size_t si = std::find(states.begin(), states.end(), o.desc.state) - states.begin();
    data.push_back(si == 0 ? params_->MasterAt(o.flat) : bases[si] + params_->ShardPos(o.flat));
  }
  auto written = ckpt::WriteZeroShardFile(ckpt::TempStepDir(root, step_),
                                          {rank, world, config_.zero.stage, step_}, descs, data);
  if (!written.ok()) DS_LOG_ERROR("ckpt", "rank {}: {}", rank, written.status().ToString());
  const size_t row = 4 + max_slices;
  std::vector<int32_t> mine = ShardRow(written, row), rows(row * world, 0);
  DS_RETURN_IF_ERROR(
      comm->AllGather(parallel::BufferView(mine.data(), static_cast<int64_t>(row)),
                      parallel::BufferView(rows.data(), static_cast<int64_t>(row * world))));
  Status committed;
  if (rank == 0) {
    std::vector<int> failed;
    const ckpt::WrittenFiles files = CollectShardFiles(all, states, rows, row, &failed);
    committed = FailedWriters(failed, step_);
    if (!committed.ok()) {
      ckpt::RemoveTree(ckpt::TempStepDir(root, step_)).IgnoreError();  // the next save removes it
    } else {
      ckpt::CheckpointContents c = base;
      // Stages 1-2 in fp32: every rank holds the whole master; keep the weights in one file
      // (not a tp rank's or a pipeline stage's part of them).
      if (!params_->master_sharded() && !part_->sliced && part_->stage < 0)
        for (const zero::ParamSlot& s : params_->slots())
          c.model.push_back({s.name, params_->MasterView(s)});
      committed = ckpt::CommitCheckpoint(root, c, files, config_.checkpoint.keep_last);
    }
  }
  DS_ASSIGN_OR_RETURN(bool commit_failed, AnyRank(comm, !committed.ok()));
  if (!written.ok()) return written.status();
  if (commit_failed)
    return rank == 0
               ? committed
               : AbortedError("checkpoint: rank 0 failed to commit step " + std::to_string(step_));
  return OkStatus();
}

Status Trainer::SaveCheckpoint() {
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  // Every rank stages, or none saves (the sharded save is collective; every rank of a plan that
  // swaps has a swapper).
  const Status staged = StageSwappedStates();
  bool stage_failed = false;
  if (swapper_) {
    DS_ASSIGN_OR_RETURN(stage_failed, AnyRank(world_host_comm_, !staged.ok()));
  }
  if (stage_failed) {
    if (swapper_) swapper_->ReleaseMemory();
    if (device_states_) device_states_->ReleaseHostCopies();
    return staged.ok() ? AbortedError("checkpoint: another rank could not stage its NVMe states")
                       : staged;
  }
  ckpt::CheckpointContents c;
  c.step = step_;
  c.state["engine"] = EngineState(step_, optimizer_->step(), config_.seed, params_->model_dtype());
  c.state["scheduler"] = "{\"last_batch_iteration\": " + std::to_string(step_ - 1) + "}";
  c.state["loss_scaler"] = scaler_->SaveState();
  c.state["data"] = (train_data_ ? train_data_->state() : data::DataLoaderState()).ToJson();
  c.state["rng"] = "{\"seed\": " + std::to_string(config_.seed) +
                   ", \"next_step\": " + std::to_string(step_) + "}";
  c.info["family"] = graph_.family;
  c.info["graph"] = graph_.name;
  c.info["world_size"] = std::to_string(world_host_comm_->size());
  c.info["tensor_parallel"] = std::to_string(plan_->topology().tp());
  c.info["pipeline_parallel"] = std::to_string(plan_->topology().pp());
  c.info["zero_stage"] = std::to_string(config_.zero.stage);
  c.info["precision"] = DTypeName(params_->model_dtype());
  AddFrozen(&c);  // LoRA's base weights, whole, by rank 0
  // Tensor and pipeline parallelism: every rank writes its parts as slices of the whole
  // parameters.
  const bool sharded =
      (config_.zero.stage >= 1 && comm_->size() > 1) || part_->sliced || part_->stage >= 0;
  if (sharded) c.info["layout"] = ckpt::kZeroShardedLayout;
  Status saved = sharded ? SaveSharded(c) : SaveConsolidated(c);
  if (device_states_) device_states_->ReleaseHostCopies();
  if (swapper_) swapper_->ReleaseMemory();
  DS_RETURN_IF_ERROR(saved);
  if (world_rank_ == 0)
    DS_LOG_INFO("ckpt", "saved step {} to {}/{}{}", step_, config_.checkpoint.dir,
                ckpt::StepDirName(step_), sharded ? " (one shard file per rank)" : "");
  return OkStatus();
}

// One parameter at a time (ParamStore::Fill): the file's tensor, whole (the full one under
// tensor or expert parallelism, whose part the slicer keeps), into a scratch of its size; what
// the file lacks under keep_missing is drawn as initialization drew it. No whole-model buffer.
Status Trainer::LoadWeights(const std::string& path, bool keep_missing) {
  DS_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file, ckpt::SafetensorsFile::Open(path));
  int kept = 0;
  auto source = [&](int slot, float* dst, int64_t whole, const zero::ParamStore::Ranges&, int64_t) {
    const zero::ParamSlot& s = params_->slots()[slot];
    auto t = file.Get(s.name);
    if (!t.ok() && (keep_missing || IsLoraParam(s.name))) {  // LoRA: adapters start fresh
      DS_LOG_INFO("worker", "{}: no \"{}\"; it keeps its initialization", path, s.name);
      params_->DrawInitial(graph_, config_.seed, slot, dst, whole);
      ++kept;
      return OkStatus();
    }
    if (!t.ok()) return DataLossError(path + ": tensor \"" + s.name + "\" is missing");
    const Shape shape = part_->sliced ? Shape(part_->sliced->shards[slot].full_shape.begin(),
                                              part_->sliced->shards[slot].full_shape.end())
                                      : s.shape;
    return CopyInto(*t, Tensor(dst, shape, DType::kF32), path + ": tensor \"" + s.name + "\"");
  };
  DS_RETURN_IF_ERROR(InitializeStreaming(source));
  int frozen = 0;  // LoRA's base weights, by their names
  if (frozen_) {
    DS_RETURN_IF_ERROR(frozen_->Fill([&](int slot, float* dst, int64_t, const auto&,
                                         int64_t) -> Status {
      const zero::ParamSlot& s = frozen_->slots()[slot];
      auto t = file.Get(s.name);
      if (!t.ok()) return DataLossError(path + ": tensor \"" + s.name + "\" is missing");
      ++frozen;
      return CopyInto(*t, Tensor(dst, s.shape, DType::kF32), path + ": tensor \"" + s.name + "\"");
    }));
  }
  if (static_cast<int>(file.tensors().size()) + kept !=
      static_cast<int>(params_->slots().size()) + frozen)
    DS_LOG_WARN("worker", "{}: {} tensors in the file, the model uses {}; the rest are ignored",
                path, file.tensors().size(), params_->slots().size() - kept + frozen);
  DS_LOG_INFO("worker", "initialized weights from {}", path);
  return OkStatus();
}

bool HasLatestCheckpoint(const std::string& root) {
  return access((root + "/" + ckpt::kLatestFile).c_str(), R_OK) == 0;
}

}  // namespace ds::worker
