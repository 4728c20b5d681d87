/* gguf_arch.c — GGUF metadata → HF config.json, llama.cpp ↔ HF tensor names,
 * and the inverse of llama.cpp's q/k row permutation.
 *
 * Owns nothing beyond the static architecture and name tables; the cJSON
 * trees and strings it returns belong to the caller. The facts encoded here
 * come from llama.cpp's converter (convert_hf_to_gguf.py / the conversion/ modules)
 * and gguf-py's constants and tensor mapping; see gguf_arch.h for the three
 * differences from the HF checkpoint that the loader must handle.
 */
#include "io/gguf_arch.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- architecture table ----------------------------------------------------------------------- */

static const lmc_gguf_arch_info archs[] = {
    {"llama", "llama", "LlamaForCausalLM", 1, 0, 0, 0, LMC_GGUF_MOE_MIXTRAL},
    {"qwen2", "qwen2", "Qwen2ForCausalLM", 0, 0, 0, 0, 0},
    {"qwen3", "qwen3", "Qwen3ForCausalLM", 0, 0, 0, 0, 0},
    {"qwen2moe", "qwen2_moe", "Qwen2MoeForCausalLM", 0, 0, 0, 0, LMC_GGUF_MOE_QWEN},
    {"qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM", 0, 0, 0, 0, LMC_GGUF_MOE_QWEN},
    {"gemma", "gemma", "GemmaForCausalLM", 0, 1, 0, 0, 0},
    {"gemma2", "gemma2", "Gemma2ForCausalLM", 0, 1, 1, 0, 0},
    {"gemma3", "gemma3_text", "Gemma3ForCausalLM", 0, 1, 1, 0, 0},
    {"phi3", "phi3", "Phi3ForCausalLM", 0, 0, 0, 1, 0},
    {"gpt-oss", "gpt_oss", "GptOssForCausalLM", 0, 0, 0, 0, LMC_GGUF_MOE_GPTOSS},
};
#define N_ARCHS (int)(sizeof archs / sizeof archs[0])

const lmc_gguf_arch_info *lmc_gguf_arch_find(const char *gguf_arch) {
    for (int i = 0; i < N_ARCHS; i++) {
        if (strcmp(archs[i].gguf_arch, gguf_arch) == 0) return &archs[i];
    }
    return NULL;
}

lmc_status lmc_gguf_arch_of(const lmc_gguf *g, const lmc_gguf_arch_info **out) {
    const char *arch;
    lmc_status st = lmc_gguf_get_str(g, "general.architecture", &arch, NULL);
    if (st < 0) return lmc_fail_context(LMC_ERR_FORMAT, "GGUF model without a usable general.architecture");
    const lmc_gguf_arch_info *a = lmc_gguf_arch_find(arch);
    if (!a) {
        char list[256];
        size_t at = 0;
        for (int i = 0; i < N_ARCHS && at < sizeof list; i++) {
            int n = snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", archs[i].gguf_arch);
            if (n < 0) break;
            at += (size_t)n;
        }
        return lmc_fail(LMC_ERR_UNSUPPORTED, "GGUF architecture \"%s\" is not supported (supported: %s)", arch, list);
    }
    *out = a;
    return LMC_OK;
}

/* ---- tensor names ----------------------------------------------------------------------------- */

typedef struct name_rule { const char *gguf, *hf; } name_rule;

static const name_rule global_rules[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};

