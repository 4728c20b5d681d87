/* gemma4_mtp.c — the Gemma 4 assistant (MTP drafter): loading, pairing checks, one draft step.
 *
 * The assistant's inner stack is a gemma4_text model whose every layer is KV-shared; it is
 * bound by the gemma4 port (lmc_gemma4_load_ex, assistant mode) into a private lmc_model, with
 * pre_projection / post_projection / the centroid head bound here through the same audit.
 * Owns that model and the step scratch; borrows the target.
 */
#include "gemma4_mtp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf_assistant.h"
#include "io/jsonfile.h"

#define LMC_G4MTP_CHAIN 16 /* drafter steps chained in one recording at most */
#define LMC_G4MTP_RECS 8   /* recordings kept (chain lengths × KV caches) */

struct lmc_g4mtp {
    const lmc_model *target;     /* borrowed */
    const lmc_gemma4 *tg;        /* target->g4 */
    lmc_model *am;               /* the assistant's inner stack (owned) */
    lmc_backend *be;
    int B, H, V, Hh, window;     /* backbone hidden, hidden, vocab, heads, sliding window */
    int ordered, nc, ctk, vpc;   /* centroid head: centroids, top-k, tokens per centroid */
    int src[2];                  /* target layer read by [0] full, [1] sliding layers */
    lmc_tensor pre_proj;         /* [2B, H] */
    lmc_tensor post_proj;        /* [H, B] */
    lmc_tensor centroids;        /* [H, nc] */
    int32_t *ordering;           /* [V] token_ordering (host) */
    /* step scratch */
    lmc_tensor x2, x, h, o, q, att, gate, up, hout, logits, cl, sel_emb;
    lmc_tensor tok, pos, pos_att, seq, sel_ids;
    float *h_cl, *h_emb;         /* host: [nc] centroid scores, [ctk · vpc] selected logits */
    int32_t *h_ids;              /* [ctk · vpc] */
    /* drafts chained on the backend (lmc_g4mtp_draft; backends with argmax, and topk for the
     * centroid head): each step embeds toks[i] and writes its argmax to toks[i + 1] (dense head),
     * post_projection writes the next h_prev straight into x2's second half */
    int chain;
    lmc_tensor toks;             /* i32 [LMC_G4MTP_CHAIN + 1] */
    lmc_tensor emb_ord;          /* centroid head: head rows in token_ordering order, [H·vpc, nc] */
    lmc_tensor top, top_v, top_st; /* i32 [ctk], f32 [ctk], f32 [4]: the top centroids */
    int32_t *h_top;              /* host [ctk] */
    float *h_logits;             /* host [V]: the host loop's logits (no chain) */
    struct mtp_rec {
        int n;                   /* chained steps recorded (dense), or 1 (centroid) */
        uintptr_t kv[4];         /* K/V cache addresses read ([0, 1] K full/sliding, [2, 3] V) */
        int64_t n_ctx, n_seq;
        unsigned used;
        lmc_steprec r;
    } rec[LMC_G4MTP_RECS];
    unsigned rec_clock;
    lmc_gguf_assistant *gguf;    /* a GGUF assistant's mapping (owned), NULL for safetensors */
    lmc_weight *tab;             /* its tensors under HF names (owned) */
};

/* A GGUF assistant: the stored config.json and the tensors under their HF names. */
static lmc_status open_gguf(lmc_g4mtp *d, const char *path, lmc_config *cfg) {
    LMC_TRY(lmc_gguf_assistant_open(path, &d->gguf));
    const char *text = lmc_gguf_assistant_config(d->gguf);
    cJSON *raw = NULL;
    LMC_TRY(lmc_json_parse(text, strlen(text), "lmc.hf_config", &raw));
    LMC_TRY(lmc_config_from_json(raw, NULL, cfg));
    int n = lmc_gguf_assistant_count(d->gguf);
    d->tab = calloc((size_t)n, sizeof *d->tab);
    if (!d->tab) return lmc_fail(LMC_ERR_NOMEM, "assistant tensors");
    for (int i = 0; i < n; i++) {
        const lmc_gguf_asst_tensor *t = lmc_gguf_assistant_at(d->gguf, i);
        lmc_weight *w = &d->tab[i];
        w->name = t->hf_name;
        w->dtype = t->dtype;
        w->n_dims = t->n_dims;
        for (int k = 0; k < t->n_dims; k++) w->shape[k] = t->shape[k];
        w->data = t->data;
        w->nbytes = t->nbytes;
    }
    return LMC_OK;
}

