# Sourced by the ds-chat tests: a small preference set and the files of a ds-chat run.
#
# chat_pairs FILE SEED: 3000 rows of addition of numbers below 100 written without leading zeros
#   ("7+45=": prompts of 4 to 6 tokens, left-padded in step 3), chosen the right sum reversed
#   ("250$"), rejected one off by 1, 2 or 10.
# chat_jobs DIR MICRO ACTOR_STAGE [EXTRA]: sft, reward, actor and critic job files (global batch
#   16, micro MICRO, the actor at ZeRO stage ACTOR_STAGE, the others at 0; EXTRA appended).
# chat_config FILE STEPS ITERATIONS EVAL_PROMPTS: the ds-chat configuration over them.
chat_pairs() {
  python3 - "$1" "$2" <<'PYEOF'
import json, random, sys
rng = random.Random(int(sys.argv[2]))
rev = lambda n: str(n).zfill(3)[::-1]
with open(sys.argv[1], "w") as f:
    for _ in range(3000):
        a, b = rng.randrange(100), rng.randrange(100)
        s, w = a + b, (a + b + rng.choice([1, 2, 10])) % 199
        f.write(json.dumps({"prompt": f"{a}+{b}=", "chosen": rev(s) + "$",
                            "rejected": rev(w) + "$", "source": "test"}) + "\n")
PYEOF
}

chat_jobs() {
  local m stage
  for m in sft reward actor critic; do
    stage=0; [[ $m == actor ]] && stage=$3
    cat > "$1/$m.yaml" <<YAML
train_batch_size: 16
train_micro_batch_size_per_gpu: $2
optimizer: {type: AdamW, params: {lr: 0.001}}
zero_optimization: {stage: $stage, stage3_param_persistence_threshold: 100}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 14, max_seq_len: 10}
training: {train_iters: 1000}
device: {type: cpu, threads: 1}
${4:-}
YAML
  done
}

chat_config() {
  cat > "$1" <<YAML
data: {files: [pairs.jsonl], data_split: "2,4,4", seed: 5}
tokenizer: addition
prompt_len: 6
answer_len: 4
stop: "\$"
output: out
sft: {job: sft.yaml, steps: $2}
reward: {job: reward.yaml, steps: $2}
ppo: {actor: actor.yaml, critic: critic.yaml, iterations: $3, eval_prompts: $4}
YAML
}

# chat_figures LOG CSV REWARD_FLOOR KL_CEILING [GAIN]: the figures a ds-chat run reported, parsed
# as numbers and held to what its configuration reaches: the reward model's held-out pairwise
# accuracy rises in training and ends at least REWARD_FLOOR (%), the first PPO iteration's
# per-token KL to the reference (ppo.csv) is 0 (its rollouts come before any update: the actor is
# the reference) and every iteration's stays below KL_CEILING, the reward model's mean score of the
# greedy answers rises over step 3, and (given GAIN) PPO lifts held-out exact match by at least
# GAIN points over SFT's; GAIN "-": neither of the last two (a few iterations from an untrained
# model, where they are a race). Prints the figures; exit 1 naming the first one that misses.
chat_figures() {
  python3 - "$@" <<'PYEOF'
import csv, re, sys
log, table, floor, ceiling = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
outcome = len(sys.argv) <= 5 or sys.argv[5] != "-"  # hold PPO's outcome to a bar
gain = float(sys.argv[5]) if len(sys.argv) > 5 and outcome else None
text = open(log, errors="replace").read()
def find(pattern, what):
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"no {what} in {log}")
    return [float(g) for g in m.groups()]
sft, = find(r"sft: held-out exact match (\d+\.\d+)%", "SFT exact match")
rm0, rm1 = find(r"reward: held-out pairwise accuracy (\d+\.\d+)% -> (\d+\.\d+)%", "pairwise accuracy")
em0, em1, r0, r1 = find(r"ppo: held-out exact match (\d+\.\d+)% -> (\d+\.\d+)% \(\d+ prompts\), "
                        r"mean reward (-?\d+\.\d+) -> (-?\d+\.\d+)", "PPO figures")
kl = [float(row["kl"]) for row in csv.DictReader(open(table))]
print(f"SFT exact match {sft}%; pairwise accuracy {rm0}% -> {rm1}%; PPO exact match {em0}% -> "
      f"{em1}%, mean reward {r0} -> {r1}; KL max {max(kl):.4f} over {len(kl)} iterations")
checks = [(0 <= sft <= 100 and em0 == sft, "PPO's starting exact match is not SFT's"),
          (rm1 > rm0, "the reward model's accuracy did not rise"),
          (rm1 >= floor, f"pairwise accuracy {rm1}% is below {floor}%"),
          (abs(kl[0]) < 1e-4, f"the first iteration's KL {kl[0]} is not 0 (actor = reference)"),
          (max(kl) < ceiling, f"KL {max(kl)} is not below {ceiling}"),
          (r1 > r0 or not outcome, "the greedy answers' mean reward did not rise"),
          (gain is None or em1 >= em0 + gain, f"PPO's exact match {em1}% is not {gain} points over SFT's {em0}%")]
for ok, why in checks:
    if not ok:
        sys.exit(why)
PYEOF
}