/* per layer: blk.N.<gguf> ↔ model.layers.N.<hf>; `sandwich` and `fused` archs override below */
static const name_rule layer_rules[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_qkv", "self_attn.qkv_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_down", "mlp.down_proj"},
};
static const name_rule plain_rules[] = { /* llama, qwen2, qwen3, gemma */
    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_up", "mlp.up_proj"},
};
static const name_rule sandwich_rules[] = { /* gemma2, gemma3 */
    {"ffn_norm", "pre_feedforward_layernorm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
    {"ffn_up", "mlp.up_proj"},
};
static const name_rule gptoss_rules[] = { /* gpt-oss: the norm before the experts */
    {"post_attention_norm", "post_attention_layernorm"},
};
static const name_rule fused_rules[] = { /* phi3: ffn_up holds gate and up stacked */
    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_up", "mlp.gate_up_proj"},
};

static const name_rule moe_qwen_rules[] = { /* qwen2moe, qwen3moe (stacked experts: see the view) */
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
};
static const name_rule moe_mixtral_rules[] = { /* llama files with experts */
    {"ffn_gate_inp", "block_sparse_moe.gate"},
};
static const name_rule moe_gptoss_rules[] = { /* gpt-oss: router with bias, stacked expert biases (.bias only) */
    {"ffn_gate_inp", "mlp.router"},
    {"ffn_gate_exps", "mlp.experts.gate_proj"},
    {"ffn_up_exps", "mlp.experts.up_proj"},
    {"ffn_down_exps", "mlp.experts.down_proj"},
};

#define N_OF(a) (sizeof(a) / sizeof(a)[0])

static const name_rule *moe_rules(const lmc_gguf_arch_info *a, size_t *n) {
    if (a->moe == LMC_GGUF_MOE_QWEN) { *n = N_OF(moe_qwen_rules); return moe_qwen_rules; }
    if (a->moe == LMC_GGUF_MOE_MIXTRAL) { *n = N_OF(moe_mixtral_rules); return moe_mixtral_rules; }
    if (a->moe == LMC_GGUF_MOE_GPTOSS) { *n = N_OF(moe_gptoss_rules); return moe_gptoss_rules; }
    *n = 0;
    return NULL;
}

static const char *const expert_gguf[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
static const char *const expert_qwen[3] = {"gate_proj", "up_proj", "down_proj"};
static const char *const expert_mixtral[3] = {"w1", "w3", "w2"};

int lmc_gguf_arch_expert_kind(const char *gguf_name, long *layer) {
    const char *p = gguf_name;
    if (strncmp(p, "blk.", 4) != 0) return -1;
    p += 4;
    char *end;
    long l = strtol(p, &end, 10);
    if (end == p || *end != '.' || l < 0) return -1;
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(expert_gguf[k]);
        if (strncmp(end + 1, expert_gguf[k], n) == 0 && strcmp(end + 1 + n, ".weight") == 0) {
            *layer = l;
            return k;
        }
    }
    return -1;
}

lmc_status lmc_gguf_arch_expert_gguf_name(long layer, int kind, char *out, size_t cap) {
    if (kind < 0 || kind > 2) return lmc_fail(LMC_ERR_ARG, "expert tensor kind %d", kind);
    int n = snprintf(out, cap, "blk.%ld.%s.weight", layer, expert_gguf[kind]);
    return n < 0 || (size_t)n >= cap ? lmc_fail(LMC_ERR_RANGE, "expert tensor name does not fit in %zu bytes", cap) : LMC_OK;
}

lmc_status lmc_gguf_arch_expert_hf_name(const lmc_gguf_arch_info *a, long layer, long expert, int kind, char *out,
                                        size_t cap) {
    if (kind < 0 || kind > 2) return lmc_fail(LMC_ERR_ARG, "expert tensor kind %d", kind);
    int n;
    if (a->moe == LMC_GGUF_MOE_QWEN || a->moe == LMC_GGUF_MOE_GPTOSS)
        n = snprintf(out, cap, "model.layers.%ld.mlp.experts.%ld.%s.weight", layer, expert, expert_qwen[kind]);
    else if (a->moe == LMC_GGUF_MOE_MIXTRAL)
        n = snprintf(out, cap, "model.layers.%ld.block_sparse_moe.experts.%ld.%s.weight", layer, expert, expert_mixtral[kind]);
    else return lmc_fail(LMC_ERR_UNSUPPORTED, "GGUF architecture %s has no expert tensors", a->gguf_arch);
    return n < 0 || (size_t)n >= cap ? lmc_fail(LMC_ERR_RANGE, "expert tensor name does not fit in %zu bytes", cap) : LMC_OK;
}

int lmc_gguf_arch_parse_expert(const lmc_gguf_arch_info *a, const char *hf_name, long *layer, long *expert, int *kind) {
    const char *mid = a->moe == LMC_GGUF_MOE_QWEN || a->moe == LMC_GGUF_MOE_GPTOSS ? ".mlp.experts."
                      : a->moe == LMC_GGUF_MOE_MIXTRAL ? ".block_sparse_moe.experts." : NULL;
    const char *const *kinds = a->moe == LMC_GGUF_MOE_MIXTRAL ? expert_mixtral : expert_qwen;
    if (!mid || strncmp(hf_name, "model.layers.", 13) != 0) return 0;
    const char *p = hf_name + 13;
    char *end;
    long l = strtol(p, &end, 10);
    if (end == p || l < 0 || strncmp(end, mid, strlen(mid)) != 0) return 0;
    p = end + strlen(mid);
    long e = strtol(p, &end, 10);
    if (end == p || e < 0 || *end != '.') return 0;
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(kinds[k]);
        if (strncmp(end + 1, kinds[k], n) == 0 && strcmp(end + 1 + n, ".weight") == 0) {
            *layer = l;
            *expert = e;
            *kind = k;
            return 1;
        }
    }
    return 0;
}

static const name_rule *arch_rules(const lmc_gguf_arch_info *a, size_t *n) {
    if (a->sandwich) { *n = N_OF(sandwich_rules); return sandwich_rules; }
    if (a->fused) { *n = N_OF(fused_rules); return fused_rules; }
    if (a->moe == LMC_GGUF_MOE_GPTOSS) { *n = N_OF(gptoss_rules); return gptoss_rules; }
    *n = N_OF(plain_rules);
    return plain_rules;
}

int lmc_gguf_arch_is_config_tensor(const char *gguf_name) {
    return strcmp(gguf_name, "rope_freqs.weight") == 0 || strcmp(gguf_name, "rope_factors_long.weight") == 0 ||
           strcmp(gguf_name, "rope_factors_short.weight") == 0;
}

/* Split "<stem>.weight" / "<stem>.bias" into stem length and suffix; 0 if neither. */
static int split_suffix(const char *name, size_t *stem_len, const char **suffix) {
    size_t n = strlen(name);
    static const char *const sufs[] = {".weight", ".bias"};
    for (int i = 0; i < 2; i++) {
        size_t m = strlen(sufs[i]);
        if (n > m && strcmp(name + n - m, sufs[i]) == 0) {
            *stem_len = n - m;
            *suffix = sufs[i];
            return 1;
        }
    }
    return 0;
}

/* Parse "<prefix><digits>." at the start of s: the layer number and the rest after the dot. */
static int parse_layer(const char *s, size_t len, const char *prefix, long *layer, const char **rest, size_t *rest_len) {
    size_t p = strlen(prefix);
    if (len <= p || strncmp(s, prefix, p) != 0) return 0;
    size_t i = p;
    long v = 0;
    while (i < len && s[i] >= '0' && s[i] <= '9' && i - p < 7) v = v * 10 + (s[i++] - '0');
    if (i == p || i >= len || s[i] != '.' || (s[p] == '0' && i - p > 1)) return 0;
    *layer = v;
    *rest = s + i + 1;
    *rest_len = len - i - 1;
    return 1;
}

static int stem_eq(const char *s, size_t len, const char *word) { return strlen(word) == len && strncmp(s, word, len) == 0; }

static lmc_status emit(char *out, size_t cap, const char *name, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static lmc_status emit(char *out, size_t cap, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap) return lmc_fail(LMC_ERR_RANGE, "tensor name for \"%s\" does not fit in %zu bytes", name, cap);
    return LMC_OK;
}

