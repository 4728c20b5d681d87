/* cpu_rebind.c — weights the CPU backend rewrites when they are bound.
 *
 * Q4_0 as Q4_0R: the same bytes regrouped (core/quant.h) for cpu_q4r.c's kernels, which need a
 * third of Q4_0's vector instructions per weight (one core in cache: 92 → ~190 GFLOP/s); every
 * Q4_0 weight converts. 18 bytes a block as before.
 *
 * Q8_0 as MLX8. A Q8_0 row interleaves a 2-byte scale with every 32 codes, so the AVX-512 decode
 * kernel gathers each 128 codes from four unaligned loads with two byte permutes and a word permute;
 * the same weight as MLX8 (codes q + 128 as unsigned bytes, one per element, group 32, f16 scales d
 * and biases -128·d) goes through the MLX8 kernel's two plain loads a 128 codes instead
 * (bench_matmul, one core, out of cache: 15–16 against 23–25 GB/s for the loads alone;
 * docs/BENCHMARKS.md). The values are the same bit for bit: (q + 128)·d - 128·d = q·d exactly in
 * f32, and -128·d is exact in f16 whenever it is finite, which the conversion checks (a tensor with
 * a scale that is not finite, or too large for it, stays Q8_0). The rewritten weight takes 1.125
 * bytes an element against 1.0625 and lives in memory the backend allocates; the mapped blocks'
 * pages are handed back to the kernel (MADV_PAGEOUT, which never discards data) once read.
 *
 * Bound twice (the same host bytes and shape: a tied embedding and head), a weight shares one copy.
 */
#define _DEFAULT_SOURCE
#include "cpu_rebind.h"

#include "core/quant.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct lmc_cpu_rebound {
    const void *host;
    lmc_dtype from; /* Q8_0 (rewritten as MLX8) or Q4_0 (as Q4_0R) */
    int64_t ne0, ne1;
    int refs;
    uint8_t *codes; /* MLX8 codes, or the Q4_0R rows */
    uint16_t *side; /* MLX8: scales [ne1][ne0 / 32], then biases; Q4_0R: NULL */
    lmc_quant_mlx q;
};

/* The f16 bias -128·d of scale d, or -1 when d is not finite or -128·d is not exact in f16. */
static int32_t q8_bias(uint16_t d) {
    const float s = lmc_f16_to_f32(d);
    if (!isfinite(s)) return -1;
    const float b = -128.0f * s;
    const uint16_t h = lmc_f32_to_f16(b);
    return isfinite(b) && lmc_f16_to_f32(h) == b ? (int32_t)h : -1;
}

static void release_pages(const void *p, size_t n) {
#ifdef MADV_PAGEOUT
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)p + pg - 1) / pg * pg,
                    e = ((uintptr_t)p + n) / pg * pg;
    if (e > a) madvise((void *)a, e - a, MADV_PAGEOUT); /* a hint: failure changes nothing */
#else
    (void)p;
    (void)n;
#endif
}

/* Fill r from the Q8_0 rows at host; 0, or -1 (nothing kept) when a scale does not convert. */
static int q8_convert(lmc_cpu_rebound *r, const uint8_t *host) {
    const int64_t nb = r->ne0 / 32, rows = r->ne1;
    uint16_t *sc = r->side, *bi = r->side + (size_t)nb * (size_t)rows;
    for (int64_t o = 0; o < rows; o++) {
        const uint8_t *row = host + (size_t)o * (size_t)nb * 34;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + b * 34;
            uint16_t d;
            memcpy(&d, blk, 2);
            const int32_t bias = q8_bias(d);
            if (bias < 0) return -1;
            sc[o * nb + b] = d;
            bi[o * nb + b] = (uint16_t)bias;
            uint8_t *c = r->codes + (size_t)o * (size_t)r->ne0 + (size_t)b * 32;
            for (int j = 0; j < 32; j++) c[j] = (uint8_t)(blk[2 + j] ^ 0x80); /* (int8)q + 128 */
        }
    }
    return 0;
}

static void rebound_free(lmc_cpu_rebound *r) {
    if (!r) return;
    free(r->codes);
    free(r->side);
    free(r);
}

/* t as the weight r holds (MLX8 or Q4_0R) */
static void point_at(lmc_tensor *t, lmc_cpu_rebound *r) {
    lmc_tensor m = lmc_tensor_make(r->from == LMC_DTYPE_Q8_0 ? LMC_DTYPE_MLX8 : LMC_DTYPE_Q4_0R, r->ne0, r->ne1, 1, 1);
    m.data = r->codes;
    m.aux = r->from == LMC_DTYPE_Q8_0 ? &r->q : NULL;
    *t = m;
}

