/* cuda_gemv.cuh — what the decode matrix-vector kernels share (cuda_matmul.cu, cuda_gemv_int8.cuh):
 * the fused work a product folds in, the activations' norm weights, the device's multiprocessors. */
#ifndef LMC_CUDA_GEMV_CUH
#define LMC_CUDA_GEMV_CUH

#include "cuda_common.cuh"

/* What a decode product folds in (lmc_cuda_gemv_fused): the RMSNorm of its input (MODE ≥ 1 of
 * gemv_block; Q8_0/Q4_0: in = 1), act(x)·x2 as its input (Q8_0/Q4_0: in = 2), act(w0·u)·(w1·u)
 * as its output (MODE 2), y += instead of y = (acc), rope and the KV cache stores of q, k, v at
 * one token (rope: k_gemv_q<ROPE>, k_gemv_s<MODE 3>). */
struct gemv_fz {
    const void *g;   /* norm weight [K] (NULL: none), dtype gt, plus woff */
    int gt;
    float eps, woff;
    const float *x2; /* in = 2 */
    int act, acc, in;
    int rope;        /* rk holds the rope and the caches */
    lmc_cuda_rope_kv rk;
};

/* The row of rotation pair p of a matrix whose rows are heads of hd dims to rotate, its first (hi 0)
 * or second (hi 1) dim (interleaved: dims 2i, 2i + 1 of a head; else i, i + hd/2); *i: the pair's
 * index within its head. Rows < 2^31. */
static __device__ __forceinline__ int64_t gemv_rope_pair_row(unsigned p, int hi, int hd, int interleaved, int *i) {
    const unsigned half = (unsigned)hd / 2, head = p / half, k = p - head * half;
    *i = (int)k;
    return (int64_t)(head * (unsigned)hd + (interleaved ? 2 * k + (unsigned)hi : k + (unsigned)hi * half));
}

/* Row r of row group g of such a matrix (rope in a product's epilogue, gemv_rope_write): the group
 * holds RW/2 rotation pairs, pair g·RW/2 + r/2 of the matrix, its two rows side by side. */
static __device__ __forceinline__ int64_t gemv_rope_row(int64_t g, int r, int RW, int hd, int interleaved) {
    int i;
    return gemv_rope_pair_row((unsigned)g * (unsigned)(RW / 2) + (unsigned)(r / 2), r & 1, hd, interleaved, &i);
}

/* rope_store's work on one token's sums v[r] of row group g of q, k or v (matrix mi of 3): q's and k's
 * pairs (gemv_rope_row) rotated as k_rope_store rotates them (rope_cs, the same rounding) and written
 * to y, k's and v's rows also to the caches' slot of the token's sequence and position. Lane r
 * writes row r of the group; every lane holds every v[r]. */
template <int RW>
static __device__ __forceinline__ void gemv_rope_write(const float (&v)[RW], float *y, int mi, int64_t g, int lane,
                                                       const lmc_cuda_rope_kv &rk) {
    const int64_t sq = rk.seq[0], p = rk.pos[0];
    const bool store = sq >= 0 && sq < rk.n_seq && p >= 0; /* validated by the forward; never write out of bounds */
    const int64_t slot = (sq * rk.n_ctx + (p >= 0 ? p % rk.n_ctx : 0)) * rk.kv_row;
    if (mi == 2) { /* v: plain rows */
#pragma unroll
        for (int r = 0; r < RW; r++)
            if (lane == r) {
                const int64_t row = g * RW + r;
                y[row] = v[r];
                if (store) rk.vc[slot + row] = v[r];
            }
        return;
    }
#pragma unroll
    for (int j = 0; j < RW / 2; j++) {
        if (lane != 2 * j && lane != 2 * j + 1) continue;
        int i;
        const int64_t row = gemv_rope_pair_row((unsigned)g * (unsigned)(RW / 2) + (unsigned)j, lane & 1, rk.hd,
                                               rk.interleaved, &i);
        float c, s;
        rope_cs((float)p, rk.inv[i], rk.af, &c, &s);
        const float x0 = v[2 * j], x1 = v[2 * j + 1];
        const float o = lane & 1 ? fmaf(x1, c, __fmul_rn(x0, s)) : fmaf(x0, c, -__fmul_rn(x1, s));
        y[row] = o;
        if (mi == 1 && store) rk.kc[slot + row] = o;
    }
}