/* Map one name: from_gguf = 1 for GGUF → HF. */
static lmc_status map_name(const lmc_gguf_arch_info *a, const char *name, int from_gguf, char *out, size_t cap) {
    size_t stem_len;
    const char *suffix;
    if (a->moe == LMC_GGUF_MOE_GPTOSS) { /* attention sinks: a ".weight" in GGUF, no suffix in HF */
        long layer;
        const char *rest;
        size_t rest_len, n = strlen(name);
        if (from_gguf && parse_layer(name, n, "blk.", &layer, &rest, &rest_len) && stem_eq(rest, rest_len, "attn_sinks.weight"))
            return emit(out, cap, name, "model.layers.%ld.self_attn.sinks", layer);
        if (!from_gguf && parse_layer(name, n, "model.layers.", &layer, &rest, &rest_len) && stem_eq(rest, rest_len, "self_attn.sinks"))
            return emit(out, cap, name, "blk.%ld.attn_sinks.weight", layer);
    }
    if (split_suffix(name, &stem_len, &suffix)) {
        for (size_t i = 0; i < N_OF(global_rules); i++) {
            const char *from = from_gguf ? global_rules[i].gguf : global_rules[i].hf;
            const char *to = from_gguf ? global_rules[i].hf : global_rules[i].gguf;
            if (stem_eq(name, stem_len, from)) return emit(out, cap, name, "%s%s", to, suffix);
        }
        long layer;
        const char *rest;
        size_t rest_len;
        const char *prefix = from_gguf ? "blk." : "model.layers.";
        if (parse_layer(name, stem_len, prefix, &layer, &rest, &rest_len)) {
            size_t n_arch;
            const name_rule *arch_r = arch_rules(a, &n_arch);
            size_t n_moe;
            const name_rule *moe_r = moe_rules(a, &n_moe);
            const name_rule *tables[3] = {layer_rules, arch_r, moe_r};
            size_t sizes[3] = {N_OF(layer_rules), n_arch, n_moe};
            for (int t = 0; t < 3; t++) {
                for (size_t i = 0; i < sizes[t]; i++) {
                    const char *from = from_gguf ? tables[t][i].gguf : tables[t][i].hf;
                    const char *to = from_gguf ? tables[t][i].hf : tables[t][i].gguf;
                    if (stem_eq(rest, rest_len, from)) {
                        return emit(out, cap, name, "%s%ld.%s%s", from_gguf ? "model.layers." : "blk.", layer, to, suffix);
                    }
                }
            }
        }
    }
    return lmc_fail(LMC_ERR_NOT_FOUND, "%s tensor \"%s\" has no %s counterpart for architecture %s",
                    from_gguf ? "GGUF" : "HF", name, from_gguf ? "Hugging Face" : "GGUF", a->gguf_arch);
}

lmc_status lmc_gguf_arch_hf_name(const lmc_gguf_arch_info *a, const char *gguf_name, char *out, size_t cap) {
    return map_name(a, gguf_name, 1, out, cap);
}

lmc_status lmc_gguf_arch_gguf_name(const lmc_gguf_arch_info *a, const char *hf_name, char *out, size_t cap) {
    return map_name(a, hf_name, 0, out, cap);
}

int lmc_gguf_arch_norm_shifted(const lmc_gguf_arch_info *a, const char *gguf_name) {
    static const char suf[] = "norm.weight";
    size_t n = strlen(gguf_name), m = sizeof suf - 1;
    return a->norm_plus_one && n >= m && strcmp(gguf_name + n - m, suf) == 0;
}

/* ---- q/k permutation -------------------------------------------------------------------------- */

int64_t lmc_gguf_hf_row(int64_t gguf_row, int64_t head_dim) {
    int64_t h = gguf_row / head_dim, r = gguf_row % head_dim;
    return h * head_dim + (r % 2) * (head_dim / 2) + r / 2;
}

int64_t lmc_gguf_gguf_row(int64_t hf_row, int64_t head_dim) {
    int64_t h = hf_row / head_dim, r = hf_row % head_dim, half = head_dim / 2;
    return h * head_dim + (r % half) * 2 + r / half;
}

lmc_status lmc_gguf_unpermute_rows(void *dst, const void *src, int64_t n_rows, size_t row_bytes, int64_t head_dim) {
    if (head_dim <= 0 || head_dim % 2 || n_rows < 0 || n_rows % head_dim) {
        return lmc_fail(LMC_ERR_ARG, "unpermute: %lld rows are not whole heads of an even head_dim %lld", (long long)n_rows,
                        (long long)head_dim);
    }
    uint8_t *d = dst;
    const uint8_t *s = src;
    for (int64_t r = 0; r < n_rows; r++) memcpy(d + (size_t)lmc_gguf_hf_row(r, head_dim) * row_bytes, s + (size_t)r * row_bytes, row_bytes);
    return LMC_OK;
}

/* ---- config ----------------------------------------------------------------------------------- */

/* A float read from f32 storage, as the shortest decimal that rounds back to it
 * (1e-6 stays 1e-06 instead of 9.99999997e-07). */
static double tidy_f32(double v) {
    float f = (float)v;
    if ((double)f != v || !isfinite(v)) return v;
    char buf[40];
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        double back = strtod(buf, NULL);
        if ((float)back == f) return back;
    }
    return v;
}

typedef struct cfg_ctx {
    const lmc_gguf *g;
    const char *arch;
    char key[160];
} cfg_ctx;

static const char *akey(cfg_ctx *c, const char *suffix) {
    snprintf(c->key, sizeof c->key, "%s.%s", c->arch, suffix);
    return c->key;
}

/* An optional integer "<arch>.<suffix>": 1 found, 0 absent, <0 error. A per-layer array whose values
 * are all equal counts as that value. */
static int opt_int(cfg_ctx *c, const char *suffix, int64_t *out) {
    const char *k = akey(c, suffix);
    int64_t i = lmc_gguf_find_key(c->g, k);
    if (i < 0) return 0;
    if (lmc_gguf_kv_type(c->g, i) == LMC_GGUF_ARRAY) {
        lmc_gguf_array a;
        LMC_TRY(lmc_gguf_kv_arr(c->g, i, &a));
        if (a.n == 0) return lmc_fail(LMC_ERR_FORMAT, "GGUF %s is an empty array", k);
        int64_t v0, v;
        LMC_TRY(lmc_gguf_arr_int(&a, 0, &v0));
        for (uint64_t j = 1; j < a.n; j++) {
            LMC_TRY(lmc_gguf_arr_int(&a, j, &v));
            if (v != v0) return lmc_fail(LMC_ERR_UNSUPPORTED, "GGUF %s differs between layers (%lld vs %lld)", k, (long long)v0, (long long)v);
        }
        *out = v0;
        return 1;
    }
    LMC_TRY(lmc_gguf_kv_int(c->g, i, out));
    return 1;
}

