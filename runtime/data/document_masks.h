// Megatron's masks for packed documents (GPTDataset's reset_position_ids, reset_attention_mask
// and eod_mask_loss), computed from a micro-batch's input tokens and the end-of-document id:
// with samples that run across documents, a token's document starts after the last EOD before
// it. For inputs [11, 12, EOD, 21, 22, 23, EOD, 31]:
//   starts    [0, 0, 0, 3, 3, 3, 3, 7]    reset_attention_mask: token j reads keys [starts[j], j]
//   positions [0, 1, 2, 0, 1, 2, 3, 0]    reset_position_ids: j - starts[j] (EOD keeps its own)
//   targets   t t -100 t t t -100 t       eod_mask_loss: no loss where the input is EOD
//
//   ApplyDocumentMasks(o, batch, seq, inputs, targets, positions, starts);
#pragma once

#include <cstdint>

namespace ds::data {

struct DocumentMaskOptions {
  int64_t eod = -1;  // the end-of-document token id
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
  static constexpr int32_t kIgnore = -100;  // cross_entropy's ignore_index

  bool any() const { return reset_position_ids || reset_attention_mask || eod_mask_loss; }
};

// For inputs / targets [batch, seq] (row-major): fills positions (when reset_position_ids) and
// starts (when reset_attention_mask), each int32 [batch, seq], and sets targets to kIgnore
// where the input is EOD (when eod_mask_loss). A pointer whose option is off may be null.
void ApplyDocumentMasks(const DocumentMaskOptions& o, int64_t batch, int64_t seq,
                        const int32_t* inputs, int32_t* targets, int32_t* positions,
                        int32_t* starts);

}  // namespace ds::data
