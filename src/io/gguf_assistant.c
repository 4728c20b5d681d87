/* gguf_assistant.c — Gemma 4 assistant ↔ GGUF: the converter, the reader (tensors under their
 * HF names) and the verify-gguf checks. Owns the name table below; the reader owns its mapping. */
#include "gguf_assistant.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/gguf.h"
#include "io/jsonfile.h"
#include "io/safetensors.h"

#define ARCH LMC_GGUF_ASSISTANT_ARCH

/* Whole-tensor names. */
static const struct { const char *hf, *gg; } top_names[] = {
    {"pre_projection.weight", "mtp.pre_projection.weight"},
    {"post_projection.weight", "mtp.post_projection.weight"},
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {"masked_embedding.centroids.weight", "mtp.centroids.weight"},
    {"masked_embedding.token_ordering", "mtp.token_ordering.weight"},
};
/* Per-layer names after "model.layers.N." / "blk.N.". */
static const struct { const char *hf, *gg; } layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"layer_scalar", "layer_output_scale.weight"},
};
#define N_TOP (sizeof top_names / sizeof top_names[0])
#define N_LAYER (sizeof layer_names / sizeof layer_names[0])

/* name in one naming → the other (to_gguf selects the direction); 0 when unknown. */
static int map_name(const char *name, int to_gguf, char *out, size_t cap) {
    for (size_t i = 0; i < N_TOP; i++)
        if (!strcmp(name, to_gguf ? top_names[i].hf : top_names[i].gg)) {
            snprintf(out, cap, "%s", to_gguf ? top_names[i].gg : top_names[i].hf);
            return 1;
        }
    const char *pre = to_gguf ? "model.layers." : "blk.";
    size_t lp = strlen(pre);
    if (strncmp(name, pre, lp) != 0) return 0;
    char *end;
    long il = strtol(name + lp, &end, 10);
    if (end == name + lp || *end != '.' || il < 0 || il > 100000) return 0;
    for (size_t i = 0; i < N_LAYER; i++)
        if (!strcmp(end + 1, to_gguf ? layer_names[i].hf : layer_names[i].gg)) {
            snprintf(out, cap, "%s%ld.%s", to_gguf ? "blk." : "model.layers.", il,
                     to_gguf ? layer_names[i].gg : layer_names[i].hf);
            return 1;
        }
    return 0;
}

/* ---------------------------------------------------------------- converter */

static int jint(const cJSON *o, const char *k, int def) {
    int64_t v;
    return lmc_json_get_int(o, k, &v) > 0 ? (int)v : def;
}

static lmc_status write_meta(lmc_gguf_writer *w, const cJSON *cfg, const char *cfg_text) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
    if (!cJSON_IsObject(tc)) return lmc_fail(LMC_ERR_FORMAT, "assistant config.json has no text_config");
    int ordered = 0;
    lmc_json_get_bool(cfg, "use_ordered_embeddings", &ordered);
    double eps = 1e-6;
    lmc_json_get_double(tc, "rms_norm_eps", &eps);
    struct { const char *k; int v; } u32s[] = {
        {ARCH ".embedding_length", jint(tc, "hidden_size", 0)},
        {ARCH ".backbone_embedding_length", jint(cfg, "backbone_hidden_size", 0)},
        {ARCH ".block_count", jint(tc, "num_hidden_layers", 0)},
        {ARCH ".vocab_size", jint(tc, "vocab_size", 0)},
        {ARCH ".context_length", jint(tc, "max_position_embeddings", 0)},
        {ARCH ".feed_forward_length", jint(tc, "intermediate_size", 0)},
        {ARCH ".attention.head_count", jint(tc, "num_attention_heads", 0)},
        {ARCH ".attention.head_count_kv", jint(tc, "num_key_value_heads", 0)},
        {ARCH ".attention.key_length", jint(tc, "head_dim", 0)},
        {ARCH ".attention.sliding_window", jint(tc, "sliding_window", 0)},
        {ARCH ".num_centroids", ordered ? jint(cfg, "num_centroids", 2048) : 0},
        {ARCH ".centroid_top_k", ordered ? jint(cfg, "centroid_intermediate_top_k", 32) : 0},
    };
    LMC_TRY(lmc_gguf_writer_add_str(w, "general.architecture", ARCH));
    LMC_TRY(lmc_gguf_writer_add_str(w, "general.name", "gemma4 assistant (MTP drafter)"));
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        if (u32s[i].v < 0) return lmc_fail(LMC_ERR_FORMAT, "assistant config.json: negative %s", u32s[i].k);
        LMC_TRY(lmc_gguf_writer_add_u32(w, u32s[i].k, (uint32_t)u32s[i].v));
    }
    LMC_TRY(lmc_gguf_writer_add_bool(w, ARCH ".use_ordered_embeddings", ordered));
    LMC_TRY(lmc_gguf_writer_add_f32(w, ARCH ".attention.layer_norm_rms_epsilon", (float)eps));
    return lmc_gguf_writer_add_str(w, "lmc.hf_config", cfg_text);
}

