/* gemma4.c — the targeted Gemma 4 text port: profile, weight binding + audit, forward.
 *
 * Per layer (transformers 5.17 Gemma4TextDecoderLayer):
 *   h = rms(x)·w_in; q = q_norm(h·Wq) roped; k = k_norm(h·Wk) roped, v = v_norm(h·Wv or h·Wk)
 *   (KV-shared layers take k, v of the last earlier layer of their type); a = attn(q, k, v; scale 1)
 *   x += rms(a·Wo)·w_post_attn
 *   m = mlp(rms(x)·w_pre_ffn); MoE: m = rms(m)·w1 + rms(moe(rms(x)·w_pre2))·w2
 *   x += rms(m)·w_post_ffn;  per-layer input: x += rms(proj(gelu(gate(x)) · ple_i))·w
 *   x *= layer_scalar
 * then rms(x)·w_norm, tied LM head, tanh softcap. On backends with recorded op sequences a step
 * of ≤ LMC_G4_REC_MAX tokens (decode, verification) replays a recording of its shape (steprec.h);
 * the MoE variant too (per_expert_scale is applied by the backend's router: no host round trip).
 * Owns m->g4 and fs->g4.
 */
#include "gemma4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/jsonfile.h"

/* A row for code that reads m->profile.arch: the port is not driven by it. */
static const lmc_names g4_names = {
    .attn_norm = "input_layernorm", .attn_post_norm = "post_attention_layernorm",
    .ffn_norm = "pre_feedforward_layernorm", .ffn_post_norm = "post_feedforward_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};
static const lmc_arch g4_row = {
    .model_type = "gemma4_text", .block = LMC_BLOCK_SANDWICH, .qk_norm = LMC_QK_NORM_HEAD,
    .window = LMC_WINDOW_LAYER_TYPES, .sliding_pattern = 6, .embed_scale_sqrt = 1, .act_key = "hidden_activation",
    .act_default = "gelu_pytorch_tanh", .prefix = "model.", .names = &g4_names,
    .notes = "targeted port (src/model/gemma4.c): per-layer inputs, KV sharing, proportional rope, k_eq_v, MoE",
};

int lmc_gemma4_profile(const lmc_profile *p) {
    /* by graph: an exact-artifact profile (tier exact) of a gemma4 snapshot runs the same port */
    return p->tier != LMC_TIER_UNSUPPORTED && p->graph && !strcmp(p->graph, "gemma4");
}

/* ---------------------------------------------------------------- config */

static int jint(const lmc_config *c, const char *key, int def) {
    int64_t v;
    return lmc_json_get_int(c->text, key, &v) > 0 ? (int)v : def;
}

static int jbool(const lmc_config *c, const char *key) {
    int b = 0;
    return lmc_json_get_bool(c->text, key, &b) > 0 ? b : 0;
}

/* head_dim / num_key_value_heads of layer il: per_layer_config (transformers 5.17 files),
 * else global_head_dim / num_global_key_value_heads on full layers (the released files). */
static lmc_status layer_dims(const lmc_config *c, int il, int sliding, int k_eq_v, int *hd, int *n_kv) {
    *hd = c->head_dim;
    *n_kv = c->n_kv_heads;
    const cJSON *plc = cJSON_GetObjectItemCaseSensitive(c->text, "per_layer_config");
    if (cJSON_IsObject(plc)) {
        char key[16];
        snprintf(key, sizeof key, "%d", il);
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(plc, key);
        int64_t v;
        if (o && !cJSON_IsObject(o)) return lmc_fail(LMC_ERR_FORMAT, "config.json: per_layer_config.%s must be an object", key);
        if (o && lmc_json_get_int(o, "head_dim", &v) > 0) *hd = (int)v;
        if (o && lmc_json_get_int(o, "num_key_value_heads", &v) > 0) *n_kv = (int)v;
    } else if (!sliding) {
        *hd = jint(c, "global_head_dim", 512);
        if (k_eq_v) *n_kv = jint(c, "num_global_key_value_heads", *n_kv);
    }
    if (*hd <= 0 || *hd > 4096 || *hd % 2 || *n_kv <= 0 || c->n_heads % *n_kv)
        return lmc_fail(LMC_ERR_FORMAT, "config.json: layer %d has head_dim %d and %d KV heads (%d heads)", il, *hd, *n_kv,
                        c->n_heads);
    return LMC_OK;
}

lmc_status lmc_g4_rope_freqs(const lmc_rope_config *rc, int hd, float *inv) {
    const int half = hd / 2;
    double factor = rc->factor > 0 ? rc->factor : 1.0;
    if (rc->type == LMC_ROPE_DEFAULT) {
        for (int i = 0; i < half; i++) inv[i] = 1.0f / powf((float)rc->theta, (float)(2 * i) / (float)hd);
        return LMC_OK;
    }
    if (rc->type == LMC_ROPE_PROPORTIONAL) {
        /* transformers: rope_angles = int(prf · hd // 2); 1/base^(2i/hd) for i < rope_angles, 0 after; / factor */
        int angles = (int)floor(rc->partial_rotary_factor * hd / 2.0);
        for (int i = 0; i < half; i++)
            inv[i] = i < angles ? 1.0f / powf((float)rc->theta, (float)(2 * i) / (float)hd) : 0.0f;
        for (int i = 0; i < half; i++) inv[i] = (float)(inv[i] / (float)factor);
        return LMC_OK;
    }
    if (rc->type == LMC_ROPE_LINEAR) {
        for (int i = 0; i < half; i++) inv[i] = 1.0f / powf((float)rc->theta, (float)(2 * i) / (float)hd) / (float)factor;
        return LMC_OK;
    }
    return lmc_fail(LMC_ERR_UNSUPPORTED, "gemma4: rope type \"%s\" is not supported (default, linear, proportional are)",
                    lmc_rope_type_name(rc->type));
}

/* ---------------------------------------------------------------- binding + audit */

struct lmc_g4_binder {
    lmc_model *m;
    const lmc_weight *tab;  /* tensors from a table instead of m->weights (a GGUF assistant) */
    int n_tab;
    uint8_t *used;
    char missing[1024];
    int n_missing;
};
typedef struct lmc_g4_binder binder;

static void note_missing(binder *b, const char *name) {
    size_t at = strlen(b->missing);
    if (b->n_missing < 6) snprintf(b->missing + at, sizeof b->missing - at, "%s%s", b->n_missing ? ", " : "", name);
    b->n_missing++;
}

static const lmc_weight *take(binder *b, const char *name) {
    if (b->tab) {
        for (int i = 0; i < b->n_tab; i++)
            if (!strcmp(b->tab[i].name, name)) { b->used[i] = 1; return &b->tab[i]; }
        return NULL;
    }
    const lmc_weight *t = lmc_weights_find(b->m->weights, name);
    if (t) b->used[lmc_weights_index_of(b->m->weights, t)] = 1;
    return t;
}

static int float_type(lmc_dtype t) { return t == LMC_DTYPE_F32 || t == LMC_DTYPE_F16 || t == LMC_DTYPE_BF16; }

/* Tensor `name` of torch shape [ne1, ne0] (ne1 0: 1-D [ne0]) bound as a weight. */
static lmc_status bind(binder *b, const char *name, int64_t ne0, int64_t ne1, int required, lmc_tensor *out) {
    memset(out, 0, sizeof *out);
    const lmc_weight *t = take(b, name);
    if (!t) {
        if (required) note_missing(b, name);
        return LMC_OK;
    }
    int ok_type = float_type(t->dtype) || (ne1 && lmc_dtype_is_quant(t->dtype) && !lmc_dtype_is_mlx(t->dtype));
    if (!ok_type)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor %s has dtype %s (F32, F16, BF16 or a GGUF block type expected)", name,
                        lmc_dtype_name(t->dtype));
    int ok = ne1 ? (t->n_dims == 2 && t->shape[0] == ne1 && t->shape[1] == ne0) : (t->n_dims == 1 && t->shape[0] == ne0);
    if (!ok)
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s has the wrong shape (expected [%lld%s%lld] from config.json)", name,
                        (long long)(ne1 ? ne1 : ne0), ne1 ? ", " : "", (long long)(ne1 ? ne0 : 0));
    *out = lmc_tensor_make(t->dtype, ne0, ne1 ? ne1 : 1, 1, 1);
    b->m->weight_bytes += t->nbytes;
    b->m->n_params += ne1 ? ne0 * ne1 : ne0;
    return b->m->be->i->bind_weight(b->m->be, out, t->data);
}

