/* forward.c — the generic dense decoder forward, op for op, with the
 * descriptor row (model/arch.h) selecting the branches.
 *
 * Per layer, for the pre-norm block (transformers' LlamaDecoderLayer):
 *   h = norm(x); q,k,v = h·Wq,k,v (+b); [q/k norm]; rope(q, k) (unless NoPE);
 *   store k,v; a = attention (scale, softcap, window); x += (a·Wo (+b))·rm;
 *   h = norm(x); x += mlp(h)·rm       (rm: residual multiplier, granite)
 * Sandwich blocks norm each sublayer's output before the residual add,
 * post-norm blocks (olmo2) only that; parallel blocks add attention and MLP
 * of one normed input (PARALLEL2: each with its own norm, gpt-neox). Learned
 * absolute positions (gpt2) are added to the embeddings; ministral3 scales q
 * per position after rope; dynamic NTK rope picks its table per sequence
 * (dynamic_prepare). Then the final norm and the LM head (× logit scale,
 * final softcap) on the rows whose logits are wanted.
 */
#include "forward.h"

#include "gemma4.h"
#include "tp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

lmc_status lmc_forward_state_init(lmc_forward_state *fs, const lmc_model *m, int n_batch_max) {
    if (m->g4) return lmc_gemma4_state_init(fs, m, n_batch_max); /* the targeted gemma4 port */
    memset(fs, 0, sizeof *fs);
    fs->m = m;
    fs->n_batch_max = n_batch_max;
    const lmc_config *c = &m->cfg;
    const int64_t B = n_batch_max, D = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    /* out2: the MLP's output beside attention's in a parallel block only */
    const int parallel = m->profile.block == LMC_BLOCK_PARALLEL || m->profile.block == LMC_BLOCK_PARALLEL2;
    /* The MLP's intermediate rows are the largest activations ([I, B] twice). Float weights are read in
     * place by every backend, so a long batch's dense MLP runs in passes of LMC_MLP_CHUNK tokens over
     * buffers of that size; quantized ones keep one pass (the CUDA backend's prefill products convert
     * a quantized weight to bf16 once per product: once per pass). */
    int float_mlp = 1;
    for (int il = 0; il < c->n_layers; il++) {
        const lmc_layer *L = &m->layers[il];
        const lmc_tensor *w[] = {&L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 3 && !L->moe; i++)
            if (w[i]->data && !lmc_dtype_is_float(w[i]->type) && w[i]->type != LMC_DTYPE_BF16P) /* BF16P: the CPU's BF16 */
                float_mlp = 0;
    }
    fs->mlp_chunk = float_mlp && B > LMC_MLP_CHUNK ? LMC_MLP_CHUNK : (int)B;
    struct { lmc_tensor *t; lmc_dtype type; int64_t ne0, ne1; } plan[] = {
        {&fs->x, LMC_DTYPE_F32, D, B},       {&fs->h, LMC_DTYPE_F32, D, B},
        {&fs->q, LMC_DTYPE_F32, qd, B},      {&fs->k, LMC_DTYPE_F32, kvd, B},
        {&fs->v, LMC_DTYPE_F32, kvd, B},     {&fs->att, LMC_DTYPE_F32, qd, B},
        {&fs->gate, LMC_DTYPE_F32, I, fs->mlp_chunk}, {&fs->up, LMC_DTYPE_F32, I, fs->mlp_chunk},
        {&fs->out, LMC_DTYPE_F32, D, B},     {parallel ? &fs->out2 : NULL, LMC_DTYPE_F32, D, B},
        {&fs->logits, LMC_DTYPE_F32, c->vocab_size, LMC_LOGITS_CHUNK},
        {&fs->tok, LMC_DTYPE_I32, B, 1},     {&fs->pos, LMC_DTYPE_I32, B, 1},
        {&fs->seq, LMC_DTYPE_I32, B, 1},     {&fs->sel_idx, LMC_DTYPE_I32, B, 1},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        if (!plan[i].t) continue;
        *plan[i].t = lmc_tensor_make(plan[i].type, plan[i].ne0, plan[i].ne1, 1, 1);
        lmc_status st = m->be->i->alloc(m->be, plan[i].t);
        if (st < 0) { lmc_forward_state_free(fs); return st; }
    }
    if (m->moe_layers) {
        lmc_status st = lmc_moe_scratch_init(&fs->moe, m, n_batch_max);
        if (st < 0) { lmc_forward_state_free(fs); return st; }
    }
    if (m->profile.arch->q_scale_llama4 && !(fs->q_scale = malloc((size_t)B * sizeof *fs->q_scale))) {
        lmc_forward_state_free(fs);
        return lmc_fail(LMC_ERR_NOMEM, "query scales");
    }
    if (m->rope[0].dynamic) {
        const int64_t half = m->rope[0].n_rot / 2;
        fs->run_t0 = malloc((size_t)B * sizeof *fs->run_t0);
        fs->run_len = malloc((size_t)B * sizeof *fs->run_len);
        fs->dyn_host = malloc((size_t)(B * half) * sizeof *fs->dyn_host);
        fs->dyn_inv = lmc_tensor_make(LMC_DTYPE_F32, half, B, 1, 1);
        lmc_status st = !fs->run_t0 || !fs->run_len || !fs->dyn_host ? lmc_fail(LMC_ERR_NOMEM, "dynamic rope") : LMC_OK;
        if (st >= 0) st = m->be->i->alloc(m->be, &fs->dyn_inv);
        if (st < 0) { lmc_forward_state_free(fs); return st; }
    }
    return LMC_OK;
}

