/* test_gguf_convert.c — HF checkpoint → GGUF (lmc_gguf_convert_hf) → HF again.
 *
 * Every fixture of the GGUF architectures (the MoE ones with their experts stacked) is converted the way
 * llama.cpp's converter lays it out, then read back through
 * lmc_gguf_arch_config (fed to lmc's own config normalizer, compared field by
 * field with the original config.json) and lmc_gguf_hf_view (every tensor
 * compared byte for byte with the safetensors). The llama q/k layout and the
 * gemma +1 are checked directly against llama.cpp's definitions, and configs
 * the converter cannot represent are refused by name.
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "io/gguf.h"
#include "io/gguf_arch.h"
#include "io/gguf_convert.h"
#include "io/gguf_view.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "test.h"

static char tmpdir[128];

static void path_in_tmp(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

/* Meta's llama3 scaling rule, per frequency: keep high frequencies, divide low ones by factor, blend between. */
static double l3_divisor(double base, int dim, int i, double factor, double lff, double hff, double old) {
    double inv = pow(base, -2.0 * i / dim), wl = 2 * M_PI / inv;
    if (wl < old / hff) return 1.0;
    if (wl > old / lff) return factor;
    double s = (old / wl - lff) / (hff - lff);
    return 1.0 / ((1.0 - s) / factor + s);
}

static const char *fixtures_root(void) { return getenv("LMC_FIXTURES") ? getenv("LMC_FIXTURES") : "tests/fixtures"; }

/* ---- fixtures through GGUF -------------------------------------------------------------------- */

/* The normalized configs of the checkpoint and of its GGUF agree on every fact the forward uses. */
static void compare_configs(const char *fx, const lmc_config *o, const lmc_config *s) {
#define SAME_INT(f) CHECK_MSG(o->f == s->f, "%s: " #f " %lld vs %lld", fx, (long long)o->f, (long long)s->f)
#define SAME_DBL(f, tol) CHECK_MSG(fabs(o->f - s->f) <= (tol) * fabs(o->f) + 1e-300, "%s: " #f " %.9g vs %.9g", fx, (double)o->f, (double)s->f)
    /* mistral is converted as llama (lmc aliases it the same way) */
    CHECK_MSG(strcmp(s->model_type, o->model_type) == 0 || (strcmp(o->model_type, "mistral") == 0 && strcmp(s->model_type, "llama") == 0),
              "%s: model_type %s vs %s", fx, s->model_type, o->model_type);
    CHECK_MSG(strcmp(s->hidden_act, o->hidden_act) == 0, "%s: hidden_act %s vs %s", fx, s->hidden_act, o->hidden_act);
    SAME_INT(vocab_size); SAME_INT(hidden_size); SAME_INT(intermediate_size); SAME_INT(n_layers);
    SAME_INT(n_heads); SAME_INT(n_kv_heads); SAME_INT(head_dim); SAME_INT(max_position_embeddings);
    SAME_INT(tie_word_embeddings); SAME_INT(sliding_window); SAME_INT(bos_token_id); SAME_INT(pad_token_id);
    SAME_INT(n_eos);
    for (int i = 0; i < o->n_eos && i < s->n_eos; i++) SAME_INT(eos_token_ids[i]);
    SAME_DBL(norm_eps, 1e-6);
    SAME_DBL(attn_scale, 1e-6);
    SAME_DBL(attn_softcap, 1e-6);
    SAME_DBL(final_softcap, 1e-6);
    SAME_INT(n_experts); SAME_INT(n_experts_used); SAME_INT(moe_intermediate_size); SAME_INT(shared_intermediate_size);
    CHECK_MSG((o->norm_topk_prob > 0) == (s->norm_topk_prob > 0), "%s: norm_topk_prob %d vs %d", fx, o->norm_topk_prob, s->norm_topk_prob);
    for (int l = 0; l < o->n_layers && l < LMC_MAX_LAYERS; l++) SAME_INT(layer_dense[l]);
    if (strcmp(o->model_type, "llama") == 0) { SAME_INT(attention_bias); SAME_INT(mlp_bias); }
    if (o->has_layer_types && s->has_layer_types)
        for (int l = 0; l < o->n_layers; l++) SAME_INT(layer_sliding[l]);
    SAME_INT(rope.type);
    SAME_DBL(rope.theta, 1e-6);
    SAME_DBL(rope.partial_rotary_factor, 1e-9);
    SAME_DBL(rope_local.theta, 1e-6);
    SAME_INT(rope_local.type);
    if (o->rope.type == LMC_ROPE_LLAMA3) {
        /* the GGUF keeps the divisor table, so compare the tables the two parameter sets give */
        int dim = (int)(o->head_dim * o->rope.partial_rotary_factor);
        for (int i = 0; i < dim / 2; i++) {
            double a = l3_divisor(o->rope.theta, dim, i, o->rope.factor, o->rope.low_freq_factor, o->rope.high_freq_factor,
                                  o->rope.original_max_position_embeddings);
            double b = l3_divisor(s->rope.theta, dim, i, s->rope.factor, s->rope.low_freq_factor, s->rope.high_freq_factor,
                                  s->rope.original_max_position_embeddings);
            CHECK_MSG(fabs(a - b) <= 2e-5 * a, "%s: llama3 divisor %d: %g vs %g", fx, i, a, b);
        }
    } else if (o->rope.type != LMC_ROPE_DEFAULT) {
        SAME_DBL(rope.factor, 1e-6);
        SAME_INT(rope.original_max_position_embeddings);
        SAME_DBL(rope.beta_fast, 1e-6);
        SAME_DBL(rope.beta_slow, 1e-6);
        SAME_INT(rope.n_long_factor);
        SAME_INT(rope.n_short_factor);
        for (int i = 0; i < o->rope.n_long_factor && i < s->rope.n_long_factor; i++) SAME_DBL(rope.long_factor[i], 1e-6);
        for (int i = 0; i < o->rope.n_short_factor && i < s->rope.n_short_factor; i++) SAME_DBL(rope.short_factor[i], 1e-6);
    }
#undef SAME_INT
#undef SAME_DBL
}

