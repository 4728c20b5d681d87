/* gguf_convert.c — HF checkpoint directory → GGUF, in llama.cpp's layout.
 *
 * Reads config.json (flat text configs; both rope spellings) and the
 * safetensors set, writes the {arch}.* metadata and the renamed tensors
 * through lmc_gguf_writer. Owns, for the duration of one call, the parsed
 * config, the safetensors set and the buffers of rewritten tensors
 * (permuted q/k, norms + 1, rope tables), all freed before returning.
 */
#include "io/gguf_convert.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/dtype.h"
#include "core/quant.h"
#include "io/gguf.h"
#include "io/gguf_arch.h"
#include "io/gguf_tok.h"
#include "io/jsonfile.h"
#include "io/safetensors.h"

#define CONV_MAX_TOKENIZER_BYTES ((size_t)256 << 20)

typedef struct conv {
    const char *dir;
    const lmc_gguf_arch_info *a;
    const cJSON *cfg;
    lmc_gguf_writer *w;
    void **bufs;                 /* rewritten tensor data, freed at the end */
    int n_bufs, cap_bufs;
    char key[192];
    int64_t hidden, n_layers, n_heads, n_kv, head_dim, ff, rope_dim;
    int tied;
    int quant_type;              /* lmc_dtype to quantize matrices to, 0 = keep */
    lmc_convert_float float_type; /* else the float type to store them in, 0 = keep */
    int64_t n_expert;            /* MoE: experts per sparse layer (0: dense model) */
    unsigned char *experts_done; /* [n_layers · 3]: stacked tensor (layer, gate/up/down) written */
    const lmc_st_set *set;
} conv;

static const char *K(conv *c, const char *suffix) {
    snprintf(c->key, sizeof c->key, "%s.%s", c->a->gguf_arch, suffix);
    return c->key;
}

static void *own(conv *c, size_t bytes) {
    if (c->n_bufs == c->cap_bufs) {
        int nc = c->cap_bufs ? c->cap_bufs * 2 : 32;
        void **nb = realloc(c->bufs, (size_t)nc * sizeof *nb);
        if (!nb) return NULL;
        c->bufs = nb;
        c->cap_bufs = nc;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) c->bufs[c->n_bufs++] = p;
    return p;
}

/* A present, non-null config value (NULL when absent or JSON null). */
static const cJSON *item(const cJSON *o, const char *k) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static lmc_status req_int(conv *c, const char *k, int64_t *out) {
    int r = lmc_json_get_int(c->cfg, k, out);
    if (r <= 0 || *out <= 0 || *out > INT32_MAX) {
        return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: %s is missing or not a positive integer", c->dir, k);
    }
    return LMC_OK;
}

/* A number from the rope dict first, then the top level; 1 found, 0 absent, <0 wrong type. */
static int rope_num(conv *c, const cJSON *rope, const char *k, double *out) {
    const cJSON *v = item(rope, k);
    if (!v) v = item(c->cfg, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: %s is not a number", c->dir, k);
    *out = v->valuedouble;
    return 1;
}

static lmc_status refuse(conv *c, const char *what) {
    return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: %s cannot be represented in GGUF by lmc convert (model_type %s)", c->dir, what,
                    c->a->model_type);
}

/* ---- rope ------------------------------------------------------------------------------------- */

static lmc_status add_f32_table(conv *c, const char *name, const float *v, int64_t n) {
    float *buf = own(c, (size_t)n * sizeof *buf);
    if (!buf) return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
    memcpy(buf, v, (size_t)n * sizeof *buf);
    return lmc_gguf_writer_add_tensor(c->w, name, LMC_GGML_F32, 1, &n, buf);
}

static lmc_status factor_table(conv *c, const cJSON *rope, const char *k, const char *tensor) {
    const cJSON *arr = item(rope, k);
    int64_t n = c->rope_dim / 2;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) {
        return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: longrope %s must be an array of %lld numbers", c->dir, k, (long long)n);
    }
    float *v = own(c, (size_t)n * sizeof *v);
    if (!v) return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
    int64_t i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e)) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: longrope %s holds a non-number", c->dir, k);
        v[i] = (float)e->valuedouble;
    }
    return lmc_gguf_writer_add_tensor(c->w, tensor, LMC_GGML_F32, 1, &n, v);
}

