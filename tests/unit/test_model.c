/* test_model.c — the dense forward on random checkpoints written by tiny_model.h:
 * prefill vs token-by-token decode, batched sequences vs alone, fast vs
 * reference CPU kernels, the weight audit, profile refusals, and the sampler. */
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc_status.h"
#include "test.h"
#include "tiny_model.h"

#include "gen/context.h"
#include "gen/generate.h"
#include "gen/plan.h"
#include "gen/sampler.h"
#include "io/file.h"
#include "model/forward.h"

static char tmp_root[256];

static const char *make_dir(const char *name, const tiny_opts *o) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    mkdir(dir, 0700);
    if (tiny_model_write(dir, o) != 0) return NULL;
    return dir;
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* All-position logits of `ids` (n ≤ n_ctx) in one prefill through a context of n_ctx positions
 * (fresh sequence 0); *mlp_chunk (when given): the forward state's MLP pass length. */
static float *prefill_logits_ctx(lmc_model *m, const int32_t *ids, int n, int n_batch, int n_ctx, int *mlp_chunk) {
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    lmc_context *ctx;
    if (lmc_context_init(&ctx, m, &cp) < 0) return NULL;
    if (mlp_chunk) *mlp_chunk = ctx->fs.mlp_chunk;
    int32_t *pos = malloc((size_t)n * sizeof *pos), *seq = malloc((size_t)n * sizeof *seq);
    uint8_t *want = malloc((size_t)n);
    float *out = NULL;
    if (pos && seq && want) {
        for (int i = 0; i < n; i++) { pos[i] = i; seq[i] = 0; want[i] = 1; }
        lmc_batch b = {n, ids, pos, seq, want};
        if (lmc_context_decode(ctx, &b) == 0 && ctx->n_logits == n) {
            size_t sz = (size_t)n * m->cfg.vocab_size;
            out = malloc(sz * sizeof *out);
            if (out) memcpy(out, lmc_context_logits(ctx, 0), sz * sizeof *out);
        }
    }
    free(pos);
    free(seq);
    free(want);
    lmc_context_free(ctx);
    return out;
}

static float *prefill_logits(lmc_model *m, const int32_t *ids, int n, int n_batch) {
    return prefill_logits_ctx(m, ids, n, n_batch, 64, NULL);
}

static void check_model_consistency(const tiny_opts *o, const char *name) {
    const char *dir = make_dir(name, o);
    CHECK(dir != NULL);
    lmc_backend *be, *ref;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    CHECK(lmc_backend_cpu_init(&ref, 1, 1) == 0);
    lmc_model *m = NULL, *mr = NULL;
    lmc_status st = lmc_model_load(dir, be, &m);
    CHECK_MSG(st == 0, "%s", lmc_last_error());
    CHECK(lmc_model_load(dir, ref, &mr) == 0);
    if (!m || !mr) goto out;
    int32_t ids[12] = {1, 5, 9, 33, 7, 90, 12, 45, 3, 77, 60, 8};
    const int n = 12, V = m->cfg.vocab_size;
    float *full = prefill_logits(m, ids, n, 64);
    float *chunked = prefill_logits(m, ids, n, 5);
    float *reference = prefill_logits(mr, ids, n, 64);
    CHECK(full && chunked && reference);
    if (!full || !chunked || !reference) goto out2;
    double scale = max_abs(full, (size_t)n * V);
    CHECK(scale > 0.5);
    double d_chunk = 0, d_ref = 0, d_step = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) {
        d_chunk = fmax(d_chunk, fabs(full[i] - chunked[i]));
        d_ref = fmax(d_ref, fabs(full[i] - reference[i]));
    }
    CHECK_MSG(d_chunk <= 1e-5 * scale, "prefill in chunks differs by %g", d_chunk);
    CHECK_MSG(d_ref <= 1e-4 * scale, "fast vs reference kernels differ by %g", d_ref);
    /* token-by-token decode with the KV cache, two interleaved sequences */
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = 32;
    cp.n_seq = 2;
    lmc_context *ctx;
    CHECK(lmc_context_init(&ctx, m, &cp) == 0);
    for (int i = 0; i < n; i++) {
        int32_t tok[2] = {ids[i], ids[i]}, pos[2] = {i, i}, seq[2] = {0, 1};
        uint8_t want[2] = {1, 1};
        lmc_batch b = {2, tok, pos, seq, want};
        CHECK(lmc_context_decode(ctx, &b) == 0);
        for (int s = 0; s < 2; s++) {
            const float *lg = lmc_context_logits(ctx, s);
            for (int v = 0; v < V; v++) d_step = fmax(d_step, fabs(lg[v] - full[(size_t)i * V + v]));
        }
    }
    CHECK_MSG(d_step <= 1e-5 * scale, "decode vs prefill differs by %g", d_step);
    fprintf(stderr, "  %s: max|logit| %.3g, chunked %.2g, reference %.2g, decode %.2g\n", name, scale, d_chunk, d_ref, d_step);
    /* a skipped position is refused */
    int32_t tok = 3, pos = 20, seq = 0;
    lmc_batch bad = {1, &tok, &pos, &seq, NULL};
    CHECK(lmc_context_decode(ctx, &bad) == LMC_ERR_RANGE);
    /* rollback: truncate and re-decode gives the same logits */
    lmc_kv_truncate(&ctx->kv, 0, 6);
    pos = 6;
    tok = ids[6];
    lmc_batch again = {1, &tok, &pos, &seq, NULL};
    CHECK(lmc_context_decode(ctx, &again) == 0);
    double d_rb = 0;
    for (int v = 0; v < V; v++) d_rb = fmax(d_rb, fabs(lmc_context_logits(ctx, 0)[v] - full[(size_t)6 * V + v]));
    CHECK(d_rb <= 1e-5 * scale);
    lmc_context_free(ctx);
