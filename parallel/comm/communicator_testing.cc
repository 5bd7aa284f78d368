#include "parallel/comm/communicator_testing.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace ds::parallel::testing {

void RunOnRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

float TestValue(int rank, int64_t i) {
  return static_cast<float>(((rank + 1) * 131 + i * 7) % 97) - 48.0f;
}

namespace {

// The buffers of one rank's round of collectives, and what they should hold afterwards.
struct Case {
  std::string name;
  std::vector<float> buffer;  // the output (or in-place) buffer
  std::vector<float> want;
};

struct RankRun {
  std::vector<std::string> failures;
  void Check(int rank, const std::string& what, const Status& s) {
    if (!s.ok())
      failures.push_back("rank " + std::to_string(rank) + ": " + what + ": " + s.ToString());
  }
  template <typename T>
  void Compare(int rank, const std::string& what, const std::vector<T>& got,
               const std::vector<T>& want) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] != want[i]) {
        failures.push_back("rank " + std::to_string(rank) + ": " + what + "[" + std::to_string(i) +
                           "]: got " + std::to_string(got[i]) + " want " + std::to_string(want[i]));
        return;
      }
    }
  }
};

// Inputs and expected outputs of every collective for one rank.
struct Buffers {
  Buffers(int r, int n, int64_t count) {
    const int64_t total = count * n;
    const int left = (r + n - 1) % n;
    sum.resize(count);
    max.resize(count);
    isum.resize(count);
    want_sum.assign(count, 0.0f);
    want_max.assign(count, -1e30f);
    want_isum.assign(count, 0);
    for (int64_t i = 0; i < count; ++i) {
      sum[i] = max[i] = TestValue(r, i);
      isum[i] = static_cast<int32_t>(TestValue(r, i)) * 1000;
      for (int k = 0; k < n; ++k) {
        want_sum[i] += TestValue(k, i);
        want_max[i] = std::max(want_max[i], TestValue(k, i));
        want_isum[i] += static_cast<int32_t>(TestValue(k, i)) * 1000;
      }
    }
    rs_in.resize(total);
    a2a_in.resize(total);
    for (int64_t j = 0; j < total; ++j) rs_in[j] = a2a_in[j] = TestValue(r, j);
    rs_out.assign(count, 0.0f);
    want_rs.assign(count, 0.0f);
    for (int64_t i = 0; i < count; ++i) {
      for (int k = 0; k < n; ++k) want_rs[i] += TestValue(k, r * count + i);
    }
    ag_in.resize(count);
    for (int64_t i = 0; i < count; ++i) ag_in[i] = TestValue(r, i);
    ag_out.assign(total, 0.0f);
    want_ag.resize(total);
    a2a_out.assign(total, 0.0f);
    want_a2a.resize(total);
    for (int k = 0; k < n; ++k) {
      for (int64_t i = 0; i < count; ++i) {
        want_ag[k * count + i] = TestValue(k, i);
        want_a2a[k * count + i] = TestValue(k, r * count + i);
      }
    }
    for (int root : {0, n - 1}) {
      std::vector<float> b(count, -1.0f), w(count);
      for (int64_t i = 0; i < count; ++i) {
        w[i] = TestValue(root, i);
        if (r == root) b[i] = w[i];
      }
      bcast.push_back(b);
      want_bcast.push_back(w);
    }
    send.resize(count);
    want_recv.resize(count);
    recv.assign(count, 0.0f);
    for (int64_t i = 0; i < count; ++i) {
      send[i] = TestValue(r, i) + 0.5f;
      want_recv[i] = TestValue(left, i) + 0.5f;
    }
  }
  std::vector<float> sum, max, want_sum, want_max;
  std::vector<int32_t> isum, want_isum;
  std::vector<float> rs_in, rs_out, want_rs, ag_in, ag_out, want_ag, a2a_in, a2a_out, want_a2a;
  std::vector<std::vector<float>> bcast, want_bcast;
  std::vector<float> send, recv, want_recv;
};

void CompareAll(int r, const Buffers& b, RankRun* run) {
  run->Compare(r, "AllReduce(sum)", b.sum, b.want_sum);
  run->Compare(r, "AllReduce(max)", b.max, b.want_max);
  run->Compare(r, "AllReduce(i32 sum)", b.isum, b.want_isum);
  run->Compare(r, "ReduceScatter", b.rs_out, b.want_rs);
  run->Compare(r, "AllGather", b.ag_out, b.want_ag);
  run->Compare(r, "AllToAll", b.a2a_out, b.want_a2a);
  for (size_t k = 0; k < b.bcast.size(); ++k) {
    run->Compare(r, "Broadcast#" + std::to_string(k), b.bcast[k], b.want_bcast[k]);
  }
  run->Compare(r, "SendRecv", b.recv, b.want_recv);
}

