#include "launcher/ssh_command.h"

#include <catch2/catch.hpp>
#include <string>

namespace ds::launcher {
namespace {

// Splits `line` into words the way a POSIX shell does for the subset ShellQuote emits:
// unquoted words of safe characters, '...' (all literal), "..." (no $ ` \ inside), blanks
// between words. Returns false on anything else, so a quoting bug cannot pass silently.
bool ShellSplit(const std::string& line, std::vector<std::string>* words) {
  words->clear();
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i == line.size()) break;
    std::string word;
    while (i < line.size() && line[i] != ' ') {
      char c = line[i];
      if (c == '\'' || c == '"') {
        size_t end = line.find(c, i + 1);
        if (end == std::string::npos) return false;
        std::string inner = line.substr(i + 1, end - i - 1);
        if (c == '"' && inner.find_first_of("$`\\") != std::string::npos) return false;
        word += inner;
        i = end + 1;
      } else {
        if (std::string("$`\\|&;<>()*?[]#~!{}\t\n").find(c) != std::string::npos) return false;
        word += c;
        ++i;
      }
    }
    words->push_back(word);
  }
  return true;
}

TEST_CASE("ShellQuote: safe words stay, others are single-quoted", "[launcher][ssh]") {
  CHECK(ShellQuote("ds-agent") == "ds-agent");
  CHECK(ShellQuote("/opt/ds/bin/ds-agent") == "/opt/ds/bin/ds-agent");
  CHECK(ShellQuote("--coordinator=10.0.0.1:29400") == "--coordinator=10.0.0.1:29400");
  CHECK(ShellQuote("") == "''");
  CHECK(ShellQuote("a b") == "'a b'");
  CHECK(ShellQuote("$HOME") == "'$HOME'");
  CHECK(ShellQuote("it's") == "'it'\"'\"'s'");
  CHECK(ShellQuote("'") == "''\"'\"''");
  CHECK(ShellQuote("a\nb") == "'a\nb'");
  CHECK(ShellQuote("~") == "'~'");
  CHECK(ShellQuote("x;rm -rf /") == "'x;rm -rf /'");
}

TEST_CASE("ShellQuote: every byte round-trips through shell word splitting", "[launcher][ssh]") {
  std::string all;
  for (int c = 1; c < 256; ++c) all += static_cast<char>(c);
  const std::vector<std::string> words = {
      "",          "plain",     "two words",  "'",          "''", "\"",
      "\\",        "a'b\"c",    "$(id)",      "`id`",       "*",  "#x",
      "tab\there", "new\nline", "trailing\\", "--flag=a b", all};
  std::string line;
  for (const std::string& w : words) line += (line.empty() ? "" : " ") + ShellQuote(w);
  std::vector<std::string> back;
  REQUIRE(ShellSplit(line, &back));
  CHECK(back == words);
}

TEST_CASE("SshCommand: minimal command", "[launcher][ssh]") {
  SshOptions o;
  o.host = "worker-1";
  o.remote_argv = {"/opt/ds/bin/ds-agent", "--node-rank=1"};
  StatusOr<std::vector<std::string>> r = SshCommand(o);
  REQUIRE(r.ok());
  CHECK(*r == std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                                       "worker-1", "--", "/opt/ds/bin/ds-agent --node-rank=1"});
}

