/* cpu_rebind.c — weights the CPU backend rewrites when they are bound.
 *
 * Q4_0 as Q4_0R and Q8_0 as Q8_0R: the same bytes regrouped (core/quant.h) for cpu_qr.c's kernels.
 * A Q4_0 / Q8_0 row interleaves a 2-byte scale with every 16 / 32 code bytes, so the AVX-512
 * kernels gather each 4 blocks' codes with byte permutes and scale 4 lanes a block; regrouped, 16
 * blocks' codes are whole vectors and each vpdpbusd lane is one block, scaled once per 512 weights
 * (bench_matmul, one core, 151936 × 896 out of cache: Q4_0 decode 21 → 36 GB/s and 64-token
 * prefill 145 → 303 GFLOP/s; Q8_0 against its earlier rewrite as MLX8, 23 → 36–38 GB/s and
 * 123 → 196–199 GFLOP/s; docs/BENCHMARKS.md). Every weight converts, values and size unchanged;
 * the copy lives in memory the backend allocates, and the bound bytes' pages are handed back once
 * read (lmc_file_release: dropped from a file mapping, offered for reclaim elsewhere).
 *
 * BF16 matrices as BF16P (where no AMX tiles take bf16 products): rows packed by 16 (core/quant.h) for
 * cpu_ftile.c's tiles, which keep 16 rows' sums a vector and reduce nothing, exact f32 products and
 * bf16 compute alike (docs/BENCHMARKS.md, session 27).
 *
 * Vectors of a float type in a file mapping (norms, biases) are copied: see copy_small.
 *
 * Bound twice (the same host bytes and shape: a tied embedding and head), a weight shares one copy.
 */
#include "cpu_rebind.h"

#include "cpu_kernels.h"

#include "core/quant.h"
#include "core/threadpool.h"
#include "io/file.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct lmc_cpu_rebound {
    const void *host;
    lmc_dtype from; /* Q4_0, Q8_0 or BF16 (rewritten), or a float type (a vector copied) */
    lmc_dtype to;   /* the type it is held as */
    int64_t ne0, ne1;
    int refs;
    uint8_t *rows; /* the regrouped rows, or the copy */
};

/* the type a weight t that lmc_cpu_rebind_wants is rewritten as */
static lmc_dtype regrouped(lmc_dtype from) {
    return from == LMC_DTYPE_Q4_0 ? LMC_DTYPE_Q4_0R : from == LMC_DTYPE_Q8_0 ? LMC_DTYPE_Q8_0R : LMC_DTYPE_BF16P;
}

/* t as the weight r holds */
static void point_at(lmc_tensor *t, lmc_cpu_rebound *r) {
    lmc_tensor m = lmc_tensor_make(r->to, r->ne0, r->ne1, 1, 1);
    m.data = r->rows;
    *t = m;
}

int lmc_cpu_rebind_wants(const lmc_tensor *t) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("LMC_CPU_REGROUP");
        on = !(e && !strcmp(e, "0"));
    }
    static int pack = -1; /* LMC_CPU_BF16_PACK=0: BF16 stays as it is */
    if (pack < 0) {
        const char *e = getenv("LMC_CPU_BF16_PACK");
        pack = !(e && !strcmp(e, "0"));
    }
    /* inputs ≥ 512: matrices the forward multiplies or gathers rows of (get_rows), never the 2-D norm
     * weights some models have ([head_dim, heads], read as a flat vector) */
    const int bf16p = t->type == LMC_DTYPE_BF16 && pack && !lmc_cpu_amx_ok() && t->ne[1] % 16 == 0 && t->ne[0] >= 512;
    return on && (t->type == LMC_DTYPE_Q4_0 || t->type == LMC_DTYPE_Q8_0 || bf16p) && t->ne[2] == 1 && t->ne[3] == 1 &&
           t->ne[0] > 0 && t->ne[0] % 32 == 0 && t->ne[1] > 0 && !t->aux &&
           t->nb[1] == lmc_dtype_row_bytes(t->type, t->ne[0]); /* rows side by side (not a strided view) */
}

int lmc_cpu_rebind_copy_wants(const lmc_tensor *t, const void *host) {
    const size_t n = lmc_tensor_nbytes(t);
    return (t->type == LMC_DTYPE_F32 || t->type == LMC_DTYPE_F16 || t->type == LMC_DTYPE_BF16) && t->ne[1] == 1 &&
           t->ne[2] == 1 && t->ne[3] == 1 && !t->aux && t->nb[0] == lmc_dtype_size(t->type) && n > 0 &&
           n <= LMC_CPU_COPY_MAX && lmc_file_is_mapped(host, n);
}

/* A record for t's bytes at host: `bytes` of memory of its own (locked under --mlock), one reference. */
static lmc_status new_rebound(const lmc_tensor *t, const void *host, size_t bytes, lmc_cpu_rebound **out) {
    lmc_cpu_rebound *r = calloc(1, sizeof *r);
    if (r) r->rows = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!r || !r->rows) {
        free(r);
        return lmc_fail(LMC_ERR_NOMEM, "cannot allocate %zu bytes for a %s weight rewritten at load", bytes,
                        lmc_dtype_name(t->type));
    }
    const lmc_status st = lmc_file_lock_memory(r->rows, bytes, "a weight rewritten at load");
    if (st < 0) {
        free(r->rows);
        free(r);
        return st;
    }
    r->host = host;
    r->from = r->to = t->type;
    r->ne0 = t->ne[0];
    r->ne1 = t->ne[1];
    r->refs = 1;
    *out = r;
    return LMC_OK;
}

