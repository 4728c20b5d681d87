/* test_backend.c — every op of the CPU backend: the fast kernels on 2 and 3
 * threads against the scalar reference backend (lmc_backend_cpu_init(&be, 1, 1))
 * on seeded random inputs of odd and even sizes, one row and many rows; and
 * the reference itself against independent double-precision formulas written
 * here (matmul, norms, rope rotation, attention softmax, activations via erf).
 * Outputs are pre-filled with NaN so a row an op forgets to write fails.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/dtype.h"

enum { N_BE = 3 };
static lmc_backend *BE[N_BE];                  /* [0] reference, [1] fast ×2, [2] fast ×3 */
static const char *BE_NAME[N_BE] = {"reference", "fast x2", "fast x3"};

/* ------------------------------------------------------------------ helpers */

static uint64_t rng = 1;
static void seed(uint64_t s) { rng = s * 0x9e3779b97f4a7c15ull + 1; }
static uint32_t rnd32(void) {
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545F4914F6CDD1Dull) >> 32);
}
static float uni(float a, float b) { return a + (b - a) * (float)((rnd32() >> 8) * (1.0 / 16777216.0)); }
static void fill(float *x, size_t n, float a, float b) { for (size_t i = 0; i < n; i++) x[i] = uni(a, b); }

static float *fvec(size_t n) { float *p = calloc(n ? n : 1, sizeof *p); LMC_ASSERT(p); return p; }

static double maxabs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) if (!(fabs(x[i]) <= m)) m = fabs(x[i]);
    return m;
}
static double maxabs_d(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) if (!(fabs(x[i]) <= m)) m = fabs(x[i]);
    return m;
}
/* max |a - b|, NaN when any element is NaN (so comparisons with a tolerance fail) */
static double maxdiff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}
static double maxdiff_d(const float *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* Independent decoders of the storage types (bit definitions, not lmc's code). */
static double f16_value(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, e - 25);
    return sign ? -v : v;
}
static double bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Host bytes of n f32 values stored as dtype t; `exact` gets the stored values decoded. */
static void *encode(lmc_dtype t, const float *x, size_t n, double *exact) {
    void *p = malloc(n * lmc_dtype_size(t) + 1);
    LMC_ASSERT(p);
    for (size_t i = 0; i < n; i++) {
        if (t == LMC_DTYPE_F32) { ((float *)p)[i] = x[i]; if (exact) exact[i] = x[i]; }
        else if (t == LMC_DTYPE_F16) { uint16_t h = lmc_f32_to_f16(x[i]); ((uint16_t *)p)[i] = h; if (exact) exact[i] = f16_value(h); }
        else { uint16_t h = lmc_f32_to_bf16(x[i]); ((uint16_t *)p)[i] = h; if (exact) exact[i] = bf16_value(h); }
    }
    return p;
}

/* A tensor on backend be holding host bytes (or zeros when host is NULL). */
static lmc_tensor mk(lmc_backend *be, lmc_dtype t, int64_t ne0, int64_t ne1, int64_t ne2, const void *host) {
    lmc_tensor x = lmc_tensor_make(t, ne0, ne1, ne2, 1);
    lmc_status st = be->i->alloc(be, &x);
    LMC_ASSERT(st == LMC_OK);
    if (host && lmc_tensor_nbytes(&x)) be->i->set(be, &x, host, 0, lmc_tensor_nbytes(&x));
    return x;
}
/* An f32 output tensor pre-filled with NaN. */
static lmc_tensor mk_out(lmc_backend *be, int64_t ne0, int64_t ne1, int64_t ne2) {
    size_t n = (size_t)(ne0 * ne1 * ne2);
    float *nan_fill = fvec(n);
    for (size_t i = 0; i < n; i++) nan_fill[i] = NAN;
    lmc_tensor y = mk(be, LMC_DTYPE_F32, ne0, ne1, ne2, nan_fill);
    free(nan_fill);
    return y;
}
static void get_all(lmc_backend *be, const lmc_tensor *t, float *dst) {
    LMC_ASSERT(be->i->sync(be) == LMC_OK);
    be->i->get(be, dst, t, 0, lmc_tensor_nbytes(t));
}
static void rel(lmc_backend *be, lmc_tensor *t) { be->i->release(be, t); }
static lmc_tensor mk_i32(lmc_backend *be, const int32_t *v, int64_t n) { return mk(be, LMC_DTYPE_I32, n, 1, 1, v); }

/* Compare fast backends' outputs out[1..] with the reference out[0]. */
static void check_vs_ref(float *const out[N_BE], size_t n, double tol, const char *what) {
    double scale = maxabs(out[0], n);
    if (scale < 1) scale = 1;
    for (int b = 1; b < N_BE; b++) {
        double d = maxdiff(out[b], out[0], n);
        CHECK_MSG(d <= tol * scale, "%s: %s vs reference differs by %g (tol %g)", what, BE_NAME[b], d, tol * scale);
    }
    double d0 = maxdiff(out[0], out[0], n);
    CHECK_MSG(d0 == 0, "%s: reference output holds NaN", what);
}

static const lmc_dtype WTYPES[3] = {LMC_DTYPE_F32, LMC_DTYPE_F16, LMC_DTYPE_BF16};

/* ------------------------------------------------------------------ memory and init */

static void test_memory_ops(void) {
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        CHECK_EQ_STR(be->i->name, "cpu");
        lmc_tensor t = lmc_tensor_make(LMC_DTYPE_F32, 5, 3, 1, 1);
        CHECK_EQ_INT(be->i->alloc(be, &t), LMC_OK);
        float got[15];
        memset(got, 0xff, sizeof got);
        be->i->get(be, got, &t, 0, sizeof got);
        for (int i = 0; i < 15; i++) CHECK(got[i] == 0.0f); /* zero-filled */
        float v[4] = {1, 2, 3, 4};
        be->i->set(be, &t, v, 5 * sizeof(float), sizeof v);
        be->i->get(be, got, &t, 0, sizeof got);
        CHECK(got[4] == 0 && got[5] == 1 && got[8] == 4 && got[9] == 0);
        float two[2];
        be->i->get(be, two, &t, 6 * sizeof(float), sizeof two);
        CHECK(two[0] == 2 && two[1] == 3);
        CHECK_EQ_INT(be->i->sync(be), LMC_OK);
        be->i->release(be, &t);
        CHECK(t.data == NULL);
        static const float host[6] = {1, 2, 3, 4, 5, 6};
        lmc_tensor w = lmc_tensor_make(LMC_DTYPE_F32, 3, 2, 1, 1);
        CHECK_EQ_INT(be->i->bind_weight(be, &w, host), LMC_OK);
        CHECK(w.data == host); /* cpu uses the mapping in place */
        be->i->get(be, two, &w, 4 * sizeof(float), sizeof two);
        CHECK(two[0] == 5 && two[1] == 6);
        be->i->unbind_weight(be, &w);
        CHECK(w.data == NULL);
    }
}

static void test_backend_init_by_name(void) {
    lmc_backend *be = NULL;
    CHECK_EQ_INT(lmc_backend_init(&be, NULL), LMC_OK);
    CHECK(be && strcmp(be->i->name, "cpu") == 0);
    lmc_backend_free(be);
    lmc_backend_params p = {.name = "cpu-ref"};
    be = NULL;
    CHECK_EQ_INT(lmc_backend_init(&be, &p), LMC_OK);
    lmc_backend_free(be);
    p.name = "cpu";
    p.n_threads = 3;
    be = NULL;
    CHECK_EQ_INT(lmc_backend_init(&be, &p), LMC_OK);
    lmc_backend_free(be);
    p.name = "cuda";
    CHECK_EQ_INT(lmc_backend_init(&be, &p), LMC_ERR_UNSUPPORTED);
    p.name = "tpu";
    CHECK_EQ_INT(lmc_backend_init(&be, &p), LMC_ERR_ARG);
    CHECK(strstr(lmc_last_error(), "tpu") != NULL);
    lmc_backend_free(NULL);
}

/* ------------------------------------------------------------------ get_rows */