float lmc_g4_host_scalar(const lmc_weight *w) {
    if (w->dtype == LMC_DTYPE_F32) { float f; memcpy(&f, w->data, 4); return f; }
    uint16_t h;
    memcpy(&h, w->data, 2);
    return w->dtype == LMC_DTYPE_BF16 ? lmc_bf16_to_f32(h) : lmc_f16_to_f32(h);
}

static lmc_status bind_scalar(binder *b, const char *name, float *out) {
    const lmc_weight *t = take(b, name);
    *out = 1.0f;
    if (!t) { note_missing(b, name); return LMC_OK; }
    if (!float_type(t->dtype) || lmc_weight_nelem(t) != 1)
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s must be one float", name);
    *out = lmc_g4_host_scalar(t);
    b->m->weight_bytes += t->nbytes;
    b->m->n_params += 1;
    return LMC_OK;
}

/* experts.gate_up_proj [E, 2·Ie, D] and experts.down_proj [E, D, Ie] as per-expert views. */
static lmc_status bind_experts(binder *b, const char *p, lmc_gemma4 *g, lmc_g4_layer *L, lmc_tensor *views) {
    char n[320];
    const int64_t E = g->E, Ie = g->Ie, D = g->D;
    const lmc_weight *gu, *dn;
    snprintf(n, sizeof n, "%sexperts.gate_up_proj", p);
    gu = take(b, n);
    if (!gu) note_missing(b, n);
    snprintf(n, sizeof n, "%sexperts.down_proj", p);
    dn = take(b, n);
    if (!dn) note_missing(b, n);
    if (!gu || !dn) return LMC_OK;
    if (!float_type(gu->dtype) || gu->n_dims != 3 || gu->shape[0] != E || gu->shape[1] != 2 * Ie || gu->shape[2] != D)
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s must be float [%lld, %lld, %lld]", gu->name, (long long)E,
                        (long long)(2 * Ie), (long long)D);
    if (!float_type(dn->dtype) || dn->n_dims != 3 || dn->shape[0] != E || dn->shape[1] != D || dn->shape[2] != Ie)
        return lmc_fail(LMC_ERR_FORMAT, "tensor %s must be float [%lld, %lld, %lld]", dn->name, (long long)E, (long long)D,
                        (long long)Ie);
    L->ex_gate = views;
    L->ex_up = views + E;
    L->ex_down = views + 2 * E;
    const size_t gu_row = lmc_dtype_row_bytes(gu->dtype, D), dn_row = lmc_dtype_row_bytes(dn->dtype, Ie);
    for (int64_t e = 0; e < E; e++) {
        L->ex_gate[e] = lmc_tensor_make(gu->dtype, D, Ie, 1, 1);
        L->ex_up[e] = lmc_tensor_make(gu->dtype, D, Ie, 1, 1);
        L->ex_down[e] = lmc_tensor_make(dn->dtype, Ie, D, 1, 1);
        const char *gbase = (const char *)gu->data + (size_t)e * 2 * Ie * gu_row;
        LMC_TRY(b->m->be->i->bind_weight(b->m->be, &L->ex_gate[e], gbase));
        LMC_TRY(b->m->be->i->bind_weight(b->m->be, &L->ex_up[e], gbase + (size_t)Ie * gu_row));
        LMC_TRY(b->m->be->i->bind_weight(b->m->be, &L->ex_down[e], (const char *)dn->data + (size_t)e * D * dn_row));
    }
    b->m->weight_bytes += gu->nbytes + dn->nbytes;
    b->m->n_params += E * 3 * Ie * D;
    return LMC_OK;
}

static const char *drop_rule(const lmc_model *m, const char *name) {
    size_t n = strlen(name);
    const char *suffix = "rotary_emb.inv_freq";
    if (n >= strlen(suffix) && !strcmp(name + n - strlen(suffix), suffix)) return "rotary inv_freq buffer";
    if (!strcmp(name, m->lm_head_name)) return "lm_head tied to embed_tokens";
    /* transformers ignores k/v weights stored for KV-shared layers (_keys_to_ignore_on_load_unexpected) */
    size_t lp = strlen(m->prefix);
    int il, at = 0;
    if (m->g4 && !strncmp(name, m->prefix, lp) && sscanf(name + lp, "layers.%d.self_attn.%n", &il, &at) == 1 && at > 0 &&
        il >= 0 && il < m->g4->n_layers && m->g4->layers[il].kv_src != il) {
        static const char *kv[] = {"k_proj.weight", "v_proj.weight", "k_norm.weight", "v_norm.weight", NULL};
        for (int i = 0; kv[i]; i++)
            if (!strcmp(name + lp + at, kv[i])) return "k/v weights of a KV-shared layer (unused, as in transformers)";
    }
    static const char *towers[] = {"model.vision_tower.", "model.embed_vision.", "model.audio_tower.",
                                   "model.embed_audio.", NULL};
    if (strcmp(m->cfg.outer_model_type, "gemma4") == 0)
        for (int i = 0; towers[i]; i++)
            if (!strncmp(name, towers[i], strlen(towers[i]))) return "non-text tower (lmc runs the text stack)";
    return NULL;
}

static lmc_status finish_audit(lmc_model *m, binder *b) {
    char extra[1024] = "";
    int n_extra = 0;
    const int n = b->tab ? b->n_tab : lmc_weights_count(m->weights);
    for (int i = 0; i < n; i++) {
        if (b->used[i]) continue;
        const char *name = b->tab ? b->tab[i].name : lmc_weights_at(m->weights, i)->name;
        if (drop_rule(m, name)) { m->n_audit_dropped++; continue; }
        size_t at = strlen(extra);
        if (n_extra < 6) snprintf(extra + at, sizeof extra - at, "%s%s", n_extra ? ", " : "", name);
        n_extra++;
    }
    if (b->n_missing)
        return lmc_fail(LMC_ERR_AUDIT, "weight audit: %d required tensor(s) missing: %s%s", b->n_missing, b->missing,
                        b->n_missing > 6 ? ", ..." : "");
    if (n_extra)
        return lmc_fail(LMC_ERR_AUDIT, "weight audit: %d tensor(s) not used by the gemma4 forward: %s%s", n_extra, extra,
                        n_extra > 6 ? ", ..." : "");
    return LMC_OK;
}

