// The pipeline-parallel ops, added by the planner where a stage's graph meets its neighbours
// (runtime/plan/pipe_graph.h); the plan's RECV and SEND move the data, these only give it a
// place in the graph:
//   pipe_recv   an activation the previous stage sent, [ids..., width] (the token ids give B and
//               T; with chunks d > 1 the sequence-parallel chunk [B T / d, width]); forward and
//               backward do nothing (its gradient is what the stage sends back)
//   pipe_send   the end of a stage that is not the last: inputs in pairs x_i, g_i (what the next
//               stage reads, and the gradient it sent back: a pipe_recv output), up to 16;
//               output the stage's loss, 0. Backward adds g_i into dx_i, whatever the loss
//               gradient.
// Neither can be partitioned again (TpRule::kNone).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

OpDef PipeRecv() {
  OpDef def;
  def.name = "pipe_recv";
  def.min_inputs = def.max_inputs = 1;
  def.attr_names = {"width", "chunks"};
  def.infer = [](const Attrs& a, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("pipe_recv", in, 1, 1));
    DS_RETURN_IF_ERROR(CheckInt32("pipe_recv", "ids", in[0]));
    const int64_t width = a.Int("width", 0), chunks = a.Int("chunks", 1);
    if (width < 1 || chunks < 1)
      return InvalidArgumentError(StrCat("pipe_recv: width ", width, ", chunks ", chunks));
    Shape shape = in[0].shape;
    if (chunks > 1) {
      const int64_t tokens = NumElements(in[0].shape);
      if (tokens % chunks != 0)
        return InvalidArgumentError(
            StrCat("pipe_recv: ", tokens, " tokens do not split into ", chunks, " chunks"));
      shape = {tokens / chunks};
    }
    shape.push_back(width);
    *out = {TensorSpec{shape, DType::kF32}};
    return OkStatus();
  };
  SetPerElementFlops(&def, 0.0, 0.0);
  def.non_differentiable_inputs = 1u;
  return def;
}

OpDef PipeSend() {
  OpDef def;
  def.name = "pipe_send";
  def.min_inputs = 2;
  def.max_inputs = 32;
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    if (in.size() % 2 != 0)
      return InvalidArgumentError(
          StrCat("pipe_send: ", in.size(), " inputs; it takes each sent tensor and its gradient"));
    for (size_t i = 0; i < in.size(); i += 2)
      if (in[i].shape != in[i + 1].shape)
        return InvalidArgumentError(StrCat("pipe_send: input ", i, " has shape ",
                                           ShapeToString(in[i].shape), " but its gradient ",
                                           ShapeToString(in[i + 1].shape)));
    *out = {TensorSpec{{1}, DType::kF32}};
    return OkStatus();
  };
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>&) { return 0.0; };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    double n = 0;
    for (size_t i = 0; i < in.size(); i += 2) n += static_cast<double>(in[i].numel());
    return n;
  };
  def.backward_reads_inputs = 0xaaaaaaaau;  // the gradients (odd inputs)
  def.non_differentiable_inputs = 0xaaaaaaaau;
  return def;
}

const bool kRegistered = RegisterOp(PipeRecv()) && RegisterOp(PipeSend());

}  // namespace
}  // namespace ds::kernels::ops
