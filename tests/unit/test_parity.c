/* test_parity.c — F1 parity on every fixture in tests/fixtures/ (DESIGN.md).
 *
 * Each fixture holds a tiny checkpoint written by tools/oracle/ from
 * transformers, with float64 reference logits. For each one, on the CPU
 * (fast kernels, 2 threads) in f32:
 *   - prompt logits at every position, through one prefill and through
 *     token-by-token decode with the KV cache:  max|Δ| ≤ 1e-4 · max|ref|;
 *   - greedy steps (teacher-forced on the reference ids): per-step logits
 *     within the same bound, and our argmax equal to the reference id
 *     wherever the reference top-2 gap is ≥ 1e-3;
 *   - lmc_generate greedy reproduces the reference ids.
 * Set LMC_FIXTURES to use another folder. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "gen/generate.h"
#include "io/jsonfile.h"

#define F1_REL 1e-4
#define GAP_MIN 1e-3

typedef struct fixture {
    char dir[1100];
    int32_t *prompt, *greedy;
    int n_prompt, n_greedy, vocab;
    double *prompt_logits, *greedy_logits; /* [n, vocab] */
} fixture;

static int read_ids(const cJSON *ref, const char *key, int32_t **out) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(ref, key);
    if (!cJSON_IsArray(a)) return -1;
    int n = cJSON_GetArraySize(a);
    *out = calloc((size_t)n + 1, sizeof **out);
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, a) (*out)[i++] = (int32_t)it->valuedouble;
    return n;
}

static double *read_f64(const char *dir, const char *name, size_t n) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    double *d = malloc(n * sizeof *d);
    size_t got = fread(d, sizeof *d, n, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != n || extra) { free(d); return NULL; }
    return d;
}

static int load_fixture(const char *dir, fixture *fx) {
    memset(fx, 0, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "%s", dir);
    char path[1200];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    cJSON *ref;
    if (lmc_json_read_file(path, 1 << 20, &ref) < 0) return -1;
    int64_t v;
    fx->n_prompt = read_ids(ref, "prompt_ids", &fx->prompt);
    fx->n_greedy = read_ids(ref, "greedy_ids", &fx->greedy);
    fx->vocab = lmc_json_get_int(ref, "vocab_size", &v) > 0 ? (int)v : -1;
    cJSON_Delete(ref);
    if (fx->n_prompt <= 0 || fx->n_greedy < 0 || fx->vocab <= 0) return -1;
    fx->prompt_logits = read_f64(dir, "prompt_logits.bin", (size_t)fx->n_prompt * fx->vocab);
    fx->greedy_logits = read_f64(dir, "greedy_logits.bin", (size_t)fx->n_greedy * fx->vocab);
    return fx->prompt_logits && (fx->greedy_logits || fx->n_greedy == 0) ? 0 : -1;
}

static void free_fixture(fixture *fx) {
    free(fx->prompt);
    free(fx->greedy);
    free(fx->prompt_logits);
    free(fx->greedy_logits);
}

static double ref_scale(const double *ref, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    return m;
}

static double row_err(const float *got, const double *ref, int V) {
    double e = 0;
    for (int i = 0; i < V; i++) e = fmax(e, fabs((double)got[i] - ref[i]));
    return e;
}

static double top2_gap(const double *ref, int V, int *arg) {
    int a = 0;
    for (int i = 1; i < V; i++) if (ref[i] > ref[a]) a = i;
    double second = -INFINITY;
    for (int i = 0; i < V; i++) if (i != a && ref[i] > second) second = ref[i];
    *arg = a;
    return ref[a] - second;
}

static int n_fixtures;

typedef struct id_list { int32_t ids[256]; int n; } id_list;

static int collect_id(int32_t tok, const float *logits, int n_vocab, void *ud) {
    id_list *l = ud;
    (void)logits; (void)n_vocab;
    if (l->n < 256) l->ids[l->n++] = tok;
    return 0;
}

