/* test_gemma4.c — the gemma4_text targeted port beyond parity (test_parity holds gemma4_e,
 * gemma4_a4b and gemma4_mm to F1): the profile, the layer plan read from the config (KV-sharing
 * sources, per-layer head dims, double-wide MLP), the proportional rope, and refusals of
 * malformed or unsupported checkpoints (config knobs, missing and unconsumed tensors), and the
 * forward's kept-logits contract (lmc_gemma4_forward_keep: rows left on the backend in fs->logits
 * equal the copied ones; hidden states too; more rows than one LM-head chunk are copied). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#include "gen/context.h"
#include "io/jsonfile.h"
#include "io/safetensors.h"
#include "model/gemma4.h"

#define FX_E "tests/fixtures/gemma4_e"
#define FX_A "tests/fixtures/gemma4_a4b"

static void profile_and_plan(void) {
    lmc_backend *be;
    lmc_model *m = NULL;
    CHECK(lmc_backend_cpu_init(&be, 1, 0) == 0);
    CHECK(lmc_model_load(FX_E, be, &m) == 0);
    if (m) {
        CHECK_EQ_INT(m->profile.tier, LMC_TIER_TARGETED);
        CHECK_EQ_STR(m->profile.id, "targeted-gemma4:gemma4_text");
        const lmc_gemma4 *g = m->g4;
        CHECK(g != NULL);
        /* layers [s, s, f, s, s, f], the last two KV-shared: 4 reads 3, 5 reads 2 */
        int src[6] = {0, 1, 2, 3, 3, 2}, hd[6] = {16, 16, 32, 16, 16, 32}, inter[6] = {128, 128, 128, 128, 256, 256};
        for (int il = 0; g && il < 6; il++) {
            CHECK_EQ_INT(g->layers[il].kv_src, src[il]);
            CHECK_EQ_INT(g->layers[il].hd, hd[il]);
            CHECK_EQ_INT(g->layers[il].inter, inter[il]);
            CHECK_EQ_INT(m->layers[il].window, g->layers[il].sliding ? 8 : 0);
        }
        if (g) {
            CHECK_EQ_INT(g->last_kv[0], 2);
            CHECK_EQ_INT(g->last_kv[1], 3);
            CHECK_EQ_INT(g->P, 16);
            CHECK(g->layers[4].wk.data == NULL && g->layers[4].k_norm.data == NULL);
        }
        /* the KV rows fit the widest layer */
        CHECK_EQ_INT(m->cfg.head_dim * m->cfg.n_kv_heads, 64);
    }
    lmc_model_free(m);
    m = NULL;
    CHECK(lmc_model_load(FX_A, be, &m) == 0);
    if (m && m->g4) {
        const lmc_gemma4 *g = m->g4;
        CHECK(g->moe && g->E == 4 && g->k == 2 && g->Ie == 32);
        CHECK(g->layers[2].k_eq_v && g->layers[2].n_kv == 1 && g->layers[2].wv.data == NULL);
        CHECK(!g->layers[0].k_eq_v && g->layers[0].wv.data != NULL);
        CHECK(m->n_params_active < m->n_params);
    }
    lmc_model_free(m);
    lmc_backend_free(be);
}

