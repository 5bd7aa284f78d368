#include "runtime/cuda/stream.h"

#include <utility>

#include "runtime/cuda/cuda_status.h"

namespace ds::cuda {

StatusOr<Stream> Stream::Create(int priority) {
  cudaStream_t stream = nullptr;
  DS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
  return Stream(stream);
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

Stream::~Stream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

Status Stream::Synchronize() const {
  DS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return OkStatus();
}

StatusOr<Event> Event::Create(bool enable_timing) {
  cudaEvent_t event = nullptr;
  DS_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, enable_timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(event);
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

Event::~Event() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

Status Event::Record(cudaStream_t stream) const {
  DS_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream));
  return OkStatus();
}

Status Event::WaitOn(cudaStream_t stream) const {
  DS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, event_, 0));
  return OkStatus();
}

Status Event::Synchronize() const {
  DS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event_));
  return OkStatus();
}

StatusOr<float> Event::ElapsedMs(const Event& start, const Event& end) {
  float ms = 0.0f;
  DS_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

}  // namespace ds::cuda