void lmc_forward_state_free(lmc_forward_state *fs) {
    if (!fs->m) return;
    if (fs->g4) { lmc_gemma4_state_free(fs); return; }
    lmc_backend *be = fs->m->be;
    for (int i = 0; i < LMC_STEP_RECS; i++) lmc_steprec_free(be, &fs->rec[i].r);
    lmc_tensor *all[] = {&fs->x, &fs->h, &fs->q, &fs->k, &fs->v, &fs->att, &fs->gate, &fs->up,
                         &fs->out, &fs->out2, &fs->logits, &fs->tok, &fs->pos, &fs->seq, &fs->sel_idx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data) be->i->release(be, all[i]);
    lmc_moe_scratch_free(&fs->moe, fs->m);
    if (fs->dyn_inv.data) be->i->release(be, &fs->dyn_inv);
    free(fs->q_scale);
    free(fs->run_t0);
    free(fs->run_len);
    free(fs->dyn_host);
    free(fs->dyn_len);
    fs->m = NULL;
}

/* First n rows of a [ne0, B] scratch tensor. */
static lmc_tensor rows(const lmc_tensor *t, int64_t n) { return lmc_tensor_rows(t, 0, n); }

static void norm(const lmc_model *m, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w, const lmc_tensor *b) {
    lmc_backend *be = m->be;
    float eps = (float)m->cfg.norm_eps;
    if (w && !w->data) w = NULL; /* parameter-free norm */
    switch (m->profile.arch->norm) {
    case LMC_NORM_RMS: be->i->rms_norm(be, y, x, w, eps, 0.0f); break;
    case LMC_NORM_RMS_PLUS_ONE: be->i->rms_norm(be, y, x, w, eps, 1.0f); break;
    case LMC_NORM_LAYER:
    case LMC_NORM_LAYER_PLUS_ONE: /* 1 + w was formed at load */
        be->i->layer_norm(be, y, x, w, b && b->data ? b : NULL, eps);
        break;
    }
}

static void linear(lmc_backend *be, lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *b, const lmc_tensor *x) {
    be->i->matmul(be, y, w, x);
    if (b && b->data) be->i->add_bias(be, y, b);
}

/* n ≤ 3 linears of one input (q, k, v; gate, up), as one backend op where it has matmul_n. */
static void linear_n(lmc_backend *be, int n, lmc_tensor *const *y, const lmc_tensor *const *w,
                     const lmc_tensor *const *b, const lmc_tensor *x) {
    if (!be->i->matmul_n) {
        for (int i = 0; i < n; i++) linear(be, y[i], w[i], b[i], x);
        return;
    }
    be->i->matmul_n(be, n, y, w, x);
    for (int i = 0; i < n; i++)
        if (b[i] && b[i]->data) be->i->add_bias(be, y[i], b[i]);
}

/* x += y · mult */
static void residual_add(const lmc_model *m, lmc_tensor *x, lmc_tensor *y) {
    lmc_backend *be = m->be;
    if (m->cfg.resid_mult != 1.0) be->i->scale(be, y, y, (float)m->cfg.resid_mult);
    be->i->add(be, x, x, y);
}

/* x += r; h = norm(x) with w, as one backend op when the backend has it and the norm is an
 * RMSNorm with a unit residual multiplier (RMSNorm has no bias); 0, nothing done, otherwise. */
static int add_norm(const lmc_model *m, lmc_tensor *x, lmc_tensor *r, lmc_tensor *h, const lmc_tensor *w) {
    lmc_backend *be = m->be;
    const lmc_norm_kind k = m->profile.arch->norm;
    if (!be->i->add_rms_norm || m->cfg.resid_mult != 1.0 || (k != LMC_NORM_RMS && k != LMC_NORM_RMS_PLUS_ONE))
        return 0;
    be->i->add_rms_norm(be, x, r, h, w && w->data ? w : NULL, (float)m->cfg.norm_eps, k == LMC_NORM_RMS_PLUS_ONE ? 1.0f : 0.0f);
    return 1;
}

/* Whether the model normalizes q and k (qk_norm below). */
static int qk_norm_on(const lmc_model *m) {
    const lmc_arch *ar = m->profile.arch;
    return ar->qk_norm != LMC_QK_NORM_NONE && (!ar->qk_norm_optional || m->cfg.use_qk_norm > 0);
}

