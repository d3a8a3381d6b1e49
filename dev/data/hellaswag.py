"""
hellaswag.py: HellaSwag's validation set (Zellers et al. 2019, github.com/rowanz/hellaswag) in GPT-2's tokens, in
llm.c's eval file format (docs/formats.md, "HellaSwag"): the bytes llm.c's dev/data/hellaswag.py writes for the
same examples, so either trainer reads either's file. The trainer scores it with --hellaswag FILE
(llm/train/hellaswag.h: acc_norm, the lowest mean completion loss of four).

    python dev/data/hellaswag.py                        # downloads hellaswag_val.jsonl, writes data/hellaswag/
    python dev/data/hellaswag.py --local my.jsonl --out data/mine

Input: one JSON object per line, HellaSwag's schema; what is read of each: "ctx" (the context, a string),
"endings" (four strings) and "label" (0..3, the right ending). Without --local, the validation file
https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl (10,042 examples) is
downloaded into --out (not again when it is there).

Tokens (as llm.c renders an example): the context's GPT-2 tokens, and for each ending the tokens of " " + the
ending (GPT-2's tokenizer folds a word's leading space into its token, and the completion follows the context
after a space). The tokenizer: gpt2_encoding.py, the same as shakespeare.py and fineweb.py (the ranks fetched once
with pip into --cache, sha256-checked). Special tokens in the text are ordinary text.

Written into --out (default data/hellaswag/): hellaswag_val.bin (or <name of --local>.bin). An example llm.c's
writer refuses (not 4 endings, a label outside 0..3, a token id of 65535, an example of 2^16 bytes or more, 2^16
examples or more) stops this one with one line naming the line of the input, and nothing is written.
"""

import argparse
import json
import os
import struct
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_encoding as g  # noqa: E402
import pip_cache  # noqa: E402

WHO = "hellaswag.py"
VAL_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
MAGIC, VERSION = 20240522, 1
COMPLETIONS = 4
DELIMITER = 65535  # <START_EXAMPLE>, also the largest uint16: no token may be it


def fail(msg):
    sys.exit("error: %s: %s" % (WHO, msg))


def read_examples(path):
    """[(ctx, endings, label)] of a HellaSwag .jsonl, each line checked"""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                ex = json.loads(line)
            except json.JSONDecodeError as e:
                fail("%s line %d: expected a JSON object, found %s" % (path, n, e))
            if not isinstance(ex, dict):
                fail("%s line %d: expected a JSON object, found %s" % (path, n, type(ex).__name__))
            ctx, endings, label = ex.get("ctx"), ex.get("endings"), ex.get("label")
            if not isinstance(ctx, str):
                fail("%s line %d: expected \"ctx\" to be a string, found %r" % (path, n, ctx))
            if not (isinstance(endings, list) and len(endings) == COMPLETIONS and all(isinstance(e, str) for e in endings)):
                fail("%s line %d: expected \"endings\" to be %d strings, found %r" % (path, n, COMPLETIONS, endings))
            if isinstance(label, str) and label.isdigit():  # (some copies of the data hold it as a string)
                label = int(label)
            if not (isinstance(label, int) and not isinstance(label, bool) and 0 <= label < COMPLETIONS):
                fail("%s line %d: expected \"label\" in 0..%d, found %r" % (path, n, COMPLETIONS - 1, label))
            out.append((n, ctx, endings, label))
    if not out:
        fail("%s: expected HellaSwag examples, one JSON object per line, found none" % path)
    return out


def example_words(index, ctx_tokens, ending_tokens, label, where):
    """one example as llm.c's eval format's uint16 words: delimiter, its bytes, index, label, 4, the context and
    each completion as (length, tokens)"""
    words = [DELIMITER, 0, index, label, len(ending_tokens), len(ctx_tokens)] + ctx_tokens
    for toks in ending_tokens:
        words += [len(toks)] + toks
    for t in ctx_tokens + [t for e in ending_tokens for t in e]:
        if not 0 <= t < DELIMITER:
            fail("%s: expected token ids in [0, %d), found %d" % (where, DELIMITER, t))
    if not ctx_tokens or not all(ending_tokens):
        fail("%s: expected a non-empty context and endings, found an empty one" % where)
    nbytes = 2 * len(words)
    if nbytes >= 2 ** 16:
        fail("%s: expected an example of fewer than 65536 bytes, found %d" % (where, nbytes))
    words[1] = nbytes
    return words


def eval_file_bytes(examples):
    """llm.c's eval file of examples [(ctx tokens, [4 x ending tokens], label, where)]: the header (magic, version,
    examples, the longest example's bytes), then the examples' uint16 words; and the longest example's bytes"""
    if len(examples) >= 2 ** 16:
        fail("expected fewer than 65536 examples (the format's index is a uint16), found %d" % len(examples))
    stream, longest = [], 0
    for i, (ctx, ends, label, where) in enumerate(examples):
        w = example_words(i, ctx, ends, label, where)
        longest = max(longest, 2 * len(w))
        stream += w
    header = [0] * 256
    header[0], header[1], header[2], header[3] = MAGIC, VERSION, len(examples), longest
    return struct.pack("<256i", *header) + struct.pack("<%dH" % len(stream), *stream), longest


def main():
    ap = argparse.ArgumentParser(description="HellaSwag's validation set in llm.c's eval format (GPT-2 tokens)")
    ap.add_argument("--local", metavar="FILE", help="a HellaSwag .jsonl to read instead of downloading the validation set")
    ap.add_argument("--out", default=os.path.join("data", "hellaswag"), help="output directory (default data/hellaswag)")
    ap.add_argument("--cache", default=pip_cache.DEFAULT_CACHE, help="where the fetched packages are kept")
    args = ap.parse_args()
    if args.local:
        if not os.path.isfile(args.local):
            fail("--local: expected a file, found none at %s" % args.local)
        src = args.local
        name = os.path.splitext(os.path.basename(src))[0] + ".bin"
    else:
        src = os.path.join(args.out, "hellaswag_val.jsonl")
        name = "hellaswag_val.bin"
    examples = read_examples(src) if os.path.isfile(src) else None  # (a bad file is refused before anything is fetched)
    try:
        enc, _ = g.gpt2_encoding(args.cache, WHO)
    except pip_cache.FetchError as e:
        fail(str(e))
    if examples is None:
        os.makedirs(args.out, exist_ok=True)
        print("%s: downloading %s" % (WHO, VAL_URL), flush=True)
        try:
            with urllib.request.urlopen(VAL_URL, timeout=120) as r:
                data = r.read()
        except OSError as e:  # (urllib's URLError and HTTPError are OSErrors)
            fail("could not download %s (%s); --local reads a file you have" % (VAL_URL, e))
        g.write_atomic(src, data)
        examples = read_examples(src)
    rendered = []
    for n, ctx, endings, label in examples:
        rendered.append((enc.encode_ordinary(ctx), [enc.encode_ordinary(" " + e) for e in endings], label, "%s line %d" % (src, n)))
    data, longest = eval_file_bytes(rendered)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, name)
    g.write_atomic(path, data)
    most = max(len(c) + len(e) for c, ends, _, _ in rendered for e in ends)
    print("wrote %s: %d examples, %d bytes; the longest example %d bytes, the longest context + completion %d tokens "
          "(the trainer needs -t at least that)" % (path, len(rendered), len(data), longest, most))


if __name__ == "__main__":
    main()
