/* backend.h — the one interface every compute backend implements.
 *
 * A backend is a table of function pointers (lmc_backend_i) plus an opaque
 * context, as in ggml. Tensors passed to ops live on that backend (host
 * memory for cpu, device memory for cuda); model code never touches raw
 * device pointers. Kernels know nothing about models.
 *
 * Ops are enqueued in order and may run asynchronously; they do not return
 * errors (shape mismatches are bugs and assert). A backend that can fail at
 * run time (a CUDA launch) records the error and reports it from sync().
 *
 * Conventions: shapes innermost first (core/tensor.h). Activations are f32
 * [features, n_tokens]. Weights keep their storage dtype (f32/f16/bf16 now,
 * quantized formats later) and ops dispatch on it: no dequantized copies.
 */
#ifndef LMC_BACKEND_H
#define LMC_BACKEND_H

#include "core/status.h"
#include "core/tensor.h"

typedef struct lmc_backend lmc_backend;

typedef enum lmc_act {
    LMC_ACT_SILU = 0,
    LMC_ACT_GELU,       /* exact: x/2 (1 + erf(x/√2)) */
    LMC_ACT_GELU_TANH,  /* tanh approximation */
    LMC_ACT_RELU,
    LMC_ACT_RELU2,      /* relu(x)² */
} lmc_act;

/* Rotary embedding of one tensor of heads. */
typedef struct lmc_rope_op {
    int n_rot;                  /* rotated dims per head (even, ≤ head_dim); the rest pass through */
    int interleaved;            /* 1: pairs (2i, 2i+1) (GPT-J); 0: halves (i, i + n_rot/2) (GPT-NeoX, HF llama) */
    float attn_factor;          /* multiplies cos and sin (yarn / longrope attention scaling); 1 = none */
    const lmc_tensor *inv_freq; /* f32 [n_rot/2] on this backend: angle = pos · inv_freq[i] */
} lmc_rope_op;

/* Attention of a batch of queries over a per-layer KV cache. */
typedef struct lmc_attn_op {
    int n_head, n_kv_head, head_dim;
    float scale;    /* multiplies q·k */
    float softcap;  /* 0: none; else scores = softcap · tanh(scores / softcap) */
    int window;     /* 0: every earlier position; else only positions > pos - window */
    const lmc_tensor *sinks; /* f32 [n_head] on this backend, or NULL: head h's softmax also counts one
                              * logit sinks[h] that no value follows (attention sinks, gpt-oss):
                              * weights exp(s_i - m) / (Σ_j exp(s_j - m) + exp(sinks[h] - m)),
                              * m = max(max_j s_j, sinks[h]) */
    const lmc_tensor *next_w[3]; /* weights of this backend the ops after attention read, in order (o_proj,
                                  * then gate and up), or NULL: a backend may start bringing them (or the
                                  * parts its products read first) into its cache while attention runs
                                  * (a hint; results never depend on it) */
} lmc_attn_op;

/* Mixture-of-experts routing: how token t's expert ids and weights come from its router
 * logits l[0..E) (f32 [E] per token; the math of each transformers model, in f32).
 *   SOFTMAX:      p = softmax(l); choose the k largest of p + sel_bias; weights p of those.
 *   SIGMOID:      p = sigmoid(l); c = p + sel_bias; with n_group > 1, group g scores the sum of
 *                 the 2 largest c in it (the largest alone when a group has one expert), the
 *                 topk_group best groups are kept and c of every other group's experts is set
 *                 to 0 (0, not -inf, as transformers does); choose the k largest c; weights p.
 *   SPARSEMIXER:  phimoe at inference, k = 2: for round r, m = max of the remaining logits
 *                 (round 2 drops round 1's expert), expert j is masked when
 *                 (m - l_j) / max(|l_j|, m) > 2·jitter; the weight is the softmax over the
 *                 unmasked remaining logits at the argmax. No renormalization, no scale.
 * Then (SOFTMAX, SIGMOID) with norm: w /= max(Σw, norm_min) + norm_eps; finally w *= scale, and
 * w *= expert_scale[id] when expert_scale is given (every kind).
 * Ids come out in descending order of the choice score (ties: the lower id first; SPARSEMIXER:
 * round 1 then round 2), weights in the same order. Reductions may use any order (f32 result). */
