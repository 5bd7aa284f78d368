#include "runtime/ckpt/test_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace ds::ckpt::testing {
namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "test_util: %s\n", what.c_str());
  std::abort();
}

}  // namespace

std::string MakeTempDir(const std::string& tag) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + tag + ".XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp " + tmpl);
  return tmpl;
}

void FillRandom(const Tensor& t, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> uf(-1.0f, 1.0f);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype()) {
      case DType::kF32:
        t.f32()[i] = uf(gen);
        break;
      case DType::kBF16:
        t.u16()[i] = FloatToBf16(uf(gen));
        break;
      case DType::kF16:
        t.u16()[i] = FloatToF16(uf(gen));
        break;
      case DType::kI32:
        t.i32()[i] = static_cast<int32_t>(gen());
        break;
      case DType::kI64:
        static_cast<int64_t*>(t.data())[i] = (static_cast<int64_t>(gen()) << 32) | gen();
        break;
      case DType::kU16:
        t.u16()[i] = static_cast<uint16_t>(gen());
        break;
    }
  }
}

OwnedTensor RandomTensor(Shape shape, DType dtype, uint32_t seed) {
  OwnedTensor t(std::move(shape), dtype);
  FillRandom(t.view(), seed);
  return t;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  if (a.nbytes() == 0) return true;
  return std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

void XorByteAt(const std::string& path, uint64_t offset, uint8_t mask) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) Die("open " + path);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  if (!f.get(c)) Die("read " + path + " at " + std::to_string(offset));
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ static_cast<char>(mask)));
  if (!f) Die("write " + path);
}

void TruncateFileTo(const std::string& path, uint64_t size) {
  if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) Die("truncate " + path);
}

void WriteRawFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) Die("write " + path);
}

std::string ReadRawFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) Die("open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace ds::ckpt::testing
