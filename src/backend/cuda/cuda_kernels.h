/* cuda_kernels.h — the C-callable launchers of the CUDA backend's kernels.
 *
 * cuda_backend.c (C) owns memory, the stream, cuBLAS and the vtable; the .cu
 * files hold the kernels and these launchers, which only enqueue work on the
 * given stream and never allocate or synchronize. Pointers are device
 * pointers. Weights are described by lmc_cuda_w: Q8_0 / Q4_0 weights bound
 * through bind_weight are repacked (same bits, split planes: codes first,
 * then the f16 block scales) so that every lane loads 16 aligned bytes;
 * every other dtype keeps its checkpoint layout byte for byte.
 */
#ifndef LMC_CUDA_KERNELS_H
#define LMC_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight [in = ne0, out = ne1] (or any float table) as the kernels see it. */
typedef struct lmc_cuda_w {
    int type;            /* lmc_dtype */
    const void *data;    /* device */
    size_t nb1;          /* row stride in bytes (checkpoint layout; unused when repacked) */
    int64_t ne0, ne1;
    int repacked;        /* Q8_0/Q4_0 split planes: codes [ne1 rows of ne0 (q8) or ne0/2 (q4) bytes], then
                            f16 scales [ne1, ne0/32] at data + scale_off */
    size_t scale_off;
    /* MLX affine side data (device), rows of ne0/group */
    const void *mlx_scales, *mlx_biases;
    int mlx_stype;       /* lmc_dtype of scales/biases */
    size_t mlx_snb1;     /* row stride of scales/biases in bytes */
    int group;
} lmc_cuda_w;

/* 1 when the decode kernels are launched with programmatic dependent launch (sm_90+: each may
 * start, and load its weights, while the kernel before it finishes); LMC_CUDA_PDL=0 in the
 * environment: never. Per current device, cached. */
int lmc_cuda_pdl(void);
/* Tests: 1 / 0 forces it on (where the device has it) / off for this process; -1: the environment. */
void lmc_cuda_pdl_set(int on);

/* Bytes of the repacked planes of a Q8_0/Q4_0 weight and the offset of its scales. */
size_t lmc_cuda_repacked_bytes(int type, int64_t ne0, int64_t ne1, size_t *scale_off);
/* raw (checkpoint layout, rows of nb1 bytes) → repacked planes */
void lmc_cuda_repack(cudaStream_t s, int type, const void *raw, size_t nb1, int64_t ne0, int64_t ne1, void *dst,
                     size_t scale_off);

/* MXFP4 / MXFP4_MLX weights (cuda_qv_mxfp4.cu): 1 when they live in the device form (cuda_common.cuh)
 * and take the int8 decode path (LMC_CUDA_MXFP4_INT8=0 in the environment: never); bytes of that
 * form and the offset of ggml's exponent plane; raw (checkpoint layout, rows of nb1 bytes) → device
 * form; rows of the device form → bf16 [nr, ne0]. */
int lmc_cuda_mx_on(void);
size_t lmc_cuda_mx_bytes(int type, int64_t ne0, int64_t ne1, size_t *ex_off);
void lmc_cuda_mx_repack(cudaStream_t s, int type, const void *raw, size_t nb1, int64_t ne0, int64_t ne1, void *dst,
                        size_t ex_off);
void lmc_cuda_mx_dequant_bf16(cudaStream_t s, const lmc_cuda_w *w, int64_t r0, int64_t nr, uint16_t *dst);

/* ---- matmul pieces (cuda_matmul.cu) ---- */
/* 1 when the fast matrix-vector kernels take this weight with x of n_tok tokens. */
int lmc_cuda_gemv_ok(const lmc_cuda_w *w, const float *x, int64_t n_tok);
#define LMC_CUDA_GEMV_MAX_TOKENS 8
/* The most tokens the matrix-vector kernels take for a weight of this dtype and shape [ne0, ne1]:
 * LMC_CUDA_GEMV_MAX_TOKENS, but 2 for f16/bf16 matrices of at least 16M elements, whose products of
 * more tokens run faster as cuBLAS GEMMs on the tensor cores (LMC_CUDA_GEMV_FLOAT_TOKENS=n, 1..8, in
 * the environment: n for those; read once). */
