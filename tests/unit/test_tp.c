/* test_tp.c — tensor parallelism on the CPU (model/tp.h, gen/tp_context.h).
 *
 *   - the host all-reduce: N threads, successive reduces of different sizes, the
 *     result bitwise equal on every rank and to the sum in rank order; abort
 *     wakes a rank waiting in a reduce;
 *   - strided (row-parallel) weight views: the CPU matmul over a column slice of
 *     every weight type equals the matmul over a packed copy and a double
 *     reference of the slice (decode, small batch and GEMM paths, fast and
 *     reference kernels); a cut through a block is refused;
 *   - every parity fixture at --tp 1, 2, 4 against the single-backend context:
 *     prompt logits at every position and greedy decoding at F2
 *     (max|Δ| ≤ 1e-3 · max|ref|, ids equal), --tp 1 bitwise; the plans that do not
 *     divide are refused with a message; an MLX-quantized model split at tp 2
 *     (strided quantized views in a whole forward).
 * LMC_FIXTURES sets the fixtures folder. */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#include "core/quant.h"
#include "gen/generate.h"
#include "gen/tp_context.h"
#include "model/quantize.h"
#include "model/tp.h"
#include "test_rng.h"

#define F2_REL 1e-3

static float frand(void) { /* uniform in [-1, 1) */
    return (float)((rng_next() >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* ---- host all-reduce ------------------------------------------------------------------------ */

#define AR_RANKS 4
#define AR_CALLS 6
static const int64_t ar_sizes[AR_CALLS] = {1, 7, 1000, 3, 4096, 5};

typedef struct ar_arg {
    lmc_tp_comm *comm;
    lmc_backend *be;
    int rank;
    float *out[AR_CALLS];    /* what this rank got from each reduce */
    lmc_status st;
} ar_arg;

static float ar_value(int rank, int call, int64_t i) { return (float)((rank + 1) * 0.37 + call * 1.1 + sin((double)i) * (rank + 0.5)); }

static void *ar_main(void *p) {
    ar_arg *a = p;
    for (int c = 0; c < AR_CALLS; c++) {
        lmc_tensor t = lmc_tensor_make(LMC_DTYPE_F32, ar_sizes[c], 1, 1, 1);
        a->out[c] = malloc((size_t)ar_sizes[c] * sizeof(float));
        t.data = a->out[c];
        for (int64_t i = 0; i < ar_sizes[c]; i++) a->out[c][i] = ar_value(a->rank, c, i);
        lmc_status st = a->comm->i->all_reduce(a->comm, a->rank, a->be, &t);
        if (st < 0) a->st = st;
    }
    return NULL;
}

static void test_host_all_reduce(void) {
    for (int n = 1; n <= AR_RANKS; n++) {
        lmc_tp_comm *comm;
        CHECK(lmc_tp_comm_host_init(&comm, n) == LMC_OK);
        lmc_backend *be;
        CHECK(lmc_backend_cpu_init(&be, 1, 0) == LMC_OK);
        ar_arg args[AR_RANKS];
        pthread_t th[AR_RANKS];
        for (int r = 0; r < n; r++) {
            memset(&args[r], 0, sizeof args[r]);
            args[r] = (ar_arg){.comm = comm, .be = be, .rank = r};
            pthread_create(&th[r], NULL, ar_main, &args[r]);
        }
        for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
        for (int c = 0; c < AR_CALLS; c++) {
            int bad = 0;
            for (int64_t i = 0; i < ar_sizes[c]; i++) {
                float want = ar_value(0, c, i);
                for (int r = 1; r < n; r++) want += ar_value(r, c, i);
                for (int r = 0; r < n; r++) bad += memcmp(&args[r].out[c][i], &want, sizeof want) != 0;
            }
            CHECK_MSG(bad == 0, "%d ranks, call %d: %d values differ from the rank-order sum", n, c, bad);
        }
        for (int r = 0; r < n; r++) {
            CHECK(args[r].st == LMC_OK);
            for (int c = 0; c < AR_CALLS; c++) free(args[r].out[c]);
        }
        lmc_tp_comm_free(comm);
        lmc_backend_free(be);
    }
}

static void *abort_waiter(void *p) {
    ar_arg *a = p;
    float x = 1.0f;
    lmc_tensor t = lmc_tensor_make(LMC_DTYPE_F32, 1, 1, 1, 1);
    t.data = &x;
    a->st = a->comm->i->all_reduce(a->comm, a->rank, a->be, &t);
    return NULL;
}

static void test_host_abort(void) {
    lmc_tp_comm *comm;
    CHECK(lmc_tp_comm_host_init(&comm, 2) == LMC_OK);
    lmc_backend *be;
    CHECK(lmc_backend_cpu_init(&be, 1, 0) == LMC_OK);
    ar_arg a = {.comm = comm, .be = be, .rank = 0, .st = LMC_OK};
    pthread_t th;
    pthread_create(&th, NULL, abort_waiter, &a);
    usleep(20000);          /* rank 0 waits for rank 1, which fails instead of reducing */
    comm->i->abort(comm);
    pthread_join(th, NULL);
    CHECK(a.st < 0);
    CHECK(strstr(lmc_last_error(), "") != NULL);
    a.st = LMC_OK;
    abort_waiter(&a);       /* an aborted group fails at once */
    CHECK(a.st < 0);
    lmc_tp_comm_free(comm);
    lmc_backend_free(be);
}

/* ---- strided weight views ------------------------------------------------------------------- */

#define SV_IN 512
#define SV_OUT 20

typedef struct qweight {
    lmc_tensor w;          /* [SV_IN, SV_OUT] */
    lmc_quant_mlx aux;
    void *data, *scales, *biases;
} qweight;

static int make_weight(lmc_dtype t, int group, qweight *q) {
    memset(q, 0, sizeof *q);
    q->w = lmc_tensor_make(t, SV_IN, SV_OUT, 1, 1);
    const size_t rb = lmc_dtype_row_bytes(t, SV_IN);
    q->data = calloc(SV_OUT, rb);
    float row[SV_IN];
    const int mlx = lmc_dtype_is_mlx(t);
    if (mlx) {
        q->aux.group_size = group;
        q->aux.scales = lmc_tensor_make(LMC_DTYPE_F32, SV_IN / group, SV_OUT, 1, 1);
        q->aux.biases = q->aux.scales;
        q->scales = calloc((size_t)SV_OUT * (SV_IN / group), sizeof(float));
        q->biases = calloc((size_t)SV_OUT * (SV_IN / group), sizeof(float));
        q->aux.scales.data = q->scales;
        q->aux.biases.data = q->biases;
        q->w.aux = &q->aux;
    }
    for (int o = 0; o < SV_OUT; o++) {
        for (int i = 0; i < SV_IN; i++) row[i] = frand();
        char *dst = (char *)q->data + (size_t)o * rb;
        if (t == LMC_DTYPE_F32) memcpy(dst, row, sizeof row);
        else if (t == LMC_DTYPE_F16 || t == LMC_DTYPE_BF16) {
            for (int i = 0; i < SV_IN; i++) {
                uint16_t h = t == LMC_DTYPE_F16 ? lmc_f32_to_f16(row[i]) : lmc_f32_to_bf16(row[i]);
                memcpy(dst + 2 * i, &h, 2);
            }
        } else {
            lmc_mlx_row mr = {group, LMC_DTYPE_F32, NULL, NULL};
            if (mlx) {
                mr.scales = (float *)q->scales + (size_t)o * (SV_IN / group);
                mr.biases = (float *)q->biases + (size_t)o * (SV_IN / group);
            }
            if (lmc_quantize_row(t, row, dst, mlx ? &mr : NULL, SV_IN) < 0) return -1;
        }
    }
    q->w.data = q->data;
    return 0;
}

static void free_weight(qweight *q) {
    free(q->data);
    free(q->scales);
    free(q->biases);
}

/* A contiguous copy of a strided 2-D view (and of its MLX side data). */
static lmc_tensor pack_view(const lmc_tensor *v, lmc_quant_mlx *aux, void **bufs) {
    lmc_tensor p = lmc_tensor_make(v->type, v->ne[0], v->ne[1], 1, 1);
    const size_t rb = lmc_dtype_row_bytes(v->type, v->ne[0]);
    bufs[0] = malloc(rb * (size_t)v->ne[1]);
    for (int64_t r = 0; r < v->ne[1]; r++) memcpy((char *)bufs[0] + r * rb, (const char *)v->data + r * v->nb[1], rb);
    p.data = bufs[0];
    if (lmc_dtype_is_mlx(v->type)) {
        const lmc_quant_mlx *q = v->aux;
        *aux = *q;
        const lmc_tensor *src[2] = {&q->scales, &q->biases};
        lmc_tensor *dst[2] = {&aux->scales, &aux->biases};
        for (int k = 0; k < 2; k++) {
            void *b;
            *dst[k] = pack_view(src[k], NULL, &b);
            bufs[1 + k] = b;
        }
        p.aux = aux;
    }
    return p;
}

static void check_slice(lmc_backend *be, const qweight *q, int64_t c0, int64_t n, int n_tok, const char *what) {
    lmc_tensor v;
    lmc_quant_mlx vaux, paux;
    CHECK(lmc_tp_view_cols(&q->w, c0, n, &v, &vaux) == LMC_OK);
    CHECK(v.ne[0] == n && v.nb[1] == q->w.nb[1]);
    void *bufs[3] = {0};
    lmc_tensor p = pack_view(&v, &paux, bufs);
    float *x = malloc((size_t)n * n_tok * sizeof(float)), *y1 = malloc((size_t)SV_OUT * n_tok * sizeof(float));
    float *y2 = malloc((size_t)SV_OUT * n_tok * sizeof(float)), full[SV_IN];
    for (int64_t i = 0; i < n * n_tok; i++) x[i] = frand();
    lmc_tensor xt = lmc_tensor_make(LMC_DTYPE_F32, n, n_tok, 1, 1), yt = lmc_tensor_make(LMC_DTYPE_F32, SV_OUT, n_tok, 1, 1);
    xt.data = x;
    yt.data = y1;
    be->i->matmul(be, &yt, &v, &xt);
    yt.data = y2;
    be->i->matmul(be, &yt, &p, &xt);
    be->i->sync(be);
    double err_pack = 0, err_ref = 0, scale = 0;
    for (int o = 0; o < SV_OUT; o++) {
        lmc_tensor_row_to_f32(&q->w, o, full); /* the whole row, dequantized; the slice is [c0, c0 + n) */
        for (int t = 0; t < n_tok; t++) {
            double s = 0;
            for (int64_t i = 0; i < n; i++) s += (double)full[c0 + i] * x[(size_t)t * n + i];
            const double a = y1[(size_t)t * SV_OUT + o], b = y2[(size_t)t * SV_OUT + o];
            err_pack = fmax(err_pack, fabs(a - b));
            err_ref = fmax(err_ref, fabs(a - s));
            scale = fmax(scale, fabs(s));
        }
    }
    CHECK_MSG(err_pack <= 1e-6 * scale, "%s cols [%lld,+%lld) n_tok %d: view vs packed %g (scale %g)", what,
              (long long)c0, (long long)n, n_tok, err_pack, scale);
    /* the fast kernels quantize activations for some types: a looser bound against the exact slice */
    CHECK_MSG(err_ref <= 2e-2 * scale, "%s cols [%lld,+%lld) n_tok %d: view vs reference %g (scale %g)", what,
              (long long)c0, (long long)n, n_tok, err_ref, scale);
    free(x);
    free(y1);
    free(y2);
    for (int k = 0; k < 3; k++) free(bufs[k]);
}

static void test_strided_views(void) {
    struct { lmc_dtype t; int group; } types[] = {
        {LMC_DTYPE_F32, 0},  {LMC_DTYPE_F16, 0},  {LMC_DTYPE_BF16, 0}, {LMC_DTYPE_Q8_0, 0}, {LMC_DTYPE_Q4_0, 0},
        {LMC_DTYPE_Q4_K, 0}, {LMC_DTYPE_Q6_K, 0}, {LMC_DTYPE_MLX4, 32}, {LMC_DTYPE_MLX4, 64}, {LMC_DTYPE_MLX8, 32},
        {LMC_DTYPE_MLX3, 32}, {LMC_DTYPE_MLX6, 128},
    };
    lmc_backend *fast, *ref;
    CHECK(lmc_backend_cpu_init(&fast, 2, 0) == LMC_OK);
    CHECK(lmc_backend_cpu_init(&ref, 1, 1) == LMC_OK);
    const int toks[] = {1, 3, 16};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        qweight q;
        CHECK(make_weight(types[k].t, types[k].group, &q) == 0);
        const int64_t unit = lmc_dtype_is_mlx(types[k].t) ? types[k].group : lmc_dtype_block_elems(types[k].t);
        char what[64];
        snprintf(what, sizeof what, "%s/g%d", lmc_dtype_name(types[k].t), types[k].group);
        for (int N = 2; N <= 4; N *= 2) {
            const int64_t n = SV_IN / N;
            for (int r = 0; r < N; r++) {
                if (n % unit) { /* the slice would cut a block: refused */
                    lmc_tensor v;
                    lmc_quant_mlx a;
                    CHECK(lmc_tp_view_cols(&q.w, r * n, n, &v, &a) == LMC_ERR_UNSUPPORTED);
                    CHECK(strstr(lmc_last_error(), "block") != NULL);
                    continue;
                }
                for (size_t t = 0; t < sizeof toks / sizeof toks[0]; t++) {
                    check_slice(fast, &q, r * n, n, toks[t], what);
                    check_slice(ref, &q, r * n, n, toks[t], what);
                }
            }
        }
        /* row views: the same rows of the same bytes */
        lmc_tensor v;
        lmc_quant_mlx a;
        CHECK(lmc_tp_view_rows(&q.w, 5, 10, &v, &a) == LMC_OK);
        float r1[SV_IN], r2[SV_IN];
        lmc_tensor_row_to_f32(&v, 3, r1);
        lmc_tensor_row_to_f32(&q.w, 8, r2);
        CHECK(memcmp(r1, r2, sizeof r1) == 0);
        CHECK(lmc_tp_view_rows(&q.w, 15, 10, &v, &a) == LMC_ERR_ARG);
        free_weight(&q);
    }
    /* a cut inside a Q8_0 block */
    qweight q;
    CHECK(make_weight(LMC_DTYPE_Q8_0, 0, &q) == 0);
    lmc_tensor v;
    lmc_quant_mlx a;
    CHECK(lmc_tp_view_cols(&q.w, 16, 64, &v, &a) == LMC_ERR_UNSUPPORTED);
    free_weight(&q);
    lmc_backend_free(fast);
    lmc_backend_free(ref);
}

/* ---- whole models at --tp N vs one backend ---------------------------------------------------- */

#define N_GEN 6
#define PROMPT_LEN 7

typedef struct run_out {
    float *prompt_logits;      /* [PROMPT_LEN, V] */
    int32_t ids[N_GEN];
    float *gen_logits;         /* [N_GEN, V] */
    int n_gen;
} run_out;

typedef struct gen_cb { run_out *o; int V; } gen_cb;

static int on_token(int32_t tok, const float *logits, int n_vocab, void *ud) {
    gen_cb *g = ud;
    if (g->o->n_gen < N_GEN) {
        g->o->ids[g->o->n_gen] = tok;
        memcpy(g->o->gen_logits + (size_t)g->o->n_gen * n_vocab, logits, (size_t)n_vocab * sizeof(float));
        g->o->n_gen++;
    }
    return 0;
}

/* Prompt logits at every position (one prefill), then greedy decoding in a fresh sequence. */
static lmc_status run_model(lmc_context *ctx, const int32_t *prompt, run_out *o) {
    const int V = ctx->model->cfg.vocab_size;
    o->prompt_logits = calloc((size_t)PROMPT_LEN * V, sizeof(float));
    o->gen_logits = calloc((size_t)N_GEN * V, sizeof(float));
    o->n_gen = 0;
    int32_t pos[PROMPT_LEN], seq[PROMPT_LEN];
    uint8_t want[PROMPT_LEN];
    for (int i = 0; i < PROMPT_LEN; i++) { pos[i] = i; seq[i] = 0; want[i] = 1; }
    lmc_batch b = {.n_tokens = PROMPT_LEN, .token = prompt, .pos = pos, .seq = seq, .want_logits = want};
    LMC_TRY(lmc_context_decode(ctx, &b));
    for (int i = 0; i < PROMPT_LEN; i++)
        memcpy(o->prompt_logits + (size_t)i * V, lmc_context_logits(ctx, i), (size_t)V * sizeof(float));
    lmc_kv_clear(&ctx->kv, 0);
    lmc_gen_params gp = {.n_predict = N_GEN, .seq = 0, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
    gp.sampler.temperature = 0;
    gen_cb g = {o, V};
    return lmc_generate(ctx, prompt, PROMPT_LEN, &gp, on_token, &g, NULL);
}

static void free_run(run_out *o) {
    free(o->prompt_logits);
    free(o->gen_logits);
}

static double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static int n_tp_runs[5], n_tp_refused[5];
static int pack_slices; /* give the ranks packed slices (the device path) instead of strided views */

/* Compare one model at tp 1, 2, 4 against its single-backend run. */
static void check_model_tp(const char *dir, const char *name, int must_split2) {
    lmc_backend *host;
    if (lmc_backend_cpu_init(&host, 1, 0) < 0) { CHECK(0); return; }
    lmc_model *m;
    if (lmc_model_load(dir, host, &m) < 0) {
        CHECK_MSG(0, "%s: %s", name, lmc_last_error());
        lmc_backend_free(host);
        return;
    }
    const int V = m->cfg.vocab_size;
    int32_t prompt[PROMPT_LEN];
    for (int i = 0; i < PROMPT_LEN; i++) prompt[i] = (int32_t)((i * 37 + 11) % V);
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 4; /* the prompt runs as two forwards: a prefill chunk, then one continuing it */
    lmc_context *ctx;
    run_out ref = {0};
    CHECK(lmc_context_init(&ctx, m, &cp) == LMC_OK);
    CHECK_MSG(run_model(ctx, prompt, &ref) == LMC_OK, "%s: %s", name, lmc_last_error());
    lmc_context_free(ctx);
    const double pscale = max_abs(ref.prompt_logits, (size_t)PROMPT_LEN * V);
    const double gscale = max_abs(ref.gen_logits, (size_t)N_GEN * V);
    for (int N = 1; N <= 4; N *= 2) {
        lmc_tp_params tp = lmc_tp_default_params();
        tp.n_ranks = N;
        tp.pack_slices = pack_slices;
        lmc_status st = lmc_context_init_tp(&ctx, m, &cp, &tp);
        if (st == LMC_ERR_UNSUPPORTED) {
            CHECK_MSG(strstr(lmc_last_error(), "tensor") != NULL, "%s tp %d: %s", name, N, lmc_last_error());
            CHECK_MSG(!(must_split2 && N == 2), "%s tp 2 refused: %s", name, lmc_last_error());
            n_tp_refused[N]++;
            continue;
        }
        CHECK_MSG(st == LMC_OK, "%s tp %d: %s", name, N, lmc_last_error());
        if (st < 0) continue;
        run_out got = {0};
        st = run_model(ctx, prompt, &got);
        CHECK_MSG(st == LMC_OK, "%s tp %d: %s", name, N, lmc_last_error());
        double ep = max_diff(got.prompt_logits, ref.prompt_logits, (size_t)PROMPT_LEN * V);
        double eg = max_diff(got.gen_logits, ref.gen_logits, (size_t)N_GEN * V);
        CHECK_MSG(got.n_gen == ref.n_gen && memcmp(got.ids, ref.ids, sizeof got.ids) == 0, "%s tp %d: greedy ids differ",
                  name, N);
        if (N == 1) {
            CHECK_MSG(ep == 0 && eg == 0, "%s tp 1: not bitwise the single path (%g, %g)", name, ep, eg);
        } else {
            CHECK_MSG(ep <= F2_REL * pscale, "%s tp %d: prompt logits max|Δ| %g > %g", name, N, ep, F2_REL * pscale);
            CHECK_MSG(eg <= F2_REL * gscale, "%s tp %d: greedy logits max|Δ| %g > %g", name, N, eg, F2_REL * gscale);
        }
        n_tp_runs[N]++;
        free_run(&got);
        lmc_context_free(ctx);
    }
    free_run(&ref);
    lmc_model_free(m);
    lmc_backend_free(host);
}

static const char *fixtures_dir(void) {
    const char *e = getenv("LMC_FIXTURES");
    return e && *e ? e : "tests/fixtures";
}

static int has_config(const char *dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    return access(p, R_OK) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_fixtures(void) {
    DIR *d = opendir(fixtures_dir());
    CHECK(d != NULL);
    if (!d) return;
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%s/%s", fixtures_dir(), names[i]);
        if (has_config(dir)) {
            /* every fixture with 4 heads and 2 or 4 KV heads splits at tp 2, except the refused layouts */
            static const char *refused[] = {"gemma4", "olmo2", "olmo3", "olmoe", "flex_olmo", /* targeted port; q/k norm over all heads */
                                           "gpt_oss"}; /* sinks and biased interleaved experts */
            int expect = 1;
            for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++)
                if (!strncmp(names[i], refused[k], strlen(refused[k]))) expect = 0;
            check_model_tp(dir, names[i], expect);
        }
        free(names[i]);
    }
    fprintf(stderr, "  tp runs: tp1 %d, tp2 %d (refused %d), tp4 %d (refused %d)\n", n_tp_runs[1], n_tp_runs[2],
            n_tp_refused[2], n_tp_runs[4], n_tp_refused[4]);
    CHECK(n_tp_runs[2] >= 40);
    CHECK(n_tp_runs[4] >= 40);
}

/* The plan's refusals name the reason. */
static void test_plan_refusals(void) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/llama", fixtures_dir());
    lmc_backend *host;
    CHECK(lmc_backend_cpu_init(&host, 1, 0) == LMC_OK);
    lmc_model *m;
    if (lmc_model_load(dir, host, &m) < 0) { CHECK(0); lmc_backend_free(host); return; }
    lmc_tp_plan p;
    CHECK(lmc_tp_plan_make(m, 3, &p) == LMC_ERR_UNSUPPORTED);
    CHECK(strstr(lmc_last_error(), "n_heads 4") != NULL);
    CHECK(lmc_tp_plan_make(m, 0, &p) == LMC_ERR_ARG);
    CHECK(lmc_tp_plan_make(m, 8, &p) == LMC_ERR_UNSUPPORTED); /* 4 heads over 8 ranks */
    CHECK(lmc_tp_plan_make(m, 4, &p) == LMC_OK);
    CHECK(p.n_heads == 1 && p.n_kv_heads == 1 && p.kv_replicated == 1 && p.intermediate == 32);
    CHECK(lmc_tp_plan_make(m, 2, &p) == LMC_OK);
    CHECK(p.n_heads == 2 && p.n_kv_heads == 1 && p.kv_replicated == 0 && p.intermediate == 64);
    /* each rank's cache holds its KV heads only */
    lmc_tp_params tp = lmc_tp_default_params();
    tp.n_ranks = 2;
    lmc_context *ctx;
    CHECK(lmc_context_init_tp(&ctx, m, NULL, &tp) == LMC_OK);
    CHECK(ctx->kv.k[0].ne[0] == (int64_t)m->cfg.n_kv_heads / 2 * m->cfg.head_dim);
    CHECK(ctx->fs.q.ne[0] == (int64_t)m->cfg.n_heads / 2 * m->cfg.head_dim);
    /* a bad batch is refused before the ranks run and leaves the context usable */
    int32_t tok = m->cfg.vocab_size, pos = 0, seq = 0;
    lmc_batch bad = {.n_tokens = 1, .token = &tok, .pos = &pos, .seq = &seq};
    CHECK(lmc_context_decode(ctx, &bad) == LMC_ERR_RANGE);
    CHECK(strstr(lmc_last_error(), "outside the vocabulary") != NULL);
    tok = 1;
    CHECK(lmc_context_decode(ctx, &bad) == LMC_OK);
    CHECK(ctx->n_logits == 1 && isfinite(lmc_context_logits(ctx, 0)[0]));
    lmc_context_free(ctx);
    /* a shard refuses a model that is not in host memory: only the cpu backend is */
    lmc_model_free(m);
    lmc_backend_free(host);
}

/* MLX 4-bit (groups of 32) llama at tp 2: the row-parallel slices are strided quantized views;
 * at tp 4 o_proj's 16-column slices would cut the 32-element groups and are refused. */
static void test_quantized_tp(void) {
    char in[1100], out[] = "/tmp/lmc_test_tp_XXXXXX";
    snprintf(in, sizeof in, "%s/llama", fixtures_dir());
    if (!mkdtemp(out)) { CHECK(0); return; }
    lmc_quantize_stats qs;
    CHECK_MSG(lmc_quantize_mlx(in, out, 4, 32, &qs, NULL, NULL) == LMC_OK, "%s", lmc_last_error());
    const int before2 = n_tp_runs[2], refused4 = n_tp_refused[4];
    check_model_tp(out, "llama-mlx4", 1);
    CHECK(n_tp_runs[2] == before2 + 1);
    CHECK(n_tp_refused[4] == refused4 + 1);
    pack_slices = 1; /* MLX slices packed with their scales and biases, as a device rank gets them */
    check_model_tp(out, "llama-mlx4 packed", 1);
    pack_slices = 0;
    CHECK(n_tp_runs[2] == before2 + 2);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    CHECK(system(cmd) == 0);
}

/* ---- a random model with Llama-3-8B's head layout ------------------------------------------- */

/* Write a random bf16 llama checkpoint (config.json + model.safetensors) into dir. */
static int write_llama(const char *dir, int D, int H, int KV, int hd, int I, int L, int V) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %d, "
               "\"intermediate_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
               "\"num_hidden_layers\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 8192, "
               "\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, "
               "\"hidden_act\": \"silu\", \"torch_dtype\": \"bfloat16\"}\n", D, I, H, KV, hd, L, V);
    fclose(f);
    struct { char name[96]; int64_t rows, cols; } t[64];
    int n = 0;