/* q/k norms of the descriptor, on q [H·hd, n] and k [KV·hd, n]. */
static void qk_norm(const lmc_model *m, const lmc_layer *L, lmc_tensor *q, lmc_tensor *k, int n) {
    const lmc_config *c = &m->cfg;
    lmc_backend *be = m->be;
    if (!qk_norm_on(m)) return;
    lmc_tensor qh = lmc_tensor_reshape(q, c->head_dim, c->n_heads, n, 1);
    lmc_tensor kh = lmc_tensor_reshape(k, c->head_dim, c->n_kv_heads, n, 1);
    switch (m->profile.arch->qk_norm) {
    case LMC_QK_NORM_HEAD: /* the arch's norm over each head */
        norm(m, &qh, &qh, &L->q_norm, &L->q_norm_b);
        norm(m, &kh, &kh, &L->k_norm, &L->k_norm_b);
        break;
    case LMC_QK_NORM_FULL: /* RMSNorm over all heads at once */
        be->i->rms_norm(be, q, q, &L->q_norm, (float)c->norm_eps, 0.0f);
        be->i->rms_norm(be, k, k, &L->k_norm, (float)c->norm_eps, 0.0f);
        break;
    case LMC_QK_NORM_PER_HEAD_LN: /* weights [hd, H]: row (t, h) uses head h's */
        be->i->layer_norm(be, &qh, &qh, &L->q_norm, NULL, (float)c->norm_eps);
        be->i->layer_norm(be, &kh, &kh, &L->k_norm, NULL, (float)c->norm_eps);
        break;
    case LMC_QK_NORM_NONE: break;
    }
}

/* out = mlp(h) of a dense layer, using gate/up scratch of h's rows. */
static void mlp_pass(const lmc_model *m, const lmc_layer *L, lmc_tensor *out, const lmc_tensor *h, lmc_tensor *gate,
                     lmc_tensor *up) {
    lmc_backend *be = m->be;
    if (m->profile.arch->mlp == LMC_MLP_PLAIN) {
        linear(be, up, &L->w_up, &L->b_up, h);
        if (m->act_xielu) be->i->xielu(be, up, up, L->xielu);
        else be->i->act(be, up, up, m->act);
        linear(be, out, &L->w_down, &L->b_down, up);
        return;
    }
    linear_n(be, 2, (lmc_tensor *const[]){gate, up}, (const lmc_tensor *const[]){&L->w_gate, &L->w_up},
             (const lmc_tensor *const[]){&L->b_gate, &L->b_up}, h);
    be->i->act_mul(be, gate, gate, up, m->act);
    linear(be, out, &L->w_down, &L->b_down, gate);
}

/* out = mlp(h) of a dense layer over fs->gate/up, in passes of at most fs->mlp_chunk tokens; a sparse
 * layer runs the MoE block (model/moe.c). */
static void mlp(lmc_forward_state *fs, const lmc_layer *L, lmc_tensor *out, const lmc_tensor *h) {
    const lmc_model *m = fs->m;
    const int64_t n = lmc_tensor_nrows(h);
    if (L->moe) {
        lmc_moe_forward(m, L->moe, &fs->moe, out, h, (int)n);
        return;
    }
    for (int64_t t0 = 0; t0 < n; t0 += fs->mlp_chunk) {
        const int64_t nt = n - t0 < fs->mlp_chunk ? n - t0 : fs->mlp_chunk;
        lmc_tensor hc = lmc_tensor_rows(h, t0, nt), oc = lmc_tensor_rows(out, t0, nt);
        lmc_tensor gate = rows(&fs->gate, nt), up = rows(&fs->up, nt);
        mlp_pass(m, L, &oc, &hc, &gate, &up);
    }
}

/* ---- fused decode products (backend.h matmul_fused): the norm before a product read on the fly,
 * the residual add in the product's epilogue, act·mul on either side of the MLP's products. Only
 * the plain pre-norm block with RMSNorm, unit residual multiplier and no tensor parallelism takes
 * them; each call falls back to the plain ops when the backend declines. */
static int fuse_on(const lmc_model *m) {
    const lmc_norm_kind k = m->profile.arch->norm;
    return m->be->i->matmul_fused && m->cfg.resid_mult == 1.0 && (k == LMC_NORM_RMS || k == LMC_NORM_RMS_PLUS_ONE) &&
           !lmc_tp_bound(m);
}

static lmc_fuse_op fuse_op(const lmc_model *m, lmc_fuse_in in, lmc_fuse_out out, const lmc_tensor *norm_w,
                           const lmc_tensor *x2) {
    return (lmc_fuse_op){.in = in, .out = out, .norm_w = norm_w && norm_w->data ? norm_w : NULL,
                         .eps = (float)m->cfg.norm_eps,
                         .w_offset = m->profile.arch->norm == LMC_NORM_RMS_PLUS_ONE ? 1.0f : 0.0f, .x2 = x2, .act = m->act};
}

static int fused(const lmc_model *m, int n, lmc_tensor *const *y, const lmc_tensor *const *w, const lmc_tensor *x,
                 lmc_fuse_in in, lmc_fuse_out out, const lmc_tensor *norm_w, const lmc_tensor *x2) {
    const lmc_fuse_op op = fuse_op(m, in, out, norm_w, x2);
    return m->be->i->matmul_fused(m->be, n, y, w, x, &op);
}

/* x += w·a (no bias): 1 when done as one fused product. */
static int fused_acc(const lmc_model *m, lmc_tensor *x, const lmc_tensor *w, const lmc_tensor *a) {
    return fused(m, 1, (lmc_tensor *const[]){x}, (const lmc_tensor *const[]){w}, a, LMC_FUSE_IN_X, LMC_FUSE_OUT_ACC,
                 NULL, NULL);
}

/* One pass of mlp_fused over the rows of x (gate, up: scratch of those rows; o: scratch for a product
 * the backend will not accumulate). 0: not taken, nothing done. */
