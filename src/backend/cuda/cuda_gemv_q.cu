/* cuda_gemv_q.cu — decode matrix-vector products (1..LMC_CUDA_GEMV_MAX_TOKENS tokens) of the
 * weight formats kept in their checkpoint layout on the device: GGUF Q2_K Q3_K Q4_K Q5_K Q6_K
 * (256-element super-blocks), Q4_1 Q5_0 Q5_1 (32-element blocks) and MLX affine 2..8 bits
 * (groups of 32/64/128), MXFP4 in both layouts (ggml's block, mlx's codes + exponents). Owned here: the kernel k_gemv_kq and its launcher; routed from
 * lmc_cuda_gemv_ok / lmc_cuda_gemv (cuda_matmul.cu).
 *
 * Every row is cut into pieces of 32 elements; a block of KQ_THREADS threads computes R rows,
 * thread i taking pieces i, i + KQ_THREADS, ... of every row (neighbouring threads read
 * neighbouring bytes of a super-block). Per piece a thread loads the R rows' code bytes (and the
 * block header) first, then per token reads the 32 activations (f32, through L1; they serve all
 * R rows) and their per-run sums, and forms Σ w·x with the codes widened in registers (kq_h:
 * one byte permute an element), scales applied once per run of 8..32 elements, mins/biases
 * through the run sums of x. Activations stay f32 (the CPU's product within rounding).
 * Q4_K/Q5_K/Q6_K come here only with LMC_CUDA_KQ_INT8=0 (or LMC_CUDA_QGEMV=off) or when their int8
 * activations would not fit shared memory: by default they go through k_gemv_q's int8 path
 * (cuda_matmul.cu).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

#define KQ_THREADS 128

/* Byte k (< 128) of u as the float 0.5 + u_k / 256 (exponent 0x3F000000, the byte in bits
 * 16..22): one byte permute, no arithmetic. B-bit codes are first shifted to the top of their
 * byte (q << (7 - B), one shift per four codes) so that the float is 0.5 + q / 2^(B+1) (the code
 * carries up to half of it: little cancellation below); a run sums s = Σ (0.5 + q/2^(B+1))·x and
 * Σ q·x = 2^(B+1)·s - 2^B·Σx (kq_sum): two instructions an element instead of four. */
static __device__ __forceinline__ float kq_h(uint32_t u, int k) {
    return __uint_as_float(__byte_perm(u, 0x3F000000u, 0x7044u | ((unsigned)k << 8)));
}
template <int B> static __device__ __forceinline__ float kq_sum(float s, float sx) {
    return fmaf((float)(2 << B), s, -(float)(1 << B) * sx);
}
/* Four B-bit codes of lo (elements 4w.. of a run of 32) and of hi (elements 16 + 4w..) times x
 * into sl and sh, lo before hi for each code (a caller with one sum passes it twice). */
template <int B>
static __device__ __forceinline__ void kq_fma4(uint32_t lo, uint32_t hi, const float *x, int w, float &sl, float &sh) {
    lo <<= 7 - B;
    hi <<= 7 - B;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        sl = fmaf(kq_h(lo, k), x[4 * w + k], sl);
        sh = fmaf(kq_h(hi, k), x[16 + 4 * w + k], sh);
    }
}

/* 16 bytes from a 2-byte aligned address (five 4-byte loads, funnel shifts); the word past the
 * end is read only inside the same super-block (callers make sure). */
static __device__ __forceinline__ void kq_ld16_2(const uint8_t *p, uint32_t *o, int n) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    const unsigned sh = ((unsigned)(uintptr_t)p & 3u) * 8u;
    uint32_t w[5];
#pragma unroll
    for (int i = 0; i < 5; i++)
        if (i <= n) w[i] = __ldg(a + i);
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (i < n) o[i] = __funnelshift_r(w[i], w[i + 1], sh);
}

/* Per format: the layout of a 32-element piece (RL elements per run, NR runs RS elements apart,
 * the first at elem0), its raw registers, load and dot (Σ over the piece of w·x given the 32
 * activations in run order and the runs' sums sx). */
template <int TYPE> struct kq;

/* Q4_K / Q5_K: 144 / 176-byte super-blocks {d, dmin, scales[12], (qh[32]), qs[128]}; piece j of a
 * super-block: 16 bytes of qs of 64-element chunk c = j / 2, half h = j % 2: low nibbles are
 * elements 64c + 16h + k (scale/min 2c), high nibbles 64c + 32 + 16h + k (2c + 1). */
