#include "launcher/resource_filter.h"

#include <charconv>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

// One `host` or `host:i,j` item of an --include/--exclude value.
struct HostSpec {
  std::string host;
  std::optional<std::vector<int>> slots;  // nullopt: the whole host
};

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    size_t pos = text.find(sep);
    parts.push_back(text.substr(0, pos));
    if (pos == std::string_view::npos) return parts;
    text = text.substr(pos + 1);
  }
}

StatusOr<std::vector<HostSpec>> ParseSpecs(const std::string& flag, const std::string& value) {
  const std::string where = flag + " '" + value + "': ";
  std::vector<HostSpec> specs;
  for (std::string_view item : Split(value, '@')) {
    if (item.empty()) {
      return InvalidArgumentError(where +
                                  "empty host spec (check for '@@' or a leading or trailing '@')");
    }
    HostSpec spec;
    size_t colon = item.find(':');
    spec.host = std::string(item.substr(0, colon));
    if (spec.host.empty()) {
      return InvalidArgumentError(where + "host spec '" + std::string(item) + "' has no host name");
    }
    if (colon != std::string_view::npos) {
      std::string_view list = item.substr(colon + 1);
      if (list.empty()) {
        return InvalidArgumentError(where + "host spec '" + std::string(item) +
                                    "' has an empty slot list");
      }
      spec.slots.emplace();
      for (std::string_view slot : Split(list, ',')) {
        int id = -1;
        auto [end, ec] = std::from_chars(slot.data(), slot.data() + slot.size(), id);
        if (slot.empty() || ec != std::errc() || end != slot.data() + slot.size() || id < 0) {
          return InvalidArgumentError(where + "slot '" + std::string(slot) + "' of host '" +
                                      spec.host + "' is not a non-negative integer");
        }
        spec.slots->push_back(id);
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string HostList(const std::vector<HostSlots>& hosts) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < hosts.size() && i < kShown; ++i) {
    out += (i ? ", " : "") + hosts[i].host;
  }
  if (hosts.size() > kShown) out += ", ... (" + std::to_string(hosts.size()) + " hosts)";
  return out;
}

// "hostfile /job/hostfile" or "the hostfile", optionally with ":line".
std::string HostfileRef(const std::string& source, int line) {
  if (source.empty()) {
    return line > 0 ? "the hostfile, line " + std::to_string(line) : "the hostfile";
  }
  return "hostfile " + source + (line > 0 ? ":" + std::to_string(line) : "");
}

}  // namespace

StatusOr<std::vector<HostSelection>> ApplyIncludeExclude(const std::vector<HostSlots>& hosts,
                                                         const std::string& include,
                                                         const std::string& exclude,
                                                         const std::string& source) {
  if (!include.empty() && !exclude.empty()) {
    return InvalidArgumentError("--include and --exclude are mutually exclusive (got --include '" +
                                include + "' and --exclude '" + exclude + "')");
  }
  if (hosts.empty()) return InvalidArgumentError("no hosts to select from");
  const bool is_include = !include.empty();
  const std::string flag = is_include ? "--include" : "--exclude";
  const std::string& value = is_include ? include : exclude;

  // kept[i]: slots of hosts[i] selected so far. Without a filter, everything.
  std::vector<std::set<int>> kept(hosts.size());
  if (!is_include) {
    for (size_t i = 0; i < hosts.size(); ++i) {
      for (int s = 0; s < hosts[i].slots; ++s) kept[i].insert(kept[i].end(), s);
    }
  }
  if (!value.empty()) {
    std::unordered_map<std::string, size_t> index;
    for (size_t i = 0; i < hosts.size(); ++i) index.emplace(hosts[i].host, i);
    DS_ASSIGN_OR_RETURN(std::vector<HostSpec> specs, ParseSpecs(flag, value));
    for (const HostSpec& spec : specs) {
      auto it = index.find(spec.host);
      if (it == index.end()) {
        return InvalidArgumentError(flag + ": host '" + spec.host + "' is not in " +
                                    HostfileRef(source, 0) + " (hosts: " + HostList(hosts) + ")");
      }
      const HostSlots& host = hosts[it->second];
      std::set<int>& slots = kept[it->second];
      auto apply = [&](int s) { is_include ? (void)slots.insert(s) : (void)slots.erase(s); };
      if (!spec.slots) {  // the whole host
        for (int s = 0; s < host.slots; ++s) apply(s);
        continue;
      }
      for (int s : *spec.slots) {
        if (s >= host.slots) {
          return InvalidArgumentError(flag + ": host '" + host.host + "' has no slot " +
                                      std::to_string(s) + " (it has slots 0-" +
                                      std::to_string(host.slots - 1) + ", " +
                                      HostfileRef(source, host.line) + ")");
        }
        apply(s);
      }
    }
  }

  std::vector<HostSelection> selection;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (kept[i].empty()) continue;
    selection.push_back(
        HostSelection{hosts[i].host, {kept[i].begin(), kept[i].end()}, hosts[i].line});
  }
  if (selection.empty()) {
    return InvalidArgumentError(flag + " '" + value + "' leaves no slots to run on");
  }
  return selection;
}

StatusOr<std::vector<HostSelection>> ApplyLimits(const std::vector<HostSelection>& selection,
                                                 int num_nodes, int num_slots) {
  if (num_nodes == 0 || num_nodes < -1) {
    return InvalidArgumentError("num_nodes must be positive or -1 (all), got " +
                                std::to_string(num_nodes));
  }
  if (num_slots == 0 || num_slots < -1) {
    return InvalidArgumentError("num_slots must be positive or -1 (all), got " +
                                std::to_string(num_slots));
  }
  if (num_nodes > static_cast<int>(selection.size())) {
    std::string names;
    for (const HostSelection& h : selection) names += (names.empty() ? "" : ", ") + h.host;
    return InvalidArgumentError("num_nodes=" + std::to_string(num_nodes) + " but only " +
                                std::to_string(selection.size()) + " host(s) are selected (" +
                                names + ")");
  }
  std::vector<HostSelection> out(selection.begin(),
                                 num_nodes == -1 ? selection.end() : selection.begin() + num_nodes);
  if (num_slots == -1) return out;
  for (HostSelection& h : out) {
    if (num_slots > static_cast<int>(h.slot_ids.size())) {
      return InvalidArgumentError("num_slots=" + std::to_string(num_slots) + " but host '" +
                                  h.host + "' has only " + std::to_string(h.slot_ids.size()) +
                                  " slot(s) selected");
    }
    h.slot_ids.resize(num_slots);
  }
  return out;
}

}  // namespace ds::launcher
