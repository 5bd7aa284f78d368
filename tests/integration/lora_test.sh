#!/usr/bin/env bash
# LoRA (model.lora) against PEFT, and under ZeRO-3 through ds-launch:
#  - three PEFT cases of runtime/worker/testdata/lora (tools/lora_golden.py): qwen2 with PEFT's
#    default targets (q_proj, v_proj: row ranges of our fused qkv), opt with all-linear, a
#    GPT-2 with rsLoRA on c_attn (Conv1D). Each starts from PEFT's untrained adapter
#    (model.lora.adapter) and trains 10 steps: every loss within 1e-4 relative and gradient norm
#    within 1e-3 of PEFT + PyTorch's AdamW, and the adapter it saves (model.lora.save_adapter)
#    has PEFT's tensor names and shapes, values within 1e-4 of PEFT's after the same steps, and an
#    adapter_config.json PEFT reads (peft_type, r, lora_alpha, the same target modules). With
#    DS_PEER_PYTHON (torch, transformers, peft): PEFT loads our adapter onto the base model and
#    its logits equal the trained PeftModel's within 1e-4.
#  - the frozen weights come out of training bit for bit as they went in: a checkpoint's
#    frozen.safetensors at steps 5 and 10 equals the base model's weights exported before any
#    step, tensor by tensor, byte for byte.
#  - ds-ckpt export of a LoRA checkpoint writes the Hugging Face folder with the adapters merged
#    in; with PEFT at hand, transformers' logits of it equal PEFT's of the base and the adapter.
#  - ZeRO-3 with 2 ranks through ds-launch is on the 1-rank curve (20 steps, loss within 1e-5),
#    and its step-10 checkpoint resumes on one rank on the same curve (the frozen weights
#    restored from the checkpoint, not read again).
#  - refusals, named before any step: target modules that match nothing, an adapter of another
#    rank, tensor parallelism.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
WORKER=$R/runtime/worker/ds-worker
LAUNCH=$R/launcher/launch/ds-launch
AGENT=$R/launcher/agent/ds-agent
CKPT=$R/tools/ds_ckpt/ds-ckpt
FAM=$R/runtime/generate/testdata/families
LORA=$R/runtime/worker/testdata/lora
ST=$R/tools/safetensors_io.py
T=${TEST_TMPDIR:-$(mktemp -d)}/lora
rm -rf "$T"; mkdir -p "$T"
export DS_RUNTIME_HOME=$T/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

job() {  # job FILE BASE LORA_YAML [EXTRA YAML LINES]
  cat > "$1" <<YAML
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 1
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 5.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}}
model: {hf: $2, lora: $3}
data: {train: $FAM/train_tokens.bin, format: uint16, seq_len: 16, shuffle: false}
training: {train_iters: 10}
monitor: {csv: ${1%.yaml}.csv, log_interval: 1}
device: {threads: 2}
${4:-}
YAML
}

