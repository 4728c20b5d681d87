/* rope.c — default, linear and llama3 rope (more types arrive with their fixtures). */
#include "rope.h"

#include <math.h>

lmc_status lmc_rope_build(const lmc_rope_config *rc, int head_dim, int max_pos, lmc_rope_table *out) {
    if (!(rc->theta > 0) || !isfinite(rc->theta))
        return lmc_fail(LMC_ERR_FORMAT, "rope_theta must be positive and finite (got %g)", rc->theta);
    if (!(rc->partial_rotary_factor > 0 && rc->partial_rotary_factor <= 1))
        return lmc_fail(LMC_ERR_FORMAT, "partial_rotary_factor must be in (0, 1] (got %g)", rc->partial_rotary_factor);
    int dim = (int)((double)head_dim * rc->partial_rotary_factor);
    dim -= dim % 2;
    if (dim < 2 || dim / 2 > LMC_ROPE_MAX_HALF)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "rope over %d dims is out of range", dim);
    out->n_rot = dim;
    out->attn_factor = 1.0f;
    const int half = dim / 2;
    /* transformers: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), all in float32 */
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)dim;
        out->inv_freq[i] = 1.0f / powf((float)rc->theta, e);
    }
    switch (rc->type) {
    case LMC_ROPE_DEFAULT:
        break;
    case LMC_ROPE_LINEAR:
        if (!(rc->factor > 0)) return lmc_fail(LMC_ERR_FORMAT, "linear rope needs a positive factor");
        for (int i = 0; i < half; i++) out->inv_freq[i] /= (float)rc->factor;
        break;
    case LMC_ROPE_LLAMA3: {
        if (!(rc->factor > 0) || !(rc->high_freq_factor > rc->low_freq_factor) || rc->low_freq_factor <= 0)
            return lmc_fail(LMC_ERR_FORMAT, "llama3 rope needs factor > 0 and high_freq_factor > low_freq_factor > 0");
        int old_ctx = rc->original_max_position_embeddings ? rc->original_max_position_embeddings : max_pos;
        /* transformers computes these in float32 tensors with python-float scalars */
        float factor = (float)rc->factor, lo = (float)rc->low_freq_factor, hi = (float)rc->high_freq_factor;
        float low_wavelen = (float)old_ctx / lo, high_wavelen = (float)old_ctx / hi;
        for (int i = 0; i < half; i++) {
            float f = out->inv_freq[i];
            float wavelen = 2.0f * (float)M_PI / f;
            float scaled = wavelen > low_wavelen ? f / factor : f;
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
                float smooth = ((float)old_ctx / wavelen - lo) / (hi - lo);
                scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
            }
            out->inv_freq[i] = scaled;
        }
    } break;
    default:
        return lmc_fail(LMC_ERR_UNSUPPORTED, "rope type \"%s\" is not implemented yet", lmc_rope_type_name(rc->type));
    }
    return LMC_OK;
}
