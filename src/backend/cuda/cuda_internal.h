/* cuda_internal.h — the CUDA backend's private context, shared by its host-side
 * files (cuda_backend.c: memory, dense ops, vtable; cuda_moe.c: mixture-of-experts
 * ops). Not for use outside src/backend/cuda/.
 */
#ifndef LMC_CUDA_INTERNAL_H
#define LMC_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "cuda_kernels.h"

typedef struct cuda_bind {
    const void *host;  /* the mapping bound */
    size_t nbytes;     /* its bytes (checkpoint layout) */
    int type;
    int64_t ne0, ne1;
    void *dev;         /* the device copy */
    size_t dev_bytes;  /* its bytes on the device (repacked layouts differ) */
    int refs;
} cuda_bind;

/* The weights' (and the tensors') device memory (cuda_arena.c): a reserved address range, physical granules mapped
 * at its end as it grows, weights packed at 256-byte alignment, freed ones leaving holes. */
typedef struct cuda_arena_map { unsigned long long h; size_t off, size; } cuda_arena_map;
typedef struct cuda_arena_hole { size_t off, size; } cuda_arena_hole;
typedef struct cuda_arena {
    int on, device;
    uintptr_t base;            /* the reserved range [base, base + span) */
    size_t span, gran;
    size_t top;                /* bytes below which weights (and holes) lie */
    size_t mapped;             /* bytes backed by physical memory, granules from base */
    size_t used;               /* bytes the live weights hold (aligned) */
    cuda_arena_map *maps;      /* the physical allocations, in address order */
    int n_maps, cap_maps;
    cuda_arena_hole *holes;    /* free ranges below top, never adjacent to each other */
    int n_holes, cap_holes;
} cuda_arena;

/* 1: the arena is on; 0: off (LMC_CUDA_ARENA=0, no VMM support): use cudaMalloc. */
int lmc_cuda_arena_init(cuda_arena *a, int device);
/* n bytes at 256-byte alignment; NULL when the arena is off or the device is out of memory. */
void *lmc_cuda_arena_alloc(cuda_arena *a, size_t n);
int lmc_cuda_arena_owns(const cuda_arena *a, const void *p);
/* p, n as allocated (waits for the device when it unmaps); pointers outside the arena are ignored. */
void lmc_cuda_arena_free(cuda_arena *a, void *p, size_t n);
/* Every mapping and the range returned; the arena is off afterwards. */
void lmc_cuda_arena_release(cuda_arena *a);

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    lmc_status err;           /* first deferred error (0: none) */
    char err_msg[256];
    void *ws_w; size_t ws_w_bytes; /* dequantized weight rows (f32 or bf16) */
    void *ws_x; size_t ws_x_bytes; /* activations as bf16 */
    void *ws_a; size_t ws_a_bytes; /* attention partials */
    void *stage; size_t stage_bytes; /* raw uploads of Q8_0/Q4_0 before the repack (freed at sync) */
    void *ws_m; size_t ws_m_bytes; /* matmul_id: gathered inputs, outputs and slot tables */
    void *host; size_t host_bytes; /* moe: host copies of router logits, ids, weights */
    cuda_bind *binds;
    int n_binds, cap_binds;
    cuda_arena arena;              /* where binds[].dev live (unless it is off: one cudaMalloc each) */
    cuda_arena tarena;             /* where alloc()'s tensors live (the same) */
    /* recordings (cuda_graph.c): workspaces reallocated so far (a recording made before a
     * reallocation is stale), a capture under way, an op that could not be recorded */
    unsigned ws_gen;
    int capturing, capture_bad;
    int graphs_off;                /* LMC_CUDA_GRAPHS=0, or a capture failed: no more recordings */
    void *blas_ws;                 /* cuBLAS's own workspace (fixed, so recordings may hold it) */
    size_t tensor_bytes;           /* device bytes of the tensors alloc() holds now (lmc_cuda_mem_stats) */
    unsigned *attn_done;           /* [LMC_CUDA_ATTN_DONE] decode attention's split counters, zero between
                                      calls (fixed; NULL with LMC_CUDA_ATTN_MERGE=0: a merge kernel) */
} cuda_ctx;

#define CTX(be) ((cuda_ctx *)(be)->ctx)
/* weight rows dequantized per cuBLAS call: this many bytes of workspace at most */
#define WS_W_BYTES ((size_t)64 << 20)
/* cuBLAS workspace (cublasSetWorkspace) */
#define LMC_CUDA_BLAS_WS ((size_t)32 << 20)

/* Deferred errors: the first one is kept and reported by the next sync(). */
void lmc_cuda_note(cuda_ctx *c, cudaError_t e, const char *what);
void lmc_cuda_note_blas(cuda_ctx *c, cublasStatus_t e, const char *what);
void lmc_cuda_note_msg(cuda_ctx *c, lmc_status st, const char *msg);
/* After a launch: a bad configuration shows here, a fault at the next sync. */
void lmc_cuda_launched(cuda_ctx *c, const char *what);
/* Workspace *p of capacity *cap grown to at least n bytes (NULL, error noted, on failure). */
void *lmc_cuda_ws(cuda_ctx *c, void **p, size_t *cap, size_t n);
/* The kernels' view of a tensor of this backend. */
lmc_cuda_w lmc_cuda_wdesc(const lmc_tensor *t);

/* y = W x (cuda_backend.c); x, y contiguous f32 */
void lmc_cuda_matmul(lmc_backend *be, lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *x);

/* cuda_ops.cu: x += r; y = rms_norm(x) (the backend's add_rms_norm) */
void lmc_cuda_add_rms_norm(cudaStream_t s, float *x, const float *r, float *y, int64_t d, int64_t rows, const void *w,
                           int wtype, int64_t w_rows, float eps, float w_offset);

/* cuda_ops.cu: rope of q and k, k and v stored into the caches (the backend's rope_store) */
void lmc_cuda_rope_store(cudaStream_t s, float *q, float *k, const float *v, float *kc, float *vc, int64_t hd,
                         int64_t hq, int64_t hkv, int64_t n_tok, int64_t n_ctx, int64_t n_seq, const int32_t *pos,
                         const int32_t *seq, const float *inv_freq, int n_rot, int interleaved, float attn_factor);

/* cuda_graph.c: the backend's graph_* entries (backend.h) */
int lmc_cuda_graph_begin(lmc_backend *be);
void *lmc_cuda_graph_end(lmc_backend *be);
int lmc_cuda_graph_replay(lmc_backend *be, void *g);
void lmc_cuda_graph_free(lmc_backend *be, void *g);

/* cuda_moe.c */
void lmc_cuda_op_moe_route(lmc_backend *be, lmc_tensor *ids, lmc_tensor *weights, const lmc_tensor *logits,
                        const lmc_tensor *sel_bias, const lmc_moe_route_op *op);
void lmc_cuda_op_matmul_id(lmc_backend *be, lmc_tensor *y, const lmc_tensor *experts, int n_experts,
                        const lmc_tensor *x, const lmc_tensor *ids);
void lmc_cuda_op_moe_sum(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *weights,
                      const lmc_tensor *shared, const lmc_tensor *shared_gate);
void lmc_cuda_op_add_bias_id(lmc_backend *be, lmc_tensor *y, const lmc_tensor *b, const lmc_tensor *ids);
void lmc_cuda_op_glu_clamp(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float alpha, float limit);

#endif
