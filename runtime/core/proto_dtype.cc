#include "runtime/core/proto_dtype.h"

namespace ds {

StatusOr<DType> FromProtoDType(proto::DataType t, const std::string& where) {
  switch (t) {
    case proto::DT_F32:
      return DType::kF32;
    case proto::DT_BF16:
      return DType::kBF16;
    case proto::DT_F16:
      return DType::kF16;
    case proto::DT_I32:
      return DType::kI32;
    case proto::DT_I64:
      return DType::kI64;
    case proto::DT_U16:
      return DType::kU16;
    default:
      return InvalidArgumentError(where + ": missing or invalid dtype");
  }
}

proto::DataType ToProtoDType(DType t) {
  switch (t) {
    case DType::kF32:
      return proto::DT_F32;
    case DType::kBF16:
      return proto::DT_BF16;
    case DType::kF16:
      return proto::DT_F16;
    case DType::kI32:
      return proto::DT_I32;
    case DType::kI64:
      return proto::DT_I64;
    case DType::kU16:
      return proto::DT_U16;
  }
  return proto::DT_INVALID;
}

int64_t ProtoDTypeSize(proto::DataType t) {
  switch (t) {
    case proto::DT_F32:
    case proto::DT_I32:
      return 4;
    case proto::DT_BF16:
    case proto::DT_F16:
    case proto::DT_U16:
      return 2;
    case proto::DT_I64:
      return 8;
    default:
      return 0;
  }
}

}  // namespace ds
