#!/usr/bin/env python3
"""
Sanity check of the fixture files, read back with `struct` only (no torch, no numpy):

    python3 dev/reference/check_fixture.py test/fixtures

Checks headers (magic, version, config), exact file sizes, that the padded wte rows are zero
(weights and gradient), that x and y are valid tokens, that the stored loss is the mean
cross-entropy of the stored logits, and that the loss file parses and starts at that loss.
Prints one line per file; on the first failure prints what was expected and what was found and
exits with status 1.
"""
import math
import os
import struct
import sys

HEADER_BYTES = 256 * 4
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def fail(path, msg):
    print(f"FAIL {path}: {msg}")
    sys.exit(1)


def expect(cond, path, msg):
    if not cond:
        fail(path, msg)


def sizes(cfg):
    Vp, maxT, L, C = cfg["Vp"], cfg["maxT"], cfg["L"], cfg["C"]
    return [Vp * C, maxT * C,
            L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
            L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,
            C, C]


def split(path, flat, cfg):
    out, off = {}, 0
    for name, n in zip(NAMES, sizes(cfg)):
        out[name] = flat[off:off + n]
        off += n
    for name, vals in out.items():
        expect(all(math.isfinite(v) for v in vals), path, f"{name} has a non-finite value")
    return out


def read_checkpoint(path, cfg_expected=None):
    data = open(path, "rb").read()
    expect(len(data) >= HEADER_BYTES, path, f"expected >= {HEADER_BYTES} bytes, found {len(data)}")
    h = struct.unpack_from("<256i", data, 0)
    expect(h[0] == 20240326, path, f"magic: expected 20240326, found {h[0]}")
    expect(h[1] == 3, path, f"version: expected 3 (fp32), found {h[1]}")
    cfg = dict(maxT=h[2], V=h[3], L=h[4], NH=h[5], C=h[6], Vp=h[7])
    expect(all(v == 0 for v in h[8:]), path, "header slots 8..255 must be 0")
    expect(cfg["Vp"] % 128 == 0 and cfg["V"] <= cfg["Vp"] < cfg["V"] + 128, path,
           f"Vp={cfg['Vp']} is not V={cfg['V']} rounded up to a multiple of 128")
    expect(cfg["C"] % cfg["NH"] == 0, path, f"C={cfg['C']} not divisible by NH={cfg['NH']}")
    if cfg_expected is not None:
        expect(cfg == cfg_expected, path, f"config {cfg}, expected {cfg_expected}")
    n = sum(sizes(cfg))
    expect(len(data) == HEADER_BYTES + 4 * n, path,
           f"size: expected {HEADER_BYTES + 4 * n} bytes (1024 + 4*{n}), found {len(data)}")
    p = split(path, struct.unpack_from(f"<{n}f", data, HEADER_BYTES), cfg)
    expect(all(v == 0.0 for v in p["wte"][cfg["V"] * cfg["C"]:]), path,
           f"wte rows {cfg['V']}..{cfg['Vp'] - 1} (padding) must be 0")
    print(f"ok   {path}: checkpoint v3 fp32, {cfg}, {n} floats, wte padding 0")
    return cfg, p