int lmc_cuda_gemv_max_tokens(int type, int64_t ne0, int64_t ne1);
/* Several matrices of one dtype and input width over one x in one launch (f32/f16/bf16 through
 * k_gemv_multi, Q8_0/Q4_0 through k_gemv_q over the matrices' row groups, which quantizes the
 * activations once): 0 when these cannot, nothing launched. */
#define LMC_CUDA_GEMV_MULTI 3
int lmc_cuda_gemv_multi(cudaStream_t s, int n, float *const *y, const lmc_cuda_w *w, const float *x, int64_t n_tok);
/* y[t, o] = Σ_i w[o, i] x[t, i] for n_tok ≤ LMC_CUDA_GEMV_MAX_TOKENS (y rows of `out` floats).
 * Q8_0/Q4_0/Q4_K/Q5_K/Q6_K with int8 activations when lmc_cuda_gemv_int8 says so, else f32 activations. */
void lmc_cuda_gemv(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n_tok);
/* 1 when lmc_cuda_gemv quantizes the activations of this Q8_0/Q4_0 (or Q4_K/Q5_K/Q6_K, K a
 * multiple of 256) product to int8 per 32-element block (d = amax/127, q = rint(x·127/amax)) on the
 * current device: the shared memory holds them; LMC_CUDA_QGEMV=off in the environment turns it
 * off, LMC_CUDA_KQ_INT8=0 for the K-quants only (they then take lmc_cuda_gemv_kq). */
int lmc_cuda_gemv_int8(int type, int64_t ne0, int64_t n_tok);
/* A decode product with small ops folded in (backend.h matmul_fused): the input u is x (in 0),
 * rms_norm(x) with norm_w (NULL: none; f32/f16/bf16, 16-byte aligned), eps, w_offset (in 1), or
 * act(x)·x2 (in 2); the output y[i] = w[i]·u (out 0), y[0] += w[0]·u (out 1, n = 1), or
 * y[0] = act(w[0]·u)·(w[1]·u) (out 2, n = 2), or y[i] = w[i]·u followed by rope_store's work on
 * q = y[0], k = y[1], v = y[2] (out 3, n = 3; taken at one token for Q8_0/Q4_0 (in 0 or 1) and
 * f32/f16/bf16 (in 1) with n_rot = hd, hd a multiple of 4, the caches f32 [hd·hkv, n_ctx, n_seq]).
 * act is an lmc_act. */
typedef struct lmc_cuda_rope_kv {
    const int32_t *pos, *seq; /* [n_tok] */
    const float *inv;         /* [hd / 2] */
    float *kc, *vc;
    int64_t n_ctx, n_seq, kv_row; /* kv_row = hd · hkv */
    int hd, interleaved;
    float af;
} lmc_cuda_rope_kv;
typedef struct lmc_cuda_fuse {
    int in, out;
    const void *norm_w;
    int norm_type;
    float eps, w_offset;
    const float *x2;
    int act;
    lmc_cuda_rope_kv rope; /* out 3 */
} lmc_cuda_fuse;
/* 1 when launched; 0 when these kernels do not take this combination (nothing launched). The
 * answer depends on dtypes, shapes, n_tok and alignment only. */
int lmc_cuda_gemv_fused(cudaStream_t s, int n, float *const *y, const lmc_cuda_w *w, const float *x, int64_t n_tok,
                        const lmc_cuda_fuse *f);
