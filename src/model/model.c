/* model.c — profile, weight binding and the weight audit. */
#include "model.h"

#include "model/artifact.h"

#include "gemma4.h"

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
    int bits = c->quant_bits, group = c->quant_group, mxfp4 = c->quant_mxfp4;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(c->quant, base);
    if (cJSON_IsFalse(o)) return lmc_fail(LMC_ERR_FORMAT, "tensor %s is U32 but config.json leaves it unquantized", name);
    if (cJSON_IsObject(o)) {
        int64_t v;
        const char *mode = NULL;
        if (lmc_json_get_int(o, "bits", &v) > 0) bits = (int)v;
        if (lmc_json_get_int(o, "group_size", &v) > 0) group = (int)v;
        if (lmc_json_get_string(o, "mode", &mode) > 0 && mode) {
            if (strcmp(mode, "mxfp4") && strcmp(mode, "affine"))
                return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: quantization mode \"%s\" is not supported", base, mode);
            mxfp4 = !strcmp(mode, "mxfp4");
        }
    }
    if (mxfp4) { /* MXFP4_MLX: U32 codes [out, in/8] and U8 exponents [out, in/32], no biases */
        const lmc_weight *t = f->w;
        if (bits != 4 || group != 32)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: mxfp4 has 4 bits in groups of 32, not %d / %d", base, bits, group);
        if (t->n_dims != 2)
            return lmc_fail(LMC_ERR_FORMAT, "%s has a shape that does not hold 4-bit codes", name);
        f->dtype = LMC_DTYPE_MXFP4_MLX;
        f->in = t->shape[1] * 8;
        f->group = 32;
        snprintf(n, sizeof n, "%s.scales", base);
        LMC_TRY(mark(m, a, n, &f->scales));
        const lmc_weight *s = f->scales;
        if (s->n_dims != 2 || s->shape[0] != t->shape[0] || s->shape[1] * 32 != f->in || s->dtype != LMC_DTYPE_U8)
            return lmc_fail(LMC_ERR_FORMAT, "%s: %s must be U8 [%lld, %lld] (mxfp4 exponents)", base, s->name,
                            (long long)t->shape[0], (long long)(f->in / 32));
        snprintf(n, sizeof n, "%s.biases", base);
        if (lmc_weights_find(m->weights, n))
            return lmc_fail(LMC_ERR_FORMAT, "%s: mxfp4 weights have no biases, but %s is present", base, n);
        return LMC_OK;
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
        memset(q, 0, sizeof *q);
        q->group_size = f->group;
        const lmc_weight *side[2] = {f->scales, f->biases};
        lmc_tensor *dst[2] = {&q->scales, &q->biases};
        for (int k = 0; k < 2; k++) {
            if (!side[k]) continue; /* mxfp4: no biases */
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

/* ---- weights rewritten at load -------------------------------------------------------------
 * Layouts the forward cannot take as views of the file are rewritten once into memory the model
 * owns (a header lmc_weight + its data in one block) and then bound like file tensors: gpt2's
 * Conv1D [in, out] weights transposed, gpt-neox/falcon per-head fused qkv rows regrouped into
 * q | k | v, stablelm's per-head q/k norm tensors gathered into one [H, hd], nemotron's 1 + w.
 * Plain float dtypes (and, for row regrouping, GGUF block rows); MLX-packed ones are refused. */
static lmc_status owned_weight(lmc_model *m, const lmc_weight *like, lmc_dtype dtype, int n_dims, int64_t s0,
                               int64_t s1, size_t nbytes, lmc_weight **out) {
    if (m->n_owned >= m->cap_owned) return lmc_fail(LMC_ERR_NOMEM, "too many rewritten weights");
    const size_t head = (sizeof(lmc_weight) + 63) & ~(size_t)63;
    char *blk = aligned_alloc(64, (head + nbytes + 63) & ~(size_t)63);
    if (!blk) return lmc_fail(LMC_ERR_NOMEM, "rewriting %s", like->name);
    lmc_weight *w = (lmc_weight *)blk;
    memset(w, 0, sizeof *w);
    w->name = like->name;
    w->dtype = dtype;
    w->n_dims = n_dims;
    w->shape[0] = s0;
    w->shape[1] = s1;
    w->data = blk + head;
    w->nbytes = nbytes;
    m->owned[m->n_owned++] = w;
    *out = w;
    return LMC_OK;
}

static int plain_float(lmc_dtype t) { return t == LMC_DTYPE_F32 || t == LMC_DTYPE_F16 || t == LMC_DTYPE_BF16; }

/* f holds a stored [in, out] Conv1D weight (found as ne0 = out, ne1 = in): make it [out, in]. */
static lmc_status transpose_conv1d(lmc_model *m, found_t *f) {
    const lmc_weight *t = f->w;
    if (!plain_float(t->dtype) || f->scales)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: Conv1D weights must be F32, F16 or BF16 to be transposed (got %s)",
                        t->name, lmc_dtype_name(t->dtype));
    const int64_t in = t->shape[0], out = t->shape[1];
    const size_t es = lmc_dtype_size(t->dtype);
    lmc_weight *w;
    LMC_TRY(owned_weight(m, t, t->dtype, 2, out, in, t->nbytes, &w));
    const char *src = t->data;
    char *dst = (char *)w->data;
    for (int64_t i = 0; i < in; i++)
        for (int64_t o = 0; o < out; o++) memcpy(dst + ((size_t)o * in + i) * es, src + ((size_t)i * out + o) * es, es);
    f->w = w;
    f->in = in;
    return LMC_OK;
}

/* Regroup the rows (elements, for a 1-D bias) of a fused qkv stored per KV group as
 * [q × qpk | k | v] · hd into [all q | all k | all v]. */
static lmc_status regroup_qkv(lmc_model *m, found_t *f, int64_t n_kv, int64_t qpk, int64_t hd) {
    const lmc_weight *t = f->w;
    if (f->scales || (t->n_dims == 1 && !plain_float(t->dtype)))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: a per-head fused qkv cannot be regrouped from %s storage", t->name,
                        lmc_dtype_name(t->dtype));
    const int64_t rows = t->n_dims == 2 ? t->shape[0] : t->shape[0];
    const size_t rb = t->n_dims == 2 ? lmc_dtype_row_bytes(f->dtype, f->in) : lmc_dtype_size(t->dtype);
    if (rows != n_kv * (qpk + 2) * hd) return lmc_fail(LMC_ERR_FORMAT, "%s: fused qkv rows do not split into heads", t->name);
    lmc_weight *w;
    LMC_TRY(owned_weight(m, t, t->dtype, t->n_dims, t->shape[0], t->shape[1], (size_t)rows * rb, &w));
    const char *src = t->data;
    char *dst = (char *)w->data;
    int64_t r = 0;
    for (int part = 0; part < 3; part++)          /* q, k, v */
        for (int64_t g = 0; g < n_kv; g++)
            for (int64_t j = 0; j < (part == 0 ? qpk : 1); j++) {
                int64_t old = (g * (qpk + 2) + (part == 0 ? j : qpk + part - 1)) * hd;
                memcpy(dst + (size_t)r * rb, src + (size_t)old * rb, (size_t)hd * rb);
                r += hd;
            }
    f->w = w;
    return LMC_OK;
}