out2:
    free(full);
    free(chunked);
    free(reference);
out:
    lmc_model_free(m);
    lmc_model_free(mr);
    lmc_backend_free(be);
    lmc_backend_free(ref);
}

/* A forward longer than LMC_MLP_CHUNK over float weights runs its MLP in passes (forward.c, mlp):
 * one 600-token forward (passes of 512 and 88 tokens) against forwards of 100 tokens (one pass each). */
static void test_mlp_passes(void) {
    tiny_opts o = tiny_default();
    o.bf16 = 1;
    o.max_pos = 1024;
    const char *dir = make_dir("mlp_passes", &o);
    CHECK(dir != NULL);
    lmc_backend *be;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(dir, be, &m) == 0);
    enum { N = 600 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % 96;
    int chunk_long = 0, chunk_short = 0;
    float *one = m ? prefill_logits_ctx(m, ids, N, 700, 640, &chunk_long) : NULL;
    float *parts = m ? prefill_logits_ctx(m, ids, N, 100, 640, &chunk_short) : NULL;
    CHECK_EQ_INT(chunk_long, LMC_MLP_CHUNK);
    CHECK_EQ_INT(chunk_short, 100);
    CHECK(one && parts);
    if (one && parts) {
        const size_t sz = (size_t)N * m->cfg.vocab_size;
        const double scale = max_abs(one, sz);
        double d = 0;
        for (size_t i = 0; i < sz; i++) d = fmax(d, fabs(one[i] - parts[i]));
        CHECK(scale > 0.5);
        CHECK_MSG(d <= 1e-5 * scale, "one forward with MLP passes vs 100-token forwards: %g", d);
    }
    free(one);
    free(parts);
    lmc_model_free(m);
    lmc_backend_free(be);
}

/* A --no-mmap copy holds each weight once: the pages of the weights the CPU backend rewrites at load
 * (BF16 packed, Q4_0 / Q8_0 regrouped) are given back as they are rewritten, so loading a 44 MB bf16
 * checkpoint in copy mode adds to the anonymous memory what the mapped load does plus the copy's
 * bytes that were not rewritten (the file held twice before, the copy beside the rewritten weights);
 * the two loads compute the same logits. */
