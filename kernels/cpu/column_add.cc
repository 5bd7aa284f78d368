// column_add (kernels/ops/column_add.cc): y = x, y[r, begin + j] += scale * d[r, j] per row r of
// the leading dimensions; backward dx += dy, dd[r, j] += scale * dy[r, begin + j].
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

struct Columns {
  int64_t rows, n, w, begin;
  float scale;
};

Columns Of(const OpArgs& args) {
  const int64_t n = args.in[0].dim(-1);
  return {LeadingRows(args.in[0].shape()), n, args.in[1].dim(-1), args.attrs->Int("begin", 0),
          static_cast<float>(args.attrs->Float("scale", 1.0))};
}

Status Forward(const OpArgs& args) {
  const Columns c = Of(args);
  const float* x = args.in[0].f32();
  const float* d = args.in[1].f32();
  float* y = args.out[0].f32();
  ParallelFor(c.rows, kElementwiseGrain / std::max<int64_t>(c.n, 1) + 1,
              [&](int64_t lo, int64_t hi) {
                for (int64_t r = lo; r < hi; ++r) {
                  float* yr = y + r * c.n;
                  if (yr != x + r * c.n) std::memcpy(yr, x + r * c.n, c.n * sizeof(float));
                  const float* dr = d + r * c.w;
                  for (int64_t j = 0; j < c.w; ++j) yr[c.begin + j] += c.scale * dr[j];
                }
              });
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  const Columns c = Of(args);
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].defined() ? args.grad_in[0].f32() : nullptr;
  float* dd = args.grad_in[1].defined() ? args.grad_in[1].f32() : nullptr;
  ParallelFor(c.rows, kElementwiseGrain / std::max<int64_t>(c.n, 1) + 1,
              [&](int64_t lo, int64_t hi) {
                for (int64_t r = lo; r < hi; ++r) {
                  const float* g = dy + r * c.n;
                  if (dx)
                    for (int64_t j = 0; j < c.n; ++j) dx[r * c.n + j] += g[j];
                  if (dd)
                    for (int64_t j = 0; j < c.w; ++j) dd[r * c.w + j] += c.scale * g[c.begin + j];
                }
              });
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("column_add", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
