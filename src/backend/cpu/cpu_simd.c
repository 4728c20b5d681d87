/* cpu_simd.c — AVX-512 decode (matrix-vector) kernels on weights in storage format.
 *
 * Four output rows at a time share each load of the activations; a thread reads its rows
 * as 4 stretches side by side (one row of each per call) with a software prefetch 4 KB
 * ahead in each: one core reads memory ~1.4x faster from 4 places than from one.
 *   BF16  f32 activations; two 256-bit loads of 16 bf16 each, widened by vpmovzxwd and
 *         `<< 16` (exact: f32 products of exact bf16→f32 values, f32 accumulation, as the
 *         reference asks). One 512-bit load split by `<< 16` and `& 0xffff0000` into the
 *         even and odd elements (activations de-interleaved per 32, as the AVX2 tier still
 *         takes them) ran at half the rate on the AMD EPYC VM (bench_matmul, one core: 20
 *         against 35–41 GB/s out of cache; docs/BENCHMARKS.md, session 24).
 *   F16   f32 activations; vcvtph2ps.
 *   Q8_0, Q4_0, MLX4, MLX8, Q4_K, Q5_K, Q6_K  activations quantized to Q8_0 blocks once per matmul
 *         (as ggml does for its integer dot products): AVX512-VNNI vpdpbusd of unsigned
 *         codes (Q8_0: flipped by +128) against the int8 activations, laid out per 128
 *         elements so that whole 64-byte code vectors meet them (vpermt2b gathers the
 *         codes of 18- and 34-byte blocks), offsets through accumulators that start at
 *         -offset·Σx, one f32 step per 2-4 lanes of a block (block scale × activation
 *         scale); MLX biases and K-quant mins through the quantized block sums. Each
 *         kernel equals the product of the dequantized weights and the dequantized
 *         activations up to f32 rounding (test_quant: ≤ 1e-7 of Σ|w·x|); against the
 *         exact activations the error is ~1e-3 of Σ|w·x|. MLX8's codes go into vpdpbusd
 *         as they are.
 *   MXFP4, MXFP4_MLX  Q8_0 activations laid out as for Q4_0 (ggml block: low nibbles are
 *         elements 0..15) or MLX4 (mlx / Hugging Face: low nibbles are the even elements);
 *         one vpshufb maps the codes to E2M1·2 + 12 (0..24, unsigned for vpdpbusd), the
 *         accumulator starts at -12·Σx per lane; each lane is scaled by its block's
 *         2^(e-128) times the activation scale.
 *   Q4_0R, Q8_0R  (Q4_0 / Q8_0 as the backend regroups them on this tier) cpu_qr.c's kernels, on
 *         activations prepared here per 16 blocks (qr_prepare_avx512).
 * CPUs without AVX-512 VNNI+VBMI but with AVX2 take cpu_avx2.c's kernels (Q8_0 activations
 * in element order for Q8_0 / Q4_0, f32 for the others); other types use cpu_matmul.c's
 * generic path.
 */
#include "cpu_kernels.h"
#include "cpu_avx2.h"
#include "core/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The kernels are compiled for AVX-512 (+VNNI, F16C) or AVX2 whatever -march says and chosen
 * at run time from CPUID, so one binary runs everywhere; lmc_cpu_simd_set_level() caps the tier
 * (tests use it to check the AVX2 and generic paths on AVX-512 machines). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LMC_HAVE_AVX512 1
#endif

static int simd_level = -1; /* -1: not probed yet, else an LMC_SIMD_* tier */
static int bf16_act;          /* BF16 weights meet activations rounded to bf16 (lmc_cpu_simd_set_bf16_act) */
static void simd_probe(void);
static int n_streams = 4;     /* row stretches one thread reads side by side (1, 2 or 4) */
/* Software prefetch distance in each stretch. 1 KB, not 4: on the 2-core AMD EPYC VM, decode steps
 * of one process alternating the two (docs/BENCHMARKS.md, session 22) ran Q8_0/Q4_0 2-6% faster
 * (Qwen2.5-0.5B shape, 1 and 2 threads), bf16 alike; earlier sweeps of one product had measured
 * 2-16 KB alike (session 5). */
static size_t pf_bytes = 1024;

/* Byte-gather indices for vpermt2b (two 64-byte loads → one vector of codes) and word-gather
 * indices for the f16 block scales, filled once by lmc_cpu_simd_set_level. Byte 16j + m of a
 * gathered vector is code byte m of block j (first halves) or 16 + m (second halves, Q8_0).
 * Q4_0 (4 blocks of 18 bytes): loads at blk and blk + 8; scale lane l ← block l/4 from blk.
 * Q8_0 (4 blocks of 34 bytes): first halves from (blk, blk + 64), second halves from
 * (blk + 8, blk + 72); scale lane l ← block l/4 from (blk, blk + 64). */
static uint8_t q4_qidx[64], q8_aidx[64], q8_bidx[64], mx_qidx[64];
static uint16_t q4_sidx[32], q8_sidx[32];
/* MXFP4 half scales 2^(e-128) by exponent byte: ggml's block, mlx's layout (core/quant.h). */
static float mx_half[2][256];

static void fill_tables(void) {
    for (int i = 0; i < 64; i++) {
        const int j = i / 16, m = i % 16;
        const int s4 = 18 * j + 2 + m; /* byte of the 72 */
        q4_qidx[i] = (uint8_t)(s4 < 64 ? s4 : 64 + s4 - 8);
        q8_aidx[i] = (uint8_t)(34 * j + 2 + m); /* < 120: (blk, blk + 64) as is */
        const int s8 = 34 * j + 18 + m;         /* 18..135 */
        q8_bidx[i] = (uint8_t)(s8 < 72 ? s8 - 8 : 64 + s8 - 72);
        const int sm = 17 * j + 1 + m; /* MXFP4: code byte m of block j of the 68, loads at blk and blk + 8 */
        mx_qidx[i] = (uint8_t)(sm < 64 ? sm : 64 + sm - 8);
    }
    for (int e = 0; e < 256; e++) {
        mx_half[0][e] = lmc_e8m0_half_ggml((uint8_t)e);
        mx_half[1][e] = lmc_e8m0_half_mlx((uint8_t)e);
    }
    for (int l = 0; l < 32; l++) {
        const int j = (l / 4) % 4;
        q4_sidx[l] = (uint16_t)(9 * j);
        q8_sidx[l] = (uint16_t)(17 * j); /* bytes 0, 34 of blk; 68, 102 = words 2, 19 of blk + 64 */
    }
}

int lmc_cpu_simd_set_level(int max_level) {
    int best = LMC_SIMD_OFF;
#ifdef LMC_HAVE_AVX512
    __builtin_cpu_init();
    if (lmc_cpu_avx2_supported()) best = LMC_SIMD_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"))
        best = LMC_SIMD_AVX512;
#endif
    simd_level = max_level < best ? max_level : best;
    if (simd_level == LMC_SIMD_AVX512) fill_tables();
    return simd_level;
}

int lmc_cpu_simd_set_bf16_act(int on) {
    if (simd_level < 0) simd_probe();
#ifdef LMC_HAVE_AVX512
    bf16_act = on && simd_level == LMC_SIMD_AVX512 && __builtin_cpu_supports("avx512bf16");
#else
    bf16_act = 0;
#endif
    return bf16_act;
}

int lmc_cpu_simd_bf16_act(void) { return bf16_act; }

void lmc_cpu_simd_enable(int on) { lmc_cpu_simd_set_level(on ? LMC_SIMD_AVX512 : LMC_SIMD_OFF); }

/* First use: the best tier, capped by the environment variable LMC_SIMD (off, avx2, avx512)
 * so that the tiers can be compared on one machine. */
static void simd_probe(void) {
    const char *e = getenv("LMC_SIMD");
    int cap = LMC_SIMD_AVX512;
    const char *st = getenv("LMC_STREAMS"), *pf = getenv("LMC_PF");
    if (st && (atoi(st) == 1 || atoi(st) == 2 || atoi(st) == 4)) n_streams = atoi(st);
    if (pf) pf_bytes = (size_t)atol(pf);
    if (e && !strcmp(e, "off")) cap = LMC_SIMD_OFF;
    else if (e && !strcmp(e, "avx2")) cap = LMC_SIMD_AVX2;
    lmc_cpu_simd_set_level(cap);
}

/* Per-token layout of prepared activations. */
typedef enum { ACT_NONE, ACT_F32_PERM, ACT_F32, ACT_BF16, ACT_Q8, ACT_QR } act_kind;

static act_kind kind_of(const lmc_tensor *w) {
    switch (w->type) {
    case LMC_DTYPE_BF16: case LMC_DTYPE_BF16P: /* BF16P: AVX-512 only (cpu_rebind.c); AVX2: pairs */
        return simd_level != LMC_SIMD_AVX512 ? ACT_F32_PERM : bf16_act ? ACT_BF16 : ACT_F32;
    case LMC_DTYPE_F16: return ACT_F32;
    case LMC_DTYPE_Q8_0: case LMC_DTYPE_Q4_0: return ACT_Q8;
    case LMC_DTYPE_MLX4: return simd_level == LMC_SIMD_AVX512 ? ACT_Q8 : ACT_F32_PERM; /* VNNI kernel: Q8 */
    case LMC_DTYPE_Q4_K: case LMC_DTYPE_Q5_K: return simd_level == LMC_SIMD_AVX512 ? ACT_Q8 : ACT_F32;
    case LMC_DTYPE_Q6_K: return simd_level == LMC_SIMD_AVX512 ? ACT_Q8 : ACT_F32;
    case LMC_DTYPE_MLX8: return simd_level == LMC_SIMD_AVX512 ? ACT_Q8 : ACT_F32;
    case LMC_DTYPE_MXFP4: case LMC_DTYPE_MXFP4_MLX: return ACT_Q8;
    case LMC_DTYPE_Q4_0R: case LMC_DTYPE_Q8_0R: return simd_level == LMC_SIMD_AVX512 ? ACT_QR : ACT_NONE; /* cpu_qr.c */
    default: return ACT_NONE;
    }
}

/* Elements per prepared partial sum of x (0: none): the MLX group, a Q4_K sub-block (32), a Q6_K one (16). */
static int64_t sum_span(const lmc_tensor *w) {
    if (lmc_dtype_is_mlx(w->type)) return ((const lmc_quant_mlx *)w->aux)->group_size;
    if (w->type == LMC_DTYPE_Q4_K || w->type == LMC_DTYPE_Q5_K) return 32;
    if (w->type == LMC_DTYPE_Q6_K) return 16;
    return 0;
}

static int64_t n_groups(const lmc_tensor *w) {
    const int64_t span = sum_span(w);
    return span ? w->ne[0] / span : 0;
}

/* Q8 activations, per token: xq int8[in], xd[in/32] f32 block scales, xs[in/32] = xd·Σq, then
 * (from q8_side_off, 64-byte aligned within the token) per group of 4 whole blocks the lane
 * vectors of the AVX-512 kernels: f32 dxv[16] (lane l: the scale of block l/4) and int32
 * corr[16] (-8 or -128 times Σq over lane l's 8 elements: the offset of Q4_0 codes / of Q8_0
 * codes flipped to unsigned; 0 for MLX4). On the AVX-512 tier xq is permuted per group: for
 * Q8_0 / Q4_0 the first halves of the 4 blocks, then their second halves (lane l of a
 * vpdpbusd covers elements 4(l%4)..+3 of block l/4 in the first, 16 + those in the second);
 * for MLX4 the even elements, then the odd ones (lane l: elements 8l..8l+7, block l/4); the
 * remainder blocks stay in order. */