static int mlp_fused_pass(const lmc_model *m, const lmc_layer *L, lmc_tensor *x, lmc_tensor *gate, lmc_tensor *up,
                          lmc_tensor *o) {
    lmc_backend *be = m->be;
    lmc_tensor *const gu[] = {gate, up};
    const lmc_tensor *const wgu[] = {&L->w_gate, &L->w_up};
    if (fused(m, 2, gu, wgu, x, LMC_FUSE_IN_RMS, LMC_FUSE_OUT_GLU, &L->ffn_norm, NULL)) {
        /* gate holds act(gate)·up */
    } else if (fused(m, 2, gu, wgu, x, LMC_FUSE_IN_RMS, LMC_FUSE_OUT_SET, &L->ffn_norm, NULL)) {
        if (fused(m, 1, (lmc_tensor *const[]){x}, (const lmc_tensor *const[]){&L->w_down}, gate, LMC_FUSE_IN_GLU,
                  LMC_FUSE_OUT_ACC, NULL, up))
            return 1;
        be->i->act_mul(be, gate, gate, up, m->act);
    } else {
        return 0;
    }
    if (!fused_acc(m, x, &L->w_down, gate)) {
        be->i->matmul(be, o, &L->w_down, gate);
        be->i->add(be, x, x, o);
    }
    return 1;
}

/* x += mlp(rms_norm(x) with L's ffn_norm) of a dense gated MLP without biases, through fused
 * products, in the passes of mlp (h, o: scratch of x's rows). 0: not taken, nothing done. */
static int mlp_fused(lmc_forward_state *fs, const lmc_layer *L, lmc_tensor *x, lmc_tensor *h, lmc_tensor *o) {
    const lmc_model *m = fs->m;
    if (L->moe || m->profile.arch->mlp == LMC_MLP_PLAIN || m->act_xielu || L->b_gate.data || L->b_up.data ||
        L->b_down.data)
        return 0;
    const int64_t n = lmc_tensor_nrows(x);
    for (int64_t t0 = 0; t0 < n; t0 += fs->mlp_chunk) {
        const int64_t nt = n - t0 < fs->mlp_chunk ? n - t0 : fs->mlp_chunk;
        lmc_tensor xc = lmc_tensor_rows(x, t0, nt), oc = lmc_tensor_rows(o, t0, nt);
        lmc_tensor gate = rows(&fs->gate, nt), up = rows(&fs->up, nt);
        if (mlp_fused_pass(m, L, &xc, &gate, &up, &oc)) continue;
        if (t0 == 0) return 0;
        /* a shorter last pass the backend declined: its rows through the plain ops */
        lmc_tensor hc = lmc_tensor_rows(h, t0, nt);
        norm(m, &hc, &xc, &L->ffn_norm, &L->ffn_norm_b);
        mlp_pass(m, L, &oc, &hc, &gate, &up);
        residual_add(m, &xc, &oc);
    }
    return 1;
}

/* Whether q/k/v may read the attention norm of x on the fly (matmul_fused IN_RMS): a fusing
 * backend, a pre-norm (or sandwich) block, x not already normed into h. */
static int qkv_norm_fusable(const lmc_forward_state *fs) {
    const lmc_block_kind block = fs->m->profile.block;
    return fuse_on(fs->m) && !fs->h_normed && (block == LMC_BLOCK_PRE || block == LMC_BLOCK_SANDWICH);
}

/* Layer L's rope (L->rope ≥ 0): its table's rotation, frequencies for the context length. */
static lmc_rope_op rope_op_of(const lmc_model *m, const lmc_layer *L, int use_long) {
    const lmc_rope_table *rt = &m->rope[L->rope];
    return (lmc_rope_op){.n_rot = rt->n_rot, .interleaved = m->profile.arch->rope_interleaved,
                         .attn_factor = rt->attn_factor, .inv_freq = &m->rope_freq[L->rope][use_long && rt->has_long]};
}

/* q, k, v = the products of rms_norm(x), rope of q and k, k and v stored into the caches: one fused
 * product where the backend takes it (matmul_fused OUT_ROPE), for a pre-norm layer whose q and k
 * go straight to a static rope over every dim (no biases, q/k norms or query scale in between).
 * 0: not taken, nothing done. */
static int qkv_rope_fused(lmc_forward_state *fs, const lmc_layer *L, lmc_tensor *const *qkv, lmc_tensor *x,
                          lmc_tensor *kc, lmc_tensor *vc, const lmc_tensor *pos, const lmc_tensor *seq, int use_long) {
    const lmc_model *m = fs->m;
    if (!qkv_norm_fusable(fs) || L->bq.data || L->bk.data || L->bv.data || qk_norm_on(m) || L->rope < 0 || fs->q_scale)
        return 0;
    const lmc_rope_table *rt = &m->rope[L->rope];
    if (rt->dynamic || rt->n_rot != m->cfg.head_dim) return 0;
    const lmc_rope_op rope = rope_op_of(m, L, use_long);
    lmc_fuse_op op = fuse_op(m, LMC_FUSE_IN_RMS, LMC_FUSE_OUT_ROPE, &L->attn_norm, NULL);
    op.head_dim = m->cfg.head_dim;
    op.rope = &rope;
    op.k_cache = kc;
    op.v_cache = vc;
    op.pos = pos;
    op.seq = seq;
    const lmc_tensor *const w[] = {&L->wq, &L->wk, &L->wv};
    return m->be->i->matmul_fused(m->be, 3, qkv, w, x, &op);
}

