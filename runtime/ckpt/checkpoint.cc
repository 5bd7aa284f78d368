// SaveCheckpoint and the step-directory bookkeeping; loading is in checkpoint_load.cc.
//
// Note [Checkpoint atomicity]
// A checkpoint becomes visible in two atomic steps: rename(.tmp-step_X -> step_X), then
// rename(latest.tmp -> latest). Everything inside .tmp-step_X (and the directory itself)
// is fsynced before the first rename, and root is fsynced after each, so after a crash
// `latest` names either the previous complete directory or the new complete one. Leftover
// .tmp-* entries are garbage by construction and the next save deletes them. Re-saving an
// existing step swaps the directories with renameat2(RENAME_EXCHANGE); filesystems without
// it fall back to two renames (a short window where step_X is absent).
#include "runtime/ckpt/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "runtime/base/crc32c.h"
#include "runtime/base/json.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/file_util.h"

namespace ds::ckpt {
namespace {

constexpr char kTmpPrefix[] = ".tmp-";

std::atomic<CrashPoint> g_crash_point{CrashPoint::kNone};

// True (once) when the test hook asks to stop at `p`.
bool CrashHere(CrashPoint p) {
  CrashPoint expected = p;
  return g_crash_point.compare_exchange_strong(expected, CrashPoint::kNone);
}

Status SimulatedCrash(const char* where) {
  return AbortedError(std::string("simulated crash ") + where + " (SetCrashPointForTesting)");
}

Status ValidateNames(const std::vector<NamedTensor>& tensors, const char* file,
                     std::set<std::string>* all) {
  std::set<std::string> seen;
  for (const NamedTensor& t : tensors) {
    if (!seen.insert(t.name).second) {
      return InvalidArgumentError(std::string(file) + ": duplicate tensor name " + t.name);
    }
    all->insert(t.name);
  }
  return OkStatus();
}

Status ValidateContents(const CheckpointContents& c) {
  if (c.step < 0) return InvalidArgumentError("checkpoint step must be >= 0");
  std::set<std::string> all;
  DS_RETURN_IF_ERROR(ValidateNames(c.model, kModelFile, &all));
  DS_RETURN_IF_ERROR(ValidateNames(c.optimizer, kOptimizerFile, &all));
  DS_RETURN_IF_ERROR(ValidateNames(c.frozen, kFrozenFile, &all));
  for (const auto& [key, text] : c.state) {
    StatusOr<Json> j = ParseJson(text);
    if (!j.ok()) {
      return InvalidArgumentError("state \"" + key +
                                  "\" is not valid JSON: " + j.status().message());
    }
  }
  for (const auto& [name, shard] : c.shards) {
    if (!all.count(name)) return InvalidArgumentError("shard record for unknown tensor " + name);
  }
  return OkStatus();
}

// Writes one safetensors file into `dir` and records it and its tensors in `m`.
Status WriteTensorFile(const std::string& dir, const char* file,
                       const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, ShardRecord>& shards, Manifest* m) {
  DS_ASSIGN_OR_RETURN(SafetensorsWriteResult r, WriteSafetensors(JoinPath(dir, file), tensors));
  m->files.push_back({file, r.file_bytes, r.file_crc32c});
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorRecord t{tensors[i].name, file, tensors[i].tensor.spec(), r.tensor_crc32c[i], {}};
    if (auto it = shards.find(t.name); it != shards.end()) {
      DS_RETURN_IF_ERROR(ValidateShard(t.name, t.spec.shape, it->second));
      t.shard = it->second;
    }
    m->tensors.push_back(std::move(t));
  }
  return OkStatus();
}

// state.json: one object whose member values are the callers' JSON texts verbatim.
Status WriteStateFile(const std::string& dir, const std::map<std::string, std::string>& state,
                      Manifest* m) {
  std::string text = "{";
  bool first = true;
  for (const auto& [key, value] : state) {
    text += first ? "\n  " : ",\n  ";
    first = false;
    AppendJsonString(key, &text);
    text += ": ";
    text += value;
  }
  text += first ? "}\n" : "\n}\n";
  DS_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, kStateFile), text));
  m->files.push_back({kStateFile, text.size(), Crc32c(text.data(), text.size())});
  return OkStatus();
}

