#include "runtime/generate/generator.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"

namespace ds::generate {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generator::Generator(planner::InferencePlan plan, zero::ParamStore* params, int64_t max_batch,
                     parallel::Communicator* tp_comm)
    : plan_(std::move(plan)),
      params_(params),
      tp_comm_(tp_comm),
      max_batch_(max_batch),
      pad_(max_batch, 0) {
  for (const planner::CacheLayer& c : plan_.decode.layers)
    for (int kv = 0; kv < 2; ++kv)
      caches_.emplace_back(max_batch * c.n_kv_head * plan_.decode.max_len * c.head_dim, 0.0f);
}

StatusOr<std::unique_ptr<Generator>> Generator::Create(const Graph& model, zero::ParamStore* params,
                                                       const GeneratorOptions& options) {
  if (options.max_batch < 1) return InvalidArgumentError("generation: max_batch must be >= 1");
  if (options.tp > 1 && (!options.tp_comm || options.tp_comm->size() != options.tp))
    return InvalidArgumentError("generation: tensor parallelism " + Str(options.tp) +
                                " needs its group's communicator of " + Str(options.tp) + " ranks");
  int64_t max_len = options.max_len;
  if (max_len == 0) {
    auto it = model.config.find("max_seq_len");
    if (it == model.config.end())
      return InvalidArgumentError("generation: model " + model.name +
                                  " has no max_seq_len; give max_len");
    max_len = it->second;
  }
  DS_ASSIGN_OR_RETURN(planner::InferencePlan plan,
                      planner::MakeInferencePlan(model, max_len, options.tp, options.tp_rank));
  if (options.gather_blocks > 0 && (!options.gather || !options.release || !options.any_live))
    return InvalidArgumentError(
        "generation: gather_blocks without its gather, release and "
        "any_live");
  auto g = std::unique_ptr<Generator>(
      new Generator(std::move(plan), params, options.max_batch, options.tp_comm));
  g->options_ = options;
  return g;
}

Status Generator::ForwardInGroups(exec::Executor* ex, int begin, int end) {
  const int k = options_.gather_blocks;
  const auto& nodes = ex->graph().nodes;
  while (begin < end) {
    const int group = (nodes[begin].block + 1) / k;  // blocks -1 .. : groups of k
    int stop = begin;
    while (stop < end && (nodes[stop].block + 1) / k == group) ++stop;
    const int first = group * k - 1, last = first + k - 1;
    DS_RETURN_IF_ERROR(options_.gather(first, last));
    const Status s = ex->ForwardNodes(0, begin, stop);
    DS_RETURN_IF_ERROR(options_.release(first, last));
    DS_RETURN_IF_ERROR(s);
    begin = stop;
  }
  return OkStatus();
}

StatusOr<exec::Executor*> Generator::ExecutorFor(int64_t batch, int64_t seq) {
  auto it = executors_.find({batch, seq});
  if (it != executors_.end()) return it->second.ex.get();
  if (seq > 1)  // one prefill shape at a time: each holds its activations
    for (auto e = executors_.begin(); e != executors_.end();)
      e = e->first.second > 1 ? executors_.erase(e) : std::next(e);
  Shaped& s = executors_[{batch, seq}];
  s.positions.assign(batch * seq, 0);
  exec::ExecutorOptions o;
  o.batch = batch;
  o.seq = seq;
  o.training = false;
  o.state[planner::kPositions] = Tensor(s.positions.data(), {batch, seq}, DType::kI32);
  o.state[planner::kStart] = Tensor(&start_, {1}, DType::kI32);
  o.state[planner::kPad] = Tensor(pad_.data(), {batch}, DType::kI32);
  for (size_t l = 0; l < plan_.decode.layers.size(); ++l) {
    const planner::CacheLayer& c = plan_.decode.layers[l];
    const Shape shape = {batch, c.n_kv_head, plan_.decode.max_len, c.head_dim};
    o.state[c.k] = Tensor(caches_[2 * l].data(), shape, DType::kF32);
    o.state[c.v] = Tensor(caches_[2 * l + 1].data(), shape, DType::kF32);
  }
  auto ex = exec::Executor::Create(plan_.decode.graph, params_, o);
  if (!ex.ok()) {
    executors_.erase({batch, seq});
    return ex.status();
  }
  s.ex = std::move(ex).value();
  return s.ex.get();
}

// ids [batch, seq] at slots [start_, start_ + seq), token (b, t) at position slot - pad_b.
Status Generator::Run(exec::Executor* ex, const std::vector<int32_t>& ids, int64_t seq) {
  std::vector<int32_t>& positions = executors_.at({batch_, seq}).positions;
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t t = 0; t < seq; ++t)
      positions[b * seq + t] = std::max<int32_t>(0, start_ + static_cast<int32_t>(t) - pad_[b]);
  std::copy(ids.begin(), ids.end(), ex->ids());
  DS_RETURN_IF_ERROR(RunStream(ex, batch_ * seq));
  last_ = ex;
  start_ += static_cast<int32_t>(seq);
  return OkStatus();
}