static void layer_forward(lmc_forward_state *fs, int il, lmc_tensor *kc, lmc_tensor *vc, int n, int use_long) {
    const lmc_model *m = fs->m;
    const lmc_config *c = &m->cfg;
    const lmc_layer *L = &m->layers[il];
    const lmc_block_kind block = m->profile.block;
    lmc_backend *be = m->be;
    lmc_tensor x = rows(&fs->x, n), h = rows(&fs->h, n), o = rows(&fs->out, n);
    lmc_tensor q = rows(&fs->q, n), k = rows(&fs->k, n), v = rows(&fs->v, n), att = rows(&fs->att, n);
    lmc_tensor pos = lmc_tensor_rows(&fs->pos, 0, 1), seq = lmc_tensor_rows(&fs->seq, 0, 1);
    pos.ne[0] = n;
    seq.ne[0] = n;

    /* attention (h may already hold the norm, fused with the last layer's residual add; or the
     * products read the norm of x on the fly) */
    const int fz = fuse_on(m);
    lmc_tensor *const qkv[] = {&q, &k, &v};
    const lmc_tensor *const wqkv[] = {&L->wq, &L->wk, &L->wv}, *const bqkv[] = {&L->bq, &L->bk, &L->bv};
    int stored = 0; /* k and v already in the caches (q and k roped) */
    if (qkv_rope_fused(fs, L, qkv, &x, kc, vc, &pos, &seq, use_long)) {
        stored = 1;
    } else if (qkv_norm_fusable(fs) && fused(m, 3, qkv, wqkv, &x, LMC_FUSE_IN_RMS, LMC_FUSE_OUT_SET, &L->attn_norm, NULL)) {
        for (int i = 0; i < 3; i++)
            if (bqkv[i]->data) be->i->add_bias(be, qkv[i], bqkv[i]);
    } else {
        const lmc_tensor *in = &x;
        if (block != LMC_BLOCK_POST) {
            if (!fs->h_normed) norm(m, &h, &x, &L->attn_norm, &L->attn_norm_b);
            in = &h;
        }
        linear_n(be, 3, qkv, wqkv, bqkv, in);
    }
    fs->h_normed = 0;
    const int norm_after = m->profile.arch->qk_norm_after_rope;
    if (!norm_after) qk_norm(m, L, &q, &k, n);
    if (L->rope >= 0 && !stored) {
        const lmc_rope_table *rt = &m->rope[L->rope];
        lmc_rope_op rope = rope_op_of(m, L, use_long);
        /* dynamic NTK: each run of one sequence's tokens with the frequencies of its length */
        const int n_runs = rt->dynamic ? fs->n_runs : 1;
        if (!rt->dynamic && !norm_after && !fs->q_scale && be->i->rope_store && rt->n_rot > 0) {
            /* rope of q and k and both cache stores in one op */
            lmc_tensor qh = lmc_tensor_reshape(&q, c->head_dim, c->n_heads, n, 1);
            lmc_tensor kh = lmc_tensor_reshape(&k, c->head_dim, c->n_kv_heads, n, 1);
            be->i->rope_store(be, &qh, &kh, &v, kc, vc, &pos, &seq, &rope);
            stored = 1;
        }
        for (int r = 0; !stored && r < n_runs; r++) {
            const int t0 = rt->dynamic ? fs->run_t0[r] : 0, len = rt->dynamic ? fs->run_len[r] : n;
            lmc_tensor inv;
            if (rt->dynamic) {
                inv = lmc_tensor_rows(&fs->dyn_inv, r, 1);
                rope.inv_freq = &inv;
            }
            lmc_tensor qr = lmc_tensor_rows(&fs->q, t0, len), kr = lmc_tensor_rows(&fs->k, t0, len);
            lmc_tensor qh = lmc_tensor_reshape(&qr, c->head_dim, c->n_heads, len, 1);
            lmc_tensor kh = lmc_tensor_reshape(&kr, c->head_dim, c->n_kv_heads, len, 1);
            lmc_tensor pr = lmc_tensor_make(LMC_DTYPE_I32, len, 1, 1, 1);
            pr.data = (int32_t *)fs->pos.data + t0;
            be->i->rope(be, &qh, &pr, &rope);
            be->i->rope(be, &kh, &pr, &rope);
        }
    }
    if (norm_after) qk_norm(m, L, &q, &k, n);
    if (fs->q_scale) {
        /* ministral3: q ×= the token's llama-4 scale, over runs of equal scale */
        for (int t0 = 0, t1; t0 < n; t0 = t1) {
            for (t1 = t0 + 1; t1 < n && fs->q_scale[t1] == fs->q_scale[t0];) t1++;
            lmc_tensor qr = lmc_tensor_rows(&fs->q, t0, t1 - t0);
            if (fs->q_scale[t0] != 1.0f) be->i->scale(be, &qr, &qr, fs->q_scale[t0]);
        }
    }
    if (!stored) {
        be->i->kv_store(be, kc, &k, &pos, &seq);
        be->i->kv_store(be, vc, &v, &pos, &seq);
    }
    lmc_attn_op ao = {.n_head = c->n_heads, .n_kv_head = c->n_kv_heads, .head_dim = c->head_dim,
                      .scale = c->attn_scale > 0 ? (float)c->attn_scale : 1.0f / sqrtf((float)c->head_dim),
                      .softcap = (float)c->attn_softcap, .window = L->window,
                      .sinks = L->sinks.data ? &L->sinks : NULL, .next_w = {L->wo.data ? &L->wo : NULL}};
    if (!L->moe && m->profile.arch->mlp != LMC_MLP_PLAIN) { /* the gated MLP's products come next */
        ao.next_w[1] = &L->w_gate;
        ao.next_w[2] = &L->w_up;
    }
    be->i->attention(be, &att, &q, kc, vc, &pos, &seq, &ao);
    if (fz && block == LMC_BLOCK_PRE && !L->bo.data && fused_acc(m, &x, &L->wo, &att)) {
        /* x += o in the product; the MLP reads its norm of x */
        if (mlp_fused(fs, L, &x, &h, &o)) return; /* x += mlp: the next layer norms x itself */
        norm(m, &h, &x, &L->ffn_norm, &L->ffn_norm_b);
        mlp(fs, L, &o, &h);
        const int next = il + 1 < c->n_layers;
        fs->h_normed = next && add_norm(m, &x, &o, &h, &m->layers[il + 1].attn_norm);
        if (!fs->h_normed) residual_add(m, &x, &o);
        return;
    }
    linear(be, &o, &L->wo, &L->bo, &att);
    if (block == LMC_BLOCK_PARALLEL || block == LMC_BLOCK_PARALLEL2) {
        /* x += attn(h) + mlp(h), one normed input; PARALLEL2: the MLP's input has its own norm */
        lmc_tensor o2 = rows(&fs->out2, n);
        if (block == LMC_BLOCK_PARALLEL2) norm(m, &h, &x, &L->ffn_norm, &L->ffn_norm_b);
        mlp(fs, L, &o2, &h);
        be->i->add(be, &o, &o, &o2);
        lmc_tp_reduce(m, &o); /* tensor parallel: Σ of the ranks' partial sums (no-op otherwise) */
        residual_add(m, &x, &o);
        return;
    }
    lmc_tp_reduce(m, &o);
    if (block == LMC_BLOCK_SANDWICH || block == LMC_BLOCK_POST) norm(m, &o, &o, &L->attn_post_norm, &L->attn_post_norm_b);

    /* MLP: x += o, then its norm (one op where the backend fuses them) */
    const lmc_tensor *in = &x;
    if (block != LMC_BLOCK_POST) {
        if (!add_norm(m, &x, &o, &h, &L->ffn_norm)) {
            residual_add(m, &x, &o);
            norm(m, &h, &x, &L->ffn_norm, &L->ffn_norm_b);
        }
        in = &h;
    } else {
        residual_add(m, &x, &o);
    }
    mlp(fs, L, &o, in);
    lmc_tp_reduce(m, &o);
    if (block == LMC_BLOCK_SANDWICH || block == LMC_BLOCK_POST) norm(m, &o, &o, &L->ffn_post_norm, &L->ffn_post_norm_b);
    /* x += o, fused with the next layer's input norm where possible */
    const int next = il + 1 < c->n_layers && block != LMC_BLOCK_POST;
    fs->h_normed = next && add_norm(m, &x, &o, &h, &m->layers[il + 1].attn_norm);
    if (!fs->h_normed) residual_add(m, &x, &o);
}