static void test_copy_memory(void) {
    tiny_opts o = tiny_default();
    o.bf16 = 1; o.vocab = 2048; o.hidden = 1024; o.layers = 2; o.heads = 8; o.kv_heads = 8; o.head_dim = 128;
    o.inter = 2048;
    const char *dir = make_dir("copy_memory", &o);
    CHECK(dir != NULL);
    if (!dir || proc_status_kb("RssAnon") < 0) return;
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    const long file_kb = (long)(sb.st_size / 1024);
    long delta[2] = {0, 0}, rewritten_kb = 0;
    float *logits[2] = {NULL, NULL};
    const int32_t ids[4] = {5, 17, 1999, 3};
    for (int copy = 0; copy < 2; copy++) {
        lmc_file_set_copy(copy);
        lmc_backend *be;
        CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
        malloc_trim(0); /* the first load's freed memory back to the system, not reused by the second */
        const long before = proc_status_kb("RssAnon");
        lmc_model *m = NULL;
        CHECK(lmc_model_load(dir, be, &m) == 0);
        delta[copy] = proc_status_kb("RssAnon") - before;
        if (m) {
            long r = 0;
            for (int l = 0; l < m->cfg.n_layers; l++) {
                const lmc_tensor *w[] = {&m->layers[l].wq, &m->layers[l].wk, &m->layers[l].wv, &m->layers[l].wo,
                                         &m->layers[l].w_gate, &m->layers[l].w_up, &m->layers[l].w_down};
                for (int i = 0; i < 7; i++)
                    if (w[i]->type == LMC_DTYPE_BF16P) r += (long)(lmc_tensor_nbytes(w[i]) / 1024);
            }
            if (m->lm_head.type == LMC_DTYPE_BF16P) r += (long)(lmc_tensor_nbytes(&m->lm_head) / 1024);
            rewritten_kb = r;
            logits[copy] = prefill_logits_ctx(m, ids, 4, 4, 8, NULL);
        }
        lmc_model_free(m);
        lmc_backend_free(be);
    }
    lmc_file_set_copy(0);
    printf("  bf16 file %ld kB (%ld rewritten at load): anonymous memory of the load %ld kB mapped, %ld kB --no-mmap\n",
           file_kb, rewritten_kb, delta[0], delta[1]);
    CHECK_MSG(delta[1] - delta[0] <= file_kb - rewritten_kb + file_kb / 8,
              "--no-mmap load: %ld kB more than mapped for a %ld kB file of which %ld kB rewritten", delta[1] - delta[0],
              file_kb, rewritten_kb);
    CHECK(logits[0] && logits[1] && !memcmp(logits[0], logits[1], (size_t)4 * 2048 * sizeof(float)));
    free(logits[0]);
    free(logits[1]);
}

static void test_llama(void) { tiny_opts o = tiny_default(); check_model_consistency(&o, "llama"); }
static void test_llama_tied_bf16(void) {
    tiny_opts o = tiny_default();
    o.tied = 1; o.bf16 = 1;
    check_model_consistency(&o, "llama_tied_bf16");
}
static void test_qwen2(void) { tiny_opts o = tiny_default(); o.model_type = "qwen2"; check_model_consistency(&o, "qwen2"); }
static void test_qwen3(void) {
    tiny_opts o = tiny_default();
    o.model_type = "qwen3"; o.head_dim = 12;
    check_model_consistency(&o, "qwen3");
}
static void test_mistral_alias(void) {
    tiny_opts o = tiny_default();
    o.model_type = "mistral"; o.attn_bias = 1;
    check_model_consistency(&o, "mistral");
}

/* A sliding-window model: the rotating cache (window + n_batch - 1 slots) gives
 * the same logits as a full cache, in one prefill, in chunks and token by token. */
