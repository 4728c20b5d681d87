/* cuda_moe.c — the mixture-of-experts ops of the CUDA backend (backend.h:
 * moe_route, matmul_id, moe_sum).
 *
 * The device path (cuda_moe_dev.cu) routes every token on the GPU (every router kind) and runs
 * matmul_id of up to LMC_CUDA_MOE_MAX_SLOTS slots as one grouped product that reads the expert
 * ids from device memory and groups the slots there: nothing is copied to the host and the
 * stream is never waited for, so a MoE decode step is recorded and replayed like a dense one.
 * The host path, kept for larger batches (prefill: the per-expert products go through the dense
 * matmul, cuBLAS), MLX experts, more than LMC_CUDA_MOE_MAX_EXPERTS experts and for A/B
 * (LMC_CUDA_MOE_HOST=1 in the environment: every call), copies the router logits or the expert
 * ids to the host (a wait per call): routing runs the CPU reference there; matmul_id groups the
 * slots by expert, gathers each expert's inputs into one block on the device, runs the dense
 * matmul once per selected expert and scatters the outputs back. A host-path call while a step is
 * being recorded marks the recording bad (cuda_graph.c) instead of waiting. moe_sum is a device
 * kernel.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "core/quant.h"
#include "cuda_internal.h"

static int contig_f32(const lmc_tensor *t) {
    return t->nb[0] == lmc_dtype_size(t->type) && t->nb[1] == t->nb[0] * (size_t)t->ne[0];
}

/* Host scratch of at least n bytes (grown; NULL when out of memory). */
static void *host_ws(cuda_ctx *c, size_t n) {
    if (n <= c->host_bytes) return c->host;
    void *p = realloc(c->host, n);
    if (!p) return NULL;
    c->host = p;
    c->host_bytes = n;
    return p;
}

/* LMC_CUDA_MOE_HOST=1: every MoE op on the host path (read per call, for A/B in one process). */
static int moe_host(void) {
    const char *v = getenv("LMC_CUDA_MOE_HOST");
    return v && v[0] == '1';
}

/* A host-path op while recording: the recording is dropped and the step runs unrecorded. */
static int host_refused(cuda_ctx *c) {
    if (!c->capturing) return 0;
    c->capture_bad = 1;
    return 1;
}

/* Device → host copy that waits (errors noted). */
static void d2h(cuda_ctx *c, void *dst, const void *src, size_t n) {
    lmc_cuda_note(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream), "moe copy");
    lmc_cuda_note(c, cudaStreamSynchronize(c->stream), "moe copy");
}

void lmc_cuda_op_moe_route(lmc_backend *be, lmc_tensor *ids, lmc_tensor *weights, const lmc_tensor *logits,
                        const lmc_tensor *sel_bias, const lmc_moe_route_op *op) {
    cuda_ctx *c = CTX(be);
    const int64_t n = lmc_tensor_nrows(logits);
    const int E = op->n_expert, k = op->k;
    LMC_ASSERT(logits->type == LMC_DTYPE_F32 && logits->ne[0] == E && contig_f32(logits));
    LMC_ASSERT(ids->type == LMC_DTYPE_I32 && weights->type == LMC_DTYPE_F32);
    LMC_ASSERT(k >= 1 && k <= E && ids->ne[0] == k && weights->ne[0] == k);
    LMC_ASSERT(lmc_tensor_nrows(ids) == n && lmc_tensor_nrows(weights) == n);
    LMC_ASSERT(op->score != LMC_MOE_SPARSEMIXER || k == 2);
    LMC_ASSERT(!sel_bias || (sel_bias->type == LMC_DTYPE_F32 && lmc_tensor_nelem(sel_bias) == E));
    const lmc_tensor *es = op->expert_scale;
    LMC_ASSERT(!es || (es->type == LMC_DTYPE_F32 && lmc_tensor_nelem(es) == E));
    LMC_ASSERT(ids->nb[1] == (size_t)k * 4 && weights->nb[1] == (size_t)k * 4);
    if (!moe_host()) {
        const lmc_cuda_moe_route r = {op->score, E, k, op->norm, op->norm_min, op->norm_eps,
                                      op->n_group, op->topk_group, op->scale, op->jitter};
        if (lmc_cuda_moe_route_ok(&r)) {
            lmc_cuda_moe_route_dev(c->stream, ids->data, weights->data, logits->data,
                                   sel_bias ? sel_bias->data : NULL, es ? es->data : NULL, n, &r);
            lmc_cuda_launched(c, "moe_route");
            return;
        }
    }
    if (host_refused(c)) return;
    const size_t nl = (size_t)n * E, nk = (size_t)n * k;
    float *h = host_ws(c, (nl + 2 * (size_t)E + 2 * nk + 3 * (size_t)E + 16) * 4);
    if (!h) { lmc_cuda_note_msg(c, LMC_ERR_NOMEM, "moe_route: host scratch"); return; }
    float *hl = h, *hb = hl + nl, *hes = hb + E, *hw = hes + E, *scratch = hw + nk;
    int32_t *hid = (int32_t *)(void *)(scratch + 3 * (size_t)E);
    d2h(c, hl, logits->data, nl * 4);
    if (sel_bias) d2h(c, hb, sel_bias->data, (size_t)E * 4);
    /* the CPU rows read expert_scale through the op: a host copy in a host tensor */
    lmc_moe_route_op hop = *op;
    lmc_tensor hes_t;
    if (es) {
        d2h(c, hes, es->data, (size_t)E * 4);
        hes_t = *es;
        hes_t.data = hes;
        hop.expert_scale = &hes_t;
    }
    if (c->err) return;
    lmc_cpu_moe_route_rows(hid, hw, hl, sel_bias ? hb : NULL, &hop, 0, n, scratch);
    /* pageable sources: each copy has left the host buffer when the call returns */
    lmc_cuda_note(c, cudaMemcpyAsync(ids->data, hid, nk * 4, cudaMemcpyHostToDevice, c->stream), "moe_route");
    lmc_cuda_note(c, cudaMemcpyAsync(weights->data, hw, nk * 4, cudaMemcpyHostToDevice, c->stream), "moe_route");
}

