// DS_CHECK(cond, fmt, args...): aborts with a message on a programmer error.
// Never for input, config, I/O or peer failures: those return Status.
#pragma once

#include <fmt/format.h>

namespace ds::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace ds::internal

#define DS_CHECK(cond, ...)                                                             \
  do {                                                                                  \
    if (__builtin_expect(!(cond), 0))                                                   \
      ::ds::internal::CheckFailed(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)

#ifdef NDEBUG
#define DS_DCHECK(cond, ...) \
  do {                       \
  } while (0)
#else
#define DS_DCHECK(cond, ...) DS_CHECK(cond, __VA_ARGS__)
#endif
