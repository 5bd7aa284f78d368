#include "runtime/ckpt/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <unordered_set>

#include "runtime/base/crc32c.h"
#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"

namespace ds::ckpt {
namespace {

// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string OffsetsText(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
}

// Product of dims times element size, or false on overflow.
bool CheckedBytes(const Shape& shape, size_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

// Names unique and not reserved, shapes without overflow, data present where bytes are due.
Status CheckTensorsToWrite(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::unordered_set<std::string> seen;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return InvalidArgumentError(path + ": invalid tensor name '" + t.name + "'");
    }
    if (!seen.insert(t.name).second) {
      return InvalidArgumentError(path + ": duplicate tensor name " + t.name);
    }
    uint64_t bytes = 0;
    if (!CheckedBytes(t.tensor.shape(), DTypeSize(t.tensor.dtype()), &bytes)) {
      return InvalidArgumentError(path + ": tensor " + t.name + " has invalid shape " +
                                  ShapeToString(t.tensor.shape()));
    }
    if (bytes > 0 && !t.tensor.defined()) {
      return InvalidArgumentError(path + ": tensor " + t.name + " has no data");
    }
  }
  return OkStatus();
}

// Indices into `tensors` in data-section order. Largest elements first keeps every tensor
// aligned to its element size (the data section starts 8-aligned).
std::vector<size_t> DataOrder(const std::vector<NamedTensor>& tensors) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return DTypeSize(tensors[a].tensor.dtype()) > DTypeSize(tensors[b].tensor.dtype());
  });
  return order;
}

// The JSON header (metadata, then each tensor's dtype, shape and offsets in `order`), padded
// with spaces to a multiple of 8 bytes.
std::string HeaderText(const std::vector<NamedTensor>& tensors, const std::vector<size_t>& order,
                       const std::map<std::string, std::string>& metadata) {
  Json header = Json::Object();
  if (!metadata.empty()) {
    Json meta = Json::Object();
    for (const auto& [k, v] : metadata) meta.AddMember(k, Json::String(v));
    header.AddMember("__metadata__", std::move(meta));
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = tensors[i].tensor;
    Json entry = Json::Object();
    entry.AddMember("dtype", Json::String(SafetensorsDTypeName(t.dtype())));
    Json shape = Json::Array();
    for (int64_t d : t.shape()) shape.Append(Json::Int(d));
    entry.AddMember("shape", std::move(shape));
    uint64_t end = offset + t.nbytes();
    entry.AddMember("data_offsets", Json::Array({Json::Int(static_cast<int64_t>(offset)),
                                                 Json::Int(static_cast<int64_t>(end))}));
    header.AddMember(tensors[i].name, std::move(entry));
    offset = end;
  }
  std::string text = header.Dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// Appends the tensors' data in `order`, recording each one's CRC and extending `file_crc`.
Status AppendTensorData(const std::vector<NamedTensor>& tensors, const std::vector<size_t>& order,
                        FileWriter* w, uint32_t* file_crc, SafetensorsWriteResult* result) {
  for (size_t i : order) {
    const Tensor& t = tensors[i].tensor;
    if (t.nbytes() == 0) continue;
    result->tensor_crc32c[i] = Crc32c(t.data(), t.nbytes());
    *file_crc = Crc32cExtend(*file_crc, t.data(), t.nbytes());
    DS_RETURN_IF_ERROR(w->Append(t.data(), t.nbytes()));
  }
  return OkStatus();
}

}  // namespace

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU16:
      return "U16";
  }
  return "?";
}

bool ParseSafetensorsDType(const std::string& name, DType* dtype) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::kF32}, {"BF16", DType::kBF16}, {"F16", DType::kF16},
      {"I32", DType::kI32}, {"I64", DType::kI64},   {"U16", DType::kU16}};
  for (const auto& [n, d] : kNames) {
    if (name == n) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

StatusOr<SafetensorsWriteResult> WriteSafetensors(
    const std::string& path, const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  DS_RETURN_IF_ERROR(CheckTensorsToWrite(path, tensors));
  const std::vector<size_t> order = DataOrder(tensors);
  std::string text = HeaderText(tensors, order, metadata);
  uint8_t len_bytes[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(n >> (8 * i));

  SafetensorsWriteResult result;
  result.tensor_crc32c.resize(tensors.size());
  std::string tmp = path + ".tmp";
  DS_ASSIGN_OR_RETURN(std::unique_ptr<FileWriter> w, FileWriter::Create(tmp));
  uint32_t file_crc = Crc32c(len_bytes, 8);
  file_crc = Crc32cExtend(file_crc, text.data(), text.size());
  DS_RETURN_IF_ERROR(w->Append(len_bytes, 8));
  DS_RETURN_IF_ERROR(w->Append(text.data(), text.size()));
  DS_RETURN_IF_ERROR(AppendTensorData(tensors, order, w.get(), &file_crc, &result));
  result.file_bytes = w->bytes_written();
  result.file_crc32c = file_crc;
  DS_RETURN_IF_ERROR(w->SyncAndClose());
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, "rename(" + tmp + ", " + path + ")");
  }
  DS_RETURN_IF_ERROR(SyncDir(DirName(path)));
  return result;
}

