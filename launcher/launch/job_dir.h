// The job directory: where ds-launch keeps what `ds-launch status|stop` need to reach a
// running job: ~/.ds-runtime/jobs/<job id>/{token (0600), coordinator}, and
// ~/.ds-runtime/current naming the most recent job. DS_RUNTIME_HOME overrides ~/.ds-runtime.
#pragma once

#include <string>

#include "runtime/base/status.h"

namespace ds::launcher {

struct JobDir {
  std::string job_id;
  std::string path;
  std::string token_path() const { return path + "/token"; }
  std::string coordinator_path() const { return path + "/coordinator"; }
};

// A random 128-bit token as 32 hex digits, from /dev/urandom.
StatusOr<std::string> NewJobToken();
// Creates the directory (0700) with the token (0600) and makes it the current job.
StatusOr<JobDir> CreateJobDir(const std::string& token);
Status WriteCoordinatorAddress(const JobDir& dir, const std::string& address);
// What a client presents under mutual TLS (absolute paths).
struct TlsClient {
  std::string ca, cert, key, server_name;
};
Status WriteTlsClient(const JobDir& dir, const TlsClient& tls);
// The current job's coordinator address and token (and TLS client files, when it has them).
struct JobAccess {
  std::string coordinator;
  std::string token;
  std::string job_dir;
  TlsClient tls;
};
StatusOr<JobAccess> CurrentJob();
// Reads a token file (first line), refusing files others can read.
StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace ds::launcher
