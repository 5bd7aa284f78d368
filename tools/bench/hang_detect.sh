#!/usr/bin/env bash
# How fast a hang is named, per hang class, with the default fault_tolerance (hang_timeout auto:
# 5 x p99 step time, at least 10 s): a 2 nodes x 2 slots data-parallel job through ds-launch on
# loopback (127.0.0.1, 127.0.0.2), and for the cut network on emulated nodes (network
# namespaces, root only). Per class and run: the seconds from the stall to the report (the stuck
# rank's "stands ... for X s", which starts when its position stopped) and from the injection to
# ds-launch's exit (the stacks captured and every process stopped), beside the collective
# timeouts that would end the same hang without the diagnosis.
#
#   tools/bench/hang_detect.sh            # 3 runs per class
#   RUNS=5 tools/bench/hang_detect.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
BIN=$PWD/bin
BASE=$(mktemp -d)
trap 'pkill -9 -f "$BASE/" 2>/dev/null; tools/emulated_nodes.sh down dsb 2>/dev/null; rm -rf "$BASE"' EXIT
"$BIN/ds-data" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/hosts"

job() {  # job DIR
  mkdir -p "$1"
  cat > "$1/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 1, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10}
training: {train_iters: 1000000}
monitor: {log_interval: 1000}
device: {threads: 1}
YAML
}
running() { [[ $("$BIN/ds-launch" status 2>/dev/null | grep -cE "RUNNING") -ge 4 ]]; }
wait_for() { local end=$((SECONDS + $1)); shift; while ((SECONDS < end)); do "$@" && return 0; sleep 0.1; done; return 1; }
rank_pid() { "$BIN/ds-launch" status 2>/dev/null | awk -v r="$1" '$1 == r && $4 == "RUNNING" {print $3}'; }
# stalled-for seconds of the named rank, and injection -> exit seconds
report() {  # report DIR T0
  local stall end
  stall=$(grep -oE "stands at [^;]* for [0-9.]+ s" "$1/out" | head -1 | grep -oE "[0-9.]+ s$" | cut -d' ' -f1)
  end=$(awk -v a="$2" -v b="$(cat "$1/t1")" 'BEGIN { printf "%.1f", b - a }')
  [[ $2 == - ]] && end=-  # the stall came on its own: no injection time
  echo "${stall:-none} $end"
}
run_case() {  # run_case CLASS I: one job, the hang injected after the warm-up
  local d=$BASE/$1.$2 extra=() env=()
  job "$d"
  case $1 in
    sleep) env=(DS_TEST_HANG=2:1500:FORWARD) ;;
    netns) extra=(--launcher netns --coordinator 10.77.0.254:0)
           printf 'dsb0 slots=2\ndsb1 slots=2\n' > "$d/hosts" ;;
  esac
  local hosts=$BASE/hosts; [[ $1 == netns ]] && hosts=$d/hosts
  env "${env[@]}" "$BIN/ds-launch" "$d/job.yaml" --hostfile "$hosts" --heartbeat 0.5 \
    --node_timeout 600 --grace 1 "${extra[@]}" > "$d/out" 2>&1 &
  local pid=$!
  wait_for 60 running || { echo "$1: ranks not running" >&2; kill -9 $pid; return 1; }
  sleep 4  # past the warm-up: the deadline is measured
  local t0
  case $1 in
    sleep) t0=- ;;  # the stall comes on its own at step 1500
    sigstop) t0=$(date +%s.%N); kill -STOP "$(rank_pid 1)" ;;
    netns) t0=$(date +%s.%N); tools/emulated_nodes.sh cut dsb 1 ;;
  esac
  local end=$((SECONDS + 180))
  while kill -0 $pid 2>/dev/null && ((SECONDS < end)); do sleep 0.05; done
  date +%s.%N > "$d/t1"
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  pkill -9 -CONT -f "$d/job.yaml" 2>/dev/null; pkill -9 -f "$d/job.yaml" 2>/dev/null
  [[ $1 == netns ]] && tools/emulated_nodes.sh rate dsb off  # the link healed for the next run
  report "$d" "$t0"
}

classes=(sleep sigstop)
if [[ $(id -u) == 0 ]] && command -v ip >/dev/null && tools/emulated_nodes.sh up dsb 2 >/dev/null 2>&1; then
  classes+=(netns)
fi
echo "hang detection, $RUNS runs per class, fault_tolerance defaults (auto, floor 10 s); ds-runtime $(git rev-parse --short HEAD)"
printf "%-28s %-34s %-30s\n" "class" "stall -> report s (each run)" "injection -> job ended s"
for c in "${classes[@]}"; do
  stalls=() ends=()
  for ((i = 0; i < RUNS; i++)); do
    read -r s e < <(run_case "$c" "$i")
    stalls+=("$s"); ends+=("$e")
  done
  case $c in
    sleep) name="rank sleeps in FORWARD" ;;
    sigstop) name="rank SIGSTOPped" ;;
    netns) name="node's network cut (netns)" ;;
  esac
  printf "%-28s %-34s %-30s\n" "$name" "${stalls[*]}" "${ends[*]}"
done
echo "without the diagnosis the same hang ends at a collective timeout: ds-runtime's Gloo ops 60 s"
echo "(naming the peer it waited for, not the instruction); PyTorch Gloo 30 min, PyTorch NCCL and"
echo "DeepSpeed 10 min, torchtitan's training timeout 100 s (reference figures, not run here)"
