// ds-plan: see runtime/planner/plan_command.h.
#include "runtime/planner/plan_command.h"

int main(int argc, char** argv) { return ds::planner::RunPlanCommand(argc, argv); }