/* Rows [r0, r0 + nr) of w as f32 (to_bf16 = 0) or bf16 (1), densely [nr, ne0]. */
void lmc_cuda_dequant_rows(cudaStream_t s, const lmc_cuda_w *w, int64_t r0, int64_t nr, void *dst, int to_bf16);
/* n f32 → bf16 */
void lmc_cuda_f32_to_bf16(cudaStream_t s, const float *x, uint16_t *y, int64_t n);

/* ---- element-wise and row ops (cuda_ops.cu); tensors contiguous ---- */
/* y[:, t] = table[:, ids[t]] · scale, d = table row length */
void lmc_cuda_get_rows(cudaStream_t s, float *y, const lmc_cuda_w *table, const int32_t *ids, int64_t n, float scale);
/* y[r, i] += b[i], b of a float dtype */
void lmc_cuda_add_bias(cudaStream_t s, float *y, const void *b, int btype, int64_t d, int64_t rows);
void lmc_cuda_add(cudaStream_t s, float *y, const float *a, const float *b, int64_t n);
void lmc_cuda_scale(cudaStream_t s, float *y, const float *x, float v, int64_t n);
/* w: NULL or [d, w_rows] of a float dtype (row r uses w row r mod w_rows) */
void lmc_cuda_rms_norm(cudaStream_t s, float *y, const float *x, int64_t d, int64_t rows, const void *w, int wtype,
                       int64_t w_rows, float eps, float w_offset);
void lmc_cuda_layer_norm(cudaStream_t s, float *y, const float *x, int64_t d, int64_t rows, const void *w, int wtype,
                         int64_t w_rows, const void *b, int btype, int64_t b_rows, float eps);
void lmc_cuda_rope(cudaStream_t s, float *x, int64_t hd, int64_t n_head, int64_t n_tok, const int32_t *pos,
                   const float *inv_freq, int n_rot, int interleaved, float attn_factor);
void lmc_cuda_kv_store(cudaStream_t s, float *cache, int64_t row, int64_t n_ctx, int64_t n_seq, const float *kv,
                       int64_t n, const int32_t *pos, const int32_t *seq);
void lmc_cuda_act_mul(cudaStream_t s, float *y, const float *gate, const float *up, int64_t n, int act);
void lmc_cuda_act(cudaStream_t s, float *y, const float *x, int64_t n, int act);
void lmc_cuda_softcap(cudaStream_t s, float *y, const float *x, int64_t n, float cap);
/* xIELU with p = {softplus(alpha_p), beta + softplus(alpha_n), beta, eps} (backend.h xielu) */
void lmc_cuda_xielu(cudaStream_t s, float *y, const float *x, int64_t n, const float p[4]);

/* ---- mixture of experts (cuda_ops.cu) ---- */
/* dst rows idx[j] = src rows j, rows of d floats, j < n */
void lmc_cuda_scatter_rows(cudaStream_t s, float *dst, const float *src, const int32_t *idx, int64_t n, int64_t d);
/* y[:, t] = Σ_j w[j, t] x[:, j, t] (+ shared[:, t] · (gate ? sigmoid(gate[t]) : 1)); y may alias shared */
void lmc_cuda_moe_sum(cudaStream_t s, float *y, const float *x, const float *w, const float *shared,
                      const float *gate, int64_t D, int k, int64_t n);
/* y[:, s] += b[:, ids[s]] for s < S (y [D, S], b [D, E]) */
void lmc_cuda_add_bias_id(cudaStream_t s, float *y, const float *b, const int32_t *ids, int64_t D, int64_t S);
/* y [D, n] = clamped GLU of the interleaved (gate, up) pairs of x [2D, n] (backend.h glu_clamp) */
void lmc_cuda_glu_clamp(cudaStream_t s, float *y, const float *x, int64_t D, int64_t n, float alpha, float limit);
/* y [n] = the same GLU of gate [n] and up [n] held apart (backend.h glu_clamp_split); y may alias gate */
void lmc_cuda_glu_clamp_split(cudaStream_t s, float *y, const float *gate, const float *up, int64_t n, float alpha,
                              float limit);

