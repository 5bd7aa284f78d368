#!/usr/bin/env bash
# An elastic job through ds-launch (2 nodes x 2 slots on loopback, --nnodes 1:2, --max_restarts
# 1, fault_tolerance.in_memory_interval 1, no checkpoint directory, the batch from an elasticity
# block): node 1's agent is SIGKILLed
# with its workers mid-run; the job goes on with node 0 alone at world 2, each rank cutting its
# ZeRO-1 part out of the 4 old ranks' in-memory copies (node 0's agent holds node 1's as its
# buddy), and every step after the restart stays on the failure-free 4-rank curve (the same
# global batch: 2 micro-batches per rank instead of 1; only the reduction order differs). Node 1
# then comes back (an agent started by hand) and is admitted at once: world 4 again, resumed from
# the 2 ranks' copies, still on the curve. Then
# the bad inputs: --nnodes MIN above MAX, MAX above the nodes given, a world the batch does not
# divide. Every wait is bounded; no process is left.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
BASE=${TEST_TMPDIR:-$(mktemp -d)}/elastic
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
source "$(dirname "$0")/launch_helpers.sh"  # pass, fail, wait_for, exit_of, no_leftovers, ...
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/hosts"
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1

job() {  # job DIR STEPS [BATCH]
  mkdir -p "$1"
  cat > "$1/job.yaml" <<YAML
train_batch_size: ${3:-16}
train_micro_batch_size_per_gpu: 4
optimizer: {type: AdamW, params: {lr: 0.003}}
zero_optimization: {stage: 1}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: $2}
monitor: {log_interval: 100, csv: $1/metrics.csv}
device: {threads: 1}
fault_tolerance: {in_memory_interval: 1}
YAML
}
launch() {  # launch DIR ARGS...
  local d=$1; shift
  "$LAUNCH" "$d/job.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 --node_timeout 2 --grace 1 "$@" > "$d/out" 2>&1 &
  echo $! > "$d/pid"
}

STEPS=1200
REF=$BASE/reference; job "$REF" $STEPS
launch "$REF"
exit_of "$REF" 300
[[ $rc == 0 ]] && pass "reference: 4 ranks, exit 0" || { fail "reference: exit $rc"; tail -20 "$REF/out"; }

# The shrinking job takes its batch from DeepSpeed's elasticity block: 16 sequences, micro 4, at
# 2 or 4 ranks (the reference's batch at world 4; micro 4 x 2 accumulation steps at world 2).
D=$BASE/shrink; job "$D" $STEPS
sed -i '/^train_batch_size/d; /^train_micro_batch_size_per_gpu/d' "$D/job.yaml"
echo "elasticity: {enabled: true, max_train_batch_size: 16, micro_batch_sizes: [4], min_gpus: 2, max_gpus: 4}" >> "$D/job.yaml"
launch "$D" --nnodes 1:2 --max_restarts 1 --rdzv_last_call 3
wait_for 120 past "$D" 300 || fail "shrink: the run did not reach step 300"
agent=$(pgrep -f "ds-agent.*--node_name 127.0.0.2" | head -1)
workers=$(pgrep -P "$agent" | paste -sd' ')
kill -KILL "$agent" $workers
# Then the node comes back: its agent, started by hand as a user would (the job directory's
# coordinator address and token), asks to join the running job and is admitted at once: round 3
# at world 4, every rank cutting its part out of the 2 ranks' copies (node 1's two ranks read
# theirs from node 0's agent), not counted as a restart (--max_restarts 1 is spent).
wait_for 120 grep -q "rendezvous round 2 closed" "$D/out" || fail "grow: no round 2"
wait_for 120 past "$D" 600 || fail "grow: the run did not reach step 600 at world 2"
JD=$(head -1 "$DS_RUNTIME_HOME/current")
"$AGENT" --coordinator "$(head -1 "$JD/coordinator")" --token_file "$JD/token" \
  --node_name 127.0.0.2 --advertise_addr 127.0.0.2 --slots 2 > "$D/joined_agent.out" 2>&1 &
joined=$!
exit_of "$D" 300
[[ $rc == 0 ]] && pass "shrink: the job succeeds on one node" || { fail "shrink: exit $rc"; tail -20 "$D/out"; }
grep -q "elasticity: train_batch_size 16, valid at 2 data-parallel size(s): 2, 4" "$D/out" \
  && pass "shrink: the elasticity block's batch, valid at 2 and 4 ranks" || { fail "shrink: no elasticity line"; grep -m2 elasticity "$D/out"; }
