#include "runtime/data/train_source.h"

#include <exception>

#include <yaml-cpp/yaml.h>

namespace ds::data {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

std::string DataLoaderState::ToJson() const {
  return "{\"epoch\": " + Str(epoch) + ", \"position\": " + Str(position) + "}";
}

StatusOr<DataLoaderState> DataLoaderState::FromJson(const std::string& json) {
  DataLoaderState s;
  try {
    const YAML::Node n = YAML::Load(json);
    long long epoch = -1;
    long long position = -1;
    if (!n.IsMap() || !YAML::convert<long long>::decode(n["epoch"], epoch) ||
        !YAML::convert<long long>::decode(n["position"], position) || epoch < 0 || position < 0) {
      return InvalidArgumentError(
          "data loader state: expected {\"epoch\": E, \"position\": P} "
          "with integers >= 0, got " +
          json);
    }
    s.epoch = epoch;
    s.position = position;
  } catch (const std::exception& e) {
    return InvalidArgumentError("data loader state: " + std::string(e.what()) + " in " + json);
  }
  return s;
}

}  // namespace ds::data
