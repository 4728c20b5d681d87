/* cuda_qv_q6_k.cu — k_gemv_q's Q6_K instantiations (cuda_gemv_int8.cuh). */
#include "cuda_gemv_int8.cuh"

QV_ENTRY(lmc_cuda_qv_q6_k, LMC_DTYPE_Q6_K)
