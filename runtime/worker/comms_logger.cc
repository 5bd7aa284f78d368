#include "runtime/worker/comms_logger.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/quantize.h"

namespace ds::worker {
namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// scipy's trim_mean(x, 0.1): drop round(0.1 n) values from each end of the sorted list.
double TrimMean(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t cut = static_cast<size_t>(std::lround(0.1 * x.size()));
  double sum = 0;
  size_t n = 0;
  for (size_t i = cut; i + cut < x.size(); ++i, ++n) sum += x[i];
  return n ? sum / n : 0;
}

std::string Col(const std::string& s) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%-20s", s.c_str());
  return buf;
}

}  // namespace

CommOp LoggedOp(const proto::Instruction& in, int n) {
  using Ins = proto::Instruction;
  CommOp op;
  if (!in.has_collective() || in.collective().placement() == proto::LOCAL) return op;
  switch (in.kind()) {
    case Ins::ALL_REDUCE:
    case Ins::ACT_ALL_REDUCE:
    case Ins::TP_GRAD_ALL_REDUCE:
    case Ins::TIED_GRAD_ALL_REDUCE:
    case Ins::GRAD_NORM_REDUCE:
    case Ins::OVERFLOW_REDUCE:
    case Ins::LOSS_REDUCE:
      op.name = "all_reduce";
      break;
    case Ins::REDUCE_SCATTER:
    case Ins::ACT_REDUCE_SCATTER:
      op.name = "reduce_scatter_tensor";
      break;
    case Ins::ACT_ALL_TO_ALL:
      op.name = "all_to_all_single";
      break;
    case Ins::ALL_GATHER:
    case Ins::GATHER_PARAMS:
    case Ins::GATHER_SECONDARY:
    case Ins::ACT_ALL_GATHER:
    case Ins::CHECKPOINT_RESTORE:
      op.name = "all_gather_into_tensor";
      break;
    default:
      return op;
  }
  const proto::DataType t = in.collective().dtype();
  const int64_t size = t == proto::DT_BF16 || t == proto::DT_F16 ? 2 : 4;
  op.bytes = in.collective().count() * size;
  if (op.name != "all_reduce" && op.name != "all_to_all_single")
    op.bytes /= std::max(1, n);  // each rank's part
  if (in.quantize().bits() > 0)  // ZeRO++: the part travels as its blocks
    op.bytes = QuantizedBytes(in.collective().count() / std::max(1, n),
                              QuantSpec{in.quantize().bits(), in.quantize().block()});
  return op;
}

std::string CommSize(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return Fmt("%.2f", bytes) + " " + units[u];
}

Bandwidth CommBandwidth(const std::string& op, double bytes, int n, double ms) {
  Bandwidth b;
  if (ms <= 0) return b;
  const double d = ms / 1000, nn = std::max(1, n);
  double size = bytes;
  if (op == "all_to_all_single") {
    b.algbw = size / d;
    b.busbw = b.algbw * (nn - 1) / nn;
  } else if (op.rfind("all_gather", 0) == 0 || op.rfind("reduce_scatter", 0) == 0) {
    size *= nn;
    b.algbw = size / d;
    b.busbw = b.algbw * (nn - 1) / nn;
  } else if (op.rfind("all_reduce", 0) == 0) {
    b.algbw = 2 * size / d;
    b.busbw = size / d * 2 * (nn - 1) / nn;
  } else {
    b.algbw = b.busbw = size / d;
  }
  b.algbw *= 8 / 1e9;  // bytes/s -> Gbps
  b.busbw *= 8 / 1e9;
  return b;
}

bool CommsLogger::Wants(const std::string& op) const {
  return opt_.prof_all || std::count(opt_.prof_ops.begin(), opt_.prof_ops.end(), op) > 0;
}

void CommsLogger::Record(const std::string& op, const std::string& kind, int64_t bytes, int n,
                         double ms, std::FILE* out) {
  if (!Wants(op)) return;
  ops_[op].ms[bytes].push_back(ms);
  ops_[op].group[bytes] = n;
  if (!opt_.verbose) return;
  const Bandwidth bw = CommBandwidth(op, static_cast<double>(bytes), n, ms);
  std::fprintf(out,
               "[Rank 0] comm op: %s | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f | "
               "busbw (Gbps): %.2f%s\n",
               op.c_str(), ms, CommSize(static_cast<double>(bytes)).c_str(), bw.algbw, bw.busbw,
               opt_.debug ? (" | [Caller Func: " + kind + "]").c_str() : "");
}

std::string CommsLogger::Summary() const {
  std::string s = Col("Comm. Op") + Col("Message Size") + Col("Count") + Col("Total Latency(ms)") +
                  Col("Avg Latency(ms)") + Col("tput_avg (Gbps)") + Col("busbw_avg (Gbps)") + "\n";
  for (const auto& [op, sizes] : ops_) {
    s += op + "\n";
    for (const auto& [bytes, ms] : sizes.ms) {
      double total = 0;
      std::vector<double> alg, bus;
      for (double t : ms) {
        total += t;
        const Bandwidth b = CommBandwidth(op, static_cast<double>(bytes), sizes.group.at(bytes), t);
        alg.push_back(b.algbw);
        bus.push_back(b.busbw);
      }
      s += Col("") + Col(CommSize(static_cast<double>(bytes))) + Col(std::to_string(ms.size())) +
           Col(Fmt("%.2f", total)) + Col(Fmt("%.2f", TrimMean(ms))) +
           Col(Fmt("%.2f", TrimMean(alg))) + Col(Fmt("%.2f", TrimMean(bus))) + "\n";
    }
  }
  return s;
}

}  // namespace ds::worker