static void test_sliding_window_rotating_cache(void) {
    tiny_opts o = tiny_default();
    o.model_type = "mistral";
    o.window = 4;
    const char *dir = make_dir("swa", &o);
    lmc_backend *be;
    lmc_backend_cpu_init(&be, 2, 0);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(dir, be, &m) == 0);
    if (!m) { lmc_backend_free(be); return; }
    CHECK_EQ_INT(m->layers[0].window, 4);
    int32_t ids[20];
    for (int i = 0; i < 20; i++) ids[i] = (i * 37 + 5) % 96;
    const int V = m->cfg.vocab_size;
    float *full = prefill_logits(m, ids, 20, 64);   /* 20 tokens, slots = min(64, 4 + 63) = 64: no rotation */
    float *chunked = prefill_logits(m, ids, 20, 3); /* slots = 4 + 2 = 6: rotates */
    CHECK(full && chunked);
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 1;
    lmc_context *ctx;
    CHECK(lmc_context_init(&ctx, m, &cp) == 0);
    CHECK_EQ_INT(ctx->kv.k[0].ne[1], 4);              /* window + n_batch - 1 */
    CHECK(lmc_kv_bytes(m, 64, 1, 1) < lmc_kv_bytes(m, 64, 1, 64));
    double scale = full ? max_abs(full, (size_t)20 * V) : 1, d_chunk = 0, d_step = 0;
    for (int i = 0; full && chunked && i < 20 * V; i++) d_chunk = fmax(d_chunk, fabs(full[i] - chunked[i]));
    for (int i = 0; full && i < 20; i++) {
        int32_t pos = i, seq = 0;
        lmc_batch b = {1, &ids[i], &pos, &seq, NULL};
        CHECK(lmc_context_decode(ctx, &b) == 0);
        for (int v = 0; v < V; v++) d_step = fmax(d_step, fabs(lmc_context_logits(ctx, 0)[v] - full[(size_t)i * V + v]));
    }
    CHECK_MSG(d_chunk <= 1e-5 * scale, "rotating chunked prefill differs by %g", d_chunk);
    CHECK_MSG(d_step <= 1e-5 * scale, "rotating decode differs by %g", d_step);
    lmc_context_free(ctx);
    /* the window matters: the same weights without a window give other logits */
    o.window = 0;
    const char *dir2 = make_dir("swa_off", &o);
    lmc_model *m2 = NULL;
    CHECK(lmc_model_load(dir2, be, &m2) == 0);
    float *nowin = m2 ? prefill_logits(m2, ids, 20, 64) : NULL;
    double d_win = 0;
    for (int i = 0; full && nowin && i < 20 * V; i++) d_win = fmax(d_win, fabs(full[i] - nowin[i]));
    CHECK_MSG(d_win > 1e-2 * scale, "window changed nothing (%g)", d_win);
    free(nowin);
    lmc_model_free(m2);
    free(full);
    free(chunked);
    lmc_model_free(m);
    lmc_backend_free(be);
}

/* want_hidden returns the final-normed hidden rows; no_logits skips the LM head and
 * still returns the same hidden rows. */
static void test_hidden_only(void) {
    tiny_opts o = tiny_default();
    const char *dir = make_dir("hidden", &o);
    lmc_backend *be;
    lmc_backend_cpu_init(&be, 2, 0);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(dir, be, &m) == 0);
    if (!m) { lmc_backend_free(be); return; }
    int32_t ids[5] = {3, 9, 27, 81, 50}, pos[5] = {0, 1, 2, 3, 4}, seq[5] = {0};
    uint8_t want[5] = {1, 0, 1, 0, 1};
    float h_with[3 * 32], h_without[3 * 32];
    for (int k = 0; k < 2; k++) {
        lmc_context_params cp = lmc_context_default_params();
        cp.n_ctx = 8;
        cp.want_hidden = 1;
        cp.no_logits = k;
        lmc_context *ctx;
        CHECK(lmc_context_init(&ctx, m, &cp) == 0);
        lmc_batch b = {5, ids, pos, seq, want};
        CHECK(lmc_context_decode(ctx, &b) == 0);
        CHECK_EQ_INT(ctx->n_logits, 3);
        for (int r = 0; r < 3; r++) memcpy((k ? h_without : h_with) + r * 32, lmc_context_hidden(ctx, r), 32 * sizeof(float));
        lmc_context_free(ctx);
    }
    CHECK(memcmp(h_with, h_without, sizeof h_with) == 0);
    double norm = 0;
    for (int i = 0; i < 32; i++) norm += (double)h_with[i] * h_with[i];
    CHECK(norm > 0);
    lmc_model_free(m);
    lmc_backend_free(be);
}

