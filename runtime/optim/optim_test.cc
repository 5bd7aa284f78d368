#include <cmath>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/lr_schedule.h"
#include "zero/grad_norm.h"
#include "zero/optimizer.h"

namespace ds::optim {
namespace {

// A graph holding only w [2,3] (decayed) and b [2] (not decayed).
Graph TwoParams() {
  Graph g;
  TensorInfo w{"w", {Dim::Fixed(2), Dim::Fixed(3)}, DType::kF32, TensorRole::kParam, {}, {}};
  TensorInfo b{"b", {Dim::Fixed(2)}, DType::kF32, TensorRole::kParam, {}, {}};
  g.tensors = {w, b};
  return g;
}

// Runs 3 steps with the gradients of the reference script (step k: grads x (k+1)).
std::vector<float> RunThreeSteps(zero::OptimizerOptions o, DType model_dtype = DType::kF32) {
  Graph g = TwoParams();
  zero::ParamStore ps(g, model_dtype);
  const float w0[] = {0.5f, -1.0f, 2.0f, 0.25f, 0.0f, -0.75f}, b0[] = {0.1f, -0.2f};
  const float gw[] = {0.3f, -0.1f, 0.2f, 1.0f, -2.0f, 0.5f}, gb[] = {0.05f, -0.4f};
  const zero::ParamSlot& sw = *ps.Find("w");
  const zero::ParamSlot& sb = *ps.Find("b");
  std::copy(w0, w0 + 6, ps.MasterView(sw).f32());
  std::copy(b0, b0 + 2, ps.MasterView(sb).f32());
  ps.SyncModelFromMaster();
  zero::Optimizer opt(o, &ps);
  for (int k = 0; k < 3; ++k) {
    ps.ZeroGrads();
    for (int i = 0; i < 6; ++i) ps.GradView(sw).f32()[i] = gw[i] * (k + 1);
    for (int i = 0; i < 2; ++i) ps.GradView(sb).f32()[i] = gb[i] * (k + 1);
    opt.Step(o.lr, 1.0f);
  }
  std::vector<float> out(ps.MasterView(sw).f32(), ps.MasterView(sw).f32() + 6);
  out.insert(out.end(), ps.MasterView(sb).f32(), ps.MasterView(sb).f32() + 2);
  return out;
}

void CheckClose(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == Approx(want[i]).epsilon(2e-6).margin(1e-7));
}

// Reference values printed by torch 1.13 (torch.optim.AdamW / Adam / SGD) for the same
// parameters, gradients and hyper-parameters, with weight_decay 0.1 on w and 0 on b.
TEST_CASE("Optimizer: AdamW, Adam and SGD match torch.optim", "[optim]") {
  zero::OptimizerOptions adamw;
  adamw.lr = 0.01f;
  adamw.beta1 = 0.9f;
  adamw.beta2 = 0.95f;
  adamw.weight_decay = 0.1f;
  CheckClose(RunThreeSteps(adamw), {0.4695061147212982, -0.9680077433586121, 1.9650107622146606,
                                    0.22025537490844727, 0.028995389118790627, -0.7767475843429565,
                                    0.07097505033016205, -0.17097504436969757});
  zero::OptimizerOptions adam = adamw;
  adam.type = zero::OptimizerOptions::Type::kAdam;
  CheckClose(RunThreeSteps(adam), {0.47080567479133606, -0.97036212682724, 1.9703651666641235,
                                   0.22094623744487762, 0.029025515541434288, -0.7788353562355042,
                                   0.07097505033016205, -0.17097504436969757});
  zero::OptimizerOptions sgd;
  sgd.type = zero::OptimizerOptions::Type::kSgd;
  sgd.lr = 0.1f;
  sgd.momentum = 0.9f;
  sgd.weight_decay = 0.1f;
  CheckClose(RunThreeSteps(sgd),
             {0.1886264830827713, -0.8498579859733582, 1.6997159719467163, -0.7091152667999268,
              1.8904199600219727, -1.1808892488479614, 0.05244999751448631, 0.18039999902248383});
  CHECK(*zero::ParseOptimizerType("Adam", true) == zero::OptimizerOptions::Type::kAdamW);
  CHECK(*zero::ParseOptimizerType("adam", false) == zero::OptimizerOptions::Type::kAdam);
  CHECK_FALSE(zero::ParseOptimizerType("Lamb", true).ok());
}

// DeepSpeed's bias_correction: false (FusedAdam, CPU Adam): the raw moments, against the update
// written out in double here.
std::vector<double> NoBiasCorrection(const zero::OptimizerOptions& o) {
  const double w0[] = {0.5, -1.0, 2.0, 0.25, 0.0, -0.75, 0.1, -0.2};
  const double g0[] = {0.3, -0.1, 0.2, 1.0, -2.0, 0.5, 0.05, -0.4};
  std::vector<double> p(w0, w0 + 8), m(8, 0.0), v(8, 0.0);
  const bool adamw = o.type == zero::OptimizerOptions::Type::kAdamW;
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 8; ++i) {
      const double wd = i < 6 ? o.weight_decay : 0.0;  // w decays, b does not
      const double g = g0[i] * (k + 1) + (adamw ? 0.0 : wd * p[i]);
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      p[i] = p[i] * (adamw ? 1 - o.lr * wd : 1.0) - o.lr * m[i] / (std::sqrt(v[i]) + o.eps);
    }
  return p;
}

