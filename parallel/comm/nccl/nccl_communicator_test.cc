// CPU-side checks of NcclCommunicator (no GPU needed): option validation, and that a machine
// without a GPU gets Unavailable from Create (not a crash, not a hang, nothing published).
// ncclGetUniqueId itself works without a GPU (shared/reference/feasibility.md), which the
// last case relies on.
#include "parallel/comm/nccl/nccl_communicator.h"

#include <nccl.h>

#include <catch2/catch.hpp>

#include "runtime/cuda/device.h"

namespace ds::parallel {
namespace {

TEST_CASE("NcclCommunicator::Create: bad options are InvalidArgument", "[parallel][nccl]") {
  InMemoryKvStore store;
  NcclOptions o;
  o.size = 2;
  o.rank = 2;
  CHECK(NcclCommunicator::Create(o, &store).status().code() == StatusCode::kInvalidArgument);
  o.rank = 0;
  o.timeout = std::chrono::milliseconds(0);
  CHECK(NcclCommunicator::Create(o, &store).status().code() == StatusCode::kInvalidArgument);
  o.timeout = std::chrono::seconds(1);
  o.name = "";
  CHECK(NcclCommunicator::Create(o, &store).status().code() == StatusCode::kInvalidArgument);
  o.name = "world";
  CHECK(NcclCommunicator::Create(o, nullptr).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("NcclCommunicator::Create: no GPU is Unavailable, naming the rank", "[parallel][nccl]") {
  if (cuda::CudaAvailable()) return;  // covered by nccl_gpu_test on GPU machines
  InMemoryKvStore store;
  NcclOptions o;
  o.rank = 1;
  o.size = 2;
  o.bootstrap_timeout = std::chrono::milliseconds(50);
  const Status s = NcclCommunicator::Create(o, &store).status();
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK_THAT(s.message(), Catch::Contains("rank 1 of world: no CUDA device 0"));
  CHECK(store.Get("world/nccl-id", std::chrono::milliseconds(1)).status().code() ==
        StatusCode::kDeadlineExceeded);
}

TEST_CASE("ncclGetUniqueId works without a GPU (the bootstrap's first step)", "[parallel][nccl]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclUniqueId zero = {};
  CHECK(std::memcmp(&id, &zero, sizeof(id)) != 0);
}

}  // namespace
}  // namespace ds::parallel
