/* cpu_moe.c — mixture-of-experts kernels of the CPU backend: routing and the
 * weighted sum of the selected experts' outputs (backend.h, moe_route and moe_sum).
 *
 * Both work on a range of tokens so the backend can split them over threads;
 * they are plain scalar code (the work is tiny next to the expert matmuls) and
 * serve as the reference for other backends. The grouped expert matmul
 * (matmul_id) lives in cpu_backend.c beside the dense matmul it reuses.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>

/* Index of the largest v[i] with taken[i] == 0 (the lowest such index on ties); -1 if none. */
static int argmax_free(const float *v, const unsigned char *taken, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

/* phimoe sparsemixer, one token (k = 2): see backend.h. */
static void sparsemixer(int32_t *ids, float *w, const float *l, int E, float jitter, unsigned char *taken) {
    memset(taken, 0, (size_t)E);
    for (int r = 0; r < 2; r++) {
        int am = argmax_free(l, taken, E);
        if (am < 0) { ids[r] = 0; w[r] = 0; continue; }
        const double m = l[am];
        double mx = -INFINITY, sum = 0;
        /* softmax over the remaining logits within the threshold (the argmax always is) */
        for (int j = 0; j < E; j++) {
            if (taken[j]) continue;
            double factor = fabs((double)l[j]) > m ? fabs((double)l[j]) : m;
            if ((m - l[j]) / factor > 2.0 * jitter) continue;
            if (l[j] > mx) mx = l[j];
        }
        for (int j = 0; j < E; j++) {
            if (taken[j]) continue;
            double factor = fabs((double)l[j]) > m ? fabs((double)l[j]) : m;
            if ((m - l[j]) / factor > 2.0 * jitter) continue;
            sum += exp((double)l[j] - mx);
        }
        ids[r] = am;
        w[r] = (float)(exp(m - mx) / sum);
        taken[am] = 1;
    }
}

void lmc_cpu_moe_route_rows(int32_t *ids, float *wout, const float *logits, const float *bias,
                            const lmc_moe_route_op *op, int64_t t0, int64_t t1, float *scratch) {
    const int E = op->n_expert, k = op->k;
    float *p = scratch, *c = scratch + E; /* [E] scores, [E] choice scores */
    unsigned char *taken = (unsigned char *)(scratch + 2 * E);
    const float *es = op->expert_scale ? (const float *)op->expert_scale->data : NULL;
    for (int64_t t = t0; t < t1; t++) {
        const float *l = logits + (size_t)t * E;
        int32_t *id = ids + (size_t)t * k;
        float *w = wout + (size_t)t * k;
        if (op->score == LMC_MOE_SPARSEMIXER) {
            sparsemixer(id, w, l, E, op->jitter, taken);
            for (int j = 0; j < k; j++) w[j] = w[j] * op->scale * (es ? es[id[j]] : 1.0f);
            continue;
        }
        if (op->score == LMC_MOE_SOFTMAX) {
            float mx = l[0];
            for (int i = 1; i < E; i++) mx = l[i] > mx ? l[i] : mx;
            double s = 0;
            for (int i = 0; i < E; i++) s += exp((double)l[i] - mx);
            for (int i = 0; i < E; i++) p[i] = (float)(exp((double)l[i] - mx) / s);
        } else {
            for (int i = 0; i < E; i++) p[i] = (float)(1.0 / (1.0 + exp(-(double)l[i])));
        }
        for (int i = 0; i < E; i++) c[i] = p[i] + (bias ? bias[i] : 0.0f);
        if (op->score == LMC_MOE_SIGMOID && op->n_group > 1) {
            /* keep the topk_group groups whose two best choice scores sum highest */
            const int G = op->n_group, per = E / G;
            float gs[256];
            unsigned char gtaken[256] = {0}, keep[256] = {0};
            for (int g = 0; g < G; g++) {
                float b1 = -INFINITY, b2 = -INFINITY;
                for (int i = g * per; i < (g + 1) * per; i++) {
                    if (c[i] > b1) { b2 = b1; b1 = c[i]; }
                    else if (c[i] > b2) b2 = c[i];
                }
                gs[g] = per >= 2 ? b1 + b2 : b1;
            }
            for (int r = 0; r < op->topk_group && r < G; r++) {
                int g = argmax_free(gs, gtaken, G);
                gtaken[g] = 1;
                keep[g] = 1;
            }
            for (int i = 0; i < E; i++)
                if (!keep[i / per]) c[i] = 0.0f;
        }
        memset(taken, 0, (size_t)E);
        double sum = 0;
        for (int j = 0; j < k; j++) {
            int e = argmax_free(c, taken, E);
            taken[e] = 1;
            id[j] = e;
            w[j] = p[e];
            sum += p[e];
        }
        if (op->norm) {
            double den = sum > op->norm_min ? sum : op->norm_min;
            den += op->norm_eps;
            for (int j = 0; j < k; j++) w[j] = (float)(w[j] / den);
        }
        for (int j = 0; j < k; j++) w[j] = w[j] * op->scale * (es ? es[id[j]] : 1.0f);
    }
}

void lmc_cpu_moe_sum_rows(float *y, const float *x, const float *w, const float *shared, const float *shared_gate,
                          int64_t D, int k, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
        float *yt = y + (size_t)t * D;
        const float *xt = x + (size_t)t * k * D;
        const float *wt = w + (size_t)t * k;
        float g = 1.0f;
        if (shared_gate) g = 1.0f / (1.0f + expf(-shared_gate[t]));
        for (int64_t i = 0; i < D; i++) {
            float s = 0;
            for (int j = 0; j < k; j++) s += wt[j] * xt[(size_t)j * D + i];
            if (shared) s += shared[(size_t)t * D + i] * g;
            yt[i] = s;
        }
    }
}
