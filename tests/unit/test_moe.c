/* test_moe.c — the mixture-of-experts block (model/moe.c) and its backend ops.
 *
 * Each op is held to a straightforward reference written here in double
 * precision: moe_route (softmax, biased softmax, sigmoid with grouped top-k and
 * scaling, phimoe's sparsemixer), matmul_id (grouped by expert, f32 / bf16 /
 * Q8_0 weights, decode and prefill sizes, unselected experts never touched)
 * and moe_sum; the whole block against a per-token loop over every expert on
 * random weights; config rules for dense layers and refusals; the loader on
 * per-expert and fused (transformers 5) layouts of the same checkpoint.
 * Parity with transformers itself is test_parity's job (tests/fixtures/<moe>). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prompt_logits.h"
#include "test.h"

#include "core/quant.h"
#include "gen/context.h"
#include "io/safetensors.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/moe.h"

static unsigned rng = 12345u;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static lmc_backend *fast_be, *ref_be;

static lmc_tensor host_tensor(lmc_backend *be, lmc_dtype t, int64_t ne0, int64_t ne1, const void *src) {
    lmc_tensor x = lmc_tensor_make(t, ne0, ne1, 1, 1);
    LMC_ASSERT(be->i->alloc(be, &x) == LMC_OK);
    if (src) be->i->set(be, &x, src, 0, lmc_tensor_nbytes(&x));
    return x;
}

/* ---------------------------------------------------------------- routing */

typedef struct ref_route { int ids[64]; double w[64]; } ref_route;

/* The routing math of backend.h, written out per token in double (independent of cpu_moe.c). */
static void route_ref(const float *l, const float *bias, const lmc_moe_route_op *op, ref_route *out) {
    const int E = op->n_expert, k = op->k;
    const float *es = op->expert_scale ? op->expert_scale->data : NULL;
    double p[64], c[64];
    int taken[64] = {0};
    if (op->score == LMC_MOE_SPARSEMIXER) {
        for (int r = 0; r < 2; r++) {
            int am = -1;
            for (int j = 0; j < E; j++) if (!taken[j] && (am < 0 || l[j] > l[am])) am = j;
            double m = l[am], s = 0;
            for (int j = 0; j < E; j++) {
                if (taken[j]) continue;
                double f = fmax(fabs((double)l[j]), m);
                if ((m - l[j]) / f > 2.0 * op->jitter) continue;
                s += exp((double)l[j] - m);
            }
            out->ids[r] = am;
            out->w[r] = 1.0 / s * op->scale * (es ? es[am] : 1.0);
            taken[am] = 1;
        }
        return;
    }
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < E; i++) mx = fmax(mx, l[i]);
    for (int i = 0; i < E; i++) s += exp((double)l[i] - mx);
    for (int i = 0; i < E; i++) {
        p[i] = op->score == LMC_MOE_SOFTMAX ? exp((double)l[i] - mx) / s : 1.0 / (1.0 + exp(-(double)l[i]));
        c[i] = p[i] + (bias ? bias[i] : 0.0);
    }
    if (op->score == LMC_MOE_SIGMOID && op->n_group > 1) {
        int per = E / op->n_group, keep[64] = {0}, gt[64] = {0};
        double gs[64];
        for (int g = 0; g < op->n_group; g++) {
            /* sum of the two largest: sort the group's scores */
            double a = -INFINITY, b = -INFINITY;
            for (int i = g * per; i < (g + 1) * per; i++) {
                double v = c[i];
                if (v > a) { b = a; a = v; } else if (v > b) b = v;
            }
            gs[g] = per >= 2 ? a + b : a;
        }
        for (int r = 0; r < op->topk_group; r++) {
            int best = -1;
            for (int g = 0; g < op->n_group; g++) if (!gt[g] && (best < 0 || gs[g] > gs[best])) best = g;
            gt[best] = keep[best] = 1;
        }
        for (int i = 0; i < E; i++) if (!keep[i / per]) c[i] = 0.0;
    }
    double sum = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < E; i++) if (!taken[i] && (best < 0 || c[i] > c[best])) best = i;
        taken[best] = 1;
        out->ids[j] = best;
        out->w[j] = p[best];
        sum += p[best];
    }
    for (int j = 0; j < k; j++) {
        if (op->norm) out->w[j] /= fmax(sum, (double)op->norm_min) + op->norm_eps;
        out->w[j] *= op->scale * (es ? es[out->ids[j]] : 1.0);
    }
}


static void check_route(lmc_backend *be, const lmc_moe_route_op *op, int n, float logit_spread, int with_bias,
                        float bias_value, const char *what) {
    const int E = op->n_expert, k = op->k;
    float *l = malloc(sizeof(float) * E * n), bias[64];
    for (int i = 0; i < E * n; i++) l[i] = frand() * logit_spread;
    for (int i = 0; i < E; i++) bias[i] = isnan(bias_value) ? frand() * 0.3f : bias_value;
    lmc_tensor lt = host_tensor(be, LMC_DTYPE_F32, E, n, l), bt = host_tensor(be, LMC_DTYPE_F32, E, 1, bias);
    lmc_tensor ids = host_tensor(be, LMC_DTYPE_I32, k, n, NULL), w = host_tensor(be, LMC_DTYPE_F32, k, n, NULL);
    be->i->moe_route(be, &ids, &w, &lt, with_bias ? &bt : NULL, op);
    CHECK(be->i->sync(be) == LMC_OK);
    const int32_t *gi = ids.data;
    const float *gw = w.data;
    int bad_ids = 0;
    double err = 0;
    for (int t = 0; t < n; t++) {
        ref_route r;
        route_ref(l + (size_t)t * E, with_bias ? bias : NULL, op, &r);
        for (int j = 0; j < k; j++) {
            bad_ids += gi[t * k + j] != r.ids[j];
            err = fmax(err, fabs(gw[t * k + j] - r.w[j]));
        }
    }
    CHECK_MSG(bad_ids == 0, "%s: %d ids differ", what, bad_ids);
    CHECK_MSG(err < 2e-6, "%s: weights off by %.3g", what, err);
    be->i->release(be, &lt); be->i->release(be, &bt); be->i->release(be, &ids); be->i->release(be, &w);
    free(l);
}

