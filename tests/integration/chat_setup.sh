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
