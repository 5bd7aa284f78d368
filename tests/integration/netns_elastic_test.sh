#!/usr/bin/env bash
# A node whose network is cut, through the elastic path, on emulated nodes (tools/emulated_nodes.sh:
# two network namespaces on a bridge, ds-launch --launcher netns, --nnodes 1:2, in-memory copies
# every step, the batch from an elasticity block). Node 1's link is blackholed mid-run: its agent
# goes silent, the coordinator marks it lost and the job goes on with node 0 alone at world 2,
# each rank cutting its ZeRO-1 part out of the 4 old ranks' copies (node 1's came to node 0's
# agent over the emulated link before the cut), and the run continues on the failure-free
# 4-rank curve of the same job on the same nodes. Needs root and iproute2 (skips otherwise); the
# namespaces, bridge and veths are removed on exit. Every wait is bounded; no process is left.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
NODES=$R/tools/emulated_nodes.sh
BASE=${TEST_TMPDIR:-$(mktemp -d)}/netns_elastic
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
source "$(dirname "$0")/launch_helpers.sh"  # pass, fail, wait_for, exit_of, curve_after, ...
if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIPPED TARGET: netns_elastic_test needs root, ip and tc (network namespaces)"; exit 0
fi
NAME=dse$$; NAME=${NAME:0:8}
export SUBNET=$(( $$ % 200 + 20 ))
cleanup() { pkill -9 -f "$BASE/" 2>/dev/null; "$NODES" down "$NAME" 2>/dev/null; }
trap cleanup EXIT
if ! "$NODES" up "$NAME" 2 > "$BASE/nodes"; then echo "SKIPPED TARGET: netns_elastic_test cannot make network namespaces here"; exit 0; fi
printf '%s0 slots=2\n%s1 slots=2\n' "$NAME" "$NAME" > "$BASE/hosts"
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1

STEPS=600
job() {  # job DIR
  mkdir -p "$1"
  cat > "$1/job.yaml" <<YAML
elasticity: {enabled: true, max_train_batch_size: 16, micro_batch_sizes: [4], min_gpus: 2, max_gpus: 4}
optimizer: {type: AdamW, params: {lr: 0.003}}
zero_optimization: {stage: 1}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: $STEPS}
monitor: {log_interval: 100, csv: $1/metrics.csv}
device: {threads: 1}
fault_tolerance: {in_memory_interval: 1}
YAML
}
launch() {  # launch DIR ARGS...
  local d=$1; shift
  "$LAUNCH" "$d/job.yaml" --hostfile "$BASE/hosts" --launcher netns --worker "$WORKER" \
    --agent "$AGENT" --coordinator "10.77.$SUBNET.254:0" --heartbeat 0.5 --node_timeout 2 \
    --grace 1 --nnodes 1:2 --max_restarts 1 --rdzv_last_call 3 "$@" > "$d/out" 2>&1 &
  echo $! > "$d/pid"
}

REF=$BASE/reference; job "$REF"
launch "$REF"
exit_of "$REF" 300
[[ $rc == 0 ]] && pass "reference: 4 ranks on two emulated nodes, exit 0" || { fail "reference: exit $rc"; tail -20 "$REF/out"; }

D=$BASE/cut; job "$D"
launch "$D"
wait_for 120 past "$D" 200 || fail "cut: the run did not reach step 200"
"$NODES" cut "$NAME" 1
t_cut=$SECONDS
exit_of "$D" 300
[[ $rc == 0 ]] && pass "cut: the job succeeds on node 0 alone" || { fail "cut: exit $rc"; tail -20 "$D/out"; }
grep -qE "node ${NAME}1: node lost: no heartbeat for [0-9.]+ s" "$D/out" \
  && pass "cut: node 1 is lost (its heartbeats stopped)" || { fail "cut: node 1 not lost"; grep -m3 "lost" "$D/out"; }
grep -q "rendezvous round 2 closed: 1 nodes, world size 2" "$D/out" \
  && pass "cut: round 2 runs at world 2" || { fail "cut: no world-2 round"; grep -m3 "round 2" "$D/out"; }
n=$(grep -c "resumed from the in-memory copy of step .*4 ranks' copies, cut for 2.*no disk read" "$D/out")
[[ $n == 2 ]] && pass "cut: both ranks cut their part from the 4 ranks' copies in memory" || { fail "cut: $n ranks"; grep "memory" "$D/out" | tail -4; }
resumed=$(grep -o "resuming from the in-memory copies of step [0-9]*" "$D/out" | awk '{print $NF}' | head -1)
((${resumed:-0} >= 190)) && pass "cut: resumed at step $resumed (cut after step 200)" || fail "cut: resumed at step ${resumed:-none}"
read -r rows bad near far <<< "$(curve_after "$REF/metrics.csv" "$D/metrics.csv" "${resumed:-0}")"
((rows >= STEPS - ${resumed:-0})) && ((bad == 0)) && awk -v a="$near" -v b="$far" 'BEGIN { exit !(a <= 1e-4 && b <= 5e-2) }' \
  && pass "cut: $rows steps after step $resumed beside the 4-rank curve: max |difference| $near over the first 20, $far over all" \
  || fail "cut: $rows rows, $bad unmatched, max |difference| $near over the first 20, $far over all"
no_leftovers "$D" "cut" 15

echo "netns_elastic_test: $fails failure(s)"
((fails == 0))
