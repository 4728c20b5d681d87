/* cuda_backend.c — the CUDA implementation of lmc_backend_i (host side).
 *
 * Owns the device context: one stream every op is enqueued on (in order, no
 * host round trip inside a forward), a cuBLAS handle, the weight bindings
 * (uploaded once; a host mapping bound twice shares one device copy, by
 * reference count), and three workspaces that grow on demand: dequantized
 * weight rows and bf16 activations for cuBLAS, and attention partials.
 * Q8_0 / Q4_0 tensors (MXFP4 too, unless LMC_CUDA_MXFP4_INT8=0) live repacked on the device (cuda_kernels.h);
 * set() of a whole such tensor repacks, a partial set/get of one is an error.
 * Ops never fail on the spot: the first CUDA or cuBLAS error is recorded and
 * reported by the next sync() (or get()). Kernels live in the .cu files.
 */
#include "cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"
#include "cuda_internal.h"
#include "cuda_kernels.h"

/* ------------------------------------------------------------------ errors */

void lmc_cuda_note(cuda_ctx *c, cudaError_t e, const char *what) {
    if (e == cudaSuccess || c->err) return;
    c->err = LMC_ERR_IO;
    snprintf(c->err_msg, sizeof c->err_msg, "CUDA error in %s: %s", what, cudaGetErrorString(e));
}

void lmc_cuda_note_blas(cuda_ctx *c, cublasStatus_t e, const char *what) {
    if (e == CUBLAS_STATUS_SUCCESS || c->err) return;
    c->err = LMC_ERR_IO;
    snprintf(c->err_msg, sizeof c->err_msg, "cuBLAS error %d in %s", (int)e, what);
}

void lmc_cuda_note_msg(cuda_ctx *c, lmc_status st, const char *msg) {
    if (c->err) return;
    c->err = st;
    snprintf(c->err_msg, sizeof c->err_msg, "%s", msg);
}

/* after each launch: a bad configuration shows here, a fault at the next sync */
void lmc_cuda_launched(cuda_ctx *c, const char *what) { lmc_cuda_note(c, cudaGetLastError(), what); }

/* Grow a workspace to at least n bytes (the old one is freed, which waits for the device). */
void *lmc_cuda_ws(cuda_ctx *c, void **p, size_t *cap, size_t n) {
    if (n <= *cap) return *p;
    if (c->capturing) { /* no allocation while recording: the recording is dropped (cuda_graph.c) */
        c->capture_bad = 1;
        return NULL;
    }
    c->ws_gen++;
    if (*p) cudaFree(*p);
    *p = NULL;
    *cap = 0;
    cudaError_t e = cudaMalloc(p, n);
    if (e != cudaSuccess) {
        lmc_cuda_note(c, e, "workspace allocation");
        *p = NULL;
        return NULL;
    }
    *cap = n;
    return *p;
}

static int is_mx(int type) { return type == LMC_DTYPE_MXFP4 || type == LMC_DTYPE_MXFP4_MLX; }

/* Q8_0/Q4_0 always, MXFP4 (both layouts) unless LMC_CUDA_MXFP4_INT8=0: repacked on the device. */
static int is_q_repacked(int type) {
    return type == LMC_DTYPE_Q8_0 || type == LMC_DTYPE_Q4_0 || (is_mx(type) && lmc_cuda_mx_on());
}

/* Bytes of the repacked form and the offset of its scales (MXFP4: ggml's exponent plane). */
static size_t repacked_bytes(int type, int64_t ne0, int64_t ne1, size_t *scale_off) {
    if (is_mx(type)) return lmc_cuda_mx_bytes(type, ne0, ne1, scale_off);
    return lmc_cuda_repacked_bytes(type, ne0, ne1, scale_off);
}

/* Device bytes of a contiguous tensor of this backend. */
static size_t dev_bytes(const lmc_tensor *t, size_t *scale_off) {
    *scale_off = 0;
    if (is_q_repacked(t->type)) return repacked_bytes(t->type, t->ne[0], lmc_tensor_nrows(t), scale_off);
    return lmc_tensor_nbytes(t);
}

lmc_cuda_w lmc_cuda_wdesc(const lmc_tensor *t) {
    lmc_cuda_w w;
    memset(&w, 0, sizeof w);
    w.type = t->type;
    w.data = t->data;
    w.nb1 = t->nb[1];
    w.ne0 = t->ne[0];
    w.ne1 = lmc_tensor_nrows(t);
    if (is_q_repacked(t->type)) {
        w.repacked = 1;
        repacked_bytes(t->type, w.ne0, w.ne1, &w.scale_off);
    }
    if (lmc_dtype_has_aux(t->type)) { /* MLX affine; MXFP4_MLX: U8 exponents, no biases */
        const lmc_quant_mlx *q = t->aux;
        LMC_ASSERT(q != NULL);
        w.mlx_scales = q->scales.data;
        w.mlx_biases = q->biases.data;
        w.mlx_stype = q->scales.type;
        w.mlx_snb1 = q->scales.nb[1];
        w.group = q->group_size;
    }
    return w;
}

/* ------------------------------------------------------------------ memory */

/* Device bytes of a weight or tensor: packed into arena a, else one cudaMalloc (NULL: out of memory). */
static void *block_alloc(cuda_arena *a, size_t n) {
    void *p = lmc_cuda_arena_alloc(a, n);
    if (!p && cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        cudaGetLastError();
        p = NULL;
    }
    return p;
}

static void block_free(cuda_arena *a, void *p, size_t n) {
    if (lmc_cuda_arena_owns(a, p)) lmc_cuda_arena_free(a, p, n);
    else cudaFree(p);
}

#ifdef LMC_CUDA_TRACE
/* A measurement build (make CUDA_TRACE=1): every backend records its instrumented kernels' blocks and
 * appends them to $LMC_CUDA_TRACE_FILE when freed (cuda_trace.cuh, tools/trace_step.py). */
static void (*const trace_tus[])(int, unsigned, FILE *) = {lmc_cuda_trace_qv_q8_0, lmc_cuda_trace_qv_q4_0,
                                                            lmc_cuda_trace_attn};
static void trace_attach(void) {
    for (size_t i = 0; i < sizeof trace_tus / sizeof trace_tus[0]; i++) trace_tus[i](0, 1u << 20, NULL);
}
static void trace_dump(void) {
    const char *path = getenv("LMC_CUDA_TRACE_FILE");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) fprintf(f, "# backend\n");
    for (size_t i = 0; i < sizeof trace_tus / sizeof trace_tus[0]; i++) trace_tus[i](1, 0, f);
    if (f) fclose(f);
}
#endif

static void cuda_free(lmc_backend *be) {
    cuda_ctx *c = CTX(be);
    cudaStreamSynchronize(c->stream);
#ifdef LMC_CUDA_TRACE
    trace_dump();
#endif
    for (int i = 0; i < c->n_binds; i++) block_free(&c->arena, c->binds[i].dev, c->binds[i].dev_bytes);
    free(c->binds);
    lmc_cuda_arena_release(&c->arena);
    lmc_cuda_arena_release(&c->tarena); /* tensors still held by a caller are gone with it */
    cudaFree(c->ws_w);
    cudaFree(c->ws_x);
    cudaFree(c->ws_a);
    cudaFree(c->stage);
    cudaFree(c->ws_m);
    cudaFree(c->blas_ws);
    cudaFree(c->attn_done);
    free(c->host);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->stream);
    free(c);
    free(be);
}

