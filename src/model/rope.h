/* rope.h — the rope factory: a rope config → inverse frequencies + scaling.
 *
 * Mirrors transformers' modeling_rope_utils.py: inv_freq is computed in f32
 * as transformers does (base ** (arange(0, dim, 2) / dim) in float32), then
 * adjusted per rope type. The result feeds the backend's rope op.
 */
#ifndef LMC_MODEL_ROPE_H
#define LMC_MODEL_ROPE_H

#include "config.h"

#define LMC_ROPE_MAX_HALF 1024

typedef struct lmc_rope_table {
    int n_rot;                           /* rotated dims per head */
    float attn_factor;                   /* multiplies cos/sin */
    float inv_freq[LMC_ROPE_MAX_HALF];   /* [n_rot/2] */
    /* longrope: a forward whose largest position + 1 exceeds long_after uses
     * inv_freq_long instead (as transformers picks per forward call) */
    int has_long, long_after;
    float inv_freq_long[LMC_ROPE_MAX_HALF];
    /* dynamic NTK: inv_freq depends on the sequence length of the forward (lmc_rope_dynamic);
     * inv_freq above holds the table at max_position_embeddings (the unscaled one) */
    int dynamic, dyn_max_pos;
    double dyn_theta, dyn_factor;
} lmc_rope_table;

/* head_dim: per-head size; max_pos: config max_position_embeddings. */
lmc_status lmc_rope_build(const lmc_rope_config *rc, int head_dim, int max_pos, lmc_rope_table *out);

/* Dynamic NTK inverse frequencies for a forward whose sequence (every position of it, as a
 * full forward sees it) is seq_len long: transformers' _compute_dynamic_ntk_parameters with
 * seq_len = max(seq_len, max_position_embeddings), in float32 as torch computes it:
 *   base' = θ · (factor · L / max_pos − (factor − 1)) ^ (dim / (dim − 2)),  inv[i] = 1 / base'^(2i/dim).
 * out: [n_rot/2]. Only for a table with dynamic set. */
void lmc_rope_dynamic(const lmc_rope_table *rt, int seq_len, float *out);
/* The effective length the dynamic table depends on: max(seq_len, max_position_embeddings). */
int lmc_rope_dynamic_len(const lmc_rope_table *rt, int seq_len);

#endif
