#include "launcher/state_store/link_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint8_t kDone = 0;
constexpr uint8_t kPing = 1;
constexpr uint8_t kSink = 2;
constexpr size_t kCommandBytes = 9;

void PutU64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i) & 0xff);
}

uint64_t GetU64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return v;
}

Status SendCommand(copy_wire::Conn& io, uint8_t command, uint64_t count) {
  char c[kCommandBytes];
  c[0] = static_cast<char>(command);
  PutU64(count, c + 1);
  return io.Send(c, sizeof(c));
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One sink of n bytes from a zero buffer; the seconds until the server's answer.
StatusOr<double> Sink(copy_wire::Conn& io, int64_t n) {
  static const std::vector<char> zeros(copy_wire::kIoBufferBytes, '\0');
  const auto t0 = Clock::now();
  DS_RETURN_IF_ERROR(SendCommand(io, kSink, static_cast<uint64_t>(n)));
  for (int64_t sent = 0; sent < n;) {
    const size_t chunk = static_cast<size_t>(std::min<int64_t>(zeros.size(), n - sent));
    DS_RETURN_IF_ERROR(io.Send(zeros.data(), chunk));
    sent += static_cast<int64_t>(chunk);
  }
  char answer[8];
  DS_RETURN_IF_ERROR(io.Recv(answer, sizeof(answer)));
  if (GetU64(answer) != static_cast<uint64_t>(n))
    return InternalError(fmt::format("the server read {} of {} bytes", GetU64(answer), n));
  return Seconds(t0, Clock::now());
}

// Half the median round trip of `pings` pings, in microseconds.
StatusOr<double> PingLatency(copy_wire::Conn& io, int pings) {
  std::vector<double> trips;
  for (int i = 0; i < std::max(1, pings); ++i) {
    const auto t0 = Clock::now();
    DS_RETURN_IF_ERROR(SendCommand(io, kPing, 0));
    char pong;
    DS_RETURN_IF_ERROR(io.Recv(&pong, 1));
    trips.push_back(Seconds(t0, Clock::now()));
  }
  std::nth_element(trips.begin(), trips.begin() + trips.size() / 2, trips.end());
  return trips[trips.size() / 2] / 2 * 1e6;
}

}  // namespace

std::string DescribeLinkSample(const LinkSample& s) {
  return fmt::format("{:.1f} us, {:.3f} GB/s ({:.2f} Gbit/s)", s.latency_us, s.gbps, s.gbps * 8);
}

namespace link_keys {
std::string At(const std::string& node) { return "links/at/" + node; }
std::string Intra(const std::string& node) { return "links/intra/" + node; }
std::string Pinged(const std::string& node) { return "links/pinged/" + node; }
std::string Inter(const std::string& node) { return "links/inter/" + node; }
}  // namespace link_keys

std::string EncodeLinkSample(const LinkSample& s) {
  return fmt::format("{} {} {} {}", s.latency_us, s.gbps, s.bytes, s.seconds);
}

std::string EncodeLinkError(const Status& why) { return "error: " + why.ToString(); }

StatusOr<std::string> DecodeLinkValue(const std::string& value) {
  if (value.rfind("error: ", 0) == 0) return UnavailableError(value.substr(7));
  return value;
}

StatusOr<LinkSample> DecodeLinkSample(const std::string& value) {
  DS_ASSIGN_OR_RETURN(const std::string text, DecodeLinkValue(value));
  LinkSample s;
  std::istringstream in(text);
  if (!(in >> s.latency_us >> s.gbps >> s.bytes >> s.seconds) || s.gbps <= 0 || s.latency_us < 0)
    return InvalidArgumentError("malformed link sample \"" + text + "\"");
  return s;
}

std::string EncodeRing(const std::vector<std::pair<std::string, std::string>>& nodes) {
  std::string out;
  for (const auto& [name, address] : nodes) out += name + " " + address + "\n";
  return out;
}

StatusOr<std::vector<std::pair<std::string, std::string>>> DecodeRing(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> nodes;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 >= line.size())
      return InvalidArgumentError("malformed probe ring line \"" + line + "\"");
    nodes.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  if (nodes.empty()) return InvalidArgumentError("an empty probe ring");
  return nodes;
}

namespace copy_wire {

Status ServeProbe(Conn& io) {
  std::vector<char> buf(kIoBufferBytes);
  for (;;) {
    char c[kCommandBytes];
    DS_RETURN_IF_ERROR(io.Recv(c, sizeof(c)));
    const uint64_t count = GetU64(c + 1);
    if (c[0] == kDone) return OkStatus();
    if (c[0] == kPing) {
      DS_RETURN_IF_ERROR(io.Send(c, 1));
    } else if (c[0] == kSink && count <= static_cast<uint64_t>(kMaxSinkBytes)) {
      for (uint64_t got = 0; got < count;) {
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(buf.size(), count - got));
        DS_RETURN_IF_ERROR(io.Recv(buf.data(), chunk));
        got += chunk;
      }
      char answer[8];
      PutU64(count, answer);
      DS_RETURN_IF_ERROR(io.Send(answer, sizeof(answer)));
    } else {
      return InvalidArgumentError(
          fmt::format("probe: command {} with count {}", static_cast<int>(c[0]), count));
    }
  }
}

StatusOr<LinkSample> RunProbe(Conn& io, const ProbeBudget& budget) {
  LinkSample s;
  if (budget.latency) {
    DS_ASSIGN_OR_RETURN(s.latency_us, PingLatency(io, budget.pings));
  }
  if (!budget.bandwidth) {
    DS_RETURN_IF_ERROR(SendCommand(io, kDone, 0));
    return s;
  }
  const int64_t warm = int64_t{1} << 20;  // also opens TCP's window before the timed sink
  DS_ASSIGN_OR_RETURN(const double warm_s, Sink(io, warm));
  const double aim = std::chrono::duration<double>(budget.bulk_time).count();
  s.bytes = std::clamp<int64_t>(static_cast<int64_t>(warm / std::max(warm_s, 1e-6) * aim), warm,
                                std::min(budget.max_bytes, kMaxSinkBytes));
  DS_ASSIGN_OR_RETURN(s.seconds, Sink(io, s.bytes));
  s.gbps = static_cast<double>(s.bytes) / std::max(s.seconds, 1e-9) / 1e9;
  DS_RETURN_IF_ERROR(SendCommand(io, kDone, 0));
  return s;
}

}  // namespace copy_wire
}  // namespace ds::launcher
