#!/usr/bin/env python3
"""bench_pytorch.py: the same-GPU anchor. GPT-2 training steps in PyTorch as a careful user runs them
(BF16 autocast, scaled_dot_product_attention with its flash backend, fused AdamW, torch.compile), on the
model this project trains (pre-LayerNorm blocks, GELU with the tanh approximation, biases, the LM head tied
to the token embedding, the vocabulary padded to a multiple of 128 as llm/model/tensors.h pads it), the
same B, T and FLOP count, random tokens. Prints each step's time, then the median tokens/s and the MFU.

    python3 dev/bench_pytorch.py --model d12 -B 64 -T 1024 --steps 20     (GPT-2 124M on the GPU)
    python3 dev/bench_pytorch.py --model d2 -B 2 -T 16 --steps 3 --device cpu --no-compile  (a smoke run)

The last line, for scripts (scripts/gpu_check.sh):
    pytorch d12 B=64 T=1024: tokens/s 123456 | MFU 45.6% of 989.0 TFLOP/s
and when the GPU's memory does not hold B (exit status 3; try a smaller -B):
    pytorch d12 B=64 T=1024: out of memory

FLOPs per token: flops_per_token() below, the formula of llm/train/mfu.h (PaLM appendix B, 6 N + 6 L T C:
N = the blocks' L (12 C^2 + 13 C) parameters plus the LM head's Vp C; attention's products counted for the
causal half, 6 L T C of PaLM's 12 L T C). test/test_bench_pytorch.sh checks it against the paper's formula
written out there, as test/test_mfu.sh checks the trainer's. The peak: --peak-tflops, or a dense GEMM of the
training dtype measured here (torch.matmul, 8192^3 on a GPU, 512^3 on the CPU), best of 5.

Not part of `make test` (CI has no PyTorch). This file imports torch only inside main(), so that its model
config and FLOP count can be imported and checked without it.
"""
import argparse
import math
import statistics
import sys
import time


def pad_vocab(V):
    """V rounded up to a multiple of 128 (llm/model/tensors.h pad_vocab): 50257 -> 50304"""
    return (V + 127) // 128 * 128


def model_config(desc):
    """(L, C, NH, maxT, V) of a descriptor "dN[,C=..][,NH=..][,maxT=..][,V=..]", as llm/model/tensors.h reads it:
    GPT-2's own sizes for d12, d24, d36, d48; otherwise 64 channels per layer and heads of 64."""
    parts = desc.split(",")
    if not parts[0].startswith("d") or not parts[0][1:].isdigit() or int(parts[0][1:]) <= 0:
        raise ValueError("--model: expected a descriptor like d12 or d2,C=32,NH=4,V=257, found %r" % desc)
    L = int(parts[0][1:])
    C, NH = {12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}.get(L, (64 * L, L))
    cfg = {"C": C, "NH": NH, "maxT": 1024, "V": 50257}
    for p in parts[1:]:
        key, _, val = p.partition("=")
        if key not in cfg or not val.isdigit() or int(val) <= 0:
            raise ValueError("--model: in %r expected C=, NH=, maxT= or V= with a positive integer, found %r" % (desc, p))
        cfg[key] = int(val)
    if cfg["C"] % cfg["NH"] != 0:
        raise ValueError("--model: %r: expected C divisible by NH, found C=%d NH=%d" % (desc, cfg["C"], cfg["NH"]))
    return L, cfg["C"], cfg["NH"], cfg["maxT"], cfg["V"]


def flops_per_token(L, C, Vp, T):
    """model FLOPs of one trained token: llm/train/mfu.h's model_flops_per_token, the same convention"""
    n_matmul = L * (12 * C * C + 13 * C) + Vp * C  # the blocks' parameters + the LM head (the tied wte)
    return 6 * n_matmul + 6 * L * T * C


def build_model(torch, L, C, NH, maxT, V):
    nn, F = torch.nn, torch.nn.functional
    Vp = pad_vocab(V)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            Bx, Tx, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(Bx, Tx, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(Bx, Tx, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)  # the padded rows are never looked up; their logits are cut off
            self.wpe = nn.Embedding(maxT, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            # GPT-2's init (as llm/model/tensors.h): N(0, 0.02), the residual projections 0.02 / sqrt(2 L)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # (B, T, Vp): the tied LM head over the padded vocabulary
            # the loss over the V real tokens (the trainer's classifier ignores the padded columns); autocast
            # computes it in FP32
            return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))

    return GPT()


