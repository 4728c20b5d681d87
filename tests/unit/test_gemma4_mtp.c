/* test_gemma4_mtp.c — the Gemma 4 assistant (MTP drafter) against transformers 5.17.
 *
 * tests/fixtures/gemma4_mtp holds a tiny gemma4_text target, a dense-head and a centroid-head
 * assistant, and every drafter call transformers' SinglePositionMultiTokenCandidateGenerator
 * made during generate(assistant_model=...) (tools/oracle/gemma4_fixtures.py): its inputs
 * (inputs_embeds, position, the shared K/V it was handed) and outputs (logits, last_hidden_state),
 * float64. Checks, on the CPU in f32:
 *   1. the drafter forward on the recorded inputs: logits and hidden within F1, same argmax;
 *   2. the hand-over from lmc's own target: its logits and hidden states at F1, its cached K/V of
 *      the layers the drafter reads equal to the recorded K/V, and the drafter stepping from lmc's
 *      cache and the target's embedding reproduces the reference calls that saw no stale entry;
 *   3. a draft source over the drafter in gen/spec's loop: greedy output identical to plain
 *      greedy decoding (and to transformers' ids), with drafts proposed;
 *   4. refusals: a mismatched pair, a target as assistant, an assistant as a model;
 *   6. lmc_g4mtp_draft (drafts chained on the backend where it has argmax/topk, recorded where it
 *      records) gives the ids of the host loop of single steps, for several positions, hidden
 *      states and chain lengths (LMC_TEST_BACKEND=cuda runs this check on the GPU);
 *   5. the assistant as GGUF (io/gguf_assistant.h): converted, verified (and a broken file and a
 *      mismatched target caught), and drafting from it identical to the safetensors assistant. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#include "gen/spec.h"
#include "io/gguf.h"
#include "io/gguf_assistant.h"
#include "io/jsonfile.h"
#include "model/gemma4_mtp.h"

#define FX "tests/fixtures/gemma4_mtp"
#define F1_REL 1e-4

typedef struct rounds {
    cJSON *j;
    unsigned char *bin;
    size_t n_bin;
} rounds;

static int load_rounds(const char *kind, rounds *r) {
    char p[256];
    memset(r, 0, sizeof *r);
    snprintf(p, sizeof p, FX "/rounds_%s.json", kind);
    if (lmc_json_read_file(p, 64u << 20, &r->j) < 0) return -1;
    snprintf(p, sizeof p, FX "/rounds_%s.bin", kind);
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    r->n_bin = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    r->bin = malloc(r->n_bin);
    size_t got = fread(r->bin, 1, r->n_bin, f);
    fclose(f);
    return got == r->n_bin ? 0 : -1;
}

static void free_rounds(rounds *r) {
    cJSON_Delete(r->j);
    free(r->bin);
}

/* A recorded array [offset, count, dtype] as doubles (malloc'd); NULL when malformed. */
static double *arr(const rounds *r, const cJSON *spec, int *n) {
    if (!cJSON_IsArray(spec) || cJSON_GetArraySize(spec) != 3) return NULL;
    size_t off = (size_t)cJSON_GetArrayItem(spec, 0)->valuedouble;
    int cnt = (int)cJSON_GetArrayItem(spec, 1)->valuedouble;
    const char *dt = cJSON_GetArrayItem(spec, 2)->valuestring;
    size_t es = dt && !strcmp(dt, "<f4") ? 4 : 8;
    if (off + (size_t)cnt * es > r->n_bin) return NULL;
    double *d = malloc((size_t)cnt * sizeof *d);
    for (int i = 0; i < cnt; i++) {
        if (es == 4) { float f; memcpy(&f, r->bin + off + (size_t)i * 4, 4); d[i] = f; }
        else memcpy(&d[i], r->bin + off + (size_t)i * 8, 8);
    }
    *n = cnt;
    return d;
}

static int jint(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(it) ? (int)it->valuedouble : -1;
}

