#!/usr/bin/env bash
# ds-launch, ds-agent and ds-worker as real processes on loopback: a 2 nodes x 2 slots job
# (127.0.0.1 and 127.0.0.2), and fault injection: a worker SIGKILLed, an agent SIGKILLed,
# the launcher (coordinator) SIGKILLed, a worker that hangs and ignores SIGTERM, a node
# that never joins, a restart that resumes from the checkpoint, refused credentials, and
# bad hostfiles. Every wait is bounded; each case checks that no process of its job is left.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
BASE=${TEST_TMPDIR:-$(mktemp -d)}/launch
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
source "$(dirname "$0")/launch_helpers.sh"  # pass, fail, wait_for, exit_of, no_leftovers, ...
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/hosts"
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1

job() {  # job DIR STEPS [EXTRA]: a job config in DIR/job.yaml
  mkdir -p "$1"
  cat > "$1/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 1, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10}
training: {train_iters: $2}
monitor: {log_interval: 50}
device: {threads: 1}
${3:-}
YAML
}
launch() {  # launch DIR ARGS...: runs ds-launch in the background, output in DIR/out
  local d=$1; shift
  "$LAUNCH" "$d/job.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 --node_timeout 3 --grace 1 "$@" > "$d/out" 2>&1 &
  echo $! > "$d/pid"
}
# --- 2 nodes x 2 slots ---
D=$BASE/ok; job "$D" 40
launch "$D"
exit_of "$D" 60
[[ $rc == 0 ]] && pass "2x2 job exits 0" || { fail "2x2 job exit $rc"; tail -20 "$D/out"; }
for r in 0 1 2 3; do grep -q "^\[rank $r\] done: 40 steps" "$D/out" || fail "no '[rank $r] done' line"; done
grep -q "succeeded: all 4 ranks exited 0" "$D/out" && pass "all ranks reported" || fail "no success summary"
no_leftovers "$D" "2x2"

# --- a worker SIGKILLed: every node stopped within 5 s, first failure named ---
D=$BASE/killworker; job "$D" 100000
launch "$D"
wait_for 30 all_running || fail "killworker: ranks not running"
victim=$(rank_pid 3)
t0=$(date +%s.%N); kill -9 "$victim"
exit_of "$D" 20; t1=$(date +%s.%N)
[[ $rc == 1 ]] && pass "worker SIGKILL: ds-launch exits 1" || fail "worker SIGKILL: exit $rc"
grep -q "first failure: rank 3 on 127.0.0.2: signal 9" "$D/out" && pass "worker SIGKILL: rank, host and signal named" \
  || { fail "worker SIGKILL: no first-failure line"; tail -5 "$D/out"; }
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 5.0) }' && pass "worker SIGKILL: job stopped in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s" \
  || fail "worker SIGKILL: took more than 5 s"
no_leftovers "$D" "worker SIGKILL"

# --- an agent SIGKILLed: node lost within 10 s, its workers die with it ---
# The ranks are stub workers that never talk to each other, so the node loss (not a peer's
# failed collective) is what ends the job.
D=$BASE/killagent; job "$D" 100000
printf '#!/bin/sh\nexec sleep 300 # %s/job.yaml\n' "$D" > "$D/idle.sh"; chmod +x "$D/idle.sh"
"$LAUNCH" "$D/job.yaml" --hostfile "$BASE/hosts" --worker "$D/idle.sh" --agent "$AGENT" \
  --heartbeat 0.5 --node_timeout 3 --grace 1 > "$D/out" 2>&1 & echo $! > "$D/pid"
wait_for 30 all_running || fail "killagent: ranks not running"
agent=$(pgrep -f "ds-agent.*--node_name 127.0.0.2" | head -1)
t0=$(date +%s.%N); kill -9 "$agent"
exit_of "$D" 25; t1=$(date +%s.%N)
[[ $rc == 1 ]] && pass "agent SIGKILL: ds-launch exits 1" || fail "agent SIGKILL: exit $rc"
grep -q "node 127.0.0.2: node lost" "$D/out" && pass "agent SIGKILL: node named as lost" || { fail "agent SIGKILL: no node-lost line"; tail -5 "$D/out"; }
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 10.0) }' && pass "agent SIGKILL: detected in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s" \
  || fail "agent SIGKILL: took more than 10 s"
no_leftovers "$D" "agent SIGKILL"

# --- the launcher (and its coordinator) SIGKILLed: agents stop workers and exit within 10 s ---
D=$BASE/killcoord; job "$D" 100000
launch "$D"
wait_for 30 all_running || fail "killcoord: ranks not running"
kill -9 "$(cat "$D/pid")"
if wait_for 10 none_left "$D"; then pass "coordinator SIGKILL: everything gone within 10 s"
else fail "coordinator SIGKILL: left: $(leftovers "$D" | tr '\n' ' ')"; pkill -9 -f "$D/job.yaml"; fi

