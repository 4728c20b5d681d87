/* sched.c — continuous batching over one lmc_context (see sched.h).
 *
 * Ownership: slot state, samplers, detokenizers and the batch scratch belong
 * to the scheduler thread alone; the queue and the stats are shared under
 * s->mu; each request's output channel is guarded by its own mutex.
 */
#include "sched.h"

#include "gen/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen/context.h"
#include "stop.h"
#include "toktext.h"

typedef struct slot {
    lmc_srv_req *req;     /* running request, or NULL (idle: cached tokens kept for reuse) */
    int32_t *tokens;      /* [n_ctx] tokens whose K/V are cached; n_tokens == kv.len[slot] */
    int n_tokens;
    int32_t next_tok;     /* sampled, not yet fed */
    int has_next;
    uint64_t last_used;
    int spec_k;           /* drafts fed after next_tok in this step's batch */
    int32_t spec_d[64];   /* [spec_k] the drafts */
    lmc_draft_source *ds; /* this slot's draft source (owned when ds_own) or NULL */
    int ds_own;
    float *hidden;        /* [hidden_size] the hidden state of the row that chose next_tok (MTP), or NULL */
} slot;

struct lmc_sched {
    lmc_sched_params p;
    lmc_context *ctx;
    slot *slots;          /* [n_seq] */
    int n_vocab;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopping;
    lmc_srv_req **queue;  /* ring [max_queue] */
    int q_head, q_len;
    lmc_sched_stats st;   /* under mu */
    uint64_t clock;
    /* step scratch, sized once */
    int32_t *b_tok, *b_pos, *b_seq;   /* [cap_batch] */
    uint8_t *b_want;                  /* [cap_batch] */
    int *row_slot;                    /* [n_seq] slot of each wanted row */
    int cap_batch;
    float *work;                      /* [n_vocab] adjusted logits */
    lmc_toktext *tt;                  /* token texts for constrained decoding, built on first use */
    lmc_draft_source *shared_ds;      /* the n-gram or MTP source all slots share (stateless between calls) */
    double win_t[16];                 /* recent steps: time, tokens */
    int win_n[16], win_i;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int lmc_sched_n_ctx(const lmc_sched *s) { return s->ctx->kv.n_ctx; }

static int is_eos(const lmc_sched *s, int32_t t) {
    const lmc_config *c = &s->p.model->cfg;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] == t) return 1;
    return s->p.tok && t == lmc_tokenizer_eos_id(s->p.tok);
}

/* Append generated text to the request's full text. */
static int text_append(lmc_srv_req *r, const char *p, size_t n) {
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = (r->text_len + n + 1) * 2 + 64;
        char *t = realloc(r->text, cap);
        if (!t) return -1;
        r->text = t;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, p, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
    return 0;
}

/* The splitter's output: reasoning is committed at once (stop strings and constraints apply to
 * the content only); content joins the text that stop strings and tool parsing read. */
static void emit_part(void *ctx, int reasoning, const char *p, size_t n) {
    lmc_srv_req *r = ctx;
    if (reasoning) {
        pthread_mutex_lock(&r->mu);
        lmc_srv_req_commit_reasoning(r, p, n);
        pthread_mutex_unlock(&r->mu);
    } else {
        text_append(r, p, n);
    }
}

/* Detokenized bytes through the reasoning splitter (final: the output ended). */
static int split_text(lmc_srv_req *r, const char *p, size_t n, int final) {
    return lmc_reason_feed(&r->rs, p, n, final, emit_part, r) < 0 ? lmc_fail(LMC_ERR_NOMEM, "reasoning text") : 0;
}

/* Commit what is safe: up to a found stop string (returns 1: stop hit), else all but the
 * longest suffix that could still grow into a stop string (all of it when final). */
static int commit_text(lmc_srv_req *r, int final) {
    int which = -1;
    size_t at = lmc_stop_find(r->text, r->text_len, r->committed, r->stop, r->n_stop, &which);
    size_t upto;
    if (at != (size_t)-1) upto = at;
    else upto = final ? r->text_len : r->text_len - lmc_stop_holdback(r->text, r->text_len, r->stop, r->n_stop);
    pthread_mutex_lock(&r->mu);
    if (upto > r->committed) lmc_srv_req_commit(r, r->text + r->committed, upto - r->committed);
    if (at != (size_t)-1) r->stop_index = which;
    pthread_mutex_unlock(&r->mu);
    if (upto > r->committed) r->committed = upto;
    return at != (size_t)-1;
}

