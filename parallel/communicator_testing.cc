#include "parallel/communicator_testing.h"

#include <algorithm>
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

}  // namespace

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
