#include "runtime/data/document_masks.h"

namespace ds::data {

void ApplyDocumentMasks(const DocumentMaskOptions& o, int64_t batch, int64_t seq,
                        const int32_t* inputs, int32_t* targets, int32_t* positions,
                        int32_t* starts) {
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* in = inputs + b * seq;
    int32_t start = 0;  // the first token of the current document
    for (int64_t j = 0; j < seq; ++j) {
      const int64_t k = b * seq + j;
      if (o.reset_position_ids) positions[k] = static_cast<int32_t>(j) - start;
      if (o.reset_attention_mask) starts[k] = start;
      if (in[j] == o.eod) {
        if (o.eod_mask_loss) targets[k] = DocumentMaskOptions::kIgnore;
        start = static_cast<int32_t>(j) + 1;  // the next token begins a document
      }
    }
  }
}

}  // namespace ds::data
