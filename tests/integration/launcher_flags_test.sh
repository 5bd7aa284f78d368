#!/usr/bin/env bash
# The deepspeed launcher's habits through ds-launch, with a stand-in worker that prints what it
# was given: --include host:1,3 pins those GPUs (CUDA_VISIBLE_DEVICES 1 and 3, not 0 and 1),
# .deepspeed_env (working directory over home, or DS_ENV_FILE) reaches every rank on every node,
# --master_addr / --master_port place the coordinator, --num_gpus limits the slots, and the MPI
# launcher names are refused before anything starts.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
AGENT=$R/launcher/agent/ds-agent
BASE=${TEST_TMPDIR:-$(mktemp -d)}/flags
rm -rf "$BASE"; mkdir -p "$BASE/home" "$BASE/work"
export DS_RUNTIME_HOME=$BASE/dsr HOME=$BASE/home
unset DS_ENV_FILE CUDA_VISIBLE_DEVICES
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

cat > "$BASE/worker" <<'SH'
#!/usr/bin/env bash
echo "seen rank=$RANK node=$DS_NODE_NAME cvd=${CUDA_VISIBLE_DEVICES:-none} foo=${FOO:-unset} who=${WHO:-unset}"
SH
chmod +x "$BASE/worker"
cat > "$BASE/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 1
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 1, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/none.tok, seq_len: 10}
training: {train_iters: 1}
device: {threads: 1}
YAML
printf '127.0.0.1 slots=4\n127.0.0.2 slots=4\n' > "$BASE/hosts"
printf 'FOO=from-home\nWHO=home\n' > "$HOME/.deepspeed_env"
printf '# this project\nFOO=from-cwd\n' > "$BASE/work/.deepspeed_env"

run() {  # run NAME ARGS...: ds-launch from the work directory, output in $BASE/out
  (cd "$BASE/work" && timeout 60 "$LAUNCH" "$BASE/job.yaml" --hostfile "$BASE/hosts" \
    --worker "$BASE/worker" --agent "$AGENT" --heartbeat 0.5 "$@") > "$BASE/out" 2>&1
}
seen() { grep -c "seen rank=" "$BASE/out"; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if run --include "127.0.0.1:1,3@127.0.0.2:2" --master_addr 127.0.0.1 --master_port "$port"; then
  pass "--include with slots, --master_addr / --master_port: the job succeeds"
else fail "include job: exit $?"; tail -10 "$BASE/out"; fi
[[ $(seen) == 3 ]] && pass "3 ranks ran" || fail "$(seen) ranks ran"
grep -q "rank=0 node=127.0.0.1 cvd=1 " "$BASE/out" && grep -q "rank=1 node=127.0.0.1 cvd=3 " "$BASE/out" \
  && grep -q "rank=2 node=127.0.0.2 cvd=2 " "$BASE/out" \
  && pass "--include 127.0.0.1:1,3@127.0.0.2:2 pins GPUs 1, 3 and 2" \
  || { fail "GPU pinning"; grep "seen" "$BASE/out"; }
grep -q "coordinator 127.0.0.1:$port" "$BASE/out" && pass "the coordinator listens on --master_addr:--master_port" \
  || { fail "coordinator address"; grep coordinator "$BASE/out"; }
[[ $(grep -c "foo=from-cwd who=home" "$BASE/out") == 3 ]] \
  && pass ".deepspeed_env reaches every rank on both nodes (the working directory's over home's)" \
  || { fail ".deepspeed_env"; grep "seen" "$BASE/out"; }
grep -q "exporting the variables of $BASE/work/.deepspeed_env" "$BASE/out" && pass "ds-launch says which env files it exported" \
  || fail "no export line"

printf 'FOO=from-ds-env-file\n' > "$BASE/custom.env"
if DS_ENV_FILE=$BASE/custom.env run --num_gpus 1 && [[ $(seen) == 2 ]] \
    && [[ $(grep -c "foo=from-ds-env-file who=unset" "$BASE/out") == 2 ]]; then
  pass "DS_ENV_FILE replaces .deepspeed_env; --num_gpus 1 runs one rank per node"
else fail "DS_ENV_FILE / --num_gpus"; grep "seen\|ds-launch" "$BASE/out"; fi
grep -q "cvd=none" "$BASE/out" && pass "without --include nothing is pinned on a machine with no GPU" \
  || fail "unexpected pinning: $(grep seen "$BASE/out")"

out=$(cd "$BASE/work" && "$LAUNCH" "$BASE/job.yaml" --hostfile "$BASE/hosts" --worker "$BASE/worker" \
  --agent "$AGENT" --launcher openmpi 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q "openmpi is not supported" <<<"$out" && pass "--launcher openmpi refused before start" \
  || fail "openmpi: exit $rc: $out"
printf 'GOOD=1\nexport BAD\n' > "$BASE/work/.deepspeed_env"
out=$(cd "$BASE/work" && "$LAUNCH" "$BASE/job.yaml" --hostfile "$BASE/hosts" --worker "$BASE/worker" \
  --agent "$AGENT" 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q ".deepspeed_env:2" <<<"$out" && pass "a bad .deepspeed_env line refused with file:line" \
  || fail "bad env file: exit $rc: $out"

echo "launcher_flags_test: $fails failure(s)"
[[ $fails -eq 0 ]]
