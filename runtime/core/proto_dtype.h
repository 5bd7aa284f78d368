// Conversions between the schemas' DataType (proto/graph.proto) and DType, once for every
// package that reads graphs, plans or checkpoints.
#pragma once

#include <cstdint>
#include <string>

#include "proto/graph.pb.h"
#include "runtime/base/status.h"
#include "runtime/core/dtype.h"

namespace ds {

// InvalidArgument "<where>: missing or invalid dtype" for DT_INVALID or an unknown value.
StatusOr<DType> FromProtoDType(proto::DataType t, const std::string& where);
proto::DataType ToProtoDType(DType t);
// Bytes per element; 0 for DT_INVALID.
int64_t ProtoDTypeSize(proto::DataType t);

}  // namespace ds
