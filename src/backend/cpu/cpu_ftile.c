/* cpu_ftile.c — AVX-512 prefill tiles for BF16 and F16 weights on f32 activations.
 *
 * 4 rows × up to 4 tokens: each 16 weights of a row are widened to f32 once (BF16: vpmovzxwd and a
 * shift; F16: vcvtph2ps) and meet the tokens' activations in 16 f32 accumulators, so a weight vector
 * feeds 4 FMAs and an activation vector, loaded once, 4 (steps of 32 weights left no register for
 * the activations: each FMA loaded its own, and the loads bounded the tile). The products are those of the decode kernels (exact
 * bf16 / f16 → f32 values times f32 activations, f32 sums), in another order. Before these tiles the
 * rows were widened into f32 blocks for sgemm (on the AMD EPYC VM a 64-token Qwen2.5-0.5B-shape
 * bf16 prefill took 2 threads 168 tok/s; docs/BENCHMARKS.md).
 */
#include "cpu_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")

/* 16 weights from p as f32 */
static inline __m512 widen(int f16, const char *p) {
    const __m256i h = _mm256_loadu_si256((const void *)p);
    if (f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) void tile(int f16, int T, const char *const *r, const char *xp, size_t tb,
                                                       int64_t in, float (*out)[4]) {
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[t][k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < in; i += 16) {
        __m512 w[4], x[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) w[k] = widen(f16, r[k] + 2 * i);
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            x[t] = _mm512_loadu_ps((const float *)(const void *)(xp + tb * (size_t)t) + i);
            __asm__("" : "+v"(x[t])); /* in a register: GCC would fold the load into each of its 4 FMAs */
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[t][k] = _mm512_fmadd_ps(w[k], x[t], acc[t][k]);
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[t][k] = _mm512_reduce_add_ps(acc[t][k]);
}

void lmc_cpu_ftile(lmc_dtype t, int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    const int f16 = t == LMC_DTYPE_F16;
    LMC_CPU_TILE_SWITCH(tile, f16, T, r, xp, tb, in, out)
}

#pragma GCC pop_options

#else

void lmc_cpu_ftile(lmc_dtype t, int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    LMC_ASSERT(!"no BF16 / F16 tiles in this build");
}

#endif
