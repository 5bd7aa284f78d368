#include "runtime/base/runtime_home.h"

#include <cstdlib>

namespace ds {

std::string RuntimeHome() {
  if (const char* h = std::getenv("DS_RUNTIME_HOME")) return h;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.ds-runtime";
}

}  // namespace ds
