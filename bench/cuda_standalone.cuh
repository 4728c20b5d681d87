/* cuda_standalone.cuh — what the standalone streaming measurements (bench/cuda_inflight.cu,
 * bench/cuda_stages.cu) share: the error check, the weight stream's load, a shared-memory address
 * for PTX, and the device-to-device copy rate that bench_cuda's rooflines use. Included by relative
 * path: each program still builds with one nvcc command. */
#ifndef LMC_BENCH_CUDA_STANDALONE_CUH
#define LMC_BENCH_CUDA_STANDALONE_CUH
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                            \
    do {                                                                                                 \
        cudaError_t e_ = (x);                                                                            \
        if (e_ != cudaSuccess) {                                                                         \
            printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                           \
            exit(1);                                                                                     \
        }                                                                                                \
    } while (0)

/* 16 bytes read once: past L1, first to leave L2 (as lmc's decode products read weights) */
__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}

__device__ __forceinline__ uint32_t sa(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* µs that f() (work queued on stream s) takes, between two events on s */
template <typename F> static double time_us(cudaStream_t s, F f) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms * 1000.0;
}

/* GB/s (read + write) of four 1 GB device-to-device copies out of src (≥ 2 GB), after one warm-up */
static double copy_gbs(const uint8_t *src) {
    uint8_t *dst;
    CK(cudaMalloc(&dst, (size_t)1 << 30));
    CK(cudaMemcpy(dst, src, (size_t)1 << 30, cudaMemcpyDeviceToDevice));
    const double us = time_us(0, [&] {
        for (int i = 0; i < 4; i++) CK(cudaMemcpy(dst, src + ((size_t)i % 2 << 30), (size_t)1 << 30, cudaMemcpyDeviceToDevice));
    });
    CK(cudaFree(dst));
    return 4.0 * 2 * 1.073741824 / (us / 1e6);
}
#endif