static lmc_status req_int(cfg_ctx *c, const char *suffix, int64_t *out) {
    int r = opt_int(c, suffix, out);
    if (r < 0) return r;
    if (r == 0) return lmc_fail(LMC_ERR_FORMAT, "GGUF metadata lacks %s", c->key);
    if (*out <= 0 || *out > INT32_MAX) return lmc_fail(LMC_ERR_FORMAT, "GGUF %s = %lld is out of range", c->key, (long long)*out);
    return LMC_OK;
}

/* An optional number (float or integer) under a full key: 1 found, 0 absent, <0 error. */
static int opt_num_key(const lmc_gguf *g, const char *k, double *out) {
    int64_t i = lmc_gguf_find_key(g, k);
    if (i < 0) return 0;
    lmc_gguf_vtype t = lmc_gguf_kv_type(g, i);
    if (t == LMC_GGUF_F32 || t == LMC_GGUF_F64) {
        LMC_TRY(lmc_gguf_kv_float(g, i, out));
        if (t == LMC_GGUF_F32) *out = tidy_f32(*out);
    } else {
        int64_t v;
        LMC_TRY(lmc_gguf_kv_int(g, i, &v));
        *out = (double)v;
    }
    if (!isfinite(*out)) return lmc_fail(LMC_ERR_FORMAT, "GGUF %s is not finite", k);
    return 1;
}

static int opt_num(cfg_ctx *c, const char *suffix, double *out) { return opt_num_key(c->g, akey(c, suffix), out); }

/* Add a number, failing on allocation failure. */
static lmc_status put_num(cJSON *o, const char *k, double v) {
    return cJSON_AddNumberToObject(o, k, v) ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
}
static lmc_status put_bool(cJSON *o, const char *k, int v) {
    return cJSON_AddBoolToObject(o, k, v) ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
}
static lmc_status put_str(cJSON *o, const char *k, const char *v) {
    return cJSON_AddStringToObject(o, k, v) ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
}

/* f32 values of a 1-D F32 tensor as a JSON array (NULL on OOM); n ≤ max. */
static lmc_status f32_tensor_array(const lmc_gguf_tensor *t, int64_t max, cJSON **out) {
    if (t->type != LMC_GGML_F32 || t->n_dims > 1 || t->ne[0] > max) {
        return lmc_fail(LMC_ERR_FORMAT, "GGUF tensor %s must be a 1-D F32 table of at most %lld values (it is %s, %lld)",
                        t->name, (long long)max, lmc_ggml_type_name(t->type), (long long)lmc_gguf_nelem(t));
    }
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
    for (int64_t i = 0; i < t->ne[0]; i++) {
        float f;
        memcpy(&f, (const uint8_t *)t->data + 4 * i, 4);
        cJSON *n = cJSON_CreateNumber(tidy_f32(f));
        if (!n || !isfinite(f)) {
            cJSON_Delete(n);
            cJSON_Delete(arr);
            return n ? lmc_fail(LMC_ERR_FORMAT, "GGUF tensor %s holds a non-finite value", t->name)
                     : lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
        }
        cJSON_AddItemToArray(arr, n);
    }
    *out = arr;
    return LMC_OK;
}

/* llama3 rope: the divisor of frequency i (wavelength w) is 1 when w < old/hff, `factor` when
 * w > old/lff, and 1 / ((1 - s)/factor + s) with s = (old/w - lff)/(hff - lff) in between. */
static double llama3_divisor(double w, double factor, double lff, double hff, double old) {
    if (w < old / hff) return 1.0;
    if (w > old / lff) return factor;
    double s = (old / w - lff) / (hff - lff);
    return 1.0 / ((1.0 - s) / factor + s);
}

typedef struct llama3_params { double factor, lff, hff; int64_t old; } llama3_params;

/* Parameters of the llama3 rule that reproduce a rope_freqs.weight table (llama.cpp stores the
 * divisors, not the parameters). The table only fixes the two thresholds T1 = old/hff, T2 = old/lff
 * and the factor, so `old` is chosen as an integer near T2 and lff, hff follow. 1 if a fit
 * reproduces every entry within 1e-5, else 0 (the caller then passes the table through). */
static int llama3_fit(const lmc_gguf_tensor *t, double base, int64_t dim, llama3_params *p) {
    int64_t n = dim / 2;
    if (t->type != LMC_GGML_F32 || t->n_dims > 1 || dim <= 0 || t->ne[0] != n || n == 0 || n > 32768) return 0;
    double *v = malloc((size_t)n * 2 * sizeof *v), *w = v ? v + n : NULL;
    if (!v) return 0;
    const uint8_t *data = t->data; /* memcpy: general.alignment may be 1 */
    for (int64_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, data + 4 * i, 4);
        v[i] = f;
        w[i] = 2.0 * M_PI * pow(base, (double)(2 * i) / (double)dim);
    }
    double f = v[n - 1];
    int ok = f > 1.0 && isfinite(f);
    /* entries must run: ones, then blended values, then the factor */
    int64_t first_mid = -1, last_mid = -1, last_one = -1, phase = 0;
    for (int64_t i = 0; i < n && ok; i++) {
        int one = fabs(v[i] - 1.0) <= 1e-6, top = fabs(v[i] - f) <= 1e-6 * f;
        int ph = one ? 0 : top ? 2 : 1;
        if (ph < phase || !(v[i] >= 1.0 - 1e-6 && v[i] <= f * (1 + 1e-6))) ok = 0;
        phase = ph;
        if (ph == 0) last_one = i;
        if (ph == 1) { if (first_mid < 0) first_mid = i; last_mid = i; }
    }
    double t1 = 0, t2 = 0;
    if (ok) {
        double s_first = first_mid >= 0 ? (1.0 / v[first_mid] - 1.0 / f) / (1.0 - 1.0 / f) : 0;
        if (first_mid >= 0 && last_mid > first_mid) {
            double s_last = (1.0 / v[last_mid] - 1.0 / f) / (1.0 - 1.0 / f);
            double a = (s_first - s_last) / (1.0 / w[first_mid] - 1.0 / w[last_mid]);
            double b = a / w[first_mid] - s_first;
            if (a > 0 && b > 0) { t2 = a / b; t1 = a / (b + 1.0); }
            else ok = 0;
        } else if (first_mid >= 0) { /* one blended entry: put T2 just above it, solve T1 */
            double wm = w[first_mid], lower = first_mid > 0 ? w[first_mid - 1] : 0.0, upper = w[first_mid + 1];
            t2 = 0.5 * (wm + upper);
            for (int it = 0; it < 60; it++) {
                t1 = s_first * wm * t2 / (t2 - wm + s_first * wm);
                if (t1 > lower) break;
                t2 = 0.5 * (wm + t2);
            }
        } else { /* no blended entry: both thresholds between the last 1 and the first factor */
            double lower = last_one >= 0 ? w[last_one] : 0.0, upper = w[last_one + 1];
            t1 = lower + (upper - lower) / 3.0;
            t2 = lower + 2.0 * (upper - lower) / 3.0;
        }
    }
    if (ok && t1 > 0 && t2 > t1) {
        p->factor = f;
        p->old = t2 >= 1.0 ? (int64_t)floor(t2 + 0.5) : 1;
        p->lff = (double)p->old / t2;
        p->hff = (double)p->old / t1;
        for (int64_t i = 0; i < n && ok; i++) {
            double want = llama3_divisor(w[i], p->factor, p->lff, p->hff, (double)p->old);
            if (!(fabs(v[i] - want) <= 1e-5 * want)) ok = 0;
        }
    } else {
        ok = 0;
    }
    free(v);
    return ok;
}

