/* tp.c — tensor parallelism (see tp.h): the shard plan, shard models built
 * from views of the full model's host weights, the host all-reduce, and the
 * thread binding behind the forward's reduce points.
 *
 * A shard is an lmc_model (the first member of struct shard) whose config
 * carries the per-rank head and intermediate counts, so the ordinary forward
 * runs it unchanged; the shard owns its layer/expert tables, its MLX side
 * data views, packed host copies (non-cpu backends) and its bindings.
 */
#include "tp.h"

#include "core/quant.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- views ----------------------------------------------------------------------------------- */

/* Elements per indivisible unit along a row: the block, or the MLX group. */
static int64_t unit_elems(const lmc_tensor *w) {
    if (lmc_dtype_is_mlx(w->type)) return w->aux ? ((const lmc_quant_mlx *)w->aux)->group_size : 0;
    return lmc_dtype_block_elems(w->type);
}

static int is_2d(const lmc_tensor *w) { return w->ne[2] == 1 && w->ne[3] == 1; }

lmc_status lmc_tp_view_cols(const lmc_tensor *w, int64_t c0, int64_t n, lmc_tensor *out, lmc_quant_mlx *aux_out) {
    const int64_t u = unit_elems(w);
    if (w->type == LMC_DTYPE_MXFP4_MLX)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism does not split MXFP4_MLX weights");
    if (!is_2d(w) || c0 < 0 || n <= 0 || c0 + n > w->ne[0])
        return lmc_fail(LMC_ERR_ARG, "columns [%lld, %lld) of a weight with %lld", (long long)c0, (long long)(c0 + n),
                        (long long)w->ne[0]);
    if (u <= 0 || c0 % u || n % u)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "splitting a %s weight at column %lld (width %lld) would cut a %lld-element "
                        "block", lmc_dtype_name(w->type), (long long)c0, (long long)n, (long long)u);
    *out = *w;
    out->ne[0] = n;
    out->data = (char *)w->data + (c0 ? lmc_dtype_row_bytes(w->type, c0) : 0);
    if (lmc_dtype_is_mlx(w->type)) {
        const lmc_quant_mlx *q = w->aux;
        *aux_out = *q;
        LMC_TRY(lmc_tp_view_cols(&q->scales, c0 / u, n / u, &aux_out->scales, NULL));
        LMC_TRY(lmc_tp_view_cols(&q->biases, c0 / u, n / u, &aux_out->biases, NULL));
        out->aux = aux_out;
    }
    return LMC_OK;
}

lmc_status lmc_tp_view_rows(const lmc_tensor *w, int64_t r0, int64_t n, lmc_tensor *out, lmc_quant_mlx *aux_out) {
    if (w->type == LMC_DTYPE_MXFP4_MLX)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism does not split MXFP4_MLX weights");
    if (!is_2d(w) || r0 < 0 || n <= 0 || r0 + n > w->ne[1])
        return lmc_fail(LMC_ERR_ARG, "rows [%lld, %lld) of a weight with %lld", (long long)r0, (long long)(r0 + n),
                        (long long)w->ne[1]);
    *out = *w;
    out->ne[1] = n;
    out->nb[2] = out->nb[3] = w->nb[1] * (size_t)n;
    out->data = (char *)w->data + (size_t)r0 * w->nb[1];
    if (lmc_dtype_is_mlx(w->type)) {
        const lmc_quant_mlx *q = w->aux;
        *aux_out = *q;
        LMC_TRY(lmc_tp_view_rows(&q->scales, r0, n, &aux_out->scales, NULL));
        LMC_TRY(lmc_tp_view_rows(&q->biases, r0, n, &aux_out->biases, NULL));
        out->aux = aux_out;
    }
    return LMC_OK;
}

/* Elements [e0, e0 + n) of a plain-typed vector (a bias, norm weights), seen as [ne0, n / ne0]. */
static lmc_tensor view_elems(const lmc_tensor *t, int64_t e0, int64_t n, int64_t ne0) {
    lmc_tensor v = lmc_tensor_make(t->type, ne0, n / ne0, 1, 1);
    v.data = (char *)t->data + (size_t)e0 * lmc_dtype_size(t->type);
    return v;
}

/* ---- the plan -------------------------------------------------------------------------------- */

