#!/usr/bin/env bash
# Training straight from Hugging Face folders (model: {hf: DIR}): every family's tiny model of
# runtime/generate/testdata/families trains 10 steps through ds-worker, and each step's loss
# equals transformers' own model trained by PyTorch's AdamW on the same batches within 1e-4
# relative, its gradient norm within 1e-3 (tools/hf_train_golden.py wrote both). Then the
# folder-as-model errors: a config value the runtime cannot honour, a missing shard, a tensor
# of the wrong shape, and data.seq_len missing, each named before any step. And DeepSpeed-Chat's
# three steps with an OPT actor and opt-350m-form critic and reward model from their folders.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
WORKER=$R/runtime/worker/ds-worker
CHAT=$R/tools/ds_chat/ds-chat
FAM=$R/runtime/generate/testdata/families
T=${TEST_TMPDIR:-$(mktemp -d)}/hf_train
rm -rf "$T"; mkdir -p "$T"
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

job() {  # job FILE DIR
  cat > "$1" <<YAML
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 1
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}}
model: {hf: $2}
data: {train: $FAM/train_tokens.bin, format: uint16, seq_len: 16, shuffle: false}
training: {train_iters: 10}
monitor: {csv: ${1%.yaml}.csv, log_interval: 1}
device: {threads: 2}
YAML
}

# matches CSV GOLDEN: loss (1e-4 relative) and gradient norm (1e-3) at each of the 10 steps.
matches() {
  python3 - "$1" "$2" <<'PY'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
g = json.load(open(sys.argv[2]))
assert len(rows) == len(g["losses"]) == 10, (len(rows), len(g["losses"]))
bad = []
for i, r in enumerate(rows):
    l, n = float(r["loss"]), float(r["grad_norm"])
    if abs(l - g["losses"][i]) > 1e-4 * abs(g["losses"][i]) + 1e-6:
        bad.append(f"step {i + 1} loss {l} vs {g['losses'][i]:.6f}")
    if abs(n - g["grad_norms"][i]) > 1e-3 * abs(g["grad_norms"][i]) + 1e-5:
        bad.append(f"step {i + 1} grad norm {n} vs {g['grad_norms'][i]:.6f}")
print("; ".join(bad[:3]) if bad else f"{rows[0]['loss']} -> {rows[-1]['loss']}")
sys.exit(1 if bad else 0)
PY
}