template <int TYPE> struct kq45 {
    enum { RL = 16, NR = 2, RS = 32, Q5 = TYPE == LMC_DTYPE_Q5_K, BB = Q5 ? 176 : 144, CB = Q5 ? 5 : 4 };
    struct raw { uint4 hdr, qs, qh; };
    static __device__ __forceinline__ int64_t elem0(int64_t p) {
        const int j = (int)(p & 7);
        return (p >> 3) * 256 + 64 * (j >> 1) + 16 * (j & 1);
    }
    static __device__ __forceinline__ void load(raw &r, const uint8_t *row, const lmc_cuda_w &, int64_t, int64_t p) {
        const int j = (int)(p & 7);
        const uint8_t *b = row + (size_t)(p >> 3) * BB;
        r.hdr = __ldg((const uint4 *)b);
        r.qs = __ldg((const uint4 *)(b + (Q5 ? 48 : 16) + 32 * (j >> 1) + 16 * (j & 1)));
        if (Q5) r.qh = __ldg((const uint4 *)(b + 16 + 16 * (j & 1)));
    }
    static __device__ __forceinline__ float dot(const raw &r, int64_t p, const float *x, const float *sx) {
        const int j = (int)(p & 7), c = j >> 1;
        const float d = f16_to_f((uint16_t)(r.hdr.x & 0xffff)), dm = f16_to_f((uint16_t)(r.hdr.x >> 16));
        /* scales/mins of sub-blocks 2c and 2c + 1 (6 bits each, k4_scale_min) */
        int sc[2], mn[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int i = 2 * c + h;
            if (i < 4) {
                sc[h] = (r.hdr.y >> (8 * i)) & 63;
                mn[h] = (r.hdr.z >> (8 * i)) & 63;
            } else {
                const int s = 8 * (i - 4);
                sc[h] = ((r.hdr.w >> s) & 0x0F) | (((r.hdr.y >> (s + 6)) & 3) << 4);
                mn[h] = ((r.hdr.w >> (s + 4)) & 0x0F) | (((r.hdr.z >> (s + 6)) & 3) << 4);
            }
        }
        const uint32_t q[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
        const uint32_t hb[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            uint32_t lo = q[w] & 0x0F0F0F0Fu, hi = (q[w] >> 4) & 0x0F0F0F0Fu;
            if (Q5) {
                lo |= ((hb[w] >> (2 * c)) & 0x01010101u) << 4;
                hi |= ((hb[w] >> (2 * c + 1)) & 0x01010101u) << 4;
            }
            kq_fma4<CB>(lo, hi, x, w, s0, s1);
        }
        s0 = kq_sum<CB>(s0, sx[0]);
        s1 = kq_sum<CB>(s1, sx[1]);
        return d * ((float)sc[0] * s0 + (float)sc[1] * s1) - dm * ((float)mn[0] * sx[0] + (float)mn[1] * sx[1]);
    }
};
template <> struct kq<LMC_DTYPE_Q4_K> : kq45<LMC_DTYPE_Q4_K> {};
template <> struct kq<LMC_DTYPE_Q5_K> : kq45<LMC_DTYPE_Q5_K> {};

/* Q6_K: 210-byte super-blocks {ql[128], qh[64], scales[16] (int8), d}; piece j: half = j / 4,
 * qq = (j / 2) % 2, lh = j % 2, l = 16·lh + k: element 128·half + 32·qq + l takes the low nibble of
 * ql[64·half + 32·qq + l] with bits 2qq.. of qh[32·half + l], element + 64 the high nibble with
 * bits 2qq + 4..; scales 8·half + lh + 2qq and + 4. Rows are only 2-byte aligned. */
template <> struct kq<LMC_DTYPE_Q6_K> {
    enum { RL = 16, NR = 2, RS = 64, BB = 210 };
    struct raw { uint32_t ql[4], qh[4]; float d0, d1; };
    static __device__ __forceinline__ int64_t elem0(int64_t p) {
        const int j = (int)(p & 7);
        return (p >> 3) * 256 + 128 * (j >> 2) + 32 * ((j >> 1) & 1) + 16 * (j & 1);
    }
    static __device__ __forceinline__ void load(raw &r, const uint8_t *row, const lmc_cuda_w &, int64_t, int64_t p) {
        const int j = (int)(p & 7), half = j >> 2, qq = (j >> 1) & 1, lh = j & 1;
        const uint8_t *b = row + (size_t)(p >> 3) * BB;
        kq_ld16_2(b + 64 * half + 32 * qq + 16 * lh, r.ql, 4);
        kq_ld16_2(b + 128 + 32 * half + 16 * lh, r.qh, 4);
        const float d = h2f_at(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * half + lh + 2 * qq;
        r.d0 = d * (float)sc[0];
        r.d1 = d * (float)sc[4];
    }
    static __device__ __forceinline__ float dot(const raw &r, int64_t p, const float *x, const float *sx) {
        const int qq = (int)((p >> 1) & 1);
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const uint32_t lo = (r.ql[w] & 0x0F0F0F0Fu) | (((r.qh[w] >> (2 * qq)) & 0x03030303u) << 4);
            const uint32_t hi = ((r.ql[w] >> 4) & 0x0F0F0F0Fu) | (((r.qh[w] >> (2 * qq + 4)) & 0x03030303u) << 4);
            kq_fma4<6>(lo, hi, x, w, s0, s1);
        }
        /* Σ (q - 32)·x */
        return r.d0 * fmaf(-32.0f, sx[0], kq_sum<6>(s0, sx[0])) + r.d1 * fmaf(-32.0f, sx[1], kq_sum<6>(s1, sx[1]));
    }
};

/* Q2_K: 84-byte super-blocks {scales[16], qs[64], d, dmin}; piece j: half = j / 4, m0 = 8·(j % 4):
 * byte qs[32·half + m0 + k] holds elements 128·half + 32·sh + m0 + k (bits 2sh), sh = 0..3, scale
 * byte 8·half + 2sh + (j % 4) / 2 (low nibble scale, high nibble min). */
template <> struct kq<LMC_DTYPE_Q2_K> {
    enum { RL = 8, NR = 4, RS = 32, BB = 84 };
    struct raw { uint32_t q[2], s; float d, dm; };
    static __device__ __forceinline__ int64_t elem0(int64_t p) {
        const int j = (int)(p & 7);
        return (p >> 3) * 256 + 128 * (j >> 2) + 8 * (j & 3);
    }
    static __device__ __forceinline__ void load(raw &r, const uint8_t *row, const lmc_cuda_w &, int64_t, int64_t p) {
        const int j = (int)(p & 7), half = j >> 2;
        const uint8_t *b = row + (size_t)(p >> 3) * BB;
        const uint32_t *q = (const uint32_t *)(b + 16 + 32 * half + 8 * (j & 3));
        r.q[0] = __ldg(q);
        r.q[1] = __ldg(q + 1);
        const uint32_t *s = (const uint32_t *)(b + 8 * half);
        const uint32_t s0 = __ldg(s), s1 = __ldg(s + 1);
        /* bytes 2sh + part, sh = 0..3, of the 8 scale bytes of this half */
        r.s = (j & 2) ? __byte_perm(s0, s1, 0x7531) : __byte_perm(s0, s1, 0x6420);
        const uint32_t dd = __ldg((const uint32_t *)(b + 80));
        r.d = f16_to_f((uint16_t)(dd & 0xffff));
        r.dm = f16_to_f((uint16_t)(dd >> 16));
    }
    static __device__ __forceinline__ float dot(const raw &r, int64_t, const float *x, const float *sx) {
        float acc = 0.0f;
#pragma unroll
        for (int sh = 0; sh < 4; sh++) {
            float s = 0.0f;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t c = ((r.q[h] >> (2 * sh)) & 0x03030303u) << 5; /* 4 codes, one a byte */
#pragma unroll
                for (int k = 0; k < 4; k++) s = fmaf(kq_h(c, k), x[8 * sh + 4 * h + k], s);
            }
            s = kq_sum<2>(s, sx[sh]);
            const uint32_t sb = (r.s >> (8 * sh)) & 0xffu;
            acc += r.d * (float)(sb & 0x0F) * s - r.dm * (float)(sb >> 4) * sx[sh];
        }
        return acc;
    }
};

