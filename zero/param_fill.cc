// ParamStore::Fill: a rank's parameters set from a source one tensor at a time (the seeded
// draws, a checkpoint, a Hugging Face folder), keeping only what the rank keeps. No buffer of
// the whole model exists; under ZeRO-3 no buffer the size of one parameter is touched either:
// the kept ranges are read in chunks straight into the master.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/base/status_macros.h"
#include "zero/param_store.h"

namespace ds::zero {

ParamStore::Ranges ParamStore::KeptRanges(int slot, const Ranges& persistent, bool owned) const {
  const ParamSlot& s = slots_[slot];
  Ranges out;
  auto add = [&](int64_t flat_begin, int64_t count) {
    const int64_t lo = std::max(flat_begin, s.offset);
    const int64_t hi = std::min(flat_begin + count, s.offset + s.numel);
    if (lo < hi) out.push_back({lo - s.offset, hi - s.offset});
  };
  if (owned)
    for (const ShardSegment& g : layout_.segments) add(g.flat_begin, g.count);
  for (const auto& [offset, count] : persistent) add(offset, count);
  std::sort(out.begin(), out.end());
  Ranges merged;
  for (const auto& r : out) {
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  if (merged.empty()) merged.push_back({0, 0});  // nothing kept: an empty range, not "all"
  return merged;
}

ParamStore::Ranges ParamStore::NeededRanges(int slot, const InitSlicer* slicer,
                                            const Ranges* persistent) const {
  const ParamSlot& s = slots_[slot];
  const int64_t whole = slicer ? slicer->full_numel(slot) : s.numel;
  if (whole != s.numel) return slicer->needed ? slicer->needed(slot) : Ranges{};
  if (persistent && layout_.partition_params) return KeptRanges(slot, *persistent);
  return {};
}

namespace {

// A float buffer that grows without zero-filling: every element Fill reads from it was
// written by the source first, so a value-initializing std::vector would only add a pass of
// memset over fresh pages (10% of a 1B model's load, perf).
class Scratch {
 public:
  float* Get(int64_t n) {
    if (n > size_) {
      data_.reset(new float[n]);
      size_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<float[]> data_;
  int64_t size_ = 0;
};

}  // namespace

float* ParamStore::OwnedMaster(int64_t offset, int64_t count) const {
  for (const ShardSegment& g : layout_.segments)
    if (offset >= g.flat_begin && offset + count <= g.flat_begin + g.count)
      return master_.f32() + g.shard_offset + (offset - g.flat_begin);
  return nullptr;
}

// Stage 3 without a slicer: slot's kept ranges in chunks. A chunk inside one owned segment is
// read straight into the master and narrowed from there into the parameter shard; any other
// (a persistent unit's values this rank does not own, or a chunk across segments) goes through
// `chunk`, one small buffer reused for every chunk. The flat copy only where a persistent unit
// keeps it (the rest would be released unread). A fresh page is touched only where a state
// lives: on a virtual machine whose free pages go back to the host, a page's first touch is
// most of a load's time.
Status ParamStore::FillKept(int slot, const ParamSource& source, const Ranges& persistent,
                            float* chunk) {
  const ParamSlot& s = slots_[slot];
  const Ranges flat_only = KeptRanges(slot, persistent, /*owned=*/false);
  for (const auto& [lo, hi] : KeptRanges(slot, persistent)) {
    for (int64_t c = lo; c < hi; c += kFillChunk) {
      const int64_t e = std::min(hi, c + kFillChunk), n = e - c;
      float* direct = OwnedMaster(s.offset + c, n);
      float* dst = direct ? direct : chunk;
      DS_RETURN_IF_ERROR(source(slot, dst, s.numel, {{c, e}}, c));
      ++version_;
      if (!direct)
        SetRange(s.offset + c, n, dst, false);
      else
        StoreShard(direct - master_.f32(), n, direct);
      for (const auto& [a, b] : flat_only) {
        const int64_t x = std::max(a, c), y = std::min(b, e);
        if (x < y) StoreFlatCopy(s.offset + x, y - x, dst + (x - c));
      }
    }
  }
  return OkStatus();
}

Status ParamStore::Fill(const ParamSource& source,
                        const std::function<void(int64_t, int64_t)>& done, const InitSlicer* slicer,
                        const Ranges* persistent) {
  const bool partial = persistent && layout_.partition_params;
  // Sharded: one parameter at a time through a scratch buffer, so no full fp32 copy exists.
  Scratch one, full, chunk;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const ParamSlot& s = slots_[i];
    const int slot = static_cast<int>(i);
    const int64_t whole = slicer ? slicer->full_numel(slot) : s.numel;
    if (partial && whole == s.numel) {
      DS_RETURN_IF_ERROR(FillKept(slot, source, *persistent, chunk.Get(kFillChunk)));
      if (done) done(s.offset + s.numel, s.numel);
      continue;
    }
    float* p = master_.f32() + s.offset;
    if (master_sharded_) {
      p = one.Get(s.numel);
      std::fill(p, p + s.numel, 0.0f);
    }
    if (whole == s.numel) {
      DS_RETURN_IF_ERROR(source(slot, p, s.numel, {}, 0));
    } else {
      float* f = full.Get(whole);
      DS_RETURN_IF_ERROR(source(slot, f, whole, NeededRanges(slot, slicer, persistent), 0));
      slicer->take(slot, f, p);
    }
    if (master_sharded_) SetRange(s.offset, s.numel, p);
    if (partial)
      for (const auto& [lo, hi] : KeptRanges(slot, *persistent, /*owned=*/false))
        StoreFlatCopy(s.offset + lo, hi - lo, p + lo);
    if (done) done(s.offset + s.numel, s.numel);
  }
  if (!master_sharded_) SyncModelFromMaster();
  return OkStatus();
}

}  // namespace ds::zero
