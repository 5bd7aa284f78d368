// CPU-side checks of the CUDA build; they run on every machine that has the toolkit,
// with or without a GPU:
//  - the libraries link and load without the driver (no -lcuda; see no_libcuda_test.sh),
//  - "no GPU" is zero devices, not an error, and launches report it instead of crashing,
//  - the code that was actually linked carries sm_80 and sm_90 cubins and compute_90 PTX.
//
// Note [Reading the fatbinary]: nvcc embeds one fatbinary per .cu file in the ELF section
// .nv_fatbin of the object that ends up in the library. Each is a 16-byte header (magic
// 0xBA55ED50, u16 version, u16 header size, u64 size of the entries) followed by entries,
// each a header (u16 kind: 1 = PTX, 2 = ELF cubin; u16 version; u32 header size; u64
// padded payload size; ...; u32 arch at byte 28, e.g. 80 or 90) and its payload. PTX is
// usually compressed, cubins usually not (then they start with the ELF magic and their
// e_machine is EM_CUDA, 190). cuobjdump is not installed here, so the test reads the
// layout itself: the library object that contains LaunchGeluForward, found with
// dl_iterate_phdr. Dropping an -gencode from tools/bazel/cuda.bzl fails this test.
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/gelu_launch.h"
#include "kernels/cuda/gemm.h"
#include "runtime/cuda/device.h"

namespace ds::kernels {
namespace {

// A typed null pointer: the launchers have float and bf16 overloads.
constexpr const float* kNoFloat = nullptr;

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint16_t kKindPtx = 1;
constexpr uint16_t kKindElf = 2;
constexpr uint16_t kEmCuda = 190;

template <typename T>
T Load(const std::string& bytes, size_t offset) {
  T v{};
  if (offset + sizeof(T) <= bytes.size()) std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

// The path of the loaded object (executable or shared library) containing `addr`.
std::string ObjectContaining(const void* addr) {
  struct Query {
    uintptr_t addr;
    std::string path;
    bool found = false;
  } q{reinterpret_cast<uintptr_t>(addr), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Query*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && q->addr >= lo && q->addr < lo + ph.p_memsz) {
            q->path = info->dlpi_name[0] ? info->dlpi_name : "/proc/self/exe";
            q->found = true;
            return 1;
          }
        }
        return 0;
      },
      &q);
  return q.found ? q.path : "";
}

