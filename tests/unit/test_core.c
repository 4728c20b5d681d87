/* test_core.c — core: dtype conversions (bf16, f16: exhaustive over the 16-bit
 * patterns, checked against independent formulas written here), dtype names,
 * the thread pool (lmc_pool_run, lmc_split) and the per-thread last-error
 * message (lmc_fail, lmc_fail_context, truncation).
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "core/dtype.h"
#include "core/status.h"
#include "core/threadpool.h"

/* ------------------------------------------------------------------ helpers */

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* The value of a bf16 bit pattern, with the all-ones exponent read as ±2^128:
 * the "next value" past the largest finite, which IEEE rounding uses for overflow. */
static double bf16_value_unbounded(uint16_t h) {
    int sign = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v;
    if (e == 0xff) v = ldexp(1.0, 128);
    else if (e == 0) v = ldexp((double)m, -126 - 7);
    else v = ldexp(128.0 + m, e - 127 - 7);
    return sign ? -v : v;
}

/* The value of an f16 bit pattern by the IEEE binary16 definition (finite only). */
static double f16_value(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, e - 25);
    return sign ? -v : v;
}

/* Independent f32 → f16: nearest of the two neighbouring f16 values by
 * binary search over the positive finite values (with 65536 standing in for
 * the value past 65504), ties to the even bit pattern. */
static uint16_t f16_round_ref(float x) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs((double)x);
    if (a >= 65536.0) return sign | 0x7c00;
    /* largest h in [0, 0x7c00] with value(h) <= a (0x7c00 stands for 65536) */
    int lo = 0, hi = 0x7c00;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        double vm = mid == 0x7c00 ? 65536.0 : f16_value((uint16_t)mid);
        if (vm <= a) lo = mid; else hi = mid - 1;
    }
    if (lo == 0x7c00) return sign | 0x7c00;
    double vl = f16_value((uint16_t)lo);
    double vh = lo + 1 == 0x7c00 ? 65536.0 : f16_value((uint16_t)(lo + 1));
    int pick;
    if (a - vl < vh - a) pick = lo;
    else if (a - vl > vh - a) pick = lo + 1;
    else pick = (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | pick);
}

static int f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

/* ------------------------------------------------------------------ bf16 */

static void test_bf16_known_values(void) {
    CHECK_EQ_INT(lmc_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(lmc_f32_to_bf16(-2.0f), 0xc000);
    CHECK_EQ_INT(lmc_f32_to_bf16(0.0f), 0x0000);
    CHECK_EQ_INT(lmc_f32_to_bf16(-0.0f), 0x8000);
    CHECK_EQ_INT(lmc_f32_to_bf16(INFINITY), 0x7f80);
    CHECK_EQ_INT(lmc_f32_to_bf16(-INFINITY), 0xff80);
    /* exact ties: round to the even bf16 pattern */
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x3f808000u)), 0x3f80); /* between 3f80 and 3f81 → 3f80 */
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x3f818000u)), 0x3f82); /* between 3f81 and 3f82 → 3f82 */
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0xbf818000u)), 0xbf82);
    /* just off the tie */
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x3f808001u)), 0x3f81);
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x3f807fffu)), 0x3f80);
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x3f81ffffu)), 0x3f82);
    /* rounding carries into the exponent */
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x3fffffffu)), 0x4000);
    /* the largest finite f32 rounds to infinity (past bf16's largest finite, 0x7f7f) */
    CHECK_EQ_INT(lmc_f32_to_bf16(FLT_MAX), 0x7f80);
    CHECK_EQ_INT(lmc_f32_to_bf16(-FLT_MAX), 0xff80);
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x7f7f7fffu)), 0x7f7f);
    /* subnormals and the smallest ones */
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x00010000u)), 0x0001);
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x00008000u)), 0x0000); /* tie → even (0) */
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x00018000u)), 0x0002); /* tie → even (2) */
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x00000001u)), 0x0000);
    CHECK_EQ_INT(lmc_f32_to_bf16(u2f(0x807fffffu)), 0x8080); /* largest negative subnormal → -min normal */
    /* bf16 → f32 */
    CHECK(lmc_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(lmc_bf16_to_f32(0xc049) == -3.140625f);
    CHECK(isinf(lmc_bf16_to_f32(0x7f80)) && lmc_bf16_to_f32(0x7f80) > 0);
    CHECK(isinf(lmc_bf16_to_f32(0xff80)) && lmc_bf16_to_f32(0xff80) < 0);
    CHECK(lmc_bf16_to_f32(0x8000) == 0.0f && signbit(lmc_bf16_to_f32(0x8000)));
}

