/* model.c — profile, weight binding and the weight audit. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct audit {
    const lmc_st_set *st;
    uint8_t *used;      /* [count] */
    char missing[1024]; /* names of required tensors not found */
    int n_missing;
} audit;

static void note_missing(audit *a, const char *name) {
    size_t at = strlen(a->missing);
    if (a->n_missing < 8) snprintf(a->missing + at, sizeof a->missing - at, "%s%s", a->n_missing ? ", " : "", name);
    a->n_missing++;
}

/* Bind tensor `name` expecting torch shape [ne1, ne0] (ne1 = 0: 1-D [ne0]).
 * required = 0: absence leaves out->data NULL. */
static lmc_status bind(lmc_model *m, audit *a, const char *name, int64_t ne0, int64_t ne1, int required,
                       lmc_tensor *out) {
    memset(out, 0, sizeof *out);
    const lmc_st_tensor *t = lmc_st_find(m->st, name);
    if (!t) {
        if (required) note_missing(a, name);
        return LMC_OK;
    }
    int idx = lmc_st_index_of(m->st, t);
    LMC_ASSERT(idx >= 0);
    a->used[idx] = 1;
    if (t->dtype != LMC_DTYPE_F32 && t->dtype != LMC_DTYPE_F16 && t->dtype != LMC_DTYPE_BF16)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor %s has dtype %s; weights must be F32, F16 or BF16",
                        name, lmc_dtype_name(t->dtype));
    int ok = ne1 ? (t->n_dims == 2 && t->shape[0] == ne1 && t->shape[1] == ne0)
                 : (t->n_dims == 1 && t->shape[0] == ne0);
    if (!ok) {
        char got[128] = "", *p = got;
        for (int i = 0; i < t->n_dims && p < got + 100; i++)
            p += snprintf(p, (size_t)(got + sizeof got - p), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (ne1)
            return lmc_fail(LMC_ERR_FORMAT, "tensor %s has shape [%s], expected [%lld, %lld] from config.json", name, got,
                            (long long)ne1, (long long)ne0);
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s has shape [%s], expected [%lld] from config.json", name, got,
                        (long long)ne0);
    }
    *out = lmc_tensor_make(t->dtype, ne0, ne1 ? ne1 : 1, 1, 1);
    LMC_TRY(m->be->i->bind_weight(m->be, out, t->data));
    m->weight_bytes += t->nbytes;
    m->n_params += lmc_st_nelem(t);
    return LMC_OK;
}

const char *lmc_model_drop_rule(const lmc_model *m, const char *name) {
    size_t n = strlen(name);
    const char *suffix = "rotary_emb.inv_freq";
    if (n >= strlen(suffix) && strcmp(name + n - strlen(suffix), suffix) == 0)
        return "rotary inv_freq buffer (recomputed by the rope factory)";
    if (m->cfg.tie_word_embeddings && strcmp(name, "lm_head.weight") == 0)
        return "lm_head tied to embed_tokens (tie_word_embeddings)";
    return NULL;
}

static lmc_status bind_layer(lmc_model *m, audit *a, int il) {
    const lmc_config *c = &m->cfg;
    const lmc_arch *ar = m->profile.arch;
    lmc_layer *L = &m->layers[il];
    const int64_t D = c->hidden_size, I = c->intermediate_size;
    const int64_t q_dim = (int64_t)c->n_heads * c->head_dim, kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    int qkv_bias = ar->bias == LMC_BIAS_QKV || c->attention_bias;
    int o_bias = ar->bias == LMC_BIAS_FROM_CONFIG && c->attention_bias;
    char p[256], n[320];
    snprintf(p, sizeof p, "%slayers.%d.", ar->prefix, il);
#define NAME(s) (snprintf(n, sizeof n, "%s%s", p, s), n)
    LMC_TRY(bind(m, a, NAME("input_layernorm.weight"), D, 0, 1, &L->attn_norm));
    LMC_TRY(bind(m, a, NAME("self_attn.q_proj.weight"), D, q_dim, 1, &L->wq));
    LMC_TRY(bind(m, a, NAME("self_attn.k_proj.weight"), D, kv_dim, 1, &L->wk));
    LMC_TRY(bind(m, a, NAME("self_attn.v_proj.weight"), D, kv_dim, 1, &L->wv));
    LMC_TRY(bind(m, a, NAME("self_attn.o_proj.weight"), q_dim, D, 1, &L->wo));
    LMC_TRY(bind(m, a, NAME("self_attn.q_proj.bias"), q_dim, 0, qkv_bias, &L->bq));
    LMC_TRY(bind(m, a, NAME("self_attn.k_proj.bias"), kv_dim, 0, qkv_bias, &L->bk));
    LMC_TRY(bind(m, a, NAME("self_attn.v_proj.bias"), kv_dim, 0, qkv_bias, &L->bv));
    LMC_TRY(bind(m, a, NAME("self_attn.o_proj.bias"), D, 0, o_bias, &L->bo));
    if (ar->qk_norm == LMC_QK_NORM_HEAD_RMS) {
        LMC_TRY(bind(m, a, NAME("self_attn.q_norm.weight"), c->head_dim, 0, 1, &L->q_norm));
        LMC_TRY(bind(m, a, NAME("self_attn.k_norm.weight"), c->head_dim, 0, 1, &L->k_norm));
    }
    LMC_TRY(bind(m, a, NAME("post_attention_layernorm.weight"), D, 0, 1, &L->ffn_norm));
    LMC_TRY(bind(m, a, NAME("mlp.gate_proj.weight"), D, I, 1, &L->w_gate));
    LMC_TRY(bind(m, a, NAME("mlp.up_proj.weight"), D, I, 1, &L->w_up));
    LMC_TRY(bind(m, a, NAME("mlp.down_proj.weight"), I, D, 1, &L->w_down));
    LMC_TRY(bind(m, a, NAME("mlp.gate_proj.bias"), I, 0, c->mlp_bias, &L->b_gate));
    LMC_TRY(bind(m, a, NAME("mlp.up_proj.bias"), I, 0, c->mlp_bias, &L->b_up));
    LMC_TRY(bind(m, a, NAME("mlp.down_proj.bias"), D, 0, c->mlp_bias, &L->b_down));
#undef NAME
    L->window = ar->window == LMC_WINDOW_WHEN_SET ? c->sliding_window : 0;
    return LMC_OK;
}