/* Q3_K: 110-byte super-blocks {hmask[32], qs[64], scales[12], d}; piece as Q2_K; the code is
 * (2 bits of qs) - 4 unless bit 4·half + sh of hmask[m0 + k] is set; 6-bit signed scales. */
template <> struct kq<LMC_DTYPE_Q3_K> {
    enum { RL = 8, NR = 4, RS = 32, BB = 110 };
    struct raw { uint32_t q[2], h[2]; float ds[4]; };
    static __device__ __forceinline__ int64_t elem0(int64_t p) { return kq<LMC_DTYPE_Q2_K>::elem0(p); }
    static __device__ __forceinline__ void load(raw &r, const uint8_t *row, const lmc_cuda_w &, int64_t, int64_t p) {
        const int j = (int)(p & 7), half = j >> 2, m0 = 8 * (j & 3);
        const uint8_t *b = row + (size_t)(p >> 3) * BB;
        kq_ld16_2(b + 32 + 32 * half + m0, r.q, 2);
        kq_ld16_2(b + m0, r.h, 2);
        const float d = h2f_at(b + 108);
#pragma unroll
        for (int sh = 0; sh < 4; sh++) r.ds[sh] = d * (float)q3k_scale(b + 96, half * 8 + sh * 2 + ((j & 3) >> 1));
    }
    static __device__ __forceinline__ float dot(const raw &r, int64_t p, const float *x, const float *sx) {
        const int half = (int)((p >> 2) & 1);
        float acc = 0.0f;
#pragma unroll
        for (int sh = 0; sh < 4; sh++) {
            float s = 0.0f;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                /* v - 4 + 4·hb = (v + 4·hb) - 4, four codes a word */
                const uint32_t c = (((r.q[h] >> (2 * sh)) & 0x03030303u) |
                                    (((r.h[h] >> (4 * half + sh)) & 0x01010101u) << 2)) << 4;
#pragma unroll
                for (int k = 0; k < 4; k++) s = fmaf(kq_h(c, k), x[8 * sh + 4 * h + k], s);
            }
            acc = fmaf(r.ds[sh], fmaf(-4.0f, sx[sh], kq_sum<3>(s, sx[sh])), acc);
        }
        return acc;
    }
};

