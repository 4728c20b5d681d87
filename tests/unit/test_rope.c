/* test_rope.c — lmc_rope_build: default inverse frequencies against the float32
 * formula transformers uses (within 1 ulp), partial_rotary_factor → n_rot,
 * linear scaling, llama3 scaling against an independent double-precision
 * transcription of transformers' _compute_llama3_parameters (with every
 * frequency band populated), and refusals of invalid or unsupported configs.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "test.h"

#include "model/rope.h"

static lmc_rope_config rc_default(double theta) {
    lmc_rope_config rc;
    memset(&rc, 0, sizeof rc);
    rc.type = LMC_ROPE_DEFAULT;
    rc.theta = theta;
    rc.partial_rotary_factor = 1.0;
    rc.factor = 1.0;
    rc.low_freq_factor = 1.0;
    rc.high_freq_factor = 4.0;
    rc.attention_factor = -1.0;
    rc.beta_fast = 32.0;
    rc.beta_slow = 1.0;
    rc.truncate = 1;
    return rc;
}

/* Distance of f from the double x in units of the float spacing at x. */
static double ulps(float f, double x) {
    float xf = (float)x;
    double spacing = (double)nextafterf(fabsf(xf), INFINITY) - (double)fabsf(xf);
    return fabs((double)f - x) / spacing;
}

/* transformers: 1.0 / base ** (arange(0, dim, 2).float() / dim), all float32: the
 * exponent rounded to f32, the power rounded to f32, then the reciprocal rounded
 * to f32. Each step here is correctly rounded (double, then to float). */
static double inv_freq_exact(double theta, int i, int dim) {
    float e = (float)(2 * i) / (float)dim;
    float p = (float)pow((double)(float)theta, (double)e);
    return (double)(float)(1.0 / (double)p);
}

/* ------------------------------------------------------------------ default */

static void test_default_inv_freq(void) {
    const double thetas[] = {10000.0, 500000.0, 1000000.0, 10000.5, 75.0};
    const int dims[] = {2, 8, 32, 64, 80, 128, 256, 2048};
    for (size_t a = 0; a < sizeof thetas / sizeof thetas[0]; a++)
        for (size_t b = 0; b < sizeof dims / sizeof dims[0]; b++) {
            lmc_rope_config rc = rc_default(thetas[a]);
            lmc_rope_table t;
            memset(&t, 0xff, sizeof t);
            CHECK_EQ_INT(lmc_rope_build(&rc, dims[b], 4096, &t), LMC_OK);
            CHECK_EQ_INT(t.n_rot, dims[b]);
            CHECK(t.attn_factor == 1.0f);
            double worst = 0;
            for (int i = 0; i < dims[b] / 2; i++) {
                double u = ulps(t.inv_freq[i], inv_freq_exact(thetas[a], i, dims[b]));
                if (!(u <= worst)) worst = u;
            }
            CHECK_MSG(worst <= 1.0, "theta %g dim %d: %g ulp off", thetas[a], dims[b], worst);
            CHECK(t.inv_freq[0] == 1.0f);
            /* strictly decreasing frequencies */
            for (int i = 1; i < dims[b] / 2; i++) CHECK(t.inv_freq[i] < t.inv_freq[i - 1]);
        }
}

/* A few values worked out by hand. */
static void test_default_known_values(void) {
    lmc_rope_config rc = rc_default(10000.0);
    lmc_rope_table t;
    CHECK_EQ_INT(lmc_rope_build(&rc, 4, 128, &t), LMC_OK);
    CHECK_EQ_INT(t.n_rot, 4);
    CHECK(t.inv_freq[0] == 1.0f);
    CHECK_NEAR(t.inv_freq[1], 0.01, 1e-9); /* 10000^(-2/4) */
    CHECK_EQ_INT(lmc_rope_build(&rc, 8, 128, &t), LMC_OK);
    CHECK_NEAR(t.inv_freq[1], 0.1, 1e-8);   /* 10000^(-1/4) */
    CHECK_NEAR(t.inv_freq[2], 0.01, 1e-9);
    CHECK_NEAR(t.inv_freq[3], 0.001, 1e-10);
}

