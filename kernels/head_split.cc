#include "kernels/head_split.h"

#include <algorithm>

namespace ds::kernels {

Status CheckHeadSplit(int64_t n_head, int64_t n_kv_head, int64_t sp) {
  const std::string numbers = std::to_string(n_head) + " attention heads and " +
                              std::to_string(n_kv_head) + " key/value heads over sp " +
                              std::to_string(sp);
  if (sp < 1 || n_head < 1 || n_kv_head < 1 || n_head % n_kv_head != 0)
    return InvalidArgumentError("cannot split " + numbers);
  if (n_kv_head >= sp) return OkStatus();
  if (sp % n_kv_head == 0 && n_head % sp == 0) return OkStatus();
  return InvalidArgumentError(
      "cannot split " + numbers +
      ": each rank needs a key/value head of its own (n_kv_head >= sp), or sp must be a "
      "multiple of n_kv_head and divide n_head");
}

HeadRange KvHeads(int64_t n_head, int64_t n_kv_head, int64_t sp, int64_t j) {
  (void)n_head;
  if (n_kv_head < sp) {
    const int64_t k = j / (sp / n_kv_head);
    return {k, k + 1};
  }
  const int64_t base = n_kv_head / sp, extra = n_kv_head % sp;
  const int64_t begin = j * base + std::min(j, extra);
  return {begin, begin + base + (j < extra ? 1 : 0)};
}

HeadRange QueryHeads(int64_t n_head, int64_t n_kv_head, int64_t sp, int64_t j) {
  if (n_kv_head < sp) return {j * (n_head / sp), (j + 1) * (n_head / sp)};
  const int64_t g = n_head / n_kv_head;
  const HeadRange kv = KvHeads(n_head, n_kv_head, sp, j);
  return {kv.begin * g, kv.end * g};
}

HeadRange SegmentHeads(int64_t segment, int64_t n_head, int64_t n_kv_head, int64_t sp, int64_t j) {
  return segment == n_head ? QueryHeads(n_head, n_kv_head, sp, j)
                           : KvHeads(n_head, n_kv_head, sp, j);
}

}  // namespace ds::kernels
