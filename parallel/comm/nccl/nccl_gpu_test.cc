// GPU test: NcclCommunicator collectives against host references, ranks as threads (one GPU
// each), bootstrapped through an InMemoryKvStore.
//
// One GPU: world 1 (NCCL refuses two ranks on one GPU): every collective, Split, Abort,
// stream ordering. Two or more GPUs: additionally a 2-rank group with every collective,
// point to point, Split, and the watchdog: rank 1 never joins an AllReduce, so rank 0's
// fails within the timeout with the rank, group and operation named, and stays failed.
//
// Needs a GPU: without one it prints "SKIPPED: no CUDA device (...)" and exits 77
// (kernels/cuda/README.md). Any other probe failure exits 1. On one GPU the two 2-rank cases
// print "SKIPPED CASE: ..." (tests/testing/skipped.h), which tools/test.sh counts as skipped.
#include <catch2/catch.hpp>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/device.h"
#include "tests/testing/skipped.h"

#if DS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "parallel/comm/nccl/kv_store.h"
#include "parallel/comm/nccl/nccl_communicator.h"
#include "runtime/core/dtype.h"

namespace ds::parallel {
namespace {

using Comms = std::vector<std::unique_ptr<NcclCommunicator>>;

// Catch2 assertions are not thread-safe: rank threads record failures here and the test
// thread checks them (Failures()).
std::mutex g_mu;
std::vector<std::string> g_failures;
thread_local int t_rank = -1;

bool Expect(bool ok, const std::string& what, int line) {
  if (!ok) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_failures.push_back("rank " + std::to_string(t_rank) + ": line " + std::to_string(line) +
                         ": " + what);
  }
  return ok;
}
// Returns the failures so far, one per line, and forgets them.
std::string Failures() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string all;
  for (const std::string& f : g_failures) all += f + "\n";
  g_failures.clear();
  return all;
}
#define EXPECT(cond) Expect((cond), #cond, __LINE__)
// In void functions: stop this rank's checks at the first failure.
#define ENSURE(cond) \
  if (!EXPECT(cond)) return
#define ENSURE_OK(expr)                                                                \
  do {                                                                                 \
    const Status _s = (expr);                                                          \
    if (!Expect(_s.ok(), #expr + std::string(": ") + _s.ToString(), __LINE__)) return; \
  } while (0)
#define ENSURE_EQ_AT(got, want, i)                                           \
  if (!Expect((got) == (want),                                               \
              #got " at " + std::to_string(i) + ": " + std::to_string(got) + \
                  " != " + std::to_string(want),                             \
              __LINE__))                                                     \
  return

// Runs fn(rank) on `world` threads, each with its GPU current.
void OnRanks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      t_rank = r;
      if (EXPECT(cudaSetDevice(r) == cudaSuccess)) fn(r);
    });
  }
  for (auto& t : threads) t.join();
}

Comms MakeGroup(int world, KvStore* store, const std::string& name,
                std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  Comms comms(world);
  std::vector<Status> errors(world);
  OnRanks(world, [&](int r) {
    NcclOptions o;
    o.rank = r;
    o.size = world;
    o.device = r;
    o.name = name;
    o.timeout = timeout;
    o.watchdog_poll = std::chrono::milliseconds(20);
    StatusOr<std::unique_ptr<NcclCommunicator>> c = NcclCommunicator::Create(o, store);
    if (c.ok())
      comms[r] = std::move(*c);
    else
      errors[r] = c.status();
  });
  for (int r = 0; r < world; ++r) {
    INFO(errors[r].ToString());
    REQUIRE(errors[r].ok());  // test thread
  }
  return comms;
}