/* Q4_1 / Q5_0 / Q5_1: one 32-element block per piece {d, (m), (qh[4]), qs[16]}; element k < 16 the
 * low nibble of qs[k], element 16 + k the high one; Q5: bit k of qh is bit 4 of element k. */
template <int TYPE> struct kq32 {
    enum { RL = 32, NR = 1, RS = 0, M = TYPE != LMC_DTYPE_Q5_0, H = TYPE != LMC_DTYPE_Q4_1,
           BB = TYPE == LMC_DTYPE_Q4_1 ? 20 : TYPE == LMC_DTYPE_Q5_0 ? 22 : 24, CB = H ? 5 : 4 };
    struct raw { uint32_t q[4], qh; float d, m; };
    static __device__ __forceinline__ int64_t elem0(int64_t p) { return p * 32; }
    static __device__ __forceinline__ void load(raw &r, const uint8_t *row, const lmc_cuda_w &, int64_t, int64_t p) {
        const uint8_t *b = row + (size_t)p * BB;
        if (TYPE == LMC_DTYPE_Q5_0) { /* 2-byte aligned: 16-bit loads */
            const uint16_t *h = (const uint16_t *)b;
            uint16_t u[11];
#pragma unroll
            for (int i = 0; i < 11; i++) u[i] = __ldg(h + i);
            r.d = f16_to_f(u[0]);
            r.m = 0.0f;
            r.qh = (uint32_t)u[1] | ((uint32_t)u[2] << 16);
#pragma unroll
            for (int i = 0; i < 4; i++) r.q[i] = (uint32_t)u[3 + 2 * i] | ((uint32_t)u[4 + 2 * i] << 16);
        } else {
            const uint32_t *w = (const uint32_t *)b;
            const uint32_t dm = __ldg(w);
            r.d = f16_to_f((uint16_t)(dm & 0xffff));
            r.m = f16_to_f((uint16_t)(dm >> 16));
            r.qh = H ? __ldg(w + 1) : 0u;
#pragma unroll
            for (int i = 0; i < 4; i++) r.q[i] = __ldg(w + 1 + H + i);
        }
    }
    static __device__ __forceinline__ float dot(const raw &r, int64_t, const float *x, const float *sx) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            uint32_t lo = r.q[w] & 0x0F0F0F0Fu, hi = (r.q[w] >> 4) & 0x0F0F0F0Fu;
            if (H) {
                /* bits 4w..4w+3 (low) and 16 + 4w.. (high) of qh to bit 4 of each byte */
                const uint32_t bl = (r.qh >> (4 * w)) & 0xF, bh = (r.qh >> (16 + 4 * w)) & 0xF;
                lo |= ((bl & 1) << 4) | ((bl & 2) << 11) | ((bl & 4) << 18) | ((bl & 8) << 25);
                hi |= ((bh & 1) << 4) | ((bh & 2) << 11) | ((bh & 4) << 18) | ((bh & 8) << 25);
            }
            kq_fma4<CB>(lo, hi, x, w, s, s);
        }
        s = kq_sum<CB>(s, sx[0]); /* Σ q·x */
        return M ? fmaf(r.d, s, r.m * sx[0]) : r.d * fmaf(-16.0f, sx[0], s); /* Q5_0: code - 16 */
    }
};
template <> struct kq<LMC_DTYPE_Q4_1> : kq32<LMC_DTYPE_Q4_1> {};
template <> struct kq<LMC_DTYPE_Q5_0> : kq32<LMC_DTYPE_Q5_0> {};
template <> struct kq<LMC_DTYPE_Q5_1> : kq32<LMC_DTYPE_Q5_1> {};

