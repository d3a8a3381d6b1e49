#!/usr/bin/env python3
"""
An independent GPT-2 in PyTorch, float64 throughout, written from the math.
It writes the fixtures the C++ model test compares against (see README.md here).

    python3 dev/reference/gpt2_reference.py --out test/fixtures

Files written (all little-endian, formats as in docs/formats.md / llm.c):
    tiny_model.bin          llm.c checkpoint (magic 20240326, version 3, fp32, padded vocab)
    tiny_debug_state.bin    llm.c debug state (magic 20240327, version 2): x, y, logits, loss, grads
    tiny_adamw_losses.txt   the losses of 10 AdamW steps on the same batch
    tiny_model_step10.bin   the parameters after those 10 steps, as an llm.c checkpoint

The model is held as the 16 tensors of the llm.c checkpoint, in checkpoint order, with the layer
dimension stacked first (ln1w is (L, C), qkvw is (L, 3C, C), ...). Autograd gives the gradients;
a central finite difference in float64 checks them before anything is written.
"""
import argparse
import math
import os
import struct
import sys

import torch

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)  # one thread: the same reductions in the same order every run

# ----------------------------------------------------------------------------------------------
# configuration

CONFIG = dict(V=100, Vp=128, maxT=16, L=2, NH=4, C=32)
B, T = 4, 8                 # T < maxT on purpose: only the first T rows of wpe are used
SEED = 1337                 # torch seed for the weights, then the tokens
LN_EPS = 1e-5

