/* test_arch.c — the dense-zoo building blocks behind the descriptor rows of
 * gpt_neox, gpt2, gpt_bigcode, gptj, falcon, stablelm, nemotron, ministral3, apertus and
 * dynamic NTK rope (model/arch.c, model.c, forward.c, rope.c).
 *
 * test_parity holds every fixture to F1 through one prefill and token-by-token
 * decode. Dynamic NTK rope cannot be held that way (a prompt row of the
 * reference depends on the whole prompt's length, and each greedy row is a
 * full forward without cache), so here its fixture runs as transformers
 * produced it: one forward over the prompt, and one full forward per greedy
 * row; the cached path is checked for transformers' dynamic_rope_update state
 * (growth, no shrink, reset). The rest checks the
 * load-time rewrites (Conv1D transpose, per-head qkv regrouping, per-head norm
 * gathering, 1 + w) against the checkpoint bytes, the xIELU op against a double
 * formula, the dynamic frequencies against transformers' float32 recipe, and
 * the refusals (falcon alibi, gpt2 knobs, gptj without rotary_dim).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "gen/context.h"
#include "io/jsonfile.h"
#include "model/rope.h"

#define F1_REL 1e-4

typedef struct ref {
    int32_t prompt[256], greedy[64];
    int n_prompt, n_greedy, vocab;
    double *pl, *gl;
} ref;

static double *read_f64(const char *dir, const char *name, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    double *d = malloc(n * sizeof *d);
    size_t got = d ? fread(d, sizeof *d, n, f) : 0;
    fclose(f);
    if (got != n) { free(d); return NULL; }
    return d;
}

static int ids(const cJSON *r, const char *key, int32_t *out, int cap) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(r, key), *it;
    int n = 0;
    cJSON_ArrayForEach(it, a) if (n < cap) out[n++] = (int32_t)it->valuedouble;
    return n;
}

static int load_ref(const char *dir, ref *r) {
    char path[600];
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "%s/ref.json", dir);
    cJSON *j;
    if (lmc_json_read_file(path, 1 << 20, &j) < 0) return -1;
    r->n_prompt = ids(j, "prompt_ids", r->prompt, 256);
    r->n_greedy = ids(j, "greedy_ids", r->greedy, 64);
    int64_t v = 0;
    lmc_json_get_int(j, "vocab_size", &v);
    r->vocab = (int)v;
    cJSON_Delete(j);
    if (r->n_prompt <= 0 || r->n_greedy <= 0 || r->vocab <= 0) return -1;
    r->pl = read_f64(dir, "prompt_logits.bin", (size_t)r->n_prompt * r->vocab);
    r->gl = read_f64(dir, "greedy_logits.bin", (size_t)r->n_greedy * r->vocab);
    return r->pl && r->gl ? 0 : -1;
}

static double max_abs(const double *d, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(d[i]));
    return m;
}

static double row_err(const float *got, const double *want, int V) {
    double e = 0;
    for (int i = 0; i < V; i++) e = fmax(e, fabs((double)got[i] - want[i]));
    return e;
}

/* llama_dynamic: dynamic NTK (factor 2) past max_position_embeddings 16, prompt 24. */
static void test_dynamic_fixture(void) {
    const char *dir = "tests/fixtures/llama_dynamic";
    ref r;
    if (load_ref(dir, &r) < 0) { CHECK_MSG(0, "%s: unreadable fixture", dir); return; }
    lmc_backend *be;
    lmc_model *m = NULL;
    lmc_context *ctx = NULL;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    CHECK_MSG(lmc_model_load(dir, be, &m) == 0, "%s", lmc_last_error());
    if (!m) goto out;
    CHECK(m->rope[0].dynamic && m->cfg.max_position_embeddings < r.n_prompt);
    const int V = r.vocab, np = r.n_prompt, ng = r.n_greedy;
    const double tol = F1_REL * fmax(max_abs(r.pl, (size_t)np * V), max_abs(r.gl, (size_t)ng * V));
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = np + ng + 1;
    CHECK(lmc_context_init(&ctx, m, &cp) == 0);
    if (!ctx) goto out;
    int32_t pos[128], seq[128] = {0};
    uint8_t want[128];
    for (int i = 0; i < 128; i++) { pos[i] = i; want[i] = 1; }

    /* one forward over the prompt: every row as transformers' forward over 24 positions */
    lmc_batch b = {np, r.prompt, pos, seq, want};
    CHECK(lmc_context_decode(ctx, &b) == 0);
    double e = 0;
    for (int i = 0; i < np; i++) e = fmax(e, row_err(lmc_context_logits(ctx, i), r.pl + (size_t)i * V, V));
    CHECK_MSG(e <= tol, "prompt rows off by %.3g (tol %.3g)", e, tol);
    /* each greedy reference row is transformers' forward over prompt + greedy[:s] (no cache): a
     * prefill of that sequence from position 0 (a fresh sequence: the table starts unscaled) */
    int32_t seqbuf[128];
    memcpy(seqbuf, r.prompt, (size_t)np * sizeof *seqbuf);
    memcpy(seqbuf + np, r.greedy, (size_t)ng * sizeof *seqbuf);
    e = 0;
    for (int s = 0; s < ng; s++) {
        lmc_kv_clear(&ctx->kv, 0);
        lmc_batch full = {np + s, seqbuf, pos, seq, NULL}; /* last row only */
        CHECK(lmc_context_decode(ctx, &full) == 0);
        CHECK_EQ_INT(ctx->fs.dyn_len[0], np + s);
        e = fmax(e, row_err(lmc_context_logits(ctx, 0), r.gl + (size_t)s * V, V));
        int arg = 0;
        for (int i = 1; i < V; i++) arg = lmc_context_logits(ctx, 0)[i] > lmc_context_logits(ctx, 0)[arg] ? i : arg;
        CHECK_EQ_INT(arg, r.greedy[s]);
    }
    CHECK_MSG(e <= tol, "greedy rows off by %.3g (tol %.3g)", e, tol);
    fprintf(stderr, "  llama_dynamic: prompt and greedy rows (full forwards) within %.2e (tol %.2e)\n", e, tol);

    /* through the cache the table follows dynamic_rope_update: it grows with the sequence, does
     * not shrink while the length stays past the original context, and resets below it */
    lmc_kv_clear(&ctx->kv, 0);
    CHECK(lmc_context_decode(ctx, &b) == 0);
    CHECK_EQ_INT(ctx->fs.dyn_len[0], np);
    lmc_batch one = {1, &r.greedy[0], &pos[np], seq, NULL};
    CHECK(lmc_context_decode(ctx, &one) == 0);
    CHECK_EQ_INT(ctx->fs.dyn_len[0], np + 1);
    /* cached keys keep their rotation: this step differs from the full forward over np + 1 */
    double e_cached = row_err(lmc_context_logits(ctx, 0), r.gl + V, V);
    CHECK_MSG(e_cached > 10 * tol, "a cached step matches the full forward (%.3g): the fixture does not tell", e_cached);
    lmc_kv_truncate(&ctx->kv, 0, 20);
    lmc_batch back = {1, &r.prompt[20], &pos[20], seq, NULL};
    CHECK(lmc_context_decode(ctx, &back) == 0);
    CHECK_EQ_INT(ctx->fs.dyn_len[0], np + 1); /* L = 21 < 25: kept */
    lmc_kv_truncate(&ctx->kv, 0, 10);
    lmc_batch low = {1, &r.prompt[10], &pos[10], seq, NULL};
    CHECK(lmc_context_decode(ctx, &low) == 0);
    CHECK_EQ_INT(ctx->fs.dyn_len[0], 16); /* L = 11 < 16: reset */
out:
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
    free(r.pl);
    free(r.gl);
}