/* expert_scale (gemma4's per_expert_scale): a factor per expert on every kind's final weights */
static void test_route_expert_scale(void) {
    float s[16];
    for (int i = 0; i < 16; i++) s[i] = 0.5f + 0.1f * (float)i;
    for (int b = 0; b < 2; b++) {
        lmc_backend *be = b ? ref_be : fast_be;
        lmc_tensor st = host_tensor(be, LMC_DTYPE_F32, 16, 1, s), s8 = host_tensor(be, LMC_DTYPE_F32, 8, 1, s);
        lmc_moe_route_op op = {.score = LMC_MOE_SOFTMAX, .n_expert = 16, .k = 4, .norm = 1, .scale = 1.0f,
                               .expert_scale = &st};
        check_route(be, &op, 9, 3.0f, 0, 0, "softmax renormalized, expert scale (gemma4)");
        op = (lmc_moe_route_op){.score = LMC_MOE_SIGMOID, .n_expert = 16, .k = 4, .norm = 1, .norm_eps = 1e-20f,
                                .scale = 2.5f, .n_group = 4, .topk_group = 2, .expert_scale = &st};
        check_route(be, &op, 11, 2.0f, 1, NAN, "sigmoid grouped, scaled, expert scale");
        op = (lmc_moe_route_op){.score = LMC_MOE_SPARSEMIXER, .n_expert = 8, .k = 2, .scale = 1.0f, .jitter = 0.5f,
                                .expert_scale = &s8};
        check_route(be, &op, 13, 1.0f, 0, 0, "sparsemixer, expert scale");
        be->i->release(be, &st);
        be->i->release(be, &s8);
    }
    /* the factor lands on the chosen expert's weight: one clear winner, weight 1 · s[winner] */
    lmc_tensor st = host_tensor(fast_be, LMC_DTYPE_F32, 8, 1, s);
    lmc_moe_route_op op = {.score = LMC_MOE_SOFTMAX, .n_expert = 8, .k = 1, .norm = 1, .scale = 1.0f, .expert_scale = &st};
    float l[8] = {0, 0, 0, 40.0f, 0, 0, 0, 0};
    lmc_tensor lt = host_tensor(fast_be, LMC_DTYPE_F32, 8, 1, l);
    lmc_tensor ids = host_tensor(fast_be, LMC_DTYPE_I32, 1, 1, NULL), w = host_tensor(fast_be, LMC_DTYPE_F32, 1, 1, NULL);
    fast_be->i->moe_route(fast_be, &ids, &w, &lt, NULL, &op);
    CHECK(((int32_t *)ids.data)[0] == 3);
    CHECK_NEAR(((float *)w.data)[0], s[3], 1e-7);
    fast_be->i->release(fast_be, &st); fast_be->i->release(fast_be, &lt);
    fast_be->i->release(fast_be, &ids); fast_be->i->release(fast_be, &w);
}

static void test_route_softmax(void) {
    lmc_moe_route_op op = {.score = LMC_MOE_SOFTMAX, .n_expert = 16, .k = 4, .scale = 1.0f};
    for (int b = 0; b < 2; b++) {
        lmc_backend *be = b ? ref_be : fast_be;
        check_route(be, &op, 9, 3.0f, 0, 0, "softmax top-4");
        op.norm = 1;
        check_route(be, &op, 9, 3.0f, 0, 0, "softmax top-4 renormalized");
        op.norm_min = 1e-12f; /* ernie4_5_moe: choose by p + bias, weights p, clamp */
        check_route(be, &op, 9, 3.0f, 1, NAN, "softmax, biased choice");
        op.norm = 0;
        op.norm_min = 0;
    }
    /* the weights sum to 1 after renormalization, and follow the logits' order */
    op.norm = 1;
    float l[16];
    for (int i = 0; i < 16; i++) l[i] = (float)i * 0.1f;
    lmc_tensor lt = host_tensor(fast_be, LMC_DTYPE_F32, 16, 1, l);
    lmc_tensor ids = host_tensor(fast_be, LMC_DTYPE_I32, 4, 1, NULL), w = host_tensor(fast_be, LMC_DTYPE_F32, 4, 1, NULL);
    fast_be->i->moe_route(fast_be, &ids, &w, &lt, NULL, &op);
    const int32_t *id = ids.data;
    const float *wt = w.data;
    CHECK(id[0] == 15 && id[1] == 14 && id[2] == 13 && id[3] == 12);
    CHECK_NEAR(wt[0] + wt[1] + wt[2] + wt[3], 1.0, 1e-6);
    CHECK(wt[0] > wt[1] && wt[1] > wt[2]);
    fast_be->i->release(fast_be, &lt); fast_be->i->release(fast_be, &ids); fast_be->i->release(fast_be, &w);
}

static void test_route_sigmoid_grouped(void) {
    lmc_moe_route_op op = {.score = LMC_MOE_SIGMOID, .n_expert = 16, .k = 4, .norm = 1, .norm_eps = 1e-20f,
                           .scale = 2.5f, .n_group = 4, .topk_group = 2};
    for (int b = 0; b < 2; b++) {
        lmc_backend *be = b ? ref_be : fast_be;
        check_route(be, &op, 11, 2.0f, 1, NAN, "sigmoid, grouped 2 of 4, scaled");
        op.n_group = 0;
        check_route(be, &op, 11, 2.0f, 1, NAN, "sigmoid, ungrouped");
        op.norm = 0;
        check_route(be, &op, 11, 2.0f, 0, 0, "sigmoid, unnormalized, no bias");
        op.norm = 1;
        op.n_group = 4;
    }
    /* masked groups score 0, not -inf: with a bias that makes every kept choice negative,
     * the choice falls on the dropped group's experts (transformers' masked_fill(…, 0.0)) */
    op = (lmc_moe_route_op){.score = LMC_MOE_SIGMOID, .n_expert = 8, .k = 2, .scale = 1.0f, .n_group = 2, .topk_group = 1};
    float l[8] = {3, 3, 3, 3, -3, -3, -3, -3}, bias[8];
    for (int i = 0; i < 8; i++) bias[i] = -2.0f;
    lmc_tensor lt = host_tensor(fast_be, LMC_DTYPE_F32, 8, 1, l), bt = host_tensor(fast_be, LMC_DTYPE_F32, 8, 1, bias);
    lmc_tensor ids = host_tensor(fast_be, LMC_DTYPE_I32, 2, 1, NULL), w = host_tensor(fast_be, LMC_DTYPE_F32, 2, 1, NULL);
    fast_be->i->moe_route(fast_be, &ids, &w, &lt, &bt, &op);
    const int32_t *id = ids.data;
    CHECK_MSG(id[0] == 4 && id[1] == 5, "ids %d %d", id[0], id[1]);
    CHECK_NEAR(((float *)w.data)[0], 1.0 / (1.0 + exp(3.0)), 1e-6);
    fast_be->i->release(fast_be, &lt); fast_be->i->release(fast_be, &bt);
    fast_be->i->release(fast_be, &ids); fast_be->i->release(fast_be, &w);
}

static void test_route_sparsemixer(void) {
    lmc_moe_route_op op = {.score = LMC_MOE_SPARSEMIXER, .n_expert = 8, .k = 2, .scale = 1.0f, .jitter = 0.01f};
    for (int b = 0; b < 2; b++) {
        lmc_backend *be = b ? ref_be : fast_be;
        check_route(be, &op, 13, 1.0f, 0, 0, "sparsemixer eps 0.01");
        op.jitter = 0.5f; /* wide threshold: several experts share each round's softmax */
        check_route(be, &op, 13, 1.0f, 0, 0, "sparsemixer eps 0.5");
        op.jitter = 0.01f;
    }
    /* a clear winner with eps 0.01 takes weight 1 in round one */
    float l[8] = {0.1f, 5.0f, 0.2f, 0.3f, 1.0f, 0.0f, -1.0f, 0.5f};
    lmc_tensor lt = host_tensor(fast_be, LMC_DTYPE_F32, 8, 1, l);
    lmc_tensor ids = host_tensor(fast_be, LMC_DTYPE_I32, 2, 1, NULL), w = host_tensor(fast_be, LMC_DTYPE_F32, 2, 1, NULL);
    fast_be->i->moe_route(fast_be, &ids, &w, &lt, NULL, &op);
    CHECK(((int32_t *)ids.data)[0] == 1 && ((int32_t *)ids.data)[1] == 4);
    CHECK_NEAR(((float *)w.data)[0], 1.0, 1e-7);
    CHECK_NEAR(((float *)w.data)[1], 1.0, 1e-7);
    fast_be->i->release(fast_be, &lt); fast_be->i->release(fast_be, &ids); fast_be->i->release(fast_be, &w);
}

/* ------------------------------------------------------------- matmul_id */

#define NE 6
typedef struct experts {
    lmc_tensor w[NE];
    float *f[NE];       /* f32 copies of the stored weights (what the kernels must compute with) */
    void *store[NE];
} experts;

