#include "launcher/ssh_command.h"

#include <cstring>

namespace ds::launcher {
namespace {

// The characters Python's shlex.quote leaves unquoted: none is special to a POSIX shell.
bool IsSafeShellChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return c != '\0' && std::strchr("@%+=:,./_-", c) != nullptr;
}

bool IsEnvName(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    bool ok =
        c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Whitespace, control characters and DEL.
bool HasSpaceOrControl(const std::string& s) {
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return true;
  }
  return false;
}

Status CheckOptions(const SshOptions& o) {
  if (o.host.empty()) return InvalidArgumentError("ssh: no host given");
  if (o.host[0] == '-') {
    return InvalidArgumentError("ssh: host '" + o.host +
                                "' starts with '-' and would be read as an ssh option");
  }
  if (HasSpaceOrControl(o.host)) {
    return InvalidArgumentError("ssh: host '" + o.host +
                                "' contains whitespace or control characters");
  }
  if (o.port < 0 || o.port > 65535) {
    return InvalidArgumentError("ssh: port " + std::to_string(o.port) + " for host '" + o.host +
                                "' is outside [1, 65535] (0 = default)");
  }
  if (o.connect_timeout_s <= 0) {
    return InvalidArgumentError("ssh: connect_timeout_s must be positive, got " +
                                std::to_string(o.connect_timeout_s));
  }
  const std::string& shkc = o.strict_host_key_checking;
  if (!shkc.empty() && shkc != "yes" && shkc != "no" && shkc != "accept-new") {
    return InvalidArgumentError(
        "ssh: strict_host_key_checking must be yes, no or accept-new, "
        "got '" +
        shkc + "'");
  }
  if (HasSpaceOrControl(o.known_hosts_file) ||
      o.known_hosts_file.find_first_of("'\"") != std::string::npos) {
    return InvalidArgumentError("ssh: known_hosts_file '" + o.known_hosts_file +
                                "' contains whitespace or quotes, which ssh -o would split");
  }
  if (o.remote_argv.empty()) return InvalidArgumentError("ssh: no remote program given");
  const std::string& program = o.remote_argv[0];
  if (program.empty() || program[0] != '/') {
    return InvalidArgumentError("ssh: remote program '" + program +
                                "' must be an absolute path (the remote PATH is minimal and "
                                "rc files are not relied on)");
  }
  if (program.find('=') != std::string::npos) {
    return InvalidArgumentError("ssh: remote program '" + program +
                                "' contains '=', which env would read as an assignment");
  }
  for (const auto& kv : o.remote_env) {
    if (!IsEnvName(kv.first)) {
      return InvalidArgumentError("ssh: '" + kv.first +
                                  "' is not a valid environment variable name");
    }
  }
  return OkStatus();
}

}  // namespace

std::string ShellQuote(const std::string& word) {
  if (word.empty()) return "''";
  bool safe = true;
  for (char c : word) safe = safe && IsSafeShellChar(c);
  if (safe) return word;
  // Inside '...' every byte is literal except ' itself, which ends the quoting; write it
  // as '"'"' (close, a double-quoted ', reopen).
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\"'\"'";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

StatusOr<std::vector<std::string>> SshCommand(const SshOptions& options) {
  if (Status s = CheckOptions(options); !s.ok()) return s;
  std::vector<std::string> argv = {options.ssh, "-o", "BatchMode=yes", "-o",
                                   "ConnectTimeout=" + std::to_string(options.connect_timeout_s)};
  if (options.port != 0) argv.insert(argv.end(), {"-p", std::to_string(options.port)});
  if (!options.user.empty()) argv.insert(argv.end(), {"-l", options.user});
  if (!options.identity_file.empty()) argv.insert(argv.end(), {"-i", options.identity_file});
  if (!options.ssh_config_file.empty()) argv.insert(argv.end(), {"-F", options.ssh_config_file});
  if (!options.strict_host_key_checking.empty()) {
    argv.insert(argv.end(), {"-o", "StrictHostKeyChecking=" + options.strict_host_key_checking});
  }
  if (!options.known_hosts_file.empty()) {
    argv.insert(argv.end(), {"-o", "UserKnownHostsFile=" + options.known_hosts_file});
  }
  // `--` after the host ends ssh's option parsing (ssh resumes it after the host name), so
  // the remote command can never be taken for an option.
  argv.insert(argv.end(), {options.host, "--"});

  std::string remote;
  if (!options.remote_env.empty()) {
    remote = "env";
    for (const auto& [name, value] : options.remote_env)
      remote += " " + ShellQuote(name + "=" + value);
  }
  for (const std::string& word : options.remote_argv) {
    if (!remote.empty()) remote += ' ';
    remote += ShellQuote(word);
  }
  argv.push_back(std::move(remote));
  return argv;
}

}  // namespace ds::launcher
