/* cpu_matmul.c — matrix products with weights in any storage dtype on the CPU.
 *
 * y = x · wᵀ with w [in, out] in its storage dtype (f32/f16/bf16, GGUF blocks,
 * MLX affine). Batches of 4+ tokens with block-quantized weights use AMX int8 tiles
 * where the machine has them (cpu_amx_int8.c, activations quantized to 8-bit blocks as in
 * decode); prefill-sized batches with bf16 weights (and quantized ones with
 * LMC_CPU_AMX_INT8=0) use AMX bf16 tiles (cpu_amx.c, exact f32 activations); other prefill batches
 * (≥ LMC_CPU_GEMM_MIN_TOKENS) of the types whose AVX-512 VNNI kernels take Q8_0 activations
 * (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MLX4, MLX8), on a CPU without AMX, run cpu_simd.c's integer tiles on
 * the decode layout of the activations (lmc_cpu_simd_gemm); the rest dequantize blocks of
 * LMC_CPU_GEMM_BLOCK weight rows into f32 scratch once and call OpenBLAS sgemm. Smaller batches
 * (decode) use the SIMD kernels of cpu_simd.c where the type has one, else dequantize one row at a
 * time into scratch and use a 4-row f32 dot (written with GCC vector types: portable, and AVX-512
 * under -march=native). Scratch belongs to the calling thread. For the AMX paths
 * lmc_cpu_act_prepare only records x; each thread's lmc_cpu_matmul_rows packs its share first.
 */
#include "cpu_kernels.h"
#include "core/quant.h"

#include <cblas.h>
#include <stdint.h>
#include <string.h>

typedef float v16f __attribute__((vector_size(64)));

static inline v16f load16(const float *p) { v16f v; memcpy(&v, p, sizeof v); return v; }
static inline float hsum16(v16f v) {
    float s = 0;
    for (int i = 0; i < 16; i++) s += v[i];
    return s;
}

void lmc_cpu_row_to_f32(lmc_dtype t, const void *src, float *dst, int64_t n) {
    if (t == LMC_DTYPE_BF16) {
        const uint16_t *restrict s = src;
        float *restrict d = dst;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)s[i] << 16;
            memcpy(d + i, &u, 4);
        }
    } else {
        lmc_to_f32(t, src, dst, (size_t)n);
    }
}

static float dot_f32(const float *a, const float *b, int64_t n) {
    v16f acc0 = {0}, acc1 = {0};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 += load16(a + i) * load16(b + i);
        acc1 += load16(a + i + 16) * load16(b + i + 16);
    }
    for (; i + 16 <= n; i += 16) acc0 += load16(a + i) * load16(b + i);
    float s = hsum16(acc0 + acc1);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Four dot products of x with rows r0..r3 at once (x loaded once). */
static void dot4(const float *r0, const float *r1, const float *r2, const float *r3, const float *x, int64_t n,
                 float out[4]) {
    v16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f xv = load16(x + i);
        a0 += load16(r0 + i) * xv;
        a1 += load16(r1 + i) * xv;
        a2 += load16(r2 + i) * xv;
        a3 += load16(r3 + i) * xv;
    }
    float s0 = hsum16(a0), s1 = hsum16(a1), s2 = hsum16(a2), s3 = hsum16(a3);
    for (; i < n; i++) { s0 += r0[i] * x[i]; s1 += r1[i] * x[i]; s2 += r2[i] * x[i]; s3 += r3[i] * x[i]; }
    out[0] = s0; out[1] = s1; out[2] = s2; out[3] = s3;
}

/* Row o of w as f32: in place for f32 weights, else dequantized into dst. */
static const float *row_f32(const lmc_tensor *w, int64_t o, float *dst) {
    if (w->type == LMC_DTYPE_F32) return (const float *)(const void *)((const char *)w->data + (size_t)o * w->nb[1]);
    lmc_tensor_row_to_f32(w, o, dst);
    return dst;
}

