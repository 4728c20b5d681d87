/* spec.c — the speculative-decoding loop (draft, one batched verification,
 * acceptance, KV rollback) and the sampling helpers it shares with sources:
 * the sampler chain's distribution and the rejection-sampling decision.
 * The draft sources themselves live in spec_sources.c. The loop owns only its
 * per-call buffers; context and source are borrowed.
 */
#include "spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- random draws */

/* xoshiro256** seeded through splitmix64: uniform doubles for acceptance and residual draws. */
typedef struct spec_rng { uint64_t s[4]; } spec_rng;

static void rng_seed(spec_rng *r, uint64_t seed) {
    uint64_t x = seed ^ 0x5bec5bec5bec5becull;
    for (int i = 0; i < 4; i++) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static double rng_unit(spec_rng *r) {
    uint64_t *s = r->s, out = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl64(s[3], 45);
    return (double)(out >> 11) * (1.0 / 9007199254740992.0);
}

/* Index drawn from weights w[0 … n) (not necessarily normalised; total > 0) with u in [0, 1). */
static int32_t draw(const float *w, int n, double total, double u) {
    double r = u * total, acc = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (w[i] <= 0) continue;
        acc += w[i];
        last = i;
        if (r < acc) return i;
    }
    return last >= 0 ? last : 0;
}

/* ---------------------------------------------------------------- distributions */

typedef struct sort_key { const float *w; } sort_key;

static int by_logit_desc(const void *a, const void *b, void *ud) {
    const float *w = ((const sort_key *)ud)->w;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (w[x] != w[y]) return w[x] < w[y] ? 1 : -1;
    return x < y ? -1 : x > y;
}

/* Follows src/gen/sampler.c step for step, so the distribution is the one
 * lmc_sampler_sample draws from (test_spec checks the two against each other). */
void lmc_spec_probs(const lmc_sampler_params *sp, const int32_t *hist, int n_hist, const float *logits,
                    int n_vocab, float *probs, int32_t *scratch) {
    const int V = n_vocab;
    float *w = probs; /* scaled logits first, probabilities at the end */
    memcpy(w, logits, (size_t)V * sizeof *w);
    if (sp->repetition_penalty != 1.0f && n_hist > 0) {
        int from = sp->repetition_window > 0 && n_hist > sp->repetition_window ? n_hist - sp->repetition_window : 0;
        /* each distinct token once; scratch marks the ones done */
        for (int i = from; i < n_hist; i++)
            if (hist[i] >= 0 && hist[i] < V) scratch[hist[i]] = 0;
        for (int i = from; i < n_hist; i++) {
            int32_t t = hist[i];
            if (t < 0 || t >= V || scratch[t]) continue;
            scratch[t] = 1;
            w[t] = w[t] > 0 ? w[t] / sp->repetition_penalty : w[t] * sp->repetition_penalty;
        }
    }
    const float inv_t = 1.0f / sp->temperature;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) { w[i] *= inv_t; if (w[i] > mx) mx = w[i]; }
    double total = 0;
    for (int i = 0; i < V; i++) total += exp((double)w[i] - mx);
    const int k = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
    const int use_p = sp->top_p < 1, use_min = sp->min_p > 0;
    if (k == V && !use_p && !use_min) {
        for (int i = 0; i < V; i++) probs[i] = (float)(exp((double)w[i] - mx) / total);
        return;
    }
    /* candidates: every token a filter can keep (the sampler's threshold search) */
    double thr = 1e-4;
    int n;
    for (;;) {
        n = 0;
        double mass = 0;
        for (int i = 0; i < V; i++) {
            double pr = exp((double)w[i] - mx) / total;
            if (pr >= thr) { scratch[n++] = i; mass += pr; }
        }
        int enough = thr == 0 || (k < V ? n >= k : use_p ? mass >= sp->top_p : thr <= sp->min_p / total);
        if (enough) break;
        thr = thr > 1e-30 ? thr * 1e-4 : 0;
    }
    sort_key key = {w};
    qsort_r(scratch, (size_t)n, sizeof *scratch, by_logit_desc, &key);
    if (n > k) n = k;
    double kept = 0;
    if (k < V) for (int i = 0; i < n; i++) kept += exp((double)w[scratch[i]] - mx);
    else kept = total;
    if (use_p) {
        double cum = 0;
        int cut = n;
        for (int i = 0; i < n; i++) {
            cum += exp((double)w[scratch[i]] - mx) / kept;
            if (cum >= sp->top_p) { cut = i + 1; break; }
        }
        n = cut;
    }
    if (use_min) {
        int cut = 1;
        for (int i = 1; i < n; i++) {
            if (exp((double)w[scratch[i]] - w[scratch[0]]) >= sp->min_p) cut = i + 1;
            else break;
        }
        n = cut;
    }
    double z = 0;
    for (int i = 0; i < n; i++) z += exp((double)w[scratch[i]] - mx);
    /* the kept tokens are the first n in (logit desc, id asc) order: those ranked at or before the last one */
    const float wc = w[scratch[n - 1]];
    const int32_t idc = scratch[n - 1];
    for (int i = 0; i < V; i++)
        probs[i] = w[i] > wc || (w[i] == wc && i <= idc) ? (float)(exp((double)w[i] - mx) / z) : 0.0f;
}

