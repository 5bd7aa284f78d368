#!/usr/bin/env bash
# ZeRO++ end to end (zero/README.md Note [ZeRO++]) on 2 nodes x 2 ranks (127.0.0.1 and
# 127.0.0.2), ZeRO-3 with every block's units released after use (stage3_max_reuse_distance 0),
# so backward gathers them again:
#  - hpZ alone is exact: 30 steps on plain ZeRO-3's losses bit for bit, the ranks in their
#    nodes' hpz groups; so is hpZ over a whole dp group (2 ranks, the group the world itself);
#  - qwZ alone and qgZ alone (inside each node first: ds-launch passes the nodes' ranks) stay
#    within 2% of plain ZeRO-3 at every one of 30 steps, and all three beside tensor
#    parallelism 2 (the tp groups inside the nodes, dp across) within 2% of plain ZeRO-3 with
#    the same tp;
#  - with all three, 15 steps, a checkpoint and 15 more equal 30 straight bit for bit;
#  - the default example (configs/examples/addition.yaml, batch 128) on a 1500-step schedule
#    (the example runs 3000 so that a late start still ends at 100%) with all three
#    follows plain ZeRO-3's curve: every 50-step mean within 2% on the plateau (steps 1-300) and
#    after the fall (1001-1500), both runs off the plateau by step 1000, and held-out exact match
#    within one point (ds-worker --eval on each run's final checkpoint). In between the loss falls
#    off its plateau as the model learns to carry, and where the fall starts moves by a hundred
#    steps or more with any change of rounding or seed (on this schedule one-rank runs left the
#    plateau between steps 311 and 891 over 13 seeds with AVX-512 and 8 with AVX2 kernels,
#    tools/example_seeds.sh): a window there, or the mean over the whole run, is a sample of that
#    race and tells nothing about ZeRO++, so the test reports where each run falls and holds it
#    only to falling by step 1000;
#  - before any rank starts: hpZ that does not divide dp, ZeRO++ below stage 3 and MiCS are
#    refused with one error naming the key.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
T=${TEST_TMPDIR:-$(mktemp -d)}/zeropp
rm -rf "$T"; mkdir -p "$T"
export DS_RUNTIME_HOME=$T/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$T/two"
"$DATA" addition --digits 3 --train_examples 50000 --val_examples 2000 --seed 1 \
  --output_dir "$T/data" > /dev/null 2>&1 || { echo "FAIL: ds-data addition"; exit 1; }

# job NAME ITERS ZERO_EXTRA [YAML]: the example on 4 ranks (micro 32) on a 1500-step schedule,
# paths under $T/NAME.
job() {
  local name=$1 iters=$2 extra=$3 more=${4:-}
  mkdir -p "$T/$name"
  sed -e "s#runs/addition/data#$T/data#g" -e "s#runs/addition#$T/$name#g" \
    -e "s#^train_micro_batch_size_per_gpu: 128#train_batch_size: 128\ntrain_micro_batch_size_per_gpu: 32#" \
    -e "s#train_iters: 3000#train_iters: $iters#" -e "s#total_num_steps: 3000#total_num_steps: 1500#" \
    -e "s#save_interval: 1000#save_interval: $iters#" \
    "$R/configs/examples/addition.yaml" > "$T/$name.yaml"
  cat >> "$T/$name.yaml" <<YAML
zero_optimization: {stage: 3, stage3_param_persistence_threshold: 1000, stage3_max_reuse_distance: 0$extra}
device: {threads: 1}
$more
YAML
}

# run NAME: ds-launch on the two loopback nodes; false (with its tail) when it fails.
run() {
  if ! timeout 900 "$LAUNCH" "$T/$1.yaml" --hostfile "$T/two" --worker "$WORKER" --agent "$AGENT" \
      > "$T/$1.out" 2>&1; then
    fail "$1: ds-launch failed"; tail -6 "$T/$1.out"; return 1
  fi
}

losses() { cut -d, -f2 "$T/$1/metrics.csv" | tail -n +2; }

