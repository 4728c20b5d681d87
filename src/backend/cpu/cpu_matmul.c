/* cpu_matmul.c — f32/f16/bf16-weight matrix products on the CPU.
 *
 * y = x · wᵀ with w [in, out] in its storage dtype. The fast path converts a
 * block of weight rows to f32 once and reuses it for every token of the
 * batch (prefill), with a 4-row dot kernel written with GCC vector types so
 * it compiles to AVX2/AVX-512 under -march=native and stays portable.
 * Prefill-sized batches (≥ LMC_CPU_GEMM_MIN_TOKENS) go through OpenBLAS sgemm
 * on blocks of LMC_CPU_GEMM_BLOCK weight rows (converted to f32 once per block).
 */
#include "cpu_kernels.h"

#include <cblas.h>
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));

static inline v8f load8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
static inline float hsum8(v8f v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* 8 bf16 values widened to f32 (a shift into the high half). */
static inline v8f load8_bf16(const uint16_t *p) {
    v8u16 h;
    memcpy(&h, p, sizeof h);
    v8u32 w = __builtin_convertvector(h, v8u32) << 16;
    v8f f;
    memcpy(&f, &w, sizeof f);
    return f;
}

void lmc_cpu_row_to_f32(lmc_dtype t, const void *src, float *dst, int64_t n) {
    if (t == LMC_DTYPE_BF16) {
        const uint16_t *restrict s = src;
        float *restrict d = dst;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            v8f f = load8_bf16(s + i);
            memcpy(d + i, &f, sizeof f);
        }
        for (; i < n; i++) d[i] = lmc_bf16_to_f32(s[i]);
    } else {
        lmc_to_f32(t, src, dst, (size_t)n);
    }
}

float lmc_cpu_dot_f32(const float *a, const float *b, int64_t n) {
    v8f acc0 = {0}, acc1 = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 += load8(a + i) * load8(b + i);
        acc1 += load8(a + i + 8) * load8(b + i + 8);
    }
    for (; i + 8 <= n; i += 8) acc0 += load8(a + i) * load8(b + i);
    float s = hsum8(acc0 + acc1);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Four dot products of x with rows r0..r3 at once (x loaded once). */
static void dot4(const float *r0, const float *r1, const float *r2, const float *r3, const float *x, int64_t n,
                 float out[4]) {
    v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f xv = load8(x + i);
        a0 += load8(r0 + i) * xv;
        a1 += load8(r1 + i) * xv;
        a2 += load8(r2 + i) * xv;
        a3 += load8(r3 + i) * xv;
    }
    float s0 = hsum8(a0), s1 = hsum8(a1), s2 = hsum8(a2), s3 = hsum8(a3);
    for (; i < n; i++) { s0 += r0[i] * x[i]; s1 += r1[i] * x[i]; s2 += r2[i] * x[i]; s3 += r3[i] * x[i]; }
    out[0] = s0; out[1] = s1; out[2] = s2; out[3] = s3;
}

/* Four dot products of x with bf16 rows, converting on the fly (decode: each row is read once). */
static void dot4_bf16(const uint16_t *r0, const uint16_t *r1, const uint16_t *r2, const uint16_t *r3, const float *x,
                      int64_t n, float out[4]) {
    v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f xv = load8(x + i);
        a0 += load8_bf16(r0 + i) * xv;
        a1 += load8_bf16(r1 + i) * xv;
        a2 += load8_bf16(r2 + i) * xv;
        a3 += load8_bf16(r3 + i) * xv;
    }
    float s0 = hsum8(a0), s1 = hsum8(a1), s2 = hsum8(a2), s3 = hsum8(a3);
    for (; i < n; i++) {
        s0 += lmc_bf16_to_f32(r0[i]) * x[i]; s1 += lmc_bf16_to_f32(r1[i]) * x[i];
        s2 += lmc_bf16_to_f32(r2[i]) * x[i]; s3 += lmc_bf16_to_f32(r3[i]) * x[i];
    }
    out[0] = s0; out[1] = s1; out[2] = s2; out[3] = s3;
}