static double max_abs(const double *a, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

static int argmax_d(const double *a, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (a[i] > a[b]) b = i;
    return b;
}

static int argmax_f(const float *a, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (a[i] > a[b]) b = i;
    return b;
}

static double gap2(const double *a, int n) {
    int b = argmax_d(a, n);
    double s = -INFINITY;
    for (int i = 0; i < n; i++) if (i != b && a[i] > s) s = a[i];
    return a[b] - s;
}

/* Recorded K or V [kvh, L, hd] as a cache tensor [kvh·hd, L, 1] on the backend. */
static lmc_tensor cache_from(lmc_backend *be, const double *kv, const cJSON *shape) {
    int kvh = (int)cJSON_GetArrayItem(shape, 1)->valuedouble, L = (int)cJSON_GetArrayItem(shape, 2)->valuedouble;
    int hd = (int)cJSON_GetArrayItem(shape, 3)->valuedouble;
    lmc_tensor t = lmc_tensor_make(LMC_DTYPE_F32, (int64_t)kvh * hd, L, 1, 1);
    be->i->alloc(be, &t);
    float *host = malloc((size_t)kvh * hd * L * sizeof *host);
    for (int p = 0; p < L; p++)
        for (int h = 0; h < kvh; h++)
            for (int i = 0; i < hd; i++) host[((size_t)p * kvh + h) * hd + i] = (float)kv[((size_t)h * L + p) * hd + i];
    be->i->set(be, &t, host, 0, (size_t)kvh * hd * L * sizeof *host);
    free(host);
    return t;
}

static const char *const TYPES[2] = {"full_attention", "sliding_attention"};

/* 1. The drafter forward on the recorded inputs. */
static void check_recorded(const char *kind) {
    rounds r;
    lmc_backend *be;
    lmc_model *tm = NULL;
    lmc_g4mtp *d = NULL;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    CHECK_MSG(load_rounds(kind, &r) == 0, "%s: rounds unreadable", kind);
    lmc_status st = lmc_model_load(FX "/target", be, &tm);
    CHECK_MSG(st == 0, "target: %s", lmc_last_error());
    char ap[128];
    snprintf(ap, sizeof ap, FX "/assistant_%s", kind);
    if (st == 0) {
        st = lmc_g4mtp_load(ap, tm, &d);
        CHECK_MSG(st == 0, "%s: %s", kind, lmc_last_error());
    }
    if (!d || !r.j) goto out;
    lmc_g4mtp_info info;
    lmc_g4mtp_get_info(d, &info);
    CHECK_EQ_INT(info.ordered, !strcmp(kind, "centroid"));
    CHECK_EQ_INT(info.src_layer[0], 2); /* the target's last non-shared full layer ... */
    CHECK_EQ_INT(info.src_layer[1], 3); /* ... and sliding layer (layers 4, 5 are KV-shared) */
    const int V = info.vocab, B = info.backbone_hidden;
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(r.j, "calls"), *c;
    double e_lg = 0, s_lg = 0, e_h = 0, s_h = 0;
    int n_calls = 0, n_arg = 0, arg_bad = 0;
    float *lg = malloc((size_t)V * sizeof *lg), *ho = malloc((size_t)B * sizeof *ho), *x2 = malloc((size_t)2 * B * 4);
    cJSON_ArrayForEach(c, calls) {
        int n_x, n_l, n_h;
        double *x = arr(&r, cJSON_GetObjectItemCaseSensitive(c, "inputs_embeds"), &n_x);
        double *rl = arr(&r, cJSON_GetObjectItemCaseSensitive(c, "logits"), &n_l);
        double *rh = arr(&r, cJSON_GetObjectItemCaseSensitive(c, "last_hidden_state"), &n_h);
        CHECK(x && rl && rh && n_x == 2 * B && n_l == V && n_h == B);
        lmc_tensor kc[2], vc[2];
        lmc_g4mtp_kv kv = {.seq = 0};
        for (int t = 0; t < 2; t++) {
            char key[64];
            int nk, nv;
            snprintf(key, sizeof key, "k_%s", TYPES[t]);
            double *k = arr(&r, cJSON_GetObjectItemCaseSensitive(c, key), &nk);
            snprintf(key, sizeof key, "v_%s", TYPES[t]);
            double *v = arr(&r, cJSON_GetObjectItemCaseSensitive(c, key), &nv);
            snprintf(key, sizeof key, "kv_shape_%s", TYPES[t]);
            const cJSON *shape = cJSON_GetObjectItemCaseSensitive(c, key);
            CHECK(k && v && cJSON_GetArraySize(shape) == 4);
            kc[t] = cache_from(be, k, shape);
            vc[t] = cache_from(be, v, shape);
            kv.k[t] = &kc[t];
            kv.v[t] = &vc[t];
            snprintf(key, sizeof key, "kv_len_%s", TYPES[t]);
            kv.n_kv = jint(c, key); /* both types hold the same positions here */
            free(k);
            free(v);
        }
        for (int i = 0; i < 2 * B; i++) x2[i] = (float)x[i];
        st = lmc_g4mtp_step_embeds(d, &kv, x2, jint(c, "pos"), lg, ho);
        CHECK_MSG(st == 0, "%s", lmc_last_error());
        for (int i = 0; i < V; i++) e_lg = fmax(e_lg, fabs(lg[i] - rl[i]));
        for (int i = 0; i < B; i++) e_h = fmax(e_h, fabs(ho[i] - rh[i]));
        s_lg = fmax(s_lg, max_abs(rl, V));
        s_h = fmax(s_h, max_abs(rh, B));
        if (gap2(rl, V) >= 1e-3) { n_arg++; arg_bad += argmax_f(lg, V) != argmax_d(rl, V); }
        CHECK_EQ_INT(argmax_d(rl, V), jint(c, "argmax"));
        for (int t = 0; t < 2; t++) { be->i->release(be, &kc[t]); be->i->release(be, &vc[t]); }
        free(x); free(rl); free(rh);
        n_calls++;
    }
    CHECK_MSG(n_calls >= 10, "%s: only %d recorded calls", kind, n_calls);
    CHECK_MSG(e_lg <= F1_REL * s_lg, "%s: drafter logits off by %.3g (tolerance %.3g)", kind, e_lg, F1_REL * s_lg);
    CHECK_MSG(e_h <= F1_REL * s_h, "%s: drafter hidden off by %.3g (tolerance %.3g)", kind, e_h, F1_REL * s_h);
    CHECK_MSG(arg_bad == 0 && n_arg > 0, "%s: %d of %d gated drafter argmaxes differ", kind, arg_bad, n_arg);
    fprintf(stderr, "  %-8s %d calls: max err logits %.2e (tol %.2e), hidden %.2e (tol %.2e), argmax %d/%d\n", kind,
            n_calls, e_lg, F1_REL * s_lg, e_h, F1_REL * s_h, n_arg - arg_bad, n_arg);
    free(lg); free(ho); free(x2);
out:
    lmc_g4mtp_free(d);
    lmc_model_free(tm);
    lmc_backend_free(be);
    free_rounds(&r);
}

/* 2. lmc's target hands over the same hidden states and K/V; the drafter reads them. */
static void check_handover(const char *kind) {
    rounds r;
    lmc_backend *be;
    lmc_model *tm = NULL;
    lmc_g4mtp *d = NULL;
    lmc_context *ctx = NULL;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    CHECK(load_rounds(kind, &r) == 0);
    CHECK(lmc_model_load(FX "/target", be, &tm) == 0);
    char ap[128];
    snprintf(ap, sizeof ap, FX "/assistant_%s", kind);
    if (tm) CHECK(lmc_g4mtp_load(ap, tm, &d) == 0);
    if (!d || !r.j) goto out;
    const cJSON *seqj = cJSON_GetObjectItemCaseSensitive(r.j, "target_sequence"), *it;
    int n = cJSON_GetArraySize(seqj), i = 0;
    int32_t *ids = calloc((size_t)n, sizeof *ids), *pos = calloc((size_t)n, sizeof *pos), *sq = calloc((size_t)n, 4);
    uint8_t *want = malloc((size_t)n);
    cJSON_ArrayForEach(it, seqj) { pos[i] = i; want[i] = 1; ids[i++] = (int32_t)it->valuedouble; }
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n + 8;
    cp.want_hidden = 1;
    CHECK(lmc_context_init(&ctx, tm, &cp) == 0);
    lmc_batch b = {n, ids, pos, sq, want};
    CHECK(ctx && lmc_context_decode(ctx, &b) == 0);
    const int V = tm->cfg.vocab_size, D = tm->cfg.hidden_size;
    int nl, nh;
    double *rl = arr(&r, cJSON_GetObjectItemCaseSensitive(r.j, "target_logits"), &nl);
    double *rh = arr(&r, cJSON_GetObjectItemCaseSensitive(r.j, "target_hidden"), &nh);
    CHECK(rl && rh && nl == n * V && nh == n * D && ctx->n_logits == n);
    double el = 0, eh = 0;
    for (int p = 0; p < n && rl && rh && ctx->n_logits == n; p++) {
        for (int v = 0; v < V; v++) el = fmax(el, fabs(lmc_context_logits(ctx, p)[v] - rl[(size_t)p * V + v]));
        for (int v = 0; v < D; v++) eh = fmax(eh, fabs(lmc_context_hidden(ctx, p)[v] - rh[(size_t)p * D + v]));
    }
    CHECK_MSG(el <= F1_REL * max_abs(rl, n * V), "target logits off by %.3g", el);
    CHECK_MSG(eh <= F1_REL * max_abs(rh, n * D), "target hidden off by %.3g", eh);

    /* per call: the recorded K/V equal lmc's cache on the accepted positions; calls without a stale
     * entry (the candidate generator slices the verification's K/V by length, so after a rejection
     * index n_hist-1 holds a rejected draft) are reproduced from lmc's cache and embedding */
    lmc_g4mtp_info info;
    lmc_g4mtp_get_info(d, &info);
    const int B = info.backbone_hidden;
    float *lg = malloc((size_t)V * 4), *ho = malloc((size_t)B * 4), *hp = malloc((size_t)B * 4);
    float *row = malloc((size_t)4096 * 4);
    double ekv = 0, skv = 0, e_lg = 0, s_lg = 0;
    int n_repro = 0, n_calls = 0, first_round_h_ok = 1, prev_pos = -1, prev_arg = -1;
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(r.j, "calls"), *c;
    cJSON_ArrayForEach(c, calls) {
        const int p = jint(c, "pos");
        n_calls++;
        for (int t = 0; t < 2; t++) {
            char key[64];
            int nk;
            snprintf(key, sizeof key, "kv_shape_%s", TYPES[t]);
            const cJSON *shape = cJSON_GetObjectItemCaseSensitive(c, key);
            int kvh = (int)cJSON_GetArrayItem(shape, 1)->valuedouble, L = (int)cJSON_GetArrayItem(shape, 2)->valuedouble;
            int hd = (int)cJSON_GetArrayItem(shape, 3)->valuedouble;
            for (int kvsel = 0; kvsel < 2; kvsel++) {
                snprintf(key, sizeof key, "%c_%s", kvsel ? 'v' : 'k', TYPES[t]);
                double *k = arr(&r, cJSON_GetObjectItemCaseSensitive(c, key), &nk);
                const lmc_tensor *cache = kvsel ? &ctx->kv.v[info.src_layer[t]] : &ctx->kv.k[info.src_layer[t]];
                for (int q = 0; q < L && q < p && k; q++) { /* accepted positions [0, pos) */
                    /* the layer views its cache with rows of kvh · hd (lmc_g4_cache_view) */
                    ctx->model->be->i->get(be, row, cache, (size_t)(q % cache->ne[1]) * kvh * hd * 4,
                                           (size_t)kvh * hd * 4);
                    for (int h = 0; h < kvh; h++)
                        for (int x = 0; x < hd; x++) {
                            double ref = k[((size_t)h * L + q) * hd + x];
                            ekv = fmax(ekv, fabs(row[h * hd + x] - ref));
                            skv = fmax(skv, fabs(ref));
                        }
                }
                free(k);
            }
        }
        int nx;
        double *x = arr(&r, cJSON_GetObjectItemCaseSensitive(c, "inputs_embeds"), &nx);
        /* the first drafter call after prefill reads the hidden state of position 0 (transformers slices
         * index n_last_matches = 0 of the prefill output); later first calls the position before pos */
        if (x && p == jint(cJSON_GetArrayItem(calls, 0), "pos") && c == cJSON_GetArrayItem(calls, 0)) {
            double e0 = 0;
            for (int v = 0; v < B; v++) e0 = fmax(e0, fabs(x[B + v] - lmc_context_hidden(ctx, 0)[v]));
            first_round_h_ok = e0 <= F1_REL * max_abs(x + B, B);
        }
        if (x && jint(c, "kv_len_full_attention") == p && jint(c, "kv_len_sliding_attention") == p) {
            int nrl;
            double *cl = arr(&r, cJSON_GetObjectItemCaseSensitive(c, "logits"), &nrl);
            for (int v = 0; v < B; v++) hp[v] = (float)x[B + v];
            lmc_g4mtp_kv kv = lmc_g4mtp_target_kv(d, ctx->kv.k, ctx->kv.v, 0, p);
            /* the token fed: a round's first call takes the sequence's token at pos, later calls the
             * previous call's argmax (its embedding half is recomputed by the step from the id) */
            int tok = p != prev_pos ? ids[p] : prev_arg;
            CHECK_MSG(tok >= 0, "call at pos %d: the embedding half is no target token's scaled embedding", p);
            if (tok >= 0 && cl) {
                CHECK(lmc_g4mtp_step(d, &kv, tok, hp, p, lg, ho) == 0);
                for (int v = 0; v < V; v++) e_lg = fmax(e_lg, fabs(lg[v] - cl[v]));
                s_lg = fmax(s_lg, max_abs(cl, V));
                n_repro++;
            }
            free(cl);
        }
        free(x);
        prev_pos = p;
        prev_arg = jint(c, "argmax");
    }
    CHECK_MSG(ekv <= F1_REL * skv, "%s: lmc's target K/V differ from the recorded shared K/V by %.3g", kind, ekv);
    CHECK_MSG(n_repro >= 1, "%s: no call to reproduce from lmc's cache", kind);
    CHECK_MSG(e_lg <= F1_REL * s_lg, "%s: drafter from lmc's cache off by %.3g (tol %.3g)", kind, e_lg, F1_REL * s_lg);
    CHECK_MSG(first_round_h_ok, "%s: the first call's h_prev is not the target hidden at position 0", kind);
    fprintf(stderr, "  %-8s target logits %.2e hidden %.2e; K/V %.2e; %d of %d calls from lmc's cache: %.2e\n", kind,
            el, eh, ekv, n_repro, n_calls, e_lg);
    free(lg); free(ho); free(hp); free(row); free(rl); free(rh);
    free(ids); free(pos); free(sq); free(want);
out:
    lmc_context_free(ctx);
    lmc_g4mtp_free(d);
    lmc_model_free(tm);
    lmc_backend_free(be);
    free_rounds(&r);
}

/* 3. A gen/spec draft source over the drafter. */
typedef struct mtp_source {
    lmc_draft_source base;
    lmc_g4mtp *d;
    float *h, *lg;
    int V;
} mtp_source;

static lmc_status mtp_propose(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out) {
    mtp_source *s = (mtp_source *)ds;
    out->n = 0;
    out->has_q = 0;
    if (req->n_hist < 2 || !req->hidden) return LMC_OK;
    const int n_kv = req->n_hist - 1;
    lmc_g4mtp_kv kv = lmc_g4mtp_target_kv(s->d, req->target->kv.k, req->target->kv.v, req->seq, n_kv);
    lmc_g4mtp_info info;
    lmc_g4mtp_get_info(s->d, &info);
    memcpy(s->h, req->hidden, (size_t)info.backbone_hidden * sizeof(float));
    int32_t tok = req->hist[req->n_hist - 1];
    for (int i = 0; i < req->n_max; i++) {
        LMC_TRY(lmc_g4mtp_step(s->d, &kv, tok, s->h, n_kv, s->lg, s->h)); /* position held for the block */
        tok = argmax_f(s->lg, s->V);
        out->tokens[out->n++] = tok;
    }
    return LMC_OK;
}

static void mtp_free(lmc_draft_source *ds) {
    mtp_source *s = (mtp_source *)ds;
    free(s->h);
    free(s->lg);
    free(s);
}

static const lmc_draft_source_i mtp_i = {.name = "mtp", .propose = mtp_propose, .free = mtp_free};

typedef struct ids { int32_t v[64]; int n; } ids_t;
static int collect(int32_t t, const float *lg, int nv, void *ud) {
    ids_t *l = ud;
    (void)lg; (void)nv;
    if (l->n < 64) l->v[l->n++] = t;
    return 0;
}

static void check_loop(const char *kind) {
    rounds r;
    lmc_backend *be;
    lmc_model *tm = NULL;
    lmc_g4mtp *d = NULL;
    lmc_context *ctx = NULL;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    CHECK(load_rounds(kind, &r) == 0);
    CHECK(lmc_model_load(FX "/target", be, &tm) == 0);
    char ap[128];
    snprintf(ap, sizeof ap, FX "/assistant_%s", kind);
    if (tm) CHECK(lmc_g4mtp_load(ap, tm, &d) == 0);
    if (!d || !r.j) goto out;
    const cJSON *pj = cJSON_GetObjectItemCaseSensitive(r.j, "prompt_ids"), *gj = cJSON_GetObjectItemCaseSensitive(r.j, "plain_greedy_ids"), *it;
    int32_t prompt[64];
    int np = 0;
    ids_t ref = {0};
    cJSON_ArrayForEach(it, pj) if (np < 64) prompt[np++] = (int32_t)it->valuedouble;
    cJSON_ArrayForEach(it, gj) if (ref.n < 64) ref.v[ref.n++] = (int32_t)it->valuedouble;
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = np + ref.n + 16;
    cp.n_batch = 16;
    cp.want_hidden = 1;
    CHECK(lmc_context_init(&ctx, tm, &cp) == 0);
    if (!ctx) goto out;
    lmc_gen_params gp = {.n_predict = ref.n, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
    ids_t plain = {0}, spec = {0};
    lmc_gen_stats gs;
    CHECK(lmc_generate(ctx, prompt, np, &gp, collect, &plain, &gs) == 0);
    CHECK_MSG(plain.n == ref.n && !memcmp(plain.v, ref.v, (size_t)ref.n * 4), "%s: plain greedy differs from transformers", kind);
    mtp_source *s = calloc(1, sizeof *s);
    lmc_g4mtp_info info;
    lmc_g4mtp_get_info(d, &info);
    s->base.i = &mtp_i;
    s->base.flags = LMC_DRAFT_NEEDS_HIDDEN;
    s->d = d;
    s->V = info.vocab;
    s->h = malloc((size_t)info.backbone_hidden * 4);
    s->lg = malloc((size_t)info.vocab * 4);
    lmc_kv_clear(&ctx->kv, 0);
    lmc_spec_params spp = lmc_spec_default_params();
    spp.n_draft = 3;
    lmc_spec_stats ss;
    lmc_status st = lmc_spec_generate(ctx, &s->base, prompt, np, &gp, &spp, collect, &spec, &ss);
    CHECK_MSG(st == 0, "%s: %s", kind, lmc_last_error());
    CHECK_MSG(spec.n == ref.n && !memcmp(spec.v, ref.v, (size_t)ref.n * 4), "%s: speculative greedy differs", kind);
    CHECK_MSG(ss.n_drafted > 0, "%s: nothing drafted", kind);
    fprintf(stderr, "  %-8s spec loop: %d rounds, %d drafted, %d accepted, output = plain greedy\n", kind,
            ss.n_rounds, ss.n_drafted, ss.n_accepted);
    lmc_draft_source_free(&s->base);
out:
    lmc_context_free(ctx);
    lmc_g4mtp_free(d);
    lmc_model_free(tm);
    lmc_backend_free(be);
    free_rounds(&r);
}

/* 3b. Accepted drafts and rollbacks: a source proposing the known greedy continuation (every
 * other round with a wrong last token) so the loop accepts and rolls back; at every round the
 * drafter stepping from the live target cache must equal the drafter stepping from a fresh
 * prefill of the same history (stale slots of rejected tokens are never read). */
typedef struct oracle_source {
    lmc_draft_source base;
    lmc_g4mtp *d;
    lmc_model *tm;
    const int32_t *ref;
    int n_prompt, n_ref, round, n_checked;
    double err, scale, err_h;
    float *lg1, *lg2, *h1, *h2, *hp;
} oracle_source;

static lmc_status oracle_propose(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out) {
    oracle_source *s = (oracle_source *)ds;
    const int V = s->tm->cfg.vocab_size, B = s->tm->cfg.hidden_size, n = req->n_hist;
    out->n = 0;
    out->has_q = 0;
    if (n < 2 || !req->hidden) return LMC_OK;
    lmc_g4mtp_kv kv1 = lmc_g4mtp_target_kv(s->d, req->target->kv.k, req->target->kv.v, req->seq, n - 1);
    LMC_TRY(lmc_g4mtp_step(s->d, &kv1, req->hist[n - 1], req->hidden, n - 1, s->lg1, s->h1));
    lmc_context *c2 = NULL;
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = 64;
    cp.want_hidden = 1;
    LMC_TRY(lmc_context_init(&c2, s->tm, &cp));
    int32_t pos[64], sq[64] = {0};
    for (int i = 0; i < n - 1; i++) pos[i] = i;
    lmc_batch b = {n - 1, req->hist, pos, sq, NULL};
    lmc_status st = lmc_context_decode(c2, &b);
    if (st >= 0) {
        memcpy(s->hp, lmc_context_hidden(c2, 0), (size_t)B * 4);
        for (int i = 0; i < B; i++) s->err_h = fmax(s->err_h, fabs(s->hp[i] - req->hidden[i]));
        lmc_g4mtp_kv kv2 = lmc_g4mtp_target_kv(s->d, c2->kv.k, c2->kv.v, 0, n - 1);
        st = lmc_g4mtp_step(s->d, &kv2, req->hist[n - 1], s->hp, n - 1, s->lg2, s->h2);
    }
    lmc_context_free(c2);
    LMC_TRY(st);
    for (int i = 0; i < V; i++) {
        s->err = fmax(s->err, fabs(s->lg1[i] - s->lg2[i]));
        s->scale = fmax(s->scale, fabs(s->lg2[i]));
    }
    s->n_checked++;
    const int done = n - s->n_prompt; /* tokens generated so far; ref[done] is the next greedy token */
    for (int i = 0; i < req->n_max && done + i < s->n_ref; i++) out->tokens[out->n++] = s->ref[done + i];
    if (s->round++ % 2 && out->n > 1) out->tokens[out->n - 1] = (out->tokens[out->n - 1] + 1) % V;
    return LMC_OK;
}

static void oracle_free(lmc_draft_source *ds) {
    oracle_source *s = (oracle_source *)ds;
    free(s->lg1); free(s->lg2); free(s->h1); free(s->h2); free(s->hp);
    free(s);
}

static const lmc_draft_source_i oracle_i = {.name = "mtp-oracle", .propose = oracle_propose, .free = oracle_free};

static void check_rollback(void) {
    rounds r;
    lmc_backend *be;
    lmc_model *tm = NULL;
    lmc_g4mtp *d = NULL;
    lmc_context *ctx = NULL;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    CHECK(load_rounds("centroid", &r) == 0);
    CHECK(lmc_model_load(FX "/target", be, &tm) == 0);
    if (tm) CHECK(lmc_g4mtp_load(FX "/assistant_centroid", tm, &d) == 0);
    if (!d || !r.j) goto out;
    int32_t prompt[64], ref[64];
    int np = 0, nr = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(r.j, "prompt_ids")) if (np < 64) prompt[np++] = (int32_t)it->valuedouble;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(r.j, "plain_greedy_ids")) if (nr < 64) ref[nr++] = (int32_t)it->valuedouble;
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 8;
    cp.want_hidden = 1;
    CHECK(lmc_context_init(&ctx, tm, &cp) == 0);
    if (!ctx) goto out;
    oracle_source *s = calloc(1, sizeof *s);
    s->base.i = &oracle_i;
    s->base.flags = LMC_DRAFT_NEEDS_HIDDEN;
    s->d = d;
    s->tm = tm;
    s->ref = ref;
    s->n_prompt = np;
    s->n_ref = nr;
    s->lg1 = malloc(256 * 4); s->lg2 = malloc(256 * 4);
    s->h1 = malloc(64 * 4); s->h2 = malloc(64 * 4); s->hp = malloc(64 * 4);
    lmc_gen_params gp = {.n_predict = nr, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
    lmc_spec_params spp = lmc_spec_default_params();
    spp.n_draft = 2;
    lmc_spec_stats ss;
    ids_t got = {0};
    lmc_status st = lmc_spec_generate(ctx, &s->base, prompt, np, &gp, &spp, collect, &got, &ss);
    CHECK_MSG(st == 0, "%s", lmc_last_error());
    CHECK(got.n == nr && !memcmp(got.v, ref, (size_t)nr * 4));
    CHECK_MSG(ss.n_accepted > 0 && ss.n_accepted < ss.n_drafted, "accepted %d of %d", ss.n_accepted, ss.n_drafted);
    CHECK_MSG(s->n_checked >= 3, "only %d rounds checked", s->n_checked);
    CHECK_MSG(s->err <= F1_REL * s->scale, "drafter from the live cache differs by %.3g after rollbacks", s->err);
    CHECK_MSG(s->err_h <= 1e-4, "the loop's hidden state differs by %.3g from a fresh prefill", s->err_h);
    fprintf(stderr, "  rollback: %d rounds, %d of %d drafts accepted; drafter live vs fresh %.2e, hidden %.2e\n",
            s->n_checked, ss.n_accepted, ss.n_drafted, s->err, s->err_h);
    lmc_draft_source_free(&s->base);
out:
    lmc_context_free(ctx);
    lmc_g4mtp_free(d);
    lmc_model_free(tm);
    lmc_backend_free(be);
    free_rounds(&r);
}

/* 4. Refusals. */
static void check_refusals(void) {
    lmc_backend *be;
    lmc_model *tm = NULL, *other = NULL;
    lmc_g4mtp *d = NULL;
    CHECK(lmc_backend_cpu_init(&be, 1, 0) == 0);
    CHECK(lmc_model_load(FX "/target", be, &tm) == 0);
    /* a target of another architecture */
    CHECK(lmc_model_load("tests/fixtures/llama", be, &other) == 0);
    if (other) {
        CHECK(lmc_g4mtp_load(FX "/assistant_dense", other, &d) != 0 && d == NULL);
        CHECK(strstr(lmc_last_error(), "gemma4 target") != NULL);
    }
    /* a gemma4 target of another width: the A4B-style fixture (hidden 64 but no sliding/full pairing?) */
    lmc_model *a4b = NULL;
    CHECK(lmc_model_load("tests/fixtures/gemma4_a4b", be, &a4b) == 0);
    if (a4b) {
        lmc_status st = lmc_g4mtp_load(FX "/assistant_dense", a4b, &d);
        CHECK_MSG(st != 0 && strstr(lmc_last_error(), "head_dim") != NULL, "a4b pairing: %s", lmc_last_error());
        lmc_g4mtp_free(d);
        d = NULL;
    }
    /* a target directory is not an assistant; an assistant is not a model on its own */
    CHECK(lmc_g4mtp_load(FX "/target", tm, &d) != 0 && strstr(lmc_last_error(), "not a gemma4_assistant"));
    lmc_model *am = NULL;
    CHECK(lmc_model_load(FX "/assistant_dense", be, &am) != 0 && am == NULL);
    CHECK(strstr(lmc_last_error(), "drafter") != NULL);
    lmc_model_free(a4b);
    lmc_model_free(other);
    lmc_model_free(tm);
    lmc_backend_free(be);
}

/* 5. GGUF. */
static void check_gguf(const char *kind) {
    char ap[128], gp[256], rep[8192];
    snprintf(ap, sizeof ap, FX "/assistant_%s", kind);
    snprintf(gp, sizeof gp, "/tmp/lmc-g4mtp-%d-%s.gguf", (int)getpid(), kind);
    lmc_status st = lmc_gguf_assistant_convert(ap, gp);
    CHECK_MSG(st == 0, "%s: convert: %s", kind, lmc_last_error());
    if (st) return;
    CHECK(lmc_gguf_is_assistant(gp));
    int n_failed = -1;
    CHECK(lmc_gguf_assistant_verify(gp, 64, rep, sizeof rep, &n_failed) == 0);
    CHECK_MSG(n_failed == 0, "%s: verify:\n%s", kind, rep);
    CHECK(strstr(rep, "matches the target") != NULL);
    if (!strcmp(kind, "centroid")) CHECK(strstr(rep, "ok: mtp.token_ordering.weight is a permutation") != NULL);
    CHECK(lmc_gguf_assistant_verify(gp, 32, rep, sizeof rep, &n_failed) == 0 && n_failed == 1);
    CHECK(strstr(rep, "FAIL: backbone_embedding_length 64 does not match the target's embedding length 32") != NULL);
    /* layouts of the seed */
    lmc_gguf *g = NULL;
    CHECK(lmc_gguf_open(gp, &g) == 0);
    if (g) {
        const lmc_gguf_tensor *t = lmc_gguf_find_tensor(g, "mtp.pre_projection.weight");
        CHECK(t && t->ne[0] == 128 && t->ne[1] == 32);
        CHECK(lmc_gguf_find_tensor(g, "blk.3.attn_q.weight") && lmc_gguf_find_tensor(g, "token_embd.weight"));
        if (!strcmp(kind, "centroid")) {
            t = lmc_gguf_find_tensor(g, "mtp.centroids.weight");
            CHECK(t && t->ne[0] == 32 && t->ne[1] == 16);
            t = lmc_gguf_find_tensor(g, "mtp.token_ordering.weight");
            CHECK(t && t->type == LMC_GGML_I32 && t->ne[0] == 256);
        }
        lmc_gguf_close(g);
    }
    /* drafting from the GGUF equals drafting from the safetensors assistant, bit for bit */
    rounds r;
    lmc_backend *be;
    lmc_model *tm = NULL;
    lmc_g4mtp *ds = NULL, *dg = NULL;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    CHECK(load_rounds(kind, &r) == 0);
    CHECK(lmc_model_load(FX "/target", be, &tm) == 0);
    if (tm) CHECK(lmc_g4mtp_load(ap, tm, &ds) == 0);
    if (tm) {
        st = lmc_g4mtp_load(gp, tm, &dg);
        CHECK_MSG(st == 0, "%s: GGUF drafter: %s", kind, lmc_last_error());
    }
    if (ds && dg && r.j) {
        lmc_g4mtp_info a, b;
        lmc_g4mtp_get_info(ds, &a);
        lmc_g4mtp_get_info(dg, &b);
        CHECK(!memcmp(&a, &b, sizeof a));
        const int V = a.vocab, B = a.backbone_hidden;
        float *l1 = malloc((size_t)V * 4), *l2 = malloc((size_t)V * 4), *h1 = malloc((size_t)B * 4), *h2 = malloc((size_t)B * 4);
        float *x2 = malloc((size_t)2 * B * 4);
        int n = 0, same = 1;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r.j, "calls")) {
            int nx;
            double *x = arr(&r, cJSON_GetObjectItemCaseSensitive(c, "inputs_embeds"), &nx);
            if (!x) continue;
            for (int i = 0; i < 2 * B; i++) x2[i] = (float)x[i];
            free(x);
            lmc_tensor kc[2], vc[2];
            lmc_g4mtp_kv kv = {.seq = 0};
            for (int t = 0; t < 2; t++) {
                char key[64];
                int nk, nv;
                snprintf(key, sizeof key, "k_%s", TYPES[t]);
                double *k = arr(&r, cJSON_GetObjectItemCaseSensitive(c, key), &nk);
                snprintf(key, sizeof key, "v_%s", TYPES[t]);
                double *v = arr(&r, cJSON_GetObjectItemCaseSensitive(c, key), &nv);
                snprintf(key, sizeof key, "kv_shape_%s", TYPES[t]);
                kc[t] = cache_from(be, k, cJSON_GetObjectItemCaseSensitive(c, key));
                vc[t] = cache_from(be, v, cJSON_GetObjectItemCaseSensitive(c, key));
                kv.k[t] = &kc[t];
                kv.v[t] = &vc[t];
                kv.n_kv = jint(c, "kv_len_full_attention");
                free(k);
                free(v);
            }
            CHECK(lmc_g4mtp_step_embeds(ds, &kv, x2, jint(c, "pos"), l1, h1) == 0);
            CHECK(lmc_g4mtp_step_embeds(dg, &kv, x2, jint(c, "pos"), l2, h2) == 0);
            same &= !memcmp(l1, l2, (size_t)V * 4) && !memcmp(h1, h2, (size_t)B * 4);
            for (int t = 0; t < 2; t++) { be->i->release(be, &kc[t]); be->i->release(be, &vc[t]); }
            n++;
        }
        CHECK_MSG(same && n > 0, "%s: GGUF drafter differs from the safetensors one (%d calls)", kind, n);
        fprintf(stderr, "  %-8s GGUF: verified, %d calls identical to safetensors\n", kind, n);
        free(l1); free(l2); free(h1); free(h2); free(x2);
    }
    lmc_g4mtp_free(ds);
    lmc_g4mtp_free(dg);
    lmc_model_free(tm);
    lmc_backend_free(be);
    free_rounds(&r);
    remove(gp);
}