/* Every tensor consumed or dropped by a rule; every required one present. */
static lmc_status finish_audit(lmc_model *m, audit *a) {
    char extra[1024] = "";
    int n_extra = 0;
    for (int i = 0; i < lmc_st_count(m->st); i++) {
        if (a->used[i]) continue;
        const char *name = lmc_st_at(m->st, i)->name;
        if (lmc_model_drop_rule(m, name)) { m->n_audit_dropped++; continue; }
        size_t at = strlen(extra);
        if (n_extra < 8) snprintf(extra + at, sizeof extra - at, "%s%s", n_extra ? ", " : "", name);
        n_extra++;
    }
    if (a->n_missing)
        return lmc_fail(LMC_ERR_AUDIT, "weight audit: %d required tensor(s) missing: %s%s", a->n_missing, a->missing,
                        a->n_missing > 8 ? ", ..." : "");
    if (n_extra)
        return lmc_fail(LMC_ERR_AUDIT, "weight audit: %d tensor(s) not used by the %s forward: %s%s", n_extra,
                        m->profile.id, extra, n_extra > 8 ? ", ..." : "");
    return LMC_OK;
}

static lmc_status load_weights(lmc_model *m, const char *dir) {
    const lmc_config *c = &m->cfg;
    const char *pre = m->profile.arch->prefix;
    char n[256];
    LMC_TRY(lmc_st_open(dir, &m->st));
    audit a = {.st = m->st};
    a.used = calloc((size_t)lmc_st_count(m->st) + 1, 1);
    if (!a.used) return lmc_fail(LMC_ERR_NOMEM, "audit table");
    lmc_status st = LMC_OK;
    snprintf(n, sizeof n, "%sembed_tokens.weight", pre);
    st = bind(m, &a, n, c->hidden_size, c->vocab_size, 1, &m->tok_embd);
    if (st >= 0) {
        snprintf(n, sizeof n, "%snorm.weight", pre);
        st = bind(m, &a, n, c->hidden_size, 0, 1, &m->out_norm);
    }
    if (st >= 0 && !c->tie_word_embeddings) st = bind(m, &a, "lm_head.weight", c->hidden_size, c->vocab_size, 1, &m->lm_head);
    if (st >= 0 && c->tie_word_embeddings) m->lm_head = m->tok_embd;
    for (int il = 0; st >= 0 && il < c->n_layers; il++) st = bind_layer(m, &a, il);
    if (st >= 0) st = finish_audit(m, &a);
    free(a.used);
    return st;
}

lmc_status lmc_model_load(const char *dir, lmc_backend *be, lmc_model **out) {
    lmc_model *m = calloc(1, sizeof *m);
    if (!m) return lmc_fail(LMC_ERR_NOMEM, "model");
    m->be = be;
    lmc_status st = lmc_config_load(dir, &m->cfg);
    if (st >= 0) st = lmc_profile_resolve(&m->cfg, &m->profile);
    if (st >= 0) st = lmc_act_from_name(m->cfg.hidden_act, &m->act);
    if (st >= 0) st = lmc_rope_build(&m->cfg.rope, m->cfg.head_dim, m->cfg.max_position_embeddings, &m->rope);
    if (st >= 0) {
        m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
        if (!m->layers) st = lmc_fail(LMC_ERR_NOMEM, "layers");
    }
    m->embed_scale = 1.0f;
    if (st >= 0) st = load_weights(m, dir);
    if (st >= 0) {
        m->rope_freq = lmc_tensor_make(LMC_DTYPE_F32, m->rope.n_rot / 2, 1, 1, 1);
        st = be->i->alloc(be, &m->rope_freq);
        if (st >= 0) be->i->set(be, &m->rope_freq, m->rope.inv_freq, 0, lmc_tensor_nbytes(&m->rope_freq));
    }
    if (st < 0) {
        lmc_model_free(m);
        return lmc_fail_context(st, "loading %s", dir);
    }
    *out = m;
    return LMC_OK;
}

void lmc_model_free(lmc_model *m) {
    if (!m) return;
    if (m->rope_freq.data) m->be->i->release(m->be, &m->rope_freq);
    free(m->layers);
    lmc_st_close(m->st);
    lmc_config_free(&m->cfg);
    free(m);
}