typedef enum lmc_moe_score { LMC_MOE_SOFTMAX = 0, LMC_MOE_SIGMOID, LMC_MOE_SPARSEMIXER } lmc_moe_score;

typedef struct lmc_moe_route_op {
    lmc_moe_score score;
    int n_expert;          /* E (rows of the logits) */
    int k;                 /* experts per token (rows of ids / weights) */
    int norm;              /* renormalize the k weights */
    float norm_min;        /* denominator floor (ernie4_5_moe moe_norm_min); 0 = none */
    float norm_eps;        /* added to the denominator (1e-20 for the sigmoid routers); 0 = none */
    int n_group, topk_group; /* SIGMOID grouped selection; n_group ≤ 1 = none */
    float scale;           /* routed_scaling_factor (1 = none) */
    float jitter;          /* SPARSEMIXER router_jitter_noise */
    const lmc_tensor *expert_scale; /* f32 [E] backend tensor, a factor per chosen expert (gemma4's
                                     * per_expert_scale); NULL = none */
} lmc_moe_route_op;

/* How a fused decode product (matmul_fused below) forms its input u from x and what it does with
 * the products w[i] · u. */
typedef enum lmc_fuse_in {
    LMC_FUSE_IN_X = 0, /* u = x */
    LMC_FUSE_IN_RMS,   /* u = rms_norm(x) with norm_w, eps, w_offset (as rms_norm; u is never stored) */
    LMC_FUSE_IN_GLU,   /* u = act(x) · x2 (as act_mul; x2 f32 of x's shape) */
} lmc_fuse_in;
typedef enum lmc_fuse_out {
    LMC_FUSE_OUT_SET = 0, /* y[i] = w[i] · u */
    LMC_FUSE_OUT_ACC,     /* y[i] += w[i] · u  (the residual add) */
    LMC_FUSE_OUT_GLU,     /* n = 2, w[0] and w[1] of one shape: y[0] = act(w[0] · u) · (w[1] · u); y[1] unused */
    LMC_FUSE_OUT_ROPE,    /* n = 3 (q, k, v): y[i] = w[i] · u, then rope_store of them with rope, the caches,
                           * pos and seq below (y[0], y[1] reshaped to [head_dim, heads, n]) */
} lmc_fuse_out;
typedef struct lmc_fuse_op {
    lmc_fuse_in in;
    lmc_fuse_out out;
    const lmc_tensor *norm_w; /* IN_RMS: f32/f16/bf16 [ne0 of x], or NULL (no scale) */
    float eps, w_offset;      /* IN_RMS */
    const lmc_tensor *x2;     /* IN_GLU */
    lmc_act act;              /* IN_GLU, OUT_GLU */
    int head_dim;                       /* OUT_ROPE */
    const lmc_rope_op *rope;            /* OUT_ROPE */
    lmc_tensor *k_cache, *v_cache;      /* OUT_ROPE: as rope_store */
    const lmc_tensor *pos, *seq;        /* OUT_ROPE: as rope_store */
} lmc_fuse_op;