const char *lmc_model_drop_rule(const lmc_model *m, const char *name) {
    size_t n = strlen(name);
    const char *suffix = "rotary_emb.inv_freq";
    if (n >= strlen(suffix) && strcmp(name + n - strlen(suffix), suffix) == 0)
        return "rotary inv_freq buffer (recomputed by the rope factory)";
    if (m->cfg.tie_word_embeddings && strcmp(name, m->lm_head_name ? m->lm_head_name : "lm_head.weight") == 0)
        return "lm_head tied to embed_tokens (tie_word_embeddings)";
    static const char *const masks[] = {".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias"};
    for (size_t i = 0; m->profile.arch && m->profile.arch->mask_buffers && i < sizeof masks / sizeof masks[0]; i++)
        if (n > strlen(masks[i]) && !strcmp(name + n - strlen(masks[i]), masks[i]))
            return "causal-mask buffer saved by older checkpoints (the forward masks causally)";
    int64_t nextn = 0;
    if (lmc_config_int(&m->cfg, "num_nextn_predict_layers", &nextn) > 0 && nextn > 0 && m->prefix) {
        /* multi-token-prediction heads: glm4_moe stores them as layers past the last one,
         * ernie4_5_moe as mtp_* modules; transformers does not load them either */
        size_t pl = strlen(m->prefix);
        int il = -1;
        if (!strncmp(name, m->prefix, pl) && sscanf(name + pl, "layers.%d.", &il) == 1 && il >= m->cfg.n_layers)
            return "multi-token-prediction layer (num_nextn_predict_layers), not part of the forward";
        if (!strncmp(name, m->prefix, pl) && !strncmp(name + pl, "mtp_", 4))
            return "multi-token-prediction module (num_nextn_predict_layers), not part of the forward";
    }
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
    if (m->profile.arch->norm == LMC_NORM_LAYER_PLUS_ONE) {
        /* LayerNorm1P: the weight the norm multiplies by is 1 + w (an f32 copy) */
        found_t f;
        LMC_TRY(find(m, a, n, d, rows, 1, &f));
        if (!f.w) return LMC_OK;
        if (!plain_float(f.w->dtype)) return lmc_fail(LMC_ERR_UNSUPPORTED, "%s must be F32, F16 or BF16", n);
        const int64_t ne = rows ? d * rows : d;
        lmc_weight *o;
        LMC_TRY(owned_weight(m, f.w, LMC_DTYPE_F32, f.w->n_dims, f.w->shape[0], f.w->shape[1], (size_t)ne * 4, &o));
        float *dst = (float *)o->data;
        lmc_to_f32(f.w->dtype, f.w->data, dst, (size_t)ne);
        for (int64_t i = 0; i < ne; i++) dst[i] += 1.0f;
        f.w = o;
        f.dtype = LMC_DTYPE_F32;
        LMC_TRY(view_rows(m, &f, 0, rows ? rows : d, w));
    } else {
        LMC_TRY(bind(m, a, n, d, rows, 1, w));
    }
    if (m->profile.arch->norm == LMC_NORM_LAYER || m->profile.arch->norm == LMC_NORM_LAYER_PLUS_ONE) {
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
    if (m->profile.arch->conv1d) {
        found_t f;
        memset(w, 0, sizeof *w);
        LMC_TRY(find(m, a, n, out, in, 1, &f));
        if (f.w) {
            LMC_TRY(transpose_conv1d(m, &f));
            LMC_TRY(view_rows(m, &f, 0, out, w));
        }
    } else {
        LMC_TRY(bind(m, a, n, in, out, 1, w));
    }
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
    const int conv = m->profile.arch->conv1d;
    LMC_TRY(conv ? find(m, a, n, total, in, 1, &t) : find(m, a, n, in, total, 1, &t));
    if (t.w && conv) LMC_TRY(transpose_conv1d(m, &t));
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", base);
        LMC_TRY(find(m, a, n, total, 0, 1, &tb));
    }
    if (n_parts == 3 && m->profile.qkv_layout == LMC_QKV_GROUPED) {
        /* parts: q_dim, kv_dim, kv_dim; rows stored per KV group */
        const int64_t hd = m->cfg.head_dim, n_kv = m->cfg.n_kv_heads, qpk = m->cfg.n_heads / m->cfg.n_kv_heads;
        if (t.w) LMC_TRY(regroup_qkv(m, &t, n_kv, qpk, hd));
        if (tb.w) LMC_TRY(regroup_qkv(m, &tb, n_kv, qpk, hd));
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

/* A fused expert tensor [E, rows·parts, in] (3-D, float dtype) split into per-expert row views:
 * view p of expert e is rows [(e·parts + p)·rows, +rows) (gate_up: gate then up). */
static lmc_status bind_experts_fused(lmc_model *m, audit *a, const char *name, int64_t E, int64_t rows, int parts,
                                     int64_t in, lmc_tensor **views) {
    const lmc_weight *t = lmc_weights_find(m->weights, name);
    if (!t) {
        note_missing(a, name);
        return LMC_OK;
    }
    a->used[lmc_weights_index_of(m->weights, t)] = 1;
    if (t->dtype != LMC_DTYPE_F32 && t->dtype != LMC_DTYPE_F16 && t->dtype != LMC_DTYPE_BF16)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor %s has dtype %s; fused expert tensors must be F32, F16 or BF16",
                        name, lmc_dtype_name(t->dtype));
    if (t->n_dims != 3 || t->shape[0] != E || t->shape[1] != rows * parts || t->shape[2] != in) {
        char got[128];
        shape_str(t, got, sizeof got);
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s has shape [%s], expected [%lld, %lld, %lld] from config.json", name,
                        got, (long long)E, (long long)(rows * parts), (long long)in);
    }
    m->weight_bytes += t->nbytes;
    m->n_params += E * rows * parts * in;
    const size_t row_bytes = lmc_dtype_row_bytes(t->dtype, in);
    for (int64_t e = 0; e < E; e++) {
        for (int p = 0; p < parts; p++) {
            lmc_tensor *v = &views[p][e];
            *v = lmc_tensor_make(t->dtype, in, rows, 1, 1);
            LMC_TRY(m->be->i->bind_weight(m->be, v, (const char *)t->data + (size_t)(e * parts + p) * rows * row_bytes));
        }
    }
    return LMC_OK;
}

