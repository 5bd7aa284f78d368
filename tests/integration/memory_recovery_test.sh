#!/usr/bin/env bash
# Recovery from in-memory copies through ds-launch, ds-agent and ds-worker as real processes on
# loopback (2 nodes x 2 slots, 127.0.0.1 and 127.0.0.2), with fault_tolerance.in_memory_interval
# 1 and no checkpoint directory at all: a worker SIGKILLed mid-run restarts the round
# (--max_restarts 1), every rank takes its state back from the agents' stores, and the job ends
# on the failure-free run's per-step losses (every step's rows, the replayed ones too). Then the
# same with interval 50 beside a disk checkpoint every 20 steps, killed before the first copy:
# the restart says no copy is held and resumes from the disk. And three kills of random ranks in
# one run: three restarts from memory, still on the failure-free curve. Every wait is bounded.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
BASE=${TEST_TMPDIR:-$(mktemp -d)}/memcopy
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
source "$(dirname "$0")/launch_helpers.sh"  # pass, fail, wait_for, exit_of, no_leftovers, ...
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/hosts"
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1

job() {  # job DIR STEPS [EXTRA]: ZeRO-1 data parallelism, dropout on (the RNG must resume too)
  mkdir -p "$1"
  cat > "$1/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
zero_optimization: {stage: 1}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10, dropout: 0.1}
data: {train: $BASE/data/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: $2}
monitor: {log_interval: 100, csv: $1/metrics.csv}
device: {threads: 1}
${3:-}
YAML
}
launch() {  # launch DIR ARGS...: runs ds-launch in the background, output in DIR/out
  local d=$1; shift
  "$LAUNCH" "$d/job.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 --node_timeout 30 --grace 1 "$@" > "$d/out" 2>&1 &
  echo $! > "$d/pid"
}
# Every row of the run in DIR equals the failure-free run's row of its step (step, loss, lr,
# grad norm); prints the number of rows compared.
same_curve() {  # same_curve DIR REFERENCE_DIR
  awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $2 "," $3 "," $4; next }
           FNR > 1 { n++; if (!($1 in ref) || ref[$1] != $2 "," $3 "," $4) { bad++; if (bad < 4) print "step " $1 ": " $2 "," $3 "," $4 " vs " ref[$1] > "/dev/stderr" } }
           END { print n + 0; exit bad > 0 }' "$2/metrics.csv" "$1/metrics.csv"
}

STEPS=1500
# --- the failure-free run ---
REF=$BASE/reference; job "$REF" $STEPS "fault_tolerance: {in_memory_interval: 1}"
launch "$REF"
exit_of "$REF" 300
[[ $rc == 0 ]] && pass "reference: ds-launch exits 0" || { fail "reference: exit $rc"; tail -20 "$REF/out"; }
grep -qE "in-memory copies \(rank 0\): $STEPS of [0-9.]+ MiB kept on this node, $STEPS sent to 1 other node" "$REF/out" \
  && pass "reference: rank 0 kept a copy every step on its node and sent each to its buddy" \
  || { fail "reference: no copy summary"; grep -m3 "in-memory" "$REF/out"; }

