#include "launcher/process/line_reader.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace ds::launcher {
namespace {

struct Collector {
  std::vector<std::string> lines;
  LineReader::LineFn fn() {
    return [this](std::string_view line) { lines.emplace_back(line); };
  }
};

TEST_CASE("LineReader: splits on newlines, keeps empty lines", "[launcher][process]") {
  LineReader reader;
  Collector c;
  reader.Feed("a\nbb\n\nccc\n", c.fn());
  CHECK(c.lines == std::vector<std::string>{"a", "bb", "", "ccc"});
  CHECK(reader.buffered_bytes() == 0);
  reader.Finish(c.fn());
  CHECK(c.lines.size() == 4);  // nothing buffered: Finish adds no empty line
}

TEST_CASE("LineReader: partial lines across feeds", "[launcher][process]") {
  LineReader reader;
  Collector c;
  reader.Feed("hel", c.fn());
  CHECK(c.lines.empty());
  reader.Feed("lo wo", c.fn());
  reader.Feed("rld\nnext", c.fn());
  CHECK(c.lines == std::vector<std::string>{"hello world"});
  CHECK(reader.buffered_bytes() == 4);
  reader.Feed("\n", c.fn());
  CHECK(c.lines == std::vector<std::string>{"hello world", "next"});
}

TEST_CASE("LineReader: final unterminated line at Finish", "[launcher][process]") {
  LineReader reader;
  Collector c;
  reader.Feed("one\ntwo", c.fn());
  reader.Finish(c.fn());
  CHECK(c.lines == std::vector<std::string>{"one", "two"});
  reader.Finish(c.fn());
  CHECK(c.lines.size() == 2);
}

TEST_CASE("LineReader: long lines are flushed at the limit", "[launcher][process]") {
  SECTION("default limit is 64 KiB, one feed") {
    LineReader reader;
    Collector c;
    const std::string big(LineReader::kMaxLineBytes * 2 + 100, 'x');
    reader.Feed(big + "\nafter\n", c.fn());
    REQUIRE(c.lines.size() == 4);
    CHECK(c.lines[0].size() == 65536);
    CHECK(c.lines[1].size() == 65536);
    CHECK(c.lines[2].size() == 100);
    CHECK(c.lines[3] == "after");
  }
  SECTION("byte by byte") {
    LineReader reader(4);
    Collector c;
    for (char ch : std::string("abcdefghij\nk")) reader.Feed(std::string_view(&ch, 1), c.fn());
    reader.Finish(c.fn());
    CHECK(c.lines == std::vector<std::string>{"abcd", "efgh", "ij", "k"});
  }
  SECTION("a line of exactly the limit stays one line") {
    LineReader reader(4);
    Collector c;
    reader.Feed("abcd\nef", c.fn());
    reader.Feed("gh", c.fn());
    CHECK(c.lines == std::vector<std::string>{"abcd"});
    reader.Feed("\nxyz", c.fn());
    CHECK(c.lines == std::vector<std::string>{"abcd", "efgh"});
    reader.Feed("zy", c.fn());  // 5 bytes without newline: flush 4
    CHECK(c.lines == std::vector<std::string>{"abcd", "efgh", "xyzz"});
    CHECK(reader.buffered_bytes() == 1);
  }
  SECTION("never buffers more than the limit") {
    LineReader reader(8);
    Collector c;
    for (int i = 0; i < 100; ++i) {
      reader.Feed("abc", c.fn());
      CHECK(reader.buffered_bytes() <= 8);
    }
    reader.Finish(c.fn());
    size_t total = 0;
    for (const auto& line : c.lines) {
      CHECK(line.size() <= 8);
      total += line.size();
    }
    CHECK(total == 300);
  }
}

}  // namespace
}  // namespace ds::launcher
