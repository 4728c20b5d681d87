/* cuda_matmul.cu — the matrix-vector kernels of decode, the repacking of
 * Q8_0/Q4_0 weights, and the dequantization feeding cuBLAS.
 *
 * Decode (≤ LMC_CUDA_GEMV_MAX_TOKENS tokens): one warp computes R output rows;
 * each lane loads 16 aligned bytes of each row per step (8 bf16/f16, 4 f32,
 * 16 Q8_0 codes, or a whole 32-element Q4_0 block), widens them to f32 once,
 * and multiplies them with every token's activations (f32, read through L1);
 * the warp reduces with shuffles. Products and sums are f32 (no activation
 * quantization). Other weight dtypes, and prefill-sized batches, go through
 * lmc_cuda_dequant_rows + cuBLAS (cuda_backend.c).
 */
#include "cuda_common.cuh"

#define GEMV_R 2      /* output rows per warp */
#define GEMV_WARPS 4  /* warps per block */

size_t lmc_cuda_repacked_bytes(int type, int64_t ne0, int64_t ne1, size_t *scale_off) {
    size_t codes = type == LMC_DTYPE_Q8_0 ? (size_t)ne0 * (size_t)ne1 : (size_t)ne0 / 2 * (size_t)ne1;
    codes = (codes + 255) & ~(size_t)255;
    *scale_off = codes;
    return codes + (size_t)ne1 * (size_t)(ne0 / 32) * 2;
}

__global__ void k_repack(int type, const uint8_t *raw, size_t nb1, int64_t ne0, int64_t ne1, uint8_t *dst,
                         size_t scale_off) {
    const int64_t nb = ne0 / 32, total = nb * ne1;
    const int q8 = type == LMC_DTYPE_Q8_0;
    const int bs = q8 ? 34 : 18, cb = q8 ? 32 : 16;
    uint16_t *sc = (uint16_t *)(dst + scale_off);
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / nb, b = k % nb;
        const uint8_t *src = raw + (size_t)r * nb1 + (size_t)b * bs;
        sc[k] = (uint16_t)(src[0] | (src[1] << 8));
        uint8_t *c = dst + (size_t)r * (size_t)(q8 ? ne0 : ne0 / 2) + (size_t)b * cb;
        for (int j = 0; j < cb; j++) c[j] = src[2 + j];
    }
}

extern "C" void lmc_cuda_repack(cudaStream_t s, int type, const void *raw, size_t nb1, int64_t ne0, int64_t ne1,
                                void *dst, size_t scale_off) {
    const int64_t total = ne0 / 32 * ne1;
    if (total <= 0) return;
    int64_t g = (total + 255) / 256;
    if (g > 65535 * 16) g = 65535 * 16;
    k_repack<<<(unsigned)g, 256, 0, s>>>(type, (const uint8_t *)raw, nb1, ne0, ne1, (uint8_t *)dst, scale_off);
}

/* ------------------------------------------------------------ decode kernels */

template <int TYPE> struct gemv_traits;
template <> struct gemv_traits<LMC_DTYPE_F32> { enum { E = 4 }; };
template <> struct gemv_traits<LMC_DTYPE_F16> { enum { E = 8 }; };
template <> struct gemv_traits<LMC_DTYPE_BF16> { enum { E = 8 }; };
template <> struct gemv_traits<LMC_DTYPE_Q8_0> { enum { E = 16 }; };
template <> struct gemv_traits<LMC_DTYPE_Q4_0> { enum { E = 32 }; };

/* Widen one 16-byte chunk c of row r into E floats. */
template <int TYPE>
static __device__ __forceinline__ void gemv_decode(const lmc_cuda_w &w, int64_t r, int64_t c, float *f) {
    if (TYPE == LMC_DTYPE_F32) {
        const float4 v = __ldg((const float4 *)((const char *)w.data + (size_t)r * w.nb1) + c);
        f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
    } else if (TYPE == LMC_DTYPE_BF16 || TYPE == LMC_DTYPE_F16) {
        const uint4 v = __ldg((const uint4 *)((const char *)w.data + (size_t)r * w.nb1) + c);
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (TYPE == LMC_DTYPE_BF16) {
                f[2 * k] = __uint_as_float(u[k] << 16);
                f[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
            } else {
                f[2 * k] = f16_to_f((uint16_t)(u[k] & 0xffff));
                f[2 * k + 1] = f16_to_f((uint16_t)(u[k] >> 16));
            }
        }
    } else if (TYPE == LMC_DTYPE_Q8_0) {
        const uint4 v = __ldg((const uint4 *)((const char *)w.data + (size_t)r * (size_t)w.ne0) + c);
        const uint16_t *sc = (const uint16_t *)((const char *)w.data + w.scale_off);
        const float d = f16_to_f(__ldg(sc + r * (w.ne0 / 32) + c / 2));
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 16; k++) f[k] = d * (float)(int8_t)(u[k / 4] >> (8 * (k % 4)));
    } else { /* Q4_0: bytes j hold elements j (low nibble) and j + 16 (high) */
        const uint4 v = __ldg((const uint4 *)((const char *)w.data + (size_t)r * (size_t)(w.ne0 / 2)) + c);
        const uint16_t *sc = (const uint16_t *)((const char *)w.data + w.scale_off);
        const float d = f16_to_f(__ldg(sc + r * (w.ne0 / 32) + c));
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const uint32_t byte = (u[k / 4] >> (8 * (k % 4))) & 0xff;
            f[k] = d * (float)((int)(byte & 0x0F) - 8);
            f[k + 16] = d * (float)((int)(byte >> 4) - 8);
        }
    }
}

