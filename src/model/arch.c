/* arch.c — descriptor rows, aliases and profile resolution. */
#include "arch.h"

#include <stdio.h>
#include <string.h>

#include "io/jsonfile.h"

/* Per-layer tensor names. */
static const lmc_names llama_names = {
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};
static const lmc_names sandwich_names = { /* gemma2/3 */
    .attn_norm = "input_layernorm", .attn_post_norm = "post_attention_layernorm",
    .ffn_norm = "pre_feedforward_layernorm", .ffn_post_norm = "post_feedforward_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};
static const lmc_names post_names = { /* olmo2/3: norms on the sublayer outputs only */
    .attn_post_norm = "post_attention_layernorm", .ffn_post_norm = "post_feedforward_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};
static const lmc_names glm4_names = {
    .attn_norm = "input_layernorm", .attn_post_norm = "post_self_attn_layernorm",
    .ffn_norm = "post_attention_layernorm", .ffn_post_norm = "post_mlp_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .gate_up = "mlp.gate_up_proj", .down = "mlp.down_proj",
};
static const lmc_names cohere_names = { /* parallel block: one norm feeds attention and MLP */
    .attn_norm = "input_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};
static const lmc_names glm_names = {
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .gate_up = "mlp.gate_up_proj", .down = "mlp.down_proj",
};
static const lmc_names plain_mlp_names = { /* arcee: up → act → down */
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .up = "mlp.up_proj", .down = "mlp.down_proj",
};
static const lmc_names vaultgemma_names = { /* gemma2 layout without the post norms */
    .attn_norm = "input_layernorm", .ffn_norm = "pre_feedforward_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};
static const lmc_names hunyuan_names = {
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.query_layernorm", .k_norm = "self_attn.key_layernorm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};
static const lmc_names nanochat_names = { /* parameter-free norms: names unused */
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .up = "mlp.fc1", .down = "mlp.fc2",
};
static const lmc_names phi_names = { /* parallel block, LayerNorms, fc1/fc2 */
    .attn_norm = "input_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.dense",
    .q_norm = "self_attn.q_layernorm", .k_norm = "self_attn.k_layernorm",
    .up = "mlp.fc1", .down = "mlp.fc2",
};
static const lmc_names phi3_names = {
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .qkv = "self_attn.qkv_proj", .o = "self_attn.o_proj",
    .gate_up = "mlp.gate_up_proj", .down = "mlp.down_proj",
};
static const lmc_names starcoder2_names = {
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .up = "mlp.c_fc", .down = "mlp.c_proj",
};

/* Rows. Unnamed fields are zero: RMSNorm, pre-norm block, no q/k norm, gated MLP,
 * biases from config, windows when set, no embedding scale, half-split rope. */
static const lmc_arch rows[] = {
    {.model_type = "llama", .prefix = "model.", .names = &llama_names,
     .notes = "RMSNorm, GQA, SwiGLU; optional attention/MLP biases; sliding windows when set (mistral, ministral)"},
    {.model_type = "qwen2", .bias = LMC_BIAS_QKV, .window = LMC_WINDOW_QWEN2, .prefix = "model.", .names = &llama_names,
     .notes = "llama block with q/k/v biases"},
    {.model_type = "qwen3", .qk_norm = LMC_QK_NORM_HEAD, .window = LMC_WINDOW_QWEN2, .prefix = "model.",
     .names = &llama_names, .notes = "llama block with per-head q/k RMSNorm before rope"},
    {.model_type = "smollm3", .window = LMC_WINDOW_QWEN2, .nope_interval = 4, .prefix = "model.", .names = &llama_names,
     .notes = "llama block with NoPE layers (no_rope_layers)"},
    {.model_type = "gemma", .norm = LMC_NORM_RMS_PLUS_ONE, .embed_scale_sqrt = 1, .act_default = "gelu_pytorch_tanh",
     .prefix = "model.",
     .names = &llama_names, .notes = "RMSNorm (1+w), embeddings × sqrt(hidden), GeGLU"},
    {.model_type = "gemma2", .norm = LMC_NORM_RMS_PLUS_ONE, .block = LMC_BLOCK_SANDWICH,
     .window = LMC_WINDOW_LAYER_TYPES, .sliding_pattern = 2, .embed_scale_sqrt = 1, .act_key = "hidden_activation",
     .act_default = "gelu_pytorch_tanh", .prefix = "model.", .names = &sandwich_names,
     .notes = "sandwich norms, attention and final logit softcaps, query_pre_attn_scalar, alternating sliding windows"},
    {.model_type = "gemma3_text", .norm = LMC_NORM_RMS_PLUS_ONE, .block = LMC_BLOCK_SANDWICH,
     .qk_norm = LMC_QK_NORM_HEAD, .window = LMC_WINDOW_LAYER_TYPES, .sliding_pattern = 6, .embed_scale_sqrt = 1,
     .act_key = "hidden_activation", .act_default = "gelu_pytorch_tanh", .prefix = "model.", .names = &sandwich_names,
     .notes = "gemma2 block with per-head q/k norms, 5:1 sliding/full layers, local and global rope"},
    {.model_type = "olmo2", .block = LMC_BLOCK_POST, .qk_norm = LMC_QK_NORM_FULL, .prefix = "model.",
     .names = &post_names, .notes = "norms after each sublayer, q/k RMSNorm over all heads"},
    {.model_type = "olmo3", .block = LMC_BLOCK_POST, .qk_norm = LMC_QK_NORM_FULL, .window = LMC_WINDOW_LAYER_TYPES,
     .sliding_pattern = 4, .prefix = "model.", .names = &post_names, .notes = "olmo2 block with 3:1 sliding/full layers"},
    {.model_type = "granite", .prefix = "model.", .names = &llama_names,
     .notes = "llama block with embedding, attention and residual multipliers and logits scaling"},
    {.model_type = "phi3", .mlp = LMC_MLP_GATED_FUSED, .prefix = "model.", .names = &phi3_names,
     .notes = "fused qkv and gate_up weights (bound as row views), longrope, partial rotary"},
    {.model_type = "starcoder2", .norm = LMC_NORM_LAYER, .mlp = LMC_MLP_PLAIN, .bias = LMC_BIAS_USE_BIAS,
     .use_bias_default = 1, .prefix = "model.", .names = &starcoder2_names,
     .notes = "LayerNorm with bias, plain gelu MLP, biases everywhere (use_bias)"},
    {.model_type = "cohere", .norm = LMC_NORM_LAYER, .block = LMC_BLOCK_PARALLEL, .qk_norm = LMC_QK_NORM_PER_HEAD_LN,
     .qk_norm_optional = 1, .rope_interleaved = 1, .prefix = "model.", .names = &cohere_names,
     .notes = "parallel attention + MLP from one LayerNorm, interleaved rope, logit_scale, optional per-head q/k LayerNorm"},
    {.model_type = "glm4", .block = LMC_BLOCK_SANDWICH, .mlp = LMC_MLP_GATED_FUSED, .bias = LMC_BIAS_QKV_CONFIG,
     .rope_interleaved = 1, .prefix = "model.", .names = &glm4_names,
     .notes = "sandwich norms, fused gate_up, interleaved partial rope"},
    {.model_type = "glm", .mlp = LMC_MLP_GATED_FUSED, .bias = LMC_BIAS_QKV_CONFIG, .rope_interleaved = 1,
     .prefix = "model.", .names = &glm_names, .notes = "fused gate_up, q/k/v biases, interleaved partial rope"},
    {.model_type = "helium", .bias = LMC_BIAS_QKV_CONFIG, .rope_interleaved = 1, .prefix = "model.",
     .names = &llama_names, .notes = "llama block with interleaved rope, q/k/v biases without an o bias"},
    {.model_type = "seed_oss", .prefix = "model.", .names = &llama_names,
     .notes = "llama block with q/k/v biases and a separate attention_out_bias"},
    {.model_type = "arcee", .mlp = LMC_MLP_PLAIN, .prefix = "model.", .names = &plain_mlp_names,
     .notes = "llama block with a plain relu² MLP (up → act → down)"},
    {.model_type = "exaone4", .block = LMC_BLOCK_POST, .qk_norm = LMC_QK_NORM_HEAD, .window = LMC_WINDOW_LAYER_TYPES,
     .sliding_pattern = 4, .nope_full_layers = 1, .prefix = "model.", .names = &post_names,
     .notes = "post-sublayer norms, per-head q/k norms, 3:1 sliding/full layers with NoPE full layers"},
    {.model_type = "cohere2", .norm = LMC_NORM_LAYER, .block = LMC_BLOCK_PARALLEL, .window = LMC_WINDOW_LAYER_TYPES,
     .sliding_pattern = 4, .nope_full_layers = 1, .rope_interleaved = 1, .prefix = "model.", .names = &cohere_names,
     .notes = "cohere block with 3:1 sliding/full layers, rope only on sliding layers"},
    {.model_type = "vaultgemma", .norm = LMC_NORM_RMS_PLUS_ONE, .window = LMC_WINDOW_LAYER_TYPES, .sliding_pattern = 2,
     .embed_scale_sqrt = 1, .act_key = "hidden_activation", .act_default = "gelu_pytorch_tanh", .prefix = "model.", .names = &vaultgemma_names,
     .notes = "gemma2 attention (softcaps, query_pre_attn_scalar, alternating windows) with pre-norms only"},
    {.model_type = "hunyuan_v1_dense", .qk_norm = LMC_QK_NORM_HEAD, .qk_norm_after_rope = 1, .prefix = "model.",
     .names = &hunyuan_names, .notes = "llama block with per-head q/k RMSNorm applied after rope"},
    {.model_type = "ernie4_5", .bias = LMC_BIAS_USE_BIAS, .rope_interleaved = 1, .prefix = "model.",
     .names = &llama_names, .notes = "llama block with interleaved rope, biases on every linear iff use_bias"},
    {.model_type = "nanochat", .qk_norm = LMC_QK_NORM_HEAD, .qk_norm_after_rope = 1, .mlp = LMC_MLP_PLAIN,
     .norm_no_weight = 1, .embed_norm = 1, .rope_negate = 1, .act_default = "relu2", .prefix = "model.",
     .names = &nanochat_names,
     .notes = "parameter-free RMSNorms (also on the embeddings), q/k norms after rope, relu² MLP, final softcap"},
    {.model_type = "phi", .norm = LMC_NORM_LAYER, .block = LMC_BLOCK_PARALLEL, .qk_norm = LMC_QK_NORM_HEAD,
     .qk_norm_optional = 1, .mlp = LMC_MLP_PLAIN, .bias = LMC_BIAS_ALL, .lm_head_bias = 1, .act_default = "gelu_new",
     .out_norm = "final_layernorm", .pending_fixture = 1, .prefix = "model.", .names = &phi_names,
     .notes = "parallel block from one LayerNorm, biases everywhere incl. the LM head, partial rotary, optional q/k LayerNorm"},
    {.model_type = "olmo", .norm = LMC_NORM_LAYER, .norm_no_weight = 1, .norm_eps_fixed = 1e-5, .pending_fixture = 1,
     .prefix = "model.",
     .names = &llama_names, .notes = "llama block with parameter-free LayerNorms (eps 1e-5); clip_qkv refused"},
};

static const lmc_wrapper wrappers[] = {
    {.outer_model_type = "gemma3", .text_model_type = "gemma3_text",
     .prefixes = {"model.language_model.", "language_model.model."},
     .lm_heads = {"lm_head.weight", "language_model.lm_head.weight"},
     .drop_prefixes = {"model.vision_tower.", "model.multi_modal_projector.", "vision_tower.", "multi_modal_projector."}},
};

static const struct { const char *from, *to; } aliases[] = {
    {"mistral", "llama"},
    {"ministral", "llama"},
};

#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))
#define N_ALIASES ((int)(sizeof aliases / sizeof aliases[0]))

int lmc_arch_count(void) { return N_ROWS; }

int lmc_arch_alias_at(int i, const char **from, const char **to) {
    if (i < 0 || i >= N_ALIASES) return 0;
    *from = aliases[i].from;
    *to = aliases[i].to;
    return 1;
}
const lmc_arch *lmc_arch_at(int i) { return i >= 0 && i < N_ROWS ? &rows[i] : NULL; }

const lmc_arch *lmc_arch_find(const char *model_type, const char **alias_from) {
    if (alias_from) *alias_from = NULL;
    for (int i = 0; i < N_ALIASES; i++) {
        if (strcmp(model_type, aliases[i].from) == 0) {
            if (alias_from) *alias_from = aliases[i].from;
            model_type = aliases[i].to;
            break;
        }
    }
    for (int i = 0; i < N_ROWS; i++)
        if (strcmp(rows[i].model_type, model_type) == 0) return &rows[i];
    return NULL;
}

static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63) la = 63;
    if (lb > 63) lb = 63;
    int d[64][64];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    }
    return d[la][lb];
}

const char *lmc_arch_nearest(const char *model_type) {
    const char *best = rows[0].model_type;
    int bd = 1 << 30;
    for (int i = 0; i < N_ROWS + N_ALIASES; i++) {
        const char *name = i < N_ROWS ? rows[i].model_type : aliases[i - N_ROWS].from;
        int d = edit_distance(model_type, name);
        /* a shared prefix (qwen2_moe vs qwen2) counts as close */
        if (strncmp(model_type, name, strlen(name)) == 0) d = d < 2 ? d : 2;
        if (d < bd) { bd = d; best = name; }
    }
    return best;
}

void lmc_arch_supported_list(char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < N_ROWS + N_ALIASES && at < cap; i++) {
        const char *name = i < N_ROWS ? rows[i].model_type : aliases[i - N_ROWS].from;
        int n = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", name);
        if (n < 0) break;
        at += (size_t)n;
    }
}