typedef struct lmc_backend_i {
    const char *name;
    void (*free)(lmc_backend *be);

    /* ---- memory ---- */
    /* Allocate t->data for t's (contiguous) shape and dtype; zero-filled. */
    lmc_status (*alloc)(lmc_backend *be, lmc_tensor *t);
    void (*release)(lmc_backend *be, lmc_tensor *t);
    /* Make a weight whose bytes live in host memory (a read-only mapping) usable
     * by ops: cpu points at it in place, a device backend copies it. */
    lmc_status (*bind_weight)(lmc_backend *be, lmc_tensor *t, const void *host);
    void (*unbind_weight)(lmc_backend *be, lmc_tensor *t);
    /* Host ↔ backend copies of nbytes at byte offset within a contiguous tensor. */
    void (*set)(lmc_backend *be, lmc_tensor *dst, const void *src, size_t offset, size_t nbytes);
    void (*get)(lmc_backend *be, void *dst, const lmc_tensor *src, size_t offset, size_t nbytes);
    /* Wait for enqueued work; reports a deferred error. */
    lmc_status (*sync)(lmc_backend *be);

    /* ---- ops (y is f32 unless stated; rows = ne[1]·ne[2]·ne[3]) ---- */
    /* y[:, t] = table[:, ids[t]] · scale. table any float dtype [D, V]; ids I32 [n]. */
    void (*get_rows)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *table, const lmc_tensor *ids, float scale);
    /* y[o, t] = Σ_i w[i, o] · x[i, t]   (w [in, out] any weight dtype, x f32 [in, n], y f32 [out, n]) */
    void (*matmul)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *x);
    /* y[:, t] += b  (b any float dtype [D]) */
    void (*add_bias)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *b);
    /* y = a + b (same shapes; y may alias a or b) */
    void (*add)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *a, const lmc_tensor *b);
    /* y = x · s (y may alias x) */
    void (*scale)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float s);
    /* Per row of ne[0]: y = x / rms(x) · (w + w_offset); w may be NULL (no scale). y may alias x.
     * w (and b below) may hold R rows [ne0, R]: row r of x then uses w row r mod R (per-head weights). */
    void (*rms_norm)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w, float eps, float w_offset);
    /* Per row: y = (x - mean) / sqrt(var + eps) · w + b; w, b may be NULL. */
    void (*layer_norm)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w, const lmc_tensor *b, float eps);
    /* In place on x [head_dim, n_heads, n_tokens]; pos I32 [n_tokens]. */
    void (*rope)(lmc_backend *be, lmc_tensor *x, const lmc_tensor *pos, const lmc_rope_op *op);
    /* Store rows of kv [row, n] into cache [row, n_ctx, n_seq] at slot (pos[t] mod n_ctx, seq[t]). */
    void (*kv_store)(lmc_backend *be, lmc_tensor *cache, const lmc_tensor *kv, const lmc_tensor *pos, const lmc_tensor *seq);
    /* out [head_dim·n_head, n]: token t (query rows q [head_dim·n_head, n]) attends, causally, to the
     * cached positions of its sequence seq[t] up to pos[t] (within op->window), K/V caches
     * [head_dim·n_kv_head, n_ctx, n_seq]; grouped-query heads share kv head h / (n_head / n_kv_head).
     * pos and seq hold what `set` put there, not the result of an op since (the CUDA decode kernel
     * reads them before it waits for the ops in front of it). */
    void (*attention)(lmc_backend *be, lmc_tensor *out, const lmc_tensor *q, const lmc_tensor *k_cache,
                      const lmc_tensor *v_cache, const lmc_tensor *pos, const lmc_tensor *seq, const lmc_attn_op *op);
    /* y = act(gate) · up (elementwise) */
    void (*act_mul)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *gate, const lmc_tensor *up, lmc_act act);
    /* y = act(x) */
    void (*act)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, lmc_act act);
    /* y = cap · tanh(x / cap) */
    void (*softcap)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float cap);

    /* ---- mixture of experts (model/moe.c) ---- */
    /* Route every token: logits f32 [E, n] → ids I32 [k, n] and weights f32 [k, n] per op (above).
     * sel_bias: f32 [E] added to the choice scores, or NULL. */
    void (*moe_route)(lmc_backend *be, lmc_tensor *ids, lmc_tensor *weights, const lmc_tensor *logits,
                      const lmc_tensor *sel_bias, const lmc_moe_route_op *op);
    /* y[:, j, t] = experts[ids[j, t]] · x[:, t]   for j < k, t < n  (y f32 [out, k, n], ids I32 [k, n]).
     * experts: a host array of n_experts weight descriptors of one shape [in, out], any weight dtype (one per
     * expert), each bound on this backend (bind_weight) with its own data pointer (they need not be adjacent).
     * x is f32 [in, n] (every slot of token t reads x[:, t]) or f32 [in, k, n] (slot (j, t) reads
     * x[:, j, t]; told apart by row count: n or k·n). Slots are grouped by expert so each selected
     * expert's weights are read once per call; an expert no slot selects is not touched. */
    void (*matmul_id)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *experts, int n_experts, const lmc_tensor *x,
                      const lmc_tensor *ids);
    /* y[:, t] = Σ_j weights[j, t] · x[:, j, t]  (+ shared[:, t] · g_t when shared is not NULL, with
     * g_t = sigmoid(shared_gate[0, t]) when shared_gate (f32 [1, n]) is not NULL, else 1).
     * x f32 [D, k, n], weights f32 [k, n], y and shared f32 [D, n]; y may alias shared. */
    void (*moe_sum)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *weights,
                    const lmc_tensor *shared, const lmc_tensor *shared_gate);

    /* y[:, j, t] += b[:, ids[j, t]]: a per-expert bias after matmul_id (y f32 [D, k, n] or [D, k·n],
     * b f32 [D, E], ids I32 [k, n]). */
    void (*add_bias_id)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *b, const lmc_tensor *ids);
    /* Clamped GLU over interleaved (gate, up) pairs (gpt-oss experts): x f32 [2·D, rows] holds gate
     * at even and up at odd positions of each row, y f32 [D, rows]:
     *   g = min(gate, limit), u = clamp(up, -limit, limit), y = (u + 1) · g · sigmoid(alpha · g).
     * y never aliases x. */
    void (*glu_clamp)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float alpha, float limit);
    /* The same GLU with gate and up in separate tensors (gpt-oss experts as GGUF stores them): gate, up and
     * y f32 [D, rows]; y may alias gate. Optional (NULL: the model refuses that form on this backend). */
    void (*glu_clamp_split)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *gate, const lmc_tensor *up, float alpha,
                            float limit);

    /* ---- activations with learned parameters ---- */
    /* xIELU (apertus), elementwise over x (f32, any shape; y may alias x):
     *   y = x > 0 ? p[0]·x² + p[2]·x : (expm1(min(x, p[3])) − x)·p[1] + p[2]·x
     * with p = {softplus(alpha_p), beta + softplus(alpha_n), beta, eps} as the model computes them
     * from the checkpoint (transformers' XIELUActivation; eps is negative, -1e-6). */
    void (*xielu)(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const float p[4]);

    /* ---- optional fused ops; NULL where a backend has none (the model then runs the plain ops) ---- */
    /* x += r, then y = rms_norm(x) with w, eps, w_offset as rms_norm above: the residual add and the
     * norm after it in one pass. x, r, y f32 [d, n], y distinct from x and r. */
    void (*add_rms_norm)(lmc_backend *be, lmc_tensor *x, const lmc_tensor *r, lmc_tensor *y, const lmc_tensor *w,
                         float eps, float w_offset);

    /* The attention inputs' position work in one pass: rope(q) and rope(k) in place as rope above,
     * then kv_store of k into k_cache and of v into v_cache. q [head_dim, Hq, n], k [head_dim, Hkv, n],
     * v [head_dim·Hkv, n]; caches as kv_store. */
    void (*rope_store)(lmc_backend *be, lmc_tensor *q, lmc_tensor *k, const lmc_tensor *v, lmc_tensor *k_cache,
                       lmc_tensor *v_cache, const lmc_tensor *pos, const lmc_tensor *seq, const lmc_rope_op *op);

    /* y[i] = w[i] · x for i < n (n ≤ 3) as matmul, the w[i] of one dtype and input width (q, k and v
     * of one input; gate and up): one pass over x where the backend can. */
    void (*matmul_n)(lmc_backend *be, int n, lmc_tensor *const *y, const lmc_tensor *const *w, const lmc_tensor *x);

    /* The small ops around a decode product folded into it. 1: done; 0: this backend does not take
     * this case and enqueued nothing (the caller runs the plain ops: rms_norm / act_mul, matmul_n,
     * add, act_mul, rope_store). Whether it takes a case depends on shapes, dtypes and alignment only, never
     * on values (recorded steps). The products are matmul's: n ≤ 3 weights of one dtype and input
     * width over u (op->in) of x f32 [in, t], outputs y[i] f32 [out_i, t] per op->out; y never
     * aliases x, x2 or norm_w. Results equal the plain sequence within F2 (the norm's scale may be
     * applied to the products' sums instead of to u, the reductions may be ordered differently). */
    int (*matmul_fused)(lmc_backend *be, int n, lmc_tensor *const *y, const lmc_tensor *const *w,
                        const lmc_tensor *x, const lmc_fuse_op *op);

    /* ---- optional sampling reductions (gen/sampler.c, gen/context.c); NULL where a backend has none ----
     * x is f32 [V, n] (contiguous rows of V logits). Both only enqueue (no host sync, no allocation
     * once their workspace has grown; launch shapes depend on V, n and k only), so they may be
     * recorded. The caller reads the results with get(), which waits. */
    /* ids I32 [n]: per row, lmc_argmax's answer exactly (gen/sampler.h): the index of the largest
     * value, the lowest index among equal ones (-0 equals +0); NaN at index > 0 is never chosen;
     * a NaN at index 0 gives 0 (lmc_argmax compares everything against it and nothing is larger);
     * a row of -inf (and NaN) gives 0. */
    void (*argmax)(lmc_backend *be, lmc_tensor *ids, const lmc_tensor *x);
    /* Per row t, with w_i = x[i, t] · scale (one f32 product, as the sampler's temperature), 1 ≤ k ≤ 256:
     *   ids I32 [k, n], vals f32 [k, n]: the k largest w sorted descending, equal w by lower index
     *     (-0 equals +0), NaN never chosen; vals are the w themselves (sign of zero kept). Slots
     *     past the row's count of non-NaN values: id -1, value -inf.
     *   stats f32 [4, n]: {m, s_hi, s_lo, 0} with m = max of the non-NaN w (-inf when none) and
     *     s = Σ_i exp((double)w_i − m) over the whole row summed in double in any order, handed
     *     back as s_hi = (float)s, s_lo = (float)(s − s_hi) (so s_hi + s_lo in double is s to
     *     ~2⁻⁴⁸ relative); s is NaN when a w is NaN or m is not finite.
     * The ids/vals are exactly the first k candidates of the host sampler's sorted list; s is
     * its normaliser up to summation order (a relative 1e-10 bounds the difference for V ≤ 2²⁰). */
    void (*topk)(lmc_backend *be, lmc_tensor *ids, lmc_tensor *vals, lmc_tensor *stats, const lmc_tensor *x, int k,
                 float scale);

    /* ---- optional: recorded op sequences (CUDA graphs); NULL where a backend has none ----
     * graph_begin: the ops enqueued from now on are recorded, not run (1: recording started).
     * graph_end: stops recording and returns the recording, or NULL when it could not be made
     * (an op needed a workspace to grow while recording, say: nothing was run, nothing is
     * reported; the caller runs the ops the ordinary way).
     * graph_replay: runs a recording in order with what is enqueued; 0 (nothing run) when a
     * workspace it used has been reallocated since, so the caller runs the ops and records anew.
     * A recording keeps the addresses and launch parameters of its ops: it stays valid only
     * while the tensors it touched keep their data, so callers key recordings by the shapes
     * and tensors of their step (model/forward.c). graph_free releases one (NULL is a no-op). */
    int (*graph_begin)(lmc_backend *be);
    void *(*graph_end)(lmc_backend *be);
    int (*graph_replay)(lmc_backend *be, void *g);
    void (*graph_free)(lmc_backend *be, void *g);
} lmc_backend_i;