TEST_CASE("Optimizer: Adam and AdamW with bias_correction false take the raw moments", "[optim]") {
  for (auto type : {zero::OptimizerOptions::Type::kAdamW, zero::OptimizerOptions::Type::kAdam}) {
    INFO((type == zero::OptimizerOptions::Type::kAdam ? "adam" : "adamw"));
    zero::OptimizerOptions o;
    o.type = type;
    o.lr = 0.01f;
    o.beta1 = 0.9f;
    o.beta2 = 0.95f;
    o.weight_decay = 0.1f;
    o.bias_correction = false;
    const std::vector<float> raw = RunThreeSteps(o);
    CheckClose(raw, NoBiasCorrection(o));
    o.bias_correction = true;  // and it is not the corrected update
    CHECK(std::fabs(RunThreeSteps(o)[0] - raw[0]) > 1e-3);
  }
}

// Two "ranks" own complementary parts of the flat buffer. ZeRO-1 style: one segment each,
// gradients in the flat buffer. ZeRO-3 style: gradients and parameters partitioned, rank 1's
// two segments stored in its shard in reverse order. Every owned element must update exactly
// as the unsharded optimizer updates it, and the 16-bit copy must be its rounding.
TEST_CASE("Optimizer: shards of the flat buffer update exactly like the whole (ZeRO)", "[optim]") {
  for (auto type : {zero::OptimizerOptions::Type::kAdamW, zero::OptimizerOptions::Type::kSgd}) {
    for (bool stage3 : {false, true}) {
      INFO((type == zero::OptimizerOptions::Type::kSgd ? "sgd" : "adamw")
           << (stage3 ? " stage 3" : " stage 1"));
      Graph g = TwoParams();
      zero::ParamStore whole(g, DType::kBF16);
      whole.Initialize(g, 3);
      zero::OptimizerOptions o;
      o.type = type;
      o.lr = 0.05f;
      o.momentum = 0.9f;
      o.weight_decay = 0.1f;
      zero::Optimizer full(o, &whole);
      // Cuts through the middle of "w" (elements 0-5) and across the padding.
      const int64_t cut = 3, total = whole.total_elements();
      std::vector<zero::ShardLayout> layouts(2);
      layouts[0].segments = {{0, cut, 0}};
      if (stage3)
        layouts[1].segments = {{cut, 5, total - cut - 5}, {cut + 5, total - cut - 5, 0}};
      else
        layouts[1].segments = {{cut, total - cut, 0}};
      for (zero::ShardLayout& l : layouts) {
        l.shard_elements = total;
        l.partition_grads = l.partition_params = stage3;
      }
      std::vector<std::unique_ptr<zero::ParamStore>> ranks;
      std::vector<std::unique_ptr<zero::Optimizer>> opts;
      for (const zero::ShardLayout& l : layouts) {
        ranks.push_back(std::make_unique<zero::ParamStore>(g, DType::kBF16));
        ranks.back()->Shard(l);
        ranks.back()->Initialize(g, 3);
        opts.push_back(std::make_unique<zero::Optimizer>(o, ranks.back().get()));
      }
      auto owns = [](const zero::ParamStore& ps, int64_t i) {
        for (const zero::ShardSegment& s : ps.segments())
          if (i >= s.flat_begin && i < s.flat_begin + s.count) return true;
        return false;
      };
      for (int k = 0; k < 3; ++k) {
        for (const zero::ParamSlot& s : whole.slots())
          for (int64_t i = 0; i < s.numel; ++i) {
            const uint16_t v = FloatToBf16(0.1f * (i + 1) * (k + 1) * (s.decay ? 1 : -1));
            whole.GradView(s).u16()[i] = v;
            for (auto& ps : ranks) {
              if (!owns(*ps, s.offset + i)) continue;
              if (ps->grads_partitioned())
                static_cast<uint16_t*>(ps->grad_shard())[ps->ShardPos(s.offset + i)] = v;
              else
                ps->GradView(*ps->Find(s.name)).u16()[i] = v;
            }
          }
        full.Step(o.lr, 0.5f);
        for (auto& opt : opts) opt->Step(o.lr, 0.5f);
      }
      int64_t checked = 0;
      for (auto& ps : ranks) {
        for (const zero::ShardSegment& seg : ps->segments())
          for (int64_t i = seg.flat_begin; i < seg.flat_begin + seg.count; ++i) {
            CHECK(*ps->MasterAt(i) == whole.master()[i]);
            const uint16_t* model16 =
                stage3 ? static_cast<const uint16_t*>(ps->param_shard()) + ps->ShardPos(i)
                       : static_cast<const uint16_t*>(ps->model()) + i;
            CHECK(*model16 == static_cast<const uint16_t*>(whole.model())[i]);
            ++checked;
          }
      }
      CHECK(checked == total);
    }
  }
}