lmc_status lmc_gguf_assistant_convert(const char *hf_dir, const char *out_path) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    FILE *f = fopen(path, "rb");
    if (!f) return lmc_fail(LMC_ERR_NOT_FOUND, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len <= 0 || len > (16l << 20)) { fclose(f); return lmc_fail(LMC_ERR_FORMAT, "%s: bad size", path); }
    char *text = malloc((size_t)len + 1);
    size_t got = text ? fread(text, 1, (size_t)len, f) : 0;
    fclose(f);
    if (!text || got != (size_t)len) { free(text); return lmc_fail(LMC_ERR_IO, "cannot read %s", path); }
    text[len] = 0;
    cJSON *cfg = NULL;
    lmc_st_set *st = NULL;
    lmc_gguf_writer *w = NULL;
    int32_t *order = NULL;
    const char *mt = NULL;
    lmc_status s = lmc_json_parse(text, (size_t)len, path, &cfg);
    if (s >= 0 && (lmc_json_get_string(cfg, "model_type", &mt) <= 0 || strcmp(mt, "gemma4_assistant") != 0))
        s = lmc_fail(LMC_ERR_UNSUPPORTED, "%s is model_type \"%s\", not gemma4_assistant", hf_dir, mt ? mt : "?");
    if (s >= 0) s = lmc_st_open(hf_dir, &st);
    if (s >= 0) s = lmc_gguf_writer_init(&w);
    if (s >= 0) s = write_meta(w, cfg, text);
    for (int i = 0; s >= 0 && i < lmc_st_count(st); i++) {
        const lmc_st_tensor *t = lmc_st_at(st, i);
        char gg[256];
        if (!map_name(t->name, 1, gg, sizeof gg)) {
            s = lmc_fail(LMC_ERR_UNSUPPORTED, "assistant tensor %s has no GGUF name", t->name);
            break;
        }
        if (t->n_dims < 1 || t->n_dims > 4) { s = lmc_fail(LMC_ERR_FORMAT, "tensor %s has rank %d", t->name, t->n_dims); break; }
        int64_t ne[4];
        for (int d = 0; d < t->n_dims; d++) ne[d] = t->shape[t->n_dims - 1 - d];
        const void *data = t->data;
        uint32_t type;
        if (!strcmp(gg, "mtp.token_ordering.weight")) {
            /* stored as I32, whatever integer width the checkpoint used */
            int64_t n = lmc_st_nelem(t);
            if (t->dtype != LMC_DTYPE_I64 && t->dtype != LMC_DTYPE_I32) {
                s = lmc_fail(LMC_ERR_FORMAT, "%s must be an integer tensor", t->name);
                break;
            }
            order = malloc((size_t)n * sizeof *order);
            if (!order) { s = lmc_fail(LMC_ERR_NOMEM, "token ordering"); break; }
            for (int64_t k = 0; k < n; k++) {
                int64_t v;
                if (t->dtype == LMC_DTYPE_I64) memcpy(&v, (const char *)t->data + k * 8, 8);
                else { int32_t x; memcpy(&x, (const char *)t->data + k * 4, 4); v = x; }
                if (v < 0 || v > INT32_MAX) { s = lmc_fail(LMC_ERR_FORMAT, "%s[%lld] = %lld", t->name, (long long)k, (long long)v); break; }
                order[k] = (int32_t)v;
            }
            data = order;
            type = LMC_GGML_I32;
        } else if (t->dtype != LMC_DTYPE_F32 && t->dtype != LMC_DTYPE_F16 && t->dtype != LMC_DTYPE_BF16) {
            s = lmc_fail(LMC_ERR_UNSUPPORTED, "tensor %s has dtype %s (F32, F16, BF16 expected)", t->name,
                         lmc_dtype_name(t->dtype));
        } else {
            s = lmc_ggml_type_from_dtype(t->dtype, &type);
        }
        if (s >= 0) s = lmc_gguf_writer_add_tensor(w, gg, type, t->n_dims, ne, data);
    }
    if (s >= 0) s = lmc_gguf_writer_write(w, out_path);
    lmc_gguf_writer_free(w);
    lmc_st_close(st);
    cJSON_Delete(cfg);
    free(order);
    free(text);
    return s;
}

/* ---------------------------------------------------------------- reader */

struct lmc_gguf_assistant {
    lmc_gguf *g;
    char *config;
    lmc_gguf_asst_tensor *t;
    char *names;        /* [n · 256] HF names */
    int n;
};

