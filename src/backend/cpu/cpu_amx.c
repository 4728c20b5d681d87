/* cpu_amx.c — prefill with bf16 weights on AMX tiles, keeping f32 activations exact.
 *
 * A tile product C[16 outputs × 16 tokens] += W[16 rows × 32 inputs] · Xᵀ takes the
 * weight rows straight from memory (bf16, row stride nb[1]) as the A tile. The
 * activations are split once per matmul into three bf16 parts x = b1 + b2 + b3
 * (b1 = bf16(x), b2 = bf16(x - b1), b3 = x - b1 - b2: 3 × 8 significand bits hold
 * all 24 of an f32, so the split is exact) and packed as B tiles in AMX's pair
 * layout. Each product w·b is exact in f32 and TDPBF16PS accumulates in f32, so
 * the result is the f32 product of exact bf16→f32 weights and f32 activations, as
 * the F1 path asks (only the order of the f32 sums differs from sgemm).
 * Linux needs one arch_prctl per process before tiles may be used; without it (or
 * without AMX in the build, or with LMC_CPU_AMX=0 in the environment) prefill stays
 * on sgemm. Each calling thread loads its own tile configuration and releases it.
 */
#include "cpu_kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define LMC_HAVE_AMX 1
#endif

#define TILE_BYTES 1024 /* 16 rows × 64 bytes */

int lmc_cpu_amx_ok(void) {
#ifdef LMC_HAVE_AMX
    static atomic_int state; /* 0 unknown, 1 usable, -1 not */
    int s = atomic_load(&state);
    if (s == 0) {
        const char *env = getenv("LMC_CPU_AMX");
        if (env && env[0] == '0') s = -1;
        else s = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0 ? 1 : -1;
        atomic_store(&state, s);
    }
    return s == 1;
#else
    return 0;
#endif
}

int lmc_cpu_amx_wants(const lmc_tensor *w, int64_t n_tok) {
    return n_tok >= LMC_CPU_GEMM_MIN_TOKENS && w->type == LMC_DTYPE_BF16 && w->ne[0] % 32 == 0 && w->ne[1] >= 16 &&
           w->nb[1] % 2 == 0 && lmc_cpu_amx_ok();
}

size_t lmc_cpu_amx_act_bytes(const lmc_tensor *w, int64_t n_tok) {
    return (size_t)(w->ne[0] / 32) * (size_t)((n_tok + 15) / 16) * 3 * TILE_BYTES;
}

/* Tile (kb, nt, part) of the packed activations. */
static inline size_t tile_off(int64_t kb, int64_t nt, int p, int64_t n_nt) {
    return ((size_t)(kb * n_nt + nt) * 3 + (size_t)p) * TILE_BYTES;
}

void lmc_cpu_amx_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    const int64_t in = w->ne[0], n_nt = (n_tok + 15) / 16;
    uint16_t *pk = buf;
    memset(buf, 0, lmc_cpu_amx_act_bytes(w, n_tok)); /* padding tokens stay zero */
    for (int64_t t = 0; t < n_tok; t++) {
        const float *xt = x + (size_t)t * in;
        const int64_t nt = t / 16, n = t % 16;
        for (int64_t i = 0; i < in; i++) {
            const float v = xt[i];
            const uint16_t b1 = lmc_f32_to_bf16(v);
            const float r1 = v - lmc_bf16_to_f32(b1);
            const uint16_t b2 = lmc_f32_to_bf16(r1);
            const uint16_t b3 = lmc_f32_to_bf16(r1 - lmc_bf16_to_f32(b2));
            const int64_t kb = i / 32, r = (i % 32) / 2;
            const size_t at = (size_t)r * 32 + (size_t)n * 2 + (size_t)(i % 2); /* u16 index inside a tile */
            pk[tile_off(kb, nt, 0, n_nt) / 2 + at] = b1;
            pk[tile_off(kb, nt, 1, n_nt) / 2 + at] = b2;
            pk[tile_off(kb, nt, 2, n_nt) / 2 + at] = b3;
        }
    }
}

#ifdef LMC_HAVE_AMX

typedef struct __attribute__((packed)) tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* tmm0..3: C for four token tiles; tmm4: weights; tmm5..7: the three activation parts. */
#define DP3(c, kb, nt)                                                                      \
    do {                                                                                    \
        _tile_loadd(5, pk + tile_off(kb, nt, 0, n_nt), 64);                                 \
        _tile_loadd(6, pk + tile_off(kb, nt, 1, n_nt), 64);                                 \
        _tile_loadd(7, pk + tile_off(kb, nt, 2, n_nt), 64);                                 \
        _tile_dpbf16ps(c, 4, 5);                                                            \
        _tile_dpbf16ps(c, 4, 6);                                                            \
        _tile_dpbf16ps(c, 4, 7);                                                            \
    } while (0)

int64_t lmc_cpu_amx_bf16_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1) {
    const int64_t in = w->ne[0], out = w->ne[1], n_kb = in / 32, n_nt = (n_tok + 15) / 16;
    const char *pk = xp;
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.colsb[i] = 64; cfg.rows[i] = 16; }
    _tile_loadconfig(&cfg);
    float c[16 * 16];
    int64_t o = o0;
    for (; o + 16 <= o1; o += 16) {
        const char *wrow = (const char *)w->data + (size_t)o * w->nb[1];
        for (int64_t nt0 = 0; nt0 < n_nt; nt0 += 4) {
            const int64_t nts = n_nt - nt0 < 4 ? n_nt - nt0 : 4;
            _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
            for (int64_t kb = 0; kb < n_kb; kb++) {
                /* tile loads of 16 strided rows defeat the hardware prefetcher: fetch the
                 * next 16-row block's line kb of every row while this one computes */
                if (nt0 == 0 && o + 32 <= o1)
                    for (int m = 0; m < 16; m++) _mm_prefetch(wrow + (size_t)(16 + m) * w->nb[1] + kb * 64, _MM_HINT_T1);
                _tile_loadd(4, wrow + kb * 64, (long)w->nb[1]);
                DP3(0, kb, nt0);
                if (nts > 1) DP3(1, kb, nt0 + 1);
                if (nts > 2) DP3(2, kb, nt0 + 2);
                if (nts > 3) DP3(3, kb, nt0 + 3);
            }
            for (int64_t j = 0; j < nts; j++) {
                switch (j) {
                case 0: _tile_stored(0, c, 64); break;
                case 1: _tile_stored(1, c, 64); break;
                case 2: _tile_stored(2, c, 64); break;
                default: _tile_stored(3, c, 64); break;
                }
                for (int64_t n = 0; n < 16; n++) {
                    const int64_t t = (nt0 + j) * 16 + n;
                    if (t >= n_tok) break;
                    for (int m = 0; m < 16; m++) y[(size_t)t * out + o + m] = c[m * 16 + n];
                }
            }
        }
    }
    _tile_release();
    return o; /* rows [o, o1) are left to the caller */
}

#else

int64_t lmc_cpu_amx_bf16_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1) {
    return o0;
}

#endif