/* MLX affine, B bits: piece p is elements 32p.. of one group: 4·B bytes of the little-endian
 * code stream (rows are 4-byte aligned: the group is a multiple of 32), w = scale·q + bias. */
template <int TYPE> struct kqm {
    enum { RL = 32, NR = 1, RS = 0,
           B = TYPE == LMC_DTYPE_MLX8 ? 8 : TYPE == LMC_DTYPE_MLX6 ? 6 : (int)(TYPE - LMC_DTYPE_MLX2) + 2 };
    struct raw { uint32_t q[B]; float s, b; };
    static __device__ __forceinline__ int64_t elem0(int64_t p) { return p * 32; }
    static __device__ __forceinline__ void load(raw &r, const uint8_t *row, const lmc_cuda_w &w, int64_t rr,
                                                int64_t p) {
        const uint32_t *q = (const uint32_t *)(row + (size_t)p * 4 * B);
        if (B % 4 == 0) {
#pragma unroll
            for (int i = 0; i < B / 4; i++) {
                const uint4 v = __ldg((const uint4 *)q + i);
                r.q[4 * i] = v.x; r.q[4 * i + 1] = v.y; r.q[4 * i + 2] = v.z; r.q[4 * i + 3] = v.w;
            }
        } else if (B % 2 == 0) {
#pragma unroll
            for (int i = 0; i < B / 2; i++) {
                const uint2 v = __ldg((const uint2 *)q + i);
                r.q[2 * i] = v.x; r.q[2 * i + 1] = v.y;
            }
        } else {
#pragma unroll
            for (int i = 0; i < B; i++) r.q[i] = __ldg(q + i);
        }
        const int g = (int)(p * 32) >> (__ffs(w.group) - 1); /* the group is a power of two */
        r.s = ld_float(w.mlx_stype, (const char *)w.mlx_scales + (size_t)rr * w.mlx_snb1, g);
        r.b = ld_float(w.mlx_stype, (const char *)w.mlx_biases + (size_t)rr * w.mlx_snb1, g);
    }
    static __device__ __forceinline__ float dot(const raw &r, int64_t, const float *x, const float *sx) {
        float s = 0.0f;
        if (B == 8) { /* codes up to 255: 2^23 + q, exact, minus 2^23 */
#pragma unroll
            for (int w = 0; w < B; w++)
#pragma unroll
                for (int k = 0; k < 4; k++)
                    s = fmaf(__uint_as_float(__byte_perm(r.q[w], 0x4B000000u, 0x7440u | (unsigned)k)) - 8388608.0f,
                             x[4 * w + k], s);
            return fmaf(r.s, s, r.b * sx[0]);
        }
        if (B == 4) {
#pragma unroll
            for (int w = 0; w < B; w++) {
                const uint32_t lo = (r.q[w] & 0x0F0F0F0Fu) << 3, hi = (r.q[w] >> 1) & 0x78787878u;
#pragma unroll
                for (int k = 0; k < 4; k++) { /* byte k: elements 2k (low), 2k + 1 (high) */
                    s = fmaf(kq_h(lo, k), x[8 * w + 2 * k], s);
                    s = fmaf(kq_h(hi, k), x[8 * w + 2 * k + 1], s);
                }
            }
        } else if (B == 2) {
#pragma unroll
            for (int w = 0; w < B; w++)
#pragma unroll
                for (int sh = 0; sh < 4; sh++) { /* byte k: elements 4k + sh */
                    const uint32_t c = ((r.q[w] >> (2 * sh)) & 0x03030303u) << 5;
#pragma unroll
                    for (int k = 0; k < 4; k++) s = fmaf(kq_h(c, k), x[16 * w + 4 * k + sh], s);
                }
        } else {
#pragma unroll
            for (int k = 0; k < 32; k++) {
                const int bit = k * B, wi = bit >> 5, o = bit & 31;
                uint32_t v = r.q[wi] >> o;
                if (o + B > 32) v |= r.q[wi + 1] << (32 - o);
                s = fmaf(__uint_as_float(0x3F000000u | ((v & ((1u << B) - 1u)) << (23 - B))), x[k], s);
            }
        }
        return fmaf(r.s, kq_sum<B>(s, sx[0]), r.b * sx[0]);
    }
};
template <> struct kq<LMC_DTYPE_MLX2> : kqm<LMC_DTYPE_MLX2> {};
template <> struct kq<LMC_DTYPE_MLX3> : kqm<LMC_DTYPE_MLX3> {};
template <> struct kq<LMC_DTYPE_MLX4> : kqm<LMC_DTYPE_MLX4> {};
template <> struct kq<LMC_DTYPE_MLX5> : kqm<LMC_DTYPE_MLX5> {};
template <> struct kq<LMC_DTYPE_MLX6> : kqm<LMC_DTYPE_MLX6> {};
template <> struct kq<LMC_DTYPE_MLX8> : kqm<LMC_DTYPE_MLX8> {};