// A device copy of a host vector (on the current device).
template <typename T>
class DeviceVec {
 public:
  explicit DeviceVec(const std::vector<T>& host) : n_(host.size()) {
    if (!EXPECT(cudaMalloc(&ptr_, std::max<size_t>(1, n_ * sizeof(T))) == cudaSuccess)) return;
    if (n_ > 0) {
      EXPECT(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    }
  }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  ~DeviceVec() { cudaFree(ptr_); }
  T* get() const { return static_cast<T*>(ptr_); }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT(cudaDeviceSynchronize() == cudaSuccess);
    if (n_ > 0) {
      EXPECT(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    }
    return host;
  }

 private:
  size_t n_;
  void* ptr_ = nullptr;
};

// Small integers in every dtype, so sums are exact in bf16 and f16 as well.
float Value(int rank, int64_t i) { return static_cast<float>((rank + 1) * ((i % 7) - 3)); }

template <typename T>
T Encode(float v, DType dt) {
  if constexpr (std::is_same_v<T, float>) return v;
  if constexpr (std::is_same_v<T, int32_t>) return static_cast<int32_t>(v);
  if constexpr (std::is_same_v<T, uint16_t>) {
    return dt == DType::kBF16 ? FloatToBf16(v) : FloatToF16(v);
  }
}

template <typename T>
float Decode(T v, DType dt) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    return dt == DType::kBF16 ? Bf16ToFloat(v) : F16ToFloat(v);
  } else {
    return static_cast<float>(v);
  }
}

template <typename T>
std::vector<T> Fill(int rank, int64_t n, DType dt, int64_t offset = 0) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Encode<T>(Value(rank, i + offset), dt);
  return v;
}

// AllReduce (sum and max), ReduceScatter, ReduceScatterV in one dtype.
template <typename T>
void CheckReductions(Comms& comms, DType dt) {
  const int world = static_cast<int>(comms.size());
  const int64_t n = 1000;
  CAPTURE(DTypeName(dt), world);
  OnRanks(world, [&](int r) {
    // AllReduce sum / max.
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      DeviceVec<T> d(Fill<T>(r, n, dt));
      ENSURE_OK(comms[r]->AllReduce(BufferView(d.get(), n, dt), op));
      const std::vector<T> got = d.Download();
      for (int64_t i = 0; i < n; ++i) {
        float want = op == ReduceOp::kSum ? 0.0f : Value(0, i);
        for (int k = 0; k < world; ++k) {
          want = op == ReduceOp::kSum ? want + Value(k, i) : std::max(want, Value(k, i));
        }
        ENSURE_EQ_AT(Decode(got[i], dt), want, i);
      }
    }
    // ReduceScatter: chunk r of the sum.
    DeviceVec<T> in(Fill<T>(r, n * world, dt));
    DeviceVec<T> out{std::vector<T>(n)};
    ENSURE(comms[r]
               ->ReduceScatter(BufferView(in.get(), n * world, dt), BufferView(out.get(), n, dt),
                               ReduceOp::kSum)
               .ok());
    std::vector<T> got = out.Download();
    for (int64_t i = 0; i < n; ++i) {
      float want = 0.0f;
      for (int k = 0; k < world; ++k) want += Value(k, r * n + i);
      ENSURE_EQ_AT(Decode(got[i], dt), want, i);
    }
    // ReduceScatterV: uneven chunks, one of them empty when world > 1.
    std::vector<int64_t> counts(world);
    for (int k = 0; k < world; ++k) counts[k] = k == 1 ? 0 : 37 + 100 * k;
    int64_t total = 0, offset = 0;
    for (int k = 0; k < world; ++k) {
      if (k < r) offset += counts[k];
      total += counts[k];
    }
    DeviceVec<T> vin(Fill<T>(r, total, dt));
    DeviceVec<T> vout(std::vector<T>(counts[r]));
    ENSURE(comms[r]
               ->ReduceScatterV(BufferView(vin.get(), total, dt),
                                BufferView(vout.get(), counts[r], dt), counts, ReduceOp::kSum)
               .ok());
    got = vout.Download();
    for (int64_t i = 0; i < counts[r]; ++i) {
      float want = 0.0f;
      for (int k = 0; k < world; ++k) want += Value(k, offset + i);
      ENSURE_EQ_AT(Decode(got[i], dt), want, i);
    }
  });
}

