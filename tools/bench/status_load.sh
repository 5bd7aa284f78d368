#!/usr/bin/env bash
# Status RPC latency with 100 concurrent clients during a running job, and the job's step
# time with and without that load. The job: one ds-worker (1 thread) training a small GPT
# through ds-launch; the clients: status_latency_bench pointed at the job's coordinator,
# each client calling Job.Status every INTERVAL_MS (default 100 ms: 1000 calls/s in all).
#   tools/bench/status_load.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
INTERVAL_MS=${INTERVAL_MS:-100}
[[ -x bin/ds-launch ]] || tools/build.sh
bazel build //launcher/coordinator:status_latency_bench >/dev/null 2>&1
BENCH=bazel-bin/launcher/coordinator/status_latency_bench
W=$(mktemp -d)
export DS_RUNTIME_HOME=$W/home
cleanup() { bin/ds-launch stop >/dev/null 2>&1 || true; sleep 2; rm -rf "$W"; }
trap cleanup EXIT
bin/ds-data addition --digits 3 --train_examples 20000 --val_examples 100 --output_dir "$W/data" >/dev/null 2>&1
cat > "$W/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 32
optimizer: {type: AdamW, params: {lr: 0.001}}
model: {family: gpt2, n_layer: 3, n_embd: 128, n_head: 4, vocab_size: 16, max_seq_len: 13}
data: {train: $W/data/train.tok, seq_len: 13}
training: {train_iters: 1000000}
monitor: {csv: $W/metrics.csv}
device: {threads: 1}
YAML
printf '127.0.0.1 slots=1\n' > "$W/hosts"
bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" > "$W/launch.log" 2>&1 &
for _ in $(seq 100); do [[ -s $W/metrics.csv ]] && break; sleep 0.1; done
sleep 3
rows() { wc -l < "$W/metrics.csv"; }
a=$(rows); sleep 6; b=$(rows)
dir=$(cat "$DS_RUNTIME_HOME/current")
DS_BENCH_ADDRESS=$(cat "$dir/coordinator") DS_BENCH_TOKEN_FILE=$dir/token \
  "$BENCH" 100 $((6000 / INTERVAL_MS)) 0 "$INTERVAL_MS"
c=$(rows)
median() { sed -n "$1,$2p" "$W/metrics.csv" | cut -d, -f10 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
base=$(median $((a + 1)) "$b"); load=$(median $((b + 1)) "$c")
echo "step time (median ms): without status load $base over $((b - a)) steps, with it $load over $((c - b)) steps"
awk -v a="$base" -v b="$load" 'BEGIN {printf "change: %+.1f%%\n", (b - a) / a * 100}'
