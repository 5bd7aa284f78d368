#!/usr/bin/env bash
# ds-chat's demonstration as a test (configs/examples/chat_addition, the data tools/rlhf_demo.sh
# makes): DeepSpeed-Chat's three steps on 2-digit addition, held to the figures that make RLHF
# worth running: the reward model ranks (right, near-miss wrong) answers at least 95% right, and
# PPO against it lifts held-out exact match at least 5 points over SFT's while the per-token KL
# to the reference stays below 0.3. Where SFT and the reward model learn is a race on the seed
# and the rounding, so both steps stop on a held-out figure (SFT once 70% of 64 held-out rows
# come out right, the reward model once 98% of 256 held-out pairs rank right); the test checks
# that both stops engaged. At fixed step counts (600 and 8000) the data seed alone left SFT at
# 16% to 80% and one reward model at 85.44%, and PPO's gain under 5 points. With both stops,
# data seeds 3 and 1234 on one CPU: SFT at steps 750 / 580 (64.06% / 59.96% of the 512 held-out
# prompts), the reward model at 8500 / 9000 steps (98.44% / 98.94%), PPO +14.65 / +31.06 points.
# About four to five minutes on 2 cores; the reward model may run up to 24000 steps.
set -uo pipefail
R=${TEST_SRCDIR:-.}/ds_runtime
CHAT=$R/tools/ds_chat/ds-chat
W=${TEST_TMPDIR:-$(mktemp -d)}/chat_demo
rm -rf "$W"; mkdir -p "$W"
source "$(dirname "$0")/chat_setup.sh"  # chat_figures

python3 "$R/tools/chat_addition_pairs.py" "$W/pairs.jsonl"  # tools/rlhf_demo.sh's data
cp "$R"/configs/examples/chat_addition/*.yaml "$W/"
sed -i "s|files: \[[^]]*\]|files: [$W/pairs.jsonl]|; s|^output: .*|output: $W/out|" "$W/chat.yaml"
if ! (cd "$W" && timeout 870 "$CHAT" --config chat.yaml > "$W/log" 2>&1); then
  echo "FAIL: ds-chat failed"; tail -5 "$W/log"; exit 1
fi
# Both early stops engaged, each before its step count ran out.
for stop in "sft: exact match on the held-out step-1 rows: step [0-9]+: .* reaches 70.00%" \
            "reward: pairwise accuracy on the held-out step-2 pairs: step [0-9]+: .* reaches 98.00%"; do
  if line=$(grep -m1 -E "^$stop" "$W/log"); then echo "ok: $line"
  else echo "FAIL: no early stop (\"$stop\")"; exit 1; fi
done
if figures=$(chat_figures "$W/log" "$W/out/ppo.csv" 95 0.3 5 2>&1); then
  echo "ok: $figures"
else
  echo "FAIL: $figures"; exit 1
fi