static void test_bf16_nan(void) {
    /* every NaN stays a NaN, keeps its sign, and never becomes an infinity —
     * including NaNs whose payload lives only in the low 16 bits */
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xff800001u,
                             0xffc00000u, 0x7f808000u, 0xff80c000u, 0x7fbfffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = lmc_f32_to_bf16(u2f(nans[i]));
        CHECK_MSG(bf16_is_nan(h), "f32 %08x → bf16 %04x is not NaN", nans[i], h);
        CHECK_MSG((h >> 15) == (nans[i] >> 31), "f32 %08x → bf16 %04x lost its sign", nans[i], h);
    }
    CHECK(isnan(lmc_bf16_to_f32(0x7fc0)));
    CHECK(isnan(lmc_bf16_to_f32(0x7f81)));
    CHECK(isnan(lmc_bf16_to_f32(0xffff)));
}

static void test_bf16_exhaustive_roundtrip(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = lmc_bf16_to_f32((uint16_t)h);
        if (f2u(f) != h << 16) { if (bad++ < 5) fprintf(stderr, "  bf16 %04x → f32 %08x\n", h, f2u(f)); continue; }
        uint16_t back = lmc_f32_to_bf16(f);
        if (bf16_is_nan((uint16_t)h)) {
            if (!bf16_is_nan(back) || (back >> 15) != (h >> 15)) bad++;
        } else if (back != h) {
            if (bad++ < 5) fprintf(stderr, "  bf16 %04x → %04x\n", h, back);
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* f32 → bf16 against an independent round-to-nearest-even on doubles. */
static void test_bf16_random_vs_reference(void) {
    int bad = 0;
    for (int k = 0; k < 2000000; k++) {
        uint32_t u = rnd32();
        if (k & 1) u = (u & 0xffff0000u) | 0x8000u | (rnd32() & 1u); /* half the cases: ties and near-ties */
        float f = u2f(u);
        if (isnan(f)) continue;
        uint16_t lo = (uint16_t)(u >> 16);                 /* truncation toward zero */
        uint16_t hi = (uint16_t)(lo + 1);                  /* next away from zero (same sign) */
        double x = fabs((double)f), vl = fabs(bf16_value_unbounded(lo)), vh = fabs(bf16_value_unbounded(hi));
        uint16_t want;
        if (isinf(f)) want = lo;
        else if (x - vl < vh - x) want = lo;
        else if (x - vl > vh - x) want = hi;
        else want = (lo & 1) ? hi : lo;
        uint16_t got = lmc_f32_to_bf16(f);
        if (got != want && bad++ < 5) fprintf(stderr, "  f32 %08x → bf16 %04x, want %04x\n", u, got, want);
    }
    CHECK_EQ_INT(bad, 0);
}

/* ------------------------------------------------------------------ f16 */

static void test_f16_exhaustive(void) {
    int bad_val = 0, bad_trip = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = lmc_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 31) {
            if (m == 0) { if (!(isinf(f) && (signbit(f) != 0) == (h >> 15))) bad_val++; }
            else if (!isnan(f) || (signbit(f) != 0) != (h >> 15)) bad_val++;
        } else {
            double want = f16_value((uint16_t)h);
            if ((double)f != want || (signbit(f) != 0) != (h >> 15)) {
                if (bad_val++ < 5) fprintf(stderr, "  f16 %04x → %.10g, want %.10g\n", h, f, want);
            }
        }
        uint16_t back = lmc_f32_to_f16(f);
        if (f16_is_nan((uint16_t)h)) {
            if (!f16_is_nan(back) || (back >> 15) != (h >> 15)) bad_trip++;
        } else if (back != h) {
            if (bad_trip++ < 5) fprintf(stderr, "  f16 %04x → f32 → %04x\n", h, back);
        }
    }
    CHECK_EQ_INT(bad_val, 0);
    CHECK_EQ_INT(bad_trip, 0);
}

/* Every midpoint between two adjacent f16 values rounds to the even one;
 * one f32 ulp either side rounds to the nearer one. */
