#!/usr/bin/env bash
# Every shipped example job (configs/examples/*.yaml) still parses and plans: `ds-launch plan`
# at world 1 and 8 exits 0 and prints the plan. GPU examples must keep the model states and
# the optimizer on the device (device.type cuda, no offload). Then each trains 2 steps on the
# CPU, shrunk (1 layer, width 32, sequences of at most 16, micro-batch 2) but with its own data
# keys and format, on a tiny file written in that format, and must log 2 finite losses: a
# format the example names wrongly (llm.c's header read as tokens) fails here.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
DATA=$R/tools/ds_data/ds-data
T=${TEST_TMPDIR:-$(mktemp -d)}

# A tiny copy of example $1 in directory $2 (job.yaml and its data), or a message why not. The
# data is written as the files the example names are (.bin: llm.c's token files, header and
# all; .tok: ds-data's), so the example's own data.format is what is put to the test.
tiny_job() {
  local cfg=$1 dir=$2
  mkdir -p "$dir"
  if grep -qE "^ *train: .*\.bin" "$cfg"; then
    python3 - "$dir" <<'PY' || return 1
import random, struct, sys
for name in ("train.bin", "val.bin"):
    toks = [random.Random(name).randrange(50257) for _ in range(4096)]
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
        f.write(struct.pack(f"<{len(toks)}H", *toks))
PY
    train=$dir/train.bin; val=$dir/val.bin
  elif grep -q "train: .*\.tok" "$cfg"; then
    "$DATA" addition --digits 3 --train_examples 200 --val_examples 20 --seed 1 \
      --output_dir "$dir" > /dev/null 2>&1 || return 1
    train=$dir/train.tok; val=$dir/val.tok
  else
    echo "no tiny-data writer for the data of $cfg: add one here"; return 1
  fi
  python3 - "$cfg" "$dir" "$train" "$val" > "$dir/job.yaml" <<'PY'
import re, sys
cfg, d, train, val = sys.argv[1:]
subs = {"train_batch_size": "4", "train_micro_batch_size_per_gpu": "2", "n_layer": "1",
        "n_embd": "32", "n_head": "2", "max_seq_len": "16", "train": train,
        "validation": val, "dir": d + "/ckpt", "csv": d + "/metrics.csv", "type": None}
for line in open(cfg):
    m = re.match(r"^(\s*)(\w+):\s*([^#\n]*)", line)
    if m and m.group(2) in subs:
        key, value = m.group(2), subs[m.group(2)]
        if key == "type" and m.group(3).strip() == "cuda":
            value = "cpu"
        if value is not None:
            line = f"{m.group(1)}{key}: {value}\n"
    if m and m.group(2) == "seq_len":
        line = f"{m.group(1)}seq_len: {min(16, int(m.group(3).split()[0]))}\n"
    sys.stdout.write(line)
PY
}
fails=0
n=0
for cfg in "$R"/configs/examples/*.yaml; do
  n=$((n + 1))
  name=${cfg##*/}
  for world in 1 8; do
    if ! out=$(cd "$R" && "$LAUNCH" plan "configs/examples/$name" --world "$world" 2>&1); then
      echo "FAIL: $name at world $world: $out"; fails=$((fails + 1)); continue
    fi
    if ! grep -q "^plan [0-9a-f]*: " <<<"$out"; then
      echo "FAIL: $name at world $world: no plan line"; fails=$((fails + 1)); continue
    fi
    if grep -q "type: cuda" "$cfg" && ! grep -q "optimizer on the device" <<<"$out"; then
      echo "FAIL: $name: a GPU example whose optimizer is not on the device"; fails=$((fails + 1)); continue
    fi
    echo "ok: $name plans at world $world"
  done
done
[[ $n -ge 2 ]] || { echo "FAIL: found $n example configs"; fails=$((fails + 1)); }

for cfg in "$R"/configs/examples/*.yaml; do
  name=${cfg##*/}
  dir=$T/tiny_${name%.yaml}
  if ! why=$(tiny_job "$cfg" "$dir"); then
    echo "FAIL: $name: no tiny job: $why"; fails=$((fails + 1)); continue
  fi
  if ! out=$(timeout 120 "$WORKER" --config "$dir/job.yaml" --steps 2 --threads 1 2>&1); then
    echo "FAIL: $name: 2 tiny steps on the CPU failed:"; tail -5 <<<"$out"; fails=$((fails + 1)); continue
  fi
  losses=$(tail -n +2 "$dir/metrics.csv" | cut -d, -f2 | grep -cE '^[0-9]+\.[0-9]+$')
  if [[ $losses -ne 2 ]]; then
    echo "FAIL: $name: $losses finite losses logged, want 2"; fails=$((fails + 1)); continue
  fi
  echo "ok: $name trains 2 tiny steps on its data format ($(tail -n +2 "$dir/metrics.csv" | cut -d, -f2 | paste -sd' '))"
done
echo "example_configs_test: $fails failure(s)"
[[ $fails -eq 0 ]]
