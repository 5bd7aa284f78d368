// reward_pair_loss's CPU kernel (definition: kernels/ops/reward.cc). Each row's score is its
// value at the one position `ends` marks; pair i is rows i (chosen) and i + B/2 (rejected), d_i
// their difference; loss = mean_i softplus(-d_i), computed stably. Backward: the score of the
// chosen row gets -sigmoid(-d_i) / n times the incoming gradient, the rejected one the
// opposite, at those positions only.
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::cpu {
namespace {

// Per row, the flat index of its scored position. InvalidArgument unless exactly one per row.
StatusOr<std::vector<int64_t>> Ends(const Tensor& ends, int64_t rows, int64_t t) {
  std::vector<int64_t> at(rows, -1);
  const int32_t* e = ends.i32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < t; ++p) {
      if (e[r * t + p] == 0) continue;
      if (e[r * t + p] != 1 || at[r] >= 0)
        return InvalidArgumentError(StrCat("reward_pair_loss: row ", r,
                                           " marks its scored position more than once or with ",
                                           e[r * t + p], " (ends must be one 1 per row)"));
      at[r] = r * t + p;
    }
  for (int64_t r = 0; r < rows; ++r)
    if (at[r] < 0)
      return InvalidArgumentError(
          StrCat("reward_pair_loss: row ", r, " marks no scored position (ends is all 0)"));
  return at;
}

double Softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

Status Forward(const OpArgs& args) {
  const int64_t rows = args.in[0].shape()[0], t = args.in[0].shape()[1], n = rows / 2;
  if (rows % 2 != 0)
    return InvalidArgumentError(StrCat("reward_pair_loss: a batch of ", rows,
                                       " rows; chosen and rejected answers come in pairs"));
  DS_ASSIGN_OR_RETURN(std::vector<int64_t> at, Ends(args.in[1], rows, t));
  const float* v = args.in[0].f32();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += Softplus(-(double(v[at[i]]) - v[at[i + n]]));
  args.out[0].f32()[0] = static_cast<float>(total / n);
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const int64_t rows = args.in[0].shape()[0], t = args.in[0].shape()[1], n = rows / 2;
  DS_ASSIGN_OR_RETURN(std::vector<int64_t> at, Ends(args.in[1], rows, t));
  const float* v = args.in[0].f32();
  const double g = args.grad_out[0].f32()[0];
  float* dv = args.grad_in[0].f32();
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(v[at[i]]) - v[at[i + n]];
    const double s = 1.0 / (1.0 + std::exp(d));  // sigmoid(-d)
    dv[at[i]] += static_cast<float>(-s * g / n);
    dv[at[i + n]] += static_cast<float>(s * g / n);
  }
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("reward_pair_loss", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