#define T(r, c, ...) do { snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__); t[n].rows = (r); t[n].cols = (c); n++; } while (0)
    T(V, D, "model.embed_tokens.weight");
    for (int l = 0; l < L; l++) {
        T(0, D, "model.layers.%d.input_layernorm.weight", l);
        T((int64_t)H * hd, D, "model.layers.%d.self_attn.q_proj.weight", l);
        T((int64_t)KV * hd, D, "model.layers.%d.self_attn.k_proj.weight", l);
        T((int64_t)KV * hd, D, "model.layers.%d.self_attn.v_proj.weight", l);
        T(D, (int64_t)H * hd, "model.layers.%d.self_attn.o_proj.weight", l);
        T(0, D, "model.layers.%d.post_attention_layernorm.weight", l);
        T(I, D, "model.layers.%d.mlp.gate_proj.weight", l);
        T(I, D, "model.layers.%d.mlp.up_proj.weight", l);
        T(D, I, "model.layers.%d.mlp.down_proj.weight", l);
    }
    T(0, D, "model.norm.weight");
    T(V, D, "lm_head.weight");
#undef T
    char *hdr = malloc(16384);
    size_t off = 0, hl = 0;
    hl += (size_t)snprintf(hdr + hl, 16384 - hl, "{");
    for (int i = 0; i < n; i++) {
        const size_t bytes = (size_t)(t[i].rows ? t[i].rows : 1) * (size_t)t[i].cols * 2;
        if (t[i].rows)
            hl += (size_t)snprintf(hdr + hl, 16384 - hl, "%s\"%s\": {\"dtype\": \"BF16\", \"shape\": [%lld, %lld], "
                                   "\"data_offsets\": [%zu, %zu]}", i ? ", " : "", t[i].name, (long long)t[i].rows,
                                   (long long)t[i].cols, off, off + bytes);
        else
            hl += (size_t)snprintf(hdr + hl, 16384 - hl, "%s\"%s\": {\"dtype\": \"BF16\", \"shape\": [%lld], "
                                   "\"data_offsets\": [%zu, %zu]}", i ? ", " : "", t[i].name, (long long)t[i].cols, off,
                                   off + bytes);
        off += bytes;
    }
    hl += (size_t)snprintf(hdr + hl, 16384 - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f) { free(hdr); return -1; }
    uint64_t len = hl;
    fwrite(&len, 8, 1, f);
    fwrite(hdr, 1, hl, f);
    free(hdr);
    uint16_t *buf = malloc((size_t)1 << 20);
    for (int i = 0; i < n; i++) {
        const int64_t cnt = (t[i].rows ? t[i].rows : 1) * t[i].cols;
        /* norms near 1; embeddings wide; projections ~ U(-1, 1) · sqrt(3 / fan_in) */
        const float amp = !t[i].rows ? 0.1f : i == 0 ? 1.0f : sqrtf(3.0f / (float)t[i].cols);
        for (int64_t done = 0; done < cnt;) {
            const int64_t k = cnt - done < (1 << 19) ? cnt - done : (1 << 19);
            for (int64_t j = 0; j < k; j++) buf[j] = lmc_f32_to_bf16((t[i].rows ? 0.0f : 1.0f) + amp * frand());
            fwrite(buf, 2, (size_t)k, f);
            done += k;
        }
    }
    free(buf);
    return fclose(f) == 0 ? 0 : -1;
}