typedef struct tok_log { int32_t ids[64]; float first_logits[96]; int n; } tok_log;

static int log_tokens(int32_t tok, const float *logits, int n_vocab, void *ud) {
    tok_log *l = ud;
    if (l->n == 0) memcpy(l->first_logits, logits, (size_t)n_vocab * sizeof(float));
    if (l->n < 64) l->ids[l->n++] = tok;
    return 0;
}

/* A cached prefix (n_reuse) gives the same continuation as prefilling everything;
 * a rotating cache that cannot keep it falls back to a full prefill. */
static void test_prefix_reuse(void) {
    for (int win = 0; win <= 1; win++) {
        tiny_opts o = tiny_default();
        if (win) { o.model_type = "mistral"; o.window = 4; }
        const char *dir = make_dir(win ? "reuse_swa" : "reuse", &o);
        lmc_backend *be;
        lmc_backend_cpu_init(&be, 2, 0);
        lmc_model *m = NULL;
        CHECK(lmc_model_load(dir, be, &m) == 0);
        if (!m) { lmc_backend_free(be); return; }
        lmc_context_params cp = lmc_context_default_params();
        cp.n_ctx = 64;
        cp.n_batch = 4;
        lmc_context *ctx;
        CHECK(lmc_context_init(&ctx, m, &cp) == 0);
        int32_t turn1[10] = {1, 5, 9, 33, 7, 90, 12, 45, 3, 77}, turn2[16];
        memcpy(turn2, turn1, sizeof turn1);
        int32_t extra[6] = {60, 8, 14, 22, 31, 40};
        memcpy(turn2 + 10, extra, sizeof extra);
        lmc_gen_params gp = {.n_predict = 6, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
        tok_log a = {{0}, {0}, 0}, b = {{0}, {0}, 0};
        lmc_gen_stats st;
        CHECK(lmc_generate(ctx, turn1, 10, &gp, NULL, NULL, &st) == 0); /* the cache now holds turn1 + 5 tokens */
        gp.n_reuse = 10;
        CHECK(lmc_generate(ctx, turn2, 16, &gp, log_tokens, &a, &st) == 0);
        /* full cache: the 10 shared tokens are reused; rotating cache: cutting back 5 positions ≥ n_batch is refused */
        CHECK_EQ_INT(st.n_reused, win ? 0 : 10);
        gp.n_reuse = 0;
        CHECK(lmc_generate(ctx, turn2, 16, &gp, log_tokens, &b, &st) == 0);
        CHECK_EQ_INT(st.n_reused, 0);
        CHECK(a.n == 6 && b.n == 6 && memcmp(a.ids, b.ids, sizeof a.ids) == 0);
        double d = 0;
        for (int v = 0; v < 96; v++) d = fmax(d, fabs(a.first_logits[v] - b.first_logits[v]));
        CHECK_MSG(d < 1e-4, "reused prefix changes the logits by %g", d);
        lmc_context_free(ctx);
        lmc_model_free(m);
        lmc_backend_free(be);
    }
}

static void test_memory_plan(void) {
    lmc_config c = {0};
    c.n_layers = 24; c.n_kv_heads = 2; c.n_heads = 14; c.head_dim = 64; c.hidden_size = 896;
    c.intermediate_size = 4864; c.vocab_size = 151936;
    lmc_plan p;
    lmc_plan_compute(&c, 988097792u, 4096, 1, 256, &p);
    CHECK_EQ_INT(p.kv, 2ull * 24 * 128 * 4096 * 4);
    CHECK(p.total == p.weights + p.kv + p.scratch && p.scratch > 0);
    p.available = p.total + 1;
    CHECK(lmc_plan_check(&p) == LMC_OK);
    p.available = p.total / 2;
    CHECK(lmc_plan_check(&p) == LMC_ERR_NOMEM);
    CHECK(strstr(lmc_last_error(), "does not fit") && strstr(lmc_last_error(), "KV cache"));
    p.available = 0; /* unknown: no refusal */
    CHECK(lmc_plan_check(&p) == LMC_OK);
}

static void expect_load_error(const tiny_opts *o, const char *name, lmc_status want, const char *needle) {
    const char *dir = make_dir(name, o);
    lmc_backend *be;
    lmc_backend_cpu_init(&be, 1, 0);
    lmc_model *m = NULL;
    lmc_status st = lmc_model_load(dir, be, &m);
    CHECK_MSG(st == want, "status %d, message %s", st, lmc_last_error());
    CHECK_MSG(strstr(lmc_last_error(), needle) != NULL, "message '%s' lacks '%s'", lmc_last_error(), needle);
    lmc_model_free(m);
    lmc_backend_free(be);
}

static void test_audit(void) {
    tiny_opts o = tiny_default();
    o.extra_tensor = "model.layers.0.mlp.mystery.weight";
    expect_load_error(&o, "extra", LMC_ERR_AUDIT, "model.layers.0.mlp.mystery.weight");
    o = tiny_default();
    o.skip_tensor = "model.layers.1.mlp.up_proj.weight";
    expect_load_error(&o, "missing", LMC_ERR_AUDIT, "model.layers.1.mlp.up_proj.weight");
    o = tiny_default();
    o.extra_tensor = "model.layers.0.self_attn.rotary_emb.inv_freq"; /* dropped by rule: loads */
    const char *dir = make_dir("dropped", &o);
    lmc_backend *be;
    lmc_backend_cpu_init(&be, 1, 0);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(dir, be, &m) == 0);
    CHECK(m && m->n_audit_dropped == 1);
    lmc_model_free(m);
    lmc_backend_free(be);
    o = tiny_default();
    o.model_type = "llama_foo";
    expect_load_error(&o, "unknown", LMC_ERR_UNSUPPORTED, "nearest: llama");
}

