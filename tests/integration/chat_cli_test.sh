#!/usr/bin/env bash
# ds-chat end to end on a small preference set (2-digit addition: right and wrong sums): the
# three steps from one configuration, each model's job file its own, write their weights and the
# PPO log, and report the figures (held-out exact match after SFT, pairwise accuracy before and
# after the reward model trains, reward / KL per PPO iteration, the time split), held to floors
# as numbers (chat_figures). One step alone
# runs from the earlier steps' files; step 3 resumed from its checkpoint (actor, critic, PPO
# state) equals the uninterrupted run. Bad configurations are refused before any training with
# exit 2, naming the key.
set -uo pipefail
R=${TEST_SRCDIR:-.}/ds_runtime
CHAT=$R/tools/ds_chat/ds-chat
W=${TEST_TMPDIR:-$(mktemp -d)}/chat
rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

source "$(dirname "$0")/chat_setup.sh"  # chat_pairs, chat_jobs, chat_config
chat_pairs "$W/pairs.jsonl" 3
chat_jobs "$W" 16 0
chat_config "$W/chat.yaml" 40 5 64
if timeout 300 "$CHAT" --config "$W/chat.yaml" > "$W/log" 2>&1; then
  pass "ds-chat runs the three steps"
else fail "ds-chat failed"; tail -5 "$W/log"; fi
for f in sft.safetensors reward.safetensors actor.safetensors ppo.csv; do
  [[ -s $W/out/$f ]] && pass "writes out/$f" || fail "no out/$f"
done
[[ $(wc -l < "$W/out/ppo.csv") == 6 ]] && pass "ppo.csv has a row per iteration" ||
  fail "ppo.csv rows: $(wc -l < "$W/out/ppo.csv")"
for pattern in "sft: 600 examples" "sft: held-out exact match [0-9.]*%" \
               "reward: held-out pairwise accuracy [0-9.]*% -> [0-9.]*%" \
               "ppo iteration 5/5: reward" "ppo: held-out exact match [0-9.]*% -> [0-9.]*% (64 prompts)" \
               "ppo: generation [0-9.]*% of the steps' time"; do
  grep -q "$pattern" "$W/log" && pass "reports \"$pattern\"" || fail "no \"$pattern\""
done
# The figures this configuration reaches here (40 steps, 5 iterations: pairwise accuracy 23.21%
# -> 51.79%, KL at most 0.12, mean reward -0.40 -> -0.30), with room for other CPUs' rounding.
figures=$(chat_figures "$W/log" "$W/out/ppo.csv" 45 0.5 2>&1) && pass "figures: $figures" ||
  fail "figures: $figures"
# Step 3 alone, from the files steps 1 and 2 wrote.
rm "$W/out/actor.safetensors"
if timeout 300 "$CHAT" --config "$W/chat.yaml" --step ppo > "$W/log3" 2>&1 &&
   [[ -s $W/out/actor.safetensors ]] && ! grep -q "step sft" "$W/log3"; then
  pass "--step ppo runs step 3 alone"
else fail "--step ppo"; tail -3 "$W/log3"; fi

# Resume of step 3: 3 iterations saved (actor, critic, the actor's moving average, the PPO
# state), then on to 6 with resume: true, equal to 6 straight iterations in every figure but the
# timings, and in the moving average written at the end (actor_ema.safetensors), byte for byte.
sed 's/iterations: 5/iterations: 6, enable_ema: true/; s/output: out/output: straight/' \
  "$W/chat.yaml" > "$W/straight.yaml"
sed 's/iterations: 5/iterations: 3, enable_ema: true/; s/output: out/output: resumed/' \
  "$W/chat.yaml" > "$W/part.yaml"
sed 's/iterations: 5, /iterations: 6, enable_ema: true, resume: true, /; s/output: out/output: resumed/' \
  "$W/chat.yaml" > "$W/rest.yaml"
if "$CHAT" --config "$W/straight.yaml" > "$W/log_s" 2>&1 && "$CHAT" --config "$W/part.yaml" \
     > "$W/log_p" 2>&1 && "$CHAT" --config "$W/rest.yaml" --step ppo > "$W/log_r" 2>&1 &&
   grep -q "ppo: resumed at iteration 3" "$W/log_r" &&
   diff <(cut -d, -f1-5 "$W/straight/ppo.csv") <(cut -d, -f1-5 "$W/resumed/ppo.csv") > /dev/null; then
  pass "step 3 resumed at iteration 3 gives the uninterrupted run's rewards, KL and losses"
