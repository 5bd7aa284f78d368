// The finite-difference gradient check behind kernels/cpu/gradcheck_test.cc: the analytic
// gradient of L = sum(out * r) (r a fixed random projection) against central differences (L
// summed in double from the fp32 outputs), plus accumulation: calling backward twice doubles
// every gradient. For kernels/cpu tests only (testonly); not thread-safe.
//
//   CheckGradients({"gelu", {}, Inputs(RandomTensor({3, 17}, rng, -3, 3))});
//   CHECK(CheckedOps().count("gelu") == 1);
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/op_test_util.h"

namespace ds::kernels::testing {

struct GradCase {
  std::string op;
  Attrs attrs;
  std::vector<OwnedTensor> inputs;
  uint64_t seed = 1;
  double step = 1e-2;  // finite-difference step
  int samples = 200;   // checked elements per input (all when fewer)
  // Ops whose forward is completed by the plan (a collective writes the output, or the loss
  // reductions feed it): `before` recomputes inputs derived from input 0 before every forward
  // (the all-reduced max and sums of a split cross-entropy), `after` writes what the plan's
  // collective would (sp_gather's all-gather). Either may be empty.
  std::function<void(OpHarness&)> before;
  std::function<void(OpHarness&)> after;
  // dL/d out = 1 instead of a random projection: for an op whose backward stands for a
  // gradient the plan seeds with 1 (pipe_send's stage loss).
  bool unit_projection = false;
};

// Checks the analytic gradients of c's op against central differences (Catch2 assertions) and
// records c.op in CheckedOps().
void CheckGradients(GradCase c);

// The ops CheckGradients has checked in this process; ResetCheckedOps() empties it.
const std::set<std::string>& CheckedOps();
void ResetCheckedOps();

// The ops with a gradient check, each with the function that runs its cases.
using GradcheckTable = std::map<std::string, std::function<void()>>;

Attrs HeadAttrs(int64_t n_head, int64_t n_kv_head);

template <typename... T>
std::vector<OwnedTensor> Inputs(T&&... tensors) {
  std::vector<OwnedTensor> v;
  (v.push_back(std::forward<T>(tensors)), ...);
  return v;
}

}  // namespace ds::kernels::testing