for dir in "$FAM"/*/; do
  name=$(basename "$dir")
  [[ -f $dir/train_golden.json ]] || continue
  job "$T/$name.yaml" "$dir"
  if ! out=$("$WORKER" --config "$T/$name.yaml" 2>&1); then
    fail "$name: ds-worker failed: $(tail -3 <<<"$out")"; continue
  fi
  if why=$(matches "$T/$name.csv" "$dir/train_golden.json"); then
    pass "$name trains as transformers + PyTorch AdamW does ($why)"
  else
    fail "$name: $why"
  fi
done

# expect_error NAME PATTERN CONFIG: ds-worker exits non-zero naming PATTERN, and wrote no CSV.
expect_error() {
  local out
  if out=$("$WORKER" --config "$3" 2>&1); then fail "$1: exit 0"; return; fi
  if ! grep -qF -- "$2" <<<"$out"; then fail "$1: no \"$2\" in: $(tail -2 <<<"$out")"; return; fi
  if [[ -s ${3%.yaml}.csv ]]; then fail "$1: a step ran"; return; fi
  pass "$1"
}
cp -r "$FAM/qwen2" "$T/bad_config"
sed -i 's/"attention_dropout": 0.0/"attention_dropout": 0.1/' "$T/bad_config/config.json"
job "$T/bad_config.yaml" "$T/bad_config"
expect_error "a config value the runtime cannot honour" \
  'bad_config/config.json: "attention_dropout" is 0.1' "$T/bad_config.yaml"
cp -r "$FAM/qwen3" "$T/no_shard" && rm "$T/no_shard/model-00002-of-00004.safetensors"
job "$T/no_shard.yaml" "$T/no_shard"
expect_error "a missing shard" "shard model-00002-of-00004.safetensors" "$T/no_shard.yaml"
cp -r "$FAM/gemma" "$T/wrong_shape"
sed -i 's/"intermediate_size": 64/"intermediate_size": 48/' "$T/wrong_shape/config.json"
job "$T/wrong_shape.yaml" "$T/wrong_shape"
expect_error "a tensor of the wrong shape" "model.layers.0.mlp.gate_proj.weight has shape [64, 32]" \
  "$T/wrong_shape.yaml"
job "$T/no_seq.yaml" "$FAM/opt" && sed -i 's/, seq_len: 16//' "$T/no_seq.yaml"
expect_error "data.seq_len missing" "data.seq_len is required with model.hf" "$T/no_seq.yaml"

# DeepSpeed-Chat on Hub folders, as its defaults pair them: an OPT actor (pre-LN, project_in /
# project_out: opt-1.3b's form) and an OPT reward model and critic of opt-350m's form (post-LN),
# each job file's model a folder. The three steps run; the reward model starts from its own
# folder (its value head drawn), the critic from the reward model, the actor and reference from
# SFT; PPO's figures are reported. The actor trains LoRA adapters as DeepSpeed-Chat's OPT
# examples do (lora_dim, lora_module_name "decoder.layers.", only_optimize_lora), its rollouts
# generating with the adapters fused, and the actor it writes is the merged model.
mkdir -p "$T/chat"
python3 - "$T/chat/pairs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    for _ in range(600):
        a, b = rng.randrange(100), rng.randrange(100)
        rev = lambda n: str(n).zfill(3)[::-1]
        f.write(json.dumps({"prompt": f"{a}+{b}=", "chosen": rev(a + b) + "$",
                            "rejected": rev((a + b + rng.choice([1, 2, 10])) % 199) + "$"}) + "\n")
PY
for m in sft:opt reward:opt-post actor:opt critic:opt-post; do
  cat > "$T/chat/${m%%:*}.yaml" <<YAML
train_batch_size: 16
train_micro_batch_size_per_gpu: 16
optimizer: {type: AdamW, params: {lr: 0.001}}
model: {hf: $FAM/${m#*:}}
training: {train_iters: 1000}
device: {threads: 2}
YAML
done
sed -i "s|model: {hf: \(.*\)}|model: {hf: \1, lora: {lora_dim: 4, lora_module_name: decoder.layers., only_optimize_lora: true}}|" "$T/chat/actor.yaml"
cat > "$T/chat/chat.yaml" <<YAML
data: {files: [pairs.jsonl], data_split: "2,4,4", seed: 5}
tokenizer: addition
prompt_len: 6
answer_len: 4
stop: "\$"
output: out
sft: {job: sft.yaml, steps: 20}
reward: {job: reward.yaml, steps: 20}
ppo: {actor: actor.yaml, critic: critic.yaml, iterations: 3, eval_prompts: 32}
YAML
if timeout 600 "$CHAT" --config "$T/chat/chat.yaml" > "$T/chat/log" 2>&1 &&
    grep -q "sft: held-out exact match" "$T/chat/log" &&
    grep -q "reward: held-out pairwise accuracy" "$T/chat/log" &&
    grep -q "ppo: held-out exact match" "$T/chat/log" &&
    grep -q "drawn: what the folder lacks" "$T/chat/log" &&
    grep -q "LoRA: 0.00[0-9]M trainable parameters" "$T/chat/log" &&
    [[ -s $T/chat/out/actor.safetensors && -s $T/chat/out/ppo.csv ]] &&
    ! grep -qa "lora_" "$T/chat/out/actor.safetensors"; then
  pass "ds-chat with an OPT LoRA actor (DeepSpeed-Chat's keys, fused for rollouts, written merged) and an opt-350m-form critic and reward model from Hub folders"
else
  fail "ds-chat on Hub folders: $(grep -i "error\|held-out" "$T/chat/log" | tail -3)"
fi

echo "hf_train_test: $fails failure(s)"
[[ $fails -eq 0 ]]
