/* threadpool.c — pthread workers woken per job through an atomic generation counter.
 *
 * A job is published by bumping `generation`. Workers that finished the last
 * job poll the counter for a bounded time (LMC_POOL_SPIN_NS; busy for the
 * first LMC_POOL_PAUSE_NS, then yielding the core between polls so an
 * oversubscribed machine keeps making progress) before they sleep on a
 * condition variable, so the ~hundreds of ops of one decoded token
 * wake them without a syscall, while an idle pool sleeps and burns no CPU.
 * Sleepers announce themselves in `n_sleeping` before their last look at the
 * counter; the publisher bumps the counter before it reads `n_sleeping`, so a
 * wake-up is never lost (both are sequentially consistent atomics).
 * The caller runs share 0 and then waits (spin, then yield) for `n_pending`.
 * The pool owns its threads; lmc_pool_free joins them.
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define LMC_POOL_SPIN_NS 500000L /* how long an idle worker polls before it sleeps */
#define LMC_POOL_PAUSE_NS 50000L  /* ... of which the first part busy-spins; then it yields between polls */

struct lmc_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_ulong generation; /* bumped once per job */
    atomic_int n_pending;    /* workers still running the current job */
    atomic_int n_sleeping;   /* workers in (or about to enter) cond_wait */
    atomic_int stop;
    lmc_pool_fn fn;          /* written before the generation bump, read after */
    void *arg;
};

typedef struct { lmc_pool *pool; int ith; } worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Wait until the generation differs from `seen` (or stop); returns the new generation. */
static unsigned long wait_job(lmc_pool *pool, unsigned long seen) {
    long t0 = 0;
    for (unsigned it = 0;; it++) {
        unsigned long g = atomic_load_explicit(&pool->generation, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&pool->stop, memory_order_relaxed)) return g;
        cpu_relax();
        if ((it & 63) == 0) {
            long t = now_ns();
            if (it == 0) t0 = t;
            else if (t - t0 > LMC_POOL_SPIN_NS) break;
            else if (t - t0 > LMC_POOL_PAUSE_NS) sched_yield(); /* oversubscribed cores: let others run */
        }
    }
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add(&pool->n_sleeping, 1);
    unsigned long g;
    while ((g = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stop))
        pthread_cond_wait(&pool->wake, &pool->mu);
    atomic_fetch_sub(&pool->n_sleeping, 1);
    pthread_mutex_unlock(&pool->mu);
    return g;
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    lmc_pool *pool = wa->pool;
    int ith = wa->ith;
    free(wa);
    unsigned long seen = 0;
    for (;;) {
        seen = wait_job(pool, seen);
        if (atomic_load(&pool->stop)) break;
        pool->fn(pool->arg, ith, pool->n_threads);
        atomic_fetch_sub_explicit(&pool->n_pending, 1, memory_order_release);
    }
    return NULL;
}

int lmc_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

lmc_status lmc_pool_init(lmc_pool **out, int n_threads) {
    if (n_threads <= 0) n_threads = lmc_cpu_count();
    if (n_threads > 1024) return lmc_fail(LMC_ERR_ARG, "too many threads: %d", n_threads);
    lmc_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return lmc_fail(LMC_ERR_NOMEM, "thread pool");
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->n_pending, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->stop, 0);
    pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
    if (!pool->threads) { free(pool); return lmc_fail(LMC_ERR_NOMEM, "thread pool"); }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { pool->n_threads = i; lmc_pool_free(pool); return lmc_fail(LMC_ERR_NOMEM, "thread pool"); }
        wa->pool = pool;
        wa->ith = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            pool->n_threads = i;
            lmc_pool_free(pool);
            return lmc_fail(LMC_ERR_NOMEM, "cannot start thread %d", i);
        }
    }
    *out = pool;
    return LMC_OK;
}

void lmc_pool_free(lmc_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->wake);
    free(pool->threads);
    free(pool);
}

int lmc_pool_size(const lmc_pool *pool) { return pool ? pool->n_threads : 1; }

void lmc_pool_run(lmc_pool *pool, lmc_pool_fn fn, void *arg) {
    if (!pool || pool->n_threads == 1) { fn(arg, 0, 1); return; }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store(&pool->n_pending, pool->n_threads - 1);
    atomic_fetch_add(&pool->generation, 1); /* seq_cst: publishes fn/arg, ordered before the n_sleeping read */
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(arg, 0, pool->n_threads);
    for (unsigned it = 0; atomic_load_explicit(&pool->n_pending, memory_order_acquire) > 0; it++) {
        if (it < 2000) cpu_relax();
        else sched_yield(); /* a worker was descheduled: give it the core */
    }
}