static lmc_status write_rope(conv *c) {
    const cJSON *rp = item(c->cfg, "rope_parameters"), *full = NULL, *local = NULL;
    if (rp && item(rp, "full_attention")) {
        full = item(rp, "full_attention");
        local = item(rp, "sliding_attention");
    } else {
        full = rp ? rp : item(c->cfg, "rope_scaling");
    }
    if (full && !cJSON_IsObject(full)) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: rope parameters are not an object", c->dir);
    double theta = 10000.0, prf = 1.0;
    int r;
    if ((r = rope_num(c, full, "rope_theta", &theta)) < 0) return r;
    if ((r = rope_num(c, full, "partial_rotary_factor", &prf)) < 0) return r;
    c->rope_dim = (int64_t)(prf * (double)c->head_dim);
    if (c->rope_dim <= 0 || c->rope_dim > c->head_dim || c->rope_dim % 2) return refuse(c, "partial_rotary_factor");
    LMC_TRY(lmc_gguf_writer_add_f32(c->w, K(c, "rope.freq_base"), (float)theta));
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "rope.dimension_count"), (uint32_t)c->rope_dim));
    if (strcmp(c->a->gguf_arch, "gemma3") == 0) {
        double local_theta = 10000.0;
        const cJSON *lv = item(local, "rope_theta");
        if (lv && cJSON_IsNumber(lv)) local_theta = lv->valuedouble;
        else if ((r = rope_num(c, NULL, "rope_local_base_freq", &local_theta)) < 0) return r;
        const cJSON *lt = item(local, "rope_type");
        if (lt && (!cJSON_IsString(lt) || strcmp(lt->valuestring, "default") != 0)) return refuse(c, "scaled rope on sliding layers");
        LMC_TRY(lmc_gguf_writer_add_f32(c->w, K(c, "rope.freq_base_swa"), (float)local_theta));
    } else if (local) {
        return refuse(c, "per-layer-type rope parameters");
    }
    const cJSON *tv = item(full, "rope_type");
    if (!tv) tv = item(full, "type");
    const char *type = cJSON_IsString(tv) ? tv->valuestring : "default";
    double factor = 1.0, orig = 0;
    if ((r = rope_num(c, full, "factor", &factor)) < 0) return r;
    if ((r = rope_num(c, full, "original_max_position_embeddings", &orig)) < 0) return r;
    if (strcmp(type, "default") == 0) return LMC_OK;
    if (strcmp(type, "linear") == 0 || strcmp(type, "yarn") == 0) {
        static const char *const yarn_unsupported[] = {"attention_factor", "mscale", "mscale_all_dim", "truncate"};
        for (int i = 0; i < 4 && strcmp(type, "yarn") == 0; i++) {
            int b = 1; /* gpt-oss's configs say truncate: false, which the reader restores for gpt-oss files */
            if (i == 3 && c->a->moe == LMC_GGUF_MOE_GPTOSS && lmc_json_get_bool(full, "truncate", &b) > 0 && !b) continue;
            if (item(full, yarn_unsupported[i])) {
                char what[64];
                snprintf(what, sizeof what, "yarn %s", yarn_unsupported[i]);
                return refuse(c, what);
            }
        }
        if (!(factor > 0)) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: rope factor missing", c->dir);
        LMC_TRY(lmc_gguf_writer_add_str(c->w, K(c, "rope.scaling.type"), type));
        LMC_TRY(lmc_gguf_writer_add_f32(c->w, K(c, "rope.scaling.factor"), (float)factor));
        if (strcmp(type, "yarn") == 0) {
            if (orig > 0) LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "rope.scaling.original_context_length"), (uint32_t)orig));
            double v;
            if ((r = rope_num(c, full, "beta_fast", &v)) < 0) return r;
            if (r) LMC_TRY(lmc_gguf_writer_add_f32(c->w, K(c, "rope.scaling.yarn_beta_fast"), (float)v));
            if ((r = rope_num(c, full, "beta_slow", &v)) < 0) return r;
            if (r) LMC_TRY(lmc_gguf_writer_add_f32(c->w, K(c, "rope.scaling.yarn_beta_slow"), (float)v));
        }
        return LMC_OK;
    }
    if (strcmp(type, "llama3") == 0 && strcmp(c->a->gguf_arch, "llama") == 0) {
        /* llama.cpp: rope_freqs.weight holds the per-frequency divisors, computed in double */
        double lff = 1.0, hff = 4.0, old = orig > 0 ? orig : 8192.0;
        if ((r = rope_num(c, full, "low_freq_factor", &lff)) < 0) return r;
        if ((r = rope_num(c, full, "high_freq_factor", &hff)) < 0) return r;
        int64_t n = c->rope_dim / 2;
        float tab[1024];
        if (n > 1024) return refuse(c, "a rope dimension above 2048");
        for (int64_t i = 0; i < n; i++) {
            double freq = 1.0 / pow(theta, (double)(2 * i) / (double)c->rope_dim), wl = 2.0 * M_PI / freq, d;
            if (wl < old / hff) d = 1.0;
            else if (wl > old / lff) d = factor;
            else {
                double s = (old / wl - lff) / (hff - lff);
                d = 1.0 / ((1.0 - s) / factor + s);
            }
            tab[i] = (float)d;
        }
        return add_f32_table(c, "rope_freqs.weight", tab, n);
    }
    if (strcmp(type, "longrope") == 0 && c->a->fused) {
        if (item(full, "attention_factor")) return refuse(c, "longrope attention_factor");
        LMC_TRY(factor_table(c, full, "long_factor", "rope_factors_long.weight"));
        return factor_table(c, full, "short_factor", "rope_factors_short.weight");
    }
    char what[96];
    snprintf(what, sizeof what, "rope type \"%s\"", type);
    return refuse(c, what);
}

/* ---- metadata --------------------------------------------------------------------------------- */