static void get_rows_case(lmc_dtype t, int64_t D, int64_t V, int n, float scale, uint64_t s) {
    seed(s);
    float *tab = fvec((size_t)(D * V));
    fill(tab, (size_t)(D * V), -2, 2);
    double *exact = malloc(sizeof(double) * (size_t)(D * V));
    void *host = encode(t, tab, (size_t)(D * V), exact);
    int32_t ids[64];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(rnd32() % V);
    if (n > 2) { ids[1] = ids[0]; ids[n - 1] = (int32_t)(V - 1); } /* repeats and the last row */
    float *out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        lmc_tensor tt = mk(be, t, D, V, 1, host), it = mk_i32(be, ids, n), y = mk_out(be, D, n, 1);
        be->i->get_rows(be, &y, &tt, &it, scale);
        out[b] = fvec((size_t)(D * n));
        get_all(be, &y, out[b]);
        rel(be, &tt); rel(be, &it); rel(be, &y);
    }
    check_vs_ref(out, (size_t)(D * n), 1e-6, "get_rows");
    /* by hand: the stored value times scale */
    int bad = 0;
    for (int r = 0; r < n; r++)
        for (int64_t i = 0; i < D; i++) {
            double want = exact[(size_t)ids[r] * D + i] * scale;
            if (fabs(out[0][r * D + i] - want) > 1e-6 * fabs(want) + 1e-30) bad++;
        }
    CHECK_EQ_INT(bad, 0);
    for (int b = 0; b < N_BE; b++) free(out[b]);
    free(tab); free(exact); free(host);
}

static void test_get_rows_f32(void) {
    get_rows_case(LMC_DTYPE_F32, 37, 11, 1, 1.0f, 1);
    get_rows_case(LMC_DTYPE_F32, 64, 9, 17, 1.0f, 2);
    get_rows_case(LMC_DTYPE_F32, 5, 300, 40, 0.37f, 3);
}
static void test_get_rows_f16(void) {
    get_rows_case(LMC_DTYPE_F16, 37, 11, 1, 1.0f, 4);
    get_rows_case(LMC_DTYPE_F16, 33, 20, 13, 8.0f, 5);
}
static void test_get_rows_bf16(void) {
    get_rows_case(LMC_DTYPE_BF16, 1, 7, 3, 1.0f, 6);
    get_rows_case(LMC_DTYPE_BF16, 67, 19, 29, 5.656854f, 7); /* sqrt(32): gemma's embedding scale */
}

/* ------------------------------------------------------------------ matmul */

/* y = w x on every backend; returns the worst error relative to tolerances. */
static int matmul_case(lmc_dtype t, int64_t in, int64_t outn, int64_t n_tok, uint64_t s, int pad_rows) {
    seed(s);
    const int64_t row = in + pad_rows;   /* weight row stride in elements (padding when pad_rows > 0) */
    float *w = fvec((size_t)(row * outn)), *x = fvec((size_t)(in * n_tok));
    fill(w, (size_t)(row * outn), -1, 1);
    fill(x, (size_t)(in * n_tok), -1, 1);
    double *we = malloc(sizeof(double) * (size_t)(row * outn));
    void *host = encode(t, w, (size_t)(row * outn), we);
    float *out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        lmc_tensor wt = lmc_tensor_make(t, in, outn, 1, 1);
        wt.nb[1] = (size_t)row * lmc_dtype_size(t);
        wt.nb[2] = wt.nb[3] = wt.nb[1] * (size_t)outn;
        LMC_ASSERT(be->i->bind_weight(be, &wt, host) == LMC_OK);
        lmc_tensor xt = mk(be, LMC_DTYPE_F32, in, n_tok, 1, x), y = mk_out(be, outn, n_tok, 1);
        be->i->matmul(be, &y, &wt, &xt);
        out[b] = fvec((size_t)(outn * n_tok));
        get_all(be, &y, out[b]);
        be->i->unbind_weight(be, &wt);
        rel(be, &xt); rel(be, &y);
    }
    const size_t n = (size_t)(outn * n_tok);
    double scale = maxabs(out[0], n) > 1 ? maxabs(out[0], n) : 1, tol = 1e-5 * sqrt((double)in) * scale;
    int fails = 0;
    for (int b = 1; b < N_BE; b++) {
        double d = maxdiff(out[b], out[0], n);
        if (!(d <= tol)) {
            fails++;
            fprintf(stderr, "  matmul %s in=%lld out=%lld n=%lld: %s differs by %g\n", lmc_dtype_name(t),
                    (long long)in, (long long)outn, (long long)n_tok, BE_NAME[b], d);
        }
    }
    /* the reference against a double product of the stored weights: within f32 rounding */
    for (int64_t tk = 0; tk < n_tok; tk++)
        for (int64_t o = 0; o < outn; o++) {
            double acc = 0;
            for (int64_t i = 0; i < in; i++) acc += we[o * row + i] * (double)x[tk * in + i];
            double got = out[0][tk * outn + o];
            if (!(fabs(got - acc) <= 1.2e-7 * fabs(acc) + 1e-30)) {
                if (fails++ < 3) fprintf(stderr, "  matmul ref %.9g vs double %.12g\n", got, acc);
            }
        }
    for (int b = 0; b < N_BE; b++) free(out[b]);
    free(w); free(x); free(we); free(host);
    return fails;
}

static void matmul_sweep(lmc_dtype t) {
    static const int64_t ins[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 64, 67};
    static const int64_t outs[] = {1, 2, 3, 4, 5, 7, 9, 16, 17, 33, 67};
    static const int64_t toks[] = {1, 3, 17};
    int fails = 0;
    uint64_t s = 100 + (uint64_t)t * 10000;
    for (size_t a = 0; a < sizeof ins / sizeof ins[0]; a++)
        for (size_t b = 0; b < sizeof outs / sizeof outs[0]; b++)
            for (size_t c = 0; c < 3; c++) fails += matmul_case(t, ins[a], outs[b], toks[c], s++, 0);
    CHECK_EQ_INT(fails, 0);
}

static void test_matmul_f32(void) { matmul_sweep(LMC_DTYPE_F32); }
static void test_matmul_f16(void) { matmul_sweep(LMC_DTYPE_F16); }
static void test_matmul_bf16(void) { matmul_sweep(LMC_DTYPE_BF16); }

static void test_matmul_large(void) {
    int fails = 0;
    for (int k = 0; k < 3; k++) fails += matmul_case(WTYPES[k], 515, 131, 9, 777 + (uint64_t)k, 0);
    CHECK_EQ_INT(fails, 0);
}

/* Weight rows with a stride larger than the row (a view into a wider matrix). */
static void test_matmul_strided_rows(void) {
    int fails = 0;
    for (int k = 0; k < 3; k++) {
        fails += matmul_case(WTYPES[k], 13, 7, 3, 900 + (uint64_t)k, 3);
        fails += matmul_case(WTYPES[k], 32, 9, 17, 910 + (uint64_t)k, 5);
    }
    CHECK_EQ_INT(fails, 0);
}

/* A product small enough to know by heart. */
static void test_matmul_known(void) {
    const float w[6] = {1, 2, 3, 4, 5, 6}; /* [in 3, out 2]: row o=0 is (1,2,3), o=1 is (4,5,6) */
    const float x[6] = {1, 0, -1, 0.5f, 0.5f, 2};
    const float want[4] = {-2, -2, 7.5f, 16.5f};
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        lmc_tensor wt = mk(be, LMC_DTYPE_F32, 3, 2, 1, w), xt = mk(be, LMC_DTYPE_F32, 3, 2, 1, x), y = mk_out(be, 2, 2, 1);
        be->i->matmul(be, &y, &wt, &xt);
        float got[4];
        get_all(be, &y, got);
        for (int i = 0; i < 4; i++) CHECK_MSG(got[i] == want[i], "%s: y[%d] = %g, want %g", BE_NAME[b], i, got[i], want[i]);
        rel(be, &wt); rel(be, &xt); rel(be, &y);
    }
}

/* ------------------------------------------------------------------ elementwise */

