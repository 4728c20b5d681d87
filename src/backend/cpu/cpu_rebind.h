/* cpu_rebind.h — weights the CPU backend rewrites when they are bound (cpu_rebind.c): Q4_0 and Q8_0
 * regrouped as Q4_0R and Q8_0R. */
#ifndef LMC_CPU_REBIND_H
#define LMC_CPU_REBIND_H

#include "core/tensor.h"
#include "core/status.h"
#include "core/threadpool.h"

typedef struct lmc_cpu_rebound lmc_cpu_rebound;
/* The rewritten weights of one backend (zero-initialised; freed by lmc_cpu_rebinds_free). */
typedef struct lmc_cpu_rebinds {
    lmc_cpu_rebound **v;
    int n, cap;
} lmc_cpu_rebinds;

/* 1 when bind_weight would rewrite t (a 2-D Q4_0 or Q8_0 weight, rows side by side; a BF16 one of a
 * multiple of 16 rows and ≥ 512 inputs where no AMX tiles take it; LMC_CPU_REGROUP=0: never, LMC_CPU_BF16_PACK=0:
 * no BF16). */
int lmc_cpu_rebind_wants(const lmc_tensor *t);
/* 1 when bind_weight copies t instead (a vector of a float type, at most LMC_CPU_COPY_MAX bytes, in a
 * file mapping: norms, biases; lmc_cpu_rebind then copies it). */
#define LMC_CPU_COPY_MAX (1u << 20)
int lmc_cpu_rebind_copy_wants(const lmc_tensor *t, const void *host);
/* Rewrite t (shape and type set, data at host) as Q4_0R / Q8_0R / BF16P (its rows split over pool's
 * threads), or copy it (lmc_cpu_rebind_copy_wants), in memory the set owns; or share the copy of the
 * same host bytes, type and shape. */
lmc_status lmc_cpu_rebind(lmc_cpu_rebinds *set, lmc_tensor *t, const void *host, lmc_pool *pool);
/* 1 when t was rewritten by the set (its reference dropped, the copy freed with the last, *t the
 * descriptor as it was bound, data NULL); else 0. */
int lmc_cpu_unrebind(lmc_cpu_rebinds *set, lmc_tensor *t);
void lmc_cpu_rebinds_free(lmc_cpu_rebinds *set);

#endif
