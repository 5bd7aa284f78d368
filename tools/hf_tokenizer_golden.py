#!/usr/bin/env python3
"""Golden files for runtime/generate/bpe_tokenizer_test.cc and tokenizer_test.cc, from Hugging
Face tokenizers and the sentencepiece package.

Trains a small byte-level BPE (GPT-2's pre-tokenizer: ByteLevel with its regex, 600 tokens, two
special tokens) on a corpus written here, saves it as tokenizer.json, and records the ids the
tokenizers package gives for test texts: ASCII, Unicode letters and digits, punctuation,
whitespace runs, newlines, contractions, emoji and the special tokens. Also trains a small
SentencePiece BPE model (Llama-2's kind: byte fallback, whitespace as U+2581) on the same corpus,
saves sp.model, and records sentencepiece's ids and decoded text for the same texts; and a
byte-level BPE with Llama-3's pre-tokenizer (its Split pattern, then ByteLevel without a regex,
ignore_merges) as tokenizer_llama3.json with the package's ids.

  ~/.cache/ds-runtime/hf-venv/bin/python tools/hf_tokenizer_golden.py runtime/generate/testdata
"""
import json
import os
import sys

import sentencepiece as spm
import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2024, and we've 3 dogs!",
    "Addition: 123 + 456 = 579; 99+1=100.  Two  spaces,\tand a tab.\nNew line\n\nTwo new lines.",
    "Unicode: naïve café, Straße, Ελληνικά, русский текст, 中文字符, 日本語のテキスト, ١٢٣ ٤٥٦.",
    "Punctuation!!! ... ??? (parens) [brackets] {braces} <angle> --- ''quotes'' \"double\"",
    "Emoji 🙂🚀 and symbols © ® ™ € £ ¥ ½ ¾ ² ³ ∑ ∞ ≠ ≤.",
    "I'll, you'd, he's, they're, we'm? She'S SHOUTED, don't won't can't.",
] * 20
TESTS = [
    "The quick brown fox.",
    "It's 12345 dogs, isn't it?",
    "  leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\nend",
    "naïve café Straße Ελληνικά 中文 日本語 ١٢٣",
    "emoji 🙂🚀 ½ ² ∑ ≤ done",
    "<|endoftext|>special<|pad|> tokens <|endoftext|>",
    "I'LL you'd THEY'RE we've",
    "   \n  \t x",
    "",
]

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_TESTS = [
    "1234567 and 12, 123, 1234",
    "SHE'S IT'LL They'Re",
    "line one.\n\nline two!\r\n  indented\n",
    "(x+y)*z  ==  42;\n\t-done-",
]


def main(out_dir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    golden = {"tokenizers": tokenizers.__version__, "vocab_size": tok.get_vocab_size(), "cases": []}
    for text in TESTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        golden["cases"].append({"text": text, "ids": ids,
                                "decoded": tok.decode(ids, skip_special_tokens=False)})
    with open(os.path.join(out_dir, "tokenizer_golden.json"), "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    # Llama-3's pre-tokenizer: its Split pattern (digits in threes, case-insensitive contractions,
    # newlines kept with punctuation), then ByteLevel without its own regex; ignore_merges.
    llama3 = Tokenizer(models.BPE(ignore_merges=True))
    llama3.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    llama3.decoder = decoders.ByteLevel()
    llama3.train_from_iterator(CORPUS, trainer)
    llama3.save(os.path.join(out_dir, "tokenizer_llama3.json"))
    golden3 = {"tokenizers": tokenizers.__version__, "vocab_size": llama3.get_vocab_size(),
               "cases": []}
    for text in TESTS + LLAMA3_TESTS:
        ids = llama3.encode(text, add_special_tokens=False).ids
        golden3["cases"].append({"text": text, "ids": ids,
                                 "decoded": llama3.decode(ids, skip_special_tokens=False)})
    with open(os.path.join(out_dir, "tokenizer_llama3_golden.json"), "w") as f:
        json.dump(golden3, f, indent=1, ensure_ascii=False)
        f.write("\n")
    corpus = os.path.join(out_dir, "sp_corpus.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(CORPUS) + "\n")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(out_dir, "sp"),
                                   vocab_size=600, model_type="bpe", byte_fallback=True,
                                   character_coverage=1.0, num_threads=1, minloglevel=2)
    os.remove(corpus)
    os.remove(os.path.join(out_dir, "sp.vocab"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out_dir, "sp.model"))
    sp_golden = {"sentencepiece": spm.__version__, "vocab_size": sp.get_piece_size(), "cases": []}
    for text in TESTS:
        ids = sp.encode(text)
        sp_golden["cases"].append({"text": text, "ids": ids, "decoded": sp.decode(ids)})
    with open(os.path.join(out_dir, "sp_golden.json"), "w") as f:
        json.dump(sp_golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {out_dir}/tokenizer.json, tokenizer_golden.json, sp.model and sp_golden.json")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runtime/generate/testdata")