/* MXFP4: 32-element blocks of E2M1 codes with one E8M0 exponent; w = kvalue·2^(e-128) (ggml's
 * doubled values, core/quant.h). The 8 magnitudes {0,1,2,3,4,6,8,12} are two words of bytes:
 * one byte permute picks 4 at once (selectors: the codes' low 3 bits packed into nibbles), each
 * widened exactly through 2^23 + b and given the code's sign. MXFP4: ggml's 17-byte block (e,
 * then qs[16]: element k low nibble of qs[k], 16 + k high; byte loads: blocks are not aligned);
 * MXFP4_MLX: 16 code bytes (element 2k low nibble of byte k), the exponent from the aux. */
static __device__ __forceinline__ void mx_fma4(uint32_t nib, const float *x, int i0, int step, float &s) {
    const uint32_t m = nib & 0x07070707u, t = m | (m >> 4);
    const uint32_t sel = (t & 0xFFu) | ((t >> 8) & 0xFF00u);
    const uint32_t mag = __byte_perm(0x03020100u, 0x0C080604u, sel);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float v = __uint_as_float(__byte_perm(mag, 0x4B000000u, 0x7440u | (unsigned)k)) - 8388608.0f;
        const uint32_t sg = ((nib >> (8 * k + 3)) & 1u) << 31;
        s = fmaf(__uint_as_float(__float_as_uint(v) ^ sg), x[i0 + k * step], s);
    }
}
template <> struct kq<LMC_DTYPE_MXFP4> {
    enum { RL = 32, NR = 1, RS = 0 };
    struct raw { uint32_t q[4]; float d; };
    static __device__ __forceinline__ int64_t elem0(int64_t p) { return p * 32; }
    static __device__ __forceinline__ void load(raw &r, const uint8_t *row, const lmc_cuda_w &, int64_t, int64_t p) {
        const uint8_t *b = row + (size_t)p * 17;
        uint8_t u[17];
#pragma unroll
        for (int i = 0; i < 17; i++) u[i] = __ldg(b + i);
#pragma unroll
        for (int i = 0; i < 4; i++)
            r.q[i] = (uint32_t)u[1 + 4 * i] | ((uint32_t)u[2 + 4 * i] << 8) | ((uint32_t)u[3 + 4 * i] << 16) |
                     ((uint32_t)u[4 + 4 * i] << 24);
        r.d = mx_half(u[0], 0);
    }
    static __device__ __forceinline__ float dot(const raw &r, int64_t, const float *x, const float *) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) { /* bytes 4w..4w+3: elements 4w + k (low), 16 + 4w + k (high) */
            mx_fma4(r.q[w] & 0x0F0F0F0Fu, x, 4 * w, 1, s);
            mx_fma4((r.q[w] >> 4) & 0x0F0F0F0Fu, x, 16 + 4 * w, 1, s);
        }
        return r.d * s;
    }
};
template <> struct kq<LMC_DTYPE_MXFP4_MLX> {
    enum { RL = 32, NR = 1, RS = 0 };
    struct raw { uint32_t q[4]; float d; };
    static __device__ __forceinline__ int64_t elem0(int64_t p) { return p * 32; }
    static __device__ __forceinline__ void load(raw &r, const uint8_t *row, const lmc_cuda_w &w, int64_t rr,
                                                int64_t p) {
        const uint4 v = __ldg((const uint4 *)(row + (size_t)p * 16));
        r.q[0] = v.x; r.q[1] = v.y; r.q[2] = v.z; r.q[3] = v.w;
        r.d = mx_half(__ldg((const uint8_t *)w.mlx_scales + (size_t)rr * w.mlx_snb1 + (size_t)p), 1);
    }
    static __device__ __forceinline__ float dot(const raw &r, int64_t, const float *x, const float *) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) { /* byte 4w + k: elements 8w + 2k (low), 8w + 2k + 1 (high) */
            mx_fma4(r.q[w] & 0x0F0F0F0Fu, x, 8 * w, 2, s);
            mx_fma4((r.q[w] >> 4) & 0x0F0F0F0Fu, x, 8 * w + 1, 2, s);
        }
        return r.d * s;
    }
};

/* MXFP4 in the device form of either layout (cuda_common.cuh; the uploads' form unless
 * LMC_CUDA_MXFP4_INT8=0): reached when the int8 path does not take the product (activations too
 * long for shared memory, LMC_CUDA_QGEMV=off). 16 code bytes a block, the exponent where the
 * layout keeps it; codes widened through mx_int8. */