/* The expert keys of a MoE file as HF's config spells them (qwen2_moe / qwen3_moe / mixtral), after
 * checking them against the stacked tensors' shapes. Dense layers of a qwen file (no ffn_gate_inp)
 * become mlp_only_layers. Routing renormalization: {arch}.expert_weights_norm when present, else
 * llama.cpp's fixed choice for the architecture (qwen3moe and Mixtral renormalize, qwen2moe not). */
static lmc_status moe_config(cfg_ctx *c, const lmc_gguf_arch_info *a, const lmc_gguf *g, int64_t n_layers, int64_t n_expert,
                             cJSON *o) {
    int64_t used, eff = 0, sff = 0;
    int r;
    if (n_expert <= 0 || n_expert > 65536)
        return lmc_fail(LMC_ERR_FORMAT, "GGUF %s.expert_count = %lld is out of range", a->gguf_arch, (long long)n_expert);
    LMC_TRY(req_int(c, "expert_used_count", &used));
    if (used <= 0 || used > n_expert)
        return lmc_fail(LMC_ERR_FORMAT, "GGUF %s.expert_used_count = %lld must be in [1, expert_count = %lld]", a->gguf_arch,
                        (long long)used, (long long)n_expert);
    if ((r = opt_int(c, "expert_feed_forward_length", &eff)) < 0) return r;
    if ((r = opt_int(c, "expert_shared_feed_forward_length", &sff)) < 0) return r;
    int norm = strcmp(a->gguf_arch, "qwen2moe") != 0;
    int64_t ki = lmc_gguf_find_key(g, akey(c, "expert_weights_norm"));
    if (ki >= 0) {
        if (lmc_gguf_kv_type(g, ki) != LMC_GGUF_BOOL) return lmc_fail(LMC_ERR_FORMAT, "GGUF %s must be a bool", c->key);
        LMC_TRY(lmc_gguf_get_bool(g, c->key, &norm));
    }
    const int qwen = a->moe == LMC_GGUF_MOE_QWEN;
    if (qwen && eff <= 0)
        return lmc_fail(LMC_ERR_FORMAT, "GGUF metadata lacks %s.expert_feed_forward_length", a->gguf_arch);
    cJSON *dense = cJSON_CreateArray();
    if (!dense) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
    int n_sparse = 0;
    for (int64_t il = 0; il < n_layers; il++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%lld.ffn_gate_inp.weight", (long long)il);
        const lmc_gguf_tensor *router = lmc_gguf_find_tensor(g, name);
        if (!router) {
            cJSON *n = cJSON_CreateNumber((double)il);
            if (!n) { cJSON_Delete(dense); return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json"); }
            cJSON_AddItemToArray(dense, n);
            continue;
        }
        n_sparse++;
        if (router->n_dims != 2 || router->ne[1] != n_expert) {
            cJSON_Delete(dense);
            return lmc_fail(LMC_ERR_FORMAT, "GGUF %s has %lld rows, but %s.expert_count is %lld", name,
                            (long long)(router->n_dims == 2 ? router->ne[1] : 1), a->gguf_arch, (long long)n_expert);
        }
    }
    if (n_sparse == 0 || (!qwen && n_sparse != n_layers)) {
        cJSON_Delete(dense);
        return lmc_fail(LMC_ERR_FORMAT, "GGUF %s file with %s.expert_count %lld has %s ffn_gate_inp router tensors",
                        a->gguf_arch, a->gguf_arch, (long long)n_expert, n_sparse ? "too few" : "no");
    }
    if (qwen) {
        cJSON_AddItemToObject(o, "mlp_only_layers", dense);
        LMC_TRY(put_num(o, "decoder_sparse_step", 1));
        LMC_TRY(put_num(o, "num_experts", (double)n_expert));
        LMC_TRY(put_num(o, "moe_intermediate_size", (double)eff));
        if (sff > 0) LMC_TRY(put_num(o, "shared_expert_intermediate_size", (double)sff));
    } else {
        cJSON_Delete(dense);
        LMC_TRY(put_num(o, "num_local_experts", (double)n_expert));
        if (!norm) return lmc_fail(LMC_ERR_UNSUPPORTED, "GGUF %s: Mixtral routing without renormalization (expert_weights_norm false)",
                                   a->gguf_arch);
    }
    LMC_TRY(put_num(o, "num_experts_per_tok", (double)used));
    if (qwen) LMC_TRY(put_bool(o, "norm_topk_prob", norm));
    return LMC_OK;
}

static lmc_status build_config(const lmc_gguf *g, const lmc_gguf_arch_info *a, cJSON *o) {
    cfg_ctx c = {.g = g, .arch = a->gguf_arch};
    int64_t hidden, n_layers, n_heads, n_kv, ff, ctx = 0, head_dim, v_len, rope_dim;
    LMC_TRY(req_int(&c, "embedding_length", &hidden));
    LMC_TRY(req_int(&c, "block_count", &n_layers));
    LMC_TRY(req_int(&c, "attention.head_count", &n_heads));
    int r;
    if (a->moe == LMC_GGUF_MOE_GPTOSS) { /* every layer is sparse: expert_feed_forward_length below decides */
        if ((r = opt_int(&c, "feed_forward_length", &ff)) < 0) return r;
    } else {
        LMC_TRY(req_int(&c, "feed_forward_length", &ff));
    }
    r = opt_int(&c, "attention.head_count_kv", &n_kv);
    if (r < 0) return r;
    if (r == 0) n_kv = n_heads;
    if (n_kv <= 0 || n_kv > n_heads || n_heads % n_kv) {
        return lmc_fail(LMC_ERR_FORMAT, "GGUF %s.attention.head_count_kv = %lld does not divide head_count %lld", a->gguf_arch,
                        (long long)n_kv, (long long)n_heads);
    }
    if ((r = opt_int(&c, "context_length", &ctx)) < 0) return r;
    if ((r = opt_int(&c, "attention.key_length", &head_dim)) < 0) return r;
    if (r == 0) {
        if (hidden % n_heads) {
            return lmc_fail(LMC_ERR_FORMAT, "GGUF %s: embedding_length %lld is not a multiple of head_count %lld and "
                            "attention.key_length is absent", a->gguf_arch, (long long)hidden, (long long)n_heads);
        }
        head_dim = hidden / n_heads;
    }
    if ((r = opt_int(&c, "attention.value_length", &v_len)) < 0) return r;
    if (r == 1 && v_len != head_dim) {
        return lmc_fail(LMC_ERR_UNSUPPORTED, "GGUF %s: value_length %lld differs from key_length %lld", a->gguf_arch,
                        (long long)v_len, (long long)head_dim);
    }
    if (head_dim <= 0 || head_dim > 65536) return lmc_fail(LMC_ERR_FORMAT, "GGUF %s: head dim %lld out of range", a->gguf_arch, (long long)head_dim);
    if ((r = opt_int(&c, "rope.dimension_count", &rope_dim)) < 0) return r;
    if (r == 0) rope_dim = head_dim;
    if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2) {
        return lmc_fail(LMC_ERR_FORMAT, "GGUF %s.rope.dimension_count = %lld is not an even number ≤ head dim %lld",
                        a->gguf_arch, (long long)rope_dim, (long long)head_dim);
    }
    double eps = 1e-6, theta = 10000.0;
    if ((r = opt_num(&c, "attention.layer_norm_rms_epsilon", &eps)) < 0) return r;
    if (r == 0) return lmc_fail(LMC_ERR_FORMAT, "GGUF metadata lacks %s.attention.layer_norm_rms_epsilon", a->gguf_arch);
    if ((r = opt_num(&c, "rope.freq_base", &theta)) < 0) return r;

    const lmc_gguf_tensor *embd = lmc_gguf_find_tensor(g, "token_embd.weight");
    if (!embd) return lmc_fail(LMC_ERR_FORMAT, "GGUF model has no token_embd.weight");
    if (embd->n_dims != 2 || embd->ne[0] != hidden) {
        return lmc_fail(LMC_ERR_FORMAT, "GGUF token_embd.weight is %lld x %lld, expected [vocab, %lld]", (long long)embd->ne[1],
                        (long long)embd->ne[0], (long long)hidden);
    }
    int tie = lmc_gguf_find_tensor(g, "output.weight") == NULL;

    /* experts: llama files carry them only for Mixtral; qwen2moe / qwen3moe always */
    int64_t n_expert = 0;
    if ((r = opt_int(&c, "expert_count", &n_expert)) < 0) return r;
    const int gptoss = a->moe == LMC_GGUF_MOE_GPTOSS;
    if ((a->moe == LMC_GGUF_MOE_QWEN || gptoss) && r == 0) return lmc_fail(LMC_ERR_FORMAT, "GGUF metadata lacks %s.expert_count", a->gguf_arch);
    int mixtral = a->moe == LMC_GGUF_MOE_MIXTRAL && r == 1 && n_expert > 0;
    LMC_TRY(put_str(o, "model_type", mixtral ? "mixtral" : a->model_type));
    if (a->moe == LMC_GGUF_MOE_QWEN || mixtral || gptoss) LMC_TRY(moe_config(&c, a, g, n_layers, n_expert, o));
    if (gptoss) { /* HF's intermediate_size is the expert size (llama.cpp writes it as both keys) */
        int64_t eff;
        if ((r = opt_int(&c, "expert_feed_forward_length", &eff)) < 0) return r;
        if (r == 0) return lmc_fail(LMC_ERR_FORMAT, "GGUF metadata lacks %s.expert_feed_forward_length", a->gguf_arch);
        ff = eff;
    }
    cJSON *archs_arr = cJSON_AddArrayToObject(o, "architectures");
    cJSON *an = cJSON_CreateString(mixtral ? "MixtralForCausalLM" : a->hf_architecture);
    if (!archs_arr || !an) {
        cJSON_Delete(an);
        return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
    }
    cJSON_AddItemToArray(archs_arr, an);
    LMC_TRY(put_num(o, "hidden_size", (double)hidden));
    LMC_TRY(put_num(o, "num_hidden_layers", (double)n_layers));
    LMC_TRY(put_num(o, "num_attention_heads", (double)n_heads));
    LMC_TRY(put_num(o, "num_key_value_heads", (double)n_kv));
    LMC_TRY(put_num(o, "head_dim", (double)head_dim));
    LMC_TRY(put_num(o, "intermediate_size", (double)ff));
    LMC_TRY(put_num(o, "rms_norm_eps", eps));
    LMC_TRY(put_num(o, "rope_theta", theta));
    if (ctx > 0) LMC_TRY(put_num(o, "max_position_embeddings", (double)ctx));
    LMC_TRY(put_num(o, "vocab_size", (double)embd->ne[1]));
    LMC_TRY(put_bool(o, "tie_word_embeddings", tie));
    if (rope_dim != head_dim) LMC_TRY(put_num(o, "partial_rotary_factor", (double)rope_dim / (double)head_dim));
    const char *dt = embd->type == LMC_GGML_F32 ? "float32" : embd->type == LMC_GGML_F16 ? "float16"
                    : embd->type == LMC_GGML_BF16 ? "bfloat16" : NULL;
    if (dt) LMC_TRY(put_str(o, "torch_dtype", dt));

    int gemma = a->norm_plus_one;
    /* as HF's configs spell it: gemma has hidden_act and hidden_activation, gemma2/3 only the latter */
    if (!a->sandwich) LMC_TRY(put_str(o, "hidden_act", gemma ? "gelu_pytorch_tanh" : "silu"));
    if (gemma) LMC_TRY(put_str(o, "hidden_activation", "gelu_pytorch_tanh"));
    if (strcmp(a->gguf_arch, "llama") == 0 || gptoss) {
        LMC_TRY(put_bool(o, "attention_bias", lmc_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL));
    }
    if (strcmp(a->gguf_arch, "llama") == 0) {
        LMC_TRY(put_bool(o, "mlp_bias", lmc_gguf_find_tensor(g, "blk.0.ffn_up.bias") != NULL));
    }

    /* sliding windows */
    int64_t window = 0;
    if ((r = opt_int(&c, "attention.sliding_window", &window)) < 0) return r;
    if (window > 0) LMC_TRY(put_num(o, "sliding_window", (double)window));
    if (gptoss) {
        /* llama.cpp: sliding window on even layers, full attention on odd ones (swa pattern 2); the
         * GLU clamp is fixed at HF's default (7.0, not stored by the converter) */
        if (window <= 0) return lmc_fail(LMC_ERR_FORMAT, "GGUF metadata lacks %s.attention.sliding_window", a->gguf_arch);
        cJSON *lt = cJSON_AddArrayToObject(o, "layer_types");
        if (!lt) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
        for (int64_t il = 0; il < n_layers; il++) {
            cJSON *s = cJSON_CreateString(il % 2 == 0 ? "sliding_attention" : "full_attention");
            if (!s) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
            cJSON_AddItemToArray(lt, s);
        }
        LMC_TRY(put_num(o, "swiglu_limit", 7.0));
    }
    else if (a->fused || a->moe == LMC_GGUF_MOE_QWEN || strcmp(a->gguf_arch, "qwen2") == 0 || strcmp(a->gguf_arch, "qwen3") == 0) {
        if (!cJSON_AddNullToObject(o, "sliding_window")) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
    }
    if (strcmp(a->gguf_arch, "gemma3") == 0) {
        int64_t pi = lmc_gguf_find_key(g, akey(&c, "attention.sliding_window_pattern"));
        if (pi >= 0 && lmc_gguf_kv_type(g, pi) == LMC_GGUF_ARRAY) {
            lmc_gguf_array pa;
            LMC_TRY(lmc_gguf_kv_arr(g, pi, &pa));
            if (pa.elem_type != LMC_GGUF_BOOL || pa.n != (uint64_t)n_layers) {
                return lmc_fail(LMC_ERR_FORMAT, "GGUF %s must be %lld bools", c.key, (long long)n_layers);
            }
            cJSON *lt = cJSON_AddArrayToObject(o, "layer_types");
            if (!lt) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
            for (uint64_t i = 0; i < pa.n; i++) {
                int b;
                LMC_TRY(lmc_gguf_arr_bool(&pa, i, &b));
                cJSON *s = cJSON_CreateString(b ? "sliding_attention" : "full_attention");
                if (!s) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
                cJSON_AddItemToArray(lt, s);
            }
        } else {
            int64_t pattern = 6; /* Gemma 3: five sliding layers, then one full (llama.cpp's and HF's default) */
            if ((r = opt_int(&c, "attention.sliding_window_pattern", &pattern)) < 0) return r;
            LMC_TRY(put_num(o, "sliding_window_pattern", (double)pattern));
        }
        double local_base = 10000.0;
        if ((r = opt_num(&c, "rope.freq_base_swa", &local_base)) < 0) return r;
        LMC_TRY(put_num(o, "rope_local_base_freq", local_base));
    }

    /* gemma2/3 scalars */
    if (a->sandwich) {
        double cap;
        if ((r = opt_num(&c, "attn_logit_softcapping", &cap)) < 0) return r;
        if (r) LMC_TRY(put_num(o, "attn_logit_softcapping", cap));
        if ((r = opt_num(&c, "final_logit_softcapping", &cap)) < 0) return r;
        if (r) LMC_TRY(put_num(o, "final_logit_softcapping", cap));
        /* llama.cpp derives the attention scale from the model size: the 27B models
         * (gemma2: 46 layers, gemma3: 62 layers) scale by (hidden/heads)^-0.5, the others by head_dim^-0.5. */
        int big = (strcmp(a->gguf_arch, "gemma2") == 0 && n_layers == 46) ||
                  (strcmp(a->gguf_arch, "gemma3") == 0 && n_layers == 62);
        double qpas = big ? (double)(hidden / n_heads) : (double)head_dim, scale;
        if ((r = opt_num(&c, "attention.scale", &scale)) < 0) return r;
        if (r && scale > 0) {
            qpas = 1.0 / (scale * scale); /* stored as f32: snap to the integer HF configs hold */
            double rq = floor(qpas + 0.5);
            if (fabs(qpas - rq) <= 1e-4 * qpas) qpas = rq;
        }
        LMC_TRY(put_num(o, "query_pre_attn_scalar", qpas));
    }

    /* rope scaling */
    cJSON *rs = NULL;
    const char *stype = NULL;
    int64_t si = lmc_gguf_find_key(g, akey(&c, "rope.scaling.type"));
    if (si >= 0) LMC_TRY(lmc_gguf_kv_str(g, si, &stype, NULL));
    double factor = 1.0;
    if ((r = opt_num(&c, "rope.scaling.factor", &factor)) < 0) return r;
    int64_t orig = 0;
    if ((r = opt_int(&c, "rope.scaling.original_context_length", &orig)) < 0) return r;
    const lmc_gguf_tensor *rf = lmc_gguf_find_tensor(g, "rope_freqs.weight");
    const lmc_gguf_tensor *rlong = lmc_gguf_find_tensor(g, "rope_factors_long.weight");
    const lmc_gguf_tensor *rshort = lmc_gguf_find_tensor(g, "rope_factors_short.weight");
    cJSON *extra = cJSON_AddObjectToObject(o, "lmc_gguf");
    if (!extra) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
    LMC_TRY(put_str(extra, "architecture", a->gguf_arch));
    LMC_TRY(put_bool(extra, "qk_permuted", a->qk_permuted));
    LMC_TRY(put_bool(extra, "norm_plus_one", a->norm_plus_one));
    if (stype && strcmp(stype, "none") != 0 && !(rlong && rshort)) {
        if (strcmp(stype, "linear") == 0 || strcmp(stype, "yarn") == 0) {
            if (!(factor > 0)) return lmc_fail(LMC_ERR_FORMAT, "GGUF %s.rope.scaling.factor missing or not positive", a->gguf_arch);
            if (!(rs = cJSON_AddObjectToObject(o, "rope_scaling"))) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
            LMC_TRY(put_str(rs, "rope_type", stype));
            LMC_TRY(put_num(rs, "factor", factor));
            if (strcmp(stype, "yarn") == 0) {
                if (orig > 0) LMC_TRY(put_num(rs, "original_max_position_embeddings", (double)orig));
                double v;
                if ((r = opt_num(&c, "rope.scaling.yarn_beta_fast", &v)) < 0) return r;
                if (r) LMC_TRY(put_num(rs, "beta_fast", v));
                if ((r = opt_num(&c, "rope.scaling.yarn_beta_slow", &v)) < 0) return r;
                if (r) LMC_TRY(put_num(rs, "beta_slow", v));
                if (gptoss) LMC_TRY(put_bool(rs, "truncate", 0)); /* gpt-oss's HF config: unrounded corrections */
            }
        } else {
            return lmc_fail(LMC_ERR_UNSUPPORTED, "GGUF %s.rope.scaling.type \"%s\" is not supported", a->gguf_arch, stype);
        }
    }
    if (rlong || rshort) {
        if (!rlong || !rshort) return lmc_fail(LMC_ERR_FORMAT, "GGUF model has only one of rope_factors_long/short.weight");
        if (!(rs = cJSON_AddObjectToObject(o, "rope_scaling"))) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
        LMC_TRY(put_str(rs, "rope_type", "longrope"));
        cJSON *lf, *sf;
        LMC_TRY(f32_tensor_array(rlong, rope_dim / 2, &lf));
        cJSON_AddItemToObject(rs, "long_factor", lf);
        LMC_TRY(f32_tensor_array(rshort, rope_dim / 2, &sf));
        cJSON_AddItemToObject(rs, "short_factor", sf);
        if (cJSON_GetArraySize(lf) != rope_dim / 2 || cJSON_GetArraySize(sf) != rope_dim / 2) {
            return lmc_fail(LMC_ERR_FORMAT, "GGUF rope_factors_long/short must hold %lld values each", (long long)(rope_dim / 2));
        }
    }
    if (orig > 0 && a->fused) LMC_TRY(put_num(o, "original_max_position_embeddings", (double)orig));
    if (rf) {
        llama3_params lp;
        if (llama3_fit(rf, theta, rope_dim, &lp)) {
            if (rs) return lmc_fail(LMC_ERR_FORMAT, "GGUF model has both rope.scaling and rope_freqs.weight");
            if (!(rs = cJSON_AddObjectToObject(o, "rope_scaling"))) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
            LMC_TRY(put_str(rs, "rope_type", "llama3"));
            LMC_TRY(put_num(rs, "factor", lp.factor));
            LMC_TRY(put_num(rs, "low_freq_factor", lp.lff));
            LMC_TRY(put_num(rs, "high_freq_factor", lp.hff));
            LMC_TRY(put_num(rs, "original_max_position_embeddings", (double)lp.old));
        } else {
            cJSON *ff_arr;
            LMC_TRY(f32_tensor_array(rf, rope_dim / 2, &ff_arr));
            cJSON_AddItemToObject(extra, "rope_freq_factors", ff_arr);
        }
    }

    /* special tokens */
    int64_t id;
    int64_t eos_ids[3];
    int n_eos = 0;
    static const char *const eos_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                           "tokenizer.ggml.eom_token_id"};
    for (int k = 0; k < 3; k++) {
        if (lmc_gguf_find_key(g, eos_keys[k]) < 0) continue;
        LMC_TRY(lmc_gguf_get_int(g, eos_keys[k], &id));
        int dup = 0;
        for (int j = 0; j < n_eos; j++) dup |= eos_ids[j] == id;
        if (!dup) eos_ids[n_eos++] = id;
    }
    if (n_eos == 1) LMC_TRY(put_num(o, "eos_token_id", (double)eos_ids[0]));
    else if (n_eos > 1) {
        cJSON *e = cJSON_AddArrayToObject(o, "eos_token_id");
        if (!e) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
        for (int j = 0; j < n_eos; j++) {
            cJSON *n = cJSON_CreateNumber((double)eos_ids[j]);
            if (!n) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
            cJSON_AddItemToArray(e, n);
        }
    }
    if (lmc_gguf_find_key(g, "tokenizer.ggml.bos_token_id") >= 0) {
        LMC_TRY(lmc_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &id));
        LMC_TRY(put_num(o, "bos_token_id", (double)id));
    }
    if (lmc_gguf_find_key(g, "tokenizer.ggml.padding_token_id") >= 0) {
        LMC_TRY(lmc_gguf_get_int(g, "tokenizer.ggml.padding_token_id", &id));
        LMC_TRY(put_num(o, "pad_token_id", (double)id));
    }
    return LMC_OK;
}

lmc_status lmc_gguf_arch_config(const lmc_gguf *g, cJSON **out) {
    const lmc_gguf_arch_info *a;
    LMC_TRY(lmc_gguf_arch_of(g, &a));
    cJSON *o = cJSON_CreateObject();
    if (!o) return lmc_fail(LMC_ERR_NOMEM, "out of memory building config.json");
    lmc_status st = build_config(g, a, o);
    if (st < 0) {
        cJSON_Delete(o);
        return st;
    }
    *out = o;
    return LMC_OK;
}

lmc_status lmc_gguf_arch_config_json(const lmc_gguf *g, char **out) {
    cJSON *o;
    LMC_TRY(lmc_gguf_arch_config(g, &o));
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "out of memory printing config.json");
    *out = s;
    return LMC_OK;
}