def measure_peak_tflops(torch, device, dtype):
    """the best of 5 dense N^3 GEMMs of dtype, in TFLOP/s"""
    N = 8192 if device == "cuda" else 512
    a = torch.randn(N, N, device=device, dtype=dtype)
    b = torch.randn(N, N, device=device, dtype=dtype)
    best = math.inf
    for r in range(6):  # r = 0 warms up
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(4 if device == "cuda" else 1):
            a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / (4 if device == "cuda" else 1)
        if r > 0:
            best = min(best, dt)
    return 2.0 * N ** 3 / best / 1e12


def is_oom(torch, e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="d12", help="dN[,C=..,NH=..,maxT=..,V=..] as train_gpt's --model (default d12, GPT-2 124M)")
    ap.add_argument("-B", type=int, default=64, help="batch size (default 64)")
    ap.add_argument("-T", type=int, default=1024, help="sequence length (default 1024)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first, torch.compile's included (default 3)")
    ap.add_argument("--no-compile", action="store_true", help="run eagerly, without torch.compile")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the device's peak; 0 = measure a dense GEMM (default 0)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default cuda when available)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"], help="bf16: autocast; fp32: FP32 throughout, no TF32")
    args = ap.parse_args()
    L, C, NH, maxT, V = model_config(args.model)
    B, T = args.B, args.T
    if B <= 0 or not 0 < T <= maxT or args.steps <= 0 or args.warmup < 0 or args.peak_tflops < 0:
        sys.exit("error: expected -B > 0, 0 < -T <= maxT = %d, --steps > 0, --warmup >= 0, --peak-tflops >= 0; found "
                 "B=%d T=%d steps=%d warmup=%d peak %g" % (maxT, B, T, args.steps, args.warmup, args.peak_tflops))

    try:
        import torch
    except ImportError as e:
        sys.exit("error: bench_pytorch.py needs PyTorch: import torch failed: %s" % e)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tag = "pytorch %s B=%d T=%d" % (args.model, B, T)
    torch.manual_seed(1337)
    # FP32 as this project's FP32 build computes it (CUBLAS_COMPUTE_32F): no TF32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = build_model(torch, L, C, NH, maxT, V).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    # AdamW as the trainer's (llm/ops/adamw.cuh): betas 0.9, 0.95, eps 1e-8, weight decay on the 2-D tensors; fused on a GPU
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")
    fwd = model if args.no_compile else torch.compile(model)
    sdpa = None
    if device == "cuda" and args.dtype == "bf16":  # SDPA's flash backend, by name where torch can (it has no FP32 kernel)
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            sdpa = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)
        except ImportError:
            sdpa = lambda: torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)
    peak, peak_src = args.peak_tflops, "--peak-tflops"
    if peak == 0:
        peak, peak_src = measure_peak_tflops(torch, device, dtype), "measured: torch.matmul %s" % args.dtype
    fpt = flops_per_token(L, C, pad_vocab(V), T)
    print("%s: L=%d C=%d NH=%d V=%d (Vp %d), %.2fM parameters, %s %s, %s | %.4g MFLOP per token (6 N + 6 L T C) | "
          "peak %.4g TFLOP/s (%s)" % (tag, L, C, NH, V, pad_vocab(V), n_params / 1e6, device, args.dtype,
                                     "eager" if args.no_compile else "torch.compile", fpt / 1e6, peak, peak_src))

    gen = torch.Generator(device="cpu").manual_seed(42)

    def step():
        x = torch.randint(0, V, (B, T), generator=gen).to(device, non_blocking=True)
        y = torch.randint(0, V, (B, T), generator=gen).to(device, non_blocking=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            if sdpa is not None:
                with sdpa():
                    loss = fwd(x, y)
            else:
                loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times = []
    try:
        for s in range(args.warmup + args.steps):
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = step()
            lv = loss.item()  # (waits for the step)
            ms = (time.perf_counter() - t0) * 1e3
            timed = s >= args.warmup
            if timed:
                times.append(ms)
            print("step %d%s: %.1f ms | loss %.4f" % (s + 1, "" if timed else " (warm-up)", ms, lv))
    except Exception as e:  # (torch.compile wraps what it meets in its own exceptions)
        if is_oom(torch, e):
            print("%s: out of memory" % tag)
            sys.exit(3)
        raise
    tok_s = B * T / (statistics.median(times) / 1e3)
    mfu = fpt * tok_s / (peak * 1e12)
    print("%s: tokens/s %.0f | MFU %.1f%% of %.1f TFLOP/s" % (tag, tok_s, 100 * mfu, peak))


if __name__ == "__main__":
    main()
