#include "kernels/attention_options.h"

#include <cmath>

#include "kernels/shape_check.h"

namespace ds::kernels {

const std::vector<std::string>& AttentionOptionAttrNames() {
  static const std::vector<std::string> names = {"scale", "window", "softcap"};
  return names;
}

Status ReadAttentionOptions(const char* op, const Attrs& a, int64_t head_dim, AttentionOptions* o) {
  const double scale = a.Float("scale", 0.0);
  o->window = a.Int("window", 0);
  o->softcap = static_cast<float>(a.Float("softcap", 0.0));
  if (scale < 0 || !std::isfinite(scale))
    return InvalidArgumentError(StrCat(op, ": scale must be > 0 (or 0 for 1/sqrt(head_dim))"));
  if (o->window < 0) return InvalidArgumentError(StrCat(op, ": window must be >= 0"));
  if (o->softcap < 0 || !std::isfinite(o->softcap))
    return InvalidArgumentError(StrCat(op, ": softcap must be >= 0"));
  o->scale = scale > 0 ? static_cast<float>(scale)
                       : 1.f / std::sqrt(static_cast<float>(std::max<int64_t>(head_dim, 1)));
  return OkStatus();
}

bool HasAttentionOptions(const Attrs& a) {
  return a.Float("scale", 0.0) != 0.0 || a.Int("window", 0) != 0 || a.Float("softcap", 0.0) != 0.0;
}

}  // namespace ds::kernels
