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
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

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

// Seconds since this process started (/proc/self/stat's starttime against the boot clock, in
// clock ticks); -1 when unknown. The load's line says how long the whole start took, since what
// comes before the load (groups, plan, buffers) can cost more than the load itself.
double SecondsSinceProcessStart() {
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(text.substr(paren + 2));  // from field 3, the state
  std::string f;
  for (int i = 3; i < 22 && fields >> f; ++i) {
  }
  unsigned long long ticks = 0;
  if (!(fields >> ticks)) return -1;
  timespec now{};
  clock_gettime(CLOCK_BOOTTIME, &now);
  return now.tv_sec + now.tv_nsec * 1e-9 - double(ticks) / sysconf(_SC_CLK_TCK);
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

// Fill's source for a store: each parameter's values from the folder's tensor (the ranges asked
// for, converted on the way), or drawn where the folder lacks it (a value head, LoRA's
// adapters): drawn whole once, the ranges copied out of it.
class FolderSource {
 public:
  FolderSource(const std::string& dir, const ckpt::HfParamReader& reader,
               const std::map<std::string, size_t>& index, const Graph& graph, uint64_t seed)
      : dir_(dir), reader_(reader), index_(index), graph_(graph), seed_(seed) {}

  zero::ParamStore::ParamSource For(zero::ParamStore* store) {
    return [this, store](int slot, float* dst, int64_t n, const zero::ParamStore::Ranges& needed,
                         int64_t first) { return Read(store, slot, dst, n, needed, first); };
  }
  int64_t read() const { return read_; }
  int64_t drawn() const { return drawn_; }

 private:
  Status Read(zero::ParamStore* store, int slot, float* dst, int64_t n,
              const zero::ParamStore::Ranges& needed, int64_t first) {
    const zero::ParamSlot& s = store->slots()[slot];
    auto it = index_.find(s.name);
    if (it == index_.end() && IsLoraParam(s.name)) return Draw(store, slot, dst, n, needed, first);
    if (it == index_.end()) return InternalError(dir_ + ": the model has no parameter " + s.name);
    const hf::HfParam& p = reader_.map().params[it->second];
    if (NumElements(p.shape) != n)
      return InternalError(dir_ + ": " + s.name + " has " + std::to_string(NumElements(p.shape)) +
                           " elements in the model and " + std::to_string(n) + " on this rank");
    if (p.source.kind == hf::HfSource::Kind::kInitialized)
      return Draw(store, slot, dst, n, needed, first);
    if (needed.empty()) {
      read_ += n;
      return reader_.Read(it->second, 0, n, dst);
    }
    for (const auto& [lo, hi] : needed) {  // stage 3: only what this rank keeps
      read_ += hi - lo;
      DS_RETURN_IF_ERROR(reader_.Read(it->second, lo, hi, dst + (lo - first)));
    }
    return OkStatus();
  }

  Status Draw(zero::ParamStore* store, int slot, float* dst, int64_t n,
              const zero::ParamStore::Ranges& needed, int64_t first) {
    if (needed.empty()) {
      store->DrawInitial(graph_, seed_, slot, dst, n);
      drawn_ += n;
      return OkStatus();
    }
    if (drawn_store_ != store || drawn_slot_ != slot) {
      drawn_values_.resize(n);
      store->DrawInitial(graph_, seed_, slot, drawn_values_.data(), n);
      drawn_store_ = store;
      drawn_slot_ = slot;
    }
    for (const auto& [lo, hi] : needed) {
      std::copy(drawn_values_.begin() + lo, drawn_values_.begin() + hi, dst + (lo - first));
      drawn_ += hi - lo;
    }
    return OkStatus();
  }

  const std::string& dir_;
  const ckpt::HfParamReader& reader_;
  const std::map<std::string, size_t>& index_;
  const Graph& graph_;
  const uint64_t seed_;
  int64_t read_ = 0, drawn_ = 0;
  const zero::ParamStore* drawn_store_ = nullptr;
  int drawn_slot_ = -1;
  std::vector<float> drawn_values_;
};

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
  FolderSource source(dir, reader, index, graph_, config_.seed);
  DS_RETURN_IF_ERROR(InitializeStreaming(source.For(params_.get()), /*kept_only=*/true));
  if (frozen_) DS_RETURN_IF_ERROR(frozen_->Fill(source.For(frozen_.get())));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ReportHfLoad(dir, files.shard_count(), source.read(), source.drawn(), seconds);
  return OkStatus();
}

void Trainer::ReportHfLoad(const std::string& dir, int files, int64_t read, int64_t drawn,
                           double seconds) const {
  int64_t planned = 0, largest = 0;
  for (const proto::RankPlan& r : plan_->ranks())
    if (r.rank() == world_rank_) planned = r.memory().model_state_bytes();
  for (const zero::ParamSlot& s : params_->slots()) largest = std::max(largest, s.numel);
  DS_LOG_INFO("worker",
              "rank {}: read {:.2f}M values from {} ({} file{}) in {:.2f} s ({:.2f} s after "
              "the worker started){}; peak RSS {}, planned model states {}, largest parameter {} "
              "(fp32)",
              world_rank_, read / 1e6, dir, files, files == 1 ? "" : "s", seconds,
              SecondsSinceProcessStart(),
              drawn > 0 ? " (" + std::to_string(drawn) + " drawn: what the folder lacks)" : "",
              Bytes(PeakRssBytes()), Bytes(planned), Bytes(largest * 4));
}

}  // namespace ds::worker
