// GPU tests' plain copies of host vectors to and from the device (cudaMalloc'd; the caller
// cudaFrees), failing the test case on any CUDA error. Include only where DS_HAVE_CUDA.
//
//   float* d = testing::Upload(host);
//   std::vector<float> back = testing::Download(d, host.size());  // synchronizes first
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

namespace ds::testing {

template <typename T>
T* Upload(const std::vector<T>& host) {
  T* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, std::max<size_t>(1, host.size() * sizeof(T))) == cudaSuccess);
  REQUIRE(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  return dev;
}

template <typename T>
std::vector<T> Download(const T* dev, size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

}  // namespace ds::testing
