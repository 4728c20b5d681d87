/* tp_context.c — a tensor-parallel lmc_context (see tp_context.h): rank
 * threads, each building and then running its own backend, shard, KV cache
 * and forward state; the context's decode hands every forward to all ranks
 * and takes rank 0's logits.
 *
 * Each worker thread sets itself up (a CUDA backend binds its device to the
 * thread that creates it), then waits for forwards; on exit it frees what it
 * built. Rank 0 lives on the caller's thread, its cache and scratch in the
 * lmc_context itself.
 */
#include "tp_context.h"

#include "model/tp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tp_rank {
    lmc_tp_context *t;
    int r;
    lmc_backend *be;
    lmc_model *shard;
    lmc_kv_cache kv_own;        /* ranks ≥ 1 (rank 0: the context's) */
    lmc_forward_state fs_own;
    lmc_kv_cache *kv;
    lmc_forward_state *fs;
    pthread_t th;
    int started;
    lmc_status st;              /* of the last setup or forward */
    char err[512];
} tp_rank;

struct lmc_tp_context {
    int n;
    lmc_tp_params p;
    lmc_context_params cp;
    lmc_model *full;            /* borrowed */
    lmc_tp_plan plan;
    lmc_tp_comm *comm;
    tp_rank *ranks;             /* [n] */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned job;               /* forwards posted (workers run each once) */
    int n_done, quit, broken;
    const lmc_batch *b;         /* the forward being run */
};

lmc_tp_params lmc_tp_default_params(void) {
    lmc_tp_params p = {.n_ranks = 1, .backend = "cpu", .n_threads = 1, .device0 = 0, .host_reduce = 0};
    return p;
}

static void keep_error(tp_rank *k, lmc_status st) {
    k->st = st;
    if (st < 0) snprintf(k->err, sizeof k->err, "%s", lmc_last_error());
}

/* Backend, shard, cache and scratch of rank k, on the thread that will run it. */
static lmc_status rank_setup(tp_rank *k) {
    lmc_tp_context *t = k->t;
    LMC_TRY(t->comm->i->thread_init(t->comm, k->r));
    lmc_backend_params bp = {.name = t->p.backend, .n_threads = t->p.n_threads, .device = t->p.device0 + k->r};
    LMC_TRY(lmc_backend_init(&k->be, &bp));
    LMC_TRY(lmc_tp_shard_init(t->full, &t->plan, k->r, k->be, &k->shard));
    LMC_TRY(lmc_kv_init(k->kv, k->shard, t->cp.n_ctx, t->cp.n_seq, t->cp.n_batch));
    return lmc_forward_state_init(k->fs, k->shard, t->cp.n_batch);
}

/* Free what rank_setup built (rank 0: only the shard and backend; the context frees the rest). */
static void rank_teardown(tp_rank *k) {
    if (k->r != 0) {
        lmc_forward_state_free(&k->fs_own);
        lmc_kv_free(&k->kv_own);
    }
    lmc_tp_shard_free(k->shard);
    k->shard = NULL;
    if (k->be) lmc_backend_free(k->be);
    k->be = NULL;
}

static lmc_status rank_forward(tp_rank *k, const lmc_batch *b, float *logits, float *hidden, int *n_out) {
    lmc_tp_context *t = k->t;
    int got = 0;
    lmc_tp_bind_thread(k->shard, t->comm, k->r);
    lmc_status st = lmc_forward(k->fs, k->kv->k, k->kv->v, b, logits, hidden, n_out ? n_out : &got);
    lmc_status rs = lmc_tp_thread_status();
    lmc_tp_bind_thread(NULL, NULL, 0);
    if (st >= 0 && rs < 0) st = rs;
    if (st < 0) t->comm->i->abort(t->comm); /* wake ranks waiting in a reduce this one will not reach */
    return st;
}