# --- SIGKILL of rank 3 past step 300: the round restarts from the in-memory copies ---
D=$BASE/killed; job "$D" $STEPS "fault_tolerance: {in_memory_interval: 1}"
launch "$D" --max_restarts 1
wait_for 120 past "$D" 300 || fail "killed: the run did not reach step 300"
killed_at=$(last_step "$D")
victim=$(rank_pid 3)
t_kill=$(date +%s.%N)
kill -KILL "$victim"
sleep 0.5  # the other ranks block in the step's collectives: no row comes until the restart
rows_at_kill=$(wc -l < "$D/metrics.csv")
more_rows() { (($(wc -l < "$D/metrics.csv") > rows_at_kill)); }
wait_for 60 more_rows || fail "killed: no step after the restart"
t_step=$(date +%s.%N)
resumed=$(grep -o "resuming from the in-memory copies of step [0-9]*" "$D/out" | awk '{print $NF}' | head -1)
echo "killed at step ~$killed_at, resumed from step ${resumed:-?}; kill -> the next step's row in $(awk -v a="$t_kill" -v b="$t_step" 'BEGIN { printf "%.2f", b - a }') s (polled every 0.1 s)"
exit_of "$D" 300
[[ $rc == 0 ]] && pass "killed: the job succeeds after 1 restart" || { fail "killed: exit $rc"; tail -20 "$D/out"; }
grep -q "succeeded.*1 restart" "$D/out" || fail "killed: not one restart"
# One copy in flight per rank: a rank killed while its copy of step k-1 is on the wire still
# finished k-2's, so the job loses at most 2 steps from the last one rank 0 had logged.
[[ -n $resumed ]] && ((resumed >= killed_at - 2)) \
  && pass "killed: resumed from step $resumed; rank 0 had logged step $killed_at" \
  || fail "killed: resumed from '${resumed:-none}', killed at ~$killed_at"
n=$(grep -c "resumed from the in-memory copy of step ${resumed:-x} .*no disk read" "$D/out")
[[ $n == 4 ]] && pass "killed: all 4 ranks took their state from memory" || { fail "killed: $n ranks resumed from memory"; grep -m4 "memory" "$D/out"; }
rows=$(same_curve "$D" "$REF") && pass "killed: all $rows rows on the failure-free curve (replayed steps included)" \
  || fail "killed: the curve left the failure-free one"
((rows >= STEPS)) && echo "  $((rows - STEPS)) step(s) replayed" || fail "killed: only $rows rows"
no_leftovers "$D" "killed" 10

# --- repeated failures (the goodput benchmark's correctness, tools/bench/goodput.sh): a random
# rank SIGKILLed past steps 300, 600 and 900; the job ends on the failure-free curve ---
D=$BASE/repeated; job "$D" $STEPS "fault_tolerance: {in_memory_interval: 1}"
launch "$D" --max_restarts 3
for at in 300 600 900; do
  wait_for 120 past "$D" $at || fail "repeated: the run did not reach step $at"
  victim=$(rank_pid $((RANDOM % 4)))
  [[ -n $victim ]] && kill -KILL "$victim" || fail "repeated: no rank to kill past step $at"
  sleep 1
done
exit_of "$D" 300
[[ $rc == 0 ]] && grep -q "succeeded.*3 restart" "$D/out" && pass "repeated: the job succeeds after 3 restarts" \
  || { fail "repeated: exit $rc"; grep -m3 "restart" "$D/out"; }
n=$(grep -c "resumed from the in-memory copy of step .*no disk read" "$D/out")
[[ $n == 12 ]] && pass "repeated: each restart's 4 ranks took their state from memory" || fail "repeated: $n ranks resumed from memory"
rows=$(same_curve "$D" "$REF") && pass "repeated: all $rows rows on the failure-free curve" \
  || fail "repeated: the curve left the failure-free one"
no_leftovers "$D" "repeated" 10

# --- killed before any copy (interval 500, a disk checkpoint every 100): resumes from the disk ---
D=$BASE/early; job "$D" $STEPS "fault_tolerance: {in_memory_interval: 500}
checkpoint: {dir: $BASE/early/ckpt, save_interval: 100}"
launch "$D" --max_restarts 1
wait_for 120 past "$D" 250 || fail "early: the run did not reach step 250"
kill -KILL "$(rank_pid 1)"
exit_of "$D" 300
[[ $rc == 0 ]] && pass "early: the job succeeds after 1 restart" || { fail "early: exit $rc"; tail -20 "$D/out"; }
grep -q "no in-memory copy is held" "$D/out" && grep -q "loaded .*ckpt" "$D/out" \
  && pass "early: says no copy is held and loads the disk checkpoint" \
  || { fail "early: no fallback lines"; grep -m4 -E "memory|ckpt" "$D/out"; }
no_leftovers "$D" "early" 10

echo "memory_recovery_test: $fails failure(s)"
((fails == 0))
