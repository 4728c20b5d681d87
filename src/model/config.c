/* config.c — config.json + generation_config.json → lmc_config. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/jsonfile.h"

#define CONFIG_MAX_BYTES (16u << 20)

static const char *rope_names[] = {
    [LMC_ROPE_DEFAULT] = "default", [LMC_ROPE_LINEAR] = "linear",     [LMC_ROPE_DYNAMIC] = "dynamic",
    [LMC_ROPE_LLAMA3] = "llama3",   [LMC_ROPE_YARN] = "yarn",         [LMC_ROPE_LONGROPE] = "longrope",
    [LMC_ROPE_PROPORTIONAL] = "proportional", [LMC_ROPE_NONE] = "none",
};

const char *lmc_rope_type_name(lmc_rope_type t) {
    return (unsigned)t < sizeof rope_names / sizeof rope_names[0] ? rope_names[t] : "?";
}

static int lookup_int(const cJSON *a, const cJSON *b, const char *key, int64_t *out, lmc_status *st) {
    int r = lmc_json_get_int(a, key, out);
    if (r == 0 && b && b != a) r = lmc_json_get_int(b, key, out);
    if (r < 0) *st = lmc_fail(LMC_ERR_FORMAT, "config.json: \"%s\" must be an integer", key);
    return r;
}

int lmc_config_int(const lmc_config *cfg, const char *key, int64_t *out) {
    int r = lmc_json_get_int(cfg->text, key, out);
    if (r == 0 && cfg->raw != cfg->text) r = lmc_json_get_int(cfg->raw, key, out);
    return r;
}

int lmc_config_double(const lmc_config *cfg, const char *key, double *out) {
    int r = lmc_json_get_double(cfg->text, key, out);
    if (r == 0 && cfg->raw != cfg->text) r = lmc_json_get_double(cfg->raw, key, out);
    return r;
}

int lmc_config_bool(const lmc_config *cfg, const char *key, int *out) {
    int r = lmc_json_get_bool(cfg->text, key, out);
    if (r == 0 && cfg->raw != cfg->text) r = lmc_json_get_bool(cfg->raw, key, out);
    return r;
}

/* Required positive integer field. */
static lmc_status need_pos_int(const lmc_config *cfg, const char *key, int *out, int64_t max) {
    int64_t v;
    int r = lmc_config_int(cfg, key, &v);
    if (r < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: \"%s\" must be an integer", key);
    if (r == 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: missing \"%s\"", key);
    if (v <= 0 || v > max) return lmc_fail(LMC_ERR_FORMAT, "config.json: \"%s\" = %lld is out of range", key, (long long)v);
    *out = (int)v;
    return LMC_OK;
}

/* Optional positive integer field (left unchanged when absent or null). */
static lmc_status opt_pos_int(const lmc_config *cfg, const char *key, int *out, int64_t max) {
    int64_t v;
    int r = lmc_config_int(cfg, key, &v);
    if (r < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: \"%s\" must be an integer", key);
    if (r == 0) return LMC_OK;
    if (v <= 0 || v > max) return lmc_fail(LMC_ERR_FORMAT, "config.json: \"%s\" = %lld is out of range", key, (long long)v);
    *out = (int)v;
    return LMC_OK;
}

/* The key of `keys` (NULL-terminated, the canonical name first) present in the config, else the
 * canonical one: older and per-model spellings (gpt2 n_embd, falcon num_kv_heads, ...). */
static const char *key_of(const lmc_config *cfg, const char *const *keys) {
    int64_t v;
    for (int i = 0; keys[i]; i++)
        if (lmc_config_int(cfg, keys[i], &v) != 0) return keys[i];
    return keys[0];
}

static lmc_status get_num(const cJSON *o, const char *key, double *out) {
    int r = lmc_json_get_double(o, key, out);
    if (r < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: rope \"%s\" must be a number", key);
    return LMC_OK;
}

static lmc_status get_factors(const cJSON *o, const char *key, double *dst, int *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!a || cJSON_IsNull(a)) return LMC_OK;
    if (!cJSON_IsArray(a)) return lmc_fail(LMC_ERR_FORMAT, "config.json: rope \"%s\" must be a list", key);
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        if (!cJSON_IsNumber(it)) return lmc_fail(LMC_ERR_FORMAT, "config.json: rope \"%s\" holds a non-number", key);
        if (k >= LMC_ROPE_MAX_FACTORS / 2) return lmc_fail(LMC_ERR_FORMAT, "config.json: rope \"%s\" is too long", key);
        dst[k++] = it->valuedouble;
    }
    *n = k;
    return LMC_OK;
}