/* Same as cuda_ops.cu's act_apply (lmc_act order). */
static __device__ __forceinline__ float fz_act(int act, float x) {
    switch (act) {
    case 0: return x / (1.0f + expf(-x));
    case 1: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case 2: {
        const float k = 0.79788456080286536f;
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case 3: return x > 0 ? x : 0;
    case 4: return x > 0 ? x * x : 0;
    }
    return x;
}

/* fz_act out of line for the int8 products: one copy of its five functions in a kernel instead of
 * one a call site (they unroll it 2-16 times in the act(x)·x2 input, which one-token Llama decode
 * does not take, and once or twice in the GLU epilogue): o's Q4_0 kernel 72 → 49 KB of code,
 * Llama-8B Q4_0 decode +1.6 % (docs/CUDA.md) */
static __device__ __noinline__ float fz_act_ool(int act, float x) { return fz_act(act, x); }

/* N norm-weight values from element i (16-byte aligned for N ≥ 4: checked on the host), plus woff;
 * 1 where there is no weight. */
template <int N>
static __device__ __forceinline__ void fz_weights(const gemv_fz &f, int64_t i, float *g) {
    if (!f.g) {
#pragma unroll
        for (int k = 0; k < N; k++) g[k] = 1.0f;
        return;
    }
    if (f.gt == LMC_DTYPE_F32) {
#pragma unroll
        for (int k = 0; k < N / 4; k++) {
            const float4 v = __ldg((const float4 *)((const float *)f.g + i) + k);
            g[4 * k] = v.x; g[4 * k + 1] = v.y; g[4 * k + 2] = v.z; g[4 * k + 3] = v.w;
        }
    } else {
        uint32_t u[N / 2 > 0 ? N / 2 : 1]; /* N 16-bit values: 8 or 16 bytes a load */
#pragma unroll
        for (int k = 0; k < N / 8; k++) {
            const uint4 v = __ldg((const uint4 *)((const uint16_t *)f.g + i) + k);
            u[4 * k] = v.x; u[4 * k + 1] = v.y; u[4 * k + 2] = v.z; u[4 * k + 3] = v.w;
        }
        if (N == 4) {
            const uint2 v = __ldg((const uint2 *)((const uint16_t *)f.g + i));
            u[0] = v.x;
            u[N / 2 - 1] = v.y;
        }
#pragma unroll
        for (int h = 0; h < N / 2; h++) {
            if (f.gt == LMC_DTYPE_BF16) {
                g[2 * h] = __uint_as_float(u[h] << 16);
                g[2 * h + 1] = __uint_as_float(u[h] & 0xffff0000u);
            } else {
                g[2 * h] = f16_to_f((uint16_t)(u[h] & 0xffff));
                g[2 * h + 1] = f16_to_f((uint16_t)(u[h] >> 16));
            }
        }
    }
#pragma unroll
    for (int k = 0; k < N; k++) g[k] += f.woff;
}

/* Per device: multiprocessors and shared memory per block (opt-in), cached. */
static int qv_device(int *dev, int *sms, size_t *smem_block) {
    static int cache[16][2];
    if (cudaGetDevice(dev) != cudaSuccess) return 0;
    int v[2] = {0, 0};
    const int d = *dev;
    if (d >= 0 && d < 16 && cache[d][0]) {
        v[0] = cache[d][0];
        v[1] = cache[d][1];
    } else {
        if (cudaDeviceGetAttribute(&v[0], cudaDevAttrMultiProcessorCount, d) != cudaSuccess ||
            cudaDeviceGetAttribute(&v[1], cudaDevAttrMaxSharedMemoryPerBlockOptin, d) != cudaSuccess)
            return 0;
        if (d >= 0 && d < 16) {
            cache[d][0] = v[0];
            cache[d][1] = v[1];
        }
    }
    *sms = v[0];
    *smem_block = (size_t)v[1];
    return 1;
}

/* Launch shape of a persistent decode product over G row groups, at most wmax warps a block and one
 * block per multiprocessor: groups a warp (gpw: the most any warp takes), warps a block, blocks. even:
 * every warp slot of the GPU busy when there are the row groups for it (warps then take gpw or
 * gpw - 1 groups, gemv_groups); else every warp takes gpw and the grid is as small as that allows.
 * k_gemv_q takes even (Q4_K decode 314.2-317.2 -> 321.6 tok/s on the H200, Llama-8B shape, two rounds;
 * Q4_0 and Q8_0 unchanged; LMC_CUDA_GEMV_EVEN=0: as before), k_gemv_s not (bf16 226.6-226.9 -> 222.6). */
static void gemv_shape(int64_t G, int sms, int wmax, int even, int64_t *gpw, int64_t *wpb, unsigned *blocks) {
    const int64_t max_w = (int64_t)sms * wmax;
    *gpw = (G + max_w - 1) / max_w;
    const int64_t nw = even ? (G < max_w ? G : max_w) : (G + *gpw - 1) / *gpw;
    *wpb = (nw + sms - 1) / sms;
    if (*wpb < 4) *wpb = 4;
    if (*wpb > wmax) *wpb = wmax;
    *blocks = (unsigned)((nw + *wpb - 1) / *wpb);
    if (even) *gpw = (G + (int64_t)*blocks * *wpb - 1) / ((int64_t)*blocks * *wpb);
}

/* This warp's row groups [*g0, *g1) of G: gpw each in grid order (the last warps fewer or none); even:
 * gpw for the first G - nw·(gpw - 1) warps of the grid's nw, gpw - 1 for the others, the warps counted
 * warp slot by warp slot across the blocks (warp s of block b is warp s·blocks + b), so that every
 * multiprocessor holds as many of the longer ranges as any other: in block order the first blocks held
 * all of them and ran last, alone, as the kernel's tail (gate/up of the Llama-8B shape: 4 groups a warp
 * in 52 of 132 blocks, 3 in the others). */
static __device__ __forceinline__ void gemv_groups(int64_t G, int gpw, int even, int64_t *g0, int64_t *g1) {
    const int64_t wpb = blockDim.x >> 5, nw = (int64_t)gridDim.x * wpb;
    const int64_t w = even ? (int64_t)(threadIdx.x >> 5) * gridDim.x + blockIdx.x
                           : (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5);
    int64_t g = w * gpw, n = gpw;
    if (even) {
        const int64_t a = G - nw * (gpw - 1);
        if (w >= a) {
            g = a * gpw + (w - a) * (gpw - 1);
            n = gpw - 1;
        }
    }
    *g0 = g < G ? g : G;
    *g1 = g + n < G ? g + n : G;
}

#endif
