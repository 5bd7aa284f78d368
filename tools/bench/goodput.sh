#!/usr/bin/env bash
# Goodput under repeated failures (issue 36): the same job run twice through ds-launch, 2 nodes x
# 2 slots on loopback (127.0.0.1, 127.0.0.2; GPT-2 with 4 layers of 256, vocabulary 8192, 64
# tokens, 5.3 M parameters; fp32, ZeRO-1, micro 4, one thread per rank), with
# fault_tolerance.in_memory_interval 1:
#   failure-free   S steps, no kills
#   killed         the same S steps, a random worker SIGKILLed every PERIOD seconds until the
#                  job ends (--max_restarts 1000; each restart resumes from the agents' copies)
# S is chosen so the failure-free run lasts MINUTES (a 200-step calibration run measures the
# rate first). Printed: both wall times (launch to exit), the kills, goodput = failure-free time /
# killed time (steps per second kept), the seconds each kill cost, and the killed run's per-step
# losses beside the failure-free run's (the last row of each step; the same data order by step).
#
#   tools/bench/goodput.sh                   # MINUTES=10 PERIOD=60
#   MINUTES=2 PERIOD=30 tools/bench/goodput.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
MINUTES=${MINUTES:-10}; PERIOD=${PERIOD:-60}
BIN=$PWD/bin
BASE=$(mktemp -d)
trap 'pkill -9 -f "$BASE/" 2>/dev/null; [[ -n ${KEEP:-} ]] && echo "kept $BASE" || rm -rf "$BASE"' EXIT
export DS_RUNTIME_HOME=$BASE/home DS_COPY_ROOT=$BASE/copies
mkdir -p "$DS_COPY_ROOT"
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/hosts"
python3 -c "import array, random; random.seed(0); array.array('H', (random.randrange(8192) for _ in range(400000))).tofile(open('$BASE/tokens.bin', 'wb'))"

job() {  # job DIR STEPS
  mkdir -p "$1"
  cat > "$1/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 4
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
zero_optimization: {stage: 1}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 4, vocab_size: 8192, max_seq_len: 64}
data: {train: $BASE/tokens.bin, format: uint16, seq_len: 64, shuffle: true}
training: {train_iters: $2}
monitor: {log_interval: 1000000, csv: $1/metrics.csv}
device: {threads: 1}
fault_tolerance: {in_memory_interval: 1}
YAML
}
run() {  # run DIR: launches, waits; prints the wall seconds
  local t0; t0=$(date +%s.%N)
  "$BIN/ds-launch" "$1/job.yaml" --hostfile "$BASE/hosts" --worker "$BIN/ds-worker" \
    --agent "$BIN/ds-agent" --heartbeat 0.5 --node_timeout 2 --grace 1 --max_restarts 1000 \
    > "$1/out" 2>&1 &
  echo $! > "$1/pid"
  [[ -n ${KILLER:-} ]] && killer "$1" > /dev/null 2>&1 &
  wait "$(cat "$1/pid")"; echo "$?" > "$1/rc"
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}
# Every PERIOD seconds while the job runs: one RUNNING worker (a row of the ranks' table: RANK
# HOST PID PHASE ...), picked at random, SIGKILLed.
killer() {
  local pid; pid=$(cat "$1/pid")
  while kill -0 "$pid" 2>/dev/null; do
    sleep "$PERIOD"
    kill -0 "$pid" 2>/dev/null || break
    local victim; victim=$("$BIN/ds-launch" status 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ && $3 > 1 && $4 == "RUNNING" {print $3}' | shuf -n 1)
    [[ -z $victim ]] && continue
    local rows t0; rows=$(wc -l < "$1/metrics.csv"); t0=$(date +%s.%N)
    kill -KILL "$victim" 2>/dev/null || continue
    # The seconds to the first row after the restart (polled every 0.1 s; the others block in the
    # step's collectives until then), independent of how fast the VM runs the rest.
    local end=$((SECONDS + 60))
    while (($(wc -l < "$1/metrics.csv") <= rows)) && ((SECONDS < end)) && kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    awk -v a="$t0" -v b="$(date +%s.%N)" -v v="$victim" 'BEGIN { printf "%s %.2f\n", v, b - a }' >> "$1/kills"
  done
}

echo "goodput: 2 nodes x 2 slots on loopback, GPT-2 4x256 (5.3 M), fp32, ZeRO-1, DP 4, in-memory copy every step; $(nproc) cores"
job "$BASE/cal" 200
t=$(run "$BASE/cal")
rate=$(awk -v t="$t" 'BEGIN { printf "%.3f", 200 / t }')
STEPS=$(awk -v r="$rate" -v m="$MINUTES" 'BEGIN { printf "%d", r * m * 60 }')
echo "calibration: 200 steps in $t s ($rate steps/s with start-up); the runs take $STEPS steps"

job "$BASE/free" "$STEPS"
t_free=$(run "$BASE/free")
echo "failure-free: $STEPS steps in $t_free s, exit $(cat "$BASE/free/rc")"

job "$BASE/killed" "$STEPS"
t_killed=$(KILLER=1 run "$BASE/killed")
kills=$(wc -l < "$BASE/killed/kills" 2>/dev/null || echo 0)
restarts=$(grep -c "restart [0-9]* of" "$BASE/killed/out")
echo "killed: $STEPS steps in $t_killed s, exit $(cat "$BASE/killed/rc"), $kills kills (one every $PERIOD s), $restarts restarts"
awk -v f="$t_free" -v k="$t_killed" -v n="$kills" 'BEGIN {
  printf "goodput: %.2f%% of the failure-free steps per second (%.1f s / %.1f s); %.2f s lost per kill\n",
    100 * f / k, f, k, n ? (k - f) / n : 0 }'
# The same from the kills alone: each kill costs its seconds to the next step plus the steps it
# redid, at the failure-free run's mean step (what the wall times above carry, without the two
# runs' difference in speed).
redone=$(( $(tail -n +2 "$BASE/killed/metrics.csv" | wc -l) - STEPS ))
awk -v f="$t_free" -v s="$STEPS" -v k="$t_killed" -v r="$redone" '{ t += $2; n++; if ($2 > m) m = $2 }
  END { step = f / s; lost = t + r * step
        printf "kills: kill -> next step %.2f s mean, %.2f s max; %d steps redone; %.1f s lost in %.1f s: goodput %.2f%%\n",
          n ? t / n : 0, m, r, lost, k, 100 * (1 - lost / k) }' "$BASE/killed/kills"

grep -o "resumed from the in-memory copy of step [0-9]*" "$BASE/killed/out" | sort | uniq -c | awk '{print $NF}' \
  | paste -sd' ' | sed 's/^/resumed at steps: /'
awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $2; next }
  FNR > 1 { got[$1] = $2 }
  END { for (s in got) { n++; if (!(s in ref)) bad++; d = got[s] - ref[s]; if (d < 0) d = -d; if (d > m) m = d }
        printf "curve: %d steps beside the failure-free run, %d unmatched, max |loss difference| %.3g\n", n, bad + 0, m }' \
  "$BASE/free/metrics.csv" "$BASE/killed/metrics.csv"
