// The MoE data path's CPU kernels (definitions and layout: kernels/ops/moe.cc).
//   moe_dispatch   zeroes the step's rows, then copies each kept token to its row (expert e's
//   position
//                  p sits at row e x capacity + p, capacity the step's, from the router's
//                  float); backward adds each row's gradient back to its token
//   expert_linear  per block of `capacity` rows, y = x W_e^T + b_e (one GEMM per block, the
//                  blocks on the OpenMP pool when there are enough of them); rows past the
//                  blocks are zeroed; backward dx += dy W_e, dW_e += dy^T x, db_e += sum dy
//   moe_combine    y[t] = sum_i w[t, i] x[row of route i]; backward both products
//   moe_residual_mix  out = p0 moe + p1 mlp, p = softmax(coef); backward through the softmax
//   moe_loss       loss + coeff x sum of the aux inputs
//   moe_all_to_all nothing: the plan's all-to-all writes its output and its input's gradient
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

// The step's capacity (the router's output, maybe max-reduced over the expert group) checked
// against the buffer's rows.
StatusOr<int64_t> Capacity(const Tensor& cap, int64_t buffer, const char* op) {
  const float c = cap.f32()[0];
  if (!(c >= 0) || c > static_cast<float>(buffer) || c != std::floor(c))
    return InternalError(
        StrCat(op, ": capacity ", c, " does not fit the buffer's ", buffer, " rows per expert"));
  return static_cast<int64_t>(c);
}

// The buffer row of route value r (e x buffer + p) at the step's capacity.
inline int64_t Row(int32_t r, int64_t buffer, int64_t cap) {
  return (r / buffer) * cap + r % buffer;
}

Status DispatchForward(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const int64_t c = x.dim(-1), n = LeadingRows(x.shape()), k = args.in[1].dim(-1);
  const int64_t buffer = args.out[0].dim(1);
  DS_ASSIGN_OR_RETURN(const int64_t cap, Capacity(args.in[2], buffer, "moe_dispatch"));
  const int32_t* routes = args.in[1].i32();
  float* out = args.out[0].f32();
  // Only the step's blocks are read (expert_linear zeroes its own rows past them).
  std::memset(out, 0, args.out[0].dim(0) * cap * c * sizeof(float));
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      for (int64_t i = 0; i < k; ++i)
        if (routes[t * k + i] >= 0)
          std::memcpy(out + Row(routes[t * k + i], buffer, cap) * c, x.f32() + t * c,
                      c * sizeof(float));
  });
  return OkStatus();
}

Status DispatchBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const int64_t c = args.in[0].dim(-1), n = LeadingRows(args.in[0].shape());
  const int64_t k = args.in[1].dim(-1), buffer = args.grad_out[0].dim(1);
  DS_ASSIGN_OR_RETURN(const int64_t cap, Capacity(args.in[2], buffer, "moe_dispatch"));
  const int32_t* routes = args.in[1].i32();
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      for (int64_t i = 0; i < k; ++i) {
        if (routes[t * k + i] < 0) continue;
        const float* src = dy + Row(routes[t * k + i], buffer, cap) * c;
        for (int64_t j = 0; j < c; ++j) dx[t * c + j] += src[j];
      }
  });
  return OkStatus();
}

// The blocks of an expert_linear call: `blocks` of `rows` rows, block b through local expert
// b mod experts.
struct ExpertShape {
  int64_t blocks, buffer, rows, in, out, experts, first;  // experts [first, first + experts)
};

StatusOr<ExpertShape> ShapeOf(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const Tensor& w = args.in[2];
  ExpertShape s{x.dim(0), x.dim(1), 0, w.dim(2), w.dim(1), w.dim(0), 0};
  if (args.attrs) {
    s.first = args.attrs->Int("expert_begin", 0);
    s.experts = args.attrs->Int("local_experts", s.experts);
  }
  DS_ASSIGN_OR_RETURN(s.rows, Capacity(args.in[1], s.buffer, "expert_linear"));
  return s;
}

// fn(b) for every block: in parallel over blocks, each GEMM on one thread, when there are at
// least as many blocks as threads; else one block at a time, each GEMM on the pool.
template <typename Fn>
void ForBlocks(int64_t blocks, const Fn& fn) {
  if (blocks >= omp_get_max_threads() && !omp_in_parallel()) {
    BlasSingleThreadScope single;
    ParallelChunks(blocks, omp_get_max_threads(), [&](int, int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) fn(b, false);
    });
  } else {
    for (int64_t b = 0; b < blocks; ++b) fn(b, true);
  }
}