HPZ=", zero_hpz_partition_size: 2"
QW=", zero_quantized_weights: true"
QG=", zero_quantized_gradients: true"
job plain30 30 ""
job hpz30 30 "$HPZ"
job qw30 30 "$QW"
job qg30 30 "$QG"
job tp_plain30 30 "" "parallel: {tensor: 2}"
job tp_zeropp30 30 "$HPZ$QW$QG" "parallel: {tensor: 2}"
sed -i 's/^train_micro_batch_size_per_gpu: 32/train_micro_batch_size_per_gpu: 64/' \
  "$T/tp_plain30.yaml" "$T/tp_zeropp30.yaml"  # dp 2
for name in plain30 hpz30 qw30 qg30 tp_plain30 tp_zeropp30; do run $name; done
if [[ -s $T/plain30/metrics.csv && "$(losses plain30)" == "$(losses hpz30)" && $(losses plain30 | wc -l) == 30 ]]; then
  pass "hpZ alone: 30 losses equal to plain ZeRO-3's bit for bit"
else
  fail "hpZ alone is not on plain ZeRO-3's curve"; paste -d' ' <(losses plain30) <(losses hpz30) | head -5
fi
# hpZ over the whole dp group (2 ranks on one node): the hpz group is the world itself.
printf '127.0.0.1 slots=2\n' > "$T/one"
job two_plain 10 ""
job two_hpz 10 "$HPZ"
for name in two_plain two_hpz; do
  sed -i 's/^train_micro_batch_size_per_gpu: 32/train_micro_batch_size_per_gpu: 64/' "$T/$name.yaml"
  timeout 300 "$LAUNCH" "$T/$name.yaml" --hostfile "$T/one" --worker "$WORKER" --agent "$AGENT" \
    > "$T/$name.out" 2>&1 || { fail "$name: ds-launch failed"; tail -4 "$T/$name.out"; }
done
if [[ -s $T/two_plain/metrics.csv && "$(losses two_plain)" == "$(losses two_hpz)" ]]; then
  pass "hpZ over a whole dp group of 2: on plain ZeRO-3's losses bit for bit"
else
  fail "hpZ over a whole dp group is not on plain ZeRO-3's curve"
fi
if grep -q "world/hpz.0'" "$T/hpz30.out" && grep -q "world/hpz.1'" "$T/hpz30.out"; then
  pass "hpZ: the ranks joined their nodes' hpz groups"
else
  fail "no hpz group in the log"
fi
# qgZ alone: ds-launch passes the nodes' ranks (DS_NODE_SLOTS), so its first all-to-all stays
# inside each node and the second crosses between them, as DeepSpeed's hierarchical one does.
if grep -q "world/hpz.1'" "$T/qg30.out" && grep -q "world/hpz_across.1'" "$T/qg30.out"; then
  pass "qgZ alone: inside each node first, then across (the node and across groups joined)"
else
  fail "qgZ alone made no node-local stage"
fi
for name in qw30 qg30 tp_zeropp30; do
  ref=plain30; [[ $name == tp_* ]] && ref=tp_plain30
  if paste -d, <(losses $ref) <(losses $name) |
      awk -F, '{ n++; d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
               END { printf "  largest relative difference %.2e\n", m; exit !(n == 30 && m <= 0.02) }'; then
    pass "$name: within 2% of $ref at every one of 30 steps"
  else
    fail "$name: more than 2% off $ref"
  fi
done

# Resume is exact with all three: 15 steps, a checkpoint, 15 more equal 30 straight bit for bit
# (hpZ's secondary is refilled by each step's first gather; the quantized sums have one order).
job all30 30 "$HPZ$QW$QG"
job half 15 "$HPZ$QW$QG"
if run all30 && run half; then
  sed -i 's/train_iters: 15/train_iters: 30/' "$T/half.yaml"
  if run half; then
    # The last row of each step after 15, beside the straight run's.
    if awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $2; next }
                FNR > 1 && $1 > 15 { got[$1] = $2 }
                END { for (s in got) { n++; if (got[s] != ref[s]) bad++ }
                      exit !(n == 15 && bad == 0) }' "$T/all30/metrics.csv" "$T/half/metrics.csv"; then
      pass "ZeRO++ resumes exactly: steps 16-30 after a checkpoint equal the straight run's"
    else
      fail "ZeRO++ resume differs"; tail -4 "$T/all30/metrics.csv" "$T/half/metrics.csv" | cut -d, -f1,2
    fi
  fi