/* Layer geometry from the config (no weights read). */
static lmc_status plan_layers(lmc_model *m, lmc_gemma4 *g, int assistant) {
    const lmc_config *c = &m->cfg;
    const int L = c->n_layers;
    const int n_shared = jint(c, "num_kv_shared_layers", 0), k_eq_v = jbool(c, "attention_k_eq_v");
    const int double_wide = jbool(c, "use_double_wide_mlp");
    if (n_shared < 0 || n_shared > L || (n_shared == L && !assistant))
        return lmc_fail(LMC_ERR_FORMAT, "config.json: num_kv_shared_layers %d with %d layers", n_shared, L);
    const int first_shared = L - n_shared;
    for (int il = 0; il < L; il++) {
        lmc_g4_layer *ly = &g->layers[il];
        /* transformers: layer_types default 5 sliding : 1 full, and the last layer is always full */
        ly->sliding = c->has_layer_types ? c->layer_sliding[il] : (il + 1) % 6 != 0;
        if (il == L - 1) ly->sliding = 0;
        ly->k_eq_v = k_eq_v && !ly->sliding;
        LMC_TRY(layer_dims(c, il, ly->sliding, ly->k_eq_v, &ly->hd, &ly->n_kv));
        ly->kv_src = il;
        if (il >= first_shared) {
            ly->kv_src = -1;
            for (int j = first_shared - 1; j >= 0; j--)
                if (g->layers[j].sliding == ly->sliding) { ly->kv_src = j; break; }
            if (ly->kv_src < 0 && !assistant)
                return lmc_fail(LMC_ERR_FORMAT, "config.json: KV-shared layer %d has no earlier %s layer", il,
                                ly->sliding ? "sliding" : "full");
            if (ly->kv_src >= 0 && (g->layers[ly->kv_src].hd != ly->hd || g->layers[ly->kv_src].n_kv != ly->n_kv))
                return lmc_fail(LMC_ERR_FORMAT, "config.json: KV-shared layer %d and its source %d differ in shape", il,
                                ly->kv_src);
        }
        ly->inter = c->intermediate_size * (double_wide && il >= first_shared && first_shared > 0 ? 2 : 1);
        g->hd_max = ly->hd > g->hd_max ? ly->hd : g->hd_max;
        g->kv_max = ly->n_kv > g->kv_max ? ly->n_kv : g->kv_max;
        g->inter_max = ly->inter > g->inter_max ? ly->inter : g->inter_max;
        m->layers[il].window = ly->sliding ? g->window : 0;
        m->layers[il].rope = ly->sliding ? 1 : 0;
    }
    g->last_kv[0] = g->last_kv[1] = -1;
    for (int il = 0; il < first_shared; il++) g->last_kv[g->layers[il].sliding] = il;
    return LMC_OK;
}

static lmc_status bind_layer(binder *b, const char *prefix, lmc_gemma4 *g, int il, lmc_tensor *views) {
    const lmc_config *c = &b->m->cfg;
    lmc_g4_layer *L = &g->layers[il];
    const int64_t D = g->D, qd = (int64_t)g->H * L->hd, kvd = (int64_t)L->n_kv * L->hd;
    char p[256], n[320];
    snprintf(p, sizeof p, "%slayers.%d.", prefix, il);
#define NAME(s) (snprintf(n, sizeof n, "%s%s", p, s), n)
    LMC_TRY(bind(b, NAME("input_layernorm.weight"), D, 0, 1, &L->attn_norm));
    LMC_TRY(bind(b, NAME("post_attention_layernorm.weight"), D, 0, 1, &L->attn_post_norm));
    LMC_TRY(bind(b, NAME("pre_feedforward_layernorm.weight"), D, 0, 1, &L->ffn_norm));
    LMC_TRY(bind(b, NAME("post_feedforward_layernorm.weight"), D, 0, 1, &L->ffn_post_norm));
    LMC_TRY(bind(b, NAME("self_attn.q_proj.weight"), D, qd, 1, &L->wq));
    LMC_TRY(bind(b, NAME("self_attn.o_proj.weight"), qd, D, 1, &L->wo));
    LMC_TRY(bind(b, NAME("self_attn.q_norm.weight"), L->hd, 0, 1, &L->q_norm));
    if (L->kv_src == il) {
        LMC_TRY(bind(b, NAME("self_attn.k_proj.weight"), D, kvd, 1, &L->wk));
        LMC_TRY(bind(b, NAME("self_attn.k_norm.weight"), L->hd, 0, 1, &L->k_norm));
        if (!L->k_eq_v) LMC_TRY(bind(b, NAME("self_attn.v_proj.weight"), D, kvd, 1, &L->wv));
    }
    LMC_TRY(bind(b, NAME("mlp.gate_proj.weight"), D, L->inter, 1, &L->w_gate));
    LMC_TRY(bind(b, NAME("mlp.up_proj.weight"), D, L->inter, 1, &L->w_up));
    LMC_TRY(bind(b, NAME("mlp.down_proj.weight"), L->inter, D, 1, &L->w_down));
    LMC_TRY(bind_scalar(b, NAME("layer_scalar"), &L->scalar));
    if (g->P) {
        LMC_TRY(bind(b, NAME("per_layer_input_gate.weight"), D, g->P, 1, &L->ple_gate));
        LMC_TRY(bind(b, NAME("per_layer_projection.weight"), g->P, D, 1, &L->ple_proj));
        LMC_TRY(bind(b, NAME("post_per_layer_input_norm.weight"), D, 0, 1, &L->ple_norm));
    }
    if (g->moe) {
        LMC_TRY(bind(b, NAME("router.proj.weight"), D, g->E, 1, &L->router));
        LMC_TRY(bind(b, NAME("router.scale"), D, 0, 1, &L->router_scale));
        LMC_TRY(bind(b, NAME("pre_feedforward_layernorm_2.weight"), D, 0, 1, &L->moe_pre_norm));
        LMC_TRY(bind(b, NAME("post_feedforward_layernorm_1.weight"), D, 0, 1, &L->moe_post_norm1));
        LMC_TRY(bind(b, NAME("post_feedforward_layernorm_2.weight"), D, 0, 1, &L->moe_post_norm2));
        const lmc_weight *pes = take(b, NAME("router.per_expert_scale"));
        L->expert_scale = g->host_scales + (size_t)il * g->E;
        if (!pes) note_missing(b, n);
        else if (!float_type(pes->dtype) || pes->n_dims != 1 || pes->shape[0] != g->E)
            return lmc_fail(LMC_ERR_FORMAT, "tensor %s must be float [%d]", n, g->E);
        else {
            size_t es = lmc_dtype_size(pes->dtype);
            for (int e = 0; e < g->E; e++) {
                lmc_weight one = *pes;
                one.data = (const char *)pes->data + (size_t)e * es;
                L->expert_scale[e] = lmc_g4_host_scalar(&one);
            }
        }
        LMC_TRY(bind_experts(b, p, g, L, views));
    }
#undef NAME
    (void)c;
    return LMC_OK;
}

