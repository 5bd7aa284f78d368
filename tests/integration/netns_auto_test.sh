#!/usr/bin/env bash
# parallel: auto over slow links between emulated nodes (tools/emulated_nodes.sh, 2 namespaces x
# 2 slots, tc's token bucket at 100 Mbit/s on each node's link; ds-launch --launcher netns):
#  - before any rank starts, the agents measure the links (launcher/launch/link_probes.h): each
#    node's own loopback and its link to the other node. The test holds the measured rate between
#    nodes to the tc rate (0.5-1.2x of 12.5 MB/s) and the one inside a node to at least 10x that;
#  - the cost model takes them: the layout the host's table chose (loopback-fast links) is
#    chosen again with the measured links, and here it changes (said, and shown);
#  - that change is right: the chosen layout's median step is at most 0.8x of the table's
#    choice run by hand over the same links.
# Needs root, ip and tc (skips otherwise); the namespaces, bridge and veths are removed on exit.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
NODES=$R/tools/emulated_nodes.sh
BASE=${TEST_TMPDIR:-$(mktemp -d)}/netns_auto
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
source "$(dirname "$0")/launch_helpers.sh"  # pass, fail, ...
if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIPPED TARGET: netns_auto_test needs root, ip and tc (network namespaces)"; exit 0
fi
NAME=dsa$$; NAME=${NAME:0:8}
export SUBNET=$(($$ % 200 + 20))
cleanup() { pkill -9 -f "$BASE/job.yaml" 2>/dev/null; "$NODES" down "$NAME" 2>/dev/null; }
trap cleanup EXIT
if ! "$NODES" up "$NAME" 2 100mbit > "$BASE/nodes"; then
  echo "SKIPPED TARGET: netns_auto_test cannot make network namespaces here"; exit 0
fi
printf '%s0 slots=2\n%s1 slots=2\n' "$NAME" "$NAME" > "$BASE/hosts"
"$DATA" addition --digits 3 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1

job() {  # job PARALLEL [MORE KEYS]
  cat > "$BASE/job.yaml" <<YAML
train_batch_size: 128
optimizer: {type: AdamW, params: {lr: 0.001}}
model: {family: gpt2, n_layer: 3, n_embd: 128, n_head: 4, vocab_size: 16, max_seq_len: 13}
data: {train: $BASE/data/train.tok, seq_len: 13}
training: {train_iters: 20}
monitor: {csv: $BASE/metrics.csv}
device: {threads: 1}
parallel: $1
${2:-}
YAML
}
launch() {  # launch OUT: the job to its end across the namespaces; false when it fails
  rm -f "$BASE/metrics.csv"
  timeout 300 "$LAUNCH" "$BASE/job.yaml" --hostfile "$BASE/hosts" --launcher netns \
    --coordinator "10.77.$SUBNET.254:0" --worker "$WORKER" --agent "$AGENT" > "$1" 2>&1 ||
    { tail -6 "$1"; return 1; }
}
median_ms() { tail -n +4 "$BASE/metrics.csv" | cut -d, -f10 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# The keys of a layout as parallel: auto names it ("tp 1 pp 2 dp 2 zero 1 micro 32 x gas 2
# recompute none schedule zb-h1"): the parallel mapping, then the lines after it.
layout_keys() {
  python3 - "$1" <<'PY'
import re, sys
n = sys.argv[1]
v = lambda k, d: re.search(k + r" ([\w-]+)", n).group(1) if re.search(k + r" ([\w-]+)", n) else d
print("{tensor: %s, pipeline: %s}" % (v("tp", 1), v("pp", 1)))
print("zero_optimization: {stage: %s%s}" % (v("zero", 0), ", zero_hpz_partition_size: %s" % v("hpz", 1) if "hpz" in n else ""))
print("train_micro_batch_size_per_gpu: %s\ngradient_accumulation_steps: %s" % (v("micro", 1), v("gas", 1)))
if "schedule" in n: print("pipeline: {schedule: %s}" % v("schedule", "1f1b"))
PY
}

job auto
if launch "$BASE/auto.out"; then pass "parallel: auto ran across the emulated nodes"; else fail "parallel: auto failed"; fi
grep -A4 "the links, measured through the agents" "$BASE/auto.out" | sed 's/^/  /'
between=$(grep -oE -- "-> $NAME[01]: [0-9.]+ us, [0-9.]+ GB/s" "$BASE/auto.out" | awk '{print $5}')
inside=$(grep -oE "^  $NAME[01] +[0-9.]+ us, [0-9.]+ GB/s" "$BASE/auto.out" | awk '{print $4}')
if [[ $(wc -w <<<"$between") == 2 && $(wc -w <<<"$inside") == 2 ]] &&
    awk -v b="$between" -v i="$inside" 'BEGIN { split(b, x); split(i, y)
      for (k = 1; k <= 2; ++k) if (x[k] < 0.5 * 0.0125 || x[k] > 1.2 * 0.0125 || y[k] < 10 * x[k]) exit 1 }'; then
  pass "the links measured: between nodes at the tc rate ($(tr '\n' ' ' <<<"$between")GB/s), inside them faster"
else
  fail "measured links: between nodes '$between' GB/s (tc: 0.0125), inside '$inside'"
fi
layouts=$(grep -oE "parallel: auto: tp [0-9]+ pp [0-9]+ dp [0-9]+ zero [0-9][^,]*, predicted" "$BASE/auto.out" |
  sed -E 's/parallel: auto: //; s/, predicted//')
table=$(head -1 <<<"$layouts"); chosen=$(sed -n 2p <<<"$layouts")
echo "  the host's table chose: $table"
echo "  with the measured links: $chosen"
grep -q "rates .*, links as measured)" "$BASE/auto.out" && pass "the second choice took the measured links" \
  || fail "no choice with the measured links"
if [[ -n $chosen && $chosen != "$table" ]] && grep -q "the measured links change the layout" "$BASE/auto.out"; then
  pass "the measured links changed the layout, and ds-launch says so"
else
  fail "the layout did not change at 100 Mbit/s ('$table' / '$chosen')"
fi
grep -q "batch 128 = micro $(grep -oE 'micro [0-9]+' <<<"$chosen" | cut -d' ' -f2) x accum" "$BASE/auto.out" \
  && pass "the ranks run the second choice" || fail "the ranks do not run '$chosen'"
auto_ms=$(median_ms)

keys=$(layout_keys "$table")
job "$(head -1 <<<"$keys")" "$(tail -n +2 <<<"$keys")"
if launch "$BASE/table.out"; then
  table_ms=$(median_ms)
  if awk -v a="$auto_ms" -v t="$table_ms" 'BEGIN { printf "  median step: %.1f ms chosen with the measured links, %.1f ms for the table'"'"'s choice (%.2fx)\n", a, t, a / t; exit !(a <= 0.8 * t) }'; then
    pass "the layout chosen with the measured links is faster over them"
  else
    fail "the measured links' choice is not faster (${auto_ms} against ${table_ms} ms)"
  fi
else
  fail "the table's choice by hand failed"
fi

echo "netns_auto_test: $fails failure(s)"
((fails == 0))