/* A small tensor copied out of the file mapping, and the pages around it dropped: the forward reads
 * norms and biases every step, and a read of the mapping maps the page cache's folio around it whole
 * (runs of 2–4 MB), neighbours already rewritten included — Qwen2.5-0.5B-shape Q4_0 kept 21 MB of its
 * file resident that way (a peak RSS of 1.13 × the file). A neighbour bound in place (a bf16 matrix)
 * that loses pages this way faults them in again at its first use. */
static lmc_status copy_small(lmc_cpu_rebinds *set, lmc_tensor *t, const void *host, size_t bytes) {
    lmc_cpu_rebound *r;
    LMC_TRY(new_rebound(t, host, bytes, &r));
    memcpy(r->rows, host, bytes);
    const size_t around = 4u << 20, before = (uintptr_t)host > around ? around : 0, span = before + bytes + around;
    const uint8_t *a = (const uint8_t *)host - before;
    /* locked (--mlock), the pages around stay: released, the other tensors' pages among them would
     * come back unlocked */
    if (!lmc_file_lock_mode() && lmc_file_is_mapped(a, span)) lmc_file_release(a, span);
    else lmc_file_release(host, bytes);
    set->v[set->n++] = r;
    point_at(t, r);
    return LMC_OK;
}

typedef struct {
    lmc_cpu_rebound *r;
    const void *host;
    size_t rb;      /* bytes a row */
    int64_t o0, o1; /* the rows of this job */
} regroup_job;

/* The rows of a job split over the pool's threads (on a VM, first writes to fresh pages cost as
 * much as the regrouping: they go faster side by side). */
static void regroup_worker(void *arg, int ith, int nth) {
    const regroup_job *j = arg;
    long o0, o1;
    if (j->r->from == LMC_DTYPE_BF16) { /* runs of 16 rows (o0, o1 multiples of 16) */
        lmc_split((long)(j->o1 - j->o0) / 16, ith, nth, &o0, &o1);
        for (long b = o0; b < o1; b++) {
            const int64_t o = j->o0 + 16 * (int64_t)b;
            lmc_bf16p_pack((const uint16_t *)j->host + (size_t)o * (size_t)j->r->ne0, j->r->ne0,
                           (uint16_t *)(void *)(j->r->rows + (size_t)o * j->rb));
        }
        return;
    }
    lmc_split((long)(j->o1 - j->o0), ith, nth, &o0, &o1);
    for (long o = j->o0 + o0; o < j->o0 + o1; o++) {
        const uint8_t *src = (const uint8_t *)j->host + (size_t)o * j->rb;
        if (j->r->from == LMC_DTYPE_Q4_0) lmc_q4_0_regroup_row(src, j->r->rows + (size_t)o * j->rb, j->r->ne0);
        else lmc_q8_0_regroup_row(src, j->r->rows + (size_t)o * j->rb, j->r->ne0);
    }
}

lmc_status lmc_cpu_rebind(lmc_cpu_rebinds *set, lmc_tensor *t, const void *host, lmc_pool *pool) {
    for (int i = 0; i < set->n; i++) {
        lmc_cpu_rebound *r = set->v[i];
        if (r->host == host && r->from == t->type && r->ne0 == t->ne[0] && r->ne1 == t->ne[1]) {
            r->refs++;
            point_at(t, r);
            return LMC_OK;
        }
    }
    if (set->n == set->cap) {
        const int cap = set->cap ? 2 * set->cap : 64;
        lmc_cpu_rebound **v = realloc(set->v, (size_t)cap * sizeof *v);
        if (!v) return lmc_fail(LMC_ERR_NOMEM, "cannot grow the table of rewritten weights");
        set->v = v;
        set->cap = cap;
    }
    const size_t rb = lmc_dtype_row_bytes(t->type, t->ne[0]), bytes = rb * (size_t)t->ne[1];
    if (!lmc_cpu_rebind_wants(t)) return copy_small(set, t, host, bytes);
    lmc_cpu_rebound *r;
    LMC_TRY(new_rebound(t, host, bytes, &r));
    r->to = regrouped(t->type);
    /* in slices of about 8 MB (whole runs of BF16P), each slice's source pages handed back before the
     * next: the peak resident memory grows by a slice, not by the weight (a 148 MB embedding of
     * Llama-3.2-1B shape) */
    const int64_t step = ((int64_t)((8u << 20) / rb) / 16 + 1) * 16;
    for (int64_t o0 = 0; o0 < r->ne1; o0 += step) {
        regroup_job j = {r, host, rb, o0, o0 + step < r->ne1 ? o0 + step : r->ne1};
        lmc_pool_run(pool, regroup_worker, &j);
        lmc_file_release((const uint8_t *)host + (size_t)o0 * rb, (size_t)(j.o1 - o0) * rb);
    }
    lmc_file_release(host, bytes); /* the pages across slice boundaries too, and one range instead of many */
    set->v[set->n++] = r;
    point_at(t, r);
    return LMC_OK;
}

int lmc_cpu_unrebind(lmc_cpu_rebinds *set, lmc_tensor *t) {
    for (int i = 0; i < set->n; i++) {
        lmc_cpu_rebound *r = set->v[i];
        if (r->rows != t->data || t->type != r->to) continue;
        *t = lmc_tensor_make(r->from, r->ne0, r->ne1, 1, 1); /* the descriptor as it was bound */
        if (--r->refs == 0) {
            free(r->rows);
            free(r);
            set->v[i] = set->v[--set->n];
        }
        return 1;
    }
    return 0;
}

void lmc_cpu_rebinds_free(lmc_cpu_rebinds *set) {
    for (int i = 0; i < set->n; i++) {
        free(set->v[i]->rows);
        free(set->v[i]);
    }
    free(set->v);
    memset(set, 0, sizeof *set);
}