static lmc_status cuda_alloc(lmc_backend *be, lmc_tensor *t) {
    cuda_ctx *c = CTX(be);
    size_t off, n = dev_bytes(t, &off);
    void *p = block_alloc(&c->tarena, n);
    if (!p) return lmc_fail(LMC_ERR_NOMEM, "cannot allocate %zu bytes of GPU memory", n);
    cudaError_t e = cudaMemsetAsync(p, 0, n ? n : 1, c->stream);
    if (e != cudaSuccess) {
        block_free(&c->tarena, p, n);
        return lmc_fail(LMC_ERR_IO, "cudaMemset: %s", cudaGetErrorString(e));
    }
    t->data = p;
    c->tensor_bytes += n ? n : 1;
    return LMC_OK;
}

static void cuda_release(lmc_backend *be, lmc_tensor *t) {
    cuda_ctx *c = CTX(be);
    if (t->data) {
        size_t off, n = dev_bytes(t, &off);
        block_free(&c->tarena, t->data, n);
        c->tensor_bytes -= n ? n : 1;
    }
    t->data = NULL;
}

lmc_status lmc_cuda_mem_stats(lmc_backend *be, lmc_cuda_mem *m) {
    if (!be || be->i->free != cuda_free) return lmc_fail(LMC_ERR_ARG, "not a CUDA backend");
    const cuda_ctx *c = CTX(be);
    memset(m, 0, sizeof *m);
    for (int i = 0; i < c->n_binds; i++) m->weights += c->binds[i].dev_bytes;
    m->tensors = c->tensor_bytes;
    m->ws_w = c->ws_w_bytes;
    m->ws_x = c->ws_x_bytes;
    m->ws_a = c->ws_a_bytes + (c->attn_done ? LMC_CUDA_ATTN_DONE * sizeof(unsigned) : 0);
    m->ws_m = c->ws_m_bytes;
    m->stage = c->stage_bytes;
    m->blas = c->blas_ws ? LMC_CUDA_BLAS_WS : 0;
    m->workspaces = m->ws_w + m->ws_x + m->ws_a + m->ws_m + m->stage + m->blas;
    return LMC_OK;
}

/* Copy a whole Q8_0/Q4_0/MXFP4 tensor from host bytes (checkpoint layout) into its repacked device planes. */
static lmc_status upload_repacked(cuda_ctx *c, const lmc_tensor *t, void *dev, const void *host) {
    const size_t raw = lmc_tensor_nbytes(t);
    if (!lmc_cuda_ws(c, &c->stage, &c->stage_bytes, raw))
        return lmc_fail(LMC_ERR_NOMEM, "cannot allocate %zu bytes of GPU staging memory", raw);
    cudaError_t e = cudaMemcpyAsync(c->stage, host, raw, cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess) return lmc_fail(LMC_ERR_IO, "upload: %s", cudaGetErrorString(e));
    size_t off;
    repacked_bytes(t->type, t->ne[0], lmc_tensor_nrows(t), &off);
    if (is_mx(t->type))
        lmc_cuda_mx_repack(c->stream, t->type, c->stage, lmc_dtype_row_bytes(t->type, t->ne[0]), t->ne[0],
                           lmc_tensor_nrows(t), dev, off);
    else
        lmc_cuda_repack(c->stream, t->type, c->stage, lmc_dtype_row_bytes(t->type, t->ne[0]), t->ne[0],
                        lmc_tensor_nrows(t), dev, off);
    e = cudaGetLastError();
    if (e != cudaSuccess) return lmc_fail(LMC_ERR_IO, "repack: %s", cudaGetErrorString(e));
    return LMC_OK;
}

static lmc_status cuda_bind_weight(lmc_backend *be, lmc_tensor *t, const void *host) {
    cuda_ctx *c = CTX(be);
    const size_t nbytes = lmc_tensor_nbytes(t);
    if (t->nb[1] != lmc_dtype_row_bytes(t->type, t->ne[0]))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "cuda: strided weight views are not supported");
    if (!lmc_dtype_is_float(t->type) && !lmc_dtype_is_quant(t->type) && t->type != LMC_DTYPE_U8) /* U8: MXFP4 exponents */
        return lmc_fail(LMC_ERR_UNSUPPORTED, "cuda: weights of dtype %s", lmc_dtype_name(t->type));
    for (int i = 0; i < c->n_binds; i++) {
        cuda_bind *b = &c->binds[i];
        if (b->host == host && b->nbytes == nbytes && b->type == (int)t->type && b->ne0 == t->ne[0]) {
            b->refs++;
            t->data = b->dev;
            return LMC_OK;
        }
    }
    if (c->n_binds == c->cap_binds) {
        int cap = c->cap_binds ? 2 * c->cap_binds : 256;
        cuda_bind *nb = realloc(c->binds, (size_t)cap * sizeof *nb);
        if (!nb) return lmc_fail(LMC_ERR_NOMEM, "cuda weight table");
        c->binds = nb;
        c->cap_binds = cap;
    }
    size_t off, n = dev_bytes(t, &off);
    void *dev = block_alloc(&c->arena, n);
    if (!dev) return lmc_fail(LMC_ERR_NOMEM, "cannot allocate %zu bytes of GPU memory for a weight", n);
    lmc_status st = LMC_OK;
    if (is_q_repacked(t->type)) {
        st = upload_repacked(c, t, dev, host);
    } else {
        cudaError_t e = cudaMemcpyAsync(dev, host, nbytes, cudaMemcpyHostToDevice, c->stream);
        if (e != cudaSuccess) st = lmc_fail(LMC_ERR_IO, "weight upload: %s", cudaGetErrorString(e));
    }
    if (st < 0) { block_free(&c->arena, dev, n); return st; }
    c->binds[c->n_binds++] = (cuda_bind){host, nbytes, (int)t->type, t->ne[0], lmc_tensor_nrows(t), dev, n, 1};
    t->data = dev;
    return LMC_OK;
}

static void cuda_unbind_weight(lmc_backend *be, lmc_tensor *t) {
    cuda_ctx *c = CTX(be);
    for (int i = 0; i < c->n_binds; i++) {
        if (c->binds[i].dev != t->data) continue;
        if (--c->binds[i].refs == 0) {
            block_free(&c->arena, c->binds[i].dev, c->binds[i].dev_bytes);
            c->binds[i] = c->binds[--c->n_binds];
        }
        break;
    }
    t->data = NULL;
}

static void cuda_set(lmc_backend *be, lmc_tensor *dst, const void *src, size_t off, size_t n) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(off + n <= lmc_tensor_nbytes(dst));
    if (is_q_repacked(dst->type)) {
        if (off != 0 || n != lmc_tensor_nbytes(dst)) {
            lmc_cuda_note_msg(c, LMC_ERR_UNSUPPORTED, "cuda: partial set of a repacked (Q8_0/Q4_0/MXFP4) tensor");
            return;
        }
        lmc_status st = upload_repacked(c, dst, dst->data, src);
        if (st < 0) lmc_cuda_note_msg(c, st, lmc_last_error());
        return;
    }
    lmc_cuda_note(c, cudaMemcpyAsync((char *)dst->data + off, src, n, cudaMemcpyHostToDevice, c->stream), "set");
}

