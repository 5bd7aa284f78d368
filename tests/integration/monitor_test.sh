#!/usr/bin/env bash
# DeepSpeed's monitoring as users know it, through ds-launch (2 ranks, rank 0 writes): the
# tensorboard block's event files read back with TensorBoard's own EventAccumulator (the PyPI
# package, in the tools venv tools/setup.sh makes: DS_TOOLS_VENV), with the loss, lr, grad
# norm, loss scale, tokens/s, memory and the wall_clock_breakdown times on DeepSpeed's samples
# axis, the loss equal to monitor.csv's; csv_monitor's one file per tag with DeepSpeed's names;
# steps_per_print's step and time lines; wandb warned off; the flops profiler's report (DeepSpeed's
# layout, per block and op, MFU); comms_logger's table; tools/plot_metrics.py's PNG.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
READ=$R/tools/read_tensorboard.py
PLOT=$R/tools/plot_metrics.py
BASE=${TEST_TMPDIR:-$(mktemp -d)}/monitor
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
PY=${DS_TOOLS_VENV:-}/bin/python
if [[ -z ${DS_TOOLS_VENV:-} ]] || ! "$PY" -c "import tensorboard" 2>/dev/null; then
  echo "monitor_test: needs the tools venv with tensorboard: run tools/setup.sh and pass"
  echo "  --test_env=DS_TOOLS_VENV=<its path> (tools/test.sh does both)"
  exit 1
fi
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
cat > "$BASE/job.yaml" <<YAML
train_batch_size: 16
train_micro_batch_size_per_gpu: 4
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 1, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, validation: $BASE/data/val.tok, seq_len: 10}
training: {train_iters: 12}
monitor: {csv: $BASE/metrics.csv, eval_interval: 6, eval_iters: 2}
steps_per_print: 4
wall_clock_breakdown: true
fp16: {enabled: true}
tensorboard: {enabled: true, output_path: $BASE/tb, job_name: run}
csv_monitor: {enabled: true, output_path: $BASE/csv, job_name: run}
wandb: {enabled: true, project: demo}
flops_profiler: {enabled: true, profile_step: 3, top_modules: 2, output_file: $BASE/flops.txt}
comms_logger: {enabled: true}
device: {threads: 1}
YAML
printf '127.0.0.1 slots=2\n' > "$BASE/hosts"
timeout 120 "$LAUNCH" "$BASE/job.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
  --heartbeat 0.5 > "$BASE/out" 2>&1 && pass "2-rank job with the monitors succeeds" \
  || { fail "job: exit $?"; tail -15 "$BASE/out"; }
grep -q "fp16 on the CPU: parameters and gradients are stored in f16, activations in fp32, the linear layers' products in fp32" \
  "$BASE/out" && pass "fp16 on the CPU says how it runs" || fail "no line saying how fp16 runs on the CPU"

"$PY" "$READ" "$BASE/tb/run" > "$BASE/scalars.txt" 2> "$BASE/read.err" \
  || { fail "TensorBoard could not read the event files: $(tail -3 "$BASE/read.err")"; }
count() { awk -v t="$1" '$1 == t' "$BASE/scalars.txt" | wc -l; }
for tag in train_loss lr grad_norm loss_scale tokens_per_s peak_rss_MiB elapsed_time_ms_forward \
    elapsed_time_ms_backward elapsed_time_ms_step elapsed_time_ms_communication; do
  n=$(count "Train/Samples/$tag")
  [[ $n == 12 ]] && pass "TensorBoard reads 12 x Train/Samples/$tag" || fail "Train/Samples/$tag: $n scalars"
done
[[ $(count Train/Samples/val_loss) == 2 ]] && pass "TensorBoard reads the 2 validation losses" \
  || fail "val_loss: $(count Train/Samples/val_loss)"
# DeepSpeed's x-axis: samples; the loss before the step's samples are counted, lr after.
steps=$(awk '$1 == "Train/Samples/train_loss" { printf "%s ", $2 }' "$BASE/scalars.txt")
[[ $steps == "0 16 32 48 64 80 96 112 128 144 160 176 " ]] && pass "train_loss on the samples axis (0, 16, ..., 176)" \
  || fail "train_loss steps: $steps"
[[ $(awk '$1 == "Train/Samples/lr" { print $2 }' "$BASE/scalars.txt" | tail -1) == 192 ]] \
  && pass "lr after the step's samples (last at 192)" || fail "lr steps"
