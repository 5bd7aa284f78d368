#include "launcher/resource_filter.h"

#include <catch2/catch.hpp>
#include <string>

namespace ds::launcher {
namespace {

// h2: 4 slots (line 1), h1: 2 (line 2), h3: 8 (line 4); deliberately not sorted by name.
std::vector<HostSlots> Pool() { return {{"h2", 4, 1}, {"h1", 2, 2}, {"h3", 8, 4}}; }

// "host:ids" per selected host, joined by spaces, e.g. "h2:0,1 h3:0".
std::string Show(const std::vector<HostSelection>& sel) {
  std::string out;
  for (const HostSelection& h : sel) {
    if (!out.empty()) out += ' ';
    out += h.host + ":";
    for (size_t i = 0; i < h.slot_ids.size(); ++i) {
      out += (i ? "," : "") + std::to_string(h.slot_ids[i]);
    }
  }
  return out;
}

std::string Select(const std::string& include, const std::string& exclude) {
  StatusOr<std::vector<HostSelection>> r = ApplyIncludeExclude(Pool(), include, exclude, "hf");
  if (!r.ok()) {
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    return "error: " + r.status().message();
  }
  return Show(*r);
}

TEST_CASE("ResourceFilter: no filter keeps everything in hostfile order", "[launcher]") {
  CHECK(Select("", "") == "h2:0,1,2,3 h1:0,1 h3:0,1,2,3,4,5,6,7");
  StatusOr<std::vector<HostSelection>> r = ApplyIncludeExclude(Pool(), "", "");
  REQUIRE(r.ok());
  CHECK((*r)[2].line == 4);
}

TEST_CASE("ResourceFilter: --include", "[launcher]") {
  SECTION("DeepSpeed's example: slots of one host and all of another") {
    CHECK(Select("h2:0,2@h1", "") == "h2:0,2 h1:0,1");
  }
  SECTION("result keeps hostfile order, not flag order; slots sorted and deduplicated") {
    CHECK(Select("h3:5,1,5@h2:3", "") == "h2:3 h3:1,5");
  }
  SECTION("a host named twice merges its slots") {
    CHECK(Select("h3:1@h3:0", "") == "h3:0,1");
    CHECK(Select("h1:1@h1", "") == "h1:0,1");
  }
}

TEST_CASE("ResourceFilter: --exclude", "[launcher]") {
  CHECK(Select("", "h3") == "h2:0,1,2,3 h1:0,1");
  CHECK(Select("", "h2:0,3@h3:7") == "h2:1,2 h1:0,1 h3:0,1,2,3,4,5,6");
  SECTION("a host left with no slots is dropped") {
    CHECK(Select("", "h1:0,1") == "h2:0,1,2,3 h3:0,1,2,3,4,5,6,7");
  }
  SECTION("excluding everything is an error") {
    CHECK(Select("", "h1@h2@h3") == "error: --exclude 'h1@h2@h3' leaves no slots to run on");
  }
}

TEST_CASE("ResourceFilter: errors", "[launcher]") {
  SECTION("include and exclude together") {
    CHECK(Select("h1", "h2") ==
          "error: --include and --exclude are mutually exclusive "
          "(got --include 'h1' and --exclude 'h2')");
  }
  SECTION("unknown host names it and the hostfile") {
    CHECK(Select("h9", "") ==
          "error: --include: host 'h9' is not in hostfile hf (hosts: h2, h1, h3)");
    CHECK(Select("", "h1@h9:0") ==
          "error: --exclude: host 'h9' is not in hostfile hf (hosts: h2, h1, h3)");
    StatusOr<std::vector<HostSelection>> r = ApplyIncludeExclude(Pool(), "x", "");
    CHECK(r.status().message() == "--include: host 'x' is not in the hostfile (hosts: h2, h1, h3)");
  }
  SECTION("slot out of range names the host, its slots and the hostfile line") {
    CHECK(Select("h1:2", "") ==
          "error: --include: host 'h1' has no slot 2 (it has slots 0-1, hostfile hf:2)");
    CHECK(Select("", "h3:8").rfind("error: --exclude: host 'h3' has no slot 8", 0) == 0);
  }
  SECTION("malformed specs") {
    const std::string empty = "empty host spec (check for '@@' or a leading or trailing '@')";
    CHECK(Select("h1@@h2", "") == "error: --include 'h1@@h2': " + empty);
    CHECK(Select("@h1", "") == "error: --include '@h1': " + empty);
    CHECK(Select("", "h1@") == "error: --exclude 'h1@': " + empty);
    CHECK(Select(":0", "") == "error: --include ':0': host spec ':0' has no host name");
    CHECK(Select("h1:", "") == "error: --include 'h1:': host spec 'h1:' has an empty slot list");
    CHECK(Select("h1:0,,1", "") ==
          "error: --include 'h1:0,,1': slot '' of host 'h1' is not a non-negative integer");
    CHECK(Select("h1:x", "").find("slot 'x' of host 'h1' is not a non-negative integer") !=
          std::string::npos);
    CHECK(Select("h1:-1", "").find("slot '-1'") != std::string::npos);
    CHECK(Select("h1:0:1", "").find("slot '0:1'") != std::string::npos);
  }
  SECTION("empty pool") {
    CHECK(ApplyIncludeExclude({}, "", "").status().message() == "no hosts to select from");
  }
}

TEST_CASE("ResourceFilter: ApplyLimits takes the first nodes, then the first slots", "[launcher]") {
  StatusOr<std::vector<HostSelection>> base = ApplyIncludeExclude(Pool(), "", "h2:0");
  REQUIRE(base.ok());  // h2:1,2,3 h1:0,1 h3:0..7

  auto limits = [&](int nodes, int slots) {
    StatusOr<std::vector<HostSelection>> r = ApplyLimits(*base, nodes, slots);
    return r.ok() ? Show(*r) : "error: " + r.status().message();
  };
  CHECK(limits(-1, -1) == Show(*base));
  CHECK(limits(2, -1) == "h2:1,2,3 h1:0,1");
  CHECK(limits(-1, 2) == "h2:1,2 h1:0,1 h3:0,1");
  CHECK(limits(1, 1) == "h2:1");
  CHECK(limits(4, -1) == "error: num_nodes=4 but only 3 host(s) are selected (h2, h1, h3)");
  CHECK(limits(-1, 3) == "error: num_slots=3 but host 'h1' has only 2 slot(s) selected");
  CHECK(limits(1, 3) == "h2:1,2,3");  // h1 is cut by num_nodes first, so 3 slots is fine
  CHECK(limits(0, -1) == "error: num_nodes must be positive or -1 (all), got 0");
  CHECK(limits(-2, -1) == "error: num_nodes must be positive or -1 (all), got -2");
  CHECK(limits(-1, 0) == "error: num_slots must be positive or -1 (all), got 0");
  StatusOr<std::vector<HostSelection>> r = ApplyLimits(*base, 1, -1);
  REQUIRE(r.ok());
  CHECK((*r)[0].line == 1);
}

}  // namespace
}  // namespace ds::launcher
