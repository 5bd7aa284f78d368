#include "parallel/comm/reduce.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

namespace ds::parallel {
namespace {

TEST_CASE("ReduceInto: f32 sum and NaN-propagating max", "[parallel][reduce]") {
  std::vector<float> acc = {1, 2, 3, NAN, 5};
  std::vector<float> src = {10, -20, NAN, 1, 5};
  std::vector<float> sum = acc;
  ReduceInto(sum.data(), src.data(), 5, DType::kF32, ReduceOp::kSum);
  CHECK(sum[0] == 11);
  CHECK(sum[1] == -18);
  CHECK(std::isnan(sum[2]));
  ReduceInto(acc.data(), src.data(), 5, DType::kF32, ReduceOp::kMax);
  CHECK(acc[0] == 10);
  CHECK(acc[1] == 2);
  CHECK(std::isnan(acc[2]));
  CHECK(std::isnan(acc[3]));
  CHECK(acc[4] == 5);
}

TEST_CASE("ReduceInto: integers wrap, 16-bit floats round once per call", "[parallel][reduce]") {
  std::vector<int32_t> i = {std::numeric_limits<int32_t>::max(), -5};
  std::vector<int32_t> j = {1, 3};
  ReduceInto(i.data(), j.data(), 2, DType::kI32, ReduceOp::kSum);
  CHECK(i[0] == std::numeric_limits<int32_t>::min());
  CHECK(i[1] == -2);
  std::vector<int64_t> l = {4, -9}, m = {7, -10};
  ReduceInto(l.data(), m.data(), 2, DType::kI64, ReduceOp::kMax);
  CHECK(l == std::vector<int64_t>{7, -9});

  std::vector<uint16_t> a = {FloatToBf16(1.5f), FloatToBf16(-2.0f)};
  std::vector<uint16_t> b = {FloatToBf16(0.25f), FloatToBf16(3.0f)};
  ReduceInto(a.data(), b.data(), 2, DType::kBF16, ReduceOp::kSum);
  CHECK(Bf16ToFloat(a[0]) == 1.75f);
  CHECK(Bf16ToFloat(a[1]) == 1.0f);
  std::vector<uint16_t> h = {FloatToF16(65504.0f)}, k = {FloatToF16(65504.0f)};
  ReduceInto(h.data(), k.data(), 1, DType::kF16, ReduceOp::kSum);
  CHECK(std::isinf(F16ToFloat(h[0])));  // overflow shows as inf, as loss scaling expects
  CHECK(CanReduce(DType::kF32));
  CHECK_FALSE(CanReduce(DType::kU16));
}

}  // namespace
}  // namespace ds::parallel