static void test_partial_rotary(void) {
    const struct { int head_dim; double prf; int n_rot; } cases[] = {
        {64, 0.5, 32}, {80, 0.25, 20}, {128, 0.75, 96}, {64, 1.0, 64}, {256, 0.25, 64},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        lmc_rope_config rc = rc_default(10000.0);
        rc.partial_rotary_factor = cases[k].prf;
        lmc_rope_table t;
        CHECK_EQ_INT(lmc_rope_build(&rc, cases[k].head_dim, 2048, &t), LMC_OK);
        CHECK_EQ_INT(t.n_rot, cases[k].n_rot);
        /* the exponent's denominator is the rotated size, not head_dim */
        double worst = 0;
        for (int i = 0; i < t.n_rot / 2; i++) {
            double u = ulps(t.inv_freq[i], inv_freq_exact(10000.0, i, cases[k].n_rot));
            if (!(u <= worst)) worst = u;
        }
        CHECK_MSG(worst <= 1.0, "prf %g: %g ulp off", cases[k].prf, worst);
    }
}

/* ------------------------------------------------------------------ linear */

static void test_linear(void) {
    const double factors[] = {2.0, 4.0, 8.0, 0.5, 3.3};
    for (size_t k = 0; k < sizeof factors / sizeof factors[0]; k++) {
        lmc_rope_config rd = rc_default(10000.0), rl = rd;
        rl.type = LMC_ROPE_LINEAR;
        rl.factor = factors[k];
        lmc_rope_table td, tl;
        CHECK_EQ_INT(lmc_rope_build(&rd, 64, 2048, &td), LMC_OK);
        CHECK_EQ_INT(lmc_rope_build(&rl, 64, 2048, &tl), LMC_OK);
        CHECK_EQ_INT(tl.n_rot, 64);
        int bad = 0;
        for (int i = 0; i < 32; i++) {
            /* transformers: inv_freq /= factor, in float32 */
            if (tl.inv_freq[i] != td.inv_freq[i] / (float)factors[k]) bad++;
            if (ulps(tl.inv_freq[i], inv_freq_exact(10000.0, i, 64) / factors[k]) > 1.5) bad++;
        }
        CHECK_MSG(bad == 0, "linear factor %g: %d frequencies off", factors[k], bad);
    }
}

/* ------------------------------------------------------------------ llama3 */

enum { BAND_HIGH, BAND_MEDIUM, BAND_LOW };

/* transformers' _compute_llama3_parameters, transcribed in double precision:
 * wavelen < high_freq_wavelen: unchanged; wavelen > low_freq_wavelen: / factor;
 * otherwise interpolated with smooth = (old_ctx / wavelen - low) / (high - low). */
static double llama3_ref(double inv, double factor, double lo, double hi, double old_ctx, int *band) {
    const double low_wavelen = old_ctx / lo, high_wavelen = old_ctx / hi;
    const double wavelen = 2 * M_PI / inv;
    if (wavelen < high_wavelen) { *band = BAND_HIGH; return inv; }
    if (wavelen > low_wavelen) { *band = BAND_LOW; return inv / factor; }
    *band = BAND_MEDIUM;
    const double smooth = (old_ctx / wavelen - lo) / (hi - lo);
    return (1 - smooth) * inv / factor + smooth * inv;
}

static void llama3_case(double theta, int head_dim, double factor, double lo, double hi, int old_ctx, int pass_old) {
    lmc_rope_config rc = rc_default(theta);
    rc.type = LMC_ROPE_LLAMA3;
    rc.factor = factor;
    rc.low_freq_factor = lo;
    rc.high_freq_factor = hi;
    rc.original_max_position_embeddings = pass_old ? old_ctx : 0;
    lmc_rope_table t;
    /* without original_max_position_embeddings, max_position_embeddings stands in */
    CHECK_EQ_INT(lmc_rope_build(&rc, head_dim, pass_old ? 131072 : old_ctx, &t), LMC_OK);
    CHECK_EQ_INT(t.n_rot, head_dim);
    int count[3] = {0, 0, 0}, bad = 0;
    for (int i = 0; i < head_dim / 2; i++) {
        int band;
        double inv = 1.0 / pow(theta, (double)(2 * i) / head_dim);
        double want = llama3_ref(inv, factor, lo, hi, old_ctx, &band);
        count[band]++;
        if (!(fabs(t.inv_freq[i] - want) <= 2e-6 * want)) {
            if (bad++ < 3) fprintf(stderr, "  llama3 i=%d band %d: %.9g, want %.9g\n", i, band, t.inv_freq[i], want);
        }
    }
    CHECK_MSG(bad == 0, "llama3 theta %g dim %d factor %g: %d frequencies off", theta, head_dim, factor, bad);
    CHECK_MSG(count[BAND_HIGH] > 0 && count[BAND_MEDIUM] > 0 && count[BAND_LOW] > 0,
              "bands not all populated: %d high, %d medium, %d low", count[BAND_HIGH], count[BAND_MEDIUM],
              count[BAND_LOW]);
}

