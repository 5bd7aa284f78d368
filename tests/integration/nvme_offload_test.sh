#!/usr/bin/env bash
# ZeRO-Infinity's optimizer swapper end to end through ds-launch with real processes: 20 fp32
# AdamW steps with the optimizer states on NVMe (offload_optimizer device nvme: swap files,
# several sub-groups, pipelined reads and writes), on the CPU (device cpu) and with no offload
# give the same loss at every step and byte-identical checkpoints (master weights and both
# moments), at ZeRO stages 1, 2 and 3, DP = 1 and 2 (DeepSpeed #2272: NVMe offload once trained
# far worse than CPU offload and no test saw it). Then: a run saved at step 10 resumes with the
# states on NVMe to the same bytes at step 20; kill -9 of a rank in the middle of its swaps
# leaves the last checkpoint loadable and the next run removes the killed run's swap files, and
# SIGTERM removes them at once; the
# swap directory is empty after every clean exit; a swap directory without room for the file is
# refused before any step with the key, the path and both sizes; with device.type cuda (on the
# host-emulated device) the NVMe states give the CPU-offload run's bytes.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
CKPT=$R/tools/ds_ckpt/ds-ckpt
BASE=${TEST_TMPDIR:-$(mktemp -d)}/nvme
rm -rf "$BASE"; mkdir -p "$BASE/swap"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
printf '127.0.0.1 slots=1\n' > "$BASE/hosts1"
printf '127.0.0.1 slots=2\n' > "$BASE/hosts2"

job() {  # job FILE WORLD STAGE OFFLOAD CKPT [ITERS] (PRECISION=bf16 for mixed precision)
  local offload="{device: none}"
  [[ $4 == cpu ]] && offload="{device: cpu}"
  [[ $4 == nvme ]] && offload="{device: nvme, nvme_path: $BASE/swap, buffer_count: 6, pipeline_read: true, pipeline_write: true}"
  cat > "$1" <<YAML
train_batch_size: 16
train_micro_batch_size_per_gpu: $((16 / $2))
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}
zero_optimization: {stage: $3, reduce_bucket_size: 5000, stage3_param_persistence_threshold: 100,
                    sub_group_size: 3000, offload_optimizer: $offload}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: ${6:-20}}
checkpoint: {dir: $5, save_interval: 10}
monitor: {csv: $5.csv}
device: {threads: 1}
YAML
  [[ ${PRECISION:-fp32} == bf16 ]] && echo "bf16: {enabled: true}" >> "$1"
  return 0
}

launch() {  # launch CONFIG WORLD
  timeout 120 "$LAUNCH" "$1" --hostfile "$BASE/hosts$2" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 > "$BASE/out" 2>&1
}