/* A row-parallel split of w into pieces of n columns must fall on block boundaries. */
static lmc_status check_cols(const lmc_tensor *w, int64_t n, const char *what, int il) {
    if (!w->data) return LMC_OK;
    const int64_t u = unit_elems(w);
    if (u > 0 && n % u == 0) return LMC_OK;
    return lmc_fail(LMC_ERR_UNSUPPORTED, "layer %d %s (%s): a tensor-parallel slice of %lld input columns would cut "
                    "its %lld-element blocks", il, what, lmc_dtype_name(w->type), (long long)n, (long long)u);
}

static int divides(int64_t a, int n) { return n > 0 && a % n == 0; }

lmc_status lmc_tp_plan_make(const lmc_model *m, int N, lmc_tp_plan *p) {
    const lmc_config *c = &m->cfg;
    memset(p, 0, sizeof *p);
    if (N < 1 || N > LMC_TP_MAX_RANKS) return lmc_fail(LMC_ERR_ARG, "--tp %d: expected 1..%d ranks", N, LMC_TP_MAX_RANKS);
    if (m->g4) return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: the targeted gemma4 port does not split yet");
    const lmc_arch *ar = m->profile.arch;
    if (ar->qk_norm == LMC_QK_NORM_FULL)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: %s normalizes q and k over all heads at once "
                        "(that would need one more all-reduce per layer)", c->model_type);
    for (int il = 0; il < c->n_layers; il++)
        if (m->layers[il].sinks.data || (m->layers[il].moe && m->layers[il].moe->gate_up))
            return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: %s's attention sinks and interleaved experts with "
                            "biases do not split yet", c->model_type);
    const int H = c->n_heads, KV = c->n_kv_heads;
    if (!divides(H, N))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: n_heads %d is not divisible by --tp %d", H, N);
    p->n_ranks = N;
    p->n_heads = H / N;
    if (divides(KV, N)) {
        p->n_kv_heads = KV / N;
    } else if (KV > 0 && divides(N, KV)) {
        p->n_kv_heads = 1; /* ranks N/KV at a time share (replicate) one KV head */
        p->kv_replicated = 1;
    } else {
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: n_kv_heads %d neither divides into nor is a divisor "
                        "of --tp %d", KV, N);
    }
    int has_dense = 0, has_moe = 0;
    for (int il = 0; il < c->n_layers; il++) {
        if (m->layers[il].moe) has_moe = 1;
        else has_dense = 1;
    }
    p->intermediate = c->intermediate_size;
    p->moe_intermediate = c->moe_intermediate_size;
    p->shared_intermediate = c->shared_intermediate_size;
    int64_t eI = 0, sI = 0;
    if (has_moe) {
        eI = lmc_moe_expert_size(c, ar);
        sI = lmc_moe_shared_size(c, ar);
        if (!divides(eI, N))
            return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: the expert intermediate size %lld is not divisible "
                            "by --tp %d", (long long)eI, N);
        if (sI && !divides(sI, N))
            return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: the shared-expert intermediate size %lld is not "
                            "divisible by --tp %d", (long long)sI, N);
    }
    if (has_dense && !divides(c->intermediate_size, N))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: intermediate_size %d is not divisible by --tp %d",
                        c->intermediate_size, N);
    /* divide the config fields the sizes come from (those that do not divide are not used) */
    if (divides(c->intermediate_size, N)) p->intermediate = c->intermediate_size / N;
    if (divides(c->moe_intermediate_size, N)) p->moe_intermediate = c->moe_intermediate_size / N;
    if (divides(c->shared_intermediate_size, N)) p->shared_intermediate = c->shared_intermediate_size / N;
    if (has_moe) {
        lmc_config sc = *c;
        sc.intermediate_size = p->intermediate;
        sc.moe_intermediate_size = p->moe_intermediate;
        sc.shared_intermediate_size = p->shared_intermediate;
        if (lmc_moe_expert_size(&sc, ar) * N != eI || lmc_moe_shared_size(&sc, ar) * N != sI)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: the expert sizes of %s do not split over %d ranks",
                            c->model_type, N);
    }
    /* row-parallel slices on block boundaries; per-head q/k norm weights split by head */
    const int64_t hd = c->head_dim;
    for (int il = 0; il < c->n_layers; il++) {
        const lmc_layer *L = &m->layers[il];
        LMC_TRY(check_cols(&L->wo, p->n_heads * hd, "o_proj", il));
        if (!L->moe) {
            LMC_TRY(check_cols(&L->w_down, p->intermediate, "down_proj", il));
        } else {
            for (int e = 0; e < c->n_experts; e++) LMC_TRY(check_cols(&L->moe->down[e], eI / N, "expert down_proj", il));
            LMC_TRY(check_cols(&L->moe->sh_down, sI / N, "shared expert down_proj", il));
        }
        const lmc_tensor *nq[4] = {&L->q_norm, &L->q_norm_b, &L->k_norm, &L->k_norm_b};
        for (int k = 0; k < 4; k++) {
            const int64_t ne = nq[k]->data ? lmc_tensor_nelem(nq[k]) : 0, heads = k < 2 ? H : KV;
            if (ne && ne != hd && ne != heads * hd)
                return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism: layer %d q/k norm weights of %lld elements "
                                "do not split by head", il, (long long)ne);
        }
    }
    return LMC_OK;
}