static void stats_finish(lmc_sched *s, lmc_finish f) {
    pthread_mutex_lock(&s->mu);
    if (f == LMC_FINISH_CANCELLED) s->st.cancelled++;
    else if (f == LMC_FINISH_ERROR) s->st.failed++;
    else s->st.finished++;
    pthread_mutex_unlock(&s->mu);
}

/* End the request in slot i and free the slot (its cached tokens stay for reuse). */
static void retire(lmc_sched *s, int i, lmc_finish f) {
    slot *sl = &s->slots[i];
    lmc_srv_req *r = sl->req;
    if ((f == LMC_FINISH_STOP || f == LMC_FINISH_LENGTH) && r->detok) {
        if (r->stop_index < 0) {
            char *piece = NULL;
            size_t n = 0;
            if (lmc_detok_flush(r->detok, &piece, &n) == 0) split_text(r, piece, n, 1);
            free(piece);
            if (commit_text(r, 1)) f = LMC_FINISH_STOP;
        }
    }
    pthread_mutex_lock(&r->mu);
    lmc_srv_req_finish_locked(r, f);
    pthread_mutex_unlock(&r->mu);
    stats_finish(s, f);
    lmc_srv_req_unref(r);
    sl->req = NULL;
    sl->has_next = 0;
    sl->last_used = ++s->clock;
}

