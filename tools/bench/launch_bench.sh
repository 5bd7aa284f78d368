#!/usr/bin/env bash
# Launch-to-all-ranks-running, 4 ranks on this machine, median of REPEATS runs:
#   ds-launch, 2 nodes x 2 slots (127.0.0.1, 127.0.0.2), local backend: from the launch
#     command to the moment the 4th rank process runs (a stub worker records the time)
#     and, separately, with the real ds-worker to every rank's first training step;
#   torchrun --nproc_per_node 4: from the command to the moment the 4th process has
#     initialized its gloo process group.
#   tools/bench/launch_bench.sh            (REPEATS=5 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEATS=${REPEATS:-5}
PY=${PYTHON:-/usr/bin/python3}
[[ -x bin/ds-launch ]] || tools/build.sh
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$W/hosts"
cat > "$W/stub.sh" <<'SH'
#!/bin/sh
date +%s.%N > "$BENCH_OUT_DIR/rank_$RANK"
SH
chmod +x "$W/stub.sh"
bin/ds-data addition --digits 2 --train_examples 2000 --val_examples 100 --output_dir "$W/data" >/dev/null 2>&1
cat > "$W/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 1, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $W/data/train.tok, seq_len: 10}
training: {train_iters: 1}
device: {threads: 1}
YAML
cat > "$W/tr.py" <<'PYEOF'
import os, time, torch.distributed as dist
dist.init_process_group("gloo")
open(os.path.join(os.environ["BENCH_OUT_DIR"], "rank_" + os.environ["RANK"]), "w").write(f"{time.time():.6f}")
dist.barrier()
PYEOF

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
last_rank() { cat "$1"/rank_* | sort -n | tail -1; }

ds_stub=(); ds_real=(); tr=()
for i in $(seq "$REPEATS"); do
  d=$W/s$i; mkdir -p "$d"
  t0=$(date +%s.%N)
  BENCH_OUT_DIR=$d bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" --worker "$W/stub.sh" >/dev/null 2>&1
  ds_stub+=("$(awk -v a="$t0" -v b="$(last_rank "$d")" 'BEGIN{print b-a}')")

  t0=$(date +%s.%N)
  bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" > "$W/real$i.log" 2>&1
  t1=$(date +%s.%N)
  ds_real+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")

  d=$W/t$i; mkdir -p "$d"
  t0=$(date +%s.%N)
  # --redirects 1 --tee 2: Debian's torch 1.13 on Python 3.11 crashes on the default "0"
  # (enum iteration changed in 3.11); these values behave like the default for timing.
  BENCH_OUT_DIR=$d OMP_NUM_THREADS=1 torchrun --redirects 1 --tee 2 --log_dir "$d/logs" --nnodes 1 --nproc_per_node 4 --master_port $((29500 + i)) \
    "$W/tr.py" >/dev/null 2>&1
  tr+=("$(awk -v a="$t0" -v b="$(last_rank "$d")" 'BEGIN{print b-a}')")
done
a=$(printf '%s\n' "${ds_stub[@]}" | median)
b=$(printf '%s\n' "${ds_real[@]}" | median)
c=$(printf '%s\n' "${tr[@]}" | median)
echo "launch-to-all-ranks-running, 4 ranks, median of $REPEATS:"
printf '  %-58s %6.3f s\n' "ds-launch 2x2 local, 4th rank process running" "$a"
printf '  %-58s %6.3f s\n' "ds-launch 2x2 local, whole job (ds-worker, 1 step, exit)" "$b"
printf '  %-58s %6.3f s\n' "torchrun 1x4, 4th process past init_process_group(gloo)" "$c"
awk -v a="$a" -v c="$c" 'BEGIN{printf "  ratio ds-launch / torchrun: %.2f (target: ds-launch <= 1.5 s)\n", a/c}'