size_t lmc_cpu_act_bytes(const lmc_tensor *w, int64_t n_tok) {
    if (lmc_cpu_amx_int8_wants(w, n_tok)) return lmc_cpu_amx_int8_act_bytes(w, n_tok);
    if (lmc_cpu_amx_wants(w, n_tok)) return lmc_cpu_amx_act_bytes(w, n_tok);
    if (n_tok >= LMC_CPU_GEMM_MIN_TOKENS ? !lmc_cpu_simd_gemm_has(w) : !lmc_cpu_simd_has(w)) return 0;
    return lmc_cpu_simd_act_bytes(w, n_tok);
}

size_t lmc_cpu_act_token_bytes(const lmc_tensor *w, int64_t n_tok) {
    if (lmc_cpu_amx_int8_wants(w, n_tok) || lmc_cpu_amx_wants(w, n_tok) || !lmc_cpu_act_bytes(w, n_tok)) return 0;
    return lmc_cpu_simd_act_bytes(w, 1);
}

void lmc_cpu_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    if (lmc_cpu_amx_int8_wants(w, n_tok)) lmc_cpu_amx_int8_act_begin(w, x, n_tok, buf); /* packed by the threads */
    else if (lmc_cpu_amx_wants(w, n_tok)) lmc_cpu_amx_act_begin(w, x, n_tok, buf); /* packed by the threads */
    else if (lmc_cpu_act_bytes(w, n_tok)) lmc_cpu_simd_act_prepare(w, x, n_tok, buf);
}

int64_t lmc_cpu_matmul_grain(const lmc_tensor *w, int64_t n_tok) {
    if (w->type == LMC_DTYPE_BF16P) return 64; /* runs of 16 rows, tiles of 4 runs (cpu_ftile.c) */
    if (n_tok < LMC_CPU_GEMM_MIN_TOKENS) return 4;
    if (lmc_cpu_amx_int8_wants(w, n_tok) || lmc_cpu_amx_wants(w, n_tok) || lmc_cpu_simd_gemm_has(w)) return 16;
    return LMC_CPU_GEMM_BLOCK;
}

void lmc_cpu_matmul_rows(float *y, const lmc_tensor *w, const float *x, const void *xp, int64_t n_tok, int64_t o0,
                         int64_t o1, float *tmp) {
    const int64_t in = w->ne[0], out = w->ne[1];
    int64_t o = o0;
    if (xp && w->type == LMC_DTYPE_BF16P) { /* every batch size (cpu_ftile.c) */
        lmc_cpu_bf16p_rows(y, w, xp, lmc_cpu_simd_act_bytes(w, 1), n_tok, o0, o1, lmc_cpu_simd_bf16_act());
        return;
    }
    if (xp && lmc_cpu_amx_int8_wants(w, n_tok)) { /* tmp holds LMC_CPU_GEMM_BLOCK·in floats: always enough */
        lmc_cpu_amx_int8_act_finish(w, n_tok, (void *)(uintptr_t)xp); /* this thread's share of the quantizing */
        o = lmc_cpu_amx_int8_rows(y, w, xp, n_tok, o, o1, tmp, (size_t)LMC_CPU_GEMM_BLOCK * (size_t)in);
        LMC_ASSERT(o == o1);
        return;
    }
    if (n_tok >= LMC_CPU_GEMM_MIN_TOKENS && xp && lmc_cpu_simd_gemm_has(w) && !lmc_cpu_amx_wants(w, n_tok)) {
        lmc_cpu_simd_gemm(y, w, xp, n_tok, o0, o1);
        return;
    }
    if (n_tok >= LMC_CPU_GEMM_MIN_TOKENS) {
        if (xp) { /* prepared only when AMX is used; tmp holds LMC_CPU_GEMM_BLOCK·in floats */
            lmc_cpu_amx_act_finish(w, n_tok, (void *)(uintptr_t)xp); /* this thread's share of the packing */
            o = lmc_cpu_amx_rows(y, w, xp, n_tok, o, o1, tmp, (size_t)LMC_CPU_GEMM_BLOCK * (size_t)in);
        }
        for (; o < o1; o += LMC_CPU_GEMM_BLOCK) {
            int64_t nb = o1 - o < LMC_CPU_GEMM_BLOCK ? o1 - o : LMC_CPU_GEMM_BLOCK;
            const float *blk;
            int64_t ldb = in; /* row stride of blk in floats: f32 weights keep theirs (nb[1]) */
            if (w->type == LMC_DTYPE_F32) {
                blk = (const float *)(const void *)((const char *)w->data + (size_t)o * w->nb[1]);
                ldb = (int64_t)(w->nb[1] / sizeof(float));
            } else {
                for (int64_t k = 0; k < nb; k++) lmc_tensor_row_to_f32(w, o + k, tmp + (size_t)k * in);
                blk = tmp;
            }
            /* Y[t, o..o+nb) = X[t, :] · blk[k, :]ᵀ */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n_tok, (int)nb, (int)in, 1.0f, x, (int)in, blk,
                        (int)ldb, 0.0f, y + o, (int)out);
        }
        return;
    }
    if (xp) {
        lmc_cpu_simd_matvec(y, w, xp, n_tok, o0, o1);
        return;
    }
    for (; o + 4 <= o1; o += 4) {
        const float *r[4];
        for (int k = 0; k < 4; k++) r[k] = row_f32(w, o + k, tmp + (size_t)k * in);
        for (int64_t t = 0; t < n_tok; t++) {
            float s[4];
            dot4(r[0], r[1], r[2], r[3], x + (size_t)t * in, in, s);
            for (int k = 0; k < 4; k++) y[(size_t)t * out + o + k] = s[k];
        }
    }
    for (; o < o1; o++) {
        const float *r = row_f32(w, o, tmp);
        for (int64_t t = 0; t < n_tok; t++) y[(size_t)t * out + o] = dot_f32(r, x + (size_t)t * in, in);
    }
}