static void test_shape_mismatch(void) {
    tiny_opts o = tiny_default();
    const char *dir = make_dir("shape", &o);
    /* rewrite config with a different intermediate size: tensors no longer match */
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"model_type\": \"llama\", \"vocab_size\": 96, \"hidden_size\": 32, \"num_hidden_layers\": 2,"
               " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, \"intermediate_size\": 40}");
    fclose(f);
    lmc_backend *be;
    lmc_backend_cpu_init(&be, 1, 0);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(dir, be, &m) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "gate_proj") && strstr(lmc_last_error(), "expected [40, 32]"));
    lmc_backend_free(be);
}

static void test_sampler(void) {
    float logits[8] = {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f, -5.0f, 1.5f};
    lmc_sampler_params p = lmc_sampler_default_params();
    lmc_sampler *s;
    CHECK(lmc_sampler_init(&s, &p, 8) == 0);
    CHECK_EQ_INT(lmc_sampler_sample(s, logits), 1);
    lmc_sampler_free(s);
    /* repetition penalty demotes token 1 below 5 */
    p.repetition_penalty = 1.5f;
    lmc_sampler_init(&s, &p, 8);
    lmc_sampler_accept(s, 1);
    CHECK_EQ_INT(lmc_sampler_sample(s, logits), 5);
    lmc_sampler_free(s);
    /* top-k 2: only tokens 1 and 5 ever come out; same seed → same sequence */
    p = lmc_sampler_default_params();
    p.temperature = 1.0f; p.top_k = 2; p.seed = 42;
    int counts[8] = {0}, seq1[50], seq2[50];
    lmc_sampler_init(&s, &p, 8);
    for (int i = 0; i < 50; i++) { seq1[i] = lmc_sampler_sample(s, logits); counts[seq1[i]]++; }
    lmc_sampler_free(s);
    lmc_sampler_init(&s, &p, 8);
    for (int i = 0; i < 50; i++) seq2[i] = lmc_sampler_sample(s, logits);
    lmc_sampler_free(s);
    CHECK(counts[1] + counts[5] == 50 && counts[1] > 0 && counts[5] > 0);
    CHECK(memcmp(seq1, seq2, sizeof seq1) == 0);
    /* top-p 0.5: token 1 alone holds > 0.3 mass; with 5 it passes 0.5, so only {1, 5} */
    p.top_k = 0; p.top_p = 0.5f;
    lmc_sampler_init(&s, &p, 8);
    int bad = 0;
    for (int i = 0; i < 200; i++) { int t = lmc_sampler_sample(s, logits); bad += t != 1 && t != 5; }
    CHECK_EQ_INT(bad, 0);
    lmc_sampler_free(s);
    /* min-p 0.5: keep p ≥ 0.5·p(1): tokens 1 (3.0), 5 (2.9), 2 (2.5: e^-0.5 = 0.61) */
    p.top_p = 1; p.min_p = 0.5f;
    lmc_sampler_init(&s, &p, 8);
    int seen[8] = {0};
    for (int i = 0; i < 400; i++) seen[lmc_sampler_sample(s, logits)]++;
    CHECK(seen[1] && seen[5] && seen[2] && !seen[0] && !seen[3] && !seen[4] && !seen[6] && !seen[7]);
    lmc_sampler_free(s);
    /* plain temperature sampling reaches low-probability tokens too */
    p.min_p = 0; p.temperature = 5.0f;
    lmc_sampler_init(&s, &p, 8);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 2000; i++) seen[lmc_sampler_sample(s, logits)]++;
    CHECK(seen[6] > 0 && seen[3] > 0);
    lmc_sampler_free(s);
    CHECK(lmc_sampler_init(&s, &(lmc_sampler_params){.top_p = 0, .repetition_penalty = 1}, 8) == LMC_ERR_ARG);
}