/* ---- shards ---------------------------------------------------------------------------------- */

typedef struct shard {
    lmc_model m;                /* first: what the forward sees */
    const lmc_model *full;      /* borrowed */
    int rank, in_place;         /* in_place: a cpu backend reads the full model's host memory directly */
    lmc_moe_layer *moe;         /* [n_layers] */
    lmc_tensor *moe_views;      /* [n_layers · 3 · E] */
    lmc_quant_mlx *aux;         /* [cap_aux] MLX side data of sliced views (host view, then bound copy) */
    int n_aux, cap_aux;
    void **bound;               /* [n_bound] lmc_tensor * bound on the rank's backend (unbound at free) */
    int n_bound, cap_bound;
    void **packs;               /* [n_packs] host copies of strided views (non-cpu backends) */
    int n_packs, cap_packs;
} shard;

/* Room for one more entry in a pointer table. */
static lmc_status grow(void ***arr, int *cap, int n) {
    if (n < *cap) return LMC_OK;
    int nc = *cap ? *cap * 2 : 64;
    void **p = realloc(*arr, (size_t)nc * sizeof *p);
    if (!p) return lmc_fail(LMC_ERR_NOMEM, "tensor-parallel shard tables");
    *arr = p;
    *cap = nc;
    return LMC_OK;
}

static lmc_quant_mlx *new_aux(shard *s) {
    return s->n_aux < s->cap_aux ? &s->aux[s->n_aux++] : NULL;
}

/* A contiguous host copy of a (possibly strided) plain-or-block 2-D view, owned by the shard. */
static lmc_status pack(shard *s, const lmc_tensor *view, lmc_tensor *out) {
    const lmc_tensor vv = *view, *v = &vv; /* out may be view */
    *out = lmc_tensor_make(v->type, v->ne[0], v->ne[1], v->ne[2], v->ne[3]);
    const size_t rb = lmc_dtype_row_bytes(v->type, v->ne[0]), nrows = (size_t)lmc_tensor_nrows(v);
    char *buf = malloc(rb * nrows + 1);
    if (!buf) return lmc_fail(LMC_ERR_NOMEM, "packing a tensor-parallel slice of %zu bytes", rb * nrows);
    LMC_TRY(grow(&s->packs, &s->cap_packs, s->n_packs));
    s->packs[s->n_packs++] = buf;
    for (size_t r = 0; r < nrows; r++) memcpy(buf + r * rb, (const char *)v->data + r * v->nb[1], rb);
    out->data = buf;
    out->aux = v->aux;
    return LMC_OK;
}

static lmc_status bind_host(shard *s, lmc_tensor *dst) {
    lmc_backend *be = s->m.be;
    const void *host = dst->data;
    LMC_TRY(grow(&s->bound, &s->cap_bound, s->n_bound));
    LMC_TRY(be->i->bind_weight(be, dst, host));
    s->bound[s->n_bound++] = dst;
    s->m.weight_bytes += lmc_tensor_nbytes(dst);
    return LMC_OK;
}

/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of a BF16P weight (the cpu backend's packing of a BF16
 * matrix of the full model, core/quant.h) as a contiguous BF16 copy the shard owns: the layout has no
 * row or column views. The values are BF16's, so the round trip through f32 is exact. */