// AllGather, Broadcast, AllToAll, Barrier, async handles (f32).
void CheckDataMovement(Comms& comms) {
  const int world = static_cast<int>(comms.size());
  const int64_t n = 513;
  OnRanks(world, [&](int r) {
    Communicator& c = *comms[r];
    DeviceVec<float> in(Fill<float>(r, n, DType::kF32));
    DeviceVec<float> out(std::vector<float>(n * world, -1.0f));
    ENSURE_OK(c.AllGather({in.get(), n}, {out.get(), n * world}));
    std::vector<float> got = out.Download();
    for (int k = 0; k < world; ++k) {
      for (int64_t i = 0; i < n; ++i) ENSURE_EQ_AT(got[k * n + i], Value(k, i), k * n + i);
    }

    const int root = world - 1;
    DeviceVec<float> b(Fill<float>(r, n, DType::kF32, /*offset=*/5));
    ENSURE_OK(c.Broadcast({b.get(), n}, root));
    got = b.Download();
    for (int64_t i = 0; i < n; ++i) ENSURE_EQ_AT(got[i], Value(root, i + 5), i);

    // AllToAll: rank r's chunk k is Value(r, k * n + i); out chunk k comes from rank k.
    DeviceVec<float> a_in(Fill<float>(r, n * world, DType::kF32));
    DeviceVec<float> a_out(std::vector<float>(n * world));
    ENSURE_OK(c.AllToAll({a_in.get(), n * world}, {a_out.get(), n * world}));
    got = a_out.Download();
    for (int k = 0; k < world; ++k) {
      for (int64_t i = 0; i < n; ++i) ENSURE_EQ_AT(got[k * n + i], Value(k, r * n + i), k * n + i);
    }

    ENSURE_OK(c.Barrier());
    DeviceVec<float> x(Fill<float>(r, n, DType::kF32));
    std::unique_ptr<CommHandle> h = c.AllReduceAsync({x.get(), n}, ReduceOp::kSum);
    std::unique_ptr<CommHandle> hb = c.BarrierAsync();
    ENSURE_OK(h->Wait());
    ENSURE_OK(hb->Wait());
    EXPECT(h->Done());
    got = x.Download();
    for (int64_t i = 0; i < n; ++i) {
      float want = 0.0f;
      for (int k = 0; k < world; ++k) want += Value(k, i);
      ENSURE_EQ_AT(got[i], want, i);
    }
  });
}

TEST_CASE("NcclCommunicator world 1: every collective, Split, stream order, Abort", "[nccl][gpu]") {
  InMemoryKvStore store;
  Comms comms = MakeGroup(1, &store, "solo");
  CheckReductions<float>(comms, DType::kF32);
  CheckReductions<uint16_t>(comms, DType::kBF16);
  CheckReductions<uint16_t>(comms, DType::kF16);
  CheckReductions<int32_t>(comms, DType::kI32);
  CheckDataMovement(comms);
  CHECK(Failures() == "");

  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  StatusOr<std::unique_ptr<Communicator>> child = comms[0]->Split({0}, "sub");
  REQUIRE(child.ok());
  REQUIRE(*child != nullptr);
  CHECK((*child)->name() == "solo/sub");
  DeviceVec<int32_t> one(std::vector<int32_t>{41});
  REQUIRE((*child)->AllReduce({one.get(), 1}, ReduceOp::kSum).ok());
  CHECK(one.Download()[0] == 41);

  // Inputs written on the caller's stream, ordered by OrderAfter (implicit order off).
  NcclOptions o;
  o.name = "ordered";
  o.order_after_compute_stream = false;
  StatusOr<std::unique_ptr<NcclCommunicator>> ordered = NcclCommunicator::Create(o, &store);
  REQUIRE(ordered.ok());
  cudaStream_t compute = nullptr;
  cudaEvent_t ready = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) == cudaSuccess);
  const int64_t n = 1 << 24;
  DeviceVec<int32_t> big(std::vector<int32_t>(n, 0));
  DeviceVec<int32_t> gathered(std::vector<int32_t>(n, 0));
  for (int i = 0; i < 20; ++i) REQUIRE(cudaMemsetAsync(big.get(), i, n * 4, compute) == 0);
  REQUIRE(cudaMemsetAsync(big.get(), 0x01, n * 4, compute) == cudaSuccess);
  REQUIRE(cudaEventRecord(ready, compute) == cudaSuccess);
  REQUIRE((*ordered)->OrderAfter(ready).ok());
  REQUIRE((*ordered)->AllGather({big.get(), n}, {gathered.get(), n}).ok());
  CHECK(gathered.Download()[n - 1] == 0x01010101);
  cudaEventDestroy(ready);
  cudaStreamDestroy(compute);

  // Abort: sticky for every later call.
  comms[0]->Abort("test");
  const Status s = comms[0]->Barrier();
  CHECK(s.code() == StatusCode::kAborted);
  CHECK_THAT(comms[0]->AllReduce({one.get(), 1}, ReduceOp::kSum).message(),
             Catch::Contains("aborted: test"));
  CHECK(Failures() == "");
}

