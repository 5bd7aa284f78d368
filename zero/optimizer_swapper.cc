#include "zero/optimizer_swapper.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/core/dtype.h"
#include "zero/optimizer.h"
#include "zero/param_store.h"

namespace ds::zero {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// "1.50 GiB", or "12.3 MiB" below 1 GiB.
std::string Size(int64_t bytes) {
  char text[32];
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(text, sizeof(text), "%.2f GiB", bytes / 1073741824.0);
  else
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / 1048576.0);
  return text;
}

Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) == 0 || errno == EEXIST) return OkStatus();
  return PermissionDeniedError("cannot create " + path + ": " + std::strerror(errno));
}

// Removes a directory of plain files.
void RemoveDir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

// SIGTERM / SIGINT / SIGHUP (ds-launch stop, Ctrl-C) would end the process without
// destructors and leave the swap files (tens of GB) until the next run: the handler removes
// them (unlink and rmdir are async-signal-safe) and then lets the signal do what it did. One
// swapper per process is covered: the worker's (the last one created).
struct SignalCleanup {
  char paths[3][4096] = {};  // optimizer file, parameter file, directory
  struct sigaction old[3];
  std::atomic<bool> armed{false};
};
SignalCleanup g_cleanup;
constexpr int kCleanupSignals[3] = {SIGTERM, SIGINT, SIGHUP};

void RemoveOnSignal(int sig) {
  if (g_cleanup.armed.exchange(false)) {
    unlink(g_cleanup.paths[0]);
    unlink(g_cleanup.paths[1]);
    rmdir(g_cleanup.paths[2]);
  }
  for (int i = 0; i < 3; ++i)
    if (kCleanupSignals[i] == sig) sigaction(sig, &g_cleanup.old[i], nullptr);
  raise(sig);
}

void ArmSignalCleanup(const std::string& file, const std::string& params, const std::string& dir) {
  const std::string* paths[3] = {&file, &params, &dir};
  for (int i = 0; i < 3; ++i)
    std::snprintf(g_cleanup.paths[i], sizeof(g_cleanup.paths[i]), "%s", paths[i]->c_str());
  struct sigaction sa = {};
  sa.sa_handler = RemoveOnSignal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kCleanupSignals[i], &sa, &g_cleanup.old[i]);
  g_cleanup.armed = true;
}

void DisarmSignalCleanup() {
  if (!g_cleanup.armed.exchange(false)) return;
  for (int i = 0; i < 3; ++i) sigaction(kCleanupSignals[i], &g_cleanup.old[i], nullptr);
}

}  // namespace

int RemoveStaleSwapDirs(const std::string& nvme_path) {
  const std::string root = nvme_path + "/ds-swap";
  DIR* d = opendir(root.c_str());
  if (!d) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const size_t at = name.rfind("-pid");
    if (name.rfind("rank", 0) != 0 || at == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + at + 4, nullptr, 10);
    if (pid == getpid()) continue;
    if (pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;  // alive
    RemoveDir(root + "/" + name);
    ++removed;
  }
  closedir(d);
  return removed;
}

OptimizerSwapper::OptimizerSwapper(const proto::Plan& plan, ParamStore* params,
                                   Optimizer* optimizer)
    : plan_(plan), params_(params), optimizer_(optimizer) {}

OptimizerSwapper::~OptimizerSwapper() {
  DisarmSignalCleanup();
  engine_.reset();  // finishes what is in flight
  for (IoFile* f : {&file_, &params_file_}) {
    const std::string path = f->path();
    *f = IoFile();
    if (!path.empty()) unlink(path.c_str());
  }
  if (!dir_.empty()) rmdir(dir_.c_str());
}

StatusOr<std::unique_ptr<OptimizerSwapper>> OptimizerSwapper::Create(const proto::Plan& plan,
                                                                     const SwapperOptions& options,
                                                                     ParamStore* params,
                                                                     Optimizer* optimizer) {
  const proto::SwapPlan& s = plan.swap();
  if (s.sub_groups_size() == 0)
    return InvalidArgumentError("optimizer swapper: the plan swaps nothing");
  const int own = (s.master() ? 1 : 0) + static_cast<int>(optimizer->state().size());
  if (own != s.states() || (s.master() && !params->states_swapped()))
    return InternalError("optimizer swapper: the plan swaps " + Str(s.states()) +
                         " fp32 arrays per element, the optimizer and store have " + Str(own));
  const proto::SubGroup& last = s.sub_groups(s.sub_groups_size() - 1);
  if (last.shard_begin() + last.count() != params->shard_elements())
    return InternalError("optimizer swapper: the plan's sub-groups cover " +
                         Str(last.shard_begin() + last.count()) +
                         " shard elements, the store has " + Str(params->shard_elements()));
  std::unique_ptr<OptimizerSwapper> w(new OptimizerSwapper(plan, params, optimizer));
  w->tags_.assign(s.sub_groups_size(), 0);
  DS_RETURN_IF_ERROR(w->Open(options));
  for (int i = 0; i < s.slots(); ++i) {
    DS_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(s.slot_bytes()));
    w->slots_.push_back(std::move(b));
  }
  return w;
}

