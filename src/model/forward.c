/* forward.c — the generic dense decoder forward (llama family), op for op.
 *
 * Per layer (transformers' LlamaDecoderLayer and its descriptor variants):
 *   h = norm(x); q,k,v = h·Wq,k,v (+b); [per-head q/k RMSNorm]; rope(q, k);
 *   store k,v; a = attention; x += a·Wo (+b);
 *   h = norm(x); x += (act(h·Wg) ⊙ h·Wu)·Wd
 * then the final norm and the LM head on the rows whose logits are wanted.
 */
#include "forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

lmc_status lmc_forward_state_init(lmc_forward_state *fs, const lmc_model *m, int n_batch_max) {
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
        {&fs->sel, LMC_DTYPE_F32, D, B},     {&fs->logits, LMC_DTYPE_F32, c->vocab_size, LMC_LOGITS_CHUNK},
        {&fs->tok, LMC_DTYPE_I32, B, 1},     {&fs->pos, LMC_DTYPE_I32, B, 1},
        {&fs->seq, LMC_DTYPE_I32, B, 1},     {&fs->sel_idx, LMC_DTYPE_I32, B, 1},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        *plan[i].t = lmc_tensor_make(plan[i].type, plan[i].ne0, plan[i].ne1, 1, 1);
        lmc_status st = m->be->i->alloc(m->be, plan[i].t);
        if (st < 0) { lmc_forward_state_free(fs); return st; }
    }
    return LMC_OK;
}

void lmc_forward_state_free(lmc_forward_state *fs) {
    if (!fs->m) return;
    lmc_backend *be = fs->m->be;
    lmc_tensor *all[] = {&fs->x, &fs->h, &fs->q, &fs->k, &fs->v, &fs->att, &fs->gate, &fs->up,
                         &fs->sel, &fs->logits, &fs->tok, &fs->pos, &fs->seq, &fs->sel_idx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data) be->i->release(be, all[i]);
    fs->m = NULL;
}

/* First n rows of a [ne0, B] scratch tensor. */
static lmc_tensor rows(const lmc_tensor *t, int64_t n) { return lmc_tensor_rows(t, 0, n); }

static void norm(const lmc_model *m, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w, const lmc_tensor *b) {
    lmc_backend *be = m->be;
    const lmc_arch *a = m->profile.arch;
    float eps = (float)m->cfg.norm_eps;
    switch (a->norm) {
    case LMC_NORM_RMS: be->i->rms_norm(be, y, x, w, eps, 0.0f); break;
    case LMC_NORM_RMS_PLUS_ONE: be->i->rms_norm(be, y, x, w, eps, 1.0f); break;
    case LMC_NORM_LAYER: be->i->layer_norm(be, y, x, w, b && b->data ? b : NULL, eps); break;
    }
}

static void linear(lmc_backend *be, lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *b, const lmc_tensor *x) {
    be->i->matmul(be, y, w, x);
    if (b && b->data) be->i->add_bias(be, y, b);
}

