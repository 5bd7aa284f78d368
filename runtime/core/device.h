// The kinds of device a kernel, a memory or a communicator works on. Below every backend:
// the op registry (kernels/registry.h), DeviceMemory and the backends name devices with it.
#pragma once

#include <cstdint>

namespace ds {

enum class Device : uint8_t { kCpu = 0, kCuda = 1 };
const char* DeviceName(Device d);  // "cpu", "cuda"

}  // namespace ds