/* matmul_id on the device path; 0 when it does not take these experts (nothing launched). */
static int device_matmul_id(cuda_ctx *c, lmc_tensor *y, const lmc_tensor *experts, int n_experts,
                            const lmc_tensor *x, const lmc_tensor *ids, int per_slot) {
    const int64_t k = ids->ne[0], S = k * lmc_tensor_nrows(ids);
    if (n_experts > LMC_CUDA_MOE_MAX_EXPERTS || S > LMC_CUDA_MOE_MAX_SLOTS) return 0;
    lmc_cuda_moe_w ew;
    ew.w = lmc_cuda_wdesc(&experts[0]);
    ew.n_expert = n_experts;
    for (int e = 0; e < n_experts; e++) {
        const lmc_tensor *t = &experts[e];
        if (!t->data || t->type != experts[0].type || t->ne[0] != ew.w.ne0 || lmc_tensor_nrows(t) != ew.w.ne1 ||
            t->nb[1] != experts[0].nb[1])
            return 0;
        ew.data[e] = t->data;
        ew.aux[e] = NULL;
        if (t->type == LMC_DTYPE_MXFP4_MLX) { /* exponents per expert, rows of one stride */
            const lmc_quant_mlx *q = t->aux;
            if (!q || q->scales.nb[1] != ew.w.mlx_snb1) return 0;
            ew.aux[e] = q->scales.data;
        }
    }
    if (!lmc_cuda_moe_mm_ok(&ew, x->data, S)) return 0;
    void *ws = NULL;
    if (S > LMC_CUDA_MOE_FUSED_SLOTS) {
        ws = lmc_cuda_ws(c, &c->ws_m, &c->ws_m_bytes, lmc_cuda_moe_mm_ws(n_experts, S));
        if (!ws) return 1; /* error noted (or the recording marked bad) */
    }
    lmc_cuda_moe_mm(c->stream, y->data, &ew, x->data, per_slot, ids->data, (int)k, S, ws);
    lmc_cuda_launched(c, "matmul_id");
    return 1;
}

