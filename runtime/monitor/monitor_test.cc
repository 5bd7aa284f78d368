// CRC-32C against TensorBoard's test vectors, the TFRecord framing of an event file read back
// record by record, and DeepSpeed's CSV layout.
#include "runtime/monitor/monitor.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/base/crc32c.h"

namespace ds::monitor {
namespace {

std::string Tmp(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string d = std::string(t ? t : "/tmp") + "/" + name;
  std::filesystem::remove_all(d);
  return d;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("CRC-32C and its mask match TensorBoard's test vectors", "[monitor]") {
  const char zeros[32] = {0};
  CHECK(Crc32c(zeros, 32) == 0x8a9136aau);
  const std::string v =
      "\x1a\x11"
      "CRC test, one two";
  CHECK(MaskedCrc32c(v.data(), v.size()) == 0x5794d08au);
}

TEST_CASE("An event file is TFRecords: file_version first, then scalar events", "[monitor]") {
  const std::string dir = Tmp("tb");
  auto w = EventFileWriter::Create(dir);
  REQUIRE(w.ok());
  REQUIRE((*w)->AddScalar("Train/Samples/train_loss", 2.5f, 256, 1000.0).ok());
  REQUIRE((*w)->Flush().ok());
  const std::string name = std::filesystem::path((*w)->path()).filename();
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  const std::string bytes = Slurp((*w)->path());
  std::vector<std::string> records;
  for (size_t at = 0; at < bytes.size();) {
    REQUIRE(at + 12 <= bytes.size());
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, bytes.data() + at, 8);
    std::memcpy(&len_crc, bytes.data() + at + 8, 4);
    CHECK(len_crc == MaskedCrc32c(&len, 8));
    REQUIRE(at + 12 + len + 4 <= bytes.size());
    records.push_back(bytes.substr(at + 12, len));
    std::memcpy(&data_crc, bytes.data() + at + 12 + len, 4);
    CHECK(data_crc == MaskedCrc32c(records.back().data(), len));
    at += 12 + len + 4;
  }
  REQUIRE(records.size() == 2);
  CHECK(records[0].find("brain.Event:2") != std::string::npos);
  CHECK(records[1] == ScalarEvent("Train/Samples/train_loss", 2.5f, 256, 1000.0));
  CHECK(records[1].find("Train/Samples/train_loss") != std::string::npos);
}

TEST_CASE("csv_monitor: one file per tag, DeepSpeed's names and header", "[monitor]") {
  const std::string dir = Tmp("csvmon");
  TargetConfig csv{true, dir, "job"};
  auto m = Monitor::Create(TargetConfig{}, csv);
  REQUIRE(m.ok());
  REQUIRE(*m);
  REQUIRE((*m)->Write({{"Train/Samples/train_loss", 2.5, 0}, {"Train/Samples/lr", 1e-3, 16}}).ok());
  REQUIRE((*m)->Write({{"Train/Samples/train_loss", 2.25, 16}}).ok());
  CHECK(Slurp(dir + "/job/Train_Samples_train_loss.csv") == "step,train_loss\n0,2.5\n16,2.25\n");
  CHECK(Slurp(dir + "/job/Train_Samples_lr.csv") == "step,lr\n16,0.001\n");
  CHECK(CsvFileName("Train/Samples/elapsed time") == "Train_Samples_elapsed_time.csv");
  auto none = Monitor::Create(TargetConfig{}, TargetConfig{});
  REQUIRE(none.ok());
  CHECK(*none == nullptr);
}

}  // namespace
}  // namespace ds::monitor
