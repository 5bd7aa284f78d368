#!/usr/bin/env bash
# ZeRO++ over slow links (zero/README.md Note [ZeRO++]): a GPT-2-small shape (L12 C768 H12
# V50257, T=SEQ, one sequence per rank per step), ZeRO-3 in bf16 with every block's units
# released after use (stage3_max_reuse_distance 0, as a model too large to keep them must), on 2
# emulated nodes x 2 ranks (tools/emulated_nodes.sh: network namespaces on a bridge, each node's
# link limited by tc's token bucket both ways), at each of RATES: plain ZeRO-3, hpZ, qwZ, qgZ
# alone and all three. Per run: the median step time after the first two steps, the bytes that
# crossed the nodes' links per step (the namespaces' eth0 TX counters over the run, start-up
# included, divided by the steps) beside the plan's (ds-launch plan --hostfile: every rank's
# bytes to the other node), and the step against plain ZeRO-3's at the same rate. Plain ZeRO-3
# over loopback nodes (no limit) is the first row. Needs root, ip and tc.
#   tools/bench/zeropp.sh                        # RATES="10gbit 1gbit" SEQ=256 STEPS=6
#   RATES=1gbit ZEROPP="plain all" DEEPSPEED=0 tools/bench/zeropp.sh
# DeepSpeed 0.19.8 (the peers' venv, tools/bench/setup_deepspeed.sh) runs beside: its CPU path
# runs plain ZeRO-3 and hpZ, measured on the same emulated nodes (tools/bench/deepspeed_gpt2.py,
# rows "DS ..."), but not qwZ or qgZ ("This op had not been implemented on CPU backend": its
# quantizer is a CUDA kernel), which the last lines show (tools/bench/zeropp_deepspeed_probe.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
RATES=${RATES:-10gbit 1gbit}; SEQ=${SEQ:-256}; STEPS=${STEPS:-6}
[[ $(id -u) == 0 ]] || { echo "zeropp.sh: needs root (network namespaces)" >&2; exit 2; }
[[ -x bin/ds-launch ]] || tools/build.sh
NAME=dszp$$; NAME=${NAME:0:8}
export SUBNET=$(($$ % 200 + 20))
W=$(mktemp -d)
trap 'pkill -9 -f "$W/job.yaml" 2>/dev/null || true; tools/emulated_nodes.sh down "$NAME" 2>/dev/null || true; rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
/usr/bin/python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50257, size=400000, dtype=np.uint16).tofile('$W/tokens.bin')"

job() {  # job ZERO_EXTRA
  cat > "$W/job.yaml" <<YAML
train_batch_size: 4
train_micro_batch_size_per_gpu: 1
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
model: {family: gpt2, n_layer: 12, n_embd: 768, n_head: 12, vocab_size: 50257, max_seq_len: $SEQ}
data: {train: $W/tokens.bin, format: uint16, seq_len: $SEQ, shuffle: false}
training: {train_iters: $STEPS}
bf16: {enabled: true}
zero_optimization: {stage: 3, stage3_max_reuse_distance: 0$1}
monitor: {csv: $W/ds.csv}
device: {threads: 1}
YAML
}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
tx() { for i in 0 1; do ip -n "$NAME$i" -s -j link show eth0; done |
  /usr/bin/python3 -c "import json,sys; print(sum(json.loads(l)[0]['stats64']['tx']['bytes'] for l in sys.stdin))"; }
planned() {  # the plan's bytes per step from each node to the other, summed
  bin/ds-launch plan "$W/job.yaml" --hostfile "$W/plan_hosts" --json |
    /usr/bin/python3 -c "import json,sys; print(sum(int(r.get('inter_node_sent_bytes', 0)) for r in json.load(sys.stdin)['ranks']))"
}

declare -A PARTS=(
  [plain]=""
  [hpz]=", zero_hpz_partition_size: 2"
  [qwz]=", zero_quantized_weights: true"
  [qgz]=", zero_quantized_gradients: true"
  [all]=", zero_hpz_partition_size: 2, zero_quantized_weights: true, zero_quantized_gradients: true"
)
ORDER=${ZEROPP:-plain hpz qwz qgz all}  # the first must be plain (the ratios' base)
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$W/plan_hosts"
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; GPT-2 L12 C768 V50257 T$SEQ, ZeRO-3 bf16, 2 nodes x 2 ranks, $STEPS steps"
printf '%-10s %-6s %10s %9s %14s %14s %8s\n' link zero++ ms/step vs_plain "between MiB/st" "planned MiB/st" "meas/plan"

# run LABEL PART HOSTFILE [netns]: one job; prints its row.
declare -A PLAIN_MS
run() {
  local label=$1 part=$2 hosts=$3 how=${4:-}
  job "${PARTS[$part]}"
  rm -f "$W/ds.csv"
  local before=0 after=0
  [[ -n $how ]] && before=$(tx)
  local args=(--hostfile "$hosts")
  [[ -n $how ]] && args+=(--launcher netns --coordinator "10.77.$SUBNET.254:0")
  if ! timeout 1200 bin/ds-launch "$W/job.yaml" "${args[@]}" > "$W/ds.log" 2>&1; then
    echo "$label $part: ds-launch failed"; tail -5 "$W/ds.log"; return 0
  fi
  [[ -n $how ]] && after=$(tx)
  local ms plan
  ms=$(tail -n +4 "$W/ds.csv" | cut -d, -f10 | median)
  [[ $part == plain ]] && PLAIN_MS[$label]=$ms
  plan=$(planned)
  /usr/bin/python3 - "$label" "$part" "$ms" "${PLAIN_MS[$label]}" "$before" "$after" "$plan" "$STEPS" "$how" <<'PY'
import sys
label, part, ms, plain, before, after, plan, steps, how = sys.argv[1:]
ms, plain, plan, steps = float(ms), float(plain), int(plan), int(steps)
meas = (int(after) - int(before)) / steps if how else 0
mib = lambda b: b / 1048576
print(f"{label:<10} {part:<6} {ms:10.1f} {ms / plain:8.3f}x "
      + (f"{mib(meas):14.1f} {mib(plan):14.1f} {meas / plan:8.3f}" if how else f"{'-':>14} {mib(plan):14.1f} {'-':>8}"))
PY
}