static void test_add_bias(void) {
    const int64_t Ds[] = {1, 7, 33, 64}, Ns[] = {1, 5, 17};
    for (int k = 0; k < 3; k++)
        for (int a = 0; a < 4; a++)
            for (int c = 0; c < 3; c++) {
                int64_t D = Ds[a], n = Ns[c];
                seed(1000 + (uint64_t)(k * 100 + a * 10 + c));
                float *y0 = fvec((size_t)(D * n)), *bias = fvec((size_t)D);
                fill(y0, (size_t)(D * n), -3, 3);
                fill(bias, (size_t)D, -1, 1);
                double *be_exact = malloc(sizeof(double) * (size_t)D);
                void *bh = encode(WTYPES[k], bias, (size_t)D, be_exact);
                float *out[N_BE];
                for (int b = 0; b < N_BE; b++) {
                    lmc_backend *be = BE[b];
                    lmc_tensor y = mk(be, LMC_DTYPE_F32, D, n, 1, y0), bt = mk(be, WTYPES[k], D, 1, 1, bh);
                    be->i->add_bias(be, &y, &bt);
                    out[b] = fvec((size_t)(D * n));
                    get_all(be, &y, out[b]);
                    rel(be, &y); rel(be, &bt);
                }
                check_vs_ref(out, (size_t)(D * n), 1e-6, "add_bias");
                int bad = 0;
                for (int64_t t = 0; t < n; t++)
                    for (int64_t i = 0; i < D; i++) {
                        double want = (double)y0[t * D + i] + be_exact[i];
                        if (fabs(out[0][t * D + i] - want) > 1e-6 * fabs(want) + 1e-7) bad++;
                    }
                CHECK_EQ_INT(bad, 0);
                for (int b = 0; b < N_BE; b++) free(out[b]);
                free(y0); free(bias); free(be_exact); free(bh);
            }
}

static void test_add(void) {
    const int64_t shapes[][2] = {{1, 1}, {7, 1}, {33, 17}, {64, 3}, {5, 100}};
    for (int k = 0; k < 5; k++) {
        int64_t D = shapes[k][0], n = shapes[k][1];
        size_t N = (size_t)(D * n);
        seed(2000 + (uint64_t)k);
        float *a = fvec(N), *bb = fvec(N);
        fill(a, N, -5, 5);
        fill(bb, N, -5, 5);
        for (int alias = 0; alias < 3; alias++) { /* 0: y separate, 1: y = a, 2: y = b */
            float *out[N_BE];
            for (int b = 0; b < N_BE; b++) {
                lmc_backend *be = BE[b];
                lmc_tensor at = mk(be, LMC_DTYPE_F32, D, n, 1, a), bt = mk(be, LMC_DTYPE_F32, D, n, 1, bb);
                lmc_tensor y = alias == 0 ? mk_out(be, D, n, 1) : (alias == 1 ? at : bt);
                be->i->add(be, &y, &at, &bt);
                out[b] = fvec(N);
                get_all(be, &y, out[b]);
                if (alias == 0) rel(be, &y);
                rel(be, &at); rel(be, &bt);
            }
            check_vs_ref(out, N, 1e-6, "add");
            int bad = 0;
            for (size_t i = 0; i < N; i++) if (out[0][i] != a[i] + bb[i]) bad++; /* one f32 rounding, exact */
            CHECK_EQ_INT(bad, 0);
            for (int b = 0; b < N_BE; b++) free(out[b]);
        }
        free(a); free(bb);
    }
}

static void test_scale(void) {
    const int64_t shapes[][2] = {{1, 1}, {9, 2}, {67, 17}};
    const float ss[] = {0.5f, -3.25f, 0.0f, 0.1f};
    for (int k = 0; k < 3; k++)
        for (int q = 0; q < 4; q++)
            for (int alias = 0; alias < 2; alias++) {
                int64_t D = shapes[k][0], n = shapes[k][1];
                size_t N = (size_t)(D * n);
                seed(3000 + (uint64_t)(k * 10 + q));
                float *x = fvec(N);
                fill(x, N, -4, 4);
                float *out[N_BE];
                for (int b = 0; b < N_BE; b++) {
                    lmc_backend *be = BE[b];
                    lmc_tensor xt = mk(be, LMC_DTYPE_F32, D, n, 1, x);
                    lmc_tensor y = alias ? xt : mk_out(be, D, n, 1);
                    be->i->scale(be, &y, &xt, ss[q]);
                    out[b] = fvec(N);
                    get_all(be, &y, out[b]);
                    if (!alias) rel(be, &y);
                    rel(be, &xt);
                }
                check_vs_ref(out, N, 1e-6, "scale");
                int bad = 0;
                for (size_t i = 0; i < N; i++) if (out[0][i] != x[i] * ss[q]) bad++;
                CHECK_EQ_INT(bad, 0);
                for (int b = 0; b < N_BE; b++) free(out[b]);
                free(x);
            }
}

/* ------------------------------------------------------------------ norms */

/* rms_norm on every backend (weights in dtype wt, or none); checks vs reference and by hand. */
static void rms_case(int64_t D, int64_t n, int with_w, lmc_dtype wt, float w_offset, int alias, uint64_t s) {
    seed(s);
    size_t N = (size_t)(D * n);
    float *x = fvec(N), *w = fvec((size_t)D);
    fill(x, N, -3, 3);
    for (int64_t t = 0; t < n; t++) x[t * D] *= 4; /* uneven rows */
    fill(w, (size_t)D, -1.5f, 1.5f);
    double *we = malloc(sizeof(double) * (size_t)D);
    void *wh = encode(wt, w, (size_t)D, we);
    const float eps = 1e-5f;
    float *out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        lmc_tensor xt = mk(be, LMC_DTYPE_F32, D, n, 1, x), wtn = mk(be, wt, D, 1, 1, wh);
        lmc_tensor y = alias ? xt : mk_out(be, D, n, 1);
        be->i->rms_norm(be, &y, &xt, with_w ? &wtn : NULL, eps, w_offset);
        out[b] = fvec(N);
        get_all(be, &y, out[b]);
        if (!alias) rel(be, &y);
        rel(be, &xt); rel(be, &wtn);
    }
    check_vs_ref(out, N, 1e-5, "rms_norm");
    double *hand = malloc(sizeof(double) * N);
    for (int64_t t = 0; t < n; t++) {
        double ss = 0;
        for (int64_t i = 0; i < D; i++) ss += (double)x[t * D + i] * x[t * D + i];
        double inv = 1.0 / sqrt(ss / (double)D + eps);
        for (int64_t i = 0; i < D; i++)
            hand[t * D + i] = x[t * D + i] * inv * (with_w ? we[i] + w_offset : 1.0);
    }
    double sc = maxabs_d(hand, N) > 1 ? maxabs_d(hand, N) : 1, d = maxdiff_d(out[0], hand, N);
    CHECK_MSG(d <= 1e-5 * sc, "rms_norm D=%lld w=%d off=%g: reference vs double differs by %g", (long long)D, with_w,
              w_offset, d);
    for (int b = 0; b < N_BE; b++) free(out[b]);
    free(x); free(w); free(we); free(wh); free(hand);
}

static void test_rms_norm_weight(void) {
    rms_case(1, 1, 1, LMC_DTYPE_F32, 0, 0, 10);
    rms_case(37, 1, 1, LMC_DTYPE_F32, 0, 0, 11);
    rms_case(64, 17, 1, LMC_DTYPE_F32, 0, 0, 12);
    rms_case(33, 5, 1, LMC_DTYPE_BF16, 0, 0, 13);
    rms_case(33, 5, 1, LMC_DTYPE_F16, 0, 1, 14); /* in place */
}
static void test_rms_norm_no_weight(void) {
    rms_case(7, 3, 0, LMC_DTYPE_F32, 0, 0, 20);
    rms_case(128, 9, 0, LMC_DTYPE_F32, 0, 1, 21);
}
static void test_rms_norm_offset(void) { /* gemma: x · (1 + w) */
    rms_case(37, 4, 1, LMC_DTYPE_F32, 1, 0, 30);
    rms_case(65, 17, 1, LMC_DTYPE_BF16, 1, 1, 31);
}

