#include "launcher/slurm.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <string>

namespace ds::launcher {
namespace {

// Expansion joined by spaces, or "error: <message>".
std::string Expand(const std::string& list) {
  StatusOr<std::vector<std::string>> r = ExpandHostlist(list);
  if (!r.ok()) {
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    return "error: " + r.status().message();
  }
  std::string out;
  for (const std::string& h : *r) out += (out.empty() ? "" : " ") + h;
  return out;
}

TEST_CASE("Slurm: ExpandHostlist", "[launcher][slurm]") {
  SECTION("the brief's example") {
    CHECK(Expand("node[01-03,07],gpu-a[1-2]-ib,login1") ==
          "node01 node02 node03 node07 gpu-a1-ib gpu-a2-ib login1");
  }
  SECTION("plain names and single values") {
    CHECK(Expand("login1") == "login1");
    CHECK(Expand("a,b,c") == "a b c");
    CHECK(Expand("n[5]") == "n5");
    CHECK(Expand("n[3,1]") == "n3 n1");  // order as written
    CHECK(Expand("[1-2]") == "1 2");
    CHECK(Expand("  n[1-2]\n") == "n1 n2");  // surrounding whitespace ignored
  }
  SECTION("zero padding follows the width of the lower bound") {
    CHECK(Expand("n[08-11]") == "n08 n09 n10 n11");
    CHECK(Expand("n[8-11]") == "n8 n9 n10 n11");
    CHECK(Expand("n[001-002,10]") == "n001 n002 n10");
    CHECK(Expand("n[098-101]") == "n098 n099 n100 n101");
  }
  SECTION("several groups form a Cartesian product, leftmost slowest") {
    CHECK(Expand("r[1-2]n[1-2]") == "r1n1 r1n2 r2n1 r2n2");
    CHECK(Expand("r[1-2]n[1,3]-ib,x") == "r1n1-ib r1n3-ib r2n1-ib r2n3-ib x");
  }
  SECTION("duplicates are kept") { CHECK(Expand("a,a") == "a a"); }
  SECTION("errors") {
    CHECK(Expand("node[1-3") == "error: hostlist 'node[1-3': unbalanced '['");
    CHECK(Expand("node1-3]") == "error: hostlist 'node1-3]': unbalanced ']'");
    CHECK(Expand("n[1,[2]]") == "error: hostlist 'n[1,[2]]': nested '['");
    CHECK(Expand("n[5-3]") == "error: hostlist 'n[5-3]': reversed range '5-3'");
    CHECK(Expand("a,,b") == "error: hostlist 'a,,b': empty item");
    CHECK(Expand("a,") == "error: hostlist 'a,': empty item");
    CHECK(Expand(",a") == "error: hostlist ',a': empty item");
    CHECK(Expand("") == "error: hostlist '': empty host list");
    CHECK(Expand("  ") == "error: hostlist '  ': empty host list");
    CHECK(Expand("n[]") == "error: hostlist 'n[]': empty brackets '[]'");
    CHECK(Expand("n[1,]") == "error: hostlist 'n[1,]': empty entry in brackets");
    CHECK(Expand("n[-3]") == "error: hostlist 'n[-3]': empty number in brackets");
    CHECK(Expand("n[1-]") == "error: hostlist 'n[1-]': empty number in brackets");
    CHECK(Expand("n[a-c]") ==
          "error: hostlist 'n[a-c]': 'a' in brackets is not a number or lo-hi range");
    CHECK(Expand("n[1-2-3]").find("'2-3' in brackets is not a number") != std::string::npos);
    CHECK(Expand("a b") == "error: hostlist 'a b': whitespace inside the list");
    CHECK(Expand("n[1-9999999999]").find("expands to more than") != std::string::npos);
    CHECK(Expand("a[1-1024]b[1-1024]c[1-2]").find("expands to more than") != std::string::npos);
    CHECK(Expand("n[1234567890123456789]").find("is too long") != std::string::npos);
  }
}

// A fake environment for ReadSlurmEnv.
struct FakeEnv {
  std::map<std::string, std::string> vars;
  std::function<const char*(const char*)> Getenv() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

TEST_CASE("Slurm: ReadSlurmEnv", "[launcher][slurm]") {
  FakeEnv env;
  env.vars = {{"SLURM_JOB_ID", "4242"},
              {"SLURM_JOB_NUM_NODES", "3"},
              {"SLURM_JOB_NODELIST", "gpu[07-09]"},
              {"SLURM_NODEID", "1"}};

  SECTION("inside a task") {
    StatusOr<SlurmEnv> r = ReadSlurmEnv(env.Getenv());
    REQUIRE(r.ok());
    CHECK(r->job_id == "4242");
    CHECK(r->num_nodes == 3);
    CHECK(r->node_id == 1);
    CHECK(r->nodes == std::vector<std::string>{"gpu07", "gpu08", "gpu09"});
  }
  SECTION("older variable names are accepted") {
    env.vars.erase("SLURM_JOB_NUM_NODES");
    env.vars.erase("SLURM_JOB_NODELIST");
    env.vars.erase("SLURM_JOB_ID");
    env.vars["SLURM_NNODES"] = "2";
    env.vars["SLURM_NODELIST"] = "a,b";
    env.vars["SLURM_JOBID"] = "7";
    StatusOr<SlurmEnv> r = ReadSlurmEnv(env.Getenv());
    REQUIRE(r.ok());
    CHECK(r->nodes == std::vector<std::string>{"a", "b"});
    CHECK(r->job_id == "7");
  }
  SECTION("the JOB_ names win over the older ones") {
    env.vars["SLURM_NNODES"] = "1";
    env.vars["SLURM_NODELIST"] = "x";
    StatusOr<SlurmEnv> r = ReadSlurmEnv(env.Getenv());
    REQUIRE(r.ok());
    CHECK(r->num_nodes == 3);
  }
  SECTION("std::getenv fits the getenv parameter") {
    std::function<const char*(const char*)> real = &std::getenv;
    CHECK(real("DS_LAUNCHER_SURELY_UNSET_VARIABLE") == nullptr);
  }
  SECTION("outside an allocation") {
    StatusOr<SlurmEnv> r = ReadSlurmEnv([](const char*) -> const char* { return nullptr; });
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kFailedPrecondition);
    CHECK(r.status().message() ==
          "not inside a Slurm allocation: SLURM_JOB_ID is not set (start the job with sbatch "
          "or salloc, then launch inside it)");
  }
  SECTION("missing node count or list") {
    env.vars.erase("SLURM_JOB_NUM_NODES");
    CHECK(ReadSlurmEnv(env.Getenv()).status().message() ==
          "not inside a Slurm allocation: neither SLURM_JOB_NUM_NODES nor SLURM_NNODES is set");
    env.vars["SLURM_JOB_NUM_NODES"] = "3";
    env.vars["SLURM_JOB_NODELIST"] = "";  // empty counts as unset
    StatusOr<SlurmEnv> r = ReadSlurmEnv(env.Getenv());
    CHECK(r.status().code() == StatusCode::kFailedPrecondition);
    CHECK(r.status().message().find("SLURM_JOB_NODELIST nor SLURM_NODELIST") != std::string::npos);
  }
  SECTION("not inside an srun task") {
    env.vars.erase("SLURM_NODEID");
    StatusOr<SlurmEnv> r = ReadSlurmEnv(env.Getenv());
    CHECK(r.status().code() == StatusCode::kFailedPrecondition);
    CHECK(r.status().message() ==
          "SLURM_NODEID is not set in job 4242: run the agent as a task started by srun");
  }
  SECTION("bad values") {
    env.vars["SLURM_NODEID"] = "one";
    CHECK(ReadSlurmEnv(env.Getenv()).status().message() == "SLURM_NODEID='one' is not an integer");
    env.vars["SLURM_NODEID"] = "3";
    CHECK(ReadSlurmEnv(env.Getenv()).status().message() == "SLURM_NODEID=3 is outside [0, 3)");
    env.vars["SLURM_NODEID"] = "-1";
    CHECK(ReadSlurmEnv(env.Getenv()).status().code() == StatusCode::kInvalidArgument);
    env.vars["SLURM_NODEID"] = "0";
    env.vars["SLURM_JOB_NUM_NODES"] = "2";
    CHECK(ReadSlurmEnv(env.Getenv()).status().message() ==
          "SLURM_JOB_NODELIST='gpu[07-09]' names 3 node(s) but SLURM_JOB_NUM_NODES=2");
    env.vars["SLURM_JOB_NUM_NODES"] = "0";
    CHECK(ReadSlurmEnv(env.Getenv()).status().message() ==
          "SLURM_JOB_NUM_NODES=0 must be at least 1");
    env.vars["SLURM_JOB_NUM_NODES"] = "3";
    env.vars["SLURM_JOB_NODELIST"] = "gpu[07-09";
    CHECK(ReadSlurmEnv(env.Getenv()).status().message() ==
          "SLURM_JOB_NODELIST: hostlist 'gpu[07-09': unbalanced '['");
  }
}

TEST_CASE("Slurm: SrunCommand", "[launcher][slurm]") {
  SrunOptions o;
  o.num_nodes = 2;
  o.argv = {"/opt/ds/bin/ds-agent", "--coordinator=n1:29400"};

  SECTION("one agent per node, explicit ntasks, kill on bad exit") {
    StatusOr<std::vector<std::string>> r = SrunCommand(o);
    REQUIRE(r.ok());
    CHECK(*r == std::vector<std::string>{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                         "--kill-on-bad-exit=1", "--export=ALL",
                                         "/opt/ds/bin/ds-agent", "--coordinator=n1:29400"});
  }
  SECTION("overlap, extra args and env in order") {
    o.overlap = true;
    o.extra_args = {"--partition=gpu"};
    o.env = {{"DS_JOB", "7"}, {"NCCL_SOCKET_IFNAME", "eth0,eth1"}, {"EMPTY", ""}};
    o.argv = {"ds-agent"};
    StatusOr<std::vector<std::string>> r = SrunCommand(o);
    REQUIRE(r.ok());
    CHECK(*r == std::vector<std::string>{
                    "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                    "--kill-on-bad-exit=1", "--overlap", "--partition=gpu",
                    "--export=ALL,DS_JOB=7,\"NCCL_SOCKET_IFNAME=eth0,eth1\",EMPTY=", "ds-agent"});
  }
  SECTION("errors") {
    o.num_nodes = 0;
    CHECK(SrunCommand(o).status().message() == "srun: num_nodes must be at least 1, got 0");
    o.num_nodes = 1;
    o.argv = {};
    CHECK(SrunCommand(o).status().message() == "srun: no agent program given");
    o.argv = {"--help"};
    CHECK(SrunCommand(o).status().code() == StatusCode::kInvalidArgument);
    o.argv = {"/a"};
    o.env = {{"BAD-NAME", "1"}};
    CHECK(SrunCommand(o).status().message() ==
          "srun: 'BAD-NAME' is not a valid environment variable name");
    o.env = {{"1X", "1"}};
    CHECK_FALSE(SrunCommand(o).ok());
    o.env = {{"X", "it's"}};
    CHECK(SrunCommand(o).status().message() ==
          "srun: the value of X contains a quote, which srun --export cannot pass");
    o.env = {{"X", "say \"hi\""}};
    CHECK_FALSE(SrunCommand(o).ok());
  }
}

}  // namespace
}  // namespace ds::launcher