/* The oracle: each weight dequantized by the scalar format code, products summed in double. */
void lmc_cpu_matmul_rows_ref(float *y, const lmc_tensor *w, const float *x, int64_t n_tok, int64_t o0, int64_t o1) {
    const int64_t in = w->ne[0], out = w->ne[1];
    float one;
    const int plain = !lmc_dtype_is_quant(w->type);
    for (int64_t o = o0; o < o1; o++) {
        const char *src = (const char *)w->data + (size_t)o * w->nb[1];
        for (int64_t t = 0; t < n_tok; t++) {
            double s = 0;
            if (plain) {
                for (int64_t i = 0; i < in; i++) {
                    lmc_to_f32(w->type, src + (size_t)i * w->nb[0], &one, 1);
                    s += (double)one * x[(size_t)t * in + i];
                }
            } else {
                /* block formats: dequantize the row once (the reference dequantizer is scalar) */
                float buf[256];
                const int64_t be = lmc_dtype_has_aux(w->type) ? 0 : lmc_dtype_block_elems(w->type);
                if (be) {
                    for (int64_t b = 0; b < in; b += be) {
                        lmc_dequant_row_unchecked(w->type, src + (size_t)(b / be) * lmc_dtype_block_bytes(w->type),
                                                  NULL, buf, be);
                        for (int64_t i = 0; i < be; i++) s += (double)buf[i] * x[(size_t)t * in + b + i];
                    }
                } else {
                    const lmc_quant_mlx *q = w->aux;
                    lmc_mlx_row r = lmc_quant_mlx_row(q, o);
                    const int g = q->group_size;
                    const size_t gbytes = lmc_dtype_row_bytes(w->type, g);
                    const size_t ssz = lmc_dtype_size(q->scales.type);
                    for (int64_t b = 0; b < in; b += g) {
                        lmc_mlx_row rg = {g, r.scale_type, (char *)r.scales + (size_t)(b / g) * ssz,
                                          r.biases ? (char *)r.biases + (size_t)(b / g) * ssz : NULL};
                        lmc_dequant_row_unchecked(w->type, src + (size_t)(b / g) * gbytes, &rg, buf, g);
                        for (int64_t i = 0; i < g; i++) s += (double)buf[i] * x[(size_t)t * in + b + i];
                    }
                }
            }
            y[(size_t)t * out + o] = (float)s;
        }
    }
}