int32_t lmc_spec_accept_token(const float *p, const float *q, int n_vocab, int32_t d, double u, double u2,
                              float *work) {
    const double pd = p[d], qd = q ? q[d] : 1.0;
    if (qd > 0 ? u * qd < pd : pd > 0) return d;
    /* rejected: draw from the residual max(0, p - q) */
    double total = 0;
    for (int i = 0; i < n_vocab; i++) {
        float qi = q ? q[i] : (i == d ? 1.0f : 0.0f), r = p[i] - qi;
        work[i] = r > 0 ? r : 0;
        total += work[i];
    }
    if (total <= 0) { /* p ≤ q everywhere and both sum to 1: p = q up to rounding, so p itself */
        for (int i = 0; i < n_vocab; i++) total += p[i];
        return draw(p, n_vocab, total, u2);
    }
    return draw(work, n_vocab, total, u2);
}

/* ---------------------------------------------------------------- the loop */

lmc_spec_params lmc_spec_default_params(void) {
    lmc_spec_params p = {.n_draft = 4};
    return p;
}

void lmc_draft_source_free(lmc_draft_source *ds) {
    if (ds && ds->i->free) ds->i->free(ds);
}

/* Per-call state of one lmc_spec_generate. */
typedef struct spec_run {
    lmc_context *ctx;
    const lmc_gen_params *gp;
    lmc_token_fn fn;
    void *ud;
    lmc_spec_stats *stats;
    lmc_sampler *smp;      /* greedy choices (with the repetition penalty over hist) */
    spec_rng rng;
    int greedy, V, D;
    int32_t *hist;         /* [n_prompt + n_predict] */
    int n_hist;
    float *p, *work;       /* [V] target distribution, residual */
    int32_t *scratch;      /* [V] */
    int done;
} spec_run;

static int is_stop(const lmc_gen_params *p, int32_t t) {
    for (int i = 0; i < p->n_stop; i++)
        if (p->stop_ids[i] == t) return 1;
    return 0;
}

/* Append an emitted token, report it, and decide whether generation ends. */
static void emit(spec_run *r, int32_t tok, const float *logits) {
    r->hist[r->n_hist++] = tok;
    if (r->greedy) lmc_sampler_accept(r->smp, tok);
    r->stats->gen.n_generated++;
    int stop = r->fn ? r->fn(tok, logits, r->V, r->ud) : 0;
    if (!r->gp->ignore_eos && is_stop(r->gp, tok)) { r->stats->gen.stopped_by_eos = 1; stop = 1; }
    if (stop || r->stats->gen.n_generated >= r->gp->n_predict) r->done = 1;
}

