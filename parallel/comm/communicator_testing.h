// Test helpers shared by the backend tests: run a function on one thread per rank, and check
// every collective of a group against a direct computation. Catch2 assertions are not
// thread-safe, so the helpers return failure descriptions for the test thread to check.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"

namespace ds::parallel::testing {

// Runs fn(rank) for rank in [0, n) on n threads; joins them.
void RunOnRanks(int n, const std::function<void(int)>& fn);

// The value rank `rank` contributes at element `i`: a small integer, so sums over a few ranks
// are exact in fp32 whatever the reduction order.
float TestValue(int rank, int64_t i);

// Runs AllReduce (sum, max; f32 and i32), ReduceScatter, AllGather, Broadcast (two roots),
// AllToAll, SendRecv around the ring and Barrier on every rank of `comms` (element r is rank
// r; each on its own thread) with `count` elements per chunk. Returns one line per failure
// ("rank 1: AllGather[7]: got 3 want 4"), empty when all matched.
std::vector<std::string> CheckAllCollectives(const std::vector<Communicator*>& comms,
                                             int64_t count);

// Issues the collectives above as async operations back to back, then waits for all of them
// in reverse order; checks results as above.
std::vector<std::string> CheckAsyncCollectives(const std::vector<Communicator*>& comms,
                                               int64_t count);

// Count lists of ReduceScatterV cases for a group of n ranks, chunk sizes multiples of
// `scale`: equal, uneven with zeros, one rank owning everything (the first, the last), all
// empty, and the first rank empty.
std::vector<std::vector<int64_t>> ReduceScatterVCounts(int n, int64_t scale);

// Runs ReduceScatterV with `counts` (one entry per rank) on every rank of `comms`, as f32 sum,
// f32 max, bf16 sum and i32 sum, with inputs TestValue(rank, input index). Sync: one after
// another. Async: all issued back to back with an AllReduce between them, then waited in
// reverse order. Checks each output exactly against a sequential reduction, and that nothing
// past it was written. Returns one line per failure, empty when all matched.
std::vector<std::string> CheckReduceScatterV(const std::vector<Communicator*>& comms,
                                             const std::vector<int64_t>& counts, bool async);

}  // namespace ds::parallel::testing