#define Q8_SIDE_BYTES 128
static size_t q8_side_off(int64_t in) { return ((size_t)in + 8 * (size_t)(in / 32) + 63) / 64 * 64; }

/* f32 kinds: [in] activations then [n_groups] group sums, per token. Q8: above. */
static size_t token_bytes(const lmc_tensor *w) {
    const int64_t in = w->ne[0];
    if (kind_of(w) == ACT_Q8) return q8_side_off(in) + Q8_SIDE_BYTES * (size_t)(in / 128);
    if (kind_of(w) == ACT_QR) return lmc_cpu_qr_token_bytes(in);
    if (kind_of(w) == ACT_BF16) return 2 * (size_t)in;
    return 4 * (size_t)(in + n_groups(w));
}

int lmc_cpu_simd_avx512(void) {
#ifdef LMC_HAVE_AVX512
    if (simd_level < 0) simd_probe();
    return simd_level == LMC_SIMD_AVX512;
#else
    return 0;
#endif
}

int lmc_cpu_simd_has(const lmc_tensor *w) {
#ifdef LMC_HAVE_AVX512
    if (simd_level < 0) simd_probe();
    if (simd_level == LMC_SIMD_OFF || kind_of(w) == ACT_NONE) return 0;
    if (simd_level == LMC_SIMD_AVX2 && !lmc_cpu_avx2_has_type(w->type)) return 0;
    if (w->ne[0] % lmc_dtype_block_elems(w->type) || w->ne[0] % 32) return 0;
    return 1;
#else
    return 0;
#endif
}

size_t lmc_cpu_simd_act_bytes(const lmc_tensor *w, int64_t n_tok) { return token_bytes(w) * (size_t)n_tok; }

/* LMC_CPU_SIMD_GEMM=0: prefill batches of the integer kinds take the dequantize + sgemm path
 * instead of lmc_cpu_simd_gemm (A/B). */
int lmc_cpu_simd_gemm_has(const lmc_tensor *w) {
    static int on = -1;
    if (on < 0) on = !(getenv("LMC_CPU_SIMD_GEMM") && !strcmp(getenv("LMC_CPU_SIMD_GEMM"), "0"));
    /* MXFP4 measured no faster token by token than dequantized into sgemm: it keeps the exact path */
    const int floats = w->type == LMC_DTYPE_BF16 || w->type == LMC_DTYPE_BF16P || w->type == LMC_DTYPE_F16; /* cpu_ftile.c */
    return on && lmc_cpu_simd_has(w) && simd_level == LMC_SIMD_AVX512 && (kind_of(w) == ACT_Q8 || kind_of(w) == ACT_QR || floats) &&
           w->type != LMC_DTYPE_MXFP4 && w->type != LMC_DTYPE_MXFP4_MLX;
}

#ifdef LMC_HAVE_AVX512
static void q8_prepare_avx512(lmc_dtype t, const float *x, int64_t in, char *p);
static void qr_prepare_avx512(int off, const float *x, int64_t in, char *p);
#endif

void lmc_cpu_simd_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    const int64_t in = w->ne[0];
    const act_kind kind = kind_of(w);
    for (int64_t t = 0; t < n_tok; t++) {
        const float *xt = x + (size_t)t * in;
        char *p = (char *)buf + token_bytes(w) * (size_t)t;
#ifdef LMC_HAVE_AVX512
        if (kind == ACT_QR) {
            qr_prepare_avx512(w->type == LMC_DTYPE_Q8_0R ? -128 : -8, xt, in, p);
            continue;
        }
#endif
        if (kind == ACT_Q8) {
#ifdef LMC_HAVE_AVX512
            if (simd_level == LMC_SIMD_AVX512) {
                q8_prepare_avx512(w->type, xt, in, p);
                continue;
            }
#endif
            int8_t *q = (int8_t *)p;
            float *xd = (float *)(void *)(p + in), *xs = xd + in / 32;
            for (int64_t b = 0; b < in / 32; b++) {
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xt[32 * b + j]));
                const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
                int sum = 0;
                for (int j = 0; j < 32; j++) {
                    const int v = (int)roundf(xt[32 * b + j] * id);
                    q[32 * b + j] = (int8_t)v;
                    sum += v;
                }
                xd[b] = d;
                xs[b] = d * (float)sum;
            }
            continue;
        }
        if (kind == ACT_BF16) { /* only on the AVX-512 tier */
            lmc_cpu_bf16_round(xt, in, (uint16_t *)(void *)p);
            continue;
        }
        float *xp = (float *)(void *)p;
        if (kind == ACT_F32_PERM) {
            for (int64_t b = 0; b < in; b += 32)
                for (int j = 0; j < 16; j++) { xp[b + j] = xt[b + 2 * j]; xp[b + 16 + j] = xt[b + 2 * j + 1]; }
        } else {
            memcpy(xp, xt, (size_t)in * 4);
        }
        const int64_t ng = n_groups(w);
        for (int64_t g = 0; g < ng; g++) {
            const int64_t gs = in / ng;
            float s = 0;
            for (int64_t i = 0; i < gs; i++) s += xt[g * gs + i];
            xp[in + g] = s;
        }
    }
}

#ifdef LMC_HAVE_AVX512

/* Only the kernels below are compiled for AVX-512 (code above runs on any x86-64). */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,f16c,fma")

/* Software prefetch: each kernel reads rows o..o+3 side by side, and the next call reads
 * o+4..o+7, so the line to fetch is the same offset 4 rows on (pf = 4 · row stride bytes):
 * rows are often shorter than a useful prefetch distance (896 Q4_0 weights = 504 bytes). */

static inline float hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }
/* 64 bytes loaded into a register that stays one: the prefill tiles use an activation vector for
 * several rows, and GCC would fold the load into each use (the loads then bound the tiles). */
static inline __m512i ld_reg(const void *p) {
    __m512i v = _mm512_loadu_si512(p);
    __asm__("" : "+v"(v));
    return v;
}
/* The four horizontal sums of a[0..3] at once (a transposing add tree, ~11 instructions
 * instead of 4 × 8). */
static inline void hsum4x512(const __m512 a[4], float out[4]) {
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], 0x44), _mm512_shuffle_f32x4(a[0], a[1], 0xEE));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], 0x44), _mm512_shuffle_f32x4(a[2], a[3], 0xEE));
    /* s01: lanes 0-7 a0's halves summed, 8-15 a1's; s23 likewise */
    __m512 w = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
    /* w: 4 lanes per input, in order */
    w = _mm512_add_ps(w, _mm512_permute_ps(w, 0x4E));
    w = _mm512_add_ps(w, _mm512_permute_ps(w, 0xB1));
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), w)));
}
static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float f16_at(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return _cvtsh_ss(h); }

/* One block of 32 activations quantized as Q8_0 (the scalar preparation's values, bit for bit:
 * roundf's ties away from zero): the codes into q, the scale returned, Σq into *sum. */
static float q8_round_block(const float *x, int8_t q[32], int *sum) {
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    __m512i iv[2];
    for (int h = 0; h < 2; h++) {
        const __m512 s = _mm512_mul_ps(h ? v1 : v0, _mm512_set1_ps(id));
        const __m512 tr = _mm512_roundscale_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(s, tr)), half, _CMP_GE_OQ);
        const __m512 sg = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(s), sign), _mm512_castps_si512(one)));
        iv[h] = _mm512_cvttps_epi32(_mm512_mask_add_ps(tr, up, tr, sg));
        _mm_storeu_si128((void *)(q + 16 * h), _mm512_cvtepi32_epi8(iv[h]));
    }
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(iv[0], iv[1]));
    return d;
}

/* Q4_0R / Q8_0R activations for one token (cpu_qr.c): per chunk of 16 blocks, 512 code bytes (byte
 * 64m + 4l + i: element 4m + i of block l, as vpdpbusd m of the kernels meets them), the 16 block
 * scales (f32) and off·Σq of each block (int32: the offset of the codes, -8 or -128); a last chunk
 * of fewer blocks is padded with zeros. */
static void qr_prepare_avx512(int off, const float *x, int64_t in, char *p) {
    memset(p, 0, lmc_cpu_qr_token_bytes(in));
    for (int64_t b = 0; b < in / 32; b++) {
        char *ch = p + LMC_CPU_QR_CHUNK * (size_t)(b / 16);
        const int l = (int)(b % 16);
        int8_t q[32];
        int sum;
        const float d = q8_round_block(x + 32 * b, q, &sum);
        for (int m = 0; m < 8; m++) memcpy(ch + 64 * m + 4 * l, q + 4 * m, 4);
        const int32_t corr = off * sum;
        memcpy(ch + 512 + 4 * l, &d, 4);
        memcpy(ch + 576 + 4 * l, &corr, 4);
    }
}

/* Q8_0 activations for one token (layout at q8_side_off): the same xq, xd and xs as the scalar
 * preparation, then the lane vectors. */
static void q8_prepare_avx512(lmc_dtype t, const float *x, int64_t in, char *p) {
    int8_t *q = (int8_t *)p;
    float *xd = (float *)(void *)(p + in), *xs = xd + in / 32;
    for (int64_t b = 0; b < in / 32; b++) {
        int sum;
        xd[b] = q8_round_block(x + 32 * b, q + 32 * b, &sum);
        xs[b] = xd[b] * (float)sum;
    }
    char *side = p + q8_side_off(in);
    const __m512i ones = _mm512_set1_epi8(1);
    /* Q8_0 / Q4_0: the first halves of the 4 blocks, then the second halves; MLX4: the even
     * elements of the 128, then the odd ones (low / high nibbles of 64 code bytes) */
    const int mlx = t == LMC_DTYPE_MLX4 || t == LMC_DTYPE_MXFP4_MLX, qk = t == LMC_DTYPE_Q4_K || t == LMC_DTYPE_Q5_K;
    const int off = t == LMC_DTYPE_Q4_0 ? -8 : t == LMC_DTYPE_Q8_0 ? -128 :
                    t == LMC_DTYPE_MXFP4 || t == LMC_DTYPE_MXFP4_MLX ? -12 : 0;
    uint8_t ilo[64], ihi[64];
    for (int i = 0; i < 64; i++) { /* Q4_K: blocks 0, 2 then 1, 3 (a 64-byte code chunk's low / high nibbles) */
        ilo[i] = (uint8_t)(mlx ? 2 * i : qk ? i + 32 * (i / 32) : 32 * (i / 16) + i % 16);
        ihi[i] = (uint8_t)(mlx ? 2 * i + 1 : qk ? i + 32 * (i / 32) + 32 : 32 * (i / 16) + i % 16 + 16);
    }
    const __m512i perm_lo = _mm512_loadu_si512(ilo), perm_hi = _mm512_loadu_si512(ihi);
    if (t == LMC_DTYPE_Q6_K || t == LMC_DTYPE_MLX8) return; /* element order, no lane vectors */
    for (int64_t g = 0; g < in / 128; g++, side += Q8_SIDE_BYTES) {
        int8_t *xg = q + 128 * g;
        const __m512i a = _mm512_loadu_si512(xg), b = _mm512_loadu_si512(xg + 64);
        _mm512_storeu_si512(xg, _mm512_permutex2var_epi8(a, perm_lo, b));
        _mm512_storeu_si512(xg + 64, _mm512_permutex2var_epi8(a, perm_hi, b));
        float *dxv = (float *)(void *)side;
        for (int l = 0; l < 16; l++) dxv[l] = xd[4 * g + l / 4];
        const __m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(xg)),
                                                ones, _mm512_loadu_si512(xg + 64));
        _mm512_storeu_si512(side + 64, _mm512_mullo_epi32(sum, _mm512_set1_epi32(off)));
    }
}

