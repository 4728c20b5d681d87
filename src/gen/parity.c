/* parity.c — the parity gate (parity.h): a fixture's float64 reference against a backend. */
#include "parity.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/generate.h"
#include "gen/tp_context.h"
#include "io/jsonfile.h"

typedef struct fixture {
    int32_t *prompt, *greedy;
    int n_prompt, n_greedy, vocab;
    double *prompt_logits, *greedy_logits; /* [n, vocab] */
} fixture;

static int read_ids(const cJSON *ref, const char *key, int32_t **out) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(ref, key);
    if (!cJSON_IsArray(a)) return -1;
    const int n = cJSON_GetArraySize(a);
    *out = calloc((size_t)n + 1, sizeof **out);
    if (!*out) return -1;
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, a) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 2147483647.0) return -1;
        (*out)[i++] = (int32_t)it->valuedouble;
    }
    return n;
}

static double *read_f64(const char *dir, const char *name, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    double *d = malloc((n ? n : 1) * sizeof *d);
    const size_t got = d ? fread(d, sizeof *d, n, f) : 0;
    const int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != n || extra) {
        free(d);
        return NULL;
    }
    return d;
}

static void fixture_free(fixture *fx) {
    free(fx->prompt);
    free(fx->greedy);
    free(fx->prompt_logits);
    free(fx->greedy_logits);
}

static lmc_status fixture_load(const char *dir, fixture *fx) {
    memset(fx, 0, sizeof *fx);
    char path[4200];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    cJSON *ref;
    LMC_TRY(lmc_json_read_file(path, 1 << 20, &ref));
    int64_t v;
    fx->n_prompt = read_ids(ref, "prompt_ids", &fx->prompt);
    fx->n_greedy = read_ids(ref, "greedy_ids", &fx->greedy);
    fx->vocab = lmc_json_get_int(ref, "vocab_size", &v) > 0 && v > 0 && v < (1 << 24) ? (int)v : -1;
    cJSON_Delete(ref);
    if (fx->n_prompt <= 0 || fx->n_greedy < 0 || fx->vocab <= 0)
        return lmc_fail(LMC_ERR_FORMAT, "%s: prompt_ids, greedy_ids or vocab_size missing or invalid", path);
    for (int i = 0; i < fx->n_prompt + fx->n_greedy; i++) {
        const int32_t t = i < fx->n_prompt ? fx->prompt[i] : fx->greedy[i - fx->n_prompt];
        if (t >= fx->vocab) return lmc_fail(LMC_ERR_FORMAT, "%s: token id %d outside the vocabulary", path, t);
    }
    fx->prompt_logits = read_f64(dir, "prompt_logits.bin", (size_t)fx->n_prompt * fx->vocab);
    fx->greedy_logits = read_f64(dir, "greedy_logits.bin", (size_t)fx->n_greedy * fx->vocab);
    if (!fx->prompt_logits || (!fx->greedy_logits && fx->n_greedy > 0))
        return lmc_fail(LMC_ERR_FORMAT, "%s: prompt_logits.bin / greedy_logits.bin missing or not [n, %d] float64",
                        dir, fx->vocab);
    return LMC_OK;
}

static double max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
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

/* One greedy row: its error and, where the reference is clear, whether the ids agree. */
static void greedy_row(lmc_parity_report *r, const fixture *fx, int step, const float *lg) {
    const double *ref = fx->greedy_logits + (size_t)step * fx->vocab;
    r->e_greedy = fmax(r->e_greedy, row_err(lg, ref, fx->vocab));
    int arg;
    if (top2_gap(ref, fx->vocab, &arg) >= LMC_PARITY_GAP_MIN) {
        r->gated++;
        if (lmc_argmax(lg, fx->vocab) != fx->greedy[step] || arg != fx->greedy[step]) r->id_mismatch++;
    }
}

typedef struct id_list { int32_t *ids; int n, cap; } id_list;

