#!/usr/bin/env python3
# kernel_report.py: what every CUDA kernel of train_gpt compiles to, on every target the build embeds, and
# whether each launch the code can choose fits it. No GPU needed: it reads the CUDA trainer's machine code.
#
#   python3 scripts/kernel_report.py [--binary train_gpt] [--cuobjdump PATH]            print the report
#   python3 scripts/kernel_report.py --write docs/kernels.md                             regenerate the docs page
#   python3 scripts/kernel_report.py --check docs/kernels.md                             fail when it is stale
#
# From `cuobjdump --dump-resource-usage` of each target's machine code (sm_80, sm_90, sm_100, sm_120: what the
# Makefile's NVCC_SASS embeds) it takes each kernel's registers, static shared memory and stack frame (spills
# and local arrays live there), and from `cuobjdump -sass` of sm_80 and sm_90 each kernel's instruction mix.
# Then, for each kernel (every template instance), each launch configuration its launcher can choose
# (LAUNCH_RULES below: threads per block and dynamic shared memory, taken from the launcher's code for the
# GPT-2 shapes d12 to d48 and the recipes' B and T) is checked against the target's limits (LIMITS below),
# and the occupancy (blocks per SM) printed. It fails (exit 1, one line each) when:
#   - a launch does not fit (threads, registers or shared memory per block, the 48 KiB default without opt-in);
#   - a kernel has no launch rule here, or a rule names no kernel (so the table follows the code);
#   - a kernel has a stack frame or local loads/stores (LDL/STL) and LOCAL_MEMORY_WHY has no reason for it;
#   - a 16-bit fused attention kernel (attention_*_mma_kernel) or ring attention block-pair kernel
#     (attention_pair_*_mma_kernel) has no tensor-core MMA on sm_80 or sm_90, or loads its shared-memory tiles with
#     generic loads (LD, not LDS);
#   - with --check, the docs page differs from what this run writes (same CUDA release only: another
#     release's ptxas allocates registers differently, and then the page is only printed).
#
# The launch rules are a table here, derived from the launchers' code (each rule names its launcher); the block
# sizes the launchers take from #define constants are read from the headers, so a changed constant is checked.
# Occupancy follows the CUDA toolkit's own calculator (cuda_occupancy.h: registers allocated per warp in units
# of 256, warps rounded up to the 4 sub-partitions for the per-block check, shared memory in units of 128 bytes
# plus the 1 KiB the driver reserves per block from compute capability 8.0 on).
import argparse
import math
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- the targets' limits ---
# CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications per Compute Capability"
# (8.0: A100; 9.0: H100/H200; 10.0: B200/GB200; 12.0: RTX 50 / RTX PRO 6000 Blackwell), and the toolkit's
# cuda_occupancy.h (max blocks per SM, allocation granularities, 4 sub-partitions). Shared memory in bytes:
# smem_sm = per SM, optin = per block with cudaFuncAttributeMaxDynamicSharedMemorySize (the opt-in).
KIB = 1024
LIMITS = {
    "sm_80":  dict(regs_sm=65536, regs_block=65536, threads_block=1024, threads_sm=2048, blocks_sm=32,
                   smem_sm=164 * KIB, optin=163 * KIB),
    "sm_90":  dict(regs_sm=65536, regs_block=65536, threads_block=1024, threads_sm=2048, blocks_sm=32,
                   smem_sm=228 * KIB, optin=227 * KIB),
    "sm_100": dict(regs_sm=65536, regs_block=65536, threads_block=1024, threads_sm=2048, blocks_sm=32,
                   smem_sm=228 * KIB, optin=227 * KIB),
    "sm_120": dict(regs_sm=65536, regs_block=65536, threads_block=1024, threads_sm=1536, blocks_sm=24,
                   smem_sm=100 * KIB, optin=99 * KIB),
}
DEFAULT_SMEM = 48 * KIB   # per block without the opt-in (every compute capability)
RESERVED_SMEM = 1 * KIB   # per block, reserved by the driver (cudaDevAttrReservedSharedMemoryPerBlock, 8.0+)
SASS_ARCHS = ("sm_80", "sm_90")   # instruction mix and the tensor-core check

# --- the shapes the launchers are asked for: GPT-2 d12..d48 (llm/model/tensors.h), the recipes' B and T
# (docs/recipes.md: B = 64, 32 or 16 by the data-parallel size, T = 1024), tensor parallelism up to 8 ---
GPT2 = [("d12", 768, 12), ("d24", 1024, 16), ("d36", 1280, 20), ("d48", 1600, 25)]
BATCHES, T, V = (64, 32, 16), 1024, 50257
TP = (1, 2, 4, 8)
X128 = 8  # elements of a 16-byte x128 in BF16 (llm/core/cuda_utils.cuh); the default build is BF16

def padded_vocab(v):  # llm/model/tensors.h: V rounded up to a multiple of 128
    return (v + 127) // 128 * 128