/* One block (b) of Q8_0 / Q4_0 weights against element-ordered Q8_0 activations, without the offset
 * term: returns the block's Σ x·(code) scaled, adds dw·xs to *corr (the caller removes 8 or 128 ×). */
static inline float q8_block(int q4, const uint8_t *blk, const int8_t *xq, float dx, float sx, float *corr) {
    const __m256i xv = _mm256_loadu_si256((const void *)xq);
    const float dw = f16_at(blk);
    __m256i wu;
    if (q4) {
        const __m128i v = _mm_loadu_si128((const void *)(blk + 2)), low4 = _mm_set1_epi8(0x0F);
        wu = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low4), _mm_and_si128(v, low4));
    } else {
        wu = _mm256_xor_si256(_mm256_loadu_si256((const void *)(blk + 2)), _mm256_set1_epi8((char)0x80));
    }
    const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wu, xv);
    *corr += dw * sx;
    return dw * dx * (float)_mm512_reduce_add_epi32(_mm512_zextsi256_si512(p));
}

/* Q4_0 against Q8_0 activations: per group of 4 blocks (72 bytes) and row, one vpermt2b gathers
 * the 64 code bytes, the low and high nibbles meet the activations' first and second halves in
 * two vpdpbusd on an accumulator that starts at -8·Σx per lane, and the 16 lanes (4 per block)
 * are scaled once in f32 by the block scales (one vpermw + vcvtph2ps) times the activations'. */
static void rows4_q4_0(const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    const int64_t nb = in / 32, ng = nb / 4;
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in), *xs = xd + nb;
    const char *side = xp + q8_side_off(in);
    const __m512i qidx = _mm512_loadu_si512(q4_qidx), sidx = _mm512_loadu_si512(q4_sidx), low4 = _mm512_set1_epi8(0x0F);
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm512_setzero_ps();
    /* two groups (8 blocks, 144 bytes) at a time: their lanes are added pairwise (2 per block)
     * before the f32 step, which then runs once per 8 blocks */
    const __m512i pair0 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i pair1 = _mm512_add_epi32(pair0, _mm512_set1_epi32(1));
    const __m512i sidx8 = _mm512_setr_epi32(0 | 0 << 16, 9 | 9 << 16, 18 | 18 << 16, 27 | 27 << 16, 32 | 32 << 16,
                                            41 | 41 << 16, 50 | 50 << 16, 59 | 59 << 16, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i dxi8 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    int64_t g = 0;
    for (; g + 2 <= ng; g += 2, side += 2 * Q8_SIDE_BYTES) {
        const __m512i xlo0 = _mm512_loadu_si512(xq + 128 * g), xhi0 = _mm512_loadu_si512(xq + 128 * g + 64);
        const __m512i xlo1 = _mm512_loadu_si512(xq + 128 * g + 128), xhi1 = _mm512_loadu_si512(xq + 128 * g + 192);
        const __m512i c0 = _mm512_loadu_si512(side + 64), c1 = _mm512_loadu_si512(side + Q8_SIDE_BYTES + 64);
        const __m512 dxv = _mm512_permutexvar_ps(dxi8, _mm512_maskz_loadu_ps(0xFF, xd + 4 * g));
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const char *blk = r[k] + 72 * g;
            _mm_prefetch(blk + pf, _MM_HINT_T0);
            _mm_prefetch(blk + pf + 64, _MM_HINT_T0);
            _mm_prefetch(blk + pf + 128, _MM_HINT_T0);
            const __m512i a0 = _mm512_loadu_si512(blk), a1 = _mm512_loadu_si512(blk + 8);
            const __m512i b0 = _mm512_loadu_si512(blk + 72), b1 = _mm512_loadu_si512(blk + 80);
            const __m512i va = _mm512_permutex2var_epi8(a0, qidx, a1), vb = _mm512_permutex2var_epi8(b0, qidx, b1);
            const __m512i sa = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c0, _mm512_and_si512(va, low4), xlo0),
                                                   _mm512_and_si512(_mm512_srli_epi16(va, 4), low4), xhi0);
            const __m512i sb = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c1, _mm512_and_si512(vb, low4), xlo1),
                                                   _mm512_and_si512(_mm512_srli_epi16(vb, 4), low4), xhi1);
            const __m512i sm = _mm512_add_epi32(_mm512_permutex2var_epi32(sa, pair0, sb), _mm512_permutex2var_epi32(sa, pair1, sb));
            const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(a0, sidx8, b0)));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sm), _mm512_mul_ps(dw, dxv), acc[k]);
        }
    }
    for (; g < ng; g++, side += Q8_SIDE_BYTES) {
        const __m512i xlo = _mm512_loadu_si512(xq + 128 * g), xhi = _mm512_loadu_si512(xq + 128 * g + 64);
        const __m512 dxv = _mm512_loadu_ps(side);
        const __m512i corr = _mm512_loadu_si512(side + 64);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const char *blk = r[k] + 72 * g;
            _mm_prefetch(blk + pf, _MM_HINT_T0);
            _mm_prefetch(blk + pf + 64, _MM_HINT_T0);
            const __m512i l0 = _mm512_loadu_si512(blk), l1 = _mm512_loadu_si512(blk + 8);
            const __m512i v = _mm512_permutex2var_epi8(l0, qidx, l1);
            const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(corr, lo, xlo), hi, xhi);
            const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(sidx, l0)));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, dxv), acc[k]);
        }
    }
    float tail[4] = {0, 0, 0, 0}, corr[4] = {0, 0, 0, 0};
    for (int64_t b = 4 * ng; b < nb; b++)
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
            tail[k] += q8_block(1, (const uint8_t *)r[k] + 18 * b, xq + 32 * b, xd[b], xs[b], &corr[k]);
    hsum4x512(acc, out);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] += tail[k] - 8.0f * corr[k];
}

/* Q8_0 against Q8_0 activations: per group of 4 blocks (136 bytes) and row, two vpermt2b gather
 * the first and the second halves of the 4 blocks' codes (flipped to unsigned: the accumulator
 * starts at -128·Σx per lane), then as Q4_0: 4 lanes per block, one vpermt2w for the scales. */
static void rows4_q8_0(const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    const int64_t nb = in / 32, ng = nb / 4;
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in), *xs = xd + nb;
    const char *side = xp + q8_side_off(in);
    const __m512i aidx = _mm512_loadu_si512(q8_aidx), bidx = _mm512_loadu_si512(q8_bidx);
    const __m512i sidx = _mm512_loadu_si512(q8_sidx), flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++, side += Q8_SIDE_BYTES) {
        const __m512i xa = _mm512_loadu_si512(xq + 128 * g), xb = _mm512_loadu_si512(xq + 128 * g + 64);
        const __m512 dxv = _mm512_loadu_ps(side);
        const __m512i corr = _mm512_loadu_si512(side + 64);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const char *blk = r[k] + 136 * g;
            _mm_prefetch(blk + pf, _MM_HINT_T0);
            _mm_prefetch(blk + pf + 64, _MM_HINT_T0);
            _mm_prefetch(blk + pf + 128, _MM_HINT_T0);
            const __m512i l0 = _mm512_loadu_si512(blk), l64 = _mm512_loadu_si512(blk + 64);
            const __m512i l8 = _mm512_loadu_si512(blk + 8), l72 = _mm512_loadu_si512(blk + 72);
            const __m512i wa = _mm512_xor_si512(_mm512_permutex2var_epi8(l0, aidx, l64), flip);
            const __m512i wb = _mm512_xor_si512(_mm512_permutex2var_epi8(l8, bidx, l72), flip);
            const __m512i sm = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(corr, wa, xa), wb, xb);
            const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(l0, sidx, l64)));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sm), _mm512_mul_ps(dw, dxv), acc[k]);
        }
    }
    float tail[4] = {0, 0, 0, 0}, corr[4] = {0, 0, 0, 0};
    for (int64_t b = 4 * ng; b < nb; b++)
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
            tail[k] += q8_block(0, (const uint8_t *)r[k] + 34 * b, xq + 32 * b, xd[b], xs[b], &corr[k]);
    hsum4x512(acc, out);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] += tail[k] - 128.0f * corr[k];
}

/* Σx of each MLX group of a 128-element chunk from its four 32-block sums xs (npc groups in the
 * first lanes, the rest 0), and the sum of a 4-lane vector: the biases' part of the MLX kernels. */
static inline __m128 mlx_gsum4(const float *xs, int npc) {
    __m128 g = _mm_loadu_ps(xs);
    if (npc < 4) g = _mm_hadd_ps(g, _mm_setzero_ps());
    if (npc < 2) g = _mm_hadd_ps(g, _mm_setzero_ps());
    return g;
}
static inline float hsum128(__m128 v) {
    const __m128 b = _mm_hadd_ps(v, v);
    return _mm_cvtss_f32(_mm_hadd_ps(b, b));
}

/* Four MLX side values (scales or biases) of groups i.. (n ≤ 4 of them, the rest 0) as f32. */
static inline __m128 mlx_side4(lmc_dtype t, const void *p, int64_t i, __mmask8 m) {
    if (t == LMC_DTYPE_F32) return _mm_maskz_loadu_ps(m, (const float *)p + i);
    const __m128i h = _mm_maskz_loadu_epi16(m, (const uint16_t *)p + i);
    if (t == LMC_DTYPE_F16) return _mm_cvtph_ps(h);
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16)); /* bf16 */
}

/* Σ over the last in % 128 elements of an MLX4 or MLX8 (bits) row (activations in element order
 * there, per 32-element block), scales and biases included. */
static float mlx_tail(int bits, const lmc_mlx_row *mr, const char *row, const char *xp, int64_t in) {
    const int64_t nb = in / 32, nc = in / 128;
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in), *xs = xd + nb;
    float tail = 0;
    for (int64_t b = 4 * nc; b < nb; b++) {
        const uint8_t *codes = (const uint8_t *)row + 4 * bits * b;
        int isum = 0;
        if (bits == 8)
            for (int j = 0; j < 32; j++) isum += codes[j] * xq[32 * b + j];
        else
            for (int j = 0; j < 16; j++) isum += (codes[j] & 15) * xq[32 * b + 2 * j] + (codes[j] >> 4) * xq[32 * b + 2 * j + 1];
        const int64_t g = 32 * b / mr->group_size;
        tail += lmc_mlx_side_at(mr->scale_type, mr->scales, g) * xd[b] * (float)isum +
                lmc_mlx_side_at(mr->scale_type, mr->biases, g) * xs[b];
    }
    return tail;
}

