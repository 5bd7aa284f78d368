#!/usr/bin/env bash
# ds-worker, ds-model and ds-data as a user runs them: bad inputs give one clear error that
# names the file and exit non-zero with nothing half-written; a run split by a restart
# continues the exact loss curve of a straight run.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
WORKER=$R/runtime/worker/ds-worker
MODEL=$R/tools/ds_model/ds-model
DATA=$R/tools/ds_data/ds-data
CKPT=$R/tools/ds_ckpt/ds-ckpt
T=${TEST_TMPDIR:-$(mktemp -d)}/cli
rm -rf "$T"; mkdir -p "$T"
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

# expect_error NAME PATTERN... -- CMD...: non-zero exit and every pattern in stderr.
expect_error() {
  local name=$1; shift
  local patterns=()
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [[ $rc -eq 0 ]]; then fail "$name: exit 0"; echo "$out" | tail -5; return; fi
  for p in "${patterns[@]}"; do
    if ! grep -qF -- "$p" <<<"$out"; then fail "$name: no \"$p\" in: $(tail -3 <<<"$out")"; return; fi
  done
  pass "$name"
}

"$DATA" addition --digits 2 --train_examples 3000 --val_examples 200 --output_dir "$T/data" >/dev/null 2>&1 \
  || fail "ds-data addition"
"$MODEL" --preset gpt2-tiny --vocab_size 16 --max_seq_len 16 --output "$T/model.pbtxt" >/dev/null \
  || fail "ds-model"

job() {  # job FILE STEPS EXTRA
  cat > "$1" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {graph: $T/model.pbtxt}
data: {train: $T/data/train.tok, validation: $T/data/val.tok, seq_len: 10}
training: {train_iters: $2}
checkpoint: {dir: $T/ckpt, save_interval: 3, load: latest}
monitor: {csv: $T/metrics.csv, eval_interval: 3, eval_iters: 2}
$3
YAML
}

# --- bad inputs ---
job "$T/typo.yaml" 6 "zero_optimization: {stagee: 1}"
expect_error "unknown config key" "typo.yaml" "zero_optimization.stagee" "did you mean \"stage\"" -- \
  "$WORKER" --config "$T/typo.yaml"
sed 's/op: "gelu"/op: "gelux"/' "$T/model.pbtxt" > "$T/badop.pbtxt"
job "$T/badop.yaml" 6 ""
sed -i "s|$T/model.pbtxt|$T/badop.pbtxt|" "$T/badop.yaml"
expect_error "unknown op in graph" "badop.pbtxt" "h.0.mlp.gelu" "unknown op \"gelux\"" -- \
  "$WORKER" --config "$T/badop.yaml"
head -c 20 "$T/data/train.tok" > "$T/trunc.tok"
job "$T/trunc.yaml" 6 ""
sed -i "s|$T/data/train.tok|$T/trunc.tok|" "$T/trunc.yaml"
expect_error "truncated token file" "trunc.tok" -- "$WORKER" --config "$T/trunc.yaml"
[[ ! -e $T/ckpt ]] && pass "failed runs leave no checkpoint" || fail "a failed run wrote $T/ckpt"
expect_error "missing config" "nope.yaml" -- "$WORKER" --config "$T/nope.yaml"

# --- 6 steps straight vs 3 + restart + 3 ---
job "$T/job.yaml" 6 ""
"$WORKER" --config "$T/job.yaml" >/dev/null 2>&1 || fail "straight run"
straight=$(cut -d, -f1,2 "$T/metrics.csv" | tail -n +2)
rm -rf "$T/ckpt" "$T/metrics.csv"
"$WORKER" --config "$T/job.yaml" --steps 3 >/dev/null 2>&1 || fail "first half"
out=$("$WORKER" --config "$T/job.yaml" 2>&1) || fail "second half"
grep -q "resumed from step 3" <<<"$out" && pass "resume announced" || fail "no resume line"
split=$(cut -d, -f1,2 "$T/metrics.csv" | tail -n +2)
if [[ "$straight" == "$split" && $(wc -l <<<"$split") -eq 6 ]]; then pass "resumed loss curve is identical"
else fail "loss curves differ:"; paste <(echo "$straight") <(echo "$split"); fi

# --- consolidate (zero_to_fp32) and start a new run from those weights ---
if "$CKPT" consolidate --input "$T/ckpt" --output "$T/fp32.safetensors" >/dev/null 2>&1 &&
   "$CKPT" inspect "$T/fp32.safetensors" 2>/dev/null | grep -q "h.1.mlp.proj.weight"; then
  pass "ds-ckpt consolidate writes the fp32 weights"
else fail "ds-ckpt consolidate"; fi
job "$T/fresh.yaml" 2 ""
sed -i "s|checkpoint: {dir: $T/ckpt, save_interval: 3, load: latest}|checkpoint: {dir: $T/ckpt2}|" "$T/fresh.yaml"
"$WORKER" --config "$T/fresh.yaml" --init-weights "$T/fp32.safetensors" --csv "$T/fresh.csv" >/dev/null 2>&1 \
  && pass "training starts from consolidated weights" || fail "--init-weights from consolidated weights"

# --- checkpoint corruption is caught, naming the tensor ---
"$CKPT" verify "$T/ckpt" >/dev/null 2>&1 && pass "ds-ckpt verify" || fail "ds-ckpt verify on a good checkpoint"
step_dir=$T/ckpt/$(cat "$T/ckpt/latest")
size=$(stat -c %s "$step_dir/model.safetensors")
printf '\x55' | dd of="$step_dir/model.safetensors" bs=1 seek=$((size - 3)) conv=notrunc status=none
expect_error "corrupted checkpoint" "model.safetensors" "checksum" -- "$WORKER" --config "$T/job.yaml" --eval

echo "worker_cli_test: $fails failure(s)"
[[ $fails -eq 0 ]]
