#!/usr/bin/env python3
"""fp8_reference.py DIR: the independent reference of test/test_fp8.cu's FP8 quantizers.

Reads DIR/cases.bin (written by test_fp8), recomputes every case's scales and FP8 codes with numpy
float32 arithmetic and ml_dtypes' float8_e4m3fn / float8_e5m2 rounding, and writes DIR/ref.bin for
the test to compare bit for bit. It implements the recipes from their definitions (llm/precision/fp8.cuh's top
comment), not from the C++ code.

cases.bin: int32 ncases, then per case: char name[64]; int32 recipe, fmt, rows, cols, nsteps, H,
reduce, margin; float32 prev_scale; float32 x[nsteps][rows][cols].
  recipe 0 given scale (= prev_scale), 1 current, 2 delayed, 3 block 1x128, 4 block 128x128, 5 mx
ref.bin: for fmt in (E4M3, E5M2): uint32 decode[256] (float32 bits), uint8 overflow[4] (ml_dtypes'
own astype of 2*max, -2*max, +inf, NaN: its conventions, stated in the test); then per case, per
step: int32 nscales, uint32 scales[nscales] (float32 bits; E8M0 codes for mx), uint8 codes[rows*cols].
Exit status 2 with one line if ml_dtypes is missing.
"""
import struct
import sys

try:
    import numpy as np
    import ml_dtypes
except ImportError as e:
    print("error: python3 lacks %s: run bash scripts/deps.sh test (or python3 -m pip install ml_dtypes)" % e.name)
    sys.exit(2)

F32 = np.float32
DTYPES = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
MAXES = [F32(448.0), F32(57344.0)]
EMAX_ELEM = [8, 15]  # OCP MX v1.0: the exponent of the element format's largest normal
FLT_MAX = F32(np.finfo(np.float32).max)


def encode(v, fmt):
    """float32 array -> uint8 codes: ml_dtypes round-to-nearest-even, finite values clipped to +-max
    first (our saturating convention; ml_dtypes alone would give NaN / inf), inf and NaN untouched."""
    v = np.asarray(v, dtype=F32)
    m = MAXES[fmt]
    v = np.where(np.isfinite(v), np.clip(v, -m, m), v).astype(F32)
    return v.astype(DTYPES[fmt]).view(np.uint8)


def scale_from_amax(amax, fmt):
    s = F32(MAXES[fmt] / F32(amax))
    return FLT_MAX if np.isinf(s) else s


def amax_of(x):
    return F32(np.max(np.abs(x))) if x.size else F32(0)  # np.max propagates NaN


def bits(a):
    return np.asarray(a, dtype=F32).view(np.uint32)


def tile_scale(amax, fmt):
    if not np.isfinite(amax) or amax == 0:
        return F32(1.0)
    return scale_from_amax(amax, fmt)


def quantize_blocks(x, fmt, br, bc):
    """tiles of br x bc (partial at the edges), one FP32 scale each, row-major over the tiles"""
    rows, cols = x.shape
    q = np.zeros((rows, cols), np.uint8)
    scales = []
    for r0 in range(0, rows, br):
        for c0 in range(0, cols, bc):
            t = x[r0:r0 + br, c0:c0 + bc]
            s = tile_scale(amax_of(t), fmt)
            scales.append(s)
            q[r0:r0 + br, c0:c0 + bc] = encode(t * s, fmt).reshape(t.shape)
    return bits(scales), q


def quantize_mx(x, fmt):
    rows, cols = x.shape
    q = np.zeros((rows, cols), np.uint8)
    codes = []
    for r in range(rows):
        for c0 in range(0, cols, 32):
            t = x[r, c0:c0 + 32]
            a = amax_of(t)
            if not np.isfinite(a):
                codes.append(255)  # E8M0 NaN; every element NaN
                q[r, c0:c0 + 32] = 0x7F if fmt == 0 else 0x7E
                continue
            if a == 0:
                e = -127
            else:
                _, k = np.frexp(a)  # a = m * 2^k, m in [0.5, 1): floor(log2 a) = k - 1
                e = min(max(int(k) - 1 - EMAX_ELEM[fmt], -127), 127)
            codes.append(e + 127)
            q[r, c0:c0 + 32] = encode(t * F32(np.ldexp(F32(1), -e)), fmt)
    return np.array(codes, np.uint32), q


def main():
    d = sys.argv[1]
    buf = open(d + "/cases.bin", "rb").read()
    off = 0
    (ncases,) = struct.unpack_from("<i", buf, off)
    off += 4
    out = []
    for fmt in (0, 1):
        out.append(bits(np.arange(256, dtype=np.uint8).view(DTYPES[fmt]).astype(F32)).tobytes())
        m = MAXES[fmt]
        out.append(np.array([2 * m, -2 * m, np.inf, np.nan], F32).astype(DTYPES[fmt]).view(np.uint8).tobytes())
    for _ in range(ncases):
        name = buf[off:off + 64].split(b"\0")[0].decode()
        off += 64
        recipe, fmt, rows, cols, nsteps, H, reduce, margin = struct.unpack_from("<8i", buf, off)
        off += 32
        (prev,) = struct.unpack_from("<f", buf, off)
        prev = F32(prev)
        off += 4
        n = nsteps * rows * cols
        xs = np.frombuffer(buf, dtype=F32, count=n, offset=off).reshape(nsteps, rows, cols)
        off += 4 * n
        history = np.zeros(max(H, 1), F32)
        pos = 0
        for step in range(nsteps):
            x = xs[step]
            if recipe == 0:
                scales, q = bits([prev]), encode(x * prev, fmt)
            elif recipe == 1:
                a = amax_of(x)
                s = prev if not np.isfinite(a) else (F32(1) if a == 0 else scale_from_amax(a, fmt))
                scales, q = bits([s]), encode(x * s, fmt)
            elif recipe == 2:
                red = F32(np.max(history)) if reduce == 0 else history[(pos - 1) % H]
                if np.isfinite(red) and red != 0:
                    prev = F32(F32(MAXES[fmt] / red) / F32(2.0 ** margin))
                    if np.isinf(prev):
                        prev = FLT_MAX
                scales, q = bits([prev]), encode(x * prev, fmt)
                history[pos] = amax_of(x)
                pos = (pos + 1) % H
            elif recipe == 3:
                scales, q = quantize_blocks(x, fmt, 1, 128)
            elif recipe == 4:
                scales, q = quantize_blocks(x, fmt, 128, 128)
            elif recipe == 5:
                scales, q = quantize_mx(x, fmt)
            else:
                print("error: %s: unknown recipe %d" % (name, recipe))
                sys.exit(1)
            out.append(struct.pack("<i", len(scales)))
            out.append(np.asarray(scales, np.uint32).tobytes())
            out.append(np.asarray(q, np.uint8).reshape(-1).tobytes())
    with open(d + "/ref.bin", "wb") as f:
        f.write(b"".join(out))


if __name__ == "__main__":
    with np.errstate(over="ignore", invalid="ignore"):  # fp8_max / tiny amax overflows on purpose (-> FLT_MAX)
        main()
