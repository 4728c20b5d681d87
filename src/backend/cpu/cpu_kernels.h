/* cpu_kernels.h — row kernels of the CPU backend (internal).
 *
 * Each kernel works on a range of output rows so the backend can split work
 * over threads; the *_ref variants are the plain scalar reference kept for
 * tests. Decode-sized batches use dot kernels that read the weights in their
 * storage format (bf16, Q8_0, Q4_0, MLX 4/8-bit have SIMD kernels in
 * cpu_simd.c; other types dequantize one row at a time into scratch);
 * activations are prepared once per matmul (lmc_cpu_act_prepare) into a
 * layout the kernel of the weight type wants (Q8_0 blocks for the integer
 * kernels: Q8_0, Q4_0, MLX4/8 and Q4_K/Q5_K/Q6_K on AVX-512 VNNI).
 */
#ifndef LMC_CPU_KERNELS_H
#define LMC_CPU_KERNELS_H

#include "backend/backend.h"
#include "core/tensor.h"

/* Convert n elements of a plain float row of dtype t to f32. */
void lmc_cpu_row_to_f32(lmc_dtype t, const void *src, float *dst, int64_t n);

#define LMC_CPU_GEMM_MIN_TOKENS 8 /* batches this large use sgemm */
#define LMC_CPU_GEMM_BLOCK 64     /* weight rows converted per sgemm call */

/* Bytes of prepared activations for weight w and n_tok tokens (0: the kernel reads x as is). */
size_t lmc_cpu_act_bytes(const lmc_tensor *w, int64_t n_tok);
/* Prepare x f32 [in, n_tok] for w's decode kernel into buf (lmc_cpu_act_bytes bytes). */
void lmc_cpu_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf);
/* Bytes a token takes in that preparation when each token's stand alone (the SIMD kernels' layout:
 * tokens t0..t1 may then be prepared apart, at t0 times this), else 0 (the AMX layouts, or none). */
size_t lmc_cpu_act_token_bytes(const lmc_tensor *w, int64_t n_tok);

/* Rows of w that lmc_cpu_matmul_rows ranges start at multiples of when threads split a product
 * of n_tok tokens: 4 (the decode kernels' row quads), 16 (AMX tiles, lmc_cpu_simd_gemm) or
 * LMC_CPU_GEMM_BLOCK (sgemm over dequantized blocks: every thread count then makes the same sgemm
 * calls, whose summation order OpenBLAS may choose by shape, so 1 and 2 threads give the same bits). */
int64_t lmc_cpu_matmul_grain(const lmc_tensor *w, int64_t n_tok);

/* y[o, t] for o in [o0, o1), all t. xp: the prepared activations (or NULL when none are
 * needed). tmp: scratch of at least LMC_CPU_GEMM_BLOCK·in floats. */
void lmc_cpu_matmul_rows(float *y, const lmc_tensor *w, const float *x, const void *xp, int64_t n_tok, int64_t o0,
                         int64_t o1, float *tmp);
void lmc_cpu_matmul_rows_ref(float *y, const lmc_tensor *w, const float *x, int64_t n_tok, int64_t o0, int64_t o1);

/* ---- element-wise rows in vectors (cpu_rowops.c) ---- */

/* 1 when lmc_cpu_act_row computes act in vectors (SiLU, GELU's tanh form); the others stay scalar. */
int lmc_cpu_act_vectorized(lmc_act act);
/* y[i] = act(a[i]) · b[i] (b NULL: act(a[i])) for i < d, act one that lmc_cpu_act_vectorized takes. */
void lmc_cpu_act_row(lmc_act act, float *y, const float *a, const float *b, int64_t d);
/* Σ a[i]² in double. */
double lmc_cpu_sumsq(const float *a, int64_t d);
/* s[i] *= scale for i < n; returns the largest (−inf for n = 0; a NaN is never the largest). */
float lmc_cpu_scale_max(float *s, int64_t n, float scale);
/* s[i] = e^(s[i] − mx) for i < n; returns their sum (in double). */
double lmc_cpu_softmax_exp(float *s, int64_t n, float mx);
/* Attention of g_n query heads (q + g·qstride, g < g_n) over n cached rows of one KV head (k + j·stride,
 * j < n, hd wide): s[g·ld + j] = q_g · k_j. Blocks of rows are read once for all the heads. */
void lmc_cpu_attn_dots(const float *q, int64_t qstride, int g_n, const float *k, int64_t stride, int64_t n, int64_t hd,
                       float *s, int64_t ld);
/* out[g·ostride + i] += Σ_j w[g·ld + j] · v[j·stride + i] for g < g_n, i < hd, j < n (the weighted values,
 * blocks of rows read once for all the heads). */
void lmc_cpu_attn_wsum(const float *v, int64_t stride, const float *w, int64_t ld, int g_n, int64_t n, int64_t hd,
                       float *out, int64_t ostride);
/* y[0..16) = e^x[0..16), the vector exponential of lmc_cpu_act_row and lmc_cpu_softmax_exp (for tests). */
void lmc_cpu_exp_v16(const float *x, float *y);