static int collect_id(int32_t tok, const float *logits, int n_vocab, void *ud) {
    id_list *l = ud;
    (void)logits;
    (void)n_vocab;
    if (l->n < l->cap) l->ids[l->n++] = tok;
    return 0;
}

static void verdict(lmc_parity_report *r) {
    const char *what = NULL;
    double e = 0;
    if (r->e_prefill > r->tol) what = "prefill logits", e = r->e_prefill;
    else if (r->decode_checked && r->e_decode > r->tol) what = "decode logits", e = r->e_decode;
    else if (r->e_greedy > r->tol) what = "greedy-step logits", e = r->e_greedy;
    if (what) {
        snprintf(r->why, sizeof r->why, "%s off by %.3g (tolerance %.3g)", what, e, r->tol);
    } else if (r->id_mismatch) {
        snprintf(r->why, sizeof r->why, "%d of %d gated greedy ids differ", r->id_mismatch, r->gated);
    } else if (r->gated == 0 && r->n_greedy > 0) {
        snprintf(r->why, sizeof r->why, "no greedy step has a clear top-2 gap (the fixture cannot check ids)");
    } else if (r->generate_checked && !r->generate_same) {
        snprintf(r->why, sizeof r->why, "lmc_generate greedy ids differ from the reference");
    }
    r->pass = r->why[0] == 0;
}

