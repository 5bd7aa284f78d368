#include "launcher/agent/stack_dump.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>
#include <vector>

#include "launcher/coordinator/coordinator_types.h"
#include "launcher/process/process.h"
#include "runtime/base/logging.h"

extern char** environ;

namespace ds::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kDefaultPath[] = "/usr/local/bin:/usr/bin:/bin";
constexpr milliseconds kKillWait{2000};    // for a tool to exit after its output closed or SIGKILL
constexpr milliseconds kPollSlice{100};    // how often a capture looks at `cancel`
constexpr milliseconds kDetachPause{200};  // for a killed tracer's exit to detach it

// The first executable regular file `name` in the agent's PATH, or "" when there is none.
std::string FindOnPath(const std::string& name) {
  const char* env = std::getenv("PATH");
  const std::string path = env != nullptr && *env != '\0' ? env : kDefaultPath;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string file = (end == begin ? "." : path.substr(begin, end - begin)) + "/" + name;
    struct stat st {};
    if (stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(file.c_str(), X_OK) == 0)
      return file;
    begin = end + 1;
  }
  return "";
}

// The command that prints every thread's stack of `pid`: eu-stack when it is on PATH (it
// attaches and unwinds faster than gdb), else gdb; empty when neither is.
std::vector<std::string> StackCommand(pid_t pid) {
  const std::string p = std::to_string(pid);
  if (std::string eu = FindOnPath("eu-stack"); !eu.empty()) return {eu, "-p", p};
  if (std::string gdb = FindOnPath("gdb"); !gdb.empty())
    // The main thread first (gdb lists the newest first), and without its attach chatter.
    return {gdb,
            "-p",
            p,
            "-batch",
            "-nx",
            "-iex",
            "set print thread-events off",
            "-ex",
            "thread apply all -ascending bt"};
  return {};
}

// The agent's own environment: the tool finds its libraries, debuginfod settings and HOME.
std::vector<std::pair<std::string, std::string>> AgentEnv() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

// What a tool printed on stdout and stderr, in the order it arrived; the first `max` bytes.
struct Output {
  std::string text;
  size_t max = 0;
  bool cut = false;
  void Append(const char* data, size_t n) {
    const size_t room = max - std::min(max, text.size());
    if (n > room) cut = true;
    text.append(data, std::min(n, room));
  }
};

enum class ReadEnd { kClosed, kTimedOut, kCancelled };

// Reads the pipes in `fds` (non-blocking; a closed one becomes -1) until both are closed,
// `deadline` passes or `cancel` is set. The output past Output::max is read and dropped, so a
// chatty tool never blocks on a full pipe.
ReadEnd ReadUntilClosed(int fds[2], Clock::time_point deadline, const std::atomic<bool>* cancel,
                        Output* out) {
  char buf[16384];
  for (;;) {
    pollfd pfds[2];
    int which[2];
    int n = 0;
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0) continue;
      pfds[n] = {fds[i], POLLIN, 0};
      which[n++] = i;
    }
    if (n == 0) return ReadEnd::kClosed;
    if (cancel != nullptr && cancel->load()) return ReadEnd::kCancelled;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return ReadEnd::kTimedOut;
    const int ready = poll(pfds, n, static_cast<int>(std::min(left, kPollSlice).count()));
    for (int k = 0; ready > 0 && k < n; ++k) {
      if (pfds[k].revents == 0) continue;
      const ssize_t got = read(pfds[k].fd, buf, sizeof(buf));
      if (got > 0) {
        out->Append(buf, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        fds[which[k]] = -1;  // EOF (the tool and its children closed it) or a read error
      }
    }
  }
}

