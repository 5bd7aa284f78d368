#include "launcher/hostfile.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string_view>
#include <unordered_map>

namespace ds::launcher {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// Splits on runs of blanks; the text is one line with its comment already removed.
std::vector<std::string_view> Tokens(std::string_view line) {
  std::vector<std::string_view> tokens;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && IsSpace(line[i])) ++i;
    size_t start = i;
    while (i < line.size() && !IsSpace(line[i])) ++i;
    if (i > start) tokens.push_back(line.substr(start, i - start));
  }
  return tokens;
}

bool IsHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

// Returns "" when `host` is acceptable, else why not.
std::string CheckHostName(std::string_view host) {
  if (host[0] == '-' || host[0] == '.') {  // '-': ssh would read the host as an option
    return "host name '" + std::string(host) + "' may not start with '" + host[0] + "'";
  }
  for (char c : host) {
    if (!IsHostChar(c)) {
      std::string shown(1, c);
      if (c < 0x20 || c >= 0x7f) {  // control or non-ASCII byte: show it as \xNN
        const char* hex = "0123456789abcdef";
        unsigned char u = static_cast<unsigned char>(c);
        shown = std::string("\\x") + hex[u >> 4] + hex[u & 15];
      }
      return "host name '" + std::string(host) + "' contains '" + shown +
             "'; host names may only contain letters, digits, '.', '-' and '_' "
             "(put users and ports in the ssh config)";
    }
  }
  return "";
}

// Parses a positive slot count; returns "" or the reason it is invalid.
std::string ParseSlots(std::string_view value, int* slots) {
  if (value.empty()) return "missing slot count after 'slots='";
  int n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec == std::errc::result_out_of_range) {
    return "slots=" + std::string(value) + " exceeds the limit of " +
           std::to_string(kMaxSlotsPerHost);
  }
  if (ec != std::errc() || end != value.data() + value.size()) {
    return "slots must be an integer, got 'slots=" + std::string(value) + "'";
  }
  if (n <= 0) return "slots must be positive, got slots=" + std::string(value);
  if (n > kMaxSlotsPerHost) {
    return "slots=" + std::string(value) + " exceeds the limit of " +
           std::to_string(kMaxSlotsPerHost);
  }
  *slots = n;
  return "";
}

// Parses one non-empty line (comment stripped) into `out`; returns "" or the error.
std::string ParseLine(const std::vector<std::string_view>& tokens, HostSlots* out) {
  constexpr std::string_view kSlots = "slots=";
  std::string_view host = tokens[0];
  if (host.substr(0, kSlots.size()) == kSlots) {
    return "missing host name before '" + std::string(host) + "'";
  }
  if (tokens.size() == 1) {
    return "missing 'slots=N' after host '" + std::string(host) + "'";
  }
  std::string_view slots = tokens[1];
  if (slots.substr(0, kSlots.size()) != kSlots) {
    return "expected 'slots=N' after host '" + std::string(host) + "', got '" + std::string(slots) +
           "'";
  }
  if (tokens.size() > 2) {
    return "unexpected text '" + std::string(tokens[2]) + "' after '" + std::string(slots) +
           "' (one 'host slots=N' per line)";
  }
  if (std::string why = CheckHostName(host); !why.empty()) return why;
  out->host = std::string(host);
  return ParseSlots(slots.substr(kSlots.size()), &out->slots);
}

}  // namespace

StatusOr<std::vector<HostSlots>> ParseHostfile(const std::string& text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::unordered_map<std::string, int> first_line;  // host -> line of its entry
  std::string_view rest = text;
  int line_no = 0;
  while (!rest.empty()) {
    ++line_no;
    size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> tokens = Tokens(line);
    if (tokens.empty()) continue;

    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    HostSlots entry;
    entry.line = line_no;
    if (std::string why = ParseLine(tokens, &entry); !why.empty()) {
      return InvalidArgumentError(where + why);
    }
    auto [it, inserted] = first_line.emplace(entry.host, line_no);
    if (!inserted) {
      return InvalidArgumentError(where + "duplicate host '" + entry.host +
                                  "' (first listed on line " + std::to_string(it->second) + ")");
    }
    hosts.push_back(std::move(entry));
  }
  if (hosts.empty()) {
    return InvalidArgumentError(source +
                                ": no hosts (the hostfile is empty or only has comments); "
                                "expected lines like 'worker-0 slots=8'");
  }
  return hosts;
}

StatusOr<std::vector<HostSlots>> LoadHostfile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open hostfile " + path);
  std::string text;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoToStatus(err, "read hostfile " + path);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return ParseHostfile(text, path);
}

StatusOr<std::vector<HostSlots>> DefaultLocalHosts(int slots) {
  if (slots <= 0) {
    return InvalidArgumentError("no hostfile and no local slots (got " + std::to_string(slots) +
                                "): the local host needs at least one slot");
  }
  if (slots > kMaxSlotsPerHost) {
    return InvalidArgumentError("local slots " + std::to_string(slots) + " exceed the limit of " +
                                std::to_string(kMaxSlotsPerHost));
  }
  return std::vector<HostSlots>{HostSlots{"localhost", slots, 0}};
}

}  // namespace ds::launcher