/* ---- attention (cuda_attn.cu) ---- */
/* Device bytes to bring into L2: pieces [k·stride, k·stride + piece) of [p, p + bytes), k = 0, 1, …
 * (piece = stride: all of it). */
typedef struct lmc_cuda_l2 {
    const void *p;
    size_t bytes, piece, stride;
} lmc_cuda_l2;
#define LMC_CUDA_L2_REGIONS 6
/* Bytes one thread asks the L2 to fetch at a time (l2_prefetch in cuda_common.cuh). */
#define LMC_L2_PIECE 4096
typedef struct lmc_cuda_l2set {
    lmc_cuda_l2 r[LMC_CUDA_L2_REGIONS];
    int n;
} lmc_cuda_l2set;

/* The persistent decode products (one token) give warp i rows [i·span, (i + 1)·span) of each of their
 * matrices, read front to back. Each such launch notes the span of its weights (by device address;
 * 0: not known, or the product's ranges are not per matrix), so a prefetch can take the rows its
 * warps read first. */
int64_t lmc_cuda_gemv_span(const void *w);
void lmc_cuda_gemv_span_note(const void *w, int64_t span);

typedef struct lmc_cuda_attn {
    const float *q;        /* [hd·n_head, n] */
    const float *k, *v;    /* [hd·n_kv_head, n_ctx, n_seq] */
    float *out;            /* [hd·n_head, n] */
    const int32_t *pos, *seq;
    int64_t n, n_ctx, n_seq;
    int n_head, n_kv_head, head_dim;
    float scale, softcap;
    int window;
    const float *sinks;    /* [n_head] attention-sink logits (backend.h lmc_attn_op.sinks), or NULL */
    unsigned *done;        /* NULL, or n · n_kv_head split counters (device, zero, left zero): the decode
                              kernel's last split of a (token, KV head) merges the splits itself */
} lmc_cuda_attn;
/* Counters the backend keeps for lmc_cuda_attn.done: n · n_kv_head may not exceed this. */
#define LMC_CUDA_ATTN_DONE 16384
/* Batches of at least this many tokens (head_dim ≤ 256, a multiple of 4) take the tensor-core
 * kernel (bf16 operands, f32 accumulation: F2); smaller ones the f32 kernels. */
#define LMC_CUDA_FATTN_MIN_TOKENS 64
/* Floats of scratch the split-K path needs for n tokens (0 when it needs none). */
size_t lmc_cuda_attn_scratch(const lmc_cuda_attn *a);
/* pf (or NULL): what the next ops read first (their weights): the decode kernel's spare blocks prefetch
 * it into L2 (a hint, no result depends on it; kept out of lmc_cuda_attn, whose size the kernels'
 * code is sensitive to: 35% slower decode attention with it inside). */
void lmc_cuda_attention(cudaStream_t s, const lmc_cuda_attn *a, float *scratch, const lmc_cuda_l2set *pf);

#ifdef LMC_CUDA_TRACE
/* The step timeline of a measurement build (cuda_trace.cuh): op 0 attaches a buffer of cap records
 * to the kernels of one translation unit, op 1 appends its records to f as text and frees it. */
#include <stdio.h>
void lmc_cuda_trace_qv_q8_0(int op, unsigned cap, FILE *f);
void lmc_cuda_trace_qv_q4_0(int op, unsigned cap, FILE *f);
void lmc_cuda_trace_attn(int op, unsigned cap, FILE *f);
#endif

