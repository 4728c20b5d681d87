/* cpu_avx2.h — the AVX2 tier of the CPU decode kernels (cpu_avx2.c).
 *
 * cpu_simd.c owns the choice of tier (AVX-512 VNNI, AVX2, none) and the prepared
 * activation layout; this tier covers BF16, F16, Q8_0 and Q4_0 weights.
 */
#ifndef LMC_CPU_AVX2_H
#define LMC_CPU_AVX2_H

#include "core/tensor.h"

#include <stddef.h>
#include <stdint.h>

/* Decode-kernel tiers, best last. */
enum { LMC_SIMD_OFF = 0, LMC_SIMD_AVX2 = 1, LMC_SIMD_AVX512 = 2 };
/* Use the best tier this CPU has, at most max_level; returns the tier in use (cpu_simd.c). */
int lmc_cpu_simd_set_level(int max_level);

/* This CPU has AVX2, FMA and F16C. */
int lmc_cpu_avx2_supported(void);
/* The AVX2 tier has a kernel for weights of this dtype. */
int lmc_cpu_avx2_has_type(lmc_dtype t);
/* y[t, o0..o1) for n_tok tokens of activations prepared by lmc_cpu_simd_act_prepare
 * (token_bytes apart); w->ne[0] is a multiple of 32. The rows are read as n_streams (1, 2
 * or 4) stretches side by side with a software prefetch pf_bytes ahead in each. */
void lmc_cpu_avx2_matvec(float *y, const lmc_tensor *w, const void *xp, size_t token_bytes, int64_t n_tok, int64_t o0,
                         int64_t o1, int n_streams, size_t pf_bytes);

#endif
