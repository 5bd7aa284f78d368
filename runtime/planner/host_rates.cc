#include "runtime/planner/host_rates.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "runtime/base/json.h"
#include "runtime/base/runtime_home.h"
#include "runtime/base/status_macros.h"

namespace ds::planner {
namespace {

double LogDistance(const GemmSample& s, int64_t m, int64_t n, int64_t k) {
  auto d = [](int64_t a, int64_t b) { return std::log2(double(std::max<int64_t>(a, 1)) / b); };
  const double dm = d(m, s.m), dn = d(n, s.n), dk = d(k, s.k);
  return std::sqrt(dm * dm + dn * dn + dk * dk);
}

Json Samples(const std::vector<GemmSample>& v) {
  Json a = Json::Array();
  for (const GemmSample& s : v) {
    Json row = Json::Array();
    for (int64_t x : {s.m, s.n, s.k}) row.Append(Json::Int(x));
    row.Append(Json::Double(s.gflops));
    a.Append(std::move(row));
  }
  return a;
}

Json Link(const LinkRate& l) {
  Json o = Json::Object();
  o.Set("latency_us", Json::Double(l.latency_us));
  o.Set("gbps", Json::Double(l.gbps));
  return o;
}

// Reads `key` of `j` as a positive number into `out`.
Status Positive(const Json& j, const std::string& key, const std::string& where, double* out) {
  const Json* v = j.Find(key);
  if (!v || !v->is_number() || !(v->as_double() > 0))
    return InvalidArgumentError(where + ": \"" + key + "\" must be a positive number");
  *out = v->as_double();
  return OkStatus();
}

StatusOr<std::vector<GemmSample>> ReadSamples(const Json& j, const std::string& key,
                                              const std::string& where) {
  const Json* v = j.Find(key);
  if (!v || !v->is_array() || v->items().empty())
    return InvalidArgumentError(where + ": \"" + key + "\" must be a non-empty array");
  std::vector<GemmSample> out;
  for (const Json& row : v->items()) {
    const bool ok = row.is_array() && row.items().size() == 4 &&
                    std::all_of(row.items().begin(), row.items().end(),
                                [](const Json& x) { return x.is_number() && x.as_double() > 0; });
    if (!ok)
      return InvalidArgumentError(where + ": \"" + key +
                                  "\" rows are [m, n, k, gflops] of positive numbers");
    out.push_back({row.items()[0].as_int(), row.items()[1].as_int(), row.items()[2].as_int(),
                   row.items()[3].as_double()});
  }
  return out;
}

StatusOr<LinkRate> ReadLink(const Json& j, const std::string& key, const std::string& where) {
  const Json* v = j.Find(key);
  if (!v || !v->is_object()) return InvalidArgumentError(where + ": \"" + key + "\" is missing");
  LinkRate l;
  DS_RETURN_IF_ERROR(Positive(*v, "latency_us", where + " " + key, &l.latency_us));
  DS_RETURN_IF_ERROR(Positive(*v, "gbps", where + " " + key, &l.gbps));
  return l;
}

}  // namespace

double HostRates::GemmGflops(DType dtype, int64_t m, int64_t n, int64_t k) const {
  const std::vector<GemmSample>& v = dtype == DType::kBF16 ? gemm_bf16 : gemm_f32;
  if (v.empty()) return 1;
  std::vector<std::pair<double, double>> near;  // (distance, gflops)
  for (const GemmSample& s : v) near.push_back({LogDistance(s, m, n, k), s.gflops});
  const size_t keep = std::min<size_t>(4, near.size());
  std::partial_sort(near.begin(), near.begin() + keep, near.end());
  if (near[0].first < 1e-9) return near[0].second;
  double w = 0, sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    const double wi = 1.0 / (near[i].first * near[i].first);
    w += wi;
    sum += wi * near[i].second;
  }
  return sum / w;
}

Json HostRatesToJson(const HostRates& r) {
  Json o = Json::Object();
  o.Set("host", Json::String(r.host));
  o.Set("cpu", Json::String(r.cpu));
  o.Set("threads", Json::Int(r.threads));
  o.Set("cores", Json::Int(r.cores));
  o.Set("stream_gbps", Json::Double(r.stream_gbps));
  o.Set("optimizer_gbps", Json::Double(r.optimizer_gbps));
  o.Set("quantize_gvps", Json::Double(r.quantize_gvps));
  o.Set("dequantize_gvps", Json::Double(r.dequantize_gvps));
  o.Set("intra", Link(r.intra));
  o.Set("inter", Link(r.inter));
  o.Set("gemm_f32", Samples(r.gemm_f32));
  o.Set("gemm_bf16", Samples(r.gemm_bf16));
  return o;
}

StatusOr<HostRates> HostRatesFromJson(const Json& j, const std::string& source) {
  if (!j.is_object()) return InvalidArgumentError(source + ": not a JSON object");
  HostRates r;
  if (const Json* v = j.Find("host")) r.host = v->as_string();
  if (const Json* v = j.Find("cpu")) r.cpu = v->as_string();
  double threads = 0, cores = 0;
  DS_RETURN_IF_ERROR(Positive(j, "threads", source, &threads));
  DS_RETURN_IF_ERROR(Positive(j, "cores", source, &cores));
  r.threads = static_cast<int>(threads);
  r.cores = static_cast<int>(cores);
  DS_RETURN_IF_ERROR(Positive(j, "stream_gbps", source, &r.stream_gbps));
  DS_RETURN_IF_ERROR(Positive(j, "optimizer_gbps", source, &r.optimizer_gbps));
  for (auto [key, at] : {std::pair{"quantize_gvps", &r.quantize_gvps},
                         std::pair{"dequantize_gvps", &r.dequantize_gvps}})
    if (j.Find(key)) DS_RETURN_IF_ERROR(Positive(j, key, source, at));  // older tables lack it
  DS_ASSIGN_OR_RETURN(r.intra, ReadLink(j, "intra", source));
  DS_ASSIGN_OR_RETURN(r.inter, ReadLink(j, "inter", source));
  DS_ASSIGN_OR_RETURN(r.gemm_f32, ReadSamples(j, "gemm_f32", source));
  DS_ASSIGN_OR_RETURN(r.gemm_bf16, ReadSamples(j, "gemm_bf16", source));
  return r;
}

StatusOr<HostRates> ReadHostRates(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  auto j = ParseJson(text.str());
  if (!j.ok()) return InvalidArgumentError(path + ": " + j.status().message());
  return HostRatesFromJson(*j, path);
}

std::string HostRatesPath(int threads) {
  return RuntimeHome() + "/host-rates-" + std::to_string(threads) + "t.json";
}

LinkRate Slower(const LinkRate& a, const LinkRate& b) {
  LinkRate r;
  r.latency_us = std::max(a.latency_us, b.latency_us);
  r.gbps = std::min(a.gbps, b.gbps);
  return r;
}

}  // namespace ds::planner
