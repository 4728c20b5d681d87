/* cuda_measure.c — the machine's own ceilings, measured for the benchmarks:
 * device-to-device copy bandwidth and the cuBLAS bf16 GEMM rate, plus device
 * facts (name, multiprocessors, memory in use). Each call owns and frees
 * everything it allocates; nothing here is used by inference.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_kernels.h"

lmc_status lmc_cuda_device_info(int device, char *name, size_t name_len, int *n_sm, size_t *mem_total,
                                size_t *mem_used) {
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) return lmc_fail(LMC_ERR_UNSUPPORTED, "no CUDA device %d: %s", device, cudaGetErrorString(e));
    if (name && name_len) snprintf(name, name_len, "%s", p.name);
    if (n_sm) *n_sm = p.multiProcessorCount;
    size_t fr = 0, tot = 0;
    cudaSetDevice(device);
    e = cudaMemGetInfo(&fr, &tot);
    if (e != cudaSuccess) return lmc_fail(LMC_ERR_IO, "cudaMemGetInfo: %s", cudaGetErrorString(e));
    if (mem_total) *mem_total = tot;
    if (mem_used) *mem_used = tot - fr;
    return LMC_OK;
}

lmc_status lmc_cuda_measure_copy_bw(int device, size_t bytes, double *gbps) {
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    lmc_status st = LMC_OK;
    cudaSetDevice(device);
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
        st = lmc_fail(LMC_ERR_NOMEM, "copy bandwidth: cannot allocate 2 x %zu bytes", bytes);
        goto out;
    }
    cudaMemset(a, 1, bytes);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int i = 0; i < 8; i++) {
        cudaEventRecord(e0, 0);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i > 0 && ms < best) best = ms; /* the first copy warms up */
    }
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) { st = lmc_fail(LMC_ERR_IO, "copy bandwidth: %s", cudaGetErrorString(err)); goto out; }
    *gbps = 2.0 * (double)bytes / (best * 1e-3) / 1e9;
out:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return st;
}

lmc_status lmc_cuda_measure_gemm(int device, int dim, double *tflops) {
    const size_t n = (size_t)dim * (size_t)dim;
    uint16_t *a = NULL, *b = NULL;
    float *x = NULL, *c = NULL;
    cublasHandle_t h = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    lmc_status st = LMC_OK;
    cudaSetDevice(device);
    if (cudaMalloc((void **)&a, n * 2) != cudaSuccess || cudaMalloc((void **)&b, n * 2) != cudaSuccess ||
        cudaMalloc((void **)&x, n * 4) != cudaSuccess || cudaMalloc((void **)&c, n * 4) != cudaSuccess) {
        st = lmc_fail(LMC_ERR_NOMEM, "gemm rate: cannot allocate %d x %d matrices", dim, dim);
        goto out;
    }
    /* random-ish values: a scaled index hash through f32 → bf16 */
    {
        float *hbuf = NULL;
        hbuf = (float *)malloc(n * 4);
        if (!hbuf) { st = lmc_fail(LMC_ERR_NOMEM, "gemm rate"); goto out; }
        uint32_t s = 12345;
        for (size_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            hbuf[i] = ((float)(s >> 8) / 16777216.0f - 0.5f);
        }
        cudaMemcpy(x, hbuf, n * 4, cudaMemcpyHostToDevice);
        free(hbuf);
        lmc_cuda_f32_to_bf16(0, x, a, (int64_t)n);
        lmc_cuda_f32_to_bf16(0, x, b, (int64_t)n);
    }
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { st = lmc_fail(LMC_ERR_IO, "cublasCreate"); goto out; }
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const float one = 1.0f, zero = 0.0f;
    float best = 1e30f;
    for (int i = 0; i < 6; i++) {
        cudaEventRecord(e0, 0);
        cublasStatus_t bs = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, dim, dim, dim, &one, a, CUDA_R_16BF, dim, b,
                                         CUDA_R_16BF, dim, &zero, c, CUDA_R_32F, dim, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        if (bs != CUBLAS_STATUS_SUCCESS) { st = lmc_fail(LMC_ERR_IO, "cublasGemmEx failed (%d)", (int)bs); goto out; }
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i > 0 && ms < best) best = ms;
    }
    *tflops = 2.0 * (double)dim * dim * dim / (best * 1e-3) / 1e12;
out:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (h) cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(x);
    cudaFree(c);
    return st;
}