static lmc_status bf16p_slice(shard *s, const lmc_tensor *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                              lmc_tensor *out) {
    uint16_t *buf = malloc((size_t)nr * (size_t)nc * 2 + 1);
    float *row = malloc((size_t)w->ne[0] * sizeof *row);
    lmc_status st = buf && row ? grow(&s->packs, &s->cap_packs, s->n_packs) : lmc_fail(LMC_ERR_NOMEM, "a BF16 slice");
    if (st < 0) {
        free(buf);
        free(row);
        return st;
    }
    s->packs[s->n_packs++] = buf;
    for (int64_t r = 0; r < nr; r++) {
        lmc_tensor_row_to_f32(w, r0 + r, row);
        for (int64_t c = 0; c < nc; c++) buf[(size_t)r * (size_t)nc + (size_t)c] = lmc_f32_to_bf16(row[c0 + c]);
    }
    free(row);
    *out = lmc_tensor_make(LMC_DTYPE_BF16, nc, nr, 1, 1);
    out->data = buf;
    return LMC_OK;
}

/* Make dst the rank's copy of host view v (its data NULL: absent). */
static lmc_status place(shard *s, lmc_tensor *dst, const lmc_tensor *v) {
    memset(dst, 0, sizeof *dst);
    if (!v->data) return LMC_OK;
    lmc_tensor t = *v;
    if (t.type == LMC_DTYPE_BF16P && !s->in_place) LMC_TRY(bf16p_slice(s, v, 0, v->ne[1], 0, v->ne[0], &t)); /* devices */
    if (lmc_dtype_is_mlx(v->type)) {
        /* the side data goes first: the view's aux gets the rank's copies */
        const lmc_quant_mlx *q = v->aux;
        lmc_quant_mlx *a = new_aux(s);
        if (!a) return lmc_fail(LMC_ERR_NOMEM, "too many quantized tensor-parallel views");
        a->group_size = q->group_size;
        LMC_TRY(place(s, &a->scales, &q->scales));
        LMC_TRY(place(s, &a->biases, &q->biases));
        t.aux = a;
    }
    const int strided = is_2d(&t) && t.nb[1] != lmc_dtype_row_bytes(t.type, t.ne[0]);
    if (strided && !s->in_place) {
        const void *aux = t.aux;
        LMC_TRY(pack(s, &t, &t));
        t.aux = aux;
    }
    *dst = t;
    return bind_host(s, dst);
}

static lmc_status rows_of(shard *s, lmc_tensor *dst, const lmc_tensor *w, int64_t r0, int64_t n) {
    memset(dst, 0, sizeof *dst);
    if (!w->data) return LMC_OK;
    lmc_tensor v;
    if (w->type == LMC_DTYPE_BF16P) {
        LMC_TRY(bf16p_slice(s, w, r0, n, 0, w->ne[0], &v));
        return place(s, dst, &v);
    }
    lmc_quant_mlx *a = lmc_dtype_is_mlx(w->type) ? new_aux(s) : NULL;
    if (lmc_dtype_is_mlx(w->type) && !a) return lmc_fail(LMC_ERR_NOMEM, "too many quantized tensor-parallel views");
    LMC_TRY(lmc_tp_view_rows(w, r0, n, &v, a));
    return place(s, dst, &v);
}

static lmc_status cols_of(shard *s, lmc_tensor *dst, const lmc_tensor *w, int64_t c0, int64_t n) {
    memset(dst, 0, sizeof *dst);
    if (!w->data) return LMC_OK;
    lmc_tensor v;
    if (w->type == LMC_DTYPE_BF16P) {
        LMC_TRY(bf16p_slice(s, w, 0, w->ne[1], c0, n, &v));
        return place(s, dst, &v);
    }
    lmc_quant_mlx *a = lmc_dtype_is_mlx(w->type) ? new_aux(s) : NULL;
    if (lmc_dtype_is_mlx(w->type) && !a) return lmc_fail(LMC_ERR_NOMEM, "too many quantized tensor-parallel views");
    LMC_TRY(lmc_tp_view_cols(w, c0, n, &v, a));
    return place(s, dst, &v);
}

/* Elements [e0, e0 + n) of a vector, seen as [ne0, n / ne0]. */
static lmc_status elems_of(shard *s, lmc_tensor *dst, const lmc_tensor *t, int64_t e0, int64_t n, int64_t ne0) {
    memset(dst, 0, sizeof *dst);
    if (!t->data) return LMC_OK;
    LMC_ASSERT(!lmc_dtype_is_quant(t->type) && e0 + n <= lmc_tensor_nelem(t));
    lmc_tensor v = view_elems(t, e0, n, ne0);
    return place(s, dst, &v);
}