StatusOr<std::unique_ptr<SafetensorsStreamWriter>> SafetensorsStreamWriter::Create(
    const std::string& path, const std::vector<std::pair<std::string, TensorSpec>>& specs,
    const std::map<std::string, std::string>& metadata) {
  std::unique_ptr<SafetensorsStreamWriter> w(new SafetensorsStreamWriter());
  w->path_ = path;
  Json header = Json::Object();
  if (!metadata.empty()) {
    Json meta = Json::Object();
    for (const auto& [k, v] : metadata) meta.AddMember(k, Json::String(v));
    header.AddMember("__metadata__", std::move(meta));
  }
  std::unordered_set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, spec] : specs) {
    uint64_t bytes = 0;
    const size_t elem = DTypeSize(spec.dtype);
    if (name.empty() || name == "__metadata__" || !seen.insert(name).second) {
      return InvalidArgumentError(path + ": invalid or duplicate tensor name '" + name + "'");
    }
    if (!CheckedBytes(spec.shape, elem, &bytes)) {
      return InvalidArgumentError(path + ": tensor " + name + " has invalid shape " +
                                  ShapeToString(spec.shape));
    }
    if (offset % elem != 0) {
      return InvalidArgumentError(path + ": tensor " + name +
                                  " would be misaligned; list larger elements first");
    }
    Json entry = Json::Object();
    entry.AddMember("dtype", Json::String(SafetensorsDTypeName(spec.dtype)));
    Json shape = Json::Array();
    for (int64_t d : spec.shape) shape.Append(Json::Int(d));
    entry.AddMember("shape", std::move(shape));
    entry.AddMember("data_offsets", Json::Array({Json::Int(static_cast<int64_t>(offset)),
                                                 Json::Int(static_cast<int64_t>(offset + bytes))}));
    header.AddMember(name, std::move(entry));
    offset += bytes;
    w->ends_.push_back(offset);
  }
  std::string text = header.Dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
  DS_ASSIGN_OR_RETURN(w->out_, FileWriter::Create(path + ".tmp"));
  DS_RETURN_IF_ERROR(w->out_->Append(len_bytes, 8));
  DS_RETURN_IF_ERROR(w->out_->Append(text.data(), text.size()));
  w->result_.file_crc32c = Crc32cExtend(Crc32c(len_bytes, 8), text.data(), text.size());
  w->result_.tensor_crc32c.assign(specs.size(), 0);
  return w;
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (finished_) return;
  out_.reset();
  ::unlink((path_ + ".tmp").c_str());
}

Status SafetensorsStreamWriter::Append(const void* data, size_t n) {
  const uint64_t total = ends_.empty() ? 0 : ends_.back();
  if (finished_ || written_ + n > total) {
    return FailedPreconditionError(path_ + ": more data than the header's tensors hold");
  }
  const auto* p = static_cast<const uint8_t*>(data);
  size_t left = n;
  while (left > 0) {  // split at tensor boundaries for the per-tensor checksums
    while (written_ == ends_[current_]) ++current_;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(left, ends_[current_] - written_));
    uint32_t& crc = result_.tensor_crc32c[current_];
    crc = Crc32cExtend(crc, p, take);
    p += take;
    left -= take;
    written_ += take;
  }
  result_.file_crc32c = Crc32cExtend(result_.file_crc32c, data, n);
  return out_->Append(data, n);
}