static lmc_status write_windows(conv *c) {
    const char *arch = c->a->gguf_arch;
    const cJSON *sw = item(c->cfg, "sliding_window");
    int64_t window = 0;
    if (sw && (!cJSON_IsNumber(sw) || sw->valuedouble < 0)) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: bad sliding_window", c->dir);
    if (sw) window = (int64_t)sw->valuedouble;
    const cJSON *lt = item(c->cfg, "layer_types");
    if (lt && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)) {
        return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: layer_types must list %lld layers", c->dir, (long long)c->n_layers);
    }
    int any_sliding = 0;
    for (const cJSON *e = lt ? lt->child : NULL; e; e = e->next) {
        if (!cJSON_IsString(e)) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: layer_types holds a non-string", c->dir);
        if (strcmp(e->valuestring, "sliding_attention") == 0) any_sliding = 1;
        else if (strcmp(e->valuestring, "full_attention") != 0) return refuse(c, "a layer type other than full/sliding attention");
    }
    if (strcmp(arch, "qwen2") == 0 || strcmp(arch, "qwen3") == 0 || c->a->moe == LMC_GGUF_MOE_QWEN) {
        int b = 0;
        if (lmc_json_get_bool(c->cfg, "use_sliding_window", &b) > 0 && b) return refuse(c, "use_sliding_window");
        if (any_sliding) return refuse(c, "sliding layers");
        return LMC_OK;
    }
    if (c->a->moe == LMC_GGUF_MOE_GPTOSS) { /* llama.cpp: sliding on even layers, full on odd ones */
        if (window <= 0) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: gpt_oss needs sliding_window", c->dir);
        int i = 0;
        for (const cJSON *e = lt ? lt->child : NULL; e; e = e->next, i++) {
            if ((strcmp(e->valuestring, "sliding_attention") == 0) != (i % 2 == 0)) return refuse(c, "gpt_oss layer_types other than alternating");
        }
        return lmc_gguf_writer_add_u32(c->w, K(c, "attention.sliding_window"), (uint32_t)window);
    }
    if (strcmp(arch, "gemma2") == 0) {
        if (window <= 0) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: gemma2 needs sliding_window", c->dir);
        int i = 0;
        for (const cJSON *e = lt ? lt->child : NULL; e; e = e->next, i++) {
            if ((strcmp(e->valuestring, "sliding_attention") == 0) != (i % 2 == 0)) return refuse(c, "gemma2 layer_types other than alternating");
        }
        return lmc_gguf_writer_add_u32(c->w, K(c, "attention.sliding_window"), (uint32_t)window);
    }
    if (strcmp(arch, "gemma3") == 0) {
        if (window <= 0) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: gemma3 needs sliding_window", c->dir);
        LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "attention.sliding_window"), (uint32_t)window));
        if (lt) {
            uint8_t *pat = own(c, (size_t)c->n_layers);
            if (!pat) return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
            int i = 0;
            for (const cJSON *e = lt->child; e; e = e->next) pat[i++] = strcmp(e->valuestring, "sliding_attention") == 0;
            return lmc_gguf_writer_add_arr(c->w, K(c, "attention.sliding_window_pattern"), LMC_GGUF_BOOL, pat, (uint64_t)c->n_layers);
        }
        int64_t pattern;
        if (lmc_json_get_int(c->cfg, "sliding_window_pattern", &pattern) > 0 ||
            lmc_json_get_int(c->cfg, "_sliding_window_pattern", &pattern) > 0) {
            if (pattern <= 0 || pattern > INT32_MAX) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: bad sliding_window_pattern", c->dir);
            return lmc_gguf_writer_add_u32(c->w, K(c, "attention.sliding_window_pattern"), (uint32_t)pattern);
        }
        return LMC_OK;
    }
    if (any_sliding && strcmp(arch, "llama") == 0) return refuse(c, "per-layer sliding windows");
    if (c->a->fused) return lmc_gguf_writer_add_u32(c->w, K(c, "attention.sliding_window"), (uint32_t)window); /* 0 = none, as llama.cpp */
    if (window > 0) return lmc_gguf_writer_add_u32(c->w, K(c, "attention.sliding_window"), (uint32_t)window);
    return LMC_OK;
}

static lmc_status write_gemma_scalars(conv *c) {
    const char *arch = c->a->gguf_arch;
    double v;
    int r;
    const cJSON *acap = item(c->cfg, "attn_logit_softcapping"), *fcap = item(c->cfg, "final_logit_softcapping");
    if (acap) {
        if (strcmp(arch, "gemma2") != 0) return refuse(c, "attn_logit_softcapping");
        if (!cJSON_IsNumber(acap)) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: attn_logit_softcapping", c->dir);
        LMC_TRY(lmc_gguf_writer_add_f32(c->w, K(c, "attn_logit_softcapping"), (float)acap->valuedouble));
    }
    if (fcap) {
        if (!c->a->sandwich) return refuse(c, "final_logit_softcapping");
        if (!cJSON_IsNumber(fcap)) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: final_logit_softcapping", c->dir);
        LMC_TRY(lmc_gguf_writer_add_f32(c->w, K(c, "final_logit_softcapping"), (float)fcap->valuedouble));
    }
    if (!c->a->sandwich) return LMC_OK;
    double qpas = (double)c->head_dim;
    if ((r = rope_num(c, NULL, "query_pre_attn_scalar", &v)) < 0) return r;
    if (r) qpas = v;
    int big = (strcmp(arch, "gemma2") == 0 && c->n_layers == 46) || (strcmp(arch, "gemma3") == 0 && c->n_layers == 62);
    double rule = big ? (double)(c->hidden / c->n_heads) : (double)c->head_dim;
    if (!(qpas > 0)) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: query_pre_attn_scalar must be positive", c->dir);
    if (qpas != rule) LMC_TRY(lmc_gguf_writer_add_f32(c->w, K(c, "attention.scale"), (float)(1.0 / sqrt(qpas))));
    return LMC_OK;
}

static lmc_status write_tokens(conv *c) {
    int64_t v;
    if (lmc_json_get_int(c->cfg, "bos_token_id", &v) > 0 && v >= 0 && v <= UINT32_MAX)
        LMC_TRY(lmc_gguf_writer_add_u32(c->w, "tokenizer.ggml.bos_token_id", (uint32_t)v));
    if (lmc_json_get_int(c->cfg, "pad_token_id", &v) > 0 && v >= 0 && v <= UINT32_MAX)
        LMC_TRY(lmc_gguf_writer_add_u32(c->w, "tokenizer.ggml.padding_token_id", (uint32_t)v));
    const cJSON *eos = item(c->cfg, "eos_token_id");
    static const char *const keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                       "tokenizer.ggml.eom_token_id"};
    if (cJSON_IsNumber(eos)) {
        if (lmc_json_item_int(eos, &v) && v >= 0 && v <= UINT32_MAX) LMC_TRY(lmc_gguf_writer_add_u32(c->w, keys[0], (uint32_t)v));
    } else if (cJSON_IsArray(eos)) {
        int i = 0;
        for (const cJSON *e = eos->child; e; e = e->next) {
            if (!lmc_json_item_int(e, &v) || v < 0 || v > UINT32_MAX) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: bad eos_token_id", c->dir);
            if (i == 3) return refuse(c, "more than three eos ids");
            LMC_TRY(lmc_gguf_writer_add_u32(c->w, keys[i++], (uint32_t)v));
        }
    }
    return LMC_OK;
}