/* q/k norm weights: shared over heads ([hd]) replicate; per-head ones ([hd, heads]) split by head. */
static lmc_status norm_of(shard *s, lmc_tensor *dst, const lmc_tensor *t, int64_t hd, int64_t h0, int64_t nh) {
    if (t->data && lmc_tensor_nelem(t) != hd) return elems_of(s, dst, t, h0 * hd, nh * hd, hd);
    return place(s, dst, t);
}

static lmc_status shard_layer(shard *s, const lmc_tp_plan *p, int il) {
    const lmc_model *f = s->full;
    const lmc_config *c = &f->cfg;
    const lmc_layer *F = &f->layers[il];
    lmc_layer *L = &s->m.layers[il];
    const int r = s->rank;
    const int64_t hd = c->head_dim, Hr = p->n_heads, KVr = p->n_kv_heads;
    const int64_t h0 = r * Hr;
    /* KV heads: a contiguous block per rank, or (replicated) the head of this rank's q heads */
    const int64_t kv0 = p->kv_replicated ? h0 / (c->n_heads / c->n_kv_heads) : r * KVr;
    memcpy(L->xielu, F->xielu, sizeof L->xielu);
    L->window = F->window;
    L->rope = F->rope;
    /* replicated norms */
    const lmc_tensor *rep_src[] = {&F->attn_norm, &F->attn_norm_b, &F->attn_post_norm, &F->attn_post_norm_b,
                                   &F->ffn_norm, &F->ffn_norm_b, &F->ffn_post_norm, &F->ffn_post_norm_b};
    lmc_tensor *rep_dst[] = {&L->attn_norm, &L->attn_norm_b, &L->attn_post_norm, &L->attn_post_norm_b,
                             &L->ffn_norm, &L->ffn_norm_b, &L->ffn_post_norm, &L->ffn_post_norm_b};
    for (size_t k = 0; k < sizeof rep_src / sizeof rep_src[0]; k++) LMC_TRY(place(s, rep_dst[k], rep_src[k]));
    /* attention: column-parallel q/k/v, row-parallel o (its bias once, on rank 0) */
    LMC_TRY(rows_of(s, &L->wq, &F->wq, h0 * hd, Hr * hd));
    LMC_TRY(rows_of(s, &L->wk, &F->wk, kv0 * hd, KVr * hd));
    LMC_TRY(rows_of(s, &L->wv, &F->wv, kv0 * hd, KVr * hd));
    LMC_TRY(elems_of(s, &L->bq, &F->bq, h0 * hd, Hr * hd, Hr * hd));
    LMC_TRY(elems_of(s, &L->bk, &F->bk, kv0 * hd, KVr * hd, KVr * hd));
    LMC_TRY(elems_of(s, &L->bv, &F->bv, kv0 * hd, KVr * hd, KVr * hd));
    LMC_TRY(cols_of(s, &L->wo, &F->wo, h0 * hd, Hr * hd));
    if (r == 0) LMC_TRY(place(s, &L->bo, &F->bo));
    LMC_TRY(norm_of(s, &L->q_norm, &F->q_norm, hd, h0, Hr));
    LMC_TRY(norm_of(s, &L->q_norm_b, &F->q_norm_b, hd, h0, Hr));
    LMC_TRY(norm_of(s, &L->k_norm, &F->k_norm, hd, kv0, KVr));
    LMC_TRY(norm_of(s, &L->k_norm_b, &F->k_norm_b, hd, kv0, KVr));
    if (!F->moe) {
        /* MLP: gate/up rows, down columns (its bias once) */
        const int64_t Ir = p->intermediate, i0 = r * Ir;
        LMC_TRY(rows_of(s, &L->w_gate, &F->w_gate, i0, Ir));
        LMC_TRY(rows_of(s, &L->w_up, &F->w_up, i0, Ir));
        LMC_TRY(cols_of(s, &L->w_down, &F->w_down, i0, Ir));
        LMC_TRY(elems_of(s, &L->b_gate, &F->b_gate, i0, Ir, Ir));
        LMC_TRY(elems_of(s, &L->b_up, &F->b_up, i0, Ir, Ir));
        if (r == 0) LMC_TRY(place(s, &L->b_down, &F->b_down));
        return LMC_OK;
    }
    /* MoE: router replicated, each expert's intermediate split like the MLP's */
    const lmc_moe_layer *FM = F->moe;
    lmc_moe_layer *M = &s->moe[il];
    L->moe = M;
    M->n_expert_params = FM->n_expert_params;
    const int E = c->n_experts;
    const int64_t Ie = lmc_moe_expert_size(&s->m.cfg, s->m.profile.arch), e0 = r * Ie;
    const int64_t Is = lmc_moe_shared_size(&s->m.cfg, s->m.profile.arch), s0 = r * Is;
    LMC_TRY(place(s, &M->router, &FM->router));
    LMC_TRY(place(s, &M->sel_bias, &FM->sel_bias));
    lmc_tensor *views = s->moe_views + (size_t)il * 3 * E;
    M->gate = FM->gate ? views : NULL;
    M->up = views + E;
    M->down = views + 2 * E;
    for (int e = 0; e < E; e++) {
        if (FM->gate) LMC_TRY(rows_of(s, &M->gate[e], &FM->gate[e], e0, Ie));
        LMC_TRY(rows_of(s, &M->up[e], &FM->up[e], e0, Ie));
        LMC_TRY(cols_of(s, &M->down[e], &FM->down[e], e0, Ie));
    }
    if (FM->sh_down.data) {
        LMC_TRY(rows_of(s, &M->sh_gate, &FM->sh_gate, s0, Is));
        LMC_TRY(rows_of(s, &M->sh_up, &FM->sh_up, s0, Is));
        LMC_TRY(cols_of(s, &M->sh_down, &FM->sh_down, s0, Is));
        LMC_TRY(elems_of(s, &M->sh_b_gate, &FM->sh_b_gate, s0, Is, Is));
        LMC_TRY(elems_of(s, &M->sh_b_up, &FM->sh_b_up, s0, Is, Is));
        if (r == 0) LMC_TRY(place(s, &M->sh_b_down, &FM->sh_b_down));
        LMC_TRY(place(s, &M->sh_router, &FM->sh_router));
    }
    return LMC_OK;
}

