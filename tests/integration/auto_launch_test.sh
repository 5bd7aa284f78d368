#!/usr/bin/env bash
# parallel: auto through ds-launch (runtime/planner/auto_layout.h, launcher/launch/launch_auto.h):
#  - a job saying parallel: auto on 2 nodes x 2 slots: with no rates cached, ds-launch measures
#    them first (ds-worker calibrate), picks the fastest layout that fits, says which and why,
#    and every rank runs it; rank 0 prints its third step's time per instruction kind beside the
#    prediction. The second launch reads the cached rates.
#  - the same job with that layout written out by hand gives the same per-step losses, bit for
#    bit: auto changes what is chosen, not how it runs.
#  - ds-launch plan --hostfile --auto --json ranks the layouts fastest first (within 0.1% the
#    smaller memory first) and puts the chosen one on top.
#  - offload_optimizer device auto with --host_memory too small for the states in memory: the
#    layout chosen swaps them to the job's nvme_path (its rates measured there), the ranks swap.
#  - refusals before any rank starts: --tp beside parallel: auto, pipeline.stages beside it,
#    no train_batch_size, --nnodes MIN:MAX beside it; plan --auto with too little memory names
#    the closest layout.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
BASE=${TEST_TMPDIR:-$(mktemp -d)}/auto
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" \
  > /dev/null 2>&1 || { echo "FAIL: ds-data"; exit 1; }
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/hosts"

job() {  # job FILE CSV PARALLEL [EXTRA LINES] [MORE training KEYS]
  cat > "$1" <<YAML
train_batch_size: 16
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: 12${5:-}}
monitor: {csv: $2}
device: {threads: 1}
parallel: $3
${4:-}
YAML
}
launch() {  # launch JOB OUT [FLAGS...]
  local j=$1 out=$2; shift 2
  timeout 180 "$LAUNCH" "$j" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 "$@" > "$out" 2>&1
}

job "$BASE/auto.yaml" "$BASE/auto.csv" auto
if launch "$BASE/auto.yaml" "$BASE/auto.out"; then pass "parallel: auto ran"; else
  fail "parallel: auto failed"; tail -15 "$BASE/auto.out"; fi
grep -q "measuring this host's rates once" "$BASE/auto.out" && [[ -s $DS_RUNTIME_HOME/host-rates-1t.json ]] \
  && pass "no rates cached: measured once, written to the cache" || fail "no calibration"
chosen=$(grep -o "parallel: auto: tp [0-9]* pp [0-9]* dp [0-9]* zero [0-9] micro [0-9]* x gas [0-9]* recompute [a-z]*\( ulysses [0-9]*\)\?\( ep [0-9]*\)\?\( schedule [a-z0-9-]*\)\?\( x[0-9]*\)\?" \
  "$BASE/auto.out" | head -1)
echo "  ${chosen}"
read -r tp pp dp zero micro gas rc < <(sed -E 's/.*tp ([0-9]+) pp ([0-9]+) dp ([0-9]+) zero ([0-9]) micro ([0-9]+) x gas ([0-9]+) recompute ([a-z]+).*/\1 \2 \3 \4 \5 \6 \7/' <<<"$chosen")
# The grid's other parts (runtime/planner/auto_layout.h): Ulysses, experts, the pipeline schedule.
sp=$(grep -oE "ulysses [0-9]+" <<<"$chosen" | cut -d' ' -f2); sp=${sp:-1}
schedule=$(grep -oE "schedule [a-z0-9-]+" <<<"$chosen" | cut -d' ' -f2); schedule=${schedule:-1f1b}
virtual=$(grep -oE " x[0-9]+$" <<<"$chosen" | tr -dc 0-9); virtual=${virtual:-1}
[[ -n ${rc:-} && $((tp * pp * dp)) -eq 4 && $((micro * gas * dp / sp)) -eq 16 ]] \
  && pass "the chosen layout covers 4 ranks and the batch of 16" || fail "no usable layout line"
grep -q "parallel: auto: why tp" "$BASE/auto.out" && pass "it says why the first beats the second" \
  || fail "no why line"
grep -q "batch 16 = micro $micro x accum $gas" "$BASE/auto.out" \
  && pass "the ranks run micro $micro x accum $gas" || fail "the ranks run another batch split"
grep -A12 "measured against predicted" "$BASE/auto.out" | grep -qE "^\[rank 0\]   step +[0-9.]+ +[0-9.]+ " \
  && pass "rank 0 sets its third step beside the prediction" || fail "no measured/predicted table"

# The layout by hand: the same losses.
job "$BASE/hand.yaml" "$BASE/hand.csv" "{tensor: $tp, pipeline: $pp, ulysses: $sp}" \
  "zero_optimization: {stage: $zero}
pipeline: {schedule: $schedule, virtual_stages: $virtual}
train_micro_batch_size_per_gpu: $micro
gradient_accumulation_steps: $gas" ", recompute: $rc"
if launch "$BASE/hand.yaml" "$BASE/hand.out" && [[ -s $BASE/hand.csv ]] &&
    cmp -s <(cut -d, -f1,2 "$BASE/auto.csv") <(cut -d, -f1,2 "$BASE/hand.csv"); then
  pass "the layout written by hand gives the same 12 losses bit for bit"
else
  fail "by hand differs"; paste -d' ' <(cut -d, -f2 "$BASE/auto.csv") <(cut -d, -f2 "$BASE/hand.csv") | head -5