static void fail_slot(lmc_sched *s, int i, const char *msg) {
    lmc_srv_req *r = s->slots[i].req;
    pthread_mutex_lock(&r->mu);
    snprintf(r->err, sizeof r->err, "%s", msg);
    pthread_mutex_unlock(&r->mu);
    retire(s, i, LMC_FINISH_ERROR);
    lmc_kv_clear(&s->ctx->kv, i);
    s->slots[i].n_tokens = 0;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Token v's text for the JSON automaton of r: alone before anything was fed, in context after. */
static inline const char *tok_text(const lmc_sched *s, const lmc_srv_req *r, int v, int *n) {
    return lmc_toktext_get(s->tt, v, r->json_fed == 0, n);
}

/* Put r into a free slot. The slot sharing the longest prefix wins when r mostly extends what it
 * holds or covers most of r's prompt (a conversation's next turn, a repeated prompt); otherwise an empty slot, else the least recently used one,
 * so a request that shares only the template's header does not evict a cached conversation. */
static lmc_status admit(lmc_sched *s, lmc_srv_req *r) {
    int best = -1, best_lcp = -1, spare = -1;
    for (int i = 0; i < s->p.n_seq; i++) {
        slot *sl = &s->slots[i];
        if (sl->req) continue;
        int lcp = common_prefix(sl->tokens, sl->n_tokens, r->prompt, r->n_prompt);
        if (lcp > r->n_prompt - 1) lcp = r->n_prompt - 1; /* the last prompt token is always run for its logits */
        if (lcp > best_lcp || (lcp == best_lcp && sl->last_used < s->slots[best].last_used)) {
            best = i;
            best_lcp = lcp;
        }
        if (spare < 0 || (s->slots[spare].n_tokens > 0 &&
                          (sl->n_tokens == 0 || sl->last_used < s->slots[spare].last_used)))
            spare = i;
    }
    if (best >= 0 && 2 * best_lcp < s->slots[best].n_tokens && 2 * best_lcp < r->n_prompt && spare >= 0) {
        best = spare;
        best_lcp = common_prefix(s->slots[best].tokens, s->slots[best].n_tokens, r->prompt, r->n_prompt);
        if (best_lcp > r->n_prompt - 1) best_lcp = r->n_prompt - 1;
    }
    LMC_ASSERT(best >= 0);
    if (r->pooling != LMC_POOL_NONE) {
        if (spare >= 0) best = spare;
        best_lcp = 0; /* every position's hidden state is needed */
    }
    slot *sl = &s->slots[best];
    lmc_status st = LMC_OK;
    if (r->pooling != LMC_POOL_NONE) {
        r->n_embd = s->p.model->cfg.hidden_size;
        r->embedding = calloc((size_t)r->n_embd, sizeof *r->embedding);
        if (!r->embedding) return lmc_fail(LMC_ERR_NOMEM, "embedding");
        lmc_kv_truncate(&s->ctx->kv, best, 0);
        sl->n_tokens = 0;
        sl->req = r;
        sl->has_next = 0;
        pthread_mutex_lock(&s->mu);
        s->st.prompt_tokens += (uint64_t)r->n_prompt;
        pthread_mutex_unlock(&s->mu);
        return LMC_OK;
    }
    st = lmc_sampler_init(&r->sampler, &r->sp, s->n_vocab);
    /* harmony markers are special tokens: that output is detokenized with them, and the splitter removes them */
    if (st >= 0 && s->p.tok) st = lmc_detok_init(&r->detok, s->p.tok, r->reason_fmt != LMC_REASON_HARMONY);
    if (st >= 0 && (r->presence_penalty != 0 || r->frequency_penalty != 0)) {
        r->counts = calloc((size_t)s->n_vocab, sizeof *r->counts);
        if (!r->counts) st = lmc_fail(LMC_ERR_NOMEM, "penalty counts");
    }
    if (st >= 0 && r->json_mode) {
        st = s->tt ? LMC_OK : s->p.tok ? lmc_toktext_build(s->p.tok, s->n_vocab, &s->tt)
                                       : lmc_fail(LMC_ERR_UNSUPPORTED, "constrained decoding needs a tokenizer");
        lmc_jfsm_init(&r->js, 1);
        if (r->schema) lmc_jsstate_init(&r->jss, r->schema);
    }
    if (st < 0) return st;
    for (int k = 0; k < r->n_prompt; k++) lmc_sampler_accept(r->sampler, r->prompt[k]);
    lmc_kv_truncate(&s->ctx->kv, best, best_lcp);
    sl->n_tokens = best_lcp;
    sl->req = r;
    sl->has_next = 0;
    r->n_cached = best_lcp;
    pthread_mutex_lock(&s->mu);
    s->st.prompt_tokens += (uint64_t)r->n_prompt;
    s->st.prompt_tokens_reused += (uint64_t)best_lcp;
    pthread_mutex_unlock(&s->mu);
    return LMC_OK;
}

/* JSON mode: -inf for every token that would break the JSON prefix; end tokens only once the
 * value is complete (and then nothing else). Returns 0 when no token is allowed. */
static int mask_json(lmc_sched *s, lmc_srv_req *r) {
    int done = r->schema ? lmc_jsstate_done(&r->jss) : lmc_jfsm_done(&r->js), any = 0;
    lmc_jsstate ts;
    for (int v = 0; v < s->n_vocab; v++) {
        int ok, n;
        const char *txt;
        if (is_eos(s, v)) ok = done;
        else if (!(txt = tok_text(s, r, v, &n)) || n <= 0) ok = 0;
        else if (r->schema) {
            lmc_jsstate_copy(&ts, &r->jss);
            ok = lmc_jsstate_feed(&ts, txt, (size_t)n) == 0;
        } else if (done) ok = 0;
        else {
            lmc_jfsm t = r->js;
            ok = lmc_jfsm_feed(&t, txt, (size_t)n) == 0;
        }
        if (!ok) s->work[v] = -INFINITY;
        any |= ok;
    }
    return any;
}

/* Wanted row `row` of the last decode → token for request r, with OpenAI's penalties, logit_bias
 * and JSON mode (these edit the full row); a plain request samples through the context (on the
 * backend when the logits stayed there: the same token). Negative: the row could not be read. */
static int32_t sample(lmc_sched *s, lmc_srv_req *r, int row) {
    int32_t t;
    int constrain = r->json_mode && lmc_reason_in_content(&r->rs); /* reasoning is never constrained */
    if (!r->counts && !r->n_bias && !constrain) {
        t = lmc_context_sample(s->ctx, row, r->sampler);
        if (t < 0) return t;
        lmc_sampler_accept(r->sampler, t);
        return t;
    }
    const float *logits = lmc_context_logits(s->ctx, row);
    if (!logits) return LMC_ERR_IO;
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *s->work);
    if (r->counts)
        for (int v = 0; v < s->n_vocab; v++)
            if (r->counts[v])
                s->work[v] -= r->presence_penalty + r->frequency_penalty * (float)r->counts[v];
    for (int k = 0; k < r->n_bias; k++)
        if (r->bias_id[k] >= 0 && r->bias_id[k] < s->n_vocab) s->work[r->bias_id[k]] += r->bias_val[k];
    if (constrain && !mask_json(s, r)) {
        const lmc_config *c = &s->p.model->cfg;
        return c->n_eos > 0 ? c->eos_token_ids[0] : lmc_tokenizer_eos_id(s->p.tok);
    }
    t = lmc_sampler_sample(r->sampler, s->work);
    int n;
    const char *txt;
    if (constrain && t >= 0 && t < s->n_vocab && (txt = tok_text(s, r, t, &n)) && n > 0) {
        if (r->schema) lmc_jsstate_feed(&r->jss, txt, (size_t)n);
        else lmc_jfsm_feed(&r->js, txt, (size_t)n);
        r->json_fed++;
    }
    lmc_sampler_accept(r->sampler, t);
    if (r->counts && t >= 0 && t < s->n_vocab) r->counts[t]++;
    return t;
}