std::vector<std::string> Collect(const std::vector<RankRun>& runs) {
  std::vector<std::string> all;
  for (const RankRun& run : runs) all.insert(all.end(), run.failures.begin(), run.failures.end());
  return all;
}

// One ReduceScatterV of one rank: typed bytes in and out, the want as doubles (exact: small
// integers).
struct VCase {
  VCase(int r, const std::vector<int64_t>& counts, DType dtype, ReduceOp reduce)
      : dtype(dtype), reduce(reduce), elem(DTypeSize(dtype)) {
    const int n = static_cast<int>(counts.size());
    int64_t total = 0, offset = 0;
    for (int k = 0; k < n; ++k) {
      if (k == r) offset = total;
      total += counts[k];
    }
    in.resize(total * elem);
    for (int64_t j = 0; j < total; ++j) Store(in.data(), j, Value(r, j));
    out_count = counts[r];
    out.assign((out_count + 1) * elem, kCanary);  // one element past the output
    for (int64_t i = 0; i < out_count; ++i) {
      double w = Value(0, offset + i);
      for (int k = 1; k < n; ++k) {
        const double v = Value(k, offset + i);
        w = reduce == ReduceOp::kSum ? w + v : std::max(w, v);
      }
      want.push_back(w);
    }
  }
  // Zero-count buffers are passed as null: allowed, and what an empty vector gives anyway.
  BufferView In() { return {in.empty() ? nullptr : in.data(), int64_t(in.size() / elem), dtype}; }
  BufferView Out() { return {out_count == 0 ? nullptr : out.data(), out_count, dtype}; }
  std::string Name() const {
    return std::string("ReduceScatterV(") + DTypeName(dtype) + " " + ReduceOpName(reduce) + ")";
  }
  void Compare(int r, RankRun* run) {
    for (int64_t i = 0; i < out_count; ++i) {
      const double got = Load(out.data(), i);
      if (got != want[i]) {
        run->failures.push_back("rank " + std::to_string(r) + ": " + Name() + "[" +
                                std::to_string(i) + "]: got " + std::to_string(got) + " want " +
                                std::to_string(want[i]));
        return;
      }
    }
    for (size_t b = out_count * elem; b < out.size(); ++b) {
      if (out[b] != kCanary) {
        run->failures.push_back("rank " + std::to_string(r) + ": " + Name() +
                                " wrote past its output");
        return;
      }
    }
  }

  static constexpr char kCanary = 0x5a;
  double Value(int rank, int64_t j) const {
    const double v = TestValue(rank, j);
    return dtype == DType::kI32 ? v * 1000 : v;
  }
  void Store(char* data, int64_t i, double v) const {
    if (dtype == DType::kI32) {
      reinterpret_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
    } else {
      StoreFloat(data, dtype, i, static_cast<float>(v));
    }
  }
  double Load(const char* data, int64_t i) const {
    if (dtype == DType::kI32) return reinterpret_cast<const int32_t*>(data)[i];
    return LoadFloat(data, dtype, i);
  }

  const DType dtype;
  const ReduceOp reduce;
  const size_t elem;
  int64_t out_count = 0;
  std::vector<char> in, out;
  std::vector<double> want;
};

}  // namespace

std::vector<std::vector<int64_t>> ReduceScatterVCounts(int n, int64_t scale) {
  std::vector<std::vector<int64_t>> cases;
  cases.emplace_back(n, 3 * scale);  // equal
  std::vector<int64_t> uneven(n), first_empty(n, scale);
  const int64_t pattern[] = {5, 0, 14, 1};  // 250/0/700/50 at scale 50
  for (int k = 0; k < n; ++k) uneven[k] = pattern[k % 4] * scale;
  cases.push_back(uneven);
  first_empty[0] = 0;
  cases.push_back(first_empty);
  for (int owner : {0, n - 1}) {
    std::vector<int64_t> one(n, 0);
    one[owner] = 7 * scale;
    cases.push_back(one);
  }
  cases.emplace_back(n, 0);  // nothing anywhere
  return cases;
}