static lmc_status run_gate(lmc_context *ctx, const lmc_model *m, const fixture *fx, lmc_parity_report *r) {
    const int V = fx->vocab, np = fx->n_prompt, ng = fx->n_greedy;
    lmc_status st = LMC_OK;
    int32_t *pos = calloc((size_t)np + ng, sizeof *pos), *seq = calloc((size_t)np + ng, sizeof *seq);
    int32_t *all = malloc((size_t)(np + ng) * sizeof *all);
    uint8_t *want = malloc((size_t)np + ng);
    if (!pos || !seq || !all || !want) {
        st = lmc_fail(LMC_ERR_NOMEM, "parity: out of memory");
        goto done;
    }
    for (int i = 0; i < np + ng; i++) {
        pos[i] = i;
        want[i] = 1;
        all[i] = i < np ? fx->prompt[i] : fx->greedy[i - np];
    }
    /* 1. one prefill, every position */
    lmc_batch b = {np, fx->prompt, pos, seq, want};
    if ((st = lmc_context_decode(ctx, &b)) < 0) goto done;
    for (int i = 0; i < np; i++)
        r->e_prefill = fmax(r->e_prefill, row_err(lmc_context_logits(ctx, i), fx->prompt_logits + (size_t)i * V, V));

    /* 2. through the cache */
    if (m->rope[0].dynamic) {
        for (int step = 0; step < ng; step++) {
            lmc_kv_clear(&ctx->kv, 0);
            lmc_batch full = {np + step, all, pos, seq, NULL};
            if ((st = lmc_context_decode(ctx, &full)) < 0) goto done;
            greedy_row(r, fx, step, lmc_context_logits(ctx, 0));
        }
        goto done;
    }
    r->decode_checked = 1;
    lmc_kv_clear(&ctx->kv, 0);
    int first = 0;
    if (m->rope[0].has_long && np > 1) {
        lmc_batch pre = {np - 1, fx->prompt, pos, seq, want};
        if ((st = lmc_context_decode(ctx, &pre)) < 0) goto done;
        for (int i = 0; i < np - 1; i++)
            r->e_decode = fmax(r->e_decode, row_err(lmc_context_logits(ctx, i), fx->prompt_logits + (size_t)i * V, V));
        first = np - 1;
    }
    for (int i = first; i < np + ng - 1; i++) { /* the last greedy id is never fed back */
        lmc_batch one = {1, &all[i], &pos[i], &seq[i], NULL};
        if ((st = lmc_context_decode(ctx, &one)) < 0) goto done;
        const float *lg = lmc_context_logits(ctx, 0);
        if (i < np) r->e_decode = fmax(r->e_decode, row_err(lg, fx->prompt_logits + (size_t)i * V, V));
        const int step = i - np + 1; /* logits after position i predict greedy step `step` */
        if (step >= 0 && step < ng) greedy_row(r, fx, step, lg);
    }

    /* 3. the generation loop reproduces the ids */
    if (ng > 0 && r->gated == ng) {
        lmc_gen_params gp = {.n_predict = ng, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
        int32_t ids[512];
        id_list got = {ids, 0, (int)(sizeof ids / sizeof ids[0])};
        lmc_gen_stats stats;
        if ((st = lmc_generate(ctx, fx->prompt, np, &gp, collect_id, &got, &stats)) < 0) goto done;
        r->generate_checked = 1;
        r->generate_same = got.n == ng && !memcmp(got.ids, fx->greedy, (size_t)ng * sizeof *got.ids);
    }
done:
    free(pos);
    free(seq);
    free(all);
    free(want);
    return st;
}

/* The gate on `be` (tp NULL), or tensor parallel over tp->n_ranks ranks with the weights on
 * `be` as the host copy (tp set). */
static lmc_status check(const char *dir, lmc_backend *be, const lmc_tp_params *tp, double rel_tol,
                        lmc_parity_report *r) {
    memset(r, 0, sizeof *r);
    fixture fx;
    lmc_status st = fixture_load(dir, &fx);
    lmc_model *m = NULL;
    lmc_context *ctx = NULL;
    if (st < 0) goto out;
    if ((st = lmc_model_load(dir, be, &m)) < 0) goto out;
    if (m->cfg.vocab_size != fx.vocab) {
        st = lmc_fail(LMC_ERR_FORMAT, "%s: the model's vocabulary (%d) is not the fixture's (%d)", dir,
                      (int)m->cfg.vocab_size, fx.vocab);
        goto out;
    }
    r->n_prompt = fx.n_prompt;
    r->n_greedy = fx.n_greedy;
    r->tol = rel_tol * fmax(max_abs(fx.prompt_logits, (size_t)fx.n_prompt * fx.vocab),
                            fx.n_greedy ? max_abs(fx.greedy_logits, (size_t)fx.n_greedy * fx.vocab) : 0);
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = fx.n_prompt + fx.n_greedy + 1;
    if ((st = tp ? lmc_context_init_tp(&ctx, m, &cp, tp) : lmc_context_init(&ctx, m, &cp)) < 0) goto out;
    if ((st = run_gate(ctx, m, &fx, r)) < 0) goto out;
    verdict(r);
out:
    lmc_context_free(ctx);
    lmc_model_free(m);
    fixture_free(&fx);
    return st;
}

lmc_status lmc_parity_check(const char *dir, lmc_backend *be, double rel_tol, lmc_parity_report *r) {
    return check(dir, be, NULL, rel_tol, r);
}

lmc_status lmc_parity_check_tp(const char *dir, const lmc_tp_params *tp, double rel_tol, lmc_parity_report *r) {
    lmc_backend *host;
    LMC_TRY(lmc_backend_cpu_init(&host, 1, 0));
    const lmc_status st = check(dir, host, tp, rel_tol, r);
    lmc_backend_free(host);
    return st;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int lmc_parity_list(const char *root, char ***names) {
    *names = NULL;
    DIR *d = opendir(root);
    if (!d) return lmc_fail(LMC_ERR_NOT_FOUND, "no fixture folder %s", root);
    int n = 0, cap = 0;
    char **v = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char ref[4200];
        snprintf(ref, sizeof ref, "%s/%s/ref.json", root, e->d_name);
        FILE *f = fopen(ref, "r");
        if (!f) continue;
        fclose(f);
        if (n == cap) {
            char **nv = realloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        if (!(v[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_name);
    *names = v;
    return n;
}

void lmc_parity_list_free(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}