// Parses "step_<digits>"; false for anything else.
bool ParseStepDirName(const std::string& name, int64_t* step) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return false;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  *step = v;
  return true;
}

Status RemoveStaleTemps(const std::string& root) {
  DS_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(root));
  for (const std::string& n : names) {
    if (n.rfind(kTmpPrefix, 0) == 0 || n == std::string(kLatestFile) + ".tmp") {
      DS_LOG_WARN("ckpt", "removing stale {} (left by an interrupted save)", JoinPath(root, n));
      DS_RETURN_IF_ERROR(RemoveTree(JoinPath(root, n)));
    }
  }
  return OkStatus();
}

// Moves `tmp` to `dst`. When `dst` exists its old contents end up at `tmp` (the caller
// deletes them after `latest` moves on). See Note [Checkpoint atomicity].
Status InstallDir(const std::string& tmp, const std::string& dst) {
  if (!PathExists(dst)) {
    if (::rename(tmp.c_str(), dst.c_str()) != 0) {
      return ErrnoToStatus(errno, "rename(" + tmp + ", " + dst + ")");
    }
    return OkStatus();
  }
  DS_LOG_WARN("ckpt", "replacing existing checkpoint directory {}", dst);
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dst.c_str(), RENAME_EXCHANGE) == 0) {
    return OkStatus();
  }
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
    return ErrnoToStatus(errno, "renameat2(" + tmp + ", " + dst + ", RENAME_EXCHANGE)");
  }
  const std::string aside = tmp + ".old";
  if (::rename(dst.c_str(), aside.c_str()) != 0) {
    return ErrnoToStatus(errno, "rename(" + dst + ", " + aside + ")");
  }
  if (::rename(tmp.c_str(), dst.c_str()) != 0) {
    return ErrnoToStatus(errno, "rename(" + tmp + ", " + dst + ")");
  }
  if (::rename(aside.c_str(), tmp.c_str()) != 0) {
    return ErrnoToStatus(errno, "rename(" + aside + ", " + tmp + ")");
  }
  return OkStatus();
}

// Deletes step directories at or below `step` beyond the newest `keep_last`.
Status PruneOld(const std::string& root, int64_t step, int keep_last) {
  DS_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCheckpointSteps(root));
  int kept = 0;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it > step) {
      DS_LOG_WARN("ckpt", "{} is newer than the latest checkpoint; keeping it",
                  JoinPath(root, StepDirName(*it)));
      continue;
    }
    if (++kept <= keep_last) continue;
    DS_LOG_INFO("ckpt", "keep_last={}: removing {}", keep_last, JoinPath(root, StepDirName(*it)));
    DS_RETURN_IF_ERROR(RemoveTree(JoinPath(root, StepDirName(*it))));
  }
  return OkStatus();
}

}  // namespace

void SetCrashPointForTesting(CrashPoint point) { g_crash_point.store(point); }

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08" PRId64, step);
  return buf;
}

