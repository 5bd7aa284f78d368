#include "runtime/base/json.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>

namespace ds {
namespace {

TEST_CASE("Json: parses every value kind", "[ckpt][json]") {
  auto j = ParseJson(R"( {"a": [1, -2, 3.5, 1e3, true, false, null], "b": {"c": "x"}} )");
  REQUIRE(j.ok());
  const Json* a = j->Find("a");
  REQUIRE(a != nullptr);
  REQUIRE(a->items().size() == 7);
  CHECK(a->items()[0].is_int());
  CHECK(a->items()[1].as_int() == -2);
  CHECK(a->items()[2].as_double() == 3.5);
  CHECK(a->items()[3].type() == Json::Type::kDouble);
  CHECK(a->items()[3].as_double() == 1000.0);
  CHECK(a->items()[4].as_bool());
  CHECK(a->items()[6].is_null());
  CHECK(j->Find("b")->Find("c")->as_string() == "x");
  CHECK(j->Find("missing") == nullptr);
}

TEST_CASE("Json: int64 is exact at the limits", "[ckpt][json]") {
  auto j = ParseJson("[9223372036854775807, -9223372036854775808, 9007199254740993]");
  REQUIRE(j.ok());
  CHECK(j->items()[0].as_int() == std::numeric_limits<int64_t>::max());
  CHECK(j->items()[1].as_int() == std::numeric_limits<int64_t>::min());
  CHECK(j->items()[2].as_int() == 9007199254740993LL);  // not representable as a double
  CHECK(j->Dump() == "[9223372036854775807,-9223372036854775808,9007199254740993]");
  auto big = ParseJson("18446744073709551616");  // beyond int64: a double
  REQUIRE(big.ok());
  CHECK(big->type() == Json::Type::kDouble);
}

TEST_CASE("Json: string escapes round trip", "[ckpt][json]") {
  auto j = ParseJson(R"("q\" b\\ s\/ \b\f\n\r\t \u00e9 \ud83d\ude00 \u0001")");
  REQUIRE(j.ok());
  CHECK(j->as_string() == "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xf0\x9f\x98\x80 \x01");
  auto back = ParseJson(j->Dump());
  REQUIRE(back.ok());
  CHECK(*back == *j);
  CHECK(Json::String("\x01").Dump() == "\"\\u0001\"");
}

TEST_CASE("Json: doubles dump shortest and stay doubles", "[ckpt][json]") {
  CHECK(Json::Double(0.001).Dump() == "0.001");
  CHECK(Json::Double(2.0).Dump() == "2.0");
  auto j = ParseJson(Json::Double(0.1 + 0.2).Dump());
  REQUIRE(j.ok());
  CHECK(j->as_double() == 0.1 + 0.2);
  CHECK(j->type() == Json::Type::kDouble);
}

TEST_CASE("Json: pretty and compact dumps parse back equal", "[ckpt][json]") {
  Json o = Json::Object();
  o.Set("step", Json::Int(10));
  o.Set("list", Json::Array({Json::Int(1), Json::String("two"), Json::Object()}));
  o.Set("step", Json::Int(11));  // replaces
  CHECK(o.members().size() == 2);
  CHECK(o.Dump() == R"({"step":11,"list":[1,"two",{}]})");
  auto p = ParseJson(o.Dump(2));
  REQUIRE(p.ok());
  CHECK(*p == o);
}

TEST_CASE("Json: duplicate keys are kept for the caller", "[ckpt][json]") {
  auto j = ParseJson(R"({"a": 1, "a": 2})");
  REQUIRE(j.ok());
  CHECK(j->members().size() == 2);
  CHECK(j->Find("a")->as_int() == 1);
}

TEST_CASE("Json: errors carry the offset", "[ckpt][json]") {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"abc", "tru", "\"\\x\"",
                          "\"\\ud800\"", "[1] 2", "{\"a\":1,}", "\"a\nb\""}) {
    INFO(bad);
    auto j = ParseJson(bad);
    REQUIRE_FALSE(j.ok());
    CHECK(j.status().code() == StatusCode::kInvalidArgument);
    CHECK(j.status().message().find("at offset") != std::string::npos);
  }
  std::string deep(1000, '[');
  CHECK_FALSE(ParseJson(deep).ok());
}

TEST_CASE("Json: raw object members keep their exact text", "[ckpt][json]") {
  auto m = ParseJsonObjectRaw(R"( { "rng" : {"seed": 18446744073709551615} , "lr": 1.50 } )");
  REQUIRE(m.ok());
  REQUIRE(m->size() == 2);
  CHECK((*m)[0].first == "rng");
  CHECK((*m)[0].second == R"({"seed": 18446744073709551615})");
  CHECK((*m)[1].second == "1.50");
  CHECK_FALSE(ParseJsonObjectRaw("[1]").ok());
  CHECK_FALSE(ParseJsonObjectRaw(R"({"a": [1,}")").ok());
}

}  // namespace
}  // namespace ds
