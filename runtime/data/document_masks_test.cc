// Megatron's masks for packed documents, on the example of megatron-core's
// _get_ltor_masks_and_position_ids (tokens [11, 12, EOD, 21, 22, 23, EOD, 31]), each flag
// alone and all three, over two rows.
#include "runtime/data/document_masks.h"

#include <catch2/catch.hpp>
#include <vector>

namespace ds::data {
namespace {

constexpr int32_t kEod = 0;

TEST_CASE("document masks follow megatron-core's example", "[data][megatron]") {
  // Row 0: the example. Row 1: one document without an EOD, then an EOD last.
  const std::vector<int32_t> inputs = {11, 12, kEod, 21, 22, 23, kEod, 31,
                                       41, 42, 43,   44, 45, 46, 47,   kEod};
  std::vector<int32_t> targets(16, 7), positions(16, -1), starts(16, -1);
  DocumentMaskOptions o;
  o.eod = kEod;
  o.reset_position_ids = o.reset_attention_mask = o.eod_mask_loss = true;
  ApplyDocumentMasks(o, 2, 8, inputs.data(), targets.data(), positions.data(), starts.data());
  CHECK(positions == std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0, 0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(starts == std::vector<int32_t>{0, 0, 0, 3, 3, 3, 3, 7, 0, 0, 0, 0, 0, 0, 0, 0});
  const int32_t i = DocumentMaskOptions::kIgnore;
  CHECK(targets == std::vector<int32_t>{7, 7, i, 7, 7, 7, i, 7, 7, 7, 7, 7, 7, 7, 7, i});
}

TEST_CASE("each document mask alone touches only its own output", "[data][megatron]") {
  const std::vector<int32_t> inputs = {11, 12, kEod, 21, 22, 23, kEod, 31};
  DocumentMaskOptions o;
  o.eod = kEod;
  o.eod_mask_loss = true;
  std::vector<int32_t> targets(8, 7);
  ApplyDocumentMasks(o, 1, 8, inputs.data(), targets.data(), nullptr, nullptr);
  CHECK(targets == std::vector<int32_t>{7, 7, -100, 7, 7, 7, -100, 7});
  o = DocumentMaskOptions();
  o.eod = kEod;
  o.reset_position_ids = true;
  std::vector<int32_t> positions(8, -1), same(8, 7);
  ApplyDocumentMasks(o, 1, 8, inputs.data(), same.data(), positions.data(), nullptr);
  CHECK(positions == std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0});
  CHECK(same == std::vector<int32_t>(8, 7));
  o.reset_position_ids = false;
  o.reset_attention_mask = true;
  std::vector<int32_t> starts(8, -1);
  ApplyDocumentMasks(o, 1, 8, inputs.data(), same.data(), nullptr, starts.data());
  CHECK(starts == std::vector<int32_t>{0, 0, 0, 3, 3, 3, 3, 7});
  CHECK_FALSE(DocumentMaskOptions().any());
}

}  // namespace
}  // namespace ds::data
