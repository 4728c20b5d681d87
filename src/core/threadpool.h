/* threadpool.h — a fixed pool of worker threads for data-parallel ops.
 *
 * lmc_pool_run(pool, fn, arg) calls fn(arg, ith, nth) once on each of the
 * nth threads (the caller is thread 0) and returns when all have finished.
 * Ops split their rows by (ith, nth) themselves, as ggml's CPU ops do.
 * The pool owns its threads; lmc_pool_free joins them.
 */
#ifndef LMC_CORE_THREADPOOL_H
#define LMC_CORE_THREADPOOL_H

#include "status.h"

typedef struct lmc_pool lmc_pool;
typedef void (*lmc_pool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 means one per online core. */
lmc_status lmc_pool_init(lmc_pool **out, int n_threads);
void lmc_pool_free(lmc_pool *pool);
int lmc_pool_size(const lmc_pool *pool);
void lmc_pool_run(lmc_pool *pool, lmc_pool_fn fn, void *arg);
int lmc_cpu_count(void);

/* The [begin, end) share of n items for thread ith of nth. */
static inline void lmc_split(long n, int ith, int nth, long *begin, long *end) {
    long per = (n + nth - 1) / nth;
    *begin = per * ith < n ? per * ith : n;
    *end = *begin + per < n ? *begin + per : n;
}

#endif