TEST_CASE("NcclCommunicator 2 ranks: collectives, point to point, Split", "[nccl][gpu]") {
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  if (devices < 2) {
    return ds::testing::ReportSkippedCase("NcclCommunicator 2 ranks",
                                          "one GPU: NCCL refuses two ranks on one GPU");
  }
  InMemoryKvStore store;
  Comms comms = MakeGroup(2, &store, "world");
  CheckReductions<float>(comms, DType::kF32);
  CheckReductions<uint16_t>(comms, DType::kBF16);
  CheckReductions<uint16_t>(comms, DType::kF16);
  CheckReductions<int32_t>(comms, DType::kI32);
  CheckDataMovement(comms);
  CHECK(Failures() == "");

  OnRanks(2, [&](int r) {
    Communicator& c = *comms[r];
    const int64_t n = 300;
    DeviceVec<float> mine(Fill<float>(r, n, DType::kF32));
    DeviceVec<float> theirs{std::vector<float>(n)};
    if (r == 0) ENSURE_OK(c.Send({mine.get(), n}, 1, 0));
    if (r == 1) ENSURE_OK(c.Recv({theirs.get(), n}, 0, 0));
    if (r == 1) {
      std::vector<float> got = theirs.Download();
      for (int64_t i = 0; i < n; ++i) ENSURE_EQ_AT(got[i], Value(0, i), i);
    }
    ENSURE_OK(c.SendRecv({mine.get(), n}, 1 - r, {theirs.get(), n}, 1 - r, 3));
    std::vector<float> got = theirs.Download();
    for (int64_t i = 0; i < n; ++i) ENSURE_EQ_AT(got[i], Value(1 - r, i), i);

    StatusOr<std::unique_ptr<Communicator>> solo = c.Split({1}, "one");
    ENSURE_OK(solo.status());
    EXPECT((*solo == nullptr) == (r == 0));
    StatusOr<std::unique_ptr<Communicator>> pair = c.Split({1, 0}, "swapped");
    ENSURE_OK(pair.status());
    ENSURE(*pair != nullptr);
    EXPECT((*pair)->rank() == 1 - r);
    DeviceVec<int32_t> x(std::vector<int32_t>{(*pair)->rank() + 10});
    ENSURE_OK((*pair)->Broadcast({x.get(), 1}, 0));
    EXPECT(x.Download()[0] == 11);  // new rank 0 is old rank 1
  });
  CHECK(Failures() == "");
}

TEST_CASE("NcclCommunicator watchdog: a rank that never joins fails the collective",
          "[nccl][gpu]") {
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  if (devices < 2) {
    return ds::testing::ReportSkippedCase("NcclCommunicator watchdog",
                                          "one GPU: the case needs two ranks");
  }
  InMemoryKvStore store;
  Comms comms = MakeGroup(2, &store, "wd", std::chrono::seconds(3));
  Status first, later;
  double seconds = 0;
  OnRanks(2, [&](int r) {
    if (r != 0) return;  // rank 1 never joins
    DeviceVec<float> d(std::vector<float>(1024, 1.0f));
    const auto start = std::chrono::steady_clock::now();
    first = comms[0]->AllReduce({d.get(), 1024}, ReduceOp::kSum);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    later = comms[0]->Barrier();
  });
  CHECK(first.code() == StatusCode::kDeadlineExceeded);
  CHECK(first.message() ==
        "rank 0 of wd: AllReduce #0 (f32 x 1024, sum) did not finish within 3 s; "
        "communicator aborted");
  CHECK(later.message() == first.message());
  CHECK(seconds >= 3.0);
  CHECK(seconds < 30.0);
  CHECK(Failures() == "");
  comms[1]->Abort("peer failed");  // so its destructor does not wait to flush
  OnRanks(2, [&](int r) { comms[r].reset(); });
}

}  // namespace
}  // namespace ds::parallel
#endif  // DS_HAVE_CUDA
