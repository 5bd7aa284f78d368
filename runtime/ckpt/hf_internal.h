// Internal to hf_*.cc: name lookup with consumption tracking, and the output builder.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/ckpt/hf_names.h"

namespace ds::ckpt::internal {

// The tensors being converted, by name. Take() marks a name used; Finish() reports the
// first name never used (an unknown tensor). Borrows the views; not thread-safe.
class TensorSource {
 public:
  TensorSource(std::string label, DType dtype) : label_(std::move(label)), dtype_(dtype) {}

  // Adds `t` under `key`; `shown` is the name printed in errors (the file's own spelling).
  Status Add(const std::string& key, const std::string& shown, const Tensor& t);
  bool Has(const std::string& key) const { return tensors_.count(key) > 0; }
  // The tensor, without marking it used; InvalidArgument "<label>: missing tensor <name>".
  StatusOr<Tensor> Peek(const std::string& key) const;
  // Peek + shape check + mark used.
  StatusOr<Tensor> Take(const std::string& key, const Shape& expected);
  void Ignore(const std::string& key) { used_.insert(key); }
  // 1 + the largest i among keys "<prefix><i>.<...>"; 0 when none.
  int CountLayers(const std::string& prefix) const;
  Status Finish() const;
  const std::string& label() const { return label_; }
  DType dtype() const { return dtype_; }  // what Emit converts floats to

 private:
  struct Entry {
    std::string shown;
    Tensor tensor;
  };
  std::string label_;
  DType dtype_;
  std::map<std::string, Entry> tensors_;
  std::set<std::string> used_;
};

// Converts `t` to `dtype` (floats only), transposes it when asked, appends it to `out`.
Status Emit(const std::string& name, const Tensor& t, bool transpose, DType dtype,
            std::vector<OwnedNamedTensor>* out);

// Model dimensions read off the anchor tensors: vocab V, positions T, width C, MLP width F,
// q rows Q (= H*D) and k/v rows K (= Hkv*D).
struct Dims {
  int64_t V = 0, T = 0, C = 0, F = 0, Q = 0, K = 0;
};

// One renamed tensor: HF name suffix, our name suffix, whether HF stores it transposed
// (Conv1D), and its shape in our layout.
struct Rule {
  const char* hf;
  const char* ours;
  bool transpose;
  Shape (*shape)(const Dims&);
};

enum class Direction { kImport, kExport };

// Import: takes `hf_prefix + rule.hf` from `src` (HF layout) and emits `ours_prefix +
// rule.ours`; export the reverse. Shapes are checked against rule.shape(d).
Status ApplyRule(const Rule& rule, Direction dir, const std::string& hf_prefix,
                 const std::string& ours_prefix, const Dims& d, TensorSource& src,
                 std::vector<OwnedNamedTensor>* out);

// The dimension `i` of `t` (0 when the rank is too small, which the shape checks catch).
inline int64_t Dim(const Tensor& t, int i) { return t.rank() > i ? t.dim(i) : 0; }

// Mixtral's expert MLPs (hf_mixtral.cc): whether layer `prefix` ("layers.<i>." ours,
// "model.layers.<i>." HF) has one, its expert width F, and its tensors converted.
bool IsMoeLayer(const TensorSource& src, const std::string& prefix);
int64_t MoeWidth(const TensorSource& src, const std::string& prefix, bool ours);
Status MixtralToHf(TensorSource& src, const std::string& hp, const std::string& op, const Dims& d,
                   std::vector<OwnedNamedTensor>* out);
Status MixtralFromHf(TensorSource& src, const std::string& hp, const std::string& op, const Dims& d,
                     std::vector<OwnedNamedTensor>* out);

StatusOr<std::vector<OwnedNamedTensor>> Gpt2HfToOurs(TensorSource& src);
StatusOr<std::vector<OwnedNamedTensor>> Gpt2OursToHf(TensorSource& src);
StatusOr<std::vector<OwnedNamedTensor>> LlamaHfToOurs(TensorSource& src, const HfOptions& o);
StatusOr<std::vector<OwnedNamedTensor>> LlamaOursToHf(TensorSource& src, const HfOptions& o);

}  // namespace ds::ckpt::internal