static void make_experts(experts *x, lmc_dtype t, int64_t in, int64_t out) {
    for (int e = 0; e < NE; e++) {
        x->f[e] = malloc(sizeof(float) * in * out);
        for (int64_t i = 0; i < in * out; i++) x->f[e][i] = frand() / sqrtf((float)in);
        x->w[e] = lmc_tensor_make(t, in, out, 1, 1);
        x->store[e] = malloc(lmc_tensor_nbytes(&x->w[e]));
        for (int64_t o = 0; o < out; o++) {
            char *row = (char *)x->store[e] + (size_t)o * x->w[e].nb[1];
            if (t == LMC_DTYPE_F32) memcpy(row, x->f[e] + o * in, (size_t)in * 4);
            else if (t == LMC_DTYPE_BF16)
                for (int64_t i = 0; i < in; i++) ((uint16_t *)(void *)row)[i] = lmc_f32_to_bf16(x->f[e][o * in + i]);
            else LMC_ASSERT(lmc_quantize_row(t, x->f[e] + o * in, row, NULL, in) == LMC_OK);
            lmc_tensor_row_to_f32(&(lmc_tensor){.type = t, .ne = {in, out, 1, 1},
                                                .nb = {x->w[e].nb[0], x->w[e].nb[1], 0, 0}, .data = x->store[e]},
                                  o, x->f[e] + o * in);
        }
        x->w[e].data = x->store[e];
    }
}

static void free_experts(experts *x) {
    for (int e = 0; e < NE; e++) { free(x->f[e]); free(x->store[e]); }
}

/* matmul_id vs a double-precision per-slot product; per_slot: x is [in, k, n]. */
static void check_matmul_id(lmc_backend *be, lmc_dtype t, int n, int k, int per_slot, const char *what) {
    const int64_t in = 64, out = 48;
    experts x;
    make_experts(&x, t, in, out);
    int32_t *ids = malloc(sizeof(int32_t) * k * n);
    int used[NE] = {0};
    for (int s = 0; s < k * n; s++) {
        /* experts 0..NE-2 only, expert 2 favoured (≥ 8 slots in prefill: the GEMM path) */
        int e = (rng >> 5) % (NE - 1);
        frand();
        if (s % 3 == 0) e = 2;
        for (int j = 0; j < s % k; j++) if (ids[s - s % k + j] == e) e = (e + 1) % (NE - 1);
        ids[s] = e;
        used[e] = 1;
    }
    /* an expert no slot selects must not be read: point it at nothing */
    const int unused = NE - 1;
    CHECK(!used[unused]);
    x.w[unused].data = NULL;
    const int64_t nx = per_slot ? (int64_t)k * n : n;
    float *xs = malloc(sizeof(float) * in * nx);
    for (int64_t i = 0; i < in * nx; i++) xs[i] = frand();
    lmc_tensor xt = host_tensor(be, LMC_DTYPE_F32, in, nx, xs), it = host_tensor(be, LMC_DTYPE_I32, k, n, ids);
    lmc_tensor yt = host_tensor(be, LMC_DTYPE_F32, out, (int64_t)k * n, NULL);
    be->i->matmul_id(be, &yt, x.w, NE, &xt, &it);
    CHECK(be->i->sync(be) == LMC_OK);
    double err = 0, mag = 0;
    for (int s = 0; s < k * n; s++) {
        const float *xv = xs + (size_t)(per_slot ? s : s / k) * in;
        for (int64_t o = 0; o < out; o++) {
            double r = 0;
            for (int64_t i = 0; i < in; i++) r += (double)x.f[ids[s]][o * in + i] * xv[i];
            err = fmax(err, fabs(((float *)yt.data)[(size_t)s * out + o] - r));
            mag = fmax(mag, fabs(r));
        }
    }
    /* bf16 / q8_0 weights are exact as stored; the decode kernels may round activations (q8_0: to 8 bits) */
    double tol = (t == LMC_DTYPE_Q8_0 ? 2e-2 : 1e-5) * fmax(mag, 1.0);
    CHECK_MSG(err <= tol, "%s: off by %.3g (tolerance %.3g)", what, err, tol);
    be->i->release(be, &xt); be->i->release(be, &it); be->i->release(be, &yt);
    free(xs); free(ids);
    free_experts(&x);
}

static void test_matmul_id(void) {
    const lmc_dtype types[3] = {LMC_DTYPE_F32, LMC_DTYPE_BF16, LMC_DTYPE_Q8_0};
    for (int b = 0; b < 2; b++) {
        lmc_backend *be = b ? ref_be : fast_be;
        for (int ti = 0; ti < 3; ti++) {
            char what[96];
            snprintf(what, sizeof what, "%s %s decode", b ? "reference" : "fast", lmc_dtype_name(types[ti]));
            check_matmul_id(be, types[ti], 1, 2, 0, what);
            snprintf(what, sizeof what, "%s %s prefill", b ? "reference" : "fast", lmc_dtype_name(types[ti]));
            check_matmul_id(be, types[ti], 21, 3, 0, what);
            snprintf(what, sizeof what, "%s %s prefill, per-slot inputs", b ? "reference" : "fast",
                     lmc_dtype_name(types[ti]));
            check_matmul_id(be, types[ti], 21, 3, 1, what);
        }
    }
}

static void test_moe_sum(void) {
    const int D = 40, k = 3, n = 5;
    float x[40 * 3 * 5], w[15], sh[200], g[5];
    for (int i = 0; i < D * k * n; i++) x[i] = frand();
    for (int i = 0; i < k * n; i++) w[i] = frand();
    for (int i = 0; i < D * n; i++) sh[i] = frand();
    for (int i = 0; i < n; i++) g[i] = frand() * 3;
    for (int mode = 0; mode < 3; mode++) {
        lmc_backend *be = mode == 1 ? ref_be : fast_be;
        lmc_tensor xt = host_tensor(be, LMC_DTYPE_F32, D, k * n, x), wt = host_tensor(be, LMC_DTYPE_F32, k, n, w);
        lmc_tensor st = host_tensor(be, LMC_DTYPE_F32, D, n, sh), gt = host_tensor(be, LMC_DTYPE_F32, 1, n, g);
        lmc_tensor yt = host_tensor(be, LMC_DTYPE_F32, D, n, NULL);
        be->i->moe_sum(be, &yt, &xt, &wt, mode ? &st : NULL, mode == 2 ? &gt : NULL);
        double err = 0;
        for (int t = 0; t < n; t++)
            for (int d = 0; d < D; d++) {
                double r = 0;
                for (int j = 0; j < k; j++) r += (double)w[t * k + j] * x[(t * k + j) * D + d];
                if (mode) r += sh[t * D + d] * (mode == 2 ? 1.0 / (1.0 + exp(-(double)g[t])) : 1.0);
                err = fmax(err, fabs(((float *)yt.data)[t * D + d] - r));
            }
        CHECK_MSG(err < 1e-5, "mode %d: off by %.3g", mode, err);
        be->i->release(be, &xt); be->i->release(be, &wt); be->i->release(be, &st);
        be->i->release(be, &gt); be->i->release(be, &yt);
    }
}

/* ------------------------------------------------------------ whole block */

static double silu(double v) { return v / (1.0 + exp(-v)); }

