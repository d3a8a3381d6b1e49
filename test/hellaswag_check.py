#!/usr/bin/env python3
"""hellaswag_check.py: the independent side of test/test_hellaswag.sh. The eval file format is written and read here
from docs/formats.md ("HellaSwag"), not from dev/data/hellaswag.py or llm/train/hellaswag.h; the scoring is llm.c's
and the HellaSwag harness's, computed with test/hf_check.py's float64 numpy GPT-2 on an llm.c FP32 checkpoint.

  make CKPT OUT SEED             made-up examples for the checkpoint's model, written to OUT (.bin): 13 examples, each
                                 a context (an addition prompt "<|endoftext|>123+045=" of the model's training data, or
                                 3 to 10 random tokens) and four completions: the float64 model's greedy continuation of
                                 the context (1 to 5 tokens) at a random place, and three of 1 to 6 random tokens. The
                                 label is the greedy one's index, except in examples 4, 9 (the next index: a known
                                 miss). Prints "known K": the examples whose label is the greedy completion.
  score CKPT BIN OUT             each example's four mean completion losses (float64: the mean cross-entropy of the
                                 completion's tokens, each predicted from the context and the completion before it;
                                 the context's own tokens not scored), the winner (lowest mean, the first on a tie)
                                 into OUT as "index label winner l0 l1 l2 l3" (the trainer's --hellaswag-losses);
                                 prints "correct C of N", "greedy-wins W" (examples where the winner is the greedy
                                 completion; needs the make step's OUT.greedy) and the smallest gap between the best and
                                 the second-best mean loss of an example
  compare REF GOT TOL            the two files of losses: labels equal, every loss within TOL, winners equal (or REF's
                                 losses of the two winners within TOL: a tie at that precision); prints the largest
                                 difference; exit 1 otherwise
  write JSONL OUT                a HellaSwag .jsonl in GPT-2's tokens (dev/data/gpt2_encoding.py's tokenizer), written
                                 here from the format's description: the context's tokens, each ending's as " " + ending
  parse BIN JSONL                BIN read back field by field against the .jsonl: header (magic 20240522, version 1,
                                 count, the longest example's bytes), each example's delimiter, bytes, index, label, 4,
                                 and its tokens decoded back to the context and " " + each ending
  bad KIND BIN OUT               a broken copy of BIN: truncated (the last 6 bytes cut), magic (a token shard's),
                                 version (2), token (a completion token = V), long (a context + completion of T + 1
                                 tokens, with T = 32), longest (header slot 3 one less), index (example 1 says 2)
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_check  # noqa: E402  (the float64 GPT-2 and the llm.c checkpoint reader)

MAGIC, VERSION = 20240522, 1


def write_bin(path, examples):
    """examples: [(ctx tokens, [4 x completion tokens], label)] in the documented layout"""
    words, longest = [], 0
    for i, (ctx, comps, label) in enumerate(examples):
        ex = [65535, 0, i, label, len(comps), len(ctx)] + list(ctx)
        for c in comps:
            ex += [len(c)] + list(c)
        ex[1] = 2 * len(ex)
        longest = max(longest, ex[1])
        words += ex
    header = np.zeros(256, dtype="<i4")
    header[:4] = [MAGIC, VERSION, len(examples), longest]
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.array(words, dtype="<u2").tobytes())


def read_bin(path):
    """(header ints, [(index, label, ctx, [completions], bytes)])"""
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    w = np.frombuffer(data, dtype="<u2", offset=1024)
    out, at = [], 0
    for _ in range(header[2]):
        assert w[at] == 65535, "delimiter"
        nbytes, index, label, ncomp = int(w[at + 1]), int(w[at + 2]), int(w[at + 3]), int(w[at + 4])
        p = at + 5
        n = int(w[p]); ctx = [int(t) for t in w[p + 1:p + 1 + n]]; p += 1 + n
        comps = []
        for _ in range(ncomp):
            n = int(w[p]); comps.append([int(t) for t in w[p + 1:p + 1 + n]]); p += 1 + n
        assert 2 * (p - at) == nbytes, "example %d: bytes %d, its fields %d" % (index, nbytes, 2 * (p - at))
        out.append((index, label, ctx, comps, nbytes))
        at = p
    assert at == len(w), "%d words after the last example" % (len(w) - at)
    return header, out


def greedy(cfg, p, ids, n):
    ids = list(ids)
    for _ in range(n):
        ids.append(int(np.argmax(hf_check.forward_logits(cfg, p, np.array([ids]))[0, -1])))
    return ids[-n:]


def completion_losses(cfg, p, ctx, comps):
    """the mean cross-entropy of each completion's tokens given the context (float64)"""
    out = []
    for c in comps:
        seq = np.array([ctx + c])
        logits = hf_check.forward_logits(cfg, p, seq)[0]
        m = logits.max(-1, keepdims=True)
        logp = logits - (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))
        # position t predicts token t + 1: the completion's tokens are predicted at len(ctx) - 1 .. len(ctx) + len(c) - 2
        out.append(float(np.mean([-logp[len(ctx) - 1 + i, tok] for i, tok in enumerate(c)])))
    return out


def cmd_make(ckpt, out, seed):
    cfg, p = hf_check.load_llmc(ckpt)
    V = p["wte.weight"].shape[0]
    rng = np.random.default_rng(int(seed))
    examples, greedy_at, known = [], [], 0
    for e in range(13):
        if e % 4 != 3:
            ctx = [256] + list(b"%03d+%03d=" % (rng.integers(1000), rng.integers(1000)))
        else:
            ctx = [int(t) for t in rng.integers(0, V, rng.integers(3, 11))]
        g = int(rng.integers(4))
        comps = [[int(t) for t in rng.integers(0, V, rng.integers(1, 7))] for _ in range(4)]
        comps[g] = greedy(cfg, p, ctx, int(rng.integers(1, 6)))
        label = (g + 1) % 4 if e in (4, 9) else g
        known += label == g
        examples.append((ctx, comps, label))
        greedy_at.append(g)
    write_bin(out, examples)
    with open(out + ".greedy", "w") as f:
        f.write(" ".join(map(str, greedy_at)) + "\n")
    print("known %d" % known)


