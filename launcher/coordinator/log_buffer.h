// A bounded buffer of the workers' output lines (forwarded by the agents with SendLogs),
// read with a cursor by ds-launch to print "[rank N] ..." lines. Keeps the newest
// `capacity` lines; a reader that falls behind learns how many it missed. Lines longer
// than kMaxLineBytes are truncated.
//
// Not thread-safe: CoordinatorState owns one and guards it with its mutex.
//
//   LogChunk chunk = logs.Read(cursor, /*max_lines=*/1000);
//   for (const LogRecord& r : chunk.records) Print(r);
//   cursor = chunk.next_cursor;
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "launcher/coordinator/coordinator_types.h"

namespace ds::launcher {

inline constexpr size_t kMaxLineBytes = 16 * 1024;

struct LogRecord {
  uint64_t seq = 0;  // position in the whole stream of lines, from 0
  std::string node;  // the agent that forwarded the line
  LogLine line;
};

struct LogChunk {
  std::vector<LogRecord> records;
  uint64_t next_cursor = 0;  // pass to the next Read
  uint64_t dropped = 0;      // lines between the cursor and records[0] that were evicted
};

class LogBuffer {
 public:
  explicit LogBuffer(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  void Append(const std::string& node, LogLine line);
  // Up to `max_lines` lines from `cursor` on (0 = from the first line ever appended;
  // evicted lines are counted in `dropped`).
  LogChunk Read(uint64_t cursor, size_t max_lines) const;
  // The cursor after the newest line.
  uint64_t end() const { return next_seq_; }

 private:
  const size_t capacity_;
  uint64_t next_seq_ = 0;
  std::deque<LogRecord> records_;  // seq next_seq_ - size() .. next_seq_ - 1
};

}  // namespace ds::launcher