StatusOr<SafetensorsWriteResult> SafetensorsStreamWriter::Finish() {
  const uint64_t total = ends_.empty() ? 0 : ends_.back();
  if (finished_ || written_ != total) {
    return FailedPreconditionError(path_ + ": " + std::to_string(written_) + " of " +
                                   std::to_string(total) + " data bytes appended");
  }
  result_.file_bytes = out_->bytes_written();
  DS_RETURN_IF_ERROR(out_->SyncAndClose());
  const std::string tmp = path_ + ".tmp";
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    return ErrnoToStatus(errno, "rename(" + tmp + ", " + path_ + ")");
  }
  finished_ = true;
  DS_RETURN_IF_ERROR(SyncDir(DirName(path_)));
  return result_;
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile f;
  DS_ASSIGN_OR_RETURN(f.file_, MappedFile::Open(path));
  Status s = f.Parse();
  if (!s.ok()) return s.WithPrefix(path);
  return f;
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

StatusOr<Tensor> SafetensorsFile::Get(const std::string& name) const {
  const SafetensorsEntry* e = Find(name);
  if (e == nullptr) return NotFoundError(path() + ": no tensor named " + name);
  return e->view();
}

StatusOr<OwnedTensor> SafetensorsFile::CopyOut(const std::string& name,
                                               std::optional<DType> dtype) const {
  DS_ASSIGN_OR_RETURN(Tensor t, Get(name));
  StatusOr<OwnedTensor> out = CopyTensorAs(t, dtype.value_or(t.dtype()));
  if (!out.ok()) return out.status().WithPrefix(path() + ": tensor " + name);
  return out;
}

namespace {

// Parses one header entry (everything but the data pointer).
Status ParseEntry(const std::string& name, const Json& j, SafetensorsEntry* e) {
  e->name = name;
  const std::string what = "tensor " + name;
  if (!j.is_object()) return DataLossError(what + ": header entry is not an object");
  const Json* dtype = j.Find("dtype");
  const Json* shape = j.Find("shape");
  const Json* offsets = j.Find("data_offsets");
  if (dtype == nullptr || !dtype->is_string()) return DataLossError(what + ": missing dtype");
  if (!ParseSafetensorsDType(dtype->as_string(), &e->spec.dtype)) {
    return DataLossError(what + ": unknown dtype '" + dtype->as_string() + "'");
  }
  if (shape == nullptr || !shape->is_array()) return DataLossError(what + ": missing shape");
  for (const Json& d : shape->items()) {
    if (!d.is_int() || d.as_int() < 0) return DataLossError(what + ": invalid shape entry");
    e->spec.shape.push_back(d.as_int());
  }
  if (offsets == nullptr || !offsets->is_array() || offsets->items().size() != 2 ||
      !offsets->items()[0].is_int() || !offsets->items()[1].is_int() ||
      offsets->items()[0].as_int() < 0 || offsets->items()[1].as_int() < 0) {
    return DataLossError(what + ": data_offsets must be two non-negative integers");
  }
  e->begin = static_cast<uint64_t>(offsets->items()[0].as_int());
  e->end = static_cast<uint64_t>(offsets->items()[1].as_int());
  if (e->end < e->begin) {
    return DataLossError(what + ": data_offsets " + OffsetsText(e->begin, e->end) +
                         " end before begin");
  }
  uint64_t need = 0;
  if (!CheckedBytes(e->spec.shape, DTypeSize(e->spec.dtype), &need)) {
    return DataLossError(what + ": shape " + ShapeToString(e->spec.shape) + " overflows");
  }
  if (need != e->nbytes()) {
    return DataLossError(what + ": data_offsets " + OffsetsText(e->begin, e->end) + " span " +
                         std::to_string(e->nbytes()) + " bytes but shape " +
                         ShapeToString(e->spec.shape) + " of " + dtype->as_string() + " needs " +
                         std::to_string(need));
  }
  return OkStatus();
}

// The header's JSON object, from the file's bytes; *data_start: where the data section begins.
StatusOr<Json> HeaderJson(const uint8_t* data, uint64_t size, uint64_t* data_start) {
  if (size < 8) {
    return DataLossError("file is " + std::to_string(size) +
                         " bytes, too short for the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > size - 8) {
    return DataLossError("header length " + std::to_string(n) + " larger than file (" +
                         std::to_string(size) + " bytes)");
  }
  if (n > kMaxHeaderBytes) {
    return DataLossError("header length " + std::to_string(n) + " exceeds the 100 MB limit");
  }
  *data_start = 8 + n;
  std::string_view text(reinterpret_cast<const char*>(data) + 8, n);
  if (text.empty() || text[0] != '{') return DataLossError("invalid header JSON: not an object");
  StatusOr<Json> header = ParseJson(text);
  if (!header.ok()) return DataLossError("invalid header JSON: " + header.status().message());
  if (!header->is_object()) return DataLossError("invalid header JSON: not an object");
  return header;
}

// Tensors must tile the data section (`data`, `data_bytes` long) exactly, in offset order:
// sorts the entries so and points each at its bytes.
Status TileData(std::vector<SafetensorsEntry>* entries, const uint8_t* data, uint64_t data_bytes) {
  std::stable_sort(entries->begin(), entries->end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
                   });
  uint64_t cursor = 0;
  const SafetensorsEntry* prev = nullptr;
  for (SafetensorsEntry& e : *entries) {
    if (e.end > data_bytes) {
      return DataLossError("tensor " + e.name + ": data_offsets " + OffsetsText(e.begin, e.end) +
                           " out of range (data section is " + std::to_string(data_bytes) +
                           " bytes)");
    }
    if (e.begin < cursor) {
      return DataLossError("tensor " + e.name + ": data_offsets " + OffsetsText(e.begin, e.end) +
                           " overlap tensor " + prev->name);
    }
    if (e.begin > cursor) {
      return DataLossError("tensor " + e.name + ": gap of " + std::to_string(e.begin - cursor) +
                           " bytes before its data_offsets " + OffsetsText(e.begin, e.end));
    }
    e.data = data + e.begin;
    cursor = e.end;
    prev = &e;
  }
  if (cursor != data_bytes) {
    return DataLossError(std::to_string(data_bytes - cursor) +
                         " trailing bytes after the last tensor");
  }
  return OkStatus();
}

}  // namespace