static int jint(const cJSON *o, const char *key, int def) {
    int64_t v;
    return lmc_json_get_int(o, key, &v) > 0 ? (int)v : def;
}

/* pre/post projections and the centroid head, bound before the audit. */
static lmc_status bind_extra(lmc_model *am, lmc_g4_binder *b, void *ud) {
    lmc_g4mtp *d = ud;
    LMC_TRY(lmc_g4_bind(b, "pre_projection.weight", 2 * (int64_t)d->B, d->H, 1, &d->pre_proj));
    LMC_TRY(lmc_g4_bind(b, "post_projection.weight", d->H, d->B, 1, &d->post_proj));
    if (!d->ordered) return LMC_OK;
    LMC_TRY(lmc_g4_bind(b, "masked_embedding.centroids.weight", d->H, d->nc, 1, &d->centroids));
    const lmc_weight *t = lmc_g4_take(b, "masked_embedding.token_ordering");
    if (!t) return lmc_fail(LMC_ERR_AUDIT, "weight audit: masked_embedding.token_ordering is missing");
    if ((t->dtype != LMC_DTYPE_I64 && t->dtype != LMC_DTYPE_I32) || t->n_dims != 1 || t->shape[0] != d->V)
        return lmc_fail(LMC_ERR_FORMAT, "masked_embedding.token_ordering must be I64 or I32 [%d]", d->V);
    d->ordering = malloc((size_t)d->V * sizeof *d->ordering);
    if (!d->ordering) return lmc_fail(LMC_ERR_NOMEM, "token_ordering");
    for (int i = 0; i < d->V; i++) {
        int64_t v;
        if (t->dtype == LMC_DTYPE_I64) memcpy(&v, (const char *)t->data + (size_t)i * 8, 8);
        else { int32_t w; memcpy(&w, (const char *)t->data + (size_t)i * 4, 4); v = w; }
        if (v < 0 || v >= d->V)
            return lmc_fail(LMC_ERR_FORMAT, "masked_embedding.token_ordering[%d] = %lld is not a token id", i, (long long)v);
        d->ordering[i] = (int32_t)v;
    }
    (void)am;
    return LMC_OK;
}

/* The chained centroid head gathers every candidate row of the top centroids with one get_rows:
 * a copy of the head's rows in token_ordering order, in the backend's memory ([H·vpc, nc]). Left
 * empty (the host loop drafts) when the backend lacks topk or the layout does not allow it. */
static lmc_status reorder_head(lmc_g4mtp *d) {
    const lmc_model *am = d->am;
    if (!d->ordered || !d->be->i->argmax || !d->be->i->topk || d->ctk > 256 || !lmc_dtype_is_float(am->lm_head.type))
        return LMC_OK;
    const char *name = am->lm_head.data == am->tok_embd.data ? "model.embed_tokens.weight" : "lm_head.weight";
    const lmc_weight *e = NULL;
    if (d->tab) {
        for (int i = 0; i < lmc_gguf_assistant_count(d->gguf) && !e; i++)
            if (!strcmp(d->tab[i].name, name)) e = &d->tab[i];
    } else if (am->weights) {
        e = lmc_weights_find(am->weights, name);
    }
    const lmc_dtype ty = am->lm_head.type;
    const size_t rb = lmc_dtype_row_bytes(ty, d->H);
    if (!e || e->dtype != ty || e->nbytes != (size_t)d->V * rb ||
        lmc_dtype_row_bytes(ty, (int64_t)d->H * d->vpc) != rb * (size_t)d->vpc)
        return LMC_OK;
    char *buf = malloc((size_t)d->V * rb);
    if (!buf) return lmc_fail(LMC_ERR_NOMEM, "reordered centroid head");
    for (int i = 0; i < d->V; i++) memcpy(buf + (size_t)i * rb, (const char *)e->data + (size_t)d->ordering[i] * rb, rb);
    d->emb_ord = lmc_tensor_make(ty, (int64_t)d->H * d->vpc, d->nc, 1, 1);
    lmc_status st = d->be->i->alloc(d->be, &d->emb_ord);
    if (st >= 0) d->be->i->set(d->be, &d->emb_ord, buf, 0, (size_t)d->V * rb);
    if (st >= 0) st = d->be->i->sync(d->be);
    free(buf);
    return st;
}