const char *lmc_tier_name(lmc_tier t) {
    switch (t) {
    case LMC_TIER_TARGETED: return "targeted";
    case LMC_TIER_GENERIC: return "generic";
    default: return "unsupported";
    }
}

lmc_status lmc_act_from_name(const char *name, lmc_act *out) {
    static const struct { const char *name; lmc_act act; } acts[] = {
        {"silu", LMC_ACT_SILU}, {"swish", LMC_ACT_SILU}, {"gelu", LMC_ACT_GELU},
        {"gelu_pytorch_tanh", LMC_ACT_GELU_TANH}, {"gelu_new", LMC_ACT_GELU_TANH}, {"gelu_fast", LMC_ACT_GELU_TANH},
        {"relu", LMC_ACT_RELU}, {"relu2", LMC_ACT_RELU2},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(name, acts[i].name) == 0) { *out = acts[i].act; return LMC_OK; }
    }
    return lmc_fail(LMC_ERR_UNSUPPORTED, "activation \"%s\" is not supported", name);
}

/* Knobs of the config the generic dense forward would otherwise ignore. */
static lmc_status check_knobs(const lmc_config *cfg, const lmc_arch *a) {
    lmc_act act;
    LMC_TRY(lmc_act_from_name(cfg->hidden_act, &act));
    int b;
    if (a->window == LMC_WINDOW_QWEN2 && lmc_config_bool(cfg, "use_sliding_window", &b) > 0 && b)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s with use_sliding_window=true is not supported yet", cfg->model_type);
    const lmc_rope_type rts[2] = {cfg->rope.type, cfg->rope_local.type};
    for (int i = 0; i < 2; i++) {
        lmc_rope_type rt = rts[i];
        if (rt != LMC_ROPE_DEFAULT && rt != LMC_ROPE_LINEAR && rt != LMC_ROPE_LLAMA3 && rt != LMC_ROPE_YARN &&
            rt != LMC_ROPE_LONGROPE)
            return lmc_fail(LMC_ERR_UNSUPPORTED,
                            "rope type \"%s\" is not supported yet for %s (supported: default, linear, llama3, yarn, longrope)",
                            lmc_rope_type_name(rt), cfg->model_type);
    }
    double clip;
    if (lmc_config_double(cfg, "clip_qkv", &clip) > 0)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "clip_qkv is not supported yet");
    if (cfg->head_dim * cfg->rope.partial_rotary_factor < 2)
        return lmc_fail(LMC_ERR_FORMAT, "head_dim %d leaves nothing to rotate", cfg->head_dim);
    return LMC_OK;
}