/* out = the MoE block by a per-token loop over EVERY expert (weights of unselected ones zero). */
static void block_ref(const lmc_model *m, const lmc_moe_layer *L, const float *h, int n, double *out) {
    const lmc_config *c = &m->cfg;
    const int D = c->hidden_size, E = c->n_experts, I = c->moe_intermediate_size;
    const int Is = lmc_moe_shared_size(c, m->profile.arch);
    const lmc_moe_route_op op = lmc_moe_route_params(c, m->profile.arch);
    double *act = malloc(sizeof(double) * (I > Is ? I : Is));
    for (int t = 0; t < n; t++) {
        const float *x = h + (size_t)t * D;
        float l[64];
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int i = 0; i < D; i++) s += (double)((float *)L->router.data)[e * D + i] * x[i];
            l[e] = (float)s;
        }
        ref_route r;
        route_ref(l, L->sel_bias.data ? L->sel_bias.data : NULL, &op, &r);
        double *o = out + (size_t)t * D;
        for (int d = 0; d < D; d++) o[d] = 0;
        for (int e = 0; e < E; e++) {
            double we = 0;
            for (int j = 0; j < op.k; j++) if (r.ids[j] == e) we = r.w[j];
            const float *G = L->gate[e].data, *U = L->up[e].data, *Dn = L->down[e].data;
            for (int i = 0; i < I; i++) {
                double g = 0, u = 0;
                for (int q = 0; q < D; q++) { g += (double)G[i * D + q] * x[q]; u += (double)U[i * D + q] * x[q]; }
                act[i] = silu(g) * u;
            }
            for (int d = 0; d < D; d++) {
                double y = 0;
                for (int i = 0; i < I; i++) y += (double)Dn[d * I + i] * act[i];
                o[d] += we * y;
            }
        }
        if (L->sh_down.data) {
            double gate = 1.0;
            if (L->sh_router.data) {
                double s = 0;
                for (int q = 0; q < D; q++) s += (double)((float *)L->sh_router.data)[q] * x[q];
                gate = 1.0 / (1.0 + exp(-s));
            }
            const float *G = L->sh_gate.data, *U = L->sh_up.data, *Dn = L->sh_down.data;
            for (int i = 0; i < Is; i++) {
                double g = 0, u = 0;
                for (int q = 0; q < D; q++) { g += (double)G[i * D + q] * x[q]; u += (double)U[i * D + q] * x[q]; }
                act[i] = silu(g) * u;
            }
            for (int d = 0; d < D; d++) {
                double y = 0;
                for (int i = 0; i < Is; i++) y += (double)Dn[d * Is + i] * act[i];
                o[d] += gate * y;
            }
        }
    }
    free(act);
}

static lmc_tensor rand_weight(int64_t in, int64_t out, float **keep, int *n_keep) {
    lmc_tensor t = lmc_tensor_make(LMC_DTYPE_F32, in, out, 1, 1);
    float *f = malloc(sizeof(float) * in * out);
    for (int64_t i = 0; i < in * out; i++) f[i] = frand() * 1.7f / sqrtf((float)in);
    keep[(*n_keep)++] = f;
    t.data = f;
    return t;
}

/* A hand-built model holding one sparse layer of the given row; the block against block_ref. */
static void check_block(const char *model_type, int E, int k, int shared, int gated, int with_bias) {
    lmc_model m;
    memset(&m, 0, sizeof m);
    m.profile.arch = lmc_arch_find(model_type, NULL);
    CHECK(m.profile.arch && m.profile.arch->moe);
    if (!m.profile.arch) return;
    m.be = fast_be;
    m.act = LMC_ACT_SILU;
    lmc_config *c = &m.cfg;
    c->hidden_size = 32;
    c->intermediate_size = c->moe_intermediate_size = 16;
    c->n_experts = E;
    c->n_experts_used = k;
    c->norm_topk_prob = 1;
    c->routed_scaling_factor = m.profile.arch->moe->scale_key ? 1.5 : 1.0;
    c->shared_intermediate_size = shared ? 24 : 0;
    c->n_group = m.profile.arch->moe->group_keys ? 2 : 0;
    c->topk_group = 1;
    c->router_jitter = -1;
    const int D = 32, I = 16;
    float *keep[4096];
    int n_keep = 0;
    lmc_moe_layer L;
    memset(&L, 0, sizeof L);
    lmc_tensor views[3 * 64];
    L.gate = views; L.up = views + E; L.down = views + 2 * E;
    L.router = rand_weight(D, E, keep, &n_keep);
    for (int e = 0; e < E; e++) {
        L.gate[e] = rand_weight(D, I, keep, &n_keep);
        L.up[e] = rand_weight(D, I, keep, &n_keep);
        L.down[e] = rand_weight(I, D, keep, &n_keep);
    }
    if (shared) {
        L.sh_gate = rand_weight(D, 24, keep, &n_keep);
        L.sh_up = rand_weight(D, 24, keep, &n_keep);
        L.sh_down = rand_weight(24, D, keep, &n_keep);
        if (gated) L.sh_router = rand_weight(D, 1, keep, &n_keep);
    }
    if (with_bias) {
        L.sel_bias = rand_weight(E, 1, keep, &n_keep);
        for (int e = 0; e < E; e++) ((float *)L.sel_bias.data)[e] *= 0.2f;
    }
    const int ns[2] = {1, 19};
    for (int b = 0; b < 2; b++) {
        m.be = b ? ref_be : fast_be;
        lmc_moe_scratch s;
        CHECK(lmc_moe_scratch_init(&s, &m, 32) == LMC_OK);
        for (int ni = 0; ni < 2; ni++) {
            const int n = ns[ni];
            float *h = malloc(sizeof(float) * D * n);
            for (int i = 0; i < D * n; i++) h[i] = frand() * 2;
            lmc_tensor ht = host_tensor(m.be, LMC_DTYPE_F32, D, n, h), ot = host_tensor(m.be, LMC_DTYPE_F32, D, n, NULL);
            lmc_moe_forward(&m, &L, &s, &ot, &ht, n);
            CHECK(m.be->i->sync(m.be) == LMC_OK);
            double *ref = malloc(sizeof(double) * D * n), err = 0, mag = 0;
            block_ref(&m, &L, h, n, ref);
            for (int i = 0; i < D * n; i++) {
                err = fmax(err, fabs(((float *)ot.data)[i] - ref[i]));
                mag = fmax(mag, fabs(ref[i]));
            }
            CHECK_MSG(err <= 1e-5 * fmax(mag, 1.0) && mag > 0.1, "%s (%s backend, %d tokens): off by %.3g of %.3g",
                      model_type, b ? "reference" : "fast", n, err, mag);
            m.be->i->release(m.be, &ht); m.be->i->release(m.be, &ot);
            free(h); free(ref);
        }
        lmc_moe_scratch_free(&s, &m);
    }
    for (int i = 0; i < n_keep; i++) free(keep[i]);
}

static void test_block(void) {
    check_block("qwen3_moe", 8, 2, 0, 0, 0);
    check_block("qwen2_moe", 8, 2, 1, 1, 0);   /* gated shared expert */
    check_block("mixtral", 8, 2, 0, 0, 0);
    check_block("glm4_moe", 16, 4, 1, 0, 1);   /* sigmoid, grouped, selection bias, scaling, shared */
    check_block("ernie4_5_moe", 8, 3, 1, 0, 1);/* softmax with a biased choice */
    check_block("phimoe", 8, 2, 0, 0, 0);      /* sparsemixer */
    check_block("qwen3_moe", 64, 8, 0, 0, 0);  /* many experts: most are never touched per token */
}

/* ---------------------------------------------------------------- config */

static lmc_status config_of(const char *json, lmc_config *cfg) {
    cJSON *raw = cJSON_Parse(json);
    LMC_ASSERT(raw);
    lmc_status st = lmc_config_from_json(raw, NULL, cfg);
    return st;
}

#define BASE "\"vocab_size\": 64, \"hidden_size\": 32, \"num_hidden_layers\": 6, \"num_attention_heads\": 4, "

