/* sampler.c — repetition penalty, temperature, top-k/top-p/min-p, seeded draws. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand { float logit; int32_t id; } cand;

struct lmc_sampler {
    lmc_sampler_params p;
    int n_vocab;
    float *work;         /* [n_vocab] penalised logits */
    cand *cands;         /* [n_vocab] */
    int32_t *history;
    int n_hist, cap_hist;
    uint64_t rng[4];     /* xoshiro256** */
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform double in [0, 1). */
static double next_unit(uint64_t s[4]) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

lmc_sampler_params lmc_sampler_default_params(void) {
    lmc_sampler_params p = {.temperature = 0, .top_k = 0, .top_p = 1, .min_p = 0, .repetition_penalty = 1,
                            .repetition_window = 64, .seed = 0};
    return p;
}

void lmc_sampler_reset(lmc_sampler *s) {
    s->n_hist = 0;
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

lmc_status lmc_sampler_init(lmc_sampler **out, const lmc_sampler_params *p, int n_vocab) {
    if (n_vocab <= 0) return lmc_fail(LMC_ERR_ARG, "sampler needs a vocabulary");
    if (p->top_k < 0) return lmc_fail(LMC_ERR_ARG, "top-k must be ≥ 0");
    if (!(p->top_p > 0)) return lmc_fail(LMC_ERR_ARG, "top-p must be > 0");
    if (!(p->min_p >= 0 && p->min_p <= 1)) return lmc_fail(LMC_ERR_ARG, "min-p must be in [0, 1]");
    if (!(p->repetition_penalty > 0)) return lmc_fail(LMC_ERR_ARG, "repetition penalty must be > 0");
    if (!(p->temperature == p->temperature)) return lmc_fail(LMC_ERR_ARG, "temperature is NaN");
    lmc_sampler *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "sampler");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    if (!s->work || !s->cands) { lmc_sampler_free(s); return lmc_fail(LMC_ERR_NOMEM, "sampler"); }
    lmc_sampler_reset(s);
    *out = s;
    return LMC_OK;
}

void lmc_sampler_free(lmc_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->cands);
    free(s->history);
    free(s);
}

void lmc_sampler_accept(lmc_sampler *s, int32_t token) {
    if (s->n_hist == s->cap_hist) {
        int cap = s->cap_hist ? s->cap_hist * 2 : 256;
        int32_t *h = realloc(s->history, (size_t)cap * sizeof *h);
        if (!h) return; /* the penalty then sees a shorter history; sampling stays valid */
        s->history = h;
        s->cap_hist = cap;
    }
    s->history[s->n_hist++] = token;
}

int32_t lmc_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* Margin on cumulative probabilities decided from a normaliser summed in another order than the
 * host path's: the two sums of ≤ 2²⁰ positive terms differ by < 1e-10 relative. */
#define SAMPLE_MARGIN 1e-9

/* Plain sampling (no top-k, top-p or min-p cut) from cands[0..n), the best n of the row, whose
 * whole sum is total (summed in another order than the host path's sorted one): the token is
 * decided when the draw falls inside their mass with SAMPLE_MARGIN · total to spare on either
 * side; else -1 and the generator is put back. */
static int32_t draw_prefix(lmc_sampler *s, int n, float mx, double total) {
    if (s->p.top_p < 1 || s->p.min_p > 0) return -1; /* a cut past the candidates: its mass is unknown */
    uint64_t saved[4];
    memcpy(saved, s->rng, sizeof saved);
    const double m = total * SAMPLE_MARGIN, r = next_unit(s->rng) * total;
    double acc = 0, prev = 0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)s->cands[i].logit - mx);
        if (r < acc) {
            if (r + m < acc && (i == 0 || r - m >= prev)) return s->cands[i].id;
            break;
        }
        prev = acc;
    }
    memcpy(s->rng, saved, sizeof saved);
    return -1;
}

/* The filters after the sorted candidates cands[0..n) (top-k already applied when k_cut), then
 * the draw: the host path's arithmetic. mode 0: exact (the host path itself, or the candidates
 * of a top-k); mode 1: total came from another summation order (decisions on it need
 * SAMPLE_MARGIN); mode 2: as 1, and cands is only a prefix of the host's list, so every
 * decision must fall inside it. -1 (the generator untouched) when undecided. */
static int32_t finish(lmc_sampler *s, int n, int k_cut, float mx, double total, int mode) {
    /* normaliser: the top-k set when top-k cut, else the whole vocabulary */
    double kept = 0;
    if (k_cut) for (int i = 0; i < n; i++) kept += exp((double)s->cands[i].logit - mx);
    else kept = total;
    int decided = mode < 2; /* n is the host's own count */
    if (s->p.top_p < 1) {
        double cum = 0, prev = 0;
        int cut = n, found = 0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)s->cands[i].logit - mx) / kept;
            if (cum >= s->p.top_p) { cut = i + 1; found = 1; break; }
            prev = cum;
        }
        if (mode > 0 && (!found || cum - SAMPLE_MARGIN < s->p.top_p || prev + SAMPLE_MARGIN >= s->p.top_p)) return -1;
        if (found) decided = 1;
        n = cut;
    }
    if (s->p.min_p > 0) {
        int cut = 1, brk = 0; /* keep p ≥ min_p · p_top, i.e. exp(l - l_top) ≥ min_p */
        for (int i = 1; i < n; i++) {
            double rel = exp((double)s->cands[i].logit - s->cands[0].logit);
            if (rel >= s->p.min_p) cut = i + 1; else { brk = 1; break; }
        }
        if (brk) decided = 1;
        n = cut;
    }
    if (!decided) return draw_prefix(s, n, mx, total);
    double z = 0;
    for (int i = 0; i < n; i++) z += exp((double)s->cands[i].logit - mx);
    double r = next_unit(s->rng) * z, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)s->cands[i].logit - mx);
        if (r < acc) return s->cands[i].id;
    }
    return s->cands[n - 1].id;
}

