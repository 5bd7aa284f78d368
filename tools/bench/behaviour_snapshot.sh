#!/usr/bin/env bash
# Records what users see from a build, so that a refactoring can show it changed nothing:
#
#   tools/bench/behaviour_snapshot.sh OUT            # record into OUT (bin/ must be built)
#   tools/bench/behaviour_snapshot.sh OUT --compare BEFORE
#
# OUT gets the deterministic columns (step, loss, lr, grad_norm, skipped, loss_scale,
# val_loss) of:
#   addition.csv      the addition example (configs/examples/addition.yaml), 300 steps,
#                     checkpoints every 100
#   resume.csv        steps 201-300 again, resumed from BEFORE's step-200 checkpoint when
#                     comparing (a checkpoint written by the old build loads in the new one),
#                     else from this run's own
#   dp*_s*.csv        ds-launch DP = 2 (stages 0-3) and DP = 4 (stages 2-3) over Gloo, and
#                     DP = 2 stages 1-2 with the model states on the host-emulated device
#   trainer_dp.log    every loss curve trainer_dp_test trains (DS_TEST_LOSS_LOG)
# With --compare, each file is compared byte for byte with BEFORE's and the differences named.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=$(realpath -m "$1")
BEFORE=""
if [[ "${2:-}" == "--compare" ]]; then BEFORE=$(realpath "$3"); fi
rm -rf "$OUT"; mkdir -p "$OUT"
W=$OUT/work; mkdir -p "$W"
cols() { cut -d, -f1,2,3,4,8,9,11 "$1"; }

# The addition example, 300 steps, a checkpoint every 100.
bin/ds-data addition --digits 3 --train_examples 50000 --val_examples 2000 --seed 1 \
  --output_dir "$W/data" > /dev/null
sed -e "s|runs/addition|$W|g" -e 's/train_iters: 3000/train_iters: 300/' \
  -e 's/save_interval: 1000/save_interval: 100/' -e 's/keep_last: 2/keep_last: 5/' \
  configs/examples/addition.yaml > "$W/addition.yaml"
bin/ds-worker --config "$W/addition.yaml" > "$W/addition.log" 2>&1
cols "$W/metrics.csv" > "$OUT/addition.csv"
cp -r "$W/ckpt/step_00000200" "$OUT/ckpt_step200"

# Resume steps 201-300 from a step-200 checkpoint (BEFORE's when comparing).
src=$OUT/ckpt_step200; [[ -n "$BEFORE" ]] && src=$BEFORE/ckpt_step200
rm -rf "$W/rckpt"; mkdir -p "$W/rckpt"; cp -r "$src" "$W/rckpt/step_00000200"
sed -e "s|$W/ckpt|$W/rckpt|" -e "s|$W/metrics.csv|$W/resume_metrics.csv|" \
  -e "s|load: latest.*|load: $W/rckpt/step_00000200|" \
  "$W/addition.yaml" > "$W/resume.yaml"
bin/ds-worker --config "$W/resume.yaml" > "$W/resume.log" 2>&1
cols "$W/resume_metrics.csv" > "$OUT/resume.csv"

# Data parallelism through ds-launch (real processes, Gloo).
bin/ds-data addition --digits 2 --train_examples 4000 --val_examples 100 \
  --output_dir "$W/dpdata" > /dev/null
printf '127.0.0.1 slots=2\n' > "$W/one"
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$W/two"
dpjob() {  # FILE MICRO STAGE CSV DEVICE
  cat > "$1" <<YAML
train_batch_size: 16
train_micro_batch_size_per_gpu: $2
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}
zero_optimization: {stage: $3, reduce_bucket_size: 5000, stage3_param_persistence_threshold: 100}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10}
data: {train: $W/dpdata/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: 20}
monitor: {csv: $4}
device: {type: $5, threads: 1}
YAML
}
launch() {  # NAME WORLD STAGE DEVICE
  local hosts=$W/one; [[ $2 == 4 ]] && hosts=$W/two
  dpjob "$W/$1.yaml" $((16 / $2)) "$3" "$W/$1.csv" "$4"
  timeout 300 bin/ds-launch "$W/$1.yaml" --hostfile "$hosts" --worker bin/ds-worker \
    --agent bin/ds-agent --heartbeat 0.5 > "$W/$1.log" 2>&1
  cols "$W/$1.csv" > "$OUT/$1.csv"
}
for s in 0 1 2 3; do launch dp2_s$s 2 $s cpu; done
for s in 2 3; do launch dp4_s$s 4 $s cpu; done
for s in 1 2; do DS_ACCELERATOR=host launch dp2_s${s}_device 2 $s cuda; done

# Every curve trainer_dp_test trains.
bazel build //runtime/worker:trainer_dp_test > /dev/null 2>&1
DS_TEST_LOSS_LOG=$OUT/trainer_dp.log TEST_TMPDIR=$W bazel-bin/runtime/worker/trainer_dp_test \
  > "$W/trainer_dp_test.log" 2>&1 || { echo "trainer_dp_test failed"; tail "$W/trainer_dp_test.log"; }

if [[ -n "$BEFORE" ]]; then
  bad=0
  for f in "$BEFORE"/*.csv "$BEFORE"/*.log; do
    name=${f##*/}
    if cmp -s "$f" "$OUT/$name"; then echo "same: $name ($(wc -l < "$f") lines)"
    else echo "DIFFERENT: $name"; bad=1; fi
  done
  exit $bad
fi
echo "snapshot: $(ls "$OUT" | tr '\n' ' ')"