static void cuda_get(lmc_backend *be, void *dst, const lmc_tensor *src, size_t off, size_t n) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(off + n <= lmc_tensor_nbytes(src));
    if (is_q_repacked(src->type)) {
        lmc_cuda_note_msg(c, LMC_ERR_UNSUPPORTED, "cuda: get of a repacked (Q8_0/Q4_0/MXFP4) tensor");
        memset(dst, 0, n);
        return;
    }
    lmc_cuda_note(c, cudaMemcpyAsync(dst, (const char *)src->data + off, n, cudaMemcpyDeviceToHost, c->stream), "get");
    lmc_cuda_note(c, cudaStreamSynchronize(c->stream), "get");
}

static lmc_status cuda_sync(lmc_backend *be) {
    cuda_ctx *c = CTX(be);
    lmc_cuda_note(c, cudaStreamSynchronize(c->stream), "sync");
    if (c->stage) {
        cudaFree(c->stage);
        c->stage = NULL;
        c->stage_bytes = 0;
    }
    if (c->err) {
        lmc_status st = c->err;
        c->err = 0;
        return lmc_fail(st, "%s", c->err_msg);
    }
    return LMC_OK;
}

/* ------------------------------------------------------------------- ops */

static int is_contig(const lmc_tensor *t) {
    if (lmc_dtype_is_quant(t->type)) return t->nb[1] == lmc_dtype_row_bytes(t->type, t->ne[0]);
    size_t s = lmc_dtype_size(t->type);
    for (int i = 0; i < LMC_MAX_DIMS; i++) {
        if (t->nb[i] != s) return 0;
        s *= (size_t)t->ne[i];
    }
    return 1;
}

static void cuda_get_rows(lmc_backend *be, lmc_tensor *y, const lmc_tensor *table, const lmc_tensor *ids,
                          float scale) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(y->type == LMC_DTYPE_F32 && ids->type == LMC_DTYPE_I32 && table->ne[0] == y->ne[0]);
    LMC_ASSERT(lmc_tensor_nelem(ids) == lmc_tensor_nrows(y) && is_contig(y));
    lmc_cuda_w w = lmc_cuda_wdesc(table);
    lmc_cuda_get_rows(c->stream, y->data, &w, ids->data, lmc_tensor_nelem(ids), scale);
    lmc_cuda_launched(c, "get_rows");
}

/* Prefill-sized products (more than LMC_CUDA_GEMV_MAX_TOKENS tokens) of non-f32 weights run as
 * bf16 GEMMs (f32 accumulation, f32 output) on cuBLAS: bf16 weights in place, any other dtype
 * dequantized to bf16 rows into ws_w first — the whole matrix at once when its bf16 copy fits
 * PREFILL_WS (a Llama-8B MLP matrix is 117 MB: one GEMM of full height; 64 MB chunks made the
 * down product two GEMMs of 2340 and 1756 rows, a poor fit for the tile waves), else chunks of
 * equal height. The activations go to bf16 once per input (ws_x) and are shared by the products
 * of one input (matmul_n, matmul_fused), or are written as bf16 directly by the op before the
 * product (the RMSNorm and act·mul of matmul_fused). */
#define PREFILL_WS ((size_t)256 << 20)

/* LMC_CUDA_PREFILL=0: the earlier prefill products for A/B comparisons (one conversion of x per
 * product, no RMSNorm / act·mul in front of a GEMM, dequantized chunks of at most 64 MB). */
static int prefill_old(void) {
    static int v = -1;
    if (v < 0) v = getenv("LMC_CUDA_PREFILL") && !strcmp(getenv("LMC_CUDA_PREFILL"), "0");
    return v;
}

/* Rows per chunk of an [out rows of K] weight dequantized into at most cap bytes (esz per value). */
static int64_t chunk_rows(int64_t out, int64_t K, size_t esz, size_t cap) {
    int64_t rows = (int64_t)(cap / ((size_t)K * esz));
    if (rows < 1) rows = 1;
    if (rows >= out) return out;
    const int64_t nch = (out + rows - 1) / rows;
    int64_t r = (out + nch - 1) / nch; /* equal chunks; a multiple of 128 rows where that still fits */
    if ((r + 127) / 128 * 128 <= rows) r = (r + 127) / 128 * 128;
    return r;
}

/* x (f32, n values) as bf16 in ws_x; NULL (error noted) when the workspace cannot grow. */
static uint16_t *x_bf16(cuda_ctx *c, const float *x, int64_t n) {
    uint16_t *p = lmc_cuda_ws(c, &c->ws_x, &c->ws_x_bytes, (size_t)n * 2);
    if (!p) return NULL;
    lmc_cuda_f32_to_bf16(c->stream, x, p, n);
    lmc_cuda_launched(c, "f32_to_bf16");
    return p;
}

/* y [out, n] = w·xb + beta·y (beta 0 or 1): xb bf16 [K, n], w any dtype but f32. */
static void gemm_bf16(cuda_ctx *c, float *y, const lmc_tensor *w, const uint16_t *xb, int64_t n, float beta) {
    const int64_t K = w->ne[0], out = w->ne[1];
    const float one = 1.0f;
    if (w->type == LMC_DTYPE_BF16) {
        lmc_cuda_note_blas(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)K, &one, w->data,
                                  CUDA_R_16BF, (int)(w->nb[1] / 2), xb, CUDA_R_16BF, (int)K, &beta, y,
                                  CUDA_R_32F, (int)out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "gemm bf16");
        return;
    }
    int64_t rows = chunk_rows(out, K, 2, PREFILL_WS);
    if (prefill_old()) { /* the earlier chunks: as many rows as 64 MB hold, the rest after */
        rows = (int64_t)(WS_W_BYTES / ((size_t)K * 2));
        rows = rows < 1 ? 1 : rows > out ? out : rows;
    }
    void *ws = lmc_cuda_ws(c, &c->ws_w, &c->ws_w_bytes, (size_t)rows * (size_t)K * 2);
    if (!ws) return;
    lmc_cuda_w wd = lmc_cuda_wdesc(w);
    for (int64_t o0 = 0; o0 < out; o0 += rows) {
        const int64_t nr = out - o0 < rows ? out - o0 : rows;
        lmc_cuda_dequant_rows(c->stream, &wd, o0, nr, ws, 1);
        lmc_cuda_launched(c, "dequant_rows");
        lmc_cuda_note_blas(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n, (int)K, &one, ws,
                                  CUDA_R_16BF, (int)K, xb, CUDA_R_16BF, (int)K, &beta, y + o0, CUDA_R_32F,
                                  (int)out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "gemm bf16");
    }
}

/* y = w·x + beta·y (beta 0 or 1) through cuBLAS: f32 weights in f32 (SGEMM), others as bf16
 * GEMMs past lmc_cuda_gemv_max_tokens tokens, else dequantized to f32 rows in chunks (SGEMM). */
static void matmul_blas(cuda_ctx *c, lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *x, int64_t n, float beta) {
    const int64_t K = w->ne[0], out = w->ne[1];
    const float one = 1.0f;
    if (w->type == LMC_DTYPE_F32) {
        lmc_cuda_note_blas(c, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)K, &one, w->data,
                                 (int)(w->nb[1] / 4), x->data, (int)K, &beta, y->data, (int)out), "sgemm");
        return;
    }
    if (n > lmc_cuda_gemv_max_tokens(w->type, K, out)) {
        const uint16_t *xb = x_bf16(c, x->data, K * n);
        if (xb) gemm_bf16(c, y->data, w, xb, n, beta);
        return;
    }
    const int64_t rows = chunk_rows(out, K, 4, WS_W_BYTES);
    void *ws = lmc_cuda_ws(c, &c->ws_w, &c->ws_w_bytes, (size_t)rows * (size_t)K * 4);
    if (!ws) return;
    lmc_cuda_w wd = lmc_cuda_wdesc(w);
    for (int64_t o0 = 0; o0 < out; o0 += rows) {
        const int64_t nr = out - o0 < rows ? out - o0 : rows;
        lmc_cuda_dequant_rows(c->stream, &wd, o0, nr, ws, 0);
        lmc_cuda_launched(c, "dequant_rows");
        lmc_cuda_note_blas(c, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n, (int)K, &one, ws, (int)K,
                                 x->data, (int)K, &beta, (float *)y->data + o0, (int)out), "sgemm");
    }
}