/* A broken assistant GGUF: duplicated ordering ids, a centroid table of the wrong shape, a vocabulary
 * that the centroids do not divide; and files that are not assistants. */
static void gguf_broken(void) {
    char gp[128], rep[8192];
    snprintf(gp, sizeof gp, "/tmp/lmc-g4mtp-%d-broken.gguf", (int)getpid());
    lmc_gguf_writer *w = NULL;
    CHECK(lmc_gguf_writer_init(&w) == 0);
    if (!w) return;
    static float emb[8 * 10], cen[8 * 3], pre[16 * 8], post[8 * 8], nrm[8];
    int32_t ord[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 8};
    lmc_gguf_writer_add_str(w, "general.architecture", LMC_GGUF_ASSISTANT_ARCH);
    lmc_gguf_writer_add_u32(w, LMC_GGUF_ASSISTANT_ARCH ".embedding_length", 8);
    lmc_gguf_writer_add_u32(w, LMC_GGUF_ASSISTANT_ARCH ".backbone_embedding_length", 8);
    lmc_gguf_writer_add_u32(w, LMC_GGUF_ASSISTANT_ARCH ".vocab_size", 10);
    lmc_gguf_writer_add_u32(w, LMC_GGUF_ASSISTANT_ARCH ".num_centroids", 4);
    lmc_gguf_writer_add_u32(w, LMC_GGUF_ASSISTANT_ARCH ".centroid_top_k", 2);
    lmc_gguf_writer_add_bool(w, LMC_GGUF_ASSISTANT_ARCH ".use_ordered_embeddings", 1);
    int64_t ne_emb[2] = {8, 10}, ne_cen[2] = {8, 3}, ne_pre[2] = {16, 8}, ne_post[2] = {8, 8}, ne_n[1] = {8}, ne_o[1] = {10};
    lmc_gguf_writer_add_tensor(w, "token_embd.weight", LMC_GGML_F32, 2, ne_emb, emb);
    lmc_gguf_writer_add_tensor(w, "output_norm.weight", LMC_GGML_F32, 1, ne_n, nrm);
    lmc_gguf_writer_add_tensor(w, "mtp.pre_projection.weight", LMC_GGML_F32, 2, ne_pre, pre);
    lmc_gguf_writer_add_tensor(w, "mtp.post_projection.weight", LMC_GGML_F32, 2, ne_post, post);
    lmc_gguf_writer_add_tensor(w, "mtp.centroids.weight", LMC_GGML_F32, 2, ne_cen, cen);
    lmc_gguf_writer_add_tensor(w, "mtp.token_ordering.weight", LMC_GGML_I32, 1, ne_o, ord);
    CHECK(lmc_gguf_writer_write(w, gp) == 0);
    lmc_gguf_writer_free(w);
    int n_failed = 0;
    CHECK(lmc_gguf_assistant_verify(gp, 0, rep, sizeof rep, &n_failed) == 0);
    CHECK_MSG(n_failed == 3, "expected 3 failures:\n%s", rep);
    CHECK(strstr(rep, "FAIL: mtp.centroids.weight is [8, 4]") != NULL);
    CHECK(strstr(rep, "FAIL: vocab_size 10 is divisible by num_centroids 4") != NULL);
    CHECK(strstr(rep, "FAIL: mtp.token_ordering.weight is a permutation") != NULL);
    lmc_gguf_assistant *a = NULL;
    CHECK(lmc_gguf_assistant_open(gp, &a) != 0 && a == NULL); /* no lmc.hf_config */
    remove(gp);
    /* not assistants */
    CHECK(!lmc_gguf_is_assistant(FX "/target/config.json"));
    CHECK(lmc_gguf_assistant_convert(FX "/target", gp) != 0 && strstr(lmc_last_error(), "not gemma4_assistant"));
    CHECK(lmc_gguf_assistant_verify("/nonexistent.gguf", 0, rep, sizeof rep, &n_failed) != 0);
}

