// attention_x16_cpu.h: the CPU build's causal self-attention for a 16-bit floatX (PRECISION=BF16 /
// FP16), forward and backward (attention_forward_x16_cpu, attention_backward_x16_cpu). One part of
// llm/ops/attention.cuh, whose launchers call these when LLM_BUILD_CPU and floatX is not float; the FP32
// CPU reference (attention_forward_cpu / attention_backward_cpu) and the math are in attention.cuh.
// Templates on the 16-bit type Tx (any type with float conversions), so every build compiles them.
#pragma once
#include <float.h>
#include <math.h>
#include "../core/common.h"  // mallocCheck

// The CPU build with 16-bit floatX: the same math with the fused kernels' rounding points
// (attention_kernels.cuh): the scores q.k and the probabilities stay in FP32, the
// probabilities are rounded to Tx where they enter a product with v (forward) or dy (backward),
// dS = P (dP - D) is rounded to Tx where it enters the products with k and q, and each output (out,
// dq, dk, dv) is summed in FP32 and rounded once. What the kernels do in tiles (the online softmax's
// rescaling, block by block) happens here row by row with the row's true max, so CPU BF16 and the
// kernels agree to within those rescalings, not bit for bit. lse (B,NH,T) as the kernels keep it.
// Each (b,h) first copies its head's q, k, v (and dy, out) into FP32 rows (exact), so the loops run on floats.
template <class Tx>
static void attention_head_to_f32(float* dst /*(T,hs)*/, const Tx* src, size_t row_stride, int T, int hs) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hs; i++) dst[(size_t)t * hs + i] = (float)src[(size_t)t * row_stride + i];
}

// head h of sequence b: its q, k, v rows of inp (B,T,3C) copied into FP32 q, k, v (T,hs) each
template <class Tx>
static void attention_qkv_to_f32(float* q /*(T,hs)*/, float* k /*(T,hs)*/, float* v /*(T,hs)*/,
                                 const Tx* inp /*(B,T,3C)*/, int b, int h, int T, int C, int NH) {
    int hs = C / NH;
    const Tx* x = inp + (size_t)b * T * 3 * C + h * hs;
    attention_head_to_f32(q, x, 3 * (size_t)C, T, hs);
    attention_head_to_f32(k, x + C, 3 * (size_t)C, T, hs);
    attention_head_to_f32(v, x + 2 * C, 3 * (size_t)C, T, hs);
}

template <class Tx>
static void attention_forward_x16_cpu(Tx* out /*(B,T,C)*/, float* lse /*(B,NH,T)*/, const Tx* inp /*(B,T,3C)*/,
                                      int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel
    {
        float* buf = (float*)mallocCheck(((size_t)3 * T * hs + T + hs) * sizeof(float));
        float *q = buf, *k = q + (size_t)T * hs, *v = k + (size_t)T * hs, *p = v + (size_t)T * hs, *y = p + T;
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                attention_qkv_to_f32(q, k, v, inp, b, h, T, C, NH);
                for (int t = 0; t < T; t++) {
                    float maxv = -FLT_MAX, sum = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) {  // scaled scores, FP32
                        float s = 0.0f;
                        for (int i = 0; i < hs; i++) s += q[(size_t)t * hs + i] * k[(size_t)t2 * hs + i];
                        p[t2] = s * scale;
                        maxv = fmaxf(maxv, p[t2]);
                    }
                    for (int t2 = 0; t2 <= t; t2++) { p[t2] = expf(p[t2] - maxv); sum += p[t2]; }
                    for (int i = 0; i < hs; i++) y[i] = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) {
                        float pr = (float)Tx(p[t2]);  // rounded where it meets v
                        for (int i = 0; i < hs; i++) y[i] += pr * v[(size_t)t2 * hs + i];
                    }
                    float inv = 1.0f / sum;
                    Tx* o = out + ((size_t)b * T + t) * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] = y[i] * inv;
                    lse[((size_t)b * NH + h) * T + t] = maxv + logf(sum);
                }
            }
        }
        free(buf);
    }
}

template <class Tx>
static void attention_backward_x16_cpu(Tx* dinp /*(B,T,3C)*/, const Tx* dout /*(B,T,C)*/, const Tx* inp /*(B,T,3C)*/,
                                       const Tx* out /*(B,T,C)*/, const float* lse /*(B,NH,T)*/, int B, int T, int C,
                                       int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel
    {
        size_t Th = (size_t)T * hs;
        float* buf = (float*)mallocCheck((5 * Th + 2 * (size_t)T * T + hs) * sizeof(float));
        float *q = buf, *k = q + Th, *v = k + Th, *dy = v + Th, *o = dy + Th, *P = o + Th, *dS = P + (size_t)T * T;
        float* acc = dS + (size_t)T * T;
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                attention_qkv_to_f32(q, k, v, inp, b, h, T, C, NH);
                attention_head_to_f32(dy, dout + (size_t)b * T * C + h * hs, (size_t)C, T, hs);
                attention_head_to_f32(o, out + (size_t)b * T * C + h * hs, (size_t)C, T, hs);
                const float* L = lse + ((size_t)b * NH + h) * T;
                Tx* dx = dinp + (size_t)b * T * 3 * C + h * hs;  // row t, part j (q, k, v): dx + t*3C + j*C
                // P = e^(scale q.k - lse) recomputed; dS = P (dy.v - D) with D = dy.out, rounded
                for (int t = 0; t < T; t++) {
                    float D = 0.0f;
                    for (int i = 0; i < hs; i++) D += dy[(size_t)t * hs + i] * o[(size_t)t * hs + i];
                    for (int t2 = 0; t2 <= t; t2++) {
                        float s = 0.0f, dp = 0.0f;
                        for (int i = 0; i < hs; i++) {
                            s += q[(size_t)t * hs + i] * k[(size_t)t2 * hs + i];
                            dp += dy[(size_t)t * hs + i] * v[(size_t)t2 * hs + i];
                        }
                        float pv = expf(s * scale - L[t]);
                        P[(size_t)t * T + t2] = (float)Tx(pv);
                        dS[(size_t)t * T + t2] = (float)Tx(pv * (dp - D));
                    }
                }
                // dv = P^T dy, dk = scale dS^T q (rounded)
                for (int t2 = 0; t2 < T; t2++) {
                    for (int i = 0; i < hs; i++) acc[i] = 0.0f;
                    for (int t = t2; t < T; t++) {
                        float a = P[(size_t)t * T + t2];
                        for (int i = 0; i < hs; i++) acc[i] += a * dy[(size_t)t * hs + i];
                    }
                    for (int i = 0; i < hs; i++) dx[(size_t)t2 * 3 * C + 2 * C + i] = acc[i];
                    for (int i = 0; i < hs; i++) acc[i] = 0.0f;
                    for (int t = t2; t < T; t++) {
                        float d = dS[(size_t)t * T + t2];
                        for (int i = 0; i < hs; i++) acc[i] += d * q[(size_t)t * hs + i];
                    }
                    for (int i = 0; i < hs; i++) dx[(size_t)t2 * 3 * C + C + i] = acc[i] * scale;
                }
                // dq = scale dS k (rounded)
                for (int t = 0; t < T; t++) {
                    for (int i = 0; i < hs; i++) acc[i] = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) {
                        float d = dS[(size_t)t * T + t2];
                        for (int i = 0; i < hs; i++) acc[i] += d * k[(size_t)t2 * hs + i];
                    }
                    for (int i = 0; i < hs; i++) dx[(size_t)t * 3 * C + i] = acc[i] * scale;
                }
            }
        }
        free(buf);
    }
}