/* ---- SIMD decode kernels (cpu_simd.c); each returns 0 when this build has none for w ---- */

/* 1 when the AVX-512 (VNNI, VBMI) tier is on. */
int lmc_cpu_simd_avx512(void);
/* 1 when w's type has a SIMD decode kernel and this CPU runs it (probed once from CPUID). */
int lmc_cpu_simd_has(const lmc_tensor *w);
/* Allow (1, if the CPU can) or forbid (0) the SIMD decode kernels for later matmuls. */
void lmc_cpu_simd_enable(int on);
/* bf16 compute: BF16 weights meet their activations rounded to bf16 (to nearest even) in vdpbf16ps
 * products, decode and prefill (AMX: one bf16 part), when on is 1 and the CPU has AVX512-BF16 besides
 * the AVX-512 tier; else the exact f32 products. Process-wide, for later matmuls; returns the state. */
int lmc_cpu_simd_set_bf16_act(int on);
int lmc_cpu_simd_bf16_act(void);
/* Bytes / preparation of activations for that kernel (per token: see cpu_simd.c). */
size_t lmc_cpu_simd_act_bytes(const lmc_tensor *w, int64_t n_tok);
void lmc_cpu_simd_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf);
/* y[t·out + o] for o in [o0, o1) (any range), all t. The rows are read as 4 stretches side by
 * side with a software prefetch 4 KB ahead (LMC_STREAMS=1|2|4 and LMC_PF=<bytes> in the
 * environment override both, for measurements). */
void lmc_cpu_simd_matvec(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1);
/* Prefill-sized batches (≥ LMC_CPU_GEMM_MIN_TOKENS) of the types whose AVX-512 kernels take Q8_0
 * activations (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MLX4, MLX8, Q4_0R, Q8_0R; not MXFP4), and of BF16 / F16
 * (f32 activations, cpu_ftile.c): the decode kernels' arithmetic on the same prepared activations, in
 * tiles that decode each piece of their rows once for 4 tokens (Q4_0 / Q8_0 / BF16 / F16: 4 rows, the
 * others 2), rows in blocks of 16. lmc_cpu_simd_gemm_has: 1 when w takes it (the AVX-512 tier;
 * LMC_CPU_SIMD_GEMM=0: never). */
int lmc_cpu_simd_gemm_has(const lmc_tensor *w);
void lmc_cpu_simd_gemm(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1);

/* The instance of an always-inline tile(flag, T, args...) that a run-time flag (0/1) and token count T
 * (1..4) pick: each compiled with its loops unrolled (cpu_ftile.c, cpu_qr.c). */
#define LMC_CPU_TILE_SWITCH(tile, flag, T, ...)                      \
    switch ((T) + 4 * (flag)) {                                      \
    case 1: tile(0, 1, __VA_ARGS__); break;                          \
    case 2: tile(0, 2, __VA_ARGS__); break;                          \
    case 3: tile(0, 3, __VA_ARGS__); break;                          \
    case 4: tile(0, 4, __VA_ARGS__); break;                          \
    case 5: tile(1, 1, __VA_ARGS__); break;                          \
    case 6: tile(1, 2, __VA_ARGS__); break;                          \
    case 7: tile(1, 3, __VA_ARGS__); break;                          \
    default: tile(1, 4, __VA_ARGS__); break;                         \
    }

/* ---- BF16 / F16 prefill tiles on f32 activations (cpu_ftile.c; AVX-512) ---- */
/* out[t][k] = row r[k] · token t (f32 at xp + t·tb), k < 4, t < T ≤ 4. */
void lmc_cpu_ftile(lmc_dtype t, int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]);
/* The decode kernel: out[k] = row r[k] · one token (f32 at xp), prefetching pf bytes ahead in each row
 * (as cpu_simd.c's kernels), with the bits lmc_cpu_simd_gemm's tiles give that token in any batch
 * (the same chains and chunks of lmc_cpu_ftile_kc() inputs): a token's products do not depend on the
 * tokens batched with it. */
void lmc_cpu_ftile_rows4(lmc_dtype t, const char *const r[4], const float *xp, int64_t in, size_t pf, float out[4]);
/* The same products on activations rounded to bf16 (2 bytes an element), BF16 weights (AVX512-BF16),
 * T ≤ 6 tokens (out[8][4]: rows 6, 7 are scratch), and the decode kernel's 4 rows against one token
 * (prefetching, and the tiles' bits, as lmc_cpu_ftile_rows4). */
void lmc_cpu_bf16dot_tile(int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]);
void lmc_cpu_bf16dot_rows4(const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]);
/* h[i] = lmc_f32_to_bf16(x[i]) bit for bit (to nearest even, NaNs quieted), 16 at a time; in % 16 == 0. */
void lmc_cpu_bf16_round(const float *x, int64_t in, uint16_t *h);
/* Inputs per chunk of lmc_cpu_simd_gemm's BF16 / F16 tiles: 2048 (LMC_CPU_KC in the environment, a
 * multiple of 32, for measurements). */