std::vector<std::string> CheckReduceScatterV(const std::vector<Communicator*>& comms,
                                             const std::vector<int64_t>& counts, bool async) {
  const int n = static_cast<int>(comms.size());
  std::vector<RankRun> runs(n);
  RunOnRanks(n, [&](int r) {
    Communicator& c = *comms[r];
    RankRun& run = runs[r];
    std::vector<VCase> cases;
    cases.emplace_back(r, counts, DType::kF32, ReduceOp::kSum);
    cases.emplace_back(r, counts, DType::kF32, ReduceOp::kMax);
    cases.emplace_back(r, counts, DType::kBF16, ReduceOp::kSum);
    cases.emplace_back(r, counts, DType::kI32, ReduceOp::kSum);
    std::vector<float> between(257, 1.0f);
    if (!async) {
      for (VCase& v : cases) {
        run.Check(r, v.Name(), c.ReduceScatterV(v.In(), v.Out(), counts, v.reduce));
      }
    } else {
      std::vector<std::pair<std::string, std::unique_ptr<CommHandle>>> handles;
      for (size_t i = 0; i < cases.size(); ++i) {
        VCase& v = cases[i];
        handles.emplace_back(v.Name(), c.ReduceScatterVAsync(v.In(), v.Out(), counts, v.reduce));
        if (i == 1) {
          handles.emplace_back("AllReduce",
                               c.AllReduceAsync({between.data(), 257}, ReduceOp::kSum));
        }
      }
      for (auto it = handles.rbegin(); it != handles.rend(); ++it) {
        run.Check(r, it->first, it->second->Wait());
      }
      run.Compare(r, "AllReduce", between, std::vector<float>(257, static_cast<float>(n)));
    }
    for (VCase& v : cases) v.Compare(r, &run);
  });
  return Collect(runs);
}

std::vector<std::string> CheckAllCollectives(const std::vector<Communicator*>& comms,
                                             int64_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<RankRun> runs(n);
  RunOnRanks(n, [&](int r) {
    Communicator& c = *comms[r];
    RankRun& run = runs[r];
    Buffers b(r, n, count);
    const int64_t total = count * n;
    run.Check(r, "AllReduce(sum)", c.AllReduce({b.sum.data(), count}, ReduceOp::kSum));
    run.Check(r, "AllReduce(max)", c.AllReduce({b.max.data(), count}, ReduceOp::kMax));
    run.Check(r, "AllReduce(i32)", c.AllReduce({b.isum.data(), count}, ReduceOp::kSum));
    run.Check(r, "ReduceScatter",
              c.ReduceScatter({b.rs_in.data(), total}, {b.rs_out.data(), count}, ReduceOp::kSum));
    run.Check(r, "AllGather", c.AllGather({b.ag_in.data(), count}, {b.ag_out.data(), total}));
    run.Check(r, "AllToAll", c.AllToAll({b.a2a_in.data(), total}, {b.a2a_out.data(), total}));
    run.Check(r, "Broadcast(0)", c.Broadcast({b.bcast[0].data(), count}, 0));
    run.Check(r, "Broadcast(n-1)", c.Broadcast({b.bcast[1].data(), count}, n - 1));
    if (n > 1) {
      run.Check(r, "SendRecv",
                c.SendRecv({b.send.data(), count}, (r + 1) % n, {b.recv.data(), count},
                           (r + n - 1) % n, 5));
    } else {
      b.recv = b.want_recv;
    }
    run.Check(r, "Barrier", c.Barrier());
    CompareAll(r, b, &run);
  });
  return Collect(runs);
}

std::vector<std::string> CheckAsyncCollectives(const std::vector<Communicator*>& comms,
                                               int64_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<RankRun> runs(n);
  RunOnRanks(n, [&](int r) {
    Communicator& c = *comms[r];
    RankRun& run = runs[r];
    Buffers b(r, n, count);
    const int64_t total = count * n;
    std::vector<std::pair<std::string, std::unique_ptr<CommHandle>>> handles;
    handles.emplace_back("AllReduce(sum)", c.AllReduceAsync({b.sum.data(), count}, ReduceOp::kSum));
    handles.emplace_back("AllReduce(max)", c.AllReduceAsync({b.max.data(), count}, ReduceOp::kMax));
    handles.emplace_back("AllReduce(i32)",
                         c.AllReduceAsync({b.isum.data(), count}, ReduceOp::kSum));
    handles.emplace_back(
        "ReduceScatter",
        c.ReduceScatterAsync({b.rs_in.data(), total}, {b.rs_out.data(), count}, ReduceOp::kSum));
    handles.emplace_back("AllGather",
                         c.AllGatherAsync({b.ag_in.data(), count}, {b.ag_out.data(), total}));
    handles.emplace_back("AllToAll",
                         c.AllToAllAsync({b.a2a_in.data(), total}, {b.a2a_out.data(), total}));
    handles.emplace_back("Broadcast(0)", c.BroadcastAsync({b.bcast[0].data(), count}, 0));
    handles.emplace_back("Broadcast(n-1)", c.BroadcastAsync({b.bcast[1].data(), count}, n - 1));
    if (n > 1) {
      handles.emplace_back("SendRecv", c.SendRecvAsync({b.send.data(), count}, (r + 1) % n,
                                                       {b.recv.data(), count}, (r + n - 1) % n, 5));
    } else {
      b.recv = b.want_recv;
    }
    handles.emplace_back("Barrier", c.BarrierAsync());
    for (auto it = handles.rbegin(); it != handles.rend(); ++it) {
      run.Check(r, it->first, it->second->Wait());
    }
    CompareAll(r, b, &run);
  });
  return Collect(runs);
}

}  // namespace ds::parallel::testing