Status SafetensorsFile::Parse() {
  const uint64_t size = file_.size();
  DS_ASSIGN_OR_RETURN(const Json header, HeaderJson(file_.data(), size, &data_start_));
  bool have_meta = false;
  for (const auto& [name, value] : header.members()) {
    if (name == "__metadata__") {
      if (have_meta) return DataLossError("duplicate __metadata__");
      have_meta = true;
      if (!value.is_object()) return DataLossError("__metadata__ is not an object");
      for (const auto& [k, v] : value.members()) {
        if (!v.is_string()) return DataLossError("__metadata__ value of " + k + " not a string");
        metadata_[k] = v.as_string();
      }
      continue;
    }
    if (index_.count(name)) return DataLossError("duplicate tensor name " + name);
    SafetensorsEntry e;
    DS_RETURN_IF_ERROR(ParseEntry(name, value, &e));
    index_[name] = entries_.size();
    entries_.push_back(std::move(e));
  }
  DS_RETURN_IF_ERROR(TileData(&entries_, file_.data() + data_start_, size - data_start_));
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
  return OkStatus();
}

StatusOr<OwnedTensor> CopyTensorAs(const Tensor& src, DType dtype) {
  OwnedTensor out(src.shape(), dtype);
  const int64_t n = src.numel();
  if (n == 0) return out;
  void* dst = out.view().data();
  if (src.dtype() == dtype) {
    std::memcpy(dst, src.data(), src.nbytes());
    return out;
  }
  if (!IsFloat(src.dtype()) || !IsFloat(dtype)) {
    return InvalidArgumentError(std::string("cannot convert ") + DTypeName(src.dtype()) + " to " +
                                DTypeName(dtype));
  }
  // Widen to f32 (in place when the target is f32), then narrow.
  OwnedTensor wide;
  float* f32 = static_cast<float*>(dst);
  if (dtype != DType::kF32) {
    wide = OwnedTensor(src.shape(), DType::kF32);
    f32 = wide.f32();
  }
  switch (src.dtype()) {
    case DType::kF32:
      std::memcpy(f32, src.data(), n * sizeof(float));
      break;
    case DType::kBF16:
      ConvertBf16ToF32(src.u16(), f32, n);
      break;
    case DType::kF16:
      ConvertF16ToF32(src.u16(), f32, n);
      break;
    default:
      break;
  }
  if (dtype == DType::kBF16) ConvertF32ToBf16(f32, static_cast<uint16_t*>(dst), n);
  if (dtype == DType::kF16) ConvertF32ToF16(f32, static_cast<uint16_t*>(dst), n);
  return out;
}

}  // namespace ds::ckpt
