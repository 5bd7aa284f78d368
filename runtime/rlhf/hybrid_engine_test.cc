// The hybrid engine on a ZeRO-3 actor over 2 data-parallel ranks (threads): after supervised
// fine-tuning (answer-only loss, rows from ExampleBatches), every rank gathers the whole model
// (Trainer::GatherParams: one all-gather), generates greedily, and returns to the sharded
// layout (ReleaseParams). Its tokens equal those one rank generates from the checkpoint the job
// saved (the consolidated weights), on every rank; gathering again without a step in between
// gives the same tokens from the same generator, and after a step the rank still generates. The
// weights the ZeRO-3 ranks export (ExportWeights: gathered, rank 0 writes) are that model too,
// and so are their master shards gathered by MasterLayoutToFull (the EMA's way to a file).
// A forward gathering the units a block at a time (the PPO scoring's way) gives the logits of the
// whole gathered model. Tensor-parallel rollouts (Trainer::MakeTpGenerator, DeepSpeed's
// inference_tp_size 2) generate
// from slices cut while the ZeRO-3 units are gathered a block at a time the tokens the whole
// model does.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

#include "runtime/base/status_macros.h"
#include "runtime/data/addition_task.h"
#include "runtime/exec/executor.h"
#include "runtime/generate/generator.h"
#include "runtime/rlhf/example_batches.h"
#include "runtime/worker/tp_generator.h"
#include "runtime/worker/trainer_testing.h"

