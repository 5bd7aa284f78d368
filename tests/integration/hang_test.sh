#!/usr/bin/env bash
# Hang diagnosis through ds-launch, ds-agent and ds-worker as real processes on loopback (2 nodes
# x 2 slots, 127.0.0.1 and 127.0.0.2): a rank that sleeps inside a compute instruction (the
# DS_TEST_HANG hook) and a rank stopped with SIGSTOP. Each must end the job with one report
# naming the right rank, its instruction and where the others wait, within the printed deadline
# + 5 s, with the rank's thread stacks, and leave no process behind. Every wait is bounded.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
BASE=${TEST_TMPDIR:-$(mktemp -d)}/hang
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
source "$(dirname "$0")/launch_helpers.sh"  # pass, fail, wait_for, exit_of, no_leftovers, ...
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/hosts"
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1

job() {  # job DIR STEPS [EXTRA]: a data-parallel job whose hang deadline floor is 3 s
  mkdir -p "$1"
  cat > "$1/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10}
training: {train_iters: $2}
monitor: {log_interval: 50}
device: {threads: 1}
fault_tolerance: {hang_timeout: auto, hang_timeout_min: 3}
${3:-}
YAML
}
launch() {  # launch DIR ARGS...: runs ds-launch in the background, output in DIR/out
  local d=$1; shift
  "$LAUNCH" "$d/job.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 --node_timeout 30 --grace 1 "$@" > "$d/out" 2>&1 &
  echo $! > "$d/pid"
}
# The report's "no rank moved for X s (deadline Y s": X within Y + 5 s.
in_time() {  # in_time DIR NAME
  local line; line=$(grep -o "no rank moved for [0-9.]* s (deadline [0-9.]* s" "$1/out" | head -1)
  local x y; x=$(echo "$line" | awk '{print $5}'); y=$(echo "$line" | awk '{print $8}')
  if [[ -n $x && -n $y ]] && awk -v x="$x" -v y="$y" 'BEGIN { exit !(x <= y + 5) }'; then
    pass "$2: named after $x s, deadline $y s"
  else fail "$2: no timely report ($line)"; tail -20 "$1/out"; fi
}

# --- a rank that sleeps inside its FORWARD of step 3000 (seconds in: the deadline is measured by then) ---
D=$BASE/sleeper; job "$D" 100000
DS_TEST_HANG=2:3000:FORWARD launch "$D"
exit_of "$D" 120
[[ $rc == 1 ]] && pass "sleeping rank: ds-launch exits 1" || { fail "sleeping rank: exit $rc"; tail -20 "$D/out"; }
grep -q "hang deadline now" "$D/out" && pass "sleeping rank: the measured deadline is printed" \
  || fail "sleeping rank: no deadline line"
grep -q "rank 2 on 127.0.0.2 stands at step 3000, instruction [0-9]* FORWARD" "$D/out" \
  && pass "sleeping rank: rank 2 and its FORWARD named" || { fail "sleeping rank: not named"; grep -m3 "hang" "$D/out"; }
grep -qE "ranks 0, 1, 3 wait at step 3000, instruction [0-9]+ [A-Z_]+ on group " "$D/out" \
  && pass "sleeping rank: where the others wait, with the group" || { fail "sleeping rank: no waiting ranks"; grep -m3 "hang" "$D/out"; }
grep -q "rank 2 threads:" "$D/out" && grep -qiE "HangHere|PlanBeacon|nanosleep|sleep" "$D/out" \
  && pass "sleeping rank: its stacks show the sleep" || { fail "sleeping rank: no stacks"; grep -A5 "threads:" "$D/out" | head; }
in_time "$D" "sleeping rank"
no_leftovers "$D" "sleeping rank" 10

# --- a rank stopped with SIGSTOP ---
D=$BASE/stopped; job "$D" 100000
launch "$D"
wait_for 60 all_running || fail "stopped: ranks not running"
sleep 3  # past the warm-up: the measured deadline
positions=$("$LAUNCH" status 2>/dev/null | grep -cE "^[0-9]+ +127\.0\.0\.[12] .*RUNNING.* [0-9]+ [A-Z_]{3,}( [a-z][a-z0-9.]*)?( \([0-9.]+ s\))?$")
[[ $positions == 4 ]] && pass "ds-launch status: every rank's instruction shown" \
  || { fail "ds-launch status: $positions ranks with a position"; "$LAUNCH" status | tail -6; }
victim=$(rank_pid 1)
kill -STOP "$victim"
exit_of "$D" 120
[[ $rc == 1 ]] && pass "SIGSTOP: ds-launch exits 1" || { fail "SIGSTOP: exit $rc"; tail -20 "$D/out"; }
grep -qE "rank 1 on 127.0.0.1 stands at step [0-9]+, instruction [0-9]+ [A-Z_]+.* and sent no report" "$D/out" \
  && pass "SIGSTOP: rank 1 named as silent" || { fail "SIGSTOP: rank 1 not named"; grep -m3 "hang" "$D/out"; }
grep -q "rank 1 threads:" "$D/out" && pass "SIGSTOP: its stacks reported" \
  || { fail "SIGSTOP: no stacks section"; grep -A3 "first failure" "$D/out"; }
in_time "$D" "SIGSTOP"
kill -CONT "$victim" 2>/dev/null
no_leftovers "$D" "SIGSTOP" 10

# --- a pipeline (pp 2 x dp 2): rank 3 (stage 1) sleeps in a FORWARD. Ranks are compared within
# their stage: rank 3 is named, its stage peer is not; its pipeline neighbour, blocked on rank 3's
# gradient behind its own stage peer, may be named beside it ---
D=$BASE/pipeline; job "$D" 100000 "parallel: {pipeline: 2}
gradient_accumulation_steps: 2"
DS_TEST_HANG=3:1500:FORWARD launch "$D"
exit_of "$D" 120
[[ $rc == 1 ]] && pass "pipeline: ds-launch exits 1" || { fail "pipeline: exit $rc"; tail -20 "$D/out"; }
grep -qE "rank 3 on 127.0.0.2 stands at step 1500, instruction [0-9]+ FORWARD" "$D/out" \
  && ! grep -qE "hang: .*rank 2 on 127.0.0.2 stands at" "$D/out" \
  && pass "pipeline: rank 3 named in its FORWARD, its stage peer not" || { fail "pipeline: not named"; grep -m2 "hang:" "$D/out"; }
in_time "$D" "pipeline"
no_leftovers "$D" "pipeline" 10

echo "hang_test: $fails failure(s)"
((fails == 0))
