#!/usr/bin/env bash
# test_bench_pytorch.sh: dev/bench_pytorch.py, the same-GPU anchor (PyTorch's GPT-2 steps, tokens/s and MFU):
#   - it compiles (as python3 -m py_compile would) and its config and FLOP count import without PyTorch;
#   - its model configs are the trainer's (llm/model/tensors.h: d12 = GPT-2 124M, dN = 64 N channels and N heads,
#     the vocabulary padded to a multiple of 128), and its FLOPs per token are the PaLM paper's formula written
#     out here (appendix B: 6 N + 12 L T C, attention's products counted for the causal half, llm/train/mfu.h's
#     convention; test/test_mfu.sh checks the trainer's MFU against the same formula);
#   - where `import torch` works: a 3-step smoke run of a d2 model on the CPU, eager, which must end with the
#     line scripts/gpu_check.sh reads. Where it does not (CI has no PyTorch), one "skip ...: no PyTorch here" line.
# About 1 s without PyTorch.
set -uo pipefail
cd "$(dirname "$0")/.."
pass=0; fail=0; skip=0

export PYTHONDONTWRITEBYTECODE=1  # (no __pycache__ left in dev/)
# (what python3 -m py_compile checks, without writing the .pyc)
if python3 -c 'p = "dev/bench_pytorch.py"; compile(open(p).read(), p, "exec")'; then pass=$((pass+1)); echo "ok   dev/bench_pytorch.py compiles"
else fail=$((fail+1)); echo "FAIL dev/bench_pytorch.py does not compile"; fi

out=$(python3 - <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("bench_pytorch", "dev/bench_pytorch.py")
bp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bp)                      # (imports no torch)
print(("ok   " if "torch" not in sys.modules else "FAIL ") + "dev/bench_pytorch.py imports without importing torch")
def check(cond, what): print(("ok   " if cond else "FAIL ") + what)
# the trainer's descriptors (llm/model/tensors.h): GPT-2's sizes, and 64 channels per layer otherwise
got = {d: bp.model_config(d) for d in ("d12", "d24", "d2", "d6", "d2,C=32,NH=4,maxT=64,V=257")}
want = {"d12": (12, 768, 12, 1024, 50257), "d24": (24, 1024, 16, 1024, 50257), "d2": (2, 128, 2, 1024, 50257),
        "d6": (6, 384, 6, 1024, 50257), "d2,C=32,NH=4,maxT=64,V=257": (2, 32, 4, 64, 257)}
check(got == want, "model_config: the trainer's sizes for %s (%s)" % (", ".join(want), got if got != want else "all equal"))
check((bp.pad_vocab(50257), bp.pad_vocab(257), bp.pad_vocab(256)) == (50304, 384, 256), "pad_vocab: 50257 -> 50304, 257 -> 384, 256 -> 256")
# PaLM appendix B, written from the paper: 6 N + 12 L H Q T per token (H Q = C), N counted tensor by tensor
def palm(L, C, V, T):
    Vp = -(-V // 128) * 128
    block = (2 * C) + (3 * C * C + 3 * C) + (C * C + C) + (2 * C) + (4 * C * C + 4 * C) + (4 * C * C + C)
    N = L * block + Vp * C           # the blocks and the LM head (the tied token embedding)
    return 6 * N + 12 * L * T * C / 2  # causal: half of attention's QK^T and AV products are computed
bad = []
for L, C, V, T in [(12, 768, 50257, 1024), (2, 32, 257, 32), (24, 1024, 50257, 512), (2, 128, 50257, 16)]:
    a, b = bp.flops_per_token(L, C, bp.pad_vocab(V), T), palm(L, C, V, T)
    if a != b: bad.append("L=%d C=%d V=%d T=%d: %r vs the paper's %r" % (L, C, V, T, a, b))
check(not bad, "flops_per_token = PaLM's 6 N + 12 L T C / 2 for GPT-2 124M at T=1024 (%.4g) and 3 more configs%s"
      % (palm(12, 768, 50257, 1024), ": " + "; ".join(bad) if bad else ""))
PY
)
echo "$out"
pass=$((pass + $(grep -c '^ok ' <<< "$out"))); fail=$((fail + $(grep -c '^FAIL' <<< "$out")))

if python3 -c "import torch" 2> /dev/null; then
    log=$(mktemp)
    if python3 dev/bench_pytorch.py --model d2 -B 2 -T 16 --steps 3 --warmup 1 --device cpu --no-compile > "$log" 2>&1 &&
       grep -qE '^pytorch d2 B=2 T=16: tokens/s [0-9]+ \| MFU [0-9.]+% of [0-9.]+ TFLOP/s$' "$log"; then
        pass=$((pass+1)); echo "ok   smoke run (d2, B=2, T=16, 3 steps, CPU, eager): $(tail -1 "$log")"
    else
        fail=$((fail+1)); echo "FAIL smoke run (d2, B=2, T=16, 3 steps, CPU, eager):"; tail -20 "$log"
    fi
    rm -f "$log"
else
    skip=$((skip+1)); echo "skip bench_pytorch smoke run: no PyTorch here (python3 -c 'import torch' fails)"
fi
echo "bench_pytorch: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