# The step-20 checkpoint's tensor files, byte for byte, and the loss column, digit for digit.
same_run() {  # same_run DIR_A DIR_B
  local a=$1/step_00000020 b=$2/step_00000020 n=0
  for f in "$a"/*.safetensors; do
    cmp -s "$f" "$b/$(basename "$f")" || return 1
    n=$((n + 1))
  done
  [[ $n -gt 0 ]] && cmp -s <(cut -d, -f1,2 "$1.csv") <(cut -d, -f1,2 "$2.csv")
}

# Another partition (offload_param's 4 KiB chunks) slices the shard files differently: compare
# the consolidated step-20 weights and the losses.
same_weights() {  # same_weights DIR_A DIR_B
  "$CKPT" consolidate "$1/step_00000020" "$1.w.safetensors" >/dev/null 2>&1 &&
    "$CKPT" consolidate "$2/step_00000020" "$2.w.safetensors" >/dev/null 2>&1 &&
    cmp -s "$1.w.safetensors" "$2.w.safetensors" &&
    cmp -s <(cut -d, -f1,2 "$1.csv") <(cut -d, -f1,2 "$2.csv")
}

# The tensor files of two checkpoint steps, byte for byte.
same_files() {  # same_files STEP_DIR_A STEP_DIR_B
  local f n=0
  for f in "$1"/*.safetensors; do
    cmp -s "$f" "$2/$(basename "$f")" || return 1
    n=$((n + 1))
  done
  [[ $n -gt 0 ]]
}

swap_empty() { [[ -z $(find "$BASE/swap" -type f 2>/dev/null) ]]; }

for stage in 1 2 3; do
  for world in 1 2; do
    name="stage $stage dp=$world"
    ok=1
    for off in none cpu nvme; do
      job "$BASE/$off.yaml" "$world" "$stage" "$off" "$BASE/ck_${off}_s${stage}_w$world"
      if ! launch "$BASE/$off.yaml" "$world"; then
        fail "$name offload $off: ds-launch failed"; tail -8 "$BASE/out"; ok=0
      fi
    done
    [[ $ok == 1 ]] || continue
    if ! grep -rq "optimizer states on NVMe" "$DS_RUNTIME_HOME" "$BASE/out" 2>/dev/null; then
      fail "$name: no rank said its optimizer states were on NVMe"; continue
    fi
    c=$BASE/ck_none_s${stage}_w$world
    if same_run "$c" "$BASE/ck_cpu_s${stage}_w$world" && same_run "$c" "$BASE/ck_nvme_s${stage}_w$world"; then
      pass "$name: NVMe, CPU and no offload give byte-identical step-20 checkpoints and losses"
    else
      fail "$name: the runs differ"
      paste -d' ' "$c.csv" "$BASE/ck_nvme_s${stage}_w$world.csv" | head -5
    fi
    if swap_empty; then pass "$name: no swap file left after exit"
    else fail "$name: swap files left: $(find "$BASE/swap" -type f | head -3)"; fi
  done
done

# bf16: the fp32 master is swapped too (three arrays per sub-group); with offload_param the
# 16-bit parameter shard as well (ZeRO-Infinity), each unit read in before its gather.
for world in 1 2; do
  ok=1
  for off in none nvme params; do
    o=$off; [[ $off == params ]] && o=nvme
    PRECISION=bf16 job "$BASE/$off.yaml" "$world" 3 "$o" "$BASE/ck_bf16_${off}_w$world"
    [[ $off == params ]] && sed -i "s|sub_group_size: 3000,|sub_group_size: 3000, offload_param: {device: nvme, nvme_path: $BASE/swap},|" "$BASE/$off.yaml"
    launch "$BASE/$off.yaml" "$world" || { fail "bf16 offload $off dp=$world: ds-launch failed"; tail -8 "$BASE/out"; ok=0; }
  done
  [[ $ok == 1 ]] || continue
  if same_run "$BASE/ck_bf16_none_w$world" "$BASE/ck_bf16_nvme_w$world" &&
     same_weights "$BASE/ck_bf16_none_w$world" "$BASE/ck_bf16_params_w$world"; then
    pass "bf16 stage 3 dp=$world: swapped master and moments, and swapped parameters, give the unswapped run's bytes"
  else fail "bf16 stage 3 dp=$world: the runs differ"; paste -d' ' "$BASE/ck_bf16_none_w$world.csv" "$BASE/ck_bf16_params_w$world.csv" | head -4; fi
  grep -rq "params.swp\|parameters on NVMe" "$BASE/out" "$DS_RUNTIME_HOME" ||
    fail "bf16 dp=$world: no rank said its parameters were on NVMe"
  swap_empty || fail "bf16 dp=$world: swap files left"
done

# fp32 stage 3 with offload_param too: the parameter shard is the fp32 master itself, swapped
# with the moments in optimizer.swp (no params.swp), each unit's chunk read from there before its
# gather; on the unswapped run's weights and losses (the stage-3 runs above), and a run resumed
# from step 10 ends on the same bytes.
for world in 1 2; do
  job "$BASE/fp32p.yaml" "$world" 3 nvme "$BASE/ck_fp32_params_w$world"
  sed -i "s|sub_group_size: 3000,|sub_group_size: 3000, offload_param: {device: nvme, nvme_path: $BASE/swap},|" "$BASE/fp32p.yaml"
  if ! launch "$BASE/fp32p.yaml" "$world"; then
    fail "fp32 offload_param dp=$world: ds-launch failed"; tail -8 "$BASE/out"; continue
  fi
  if same_weights "$BASE/ck_none_s3_w$world" "$BASE/ck_fp32_params_w$world"; then
    pass "fp32 stage 3 dp=$world: parameters and optimizer on NVMe give the unswapped run's weights and losses"
  else fail "fp32 stage 3 dp=$world, offload_param: the runs differ"; paste -d' ' "$BASE/ck_none_s3_w$world.csv" "$BASE/ck_fp32_params_w$world.csv" | head -4; fi
  grep -rq "fp32 parameters on NVMe" "$BASE/out" "$DS_RUNTIME_HOME" ||
    fail "fp32 dp=$world: no rank said its parameters were on NVMe"
  swap_empty || fail "fp32 dp=$world: swap files left"
  # Resume: 10 steps saved, then on to 20 from that checkpoint: the same step-20 bytes.
  r=$BASE/ck_fp32_resume_w$world
  sed "s|ck_fp32_params_w$world|ck_fp32_resume_w$world|g; s/train_iters: 20/train_iters: 10/" \
    "$BASE/fp32p.yaml" > "$BASE/fp32h.yaml"
  sed "s|ck_fp32_params_w$world|ck_fp32_resume_w$world|g; s|checkpoint: {dir: \([^,]*\), save_interval: 10}|checkpoint: {dir: \\1, save_interval: 10, load: latest}|" \
    "$BASE/fp32p.yaml" > "$BASE/fp32r.yaml"
  if launch "$BASE/fp32h.yaml" "$world" && launch "$BASE/fp32r.yaml" "$world" &&
     same_files "$BASE/ck_fp32_params_w$world/step_00000020" "$r/step_00000020"; then
    pass "fp32 stage 3 dp=$world, offload_param: resumed at step 10, the same step-20 checkpoint"
  else fail "fp32 offload_param dp=$world: the resume differs"; tail -5 "$BASE/out"; fi
done

# device.type cuda with DS_ACCELERATOR=host (the device path on host memory): forward and
# backward on the "device", the optimizer on the host with its states on NVMe, against the same
# job with them in host memory (ZeRO-Offload to the CPU), stages 2 and 3 (stage 3 uploads each
# block range's gathered parameters), DP = 2.
for stage in 2 3; do
  ok=1
  for off in cpu nvme; do
    job "$BASE/dev_$off.yaml" 2 "$stage" "$off" "$BASE/ck_dev_${off}_s$stage"
    sed -i 's/device: {threads: 1}/device: {type: cuda, threads: 1}/' "$BASE/dev_$off.yaml"
    DS_ACCELERATOR=host launch "$BASE/dev_$off.yaml" 2 || { fail "device stage $stage offload $off: ds-launch failed"; tail -8 "$BASE/out"; ok=0; }
  done
  if [[ $ok == 1 ]] && same_run "$BASE/ck_dev_cpu_s$stage" "$BASE/ck_dev_nvme_s$stage"; then
    pass "device.type cuda (host-emulated), stage $stage dp=2: NVMe and CPU offload give the same bytes"
  else fail "device stage $stage offload: the runs differ"; fi
done

# Resume with the states on NVMe: step 10 saved by a 10-step run, continued to step 20.
job "$BASE/half.yaml" 2 3 nvme "$BASE/ck_resume" 10
job "$BASE/rest.yaml" 2 3 nvme "$BASE/ck_resume" 20
printf 'checkpoint: {dir: %s, save_interval: 10, load: latest}\n' "$BASE/ck_resume" >> "$BASE/rest.yaml"
sed -i '/^checkpoint: {dir: [^,]*, save_interval: 10}$/d' "$BASE/rest.yaml"
if launch "$BASE/half.yaml" 2 && launch "$BASE/rest.yaml" 2; then
  a=$BASE/ck_nvme_s3_w2/step_00000020 b=$BASE/ck_resume/step_00000020 n=0 bad=0
  for f in "$a"/*.safetensors; do
    n=$((n + 1)); cmp -s "$f" "$b/$(basename "$f")" || bad=$((bad + 1))
  done
  if [[ $n -gt 0 && $bad == 0 ]]; then
    pass "a stage-3 dp=2 run resumed at step 10 with NVMe states reaches the same step-20 bytes"
  else fail "resumed run differs ($bad of $n files)"; fi
else
  fail "NVMe resume: ds-launch failed"; tail -8 "$BASE/out"
fi

# kill -9 during swaps: a long run with many small sub-groups, killed after its step-10
# checkpoint; the checkpoint loads, and the next run removes the dead run's swap directory.
job "$BASE/long.yaml" 1 2 nvme "$BASE/ck_kill" 400
sed -i 's/sub_group_size: 3000/sub_group_size: 1024/' "$BASE/long.yaml"
timeout 120 "$LAUNCH" "$BASE/long.yaml" --hostfile "$BASE/hosts1" --worker "$WORKER" --agent "$AGENT" \
  --heartbeat 0.5 > "$BASE/out" 2>&1 &
launcher=$!
for _ in $(seq 1 400); do
  [[ -f $BASE/ck_kill/latest ]] && break  # written after the step-10 checkpoint is complete
  sleep 0.05
done
sleep 0.3
victim=$(pgrep -f "ds-worker.*long.yaml" | head -1)
if [[ -n $victim ]] && [[ -n $(find "$BASE/swap" -name optimizer.swp) ]]; then
  kill -9 "$victim"
  wait "$launcher" 2>/dev/null
  left=$(find "$BASE/swap" -name optimizer.swp | wc -l)
  job "$BASE/after.yaml" 1 2 nvme "$BASE/ck_kill" 12
  printf 'checkpoint: {dir: %s, load: latest}\n' "$BASE/ck_kill" >> "$BASE/after.yaml"
  sed -i '/^checkpoint: {dir: [^,]*, save_interval: 10}$/d' "$BASE/after.yaml"
  if [[ $left == 1 ]] && launch "$BASE/after.yaml" 1 && grep -rq "loaded .*ck_kill/step_" "$BASE/out" "$DS_RUNTIME_HOME" &&
     grep -rq "removed 1 swap directory a killed run left" "$BASE/out" "$DS_RUNTIME_HOME" && swap_empty; then
    pass "kill -9 mid-run: the last checkpoint loads and the killed run's swap file is removed"
  else
    fail "after kill -9: left=$left"; tail -8 "$BASE/out"
    grep -rh "loaded\|removed\|error" "$BASE/out" "$DS_RUNTIME_HOME" | tail -5; find "$BASE/swap"
  fi
else
  fail "kill -9: no worker with a swap file to kill"; kill "$launcher" 2>/dev/null; wait "$launcher" 2>/dev/null
fi

# SIGTERM (what ds-launch stop and the agent send) ends a rank without destructors: its swap
# files (tens of GB at scale) must go with it, not wait for the next run.
job "$BASE/term.yaml" 1 2 nvme "$BASE/ck_term" 100000
timeout 120 "$LAUNCH" "$BASE/term.yaml" --hostfile "$BASE/hosts1" --worker "$WORKER" --agent "$AGENT" \
  --heartbeat 0.5 > "$BASE/out" 2>&1 &
launcher=$!
for _ in $(seq 1 400); do [[ -n $(find "$BASE/swap" -name optimizer.swp) ]] && break; sleep 0.05; done
sleep 0.5
victim=$(pgrep -f "ds-worker.*term.yaml" | head -1)
if [[ -n $victim ]]; then
  kill -TERM "$victim"
  wait "$launcher" 2>/dev/null
  if swap_empty && [[ -z $(find "$BASE/swap/ds-swap" -mindepth 1 -type d 2>/dev/null) ]]; then
    pass "SIGTERM of a rank removes its swap files and directory"
  else fail "SIGTERM left: $(find "$BASE/swap" | tail -3)"; fi
else
  fail "SIGTERM: no worker to stop"; kill "$launcher" 2>/dev/null; wait "$launcher" 2>/dev/null
fi

# The swap file lost under a running job (truncated by someone else): the next swap-in fails with
# an error naming the file, the job stops, and the last checkpoint still verifies. (Running out
# of space mid-run cannot happen to the swap files: they are preallocated before the first step.)
rm -rf "$BASE/ck_trunc"
job "$BASE/trunc.yaml" 1 2 nvme "$BASE/ck_trunc" 100000
timeout 120 "$LAUNCH" "$BASE/trunc.yaml" --hostfile "$BASE/hosts1" --worker "$WORKER" --agent "$AGENT" \
  --heartbeat 0.5 > "$BASE/out" 2>&1 &
launcher=$!
for _ in $(seq 1 400); do [[ -f $BASE/ck_trunc/latest ]] && break; sleep 0.05; done
swapfile=$(find "$BASE/swap" -name optimizer.swp | head -1)
if [[ -n $swapfile ]]; then
  truncate -s 0 "$swapfile"
  wait "$launcher"; rc=$?
  if [[ $rc != 0 ]] && grep -rq "optimizer swap: .*optimizer.swp" "$BASE/out" "$DS_RUNTIME_HOME" &&
     "$CKPT" verify "$BASE/ck_trunc" > /dev/null 2>&1; then
    pass "a swap file truncated mid-run stops the job with the file named; the last checkpoint verifies"
    grep -rhom1 "optimizer swap: [^]]*" "$BASE/out" | head -1
  else fail "truncated swap file: exit $rc"; tail -5 "$BASE/out"; fi
else
  fail "truncate: no swap file found"; kill "$launcher" 2>/dev/null; wait "$launcher" 2>/dev/null
fi

# No room: a 64 KiB tmpfs (the swap file needs about 250 KiB) when this test may mount one; the
# error must come before any step and name the key, the path and the sizes.
small=$BASE/small
mkdir -p "$small"
if mount -t tmpfs -o size=64k tmpfs "$small" 2>/dev/null; then
  job "$BASE/full.yaml" 1 2 nvme "$BASE/ck_full"
  sed -i "s|nvme_path: $BASE/swap|nvme_path: $small|" "$BASE/full.yaml"
  launch "$BASE/full.yaml" 1; rc=$?
  if [[ $rc != 0 ]] && grep -rq "offload_optimizer.nvme_path $small: rank 0's swap files need" "$BASE/out" "$DS_RUNTIME_HOME" &&
     ! grep -rq "step 1/" "$BASE/out"; then
    pass "a swap directory without room is refused before any step, with the sizes"
    grep -rhom1 "offload_optimizer.nvme_path $small: .*free" "$BASE/out" "$DS_RUNTIME_HOME" | head -1
  else fail "no-room run: exit $rc"; tail -5 "$BASE/out"; fi
  umount "$small"
  # ENOSPC mid-run where it can happen: the checkpoint directory on a tmpfs with room for one
  # checkpoint. The second save fails with the reason, the job stops, the first one verifies.
  # (The swap files cannot run out mid-run: they are preallocated before the first step.)
  ckfs=$BASE/ckfs
  mkdir -p "$ckfs"
  if mount -t tmpfs -o size=600k tmpfs "$ckfs" 2>/dev/null; then
    job "$BASE/enospc.yaml" 1 2 nvme "$ckfs/ck" 40
    sed -i 's/save_interval: 10/save_interval: 5/; s|monitor: {csv: [^}]*}|monitor: {csv: '"$BASE"'/enospc.csv}|' "$BASE/enospc.yaml"
    launch "$BASE/enospc.yaml" 1; rc=$?
    if [[ $rc != 0 ]] && grep -rqi "no space\|ENOSPC\|space left" "$BASE/out" "$DS_RUNTIME_HOME" &&
       "$CKPT" verify "$ckfs/ck" > /dev/null 2>&1 && [[ -f $ckfs/ck/latest ]]; then
      pass "ENOSPC while saving a checkpoint stops the job with the reason; the last checkpoint verifies"
      grep -rhoim1 "[^]]*no space[^]]*" "$BASE/out" | head -1
    else fail "ENOSPC checkpoint: exit $rc"; tail -5 "$BASE/out"; ls -la "$ckfs/ck" 2>/dev/null; fi
    swap_empty || fail "ENOSPC: swap files left"
    umount "$ckfs"
  else
    echo "SKIPPED CASE: ENOSPC while saving a checkpoint (cannot mount a 600 KiB tmpfs here)"
  fi
else
  # Counted by tools/test.sh as skipped (tests/testing/skipped.h); optimizer_swapper_test covers
  # the no-room check in-process.
  echo "SKIPPED CASE: a swap directory without room (cannot mount a 64 KiB tmpfs here)"
  echo "SKIPPED CASE: ENOSPC while saving a checkpoint (cannot mount a 600 KiB tmpfs here)"
fi

echo "nvme_offload_test: $fails failure(s)"
[[ $fails -eq 0 ]]
