// The per-thread "current" CUDA stream that registry kernels launch on.
//
// Kernels in the registry receive no stream argument (OpArgs is device-neutral), so the
// CUDA glue launches on CurrentStream(). The executor (or a test) sets it once per thread:
//
//   ds::cuda::SetCurrentStream(compute_stream);
//   DS_RETURN_IF_ERROR(kernel->forward(args));   // launches on compute_stream
//
// Thread-local: each thread has its own current stream; a new thread starts with the
// legacy default stream (0). Setting does not synchronize anything. Plain CUDA, no ds
// headers, so both nvcc (.cu) and g++ (.cc) code may include it. Needs the toolkit.
#pragma once

#include <cuda_runtime_api.h>

namespace ds::cuda {

// The calling thread's current stream; 0 (the legacy default stream) until set.
cudaStream_t CurrentStream();

// Makes `stream` the calling thread's current stream (0 restores the default).
void SetCurrentStream(cudaStream_t stream);

// Sets the current stream for a scope and restores the previous one on exit.
class ScopedStream {
 public:
  explicit ScopedStream(cudaStream_t stream) : previous_(CurrentStream()) {
    SetCurrentStream(stream);
  }
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;
  ~ScopedStream() { SetCurrentStream(previous_); }

 private:
  cudaStream_t previous_;
};

}  // namespace ds::cuda