/* MLX4 against Q8_0 activations (AVX-512 tier): per 128 elements (64 code bytes, one load)
 * and row, the low and high nibbles (even and odd elements) meet the de-interleaved
 * activations in two vpdpbusd; lane l (elements 8l..8l+7) is scaled by its group's scale
 * times its block's activation scale; the biases add b·Σx per group (Σx of the quantized
 * activations, xs): the result is the product of the dequantized weights and activations. */
static void rows4_mlx4q(const lmc_quant_mlx *q, const int64_t ro[4], const char *const r[4], const char *xp, int64_t in,
                        size_t pf, float out[4]) {
    const int64_t nb = in / 32, nc = in / 128;
    const int gs = q->group_size, npc = 128 / gs; /* groups per 128 elements: 1, 2 or 4 */
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in), *xs = xd + nb;
    const char *side = xp + q8_side_off(in);
    lmc_mlx_row mr[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) mr[k] = lmc_quant_mlx_row(q, ro[k]);
    const lmc_dtype st = mr[0].scale_type;
    const __mmask8 gm = (__mmask8)((1u << npc) - 1);
    const __m512i gidx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           gs == 32 ? 2 : gs == 64 ? 3 : 4); /* lane → group in the 128 */
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512 acc[4];
    __m128 bacc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) { acc[k] = _mm512_setzero_ps(); bacc[k] = _mm_setzero_ps(); }
    for (int64_t c = 0; c < nc; c++, side += Q8_SIDE_BYTES) {
        const __m512i xlo = _mm512_loadu_si512(xq + 128 * c), xhi = _mm512_loadu_si512(xq + 128 * c + 64);
        const __m512 dxv = _mm512_loadu_ps(side);
        const __m128 gsum = mlx_gsum4(xs + 4 * c, npc); /* Σx per group of this 128 */
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const char *blk = r[k] + 64 * c;
            _mm_prefetch(blk + pf, _MM_HINT_T0);
            const __m512i v = _mm512_loadu_si512(blk);
            const __m512i sm = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, low4), xlo),
                                                   _mm512_and_si512(_mm512_srli_epi16(v, 4), low4), xhi);
            const __m512 sv = _mm512_permutexvar_ps(gidx, _mm512_castps128_ps512(mlx_side4(st, mr[k].scales, c * npc, gm)));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sm), _mm512_mul_ps(sv, dxv), acc[k]);
            bacc[k] = _mm_fmadd_ps(mlx_side4(st, mr[k].biases, c * npc, gm), gsum, bacc[k]);
        }
    }
    float tail[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) tail[k] = mlx_tail(4, &mr[k], r[k], xp, in);
    hsum4x512(acc, out);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        out[k] += hsum128(bacc[k]) + tail[k];
    }
}

/* MLX8 against Q8_0 activations (AVX-512 tier; activations in element order): the unsigned
 * 8-bit codes go straight into vpdpbusd, two per 128 elements (8 lanes per block), each lane
 * scaled by its group's scale × its block's activation scale; biases as MLX4. */
static void rows4_mlx8q(const lmc_quant_mlx *q, const int64_t ro[4], const char *const r[4], const char *xp, int64_t in,
                        size_t pf, float out[4]) {
    const int64_t nb = in / 32, nc = in / 128;
    const int gs = q->group_size, npc = 128 / gs;
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in), *xs = xd + nb;
    lmc_mlx_row mr[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) mr[k] = lmc_quant_mlx_row(q, ro[k]);
    const lmc_dtype st = mr[0].scale_type;
    const __mmask8 gm = (__mmask8)((1u << npc) - 1);
    const int sh = gs == 32 ? 3 : gs == 64 ? 4 : 5; /* lane → group: (4·lane) / gs */
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i gia = _mm512_srli_epi32(lane, sh), gib = _mm512_srli_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(16)), sh);
    const __m512i dxi = _mm512_srli_epi32(lane, 3);
    __m512 acc[4];
    __m128 bacc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) { acc[k] = _mm512_setzero_ps(); bacc[k] = _mm_setzero_ps(); }
    for (int64_t c = 0; c < nc; c++) {
        const __m512i xa = _mm512_loadu_si512(xq + 128 * c), xb = _mm512_loadu_si512(xq + 128 * c + 64);
        const __m512 dxa = _mm512_permutexvar_ps(dxi, _mm512_castps128_ps512(_mm_loadu_ps(xd + 4 * c)));
        const __m512 dxb = _mm512_permutexvar_ps(dxi, _mm512_castps128_ps512(_mm_loadu_ps(xd + 4 * c + 2)));
        const __m128 gsum = mlx_gsum4(xs + 4 * c, npc);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const char *blk = r[k] + 128 * c;
            _mm_prefetch(blk + pf, _MM_HINT_T0);
            _mm_prefetch(blk + pf + 64, _MM_HINT_T0);
            const __m512i sa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(blk), xa);
            const __m512i sb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(blk + 64), xb);
            const __m512 s4 = _mm512_castps128_ps512(mlx_side4(st, mr[k].scales, c * npc, gm));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa), _mm512_mul_ps(_mm512_permutexvar_ps(gia, s4), dxa), acc[k]);
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sb), _mm512_mul_ps(_mm512_permutexvar_ps(gib, s4), dxb), acc[k]);
            bacc[k] = _mm_fmadd_ps(mlx_side4(st, mr[k].biases, c * npc, gm), gsum, bacc[k]);
        }
    }
    float tail[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) tail[k] = mlx_tail(8, &mr[k], r[k], xp, in);
    hsum4x512(acc, out);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        out[k] += hsum128(bacc[k]) + tail[k];
    }
}

/* A Q4_K / Q5_K super-block's codes as unsigned bytes: u[0] / u[1] the low / high nibbles of
 * code chunks (0, 1), u[2] / u[3] those of chunks (2, 3); Q5_K (five): bit 2c (low nibbles) /
 * 2c+1 (high) of qh[l] is bit 4 of chunk c's element l, or-ed in with one vpternlogd a vector. */
static inline __attribute__((always_inline)) void q4k_codes(int five, const uint8_t *blk, __m512i u[4]) {
    const size_t qo = five ? 48 : 16;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i v0 = _mm512_loadu_si512(blk + qo), v1 = _mm512_loadu_si512(blk + qo + 64);
    u[0] = _mm512_and_si512(v0, low4);
    u[1] = _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4);
    u[2] = _mm512_and_si512(v1, low4);
    u[3] = _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4);
    if (five) {
        const __m512i b4 = _mm512_set1_epi8(0x10);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(blk + 16)));
        const __m512i h0 = _mm512_srlv_epi64(qh, _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2));
        const __m512i h1 = _mm512_srlv_epi64(qh, _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6));
        u[0] = _mm512_ternarylogic_epi32(u[0], _mm512_slli_epi16(h0, 4), b4, 0xF8); /* a | (b & c) */
        u[1] = _mm512_ternarylogic_epi32(u[1], _mm512_slli_epi16(h0, 3), b4, 0xF8);
        u[2] = _mm512_ternarylogic_epi32(u[2], _mm512_slli_epi16(h1, 4), b4, 0xF8);
        u[3] = _mm512_ternarylogic_epi32(u[3], _mm512_slli_epi16(h1, 3), b4, 0xF8);
    }
}

/* The 6-bit scales and mins of its 8 sub-blocks, each twice (lane o ← sub-block o/2: 2 lanes a
 * sub-block, as q4k_dot leaves the sums), as bytes. */
static inline __attribute__((always_inline)) void q4k_scales(const uint8_t *blk, __m128i *sc, __m128i *mn) {
    const __m128i scsh = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    uint32_t w0, w1, w2;
    memcpy(&w0, blk + 4, 4); memcpy(&w1, blk + 8, 4); memcpy(&w2, blk + 12, 4);
    const uint32_t sc_lo = w0 & 0x3F3F3F3Fu, m_lo = w1 & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | ((w0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | ((w1 >> 2) & 0x30303030u);
    *sc = _mm_shuffle_epi8(_mm_cvtsi64_si128((long long)((uint64_t)sc_hi << 32 | sc_lo)), scsh);
    *mn = _mm_shuffle_epi8(_mm_cvtsi64_si128((long long)((uint64_t)m_hi << 32 | m_lo)), scsh);
}

/* Σ code·x of each sub-block, 2 lanes a sub-block in order: four vpdpbusd against the super-block's
 * activations x0..x3 (prepared per 128 as blocks 0, 2, 1, 3), then two permute-add steps. */
static inline __attribute__((always_inline)) __m512i q4k_dot(const __m512i u[4], __m512i x0, __m512i x1, __m512i x2,
                                                            __m512i x3) {
    const __m512i ie0 = _mm512_setr_epi32(0, 2, 4, 6, 16, 18, 20, 22, 8, 10, 12, 14, 24, 26, 28, 30);
    const __m512i ie1 = _mm512_add_epi32(ie0, _mm512_set1_epi32(1));
    const __m512i pe0 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i pe1 = _mm512_add_epi32(pe0, _mm512_set1_epi32(1));
    const __m512i z = _mm512_setzero_si512();
    const __m512i sa = _mm512_dpbusd_epi32(z, u[0], x0); /* sb 0 | 2 */
    const __m512i sb = _mm512_dpbusd_epi32(z, u[1], x1); /* sb 1 | 3 */
    const __m512i sc = _mm512_dpbusd_epi32(z, u[2], x2); /* sb 4 | 6 */
    const __m512i sd = _mm512_dpbusd_epi32(z, u[3], x3); /* sb 5 | 7 */
    const __m512i tab = _mm512_add_epi32(_mm512_permutex2var_epi32(sa, ie0, sb), _mm512_permutex2var_epi32(sa, ie1, sb));
    const __m512i tcd = _mm512_add_epi32(_mm512_permutex2var_epi32(sc, ie0, sd), _mm512_permutex2var_epi32(sc, ie1, sd));
    return _mm512_add_epi32(_mm512_permutex2var_epi32(tab, pe0, tcd), _mm512_permutex2var_epi32(tab, pe1, tcd));
}

/* Q4_K (and Q5_K: five = 1, the 5th bits from qh[32] or-ed in with one vpternlogd per vector)
 * against Q8_0 activations (AVX-512 tier): per 256-element super-block (144 bytes) and
 * row, two loads hold the 4 code chunks; the low / high nibbles of chunks (0, 1) and (2, 3)
 * meet the activations (prepared per 128 as blocks 0, 2, 1, 3) in four vpdpbusd (8 lanes per
 * sub-block), two permute-add steps leave 2 lanes per sub-block in order, and one f32 step
 * scales them by d·sc·dx; the 6-bit scales and mins are unpacked for all 8 sub-blocks at once
 * with 32-bit masks; the mins take dmin·m·Σx (Σx of the quantized activations, xs). */
static void rows4_q4kq(int five, const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    const int64_t nsb = in / 256;
    const size_t bs = five ? 176 : 144;
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in), *xs = xd + in / 32;
    const __m512i dxi = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    __m512 acc[4];
    __m256 macc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) { acc[k] = _mm512_setzero_ps(); macc[k] = _mm256_setzero_ps(); }
    for (int64_t b = 0; b < nsb; b++) {
        const int8_t *x = xq + 256 * b;
        const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 64);
        const __m512i x2 = _mm512_loadu_si512(x + 128), x3 = _mm512_loadu_si512(x + 192);
        const __m512 dxv = _mm512_permutexvar_ps(dxi, _mm512_castps256_ps512(_mm256_loadu_ps(xd + 8 * b)));
        const __m256 xs8 = _mm256_loadu_ps(xs + 8 * b);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const uint8_t *blk = (const uint8_t *)r[k] + bs * (size_t)b;
            _mm_prefetch((const char *)blk + pf, _MM_HINT_T0);
            _mm_prefetch((const char *)blk + pf + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)blk + pf + 128, _MM_HINT_T0);
            if (five) _mm_prefetch((const char *)blk + pf + 175, _MM_HINT_T0);
            __m512i u[4];
            q4k_codes(five, blk, u);
            const __m512i us = q4k_dot(u, x0, x1, x2, x3);
            __m128i scb, mb;
            q4k_scales(blk, &scb, &mb);
            const __m512 scv = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(scb)), _mm512_set1_ps(f16_at(blk)));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(us), _mm512_mul_ps(scv, dxv), acc[k]);
            /* the mins: bytes 0, 2, .., 14 of mb are the 8 sub-blocks' */
            const __m256 mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_shuffle_epi8(mb, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0))));
            macc[k] = _mm256_fmadd_ps(_mm256_mul_ps(mv, _mm256_set1_ps(f16_at(blk + 2))), xs8, macc[k]);
        }
    }
    hsum4x512(acc, out);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] -= hsum256(macc[k]);
}

