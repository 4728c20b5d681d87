/* tp.h — tensor parallelism (Megatron style): the shard plan, the per-rank
 * shard models and the all-reduce interface.
 *
 * N ranks each hold a shard of a model: attention heads split across ranks
 * (q/k/v output rows column-parallel, o_proj input columns row-parallel), the
 * MLP's (and every expert's) intermediate split the same way (gate/up rows,
 * down_proj input columns). Each rank's forward is the ordinary forward over
 * its shard (model/forward.c) with the sums completed by one all-reduce after
 * o_proj and one after down_proj (lmc_tp_reduce; the row-parallel biases are
 * held by rank 0 only, so they enter the sum once). Embeddings, norms and
 * routers are replicated; the LM head lives on rank 0 only.
 *
 *   lmc_tp_plan plan;                          // refuses what does not divide
 *   LMC_TRY(lmc_tp_plan_make(full, 2, &plan));
 *   lmc_model *s0, *s1;                        // views into full's weights (cpu) or copies (device)
 *   lmc_tp_shard_init(full, &plan, 0, be0, &s0); lmc_tp_shard_init(full, &plan, 1, be1, &s1);
 *   lmc_tp_comm *comm; lmc_tp_comm_host_init(&comm, 2);
 *   // on rank r's thread: lmc_tp_bind_thread(s_r, comm, r); lmc_forward(...); lmc_tp_bind_thread(NULL, NULL, 0);
 *
 * gen/tp_context.c runs this (one thread per rank) behind lmc_context.
 * Ownership: the full model (loaded on a cpu backend: host memory) must
 * outlive its shards; a shard owns its views, packed copies and bindings.
 */
#ifndef LMC_MODEL_TP_H
#define LMC_MODEL_TP_H

#include "model.h"

#define LMC_TP_MAX_RANKS 64

/* How a model splits over n_ranks. */
typedef struct lmc_tp_plan {
    int n_ranks;
    int n_heads, n_kv_heads;      /* per rank */
    int kv_replicated;            /* n_kv_heads < n_ranks: each rank holds the one KV head its q heads use */
    int intermediate, moe_intermediate, shared_intermediate; /* per rank (config fields divided) */
    int pack_slices;              /* copy strided slices into contiguous host memory even for cpu ranks
                                   * (what device ranks always get; 0 after lmc_tp_plan_make) */
} lmc_tp_plan;

/* Check that `full` can be split over n_ranks and fill the plan. LMC_ERR_UNSUPPORTED, naming
 * the dimension, when n_heads, n_kv_heads (unless n_kv_heads divides n_ranks: replicated), the
 * MLP or expert intermediate size is not divisible, when a split would cut a quantized block of
 * a weight, or for layouts that do not split (gemma4's targeted port, q/k norms over all heads). */
lmc_status lmc_tp_plan_make(const lmc_model *full, int n_ranks, lmc_tp_plan *out);

/* Rank `rank`'s shard of `full` as a model on backend `be` (which it borrows). On a cpu
 * backend every weight is a view into full's host memory (row-parallel weights are strided
 * views: ne[0] < the row stride); on another backend contiguous views are bound in place and
 * strided ones are packed into host copies the shard owns, then bound (a device copies them). */
lmc_status lmc_tp_shard_init(const lmc_model *full, const lmc_tp_plan *plan, int rank, lmc_backend *be,
                             lmc_model **out);
void lmc_tp_shard_free(lmc_model *shard);

/* Columns [c0, c0 + n) of a 2-D weight [in, out] as a strided view (same rows, same nb[1]);
 * MLX side data sliced alongside into *aux_out (which the view's aux then points at).
 * LMC_ERR_UNSUPPORTED when the cut does not fall on block (group) boundaries. */
lmc_status lmc_tp_view_cols(const lmc_tensor *w, int64_t c0, int64_t n, lmc_tensor *out, struct lmc_quant_mlx *aux_out);
/* Rows [r0, r0 + n) of a weight (a contiguous view); MLX side data as above. */
lmc_status lmc_tp_view_rows(const lmc_tensor *w, int64_t r0, int64_t n, lmc_tensor *out, struct lmc_quant_mlx *aux_out);

/* ---- the all-reduce ----------------------------------------------------------------------- */

typedef struct lmc_tp_comm lmc_tp_comm;

typedef struct lmc_tp_comm_i {
    const char *name;
    /* Called once on each rank's thread before its first reduce (device selection). */
    lmc_status (*thread_init)(lmc_tp_comm *c, int rank);
    /* y (f32, contiguous, on be) ← Σ over ranks of every rank's y, in place. Every rank calls it
     * with the same element count; the result is bitwise the same on every rank. */
    lmc_status (*all_reduce)(lmc_tp_comm *c, int rank, lmc_backend *be, lmc_tensor *y);
    /* A rank that fails outside a reduce calls this: waiting and later reduces return an error. */
    void (*abort)(lmc_tp_comm *c);
    void (*free)(lmc_tp_comm *c);
} lmc_tp_comm_i;

struct lmc_tp_comm {
    const lmc_tp_comm_i *i;
    int n_ranks;
    void *ctx;
};

/* Host all-reduce for ranks that are threads of one process: a barrier and a sum in shared
 * host buffers (rank r sums the r-th chunk over all ranks, in rank order, then every rank
 * copies the result). Works with any backend (non-cpu tensors are staged through get/set). */
lmc_status lmc_tp_comm_host_init(lmc_tp_comm **out, int n_ranks);
void lmc_tp_comm_free(lmc_tp_comm *c);

#ifdef LMC_CUDA
/* NCCL all-reduce over the CUDA devices devices[0..n_ranks) of this host (one thread per rank;
 * ncclCommInitAll with NCCL_NVLS_ENABLE=0). libnccl.so.2 is loaded at run time. */
lmc_status lmc_tp_comm_nccl_init(lmc_tp_comm **out, int n_ranks, const int *devices);
#endif

/* ---- the forward's hook ---------------------------------------------------------------------- */

/* Make `shard` the model this thread runs as rank `rank` of comm (NULL: none). */
void lmc_tp_bind_thread(const lmc_model *shard, lmc_tp_comm *comm, int rank);
/* The reduce point of the forward: y ← Σ over ranks when m is the shard bound to this thread;
 * a no-op for any other model. A failing reduce is recorded for lmc_tp_thread_status. */
void lmc_tp_reduce(const lmc_model *m, lmc_tensor *y);
/* Whether m is the shard bound to this thread (its forward then reduces across ranks). */
int lmc_tp_bound(const lmc_model *m);
/* First reduce error on this thread since lmc_tp_bind_thread (LMC_OK: none). */
lmc_status lmc_tp_thread_status(void);

#endif
