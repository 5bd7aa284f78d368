// Pipeline stages by DeepSpeed's partition_method: contiguous, every node in exactly one stage,
// the embeddings first and the head last, the largest stage as small as any split makes it
// (checked against every split), and bad methods refused naming the key and the numbers.
#include <algorithm>
#include <functional>

#include "parallel/pipeline/pipe_stages.h"
#include "runtime/planner/plan_test_util.h"

namespace ds::parallel {
namespace {

using planner::testing::PresetGraph;

void CheckCover(const Graph& g, const std::vector<PipelineStage>& s) {
  REQUIRE(!s.empty());
  CHECK(s.front().first_block == -1);
  CHECK(s.back().last_block == g.num_blocks);
  CHECK(s.front().node_begin == 0);
  CHECK(s.back().node_end == static_cast<int>(g.nodes.size()));
  for (size_t i = 0; i < s.size(); ++i) {
    CHECK(s[i].node_begin < s[i].node_end);
    if (i > 0) {
      CHECK(s[i].node_begin == s[i - 1].node_end);
      CHECK(s[i].first_block == s[i - 1].last_block + 1);
    }
    for (int n = s[i].node_begin; n < s[i].node_end; ++n) {
      CHECK(g.nodes[n].block >= s[i].first_block);
      CHECK(g.nodes[n].block <= s[i].last_block);
    }
  }
}

// The least largest stage weight over every split of the blocks into k stages.
int64_t BestByEnumeration(const std::vector<int64_t>& w, int k, int64_t head, int64_t tail) {
  const int n = static_cast<int>(w.size());
  int64_t best = -1;
  std::vector<int> ends;
  std::function<void(int, int)> go = [&](int part, int from) {
    if (part == k - 1) {
      int64_t worst = 0, at = 0;
      for (int j = 0; j < k; ++j) {
        const int to = j == k - 1 ? n : ends[j];
        int64_t sum = j == 0 ? head : 0;
        for (int b = static_cast<int>(at); b < to; ++b) sum += w[b];
        if (j == k - 1) sum += tail;
        worst = std::max(worst, sum);
        at = to;
      }
      if (best < 0 || worst < best) best = worst;
      return;
    }
    for (int e = from + 1; e <= n - (k - part - 1); ++e) {
      ends.push_back(e);
      go(part + 1, e);
      ends.pop_back();
    }
  };
  go(0, 0);
  return best;
}

TEST_CASE("PartitionStages: parameters balances the parameter count", "[plan][pipe]") {
  const Graph g = PresetGraph("gpt2-124m");  // 12 blocks, tied 50257 x 768 embedding
  for (int k : {1, 2, 3, 4, 6, 12}) {
    INFO(k << " stages");
    auto s = PartitionStages(g, k, "parameters");
    REQUIRE(s.ok());
    REQUIRE(static_cast<int>(s->size()) == k);
    CheckCover(g, *s);
    // Each block's parameters, and the two ends' (the tied embedding on both end stages).
    auto one = PartitionStages(g, 12, "parameters");
    REQUIRE(one.ok());
    std::vector<int64_t> w;
    int64_t head = 0, tail = 0;
    for (const PipelineStage& st : *one) w.push_back(st.parameters);
    const int64_t block = w[1];
    head = w.front() - block;
    tail = w.back() - block;
    for (int64_t& x : w) x = block;
    int64_t worst = 0;
    for (const PipelineStage& st : *s) worst = std::max(worst, st.parameters);
    if (k > 1) CHECK(worst == BestByEnumeration(w, k, head, tail));
  }
  auto four = PartitionStages(g, 4, "parameters");
  REQUIRE(four.ok());
  // The embedding's 38.6 M weigh like 5 blocks: the end stages take the fewest blocks.
  CHECK((*four)[0].last_block - (*four)[0].first_block <
        (*four)[1].last_block - (*four)[1].first_block);
  WARN(FormatStages(*four, g.num_blocks));
  CHECK(FormatStages(*four, g.num_blocks).find("stage 0: embeddings + block") != std::string::npos);
}

TEST_CASE("PartitionStages: uniform and type:REGEX", "[plan][pipe]") {
  const Graph g = PresetGraph("gpt2-small-test");  // 4 blocks
  auto uniform = PartitionStages(g, 3, "uniform");
  REQUIRE(uniform.ok());
  CheckCover(g, *uniform);
  // 4 blocks over 3 stages: the last stage takes the extra one.
  CHECK((*uniform)[0].last_block == 0);
  CHECK((*uniform)[1].first_block == 1);
  CHECK((*uniform)[1].last_block == 1);
  CHECK((*uniform)[2].first_block == 2);
  CHECK((*uniform)[2].weight == 2);
  auto attention = PartitionStages(g, 2, "type:ATTENTION");  // ops match, case-insensitive
  REQUIRE(attention.ok());
  CHECK((*attention)[0].last_block == 1);
  CHECK((*attention)[0].weight == 2);
  auto named = PartitionStages(g, 4, "type:^h\\.[0-9]+\\.mlp");
  REQUIRE(named.ok());
  CHECK(named->size() == 4);
}

// flops balances what each stage computes: a GPT-2 with a large vocabulary has a head (tied: no
// parameters of its own) that costs more than a block, so the last stage takes fewer blocks
// than by parameters, and the split is the best the FLOPs allow.
TEST_CASE("PartitionStages: flops balances compute, the head counted", "[plan][pipe]") {
  const Graph g = planner::testing::SizedGraph("gpt2", 4, 256, 8192, 256);
  auto params = PartitionStages(g, 2, "parameters");
  auto flops = PartitionStages(g, 2, "flops", 4, 256);
  REQUIRE(params.ok());
  REQUIRE(flops.ok());
  CHECK((*params)[0].last_block == 1);  // 2 + 2 blocks: the embeddings' parameters weigh
  CHECK((*flops)[0].last_block == 2);   // 3 + 1: the head's FLOPs weigh
  CHECK((*flops)[1].weight < (*flops)[0].weight + (*flops)[1].weight / 2);
  // The largest stage is the smallest any split gives.
  auto one_three = PartitionStages(g, 4, "flops", 4, 256);
  REQUIRE(one_three.ok());
  int64_t largest = 0;
  for (const PipelineStage& st : *one_three) largest = std::max(largest, st.weight);
  CHECK(largest == (*one_three)[3].weight);  // the head's stage, alone with block 3
}

TEST_CASE("PartitionStages: bad methods and sizes are refused", "[plan][pipe]") {
  const Graph g = PresetGraph("gpt2-small-test");
  auto many = PartitionStages(g, 5, "uniform");
  REQUIRE_FALSE(many.ok());
  CHECK(many.status().message().find("5 stages") != std::string::npos);
  CHECK(many.status().message().find("has 4 transformer blocks") != std::string::npos);
  auto unknown = PartitionStages(g, 2, "best");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message().find(
            "\"best\" must be parameters, flops, uniform or type:REGEX") != std::string::npos);
  auto none = PartitionStages(g, 2, "type:conv");
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().message().find("leaves stage 0 of 2 without a matching block (0 of 4") !=
        std::string::npos);
  auto regex = PartitionStages(g, 2, "type:[");
  REQUIRE_FALSE(regex.ok());
  CHECK(regex.status().message().find("bad regex") != std::string::npos);
}

}  // namespace
}  // namespace ds::parallel
