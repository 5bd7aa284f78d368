// rope: rotary position embedding on packed qkv [B, T, (H + 2 Hkv) D] (q heads, then k
// heads, then v heads), Hugging Face Llama's rotate_half convention: for each q or k head
// at position t and i < D/2, with a = x[i], b = x[i + D/2], f_i = theta^(-2i/D):
//   out[i] = a cos(t f_i) - b sin(t f_i),  out[i + D/2] = b cos(t f_i) + a sin(t f_i).
// v heads pass through. Backward applies the transpose rotation (angle -t f_i) to dout;
// it reads no tensors and nothing is saved. With a second input positions int32 [B, T]
// (generation: left-padded batches, a KV cache), token (b, t) is at positions[b, t]; with pad
// int32 [B] (a left-padded training batch) at t - pad[b] (TokenPositions).
//
// cos/sin tables are computed as HF does in fp32 (inv_freq and t * inv_freq rounded to
// float) and cached per (D, theta, capacity), capacity = T rounded up to a power of two,
// so any shorter sequence reuses the table. The cache is process-wide, guarded by a mutex,
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

namespace ds::kernels::cpu {
namespace {

struct RopeTable {
  int64_t half = 0;        // D / 2
  std::vector<float> cos;  // [capacity, half]
  std::vector<float> sin;
};

const RopeTable& GetTable(int64_t seq, int64_t head_dim, double theta) {
  int64_t capacity = 1;
  while (capacity < seq) capacity *= 2;
  const auto key = std::make_tuple(head_dim, theta, capacity);
  static std::mutex mu;
  static auto* cache =
      new std::map<std::tuple<int64_t, double, int64_t>, std::unique_ptr<RopeTable>>();
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<RopeTable>& slot = (*cache)[key];
  if (!slot) {
    auto table = std::make_unique<RopeTable>();
    const int64_t half = head_dim / 2;
    table->half = half;
    table->cos.resize(capacity * half);
    table->sin.resize(capacity * half);
    for (int64_t i = 0; i < half; ++i) {
      const float inv_freq = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / head_dim));
      for (int64_t t = 0; t < capacity; ++t) {
        const float angle = static_cast<float>(t) * inv_freq;
        table->cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        table->sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
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
  const double theta = args.attrs ? args.attrs->Float("theta", 10000.0) : 10000.0;
  // position_chunk k: positions k T .. (k + 1) T - 1 (Ulysses: the rank's chunk of the sequence).
  const int64_t offset = args.attrs ? args.attrs->Int("position_chunk", 0) * l.seq : 0;
  const TokenPositions at(args.in.size() > 1 ? &args.in[1] : nullptr, l.seq, offset);
  int64_t end = l.seq + offset;
  for (int64_t i = 0; args.in.size() > 1 && i < l.batch * l.seq; ++i) {
    if (at(i) < 0) return InvalidArgumentError("rope: a negative position");
    end = std::max<int64_t>(end, at(i) + 1);
  }
  const RopeTable& table = GetTable(end, l.head_dim, theta);
  const int64_t row = l.row(), d = l.head_dim, half = d / 2;
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
