// The Trainer's inputs: where training micro-batches come from (data.train's, data.path's or
// data.sft's loader, or a batch source the caller sets), the graph's per-token inputs (kState
// tensors) it owns, and packed documents' masks.
#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "parallel/comm/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/megatron_job.h"
#include "runtime/data/megatron_loader.h"
#include "runtime/data/sft_loader.h"
#include "runtime/graph/validate.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/train_batches.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

// data.train's token file loader, data.path's Megatron datasets or data.sft's pairs: the default
// source of the training micro-batches. The datasets are built for data.train_samples, by default
// train_iters x train_batch_size samples (Megatron's --train-iters with --global-batch-size).
Status Trainer::OpenTrainData(int64_t micro) {
  const auto [dp_rank, dp_size] = DataShare();
  if (config_.data.supervised()) {
    DS_ASSIGN_OR_RETURN(train_data_, OpenSft(config_.data.sft.prompt, config_.data.sft.answer,
                                             micro, config_.data.shuffle, dp_rank, dp_size));
  } else if (config_.data.megatron()) {
    data::MegatronLoader::Options m;
    DS_ASSIGN_OR_RETURN(m.samples, data::MegatronSamplesFor(config_, 0, seq_, total_steps_));
    m.batch = micro;
    m.seq = seq_;
    m.dp_rank = dp_rank;
    m.dp_size = dp_size;
    DS_ASSIGN_OR_RETURN(std::unique_ptr<data::MegatronLoader> l, data::MegatronLoader::Open(m));
    if (world_rank_ == 0) {  // what Megatron logs as it builds its datasets
      DS_LOG_INFO("data",
                  "data.path: {} samples of {} tokens, split \"{}\" (its training part), "
                  "seed {}",
                  l->size(), seq_ + 1, config_.data.split, m.samples.seed);
      for (const std::string& line : l->samples().Describe()) DS_LOG_INFO("data", "  {}", line);
    }
    train_data_ = std::move(l);
  } else {
    data::DataLoaderOptions d;
    d.path = config_.data.train;
    d.format = config_.data.format;
    d.batch = micro;
    d.seq = seq_;
    d.shuffle = config_.data.shuffle;
    d.seed = config_.data.seed;
    d.dp_rank = dp_rank;
    d.dp_size = dp_size;
    DS_ASSIGN_OR_RETURN(train_data_, data::DataLoader::Open(d));
  }
  batches_->source = train_data_.get();
  return OkStatus();
}

// data.sft's loader over one prompt / answer pair of datasets (training or validation).
StatusOr<std::unique_ptr<data::TrainSource>> Trainer::OpenSft(const std::string& prompt,
                                                              const std::string& answer,
                                                              int64_t micro, bool shuffle,
                                                              int dp_rank, int dp_size) const {
  data::SftLoader::Options o;
  o.prompt = prompt;
  o.answer = answer;
  o.batch = micro;
  o.seq = seq_;
  o.max_prompt_seq_len = config_.data.sft.max_prompt_seq_len;
  o.max_answer_seq_len = config_.data.sft.max_answer_seq_len;
  o.eod = config_.data.eod_token;
  o.shuffle = shuffle;
  o.seed = config_.data.seed;
  o.dp_rank = dp_rank;
  o.dp_size = dp_size;
  if (config_.data.sft.left_padding) {  // the rows' pads go to the graph's left pads
    StatusOr<Tensor> pads = StateInput(kLeftPads);
    if (!pads.ok())
      return InvalidArgumentError(config_.source +
                                  ": data.sft.padding left needs model.pad_mask: true (the "
                                  "model then takes each row's left pads)");
    o.left_pads = pads->i32();
  }
  DS_ASSIGN_OR_RETURN(std::unique_ptr<data::SftLoader> l, data::SftLoader::Open(o));
  return std::unique_ptr<data::TrainSource>(std::move(l));
}

// Which share of the data this rank reads: its data-parallel rank and size. Ulysses: the sp
// ranks of a group read the same micro-batches (each its chunk of them).
std::pair<int, int> Trainer::DataShare() const {
  const int sp = std::max(1, plan_->topology().sp());
  return {comm_->rank() / sp, comm_->size() / sp};
}