static void test_config_rules(void) {
    lmc_config c;
    lmc_profile p;
    /* qwen: decoder_sparse_step 2 and mlp_only_layers */
    CHECK(config_of("{\"model_type\": \"qwen3_moe\", " BASE "\"num_experts\": 8, \"num_experts_per_tok\": 2, "
                    "\"moe_intermediate_size\": 16, \"decoder_sparse_step\": 2, \"mlp_only_layers\": [3]}", &c) == LMC_OK);
    const unsigned char want1[6] = {1, 0, 1, 1, 1, 0};
    CHECK(memcmp(c.layer_dense, want1, 6) == 0);
    CHECK(c.moe_intermediate_size == 16 && c.n_experts == 8 && c.n_experts_used == 2 && c.norm_topk_prob == -1);
    CHECK(lmc_profile_resolve(&c, &p) == LMC_OK);
    CHECK_EQ_STR(p.id, "generic-moe:qwen3_moe");
    CHECK_EQ_STR(p.graph, "moe");
    /* 2 sparse layers (1, 5) × (8 - 2) experts × 3 · 32 · 16 */
    CHECK_EQ_INT(lmc_moe_inactive_params(&c, p.arch), 2LL * 6 * 3 * 32 * 16);
    lmc_config_free(&c);
    /* deepseek-style first_k_dense_replace with grouped routing keys */
    CHECK(config_of("{\"model_type\": \"glm4_moe\", " BASE "\"n_routed_experts\": 16, \"num_experts_per_tok\": 4, "
                    "\"moe_intermediate_size\": 16, \"first_k_dense_replace\": 2, \"n_group\": 4, \"topk_group\": 2, "
                    "\"routed_scaling_factor\": 2.5, \"n_shared_experts\": 2}", &c) == LMC_OK);
    const unsigned char want2[6] = {1, 1, 0, 0, 0, 0};
    CHECK(memcmp(c.layer_dense, want2, 6) == 0);
    CHECK(lmc_profile_resolve(&c, &p) == LMC_OK);
    CHECK_EQ_INT(lmc_moe_shared_size(&c, p.arch), 32);
    lmc_moe_route_op op = lmc_moe_route_params(&c, p.arch);
    CHECK(op.score == LMC_MOE_SIGMOID && op.n_group == 4 && op.topk_group == 2 && op.norm == 1);
    CHECK_NEAR(op.scale, 2.5, 1e-6);
    lmc_config_free(&c);
    /* ernie: interval / start / end (end -1 = the last layer) */
    CHECK(config_of("{\"model_type\": \"ernie4_5_moe\", " BASE "\"moe_num_experts\": 8, \"moe_k\": 2, "
                    "\"moe_intermediate_size\": 16, \"moe_layer_interval\": 2, \"moe_layer_start_index\": 2, "
                    "\"moe_layer_end_index\": 4, \"moe_norm_min\": 1e-12}", &c) == LMC_OK);
    const unsigned char want3[6] = {1, 1, 1, 0, 1, 1};
    CHECK(memcmp(c.layer_dense, want3, 6) == 0);
    lmc_config_free(&c);
    /* refusals, each with a message naming the problem */
    CHECK(config_of("{\"model_type\": \"hunyuan_v1_moe\", " BASE "\"num_experts\": 8, \"moe_topk\": [2, 2, 3, 2, 2, 2]}",
                    &c) == LMC_ERR_UNSUPPORTED);
    CHECK(strstr(lmc_last_error(), "moe_topk") != NULL);
    lmc_config_free(&c);
    /* the same value for every layer (Hunyuan-A13B's spelling) is read */
    CHECK(config_of("{\"model_type\": \"hunyuan_v1_moe\", " BASE "\"num_experts\": 8, \"moe_topk\": [2, 2, 2, 2, 2, 2]}",
                    &c) == LMC_OK);
    CHECK_EQ_INT(c.n_experts_used, 2);
    lmc_config_free(&c);
    CHECK(config_of("{\"model_type\": \"mixtral\", " BASE "\"num_local_experts\": 4, \"num_experts_per_tok\": 5}", &c) ==
          LMC_ERR_FORMAT);
    lmc_config_free(&c);
    CHECK(config_of("{\"model_type\": \"glm4_moe\", " BASE "\"n_routed_experts\": 10, \"num_experts_per_tok\": 2, "
                    "\"n_group\": 4, \"topk_group\": 1}", &c) == LMC_ERR_FORMAT);
    lmc_config_free(&c);
    CHECK(config_of("{\"model_type\": \"phimoe\", " BASE "\"num_local_experts\": 8, \"num_experts_per_tok\": 3}", &c) ==
          LMC_OK);
    CHECK(lmc_profile_resolve(&c, &p) == LMC_ERR_UNSUPPORTED);
    CHECK(strstr(lmc_last_error(), "sparsemixer") != NULL);
    lmc_config_free(&c);
    CHECK(config_of("{\"model_type\": \"mixtral\", " BASE "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, "
                    "\"n_group\": 2, \"topk_group\": 1}", &c) == LMC_OK);
    CHECK(lmc_profile_resolve(&c, &p) == LMC_ERR_UNSUPPORTED);
    lmc_config_free(&c);
    CHECK(config_of("{\"model_type\": \"mixtral\", " BASE "\"num_experts_per_tok\": 2}", &c) == LMC_OK);
    CHECK(lmc_profile_resolve(&c, &p) == LMC_ERR_FORMAT); /* an MoE row without experts */
    lmc_config_free(&c);
    CHECK(config_of("{\"model_type\": \"phimoe\", " BASE "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, "
                    "\"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1, 1, 1, 1], \"long_factor\": [2, 2, 2, 2], "
                    "\"short_mscale\": 1.2, \"long_mscale\": 1.2, \"original_max_position_embeddings\": 64}}", &c) == LMC_OK);
    CHECK(lmc_profile_resolve(&c, &p) == LMC_ERR_UNSUPPORTED);
    CHECK(strstr(lmc_last_error(), "mscale") != NULL);
    lmc_config_free(&c);
    /* a type without a row is refused by name (jetmoe's mixture-of-attention block is not the generic one) */
    CHECK(config_of("{\"model_type\": \"jetmoe\", " BASE "\"num_local_experts\": 8, \"num_experts_per_tok\": 2}", &c) ==
          LMC_OK);
    CHECK(lmc_profile_resolve(&c, &p) == LMC_ERR_UNSUPPORTED);
    CHECK(strstr(lmc_last_error(), "\"jetmoe\" is not supported") != NULL);
    lmc_config_free(&c);
}

/* ---------------------------------------------------------------- loader */

static float *prompt_logits(const char *dir, const int32_t *ids, int n, int *vocab, int64_t *params, int64_t *active) {
    return prompt_logits_of(fast_be, dir, ids, n, vocab, params, active);
}

/* The mixtral fixture rewritten in transformers 5's module tree (mlp.gate, fused
 * mlp.experts.gate_up_proj [E, 2I, D] / down_proj [E, D, I]) gives the same logits. */