#define KQ_MX_DEV (-2)
template <> struct kq<KQ_MX_DEV> {
    enum { RL = 32, NR = 1, RS = 0 };
    struct raw { uint32_t q[4]; float d; };
    static __device__ __forceinline__ int64_t elem0(int64_t p) { return p * 32; }
    static __device__ __forceinline__ void load(raw &r, const uint8_t *, const lmc_cuda_w &w, int64_t rr, int64_t p) {
        const uint4 v = __ldg((const uint4 *)((const uint8_t *)w.data + (size_t)rr * (size_t)(w.ne0 / 2)) + p);
        r.q[0] = v.x; r.q[1] = v.y; r.q[2] = v.z; r.q[3] = v.w;
        r.d = mx_half(__ldg(mx_exps(w, w.data, rr) + p), w.type == LMC_DTYPE_MXFP4_MLX);
    }
    static __device__ __forceinline__ float dot(const raw &r, int64_t, const float *x, const float *) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) { /* word w: elements 4w + k (low half), 16 + 4w + k (high half) */
            int lo, hi;
            mx_int8(r.q[w], lo, hi);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                s = fmaf((float)(int8_t)(lo >> (8 * k)), x[4 * w + k], s);
                s = fmaf((float)(int8_t)(hi >> (8 * k)), x[16 + 4 * w + k], s);
            }
        }
        return r.d * s;
    }
};

/* One block: rows [blockIdx.x·R, + R) of w for NT tokens; y = (acc: y +) w·x. */
template <int TYPE, int NT, int R>
__global__ void __launch_bounds__(KQ_THREADS) k_gemv_kq(float *y, lmc_cuda_w w, const float *x, int acc_out) {
    typedef kq<TYPE> F;
    __shared__ float red[KQ_THREADS / 32][R * NT];
    const int64_t K = w.ne0, out = w.ne1, np = K / 32, r0 = (int64_t)blockIdx.x * R;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    for (int64_t p = threadIdx.x; p < np; p += blockDim.x) {
        typename F::raw raw[R];
#pragma unroll
        for (int r = 0; r < R; r++) { /* every row's loads in flight before any is used */
            const int64_t rr = r0 + r < out ? r0 + r : out - 1;
            F::load(raw[r], (const uint8_t *)w.data + (size_t)rr * w.nb1, w, rr, p);
        }
        const int64_t e0 = F::elem0(p);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float xv[32], sx[F::NR];
#pragma unroll
            for (int q = 0; q < F::NR; q++) {
                const float4 *xp = (const float4 *)(x + (int64_t)t * K + e0 + (int64_t)q * F::RS);
                float s = 0.0f;
#pragma unroll
                for (int k = 0; k < F::RL / 4; k++) {
                    const float4 v = __ldg(xp + k);
                    float *d = xv + q * F::RL + 4 * k;
                    d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;
                    s += (v.x + v.y) + (v.z + v.w);
                }
                sx[q] = s;
            }
#pragma unroll
            for (int r = 0; r < R; r++) acc[r][t] += F::dot(raw[r], p, xv, sx);
        }
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0) red[wid][r * NT + t] = v;
        }
    __syncthreads();
    if (threadIdx.x < R * NT) {
        const int r = threadIdx.x / NT, t = threadIdx.x % NT;
        float v = 0.0f;
        for (int k = 0; k < nw; k++) v += red[k][threadIdx.x];
        if (r0 + r < out) {
            float *o = y + (int64_t)t * out + r0 + r;
            *o = acc_out ? *o + v : v;
        }
    }
}

/* Rows per block: 4 at one token (an activation piece read serves 4 rows), 2 beyond (registers:
 * 4 rows of 2 tokens took 220-240). */
template <int TYPE, int NT>
static void kq_launch_nt(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int acc) {
    constexpr int R = NT == 1 ? 4 : 2;
    const int64_t np = w->ne0 / 32;
    const int th = np >= KQ_THREADS ? KQ_THREADS : (int)((np + 31) / 32 * 32);
    const unsigned g = (unsigned)((w->ne1 + R - 1) / R);
    k_gemv_kq<TYPE, NT, R><<<g, th, 0, s>>>(y, *w, x, acc);
}

