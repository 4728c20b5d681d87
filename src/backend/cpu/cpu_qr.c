/* cpu_qr.c — AVX-512 VNNI kernels for Q4_0R and Q8_0R, the layouts Q4_0 and Q8_0 weights are
 * rewritten into when the CPU backend binds them (cpu_rebind.c; the layouts: core/quant.h).
 *
 * A Q4_0 row interleaves a 2-byte scale with every 16 code bytes (Q8_0: every 32), so their
 * kernels (cpu_simd.c) gather the codes of 4 blocks with byte permutes, take 4 lanes a block through
 * vpdpbusd and scale each lane in f32: about 27 vector instructions per 256 weights and row for
 * Q4_0. The regrouped rows keep the same bytes in chunks of 16 blocks laid out so that lane l of
 * every vpdpbusd over a chunk belongs to block l: the 8 vpdpbusd of a chunk (Q4_0R: 4 code vectors ×
 * low and high nibbles; Q8_0R: 8 code vectors) sum each block's 32 products in one lane, and one f32
 * step scales the whole chunk (16 scales from one load). Q4_0R's high nibbles go in masked, not
 * shifted (16·q: a second accumulator, shifted back once per chunk, exactly); Q8_0R's codes are
 * stored + 128 (unsigned for vpdpbusd). The accumulator starts at -8·Σx (Q4_0R) or -128·Σx (Q8_0R)
 * per block. About 27 instructions per 512 weights and row for Q4_0R: one core's Q4_0 kernel rate
 * in cache 108 → 173 GFLOP/s (bench_matmul --fit 1048576, docs/BENCHMARKS.md).
 *
 * Activations (qr_prepare_avx512 in cpu_simd.c), per token and chunk of 16 blocks
 * (LMC_CPU_QR_CHUNK bytes): 512 int8 codes, byte 64m + 4l + i = element 4m + i of block l (Q8_0
 * blocks as the other integer kernels quantize them), then the 16 block scales (f32) and the
 * offset term per block (int32: -8·Σq or -128·Σq); a last chunk of w < 16 blocks is padded with
 * zeros, and its weights are read with masked loads of its 4w-byte strips. The result equals the
 * product of the dequantized weights and the dequantized activations up to f32 rounding, as the
 * other integer kernels.
 */
#include "cpu_kernels.h"

#include <string.h>

size_t lmc_cpu_qr_token_bytes(int64_t in) { return LMC_CPU_QR_CHUNK * (size_t)((in / 32 + 15) / 16); }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")

/* Strip m of chunk c of a row (Q4_0R: 4 strips of 4w bytes a chunk, Q8_0R: 8), w blocks in the chunk
 * (masked below 16). */
static inline __m512i strip(int q8, const char *row, int64_t c, int w, int m) {
    const char *p = row + (q8 ? 512 : 256) * c;
    if (w == 16) return _mm512_loadu_si512(p + 64 * m);
    return _mm512_maskz_loadu_epi8((__mmask64)((1ull << (4 * w)) - 1), p + 4 * w * m);
}

/* The chunk's 16 scales (w valid) as f32. */
static inline __m512 scales(int q8, const char *row, int64_t nb, int64_t c, int w) {
    const char *s = row + (q8 ? 32 : 16) * nb + 32 * c;
    if (w == 16) return _mm512_cvtph_ps(_mm256_loadu_si256((const void *)s));
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << w) - 1), s));
}

/* A chunk of one row as 8 vpdpbusd operands: vector m meets the activations' vector m (elements
 * 4m..4m+3 of each block). Q8_0R: its 8 strips. Q4_0R: strip p's low nibbles (m = 2p) and its high
 * nibbles in place (m = 2p + 1: 16·q, summed apart and shifted back once, exactly). */
typedef struct { __m512i v[8]; } chunk_codes;

static inline chunk_codes load_chunk(int q8, const char *row, int64_t c, int w) {
    chunk_codes k;
    if (q8) {
        _Pragma("GCC unroll 8") for (int m = 0; m < 8; m++) k.v[m] = strip(1, row, c, w, m);
        return k;
    }
    const __m512i m0f = _mm512_set1_epi8(0x0F), mf0 = _mm512_set1_epi8((char)0xF0);
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
        const __m512i v = strip(0, row, c, w, p);
        k.v[2 * p] = _mm512_and_si512(v, m0f);
        k.v[2 * p + 1] = _mm512_and_si512(v, mf0);
    }
    return k;
}

/* Σ over the chunk of R rows (k[0..R)) against one token's chunk x: the 16 block sums of each, offset
 * included. Each activation vector is loaded once for the R rows and kept in a register (GCC would
 * otherwise fold the load into every vpdpbusd; in the prefill tile those loads were the bound). */
