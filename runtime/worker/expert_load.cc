#include "runtime/worker/expert_load.h"

#include <cstdio>

namespace ds::worker {
namespace {

constexpr const char* kRoutes = "routes";

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

void ExpertLoad::Add(const exec::Executor& ex, int64_t rows) {
  size_t k = 0;
  for (const TensorInfo& t : ex.graph().tensors) {
    if (!EndsWith(t.name, kRoutes)) continue;
    const std::string prefix = t.name.substr(0, t.name.size() - std::string(kRoutes).size());
    const Tensor routes = ex.Activation(t.name);
    const Tensor buffer = ex.Activation(prefix + "dispatch");
    if (!routes.defined() || !buffer.defined()) continue;
    if (k == layers_.size()) layers_.push_back({prefix, std::vector<int64_t>(buffer.dim(0)), 0});
    Layer& layer = layers_[k++];
    const int64_t per_row = routes.numel() / std::max<int64_t>(1, ex.batch());
    const int64_t rows_per_expert = buffer.dim(1);
    for (int64_t i = 0; i < rows * per_row && i < routes.numel(); ++i) {
      const int32_t r = routes.i32()[i];
      if (r < 0)
        ++layer.dropped;
      else
        ++layer.counts.at(r / rows_per_expert);
    }
  }
}

std::string ExpertLoad::Report() const {
  std::string out;
  char buf[64];
  for (const Layer& l : layers_) {
    int64_t total = l.dropped;
    for (int64_t c : l.counts) total += c;
    if (total == 0) continue;
    out += "eval: expert load " + l.name;
    for (int64_t c : l.counts) {
      std::snprintf(buf, sizeof(buf), " %.1f%%", 100.0 * c / total);
      out += buf;
    }
    std::snprintf(buf, sizeof(buf), " of %lld routes (%lld dropped)\n",
                  static_cast<long long>(total), static_cast<long long>(l.dropped));
    out += buf;
  }
  return out;
}

}  // namespace ds::worker
