#include "runtime/planner/plan_command.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <sstream>
#include <string>

#include "parallel/expert/moe_summary.h"
#include "parallel/pipeline/pipe_summary.h"
#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/plan/link_bytes.h"
#include "runtime/plan/model_loader.h"
#include "runtime/plan/plan_summary.h"
#include "runtime/planner/auto_command.h"
#include "runtime/planner/fit_advice.h"
#include "runtime/planner/generation_summary.h"
#include "runtime/planner/plan_builder.h"

namespace ds::planner {
namespace {

struct Flags {
  std::string job;
  int world = 0;
  int stage = -1;  // -1: the job's
  bool json = false;
  bool dump = false;
  double host_memory_gib = 0;  // per node; 0: this machine's
  int ranks_per_node = 0;      // 0: all of them on one node
  bool auto_layout = false;    // --auto: rank every layout (auto_command.h)
  std::string node_slots;      // "2,2": ranks per node (ds-launch: from --hostfile)
  std::string host_of_node;    // "0,0": the machine of each node
  std::string rates;
  std::string intra_link, inter_link;  // --auto: "GBPS[@US]"
  int threads = 0;
  int top = 10;
};

StatusOr<std::string> RunAuto(const Flags& f) {
  AutoRequest q;
  q.job = f.job;
  if (!f.node_slots.empty()) {
    DS_ASSIGN_OR_RETURN(q.node_slots, ParseIntList(f.node_slots, "--node-slots"));
  } else if (f.world > 0) {
    q.node_slots = {f.world};
  }
  if (!f.host_of_node.empty()) {
    DS_ASSIGN_OR_RETURN(q.host_of_node, ParseIntList(f.host_of_node, "--host-of-node"));
    if (q.host_of_node.size() != q.node_slots.size())
      return InvalidArgumentError("--host-of-node names " + std::to_string(q.host_of_node.size()) +
                                  " nodes, --node-slots " + std::to_string(q.node_slots.size()));
  }
  if (!f.intra_link.empty()) {
    DS_ASSIGN_OR_RETURN(q.intra_link, ParseLinkRate(f.intra_link, "--intra-link"));
  }
  if (!f.inter_link.empty()) {
    DS_ASSIGN_OR_RETURN(q.inter_link, ParseLinkRate(f.inter_link, "--inter-link"));
  }
  q.link_source = "as given";
  q.threads = f.threads;
  q.rates = f.rates;
  q.host_memory_gib = f.host_memory_gib;
  q.json = f.json;
  q.top = f.top;
  return RunAutoPlan(q);
}

// --node-slots without --auto: the node of every world rank (ds-launch fills a node's slots with
// consecutive ranks); --world defaults to their sum and must match it.
StatusOr<std::vector<int>> NodeOfRank(Flags* f) {
  if (f->node_slots.empty()) return std::vector<int>();
  DS_ASSIGN_OR_RETURN(std::vector<int> slots, ParseIntList(f->node_slots, "--node-slots"));
  std::vector<int> node_of;
  for (size_t n = 0; n < slots.size(); ++n) node_of.insert(node_of.end(), slots[n], int(n));
  const int world = static_cast<int>(node_of.size());
  if (f->world > 0 && f->world != world)
    return InvalidArgumentError("--world " + std::to_string(f->world) + " but the nodes have " +
                                std::to_string(world) + " slots (--node-slots " + f->node_slots +
                                ")");
  f->world = world;
  return node_of;
}

StatusOr<std::string> Run(Flags f) {
  if (f.auto_layout) return RunAuto(f);
  DS_ASSIGN_OR_RETURN(const std::vector<int> node_of, NodeOfRank(&f));
  if (f.world <= 0)
    return InvalidArgumentError("--world is required (or --hostfile / --node-slots, or --auto)");
  DS_ASSIGN_OR_RETURN(config::JobConfig job, config::LoadJobConfig(f.job));
  if (f.stage >= 0) job.zero.stage = f.stage;
  DS_ASSIGN_OR_RETURN(plan::PlanConfig config, plan::PlanConfigFromJob(job));
  if (!node_of.empty()) {  // as ds-launch plans it (qgZ's first all-to-all inside a node)
    std::vector<int> slots(node_of.back() + 1, 0);
    for (int n : node_of) ++slots[n];
    config.node_slots = plan::UniformNodeSlots(slots);
  }
  DS_ASSIGN_OR_RETURN(Graph graph, plan::LoadModelGraph(job));
  auto topo = plan::TopologyFor(f.world, config);
  if (!topo.ok()) return topo.status().WithPrefix(f.job);
  auto plan = MakePlan(graph, *topo, config);
  if (!plan.ok()) return plan.status().WithPrefix(f.job);
  if (f.dump) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(*plan, &text);
    return text;
  }
  proto::PlanSummary summary = plan::SummarizePlan(*plan, f.job);
  if (!node_of.empty()) plan::AddLinkClasses(*plan, node_of, &summary);
  // A pipeline: per stage, and the whole model's parameter count.
  if (plan->stages_size() > 0) parallel::SummarizePipeline(*plan, &summary);
  if (!f.json) {
    const int64_t node = f.host_memory_gib > 0
                             ? static_cast<int64_t>(f.host_memory_gib * 1073741824.0)
                             : HostMemoryBytes();
    const int per_node = f.ranks_per_node > 0 ? f.ranks_per_node : f.world;
    std::string text = plan::FormatPlanSummary(summary) + plan::FormatLinkClasses(summary);
    if (summary.has_pipeline()) text += parallel::FormatPipelineSummary(summary);
    text += parallel::FormatMoeSummary(graph, *plan) + parallel::FormatUlyssesSummary(graph, *plan);
    text += FormatGenerationSummary(graph, config.tensor, node > 0 ? node / per_node : 0);
    text += FormatHybridEngine(graph, *plan, job.hybrid_engine.inference_tp_size,
                               job.hybrid_engine.tp_gather_partition_size);
    if (node <= 0) return text;
    DS_ASSIGN_OR_RETURN(std::string advice, FitAdvice(graph, config, f.world, node / per_node));
    return text + "\n" + advice;
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  auto s = google::protobuf::util::MessageToJsonString(summary, &json, options);
  if (!s.ok()) return InternalError("JSON: " + s.ToString());
  return json;
}

}  // namespace

int RunPlanCommand(int argc, char** argv, std::ostream& out, std::ostream& err) {
  Flags f;
  CLI::App app{
      "ds-plan: plan one optimizer step of a job and print its memory "
      "and traffic"};
  app.add_option("job", f.job, "job config (YAML or JSON)")->required();
  app.add_option("--world,-n", f.world, "world size (number of ranks)")->check(CLI::PositiveNumber);
  app.add_option("--stage", f.stage,
                 "override zero_optimization.stage (overlap_comm keeps the file's value)")
      ->check(CLI::Range(0, 3));
  app.add_flag("--json", f.json, "print the summary as JSON");
  app.add_option("--host-memory", f.host_memory_gib,
                 "host memory per node in GiB for the fit check (default: this machine's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--ranks-per-node", f.ranks_per_node,
                 "ranks sharing a node's memory (default: all of them)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--dump", f.dump, "print the whole plan (protobuf text format)");
  app.add_flag("--auto", f.auto_layout,
               "rank every layout that fits by predicted step time (the cost model)");
  app.add_option("--node-slots", f.node_slots,
                 "ranks per node, e.g. 2,2: the bytes each rank sends inside and between nodes "
                 "(ds-launch plan --hostfile fills it)");
  app.add_option("--host-of-node", f.host_of_node,
                 "--auto: the machine of each node, e.g. 0,0 for two nodes on one machine");
  app.add_option("--rates", f.rates, "--auto: the host's rate table (ds-worker calibrate)");
  app.add_option("--intra-link", f.intra_link,
                 "--auto: GB/s (and @latency us) between a node's ranks, where slower than the "
                 "table's");
  app.add_option("--inter-link", f.inter_link,
                 "--auto: GB/s (and @latency us) a rank sends to another node at (the table "
                 "knows only this host's loopback)");
  app.add_option("--threads", f.threads, "--auto: compute threads per rank")
      ->check(CLI::PositiveNumber);
  app.add_option("--top", f.top, "--auto: rows to print")->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err);
  }
  StatusOr<std::string> result = Run(f);
  if (!result.ok()) {
    err << "ds-plan: " << result.status().message() << "\n";
    return 1;
  }
  out << *result;
  return 0;
}

int RunPlanCommand(int argc, char** argv) {
  return RunPlanCommand(argc, argv, std::cout, std::cerr);
}

}  // namespace ds::planner