/* A float tensor [ne1, ne0] (ne1 = 0: 1-D [ne0]) bound as an f32 copy the model owns (small
 * parameters the ops read as f32: attention sinks, router and expert biases). */
static lmc_status bind_f32(lmc_model *m, audit *a, const char *name, int64_t ne0, int64_t ne1, lmc_tensor *out) {
    memset(out, 0, sizeof *out);
    found_t f;
    LMC_TRY(find(m, a, name, ne0, ne1, 1, &f));
    if (!f.w) return LMC_OK;
    if (!plain_float(f.w->dtype)) return lmc_fail(LMC_ERR_UNSUPPORTED, "%s must be F32, F16 or BF16", name);
    const int64_t ne = ne1 ? ne0 * ne1 : ne0;
    lmc_weight *o;
    LMC_TRY(owned_weight(m, f.w, LMC_DTYPE_F32, f.w->n_dims, f.w->shape[0], f.w->shape[1], (size_t)ne * 4, &o));
    lmc_to_f32(f.w->dtype, f.w->data, (float *)o->data, (size_t)ne);
    f.w = o;
    f.dtype = LMC_DTYPE_F32;
    return view_rows(m, &f, 0, ne1 ? ne1 : ne0, out);
}

/* MXFP4 experts of Hugging Face's layout (quantization_config.quant_method "mxfp4"): `<name>_blocks`
 * U8 [E, out, in/32, 16] and `<name>_scales` U8 [E, out, in/32], rows = outputs (no transpose),
 * bound per expert in place (weights.h lmc_weight_bind_mxfp4) with the exponents in mlx_aux. */