lmc_status lmc_gemma4_load(lmc_model *m, const char *dir) { return lmc_gemma4_load_ex(m, dir, 0, NULL, NULL); }

lmc_status lmc_g4_bind(lmc_g4_binder *b, const char *name, int64_t ne0, int64_t ne1, int required, lmc_tensor *out) {
    return bind(b, name, ne0, ne1, required, out);
}

const lmc_weight *lmc_g4_take(lmc_g4_binder *b, const char *name) {
    const lmc_weight *t = take(b, name);
    if (t) b->m->weight_bytes += t->nbytes;
    return t;
}

static lmc_status load_common(lmc_model *m, const char *dir, const lmc_weight *tab, int n_tab, int assistant,
                              lmc_g4_extra_fn extra, void *ud);

lmc_status lmc_gemma4_load_ex(lmc_model *m, const char *dir, int assistant, lmc_g4_extra_fn extra, void *ud) {
    return load_common(m, dir, NULL, 0, assistant, extra, ud);
}

lmc_status lmc_gemma4_load_tab(lmc_model *m, const lmc_weight *tab, int n_tab, int assistant, lmc_g4_extra_fn extra,
                               void *ud) {
    return load_common(m, NULL, tab, n_tab, assistant, extra, ud);
}

static lmc_status load_common(lmc_model *m, const char *dir, const lmc_weight *tab, int n_tab, int assistant,
                              lmc_g4_extra_fn extra, void *ud) {
    lmc_config *c = &m->cfg;
    lmc_gemma4 *g = calloc(1, sizeof *g);
    if (!g) return lmc_fail(LMC_ERR_NOMEM, "gemma4");
    m->g4 = g;
    g->n_layers = c->n_layers;
    g->D = c->hidden_size;
    g->V = c->vocab_size;
    g->H = c->n_heads;
    g->window = c->sliding_window > 0 ? c->sliding_window : 512;
    g->eps = (float)c->norm_eps;
    g->final_softcap = (float)c->final_softcap;
    g->P = jint(c, "hidden_size_per_layer_input", 0);
    g->Vp = jint(c, "vocab_size_per_layer_input", c->vocab_size);
    g->moe = jbool(c, "enable_moe_block");
    if (g->P < 0 || g->P > (1 << 16) || (g->P && (g->Vp <= 0 || g->Vp > (1 << 24))))
        return lmc_fail(LMC_ERR_FORMAT, "config.json: hidden_size_per_layer_input %d / vocab_size_per_layer_input %d",
                        g->P, g->Vp);
    if (g->moe) {
        g->E = jint(c, "num_experts", 0);
        g->k = jint(c, "top_k_experts", 0);
        g->Ie = jint(c, "moe_intermediate_size", 0);
        if (g->E <= 0 || g->E > 4096 || g->k <= 0 || g->k > g->E || g->Ie <= 0)
            return lmc_fail(LMC_ERR_FORMAT, "config.json: enable_moe_block needs num_experts, top_k_experts ≤ num_experts "
                            "and moe_intermediate_size (got %d, %d, %d)", g->E, g->k, g->Ie);
    }
    const char *act = NULL;
    lmc_json_get_string(c->text, "hidden_activation", &act);
    snprintf(c->hidden_act, sizeof c->hidden_act, "%s", act ? act : "gelu_pytorch_tanh");
    LMC_TRY(lmc_act_from_name(c->hidden_act, &m->act));
    if (jbool(c, "attention_bias")) return lmc_fail(LMC_ERR_UNSUPPORTED, "gemma4 with attention_bias is not supported");
    const char *bidir = NULL;
    if (lmc_json_get_string(c->text, "use_bidirectional_attention", &bidir) > 0 && bidir)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "gemma4 with use_bidirectional_attention \"%s\" is not supported", bidir);
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    g->layers = calloc((size_t)c->n_layers, sizeof *g->layers);
    if (!m->layers || !g->layers) return lmc_fail(LMC_ERR_NOMEM, "layers");
    LMC_TRY(plan_layers(m, g, assistant));
    if (assistant && (g->P || g->moe))
        return lmc_fail(LMC_ERR_FORMAT, "a gemma4 assistant has no per-layer inputs and no MoE block");

    /* rope: [0] full layers (cfg.rope), [1] sliding layers (cfg.rope_local) */
    for (int r = 0; r < 2; r++) {
        int hd = 0;
        for (int il = 0; il < g->n_layers; il++)
            if (g->layers[il].sliding == r) { hd = g->layers[il].hd; break; }
        if (!hd) continue;
        float inv[LMC_ROPE_MAX_HALF];
        if (hd / 2 > LMC_ROPE_MAX_HALF) return lmc_fail(LMC_ERR_UNSUPPORTED, "head_dim %d is too large", hd);
        LMC_TRY(lmc_g4_rope_freqs(r ? &c->rope_local : &c->rope, hd, inv));
        g->n_rot[r] = hd;
        g->rope_freq[r] = lmc_tensor_make(LMC_DTYPE_F32, hd / 2, 1, 1, 1);
        LMC_TRY(m->be->i->alloc(m->be, &g->rope_freq[r]));
        m->be->i->set(m->be, &g->rope_freq[r], inv, 0, (size_t)hd / 2 * sizeof(float));
    }
    /* the KV cache (gen/kvcache) sizes every layer's rows from these: the widest layer */
    c->head_dim = g->hd_max;
    c->n_kv_heads = g->kv_max;

    if (!tab) LMC_TRY(lmc_weights_open(dir, &m->weights));
    const char *prefix = "model.";
    if (!strcmp(c->outer_model_type, "gemma4")) prefix = "model.language_model.";
    else if (strcmp(c->outer_model_type, assistant ? "gemma4_assistant" : "gemma4_text") != 0)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "gemma4_text inside \"%s\" is not supported", c->outer_model_type);
    m->prefix = prefix;
    m->lm_head_name = "lm_head.weight";
    binder b = {.m = m, .tab = tab, .n_tab = n_tab};
    b.used = calloc((size_t)(tab ? n_tab : lmc_weights_count(m->weights)) + 1, 1);
    g->host_scales = g->moe ? calloc((size_t)g->n_layers * g->E, sizeof(float)) : NULL;
    g->views = g->moe ? calloc((size_t)g->n_layers * 3 * g->E, sizeof(lmc_tensor)) : NULL;
    if (!b.used || (g->moe && (!g->host_scales || !g->views))) { free(b.used); return lmc_fail(LMC_ERR_NOMEM, "binding"); }
    char n[320];
    lmc_status st = LMC_OK;
    snprintf(n, sizeof n, "%sembed_tokens.weight", prefix);
    st = bind(&b, n, g->D, g->V, 1, &m->tok_embd);
    if (st >= 0) { snprintf(n, sizeof n, "%snorm.weight", prefix); st = bind(&b, n, g->D, 0, 1, &m->out_norm); }
    if (st >= 0 && !c->tie_word_embeddings) st = bind(&b, "lm_head.weight", g->D, g->V, 1, &m->lm_head);
    if (st >= 0 && c->tie_word_embeddings) m->lm_head = m->tok_embd;
    if (st >= 0 && g->P) {
        const int64_t LP = (int64_t)g->n_layers * g->P;
        snprintf(n, sizeof n, "%sembed_tokens_per_layer.weight", prefix);
        st = bind(&b, n, LP, g->Vp, 1, &g->embed_ple);
        if (st >= 0) { snprintf(n, sizeof n, "%sper_layer_model_projection.weight", prefix); st = bind(&b, n, g->D, LP, 1, &g->ple_model_proj); }
        if (st >= 0) { snprintf(n, sizeof n, "%sper_layer_projection_norm.weight", prefix); st = bind(&b, n, g->P, 0, 1, &g->ple_proj_norm); }
    }
    for (int il = 0; st >= 0 && il < g->n_layers; il++)
        st = bind_layer(&b, prefix, g, il, g->views ? g->views + (size_t)il * 3 * g->E : NULL);
    if (st >= 0 && extra) st = extra(m, &b, ud);
    if (st >= 0) st = finish_audit(m, &b);
    free(b.used);
    LMC_TRY(st);
    for (int il = 0; g->moe && il < g->n_layers; il++) {
        lmc_g4_layer *L = &g->layers[il];
        L->expert_scale_t = lmc_tensor_make(LMC_DTYPE_F32, g->E, 1, 1, 1);
        LMC_TRY(m->be->i->alloc(m->be, &L->expert_scale_t));
        m->be->i->set(m->be, &L->expert_scale_t, L->expert_scale, 0, (size_t)g->E * sizeof(float));
    }
    /* Gemma4TextScaledWordEmbedding: the scale is cast to the weight dtype before multiplying */
    float es = sqrtf((float)g->D), ps = sqrtf((float)(g->P ? g->P : 1));
    if (m->tok_embd.type == LMC_DTYPE_BF16) es = lmc_bf16_to_f32(lmc_f32_to_bf16(es));
    if (m->tok_embd.type == LMC_DTYPE_F16) es = lmc_f16_to_f32(lmc_f32_to_f16(es));
    if (g->embed_ple.type == LMC_DTYPE_BF16) ps = lmc_bf16_to_f32(lmc_f32_to_bf16(ps));
    if (g->embed_ple.type == LMC_DTYPE_F16) ps = lmc_f16_to_f32(lmc_f32_to_f16(ps));
    g->embed_scale = es;
    g->ple_scale = ps;
    m->embed_scale = es;
    m->n_params_active = m->n_params;
    if (g->moe) m->n_params_active -= (int64_t)g->n_layers * (g->E - g->k) * 3 * g->Ie * g->D;
    return LMC_OK;
}

