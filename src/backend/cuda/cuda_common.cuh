/* cuda_common.cuh — device helpers shared by the CUDA kernels (one
 * definition each; every function here is static or inline).
 *
 * Conversions are the exact ones of core/dtype.h (bf16 is a shift, f16 goes
 * through the hardware conversion, subnormals included). w_elem() reads
 * element i of row r of any weight dtype the backend accepts (f32/f16/bf16,
 * repacked Q8_0/Q4_0 and MXFP4, the other GGUF blocks in their checkpoint layout, MLX
 * affine): it is the generic path (embedding rows, dequantization for the
 * GEMM); the decode kernels have their own vector loads.
 */
#ifndef LMC_CUDA_COMMON_CUH
#define LMC_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_kernels.h"

#define LMC_CUDA_BLOCK 256

/* Programmatic dependent launch (sm_90+). A kernel started by lmc_launch() may begin while the
 * kernel before it on the stream is still running (lmc_cuda_pdl(): LMC_CUDA_PDL=0 turns it off).
 * Such a kernel calls pdl_wait() in every thread before it reads anything an earlier kernel wrote
 * and before it writes anything (weights, constant for the step, may be loaded before: that load
 * then overlaps the previous kernel's tail); pdl_wait() returns once the previous grid has
 * finished and its writes are visible, so the chain stays ordered end to end. pdl_next() lets
 * the next kernel's blocks be scheduled as this grid's blocks leave. Outside such a launch both
 * are no-ops. */
static __device__ __forceinline__ void pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_next(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* A 16-byte load of a weight the decode products stream once a step: past L1, and first to leave
 * L2 (an evict_first policy), so that what a step reuses — the kernels' code, activations, the KV
 * cache's rows, norm weights, the next weights the attention kernel prefetched — stays in L2 while
 * a layer's 100–500 MB of weights pass through it. Before it, decode attention's cost in a step
 * was its arithmetic's long unrolled code path rather than its loads, and ncu showed the kernel
 * stalled on instruction fetch; Llama-8B decode measured +3.5% (bf16) to +8% (Q4_0) with it
 * (docs/BENCHMARKS.md, session 24). Not in k_mmqp: its cp.async with an L2 cache hint stopped
 * with an illegal instruction on the H200. */
static __device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint4 v;
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(pol));
    return v;
#else
    return __ldg(p);
#endif
}

/* kernel<<<grid, block, smem, s>>>(args...), with the programmatic-serialization attribute when
 * lmc_cuda_pdl() says so. Only for kernels that call pdl_wait() as described above. Returns the
 * launch's error (also left for cudaGetLastError). */
template <typename... P, typename... A>
static cudaError_t lmc_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A... args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = lmc_cuda_pdl() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* Thread i of n (any grid shape) asks the L2 for its share of the regions of s, in units of at most
 * LMC_L2_PIECE bytes (unit j of piece k: [k·stride + j·LMC_L2_PIECE, …) within the piece and the
 * region; starts rounded up and ends down to 16 bytes): bulk prefetches, nothing waited for, nothing
 * written, so it only warms the cache for a later kernel. The regions are indexed by constants only
 * (a kernel parameter whose address is taken costs its kernel registers). */
/* Units of at most LMC_L2_PIECE bytes a region's pieces take (what l2_prefetch hands out). */
static __host__ __device__ __forceinline__ int64_t l2_units(const lmc_cuda_l2 &g) {
    return (int64_t)((g.piece + LMC_L2_PIECE - 1) / LMC_L2_PIECE) * (int64_t)((g.bytes + g.stride - 1) / g.stride);
}

