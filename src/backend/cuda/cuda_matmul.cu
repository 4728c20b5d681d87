/* cuda_matmul.cu — the matrix-vector kernels of decode, the repacking of
 * Q8_0/Q4_0 weights, and the dequantization feeding cuBLAS.
 *
 * Decode (≤ LMC_CUDA_GEMV_MAX_TOKENS tokens): one block computes R output rows;
 * each thread loads 16 aligned bytes of each row per chunk (8 bf16/f16, 4 f32,
 * 16 Q8_0 codes, or a whole 32-element Q4_0 block), U chunks before using any,
 * widens them to f32 once and multiplies them with every token's activations
 * (f32, read through L1); warps reduce with shuffles, the block in shared memory. Products and sums are f32 (no activation
 * quantization). Other weight dtypes, and prefill-sized batches, go through
 * lmc_cuda_dequant_rows + cuBLAS (cuda_backend.c).
 */
#include "cuda_common.cuh"

#define GEMV_U 2          /* chunks per thread loaded before use */
#define GEMV_THREADS 256  /* most threads per block (fewer when the rows are short) */

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

/* The 16 bytes of chunk c of row r (and its block scale for Q8_0/Q4_0). */
template <int TYPE>
static __device__ __forceinline__ uint4 gemv_load(const lmc_cuda_w &w, int64_t r, int64_t c, float *d) {
    if (TYPE == LMC_DTYPE_Q8_0 || TYPE == LMC_DTYPE_Q4_0) {
        const uint16_t *sc = (const uint16_t *)((const char *)w.data + w.scale_off);
        *d = f16_to_f(__ldg(sc + r * (w.ne0 / 32) + (TYPE == LMC_DTYPE_Q8_0 ? c / 2 : c)));
        const size_t row = TYPE == LMC_DTYPE_Q8_0 ? (size_t)w.ne0 : (size_t)(w.ne0 / 2);
        return __ldg((const uint4 *)((const char *)w.data + (size_t)r * row) + c);
    }
    *d = 1.0f;
    return __ldg((const uint4 *)((const char *)w.data + (size_t)r * w.nb1) + c);
}

/* Widen one loaded chunk into its E floats (element order of the row). */
template <int TYPE>
static __device__ __forceinline__ void gemv_decode(uint4 v, float d, float *f) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
    if (TYPE == LMC_DTYPE_F32) {
#pragma unroll
        for (int k = 0; k < 4; k++) f[k] = __uint_as_float(u[k]);
    } else if (TYPE == LMC_DTYPE_BF16 || TYPE == LMC_DTYPE_F16) {
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
        /* int → float without the (quarter-rate) conversion unit: 2^23 + (b ^ 0x80) has b's
         * bits as its mantissa; subtracting 2^23 + 128 leaves the signed code exactly */
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const uint32_t b = ((u[k / 4] >> (8 * (k % 4))) & 0xffu) ^ 0x80u;
            f[k] = d * (__uint_as_float(0x4B000000u | b) - 8388736.0f);
        }
    } else { /* Q4_0: byte j holds elements j (low nibble) and j + 16 (high); same trick, code - 8 */
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const uint32_t byte = (u[k / 4] >> (8 * (k % 4))) & 0xffu;
            f[k] = d * (__uint_as_float(0x4B000000u | (byte & 0x0Fu)) - 8388616.0f);
            f[k + 16] = d * (__uint_as_float(0x4B000000u | (byte >> 4)) - 8388616.0f);
        }
    }
}

/* Q8_0 / Q4_0 have a block scale: the decode kernel sums codes·x per chunk and scales once. */
template <int TYPE> struct gemv_scaled { enum { v = TYPE == LMC_DTYPE_Q8_0 || TYPE == LMC_DTYPE_Q4_0 }; };
/* Rows per block: 4 for the quantized types at one token (each activation chunk loaded once
 * serves 4 rows), else 2 (registers). */
template <int TYPE, int NT> struct gemv_rows { enum { v = gemv_scaled<TYPE>::v && NT == 1 ? 4 : 2 }; };

/* One block computes R output rows for NT tokens. Its threads stride over the rows'
 * 16-byte chunks GEMV_U at a time: the U·R loads are issued before any is used (memory
 * parallelism even for short rows), then widened and multiplied; warps reduce with
 * shuffles, then across the block in shared memory. */