fi

# The default example: plain ZeRO-3 and all three parts of ZeRO++ on 2 x 2, each run's final
# checkpoint evaluated by one rank (the example's own batch, no ZeRO).
job plain 1500 ""
job zeropp 1500 "$HPZ$QW$QG"
for name in plain zeropp; do
  run $name || continue
  sed -e '/^zero_optimization:/d' -e '/^train_batch_size:/d' \
    -e 's/^train_micro_batch_size_per_gpu: 32/train_micro_batch_size_per_gpu: 128/' \
    "$T/$name.yaml" > "$T/$name.eval.yaml"
  timeout 300 "$WORKER" --config "$T/$name.eval.yaml" --eval > "$T/$name.eval" 2>&1 ||
    { fail "$name: ds-worker --eval failed"; tail -4 "$T/$name.eval"; }
done
python3 - "$T" <<'PYEOF' || fails=$((fails + 1))
import re, sys
t = sys.argv[1]
def curve(name):
    rows = [l.split(",") for l in open(f"{t}/{name}/metrics.csv").read().split("\n")[1:] if l]
    return [float(r[1]) for r in rows]
def exact(name):
    m = re.search(r"exact match ([0-9.]+)% \((\d+)/(\d+)", open(f"{t}/{name}.eval").read())
    return 100.0 * int(m.group(2)) / int(m.group(3)) if m else None
mean50 = lambda x, i: sum(x[i:i + 50]) / 50
def fall(x):  # first step of the first 50-step window below halfway from the plateau to the end
    half = (mean50(x, 250) + mean50(x, 1450)) / 2
    return next((i + 1 for i in range(300, 1450, 50) if mean50(x, i) < half), None)
a, b = curve("plain"), curve("zeropp")
assert len(a) == len(b) == 1500, (len(a), len(b))
held = [i for i in range(0, 1500, 50) if i < 300 or i >= 1000]  # the plateau, and after the fall
worst, at = max((abs(mean50(a, i) - mean50(b, i)) / mean50(a, i), i) for i in held)
fa, fb = fall(a), fall(b)
ea, eb = exact("plain"), exact("zeropp")
print(f"  ZeRO++ against plain ZeRO-3 over 1500 steps: 50-step means within {100 * worst:.2f}% "
      f"over steps 1-300 and 1001-1500 (largest at steps {at + 1}-{at + 50}); off the plateau "
      f"at steps {fa} / {fb}; final losses {a[-1]:.4f} / {b[-1]:.4f}; held-out exact match "
      f"{ea}% / {eb}%")
ok = (worst <= 0.02 and fa is not None and fb is not None and fa <= 1000 and fb <= 1000
      and ea is not None and eb is not None and abs(ea - eb) <= 1.0)
print(("ok: " if ok else "FAIL: ") + "all three parts on the example: curve within 2% on the "
      "plateau and after the fall, both off the plateau by step 1000, exact match within one point")
sys.exit(0 if ok else 1)
PYEOF

# Refused before any rank starts.
refused() {  # refused NAME ZERO_EXTRA STAGE EXPECTED
  job "$1" 5 "$2"
  sed -i "s/{stage: 3,/{stage: $3,/" "$T/$1.yaml"
  out=$(timeout 60 "$LAUNCH" "$T/$1.yaml" --hostfile "$T/two" --worker "$WORKER" --agent "$AGENT" 2>&1)
  if [[ $? != 0 && $out == *"$4"* && ! -e $T/$1/metrics.csv ]]; then
    pass "refused: $4"
  else
    fail "$1 was not refused with \"$4\""; echo "$out" | tail -3
  fi
}
refused hpz3 ", zero_hpz_partition_size: 3" 3 "zero_hpz_partition_size 3"
refused stage2 "$QW" 2 "zero_quantized_weights"
refused mics ", mics_shard_size: 2" 3 "MiCS is not supported"

echo "zeropp_launch_test: $fails failure(s)"
[[ $fails == 0 ]]