/* Upper bound on the MLX side-data views one shard makes (two per sliced or placed MLX weight). */
static int aux_needed(const lmc_model *f) {
    const int per_layer = 16 + 2 * 3 * (f->cfg.n_experts > 0 ? f->cfg.n_experts : 0) + 16;
    return 2 * (per_layer * f->cfg.n_layers + 16);
}

lmc_status lmc_tp_shard_init(const lmc_model *full, const lmc_tp_plan *p, int rank, lmc_backend *be, lmc_model **out) {
    *out = NULL;
    if (rank < 0 || rank >= p->n_ranks) return lmc_fail(LMC_ERR_ARG, "rank %d of %d", rank, p->n_ranks);
    if (strcmp(full->be->i->name, "cpu") != 0)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism shards a model loaded on the host (cpu backend), "
                        "not on %s", full->be->i->name);
    shard *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "tensor-parallel shard");
    const lmc_config *c = &full->cfg;
    s->m = *full;                  /* config, profile and scalars; every tensor is replaced below */
    s->m.be = be;
    s->m.weights = NULL;           /* the full model owns the checkpoint */
    s->m.owned = NULL;
    s->m.n_owned = s->m.cap_owned = 0;
    s->m.mlx_aux = NULL;
    s->m.n_mlx_aux = s->m.cap_mlx_aux = 0;
    s->m.moe_layers = NULL;
    s->m.moe_views = NULL;
    s->m.weight_bytes = 0;
    s->m.cfg.n_heads = p->n_heads;
    s->m.cfg.n_kv_heads = p->n_kv_heads;
    s->m.cfg.intermediate_size = p->intermediate;
    s->m.cfg.moe_intermediate_size = p->moe_intermediate;
    s->m.cfg.shared_intermediate_size = p->shared_intermediate;
    s->full = full;
    s->rank = rank;
    s->in_place = strcmp(be->i->name, "cpu") == 0 && !p->pack_slices;
    s->cap_aux = aux_needed(full);
    s->aux = calloc((size_t)s->cap_aux, sizeof *s->aux);
    s->m.layers = calloc((size_t)c->n_layers, sizeof *s->m.layers);
    lmc_status st = s->aux && s->m.layers ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "tensor-parallel shard");
    if (st >= 0 && full->moe_layers) {
        s->moe = calloc((size_t)c->n_layers, sizeof *s->moe);
        s->moe_views = calloc((size_t)c->n_layers * 3 * (size_t)c->n_experts, sizeof *s->moe_views);
        if (!s->moe || !s->moe_views) st = lmc_fail(LMC_ERR_NOMEM, "tensor-parallel expert tables");
        s->m.moe_layers = s->moe; /* the forward state plans MoE scratch when the model has these */
        s->m.moe_views = s->moe_views;
    }
    /* replicated: embeddings, final norm, positions, rope tables; the LM head on rank 0 only */
    const lmc_tensor *rep_src[] = {&full->tok_embd, &full->out_norm, &full->out_norm_b, &full->pos_embd,
                                   &full->rope_freq[0][0], &full->rope_freq[0][1], &full->rope_freq[1][0],
                                   &full->rope_freq[1][1]};
    lmc_tensor *rep_dst[] = {&s->m.tok_embd, &s->m.out_norm, &s->m.out_norm_b, &s->m.pos_embd,
                             &s->m.rope_freq[0][0], &s->m.rope_freq[0][1], &s->m.rope_freq[1][0],
                             &s->m.rope_freq[1][1]};
    for (size_t k = 0; st >= 0 && k < sizeof rep_src / sizeof rep_src[0]; k++) st = place(s, rep_dst[k], rep_src[k]);
    memset(&s->m.lm_head, 0, sizeof s->m.lm_head);
    memset(&s->m.lm_head_b, 0, sizeof s->m.lm_head_b);
    if (st >= 0 && rank == 0) st = place(s, &s->m.lm_head, &full->lm_head);
    if (st >= 0 && rank == 0) st = place(s, &s->m.lm_head_b, &full->lm_head_b);
    for (int il = 0; st >= 0 && il < c->n_layers; il++) st = shard_layer(s, p, il);
    if (st >= 0) st = be->i->sync(be);
    if (st < 0) {
        lmc_tp_shard_free(&s->m);
        return lmc_fail_context(st, "tensor-parallel shard %d of %d", rank, p->n_ranks);
    }
    *out = &s->m;
    return LMC_OK;
}