/* Q6_K against Q8_0 activations (AVX-512 tier; activations in element order): per half
 * super-block (128 elements) and row, one load of the 64 low-nibble bytes and one broadcast
 * of the 32 high-bit bytes (shifted by 0 / 2 per 256-bit half) build the 6-bit codes of
 * elements 0-63 and 64-127 in two vectors; two vpdpbusd on accumulators that start at
 * -32·Σx per lane; 4 lanes per 16-element sub-block, scaled by d·sc·dx in f32. */
static void rows4_q6kq(const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    const int64_t nsb = in / 256;
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), ones = _mm512_set1_epi8(1);
    const __m512i hsh = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2); /* qh >> 0 | qh >> 2 */
    const __m512i dxi = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m128i scidx[4]; /* lane group g of vector (A, B) of half h ← scale 8h + 4·(A/B) + g */
    for (int v = 0; v < 4; v++) {
        int8_t ix[16];
        for (int i = 0; i < 16; i++) ix[i] = (int8_t)(4 * v + i / 4);
        scidx[v] = _mm_loadu_si128((const void *)ix);
    }
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        for (int h = 0; h < 2; h++) {
            const int8_t *x = xq + 256 * b + 128 * h;
            const __m512i xa = _mm512_loadu_si512(x), xb = _mm512_loadu_si512(x + 64);
            const __m512i ca = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xa), 5));
            const __m512i cb = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xb), 5));
            const float *d4 = xd + 8 * b + 4 * h;
            const __m512 dxa = _mm512_permutexvar_ps(dxi, _mm512_castps128_ps512(_mm_loadu_ps(d4)));
            const __m512 dxb = _mm512_permutexvar_ps(dxi, _mm512_castps128_ps512(_mm_loadu_ps(d4 + 2)));
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const uint8_t *blk = (const uint8_t *)r[k] + 210 * (size_t)b;
                if (h == 0) {
                    _mm_prefetch((const char *)blk + pf, _MM_HINT_T0);
                    _mm_prefetch((const char *)blk + pf + 64, _MM_HINT_T0);
                    _mm_prefetch((const char *)blk + pf + 128, _MM_HINT_T0);
                    _mm_prefetch((const char *)blk + pf + 192, _MM_HINT_T0);
                }
                const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
                const __m512i qh = _mm512_srlv_epi64(_mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(blk + 128 + 32 * h))), hsh);
                const __m512i ua = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
                const __m512i ub = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh, m30));
                const __m512i sa = _mm512_dpbusd_epi32(ca, ua, xa), sb = _mm512_dpbusd_epi32(cb, ub, xb);
                const __m128i scb = _mm_loadu_si128((const void *)(blk + 192));
                const __m512 d = _mm512_set1_ps(f16_at(blk + 208));
                const __m512 sca = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(scb, scidx[2 * h])));
                const __m512 scbv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(scb, scidx[2 * h + 1])));
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa), _mm512_mul_ps(sca, _mm512_mul_ps(d, dxa)), acc[k]);
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sb), _mm512_mul_ps(scbv, _mm512_mul_ps(d, dxb)), acc[k]);
            }
        }
    }
    hsum4x512(acc, out);
}





/* ---- MXFP4 (ggml block and mlx / Hugging Face layout) against Q8_0 activations ---- */

/* The half scales 2^(e-128) of the exponent bytes in byte 0 of each dword lane of e (the other
 * bytes zero), as core/quant.h defines them: subnormal for e < 2; e = 255 is 2^127 (ggml) or
 * inf (mlx). */
static inline __m512 mx_half16(__m512i e, int mlx) {
    const __m512i one = _mm512_set1_epi32(1);
    const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    __m512i bits = _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23);
    bits = _mm512_mask_sllv_epi32(bits, small, _mm512_set1_epi32(0x00200000), e);
    if (mlx) bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)), _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(bits);
}

/* Σ kvalue·xq over one 32-element block of either layout (element order activations). */
static inline int mx_block_isum(int gguf, const uint8_t *codes, const int8_t *xq) {
    int isum = 0;
    for (int j = 0; j < 16; j++) {
        const int lo = lmc_mxfp4_kvalues[codes[j] & 15], hi = lmc_mxfp4_kvalues[codes[j] >> 4];
        isum += gguf ? lo * xq[j] + hi * xq[16 + j] : lo * xq[2 * j] + hi * xq[2 * j + 1];
    }
    return isum;
}

/* ggml's 17-byte blocks: per group of 4 blocks (68 bytes) and row, one vpermt2b gathers the 64
 * code bytes (the second load masked to the group's last byte), vpshufb maps the nibbles to
 * kvalue + 12, two vpdpbusd against the first / second halves of the 4 blocks' activations
 * on the -12·Σx accumulator; lanes (4 per block) scaled by 2^(e-128)·dx. */
static void rows4_mxfp4(const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    const int64_t nb = in / 32, ng = nb / 4;
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in);
    const char *side = xp + q8_side_off(in);
    const __m512i qidx = _mm512_loadu_si512(mx_qidx), low4 = _mm512_set1_epi8(0x0F);
    const __m512i tbl = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    /* lane l ← exponent byte of block l/4 (bytes 0, 17, 34, 51 of the group) in its low byte */
    uint8_t ei[64];
    for (int i = 0; i < 64; i++) ei[i] = (uint8_t)(17 * (i / 16));
    const __m512i eidx = _mm512_loadu_si512(ei);
    const __mmask64 m60 = 0x0FFFFFFFFFFFFFFFull, lowb = 0x1111111111111111ull;
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++, side += Q8_SIDE_BYTES) {
        const __m512i xlo = _mm512_loadu_si512(xq + 128 * g), xhi = _mm512_loadu_si512(xq + 128 * g + 64);
        const __m512 dxv = _mm512_loadu_ps(side);
        const __m512i corr = _mm512_loadu_si512(side + 64);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const char *blk = r[k] + 68 * g;
            _mm_prefetch(blk + pf, _MM_HINT_T0);
            _mm_prefetch(blk + pf + 64, _MM_HINT_T0);
            const __m512i l0 = _mm512_loadu_si512(blk), l1 = _mm512_maskz_loadu_epi8(m60, blk + 8);
            const __m512i v = _mm512_permutex2var_epi8(l0, qidx, l1);
            const __m512i lo = _mm512_shuffle_epi8(tbl, _mm512_and_si512(v, low4));
            const __m512i hi = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
            const __m512i sm = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(corr, lo, xlo), hi, xhi);
            const __m512 sv = mx_half16(_mm512_maskz_permutexvar_epi8(lowb, eidx, l0), 0);
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sm), _mm512_mul_ps(sv, dxv), acc[k]);
        }
    }
    float tail[4] = {0, 0, 0, 0};
    for (int64_t b = 4 * ng; b < nb; b++)
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const uint8_t *blk = (const uint8_t *)r[k] + 17 * b;
            tail[k] += mx_half[0][blk[0]] * xd[b] * (float)mx_block_isum(1, blk + 1, xq + 32 * b);
        }
    hsum4x512(acc, out);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] += tail[k];
}

/* mlx / Hugging Face layout: per 128 elements (64 code bytes, one load) and row, the low and
 * high nibbles (even and odd elements) meet the de-interleaved activations (as MLX4); the
 * row's 4 exponents of the 128 come from its aux. */
static void rows4_mxfp4m(const lmc_quant_mlx *q, const int64_t ro[4], const char *const r[4], const char *xp,
                         int64_t in, size_t pf, float out[4]) {
    const int64_t nb = in / 32, nc = in / 128;
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in);
    const char *side = xp + q8_side_off(in);
    const uint8_t *es[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) es[k] = (const uint8_t *)q->scales.data + (size_t)ro[k] * q->scales.nb[1];
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i tbl = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i gidx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2);
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++, side += Q8_SIDE_BYTES) {
        const __m512i xlo = _mm512_loadu_si512(xq + 128 * c), xhi = _mm512_loadu_si512(xq + 128 * c + 64);
        const __m512 dxv = _mm512_loadu_ps(side);
        const __m512i corr = _mm512_loadu_si512(side + 64);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const char *blk = r[k] + 64 * c;
            _mm_prefetch(blk + pf, _MM_HINT_T0);
            const __m512i v = _mm512_loadu_si512(blk);
            const __m512i lo = _mm512_shuffle_epi8(tbl, _mm512_and_si512(v, low4));
            const __m512i hi = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
            const __m512i sm = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(corr, lo, xlo), hi, xhi);
            uint32_t e4;
            memcpy(&e4, es[k] + 4 * c, 4);
            const __m512 sv = mx_half16(_mm512_permutexvar_epi32(gidx, _mm512_castsi128_si512(_mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)e4)))), 1);
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sm), _mm512_mul_ps(sv, dxv), acc[k]);
        }
    }
    float tail[4] = {0, 0, 0, 0};
    for (int64_t b = 4 * nc; b < nb; b++) /* the last < 128 elements, in element order */
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
            tail[k] += mx_half[1][es[k][b]] * xd[b] * (float)mx_block_isum(0, (const uint8_t *)r[k] + 16 * b, xq + 32 * b);
    hsum4x512(acc, out);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] += tail[k];
}

/* ---- prefill: Q4_0 / Q8_0 rows against several tokens (lmc_cpu_simd_gemm) ---- */

/* One group of 4 blocks (128 elements) of a Q4_0 or Q8_0 row gathered as rows4_q4_0 / rows4_q8_0
 * do: lo and hi meet the activations' first and second halves of the 4 blocks (unsigned codes:
 * Q4_0 nibbles, Q8_0 codes + 128), dw holds the block scales per lane (4 lanes a block). */