/* Every checkpoint tensor comes back through the HF view: same name, shape, type and bytes
 * (gemma norms: same values within f32 rounding of w + 1 - 1; gpt_oss: 1-D tensors as F32 with the
 * same values, the experts in llama.cpp's split form, compared element by element in test_gguf_moe). */
static void compare_tensors(const char *fx, const lmc_st_set *set, const lmc_gguf_hf_view *v, int tied, int gptoss) {
    int64_t n_expected = 0, v_experts = 0;
    if (gptoss) /* the view's experts (per-expert matrices, stacked biases) are not the checkpoint's */
        for (int64_t i = 0; i < lmc_gguf_hf_view_count(v); i++) v_experts += strstr(lmc_gguf_hf_view_at(v, i)->name, ".mlp.experts.") != NULL;
    for (int i = 0; i < lmc_st_count(set); i++) {
        const lmc_st_tensor *t = lmc_st_at(set, i);
        if (tied && strcmp(t->name, "lm_head.weight") == 0) continue;
        if (gptoss && strstr(t->name, ".mlp.experts.")) continue;
        n_expected++;
        const lmc_gguf_hf_tensor *h = lmc_gguf_hf_view_find(v, t->name);
        CHECK_MSG(h != NULL, "%s: %s missing from the GGUF view", fx, t->name);
        if (!h) continue;
        CHECK_EQ_INT(h->n_dims, t->n_dims);
        for (int d = 0; d < t->n_dims; d++) CHECK_EQ_INT(h->shape[d], t->shape[d]);
        if (h->transform == LMC_GGUF_HF_NORM_MINUS_ONE || (gptoss && t->n_dims == 1)) {
            if (gptoss) CHECK_MSG(h->type == LMC_GGML_F32, "%s: %s is not F32", fx, t->name);
            int64_t n = lmc_st_nelem(t);
            float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
            void *tmp = malloc(t->nbytes);
            memcpy(tmp, t->data, t->nbytes);
            lmc_to_f32(t->dtype, tmp, a, (size_t)n);
            memcpy(b, h->data, (size_t)n * sizeof *b);
            for (int64_t k = 0; k < n; k++) CHECK_MSG(fabs(a[k] - b[k]) <= 1e-6 * (1 + fabs(a[k])), "%s: %s[%lld] %g vs %g", fx, t->name, (long long)k, a[k], b[k]);
            free(a); free(b); free(tmp);
        } else {
            uint32_t type;
            CHECK(lmc_ggml_type_from_dtype(t->dtype, &type) == LMC_OK && type == h->type);
            CHECK_MSG(h->nbytes == t->nbytes && memcmp(h->data, t->data, t->nbytes) == 0, "%s: %s bytes differ", fx, t->name);
        }
    }
    CHECK_MSG(lmc_gguf_hf_view_count(v) - v_experts == n_expected, "%s: view has %lld tensors, checkpoint %lld", fx,
              (long long)(lmc_gguf_hf_view_count(v) - v_experts), (long long)n_expected);
}