/* Wanted row `row` of the target's last decode on the host: when a draw or the callback reads it
 * (greedy choices reduce it on the backend). NULL with *st set when the copy failed. */
static const float *target_row(spec_run *r, lmc_context *ctx, int row, lmc_status *st) {
    if (r->greedy && (!r->fn || r->gp->fn_no_logits)) return NULL;
    const float *lg = lmc_context_logits(ctx, row);
    if (!lg) *st = LMC_ERR_IO;
    return lg;
}

/* The target's own choice from row `row` (logits: the row on the host when target_row gave it):
 * greedy through the context (lmc_context_sample: the same token as from the full row) or a
 * draw from its distribution. Negative: an error. */
static int32_t target_pick(spec_run *r, lmc_context *ctx, int row, const float *logits) {
    if (r->greedy) return lmc_context_sample(ctx, row, r->smp);
    lmc_spec_probs(&r->gp->sampler, r->hist, r->n_hist, logits, r->V, r->p, r->scratch);
    return draw(r->p, r->V, 1.0, rng_unit(&r->rng));
}

/* Prefill prompt[reuse … n_prompt) (the cached prefix is kept when the cache can be cut back to it). */
static lmc_status prefill(lmc_context *ctx, const int32_t *prompt, int n_prompt, const lmc_gen_params *gp,
                          lmc_gen_stats *gs) {
    int reuse = gp->n_reuse > 0 ? gp->n_reuse : 0;
    if (reuse >= n_prompt) reuse = n_prompt - 1;
    if (!lmc_kv_can_truncate(&ctx->kv, gp->seq, reuse)) reuse = 0;
    lmc_kv_truncate(&ctx->kv, gp->seq, reuse);
    gs->n_reused = reuse;
    const int n_run = n_prompt - reuse;
    int32_t *pos = malloc((size_t)n_run * sizeof *pos), *sq = malloc((size_t)n_run * sizeof *sq);
    lmc_status st = LMC_OK;
    if (!pos || !sq) st = lmc_fail(LMC_ERR_NOMEM, "prompt batch");
    for (int i = 0; st >= 0 && i < n_run; i++) {
        pos[i] = reuse + i;
        sq[i] = gp->seq;
    }
    if (st >= 0) {
        lmc_batch b = {.n_tokens = n_run, .token = prompt + reuse, .pos = pos, .seq = sq, .want_logits = NULL};
        st = lmc_context_decode(ctx, &b);
    }
    free(pos);
    free(sq);
    return st;
}