/* Log-softmax of the raw logits at t and the top alternatives, appended to r->lps. */
static void record_logprob(lmc_sched *s, lmc_srv_req *r, const float *l, int32_t t) {
    int V = s->n_vocab;
    float mx = l[0];
    for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)l[v] - mx);
    float lse = mx + (float)log(sum);
    lmc_srv_logprob e = {.id = t, .lp = l[t] - lse};
    int k = r->top_logprobs;
    for (int v = 0; v < V && k > 0; v++) { /* insertion into a short sorted list */
        if (e.n_top == k && l[v] <= l[e.top_id[k - 1]]) continue;
        int j = e.n_top < k ? e.n_top++ : k - 1;
        while (j > 0 && l[e.top_id[j - 1]] < l[v]) { e.top_id[j] = e.top_id[j - 1]; j--; }
        e.top_id[j] = v;
    }
    for (int j = 0; j < e.n_top; j++) e.top_lp[j] = l[e.top_id[j]] - lse;
    pthread_mutex_lock(&r->mu);
    if (r->n_lps == r->cap_lps) {
        int cap = r->cap_lps ? r->cap_lps * 2 : 64;
        lmc_srv_logprob *n = realloc(r->lps, (size_t)cap * sizeof *n);
        if (n) { r->lps = n; r->cap_lps = cap; }
    }
    if (r->n_lps < r->cap_lps) r->lps[r->n_lps++] = e;
    pthread_mutex_unlock(&r->mu);
}

/* A token was sampled for slot i: emit its text and decide whether the request ends. */
/* Token t of slot i, sampled from wanted row `row` of the last decode (read for logprobs). */
static void on_token(lmc_sched *s, int i, int32_t t, int row, double now) {
    slot *sl = &s->slots[i];
    lmc_srv_req *r = sl->req;
    r->n_gen++;
    if (r->n_gen == 1) r->t_first_token = now;
    if (!r->ignore_eos && is_eos(s, t)) { retire(s, i, LMC_FINISH_STOP); return; }
    const float *logits = r->logprobs ? lmc_context_logits(s->ctx, row) : NULL;
    if (logits) record_logprob(s, r, logits, t);
    if (r->detok) {
        char *piece = NULL;
        size_t n = 0;
        if (lmc_detok_push(r->detok, t, &piece, &n) < 0) { /* text it cannot stream (a decoder rewriting sent text) */
            free(piece);
            fail_slot(s, i, lmc_last_error());
            return;
        }
        int was_content = lmc_reason_in_content(&r->rs);
        size_t before = r->text_len;
        lmc_status st = split_text(r, piece, n, 0);
        free(piece);
        if (st < 0) { fail_slot(s, i, lmc_last_error()); return; }
        if (!was_content || !lmc_reason_in_content(&r->rs)) {
            pthread_mutex_lock(&r->mu);
            r->n_reasoning++;
            pthread_mutex_unlock(&r->mu);
        }
        if (r->json_mode && !was_content) {
            /* sampled unconstrained in the reasoning: later tokens are not the output's first, and content
             * bytes this token carried past the reasoning's end are read into the JSON state now */
            r->json_fed++;
            if (r->text_len > before) {
                if (r->schema) lmc_jsstate_feed(&r->jss, r->text + before, r->text_len - before);
                else lmc_jfsm_feed(&r->js, r->text + before, r->text_len - before);
            }
        }
        if (commit_text(r, 0)) { retire(s, i, LMC_FINISH_STOP); return; }
    }
    if (r->n_gen >= r->max_tokens || sl->n_tokens >= s->ctx->kv.n_ctx) { retire(s, i, LMC_FINISH_LENGTH); return; }
    sl->next_tok = t;
    sl->has_next = 1;
}

/* An embedding request's wanted row: add (mean) or take (last) its hidden state; when the
 * whole input has been read, normalize and finish. */
static void embed_row(lmc_sched *s, int i, int row) {
    slot *sl = &s->slots[i];
    lmc_srv_req *r = sl->req;
    const float *h = lmc_context_hidden(s->ctx, row);
    if (r->pooling == LMC_POOL_MEAN)
        for (int d = 0; d < r->n_embd; d++) r->embedding[d] += h[d];
    else
        memcpy(r->embedding, h, (size_t)r->n_embd * sizeof *h);
    if (++r->n_gen < (r->pooling == LMC_POOL_MEAN ? r->n_prompt : 1)) return;
    double norm = 0;
    for (int d = 0; d < r->n_embd; d++) {
        if (r->pooling == LMC_POOL_MEAN) r->embedding[d] /= (float)r->n_prompt;
        norm += (double)r->embedding[d] * r->embedding[d];
    }
    float inv = norm > 0 ? (float)(1.0 / sqrt(norm)) : 0;
    for (int d = 0; d < r->n_embd; d++) r->embedding[d] *= inv;
    r->n_gen = 0; /* an embedding generates nothing */
    retire(s, i, LMC_FINISH_STOP);
}