static void check_fixture(const char *dir) {
    fixture fx;
    if (load_fixture(dir, &fx) < 0) {
        CHECK_MSG(0, "%s: unreadable fixture (ref.json, prompt_logits.bin, greedy_logits.bin)", dir);
        free_fixture(&fx);
        return;
    }
    n_fixtures++;
    lmc_backend *be;
    lmc_model *m = NULL;
    lmc_context *ctx = NULL;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    lmc_status st = lmc_model_load(dir, be, &m);
    CHECK_MSG(st == 0, "%s: %s", dir, lmc_last_error());
    if (st < 0) goto out;
    CHECK_EQ_INT(m->cfg.vocab_size, fx.vocab);
    const int V = fx.vocab, np = fx.n_prompt, ng = fx.n_greedy;
    double scale = fmax(ref_scale(fx.prompt_logits, (size_t)np * V), ref_scale(fx.greedy_logits, (size_t)ng * V));
    double tol = F1_REL * scale;
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = np + ng + 1;
    CHECK(lmc_context_init(&ctx, m, &cp) == 0);
    if (!ctx) goto out;

    /* 1. one prefill, every position */
    int32_t *pos = calloc((size_t)np + ng, sizeof *pos), *seq = calloc((size_t)np + ng, sizeof *seq);
    uint8_t *want = malloc((size_t)np + ng);
    for (int i = 0; i < np + ng; i++) { pos[i] = i; want[i] = 1; }
    lmc_batch b = {np, fx.prompt, pos, seq, want};
    CHECK(lmc_context_decode(ctx, &b) == 0);
    double e_prefill = 0;
    for (int i = 0; i < np && ctx->n_logits == np; i++)
        e_prefill = fmax(e_prefill, row_err(lmc_context_logits(ctx, i), fx.prompt_logits + (size_t)i * V, V));
    CHECK_MSG(e_prefill <= tol, "%s: prefill logits off by %.3g (tolerance %.3g)", dir, e_prefill, tol);

    /* 2. token by token through the cache, then teacher-forced greedy steps.
     * longrope picks its factors per forward from the longest position, as
     * transformers does, so there the prompt is prefilled in one forward
     * (as generate() does) and only the greedy steps go one by one. */
    lmc_kv_clear(&ctx->kv, 0);
    double e_decode = 0, e_greedy = 0;
    int id_mismatch = 0, gated = 0, first = 0;
    if (m->rope[0].dynamic) {
        /* dynamic NTK: each reference row is a full forward without cache over its whole sequence
         * (its table depends on that length), so each greedy row is one prefill of prompt +
         * greedy[:step]; cached decoding follows transformers' generate() with a cache, which the
         * oracle records as choosing other ids (checks.generate_with_cache_same_ids) */
        int32_t *all = malloc((size_t)(np + ng) * sizeof *all);
        memcpy(all, fx.prompt, (size_t)np * sizeof *all);
        memcpy(all + np, fx.greedy, (size_t)ng * sizeof *all);
        for (int step = 0; step < ng; step++) {
            lmc_kv_clear(&ctx->kv, 0);
            lmc_batch full = {np + step, all, pos, seq, NULL};
            CHECK(lmc_context_decode(ctx, &full) == 0);
            const float *lg = lmc_context_logits(ctx, 0);
            const double *ref = fx.greedy_logits + (size_t)step * V;
            e_greedy = fmax(e_greedy, row_err(lg, ref, V));
            int arg;
            if (top2_gap(ref, V, &arg) >= GAP_MIN) {
                gated++;
                if (lmc_argmax(lg, V) != fx.greedy[step] || arg != fx.greedy[step]) id_mismatch++;
            }
        }
        free(all);
        CHECK_MSG(e_greedy <= tol, "%s: greedy-step logits off by %.3g (tolerance %.3g)", dir, e_greedy, tol);
        CHECK_MSG(id_mismatch == 0, "%s: %d of %d gated greedy ids differ", dir, id_mismatch, gated);
        CHECK_MSG(gated > 0 || ng == 0, "%s: no greedy step has a clear top-2 gap", dir);
        fprintf(stderr, "  %-28s prompt %2d, greedy %d (gated %d): max err prefill %.2e greedy %.2e as full forwards "
                        "(dynamic rope) (tol %.2e)\n", strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir, np, ng, gated,
                e_prefill, e_greedy, tol);
        free(pos);
        free(seq);
        free(want);
        goto out;
    }
    if (m->rope[0].has_long) {
        lmc_batch pre = {np - 1, fx.prompt, pos, seq, want};
        CHECK(np < 2 || lmc_context_decode(ctx, &pre) == 0);
        for (int i = 0; i < np - 1 && ctx->n_logits == np - 1; i++)
            e_decode = fmax(e_decode, row_err(lmc_context_logits(ctx, i), fx.prompt_logits + (size_t)i * V, V));
        first = np - 1;
    }
    for (int i = first; i < np + ng; i++) {
        int32_t tok = i < np ? fx.prompt[i] : fx.greedy[i - np];
        lmc_batch one = {1, &tok, &pos[i], &seq[i], NULL};
        if (i == np + ng - 1) break; /* the last greedy id is never fed back */
        CHECK(lmc_context_decode(ctx, &one) == 0);
        const float *lg = lmc_context_logits(ctx, 0);
        if (i < np) e_decode = fmax(e_decode, row_err(lg, fx.prompt_logits + (size_t)i * V, V));
        int step = i - np + 1; /* logits after position i predict greedy step `step` */
        if (step >= 0 && step < ng) {
            const double *ref = fx.greedy_logits + (size_t)step * V;
            e_greedy = fmax(e_greedy, row_err(lg, ref, V));
            int arg;
            if (top2_gap(ref, V, &arg) >= GAP_MIN) {
                gated++;
                if (lmc_argmax(lg, V) != fx.greedy[step] || arg != fx.greedy[step]) id_mismatch++;
            }
        }
    }
    CHECK_MSG(e_decode <= tol, "%s: decode logits off by %.3g (tolerance %.3g)", dir, e_decode, tol);
    CHECK_MSG(e_greedy <= tol, "%s: greedy-step logits off by %.3g (tolerance %.3g)", dir, e_greedy, tol);
    CHECK_MSG(id_mismatch == 0, "%s: %d of %d gated greedy ids differ", dir, id_mismatch, gated);
    CHECK_MSG(gated > 0 || ng == 0, "%s: no greedy step has a clear top-2 gap", dir);

    /* 3. the generation loop reproduces the ids */
    if (ng > 0 && gated == ng) {
        lmc_gen_params gp = {.n_predict = ng, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
        id_list got = {0};
        lmc_gen_stats stats;
        CHECK(lmc_generate(ctx, fx.prompt, np, &gp, collect_id, &got, &stats) == 0);
        CHECK_EQ_INT(got.n, ng);
        CHECK_MSG(got.n == ng && memcmp(got.ids, fx.greedy, (size_t)ng * sizeof *got.ids) == 0,
                  "%s: lmc_generate greedy ids differ from the reference", dir);
    }
    fprintf(stderr, "  %-28s prompt %2d, greedy %d (gated %d): max err prefill %.2e decode %.2e greedy %.2e "
                    "(tol %.2e)\n", strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir, np, ng, gated, e_prefill,
            e_decode, e_greedy, tol);
    free(pos);
    free(seq);
    free(want);
out:
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
    free_fixture(&fx);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
    const char *root = getenv("LMC_FIXTURES") ? getenv("LMC_FIXTURES") : "tests/fixtures";
    DIR *d = opendir(root);
    if (!d) { fprintf(stderr, "no fixture folder %s\n", root); printf("RESULT 0 1\n"); return 1; }
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        if (e->d_name[0] == '.') continue;
        char ref[1024];
        snprintf(ref, sizeof ref, "%s/%s/ref.json", root, e->d_name);
        FILE *f = fopen(ref, "r");
        if (!f) continue;
        fclose(f);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        test_cur_failed_ = 0;
        check_fixture(dir);
        if (test_cur_failed_) { test_failed_++; fprintf(stderr, "FAIL %s\n", names[i]); } else test_passed_++;
        free(names[i]);
    }
    if (n_fixtures == 0) { fprintf(stderr, "no fixtures found under %s\n", root); test_failed_++; }
    return TEST_END();
}