lmc_status lmc_rope_config_parse(const cJSON *o, lmc_rope_config *rc) {
    if (!cJSON_IsObject(o)) return lmc_fail(LMC_ERR_FORMAT, "config.json: rope parameters must be an object");
    const char *type = NULL;
    if (lmc_json_get_string(o, "rope_type", &type) < 0 || (!type && lmc_json_get_string(o, "type", &type) < 0))
        return lmc_fail(LMC_ERR_FORMAT, "config.json: rope type must be a string");
    if (type) {
        int found = 0;
        for (int t = 0; t < (int)(sizeof rope_names / sizeof rope_names[0]); t++) {
            if (strcmp(type, rope_names[t]) == 0) { rc->type = (lmc_rope_type)t; found = 1; }
        }
        if (!found && strcmp(type, "su") == 0) { rc->type = LMC_ROPE_LONGROPE; found = 1; }
        if (!found) return lmc_fail(LMC_ERR_UNSUPPORTED, "rope type \"%s\" is not supported (supported: default, linear, dynamic, llama3, yarn, longrope, proportional)", type);
    }
    LMC_TRY(get_num(o, "rope_theta", &rc->theta));
    LMC_TRY(get_num(o, "partial_rotary_factor", &rc->partial_rotary_factor));
    LMC_TRY(get_num(o, "factor", &rc->factor));
    LMC_TRY(get_num(o, "low_freq_factor", &rc->low_freq_factor));
    LMC_TRY(get_num(o, "high_freq_factor", &rc->high_freq_factor));
    LMC_TRY(get_num(o, "attention_factor", &rc->attention_factor));
    LMC_TRY(get_num(o, "beta_fast", &rc->beta_fast));
    LMC_TRY(get_num(o, "beta_slow", &rc->beta_slow));
    LMC_TRY(get_num(o, "mscale", &rc->mscale));
    LMC_TRY(get_num(o, "mscale_all_dim", &rc->mscale_all_dim));
    LMC_TRY(get_num(o, "llama_4_scaling_beta", &rc->llama4_beta));
    int64_t omp;
    int r = lmc_json_get_int(o, "original_max_position_embeddings", &omp);
    if (r < 0 || (r > 0 && (omp <= 0 || omp > (1 << 30))))
        return lmc_fail(LMC_ERR_FORMAT, "config.json: rope original_max_position_embeddings must be a positive integer");
    if (r > 0) rc->original_max_position_embeddings = (int)omp;
    int tr;
    if (lmc_json_get_bool(o, "truncate", &tr) > 0) rc->truncate = tr;
    LMC_TRY(get_factors(o, "short_factor", rc->short_factor, &rc->n_short_factor));
    LMC_TRY(get_factors(o, "long_factor", rc->long_factor, &rc->n_long_factor));
    if (rc->theta <= 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: rope_theta must be positive");
    if (rc->partial_rotary_factor <= 0 || rc->partial_rotary_factor > 1)
        return lmc_fail(LMC_ERR_FORMAT, "config.json: partial_rotary_factor must be in (0, 1]");
    return LMC_OK;
}

static void rope_defaults(lmc_rope_config *rc) {
    memset(rc, 0, sizeof *rc);
    rc->type = LMC_ROPE_DEFAULT;
    rc->theta = 10000.0;
    rc->partial_rotary_factor = 1.0;
    rc->factor = 0; /* absent */
    rc->low_freq_factor = 1.0;
    rc->high_freq_factor = 4.0;
    rc->attention_factor = -1.0;
    rc->beta_fast = 32.0;
    rc->beta_slow = 1.0;
    rc->truncate = 1;
    rc->llama4_beta = -1.0;
}

/* Both spellings: transformers 5 `rope_parameters` (flat, or keyed by layer
 * type) and transformers 4 `rope_scaling` + top-level `rope_theta`. */
static lmc_status parse_rope(lmc_config *cfg) {
    rope_defaults(&cfg->rope);
    double theta, prf;
    int rt = lmc_config_double(cfg, "rope_theta", &theta), rp = lmc_config_double(cfg, "partial_rotary_factor", &prf);
    if (rt < 0 || rp < 0) /* a mistyped value must not fall back to the default silently */
        return lmc_fail(LMC_ERR_FORMAT, "config.json: \"%s\" must be a number", rt < 0 ? "rope_theta" : "partial_rotary_factor");
    /* gpt-neox spellings: rotary_emb_base, rotary_pct; gptj: rotary_dim (a count) */
    if (rt == 0) rt = lmc_config_double(cfg, "rotary_emb_base", &theta);
    if (rp == 0) rp = lmc_config_double(cfg, "rotary_pct", &prf);
    if (rt < 0 || rp < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: rotary_emb_base and rotary_pct must be numbers");
    if (rt > 0) cfg->rope.theta = theta;
    if (rp > 0) cfg->rope.partial_rotary_factor = prf;
    int64_t rdim;
    int rd = lmc_config_int(cfg, "rotary_dim", &rdim);
    if (rd < 0 || (rd > 0 && (rdim < 2 || rdim % 2 || rdim > (1 << 16))))
        return lmc_fail(LMC_ERR_FORMAT, "config.json: rotary_dim must be a positive even integer");
    if (rd > 0) cfg->rope.rotary_dim = (int)rdim;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(cfg->text, "rope_parameters");
    if (!params && cfg->text != cfg->raw) params = cJSON_GetObjectItemCaseSensitive(cfg->raw, "rope_parameters");
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(cfg->text, "rope_scaling");
    if (!scaling && cfg->text != cfg->raw) scaling = cJSON_GetObjectItemCaseSensitive(cfg->raw, "rope_scaling");
    cfg->rope_local = cfg->rope;
    /* per-layer-type rope_parameters (transformers 5) are authoritative: rope_local_base_freq
     * only applies to the flat spellings (else the full layers' dict would be lost) */
    const int per_layer = cJSON_IsObject(params) && (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(params, "full_attention")) ||
                                                      cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(params, "sliding_attention")));
    double local_theta = 0;
    int rl = per_layer ? 0 : lmc_config_double(cfg, "rope_local_base_freq", &local_theta);
    if (rl < 0 || (rl > 0 && !(local_theta > 0)))
        return lmc_fail(LMC_ERR_FORMAT, "config.json: \"rope_local_base_freq\" must be a positive number");
    if (rl > 0) {
        /* transformers 4 gemma3: sliding layers use default rope at this base */
        lmc_rope_config local = cfg->rope;
        local.type = LMC_ROPE_DEFAULT;
        local.theta = local_theta;
        if (params && !cJSON_IsNull(params)) LMC_TRY(lmc_rope_config_parse(params, &cfg->rope));
        else if (scaling && !cJSON_IsNull(scaling)) LMC_TRY(lmc_rope_config_parse(scaling, &cfg->rope));
        cfg->rope_local = local;
        return LMC_OK;
    }
    if (params && !cJSON_IsNull(params)) {
        const cJSON *full = cJSON_GetObjectItemCaseSensitive(params, "full_attention");
        const cJSON *slid = cJSON_GetObjectItemCaseSensitive(params, "sliding_attention");
        if (cJSON_IsObject(full) || cJSON_IsObject(slid)) {
            if (full) LMC_TRY(lmc_rope_config_parse(full, &cfg->rope));
            if (slid) LMC_TRY(lmc_rope_config_parse(slid, &cfg->rope_local));
            else cfg->rope_local = cfg->rope;
            return LMC_OK;
        }
        LMC_TRY(lmc_rope_config_parse(params, &cfg->rope));
    } else if (scaling && !cJSON_IsNull(scaling)) {
        LMC_TRY(lmc_rope_config_parse(scaling, &cfg->rope));
    }
    cfg->rope_local = cfg->rope;
    return LMC_OK;
}