/* transformers' _compute_dynamic_ntk_parameters in float32, transcribed independently. */
static void test_dynamic_frequencies(void) {
    lmc_rope_config rc;
    memset(&rc, 0, sizeof rc);
    rc.type = LMC_ROPE_DYNAMIC;
    rc.theta = 10000.0;
    rc.partial_rotary_factor = 1.0;
    rc.factor = 2.0;
    lmc_rope_table t;
    CHECK(lmc_rope_build(&rc, 16, 16, &t) == LMC_OK);
    CHECK(t.dynamic && t.n_rot == 16);
    float f[8];
    for (int L = 1; L <= 40; L++) {
        lmc_rope_dynamic(&t, L, f);
        double Lx = L > 16 ? L : 16;
        double base = 10000.0 * pow(2.0 * Lx / 16.0 - 1.0, 16.0 / 14.0);
        for (int i = 0; i < 8; i++) {
            double want = 1.0 / pow(base, 2.0 * i / 16.0);
            CHECK_MSG(fabs(f[i] - want) <= 4e-7 * want, "L %d i %d: %.9g vs %.9g", L, i, f[i], want);
            if (L <= 16) CHECK(f[i] == t.inv_freq[i]); /* within the original context: the plain table */
        }
    }
    CHECK_EQ_INT(lmc_rope_dynamic_len(&t, 3), 16);
    CHECK_EQ_INT(lmc_rope_dynamic_len(&t, 30), 30);
    rc.factor = 0.5;
    CHECK(lmc_rope_build(&rc, 16, 16, &t) < 0);
}