# peft_case CASE LORA_YAML: trains from PEFT's initial adapter; compares curve and adapter.
peft_case() {
  local c=$1 g=$LORA/$1/golden.json
  local base=$R/$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['base'])" "$g")
  job "$T/$c.yaml" "$base" "{$2, adapter: $LORA/$c/adapter_init, save_adapter: $T/${c}_adapter}"
  if ! out=$("$WORKER" --config "$T/$c.yaml" 2>&1); then
    fail "$c: ds-worker failed: $(tail -3 <<<"$out")"; return
  fi
  if why=$(python3 - "$T/$c.csv" "$g" "$T/${c}_adapter" "$LORA/$c/adapter_final" "$ST" <<'PY'
import csv, json, struct, sys, importlib.util
rows = list(csv.DictReader(open(sys.argv[1])))
g = json.load(open(sys.argv[2]))
spec = importlib.util.spec_from_file_location("st", sys.argv[5]); st = importlib.util.module_from_spec(spec)
spec.loader.exec_module(st)
bad = []
for i, r in enumerate(rows):
    l, n = float(r["loss"]), float(r["grad_norm"])
    if abs(l - g["losses"][i]) > 1e-4 * abs(g["losses"][i]) + 1e-6: bad.append(f"step {i+1} loss {l} vs {g['losses'][i]}")
    if abs(n - g["grad_norms"][i]) > 1e-3 * abs(g["grad_norms"][i]) + 1e-5: bad.append(f"step {i+1} norm {n} vs {g['grad_norms'][i]}")
if len(rows) != 10: bad.append(f"{len(rows)} steps")
def load(d):
    return {n: (shape, st.floats(dt, raw)) for n, dt, shape, raw in st.read(d + "/adapter_model.safetensors")}
ours, peft = load(sys.argv[3]), load(sys.argv[4])
if set(ours) != set(peft): bad.append(f"tensor names differ: {sorted(set(ours) ^ set(peft))[:4]}")
worst = 0.0
for n in set(ours) & set(peft):
    if ours[n][0] != peft[n][0]: bad.append(f"{n}: shape {ours[n][0]} vs {peft[n][0]}"); continue
    worst = max([worst] + [abs(a - b) for a, b in zip(ours[n][1], peft[n][1])])
if worst > 1e-4: bad.append(f"adapter values differ by {worst:.2e}")
oc, pc = json.load(open(sys.argv[3] + "/adapter_config.json")), json.load(open(sys.argv[4] + "/adapter_config.json"))
for k in ("peft_type", "r", "lora_alpha", "use_rslora", "fan_in_fan_out"):
    if oc.get(k) != pc.get(k): bad.append(f"adapter_config {k}: {oc.get(k)} vs {pc.get(k)}")
short = lambda c: sorted({m.rsplit(".", 1)[-1] for m in c["target_modules"]})
if short(oc) != short(pc): bad.append(f"target_modules {short(oc)} vs {short(pc)}")
print("; ".join(bad[:3]) if bad else f"loss {rows[0]['loss']} -> {rows[-1]['loss']}, {len(ours)} adapter tensors within {worst:.1e}")
sys.exit(1 if bad else 0)
PY
  ); then pass "$c: 10 LoRA steps as PEFT + PyTorch AdamW, the same adapter saved ($why)"
  else fail "$c: $why"; fi
  if [[ -n ${DS_PEER_PYTHON:-} ]] && "$DS_PEER_PYTHON" -c "import peft, transformers" 2>/dev/null; then
    if why=$(cd "$R" && "$DS_PEER_PYTHON" - "$base" "$T/${c}_adapter" "$g" 2>/dev/null <<'PY'
import json, sys, torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
g = json.load(open(sys.argv[3]))
base = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, attn_implementation="eager")
model = PeftModel.from_pretrained(base, sys.argv[2]).eval()
with torch.no_grad():
    got = model(input_ids=torch.tensor([g["prompt"]])).logits[0]
diff = (got - torch.tensor(g["logits"])).abs().max().item()
print(f"max logit difference {diff:.2e}")
sys.exit(0 if diff < 1e-4 else 1)
PY
    ); then pass "$c: PEFT loads our adapter with the trained model's logits ($why)"
    else fail "$c: PEFT with our adapter: ${why:-failed to load}"; fi
  else
    echo "SKIPPED CASE: $c: PEFT loading our adapter (no DS_PEER_PYTHON with peft)"
  fi
}
peft_case qwen2 "r: 4, lora_alpha: 8"
peft_case opt "r: 4, lora_alpha: 16, target_modules: all-linear"
peft_case gpt2 "r: 4, lora_alpha: 8, use_rslora: true"

# Frozen weights, bit for bit: the base model as exported before training, and as two
# checkpoints of a LoRA run save them.
Q=$FAM/qwen2
job "$T/base.yaml" "$Q" "{r: 4}"
sed -i 's/lora: {r: 4}/dropout: 0.0/' "$T/base.yaml"
job "$T/frozen.yaml" "$Q" "{r: 4, lora_alpha: 8, save_adapter: $T/frozen_adapter}" \
  "checkpoint: {dir: $T/ck_frozen, save_interval: 5}"
