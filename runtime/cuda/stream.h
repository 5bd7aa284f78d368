// RAII owners of a cudaStream_t and a cudaEvent_t (STYLE 3.5). Move-only; the
// destructor destroys the handle (errors there are ignored: nothing can act on them).
// An object is used by one thread at a time; the CUDA calls themselves are thread-safe.
// Needs the toolkit: the target is empty without it.
//
//   DS_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create());
//   DS_ASSIGN_OR_RETURN(cuda::Event done, cuda::Event::Create());
//   DS_RETURN_IF_ERROR(done.Record(stream.get()));
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/base/status.h"

namespace ds::cuda {

class Stream {
 public:
  // A non-blocking stream (no implicit sync with the legacy default stream) on the
  // current device. Unavailable when there is no GPU.
  static StatusOr<Stream> Create(int priority = 0);

  Stream(Stream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  cudaStream_t get() const { return stream_; }
  // Blocks until all work queued so far has finished; returns its first error.
  Status Synchronize() const;

 private:
  explicit Stream(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  // With timing enabled (for benchmarks) or disabled (cheaper, for stream ordering).
  static StatusOr<Event> Create(bool enable_timing = false);

  Event(Event&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  cudaEvent_t get() const { return event_; }
  // Captures the work queued on `stream` so far.
  Status Record(cudaStream_t stream) const;
  // Makes `stream` wait (on the device, not the host) for this event.
  Status WaitOn(cudaStream_t stream) const;
  // Blocks the host until the recorded work has finished.
  Status Synchronize() const;
  // Milliseconds between two completed events created with enable_timing.
  static StatusOr<float> ElapsedMs(const Event& start, const Event& end);

 private:
  explicit Event(cudaEvent_t event) : event_(event) {}
  cudaEvent_t event_ = nullptr;
};

}  // namespace ds::cuda