TEST_CASE("SshCommand: every option, env and quoted arguments", "[launcher][ssh]") {
  SshOptions o;
  o.ssh = "/usr/bin/ssh";
  o.host = "10.0.0.2";
  o.port = 2222;
  o.user = "train";
  o.identity_file = "/keys/id ed25519";  // separate argv element: a space is fine
  o.ssh_config_file = "/lab/ssh_config";
  o.connect_timeout_s = 5;
  o.strict_host_key_checking = "accept-new";
  o.known_hosts_file = "/lab/known_hosts";
  o.remote_env = {{"DS_COORDINATOR", "10.0.0.1:29400"}, {"NCCL_DEBUG", "INFO WARN"}, {"EMPTY", ""}};
  o.remote_argv = {"/opt/ds path/ds-agent", "--name=it's", "$HOME"};
  StatusOr<std::vector<std::string>> r = SshCommand(o);
  REQUIRE(r.ok());
  const std::string remote =
      "env DS_COORDINATOR=10.0.0.1:29400 'NCCL_DEBUG=INFO WARN' EMPTY= "
      "'/opt/ds path/ds-agent' '--name=it'\"'\"'s' '$HOME'";
  CHECK(*r == std::vector<std::string>{"/usr/bin/ssh",
                                       "-o",
                                       "BatchMode=yes",
                                       "-o",
                                       "ConnectTimeout=5",
                                       "-p",
                                       "2222",
                                       "-l",
                                       "train",
                                       "-i",
                                       "/keys/id ed25519",
                                       "-F",
                                       "/lab/ssh_config",
                                       "-o",
                                       "StrictHostKeyChecking=accept-new",
                                       "-o",
                                       "UserKnownHostsFile=/lab/known_hosts",
                                       "10.0.0.2",
                                       "--",
                                       remote});
  // The remote shell sees exactly the intended words.
  std::vector<std::string> words;
  REQUIRE(ShellSplit(r->back(), &words));
  CHECK(words == std::vector<std::string>{"env", "DS_COORDINATOR=10.0.0.1:29400",
                                          "NCCL_DEBUG=INFO WARN", "EMPTY=", "/opt/ds path/ds-agent",
                                          "--name=it's", "$HOME"});
}

TEST_CASE("SshCommand: strict_host_key_checking values", "[launcher][ssh]") {
  SshOptions o;
  o.host = "h";
  o.remote_argv = {"/a"};
  for (const char* v : {"yes", "no", "accept-new"}) {
    o.strict_host_key_checking = v;
    StatusOr<std::vector<std::string>> r = SshCommand(o);
    REQUIRE(r.ok());
    CHECK((*r)[6] == std::string("StrictHostKeyChecking=") + v);
  }
  o.strict_host_key_checking = "ask";
  CHECK(SshCommand(o).status().message() ==
        "ssh: strict_host_key_checking must be yes, no or accept-new, got 'ask'");
}

TEST_CASE("SshCommand: errors", "[launcher][ssh]") {
  SshOptions o;
  o.host = "h";
  o.remote_argv = {"/a"};
  auto error = [&o]() {
    StatusOr<std::vector<std::string>> r = SshCommand(o);
    if (r.ok()) return std::string("ok");
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    return r.status().message();
  };
  SECTION("program must be absolute") {
    o.remote_argv = {"ds-agent", "--x"};
    CHECK(error() ==
          "ssh: remote program 'ds-agent' must be an absolute path (the remote PATH is minimal "
          "and rc files are not relied on)");
    o.remote_argv = {"./ds-agent"};
    CHECK(error().find("must be an absolute path") != std::string::npos);
    o.remote_argv = {""};
    CHECK(error().find("must be an absolute path") != std::string::npos);
    o.remote_argv = {};
    CHECK(error() == "ssh: no remote program given");
    o.remote_argv = {"/opt/a=b/agent"};
    CHECK(error().find("contains '='") != std::string::npos);
  }
  SECTION("host") {
    o.host = "";
    CHECK(error() == "ssh: no host given");
    o.host = "-oProxyCommand=sh";
    CHECK(error() ==
          "ssh: host '-oProxyCommand=sh' starts with '-' and would be read as an ssh "
          "option");
    o.host = "a b";
    CHECK(error().find("contains whitespace") != std::string::npos);
  }
  SECTION("numbers") {
    o.port = 65536;
    CHECK(error().find("ssh: port 65536 for host 'h'") == 0);
    o.port = -1;
    CHECK(error() != "ok");
    o.port = 65535;
    CHECK(error() == "ok");
    o.connect_timeout_s = 0;
    CHECK(error() == "ssh: connect_timeout_s must be positive, got 0");
  }
  SECTION("env names and known_hosts path") {
    o.remote_env = {{"A B", "1"}};
    CHECK(error() == "ssh: 'A B' is not a valid environment variable name");
    o.remote_env = {{"", "1"}};
    CHECK(error() != "ok");
    o.remote_env = {{"_OK1", "v"}};
    CHECK(error() == "ok");
    o.known_hosts_file = "/a b/known_hosts";
    CHECK(error().find("known_hosts_file") != std::string::npos);
  }
}

}  // namespace
}  // namespace ds::launcher