static void ln_case(int64_t D, int64_t n, int with_w, int with_b, uint64_t s) {
    seed(s);
    size_t N = (size_t)(D * n);
    float *x = fvec(N), *w = fvec((size_t)D), *bb = fvec((size_t)D);
    fill(x, N, -2, 4);     /* non-zero mean */
    fill(w, (size_t)D, 0.5f, 1.5f);
    fill(bb, (size_t)D, -1, 1);
    const float eps = 1e-5f;
    float *out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        lmc_tensor xt = mk(be, LMC_DTYPE_F32, D, n, 1, x), wt = mk(be, LMC_DTYPE_F32, D, 1, 1, w);
        lmc_tensor bt = mk(be, LMC_DTYPE_F32, D, 1, 1, bb), y = mk_out(be, D, n, 1);
        be->i->layer_norm(be, &y, &xt, with_w ? &wt : NULL, with_b ? &bt : NULL, eps);
        out[b] = fvec(N);
        get_all(be, &y, out[b]);
        rel(be, &xt); rel(be, &wt); rel(be, &bt); rel(be, &y);
    }
    check_vs_ref(out, N, 1e-5, "layer_norm");
    double *hand = malloc(sizeof(double) * N);
    for (int64_t t = 0; t < n; t++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < D; i++) mean += x[t * D + i];
        mean /= (double)D;
        for (int64_t i = 0; i < D; i++) var += (x[t * D + i] - mean) * (x[t * D + i] - mean);
        var /= (double)D;
        for (int64_t i = 0; i < D; i++) {
            double v = (x[t * D + i] - mean) / sqrt(var + eps);
            if (with_w) v *= w[i];
            if (with_b) v += bb[i];
            hand[t * D + i] = v;
        }
    }
    double sc = maxabs_d(hand, N) > 1 ? maxabs_d(hand, N) : 1, d = maxdiff_d(out[0], hand, N);
    CHECK_MSG(d <= 1e-5 * sc, "layer_norm D=%lld w=%d b=%d: reference vs double differs by %g", (long long)D, with_w,
              with_b, d);
    if (D > 1 && !with_w && !with_b) { /* normalized rows: mean 0, variance ≈ 1 */
        for (int64_t t = 0; t < n; t++) {
            double m = 0, v = 0;
            for (int64_t i = 0; i < D; i++) m += out[0][t * D + i];
            for (int64_t i = 0; i < D; i++) v += (double)out[0][t * D + i] * out[0][t * D + i];
            CHECK_NEAR(m / (double)D, 0, 1e-5);
            CHECK_NEAR(v / (double)D, 1, 1e-3);
        }
    }
    for (int b = 0; b < N_BE; b++) free(out[b]);
    free(x); free(w); free(bb); free(hand);
}

static void test_layer_norm(void) {
    uint64_t s = 40;
    const int64_t shapes[][2] = {{1, 1}, {7, 1}, {33, 17}, {64, 4}};
    for (int k = 0; k < 4; k++)
        for (int ww = 0; ww < 2; ww++)
            for (int bb = 0; bb < 2; bb++) ln_case(shapes[k][0], shapes[k][1], ww, bb, s++);
}

/* Per-head norm weights: w (and b) hold R rows [D, R]; row r of x uses weight row r mod R
 * (x laid out [head_dim, n_head, n_tokens] with R = n_head). */
static void per_head_norm_case(int layer, int64_t D, int64_t R, int64_t RB, int64_t n_tok, lmc_dtype wt, float w_offset,
                               uint64_t s) {
    seed(s);
    const int64_t rows = R * n_tok;
    const size_t N = (size_t)(D * rows), NW = (size_t)(D * R), NB = (size_t)(D * RB);
    float *x = fvec(N), *w = fvec(NW), *bb = fvec(NB);
    fill(x, N, -3, 3);
    fill(w, NW, -1.5f, 1.5f);
    fill(bb, NB, -1, 1);
    double *we = malloc(sizeof(double) * NW), *bexact = malloc(sizeof(double) * NB);
    void *wh = encode(wt, w, NW, we), *bh = encode(wt, bb, NB, bexact);
    const float eps = 1e-6f;
    float *out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        lmc_tensor xt = mk(be, LMC_DTYPE_F32, D, R, n_tok, x), wtn = mk(be, wt, D, R, 1, wh), btn = mk(be, wt, D, RB, 1, bh);
        lmc_tensor y = mk_out(be, D, R, n_tok);
        if (layer) be->i->layer_norm(be, &y, &xt, &wtn, &btn, eps);
        else be->i->rms_norm(be, &y, &xt, &wtn, eps, w_offset);
        out[b] = fvec(N);
        get_all(be, &y, out[b]);
        rel(be, &xt); rel(be, &wtn); rel(be, &btn); rel(be, &y);
    }
    check_vs_ref(out, N, 1e-5, layer ? "layer_norm per head" : "rms_norm per head");
    double *hand = malloc(sizeof(double) * N);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * D;
        const int64_t h = r % R;
        double mean = 0, ss = 0;
        if (layer) { for (int64_t i = 0; i < D; i++) mean += xr[i]; mean /= (double)D; }
        for (int64_t i = 0; i < D; i++) ss += (xr[i] - mean) * (xr[i] - mean);
        const double inv = 1.0 / sqrt(ss / (double)D + eps);
        for (int64_t i = 0; i < D; i++)
            hand[r * D + i] = layer ? (xr[i] - mean) * inv * we[h * D + i] + bexact[(r % RB) * D + i]
                                    : xr[i] * inv * (we[h * D + i] + w_offset);
    }
    double sc = maxabs_d(hand, N) > 1 ? maxabs_d(hand, N) : 1, d = maxdiff_d(out[0], hand, N);
    CHECK_MSG(d <= 1e-5 * sc, "%s per head D=%lld R=%lld: reference vs double differs by %g", layer ? "layer_norm" : "rms_norm",
              (long long)D, (long long)R, d);
    for (int b = 0; b < N_BE; b++) free(out[b]);
    free(x); free(w); free(bb); free(we); free(bexact); free(wh); free(bh); free(hand);
}

static void test_norm_per_head_weights(void) {
    per_head_norm_case(0, 16, 3, 3, 5, LMC_DTYPE_F32, 0, 45);
    per_head_norm_case(0, 9, 4, 4, 1, LMC_DTYPE_BF16, 1, 46);
    per_head_norm_case(0, 32, 2, 2, 17, LMC_DTYPE_F16, 0, 47);
    per_head_norm_case(1, 16, 3, 3, 5, LMC_DTYPE_F32, 0, 48);
    per_head_norm_case(1, 7, 5, 1, 3, LMC_DTYPE_BF16, 0, 49);  /* per-head w, one shared bias row */
    per_head_norm_case(0, 16, 1, 1, 6, LMC_DTYPE_F32, 0, 44);  /* one row: shared by all */
}

/* ------------------------------------------------------------------ rope */