void lmc_gemma4_free(lmc_model *m) {
    lmc_gemma4 *g = m ? m->g4 : NULL;
    if (!g) return;
    for (int r = 0; r < 2; r++)
        if (g->rope_freq[r].data) m->be->i->release(m->be, &g->rope_freq[r]);
    for (int il = 0; g->layers && il < g->n_layers; il++)
        if (g->layers[il].expert_scale_t.data) m->be->i->release(m->be, &g->layers[il].expert_scale_t);
    free(g->layers);
    free(g->host_scales);
    free(g->views);
    free(g);
    m->g4 = NULL;
}

/* ---------------------------------------------------------------- forward */

int64_t lmc_gemma4_kv_row(const lmc_model *m, int il) {
    const lmc_g4_layer *L = &m->g4->layers[il];
    return L->kv_src == il ? (int64_t)L->n_kv * L->hd : 0;
}

lmc_tensor lmc_g4_cache_view(const lmc_tensor *cache, int row) {
    lmc_tensor t = lmc_tensor_make(LMC_DTYPE_F32, row, cache->ne[1], cache->ne[2], 1);
    LMC_ASSERT(row <= cache->ne[0]);
    t.data = cache->data;
    return t;
}

lmc_status lmc_gemma4_state_init(lmc_forward_state *fs, const lmc_model *m, int n_batch_max) {
    const lmc_gemma4 *g = m->g4;
    lmc_gemma4_scratch *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "gemma4 scratch");
    memset(fs, 0, sizeof *fs);
    fs->m = m;
    fs->n_batch_max = n_batch_max;
    fs->g4 = s;
    const int64_t B = n_batch_max, D = g->D, L = g->n_layers, P = g->P ? g->P : 1;
    const int64_t qd = (int64_t)g->H * g->hd_max, kvd = (int64_t)g->kv_max * g->hd_max;
    const int64_t E = g->moe ? g->E : 1, k = g->moe ? g->k : 1, Ie = g->moe ? g->Ie : 1;
    struct { lmc_tensor *t; lmc_dtype type; int64_t ne0, ne1; } plan[] = {
        {&s->x, LMC_DTYPE_F32, D, B}, {&s->h, LMC_DTYPE_F32, D, B}, {&s->out, LMC_DTYPE_F32, D, B},
        {&s->out2, LMC_DTYPE_F32, D, B}, {&s->q, LMC_DTYPE_F32, qd, B}, {&s->att, LMC_DTYPE_F32, qd, B},
        {&s->k, LMC_DTYPE_F32, kvd, B}, {&s->v, LMC_DTYPE_F32, kvd, B},
        {&s->gate, LMC_DTYPE_F32, g->inter_max, B}, {&s->up, LMC_DTYPE_F32, g->inter_max, B},
        {&s->ple, LMC_DTYPE_F32, L * P, B}, {&s->ple_tmp, LMC_DTYPE_F32, L * P, B},
        {&s->ple_cur, LMC_DTYPE_F32, P, B}, {&s->ple_h, LMC_DTYPE_F32, P, B},
        {&s->ple_idx, LMC_DTYPE_I32, B, L},
        {&s->logits, LMC_DTYPE_F32, g->V, LMC_LOGITS_CHUNK},
        {&s->tok, LMC_DTYPE_I32, B, 1}, {&s->pos, LMC_DTYPE_I32, B, 1}, {&s->seq, LMC_DTYPE_I32, B, 1},
        {&s->sel, LMC_DTYPE_I32, B, 1},
        {&s->r_logits, LMC_DTYPE_F32, E, B}, {&s->r_ids, LMC_DTYPE_I32, k, B}, {&s->r_w, LMC_DTYPE_F32, k, B},
        {&s->e_gate, LMC_DTYPE_F32, Ie, k * B}, {&s->e_up, LMC_DTYPE_F32, Ie, k * B},
        {&s->e_out, LMC_DTYPE_F32, D, k * B},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        *plan[i].t = lmc_tensor_make(plan[i].type, plan[i].ne0, plan[i].ne1, 1, 1);
        lmc_status st = m->be->i->alloc(m->be, plan[i].t);
        if (st < 0) { lmc_gemma4_state_free(fs); return st; }
    }
    int32_t *idx = malloc((size_t)(B * L) * sizeof *idx);
    if (!idx) { free(idx); lmc_gemma4_state_free(fs); return lmc_fail(LMC_ERR_NOMEM, "gemma4 scratch"); }
    for (int64_t i = 0; i < L; i++)
        for (int64_t t = 0; t < B; t++) idx[i * B + t] = (int32_t)(t * L + i);
    m->be->i->set(m->be, &s->ple_idx, idx, 0, (size_t)(B * L) * sizeof *idx);
    free(idx);
    fs->logits = s->logits; /* a view: the logits rows lmc_gemma4_forward_keep leaves (owned by s) */
    return LMC_OK;
}