/* The pair must agree on what the assistant reads from the target. */
static lmc_status check_pairing(lmc_g4mtp *d) {
    const lmc_gemma4 *ag = d->am->g4, *tg = d->tg;
    if (d->B != tg->D)
        return lmc_fail(LMC_ERR_FORMAT, "assistant backbone_hidden_size %d does not match the target's hidden size %d",
                        d->B, tg->D);
    if (d->V != tg->V)
        return lmc_fail(LMC_ERR_FORMAT, "assistant vocabulary %d does not match the target's %d", d->V, tg->V);
    for (int il = 0; il < ag->n_layers; il++) {
        const lmc_g4_layer *L = &ag->layers[il];
        int t = L->sliding, s = tg->last_kv[t];
        if (s < 0)
            return lmc_fail(LMC_ERR_FORMAT, "assistant layer %d is %s attention but the target has no such layer", il,
                            t ? "sliding" : "full");
        if (tg->layers[s].hd != L->hd || tg->layers[s].n_kv != L->n_kv)
            return lmc_fail(LMC_ERR_FORMAT, "assistant layer %d reads target layer %d: head_dim %d × %d KV heads vs the "
                            "target's %d × %d", il, s, L->hd, L->n_kv, tg->layers[s].hd, tg->layers[s].n_kv);
        d->src[t] = s;
    }
    return LMC_OK;
}

static lmc_status alloc_scratch(lmc_g4mtp *d) {
    const lmc_gemma4 *ag = d->am->g4;
    LMC_TRY(reorder_head(d));
    const int n_sel = d->ordered ? d->ctk * d->vpc : 1;
    struct { lmc_tensor *t; lmc_dtype type; int64_t ne0; } plan[] = {
        {&d->x2, LMC_DTYPE_F32, 2 * (int64_t)d->B}, {&d->x, LMC_DTYPE_F32, d->H}, {&d->h, LMC_DTYPE_F32, d->H},
        {&d->o, LMC_DTYPE_F32, d->H}, {&d->q, LMC_DTYPE_F32, (int64_t)d->Hh * ag->hd_max},
        {&d->att, LMC_DTYPE_F32, (int64_t)d->Hh * ag->hd_max}, {&d->gate, LMC_DTYPE_F32, ag->inter_max},
        {&d->up, LMC_DTYPE_F32, ag->inter_max}, {&d->hout, LMC_DTYPE_F32, d->B}, {&d->logits, LMC_DTYPE_F32, d->V},
        {&d->cl, LMC_DTYPE_F32, d->ordered ? d->nc : 1}, {&d->tok, LMC_DTYPE_I32, 1}, {&d->pos, LMC_DTYPE_I32, 1},
        {&d->pos_att, LMC_DTYPE_I32, 1}, {&d->seq, LMC_DTYPE_I32, 1}, {&d->sel_ids, LMC_DTYPE_I32, n_sel},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        *plan[i].t = lmc_tensor_make(plan[i].type, plan[i].ne0, 1, 1, 1);
        LMC_TRY(d->be->i->alloc(d->be, plan[i].t));
    }
    d->sel_emb = lmc_tensor_make(LMC_DTYPE_F32, d->H, n_sel, 1, 1);
    LMC_TRY(d->be->i->alloc(d->be, &d->sel_emb));
    d->chain = d->be->i->argmax && (!d->ordered || d->emb_ord.data);
    if (d->chain) {
        d->toks = lmc_tensor_make(LMC_DTYPE_I32, LMC_G4MTP_CHAIN + 1, 1, 1, 1);
        LMC_TRY(d->be->i->alloc(d->be, &d->toks));
    }
    if (d->chain && d->ordered) {
        d->top = lmc_tensor_make(LMC_DTYPE_I32, d->ctk, 1, 1, 1);
        d->top_v = lmc_tensor_make(LMC_DTYPE_F32, d->ctk, 1, 1, 1);
        d->top_st = lmc_tensor_make(LMC_DTYPE_F32, 4, 1, 1, 1);
        LMC_TRY(d->be->i->alloc(d->be, &d->top));
        LMC_TRY(d->be->i->alloc(d->be, &d->top_v));
        LMC_TRY(d->be->i->alloc(d->be, &d->top_st));
        if (!(d->h_top = malloc((size_t)d->ctk * sizeof(int32_t)))) return lmc_fail(LMC_ERR_NOMEM, "drafter scratch");
    }
    d->h_cl = malloc((size_t)(d->ordered ? d->nc : 1) * sizeof(float));
    d->h_emb = malloc((size_t)n_sel * sizeof(float));
    d->h_ids = malloc((size_t)n_sel * sizeof(int32_t));
    d->h_logits = malloc((size_t)d->V * sizeof(float));
    if (!d->h_cl || !d->h_emb || !d->h_ids || !d->h_logits) return lmc_fail(LMC_ERR_NOMEM, "drafter scratch");
    return LMC_OK;
}

