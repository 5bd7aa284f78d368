// See gradcheck_util.h.
#include "kernels/cpu/gradcheck_util.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

namespace ds::kernels::testing {
namespace {

std::set<std::string>& Checked() {
  static std::set<std::string> ops;
  return ops;
}

// One forward as the plan completes it: the case's `before`, the kernel, the case's `after`.
void RunForward(OpHarness& h, const GradCase& c) {
  if (c.before) c.before(h);
  REQUIRE(h.Forward().ok());
  if (c.after) c.after(h);
}

double Loss(OpHarness& h, const GradCase& c, const std::vector<OwnedTensor>& proj) {
  RunForward(h, c);
  double loss = 0.0;
  for (size_t o = 0; o < proj.size(); ++o)
    for (int64_t i = 0; proj[o].view().defined() && i < proj[o].numel(); ++i)
      loss += static_cast<double>(h.outputs[o].f32()[i]) * proj[o].f32()[i];
  return loss;
}

// Compares the analytic gradient of input i (once) with central differences on a sample of
// its elements.
void CheckInput(OpHarness& h, const GradCase& c, const std::vector<OwnedTensor>& proj, size_t i,
                const OwnedTensor& once, std::mt19937& rng) {
  const int64_t n = h.inputs[i].numel();
  std::vector<int64_t> idx;
  for (int64_t j = 0; j < n; ++j) idx.push_back(j);
  std::shuffle(idx.begin(), idx.end(), rng);
  idx.resize(std::min<int64_t>(n, c.samples));
  double max_err = 0.0, max_ref = 1e-3;
  std::vector<double> analytic, numeric;
  for (int64_t j : idx) {
    float* x = h.inputs[i].f32() + j;
    const float x0 = *x;
    *x = static_cast<float>(x0 + c.step);
    const double up = Loss(h, c, proj);
    *x = static_cast<float>(x0 - c.step);
    const double down = Loss(h, c, proj);
    *x = x0;
    numeric.push_back((up - down) / (2 * c.step));
    analytic.push_back(once.f32()[j]);
    max_ref = std::max(max_ref, std::fabs(numeric.back()));
  }
  for (size_t k = 0; k < idx.size(); ++k) {
    const double err = std::fabs(analytic[k] - numeric[k]);
    max_err = std::max(max_err, err / max_ref);
    INFO("input " << i << " element " << idx[k] << ": analytic " << analytic[k] << " numeric "
                  << numeric[k]);
    CHECK(err <= 1e-3 * max_ref + 1e-2 * std::fabs(numeric[k]));
  }
  INFO("input " << i << " max error / max |grad| = " << max_err);
  CHECK(max_err < 1e-3);
}

}  // namespace

void CheckGradients(GradCase c) {
  INFO("op " << c.op);
  OpHarness h(c.op, c.attrs);
  REQUIRE(h.def() != nullptr);
  h.seed = c.seed;
  h.inputs = std::move(c.inputs);
  RunForward(h, c);
  std::mt19937 rng(7);
  std::vector<OwnedTensor> proj;
  // Integer outputs (MoE routes) take no gradient: no projection.
  for (const OwnedTensor& o : h.outputs) {
    if (o.view().dtype() != DType::kF32) {
      proj.emplace_back();
    } else if (c.unit_projection) {
      proj.push_back(ZerosLike(o.view()));
      std::fill(proj.back().f32(), proj.back().f32() + proj.back().numel(), 1.0f);
    } else {
      proj.push_back(RandomTensor(o.view().shape(), rng));
    }
  }

  // Analytic: backward twice; the second call must exactly double (accumulate).
  std::vector<OwnedTensor> grads;
  std::vector<Tensor> grad_in, grad_out;
  for (const OwnedTensor& p : proj) grad_out.push_back(p.view());
  for (size_t i = 0; i < h.inputs.size(); ++i) {
    const bool wanted = !(h.def()->non_differentiable_inputs & (1u << i));
    grads.push_back(wanted ? ZerosLike(h.inputs[i].view()) : OwnedTensor());
    grad_in.push_back(grads.back().view());
  }
  REQUIRE(h.Backward(grad_out, grad_in).ok());
  std::vector<OwnedTensor> once;
  for (const OwnedTensor& g : grads) once.push_back(CopyOf(g.view()));
  REQUIRE(h.Backward(grad_out, grad_in).ok());
  for (size_t i = 0; i < grads.size(); ++i)
    for (int64_t j = 0; grad_in[i].defined() && j < grads[i].numel(); ++j)
      REQUIRE(grads[i].f32()[j] == Approx(2.0 * once[i].f32()[j]).epsilon(1e-5).margin(1e-6));

  for (size_t i = 0; i < h.inputs.size(); ++i)
    if (grad_in[i].defined()) CheckInput(h, c, proj, i, once[i], rng);
  Checked().insert(c.op);
}

const std::set<std::string>& CheckedOps() { return Checked(); }
void ResetCheckedOps() { Checked().clear(); }

Attrs HeadAttrs(int64_t n_head, int64_t n_kv_head) {
  Attrs a;
  a.SetInt("n_head", n_head);
  a.SetInt("n_kv_head", n_kv_head);
  return a;
}

}  // namespace ds::kernels::testing