void lmc_gemma4_state_free(lmc_forward_state *fs) {
    lmc_gemma4_scratch *s = fs->g4;
    if (!s) return;
    lmc_backend *be = fs->m->be;
    lmc_tensor *all[] = {&s->x, &s->h, &s->out, &s->out2, &s->q, &s->att, &s->k, &s->v, &s->gate, &s->up, &s->ple,
                         &s->ple_tmp, &s->ple_cur, &s->ple_h, &s->ple_idx, &s->logits, &s->tok, &s->pos, &s->seq,
                         &s->sel, &s->r_logits, &s->r_ids, &s->r_w, &s->e_gate, &s->e_up, &s->e_out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data) be->i->release(be, all[i]);
    for (int i = 0; i < LMC_G4_RECS; i++) lmc_steprec_free(be, &s->rec[i].r);
    free(s);
    fs->g4 = NULL;
    memset(&fs->logits, 0, sizeof fs->logits); /* it viewed s->logits */
    fs->m = NULL;
}

static lmc_tensor rows(const lmc_tensor *t, int64_t ne0, int64_t n) {
    lmc_tensor r = lmc_tensor_make(t->type, ne0, n, 1, 1);
    r.data = t->data;
    return r;
}

static void rms(const lmc_gemma4 *g, lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w) {
    be->i->rms_norm(be, y, x, w && w->data ? w : NULL, g->eps, 0.0f);
}

/* x += r; y = rms(x)·w: one op where the backend fuses them (the same two ops otherwise). */
void lmc_g4_add_rms(const lmc_gemma4 *g, lmc_backend *be, lmc_tensor *x, const lmc_tensor *r, lmc_tensor *y,
                    const lmc_tensor *w) {
    if (be->i->add_rms_norm) {
        be->i->add_rms_norm(be, x, r, y, w && w->data ? w : NULL, g->eps, 0.0f);
        return;
    }
    be->i->add(be, x, x, r);
    be->i->rms_norm(be, y, x, w && w->data ? w : NULL, g->eps, 0.0f);
}

/* y0 = w0·x and y1 = w1·x, as one backend op where it has matmul_n (gate and up of one input). */
void lmc_g4_matmul2(lmc_backend *be, lmc_tensor *y0, const lmc_tensor *w0, lmc_tensor *y1, const lmc_tensor *w1,
                const lmc_tensor *x) {
    if (be->i->matmul_n && w0->type == w1->type) {
        be->i->matmul_n(be, 2, (lmc_tensor *const[]){y0, y1}, (const lmc_tensor *const[]){w0, w1}, x);
        return;
    }
    be->i->matmul(be, y0, w0, x);
    be->i->matmul(be, y1, w1, x);
}

/* The MoE block: out = Σ_j w_j · down_e(gelu(gate_e(h)) · up_e(h)) over the routed experts of
 * rms(x)·w_pre2, with the router reading x. */
static void moe_block(const lmc_model *m, lmc_gemma4_scratch *s, const lmc_g4_layer *L, lmc_tensor *out,
                      const lmc_tensor *x, int n) {
    const lmc_gemma4 *g = m->g4;
    lmc_backend *be = m->be;
    lmc_tensor h = rows(&s->h, g->D, n), lg = rows(&s->r_logits, g->E, n);
    lmc_tensor ids = rows(&s->r_ids, g->k, n), w = rows(&s->r_w, g->k, n);
    lmc_tensor eg = rows(&s->e_gate, g->Ie, (int64_t)g->k * n), eu = rows(&s->e_up, g->Ie, (int64_t)g->k * n);
    lmc_tensor eo = rows(&s->e_out, g->D, (int64_t)g->k * n);
    /* router: rms(x) · scale · D^-0.5 → proj → softmax → top-k → renormalize → · per_expert_scale */
    be->i->rms_norm(be, &h, x, &L->router_scale, g->eps, 0.0f);
    be->i->scale(be, &h, &h, 1.0f / sqrtf((float)g->D));
    be->i->matmul(be, &lg, &L->router, &h);
    lmc_moe_route_op op = {.score = LMC_MOE_SOFTMAX, .n_expert = g->E, .k = g->k, .norm = 1, .scale = 1.0f,
                           .expert_scale = &L->expert_scale_t};
    be->i->moe_route(be, &ids, &w, &lg, NULL, &op);
    /* experts on rms(x) · w_pre2 */
    rms(g, be, &h, x, &L->moe_pre_norm);
    be->i->matmul_id(be, &eg, L->ex_gate, g->E, &h, &ids);
    be->i->matmul_id(be, &eu, L->ex_up, g->E, &h, &ids);
    be->i->act_mul(be, &eg, &eg, &eu, m->act);
    be->i->matmul_id(be, &eo, L->ex_down, g->E, &eg, &ids);
    be->i->moe_sum(be, out, &eo, &w, NULL, NULL);
}

