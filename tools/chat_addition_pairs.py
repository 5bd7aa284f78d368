"""The preference set of ds-chat's demonstration (configs/examples/chat_addition): 40000
problems "12+34=", chosen the right sum reversed ("640$"), rejected a wrong one (off by 1, 2, 10
or up to 30). Used by tools/rlhf_demo.sh and tests/integration/chat_demo_test.sh.

  chat_addition_pairs.py OUT.jsonl
"""
import json
import random
import sys


def rev(n):
    return str(n).zfill(3)[::-1]


def main():
    rng = random.Random(7)
    with open(sys.argv[1], "w") as f:
        for _ in range(40000):
            a, b = rng.randrange(100), rng.randrange(100)
            s = wrong = a + b
            while wrong == s:
                wrong = max(0, min(198, s + rng.choice([-10, -2, -1, 1, 2, 10, rng.randrange(-30, 31)])))
            f.write(json.dumps({"prompt": f"{a:02d}+{b:02d}=", "chosen": rev(s) + "$",
                                "rejected": rev(wrong) + "$"}) + "\n")


if __name__ == "__main__":
    main()
