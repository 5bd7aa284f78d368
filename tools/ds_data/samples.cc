#include "tools/ds_data/samples.h"

#include <cstdio>
#include <string>

#include "runtime/base/status_macros.h"

namespace ds::tools {

Status RunSamples(const SamplesOptions& o) {
  DS_ASSIGN_OR_RETURN(data::MegatronSamples samples, data::MegatronSamples::Open(o.data));
  if (o.first < 0 || o.count < 0 || o.first + o.count > samples.size())
    return OutOfRangeError("samples [" + std::to_string(o.first) + ", " +
                           std::to_string(o.first + o.count) + ") of " +
                           std::to_string(samples.size()));
  std::vector<int64_t> tokens;
  std::string line;
  for (int64_t k = o.first; k < o.first + o.count; ++k) {
    DS_RETURN_IF_ERROR(samples.Sample(k, &tokens));
    line = "[";
    for (size_t j = 0; j < tokens.size(); ++j) line += (j ? ", " : "") + std::to_string(tokens[j]);
    std::printf("%s]\n", line.c_str());
  }
  return OkStatus();
}

}  // namespace ds::tools