/* Admit from the queue and drop cancelled requests; caller holds s->mu. */
static void admit_waiting_locked(lmc_sched *s) {
    int free_slots = 0;
    for (int i = 0; i < s->p.n_seq; i++) free_slots += s->slots[i].req == NULL;
    while (s->q_len > 0) {
        lmc_srv_req *r = s->queue[s->q_head];
        if (!atomic_load(&r->cancelled) && free_slots == 0) break;
        s->q_head = (s->q_head + 1) % s->p.max_queue;
        s->q_len--;
        if (atomic_load(&r->cancelled)) {
            pthread_mutex_lock(&r->mu);
            lmc_srv_req_finish_locked(r, LMC_FINISH_CANCELLED);
            pthread_mutex_unlock(&r->mu);
            s->st.cancelled++;
            lmc_srv_req_unref(r);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        lmc_status st = admit(s, r);
        pthread_mutex_lock(&s->mu);
        if (st < 0) {
            pthread_mutex_lock(&r->mu);
            snprintf(r->err, sizeof r->err, "%s", lmc_last_error());
            lmc_srv_req_finish_locked(r, LMC_FINISH_ERROR);
            pthread_mutex_unlock(&r->mu);
            s->st.failed++;
            lmc_srv_req_unref(r);
            continue;
        }
        free_slots--;
    }
}

/* Run the batch in the step scratch (n tokens, n_rows wanted rows) and consume its rows:
 * sample for generating requests, pool for embeddings. hidden_only: every wanted row is an
 * embedding's, so the LM head is skipped (the context's no_logits, set for this decode only).
 * Returns the tokens generated, or -1 when the decode failed (its requests are failed). */
static int run_batch(lmc_sched *s, int n, int n_rows, int hidden_only) {
    lmc_batch b = {.n_tokens = n, .token = s->b_tok, .pos = s->b_pos, .seq = s->b_seq, .want_logits = s->b_want};
    s->ctx->params.no_logits = hidden_only; /* the context reads it per decode; want_hidden is always on */
    lmc_status st = lmc_context_decode(s->ctx, &b);
    s->ctx->params.no_logits = 0;
    if (st < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "decode failed: %s", lmc_last_error());
        for (int i = 0; i < s->p.n_seq; i++) s->slots[i].spec_k = 0;
        for (int k = 0; k < n; k++) {
            int i = s->b_seq[k];
            if (s->slots[i].req) fail_slot(s, i, msg);
        }
        return -1;
    }
    /* The batch's tokens are cached now. */
    for (int k = 0; k < n; k++) {
        slot *sl = &s->slots[s->b_seq[k]];
        sl->tokens[sl->n_tokens++] = s->b_tok[k];
        if (s->b_want[k] && sl->has_next) sl->has_next = 0;
    }
    /* counted before any row is delivered: a client that has its reply sees its rows in /metrics */
    pthread_mutex_lock(&s->mu);
    if (hidden_only) s->st.hidden_only_rows += (uint64_t)n_rows;
    else s->st.lm_head_rows += (uint64_t)n_rows;
    pthread_mutex_unlock(&s->mu);
    double now = now_s();
    int n_gen = 0, n_drafted = 0, n_acc = 0;
    for (int row = 0; row < n_rows; row++) {
        int i = s->row_slot[row];
        if (!s->slots[i].req) continue;
        if (s->slots[i].req->pooling != LMC_POOL_NONE) { embed_row(s, i, row); continue; }
        LMC_ASSERT(!hidden_only);
        slot *sl = &s->slots[i];
        if (sl->spec_k > 0) {
            /* rows row … row+k: sample each in order (penalties, bias, JSON state as without drafts) and
             * keep going while the sample equals the next draft — rejection sampling for one-hot drafts */
            const int k = sl->spec_k, base = sl->n_tokens - (k + 1);
            sl->spec_k = 0;
            int failed = 0;
            for (int j = 0; j <= k; j++) {
                sl->n_tokens = base + j + 1; /* next_tok and the drafts accepted so far */
                int32_t t = sample(s, sl->req, row + j);
                if (t < 0) { fail_slot(s, i, "reading the logits failed"); failed = 1; break; }
                n_gen++;
                on_token(s, i, t, row + j, now);
                if (j < k && t == sl->spec_d[j]) n_acc++;
                if (!sl->req || j == k || t != sl->spec_d[j]) break;
            }
            if (failed) { row += k; continue; }
            lmc_kv_truncate(&s->ctx->kv, i, sl->n_tokens); /* drop the rejected drafts' K/V */
            if (sl->hidden) memcpy(sl->hidden, lmc_context_hidden(s->ctx, row + (sl->n_tokens - base - 1)),
                                   (size_t)s->p.model->cfg.hidden_size * sizeof(float));
            n_drafted += k;
            row += k;
            continue;
        }
        if (sl->hidden) memcpy(sl->hidden, lmc_context_hidden(s->ctx, row), (size_t)s->p.model->cfg.hidden_size * sizeof(float));
        int32_t t = sample(s, s->slots[i].req, row);
        if (t < 0) { fail_slot(s, i, "reading the logits failed"); continue; }
        n_gen++;
        on_token(s, i, t, row, now);
    }
    pthread_mutex_lock(&s->mu);
    s->st.spec_drafted += (uint64_t)n_drafted;
    s->st.spec_accepted += (uint64_t)n_acc;
    pthread_mutex_unlock(&s->mu);
    return n_gen;
}