def cmd_score(ckpt, path, out):
    cfg, p = hf_check.load_llmc(ckpt)
    _, exs = read_bin(path)
    greedy_at = [int(x) for x in open(path + ".greedy").read().split()] if os.path.exists(path + ".greedy") else None
    correct, wins, gap = 0, 0, np.inf
    with open(out, "w") as f:
        for index, label, ctx, comps, _ in exs:
            ls = completion_losses(cfg, p, ctx, comps)
            win = int(np.argmin(ls))  # (the first of equal minima, as llm.c's strict <)
            correct += win == label
            wins += greedy_at is not None and win == greedy_at[index]
            s = sorted(ls)
            gap = min(gap, s[1] - s[0])
            f.write("%d %d %d %s\n" % (index, label, win, " ".join("%.9g" % x for x in ls)))
    print("correct %d of %d" % (correct, len(exs)))
    print("greedy-wins %d" % wins)
    print("smallest-gap %.3g" % gap)


def cmd_compare(ref, got, tol):
    a = [l.split() for l in open(ref).read().splitlines()]
    b = [l.split() for l in open(got).read().splitlines()]
    if len(a) != len(b):
        print("%d examples vs %d" % (len(a), len(b))); sys.exit(1)
    worst, bad = 0.0, []
    for x, y in zip(a, b):
        # a different winner only where REF's two candidates are within TOL of each other (a tie at this precision)
        if x[:2] != y[:2] or (x[2] != y[2] and abs(float(x[3 + int(x[2])]) - float(x[3 + int(y[2])])) > float(tol)):
            bad.append("example %s: index/label/winner %s vs %s" % (x[0], x[:3], y[:3]))
        d = max(abs(float(u) - float(v)) for u, v in zip(x[3:], y[3:]))
        worst = max(worst, d)
    print("max |loss difference| %.3g over %d examples x 4 (tolerance %g)%s" % (worst, len(a), float(tol), "; " + "; ".join(bad[:3]) if bad else ""))
    sys.exit(0 if not bad and worst <= float(tol) else 1)


def encoding():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dev", "data"))
    import gpt2_encoding
    import pip_cache
    cache = os.environ.get("GPT2_DATA_CACHE") or pip_cache.DEFAULT_CACHE
    return gpt2_encoding.gpt2_encoding(cache, "hellaswag_check.py")[0]


def jsonl(path):
    import json
    return [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]


def cmd_write(src, out):
    enc = encoding()
    exs = jsonl(src)
    write_bin(out, [(enc.encode_ordinary(x["ctx"]), [enc.encode_ordinary(" " + e) for e in x["endings"]], int(x["label"])) for x in exs])


def cmd_parse(path, src):
    enc = encoding()
    exs = jsonl(src)
    header, got = read_bin(path)
    assert header[:2] == (MAGIC, VERSION), "magic/version %s" % (header[:2],)
    assert header[2] == len(exs), "count %d vs %d examples" % (header[2], len(exs))
    assert header[3] == max(g[4] for g in got), "longest %d vs %d" % (header[3], max(g[4] for g in got))
    assert not any(header[4:]), "unused header slots not 0"
    for i, ((index, label, ctx, comps, _), x) in enumerate(zip(got, exs)):
        assert index == i and label == int(x["label"]) and len(comps) == 4, "example %d: index %d label %d" % (i, index, label)
        assert enc.decode(ctx) == x["ctx"], "example %d: context %r" % (i, enc.decode(ctx))
        for c, e in zip(comps, x["endings"]):
            assert enc.decode(c) == " " + e, "example %d: completion %r vs %r" % (i, enc.decode(c), " " + e)
    print("parsed %d examples: header %s, fields and decoded text as the .jsonl" % (len(got), list(header[:4])))


def cmd_bad(kind, path, out):
    data = bytearray(open(path, "rb").read())
    _, exs = read_bin(path)
    first = 1024  # example 0's first word
    if kind == "truncated":
        data = data[:-6]
    elif kind == "magic":
        data[0:4] = struct.pack("<i", 20240520)
    elif kind == "version":
        data[4:8] = struct.pack("<i", 2)
    elif kind == "longest":
        data[12:16] = struct.pack("<i", struct.unpack("<i", data[12:16])[0] - 1)
    elif kind == "index":
        at = first + exs[0][4]  # example 1's delimiter
        data[at + 4:at + 6] = struct.pack("<H", 2)
    elif kind == "token":
        ctx = exs[0][2]
        at = first + 2 * (6 + len(ctx) + 1)  # example 0's first completion's first token
        data[at:at + 2] = struct.pack("<H", int(sys.argv[5]))
    elif kind == "long":
        _, label, ctx, comps, _ = exs[0]
        comps = [list(c) for c in comps]
        comps[2] = [1] * (33 - len(ctx))
        write_bin(out, [(ctx, comps, label)] + [(c, k, l) for _, l, c, k, _ in exs[1:]])
        return
    open(out, "wb").write(bytes(data))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    try:
        {"make": cmd_make, "score": cmd_score, "compare": cmd_compare, "write": cmd_write, "parse": cmd_parse,
         "bad": lambda k, p, o, *rest: cmd_bad(k, p, o)}[cmd](*args)
    except AssertionError as e:  # a file not as documented: one line
        print("%s: %s" % (cmd, e))
        sys.exit(1)
