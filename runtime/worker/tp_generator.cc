#include "runtime/worker/tp_generator.h"

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/base/status_macros.h"

namespace ds::worker {

StatusOr<generate::GenerateResult> TpGenerator::Generate(const generate::GenerateRequest& mine) {
  const int64_t n = static_cast<int64_t>(mine.prompts.size());
  if (n < 1 || n > max_batch_)
    return InvalidArgumentError("tensor-parallel rollouts: " + std::to_string(n) +
                                " prompts on this rank; 1 to " + std::to_string(max_batch_));
  // Every rank's count and longest prompt, then the prompts, padded to the longest.
  std::vector<int32_t> shape = {static_cast<int32_t>(n), 0}, shapes(2 * tp_);
  for (const std::vector<int32_t>& p : mine.prompts)
    shape[1] = std::max<int32_t>(shape[1], static_cast<int32_t>(p.size()));
  DS_RETURN_IF_ERROR(comm_->AllGather(parallel::BufferView(shape.data(), 2),
                                      parallel::BufferView(shapes.data(), 2 * tp_)));
  int32_t longest = 0;
  for (int r = 0; r < tp_; ++r) {
    if (shapes[2 * r] != n)
      return InvalidArgumentError("tensor-parallel rollouts: rank " + std::to_string(r) +
                                  " of the group has " + std::to_string(shapes[2 * r]) +
                                  " prompts and this one " + std::to_string(n));
    longest = std::max(longest, shapes[2 * r + 1]);
  }
  std::vector<int32_t> packed(n * (longest + 1), 0), all(packed.size() * tp_);
  for (int64_t b = 0; b < n; ++b) {
    const std::vector<int32_t>& p = mine.prompts[b];
    packed[b * (longest + 1)] = static_cast<int32_t>(p.size());
    std::copy(p.begin(), p.end(), packed.begin() + b * (longest + 1) + 1);
  }
  DS_RETURN_IF_ERROR(
      comm_->AllGather(parallel::BufferView(packed.data(), static_cast<int64_t>(packed.size())),
                       parallel::BufferView(all.data(), static_cast<int64_t>(all.size()))));
  generate::GenerateRequest group = mine;
  group.prompts.clear();
  for (int64_t i = 0; i < n * tp_; ++i) {
    const int32_t* row = all.data() + i * (longest + 1);
    group.prompts.emplace_back(row + 1, row + 1 + row[0]);
  }
  DS_ASSIGN_OR_RETURN(generate::GenerateResult out, gen_->Generate(group));
  generate::GenerateResult result = out;
  result.tokens.assign(out.tokens.begin() + tp_rank_ * n, out.tokens.begin() + (tp_rank_ + 1) * n);
  return result;
}

}  // namespace ds::worker
