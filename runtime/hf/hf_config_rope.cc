// RoPE's parameters from config.json as transformers 5 standardizes them
// (modeling_rope_utils.py; models-and-data.md section 2): the rope_scaling dict when not null
// (the legacy key, keyed by "type" or "rope_type"), else rope_parameters; rope_theta and
// partial_rotary_factor inside it or at the top level; llama3 / yarn's
// original_max_position_embeddings from the top level first (Phi 3), then the dict, then
// max_position_embeddings. A key the variant does not read, or a variant the runtime does not
// compute (longrope, mrope, ...), is refused by name.
#include <cmath>
#include <map>
#include <set>

#include "runtime/base/status_macros.h"
#include "runtime/hf/hf_config_reader.h"

namespace ds::hf::internal {
namespace {

// yarn's attention scale for a context extended `factor` times.
double YarnMscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

const std::set<std::string>& KeysOf(const std::string& type) {
  static const std::set<std::string> common = {"rope_type", "type", "rope_theta",
                                               "partial_rotary_factor"};
  static const std::map<std::string, std::set<std::string>> extra = {
      {"default", {}},
      {"linear", {"factor"}},
      {"dynamic", {"factor", "original_max_position_embeddings"}},
      {"llama3",
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}},
      {"yarn",
       {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor",
        "mscale", "mscale_all_dim", "truncate"}},
  };
  static std::map<std::string, std::set<std::string>> all;
  if (all.empty())
    for (const auto& [t, keys] : extra) {
      all[t] = common;
      all[t].insert(keys.begin(), keys.end());
    }
  return all.at(type);
}

// A number from the RoPE dict `d` (named `dict` in errors), or `dflt` when absent / null.
StatusOr<double> Num(const Config& c, const Json* d, const char* dict, const char* key,
                     double dflt) {
  const Json* v = d ? d->Find(key) : nullptr;
  if (!v || v->is_null()) return dflt;
  if (!v->is_number()) return c.Bad(std::string(dict) + "." + key, "must be a number");
  return v->as_double();
}

Status ReadVariant(const Config& c, const Json* d, const char* dict, ModelSpec* s) {
  RopeSpec& r = s->arch.rope;
  auto num = [&](const char* key, double dflt) { return Num(c, d, dict, key, dflt); };
  if (r.type == "default") return OkStatus();
  const std::string at = std::string(dict) + ".";
  const double none = -1;
  DS_ASSIGN_OR_RETURN(double factor, num("factor", none));
  DS_ASSIGN_OR_RETURN(int64_t top_original, c.IntOr("original_max_position_embeddings", 0));
  DS_ASSIGN_OR_RETURN(double original, num("original_max_position_embeddings", s->max_seq_len));
  r.original_max = top_original > 0 ? top_original : static_cast<int64_t>(original);
  if (factor == none && r.type == "yarn") factor = double(s->max_seq_len) / r.original_max;
  if (!(factor > 0)) return c.Bad(at + "factor", "must be a number > 0 for " + r.type);
  r.factor = factor;
  r.max_positions = s->max_seq_len;  // max_position_embeddings, whatever length the job runs at
  if (r.type == "llama3") {
    DS_ASSIGN_OR_RETURN(r.low_freq_factor, num("low_freq_factor", none));
    DS_ASSIGN_OR_RETURN(r.high_freq_factor, num("high_freq_factor", none));
    if (!(r.high_freq_factor > r.low_freq_factor && r.low_freq_factor > 0))
      return c.Bad(at + "high_freq_factor", "and low_freq_factor must satisfy high > low > 0");
  }
  if (r.type == "yarn") {
    DS_ASSIGN_OR_RETURN(r.beta_fast, num("beta_fast", 32));
    DS_ASSIGN_OR_RETURN(r.beta_slow, num("beta_slow", 1));
    DS_ASSIGN_OR_RETURN(double af, num("attention_factor", none));
    DS_ASSIGN_OR_RETURN(double mscale, num("mscale", 0));
    DS_ASSIGN_OR_RETURN(double mscale_all, num("mscale_all_dim", 0));
    if (af == none)
      af = mscale != 0 && mscale_all != 0
               ? YarnMscale(factor, mscale) / YarnMscale(factor, mscale_all)
               : YarnMscale(factor, 1);
    r.attention_factor = af;
    const Json* truncate = d ? d->Find("truncate") : nullptr;
    r.truncate = !truncate || truncate->is_null() || truncate->as_bool();
  }
  return OkStatus();
}

}  // namespace

Status ReadRope(const Config& c, ModelSpec* s) {
  const Json* scaling = c.Find("rope_scaling");
  const bool legacy = scaling && !scaling->is_null();
  const Json* d = legacy ? scaling : c.Find("rope_parameters");
  if (d && d->is_null()) d = nullptr;
  const char* dict = legacy ? "rope_scaling" : "rope_parameters";
  if (d && !d->is_object()) return c.Bad(dict, "must be an object");
  RopeSpec& r = s->arch.rope;
  const Json* type = d ? d->Find("rope_type") : nullptr;
  if (!type || type->is_null()) type = d ? d->Find("type") : nullptr;
  r.type = type && type->is_string() ? type->as_string() : "default";
  static const std::set<std::string> known = {"default", "linear", "dynamic", "llama3", "yarn"};
  if (!known.count(r.type))
    return c.Bad(std::string(dict) + ".rope_type",
                 "is \"" + r.type +
                     "\"; the runtime computes default, linear, dynamic, llama3 "
                     "and yarn RoPE");
  for (const auto& [key, value] : d ? d->members() : std::vector<Json::Member>{})
    if (!KeysOf(r.type).count(key))
      return c.Bad(std::string(dict) + "." + key, "is not read by " + r.type + " RoPE here");
  DS_ASSIGN_OR_RETURN(double top_theta, c.DoubleOr("rope_theta", 10000.0));
  DS_ASSIGN_OR_RETURN(double theta, Num(c, d, dict, "rope_theta", top_theta));
  DS_ASSIGN_OR_RETURN(double top_partial, c.DoubleOr("partial_rotary_factor", r.partial));
  DS_ASSIGN_OR_RETURN(r.partial, Num(c, d, dict, "partial_rotary_factor", top_partial));
  if (!(theta > 0)) return c.Bad("rope_theta", "must be > 0");
  if (!(r.partial > 0 && r.partial <= 1))
    return c.Bad("partial_rotary_factor", "must be in (0, 1]");
  s->rope_theta = static_cast<float>(theta);
  return ReadVariant(c, d, dict, s);
}

}  // namespace ds::hf::internal
