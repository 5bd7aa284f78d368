#include "runtime/ckpt/manifest.h"

#include <set>
#include <utility>

#include "runtime/base/crc32c.h"
#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"

namespace ds::ckpt {
namespace {

constexpr char kFormatName[] = "ds-checkpoint";

Json ShapeJson(const Shape& s) {
  Json a = Json::Array();
  for (int64_t d : s) a.Append(Json::Int(d));
  return a;
}

// Typed field access with errors naming the field's context.
StatusOr<const Json*> Field(const Json& obj, const char* key, const std::string& ctx) {
  const Json* v = obj.is_object() ? obj.Find(key) : nullptr;
  if (v == nullptr) return DataLossError(ctx + ": missing \"" + key + "\"");
  return v;
}

StatusOr<std::string> StringField(const Json& obj, const char* key, const std::string& ctx) {
  DS_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  if (!v->is_string()) return DataLossError(ctx + ": \"" + key + "\" is not a string");
  return v->as_string();
}

StatusOr<int64_t> IntField(const Json& obj, const char* key, const std::string& ctx) {
  DS_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  if (!v->is_int() || v->as_int() < 0) {
    return DataLossError(ctx + ": \"" + key + "\" is not a non-negative integer");
  }
  return v->as_int();
}

StatusOr<uint32_t> CrcField(const Json& obj, const std::string& ctx) {
  DS_ASSIGN_OR_RETURN(std::string hex, StringField(obj, "crc32c", ctx));
  uint32_t crc = 0;
  if (!ParseCrc32cHex(hex, &crc)) return DataLossError(ctx + ": bad crc32c '" + hex + "'");
  return crc;
}

StatusOr<Shape> ShapeField(const Json& obj, const char* key, const std::string& ctx) {
  DS_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  if (!v->is_array()) return DataLossError(ctx + ": \"" + key + "\" is not an array");
  Shape s;
  for (const Json& d : v->items()) {
    if (!d.is_int() || d.as_int() < 0) return DataLossError(ctx + ": bad \"" + key + "\" entry");
    s.push_back(d.as_int());
  }
  return s;
}

bool ValidFileName(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos;
}

StatusOr<TensorRecord> ParseTensor(const Json& j, const std::set<std::string>& files) {
  TensorRecord t;
  DS_ASSIGN_OR_RETURN(t.name, StringField(j, "name", "manifest tensor entry"));
  const std::string ctx = "manifest tensor " + t.name;
  DS_ASSIGN_OR_RETURN(t.file, StringField(j, "file", ctx));
  if (!files.count(t.file)) return DataLossError(ctx + ": file " + t.file + " is not listed");
  DS_ASSIGN_OR_RETURN(std::string dtype, StringField(j, "dtype", ctx));
  if (!ParseDType(dtype, &t.spec.dtype)) return DataLossError(ctx + ": bad dtype " + dtype);
  DS_ASSIGN_OR_RETURN(t.spec.shape, ShapeField(j, "shape", ctx));
  DS_ASSIGN_OR_RETURN(t.crc32c, CrcField(j, ctx));
  if (const Json* shard = j.Find("shard"); shard != nullptr && !shard->is_null()) {
    ShardRecord s;
    DS_ASSIGN_OR_RETURN(s.global_shape, ShapeField(*shard, "global_shape", ctx + " shard"));
    if (const Json* flat = shard->Find("flat_offset"); flat != nullptr) {
      if (!flat->is_int() || flat->as_int() < 0) {
        return DataLossError(ctx + " shard: flat_offset must be an integer >= 0");
      }
      s.flat_offset = flat->as_int();
      if (const Json* stride = shard->Find("row_stride"); stride != nullptr) {
        if (!stride->is_int() || stride->as_int() < 1)
          return DataLossError(ctx + " shard: row_stride must be an integer >= 1");
        s.row_stride = stride->as_int();
      }
    } else {
      DS_ASSIGN_OR_RETURN(s.offset, ShapeField(*shard, "offset", ctx + " shard"));
    }
    Status v = ValidateShard(t.name, t.spec.shape, s);
    if (!v.ok()) return DataLossError("manifest " + v.message());
    t.shard = std::move(s);
  }
  return t;
}

}  // namespace

Status ValidateShard(const std::string& tensor, const Shape& shape, const ShardRecord& shard) {
  if (shard.flat()) {
    const bool strided = shard.row_stride > 0;
    if (shape.size() != (strided ? 2u : 1u) || !shard.offset.empty()) {
      return InvalidArgumentError("tensor " + tensor + ": a " + (strided ? "strided" : "flat") +
                                  " shard must be " + (strided ? "2-D" : "1-D") + ", not " +
                                  ShapeToString(shape));
    }
    for (int64_t d : shard.global_shape) {
      if (d < 0) return InvalidArgumentError("tensor " + tensor + ": bad global shape");
    }
    const int64_t n = shape.back(), rows = strided ? shape[0] : 1;
    if (strided && shard.row_stride < n)
      return InvalidArgumentError("tensor " + tensor + ": row_stride " +
                                  std::to_string(shard.row_stride) + " is below its rows' " +
                                  std::to_string(n) + " elements");
    const int64_t end = shard.flat_offset + (rows - 1) * shard.row_stride + n;
    if (rows > 0 && end > NumElements(shard.global_shape)) {
      return InvalidArgumentError("tensor " + tensor + ": flat shard [" +
                                  std::to_string(shard.flat_offset) + ", " + std::to_string(end) +
                                  ") exceeds global shape " + ShapeToString(shard.global_shape));
    }
    return OkStatus();
  }
  if (shard.global_shape.size() != shape.size() || shard.offset.size() != shape.size()) {
    return InvalidArgumentError("tensor " + tensor + ": shard rank differs from shape " +
                                ShapeToString(shape));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shard.offset[i] < 0 || shard.offset[i] + shape[i] > shard.global_shape[i]) {
      return InvalidArgumentError("tensor " + tensor + ": shard offset " +
                                  ShapeToString(shard.offset) + " + shape " + ShapeToString(shape) +
                                  " exceeds global shape " + ShapeToString(shard.global_shape));
    }
  }
  return OkStatus();
}

