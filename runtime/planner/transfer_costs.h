// The costs the step simulation (step_sim.h) charges beside a transfer's bytes: a swap's time on
// the rank's NVMe (SWAP_IN / SWAP_OUT, at the I/O engine's rates measured on the job's
// nvme_path), and ZeRO++'s quantization around a collective (qwZ's gathers, qgZ's all-to-alls:
// each rank's values quantized before they go out, the values that arrive dequantized, at the
// rates ds-worker calibrate measures for the block kernels, runtime/core/quantize.h).
//
//   double s = SwapSeconds(plan, in, rates);             // on the rank's I/O queue
//   double q = QuantizationSeconds(plan, in, rates);     // added to the collective's time
#pragma once

#include "proto/plan.pb.h"
#include "runtime/planner/host_rates.h"

namespace ds::planner {

// A sub-group's state arrays (its SWAP_OUT also the 16-bit parameters where they are swapped),
// or a parameter SWAP_IN's units' chunks, at nvme_read_gbps / nvme_write_gbps.
double SwapSeconds(const proto::Plan& plan, const proto::Instruction& in, const HostRates& r);

// 0 for a collective that moves full precision. A gather quantizes the rank's own part and
// dequantizes the whole; a reduce-scatter by all-to-alls (collective.hierarchy) quantizes what a
// stage sends and dequantizes what it receives, each stage over the previous stage's share.
double QuantizationSeconds(const proto::Plan& plan, const proto::Instruction& in,
                           const HostRates& r);

}  // namespace ds::planner