/* transformers' standardize_rope_params: a top-level original_max_position_embeddings
 * (phi3) overrides the rope dict's for llama3 / yarn / longrope. */
static void rope_top_level_original(const lmc_config *cfg, lmc_rope_config *rc) {
    int64_t v;
    if ((rc->type == LMC_ROPE_LLAMA3 || rc->type == LMC_ROPE_YARN || rc->type == LMC_ROPE_LONGROPE) &&
        lmc_config_int(cfg, "original_max_position_embeddings", &v) > 0 && v > 0 && v < (1 << 30))
        rc->original_max_position_embeddings = (int)v;
}

static lmc_status parse_ids(const cJSON *item, const char *what, int *ids, int *n) {
    if (!item || cJSON_IsNull(item)) return LMC_OK;
    int64_t v;
    if (lmc_json_item_int(item, &v)) {
        if (v < 0 || v > INT32_MAX) return lmc_fail(LMC_ERR_FORMAT, "%s: token id out of range", what);
        for (int i = 0; i < *n; i++) if (ids[i] == (int)v) return LMC_OK;
        if (*n < LMC_MAX_EOS) ids[(*n)++] = (int)v;
        return LMC_OK;
    }
    if (!cJSON_IsArray(item)) return lmc_fail(LMC_ERR_FORMAT, "%s: eos_token_id must be an integer or a list", what);
    const cJSON *it;
    cJSON_ArrayForEach(it, item) {
        if (!lmc_json_item_int(it, &v) || v < 0 || v > INT32_MAX)
            return lmc_fail(LMC_ERR_FORMAT, "%s: eos_token_id list holds a non-id", what);
        int dup = 0;
        for (int i = 0; i < *n; i++) dup |= ids[i] == (int)v;
        if (!dup && *n < LMC_MAX_EOS) ids[(*n)++] = (int)v;
    }
    return LMC_OK;
}