namespace ds::rlhf {
namespace {

std::vector<std::vector<TokenExample>> SftRows(int n) {
  Encoding e;
  e.encode = [](const std::string& s) { return data::AdditionStringToTokens(s); };
  e.end = {data::kAdditionEnd};
  e.pad = data::kAdditionPad;
  e.seq = 8;
  std::mt19937_64 rng(4);
  std::vector<std::vector<TokenExample>> rows;
  for (int i = 0; i < n; ++i) {
    std::string d;
    for (int k = 0; k < 3; ++k) d += static_cast<char>('0' + rng() % 10);
    auto x = SftExample({d + "=", d, "", false}, e);
    REQUIRE(x.ok());
    rows.push_back({*x});
  }
  return rows;
}

std::string Job(int stage, int micro, const std::string& extra) {
  return "train_batch_size: 16\ntrain_micro_batch_size_per_gpu: " + std::to_string(micro) +
         "\noptimizer: {type: AdamW, params: {lr: 0.003}}\n"
         "zero_optimization: {stage: " +
         std::to_string(stage) +
         ", stage3_param_persistence_threshold: 100}\n"
         "model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 14, "
         "max_seq_len: 8}\ndata: {seq_len: 8}\ntraining: {train_iters: 40}\n"
         "device: {type: cpu, threads: 1}\n" +
         extra;
}

const std::vector<std::vector<int32_t>> kPrompts = {{1, 2, 3, 11}, {9, 9, 0, 11}, {4, 4, 4, 11}};

StatusOr<std::vector<std::vector<int32_t>>> Greedy(generate::Generator& g) {
  generate::GenerateRequest r;
  r.prompts = kPrompts;
  r.max_new_tokens = 4;
  DS_ASSIGN_OR_RETURN(generate::GenerateResult out, g.Generate(r));
  return out.tokens;
}

TEST_CASE("Hybrid engine: ZeRO-3 DP 2 generates what one rank does from the checkpoint",
          "[rlhf][hybrid]") {
  const auto rows = SftRows(512);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/hybrid_ckpt";
  REQUIRE(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
  std::vector<std::vector<std::vector<int32_t>>> first(2), again(2), whole(2), sliced(2);
  std::vector<double> slice_share(2);
  std::vector<double> loss(2);
  std::vector<Status> errors =
      testing::OnRanks(2, [&](int rank, parallel::Communicator* c) -> Status {
        DS_ASSIGN_OR_RETURN(auto t,
                            testing::MakeTrainer(Job(3, 8, "checkpoint: {dir: " + dir + "}\n"), c));
        DS_RETURN_IF_ERROR(t->Initialize());
        DS_ASSIGN_OR_RETURN(auto batches, ExampleBatches::Create(rows, {8, 1, 2, rank, 2}));
        t->SetBatchSource(&batches);
        double start = 0;
        for (int i = 0; i < 30; ++i) {
          DS_ASSIGN_OR_RETURN(worker::StepMetrics m, t->TrainStep());
          if (i == 0) start = m.loss;
          loss[rank] = m.loss - start;
        }
        DS_RETURN_IF_ERROR(t->SaveCheckpoint());
        DS_RETURN_IF_ERROR(t->ExportWeights(dir + ".safetensors"));  // every rank; rank 0 writes
        // The master layout as whole weights (how the actor's moving average is saved): this
        // rank's master elements, gathered, are the weights just exported, and come back whole.
        zero::ParamStore& w = t->params();
        const std::vector<float> mine(w.master_data(), w.master_data() + w.shard_elements());
        DS_ASSIGN_OR_RETURN(std::vector<float> full, t->MasterLayoutToFull(mine));
        DS_RETURN_IF_ERROR(t->WriteFullWeights(full, dir + ".master.safetensors"));
        if (t->FullToMasterLayout(full) != mine)
          return InternalError("rank " + std::to_string(rank) + ": the master round trip differs");
        DS_ASSIGN_OR_RETURN(auto gen, t->MakeGenerator(3, 8));  // gathers (every rank)
        DS_ASSIGN_OR_RETURN(first[rank], Greedy(*gen));
        t->ReleaseParams();
        DS_RETURN_IF_ERROR(t->GatherParams());  // eval -> train layout -> eval, no step
        DS_ASSIGN_OR_RETURN(again[rank], Greedy(*gen));
        t->ReleaseParams();
        DS_RETURN_IF_ERROR(t->TrainStep().status());  // and after a step, still generating
        DS_RETURN_IF_ERROR(t->GatherParams());
        DS_ASSIGN_OR_RETURN(whole[rank], Greedy(*gen));
        t->ReleaseParams();
        // Unpinned generation (pin_parameters false): each forward gathers the units a block at a
        // time. Rank 1 stops after its first token and keeps decoding while rank 0 goes on (the
        // gathers are collectives); both get the pinned generator's tokens.
        generate::GenerateRequest req;
        req.prompts = kPrompts;
        req.max_new_tokens = 4;
        if (rank == 1)
          for (int32_t d = 0; d < 10; ++d) req.stop_tokens.push_back(d);
        DS_RETURN_IF_ERROR(t->GatherParams());
        DS_ASSIGN_OR_RETURN(generate::GenerateResult pinned, gen->Generate(req));
        t->ReleaseParams();
        DS_ASSIGN_OR_RETURN(auto lazy, t->MakeGenerator(3, 8, /*gather_blocks=*/1));
        DS_ASSIGN_OR_RETURN(generate::GenerateResult unpinned, lazy->Generate(req));
        if (unpinned.tokens != pinned.tokens)
          return InternalError("rank " + std::to_string(rank) + ": unpinned generation differs");
        // The scoring forwards' way (ForwardGathered): units gathered a block at a time, the same
        // logits as with the whole model gathered.
        DS_ASSIGN_OR_RETURN(auto ex, t->MakeInferenceExecutor(2, 8));  // gathers everything
        for (int i = 0; i < 16; ++i) ex->ids()[i] = ex->targets()[i] = (3 * i + rank) % 14;
        DS_RETURN_IF_ERROR(ex->Forward(0));
        const Tensor logits = ex->TensorData(ex->graph().FindTensor("logits"), false);
        const std::vector<float> all(logits.f32(), logits.f32() + logits.numel());
        DS_RETURN_IF_ERROR(t->ForwardGathered(ex.get(), 1));
        if (!std::equal(all.begin(), all.end(), logits.f32()))
          return InternalError("a forward gathering one block at a time gives other logits");
        // Tensor-parallel rollouts (inference_tp_size 2) from slices cut one block at a time
        // (tp_gather_partition_size 1) and eight at a time: the same slices, the same tokens.
        DS_ASSIGN_OR_RETURN(auto one, t->MakeTpGenerator(3, 8, 2, 1));
        DS_ASSIGN_OR_RETURN(auto eight, t->MakeTpGenerator(3, 8, 2, 8));
        const zero::ParamStore &a = one->params(), &b = eight->params();
        if (a.total_elements() != b.total_elements() ||
            !std::equal(a.master_data(), a.master_data() + a.total_elements(), b.master_data()))
          return InternalError("slices cut by 1 and by 8 blocks differ");
        slice_share[rank] = double(one->slice_bytes()) / (t->params().total_elements() * 4);
        generate::GenerateRequest r;
        r.prompts = kPrompts;
        r.max_new_tokens = 4;
        DS_ASSIGN_OR_RETURN(generate::GenerateResult out, one->Generate(r));
        sliced[rank] = out.tokens;
        return OkStatus();
      });
  for (const Status& s : errors) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  CHECK(loss[0] < -0.5);  // SFT on the answers learned
  std::vector<std::vector<int32_t>> plain, exported;
  errors = testing::OnRanks(1, [&](int, parallel::Communicator* c) -> Status {
    DS_ASSIGN_OR_RETURN(
        auto t,
        testing::MakeTrainer(Job(0, 16, "checkpoint: {dir: " + dir + ", load: latest}\n"), c));
    DS_RETURN_IF_ERROR(t->Initialize());
    DS_ASSIGN_OR_RETURN(auto gen, t->MakeGenerator(3, 8));
    DS_ASSIGN_OR_RETURN(plain, Greedy(*gen));
    // The weights the ZeRO-3 ranks exported: the same model.
    DS_ASSIGN_OR_RETURN(auto w, testing::MakeTrainer(Job(0, 16, ""), c));
    DS_RETURN_IF_ERROR(w->Initialize());
    DS_RETURN_IF_ERROR(w->LoadWeights(dir + ".safetensors"));
    DS_ASSIGN_OR_RETURN(auto wgen, w->MakeGenerator(3, 8));
    DS_ASSIGN_OR_RETURN(exported, Greedy(*wgen));
    DS_ASSIGN_OR_RETURN(std::vector<float> a, w->ReadFullWeights(dir + ".safetensors"));
    DS_ASSIGN_OR_RETURN(std::vector<float> b, w->ReadFullWeights(dir + ".master.safetensors"));
    if (a != b) return InternalError("the gathered master layout is not the exported weights");
    return OkStatus();
  });
  INFO(errors[0].ToString());
  REQUIRE(errors[0].ok());
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(first[r] == plain);
    CHECK(again[r] == first[r]);
    CHECK(sliced[r] == whole[r]);  // the tp group generated both ranks' prompts together
    CHECK(slice_share[r] < 0.75);  // each rank holds its slice, not the whole model
  }
  CHECK(exported == plain);
}

}  // namespace
}  // namespace ds::rlhf