StatusOr<std::vector<int64_t>> ListCheckpointSteps(const std::string& root) {
  DS_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(root));
  std::vector<int64_t> steps;
  for (const std::string& n : names) {
    int64_t s = 0;
    if (ParseStepDirName(n, &s) && IsDirectory(JoinPath(root, n))) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string TempStepDir(const std::string& root, int64_t step) {
  return JoinPath(root, kTmpPrefix + StepDirName(step));
}

Status BeginCheckpoint(const std::string& root, int64_t step) {
  if (step < 0) return InvalidArgumentError("checkpoint step must be >= 0");
  DS_RETURN_IF_ERROR(CreateDirs(root));
  DS_RETURN_IF_ERROR(RemoveStaleTemps(root));
  return CreateDirs(TempStepDir(root, step));
}

namespace {

// Everything after the writers filled the temporary directory. `all_files`: write
// model/optimizer files even when empty (the single-writer layout always has them).
Status Commit(const std::string& root, const CheckpointContents& c, const WrittenFiles& written,
              int keep_last, bool all_files) {
  DS_RETURN_IF_ERROR(ValidateContents(c));
  const std::string name = StepDirName(c.step);
  const std::string tmp = TempStepDir(root, c.step);
  const std::string dst = JoinPath(root, name);

  Manifest m;
  m.step = c.step;
  m.info = c.info;
  if (all_files || !c.model.empty()) {
    DS_RETURN_IF_ERROR(WriteTensorFile(tmp, kModelFile, c.model, c.shards, &m));
  }
  if (CrashHere(CrashPoint::kAfterModelFile)) return SimulatedCrash("after the model file");
  if (all_files || !c.optimizer.empty()) {
    DS_RETURN_IF_ERROR(WriteTensorFile(tmp, kOptimizerFile, c.optimizer, c.shards, &m));
  }
  if (!c.frozen.empty()) DS_RETURN_IF_ERROR(WriteTensorFile(tmp, kFrozenFile, c.frozen, {}, &m));
  DS_RETURN_IF_ERROR(WriteStateFile(tmp, c.state, &m));
  for (const FileRecord& f : written.files) {
    const std::string path = JoinPath(tmp, f.name);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return DataLossError(path + ": missing (a writer reported it written)");
    }
    if (static_cast<uint64_t>(st.st_size) != f.bytes) {
      return DataLossError(path + ": size " + std::to_string(st.st_size) +
                           " bytes, its writer reported " + std::to_string(f.bytes));
    }
    m.files.push_back(f);
  }
  m.tensors.insert(m.tensors.end(), written.tensors.begin(), written.tensors.end());
  DS_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(tmp, kManifestFile), ManifestToJson(m)));
  DS_RETURN_IF_ERROR(SyncDir(tmp));
  if (CrashHere(CrashPoint::kBeforeRename)) return SimulatedCrash("before the rename");

  DS_RETURN_IF_ERROR(InstallDir(tmp, dst));
  DS_RETURN_IF_ERROR(SyncDir(root));
  if (CrashHere(CrashPoint::kBeforeLatestUpdate)) {
    return SimulatedCrash("before the latest update");
  }
  DS_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(root, kLatestFile), name + "\n"));
  // Only a replaced step directory's old contents can be here now.
  DS_RETURN_IF_ERROR(RemoveTree(tmp));
  if (keep_last > 0) DS_RETURN_IF_ERROR(PruneOld(root, c.step, keep_last));

  uint64_t bytes = 0;
  for (const FileRecord& f : m.files) bytes += f.bytes;
  DS_LOG_INFO("ckpt", "saved {} ({} files, {} tensors, {:.1f} MiB)", dst, m.files.size(),
              m.tensors.size(), bytes / 1048576.0);
  return OkStatus();
}

}  // namespace

Status CommitCheckpoint(const std::string& root, const CheckpointContents& c,
                        const WrittenFiles& written, int keep_last) {
  if (!IsDirectory(TempStepDir(root, c.step))) {
    return FailedPreconditionError(TempStepDir(root, c.step) +
                                   ": missing (BeginCheckpoint was not called)");
  }
  return Commit(root, c, written, keep_last, /*all_files=*/false);
}

Status SaveCheckpoint(const std::string& root, const CheckpointContents& c, int keep_last) {
  DS_RETURN_IF_ERROR(ValidateContents(c));
  DS_RETURN_IF_ERROR(BeginCheckpoint(root, c.step));
  return Commit(root, c, WrittenFiles(), keep_last, /*all_files=*/true);
}

}  // namespace ds::ckpt