# --- a worker that hangs at start and ignores SIGTERM: ds-launch stop ends it ---
D=$BASE/hang; job "$D" 10
printf '#!/bin/sh\ntrap "" TERM\necho "hanging before training"\nexec sleep 300 # %s/job.yaml\n' "$D" > "$D/hang.sh"
chmod +x "$D/hang.sh"
"$LAUNCH" "$D/job.yaml" --hostfile "$BASE/hosts" --worker "$D/hang.sh" --agent "$AGENT" \
  --heartbeat 0.5 --node_timeout 3 --grace 1 > "$D/out" 2>&1 & echo $! > "$D/pid"
wait_for 20 grep -q "hanging before training" "$D/out" || fail "hang: worker did not start"
sleep 0.5
"$LAUNCH" stop >/dev/null 2>&1 || fail "hang: ds-launch stop failed"
exit_of "$D" 15
[[ $rc == 3 ]] && pass "hanging worker: stopped (exit 3)" || { fail "hanging worker: exit $rc"; tail -5 "$D/out"; }
no_leftovers "$D" "hanging worker"

# --- a node that never joins: the rendezvous names it ---
D=$BASE/nojoin; job "$D" 10
NAP="sleep 30.000$$"  # this test's own sleeper: removed by its exact command line, not by "sleep 30"
printf '#!/bin/sh\ncase "$*" in *127.0.0.2*) exec %s ;; esac\nexec %s "$@"\n' "$NAP" "$AGENT" > "$D/agent.sh"
chmod +x "$D/agent.sh"
"$LAUNCH" "$D/job.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$D/agent.sh" \
  --rdzv_timeout 2 --heartbeat 0.5 > "$D/out" 2>&1 & echo $! > "$D/pid"
exit_of "$D" 20
grep -q "1/2 nodes joined" "$D/out" && grep -q "missing: 127.0.0.2" "$D/out" \
  && pass "rendezvous timeout names the missing node" || { fail "rendezvous timeout (exit $rc)"; tail -5 "$D/out"; }
[[ $rc == 1 ]] || fail "rendezvous timeout: exit $rc"
pkill -9 -f "$D/agent.sh" 2>/dev/null; pkill -9 -xf "$NAP" 2>/dev/null

# --- --max_restarts: a killed worker restarts the round, which resumes from the checkpoint ---
D=$BASE/restart; job "$D" 3000 "checkpoint: {dir: $BASE/restart/ckpt, save_interval: 100, load: latest}"
launch "$D" --max_restarts 1
wait_for 60 test -e "$D/ckpt/latest" || fail "restart: no checkpoint written"
kill -9 "$(rank_pid 1)"
exit_of "$D" 120
[[ $rc == 0 ]] && pass "restart: job succeeds after one restart" || { fail "restart: exit $rc"; tail -8 "$D/out"; }
grep -q "round 2, 1 restart" "$D/out" && pass "restart: counted" || fail "restart: not counted"
grep -q "resumed from step" "$D/out" && pass "restart: workers resumed from the checkpoint" || fail "restart: no resume"
no_leftovers "$D" "restart"

# --- credentials and bad input ---
D=$BASE/auth; job "$D" 100000
launch "$D"
wait_for 30 all_running || fail "auth: ranks not running"
addr=$(cat "$(cat "$DS_RUNTIME_HOME/current")/coordinator")
printf 'wrong\n' > "$D/bad_token"; chmod 600 "$D/bad_token"
out=$("$LAUNCH" status --coordinator "$addr" --token_file "$D/bad_token" 2>&1)
grep -q UNAUTHENTICATED <<<"$out" && pass "wrong token refused" || fail "wrong token: $out"
"$LAUNCH" stop >/dev/null 2>&1; exit_of "$D" 15
no_leftovers "$D" "auth"
printf '127.0.0.1 slots=2\n127.0.0.1 slots=1\n' > "$BASE/dup"
out=$("$LAUNCH" "$D/job.yaml" --hostfile "$BASE/dup" 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q "dup:2: duplicate host" <<<"$out" && pass "duplicate host rejected" || fail "dup hostfile: $rc $out"
out=$("$LAUNCH" "$D/job.yaml" --hostfile "$BASE/hosts" --include 127.0.0.9 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q "127.0.0.9" <<<"$out" && pass "unknown --include host rejected" || fail "include: $rc $out"
[[ -z $(pgrep -f "ds-agent.*$BASE") ]] || fail "bad input started agents"

echo "launch_test: $fails failure(s)"
[[ $fails -eq 0 ]]
