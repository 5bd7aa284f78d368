#include "runtime/base/crc32c.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

namespace ds {
namespace {

TEST_CASE("Crc32c: known vectors", "[ckpt]") {
  CHECK(Crc32c("", 0) == 0u);
  CHECK(Crc32c("123456789", 9) == 0xE3069283u);  // the standard check value
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  CHECK(Crc32c(zeros.data(), 32) == 0x8A9136AAu);  // RFC 3720 B.4
  CHECK(Crc32c(ones.data(), 32) == 0x62A8AB43u);
}

TEST_CASE("Crc32c: extend equals one pass; table path equals hardware path", "[ckpt]") {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>(i * 131 + 7));
  uint32_t whole = Crc32c(s.data(), s.size());
  for (size_t cut : {0u, 1u, 7u, 8u, 9u, 500u, 999u, 1000u}) {
    uint32_t c = Crc32cExtend(Crc32c(s.data(), cut), s.data() + cut, s.size() - cut);
    CHECK(c == whole);
    CHECK(Crc32cExtendTableForTesting(0, s.data(), cut) == Crc32c(s.data(), cut));
  }
}

TEST_CASE("Crc32c: hex round trip", "[ckpt]") {
  CHECK(Crc32cHex(0xE3069283u) == "e3069283");
  CHECK(Crc32cHex(0x1u) == "00000001");
  uint32_t v = 0;
  CHECK(ParseCrc32cHex("E3069283", &v));
  CHECK(v == 0xE3069283u);
  CHECK_FALSE(ParseCrc32cHex("e306928", &v));
  CHECK_FALSE(ParseCrc32cHex("e306928g", &v));
}

}  // namespace
}  // namespace ds