static lmc_status bind_experts_mxfp4(lmc_model *m, audit *a, const char *name, int64_t E, int64_t in, int64_t out,
                                     lmc_tensor *views) {
    char nb[320], ns[320];
    snprintf(nb, sizeof nb, "%s_blocks", name);
    snprintf(ns, sizeof ns, "%s_scales", name);
    const lmc_weight *b = lmc_weights_find(m->weights, nb), *sc = lmc_weights_find(m->weights, ns);
    if (!sc) {
        note_missing(a, ns);
        return LMC_OK;
    }
    if (!m->cfg.quant_hf_mxfp4)
        return lmc_fail(LMC_ERR_FORMAT, "%s: MXFP4 blocks, but config.json has no quantization_config with quant_method "
                        "\"mxfp4\"", nb);
    a->used[lmc_weights_index_of(m->weights, b)] = 1;
    a->used[lmc_weights_index_of(m->weights, sc)] = 1;
    if (b->n_dims != 4 || b->shape[0] != E || b->shape[1] != out || b->shape[2] * 32 != in) {
        char got[128];
        shape_str(b, got, sizeof got);
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s has shape [%s], expected [%lld, %lld, %lld, 16] from config.json", nb,
                        got, (long long)E, (long long)out, (long long)(in / 32));
    }
    m->weight_bytes += b->nbytes + sc->nbytes;
    m->n_params += E * in * out;
    for (int64_t e = 0; e < E; e++) {
        if (m->n_mlx_aux >= m->cap_mlx_aux) return lmc_fail(LMC_ERR_NOMEM, "too many quantized views");
        LMC_TRY(lmc_weight_bind_mxfp4(m->be, b, sc, e, 0, out, &views[e], &m->mlx_aux[m->n_mlx_aux++]));
    }
    return LMC_OK;
}

/* Input-major fused experts [E, in, out] (gpt-oss gate_up_proj / down_proj, float dtypes) transposed
 * once into [E, out, in] the model owns (a second copy of these tensors in host memory), bound as
 * per-expert [in, out] weights; and their per-expert bias "<name>_bias" [E, out] as an f32 copy. */
static lmc_status bind_experts_in_major(lmc_model *m, audit *a, const char *name, int64_t E, int64_t in, int64_t out,
                                       lmc_tensor *views, lmc_tensor *bias) {
    char n[320];
    snprintf(n, sizeof n, "%s_bias", name);
    LMC_TRY(bind_f32(m, a, n, out, E, bias));
    const lmc_weight *t = lmc_weights_find(m->weights, name);
    if (!t) {
        snprintf(n, sizeof n, "%s_blocks", name);
        if (lmc_weights_find(m->weights, n)) return bind_experts_mxfp4(m, a, name, E, in, out, views);
        note_missing(a, name);
        return LMC_OK;
    }
    a->used[lmc_weights_index_of(m->weights, t)] = 1;
    if (!plain_float(t->dtype))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor %s has dtype %s; these experts must be F32, F16 or BF16", name,
                        lmc_dtype_name(t->dtype));
    if (t->n_dims != 3 || t->shape[0] != E || t->shape[1] != in || t->shape[2] != out) {
        char got[128];
        shape_str(t, got, sizeof got);
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s has shape [%s], expected [%lld, %lld, %lld] from config.json", name,
                        got, (long long)E, (long long)in, (long long)out);
    }
    m->weight_bytes += t->nbytes;
    m->n_params += E * in * out;
    lmc_weight *w;
    LMC_TRY(owned_weight(m, t, t->dtype, 3, E, out, t->nbytes, &w));
    w->shape[2] = in;
    const size_t es = lmc_dtype_size(t->dtype);
    for (int64_t e = 0; e < E; e++) {
        const char *src = (const char *)t->data + (size_t)e * in * out * es;
        char *dst = (char *)w->data + (size_t)e * in * out * es;
        for (int64_t i = 0; i < in; i++)
            for (int64_t o = 0; o < out; o++) memcpy(dst + ((size_t)o * in + i) * es, src + ((size_t)i * out + o) * es, es);
    }
    const size_t row_bytes = lmc_dtype_row_bytes(t->dtype, in);
    for (int64_t e = 0; e < E; e++) {
        views[e] = lmc_tensor_make(t->dtype, in, out, 1, 1);
        LMC_TRY(m->be->i->bind_weight(m->be, &views[e], (const char *)w->data + (size_t)e * out * row_bytes));
    }
    return LMC_OK;
}

