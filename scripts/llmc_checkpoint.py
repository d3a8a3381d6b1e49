"""llmc_checkpoint.py: llm.c model checkpoints (model_<step>.bin) read and written with numpy, as
llm/ckpt/checkpoint.h reads and writes them (docs/formats.md).

The file: int32 header[256] (0 magic 20240326, 1 version: 3 = FP32 or 5 = BF16 parameters, 2 maxT, 3 V, 4 L,
5 NH, 6 C, 7 Vp = V rounded up to a multiple of 128; 253..255 the checksum: the mark "CSUM", then the sum's
low and high 32 bits, or 0 in a file without one); then the 16 parameter tensors back to back in TENSORS'
order, FP32 or BF16 (kept here as their uint16 bits: nothing is rounded on the way through). The checksum
is llm/core/atomic_file.h's ckpt_sum of the whole file with its three slots 0: FNV-1a's step
h = (h ^ w) * P over the little-endian 64-bit words in 4 lanes (word i to lane i mod 4, lane k starting at
the FNV offset basis ^ k, the bytes zero-padded to a multiple of 32), then the 4 lanes and the byte count,
40 little-endian bytes, folded by FNV-1a of bytes. Each step depends on the one before, so it runs as a
Python loop: about 0.4 us a word here, some 25 s for GPT-2 small (124M FP32 parameters)."""
import struct

import numpy as np

from safetensors_np import BadFile, write_atomic

MAGIC, HEADER_INTS, SUM_SLOT, SUM_MARK = 20240326, 256, 253, 0x4d555343
P, M, START = 1099511628211, (1 << 64) - 1, 14695981039346656037


def pad_vocab(V):
    return (V + 127) // 128 * 128


def shapes(c):
    """the 16 tensors in checkpoint order: (name, shape) for config c (keys maxT V L NH C Vp)"""
    L, C = c["L"], c["C"]
    return [("wte", (c["Vp"], C)), ("wpe", (c["maxT"], C)),
            ("ln1w", (L, C)), ("ln1b", (L, C)), ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)),
            ("attprojw", (L, C, C)), ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)),
            ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
            ("lnfw", (C,)), ("lnfb", (C,))]


def ckpt_sum(*pieces):
    """llm/core/atomic_file.h's checksum of the bytes of pieces, one after the other (each but the last a multiple
    of 32 bytes long: the lanes run on across them; no piece is copied whole)"""
    lanes = [START ^ k for k in range(4)]
    total = 0
    for j, data in enumerate(pieces):
        total += len(data)
        full = len(data) // 32 * 32
        if j < len(pieces) - 1 and full != len(data):
            raise ValueError("ckpt_sum: a piece before the last of %d bytes, not a multiple of 32" % len(data))
        tail = bytes(data[full:])
        words = [np.frombuffer(memoryview(data)[:full], dtype="<u8"), np.frombuffer(tail + b"\0" * (-len(tail) % 32), dtype="<u8")]
        for k in range(4):
            h = lanes[k]
            for w8 in words:
                lane = w8[k::4]
                for i in range(0, len(lane), 1 << 20):  # a million words at a time: the Python ints stay few
                    for w in lane[i:i + (1 << 20)].tolist():
                        h = ((h ^ w) * P) & M
            lanes[k] = h
    h = START
    for b in struct.pack("<5Q", *lanes, total):
        h = ((h ^ b) * P) & M
    return h


def read(path):
    """(config, version, params, verified): config a dict (maxT V L NH C Vp), params a dict name -> array in
    checkpoint order (float32 for version 3, BF16 bits as uint16 for version 5), verified whether the file
    carries a checksum (a wrong one is a BadFile)"""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadFile("%s: cannot read: %s" % (path, e.strerror or e))
    if len(data) < 4 * HEADER_INTS:
        raise BadFile("%s: expected a 1024-byte header, found a file of %d bytes" % (path, len(data)))
    h = np.frombuffer(data[:4 * HEADER_INTS], dtype="<i4")
    if h[0] != MAGIC:
        raise BadFile("%s: expected magic %d (an llm.c model checkpoint), found %d" % (path, MAGIC, h[0]))
    version = int(h[1])
    if version in (6, 8):
        raise BadFile("%s: a mixture-of-experts model (version %d, this trainer's own): not an llm.c model" % (path, version))
    if version not in (3, 5):
        raise BadFile("%s: expected version 3 (fp32) or 5 (bf16), found %d" % (path, version))
    c = dict(zip(("maxT", "V", "L", "NH", "C", "Vp"), (int(x) for x in h[2:8])))
    if min(c.values()) <= 0 or c["C"] % c["NH"] != 0 or c["Vp"] != pad_vocab(c["V"]):
        raise BadFile("%s: expected a config with every value > 0, C a multiple of NH and Vp = V rounded up to a "
                      "multiple of 128, found maxT=%d V=%d L=%d NH=%d C=%d Vp=%d" % ((path,) + tuple(c.values())))
    elem = 4 if version == 3 else 2
    n = sum(int(np.prod(s)) for _, s in shapes(c))
    if len(data) != 4 * HEADER_INTS + n * elem:
        raise BadFile("%s: expected %d bytes (header + %d parameters of %d bytes), found %d"
                      % (path, 4 * HEADER_INTS + n * elem, n, elem, len(data)))
    verified = int(h[SUM_SLOT]) == SUM_MARK
    if verified:
        held = (int(h[SUM_SLOT + 2]) & 0xffffffff) << 32 | (int(h[SUM_SLOT + 1]) & 0xffffffff)
        head = data[:4 * SUM_SLOT] + b"\0" * 12 + data[4 * SUM_SLOT + 12:4 * HEADER_INTS]  # its checksum slots 0
        got = ckpt_sum(head, memoryview(data)[4 * HEADER_INTS:])
        if got != held:
            raise BadFile("%s: expected checksum %016x (its header's), found %016x: the file was damaged"
                          % (path, held, got))
    body = np.frombuffer(data, dtype="<f4" if version == 3 else "<u2", offset=4 * HEADER_INTS)
    params, at = {}, 0
    for name, s in shapes(c):
        k = int(np.prod(s))
        params[name] = body[at:at + k].reshape(s)
        at += k
    return c, version, params, verified


def write(path, c, version, params):
    """params (a dict name -> array of shapes(c), float32 or BF16 bits) as a checkpoint of version 3 or 5 with
    its checksum, through path + ".tmp" renamed when complete"""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = [MAGIC, version, c["maxT"], c["V"], c["L"], c["NH"], c["C"], c["Vp"]]
    dt = "<f4" if version == 3 else "<u2"
    body = bytearray()  # the parameters in file order, one buffer (the model's bytes once more, no further copy)
    for name, s in shapes(c):
        a = np.ascontiguousarray(params[name], dtype=dt)
        if a.shape != tuple(s):
            raise BadFile("%s: tensor %s: expected shape %s, found %s" % (path, name, tuple(s), a.shape))
        body += memoryview(a).cast("B")
    s = ckpt_sum(header.tobytes(), body)
    header[SUM_SLOT:SUM_SLOT + 3] = np.array([SUM_MARK, s & 0xffffffff, s >> 32], dtype=np.uint32).view("<i4")
    write_atomic(path, [header.tobytes(), body])
