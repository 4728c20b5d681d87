/* forward.c — the generic dense decoder forward, op for op, with the
 * descriptor row (model/arch.h) selecting the branches.
 *
 * Per layer, for the pre-norm block (transformers' LlamaDecoderLayer):
 *   h = norm(x); q,k,v = h·Wq,k,v (+b); [q/k norm]; rope(q, k) (unless NoPE);
 *   store k,v; a = attention (scale, softcap, window); x += (a·Wo (+b))·rm;
 *   h = norm(x); x += mlp(h)·rm       (rm: residual multiplier, granite)
 * Sandwich blocks norm each sublayer's output before the residual add,
 * post-norm blocks (olmo2) only that; parallel blocks add attention and MLP
 * of one normed input. Then the final norm and the LM head (× logit scale,
 * final softcap) on the rows whose logits are wanted.
 */
#include "forward.h"

#include "gemma4.h"

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
    struct { lmc_tensor *t; lmc_dtype type; int64_t ne0, ne1; } plan[] = {
        {&fs->x, LMC_DTYPE_F32, D, B},       {&fs->h, LMC_DTYPE_F32, D, B},
        {&fs->q, LMC_DTYPE_F32, qd, B},      {&fs->k, LMC_DTYPE_F32, kvd, B},
        {&fs->v, LMC_DTYPE_F32, kvd, B},     {&fs->att, LMC_DTYPE_F32, qd, B},
        {&fs->gate, LMC_DTYPE_F32, I, B},    {&fs->up, LMC_DTYPE_F32, I, B},
        {&fs->out, LMC_DTYPE_F32, D, B},     {&fs->out2, LMC_DTYPE_F32, D, B},
        {&fs->logits, LMC_DTYPE_F32, c->vocab_size, LMC_LOGITS_CHUNK},
        {&fs->tok, LMC_DTYPE_I32, B, 1},     {&fs->pos, LMC_DTYPE_I32, B, 1},
        {&fs->seq, LMC_DTYPE_I32, B, 1},     {&fs->sel_idx, LMC_DTYPE_I32, B, 1},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        *plan[i].t = lmc_tensor_make(plan[i].type, plan[i].ne0, plan[i].ne1, 1, 1);
        lmc_status st = m->be->i->alloc(m->be, plan[i].t);
        if (st < 0) { lmc_forward_state_free(fs); return st; }
    }
    if (m->moe_layers) {
        lmc_status st = lmc_moe_scratch_init(&fs->moe, m, n_batch_max);
        if (st < 0) { lmc_forward_state_free(fs); return st; }
    }
    return LMC_OK;
}

void lmc_forward_state_free(lmc_forward_state *fs) {
    if (!fs->m) return;
    if (fs->g4) { lmc_gemma4_state_free(fs); return; }
    lmc_backend *be = fs->m->be;
    lmc_tensor *all[] = {&fs->x, &fs->h, &fs->q, &fs->k, &fs->v, &fs->att, &fs->gate, &fs->up,
                         &fs->out, &fs->out2, &fs->logits, &fs->tok, &fs->pos, &fs->seq, &fs->sel_idx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data) be->i->release(be, all[i]);
    lmc_moe_scratch_free(&fs->moe, fs->m);
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
    case LMC_NORM_LAYER: be->i->layer_norm(be, y, x, w, b && b->data ? b : NULL, eps); break;
    }
}

static void linear(lmc_backend *be, lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *b, const lmc_tensor *x) {
    be->i->matmul(be, y, w, x);
    if (b && b->data) be->i->add_bias(be, y, b);
}

/* x += y · mult */
static void residual_add(const lmc_model *m, lmc_tensor *x, lmc_tensor *y) {
    lmc_backend *be = m->be;
    if (m->cfg.resid_mult != 1.0) be->i->scale(be, y, y, (float)m->cfg.resid_mult);
    be->i->add(be, x, x, y);
}