static inline __attribute__((always_inline)) void chunk_isum(int q8, int R, const chunk_codes *k, const char *x,
                                                             __m512i *s) {
    __m512i a[2], b[2];
    _Pragma("GCC unroll 2") for (int j = 0; j < R; j++) {
        a[j] = _mm512_loadu_si512(x + 576);
        b[j] = _mm512_setzero_si512();
    }
    _Pragma("GCC unroll 8") for (int m = 0; m < 8; m++) {
        __m512i xv = _mm512_loadu_si512(x + 64 * m);
        __asm__("" : "+v"(xv));
        _Pragma("GCC unroll 2") for (int j = 0; j < R; j++) {
            if (m % 2) b[j] = _mm512_dpbusd_epi32(b[j], k[j].v[m], xv);
            else a[j] = _mm512_dpbusd_epi32(a[j], k[j].v[m], xv);
        }
    }
    _Pragma("GCC unroll 2") for (int j = 0; j < R; j++)
        s[j] = _mm512_add_epi32(a[j], q8 ? b[j] : _mm512_srai_epi32(b[j], 4)); /* Q4_0R: b = 16·Σ q·x */
}

static inline __attribute__((always_inline)) void rows4(int q8, const char *const r[4], const char *xp, int64_t in,
                                                        size_t pf, float out[4]) {
    const int64_t nb = in / 32, nc = (nb + 15) / 16, cb = q8 ? 512 : 256;
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        const int w = nb - 16 * c < 16 ? (int)(nb - 16 * c) : 16;
        const char *x = xp + LMC_CPU_QR_CHUNK * (size_t)c;
        const __m512 dx = _mm512_loadu_ps(x + 512);
        _Pragma("GCC unroll 2") for (int k0 = 0; k0 < 4; k0 += 2) { /* rows in pairs: an activation load a pair */
            chunk_codes v[2];
            _Pragma("GCC unroll 2") for (int k = k0; k < k0 + 2; k++) {
                const char *b = r[k] + cb * c + pf;
                for (int64_t o = 0; o < cb; o += 64) _mm_prefetch(b + o, _MM_HINT_T0);
                _mm_prefetch(r[k] + (cb / 16) * nb + 32 * c + pf, _MM_HINT_T0); /* the scales */
                v[k - k0] = load_chunk(q8, r[k], c, w);
            }
            __m512i s[2];
            chunk_isum(q8, 2, v, x, s);
            _Pragma("GCC unroll 2") for (int k = k0; k < k0 + 2; k++)
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[k - k0]), _mm512_mul_ps(scales(q8, r[k], nb, c, w), dx), acc[k]);
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = _mm512_reduce_add_ps(acc[k]);
}

void lmc_cpu_qr_rows4(lmc_dtype t, const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    if (t == LMC_DTYPE_Q8_0R) rows4(1, r, xp, in, pf, out);
    else rows4(0, r, xp, in, pf, out);
}

/* out[t][k] for 2 rows and T ≤ 4 tokens: each chunk's code vectors of the 2 rows loaded once for the
 * T tokens (the rows stay in L1 between the passes of a prefill batch). */
static inline __attribute__((always_inline)) void tile(int q8, int T, const char *const *r, const char *xp, size_t tb,
                                                       int64_t in, float (*out)[4]) {
    const int64_t nb = in / 32, nc = (nb + 15) / 16;
    __m512 acc[4][2];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        const int w = nb - 16 * c < 16 ? (int)(nb - 16 * c) : 16;
        chunk_codes v[2];
        __m512 dw[2];
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
            v[k] = load_chunk(q8, r[k], c, w);
            dw[k] = scales(q8, r[k], nb, c, w);
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const char *x = xp + tb * (size_t)t + LMC_CPU_QR_CHUNK * (size_t)c;
            const __m512 dx = _mm512_loadu_ps(x + 512);
            __m512i is[2];
            chunk_isum(q8, 2, v, x, is);
            _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++)
                acc[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[k]), _mm512_mul_ps(dw[k], dx), acc[t][k]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) out[t][k] = _mm512_reduce_add_ps(acc[t][k]);
}

void lmc_cpu_qr_tile(lmc_dtype t, int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    const int q8 = t == LMC_DTYPE_Q8_0R;
    LMC_CPU_TILE_SWITCH(tile, q8, T, r, xp, tb, in, out)
}

#pragma GCC pop_options

#else /* not x86-64: no regrouped weights are made (cpu_rebind.c asks for the AVX-512 tier) */

void lmc_cpu_qr_rows4(lmc_dtype t, const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    LMC_ASSERT(!"no Q4_0R / Q8_0R kernels in this build");
}
void lmc_cpu_qr_tile(lmc_dtype t, int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    LMC_ASSERT(!"no Q4_0R / Q8_0R kernels in this build");
}

#endif
