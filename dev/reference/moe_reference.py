#!/usr/bin/env python3
# moe_reference.py: an independent float64 PyTorch mixture-of-experts MLP (router, top-k, capacity drops,
# experts of GPT-2's MLP shape, the load-balancing and z losses), with gradients by autograd, written from
# the papers' formulas (not from the trainer's code), that writes the fixture test/test_moe.cu compares
# llm/model/moe.h against (rung 1 of the verification ladder).
#
#   python3 dev/reference/moe_reference.py --out test/fixtures/moe_reference.bin
#
# Deterministic: two runs write identical bytes. Needs torch (any 2.x, CPU) and numpy.
#
# The semantics (those of llm/ops/moe_router.cuh's header):
#   logits = x Wr^T; probs = softmax(logits); the K experts of highest probs + bias (bias chooses only);
#   gates = the chosen probs, over their sum when K > 1; capacity cap = ceil(F K N / E) (F = 0: none):
#   each expert keeps the cap assignments of highest prob (ties: lower token); y[n] = sum over n's kept
#   assignments of gate * fcproj_e(gelu_tanh(fc_e(x[n])));
#   aux = coef_aux E sum_i f_i P_i, f_i = chosen (before drops) / (K N), constant; P_i = mean_n probs[n, i];
#   z = coef_z mean_n logsumexp(logits_n)^2.
#   The gradients are those of L = sum(y * R) + scale * (aux + z).
# Each case's inputs are drawn (float32 values) until no routing decision is near a tie: the K-th and
# (K+1)-th scores of every token, and every expert's lowest kept and highest dropped prob, differ by at
# least MARGIN, so a float32 or bfloat16 forward of the same inputs routes alike.
#
# File format (little-endian):
#   int32 magic 20261201, int32 version 1, int32 number of cases
#   per case:
#     int32[8]   N, C, E, K, has_bias, 0, 0, 0
#     float32[4] capacity_factor, aux_coef, z_coef, scale
#     float32    x (N,C), router (E,C), fcw (E,4C,C), fcb (E,4C), fcprojw (E,C,4C), fcprojb (E,C),
#                bias (E) (only if has_bias), R (N,C) (= dy),
#                y (N,C), losses (2): aux, z
#     int32      routed (E), dropped (E)
#     float32    gradients of L: x (N,C), router, fcw, fcb, fcprojw, fcprojb (the parameters' shapes)
import argparse
import math
import struct

import numpy as np
import torch

MAGIC, VERSION = 20261201, 1
MARGIN = 0.02

# (N, C, E, K, capacity_factor, aux_coef, z_coef, scale, bias kind)
CASES = [
    (16, 16, 4, 1, 0.0, 0.3, 0.05, 0.5, None),       # Switch: top-1, no drops, no bias
    (16, 16, 4, 2, 1.0, 0.3, 0.05, 0.75, "small"),   # GShard-like top-2 with drops and a selection bias
    (16, 16, 4, 2, 0.75, 0.2, 0.1, 1.0, "empty"),    # top-2, drops, expert 3 never chosen (bias -1)
]


def gelu_tanh(u):
    return 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


def route(probs, bias, K, cap):
    """expert (N,K) best first, kept (N,K) bool, routed (E), dropped (E): plain loops in float64"""
    N, E = probs.shape
    p = probs.detach().numpy()
    score = p + (bias if bias is not None else 0.0)
    expert = np.zeros((N, K), dtype=np.int64)
    margin = math.inf
    for n in range(N):
        order = sorted(range(E), key=lambda e: (-score[n, e], e))
        expert[n] = order[:K]
        if K < E:
            margin = min(margin, score[n, order[K - 1]] - score[n, order[K]])
    kept = np.zeros((N, K), dtype=bool)
    routed, dropped = np.zeros(E, dtype=np.int32), np.zeros(E, dtype=np.int32)
    for e in range(E):
        cands = [(n, k) for n in range(N) for k in range(K) if expert[n, k] == e]
        cands.sort(key=lambda nk: (-p[nk[0], e], nk[0]))
        routed[e] = len(cands)
        for i, (n, k) in enumerate(cands):
            kept[n, k] = i < cap
        dropped[e] = max(0, len(cands) - cap)
        if len(cands) > cap:
            margin = min(margin, p[cands[cap - 1][0], e] - p[cands[cap][0], e])
    return expert, kept, routed, dropped, margin


