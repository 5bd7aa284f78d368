#include "parallel/comm/reduce.h"

#include "runtime/base/check.h"

namespace ds::parallel {
namespace {

// NaN-propagating max: a NaN on either side wins (an overflow check must see it).
template <typename T>
inline T Max(T a, T b) {
  return (b > a || b != b) ? b : a;
}

template <typename T>
void Combine(T* acc, const T* src, int64_t n, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (int64_t i = 0; i < n; ++i) acc[i] += src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) acc[i] = Max(acc[i], src[i]);
  }
}

// Integer sums wrap instead of overflowing (undefined for signed types).
template <typename T, typename U>
void CombineInt(T* acc, const T* src, int64_t n, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (int64_t i = 0; i < n; ++i) {
      acc[i] = static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(src[i]));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] < src[i] ? src[i] : acc[i];
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Combine16(uint16_t* acc, const uint16_t* src, int64_t n, ReduceOp op) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = ToFloat(acc[i]);
    const float b = ToFloat(src[i]);
    acc[i] = FromFloat(op == ReduceOp::kSum ? a + b : Max(a, b));
  }
}

}  // namespace

bool CanReduce(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
    case DType::kI32:
    case DType::kI64:
      return true;
    default:
      return false;
  }
}

void ReduceInto(void* acc, const void* src, int64_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
      return Combine(static_cast<float*>(acc), static_cast<const float*>(src), count, op);
    case DType::kI32:
      return CombineInt<int32_t, uint32_t>(static_cast<int32_t*>(acc),
                                           static_cast<const int32_t*>(src), count, op);
    case DType::kI64:
      return CombineInt<int64_t, uint64_t>(static_cast<int64_t*>(acc),
                                           static_cast<const int64_t*>(src), count, op);
    case DType::kBF16:
      return Combine16<Bf16ToFloat, FloatToBf16>(static_cast<uint16_t*>(acc),
                                                 static_cast<const uint16_t*>(src), count, op);
    case DType::kF16:
      return Combine16<F16ToFloat, FloatToF16>(static_cast<uint16_t*>(acc),
                                               static_cast<const uint16_t*>(src), count, op);
    default:
      DS_CHECK(false, "ReduceInto: {} is not reducible", DTypeName(dtype));
  }
}

}  // namespace ds::parallel