/* Dynamic NTK rope, before the layers: transformers' dynamic_rope_update per sequence. A forward
 * over positions up to p has length L = p + 1; the sequence's table grows to L when L exceeds the
 * length it was last computed for, and returns to max_position_embeddings when L falls below that
 * (its reset); otherwise it stays. The keys already cached keep the rotation they were stored with,
 * as in transformers' cached generation. So a prefill equals transformers' forward over the prompt,
 * and decode steps follow generate() with a cache. A sequence whose forward starts at position 0
 * starts from the unscaled table (transformers keeps one state per model across requests; lmc keeps
 * one per sequence and resets it with the sequence). Tokens of one sequence must be adjacent. */
static lmc_status dynamic_prepare(lmc_forward_state *fs, const lmc_tensor *k_cache, const lmc_batch *b) {
    const lmc_rope_table *rt = &fs->m->rope[0];
    const int half = rt->n_rot / 2, n = b->n_tokens, n_seq = (int)k_cache[0].ne[2], orig = rt->dyn_max_pos;
    if (!fs->dyn_len || fs->n_dyn_seq < n_seq) {
        free(fs->dyn_len);
        fs->dyn_len = calloc((size_t)n_seq, sizeof *fs->dyn_len);
        if (!fs->dyn_len) return lmc_fail(LMC_ERR_NOMEM, "dynamic rope");
        fs->n_dyn_seq = n_seq;
    }
    fs->n_runs = 0;
    for (int t = 0; t < n;) {
        const int s = b->seq[t], r = fs->n_runs++;
        int u = t, lo = b->pos[t], hi = b->pos[t];
        for (; u < n && b->seq[u] == s; u++) {
            lo = b->pos[u] < lo ? b->pos[u] : lo;
            hi = b->pos[u] > hi ? b->pos[u] : hi;
        }
        for (int q = 0; q < r; q++)
            if (b->seq[fs->run_t0[q]] == s)
                return lmc_fail(LMC_ERR_UNSUPPORTED, "dynamic rope needs each sequence's tokens adjacent in a batch");
        if (s < 0 || s >= n_seq) return lmc_fail(LMC_ERR_RANGE, "sequence %d outside the cache's %d", s, n_seq);
        fs->run_t0[r] = t;
        fs->run_len[r] = u - t;
        const int L = hi + 1;
        int cached = lo == 0 || !fs->dyn_len[s] ? orig : fs->dyn_len[s];
        if (L > cached) cached = L;                    /* growth */
        if (L < orig && cached > orig) cached = orig;  /* reset */
        fs->dyn_len[s] = cached;
        lmc_rope_dynamic(rt, cached, fs->dyn_host + (size_t)r * half);
        t = u;
    }
    fs->m->be->i->set(fs->m->be, &fs->dyn_inv, fs->dyn_host, 0, (size_t)fs->n_runs * half * sizeof *fs->dyn_host);
    return LMC_OK;
}

