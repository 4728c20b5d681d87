/* cuda_trace.cuh — the decode step's timeline, a measurement build only (make CUDA=1 CUDA_TRACE=1,
 * which defines LMC_CUDA_TRACE; other builds compile none of this and the kernels are unchanged).
 *
 * Instrumented kernels (k_gemv_q, decode attention) have thread 0 of each block write one record of
 * six %globaltimer readings (ns) — the block's start, four points of its own (k_gemv_q: first loads
 * issued, wait returned, activations quantized, first batch used; attention: wait returned, q staged,
 * steps done, cluster merge done) and its end — with an id naming the launch (its first weight, or
 * the K cache).
 * Each translation unit that includes this keeps its own device buffer (no relocatable device code),
 * attached and dumped through the host function LMC_TRACE_TU defines; the backend attaches them at
 * init and appends them as text to $LMC_CUDA_TRACE_FILE when it is freed (tools/trace_step.py reads
 * that). Records past the buffer's size wrap around: the last ones are kept. */
#ifndef LMC_CUDA_TRACE_CUH
#define LMC_CUDA_TRACE_CUH

#ifdef LMC_CUDA_TRACE
#include <stdio.h>

typedef struct lmc_trace_rec {
    unsigned long long t[6];
    const void *id;
    unsigned blk, kind;
} lmc_trace_rec;

static __device__ lmc_trace_rec *lmc_trace_buf;
static __device__ unsigned lmc_trace_cap, lmc_trace_n;

static __device__ __forceinline__ unsigned long long trace_now(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

static __device__ __forceinline__ void trace_put(const void *id, unsigned kind, unsigned long long t0,
                                                 unsigned long long t1, unsigned long long t2, unsigned long long t3,
                                                 unsigned long long t4) {
    const unsigned long long t5 = trace_now();
    lmc_trace_rec *b = lmc_trace_buf;
    if (!b) return;
    const unsigned i = atomicAdd(&lmc_trace_n, 1u) % lmc_trace_cap;
    b[i].t[0] = t0;
    b[i].t[1] = t1;
    b[i].t[2] = t2;
    b[i].t[3] = t3;
    b[i].t[4] = t4;
    b[i].t[5] = t5;
    b[i].id = id;
    b[i].blk = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    b[i].kind = kind;
}

/* op 0: attach a buffer of cap records; op 1: append the records to f (NULL: none) and free the buffer.
 * One backend at a time: a second one's attach would take the symbol over. */
#define LMC_TRACE_TU(fn)                                                                                        \
    extern "C" void fn(int op, unsigned cap, FILE *f) {                                                         \
        if (op == 0) {                                                                                          \
            lmc_trace_rec *b = NULL;                                                                            \
            if (cudaMalloc((void **)&b, (size_t)cap * sizeof *b) != cudaSuccess) return;                        \
            const unsigned z = 0;                                                                               \
            cudaMemcpyToSymbol(lmc_trace_buf, &b, sizeof b);                                                    \
            cudaMemcpyToSymbol(lmc_trace_cap, &cap, sizeof cap);                                                \
            cudaMemcpyToSymbol(lmc_trace_n, &z, sizeof z);                                                      \
            return;                                                                                             \
        }                                                                                                       \
        lmc_trace_rec *b = NULL;                                                                                \
        unsigned n = 0, c = 0;                                                                                  \
        cudaDeviceSynchronize();                                                                                \
        cudaMemcpyFromSymbol(&b, lmc_trace_buf, sizeof b);                                                      \
        cudaMemcpyFromSymbol(&n, lmc_trace_n, sizeof n);                                                        \
        cudaMemcpyFromSymbol(&c, lmc_trace_cap, sizeof c);                                                      \
        if (!b || !c) return;                                                                                   \
        const unsigned m = n < c ? n : c;                                                                       \
        lmc_trace_rec *h = (lmc_trace_rec *)malloc((size_t)m * sizeof *h);                                      \
        if (f && h && cudaMemcpy(h, b, (size_t)m * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess)           \
            for (unsigned i = 0; i < m; i++)                                                                    \
                fprintf(f, "%u %p %u %llu %llu %llu %llu %llu %llu\n", h[i].kind, h[i].id, h[i].blk, h[i].t[0],    \
                        h[i].t[1], h[i].t[2], h[i].t[3], h[i].t[4], h[i].t[5]);                                 \
        free(h);                                                                                                \
        cudaFree(b);                                                                                            \
        b = NULL;                                                                                               \
        cudaMemcpyToSymbol(lmc_trace_buf, &b, sizeof b);                                                        \
    }
#define TRACE_T(v) const unsigned long long v = trace_now()
#define TRACE_VAR(v) unsigned long long v = 0
#define TRACE_ONCE(v) \
    if (!(v)) v = trace_now()
#define TRACE_PUT(id, kind, t0, t1, t2, t3, t4) trace_put(id, kind, t0, t1, t2, t3, t4)
/* the whole block's end: every thread, then thread 0 writes */
#define TRACE_BLOCK(id, kind, t0, t1, t2, t3, t4) \
    do {                                          \
        __syncthreads();                          \
        if (threadIdx.x == 0) trace_put(id, kind, t0, t1, t2, t3, t4); \
    } while (0)
#else
#define LMC_TRACE_TU(fn)
#define TRACE_T(v)
#define TRACE_VAR(v)
#define TRACE_ONCE(v)
#define TRACE_PUT(id, kind, t0, t1, t2, t3, t4)
#define TRACE_BLOCK(id, kind, t0, t1, t2, t3, t4)
#endif

#endif