void lmc_tp_shard_free(lmc_model *m) {
    if (!m) return;
    shard *s = (shard *)m; /* shards are only made by lmc_tp_shard_init */
    for (int i = s->n_bound - 1; i >= 0; i--) m->be->i->unbind_weight(m->be, (lmc_tensor *)s->bound[i]);
    for (int i = 0; i < s->n_packs; i++) free(s->packs[i]);
    free(s->packs);
    free(s->bound);
    free(s->aux);
    free(s->moe);
    free(s->moe_views);
    free(m->layers);
    free(s);
}

/* ---- host all-reduce --------------------------------------------------------------------------- */

typedef struct host_comm {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, generation, aborted;
    float *src[LMC_TP_MAX_RANKS];     /* each rank's buffer for the current reduce (host) */
    int64_t count[LMC_TP_MAX_RANKS];
    unsigned calls[LMC_TP_MAX_RANKS]; /* reduces done per rank: the result buffer alternates */
    float *result[2];
    int64_t cap[2];
    float *stage[LMC_TP_MAX_RANKS];   /* host copies of non-cpu tensors */
    int64_t stage_cap[LMC_TP_MAX_RANKS];
} host_comm;

/* All ranks meet; -1 when the group was aborted. */
static int host_barrier(host_comm *h) {
    pthread_mutex_lock(&h->mu);
    if (h->aborted) { pthread_mutex_unlock(&h->mu); return -1; }
    const int gen = h->generation;
    if (++h->arrived == h->n) {
        h->arrived = 0;
        h->generation++;
        pthread_cond_broadcast(&h->cv);
    } else {
        while (gen == h->generation && !h->aborted) pthread_cond_wait(&h->cv, &h->mu);
    }
    const int ab = h->aborted;
    pthread_mutex_unlock(&h->mu);
    return ab ? -1 : 0;
}