/* Embeddings, every layer, then the wanted rows (sel_idx) gathered into h and final-normed. */
static void step_body(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, int n, int n_sel, int use_long) {
    const lmc_model *m = fs->m;
    lmc_backend *be = m->be;
    lmc_tensor x = rows(&fs->x, n), tok = lmc_tensor_rows(&fs->tok, 0, 1);
    tok.ne[0] = n;
    be->i->get_rows(be, &x, &m->tok_embd, &tok, m->embed_scale);
    if (m->pos_embd.data) {
        /* learned absolute positions (gpt2): x += wpe[pos] */
        lmc_tensor h = rows(&fs->h, n), pos = lmc_tensor_rows(&fs->pos, 0, 1);
        pos.ne[0] = n;
        be->i->get_rows(be, &h, &m->pos_embd, &pos, 1.0f);
        be->i->add(be, &x, &x, &h);
    }
    if (m->profile.arch->embed_norm) norm(m, &x, &x, &m->out_norm, &m->out_norm_b);
    fs->h_normed = 0;
    for (int il = 0; il < m->cfg.n_layers; il++) layer_forward(fs, il, &k_cache[il], &v_cache[il], n, use_long);
    if (n_sel == 0) return;
    lmc_tensor sel = rows(&fs->h, n_sel), sidx = lmc_tensor_rows(&fs->sel_idx, 0, 1);
    sidx.ne[0] = n_sel;
    be->i->get_rows(be, &sel, &x, &sidx, 1.0f);
    norm(m, &sel, &sel, &m->out_norm, &m->out_norm_b);
}

/* LM head of gathered rows r0 .. r0+nr (≤ LMC_LOGITS_CHUNK) into fs->logits. */
static void lm_head_chunk(lmc_forward_state *fs, int r0, int nr) {
    const lmc_model *m = fs->m;
    const lmc_config *c = &m->cfg;
    lmc_backend *be = m->be;
    lmc_tensor xs = lmc_tensor_rows(&fs->h, r0, nr), lg = rows(&fs->logits, nr);
    be->i->matmul(be, &lg, &m->lm_head, &xs);
    if (m->lm_head_b.data) be->i->add_bias(be, &lg, &m->lm_head_b);
    if (c->logits_mult != 1.0) be->i->scale(be, &lg, &lg, (float)c->logits_mult);
    if (c->final_softcap > 0) be->i->softcap(be, &lg, &lg, (float)c->final_softcap);
}

/* Whether this model's step is a fixed op sequence for a given shape: no host work between ops
 * that depends on the step's values (per-token query scales, dynamic rope tables, tensor-parallel
 * reduces). MoE layers qualify: a backend whose MoE op needs the host while recording refuses the
 * recording, and the step runs unrecorded. */
static int step_recordable(const lmc_forward_state *fs) {
    const lmc_model *m = fs->m;
    return m->be->i->graph_begin && !fs->q_scale && !m->rope[0].dynamic && !lmc_tp_bound(m);
}

/* Run step_body + the LM head of the n_sel (≤ LMC_LOGITS_CHUNK) wanted rows from a recording of
 * this step shape: the first step of a shape runs unrecorded (workspaces grow to their size),
 * the second is recorded and replayed, later ones replay. 0: nothing was enqueued (the caller
 * runs the ops itself). Every per-step value (ids, positions, sequences, rows wanted) was set in
 * device tensors before, and the kernels read them there. */
/* The ops a recorded step holds: step_body and the LM head of its wanted rows. */
struct step_args {
    lmc_forward_state *fs;
    lmc_tensor *kc, *vc;
    int n, n_sel, use_long;
};
static void step_enqueue(void *ud) {
    struct step_args *a = ud;
    step_body(a->fs, a->kc, a->vc, a->n, a->n_sel, a->use_long);
    lm_head_chunk(a->fs, 0, a->n_sel);
}

static int step_recorded(lmc_forward_state *fs, lmc_tensor *kc, lmc_tensor *vc, int n, int n_sel, int use_long) {
    lmc_backend *be = fs->m->be;
    struct lmc_step_rec *r = NULL, *victim = &fs->rec[0];
    for (int i = 0; i < LMC_STEP_RECS; i++) {
        struct lmc_step_rec *e = &fs->rec[i];
        if (e->n == n && e->n_sel == n_sel && e->use_long == use_long && e->kc == kc[0].data && e->vc == vc[0].data &&
            e->n_ctx == kc[0].ne[1] && e->n_seq == kc[0].ne[2]) {
            r = e;
            break;
        }
        if (e->used < victim->used) victim = e;
    }
    if (!r) {
        lmc_steprec_free(be, &victim->r);
        *victim = (struct lmc_step_rec){n, n_sel, use_long, kc[0].data, vc[0].data, kc[0].ne[1], kc[0].ne[2], 0, {0}};
        r = victim;
    }
    r->used = ++fs->rec_clock;
    struct step_args a = {fs, kc, vc, n, n_sel, use_long};
    return lmc_steprec_play(be, &r->r, step_enqueue, &a);
}

