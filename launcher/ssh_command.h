// ssh backend: the argv that starts one agent on a remote host, and POSIX shell quoting.
//
// The remote sshd hands the command to the user's login shell as ONE string, so every word
// is shell-quoted here; nothing relies on the remote shell's rc files or PATH (ssh passes
// almost no environment: variables go explicitly through `env K=V`, and the agent is named
// by absolute path). Reference: launcher.md 2.1 and Part 3 item 7.
//
// No secrets on the command line: argv is visible in `ps` on both hosts and in sshd logs.
// The job token is written to the agent's stdin (the ssh channel) after ssh starts, and the
// agent treats EOF on stdin as "the launcher is gone". Pure functions, thread-safe.
//
//   SshOptions o;  o.host = "worker-1";  o.remote_argv = {"/opt/ds/bin/ds-agent", "--node=1"};
//   DS_ASSIGN_OR_RETURN(std::vector<std::string> argv, SshCommand(o));
//   // spawn argv with a pipe on stdin; write the token; keep the pipe open.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace ds::launcher {

// Quotes `word` so that a POSIX shell reads it back as exactly one word with the same bytes
// (any bytes except NUL, which no argv can hold). Words made only of [A-Za-z0-9@%+=:,./_-]
// are returned as they are; the empty word is ''; anything else is wrapped in single quotes
// with each ' written as '"'"' (as Python's shlex.quote).
std::string ShellQuote(const std::string& word);

struct SshOptions {
  std::string ssh = "ssh";               // client program (a name looked up in PATH, or a path)
  std::string host;                      // host name or ssh alias (required)
  int port = 0;                          // -p; 0 = ssh's default (or the ssh config's)
  std::string user;                      // -l; empty = ssh's default
  std::string identity_file;             // -i; empty = ssh's default
  std::string ssh_config_file;           // -F; empty = ~/.ssh/config
  int connect_timeout_s = 10;            // -o ConnectTimeout, seconds (> 0)
  std::string strict_host_key_checking;  // "", "yes", "no" or "accept-new"; "" = ssh's
  std::string known_hosts_file;          // -o UserKnownHostsFile; empty = ssh's default
  std::vector<std::pair<std::string, std::string>> remote_env;  // passed with `env K=V`
  std::vector<std::string> remote_argv;  // absolute agent path, then its arguments
};

// Builds (does not run):
//   ssh -o BatchMode=yes -o ConnectTimeout=T [-p P] [-l U] [-i F] [-F CFG]
//       [-o StrictHostKeyChecking=S] [-o UserKnownHostsFile=K] HOST -- 'REMOTE'
// where REMOTE is `[env K=V ...] /abs/agent arg...`, every word ShellQuote'd, as one argv
// element. BatchMode makes a missing key fail at once instead of prompting.
// InvalidArgument when: host is empty, starts with '-' or contains whitespace or control
// characters; port is outside [0, 65535]; connect_timeout_s <= 0; strict_host_key_checking
// is not one of the values above; known_hosts_file contains whitespace or quotes (ssh would
// split it); remote_argv is empty; remote_argv[0] is not an absolute path or contains '='
// (env would take it for an assignment); an env name is not [A-Za-z_][A-Za-z0-9_]*.
StatusOr<std::vector<std::string>> SshCommand(const SshOptions& options);

}  // namespace ds::launcher