static int is_arch(const lmc_gguf *g) {
    const char *a = NULL;
    if (lmc_gguf_find_key(g, "general.architecture") < 0) return 0;
    if (lmc_gguf_get_str(g, "general.architecture", &a, NULL) < 0) return 0;
    return a && !strcmp(a, ARCH);
}

int lmc_gguf_is_assistant(const char *path) {
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    if (!f) return 0;
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got != 4 || memcmp(magic, "GGUF", 4) != 0) return 0;
    lmc_gguf *g;
    if (lmc_gguf_open(path, &g) < 0) return 0;
    int r = is_arch(g);
    lmc_gguf_close(g);
    return r;
}

void lmc_gguf_assistant_close(lmc_gguf_assistant *a) {
    if (!a) return;
    lmc_gguf_close(a->g);
    free(a->config);
    free(a->t);
    free(a->names);
    free(a);
}

lmc_status lmc_gguf_assistant_open(const char *path, lmc_gguf_assistant **out) {
    *out = NULL;
    lmc_gguf_assistant *a = calloc(1, sizeof *a);
    if (!a) return lmc_fail(LMC_ERR_NOMEM, "gguf assistant");
    lmc_status s = lmc_gguf_open(path, &a->g);
    const char *cfg = NULL;
    size_t len = 0;
    if (s >= 0 && !is_arch(a->g))
        s = lmc_fail(LMC_ERR_FORMAT, "%s is not a %s GGUF file", path, ARCH);
    if (s >= 0) s = lmc_gguf_get_str(a->g, "lmc.hf_config", &cfg, &len);
    if (s >= 0) {
        a->config = malloc(len + 1);
        if (!a->config) s = lmc_fail(LMC_ERR_NOMEM, "config");
        else { memcpy(a->config, cfg, len); a->config[len] = 0; }
    }
    int64_t n = s >= 0 ? lmc_gguf_n_tensors(a->g) : 0;
    if (s >= 0 && (n <= 0 || n > 1000000)) s = lmc_fail(LMC_ERR_FORMAT, "%s holds %lld tensors", path, (long long)n);
    if (s >= 0) {
        a->t = calloc((size_t)n, sizeof *a->t);
        a->names = calloc((size_t)n, 256);
        if (!a->t || !a->names) s = lmc_fail(LMC_ERR_NOMEM, "gguf assistant tensors");
    }
    for (int64_t i = 0; s >= 0 && i < n; i++) {
        const lmc_gguf_tensor *gt = lmc_gguf_tensor_at(a->g, i);
        lmc_gguf_asst_tensor *t = &a->t[i];
        char *hf = a->names + i * 256;
        if (!map_name(gt->name, 0, hf, 256)) { s = lmc_fail(LMC_ERR_NOT_FOUND, "%s: tensor %s has no HF name", path, gt->name); break; }
        if (gt->n_dims < 1 || gt->n_dims > 4) { s = lmc_fail(LMC_ERR_FORMAT, "%s: tensor %s has rank %d", path, gt->name, gt->n_dims); break; }
        s = lmc_ggml_type_to_dtype(gt->type, &t->dtype);
        t->hf_name = hf;
        t->gguf_name = gt->name;
        t->n_dims = gt->n_dims;
        for (int d = 0; d < gt->n_dims; d++) t->shape[d] = gt->ne[gt->n_dims - 1 - d];
        t->data = gt->data;
        t->nbytes = gt->nbytes;
    }
    if (s < 0) { lmc_gguf_assistant_close(a); return s; }
    a->n = (int)n;
    *out = a;
    return LMC_OK;
}

const char *lmc_gguf_assistant_config(const lmc_gguf_assistant *a) { return a->config; }
int lmc_gguf_assistant_count(const lmc_gguf_assistant *a) { return a->n; }
const lmc_gguf_asst_tensor *lmc_gguf_assistant_at(const lmc_gguf_assistant *a, int i) {
    return i >= 0 && i < a->n ? &a->t[i] : NULL;
}

/* ---------------------------------------------------------------- verify */

typedef struct report { char *buf; size_t cap, at; int n_failed; } report;