void Gemm(bool parallel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
          int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, float beta) {
  if (parallel)
    ParallelSgemm(ta, tb, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
  else
    Sgemm(ta, tb, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
}

Status ExpertForward(const OpArgs& args) {
  DS_ASSIGN_OR_RETURN(const ExpertShape s, ShapeOf(args));
  const float* x = args.in[0].f32();
  const float* w = args.in[2].f32();
  const float* bias = args.in.size() > 3 ? args.in[3].f32() : nullptr;
  float* y = args.out[0].f32();
  const int64_t used = s.blocks * s.rows;
  std::memset(y + used * s.out, 0, (s.blocks * s.buffer - used) * s.out * sizeof(float));
  ForBlocks(s.blocks, [&](int64_t b, bool parallel) {
    const int64_t e = s.first + b % s.experts;
    float* yb = y + b * s.rows * s.out;
    if (bias)
      for (int64_t r = 0; r < s.rows; ++r)
        std::memcpy(yb + r * s.out, bias + e * s.out, s.out * sizeof(float));
    Gemm(parallel, false, true, s.rows, s.out, s.in, x + b * s.rows * s.in, s.in,
         w + e * s.out * s.in, s.in, yb, s.out, bias ? 1.f : 0.f);
  });
  return OkStatus();
}

Status ExpertBackward(const OpArgs& args) {
  DS_ASSIGN_OR_RETURN(const ExpertShape s, ShapeOf(args));
  const float* x = args.in[0].f32();
  const float* w = args.in[2].f32();
  const float* dy = args.grad_out[0].f32();
  if (args.grad_in[0].defined()) {
    float* dx = args.grad_in[0].f32();
    ForBlocks(s.blocks, [&](int64_t b, bool parallel) {
      Gemm(parallel, false, false, s.rows, s.in, s.out, dy + b * s.rows * s.out, s.out,
           w + (s.first + b % s.experts) * s.out * s.in, s.in, dx + b * s.rows * s.in, s.in, 1.f);
    });
  }
  // Each local expert sums its blocks in block order (a fixed order at any thread count).
  float* dw = args.grad_in[2].defined() ? args.grad_in[2].f32() : nullptr;
  float* db =
      args.grad_in.size() > 3 && args.grad_in[3].defined() ? args.grad_in[3].f32() : nullptr;
  ForBlocks(s.experts, [&](int64_t local, bool parallel) {
    const int64_t e = s.first + local;
    for (int64_t b = local; b < s.blocks; b += s.experts) {
      const float* dyb = dy + b * s.rows * s.out;
      if (dw)
        Gemm(parallel, true, false, s.out, s.in, s.rows, dyb, s.out, x + b * s.rows * s.in, s.in,
             dw + e * s.out * s.in, s.in, 1.f);
      if (db)
        for (int64_t r = 0; r < s.rows; ++r)
          for (int64_t j = 0; j < s.out; ++j) db[e * s.out + j] += dyb[r * s.out + j];
    }
  });
  return OkStatus();
}

Status CombineForward(const OpArgs& args) {
  const Tensor& y = args.in[0];
  const int64_t c = y.dim(2), buffer = y.dim(1), k = args.in[1].dim(-1);
  const int64_t n = LeadingRows(args.in[1].shape());
  DS_ASSIGN_OR_RETURN(const int64_t cap, Capacity(args.in[3], buffer, "moe_combine"));
  const int32_t* routes = args.in[1].i32();
  const float* w = args.in[2].f32();
  float* out = args.out[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      float* o = out + t * c;
      std::fill(o, o + c, 0.f);
      for (int64_t i = 0; i < k; ++i) {
        if (routes[t * k + i] < 0) continue;
        const float* src = y.f32() + Row(routes[t * k + i], buffer, cap) * c;
        const float wi = w[t * k + i];
        for (int64_t j = 0; j < c; ++j) o[j] += wi * src[j];
      }
    }
  });
  return OkStatus();
}