/* The shape and layout contract of matmul (backend.h) as this backend takes it. */
static void matmul_check(const lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *x) {
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && y->type == LMC_DTYPE_F32);
    LMC_ASSERT(w->ne[0] == x->ne[0] && w->ne[1] == y->ne[0] && lmc_tensor_nrows(x) == lmc_tensor_nrows(y));
    LMC_ASSERT(is_contig(x) && is_contig(y) && w->ne[2] == 1 && w->ne[3] == 1);
    LMC_ASSERT(w->nb[1] >= lmc_dtype_row_bytes(w->type, w->ne[0]) && lmc_dtype_row_bytes(w->type, w->ne[0]) > 0);
    LMC_ASSERT(!lmc_dtype_has_aux(w->type) || lmc_quant_mlx_check(w->type, w->ne[0], w->ne[1], w->aux) == LMC_OK);
}

/* Q8_0/Q4_0/MXFP4 products of 3..64 tokens (batched decode, verification, short prompts; the bound
 * is lmc_cuda_mmq_ok's) on the int8 tensor cores (cuda_mmq.cu): the activations quantized once into
 * ws_x, then one launch for the n matrices (one dtype and width), y (+)= w·x. 0: not taken, nothing
 * enqueued. */
static int matmul_mmq(cuda_ctx *c, int n, float *const *y, const lmc_cuda_w *w, const float *x, int64_t nt, int acc) {
    for (int i = 0; i < n; i++)
        if (w[i].type != w[0].type || w[i].ne0 != w[0].ne0 || !lmc_cuda_mmq_ok(&w[i], nt)) return 0;
    if ((uintptr_t)x & 15) return 0;
    void *ws = lmc_cuda_ws(c, &c->ws_x, &c->ws_x_bytes, lmc_cuda_mmq_ws(w[0].ne0, nt));
    if (!ws) return 1; /* noted (or the recording dropped) */
    lmc_cuda_mmq_quantize(c->stream, w[0].type, x, w[0].ne0, nt, ws);
    lmc_cuda_launched(c, "mmq quantize");
    lmc_cuda_note(c, (cudaError_t)lmc_cuda_mmq(c->stream, n, y, w, ws, nt, acc), "mmq");
    lmc_cuda_launched(c, "mmq");
    return 1;
}

void lmc_cuda_matmul(lmc_backend *be, lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *x) {
    cuda_ctx *c = CTX(be);
    matmul_check(y, w, x);
    const int64_t n = lmc_tensor_nrows(x);
    lmc_cuda_w wd = lmc_cuda_wdesc(w);
    float *yd = y->data;
    if (matmul_mmq(c, 1, &yd, &wd, x->data, n, 0)) return;
    if (lmc_cuda_gemv_ok(&wd, x->data, n)) {
        lmc_cuda_gemv(c->stream, y->data, &wd, x->data, n);
        lmc_cuda_launched(c, "gemv");
        return;
    }
    matmul_blas(c, y, w, x, n, 0.0f);
}

/* The most tokens the decode kernels take for all of n matrices (the largest decides). */
static int64_t group_gemv_tokens(int n, const lmc_tensor *const *w) {
    int64_t v = LMC_CUDA_GEMV_MAX_TOKENS;
    for (int i = 0; i < n; i++) {
        const int64_t m = lmc_cuda_gemv_max_tokens(w[i]->type, w[i]->ne[0], w[i]->ne[1]);
        if (m < v) v = m;
    }
    return v;
}

static void cuda_matmul_n(lmc_backend *be, int n, lmc_tensor *const *y, const lmc_tensor *const *w, const lmc_tensor *x) {
    cuda_ctx *c = CTX(be);
    const int64_t nt = lmc_tensor_nrows(x);
    static int off = -1; /* LMC_CUDA_MATMUL_N=0: one product per matrix (A/B comparisons) */
    if (off < 0) off = getenv("LMC_CUDA_MATMUL_N") && !strcmp(getenv("LMC_CUDA_MATMUL_N"), "0");
    int fused = !off && n >= 2 && n <= LMC_CUDA_GEMV_MULTI && x->type == LMC_DTYPE_F32 && is_contig(x);
    float *yd[LMC_CUDA_GEMV_MULTI];
    lmc_cuda_w wd[LMC_CUDA_GEMV_MULTI];
    for (int i = 0; fused && i < n; i++) {
        fused = y[i]->type == LMC_DTYPE_F32 && is_contig(y[i]) && w[i]->ne[0] == x->ne[0] && w[i]->ne[1] == y[i]->ne[0] &&
                lmc_tensor_nrows(y[i]) == nt && w[i]->ne[2] == 1 && w[i]->ne[3] == 1 && !lmc_dtype_is_mlx(w[i]->type);
        if (fused) {
            yd[i] = y[i]->data;
            wd[i] = lmc_cuda_wdesc(w[i]);
        }
    }
    if (fused && matmul_mmq(c, n, yd, wd, x->data, nt, 0)) return;
    if (fused && lmc_cuda_gemv_multi(c->stream, n, yd, wd, x->data, nt)) {
        lmc_cuda_launched(c, "gemv multi");
        return;
    }
    /* prefill-sized (past the decode kernels' tokens of the largest matrix: the n products go one
     * way), no f32 weight: x goes to bf16 once for the n GEMMs */
    int shared = !prefill_old() && nt > group_gemv_tokens(n, w);
    for (int i = 0; shared && i < n; i++) {
        matmul_check(y[i], w[i], x);
        shared = w[i]->type != LMC_DTYPE_F32;
    }
    const uint16_t *xb = shared ? x_bf16(c, x->data, x->ne[0] * nt) : NULL;
    if (shared) {
        for (int i = 0; xb && i < n; i++) gemm_bf16(c, y[i]->data, w[i], xb, nt, 0.0f);
        return;
    }
    for (int i = 0; i < n; i++) lmc_cuda_matmul(be, y[i], w[i], x);
}

/* matmul_fused past lmc_cuda_gemv_max_tokens tokens (weights checked by the caller; none f32,
 * none MLX): the input formed once as bf16 in ws_x by the op before the product (RMSNorm,
 * act·mul, or a plain conversion), then one bf16 GEMM per matrix, y += through beta = 1. */
static void fused_gemm(cuda_ctx *c, int n, lmc_tensor *const *y, const lmc_tensor *const *w, const lmc_tensor *x,
                       const lmc_fuse_op *op, const lmc_cuda_fuse *f) {
    const int64_t K = x->ne[0], nt = lmc_tensor_nrows(x);
    uint16_t *xb = lmc_cuda_ws(c, &c->ws_x, &c->ws_x_bytes, (size_t)(K * nt) * 2);
    if (!xb) return;
    if (op->in == LMC_FUSE_IN_RMS)
        lmc_cuda_rms_norm_bf16(c->stream, xb, x->data, K, nt, f->norm_w, f->norm_type, 1, f->eps, f->w_offset);
    else if (op->in == LMC_FUSE_IN_GLU)
        lmc_cuda_act_mul_bf16(c->stream, xb, x->data, f->x2, K * nt, f->act);
    else
        lmc_cuda_f32_to_bf16(c->stream, x->data, xb, K * nt);
    lmc_cuda_launched(c, "fused gemm input");
    for (int i = 0; i < n; i++) gemm_bf16(c, y[i]->data, w[i], xb, nt, op->out == LMC_FUSE_OUT_ACC ? 1.0f : 0.0f);
}