/* The whole of a text file (NULL if absent); caller frees. */
static char *read_text(const char *dir, const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && (size_t)n <= CONV_MAX_TOKENIZER_BYTES && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = 0;
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

static lmc_status write_tokenizer(conv *c) {
    size_t len;
    char *tok = read_text(c->dir, "tokenizer.json", &len);
    lmc_status st = LMC_OK;
    if (tok) st = lmc_gguf_writer_add_strn(c->w, "tokenizer.huggingface.json", tok, len);
    if (tok && st == LMC_OK) { /* tokenizer.ggml.* too, as llama.cpp writes them (ids: write_tokens) */
        size_t clen = 0;
        char *cfg = read_text(c->dir, "tokenizer_config.json", &clen);
        st = lmc_gguf_tok_write_ggml(c->w, tok, len, cfg, clen, 0);
        free(cfg);
        if (st == LMC_ERR_UNSUPPORTED) { /* e.g. a Unigram tokenizer: only the HF JSON is kept */
            lmc_clear_error();
            st = LMC_OK;
        }
    }
    free(tok);
    LMC_TRY(st);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", c->dir);
    cJSON *tc;
    if (lmc_json_read_file(path, CONV_MAX_TOKENIZER_BYTES, &tc) == LMC_OK) {
        const char *tmpl;
        if (lmc_json_get_string(tc, "chat_template", &tmpl) > 0) st = lmc_gguf_writer_add_str(c->w, "tokenizer.chat_template", tmpl);
        cJSON_Delete(tc);
    } else {
        lmc_clear_error();
    }
    return st;
}

/* ---- tensors ---------------------------------------------------------------------------------- */

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Quantize n_rows rows of ne0 values (storage src_t at *data) to c->quant_type when the rows fit its
 * blocks, or store them as c->float_type; *data and *type then describe the new copy. */
static lmc_status maybe_quantize(conv *c, const char *hf_name, lmc_dtype src_t, int64_t ne0, int64_t n_rows,
                                 const void **data, uint32_t *type) {
    static const lmc_dtype floats[] = {[LMC_CONVERT_F32] = LMC_DTYPE_F32, [LMC_CONVERT_F16] = LMC_DTYPE_F16,
                                       [LMC_CONVERT_BF16] = LMC_DTYPE_BF16};
    /* the float types go through lmc_quantize_row as well (rounded to nearest even) */
    const lmc_dtype qt = c->quant_type ? (lmc_dtype)c->quant_type : floats[c->float_type];
    if (!c->quant_type && (!c->float_type || qt == src_t)) return LMC_OK; /* kept as stored */
    if (lmc_dtype_row_bytes(qt, ne0) == 0) return LMC_OK;                /* rows that do not fit its blocks */
    const size_t in_row = lmc_dtype_row_bytes(src_t, ne0), out_row = lmc_dtype_row_bytes(qt, ne0);
    uint8_t *q = own(c, out_row * (size_t)n_rows);
    float *f = malloc((size_t)ne0 * sizeof *f);
    void *tmp = malloc(in_row);
    if (!q || !f || !tmp) { free(f); free(tmp); return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir); }
    lmc_status qs = LMC_OK;
    for (int64_t r = 0; qs >= 0 && r < n_rows; r++) {
        memcpy(tmp, (const uint8_t *)*data + (size_t)r * in_row, in_row); /* mapping data need not be aligned */
        lmc_to_f32(src_t, tmp, f, (size_t)ne0);
        qs = lmc_quantize_row(qt, f, q + (size_t)r * out_row, NULL, ne0);
    }
    free(f);
    free(tmp);
    if (qs < 0) return lmc_fail_context(qs, "%s: quantizing %s", c->dir, hf_name);
    LMC_TRY(lmc_ggml_type_from_dtype(qt, type));
    *data = q;
    return LMC_OK;
}

/* The n_expert per-expert matrices [out, in] of (layer, kind) stacked in one tensor of ne
 * [in, out, n_expert] named blk.N.ffn_{gate,up,down}_exps.weight (llama.cpp's torch.stack(dim=0)). */
static lmc_status add_experts(conv *c, long layer, int kind) {
    const lmc_st_tensor *t0 = NULL;
    char hf[256], name[128];
    const lmc_st_tensor **ts = malloc((size_t)c->n_expert * sizeof *ts);
    if (!ts) return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
    lmc_status st = LMC_OK;
    for (int64_t e = 0; e < c->n_expert && st >= 0; e++) {
        st = lmc_gguf_arch_expert_hf_name(c->a, layer, (long)e, kind, hf, sizeof hf);
        if (st < 0) break;
        const lmc_st_tensor *t = ts[e] = lmc_st_find(c->set, hf);
        if (!t) st = lmc_fail(LMC_ERR_FORMAT, "%s: expert tensor %s is missing (config.json names %lld experts)", c->dir, hf,
                              (long long)c->n_expert);
        else if (t->n_dims != 2 || (t->dtype != LMC_DTYPE_F32 && t->dtype != LMC_DTYPE_F16 && t->dtype != LMC_DTYPE_BF16))
            st = lmc_fail(LMC_ERR_UNSUPPORTED, "%s: expert tensor %s must be a 2-D F32, F16 or BF16 matrix (it is %s, %d dims)",
                          c->dir, hf, lmc_dtype_name(t->dtype), t->n_dims);
        else if (t0 && (t->dtype != t0->dtype || t->shape[0] != t0->shape[0] || t->shape[1] != t0->shape[1]))
            st = lmc_fail(LMC_ERR_FORMAT, "%s: expert tensor %s differs in dtype or shape from %s", c->dir, hf, t0->name);
        if (!t0) t0 = t;
    }
    uint8_t *buf = NULL;
    if (st >= 0 && !(buf = own(c, t0->nbytes * (size_t)c->n_expert))) st = lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
    for (int64_t e = 0; st >= 0 && e < c->n_expert; e++) memcpy(buf + (size_t)e * t0->nbytes, ts[e]->data, t0->nbytes);
    free(ts);
    LMC_TRY(st);
    uint32_t type;
    LMC_TRY(lmc_ggml_type_from_dtype(t0->dtype, &type));
    int64_t ne[3] = {t0->shape[1], t0->shape[0], c->n_expert};
    const void *data = buf;
    LMC_TRY(maybe_quantize(c, t0->name, t0->dtype, ne[0], ne[1] * ne[2], &data, &type));
    LMC_TRY(lmc_gguf_arch_expert_gguf_name(layer, kind, name, sizeof name));
    return lmc_gguf_writer_add_tensor(c->w, name, type, 3, ne, data);
}

