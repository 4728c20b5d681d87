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
 * relative); x is clamped to [−87.3, 88.3], where 2^n stays a normal float. Within 1.5e-7 relative
 * of e^x over [−87, 88] (test_exp_vector in tests/unit/test_backend.c), far inside F1's 1e-4.
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

float lmc_cpu_scale_max(float *s, int64_t n, float scale) {
    v16f mx = splat(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f x;
        memcpy(&x, s + i, sizeof x);
        x *= scale;
        memcpy(s + i, &x, sizeof x);
        mx = pick(x > mx, x, mx);
    }
    float m = -INFINITY;
    for (int k = 0; k < 16; k++) m = mx[k] > m ? mx[k] : m;
    for (; i < n; i++) {
        s[i] *= scale;
        m = s[i] > m ? s[i] : m;
    }
    return m;
}

/* Lanes 0-7 plus lanes 8-15 of x, in double. */
static inline v8d halves_d(v16f x) {
    return (v8d){x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]} + (v8d){x[8], x[9], x[10], x[11], x[12], x[13], x[14], x[15]};
}

/* Whole chunks of 16 by fixed-size copies (vector loads and stores); a variable-length copy per chunk
 * was a memcpy call each way, most of a long softmax's time. */
double lmc_cpu_softmax_exp(float *s, int64_t n, float mx) {
    v8d acc = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f x;
        memcpy(&x, s + i, sizeof x);
        x = exp16(x - splat(mx));
        memcpy(s + i, &x, sizeof x);
        acc += halves_d(x);
    }
    if (i < n) {
        v16f x = splat(-INFINITY);
        const size_t k = (size_t)(n - i);
        memcpy(&x, s + i, k * sizeof(float));
        x = exp16(x - splat(mx));
        memset((float *)&x + k, 0, (16 - k) * sizeof(float)); /* the padding's e^−87 */
        memcpy(s + i, &x, k * sizeof(float));
        acc += halves_d(x);
    }
    double sum = 0;
    for (int k = 0; k < 8; k++) sum += acc[k];
    return sum;
}

/* The 16 lanes of v[0..16) summed: lane j of the result is Σ v[j] (a transpose-and-add tree,
 * 15 adds a lane instead of a serial chain per vector). */
static inline v16f hsum16x16(v16f v[16]) {
    /* step 1: (v0, v1) → lanes 0-7 v0's half sums, 8-15 v1's; likewise for the other pairs */
    v16f a[8], b[4], c[2];
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
        a[k] = __builtin_shuffle(v[2 * k], v[2 * k + 1], (v16i){0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}) +
               __builtin_shuffle(v[2 * k], v[2 * k + 1], (v16i){8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31});
    /* step 2: (a0, a1) → lanes 0-3 v0, 4-7 v1, 8-11 v2, 12-15 v3 */
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
        b[k] = __builtin_shuffle(a[2 * k], a[2 * k + 1], (v16i){0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27}) +
               __builtin_shuffle(a[2 * k], a[2 * k + 1], (v16i){4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31});
    /* step 3: (b0, b1) → two lanes each of v0..v7 */
    _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++)
        c[k] = __builtin_shuffle(b[2 * k], b[2 * k + 1], (v16i){0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29}) +
               __builtin_shuffle(b[2 * k], b[2 * k + 1], (v16i){2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31});
    /* step 4: one lane each, in order v0..v15 */
    return __builtin_shuffle(c[0], c[1], (v16i){0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}) +
           __builtin_shuffle(c[0], c[1], (v16i){1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31});
}

/* Rows [a, min(b, n)) of a cache (hd floats each, stride apart) asked for ahead (into L2: a
 * prefetch into L1 stalled on the core's few line-fill buffers and gained nothing), so that they
 * arrive while the blocks before them are computed: the hardware's prefetchers do not follow a KV
 * head's rows, strided by the other heads'. Into L2 against none: dots over 1024 rows from memory
 * 3.6-4.4 -> 6.0-7.0 GB/s on one Zen 4 core (docs/BENCHMARKS.md, session 21). */
#define ATTN_PF_ROWS 32
static inline void attn_prefetch(const float *base, int64_t stride, int64_t hd, int64_t a, int64_t b, int64_t n) {
    if (b > n) b = n;
    for (int64_t j = a; j < b; j++)
        for (int64_t i = 0; i < hd; i += 16) __builtin_prefetch(base + j * stride + i, 0, 1);
}

/* The 16 rows' accumulators and the 8 of the weighted values stay in registers only when every index
 * is a constant: the loops over them are unrolled whole (a runtime bound, or a row skipped with a
 * branch, sent them to the stack, one dependent add a row and element, at ≈ 5 GB/s from L2). A
 * block shorter than 16 rows repeats its last row; those sums are not stored. */
