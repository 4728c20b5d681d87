/* cuda_qv_q8_0.cu — k_gemv_q's Q8_0 instantiations (cuda_gemv_int8.cuh). */
#include "cuda_gemv_int8.cuh"

QV_ENTRY(lmc_cuda_qv_q8_0, LMC_DTYPE_Q8_0)

LMC_TRACE_TU(lmc_cuda_trace_qv_q8_0)