static inline __attribute__((always_inline)) void q8_group_codes(int q4, const char *blk, __m512i *lo, __m512i *hi,
                                                                 __m512 *dw) {
    if (q4) {
        const __m512i l0 = _mm512_loadu_si512(blk), l1 = _mm512_loadu_si512(blk + 8), low4 = _mm512_set1_epi8(0x0F);
        const __m512i v = _mm512_permutex2var_epi8(l0, _mm512_loadu_si512(q4_qidx), l1);
        *lo = _mm512_and_si512(v, low4);
        *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_loadu_si512(q4_sidx), l0)));
    } else {
        const __m512i l0 = _mm512_loadu_si512(blk), l64 = _mm512_loadu_si512(blk + 64);
        const __m512i l8 = _mm512_loadu_si512(blk + 8), l72 = _mm512_loadu_si512(blk + 72);
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        *lo = _mm512_xor_si512(_mm512_permutex2var_epi8(l0, _mm512_loadu_si512(q8_aidx), l64), flip);
        *hi = _mm512_xor_si512(_mm512_permutex2var_epi8(l8, _mm512_loadu_si512(q8_bidx), l72), flip);
        *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(l0, _mm512_loadu_si512(q8_sidx), l64)));
    }
}

#define Q8_PRE_BYTES 192 /* a pre-gathered group of one row: lo, hi, dw */

/* The groups of a row quad gathered once (q8_group_codes) into pre, 64-byte aligned: per group g
 * and row k at (4g + k)·Q8_PRE_BYTES, lo, hi (64 bytes each) and dw (16 floats). A prefill batch
 * of more than 4 tokens passes over the quad several times; gathered in every pass, Q8_0's four
 * loads a group and row mostly cross a cache line (tiles with aligned loads instead ran Q8_0 as
 * fast as Q4_0 on a Zen 4 core: 92 → 109 GFLOP/s, timing only). */
static void q8_pregather(int q4, const char *const *r, int64_t ng, char *pre) {
    const int64_t gb = q4 ? 72 : 136;
    for (int64_t g = 0; g < ng; g++)
        for (int k = 0; k < 4; k++) {
            __m512i lo, hi;
            __m512 dw;
            q8_group_codes(q4, r[k] + gb * g, &lo, &hi, &dw);
            char *p = pre + (size_t)(4 * g + k) * Q8_PRE_BYTES;
            _mm512_store_si512((void *)p, lo);
            _mm512_store_si512((void *)(p + 64), hi);
            _mm512_store_ps((void *)(p + 128), dw);
        }
}

/* out[t][k] = row r[k] · token t's activations (prepared for decode: per token tb bytes from xp)
 * for 4 rows and T tokens: each group of the 4 rows is gathered once and meets the T tokens one
 * after the other, a token's activations loaded once for the 4 rows (two vpdpbusd a row and token
 * per 128 elements), so the gathering that the decode kernels repeat per token is paid once per T.
 * The same sums as rows4_q8_0 per lane; Q4_0 scales each group's lanes on its own where
 * rows4_q4_0 first adds two groups' lanes. pre (or NULL): the quad's groups already gathered
 * (q8_pregather). */
static inline __attribute__((always_inline)) void tile_q8(int q4, int T, const char *pre, const char *const *r,
                                                          const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    const int64_t nb = in / 32, ng = nb / 4, gb = q4 ? 72 : 136;
    const size_t side_off = q8_side_off(in);
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[t][k] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m512i lo[4], hi[4];
        __m512 dw[4];
        if (pre) {
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const char *p = pre + (size_t)(4 * g + k) * Q8_PRE_BYTES;
                lo[k] = _mm512_load_si512((const void *)p);
                hi[k] = _mm512_load_si512((const void *)(p + 64));
                dw[k] = _mm512_load_ps((const void *)(p + 128));
            }
        } else {
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) q8_group_codes(q4, r[k] + gb * g, &lo[k], &hi[k], &dw[k]);
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const char *xt = xp + tb * (size_t)t;
            const __m512i xa = ld_reg(xt + 128 * g), xb = ld_reg(xt + 128 * g + 64);
            const char *side = xt + side_off + Q8_SIDE_BYTES * (size_t)g;
            const __m512 dxv = _mm512_loadu_ps(side);
            const __m512i corr = _mm512_loadu_si512(side + 64);
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(corr, lo[k], xa), hi[k], xb);
                acc[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[k], dxv), acc[t][k]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
        const char *xt = xp + tb * (size_t)t;
        const int8_t *xq = (const int8_t *)xt;
        const float *xd = (const float *)(const void *)(xt + in), *xs = xd + nb;
        float tail[4] = {0, 0, 0, 0}, corr[4] = {0, 0, 0, 0}, sum[4];
        for (int64_t b = 4 * ng; b < nb; b++)
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
                tail[k] += q8_block(q4, (const uint8_t *)r[k] + (q4 ? 18 : 34) * b, xq + 32 * b, xd[b], xs[b], &corr[k]);
        hsum4x512(acc[t], sum);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[t][k] = sum[k] + tail[k] - (q4 ? 8.0f : 128.0f) * corr[k];
    }
}


/* Rows four at a time (4 rows × 4 tokens: 16 accumulators, 8 code vectors, 4 scale vectors: more
 * rows or tokens a pass spill registers; 2 rows × 8 tokens and 4 × 3 measured 3-12% slower on a
 * Zen 4 core), all tokens of a row quad before the next quad. */
/* Q4_K / Q5_K (five): out[t][k] for 2 rows and T ≤ 4 tokens, rows4_q4kq's arithmetic with each
 * super-block of the 2 rows decoded once for the T tokens (codes, 6-bit scales and mins); the mins
 * enter the same accumulators (half of dmin·m per lane, 2 lanes a sub-block, times Σx) instead of
 * a second set. */
static inline __attribute__((always_inline)) void tile_q4k(int five, int T, const char *const *r, const char *xp,
                                                           size_t tb, int64_t in, float (*out)[4]) {
    const int64_t nsb = in / 256;
    const size_t bs = five ? 176 : 144;
    const __m512i dxi = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    __m512 acc[4][2];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        __m512i u[2][4];
        __m512 scv[2], mnv[2];
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
            const uint8_t *blk = (const uint8_t *)r[k] + bs * (size_t)b;
            q4k_codes(five, blk, u[k]);
            __m128i scb, mb;
            q4k_scales(blk, &scb, &mb);
            scv[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(scb)), _mm512_set1_ps(f16_at(blk)));
            mnv[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mb)), _mm512_set1_ps(0.5f * f16_at(blk + 2)));
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const char *xt = xp + tb * (size_t)t;
            const int8_t *x = (const int8_t *)xt + 256 * b;
            const float *xd = (const float *)(const void *)(xt + in) + 8 * b, *xs = xd + in / 32;
            const __m512 dxv = _mm512_permutexvar_ps(dxi, _mm512_castps256_ps512(_mm256_loadu_ps(xd)));
            const __m512 xsv = _mm512_permutexvar_ps(dxi, _mm512_castps256_ps512(_mm256_loadu_ps(xs)));
            const __m512i x0 = ld_reg(x), x1 = ld_reg(x + 64), x2 = ld_reg(x + 128), x3 = ld_reg(x + 192);
            _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
                const __m512i us = q4k_dot(u[k], x0, x1, x2, x3);
                acc[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(us), _mm512_mul_ps(scv[k], dxv), acc[t][k]);
                acc[t][k] = _mm512_fnmadd_ps(mnv[k], xsv, acc[t][k]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
        out[t][0] = hsum512(acc[t][0]);
        out[t][1] = hsum512(acc[t][1]);
    }
}


/* Q6_K: out[t][k] for 2 rows and T ≤ 4 tokens, rows4_q6kq's arithmetic with each half super-block
 * of the 2 rows decoded once (6-bit codes, d·scale per lane) for the T tokens. */
/* Half h of super-block blk of a Q6_K row as tile_q6k uses it: codes ua (low halves), ub (high),
 * their sub-block scales·d per lane (scidx: q6k_scidx). */
static inline __attribute__((always_inline)) void q6k_decode(const uint8_t *blk, int h, const __m128i scidx[4],
                                                             __m512i *ua, __m512i *ub, __m512 *sa, __m512 *sb) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i hsh = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2); /* qh >> 0 | qh >> 2 */
    const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
    const __m512i qh = _mm512_srlv_epi64(_mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(blk + 128 + 32 * h))), hsh);
    *ua = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
    *ub = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh, m30));
    const __m128i scb = _mm_loadu_si128((const void *)(blk + 192));
    const __m512 d = _mm512_set1_ps(f16_at(blk + 208));
    *sa = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(scb, scidx[2 * h]))), d);
    *sb = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(scb, scidx[2 * h + 1]))), d);
}

/* The byte shuffles that spread the 16 sub-block scales of a super-block over lanes (as rows4_q6kq). */
static void q6k_scidx(__m128i scidx[4]) {
    for (int v = 0; v < 4; v++) {
        int8_t ix[16];
        for (int i = 0; i < 16; i++) ix[i] = (int8_t)(4 * v + i / 4);
        scidx[v] = _mm_loadu_si128((const void *)ix);
    }
}

#define Q6_PRE_BYTES 256 /* a decoded half super-block of one row: ua, ub, sa, sb */

/* The super-blocks of a row pair decoded once (q6k_decode) into pre for all token passes: per half
 * u = 2b + h and row k at (2u + k)·Q6_PRE_BYTES, ua, ub, sa, sb (as q8_pregather; Llama-1B-shape
 * products of 64 tokens on a Zen 4 core ≈ +20%; Q4_K and MLX4 the same did not gain, their decoding
 * being cheap beside their loads from the buffer). */
static void q6k_pregather(const char *const *r, int64_t nsb, char *pre) {
    __m128i scidx[4];
    q6k_scidx(scidx);
    for (int64_t u = 0; u < 2 * nsb; u++)
        for (int k = 0; k < 2; k++) {
            __m512i a, b;
            __m512 sa, sb;
            q6k_decode((const uint8_t *)r[k] + 210 * (size_t)(u / 2), (int)(u % 2), scidx, &a, &b, &sa, &sb);
            __m512i *p = (__m512i *)(void *)(pre + (size_t)(2 * u + k) * Q6_PRE_BYTES);
            _mm512_store_si512(p, a);
            _mm512_store_si512(p + 1, b);
            _mm512_store_ps((void *)(p + 2), sa);
            _mm512_store_ps((void *)(p + 3), sb);
        }
}

