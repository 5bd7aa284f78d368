#include "launcher/process/line_reader.h"

namespace ds::launcher {

LineReader::LineReader(size_t max_line_bytes)
    : max_line_bytes_(max_line_bytes == 0 ? kMaxLineBytes : max_line_bytes) {}

void LineReader::Feed(std::string_view data, const LineFn& on_line) {
  while (!data.empty()) {
    // Invariant: partial_.size() <= max_line_bytes_. Look one byte past the room left so
    // that a line of exactly max_line_bytes_ followed by '\n' stays one line.
    const size_t room = max_line_bytes_ - partial_.size();
    const size_t nl = data.substr(0, room + 1).find('\n');
    if (nl != std::string_view::npos) {
      if (partial_.empty()) {
        on_line(data.substr(0, nl));  // fast path: no copy
      } else {
        partial_.append(data.data(), nl);
        on_line(partial_);
        partial_.clear();
      }
      data.remove_prefix(nl + 1);
      continue;
    }
    if (data.size() <= room) {  // no newline and the line still fits: keep it for later
      partial_.append(data.data(), data.size());
      return;
    }
    // Over-long line (more than `room` bytes, none of them '\n'): flush exactly
    // max_line_bytes_ and continue with the rest.
    if (partial_.empty()) {
      on_line(data.substr(0, room));
    } else {
      partial_.append(data.data(), room);
      on_line(partial_);
      partial_.clear();
    }
    data.remove_prefix(room);
  }
}

void LineReader::Finish(const LineFn& on_line) {
  if (partial_.empty()) return;
  on_line(partial_);
  partial_.clear();
}

}  // namespace ds::launcher