/* Llama-3-8B's attention layout (32 heads, 8 KV heads, GQA 4) and MLP ratio at a small width:
 * tp 2, 4, 8 split the KV heads, tp 16 replicates them (two ranks per KV head). LMC_TP_FULL_8B=1
 * uses the real widths (hidden 4096, head_dim 128, intermediate 14336; 2 layers, ~1 GB). */
static void test_llama3_8b_shape(void) {
    char dir[] = "/tmp/lmc_test_tp8b_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0); return; }
    const char *full = getenv("LMC_TP_FULL_8B");
    const int big = full && *full == '1';
    CHECK(write_llama(dir, big ? 4096 : 1024, 32, 8, big ? 128 : 32, big ? 14336 : 3584, 2, big ? 2048 : 512) == 0);
    const int before[5] = {n_tp_runs[1], n_tp_runs[2], n_tp_runs[4], 0, 0};
    check_model_tp(dir, big ? "llama3-8b-shape (full width)" : "llama3-8b-shape", 1);
    CHECK(n_tp_runs[1] == before[0] + 1 && n_tp_runs[2] == before[1] + 1 && n_tp_runs[4] == before[2] + 1);
    /* tp 8 and 16 as well */
    lmc_backend *host;
    CHECK(lmc_backend_cpu_init(&host, 1, 0) == LMC_OK);
    lmc_model *m;
    if (lmc_model_load(dir, host, &m) == LMC_OK) {
        lmc_tp_plan p;
        CHECK(lmc_tp_plan_make(m, 8, &p) == LMC_OK && p.n_heads == 4 && p.n_kv_heads == 1 && !p.kv_replicated);
        CHECK(lmc_tp_plan_make(m, 16, &p) == LMC_OK && p.n_heads == 2 && p.n_kv_heads == 1 && p.kv_replicated);
        CHECK(lmc_tp_plan_make(m, 64, &p) == LMC_ERR_UNSUPPORTED);
        int32_t prompt[PROMPT_LEN];
        for (int i = 0; i < PROMPT_LEN; i++) prompt[i] = (int32_t)((i * 37 + 11) % m->cfg.vocab_size);
        lmc_context_params cp = lmc_context_default_params();
        cp.n_ctx = 64;
        lmc_context *ctx;
        run_out ref = {0};
        CHECK(lmc_context_init(&ctx, m, &cp) == LMC_OK);
        CHECK(run_model(ctx, prompt, &ref) == LMC_OK);
        lmc_context_free(ctx);
        const int V = m->cfg.vocab_size;
        const double scale = max_abs(ref.prompt_logits, (size_t)PROMPT_LEN * V);
        for (int N = 8; N <= 16; N *= 2) {
            lmc_tp_params tp = lmc_tp_default_params();
            tp.n_ranks = N;
            CHECK_MSG(lmc_context_init_tp(&ctx, m, &cp, &tp) == LMC_OK, "tp %d: %s", N, lmc_last_error());
            run_out got = {0};
            CHECK(run_model(ctx, prompt, &got) == LMC_OK);
            const double e = max_diff(got.prompt_logits, ref.prompt_logits, (size_t)PROMPT_LEN * V);
            CHECK_MSG(e <= F2_REL * scale, "llama3-8b-shape tp %d: max|Δ| %g > %g", N, e, F2_REL * scale);
            CHECK_MSG(memcmp(got.ids, ref.ids, sizeof got.ids) == 0, "llama3-8b-shape tp %d: greedy ids differ", N);
            fprintf(stderr, "  llama3-8b-shape tp %d: prompt max|Δ| %.3g (scale %.3g)\n", N, e, scale);
            free_run(&got);
            lmc_context_free(ctx);
        }
        free_run(&ref);
        lmc_model_free(m);
    } else {
        CHECK_MSG(0, "%s", lmc_last_error());
    }
    lmc_backend_free(host);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* Packed copies of the row-parallel slices (what CUDA ranks bind) on a few fixtures. */
static void test_packed_slices(void) {
    static const char *cases[] = {"llama", "llama_bf16", "qwen2_moe", "phi3", "cohere", "gpt2"};
    const int before = n_tp_runs[2];
    pack_slices = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[1100], name[64];
        snprintf(dir, sizeof dir, "%s/%s", fixtures_dir(), cases[i]);
        snprintf(name, sizeof name, "%s packed", cases[i]);
        check_model_tp(dir, name, 1);
    }
    pack_slices = 0;
    CHECK(n_tp_runs[2] == before + (int)(sizeof cases / sizeof cases[0]));
}

int main(void) {
    RUN(test_host_all_reduce);
    RUN(test_host_abort);
    RUN(test_strided_views);
    RUN(test_plan_refusals);
    RUN(test_fixtures);
    RUN(test_packed_slices);
    RUN(test_quantized_tp);
    RUN(test_llama3_8b_shape);
    return TEST_END();
}