def forward(t, N, C, E, K, F, aux_coef, z_coef, bias):
    x, wr, fcw, fcb, pw, pb = t
    logits = x @ wr.T
    probs = torch.softmax(logits, dim=1)
    lse = torch.logsumexp(logits, dim=1)
    cap = N * K if F <= 0 else min(N * K, math.ceil(F * K * N / E))
    expert, kept, routed, dropped, margin = route(probs, bias, K, cap)
    chosen = torch.stack([probs[n, expert[n]] for n in range(N)])  # (N,K)
    gates = chosen / chosen.sum(dim=1, keepdim=True) if K > 1 else chosen
    rows = []
    for n in range(N):
        acc = torch.zeros(C, dtype=torch.float64)
        for k in range(K):
            if kept[n, k]:
                e = expert[n, k]
                h = gelu_tanh(fcw[e] @ x[n] + fcb[e])
                acc = acc + gates[n, k] * (pw[e] @ h + pb[e])
        rows.append(acc)
    y = torch.stack(rows)
    f = torch.tensor(routed, dtype=torch.float64) / (K * N)  # a constant: no gradient
    aux = aux_coef * E * (f * probs.mean(dim=0)).sum()
    z = z_coef * (lse ** 2).mean()
    return y, aux, z, routed, dropped, margin


def make_case(rng, N, C, E, K, F, aux_coef, z_coef, scale, bias_kind):
    for attempt in range(1000):
        def draw(shape, std):
            return (rng.standard_normal(shape) * std).astype(np.float32)
        arrays = [draw((N, C), 1.0), draw((E, C), 0.5), draw((E, 4 * C, C), 0.25), draw((E, 4 * C), 0.1),
                  draw((E, C, 4 * C), 0.15), draw((E, C), 0.1)]
        bias = None
        if bias_kind == "small":
            bias = draw((E,), 0.05)
        elif bias_kind == "empty":
            bias = np.zeros(E, dtype=np.float32)
            bias[E - 1] = -1.0
        R = draw((N, C), 1.0)
        t = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in arrays]
        y, aux, z, routed, dropped, margin = forward(t, N, C, E, K, F, aux_coef, z_coef,
                                                     None if bias is None else bias.astype(np.float64))
        if margin < MARGIN:
            continue
        if F > 0 and dropped.sum() == 0:
            continue
        L = (y * torch.tensor(R.astype(np.float64))).sum() + scale * (aux + z)
        L.backward()
        grads = [p.grad.numpy() for p in t]
        return arrays, bias, R, y.detach().numpy(), [aux.item(), z.item()], routed, dropped, grads, margin, attempt
    raise SystemExit("moe_reference.py: no inputs without a near-tie after 1000 draws")


def main():
    ap = argparse.ArgumentParser(description="write the float64 MoE fixture of test/test_moe.cu")
    ap.add_argument("--out", default="test/fixtures/moe_reference.bin")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    rng = np.random.default_rng(20261201)
    blob = [struct.pack("<3i", MAGIC, VERSION, len(CASES))]
    for (N, C, E, K, F, ac, zc, sc, bk) in CASES:
        arrays, bias, R, y, losses, routed, dropped, grads, margin, attempt = make_case(rng, N, C, E, K, F, ac, zc, sc, bk)
        blob.append(struct.pack("<8i", N, C, E, K, int(bias is not None), 0, 0, 0))
        blob.append(struct.pack("<4f", F, ac, zc, sc))
        for a in arrays:
            blob.append(a.astype("<f4").tobytes())
        if bias is not None:
            blob.append(bias.astype("<f4").tobytes())
        blob.append(R.astype("<f4").tobytes())
        blob.append(y.astype("<f4").tobytes())
        blob.append(np.array(losses, dtype="<f4").tobytes())
        blob.append(routed.astype("<i4").tobytes())
        blob.append(dropped.astype("<i4").tobytes())
        for g in grads:
            blob.append(g.astype("<f4").tobytes())
        print("case N=%d C=%d E=%d K=%d F=%g: routed %s dropped %s, aux %.6g z %.6g, margin %.3g (draw %d)" %
              (N, C, E, K, F, routed.tolist(), dropped.tolist(), losses[0], losses[1], margin, attempt))
    with open(args.out, "wb") as f:
        f.write(b"".join(blob))
    print("wrote %s" % args.out)


if __name__ == "__main__":
    main()