lmc_status lmc_g4mtp_load(const char *path, const lmc_model *target, lmc_g4mtp **out) {
    *out = NULL;
    if (!target || !target->g4)
        return lmc_fail(LMC_ERR_ARG, "a gemma4 assistant drafts for a gemma4 target (the target is %s)",
                        target ? target->cfg.model_type : "missing");
    lmc_g4mtp *d = calloc(1, sizeof *d);
    lmc_model *am = calloc(1, sizeof *am);
    if (!d || !am) { free(d); free(am); return lmc_fail(LMC_ERR_NOMEM, "drafter"); }
    d->target = target;
    d->tg = target->g4;
    d->am = am;
    d->be = am->be = target->be;
    d->src[0] = d->src[1] = -1;
    const int gguf = lmc_gguf_is_assistant(path);
    lmc_status st = gguf ? open_gguf(d, path, &am->cfg) : lmc_checkpoint_config(path, &am->cfg);
    const lmc_config *c = &am->cfg;
    if (st >= 0 && strcmp(c->outer_model_type, "gemma4_assistant") != 0)
        st = lmc_fail(LMC_ERR_FORMAT, "%s is model_type \"%s\", not a gemma4_assistant", path, c->outer_model_type);
    if (st >= 0 && strcmp(c->model_type, "gemma4_text") != 0)
        st = lmc_fail(LMC_ERR_FORMAT, "the assistant's text_config is \"%s\", not gemma4_text", c->model_type);
    if (st >= 0) {
        int b = 0;
        d->B = jint(c->raw, "backbone_hidden_size", 0);
        d->ordered = lmc_json_get_bool(c->raw, "use_ordered_embeddings", &b) > 0 && b;
        d->nc = jint(c->raw, "num_centroids", 2048);
        d->ctk = jint(c->raw, "centroid_intermediate_top_k", 32);
        d->H = c->hidden_size;
        d->V = c->vocab_size;
        d->Hh = c->n_heads;
        if (d->B <= 0 || d->B > (1 << 20)) st = lmc_fail(LMC_ERR_FORMAT, "assistant config: backbone_hidden_size missing");
        else if (d->ordered && (d->nc <= 0 || d->V % d->nc != 0 || d->ctk <= 0 || d->ctk > d->nc || d->ctk > 4096))
            st = lmc_fail(LMC_ERR_FORMAT, "assistant config: vocabulary %d, %d centroids, top-%d: the vocabulary must be a "
                          "multiple of num_centroids and 0 < centroid_intermediate_top_k ≤ num_centroids", d->V, d->nc, d->ctk);
        d->vpc = d->ordered ? d->V / d->nc : 0;
    }
    if (st >= 0) {
        am->profile.tier = LMC_TIER_TARGETED;
        am->profile.graph = "gemma4_assistant";
        snprintf(am->profile.id, sizeof am->profile.id, "targeted-gemma4:gemma4_assistant");
        st = gguf ? lmc_gemma4_load_tab(am, d->tab, lmc_gguf_assistant_count(d->gguf), 1, bind_extra, d)
                  : lmc_gemma4_load_ex(am, path, 1, bind_extra, d);
    }
    if (st >= 0) {
        d->window = am->g4->window;
        st = check_pairing(d);
    }
    if (st >= 0) st = alloc_scratch(d);
    if (st < 0) {
        lmc_g4mtp_free(d);
        return lmc_fail_context(st, "assistant %s", path);
    }
    *out = d;
    return LMC_OK;
}

void lmc_g4mtp_free(lmc_g4mtp *d) {
    if (!d) return;
    lmc_tensor *all[] = {&d->x2, &d->x, &d->h, &d->o, &d->q, &d->att, &d->gate, &d->up, &d->hout, &d->logits, &d->cl,
                         &d->sel_emb, &d->tok, &d->pos, &d->pos_att, &d->seq, &d->sel_ids, &d->toks,
                         &d->emb_ord, &d->top, &d->top_v, &d->top_st};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data) d->be->i->release(d->be, all[i]);
    for (int i = 0; i < LMC_G4MTP_RECS; i++) lmc_steprec_free(d->be, &d->rec[i].r);
    free(d->h_top);
    free(d->h_logits);
    free(d->h_cl);
    free(d->h_emb);
    free(d->h_ids);
    free(d->ordering);
    lmc_model_free(d->am);
    free(d->tab);
    lmc_gguf_assistant_close(d->gguf);
    free(d);
}

