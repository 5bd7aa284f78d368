// ds-plan: see runtime/plan/plan_command.h.
#include "runtime/plan/plan_command.h"

int main(int argc, char** argv) { return ds::plan::RunPlanCommand(argc, argv); }
