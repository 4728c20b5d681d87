/* cuda_qv_q5_k.cu — k_gemv_q's Q5_K instantiations (cuda_gemv_int8.cuh). */
#include "cuda_gemv_int8.cuh"

QV_ENTRY(lmc_cuda_qv_q5_k, LMC_DTYPE_Q5_K)