static void test_llama3_bands(void) {
    llama3_case(500000.0, 128, 8.0, 1.0, 4.0, 8192, 1);  /* Llama 3.1 */
    llama3_case(500000.0, 64, 32.0, 1.0, 4.0, 8192, 1);  /* Llama 3.2 (1B head_dim 64) */
    llama3_case(10000.0, 32, 4.0, 1.0, 4.0, 256, 1);     /* small test model: all bands inside 16 freqs */
    llama3_case(10000.0, 48, 2.0, 2.0, 8.0, 512, 1);     /* other low/high factors */
    llama3_case(10000.0, 32, 4.0, 1.0, 4.0, 256, 0);     /* old context from max_position_embeddings */
}

/* The three bands directly: highest frequency untouched, lowest divided by factor. */
static void test_llama3_edges(void) {
    lmc_rope_config rd = rc_default(500000.0), rl = rd;
    rl.type = LMC_ROPE_LLAMA3;
    rl.factor = 8.0;
    rl.original_max_position_embeddings = 8192;
    lmc_rope_table td, tl;
    CHECK_EQ_INT(lmc_rope_build(&rd, 128, 131072, &td), LMC_OK);
    CHECK_EQ_INT(lmc_rope_build(&rl, 128, 131072, &tl), LMC_OK);
    CHECK(tl.inv_freq[0] == td.inv_freq[0]);
    CHECK(tl.inv_freq[63] == td.inv_freq[63] / 8.0f);
    /* scaled frequencies never exceed the originals nor fall below original / factor */
    for (int i = 0; i < 64; i++) {
        CHECK(tl.inv_freq[i] <= td.inv_freq[i]);
        CHECK(tl.inv_freq[i] >= td.inv_freq[i] / 8.0f * (1 - 1e-6f));
    }
}

/* ------------------------------------------------------------------ yarn */

/* transformers' _compute_yarn_parameters, transcribed in double precision. orig = 0 means
 * max_pos; factor = 0 means max_pos / orig; attention_factor < 0 means derived from mscale. */
static double yarn_mscale_ref(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * log(s) + 1.0; }
static double yarn_corr_dim(double rot, int dim, double base, double orig) {
    return dim * log(orig / (rot * 2 * M_PI)) / (2 * log(base));
}
static void yarn_ref(const lmc_rope_config *rc, int dim, int max_pos, double *inv, double *att, int regime_count[3]) {
    double orig = rc->original_max_position_embeddings ? rc->original_max_position_embeddings : max_pos;
    double factor = rc->factor > 0 ? rc->factor : max_pos / orig;
    *att = rc->attention_factor;
    if (*att < 0) {
        if (rc->mscale != 0 && rc->mscale_all_dim != 0)
            *att = yarn_mscale_ref(factor, rc->mscale) / yarn_mscale_ref(factor, rc->mscale_all_dim);
        else
            *att = yarn_mscale_ref(factor, 1.0);
    }
    double bf = rc->beta_fast ? rc->beta_fast : 32, bs = rc->beta_slow ? rc->beta_slow : 1;
    double lo = yarn_corr_dim(bf, dim, rc->theta, orig), hi = yarn_corr_dim(bs, dim, rc->theta, orig);
    if (rc->truncate) { lo = floor(lo); hi = ceil(hi); }
    lo = lo > 0 ? lo : 0;
    hi = hi < dim - 1 ? hi : dim - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < dim / 2; i++) {
        double pos_freq = pow(rc->theta, (double)(2 * i) / dim);
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double extrap = 1 - ramp;   /* weight of the unscaled frequency */
        inv[i] = 1 / (factor * pos_freq) * (1 - extrap) + 1 / pos_freq * extrap;
        regime_count[ramp == 0 ? 0 : ramp == 1 ? 2 : 1]++;
    }
}