grep -q "rendezvous round 2 closed: 1 nodes, world size 2" "$D/out" \
  && pass "shrink: round 2 runs at world 2" || { fail "shrink: no world-2 round"; grep -m3 "round 2" "$D/out"; }
grep -qE "resuming from the in-memory copies of step [0-9]+ \(the 4 ranks' copies, cut for a world of 2\)" "$D/out" \
  && pass "shrink: the coordinator resumes from the 4 ranks' copies" || { fail "shrink: no resume line"; grep -m3 "memory" "$D/out"; }
n=$(grep -c "resumed from the in-memory copy of step .*4 ranks' copies, cut for 2.*no disk read" "$D/out")
[[ $n == 2 ]] && pass "shrink: both ranks cut their part from memory" || { fail "shrink: $n ranks"; grep -m4 "memory" "$D/out"; }
resumed=$(grep -o "resuming from the in-memory copies of step [0-9]*" "$D/out" | awk '{print $NF}' | head -1)
# The rows after the restart (the last of each step) beside the reference's: the 20 steps after
# it equal to 1e-4 (the same state; only the reduction order differs at world 2), and the rest
# of the run, where that difference compounds, within 5e-2.
cmp=$(curve_after "$REF/metrics.csv" "$D/metrics.csv" "${resumed:-0}")
read -r rows bad near far <<< "$cmp"
((rows >= STEPS - ${resumed:-0})) && ((bad == 0)) && awk -v a="$near" -v b="$far" 'BEGIN { exit !(a <= 1e-4 && b <= 5e-2) }' \
  && pass "shrink: $rows steps after step $resumed beside the 4-rank curve: max |difference| $near over the first 20, $far over all" \
  || fail "shrink: $rows rows, $bad unmatched, max |difference| $near over the first 20, $far over all"
grep -q "node 127.0.0.2 asks to join round 2 (1 of at most 2 nodes): admitted now" "$D/out" \
  && pass "grow: the returning node is admitted at once" || { fail "grow: no admission"; grep -m3 "join" "$D/out"; }
grep -q "rendezvous round 3 closed: 2 nodes, world size 4" "$D/out" \
  && pass "grow: round 3 runs at world 4" || { fail "grow: no world-4 round 3"; grep -m3 "round 3" "$D/out"; }
grep -qE "resuming from the in-memory copies of step [0-9]+ \(the 2 ranks' copies, cut for a world of 4\)" "$D/out" \
  && pass "grow: the 4 ranks resume from the 2 ranks' copies" || { fail "grow: no resume line"; grep "memory" "$D/out" | tail -3; }
n=$(grep -c "resumed from the in-memory copy of step .*2 ranks' copies, cut for 4.*no disk read" "$D/out")
[[ $n == 4 ]] && pass "grow: all 4 ranks cut their part from memory" || { fail "grow: $n ranks"; grep "memory" "$D/out" | tail -4; }
grown=$(grep -o "resuming from the in-memory copies of step [0-9]*" "$D/out" | awk '{print $NF}' | sed -n 2p)
((${grown:-0} >= 600)) && pass "grow: resumed at step $grown, after the shrink's step 600" || fail "grow: resumed at step ${grown:-none}"
end=$((SECONDS + 30)); while kill -0 $joined 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
kill -0 $joined 2>/dev/null && { fail "grow: the joined agent did not exit"; kill -9 $joined; } || pass "grow: the joined agent exits with the job"
no_leftovers "$D" "shrink" 10

# --- bad input: one clear error before anything starts ---
B=$BASE/bad; job "$B" 10
out=$("$LAUNCH" "$B/job.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" --nnodes 2:1 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q "\-\-nnodes 2:1: MIN 2 is above MAX 1" <<< "$out" && pass "--nnodes 2:1 refused" || fail "--nnodes 2:1: $rc $out"
out=$("$LAUNCH" "$B/job.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" --nnodes 1:3 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q "MAX 3 but only 2 node(s) are given" <<< "$out" && pass "--nnodes 1:3 refused" || fail "--nnodes 1:3: $rc $out"
job "$B" 10 12  # 12 sequences: 4 ranks x micro 4 do not divide it
out=$("$LAUNCH" "$B/job.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" --nnodes 1:2 2>&1); rc=$?
[[ $rc == 2 ]] && grep -qi "batch" <<< "$out" && pass "a world the batch does not divide refused: $(echo "$out" | head -1 | cut -c1-150)" \
  || fail "batch: $rc $out"

echo "elastic_test: $fails failure(s)"
((fails == 0))