Status Generator::Prefill(const std::vector<std::vector<int32_t>>& prompts, int32_t pad_token) {
  const int64_t batch = static_cast<int64_t>(prompts.size());
  if (batch < 1 || batch > max_batch_)
    return InvalidArgumentError("generation: " + Str(batch) + " prompts for a batch of 1 to " +
                                Str(max_batch_));
  int64_t longest = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    if (prompts[b].empty())
      return InvalidArgumentError("generation: prompt " + Str(b) + " is empty");
    for (int32_t t : prompts[b])
      if (t < 0 || t >= plan_.decode.vocab)
        return InvalidArgumentError("generation: prompt " + Str(b) + " holds token " + Str(t) +
                                    " outside the vocabulary of " + Str(plan_.decode.vocab));
    longest = std::max<int64_t>(longest, prompts[b].size());
  }
  if (longest > plan_.decode.max_len)
    return InvalidArgumentError("generation: a prompt of " + Str(longest) +
                                " tokens exceeds the context of " + Str(plan_.decode.max_len));
  batch_ = batch;
  start_ = 0;
  std::vector<int32_t> ids(batch * longest, pad_token);
  for (int64_t b = 0; b < batch; ++b) {
    pad_[b] = static_cast<int32_t>(longest - prompts[b].size());
    std::copy(prompts[b].begin(), prompts[b].end(), ids.begin() + b * longest + pad_[b]);
  }
  DS_ASSIGN_OR_RETURN(exec::Executor * ex, ExecutorFor(batch, longest));
  return Run(ex, ids, longest);
}

Status Generator::Decode(const std::vector<int32_t>& tokens) {
  if (static_cast<int64_t>(tokens.size()) != batch_ || batch_ == 0)
    return FailedPreconditionError("generation: Decode of " + Str(tokens.size()) +
                                   " tokens after a Prefill of " + Str(batch_) + " prompts");
  if (start_ >= plan_.decode.max_len)
    return OutOfRangeError("generation: the cache's " + Str(plan_.decode.max_len) +
                           " slots are full");
  DS_ASSIGN_OR_RETURN(exec::Executor * ex, ExecutorFor(batch_, 1));
  return Run(ex, tokens, 1);
}

