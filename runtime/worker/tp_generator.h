// TpGenerator: DeepSpeed-Chat's hybrid engine with inference_tp_size. A model that trains with
// data parallelism (ZeRO 0-3) generates with tensor parallelism: consecutive groups of `tp` ranks
// each hold a tensor-parallel slice of the weights (their query heads, the kv heads those read,
// 1/tp of the MLP and of the vocabulary rows) and generate their prompts together. The slices are
// cut from the training weights `gather_blocks` blocks at a time (DeepSpeed's
// tp_gather_partition_size): under ZeRO-3 each group of layers is all-gathered, sliced and
// released before the next, so no rank ever holds the whole model (Trainer::SliceForTp).
//
//   DS_ASSIGN_OR_RETURN(auto tg, trainer->MakeTpGenerator(8, 64, /*tp=*/2, /*gather_blocks=*/8));
//   DS_ASSIGN_OR_RETURN(GenerateResult mine, tg->Generate(request));  // every rank of the group
//   ... train ...; DS_RETURN_IF_ERROR(trainer->SliceForTp(tg.get()));  // new weights
#pragma once

#include <cstdint>
#include <memory>

#include "parallel/comm/communicator.h"
#include "parallel/tensor/tp_graph.h"
#include "runtime/base/status.h"
#include "runtime/generate/generator.h"
#include "zero/param_store.h"

namespace ds::worker {

class TpGenerator {
 public:
  // Every rank of the group calls it with its own prompts, as many on each (at most
  // max_batch): the group's prompts are all-gathered, generated as one batch (every rank samples
  // the same tokens: sequence first_sequence + r n + b for rank r's prompt b) and each rank gets
  // the results of its own.
  StatusOr<generate::GenerateResult> Generate(const generate::GenerateRequest& mine);

  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  int gather_blocks() const { return gather_blocks_; }
  const parallel::TpLocalGraph& local() const { return local_; }
  zero::ParamStore& params() { return *params_; }
  // The slice's fp32 bytes on this rank.
  int64_t slice_bytes() const { return params_->total_elements() * 4; }

 private:
  friend class Trainer;
  TpGenerator() = default;

  std::unique_ptr<parallel::Communicator> comm_;  // the group
  parallel::TpLocalGraph local_;
  std::unique_ptr<zero::ParamStore> params_;
  std::unique_ptr<generate::Generator> gen_;
  int tp_ = 1, tp_rank_ = 0, gather_blocks_ = 8;
  int64_t max_batch_ = 0;  // per rank
};

}  // namespace ds::worker