/* The router, routed experts (per-expert tensors or fused 3-D ones) and shared expert of sparse layer il. */
static lmc_status bind_moe(lmc_model *m, audit *a, int il, const char *p, int mlp_bias) {
    const lmc_config *c = &m->cfg;
    const lmc_arch *ar = m->profile.arch;
    const lmc_moe_desc *d = ar->moe;
    const int64_t D = c->hidden_size, E = c->n_experts, I = lmc_moe_expert_size(c, ar);
    const int64_t Is = lmc_moe_shared_size(c, ar);
    lmc_moe_layer *M = &m->moe_layers[il];
    lmc_tensor unused;
    if (!m->be->i->moe_route || !m->be->i->matmul_id || !m->be->i->moe_sum)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "the %s backend has no mixture-of-experts ops yet (moe_route, matmul_id, "
                        "moe_sum); run %s on the cpu backend", m->be->i->name, c->model_type);
    char n[300], e0[64];
    m->layers[il].moe = M;
    const lmc_moe_names *nm = d->names[0];
    for (int i = 0; i < 2 && d->names[i]; i++) {
        snprintf(n, sizeof n, "%.200s%.80s.weight", p, d->names[i]->router);
        if (lmc_weights_find(m->weights, n)) { nm = d->names[i]; break; }
    }
    snprintf(n, sizeof n, "%.200s%.90s", p, nm->router);
    LMC_TRY(bind_linear(m, a, n, D, E, 0, &M->router, &unused));
    if (nm->router_bias) {
        snprintf(n, sizeof n, "%.200s%.90s.bias", p, nm->router);
        LMC_TRY(bind_f32(m, a, n, E, 0, &M->router_b));
    }
    if (nm->sel_bias) {
        /* selection bias [E] or [1, E], kept as an f32 copy the model owns */
        snprintf(n, sizeof n, "%.200s%.90s", p, nm->sel_bias);
        const lmc_weight *t = lmc_weights_find(m->weights, n);
        lmc_tensor raw;
        if (t) LMC_TRY(bind(m, a, n, E, t->n_dims == 2 ? 1 : 0, 1, &raw));
        else note_missing(a, n);
        if (t) {
            float *f = malloc((size_t)E * sizeof *f);
            if (!f) return lmc_fail(LMC_ERR_NOMEM, "selection bias");
            /* raw.data lives on the backend (device memory for cuda): read the file's host bytes */
            lmc_tensor_row_to_f32(&(lmc_tensor){.type = raw.type, .ne = {E, 1, 1, 1}, .nb = {raw.nb[0], raw.nb[0] * (size_t)E},
                                                .data = (void *)t->data}, 0, f);
            m->be->i->unbind_weight(m->be, &raw);
            M->sel_bias = lmc_tensor_make(LMC_DTYPE_F32, E, 1, 1, 1);
            lmc_status st = m->be->i->alloc(m->be, &M->sel_bias);
            if (st >= 0) m->be->i->set(m->be, &M->sel_bias, f, 0, (size_t)E * 4);
            free(f);
            LMC_TRY(st);
        }
    }
    lmc_tensor *views = m->moe_views + (size_t)il * 3 * (size_t)E;
    M->gate = nm->e_gate || nm->f_gate_up ? views : NULL;
    M->up = views + E;
    M->down = views + 2 * E;
    snprintf(e0, sizeof e0, nm->expert ? nm->expert : "", 0);
    snprintf(n, sizeof n, "%.170s%.60s%.50s.weight", p, e0, nm->e_down ? nm->e_down : "");
    const int per_expert = nm->expert && lmc_weights_find(m->weights, n);
    if (d->glu_clamp) {
        if (!m->be->i->glu_clamp || !m->be->i->add_bias_id)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "the %s backend has no glu_clamp / add_bias_id ops (needed by %s)",
                            m->be->i->name, c->model_type);
        double v;
        M->glu_limit = lmc_config_double(c, "swiglu_limit", &v) > 0 ? (float)v : 7.0f;
        M->glu_alpha = lmc_config_double(c, "swiglu_alpha", &v) > 0 ? (float)v : 1.702f;
        if (!per_expert) {
            M->gate_up = views;
            M->gate = NULL;
        }
        else if (!m->be->i->glu_clamp_split)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "the %s backend has no glu_clamp_split op (needed by %s experts with "
                            "separate gate and up, as GGUF stores them)", m->be->i->name, c->model_type);
        else if (nm->e_bias) { /* separate gate / up (GGUF): stacked biases [E, out] */
            const char *kinds[3] = {nm->e_gate, nm->e_up, nm->e_down};
            lmc_tensor *bs[3] = {&M->b_gate, &M->b_up, &M->b_down};
            for (int k = 0; k < 3; k++) {
                char bn[120];
                snprintf(bn, sizeof bn, nm->e_bias, kinds[k]);
                snprintf(n, sizeof n, "%.200s%.90s", p, bn);
                LMC_TRY(bind_f32(m, a, n, k == 2 ? D : I, E, bs[k]));
            }
        }
    }
    M->n_expert_params = (M->gate || M->gate_up ? 3 : 2) * D * I;
    if (per_expert) {
        for (int64_t e = 0; e < E; e++) {
            char ep[240];
            snprintf(e0, sizeof e0, nm->expert, (int)e);
            snprintf(ep, sizeof ep, "%.170s%.60s", p, e0);
            if (M->gate) {
                snprintf(n, sizeof n, "%.240s%.50s", ep, nm->e_gate);
                LMC_TRY(bind_linear(m, a, n, D, I, 0, &M->gate[e], &unused));
            }
            snprintf(n, sizeof n, "%.240s%.50s", ep, nm->e_up);
            LMC_TRY(bind_linear(m, a, n, D, I, 0, &M->up[e], &unused));
            snprintf(n, sizeof n, "%.240s%.50s", ep, nm->e_down);
            LMC_TRY(bind_linear(m, a, n, I, D, 0, &M->down[e], &unused));
        }
    } else if (nm->x_gate_up && M->gate_up) {
        snprintf(n, sizeof n, "%.200s%.90s", p, nm->x_gate_up);
        LMC_TRY(bind_experts_in_major(m, a, n, E, D, 2 * I, M->gate_up, &M->b_gate_up));
        snprintf(n, sizeof n, "%.200s%.90s", p, nm->x_down);
        LMC_TRY(bind_experts_in_major(m, a, n, E, I, D, M->down, &M->b_down));
    } else if (nm->f_gate_up) {
        lmc_tensor *gu[2] = {M->gate, M->up}, *dn[1] = {M->down};
        snprintf(n, sizeof n, "%.200s%.90s", p, nm->f_gate_up);
        LMC_TRY(bind_experts_fused(m, a, n, E, I, 2, D, gu));
        snprintf(n, sizeof n, "%.200s%.90s", p, nm->f_down);
        LMC_TRY(bind_experts_fused(m, a, n, E, D, 1, I, dn));
    } else {
        note_missing(a, n);
    }
    if (Is > 0 && nm->shared) {
        char sp[240];
        snprintf(sp, sizeof sp, "%.170s%.60s", p, nm->shared);
        if (nm->s_gate_up) {
            int64_t parts[2] = {Is, Is};
            lmc_tensor *ws[2] = {&M->sh_gate, &M->sh_up}, *bs[2] = {&M->sh_b_gate, &M->sh_b_up};
            snprintf(n, sizeof n, "%.240s%.50s", sp, nm->s_gate_up);
            LMC_TRY(bind_fused(m, a, n, D, parts, 2, mlp_bias, ws, bs));
        } else {
            if (nm->s_gate) {
                snprintf(n, sizeof n, "%.240s%.50s", sp, nm->s_gate);
                LMC_TRY(bind_linear(m, a, n, D, Is, mlp_bias, &M->sh_gate, &M->sh_b_gate));
            }
            snprintf(n, sizeof n, "%.240s%.50s", sp, nm->s_up);
            LMC_TRY(bind_linear(m, a, n, D, Is, mlp_bias, &M->sh_up, &M->sh_b_up));
        }
        snprintf(n, sizeof n, "%.240s%.50s", sp, nm->s_down);
        LMC_TRY(bind_linear(m, a, n, Is, D, mlp_bias, &M->sh_down, &M->sh_b_down));
        if (nm->shared_gate) {
            snprintf(n, sizeof n, "%.200s%.90s", p, nm->shared_gate);
            LMC_TRY(bind_linear(m, a, n, D, 1, 0, &M->sh_router, &unused));
        }
    }
    return LMC_OK;
}

