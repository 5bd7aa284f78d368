#include "launcher/coordinator/coordinator_types.h"

#include <chrono>

#include <string.h>

namespace ds::launcher {

const char* JobPhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kPending:
      return "PENDING";
    case JobPhase::kRendezvous:
      return "RENDEZVOUS";
    case JobPhase::kRunning:
      return "RUNNING";
    case JobPhase::kRestarting:
      return "RESTARTING";
    case JobPhase::kSucceeded:
      return "SUCCEEDED";
    case JobPhase::kFailed:
      return "FAILED";
    case JobPhase::kStopped:
      return "STOPPED";
  }
  return "?";
}

const char* AgentStateName(AgentState state) {
  switch (state) {
    case AgentState::kUnknown:
      return "UNKNOWN";
    case AgentState::kJoining:
      return "JOINING";
    case AgentState::kRunning:
      return "RUNNING";
    case AgentState::kDone:
      return "DONE";
    case AgentState::kLost:
      return "LOST";
  }
  return "?";
}

const char* WorkerPhaseName(WorkerPhase phase) {
  switch (phase) {
    case WorkerPhase::kUnknown:
      return "UNKNOWN";
    case WorkerPhase::kStarting:
      return "STARTING";
    case WorkerPhase::kRunning:
      return "RUNNING";
    case WorkerPhase::kSucceeded:
      return "SUCCEEDED";
    case WorkerPhase::kFailed:
      return "FAILED";
    case WorkerPhase::kStopped:
      return "STOPPED";
  }
  return "?";
}

const char* AgentCommandName(AgentCommand command) {
  switch (command) {
    case AgentCommand::kContinue:
      return "CONTINUE";
    case AgentCommand::kStopWorkers:
      return "STOP_WORKERS";
    case AgentCommand::kShutdown:
      return "SHUTDOWN";
    case AgentCommand::kDumpStacks:
      return "DUMP_STACKS";
  }
  return "?";
}

bool IsTerminal(JobPhase phase) {
  return phase == JobPhase::kSucceeded || phase == JobPhase::kFailed || phase == JobPhase::kStopped;
}

std::string ExitCause(bool signaled, int code) {
  if (!signaled) return "exit code " + std::to_string(code);
  // glibc's strsignal returns static text for known signals ("Killed", "Terminated").
  const char* name = strsignal(code);
  std::string text = "signal " + std::to_string(code);
  if (name != nullptr) text += std::string(" (") + name + ")";
  return text;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ds::launcher
