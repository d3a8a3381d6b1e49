"""
pytext.py: a small English text set with no download: the Python reference manual's topic pages
that every CPython ships for `help()` (the module pydoc_data.topics, ~465 KB of prose and code).

Tokens are bytes, as in addition.py: ids 0..255 are the bytes 0..255 of the UTF-8 text, id 256 is
<|endoftext|> (V = 257). Each topic page is one document, <|endoftext|> first. The pages are taken
in sorted order of their names; every tenth (0, 10, 20, ...) goes to val, the rest to train. The
same Python version gives the same bytes (the script prints the version it read).

Files written into --out (default data/pytext/), llm.c formats (dev/data/README.md):
    pytext_tokenizer.bin   tokenizer, version 2, 257 tokens, eot 256 (the same as addition's)
    pytext_train.bin       token shard (magic 20240520, version 1, uint16 tokens)
    pytext_val.bin         token shard, validation loss

    python dev/data/pytext.py [--out data/pytext]
"""

import argparse
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from addition import docs_shard_bytes, tokenizer_bytes, write_atomic  # noqa: E402 (same tokenizer and shards)


def main():
    ap = argparse.ArgumentParser(description="byte-level text set from pydoc_data.topics (llm.c formats)")
    ap.add_argument("--out", default=os.path.join("data", "pytext"), help="output directory")
    args = ap.parse_args()
    try:
        from pydoc_data.topics import topics
    except ImportError:
        sys.exit("error: pytext.py: expected the module pydoc_data.topics (part of CPython), found none")
    names = sorted(topics)
    splits = {"train": [topics[n] for i, n in enumerate(names) if i % 10 != 0],
              "val": [topics[n] for i, n in enumerate(names) if i % 10 == 0]}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "pytext_tokenizer.bin")
    write_atomic(path, tokenizer_bytes())
    print("pytext.py: Python %s, %d topic pages" % (platform.python_version(), len(names)))
    for split, docs in splits.items():
        data, ntok = docs_shard_bytes([d.encode("utf-8") for d in docs], "pytext.py")
        path = os.path.join(args.out, "pytext_%s.bin" % split)
        write_atomic(path, data)
        print("wrote %s: %d documents, %d tokens, %d bytes" % (path, len(docs), ntok, len(data)))


if __name__ == "__main__":
    main()
