/* cuda_qv_mxfp4.cu — MXFP4 weights on the device: the device form both layouts are repacked into
 * at upload (cuda_common.cuh describes it), k_gemv_q's MXFP4 instantiations (cuda_gemv_int8.cuh)
 * and the dequantization of that form to bf16 for the prefill GEMM. LMC_CUDA_MXFP4_INT8=0 in the
 * environment: MXFP4 weights keep their checkpoint layout on the device and take k_gemv_kq (f32
 * activations) and the generic dequantizer, as before this path (A/B). */
#include <cuda_bf16.h>

#include "cuda_gemv_int8.cuh"

QV_ENTRY(lmc_cuda_qv_mxfp4, LMC_DTYPE_MXFP4)

extern "C" int lmc_cuda_mx_on(void) {
    static int v = -1;
    if (v < 0) v = !(getenv("LMC_CUDA_MXFP4_INT8") && !strcmp(getenv("LMC_CUDA_MXFP4_INT8"), "0"));
    return v;
}

extern "C" size_t lmc_cuda_mx_bytes(int type, int64_t ne0, int64_t ne1, size_t *ex_off) {
    const size_t codes = (size_t)ne0 / 2 * (size_t)ne1;
    if (type != LMC_DTYPE_MXFP4) { /* mlx: the codes only, same size (the exponents stay in the aux) */
        *ex_off = 0;
        return codes;
    }
    *ex_off = (codes + 255) & ~(size_t)255;
    return *ex_off + (size_t)ne1 * (size_t)(ne0 / 32);
}

/* One thread per 32-element block: its 32 codes regrouped into the device form's four words;
 * ggml's exponent byte into the exponent plane. */
__global__ void k_mx_repack(int type, const uint8_t *raw, size_t nb1, int64_t ne0, int64_t ne1, uint8_t *dst,
                            size_t ex_off) {
    const int64_t nb = ne0 / 32, total = nb * ne1;
    const int ggml = type == LMC_DTYPE_MXFP4;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / nb, b = k % nb;
        const uint8_t *src = raw + (size_t)r * nb1 + (size_t)b * (ggml ? 17 : 16);
        uint32_t wd[4] = {0, 0, 0, 0};
        for (int j = 0; j < 32; j++) {
            /* ggml: element j < 16 the low nibble of qs[j], 16 + j its high one; mlx: element 2i the
             * low nibble of byte i, 2i + 1 its high one */
            const uint32_t c = ggml ? (j < 16 ? src[1 + j] & 15u : src[1 + j - 16] >> 4) : (src[j >> 1] >> (4 * (j & 1))) & 15u;
            const int h = j >> 4, w = (j & 15) >> 2, p = j & 3;
            wd[w] |= c << (16 * h + 4 * p);
        }
        *(uint4 *)(dst + (size_t)r * (size_t)(ne0 / 2) + (size_t)b * 16) = make_uint4(wd[0], wd[1], wd[2], wd[3]);
        if (ggml) dst[ex_off + (size_t)k] = src[0];
    }
}

extern "C" void lmc_cuda_mx_repack(cudaStream_t s, int type, const void *raw, size_t nb1, int64_t ne0, int64_t ne1,
                                   void *dst, size_t ex_off) {
    const int64_t total = ne0 / 32 * ne1;
    if (total <= 0) return;
    int64_t g = (total + 255) / 256;
    if (g > 65535 * 16) g = 65535 * 16;
    k_mx_repack<<<(unsigned)g, 256, 0, s>>>(type, (const uint8_t *)raw, nb1, ne0, ne1, (uint8_t *)dst, ex_off);
}

/* Device-form rows r0.. (nr of them) → bf16 [nr, ne0]: one thread per block (16 code bytes and an
 * exponent), four 16-byte stores of 8 values; rows along grid y. kvalue·2^(e-128) is exact in f32
 * and rounded to bf16 (exact unless the exponent is out of bf16's normal range). */
__global__ void k_mx_dequant_bf16(lmc_cuda_w w, int64_t r0, int64_t nr, uint16_t *dst) {
    const int64_t nb = w.ne0 / 32;
    const int mlx = w.type == LMC_DTYPE_MXFP4_MLX;
    for (int64_t r = blockIdx.y; r < nr; r += gridDim.y) {
        const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
        if (b >= nb) continue;
        const uint4 v = __ldg((const uint4 *)((const uint8_t *)w.data + (size_t)(r0 + r) * (size_t)(w.ne0 / 2)) + b);
        const float d = mx_half(__ldg(mx_exps(w, w.data, r0 + r) + b), mlx);
        const uint32_t q[4] = {v.x, v.y, v.z, v.w};
        int8_t e[32]; /* the block's kvalues in element order */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int lo, hi;
            mx_int8(q[k], lo, hi);
#pragma unroll
            for (int p = 0; p < 4; p++) {
                e[4 * k + p] = (int8_t)(lo >> (8 * p));
                e[16 + 4 * k + p] = (int8_t)(hi >> (8 * p));
            }
        }
        uint4 *o = (uint4 *)(dst + (size_t)r * (size_t)w.ne0 + (size_t)b * 32);
#pragma unroll
        for (int g = 0; g < 4; g++) {
            uint32_t u[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const __nv_bfloat162 b2 = __floats2bfloat162_rn(d * (float)e[8 * g + 2 * k], d * (float)e[8 * g + 2 * k + 1]);
                u[k] = *(const uint32_t *)&b2;
            }
            o[g] = make_uint4(u[0], u[1], u[2], u[3]);
        }
    }
}

extern "C" void lmc_cuda_mx_dequant_bf16(cudaStream_t s, const lmc_cuda_w *w, int64_t r0, int64_t nr, uint16_t *dst) {
    const int64_t nb = w->ne0 / 32;
    if (nr <= 0 || nb <= 0) return;
    const int th = nb >= 128 ? 128 : (int)((nb + 31) / 32 * 32);
    const dim3 grid((unsigned)((nb + th - 1) / th), (unsigned)(nr < 65535 ? nr : 65535));
    k_mx_dequant_bf16<<<grid, th, 0, s>>>(*w, r0, nr, dst);
}
