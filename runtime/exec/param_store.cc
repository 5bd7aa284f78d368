#include "runtime/exec/param_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/base/check.h"

namespace ds {
namespace {

constexpr int64_t kAlign = 16;

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

ParamStore::ParamStore(const Graph& graph, DType model_dtype) : model_dtype_(model_dtype) {
  for (int t : graph.Params()) {
    const TensorInfo& info = graph.tensors[t];
    ParamSlot s;
    s.name = info.name;
    s.tensor = t;
    for (const Dim& d : info.shape) s.shape.push_back(d.size);
    s.numel = NumElements(s.shape);
    s.offset = total_;
    s.decay = s.shape.size() >= 2;
    total_ += (s.numel + kAlign - 1) / kAlign * kAlign;
    by_tensor_[t] = static_cast<int>(slots_.size());
    slots_.push_back(std::move(s));
  }
  master_ = Buffer::Allocate(total_ * sizeof(float));
  master_end_ = total_;
  if (mixed()) model16_ = Buffer::Allocate(total_ * 2);
  grads_ = Buffer::Allocate(total_ * DTypeSize(model_dtype_));
}

int64_t ParamStore::num_parameters() const {
  int64_t n = 0;
  for (const ParamSlot& s : slots_) n += s.numel;
  return n;
}

const ParamSlot* ParamStore::Find(const std::string& name) const {
  for (const ParamSlot& s : slots_)
    if (s.name == name) return &s;
  return nullptr;
}

const ParamSlot* ParamStore::ForTensor(int t) const {
  auto it = by_tensor_.find(t);
  return it == by_tensor_.end() ? nullptr : &slots_[it->second];
}

Tensor ParamStore::MasterView(const ParamSlot& s) const {
  DS_CHECK(!master_sharded(), "MasterView of {} with a sharded master (use MasterAt)", s.name);
  return Tensor(master_.f32() + s.offset, s.shape, DType::kF32);
}

Tensor ParamStore::ModelView(const ParamSlot& s) const {
  if (!mixed()) return MasterView(s);
  return Tensor(static_cast<uint16_t*>(model16_.data()) + s.offset, s.shape, model_dtype_);
}

Tensor ParamStore::GradView(const ParamSlot& s) const {
  char* base = static_cast<char*>(grads_.data()) + s.offset * DTypeSize(model_dtype_);
  return Tensor(base, s.shape, model_dtype_);
}

void ParamStore::Initialize(const Graph& graph, uint64_t seed) {
  std::vector<float> full;
  float* base = master_.f32();
  if (master_sharded()) {
    full.assign(total_, 0.0f);
    base = full.data();
  }
  for (const ParamSlot& s : slots_) {
    const InitSpec& init = graph.tensors[s.tensor].init;
    float* p = base + s.offset;
    std::mt19937_64 gen(seed ^ Fnv1a(s.name));
    switch (init.kind) {
      case InitSpec::kZeros: std::fill(p, p + s.numel, 0.0f); break;
      case InitSpec::kOnes: std::fill(p, p + s.numel, 1.0f); break;
      case InitSpec::kConstant: std::fill(p, p + s.numel, init.value); break;
      case InitSpec::kNormal: {
        std::normal_distribution<float> dist(init.mean, init.std);
        for (int64_t i = 0; i < s.numel; ++i) p[i] = dist(gen);
        break;
      }
      case InitSpec::kUniform: {
        std::uniform_real_distribution<float> dist(init.low, init.high);
        for (int64_t i = 0; i < s.numel; ++i) p[i] = dist(gen);
        break;
      }
    }
  }
  if (master_sharded()) SetFromFull(full.data());
  else SyncModelFromMaster();
}

void ParamStore::SyncModelFromMaster() {
  if (!mixed()) return;
  uint16_t* dst = static_cast<uint16_t*>(model16_.data()) + master_begin_;
  const int64_t n = master_end_ - master_begin_;
  if (model_dtype_ == DType::kBF16) ConvertF32ToBf16(master_.f32(), dst, n);
  else ConvertF32ToF16(master_.f32(), dst, n);
}

void ParamStore::ShardMaster(int64_t begin, int64_t end) {
  if (!mixed() || master_sharded() || (begin == 0 && end == total_)) return;
  Buffer shard = Buffer::Allocate(std::max<int64_t>(1, end - begin) * sizeof(float));
  std::memcpy(shard.data(), master_.f32() + begin, (end - begin) * sizeof(float));
  master_ = std::move(shard);
  master_begin_ = begin;
  master_end_ = end;
}

void ParamStore::SetFromFull(const float* full) {
  if (!mixed()) {
    std::memcpy(master_.data(), full, total_ * sizeof(float));
    return;
  }
  uint16_t* dst = static_cast<uint16_t*>(model16_.data());
  if (model_dtype_ == DType::kBF16) ConvertF32ToBf16(full, dst, total_);
  else ConvertF32ToF16(full, dst, total_);
  std::memcpy(master_.data(), full + master_begin_, (master_end_ - master_begin_) * sizeof(float));
}

void ParamStore::ZeroGrads() { std::memset(grads_.data(), 0, total_ * DTypeSize(model_dtype_)); }

}  // namespace ds