/* Convert every fixture of the seven architectures to GGUF and back; refuse the others by name. */
static void test_fixtures_roundtrip(void) {
    const char *root = fixtures_root();
    static const char *const must[] = {"llama", "llama_bf16", "llama_bias", "llama_rope_llama3", "llama_rope_parameters",
                                       "llama_tied_linear", "llama_yarn", "mistral", "qwen2", "qwen2_untied", "qwen3",
                                       "gemma", "gemma2", "gemma3_text", "phi3", "phi3_longrope", "qwen2_moe", "qwen3_moe",
                                       "mixtral", "gpt_oss"};
    int found[sizeof must / sizeof must[0]] = {0};
    DIR *d = opendir(root);
    CHECK_MSG(d != NULL, "cannot open %s (run from the repository root or set LMC_FIXTURES)", root);
    if (!d) return;
    struct dirent *e;
    int n_conv = 0, n_refused = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char dir[600], cfgpath[700], out[300];
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
        if (access(cfgpath, R_OK) != 0) continue;
        path_in_tmp(out, sizeof out, "fixture.gguf");
        lmc_status st = lmc_gguf_convert_hf(dir, out, NULL);
        int idx = -1;
        for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) if (strcmp(must[i], e->d_name) == 0) idx = (int)i;
        if (st == LMC_ERR_UNSUPPORTED && idx < 0) {
            n_refused++;
            CHECK(strlen(lmc_last_error()) > 10);
            continue;
        }
        CHECK_MSG(st == LMC_OK, "%s: convert: %s", e->d_name, lmc_last_error());
        if (st < 0) continue;
        if (idx >= 0) found[idx] = 1;
        n_conv++;
        lmc_gguf *g = NULL;
        lmc_gguf_hf_view *v = NULL;
        cJSON *syn = NULL, *orig = NULL;
        lmc_st_set *set = NULL;
        lmc_config co, cs;
        int co_ok = 0, cs_ok = 0;
        st = lmc_gguf_open(out, &g);
        CHECK_MSG(st == LMC_OK, "%s: %s", e->d_name, lmc_last_error());
        if (st == LMC_OK) st = lmc_gguf_arch_config(g, &syn);
        CHECK_MSG(st == LMC_OK, "%s: config: %s", e->d_name, lmc_last_error());
        if (st == LMC_OK) {
            cs_ok = lmc_config_from_json(syn, NULL, &cs) == LMC_OK; /* takes ownership of syn */
            CHECK_MSG(cs_ok, "%s: synthetic config: %s", e->d_name, lmc_last_error());
            FILE *f = fopen(cfgpath, "rb");
            char *text = NULL;
            size_t n = 0;
            if (f) {
                text = calloc(1, 1 << 20);
                n = fread(text, 1, (1 << 20) - 1, f);
                fclose(f);
            }
            orig = text ? cJSON_ParseWithLength(text, n) : NULL;
            free(text);
            co_ok = orig && lmc_config_from_json(orig, NULL, &co) == LMC_OK;
            CHECK_MSG(co_ok, "%s: original config: %s", e->d_name, lmc_last_error());
            if (co_ok && cs_ok) compare_configs(e->d_name, &co, &cs);
            st = lmc_gguf_hf_view_open(g, &v);
            CHECK_MSG(st == LMC_OK, "%s: view: %s", e->d_name, lmc_last_error());
            if (st == LMC_OK && lmc_st_open(dir, &set) == LMC_OK) compare_tensors(e->d_name, set, v, co_ok ? co.tie_word_embeddings : 0,
                                                                            co_ok && strcmp(co.model_type, "gpt_oss") == 0);
        }
        if (co_ok) lmc_config_free(&co);
        if (cs_ok) lmc_config_free(&cs);
        lmc_st_close(set);
        lmc_gguf_hf_view_close(v);
        lmc_gguf_close(g);
    }
    closedir(d);
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) CHECK_MSG(found[i], "fixture %s was not converted", must[i]);
    fprintf(stderr, "  fixtures: %d converted and read back, %d refused (other architectures)\n", n_conv, n_refused);
}

