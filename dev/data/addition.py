"""
addition.py: a synthetic dataset of multi-digit additions, the trainer's default data. It needs no
download and only the Python standard library, and it writes the same bytes for the same flags.

Tokens are bytes: ids 0..255 are the bytes 0..255, id 256 is <|endoftext|> (V = 257).
Each problem is one document:

    <|endoftext|> a + b = reversed(a + b) \n        e.g. 123+45=168 is  <EOT> "123+045=8610\n"

By default (--pad 1) every problem has the same width: a and b are zero-padded to --digits digits
(most significant first) and the sum's digits are written REVERSED, least significant first,
zero-padded to --digits + 1 digits. With --pad 0 nothing is padded: <EOT> "123+45=861\n".
A left-to-right model then produces each answer digit after seeing the digits and carry it depends
on, and with fixed widths every digit sits at a fixed position, which makes addition learnable by a
small model in a few hundred steps. To score a test problem: the prompt is everything up to and including '=', the
answer is the bytes after '=' up to (not including) '\n'; compare exactly.

Operands: for each of a and b, a digit count d is drawn uniformly from 1..--digits, then the number
uniformly among the d-digit numbers (0..9 for d = 1). Held-out split: a problem's split is a fixed
function of (a, b) only (not of --seed): h = mix64(mix64(a) ^ b) % 100; h < 5 -> test pool,
h < 10 -> val pool, else train pool. So test and val problems never occur in train. Train and val
problems are drawn with replacement from their pools; test problems are distinct.

Random numbers: splitmix64 (the same mixer as llm/train/dataloader.h), one stream per split seeded from
(--seed, split), so changing --train does not change val or test.

Files written into --out (default data/addition/), llm.c formats (dev/data/README.md):
    addition_tokenizer.bin   tokenizer, version 2, 257 tokens, eot 256
    addition_train.bin       token shard (magic 20240520, version 1, uint16 tokens)
    addition_val.bin         token shard, validation loss
    addition_test.bin        token shard, held-out problems for exact-match accuracy

    python dev/data/addition.py [--digits 3] [--train 200000] [--val 5000] [--test 1000]
                                [--seed 1337] [--out data/addition]
"""

import argparse
import os
import struct
import sys
from array import array

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
EOT = 256
VOCAB = 257
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
SPLITS = {"train": 1, "val": 2, "test": 3}  # stream ids


def mix64(x):
    """splitmix64 finalizer of x + golden ratio (64-bit)."""
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + GOLDEN) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        """an integer in [0, n), n <= 2^64, unbiased (rejection of the top partial range)."""
        limit = (1 << 64) - ((1 << 64) % n)
        while True:
            r = self.next()
            if r < limit:
                return r % n


def split_of(a, b):
    h = mix64(mix64(a) ^ b) % 100
    return "test" if h < 5 else ("val" if h < 10 else "train")


def draw_operand(rng, digits):
    d = 1 + rng.below(digits)
    lo = 0 if d == 1 else 10 ** (d - 1)
    return lo + rng.below(10 ** d - lo)


def problem_text(a, b, pad=0):
    """pad > 0: operands zero-padded to pad digits and the reversed sum to pad + 1 digits"""
    if pad:
        return "%0*d+%0*d=%s\n" % (pad, a, pad, b, ("%0*d" % (pad + 1, a + b))[::-1])
    return "%d+%d=%s\n" % (a, b, str(a + b)[::-1])