static void layer_forward(lmc_forward_state *fs, int il, lmc_tensor *kc_all, lmc_tensor *vc_all, int n) {
    const lmc_model *m = fs->m;
    const lmc_gemma4 *g = m->g4;
    lmc_gemma4_scratch *s = fs->g4;
    const lmc_g4_layer *L = &g->layers[il];
    lmc_backend *be = m->be;
    const int hd = L->hd, H = g->H, KV = L->n_kv;
    lmc_tensor x = rows(&s->x, g->D, n), h = rows(&s->h, g->D, n), o = rows(&s->out, g->D, n);
    lmc_tensor q = rows(&s->q, (int64_t)H * hd, n), att = rows(&s->att, (int64_t)H * hd, n);
    lmc_tensor pos = rows(&s->pos, n, 1), seq = rows(&s->seq, n, 1);
    const int r = L->sliding;
    lmc_rope_op rope = {.n_rot = g->n_rot[r], .interleaved = 0, .attn_factor = 1.0f, .inv_freq = &g->rope_freq[r]};

    /* attention (h may already hold the input norm, fused with the last layer's residual add) */
    if (!s->h_normed) rms(g, be, &h, &x, &L->attn_norm);
    s->h_normed = 0;
    lmc_tensor k = rows(&s->k, (int64_t)KV * hd, n), v = rows(&s->v, (int64_t)KV * hd, n);
    const int own_kv = L->kv_src == il;
    if (own_kv && !L->k_eq_v && be->i->matmul_n && L->wq.type == L->wk.type && L->wk.type == L->wv.type) {
        /* q, k and v of one input in one backend op (the same products) */
        be->i->matmul_n(be, 3, (lmc_tensor *const[]){&q, &k, &v}, (const lmc_tensor *const[]){&L->wq, &L->wk, &L->wv},
                        &h);
    } else {
        be->i->matmul(be, &q, &L->wq, &h);
        if (own_kv) {
            be->i->matmul(be, &k, &L->wk, &h);
            if (L->k_eq_v) be->i->scale(be, &v, &k, 1.0f); /* V is the raw k_proj output */
            else be->i->matmul(be, &v, &L->wv, &h);
        }
    }
    lmc_tensor qh = lmc_tensor_reshape(&q, hd, H, n, 1);
    rms(g, be, &qh, &qh, &L->q_norm);
    lmc_tensor kc = lmc_g4_cache_view(&kc_all[L->kv_src], KV * hd), vc = lmc_g4_cache_view(&vc_all[L->kv_src], KV * hd);
    if (own_kv) {
        lmc_tensor kh = lmc_tensor_reshape(&k, hd, KV, n, 1), vh = lmc_tensor_reshape(&v, hd, KV, n, 1);
        rms(g, be, &kh, &kh, &L->k_norm);
        rms(g, be, &vh, &vh, NULL); /* v_norm: RMSNorm without scale */
        if (be->i->rope_store && rope.n_rot > 0) {
            be->i->rope_store(be, &qh, &kh, &v, &kc, &vc, &pos, &seq, &rope); /* rope q, k; store k, v */
        } else {
            be->i->rope(be, &qh, &pos, &rope);
            be->i->rope(be, &kh, &pos, &rope);
            be->i->kv_store(be, &kc, &k, &pos, &seq);
            be->i->kv_store(be, &vc, &v, &pos, &seq);
        }
    } else {
        be->i->rope(be, &qh, &pos, &rope);
    }
    lmc_attn_op ao = {.n_head = H, .n_kv_head = KV, .head_dim = hd, .scale = 1.0f, .softcap = 0.0f,
                      .window = L->sliding ? g->window : 0, .next_w = {&L->wo}};
    be->i->attention(be, &att, &q, &kc, &vc, &pos, &seq, &ao);
    be->i->matmul(be, &o, &L->wo, &att);
    rms(g, be, &o, &o, &L->attn_post_norm);

    /* feed-forward: dense MLP, plus the MoE block beside it; x += o and its norm in one op where fused */
    lmc_tensor gate = rows(&s->gate, L->inter, n), up = rows(&s->up, L->inter, n);
    lmc_g4_add_rms(g, be, &x, &o, &h, &L->ffn_norm);
    lmc_g4_matmul2(be, &gate, &L->w_gate, &up, &L->w_up, &h);
    be->i->act_mul(be, &gate, &gate, &up, m->act);
    be->i->matmul(be, &o, &L->w_down, &gate);
    if (g->moe) {
        lmc_tensor o2 = rows(&s->out2, g->D, n);
        rms(g, be, &o, &o, &L->moe_post_norm1);
        moe_block(m, s, L, &o2, &x, n);
        rms(g, be, &o2, &o2, &L->moe_post_norm2);
        be->i->add(be, &o, &o, &o2);
    }
    rms(g, be, &o, &o, &L->ffn_post_norm);
    if (!g->P && L->scalar == 1.0f && il + 1 < g->n_layers && be->i->add_rms_norm) {
        /* x += o with the next layer's input norm */
        be->i->add_rms_norm(be, &x, &o, &h, &g->layers[il + 1].attn_norm, g->eps, 0.0f);
        s->h_normed = 1;
        return;
    }
    be->i->add(be, &x, &x, &o);

    /* per-layer input */
    if (g->P) {
        lmc_tensor cur = rows(&s->ple_cur, g->P, n), ph = rows(&s->ple_h, g->P, n);
        lmc_tensor table = rows(&s->ple, g->P, (int64_t)g->n_layers * n);
        lmc_tensor idx = lmc_tensor_rows(&s->ple_idx, il, 1); /* row il: t · L + il for t < B */
        idx.ne[0] = n;
        be->i->get_rows(be, &cur, &table, &idx, 1.0f);
        be->i->matmul(be, &ph, &L->ple_gate, &x);
        be->i->act_mul(be, &ph, &ph, &cur, m->act);
        be->i->matmul(be, &o, &L->ple_proj, &ph);
        rms(g, be, &o, &o, &L->ple_norm);
        be->i->add(be, &x, &x, &o);
    }
    if (L->scalar != 1.0f) be->i->scale(be, &x, &x, L->scalar);
}

static void lm_head_chunk(lmc_forward_state *fs, int r0, int nr);

/* One step's ops: embeddings (and per-layer inputs), every layer, then the n_sel wanted rows
 * (indices already in s->sel) gathered into s->h and final-normed; with head, the LM head of
 * those rows (n_sel ≤ LMC_LOGITS_CHUNK) into s->logits. Every per-step value is read from the
 * backend tensors tok, pos, seq, sel, so the sequence can be recorded. */
typedef struct g4_step {
    lmc_forward_state *fs;
    lmc_tensor *kc, *vc;
    int n, n_sel, head;
} g4_step;

static void step_body(void *ud) {
    const g4_step *st = ud;
    lmc_forward_state *fs = st->fs;
    const lmc_model *m = fs->m;
    const lmc_gemma4 *g = m->g4;
    lmc_gemma4_scratch *s = fs->g4;
    lmc_backend *be = m->be;
    const int n = st->n, n_sel = st->n_sel;
    lmc_tensor x = rows(&s->x, g->D, n), tok = rows(&s->tok, n, 1);
    be->i->get_rows(be, &x, &m->tok_embd, &tok, g->embed_scale);
    if (g->P) {
        /* per-layer inputs: (rms(proj(x)·D^-0.5)·w + embed_ple[tok]·sqrt(P)) · 2^-0.5, [P, L, n] */
        const int64_t LP = (int64_t)g->n_layers * g->P;
        lmc_tensor ple = rows(&s->ple, LP, n), tmp = rows(&s->ple_tmp, LP, n);
        be->i->get_rows(be, &ple, &g->embed_ple, &tok, g->ple_scale);
        be->i->matmul(be, &tmp, &g->ple_model_proj, &x);
        be->i->scale(be, &tmp, &tmp, 1.0f / sqrtf((float)g->D));
        lmc_tensor tv = rows(&s->ple_tmp, g->P, (int64_t)g->n_layers * n);
        rms(g, be, &tv, &tv, &g->ple_proj_norm);
        be->i->add(be, &ple, &ple, &tmp);
        be->i->scale(be, &ple, &ple, 1.0f / sqrtf(2.0f));
    }
    s->h_normed = 0;
    for (int il = 0; il < g->n_layers; il++) layer_forward(fs, il, st->kc, st->vc, n);
    if (n_sel == 0) return;
    lmc_tensor sel = rows(&s->h, g->D, n_sel), sidx = rows(&s->sel, n_sel, 1);
    be->i->get_rows(be, &sel, &x, &sidx, 1.0f);
    rms(g, be, &sel, &sel, &m->out_norm);
    if (st->head) lm_head_chunk(fs, 0, n_sel);
}

