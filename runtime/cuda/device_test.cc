#include "runtime/cuda/device.h"

#include <catch2/catch.hpp>

#if DS_HAVE_CUDA
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/stream.h"
#endif

namespace ds::cuda {
namespace {

TEST_CASE("CudaDeviceCount: no GPU is zero devices, not an error", "[cuda]") {
  StatusOr<int> count = CudaDeviceCount();
  REQUIRE(count.ok());
  CHECK(*count >= 0);
  CHECK(CudaAvailable() == (*count > 0));
  const DeviceProbe& probe = ProbeCudaDevices();
  CHECK(&probe == &ProbeCudaDevices());  // cached
  CHECK_FALSE(probe.reason.empty());
  if (*count == 0) {
    // No toolkit (-1), no driver (35) or no device (100): the only zero-device outcomes.
    CHECK((probe.error == -1 || probe.error == 35 || probe.error == 100));
  }
  CHECK(CudaCompiledIn() == (probe.error != -1));
}

#if DS_HAVE_CUDA

Status FailingCall() {
  DS_CUDA_RETURN_IF_ERROR(cudaErrorMemoryAllocation);
  return OkStatus();
}

Status PassingCall() {
  DS_CUDA_RETURN_IF_ERROR(cudaSuccess);
  return OkStatus();
}

TEST_CASE("DS_CUDA_RETURN_IF_ERROR: code, location and CUDA's text", "[cuda]") {
  CHECK(PassingCall().ok());
  Status s = FailingCall();
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK_THAT(s.message(), Catch::Contains("device_test.cc:"));
  CHECK_THAT(s.message(), Catch::Contains("cudaErrorMemoryAllocation"));
  CHECK_THAT(s.message(), Catch::Contains(cudaGetErrorString(cudaErrorMemoryAllocation)));

  CHECK(CudaErrorToStatus(cudaErrorInsufficientDriver, nullptr, nullptr, 0).code() ==
        StatusCode::kUnavailable);
  CHECK(CudaErrorToStatus(cudaErrorInvalidValue, "x", "f.cc", 1).code() ==
        StatusCode::kInvalidArgument);
  CHECK(CudaErrorToStatus(cudaErrorLaunchFailure, "x", "f.cc", 1).code() == StatusCode::kInternal);
  CHECK(CudaErrorToStatus(cudaSuccess, "x", "f.cc", 1).ok());
  CHECK(IsNoDeviceError(cudaErrorNoDevice));
  CHECK_FALSE(IsNoDeviceError(cudaErrorLaunchFailure));
}

TEST_CASE("Stream and Event: created on a GPU, Unavailable without one", "[cuda]") {
  StatusOr<Stream> stream = Stream::Create();
  StatusOr<Event> event = Event::Create(/*enable_timing=*/true);
  if (!CudaAvailable()) {
    REQUIRE_FALSE(stream.ok());
    CHECK(stream.status().code() == StatusCode::kUnavailable);
    CHECK_FALSE(event.ok());
    return;
  }
  REQUIRE(stream.ok());
  REQUIRE(event.ok());
  CHECK(stream->get() != nullptr);
  CHECK(event->Record(stream->get()).ok());
  CHECK(event->Synchronize().ok());
  Stream moved = std::move(*stream);
  CHECK(moved.get() != nullptr);
  CHECK(stream->get() == nullptr);
  CHECK(moved.Synchronize().ok());
}

#endif  // DS_HAVE_CUDA

}  // namespace
}  // namespace ds::cuda
