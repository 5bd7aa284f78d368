#include "runtime/core/device.h"

namespace ds {

const char* DeviceName(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

}  // namespace ds
