// attention.cuh: causal multi-head self-attention (Vaswani et al. 2017, section 3.2) as GPT-2 uses it.
// inp holds the fused QKV projection, per position [q | k | v], each C wide, head h in channels
// [h*hs, (h+1)*hs) with hs = C/NH.
//   att[b,h,t,:] = softmax_{t2 <= t}(q[b,t,h] . k[b,t2,h] / sqrt(hs)),   out[b,t,h] = sum_t2 att * v[b,t2,h]
// The CUDA path permutes q,k,v into (B,NH,T,hs), uses batched cuBLASLt products for QK^T and AV,
// and runs the causal softmax (and its backward) as kernels.
#pragma once
#include "common.h"

// ----------------------------------------------------------------------------
// CPU reference

static void attention_forward_cpu(float* out,        // (B,T,C)
                                  float* att,        // (B,NH,T,T) softmax probabilities, 0 above the diagonal
                                  const float* inp,  // (B,T,3C)
                                  int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float* q = inp + ((size_t)b * T + t) * 3 * C + h * hs;
                float* a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = inp + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) { a[t2] = expf(a[t2] - maxv); sum += a[t2]; }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
                float* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = inp + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    float w = a[t2];
                    for (int i = 0; i < hs; i++) o[i] += w * v[i];
                }
            }
        }
    }
}

// dinp = d loss / d inp (overwritten), from dout and the forward's att
static void attention_backward_cpu(float* dinp,        // (B,T,3C)
                                   const float* dout,  // (B,T,C)
                                   const float* inp,   // (B,T,3C)
                                   const float* att,   // (B,NH,T,T)
                                   int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    // each (b,h) owns a disjoint slice of dinp: no races
    #pragma omp parallel
    {
        float* datt = (float*)mallocCheck((size_t)T * sizeof(float));  // (T) one row of d att
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int t = 0; t < T; t++) {
                    for (int j = 0; j < 3; j++) {
                        float* d = dinp + ((size_t)b * T + t) * 3 * C + j * C + h * hs;
                        for (int i = 0; i < hs; i++) d[i] = 0.0f;
                    }
                }
                for (int t = 0; t < T; t++) {
                    const float* a = att + (((size_t)b * NH + h) * T + t) * T;
                    const float* dy = dout + ((size_t)b * T + t) * C + h * hs;
                    // out = att @ v:  datt = dy . v,  dv += att * dy
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float* v = inp + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                        float* dv = dinp + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                        float s = 0.0f;
                        for (int i = 0; i < hs; i++) { s += dy[i] * v[i]; dv[i] += a[t2] * dy[i]; }
                        datt[t2] = s;
                    }
                    // softmax backward: dpre = att * (datt - sum_j att_j datt_j)
                    float dot = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * datt[t2];
                    const float* q = inp + ((size_t)b * T + t) * 3 * C + h * hs;
                    float* dq = dinp + ((size_t)b * T + t) * 3 * C + h * hs;
                    for (int t2 = 0; t2 <= t; t2++) {
                        float dpre = a[t2] * (datt[t2] - dot) * scale;
                        const float* k = inp + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                        float* dk = dinp + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                        for (int i = 0; i < hs; i++) { dq[i] += dpre * k[i]; dk[i] += dpre * q[i]; }
                    }
                }
            }
        }
        free(datt);
    }
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
// (kernels: issue 3)
#endif

// ----------------------------------------------------------------------------
// launchers
// qkvr (B,T,3C) is scratch for the permuted q,k,v of the CUDA path (kept for the backward);
// att (B,NH,T,T) keeps the softmax probabilities for the backward.

// scratch (B,T,C) is free for the kernels' use during the forward (e.g. the (B,NH,T,hs) output of AV)
static void attention_forward(floatX* out,        // (B,T,C)
                              floatX* qkvr,       // (B,T,3C)
                              floatX* att,        // (B,NH,T,T)
                              floatX* scratch,    // (B,T,C)
                              const floatX* inp,  // (B,T,3C)
                              int B, int T, int C, int NH, cudaStream_t stream) {
#if LLM_BUILD_CPU
    (void)qkvr; (void)scratch; (void)stream;
    attention_forward_cpu(out, att, inp, B, T, C, NH);
#else
#error "attention_forward: CUDA kernel not written yet"
#endif
}

// dinp is overwritten; dqkvr (B,T,3C), datt (B,NH,T,T) and scratch (B,T,C) are scratch buffers
static void attention_backward(floatX* dinp,        // (B,T,3C)
                               floatX* dqkvr,       // (B,T,3C)
                               floatX* datt,        // (B,NH,T,T)
                               floatX* scratch,     // (B,T,C)
                               const floatX* dout,  // (B,T,C)
                               const floatX* inp,   // (B,T,3C) the forward's input
                               const floatX* qkvr,  // (B,T,3C) the forward's permuted q,k,v
                               const floatX* att,   // (B,NH,T,T)
                               int B, int T, int C, int NH, cudaStream_t stream) {
#if LLM_BUILD_CPU
    (void)dqkvr; (void)datt; (void)scratch; (void)qkvr; (void)stream;
    attention_backward_cpu(dinp, dout, inp, att, B, T, C, NH);
#else
#error "attention_backward: CUDA kernel not written yet"
#endif
}