/* Per-head norm weights stored one tensor per head ("<base>.norms.<h>.weight" [hd], stablelm)
 * gathered into one [hd, H] weight (and bias when the checkpoint has them). */
static lmc_status bind_split_head_norm(lmc_model *m, audit *a, const char *base, int64_t hd, int64_t H, lmc_tensor *w,
                                       lmc_tensor *b) {
    char n[320];
    memset(w, 0, sizeof *w);
    memset(b, 0, sizeof *b);
    for (int k = 0; k < 2; k++) {
        const char *what = k ? "bias" : "weight";
        lmc_weight *o = NULL;
        for (int64_t h = 0; h < H; h++) {
            found_t f;
            snprintf(n, sizeof n, "%s.norms.%lld.%s", base, (long long)h, what);
            LMC_TRY(find(m, a, n, hd, 0, !k, &f));
            if (!f.w) {
                if (k && h > 0) return lmc_fail(LMC_ERR_FORMAT, "%s: some heads have a norm bias and others not", base);
                if (k || !o) break;
                continue;
            }
            if (!plain_float(f.w->dtype)) return lmc_fail(LMC_ERR_UNSUPPORTED, "%s must be F32, F16 or BF16", n);
            if (!o) LMC_TRY(owned_weight(m, f.w, f.w->dtype, 2, H, hd, (size_t)(H * hd) * lmc_dtype_size(f.w->dtype), &o));
            else if (f.w->dtype != o->dtype) return lmc_fail(LMC_ERR_FORMAT, "%s: per-head norms of mixed dtypes", base);
            memcpy((char *)o->data + (size_t)(h * hd) * lmc_dtype_size(o->dtype), f.w->data, (size_t)hd * lmc_dtype_size(o->dtype));
        }
        if (!o) continue;
        found_t g = {.w = o, .dtype = o->dtype, .in = hd};
        LMC_TRY(view_rows(m, &g, 0, H, k ? b : w));
    }
    return LMC_OK;
}