static void proportional_rope(void) {
    lmc_rope_config rc = {.type = LMC_ROPE_PROPORTIONAL, .theta = 1e6, .partial_rotary_factor = 0.25};
    float inv[64];
    CHECK(lmc_g4_rope_freqs(&rc, 32, inv) == 0);
    for (int i = 0; i < 16; i++) {
        /* 0.25 · 32 / 2 = 4 rotated pairs; exponents divide by the full head dim; the rest are identity */
        double want = i < 4 ? 1.0 / pow(1e6, 2.0 * i / 32.0) : 0.0;
        CHECK_NEAR(inv[i], want, 1e-6 * (want + 1e-30));
    }
    rc.factor = 8;
    CHECK(lmc_g4_rope_freqs(&rc, 32, inv) == 0);
    CHECK_NEAR(inv[1], 1.0 / pow(1e6, 2.0 / 32.0) / 8, 1e-7);
    lmc_rope_config def = {.type = LMC_ROPE_DEFAULT, .theta = 1e4, .partial_rotary_factor = 1};
    CHECK(lmc_g4_rope_freqs(&def, 16, inv) == 0);
    CHECK_NEAR(inv[7], 1.0 / pow(1e4, 14.0 / 16.0), 1e-7);
    lmc_rope_config yarn = {.type = LMC_ROPE_YARN, .theta = 1e4, .partial_rotary_factor = 1};
    CHECK(lmc_g4_rope_freqs(&yarn, 16, inv) != 0 && strstr(lmc_last_error(), "yarn"));
}

/* A copy of a fixture with config.json edited by `edit` (key = JSON value) and the tensors of the
 * original except `drop`, plus `extra` (a tensor name) when given. Returns the directory. */
static const char *variant(const char *src, const char *key, const char *json, const char *drop, const char *extra) {
    static char dir[256];
    snprintf(dir, sizeof dir, "/tmp/lmc-g4-%d", (int)getpid());
    mkdir(dir, 0755);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", src);
    cJSON *cfg = NULL;
    if (lmc_json_read_file(p, 1 << 20, &cfg) < 0) return NULL;
    if (key) {
        cJSON *v = cJSON_Parse(json);
        cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
        cJSON *target = tc ? tc : cfg;
        if (!strcmp(key, "model_type")) target = cfg;
        if (cJSON_GetObjectItemCaseSensitive(target, key)) cJSON_ReplaceItemInObjectCaseSensitive(target, key, v);
        else cJSON_AddItemToObject(target, key, v);
    }
    char *text = cJSON_Print(cfg);
    cJSON_Delete(cfg);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    lmc_st_set *st;
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    if (lmc_st_open(p, &st) < 0) return NULL;
    int n = lmc_st_count(st), k = 0;
    lmc_st_write_tensor *t = calloc((size_t)n + 1, sizeof *t);
    static float one[64];
    for (int i = 0; i < n; i++) {
        const lmc_st_tensor *s = lmc_st_at(st, i);
        if (drop && !strcmp(s->name, drop)) continue;
        t[k].name = s->name;
        t[k].dtype = s->dtype;
        t[k].n_dims = s->n_dims;
        memcpy(t[k].shape, s->shape, sizeof s->shape);
        t[k].data = s->data;
        k++;
    }
    if (extra) {
        t[k].name = extra;
        t[k].dtype = LMC_DTYPE_F32;
        t[k].n_dims = 1;
        t[k].shape[0] = 64;
        t[k].data = one;
        k++;
    }
    lmc_st_sort_for_alignment(t, k);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    lmc_status s = lmc_st_write(p, t, k, NULL, 0);
    free(t);
    lmc_st_close(st);
    return s == 0 ? dir : NULL;
}