Status OptimizerSwapper::Open(const SwapperOptions& o) {
  const int64_t need = plan_.swap().file_bytes() + plan_.swap().param_file_bytes();
  if (int stale = RemoveStaleSwapDirs(o.nvme_path); stale > 0)
    DS_LOG_INFO("zero", "removed {} swap director{} a killed run left under {}/ds-swap", stale,
                stale == 1 ? "y" : "ies", o.nvme_path);
  struct statvfs fs;
  if (statvfs(o.nvme_path.c_str(), &fs) != 0)
    return NotFoundError(o.key + " " + o.nvme_path + ": " + std::strerror(errno));
  const int64_t avail = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  if (avail < need)
    return ResourceExhaustedError(o.key + " " + o.nvme_path + ": rank " + Str(o.rank) +
                                  "'s swap files need " + Size(need) + " (" + Str(need) +
                                  " bytes), the filesystem has " + Size(avail) + " free");
  DS_RETURN_IF_ERROR(MakeDir(o.nvme_path + "/ds-swap"));
  dir_ = o.nvme_path + "/ds-swap/rank" + Str(o.rank) + "-pid" + Str(getpid());
  DS_RETURN_IF_ERROR(MakeDir(dir_));
  DS_ASSIGN_OR_RETURN(file_, IoFile::Open(dir_ + "/optimizer.swp", IoFile::kCreate));
  Status room = file_.Preallocate(plan_.swap().file_bytes());
  if (!room.ok()) return room.WithPrefix(o.key);
  if (plan_.swap().params()) {
    param_size_ = static_cast<int64_t>(DTypeSize(params_->model_dtype()));
    for (const proto::PartitionUnit& u : plan_.partition().units())
      if (u.persistent()) keep_.push_back({u.shard_offset(), u.chunk()});
  }
  if (plan_.swap().params() && !MasterIsParams()) {
    DS_ASSIGN_OR_RETURN(params_file_, IoFile::Open(dir_ + "/params.swp", IoFile::kCreate));
    room = params_file_.Preallocate(plan_.swap().param_file_bytes());
    if (!room.ok()) return room.WithPrefix(o.key);
    DS_LOG_INFO("zero", "16-bit parameters on NVMe: {} ({})", params_file_.path(),
                Size(plan_.swap().param_file_bytes()));
  } else if (plan_.swap().params()) {
    DS_LOG_INFO("zero", "fp32 parameters on NVMe: the master in {}", file_.path());
  }
  DS_ASSIGN_OR_RETURN(engine_, IoEngine::Create(o.io));
  ArmSignalCleanup(file_.path(), params_file_.path(), dir_);
  DS_LOG_INFO("zero",
              "optimizer states on NVMe: {} ({}), {} sub-groups, {} swap buffers of {:.1f} MiB{}",
              file_.path(), Size(plan_.swap().file_bytes()), plan_.swap().sub_groups_size(),
              plan_.swap().slots(), plan_.swap().slot_bytes() / 1048576.0,
              file_.direct() ? ", O_DIRECT" : ", buffered");
  return OkStatus();
}

int64_t OptimizerSwapper::file_bytes() const { return plan_.swap().file_bytes(); }

int64_t OptimizerSwapper::buffer_bytes() const {
  return plan_.swap().slots() * plan_.swap().slot_bytes();
}

int64_t OptimizerSwapper::Bytes(int k) const {
  const proto::SwapPlan& s = plan_.swap();
  return s.states() * s.sub_groups(k).stride() * static_cast<int64_t>(sizeof(float));
}

std::vector<float*> OptimizerSwapper::HostArrays(int k) const {
  const int64_t pos = plan_.swap().sub_groups(k).shard_begin();
  std::vector<float*> a;
  if (plan_.swap().master()) a.push_back(params_->master_data() + pos);
  for (const Optimizer::StateBuffer& b : optimizer_->state()) a.push_back(b.data + pos);
  return a;
}