static void *rank_main(void *arg) {
    tp_rank *k = arg;
    lmc_tp_context *t = k->t;
    keep_error(k, rank_setup(k));
    pthread_mutex_lock(&t->mu);
    t->n_done++;
    pthread_cond_signal(&t->done);
    unsigned seen = t->job;
    for (;;) {
        while (t->job == seen && !t->quit) pthread_cond_wait(&t->go, &t->mu);
        if (t->quit) break;
        seen = t->job;
        const lmc_batch *b = t->b;
        pthread_mutex_unlock(&t->mu);
        keep_error(k, rank_forward(k, b, NULL, NULL, NULL));
        pthread_mutex_lock(&t->mu);
        t->n_done++;
        pthread_cond_signal(&t->done);
    }
    pthread_mutex_unlock(&t->mu);
    rank_teardown(k);
    return NULL;
}

/* Wait until n_done reaches `want`. */
static void wait_done(lmc_tp_context *t, int want) {
    pthread_mutex_lock(&t->mu);
    while (t->n_done < want) pthread_cond_wait(&t->done, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

/* The first rank error, as this thread's error. */
static lmc_status first_error(lmc_tp_context *t, const char *what) {
    for (int r = 0; r < t->n; r++)
        if (t->ranks[r].st < 0)
            return lmc_fail(t->ranks[r].st, "tensor-parallel rank %d %s: %s", r, what, t->ranks[r].err);
    return LMC_OK;
}

void lmc_tp_context_free(lmc_tp_context *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->quit = 1;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    for (int r = 1; r < t->n; r++)
        if (t->ranks[r].started) pthread_join(t->ranks[r].th, NULL);
    if (t->n > 0) rank_teardown(&t->ranks[0]);
    lmc_tp_comm_free(t->comm);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->go);
    pthread_cond_destroy(&t->done);
    free(t->ranks);
    free(t);
}

static lmc_status make_comm(lmc_tp_context *t) {
    const int cuda = strcmp(t->p.backend, "cuda") == 0;
    if (!cuda || t->p.host_reduce) return lmc_tp_comm_host_init(&t->comm, t->n);
#ifdef LMC_CUDA
    int dev[LMC_TP_MAX_RANKS];
    for (int r = 0; r < t->n; r++) dev[r] = t->p.device0 + r;
    return lmc_tp_comm_nccl_init(&t->comm, t->n, dev);
#else
    return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism over cuda needs a build with CUDA=1 (NCCL)");
#endif
}

lmc_status lmc_context_init_tp(lmc_context **out, lmc_model *full, const lmc_context_params *pp,
                               const lmc_tp_params *tpp) {
    *out = NULL;
    lmc_tp_params tp = tpp ? *tpp : lmc_tp_default_params();
    if (!tp.backend) tp.backend = "cpu";
    if (tp.n_threads <= 0) tp.n_threads = 1;
    lmc_context_params p = pp ? *pp : lmc_context_default_params();
    if (p.n_ctx <= 0) p.n_ctx = full->cfg.max_position_embeddings < 4096 ? full->cfg.max_position_embeddings : 4096;
    if (p.n_seq <= 0) p.n_seq = 1;
    if (p.n_batch <= 0) p.n_batch = 256;
    lmc_tp_plan plan;
    LMC_TRY(lmc_tp_plan_make(full, tp.n_ranks, &plan));
    plan.pack_slices = tp.pack_slices;
    lmc_context *ctx = calloc(1, sizeof *ctx);
    lmc_tp_context *t = calloc(1, sizeof *t);
    tp_rank *ranks = calloc((size_t)tp.n_ranks, sizeof *ranks);
    if (!ctx || !t || !ranks) {
        free(ctx);
        free(t);
        free(ranks);
        return lmc_fail(LMC_ERR_NOMEM, "tensor-parallel context");
    }
    ctx->model = full;
    ctx->params = p;
    ctx->tp = t;
    t->n = tp.n_ranks;
    t->p = tp;
    t->cp = p;
    t->full = full;
    t->plan = plan;
    t->ranks = ranks;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->go, NULL);
    pthread_cond_init(&t->done, NULL);
    for (int r = 0; r < t->n; r++) {
        ranks[r].t = t;
        ranks[r].r = r;
        ranks[r].kv = r ? &ranks[r].kv_own : &ctx->kv;
        ranks[r].fs = r ? &ranks[r].fs_own : &ctx->fs;
    }
    lmc_status st = make_comm(t);
    /* ranks ≥ 1 set themselves up on their threads while rank 0 does on this one */
    for (int r = 1; st >= 0 && r < t->n; r++) {
        if (pthread_create(&ranks[r].th, NULL, rank_main, &ranks[r]) != 0) {
            st = lmc_fail(LMC_ERR_NOMEM, "cannot start the thread of tensor-parallel rank %d", r);
            break;
        }
        ranks[r].started = 1;
    }
    if (st >= 0) keep_error(&ranks[0], rank_setup(&ranks[0]));
    int n_started = 0;
    for (int r = 1; r < t->n; r++) n_started += ranks[r].started;
    wait_done(t, n_started);
    if (st >= 0) st = first_error(t, "setup");
    if (st < 0) {
        lmc_context_free(ctx);
        return st;
    }
    *out = ctx;
    return LMC_OK;
}

