// One thread_local definition, so every library sees the same per-thread stream.
#include "runtime/cuda/stream_context.h"

namespace ds::cuda {
namespace {
thread_local cudaStream_t current_stream = nullptr;
}  // namespace

cudaStream_t CurrentStream() { return current_stream; }

void SetCurrentStream(cudaStream_t stream) { current_stream = stream; }

}  // namespace ds::cuda