int64_t lmc_cpu_ftile_kc(void);
/* BF16P weights (core/quant.h; the CPU backend packs BF16 matrices so, cpu_rebind.c):
 * y[t, o] = Σ_i w[o, i] x[t, i] for o in [o0, o1) (multiples of 16) and n_tok tokens of prepared
 * activations xp (tb bytes a token): bf16 (dp = 1, vdpbf16ps) or f32 (dp = 0, exact products). */
void lmc_cpu_bf16p_rows(float *y, const lmc_tensor *w, const void *xp, size_t tb, int64_t n_tok, int64_t o0, int64_t o1,
                        int dp);

/* ---- Q4_0R / Q8_0R, the CPU's regrouped Q4_0 / Q8_0 (cpu_qr.c; AVX-512 VNNI) ---- */
#define LMC_CPU_QR_CHUNK 640 /* prepared activations per 16 blocks of a token: codes, scales, offsets */
size_t lmc_cpu_qr_token_bytes(int64_t in);
/* out[k] = row r[k] · the token's prepared activations xp, k < 4 (pf: prefetch distance in bytes). */
void lmc_cpu_qr_rows4(lmc_dtype t, const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]);
/* out[t][k] = row r[k] · token tk (at xp + tk·tb), k < 2, tk < T ≤ 4. */
void lmc_cpu_qr_tile(lmc_dtype t, int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]);

/* ---- AMX bf16 prefill: bf16 weights, block types with LMC_CPU_AMX_INT8=0 (cpu_amx.c) ---- */

/* 1 when tiles may be used (AMX in the build, the kernel's permission, LMC_CPU_AMX not "0"). */
int lmc_cpu_amx_ok(void);
/* 1 when this matmul (weight w, n_tok tokens) may go through the bf16 AMX kernel (the int8
 * one, lmc_cpu_amx_int8_wants, is asked first). */
int lmc_cpu_amx_wants(const lmc_tensor *w, int64_t n_tok);
size_t lmc_cpu_amx_act_bytes(const lmc_tensor *w, int64_t n_tok);
void lmc_cpu_amx_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf);
/* The same in two steps: begin (one thread, before the parallel matmul) records x in buf;
 * finish (every thread that calls lmc_cpu_amx_rows on buf, first) packs units of the
 * activations claimed through an atomic counter and returns once all are packed. x must stay
 * unchanged until then. Threads that never call finish are not waited for. */
void lmc_cpu_amx_act_begin(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf);
void lmc_cpu_amx_act_finish(const lmc_tensor *w, int64_t n_tok, void *buf);
/* Rows [o0, o) for the largest o ≤ o1 with o - o0 a multiple of 16 (returns o; o0 when the
 * scratch cbuf of cbuf_floats is too small for this batch). bf16, Q8_0 and Q4_0 weights. */
int64_t lmc_cpu_amx_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                         float *cbuf, size_t cbuf_floats);
int64_t lmc_cpu_amx_bf16_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                              float *cbuf, size_t cbuf_floats);

/* ---- AMX int8 for block-quantized weights, 4+ tokens (cpu_amx_int8.c) ---- */

/* 1 when this matmul goes through the int8 tile kernel: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MLX4,
 * MLX8 weights, n_tok ≥ 4 (LMC_CPU_AMX_INT8_MIN=<n> moves the bound; LMC_CPU_AMX_INT8=0: never,
 * quantized prefill then takes the exact bf16 tiles of cpu_amx.c). */
int lmc_cpu_amx_int8_wants(const lmc_tensor *w, int64_t n_tok);
/* Activations quantized to 8-bit 32-blocks (as the decode kernels do) in B-tile layout. */
size_t lmc_cpu_amx_int8_act_bytes(const lmc_tensor *w, int64_t n_tok);
void lmc_cpu_amx_int8_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf);
/* The same in two steps, as lmc_cpu_amx_act_begin / _finish: finish is called by every thread
 * that runs lmc_cpu_amx_int8_rows on buf. */
void lmc_cpu_amx_int8_act_begin(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf);
void lmc_cpu_amx_int8_act_finish(const lmc_tensor *w, int64_t n_tok, void *buf);
/* Rows [o0, o1) (any range; returns o1, or o0 when the scratch is too small). */
int64_t lmc_cpu_amx_int8_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                              float *scratch, size_t scratch_floats);

/* ---- mixture of experts (cpu_moe.c) ---- */

/* Route tokens [t0, t1) (backend.h moe_route). scratch: 3·E floats. */
void lmc_cpu_moe_route_rows(int32_t *ids, float *w, const float *logits, const float *bias,
                            const lmc_moe_route_op *op, int64_t t0, int64_t t1, float *scratch);
/* y[:, t] = Σ_j w[j, t] x[:, j, t] (+ shared[:, t] · sigmoid(shared_gate[t]) or · 1) for t in [t0, t1). */
void lmc_cpu_moe_sum_rows(float *y, const float *x, const float *w, const float *shared, const float *shared_gate,
                          int64_t D, int k, int64_t t0, int64_t t1);

#endif