// Reaps the tool (CaptureOptions::reap): waits up to kKillWait, then SIGKILLs its process
// group. Returns its wait status, or -1 when it is unknown.
int ReapTool(pid_t tool) {
  const auto deadline = Clock::now() + kKillWait;
  int status = 0;
  for (;;) {
    const pid_t got = waitpid(tool, &status, WNOHANG);
    if (got == tool) return status;
    if (got < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  kill(-tool, SIGKILL);
  while (waitpid(tool, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

// The text sent to the coordinator: the output (cut at a line end when over the cap), then a
// line saying why the tool stopped when it did not just finish, or that it printed nothing.
std::string Describe(const std::string& tool, Output out, ReadEnd end, int status,
                     const CaptureOptions& o) {
  std::string text = std::move(out.text);
  if (out.cut) {
    const size_t nl = text.rfind('\n');
    if (nl != std::string::npos) text.resize(nl + 1);
  }
  auto add_line = [&text](const std::string& line) {
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += line;
  };
  if (out.cut) add_line("... (cut)");
  const bool failed = status != -1 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (end == ReadEnd::kTimedOut) {
    const int64_t ms = o.timeout.count();
    add_line(tool + " did not finish within " +
             (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms") +
             ": killed");
  } else if (end == ReadEnd::kCancelled) {
    add_line(tool + " was killed: the agent is shutting down");
  } else if (failed) {
    const bool signaled = WIFSIGNALED(status);
    add_line(tool +
             " failed: " + ExitCause(signaled, signaled ? WTERMSIG(status) : WEXITSTATUS(status)));
  } else if (text.empty()) {
    add_line(tool + " printed nothing");
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// Runs the stack tool `argv` on process `pid` and returns its output or why there is none.
std::string RunTool(const std::string& tool, const std::vector<std::string>& argv, pid_t pid,
                    const CaptureOptions& o) {
  SpawnOptions so;
  so.argv = argv;
  so.env = AgentEnv();
  // Spawn's defaults fit: its own session and process group (killed as one), and SIGKILL
  // when this capture thread exits, so no tool outlives its capture.
  StatusOr<Child> child = Spawn(so);
  if (!child.ok()) return "cannot start " + tool + ": " + child.status().ToString();
  int fds[2] = {child->stdout_fd, child->stderr_fd};
  Output out;
  out.max = o.max_bytes;
  const ReadEnd end = ReadUntilClosed(fds, Clock::now() + o.timeout, o.cancel, &out);
  if (end != ReadEnd::kClosed) {
    kill(-child->pid, SIGKILL);
    ReadUntilClosed(fds, Clock::now() + kKillWait, nullptr, &out);
  }
  const int status = o.reap ? ReapTool(child->pid) : -1;
  CloseChildFds(&*child);
  if (end != ReadEnd::kClosed) {
    // A tracer killed while attaching can leave the rank stopped: the SIGSTOP of its
    // PTRACE_ATTACH is still pending when the kernel detaches it. SIGCONT (once the tracer
    // is gone) resumes the rank; a rank that runs ignores it.
    std::this_thread::sleep_for(kDetachPause);
    kill(pid, SIGCONT);
  }
  return Describe(tool, std::move(out), end, status, o);
}

}  // namespace

StackCapture CaptureStacks(pid_t pid, const CaptureOptions& options) {
  const auto start = Clock::now();
  StackCapture capture;
  const std::vector<std::string> argv = StackCommand(pid);
  if (argv.empty()) {
    capture.text = "no eu-stack or gdb on this node's PATH: install elfutils or gdb";
  } else {
    capture.tool = argv[0].substr(argv[0].rfind('/') + 1);
    capture.text = RunTool(capture.tool, argv, pid, options);
  }
  capture.ms = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  return capture;
}

StackDumper::~StackDumper() {
  stop_.store(true);  // running captures kill their tool and skip the report
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [rank, slot] : slots_) {
      if (slot.thread.joinable()) threads.push_back(std::move(slot.thread));
    }
  }
  for (std::thread& thread : threads) thread.join();  // outside mu_: they take it last
}

void StackDumper::Request(int round, int rank, pid_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_.load()) return;
  Slot& slot = slots_[rank];
  if (slot.running || slot.sent_round == round) return;
  // A finished capture's thread: it released mu_ for the last time, so this join is short.
  if (slot.thread.joinable()) slot.thread.join();
  slot.running = true;
  slot.thread = std::thread([this, round, rank, pid] { CaptureAndSend(round, rank, pid); });
}

void StackDumper::CaptureAndSend(int round, int rank, pid_t pid) {
  pthread_setname_np(pthread_self(), "ds-stacks");
  CaptureOptions options;
  options.reap = reap_;
  options.cancel = &stop_;
  StackCapture capture = CaptureStacks(pid, options);
  DS_LOG_INFO("agent", "rank {} (pid {}): thread stacks by {} in {} ms ({} bytes)", rank, pid,
              capture.tool.empty() ? "no tool" : capture.tool, capture.ms, capture.text.size());
  bool sent = false;
  if (!stop_.load()) {
    const Status s = client_->ReportStacks({node_name_, round, rank, std::move(capture.text)});
    if (!s.ok()) DS_LOG_WARN("agent", "ReportStacks (rank {}): {}", rank, s.ToString());
    sent = s.ok();
  }
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[rank];
  slot.running = false;
  if (sent) slot.sent_round = round;
}

}  // namespace ds::launcher
