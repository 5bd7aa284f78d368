#include "kernels/registry.h"

#include "kernels/widen.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

namespace ds::kernels {
namespace {

struct Tables {
  std::mutex mu;
  std::map<std::string, OpDef> ops;
  std::map<std::tuple<std::string, Device, DType>, Kernel> kernels;
};

Tables& Get() {
  static Tables* t = new Tables();
  return *t;
}

}  // namespace

int64_t Attrs::Int(const std::string& k, int64_t dflt) const {
  auto it = ints_.find(k);
  return it == ints_.end() ? dflt : it->second;
}

double Attrs::Float(const std::string& k, double dflt) const {
  auto it = floats_.find(k);
  if (it != floats_.end()) return it->second;
  auto jt = ints_.find(k);
  return jt == ints_.end() ? dflt : static_cast<double>(jt->second);
}

std::string Attrs::String(const std::string& k, const std::string& dflt) const {
  auto it = strings_.find(k);
  return it == strings_.end() ? dflt : it->second;
}

std::vector<std::string> Attrs::Names() const {
  std::vector<std::string> names;
  for (auto& [k, v] : ints_) names.push_back(k);
  for (auto& [k, v] : floats_) names.push_back(k);
  for (auto& [k, v] : strings_) names.push_back(k);
  return names;
}

void SetPerElementFlops(OpDef* def, double forward, double backward) {
  def->forward_flops = [forward](const Attrs&, const std::vector<TensorSpec>& in) {
    return forward * in[0].numel();
  };
  def->backward_flops = [backward](const Attrs&, const std::vector<TensorSpec>& in) {
    return backward * in[0].numel();
  };
}

int64_t SavedActivationBytes(const OpDef& def, const Attrs& attrs,
                             const std::vector<TensorSpec>& in,
                             const std::vector<TensorSpec>& out) {
  int64_t bytes = 0;
  for (size_t i = 0; i < in.size(); ++i)
    if (def.backward_reads_inputs & (1u << i)) bytes += in[i].nbytes();
  for (size_t i = 0; i < out.size(); ++i)
    if (def.backward_reads_outputs & (1u << i)) bytes += out[i].nbytes();
  if (def.saved)
    for (const TensorSpec& s : def.saved(attrs, in)) bytes += s.nbytes();
  return bytes;
}

bool RegisterOp(OpDef def) {
  Tables& t = Get();
  std::lock_guard<std::mutex> lock(t.mu);
  if (t.ops.count(def.name)) {
    std::fprintf(stderr, "kernels: op %s registered twice\n", def.name.c_str());
    std::abort();
  }
  std::string name = def.name;
  t.ops.emplace(name, std::move(def));
  return true;
}

bool RegisterKernel(const std::string& op, Device device, DType dtype, Kernel kernel) {
  Tables& t = Get();
  std::lock_guard<std::mutex> lock(t.mu);
  auto key = std::make_tuple(op, device, dtype);
  if (t.kernels.count(key)) {
    std::fprintf(stderr, "kernels: kernel %s/%s/%s registered twice\n", op.c_str(),
                 DeviceName(device), DTypeName(dtype));
    std::abort();
  }
  t.kernels.emplace(key, std::move(kernel));
  return true;
}

const OpDef* FindOp(const std::string& name) {
  Tables& t = Get();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ops.find(name);
  return it == t.ops.end() ? nullptr : &it->second;
}

const Kernel* FindKernel(const std::string& op, Device device, DType dtype) {
  Tables& t = Get();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.kernels.find(std::make_tuple(op, device, dtype));
  if (it != t.kernels.end()) return &it->second;
  // The CPU's 16-bit kernels: the fp32 one between conversions (widen.h), made once.
  if (device == Device::kCpu && (dtype == DType::kBF16 || dtype == DType::kF16)) {
    auto f32 = t.kernels.find(std::make_tuple(op, device, DType::kF32));
    if (f32 == t.kernels.end()) return nullptr;
    Kernel wide = WidenKernel(f32->second, dtype);
    return &t.kernels.emplace(std::make_tuple(op, device, dtype), std::move(wide)).first->second;
  }
  return nullptr;
}

std::vector<std::string> RegisteredOps() {
  Tables& t = Get();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<std::string> names;
  for (auto& [k, v] : t.ops) names.push_back(k);
  return names;
}

}  // namespace ds::kernels