void lmc_g4mtp_get_info(const lmc_g4mtp *d, lmc_g4mtp_info *out) {
    memset(out, 0, sizeof *out);
    out->hidden = d->H;
    out->backbone_hidden = d->B;
    out->vocab = d->V;
    out->n_layers = d->am->g4->n_layers;
    out->window = d->window;
    out->ordered = d->ordered;
    out->n_centroids = d->ordered ? d->nc : 0;
    out->centroid_top_k = d->ordered ? d->ctk : 0;
    out->src_layer[0] = d->src[0];
    out->src_layer[1] = d->src[1];
    out->chained = d->chain;
}

lmc_g4mtp_kv lmc_g4mtp_target_kv(const lmc_g4mtp *d, const lmc_tensor *k_cache, const lmc_tensor *v_cache, int seq,
                                 int n_kv) {
    lmc_g4mtp_kv kv = {.seq = seq, .n_kv = n_kv};
    for (int t = 0; t < 2; t++) {
        if (d->src[t] < 0) continue;
        kv.k[t] = &k_cache[d->src[t]];
        kv.v[t] = &v_cache[d->src[t]];
    }
    return kv;
}

static void rms(const lmc_g4mtp *d, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w) {
    d->be->i->rms_norm(d->be, y, x, w && w->data ? w : NULL, d->am->g4->eps, 0.0f);
}

/* The k largest of v[0..n) (ties: the lower index first), in descending order: an insertion
 * list of the best k so far (a later index goes after equal values). */
static void top_k(const float *v, int n, int k, int32_t *idx) {
    int have = 0;
    for (int i = 0; i < n; i++) {
        if (have == k && !(v[i] > v[idx[k - 1]])) continue;
        int at = have < k ? have++ : k - 1;
        while (at > 0 && v[i] > v[idx[at - 1]]) {
            idx[at] = idx[at - 1];
            at--;
        }
        idx[at] = i;
    }
}