// Evaluation reads from the start each time, every rank its data-parallel share of `iters`
// global batches. Megatron datasets: split 1, built for eval_iters x train_batch_size samples
// (one of Megatron's evaluations). Token files: data.validation in order.
StatusOr<std::unique_ptr<data::TrainSource>> Trainer::OpenValidationData(int64_t micro,
                                                                         int64_t iters) const {
  if (config_.data.supervised()) {
    const auto [rank, size] = DataShare();
    return OpenSft(config_.data.sft.validation_prompt, config_.data.sft.validation_answer, micro,
                   false, rank, size);
  }
  if (config_.data.megatron()) {
    data::MegatronLoader::Options m;
    DS_ASSIGN_OR_RETURN(m.samples, data::MegatronSamplesFor(config_, 1, seq_, total_steps_));
    m.samples.num_samples = std::max(m.samples.num_samples, iters * config_.train_batch_size);
    m.batch = micro;
    m.seq = seq_;
    std::tie(m.dp_rank, m.dp_size) = DataShare();
    m.name = "data.path (validation split)";
    DS_ASSIGN_OR_RETURN(std::unique_ptr<data::MegatronLoader> l, data::MegatronLoader::Open(m));
    return std::unique_ptr<data::TrainSource>(std::move(l));
  }
  data::DataLoaderOptions d;
  d.path = config_.data.validation;
  d.format = config_.data.format;
  d.batch = micro;
  d.seq = seq_;
  d.shuffle = false;
  std::tie(d.dp_rank, d.dp_size) = DataShare();
  DS_ASSIGN_OR_RETURN(std::unique_ptr<data::DataLoader> l, data::DataLoader::Open(d));
  return std::unique_ptr<data::TrainSource>(std::move(l));
}

// Packed documents (data.reset_position_ids, reset_attention_mask, eod_mask_loss): every
// micro-batch's masks, from its tokens, into the graph's kDocPositions / kDocStarts inputs.
Status Trainer::BindDocumentMasks(int64_t micro) {
  const config::DataConfig& d = config_.data;
  data::DocumentMaskOptions& m = batches_->masks;
  m.eod = d.eod_token;
  m.reset_position_ids = d.reset_position_ids;
  m.reset_attention_mask = d.reset_attention_mask;
  m.eod_mask_loss = d.eod_mask_loss;
  if (!d.reset_position_ids && !d.reset_attention_mask) return OkStatus();
  if (plan_->topology().sp() > 1)  // ds-launch --sp: the config's check cannot see it
    return InvalidArgumentError(config_.source +
                                ": data.reset_position_ids / reset_attention_mask do not run "
                                "with Ulysses sequence parallelism (each rank would need its "
                                "chunk's masks)");
  batches_->batch = micro;
  batches_->seq = seq_;
  auto buffer = [&](const char* name, int32_t** out) -> Status {
    DS_ASSIGN_OR_RETURN(Tensor t, StateInput(name));
    *out = t.i32();
    return OkStatus();
  };
  if (d.reset_position_ids) DS_RETURN_IF_ERROR(buffer(kDocPositions, &batches_->positions));
  if (d.reset_attention_mask) DS_RETURN_IF_ERROR(buffer(kDocStarts, &batches_->starts));
  return OkStatus();
}

// The graph's kState tensors (per-token inputs such as PPO's advantages): buffers of this rank,
// [micro, seq], the caller fills before each micro-batch (StateInput).
Status Trainer::BindStateInputs(const Graph& g, int64_t micro, exec::ExecutorOptions* eo) {
  std::vector<int> state;
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (g.tensors[t].role == TensorRole::kState) state.push_back(static_cast<int>(t));
  if (state.empty()) return OkStatus();
  if (!part_->chunks.empty() || device_memory_)
    return UnimplementedError("the graph's per-token inputs (\"" + g.tensors[state[0]].name +
                              "\") are bound on one stage on the host only: no pipeline, no "
                              "device.type cuda yet");
  DS_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs,
                      InferTensorSpecs(g, {{"batch", micro}, {"seq", seq_}}, g.name));
  for (int t : state) {
    const TensorSpec& spec = specs[t];
    if (DTypeSize(spec.dtype) != 4)
      return InvalidArgumentError("per-token input \"" + g.tensors[t].name + "\" is " +
                                  DTypeName(spec.dtype) + "; fp32 or int32 only");
    std::vector<float>& buf = state_inputs_[g.tensors[t].name];
    buf.assign(spec.numel(), 0.0f);
    eo->state[g.tensors[t].name] = Tensor(buf.data(), spec.shape, spec.dtype);
  }
  state_views_ = eo->state;
  return OkStatus();
}

StatusOr<Tensor> Trainer::StateInput(const std::string& name) const {
  auto it = state_views_.find(name);
  if (it == state_views_.end())
    return NotFoundError(config_.source + ": the model's graph has no per-token input \"" + name +
                         "\"");
  return it->second;
}

void Trainer::SetBatchSource(data::BatchSource* source) {
  batches_->source = source ? source : train_data_.get();
}

}  // namespace ds::worker
