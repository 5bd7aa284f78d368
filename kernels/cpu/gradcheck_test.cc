// Finite-difference gradient check for every registered CPU fp32 op: the analytic
// gradient of L = sum(out * r) (r a fixed random projection) against central differences
// (L summed in double from the fp32 outputs), plus accumulation: calling backward twice
// doubles every gradient.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "kernels/cpu/op_test_util.h"
#include "kernels/registry.h"

namespace ds::kernels {
namespace {

using testing::CopyOf;
using testing::IntTensor;
using testing::OpHarness;
using testing::RandomTensor;
using testing::ZerosLike;

struct GradCase {
  std::string op;
  Attrs attrs;
  std::vector<OwnedTensor> inputs;
  uint64_t seed = 1;
  double step = 1e-2;  // finite-difference step
  int samples = 200;   // checked elements per input (all when fewer)
};

double Loss(OpHarness& h, const std::vector<OwnedTensor>& proj) {
  REQUIRE(h.Forward().ok());
  double loss = 0.0;
  for (size_t o = 0; o < proj.size(); ++o)
    for (int64_t i = 0; i < proj[o].numel(); ++i)
      loss += static_cast<double>(h.outputs[o].f32()[i]) * proj[o].f32()[i];
  return loss;
}

// Checks the analytic gradients of c's op against central differences.
void CheckGradients(GradCase c) {
  INFO("op " << c.op);
  OpHarness h(c.op, c.attrs);
  REQUIRE(h.def() != nullptr);
  h.seed = c.seed;
  h.inputs = std::move(c.inputs);
  REQUIRE(h.Forward().ok());
  std::mt19937 rng(7);
  std::vector<OwnedTensor> proj;
  for (const OwnedTensor& o : h.outputs) proj.push_back(RandomTensor(o.view().shape(), rng));

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

  // Numeric, on a sample of each differentiable input's elements.
  for (size_t i = 0; i < h.inputs.size(); ++i) {
    if (!grad_in[i].defined()) continue;
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
      const double up = Loss(h, proj);
      *x = static_cast<float>(x0 - c.step);
      const double down = Loss(h, proj);
      *x = x0;
      numeric.push_back((up - down) / (2 * c.step));
      analytic.push_back(once[i].f32()[j]);
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
}

Attrs HeadAttrs(int64_t n_head, int64_t n_kv_head) {
  Attrs a;
  a.SetInt("n_head", n_head);
  a.SetInt("n_kv_head", n_kv_head);
  return a;
}

template <typename... T>
std::vector<OwnedTensor> Inputs(T&&... tensors) {
  std::vector<OwnedTensor> v;
  (v.push_back(std::forward<T>(tensors)), ...);
  return v;
}

TEST_CASE("gradcheck: elementwise ops", "[kernels][gradcheck]") {
  std::mt19937 rng(1);
  SECTION("gelu") { CheckGradients({"gelu", {}, Inputs(RandomTensor({3, 17}, rng, -3, 3))}); }
  SECTION("silu") { CheckGradients({"silu", {}, Inputs(RandomTensor({3, 17}, rng, -3, 3))}); }
  SECTION("add") {
    CheckGradients({"add", {}, Inputs(RandomTensor({2, 9}, rng), RandomTensor({2, 9}, rng))});
  }
  SECTION("mul") {
    CheckGradients({"mul", {}, Inputs(RandomTensor({2, 9}, rng), RandomTensor({2, 9}, rng))});
  }
  SECTION("dropout, training, fixed seed") {
    Attrs a;
    a.SetFloat("p", 0.3);
    CheckGradients({"dropout", a, Inputs(RandomTensor({4, 33}, rng)), /*seed=*/1234});
  }
}

TEST_CASE("gradcheck: embeddings and linear", "[kernels][gradcheck]") {
  std::mt19937 rng(2);
  SECTION("embedding with repeated ids") {
    CheckGradients(
        {"embedding",
         {},
         Inputs(IntTensor({2, 5}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3}), RandomTensor({10, 6}, rng))});
  }
  SECTION("vocab-parallel embedding: ids outside the shard take no gradient") {
    Attrs a;
    a.SetInt("vocab_start", 4);
    a.SetInt("vocab_size", 12);
    CheckGradients(
        {"embedding", a,
         Inputs(IntTensor({2, 5}, {3, 4, 7, 11, 5, 9, 2, 6, 5, 8}), RandomTensor({4, 6}, rng))});
  }
  SECTION("sp_split: chunk 1 of 3") {
    Attrs a;
    a.SetInt("sp_rank", 1);
    a.SetInt("sp_degree", 3);
    CheckGradients({"sp_split", a, Inputs(RandomTensor({2, 3, 5}, rng))});
  }
  SECTION("bias_add") {
    CheckGradients({"bias_add", {}, Inputs(RandomTensor({2, 3, 7}, rng), RandomTensor({7}, rng))});
  }
  SECTION("position_embedding") {
    CheckGradients({"position_embedding",
                    {},
                    Inputs(RandomTensor({2, 5, 6}, rng), RandomTensor({8, 6}, rng))});
  }
  SECTION("linear with bias") {
    CheckGradients(
        {"linear",
         {},
         Inputs(RandomTensor({2, 3, 7}, rng), RandomTensor({5, 7}, rng), RandomTensor({5}, rng))});
  }
  SECTION("linear without bias") {
    CheckGradients({"linear", {}, Inputs(RandomTensor({4, 7}, rng), RandomTensor({5, 7}, rng))});
  }
}

TEST_CASE("gradcheck: norms", "[kernels][gradcheck]") {
  std::mt19937 rng(3);
  SECTION("layernorm") {
    CheckGradients({"layernorm",
                    {},
                    Inputs(RandomTensor({2, 3, 16}, rng, -2, 2), RandomTensor({16}, rng),
                           RandomTensor({16}, rng))});
  }
  SECTION("rmsnorm") {
    CheckGradients(
        {"rmsnorm", {}, Inputs(RandomTensor({5, 16}, rng, -2, 2), RandomTensor({16}, rng))});
  }
}

TEST_CASE("gradcheck: rope", "[kernels][gradcheck]") {
  std::mt19937 rng(4);
  Attrs a = HeadAttrs(4, 2);
  a.SetFloat("theta", 100.0);
  CheckGradients({"rope", a, Inputs(RandomTensor({2, 6, 8 * 8}, rng))});
}

TEST_CASE("gradcheck: attention", "[kernels][gradcheck]") {
  std::mt19937 rng(5);
  // The qkv values are scaled up so the softmax is far from uniform.
  SECTION("multi-head, short sequence") {
    CheckGradients({"attention", HeadAttrs(2, 2), Inputs(RandomTensor({2, 5, 6 * 4}, rng, -2, 2))});
  }
  SECTION("GQA H=4 Hkv=2, T=70 (partial second block)") {
    CheckGradients(
        {"attention", HeadAttrs(4, 2), Inputs(RandomTensor({2, 70, 8 * 8}, rng, -2, 2))});
  }
  SECTION("B*Hkv below the thread count: split backward") {
    const int saved = omp_get_max_threads();
    for (int threads : {1, 4}) {
      omp_set_num_threads(threads);
      INFO("threads " << threads);
      CheckGradients(
          {"attention", HeadAttrs(2, 1), Inputs(RandomTensor({1, 150, 4 * 8}, rng, -2, 2))});
    }
    omp_set_num_threads(saved);
  }
}

TEST_CASE("gradcheck: cross_entropy with ignored targets", "[kernels][gradcheck]") {
  std::mt19937 rng(6);
  Attrs a;
  a.SetInt("ignore_index", -1);
  CheckGradients({"cross_entropy", a,
                  Inputs(RandomTensor({2, 4, 11}, rng, -3, 3),
                         IntTensor({2, 4}, {3, -1, 0, 10, 7, 7, -1, 2}))});
}

TEST_CASE("gradcheck: undefined gradients are skipped, the others unchanged",
          "[kernels][gradcheck]") {
  std::mt19937 rng(8);
  OpHarness h("linear", {});
  h.inputs = Inputs(RandomTensor({6, 5}, rng), RandomTensor({4, 5}, rng), RandomTensor({4}, rng));
  REQUIRE(h.Forward().ok());
  OwnedTensor dy = RandomTensor({6, 4}, rng);
  OwnedTensor dx = ZerosLike(h.inputs[0].view()), dw = ZerosLike(h.inputs[1].view());
  OwnedTensor db = ZerosLike(h.inputs[2].view()), dw_only = ZerosLike(h.inputs[1].view());
  REQUIRE(h.Backward({dy.view()}, {dx.view(), dw.view(), db.view()}).ok());
  REQUIRE(h.Backward({dy.view()}, {Tensor(), dw_only.view(), Tensor()}).ok());
  for (int64_t i = 0; i < dw.numel(); ++i) REQUIRE(dw_only.f32()[i] == dw.f32()[i]);
}

TEST_CASE("gradcheck: every registered op is covered", "[kernels][gradcheck]") {
  // vocab_max, vocab_ce_stats and vocab_ce_loss take no gradient but the logits' (the chain
  // against cross_entropy in tensor_parallel_test.cc); sp_gather and sp_scatter compute nothing
  // (the plan's collectives do: runtime/worker/tp_graph_test.cc); pipe_recv and pipe_send move
  // gradients between pipeline stages, not derivatives (kernels/cpu/pipeline_test.cc).
  const std::set<std::string> covered = {"add",
                                         "attention",
                                         "bias_add",
                                         "cross_entropy",
                                         "dropout",
                                         "embedding",
                                         "gelu",
                                         "layernorm",
                                         "linear",
                                         "mul",
                                         "position_embedding",
                                         "rmsnorm",
                                         "rope",
                                         "silu",
                                         "vocab_max",
                                         "vocab_ce_stats",
                                         "vocab_ce_loss",
                                         "sp_split",
                                         "sp_gather",
                                         "sp_scatter",
                                         "pipe_recv",
                                         "pipe_send"};
  for (const std::string& op : RegisteredOps()) {
    INFO("op " << op << " has no gradient check");
    CHECK(covered.count(op) == 1);
  }
}

}  // namespace
}  // namespace ds::kernels