struct lmc_backend {
    const lmc_backend_i *i;
    void *ctx; /* backend-private state */
};

typedef struct lmc_backend_params {
    const char *name; /* "cpu" (default) or "cuda" */
    int n_threads;    /* cpu: 0 = one per core */
    int device;       /* cuda: device index */
    /* cpu: precision of products with bf16 weights, process-wide: "f32" (exact f32 products, F1) or
     * "bf16" (the activations rounded to bf16 as PyTorch and llama.cpp do, F2; on CPUs with
     * AVX512-BF16, else f32); NULL leaves the process's setting (f32 at start). The CUDA backend's
     * prefill products are bf16 tensor-core ones whatever this says. */
    const char *compute;
} lmc_backend_params;

/* Create a backend by name. */
lmc_status lmc_backend_init(lmc_backend **out, const lmc_backend_params *p);
void lmc_backend_free(lmc_backend *be);

/* The CPU backend; `reference` selects the scalar single-threaded kernels
 * (kept built and tested as the oracle for every other kernel). */
lmc_status lmc_backend_cpu_init(lmc_backend **out, int n_threads, int reference);
/* The CPU's bf16 compute (lmc_backend_params.compute) on (1) or off; returns the state it took. */
int lmc_backend_cpu_set_bf16_compute(int on);
/* 1 while the CPU computes bf16 weights' products on bf16-rounded activations. */
int lmc_backend_cpu_bf16_compute(void);

#endif
