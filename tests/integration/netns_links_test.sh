#!/usr/bin/env bash
# Slow links between emulated nodes (tools/emulated_nodes.sh: two network namespaces on a
# bridge, tc's token bucket on each node's link both ways; ds-launch --launcher netns), ZeRO-3 of
# a 3-layer GPT on 2 nodes x 2 ranks, 20 steps, fp32:
#  - at 100 Mbit/s the step is measurably slower than over loopback nodes (median at least 1.5x);
#  - the bytes that crossed the nodes' links (the namespaces' eth0 TX counters over the run)
#    are what the plan says goes between nodes (ds-launch plan --hostfile), within 0.95-1.25x
#    (TCP/IP headers, Gloo's framing, start-up and the agents' reports ride on top);
#  - with ZeRO++ (hpZ, qwZ and qgZ) at least 3x fewer bytes cross, again as planned.
# Needs root, ip and tc (skips otherwise); the namespaces, bridge and veths are removed on exit.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
NODES=$R/tools/emulated_nodes.sh
BASE=${TEST_TMPDIR:-$(mktemp -d)}/links
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
source "$(dirname "$0")/launch_helpers.sh"  # pass, fail, ...
if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIPPED TARGET: netns_links_test needs root, ip and tc (network namespaces)"; exit 0
fi
NAME=dsl$$; NAME=${NAME:0:8}
export SUBNET=$(($$ % 200 + 20))
cleanup() { pkill -9 -f "$BASE/job.yaml" 2>/dev/null; "$NODES" down "$NAME" 2>/dev/null; }
trap cleanup EXIT
if ! "$NODES" up "$NAME" 2 100mbit > "$BASE/nodes"; then
  echo "SKIPPED TARGET: netns_links_test cannot make network namespaces here"; exit 0
fi
printf '%s0 slots=2\n%s1 slots=2\n' "$NAME" "$NAME" > "$BASE/hosts"
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/loopback"
"$DATA" addition --digits 3 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1

job() {  # job ZERO_EXTRA
  cat > "$BASE/job.yaml" <<YAML
train_batch_size: 128
train_micro_batch_size_per_gpu: 32
optimizer: {type: AdamW, params: {lr: 0.001}}
model: {family: gpt2, n_layer: 3, n_embd: 128, n_head: 4, vocab_size: 16, max_seq_len: 13}
data: {train: $BASE/data/train.tok, seq_len: 13}
training: {train_iters: 20}
zero_optimization: {stage: 3, stage3_param_persistence_threshold: 1000, stage3_max_reuse_distance: 0$1}
monitor: {csv: $BASE/metrics.csv}
device: {threads: 1}
YAML
}
tx() {
  for i in 0 1; do ip -n "$NAME$i" -s -j link show eth0; done |
    python3 -c "import json,sys; print(sum(json.loads(l)[0]['stats64']['tx']['bytes'] for l in sys.stdin))"
}
planned() {  # bytes per step from each node to the other, over all ranks
  "$LAUNCH" plan "$BASE/job.yaml" --hostfile "$BASE/loopback" --json |
    python3 -c "import json,sys; print(sum(int(r.get('inter_node_sent_bytes', 0)) for r in json.load(sys.stdin)['ranks']))"
}
median_ms() { tail -n +4 "$BASE/metrics.csv" | cut -d, -f10 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# launch HOSTFILE [netns]: the job to its end; false when it fails.
launch() {
  local args=(--hostfile "$1")
  [[ ${2:-} == netns ]] && args+=(--launcher netns --coordinator "10.77.$SUBNET.254:0")
  rm -f "$BASE/metrics.csv"
  timeout 300 "$LAUNCH" "$BASE/job.yaml" "${args[@]}" --worker "$WORKER" --agent "$AGENT" \
    > "$BASE/out" 2>&1 || { tail -6 "$BASE/out"; return 1; }
}

job ""
launch "$BASE/loopback" && loop_ms=$(median_ms) || { fail "ZeRO-3 over loopback nodes failed"; loop_ms=; }
declare -A MEASURED PLANNED
for part in plain zeropp; do
  [[ $part == zeropp ]] && job ", zero_hpz_partition_size: 2, zero_quantized_weights: true, zero_quantized_gradients: true"
  before=$(tx)
  if ! launch "$BASE/hosts" netns; then fail "$part across emulated nodes at 100 Mbit/s failed"; continue; fi
  MEASURED[$part]=$(( ($(tx) - before) / 20 )); PLANNED[$part]=$(planned)
  [[ $part == plain ]] && slow_ms=$(median_ms)
  if awk -v m="${MEASURED[$part]}" -v p="${PLANNED[$part]}" -v part="$part" \
      'BEGIN { printf "  %s: %.0f bytes per step crossed, %.0f planned (%.3fx)\n", part, m, p, m / p; exit !(p > 0 && m >= 0.95 * p && m <= 1.25 * p) }'; then
    pass "$part: the bytes between nodes are the plan's"
  else
    fail "$part: measured ${MEASURED[$part]} bytes per step between nodes, planned ${PLANNED[$part]}"
  fi
done
if [[ -n ${loop_ms:-} && -n ${slow_ms:-} ]] && awk -v a="$loop_ms" -v b="$slow_ms" \
    'BEGIN { printf "  median step %.1f ms over loopback, %.1f ms at 100 Mbit/s\n", a, b; exit !(b >= 1.5 * a) }'; then
  pass "ZeRO-3 at 100 Mbit/s is measurably slower than over loopback"
else
  fail "no slowdown at 100 Mbit/s (loopback ${loop_ms:-?} ms, emulated ${slow_ms:-?} ms)"
fi
if [[ -n ${MEASURED[plain]:-} && -n ${MEASURED[zeropp]:-} ]] && ((MEASURED[plain] >= 3 * MEASURED[zeropp])); then
  pass "ZeRO++: $(awk -v a="${MEASURED[plain]}" -v b="${MEASURED[zeropp]}" 'BEGIN { printf "%.1f", a / b }')x fewer bytes between nodes"
else
  fail "ZeRO++ does not cut the bytes between nodes 3x (${MEASURED[plain]:-?} -> ${MEASURED[zeropp]:-?})"
fi

echo "netns_links_test: $fails failure(s)"
((fails == 0))