static void test_fused_layout(void) {
    const char *src = "tests/fixtures/mixtral";
    lmc_weights *w;
    if (lmc_weights_open(src, &w) != LMC_OK) { CHECK_MSG(0, "%s: %s", src, lmc_last_error()); return; }
    char dir[] = "/tmp/lmc-moe-fused-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int n = lmc_weights_count(w), E = 8, I = 32, D = 64, L = 2, nt = 0;
    lmc_st_write_tensor *t = calloc((size_t)n + 8, sizeof *t);
    float *fused[8];
    char names[8][96];
    for (int i = 0; i < n; i++) {
        const lmc_weight *x = lmc_weights_at(w, i);
        if (strstr(x->name, "block_sparse_moe.experts.")) continue;
        t[nt] = (lmc_st_write_tensor){.name = x->name, .dtype = x->dtype, .n_dims = x->n_dims, .data = x->data};
        for (int d = 0; d < x->n_dims; d++) t[nt].shape[d] = x->shape[d];
        const char *g = strstr(x->name, "block_sparse_moe.gate.weight");
        if (g) { /* renamed router */
            char *nm = malloc(96);
            snprintf(nm, 96, "%.*smlp.gate.weight", (int)(g - x->name), x->name);
            t[nt].name = nm;
        }
        nt++;
    }
    for (int l = 0; l < L; l++) {
        float *gu = malloc(sizeof(float) * E * 2 * I * D), *dn = malloc(sizeof(float) * E * D * I);
        for (int e = 0; e < E; e++) {
            const char *parts[3] = {"w1", "w3", "w2"};
            for (int p = 0; p < 3; p++) {
                char nm[128];
                snprintf(nm, sizeof nm, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, parts[p]);
                const lmc_weight *x = lmc_weights_find(w, nm);
                CHECK(x && x->dtype == LMC_DTYPE_F32);
                if (!x) continue;
                if (p < 2) memcpy(gu + ((size_t)e * 2 * I + (size_t)p * I) * D, x->data, sizeof(float) * I * D);
                else memcpy(dn + (size_t)e * D * I, x->data, sizeof(float) * D * I);
            }
        }
        fused[2 * l] = gu;
        fused[2 * l + 1] = dn;
        snprintf(names[2 * l], sizeof names[0], "model.layers.%d.mlp.experts.gate_up_proj", l);
        snprintf(names[2 * l + 1], sizeof names[0], "model.layers.%d.mlp.experts.down_proj", l);
        t[nt++] = (lmc_st_write_tensor){.name = names[2 * l], .dtype = LMC_DTYPE_F32, .n_dims = 3, .shape = {E, 2 * I, D},
                                        .data = gu};
        t[nt++] = (lmc_st_write_tensor){.name = names[2 * l + 1], .dtype = LMC_DTYPE_F32, .n_dims = 3,
                                        .shape = {E, D, I}, .data = dn};
    }
    char path[256], cmd[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(lmc_st_write(path, t, nt, NULL, 0) == LMC_OK);
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/", src, dir);
    CHECK(system(cmd) == 0);
    const int32_t ids[12] = {5, 17, 99, 3, 250, 42, 42, 7, 128, 64, 31, 200};
    int V1 = 0, V2 = 0;
    int64_t p1, a1, p2, a2;
    float *l1 = prompt_logits(src, ids, 12, &V1, &p1, &a1), *l2 = prompt_logits(dir, ids, 12, &V2, &p2, &a2);
    CHECK(l1 && l2 && V1 == V2);
    if (l1 && l2 && V1 == V2) {
        double e = 0;
        for (int i = 0; i < 12 * V1; i++) e = fmax(e, fabs(l1[i] - l2[i]));
        CHECK_MSG(e == 0, "fused layout logits differ by %.3g", e);
        CHECK_EQ_INT(p1, p2);
        /* active: all but 6 of 8 experts in each of the 2 layers */
        CHECK_EQ_INT(p1 - a1, 2LL * 6 * 3 * D * I);
        CHECK_EQ_INT(a1, a2);
    }
    free(l1); free(l2);
    /* a fused tensor of the wrong shape is refused with its name */
    t[nt - 1].shape[2] = I - 1;
    float *small = calloc((size_t)E * D * I, sizeof(float));
    t[nt - 1].data = small;
    CHECK(lmc_st_write(path, t, nt, NULL, 0) == LMC_OK);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(dir, fast_be, &m) != LMC_OK);
    CHECK(strstr(lmc_last_error(), "mlp.experts.down_proj") != NULL);
    free(small);
    for (int i = 0; i < nt; i++)
        if (strstr(t[i].name, "mlp.gate.weight")) free((void *)t[i].name);
    for (int i = 0; i < 2 * L; i++) free(fused[i]);
    free(t);
    lmc_weights_close(w);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Dense and sparse layers as the config says, bound from the fixture. */
static void test_fixture_layers(void) {
    lmc_model *m = NULL;
    CHECK(lmc_model_load("tests/fixtures/qwen3_moe", fast_be, &m) == LMC_OK);
    if (!m) return;
    CHECK(m->layers[0].moe == NULL && m->layers[0].w_gate.data != NULL); /* mlp_only_layers [0] */
    for (int il = 1; il < m->cfg.n_layers; il++) CHECK(m->layers[il].moe != NULL && m->layers[il].w_gate.data == NULL);
    CHECK(m->n_params_active < m->n_params);
    CHECK_EQ_STR(m->profile.id, "generic-moe:qwen3_moe");
    lmc_model_free(m);
    CHECK(lmc_model_load("tests/fixtures/glm4_moe", fast_be, &m) == LMC_OK);
    if (!m) return;
    CHECK(m->layers[1].moe && m->layers[1].moe->sel_bias.data && m->layers[1].moe->sh_down.data);
    lmc_model_free(m);
}

/* glm4_moe keeps its multi-token-prediction layer past the last one (model.layers.<n_layers>.*):
 * dropped by an explicit rule when num_nextn_predict_layers says so, an audit error otherwise. */
static void test_mtp_drop(void) {
    const char *src = "tests/fixtures/glm4_moe";
    lmc_weights *w;
    if (lmc_weights_open(src, &w) != LMC_OK) { CHECK_MSG(0, "%s: %s", src, lmc_last_error()); return; }
    char dir[] = "/tmp/lmc-moe-mtp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int n = lmc_weights_count(w);
    lmc_st_write_tensor *t = calloc((size_t)n + 1, sizeof *t);
    for (int i = 0; i < n; i++) {
        const lmc_weight *x = lmc_weights_at(w, i);
        t[i] = (lmc_st_write_tensor){.name = x->name, .dtype = x->dtype, .n_dims = x->n_dims, .data = x->data};
        for (int d = 0; d < x->n_dims; d++) t[i].shape[d] = x->shape[d];
    }
    static float extra[64];
    t[n] = (lmc_st_write_tensor){.name = "model.layers.3.enorm.weight", .dtype = LMC_DTYPE_F32, .n_dims = 1,
                                 .shape = {64}, .data = extra};
    char path[256], cmd[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(lmc_st_write(path, t, n + 1, NULL, 0) == LMC_OK);
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/", src, dir);
    CHECK(system(cmd) == 0);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(dir, fast_be, &m) == LMC_OK);
    if (m) CHECK(m->n_audit_dropped == 1);
    lmc_model_free(m);
    m = NULL;
    snprintf(cmd, sizeof cmd, "sed -i 's/\"num_nextn_predict_layers\": 1/\"num_nextn_predict_layers\": 0/' %s/config.json", dir);
    CHECK(system(cmd) == 0);
    CHECK(lmc_model_load(dir, fast_be, &m) == LMC_ERR_AUDIT);
    CHECK(strstr(lmc_last_error(), "model.layers.3.enorm.weight") != NULL);
    free(t);
    lmc_weights_close(w);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* add_bias_id: y[:, j, t] += b[:, ids[j, t]], against the loop written here. */
static void test_add_bias_id(void) {
    const int D = 24, E = 5, k = 2, n = 7;
    float y[24 * 2 * 7], b[24 * 5];
    int32_t ids[14];
    for (int i = 0; i < D * k * n; i++) y[i] = frand();
    for (int i = 0; i < D * E; i++) b[i] = frand();
    for (int i = 0; i < k * n; i++) ids[i] = (i * 3 + 1) % E;
    for (int mode = 0; mode < 2; mode++) {
        lmc_backend *be = mode ? ref_be : fast_be;
        lmc_tensor yt = host_tensor(be, LMC_DTYPE_F32, D, k * n, y), bt = host_tensor(be, LMC_DTYPE_F32, D, E, b);
        lmc_tensor it = host_tensor(be, LMC_DTYPE_I32, k, n, ids);
        be->i->add_bias_id(be, &yt, &bt, &it);
        double err = 0;
        for (int s = 0; s < k * n; s++)
            for (int d = 0; d < D; d++)
                err = fmax(err, fabs(((float *)yt.data)[s * D + d] - ((double)y[s * D + d] + b[ids[s] * D + d])));
        CHECK_MSG(err < 1e-6, "mode %d: off by %.3g", mode, err);
        be->i->release(be, &yt); be->i->release(be, &bt); be->i->release(be, &it);
    }
}

/* glu_clamp over interleaved (gate, up) pairs: values on both sides of ±limit. */
static void test_glu_clamp(void) {
    const int D = 33, n = 4;
    const float alpha = 1.702f, limit = 7.0f;
    float x[66 * 4];
    for (int i = 0; i < 2 * D * n; i++) x[i] = 12.0f * frand(); /* |x| up to 12: the clamps bite */
    for (int mode = 0; mode < 2; mode++) {
        lmc_backend *be = mode ? ref_be : fast_be;
        lmc_tensor xt = host_tensor(be, LMC_DTYPE_F32, 2 * D, n, x), yt = host_tensor(be, LMC_DTYPE_F32, D, n, NULL);
        be->i->glu_clamp(be, &yt, &xt, alpha, limit);
        double err = 0;
        int clamped = 0;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < D; i++) {
                double g = x[t * 2 * D + 2 * i], u = x[t * 2 * D + 2 * i + 1];
                clamped += g > limit || fabs(u) > limit;
                g = g > limit ? limit : g;
                u = u > limit ? limit : u < -limit ? -limit : u;
                double r = (u + 1) * g / (1 + exp(-alpha * g));
                err = fmax(err, fabs(((float *)yt.data)[t * D + i] - r) / fmax(1, fabs(r)));
            }
        CHECK(clamped > 0);
        CHECK_MSG(err < 1e-5, "mode %d: off by %.3g", mode, err);
        be->i->release(be, &xt); be->i->release(be, &yt);
    }
}

/* glu_clamp_split (gate and up in separate tensors, GGUF's gpt-oss experts) equals glu_clamp over the
 * same values interleaved, in place on gate too. */
static void test_glu_clamp_split(void) {
    const int D = 33, n = 4;
    const float alpha = 1.702f, limit = 7.0f;
    float x[66 * 4], g[33 * 4], u[33 * 4];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < D; i++) {
            g[t * D + i] = x[t * 2 * D + 2 * i] = 12.0f * frand();
            u[t * D + i] = x[t * 2 * D + 2 * i + 1] = 12.0f * frand();
        }
    for (int mode = 0; mode < 2; mode++) {
        lmc_backend *be = mode ? ref_be : fast_be;
        CHECK(be->i->glu_clamp_split != NULL);
        if (!be->i->glu_clamp_split) continue;
        lmc_tensor xt = host_tensor(be, LMC_DTYPE_F32, 2 * D, n, x), yt = host_tensor(be, LMC_DTYPE_F32, D, n, NULL);
        lmc_tensor gt = host_tensor(be, LMC_DTYPE_F32, D, n, g), ut = host_tensor(be, LMC_DTYPE_F32, D, n, u);
        be->i->glu_clamp(be, &yt, &xt, alpha, limit);
        be->i->glu_clamp_split(be, &gt, &gt, &ut, alpha, limit);
        CHECK(memcmp(yt.data, gt.data, sizeof(float) * (size_t)(D * n)) == 0);
        be->i->release(be, &xt); be->i->release(be, &yt); be->i->release(be, &gt); be->i->release(be, &ut);
    }
}