/* LM head of the gathered rows r0 .. r0+nr (≤ LMC_LOGITS_CHUNK) into s->logits. */
static void lm_head_chunk(lmc_forward_state *fs, int r0, int nr) {
    const lmc_model *m = fs->m;
    const lmc_gemma4 *g = m->g4;
    lmc_backend *be = m->be;
    lmc_tensor sel = rows(&fs->g4->h, g->D, r0 + nr);
    lmc_tensor xs = lmc_tensor_rows(&sel, r0, nr), lg = rows(&fs->g4->logits, g->V, nr);
    be->i->matmul(be, &lg, &m->lm_head, &xs);
    if (g->final_softcap > 0) be->i->softcap(be, &lg, &lg, g->final_softcap);
}

static uintptr_t fold_caches(const lmc_tensor *c, int n) {
    uintptr_t h = 0;
    for (int i = 0; i < n; i++) h = h * 1000003u ^ (uintptr_t)c[i].data;
    return h;
}

/* step_body from a recording of this step shape (steprec.h): 1 when enqueued, 0 when the caller
 * runs it itself. Not for MoE models (their routing reads back to the host mid-step). */
static int step_recorded(g4_step *st) {
    lmc_forward_state *fs = st->fs;
    lmc_gemma4_scratch *s = fs->g4;
    lmc_backend *be = fs->m->be;
    const int L = fs->m->g4->n_layers;
    const uintptr_t kc = fold_caches(st->kc, L), vc = fold_caches(st->vc, L);
    struct lmc_g4_rec *r = NULL, *victim = &s->rec[0];
    for (int i = 0; i < LMC_G4_RECS; i++) {
        struct lmc_g4_rec *e = &s->rec[i];
        if (e->n == st->n && e->n_sel == st->n_sel && e->head == st->head && e->kc == kc && e->vc == vc &&
            e->n_ctx == st->kc[0].ne[1] && e->n_seq == st->kc[0].ne[2]) {
            r = e;
            break;
        }
        if (e->used < victim->used) victim = e;
    }
    if (!r) {
        lmc_steprec_free(be, &victim->r);
        *victim = (struct lmc_g4_rec){.n = st->n, .n_sel = st->n_sel, .head = st->head, .kc = kc, .vc = vc,
                                      .n_ctx = st->kc[0].ne[1], .n_seq = st->kc[0].ne[2]};
        r = victim;
    }
    r->used = ++s->rec_clock;
    return lmc_steprec_play(be, &r->r, step_body, st);
}

lmc_status lmc_gemma4_forward(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                              float *logits_out, float *hidden_out, int *n_out) {
    int kept;
    return lmc_gemma4_forward_keep(fs, k_cache, v_cache, b, logits_out, hidden_out, n_out, 0, &kept);
}

lmc_status lmc_gemma4_forward_keep(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                                   float *logits_out, float *hidden_out, int *n_out, int keep, int *kept) {
    *kept = 0;
    const lmc_model *m = fs->m;
    const lmc_gemma4 *g = m->g4;
    lmc_gemma4_scratch *s = fs->g4;
    lmc_backend *be = m->be;
    const int n = b->n_tokens;
    if (n <= 0 || n > fs->n_batch_max)
        return lmc_fail(LMC_ERR_ARG, "batch of %d tokens (at most %d per forward)", n, fs->n_batch_max);
    for (int i = 0; i < n; i++) {
        if (b->token[i] < 0 || b->token[i] >= g->V || (g->P && b->token[i] >= g->Vp))
            return lmc_fail(LMC_ERR_RANGE, "token id %d is outside the vocabulary (0..%d)", b->token[i],
                            (g->P && g->Vp < g->V ? g->Vp : g->V) - 1);
        if (b->pos[i] < 0) return lmc_fail(LMC_ERR_RANGE, "negative position %d", b->pos[i]);
    }
    int32_t idx[n];
    int n_sel = 0;
    for (int i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] : i == n - 1) idx[n_sel++] = i;
    *n_out = n_sel;
    be->i->set(be, &s->tok, b->token, 0, (size_t)n * 4);
    be->i->set(be, &s->pos, b->pos, 0, (size_t)n * 4);
    be->i->set(be, &s->seq, b->seq, 0, (size_t)n * 4);
    if (n_sel > 0) be->i->set(be, &s->sel, idx, 0, (size_t)n_sel * 4);
    g4_step st = {.fs = fs, .kc = k_cache, .vc = v_cache, .n = n, .n_sel = n_sel,
                  .head = logits_out && n_sel > 0 && n_sel <= LMC_LOGITS_CHUNK};
    const int recorded = be->i->graph_begin && n <= LMC_G4_REC_MAX && step_recorded(&st);
    if (!recorded) step_body(&st);
    if (n_sel == 0) return be->i->sync(be);
    if (hidden_out) be->i->get(be, hidden_out, &s->h, 0, (size_t)n_sel * g->D * 4);
    if (st.head) {
        if (keep) *kept = 1; /* the rows stay in s->logits (fs->logits views it) */
        else be->i->get(be, logits_out, &s->logits, 0, (size_t)n_sel * g->V * 4);
        return be->i->sync(be);
    }
    for (int r0 = 0; logits_out && r0 < n_sel; r0 += LMC_LOGITS_CHUNK) {
        int nr = n_sel - r0 < LMC_LOGITS_CHUNK ? n_sel - r0 : LMC_LOGITS_CHUNK;
        lm_head_chunk(fs, r0, nr);
        be->i->get(be, logits_out + (size_t)r0 * g->V, &s->logits, 0, (size_t)nr * g->V * 4);
    }
    return be->i->sync(be);
}

/* ---------------------------------------------------------------- profile */

lmc_status lmc_gemma4_resolve(lmc_config *cfg, lmc_profile *out, int *handled) {
    *handled = 0;
    if (!strcmp(cfg->model_type, "gemma4_assistant") || !strcmp(cfg->outer_model_type, "gemma4_assistant")) {
        *handled = 1;
        return lmc_fail(LMC_ERR_UNSUPPORTED, "model_type \"gemma4_assistant\" is a Gemma 4 MTP drafter: it runs beside its "
                        "target (--spec mtp --draft DIR), not on its own");
    }
    if (strcmp(cfg->model_type, "gemma4_text") != 0) return LMC_OK;
    *handled = 1;
    memset(out, 0, sizeof *out);
    if (strcmp(cfg->outer_model_type, "gemma4_text") != 0 && strcmp(cfg->outer_model_type, "gemma4") != 0)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "model_type \"%s\" wrapping \"gemma4_text\" is not supported (gemma4 is)",
                        cfg->outer_model_type);
    out->tier = LMC_TIER_TARGETED;
    out->arch = &g4_row;
    out->graph = "gemma4";
    out->fidelity = "F1 (CPU f32 vs transformers float64, fixture-gated)";
    out->block = g4_row.block;
    out->names = g4_row.names;
    snprintf(out->id, sizeof out->id, "targeted-gemma4:%s", cfg->outer_model_type);
    return LMC_OK;
}