# DeepSpeed on the same emulated nodes (tools/bench/deepspeed_gpt2.py: the same GPT-2, initial
# weights and tokens; ZeRO-3, bf16, torch's AdamW), one torchrun per namespace; PART plain or hpz.
PEER=${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python
HAVE_DS=false
[[ ${DEEPSPEED:-1} != 0 ]] && "$PEER" -c "import deepspeed" 2>/dev/null && HAVE_DS=true
run_deepspeed() {  # run_deepspeed LABEL PART
  local zero='{"stage3_max_reuse_distance": 0}' before after pids=() i
  [[ $2 == hpz ]] && zero='{"stage3_max_reuse_distance": 0, "zero_hpz_partition_size": 2}'
  before=$(tx)
  for i in 0 1; do
    rm -rf "$W/dtr$i"
    ip netns exec "$NAME$i" env DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 \
      timeout 1200 "$PEER" -m torch.distributed.run --redirects 1 --tee 2 --log_dir "$W/dtr$i" \
      --nnodes 2 --node_rank $i --nproc_per_node 2 --master_addr "10.77.$SUBNET.1" \
      --master_port 29614 tools/bench/deepspeed_gpt2.py --weights "$W/init.safetensors" \
      --data "$W/tokens.bin" --n_layer 12 --n_head 12 --batch 1 --seq "$SEQ" --steps "$STEPS" \
      --warmup 2 --threads 1 --stage 3 --zero_json "$zero" --bf16 > "$W/dsp$i.log" 2>&1 &
    pids+=($!)
  done
  local ok=true
  for i in "${pids[@]}"; do wait "$i" || ok=false; done
  after=$(tx)
  if ! $ok; then echo "$1 deepspeed $2: failed: $(grep -h -m1 -oE '[A-Za-z]+Error: .*' "$W"/dsp*.log "$W"/dtr0/*/attempt_0/*/stderr.log 2>/dev/null | head -1)"; return 0; fi
  local line ms
  line=$(cat "$W"/dtr0/*/attempt_0/0/stdout.log | grep "^deepspeed:")
  ms=$(echo "$line" | grep -oE 'ms_per_step=[0-9.]+' | cut -d= -f2)
  /usr/bin/python3 - "$1" "$2" "$ms" "${DS_PLAIN_MS[$1]:-$ms}" "$before" "$after" "$STEPS" <<'PY'
import sys
label, part, ms, plain, before, after, steps = sys.argv[1:]
ms, plain = float(ms), float(plain)
meas = (int(after) - int(before)) / int(steps)
print(f"{label:<10} {'DS ' + part:<6} {ms:10.1f} {ms / plain:8.3f}x {meas / 1048576:14.1f} {'-':>14} {'-':>8}")
PY
  [[ $2 == plain ]] && DS_PLAIN_MS[$1]=$ms
  return 0
}
declare -A DS_PLAIN_MS

run loopback plain "$W/plan_hosts"
if $HAVE_DS; then  # the same initial weights (fp32, whole: one rank without ZeRO)
  job ""
  grep -vE '^(train_batch_size|bf16|zero_optimization):' "$W/job.yaml" > "$W/init.yaml"
  bin/ds-worker --config "$W/init.yaml" --export-init "$W/init.safetensors" > "$W/init.log" 2>&1 ||
    { echo "ds-worker --export-init failed: $(tail -1 "$W/init.log")"; HAVE_DS=false; }
fi
for rate in $RATES; do
  tools/emulated_nodes.sh down "$NAME" 2>/dev/null || true
  tools/emulated_nodes.sh up "$NAME" 2 "$rate" > /dev/null
  printf '%s0 slots=2\n%s1 slots=2\n' "$NAME" "$NAME" > "$W/hosts"
  for part in $ORDER; do run "$rate" "$part" "$W/hosts" netns; done
  if $HAVE_DS; then
    for part in plain hpz; do run_deepspeed "$rate" "$part"; done
  fi
done

# DeepSpeed's CPU path: which parts run at all (4 local ranks over gloo).
PEER=${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python
if $HAVE_DS; then
  echo "== DeepSpeed $("$PEER" -c 'import deepspeed; print(deepspeed.__version__)' 2>/dev/null | tail -1) on the CPU (gloo), ZeRO-3 with each part:"
  for part in $ORDER; do
    [[ $part == all ]] && continue
    if DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 timeout 600 "$PEER" -m torch.distributed.run \
        --nproc_per_node 4 --master_port 29611 tools/bench/zeropp_deepspeed_probe.py "$part" \
        > "$W/peer.log" 2>&1; then
      echo "  $part: runs ($(grep -c "^$part step" "$W/peer.log") steps)"
    else
      echo "  $part: fails: $(grep -m1 -oE '(Value|Runtime|NotImplemented|Assertion)Error: .*' "$W/peer.log" | head -1)"
    fi
  done
else
  echo "== DeepSpeed: DEEPSPEED=0, or not in the peers' venv (tools/bench/setup_deepspeed.sh)"
fi