/* The first index of the largest value (gen/sampler.h's lmc_argmax). */
static int32_t argmax_row(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static lmc_status check_call(const lmc_g4mtp *d, const lmc_g4mtp_kv *kv, int pos) {
    if (kv->n_kv <= 0) return lmc_fail(LMC_ERR_ARG, "the drafter needs at least one target position");
    if (pos < 0) return lmc_fail(LMC_ERR_RANGE, "negative position %d", pos);
    for (int t = 0; t < 2; t++)
        if (d->src[t] >= 0 && (!kv->k[t] || !kv->v[t] || kv->seq < 0 || kv->seq >= kv->k[t]->ne[2]))
            return lmc_fail(LMC_ERR_ARG, "drafter K/V of the %s layer is missing", t ? "sliding" : "full");
    return LMC_OK;
}

/* The per-call values every step reads from the backend: query position, attended length, sequence. */
static void set_call(lmc_g4mtp *d, const lmc_g4mtp_kv *kv, int pos) {
    lmc_backend *be = d->be;
    int32_t pa = kv->n_kv - 1;
    be->i->set(be, &d->pos, &pos, 0, 4);
    be->i->set(be, &d->pos_att, &pa, 0, 4);
    be->i->set(be, &d->seq, &kv->seq, 0, 4);
}

/* pre_projection of d->x2, the decoder layers over the shared K/V, the final norm into d->h. */
static void layers(lmc_g4mtp *d, const lmc_g4mtp_kv *kv) {
    const lmc_gemma4 *ag = d->am->g4;
    lmc_backend *be = d->be;
    be->i->matmul(be, &d->x, &d->pre_proj, &d->x2);
    int h_normed = 0; /* h holds this layer's input norm (fused with the last layer's residual add) */
    for (int il = 0; il < ag->n_layers; il++) {
        const lmc_g4_layer *L = &ag->layers[il];
        const int t = L->sliding, hd = L->hd;
        lmc_tensor q = lmc_tensor_make(LMC_DTYPE_F32, (int64_t)d->Hh * hd, 1, 1, 1), att = q;
        q.data = d->q.data;
        att.data = d->att.data;
        lmc_rope_op rope = {.n_rot = ag->n_rot[t], .attn_factor = 1.0f, .inv_freq = &ag->rope_freq[t]};
        if (!h_normed) rms(d, &d->h, &d->x, &L->attn_norm);
        h_normed = 0;
        be->i->matmul(be, &q, &L->wq, &d->h);
        lmc_tensor qh = lmc_tensor_reshape(&q, hd, d->Hh, 1, 1);
        rms(d, &qh, &qh, &L->q_norm);
        be->i->rope(be, &qh, &d->pos, &rope);
        lmc_tensor kc = lmc_g4_cache_view(kv->k[t], L->n_kv * hd), vc = lmc_g4_cache_view(kv->v[t], L->n_kv * hd);
        /* bidirectional over the shared K/V: full layers see [0, n_kv); transformers' sliding mask
         * (|q - kv| ≤ window, flipped onto the newest entries) keeps the last window + 1 */
        lmc_attn_op ao = {.n_head = d->Hh, .n_kv_head = L->n_kv, .head_dim = hd, .scale = 1.0f,
                          .window = t ? d->window + 1 : 0};
        be->i->attention(be, &att, &q, &kc, &vc, &d->pos_att, &d->seq, &ao);
        be->i->matmul(be, &d->o, &L->wo, &att);
        rms(d, &d->o, &d->o, &L->attn_post_norm);
        lmc_tensor gate = lmc_tensor_make(LMC_DTYPE_F32, L->inter, 1, 1, 1), up = gate;
        gate.data = d->gate.data;
        up.data = d->up.data;
        lmc_g4_add_rms(ag, be, &d->x, &d->o, &d->h, &L->ffn_norm);
        lmc_g4_matmul2(be, &gate, &L->w_gate, &up, &L->w_up, &d->h);
        be->i->act_mul(be, &gate, &gate, &up, d->am->act);
        be->i->matmul(be, &d->o, &L->w_down, &gate);
        rms(d, &d->o, &d->o, &L->ffn_post_norm);
        if (L->scalar == 1.0f) {
            /* x += o with the next layer's input norm (the final norm after the last layer) */
            lmc_g4_add_rms(ag, be, &d->x, &d->o, &d->h, il + 1 < ag->n_layers ? &ag->layers[il + 1].attn_norm
                                                                             : &d->am->out_norm);
            h_normed = 1;
            continue;
        }
        be->i->add(be, &d->x, &d->x, &d->o);
        be->i->scale(be, &d->x, &d->x, L->scalar);
    }
    if (!h_normed) rms(d, &d->h, &d->x, &d->am->out_norm);
}

/* The drafter on d->x2 (already filled). */
static lmc_status run(lmc_g4mtp *d, const lmc_g4mtp_kv *kv, int pos, float *logits, float *h_out) {
    lmc_backend *be = d->be;
    LMC_TRY(check_call(d, kv, pos));
    set_call(d, kv, pos);
    layers(d, kv);
    be->i->matmul(be, &d->hout, &d->post_proj, &d->h);
    if (h_out) be->i->get(be, h_out, &d->hout, 0, (size_t)d->B * 4);
    if (!d->ordered) {
        be->i->matmul(be, &d->logits, &d->am->lm_head, &d->h);
        if (logits) be->i->get(be, logits, &d->logits, 0, (size_t)d->V * 4);
        return be->i->sync(be);
    }
    /* centroid head: top-k centroids → their tokens (token_ordering viewed [nc, V/nc]) → dot products */
    const int n_sel = d->ctk * d->vpc;
    int32_t top[4096];
    be->i->matmul(be, &d->cl, &d->centroids, &d->h);
    be->i->get(be, d->h_cl, &d->cl, 0, (size_t)d->nc * 4);
    LMC_TRY(be->i->sync(be));
    top_k(d->h_cl, d->nc, d->ctk < 4096 ? d->ctk : 4096, top);
    for (int j = 0; j < d->ctk; j++)
        for (int i = 0; i < d->vpc; i++) d->h_ids[j * d->vpc + i] = d->ordering[(size_t)top[j] * d->vpc + i];
    if (!logits) return LMC_OK;
    /* the selected tokens' head rows gathered on the backend, then one product with hn there:
     * only their n_sel logits come back (the head rows themselves never leave the backend) */
    be->i->set(be, &d->sel_ids, d->h_ids, 0, (size_t)n_sel * 4);
    be->i->get_rows(be, &d->sel_emb, &d->am->lm_head, &d->sel_ids, 1.0f);
    lmc_tensor sel_lg = lmc_tensor_make(LMC_DTYPE_F32, n_sel, 1, 1, 1);
    sel_lg.data = d->logits.data; /* the dense head's [V] logits are unused by this head */
    be->i->matmul(be, &sel_lg, &d->sel_emb, &d->h);
    be->i->get(be, d->h_emb, &sel_lg, 0, (size_t)n_sel * 4);
    LMC_TRY(be->i->sync(be));
    float mn = INFINITY;
    for (int s = 0; s < n_sel; s++)
        if (d->h_emb[s] < mn) mn = d->h_emb[s];
    for (int i = 0; i < d->V; i++) logits[i] = mn - 1.0f;
    for (int s = 0; s < n_sel; s++) logits[d->h_ids[s]] = d->h_emb[s];
    return LMC_OK;
}

/* ---------------------------------------------------------------- drafts chained on the backend */

/* n chained steps (dense head) or one step (centroid head) from toks[0], recordable: no host work
 * between the ops, every per-call value in backend tensors. */
typedef struct chain_call {
    lmc_g4mtp *d;
    const lmc_g4mtp_kv *kv;
    int n;
} chain_call;

static lmc_tensor i32_at(const lmc_tensor *t, int i) {
    lmc_tensor r = lmc_tensor_make(LMC_DTYPE_I32, 1, 1, 1, 1);
    r.data = (int32_t *)t->data + i;
    return r;
}

static void chain_body(void *ud) {
    const chain_call *c = ud;
    lmc_g4mtp *d = c->d;
    lmc_backend *be = d->be;
    lmc_tensor e = lmc_tensor_make(LMC_DTYPE_F32, d->B, 1, 1, 1), hn = e;
    e.data = d->x2.data;
    hn.data = (float *)d->x2.data + d->B;
    for (int i = 0; i < c->n; i++) {
        /* the target's scaled embedding of toks[i], then the layers on [embedding, h_prev] */
        lmc_tensor ti = i32_at(&d->toks, i);
        be->i->get_rows(be, &e, &d->target->tok_embd, &ti, d->tg->embed_scale);
        layers(d, c->kv);
        be->i->matmul(be, &hn, &d->post_proj, &d->h); /* the next step's h_prev, in place */
        if (!d->ordered) {
            lmc_tensor tn = i32_at(&d->toks, i + 1);
            be->i->matmul(be, &d->logits, &d->am->lm_head, &d->h);
            be->i->argmax(be, &tn, &d->logits);
            continue;
        }
        /* centroid head: top-k centroids, their candidates' head rows (one gather from the reordered
         * head), the candidates' logits; the host picks among them */
        const int n_sel = d->ctk * d->vpc;
        lmc_tensor rows = lmc_tensor_make(LMC_DTYPE_F32, (int64_t)d->H * d->vpc, d->ctk, 1, 1);
        rows.data = d->sel_emb.data;
        lmc_tensor sel_lg = lmc_tensor_make(LMC_DTYPE_F32, n_sel, 1, 1, 1);
        sel_lg.data = d->logits.data;
        be->i->matmul(be, &d->cl, &d->centroids, &d->h);
        be->i->topk(be, &d->top, &d->top_v, &d->top_st, &d->cl, d->ctk, 1.0f);
        be->i->get_rows(be, &rows, &d->emb_ord, &d->top, 1.0f);
        be->i->matmul(be, &sel_lg, &d->sel_emb, &d->h);
    }
}

/* Run chain_body, from a recording where the backend has them (one per chain length and KV caches). */
static void chain_run(lmc_g4mtp *d, const lmc_g4mtp_kv *kv, int n) {
    lmc_backend *be = d->be;
    chain_call c = {d, kv, n};
    if (be->i->graph_begin) {
        uintptr_t key[4];
        for (int t = 0; t < 2; t++) {
            key[t] = kv->k[t] ? (uintptr_t)kv->k[t]->data : 0;
            key[2 + t] = kv->v[t] ? (uintptr_t)kv->v[t]->data : 0;
        }
        const lmc_tensor *c0 = kv->k[0] ? kv->k[0] : kv->k[1];
        struct mtp_rec *r = NULL, *victim = &d->rec[0];
        for (int i = 0; i < LMC_G4MTP_RECS; i++) {
            struct mtp_rec *x = &d->rec[i];
            if (x->n == n && !memcmp(x->kv, key, sizeof key) && x->n_ctx == c0->ne[1] && x->n_seq == c0->ne[2]) {
                r = x;
                break;
            }
            if (x->used < victim->used) victim = x;
        }
        if (!r) {
            lmc_steprec_free(be, &victim->r);
            *victim = (struct mtp_rec){.n = n, .n_ctx = c0->ne[1], .n_seq = c0->ne[2]};
            memcpy(victim->kv, key, sizeof key);
            r = victim;
        }
        r->used = ++d->rec_clock;
        if (lmc_steprec_play(be, &r->r, chain_body, &c)) return;
    }
    chain_body(&c);
}

/* The centroid head's choice from the candidates' logits (h_emb) of the top centroids (h_top):
 * the host loop's argmax over the full row exactly (every other id sits below the candidates;
 * equal logits: the lower token id). */
static int32_t centroid_pick(const lmc_g4mtp *d) {
    int32_t best = -1;
    float bv = 0;
    for (int j = 0; j < d->ctk; j++)
        for (int i = 0; i < d->vpc; i++) {
            const int32_t id = d->ordering[(size_t)d->h_top[j] * d->vpc + i];
            const float v = d->h_emb[j * d->vpc + i];
            if (best < 0 || v > bv || (v == bv && id < best)) { best = id; bv = v; }
        }
    return best;
}

lmc_status lmc_g4mtp_draft(lmc_g4mtp *d, const lmc_g4mtp_kv *kv, int32_t token, const float *h_prev, int pos, int n,
                           int32_t *tokens) {
    if (token < 0 || token >= d->V) return lmc_fail(LMC_ERR_RANGE, "token id %d is outside the vocabulary", token);
    if (n <= 0) return LMC_OK;
    LMC_TRY(check_call(d, kv, pos));
    lmc_backend *be = d->be;
    if (!d->chain) {
        /* the host loop: logits back per step, argmax here */
        float *h = malloc((size_t)d->B * sizeof *h);
        if (!h) return lmc_fail(LMC_ERR_NOMEM, "drafter");
        memcpy(h, h_prev, (size_t)d->B * sizeof *h);
        lmc_status st = LMC_OK;
        for (int i = 0; i < n && st >= 0; i++) {
            st = lmc_g4mtp_step(d, kv, token, h, pos, d->h_logits, h);
            if (st >= 0) token = tokens[i] = argmax_row(d->h_logits, d->V);
        }
        free(h);
        return st;
    }
    set_call(d, kv, pos);
    be->i->set(be, &d->x2, h_prev, (size_t)d->B * 4, (size_t)d->B * 4);
    for (int done = 0; done < n;) {
        be->i->set(be, &d->toks, &token, 0, 4);
        if (!d->ordered) {
            const int c = n - done < LMC_G4MTP_CHAIN ? n - done : LMC_G4MTP_CHAIN;
            chain_run(d, kv, c);
            be->i->get(be, tokens + done, &d->toks, 4, (size_t)c * 4);
            done += c;
        } else {
            const int n_sel = d->ctk * d->vpc;
            chain_run(d, kv, 1);
            be->i->get(be, d->h_top, &d->top, 0, (size_t)d->ctk * 4);
            be->i->get(be, d->h_emb, &d->logits, 0, (size_t)n_sel * 4);
            LMC_TRY(be->i->sync(be));
            tokens[done++] = centroid_pick(d);
        }
        LMC_TRY(be->i->sync(be));
        token = tokens[done - 1];
        if (token < 0 || token >= d->V)
            return lmc_fail(LMC_ERR_RANGE, "the drafter chose token %d outside the vocabulary", token);
    }
    return LMC_OK;
}

lmc_status lmc_g4mtp_step_embeds(lmc_g4mtp *d, const lmc_g4mtp_kv *kv, const float *x2, int pos, float *logits,
                                 float *h_out) {
    d->be->i->set(d->be, &d->x2, x2, 0, (size_t)2 * d->B * 4);
    return run(d, kv, pos, logits, h_out);
}

lmc_status lmc_g4mtp_step(lmc_g4mtp *d, const lmc_g4mtp_kv *kv, int32_t token, const float *h_prev, int pos,
                          float *logits, float *h_out) {
    if (token < 0 || token >= d->V) return lmc_fail(LMC_ERR_RANGE, "token id %d is outside the vocabulary", token);
    lmc_backend *be = d->be;
    be->i->set(be, &d->tok, &token, 0, 4);
    lmc_tensor e = lmc_tensor_make(LMC_DTYPE_F32, d->B, 1, 1, 1);
    e.data = d->x2.data;
    /* the target's Gemma4TextScaledWordEmbedding, then the target hidden state */
    be->i->get_rows(be, &e, &d->target->tok_embd, &d->tok, d->tg->embed_scale);
    be->i->set(be, &d->x2, h_prev, (size_t)d->B * 4, (size_t)d->B * 4);
    return run(d, kv, pos, logits, h_out);
}