template <int TYPE, int NT>
__global__ void __launch_bounds__(GEMV_THREADS) k_gemv(float *y, lmc_cuda_w w, const float *x) {
    constexpr int E = gemv_traits<TYPE>::E, R = gemv_rows<TYPE, NT>::v;
    __shared__ float red[GEMV_THREADS / 32][R * NT];
    const int64_t out = w.ne1, K = w.ne0, nch = K / E;
    const int64_t r0 = (int64_t)blockIdx.x * R;
    const int nth = blockDim.x;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    for (int64_t c0 = threadIdx.x; c0 < nch; c0 += (int64_t)GEMV_U * nth) {
        uint4 raw[GEMV_U][R];
        float sc[GEMV_U][R];
#pragma unroll
        for (int u = 0; u < GEMV_U; u++)
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t c = c0 + (int64_t)u * nth;
                const int64_t row = r0 + r < out ? r0 + r : out - 1;
                if (c < nch) raw[u][r] = gemv_load<TYPE>(w, row, c, &sc[u][r]);
                else { raw[u][r] = make_uint4(0, 0, 0, 0); sc[u][r] = 0.0f; }
            }
#pragma unroll
        for (int u = 0; u < GEMV_U; u++) {
            const int64_t c = c0 + (int64_t)u * nth;
            if (c >= nch) break;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float xv[E];
                const float4 *xp = (const float4 *)(x + t * K + c * E);
#pragma unroll
                for (int k = 0; k < E / 4; k++) {
                    const float4 v = __ldg(xp + k);
                    xv[4 * k] = v.x; xv[4 * k + 1] = v.y; xv[4 * k + 2] = v.z; xv[4 * k + 3] = v.w;
                }
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float f[E];
                    gemv_decode<TYPE>(raw[u][r], 1.0f, f); /* block scale applied to the chunk's sum */
                    float s = 0.0f;
#pragma unroll
                    for (int k = 0; k < E; k++) s += f[k] * xv[k];
                    acc[r][t] += gemv_scaled<TYPE>::v ? sc[u][r] * s : s;
                }
            }
        }
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (nth + 31) >> 5;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0) red[wid][r * NT + t] = v;
        }
    __syncthreads();
    if (threadIdx.x < R * NT) {
        const int r = threadIdx.x / NT, t = threadIdx.x % NT;
        float v = 0.0f;
        for (int k = 0; k < nw; k++) v += red[k][threadIdx.x];
        if (r0 + r < out) y[(int64_t)t * out + r0 + r] = v;
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
    const int R = n == 1 ? (int)gemv_rows<TYPE, 1>::v : (int)gemv_rows<TYPE, 2>::v;
    const unsigned g = (unsigned)((w->ne1 + R - 1) / R);
    const int64_t nch = w->ne0 / gemv_traits<TYPE>::E, per = (nch + GEMV_U - 1) / GEMV_U;
    const int th = per >= GEMV_THREADS ? GEMV_THREADS : per <= 32 ? 32 : (int)((per + 31) / 32 * 32);
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

/* Repacked Q8_0/Q4_0 rows: one 16-byte chunk per thread, written as 16-byte stores. */
template <int TYPE>
__global__ void k_dequant_q(lmc_cuda_w w, int64_t r0, int64_t nr, void *dst, int to_bf16) {
    constexpr int E = gemv_traits<TYPE>::E;
    const int64_t nch = w.ne0 / E, total = nr * nch;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / nch, c = k % nch;
        float d, f[E];
        gemv_decode<TYPE>(gemv_load<TYPE>(w, r0 + r, c, &d), d, f);
        const int64_t o = r * w.ne0 + c * E;
        if (to_bf16) {
            uint4 *y = (uint4 *)((uint16_t *)dst + o);
#pragma unroll
            for (int q = 0; q < E / 8; q++) {
                uint32_t u[4];
#pragma unroll
                for (int h = 0; h < 4; h++)
                    u[h] = (uint32_t)f_to_bf16(f[8 * q + 2 * h]) | ((uint32_t)f_to_bf16(f[8 * q + 2 * h + 1]) << 16);
                y[q] = make_uint4(u[0], u[1], u[2], u[3]);
            }
        } else {
            float4 *y = (float4 *)((float *)dst + o);
#pragma unroll
            for (int q = 0; q < E / 4; q++) y[q] = make_float4(f[4 * q], f[4 * q + 1], f[4 * q + 2], f[4 * q + 3]);
        }
    }
}

extern "C" void lmc_cuda_dequant_rows(cudaStream_t s, const lmc_cuda_w *w, int64_t r0, int64_t nr, void *dst,
                                      int to_bf16) {
    const int64_t n = nr * w->ne0;
    if (n <= 0) return;
    if (w->repacked) {
        const int64_t chunks = nr * (w->ne0 / (w->type == LMC_DTYPE_Q8_0 ? 16 : 32));
        int64_t g = (chunks + 255) / 256;
        if (g > 132 * 32) g = 132 * 32;
        if (w->type == LMC_DTYPE_Q8_0) k_dequant_q<LMC_DTYPE_Q8_0><<<(unsigned)g, 256, 0, s>>>(*w, r0, nr, dst, to_bf16);
        else k_dequant_q<LMC_DTYPE_Q4_0><<<(unsigned)g, 256, 0, s>>>(*w, r0, nr, dst, to_bf16);
        return;
    }
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