/* LMC_CUDA_ROPE_FUSE=0: matmul_fused declines OUT_ROPE (rope_store runs after the products; A/B). */
static int rope_fuse_on(void) {
    static int v = -1;
    if (v < 0) v = !(getenv("LMC_CUDA_ROPE_FUSE") && !strcmp(getenv("LMC_CUDA_ROPE_FUSE"), "0"));
    return v;
}

/* matmul_fused's OUT_ROPE operands (q, k, v = y[0..2]; rope_store's rope, caches, pos and seq) as
 * lmc_cuda_gemv_fused takes them: every rotated dim (n_rot = head_dim), f32 caches of k's rows.
 * 0: a case the kernels do not take (the caller runs the plain ops). */
static int rope_fuse_args(lmc_cuda_rope_kv *rk, int n, lmc_tensor *const *y, const lmc_fuse_op *op) {
    const lmc_rope_op *r = op->rope;
    const lmc_tensor *kc = op->k_cache, *vc = op->v_cache;
    const int64_t hd = op->head_dim, nt = lmc_tensor_nrows(y[0]);
    if (n != 3 || !r || !kc || !vc || !op->pos || !op->seq || hd <= 0 || r->n_rot != hd || !r->inv_freq ||
        r->inv_freq->type != LMC_DTYPE_F32 || r->inv_freq->ne[0] < hd / 2 || kc->type != LMC_DTYPE_F32 ||
        vc->type != LMC_DTYPE_F32 || !is_contig(kc) || !is_contig(vc) || kc->ne[0] != y[1]->ne[0] ||
        vc->ne[0] != y[2]->ne[0] || kc->ne[1] != vc->ne[1] || kc->ne[2] != vc->ne[2] || op->pos->type != LMC_DTYPE_I32 ||
        op->seq->type != LMC_DTYPE_I32 || lmc_tensor_nelem(op->pos) < nt || lmc_tensor_nelem(op->seq) < nt)
        return 0;
    *rk = (lmc_cuda_rope_kv){.pos = op->pos->data, .seq = op->seq->data, .inv = r->inv_freq->data, .kc = kc->data,
                             .vc = vc->data, .n_ctx = kc->ne[1], .n_seq = kc->ne[2], .kv_row = kc->ne[0],
                             .hd = (int)hd, .interleaved = r->interleaved, .af = r->attn_factor};
    return 1;
}

/* matmul_fused (backend.h): decode-sized products through lmc_cuda_gemv_fused; y += w·x also for
 * larger batches (cuBLAS with beta = 1). LMC_CUDA_FUSE=0: nothing taken (A/B comparisons). */
static int cuda_matmul_fused(lmc_backend *be, int n, lmc_tensor *const *y, const lmc_tensor *const *w,
                             const lmc_tensor *x, const lmc_fuse_op *op) {
    cuda_ctx *c = CTX(be);
    static int off = -1;
    if (off < 0) off = getenv("LMC_CUDA_FUSE") && !strcmp(getenv("LMC_CUDA_FUSE"), "0");
    if (off || n < 1 || n > LMC_CUDA_GEMV_MULTI || x->type != LMC_DTYPE_F32 || !is_contig(x)) return 0;
    const int64_t nt = lmc_tensor_nrows(x);
    float *yd[LMC_CUDA_GEMV_MULTI];
    lmc_cuda_w wd[LMC_CUDA_GEMV_MULTI];
    for (int i = 0; i < n; i++) {
        if (y[i]->type != LMC_DTYPE_F32 || !is_contig(y[i]) || w[i]->ne[0] != x->ne[0] || w[i]->ne[1] != y[i]->ne[0] ||
            lmc_tensor_nrows(y[i]) != nt || w[i]->ne[2] != 1 || w[i]->ne[3] != 1 || lmc_dtype_is_mlx(w[i]->type))
            return 0;
        yd[i] = y[i]->data;
        wd[i] = lmc_cuda_wdesc(w[i]);
    }
    lmc_cuda_fuse f = {.in = (int)op->in, .out = (int)op->out, .act = (int)op->act};
    if (op->in == LMC_FUSE_IN_RMS) {
        const lmc_tensor *g = op->norm_w && op->norm_w->data ? op->norm_w : NULL;
        if (g && (lmc_tensor_nelem(g) != x->ne[0] || !lmc_dtype_is_float(g->type))) return 0;
        f.norm_w = g ? g->data : NULL;
        f.norm_type = g ? (int)g->type : 0;
        f.eps = op->eps;
        f.w_offset = op->w_offset;
    }
    if (op->in == LMC_FUSE_IN_GLU) {
        if (!op->x2 || op->x2->type != LMC_DTYPE_F32 || !is_contig(op->x2) || lmc_tensor_nelem(op->x2) != lmc_tensor_nelem(x))
            return 0;
        f.x2 = op->x2->data;
    }
    if (op->out == LMC_FUSE_OUT_ROPE && (!rope_fuse_on() || !rope_fuse_args(&f.rope, n, y, op))) return 0;
    if (lmc_cuda_gemv_fused(c->stream, n, yd, wd, x->data, nt, &f)) {
        lmc_cuda_launched(c, "gemv fused");
        return 1;
    }
    if (op->out == LMC_FUSE_OUT_ROPE) return 0; /* the decode kernels alone take it */
    /* prefill-sized: bf16 GEMMs with the input op in front (OUT_GLU is left to the plain ops: its
     * f32 output would be converted again for the down product; so are the products the int8
     * tensor-core path takes) */
    int blas = nt > group_gemv_tokens(n, w) && op->out != LMC_FUSE_OUT_GLU && !prefill_old() &&
               !(op->in == LMC_FUSE_IN_X && op->out == LMC_FUSE_OUT_SET);
    for (int i = 0; blas && i < n; i++) {
        matmul_check(y[i], w[i], x);
        blas = w[i]->type != LMC_DTYPE_F32 && !lmc_cuda_mmq_ok(&wd[i], nt);
    }
    if (blas) {
        fused_gemm(c, n, y, w, x, op, &f);
        return 1;
    }
    if (op->in != LMC_FUSE_IN_X || op->out != LMC_FUSE_OUT_ACC || n != 1 || lmc_cuda_gemv_ok(&wd[0], x->data, nt))
        return 0;
    LMC_ASSERT(w[0]->nb[1] >= lmc_dtype_row_bytes(w[0]->type, w[0]->ne[0]) && lmc_dtype_row_bytes(w[0]->type, w[0]->ne[0]) > 0);
    if (matmul_mmq(c, 1, yd, wd, x->data, nt, 1)) return 1;
    matmul_blas(c, y[0], w[0], x, nt, 1.0f); /* y = w·x + y */
    return 1;
}

static void cuda_add_bias(lmc_backend *be, lmc_tensor *y, const lmc_tensor *b) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(lmc_tensor_nelem(b) == y->ne[0] && lmc_dtype_is_float(b->type) && is_contig(y));
    lmc_cuda_add_bias(c->stream, y->data, b->data, b->type, y->ne[0], lmc_tensor_nrows(y));
    lmc_cuda_launched(c, "add_bias");
}

