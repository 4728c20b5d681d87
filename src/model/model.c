/* model.c — profile, weight binding and the weight audit. */
#include "model.h"

#include "core/quant.h"
#include "io/jsonfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct audit {
    const lmc_weights *w;
    uint8_t *used;      /* [count] */
    char missing[1024]; /* names of required tensors not found */
    int n_missing;
} audit;

static void note_missing(audit *a, const char *name) {
    size_t at = strlen(a->missing);
    if (a->n_missing < 8) snprintf(a->missing + at, sizeof a->missing - at, "%s%s", a->n_missing ? ", " : "", name);
    a->n_missing++;
}

static void shape_str(const lmc_weight *t, char *buf, size_t cap) {
    char *p = buf;
    buf[0] = 0;
    for (int i = 0; i < t->n_dims && p < buf + cap - 24; i++)
        p += snprintf(p, (size_t)(buf + cap - p), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
}

/* A checkpoint tensor as the forward will see it. */
typedef struct found_t {
    const lmc_weight *w;                /* the stored tensor (MLX: the packed U32 codes) */
    lmc_dtype dtype;                    /* compute dtype (MLX{bits} for MLX-packed weights) */
    int64_t in;                         /* elements per row */
    const lmc_weight *scales, *biases;  /* MLX affine side tensors */
    int group;
} found_t;

static lmc_status mark(lmc_model *m, audit *a, const char *name, const lmc_weight **t) {
    *t = lmc_weights_find(m->weights, name);
    if (!*t) return lmc_fail(LMC_ERR_FORMAT, "quantized weight is missing %s", name);
    int idx = lmc_weights_index_of(m->weights, *t);
    LMC_ASSERT(idx >= 0);
    a->used[idx] = 1;
    m->weight_bytes += (*t)->nbytes;
    return LMC_OK;
}

/* An MLX affine weight `base`.weight (U32 codes) with `base`.scales and .biases, per the
 * config's quantization block (a per-module entry overrides bits / group size). */
static lmc_status find_mlx(lmc_model *m, audit *a, const char *name, found_t *f) {
    const lmc_config *c = &m->cfg;
    char base[300], n[320];
    size_t len = strlen(name);
    if (len < 7 || strcmp(name + len - 7, ".weight") != 0 || len - 7 >= sizeof base)
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s is U32 but not a quantized weight", name);
    memcpy(base, name, len - 7);
    base[len - 7] = 0;
    int bits = c->quant_bits, group = c->quant_group;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(c->quant, base);
    if (cJSON_IsFalse(o)) return lmc_fail(LMC_ERR_FORMAT, "tensor %s is U32 but config.json leaves it unquantized", name);
    if (cJSON_IsObject(o)) {
        int64_t v;
        if (lmc_json_get_int(o, "bits", &v) > 0) bits = (int)v;
        if (lmc_json_get_int(o, "group_size", &v) > 0) group = (int)v;
    }
    static const lmc_dtype by_bits[9] = {0, 0, LMC_DTYPE_MLX2, LMC_DTYPE_MLX3, LMC_DTYPE_MLX4, LMC_DTYPE_MLX5,
                                         LMC_DTYPE_MLX6, 0, LMC_DTYPE_MLX8};
    if (bits < 2 || bits > 8 || !by_bits[bits] || (group != 32 && group != 64 && group != 128))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: %d-bit groups of %d are not supported", base, bits, group);
    const lmc_weight *t = f->w;
    if (t->n_dims != 2 || (t->shape[1] * 32) % bits)
        return lmc_fail(LMC_ERR_FORMAT, "%s has a shape that does not hold %d-bit codes", name, bits);
    f->dtype = by_bits[bits];
    f->in = t->shape[1] * 32 / bits;
    f->group = group;
    snprintf(n, sizeof n, "%s.scales", base);
    LMC_TRY(mark(m, a, n, &f->scales));
    snprintf(n, sizeof n, "%s.biases", base);
    LMC_TRY(mark(m, a, n, &f->biases));
    for (int k = 0; k < 2; k++) {
        const lmc_weight *s = k ? f->biases : f->scales;
        if (s->n_dims != 2 || s->shape[0] != t->shape[0] || s->shape[1] * group != f->in ||
            (s->dtype != LMC_DTYPE_F32 && s->dtype != LMC_DTYPE_F16 && s->dtype != LMC_DTYPE_BF16))
            return lmc_fail(LMC_ERR_FORMAT, "%s: %s must be F32/F16/BF16 [%lld, %lld]", base, s->name,
                            (long long)t->shape[0], (long long)(f->in / group));
    }
    return LMC_OK;
}

/* Find tensor `name` with torch shape [ne1, ne0] (ne1 = 0: 1-D [ne0]), mark it
 * consumed and check dtype and shape. f->w = NULL when absent (an error
 * recorded in the audit only when required). */
static lmc_status find(lmc_model *m, audit *a, const char *name, int64_t ne0, int64_t ne1, int required, found_t *f) {
    memset(f, 0, sizeof *f);
    const lmc_weight *t = lmc_weights_find(m->weights, name);
    if (!t) {
        if (required) note_missing(a, name);
        return LMC_OK;
    }
    int idx = lmc_weights_index_of(m->weights, t);
    LMC_ASSERT(idx >= 0);
    a->used[idx] = 1;
    f->w = t;
    f->dtype = t->dtype;
    f->in = t->n_dims == 2 ? t->shape[1] : t->shape[0];
    if (t->dtype == LMC_DTYPE_U32 && m->cfg.quant_bits && ne1) {
        LMC_TRY(find_mlx(m, a, name, f));
    } else {
        int ok_type = t->dtype == LMC_DTYPE_F32 || t->dtype == LMC_DTYPE_F16 || t->dtype == LMC_DTYPE_BF16 ||
                      (lmc_dtype_is_quant(t->dtype) && !lmc_dtype_is_mlx(t->dtype) && t->n_dims == 2);
        if (!ok_type)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor %s has dtype %s; weights must be F32, F16, BF16, MLX affine "
                            "or a GGUF block type for matrices", name, lmc_dtype_name(t->dtype));
    }
    int ok = ne1 ? (t->n_dims == 2 && t->shape[0] == ne1 && f->in == ne0) : (t->n_dims == 1 && t->shape[0] == ne0);
    if (!ok) {
        char got[128];
        shape_str(t, got, sizeof got);
        if (ne1)
            return lmc_fail(LMC_ERR_FORMAT, "tensor %s has shape [%s]%s, expected [%lld, %lld] from config.json", name,
                            got, f->scales ? " (packed)" : "", (long long)ne1, (long long)ne0);
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s has shape [%s], expected [%lld] from config.json", name, got,
                        (long long)ne0);
    }
    m->weight_bytes += t->nbytes;
    m->n_params += ne1 ? ne0 * ne1 : ne0;
    return LMC_OK;
}

