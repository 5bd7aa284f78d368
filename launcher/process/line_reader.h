// LineReader: splits a byte stream (a child's stdout or stderr pipe) into lines.
//
// Lines end at '\n' (which is not part of the reported line). A line longer than
// max_line_bytes is reported in pieces of exactly max_line_bytes, so one runaway
// writer (a progress bar without newlines, a binary dump) cannot grow the buffer without
// bound. At end of stream, Finish() reports the final unterminated line, if any.
// Not thread-safe: one reader per stream, used by one thread at a time.
//
//   LineReader reader;
//   reader.Feed(std::string_view(buf, n), [&](std::string_view line) { Log(line); });
//   reader.Finish([&](std::string_view line) { Log(line); });  // at EOF
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace ds::launcher {

class LineReader {
 public:
  using LineFn = std::function<void(std::string_view line)>;
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  explicit LineReader(size_t max_line_bytes = kMaxLineBytes);

  // Appends `data` and calls `on_line` once per complete line, in order. The view is
  // only valid during the call.
  void Feed(std::string_view data, const LineFn& on_line);
  // End of stream: reports the buffered partial line (if non-empty) and clears it.
  void Finish(const LineFn& on_line);

  size_t buffered_bytes() const { return partial_.size(); }

 private:
  size_t max_line_bytes_;
  std::string partial_;  // bytes after the last newline, at most max_line_bytes_
};

}  // namespace ds::launcher