static void test_f16_ties_between_neighbours(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double a = f16_value((uint16_t)h);
        double b = h + 1 == 0x7c00 ? 65536.0 : f16_value((uint16_t)(h + 1));
        float mid = (float)((a + b) / 2);
        CHECK((double)mid == (a + b) / 2); /* exact in f32: 12 significant bits */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        for (int s = 0; s < 2; s++) {
            uint16_t sg = s ? 0x8000 : 0;
            float m = s ? -mid : mid;
            if (lmc_f32_to_f16(m) != (sg | even)) {
                if (bad++ < 5) fprintf(stderr, "  tie %.10g → %04x, want %04x\n", m, lmc_f32_to_f16(m), sg | even);
            }
            float below = nextafterf(m, 0.0f), above = nextafterf(m, s ? -INFINITY : INFINITY);
            if (lmc_f32_to_f16(below) != (sg | h)) bad++;
            if (lmc_f32_to_f16(above) != (sg | (h + 1))) bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_f16_special_values(void) {
    /* overflow: 65504 is the largest finite; 65520 is the tie with "65536" → inf */
    CHECK_EQ_INT(lmc_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(lmc_f32_to_f16(65519.99f), 0x7bff);
    CHECK_EQ_INT(lmc_f32_to_f16(65520.0f), 0x7c00);
    CHECK_EQ_INT(lmc_f32_to_f16(1e6f), 0x7c00);
    CHECK_EQ_INT(lmc_f32_to_f16(-1e6f), 0xfc00);
    CHECK_EQ_INT(lmc_f32_to_f16(FLT_MAX), 0x7c00);
    CHECK_EQ_INT(lmc_f32_to_f16(INFINITY), 0x7c00);
    CHECK_EQ_INT(lmc_f32_to_f16(-INFINITY), 0xfc00);
    /* underflow to (signed) zero */
    CHECK_EQ_INT(lmc_f32_to_f16(1e-10f), 0x0000);
    CHECK_EQ_INT(lmc_f32_to_f16(-1e-10f), 0x8000);
    CHECK_EQ_INT(lmc_f32_to_f16(FLT_TRUE_MIN), 0x0000);
    CHECK_EQ_INT(lmc_f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ_INT(lmc_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);                   /* tie → 0 */
    CHECK_EQ_INT(lmc_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)), 0x0001); /* just above → min subnormal */
    CHECK_EQ_INT(lmc_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);                   /* 1.5 steps: tie → 2 */
    /* subnormals */
    CHECK_EQ_INT(lmc_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    CHECK_EQ_INT(lmc_f32_to_f16(ldexpf(1023.0f, -24)), 0x03ff);
    CHECK_EQ_INT(lmc_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400); /* tie rounds up into the smallest normal */
    CHECK_EQ_INT(lmc_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);
    CHECK(lmc_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(lmc_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    CHECK(lmc_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    /* ordinary values */
    CHECK_EQ_INT(lmc_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(lmc_f32_to_f16(-2.5f), 0xc100);
    CHECK_EQ_INT(lmc_f32_to_f16(0.1f), 0x2e66);
    CHECK(lmc_f16_to_f32(0x3555) == 0.333251953125f);
    /* NaN stays NaN, including payloads that live only in the low bits */
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7f801fffu, 0xff800001u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = lmc_f32_to_f16(u2f(nans[i]));
        CHECK_MSG(f16_is_nan(h) && (h >> 15) == (nans[i] >> 31), "f32 %08x → f16 %04x", nans[i], h);
    }
}

static void test_f16_random_vs_reference(void) {
    int bad = 0;
    for (int k = 0; k < 400000; k++) {
        /* exponents spread over and around the f16 range (2^-30 .. 2^18) */
        uint32_t u = (rnd32() & 0x807fffffu) | ((uint32_t)(97 + rnd32() % 49) << 23);
        float f = u2f(u);
        uint16_t got = lmc_f32_to_f16(f), want = f16_round_ref(f);
        if (got != want && bad++ < 5) fprintf(stderr, "  f32 %08x (%.10g) → f16 %04x, want %04x\n", u, f, got, want);
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_to_f32_bulk(void) {
    uint16_t hb[5] = {0x3f80, 0xc000, 0x0000, 0x7f80, 0x4049};
    uint16_t hh[5] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x8000};
    double d[3] = {1.5, -1e300, 3.0};
    float out[5];
    lmc_to_f32(LMC_DTYPE_BF16, hb, out, 5);
    for (int i = 0; i < 5; i++) CHECK(f2u(out[i]) == (uint32_t)hb[i] << 16);
    lmc_to_f32(LMC_DTYPE_F16, hh, out, 5);
    for (int i = 0; i < 5; i++) CHECK(f2u(out[i]) == f2u(lmc_f16_to_f32(hh[i])));
    lmc_to_f32(LMC_DTYPE_F64, d, out, 3);
    CHECK(out[0] == 1.5f && isinf(out[1]) && out[1] < 0 && out[2] == 3.0f);
    float src[3] = {1, -2, 3.25f};
    lmc_to_f32(LMC_DTYPE_F32, src, out, 3);
    CHECK(memcmp(out, src, sizeof src) == 0);
}

/* ------------------------------------------------------------------ names */

static void test_dtype_names(void) {
    const struct { const char *name; lmc_dtype t; size_t size; int is_float; } all[] = {
        {"F32", LMC_DTYPE_F32, 4, 1}, {"F16", LMC_DTYPE_F16, 2, 1}, {"BF16", LMC_DTYPE_BF16, 2, 1},
        {"F64", LMC_DTYPE_F64, 8, 1}, {"I64", LMC_DTYPE_I64, 8, 0}, {"I32", LMC_DTYPE_I32, 4, 0},
        {"I16", LMC_DTYPE_I16, 2, 0}, {"I8", LMC_DTYPE_I8, 1, 0},   {"U8", LMC_DTYPE_U8, 1, 0},
        {"BOOL", LMC_DTYPE_BOOL, 1, 0}, {"U32", LMC_DTYPE_U32, 4, 0},
    };
    CHECK_EQ_INT(sizeof all / sizeof all[0], LMC_DTYPE_COUNT);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        lmc_dtype t = LMC_DTYPE_COUNT;
        CHECK_EQ_INT(lmc_dtype_from_name(all[i].name, &t), 0);
        CHECK_EQ_INT(t, all[i].t);
        CHECK_EQ_STR(lmc_dtype_name(all[i].t), all[i].name);
        CHECK_EQ_INT(lmc_dtype_size(all[i].t), all[i].size);
        CHECK_EQ_INT(lmc_dtype_is_float(all[i].t), all[i].is_float);
    }
    const char *bad[] = {"f32", "", "F8_E4M3", "BF16 ", " F32", "F3", "F322", "FLOAT32", "bool"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lmc_dtype t = LMC_DTYPE_I8;
        CHECK_EQ_INT(lmc_dtype_from_name(bad[i], &t), -1);
        CHECK_EQ_INT(t, LMC_DTYPE_I8); /* left untouched */
    }
    CHECK_EQ_STR(lmc_dtype_name(LMC_DTYPE_COUNT), "?");
    CHECK_EQ_INT(lmc_dtype_is_float(LMC_DTYPE_COUNT), 0);
}

/* ------------------------------------------------------------------ pool */

typedef struct {
    atomic_int calls[64];
    atomic_int total;
    pthread_t who[64];
    int nth_seen[64];
} once_arg;

static void once_fn(void *p, int ith, int nth) {
    once_arg *a = p;
    if (ith >= 0 && ith < 64) {
        atomic_fetch_add(&a->calls[ith], 1);
        a->who[ith] = pthread_self();
        a->nth_seen[ith] = nth;
    }
    atomic_fetch_add(&a->total, 1);
}

static void test_pool_once_per_thread(void) {
    const int sizes[] = {1, 2, 3, 4, 7};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        lmc_pool *pool = NULL;
        CHECK_EQ_INT(lmc_pool_init(&pool, n), LMC_OK);
        if (!pool) continue;
        CHECK_EQ_INT(lmc_pool_size(pool), n);
        for (int rep = 0; rep < 3; rep++) {
            once_arg a;
            memset(&a, 0, sizeof a);
            lmc_pool_run(pool, once_fn, &a);
            CHECK_EQ_INT(atomic_load(&a.total), n);
            for (int i = 0; i < n; i++) {
                CHECK_EQ_INT(atomic_load(&a.calls[i]), 1);
                CHECK_EQ_INT(a.nth_seen[i], n);
            }
            CHECK(pthread_equal(a.who[0], pthread_self())); /* the caller is thread 0 */
            for (int i = 0; i < n; i++)
                for (int j = i + 1; j < n; j++) CHECK(!pthread_equal(a.who[i], a.who[j]));
        }
        lmc_pool_free(pool);
    }
    /* a NULL pool runs the job inline as thread 0 of 1 */
    once_arg a;
    memset(&a, 0, sizeof a);
    lmc_pool_run(NULL, once_fn, &a);
    CHECK_EQ_INT(atomic_load(&a.total), 1);
    CHECK_EQ_INT(atomic_load(&a.calls[0]), 1);
    CHECK_EQ_INT(a.nth_seen[0], 1);
    CHECK_EQ_INT(lmc_pool_size(NULL), 1);
    lmc_pool_free(NULL);
}

static void test_pool_init_sizes(void) {
    lmc_pool *pool = NULL;
    CHECK_EQ_INT(lmc_pool_init(&pool, 0), LMC_OK);
    CHECK(pool != NULL);
    CHECK_EQ_INT(lmc_pool_size(pool), lmc_cpu_count());
    CHECK(lmc_cpu_count() >= 1);
    lmc_pool_free(pool);
    lmc_clear_error();
    pool = NULL;
    CHECK_EQ_INT(lmc_pool_init(&pool, 5000), LMC_ERR_ARG);
    CHECK(pool == NULL);
    CHECK(strstr(lmc_last_error(), "5000") != NULL);
}

/* Each run: thread ith sums its lmc_split share of [0, n) of a per-run array
 * into its slot; the caller checks the total every time. */
typedef struct {
    const int64_t *v;
    long n;
    int64_t part[16];
} sum_arg;

static void sum_fn(void *p, int ith, int nth) {
    sum_arg *a = p;
    long b, e;
    lmc_split(a->n, ith, nth, &b, &e);
    int64_t s = 0;
    for (long i = b; i < e; i++) s += a->v[i];
    a->part[ith] = s;
}

static void test_pool_many_runs(void) {
    enum { N = 1000 };
    int64_t *v = malloc(N * sizeof *v);
    CHECK(v != NULL);
    if (!v) return;
    for (int i = 0; i < N; i++) v[i] = i + 1;
    const int sizes[] = {2, 3};
    for (size_t s = 0; s < 2; s++) {
        lmc_pool *pool = NULL;
        CHECK_EQ_INT(lmc_pool_init(&pool, sizes[s]), LMC_OK);
        if (!pool) continue;
        int bad = 0;
        for (int run = 0; run < 10000; run++) {
            sum_arg a;
            memset(&a, 0, sizeof a);
            a.v = v;
            a.n = 1 + run % N;                 /* a different answer every run */
            for (int i = 0; i < sizes[s]; i++) a.part[i] = -1;
            lmc_pool_run(pool, sum_fn, &a);
            int64_t tot = 0;
            for (int i = 0; i < sizes[s]; i++) tot += a.part[i];
            if (tot != (int64_t)a.n * (a.n + 1) / 2) bad++;
        }
        CHECK_EQ_INT(bad, 0);
        lmc_pool_free(pool);
    }
    free(v);
}

static void test_split_covers(void) {
    int bad = 0;
    long ns[] = {0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 63, 64, 65, 100, 127, 1000, 1023, 4097, 1000003, 2147483647L,
                 50000000000L};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        for (int nth = 1; nth <= 70; nth++) {
            long n = ns[k], next = 0;
            for (int ith = 0; ith < nth; ith++) {
                long b = -5, e = -5;
                lmc_split(n, ith, nth, &b, &e);
                /* shares are contiguous, in order, and inside [0, n) */
                if (b != next || e < b || e > n) { if (bad++ < 5) fprintf(stderr, "  split n=%ld %d/%d: [%ld,%ld)\n", n, ith, nth, b, e); }
                next = e;
            }
            if (next != n) { if (bad++ < 5) fprintf(stderr, "  split n=%ld nth=%d ends at %ld\n", n, nth, next); }
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* exhaustive small cases: every item covered exactly once */
    for (long n = 0; n <= 200; n++) {
        for (int nth = 1; nth <= 33; nth++) {
            unsigned char seen[201] = {0};
            for (int ith = 0; ith < nth; ith++) {
                long b, e;
                lmc_split(n, ith, nth, &b, &e);
                for (long i = b; i < e; i++) if (i >= 0 && i < 201) seen[i]++;
            }
            for (long i = 0; i < n; i++) if (seen[i] != 1) bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* ------------------------------------------------------------------ status */

static void test_fail_message(void) {
    lmc_clear_error();
    CHECK_EQ_STR(lmc_last_error(), "");
    CHECK_EQ_INT(lmc_fail(LMC_ERR_FORMAT, "bad header in %s at %d", "x.bin", 42), LMC_ERR_FORMAT);
    CHECK_EQ_STR(lmc_last_error(), "bad header in x.bin at 42");
    CHECK_EQ_INT(lmc_fail(LMC_ERR_IO, "second"), LMC_ERR_IO);
    CHECK_EQ_STR(lmc_last_error(), "second");
    CHECK_EQ_INT(lmc_fail_context(LMC_ERR_IO, "loading %s", "m"), LMC_ERR_IO);
    CHECK_EQ_STR(lmc_last_error(), "loading m: second");
    CHECK_EQ_INT(lmc_fail_context(LMC_ERR_NOT_FOUND, "outer"), LMC_ERR_NOT_FOUND);
    CHECK_EQ_STR(lmc_last_error(), "outer: loading m: second");
    lmc_clear_error();
    CHECK_EQ_STR(lmc_last_error(), "");
}

static void test_fail_truncation(void) {
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    lmc_fail(LMC_ERR_FORMAT, "%s", big);
    size_t n = strlen(lmc_last_error());
    CHECK(n > 500 && n < sizeof big - 1);                /* truncated, terminated */
    CHECK(strspn(lmc_last_error(), "a") == n);
    /* a long context over a long message: prefix first, still terminated */
    char pre[3000];
    memset(pre, 'p', sizeof pre - 1);
    pre[sizeof pre - 1] = 0;
    lmc_fail(LMC_ERR_FORMAT, "%s", big);
    lmc_fail_context(LMC_ERR_FORMAT, "%s", pre);
    size_t m = strlen(lmc_last_error());
    CHECK(m <= n);
    CHECK(lmc_last_error()[0] == 'p');
    /* a short context over a message that fills the buffer keeps the prefix whole */
    lmc_fail(LMC_ERR_FORMAT, "%s", big);
    lmc_fail_context(LMC_ERR_FORMAT, "ctx");
    const char *e = lmc_last_error();
    CHECK(strncmp(e, "ctx: aaa", 8) == 0);
    CHECK(strlen(e) == n);
    /* repeated contexts never overflow */
    lmc_fail(LMC_ERR_FORMAT, "root");
    for (int i = 0; i < 500; i++) lmc_fail_context(LMC_ERR_FORMAT, "level %d", i);
    e = lmc_last_error();
    CHECK(strncmp(e, "level 499: level 498: ", 22) == 0);
    CHECK(strlen(e) <= n);
    lmc_clear_error();
}

static void *thread_fail(void *p) {
    lmc_fail(LMC_ERR_IO, "from the other thread");
    int ok = strcmp(lmc_last_error(), "from the other thread") == 0;
    *(int *)p = ok;
    return NULL;
}

static void test_fail_per_thread(void) {
    lmc_fail(LMC_ERR_ARG, "mine");
    int ok = 0;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, thread_fail, &ok) == 0);
    pthread_join(th, NULL);
    CHECK(ok);
    CHECK_EQ_STR(lmc_last_error(), "mine");
    lmc_clear_error();
}

static void test_status_names(void) {
    const lmc_status all[] = {LMC_OK, LMC_ERR_IO, LMC_ERR_FORMAT, LMC_ERR_UNSUPPORTED, LMC_ERR_NOMEM,
                              LMC_ERR_ARG, LMC_ERR_AUDIT, LMC_ERR_NOT_FOUND, LMC_ERR_RANGE};
    const size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; i++) {
        const char *s = lmc_status_name(all[i]);
        CHECK(s && *s && strcmp(s, "unknown status") != 0);
        for (size_t j = 0; j < i; j++) CHECK(strcmp(s, lmc_status_name(all[j])) != 0);
    }
    CHECK_EQ_STR(lmc_status_name((lmc_status)-99), "unknown status");
    CHECK_EQ_STR(lmc_status_name(LMC_ERR_FORMAT), "malformed input");
}

int main(void) {
    RUN(test_bf16_known_values);
    RUN(test_bf16_nan);
    RUN(test_bf16_exhaustive_roundtrip);
    RUN(test_bf16_random_vs_reference);
    RUN(test_f16_exhaustive);
    RUN(test_f16_ties_between_neighbours);
    RUN(test_f16_special_values);
    RUN(test_f16_random_vs_reference);
    RUN(test_to_f32_bulk);
    RUN(test_dtype_names);
    RUN(test_pool_once_per_thread);
    RUN(test_pool_init_sizes);
    RUN(test_pool_many_runs);
    RUN(test_split_covers);
    RUN(test_fail_message);
    RUN(test_fail_truncation);
    RUN(test_fail_per_thread);
    RUN(test_status_names);
    return TEST_END();
}