static void host_abort(lmc_tp_comm *c) {
    host_comm *h = c->ctx;
    pthread_mutex_lock(&h->mu);
    h->aborted = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static lmc_status host_thread_init(lmc_tp_comm *c, int rank) { return LMC_OK; }

static lmc_status host_all_reduce(lmc_tp_comm *c, int rank, lmc_backend *be, lmc_tensor *y) {
    host_comm *h = c->ctx;
    LMC_ASSERT(rank >= 0 && rank < h->n && y->type == LMC_DTYPE_F32);
    const int64_t n = lmc_tensor_nelem(y);
    const size_t bytes = (size_t)n * sizeof(float);
    const int cpu = strcmp(be->i->name, "cpu") == 0;
    lmc_status st = be->i->sync(be);
    float *buf = y->data;
    if (st >= 0 && !cpu) {
        if (h->stage_cap[rank] < n) {
            float *p = realloc(h->stage[rank], bytes);
            if (!p) st = lmc_fail(LMC_ERR_NOMEM, "all-reduce staging");
            else { h->stage[rank] = p; h->stage_cap[rank] = n; }
        }
        if (st >= 0) {
            buf = h->stage[rank];
            be->i->get(be, buf, y, 0, bytes);
        }
    }
    const int par = (int)(h->calls[rank]++ & 1);
    /* rank 0 sizes this call's result buffer: every rank finished reading it two calls ago */
    if (st >= 0 && rank == 0 && h->cap[par] < n) {
        float *p = realloc(h->result[par], bytes);
        if (!p) st = lmc_fail(LMC_ERR_NOMEM, "all-reduce buffer");
        else { h->result[par] = p; h->cap[par] = n; }
    }
    if (st < 0) { host_abort(c); return st; }
    h->src[rank] = buf;
    h->count[rank] = n;
    if (host_barrier(h) < 0) return lmc_fail(LMC_ERR_IO, "all-reduce: another rank failed");
    for (int k = 0; k < h->n; k++)
        if (h->count[k] != n) {
            host_abort(c);
            return lmc_fail(LMC_ERR_IO, "all-reduce: rank %d sent %lld elements, rank %d %lld", k,
                            (long long)h->count[k], rank, (long long)n);
        }
    /* reduce-scatter: this rank's chunk, summed in rank order */
    const int64_t lo = n * rank / h->n, hi = n * (rank + 1) / h->n;
    float *res = h->result[par];
    memcpy(res + lo, h->src[0] + lo, (size_t)(hi - lo) * sizeof(float));
    for (int k = 1; k < h->n; k++) {
        const float *a = h->src[k];
        for (int64_t i = lo; i < hi; i++) res[i] += a[i];
    }
    if (host_barrier(h) < 0) return lmc_fail(LMC_ERR_IO, "all-reduce: another rank failed");
    /* all-gather: every rank reads the whole result (no rank reads src buffers any more) */
    memcpy(buf, res, bytes);
    if (!cpu) be->i->set(be, y, buf, 0, bytes);
    return LMC_OK;
}

static void host_free(lmc_tp_comm *c) {
    host_comm *h = c->ctx;
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->result[0]);
    free(h->result[1]);
    for (int i = 0; i < h->n; i++) free(h->stage[i]);
    free(h);
    free(c);
}

static const lmc_tp_comm_i host_i = {
    .name = "host",
    .thread_init = host_thread_init,
    .all_reduce = host_all_reduce,
    .abort = host_abort,
    .free = host_free,
};

lmc_status lmc_tp_comm_host_init(lmc_tp_comm **out, int n_ranks) {
    *out = NULL;
    if (n_ranks < 1 || n_ranks > LMC_TP_MAX_RANKS) return lmc_fail(LMC_ERR_ARG, "%d ranks (1..%d)", n_ranks, LMC_TP_MAX_RANKS);
    lmc_tp_comm *c = calloc(1, sizeof *c);
    host_comm *h = calloc(1, sizeof *h);
    if (!c || !h) { free(c); free(h); return lmc_fail(LMC_ERR_NOMEM, "all-reduce"); }
    h->n = n_ranks;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    c->i = &host_i;
    c->n_ranks = n_ranks;
    c->ctx = h;
    *out = c;
    return LMC_OK;
}

void lmc_tp_comm_free(lmc_tp_comm *c) {
    if (c) c->i->free(c);
}

/* ---- the forward's hook ---------------------------------------------------------------------- */

static _Thread_local struct {
    const lmc_model *shard;
    lmc_tp_comm *comm;
    int rank;
    lmc_status st;
} tls;

void lmc_tp_bind_thread(const lmc_model *shard, lmc_tp_comm *comm, int rank) {
    tls.shard = shard;
    tls.comm = comm;
    tls.rank = rank;
    tls.st = LMC_OK;
}

void lmc_tp_reduce(const lmc_model *m, lmc_tensor *y) {
    if (!tls.shard || tls.shard != m) return;
    if (tls.st < 0) return; /* the group is aborted: the forward runs out and reports */
    lmc_status st = tls.comm->i->all_reduce(tls.comm, tls.rank, m->be, y);
    if (st < 0) tls.st = st;
}

lmc_status lmc_tp_thread_status(void) { return tls.st; }

int lmc_tp_bound(const lmc_model *m) { return tls.shard && tls.shard == m; }