static inline __attribute__((always_inline)) void tile_q6k(int T, const char *pre, const char *const *r, const char *xp,
                                                           size_t tb, int64_t in, float (*out)[4]) {
    const int64_t nsb = in / 256;
    const __m512i ones = _mm512_set1_epi8(1);
    const __m512i dxi = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m128i scidx[4];
    q6k_scidx(scidx);
    __m512 acc[4][2];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        for (int h = 0; h < 2; h++) {
            __m512i ua[2], ub[2];
            __m512 sa_[2], sb_[2];
            _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
                if (pre) {
                    const __m512i *p = (const __m512i *)(const void *)(pre + (size_t)(2 * (2 * b + h) + k) * Q6_PRE_BYTES);
                    ua[k] = _mm512_load_si512(p);
                    ub[k] = _mm512_load_si512(p + 1);
                    sa_[k] = _mm512_load_ps((const void *)(p + 2));
                    sb_[k] = _mm512_load_ps((const void *)(p + 3));
                } else {
                    q6k_decode((const uint8_t *)r[k] + 210 * (size_t)b, h, scidx, &ua[k], &ub[k], &sa_[k], &sb_[k]);
                }
            }
            _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
                const char *xt = xp + tb * (size_t)t;
                const int8_t *x = (const int8_t *)xt + 256 * b + 128 * h;
                const __m512i xa = ld_reg(x), xb = ld_reg(x + 64);
                const __m512i ca = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xa), 5));
                const __m512i cb = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xb), 5));
                const float *d4 = (const float *)(const void *)(xt + in) + 8 * b + 4 * h;
                const __m512 dxa = _mm512_permutexvar_ps(dxi, _mm512_castps128_ps512(_mm_loadu_ps(d4)));
                const __m512 dxb = _mm512_permutexvar_ps(dxi, _mm512_castps128_ps512(_mm_loadu_ps(d4 + 2)));
                _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
                    const __m512i sa = _mm512_dpbusd_epi32(ca, ua[k], xa), sb = _mm512_dpbusd_epi32(cb, ub[k], xb);
                    acc[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa), _mm512_mul_ps(sa_[k], dxa), acc[t][k]);
                    acc[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sb), _mm512_mul_ps(sb_[k], dxb), acc[t][k]);
                }
            }
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
        out[t][0] = hsum512(acc[t][0]);
        out[t][1] = hsum512(acc[t][1]);
    }
}

/* MLX4: out[t][k] for 2 rows and T ≤ 4 tokens, rows4_mlx4q's arithmetic with each 128 elements of
 * the 2 rows (nibbles, scales, biases) taken apart once for the T tokens; the biases enter the same
 * accumulators (a quarter of the group's bias per lane, 4 lanes a 32-element block, times the
 * block's Σx). */
static inline __attribute__((always_inline)) void tile_mlx4(int T, const char *const *r, const lmc_mlx_row *mr,
                                                            const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    const int64_t nc = in / 128;
    const int gs = mr[0].group_size, npc = 128 / gs;
    const lmc_dtype st = mr[0].scale_type;
    const __mmask8 gm = (__mmask8)((1u << npc) - 1);
    const __m512i gidx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           gs == 32 ? 2 : gs == 64 ? 3 : 4); /* lane → group in the 128 */
    const __m512i bidx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const size_t side_off = q8_side_off(in);
    __m512 acc[4][2];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        __m512i lo[2], hi[2];
        __m512 sv[2], bv[2];
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
            const __m512i v = _mm512_loadu_si512(r[k] + 64 * c);
            lo[k] = _mm512_and_si512(v, low4);
            hi[k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            sv[k] = _mm512_permutexvar_ps(gidx, _mm512_castps128_ps512(mlx_side4(st, mr[k].scales, c * npc, gm)));
            bv[k] = _mm512_mul_ps(_mm512_permutexvar_ps(gidx, _mm512_castps128_ps512(mlx_side4(st, mr[k].biases, c * npc, gm))),
                                  _mm512_set1_ps(0.25f));
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const char *xt = xp + tb * (size_t)t;
            const int8_t *xq = (const int8_t *)xt + 128 * c;
            const __m512i xlo = ld_reg(xq), xhi = ld_reg(xq + 64);
            const __m512 dxv = _mm512_loadu_ps(xt + side_off + Q8_SIDE_BYTES * (size_t)c);
            const float *xs = (const float *)(const void *)(xt + in) + in / 32 + 4 * c;
            const __m512 xsv = _mm512_permutexvar_ps(bidx, _mm512_castps128_ps512(_mm_loadu_ps(xs)));
            _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
                const __m512i sm = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[k], xlo), hi[k], xhi);
                acc[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sm), _mm512_mul_ps(sv[k], dxv), acc[t][k]);
                acc[t][k] = _mm512_fmadd_ps(bv[k], xsv, acc[t][k]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++)
            out[t][k] = hsum512(acc[t][k]) + mlx_tail(4, &mr[k], r[k], xp + tb * (size_t)t, in);
}

/* MLX8: out[t][k] for 2 rows and T ≤ 4 tokens, rows4_mlx8q's arithmetic with each 128 elements'
 * scales and biases of the 2 rows spread over the lanes once for the T tokens; the biases enter the
 * same accumulators (an eighth of the group's bias per lane, 8 lanes a 32-element block, times the
 * block's Σx). */
static inline __attribute__((always_inline)) void tile_mlx8(int T, const char *const *r, const lmc_mlx_row *mr,
                                                            const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    const int64_t nc = in / 128;
    const int gs = mr[0].group_size, npc = 128 / gs;
    const lmc_dtype st = mr[0].scale_type;
    const __mmask8 gm = (__mmask8)((1u << npc) - 1);
    const int sh = gs == 32 ? 3 : gs == 64 ? 4 : 5; /* lane → group: (4·lane) / gs */
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i gia = _mm512_srli_epi32(lane, sh), gib = _mm512_srli_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(16)), sh);
    const __m512i dxi = _mm512_srli_epi32(lane, 3);
    /* the biases' part, Σ_g bias_g·Σx_g, in 4 lanes a (token, row): one group a lane (as rows4_mlx8q) */
    __m512 acc[4][2];
    __m128 bacc[4][2];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
        acc[t][0] = acc[t][1] = _mm512_setzero_ps();
        bacc[t][0] = bacc[t][1] = _mm_setzero_ps();
    }
    for (int64_t c = 0; c < nc; c++) {
        __m512 sa[2], sb[2];
        __m128 b4[2];
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
            const __m512 s4 = _mm512_castps128_ps512(mlx_side4(st, mr[k].scales, c * npc, gm));
            b4[k] = mlx_side4(st, mr[k].biases, c * npc, gm);
            sa[k] = _mm512_permutexvar_ps(gia, s4);
            sb[k] = _mm512_permutexvar_ps(gib, s4);
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const char *xt = xp + tb * (size_t)t;
            const int8_t *xq = (const int8_t *)xt + 128 * c;
            const float *xd = (const float *)(const void *)(xt + in) + 4 * c, *xs = xd + in / 32;
            const __m512i xa = ld_reg(xq), xb = ld_reg(xq + 64);
            const __m512 dxa = _mm512_permutexvar_ps(dxi, _mm512_castps128_ps512(_mm_loadu_ps(xd)));
            const __m512 dxb = _mm512_permutexvar_ps(dxi, _mm512_castps128_ps512(_mm_loadu_ps(xd + 2)));
            const __m128 gsum = mlx_gsum4(xs, npc);
            _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
                const char *blk = r[k] + 128 * c;
                const __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(blk), xa);
                const __m512i pb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(blk + 64), xb);
                acc[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pa), _mm512_mul_ps(sa[k], dxa), acc[t][k]);
                acc[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pb), _mm512_mul_ps(sb[k], dxb), acc[t][k]);
                bacc[t][k] = _mm_fmadd_ps(b4[k], gsum, bacc[t][k]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
            out[t][k] = hsum512(acc[t][k]) + hsum128(bacc[t][k]) +
                        mlx_tail(8, &mr[k], r[k], xp + tb * (size_t)t, in);
        }
}

/* The tiles by dtype and token count (1..4), each compiled with its constants folded in. */
#define TILE(name, kernel, ...)                                                                               \
    static void name(const char *pre, const char *const *r, const lmc_mlx_row *mr, const char *xp, size_t tb, \
                     int64_t in, float (*out)[4]) {                                                           \
        (void)pre;                                                                                            \
        (void)mr;                                                                                             \
        kernel(__VA_ARGS__, r, xp, tb, in, out);                                                              \
    }
