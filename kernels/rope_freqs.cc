#include "kernels/rope_freqs.h"

#include <algorithm>
#include <cmath>

#include "kernels/shape_check.h"

namespace ds::kernels {
namespace {

constexpr double kPi = 3.14159265358979323846;

Status Bad(const std::string& what) { return InvalidArgumentError("rope: " + what); }

// yarn's dimension at which a wavelength makes `rotations` turns over O positions.
double CorrectionDim(double rotations, double d, double theta, double original_max) {
  return d * std::log(original_max / (rotations * 2 * kPi)) / (2 * std::log(theta));
}

std::vector<double> BaseFreqs(double theta, int64_t d) {
  std::vector<double> f(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) f[i] = 1.0 / std::pow(theta, 2.0 * i / d);
  return f;
}

void Llama3(const RopeParams& p, std::vector<double>* f) {
  const double low_wavelen = p.original_max / p.low_freq_factor;
  const double high_wavelen = p.original_max / p.high_freq_factor;
  for (double& x : *f) {
    const double wavelen = 2 * kPi / x;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      x /= p.factor;
      continue;
    }
    const double s =
        (p.original_max / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
    x = (1 - s) * x / p.factor + s * x;
  }
}

void Yarn(const RopeParams& p, int64_t d, std::vector<double>* f) {
  double low = CorrectionDim(p.beta_fast, d, p.theta, p.original_max);
  double high = CorrectionDim(p.beta_slow, d, p.theta, p.original_max);
  if (p.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(d - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < f->size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    (*f)[i] = ramp * (*f)[i] / p.factor + (1 - ramp) * (*f)[i];
  }
}

}  // namespace

const std::vector<std::string>& RopeParamAttrNames() {
  static const std::vector<std::string> names = {
      "theta",         "rope_type",    "rotary_dim",       "factor",
      "max_positions", "original_max", "low_freq_factor",  "high_freq_factor",
      "beta_fast",     "beta_slow",    "attention_factor", "truncate"};
  return names;
}

Status ReadRopeParams(const Attrs& a, int64_t head_dim, RopeParams* p) {
  p->type = a.String("rope_type", "default");
  p->theta = a.Float("theta", 10000.0);
  p->rotary_dim = a.Int("rotary_dim", 0);
  if (p->rotary_dim == 0) p->rotary_dim = head_dim;
  p->factor = a.Float("factor", 1.0);
  p->max_positions = a.Int("max_positions", 0);
  p->original_max = a.Int("original_max", 0);
  p->low_freq_factor = a.Float("low_freq_factor", 1.0);
  p->high_freq_factor = a.Float("high_freq_factor", 4.0);
  p->beta_fast = a.Float("beta_fast", 32.0);
  p->beta_slow = a.Float("beta_slow", 1.0);
  p->attention_factor = a.Float("attention_factor", 1.0);
  p->truncate = a.Int("truncate", 1) != 0;
  if (!(p->theta > 0)) return Bad("theta must be > 0");
  if (p->rotary_dim < 2 || p->rotary_dim % 2 || p->rotary_dim > head_dim)
    return Bad(
        StrCat("rotary_dim ", p->rotary_dim, " must be even and within the head size ", head_dim));
  if (!(p->attention_factor > 0)) return Bad("attention_factor must be > 0");
  const std::string& t = p->type;
  if (t == "default") return OkStatus();
  if (t != "linear" && t != "dynamic" && t != "llama3" && t != "yarn")
    return Bad("rope_type \"" + t + "\" is not one of default, linear, dynamic, llama3, yarn");
  if (!(p->factor > 0)) return Bad(t + " needs factor > 0");
  if (t == "dynamic" && p->max_positions <= 0) return Bad("dynamic needs max_positions > 0");
  if (t == "dynamic" && p->rotary_dim <= 2) return Bad("dynamic needs rotary_dim > 2");
  if ((t == "llama3" || t == "yarn") && p->original_max <= 0)
    return Bad(t + " needs original_max > 0");
  if (t == "llama3" && !(p->high_freq_factor > p->low_freq_factor))
    return Bad("llama3 needs high_freq_factor > low_freq_factor");
  return OkStatus();
}

std::vector<float> RopeInvFreq(const RopeParams& p, int64_t length) {
  const int64_t d = p.rotary_dim;
  double theta = p.theta;
  if (p.type == "dynamic") {
    const double s = static_cast<double>(std::max(length, p.max_positions));
    theta *= std::pow(p.factor * s / p.max_positions - (p.factor - 1), d / (d - 2.0));
  }
  std::vector<double> f = BaseFreqs(theta, d);
  if (p.type == "linear")
    for (double& x : f) x /= p.factor;
  if (p.type == "llama3") Llama3(p, &f);
  if (p.type == "yarn") Yarn(p, d, &f);
  return std::vector<float>(f.begin(), f.end());
}

}  // namespace ds::kernels