if "$WORKER" --config "$T/base.yaml" --export-init "$T/base.safetensors" > "$T/base.out" 2>&1 &&
   "$WORKER" --config "$T/frozen.yaml" > "$T/frozen.out" 2>&1 &&
   why=$(python3 - "$T/base.safetensors" "$T/ck_frozen" "$ST" <<'PY'
import sys, importlib.util
spec = importlib.util.spec_from_file_location("st", sys.argv[3]); st = importlib.util.module_from_spec(spec)
spec.loader.exec_module(st)
base = {n: raw for n, dt, shape, raw in st.read(sys.argv[1])}
for step in (5, 10):
    frozen = {n: raw for n, dt, shape, raw in st.read(f"{sys.argv[2]}/step_{step:08d}/frozen.safetensors")}
    if set(frozen) != set(base): sys.exit(print(f"step {step}: names differ") or 1)
    diff = [n for n in base if frozen[n] != base[n]]
    if diff: sys.exit(print(f"step {step}: {diff[0]} changed") or 1)
print(f"{len(base)} tensors")
PY
   ); then
  pass "the frozen weights are the base model's bit for bit at steps 5 and 10 ($why)"
else
  fail "frozen weights: ${why:-a run failed: $(tail -2 "$T/frozen.out")}"
fi

# ds-ckpt export of the LoRA checkpoint: a Hugging Face folder with the adapters merged in (no
# adapter tensor in it, q_proj and v_proj moved off the base, k_proj not); with transformers and
# PEFT at hand, its logits equal PEFT's base model with the adapter the run saved.
if "$CKPT" export --config "$T/frozen.yaml" --input "$T/ck_frozen/step_00000010" \
     --output "$T/merged_hf" > "$T/export.out" 2>&1 &&
   why=$(python3 - "$T/merged_hf/model.safetensors" "$Q/model.safetensors" "$ST" <<'PY'
import sys, importlib.util
spec = importlib.util.spec_from_file_location("st", sys.argv[3]); st = importlib.util.module_from_spec(spec)
spec.loader.exec_module(st)
merged = {n: raw for n, dt, shape, raw in st.read(sys.argv[1])}
base = {n: raw for n, dt, shape, raw in st.read(sys.argv[2])}
if any("lora" in n for n in merged): sys.exit(print("adapter tensors in the export") or 1)
p = "model.layers.0.self_attn."
moved = [merged[p + m + ".weight"] != base[p + m + ".weight"] for m in ("q_proj", "v_proj", "k_proj")]
if moved != [True, True, False]: sys.exit(print(f"q, v, k moved: {moved}") or 1)
print(f"{len(merged)} tensors, q_proj and v_proj merged")
PY
   ); then
  pass "ds-ckpt export of a LoRA checkpoint merges the adapters ($why)"
else
  fail "ds-ckpt export of LoRA: ${why:-$(tail -2 "$T/export.out")}"
fi
if [[ -n ${DS_PEER_PYTHON:-} ]] && "$DS_PEER_PYTHON" -c "import peft" 2>/dev/null; then
  if why=$("$DS_PEER_PYTHON" - "$Q" "$T/frozen_adapter" "$T/merged_hf" 2>/dev/null <<'PY'
import sys, torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
load = lambda d: AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
x = torch.tensor([[1, 60, 7, 33, 12, 9, 50, 2, 41, 19, 26]])
with torch.no_grad():
    want = PeftModel.from_pretrained(load(sys.argv[1]), sys.argv[2]).eval()(input_ids=x).logits
    got = load(sys.argv[3]).eval()(input_ids=x).logits
diff = (got - want).abs().max().item()
print(f"max logit difference {diff:.2e}")
sys.exit(0 if diff < 1e-4 else 1)
PY
  ); then pass "transformers loads the merged export with PEFT's logits ($why)"
  else fail "merged export vs PEFT: ${why:-failed}"; fi
else
  echo "SKIPPED CASE: the merged export against PEFT (no DS_PEER_PYTHON with peft)"
fi