static void rope_case(int64_t hd, int64_t nh, int n_rot, int interleaved, float attn_factor, const int32_t *pos,
                      int n_tok, uint64_t s) {
    seed(s);
    const size_t N = (size_t)(hd * nh * n_tok);
    float *x = fvec(N), inv[256];
    fill(x, N, -2, 2);
    for (int i = 0; i < n_rot / 2; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)n_rot);
    float *out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        lmc_tensor xt = mk(be, LMC_DTYPE_F32, hd, nh, n_tok, x), pt = mk_i32(be, pos, n_tok);
        lmc_tensor it = mk(be, LMC_DTYPE_F32, n_rot / 2, 1, 1, inv);
        lmc_rope_op op = {.n_rot = n_rot, .interleaved = interleaved, .attn_factor = attn_factor, .inv_freq = &it};
        be->i->rope(be, &xt, &pt, &op);
        out[b] = fvec(N);
        get_all(be, &xt, out[b]);
        rel(be, &xt); rel(be, &pt); rel(be, &it);
    }
    check_vs_ref(out, N, 1e-6, "rope");
    /* by hand: rotate each pair by angle = pos · inv_freq (product in f32, as transformers does) */
    double *hand = malloc(sizeof(double) * N);
    for (int t = 0; t < n_tok; t++)
        for (int64_t h = 0; h < nh; h++) {
            const float *v = x + ((size_t)t * nh + h) * hd;
            double *o = hand + ((size_t)t * nh + h) * hd;
            for (int64_t i = 0; i < hd; i++) o[i] = v[i]; /* dims past n_rot pass through */
            for (int i = 0; i < n_rot / 2; i++) {
                int a = interleaved ? 2 * i : i, c = interleaved ? 2 * i + 1 : i + n_rot / 2;
                double ang = (double)((float)pos[t] * inv[i]);
                o[a] = attn_factor * (v[a] * cos(ang) - v[c] * sin(ang));
                o[c] = attn_factor * (v[c] * cos(ang) + v[a] * sin(ang));
            }
        }
    double sc = maxabs_d(hand, N) > 1 ? maxabs_d(hand, N) : 1, d = maxdiff_d(out[0], hand, N);
    CHECK_MSG(d <= 1e-5 * sc, "rope hd=%lld rot=%d il=%d: reference vs hand differs by %g", (long long)hd, n_rot,
              interleaved, d);
    /* the pass-through dims are bit-identical */
    int bad = 0;
    for (size_t r = 0; r < (size_t)(nh * n_tok); r++)
        for (int64_t i = n_rot; i < hd; i++) bad += out[0][r * hd + i] != x[r * hd + i];
    CHECK_EQ_INT(bad, 0);
    for (int b = 0; b < N_BE; b++) free(out[b]);
    free(x); free(hand);
}

static const int32_t ROPE_POS[] = {0, 1, 2, 7, 100, 4095, 32767, 3};

static void test_rope_neox(void) {
    rope_case(16, 4, 16, 0, 1.0f, ROPE_POS, 8, 50);
    rope_case(64, 3, 64, 0, 1.0f, ROPE_POS, 1, 51);
    rope_case(2, 1, 2, 0, 1.0f, ROPE_POS + 3, 5, 52);
}
static void test_rope_interleaved(void) {
    rope_case(16, 4, 16, 1, 1.0f, ROPE_POS, 8, 53);
    rope_case(34, 5, 34, 1, 1.0f, ROPE_POS + 2, 6, 54);
}
static void test_rope_partial(void) { /* n_rot < head_dim: the tail passes through */
    rope_case(24, 3, 16, 0, 1.0f, ROPE_POS, 8, 55);
    rope_case(24, 3, 6, 1, 1.0f, ROPE_POS, 8, 56);
    rope_case(80, 2, 20, 0, 1.0f, ROPE_POS + 1, 4, 57);
}
static void test_rope_attn_factor(void) {
    rope_case(16, 2, 16, 0, 1.2079441f, ROPE_POS, 8, 58);
    rope_case(24, 2, 12, 1, 0.5f, ROPE_POS, 8, 59);
}
/* Position 0 is the identity (times attn_factor); rotation keeps each pair's norm. */
static void test_rope_properties(void) {
    const int64_t hd = 12;
    float x[12], y[12], inv[6];
    seed(60);
    fill(x, 12, -1, 1);
    for (int i = 0; i < 6; i++) inv[i] = 1.0f / powf(500.0f, (float)i / 6.0f);
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        for (int p = 0; p < 3; p++) {
            int32_t pos = p == 0 ? 0 : (p == 1 ? 5 : 9999);
            lmc_tensor xt = mk(be, LMC_DTYPE_F32, hd, 1, 1, x), pt = mk_i32(be, &pos, 1);
            lmc_tensor it = mk(be, LMC_DTYPE_F32, 6, 1, 1, inv);
            lmc_rope_op op = {.n_rot = 12, .interleaved = 0, .attn_factor = 1.0f, .inv_freq = &it};
            be->i->rope(be, &xt, &pt, &op);
            get_all(be, &xt, y);
            if (pos == 0) for (int i = 0; i < 12; i++) CHECK(y[i] == x[i]);
            for (int i = 0; i < 6; i++)
                CHECK_NEAR(hypot(y[i], y[i + 6]), hypot(x[i], x[i + 6]), 1e-6);
            if (pos != 0) CHECK(maxdiff(x, y, 12) > 1e-3);
            rel(be, &xt); rel(be, &pt); rel(be, &it);
        }
    }
}

/* ------------------------------------------------------------------ kv_store + attention */

typedef struct {
    int n_head, n_kv_head, head_dim, n_ctx, n_seq, window;
    float scale, softcap;
    int has_sinks;                 /* attention sinks: one logit per head in the softmax */
    float sinks[16];
    int n_rounds;
    int round_tokens[40];          /* tokens per round */
    int32_t seq[40][32], pos[40][32];
} attn_scenario;

/* Seed every batch of a scenario: round 0 prefills `pre[s]` tokens of each
 * sequence (interleaved across sequences), later rounds add `step` tokens per
 * sequence. Positions run on past n_ctx when n_rounds is large (rotating slots). */
static void scenario_build(attn_scenario *sc, const int *pre, int step, int n_rounds) {
    int next[8] = {0};
    sc->n_rounds = n_rounds;
    for (int r = 0; r < n_rounds; r++) {
        int n = 0;
        int want[8];
        for (int s = 0; s < sc->n_seq; s++) want[s] = r == 0 ? pre[s] : step;
        for (int k = 0, more = 1; more; k++) { /* interleave: seq 0 tok k, seq 1 tok k, ... */
            more = 0;
            for (int s = sc->n_seq - 1; s >= 0; s--) /* descending sequence order inside a batch */
                if (k < want[s]) { sc->seq[r][n] = s; sc->pos[r][n] = next[s] + k; n++; more = 1; }
        }
        for (int s = 0; s < sc->n_seq; s++) next[s] += want[s];
        sc->round_tokens[r] = n;
        LMC_ASSERT(n <= 32);
    }
}