/* Rows [row0, row0 + n) of a found 2-D (or 1-D: elements) tensor as a weight on the backend. */
static lmc_status view_rows(lmc_model *m, const found_t *f, int64_t row0, int64_t n, lmc_tensor *out) {
    const lmc_weight *t = f->w;
    if (t->n_dims == 1) *out = lmc_tensor_make(t->dtype, n, 1, 1, 1);
    else *out = lmc_tensor_make(f->dtype, f->in, n, 1, 1);
    size_t off = (size_t)row0 * (t->n_dims == 2 ? lmc_dtype_row_bytes(f->dtype, f->in) : lmc_dtype_size(t->dtype));
    if (f->scales) {
        /* the side tensors' rows follow the weight's rows */
        if (m->n_mlx_aux >= m->cap_mlx_aux) return lmc_fail(LMC_ERR_NOMEM, "too many quantized views");
        lmc_quant_mlx *q = &m->mlx_aux[m->n_mlx_aux++];
        q->group_size = f->group;
        const lmc_weight *side[2] = {f->scales, f->biases};
        lmc_tensor *dst[2] = {&q->scales, &q->biases};
        for (int k = 0; k < 2; k++) {
            int64_t per_row = f->in / f->group;
            *dst[k] = lmc_tensor_make(side[k]->dtype, per_row, n, 1, 1);
            size_t soff = (size_t)row0 * (size_t)per_row * lmc_dtype_size(side[k]->dtype);
            LMC_TRY(m->be->i->bind_weight(m->be, dst[k], (const char *)side[k]->data + soff));
        }
        out->aux = q;
        LMC_TRY(lmc_quant_mlx_check(f->dtype, f->in, n, q));
    }
    return m->be->i->bind_weight(m->be, out, (const char *)t->data + off);
}

