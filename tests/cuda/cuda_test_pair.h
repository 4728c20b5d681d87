/* cuda_test_pair.h — what the CUDA op tests share: a tensor on the CPU reference backend and its
 * twin on the GPU (pair), filled alike and compared at a relative bound (compare), and weights of
 * every dtype made once and bound on both backends (weight). The including test sets ref and gpu. */
#ifndef LMC_CUDA_TEST_PAIR_H
#define LMC_CUDA_TEST_PAIR_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/quant.h"

static lmc_backend *ref, *gpu;
static uint32_t rng = 1234567u;

static inline float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

/* A tensor with the same contents on both backends. */
typedef struct pair {
    lmc_tensor c, g;
} pair;

static inline void pair_alloc(pair *p, lmc_dtype t, int64_t ne0, int64_t ne1, int64_t ne2) {
    p->c = lmc_tensor_make(t, ne0, ne1, ne2, 1);
    p->g = p->c;
    LMC_ASSERT(ref->i->alloc(ref, &p->c) == 0);
    LMC_ASSERT(gpu->i->alloc(gpu, &p->g) == 0);
}

static inline void pair_set(pair *p, const void *host) {
    size_t n = lmc_tensor_nbytes(&p->c);
    ref->i->set(ref, &p->c, host, 0, n);
    gpu->i->set(gpu, &p->g, host, 0, n);
}

static inline void pair_f32(pair *p, int64_t ne0, int64_t ne1, int64_t ne2, float amp) {
    pair_alloc(p, LMC_DTYPE_F32, ne0, ne1, ne2);
    size_t n = (size_t)(ne0 * ne1 * ne2);
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = amp * frand();
    pair_set(p, h);
    free(h);
}

static inline void pair_i32(pair *p, const int32_t *v, int64_t n) {
    pair_alloc(p, LMC_DTYPE_I32, n, 1, 1);
    pair_set(p, v);
}

/* Expert ids [k, nt] (k per token, contiguous) as matmul_id reads them. */
static inline void pair_expert_ids(pair *p, const int32_t *v, int k, int nt) {
    pair_i32(p, v, (int64_t)k * nt);
    p->c.ne[0] = p->g.ne[0] = k;
    p->c.ne[1] = p->g.ne[1] = nt;
    p->c.nb[1] = p->g.nb[1] = (size_t)k * 4;
    p->c.nb[2] = p->g.nb[2] = p->c.nb[3] = p->g.nb[3] = (size_t)k * nt * 4;
}

static inline void pair_free(pair *p) {
    ref->i->release(ref, &p->c);
    gpu->i->release(gpu, &p->g);
}

/* max|gpu - cpu| ≤ tol · max|cpu| over the whole f32 tensor. */
static inline void compare(const pair *p, double tol, const char *what) {
    lmc_status st = gpu->i->sync(gpu);
    CHECK_MSG(st == 0, "%s: %s", what, lmc_last_error());
    size_t n = (size_t)lmc_tensor_nelem(&p->c);
    float *a = malloc(n * 4), *b = malloc(n * 4);
    ref->i->get(ref, a, &p->c, 0, n * 4);
    gpu->i->get(gpu, b, &p->g, 0, n * 4);
    double err = 0, mx = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(b[i])) bad++;
        err = fmax(err, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)a[i]));
    }
    CHECK_MSG(bad == 0 && err <= tol * fmax(mx, 1e-30), "%s: max|Δ| %.3g vs max|ref| %.3g (tol %.1g), %d non-finite",
              what, err, mx, tol, bad);
    free(a);
    free(b);
}

/* The bound a product of n tokens over weights t [in, out] meets against the CPU's f32 one: 1e-2
 * where the backend computes it in reduced precision (the bf16 GEMM past the decode kernels'
 * tokens, lmc_cuda_gemv_max_tokens; int8 activations, lmc_cuda_gemv_int8), else 1e-4. */
static inline double matmul_tol(lmc_dtype t, int64_t in, int64_t out, int64_t n) {
    return (n > lmc_cuda_gemv_max_tokens(t, in, out) && t != LMC_DTYPE_F32) || lmc_cuda_gemv_int8(t, in, n) ? 1e-2 : 1e-4;
}

/* ------------------------------------------------------------ weights of any dtype */

typedef struct weight {
    lmc_tensor c, g;          /* bound on each backend */
    void *bytes;              /* host bytes (kept alive while bound) */
    void *sc, *bi;            /* MLX side data (host) */
    lmc_quant_mlx qc, qg;     /* MLX aux per backend */
} weight;

static inline uint16_t f16_scale(void) { return lmc_f32_to_f16(0.01f + 0.02f * fabsf(frand())); }

static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Bind w's bytes as an [in, out] weight of dtype t on both backends; MLX dtypes also bind their
 * scales/biases (w->sc, w->bi) of `group` inputs a group, stored as sdt. */
