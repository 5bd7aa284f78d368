#!/usr/bin/env bash
# Loading a Hugging Face folder at ZeRO-3 DP = 2 (issue: bring your own model): a
# Llama-3.2-1B-shape model (random, bf16, one 2.47 GB model.safetensors as the Hub stores the
# 1B; tools/bench/make_hf_model.py) trained with `model: {hf: DIR}` through ds-launch on 2
# ranks. Each rank reports when its weights are in (trainer_hf.cc): the time, the values it
# read (its ZeRO-3 partition and the persistent units only), its peak RSS beside its planned
# model states and the largest parameter; the job is stopped there (the benchmark is the load,
# not a step), and how long after its process started that came (the plan, groups and buffers
# before the load count there). Cold (page cache dropped, needs root) and warm, beside reading the file once
# (cat), the least work such a load has to do (tools/bench/hf_load_floor.py: each rank's half
# read into a fresh fp32 master and bf16 shard), transformers' from_pretrained (bf16, fp32)
# and DeepSpeed's zero.Init +
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
# The disk of a virtual machine varies from minute to minute (the same cold read took 2.1 s
# and 5.7 s a few minutes apart here), so each figure is taken ROUNDS times, interleaved: cat,
# the load and the floor, one after the other, cold then warm, and the medians are compared.
ROUNDS=${ROUNDS:-2}
ds_load() {  # ds_load TAG: both ranks' load times, appended to $WORK/ds_TAG.txt
  rm -f "$WORK/run.out"
  bin/ds-launch "$WORK/job.yaml" --hostfile "$WORK/hosts" > "$WORK/run.out" 2>&1 &
  for _ in $(seq 1 600); do
    [[ $(grep -c "values from" "$WORK/run.out") -ge 2 ]] && break
    sleep 0.5
  done
  pkill -TERM -f "ds-launch $WORK/job.yaml"; wait 2>/dev/null
  grep "values from" "$WORK/run.out" | sed 's/.*\] rank/  rank/' | tee -a "$WORK/ds_$1.log" |
    sed -n 's/.* in \([0-9.]*\) s.*/\1/p' >> "$WORK/ds_$1.txt"
  grep "values from" "$WORK/run.out" | sed -n 's/.*(\([0-9.]*\) s after the worker started.*/\1/p' \
    >> "$WORK/start_$1.txt"
}
# This machine is a virtual machine whose free memory goes back to its host some seconds after
# it is freed (virtio-balloon's free page reporting): a page first touched after that costs ~10x
# one the guest still holds (a 3.5 GiB numpy array: 6.4 s fresh, 0.63 s right after another was
# freed), and a load is mostly first touches of its new states. 8 s after the previous
# contender was not enough: the floor then took 6.5 s and the load 7.5 s, each 30 s after, 9.4
# and 11.9 s. So every contender starts SETTLE (30) seconds after the one before, and the load
# and the floor take turns going first (odd rounds the load, even rounds the floor).
settle() { sleep "${SETTLE:-30}"; }
# The floor: the least work of the same load (tools/bench/hf_load_floor.py), 2 processes at once
# with one thread each as the ranks run.
floor_load() {
  for r in 0 1; do OMP_NUM_THREADS=1 "$TOOLS_PY" tools/bench/hf_load_floor.py "$MODEL" $r 2 > "$WORK/floor$r.out" & done
  wait
  cat "$WORK"/floor0.out "$WORK"/floor1.out | sed -n 's/.* \([0-9.]*\) s (read.*/\1/p' >> "$WORK/floor_$1.txt"
}
median() { sort -g "$1" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
rm -f "$WORK"/ds_*.txt "$WORK"/ds_*.log "$WORK"/start_*.txt "$WORK"/floor_*.txt "$WORK"/cat_*.txt
for round in $(seq 1 "$ROUNDS"); do
  for cache in cold warm; do
    [[ $cache == cold ]] && drop
    settle
    /usr/bin/time -f "%e" -a -o "$WORK/cat_$cache.txt" cat "$MODEL"/*.safetensors > /dev/null
    for who in $( ((round % 2)) && echo "ds_load floor_load" || echo "floor_load ds_load"); do
      [[ $cache == cold ]] && drop
      settle
      $who $cache
    done
  done
done
for cache in cold warm; do
  c=$(median "$WORK/cat_$cache.txt") d=$(median "$WORK/ds_$cache.txt") f=$(median "$WORK/floor_$cache.txt")
  echo "$cache page cache, medians of $ROUNDS rounds (each rank's time counted):"
  echo "  read the file once (cat):                  $c s   (all: $(tr '\n' ' ' < "$WORK/cat_$cache.txt"))"
  echo "  floor: read + fp32 master + bf16 shard:    $f s   (all: $(tr '\n' ' ' < "$WORK/floor_$cache.txt"))"
  echo "  ds-runtime ZeRO-3 DP 2, each rank:         $d s   (all: $(tr '\n' ' ' < "$WORK/ds_$cache.txt"))"
  echo "  the same, from the worker's start:         $(median "$WORK/start_$cache.txt") s   (all: $(tr '\n' ' ' < "$WORK/start_$cache.txt"))"
  awk -v d="$d" -v c="$c" -v f="$f" 'BEGIN { printf "  ds-runtime / cat %.2fx, ds-runtime / floor %.2fx\n", d/c, d/f }'
done
echo "ds-runtime's last line per rank:"
tail -2 "$WORK/ds_warm.log"
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
