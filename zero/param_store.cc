#include "zero/param_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "runtime/base/check.h"
#include "runtime/base/status_macros.h"

namespace ds::zero {
namespace {

constexpr int64_t kAlign = 16;

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

ParamStore::ParamStore(const Graph& graph, DType model_dtype, bool sparse_host, TensorRole role)
    : model_dtype_(model_dtype), sparse_host_(sparse_host) {
  DS_CHECK(role == TensorRole::kParam || role == TensorRole::kFrozen,
           "a parameter store holds parameters or frozen weights, not {}", TensorRoleName(role));
  for (int t : role == TensorRole::kParam ? graph.Params() : graph.Frozen()) {
    const TensorInfo& info = graph.tensors[t];
    ParamSlot s;
    s.name = info.name;
    s.tensor = t;
    for (const Dim& d : info.shape) s.shape.push_back(d.size);
    s.numel = NumElements(s.shape);
    s.offset = total_;
    // A stacked expert tensor [E, ...] decays as each expert's own tensor would: its biases
    // [E, F] do not.
    const size_t dims = s.shape.size() - (info.sharding == ShardKind::kExpert ? 1 : 0);
    s.decay = dims >= 2;
    total_ += (s.numel + kAlign - 1) / kAlign * kAlign;
    by_tensor_[t] = static_cast<int>(slots_.size());
    slots_.push_back(std::move(s));
  }
  master_ = Alloc(total_ * sizeof(float));
  if (mixed()) model_ = Alloc(total_ * 2);
  if (role == TensorRole::kParam) grads_ = Alloc(total_ * DTypeSize(model_dtype_));
  layout_.segments.push_back({0, total_, 0});
  layout_.shard_elements = total_;
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

const ParamSlot* ParamStore::ForParam(const Graph& graph, int t) const {
  const ParamSlot* s = ForTensor(t);
  if (s && s->name == graph.tensors[t].name) return s;
  return Find(graph.tensors[t].name);
}

Tensor ParamStore::MasterView(const ParamSlot& s) const {
  DS_CHECK(!master_sharded(), "MasterView of {} with a sharded master (use MasterAt)", s.name);
  return Tensor(master_.f32() + s.offset, s.shape, DType::kF32);
}

Tensor ParamStore::ModelView(const ParamSlot& s) const {
  char* base = static_cast<char*>(model()) + s.offset * DTypeSize(model_dtype_);
  return Tensor(base, s.shape, model_dtype_);
}

Tensor ParamStore::GradView(const ParamSlot& s) const {
  return Tensor(FlatGradPtr(s.offset), s.shape, model_dtype_);
}

void* ParamStore::FlatGradPtr(int64_t i) const {
  const size_t size = DTypeSize(model_dtype_);
  if (grad_blocks_.empty()) return static_cast<char*>(grads_.data()) + i * size;
  auto it = std::upper_bound(grad_blocks_.begin(), grad_blocks_.end(), i,
                             [](int64_t v, const GradBlock& b) { return v < b.flat_begin; });
  DS_CHECK(it != grad_blocks_.begin(), "flat element {} precedes every gradient bucket", i);
  --it;
  DS_CHECK(i < it->flat_begin + it->count, "flat element {} is in no gradient bucket", i);
  return static_cast<char*>(grads_.data()) + (it->arena_offset + (i - it->flat_begin)) * size;
}

namespace {

// `n` values of `init` from `gen`.
void Draw(const InitSpec& init, std::mt19937_64& gen, float* p, int64_t n) {
  switch (init.kind) {
    case InitSpec::kZeros:
      std::fill(p, p + n, 0.0f);
      break;
    case InitSpec::kOnes:
      std::fill(p, p + n, 1.0f);
      break;
    case InitSpec::kConstant:
      std::fill(p, p + n, init.value);
      break;
    case InitSpec::kNormal: {
      std::normal_distribution<float> dist(init.mean, init.std);
      for (int64_t i = 0; i < n; ++i) p[i] = dist(gen);
      break;
    }
    case InitSpec::kUniform: {
      std::uniform_real_distribution<float> dist(init.low, init.high);
      for (int64_t i = 0; i < n; ++i) p[i] = dist(gen);
      break;
    }
  }
}

}  // namespace

void ParamStore::Initialize(const Graph& graph, uint64_t seed,
                            const std::function<void(int64_t, int64_t)>& done,
                            const InitSlicer* slicer) {
  const Status drawn = Fill(
      [&](int slot, float* dst, int64_t whole, const Ranges&, int64_t) {
        DrawInitial(graph, seed, slot, dst, whole);
        return OkStatus();
      },
      done, slicer);
  DS_CHECK(drawn.ok(), "drawing the initial parameters: {}", drawn.ToString());
}

void ParamStore::DrawInitial(const Graph& graph, uint64_t seed, int slot, float* dst,
                             int64_t whole) const {
  const ParamSlot& s = slots_[slot];
  std::mt19937_64 gen(seed ^ Fnv1a(s.name));
  Draw(graph.tensors[s.tensor].init, gen, dst, whole);
}

int64_t ParamStore::ShardBound(int64_t flat_end) const {
  for (const ShardSegment& g : layout_.segments)
    if (g.flat_begin + g.count > flat_end)
      return g.shard_offset + std::max<int64_t>(0, flat_end - g.flat_begin);
  return layout_.shard_elements;
}

namespace {

void StoreRange(const float* src, void* dst, DType t, int64_t n) {
  if (t == DType::kF32)
    std::memcpy(dst, src, n * sizeof(float));
  else if (t == DType::kBF16)
    ConvertF32ToBf16(src, static_cast<uint16_t*>(dst), n);
  else
    ConvertF32ToF16(src, static_cast<uint16_t*>(dst), n);
}

}  // namespace

int64_t ParamStore::ShardPos(int64_t i) const {
  const auto& segs = layout_.segments;
  auto it = std::upper_bound(segs.begin(), segs.end(), i,
                             [](int64_t v, const ShardSegment& s) { return v < s.flat_begin; });
  DS_CHECK(it != segs.begin(), "flat element {} is before this rank's first segment", i);
  --it;
  DS_CHECK(i < it->flat_begin + it->count, "flat element {} is not owned by this rank", i);
  return it->shard_offset + (i - it->flat_begin);
}

void* ParamStore::ModelOutAt(int64_t i) const {
  const size_t size = DTypeSize(model_dtype_);
  if (layout_.partition_params)
    return mixed() ? static_cast<char*>(param_shard_.data()) + ShardPos(i) * size : nullptr;
  return mixed() ? static_cast<char*>(model_.data()) + i * size : nullptr;
}

const void* ParamStore::GradAt(int64_t i) const {
  const size_t size = DTypeSize(model_dtype_);
  if (layout_.partition_grads)
    return static_cast<const char*>(grad_shard_.data()) + ShardPos(i) * size;
  return FlatGradPtr(i);
}

void* ParamStore::param_shard() const {
  if (!layout_.partition_params) return nullptr;
  return mixed() ? param_shard_.data() : master_.data();
}

void ParamStore::SyncModelFromMaster() {
  ++version_;
  if (!master_sharded_) {
    if (mixed()) StoreRange(master_.f32(), model_.data(), model_dtype_, total_);
    return;
  }
  if (layout_.partition_params) {
    if (mixed())
      StoreRange(master_.f32(), param_shard_.data(), model_dtype_, layout_.shard_elements);
    return;
  }
  const size_t size = DTypeSize(model_dtype_);
  for (const ShardSegment& g : layout_.segments)
    StoreRange(master_.f32() + g.shard_offset,
               static_cast<char*>(model_.data()) + g.flat_begin * size, model_dtype_, g.count);
}

void ParamStore::Shard(const ShardLayout& layout) {
  DS_CHECK(!master_sharded_ && !layout_.partition_grads, "ParamStore::Shard called twice");
  states_swapped_ = layout.swap_states;
  // Still zero (Shard comes before Initialize): a sparse master is staging for the swapper.
  if (layout.swap_master && mixed()) master_ = Buffer::AllocateSparse(master_.size());
  const bool everything = layout.segments.size() == 1 && layout.segments[0].flat_begin == 0 &&
                          layout.segments[0].count == total_ &&
                          layout.segments[0].shard_offset == 0;
  if (everything && !layout.partition_grads && !layout.partition_params) return;
  DS_CHECK(version_ == 0, "ParamStore::Shard after values were set: it keeps none of them");
  layout_ = layout;
  const size_t size = DTypeSize(model_dtype_);
  const int64_t shard = std::max<int64_t>(1, layout.shard_elements);
  if (mixed() || layout.partition_params) {
    // A swapped master (in fp32 with swapped parameters: the parameter shard) is sparse staging.
    // Fresh buffers read as zero, as the master still is (Shard comes before any value is set):
    // nothing to copy, and no page is touched until the values come (a 1B model's rank zeroed
    // 3.5 GB here before its load began).
    Buffer m = layout.swap_master ? Buffer::AllocateSparse(shard * sizeof(float))
                                  : Alloc(shard * sizeof(float));
    if (!mixed()) model_ = std::move(master_);
    master_ = std::move(m);
    master_sharded_ = true;
  }
  if (layout.partition_params) {
    // Only gathered units are resident in the flat copy (its values come with
    // Initialize / SetFromFull and the gathers).
    model_ = Buffer::AllocateSparse(total_ * size);
    if (mixed()) {
      // A swapped shard stays untouched (zeros, as the master still is).
      param_shard_ =  // zeros, as the master: 0.0f in bf16 and f16 is all zero bits
          layout.swap_params ? Buffer::AllocateSparse(shard * size) : Alloc(shard * size);
    }
  }
  if (layout.partition_grads) {
    if (layout.grad_blocks.empty()) {
      grads_ = Buffer::AllocateSparse(total_ * size);
    } else {
      grads_ = Alloc(std::max<int64_t>(1, layout.grad_arena_elements) * size);
      grad_blocks_ = layout.grad_blocks;
    }
    grad_shard_ = Alloc(shard * size);
  }
}

void ParamStore::ReleaseMasterRange(int64_t pos, int64_t n) {
  master_.Release(pos * sizeof(float), n * sizeof(float), false);
}

void ParamStore::ReleaseParamShardRange(int64_t pos, int64_t n) {
  const size_t size = DTypeSize(model_dtype_);
  (mixed() ? param_shard_ : master_).Release(pos * size, n * size, false);  // see param_shard()
}

void ParamStore::ReleaseHost() {
  if (!sparse_host_) return;
  for (Buffer* b : {&master_, &model_, &param_shard_, &grads_, &grad_shard_})
    b->Release(0, b->size(), false);
  ++version_;
}

void ParamStore::StoreFlatCopy(int64_t offset, int64_t count, const float* values) {
  if (!model_.data()) return;
  const size_t size = DTypeSize(model_dtype_);
  StoreRange(values, static_cast<char*>(model_.data()) + offset * size, model_dtype_, count);
}

void ParamStore::StoreShard(int64_t pos, int64_t count, const float* values) {
  if (!param_shard_.data()) return;
  StoreRange(values, static_cast<char*>(param_shard_.data()) + pos * DTypeSize(model_dtype_),
             model_dtype_, count);
}

void ParamStore::SetRange(int64_t offset, int64_t count, const float* values, bool flat_copy) {
  ++version_;
  const size_t size = DTypeSize(model_dtype_);
  if (model_.data() && flat_copy)
    StoreRange(values, static_cast<char*>(model_.data()) + offset * size, model_dtype_, count);
  if (!master_sharded_) {
    std::memcpy(master_.f32() + offset, values, count * sizeof(float));
    return;
  }
  for (const ShardSegment& g : layout_.segments) {
    const int64_t lo = std::max(offset, g.flat_begin),
                  hi = std::min(offset + count, g.flat_begin + g.count);
    if (lo >= hi) continue;
    const int64_t pos = g.shard_offset + (lo - g.flat_begin);
    std::memcpy(master_.f32() + pos, values + (lo - offset), (hi - lo) * sizeof(float));
    if (param_shard_.data())
      StoreRange(values + (lo - offset), static_cast<char*>(param_shard_.data()) + pos * size,
                 model_dtype_, hi - lo);
  }
}

void ParamStore::SetFromFull(const float* full) { SetRange(0, total_, full); }

void ParamStore::ReleaseModel(int64_t offset, int64_t count) {
  const size_t size = DTypeSize(model_dtype_);
  model_.Release(offset * size, count * size, /*zero_edges=*/true);
}

void ParamStore::ReleaseGrads(int64_t offset, int64_t count) {
  const size_t size = DTypeSize(model_dtype_);
  if (grad_blocks_.empty()) {
    grads_.Release(offset * size, count * size, /*zero_edges=*/true);
    return;
  }
  // Bucket arena: zero the range block by block (a range may cover several buckets' blocks).
  for (const GradBlock& b : grad_blocks_) {
    const int64_t lo = std::max(offset, b.flat_begin),
                  hi = std::min(offset + count, b.flat_begin + b.count);
    if (lo < hi) std::memset(FlatGradPtr(lo), 0, (hi - lo) * size);
  }
}

// ParallelZero (tensor.h): one thread zeroes about 4 GB/s here, a step's fp32 gradients of 5M
// parameters took 5 ms.
void ParamStore::ZeroGrads() {
  const size_t size = DTypeSize(model_dtype_);
  if (grads_.sparse())
    grads_.Release(0, total_ * size, /*zero_edges=*/true);
  else
    ParallelZero(grads_.data(), grads_.size());
  if (grad_shard_.data()) ParallelZero(grad_shard_.data(), grad_shard_.size());
}

std::vector<std::pair<std::string, size_t>> ParamStore::ResidentBytes(
    const std::vector<std::pair<int64_t, int64_t>>& persistent) const {
  const size_t size = DTypeSize(model_dtype_);
  size_t params = 0, gathered = 0, master = master_.ResidentBytes();
  if (!model_.data()) {  // fp32 stages 0-2: the master is the model
    params = master;
    master = 0;
  } else if (layout_.partition_params) {
    params = param_shard_.ResidentBytes();
    size_t kept = 0;
    for (const auto& [offset, count] : persistent)
      kept += model_.ResidentBytes(offset * size, count * size);
    params += kept;
    gathered = model_.ResidentBytes() - kept;
  } else {
    params = model_.ResidentBytes();
  }
  size_t grads = grads_.ResidentBytes(), buckets = 0;
  if (layout_.partition_grads) {
    buckets = grads;
    grads = grad_shard_.ResidentBytes();
  }
  return {{"params", params},
          {"gathered", gathered},
          {"grads", grads},
          {"grad buckets", buckets},
          {"master", master}};
}

}  // namespace ds::zero
