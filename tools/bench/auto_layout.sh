#!/usr/bin/env bash
# parallel: auto's cost model against measurement (issue: the planner picks the layout). GPT-2
# L4 C256 H4 V8192 T256, train_batch_size 16, fp32 (PRECISION=bf16 for bf16), on loopback nodes
# of SLOTS slots each (default 1; 2 lets tensor parallelism in) making each of WORLDS, one thread
# per rank: this host's rates are measured once
# (ds-worker calibrate), `ds-launch plan --auto --json` ranks every layout that fits, and then
# every one of them runs through ds-launch for STEPS steps (median ms/step after 2). Prints each
# layout's predicted and measured step, the error, and per world: the chosen layout against the
# fastest measured, the top five predictions' errors, the search time. CSV rows to OUT.
#   tools/bench/auto_layout.sh                 # WORLDS="2 4" STEPS=6
#   ONLY=ulysses WORLDS=4 tools/bench/auto_layout.sh   # the layouts whose names match ONLY
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-6}; WORLDS=${WORLDS:-2 4}; PRECISION=${PRECISION:-fp32}; SLOTS=${SLOTS:-1}
OUT=${OUT:-auto_layout.csv}
[[ -x bin/ds-launch ]] || tools/build.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
/usr/bin/python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 8192, size=400000, dtype=np.uint16).tofile('$W/tokens.bin')"
bf16=false; [[ $PRECISION == bf16 ]] && bf16=true
job() {  # job FILE [PARALLEL ZERO MICRO GAS RECOMPUTE PIPELINE]
  cat > "$1" <<YAML
train_batch_size: 16
${2:+train_micro_batch_size_per_gpu: $4}
${2:+gradient_accumulation_steps: $5}
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 4, vocab_size: 8192, max_seq_len: 256}
data: {train: $W/tokens.bin, format: uint16, seq_len: 256, shuffle: false}
training: {train_iters: $STEPS${2:+, recompute: $6}}
${2:+parallel: $2}
${7:+pipeline: $7}
zero_optimization: {stage: ${3:-0}}
bf16: {enabled: $bf16}
monitor: {csv: $W/ds.csv}
device: {threads: 1}
YAML
}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; $PRECISION"
bin/ds-worker calibrate --threads 1 --out "$W/rates.json" 2>&1 | sed 's/^/  /'
echo "world,layout,predicted_ms,measured_ms,error" > "$OUT"
for world in $WORLDS; do
  : > "$W/hosts"
  for n in $(seq $((world / SLOTS))); do echo "127.0.0.$n slots=$SLOTS" >> "$W/hosts"; done
  job "$W/auto.yaml"
  bin/ds-launch plan "$W/auto.yaml" --hostfile "$W/hosts" --auto --rates "$W/rates.json" \
    --top 1000 --json > "$W/auto.json"
  bin/ds-launch plan "$W/auto.yaml" --hostfile "$W/hosts" --auto --rates "$W/rates.json" --top 5 \
    | sed 's/^/  /'
  /usr/bin/python3 - "$W/auto.json" > "$W/layouts" <<'PY'
import json, sys
for l in json.load(open(sys.argv[1]))["layouts"]:
    print(l["tp"], l["pp"], l["zero_stage"], l["micro_batch"], l["gradient_accumulation_steps"],
          l["recompute"], l["ulysses"], l["schedule"], l["virtual_stages"], l["predicted_step_ms"],
          l["name"].replace(" ", "_"))
PY
  while read -r tp pp zero micro gas rc sp schedule v predicted name; do
    [[ -n ${ONLY:-} && ! ${name//_/ } =~ $ONLY ]] && continue  # ONLY: a regex of layout names
    job "$W/job.yaml" "{tensor: $tp, pipeline: $pp, ulysses: $sp}" "$zero" "$micro" "$gas" "$rc" \
      "{schedule: $schedule, virtual_stages: $v}"
    rm -f "$W/ds.csv"
    if ! bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" > "$W/ds.log" 2>&1; then
      echo "  $name: FAILED"; tail -3 "$W/ds.log" | sed 's/^/    /'; continue
    fi
    measured=$(tail -n +4 "$W/ds.csv" | cut -d, -f10 | median)
    echo "$world,${name//_/ },$predicted,$measured,$(/usr/bin/python3 -c "print(f'{($predicted-$measured)/$measured:+.3f}')")" >> "$OUT"
    printf '  %-76s predicted %8.1f  measured %8.1f ms\n' "${name//_/ }" "$predicted" "$measured"
  done < "$W/layouts"
done
/usr/bin/python3 - "$OUT" "$W/auto.json" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for world in sorted({r["world"] for r in rows}, key=int):
    mine = [r for r in rows if r["world"] == world]
    fastest = min(mine, key=lambda r: float(r["measured_ms"]))
    chosen = mine[0]  # the plan's order: best predicted first
    errs = [abs(float(r["error"])) for r in mine[:5]]
    print(f"world {world}: {len(mine)} layouts measured; chosen {chosen['layout']} "
          f"{float(chosen['measured_ms']):.1f} ms, fastest measured {fastest['layout']} "
          f"{float(fastest['measured_ms']):.1f} ms: chosen/fastest {float(chosen['measured_ms'])/float(fastest['measured_ms']):.3f}; "
          f"top-5 prediction errors {', '.join(f'{e:.1%}' for e in errs)} (max {max(errs):.1%}); "
          f"all layouts: median |error| {sorted(abs(float(r['error'])) for r in mine)[len(mine)//2]:.1%}")
PY