/* lmc_forward and lmc_forward_keep: keep = leave the logits rows on the backend when they fit one
 * LM-head chunk (*kept then says so). */
static lmc_status forward(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                          float *logits_out, float *hidden_out, int *n_out, int keep, int *kept) {
    *kept = 0;
    if (fs->g4) return lmc_gemma4_forward_keep(fs, k_cache, v_cache, b, logits_out, hidden_out, n_out, keep, kept);
    const lmc_model *m = fs->m;
    const lmc_config *c = &m->cfg;
    lmc_backend *be = m->be;
    const int n = b->n_tokens;
    if (n <= 0 || n > fs->n_batch_max)
        return lmc_fail(LMC_ERR_ARG, "batch of %d tokens (at most %d per forward)", n, fs->n_batch_max);
    for (int i = 0; i < n; i++) {
        if (b->token[i] < 0 || b->token[i] >= c->vocab_size)
            return lmc_fail(LMC_ERR_RANGE, "token id %d is outside the vocabulary (0..%d)", b->token[i], c->vocab_size - 1);
        if (b->pos[i] < 0) return lmc_fail(LMC_ERR_RANGE, "negative position %d", b->pos[i]);
        if (m->pos_embd.data && b->pos[i] >= c->max_position_embeddings)
            return lmc_fail(LMC_ERR_RANGE, "position %d is past the model's %d learned positions", b->pos[i],
                            c->max_position_embeddings);
    }
    if (fs->q_scale) {
        /* transformers: 1 + β · log(1 + floor(pos / original_max)), in float32 */
        const float beta = (float)c->rope.llama4_beta, orig = (float)c->rope.original_max_position_embeddings;
        for (int i = 0; i < n; i++) fs->q_scale[i] = 1.0f + beta * logf(1.0f + floorf((float)b->pos[i] / orig));
    }
    if (m->rope[0].dynamic) LMC_TRY(dynamic_prepare(fs, k_cache, b));
    /* the rows whose logits (or hidden states) are wanted */
    int32_t idx[n];
    int n_sel = 0;
    for (int i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] : i == n - 1) idx[n_sel++] = i;
    *n_out = n_sel;
    be->i->set(be, &fs->tok, b->token, 0, (size_t)n * 4);
    be->i->set(be, &fs->pos, b->pos, 0, (size_t)n * 4);
    be->i->set(be, &fs->seq, b->seq, 0, (size_t)n * 4);
    if (n_sel > 0) be->i->set(be, &fs->sel_idx, idx, 0, (size_t)n_sel * 4);
    /* longrope picks its long factors for a forward reaching past the original context */
    int max_pos = 0;
    for (int i = 0; i < n; i++) max_pos = b->pos[i] > max_pos ? b->pos[i] : max_pos;
    const int use_long = m->rope[0].has_long && max_pos + 1 > m->rope[0].long_after;

    if (logits_out && n_sel > 0 && n_sel <= LMC_LOGITS_CHUNK && n <= LMC_STEP_REC_MAX && step_recordable(fs) &&
        step_recorded(fs, k_cache, v_cache, n, n_sel, use_long)) {
        if (hidden_out) be->i->get(be, hidden_out, &fs->h, 0, (size_t)n_sel * c->hidden_size * 4);
        if (keep) *kept = 1; /* the rows stay in fs->logits */
        else be->i->get(be, logits_out, &fs->logits, 0, (size_t)n_sel * c->vocab_size * 4);
        return be->i->sync(be);
    }
    step_body(fs, k_cache, v_cache, n, n_sel, use_long);
    if (n_sel == 0) return be->i->sync(be);
    if (hidden_out) be->i->get(be, hidden_out, &fs->h, 0, (size_t)n_sel * c->hidden_size * 4);
    if (keep && logits_out && n_sel <= LMC_LOGITS_CHUNK) {
        lm_head_chunk(fs, 0, n_sel);
        *kept = 1;
        return be->i->sync(be);
    }
    for (int r0 = 0; logits_out && r0 < n_sel; r0 += LMC_LOGITS_CHUNK) {
        const int nr = n_sel - r0 < LMC_LOGITS_CHUNK ? n_sel - r0 : LMC_LOGITS_CHUNK;
        lm_head_chunk(fs, r0, nr);
        be->i->get(be, logits_out + (size_t)r0 * c->vocab_size, &fs->logits, 0, (size_t)nr * c->vocab_size * 4);
    }
    return be->i->sync(be);
}

lmc_status lmc_forward(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                       float *logits_out, float *hidden_out, int *n_out) {
    int kept;
    return forward(fs, k_cache, v_cache, b, logits_out, hidden_out, n_out, 0, &kept);
}

lmc_status lmc_forward_keep(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                            float *logits_out, float *hidden_out, int *n_out, int *kept) {
    return forward(fs, k_cache, v_cache, b, logits_out, hidden_out, n_out, 1, kept);
}