static void attention_scenario(const attn_scenario *sc, uint64_t s) {
    seed(s);
    const int hd = sc->head_dim, nh = sc->n_head, nkv = sc->n_kv_head, kv_row = hd * nkv, q_row = hd * nh;
    int max_pos = 0;
    for (int r = 0; r < sc->n_rounds; r++)
        for (int t = 0; t < sc->round_tokens[r]; t++) if (sc->pos[r][t] + 1 > max_pos) max_pos = sc->pos[r][t] + 1;
    /* the whole K/V history of every sequence, and the queries of every round */
    float *kh = fvec((size_t)sc->n_seq * max_pos * kv_row), *vh = fvec((size_t)sc->n_seq * max_pos * kv_row);
    fill(kh, (size_t)sc->n_seq * max_pos * kv_row, -1, 1);
    fill(vh, (size_t)sc->n_seq * max_pos * kv_row, -2, 2);
    int total = 0;
    for (int r = 0; r < sc->n_rounds; r++) total += sc->round_tokens[r];
    float *qs = fvec((size_t)total * q_row);
    fill(qs, (size_t)total * q_row, -2.5f, 2.5f);
    float *out[N_BE];
    int cache_bad = 0;
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        out[b] = fvec((size_t)total * q_row);
        lmc_tensor kc = mk(be, LMC_DTYPE_F32, kv_row, sc->n_ctx, sc->n_seq, NULL);
        lmc_tensor vc = mk(be, LMC_DTYPE_F32, kv_row, sc->n_ctx, sc->n_seq, NULL);
        float *row = fvec((size_t)kv_row);
        lmc_tensor sk = mk(be, LMC_DTYPE_F32, nh, 1, 1, (float *)sc->sinks);
        int done = 0;
        for (int r = 0; r < sc->n_rounds; r++) {
            const int n = sc->round_tokens[r];
            float *kb = fvec((size_t)n * kv_row), *vb = fvec((size_t)n * kv_row);
            for (int t = 0; t < n; t++) {
                size_t src = ((size_t)sc->seq[r][t] * max_pos + sc->pos[r][t]) * kv_row;
                memcpy(kb + (size_t)t * kv_row, kh + src, sizeof(float) * kv_row);
                memcpy(vb + (size_t)t * kv_row, vh + src, sizeof(float) * kv_row);
            }
            lmc_tensor kt = mk(be, LMC_DTYPE_F32, kv_row, n, 1, kb), vt = mk(be, LMC_DTYPE_F32, kv_row, n, 1, vb);
            lmc_tensor pt = mk_i32(be, sc->pos[r], n), st = mk_i32(be, sc->seq[r], n);
            /* q as [head_dim, n_head, n] (as the forward hands it over after rope) */
            lmc_tensor qt = mk(be, LMC_DTYPE_F32, hd, nh, n, qs + (size_t)done * q_row);
            lmc_tensor y = mk_out(be, q_row, n, 1);
            be->i->kv_store(be, &kc, &kt, &pt, &st);
            be->i->kv_store(be, &vc, &vt, &pt, &st);
            /* the cache rows sit at slot (pos mod n_ctx, seq) */
            for (int t = 0; t < n; t++) {
                size_t slot = (size_t)sc->seq[r][t] * sc->n_ctx + (size_t)(sc->pos[r][t] % sc->n_ctx);
                be->i->get(be, row, &kc, slot * kv_row * sizeof(float), sizeof(float) * kv_row);
                cache_bad += memcmp(row, kb + (size_t)t * kv_row, sizeof(float) * kv_row) != 0;
                be->i->get(be, row, &vc, slot * kv_row * sizeof(float), sizeof(float) * kv_row);
                cache_bad += memcmp(row, vb + (size_t)t * kv_row, sizeof(float) * kv_row) != 0;
            }
            lmc_attn_op op = {.n_head = nh, .n_kv_head = nkv, .head_dim = hd, .scale = sc->scale,
                              .softcap = sc->softcap, .window = sc->window, .sinks = sc->has_sinks ? &sk : NULL};
            be->i->attention(be, &y, &qt, &kc, &vc, &pt, &st, &op);
            get_all(be, &y, out[b] + (size_t)done * q_row);
            done += n;
            rel(be, &kt); rel(be, &vt); rel(be, &pt); rel(be, &st); rel(be, &qt); rel(be, &y);
            free(kb); free(vb);
        }
        free(row);
        rel(be, &kc); rel(be, &vc); rel(be, &sk);
    }
    CHECK_EQ_INT(cache_bad, 0);
    check_vs_ref(out, (size_t)total * q_row, 1e-5, "attention");
    /* by hand, from the full history (not the cache): causal, windowed softmax in double */
    double *hand = malloc(sizeof(double) * (size_t)total * q_row), *w = malloc(sizeof(double) * (size_t)max_pos);
    int done = 0, group = nh / nkv;
    for (int r = 0; r < sc->n_rounds; r++)
        for (int t = 0; t < sc->round_tokens[r]; t++, done++) {
            const int sq = sc->seq[r][t], p = sc->pos[r][t];
            const int lo = sc->window > 0 && p - sc->window + 1 > 0 ? p - sc->window + 1 : 0;
            LMC_ASSERT(p - lo + 1 <= sc->n_ctx); /* scenarios never ask for more than the cache holds */
            for (int h = 0; h < nh; h++) {
                const float *q = qs + (size_t)done * q_row + (size_t)h * hd;
                const int kvh = h / group;
                double mx = -INFINITY, sum = 0;
                for (int j = lo; j <= p; j++) {
                    const float *k = kh + ((size_t)sq * max_pos + j) * kv_row + (size_t)kvh * hd;
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += (double)q[i] * k[i];
                    d *= sc->scale;
                    if (sc->softcap > 0) d = sc->softcap * tanh(d / sc->softcap);
                    w[j] = d;
                    if (d > mx) mx = d;
                }
                if (sc->has_sinks && sc->sinks[h] > mx) mx = sc->sinks[h];
                if (sc->has_sinks) sum += exp(sc->sinks[h] - mx); /* a logit no value follows */
                for (int j = lo; j <= p; j++) { w[j] = exp(w[j] - mx); sum += w[j]; }
                double *o = hand + (size_t)done * q_row + (size_t)h * hd;
                for (int i = 0; i < hd; i++) o[i] = 0;
                for (int j = lo; j <= p; j++) {
                    const float *v = vh + ((size_t)sq * max_pos + j) * kv_row + (size_t)kvh * hd;
                    for (int i = 0; i < hd; i++) o[i] += w[j] / sum * v[i];
                }
            }
        }
    size_t N = (size_t)total * q_row;
    double scl = maxabs_d(hand, N) > 1 ? maxabs_d(hand, N) : 1, d = maxdiff_d(out[0], hand, N);
    CHECK_MSG(d <= 1e-5 * scl, "attention (nh %d, nkv %d, window %d, n_ctx %d): reference vs hand differs by %g", nh,
              nkv, sc->window, sc->n_ctx, d);
    for (int b = 0; b < N_BE; b++) free(out[b]);
    free(kh); free(vh); free(qs); free(hand); free(w);
}

static attn_scenario scenario(int nh, int nkv, int hd, int n_ctx, int n_seq, int window, float softcap) {
    attn_scenario sc;
    memset(&sc, 0, sizeof sc);
    sc.n_head = nh; sc.n_kv_head = nkv; sc.head_dim = hd; sc.n_ctx = n_ctx; sc.n_seq = n_seq;
    sc.window = window; sc.softcap = softcap;
    sc.scale = 1.0f / sqrtf((float)hd);
    return sc;
}

static void test_attention_gqa1(void) {
    attn_scenario sc = scenario(3, 3, 17, 40, 2, 0, 0);
    const int pre[] = {10, 6};
    scenario_build(&sc, pre, 1, 6);
    attention_scenario(&sc, 70);
    sc = scenario(2, 2, 8, 16, 1, 0, 0); /* a single token prefill, then decode */
    const int pre1[] = {1};
    scenario_build(&sc, pre1, 1, 10);
    attention_scenario(&sc, 71);
}
static void test_attention_gqa2(void) {
    attn_scenario sc = scenario(4, 2, 16, 32, 3, 0, 0);
    const int pre[] = {7, 1, 12};
    scenario_build(&sc, pre, 2, 5);
    attention_scenario(&sc, 72);
}
static void test_attention_gqa4(void) {
    attn_scenario sc = scenario(8, 2, 9, 24, 2, 0, 0);
    const int pre[] = {5, 9};
    scenario_build(&sc, pre, 1, 8);
    attention_scenario(&sc, 73);
    sc = scenario(4, 1, 64, 20, 2, 0, 0);
    const int pre2[] = {3, 4};
    scenario_build(&sc, pre2, 3, 4);
    attention_scenario(&sc, 74);
}
/* Ranges of many 16-position steps (the fast path's scores come 16 rows at a time, from at most
 * two runs of consecutive slots): 128-wide heads over 88 positions, 80-wide heads in a 48-slot ring
 * with a 40-position window that wraps, and 40 query heads sharing one KV head. */