void lmc_cuda_op_matmul_id(lmc_backend *be, lmc_tensor *y, const lmc_tensor *experts, int n_experts,
                        const lmc_tensor *x, const lmc_tensor *ids) {
    cuda_ctx *c = CTX(be);
    const int64_t k = ids->ne[0], n = lmc_tensor_nrows(ids), S = k * n;
    const int64_t in = experts[0].ne[0], out = experts[0].ne[1];
    LMC_ASSERT(n_experts >= 1 && ids->type == LMC_DTYPE_I32);
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && y->type == LMC_DTYPE_F32 && contig_f32(x) && contig_f32(y));
    LMC_ASSERT(x->ne[0] == in && (lmc_tensor_nrows(x) == n || lmc_tensor_nrows(x) == S));
    LMC_ASSERT(y->ne[0] == out && lmc_tensor_nrows(y) == S);
    const int per_slot = lmc_tensor_nrows(x) == S;
    LMC_ASSERT(ids->nb[1] == (size_t)k * 4);
    if (!moe_host() && device_matmul_id(c, y, experts, n_experts, x, ids, per_slot)) return;
    if (host_refused(c)) return;
    /* host: ids [S], counts and fill [E], slot tables src/dst [S] each */
    int32_t *h = host_ws(c, ((size_t)S * 3 + (size_t)n_experts * 2 + 16) * 4);
    if (!h) { lmc_cuda_note_msg(c, LMC_ERR_NOMEM, "matmul_id: host scratch"); return; }
    int32_t *hid = h, *src = hid + S, *dst = src + S, *count = dst + S, *fill = count + n_experts;
    d2h(c, hid, ids->data, (size_t)S * 4);
    if (c->err) return;
    memset(count, 0, (size_t)n_experts * 4);
    for (int64_t s = 0; s < S; s++) {
        if (hid[s] < 0 || hid[s] >= n_experts) {
            lmc_cuda_note_msg(c, LMC_ERR_RANGE, "matmul_id: expert id out of range");
            return;
        }
        count[hid[s]]++;
    }
    int32_t pos = 0;
    for (int e = 0; e < n_experts; e++) {
        fill[e] = pos;
        pos += count[e];
    }
    for (int64_t s = 0; s < S; s++) {
        const int32_t col = fill[hid[s]]++;
        src[col] = (int32_t)(per_slot ? s : s / k);
        dst[col] = (int32_t)s;
    }
    /* device: [src S][dst S] ints, then gathered inputs [in, S] and outputs [out, S] (256-byte aligned) */
    const size_t tab = ((size_t)S * 8 + 255) & ~(size_t)255, xb = ((size_t)S * in * 4 + 255) & ~(size_t)255;
    char *ws = lmc_cuda_ws(c, &c->ws_m, &c->ws_m_bytes, tab + xb + (size_t)S * out * 4);
    if (!ws) return;
    int32_t *d_src = (int32_t *)(void *)ws, *d_dst = d_src + S;
    float *xg = (float *)(void *)(ws + tab), *yg = (float *)(void *)(ws + tab + xb);
    lmc_cuda_note(c, cudaMemcpyAsync(d_src, src, (size_t)S * 8, cudaMemcpyHostToDevice, c->stream), "matmul_id");
    lmc_cuda_w xt = lmc_cuda_wdesc(x);
    lmc_cuda_get_rows(c->stream, xg, &xt, d_src, S, 1.0f);
    lmc_cuda_launched(c, "matmul_id gather");
    int64_t start = 0;
    for (int e = 0; e < n_experts; e++) {
        const int64_t cnt = count[e];
        if (!cnt) continue;
        LMC_ASSERT(experts[e].ne[0] == in && experts[e].ne[1] == out && experts[e].data);
        lmc_tensor xv = lmc_tensor_make(LMC_DTYPE_F32, in, cnt, 1, 1), yv = lmc_tensor_make(LMC_DTYPE_F32, out, cnt, 1, 1);
        xv.data = xg + (size_t)start * in;
        yv.data = yg + (size_t)start * out;
        lmc_cuda_matmul(be, &yv, &experts[e], &xv);
        start += cnt;
    }
    lmc_cuda_scatter_rows(c->stream, y->data, yg, d_dst, S, out);
    lmc_cuda_launched(c, "matmul_id scatter");
}

void lmc_cuda_op_moe_sum(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *weights,
                      const lmc_tensor *shared, const lmc_tensor *shared_gate) {
    cuda_ctx *c = CTX(be);
    const int64_t D = y->ne[0], n = lmc_tensor_nrows(y), k = weights->ne[0];
    LMC_ASSERT(y->type == LMC_DTYPE_F32 && x->type == LMC_DTYPE_F32 && weights->type == LMC_DTYPE_F32);
    LMC_ASSERT(x->ne[0] == D && lmc_tensor_nrows(x) == k * n && lmc_tensor_nrows(weights) == n);
    LMC_ASSERT(!shared || (shared->ne[0] == D && lmc_tensor_nrows(shared) == n));
    LMC_ASSERT(!shared_gate || lmc_tensor_nelem(shared_gate) == n);
    lmc_cuda_moe_sum(c->stream, y->data, x->data, weights->data, shared ? shared->data : NULL,
                     shared_gate ? shared_gate->data : NULL, D, (int)k, n);
    lmc_cuda_launched(c, "moe_sum");
}

void lmc_cuda_op_add_bias_id(lmc_backend *be, lmc_tensor *y, const lmc_tensor *b, const lmc_tensor *ids) {
    cuda_ctx *c = CTX(be);
    const int64_t D = y->ne[0], S = lmc_tensor_nelem(ids);
    LMC_ASSERT(y->type == LMC_DTYPE_F32 && b->type == LMC_DTYPE_F32 && ids->type == LMC_DTYPE_I32);
    LMC_ASSERT(b->ne[0] == D && lmc_tensor_nrows(y) == S && y->nb[1] == (size_t)D * 4 && b->nb[1] == (size_t)D * 4);
    lmc_cuda_add_bias_id(c->stream, y->data, b->data, ids->data, D, S);
    lmc_cuda_launched(c, "add_bias_id");
}

void lmc_cuda_op_glu_clamp(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float alpha, float limit) {
    cuda_ctx *c = CTX(be);
    const int64_t D = y->ne[0], n = lmc_tensor_nrows(y);
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && y->type == LMC_DTYPE_F32 && x->ne[0] == 2 * D && lmc_tensor_nrows(x) == n);
    LMC_ASSERT(x->nb[1] == (size_t)D * 8 && y->nb[1] == (size_t)D * 4 && x->data != y->data);
    lmc_cuda_glu_clamp(c->stream, y->data, x->data, D, n, alpha, limit);
    lmc_cuda_launched(c, "glu_clamp");
}
