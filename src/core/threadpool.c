/* threadpool.c — pthread workers woken per job through a generation counter. */
#include "threadpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct lmc_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned long generation; /* bumped once per job */
    int n_pending;            /* workers still running the current job */
    int stop;
    lmc_pool_fn fn;
    void *arg;
};

typedef struct { lmc_pool *pool; int ith; } worker_arg;

static void *worker_main(void *p) {
    worker_arg *wa = p;
    lmc_pool *pool = wa->pool;
    int ith = wa->ith;
    free(wa);
    unsigned long seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->generation == seen) pthread_cond_wait(&pool->wake, &pool->mu);
        if (pool->stop) break;
        seen = pool->generation;
        lmc_pool_fn fn = pool->fn;
        void *arg = pool->arg;
        pthread_mutex_unlock(&pool->mu);
        fn(arg, ith, pool->n_threads);
        pthread_mutex_lock(&pool->mu);
        if (--pool->n_pending == 0) pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
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
    pthread_cond_init(&pool->done, NULL);
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
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    free(pool->threads);
    free(pool);
}

int lmc_pool_size(const lmc_pool *pool) { return pool ? pool->n_threads : 1; }

void lmc_pool_run(lmc_pool *pool, lmc_pool_fn fn, void *arg) {
    if (!pool || pool->n_threads == 1) { fn(arg, 0, 1); return; }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->n_pending = pool->n_threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    fn(arg, 0, pool->n_threads);
    pthread_mutex_lock(&pool->mu);
    while (pool->n_pending > 0) pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