static void test_attention_long(void) {
    attn_scenario sc = scenario(8, 2, 128, 96, 1, 0, 0);
    const int pre[] = {30};
    scenario_build(&sc, pre, 2, 30);
    attention_scenario(&sc, 84);
    sc = scenario(4, 2, 80, 48, 2, 40, 0);
    const int pre2[] = {9, 9};
    scenario_build(&sc, pre2, 4, 30);
    attention_scenario(&sc, 85);
    sc = scenario(40, 1, 16, 64, 1, 0, 0); /* 40 query heads on one KV head */
    const int pre3[] = {20};
    scenario_build(&sc, pre3, 3, 6);
    attention_scenario(&sc, 86);
}
/* A small window without wrapping: only the last `window` positions count. */
static void test_attention_window(void) {
    attn_scenario sc = scenario(4, 2, 12, 32, 2, 3, 0);
    const int pre[] = {8, 5};
    scenario_build(&sc, pre, 1, 6);
    attention_scenario(&sc, 75);
    sc = scenario(2, 1, 5, 32, 1, 1, 0); /* window 1: each token sees only itself */
    const int pre1[] = {6};
    scenario_build(&sc, pre1, 1, 3);
    attention_scenario(&sc, 76);
}
/* A rotating cache: n_ctx < positions, window ≤ n_ctx, the slots wrap several times. */
static void test_attention_window_wrap(void) {
    attn_scenario sc = scenario(4, 1, 12, 8, 3, 6, 0);
    const int pre[] = {3, 2, 1};          /* prefill chunk ≤ n_ctx - window + 1 */
    scenario_build(&sc, pre, 1, 25);      /* positions up to 27 in an 8-slot cache */
    attention_scenario(&sc, 77);
    sc = scenario(6, 3, 7, 8, 2, 8, 0);   /* window == n_ctx */
    const int pre2[] = {1, 1};
    scenario_build(&sc, pre2, 1, 20);
    attention_scenario(&sc, 78);
    sc = scenario(4, 2, 16, 10, 2, 4, 0); /* chunks of 3 per sequence per round (≤ 10 - 4 + 1) */
    const int pre3[] = {3, 3};
    scenario_build(&sc, pre3, 3, 9);
    attention_scenario(&sc, 79);
}
/* Many sequences in one batch, in descending and interleaved order. */
static void test_attention_many_sequences(void) {
    attn_scenario sc = scenario(4, 2, 8, 16, 6, 0, 0);
    const int pre[] = {4, 1, 3, 2, 5, 1};
    scenario_build(&sc, pre, 1, 5);
    attention_scenario(&sc, 80);
}
static void test_attention_softcap(void) {
    attn_scenario sc = scenario(4, 2, 16, 24, 2, 0, 2.0f);
    sc.scale = 1.0f; /* large scores so the cap bites */
    const int pre[] = {6, 4};
    scenario_build(&sc, pre, 1, 4);
    attention_scenario(&sc, 81);
    sc = scenario(2, 1, 10, 8, 1, 5, 50.0f);
    const int pre2[] = {4};
    scenario_build(&sc, pre2, 1, 12);
    attention_scenario(&sc, 82);
}
/* Attention sinks (gpt-oss): per-head logits in the denominator, from far below the scores to
 * far above them (a sink of 30 leaves almost nothing of the values), with a window and GQA. */
static void test_attention_sinks(void) {
    attn_scenario sc = scenario(4, 2, 16, 32, 2, 0, 0);
    sc.has_sinks = 1;
    const float s1[4] = {-20.0f, 0.5f, 3.0f, 30.0f};
    memcpy(sc.sinks, s1, sizeof s1);
    const int pre[] = {9, 3};
    scenario_build(&sc, pre, 1, 5);
    attention_scenario(&sc, 83);
    sc = scenario(6, 3, 8, 8, 2, 5, 0); /* sliding window over a rotating cache */
    sc.has_sinks = 1;
    const float s2[6] = {1.5f, -1.0f, 0.0f, 2.5f, -3.0f, 0.75f};
    memcpy(sc.sinks, s2, sizeof s2);
    const int pre2[] = {4, 2};
    scenario_build(&sc, pre2, 1, 14);
    attention_scenario(&sc, 84);
}

/* One query over two keys: the softmax weights worked out by hand. */
static void test_attention_known(void) {
    const float k[2][2] = {{1, 0}, {0, 1}}, v[2][2] = {{10, 0}, {0, 20}};
    const float q[2] = {2, 0};
    const int32_t pos[2] = {0, 1}, seq[2] = {0, 0};
    double e0 = exp(2.0 * 0.5), e1 = exp(0.0);
    const double w0 = e0 / (e0 + e1), w1 = e1 / (e0 + e1);
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        lmc_tensor kc = mk(be, LMC_DTYPE_F32, 2, 4, 1, NULL), vc = mk(be, LMC_DTYPE_F32, 2, 4, 1, NULL);
        lmc_tensor kt = mk(be, LMC_DTYPE_F32, 2, 2, 1, k), vt = mk(be, LMC_DTYPE_F32, 2, 2, 1, v);
        lmc_tensor pt = mk_i32(be, pos, 2), st = mk_i32(be, seq, 2);
        be->i->kv_store(be, &kc, &kt, &pt, &st);
        be->i->kv_store(be, &vc, &vt, &pt, &st);
        lmc_tensor p1 = mk_i32(be, pos + 1, 1), s1 = mk_i32(be, seq, 1);
        lmc_tensor qt = mk(be, LMC_DTYPE_F32, 2, 1, 1, q), y = mk_out(be, 2, 1, 1);
        lmc_attn_op op = {.n_head = 1, .n_kv_head = 1, .head_dim = 2, .scale = 0.5f};
        be->i->attention(be, &y, &qt, &kc, &vc, &p1, &s1, &op);
        float got[2];
        get_all(be, &y, got);
        CHECK_NEAR(got[0], 10 * w0, 1e-5);
        CHECK_NEAR(got[1], 20 * w1, 1e-5);
        /* position 0 only sees itself */
        lmc_tensor p0 = mk_i32(be, pos, 1);
        be->i->attention(be, &y, &qt, &kc, &vc, &p0, &s1, &op);
        get_all(be, &y, got);
        CHECK_NEAR(got[0], 10, 1e-6);
        CHECK_NEAR(got[1], 0, 1e-6);
        rel(be, &kc); rel(be, &vc); rel(be, &kt); rel(be, &vt); rel(be, &pt); rel(be, &st);
        rel(be, &p1); rel(be, &s1); rel(be, &qt); rel(be, &y); rel(be, &p0);
    }
}

/* ------------------------------------------------------------------ activations */

static double act_ref(lmc_act a, double x) {
    switch (a) {
    case LMC_ACT_SILU: return x / (1.0 + exp(-x));
    case LMC_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case LMC_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case LMC_ACT_RELU: return x > 0 ? x : 0;
    case LMC_ACT_RELU2: return x > 0 ? x * x : 0;
    }
    return NAN;
}
static const lmc_act ACTS[] = {LMC_ACT_SILU, LMC_ACT_GELU, LMC_ACT_GELU_TANH, LMC_ACT_RELU, LMC_ACT_RELU2};
static const char *ACT_NAMES[] = {"silu", "gelu", "gelu_tanh", "relu", "relu2"};

/* Inputs over [-8, 8] plus the edges: 0, ±tiny, ±30. */
static void act_inputs(float *x, size_t n) {
    fill(x, n, -8, 8);
    const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 1.0f, -1.0f};
    for (size_t i = 0; i < 8 && i < n; i++) x[i] = edge[i];
}

static void act_case(int a, int mul, int64_t D, int64_t n, uint64_t s) {
    seed(s);
    size_t N = (size_t)(D * n);
    float *g = fvec(N), *u = fvec(N);
    act_inputs(g, N);
    fill(u, N, -2, 2);
    float *out[N_BE];
    for (int b = 0; b < N_BE; b++) {
        lmc_backend *be = BE[b];
        lmc_tensor gt = mk(be, LMC_DTYPE_F32, D, n, 1, g), ut = mk(be, LMC_DTYPE_F32, D, n, 1, u);
        lmc_tensor y = mk_out(be, D, n, 1);
        if (mul) be->i->act_mul(be, &y, &gt, &ut, ACTS[a]);
        else be->i->act(be, &y, &gt, ACTS[a]);
        out[b] = fvec(N);
        get_all(be, &y, out[b]);
        rel(be, &gt); rel(be, &ut); rel(be, &y);
    }
    check_vs_ref(out, N, 1e-6, ACT_NAMES[a]);
    int bad = 0;
    for (size_t i = 0; i < N; i++) {
        double want = act_ref(ACTS[a], g[i]) * (mul ? (double)u[i] : 1.0);
        if (!(fabs(out[0][i] - want) <= 2e-6 * (fabs(want) > 1 ? fabs(want) : 1))) {
            if (bad++ < 3) fprintf(stderr, "  %s%s(%g) = %.9g, want %.9g\n", ACT_NAMES[a], mul ? "_mul" : "", g[i], out[0][i], want);
        }
    }
    CHECK_MSG(bad == 0, "%s%s: %d elements off", ACT_NAMES[a], mul ? "_mul" : "", bad);
    for (int b = 0; b < N_BE; b++) free(out[b]);
    free(g); free(u);
}