/* y = x > 0 ? ap x² + b x : (expm1(min(x, eps)) − x) an + b x */
static void test_xielu_op(void) {
    lmc_backend *be;
    CHECK(lmc_backend_cpu_init(&be, 1, 1) == 0);
    CHECK(be->i->xielu != NULL);
    float xs[64];
    for (int i = 0; i < 64; i++) xs[i] = -8.0f + 0.25f * (float)i + (i == 32 ? 0.0f : 0.01f);
    xs[5] = -1e-7f; /* between eps and 0: min(x, eps) = eps */
    const float p[4] = {0.9f, 1.3f, 0.5f, -1e-6f};
    lmc_tensor x = lmc_tensor_make(LMC_DTYPE_F32, 16, 4, 1, 1), y = x;
    x.data = xs;
    float ys[64];
    y.data = ys;
    be->i->xielu(be, &y, &x, p);
    for (int i = 0; i < 64; i++) {
        double v = xs[i];
        double want = v > 0 ? p[0] * v * v + p[2] * v : (expm1(fmin(v, (double)p[3])) - v) * p[1] + p[2] * v;
        CHECK_MSG(fabs(ys[i] - want) <= 1e-6 * fmax(1.0, fabs(want)), "x %g: %.9g vs %.9g", v, ys[i], want);
    }
    be->i->xielu(be, &x, &x, p); /* in place */
    CHECK(memcmp(xs, ys, sizeof ys) == 0);
    lmc_backend_free(be);
}

/* Load a fixture and hand back the model (NULL on failure, with a failed check). */
static lmc_model *load(const char *name, lmc_backend *be) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", name);
    lmc_model *m = NULL;
    lmc_status st = lmc_model_load(dir, be, &m);
    CHECK_MSG(st == 0, "%s: %s", name, lmc_last_error());
    return st == 0 ? m : NULL;
}

/* Element (row r, col c) of a checkpoint tensor [rows, cols] as f32. */
static float ck(const lmc_model *m, const char *name, int64_t r, int64_t c) {
    const lmc_weight *t = lmc_weights_find(m->weights, name);
    if (!t || t->dtype != LMC_DTYPE_F32) return NAN;
    int64_t cols = t->n_dims == 2 ? t->shape[1] : 1;
    return ((const float *)t->data)[r * cols + c];
}

/* Element (out o, in i) of a bound weight [in, out]. */
static float wt(const lmc_tensor *w, int64_t o, int64_t i) { return ((const float *)w->data)[o * w->ne[0] + i]; }