/* ---- sampling reductions (cuda_sample.cu): x f32 [V, n] device rows; ws device workspace ---- */
/* Bytes of workspace each needs for n rows of V (k candidates). */
size_t lmc_cuda_argmax_ws(int64_t V, int64_t n);
size_t lmc_cuda_topk_ws(int64_t V, int64_t n, int k);
/* ids[t] = lmc_argmax of row t (backend.h argmax) */
void lmc_cuda_argmax(cudaStream_t s, int32_t *ids, const float *x, int64_t V, int64_t n, void *ws);
/* ids/vals [n, k], stats [n, 4] as backend.h topk, 1 ≤ k ≤ 256 */
void lmc_cuda_topk(cudaStream_t s, int32_t *ids, float *vals, float *stats, const float *x, int64_t V, int64_t n, int k,
                   float scale, void *ws);

/* ---- bf16 inputs of the prefill GEMMs (cuda_ops.cu): the f32 op's values rounded to bf16 ---- */
/* y = rms_norm(x) as lmc_cuda_rms_norm, written as bf16 */
void lmc_cuda_rms_norm_bf16(cudaStream_t s, uint16_t *y, const float *x, int64_t d, int64_t rows, const void *w,
                            int wtype, int64_t w_rows, float eps, float w_offset);
/* y = act(gate) · up as lmc_cuda_act_mul, written as bf16 */
void lmc_cuda_act_mul_bf16(cudaStream_t s, uint16_t *y, const float *gate, const float *up, int64_t n, int act);

/* ---- Q8_0/Q4_0/MXFP4 products of 3..64 tokens on the int8 tensor cores (cuda_mmq.cu) ---- */
#define LMC_CUDA_MMQ_MAX_TOKENS 64
/* 1 when lmc_cuda_mmq takes this weight with n_tok tokens: repacked Q8_0/Q4_0/MXFP4, n_tok up to
 * LMC_CUDA_MMQ_MAX_TOKENS and from 3 (the staged k_mmqp) or LMC_CUDA_GEMV_MAX_TOKENS + 1 (k_mmq)
 * on; LMC_CUDA_MMQ_MIN=n in the environment: from n on; LMC_CUDA_MMQ=0: never. */
int lmc_cuda_mmq_ok(const lmc_cuda_w *w, int64_t n_tok);
/* Force the smallest batch lmc_cuda_mmq_ok takes (tests: 9 leaves 1..8 tokens to k_gemv_q); n ≤ 0
 * restores the defaults. */
void lmc_cuda_mmq_min_set(int n);
/* 1 when lmc_cuda_mmq streams this weight through shared memory in stages (lmc_cuda_mmq_ok and K
 * a multiple of 128 (Q8_0) / 256 (Q4_0)); LMC_CUDA_MMQ_PIPE=0 in the environment: never. */
int lmc_cuda_mmq_pipelined(const lmc_cuda_w *w, int64_t n_tok);
/* Bytes of workspace the quantized activations of n_tok tokens of width K take. */
size_t lmc_cuda_mmq_ws(int64_t K, int64_t n_tok);
/* x [n_tok, K] f32 (16-byte aligned) → int8 per 32-element block into ws, for weights of dtype
 * type (Q8_0 or Q4_0): the quantization of lmc_cuda_gemv_int8's kernel. */
void lmc_cuda_mmq_quantize(cudaStream_t s, int type, const float *x, int64_t K, int64_t n_tok, void *ws);
/* y[i][t, o] (+)= Σ_k w[i][o, k] x[t, k] for n ≤ LMC_CUDA_GEMV_MULTI matrices of one dtype and
 * width over the activations lmc_cuda_mmq_quantize left in ws (acc: y += instead of y =).
 * Returns the launch's cudaError_t (0: launched). */
int lmc_cuda_mmq(cudaStream_t s, int n, float *const *y, const lmc_cuda_w *w, const void *ws, int64_t n_tok, int acc);

/* ---- decode products of the formats kept in checkpoint layout (cuda_gemv_q.cu) ---- */
/* 1 for the dtypes lmc_cuda_gemv_kq computes: Q2_K..Q6_K, Q4_1, Q5_0, Q5_1, MLX 2..8 bits. */
int lmc_cuda_gemv_kq_type(int type);
/* 1 when lmc_cuda_gemv_kq takes this weight with x of n_tok (1..LMC_CUDA_GEMV_MAX_TOKENS) tokens:
 * x and the data 16-byte aligned, whole blocks per row (MLX: a group of 32/64/128 dividing ne0);
 * LMC_CUDA_KQGEMV=0 in the environment: never. */
