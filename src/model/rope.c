/* rope.c — default, linear, dynamic (NTK), llama3, yarn and longrope inverse
 * frequencies, transcribed from transformers' modeling_rope_utils.py. Dynamic
 * NTK depends on the sequence length of each forward: lmc_rope_dynamic gives
 * the table a forward over that many positions uses (forward.c keeps the
 * per-sequence state transformers' dynamic_rope_update keeps). */
#include "rope.h"

#include <math.h>
#include <string.h>

static double yarn_mscale(double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* The dimension at which a wavelength makes num_rotations turns over max_pos positions. */
static double yarn_correction_dim(double num_rotations, int dim, double base, int max_pos) {
    return (dim * log(max_pos / (num_rotations * 2 * M_PI))) / (2 * log(base));
}

lmc_status lmc_rope_build(const lmc_rope_config *rc, int head_dim, int max_pos, lmc_rope_table *out) {
    if (!(rc->theta > 0) || !isfinite(rc->theta))
        return lmc_fail(LMC_ERR_FORMAT, "rope_theta must be positive and finite (got %g)", rc->theta);
    if (!(rc->partial_rotary_factor > 0 && rc->partial_rotary_factor <= 1))
        return lmc_fail(LMC_ERR_FORMAT, "partial_rotary_factor must be in (0, 1] (got %g)", rc->partial_rotary_factor);
    int dim = (int)((double)head_dim * rc->partial_rotary_factor);
    if (rc->rotary_dim > 0) {
        if (rc->rotary_dim > head_dim)
            return lmc_fail(LMC_ERR_FORMAT, "rotary_dim %d exceeds head_dim %d", rc->rotary_dim, head_dim);
        dim = rc->rotary_dim;
    }
    dim -= dim % 2;
    if (dim < 2 || dim / 2 > LMC_ROPE_MAX_HALF)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "rope over %d dims is out of range", dim);
    memset(out, 0, sizeof *out);
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
    case LMC_ROPE_DYNAMIC:
        if (!(rc->factor >= 1) || !isfinite(rc->factor))
            return lmc_fail(LMC_ERR_FORMAT, "dynamic rope needs a factor ≥ 1 (got %g)", rc->factor);
        if (dim < 4) return lmc_fail(LMC_ERR_UNSUPPORTED, "dynamic rope over %d dims is out of range", dim);
        out->dynamic = 1;
        out->dyn_max_pos = max_pos;
        out->dyn_theta = rc->theta;
        out->dyn_factor = rc->factor;
        lmc_rope_dynamic(out, max_pos, out->inv_freq);
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
    case LMC_ROPE_YARN: {
        int orig = rc->original_max_position_embeddings ? rc->original_max_position_embeddings : max_pos;
        double factor = rc->factor > 0 ? rc->factor : (double)max_pos / orig;
        if (!(factor > 0)) return lmc_fail(LMC_ERR_FORMAT, "yarn rope needs a positive factor");
        double att = rc->attention_factor;
        if (att < 0) {
            if (rc->mscale > 0 && rc->mscale_all_dim > 0) att = yarn_mscale(factor, rc->mscale) / yarn_mscale(factor, rc->mscale_all_dim);
            else att = yarn_mscale(factor, 1.0);
        }
        double beta_fast = rc->beta_fast > 0 ? rc->beta_fast : 32, beta_slow = rc->beta_slow > 0 ? rc->beta_slow : 1;
        double low = yarn_correction_dim(beta_fast, dim, rc->theta, orig);
        double high = yarn_correction_dim(beta_slow, dim, rc->theta, orig);
        if (rc->truncate) { low = floor(low); high = ceil(high); }
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001;
        for (int i = 0; i < half; i++) {
            float pos_freq = powf((float)rc->theta, (float)(2 * i) / (float)dim);
            float extra = 1.0f / pos_freq, inter = 1.0f / ((float)factor * pos_freq);
            float ramp = (float)(((double)i - low) / (high - low));
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float extra_w = 1.0f - ramp;
            out->inv_freq[i] = inter * (1.0f - extra_w) + extra * extra_w;
        }
        out->attn_factor = (float)att;
    } break;
    case LMC_ROPE_LONGROPE: {
        if (rc->n_short_factor != half || rc->n_long_factor != half)
            return lmc_fail(LMC_ERR_FORMAT, "longrope needs short_factor and long_factor of %d values each (got %d and %d)",
                            half, rc->n_short_factor, rc->n_long_factor);
        int orig = rc->original_max_position_embeddings ? rc->original_max_position_embeddings : max_pos;
        double factor = rc->factor > 0 ? rc->factor : (double)max_pos / orig;
        double att = rc->attention_factor;
        if (att < 0) att = factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log((double)orig));
        for (int i = 0; i < half; i++) {
            float base = powf((float)rc->theta, (float)(2 * i) / (float)dim);
            out->inv_freq[i] = 1.0f / ((float)rc->short_factor[i] * base);
            out->inv_freq_long[i] = 1.0f / ((float)rc->long_factor[i] * base);
        }
        out->has_long = 1;
        out->long_after = orig;
        out->attn_factor = (float)att;
    } break;
    default:
        return lmc_fail(LMC_ERR_UNSUPPORTED, "rope type \"%s\" is not implemented yet", lmc_rope_type_name(rc->type));
    }
    return LMC_OK;
}

int lmc_rope_dynamic_len(const lmc_rope_table *rt, int seq_len) {
    return seq_len > rt->dyn_max_pos ? seq_len : rt->dyn_max_pos;
}

void lmc_rope_dynamic(const lmc_rope_table *rt, int seq_len, float *out) {
    const int dim = rt->n_rot, half = dim / 2;
    /* torch: factor · L (an int64 tensor) promotes to float32; every step after stays float32 */
    const float L = (float)lmc_rope_dynamic_len(rt, seq_len), factor = (float)rt->dyn_factor;
    float ratio = factor * L / (float)rt->dyn_max_pos - (float)(rt->dyn_factor - 1.0);
    float base = (float)rt->dyn_theta * powf(ratio, (float)((double)dim / (double)(dim - 2)));
    for (int i = 0; i < half; i++) out[i] = 1.0f / powf(base, (float)(2 * i) / (float)dim);
}
