// model.hf: the job's initial weights read straight from the Hugging Face folder, one parameter
// at a time (ParamStore::Fill through the family's tensor map, runtime/ckpt/hf_params.h): each
// parameter is converted from the file's dtype into a scratch of its size, the rank keeps its
// tensor-parallel slice and its ZeRO partition, and stage 3's gathered copy and NVMe offload's
// sub-groups are handed back as they fill, as the random initialization does. No whole-model
// buffer exists at any time. The value head DeepSpeed-Chat adds (head: reward) is drawn as
// Initialize draws it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/hf_params.h"
#include "runtime/ckpt/hf_weights.h"
#include "runtime/graph/lora.h"
#include "runtime/hf/hf_tensor_map.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {
namespace {

// 8.36 GiB, 20.5 MiB: two decimals in the largest unit that is at least 1.
std::string Bytes(int64_t n) {
  char text[32];
  if (n >= (int64_t{1} << 30))
    std::snprintf(text, sizeof(text), "%.2f GiB", n / double(int64_t{1} << 30));
  else
    std::snprintf(text, sizeof(text), "%.2f MiB", n / double(1 << 20));
  return text;
}

// The mapped bytes Fill's source will read, in Fill's order: each parameter's needed ranges
// (its kept part at stage 3, its slice's rows under tensor parallelism, else all of it).
std::vector<std::pair<const void*, size_t>> ReadOrder(const ckpt::HfParamReader& reader,
                                                      const std::map<std::string, size_t>& index,
                                                      const zero::ParamStore& params,
                                                      const zero::InitSlicer* slicer,
                                                      const zero::ParamStore::Ranges* persistent) {
  std::vector<std::pair<const void*, size_t>> spans;
  for (size_t slot = 0; slot < params.slots().size(); ++slot) {
    auto it = index.find(params.slots()[slot].name);
    if (it == index.end()) continue;
    const zero::ParamStore::Ranges needed =
        params.NeededRanges(static_cast<int>(slot), slicer, persistent);
    if (needed.empty())
      reader.Spans(it->second, 0, NumElements(reader.map().params[it->second].shape), &spans);
    for (const auto& [lo, hi] : needed) reader.Spans(it->second, lo, hi, &spans);
  }
  return spans;
}

}  // namespace

Status Trainer::InitializeFromHf() {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& dir = config_.model.hf;
  // The map of the whole model: this rank's graph may be a stage or a tensor-parallel slice of
  // it, whose parameters keep their names.
  DS_ASSIGN_OR_RETURN(ModelSpec spec, plan::HfModelSpec(config_));
  DS_ASSIGN_OR_RETURN(Graph whole, BuildModelGraph(spec));
  DS_ASSIGN_OR_RETURN(hf::HfTensorMap map, hf::MapHfTensors(spec, whole));
  DS_ASSIGN_OR_RETURN(ckpt::HfWeights files, ckpt::HfWeights::Open(dir));
  DS_ASSIGN_OR_RETURN(ckpt::HfParamReader reader,
                      ckpt::HfParamReader::Create(&files, std::move(map)));
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < reader.map().params.size(); ++i) index[reader.map().params[i].ours] = i;
  // The disk streams what this rank will read, in the order Fill reads it, while parameters
  // convert (LoRA: the frozen base weights after the trained ones).
  auto order = ReadOrder(reader, index, *params_, init_slicer_.get(), &runner_->PersistentRanges());
  if (frozen_) {
    auto more = ReadOrder(reader, index, *frozen_, nullptr, nullptr);
    order.insert(order.end(), more.begin(), more.end());
  }
  ckpt::SpanPrefetcher prefetch(std::move(order));
  int64_t read = 0, drawn = 0;
  // Each store's source: the folder's tensor, or the draw of what it lacks (a value head, LoRA's
  // adapters).
  auto source_of = [&](zero::ParamStore* store) {
    return [&, store](int slot, float* dst, int64_t n,
                      const zero::ParamStore::Ranges& needed) -> Status {
      const zero::ParamSlot& s = store->slots()[slot];
      auto it = index.find(s.name);
      if (it == index.end() && IsLoraParam(s.name)) {
        store->DrawInitial(graph_, config_.seed, slot, dst, n);
        drawn += n;
        return OkStatus();
      }
      if (it == index.end()) return InternalError(dir + ": the model has no parameter " + s.name);
      const hf::HfParam& p = reader.map().params[it->second];
      if (NumElements(p.shape) != n)
        return InternalError(dir + ": " + s.name + " has " + std::to_string(NumElements(p.shape)) +
                             " elements in the model and " + std::to_string(n) + " on this rank");
      if (p.source.kind == hf::HfSource::Kind::kInitialized) {
        store->DrawInitial(graph_, config_.seed, slot, dst, n);
        drawn += n;
        return OkStatus();
      }
      if (needed.empty()) {
        read += n;
        return reader.Read(it->second, 0, n, dst);
      }
      for (const auto& [lo, hi] : needed) {  // stage 3: only what this rank keeps
        read += hi - lo;
        DS_RETURN_IF_ERROR(reader.Read(it->second, lo, hi, dst + lo));
      }
      return OkStatus();
    };
  };
  DS_RETURN_IF_ERROR(InitializeStreaming(source_of(params_.get()), /*kept_only=*/true));
  if (frozen_) DS_RETURN_IF_ERROR(frozen_->Fill(source_of(frozen_.get())));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ReportHfLoad(dir, files.shard_count(), read, drawn, seconds);
  return OkStatus();
}

void Trainer::ReportHfLoad(const std::string& dir, int files, int64_t read, int64_t drawn,
                           double seconds) const {
  int64_t planned = 0, largest = 0;
  for (const proto::RankPlan& r : plan_->ranks())
    if (r.rank() == world_rank_) planned = r.memory().model_state_bytes();
  for (const zero::ParamSlot& s : params_->slots()) largest = std::max(largest, s.numel);
  DS_LOG_INFO("worker",
              "rank {}: read {:.2f}M values from {} ({} file{}) in {:.2f} s{}; peak RSS {}, "
              "planned model states {}, largest parameter {} (fp32)",
              world_rank_, read / 1e6, dir, files, files == 1 ? "" : "s", seconds,
              drawn > 0 ? " (" + std::to_string(drawn) + " drawn: what the folder lacks)" : "",
              Bytes(PeakRssBytes()), Bytes(planned), Bytes(largest * 4));
}

}  // namespace ds::worker
