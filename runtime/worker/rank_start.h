// How a launched rank starts: its own plan checked against the launcher's (CheckPlanHash), and
// the state it starts from (InitializeRank): on a restart with in-memory copies the agents'
// copies of the step the coordinator chose, at the same world size or, after an elastic job lost
// a node, cut anew from every old rank's copy (Trainer::RestoreResharded); else, or when any
// rank's copies cannot be used, the disk checkpoint or step 0, as the job says, saying so.
#pragma once

#include "runtime/base/status.h"
#include "runtime/config/job_config.h"
#include "runtime/worker/rank_env.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

// DS_PLAN_HASH, or for an elastic job DS_PLAN_HASHES "WORLD=HASH,...": the launcher's hash of
// this world's plan must be this rank's.
Status CheckPlanHash(const Trainer& trainer, int rank, int world);

// Every rank calls it (the copies' restore votes).
Status InitializeRank(Trainer* trainer, const RankEnv& env, const config::JobConfig& config);

}  // namespace ds::worker
