/* cpu_q4r.c — AVX-512 VNNI kernels for Q4_0R, the layout Q4_0 weights are rewritten into when the
 * CPU backend binds them (cpu_rebind.c; the layout is defined in core/quant.h).
 *
 * A Q4_0 row interleaves a 2-byte scale with every 16 code bytes, so its kernel (cpu_simd.c) gathers
 * the codes of 4 blocks with a byte permute, takes 4 lanes a block through vpdpbusd and scales each
 * lane in f32: about 27 vector instructions per 256 weights and row. Q4_0R keeps the same bytes
 * in chunks of 16 blocks laid out so that lane l of every vpdpbusd over a chunk belongs to block l:
 * the 8 vpdpbusd of a chunk (4 code vectors × low and high nibbles) sum each block's 32 products in
 * one lane, and one f32 step scales the whole chunk (16 scales from one load). The high nibbles go
 * in masked, not shifted (16·q: a second accumulator, shifted back once per chunk, exactly), and the
 * accumulator starts at -8·Σx per block (Q4_0's offset). About 27 instructions per 512 weights and
 * row: one core's kernel rate in cache 92 → ~190 GFLOP/s (bench_matmul --fit, docs/BENCHMARKS.md).
 *
 * Activations (q4r_prepare_avx512 in cpu_simd.c), per token and chunk of 16 blocks
 * (LMC_CPU_Q4R_CHUNK bytes): 512 int8 codes, byte 64m + 4l + i = element 4m + i of block l (Q8_0
 * blocks as the other integer kernels quantize them), then the 16 block scales (f32) and -8·Σq per
 * block (int32); a last chunk of w < 16 blocks is padded with zeros, and its weights are read with
 * masked loads of its 4w-byte strips. The result equals the product of the dequantized weights
 * and the dequantized activations up to f32 rounding, as the other integer kernels.
 */
#include "cpu_kernels.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

size_t lmc_cpu_q4r_token_bytes(int64_t in) { return LMC_CPU_Q4R_CHUNK * (size_t)((in / 32 + 15) / 16); }

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")

/* The code bytes of strip p of chunk c of a row (w blocks in the chunk: masked below 16). */
static inline __m512i strip(const char *row, int64_t c, int w, int p) {
    if (w == 16) return _mm512_loadu_si512(row + 256 * c + 64 * p);
    return _mm512_maskz_loadu_epi8((__mmask64)((1ull << (4 * w)) - 1), row + 256 * c + 4 * w * p);
}

/* The chunk's 16 scales (w valid) as f32. */
static inline __m512 scales(const char *row, int64_t nb, int64_t c, int w) {
    const char *s = row + 16 * nb + 32 * c;
    if (w == 16) return _mm512_cvtph_ps(_mm256_loadu_si256((const void *)s));
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << w) - 1), s));
}

/* Σ over the chunk of a row against one token's chunk x: the 16 block sums, offset included. */
static inline __m512i chunk_isum(const __m512i v[4], const char *x) {
    const __m512i m0f = _mm512_set1_epi8(0x0F), mf0 = _mm512_set1_epi8((char)0xF0);
    __m512i lo = _mm512_loadu_si512(x + 576), hi = _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
        lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v[p], m0f), _mm512_loadu_si512(x + 128 * p));
        hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(v[p], mf0), _mm512_loadu_si512(x + 128 * p + 64));
    }
    return _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4)); /* hi = 16·Σ q·x exactly */
}

void lmc_cpu_q4r_rows4(const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    const int64_t nb = in / 32, nc = (nb + 15) / 16;
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        const int w = nb - 16 * c < 16 ? (int)(nb - 16 * c) : 16;
        const char *x = xp + LMC_CPU_Q4R_CHUNK * (size_t)c;
        const __m512 dx = _mm512_loadu_ps(x + 512);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const char *b = r[k] + 256 * c;
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) _mm_prefetch(b + pf + 64 * p, _MM_HINT_T0);
            _mm_prefetch(r[k] + 16 * nb + 32 * c + pf, _MM_HINT_T0);
            __m512i v[4];
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) v[p] = strip(r[k], c, w, p);
            const __m512i s = chunk_isum(v, x);
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(scales(r[k], nb, c, w), dx), acc[k]);
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = _mm512_reduce_add_ps(acc[k]);
}

/* out[t][k] for 2 rows and T ≤ 4 tokens: each chunk's code vectors of the 2 rows loaded once for the
 * T tokens (the rows stay in L1 between the passes of a prefill batch). */
static inline __attribute__((always_inline)) void tile(int T, const char *const *r, const char *xp, size_t tb,
                                                       int64_t in, float (*out)[4]) {
    const int64_t nb = in / 32, nc = (nb + 15) / 16;
    __m512 acc[4][2];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        const int w = nb - 16 * c < 16 ? (int)(nb - 16 * c) : 16;
        __m512i v[2][4];
        __m512 dw[2];
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) v[k][p] = strip(r[k], c, w, p);
            dw[k] = scales(r[k], nb, c, w);
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const char *x = xp + tb * (size_t)t + LMC_CPU_Q4R_CHUNK * (size_t)c;
            const __m512 dx = _mm512_loadu_ps(x + 512);
            _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++)
                acc[t][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(chunk_isum(v[k], x)), _mm512_mul_ps(dw[k], dx), acc[t][k]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) out[t][k] = _mm512_reduce_add_ps(acc[t][k]);
}

void lmc_cpu_q4r_tile(int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    switch (T) { /* each token count compiled with its loops unrolled */
    case 1: tile(1, r, xp, tb, in, out); break;
    case 2: tile(2, r, xp, tb, in, out); break;
    case 3: tile(3, r, xp, tb, in, out); break;
    default: tile(4, r, xp, tb, in, out); break;
    }
}

#pragma GCC pop_options

#else /* not x86-64: no Q4_0R weights are made (cpu_rebind.c asks for the AVX-512 tier) */

size_t lmc_cpu_q4r_token_bytes(int64_t in) { return LMC_CPU_Q4R_CHUNK * (size_t)((in / 32 + 15) / 16); }
void lmc_cpu_q4r_rows4(const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    LMC_ASSERT(!"no Q4_0R kernels in this build");
}
void lmc_cpu_q4r_tile(int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    LMC_ASSERT(!"no Q4_0R kernels in this build");
}

#endif