static void cuda_add(lmc_backend *be, lmc_tensor *y, const lmc_tensor *a, const lmc_tensor *b) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(lmc_tensor_nelem(a) == lmc_tensor_nelem(y) && lmc_tensor_nelem(b) == lmc_tensor_nelem(y));
    lmc_cuda_add(c->stream, y->data, a->data, b->data, lmc_tensor_nelem(y));
    lmc_cuda_launched(c, "add");
}

static void cuda_scale(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float s) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(lmc_tensor_nelem(x) == lmc_tensor_nelem(y));
    lmc_cuda_scale(c->stream, y->data, x->data, s, lmc_tensor_nelem(y));
    lmc_cuda_launched(c, "scale");
}

static void cuda_rms_norm(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w, float eps,
                          float w_offset) {
    cuda_ctx *c = CTX(be);
    const int64_t d = x->ne[0];
    LMC_ASSERT(d == y->ne[0] && lmc_tensor_nrows(x) == lmc_tensor_nrows(y));
    LMC_ASSERT(!w || (lmc_tensor_nelem(w) % d == 0 && lmc_tensor_nelem(w) >= d && lmc_dtype_is_float(w->type)));
    lmc_cuda_rms_norm(c->stream, y->data, x->data, d, lmc_tensor_nrows(x), w ? w->data : NULL,
                      w ? (int)w->type : 0, w ? lmc_tensor_nelem(w) / d : 1, eps, w_offset);
    lmc_cuda_launched(c, "rms_norm");
}

static void cuda_add_rms_norm(lmc_backend *be, lmc_tensor *x, const lmc_tensor *r, lmc_tensor *y, const lmc_tensor *w,
                              float eps, float w_offset) {
    cuda_ctx *c = CTX(be);
    const int64_t d = x->ne[0];
    LMC_ASSERT(d == y->ne[0] && d == r->ne[0] && lmc_tensor_nrows(x) == lmc_tensor_nrows(y) &&
               lmc_tensor_nrows(x) == lmc_tensor_nrows(r) && is_contig(x) && is_contig(r) && is_contig(y));
    LMC_ASSERT(!w || (lmc_tensor_nelem(w) % d == 0 && lmc_tensor_nelem(w) >= d && lmc_dtype_is_float(w->type)));
    lmc_cuda_add_rms_norm(c->stream, x->data, r->data, y->data, d, lmc_tensor_nrows(x), w ? w->data : NULL,
                          w ? (int)w->type : 0, w ? lmc_tensor_nelem(w) / d : 1, eps, w_offset);
    lmc_cuda_launched(c, "add_rms_norm");
}

static void cuda_layer_norm(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w,
                            const lmc_tensor *b, float eps) {
    cuda_ctx *c = CTX(be);
    const int64_t d = x->ne[0];
    LMC_ASSERT(d == y->ne[0] && lmc_tensor_nrows(x) == lmc_tensor_nrows(y));
    LMC_ASSERT(!w || (lmc_tensor_nelem(w) % d == 0 && lmc_tensor_nelem(w) >= d && lmc_dtype_is_float(w->type)));
    LMC_ASSERT(!b || (lmc_tensor_nelem(b) % d == 0 && lmc_tensor_nelem(b) >= d && lmc_dtype_is_float(b->type)));
    lmc_cuda_layer_norm(c->stream, y->data, x->data, d, lmc_tensor_nrows(x), w ? w->data : NULL,
                        w ? (int)w->type : 0, w ? lmc_tensor_nelem(w) / d : 1, b ? b->data : NULL,
                        b ? (int)b->type : 0, b ? lmc_tensor_nelem(b) / d : 1, eps);
    lmc_cuda_launched(c, "layer_norm");
}

static void cuda_rope(lmc_backend *be, lmc_tensor *x, const lmc_tensor *pos, const lmc_rope_op *op) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(op->n_rot % 2 == 0 && op->n_rot <= x->ne[0] && op->n_rot <= 512 && lmc_tensor_nelem(pos) == x->ne[2]);
    LMC_ASSERT(op->inv_freq && op->inv_freq->type == LMC_DTYPE_F32 && op->inv_freq->ne[0] >= op->n_rot / 2);
    lmc_cuda_rope(c->stream, x->data, x->ne[0], x->ne[1], x->ne[2], pos->data, op->inv_freq->data, op->n_rot,
                  op->interleaved, op->attn_factor);
    lmc_cuda_launched(c, "rope");
}

static void cuda_rope_store(lmc_backend *be, lmc_tensor *q, lmc_tensor *k, const lmc_tensor *v, lmc_tensor *k_cache,
                            lmc_tensor *v_cache, const lmc_tensor *pos, const lmc_tensor *seq, const lmc_rope_op *op) {
    cuda_ctx *c = CTX(be);
    const int64_t hd = q->ne[0], n = q->ne[2];
    LMC_ASSERT(k->ne[0] == hd && k->ne[2] == n && v->ne[0] == hd * k->ne[1] && lmc_tensor_nrows(v) == n);
    LMC_ASSERT(op->n_rot % 2 == 0 && op->n_rot > 0 && op->n_rot <= hd && op->n_rot <= 512 && lmc_tensor_nelem(pos) >= n);
    LMC_ASSERT(op->inv_freq && op->inv_freq->type == LMC_DTYPE_F32 && op->inv_freq->ne[0] >= op->n_rot / 2);
    LMC_ASSERT(k_cache->ne[0] == v->ne[0] && v_cache->ne[0] == v->ne[0] && k_cache->type == LMC_DTYPE_F32 &&
               v_cache->type == LMC_DTYPE_F32 && k_cache->ne[1] == v_cache->ne[1] && k_cache->ne[2] == v_cache->ne[2]);
    LMC_ASSERT(is_contig(q) && is_contig(k) && is_contig(v) && lmc_tensor_nelem(seq) >= n);
    lmc_cuda_rope_store(c->stream, q->data, k->data, v->data, k_cache->data, v_cache->data, hd, q->ne[1], k->ne[1], n,
                        k_cache->ne[1], k_cache->ne[2], pos->data, seq->data, op->inv_freq->data, op->n_rot,
                        op->interleaved, op->attn_factor);
    lmc_cuda_launched(c, "rope_store");
}

static void cuda_kv_store(lmc_backend *be, lmc_tensor *cache, const lmc_tensor *kv, const lmc_tensor *pos,
                          const lmc_tensor *seq) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(cache->ne[0] == kv->ne[0] && cache->type == LMC_DTYPE_F32 && kv->type == LMC_DTYPE_F32);
    LMC_ASSERT(lmc_tensor_nelem(pos) >= lmc_tensor_nrows(kv) && lmc_tensor_nelem(seq) >= lmc_tensor_nrows(kv));
    lmc_cuda_kv_store(c->stream, cache->data, cache->ne[0], cache->ne[1], cache->ne[2], kv->data,
                      lmc_tensor_nrows(kv), pos->data, seq->data);
    lmc_cuda_launched(c, "kv_store");
}

/* LMC_CUDA_PREFETCH=0: attention leaves the next ops' weights alone (lmc_attn_op.next_w; A/B);
 * LMC_CUDA_PREFETCH_MB=n: at most n MB of them a layer (default 8: with rope and the cache stores in
 * the q/k/v product, attention's spare blocks start their prefetch during that product's last wave,
 * and 24 MB then cost Q4_0 decode 2%; 8 MB lost nothing without that fusion — docs/BENCHMARKS.md,
 * session 23). */