lmc_status lmc_spec_generate(lmc_context *ctx, lmc_draft_source *ds, const int32_t *prompt, int n_prompt,
                             const lmc_gen_params *gp, const lmc_spec_params *spp, lmc_token_fn fn, void *ud,
                             lmc_spec_stats *stats) {
    lmc_spec_stats st0 = {0};
    if (!stats) stats = &st0;
    *stats = st0;
    if (!ds || !ds->i || !ds->i->propose) return lmc_fail(LMC_ERR_ARG, "speculative decoding needs a draft source");
    if (n_prompt <= 0) return lmc_fail(LMC_ERR_ARG, "empty prompt");
    const lmc_spec_params spd = lmc_spec_default_params();
    const int N = spp ? spp->n_draft : spd.n_draft, seq = gp->seq;
    if (N < 1) return lmc_fail(LMC_ERR_ARG, "draft block size must be ≥ 1 (got %d)", N);
    if (N >= ctx->params.n_batch)
        return lmc_fail(LMC_ERR_ARG, "draft block size %d needs a context batch above it (n_batch %d)", N,
                        ctx->params.n_batch);
    if (seq < 0 || seq >= ctx->kv.n_seq) return lmc_fail(LMC_ERR_ARG, "sequence slot %d out of range", seq);
    if (n_prompt + gp->n_predict > ctx->kv.n_ctx)
        return lmc_fail(LMC_ERR_RANGE, "prompt (%d) + tokens to generate (%d) exceed the context size %d",
                        n_prompt, gp->n_predict, ctx->kv.n_ctx);
    const int needs_hidden = (ds->flags & LMC_DRAFT_NEEDS_HIDDEN) != 0;
    if (needs_hidden && (!ctx->params.want_hidden || ctx->params.no_logits))
        return lmc_fail(LMC_ERR_ARG, "the %s draft source needs the target's hidden states (context want_hidden)",
                        ds->i->name);
    spec_run r = {.ctx = ctx, .gp = gp, .fn = fn, .ud = ud, .stats = stats};
    r.V = ctx->model->cfg.vocab_size;
    r.D = ctx->model->cfg.hidden_size;
    r.greedy = gp->sampler.temperature <= 0;
    rng_seed(&r.rng, gp->sampler.seed);
    lmc_status st = lmc_sampler_init(&r.smp, &gp->sampler, r.V);
    if (st < 0) return st;
    const int V = r.V;
    r.hist = malloc((size_t)(n_prompt + gp->n_predict + 1) * sizeof *r.hist);
    r.p = malloc((size_t)V * sizeof *r.p);
    r.work = malloc((size_t)V * sizeof *r.work);
    r.scratch = malloc((size_t)V * sizeof *r.scratch);
    int32_t *bt = malloc((size_t)(N + 1) * sizeof *bt), *bp = malloc((size_t)(N + 1) * sizeof *bp);
    int32_t *bs = malloc((size_t)(N + 1) * sizeof *bs), *draft = malloc((size_t)N * sizeof *draft);
    uint8_t *bw = malloc((size_t)N + 1);
    float *q = r.greedy ? NULL : malloc((size_t)N * V * sizeof *q);
    float *hidden = needs_hidden ? malloc((size_t)r.D * sizeof *hidden) : NULL;
    if (!r.hist || !r.p || !r.work || !r.scratch || !bt || !bp || !bs || !draft || !bw || (!r.greedy && !q) ||
        (needs_hidden && !hidden))
        st = lmc_fail(LMC_ERR_NOMEM, "speculative decoding buffers");
    if (st >= 0) {
        memcpy(r.hist, prompt, (size_t)n_prompt * sizeof *prompt);
        r.n_hist = n_prompt;
        for (int i = 0; i < n_prompt; i++) lmc_sampler_accept(r.smp, prompt[i]);
        if (ds->i->reset) ds->i->reset(ds);
    }

    double t0 = lmc_now_s();
    if (st >= 0) st = prefill(ctx, prompt, n_prompt, gp, &stats->gen);
    stats->gen.n_prompt = n_prompt;
    double t1 = lmc_now_s();
    stats->gen.t_prompt_s = t1 - t0;
    if (st >= 0 && gp->n_predict > 0) {
        const float *lg = target_row(&r, ctx, 0, &st);
        if (needs_hidden) memcpy(hidden, lmc_context_hidden(ctx, 0), (size_t)r.D * sizeof *hidden);
        int32_t t = st >= 0 ? target_pick(&r, ctx, 0, lg) : st;
        if (t < 0) st = t;
        else emit(&r, t, lg);
    } else {
        r.done = 1;
    }
    while (st >= 0 && !r.done) {
        /* draft: at most N, and no more than the tokens still to generate after the target's own one */
        const int remaining = gp->n_predict - stats->gen.n_generated;
        const int n_max = N < remaining - 1 ? N : remaining - 1;
        lmc_draft_out out = {.tokens = draft, .q = q, .n = 0, .has_q = 0};
        double ta = lmc_now_s();
        if (n_max > 0) {
            lmc_draft_req req = {.hist = r.hist, .n_hist = r.n_hist, .n_max = n_max, .hidden = hidden,
                                 .target = ctx, .seq = seq, .sp = &gp->sampler};
            st = ds->i->propose(ds, &req, &out);
            if (st < 0) { lmc_fail_context(st, "draft source %s", ds->i->name); break; }
            if (out.n < 0 || out.n > n_max) {
                st = lmc_fail(LMC_ERR_RANGE, "%s draft source proposed %d tokens (at most %d)", ds->i->name, out.n,
                              n_max);
                break;
            }
            for (int i = 0; i < out.n && st >= 0; i++)
                if (out.tokens[i] < 0 || out.tokens[i] >= V)
                    st = lmc_fail(LMC_ERR_RANGE, "%s draft source proposed token %d (vocab %d)", ds->i->name,
                                  out.tokens[i], V);
            if (st < 0) break;
            if (r.greedy) out.has_q = 0;
        }
        double tb = lmc_now_s();
        stats->t_draft_s += tb - ta;
        /* verify: [last accepted, d1 … dk] at positions n_hist-1 …, logits for every row */
        const int k = out.n, base = r.n_hist - 1;
        bt[0] = r.hist[r.n_hist - 1];
        for (int i = 0; i < k; i++) bt[1 + i] = draft[i];
        for (int i = 0; i <= k; i++) { bp[i] = base + i; bs[i] = seq; bw[i] = 1; }
        lmc_batch b = {.n_tokens = k + 1, .token = bt, .pos = bp, .seq = bs, .want_logits = bw};
        st = lmc_context_decode(ctx, &b);
        if (st < 0) break;
        stats->n_rounds++;
        stats->n_drafted += k;
        /* accept left to right; the first rejection (or the row after the last draft) gives the target's token */
        int n_acc = 0, last = 0;
        for (int row = 0; row <= k && !r.done; row++) {
            const float *lg = target_row(&r, ctx, row, &st);
            if (st < 0) break;
            last = row;
            if (row == k) {
                int32_t t = target_pick(&r, ctx, row, lg);
                if (t < 0) st = t;
                else emit(&r, t, lg);
                break;
            }
            int32_t d = draft[row], t;
            if (r.greedy) {
                t = lmc_context_sample(ctx, row, r.smp);
                if (t < 0) { st = t; break; }
            } else {
                lmc_spec_probs(&gp->sampler, r.hist, r.n_hist, lg, V, r.p, r.scratch);
                double u = rng_unit(&r.rng), u2 = rng_unit(&r.rng);
                t = lmc_spec_accept_token(r.p, out.has_q ? q + (size_t)row * V : NULL, V, d, u, u2, r.work);
            }
            emit(&r, t, lg);
            if (t != d) break;
            n_acc++;
        }
        if (st < 0) break;
        stats->n_accepted += n_acc;
        if (needs_hidden) memcpy(hidden, lmc_context_hidden(ctx, last), (size_t)r.D * sizeof *hidden);
        /* roll back: keep the KV of every token but the newest (it leads the next batch) */
        if (!lmc_kv_can_truncate(&ctx->kv, seq, r.n_hist - 1)) {
            st = lmc_fail(LMC_ERR_RANGE, "KV cache cannot drop %d rejected tokens", ctx->kv.len[seq] - (r.n_hist - 1));
            break;
        }
        lmc_kv_truncate(&ctx->kv, seq, r.n_hist - 1);
        double tc = lmc_now_s();
        stats->t_verify_s += tc - tb;
        if (n_max > 0 && ds->i->accept) ds->i->accept(ds, n_acc, r.hist, r.n_hist);
        stats->t_draft_s += lmc_now_s() - tc;
    }
    stats->gen.t_gen_s = lmc_now_s() - t1;
    lmc_sampler_free(r.smp);
    free(r.hist);
    free(r.p);
    free(r.work);
    free(r.scratch);
    free(bt);
    free(bp);
    free(bs);
    free(bw);
    free(draft);
    free(q);
    free(hidden);
    return st;
}