fi
launch "$BASE/auto.yaml" "$BASE/again.out" && ! grep -q "measuring this host's rates" "$BASE/again.out" \
  && pass "the second launch reads the cached rates" || fail "calibrated again"

# plan --auto --json: fastest first, the chosen one on top.
"$LAUNCH" plan "$BASE/auto.yaml" --hostfile "$BASE/hosts" --auto --json > "$BASE/plan.json" 2>&1
python3 - "$BASE/plan.json" "$chosen" <<'PY' && pass "plan --auto --json: ranked, the chosen one first" || fail "plan --auto --json"
import json, sys
d = json.load(open(sys.argv[1]))
ms = [l["predicted_step_ms"] for l in d["layouts"]]
# Fastest first; within 0.1% of the fastest of a run the smaller peak first (auto_layout.h).
assert len(ms) >= 2 and all(a <= b * 1.001 + 1e-9 for a, b in zip(ms, ms[1:])), ms
assert all(l1["peak_bytes"] <= l2["peak_bytes"]
           for l1, l2 in zip(d["layouts"], d["layouts"][1:])
           if l2["predicted_step_ms"] < l1["predicted_step_ms"]), d["layouts"]
assert sys.argv[2].endswith(d["layouts"][0]["name"]), (sys.argv[2], d["layouts"][0]["name"])
print(f"  {len(ms)} layouts, {d['planned']} planned in {d['search_ms']:.0f} ms")
PY

# offload_optimizer device auto: with --host_memory too small for the states in memory (on one
# node of 2 slots), the search swaps them to the job's nvme_path at the rates it measures there;
# the ranks run that layout and swap, and rank 0 sets its swaps beside the prediction.
mkdir -p "$BASE/nvme"
printf '127.0.0.1 slots=2\n' > "$BASE/one_node"
job "$BASE/offload.yaml" "$BASE/offload.csv" auto "zero_optimization: {offload_optimizer: {device: auto, nvme_path: $BASE/nvme}}"
sed -i 's/n_layer: 2, n_embd: 32/n_layer: 4, n_embd: 512/; s/n_head: 4/n_head: 8/; s/^train_batch_size: 16$/train_batch_size: 8/' "$BASE/offload.yaml"
if timeout 180 "$LAUNCH" "$BASE/offload.yaml" --hostfile "$BASE/one_node" --worker "$WORKER" \
    --agent "$AGENT" --heartbeat 0.5 --host_memory 0.18 > "$BASE/offload.out" 2>&1; then
  pass "parallel: auto with offload auto ran"
else
  fail "parallel: auto with offload auto failed"; tail -8 "$BASE/offload.out"
fi
grep -oE "parallel: auto: tp [^,]*offload nvme[^,]*, predicted [0-9.]+ ms|NVMe at .*" "$BASE/offload.out" | head -2 | sed 's/^/  /'
grep -qE "parallel: auto: tp [^,]* offload nvme(\+params)?, predicted" "$BASE/offload.out" &&
  grep -q "NVMe at $BASE/nvme: read [0-9.]*, write [0-9.]* GB/s" "$BASE/offload.out" \
  && pass "too little memory for the states: the chosen layout swaps them to NVMe, at rates measured there" \
  || fail "no offloaded layout chosen"
grep -q "\[swap\] .*NVMe read" "$BASE/offload.out" && pass "the ranks swap" || fail "no rank swapped"
grep -A14 "measured against predicted" "$BASE/offload.out" | grep -E "SWAP_IN|SWAP_OUT|step  " | sed 's/^/  /'
grep -A14 "measured against predicted" "$BASE/offload.out" | grep -qE "^\[rank 0\]   SWAP_IN +[0-9.]+ +[0-9.]+ " \
  && pass "rank 0 sets its swaps beside the prediction" || fail "no SWAP_IN row measured against predicted"

refused() {  # refused NAME PATTERN OUT: exit != 0 with PATTERN, and no rank started
  if grep -q "$2" "$3" && ! grep -q "\[rank 0\]" "$3"; then pass "$1"; else fail "$1"; tail -4 "$3"; fi
}
launch "$BASE/auto.yaml" "$BASE/tp.out" --tp 2
refused "--tp beside parallel: auto" "contradict it" "$BASE/tp.out"
job "$BASE/stages.yaml" "$BASE/x.csv" auto "pipeline: {stages: 2}"
launch "$BASE/stages.yaml" "$BASE/stages.out"
refused "pipeline.stages beside parallel: auto" "stages.*contradicts parallel: auto" "$BASE/stages.out"
job "$BASE/nobatch.yaml" "$BASE/x.csv" auto
sed -i 's/^train_batch_size: 16$/train_micro_batch_size_per_gpu: 2/' "$BASE/nobatch.yaml"
launch "$BASE/nobatch.yaml" "$BASE/nobatch.out"
refused "parallel: auto without train_batch_size" "needs train_batch_size" "$BASE/nobatch.out"
launch "$BASE/auto.yaml" "$BASE/elastic.out" --nnodes 1:2
refused "--nnodes MIN:MAX beside parallel: auto" "not planned" "$BASE/elastic.out"
"$LAUNCH" plan "$BASE/auto.yaml" --hostfile "$BASE/hosts" --auto --host-memory 0.0001 > "$BASE/small.out" 2>&1
refused "plan --auto with too little memory names the closest layout" "no layout fits; the closest is tp" "$BASE/small.out"

[[ $fails -eq 0 ]] && echo "PASS" || echo "FAILED: $fails"
exit $((fails > 0))