static void line(report *r, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void line(report *r, int ok, const char *fmt, ...) {
    if (!ok) r->n_failed++;
    if (!r->buf || r->at + 1 >= r->cap) return;
    int n = snprintf(r->buf + r->at, r->cap - r->at, "%s: ", ok ? "ok" : "FAIL");
    if (n > 0) r->at += (size_t)n < r->cap - r->at ? (size_t)n : r->cap - r->at - 1;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(r->buf + r->at, r->cap - r->at, fmt, ap);
    va_end(ap);
    if (n > 0) r->at += (size_t)n < r->cap - r->at ? (size_t)n : r->cap - r->at - 1;
    if (r->at + 1 < r->cap) { r->buf[r->at++] = '\n'; r->buf[r->at] = 0; }
}

static int64_t meta_int(const lmc_gguf *g, const char *key) {
    int64_t v;
    if (lmc_gguf_find_key(g, key) < 0 || lmc_gguf_get_int(g, key, &v) < 0) return -1;
    return v;
}

/* A 2-D tensor with ne [ne0, ne1]? */
static int shape2(const lmc_gguf_tensor *t, int64_t ne0, int64_t ne1) {
    return t && t->n_dims == 2 && t->ne[0] == ne0 && t->ne[1] == ne1;
}

lmc_status lmc_gguf_assistant_verify(const char *path, int64_t target_hidden, char *buf, size_t cap, int *n_failed) {
    report r = {buf, cap, 0, 0};
    if (buf && cap) buf[0] = 0;
    lmc_gguf *g;
    LMC_TRY(lmc_gguf_open(path, &g));
    const char *arch = NULL;
    if (lmc_gguf_find_key(g, "general.architecture") >= 0) lmc_gguf_get_str(g, "general.architecture", &arch, NULL);
    line(&r, arch && !strcmp(arch, ARCH), "general.architecture is \"%s\" (expected %s)", arch ? arch : "(none)", ARCH);
    const int64_t H = meta_int(g, ARCH ".embedding_length"), B = meta_int(g, ARCH ".backbone_embedding_length");
    const int64_t V = meta_int(g, ARCH ".vocab_size"), nc = meta_int(g, ARCH ".num_centroids");
    const int64_t ctk = meta_int(g, ARCH ".centroid_top_k");
    int ordered = 0;
    if (lmc_gguf_find_key(g, ARCH ".use_ordered_embeddings") >= 0) lmc_gguf_get_bool(g, ARCH ".use_ordered_embeddings", &ordered);
    line(&r, H > 0 && B > 0 && V > 0, "embedding_length %lld, backbone_embedding_length %lld, vocab_size %lld",
         (long long)H, (long long)B, (long long)V);
    if (target_hidden > 0)
        line(&r, B == target_hidden, "backbone_embedding_length %lld %s the target's embedding length %lld", (long long)B,
             B == target_hidden ? "matches" : "does not match", (long long)target_hidden);
    const lmc_gguf_tensor *te = lmc_gguf_find_tensor(g, "token_embd.weight");
    line(&r, shape2(te, H, V), "token_embd.weight is [%lld, %lld] (embedding_length, vocab)", (long long)H, (long long)V);
    line(&r, shape2(lmc_gguf_find_tensor(g, "mtp.pre_projection.weight"), 2 * B, H),
         "mtp.pre_projection.weight is [%lld, %lld] (2 · backbone, embedding_length)", (long long)(2 * B), (long long)H);
    line(&r, shape2(lmc_gguf_find_tensor(g, "mtp.post_projection.weight"), H, B),
         "mtp.post_projection.weight is [%lld, %lld] (embedding_length, backbone)", (long long)H, (long long)B);
    line(&r, lmc_gguf_find_tensor(g, "output_norm.weight") != NULL, "output_norm.weight present");
    const lmc_gguf_tensor *tc = lmc_gguf_find_tensor(g, "mtp.centroids.weight");
    const lmc_gguf_tensor *to = lmc_gguf_find_tensor(g, "mtp.token_ordering.weight");
    if (!ordered) {
        line(&r, !tc && !to, "dense LM head (use_ordered_embeddings false): no centroid tensors");
    } else {
        line(&r, nc > 0 && ctk > 0 && ctk <= nc, "num_centroids %lld, centroid_top_k %lld", (long long)nc, (long long)ctk);
        line(&r, shape2(tc, H, nc), "mtp.centroids.weight is [%lld, %lld] (embedding_length, num_centroids)",
             (long long)H, (long long)nc);
        int ok_o = to && to->type == LMC_GGML_I32 && to->n_dims == 1 && to->ne[0] == V;
        line(&r, ok_o, "mtp.token_ordering.weight is I32 [%lld]%s", (long long)V,
             to ? (to->type == LMC_GGML_I32 ? "" : " (stored as another type)") : " (missing)");
        line(&r, nc > 0 && V % nc == 0, "vocab_size %lld is divisible by num_centroids %lld", (long long)V, (long long)nc);
        if (ok_o) {
            uint8_t *seen = calloc((size_t)V, 1);
            int perm = seen != NULL;
            for (int64_t i = 0; perm && i < V; i++) {
                int32_t v;
                memcpy(&v, (const char *)to->data + i * 4, 4);
                perm = v >= 0 && v < V && !seen[v];
                if (perm) seen[v] = 1;
            }
            free(seen);
            line(&r, perm, "mtp.token_ordering.weight is a permutation of the vocabulary");
        }
    }
    lmc_gguf_close(g);
    *n_failed = r.n_failed;
    return LMC_OK;
}