int lmc_cuda_gemv_kq_ok(const lmc_cuda_w *w, const float *x, int64_t n_tok);
/* y[t, o] (acc: +)= Σ_i w[o, i] x[t, i], f32 activations, weights widened in registers. */
void lmc_cuda_gemv_kq(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n_tok, int acc);

/* ---- mixture of experts on the device (cuda_moe_dev.cu): no host copy, no stream sync ---- */
/* The routing op (backend.h lmc_moe_route_op): score 0 softmax, 1 sigmoid, 2 sparsemixer. */
typedef struct lmc_cuda_moe_route {
    int score, n_expert, k, norm;
    float norm_min, norm_eps;
    int n_group, topk_group;
    float scale, jitter;
} lmc_cuda_moe_route;
/* 1 when lmc_cuda_moe_route_dev takes this op (k ≤ 64, n_group ≤ 256, E ≤ ~4500). */
int lmc_cuda_moe_route_ok(const lmc_cuda_moe_route *op);
/* ids I32 [k, n], w f32 [k, n] from logits f32 [E, n] (+ bias f32 [E] or NULL; each weight times
 * escale[id] when escale, f32 [E], is not NULL) as backend.h. */
void lmc_cuda_moe_route_dev(cudaStream_t s, int32_t *ids, float *w, const float *logits, const float *bias,
                            const float *escale, int64_t n, const lmc_cuda_moe_route *op);
#define LMC_CUDA_MOE_MAX_EXPERTS 256 /* the expert table travels in the launch's parameters */
#define LMC_CUDA_MOE_MAX_SLOTS 512   /* n·k of one grouped product */
#define LMC_CUDA_MOE_FUSED_SLOTS 64  /* up to this many slots the product's blocks group them */
/* Experts of one shape and dtype: w describes expert 0 (type, ne0 = in, ne1 = out, nb1, the
 * repacked scale offset), data[e] is expert e's device data; aux[e] expert e's MXFP4_MLX exponents
 * (rows of w.mlx_snb1 bytes; NULL for other dtypes). */
typedef struct lmc_cuda_moe_w {
    lmc_cuda_w w;
    int n_expert;
    const void *data[LMC_CUDA_MOE_MAX_EXPERTS];
    const void *aux[LMC_CUDA_MOE_MAX_EXPERTS];
} lmc_cuda_moe_w;
/* 1 when lmc_cuda_moe_mm takes these experts with x (16-byte aligned) over n_slots slots:
 * f32/f16/bf16, repacked Q8_0/Q4_0/MXFP4 (both layouts), the other GGUF blocks (not MLX), ne0 a
 * multiple of 32. */
int lmc_cuda_moe_mm_ok(const lmc_cuda_moe_w *e, const float *x, int64_t n_slots);
/* Bytes of device workspace lmc_cuda_moe_mm needs (the slot lists when n_slots > FUSED_SLOTS). */
size_t lmc_cuda_moe_mm_ws(int n_expert, int64_t n_slots);
/* y[:, s] = W_ids[s] · x[:, per_slot ? s : s / k] for the n_slots slots (y f32 [out, n_slots]),
 * slots grouped by expert on the device so each selected expert's rows are read once. Slots
 * whose id is outside [0, n_expert) are left unwritten. f32 activations, f32 accumulation. */
void lmc_cuda_moe_mm(cudaStream_t s, float *y, const lmc_cuda_moe_w *e, const float *x, int per_slot,
                     const int32_t *ids, int k, int64_t n_slots, void *ws);

#ifdef __cplusplus
}
#endif

#endif