/* gpt-oss experts are stored input-major [E, D, 2I] and transposed at load: the bound view of
 * expert e holds output row o, input column i at the file's [e, i, o]; biases are f32 [2I, E]. */
static void test_gpt_oss_layout(void) {
    lmc_model *m = NULL;
    CHECK(lmc_model_load("tests/fixtures/gpt_oss", fast_be, &m) == LMC_OK);
    if (!m) return;
    const lmc_moe_layer *M = m->layers[1].moe;
    CHECK(M && M->gate_up && !M->gate && M->router_b.data && m->layers[0].sinks.data);
    const lmc_weight *gu = lmc_weights_find(m->weights, "model.layers.1.mlp.experts.gate_up_proj");
    const lmc_weight *gb = lmc_weights_find(m->weights, "model.layers.1.mlp.experts.gate_up_proj_bias");
    const lmc_weight *dn = lmc_weights_find(m->weights, "model.layers.1.mlp.experts.down_proj");
    CHECK(gu && gb && dn && gu->dtype == LMC_DTYPE_BF16);
    if (!M || !gu || !gb || !dn) { lmc_model_free(m); return; }
    const int64_t E = gu->shape[0], D = gu->shape[1], O = gu->shape[2], I = dn->shape[1];
    int bad = 0;
    /* the bound rows read as the backend holds them (the CPU packs BF16 matrices: lmc_tensor_row_to_f32) */
    float *row = malloc((size_t)(D > I ? D : I) * sizeof *row);
    for (int64_t e = 0; e < E; e++)
        for (int64_t o = 0; o < O; o += 5) {
            lmc_tensor_row_to_f32(&M->gate_up[e], o, row);
            for (int64_t i = 0; i < D; i += 7) {
                float a;
                lmc_to_f32(LMC_DTYPE_BF16, (const uint16_t *)gu->data + (e * D + i) * O + o, &a, 1);
                bad += a != row[i];
            }
        }
    for (int64_t e = 0; e < E; e++)
        for (int64_t o = 0; o < D; o += 11) {
            lmc_tensor_row_to_f32(&M->down[e], o, row);
            for (int64_t i = 0; i < I; i += 3) {
                float a;
                lmc_to_f32(LMC_DTYPE_BF16, (const uint16_t *)dn->data + (e * I + i) * D + o, &a, 1);
                bad += a != row[i];
            }
        }
    free(row);
    for (int64_t e = 0; e < E; e++)
        for (int64_t o = 0; o < O; o++) {
            float a;
            lmc_to_f32(LMC_DTYPE_BF16, (const uint16_t *)gb->data + e * O + o, &a, 1);
            bad += a != ((const float *)M->b_gate_up.data)[e * O + o];
        }
    CHECK_EQ_INT(bad, 0);
    CHECK(M->glu_limit == 7.0f && fabsf(M->glu_alpha - 1.702f) < 1e-6f);
    lmc_model_free(m);
}

/* gpt-oss MXFP4 experts (quantization_config quant_method "mxfp4": `<name>_blocks` U8 [E, out, in/32, 16]
 * + `<name>_scales` U8 [E, out, in/32]) against the same weights dequantized: the fixture's experts
 * quantized here (MXFP4_MLX rows = outputs), one checkpoint with the pairs, one with F32 input-major
 * experts holding the dequantized values; their logits agree (reference backend: to rounding; fast
 * backend: within its kernels' activation rounding), and the quantization did change the weights. */
