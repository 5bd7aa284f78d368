#include "runtime/data/gpt_dataset.h"

#include <algorithm>
#include <string>

#include "runtime/base/status_macros.h"

namespace ds::data {
namespace {

constexpr int64_t kExtra = 1;  // add_extra_token_to_sequence

// The split's sequence ids, `epochs` times epoch-major, shuffled as one array.
std::vector<int32_t> DocumentIndex(std::pair<int64_t, int64_t> split, int64_t epochs,
                                   LegacyRandomState* rng) {
  std::vector<int32_t> out;
  out.reserve((split.second - split.first) * epochs);
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t s = split.first; s < split.second; ++s) out.push_back(static_cast<int32_t>(s));
  rng->Shuffle(&out);
  return out;
}

// helpers.cpp's build_sample_idx: where each of `samples` samples starts and the last ends.
std::vector<int64_t> SampleIndex(const IndexedDataset& d, const std::vector<int32_t>& doc_index,
                                 int64_t seq_len, int64_t samples) {
  std::vector<int64_t> out = {0, 0};
  out.reserve(2 * (samples + 1));
  int64_t pos = 0, offset = 0;
  for (int64_t s = 1; s <= samples; ++s) {
    int64_t remaining = seq_len + kExtra;
    while (remaining != 0) {
      const int64_t length = d.sequence_length(doc_index[pos]) - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - kExtra;
        remaining = 0;
      } else if (pos + 1 == static_cast<int64_t>(doc_index.size())) {
        offset = d.sequence_length(doc_index[pos]) - kExtra;  // the end of the last document
        break;
      } else {
        ++pos;
        offset = 0;
      }
    }
    out.push_back(pos);
    out.push_back(offset);
  }
  return out;
}

std::vector<int64_t> ShuffleIndex(int64_t first, int64_t total, LegacyRandomState* rng) {
  std::vector<int64_t> a(first), b(total - first);
  for (int64_t i = 0; i < first; ++i) a[i] = i;
  rng->Shuffle(&a);
  if (first == total) return a;
  for (int64_t i = first; i < total; ++i) b[i - first] = i;
  rng->Shuffle(&b);
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

LegacyRandomState::LegacyRandomState(uint32_t seed) {
  mt_[0] = seed;
  for (int i = 1; i < 624; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + i;
}

uint32_t LegacyRandomState::Next() {
  if (index_ >= 624) {
    for (int i = 0; i < 624; ++i) {
      const uint32_t y = (mt_[i] & 0x80000000u) | (mt_[(i + 1) % 624] & 0x7fffffffu);
      mt_[i] = mt_[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}

uint64_t LegacyRandomState::Interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s *= 2) mask |= mask >> s;
  uint64_t v;
  if (max <= 0xffffffffu) {
    while ((v = Next() & mask) > max) {
    }
  } else {
    while ((v = ((uint64_t{Next()} << 32 | Next()) & mask)) > max) {
    }
  }
  return v;
}

StatusOr<GptIndices> BuildGptIndices(const IndexedDataset& d, std::pair<int64_t, int64_t> split,
                                     int64_t num_samples, int64_t seq_len, uint32_t seed) {
  if (split.first < 0 || split.second > d.sequences() || split.first > split.second || seq_len < 1)
    return InvalidArgumentError(d.prefix() + ": bad split, sample count or sequence length");
  int64_t per_epoch = 0;
  for (int64_t s = split.first; s < split.second; ++s) per_epoch += d.sequence_length(s);
  if (num_samples > 0 && per_epoch <= kExtra)
    return InvalidArgumentError(
        d.prefix() + ": the split of sequences [" + std::to_string(split.first) + ", " +
        std::to_string(split.second) + ") holds " + std::to_string(per_epoch) +
        " tokens and is asked for " + std::to_string(num_samples) + " samples");
  if (num_samples < 0) num_samples = std::max<int64_t>(0, (per_epoch - kExtra) / seq_len);
  GptIndices ix;
  ix.seq_len = seq_len;
  ix.epochs = 1;
  while (ix.epochs * per_epoch < num_samples * seq_len + kExtra) ++ix.epochs;
  const int64_t before = ((ix.epochs - 1) * per_epoch - kExtra) / seq_len;
  const int64_t per_epoch_samples = (per_epoch - kExtra) / seq_len;
  ix.separate_final_epoch =
      ix.epochs > 1 && num_samples - before < static_cast<int64_t>(0.8 * per_epoch_samples);
  LegacyRandomState rng(seed);
  if (ix.separate_final_epoch) {
    ix.document_index = DocumentIndex(split, ix.epochs - 1, &rng);
    const std::vector<int32_t> last = DocumentIndex(split, 1, &rng);
    ix.document_index.insert(ix.document_index.end(), last.begin(), last.end());
  } else {
    ix.document_index = DocumentIndex(split, ix.epochs, &rng);
  }
  const int64_t total = (ix.epochs * per_epoch - kExtra) / seq_len;
  ix.sample_index = SampleIndex(d, ix.document_index, seq_len, total);
  ix.shuffle_index = ShuffleIndex(ix.separate_final_epoch ? before : total, total, &rng);
  return ix;
}

Status GptSample(const IndexedDataset& d, const GptIndices& ix, int64_t k,
                 std::vector<int64_t>* tokens) {
  tokens->clear();
  if (k < 0 || k >= ix.samples())
    return OutOfRangeError(d.prefix() + ": sample " + std::to_string(k) + " of " +
                           std::to_string(ix.samples()));
  const int64_t j = ix.shuffle_index[k];
  const int64_t p0 = ix.sample_index[2 * j], o0 = ix.sample_index[2 * j + 1];
  const int64_t p1 = ix.sample_index[2 * j + 2], o1 = ix.sample_index[2 * j + 3];
  std::vector<int64_t> part;
  for (int64_t p = p0; p <= p1; ++p) {
    const int64_t begin = p == p0 ? o0 : 0;
    const int64_t end = p == p1 ? o1 + kExtra : d.sequence_length(ix.document_index[p]);
    DS_RETURN_IF_ERROR(d.Tokens(ix.document_index[p], &part, begin, end - begin));
    tokens->insert(tokens->end(), part.begin(), part.end());
  }
  return OkStatus();
}

}  // namespace ds::data