static void test_load_rewrites(void) {
    lmc_backend *be;
    CHECK(lmc_backend_cpu_init(&be, 1, 1) == 0);
    /* gpt2: Conv1D c_attn [in 64, out 192] → q|k|v views [in, out] with w[o][i] = stored[i][o] */
    lmc_model *m = load("gpt2", be);
    if (m) {
        const lmc_layer *L = &m->layers[1];
        int bad = 0;
        for (int o = 0; o < 64; o++)
            for (int i = 0; i < 64; i++) {
                bad += wt(&L->wq, o, i) != ck(m, "transformer.h.1.attn.c_attn.weight", i, o);
                bad += wt(&L->wv, o, i) != ck(m, "transformer.h.1.attn.c_attn.weight", i, 128 + o);
                bad += wt(&L->wo, o, i) != ck(m, "transformer.h.1.attn.c_proj.weight", i, o);
            }
        for (int o = 0; o < 64; o++)
            for (int i = 0; i < 128; i++) bad += wt(&L->w_down, o, i) != ck(m, "transformer.h.1.mlp.c_proj.weight", i, o);
        CHECK_EQ_INT(bad, 0);
        CHECK(m->pos_embd.data && m->pos_embd.ne[1] == 64 && m->cfg.tie_word_embeddings);
        CHECK(m->layers[0].rope == -1 && m->layers[1].rope == -1);
        lmc_model_free(m);
    }
    /* gpt_neox: rows per head [q_h | k_h | v_h] (16 each) regrouped; biases too */
    m = load("gpt_neox", be);
    if (m) {
        const lmc_layer *L = &m->layers[0];
        int bad = 0;
        for (int h = 0; h < 4; h++)
            for (int d = 0; d < 16; d++) {
                int64_t o = h * 16 + d;
                for (int i = 0; i < 64; i += 7) {
                    bad += wt(&L->wq, o, i) != ck(m, "gpt_neox.layers.0.attention.query_key_value.weight", h * 48 + d, i);
                    bad += wt(&L->wk, o, i) != ck(m, "gpt_neox.layers.0.attention.query_key_value.weight", h * 48 + 16 + d, i);
                    bad += wt(&L->wv, o, i) != ck(m, "gpt_neox.layers.0.attention.query_key_value.weight", h * 48 + 32 + d, i);
                }
                bad += ((const float *)L->bk.data)[o] != ck(m, "gpt_neox.layers.0.attention.query_key_value.bias", h * 48 + 16 + d, 0);
            }
        CHECK_EQ_INT(bad, 0);
        CHECK(m->profile.block == LMC_BLOCK_PARALLEL2 && m->layers[0].ffn_norm.data);
        lmc_model_free(m);
    }
    /* falcon (new arch, 2 KV groups of 2 q heads): [q q k v] per group */
    m = load("falcon_new", be);
    if (m) {
        const lmc_layer *L = &m->layers[1];
        const char *qkv = "transformer.h.1.self_attention.query_key_value.weight";
        int bad = 0;
        for (int g = 0; g < 2; g++)
            for (int d = 0; d < 16; d++)
                for (int i = 0; i < 64; i += 5) {
                    for (int j = 0; j < 2; j++) bad += wt(&L->wq, (g * 2 + j) * 16 + d, i) != ck(m, qkv, g * 64 + j * 16 + d, i);
                    bad += wt(&L->wk, g * 16 + d, i) != ck(m, qkv, g * 64 + 32 + d, i);
                    bad += wt(&L->wv, g * 16 + d, i) != ck(m, qkv, g * 64 + 48 + d, i);
                }
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(m->cfg.n_kv_heads, 2);
        CHECK(m->profile.block == LMC_BLOCK_PARALLEL2);
        lmc_model_free(m);
    }
    /* falcon 7B style: multi-query, one KV head, q|k|v concatenated */
    m = load("falcon", be);
    if (m) {
        CHECK_EQ_INT(m->cfg.n_kv_heads, 1);
        CHECK(m->profile.block == LMC_BLOCK_PARALLEL && !m->layers[0].ffn_norm.data);
        CHECK(wt(&m->layers[0].wk, 3, 9) == ck(m, "transformer.h.0.self_attention.query_key_value.weight", 64 + 3, 9));
        lmc_model_free(m);
    }
    /* stablelm: per-head norms gathered into [hd, H] */
    m = load("stablelm", be);
    if (m) {
        int bad = 0;
        char n[128];
        for (int h = 0; h < 4; h++) {
            snprintf(n, sizeof n, "model.layers.1.self_attn.q_layernorm.norms.%d.weight", h);
            for (int d = 0; d < 16; d++) bad += ((const float *)m->layers[1].q_norm.data)[h * 16 + d] != ck(m, n, d, 0);
        }
        CHECK_EQ_INT(bad, 0);
        CHECK(m->layers[1].q_norm.ne[0] == 16 && m->layers[1].q_norm.ne[1] == 4 && m->layers[1].k_norm.ne[1] == 2);
        lmc_model_free(m);
    }
    /* nemotron: LayerNorm1P weights are 1 + w */
    m = load("nemotron", be);
    if (m) {
        int bad = 0;
        for (int d = 0; d < 64; d++)
            bad += ((const float *)m->layers[0].attn_norm.data)[d] != 1.0f + ck(m, "model.layers.0.input_layernorm.weight", d, 0);
        CHECK_EQ_INT(bad, 0);
        lmc_model_free(m);
    }
    /* apertus: xIELU parameters softplus'd at load */
    m = load("apertus", be);
    if (m) {
        double ap = ck(m, "model.layers.1.mlp.act_fn.alpha_p", 0, 0), an = ck(m, "model.layers.1.mlp.act_fn.alpha_n", 0, 0);
        double beta = ck(m, "model.layers.1.mlp.act_fn.beta", 0, 0);
        CHECK(m->act_xielu);
        CHECK_NEAR(m->layers[1].xielu[0], log1p(exp(ap)), 1e-6);
        CHECK_NEAR(m->layers[1].xielu[1], beta + log1p(exp(an)), 1e-6);
        CHECK_NEAR(m->layers[1].xielu[2], beta, 0);
        lmc_model_free(m);
    }
    lmc_backend_free(be);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = len > 0 ? malloc((size_t)len) : NULL;
    *n = d && fread(d, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    if (!*n) { free(d); return NULL; }
    return d;
}

/* The gpt2 fixture as older checkpoints (openai-community/gpt2) store it: no "transformer."
 * prefix, causal-mask buffers h.<i>.attn.bias / masked_bias, and no tie_word_embeddings key
 * (gpt2's default is tied). Same weights, so the reference logits still hold. */
static int write_legacy_gpt2(const char *dir) {
    size_t n;
    unsigned char *st = slurp("tests/fixtures/gpt2/model.safetensors", &n);
    if (!st || n < 8) { free(st); return -1; }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | st[i];
    char *hj = strndup((const char *)st + 8, (size_t)hl);
    cJSON *h = cJSON_Parse(hj), *out = cJSON_CreateObject(), *it;
    free(hj);
    size_t data_len = n - 8 - (size_t)hl;
    cJSON_ArrayForEach(it, h) {
        const char *k = it->string;
        if (!strncmp(k, "transformer.", 12)) k += 12;
        cJSON_AddItemToObject(out, k, cJSON_Duplicate(it, 1));
    }
    for (int l = 0; l < 2; l++) { /* two tiny mask buffers appended after the data */
        char k[64], spec[160];
        snprintf(k, sizeof k, l ? "h.1.attn.masked_bias" : "h.0.attn.bias");
        snprintf(spec, sizeof spec, "{\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [%zu, %zu]}", data_len + 4 * l,
                 data_len + 4 * l + 4);
        cJSON_AddItemToObject(out, k, cJSON_Parse(spec));
    }
    char *nh = cJSON_PrintUnformatted(out), path[300];
    cJSON_Delete(h);
    cJSON_Delete(out);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    int ok = f != NULL;
    if (f) {
        uint64_t len = strlen(nh);
        unsigned char le[8];
        for (int i = 0; i < 8; i++) le[i] = (unsigned char)(len >> (8 * i));
        const float zeros[2] = {0, 0};
        ok = fwrite(le, 1, 8, f) == 8 && fwrite(nh, 1, len, f) == len &&
             fwrite(st + 8 + hl, 1, data_len, f) == data_len && fwrite(zeros, 4, 2, f) == 2;
        ok = fclose(f) == 0 && ok;
    }
    free(nh);
    free(st);
    /* config.json without tie_word_embeddings */
    unsigned char *cj = slurp("tests/fixtures/gpt2/config.json", &n);
    cJSON *c = cj ? cJSON_ParseWithLength((const char *)cj, n) : NULL;
    free(cj);
    if (!c) return -1;
    cJSON_DeleteItemFromObject(c, "tie_word_embeddings");
    char *cs = cJSON_Print(c);
    cJSON_Delete(c);
    snprintf(path, sizeof path, "%s/config.json", dir);
    f = fopen(path, "wb");
    ok = ok && f && fputs(cs, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    free(cs);
    return ok ? 0 : -1;
}

static void test_gpt2_legacy_layout(void) {
    char dir[] = "/tmp/lmc_gpt2_legacy_XXXXXX", path[300];
    CHECK(mkdtemp(dir) != NULL);
    CHECK(write_legacy_gpt2(dir) == 0);
    ref r;
    CHECK(load_ref("tests/fixtures/gpt2", &r) == 0);
    lmc_backend *be;
    lmc_model *m = NULL;
    lmc_context *ctx = NULL;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    lmc_status st = lmc_model_load(dir, be, &m);
    CHECK_MSG(st == 0, "%s", lmc_last_error());
    if (st == 0) {
        CHECK_EQ_STR(m->prefix, "");
        CHECK_EQ_INT(m->n_audit_dropped, 2);
        CHECK(m->cfg.tie_word_embeddings == 1);
        lmc_context_params cp = lmc_context_default_params();
        cp.n_ctx = r.n_prompt;
        CHECK(lmc_context_init(&ctx, m, &cp) == 0);
        int32_t pos[256], seq[256] = {0};
        uint8_t want[256];
        for (int i = 0; i < r.n_prompt; i++) { pos[i] = i; want[i] = 1; }
        lmc_batch b = {r.n_prompt, r.prompt, pos, seq, want};
        CHECK(ctx && lmc_context_decode(ctx, &b) == 0);
        double e = 0, tol = F1_REL * max_abs(r.pl, (size_t)r.n_prompt * r.vocab);
        for (int i = 0; ctx && i < r.n_prompt; i++)
            e = fmax(e, row_err(lmc_context_logits(ctx, i), r.pl + (size_t)i * r.vocab, r.vocab));
        CHECK_MSG(e <= tol, "legacy gpt2 layout: logits off by %.3g", e);
    }
    if (st == 0) {
        /* learned positions end at n_positions (64): a sequence running past them is an error */
        lmc_context_free(ctx);
        ctx = NULL;
        lmc_context_params cp = lmc_context_default_params();
        cp.n_ctx = 80;
        CHECK(lmc_context_init(&ctx, m, &cp) == 0);
        int32_t tok[65], pos[65], seq[65] = {0};
        for (int i = 0; i < 65; i++) { tok[i] = 3 + i; pos[i] = i; }
        lmc_batch b64 = {64, tok, pos, seq, NULL}, b65 = {65, tok, pos, seq, NULL};
        CHECK(ctx && lmc_context_decode(ctx, &b64) == 0);
        if (ctx) lmc_kv_clear(&ctx->kv, 0);
        CHECK(ctx && lmc_context_decode(ctx, &b65) < 0);
        CHECK_MSG(strstr(lmc_last_error(), "learned positions") != NULL, "%s", lmc_last_error());
    }
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
    free(r.pl);
    free(r.gl);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    remove(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    remove(path);
    remove(dir);
}

/* Configs a row does not implement are refused by name before any weight is read. */
static void test_refusals(void) {
    static const struct { const char *json, *needle; } cases[] = {
        {"{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
         " \"vocab_size\": 32, \"alibi\": true}", "alibi"},
        {"{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
         " \"vocab_size\": 32, \"new_decoder_architecture\": true, \"parallel_attn\": false}", "parallel_attn"},
        {"{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
         " \"vocab_size\": 32, \"parallel_attn\": false}", "parallel_attn"},
        {"{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
         " \"vocab_size\": 32, \"new_decoder_architecture\": true, \"num_ln_in_parallel_attn\": 1}", "num_ln_in_parallel_attn"},
        {"{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 4, \"vocab_size\": 32,"
         " \"scale_attn_by_inverse_layer_idx\": true}", "scale_attn_by_inverse_layer_idx"},
        {"{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 4, \"vocab_size\": 32,"
         " \"scale_attn_weights\": false}", "scale_attn_weights"},
        {"{\"model_type\": \"gpt_bigcode\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 4, \"vocab_size\": 32,"
         " \"scale_attn_weights\": false}", "gpt_bigcode with scale_attn_weights"},
        {"{\"model_type\": \"gptj\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 4, \"vocab_size\": 32}", "rotary_dim"},
        {"{\"model_type\": \"ministral3\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
         " \"vocab_size\": 32, \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, \"rope_theta\": 1e6,"
         " \"original_max_position_embeddings\": 16}}", "llama_4_scaling_beta"},
        {"{\"model_type\": \"mistral\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
         " \"vocab_size\": 32, \"sliding_window\": 8, \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"dynamic\","
         " \"factor\": 2, \"rope_theta\": 1e4}, \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1e4}}}",
         "dynamic"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
         " \"vocab_size\": 32, \"hidden_act\": \"xielu\"}", "xielu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *raw = cJSON_Parse(cases[i].json);
        lmc_config cfg;
        lmc_profile p;
        lmc_status st = lmc_config_from_json(raw, NULL, &cfg);
        if (st >= 0) st = lmc_profile_resolve(&cfg, &p);
        CHECK_MSG(st < 0 && strstr(lmc_last_error(), cases[i].needle), "case %zu: status %d, \"%s\"", i, st,
                  lmc_last_error());
        lmc_config_free(&cfg);
    }
    /* the spellings the rows read: gpt2's n_* keys, falcon's num_kv_heads and layouts, gpt-neox's rotary_pct */
    const char *ok[] = {
        "{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 3, \"n_head\": 4, \"n_positions\": 32, \"n_inner\": null,"
        " \"vocab_size\": 32}",
        "{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
        " \"vocab_size\": 32, \"multi_query\": false}",
        "{\"model_type\": \"gpt_neox\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
        " \"vocab_size\": 32, \"rotary_pct\": 0.25, \"rotary_emb_base\": 500, \"use_parallel_residual\": false}",
        "{\"model_type\": \"gpt_bigcode\", \"n_embd\": 64, \"n_layer\": 2, \"n_head\": 4, \"vocab_size\": 32}",
        "{\"model_type\": \"gpt_bigcode\", \"n_embd\": 64, \"n_layer\": 2, \"n_head\": 4, \"vocab_size\": 32,"
        " \"multi_query\": false}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        lmc_config cfg;
        lmc_profile p;
        lmc_status st = lmc_config_from_json(cJSON_Parse(ok[i]), NULL, &cfg);
        if (st >= 0) st = lmc_profile_resolve(&cfg, &p);
        CHECK_MSG(st == 0, "ok case %zu: %s", i, lmc_last_error());
        if (st < 0) { lmc_config_free(&cfg); continue; }
        if (i == 0) {
            CHECK(cfg.hidden_size == 64 && cfg.n_layers == 3 && cfg.n_heads == 4 && cfg.max_position_embeddings == 32);
            CHECK(cfg.intermediate_size == 256 && cfg.tie_word_embeddings == 1);
            CHECK_EQ_STR(cfg.hidden_act, "gelu_new");
        }
        if (i == 1) { /* falcon-rw layout: no multi-query, per-head [q k v], sequential? no: parallel_attn default */
            CHECK(cfg.n_kv_heads == 4 && p.qkv_layout == LMC_QKV_GROUPED && p.block == LMC_BLOCK_PARALLEL);
            CHECK(cfg.tie_word_embeddings == 1 && cfg.use_bias == 0 && cfg.intermediate_size == 256);
        }
        if (i == 2) {
            CHECK(p.block == LMC_BLOCK_PRE && cfg.rope.partial_rotary_factor == 0.25 && cfg.rope.theta == 500);
            CHECK_EQ_STR(cfg.hidden_act, "gelu");
        }
        if (i == 3) { /* gpt_bigcode: multi_query by default, one K/V head after the q heads */
            CHECK(cfg.n_kv_heads == 1 && p.qkv_layout == LMC_QKV_CONCAT && p.block == LMC_BLOCK_PRE);
            CHECK(cfg.intermediate_size == 256 && cfg.tie_word_embeddings == 1);
            CHECK_EQ_STR(cfg.hidden_act, "gelu_pytorch_tanh");
        }
        if (i == 4) /* multi_query false: per-head [q k v] rows */
            CHECK(cfg.n_kv_heads == 4 && p.qkv_layout == LMC_QKV_GROUPED);
        lmc_config_free(&cfg);
    }
}

int main(void) {
    RUN(test_dynamic_frequencies);
    RUN(test_dynamic_fixture);
    RUN(test_xielu_op);
    RUN(test_load_rewrites);
    RUN(test_refusals);
    RUN(test_gpt2_legacy_layout);
    return TEST_END();
}