static int prefetch_on(void) {
    static int v = -1;
    if (v < 0) v = !(getenv("LMC_CUDA_PREFETCH") && !strcmp(getenv("LMC_CUDA_PREFETCH"), "0"));
    return v;
}
static size_t prefetch_budget(void) {
    static long v = -1;
    if (v < 0) {
        const char *e = getenv("LMC_CUDA_PREFETCH_MB");
        v = e ? atol(e) : 8;
        if (v < 0 || v > 4096) v = 8;
    }
    return (size_t)v << 20;
}

/* The device bytes of a bound weight (0 when t is not one: a view, a workspace). */
static size_t bound_bytes(const cuda_ctx *c, const lmc_tensor *t) {
    for (int i = 0; t->data && i < c->n_binds; i++)
        if (c->binds[i].dev == t->data && c->binds[i].type == (int)t->type && c->binds[i].ne0 == t->ne[0] &&
            c->binds[i].ne1 == lmc_tensor_nrows(t)) {
            size_t off;
            return dev_bytes(t, &off);
        }
    return 0;
}

/* About frac of bound weight t (bytes on the device) as regions of a, the part its decode product reads
 * first: all of it at frac 1; with its span known (lmc_cuda_gemv_span), the first rows of every warp's
 * range in each plane (repacked: codes, then scales); else every k-th piece of LMC_L2_PIECE bytes. */
static void prefetch_part(lmc_cuda_l2set *a, const lmc_tensor *t, size_t bytes, double frac) {
    const int64_t rows = lmc_tensor_nrows(t), span = lmc_cuda_gemv_span(t->data);
    if (frac >= 1.0) {
        if (a->n < LMC_CUDA_L2_REGIONS) a->r[a->n++] = (lmc_cuda_l2){t->data, bytes, bytes, bytes};
        return;
    }
    size_t so = 0, rb[2] = {bytes / (size_t)rows, 0};
    if (is_q_repacked(t->type)) {
        repacked_bytes(t->type, t->ne[0], rows, &so);
        rb[0] = (size_t)(t->type == LMC_DTYPE_Q8_0 ? t->ne[0] : t->ne[0] / 2);
        rb[1] = (size_t)(t->ne[0] / 32 * (is_mx(t->type) ? 1 : 2));
    }
    const int planes = so ? 2 : 1;
    if (a->n + planes > LMC_CUDA_L2_REGIONS) return;
    const int64_t take = span > 0 && span < rows ? (int64_t)(frac * (double)span + 0.5) : 0;
    if (take > 0) {
        for (int pl = 0; pl < planes; pl++)
            a->r[a->n++] = (lmc_cuda_l2){(const char *)t->data + (pl ? so : 0), (size_t)rows * rb[pl],
                                             (size_t)take * rb[pl], (size_t)span * rb[pl]};
        return;
    }
    const size_t stride = (size_t)((double)LMC_L2_PIECE / frac) / 16 * 16;
    if (span <= 0 && stride >= LMC_L2_PIECE) a->r[a->n++] = (lmc_cuda_l2){t->data, bytes, LMC_L2_PIECE, stride};
}

/* What attention's spare blocks prefetch (prefetch_budget a layer): o whole, or its first part; what the
 * budget leaves, as the first parts of gate and up (one fraction of both). */
static void prefetch_plan(const cuda_ctx *c, lmc_cuda_l2set *a, const lmc_tensor *const *w) {
    size_t left = prefetch_budget(), b[3];
    for (int i = 0; i < 3; i++) b[i] = w[i] ? bound_bytes(c, w[i]) : 0;
    if (b[0] && left) {
        prefetch_part(a, w[0], b[0], b[0] <= left ? 1.0 : (double)left / (double)b[0]);
        left = b[0] <= left ? left - b[0] : 0;
    }
    if (b[1] && b[2] && left) {
        const double f = (double)left / (double)(b[1] + b[2]);
        prefetch_part(a, w[1], b[1], f);
        prefetch_part(a, w[2], b[2], f);
    }
}

static void cuda_attention(lmc_backend *be, lmc_tensor *out, const lmc_tensor *q, const lmc_tensor *k_cache,
                           const lmc_tensor *v_cache, const lmc_tensor *pos, const lmc_tensor *seq,
                           const lmc_attn_op *op) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(op->n_kv_head > 0 && op->n_head % op->n_kv_head == 0 && op->head_dim <= 512);
    LMC_ASSERT(op->n_head / op->n_kv_head <= 16); /* one warp per query head of a group */
    LMC_ASSERT(lmc_tensor_nelem(q) == (int64_t)op->head_dim * op->n_head * lmc_tensor_nelem(pos));
    LMC_ASSERT(k_cache->ne[0] == (int64_t)op->head_dim * op->n_kv_head && k_cache->type == LMC_DTYPE_F32);
    LMC_ASSERT(v_cache->ne[0] == k_cache->ne[0] && v_cache->ne[1] == k_cache->ne[1]);
    LMC_ASSERT(!op->sinks || (op->sinks->type == LMC_DTYPE_F32 && lmc_tensor_nelem(op->sinks) == op->n_head));
    lmc_cuda_attn a = {
        .q = q->data, .k = k_cache->data, .v = v_cache->data, .out = out->data, .pos = pos->data, .seq = seq->data,
        .n = lmc_tensor_nelem(pos), .n_ctx = k_cache->ne[1], .n_seq = k_cache->ne[2] * k_cache->ne[3],
        .n_head = op->n_head, .n_kv_head = op->n_kv_head, .head_dim = op->head_dim,
        .scale = op->scale, .softcap = op->softcap, .window = op->window, .done = c->attn_done,
        .sinks = op->sinks ? op->sinks->data : NULL,
    };
    lmc_cuda_l2set pf;
    memset(&pf, 0, sizeof pf);
    if (prefetch_on()) prefetch_plan(c, &pf, op->next_w);
    size_t need = lmc_cuda_attn_scratch(&a);
    float *scratch = NULL;
    if (need) {
        scratch = lmc_cuda_ws(c, &c->ws_a, &c->ws_a_bytes, need * sizeof(float));
        if (!scratch) return;
    }
    lmc_cuda_attention(c->stream, &a, scratch, pf.n ? &pf : NULL);
    lmc_cuda_launched(c, "attention");
}

static void cuda_act_mul(lmc_backend *be, lmc_tensor *y, const lmc_tensor *gate, const lmc_tensor *up, lmc_act act) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(lmc_tensor_nelem(gate) == lmc_tensor_nelem(y) && lmc_tensor_nelem(up) == lmc_tensor_nelem(y));
    lmc_cuda_act_mul(c->stream, y->data, gate->data, up->data, lmc_tensor_nelem(y), (int)act);
    lmc_cuda_launched(c, "act_mul");
}

static void cuda_act(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, lmc_act act) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(lmc_tensor_nelem(x) == lmc_tensor_nelem(y));
    lmc_cuda_act(c->stream, y->data, x->data, lmc_tensor_nelem(y), (int)act);
    lmc_cuda_launched(c, "act");
}

static void cuda_softcap(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float cap) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(lmc_tensor_nelem(x) == lmc_tensor_nelem(y));
    lmc_cuda_softcap(c->stream, y->data, x->data, lmc_tensor_nelem(y), cap);
    lmc_cuda_launched(c, "softcap");
}

