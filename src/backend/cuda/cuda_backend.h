/* cuda_backend.h — the CUDA backend's entry point and the machine figures the
 * benchmarks put next to their results. Built only with `make CUDA=1`
 * (which defines LMC_CUDA); backend.c calls lmc_backend_cuda_init for
 * --backend cuda. Everything here returns an lmc_status and never prints.
 */
#ifndef LMC_CUDA_BACKEND_H
#define LMC_CUDA_BACKEND_H

#include <stddef.h>

#include "backend/backend.h"

/* Create the CUDA backend on device `device` (its own stream and cuBLAS handle).
 * LMC_ERR_UNSUPPORTED when there is no usable device. */
lmc_status lmc_backend_cuda_init(lmc_backend **out, int device);

/* Device bytes a CUDA backend holds now: its weights (bind_weight, in their device layout), its
 * tensors (alloc: activations, KV caches) and its workspaces (dequantized rows, bf16 activations,
 * attention partials, cuBLAS's workspace, ...). What cudaMemGetInfo counts beyond these is the
 * driver's: the context, loaded kernels, recorded graphs, allocation rounding. */
typedef struct lmc_cuda_mem {
    size_t weights, tensors, workspaces;
    /* workspaces, by use: dequantized weight rows, bf16/int8 activations, attention partials and
     * sampling reductions, MoE gathers, upload staging, cuBLAS's own */
    size_t ws_w, ws_x, ws_a, ws_m, stage, blas;
} lmc_cuda_mem;
lmc_status lmc_cuda_mem_stats(lmc_backend *be, lmc_cuda_mem *m);

/* Device name, multiprocessor count and memory in bytes (total, in use now). */
lmc_status lmc_cuda_device_info(int device, char *name, size_t name_len, int *n_sm, size_t *mem_total,
                                size_t *mem_used);

/* Device-to-device copy bandwidth in GB/s (bytes read + written per second), best of
 * several copies of `bytes` bytes. */
lmc_status lmc_cuda_measure_copy_bw(int device, size_t bytes, double *gbps);

/* cuBLAS bf16 GEMM rate (f32 accumulate) in TFLOP/s on random data, m = n = k = `dim`. */
lmc_status lmc_cuda_measure_gemm(int device, int dim, double *tflops);

#endif