/* The activation as the arch names it: its config key, else its default. */
static void resolve_act(lmc_config *cfg, const lmc_arch *a) {
    char name[sizeof cfg->hidden_act];
    const char *key_val = NULL;
    if (a->act_key) lmc_json_get_string(cfg->text, a->act_key, &key_val);
    if (a->act_key) snprintf(name, sizeof name, "%s", key_val ? key_val : a->act_default ? a->act_default : "silu");
    else if (cfg->hidden_act_given) snprintf(name, sizeof name, "%s", cfg->hidden_act);
    else snprintf(name, sizeof name, "%s", a->act_default ? a->act_default : "silu");
    memcpy(cfg->hidden_act, name, sizeof name);
}

lmc_status lmc_profile_resolve(lmc_config *cfg, lmc_profile *out) {
    memset(out, 0, sizeof *out);
    const char *alias_from = NULL;
    const lmc_arch *a = lmc_arch_find(cfg->model_type, &alias_from);
    if (!a) {
        char list[1024];
        lmc_arch_supported_list(list, sizeof list);
        out->tier = LMC_TIER_UNSUPPORTED;
        return lmc_fail(LMC_ERR_UNSUPPORTED,
                        "model_type \"%s\" is not supported (nearest: %s). Supported: %s",
                        cfg->model_type, lmc_arch_nearest(cfg->model_type), list);
    }
    for (size_t i = 0; i < sizeof wrappers / sizeof wrappers[0]; i++)
        if (!strcmp(cfg->outer_model_type, wrappers[i].outer_model_type) &&
            !strcmp(cfg->model_type, wrappers[i].text_model_type))
            out->wrapper = &wrappers[i];
    if (strcmp(cfg->outer_model_type, cfg->model_type) != 0 && !out->wrapper)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "model_type \"%s\" wrapping \"%s\" is not supported (lmc runs the text "
                        "stack of: gemma3)", cfg->outer_model_type, cfg->model_type);
    resolve_act(cfg, a);
    if (a->pending_fixture)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "model_type \"%s\" is implemented but not yet held to F1 by a parity "
                        "fixture (tools/oracle/cases.py has its case); lmc refuses to run it unproven", a->model_type);
    LMC_TRY(check_knobs(cfg, a));
    out->tier = LMC_TIER_GENERIC;
    out->arch = a;
    out->graph = "dense";
    out->fidelity = "F1 (CPU f32 vs transformers float64, fixture-gated)";
    snprintf(out->id, sizeof out->id, "generic-dense:%s", a->model_type);
    if (alias_from) snprintf(out->alias_of, sizeof out->alias_of, "%s", alias_from);
    return LMC_OK;
}
