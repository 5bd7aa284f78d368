#include "launcher/hostfile.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ds::launcher {
namespace {

// The error message of parsing `text` as hostfile "hf"; "" when it parses.
std::string ParseError(const std::string& text) {
  StatusOr<std::vector<HostSlots>> r = ParseHostfile(text, "hf");
  if (r.ok()) return "";
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST_CASE("Hostfile: hosts, slots and lines in file order", "[launcher][hostfile]") {
  const std::string text =
      "# cluster A\n"
      "\n"
      "worker-1 slots=8\n"
      "   worker-0\tslots=4   \n"
      "10.0.0.7 slots=2 # trailing comment\n"
      "gpu_node.ib slots=1#no space before the comment\n"
      "  # indented comment\n";
  StatusOr<std::vector<HostSlots>> r = ParseHostfile(text, "hf");
  REQUIRE(r.ok());
  REQUIRE(r->size() == 4);
  CHECK((*r)[0].host == "worker-1");  // file order, not sorted: it is node rank order
  CHECK((*r)[0].slots == 8);
  CHECK((*r)[0].line == 3);
  CHECK((*r)[1].host == "worker-0");
  CHECK((*r)[1].slots == 4);
  CHECK((*r)[1].line == 4);
  CHECK((*r)[2].host == "10.0.0.7");
  CHECK((*r)[2].slots == 2);
  CHECK((*r)[3].host == "gpu_node.ib");
  CHECK((*r)[3].line == 6);
}

TEST_CASE("Hostfile: CRLF line ends and no final newline", "[launcher][hostfile]") {
  StatusOr<std::vector<HostSlots>> r = ParseHostfile("a slots=1\r\nb slots=2", "hf");
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  CHECK((*r)[0].host == "a");
  CHECK((*r)[1].slots == 2);
  CHECK((*r)[1].line == 2);
}

TEST_CASE("Hostfile: errors carry source:line and say what is wrong", "[launcher][hostfile]") {
  SECTION("duplicate host names the first line") {
    CHECK(ParseError("a slots=1\n# x\nb slots=1\na slots=2\n") ==
          "hf:4: duplicate host 'a' (first listed on line 1)");
  }
  SECTION("missing slots") {
    CHECK(ParseError("a slots=1\nb\n") == "hf:2: missing 'slots=N' after host 'b'");
  }
  SECTION("missing host") {
    CHECK(ParseError("slots=4\n") == "hf:1: missing host name before 'slots=4'");
  }
  SECTION("malformed slots token") {
    CHECK(ParseError("a slot=4\n") == "hf:1: expected 'slots=N' after host 'a', got 'slot=4'");
    CHECK(ParseError("a slots = 4\n").rfind("hf:1: expected 'slots=N'", 0) == 0);
    CHECK(ParseError("a 4\n") == "hf:1: expected 'slots=N' after host 'a', got '4'");
  }
  SECTION("slots not an integer") {
    CHECK(ParseError("a slots=four\n") == "hf:1: slots must be an integer, got 'slots=four'");
    CHECK(ParseError("a slots=4.5\n") == "hf:1: slots must be an integer, got 'slots=4.5'");
    CHECK(ParseError("a slots=+4\n") == "hf:1: slots must be an integer, got 'slots=+4'");
    CHECK(ParseError("a slots=\n") == "hf:1: missing slot count after 'slots='");
  }
  SECTION("slots not positive or too large") {
    CHECK(ParseError("a slots=0\n") == "hf:1: slots must be positive, got slots=0");
    CHECK(ParseError("a slots=-2\n") == "hf:1: slots must be positive, got slots=-2");
    CHECK(ParseError("a slots=65537\n") == "hf:1: slots=65537 exceeds the limit of 65536");
    CHECK(ParseError("a slots=99999999999999\n") ==
          "hf:1: slots=99999999999999 exceeds the limit of 65536");
    CHECK(ParseError("a slots=65536\n").empty());
  }
  SECTION("extra tokens") {
    CHECK(ParseError("a slots=2 b slots=3\n") ==
          "hf:1: unexpected text 'b' after 'slots=2' (one 'host slots=N' per line)");
    CHECK(ParseError("a slots=2 slots=3\n").rfind("hf:1: unexpected text 'slots=3'", 0) == 0);
  }
  SECTION("host names that clash with --include or ssh") {
    CHECK(ParseError("root@a slots=1\n").rfind("hf:1: host name 'root@a' contains '@'", 0) == 0);
    CHECK(ParseError("a:22 slots=1\n").rfind("hf:1: host name 'a:22' contains ':'", 0) == 0);
    CHECK(ParseError("a,b slots=1\n").rfind("hf:1: host name 'a,b' contains ','", 0) == 0);
    CHECK(ParseError("n[1-2] slots=1\n").rfind("hf:1: host name 'n[1-2]' contains '['", 0) == 0);
    CHECK(ParseError("-oProxyCommand=x slots=1\n") ==
          "hf:1: host name '-oProxyCommand=x' may not start with '-'");
    CHECK(ParseError("a\x01 slots=1\n").find("contains '\\x01'") != std::string::npos);
  }
  SECTION("empty file") {
    const std::string want =
        "hf: no hosts (the hostfile is empty or only has comments); "
        "expected lines like 'worker-0 slots=8'";
    CHECK(ParseError("") == want);
    CHECK(ParseError("\n  \n# only a comment\n") == want);
  }
}

TEST_CASE("Hostfile: LoadHostfile reads a file and names it", "[launcher][hostfile]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = tmp != nullptr ? tmp : "/tmp";
  std::string path = dir + "/hostfile_test_" + std::to_string(::getpid());

  SECTION("good file") {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("h1 slots=2\nh2 slots=3\n", f);
    std::fclose(f);
    StatusOr<std::vector<HostSlots>> r = LoadHostfile(path);
    REQUIRE(r.ok());
    REQUIRE(r->size() == 2);
    CHECK((*r)[1].host == "h2");
    std::remove(path.c_str());
  }
  SECTION("bad file: errors use the path as source") {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("h1 slots=x\n", f);
    std::fclose(f);
    StatusOr<std::vector<HostSlots>> r = LoadHostfile(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == path + ":1: slots must be an integer, got 'slots=x'");
    std::remove(path.c_str());
  }
  SECTION("missing file is NotFound") {
    StatusOr<std::vector<HostSlots>> r = LoadHostfile(dir + "/no/such/hostfile");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kNotFound);
    CHECK(r.status().message().find(dir + "/no/such/hostfile") != std::string::npos);
  }
  SECTION("a directory is an I/O error, not an empty pool") {
    StatusOr<std::vector<HostSlots>> r = LoadHostfile(dir);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("read hostfile " + dir) == 0);
  }
}

TEST_CASE("Hostfile: DefaultLocalHosts is localhost with the given slots", "[launcher][hostfile]") {
  StatusOr<std::vector<HostSlots>> r = DefaultLocalHosts(4);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 1);
  CHECK((*r)[0].host == "localhost");
  CHECK((*r)[0].slots == 4);
  CHECK((*r)[0].line == 0);
  CHECK(DefaultLocalHosts(0).status().code() == StatusCode::kInvalidArgument);
  CHECK(DefaultLocalHosts(-1).status().code() == StatusCode::kInvalidArgument);
  CHECK_FALSE(DefaultLocalHosts(kMaxSlotsPerHost + 1).ok());
}

}  // namespace
}  // namespace ds::launcher
