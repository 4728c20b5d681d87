/* gguf_view.h — a GGUF model seen as its Hugging Face checkpoint: HF tensor
 * names, torch-order shapes, and the bytes HF would hold.
 *
 * Most tensors point straight into the GGUF mapping. Two kinds are rebuilt
 * into buffers the view owns (see gguf_arch.h for why): llama's q/k weights
 * and biases get their rows unpermuted (any storage type: rows are whole
 * blocks), and the gemma family's norm weights get 1 subtracted (stored back
 * as F32). Config tensors (rope_freqs, rope_factors_*) are left out: their
 * content is in lmc_gguf_arch_config. A tensor with no HF name makes the open
 * fail, naming it (the weight audit's rule: nothing unaccounted for).
 * Stacked expert tensors (blk.N.ffn_{gate,up,down}_exps.weight, ne [in, out, E])
 * become E per-expert HF matrices [out, in] (gguf_arch.h names them) whose data
 * point at expert e's slice of the mapping (no copy; any storage type, rows are
 * whole blocks); E must equal {arch}.expert_count (LMC_ERR_FORMAT otherwise). A
 * 1-D ffn_gate_inp_shexp (llama.cpp's [n_embd]) is seen as HF's [1, D].
 *
 *     lmc_gguf_hf_view *v;
 *     lmc_gguf_hf_view_open(g, &v);           // g must outlive v
 *     const lmc_gguf_hf_tensor *t = lmc_gguf_hf_view_find(v, "model.layers.0.self_attn.q_proj.weight");
 *     ... t->shape (torch order), t->type (GGML id), t->data, t->nbytes ...
 *     lmc_gguf_hf_view_close(v);
 */
#ifndef LMC_IO_GGUF_VIEW_H
#define LMC_IO_GGUF_VIEW_H

#include "io/gguf.h"
#include "io/gguf_arch.h"

typedef enum lmc_gguf_hf_transform {
    LMC_GGUF_HF_AS_STORED = 0,  /* data points into the GGUF mapping */
    LMC_GGUF_HF_UNPERMUTED,     /* llama q/k: rows reordered into HF order (owned copy, same type) */
    LMC_GGUF_HF_NORM_MINUS_ONE, /* gemma norms: stored value - 1, as F32 (owned copy) */
} lmc_gguf_hf_transform;

typedef struct lmc_gguf_hf_tensor {
    const char *name;             /* HF name, owned by the view */
    uint32_t type;                /* GGML type id of data (F32 for NORM_MINUS_ONE) */
    int n_dims;
    int64_t shape[LMC_GGUF_MAX_DIMS]; /* torch order: outermost first (the GGUF ne reversed) */
    const void *data;
    size_t nbytes;
    const lmc_gguf_tensor *gguf;  /* the GGUF tensor it comes from */
    lmc_gguf_hf_transform transform;
} lmc_gguf_hf_tensor;

typedef struct lmc_gguf_hf_view lmc_gguf_hf_view;

/* Errors: those of lmc_gguf_arch_of; LMC_ERR_NOT_FOUND naming a tensor with
 * no HF counterpart; LMC_ERR_FORMAT (q/k rows not whole even-sized heads,
 * a norm weight that is not F32/F16/BF16, a missing head count); LMC_ERR_NOMEM. */
lmc_status lmc_gguf_hf_view_open(const lmc_gguf *g, lmc_gguf_hf_view **out);
void lmc_gguf_hf_view_close(lmc_gguf_hf_view *v); /* NULL is a no-op */

const lmc_gguf_arch_info *lmc_gguf_hf_view_arch(const lmc_gguf_hf_view *v);
/* Tensors in GGUF file order (config tensors skipped), i in [0, count). */
int64_t lmc_gguf_hf_view_count(const lmc_gguf_hf_view *v);
const lmc_gguf_hf_tensor *lmc_gguf_hf_view_at(const lmc_gguf_hf_view *v, int64_t i);
/* By HF name; NULL if absent. O(log n). */
const lmc_gguf_hf_tensor *lmc_gguf_hf_view_find(const lmc_gguf_hf_view *v, const char *hf_name);

#endif