/* One step: a batch of the generating sequences (decode tokens and prompt chunks, logits
 * wanted), then, within the same token budget, a batch of embedding inputs that needs only
 * hidden states (no LM head). Returns 0 when idle. */
static int step(lmc_sched *s) {
    double t0 = now_s();
    for (int i = 0; i < s->p.n_seq; i++)
        if (s->slots[i].req && atomic_load(&s->slots[i].req->cancelled)) retire(s, i, LMC_FINISH_CANCELLED);
    int budget = s->cap_batch, ran = 0, n_gen = 0;
    for (int embed = 0; embed < 2 && budget > 0; embed++) {
        int n = 0, n_rows = 0;
        /* Decode: one token per sequence that is generating. */
        for (int i = 0; !embed && i < s->p.n_seq && n < budget; i++) {
            slot *sl = &s->slots[i];
            if (!sl->req || !sl->has_next) continue;
            s->b_tok[n] = sl->next_tok;
            s->b_pos[n] = sl->n_tokens;
            s->b_seq[n] = i;
            s->b_want[n] = 1;
            s->row_slot[n_rows++] = i;
            n++;
            /* speculation: n-gram drafts after next_tok, verified in this batch (all rows wanted) */
            sl->spec_k = 0;
            int k_max = s->p.spec_n_draft < 64 ? s->p.spec_n_draft : 64;
            if (k_max > sl->req->max_tokens - sl->req->n_gen - 1) k_max = sl->req->max_tokens - sl->req->n_gen - 1;
            if (k_max > s->ctx->kv.n_ctx - sl->n_tokens - 1) k_max = s->ctx->kv.n_ctx - sl->n_tokens - 1;
            if (k_max > budget - n) k_max = budget - n;
            if (sl->ds && k_max > 0) {
                /* deterministic drafts (greedy draft sources): accepting while the sample equals the draft
                 * then keeps the request's own sampling distribution */
                lmc_sampler_params greedy = lmc_sampler_default_params();
                sl->tokens[sl->n_tokens] = sl->next_tok; /* the history ends with next_tok (n_tokens < n_ctx here) */
                lmc_draft_req dq = {.hist = sl->tokens, .n_hist = sl->n_tokens + 1, .n_max = k_max,
                                    .hidden = sl->hidden, .target = s->ctx, .seq = i, .sp = &greedy};
                lmc_draft_out dout = {.tokens = sl->spec_d};
                if (sl->ds->i->propose(sl->ds, &dq, &dout) == LMC_OK && dout.n <= k_max) sl->spec_k = dout.n;
                for (int j = 0; j < sl->spec_k; j++)
                    if (sl->spec_d[j] < 0 || sl->spec_d[j] >= s->n_vocab) sl->spec_k = 0;
                for (int j = 0; j < sl->spec_k; j++) {
                    s->b_tok[n] = sl->spec_d[j];
                    s->b_pos[n] = sl->n_tokens + 1 + j;
                    s->b_seq[n] = i;
                    s->b_want[n] = 1;
                    s->row_slot[n_rows++] = i;
                    n++;
                }
            }
        }
        /* Prefill: chunks of the prompts still being read, in slot order, within the budget. */
        for (int i = 0; i < s->p.n_seq && n < budget; i++) {
            slot *sl = &s->slots[i];
            lmc_srv_req *r = sl->req;
            if (!r || sl->has_next || sl->n_tokens >= r->n_prompt || (r->pooling != LMC_POOL_NONE) != embed) continue;
            int k = r->n_prompt - sl->n_tokens;
            if (k > budget - n) k = budget - n;
            for (int j = 0; j < k; j++) {
                s->b_tok[n] = r->prompt[sl->n_tokens + j];
                s->b_pos[n] = sl->n_tokens + j;
                s->b_seq[n] = i;
                s->b_want[n] = r->pooling == LMC_POOL_MEAN;
                if (s->b_want[n]) s->row_slot[n_rows++] = i;
                n++;
            }
            if (sl->n_tokens + k == r->n_prompt && !s->b_want[n - 1]) {
                s->b_want[n - 1] = 1;
                s->row_slot[n_rows++] = i;
            }
        }
        if (n == 0) continue;
        ran = 1;
        budget -= n;
        int g = run_batch(s, n, n_rows, embed);
        if (g < 0) return 1;
        n_gen += g;
    }
    if (!ran) return 0;
    double t1 = now_s();
    pthread_mutex_lock(&s->mu);
    s->st.steps++;
    s->st.generated_tokens += (uint64_t)n_gen;
    s->st.busy_s += t1 - t0;
    s->win_t[s->win_i] = t1 - t0;
    s->win_n[s->win_i] = n_gen;
    s->win_i = (s->win_i + 1) % 16;
    double wt = 0;
    int wn = 0;
    for (int k = 0; k < 16; k++) { wt += s->win_t[k]; wn += s->win_n[k]; }
    s->st.recent_tok_s = wt > 0 ? wn / wt : 0;
    pthread_mutex_unlock(&s->mu);
    return 1;
}