std::vector<float*> OptimizerSwapper::SlotArrays(int slot, int k) const {
  float* base = static_cast<float*>(slots_[slot].data());
  const int64_t stride = plan_.swap().sub_groups(k).stride();
  std::vector<float*> a;
  for (int i = 0; i < plan_.swap().states(); ++i) a.push_back(base + i * stride);
  return a;
}

Status OptimizerSwapper::Transfer(int k, int slot, bool write, bool wait_now, IoTicket* ticket) {
  if (k < 0 || k >= plan_.swap().sub_groups_size() || slot < 0 ||
      slot >= static_cast<int>(slots_.size()))
    return InvalidArgumentError("optimizer swapper: sub-group " + Str(k) + " slot " + Str(slot) +
                                " is not in the plan");
  const proto::SubGroup& g = plan_.swap().sub_groups(k);
  void* buf = slots_[slot].data();
  if (write) {
    tags_[k] = SampleTag(slot, k);
    DS_ASSIGN_OR_RETURN(*ticket, engine_->Write(file_, g.file_offset(), buf, Bytes(k)));
    stats_.bytes_written += Bytes(k);
  } else {
    DS_ASSIGN_OR_RETURN(*ticket, engine_->Read(file_, g.file_offset(), buf, Bytes(k)));
    stats_.bytes_read += Bytes(k);
  }
  ++stats_.transfers;
  if (!wait_now) return OkStatus();
  DS_RETURN_IF_ERROR(Wait(*ticket));
  return write ? OkStatus() : CheckRead(slot, k);
}