def draw_problems(split, count, digits, seed):
    """count (a, b) pairs of the given split; distinct for test."""
    rng = SplitMix64(mix64(mix64(seed) ^ SPLITS[split]))
    out, seen = [], set()
    attempts, max_attempts = 0, 100 * count + 100000
    while len(out) < count:
        attempts += 1
        if attempts > max_attempts:
            sys.exit("error: addition.py: --%s %d: expected %d distinct %s problems with --digits %d, "
                     "found only %d (lower --%s or raise --digits)"
                     % (split, count, count, split, digits, len(out), split))
        a, b = draw_operand(rng, digits), draw_operand(rng, digits)
        if split_of(a, b) != split:
            continue
        if split == "test":
            if (a, b) in seen:
                continue
            seen.add((a, b))
        out.append((a, b))
    return out


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def tokens_shard_bytes(tokens, who):
    """an llm.c token shard: header (magic, version 1, count) then the tokens as uint16 (also gpt2_encoding.py's)"""
    toks = array("H", tokens)  # (raises OverflowError for an id > 65535)
    if len(toks) > 2**31 - 1:
        sys.exit("error: %s: expected at most 2^31-1 tokens per shard, found %d" % (who, len(toks)))
    if sys.byteorder != "little":
        toks.byteswap()
    header = [0] * 256
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, len(toks)
    return struct.pack("<256i", *header) + toks.tobytes()


def docs_shard_bytes(docs, who):
    """a token shard of byte documents (bytes objects), each after an EOT; returns (data, tokens)"""
    toks = array("H")
    for d in docs:
        toks.append(EOT)
        toks.extend(d)
    return tokens_shard_bytes(toks, who), len(toks)


def shard_bytes(problems, pad):
    return docs_shard_bytes((problem_text(a, b, pad).encode("ascii") for a, b in problems), "addition.py")


def tokenizer_bytes():
    header = [0] * 256
    header[0], header[1], header[2], header[3] = TOKENIZER_MAGIC, TOKENIZER_VERSION, VOCAB, EOT
    parts = [struct.pack("<256I", *header)]
    for i in range(256):
        parts.append(bytes([1, i]))
    eot_text = b"<|endoftext|>"
    parts.append(bytes([len(eot_text)]) + eot_text)
    return b"".join(parts)


def main():
    ap = argparse.ArgumentParser(description="synthetic multi-digit addition data (llm.c formats)")
    ap.add_argument("--digits", type=int, default=3, help="max digits per operand (default 3)")
    ap.add_argument("--train", type=int, default=200000, help="train problems (default 200000)")
    ap.add_argument("--val", type=int, default=5000, help="validation problems (default 5000)")
    ap.add_argument("--test", type=int, default=1000, help="held-out test problems (default 1000)")
    ap.add_argument("--seed", type=int, default=1337, help="random seed (default 1337)")
    ap.add_argument("--pad", type=int, default=1, choices=(0, 1),
                    help="1: fixed width, operands zero-padded to --digits and the reversed sum to "
                         "--digits+1 (default); 0: no padding")
    ap.add_argument("--out", default=os.path.join("data", "addition"), help="output directory")
    args = ap.parse_args()
    if not 1 <= args.digits <= 18:
        sys.exit("error: addition.py: --digits: expected 1..18, found %d" % args.digits)
    for name in ("train", "val", "test"):
        if getattr(args, name) < 1:
            sys.exit("error: addition.py: --%s: expected >= 1, found %d" % (name, getattr(args, name)))
    if args.seed < 0:
        sys.exit("error: addition.py: --seed: expected >= 0, found %d" % args.seed)
    # draw everything before writing anything, so a refused request leaves no partial output
    problems = {split: draw_problems(split, getattr(args, split), args.digits, args.seed)
                for split in ("train", "val", "test")}
    os.makedirs(args.out, exist_ok=True)

    path = os.path.join(args.out, "addition_tokenizer.bin")
    data = tokenizer_bytes()
    write_atomic(path, data)
    print("wrote %s: %d tokens (ids 0..255 = bytes, %d = <|endoftext|>), %d bytes"
          % (path, VOCAB, EOT, len(data)))
    for split in ("train", "val", "test"):
        pad = args.digits if args.pad else 0
        data, ntok = shard_bytes(problems[split], pad)
        path = os.path.join(args.out, "addition_%s.bin" % split)
        write_atomic(path, data)
        a, b = problems[split][0]
        print("wrote %s: %d problems, %d tokens, %d bytes; first: %r"
              % (path, len(problems[split]), ntok, len(data), "<|endoftext|>" + problem_text(a, b, pad)))


if __name__ == "__main__":
    main()