static void test_gpt_oss_mxfp4(void) {
    const char *src = "tests/fixtures/gpt_oss";
    lmc_weights *w;
    if (lmc_weights_open(src, &w) != LMC_OK) { CHECK_MSG(0, "%s: %s", src, lmc_last_error()); return; }
    char dq[] = "/tmp/lmc-gptoss-dq-XXXXXX", mx[] = "/tmp/lmc-gptoss-mx-XXXXXX";
    CHECK(mkdtemp(dq) != NULL && mkdtemp(mx) != NULL);
    const int n = lmc_weights_count(w);
    lmc_st_write_tensor *td = calloc((size_t)n + 8, sizeof *td), *tm = calloc((size_t)2 * n + 8, sizeof *tm);
    void *bufs[32];
    char names[24][128];
    int nd = 0, nm = 0, nb = 0, nn = 0, changed = 0;
    for (int i = 0; i < n; i++) {
        const lmc_weight *x = lmc_weights_at(w, i);
        const size_t len = strlen(x->name);
        const int gu = len > 12 && !strcmp(x->name + len - 12, "gate_up_proj"), dn = len > 9 && !strcmp(x->name + len - 9, "down_proj");
        if (!gu && !dn) {
            td[nd] = (lmc_st_write_tensor){.name = x->name, .dtype = x->dtype, .n_dims = x->n_dims, .data = x->data};
            for (int d = 0; d < x->n_dims; d++) td[nd].shape[d] = x->shape[d];
            tm[nm++] = td[nd++];
            continue;
        }
        CHECK(x->n_dims == 3 && x->dtype == LMC_DTYPE_BF16 && nb + 3 <= 32 && nn + 2 <= 24);
        if (x->n_dims != 3 || nb + 3 > 32 || nn + 2 > 24) continue;
        const int64_t E = x->shape[0], in = x->shape[1], out = x->shape[2];
        uint8_t *blk = malloc((size_t)(E * out * in / 2)), *sc = malloc((size_t)(E * out * in / 32));
        float *deq = malloc(sizeof(float) * (size_t)(E * in * out)), *row = malloc(sizeof(float) * (size_t)in),
              *back = malloc(sizeof(float) * (size_t)in);
        for (int64_t e = 0; e < E; e++)
            for (int64_t o = 0; o < out; o++) {
                for (int64_t k = 0; k < in; k++)
                    lmc_to_f32(LMC_DTYPE_BF16, (const uint16_t *)x->data + (e * in + k) * out + o, &row[k], 1);
                const size_t r = (size_t)(e * out + o);
                lmc_mlx_row aux = {.group_size = 32, .scale_type = LMC_DTYPE_U8, .scales = sc + r * (size_t)(in / 32)};
                CHECK(lmc_quantize_row(LMC_DTYPE_MXFP4_MLX, row, blk + r * (size_t)(in / 2), &aux, in) == LMC_OK);
                CHECK(lmc_dequantize_row(LMC_DTYPE_MXFP4_MLX, blk + r * (size_t)(in / 2), &aux, back, in) == LMC_OK);
                for (int64_t k = 0; k < in; k++) {
                    deq[(e * in + k) * out + o] = back[k];
                    changed += back[k] != row[k];
                }
            }
        free(row);
        free(back);
        td[nd++] = (lmc_st_write_tensor){.name = x->name, .dtype = LMC_DTYPE_F32, .n_dims = 3, .shape = {E, in, out},
                                         .data = deq};
        snprintf(names[nn], sizeof names[0], "%s_blocks", x->name);
        tm[nm++] = (lmc_st_write_tensor){.name = names[nn++], .dtype = LMC_DTYPE_U8, .n_dims = 4,
                                         .shape = {E, out, in / 32, 16}, .data = blk};
        snprintf(names[nn], sizeof names[0], "%s_scales", x->name);
        tm[nm++] = (lmc_st_write_tensor){.name = names[nn++], .dtype = LMC_DTYPE_U8, .n_dims = 3,
                                         .shape = {E, out, in / 32}, .data = sc};
        bufs[nb++] = blk;
        bufs[nb++] = sc;
        bufs[nb++] = deq;
    }
    CHECK_EQ_INT(nn, 8); /* gate_up and down of 2 layers: blocks + scales */
    CHECK(changed > 1000);
    char path[256], cmd[700];
    snprintf(path, sizeof path, "%s/model.safetensors", dq);
    CHECK(lmc_st_write(path, td, nd, NULL, 0) == LMC_OK);
    snprintf(path, sizeof path, "%s/model.safetensors", mx);
    lmc_st_sort_for_alignment(tm, nm);
    CHECK(lmc_st_write(path, tm, nm, NULL, 0) == LMC_OK);
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/ && sed 's/^{/{\"quantization_config\": {\"quant_method\": \"mxfp4\"},/' "
             "%s/config.json > %s/config.json", src, dq, src, mx);
    CHECK(system(cmd) == 0);
    const int32_t ids[10] = {5, 17, 99, 3, 250, 42, 42, 7, 128, 64};
    for (int b = 0; b < 2; b++) {
        int V1 = 0, V2 = 0;
        int64_t p1, a1, p2, a2;
        lmc_backend *be = b ? fast_be : ref_be;
        float *l1 = prompt_logits_of(be, dq, ids, 10, &V1, &p1, &a1), *l2 = prompt_logits_of(be, mx, ids, 10, &V2, &p2, &a2);
        CHECK(l1 && l2 && V1 == V2);
        if (l1 && l2 && V1 == V2) {
            double e = 0, scale = 0;
            for (int i = 0; i < 10 * V1; i++) {
                e = fmax(e, fabs(l1[i] - l2[i]));
                scale = fmax(scale, fabs(l1[i]));
            }
            fprintf(stderr, "  gpt_oss mxfp4 vs dequantized (%s): max|d| %.3g of max %.3g\n", b ? "fast" : "reference", e,
                    scale);
            CHECK_MSG(e <= (b ? 2e-2 : 1e-5) * scale, "mxfp4 experts differ from their dequantized values by %.3g", e);
            CHECK_EQ_INT(p1, p2);
            CHECK_EQ_INT(a1, a2);
        }
        free(l1);
        free(l2);
    }
    /* without the quantization_config the pairs are refused by name */
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/config.json", src, mx);
    CHECK(system(cmd) == 0);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(mx, fast_be, &m) != LMC_OK && strstr(lmc_last_error(), "_blocks"));
    lmc_model_free(m);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(td);
    free(tm);
    lmc_weights_close(w);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dq, mx);
    CHECK(system(cmd) == 0);
}

int main(void) {
    if (access("tests/fixtures", F_OK) != 0 && chdir("../..") != 0) return 1; /* run from the repo root */
    LMC_ASSERT(lmc_backend_cpu_init(&fast_be, 2, 0) == LMC_OK);
    LMC_ASSERT(lmc_backend_cpu_init(&ref_be, 1, 1) == LMC_OK);
    RUN(test_route_softmax);
    RUN(test_route_sigmoid_grouped);
    RUN(test_route_sparsemixer);
    RUN(test_route_expert_scale);
    RUN(test_matmul_id);
    RUN(test_moe_sum);
    RUN(test_add_bias_id);
    RUN(test_glu_clamp);
    RUN(test_glu_clamp_split);
    RUN(test_gpt_oss_layout);
    RUN(test_gpt_oss_mxfp4);
    RUN(test_block);
    RUN(test_config_rules);
    RUN(test_fused_layout);
    RUN(test_fixture_layers);
    RUN(test_mtp_drop);
    lmc_backend_free(fast_be);
    lmc_backend_free(ref_be);
    return TEST_END();
}
