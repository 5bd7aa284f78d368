// DeepSpeed-Chat's data: JSONL rows read with errors naming file and line, data_split
// normalised (2,4,4 is 20/40/40%), the parts disjoint, covering every row, the same for the
// same seed, and datasets blended by concatenating their parts.
#include "runtime/rlhf/preference_data.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

namespace ds::rlhf {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Rows(int n, const std::string& tag) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += "{\"prompt\": \"" + tag + std::to_string(i) +
         "=\", \"chosen\": \"good\", \"rejected\": " + "\"bad\", \"source\": \"x\"}\n";
  return s;
}

TEST_CASE("Preference data: rows, and errors naming file and line", "[rlhf][data]") {
  const std::string path = Write("pairs.jsonl", Rows(3, "a") +
                                                    "\n{\"prompt\": \"p\", "
                                                    "\"chosen\": \"c\"}\n"
                                                    "{\"prompt\": \"q\", \"response\": \"r\"}\n");
  auto d = ReadPreferenceJsonl(path);
  REQUIRE(d.ok());
  REQUIRE(d->rows.size() == 5);
  CHECK(d->rows[4].chosen == "r");  // Dahoas/rm-static's "response" stands in for "chosen"
  CHECK(d->rows[1].prompt == "a1=");
  CHECK(d->rows[1].chosen == "good");
  CHECK(d->rows[1].rejected == "bad");
  CHECK(d->rows[1].has_rejected);
  CHECK_FALSE(d->rows[3].has_rejected);
  struct Bad {
    const char* text;
    const char* message;
  };
  for (const Bad& b :
       {Bad{"{\"prompt\": \"p\"}", "bad.jsonl:2: no \"chosen\" (or \"response\"), a string"},
        Bad{"{\"prompt\": 3, \"chosen\": \"c\"}", "bad.jsonl:2: \"prompt\" is not"},
        Bad{"[1, 2]", "bad.jsonl:2: not a JSON object"},
        Bad{"{\"prompt\": \"p\", \"chosen\": \"c\", \"rejected\": [1]}",
            "bad.jsonl:2: \"rejected\" is not a string"},
        Bad{"{\"prompt\": ", "bad.jsonl:2: "}}) {
    INFO(b.text);
    auto r = ReadPreferenceJsonl(Write("bad.jsonl", Rows(1, "a") + b.text + "\n"));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains(b.message));
  }
  CHECK(ReadPreferenceJsonl(Write("empty.jsonl", "\n\n")).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(ReadPreferenceJsonl(path + ".missing").status().code() == StatusCode::kNotFound);
}

TEST_CASE("Preference data: data_split is normalised; the parts are disjoint and reproducible",
          "[rlhf][data]") {
  auto w = ParseDataSplit("2,4,4");
  REQUIRE(w.ok());
  CHECK(*w == std::vector<double>{0.2, 0.4, 0.4});
  for (const char* bad : {"2,4", "1,-1,2", "0,0,0", "a,1,1", "1,,1", "1,2,3,4"}) {
    INFO(bad);
    auto r = ParseDataSplit(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains(std::string("data_split \"") + bad));
  }
  for (int64_t rows : {100, 7, 1}) {
    std::set<int64_t> seen;
    int64_t total = 0;
    for (int part = 0; part < 3; ++part) {
      const std::vector<int64_t> got = SplitRows(rows, *w, part, 1234);
      if (rows == 100) CHECK(got.size() == (part == 0 ? 20u : 40u));
      total += static_cast<int64_t>(got.size());
      for (int64_t r : got) CHECK(seen.insert(r).second);  // disjoint
      CHECK(got == SplitRows(rows, *w, part, 1234));       // reproducible
    }
    CHECK(total == rows);  // covering
  }
  CHECK(SplitRows(100, *w, 1, 1234) != SplitRows(100, *w, 1, 99));
  // 0 weight: that step gets nothing.
  CHECK(SplitRows(50, *ParseDataSplit("0,1,1"), 0, 7).empty());
}

TEST_CASE("Preference data: datasets blend by concatenating their parts", "[rlhf][data]") {
  auto a = ReadPreferenceJsonl(Write("a.jsonl", Rows(50, "a")));
  auto b = ReadPreferenceJsonl(Write("b.jsonl", Rows(10, "b")));
  REQUIRE((a.ok() && b.ok()));
  const std::vector<double> w = *ParseDataSplit("2,4,4");
  const std::vector<PreferenceExample> sft = BlendPart({&*a, &*b}, w, 0, 1);
  const std::vector<PreferenceExample> rm = BlendPart({&*a, &*b}, w, 1, 1);
  REQUIRE(sft.size() == 10 + 2);
  REQUIRE(rm.size() == 20 + 4);
  int from_b = 0;
  std::set<std::string> prompts;
  for (const PreferenceExample& e : sft) {
    from_b += e.prompt[0] == 'b';
    prompts.insert(e.prompt);
  }
  CHECK(from_b == 2);
  for (const PreferenceExample& e : rm) CHECK(prompts.count(e.prompt) == 0);  // disjoint
  const std::vector<PreferenceExample> again = BlendPart({&*a, &*b}, w, 0, 1);
  for (size_t i = 0; i < sft.size(); ++i) CHECK(sft[i].prompt == again[i].prompt);
}

}  // namespace
}  // namespace ds::rlhf