TEST_CASE("Optimizer: bf16 model copy is the rounded master", "[optim]") {
  Graph g = TwoParams();
  zero::ParamStore ps(g, DType::kBF16);
  ps.Initialize(g, 7);
  const zero::ParamSlot& sw = *ps.Find("w");
  for (int i = 0; i < 6; ++i) ps.GradView(sw).u16()[i] = FloatToBf16(0.5f * (i + 1));
  zero::OptimizerOptions o;
  o.lr = 0.1f;
  zero::Optimizer opt(o, &ps);
  opt.Step(o.lr, 1.0f);
  for (int i = 0; i < 6; ++i)
    CHECK(ps.ModelView(sw).u16()[i] == FloatToBf16(ps.MasterView(sw).f32()[i]));
}

TEST_CASE("GradNorm: norm, unscaling, overflow and clipping", "[optim]") {
  Graph g = TwoParams();
  zero::ParamStore ps(g, DType::kF16);
  const zero::ParamSlot& sw = *ps.Find("w");
  ps.GradView(sw).u16()[0] = FloatToF16(3.0f * 128);
  ps.GradView(sw).u16()[4] = FloatToF16(4.0f * 128);
  zero::GradNorm n = ComputeGradNorm(ps, 1.0f / 128);
  CHECK(n.finite);
  CHECK(n.norm == Approx(5.0));
  CHECK(zero::ClipCoefficient(n.norm, 1.0f) == Approx(0.2).epsilon(1e-5));
  CHECK(zero::ClipCoefficient(n.norm, 0.0f) == 1.0f);
  CHECK(zero::ClipCoefficient(n.norm, 10.0f) == 1.0f);
  ps.GradView(*ps.Find("b")).u16()[1] = FloatToF16(1e6f);  // overflows to inf in fp16
  CHECK_FALSE(zero::ComputeGradNorm(ps, 1.0f).finite);
}