static __device__ __forceinline__ void l2_prefetch(const lmc_cuda_l2set &s, int64_t i, int64_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#pragma unroll
    for (int q = 0; q < LMC_CUDA_L2_REGIONS; q++) {
        if (q >= s.n) break;
        const lmc_cuda_l2 g = s.r[q];
        const int64_t per = (int64_t)((g.piece + LMC_L2_PIECE - 1) / LMC_L2_PIECE), units = l2_units(g);
        for (int64_t u = i; u < units; u += n) {
            const size_t k = (size_t)(u / per), j = (size_t)(u % per) * LMC_L2_PIECE;
            size_t lo = k * g.stride + j, hi = lo + (g.piece - j < LMC_L2_PIECE ? g.piece - j : LMC_L2_PIECE);
            if (hi > g.bytes) hi = g.bytes;
            const uintptr_t a = ((uintptr_t)g.p + lo + 15) & ~(uintptr_t)15, e = ((uintptr_t)g.p + hi) & ~(uintptr_t)15;
            if (e > a) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"((unsigned)(e - a)) : "memory");
        }
        i -= units % n; /* the next region's units continue where this one's ended */
        if (i < 0) i += n;
    }
#else
    (void)s; (void)i; (void)n;
#endif
}

static __device__ __forceinline__ float bf16_to_f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
static __device__ __forceinline__ float f16_to_f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* f32 → bf16, round to nearest even, quiet NaN (as lmc_f32_to_bf16) */
static __device__ __forceinline__ uint16_t f_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* element i of a float vector of dtype t */
static __device__ __forceinline__ float ld_float(int t, const void *p, int64_t i) {
    if (t == LMC_DTYPE_BF16) return bf16_to_f(((const uint16_t *)p)[i]);
    if (t == LMC_DTYPE_F16) return f16_to_f(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static __device__ __forceinline__ float h2f_at(const uint8_t *p) {
    return f16_to_f((uint16_t)(p[0] | (p[1] << 8)));
}

/* Rope (backend.h rope): the angle pos · inv_freq[i] in f32, its cos and sin times the attention
 * factor, and the rotation of pair i of one head (interleaved: dims 2i, 2i + 1; else i, i + half).
 * One definition for the kernels that rotate (k_rope, k_rope_store), so that they give the same
 * bits; the products are rounded before the fused add (no contraction left to the compiler). */
static __device__ __forceinline__ void rope_cs(float p, float inv, float af, float *c, float *s) {
    const float ang = p * inv;
    *c = cosf(ang) * af;
    *s = sinf(ang) * af;
}

static __device__ __forceinline__ void rope_rot(float *v, int i, int half, int interleaved, float c, float s) {
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = fmaf(x0, c, -__fmul_rn(x1, s));
    v[i1] = fmaf(x1, c, __fmul_rn(x0, s));
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* 6-bit scale and min j of a Q4_K/Q5_K super-block */
static __device__ __forceinline__ void k4_scale_min(int j, const uint8_t *s, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static __device__ __forceinline__ int q3k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
    int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Element i (0..255) of a K-quant super-block at b. */
static __device__ float kquant_elem(int type, const uint8_t *b, int e) {
    switch (type) {
    case LMC_DTYPE_Q2_K: {
        const int half = e >> 7, r = e & 127, sh = r >> 5, part = (r >> 4) & 1, l = r & 15;
        const uint8_t s = b[half * 8 + sh * 2 + part];
        const float d = h2f_at(b + 80), dmin = h2f_at(b + 82);
        const int q = (b[16 + half * 32 + l + 16 * part] >> (2 * sh)) & 3;
        return d * (float)(s & 0x0F) * (float)q - dmin * (float)(s >> 4);
    }
    case LMC_DTYPE_Q3_K: {
        const int half = e >> 7, r = e & 127, sh = r >> 5, part = (r >> 4) & 1, l = r & 15;
        const float d = h2f_at(b + 108);
        const float dl = d * (float)q3k_scale(b + 96, half * 8 + sh * 2 + part);
        const int idx = 16 * part + l;
        const int m = 1 << (half * 4 + sh);
        const int q = ((b[32 + half * 32 + idx] >> (2 * sh)) & 3) - ((b[idx] & m) ? 0 : 4);
        return dl * (float)q;
    }
    case LMC_DTYPE_Q4_K:
    case LMC_DTYPE_Q5_K: {
        const int c = e >> 6, w = e & 63, hi = w >> 5, l = w & 31;
        const float d = h2f_at(b), dmin = h2f_at(b + 2);
        int sc, mn;
        k4_scale_min(2 * c + hi, b + 4, &sc, &mn);
        const uint8_t *q = b + (type == LMC_DTYPE_Q4_K ? 16 : 48) + 32 * c;
        int v = hi ? (q[l] >> 4) : (q[l] & 0x0F);
        if (type == LMC_DTYPE_Q5_K) {
            const int u = (hi ? 2 : 1) << (2 * c);
            if (b[16 + l] & u) v += 16;
        }
        return d * (float)sc * (float)v - dmin * (float)mn;
    }
    case LMC_DTYPE_Q6_K: {
        const int half = e >> 7, r = e & 127, quarter = r >> 5, l = r & 31, is = l >> 4;
        const uint8_t *ql = b + half * 64, *qh = b + 128 + half * 32;
        const int8_t *sc = (const int8_t *)(b + 192) + half * 8;
        const float d = h2f_at(b + 208);
        int q;
        switch (quarter) {
        case 0: q = (ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4); break;
        case 1: q = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4); break;
        case 2: q = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4); break;
        default: q = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4); break;
        }
        return d * (float)sc[is + 2 * quarter] * (float)(q - 32);
    }
    }
    return 0.0f;
}

/* MXFP4: E2M1 code c as ggml's kvalue (twice the value: 0, ±1, ±2, ±3, ±4, ±6, ±8, ±12) */
static __device__ __forceinline__ int mx_kvalue(unsigned c) {
    const int m = (int)(c & 7u), k = m < 2 ? m : (2 + (m & 1)) << ((m >> 1) - 1);
    return (c & 8u) ? -k : k;
}
/* the half scale 2^(e-128) of an E8M0 exponent (core/quant.h): ggml's (e = 255: 2^127) or mlx's (inf) */
static __device__ __forceinline__ float mx_half(unsigned e, int mlx) {
    if (mlx && e == 255u) return __uint_as_float(0x7f800000u);
    return __uint_as_float(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
}

/* MXFP4 device form (both layouts, cuda_qv_mxfp4.cu; lmc_cuda_w.repacked set): per 32-element block
 * 16 code bytes, row r at r·ne0/2, as four words: word k holds the codes of elements 4k + p in bits
 * 4p..4p+3 and of elements 16 + 4k + p in bits 16 + 4p.. (p < 4), so that one byte permute on a
 * word's low (high) half picks four values of the Q4_0 activation plane's low (high) run. The
 * exponents: ggml's an exponent plane [ne1, ne0/32] at data + scale_off, mlx's the aux (U8). */
static __device__ __forceinline__ const uint8_t *mx_exps(const lmc_cuda_w &w, const void *data, int64_t r) {
    if (w.type == LMC_DTYPE_MXFP4) return (const uint8_t *)data + w.scale_off + (size_t)r * (size_t)(w.ne0 / 32);
    return (const uint8_t *)w.mlx_scales + (size_t)r * w.mlx_snb1;
}
/* The eight codes of a device-form word as int8 kvalues: lo the four of its low half, hi of its
 * high half. Magnitudes and negatives from two byte tables (3-bit selectors), the sign bit of each
 * code choosing between them in a third permute. */
static __device__ __forceinline__ void mx_int8(uint32_t q, int &lo, int &hi) {
    const uint32_t P0 = 0x03020100u, P1 = 0x0C080604u, N0 = 0xFDFEFF00u, N1 = 0xF4F8FAFCu;
    const uint32_t s = q & 0x77777777u;
    const uint32_t pl = __byte_perm(P0, P1, s & 0xFFFFu), nl = __byte_perm(N0, N1, s & 0xFFFFu);
    const uint32_t ph = __byte_perm(P0, P1, s >> 16), nh = __byte_perm(N0, N1, s >> 16);
    lo = (int)__byte_perm(pl, nl, 0x3210u | ((q >> 1) & 0x4444u));
    hi = (int)__byte_perm(ph, nh, 0x3210u | ((q >> 17) & 0x4444u));
}
/* Code of element j (< 32) of a device-form block b. */
static __device__ __forceinline__ unsigned mx_code(const uint8_t *b, int j) {
    const int h = j >> 4, k = (j & 15) >> 2, p = j & 3;
    return (b[4 * k + 2 * h + (p >> 1)] >> (4 * (p & 1))) & 15u;
}
/* Code c with exponent e as the CPU dequantizes it: ggml's kvalue·2^(e-128); mlx's sign on the
 * magnitude (code 8 is -0, e = 255 infinite). */
static __device__ __forceinline__ float mx_value(unsigned c, unsigned e, int mlx) {
    if (!mlx) return (float)mx_kvalue(c) * mx_half(e, 0);
    const int k = mx_kvalue(c & 7u);
    return ((c & 8u) ? -(float)k : (float)k) * mx_half(e, 1);
}

/* The activations' int8 quantization shared by k_gemv_q and k_mmq_quant (one definition: the same
 * codes on both paths). A 32-element block spreads over four adjacent lanes, eight values a, b a
 * lane; d = amax/127 over the block, the codes rint(v·127/amax) packed four to a word (w0: a, w1:
 * b, the first value in the lowest byte), sum = Σ of the block's 32 codes. Every lane of the warp
 * takes part (shuffles). */
struct i8_piece {
    int w0, w1, sum;
    float d;
};
static __device__ __forceinline__ int i8_pack4(int a, int b, int c, int d) {
    return (int)__byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}
static __device__ __forceinline__ i8_piece i8_quantize_piece(float4 a, float4 b) {
    float m = fmaxf(fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))),
                    fmaxf(fmaxf(fabsf(b.x), fabsf(b.y)), fmaxf(fabsf(b.z), fabsf(b.w))));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    const float id = m > 0.0f ? 127.0f / m : 0.0f;
    i8_piece r;
    r.d = m / 127.0f;
    r.w0 = i8_pack4(__float2int_rn(a.x * id), __float2int_rn(a.y * id), __float2int_rn(a.z * id),
                    __float2int_rn(a.w * id));
    r.w1 = i8_pack4(__float2int_rn(b.x * id), __float2int_rn(b.y * id), __float2int_rn(b.z * id),
                    __float2int_rn(b.w * id));
    int sum = __dp4a(r.w0, 0x01010101, __dp4a(r.w1, 0x01010101, 0));
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    r.sum = sum;
    return r;
}