static void cleanup(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    remove(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    remove(p);
    rmdir(dir);
}

/* Loading the variant fails with a message holding `want`. */
static void refused(const char *src, const char *key, const char *json, const char *drop, const char *extra,
                    const char *want) {
    lmc_backend *be;
    lmc_model *m = NULL;
    CHECK(lmc_backend_cpu_init(&be, 1, 0) == 0);
    const char *dir = variant(src, key, json, drop, extra);
    CHECK(dir != NULL);
    if (dir) {
        lmc_status st = lmc_model_load(dir, be, &m);
        CHECK_MSG(st != 0 && m == NULL && strstr(lmc_last_error(), want), "%s=%s drop %s extra %s: %s (wanted \"%s\")",
                  key ? key : "-", json ? json : "-", drop ? drop : "-", extra ? extra : "-",
                  st ? lmc_last_error() : "loaded", want);
        cleanup(dir);
    }
    lmc_model_free(m);
    lmc_backend_free(be);
}

static void refusals(void) {
    refused(FX_E, "per_layer_config", "{\"2\": {\"head_dim\": 33}, \"5\": {\"head_dim\": 32}}", NULL, NULL, "head_dim 33");
    refused(FX_E, "per_layer_config", "{\"2\": 7}", NULL, NULL, "per_layer_config.2 must be an object");
    refused(FX_E, "per_layer_config", "{\"2\": {\"head_dim\": 32, \"num_key_value_heads\": 3}}", NULL, NULL, "3 KV heads");
    refused(FX_E, "num_kv_shared_layers", "6", NULL, NULL, "num_kv_shared_layers 6");
    refused(FX_E, "num_kv_shared_layers", "5", NULL, NULL, "KV-shared layer 2 has no earlier full layer");
    refused(FX_E, "use_bidirectional_attention", "\"all\"", NULL, NULL, "use_bidirectional_attention");
    refused(FX_E, "attention_bias", "true", NULL, NULL, "attention_bias");
    refused(FX_E, "hidden_activation", "\"swiglu_oai\"", NULL, NULL, "activation");
    refused(FX_A, "top_k_experts", "9", NULL, NULL, "experts");
    refused("tests/fixtures/gemma4_mm", "model_type", "\"paligemma\"", NULL, NULL, "wrapping \"gemma4_text\"");
    refused(FX_E, NULL, NULL, "model.layers.0.self_attn.k_proj.weight", NULL, "model.layers.0.self_attn.k_proj.weight");
    refused(FX_E, NULL, NULL, "model.layers.3.layer_scalar", NULL, "missing: model.layers.3.layer_scalar");
    refused(FX_E, NULL, NULL, NULL, "model.layers.3.self_attn.v_norm.weight", "not used by the gemma4 forward");
    refused(FX_A, NULL, NULL, "model.layers.1.router.per_expert_scale", NULL, "per_expert_scale");
    refused(FX_A, NULL, NULL, NULL, "model.layers.2.self_attn.v_proj.weight", "v_proj");
}

/* k/v weights stored for a KV-shared layer are dropped by a rule (transformers ignores them). */
static void shared_kv_weights_dropped(void) {
    lmc_backend *be;
    lmc_model *m = NULL;
    CHECK(lmc_backend_cpu_init(&be, 1, 0) == 0);
    const char *dir = variant(FX_E, NULL, NULL, NULL, "model.layers.4.self_attn.k_norm.weight");
    CHECK(dir != NULL);
    if (dir) {
        lmc_status st = lmc_model_load(dir, be, &m);
        CHECK_MSG(st == 0, "%s", lmc_last_error());
        if (m) {
            CHECK_EQ_INT(m->n_audit_dropped, 1);
            CHECK(lmc_model_drop_rule(m, "model.layers.4.self_attn.k_norm.weight") == NULL); /* the generic rule */
        }
        cleanup(dir);
    }
    lmc_model_free(m);
    lmc_backend_free(be);
}

/* Bad input at run time is an error, not a crash. */
static void bad_batches(void) {
    lmc_backend *be;
    lmc_model *m = NULL;
    lmc_context *ctx = NULL;
    CHECK(lmc_backend_cpu_init(&be, 1, 0) == 0);
    CHECK(lmc_model_load(FX_E, be, &m) == 0);
    if (m) CHECK(lmc_context_init(&ctx, m, NULL) == 0);
    if (ctx) {
        int32_t tok[2] = {5, 256}, pos[2] = {0, 1}, seq[2] = {0, 0};
        lmc_batch b = {2, tok, pos, seq, NULL};
        CHECK(lmc_context_decode(ctx, &b) != 0 && strstr(lmc_last_error(), "outside the vocabulary"));
        tok[1] = 6;
        CHECK(lmc_context_decode(ctx, &b) == 0);
    }
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
}

/* lmc_gemma4_forward_keep: the same step with keep gives the eager step's logits in fs->logits. */
static void kept_logits(void) {
    lmc_backend *be;
    lmc_model *m = NULL;
    lmc_context *ctx = NULL;
    const char *bn = getenv("LMC_TEST_BACKEND");
    lmc_backend_params bp = {.name = bn && *bn ? bn : "cpu", .n_threads = 1};
    CHECK(lmc_backend_init(&be, &bp) == 0);
    CHECK(lmc_model_load(FX_E, be, &m) == 0);
    lmc_context_params cp = lmc_context_default_params();
    enum { NT = LMC_LOGITS_CHUNK + 4 }; /* enough for one batch over a chunk (below) */
    cp.n_ctx = NT;
    cp.n_batch = NT;
    if (m) CHECK(lmc_context_init(&ctx, m, &cp) == 0);
    if (ctx) {
        const int V = m->cfg.vocab_size, D = m->cfg.hidden_size;
        int32_t tok[NT], pos[NT], seq[NT] = {0};
        uint8_t want[NT];
        for (int i = 0; i < NT; i++) { tok[i] = 3 + 11 * i % 200; pos[i] = i; want[i] = 1; }
        lmc_batch pre = {8, tok, pos, seq, NULL};
        CHECK(lmc_context_decode(ctx, &pre) == 0);
        float *a = malloc((size_t)NT * V * 4), *b = malloc((size_t)NT * V * 4);
        float *ha = malloc((size_t)NT * D * 4), *hb = malloc((size_t)NT * D * 4);
        /* 1, 3 and 12 rows after the prompt (each step rewrites the same positions with the same values),
         * twice each: on a recording backend the second is recorded */
        const int shapes[3] = {1, 3, 12};
        for (int rep = 0; rep < 6; rep++) {
            const int n = shapes[rep % 3];
            lmc_batch st = {n, tok + 8, pos + 8, seq, want};
            int got = 0, kept = -1;
            CHECK(lmc_gemma4_forward(&ctx->fs, ctx->kv.k, ctx->kv.v, &st, a, ha, &got) == 0 && got == n);
            memset(b, 0, (size_t)n * V * 4);
            CHECK(lmc_gemma4_forward_keep(&ctx->fs, ctx->kv.k, ctx->kv.v, &st, b, hb, &got, 1, &kept) == 0 && got == n);
            CHECK_EQ_INT(kept, 1);
            for (int r = 0; r < n * V; r++) CHECK(b[r] == 0.0f); /* not written */
            be->i->get(be, b, &ctx->fs.logits, 0, (size_t)n * V * 4);
            CHECK_MSG(!memcmp(a, b, (size_t)n * V * 4), "%d rows: kept logits differ from the copied ones", n);
            CHECK_MSG(!memcmp(ha, hb, (size_t)n * D * 4), "%d rows: hidden states differ", n);
        }
        /* more rows than one LM-head chunk: copied as usual */
        lmc_batch big = {LMC_LOGITS_CHUNK + 2, tok + 2, pos + 2, seq, want};
        int got = 0, kept = -1;
        CHECK(lmc_gemma4_forward(&ctx->fs, ctx->kv.k, ctx->kv.v, &big, a, NULL, &got) == 0);
        CHECK(lmc_gemma4_forward_keep(&ctx->fs, ctx->kv.k, ctx->kv.v, &big, b, NULL, &got, 1, &kept) == 0);
        CHECK_EQ_INT(kept, 0);
        CHECK(got == LMC_LOGITS_CHUNK + 2 && !memcmp(a, b, (size_t)got * V * 4));
        free(a); free(b); free(ha); free(hb);
    }
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
}

int main(void) {
    RUN(profile_and_plan);
    RUN(proportional_rope);
    RUN(refusals);
    RUN(shared_kv_weights_dropped);
    RUN(bad_batches);
    RUN(kept_logits);
    return TEST_END();
}