Status CombineBackward(const OpArgs& args) {
  const Tensor& y = args.in[0];
  const int64_t c = y.dim(2), buffer = y.dim(1), k = args.in[1].dim(-1);
  const int64_t n = LeadingRows(args.in[1].shape());
  DS_ASSIGN_OR_RETURN(const int64_t cap, Capacity(args.in[3], buffer, "moe_combine"));
  const int32_t* routes = args.in[1].i32();
  const float* w = args.in[2].f32();
  const float* dout = args.grad_out[0].f32();
  float* dy = args.grad_in[0].defined() ? args.grad_in[0].f32() : nullptr;
  float* dw = args.grad_in[2].defined() ? args.grad_in[2].f32() : nullptr;
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      for (int64_t i = 0; i < k; ++i) {
        if (routes[t * k + i] < 0) continue;
        const int64_t row = Row(routes[t * k + i], buffer, cap) * c;
        const float* g = dout + t * c;
        if (dy)
          for (int64_t j = 0; j < c; ++j) dy[row + j] += w[t * k + i] * g[j];
        if (dw) {
          double dot = 0;
          for (int64_t j = 0; j < c; ++j) dot += static_cast<double>(y.f32()[row + j]) * g[j];
          dw[t * k + i] += static_cast<float>(dot);
        }
      }
  });
  return OkStatus();
}

void MixWeights(const float* coef, float* p) {
  const float m = std::max(coef[0], coef[1]);
  const float a = std::exp(coef[0] - m), b = std::exp(coef[1] - m);
  p[0] = a / (a + b);
  p[1] = b / (a + b);
}

Status MixForward(const OpArgs& args) {
  const int64_t c = args.in[0].dim(-1), n = LeadingRows(args.in[0].shape());
  const float *a = args.in[0].f32(), *b = args.in[1].f32(), *coef = args.in[2].f32();
  float* out = args.out[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      float p[2];
      MixWeights(coef + 2 * t, p);
      for (int64_t j = 0; j < c; ++j) out[t * c + j] = p[0] * a[t * c + j] + p[1] * b[t * c + j];
    }
  });
  return OkStatus();
}

Status MixBackward(const OpArgs& args) {
  const int64_t c = args.in[0].dim(-1), n = LeadingRows(args.in[0].shape());
  const float *a = args.in[0].f32(), *b = args.in[1].f32(), *coef = args.in[2].f32();
  const float* g = args.grad_out[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      float p[2];
      MixWeights(coef + 2 * t, p);
      double dp0 = 0, dp1 = 0;
      for (int64_t j = 0; j < c; ++j) {
        dp0 += static_cast<double>(a[t * c + j]) * g[t * c + j];
        dp1 += static_cast<double>(b[t * c + j]) * g[t * c + j];
      }
      if (args.grad_in[0].defined())
        for (int64_t j = 0; j < c; ++j) args.grad_in[0].f32()[t * c + j] += p[0] * g[t * c + j];
      if (args.grad_in[1].defined())
        for (int64_t j = 0; j < c; ++j) args.grad_in[1].f32()[t * c + j] += p[1] * g[t * c + j];
      if (args.grad_in[2].defined()) {
        const double dot = p[0] * dp0 + p[1] * dp1;
        args.grad_in[2].f32()[2 * t] += static_cast<float>(p[0] * (dp0 - dot));
        args.grad_in[2].f32()[2 * t + 1] += static_cast<float>(p[1] * (dp1 - dot));
      }
    }
  });
  return OkStatus();
}

Status LossForward(const OpArgs& args) {
  const double coeff = args.attrs->Float("coeff", 0.01);
  double aux = 0;
  for (size_t i = 1; i < args.in.size(); ++i) aux += args.in[i].f32()[0];
  args.out[0].f32()[0] = static_cast<float>(args.in[0].f32()[0] + coeff * aux);
  return OkStatus();
}

Status LossBackward(const OpArgs& args) {
  const float g = args.grad_out[0].f32()[0];
  const float coeff = static_cast<float>(args.attrs->Float("coeff", 0.01));
  for (size_t i = 0; i < args.in.size(); ++i)
    if (args.grad_in[i].defined()) args.grad_in[i].f32()[0] += i == 0 ? g : coeff * g;
  return OkStatus();
}

Status Nothing(const OpArgs&) { return OkStatus(); }

const bool kRegistered =
    RegisterKernel("moe_all_to_all", Device::kCpu, DType::kF32, {Nothing, Nothing}) &&
    RegisterKernel("moe_dispatch", Device::kCpu, DType::kF32,
                   {DispatchForward, DispatchBackward}) &&
    RegisterKernel("expert_linear", Device::kCpu, DType::kF32, {ExpertForward, ExpertBackward}) &&
    RegisterKernel("moe_combine", Device::kCpu, DType::kF32, {CombineForward, CombineBackward}) &&
    RegisterKernel("moe_residual_mix", Device::kCpu, DType::kF32, {MixForward, MixBackward}) &&
    RegisterKernel("moe_loss", Device::kCpu, DType::kF32, {LossForward, LossBackward});

}  // namespace
}  // namespace ds::kernels::cpu