// Contents of the ELF64 section `name` of the file at `path`; empty if absent.
std::string ReadSection(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto eh = Load<Elf64_Ehdr>(file, 0);
  if (file.size() < sizeof(eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return "";
  const auto strtab = Load<Elf64_Shdr>(file, eh.e_shoff + eh.e_shstrndx * sizeof(Elf64_Shdr));
  for (int i = 0; i < eh.e_shnum; ++i) {
    const auto sh = Load<Elf64_Shdr>(file, eh.e_shoff + i * sizeof(Elf64_Shdr));
    const char* sname = file.c_str() + strtab.sh_offset + sh.sh_name;
    if (name == sname && sh.sh_offset + sh.sh_size <= file.size()) {
      return file.substr(sh.sh_offset, sh.sh_size);
    }
  }
  return "";
}

struct FatbinEntry {
  uint16_t kind;  // kKindPtx or kKindElf
  uint32_t arch;  // 80, 90, ...
  bool operator<(const FatbinEntry& o) const {
    return std::make_pair(kind, arch) < std::make_pair(o.kind, o.arch);
  }
  bool operator==(const FatbinEntry& o) const { return kind == o.kind && arch == o.arch; }
};

// Entries of every fatbinary in a .nv_fatbin section, one set per fatbinary (per .cu).
// See Note [Reading the fatbinary]. Fails the test on a malformed layout.
std::vector<std::set<FatbinEntry>> ParseFatbins(const std::string& sec) {
  std::vector<std::set<FatbinEntry>> out;
  size_t p = 0;
  while (p + 16 <= sec.size()) {
    if (Load<uint32_t>(sec, p) != kFatbinMagic) {  // alignment padding between fatbins
      p += 8;
      continue;
    }
    const size_t header = Load<uint16_t>(sec, p + 6);
    const size_t end = p + header + Load<uint64_t>(sec, p + 8);
    REQUIRE(end <= sec.size());
    std::set<FatbinEntry> entries;
    for (size_t e = p + header; e < end;) {
      const auto kind = Load<uint16_t>(sec, e);
      const auto entry_header = Load<uint32_t>(sec, e + 4);
      const auto payload = Load<uint64_t>(sec, e + 8);
      const auto arch = Load<uint32_t>(sec, e + 28);
      REQUIRE(entry_header >= 32);
      const size_t body = e + entry_header;
      if (kind == kKindElf && sec.compare(body, SELFMAG, ELFMAG) == 0) {
        CHECK(Load<Elf64_Ehdr>(sec, body).e_machine == kEmCuda);  // an uncompressed cubin
      }
      entries.insert({kind, arch});
      e = body + payload;
    }
    out.push_back(std::move(entries));
    p = (end + 7) & ~size_t{7};
  }
  return out;
}

TEST_CASE("CUDA build: device count is 0 without a GPU, not an error", "[cuda]") {
  StatusOr<int> count = cuda::CudaDeviceCount();
  REQUIRE(count.ok());
  CHECK(cuda::CudaCompiledIn());
  INFO("probe: " << cuda::ProbeCudaDevices().reason);
  CHECK(*count >= 0);
  CHECK(cuda::CudaAvailable() == (*count > 0));
}

TEST_CASE("CUDA build: launchers report errors without a GPU", "[cuda]") {
  CHECK(LaunchGeluForward(kNoFloat, nullptr, 0, nullptr) == cudaSuccess);
  CHECK(LaunchGeluForward(kNoFloat, nullptr, -5, nullptr) == cudaErrorInvalidValue);
  StatusOr<CublasHandle> handle = CublasHandle::Create();
  if (cuda::CudaAvailable()) {
    CHECK(handle.ok());
    return;
  }
  // Launching needs the driver: the launcher returns the error (35 here) instead of
  // crashing, and cuBLAS reports NOT_INITIALIZED, which maps to Unavailable.
  const cudaError_t err = LaunchGeluForward(kNoFloat, nullptr, 1, nullptr);
  CHECK((err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice));
  REQUIRE_FALSE(handle.ok());
  CHECK(handle.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(handle.status().message(), Catch::Contains("CUBLAS_STATUS_NOT_INITIALIZED"));
}

TEST_CASE("CUDA build: the linked GELU carries sm_80 and sm_90 cubins and compute_90 PTX",
          "[cuda]") {
  const std::string object = ObjectContaining(reinterpret_cast<const void*>(
      static_cast<cudaError_t (*)(const float*, float*, int64_t, cudaStream_t)>(
          &LaunchGeluForward)));
  INFO("object: " << object);
  REQUIRE_FALSE(object.empty());
  const std::string section = ReadSection(object, ".nv_fatbin");
  REQUIRE_FALSE(section.empty());
  const std::vector<std::set<FatbinEntry>> fatbins = ParseFatbins(section);
  REQUIRE_FALSE(fatbins.empty());
  const std::set<FatbinEntry> want = {{kKindElf, 80}, {kKindElf, 90}, {kKindPtx, 90}};
  for (const std::set<FatbinEntry>& entries : fatbins) {
    std::string seen;
    for (const FatbinEntry& e : entries) {
      seen += (e.kind == kKindPtx ? " compute_" : " sm_") + std::to_string(e.arch);
    }
    INFO("fatbinary entries:" << seen);
    CHECK(std::includes(entries.begin(), entries.end(), want.begin(), want.end()));
  }
}

}  // namespace
}  // namespace ds::kernels