/* Damaged assistant GGUF files (bytes flipped in the header, metadata and config text) are
 * refused or read, never a crash (run under ASan/UBSan). */
static void gguf_flips(void) {
    char gp[128], bad[128], rep[8192];
    snprintf(gp, sizeof gp, "/tmp/lmc-g4mtp-%d-flip.gguf", (int)getpid());
    snprintf(bad, sizeof bad, "/tmp/lmc-g4mtp-%d-flip-bad.gguf", (int)getpid());
    CHECK(lmc_gguf_assistant_convert(FX "/assistant_centroid", gp) == 0);
    FILE *f = fopen(gp, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    lmc_backend *be;
    lmc_model *tm = NULL;
    CHECK(lmc_backend_cpu_init(&be, 1, 0) == 0);
    CHECK(lmc_model_load(FX "/target", be, &tm) == 0);
    unsigned rng = 12345;
    int n_ok = 0, n_refused = 0;
    const long span = n < 6000 ? n : 6000; /* header, metadata (with lmc.hf_config), tensor infos */
    for (int it = 0; it < 300 && tm; it++) {
        unsigned char *m = malloc((size_t)n);
        memcpy(m, buf, (size_t)n);
        for (int k = 0; k < 1 + it % 3; k++) {
            rng = rng * 1103515245u + 12345u;
            long at = (long)((rng >> 8) % (unsigned)span);
            rng = rng * 1103515245u + 12345u;
            m[at] ^= (unsigned char)(1u << ((rng >> 16) % 8));
        }
        FILE *o = fopen(bad, "wb");
        fwrite(m, 1, (size_t)n, o);
        fclose(o);
        free(m);
        int nf = 0;
        lmc_gguf_assistant_verify(bad, 64, rep, sizeof rep, &nf);
        lmc_g4mtp *d = NULL;
        if (lmc_g4mtp_load(bad, tm, &d) == 0) {
            n_ok++;
            float lg[256], h[64], hp[64] = {0};
            lmc_g4mtp_kv kv = {.seq = 0, .n_kv = 0};
            CHECK(lmc_g4mtp_step(d, &kv, 5, hp, 3, lg, h) != 0); /* no K/V: refused, not read */
            lmc_g4mtp_free(d);
        } else {
            n_refused++;
        }
    }
    CHECK(n_refused > 0);
    fprintf(stderr, "  300 damaged GGUF assistants: %d loaded, %d refused\n", n_ok, n_refused);
    lmc_model_free(tm);
    lmc_backend_free(be);
    free(buf);
    remove(gp);
    remove(bad);
}

static void gguf_dense(void) { check_gguf("dense"); }
static void gguf_centroid(void) { check_gguf("centroid"); }

/* 6. Chained drafts equal the host loop of steps (several calls: on a recording backend the first
 * runs unrecorded, the second records, later ones replay with new positions, tokens and states). */
static void check_chain(const char *kind) {
    rounds r;
    lmc_backend *be = NULL;
    lmc_model *tm = NULL;
    lmc_g4mtp *d = NULL;
    lmc_context *ctx = NULL;
    const char *bn = getenv("LMC_TEST_BACKEND");
    lmc_backend_params bp = {.name = bn && *bn ? bn : "cpu", .n_threads = 2};
    CHECK(lmc_backend_init(&be, &bp) == 0);
    CHECK(load_rounds(kind, &r) == 0);
    if (!be || !r.j) goto out;
    CHECK(lmc_model_load(FX "/target", be, &tm) == 0);
    char ap[128];
    snprintf(ap, sizeof ap, FX "/assistant_%s", kind);
    if (tm) CHECK(lmc_g4mtp_load(ap, tm, &d) == 0);
    if (!d) goto out;
    const cJSON *seqj = cJSON_GetObjectItemCaseSensitive(r.j, "target_sequence"), *it;
    int n = cJSON_GetArraySize(seqj), i = 0;
    int32_t *ids = calloc((size_t)n, sizeof *ids), *pos = calloc((size_t)n, sizeof *pos), *sq = calloc((size_t)n, 4);
    uint8_t *want = malloc((size_t)n);
    cJSON_ArrayForEach(it, seqj) { pos[i] = i; want[i] = 1; ids[i++] = (int32_t)it->valuedouble; }
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n + 8;
    cp.want_hidden = 1;
    CHECK(lmc_context_init(&ctx, tm, &cp) == 0);
    lmc_batch b = {n, ids, pos, sq, want};
    CHECK(ctx && lmc_context_decode(ctx, &b) == 0);
    lmc_g4mtp_info info;
    lmc_g4mtp_get_info(d, &info);
    const int B = info.backbone_hidden, V = info.vocab;
    float *h = malloc((size_t)B * 4), *lg = malloc((size_t)V * 4);
    int32_t got[24], ref[24];
    int n_calls = 0, n_same = 0, distinct = 0;
    /* positions from the end of the sequence back, chain lengths 1, 4 and 20 (past one recording) */
    for (int rep = 0; rep < 8 && ctx && n >= 10; rep++) {
        const int p = n - 1 - (rep % 4) * 2, len = rep == 3 ? 20 : rep % 2 ? 4 : 1 + rep;
        lmc_g4mtp_kv kv = lmc_g4mtp_target_kv(d, ctx->kv.k, ctx->kv.v, 0, p);
        int32_t tok = ids[p];
        memcpy(h, lmc_context_hidden(ctx, p - 1), (size_t)B * 4);
        lmc_status st = LMC_OK;
        for (int j = 0; j < len && st >= 0; j++) {
            st = lmc_g4mtp_step(d, &kv, tok, h, p, lg, h);
            tok = ref[j] = argmax_f(lg, V);
        }
        CHECK_MSG(st == 0, "%s: %s", kind, lmc_last_error());
        memset(got, 0xff, sizeof got);
        st = lmc_g4mtp_draft(d, &kv, ids[p], lmc_context_hidden(ctx, p - 1), p, len, got);
        CHECK_MSG(st == 0, "%s: %s", kind, lmc_last_error());
        n_calls++;
        n_same += !memcmp(got, ref, (size_t)len * 4);
        CHECK_MSG(!memcmp(got, ref, (size_t)len * 4), "%s: chained drafts differ at pos %d (len %d): %d %d %d vs %d %d %d",
                  kind, p, len, got[0], got[1 % len], got[2 % len], ref[0], ref[1 % len], ref[2 % len]);
        for (int j = 1; j < len; j++) distinct += ref[j] != ref[0];
    }
    CHECK_MSG(n_calls == 8, "%s: %d chained calls", kind, n_calls);
    fprintf(stderr, "  %-8s %s drafts (%s): %d of %d calls equal to the host loop (%d ids differ from the first)\n",
            kind, info.chained ? "chained" : "host-loop", bp.name, n_same, n_calls, distinct);
    free(h); free(lg); free(ids); free(pos); free(sq); free(want);
out:
    lmc_context_free(ctx);
    lmc_g4mtp_free(d);
    lmc_model_free(tm);
    if (be) lmc_backend_free(be);
    free_rounds(&r);
}

static void chain_dense(void) { check_chain("dense"); }
static void chain_centroid(void) { check_chain("centroid"); }
static void recorded_dense(void) { check_recorded("dense"); }
static void recorded_centroid(void) { check_recorded("centroid"); }
static void handover_dense(void) { check_handover("dense"); }
static void handover_centroid(void) { check_handover("centroid"); }
static void loop_dense(void) { check_loop("dense"); }
static void loop_centroid(void) { check_loop("centroid"); }

int main(void) {
    RUN(recorded_dense);
    RUN(recorded_centroid);
    RUN(handover_dense);
    RUN(handover_centroid);
    RUN(loop_dense);
    RUN(loop_centroid);
    RUN(chain_dense);
    RUN(chain_centroid);
    RUN(check_rollback);
    RUN(check_refusals);
    RUN(gguf_dense);
    RUN(gguf_centroid);
    RUN(gguf_broken);
    RUN(gguf_flips);
    return TEST_END();
}