/* gpt-oss's input-major experts: HF [E, in, out·step] (float) whose output column o·step + off is row o
 * of the GGUF matrix, written as ne [in, out, E] (step 2: gate_up_proj, off 0 gate, 1 up; step 1:
 * down_proj); a bias [E, out·step] is the case in = 1. */
static lmc_status add_gptoss_part(conv *c, const lmc_st_tensor *t, long layer, int kind, int step, int off, int bias) {
    const int64_t E = t->shape[0], in = bias ? 1 : t->shape[1], cols = t->shape[bias ? 1 : 2], out = cols / step;
    const size_t es = lmc_dtype_size(t->dtype);
    uint8_t *buf = own(c, (size_t)(E * in * out) * es);
    if (!buf) return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
    const uint8_t *src = t->data;
    for (int64_t e = 0; e < E; e++)
        for (int64_t o = 0; o < out; o++)
            for (int64_t i = 0; i < in; i++)
                memcpy(buf + ((size_t)(e * out + o) * (size_t)in + (size_t)i) * es,
                       src + ((size_t)(e * in + i) * (size_t)cols + (size_t)(o * step + off)) * es, es);
    char name[128];
    LMC_TRY(lmc_gguf_arch_expert_gguf_name(layer, kind, name, sizeof name));
    uint32_t type;
    LMC_TRY(lmc_ggml_type_from_dtype(t->dtype, &type));
    const void *data = buf;
    if (bias) { /* in F32, as llama.cpp's ggml_add_id reads them */
        memcpy(name + strlen(name) - 6, "bias", 5); /* "….weight" → "….bias" */
        int64_t ne[2] = {out, E};
        float *f = own(c, (size_t)(out * E) * sizeof *f);
        if (!f) return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
        lmc_to_f32(t->dtype, buf, f, (size_t)(out * E));
        return lmc_gguf_writer_add_tensor(c->w, name, LMC_GGML_F32, 2, ne, f);
    }
    int64_t ne[3] = {in, out, E};
    LMC_TRY(maybe_quantize(c, t->name, t->dtype, in, out * E, &data, &type));
    return lmc_gguf_writer_add_tensor(c->w, name, type, 3, ne, data);
}

/* gpt-oss's Hugging Face MXFP4 experts (`<name>_blocks` U8 [E, rows·step, in/32, 16], `<name>_scales` U8
 * [E, rows·step, in/32]; rows are outputs, element 2j of a block in the low nibble of byte j, 2j + 1 in the
 * high one) repacked without requantizing into ggml's MXFP4 blocks (type 39: the exponent byte, then
 * element j in the low nibble of byte j, 16 + j in the high one; the same E2M1 codes and E8M0 exponent),
 * rows o·step + off, written as ne [in, rows, E]. */
static lmc_status add_gptoss_mxfp4(conv *c, const lmc_st_tensor *b, const lmc_st_tensor *sc, long layer, int kind, int step,
                                   int off) {
    const int64_t E = b->shape[0], rows = b->shape[1] / step, G = b->shape[2];
    uint8_t *buf = own(c, (size_t)(E * rows * G) * 17);
    if (!buf) return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
    const uint8_t *q = b->data, *e8 = sc->data;
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t g = 0; g < G; g++) {
                const size_t src = (size_t)((e * rows * step + r * step + off) * G + g);
                uint8_t *o = buf + (size_t)((e * rows + r) * G + g) * 17;
                const uint8_t *s16 = q + src * 16;
                o[0] = e8[src];
                for (int j = 0; j < 16; j++) {
                    const int lo = (s16[j / 2] >> (4 * (j % 2))) & 0x0F, hi = (s16[(16 + j) / 2] >> (4 * (j % 2))) & 0x0F;
                    o[1 + j] = (uint8_t)(lo | hi << 4);
                }
            }
    char name[128];
    LMC_TRY(lmc_gguf_arch_expert_gguf_name(layer, kind, name, sizeof name));
    int64_t ne[3] = {G * 32, rows, E};
    return lmc_gguf_writer_add_tensor(c->w, name, LMC_GGML_MXFP4, 3, ne, buf);
}