def header_define(path, name):
    """the integer value of `#define NAME value` in one of the project's headers"""
    with open(os.path.join(ROOT, path)) as f:
        m = re.search(r"^#define\s+%s\s+(\d+)\b" % re.escape(name), f.read(), re.M)
    if not m:
        sys.exit("error: kernel_report: #define %s not found in %s (the launch rules read it)" % (name, path))
    return int(m.group(1))

def header_const(path, pattern):
    """the integer a regex's group 1 finds in a header (a launcher's `const int block = 512;`)"""
    with open(os.path.join(ROOT, path)) as f:
        m = re.search(pattern, f.read())
    if not m:
        sys.exit("error: kernel_report: /%s/ not found in %s (the launch rules read it)" % (pattern, path))
    return int(m.group(1))

def rounded_block(n):  # the launchers' "up to 1024, whole warps" rule
    return 1024 if n >= 1024 else (n + 31) // 32 * 32

def attention_smem(hd, kind):
    """llm/ops/attention_kernels.cuh, AttentionTile<HD> of the 16-bit build: BR = 64 rows, (HD + 8) floatX row
    strides; the launcher (attention_launch) opts in to this much dynamic shared memory"""
    br, x, r = 64, 64 * (hd + 8) * 2, 64 * 4
    return {"forward": 3 * x + 128, "dkdv": 4 * x + 2 * r + 128, "dq": 4 * x + 128}[kind]