static lmc_status opt_double(const lmc_config *cfg, const char *key, double *out) {
    if (lmc_config_double(cfg, key, out) < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: \"%s\" must be a number", key);
    return LMC_OK;
}

/* layer_types, no_rope_layers, and the scalar knobs of the forward. */
static lmc_status parse_forward_knobs(lmc_config *cfg) {
    if (cfg->n_layers > LMC_MAX_LAYERS)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "config.json: %d layers (lmc supports up to %d)", cfg->n_layers, LMC_MAX_LAYERS);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(cfg->text, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->n_layers)
            return lmc_fail(LMC_ERR_FORMAT, "config.json: layer_types must be a list of %d strings", cfg->n_layers);
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, lt) {
            if (!cJSON_IsString(it)) return lmc_fail(LMC_ERR_FORMAT, "config.json: layer_types holds a non-string");
            if (!strcmp(it->valuestring, "sliding_attention")) cfg->layer_sliding[i] = 1;
            else if (strcmp(it->valuestring, "full_attention") != 0)
                return lmc_fail(LMC_ERR_UNSUPPORTED, "config.json: layer type \"%s\" is not supported", it->valuestring);
            i++;
        }
        cfg->has_layer_types = 1;
    }
    const cJSON *nr = cJSON_GetObjectItemCaseSensitive(cfg->text, "no_rope_layers");
    if (nr && !cJSON_IsNull(nr)) {
        if (!cJSON_IsArray(nr) || cJSON_GetArraySize(nr) != cfg->n_layers)
            return lmc_fail(LMC_ERR_FORMAT, "config.json: no_rope_layers must be a list of %d integers", cfg->n_layers);
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, nr) {
            int64_t v;
            if (!lmc_json_item_int(it, &v)) return lmc_fail(LMC_ERR_FORMAT, "config.json: no_rope_layers holds a non-integer");
            cfg->layer_nope[i++] = v == 0; /* 1 = this layer uses rope */
        }
        cfg->has_no_rope_layers = 1;
    }
    LMC_TRY(opt_pos_int(cfg, "no_rope_layer_interval", &cfg->nope_interval, 1 << 20));
    const cJSON *swp = cJSON_GetObjectItemCaseSensitive(cfg->text, "sliding_window_pattern");
    if (cJSON_IsString(swp)) {
        /* exaone4 spelling: "LLLG" = three local layers then a global one, repeated */
        size_t n = strlen(swp->valuestring);
        int ok = n > 0 && swp->valuestring[n - 1] == 'G';
        for (size_t i = 0; ok && i + 1 < n; i++) ok = swp->valuestring[i] == 'L';
        if (ok) cfg->sliding_pattern = (int)n;
        else if (!cfg->has_layer_types)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "config.json: sliding_window_pattern \"%s\" is not supported", swp->valuestring);
    } else {
        LMC_TRY(opt_pos_int(cfg, "sliding_window_pattern", &cfg->sliding_pattern, 1 << 20));
    }
    int bidir;
    if (lmc_config_bool(cfg, "use_bidirectional_attention", &bidir) > 0 && bidir)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "use_bidirectional_attention (an encoder) is not supported");
    double q = 0;
    LMC_TRY(opt_double(cfg, "query_pre_attn_scalar", &q));
    if (q < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: query_pre_attn_scalar must be positive");
    if (q > 0) cfg->attn_scale = 1.0 / sqrt(q);
    double am = 0;
    LMC_TRY(opt_double(cfg, "attention_multiplier", &am));
    if (am != 0) cfg->attn_scale = am;
    LMC_TRY(opt_double(cfg, "attn_logit_softcapping", &cfg->attn_softcap));
    LMC_TRY(opt_double(cfg, "final_logit_softcapping", &cfg->final_softcap));
    if (cfg->attn_softcap < 0 || cfg->final_softcap < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: softcaps must be positive");
    cfg->embed_mult = cfg->resid_mult = cfg->logits_mult = 1.0;
    LMC_TRY(opt_double(cfg, "embedding_multiplier", &cfg->embed_mult));
    LMC_TRY(opt_double(cfg, "residual_multiplier", &cfg->resid_mult));
    double ls = 0;
    LMC_TRY(opt_double(cfg, "logits_scaling", &ls));
    if (ls != 0) cfg->logits_mult = 1.0 / ls;
    LMC_TRY(opt_double(cfg, "logit_scale", &cfg->logits_mult));
    /* mlx-lm's quantization block: {"group_size": G, "bits": B, "<module path>": {..} | false, ...} */
    const cJSON *qb_obj = cJSON_GetObjectItemCaseSensitive(cfg->raw, "quantization");
    if (!qb_obj) qb_obj = cJSON_GetObjectItemCaseSensitive(cfg->raw, "quantization_config");
    int64_t qb = 0, qg = 0;
    const char *method = NULL, *mode = NULL;
    if (cJSON_IsObject(qb_obj) && lmc_json_get_string(qb_obj, "quant_method", &method) > 0 && method) {
        /* Hugging Face MXFP4 (gpt-oss): the quantized tensors come as `_blocks` + `_scales` pairs */
        if (strcmp(method, "mxfp4") != 0)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "config.json: quantization method \"%s\" is not supported (lmc reads "
                            "MLX affine / mxfp4 checkpoints, Hugging Face mxfp4 and GGUF files)", method);
        cfg->quant_hf_mxfp4 = 1;
        qb_obj = NULL;
    }
    if (cJSON_IsObject(qb_obj) && lmc_json_get_string(qb_obj, "mode", &mode) > 0 && mode) {
        if (strcmp(mode, "mxfp4") == 0) {
            cfg->quant_mxfp4 = 1;
        } else if (strcmp(mode, "affine") != 0) {
            return lmc_fail(LMC_ERR_UNSUPPORTED, "config.json: MLX quantization mode \"%s\" is not supported (affine and "
                            "mxfp4 are)", mode);
        }
    }
    if (cfg->quant_mxfp4) {
        if (lmc_json_get_int(qb_obj, "bits", &qb) <= 0) qb = 4;
        if (lmc_json_get_int(qb_obj, "group_size", &qg) <= 0) qg = 32;
        if (qb != 4 || qg != 32)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "config.json: mxfp4 quantization has 4 bits in groups of 32, not %lld / "
                            "%lld", (long long)qb, (long long)qg);
        cfg->quant_bits = 4;
        cfg->quant_group = 32;
        cfg->quant = qb_obj;
    } else if (cJSON_IsObject(qb_obj) && lmc_json_get_int(qb_obj, "bits", &qb) > 0) {
        if (lmc_json_get_int(qb_obj, "group_size", &qg) <= 0) qg = 64;
        if (qb != 2 && qb != 3 && qb != 4 && qb != 5 && qb != 6 && qb != 8)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "config.json: quantization bits %lld (supported: 2, 3, 4, 5, 6, 8)", (long long)qb);
        if (qg != 32 && qg != 64 && qg != 128)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "config.json: quantization group_size %lld (supported: 32, 64, 128)", (long long)qg);
        cfg->quant_bits = (int)qb;
        cfg->quant_group = (int)qg;
        cfg->quant = qb_obj;
    }
    int b;
    cfg->use_qk_norm = cfg->use_bias = -1;
    if (lmc_config_bool(cfg, "use_qk_norm", &b) > 0 || lmc_config_bool(cfg, "qk_layernorm", &b) > 0) cfg->use_qk_norm = b;
    if (lmc_config_bool(cfg, "use_bias", &b) > 0) cfg->use_bias = b;
    return LMC_OK;
}