static int n_running(const lmc_sched *s) {
    int k = 0;
    for (int i = 0; i < s->p.n_seq; i++) k += s->slots[i].req != NULL;
    return k;
}

static void update_gauges_locked(lmc_sched *s) {
    int64_t active = 0, cached = 0;
    for (int i = 0; i < s->p.n_seq; i++) {
        cached += s->slots[i].n_tokens;
        if (s->slots[i].req) active += s->slots[i].n_tokens;
    }
    s->st.kv_tokens_active = active;
    s->st.kv_tokens_cached = cached;
    s->st.running = n_running(s);
    s->st.queue_depth = s->q_len;
}

static void *run(void *arg) {
    lmc_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        admit_waiting_locked(s);
        update_gauges_locked(s);
        if (n_running(s) == 0) {
            if (s->q_len == 0) pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        step(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

lmc_status lmc_sched_start(lmc_sched **out, const lmc_sched_params *pp) {
    lmc_sched *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "scheduler");
    s->p = *pp;
    if (s->p.n_seq <= 0) s->p.n_seq = 1;
    if (s->p.n_batch <= 0) s->p.n_batch = 256;
    if (s->p.n_batch < s->p.n_seq) s->p.n_batch = s->p.n_seq;
    if (s->p.max_queue <= 0) s->p.max_queue = 64;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = s->p.n_ctx;
    cp.n_seq = s->p.n_seq;
    cp.n_batch = s->p.n_batch;
    cp.want_hidden = 1; /* embeddings pool the final hidden states */
    lmc_status st = s->p.tp && s->p.tp->n_ranks > 1 ? lmc_context_init_tp(&s->ctx, s->p.model, &cp, s->p.tp)
                                                    : lmc_context_init(&s->ctx, s->p.model, &cp);
    if (st < 0) { lmc_sched_free(s); return st; }
    s->n_vocab = s->p.model->cfg.vocab_size;
    s->cap_batch = s->p.n_batch;
    int n_ctx = s->ctx->kv.n_ctx;
    s->slots = calloc((size_t)s->p.n_seq, sizeof *s->slots);
    s->queue = calloc((size_t)s->p.max_queue, sizeof *s->queue);
    s->b_tok = malloc((size_t)s->cap_batch * sizeof *s->b_tok);
    s->b_pos = malloc((size_t)s->cap_batch * sizeof *s->b_pos);
    s->b_seq = malloc((size_t)s->cap_batch * sizeof *s->b_seq);
    s->b_want = malloc((size_t)s->cap_batch);
    s->row_slot = malloc((size_t)s->cap_batch * sizeof *s->row_slot);
    s->work = malloc((size_t)s->n_vocab * sizeof *s->work);
    int ok = s->slots && s->queue && s->b_tok && s->b_pos && s->b_seq && s->b_want && s->row_slot && s->work;
    for (int i = 0; ok && i < s->p.n_seq; i++) ok = (s->slots[i].tokens = malloc((size_t)n_ctx * sizeof(int32_t))) != NULL;
    if (!ok) { lmc_sched_free(s); return lmc_fail(LMC_ERR_NOMEM, "scheduler buffers"); }
    if (s->p.spec_n_draft > 0) {
        if (s->p.spec_n_draft >= s->p.n_batch) {
            lmc_sched_free(s);
            return lmc_fail(LMC_ERR_ARG, "speculative drafts per step (%d) must be below the batch (%d)",
                            s->p.spec_n_draft, s->p.n_batch);
        }
        if (s->p.spec_mtp_path) st = lmc_draft_mtp_init(&s->shared_ds, s->p.spec_mtp_path, s->p.model);
        else if (!s->p.spec_draft_model)
            st = lmc_draft_ngram_init(&s->shared_ds, s->p.spec_ngram_min > 0 ? s->p.spec_ngram_min : 1,
                                      s->p.spec_ngram_max > 0 ? s->p.spec_ngram_max : 3);
        for (int i = 0; st >= 0 && i < s->p.n_seq; i++) {
            slot *sl = &s->slots[i];
            if (s->p.spec_draft_model) { /* a draft context per slot, cut back to the slot's history each step */
                st = lmc_draft_model_init(&sl->ds, s->p.spec_draft_model, n_ctx + s->p.spec_n_draft);
                sl->ds_own = st >= 0;
            } else {
                sl->ds = s->shared_ds;
            }
            if (st >= 0 && sl->ds && (sl->ds->flags & LMC_DRAFT_NEEDS_HIDDEN) &&
                !(sl->hidden = calloc((size_t)s->p.model->cfg.hidden_size, sizeof(float))))
                st = lmc_fail(LMC_ERR_NOMEM, "speculative hidden states");
        }
        if (st < 0) { lmc_sched_free(s); return st; }
    }
    s->st.n_ctx = n_ctx;
    s->st.n_slots = s->p.n_seq;
    if (pthread_create(&s->thread, NULL, run, s) != 0) { lmc_sched_free(s); return lmc_fail(LMC_ERR_NOMEM, "scheduler thread"); }
    s->started = 1;
    *out = s;
    return LMC_OK;
}

lmc_status lmc_sched_submit(lmc_sched *s, lmc_srv_req *r) {
    if (r->n_prompt <= 0 || r->n_prompt >= s->ctx->kv.n_ctx)
        return lmc_fail(LMC_ERR_RANGE, "the prompt has %d tokens; the context holds %d", r->n_prompt, s->ctx->kv.n_ctx);
    pthread_mutex_lock(&s->mu);
    lmc_status st = LMC_OK;
    if (s->stopping) st = lmc_fail(LMC_ERR_ARG, "the server is shutting down");
    else if (s->q_len >= s->p.max_queue) st = lmc_fail(LMC_ERR_NOMEM, "the server is busy: %d requests are waiting", s->q_len);
    if (st >= 0) {
        lmc_srv_req_ref(r);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r->t_submit = ts.tv_sec + ts.tv_nsec * 1e-9;
        s->queue[(s->q_head + s->q_len) % s->p.max_queue] = r;
        s->q_len++;
        s->st.queue_depth = s->q_len;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

void lmc_sched_poke(lmc_sched *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void lmc_sched_get_stats(lmc_sched *s, lmc_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

void lmc_sched_stop(lmc_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    int was = s->stopping;
    s->stopping = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->started && !was) pthread_join(s->thread, NULL);
    s->started = 0;
    for (int i = 0; s->slots && i < s->p.n_seq; i++)
        if (s->slots[i].req) retire(s, i, LMC_FINISH_CANCELLED);
    pthread_mutex_lock(&s->mu);
    while (s->q_len > 0) {
        lmc_srv_req *r = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->p.max_queue;
        s->q_len--;
        pthread_mutex_lock(&r->mu);
        lmc_srv_req_finish_locked(r, LMC_FINISH_CANCELLED);
        pthread_mutex_unlock(&r->mu);
        s->st.cancelled++;
        lmc_srv_req_unref(r);
    }
    if (s->slots) update_gauges_locked(s);
    pthread_mutex_unlock(&s->mu);
}

void lmc_sched_free(lmc_sched *s) {
    if (!s) return;
    lmc_sched_stop(s);
    for (int i = 0; s->slots && i < s->p.n_seq; i++) {
        free(s->slots[i].tokens);
        free(s->slots[i].hidden);
        if (s->slots[i].ds_own) lmc_draft_source_free(s->slots[i].ds);
    }
    lmc_draft_source_free(s->shared_ds);
    free(s->slots);
    free(s->queue);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_want);
    free(s->row_slot);
    free(s->work);
    lmc_toktext_free(s->tt);
    lmc_context_free(s->ctx);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