/* One learned xIELU scalar "<p><name>" (shape [] or [1]); dflt when absent and dflt is finite. */
static lmc_status xielu_scalar(lmc_model *m, audit *a, const char *p, const char *name, double dflt, double *out) {
    char n[320];
    snprintf(n, sizeof n, "%smlp.act_fn.%s", p, name);
    const lmc_weight *t = lmc_weights_find(m->weights, n);
    if (!t) {
        if (isfinite(dflt)) { *out = dflt; return LMC_OK; }
        note_missing(a, n);
        *out = 0;
        return LMC_OK;
    }
    a->used[lmc_weights_index_of(m->weights, t)] = 1;
    if (!plain_float(t->dtype) || lmc_weight_nelem(t) != 1 || t->n_dims > 1)
        return lmc_fail(LMC_ERR_FORMAT, "%s must be one F32/F16/BF16 value", n);
    float v;
    lmc_to_f32(t->dtype, t->data, &v, 1);
    *out = v;
    m->weight_bytes += t->nbytes;
    m->n_params += 1;
    return LMC_OK;
}

static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); } /* torch's threshold 20 */

static lmc_status bind_layer(lmc_model *m, audit *a, int il) {
    const lmc_config *c = &m->cfg;
    const lmc_arch *ar = m->profile.arch;
    const lmc_names *nm = m->profile.names;
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
    case LMC_BIAS_ATTN_MLP_ALWAYS:
        qkv_bias = o_bias = c->attention_bias_given ? c->attention_bias : ar->attn_bias_default;
        mlp_bias = 1;
        break;
    case LMC_BIAS_MLP_ONLY: mlp_bias = 1; break;
    }
    char p[256], n[320];
    snprintf(p, sizeof p, "%s%s%d.", m->prefix, ar->layers ? ar->layers : "layers.", il);