def launch_rules():
    """kernel name (demangled, template arguments as `<A>` captured) -> (launcher, function of the template
    argument giving [(threads, dynamic smem, opt-in, what chose it)], used by GPT-2 d12..d48 for this argument)"""
    gelu = header_define("llm/ops/gelu.cuh", "GELU_BLOCK_SIZE")
    resid = header_define("llm/ops/residual.cuh", "RESIDUAL_BLOCK_SIZE")
    enc = header_define("llm/ops/encoder.cuh", "ENCODER_BLOCK_SIZE")
    ln_fwd = header_define("llm/ops/layernorm.cuh", "LAYERNORM_FWD_BLOCK")
    dbias = 32 * header_define("llm/ops/matmul_kernels.cuh", "MATMUL_DBIAS_WARPS")
    moe = header_define("llm/ops/moe_router.cuh", "MOE_BLOCK")
    gnorm = header_define("llm/core/context.h", "GLOBAL_NORM_BLOCK")
    adamw = header_const("llm/ops/adamw.cuh", r"const int block = (\d+);")
    epi = header_const("llm/ops/matmul_cublaslt.cuh", r"const int threads = (\d+);")
    Vp = padded_vocab(V)
    hs_gpt2 = {c // nh for _, c, nh in GPT2}
    hd_gpt2 = {16 if h <= 16 else 32 if h <= 32 else 64 if h <= 64 else 128 for h in hs_gpt2}
    # the LayerNorm forward's K: the smallest listed chunks-per-lane covering a row (layernorm_forward_chunks_per_lane)
    ln_k = {min(k for k in (1, 2, 3, 4, 6, 8, 12, 16, 32) if k >= -(-(c // X128) // 32)) for _, c, _ in GPT2}
    fixed = lambda n, why="": (lambda a: [(n, 0, False, why)])
    always, never = (lambda a: True), (lambda a: False)
    R = {}
    def rule(name, launcher, cfgs, used=always):
        R[name] = (launcher, cfgs, used)
    # llm/ops/attention.cuh: attention_launch(kernel, F::WARPS = BR/16 = 4 warps, F::FORWARD / DKDV / DQ, ...)
    for k, kind in (("attention_forward_mma_kernel", "forward"), ("attention_backward_dkdv_mma_kernel", "dkdv"),
                    ("attention_backward_dq_mma_kernel", "dq")):
        rule(k + "<A>", "llm/ops/attention.cuh attention_forward/backward",
             lambda a, kind=kind: [(32 * 4, attention_smem(int(a), kind), True, "")], lambda a: int(a) in hd_gpt2)
    rule("attention_backward_dot_kernel", "llm/ops/attention.cuh attention_backward", fixed(256))
    rule("attention_decode_kernel", "llm/ops/attention.cuh attention_decode (sampling)", fixed(128))
    # llm/ops/attention_ring.cuh: ring_mma_launch(kernel, F::FORWARD / DKDV / DQ, ...), 4 warps, the fused kernels'
    # tiles and shared memory (context parallelism; the FP32 build's scalar pair kernels are not in this BF16 binary)
    for k, kind in (("attention_pair_forward_mma_kernel", "forward"), ("attention_pair_backward_dkdv_mma_kernel", "dkdv"),
                    ("attention_pair_backward_dq_mma_kernel", "dq")):
        rule(k + "<A>", "llm/ops/attention_ring.cuh ring_mma_launch (--cp)",
             lambda a, kind=kind: [(32 * 4, attention_smem(int(a), kind), True, "")], lambda a: int(a) in hd_gpt2)
    for k in ("attention_pair_init_kernel", "attention_pair_finalise_kernel", "attention_pair_dot_kernel"):
        rule(k, "llm/ops/attention_ring.cuh (--cp)", fixed(256))
    rule("adamw_kernel", "llm/ops/adamw.cuh adamw_update", fixed(adamw))
    rule("encoder_forward_kernel", "llm/ops/encoder.cuh", fixed(enc))
    rule("encoder_backward_wpe_kernel", "llm/ops/encoder.cuh", fixed(enc))
    rule("encoder_backward_wte_kernel<A>", "llm/ops/encoder.cuh (ENCODER_WTE_WARPS_LONG/SHORT warps)",
         lambda a: [(32 * int(a), 0, False, "")])
    # llm/ops/fused_classifier.cuh: one thread per 16-byte chunk of the padded vocabulary row, up to 1024
    rule("fused_classifier_kernel", "llm/ops/fused_classifier.cuh",
         lambda a: [(rounded_block(Vp // X128), 0, False, "Vp=%d" % Vp)])
    rule("loss_accumulate_kernel", "llm/ops/fused_classifier.cuh loss_accumulate",
         lambda a: sorted({(rounded_block(b * T), 0, False, "B*T=%d" % (b * T)) for b in BATCHES}))
    # llm/ops/vocab_parallel_classifier.cuh: the same over Vl = Vp / tp columns
    for k in ("vp_classifier_stats_kernel", "vp_classifier_finish_kernel"):
        rule(k, "llm/ops/vocab_parallel_classifier.cuh (--tp)",
             lambda a: sorted({(rounded_block(Vp // t // X128), 0, False, "tp=%d" % t) for t in TP if t > 1}))
    rule("gelu_forward_kernel", "llm/ops/gelu.cuh", fixed(gelu))
    rule("gelu_backward_inplace_kernel", "llm/ops/gelu.cuh", fixed(gelu))
    rule("residual_forward_kernel", "llm/ops/residual.cuh", fixed(resid))
    # llm/ops/global_norm.cuh: the finish block covers the partials' grid, up to 1024 (the largest it can be)
    rule("global_norm_partials_kernel", "llm/ops/global_norm.cuh", fixed(gnorm))
    rule("global_norm_finish_kernel", "llm/ops/global_norm.cuh", fixed(1024, "grid >= 1024"))
    rule("global_norm_add_scaled_kernel", "llm/ops/global_norm.cuh (--ep: the experts' squares)", fixed(1))
    # llm/ops/layernorm.cuh: LAYERNORM_FWD_BLOCK threads, K chosen by C; the backward: a thread per 16-byte chunk
    rule("layernorm_forward_kernel<A>", "llm/ops/layernorm.cuh layernorm_forward", fixed(ln_fwd), lambda a: int(a) in ln_k)
    rule("fused_residual_layernorm_forward_kernel<A>", "llm/ops/layernorm.cuh fused_residual_layernorm_forward",
         fixed(ln_fwd), lambda a: int(a) in ln_k)
    rule("layernorm_backward_kernel", "llm/ops/layernorm.cuh layernorm_backward",
         lambda a: sorted({((c // X128 + 31) // 32 * 32, 0, False, n) for n, c, _ in GPT2} |
                          {(1024, 0, False, "bound: the largest C accepted")}))
    rule("layernorm_backward_reduce_kernel", "llm/ops/layernorm.cuh layernorm_backward", fixed(1024))
    rule("matmul_dbias_partial_kernel<A>", "llm/ops/matmul_kernels.cuh matmul_dbias", fixed(dbias))
    rule("matmul_dbias_finish_kernel", "llm/ops/matmul_kernels.cuh matmul_dbias", fixed(256))
    rule("matmul_gelu_forward_kernel<A>", "llm/ops/matmul_cublaslt.cuh (the GELU epilogue)", fixed(epi))
    rule("matmul_dgelu_inplace_kernel<A>", "llm/ops/matmul_cublaslt.cuh (the dGELU epilogue)", fixed(epi))
    # llm/ops/moe_router.cuh, llm/ops/moe_permute.cuh: MOE_BLOCK threads (the aux loss: one warp)
    for k in ("moe_permute_kernel", "moe_permute_backward_kernel", "moe_unpermute_kernel", "moe_unpermute_backward_kernel",
              "moe_router_logits_kernel", "moe_router_dx_kernel", "moe_router_dw_kernel", "moe_route_topk_kernel",
              "moe_route_count_kernel", "moe_route_capacity_kernel", "moe_route_rows_kernel", "moe_route_sums_kernel",
              "moe_route_backward_kernel"):
        rule(k, "llm/ops/moe_*.cuh (--experts)", fixed(moe))
    rule("moe_route_aux_kernel", "llm/ops/moe_router.cuh (--experts)", fixed(32))
    # llm/sharded/moe_sequence.h: the whole micro-batch's routing under cp or sp (the layout of the rank's part: one warp)
    for k in ("moe_seq_scatter_kernel", "moe_seq_token_kernel"):
        rule(k, "llm/sharded/moe_sequence.h (--experts with --cp or sp)", fixed(moe))
    rule("moe_seq_layout_kernel", "llm/sharded/moe_sequence.h (--experts with --cp or sp)", fixed(32))
    for k in ("rows_copy_kernel", "rows_store_f32_kernel", "rows_zero_f32_kernel"):
        rule(k, "llm/ops/rows.cuh (--cp)", fixed(256))
    # llm/precision/: FP8 (--fp8); dim3(32, 8) blocks are 256 threads
    for k in ("fp8_amax_kernel<A>", "fp8_quantize_kernel<A>", "fp8_quantize_transpose_kernel<A>",
              "fp8_quantize_1x128_kernel<A>", "fp8_quantize_transpose_1x128_kernel<A>", "fp8_quantize_128x128_kernel<A>",
              "fp8_quantize_transpose_128x128_kernel<A>", "fp8_quantize_mx_kernel<A>", "fp8_quantize_transpose_mx_kernel<A>"):
        rule(k, "llm/precision/fp8*.cuh (--fp8)", fixed(256))
    for k in ("fp8_lt_scale_kernel", "fp8_dequant_kernel", "fp8_epilogue_kernel"):
        rule(k, "llm/precision/*.cuh (--fp8)", fixed(256))
    rule("fp8_current_scale_kernel", "llm/precision/fp8.cuh (--fp8)", fixed(32))
    rule("fp8_fold_kernel", "llm/precision/fp8_linear.h (--fp8)", fixed(1))
    rule("fp8_current_kernel", "llm/precision/fp8_linear.h (--fp8)", fixed(1))
    return R

# Kernels allowed a stack frame or local memory, and why (the kernel's source says the same beside it). A kernel
# with local memory that is not listed here fails the check.
LOCAL_MEMORY_WHY = {
    "layernorm_forward_kernel<32>":
        "K = 32 holds 32 x 16 bytes of a row per lane and spills past 255 registers (a stack frame of 80 to 96 bytes "
        "per thread, which holds one row's lane, written and read once: L1 traffic of under a tenth of the row's); "
        "launched only for C > 4096 (BF16) or > 2048 (FP32), past GPT-2's 1600 (llm/ops/layernorm.cuh)",
    "fused_residual_layernorm_forward_kernel<32>":
        "as layernorm_forward_kernel<32> (llm/ops/layernorm.cuh)",
    "fused_residual_layernorm_forward_kernel<3>":
        "sm_80 only: ptxas keeps one 4-byte value in the stack, one STL and one LDL per thread per row (256 bytes "
        "of L1 traffic per row against 6 KiB of global reads and writes at C = 768) (llm/ops/layernorm.cuh)",
    "attention_forward_mma_kernel<A>":
        "some head sizes on some targets: an 8-byte stack slot, one value stored before the loop over tiles and "
        "loaded after it, once per thread per kernel (llm/ops/attention_mma_kernels.cuh)",
    "attention_backward_dq_mma_kernel<A>":
        "as attention_forward_mma_kernel: one 8-byte slot, one STL and one LDL per thread per kernel "
        "(llm/ops/attention_mma_kernels.cuh)",
    "attention_pair_backward_dkdv_mma_kernel<128>":
        "the ring's block-pair dk/dv at HD 128: the dK and dV accumulators (128 FP32 registers) and the three floatX "
        "terms of P^T and dS^T at the 255-register limit, spills on every target; head sizes 65..128 only, GPT-2's is 64 "
        "(llm/ops/attention_ring_mma_kernels.cuh)",
}

# ---------------------------------------------------------------------------------------------------------
# reading the machine code

def run(cmd):
    # cuobjdump -sass runs nvdisasm, which PyPI's nvidia-cuda-nvdisasm puts beside cuobjdump: that directory first
    env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(cmd[0])) + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("error: kernel_report: %s failed (exit %d): %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[:300]))
    return p.stdout

def demangle(names):
    out = run_input(["c++filt"], "\n".join(names)).split("\n")
    return {m: d.split("(")[0].replace("void ", "", 1).replace("__nv_bfloat16", "bf16").strip()
            for m, d in zip(names, out)}

def run_input(cmd, text):
    p = subprocess.run(cmd, input=text, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("error: kernel_report: %s failed (exit %d)" % (" ".join(cmd), p.returncode))
    return p.stdout

def resource_usage(cuobjdump, binary):
    """{arch: {mangled: dict(regs, shared, stack, local)}}"""
    res, arch, fn = {}, None, None
    for line in run([cuobjdump, "--dump-resource-usage", binary]).splitlines():
        m = re.match(r"arch = (sm_\d+)", line)
        if m: arch = m.group(1); continue
        m = re.match(r"\s*Function (\S+):", line)
        if m: fn = m.group(1); continue
        m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", line)
        if m and fn:
            regs, stack, shared, local = map(int, m.groups())
            # the static shared memory ptxas allocates: from sm_90 on the kernel's .nv.shared section starts
            # with the 1 KiB reserved region (.nv.reservedSmem, the same 1 KiB the driver reserves per block
            # and RESERVED_SMEM counts), so a kernel using shared memory or barriers reports 1024 more
            if arch != "sm_80" and shared >= RESERVED_SMEM: shared -= RESERVED_SMEM
            res.setdefault(arch, {})[fn] = dict(regs=regs, shared=shared, stack=stack, local=local)
            fn = None
    return res

MIX = (("MMA", lambda op: re.match(r"(U?TC)?[HIQOBD]G?MMA", op) is not None),
       ("FFMA", lambda op: op.startswith("FFMA")),
       ("LDG", lambda op: op == "LDG"),
       ("LDS", lambda op: op in ("LDS", "LDSM")),
       ("LD", lambda op: op == "LD"),
       ("async", lambda op: op in ("LDGSTS", "UTMALDG", "UBLKCP")),
       ("LDL/STL", lambda op: op in ("LDL", "STL")))

MIX_COLS = [c for c, _ in MIX]

def instruction_mix(cuobjdump, binary, arch):
    """{mangled: {column: count}} from the SASS of one target"""
    mix, fn = {}, None
    for line in run([cuobjdump, "-sass", "-arch", arch, binary]).splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m: fn = m.group(1); mix[fn] = {c: 0 for c, _ in MIX}; continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m and fn:
            for col, match in MIX:
                if match(m.group(1)): mix[fn][col] += 1
    return mix

# ---------------------------------------------------------------------------------------------------------
# occupancy (cuda_occupancy.h's cudaOccMaxActiveBlocksPerMultiprocessor, default carveout: all of smem_sm)

def occupancy(lim, regs, shared, threads, dyn):
    """blocks per SM, or 0 and the reason when the launch does not fit"""
    warps = -(-threads // 32)
    regs_warp = -(-(max(regs, 1) * 32) // 256) * 256
    if threads > lim["threads_block"]:
        return 0, "%d threads > %d per block" % (threads, lim["threads_block"])
    if regs_warp * (-(-warps // 4) * 4) > lim["regs_block"] or regs > 255:
        return 0, "%d registers x %d threads > %d per block" % (regs, threads, lim["regs_block"])
    smem = -(-(shared + RESERVED_SMEM + dyn) // 128) * 128
    if shared + dyn > lim["optin"]:
        return 0, "%d bytes of shared memory > %d per block (the opt-in)" % (shared + dyn, lim["optin"])
    by_threads = lim["threads_sm"] // (warps * 32)
    by_regs = (lim["regs_sm"] // 4 // regs_warp) * 4 // warps
    by_smem = lim["smem_sm"] // smem
    return min(lim["blocks_sm"], by_threads, by_regs, by_smem), ""

def self_test():
    """the calculator against cases worked by hand from cuda_occupancy.h's rules"""
    a = LIMITS["sm_90"]
    cases = [((32, 0, 256, 0), 8),          # threads: 2048 / 256
             ((64, 0, 256, 0), 4),          # registers: 64*32 = 2048 per warp, 32 warps per SM, 8 per block
             ((255, 0, 256, 0), 1),         # 255 -> 8192 per warp (granularity 256), 8 warps = 65536
             ((32, 0, 32, 0), 32),          # the 32-blocks cap
             ((32, 0, 128, 100 * KIB), 2),  # shared: 228 KiB / (100 KiB + 1 KiB)
             ((32, 0, 2048, 0), 0),         # over 1024 threads
             ((128, 0, 1024, 0), 0),        # 128 x 1024 = 131072 registers
             ((32, 0, 128, 228 * KIB), 0)]  # over the opt-in
    for (regs, shared, threads, dyn), want in cases:
        got = occupancy(a, regs, shared, threads, dyn)[0]
        if got != want:
            sys.exit("error: kernel_report: occupancy(%d regs, %d threads, %d B) = %d, expected %d"
                     % (regs, threads, dyn, got, want))

# ---------------------------------------------------------------------------------------------------------

def match_rule(rules, name):
    if name in rules: return name, None
    m = re.match(r"(.*)<(.+)>$", name)
    if m and m.group(1) + "<A>" in rules: return m.group(1) + "<A>", m.group(2)
    return None, None

def find_cuobjdump(given):
    if given: return given
    if os.environ.get("CUOBJDUMP"): return os.environ["CUOBJDUMP"]
    # PyPI's nvidia-cuda-cuobjdump (scripts/deps.sh installs it into .venv): nvidia/cu13/bin/cuobjdump
    for py in (os.path.join(ROOT, ".venv", "bin", "python3"), sys.executable):
        if not os.path.exists(py): continue
        p = subprocess.run([py, "-c", "import nvidia.cu13 as m; print('\\n'.join(m.__path__))"], capture_output=True, text=True)
        for d in p.stdout.split():
            if os.path.exists(os.path.join(d, "bin", "cuobjdump")): return os.path.join(d, "bin", "cuobjdump")
    for c in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if c and os.path.exists(c): return c
    sys.exit("error: kernel_report: cuobjdump not found (expected PyPI's nvidia-cuda-cuobjdump in .venv: make deps, "
             "or CUOBJDUMP=path)")

def cuda_release(cuobjdump):
    try:
        v = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    m = re.search(r"release (\d+\.\d+)", v)
    return m.group(1) if m else "unknown"

def main():
    ap = argparse.ArgumentParser(description="kernels' resources, launch fit, occupancy and instruction mix")
    ap.add_argument("--binary", default=os.path.join(ROOT, "train_gpt"))
    ap.add_argument("--fp16-attention", default=os.path.join(ROOT, "build", "attention_fp16.fatbin"),
                    help="the fused attention kernels built in FP16 for sm_80 and sm_90 (make build/attention_fp16.fatbin)")
    ap.add_argument("--cuobjdump")
    ap.add_argument("--write", metavar="MD")
    ap.add_argument("--check", metavar="MD")
    args = ap.parse_args()
    self_test()
    if not os.path.exists(args.binary):
        sys.exit("error: kernel_report: --binary %s not found (make train_gpt)" % args.binary)
    cuobjdump = find_cuobjdump(args.cuobjdump)
    usage = resource_usage(cuobjdump, args.binary)
    missing = [a for a in SASS_ARCHS if a not in usage]
    if missing:
        sys.exit("error: kernel_report: %s has no machine code for %s (found %s); the default build embeds sm_80 and "
                 "sm_90, and sm_100 and sm_120 where nvcc knows them" % (args.binary, " ".join(missing), " ".join(sorted(usage)) or "none"))
    for a in [a for a in LIMITS if a not in usage]:  # an older nvcc (the Makefile's NVCC_SASS takes what it knows)
        print("note: kernel_report: %s has no %s machine code (this nvcc does not know it): not checked" % (args.binary, a),
              file=sys.stderr)
        del LIMITS[a]
    mixes = {a: instruction_mix(cuobjdump, args.binary, a) for a in SASS_ARCHS}
    mangled = sorted({f for a in usage for f in usage[a]} | {f for a in mixes for f in mixes[a]})
    names = demangle(mangled)
    rules = launch_rules()
    errors, used_rules, rows = [], set(), {}
    for f in mangled:
        n = names[f]
        key, targ = match_rule(rules, n)
        if key is None:
            errors.append("%s: no launch rule in scripts/kernel_report.py (add its launcher's block size and shared memory)" % n)
            continue
        used_rules.add(key)
        launcher, cfgs, used = rules[key]
        configs = cfgs(targ)
        row = rows.setdefault(n, dict(launcher=launcher, configs=configs, gpt2=used(targ), per={}, mix={}))
        for a in LIMITS:
            u = usage[a].get(f)
            if u is None:
                errors.append("%s: not in %s's machine code" % (n, a)); continue
            occ, occ_gpt2 = [], []
            for threads, dyn, optin, why in configs:
                b, reason = occupancy(LIMITS[a], u["regs"], u["shared"], threads, dyn)
                if b == 0:
                    errors.append("%s on %s (%d threads, %d B dynamic%s): does not fit: %s"
                                  % (n, a, threads, dyn, ", " + why if why else "", reason))
                if not optin and u["shared"] + dyn > DEFAULT_SMEM:
                    errors.append("%s on %s: %d bytes of shared memory without the opt-in (over 48 KiB)"
                                  % (n, a, u["shared"] + dyn))
                occ.append(b)
                if not why.startswith("bound:"): occ_gpt2.append(b)
            row["per"][a] = dict(u, blocks=min(occ) if occ else 0, blocks_gpt2=min(occ_gpt2) if occ_gpt2 else 0)
        for a in SASS_ARCHS:
            row["mix"][a] = mixes[a].get(f)
        local = any(row["per"].get(a, {}).get("stack", 0) or row["per"].get(a, {}).get("local", 0) for a in LIMITS) or \
                any((row["mix"][a] or {}).get("LDL/STL", 0) for a in SASS_ARCHS)
        row["local"] = local
        if local and n not in LOCAL_MEMORY_WHY and key not in LOCAL_MEMORY_WHY:
            errors.append("%s: uses local memory (stack %s) and LOCAL_MEMORY_WHY has no reason for it"
                          % (n, ", ".join("%s %d B" % (a, row["per"][a]["stack"]) for a in LIMITS if a in row["per"])))
        if re.match(r"attention_(pair_)?(forward|backward_dkdv|backward_dq)_mma_kernel<", n):
            for a in SASS_ARCHS:
                if not row["mix"][a] or row["mix"][a]["MMA"] == 0:
                    errors.append("%s on %s: no tensor-core MMA instruction" % (n, a))
                elif row["mix"][a]["LD"] > 0:
                    errors.append("%s on %s: %d generic loads (LD): the shared-memory tiles are not known to be shared "
                                  "(see llm/ops/attention_mma_kernels.cuh)" % (n, a, row["mix"][a]["LD"]))
    for key in rules:
        if key not in used_rules:
            errors.append("launch rule %s (%s) names no kernel of %s" % (key, rules[key][0], args.binary))
    for k in LOCAL_MEMORY_WHY:
        if not any(n == k or match_rule({k: 1}, n)[0] == k for n in rows if rows[n]["local"]):
            errors.append("LOCAL_MEMORY_WHY lists %s, which uses no local memory: remove it" % k)
    # the FP16 build's fused attention and ring block pairs (test/attention_sass.cu): tensor cores there too, no local
    # memory
    if not os.path.exists(args.fp16_attention):
        sys.exit("error: kernel_report: --fp16-attention %s not found (make build/attention_fp16.fatbin)" % args.fp16_attention)
    fp16_usage = resource_usage(cuobjdump, args.fp16_attention)
    fp16_mix = {a: instruction_mix(cuobjdump, args.fp16_attention, a) for a in SASS_ARCHS}
    fp16_names = demangle(sorted({f for a in fp16_mix for f in fp16_mix[a]}))
    fp16 = {}
    for f, n in fp16_names.items():
        if not re.match(r"attention_(pair_)?(forward|backward_dkdv|backward_dq)_mma_kernel<", n): continue
        fp16[n] = {a: dict(fp16_usage.get(a, {}).get(f, dict(regs=0, stack=0)), **(fp16_mix[a].get(f) or {})) for a in SASS_ARCHS}
        for a in SASS_ARCHS:
            if fp16[n][a].get("MMA", 0) == 0:
                errors.append("%s (FP16) on %s: no tensor-core MMA instruction" % (n, a))
            if fp16[n][a].get("LD", 0) > 0:
                errors.append("%s (FP16) on %s: %d generic loads (LD): the shared-memory tiles are not known to be shared "
                              "(see llm/ops/attention_mma_kernels.cuh)" % (n, a, fp16[n][a]["LD"]))
            if (fp16[n][a].get("stack", 0) or fp16[n][a].get("LDL/STL", 0)) and \
                    n not in LOCAL_MEMORY_WHY and match_rule({k: 1 for k in LOCAL_MEMORY_WHY}, n)[0] is None:
                errors.append("%s (FP16) on %s: uses local memory and LOCAL_MEMORY_WHY has no reason for it" % (n, a))
    if len(fp16) < 24:
        errors.append("%s: %d tensor-core attention kernels (FP16), expected 24 (3 fused and 3 ring block-pair kernels x 4 "
                      "head sizes)" % (args.fp16_attention, len(fp16)))
    page = render(rows, cuda_release(cuobjdump), fp16)
    if args.write:
        with open(args.write, "w") as f: f.write(page)
    else:
        print(page, end="")
    if args.check:
        with open(args.check) as f: old = f.read()
        m = re.search(r"CUDA (\d+\.\d+)", old)
        if old != page:
            if m and m.group(1) != cuda_release(cuobjdump):
                print("note: %s was generated with CUDA %s, this is %s: not compared" % (args.check, m.group(1), cuda_release(cuobjdump)))
            else:
                errors.append("%s is stale: regenerate it with python3 scripts/kernel_report.py --write %s"
                              % (args.check, args.check))
    for e in errors: print("error: kernel_report: " + e, file=sys.stderr)
    sys.exit(1 if errors else 0)

def render(rows, release, fp16):
    archs = list(LIMITS)
    L = []
    L.append("# Kernels: resources, launch fit and occupancy on every target\n")
    L.append("Generated by `python3 scripts/kernel_report.py --write docs/kernels.md` from the default CUDA build (BF16,")
    L.append("`make train_gpt`, CUDA %s) with PyPI's `cuobjdump`; `test/test_kernel_report.sh` fails when this page is stale," % release)
    L.append("when a launch does not fit, when a kernel uses local memory without a reason below, or when a fused attention")
    L.append("kernel or a ring attention block-pair kernel (`attention_pair_*_mma_kernel`, context parallelism) has no")
    L.append("tensor-core instruction. Do not edit by hand.\n")
    L.append("Each cell: registers per thread / static shared memory (bytes) / stack frame (bytes, spills and local arrays)")
    L.append("-> blocks per SM (occupancy, the worst of the kernel's launch configurations, as the CUDA occupancy calculator")
    L.append("computes it). Launch: threads per block and dynamic shared memory, from the launcher named in the script.")
    L.append("GPT-2: `yes` where d12..d48 (head size 64, C 768..1600) launch this instance, some only under the flag that")
    L.append("uses the kernel (--cp: `attention_pair_*`, `rows_*`; --tp: `vp_classifier_*`; --fp8: `fp8_*`; --experts: `moe_*`).\n")
    L.append("Limits per block: 1024 threads, 65536 registers, shared memory with the opt-in " +
             ", ".join("%s %d KiB" % (a, LIMITS[a]["optin"] // KIB) for a in archs) +
             " (48 KiB without); per SM: " + ", ".join("%s %d threads, %d blocks, %d KiB" %
             (a, LIMITS[a]["threads_sm"], LIMITS[a]["blocks_sm"], LIMITS[a]["smem_sm"] // KIB) for a in archs) +
             " (CUDA C++ Programming Guide, Technical Specifications per Compute Capability; cuda_occupancy.h).\n")
    L.append("| kernel | launch (threads, dynamic smem) | GPT-2 | " + " | ".join(archs) + " |")
    L.append("|---|---|---|" + "---|" * len(archs))
    for n in sorted(rows):
        r = rows[n]
        launch = ", ".join(sorted({"%d%s" % (t, ", %d B" % d if d else "") for t, d, _, _ in r["configs"]}, key=lambda s: int(s.split(",")[0])))
        cells = []
        for a in archs:
            p = r["per"].get(a)
            cells.append("%d / %d / %d -> %d" % (p["regs"], p["shared"], p["stack"], p["blocks"]) if p else "-")
        L.append("| `%s` | %s | %s | %s |" % (n, launch, "yes" if r["gpt2"] else "", " | ".join(cells)))
    # summary
    worst = {a: min((r["per"][a]["blocks"], n) for n, r in rows.items() if a in r["per"]) for a in archs}
    worst_gpt2 = {a: min(((r["per"][a]["blocks_gpt2"], n) for n, r in rows.items() if a in r["per"] and r["gpt2"]),
                         default=(0, "-")) for a in archs}
    L.append("\n%d kernels x %d targets. Lowest occupancy (blocks per SM): " % (len(rows), len(archs)) +
             "; ".join("%s %d (`%s`)" % (a, worst[a][0], worst[a][1]) for a in archs) +
             ". Among the instances GPT-2 launches, at its shapes: " +
             "; ".join("%s %d (`%s`)" % (a, worst_gpt2[a][0], worst_gpt2[a][1]) for a in archs) + ".\n")
    L.append("## Local memory\n")
    L.append("Kernels with a stack frame or local loads and stores on some target, and why (anything else fails the test):\n")
    for n in sorted(rows):
        if rows[n]["local"]:
            key = n if n in LOCAL_MEMORY_WHY else match_rule({k: 1 for k in LOCAL_MEMORY_WHY}, n)[0]
            stacks = ", ".join("%s %d B" % (a, rows[n]["per"][a]["stack"]) for a in archs if rows[n]["per"][a]["stack"])
            L.append("- `%s` (stack: %s): %s" % (n, stacks or "none, LDL/STL in the SASS", LOCAL_MEMORY_WHY.get(key, "?")))
    L.append("\n## Instruction mix (static counts in the SASS)\n")
    L.append("MMA: tensor-core matrix instructions (HMMA ...); FFMA: FP32 fused multiply-adds; LDG: global loads; LDS: shared")
    L.append("loads (LDS, LDSM); LD: generic loads (an address the compiler could not place: global or shared, resolved at run")
    L.append("time); async: asynchronous copies (LDGSTS = cp.async, TMA); LDL/STL: local memory. Counts are instructions in the")
    L.append("code, not executed instructions.\n")
    L.append("| kernel | " + " | ".join("%s %s" % (a, c) for a in SASS_ARCHS for c in MIX_COLS) + " |")
    L.append("|---|" + "---|" * (len(MIX_COLS) * len(SASS_ARCHS)))
    for n in sorted(rows):
        cells = []
        for a in SASS_ARCHS:
            m = rows[n]["mix"].get(a) or {}
            cells += [str(m.get(c, "-")) for c in MIX_COLS]
        L.append("| `%s` | %s |" % (n, " | ".join(cells)))
    L.append("\n## The FP16 build's fused attention and ring block pairs\n")
    L.append("`make PRECISION=FP16` compiles the same tensor-core kernels with FP16 tiles (`build/attention_fp16.fatbin`,")
    L.append("from `test/attention_sass.cu`, sm_80 and sm_90): MMA instructions and registers / stack per kernel.\n")
    L.append("| kernel (FP16) | " + " | ".join("%s MMA | %s regs / stack" % (a, a) for a in SASS_ARCHS) + " |")
    L.append("|---|" + "---|---|" * len(SASS_ARCHS))
    for n in sorted(fp16):
        L.append("| `%s` | %s |" % (n.replace("__half", "half"), " | ".join("%d | %d / %d" % (fp16[n][a].get("MMA", 0), fp16[n][a]["regs"],
                 fp16[n][a]["stack"]) for a in SASS_ARCHS)))
    return "\n".join(L) + "\n"

if __name__ == "__main__":
    main()