/* The batch checks lmc_forward makes, made once before the ranks start: a bad batch is the
 * caller's error and must not break the group (a rank failing alone aborts it). */
static lmc_status check_batch(const lmc_tp_context *t, const lmc_batch *b) {
    const lmc_model *m = t->full;
    const lmc_config *c = &m->cfg;
    const int n = b->n_tokens;
    if (n <= 0 || n > t->cp.n_batch)
        return lmc_fail(LMC_ERR_ARG, "batch of %d tokens (at most %d per forward)", n, t->cp.n_batch);
    for (int i = 0; i < n; i++) {
        if (b->token[i] < 0 || b->token[i] >= c->vocab_size)
            return lmc_fail(LMC_ERR_RANGE, "token id %d is outside the vocabulary (0..%d)", b->token[i], c->vocab_size - 1);
        if (b->pos[i] < 0) return lmc_fail(LMC_ERR_RANGE, "negative position %d", b->pos[i]);
        if (m->pos_embd.data && b->pos[i] >= c->max_position_embeddings)
            return lmc_fail(LMC_ERR_RANGE, "position %d is past the model's %d learned positions", b->pos[i],
                            c->max_position_embeddings);
        if (b->seq[i] < 0 || b->seq[i] >= t->cp.n_seq)
            return lmc_fail(LMC_ERR_RANGE, "sequence %d outside the cache's %d", b->seq[i], t->cp.n_seq);
        /* dynamic rope takes each sequence's tokens as one run */
        for (int j = 0; m->rope[0].dynamic && j + 1 < i; j++)
            if (b->seq[j] == b->seq[i] && b->seq[j + 1] != b->seq[i])
                return lmc_fail(LMC_ERR_UNSUPPORTED, "dynamic rope needs each sequence's tokens adjacent in a batch");
    }
    return LMC_OK;
}

lmc_status lmc_tp_context_forward(lmc_tp_context *t, const lmc_batch *b, float *logits_out, float *hidden_out,
                                  int *n_out) {
    *n_out = 0;
    if (t->broken) return lmc_fail(LMC_ERR_IO, "the tensor-parallel group failed in an earlier forward");
    LMC_TRY(check_batch(t, b));
    pthread_mutex_lock(&t->mu);
    t->b = b;
    t->n_done = 0;
    t->job++;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    tp_rank *k0 = &t->ranks[0];
    keep_error(k0, t->comm->i->thread_init(t->comm, 0));
    if (k0->st >= 0) keep_error(k0, rank_forward(k0, b, logits_out, hidden_out, n_out));
    else t->comm->i->abort(t->comm);
    wait_done(t, t->n - 1);
    lmc_status st = first_error(t, "forward");
    if (st < 0) t->broken = 1;
    return st;
}