/* 1: t was one of gpt-oss's expert tensors (written or refused: see the status), 0: not one. */
static int gptoss_experts(conv *c, const lmc_st_tensor *t, lmc_status *st) {
    long layer;
    int at = 0;
    if (sscanf(t->name, "model.layers.%ld.mlp.experts.%n", &layer, &at) != 1 || at == 0) return 0;
    const char *rest = t->name + at;
    const int gu = strncmp(rest, "gate_up_proj", 12) == 0, dn = strncmp(rest, "down_proj", 9) == 0;
    const char *tail = rest + (gu ? 12 : dn ? 9 : 0);
    if (gu || dn) {
        if (strcmp(tail, "_scales") == 0) { /* written with its _blocks */
            *st = LMC_OK;
            return 1;
        }
        if (strcmp(tail, "_blocks") == 0) {
            char sn[300];
            snprintf(sn, sizeof sn, "%.*s_scales", (int)(tail - t->name), t->name);
            const lmc_st_tensor *sc = lmc_st_find(c->set, sn);
            const int64_t I = c->ff, D = c->hidden, out = gu ? 2 * I : D, in = gu ? D : I;
            if (!sc || layer < 0 || layer >= c->n_layers || t->dtype != LMC_DTYPE_U8 || sc->dtype != LMC_DTYPE_U8 ||
                t->n_dims != 4 || sc->n_dims != 3 || t->shape[0] != c->n_expert || t->shape[1] != out || t->shape[2] * 32 != in ||
                t->shape[3] != 16 || sc->shape[0] != t->shape[0] || sc->shape[1] != out || sc->shape[2] != t->shape[2]) {
                *st = lmc_fail(LMC_ERR_FORMAT, "%s: MXFP4 %s must be U8 [%lld, %lld, %lld, 16] with %s U8 [%lld, %lld, %lld]",
                               c->dir, t->name, (long long)c->n_expert, (long long)out, (long long)(in / 32), sn,
                               (long long)c->n_expert, (long long)out, (long long)(in / 32));
                return 1;
            }
            if (gu) {
                *st = add_gptoss_mxfp4(c, t, sc, layer, LMC_GGUF_EXPERT_GATE, 2, 0);
                if (*st >= 0) *st = add_gptoss_mxfp4(c, t, sc, layer, LMC_GGUF_EXPERT_UP, 2, 1);
            } else {
                *st = add_gptoss_mxfp4(c, t, sc, layer, LMC_GGUF_EXPERT_DOWN, 1, 0);
            }
            return 1;
        }
    }
    if ((!gu && !dn) || (*tail && strcmp(tail, "_bias") != 0)) {
        *st = lmc_fail(LMC_ERR_UNSUPPORTED, "%s: gpt_oss expert tensor %s is not converted (expected gate_up_proj, "
                       "down_proj, their _bias, or MXFP4 _blocks / _scales)", c->dir, t->name);
        return 1;
    }
    const int bias = *tail != 0, want_dims = bias ? 2 : 3;
    const int64_t I = c->ff, D = c->hidden, out = gu ? 2 * I : D, in = gu ? D : I;
    if (layer < 0 || layer >= c->n_layers || t->n_dims != want_dims || t->shape[0] != c->n_expert ||
        (bias ? t->shape[1] != out : t->shape[1] != in || t->shape[2] != out) ||
        (t->dtype != LMC_DTYPE_F32 && t->dtype != LMC_DTYPE_F16 && t->dtype != LMC_DTYPE_BF16)) {
        *st = lmc_fail(LMC_ERR_FORMAT, "%s: %s must be a float [%lld, %s%lld] (experts, %sout) of layer < %lld", c->dir, t->name,
                       (long long)c->n_expert, bias ? "" : (gu ? "hidden, " : "intermediate, "), (long long)out,
                       bias ? "" : "in, ", (long long)c->n_layers);
        return 1;
    }
    if (gu) {
        *st = add_gptoss_part(c, t, layer, LMC_GGUF_EXPERT_GATE, 2, 0, bias);
        if (*st >= 0) *st = add_gptoss_part(c, t, layer, LMC_GGUF_EXPERT_UP, 2, 1, bias);
    } else {
        *st = add_gptoss_part(c, t, layer, LMC_GGUF_EXPERT_DOWN, 1, 0, bias);
    }
    return 1;
}

static lmc_status add_tensor(conv *c, const lmc_st_tensor *t) {
    if (ends_with(t->name, "rotary_emb.inv_freq")) return LMC_OK;
    lmc_status gst;
    if (c->a->moe == LMC_GGUF_MOE_GPTOSS && gptoss_experts(c, t, &gst)) return gst;
    if (c->tied && strcmp(t->name, "lm_head.weight") == 0) return LMC_OK;
    long layer, expert;
    int kind;
    if (c->n_expert > 0 && lmc_gguf_arch_parse_expert(c->a, t->name, &layer, &expert, &kind)) {
        if (layer >= c->n_layers || expert >= c->n_expert)
            return lmc_fail(LMC_ERR_FORMAT, "%s: %s is outside the %lld layers x %lld experts of config.json", c->dir, t->name,
                            (long long)c->n_layers, (long long)c->n_expert);
        if (c->experts_done[layer * 3 + kind]) return LMC_OK;
        c->experts_done[layer * 3 + kind] = 1;
        return add_experts(c, layer, kind);
    }
    char name[256];
    lmc_status st = lmc_gguf_arch_gguf_name(c->a, t->name, name, sizeof name);
    if (st < 0) return lmc_fail_context(LMC_ERR_UNSUPPORTED, "%s", c->dir);
    uint32_t type;
    if (t->dtype != LMC_DTYPE_F32 && t->dtype != LMC_DTYPE_F16 && t->dtype != LMC_DTYPE_BF16) {
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (F32, F16 and BF16 are converted)", c->dir, t->name,
                        lmc_dtype_name(t->dtype));
    }
    LMC_TRY(lmc_ggml_type_from_dtype(t->dtype, &type));
    if (t->n_dims < 1 || t->n_dims > LMC_GGUF_MAX_DIMS) return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: tensor %s has rank %d", c->dir, t->name, t->n_dims);
    int64_t ne[LMC_GGUF_MAX_DIMS];
    for (int d = 0; d < t->n_dims; d++) ne[d] = t->shape[t->n_dims - 1 - d];
    const void *data = t->data;
    int is_q = ends_with(t->name, "self_attn.q_proj.weight") || ends_with(t->name, "self_attn.q_proj.bias");
    int is_k = ends_with(t->name, "self_attn.k_proj.weight") || ends_with(t->name, "self_attn.k_proj.bias");
    if (c->a->qk_permuted && (is_q || is_k)) {
        /* llama.cpp's LlamaModel.permute: within each head, row i·D/2 + j moves to 2j + i */
        int64_t n_head = is_q ? c->n_heads : c->n_kv, rows = t->shape[0];
        if (t->n_dims > 2 || rows % n_head || (rows / n_head) % 2) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: %s has %lld rows, not %lld heads of an even size", c->dir, t->name,
                            (long long)rows, (long long)n_head);
        }
        int64_t hd = rows / n_head;
        size_t row_bytes = t->nbytes / (size_t)rows;
        uint8_t *buf = own(c, t->nbytes);
        if (!buf) return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
        for (int64_t r = 0; r < rows; r++) {
            memcpy(buf + (size_t)lmc_gguf_gguf_row(r, hd) * row_bytes, (const uint8_t *)t->data + (size_t)r * row_bytes, row_bytes);
        }
        data = buf;
    } else if ((c->a->norm_plus_one && ends_with(t->name, "norm.weight")) || (c->a->moe == LMC_GGUF_MOE_GPTOSS && t->n_dims == 1)) {
        /* gemma: llama.cpp stores w + 1 so that a plain RMSNorm computes HF's x̂·(1 + w); kept as F32.
         * gpt-oss: norms, biases and sinks in F32, as llama.cpp's converter writes every 1-D tensor */
        size_t n = (size_t)lmc_st_nelem(t);
        float *buf = own(c, n * sizeof *buf);
        void *tmp = malloc(t->nbytes ? t->nbytes : 1);
        if (!buf || !tmp) {
            free(tmp);
            return lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
        }
        memcpy(tmp, t->data, t->nbytes); /* safetensors data need not be aligned */
        lmc_to_f32(t->dtype, tmp, buf, n);
        free(tmp);
        if (c->a->norm_plus_one)
            for (size_t i = 0; i < n; i++) buf[i] += 1.0f;
        data = buf;
        type = LMC_GGML_F32;
    }
    /* the router and the shared expert's gate stay in their float type, as llama.cpp keeps them */
    if (t->n_dims == 2 && ends_with(t->name, ".weight") && !strstr(name, "ffn_gate_inp")) {
        const lmc_dtype src_t = type == LMC_GGML_F32 ? LMC_DTYPE_F32 : t->dtype;
        LMC_TRY(maybe_quantize(c, t->name, src_t, ne[0], ne[1], &data, &type));
    }
    return lmc_gguf_writer_add_tensor(c->w, name, type, t->n_dims, ne, data);
}

