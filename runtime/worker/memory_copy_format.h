// The byte layout of a rank's in-memory copy (Trainer::SnapshotState, Note [In-memory copies]):
// "DSMEMCP1", the header's length (8 bytes, little-endian), the header as JSON, then the sections
// back to back. The header says whose copy it is (rank, world, plan hash), the step it holds, the
// states that are not bytes of a buffer (optimizer step, loss scaler, data position), how the
// rank's flat parameters were laid out (every ZeRO segment it owned, whether it held the whole
// master, the flat size, a hash of the parameter table and the model part: tensor slice and
// pipeline stage), and each section's name and size.
// A copy is read back at the same plan (section by section) or cut anew for another world size
// (Trainer::RestoreResharded) from the segments.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "zero/param_store.h"

namespace ds::worker {

struct CopySection {
  std::string name;  // "master", "optimizer/NAME", "model" or "model/OFFSET"
  char* data;        // where the bytes live in the rank's buffers (writing) or the blob (reading)
  int64_t bytes;
};

struct CopyHeader {
  int rank = 0, world = 0;
  int64_t step = 0, optimizer_step = 0;
  std::string plan;           // the plan's hash (hex)
  std::string scaler;         // LossScaler::SaveState
  std::string data;           // DataLoaderState::ToJson ("" without a loader)
  int64_t total = 0;          // flat parameter elements
  uint64_t layout = 0;        // ParameterLayoutHash
  bool master_whole = false;  // the master section holds every flat element, not the segments
  // The model part the rank runs, apart from data parallelism ("tp 2:1 pp 2:0": its tensor slice
  // and pipeline stage): copies of the same part share one flat space, cut over the dp ranks.
  std::string part;
  std::vector<zero::ShardSegment> segments;  // the owned segments (shard space)
};

// FNV-1a over every parameter's name, offset and size: two ranks' flat spaces agree when equal.
uint64_t ParameterLayoutHash(const zero::ParamStore& params);

// Writes the copy into `out` (resized; its capacity is reused).
void WriteCopy(const CopyHeader& header, const std::vector<CopySection>& sections,
               std::string* out);
// Writes the copy to file descriptor `fd` (straight from the sections, no staging buffer) and its
// CRC-32C into *crc.
Status WriteCopyTo(const CopyHeader& header, const std::vector<CopySection>& sections, int fd,
                   uint32_t* crc);

// A copy's header and its sections' places in `blob` (data points into it). DataLoss naming
// `what` for a blob that is not a whole copy.
struct ParsedCopy {
  CopyHeader header;
  std::vector<CopySection> sections;
};
StatusOr<ParsedCopy> ParseCopy(const std::string& blob, const std::string& what);

}  // namespace ds::worker