// FORWARD ranges and the tp group's collectives; each count is per token and sequence.
Status Generator::RunStream(exec::Executor* ex, int64_t tokens) {
  using Ins = proto::Instruction;
  for (const Ins& in : plan_.stream) {
    if (in.kind() == Ins::FORWARD) {
      DS_RETURN_IF_ERROR(options_.gather_blocks > 0
                             ? ForwardInGroups(ex, in.node_begin(), in.node_end())
                             : ex->ForwardNodes(0, in.node_begin(), in.node_end()));
      continue;
    }
    const Tensor t = ex->TensorData(in.activation().tensor(), false);
    const int64_t n =
        in.collective().count() * (in.kind() == Ins::ACT_ALL_GATHER ? batch_ : tokens);
    if (!t.defined() || t.dtype() != DType::kF32 || t.numel() != n)
      return InternalError("generation: the plan's " + Ins::Kind_Name(in.kind()) + " of \"" +
                           in.activation().name() + "\" moves " + Str(n) +
                           " fp32 values the executor does not hold as such");
    if (in.kind() == Ins::ACT_ALL_REDUCE) {
      DS_RETURN_IF_ERROR(tp_comm_->AllReduce({t.f32(), n}, parallel::ReduceOp::kSum));
      continue;
    }
    if (in.kind() != Ins::ACT_ALL_GATHER)
      return InternalError("generation: the plan's stream holds " + Ins::Kind_Name(in.kind()));
    // [tp][batch][vocab / tp] -> [batch][vocab]: rank r's rows are vocabulary r x vocab / tp on.
    const int64_t part = plan_.vocab_local, vocab = plan_.decode.vocab;
    gathered_.resize(plan_.tp * n);
    logits_.resize(batch_ * vocab);
    DS_RETURN_IF_ERROR(tp_comm_->AllGather({t.f32(), n}, {gathered_.data(), plan_.tp * n}));
    for (int r = 0; r < plan_.tp; ++r)
      for (int64_t b = 0; b < batch_; ++b)
        std::copy_n(gathered_.data() + (r * batch_ + b) * part, part,
                    logits_.data() + b * vocab + r * part);
  }
  return OkStatus();
}

const float* Generator::Logits(int64_t b) const {
  if (plan_.vocab_local != plan_.decode.vocab) return logits_.data() + b * plan_.decode.vocab;
  const Tensor t = last_->TensorData(plan_.decode.logits, false);  // [batch, 1, vocab]
  return t.f32() + b * plan_.decode.vocab;
}

StatusOr<GenerateResult> Generator::Generate(const GenerateRequest& r) {
  DS_RETURN_IF_ERROR(CheckSamplingOptions(r.sampling));
  if (r.max_new_tokens < 1) return InvalidArgumentError("generation: max_new_tokens must be >= 1");
  int64_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max<int64_t>(longest, p.size());
  if (longest + r.max_new_tokens - 1 > plan_.decode.max_len)
    return InvalidArgumentError("generation: a prompt of " + Str(longest) + " tokens and " +
                                Str(r.max_new_tokens) + " new ones exceed the context of " +
                                Str(plan_.decode.max_len));
  GenerateResult out;
  auto t0 = std::chrono::steady_clock::now();
  DS_RETURN_IF_ERROR(Prefill(r.prompts, r.pad_token));
  out.prefill_ms = MsSince(t0);
  for (const auto& p : r.prompts) out.prefill_tokens += static_cast<int64_t>(p.size());
  const int64_t n = batch_;
  out.tokens.assign(n, {});
  std::vector<bool> done(n, false);
  std::vector<int32_t> next(n, r.pad_token);
  t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < r.max_new_tokens; ++step) {
    if (step > 0) DS_RETURN_IF_ERROR(Decode(next));
    int64_t live = 0;
    for (int64_t b = 0; b < n; ++b) {
      if (done[b]) continue;
      std::vector<int32_t> held;  // what the repetition penalty reads, when there is one
      if (r.sampling.repetition_penalty != 1.0f) {
        held = r.prompts[b];
        held.insert(held.end(), out.tokens[b].begin(), out.tokens[b].end());
      }
      next[b] = Sample(Logits(b), plan_.decode.vocab, r.sampling, held, step, r.first_sequence + b);
      out.tokens[b].push_back(next[b]);
      done[b] = std::count(r.stop_tokens.begin(), r.stop_tokens.end(), next[b]) > 0;
      live += !done[b];
    }
    bool go_on = live > 0;
    if (options_.any_live) {
      DS_ASSIGN_OR_RETURN(go_on, options_.any_live(go_on));  // every rank decodes as long
    }
    if (!go_on) break;
  }
  out.decode_ms = MsSince(t0);
  for (const auto& t : out.tokens) out.decode_tokens += static_cast<int64_t>(t.size()) - 1;
  return out;
}

}  // namespace ds::generate