static void test_act(void) {
    for (int a = 0; a < 5; a++) {
        act_case(a, 0, 1, 1, 90 + (uint64_t)a);
        act_case(a, 0, 67, 17, 95 + (uint64_t)a);
    }
}
/* The vector e^x the fast activations and softmax use: within 2.5 ulp of e^x (double) over
 * [-87, 88], 1 at 0, tiny and ≥ 0 far below, NaN kept. */
static void test_exp_vector(void) {
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < 200000; i += 16) {
        float x[16], y[16];
        for (int k = 0; k < 16; k++) x[k] = -87.0f + 175.0f * (float)(i + k) / 200000.0f;
        lmc_cpu_exp_v16(x, y);
        for (int k = 0; k < 16; k++) {
            const double want = exp((double)x[k]), r = fabs(y[k] - want) / want;
            if (r > worst) worst = r;
            if (!(r <= 1.5e-7) && bad++ < 3) fprintf(stderr, "  e^%.9g = %.9g, want %.9g\n", x[k], y[k], want);
        }
    }
    CHECK_MSG(bad == 0, "vector exp: %d values off (worst relative %g)", bad, worst);
    float x[16] = {0.0f, -0.0f, -INFINITY, -1000.0f, NAN, 1e-30f, -1e-30f, 1.0f, -1.0f, 0.5f, 2.0f, 10.0f, -10.0f, 80.0f, -80.0f, 3.0f}, y[16];
    lmc_cpu_exp_v16(x, y);
    CHECK(y[0] == 1.0f && y[1] == 1.0f && y[5] == 1.0f && y[6] == 1.0f);
    CHECK(y[2] >= 0.0f && y[2] < 1e-37f && y[3] >= 0.0f && y[3] < 1e-37f);
    CHECK(isnan(y[4]));
}

/* lmc_cpu_scale_max against a scalar loop: every length's tail, the maximum in the tail or in any
 * lane, NaNs never taken as the maximum, n = 0. */
static void test_scale_max(void) {
    float s[80], want[80];
    uint64_t r = 77;
    for (int n = 0; n <= 80; n++) {
        for (int where = -1; where < n; where += n > 20 ? 7 : 1) {
            for (int i = 0; i < n; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                s[i] = (float)((double)(r >> 40) / (double)(1ull << 24) * 8.0 - 6.0);
            }
            if (where >= 0) s[where] = 7.5f; /* the largest, at each position in turn */
            if (n > 3) s[n / 3] = NAN;
            float m = -INFINITY;
            for (int i = 0; i < n; i++) {
                want[i] = s[i] * 0.125f;
                if (want[i] > m) m = want[i];
            }
            const float got = lmc_cpu_scale_max(s, n, 0.125f);
            CHECK_MSG(got == m, "scale_max n %d, largest at %d: %g, want %g", n, where, got, m);
            for (int i = 0; i < n; i++)
                CHECK_MSG(isnan(want[i]) ? isnan(s[i]) : s[i] == want[i], "scale_max n %d: s[%d] %g, want %g", n, i, s[i], want[i]);
        }
    }
}

static void test_act_mul(void) {
    for (int a = 0; a < 5; a++) {
        act_case(a, 1, 13, 1, 100 + (uint64_t)a);
        act_case(a, 1, 64, 9, 105 + (uint64_t)a);
    }
}
/* A few values known in closed form. */
static void test_act_known(void) {
    const float x[4] = {0, 1, -1, 3};
    float y[4];
    lmc_backend *be = BE[0];
    lmc_tensor xt = mk(be, LMC_DTYPE_F32, 4, 1, 1, x), yt = mk_out(be, 4, 1, 1);
    be->i->act(be, &yt, &xt, LMC_ACT_GELU);
    get_all(be, &yt, y);
    CHECK(y[0] == 0);
    CHECK_NEAR(y[1], 0.841344746, 1e-6);  /* Φ(1) */
    CHECK_NEAR(y[2], -0.158655254, 1e-6); /* -(1 - Φ(1)) */
    be->i->act(be, &yt, &xt, LMC_ACT_SILU);
    get_all(be, &yt, y);
    CHECK_NEAR(y[1], 0.731058579, 1e-6);
    CHECK_NEAR(y[3], 2.857722150, 1e-6);
    be->i->act(be, &yt, &xt, LMC_ACT_RELU2);
    get_all(be, &yt, y);
    CHECK(y[0] == 0 && y[1] == 1 && y[2] == 0 && y[3] == 9);
    rel(be, &xt); rel(be, &yt);
}

static void test_softcap(void) {
    const float caps[] = {30.0f, 5.0f, 0.5f};
    const int64_t shapes[][2] = {{1, 1}, {33, 7}, {256, 3}};
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++) {
            int64_t D = shapes[k][0], n = shapes[k][1];
            size_t N = (size_t)(D * n);
            seed(200 + (uint64_t)(c * 10 + k));
            float *x = fvec(N);
            fill(x, N, -100, 100);
            x[0] = 0;
            float *out[N_BE];
            for (int b = 0; b < N_BE; b++) {
                lmc_backend *be = BE[b];
                lmc_tensor xt = mk(be, LMC_DTYPE_F32, D, n, 1, x), y = mk_out(be, D, n, 1);
                be->i->softcap(be, &y, &xt, caps[c]);
                out[b] = fvec(N);
                get_all(be, &y, out[b]);
                rel(be, &xt); rel(be, &y);
            }
            check_vs_ref(out, N, 1e-6, "softcap");
            int bad = 0;
            for (size_t i = 0; i < N; i++) {
                double want = caps[c] * tanh(x[i] / (double)caps[c]);
                if (!(fabs(out[0][i] - want) <= 1e-6 * caps[c])) bad++;
                if (!(fabs(out[0][i]) <= caps[c])) bad++; /* bounded by the cap */
            }
            CHECK_EQ_INT(bad, 0);
            for (int b = 0; b < N_BE; b++) free(out[b]);
            free(x);
        }
}

int main(void) {
    if (lmc_backend_cpu_init(&BE[0], 1, 1) != LMC_OK || lmc_backend_cpu_init(&BE[1], 2, 0) != LMC_OK ||
        lmc_backend_cpu_init(&BE[2], 3, 0) != LMC_OK) {
        fprintf(stderr, "cannot start the cpu backends: %s\n", lmc_last_error());
        printf("RESULT 0 1\n");
        return 1;
    }
    RUN(test_memory_ops);
    RUN(test_backend_init_by_name);
    RUN(test_get_rows_f32);
    RUN(test_get_rows_f16);
    RUN(test_get_rows_bf16);
    RUN(test_matmul_known);
    RUN(test_matmul_f32);
    RUN(test_matmul_f16);
    RUN(test_matmul_bf16);
    RUN(test_matmul_large);
    RUN(test_matmul_strided_rows);
    RUN(test_add_bias);
    RUN(test_add);
    RUN(test_scale);
    RUN(test_rms_norm_weight);
    RUN(test_rms_norm_no_weight);
    RUN(test_rms_norm_offset);
    RUN(test_layer_norm);
    RUN(test_norm_per_head_weights);
    RUN(test_rope_neox);
    RUN(test_rope_interleaved);
    RUN(test_rope_partial);
    RUN(test_rope_attn_factor);
    RUN(test_rope_properties);
    RUN(test_attention_known);
    RUN(test_attention_gqa1);
    RUN(test_attention_gqa2);
    RUN(test_attention_gqa4);
    RUN(test_attention_long);
    RUN(test_attention_window);
    RUN(test_attention_window_wrap);
    RUN(test_attention_many_sequences);
    RUN(test_attention_softcap);
    RUN(test_attention_sinks);
    RUN(test_act);
    RUN(test_act_mul);
    RUN(test_exp_vector);
    RUN(test_scale_max);
    RUN(test_act_known);
    RUN(test_softcap);
    for (int b = 0; b < N_BE; b++) lmc_backend_free(BE[b]);
    return TEST_END();
}
