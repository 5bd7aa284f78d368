// The rank environment ds-agent gives each worker (as torchrun does): RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_SIZE, NODE_RANK, plus DS_COORDINATOR, DS_JOB_TOKEN_FILE, DS_ROUND and
// DS_RESUME, and for in-memory copies DS_COPY_DIR, DS_COPY_STORES, DS_MEMORY_STEP, DS_MEMORY_SOURCE
// (and for an elastic job that changed size DS_MEMORY_WORLD, DS_MEMORY_SOURCES). Standalone (no
// RANK), the worker is rank 0 of 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::worker {

struct RankEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_size = 1;
  int node_rank = 0;
  int round = 0;
  bool launched = false;    // started by ds-agent
  bool resume = false;      // DS_RESUME=1: resume from the latest checkpoint
  std::string coordinator;  // host:port, "" standalone
  std::string token_file;   // file holding the job token
  // Mutual TLS to the coordinator (DS_TLS_*, set by ds-agent; "" = plaintext): the CA, the
  // client certificate and key, and the name the coordinator's certificate is checked against.
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  // fault_tolerance.in_memory_interval: the directory this node's agent keeps the copies in, the
  // other nodes' agents (host:port) this rank sends its copies to (its buddy), and on a restart
  // the step every rank resumes from (-1: none) and the agent holding this rank's copy of it.
  std::string copy_dir;  // this node's copy directory (DS_COPY_DIR), kept by the agent
  std::vector<std::string> copy_stores;
  int64_t memory_step = -1;
  std::string memory_source;
  // An elastic job that changed size: the old world's size and, per old rank, the store holding
  // its copy (DS_MEMORY_WORLD, DS_MEMORY_SOURCES); 0 / empty otherwise.
  int memory_world = 0;
  std::vector<std::string> memory_sources;
};

// Reads the variables; malformed or inconsistent values are errors naming the variable.
StatusOr<RankEnv> ReadRankEnv();

}  // namespace ds::worker