template <int TYPE, int NT>
__global__ void __launch_bounds__(32 * GEMV_WARPS) k_gemv(float *y, lmc_cuda_w w, const float *x) {
    constexpr int E = gemv_traits<TYPE>::E;
    const int lane = threadIdx.x & 31;
    const int64_t warp = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const int64_t out = w.ne1, K = w.ne0;
    const int64_t r0 = warp * GEMV_R;
    if (r0 >= out) return;
    const int64_t nch = K / E;
    float acc[GEMV_R][NT];
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    for (int64_t c = lane; c < nch; c += 32) {
        float f[GEMV_R][E];
#pragma unroll
        for (int r = 0; r < GEMV_R; r++) gemv_decode<TYPE>(w, r0 + r < out ? r0 + r : out - 1, c, f[r]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float4 *xp = (const float4 *)(x + t * K + c * E);
#pragma unroll
            for (int k = 0; k < E / 4; k++) {
                const float4 xv = __ldg(xp + k);
#pragma unroll
                for (int r = 0; r < GEMV_R; r++)
                    acc[r][t] += f[r][4 * k] * xv.x + f[r][4 * k + 1] * xv.y + f[r][4 * k + 2] * xv.z +
                                 f[r][4 * k + 3] * xv.w;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0 && r0 + r < out) y[t * out + r0 + r] = v;
        }
}

static int elems_per_chunk(int type) {
    switch (type) {
    case LMC_DTYPE_F32: return 4;
    case LMC_DTYPE_F16: case LMC_DTYPE_BF16: return 8;
    case LMC_DTYPE_Q8_0: return 16;
    case LMC_DTYPE_Q4_0: return 32;
    }
    return 0;
}

extern "C" int lmc_cuda_gemv_ok(const lmc_cuda_w *w, const float *x, int64_t n_tok) {
    const int e = elems_per_chunk(w->type);
    if (!e || n_tok < 1 || n_tok > LMC_CUDA_GEMV_MAX_TOKENS) return 0;
    if (w->ne0 % e || w->ne0 % 4 || ((uintptr_t)x & 15) || ((uintptr_t)w->data & 15)) return 0;
    if (w->type == LMC_DTYPE_Q8_0 || w->type == LMC_DTYPE_Q4_0) return w->repacked;
    return w->nb1 % 16 == 0;
}

template <int TYPE>
static void gemv_launch(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n) {
    const int64_t rows_per_block = GEMV_R * GEMV_WARPS;
    const unsigned g = (unsigned)((w->ne1 + rows_per_block - 1) / rows_per_block);
    const int th = 32 * GEMV_WARPS;
    switch (n) {
    case 1: k_gemv<TYPE, 1><<<g, th, 0, s>>>(y, *w, x); break;
    case 2: k_gemv<TYPE, 2><<<g, th, 0, s>>>(y, *w, x); break;
    case 3: k_gemv<TYPE, 3><<<g, th, 0, s>>>(y, *w, x); break;
    case 4: k_gemv<TYPE, 4><<<g, th, 0, s>>>(y, *w, x); break;
    case 5: k_gemv<TYPE, 5><<<g, th, 0, s>>>(y, *w, x); break;
    case 6: k_gemv<TYPE, 6><<<g, th, 0, s>>>(y, *w, x); break;
    case 7: k_gemv<TYPE, 7><<<g, th, 0, s>>>(y, *w, x); break;
    default: k_gemv<TYPE, 8><<<g, th, 0, s>>>(y, *w, x); break;
    }
}

extern "C" void lmc_cuda_gemv(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n_tok) {
    switch (w->type) {
    case LMC_DTYPE_F32: gemv_launch<LMC_DTYPE_F32>(s, y, w, x, n_tok); break;
    case LMC_DTYPE_F16: gemv_launch<LMC_DTYPE_F16>(s, y, w, x, n_tok); break;
    case LMC_DTYPE_BF16: gemv_launch<LMC_DTYPE_BF16>(s, y, w, x, n_tok); break;
    case LMC_DTYPE_Q8_0: gemv_launch<LMC_DTYPE_Q8_0>(s, y, w, x, n_tok); break;
    case LMC_DTYPE_Q4_0: gemv_launch<LMC_DTYPE_Q4_0>(s, y, w, x, n_tok); break;
    }
}

/* ------------------------------------------------------------ dequantization for cuBLAS */

__global__ void k_dequant_rows(lmc_cuda_w w, int64_t r0, int64_t nr, void *dst, int to_bf16) {
    const int64_t n = nr * w.ne0;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        const float v = w_elem(w, r0 + k / w.ne0, k % w.ne0);
        if (to_bf16) ((uint16_t *)dst)[k] = f_to_bf16(v);
        else ((float *)dst)[k] = v;
    }
}

extern "C" void lmc_cuda_dequant_rows(cudaStream_t s, const lmc_cuda_w *w, int64_t r0, int64_t nr, void *dst,
                                      int to_bf16) {
    const int64_t n = nr * w->ne0;
    if (n <= 0) return;
    int64_t g = (n + 255) / 256;
    if (g > 132 * 64) g = 132 * 64;
    k_dequant_rows<<<(unsigned)g, 256, 0, s>>>(*w, r0, nr, dst, to_bf16);
}

__global__ void k_f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = f_to_bf16(x[i]);
}

extern "C" void lmc_cuda_f32_to_bf16(cudaStream_t s, const float *x, uint16_t *y, int64_t n) {
    if (n <= 0) return;
    int64_t g = (n + 255) / 256;
    if (g > 132 * 64) g = 132 * 64;
    k_f32_to_bf16<<<(unsigned)g, 256, 0, s>>>(x, y, n);
}