/* Bind a whole tensor (see find). */
static lmc_status bind(lmc_model *m, audit *a, const char *name, int64_t ne0, int64_t ne1, int required,
                       lmc_tensor *out) {
    memset(out, 0, sizeof *out);
    found_t f;
    LMC_TRY(find(m, a, name, ne0, ne1, required, &f));
    if (!f.w) return LMC_OK;
    return view_rows(m, &f, 0, ne1 ? ne1 : ne0, out);
}

const char *lmc_model_drop_rule(const lmc_model *m, const char *name) {
    size_t n = strlen(name);
    const char *suffix = "rotary_emb.inv_freq";
    if (n >= strlen(suffix) && strcmp(name + n - strlen(suffix), suffix) == 0)
        return "rotary inv_freq buffer (recomputed by the rope factory)";
    if (m->cfg.tie_word_embeddings && strcmp(name, m->lm_head_name ? m->lm_head_name : "lm_head.weight") == 0)
        return "lm_head tied to embed_tokens (tie_word_embeddings)";
    const lmc_wrapper *w = m->profile.wrapper;
    for (int i = 0; w && i < 6 && w->drop_prefixes[i]; i++)
        if (!strncmp(name, w->drop_prefixes[i], strlen(w->drop_prefixes[i])))
            return "non-text tower of a multimodal checkpoint (lmc runs its text stack)";
    return NULL;
}

/* A norm weight (and, for LayerNorm, its optional bias) named `base`. */
static lmc_status bind_norm(lmc_model *m, audit *a, const char *base, int64_t d, int64_t rows, lmc_tensor *w,
                            lmc_tensor *b) {
    char n[320];
    memset(b, 0, sizeof *b);
    memset(w, 0, sizeof *w);
    if (m->profile.arch->norm_no_weight) return LMC_OK; /* parameter-free norm */
    snprintf(n, sizeof n, "%s.weight", base);
    LMC_TRY(bind(m, a, n, d, rows, 1, w));
    if (m->profile.arch->norm == LMC_NORM_LAYER) {
        snprintf(n, sizeof n, "%s.bias", base);
        LMC_TRY(bind(m, a, n, d, rows, 0, b));
    }
    return LMC_OK;
}

/* A linear weight [in → out] named `base` with an optional bias. */
static lmc_status bind_linear(lmc_model *m, audit *a, const char *base, int64_t in, int64_t out, int bias,
                              lmc_tensor *w, lmc_tensor *b) {
    char n[320];
    snprintf(n, sizeof n, "%s.weight", base);
    LMC_TRY(bind(m, a, n, in, out, 1, w));
    memset(b, 0, sizeof *b);
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", base);
        LMC_TRY(bind(m, a, n, out, 0, 1, b));
    }
    return LMC_OK;
}

/* A fused weight [in → Σ parts] split into row views (q|k|v or gate|up), with optional fused bias. */
static lmc_status bind_fused(lmc_model *m, audit *a, const char *base, int64_t in, const int64_t *parts, int n_parts,
                             int bias, lmc_tensor **ws, lmc_tensor **bs) {
    char n[320];
    int64_t total = 0;
    for (int i = 0; i < n_parts; i++) total += parts[i];
    found_t t, tb = {0};
    snprintf(n, sizeof n, "%s.weight", base);
    LMC_TRY(find(m, a, n, in, total, 1, &t));
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", base);
        LMC_TRY(find(m, a, n, total, 0, 1, &tb));
    }
    int64_t row = 0;
    for (int i = 0; i < n_parts; i++) {
        memset(ws[i], 0, sizeof *ws[i]);
        memset(bs[i], 0, sizeof *bs[i]);
        if (t.w) LMC_TRY(view_rows(m, &t, row, parts[i], ws[i]));
        if (tb.w) LMC_TRY(view_rows(m, &tb, row, parts[i], bs[i]));
        row += parts[i];
    }
    return LMC_OK;
}

