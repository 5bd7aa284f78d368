#!/usr/bin/env bash
# Recovery after a killed worker, and what the in-memory copies cost (issue 36's figures).
#
# 1. Kill -> next step: a 2 nodes x 2 slots data-parallel job through ds-launch on loopback
#    (127.0.0.1, 127.0.0.2; GPT-2 with 4 layers of 256, vocabulary 8192, 64 tokens, 5.3 M
#    parameters; fp32, ZeRO-1, micro 4), one
#    rank SIGKILLed KILLS times (a different one each time), --max_restarts KILLS. Per kill: the
#    seconds from the kill to the next monitor.csv row (the first step after the restart; polled
#    every 0.1 s) and the steps redone. Three ways, same interval:
#      memory  fault_tolerance.in_memory_interval 1 (the agents' copies)
#      disk    checkpoint.save_interval 1 (the sharded checkpoint on disk every step)
#      torch   PyTorch DDP (gloo, 4 ranks) under torchrun --max-restarts, torch.save every step
#              (tools/bench/torch_restart.py, the peers' venv)
# 2. The copy's cost: GPT-2 124M (12 layers of 768, vocabulary 50304, 256 tokens, micro 1), bf16,
#    ZeRO-2, DP 4 on the two loopback nodes: the median and mean step time over steps 3-STEPS
#    without copies and with in_memory_interval 1 and 10 (the mean carries the copies' steps),
#    and the copier's own figures (time the loop spends on a copy, time the thread sends).
#
#   tools/bench/recovery.sh                 # KILLS=10 STEPS=22 (interval 10 copies at 10 and 20)
#   PART=1 tools/bench/recovery.sh          # only the kills (PART=2: only the copy's cost)
set -uo pipefail
cd "$(dirname "$0")/../.."
KILLS=${KILLS:-10}; STEPS=${STEPS:-22}; PART=${PART:-all}
BIN=$PWD/bin
PEER_PY=${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python
BASE=$(mktemp -d)
trap 'pkill -9 -f "$BASE/" 2>/dev/null; rm -rf "$BASE"' EXIT
export DS_RUNTIME_HOME=$BASE/home
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/hosts"
tokens() {  # tokens FILE VOCAB: 400000 random uint16 tokens
  python3 -c "import array, random; random.seed(0); array.array('H', (random.randrange($2) for _ in range(400000))).tofile(open('$1', 'wb'))"
}
tokens "$BASE/small.bin" 8192
wait_for() { local end=$((SECONDS + $1)); shift; while ((SECONDS < end)); do "$@" && return 0; sleep 0.1; done; return 1; }
rows() { { wc -l < "$1"; } 2>/dev/null || echo 0; }
median() { sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "-"}'; }
rank_pid() { "$BIN/ds-launch" status 2>/dev/null | awk -v r="$1" '$1 == r && $4 == "RUNNING" {print $3}'; }
last_step() { tail -1 "$1" | cut -d, -f1; }

ds_job() {  # ds_job DIR EXTRA
  mkdir -p "$1"
  cat > "$1/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 4
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
zero_optimization: {stage: 1}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 4, vocab_size: 8192, max_seq_len: 64}
data: {train: $BASE/small.bin, format: uint16, seq_len: 64, shuffle: true}
training: {train_iters: 1000000}
monitor: {log_interval: 1000, csv: $1/metrics.csv}
device: {threads: 1}
$2
YAML
}

# kills DIR KIND: KILLS kills of the running job; one line per kill into DIR/kills: the seconds
# from the kill to the end of the first step after the restart (polled every 0.1 s: an upper
# bound). The restart is seen in the job's own lines: ds-worker's "[rank 0] resumed from step S",
# torch_restart.py's "start S".
starts() { if [[ $2 == torch ]]; then grep -c "^start" "$1/steps"; else grep -c "^\[rank 0\] resumed from step" "$1/out"; fi; }
# The steps done twice over the run: every row whose step is not past the row before it replays
# that many (a restart that resumed from the last step done replays none).
redone() {
  if [[ $2 == torch ]]; then grep "^step" "$1/steps" | awk '{print $2}'; else tail -n +2 "$1/metrics.csv" | cut -d, -f1; fi |
    awk 'NR > 1 && $1 <= p { n += p - $1 + 1 } { p = $1 } END { print n + 0 }'
}
# The median step time without the restarts: the time between consecutive rows (torch) or the
# row's step_ms (ds-runtime), over the steady steps.
step_ms() {
  if [[ $2 == torch ]]; then grep "^step" "$1/steps" | awk 'NR > 1 { d = ($3 - t) * 1000; if (d > 0 && d < 5000) print d } { t = $3 }'
  else tail -n +2 "$1/metrics.csv" | cut -d, -f10; fi | median
}
done_rows() { if [[ $2 == torch ]]; then grep -c "^step" "$1/steps"; else rows "$1/metrics.csv"; fi; }
kills() {
  local d=$1 kind=$2 i pid s0 n0 t0 t1 before
  for ((i = 0; i < KILLS; ++i)); do
    n0=$(done_rows "$d" $kind)
    wait_for 120 more_done "$d" $kind $((n0 + 20)) || { echo "$kind: no progress before kill $i" >&2; return 1; }
    if [[ $kind == torch ]]; then
      pid=$(pgrep -f "torch_restart.py.*$BASE" | grep -v "^$(cat "$d/pid")\$" | sed -n "$((i % 4 + 1))p")
    else
      pid=$(rank_pid $((i % 4)))
    fi
    [[ -n $pid ]] || { echo "$kind: no worker to kill" >&2; return 1; }
    s0=$(starts "$d" $kind)
    t0=$(date +%s.%N)
    kill -KILL "$pid"
    wait_for 120 more_starts "$d" $kind "$s0" || { echo "$kind: no restart after kill $i" >&2; return 1; }
    n0=$(done_rows "$d" $kind)
    wait_for 120 more_done "$d" $kind "$n0" || { echo "$kind: no step after kill $i" >&2; return 1; }
    t1=$(date +%s.%N)
    echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" >> "$d/kills"
  done
}
more_starts() { (($(starts "$1" "$2") > $3)); }
more_done() { (($(done_rows "$1" "$2") > $3)); }
report() {  # report KIND DIR
  printf "%-12s kill -> next step: median %s s over %d kills (each: %s); %s step(s) redone in all; median step %.1f ms\n" \
    "$1" "$(median < "$2/kills")" "$(wc -l < "$2/kills")" "$(paste -sd' ' "$2/kills")" \
    "$(redone "$2" "${1%% *}")" "$(step_ms "$2" "${1%% *}")"
}