void lmc_cpu_matmul_rows(float *y, const lmc_tensor *w, const float *x, int64_t n_tok, int64_t o0, int64_t o1,
                         float *tmp) {
    const int64_t in = w->ne[0], out = w->ne[1];
    const size_t row_bytes = w->nb[1];
    const char *wd = w->data;
    int64_t o = o0;
    if (n_tok >= LMC_CPU_GEMM_MIN_TOKENS) {
        for (; o < o1; o += LMC_CPU_GEMM_BLOCK) {
            int64_t nb = o1 - o < LMC_CPU_GEMM_BLOCK ? o1 - o : LMC_CPU_GEMM_BLOCK;
            const float *blk;
            int64_t ldb = in; /* row stride of blk in floats: f32 weights keep theirs (nb[1]) */
            if (w->type == LMC_DTYPE_F32) {
                blk = (const float *)(const void *)(wd + (size_t)o * row_bytes);
                ldb = (int64_t)(row_bytes / sizeof(float));
            } else {
                for (int64_t k = 0; k < nb; k++)
                    lmc_cpu_row_to_f32(w->type, wd + (size_t)(o + k) * row_bytes, tmp + (size_t)k * in, in);
                blk = tmp;
            }
            /* Y[t, o..o+nb) = X[t, :] · blk[k, :]ᵀ */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n_tok, (int)nb, (int)in, 1.0f, x, (int)in, blk,
                        (int)ldb, 0.0f, y + o, (int)out);
        }
        return;
    }
    if (w->type == LMC_DTYPE_BF16 && n_tok <= 2) {
        for (; o + 4 <= o1; o += 4) {
            const uint16_t *r[4];
            for (int k = 0; k < 4; k++) r[k] = (const uint16_t *)(const void *)(wd + (size_t)(o + k) * row_bytes);
            for (int64_t t = 0; t < n_tok; t++) {
                float s[4];
                dot4_bf16(r[0], r[1], r[2], r[3], x + (size_t)t * in, in, s);
                for (int k = 0; k < 4; k++) y[(size_t)t * out + o + k] = s[k];
            }
        }
    }
    for (; o + 4 <= o1; o += 4) {
        const float *r[4];
        for (int k = 0; k < 4; k++) {
            if (w->type == LMC_DTYPE_F32) {
                r[k] = (const float *)(const void *)(wd + (size_t)(o + k) * row_bytes);
            } else {
                lmc_cpu_row_to_f32(w->type, wd + (size_t)(o + k) * row_bytes, tmp + (size_t)k * in, in);
                r[k] = tmp + (size_t)k * in;
            }
        }
        for (int64_t t = 0; t < n_tok; t++) {
            float s[4];
            dot4(r[0], r[1], r[2], r[3], x + (size_t)t * in, in, s);
            for (int k = 0; k < 4; k++) y[(size_t)t * out + o + k] = s[k];
        }
    }
    for (; o < o1; o++) {
        const float *r;
        if (w->type == LMC_DTYPE_F32) {
            r = (const float *)(const void *)(wd + (size_t)o * row_bytes);
        } else {
            lmc_cpu_row_to_f32(w->type, wd + (size_t)o * row_bytes, tmp, in);
            r = tmp;
        }
        for (int64_t t = 0; t < n_tok; t++) y[(size_t)t * out + o] = lmc_cpu_dot_f32(r, x + (size_t)t * in, in);
    }
}

void lmc_cpu_matmul_rows_ref(float *y, const lmc_tensor *w, const float *x, int64_t n_tok, int64_t o0, int64_t o1) {
    const int64_t in = w->ne[0], out = w->ne[1];
    for (int64_t o = o0; o < o1; o++) {
        const char *row = (const char *)w->data + (size_t)o * w->nb[1];
        for (int64_t t = 0; t < n_tok; t++) {
            double s = 0;
            for (int64_t i = 0; i < in; i++) {
                float wv;
                lmc_to_f32(w->type, row + (size_t)i * w->nb[0], &wv, 1);
                s += (double)wv * x[(size_t)t * in + i];
            }
            y[(size_t)t * out + o] = (float)s;
        }
    }
}