static void yarn_check(const lmc_rope_config *rc, int head_dim, int max_pos, int need_all_regimes) {
    lmc_rope_table t;
    lmc_status st = lmc_rope_build(rc, head_dim, max_pos, &t);
    CHECK_MSG(st == LMC_OK, "yarn build: %s", lmc_last_error());
    if (st != LMC_OK) return;
    double inv[LMC_ROPE_MAX_HALF], att;
    int regimes[3] = {0, 0, 0}, bad = 0;
    yarn_ref(rc, head_dim, max_pos, inv, &att, regimes);
    CHECK_EQ_INT(t.n_rot, head_dim);
    for (int i = 0; i < head_dim / 2; i++) {
        if (!(fabs(t.inv_freq[i] - inv[i]) <= 2e-6 * inv[i])) {
            if (bad++ < 3) fprintf(stderr, "  yarn i=%d: %.9g, want %.9g\n", i, t.inv_freq[i], inv[i]);
        }
    }
    CHECK_MSG(bad == 0, "yarn factor %g orig %d truncate %d: %d frequencies off", rc->factor,
              rc->original_max_position_embeddings, rc->truncate, bad);
    CHECK_NEAR(t.attn_factor, att, 1e-6 * att);
    if (need_all_regimes)
        CHECK_MSG(regimes[0] > 0 && regimes[1] > 0 && regimes[2] > 0, "yarn regimes: %d extrapolated, %d ramp, %d interpolated",
                  regimes[0], regimes[1], regimes[2]);
}

static lmc_rope_config rc_yarn(double theta, double factor, int orig) {
    lmc_rope_config rc = rc_default(theta);
    rc.type = LMC_ROPE_YARN;
    rc.factor = factor;
    rc.original_max_position_embeddings = orig;
    return rc;
}

static void test_yarn(void) {
    lmc_rope_config rc = rc_yarn(10000.0, 4.0, 4096); /* ramp over dims 10..23 of 32 frequencies */
    yarn_check(&rc, 64, 16384, 1);
    rc.truncate = 0;
    yarn_check(&rc, 64, 16384, 1);
    rc = rc_yarn(1000000.0, 4.0, 32768);               /* qwen2.5 / qwen3 long-context settings */
    yarn_check(&rc, 128, 131072, 1);
    rc.attention_factor = 1.5;                          /* given explicitly */
    yarn_check(&rc, 128, 131072, 1);
    rc = rc_yarn(10000.0, 40.0, 4096);                  /* deepseek-style mscale / mscale_all_dim */
    rc.mscale = 0.707;
    rc.mscale_all_dim = 1.0;
    rc.beta_fast = 16;
    rc.beta_slow = 2;
    yarn_check(&rc, 64, 163840, 1);
    rc = rc_yarn(10000.0, 0, 2048);                     /* factor absent: max_pos / original */
    yarn_check(&rc, 32, 8192, 0);
    lmc_rope_table t;
    CHECK_EQ_INT(lmc_rope_build(&rc, 32, 8192, &t), LMC_OK);
    CHECK_NEAR(t.attn_factor, 0.1 * log(4.0) + 1.0, 1e-6);
    rc = rc_yarn(10000.0, 1.0, 4096);                   /* factor 1: no attention scaling */
    CHECK_EQ_INT(lmc_rope_build(&rc, 64, 4096, &t), LMC_OK);
    CHECK(t.attn_factor == 1.0f);
}

/* ------------------------------------------------------------------ longrope */

