// The allocation ds-launch lays a job out on without a hostfile: nodes, ranks and CPUs per node.
#include "launcher/slurm_allocation.h"

#include <catch2/catch.hpp>
#include <map>

namespace ds::launcher {
namespace {

TEST_CASE("Slurm per-node counts expand", "[launcher][slurm]") {
  CHECK(*ExpandPerNodeCounts("2") == std::vector<int>{2});
  CHECK(*ExpandPerNodeCounts("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(*ExpandPerNodeCounts("4,8(x2)") == std::vector<int>{4, 8, 8});
  for (const char* bad : {"", "0", "2(x0)", "2(3)", "2,,1", "a", "2(x2", "-1", "2(x)"}) {
    INFO(bad);
    CHECK_FALSE(ExpandPerNodeCounts(bad).ok());
  }
}

TEST_CASE("ReadSlurmAllocation: nodes, ranks and CPUs per node", "[launcher][slurm]") {
  std::map<std::string, std::string> env = {{"SLURM_JOB_ID", "17"},
                                            {"SLURM_JOB_NODELIST", "n[1-2],gpu7"},
                                            {"SLURM_TASKS_PER_NODE", "2(x2),4"},
                                            {"SLURM_JOB_CPUS_PER_NODE", "8(x3)"}};
  auto get = [&env](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto a = ReadSlurmAllocation(get);
  REQUIRE(a.ok());
  CHECK(a->job_id == "17");
  CHECK(a->nodes == std::vector<std::string>{"n1", "n2", "gpu7"});
  CHECK(a->tasks == std::vector<int>{2, 2, 4});
  CHECK(a->cpus == std::vector<int>{8, 8, 8});
  env["SLURM_TASKS_PER_NODE"] = "2(x2)";
  CHECK(ReadSlurmAllocation(get).status().message().find("counts 2 node(s)") != std::string::npos);
  env.erase("SLURM_TASKS_PER_NODE");
  CHECK(ReadSlurmAllocation(get).status().message().find("--ntasks-per-node") != std::string::npos);
  env.clear();
  CHECK(ReadSlurmAllocation(get).status().message().find("not inside a Slurm allocation") !=
        std::string::npos);
}

}  // namespace
}  // namespace ds::launcher
