#!/usr/bin/env bash
# A node whose network is cut, on emulated nodes (tools/emulated_nodes.sh: two network
# namespaces on a bridge, ds-launch --launcher netns): the job runs across them as across hosts,
# then node 1's link is blackholed mid-run. The coordinator must end the job with one report
# naming node 1's ranks (their reports stopped) and where the others wait, within the printed
# deadline + 5 s, and no process may be left. Needs root and iproute2 (skips otherwise); the
# namespaces, bridge and veths are removed on exit. Every wait is bounded.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
NODES=$R/tools/emulated_nodes.sh
BASE=${TEST_TMPDIR:-$(mktemp -d)}/netns
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
source "$(dirname "$0")/launch_helpers.sh"  # pass, fail, wait_for, leftovers, ...
if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIPPED TARGET: netns_hang_test needs root, ip and tc (network namespaces)"; exit 0
fi
NAME=dsh$$; NAME=${NAME:0:8}
export SUBNET=$(( $$ % 200 + 20 ))
cleanup() { pkill -9 -f "$BASE/job.yaml" 2>/dev/null; "$NODES" down "$NAME" 2>/dev/null; }
trap cleanup EXIT
if ! "$NODES" up "$NAME" 2 > "$BASE/nodes"; then echo "SKIPPED TARGET: netns_hang_test cannot make network namespaces here"; exit 0; fi
printf '%s0 slots=2\n%s1 slots=2\n' "$NAME" "$NAME" > "$BASE/hosts"
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
cat > "$BASE/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 1, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10}
training: {train_iters: 100000}
monitor: {log_interval: 50}
device: {threads: 1}
fault_tolerance: {hang_timeout: auto, hang_timeout_min: 3}
YAML
running() { [[ $("$LAUNCH" status 2>/dev/null | grep -cE "^[0-9]+ +$NAME[01] +[0-9]+ +RUNNING") == 4 ]]; }

"$LAUNCH" "$BASE/job.yaml" --hostfile "$BASE/hosts" --launcher netns --worker "$WORKER" \
  --agent "$AGENT" --coordinator "10.77.$SUBNET.254:0" --heartbeat 0.5 --node_timeout 60 \
  --grace 1 > "$BASE/out" 2>&1 &
pid=$!
if wait_for 60 running; then pass "the job runs across two emulated nodes"
else fail "ranks not running"; tail -20 "$BASE/out"; fi
# The nodes' addresses, as the coordinator saw their agents connect, are the namespaces'.
[[ $("$LAUNCH" status 2>/dev/null | grep -cE "^$NAME[01] +10\.77\.$SUBNET\.[12] ") == 2 ]] \
  && pass "the nodes reach the coordinator from the namespaces' addresses" \
  || { fail "nodes not on the emulated links"; "$LAUNCH" status | head -5; }
sleep 3  # past the warm-up: the measured deadline
"$NODES" cut "$NAME" 1
end=$((SECONDS + 120)); while kill -0 $pid 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
if kill -0 $pid 2>/dev/null; then kill -9 $pid; fail "ds-launch did not end"; rc=timeout; else wait $pid; rc=$?; fi
[[ $rc == 1 ]] && pass "cut link: ds-launch exits 1" || { fail "cut link: exit $rc"; tail -20 "$BASE/out"; }
grep -qE "rank [23] on ${NAME}1 stands at step [0-9]+, instruction [0-9]+ [A-Z_]+.* and sent no report" "$BASE/out" \
  && pass "cut link: node 1's ranks named as silent" || { fail "cut link: not named"; grep -m3 "hang\|lost" "$BASE/out"; }
grep -qE "ranks? [01](, [01])? waits? at step [0-9]+, instruction [0-9]+ [A-Z_]+ on group " "$BASE/out" \
  && pass "cut link: where node 0's ranks wait" || { fail "cut link: no waiting ranks"; grep -m3 "hang" "$BASE/out"; }
line=$(grep -o "no rank moved for [0-9.]* s (deadline [0-9.]* s" "$BASE/out" | head -1)
x=$(echo "$line" | awk '{print $5}'); y=$(echo "$line" | awk '{print $8}')
[[ -n $x && -n $y ]] && awk -v x="$x" -v y="$y" 'BEGIN { exit !(x <= y + 5) }' \
  && pass "cut link: named after $x s, deadline $y s" || fail "cut link: no timely report ($line)"
wait_for 30 none_left "$BASE" && pass "cut link: no process left" || fail "cut link: left running: $(leftovers "$BASE" | tr '\n' ' ')"

echo "netns_hang_test: $fails failure(s)"
((fails == 0))