static void layer_forward(lmc_forward_state *fs, int il, lmc_tensor *kc, lmc_tensor *vc, int n) {
    const lmc_model *m = fs->m;
    const lmc_config *c = &m->cfg;
    const lmc_layer *L = &m->layers[il];
    lmc_backend *be = m->be;
    lmc_tensor x = rows(&fs->x, n), h = rows(&fs->h, n);
    lmc_tensor q = rows(&fs->q, n), k = rows(&fs->k, n), v = rows(&fs->v, n), att = rows(&fs->att, n);
    lmc_tensor gate = rows(&fs->gate, n), up = rows(&fs->up, n);
    lmc_tensor pos = lmc_tensor_rows(&fs->pos, 0, 1), seq = lmc_tensor_rows(&fs->seq, 0, 1);
    pos.ne[0] = n;
    seq.ne[0] = n;

    /* attention */
    norm(m, &h, &x, &L->attn_norm, &L->attn_norm_b);
    linear(be, &q, &L->wq, &L->bq, &h);
    linear(be, &k, &L->wk, &L->bk, &h);
    linear(be, &v, &L->wv, &L->bv, &h);
    lmc_tensor qh = lmc_tensor_reshape(&q, c->head_dim, c->n_heads, n, 1);     /* [hd, H, n] */
    lmc_tensor kh = lmc_tensor_reshape(&k, c->head_dim, c->n_kv_heads, n, 1);  /* [hd, KV, n] */
    if (m->profile.arch->qk_norm == LMC_QK_NORM_HEAD_RMS) {
        be->i->rms_norm(be, &qh, &qh, &L->q_norm, (float)c->norm_eps, 0.0f);
        be->i->rms_norm(be, &kh, &kh, &L->k_norm, (float)c->norm_eps, 0.0f);
    }
    lmc_rope_op rope = {.n_rot = m->rope.n_rot, .interleaved = 0, .attn_factor = m->rope.attn_factor,
                        .inv_freq = &m->rope_freq};
    be->i->rope(be, &qh, &pos, &rope);
    be->i->rope(be, &kh, &pos, &rope);
    be->i->kv_store(be, kc, &k, &pos, &seq);
    be->i->kv_store(be, vc, &v, &pos, &seq);
    lmc_attn_op ao = {.n_head = c->n_heads, .n_kv_head = c->n_kv_heads, .head_dim = c->head_dim,
                      .scale = 1.0f / sqrtf((float)c->head_dim), .softcap = 0, .window = L->window};
    be->i->attention(be, &att, &q, kc, vc, &pos, &seq, &ao);
    linear(be, &h, &L->wo, &L->bo, &att);
    be->i->add(be, &x, &x, &h);

    /* MLP */
    norm(m, &h, &x, &L->ffn_norm, &L->ffn_norm_b);
    linear(be, &gate, &L->w_gate, &L->b_gate, &h);
    linear(be, &up, &L->w_up, &L->b_up, &h);
    be->i->act_mul(be, &gate, &gate, &up, m->act);
    linear(be, &h, &L->w_down, &L->b_down, &gate);
    be->i->add(be, &x, &x, &h);
}

lmc_status lmc_forward(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                       float *logits_out, float *hidden_out, int *n_out) {
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
    for (int il = 0; il < c->n_layers; il++) layer_forward(fs, il, &k_cache[il], &v_cache[il], n);

    /* gather wanted rows, final norm, LM head in chunks */
    int32_t idx[n];
    int n_sel = 0;
    for (int i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] : i == n - 1) idx[n_sel++] = i;
    *n_out = n_sel;
    if (n_sel == 0) return be->i->sync(be);
    be->i->set(be, &fs->sel_idx, idx, 0, (size_t)n_sel * 4);
    lmc_tensor sel = rows(&fs->sel, n_sel), sidx = lmc_tensor_rows(&fs->sel_idx, 0, 1);
    sidx.ne[0] = n_sel;
    be->i->get_rows(be, &sel, &x, &sidx, 1.0f);
    norm(m, &sel, &sel, &m->out_norm, &m->out_norm_b);
    if (hidden_out) be->i->get(be, hidden_out, &sel, 0, (size_t)n_sel * c->hidden_size * 4);
    for (int r0 = 0; r0 < n_sel; r0 += LMC_LOGITS_CHUNK) {
        int nr = n_sel - r0 < LMC_LOGITS_CHUNK ? n_sel - r0 : LMC_LOGITS_CHUNK;
        lmc_tensor xs = lmc_tensor_rows(&fs->sel, r0, nr), lg = rows(&fs->logits, nr);
        be->i->matmul(be, &lg, &m->lm_head, &xs);
        be->i->get(be, logits_out + (size_t)r0 * c->vocab_size, &lg, 0, (size_t)nr * c->vocab_size * 4);
    }
    return be->i->sync(be);
}