template <int TYPE>
static void kq_launch(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n, int acc) {
    switch (n) {
    case 1: kq_launch_nt<TYPE, 1>(s, y, w, x, acc); break;
    case 2: kq_launch_nt<TYPE, 2>(s, y, w, x, acc); break;
    case 3: kq_launch_nt<TYPE, 3>(s, y, w, x, acc); break;
    case 4: kq_launch_nt<TYPE, 4>(s, y, w, x, acc); break;
    case 5: kq_launch_nt<TYPE, 5>(s, y, w, x, acc); break;
    case 6: kq_launch_nt<TYPE, 6>(s, y, w, x, acc); break;
    case 7: kq_launch_nt<TYPE, 7>(s, y, w, x, acc); break;
    default: kq_launch_nt<TYPE, 8>(s, y, w, x, acc); break;
    }
}

/* Row-start alignment each format's loads need (bytes). */
static int kq_align(int type) {
    switch (type) {
    case LMC_DTYPE_Q4_K: case LMC_DTYPE_Q5_K: return 16;
    case LMC_DTYPE_Q2_K: case LMC_DTYPE_Q4_1: case LMC_DTYPE_Q5_1: return 4;
    case LMC_DTYPE_Q3_K: case LMC_DTYPE_Q6_K: case LMC_DTYPE_Q5_0: return 2;
    case LMC_DTYPE_MLX4: case LMC_DTYPE_MLX8: return 16; /* uint4 loads */
    case LMC_DTYPE_MLX2: case LMC_DTYPE_MLX6: return 8;  /* uint2 */
    case LMC_DTYPE_MLX3: case LMC_DTYPE_MLX5: return 4;
    case LMC_DTYPE_MXFP4: return 1;      /* byte loads */
    case LMC_DTYPE_MXFP4_MLX: return 16; /* uint4 loads */
    }
    return 0;
}

extern "C" int lmc_cuda_gemv_kq_type(int type) { return kq_align(type) != 0; }

extern "C" int lmc_cuda_gemv_kq_ok(const lmc_cuda_w *w, const float *x, int64_t n_tok) {
    static int off = -1; /* LMC_CUDA_KQGEMV=0: these products go the dequantize + GEMM way (A/B) */
    if (off < 0) off = getenv("LMC_CUDA_KQGEMV") && !strcmp(getenv("LMC_CUDA_KQGEMV"), "0");
    const int al = kq_align(w->type);
    if (off || !al || n_tok < 1 || n_tok > LMC_CUDA_GEMV_MAX_TOKENS || w->ne0 <= 0 || w->ne1 <= 0) return 0;
    if (((uintptr_t)x & 15) || ((uintptr_t)w->data & 15) || w->nb1 % (size_t)al) return 0;
    if (w->type >= LMC_DTYPE_MLX2 && w->type <= LMC_DTYPE_MLX8)
        return w->group >= 32 && !(w->group & (w->group - 1)) && w->ne0 % w->group == 0 && w->mlx_scales &&
               w->mlx_biases;
    if (w->type == LMC_DTYPE_MXFP4_MLX) return w->ne0 % 32 == 0 && w->group == 32 && w->mlx_scales;
    const int64_t blk = w->type >= LMC_DTYPE_Q2_K && w->type <= LMC_DTYPE_Q6_K ? 256 : 32;
    return w->ne0 % blk == 0;
}

extern "C" void lmc_cuda_gemv_kq(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n_tok,
                                 int acc) {
    switch (w->type) {
    case LMC_DTYPE_Q2_K: kq_launch<LMC_DTYPE_Q2_K>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_Q3_K: kq_launch<LMC_DTYPE_Q3_K>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_Q4_K: kq_launch<LMC_DTYPE_Q4_K>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_Q5_K: kq_launch<LMC_DTYPE_Q5_K>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_Q6_K: kq_launch<LMC_DTYPE_Q6_K>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_Q4_1: kq_launch<LMC_DTYPE_Q4_1>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_Q5_0: kq_launch<LMC_DTYPE_Q5_0>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_Q5_1: kq_launch<LMC_DTYPE_Q5_1>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_MLX2: kq_launch<LMC_DTYPE_MLX2>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_MLX3: kq_launch<LMC_DTYPE_MLX3>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_MLX4: kq_launch<LMC_DTYPE_MLX4>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_MLX5: kq_launch<LMC_DTYPE_MLX5>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_MLX6: kq_launch<LMC_DTYPE_MLX6>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_MLX8: kq_launch<LMC_DTYPE_MLX8>(s, y, w, x, n_tok, acc); break;
    case LMC_DTYPE_MXFP4:
    case LMC_DTYPE_MXFP4_MLX:
        if (w->repacked) kq_launch<KQ_MX_DEV>(s, y, w, x, n_tok, acc);
        else if (w->type == LMC_DTYPE_MXFP4) kq_launch<LMC_DTYPE_MXFP4>(s, y, w, x, n_tok, acc);
        else kq_launch<LMC_DTYPE_MXFP4_MLX>(s, y, w, x, n_tok, acc);
        break;
    }
}
