// Import/export entry points and the shared conversion machinery; the per-family name
// tables are in hf_families.cc.
#include "runtime/ckpt/hf_names.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/hf_internal.h"
#include "runtime/ckpt/hf_shards.h"
#include "runtime/ckpt/hf_weights.h"
#include "runtime/ckpt/tensor_ops.h"

namespace ds::ckpt {
namespace internal {

Status TensorSource::Add(const std::string& key, const std::string& shown, const Tensor& t) {
  if (!tensors_.emplace(key, Entry{shown, t}).second) {
    return InvalidArgumentError(label_ + ": tensor " + shown + " appears twice (as " +
                                tensors_.at(key).shown + ")");
  }
  return OkStatus();
}

StatusOr<Tensor> TensorSource::Peek(const std::string& key) const {
  auto it = tensors_.find(key);
  if (it == tensors_.end()) return InvalidArgumentError(label_ + ": missing tensor " + key);
  return it->second.tensor;
}

StatusOr<Tensor> TensorSource::Take(const std::string& key, const Shape& expected) {
  DS_ASSIGN_OR_RETURN(Tensor t, Peek(key));
  if (t.shape() != expected) {
    return InvalidArgumentError(label_ + ": tensor " + tensors_.at(key).shown + " has shape " +
                                ShapeToString(t.shape()) + ", expected " + ShapeToString(expected));
  }
  used_.insert(key);
  return t;
}

int TensorSource::CountLayers(const std::string& prefix) const {
  int n = 0;
  for (const auto& [key, entry] : tensors_) {
    if (key.rfind(prefix, 0) != 0) continue;
    size_t i = prefix.size(), j = i;
    while (j < key.size() && key[j] >= '0' && key[j] <= '9') ++j;
    if (j == i || j - i > 6 || j >= key.size() || key[j] != '.') continue;
    n = std::max(n, std::atoi(key.substr(i, j - i).c_str()) + 1);
  }
  return n;
}

Status TensorSource::Finish() const {
  for (const auto& [key, entry] : tensors_) {
    if (!used_.count(key)) return InvalidArgumentError(label_ + ": unknown tensor " + entry.shown);
  }
  return OkStatus();
}

Status Emit(const std::string& name, const Tensor& t, bool transpose, DType dtype,
            std::vector<OwnedNamedTensor>* out) {
  StatusOr<OwnedTensor> conv = CopyTensorAs(t, IsFloat(t.dtype()) ? dtype : t.dtype());
  if (!conv.ok()) return conv.status().WithPrefix("tensor " + name);
  if (transpose) {
    DS_ASSIGN_OR_RETURN(OwnedTensor tr, Transpose2D(conv->view()));
    out->push_back({name, std::move(tr)});
  } else {
    out->push_back({name, std::move(conv).value()});
  }
  return OkStatus();
}

Status ApplyRule(const Rule& rule, Direction dir, const std::string& hf_prefix,
                 const std::string& ours_prefix, const Dims& d, TensorSource& src,
                 std::vector<OwnedNamedTensor>* out) {
  Shape ours = rule.shape(d);
  if (dir == Direction::kExport) {
    DS_ASSIGN_OR_RETURN(Tensor t, src.Take(ours_prefix + rule.ours, ours));
    return Emit(hf_prefix + rule.hf, t, rule.transpose, src.dtype(), out);
  }
  Shape hf = rule.transpose ? Shape{ours[1], ours[0]} : ours;
  DS_ASSIGN_OR_RETURN(Tensor t, src.Take(hf_prefix + rule.hf, hf));
  return Emit(ours_prefix + rule.ours, t, rule.transpose, src.dtype(), out);
}

}  // namespace internal

namespace {

using internal::Direction;
using internal::TensorSource;

constexpr char kGpt2Prefix[] = "transformer.";

StatusOr<std::vector<OwnedNamedTensor>> Convert(ModelFamily family, Direction dir,
                                                const std::vector<NamedTensor>& in,
                                                const std::string& source, const HfOptions& o) {
  if (!IsFloat(o.dtype)) {
    return InvalidArgumentError(std::string("output dtype must be a float type, got ") +
                                DTypeName(o.dtype));
  }
  TensorSource src(source, o.dtype);
  for (const NamedTensor& t : in) {
    std::string key = t.name;
    // HF GPT-2 files come with and without the GPT2LMHeadModel prefix.
    if (family == ModelFamily::kGpt2 && dir == Direction::kImport &&
        key.rfind(kGpt2Prefix, 0) == 0) {
      key = key.substr(sizeof(kGpt2Prefix) - 1);
    }
    DS_RETURN_IF_ERROR(src.Add(key, t.name, t.tensor));
  }
  if (family == ModelFamily::kGpt2) {
    return dir == Direction::kImport ? internal::Gpt2HfToOurs(src) : internal::Gpt2OursToHf(src);
  }
  return dir == Direction::kImport ? internal::LlamaHfToOurs(src, o)
                                   : internal::LlamaOursToHf(src, o);
}

// Keeps the mappings alive while their views are converted.
struct OpenedTensors {
  std::vector<HfWeights> hf;
  std::vector<SafetensorsFile> files;
  std::vector<LoadedCheckpoint> checkpoints;
  std::vector<NamedTensor> tensors;
  std::string label;
};

Status AddFile(const std::string& path, OpenedTensors* o) {
  DS_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
  for (const SafetensorsEntry& e : f.tensors()) o->tensors.push_back({e.name, e.view()});
  o->files.push_back(std::move(f));
  return OkStatus();
}

// A Hugging Face file, index or folder (HfWeights: one file, or shards with their index).
Status OpenHf(const std::string& path, OpenedTensors* o) {
  DS_ASSIGN_OR_RETURN(HfWeights w, HfWeights::Open(path));
  o->label = w.label();
  o->tensors = w.tensors();
  o->hf.push_back(std::move(w));
  return OkStatus();
}

Status OpenOurs(const std::string& path, OpenedTensors* o) {
  if (!IsDirectory(path)) {
    o->label = path;
    return AddFile(path, o);
  }
  DS_ASSIGN_OR_RETURN(LoadedCheckpoint ck, LoadCheckpoint(path));
  o->label = JoinPath(ck.dir(), kModelFile);
  o->tensors = ck.model();
  o->checkpoints.push_back(std::move(ck));
  return OkStatus();
}

Status WriteOutput(const std::string& path, const std::vector<OwnedNamedTensor>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::vector<NamedTensor> views;
  views.reserve(tensors.size());
  for (const OwnedNamedTensor& t : tensors) views.push_back({t.name, t.tensor.view()});
  return WriteSafetensors(path, views, metadata).status();
}

}  // namespace

StatusOr<ModelFamily> ParseModelFamily(const std::string& name) {
  if (name == "gpt2") return ModelFamily::kGpt2;
  if (name == "llama") return ModelFamily::kLlama;
  return InvalidArgumentError("unknown model family '" + name + "' (expected gpt2 or llama)");
}

StatusOr<std::vector<OwnedNamedTensor>> HfToOurs(ModelFamily family,
                                                 const std::vector<NamedTensor>& hf,
                                                 const std::string& source,
                                                 const HfOptions& options) {
  return Convert(family, Direction::kImport, hf, source, options);
}

StatusOr<std::vector<OwnedNamedTensor>> OursToHf(ModelFamily family,
                                                 const std::vector<NamedTensor>& ours,
                                                 const std::string& source,
                                                 const HfOptions& options) {
  return Convert(family, Direction::kExport, ours, source, options);
}

Status ImportHf(const std::string& family, const std::string& hf_path, const std::string& out_path,
                const HfOptions& options) {
  DS_ASSIGN_OR_RETURN(ModelFamily f, ParseModelFamily(family));
  OpenedTensors in;
  DS_RETURN_IF_ERROR(OpenHf(hf_path, &in));
  DS_ASSIGN_OR_RETURN(auto out, HfToOurs(f, in.tensors, in.label, options));
  DS_RETURN_IF_ERROR(WriteOutput(out_path, out, {{"family", family}, {"source", "hf"}}));
  DS_LOG_INFO("ckpt", "imported {} {} tensors from {} into {}", out.size(), family, hf_path,
              out_path);
  return OkStatus();
}

Status ExportHf(const std::string& family, const std::string& our_path,
                const std::string& hf_out_path, const HfOptions& options) {
  DS_ASSIGN_OR_RETURN(ModelFamily f, ParseModelFamily(family));
  OpenedTensors in;
  DS_RETURN_IF_ERROR(OpenOurs(our_path, &in));
  DS_ASSIGN_OR_RETURN(auto out, OursToHf(f, in.tensors, in.label, options));
  if (options.max_shard_bytes > 0) {
    std::vector<NamedTensor> views;
    for (const OwnedNamedTensor& t : out) views.push_back({t.name, t.tensor.view()});
    DS_ASSIGN_OR_RETURN(
        int shards, WriteHfFolder(hf_out_path, views, options.max_shard_bytes, {{"format", "pt"}}));
    DS_LOG_INFO("ckpt", "exported {} {} tensors from {} to {} in {} shard{} ({})", out.size(),
                family, our_path, hf_out_path, shards, shards == 1 ? "" : "s",
                DTypeName(options.dtype));
    return OkStatus();
  }
  DS_RETURN_IF_ERROR(WriteOutput(hf_out_path, out, {{"format", "pt"}}));
  DS_LOG_INFO("ckpt", "exported {} {} tensors from {} to {} ({})", out.size(), family, our_path,
              hf_out_path, DTypeName(options.dtype));
  return OkStatus();
}

}  // namespace ds::ckpt