int32_t lmc_sampler_sample(lmc_sampler *s, const float *logits) {
    const int V = s->n_vocab;
    float *w = s->work;
    memcpy(w, logits, (size_t)V * sizeof *w);
    if (s->p.repetition_penalty != 1.0f) {
        int from = s->p.repetition_window > 0 && s->n_hist > s->p.repetition_window ? s->n_hist - s->p.repetition_window : 0;
        /* each distinct token penalised once, as transformers does (gather/scatter) */
        for (int i = from; i < s->n_hist; i++) {
            int32_t t = s->history[i];
            if (t < 0 || t >= V) continue;
            int seen = 0;
            for (int j = from; j < i && !seen; j++) seen = s->history[j] == t;
            if (seen) continue;
            w[t] = w[t] > 0 ? w[t] / s->p.repetition_penalty : w[t] * s->p.repetition_penalty;
        }
    }
    if (s->p.temperature <= 0) return lmc_argmax(w, V);

    /* temperature, then candidates sorted by logit (top-k bounds how many are needed) */
    const float inv_t = 1.0f / s->p.temperature;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) { w[i] *= inv_t; if (w[i] > mx) mx = w[i]; }
    double total = 0;
    for (int i = 0; i < V; i++) total += exp((double)w[i] - mx);
    /* Candidates are the tokens with probability ≥ thr. Start with a high
     * threshold and lower it until the candidates surely hold every token the
     * filters can keep: the top k; or tokens up to top-p mass; or all tokens
     * above min-p; with no filter at all, the whole vocabulary. */
    const int k = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : V;
    const int use_p = s->p.top_p < 1, use_min = s->p.min_p > 0;
    double thr = (k < V || use_p || use_min) ? 1e-4 : 0;
    int n;
    for (;;) {
        n = 0;
        double mass = 0;
        for (int i = 0; i < V; i++) {
            double pr = exp((double)w[i] - mx) / total;
            if (pr >= thr) { s->cands[n].logit = w[i]; s->cands[n].id = i; n++; mass += pr; }
        }
        int enough = thr == 0 || (k < V ? n >= k : use_p ? mass >= s->p.top_p : thr <= s->p.min_p / total);
        if (enough) break;
        thr = thr > 1e-30 ? thr * 1e-4 : 0;
    }
    qsort(s->cands, (size_t)n, sizeof *s->cands, cand_desc);
    if (n > k) n = k;
    return finish(s, n, k < V, mx, total, 0);
}

lmc_sample_plan lmc_sampler_plan(const lmc_sampler *s, int *k, float *scale) {
    const int V = s->n_vocab;
    *k = 0;
    *scale = 1.0f;
    if (s->p.repetition_penalty != 1.0f) return LMC_PLAN_FULL;
    if (s->p.temperature <= 0) return LMC_PLAN_ARGMAX;
    *scale = 1.0f / s->p.temperature; /* the host path's inv_t */
    const int kk = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : V;
    if (kk < V) {
        if (kk > LMC_SAMPLE_TOPK_MAX) return LMC_PLAN_FULL;
        *k = kk;
        return LMC_PLAN_TOPK;
    }
    /* no top-k: top-p / min-p cuts and plain draws are decided by the best few when they fall
     * among them (lmc_sampler_sample_topk says when not) */
    *k = V < LMC_SAMPLE_TOPK_MAX ? V : LMC_SAMPLE_TOPK_MAX;
    return LMC_PLAN_TOPK;
}

int32_t lmc_sampler_sample_topk(lmc_sampler *s, const int32_t *ids, const float *vals, int k, double sum) {
    const int V = s->n_vocab;
    const int kk = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : V;
    if (s->p.repetition_penalty != 1.0f || s->p.temperature <= 0 || k < 1 || (kk < V && k != kk)) return -1;
    int n = 0;
    while (n < k && ids[n] >= 0 && ids[n] < V) n++;
    /* a NaN or an infinity anywhere in the row (sum not finite): the host path decides */
    if (n == 0 || !isfinite(vals[0]) || !isfinite(sum)) return -1;
    for (int i = 0; i < n; i++) {
        s->cands[i].logit = vals[i];
        s->cands[i].id = ids[i];
    }
    /* with top-k the candidates are the host's list exactly; without, the normaliser is the
     * whole row's sum (summed in another order): decisions on it need a margin, and a list
     * shorter than the row must contain every decision */
    if (kk < V) return finish(s, n, 1, vals[0], sum, 0);
    return finish(s, n, 0, vals[0], sum, n < V ? 2 : 1);
}