/* ---- driver ----------------------------------------------------------------------------------- */

static const struct { const char *model_type, *gguf_arch; } type_map[] = {
    {"llama", "llama"}, {"mistral", "llama"}, {"qwen2", "qwen2"}, {"qwen3", "qwen3"},
    {"gemma", "gemma"}, {"gemma2", "gemma2"}, {"gemma3_text", "gemma3"}, {"phi3", "phi3"},
    {"qwen2_moe", "qwen2moe"}, {"qwen3_moe", "qwen3moe"}, {"mixtral", "llama"}, {"gpt_oss", "gpt-oss"},
};

/* The expert keys of a MoE checkpoint (llama.cpp's names), and the bookkeeping of stacked tensors. */
static lmc_status write_moe(conv *c, const char *mt) {
    const int mixtral = strcmp(mt, "mixtral") == 0, gptoss = c->a->moe == LMC_GGUF_MOE_GPTOSS;
    if (c->a->moe != LMC_GGUF_MOE_QWEN && !mixtral && !gptoss) return LMC_OK;
    int64_t used, eff = 0, sff = 0;
    if (item(c->cfg, "num_experts")) LMC_TRY(req_int(c, "num_experts", &c->n_expert));
    else LMC_TRY(req_int(c, "num_local_experts", &c->n_expert));
    LMC_TRY(req_int(c, "num_experts_per_tok", &used));
    if (used > c->n_expert) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: num_experts_per_tok %lld > %lld experts", c->dir,
                                            (long long)used, (long long)c->n_expert);
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "expert_count"), (uint32_t)c->n_expert));
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "expert_used_count"), (uint32_t)used));
    if (gptoss) {
        /* llama.cpp runs the clamped GLU with HF's defaults and stores neither value */
        double v;
        if (lmc_json_get_double(c->cfg, "swiglu_limit", &v) > 0 && v != 7.0) return refuse(c, "a swiglu_limit other than 7");
        if (lmc_json_get_double(c->cfg, "swiglu_alpha", &v) > 0 && fabs(v - 1.702) > 1e-9) return refuse(c, "a swiglu_alpha other than 1.702");
        LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "expert_feed_forward_length"), (uint32_t)c->ff));
    } else if (!mixtral) {
        LMC_TRY(req_int(c, "moe_intermediate_size", &eff));
        LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "expert_feed_forward_length"), (uint32_t)eff));
        if (item(c->cfg, "shared_expert_intermediate_size")) {
            LMC_TRY(req_int(c, "shared_expert_intermediate_size", &sff));
            LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "expert_shared_feed_forward_length"), (uint32_t)sff));
        }
        int norm = 0;
        lmc_json_get_bool(c->cfg, "norm_topk_prob", &norm);
        LMC_TRY(lmc_gguf_writer_add_bool(c->w, K(c, "expert_weights_norm"), norm));
    }
    c->experts_done = calloc((size_t)c->n_layers * 3, 1);
    return c->experts_done ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory converting %s", c->dir);
}