else fail "step 3 resume"; paste -d' ' "$W/straight/ppo.csv" "$W/resumed/ppo.csv" | tail -4; tail -3 "$W/log_r"; fi
if [[ -s $W/straight/actor_ema.safetensors ]] &&
   cmp -s "$W/straight/actor_ema.safetensors" "$W/resumed/actor_ema.safetensors" &&
   ! cmp -s "$W/straight/actor_ema.safetensors" "$W/straight/actor.safetensors"; then
  pass "the actor's moving average resumes exactly (actor_ema.safetensors equal, and not the actor)"
else fail "EMA resume"; ls -l "$W/straight" "$W/resumed"; fi

# ptx: step 3 with DeepSpeed-Chat's unsupervised term on a text file (sums written the usual way,
# "12+34=46", unlike the answers' reversed digits), unsup_coef 1: every iteration reports the pretraining steps' LM loss, which
# falls as the actor learns the text (2.75 -> 2.53 over 8 iterations here).
python3 -c "
import random
r = random.Random(9)
print('\n'.join(f'{a}+{b}={a + b}' for a, b in ((r.randrange(100), r.randrange(100)) for _ in range(400))))
" > "$W/ptx.txt"
sed 's/iterations: 5, /iterations: 8, unsupervised_dataset: ptx.txt, unsup_coef: 1.0, /; s/output: out/output: ptx/' \
  "$W/chat.yaml" > "$W/ptx.yaml"
mkdir -p "$W/ptx" && cp "$W/out/sft.safetensors" "$W/out/reward.safetensors" "$W/ptx/"
if "$CHAT" --config "$W/ptx.yaml" --step ppo > "$W/log_x" 2>&1 && grep -q "ptx loss" "$W/log_x" &&
   awk -F, 'NR == 2 { first = $8 } NR == 9 { last = $8 } END { exit !(first > 1.5 && last < first - 0.1) }' \
     "$W/ptx/ppo.csv"; then
  pass "ptx: the pretraining steps' LM loss $(awk -F, 'NR == 2 { printf "%s", $8 } NR == 9 { printf " -> %s", $8 }' "$W/ptx/ppo.csv")"
else fail "ptx"; cut -d, -f1,8 "$W/ptx/ppo.csv"; tail -3 "$W/log_x"; fi

refused() {  # refused NAME PATTERN SED-EXPRESSION
  sed "$3" "$W/chat.yaml" > "$W/bad.yaml"
  out=$("$CHAT" --config "$W/bad.yaml" 2>&1); rc=$?
  if [[ $rc == 2 ]] && grep -q -- "$2" <<<"$out"; then pass "$1 refused: $2"
  else fail "$1: exit $rc: $out"; fi
}
refused "a misspelt PPO key" "ppo.kl_ctrl is not a ds-chat setting" 's/iterations: 5/iterations: 5, kl_ctrl: 0.1/'
refused "a bad data_split" 'data_split "2,4": needs three weights' 's/"2,4,4"/"2,4"/'
refused "no datasets" "data.files must name at least one" 's/files: \[pairs.jsonl\]/files: []/'
refused "a missing job file" 'job file ".*nope.yaml" cannot be read' 's/critic: critic.yaml/critic: nope.yaml/'
refused "an early stop above 1" "sft.stop_at_exact_match must be a share in \[0, 1\]" \
  's/sft: {job: sft.yaml, steps: 40}/sft: {job: sft.yaml, steps: 40, stop_at_exact_match: 70}/'
refused "an early stop on the reward model" "reward.stop_at_exact_match is not a ds-chat setting" \
  's/reward: {job: reward.yaml, steps: 40}/reward: {job: reward.yaml, steps: 40, stop_at_exact_match: 0.5}/'
refused "a negative eval_prompts" "ppo.eval_prompts must be >= 0" \
  's/eval_prompts: [0-9]*/eval_prompts: -16/'
refused "a missing ptx file" 'ppo.unsupervised_dataset ".*nope.txt" cannot be read' \
  's/iterations: 5, /iterations: 5, unsupervised_dataset: nope.txt, /'
out=$("$CHAT" --config "$W/chat.yaml" --step rl 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q "step must be sft, reward, ppo or all" <<<"$out" &&
  pass "an unknown --step refused" || fail "--step rl: exit $rc"

echo "chat_cli_test: $fails failed"
((fails == 0))