/* The first of `keys` present as a non-negative integer (unchanged when none is). A per-layer list
 * (hunyuan's moe_topk) is read when every entry is the same; differing entries are refused. */
static lmc_status moe_int(const lmc_config *cfg, const char *const *keys, int *out) {
    for (int i = 0; keys[i]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(cfg->text, keys[i]);
        if (!it || cJSON_IsNull(it)) continue;
        if (cJSON_IsArray(it)) {
            const cJSON *e;
            int64_t first = -1, v;
            cJSON_ArrayForEach(e, it) {
                if (!lmc_json_item_int(e, &v) || v < 0 || v > (1 << 24) || (first >= 0 && v != first))
                    return lmc_fail(LMC_ERR_UNSUPPORTED, "config.json: per-layer \"%s\" lists with differing "
                                    "values are not supported", keys[i]);
                first = v;
            }
            if (first < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: \"%s\" is an empty list", keys[i]);
            *out = (int)first;
            return LMC_OK;
        }
        int64_t v;
        if (!lmc_json_item_int(it, &v) || v < 0 || v > (1 << 24))
            return lmc_fail(LMC_ERR_FORMAT, "config.json: \"%s\" must be a non-negative integer", keys[i]);
        *out = (int)v;
        return LMC_OK;
    }
    return LMC_OK;
}

