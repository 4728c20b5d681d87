/* cpu_kernels.h — row kernels of the CPU backend (internal).
 *
 * Each kernel works on a range of rows so the backend can split work over
 * threads; the *_ref variants are the plain scalar reference kept for tests.
 */
#ifndef LMC_CPU_KERNELS_H
#define LMC_CPU_KERNELS_H

#include "core/tensor.h"

/* Convert n elements of a weight row of dtype t to f32. */
void lmc_cpu_row_to_f32(lmc_dtype t, const void *src, float *dst, int64_t n);

#define LMC_CPU_GEMM_MIN_TOKENS 8 /* batches this large use sgemm */
#define LMC_CPU_GEMM_BLOCK 64     /* weight rows converted per sgemm call */

/* y[o, t] for o in [o0, o1), all t. tmp: scratch of at least LMC_CPU_GEMM_BLOCK·in floats. */
void lmc_cpu_matmul_rows(float *y, const lmc_tensor *w, const float *x, int64_t n_tok, int64_t o0, int64_t o1,
                         float *tmp);
void lmc_cpu_matmul_rows_ref(float *y, const lmc_tensor *w, const float *x, int64_t n_tok, int64_t o0, int64_t o1);

float lmc_cpu_dot_f32(const float *a, const float *b, int64_t n);

#endif