void lmc_cpu_attn_dots(const float *q, int64_t qstride, int g_n, const float *k, int64_t stride, int64_t n, int64_t hd,
                       float *s, int64_t ld) {
    const int64_t hv = hd / 16 * 16;
    for (int64_t j0 = 0; j0 < n; j0 += 16) { /* 16 rows: from memory for the first head, from L1 after */
        const int64_t m = n - j0 < 16 ? n - j0 : 16;
        const float *kr[16];
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) kr[j] = k + (j0 + (j < m ? j : m - 1)) * stride;
        attn_prefetch(k, stride, hd, j0 + ATTN_PF_ROWS, j0 + ATTN_PF_ROWS + 16, n);
        for (int g = 0; g < g_n; g++) {
            const float *qg = q + g * qstride;
            v16f acc[16];
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) acc[j] = (v16f){0};
            for (int64_t i = 0; i < hv; i += 16) {
                v16f a;
                memcpy(&a, qg + i, sizeof a);
                _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
                    v16f b;
                    memcpy(&b, kr[j] + i, sizeof b);
                    acc[j] += a * b;
                }
            }
            const v16f sum = hsum16x16(acc);
            if (m == 16 && hv == hd) {
                memcpy(s + g * ld + j0, &sum, sizeof sum);
                continue;
            }
            for (int64_t j = 0; j < m; j++) {
                float t = sum[j];
                for (int64_t i = hv; i < hd; i++) t += qg[i] * kr[j][i];
                s[g * ld + j0 + j] = t;
            }
        }
    }
}

/* a[c], b[c] (c < nc ≤ 4) += Σ_j w[j] · v[j·stride + 16c ..], even rows into a, odd rows into b (two
 * chains per 16 elements, summed by the caller). Called with a constant nc, so that the loops over c
 * unroll whole and the chains stay in registers. */
static inline void wsum_chains(int nc, const float *vb, int64_t stride, const float *wg, int64_t m, v16f a[4], v16f b[4]) {
    int64_t j = 0;
    for (; j + 2 <= m; j += 2) {
        _Pragma("GCC unroll 4") for (int c = 0; c < nc; c++) {
            v16f x0, x1;
            memcpy(&x0, vb + j * stride + 16 * c, sizeof x0);
            memcpy(&x1, vb + (j + 1) * stride + 16 * c, sizeof x1);
            a[c] += wg[j] * x0;
            b[c] += wg[j + 1] * x1;
        }
    }
    if (j < m) {
        _Pragma("GCC unroll 4") for (int c = 0; c < nc; c++) {
            v16f x0;
            memcpy(&x0, vb + j * stride + 16 * c, sizeof x0);
            a[c] += wg[j] * x0;
        }
    }
}

void lmc_cpu_attn_wsum(const float *v, int64_t stride, const float *w, int64_t ld, int g_n, int64_t n, int64_t hd,
                       float *out, int64_t ostride) {
    for (int64_t j0 = 0; j0 < n; j0 += 32) { /* 32 rows: from memory for the first head, from L1 after */
        const int64_t m = n - j0 < 32 ? n - j0 : 32;
        const float *vb = v + j0 * stride;
        attn_prefetch(v, stride, hd, j0 + ATTN_PF_ROWS, j0 + ATTN_PF_ROWS + 32, n);
        for (int g = 0; g < g_n; g++) {
            const float *wg = w + g * ld + j0;
            float *og = out + g * ostride;
            int64_t i = 0;
            for (; i + 64 <= hd; i += 64) { /* 64 elements: 8 chains */
                v16f a[4], b[4];
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) a[c] = b[c] = (v16f){0};
                wsum_chains(4, vb + i, stride, wg, m, a, b);
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
                    v16f o;
                    memcpy(&o, og + i + 16 * c, sizeof o);
                    o += a[c] + b[c];
                    memcpy(og + i + 16 * c, &o, sizeof o);
                }
            }
            for (; i + 16 <= hd; i += 16) {
                v16f a[4] = {{0}}, b[4] = {{0}};
                wsum_chains(1, vb + i, stride, wg, m, a, b);
                v16f o;
                memcpy(&o, og + i, sizeof o);
                o += a[0] + b[0];
                memcpy(og + i, &o, sizeof o);
            }
            for (; i < hd; i++) {
                float t = 0;
                for (int64_t j = 0; j < m; j++) t += wg[j] * vb[j * stride + i];
                og[i] += t;
            }
        }
    }
}