def read_debug_state(path, cfg):
    data = open(path, "rb").read()
    expect(len(data) >= HEADER_BYTES, path, f"expected >= {HEADER_BYTES} bytes, found {len(data)}")
    h = struct.unpack_from("<256i", data, 0)
    expect(h[0] == 20240327, path, f"magic: expected 20240327, found {h[0]}")
    expect(h[1] == 2, path, f"version: expected 2, found {h[1]}")
    expect(all(v == 0 for v in h[4:]), path, "header slots 4..255 must be 0")
    B, T, V, C = h[2], h[3], cfg["V"], cfg["C"]
    expect(0 < T <= cfg["maxT"] and B > 0, path, f"B={B}, T={T} (maxT={cfg['maxT']})")
    n = sum(sizes(cfg))
    want = HEADER_BYTES + 4 * (2 * B * T + B * T * V + 1 + n)
    expect(len(data) == want, path, f"size: expected {want} bytes for B={B} T={T}, found {len(data)}")
    off = HEADER_BYTES
    x = struct.unpack_from(f"<{B * T}i", data, off); off += 4 * B * T
    y = struct.unpack_from(f"<{B * T}i", data, off); off += 4 * B * T
    logits = struct.unpack_from(f"<{B * T * V}f", data, off); off += 4 * B * T * V
    (loss,) = struct.unpack_from("<f", data, off); off += 4
    grads = split(path, struct.unpack_from(f"<{n}f", data, off), cfg)
    expect(all(0 <= t < V for t in x + y), path, f"x, y must be tokens in [0, {V})")
    expect(all(math.isfinite(v) for v in logits), path, "logits have a non-finite value")
    # the loss must be the mean cross-entropy of the stored logits (recomputed in double)
    total = 0.0
    for i in range(B * T):
        row = logits[i * V:(i + 1) * V]
        zmax = max(row)
        total += zmax + math.log(sum(math.exp(v - zmax) for v in row)) - row[y[i]]
    ce = total / (B * T)
    expect(abs(ce - loss) <= 1e-6 * abs(loss), path,
           f"stored loss {loss!r} but the stored logits give {ce!r}")
    expect(all(v == 0.0 for v in grads["wte"][V * C:]), path,
           f"wte gradient rows {V}..{cfg['Vp'] - 1} (padding) must be 0")
    expect(all(v == 0.0 for v in grads["wpe"][T * C:]), path,
           f"wpe gradient rows {T}..{cfg['maxT'] - 1} (positions >= T) must be 0")
    print(f"ok   {path}: debug state v2, B={B} T={T}, loss {loss:.9g} "
          f"(= CE of stored logits, diff {abs(ce - loss):.1e}), 16 gradients, padding 0")
    return loss


def read_losses(path, loss0):
    params, losses = {}, []
    for ln, line in enumerate(open(path).read().splitlines(), 1):
        if line.startswith("#"):
            for tok in line[1:].split():
                if "=" in tok:
                    k, v = tok.split("=", 1)
                    params[k] = v
        elif line.strip():
            try:
                losses.append(float(line))
            except ValueError:
                fail(path, f"line {ln}: expected a loss value, found {line!r}")
    for k in ("steps", "lr", "beta1", "beta2", "eps", "weight_decay", "decayed"):
        expect(k in params, path, f"missing '# {k}=...' comment line")
    steps = int(params["steps"])
    expect(len(losses) == steps, path, f"expected {steps} losses, found {len(losses)}")
    expect(all(math.isfinite(l) for l in losses), path, "a loss is not finite")
    expect(abs(losses[0] - loss0) <= 1e-6 * abs(loss0), path,
           f"first loss {losses[0]!r} differs from the debug-state loss {loss0!r}")
    print(f"ok   {path}: {steps} losses {losses[0]:.6f} -> {losses[-1]:.6f}, "
          f"lr={params['lr']} betas=({params['beta1']},{params['beta2']}) eps={params['eps']} "
          f"wd={params['weight_decay']} on {params['decayed']}")


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "test/fixtures"
    cfg, _ = read_checkpoint(os.path.join(d, "tiny_model.bin"))
    loss0 = read_debug_state(os.path.join(d, "tiny_debug_state.bin"), cfg)
    read_losses(os.path.join(d, "tiny_adamw_losses.txt"), loss0)
    step10 = os.path.join(d, "tiny_model_step10.bin")
    if os.path.exists(step10):
        read_checkpoint(step10, cfg)
    total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    expect(total < 2 * 1024 * 1024, d, f"fixtures total {total} bytes, limit 2 MiB")
    print(f"all fixture checks passed ({total} bytes in {d})")


if __name__ == "__main__":
    main()
