// Recorder: thread-safe sink for Supervisor callbacks in tests, with bounded waits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/process/supervisor.h"

namespace ds::launcher::testing {

class Recorder {
 public:
  struct Line {
    int id;
    bool is_stderr;
    std::string text;
  };

  Supervisor::LogCallback log() {
    return [this](int id, bool is_stderr, std::string_view line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back({id, is_stderr, std::string(line)});
      cv_.notify_all();
    };
  }
  Supervisor::ExitCallback exit() {
    return [this](int id, ExitInfo info) {
      std::lock_guard<std::mutex> lock(mu_);
      exits_[id].push_back(std::move(info));
      cv_.notify_all();
    };
  }

  // Lines of `id` on one stream, in order.
  std::vector<std::string> Lines(int id, bool is_stderr) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const Line& l : lines_) {
      if (l.id == id && l.is_stderr == is_stderr) out.push_back(l.text);
    }
    return out;
  }
  std::vector<ExitInfo> Exits(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    return exits_[id];
  }
  // Waits (bounded) until `id` logged `text` on either stream.
  bool WaitLine(int id, const std::string& text, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const Line& l : lines_) {
        if (l.id == id && l.text == text) return true;
      }
      return false;
    });
  }
  // Waits (bounded) until `id` has exited; returns the first ExitInfo.
  bool WaitExit(int id, std::chrono::milliseconds timeout, ExitInfo* info) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !exits_[id].empty(); })) return false;
    *info = exits_[id].front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Line> lines_;
  std::map<int, std::vector<ExitInfo>> exits_;
};

}  // namespace ds::launcher::testing