/* Mixture-of-experts sizes, routing scalars and which layers stay dense. */
static lmc_status parse_moe(lmc_config *cfg) {
    static const char *const k_experts[] = {"num_local_experts", "num_experts", "moe_num_experts", "n_routed_experts", NULL};
    static const char *const k_used[] = {"num_experts_per_tok", "moe_k", "moe_topk", "top_k_experts" /* gemma4 */, NULL};
    static const char *const k_shared[] = {"n_shared_experts", "moe_num_shared_experts", NULL};
    static const char *const k_shared_i[] = {"shared_expert_intermediate_size", "shared_intermediate_size", NULL};
    static const char *const k_moe_i[] = {"moe_intermediate_size", NULL};
    cfg->routed_scaling_factor = 1.0;
    cfg->norm_topk_prob = -1;
    cfg->router_jitter = -1;
    LMC_TRY(moe_int(cfg, k_experts, &cfg->n_experts));
    if (cfg->n_experts == 0) return LMC_OK;
    LMC_TRY(moe_int(cfg, k_used, &cfg->n_experts_used));
    cfg->moe_intermediate_size = cfg->intermediate_size;
    LMC_TRY(moe_int(cfg, k_moe_i, &cfg->moe_intermediate_size));
    LMC_TRY(moe_int(cfg, k_shared, &cfg->n_shared_experts));
    LMC_TRY(moe_int(cfg, k_shared_i, &cfg->shared_intermediate_size));
    if (cfg->n_experts_used < 1 || cfg->n_experts_used > cfg->n_experts)
        return lmc_fail(LMC_ERR_FORMAT, "config.json: %d experts per token of %d experts", cfg->n_experts_used,
                        cfg->n_experts);
    if (cfg->moe_intermediate_size <= 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: moe_intermediate_size must be positive");
    int b;
    if (lmc_config_bool(cfg, "norm_topk_prob", &b) > 0) cfg->norm_topk_prob = b;
    LMC_TRY(opt_double(cfg, "routed_scaling_factor", &cfg->routed_scaling_factor));
    LMC_TRY(opt_double(cfg, "router_jitter_noise", &cfg->router_jitter));
    LMC_TRY(opt_double(cfg, "moe_norm_min", &cfg->moe_norm_min));
    int g = 0, tg = 0;
    static const char *const k_group[] = {"n_group", NULL}, *const k_topk_group[] = {"topk_group", NULL};
    LMC_TRY(moe_int(cfg, k_group, &g));
    LMC_TRY(moe_int(cfg, k_topk_group, &tg));
    cfg->n_group = g;
    cfg->topk_group = tg;
    if (g > 1 && (g > 256 || cfg->n_experts % g != 0 || tg < 1 || tg > g))
        return lmc_fail(LMC_ERR_FORMAT, "config.json: n_group %d / topk_group %d do not divide %d experts", g, tg,
                        cfg->n_experts);
    /* dense layers: every rule whose keys are present */
    int step = 0, first_dense = 0, interval = 0, start = 0, end = -1;
    static const char *const k_step[] = {"decoder_sparse_step", NULL}, *const k_first[] = {"first_k_dense_replace", NULL};
    static const char *const k_int[] = {"moe_layer_interval", NULL}, *const k_start[] = {"moe_layer_start_index", NULL};
    LMC_TRY(moe_int(cfg, k_step, &step));
    LMC_TRY(moe_int(cfg, k_first, &first_dense));
    LMC_TRY(moe_int(cfg, k_int, &interval));
    LMC_TRY(moe_int(cfg, k_start, &start));
    int64_t v;
    if (lmc_config_int(cfg, "moe_layer_end_index", &v) > 0) end = v < 0 ? cfg->n_layers - 1 : (int)(v < cfg->n_layers ? v : cfg->n_layers);
    else end = cfg->n_layers - 1;
    for (int il = 0; il < cfg->n_layers && il < LMC_MAX_LAYERS; il++) {
        int dense = 0;
        if (step > 0 && (il + 1) % step != 0) dense = 1;
        if (il < first_dense) dense = 1;
        if (interval > 0 && ((il + 1) % interval != 0 || il < start || il > end)) dense = 1;
        cfg->layer_dense[il] = (unsigned char)dense;
    }
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(cfg->text, "mlp_only_layers");
    if (mo && !cJSON_IsNull(mo)) {
        if (!cJSON_IsArray(mo)) return lmc_fail(LMC_ERR_FORMAT, "config.json: mlp_only_layers must be a list");
        const cJSON *it;
        cJSON_ArrayForEach(it, mo) {
            if (!lmc_json_item_int(it, &v) || v < 0 || v >= cfg->n_layers)
                return lmc_fail(LMC_ERR_FORMAT, "config.json: mlp_only_layers holds a non-layer");
            cfg->layer_dense[v] = 1;
        }
    }
    return LMC_OK;
}

static void copy_str(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

lmc_status lmc_config_from_json(cJSON *raw, const cJSON *gen, lmc_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->raw = raw;
    cfg->text = raw;
    if (!cJSON_IsObject(raw)) return lmc_fail(LMC_ERR_FORMAT, "config.json: top level must be an object");
    const char *s = NULL;
    if (lmc_json_get_string(raw, "model_type", &s) < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: model_type must be a string");
    copy_str(cfg->outer_model_type, sizeof cfg->outer_model_type, s);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(raw, "text_config");
    if (tc && !cJSON_IsNull(tc)) {
        if (!cJSON_IsObject(tc)) return lmc_fail(LMC_ERR_FORMAT, "config.json: text_config must be an object");
        cfg->text = tc;
        s = NULL;
        if (lmc_json_get_string(tc, "model_type", &s) < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: text_config.model_type must be a string");
    }
    if (!s || !*s) return lmc_fail(LMC_ERR_FORMAT, "config.json: missing \"model_type\"");
    copy_str(cfg->model_type, sizeof cfg->model_type, s);
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(raw, "architectures");
    if (cJSON_IsArray(archs) && cJSON_IsString(cJSON_GetArrayItem(archs, 0)))
        copy_str(cfg->architecture, sizeof cfg->architecture, cJSON_GetArrayItem(archs, 0)->valuestring);
    if (lmc_json_get_string(raw, "torch_dtype", &s) > 0 || lmc_json_get_string(raw, "dtype", &s) > 0)
        copy_str(cfg->torch_dtype, sizeof cfg->torch_dtype, s);

    LMC_TRY(need_pos_int(cfg, "vocab_size", &cfg->vocab_size, 1 << 24));
    /* canonical names first, then the spellings of gpt2/gptj (n_embd, n_layer, n_head, n_positions,
     * n_inner) and falcon (num_kv_heads, ffn_hidden_size) */
    static const char *const k_hidden[] = {"hidden_size", "n_embd", NULL}, *const k_layers[] = {"num_hidden_layers", "n_layer", NULL};
    static const char *const k_heads[] = {"num_attention_heads", "n_head", NULL};
    static const char *const k_inter[] = {"intermediate_size", "n_inner", "ffn_hidden_size", NULL};
    static const char *const k_kv[] = {"num_key_value_heads", "num_kv_heads", NULL};
    static const char *const k_maxpos[] = {"max_position_embeddings", "n_positions", NULL};
    LMC_TRY(need_pos_int(cfg, key_of(cfg, k_hidden), &cfg->hidden_size, 1 << 20));
    LMC_TRY(need_pos_int(cfg, key_of(cfg, k_layers), &cfg->n_layers, 4096));
    LMC_TRY(need_pos_int(cfg, key_of(cfg, k_heads), &cfg->n_heads, 4096));
    cfg->intermediate_size = 4 * cfg->hidden_size;
    LMC_TRY(opt_pos_int(cfg, key_of(cfg, k_inter), &cfg->intermediate_size, 1 << 24));
    cfg->n_kv_heads = cfg->n_heads;
    LMC_TRY(opt_pos_int(cfg, key_of(cfg, k_kv), &cfg->n_kv_heads, 4096));
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return lmc_fail(LMC_ERR_FORMAT, "config.json: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                        cfg->n_heads, cfg->n_kv_heads);
    cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    LMC_TRY(opt_pos_int(cfg, "head_dim", &cfg->head_dim, 1 << 16));
    cfg->max_position_embeddings = 2048;
    LMC_TRY(opt_pos_int(cfg, key_of(cfg, k_maxpos), &cfg->max_position_embeddings, 1 << 30));
    cfg->norm_eps = 1e-6;
    if (lmc_config_double(cfg, "rms_norm_eps", &cfg->norm_eps) < 0 ||
        lmc_config_double(cfg, "layer_norm_epsilon", &cfg->norm_eps) < 0 ||
        lmc_config_double(cfg, "norm_eps", &cfg->norm_eps) < 0 ||
        lmc_config_double(cfg, "layer_norm_eps", &cfg->norm_eps) < 0 ||
        lmc_config_double(cfg, "norm_epsilon", &cfg->norm_eps) < 0)
        return lmc_fail(LMC_ERR_FORMAT, "config.json: norm epsilon must be a number");
    if (!(cfg->norm_eps >= 0 && cfg->norm_eps < 1)) return lmc_fail(LMC_ERR_FORMAT, "config.json: norm epsilon out of range");
    /* tie_word_embeddings lives on the outer config for multimodal wrappers */
    cfg->tie_word_embeddings = 0;
    int b;
    if (lmc_json_get_bool(raw, "tie_word_embeddings", &b) > 0) cfg->tie_word_embeddings = b;
    else if (lmc_json_get_bool(cfg->text, "tie_word_embeddings", &b) > 0) cfg->tie_word_embeddings = b;
    if (lmc_config_bool(cfg, "attention_bias", &b) > 0 || lmc_config_bool(cfg, "use_qkv_bias", &b) > 0) {
        cfg->attention_bias = b;
        cfg->attention_bias_given = 1;
    }
    if (lmc_config_bool(cfg, "mlp_bias", &b) > 0) cfg->mlp_bias = b;
    cfg->attention_out_bias = -1;
    if (lmc_config_bool(cfg, "attention_out_bias", &b) > 0) cfg->attention_out_bias = b;
    /* hidden_act; the descriptor may name another key (gemma2: hidden_activation), see lmc_profile_resolve */
    copy_str(cfg->hidden_act, sizeof cfg->hidden_act, "silu");
    if (lmc_json_get_string(cfg->text, "hidden_act", &s) > 0) {
        copy_str(cfg->hidden_act, sizeof cfg->hidden_act, s);
        cfg->hidden_act_given = 1;
    }
    int64_t v;
    int r = lmc_config_int(cfg, "sliding_window", &v);
    if (r < 0) return lmc_fail(LMC_ERR_FORMAT, "config.json: sliding_window must be an integer or null");
    if (r > 0 && v > 0) cfg->sliding_window = v > (1 << 30) ? (1 << 30) : (int)v;
    LMC_TRY(parse_rope(cfg));
    rope_top_level_original(cfg, &cfg->rope);
    rope_top_level_original(cfg, &cfg->rope_local);
    LMC_TRY(parse_forward_knobs(cfg));
    LMC_TRY(parse_moe(cfg));

    lmc_status st = LMC_OK;
    cfg->bos_token_id = cfg->pad_token_id = -1;
    if (lookup_int(cfg->text, raw, "bos_token_id", &v, &st) > 0 && v >= 0 && v <= INT32_MAX) cfg->bos_token_id = (int)v;
    if (st < 0) return st;
    if (lookup_int(cfg->text, raw, "pad_token_id", &v, &st) > 0 && v >= 0 && v <= INT32_MAX) cfg->pad_token_id = (int)v;
    if (st < 0) return st;
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(cfg->text, "eos_token_id");
    if (!eos) eos = cJSON_GetObjectItemCaseSensitive(raw, "eos_token_id");
    LMC_TRY(parse_ids(eos, "config.json", cfg->eos_token_ids, &cfg->n_eos));

    cfg->gen_temperature = cfg->gen_top_p = cfg->gen_min_p = cfg->gen_repetition_penalty = -1;
    cfg->gen_top_k = -1;
    if (gen) {
        if (!cJSON_IsObject(gen)) return lmc_fail(LMC_ERR_FORMAT, "generation_config.json: top level must be an object");
        LMC_TRY(parse_ids(cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id"), "generation_config.json",
                          cfg->eos_token_ids, &cfg->n_eos));
        if (cfg->bos_token_id < 0 && lmc_json_get_int(gen, "bos_token_id", &v) > 0 && v >= 0 && v <= INT32_MAX)
            cfg->bos_token_id = (int)v;
        lmc_json_get_double(gen, "temperature", &cfg->gen_temperature);
        lmc_json_get_double(gen, "top_p", &cfg->gen_top_p);
        lmc_json_get_double(gen, "min_p", &cfg->gen_min_p);
        lmc_json_get_double(gen, "repetition_penalty", &cfg->gen_repetition_penalty);
        if (lmc_json_get_int(gen, "top_k", &v) > 0 && v >= 0 && v < (1 << 24)) cfg->gen_top_k = (int)v;
        if (lmc_json_get_bool(gen, "do_sample", &b) > 0) cfg->gen_do_sample = b;
    }
    return LMC_OK;
}

lmc_status lmc_config_load(const char *dir, lmc_config *cfg) {
    char path[4200];
    cJSON *raw = NULL, *gen = NULL;
    memset(cfg, 0, sizeof *cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    LMC_TRY(lmc_json_read_file(path, CONFIG_MAX_BYTES, &raw));
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        lmc_status st = lmc_json_read_file(path, CONFIG_MAX_BYTES, &gen);
        if (st < 0) { cJSON_Delete(raw); return st; }
    }
    lmc_status st = lmc_config_from_json(raw, gen, cfg);
    cJSON_Delete(gen);
    if (st < 0) {
        lmc_config_free(cfg);
        return lmc_fail_context(st, "%s/config.json", dir);
    }
    return LMC_OK;
}

void lmc_config_free(lmc_config *cfg) {
    if (!cfg) return;
    cJSON_Delete(cfg->raw);
    cfg->raw = NULL;
    cfg->text = NULL;
}
