"""
gpt2_encoding.py: GPT-2's tokenizer without the network at run time, and the two llm.c files it
feeds: token shards and the tokenizer file (docs/formats.md). Shared by shakespeare.py and fineweb.py.

Where GPT-2's encoding comes from: its 50256 byte-pair ranks are whisper/assets/gpt2.tiktoken in
the source distribution of openai-whisper 20250625 on PyPI (fetched once with pip into the cache,
pip_cache.py), checked against the sha256 below before use. tiktoken (PyPI) turns the ranks, GPT-2's
split pattern and <|endoftext|> = 50256 into the encoding. tiktoken.get_encoding("gpt2") is never
called: it downloads the ranks itself. tiktoken is used if it imports, else installed once into the
cache (pip install --target): the same interpreter, nothing installed into the user's environment,
no virtual environment to re-run the script in. Any tiktoken version gives the same ids, since the
ranks and the pattern are ours.
"""

import base64
import hashlib
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pip_cache  # noqa: E402
from addition import tokens_shard_bytes, write_atomic  # noqa: E402,F401 (re-exported for the scripts)

WHISPER = ("openai-whisper", "20250625")
RANKS_PATH = "whisper/assets/gpt2.tiktoken"
RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
TIKTOKEN = "tiktoken==0.14.0"  # the version installed when none imports
# GPT-2's pre-tokenization pattern (openai/gpt-2 src/encoder.py)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
N_RANKS = 50256
EOT = 50256
VOCAB = 50257
EOT_TEXT = "<|endoftext|>"
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2


def load_ranks(cache, who):
    """{token bytes: rank} from the cached openai-whisper sdist, its checksum verified"""
    archive = pip_cache.sdist(cache, WHISPER[0], WHISPER[1], who)
    data = pip_cache.read_members(archive, lambda p: p == RANKS_PATH, who)[RANKS_PATH]
    digest = hashlib.sha256(data).hexdigest()
    if digest != RANKS_SHA256:
        sys.exit("error: %s: %s in %s: expected sha256 %s, found %s" % (who, RANKS_PATH, archive, RANKS_SHA256, digest))
    ranks = {}
    for line in data.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    # (the checksum already pins the content; this says what the rest of the code relies on)
    if sorted(ranks.values()) != list(range(N_RANKS)):
        sys.exit("error: %s: %s: expected ranks 0..%d once each, found %d ranks" % (who, RANKS_PATH, N_RANKS - 1, len(ranks)))
    return ranks


def gpt2_encoding(cache, who):
    """(tiktoken.Encoding for GPT-2, {bytes: rank})"""
    ranks = load_ranks(cache, who)
    tiktoken = pip_cache.import_or_install("tiktoken", TIKTOKEN, cache, who)
    enc = tiktoken.Encoding("gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={EOT_TEXT: EOT}, explicit_n_vocab=VOCAB)
    return enc, ranks


def tokenizer_bytes(ranks):
    """llm.c's tokenizer file, version 2: VOCAB tokens, each a uint8 length and its bytes; eot EOT"""
    by_id = [None] * VOCAB
    for tok, rank in ranks.items():
        by_id[rank] = tok
    by_id[EOT] = EOT_TEXT.encode("ascii")
    header = [0] * 256
    header[0], header[1], header[2], header[3] = TOKENIZER_MAGIC, TOKENIZER_VERSION, VOCAB, EOT
    parts = [struct.pack("<256I", *header)]
    for tok in by_id:
        if not 0 < len(tok) < 256:  # one uint8 length per token
            sys.exit("error: gpt2_encoding.py: expected tokens of 1..255 bytes, found %d" % len(tok))
        parts.append(bytes([len(tok)]) + tok)
    return b"".join(parts)


def doc_tokens(enc, text):
    """a document as llm.c writes it: <|endoftext|> first, then the text's tokens (special tokens in
    the text are ordinary text, as llm.c's encode_ordinary treats them)"""
    return [EOT] + enc.encode_ordinary(text)


# an llm.c token shard of GPT-2 tokens: the same writer as the addition data's (header, then uint16 tokens)
shard_bytes = tokens_shard_bytes