static inline void weight_bind(weight *w, lmc_dtype t, int64_t in, int64_t out, int group, lmc_dtype sdt) {
    w->c = lmc_tensor_make(t, in, out, 1, 1);
    w->g = w->c;
    if (t == LMC_DTYPE_MXFP4_MLX) { /* U8 exponents per 32, no biases */
        lmc_quant_mlx *q[2] = {&w->qc, &w->qg};
        lmc_backend *b[2] = {ref, gpu};
        for (int k = 0; k < 2; k++) {
            memset(q[k], 0, sizeof *q[k]);
            q[k]->group_size = 32;
            q[k]->scales = lmc_tensor_make(LMC_DTYPE_U8, in / 32, out, 1, 1);
            LMC_ASSERT(b[k]->i->bind_weight(b[k], &q[k]->scales, w->sc) == 0);
        }
        w->c.aux = &w->qc;
        w->g.aux = &w->qg;
    }
    if (lmc_dtype_is_mlx(t)) {
        lmc_quant_mlx *q[2] = {&w->qc, &w->qg};
        lmc_backend *b[2] = {ref, gpu};
        for (int k = 0; k < 2; k++) {
            q[k]->group_size = group;
            q[k]->scales = lmc_tensor_make(sdt, in / group, out, 1, 1);
            q[k]->biases = q[k]->scales;
            LMC_ASSERT(b[k]->i->bind_weight(b[k], &q[k]->scales, w->sc) == 0);
            LMC_ASSERT(b[k]->i->bind_weight(b[k], &q[k]->biases, w->bi) == 0);
        }
        w->c.aux = &w->qc;
        w->g.aux = &w->qg;
    }
    LMC_ASSERT(ref->i->bind_weight(ref, &w->c, w->bytes) == 0);
    LMC_ASSERT(gpu->i->bind_weight(gpu, &w->g, w->bytes) == 0);
}

/* A random [in, out] weight of dtype t bound on both backends. */
static inline void weight_make(weight *w, lmc_dtype t, int64_t in, int64_t out) {
    memset(w, 0, sizeof *w);
    const size_t row = lmc_dtype_row_bytes(t, in);
    LMC_ASSERT(row > 0);
    w->bytes = calloc((size_t)out, row);
    float *f = malloc((size_t)in * sizeof *f);
    const int group = 64;
    if (lmc_dtype_is_mlx(t)) {
        w->sc = malloc((size_t)out * (size_t)(in / group) * 2);
        w->bi = malloc((size_t)out * (size_t)(in / group) * 2);
    }
    if (t == LMC_DTYPE_MXFP4_MLX) w->sc = malloc((size_t)out * (size_t)(in / 32));
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++) f[i] = frand();
        uint8_t *dst = (uint8_t *)w->bytes + (size_t)o * row;
        switch (t) {
        case LMC_DTYPE_F32: memcpy(dst, f, row); break;
        case LMC_DTYPE_F16:
            for (int64_t i = 0; i < in; i++) put16(dst + 2 * i, lmc_f32_to_f16(f[i]));
            break;
        case LMC_DTYPE_BF16:
            for (int64_t i = 0; i < in; i++) put16(dst + 2 * i, lmc_f32_to_bf16(f[i]));
            break;
        case LMC_DTYPE_Q8_0: case LMC_DTYPE_Q4_0: case LMC_DTYPE_Q4_K: case LMC_DTYPE_Q6_K: case LMC_DTYPE_MXFP4:
            LMC_ASSERT(lmc_quantize_row(t, f, dst, NULL, in) == 0);
            break;
        case LMC_DTYPE_MXFP4_MLX: {
            lmc_mlx_row a = {32, LMC_DTYPE_U8, (uint8_t *)w->sc + (size_t)o * (size_t)(in / 32), NULL};
            LMC_ASSERT(lmc_quantize_row(t, f, dst, &a, in) == 0);
        } break;
        default:
            if (lmc_dtype_is_mlx(t)) {
                lmc_mlx_row a = {group, LMC_DTYPE_BF16, (uint16_t *)w->sc + (size_t)o * (in / group),
                                 (uint16_t *)w->bi + (size_t)o * (in / group)};
                LMC_ASSERT(lmc_quantize_row(t, f, dst, &a, in) == 0);
                break;
            }
            /* the other block types: random codes, sane f16 scales */
            for (size_t k = 0; k < row; k++) dst[k] = (uint8_t)(frand() * 128 + 128);
            const int64_t nb = in / lmc_dtype_block_elems(t);
            const size_t bb = lmc_dtype_block_bytes(t);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *p = dst + (size_t)b * bb;
                switch (t) {
                case LMC_DTYPE_Q4_1: case LMC_DTYPE_Q5_1: put16(p, f16_scale()); put16(p + 2, f16_scale()); break;
                case LMC_DTYPE_Q5_0: put16(p, f16_scale()); break;
                case LMC_DTYPE_Q2_K: put16(p + 80, f16_scale()); put16(p + 82, f16_scale()); break;
                case LMC_DTYPE_Q3_K: put16(p + 108, f16_scale()); break;
                case LMC_DTYPE_Q5_K: put16(p, f16_scale()); put16(p + 2, f16_scale()); break;
                default: LMC_ASSERT(!"unhandled dtype");
                }
            }
        }
    }
    free(f);
    weight_bind(w, t, in, out, group, LMC_DTYPE_BF16);
}

static inline void weight_free(weight *w) {
    ref->i->unbind_weight(ref, &w->c);
    gpu->i->unbind_weight(gpu, &w->g);
    if (w->sc) {
        ref->i->unbind_weight(ref, &w->qc.scales);
        gpu->i->unbind_weight(gpu, &w->qg.scales);
    }
    if (w->bi) {
        ref->i->unbind_weight(ref, &w->qc.biases);
        gpu->i->unbind_weight(gpu, &w->qg.biases);
    }
    free(w->bytes);
    free(w->sc);
    free(w->bi);
}

/* Compare an I32 tensor exactly. */
static inline void compare_i32(const pair *p, const char *what) {
    CHECK_MSG(gpu->i->sync(gpu) == 0, "%s: %s", what, lmc_last_error());
    size_t n = (size_t)lmc_tensor_nelem(&p->c);
    int32_t *a = malloc(n * 4), *b = malloc(n * 4);
    ref->i->get(ref, a, &p->c, 0, n * 4);
    gpu->i->get(gpu, b, &p->g, 0, n * 4);
    CHECK_MSG(memcmp(a, b, n * 4) == 0, "%s: ids differ", what);
    free(a);
    free(b);
}

#endif