#define NAME(s) (snprintf(n, sizeof n, "%s%s", p, s), n)
    if (nm->attn_norm) LMC_TRY(bind_norm(m, a, NAME(nm->attn_norm), D, 0, &L->attn_norm, &L->attn_norm_b));
    if (nm->attn_post_norm)
        LMC_TRY(bind_norm(m, a, NAME(nm->attn_post_norm), D, 0, &L->attn_post_norm, &L->attn_post_norm_b));
    if (nm->ffn_norm && m->profile.block != LMC_BLOCK_PARALLEL) /* one norm feeds both sublayers */
        LMC_TRY(bind_norm(m, a, NAME(nm->ffn_norm), D, 0, &L->ffn_norm, &L->ffn_norm_b));
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
    if (nm->sinks) LMC_TRY(bind_f32(m, a, NAME(nm->sinks), c->n_heads, 0, &L->sinks));
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
            if (ar->qk_norm_split) {
                LMC_TRY(bind_split_head_norm(m, a, NAME(nm->q_norm), hd, c->n_heads, &L->q_norm, &L->q_norm_b));
                LMC_TRY(bind_split_head_norm(m, a, NAME(nm->k_norm), hd, c->n_kv_heads, &L->k_norm, &L->k_norm_b));
                break;
            }
            LMC_TRY(bind_norm(m, a, NAME(nm->q_norm), hd, c->n_heads, &L->q_norm, &unused));
            LMC_TRY(bind_norm(m, a, NAME(nm->k_norm), hd, c->n_kv_heads, &L->k_norm, &unused));
            break;
        case LMC_QK_NORM_NONE: break;
        }
    }
    if (ar->moe && !c->layer_dense[il]) {
        LMC_TRY(bind_moe(m, a, il, p, mlp_bias));
    } else switch (ar->mlp) {
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
    if (!L->moe) LMC_TRY(bind_linear(m, a, NAME(nm->down), I, D, mlp_bias, &L->w_down, &L->b_down));
    if (m->act_xielu) {
        /* transformers' XIELUActivation: alpha_p, alpha_n parameters [1]; beta, eps buffers [] */
        double ap, an, beta, eps;
        LMC_TRY(xielu_scalar(m, a, p, "alpha_p", NAN, &ap));
        LMC_TRY(xielu_scalar(m, a, p, "alpha_n", NAN, &an));
        LMC_TRY(xielu_scalar(m, a, p, "beta", 0.5, &beta));
        LMC_TRY(xielu_scalar(m, a, p, "eps", -1e-6, &eps));
        L->xielu[0] = (float)softplus(ap);
        L->xielu[1] = (float)(beta + softplus(an));
        L->xielu[2] = (float)beta;
        L->xielu[3] = (float)eps;
    }
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
    if (ar->pos_embed) nope = 1; /* learned absolute positions instead of rope */
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
    const lmc_arch *ar = m->profile.arch;
    const char *embed = ar->embed ? ar->embed : "embed_tokens";
    m->prefix = ar->prefix;
    snprintf(n, sizeof n, "%sembed_tokens.weight", m->prefix);
    if (ar->embed) snprintf(n, sizeof n, "%s%s.weight", m->prefix, embed);
    if (ar->prefix_alt && !lmc_weights_find(m->weights, n)) m->prefix = ar->prefix_alt; /* older layout (gpt2: no "transformer.") */
    snprintf(m->lm_head_buf, sizeof m->lm_head_buf, "%s.weight", ar->lm_head ? ar->lm_head : "lm_head");
    m->lm_head_name = m->lm_head_buf;
    m->cap_owned = 8 * c->n_layers + 8;
    m->owned = calloc((size_t)m->cap_owned, sizeof *m->owned);
    if (!m->owned) return lmc_fail(LMC_ERR_NOMEM, "rewritten weight table");
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
    if (c->quant_hf_mxfp4 && ar->moe) m->cap_mlx_aux += 2 * c->n_experts * c->n_layers; /* an aux per expert matrix */
    m->mlx_aux = calloc((size_t)m->cap_mlx_aux, sizeof *m->mlx_aux);
    if (!m->mlx_aux) return lmc_fail(LMC_ERR_NOMEM, "quantized weight table");
    a.used = calloc((size_t)lmc_weights_count(m->weights) + 1, 1);
    if (!a.used) return lmc_fail(LMC_ERR_NOMEM, "audit table");
    lmc_status st = LMC_OK;
    snprintf(n, sizeof n, "%s%s.weight", pre, embed);
    st = bind(m, &a, n, c->hidden_size, c->vocab_size, 1, &m->tok_embd);
    if (st >= 0 && ar->pos_embed) {
        snprintf(n, sizeof n, "%s%s.weight", pre, ar->pos_embed);
        st = bind(m, &a, n, c->hidden_size, c->max_position_embeddings, 1, &m->pos_embd);
    }
    if (st >= 0) {
        snprintf(n, sizeof n, "%s%s", pre, m->profile.arch->out_norm ? m->profile.arch->out_norm : "norm");
        st = bind_norm(m, &a, n, c->hidden_size, 0, &m->out_norm, &m->out_norm_b);
    }
    if (st >= 0 && !c->tie_word_embeddings) st = bind(m, &a, m->lm_head_name, c->hidden_size, c->vocab_size, 1, &m->lm_head);
    if (st >= 0 && c->tie_word_embeddings) m->lm_head = m->tok_embd;
    int head_bias = m->profile.arch->lm_head_bias, hb;
    if (m->profile.arch->lm_head_bias_key && lmc_config_bool(c, m->profile.arch->lm_head_bias_key, &hb) > 0) head_bias = hb;
    if (st >= 0 && head_bias) {
        snprintf(n, sizeof n, "%s.bias", ar->lm_head ? ar->lm_head : "lm_head");
        st = bind(m, &a, n, c->vocab_size, 0, 1, &m->lm_head_b);
    }
    if (st >= 0 && m->profile.arch->moe) {
        m->moe_layers = calloc((size_t)c->n_layers, sizeof *m->moe_layers);
        m->moe_views = calloc((size_t)c->n_layers * 3 * (size_t)c->n_experts, sizeof *m->moe_views);
        if (!m->moe_layers || !m->moe_views) st = lmc_fail(LMC_ERR_NOMEM, "expert tables");
    }
    for (int il = 0; st >= 0 && il < c->n_layers; il++) st = bind_layer(m, &a, il);
    m->n_params_active = m->n_params;
    for (int il = 0; st >= 0 && il < c->n_layers; il++)
        if (m->layers[il].moe)
            m->n_params_active -= (int64_t)(c->n_experts - c->n_experts_used) * m->layers[il].moe->n_expert_params;
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
    if (st >= 0) st = lmc_artifact_apply(dir, &m->profile); /* a verified snapshot outranks its family */
    if (st >= 0 && lmc_gemma4_profile(&m->profile)) { /* the targeted port binds its own weights */
        st = lmc_gemma4_load(m, dir);
        if (st < 0) {
            lmc_model_free(m);
            return lmc_fail_context(st, "loading %s", dir);
        }
        *out = m;
        return LMC_OK;
    }
    if (st >= 0) m->act_xielu = !strcmp(m->cfg.hidden_act, "xielu"); /* per-layer parameters, see bind_layer */
    if (st >= 0 && !m->act_xielu) st = lmc_act_from_name(m->cfg.hidden_act, &m->act);
    if (st >= 0 && m->act_xielu && !be->i->xielu)
        st = lmc_fail(LMC_ERR_UNSUPPORTED, "the %s backend has no xielu op (needed by %s)", be->i->name, m->cfg.model_type);
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
    lmc_gemma4_free(m);
    for (int r = 0; r < 4; r++)
        if (m->rope_freq[r / 2][r % 2].data) m->be->i->release(m->be, &m->rope_freq[r / 2][r % 2]);
    for (int il = 0; m->moe_layers && il < m->cfg.n_layers; il++)
        if (m->moe_layers[il].sel_bias.data) m->be->i->release(m->be, &m->moe_layers[il].sel_bias);
    free(m->moe_layers);
    free(m->moe_views);
    free(m->layers);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->mlx_aux);
    lmc_weights_close(m->weights);
    lmc_config_free(&m->cfg);
    free(m);
}
