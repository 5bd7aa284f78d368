#!/usr/bin/env bash
# DeepSpeed-Chat's three steps on this machine's CPU in about four to five minutes, on 2-digit
# addition made into a preference task (configs/examples/chat_addition/):
#   data    40000 problems "12+34=": chosen the right sum reversed ("640$"), rejected a wrong one
#           (off by 1, 2, 10 or up to 30), split 20/40/40% over the steps (data_split 2,4,4)
#   step 1  SFT stopped early, so the model answers only partly right (once 70% of 64 held-out
#           SFT rows come out exactly right)
#   step 2  a reward model on (right, wrong) pairs, from the SFT weights, until 98% of 256
#           held-out pairs rank right
#   step 3  PPO from the SFT model against that reward model
# Prints each step's figures (held-out exact match, pairwise accuracy, reward and KL per
# iteration, the PPO time split and generation tokens/s) and plots the reward curve:
#   tools/rlhf_demo.sh                     (OUT=runs/chat_addition)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=runs/chat_addition
mkdir -p "$OUT"
bazel build -c opt --jobs=2 //tools/ds_chat:ds-chat >/dev/null 2>&1
/usr/bin/python3 tools/chat_addition_pairs.py "$OUT/pairs.jsonl"
echo "== $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
time bazel-bin/tools/ds_chat/ds-chat --config configs/examples/chat_addition/chat.yaml 2>&1 |
  grep -v '^\[20'
/usr/bin/python3 - "$OUT/ppo.csv" "$OUT/ppo_reward.png" <<'PYEOF'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
it = [int(r["iteration"]) for r in rows]
reward = [float(r["mean_reward"]) for r in rows]
kl = [float(r["kl"]) for r in rows]
window = 10
smooth = [sum(reward[max(0, i - window + 1):i + 1]) / len(reward[max(0, i - window + 1):i + 1])
          for i in range(len(reward))]
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(it, reward, color="0.75", label="mean reward of the rollout")
ax.plot(it, smooth, color="C0", label=f"mean over {window} iterations")
ax.set_xlabel("PPO iteration")
ax.set_ylabel("reward model score")
ax2 = ax.twinx()
ax2.plot(it, kl, color="C3", label="KL to the reference (per token)")
ax2.set_ylabel("KL")
ax.legend(loc="upper left")
ax2.legend(loc="lower right")
ax.set_title("ds-chat step 3 on 2-digit addition (CPU)")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
print(f"reward curve: {sys.argv[2]}")
PYEOF