// Values from DeepSpeed's formulas (lr_schedules.py), worked by hand.
TEST_CASE("LrSchedule: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR", "[optim]") {
  LrScheduleOptions o;
  o.type = "WarmupLR";
  o.warmup_min_lr = 0.0;
  o.warmup_max_lr = 0.01;
  o.warmup_num_steps = 100;
  auto s = LrSchedule::Create(o);
  REQUIRE(s.ok());
  CHECK(s->LrAt(0) == 0.0);
  CHECK(s->LrAt(9) == Approx(0.01 * std::log(10.0) / std::log(100.0)));
  CHECK(s->LrAt(500) == Approx(0.01));
  o.warmup_type = "linear";
  o.type = "WarmupDecayLR";
  o.total_num_steps = 300;
  s = LrSchedule::Create(o);
  REQUIRE(s.ok());
  CHECK(s->LrAt(50) == Approx(0.005));
  CHECK(s->LrAt(200) == Approx(0.01 * 100.0 / 200.0));
  CHECK(s->LrAt(400) == 0.0);
  o.type = "WarmupCosineLR";
  o.base_lr = 0.02;
  o.warmup_min_ratio = 0.1;
  o.cos_min_ratio = 0.01;
  s = LrSchedule::Create(o);
  REQUIRE(s.ok());
  CHECK(s->LrAt(50) == Approx(0.02 * (0.1 + 0.5 * 0.9)));
  CHECK(s->LrAt(99 + 100) == Approx(0.02 * (0.01 + 0.99 * 0.5)));  // halfway through decay
  CHECK(s->LrAt(299) == Approx(0.02 * 0.01));
  o.total_num_steps = 0;
  CHECK_FALSE(LrSchedule::Create(o).ok());
  o.type = "OneCycle";
  CHECK_FALSE(LrSchedule::Create(o).ok());
}

TEST_CASE("LossScaler: DeepSpeed's dynamic scaling with hysteresis", "[optim]") {
  LossScalerOptions o;
  o.enabled = true;
  o.initial_scale_power = 4;
  o.loss_scale_window = 3;
  o.hysteresis = 2;
  o.min_loss_scale = 4;
  LossScaler s(o);
  CHECK(s.scale() == 16);
  REQUIRE(s.Update(true).ok());  // first overflow: hysteresis absorbs it
  CHECK(s.scale() == 16);
  REQUIRE(s.Update(true).ok());  // second: halve
  CHECK(s.scale() == 8);
  REQUIRE(s.Update(false).ok());
  REQUIRE(s.Update(false).ok());
  CHECK(s.scale() == 8);
  REQUIRE(s.Update(false).ok());  // 3 clean steps since the overflow: double
  CHECK(s.scale() == 16);
  CHECK(s.skipped_steps() == 2);
  LossScaler copy(o);
  REQUIRE(copy.LoadState(s.SaveState()).ok());
  CHECK(copy.scale() == 16);
  CHECK(copy.skipped_steps() == 2);
  // Static scale never changes; disabled scaler is 1.
  o.loss_scale = 128;
  LossScaler fixed(o);
  REQUIRE(fixed.Update(true).ok());
  CHECK(fixed.scale() == 128);
  CHECK(LossScaler(LossScalerOptions{}).scale() == 1);
  // Overflow at the minimum ends the run.
  o.loss_scale = 0;
  o.initial_scale_power = 2;
  o.hysteresis = 1;
  LossScaler low(o);
  CHECK(low.Update(true).code() == StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ds::optim