# The same losses as monitor.csv (float32 in the event file).
paste -d' ' <(awk '$1 == "Train/Samples/train_loss" { print $3 }' "$BASE/scalars.txt") \
  <(tail -n +2 "$BASE/metrics.csv" | cut -d, -f2) |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * ($2 < 0 ? -$2 : $2) + 1e-6) bad++; n++ }
       END { exit !(n == 12 && bad == 0) }' \
  && pass "the event files' losses are monitor.csv's" || fail "losses differ from monitor.csv"

[[ $(head -1 "$BASE/csv/run/Train_Samples_train_loss.csv") == "step,train_loss" ]] \
  && [[ $(tail -n +2 "$BASE/csv/run/Train_Samples_train_loss.csv" | wc -l) == 12 ]] \
  && pass "csv_monitor: Train_Samples_train_loss.csv, header step,train_loss, 12 rows" \
  || fail "csv_monitor layout: $(ls "$BASE/csv/run" 2>&1 | head -3)"
[[ $(ls "$BASE/csv/run" | wc -l) -ge 11 ]] && pass "csv_monitor: one file per tag ($(ls "$BASE/csv/run" | wc -l))" \
  || fail "csv_monitor files: $(ls "$BASE/csv/run")"
[[ $(ls "$BASE/tb/run" | grep -c '^events.out.tfevents\.') == 1 ]] && pass "one event file (rank 0 only)" \
  || fail "event files: $(ls "$BASE/tb/run")"
grep -q "\[Rank 0\] step=8, skipped=[0-9]*, lr=\[" "$BASE/out" && pass "steps_per_print 4: DeepSpeed's step line at step 8" \
  || fail "no step=8 line"
grep -q "\[Rank 0\] time (ms) | forward: [0-9.]* | backward: [0-9.]* | step: [0-9.]* | communication: " "$BASE/out" \
  && pass "wall_clock_breakdown: the time line" || fail "no time line"
[[ $(grep -c "\[Rank 0\] step=" "$BASE/out") == 3 ]] && pass "3 step lines for 12 steps (rank 0 only)" \
  || fail "$(grep -c "\[Rank 0\] step=" "$BASE/out") step lines"
grep -q '"wandb" is enabled, but it needs a network service' "$BASE/out" && pass "wandb warned off" \
  || fail "no wandb warning"

# The flops profiler's report at step 3, in DeepSpeed's layout, with the MFU.
grep -q "^Profile Summary at step 3:" "$BASE/flops.txt" && pass "flops_profiler: the report at profile_step 3" \
  || fail "no flops profiler report: $(head -3 "$BASE/flops.txt" 2>&1)"
for label in "fwd flops per GPU:" "fwd latency:" "iter latency:" "samples/second:" "MFU = FLOPS per GPU / peak FLOPS per GPU:" \
    "Top 2 modules in terms of params, MACs or fwd latency" "  block.0: " "h.0.mlp.fc (linear): "; do
  grep -qF -- "$label" "$BASE/flops.txt" || fail "flops report lacks \"$label\""
done
grep -q "^MFU.*% of .*FLOPS (measured" "$BASE/flops.txt" && pass "flops_profiler: MFU against the measured peak: $(grep -o '[0-9.]*% of [0-9.]* [GT]FLOPS' "$BASE/flops.txt")" \
  || fail "no MFU figure"

# comms_logger: DeepSpeed's table of the plan's collectives (12 steps x 4 micro-batches: the
# gradient all-reduce per step over the 2 ranks, and the loss / norm scalars).
grep -q "Comm. Op            Message Size        Count               Total Latency(ms)" "$BASE/out" \
  && pass "comms_logger: DeepSpeed's summary table" || fail "no comms_logger summary"
rows=$(awk '/^\[rank 0\] all_reduce$/ { on = 1; next } on && /^\[rank 0\] +[0-9.]+ [KMG]?B +[0-9]+/ { n++; next } { on = 0 } END { print n + 0 }' "$BASE/out")
[[ $rows -ge 1 ]] && pass "comms_logger: $rows all_reduce message size(s) with count, latency and bandwidths" \
  || { fail "comms_logger rows"; grep -A6 "Comm. Op" "$BASE/out"; }

# The picture: tools/plot_metrics.py draws the run's curves from monitor.csv.
if "$PLOT" "$BASE/metrics.csv" -o "$BASE/curves.png" > "$BASE/plot.out" 2>&1 \
    && [[ $(head -c 8 "$BASE/curves.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]; then
  pass "plot_metrics.py wrote a PNG of the curves ($(stat -c %s "$BASE/curves.png") bytes)"
else fail "plot_metrics.py: $(tail -3 "$BASE/plot.out")"; fi

echo "monitor_test: $fails failure(s)"
[[ $fails -eq 0 ]]