std::string ManifestToJson(const Manifest& m) {
  Json root = Json::Object();
  root.AddMember("format", Json::String(kFormatName));
  root.AddMember("version", Json::Int(Manifest::kVersion));
  root.AddMember("step", Json::Int(m.step));
  Json files = Json::Array();
  for (const FileRecord& f : m.files) {
    Json j = Json::Object();
    j.AddMember("name", Json::String(f.name));
    j.AddMember("bytes", Json::Int(static_cast<int64_t>(f.bytes)));
    j.AddMember("crc32c", Json::String(Crc32cHex(f.crc32c)));
    files.Append(std::move(j));
  }
  root.AddMember("files", std::move(files));
  Json tensors = Json::Array();
  for (const TensorRecord& t : m.tensors) {
    Json j = Json::Object();
    j.AddMember("name", Json::String(t.name));
    j.AddMember("file", Json::String(t.file));
    j.AddMember("dtype", Json::String(DTypeName(t.spec.dtype)));
    j.AddMember("shape", ShapeJson(t.spec.shape));
    j.AddMember("crc32c", Json::String(Crc32cHex(t.crc32c)));
    if (t.shard) {
      Json s = Json::Object();
      s.AddMember("global_shape", ShapeJson(t.shard->global_shape));
      if (t.shard->flat()) {
        s.AddMember("flat_offset", Json::Int(t.shard->flat_offset));
        if (t.shard->row_stride > 0) s.AddMember("row_stride", Json::Int(t.shard->row_stride));
      } else {
        s.AddMember("offset", ShapeJson(t.shard->offset));
      }
      j.AddMember("shard", std::move(s));
    }
    tensors.Append(std::move(j));
  }
  root.AddMember("tensors", std::move(tensors));
  Json info = Json::Object();
  for (const auto& [k, v] : m.info) info.AddMember(k, Json::String(v));
  root.AddMember("info", std::move(info));
  return root.Dump(2) + "\n";
}

StatusOr<Manifest> ParseManifest(std::string_view text) {
  StatusOr<Json> parsed = ParseJson(text);
  if (!parsed.ok())
    return DataLossError("manifest is not valid JSON: " + parsed.status().message());
  const Json& root = *parsed;
  if (!root.is_object()) return DataLossError("manifest is not a JSON object");
  DS_ASSIGN_OR_RETURN(std::string format, StringField(root, "format", "manifest"));
  if (format != kFormatName) return DataLossError("manifest format is '" + format + "'");
  DS_ASSIGN_OR_RETURN(int64_t version, IntField(root, "version", "manifest"));
  if (version > Manifest::kVersion) {
    return DataLossError("manifest version " + std::to_string(version) + " is newer than " +
                         std::to_string(Manifest::kVersion));
  }
  Manifest m;
  DS_ASSIGN_OR_RETURN(m.step, IntField(root, "step", "manifest"));
  DS_ASSIGN_OR_RETURN(const Json* files, Field(root, "files", "manifest"));
  if (!files->is_array()) return DataLossError("manifest: \"files\" is not an array");
  std::set<std::string> file_names;
  for (const Json& j : files->items()) {
    FileRecord f;
    DS_ASSIGN_OR_RETURN(f.name, StringField(j, "name", "manifest file entry"));
    const std::string ctx = "manifest file " + f.name;
    if (!ValidFileName(f.name)) return DataLossError(ctx + ": invalid name");
    if (!file_names.insert(f.name).second) return DataLossError(ctx + ": listed twice");
    DS_ASSIGN_OR_RETURN(int64_t bytes, IntField(j, "bytes", ctx));
    f.bytes = static_cast<uint64_t>(bytes);
    DS_ASSIGN_OR_RETURN(f.crc32c, CrcField(j, ctx));
    m.files.push_back(std::move(f));
  }
  DS_ASSIGN_OR_RETURN(const Json* tensors, Field(root, "tensors", "manifest"));
  if (!tensors->is_array()) return DataLossError("manifest: \"tensors\" is not an array");
  std::set<std::pair<std::string, std::string>> seen;
  for (const Json& j : tensors->items()) {
    DS_ASSIGN_OR_RETURN(TensorRecord t, ParseTensor(j, file_names));
    if (!seen.insert({t.file, t.name}).second) {
      return DataLossError("manifest tensor " + t.name + " listed twice in " + t.file);
    }
    m.tensors.push_back(std::move(t));
  }
  if (const Json* info = root.Find("info"); info != nullptr) {
    if (!info->is_object()) return DataLossError("manifest: \"info\" is not an object");
    for (const auto& [k, v] : info->members()) {
      if (!v.is_string()) return DataLossError("manifest: info." + k + " is not a string");
      m.info[k] = v.as_string();
    }
  }
  return m;
}

}  // namespace ds::ckpt