if [[ $PART == all || $PART == 1 ]]; then
  echo "== kill -> next step, 2 nodes x 2 ranks on loopback, $KILLS kills each ($(nproc) cores)"
  # The step time with neither: what the two ways of keeping state cost per step.
  d=$BASE/none; ds_job "$d" ""
  sed -i 's/train_iters: 1000000/train_iters: 60/' "$d/job.yaml"
  "$BIN/ds-launch" "$d/job.yaml" --hostfile "$BASE/hosts" > "$d/out" 2>&1
  printf "%-12s no copies, no checkpoint: median step %.1f ms\n" none "$(tail -n +12 "$d/metrics.csv" | cut -d, -f10 | median)"
  for kind in memory disk; do
    d=$BASE/$kind
    extra="fault_tolerance: {in_memory_interval: 1}"
    [[ $kind == disk ]] && extra="checkpoint: {dir: $d/ckpt, save_interval: 1, keep_last: 2}"
    ds_job "$d" "$extra"
    "$BIN/ds-launch" "$d/job.yaml" --hostfile "$BASE/hosts" --max_restarts "$KILLS" --heartbeat 0.5 \
      --grace 1 > "$d/out" 2>&1 &
    echo $! > "$d/pid"
    kills "$d" $kind && report $kind "$d"
    kill -INT "$(cat "$d/pid")" 2>/dev/null; wait "$(cat "$d/pid")" 2>/dev/null
  done
  if [[ -x $PEER_PY ]]; then
    d=$BASE/torch; mkdir -p "$d"
    OMP_NUM_THREADS=1 "$PEER_PY" -m torch.distributed.run --standalone --nproc_per_node 4 \
      --max-restarts "$KILLS" tools/bench/torch_restart.py --ckpt "$d/ckpt.pt" --steps_log "$d/steps" \
      > "$d/out" 2>&1 &
    echo $! > "$d/pid"
    wait_for 120 test -s "$d/steps"
    kills "$d" torch && report "torch $("$PEER_PY" -c 'import torch; print(torch.__version__)')" "$d"
    kill -INT "$(cat "$d/pid")" 2>/dev/null; wait "$(cat "$d/pid")" 2>/dev/null
  else
    echo "torch: no peers' venv ($PEER_PY; DS_PEERS=1 tools/setup.sh makes it)"
  fi
fi

if [[ $PART == all || $PART == 2 ]]; then
  echo "== the copy's cost: GPT-2 124M, bf16, ZeRO-2, DP 4 (2 nodes x 2 ranks, 1 thread each), $STEPS steps"
  tokens "$BASE/gpt2.bin" 50304
  for interval in 0 1 10; do
    d=$BASE/cost$interval; mkdir -p "$d"
    cat > "$d/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 1
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
bf16: {enabled: true}
zero_optimization: {stage: 2}
model: {family: gpt2, n_layer: 12, n_embd: 768, n_head: 12, vocab_size: 50304, max_seq_len: 256}
data: {train: $BASE/gpt2.bin, format: uint16, seq_len: 256}
training: {train_iters: $STEPS}
monitor: {csv: $d/metrics.csv}
device: {threads: 1}
fault_tolerance: {in_memory_interval: $interval}
YAML
    "$BIN/ds-launch" "$d/job.yaml" --hostfile "$BASE/hosts" > "$d/out" 2>&1 || { tail -5 "$d/out"; continue; }
    ms=$(tail -n +4 "$d/metrics.csv" | cut -d, -f10 | median)
    mean=$(tail -n +4 "$d/metrics.csv" | cut -d, -f10 | awk '{s += $1} END {printf "%.1f", s / NR}')
    echo "in_memory_interval $interval: median step $ms ms, mean $mean ms (steps 3-$STEPS)"
    grep -o "in-memory copies (rank 0).*" "$d/out" | head -1
  done
fi
