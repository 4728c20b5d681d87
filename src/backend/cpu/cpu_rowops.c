/* cpu_rowops.c — the element-wise row work of the CPU backend in 16-lane vectors.
 *
 * A decoded token's norms, activations and softmax run on one thread between the pool's
 * products, so their speed is the other thread's idle time. These helpers use GCC vector
 * types (AVX-512 under -march=native where the CPU has it, two or four narrower registers
 * elsewhere); the tail of a row goes through the same vector code on a padded copy, so a row
 * gives the same bits whatever its length.
 *
 * e^x is 2^n · p(r) with n = rint(x·log2 e), r = x − n·ln 2 (ln 2 in two parts, so r is exact to
 * a few ulp) and p the Taylor polynomial of degree 7 (|r| ≤ ln 2 / 2: truncation below 1e-8
 * relative); x is clamped to [−87.3, 88.3], where 2^n stays a normal float. Within 2 ulp of
 * expf over that range (tests/unit/test_rowops.c), which is far inside F1's 1e-4.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef double v8d __attribute__((vector_size(64)));

static inline v16f splat(float f) { return (v16f){0} + f; }
/* lanes of a where m is set, else b (m: a comparison's all-ones / zero lanes) */
static inline v16f pick(v16i m, v16f a, v16f b) { return (v16f)(((v16i)a & m) | ((v16i)b & ~m)); }

static inline v16f exp16(v16f x) {
    x = pick(x > splat(88.3f), splat(88.3f), x);
    x = pick(x < splat(-87.3f), splat(-87.3f), x);
    const v16f magic = splat(12582912.0f); /* 1.5 · 2^23: adding it rounds to an integer */
    const v16f t = x * splat(1.44269504088896341f) + magic;
    const v16f n = t - magic;
    const v16f r = (x - n * splat(0.693359375f)) - n * splat(-2.12194440e-4f);
    v16f p = splat(1.0f / 5040.0f);
    p = p * r + splat(1.0f / 720.0f);
    p = p * r + splat(1.0f / 120.0f);
    p = p * r + splat(1.0f / 24.0f);
    p = p * r + splat(1.0f / 6.0f);
    p = p * r + splat(0.5f);
    p = p * r + splat(1.0f);
    p = p * r + splat(1.0f);
    const v16i e = ((v16i)t - (v16i)magic + 127) << 23; /* 2^n: n in [−126, 127] */
    return p * (v16f)e;
}

void lmc_cpu_exp_v16(const float *x, float *y) {
    v16f v;
    memcpy(&v, x, sizeof v);
    v = exp16(v);
    memcpy(y, &v, sizeof v);
}

int lmc_cpu_act_vectorized(lmc_act act) { return act == LMC_ACT_SILU || act == LMC_ACT_GELU_TANH; }

/* x · sigmoid(s·u): SiLU (u = x, s = 1); GELU's tanh form, 0.5·x·(1 + tanh u) = x / (1 + e^(−2u)) with
 * u = √(2/π)·(x + 0.044715·x³): no cancellation where tanh u nears −1 */
static inline v16f act16(lmc_act act, v16f x) {
    v16f u = x;
    if (act == LMC_ACT_GELU_TANH) u = splat(2.0f * 0.79788456080286536f) * (x + splat(0.044715f) * x * x * x);
    return x / (splat(1.0f) + exp16(-u));
}

void lmc_cpu_act_row(lmc_act act, float *y, const float *a, const float *b, int64_t d) {
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
        v16f x, m;
        memcpy(&x, a + i, sizeof x);
        x = act16(act, x);
        if (b) {
            memcpy(&m, b + i, sizeof m);
            x *= m;
        }
        memcpy(y + i, &x, sizeof x);
    }
    if (i < d) {
        const size_t n = (size_t)(d - i) * sizeof(float);
        v16f x = {0}, m = {0};
        memcpy(&x, a + i, n);
        x = act16(act, x);
        if (b) {
            memcpy(&m, b + i, n);
            x *= m;
        }
        memcpy(y + i, &x, n);
    }
}

double lmc_cpu_sumsq(const float *a, int64_t d) {
    v8d s0 = {0}, s1 = {0};
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
        float f[16];
        memcpy(f, a + i, sizeof f);
        const v8d lo = {f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]};
        const v8d hi = {f[8], f[9], f[10], f[11], f[12], f[13], f[14], f[15]};
        s0 += lo * lo;
        s1 += hi * hi;
    }
    s0 += s1;
    double s = 0;
    for (int k = 0; k < 8; k++) s += s0[k];
    for (; i < d; i++) s += (double)a[i] * a[i];
    return s;
}

double lmc_cpu_softmax_exp(float *s, int64_t n, float mx) {
    v8d acc = {0};
    int64_t i = 0;
    for (; i < n; i += 16) {
        v16f x = splat(-INFINITY);
        const size_t k = (size_t)(n - i < 16 ? n - i : 16);
        memcpy(&x, s + i, k * sizeof(float));
        x = exp16(x - splat(mx));
        if (k < 16) memset((float *)&x + k, 0, (16 - k) * sizeof(float)); /* the padding's e^−87 */
        memcpy(s + i, &x, k * sizeof(float));
        acc += (v8d){x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]} + (v8d){x[8], x[9], x[10], x[11], x[12], x[13], x[14], x[15]};
    }
    double sum = 0;
    for (int k = 0; k < 8; k++) sum += acc[k];
    return sum;
}