static void test_longrope(void) {
    lmc_rope_config rc = rc_default(10000.0);
    rc.type = LMC_ROPE_LONGROPE;
    rc.original_max_position_embeddings = 4096;
    rc.factor = 0; /* absent: max_pos / original */
    const int dim = 24, half = 12;
    rc.n_short_factor = rc.n_long_factor = half;
    for (int i = 0; i < half; i++) {
        rc.short_factor[i] = 1.0 + 0.05 * i;
        rc.long_factor[i] = 1.0 + 0.9 * i;
    }
    lmc_rope_table t;
    CHECK_EQ_INT(lmc_rope_build(&rc, dim, 131072, &t), LMC_OK);
    CHECK_EQ_INT(t.has_long, 1);
    CHECK_EQ_INT(t.long_after, 4096);
    int bad = 0;
    for (int i = 0; i < half; i++) {
        double base = pow(10000.0, (double)(2 * i) / dim);
        double ws = 1 / (rc.short_factor[i] * base), wl = 1 / (rc.long_factor[i] * base);
        if (!(fabs(t.inv_freq[i] - ws) <= 2e-6 * ws)) bad++;
        if (!(fabs(t.inv_freq_long[i] - wl) <= 2e-6 * wl)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_NEAR(t.attn_factor, sqrt(1 + log(32.0) / log(4096.0)), 1e-6); /* factor 131072 / 4096 */
    rc.attention_factor = 1.25;
    CHECK_EQ_INT(lmc_rope_build(&rc, dim, 131072, &t), LMC_OK);
    CHECK(t.attn_factor == 1.25f);
    rc.attention_factor = -1;
    CHECK_EQ_INT(lmc_rope_build(&rc, dim, 4096, &t), LMC_OK); /* factor 1: no scaling */
    CHECK(t.attn_factor == 1.0f);
    /* the factor lists must cover every rotated pair */
    rc.n_long_factor = half - 1;
    lmc_clear_error();
    CHECK_EQ_INT(lmc_rope_build(&rc, dim, 131072, &t), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "long_factor") != NULL);
    rc.n_long_factor = half;
    CHECK_EQ_INT(lmc_rope_build(&rc, dim + 2, 131072, &t), LMC_ERR_FORMAT);
}

/* ------------------------------------------------------------------ refusals */

static void expect_fail(const lmc_rope_config *rc, int head_dim, lmc_status want, const char *needle) {
    lmc_rope_table t;
    lmc_clear_error();
    lmc_status st = lmc_rope_build(rc, head_dim, 2048, &t);
    CHECK_MSG(st == want, "type %s head_dim %d: status %d, want %d (%s)", lmc_rope_type_name(rc->type), head_dim, st,
              want, lmc_last_error());
    CHECK_MSG(strstr(lmc_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"", lmc_last_error(), needle);
}

static void test_invalid_parameters(void) {
    lmc_rope_config rc = rc_default(10000.0);
    rc.type = LMC_ROPE_LINEAR;
    rc.factor = 0;
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "factor");
    rc.factor = -2;
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "factor");
    rc.factor = NAN;
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "factor");
    rc = rc_default(10000.0);
    rc.type = LMC_ROPE_LLAMA3;
    rc.factor = 8;
    rc.original_max_position_embeddings = 8192;
    rc.factor = 0;
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "llama3");
    rc.factor = 8;
    rc.low_freq_factor = 4;
    rc.high_freq_factor = 4; /* would divide by zero */
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "llama3");
    rc.low_freq_factor = 4;
    rc.high_freq_factor = 1;
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "llama3");
    rc.low_freq_factor = 0;
    rc.high_freq_factor = 4;
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "llama3");
    /* theta and partial_rotary_factor out of range (configs not from lmc_config_from_json) */
    rc = rc_default(0.0);
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "theta");
    rc = rc_default(-10000.0);
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "theta");
    rc = rc_default(INFINITY);
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "theta");
    rc = rc_default(NAN);
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "theta");
    rc = rc_default(10000.0);
    rc.partial_rotary_factor = 0;
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "partial_rotary_factor");
    rc.partial_rotary_factor = 2;
    expect_fail(&rc, 64, LMC_ERR_FORMAT, "partial_rotary_factor");
    /* rotated sizes that cannot be built */
    rc = rc_default(10000.0);
    lmc_rope_table t;
    CHECK(lmc_rope_build(&rc, 0, 2048, &t) < 0);
    CHECK(lmc_rope_build(&rc, 1, 2048, &t) < 0);
    CHECK(lmc_rope_build(&rc, -64, 2048, &t) < 0);
    CHECK(lmc_rope_build(&rc, 2 * LMC_ROPE_MAX_HALF + 2, 2048, &t) < 0);
    CHECK_EQ_INT(lmc_rope_build(&rc, 2 * LMC_ROPE_MAX_HALF, 2048, &t), LMC_OK); /* the largest that fits */
    rc.partial_rotary_factor = 0.01;
    CHECK(lmc_rope_build(&rc, 64, 2048, &t) < 0); /* 0.64 dims */
}

/* Types the factory does not build (yet) are refused by name, never run as default.
 * (When one of them gets an implementation and a fixture, move it to its own test.) */
static void test_unsupported_types(void) {
    const lmc_rope_type todo[] = {LMC_ROPE_PROPORTIONAL}; /* dynamic: tests/unit/test_arch.c */
    for (size_t k = 0; k < sizeof todo / sizeof todo[0]; k++) {
        lmc_rope_config rc = rc_default(10000.0);
        rc.type = todo[k];
        rc.factor = 4.0;
        rc.original_max_position_embeddings = 4096;
        expect_fail(&rc, 64, LMC_ERR_UNSUPPORTED, lmc_rope_type_name(todo[k]));
    }
    lmc_rope_config rc = rc_default(10000.0);
    rc.type = (lmc_rope_type)42;
    expect_fail(&rc, 64, LMC_ERR_UNSUPPORTED, "rope");
}

int main(void) {
    RUN(test_default_inv_freq);
    RUN(test_default_known_values);
    RUN(test_partial_rotary);
    RUN(test_linear);
    RUN(test_llama3_bands);
    RUN(test_llama3_edges);
    RUN(test_yarn);
    RUN(test_longrope);
    RUN(test_invalid_parameters);
    RUN(test_unsupported_types);
    return TEST_END();
}