/* The converter's llama q/k layout is llama.cpp's: GGUF row 2j + i of a head is HF row i·D/2 + j. */
static void test_convert_permutes_llama(void) {
    const char *root = fixtures_root();
    char dir[600], out[300];
    snprintf(dir, sizeof dir, "%s/llama_bias", root);
    path_in_tmp(out, sizeof out, "llama_bias.gguf");
    CHECK_MSG(lmc_gguf_convert_hf(dir, out, &(lmc_gguf_convert_params){.alignment = 64}) == LMC_OK, "%s", lmc_last_error());
    lmc_gguf *g = NULL;
    lmc_st_set *set = NULL;
    CHECK(lmc_gguf_open(out, &g) == LMC_OK && lmc_st_open(dir, &set) == LMC_OK);
    if (g && set) {
        CHECK_EQ_INT(lmc_gguf_alignment(g), 64);
        const lmc_gguf_tensor *q = lmc_gguf_find_tensor(g, "blk.1.attn_q.bias"), *k = lmc_gguf_find_tensor(g, "blk.0.attn_k.weight");
        const lmc_st_tensor *hq = lmc_st_find(set, "model.layers.1.self_attn.q_proj.bias");
        const lmc_st_tensor *hk = lmc_st_find(set, "model.layers.0.self_attn.k_proj.weight");
        CHECK(q && k && hq && hk);
        if (q && k && hq && hk) {
            const int D = 16;
            for (int r = 0; r < (int)q->ne[0]; r++) { /* bias rows are single floats */
                int h = r / D, i = (r % D) % 2, j = (r % D) / 2;
                CHECK(memcmp((const float *)q->data + r, (const float *)hq->data + h * D + i * D / 2 + j, 4) == 0);
            }
            size_t row = (size_t)k->ne[0] * 4;
            for (int r = 0; r < (int)k->ne[1]; r++) {
                int h = r / D, i = (r % D) % 2, j = (r % D) / 2;
                CHECK(memcmp((const uint8_t *)k->data + r * row, (const uint8_t *)hk->data + (h * D + i * D / 2 + j) * row, row) == 0);
            }
            /* and a non-permuted tensor is stored as is */
            const lmc_gguf_tensor *v = lmc_gguf_find_tensor(g, "blk.0.attn_v.weight");
            const lmc_st_tensor *hv = lmc_st_find(set, "model.layers.0.self_attn.v_proj.weight");
            CHECK(v && hv && v->nbytes == hv->nbytes && memcmp(v->data, hv->data, v->nbytes) == 0);
        }
    }
    lmc_st_close(set);
    lmc_gguf_close(g);
    /* gemma norms are stored + 1 */
    snprintf(dir, sizeof dir, "%s/gemma", root);
    path_in_tmp(out, sizeof out, "gemma.gguf");
    CHECK_MSG(lmc_gguf_convert_hf(dir, out, NULL) == LMC_OK, "%s", lmc_last_error());
    g = NULL;
    set = NULL;
    CHECK(lmc_gguf_open(out, &g) == LMC_OK && lmc_st_open(dir, &set) == LMC_OK);
    if (g && set) {
        const lmc_gguf_tensor *n = lmc_gguf_find_tensor(g, "output_norm.weight");
        const lmc_st_tensor *hn = lmc_st_find(set, "model.norm.weight");
        CHECK(n && hn && n->type == LMC_GGML_F32 && lmc_gguf_find_tensor(g, "output.weight") == NULL);
        if (n && hn && hn->dtype == LMC_DTYPE_F32) {
            for (int64_t i = 0; i < n->ne[0]; i++) {
                float a, b;
                memcpy(&a, (const float *)n->data + i, 4);
                memcpy(&b, (const uint8_t *)hn->data + 4 * i, 4);
                CHECK(a == b + 1.0f);
            }
        }
    }
    lmc_st_close(set);
    lmc_gguf_close(g);
}