static lmc_status convert(conv *c, const char *out_path, const lmc_gguf_convert_params *p, lmc_st_set **st_out) {
    if (item(c->cfg, "text_config")) return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: multimodal configs (text_config) are not converted", c->dir);
    const char *mt;
    if (lmc_json_get_string(c->cfg, "model_type", &mt) <= 0) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json has no model_type", c->dir);
    for (size_t i = 0; i < sizeof type_map / sizeof type_map[0] && !c->a; i++) {
        if (strcmp(mt, type_map[i].model_type) == 0) c->a = lmc_gguf_arch_find(type_map[i].gguf_arch);
    }
    if (!c->a) {
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not converted to GGUF (llama, mistral, qwen2, qwen3, "
                        "gemma, gemma2, gemma3_text, phi3, qwen2_moe, qwen3_moe, mixtral, gpt_oss are)", c->dir, mt);
    }
    LMC_TRY(req_int(c, "hidden_size", &c->hidden));
    LMC_TRY(req_int(c, "num_hidden_layers", &c->n_layers));
    LMC_TRY(req_int(c, "num_attention_heads", &c->n_heads));
    LMC_TRY(req_int(c, "intermediate_size", &c->ff));
    c->n_kv = c->n_heads;
    if (item(c->cfg, "num_key_value_heads")) LMC_TRY(req_int(c, "num_key_value_heads", &c->n_kv));
    if (item(c->cfg, "head_dim")) LMC_TRY(req_int(c, "head_dim", &c->head_dim));
    else if (c->hidden % c->n_heads) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: hidden_size is not a multiple of the heads", c->dir);
    else c->head_dim = c->hidden / c->n_heads;
    double eps;
    if (lmc_json_get_double(c->cfg, "rms_norm_eps", &eps) <= 0) return lmc_fail(LMC_ERR_FORMAT, "%s/config.json: rms_norm_eps missing", c->dir);
    int tie = strncmp(c->a->gguf_arch, "gemma", 5) == 0; /* HF defaults: gemma ties, the others do not */
    lmc_json_get_bool(c->cfg, "tie_word_embeddings", &tie);
    c->tied = tie;
    static const char *const flags[] = {"use_bidirectional_attention", "use_qk_norm"};
    for (int i = 0; i < 2; i++) {
        int b = 0;
        if (lmc_json_get_bool(c->cfg, flags[i], &b) > 0 && b) return refuse(c, flags[i]);
    }

    LMC_TRY(lmc_gguf_writer_init(&c->w));
    if (p && p->alignment) LMC_TRY(lmc_gguf_writer_set_alignment(c->w, p->alignment));
    const char *base = strrchr(c->dir, '/');
    base = base && base[1] ? base + 1 : c->dir;
    LMC_TRY(lmc_gguf_writer_add_str(c->w, "general.architecture", c->a->gguf_arch));
    LMC_TRY(lmc_gguf_writer_add_str(c->w, "general.name", base));
    int64_t ctx;
    if (lmc_json_get_int(c->cfg, "max_position_embeddings", &ctx) > 0 && ctx > 0 && ctx <= UINT32_MAX)
        LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "context_length"), (uint32_t)ctx));
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "embedding_length"), (uint32_t)c->hidden));
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "block_count"), (uint32_t)c->n_layers));
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "feed_forward_length"), (uint32_t)c->ff));
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "attention.head_count"), (uint32_t)c->n_heads));
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "attention.head_count_kv"), (uint32_t)c->n_kv));
    LMC_TRY(lmc_gguf_writer_add_f32(c->w, K(c, "attention.layer_norm_rms_epsilon"), (float)eps));
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "attention.key_length"), (uint32_t)c->head_dim));
    LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "attention.value_length"), (uint32_t)c->head_dim));
    if (c->a->fused) {
        int64_t orig;
        const cJSON *rp = item(c->cfg, "rope_parameters");
        if (lmc_json_get_int(rp, "original_max_position_embeddings", &orig) > 0 ||
            lmc_json_get_int(c->cfg, "original_max_position_embeddings", &orig) > 0) {
            LMC_TRY(lmc_gguf_writer_add_u32(c->w, K(c, "rope.scaling.original_context_length"), (uint32_t)orig));
        }
    }
    LMC_TRY(write_moe(c, mt));
    LMC_TRY(write_windows(c));
    LMC_TRY(write_gemma_scalars(c));
    LMC_TRY(write_tokens(c));
    if (!p || !p->skip_tokenizer) LMC_TRY(write_tokenizer(c));
    LMC_TRY(write_rope(c));

    LMC_TRY(lmc_st_open(c->dir, st_out));
    lmc_st_set *set = *st_out;
    c->set = set;
    if (!c->tied && !lmc_st_find(set, "lm_head.weight")) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tie_word_embeddings is false but there is no lm_head.weight", c->dir);
    }
    for (int i = 0; i < lmc_st_count(set); i++) {
        LMC_TRY(add_tensor(c, lmc_st_at(set, i)));
        if (p && p->progress) p->progress(i + 1, lmc_st_count(set), p->progress_ud);
    }
    if (p && p->split_max_tensors > 0) {
        const size_t n = strlen(out_path);
        char prefix[4096];
        if (n <= 5 || strcmp(out_path + n - 5, ".gguf") != 0 || n - 5 >= sizeof prefix)
            return lmc_fail(LMC_ERR_ARG, "%s: a split output is named PREFIX.gguf (files PREFIX-00001-of-0000N.gguf ...)",
                            out_path);
        memcpy(prefix, out_path, n - 5);
        prefix[n - 5] = 0;
        return lmc_gguf_writer_write_split(c->w, prefix, p->split_max_tensors, p->n_split_files);
    }
    return lmc_gguf_writer_write(c->w, out_path);
}

lmc_status lmc_gguf_convert_hf(const char *dir, const char *out_path, const lmc_gguf_convert_params *params) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *cfg;
    LMC_TRY(lmc_json_read_file(path, (size_t)64 << 20, &cfg));
    conv c = {.dir = dir, .cfg = cfg, .quant_type = params ? params->quant_type : 0,
              .float_type = params ? params->float_type : LMC_CONVERT_KEEP};
    if ((unsigned)c.float_type > LMC_CONVERT_BF16) {
        cJSON_Delete(cfg);
        return lmc_fail(LMC_ERR_ARG, "convert: float type %d is not f32, f16 or bf16", (int)c.float_type);
    }
    if (c.quant_type && !lmc_dtype_is_quant((lmc_dtype)c.quant_type)) {
        cJSON_Delete(cfg);
        return lmc_fail(LMC_ERR_ARG, "convert: %s is not a quantized type", lmc_dtype_name((lmc_dtype)c.quant_type));
    }
    lmc_st_set *set = NULL;
    lmc_status st = convert(&c, out_path, params, &set);
    lmc_gguf_writer_free(c.w);
    lmc_st_close(set);
    for (int i = 0; i < c.n_bufs; i++) free(c.bufs[i]);
    free(c.bufs);
    free(c.experts_done);
    cJSON_Delete(cfg);
    return st;
}