/* Element i of row r of weight w (any accepted dtype). */
static __device__ float w_elem(const lmc_cuda_w &w, int64_t r, int64_t i) {
    const int t = w.type;
    if (t == LMC_DTYPE_F32 || t == LMC_DTYPE_F16 || t == LMC_DTYPE_BF16)
        return ld_float(t, (const char *)w.data + (size_t)r * w.nb1, i);
    if (w.repacked && (t == LMC_DTYPE_MXFP4 || t == LMC_DTYPE_MXFP4_MLX)) {
        const uint8_t *b = (const uint8_t *)w.data + (size_t)r * (size_t)(w.ne0 / 2) + (size_t)(i / 32) * 16;
        return mx_value(mx_code(b, (int)(i & 31)), mx_exps(w, w.data, r)[i / 32], t == LMC_DTYPE_MXFP4_MLX);
    }
    if (w.repacked) {
        const uint16_t *sc = (const uint16_t *)((const char *)w.data + w.scale_off);
        const float d = f16_to_f(sc[r * (w.ne0 / 32) + i / 32]);
        if (t == LMC_DTYPE_Q8_0) return d * (float)((const int8_t *)w.data)[r * w.ne0 + i];
        const uint8_t *q = (const uint8_t *)w.data + r * (w.ne0 / 2) + (i / 32) * 16;
        const int j = (int)(i & 31);
        const int v = j < 16 ? (q[j] & 0x0F) : (q[j - 16] >> 4);
        return d * (float)(v - 8);
    }
    const uint8_t *row = (const uint8_t *)w.data + (size_t)r * w.nb1;
    if (t >= LMC_DTYPE_MLX2 && t <= LMC_DTYPE_MLX8) {
        const int bits = t == LMC_DTYPE_MLX8 ? 8 : t == LMC_DTYPE_MLX6 ? 6 : (int)(t - LMC_DTYPE_MLX2) + 2;
        const int64_t bit = i * bits, byte = bit >> 3;
        const int off = (int)(bit & 7);
        unsigned v = row[byte] >> off;
        if (off + bits > 8) v |= (unsigned)row[byte + 1] << (8 - off);
        v &= (1u << bits) - 1;
        const int64_t g = i / w.group;
        const char *sr = (const char *)w.mlx_scales + (size_t)r * w.mlx_snb1;
        const char *br = (const char *)w.mlx_biases + (size_t)r * w.mlx_snb1;
        return ld_float(w.mlx_stype, sr, g) * (float)v + ld_float(w.mlx_stype, br, g);
    }
    if (t >= LMC_DTYPE_Q2_K && t <= LMC_DTYPE_Q6_K) {
        const size_t bb = t == LMC_DTYPE_Q2_K ? 84 : t == LMC_DTYPE_Q3_K ? 110 : t == LMC_DTYPE_Q4_K ? 144
                        : t == LMC_DTYPE_Q5_K ? 176 : 210;
        return kquant_elem(t, row + (size_t)(i / 256) * bb, (int)(i & 255));
    }
    /* 32-element GGUF blocks in checkpoint layout */
    const int j = (int)(i & 31);
    if (t == LMC_DTYPE_MXFP4) { /* {e, qs[16]}: element j low nibble of qs[j], 16 + j high */
        const uint8_t *b = row + (size_t)(i / 32) * 17;
        const unsigned c = j < 16 ? b[1 + j] & 15u : b[1 + j - 16] >> 4;
        return (float)mx_kvalue(c) * mx_half(b[0], 0);
    }
    if (t == LMC_DTYPE_MXFP4_MLX) { /* 16 code bytes (element 2k low nibble of byte k), exponents in the aux */
        const unsigned c = (row[i / 2] >> (4 * (i & 1))) & 15u;
        const unsigned e = ((const uint8_t *)w.mlx_scales)[(size_t)r * w.mlx_snb1 + (size_t)(i / 32)];
        const int k = mx_kvalue(c & 7u);
        return ((c & 8u) ? -(float)k : (float)k) * mx_half(e, 1); /* code 8 is -0, as mlx's table */
    }
    switch (t) {
    case LMC_DTYPE_Q8_0: {
        const uint8_t *b = row + (size_t)(i / 32) * 34;
        return h2f_at(b) * (float)(int8_t)b[2 + j];
    }
    case LMC_DTYPE_Q4_0: {
        const uint8_t *b = row + (size_t)(i / 32) * 18;
        const int v = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
        return (float)(v - 8) * h2f_at(b);
    }
    case LMC_DTYPE_Q4_1: {
        const uint8_t *b = row + (size_t)(i / 32) * 20;
        const int v = j < 16 ? (b[4 + j] & 0x0F) : (b[4 + j - 16] >> 4);
        return (float)v * h2f_at(b) + h2f_at(b + 2);
    }
    case LMC_DTYPE_Q5_0:
    case LMC_DTYPE_Q5_1: {
        const int has_min = t == LMC_DTYPE_Q5_1;
        const uint8_t *b = row + (size_t)(i / 32) * (has_min ? 24 : 22);
        const uint8_t *p = b + (has_min ? 4 : 2);
        const uint32_t qh = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
        const int lo = j < 16 ? (p[4 + j] & 0x0F) : (p[4 + j - 16] >> 4);
        const int x = lo | (int)(((qh >> j) & 1u) << 4);
        if (has_min) return (float)x * h2f_at(b) + h2f_at(b + 2);
        return (float)(x - 16) * h2f_at(b);
    }
    }
    return 0.0f;
}

#endif