static int env_on(const char *name) {
    const char *e = getenv(name);
    return !(e && !strcmp(e, "0"));
}

int lmc_cpu_rebind_wants(const lmc_tensor *t) {
    static int q8 = -1, q4 = -1;
    if (q8 < 0) {
        q8 = env_on("LMC_CPU_Q8_AS_MLX8");
        q4 = env_on("LMC_CPU_Q4_REGROUP");
    }
    return ((q8 && t->type == LMC_DTYPE_Q8_0) || (q4 && t->type == LMC_DTYPE_Q4_0)) && t->ne[2] == 1 && t->ne[3] == 1 &&
           t->ne[0] > 0 && t->ne[0] % 32 == 0 && t->ne[1] > 0 && !t->aux;
}

lmc_status lmc_cpu_rebind(lmc_cpu_rebinds *set, lmc_tensor *t, const void *host, int *done) {
    *done = 0;
    for (int i = 0; i < set->n; i++) {
        lmc_cpu_rebound *r = set->v[i];
        if (r->host == host && r->ne0 == t->ne[0] && r->ne1 == t->ne[1]) {
            r->refs++;
            point_at(t, r);
            *done = 1;
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
    const int64_t ne0 = t->ne[0], ne1 = t->ne[1], nb = ne0 / 32;
    const int q4 = t->type == LMC_DTYPE_Q4_0;
    const size_t rows = (q4 ? 18 : 34) * (size_t)nb * (size_t)ne1; /* the bound bytes */
    const size_t codes = q4 ? rows : (size_t)ne0 * (size_t)ne1, side = q4 ? 0 : 2 * (size_t)nb * (size_t)ne1;
    lmc_cpu_rebound *r = calloc(1, sizeof *r);
    if (r) {
        r->codes = aligned_alloc(64, (codes + 63) / 64 * 64);
        r->side = q4 ? NULL : malloc(side * sizeof *r->side);
    }
    if (!r || !r->codes || (!q4 && !r->side)) {
        rebound_free(r);
        return lmc_fail(LMC_ERR_NOMEM, "cannot allocate %zu bytes for a %s weight as %s", codes + 2 * side,
                        lmc_dtype_name(t->type), q4 ? "Q4_0R" : "MLX8");
    }
    r->host = host;
    r->from = t->type;
    r->ne0 = ne0;
    r->ne1 = ne1;
    r->refs = 1;
    if (q4) {
        for (int64_t o = 0; o < ne1; o++)
            lmc_q4_0_regroup_row((const uint8_t *)host + (size_t)o * 18 * (size_t)nb, r->codes + (size_t)o * 18 * (size_t)nb, ne0);
    } else if (q8_convert(r, host) < 0) { /* a scale MLX8 cannot carry exactly: the weight stays Q8_0 */
        rebound_free(r);
        return LMC_OK;
    }
    release_pages(host, rows);
    if (!q4) {
        r->q.group_size = 32;
        r->q.scales = lmc_tensor_make(LMC_DTYPE_F16, nb, ne1, 1, 1);
        r->q.scales.data = r->side;
        r->q.biases = r->q.scales;
        r->q.biases.data = r->side + (size_t)nb * (size_t)ne1;
    }
    set->v[set->n++] = r;
    point_at(t, r);
    *done = 1;
    return LMC_OK;
}

int lmc_cpu_unrebind(lmc_cpu_rebinds *set, lmc_tensor *t) {
    for (int i = 0; i < set->n; i++) {
        lmc_cpu_rebound *r = set->v[i];
        if (r->codes != t->data || t->aux != (r->from == LMC_DTYPE_Q8_0 ? &r->q : NULL)) continue;
        *t = lmc_tensor_make(r->from, r->ne0, r->ne1, 1, 1); /* the descriptor as it was bound */
        if (--r->refs == 0) {
            rebound_free(r);
            set->v[i] = set->v[--set->n];
        }
        return 1;
    }
    return 0;
}

void lmc_cpu_rebinds_free(lmc_cpu_rebinds *set) {
    for (int i = 0; i < set->n; i++) rebound_free(set->v[i]);
    free(set->v);
    memset(set, 0, sizeof *set);
}