ADAMW = dict(steps=10, lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
CLIP = 1.42  # the clipping case: the norms fall from ~2.2 to ~1.35, so some steps are clipped, others not

PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
# weight decay goes to the 2-D weight matrices only (matmul weights and embeddings)
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def param_shapes(cfg):
    V, Vp, maxT, L, C = cfg["V"], cfg["Vp"], cfg["maxT"], cfg["L"], cfg["C"]
    return [
        (Vp, C), (maxT, C),
        (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
        (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C),
        (C,), (C,),
    ]


# ----------------------------------------------------------------------------------------------
# initialization, as GPT-2: N(0, 0.02) weights, residual projections N(0, 0.02/sqrt(2L)),
# zero biases, LayerNorm gain 1 / bias 0, padded vocabulary rows zero

def init_params(cfg, gen):
    L, V = cfg["L"], cfg["V"]
    std = 0.02
    std_resid = 0.02 / math.sqrt(2 * L)
    params = []
    for name, shape in zip(PARAM_NAMES, param_shapes(cfg)):
        if name in ("wte", "wpe", "qkvw", "fcw"):
            p = torch.randn(shape, generator=gen) * std
        elif name in ("attprojw", "fcprojw"):
            p = torch.randn(shape, generator=gen) * std_resid
        elif name in ("ln1w", "ln2w", "lnfw"):
            p = torch.ones(shape)
        else:  # biases of linears and of LayerNorms
            p = torch.zeros(shape)
        if name == "wte":
            p[V:] = 0.0
        params.append(p)
    return params


# ----------------------------------------------------------------------------------------------
# the model

def layernorm(x, w, b):
    # normalize over the last dimension with the biased (population) variance
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def linear(x, w, b):
    # w is (out, in) as stored in the checkpoint
    return x @ w.t() + b


def causal_self_attention(x, qkvw, qkvb, NH):
    Bx, Tx, C = x.shape
    hs = C // NH
    qkv = linear(x, qkvw, qkvb)                     # (B, T, 3C) laid out as [q | k | v]
    q, k, v = qkv[..., 0:C], qkv[..., C:2 * C], qkv[..., 2 * C:3 * C]
    # head h owns channels h*hs .. (h+1)*hs-1 of each of q, k, v
    q = q.reshape(Bx, Tx, NH, hs).permute(0, 2, 1, 3)   # (B, NH, T, hs)
    k = k.reshape(Bx, Tx, NH, hs).permute(0, 2, 1, 3)
    v = v.reshape(Bx, Tx, NH, hs).permute(0, 2, 1, 3)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hs)  # (B, NH, T, T): query t, key s
    future = torch.ones(Tx, Tx, dtype=torch.bool).triu(diagonal=1)  # s > t is not visible
    scores = scores.masked_fill(future, float("-inf"))
    scores = scores - scores.max(dim=-1, keepdim=True).values
    e = torch.exp(scores)
    att = e / e.sum(dim=-1, keepdim=True)
    out = att @ v                                        # (B, NH, T, hs)
    return out.permute(0, 2, 1, 3).reshape(Bx, Tx, C)    # heads back side by side


def forward(params, x, y, cfg):
    """Returns (logits over the first V columns, shape (B, T, V); mean cross-entropy loss)."""
    (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,
     ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb) = params
    V, L, NH = cfg["V"], cfg["L"], cfg["NH"]
    Tx = x.shape[1]
    h = wte[x] + wpe[:Tx]                                # (B, T, C)
    for l in range(L):
        a = layernorm(h, ln1w[l], ln1b[l])
        a = causal_self_attention(a, qkvw[l], qkvb[l], NH)
        h = h + linear(a, attprojw[l], attprojb[l])
        m = layernorm(h, ln2w[l], ln2b[l])
        m = gelu_tanh(linear(m, fcw[l], fcb[l]))
        h = h + linear(m, fcprojw[l], fcprojb[l])
    h = layernorm(h, lnfw, lnfb)
    logits_padded = h @ wte.t()                          # (B, T, Vp), LM head tied to wte
    logits = logits_padded[..., :V]                      # padded columns never reach the loss
    # cross-entropy: -log softmax(logits)[y], averaged over all B*T positions
    zmax = logits.max(dim=-1, keepdim=True).values
    logz = zmax.squeeze(-1) + torch.log(torch.exp(logits - zmax).sum(dim=-1))
    picked = logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    loss = (logz - picked).mean()
    return logits, loss


def loss_and_grads(params, x, y, cfg):
    ps = [p.detach().clone().requires_grad_(True) for p in params]
    logits, loss = forward(ps, x, y, cfg)
    grads = torch.autograd.grad(loss, ps)
    return logits.detach(), loss.detach(), [g.detach() for g in grads]


# ----------------------------------------------------------------------------------------------
# finite-difference check of the autograd gradients

def finite_difference_check(params, x, y, cfg, grads, n_rel=4, n_abs=2, h=3e-4,
                            floor=1e-4, rel_tol=1e-6, abs_tol=1e-10):
    """
    Fourth-order central difference, (8(f(+h) - f(-h)) - (f(+2h) - f(-2h))) / 12h, in float64.
    Its truncation error is O(h^4) and its rounding error about 1e-15/h, so it resolves
    gradients to ~1e-11 absolute. A relative error means something only where the gradient is
    well above that, so per tensor:
      - n_rel random entries among those with |grad| >= floor: relative error < rel_tol;
      - n_abs random entries from the whole tensor: absolute error < abs_tol.
    Then the gradients that are zero by construction: wte rows V..Vp-1 (padding) and wpe rows
    T..maxT-1 (unused positions) exactly 0; the key bias (softmax is invariant to adding
    q.b_k to every score of a query) zero to rounding.
    """
    gen = torch.Generator().manual_seed(4242)
    V, C = cfg["V"], cfg["C"]
    Tx = x.shape[1]
    worst_rel, worst_abs = 0.0, 0.0
    rows = []

    def loss_at(i, j, delta):
        ps = [q.clone() for q in params]
        ps[i].view(-1)[j] += delta
        return forward(ps, x, y, cfg)[1].item()

    with torch.no_grad():
        for i, name in enumerate(PARAM_NAMES):
            g = grads[i].reshape(-1)
            pool = (g.abs() >= floor).nonzero().reshape(-1)
            pick_rel = pool[torch.randint(0, len(pool), (n_rel,), generator=gen)].tolist()
            pick_abs = torch.randint(0, g.numel(), (n_abs,), generator=gen).tolist()
            rels, abss, mags = [], [], []
            for j in pick_rel + pick_abs:
                num = (8 * (loss_at(i, j, h) - loss_at(i, j, -h))
                       - (loss_at(i, j, 2 * h) - loss_at(i, j, -2 * h))) / (12 * h)
                ana = g[j].item()
                err = abs(num - ana)
                if j in pick_rel and len(rels) < n_rel:
                    rel = err / max(abs(num), abs(ana))
                    assert rel < rel_tol, (f"{name}[{j}]: autograd {ana:.12e} vs finite "
                                           f"difference {num:.12e}, relative error {rel:.3e}")
                    rels.append(rel)
                    mags.append(abs(ana))
                else:
                    assert err < abs_tol, (f"{name}[{j}]: autograd {ana:.12e} vs finite "
                                           f"difference {num:.12e}, absolute error {err:.3e}")
                    abss.append(err)
            worst_rel, worst_abs = max(worst_rel, max(rels)), max(worst_abs, max(abss))
            rows.append((name, max(rels), min(mags), max(mags), max(abss)))
        assert torch.count_nonzero(grads[0][V:]) == 0, "wte gradient nonzero in padded rows"
        assert torch.count_nonzero(grads[1][Tx:]) == 0, "wpe gradient nonzero in rows >= T"
        kb = grads[5][:, C:2 * C].abs().max().item()
        assert kb < 1e-15, f"key-bias gradient {kb:.3e}, expected 0 up to rounding"
    print(f"finite-difference check (4th-order central difference, h={h:g}, float64)")
    print(f"  {'tensor':9s} {'max rel err':>11s}  over {n_rel} entries with |grad| in   "
          f"{'max abs err':>11s} over {n_abs} unrestricted entries")
    for name, rel, lo, hi, ab in rows:
        print(f"  {name:9s} {rel:11.2e}  [{lo:.1e}, {hi:.1e}]{'':18s}{ab:11.2e}")
    print(f"  worst relative error {worst_rel:.2e} < {rel_tol:g}, worst absolute error "
          f"{worst_abs:.2e} < {abs_tol:g}: OK")
    print(f"  zero by construction: wte rows {V}..{cfg['Vp'] - 1} and wpe rows {Tx}.."
          f"{cfg['maxT'] - 1} exactly 0, key-bias gradient max {kb:.1e}: OK")
    return worst_rel


def builtin_ops_check(params, x, y, cfg, logits, loss):
    """The same model through PyTorch's own ops (F.layer_norm, F.gelu(approximate='tanh'),
    F.scaled_dot_product_attention, F.cross_entropy): the hand-written math above must agree."""
    import torch.nn.functional as F
    (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,
     ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb) = params
    V, L, NH, C = cfg["V"], cfg["L"], cfg["NH"], cfg["C"]
    Bx, Tx = x.shape
    h = F.embedding(x, wte) + wpe[:Tx]
    for l in range(L):
        a = F.layer_norm(h, (C,), ln1w[l], ln1b[l], eps=LN_EPS)
        q, k, v = F.linear(a, qkvw[l], qkvb[l]).split(C, dim=-1)
        q, k, v = (t.view(Bx, Tx, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + F.linear(a.transpose(1, 2).reshape(Bx, Tx, C), attprojw[l], attprojb[l])
        m = F.layer_norm(h, (C,), ln2w[l], ln2b[l], eps=LN_EPS)
        h = h + F.linear(F.gelu(F.linear(m, fcw[l], fcb[l]), approximate="tanh"),
                         fcprojw[l], fcprojb[l])
    ref_logits = F.linear(F.layer_norm(h, (C,), lnfw, lnfb, eps=LN_EPS), wte[:V])
    ref_loss = F.cross_entropy(ref_logits.reshape(-1, V), y.reshape(-1))
    dl = (ref_logits - logits).abs().max().item()
    dL = abs(ref_loss.item() - loss.item())
    assert dl < 1e-12 and dL < 1e-12, f"builtin-op model differs: logits {dl:.3e}, loss {dL:.3e}"
    print(f"same model through torch.nn.functional ops: max |logits diff| {dl:.1e}, "
          f"|loss diff| {dL:.1e}: OK")


# ----------------------------------------------------------------------------------------------
# AdamW in float64, decoupled weight decay on the 2-D tensors only

def adamw_train(params, x, y, cfg, steps, lr, beta1, beta2, eps, weight_decay, clip=0.0):
    """clip > 0: global-norm clipping first (Pascanu et al. 2013): when the norm of all gradients
    together exceeds clip, every gradient is scaled by clip / norm. Returns the losses, the final
    parameters and the gradient norm of each step (before clipping)."""
    params = [p.clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    losses, norms = [], []
    for t in range(1, steps + 1):
        _, loss, grads = loss_and_grads(params, x, y, cfg)
        losses.append(loss.item())
        norm = math.sqrt(sum((g * g).sum().item() for g in grads))
        norms.append(norm)
        scale = clip / norm if clip > 0 and norm > clip else 1.0
        for i, name in enumerate(PARAM_NAMES):
            g = grads[i] * scale
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            mhat = m[i] / (1 - beta1 ** t)
            vhat = v[i] / (1 - beta2 ** t)
            wd = weight_decay if name in DECAYED else 0.0
            params[i] = params[i] - lr * (mhat / (torch.sqrt(vhat) + eps) + wd * params[i])
    return losses, params, norms


def torch_adamw_check(params, x, y, cfg, final, steps, lr, beta1, beta2, eps, weight_decay, clip=0.0):
    """torch.optim.AdamW with two parameter groups (decay / no decay), after
    torch.nn.utils.clip_grad_norm_ when clip > 0, must land on the same parameters as adamw_train
    above (same update, different rounding order; clip_grad_norm_ divides by norm + 1e-6, which
    moves a clipped update by ~1e-6 / norm relative)."""
    ps = [p.clone().requires_grad_(True) for p in params]
    groups = [dict(params=[p for p, n in zip(ps, PARAM_NAMES) if n in DECAYED],
                   weight_decay=weight_decay),
              dict(params=[p for p, n in zip(ps, PARAM_NAMES) if n not in DECAYED],
                   weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps, foreach=False)
    for _ in range(steps):
        opt.zero_grad()
        forward(ps, x, y, cfg)[1].backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(ps, clip)
        opt.step()
    worst = max(((p.detach() - f).abs().max() / f.abs().max().clamp_min(1e-30)).item()
                for p, f in zip(ps, final))
    bound = 1e-9 if clip == 0 else 1e-5
    assert worst < bound, f"torch.optim.AdamW differs from adamw_train: {worst:.3e}"
    print(f"torch.optim.AdamW (2 param groups{', clip_grad_norm_ %g' % clip if clip else ''}) after "
          f"{steps} steps: max relative parameter diff {worst:.1e}: OK")


# ----------------------------------------------------------------------------------------------
# writers (llm.c formats, docs/formats.md)

def f32_bytes(t):
    return t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()


def i32_bytes(t):
    return t.detach().to(torch.int32).contiguous().numpy().astype("<i4").tobytes()


def header(values):
    h = [0] * 256
    for slot, val in values.items():
        h[slot] = int(val)
    return struct.pack("<256i", *h)


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_checkpoint(path, params, cfg):
    hdr = header({0: 20240326, 1: 3, 2: cfg["maxT"], 3: cfg["V"], 4: cfg["L"],
                  5: cfg["NH"], 6: cfg["C"], 7: cfg["Vp"]})
    write_atomic(path, hdr + b"".join(f32_bytes(p) for p in params))


def write_debug_state(path, x, y, logits, loss, grads):
    hdr = header({0: 20240327, 1: 2, 2: x.shape[0], 3: x.shape[1]})
    body = [i32_bytes(x), i32_bytes(y), f32_bytes(logits),
            struct.pack("<f", loss.item())]
    body += [f32_bytes(g) for g in grads]
    write_atomic(path, hdr + b"".join(body))


def write_losses(path, losses, cfg, norms=None, clip=0.0):
    a = ADAMW
    lines = [
        "# tiny GPT-2 trained with AdamW on the single batch (x, y) of tiny_debug_state.bin,",
        "# starting from tiny_model.bin; written by dev/reference/gpt2_reference.py (float64).",
        "# one step: forward (the loss below) -> backward -> AdamW update. No gradient clipping."
        if clip == 0 else
        f"# one step: forward (the loss) -> backward -> global-norm clipping to {clip!r} (every gradient\n"
        "# times clip / norm when norm > clip; norm = the L2 norm of all gradients before clipping) -> AdamW.",
        "# update: m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; mhat = m/(1-b1^t); vhat = v/(1-b2^t)",
        "#         p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p), wd only for the decayed tensors",
        f"# steps={a['steps']}",
        f"# lr={a['lr']!r}",
        f"# beta1={a['beta1']!r}",
        f"# beta2={a['beta2']!r}",
        f"# eps={a['eps']!r}",
        f"# weight_decay={a['weight_decay']!r}",
        "# decayed=" + ",".join(n for n in PARAM_NAMES if n in DECAYED),
        f"# B={B} T={T} V={cfg['V']} Vp={cfg['Vp']} maxT={cfg['maxT']} L={cfg['L']} "
        f"NH={cfg['NH']} C={cfg['C']}",
    ]
    if clip > 0:
        lines += [f"# clip={clip!r}", "# then one line per step: the loss and the gradient norm before clipping"]
        lines += ["%.9g %.9g" % (l, n) for l, n in zip(losses, norms)]
    else:
        lines += ["%.9g" % l for l in losses]
    write_atomic(path, ("\n".join(lines) + "\n").encode("ascii"))


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the fixture files")
    ap.add_argument("--skip-fd", action="store_true", help="skip the finite-difference check")
    args = ap.parse_args()
    cfg = CONFIG

    gen = torch.Generator().manual_seed(SEED)
    params = init_params(cfg, gen)
    x = torch.randint(0, cfg["V"], (B, T), generator=gen)
    y = torch.randint(0, cfg["V"], (B, T), generator=gen)
    nparams = sum(p.numel() for p in params)
    print(f"config: {cfg}, B={B}, T={T}, parameters (with padded wte): {nparams}")

    logits, loss, grads = loss_and_grads(params, x, y, cfg)
    print(f"loss at init: {loss.item():.9g} (ln V = {math.log(cfg['V']):.6f})")

    builtin_ops_check(params, x, y, cfg, logits, loss)
    if not args.skip_fd:
        finite_difference_check(params, x, y, cfg, grads)

    losses, final, norms = adamw_train(params, x, y, cfg, **ADAMW)
    assert losses[0] == loss.item()
    print("AdamW losses: " + " ".join("%.6f" % l for l in losses))
    print("gradient norms: " + " ".join("%.6f" % n for n in norms))
    torch_adamw_check(params, x, y, cfg, final, **ADAMW)
    # the same 10 steps with global-norm clipping: some steps clipped, some not, every norm at least 1%
    # away from the threshold (so float32 rounding of the norm cannot flip a step's branch)
    clip_losses, clip_final, clip_norms = adamw_train(params, x, y, cfg, clip=CLIP, **ADAMW)
    clipped = sum(n > CLIP for n in clip_norms)
    assert 3 <= clipped <= 7 and min(abs(n / CLIP - 1) for n in clip_norms) > 0.01, f"norms {clip_norms}"
    print(f"gradient norms with clipping to {CLIP} ({clipped} steps clipped): " + " ".join("%.6f" % n for n in clip_norms))
    print(f"AdamW losses with clipping to {CLIP}: " + " ".join("%.6f" % l for l in clip_losses))
    torch_adamw_check(params, x, y, cfg, clip_final, clip=CLIP, **ADAMW)

    os.makedirs(args.out, exist_ok=True)
    write_checkpoint(os.path.join(args.out, "tiny_model.bin"), params, cfg)
    write_debug_state(os.path.join(args.out, "tiny_debug_state.bin"), x, y, logits, loss, grads)
    write_losses(os.path.join(args.out, "tiny_adamw_losses.txt"), losses, cfg)
    write_checkpoint(os.path.join(args.out, "tiny_model_step10.bin"), final, cfg)
    write_losses(os.path.join(args.out, "tiny_adamw_clip_losses.txt"), clip_losses, cfg, clip_norms, CLIP)
    write_checkpoint(os.path.join(args.out, "tiny_model_step10_clip.bin"), clip_final, cfg)
    for n in ("tiny_model.bin", "tiny_debug_state.bin", "tiny_adamw_losses.txt",
              "tiny_model_step10.bin", "tiny_adamw_clip_losses.txt", "tiny_model_step10_clip.bin"):
        print(f"wrote {os.path.join(args.out, n)} ({os.path.getsize(os.path.join(args.out, n))} bytes)")


if __name__ == "__main__":
    main()
