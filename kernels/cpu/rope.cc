// rope: rotary position embedding on packed qkv [B, T, (H + 2 Hkv) D] (q heads, then k
// heads, then v heads), Hugging Face Llama's rotate_half convention: for each q or k head
// at position t and i < D/2, with a = x[i], b = x[i + D/2], f_i = theta^(-2i/D):
//   out[i] = a cos(t f_i) - b sin(t f_i),  out[i + D/2] = b cos(t f_i) + a sin(t f_i).
// v heads pass through. Backward applies the transpose rotation (angle -t f_i) to dout;
// it reads no tensors and nothing is saved. With a second input positions int32 [B, T]
// (generation: left-padded batches, a KV cache), token (b, t) is at positions[b, t]; with pad
// int32 [B] (a left-padded training batch) at t - pad[b] (TokenPositions).
//
// Scaled RoPE (linear, dynamic, llama3, yarn) and partial rotary (the first rotary_dim dims of
// a head rotate, pairing i with i + rotary_dim / 2; the rest pass through) take their
// frequencies from kernels/rope_freqs.h; yarn's attention factor multiplies the tables.
// cos/sin tables are computed as HF does in fp32 (inv_freq and t * inv_freq rounded to
// float) and cached per parameters and capacity, capacity = T rounded up to a power of two,
// so any shorter sequence reuses the table (dynamic RoPE: per length, its frequencies depend
// on it). The cache is process-wide, guarded by a mutex,
// and its tables are never freed (a handful per model).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"
#include "kernels/rope_freqs.h"

namespace ds::kernels::cpu {
namespace {

struct RopeTable {
  int64_t half = 0;        // rotary_dim / 2
  std::vector<float> cos;  // [capacity, half], times the attention factor
  std::vector<float> sin;
};

// The tables' cache key: every parameter that changes them, and the length for dynamic RoPE.
using TableKey = std::tuple<std::string, double, int64_t, double, int64_t, int64_t, double, double,
                            double, double, double, bool, int64_t, int64_t>;

const RopeTable& GetTable(int64_t seq, const RopeParams& p) {
  int64_t capacity = 1;
  while (capacity < seq) capacity *= 2;
  const int64_t length = p.length_dependent() ? seq : 0;
  const TableKey key{p.type,          p.theta,        p.rotary_dim,       p.factor,
                     p.max_positions, p.original_max, p.low_freq_factor,  p.high_freq_factor,
                     p.beta_fast,     p.beta_slow,    p.attention_factor, p.truncate,
                     capacity,        length};
  static std::mutex mu;
  static auto* cache = new std::map<TableKey, std::unique_ptr<RopeTable>>();
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<RopeTable>& slot = (*cache)[key];
  if (!slot) {
    auto table = std::make_unique<RopeTable>();
    const std::vector<float> inv_freq = RopeInvFreq(p, seq);
    const int64_t half = p.rotary_dim / 2;
    const float scale = static_cast<float>(p.attention_factor);
    table->half = half;
    table->cos.resize(capacity * half);
    table->sin.resize(capacity * half);
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t t = 0; t < capacity; ++t) {
        const float angle = static_cast<float>(t) * inv_freq[i];
        float c = static_cast<float>(std::cos(static_cast<double>(angle)));
        float s = static_cast<float>(std::sin(static_cast<double>(angle)));
        if (scale != 1.f) c *= scale, s *= scale;
        table->cos[t * half + i] = c;
        table->sin[t * half + i] = s;
      }
    }
    slot = std::move(table);
  }
  return *slot;
}

Status Layout(const OpArgs& args, HeadLayout* l) {
  static const Attrs kEmpty;
  return InferHeadLayout("rope", args.attrs ? *args.attrs : kEmpty, args.in[0].spec(), l);
}

// Rotates (sign = +1) or un-rotates (sign = -1) the q and k heads of every token;
// dst = or += (kAccumulate) the result, v heads copied or added through.
template <bool kAccumulate>
Status Apply(const OpArgs& args, const float* src, float* dst, float sign) {
  HeadLayout l;
  DS_RETURN_IF_ERROR(Layout(args, &l));
  static const Attrs kEmpty;
  RopeParams params;
  DS_RETURN_IF_ERROR(ReadRopeParams(args.attrs ? *args.attrs : kEmpty, l.head_dim, &params));
  // position_chunk k: positions k T .. (k + 1) T - 1 (Ulysses: the rank's chunk of the sequence).
  const int64_t offset = args.attrs ? args.attrs->Int("position_chunk", 0) * l.seq : 0;
  const TokenPositions at(args.in.size() > 1 ? &args.in[1] : nullptr, l.seq, offset);
  int64_t end = l.seq + offset;
  for (int64_t i = 0; args.in.size() > 1 && i < l.batch * l.seq; ++i) {
    if (at(i) < 0) return InvalidArgumentError("rope: a negative position");
    end = std::max<int64_t>(end, at(i) + 1);
  }
  const RopeTable& table = GetTable(end, params);
  const int64_t row = l.row(), d = l.head_dim, half = table.half;
  const int64_t rotated = l.n_head + l.n_kv_head;  // q and k heads lead the row
  ParallelFor(l.batch * l.seq, kElementwiseGrain / std::max<int64_t>(row, 1) + 1,
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  const int64_t t = at(r);
                  const float* cs = table.cos.data() + t * half;
                  const float* sn = table.sin.data() + t * half;
                  const float* x = src + r * row;
                  float* y = dst + r * row;
                  for (int64_t h = 0; h < rotated; ++h) {
                    const float* xa = x + h * d;
                    float* ya = y + h * d;
                    for (int64_t i = 0; i < half; ++i) {
                      const float a = xa[i], b = xa[i + half];
                      const float c = cs[i], s = sign * sn[i];
                      const float ra = a * c - b * s, rb = b * c + a * s;
                      ya[i] = kAccumulate ? ya[i] + ra : ra;
                      ya[i + half] = kAccumulate ? ya[i + half] + rb : rb;
                    }
                    for (int64_t j = 2 * half; j < d; ++j)  // partial rotary: passed through
                      ya[j] = kAccumulate ? ya[j] + xa[j] : xa[j];
                  }
                  for (int64_t j = rotated * d; j < row; ++j)
                    y[j] = kAccumulate ? y[j] + x[j] : x[j];
                }
              });
  return OkStatus();
}

Status Forward(const OpArgs& args) {
  return Apply<false>(args, args.in[0].f32(), args.out[0].f32(), 1.f);
}

Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  return Apply<true>(args, args.grad_out[0].f32(), args.grad_in[0].f32(), -1.f);
}

const bool kRegistered = RegisterKernel("rope", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
