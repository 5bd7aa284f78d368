#include "runtime/base/status.h"

#include <catch2/catch.hpp>

#include "runtime/base/status_macros.h"

namespace ds {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  DS_ASSIGN_OR_RETURN(int h, Half(x));
  DS_ASSIGN_OR_RETURN(*out, Half(h));
  return OkStatus();
}

TEST_CASE("Status: codes, messages and macros", "[base]") {
  CHECK(OkStatus().ok());
  Status s = NotFoundError("x.pb");
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.ToString() == "NOT_FOUND: x.pb");
  CHECK(s.WithPrefix("load").message() == "load: x.pb");
  CHECK(static_cast<int>(StatusCode::kUnauthenticated) == 16);  // gRPC's number
  int q = 0;
  CHECK(Quarter(8, &q).ok());
  CHECK(q == 2);
  Status e = Quarter(6, &q);
  CHECK(e.code() == StatusCode::kInvalidArgument);
  CHECK(e.message() == "odd: 3");
  CHECK(ErrnoToStatus(ENOENT, "open(a)").code() == StatusCode::kNotFound);
}

}  // namespace
}  // namespace ds