static int stop_after_eos_count;
static int count_tokens(int32_t tok, const float *logits, int n_vocab, void *ud) {
    (void)logits; (void)n_vocab; (void)tok;
    stop_after_eos_count++;
    return 0;
}

static void test_generate_stops_on_eos(void) {
    tiny_opts o = tiny_default();
    const char *dir = make_dir("gen", &o);
    lmc_backend *be;
    lmc_backend_cpu_init(&be, 1, 0);
    lmc_model *m;
    CHECK(lmc_model_load(dir, be, &m) == 0);
    lmc_context *ctx;
    CHECK(lmc_context_init(&ctx, m, NULL) == 0);
    int32_t prompt[3] = {4, 8, 15};
    /* greedy: find the first generated token, then declare it an EOS id: generation stops after 1 */
    lmc_gen_params gp = {.n_predict = 5, .sampler = lmc_sampler_default_params()};
    lmc_gen_stats stats;
    stop_after_eos_count = 0;
    CHECK(lmc_generate(ctx, prompt, 3, &gp, count_tokens, NULL, &stats) == 0);
    CHECK_EQ_INT(stats.n_generated, 5);
    int32_t first = lmc_argmax(lmc_context_logits(ctx, 0), m->cfg.vocab_size); /* logits of step 5 */
    (void)first;
    int32_t eos[1];
    CHECK(lmc_generate(ctx, prompt, 3, &(lmc_gen_params){.n_predict = 1, .sampler = gp.sampler}, NULL, NULL, &stats) == 0);
    eos[0] = lmc_argmax(lmc_context_logits(ctx, 0), m->cfg.vocab_size);
    gp.stop_ids = eos;
    gp.n_stop = 1;
    CHECK(lmc_generate(ctx, prompt, 3, &gp, NULL, NULL, &stats) == 0);
    CHECK_EQ_INT(stats.n_generated, 1);
    CHECK(stats.stopped_by_eos);
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/lmc-test-model-XXXXXX");
    if (!mkdtemp(tmp_root)) return 1;
    RUN(test_llama);
    RUN(test_mlp_passes);
    RUN(test_llama_tied_bf16);
    RUN(test_qwen2);
    RUN(test_qwen3);
    RUN(test_mistral_alias);
    RUN(test_sliding_window_rotating_cache);
    RUN(test_memory_plan);
    RUN(test_hidden_only);
    RUN(test_prefix_reuse);
    RUN(test_audit);
    RUN(test_shape_mismatch);
    RUN(test_sampler);
    RUN(test_generate_stops_on_eos);
    RUN(test_copy_memory);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return TEST_END();
}