static lmc_status bind_layer(lmc_model *m, audit *a, int il) {
    const lmc_config *c = &m->cfg;
    const lmc_arch *ar = m->profile.arch;
    const lmc_names *nm = ar->names;
    lmc_layer *L = &m->layers[il];
    const int64_t D = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    const int64_t q_dim = (int64_t)c->n_heads * hd, kv_dim = (int64_t)c->n_kv_heads * hd;
    int use_bias = c->use_bias < 0 ? ar->use_bias_default : c->use_bias;
    int qkv_bias = 0, o_bias = 0, mlp_bias = 0;
    switch (ar->bias) {
    case LMC_BIAS_FROM_CONFIG:
        qkv_bias = c->attention_bias;
        o_bias = c->attention_out_bias >= 0 ? c->attention_out_bias : c->attention_bias;
        mlp_bias = c->mlp_bias;
        break;
    case LMC_BIAS_QKV: qkv_bias = 1; break;
    case LMC_BIAS_USE_BIAS: qkv_bias = o_bias = mlp_bias = use_bias; break;
    case LMC_BIAS_ALL: qkv_bias = o_bias = mlp_bias = 1; break;
    case LMC_BIAS_QKV_CONFIG: qkv_bias = c->attention_bias; mlp_bias = c->mlp_bias; break;
    }
    char p[256], n[320];
    snprintf(p, sizeof p, "%slayers.%d.", m->prefix, il);
#define NAME(s) (snprintf(n, sizeof n, "%s%s", p, s), n)
    if (nm->attn_norm) LMC_TRY(bind_norm(m, a, NAME(nm->attn_norm), D, 0, &L->attn_norm, &L->attn_norm_b));
    if (nm->attn_post_norm)
        LMC_TRY(bind_norm(m, a, NAME(nm->attn_post_norm), D, 0, &L->attn_post_norm, &L->attn_post_norm_b));
    if (nm->ffn_norm) LMC_TRY(bind_norm(m, a, NAME(nm->ffn_norm), D, 0, &L->ffn_norm, &L->ffn_norm_b));
    if (nm->ffn_post_norm)
        LMC_TRY(bind_norm(m, a, NAME(nm->ffn_post_norm), D, 0, &L->ffn_post_norm, &L->ffn_post_norm_b));
    if (nm->qkv) {
        int64_t parts[3] = {q_dim, kv_dim, kv_dim};
        lmc_tensor *ws[3] = {&L->wq, &L->wk, &L->wv}, *bs[3] = {&L->bq, &L->bk, &L->bv};
        LMC_TRY(bind_fused(m, a, NAME(nm->qkv), D, parts, 3, qkv_bias, ws, bs));
    } else {
        LMC_TRY(bind_linear(m, a, NAME(nm->q), D, q_dim, qkv_bias, &L->wq, &L->bq));
        LMC_TRY(bind_linear(m, a, NAME(nm->k), D, kv_dim, qkv_bias, &L->wk, &L->bk));
        LMC_TRY(bind_linear(m, a, NAME(nm->v), D, kv_dim, qkv_bias, &L->wv, &L->bv));
    }
    LMC_TRY(bind_linear(m, a, NAME(nm->o), q_dim, D, o_bias, &L->wo, &L->bo));
    int qk = ar->qk_norm != LMC_QK_NORM_NONE && (!ar->qk_norm_optional || c->use_qk_norm > 0);
    if (qk) {
        lmc_tensor unused;
        switch (ar->qk_norm) {
        case LMC_QK_NORM_HEAD:
            LMC_TRY(bind_norm(m, a, NAME(nm->q_norm), hd, 0, &L->q_norm, &L->q_norm_b));
            LMC_TRY(bind_norm(m, a, NAME(nm->k_norm), hd, 0, &L->k_norm, &L->k_norm_b));
            break;
        case LMC_QK_NORM_FULL:
            LMC_TRY(bind_norm(m, a, NAME(nm->q_norm), q_dim, 0, &L->q_norm, &unused));
            LMC_TRY(bind_norm(m, a, NAME(nm->k_norm), kv_dim, 0, &L->k_norm, &unused));
            break;
        case LMC_QK_NORM_PER_HEAD_LN:
            LMC_TRY(bind_norm(m, a, NAME(nm->q_norm), hd, c->n_heads, &L->q_norm, &unused));
            LMC_TRY(bind_norm(m, a, NAME(nm->k_norm), hd, c->n_kv_heads, &L->k_norm, &unused));
            break;
        case LMC_QK_NORM_NONE: break;
        }
    }
    switch (ar->mlp) {
    case LMC_MLP_GATED:
        LMC_TRY(bind_linear(m, a, NAME(nm->gate), D, I, mlp_bias, &L->w_gate, &L->b_gate));
        LMC_TRY(bind_linear(m, a, NAME(nm->up), D, I, mlp_bias, &L->w_up, &L->b_up));
        break;
    case LMC_MLP_GATED_FUSED: {
        int64_t parts[2] = {I, I};
        lmc_tensor *ws[2] = {&L->w_gate, &L->w_up}, *bs[2] = {&L->b_gate, &L->b_up};
        LMC_TRY(bind_fused(m, a, NAME(nm->gate_up), D, parts, 2, mlp_bias, ws, bs));
    } break;
    case LMC_MLP_PLAIN:
        LMC_TRY(bind_linear(m, a, NAME(nm->up), D, I, mlp_bias, &L->w_up, &L->b_up));
        break;
    }
    LMC_TRY(bind_linear(m, a, NAME(nm->down), I, D, mlp_bias, &L->w_down, &L->b_down));
#undef NAME
    /* attention kind of this layer */
    int sliding;
    if (c->has_layer_types) sliding = c->layer_sliding[il];
    else if (ar->window == LMC_WINDOW_LAYER_TYPES) {
        int pattern = c->sliding_pattern ? c->sliding_pattern : ar->sliding_pattern;
        sliding = pattern > 0 && (il + 1) % pattern != 0;
    }
    else sliding = ar->window == LMC_WINDOW_WHEN_SET;
    L->window = sliding ? c->sliding_window : 0;
    int nope = c->has_no_rope_layers ? c->layer_nope[il]
             : ar->nope_interval > 0 && (il + 1) % (c->nope_interval ? c->nope_interval : ar->nope_interval) == 0;
    if (ar->nope_full_layers && c->sliding_window > 0 && !sliding) nope = 1;
    L->rope = nope ? -1 : (sliding && L->window ? 1 : 0);
    return LMC_OK;
}