#define TILES(prefix, kernel, ...)                                                                            \
    TILE(prefix##_t1, kernel, __VA_ARGS__, 1)                                                                 \
    TILE(prefix##_t2, kernel, __VA_ARGS__, 2)                                                                 \
    TILE(prefix##_t3, kernel, __VA_ARGS__, 3)                                                                 \
    TILE(prefix##_t4, kernel, __VA_ARGS__, 4)
#define tile_q8_(q4, T, r, xp, tb, in, out) tile_q8(q4, T, pre, r, xp, tb, in, out)
TILES(tile_q4_0, tile_q8_, 1)
TILES(tile_q8_0, tile_q8_, 0)
#undef tile_q8_
TILES(tile_q4_k, tile_q4k, 0)
TILES(tile_q5_k, tile_q4k, 1)
#define tile_q6k_(unused, T, r, xp, tb, in, out) tile_q6k(T, pre, r, xp, tb, in, out)
TILES(tile_q6_k, tile_q6k_, 0)
#undef tile_q6k_
#define tile_mlx4_(unused, T, r, xp, tb, in, out) tile_mlx4(T, r, mr, xp, tb, in, out)
TILES(tile_mlx4, tile_mlx4_, 0)
#undef tile_mlx4_
#define tile_mlx8_(unused, T, r, xp, tb, in, out) tile_mlx8(T, r, mr, xp, tb, in, out)
TILES(tile_mlx8, tile_mlx8_, 0)
#undef tile_mlx8_
#define tile_qr_(ty, T, r, xp, tb, in, out) lmc_cpu_qr_tile(ty, T, r, xp, tb, in, out)
TILES(tile_q4r, tile_qr_, LMC_DTYPE_Q4_0R)
TILES(tile_q8r, tile_qr_, LMC_DTYPE_Q8_0R)
#undef tile_qr_
#define tile_f_(ty, T, r, xp, tb, in, out) lmc_cpu_ftile(ty, T, r, xp, tb, in, out)
TILES(tile_bf16, tile_f_, LMC_DTYPE_BF16)
TILES(tile_f16, tile_f_, LMC_DTYPE_F16)
#undef tile_f_
#undef TILES
#undef TILE

void lmc_cpu_simd_gemm(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1) {
    typedef void (*tile_fn)(const char *pre, const char *const *r, const lmc_mlx_row *mr, const char *xp, size_t tb,
                            int64_t in, float (*out)[4]);
    static const tile_fn q4[4] = {tile_q4_0_t1, tile_q4_0_t2, tile_q4_0_t3, tile_q4_0_t4};
    static const tile_fn q8[4] = {tile_q8_0_t1, tile_q8_0_t2, tile_q8_0_t3, tile_q8_0_t4};
    static const tile_fn q4k[4] = {tile_q4_k_t1, tile_q4_k_t2, tile_q4_k_t3, tile_q4_k_t4};
    static const tile_fn q5k[4] = {tile_q5_k_t1, tile_q5_k_t2, tile_q5_k_t3, tile_q5_k_t4};
    static const tile_fn q6k[4] = {tile_q6_k_t1, tile_q6_k_t2, tile_q6_k_t3, tile_q6_k_t4};
    static const tile_fn mlx4[4] = {tile_mlx4_t1, tile_mlx4_t2, tile_mlx4_t3, tile_mlx4_t4};
    static const tile_fn mlx8[4] = {tile_mlx8_t1, tile_mlx8_t2, tile_mlx8_t3, tile_mlx8_t4};
    static const tile_fn q4r[4] = {tile_q4r_t1, tile_q4r_t2, tile_q4r_t3, tile_q4r_t4};
    static const tile_fn q8r[4] = {tile_q8r_t1, tile_q8r_t2, tile_q8r_t3, tile_q8r_t4};
    static const tile_fn bf16[4] = {tile_bf16_t1, tile_bf16_t2, tile_bf16_t3, tile_bf16_t4};
    static const tile_fn f16[4] = {tile_f16_t1, tile_f16_t2, tile_f16_t3, tile_f16_t4};
    LMC_ASSERT(simd_level == LMC_SIMD_AVX512); /* the tiles read the AVX-512 tier's activation layout */
    const tile_fn *fn;
    int R = 4; /* rows a tile */
    switch (w->type) {
    case LMC_DTYPE_Q4_0R: fn = q4r, R = 2; break;
    case LMC_DTYPE_Q8_0R: fn = q8r, R = 2; break;
    case LMC_DTYPE_BF16: fn = bf16; break;
    case LMC_DTYPE_F16: fn = f16; break;
    case LMC_DTYPE_Q4_0: fn = q4; break;
    case LMC_DTYPE_Q8_0: fn = q8; break;
    case LMC_DTYPE_Q4_K: fn = q4k, R = 2; break;
    case LMC_DTYPE_Q5_K: fn = q5k, R = 2; break;
    case LMC_DTYPE_Q6_K: fn = q6k, R = 2; break;
    case LMC_DTYPE_MLX4: fn = mlx4, R = 2; break;
    case LMC_DTYPE_MLX8: fn = mlx8, R = 2; break;
    default: /* the decode kernels, token by token */
        lmc_cpu_simd_matvec(y, w, xp, n_tok, o0, o1);
        return;
    }
    const int64_t in = w->ne[0], out = w->ne[1];
    const size_t tb = token_bytes(w);
    /* Q4_0 / Q8_0 / Q6_K over more than one pass of 4 tokens: the rows of a tile decoded once for
     * all passes (q8_pregather, q6k_pregather; without the buffer, in every pass) */
    const size_t pre_row = w->type == LMC_DTYPE_Q6_K ? (size_t)(in / 256) * 2 * Q6_PRE_BYTES
                         : w->type == LMC_DTYPE_Q4_0 || w->type == LMC_DTYPE_Q8_0 ? (size_t)(in / 128) * Q8_PRE_BYTES : 0;
    /* Blocks of GEMM_ROWS rows: every pass of 4 tokens meets all tiles of a block before the next
     * pass, so a pass writes whole lines of y (tile by tile, a pass wrote R floats of a line per
     * token and the lines of y went through the caches out·tokens/R times) */
    enum { GEMM_ROWS = 16 };
    /* BF16 / F16 rows in chunks of kc inputs, every row block over one chunk before the next: the
     * tokens' activations of a chunk stay in L2 for all blocks (64 tokens of 8192 bf16 inputs, 1 MB,
     * came from L3 for each block); the chunks' sums add up in y. Other types: one chunk. xe: bytes
     * an activation element. */
    const int64_t kc = (w->type == LMC_DTYPE_BF16 || w->type == LMC_DTYPE_F16) ? lmc_cpu_ftile_kc() : in;
    const int dp = w->type == LMC_DTYPE_BF16 && bf16_act; /* bf16 compute: lmc_cpu_bf16dot_tile */
    const size_t xe = dp ? 2 : 4;
    const int TS = dp ? 6 : 4; /* tokens a pass */
    char *pre = n_tok > 4 && pre_row ? aligned_alloc(64, pre_row * GEMM_ROWS) : NULL;
    for (int64_t k0 = 0; k0 < in; k0 += kc) { /* one chunk but for BF16 / F16 */
        const int64_t kn = in - k0 < kc ? in - k0 : kc;
        for (int64_t ob = o0; ob < o1; ob += GEMM_ROWS) {
            const int64_t oe = ob + GEMM_ROWS < o1 ? ob + GEMM_ROWS : o1;
            const int nt = (int)((oe - ob + R - 1) / R); /* tiles in the block */
            int64_t ro[GEMM_ROWS / 2][4];
            const char *r[GEMM_ROWS / 2][4];
            lmc_mlx_row mr[GEMM_ROWS / 2][4];
            for (int i = 0; i < nt; i++) {
                const int64_t o = ob + (int64_t)i * R;
                for (int k = 0; k < R; k++) {
                    ro[i][k] = o + k < oe ? o + k : o; /* past the block: a valid row again, its results dropped */
                    r[i][k] = (const char *)w->data + (size_t)ro[i][k] * w->nb[1] + 2 * (size_t)k0;
                    if (lmc_dtype_is_mlx(w->type)) mr[i][k] = lmc_quant_mlx_row(w->aux, ro[i][k]);
                }
                char *pi = pre ? pre + pre_row * (size_t)(R * i) : NULL;
                if (pi && w->type == LMC_DTYPE_Q6_K) q6k_pregather(r[i], in / 256, pi);
                else if (pi) q8_pregather(w->type == LMC_DTYPE_Q4_0, r[i], in / 128, pi);
            }
            /* the next block's rows asked for a slice a pass, so they are near when its gathering (or, MLX and
             * K-quants, its first pass) starts: MLX8 64-token prefill +2% (measured tile by tile) */
            const size_t nx_bytes = n_tok > 4 && oe < o1 && kn == in ? (size_t)(o1 - oe < GEMM_ROWS ? o1 - oe : GEMM_ROWS) * w->nb[1] : 0;
            const char *nx = nx_bytes ? (const char *)w->data + (size_t)oe * w->nb[1] : NULL;
            const size_t slice = (nx_bytes / (size_t)((n_tok + TS - 1) / TS) + 63) / 64 * 64;
            for (int64_t t0 = 0; t0 < n_tok; t0 += TS) {
                const int T = n_tok - t0 < TS ? (int)(n_tok - t0) : TS;
                for (size_t b = (size_t)(t0 / TS) * slice; b < (size_t)(t0 / TS + 1) * slice && b < nx_bytes; b += 64)
                    _mm_prefetch(nx + b, _MM_HINT_T0);
                for (int i = 0; i < nt; i++) {
                    float sv[8][4];
                    const char *xt = (const char *)xp + tb * (size_t)t0 + xe * (size_t)k0;
                    if (dp) lmc_cpu_bf16dot_tile(T, r[i], xt, tb, kn, sv);
                    else fn[T - 1](pre ? pre + pre_row * (size_t)(R * i) : NULL, r[i], mr[i], xt, tb, kn, sv);
                    const int64_t o = ob + (int64_t)i * R;
                    for (int t = 0; t < T; t++) {
                        float *yo = y + (size_t)(t0 + t) * out + o;
                        if (R == 4 && o + 4 <= oe) { /* the token's 4 results in one store */
                            const __m128 v = _mm_loadu_ps(sv[t]);
                            _mm_storeu_ps(yo, k0 ? _mm_add_ps(_mm_loadu_ps(yo), v) : v);
                        } else {
                            for (int k = 0; k < R; k++) if (o + k < oe) yo[k] = k0 ? yo[k] + sv[t][k] : sv[t][k];
                        }
                    }
                }
            }
        }
    }
    free(pre);
}

void lmc_cpu_simd_matvec(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1) {
    const int64_t in = w->ne[0], out = w->ne[1];
    const size_t tb = token_bytes(w);
    if (simd_level == LMC_SIMD_AVX2) {
        lmc_cpu_avx2_matvec(y, w, xp, tb, n_tok, o0, o1, n_streams, pf_bytes);
        return;
    }
    /* The thread's rows are read as n_streams stretches side by side (rows o0 + k·per + i for
     * k < n_streams, one row of each per kernel call): one core reads memory faster from several
     * places at once than from one. Rows past o1 repeat a valid one (their results are dropped).
     * The prefetch reaches pf_bytes ahead in each stretch (whole rows; 0: none at the end). */
    const int64_t n = o1 - o0, ns = n >= 4 * n_streams ? n_streams : 1, step = 4 / ns;
    const int64_t per = (n + 3) / 4 * step; /* rows per stretch: ≥ n / ns, a multiple of step */
    const int64_t pf_rows = ((int64_t)pf_bytes + (int64_t)w->nb[1] - 1) / (int64_t)w->nb[1];
    for (int64_t i = 0; i < per; i += step) {
        int64_t ro[4];
        int ok[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            ro[k] = o0 + (k % ns) * per + i + k / ns;
            ok[k] = ro[k] < o1; /* k = 0 always is: i ≤ per - step < n */
        }
        const size_t pf = i + step + pf_rows < per ? (size_t)pf_rows * w->nb[1] : 0;
        const char *r[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            if (!ok[k]) ro[k] = ro[0];
            r[k] = (const char *)w->data + (size_t)ro[k] * w->nb[1];
        }
        for (int64_t t = 0; t < n_tok; t++) {
            const char *xt = (const char *)xp + tb * (size_t)t;
            float s[4];
            switch (w->type) {
            case LMC_DTYPE_BF16:
                if (bf16_act) lmc_cpu_bf16dot_rows4(r, xt, in, pf, s);
                else lmc_cpu_ftile_rows4(w->type, r, (const float *)(const void *)xt, in, pf, s);
                break;
            case LMC_DTYPE_F16: lmc_cpu_ftile_rows4(w->type, r, (const float *)(const void *)xt, in, pf, s); break;
            case LMC_DTYPE_Q8_0: rows4_q8_0(r, xt, in, pf, s); break;
            case LMC_DTYPE_Q4_0: rows4_q4_0(r, xt, in, pf, s); break;
            case LMC_DTYPE_Q4_0R: case LMC_DTYPE_Q8_0R: lmc_cpu_qr_rows4(w->type, r, xt, in, pf, s); break;
            case LMC_DTYPE_Q4_K: rows4_q4kq(0, r, xt, in, pf, s); break;
            case LMC_DTYPE_Q5_K: rows4_q4kq(1, r, xt, in, pf, s); break;
            case LMC_DTYPE_Q6_K: rows4_q6kq(r, xt, in, pf, s); break;
            case LMC_DTYPE_MLX4: rows4_mlx4q(w->aux, ro, r, xt, in, pf, s); break;
            case LMC_DTYPE_MLX8: rows4_mlx8q(w->aux, ro, r, xt, in, pf, s); break;
            case LMC_DTYPE_MXFP4: rows4_mxfp4(r, xt, in, pf, s); break;
            case LMC_DTYPE_MXFP4_MLX: rows4_mxfp4m(w->aux, ro, r, xt, in, pf, s); break;
            default: LMC_ASSERT(!"no SIMD kernel for this dtype");
            }
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) if (ok[k]) y[(size_t)t * out + ro[k]] = s[k];
        }
    }
}

#pragma GCC pop_options

#else /* not x86-64: lmc_cpu_simd_has() is 0 and nothing below is reached */

void lmc_cpu_simd_matvec(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1) {
    LMC_ASSERT(!"no SIMD kernels in this build");
}

void lmc_cpu_simd_gemm(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1) {
    LMC_ASSERT(!"no SIMD kernels in this build");
}

#endif