/* gpt-oss experts with gate and up apart (GGUF): elementwise, recordable (no host sync) */
static void cuda_glu_clamp_split(lmc_backend *be, lmc_tensor *y, const lmc_tensor *gate, const lmc_tensor *up, float alpha,
                                 float limit) {
    cuda_ctx *c = CTX(be);
    const int64_t n = lmc_tensor_nelem(y);
    LMC_ASSERT(gate->type == LMC_DTYPE_F32 && up->type == LMC_DTYPE_F32 && y->type == LMC_DTYPE_F32);
    LMC_ASSERT(lmc_tensor_nelem(gate) == n && lmc_tensor_nelem(up) == n);
    LMC_ASSERT(is_contig(gate) && is_contig(up) && is_contig(y));
    lmc_cuda_glu_clamp_split(c->stream, y->data, gate->data, up->data, n, alpha, limit);
    lmc_cuda_launched(c, "glu_clamp_split");
}

static void cuda_xielu(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const float p[4]) {
    cuda_ctx *c = CTX(be);
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && y->type == LMC_DTYPE_F32 && lmc_tensor_nelem(x) == lmc_tensor_nelem(y));
    lmc_cuda_xielu(c->stream, y->data, x->data, lmc_tensor_nelem(y), p);
    lmc_cuda_launched(c, "xielu");
}

/* Sampling reductions (cuda_sample.cu). Their workspace is the attention partials' (ws_a): both
 * are transient within one op on the one stream. */
static void cuda_argmax(lmc_backend *be, lmc_tensor *ids, const lmc_tensor *x) {
    cuda_ctx *c = CTX(be);
    const int64_t V = x->ne[0], n = lmc_tensor_nrows(x);
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && V >= 1 && x->nb[1] == (size_t)V * 4);
    LMC_ASSERT(ids->type == LMC_DTYPE_I32 && lmc_tensor_nelem(ids) == n);
    void *ws = lmc_cuda_ws(c, &c->ws_a, &c->ws_a_bytes, lmc_cuda_argmax_ws(V, n));
    if (!ws) return;
    lmc_cuda_argmax(c->stream, ids->data, x->data, V, n, ws);
    lmc_cuda_launched(c, "argmax");
}

static void cuda_topk(lmc_backend *be, lmc_tensor *ids, lmc_tensor *vals, lmc_tensor *stats, const lmc_tensor *x, int k,
                      float scale) {
    cuda_ctx *c = CTX(be);
    const int64_t V = x->ne[0], n = lmc_tensor_nrows(x);
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && V >= 1 && x->nb[1] == (size_t)V * 4 && k >= 1 && k <= 256);
    LMC_ASSERT(ids->type == LMC_DTYPE_I32 && ids->ne[0] == k && lmc_tensor_nrows(ids) == n);
    LMC_ASSERT(vals->type == LMC_DTYPE_F32 && vals->ne[0] == k && lmc_tensor_nrows(vals) == n);
    LMC_ASSERT(stats->type == LMC_DTYPE_F32 && stats->ne[0] == 4 && lmc_tensor_nrows(stats) == n);
    void *ws = lmc_cuda_ws(c, &c->ws_a, &c->ws_a_bytes, lmc_cuda_topk_ws(V, n, k));
    if (!ws) return;
    lmc_cuda_topk(c->stream, ids->data, vals->data, stats->data, x->data, V, n, k, scale, ws);
    lmc_cuda_launched(c, "topk");
}

static const lmc_backend_i cuda_iface = {
    .name = "cuda",
    .free = cuda_free,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .bind_weight = cuda_bind_weight,
    .unbind_weight = cuda_unbind_weight,
    .set = cuda_set,
    .get = cuda_get,
    .sync = cuda_sync,
    .get_rows = cuda_get_rows,
    .matmul = lmc_cuda_matmul,
    .matmul_n = cuda_matmul_n,
    .matmul_fused = cuda_matmul_fused,
    .add_bias = cuda_add_bias,
    .add = cuda_add,
    .scale = cuda_scale,
    .rms_norm = cuda_rms_norm,
    .add_rms_norm = cuda_add_rms_norm,
    .layer_norm = cuda_layer_norm,
    .rope = cuda_rope,
    .kv_store = cuda_kv_store,
    .rope_store = cuda_rope_store,
    .attention = cuda_attention,
    .act_mul = cuda_act_mul,
    .act = cuda_act,
    .softcap = cuda_softcap,
    .moe_route = lmc_cuda_op_moe_route,
    .matmul_id = lmc_cuda_op_matmul_id,
    .moe_sum = lmc_cuda_op_moe_sum,
    .add_bias_id = lmc_cuda_op_add_bias_id,
    .glu_clamp = lmc_cuda_op_glu_clamp,
    .glu_clamp_split = cuda_glu_clamp_split,
    .xielu = cuda_xielu,
    .argmax = cuda_argmax,
    .topk = cuda_topk,
    .graph_begin = lmc_cuda_graph_begin,
    .graph_end = lmc_cuda_graph_end,
    .graph_replay = lmc_cuda_graph_replay,
    .graph_free = lmc_cuda_graph_free,
};

lmc_status lmc_backend_cuda_init(lmc_backend **out, int device) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    if (device < 0 || device >= n) return lmc_fail(LMC_ERR_ARG, "CUDA device %d (this machine has %d)", device, n);
    e = cudaSetDevice(device);
    if (e != cudaSuccess) return lmc_fail(LMC_ERR_IO, "cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
    lmc_backend *be = calloc(1, sizeof *be);
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) { free(be); free(c); return lmc_fail(LMC_ERR_NOMEM, "cuda backend"); }
    c->device = device;
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(be); free(c);
        return lmc_fail(LMC_ERR_IO, "cudaStreamCreate: %s", cudaGetErrorString(e));
    }
    cublasStatus_t bs = cublasCreate(&c->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(c->stream);
        free(be); free(c);
        return lmc_fail(LMC_ERR_IO, "cublasCreate failed (%d)", (int)bs);
    }
    cublasSetStream(c->blas, c->stream);
    cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH); /* f32 products stay f32 (no TF32) */
    lmc_cuda_arena_init(&c->arena, device);
    lmc_cuda_arena_init(&c->tarena, device);
    /* a workspace of cuBLAS's own that never moves, so a recorded product may keep it */
    if (cudaMalloc(&c->blas_ws, LMC_CUDA_BLAS_WS) == cudaSuccess) cublasSetWorkspace(c->blas, c->blas_ws, LMC_CUDA_BLAS_WS);
    else c->blas_ws = NULL;
    const char *am = getenv("LMC_CUDA_ATTN_MERGE");
    if (!(am && strcmp(am, "0") == 0)) {
        if (cudaMalloc((void **)&c->attn_done, LMC_CUDA_ATTN_DONE * sizeof(unsigned)) != cudaSuccess ||
            cudaMemsetAsync(c->attn_done, 0, LMC_CUDA_ATTN_DONE * sizeof(unsigned), c->stream) != cudaSuccess) {
            cudaFree(c->attn_done);
            cudaGetLastError();
            c->attn_done = NULL;
        }
    }
#ifdef LMC_CUDA_TRACE
    trace_attach();
#endif
    const char *g = getenv("LMC_CUDA_GRAPHS");
    c->graphs_off = g && strcmp(g, "0") == 0;
    be->i = &cuda_iface;
    be->ctx = c;
    *out = be;
    return LMC_OK;
}
