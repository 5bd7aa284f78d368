#!/usr/bin/env bash
# The default example (configs/examples/addition.yaml) over several seeds: where each run leaves
# the loss plateau (the model learning to carry) and its held-out exact match. Whether a run
# leaves the plateau in time depends on the seed and on the rounding of the CPU's kernels, so a
# change to the example's configuration is judged over seeds, not on one run.
#
#   tools/example_seeds.sh 1 2 3 4 5                 # seeds 1-5, 2 runs at a time, 1 thread each
#   tools/example_seeds.sh --isa avx2 1234 5          # with the AVX2 kernels (DS_CPU_ISA=avx2)
#   tools/example_seeds.sh --set optimizer.params.betas=[0.9,0.98] 5
#
# --set KEY=VALUE (dotted keys, YAML values) changes the configuration; training.train_iters also
# sets the schedule's total_num_steps. Needs bin/ (tools/build.sh). Runs go to runs/seeds/.
set -euo pipefail
cd "$(dirname "$0")/.."

isa="" jobs=2 sets=() seeds=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --isa) isa=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --set) sets+=("$2"); shift 2 ;;
    -*) echo "example_seeds: unknown option $1" >&2; exit 2 ;;
    *) [[ $1 =~ ^[0-9]+$ ]] || { echo "example_seeds: seed '$1' is not a number" >&2; exit 2; }
       seeds+=("$1"); shift ;;
  esac
done
[[ ${#seeds[@]} -gt 0 ]] || { echo "usage: tools/example_seeds.sh [--isa avx2|avx512] [--jobs N] [--set KEY=VALUE]... SEED..." >&2; exit 2; }
[[ -x bin/ds-worker && -x bin/ds-data ]] || { echo "example_seeds: bin/ds-worker missing; run tools/build.sh" >&2; exit 1; }

OUT=runs/seeds
mkdir -p "$OUT"
[[ -f $OUT/data/train.tok ]] || bin/ds-data addition --digits 3 --train_examples 50000 \
  --val_examples 2000 --seed 1 --output_dir "$OUT/data" > /dev/null 2>&1

# config SEED DIR: the example's configuration with this run's seed, paths and --set values.
config() {
  /usr/bin/python3 - "$1" "$2" "$OUT/data" "${sets[@]}" <<'PY'
import sys, yaml
seed, d, data, *sets = sys.argv[1:]
c = yaml.safe_load(open("configs/examples/addition.yaml"))
c["seed"] = int(seed)
c["data"]["train"], c["data"]["validation"] = f"{data}/train.tok", f"{data}/val.tok"
c["checkpoint"] = {"dir": f"{d}/ckpt", "save_interval": 100000, "keep_last": 1, "load": "latest"}
c["monitor"]["csv"] = f"{d}/metrics.csv"
for kv in sets:
    key, value = kv.split("=", 1)
    node = c
    for k in key.split(".")[:-1]:
        node = node.setdefault(k, {})
    node[key.split(".")[-1]] = yaml.safe_load(value)
    if key == "training.train_iters":
        c["scheduler"]["params"]["total_num_steps"] = int(value)
yaml.safe_dump(c, open(f"{d}/config.yaml", "w"))
PY
}

# one SEED: trains and evaluates at one thread, prints the seed's line.
one() {
  local d=$OUT/seed$1${isa:+-$isa}
  rm -rf "$d"; mkdir -p "$d"
  config "$1" "$d"
  local env=()
  [[ -n $isa ]] && env=(DS_CPU_ISA="$isa")
  [[ $isa == avx2 ]] && env+=(OPENBLAS_CORETYPE=Haswell)
  env "${env[@]}" timeout 1800 bin/ds-worker --config "$d/config.yaml" --threads 1 > "$d/train.log" 2>&1 \
    && env "${env[@]}" timeout 600 bin/ds-worker --config "$d/config.yaml" --threads 1 --eval \
      > "$d/eval.log" 2>&1 || { echo "seed $1: ds-worker failed, see $d"; return 0; }
  python3 - "$1" "$d" <<'PY'
import csv, re, statistics, sys
seed, d = sys.argv[1:]
loss = [float(r["loss"]) for r in csv.DictReader(open(f"{d}/metrics.csv"))]
plateau = statistics.median(loss[150:300])
end = sum(loss[-50:]) / 50
# Leaves the plateau: the first 50-step window (from step 301, every 10) below halfway down.
fall = next((s + 1 for s in range(300, len(loss) - 50, 10)
             if sum(loss[s:s + 50]) / 50 < (plateau + end) / 2), None)
m = re.search(r"exact match ([0-9.]+%) \((\d+)/(\d+)", open(f"{d}/eval.log").read())
print(f"seed {seed:>5}: plateau {plateau:.3f}, leaves it at step {fall or 'never'}, "
      f"mean loss {sum(loss) / len(loss):.4f}, last 50 {end:.4f}, exact match "
      f"{m.group(1)} ({m.group(2)}/{m.group(3)})")
PY
}

echo "example_seeds: configs/examples/addition.yaml${sets[*]:+ with ${sets[*]}}, kernels ${isa:-native}," \
  "${#seeds[@]} seeds, $jobs at a time"
running=0
for s in "${seeds[@]}"; do
  one "$s" &
  running=$((running + 1))
  if [[ $running -ge $jobs ]]; then wait -n; running=$((running - 1)); fi
done
wait