# ZeRO-3 over 2 ranks through ds-launch, against one rank; then resume from its checkpoint.
source "$(dirname "$0")/curves.sh"  # same_steps
printf '127.0.0.1 slots=2\n' > "$T/hosts"
zjob() {  # zjob FILE MICRO STAGE CSV ITERS [EXTRA]
  job "$1" "$Q" "{r: 4, lora_alpha: 8, target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj]}" "${6:-}"
  sed -i "s/^train_micro_batch_size_per_gpu: 2/train_batch_size: 4\ntrain_micro_batch_size_per_gpu: $2/;
          s/^gradient_accumulation_steps: 1//; s|csv: [^,]*,|csv: $4,|; s/train_iters: 10/train_iters: $5/;
          s/threads: 2/threads: 1/" "$1"
  echo "zero_optimization: {stage: $3}" >> "$1"
}
launch() {
  timeout 120 "$LAUNCH" "$1" --hostfile "$T/hosts" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 >> "$T/launch.out" 2>&1
}
zjob "$T/single.yaml" 2 0 "$T/single.csv" 20
zjob "$T/z3.yaml" 2 3 "$T/z3.csv" 20
if "$WORKER" --config "$T/single.yaml" > "$T/single.out" 2>&1 && launch "$T/z3.yaml" &&
   same_steps "$T/single.csv" "$T/z3.csv" 1 20; then
  pass "LoRA under ZeRO-3 with 2 ranks is on the 1-rank curve (20 steps)"
else
  fail "ZeRO-3 LoRA left the curve: $(tail -2 "$T/launch.out")"
fi
zjob "$T/first.yaml" 2 3 "$T/first.csv" 10 "checkpoint: {dir: $T/ck_z3}"
zjob "$T/resume.yaml" 2 0 "$T/resume.csv" 20 "checkpoint: {dir: $T/ck_z3, load: latest}"
if launch "$T/first.yaml" && [[ -f $T/ck_z3/step_00000010/frozen.safetensors ]] &&
   "$WORKER" --config "$T/resume.yaml" > "$T/resume.out" 2>&1 &&
   same_steps "$T/single.csv" "$T/resume.csv" 11 20; then
  pass "a ZeRO-3 LoRA checkpoint (adapters sharded, frozen weights whole) resumes on one rank"
else
  fail "ZeRO-3 LoRA resume: $(tail -2 "$T/resume.out")"
fi

# Refusals before any step.
expect_error() {  # NAME PATTERN CONFIG
  local out
  if out=$("$WORKER" --config "$3" 2>&1); then fail "$1: exit 0"; return; fi
  if ! grep -qF -- "$2" <<<"$out"; then fail "$1: no \"$2\" in: $(tail -2 <<<"$out")"; return; fi
  if [[ -s ${3%.yaml}.csv ]]; then fail "$1: a step ran"; return; fi
  pass "$1"
}
job "$T/nomatch.yaml" "$Q" "{r: 4, target_modules: [c_attn]}"
expect_error "target modules that match nothing" \
  "nomatch.yaml: LoRA: the target modules (c_attn) match no linear layer of this qwen2 model" "$T/nomatch.yaml"
job "$T/rank.yaml" "$Q" "{r: 8, adapter: $LORA/qwen2/adapter_init}"
expect_error "an adapter of another rank" "adapter_config.json: r is 4, the job's model.lora.r is 8" "$T/rank.yaml"
job "$T/tp.yaml" "$Q" "{r: 4}" "parallel: {tensor: 2}"
if out=$("$LAUNCH" plan "$T/tp.yaml" --world 2 2>&1); then
  fail "tensor parallelism with LoRA: planned"
elif grep -qF "frozen weights (model.lora) trains under data parallelism" <<<"$out"; then
  pass "tensor parallelism with frozen weights refused by the planner"
else
  fail "tensor parallelism with LoRA: $(tail -2 <<<"$out")"
fi

[[ $fails == 0 ]] && echo "lora: ok" || echo "lora: $fails failed"
exit $((fails > 0))
