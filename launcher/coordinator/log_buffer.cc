#include "launcher/coordinator/log_buffer.h"

#include <algorithm>

namespace ds::launcher {

void LogBuffer::Append(const std::string& node, LogLine line) {
  if (line.text.size() > kMaxLineBytes) {
    line.text.resize(kMaxLineBytes);
    line.text += " [truncated]";
  }
  records_.push_back(LogRecord{next_seq_++, node, std::move(line)});
  if (records_.size() > capacity_) records_.pop_front();
}

LogChunk LogBuffer::Read(uint64_t cursor, size_t max_lines) const {
  LogChunk chunk;
  uint64_t first = next_seq_ - records_.size();
  if (cursor < first) {
    chunk.dropped = first - cursor;
    cursor = first;
  }
  if (cursor > next_seq_) cursor = next_seq_;
  size_t begin = static_cast<size_t>(cursor - first);
  size_t end = std::min(records_.size(), begin + max_lines);
  chunk.records.assign(records_.begin() + begin, records_.begin() + end);
  chunk.next_cursor = first + end;
  return chunk;
}

}  // namespace ds::launcher
