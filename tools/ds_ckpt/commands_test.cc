#include "tools/ds_ckpt/commands.h"

#include <catch2/catch.hpp>
#include <string>

#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/test_util.h"

namespace ds::tools {
namespace {

using ckpt::testing::RandomTensor;

bool Has(const std::string& s, const std::string& part) {
  INFO(s);
  return s.find(part) != std::string::npos;
}

TEST_CASE("ds-ckpt: inspect and verify a checkpoint", "[ckpt][tools]") {
  std::string root = ckpt::testing::MakeTempDir("ds_ckpt_cmd");
  OwnedTensor w = RandomTensor({4, 3}, DType::kBF16, 1);
  OwnedTensor m = RandomTensor({4, 3}, DType::kF32, 2);
  ckpt::CheckpointContents c;
  c.step = 12;
  c.model = {{"h.0.ln_1.weight", w.view()}};
  c.optimizer = {{"exp_avg/h.0.ln_1.weight", m.view()}};
  c.state["scheduler"] = "{}";
  c.info["zero_stage"] = "1";
  c.shards["exp_avg/h.0.ln_1.weight"] = ckpt::ShardRecord{{8, 3}, {4, 0}};
  REQUIRE(ckpt::SaveCheckpoint(root, c).ok());

  auto text = InspectCheckpoint(root);
  REQUIRE(text.ok());
  CHECK(Has(*text, "step: 12"));
  CHECK(Has(*text, "info: zero_stage = 1"));
  CHECK(Has(*text, "model.safetensors:h.0.ln_1.weight  bf16 [4, 3]  24 B  crc32c "));
  CHECK(Has(*text, "shard of [8, 3] at [4, 0]"));
  CHECK(Has(*text, "state: scheduler"));
  CHECK(Has(*text, "checksums: all verified"));

  auto ok = VerifyCheckpoint(root);
  REQUIRE(ok.ok());
  CHECK(Has(*ok, "OK: " + root + "/step_00000012 step 12, 3 files, 2 tensors verified"));

  auto file = InspectCheckpoint(root + "/step_00000012/model.safetensors");
  REQUIRE(file.ok());
  CHECK(Has(*file, "h.0.ln_1.weight  bf16 [4, 3]"));

  const std::string model = root + "/step_00000012/model.safetensors";
  ckpt::testing::XorByteAt(model, ckpt::testing::ReadRawFile(model).size() - 1);
  auto bad = VerifyCheckpoint(root);
  REQUIRE_FALSE(bad.ok());
  CHECK(Has(bad.status().message(), "tensor h.0.ln_1.weight checksum mismatch"));
  CHECK_FALSE(InspectCheckpoint(root).ok());
}

TEST_CASE("ds-ckpt: consolidate of a missing checkpoint fails; bad dtype is an argument error",
          "[ckpt][tools]") {
  Status s = RunConsolidate({"in", "out"});
  CHECK_FALSE(s.ok());
  ConvertOptions o{"gpt2", "in.safetensors", "out.safetensors", "i32", 0, 0};
  CHECK(RunExport(o).code() == StatusCode::kInvalidArgument);
  o.dtype = "f32";
  o.family = "bert";
  CHECK(RunImport(o).code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ds::tools