/* Configs the converter cannot carry are refused, naming what. */
static void test_convert_refusals(void) {
    char dir[600], out[300];
    path_in_tmp(out, sizeof out, "refused.gguf");
    snprintf(dir, sizeof dir, "%s/llama_yarn_mscale", fixtures_root());
    if (access(dir, R_OK) == 0) {
        CHECK(lmc_gguf_convert_hf(dir, out, NULL) == LMC_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(lmc_last_error(), "mscale") != NULL, "%s", lmc_last_error());
    }
    snprintf(dir, sizeof dir, "%s/starcoder2", fixtures_root());
    if (access(dir, R_OK) == 0) {
        CHECK(lmc_gguf_convert_hf(dir, out, NULL) == LMC_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(lmc_last_error(), "starcoder2") != NULL, "%s", lmc_last_error());
    }
    CHECK(lmc_gguf_convert_hf("/nonexistent-lmc-model", out, NULL) == LMC_ERR_NOT_FOUND);
    /* hand-made configs in a scratch directory */
    static const struct { const char *json; lmc_status st; const char *msg; } cases[] = {
        {"{\"model_type\": \"llama\", \"text_config\": {}}", LMC_ERR_UNSUPPORTED, "text_config"},
        {"{\"hidden_size\": 64}", LMC_ERR_FORMAT, "model_type"},
        {"{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
         "\"intermediate_size\": 8, \"rms_norm_eps\": 1e-6, \"use_sliding_window\": true}", LMC_ERR_UNSUPPORTED, "use_sliding_window"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
         "\"intermediate_size\": 8, \"rms_norm_eps\": 1e-6, \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2}}",
         LMC_ERR_UNSUPPORTED, "dynamic"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, \"intermediate_size\": 8, "
         "\"rms_norm_eps\": 1e-6}", LMC_ERR_FORMAT, "num_hidden_layers"},
    };
    char cdir[300], cpath[400];
    path_in_tmp(cdir, sizeof cdir, "cfgcase");
    mkdir(cdir, 0700);
    snprintf(cpath, sizeof cpath, "%s/config.json", cdir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(cpath, "wb");
        CHECK(f != NULL);
        if (!f) continue;
        fputs(cases[i].json, f);
        fclose(f);
        lmc_status st = lmc_gguf_convert_hf(cdir, out, NULL);
        CHECK_MSG(st == cases[i].st, "case %zu: status %d: %s", i, st, lmc_last_error());
        CHECK_MSG(strstr(lmc_last_error(), cases[i].msg) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, lmc_last_error(), cases[i].msg);
    }
    CHECK(access(out, F_OK) != 0); /* nothing was written by a refused conversion */
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lmc_test_gguf_convert_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_fixtures_roundtrip);
    RUN(test_convert_permutes_llama);
    RUN(test_convert_refusals);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_END();
}