/* Every tensor consumed or dropped by a rule; every required one present. */
static lmc_status finish_audit(lmc_model *m, audit *a) {
    char extra[1024] = "";
    int n_extra = 0;
    for (int i = 0; i < lmc_weights_count(m->weights); i++) {
        if (a->used[i]) continue;
        const char *name = lmc_weights_at(m->weights, i)->name;
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
    char n[256];
    LMC_TRY(lmc_weights_open(dir, &m->weights));
    /* the decoder prefix: the descriptor's, or the wrapper layout this checkpoint uses */
    m->prefix = m->profile.arch->prefix;
    m->lm_head_name = "lm_head.weight";
    const lmc_wrapper *w = m->profile.wrapper;
    for (int i = 0; w && i < 3 && w->prefixes[i]; i++) {
        snprintf(n, sizeof n, "%sembed_tokens.weight", w->prefixes[i]);
        if (lmc_weights_find(m->weights, n)) {
            m->prefix = w->prefixes[i];
            m->lm_head_name = w->lm_heads[i];
            break;
        }
    }
    const char *pre = m->prefix;
    audit a = {.w = m->weights};
    m->cap_mlx_aux = 3 * lmc_weights_count(m->weights) + 3; /* a fused weight gives up to 3 views */
    m->mlx_aux = calloc((size_t)m->cap_mlx_aux, sizeof *m->mlx_aux);
    if (!m->mlx_aux) return lmc_fail(LMC_ERR_NOMEM, "quantized weight table");
    a.used = calloc((size_t)lmc_weights_count(m->weights) + 1, 1);
    if (!a.used) return lmc_fail(LMC_ERR_NOMEM, "audit table");
    lmc_status st = LMC_OK;
    snprintf(n, sizeof n, "%sembed_tokens.weight", pre);
    st = bind(m, &a, n, c->hidden_size, c->vocab_size, 1, &m->tok_embd);
    if (st >= 0) {
        snprintf(n, sizeof n, "%s%s", pre, m->profile.arch->out_norm ? m->profile.arch->out_norm : "norm");
        st = bind_norm(m, &a, n, c->hidden_size, 0, &m->out_norm, &m->out_norm_b);
    }
    if (st >= 0 && !c->tie_word_embeddings) st = bind(m, &a, m->lm_head_name, c->hidden_size, c->vocab_size, 1, &m->lm_head);
    if (st >= 0 && c->tie_word_embeddings) m->lm_head = m->tok_embd;
    if (st >= 0 && m->profile.arch->lm_head_bias)
        st = bind(m, &a, "lm_head.bias", c->vocab_size, 0, 1, &m->lm_head_b);
    for (int il = 0; st >= 0 && il < c->n_layers; il++) st = bind_layer(m, &a, il);
    if (st >= 0) st = finish_audit(m, &a);
    free(a.used);
    return st;
}

lmc_status lmc_model_load(const char *dir, lmc_backend *be, lmc_model **out) {
    lmc_model *m = calloc(1, sizeof *m);
    if (!m) return lmc_fail(LMC_ERR_NOMEM, "model");
    m->be = be;
    lmc_status st = lmc_checkpoint_config(dir, &m->cfg);
    if (st >= 0) st = lmc_profile_resolve(&m->cfg, &m->profile);
    if (st >= 0) st = lmc_act_from_name(m->cfg.hidden_act, &m->act);
    if (st >= 0 && m->profile.arch->norm_eps_fixed > 0) m->cfg.norm_eps = m->profile.arch->norm_eps_fixed;
    if (st >= 0) st = lmc_rope_build(&m->cfg.rope, m->cfg.head_dim, m->cfg.max_position_embeddings, &m->rope[0]);
    if (st >= 0) st = lmc_rope_build(&m->cfg.rope_local, m->cfg.head_dim, m->cfg.max_position_embeddings, &m->rope[1]);
    if (st >= 0) {
        m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
        if (!m->layers) st = lmc_fail(LMC_ERR_NOMEM, "layers");
    }
    m->embed_scale = (float)m->cfg.embed_mult;
    if (st >= 0 && m->profile.arch->embed_scale_sqrt) m->embed_scale *= sqrtf((float)m->cfg.hidden_size);
    if (st >= 0) st = load_weights(m, dir);
    for (int r = 0; st >= 0 && r < 4; r++) {
        const lmc_rope_table *rt = &m->rope[r / 2];
        lmc_tensor *t = &m->rope_freq[r / 2][r % 2];
        *t = lmc_tensor_make(LMC_DTYPE_F32, rt->n_rot / 2, 1, 1, 1);
        st = be->i->alloc(be, t);
        if (st >= 0) {
            float f[LMC_ROPE_MAX_HALF];
            for (int i = 0; i < rt->n_rot / 2; i++) {
                f[i] = r % 2 ? rt->inv_freq_long[i] : rt->inv_freq[i];
                if (m->profile.arch->rope_negate) f[i] = -f[i]; /* sin(-a) = -sin(a): the flipped rotate_half */
            }
            be->i->set(be, t, f, 0, lmc_tensor_nbytes(t));
        }
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
    for (int r = 0; r < 4; r++)
        if (m->rope_freq[r / 2][r % 2].data) m->be->i->release(m->be, &m->rope_freq[r / 2][r % 2]);
    free(m->layers);
    free(m->mlx_aux);
    lmc_weights_close(m->weights);
    lmc_config_free(&m->cfg);
    free(m);
}
