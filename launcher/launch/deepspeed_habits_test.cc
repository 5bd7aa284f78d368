// DeepSpeed's launcher habits mapped onto ds-launch: master address and port, the default
// hostfile, launcher names, and .deepspeed_env (home, then the working directory; DS_ENV_FILE).
#include "launcher/launch/deepspeed_habits.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

namespace ds::launcher {
namespace {

std::string Dir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string d = std::string(t ? t : "/tmp") + "/" + name;
  mkdir(d.c_str(), 0700);
  return d;
}

TEST_CASE("--master_addr / --master_port give the coordinator's address", "[launcher]") {
  CHECK(*CoordinatorFromMaster("", "10.0.0.1", 0) == "10.0.0.1:29500");
  CHECK(*CoordinatorFromMaster("", "node1", 4000) == "node1:4000");
  CHECK(*CoordinatorFromMaster("", "fe80::1", 4000) == "[fe80::1]:4000");
  CHECK(*CoordinatorFromMaster("h:1", "", 0) == "h:1");
  CHECK(CoordinatorFromMaster("", "", 0)->empty());
  CHECK(CoordinatorFromMaster("h:1", "h", 0).status().message().find("give one") !=
        std::string::npos);
  CHECK(CoordinatorFromMaster("", "", 4000).status().message().find("needs --master_addr") !=
        std::string::npos);
}

TEST_CASE("--launcher names: pdsh runs over ssh, MPI launchers are refused", "[launcher]") {
  std::string note;
  CHECK(*BackendForLauncher("local", &note) == "local");
  CHECK(*BackendForLauncher("slurm", &note) == "slurm");
  CHECK(note.empty());
  CHECK(*BackendForLauncher("pdsh", &note) == "ssh");
  CHECK(note.find("over ssh") != std::string::npos);
  for (const char* mpi : {"openmpi", "mvapich", "impi", "mpich"}) {
    auto refused = BackendForLauncher(mpi, &note);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().message().find("needs no MPI launcher") != std::string::npos);
  }
  CHECK(BackendForLauncher("torchrun", &note).status().message().find("got \"torchrun\"") !=
        std::string::npos);
}

TEST_CASE("The hostfile defaults to DeepSpeed's /job/hostfile when it exists", "[launcher]") {
  const std::string d = Dir("hostfile_default");
  const std::string job = d + "/hostfile";
  CHECK(HostfileOrDefault("", job).empty());  // absent: this machine
  std::ofstream(job) << "127.0.0.1 slots=2\n";
  CHECK(HostfileOrDefault("", job) == job);
  CHECK(HostfileOrDefault("mine", job) == "mine");
}

TEST_CASE(".deepspeed_env: home then the working directory, or DS_ENV_FILE", "[launcher]") {
  const std::string home = Dir("env_home"), cwd = Dir("env_cwd");
  std::ofstream(home + "/.deepspeed_env") << "# cluster settings\nNCCL_IB_DISABLE=1\nA=home\n\n";
  std::ofstream(cwd + "/.deepspeed_env") << "A=cwd=1\nPYTHONPATH=/opt/x\r\n";
  auto env = LoadDeepSpeedEnv(home, cwd, nullptr);
  REQUIRE(env.ok());
  CHECK(env->vars.at("NCCL_IB_DISABLE") == "1");
  CHECK(env->vars.at("A") == "cwd=1");  // the working directory's wins; the first '=' splits
  CHECK(env->vars.at("PYTHONPATH") == "/opt/x");
  CHECK(env->files.size() == 2);
  CHECK(LoadDeepSpeedEnv(home, home, nullptr)->files.size() == 1);

  std::ofstream(cwd + "/custom_env") << "ONLY=this\n";
  auto custom = LoadDeepSpeedEnv(home, cwd, "custom_env");
  REQUIRE(custom.ok());
  CHECK(custom->vars == std::map<std::string, std::string>{{"ONLY", "this"}});
  auto absolute = LoadDeepSpeedEnv("", "", (cwd + "/custom_env").c_str());
  REQUIRE(absolute.ok());
  CHECK(absolute->vars.at("ONLY") == "this");
  CHECK(LoadDeepSpeedEnv("", "", "/nonexistent/env").status().message().find("DS_ENV_FILE") !=
        std::string::npos);

  std::ofstream(cwd + "/bad_env") << "GOOD=1\nexport BAD\n";
  auto bad = LoadDeepSpeedEnv(home, cwd, "bad_env");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("bad_env:2") != std::string::npos);
}

}  // namespace
}  // namespace ds::launcher
