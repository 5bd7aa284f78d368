// The pipeline ops: pipe_recv's shape from the token ids (and its refusals), pipe_send's loss 0
// and a backward that adds each received gradient into its tensor's gradient exactly, whatever
// the loss gradient, accumulating on a second call. Neither has a derivative to check by finite
// differences (pipe_send's backward is where the next stage's gradient enters); the chain of
// stages against the whole graph is runtime/worker/pipe_graph_test.cc.
#include <catch2/catch.hpp>
#include <random>

#include "kernels/cpu/op_test_util.h"
#include "kernels/registry.h"

namespace ds::kernels {
namespace {

using testing::IntTensor;
using testing::OpHarness;
using testing::RandomTensor;
using testing::ZerosLike;

TEST_CASE("pipe_recv: [ids..., width]", "[kernels][pipe]") {
  const OpDef* def = FindOp("pipe_recv");
  REQUIRE(def != nullptr);
  Attrs a;
  a.SetInt("width", 6);
  std::vector<TensorSpec> out;
  REQUIRE(def->infer(a, {TensorSpec{{2, 5}, DType::kI32}}, &out).ok());
  CHECK(out.at(0).shape == Shape{2, 5, 6});
  a.SetInt("chunks", 2);
  REQUIRE(def->infer(a, {TensorSpec{{2, 5}, DType::kI32}}, &out).ok());
  CHECK(out.at(0).shape == Shape{5, 6});
  a.SetInt("chunks", 3);
  CHECK_FALSE(def->infer(a, {TensorSpec{{2, 5}, DType::kI32}}, &out).ok());
  CHECK_FALSE(def->infer({}, {TensorSpec{{2, 5}, DType::kI32}}, &out).ok());  // no width
  OpHarness h("pipe_recv", Attrs());
  h.inputs.push_back(IntTensor({1, 2}, {0, 1}));
  CHECK_FALSE(h.Forward().ok());
}

TEST_CASE("pipe_send: loss 0, the received gradients added in", "[kernels][pipe]") {
  std::mt19937 rng(3);
  OpHarness h("pipe_send", {});
  h.inputs.push_back(RandomTensor({2, 3, 4}, rng));  // x0
  h.inputs.push_back(RandomTensor({2, 3, 4}, rng));  // g0
  h.inputs.push_back(RandomTensor({2, 5}, rng));     // x1
  h.inputs.push_back(RandomTensor({2, 5}, rng));     // g1
  REQUIRE(h.Forward().ok());
  CHECK(h.outputs[0].f32()[0] == 0.0f);
  auto dloss = RandomTensor({1}, rng);  // ignored
  auto dx0 = ZerosLike(h.inputs[0].view()), dx1 = ZerosLike(h.inputs[2].view());
  const std::vector<Tensor> grad_in = {dx0.view(), Tensor(), dx1.view(), Tensor()};
  REQUIRE(h.Backward({dloss.view()}, grad_in).ok());
  REQUIRE(h.Backward({dloss.view()}, grad_in).ok());
  for (int64_t i = 0; i < dx0.numel(); ++i)
    CHECK(dx0.f32()[i] == h.inputs[1].f32()[i] + h.inputs[1].f32()[i]);
  for (int64_t i = 0; i < dx1.numel(); ++i)
    CHECK(dx1.f32()[i] == h.inputs[3].f32()[i] + h.inputs[3].f32()[i]);
  OpHarness odd("pipe_send", {});
  odd.inputs.push_back(RandomTensor({2, 3}, rng));
  odd.inputs.push_back(RandomTensor({2, 4}, rng));
  CHECK_FALSE(odd.Forward().ok());  // a gradient of another shape
}

}  // namespace
}  // namespace ds::kernels