uint64_t OptimizerSwapper::SampleTag(int slot, int k) const {
  const int64_t stride = plan_.swap().sub_groups(k).stride(), page = kIoAlign / sizeof(float);
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (const float* a : SlotArrays(slot, k))
    for (int64_t at : {int64_t{0}, (stride / 2) / page * page, stride - page}) {
      const unsigned char* p = reinterpret_cast<const unsigned char*>(a + std::max<int64_t>(0, at));
      for (int64_t i = 0; i < kIoAlign; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    }
  return h == 0 ? 1 : h;
}

Status OptimizerSwapper::CheckRead(int slot, int k) const {
  if (tags_[k] == 0 || SampleTag(slot, k) == tags_[k]) return OkStatus();
  return DataLossError("optimizer swap: " + file_.path() + ": sub-group " + Str(k) +
                       " reads back other bytes than were written to it (the swap file was "
                       "truncated or overwritten under the job)");
}

Status OptimizerSwapper::Wait(IoTicket& ticket) {
  const auto t0 = std::chrono::steady_clock::now();
  IoEngine::Times span;
  Status s = engine_->Wait(ticket, &span);
  stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spans_.push_back(span);
  return s.ok() ? s : s.WithPrefix("optimizer swap");
}

StatusOr<CollectiveJob> OptimizerSwapper::Start(const proto::Instruction& in) {
  const bool write = in.kind() == proto::Instruction::SWAP_OUT;
  if (!write && in.kind() != proto::Instruction::SWAP_IN)
    return InvalidArgumentError("optimizer swapper: " + proto::Instruction::Kind_Name(in.kind()) +
                                " is not a swap");
  if (!write && in.swap().sub_group() < 0) return StartParamsIn(in);
  const int k = in.swap().sub_group();
  auto tickets = std::make_shared<std::vector<IoTicket>>(1);
  DS_RETURN_IF_ERROR(Transfer(k, in.swap().slot(), write, false, &(*tickets)[0]));
  const bool params = write && plan_.swap().params() && !MasterIsParams();
  if (params) {  // the 16-bit values the step just wrote
    const proto::SubGroup& g = plan_.swap().sub_groups(k);
    tickets->emplace_back();
    DS_RETURN_IF_ERROR(ParamTransfer(g.shard_begin(), g.count(), true, &tickets->back()));
  }
  CollectiveJob job;
  job.wait = [this, tickets, write, k, slot = in.swap().slot()]() {
    Status first;
    for (IoTicket& t : *tickets) {
      Status s = Wait(t);
      if (first.ok()) first = s;
    }
    return first.ok() && !write ? CheckRead(slot, k) : first;
  };
  if (params) {
    const proto::SubGroup& g = plan_.swap().sub_groups(k);
    job.finish = [this, pos = g.shard_begin(), n = g.count()]() {
      DropParamPages(pos, n);
      return OkStatus();
    };
  }
  return job;
}

bool OptimizerSwapper::MasterIsParams() const {
  return plan_.swap().params() && plan_.swap().master() && !params_->mixed();
}

Status OptimizerSwapper::MasterRead(int64_t pos, int64_t n, std::vector<IoTicket>* tickets) {
  const proto::SwapPlan& s = plan_.swap();
  for (const proto::SubGroup& g : s.sub_groups()) {  // the master is each sub-group's array 0
    const int64_t lo = std::max(pos, g.shard_begin());
    const int64_t hi = std::min(pos + n, g.shard_begin() + g.count());
    if (lo >= hi) continue;
    const int64_t offset = g.file_offset() + (lo - g.shard_begin()) * int64_t{sizeof(float)};
    const int64_t bytes = (hi - lo) * int64_t{sizeof(float)};
    tickets->emplace_back();
    DS_ASSIGN_OR_RETURN(tickets->back(), engine_->Read(file_, offset, ParamShardAt(lo), bytes));
    stats_.bytes_read += bytes;
    ++stats_.transfers;
  }
  return OkStatus();
}

void OptimizerSwapper::ReleaseMaster(int64_t pos, int64_t n) {
  if (MasterIsParams())
    DropParamPages(pos, n);  // the master is the parameter shard: the persistent chunks stay
  else if (plan_.swap().master())
    params_->ReleaseMasterRange(pos, n);
}

StatusOr<CollectiveJob> OptimizerSwapper::StartParamsIn(const proto::Instruction& in) {
  if (!plan_.swap().params())
    return InvalidArgumentError(
        "optimizer swapper: a parameter swap-in, and the plan does not "
        "swap parameters");
  auto tickets = std::make_shared<std::vector<IoTicket>>();
  for (int u : in.units()) {
    if (u < 0 || u >= plan_.partition().units_size())
      return InvalidArgumentError("optimizer swapper: unit " + Str(u) + " is not in the plan");
    const proto::PartitionUnit& unit = plan_.partition().units(u);
    if (MasterIsParams()) {
      DS_RETURN_IF_ERROR(MasterRead(unit.shard_offset(), unit.chunk(), tickets.get()));
      continue;
    }
    tickets->emplace_back();
    DS_RETURN_IF_ERROR(ParamTransfer(unit.shard_offset(), unit.chunk(), false, &tickets->back()));
  }
  CollectiveJob job;
  job.wait = [this, tickets]() {
    Status first;
    for (IoTicket& t : *tickets) {
      Status s = Wait(t);
      if (first.ok()) first = s;
    }
    return first;
  };
  return job;
}

char* OptimizerSwapper::ParamShardAt(int64_t pos) const {
  return static_cast<char*>(params_->param_shard()) + pos * param_size_;
}

Status OptimizerSwapper::ParamTransfer(int64_t pos, int64_t n, bool write, IoTicket* ticket) {
  if (MasterIsParams())
    return InternalError("optimizer swapper: fp32 parameters move with the master");
  const int64_t bytes = n * param_size_, offset = pos * param_size_;
  if (write) {
    DS_ASSIGN_OR_RETURN(*ticket, engine_->Write(params_file_, offset, ParamShardAt(pos), bytes));
    stats_.bytes_written += bytes;
  } else {
    DS_ASSIGN_OR_RETURN(*ticket, engine_->Read(params_file_, offset, ParamShardAt(pos), bytes));
    stats_.bytes_read += bytes;
  }
  ++stats_.transfers;
  return OkStatus();
}

void OptimizerSwapper::DropParamPages(int64_t pos, int64_t n) {
  int64_t at = pos;
  const int64_t end = pos + n;
  for (const auto& [kpos, kn] : keep_) {
    if (kpos + kn <= at) continue;
    if (kpos >= end) break;
    if (kpos > at) params_->ReleaseParamShardRange(at, kpos - at);
    at = std::max(at, kpos + kn);
  }
  if (at < end) params_->ReleaseParamShardRange(at, end - at);
}

Status OptimizerSwapper::LoadParams() {
  if (!plan_.swap().params()) return OkStatus();
  if (MasterIsParams()) {
    std::vector<IoTicket> tickets;
    Status first = MasterRead(0, params_->shard_elements(), &tickets);
    for (IoTicket& t : tickets) {  // every read submitted completes before the first error returns
      if (!t.valid()) continue;
      Status s = Wait(t);
      if (first.ok()) first = s;
    }
    return first;
  }
  IoTicket t;
  DS_RETURN_IF_ERROR(ParamTransfer(0, params_->shard_elements(), false, &t));
  return Wait(t);
}

void OptimizerSwapper::DropParams() {
  if (plan_.swap().params()) DropParamPages(0, params_->shard_elements());
}

Status OptimizerSwapper::Step(const proto::Instruction& in, float lr, float grad_scale) {
  const int k = in.swap().sub_group(), slot = in.swap().slot();
  if (k < 0 || k >= plan_.swap().sub_groups_size() || slot < 0 ||
      slot >= static_cast<int>(slots_.size()))
    return InvalidArgumentError("optimizer swapper: step of sub-group " + Str(k) + " slot " +
                                Str(slot) + " is not in the plan");
  const proto::SubGroup& g = plan_.swap().sub_groups(k);
  const std::vector<float*> a = SlotArrays(slot, k);
  ShardStates at;
  at.base = g.shard_begin();
  size_t i = 0;
  if (plan_.swap().master()) at.master = a[i++];
  for (int j = 0; i < a.size(); ++i, ++j) at.state[j] = a[i];
  if (k == 0) optimizer_->BeginStep();
  optimizer_->StepShard(g.shard_begin(), g.shard_begin() + g.count(), at, lr, grad_scale);
  if (MasterIsParams()) {  // the persistent units' chunks live in memory: their fresh values
    const int64_t lo = g.shard_begin(), hi = lo + g.count();
    for (const auto& [kpos, kn] : keep_) {
      const int64_t from = std::max(lo, kpos), to = std::min(hi, kpos + kn);
      if (from < to)
        std::memcpy(ParamShardAt(from), at.master + (from - lo), (to - from) * sizeof(float));
    }
  }
  return OkStatus();
}

Status OptimizerSwapper::Store() {
  stored_ = 0;
  return StoreUpTo(INT64_MAX);
}

Status OptimizerSwapper::StoreUpTo(int64_t end) {
  IoTicket t;
  const int total = plan_.swap().sub_groups_size();
  for (; stored_ < total; ++stored_) {
    const int k = stored_;
    const proto::SubGroup& g = plan_.swap().sub_groups(k);
    if (g.shard_begin() + g.count() > end) return OkStatus();
    const int64_t n = g.count();
    const std::vector<float*> host = HostArrays(k), slot = SlotArrays(0, k);
    for (size_t i = 0; i < host.size(); ++i) std::memcpy(slot[i], host[i], n * sizeof(float));
    DS_RETURN_IF_ERROR(Transfer(k, 0, /*write=*/true, /*wait_now=*/true, &t));
    const int64_t pos = plan_.swap().sub_groups(k).shard_begin();
    if (plan_.swap().params() && !MasterIsParams()) {
      DS_RETURN_IF_ERROR(ParamTransfer(pos, n, true, &t));
      DS_RETURN_IF_ERROR(Wait(t));
      DropParamPages(pos, n);
    }
    ReleaseMaster(pos, n);
    optimizer_->ReleaseStateRange(pos, n);
  }
  if (plan_.swap().params() && !MasterIsParams()) DS_RETURN_IF_ERROR(params_file_.Sync());
  return file_.Sync();
}

Status OptimizerSwapper::Load() {
  IoTicket t;
  for (int k = 0; k < plan_.swap().sub_groups_size(); ++k) {
    const int64_t n = plan_.swap().sub_groups(k).count();
    DS_RETURN_IF_ERROR(Transfer(k, 0, /*write=*/false, /*wait_now=*/true, &t));
    const std::vector<float*> host = HostArrays(k), slot = SlotArrays(0, k);
    for (size_t i = 0; i < host.size(); ++i) std::memcpy(host[i], slot[i], n * sizeof(float));
  }
  return OkStatus();
}

void OptimizerSwapper::ReleaseMemory() {
  for (int k = 0; k < plan_.swap().sub_groups_size(); ++k) {
    const proto::SubGroup& g = plan_.swap().sub_groups(k);
    ReleaseMaster(g.shard_begin(), g.count());
    optimizer_->ReleaseStateRange(g.shard_begin(), g.count());
  }
}

SwapStats OptimizerSwapper::TakeStats() {
  SwapStats s = stats_;
  std::sort(spans_.begin(), spans_.end(), [](const IoEngine::Times& a, const IoEngine::Times& b) {
    return a.submitted < b.submitted;
  });
  std::chrono::steady_clock::time_point end{};
  for (const IoEngine::Times& t : spans_) {  // the union of the transfers' spans
    const auto from = std::max(t.submitted, end);
    if (t.finished > from) s.busy_s += std::chrono::duration<double>(t.finished - from).count();
    end = std::max(end, t.finished);
  }
  spans_.clear();
  stats_ = SwapStats();
  return s;
}

}  // namespace ds::zero
