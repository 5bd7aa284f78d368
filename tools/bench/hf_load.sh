#!/usr/bin/env bash
# Loading a Hugging Face folder at ZeRO-3 DP = 2 (issue: bring your own model): a
# Llama-3.2-1B-shape model (random, bf16, one 2.47 GB model.safetensors as the Hub stores the
# 1B; tools/bench/make_hf_model.py) trained with `model: {hf: DIR}` through ds-launch on 2
# ranks. Each rank reports when its weights are in (trainer_hf.cc): the time, the values it
# read (its ZeRO-3 partition and the persistent units only), its peak RSS beside its planned
# model states and the largest parameter; the job is stopped there (the benchmark is the load,
# not a step). Cold (page cache dropped, needs root) and warm, beside reading the file once
# (cat), transformers' from_pretrained (bf16, fp32) and DeepSpeed's zero.Init +
# initialize on 2 Gloo ranks, when the peers' venv (DS_PEERS=1 tools/setup.sh, plus
# deepspeed==0.19.8 accelerate) is there.
#
#   tools/bench/hf_load.sh            (WORK=dir keeps the model between runs)
set -uo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-/tmp/ds-hf-load}
PEER=${DS_PEER_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python}
TOOLS_PY=${DS_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/tools-venv}/bin/python
[[ -x bin/ds-launch ]] || tools/build.sh
mkdir -p "$WORK"
MODEL=$WORK/llama-3.2-1b
[[ -f $MODEL/config.json ]] || "$TOOLS_PY" tools/bench/make_hf_model.py --shape llama-3.2-1b --out "$MODEL"
python3 -c "
import random, struct
random.seed(0)
open('$WORK/tokens.bin', 'wb').write(struct.pack('<4096H', *[random.randrange(32000) for _ in range(4096)]))"
printf '127.0.0.1 slots=2\n' > "$WORK/hosts"
cat > "$WORK/job.yaml" <<YAML
train_batch_size: 2
train_micro_batch_size_per_gpu: 1
bf16: {enabled: true}
optimizer: {type: AdamW, params: {lr: 1.0e-5, weight_decay: 0.1}}
zero_optimization: {stage: 3}
model: {hf: $MODEL}
data: {train: $WORK/tokens.bin, format: uint16, seq_len: 64, shuffle: false}
training: {train_iters: 1}
device: {threads: 1}
YAML

drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(cannot drop the page cache: not root; 'cold' is warm)"; }
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB"
echo "== $(du -h "$MODEL"/*.safetensors | awk '{print $1}') of bf16 in $(ls "$MODEL"/*.safetensors | wc -l) file(s)"
for cache in cold warm; do
  [[ $cache == cold ]] && drop
  /usr/bin/time -f "read the file once ($cache): %e s" cat "$MODEL"/*.safetensors > /dev/null
done
for cache in cold warm; do
  [[ $cache == cold ]] && drop
  rm -f "$WORK/run.out"
  bin/ds-launch "$WORK/job.yaml" --hostfile "$WORK/hosts" > "$WORK/run.out" 2>&1 &
  for _ in $(seq 1 600); do
    [[ $(grep -c "values from" "$WORK/run.out") -ge 2 ]] && break
    sleep 0.5
  done
  pkill -TERM -f "ds-launch $WORK/job.yaml"; wait 2>/dev/null
  echo "ds-runtime ZeRO-3 DP 2 ($cache):"
  grep "values from" "$WORK/run.out" | sed 's/.*\] rank/  rank/'
done
if "$PEER" -c "import transformers" 2>/dev/null; then
  for dtype in bfloat16 float32; do
    drop
    OMP_NUM_THREADS=1 "$PEER" tools/bench/transformers_load.py "$MODEL" $dtype 2>/dev/null | tail -1 | sed 's/^/cold: /'
  done
else
  echo "transformers: no peers' venv (DS_PEERS=1 tools/setup.sh)"
fi
if "$PEER" -c "import deepspeed, accelerate" 2>/dev/null; then
  drop
  export DS_ACCELERATOR=cpu MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 WORLD_SIZE=2 OMP_NUM_THREADS=1
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r timeout 900 "$PEER" tools/bench/deepspeed_zero3_load.py "$MODEL" \
      > "$WORK/ds$r.out" 2>&1 &
  done
  wait
  echo "DeepSpeed $("$PEER" -c 'import deepspeed; print(deepspeed.__version__)') ZeRO-3 DP 2 (cold):"
  grep -h "deepspeed rank" "$WORK"/ds0.out "$WORK"/ds1.out | sed 's/^/  /'
else
  echo "DeepSpeed: not in the peers' venv (pip install deepspeed==0.19.8 accelerate)"
fi