/* q/k norms of the descriptor, on q [H·hd, n] and k [KV·hd, n]. */
static void qk_norm(const lmc_model *m, const lmc_layer *L, lmc_tensor *q, lmc_tensor *k, int n) {
    const lmc_config *c = &m->cfg;
    lmc_backend *be = m->be;
    const lmc_arch *ar = m->profile.arch;
    int on = ar->qk_norm != LMC_QK_NORM_NONE && (!ar->qk_norm_optional || c->use_qk_norm > 0);
    if (!on) return;
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

/* out = mlp(h), using gate/up scratch; a sparse layer runs the MoE block (model/moe.c). */
static void mlp(lmc_forward_state *fs, const lmc_layer *L, lmc_tensor *out, const lmc_tensor *h, lmc_tensor *gate,
                lmc_tensor *up) {
    const lmc_model *m = fs->m;
    lmc_backend *be = m->be;
    if (L->moe) {
        lmc_moe_forward(m, L->moe, &fs->moe, out, h, (int)lmc_tensor_nrows(h));
        return;
    }
    if (m->profile.arch->mlp == LMC_MLP_PLAIN) {
        linear(be, up, &L->w_up, &L->b_up, h);
        be->i->act(be, up, up, m->act);
        linear(be, out, &L->w_down, &L->b_down, up);
        return;
    }
    linear(be, gate, &L->w_gate, &L->b_gate, h);
    linear(be, up, &L->w_up, &L->b_up, h);
    be->i->act_mul(be, gate, gate, up, m->act);
    linear(be, out, &L->w_down, &L->b_down, gate);
}

static void layer_forward(lmc_forward_state *fs, int il, lmc_tensor *kc, lmc_tensor *vc, int n, int use_long) {
    const lmc_model *m = fs->m;
    const lmc_config *c = &m->cfg;
    const lmc_layer *L = &m->layers[il];
    const lmc_block_kind block = m->profile.arch->block;
    lmc_backend *be = m->be;
    lmc_tensor x = rows(&fs->x, n), h = rows(&fs->h, n), o = rows(&fs->out, n);
    lmc_tensor q = rows(&fs->q, n), k = rows(&fs->k, n), v = rows(&fs->v, n), att = rows(&fs->att, n);
    lmc_tensor gate = rows(&fs->gate, n), up = rows(&fs->up, n);
    lmc_tensor pos = lmc_tensor_rows(&fs->pos, 0, 1), seq = lmc_tensor_rows(&fs->seq, 0, 1);
    pos.ne[0] = n;
    seq.ne[0] = n;

    /* attention */
    const lmc_tensor *in = &x;
    if (block != LMC_BLOCK_POST) {
        norm(m, &h, &x, &L->attn_norm, &L->attn_norm_b);
        in = &h;
    }
    linear(be, &q, &L->wq, &L->bq, in);
    linear(be, &k, &L->wk, &L->bk, in);
    linear(be, &v, &L->wv, &L->bv, in);
    const int norm_after = m->profile.arch->qk_norm_after_rope;
    if (!norm_after) qk_norm(m, L, &q, &k, n);
    if (L->rope >= 0) {
        const lmc_rope_table *rt = &m->rope[L->rope];
        lmc_rope_op rope = {.n_rot = rt->n_rot, .interleaved = m->profile.arch->rope_interleaved,
                            .attn_factor = rt->attn_factor, .inv_freq = &m->rope_freq[L->rope][use_long && rt->has_long]};
        lmc_tensor qh = lmc_tensor_reshape(&q, c->head_dim, c->n_heads, n, 1);
        lmc_tensor kh = lmc_tensor_reshape(&k, c->head_dim, c->n_kv_heads, n, 1);
        be->i->rope(be, &qh, &pos, &rope);
        be->i->rope(be, &kh, &pos, &rope);
    }
    if (norm_after) qk_norm(m, L, &q, &k, n);
    be->i->kv_store(be, kc, &k, &pos, &seq);
    be->i->kv_store(be, vc, &v, &pos, &seq);
    lmc_attn_op ao = {.n_head = c->n_heads, .n_kv_head = c->n_kv_heads, .head_dim = c->head_dim,
                      .scale = c->attn_scale > 0 ? (float)c->attn_scale : 1.0f / sqrtf((float)c->head_dim),
                      .softcap = (float)c->attn_softcap, .window = L->window};
    be->i->attention(be, &att, &q, kc, vc, &pos, &seq, &ao);
    linear(be, &o, &L->wo, &L->bo, &att);
    if (block == LMC_BLOCK_PARALLEL) {
        /* x += attn(h) + mlp(h), one normed input */
        lmc_tensor o2 = rows(&fs->out2, n);
        mlp(fs, L, &o2, &h, &gate, &up);
        be->i->add(be, &o, &o, &o2);
        residual_add(m, &x, &o);
        return;
    }
    if (block == LMC_BLOCK_SANDWICH || block == LMC_BLOCK_POST) norm(m, &o, &o, &L->attn_post_norm, &L->attn_post_norm_b);
    residual_add(m, &x, &o);

    /* MLP */
    in = &x;
    if (block != LMC_BLOCK_POST) {
        norm(m, &h, &x, &L->ffn_norm, &L->ffn_norm_b);
        in = &h;
    }
    mlp(fs, L, &o, in, &gate, &up);
    if (block == LMC_BLOCK_SANDWICH || block == LMC_BLOCK_POST) norm(m, &o, &o, &L->ffn_post_norm, &L->ffn_post_norm_b);
    residual_add(m, &x, &o);
}

lmc_status lmc_forward(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                       float *logits_out, float *hidden_out, int *n_out) {
    if (fs->g4) return lmc_gemma4_forward(fs, k_cache, v_cache, b, logits_out, hidden_out, n_out);
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
    }
    be->i->set(be, &fs->tok, b->token, 0, (size_t)n * 4);
    be->i->set(be, &fs->pos, b->pos, 0, (size_t)n * 4);
    be->i->set(be, &fs->seq, b->seq, 0, (size_t)n * 4);

    lmc_tensor x = rows(&fs->x, n), tok = lmc_tensor_rows(&fs->tok, 0, 1);
    tok.ne[0] = n;
    be->i->get_rows(be, &x, &m->tok_embd, &tok, m->embed_scale);
    if (m->profile.arch->embed_norm) norm(m, &x, &x, &m->out_norm, &m->out_norm_b);
    /* longrope picks its long factors for a forward reaching past the original context */
    int max_pos = 0;
    for (int i = 0; i < n; i++) max_pos = b->pos[i] > max_pos ? b->pos[i] : max_pos;
    int use_long = m->rope[0].has_long && max_pos + 1 > m->rope[0].long_after;
    for (int il = 0; il < c->n_layers; il++) layer_forward(fs, il, &k_cache[il], &v_cache[il], n, use_long);

    /* gather wanted rows, final norm, LM head in chunks */
    int32_t idx[n];
    int n_sel = 0;
    for (int i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] : i == n - 1) idx[n_sel++] = i;
    *n_out = n_sel;
    if (n_sel == 0) return be->i->sync(be);
    be->i->set(be, &fs->sel_idx, idx, 0, (size_t)n_sel * 4);
    lmc_tensor sel = rows(&fs->h, n_sel), sidx = lmc_tensor_rows(&fs->sel_idx, 0, 1);
    sidx.ne[0] = n_sel;
    be->i->get_rows(be, &sel, &x, &sidx, 1.0f);
    norm(m, &sel, &sel, &m->out_norm, &m->out_norm_b);
    if (hidden_out) be->i->get(be, hidden_out, &sel, 0, (size_t)n_sel * c->hidden_size * 4);
    for (int r0 = 0; logits_out && r0 < n_sel; r0 += LMC_LOGITS_CHUNK) {
        int nr = n_sel - r0 < LMC_LOGITS_CHUNK ? n_sel - r0 : LMC_LOGITS_CHUNK;
        lmc_tensor xs = lmc_tensor_rows(&fs->h, r0, nr), lg = rows(&fs->logits, nr);
        be->i->matmul(be, &lg, &m->lm_head, &xs);
        if (m->lm_head_b.data) be->i->add_bias(be, &lg, &m->lm_head_b);
        if (c->logits_mult != 1.0) be->i->scale(be, &lg, &lg, (float)c->logits_mult);
        if (c->final_softcap > 0) be->i->softcap(be, &lg, &lg, (float)c->final_softcap);
        be->i->get(be, logits_out + (size_t)r0 * c->vocab_size, &lg, 0, (size_t)nr * c->vocab_size * 4);
    }
    return be->i->sync(be);
}
