/* moe.h — the generic mixture-of-experts block: a router and experts in place
 * of a dense layer's MLP, chosen by the descriptor row (arch.h lmc_moe_desc).
 *
 *   logits = router · h;  (ids, w) = route(logits)            (softmax / sigmoid / sparsemixer)
 *   y_j    = down_e(act(gate_e(h)) · up_e(h))  for e = ids[j]  (grouped by expert: each selected
 *                                                               expert's weights read once per forward)
 *            (gpt-oss: y_j = down_e(glu_clamp(gate_up_e(h) + b_e)) + b'_e, gate/up interleaved;
 *             or, from GGUF, gate_e and up_e separate with their own biases and glu_clamp_split)
 *   out    = Σ_j w_j · y_j  (+ shared(h) · [sigmoid(shared_gate · h)])
 *
 * The model owns the layers' expert views (bound in model.c; the weights stay
 * in the checkpoint mapping); the forward state owns one lmc_moe_scratch.
 */
#ifndef LMC_MODEL_MOE_H
#define LMC_MODEL_MOE_H

#include "backend/backend.h"
#include "config.h"

struct lmc_model;
struct lmc_arch;

/* One sparse layer's weights. Per-expert arrays hold views into the checkpoint
 * (per-expert tensors or rows of fused [E, ...] tensors alike). */
typedef struct lmc_moe_layer {
    lmc_tensor router;                   /* [D, E] */
    lmc_tensor sel_bias;                 /* f32 [E] expert-selection (correction) bias; data NULL: none */
    lmc_tensor *gate, *up, *down;        /* [E] each: [D, I], [D, I], [I, D] (gate NULL: plain up → act → down) */
    lmc_tensor sh_gate, sh_up, sh_down;  /* shared expert(s): [D, Is], [D, Is], [Is, D]; sh_down.data NULL: none */
    lmc_tensor sh_b_gate, sh_b_up, sh_b_down; /* [Is], [Is], [D] (data NULL when absent) */
    lmc_tensor sh_router;                /* [D, 1] sigmoid gate of the shared expert (qwen2_moe); data NULL: none */
    lmc_tensor router_b;                 /* f32 [E] router bias (gpt-oss); data NULL: none */
    lmc_tensor *gate_up;                 /* [E] each [D, 2I], gate/up rows interleaved (glu_clamp rows: gate and up
                                          * are NULL then); NULL: none */
    lmc_tensor b_gate_up, b_down;        /* f32 [2I, E], [D, E] per-expert biases (glu_clamp rows) */
    lmc_tensor b_gate, b_up;             /* f32 [I, E] each: the biases of separate gate / up (glu_clamp rows with
                                          * gate and up set and gate_up NULL: the GGUF form) */
    float glu_alpha, glu_limit;          /* glu_clamp parameters */
    int64_t n_expert_params;             /* parameters of one routed expert */
} lmc_moe_layer;

/* Step scratch of the MoE block, planned for the largest batch B. */
typedef struct lmc_moe_scratch {
    lmc_tensor logits;          /* f32 [E, B] router logits */
    lmc_tensor ids;             /* i32 [k, B] selected experts */
    lmc_tensor w;               /* f32 [k, B] their weights */
    lmc_tensor gate, up;        /* f32 [I, k·B] per-slot expert activations */
    lmc_tensor gate_up;         /* f32 [2I, k·B] interleaved gate/up (glu_clamp rows; [1, 1] otherwise) */
    lmc_tensor eout;            /* f32 [D, k·B] per-slot expert outputs */
    lmc_tensor sh_gate, sh_up;  /* f32 [Is, B] shared expert */
    lmc_tensor sh_out;          /* f32 [D, B] */
    lmc_tensor sh_logit;        /* f32 [1, B] */
} lmc_moe_scratch;

/* Check the config's MoE knobs against what the row's block implements (refuse, never ignore). */
lmc_status lmc_moe_check_config(const lmc_config *cfg, const struct lmc_arch *a);
/* Intermediate size of the shared expert(s) of this config and row (0: none). */
int lmc_moe_shared_size(const lmc_config *cfg, const struct lmc_arch *a);
/* Intermediate size of one routed expert. */
int lmc_moe_expert_size(const lmc_config *cfg, const struct lmc_arch *a);
/* Parameters of the routed experts a token does not use: Σ over sparse layers of (E - k) experts
 * (total - this = the active parameters per token). From the config alone, no weight read. */
int64_t lmc_moe_inactive_params(const lmc_config *cfg, const struct lmc_arch *a);
/* The routing op of this model (backend.h lmc_moe_route_op). */
lmc_moe_route_op lmc_moe_route_params(const lmc_config *cfg, const struct lmc_arch *a);

lmc_status lmc_moe_scratch_init(lmc_moe_scratch *s, const struct lmc_model *m, int n_batch_max);
void lmc_moe_scratch_free(lmc_moe_scratch *s, const struct lmc_model *m);

/* out [D, n] = the MoE block of layer L on h [D, n]. */
void lmc_moe_forward(const struct lmc_model *m, const lmc_moe_layer *L, lmc_moe_scratch *s, lmc_tensor *out,
                     const lmc_tensor *h, int n);

#endif
