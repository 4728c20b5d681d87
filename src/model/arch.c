/* arch.c — descriptor rows, aliases and profile resolution. */
#include "arch.h"

#include <stdio.h>
#include <string.h>

#include "io/jsonfile.h"
#include "moe.h"
#include "gemma4.h"

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
static const lmc_names gpt_oss_names = {
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .sinks = "self_attn.sinks",
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
static const lmc_names gpt_neox_names = { /* fused per-head qkv; ffn_norm feeds the MLP (parallel or not) */
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .qkv = "attention.query_key_value", .o = "attention.dense",
    .up = "mlp.dense_h_to_4h", .down = "mlp.dense_4h_to_h",
};
static const lmc_names gpt2_names = { /* Conv1D weights [in, out] */
    .attn_norm = "ln_1", .ffn_norm = "ln_2", .qkv = "attn.c_attn", .o = "attn.c_proj",
    .up = "mlp.c_fc", .down = "mlp.c_proj",
};
static const lmc_names gptj_names = {
    .attn_norm = "ln_1", .q = "attn.q_proj", .k = "attn.k_proj", .v = "attn.v_proj", .o = "attn.out_proj",
    .up = "mlp.fc_in", .down = "mlp.fc_out",
};
static const lmc_names falcon_names = { /* one input norm (parallel), or input + post-attention (sequential) */
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .qkv = "self_attention.query_key_value", .o = "self_attention.dense",
    .up = "mlp.dense_h_to_4h", .down = "mlp.dense_4h_to_h",
};
static const lmc_names falcon_new_names = { /* new_decoder_architecture with two parallel norms */
    .attn_norm = "ln_attn", .ffn_norm = "ln_mlp",
    .qkv = "self_attention.query_key_value", .o = "self_attention.dense",
    .up = "mlp.dense_h_to_4h", .down = "mlp.dense_4h_to_h",
};
static const lmc_names stablelm_names = { /* q/k_layernorm.norms.<h>: one LayerNorm per head */
    .attn_norm = "input_layernorm", .ffn_norm = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_layernorm", .k_norm = "self_attn.k_layernorm",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
};
static const lmc_names apertus_names = {
    .attn_norm = "attention_layernorm", .ffn_norm = "feedforward_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",
    .up = "mlp.up_proj", .down = "mlp.down_proj",
};

static int cfg_flag(const lmc_config *cfg, const char *key, int dflt) {
    int b;
    return lmc_config_bool(cfg, key, &b) > 0 ? b : dflt;
}

/* falcon: the decoder layout follows new_decoder_architecture, multi_query, parallel_attn and
 * num_ln_in_parallel_attn (transformers' FalconDecoderLayer); ALiBi is refused by name. */
static lmc_status falcon_variant(lmc_config *cfg, lmc_profile *p) {
    if (cfg_flag(cfg, "alibi", 0))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "falcon with alibi=true (ALiBi attention biases instead of rope) is not supported");
    const int new_arch = cfg_flag(cfg, "new_decoder_architecture", 0), mq = cfg_flag(cfg, "multi_query", 1);
    const int par = cfg_flag(cfg, "parallel_attn", 1);
    int64_t nln = 0;
    if (lmc_config_int(cfg, "num_ln_in_parallel_attn", &nln) < 0)
        return lmc_fail(LMC_ERR_FORMAT, "config.json: num_ln_in_parallel_attn must be an integer or null");
    cfg->use_bias = cfg_flag(cfg, "bias", 0);
    p->names = &falcon_names;
    if (new_arch) {
        if (!par) return lmc_fail(LMC_ERR_UNSUPPORTED, "falcon new_decoder_architecture with parallel_attn=false is not supported");
        if (nln != 0 && nln != 1 && nln != 2)
            return lmc_fail(LMC_ERR_FORMAT, "config.json: num_ln_in_parallel_attn must be 1 or 2");
        /* one shared norm (num_ln_in_parallel_attn=1) has no fixture yet */
        if (nln == 1) return lmc_fail(LMC_ERR_UNSUPPORTED, "falcon with num_ln_in_parallel_attn=1 is not supported yet");
        p->qkv_layout = LMC_QKV_GROUPED; /* n_kv_heads: num_kv_heads (config.c) */
        p->block = LMC_BLOCK_PARALLEL2;
        p->names = &falcon_new_names;
    } else {
        if (nln == 2) return lmc_fail(LMC_ERR_UNSUPPORTED, "falcon with num_ln_in_parallel_attn=2 needs new_decoder_architecture");
        /* the sequential layout (parallel_attn=false, falcon-rw) comes with alibi; without it there is no fixture */
        if (!par) return lmc_fail(LMC_ERR_UNSUPPORTED, "falcon with parallel_attn=false is not supported yet");
        cfg->n_kv_heads = mq ? 1 : cfg->n_heads;
        p->qkv_layout = mq ? LMC_QKV_CONCAT : LMC_QKV_GROUPED; /* per-head [q k v]: gpt-neox's layout */
        p->block = LMC_BLOCK_PARALLEL;
    }
    return LMC_OK;
}

/* gpt2 (and gpt_bigcode): knobs that change the math and have no fixture yet are refused by name. */
static lmc_status gpt2_variant(lmc_config *cfg, lmc_profile *p) {
    (void)p;
    const char *mt = cfg->model_type;
    if (!cfg_flag(cfg, "scale_attn_weights", 1))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s with scale_attn_weights=false is not supported yet", mt);
    if (cfg_flag(cfg, "scale_attn_by_inverse_layer_idx", 0))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s with scale_attn_by_inverse_layer_idx=true is not supported yet", mt);
    if (cfg_flag(cfg, "add_cross_attention", 0))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s with add_cross_attention (an encoder-decoder) is not supported", mt);
    return LMC_OK;
}

/* gpt_bigcode (StarCoder, SantaCoder): gpt2's block with Linear weights; c_attn holds the q heads
 * then one K and one V head (multi_query, the default), or per head [q k v] (multi_query false). */
static lmc_status gpt_bigcode_variant(lmc_config *cfg, lmc_profile *p) {
    LMC_TRY(gpt2_variant(cfg, p));
    const int mq = cfg_flag(cfg, "multi_query", 1);
    cfg->n_kv_heads = mq ? 1 : cfg->n_heads;
    p->qkv_layout = mq ? LMC_QKV_CONCAT : LMC_QKV_GROUPED;
    return LMC_OK;
}

/* gptj rotates rotary_dim dims of each head (its table is built for them); without it, transformers
 * builds the table over the whole embedding, which no checkpoint uses. */
static lmc_status gptj_variant(lmc_config *cfg, lmc_profile *p) {
    (void)p;
    if (cfg->rope.rotary_dim <= 0) return lmc_fail(LMC_ERR_UNSUPPORTED, "gptj without rotary_dim is not supported");
    return LMC_OK;
}

/* ---- mixture of experts: sparse-layer names (model/moe.h). Layout [0] is transformers 5's module
 * tree (per-expert tensors, or fused [E, ...] ones), [1] the older one checkpoints were saved with. */
#define MOE_V5_EXPERTS .expert = "mlp.experts.%d.", .e_gate = "gate_proj", .e_up = "up_proj", .e_down = "down_proj", \
                       .f_gate_up = "mlp.experts.gate_up_proj", .f_down = "mlp.experts.down_proj"
static const lmc_moe_names moe_qwen = {.router = "mlp.gate", MOE_V5_EXPERTS};
static const lmc_moe_names moe_qwen2 = {.router = "mlp.gate", MOE_V5_EXPERTS, .shared = "mlp.shared_expert.",
    .s_gate = "gate_proj", .s_up = "up_proj", .s_down = "down_proj", .shared_gate = "mlp.shared_expert_gate"};
static const lmc_moe_names moe_mixtral_old = {.router = "block_sparse_moe.gate", .expert = "block_sparse_moe.experts.%d.",
    .e_gate = "w1", .e_up = "w3", .e_down = "w2"};
static const lmc_moe_names moe_deepseek = {.router = "mlp.gate", .sel_bias = "mlp.gate.e_score_correction_bias",
    MOE_V5_EXPERTS, .shared = "mlp.shared_experts.", .s_gate = "gate_proj", .s_up = "up_proj", .s_down = "down_proj"};
static const lmc_moe_names moe_ernie = {.router = "mlp.gate", .sel_bias = "mlp.moe_statics.e_score_correction_bias",
    MOE_V5_EXPERTS, .shared = "mlp.shared_experts.", .s_gate = "gate_proj", .s_up = "up_proj", .s_down = "down_proj"};
static const lmc_moe_names moe_ernie_v5 = {.router = "mlp.gate", .sel_bias = "mlp.gate.moe_statics.e_score_correction_bias",
    MOE_V5_EXPERTS, .shared = "mlp.shared_experts.", .s_gate = "gate_proj", .s_up = "up_proj", .s_down = "down_proj"};
static const lmc_moe_names moe_hunyuan = {.router = "mlp.gate.wg", MOE_V5_EXPERTS, .shared = "mlp.shared_mlp.",
    .s_gate = "gate_proj", .s_up = "up_proj", .s_down = "down_proj"};
static const lmc_moe_names moe_granite = {.router = "block_sparse_moe.router.layer",
    .f_gate_up = "block_sparse_moe.input_linear.weight", .f_down = "block_sparse_moe.output_linear.weight",
    .shared = "shared_mlp.", .s_gate_up = "input_linear", .s_down = "output_linear"};
static const lmc_moe_names moe_granite_v5 = {.router = "mlp.gate", MOE_V5_EXPERTS,
    .shared = "shared_mlp.", .s_gate_up = "input_linear", .s_down = "output_linear"};
/* HF's input-major interleaved gate_up, or (GGUF, io/gguf_arch.h) separate per-expert gate and up */
static const lmc_moe_names moe_gpt_oss = {.router = "mlp.router", .router_bias = 1,
    .x_gate_up = "mlp.experts.gate_up_proj", .x_down = "mlp.experts.down_proj",
    .expert = "mlp.experts.%d.", .e_gate = "gate_proj", .e_up = "up_proj", .e_down = "down_proj",
    .e_bias = "mlp.experts.%s.bias"};
#undef MOE_V5_EXPERTS

static const lmc_moe_desc moe_mixtral_d = {.names = {&moe_qwen, &moe_mixtral_old}, .norm = LMC_MOE_NORM_ALWAYS,
                                           .expert_i_dense = 1};
static const lmc_moe_desc moe_qwen_d = {.names = {&moe_qwen}};
static const lmc_moe_desc moe_qwen2_d = {.names = {&moe_qwen2}};
static const lmc_moe_desc moe_deepseek_d = {.names = {&moe_deepseek}, .score = LMC_MOE_SIGMOID, .norm_eps = 1e-20f,
                                            .scale_key = 1, .group_keys = 1};
static const lmc_moe_desc moe_glm4_d = {.names = {&moe_deepseek}, .score = LMC_MOE_SIGMOID, .norm = LMC_MOE_NORM_CONFIG_TRUE,
                                        .norm_eps = 1e-20f, .scale_key = 1, .group_keys = 1};
static const lmc_moe_desc moe_ernie_d = {.names = {&moe_ernie, &moe_ernie_v5}, .norm = LMC_MOE_NORM_ALWAYS,
                                         .norm_min_key = 1};
static const lmc_moe_desc moe_hunyuan_d = {.names = {&moe_hunyuan}, .norm = LMC_MOE_NORM_ALWAYS, .expert_i_dense = 1,
                                           .shared_i_dense = 1};
static const lmc_moe_desc moe_granite_d = {.names = {&moe_granite, &moe_granite_v5}, .norm = LMC_MOE_NORM_ALWAYS,
                                           .expert_i_dense = 1};
static const lmc_moe_desc moe_gpt_oss_d = {.names = {&moe_gpt_oss}, .norm = LMC_MOE_NORM_ALWAYS, .expert_i_dense = 1,
                                           .glu_clamp = 1};
static const lmc_moe_desc moe_phimoe_d = {.names = {&moe_qwen, &moe_mixtral_old}, .score = LMC_MOE_SPARSEMIXER,
                                          .norm = LMC_MOE_NORM_NEVER, .expert_i_dense = 1};

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
     .out_norm = "final_layernorm", .prefix = "model.", .names = &phi_names,
     .notes = "parallel block from one LayerNorm, biases everywhere incl. the LM head, partial rotary, optional q/k LayerNorm"},
    {.model_type = "olmo", .norm = LMC_NORM_LAYER, .norm_no_weight = 1, .norm_eps_fixed = 1e-5,
     .prefix = "model.",
     .names = &llama_names, .notes = "llama block with parameter-free LayerNorms (eps 1e-5); clip_qkv refused"},
    {.model_type = "gpt_neox", .norm = LMC_NORM_LAYER, .mlp = LMC_MLP_PLAIN, .bias = LMC_BIAS_ATTN_MLP_ALWAYS,
     .attn_bias_default = 1, .act_default = "gelu", .qkv_layout = LMC_QKV_GROUPED, .parallel_key = "use_parallel_residual",
     .parallel_default = 1, .parallel_block = LMC_BLOCK_PARALLEL2, .prefix = "gpt_neox.", .embed = "embed_in",
     .lm_head = "embed_out", .out_norm = "final_layer_norm", .mask_buffers = 1, .names = &gpt_neox_names,
     .notes = "fused per-head qkv regrouped at load, parallel residual from two LayerNorms, partial rotary"},
    {.model_type = "gpt2", .norm = LMC_NORM_LAYER, .mlp = LMC_MLP_PLAIN, .bias = LMC_BIAS_ALL,
     .act_key = "activation_function", .act_default = "gelu_new", .conv1d = 1, .pos_embed = "wpe",
     .prefix = "transformer.", .prefix_alt = "", .layers = "h.", .embed = "wte", .out_norm = "ln_f", .tie_default = 1,
     .mask_buffers = 1, .variant = gpt2_variant, .names = &gpt2_names,
     .notes = "Conv1D weights transposed at load, learned absolute positions, fused c_attn, tied head"},
    {.model_type = "gpt_bigcode", .norm = LMC_NORM_LAYER, .mlp = LMC_MLP_PLAIN, .bias = LMC_BIAS_ALL,
     .act_key = "activation_function", .act_default = "gelu_pytorch_tanh", .pos_embed = "wpe",
     .prefix = "transformer.", .prefix_alt = "", .layers = "h.", .embed = "wte", .out_norm = "ln_f", .tie_default = 1,
     .mask_buffers = 1, .variant = gpt_bigcode_variant, .names = &gpt2_names,
     .notes = "gpt2 block with Linear weights, multi-query fused c_attn (or per-head [q k v]), learned positions, tied head"},
    {.model_type = "gptj", .norm = LMC_NORM_LAYER, .block = LMC_BLOCK_PARALLEL, .mlp = LMC_MLP_PLAIN,
     .bias = LMC_BIAS_MLP_ONLY, .lm_head_bias = 1, .rope_interleaved = 1, .act_key = "activation_function",
     .act_default = "gelu_new", .prefix = "transformer.", .layers = "h.", .embed = "wte", .out_norm = "ln_f",
     .mask_buffers = 1, .variant = gptj_variant, .names = &gptj_names,
     .notes = "parallel block from one LayerNorm, interleaved rope over rotary_dim, LM-head bias"},
    {.model_type = "falcon", .norm = LMC_NORM_LAYER, .block = LMC_BLOCK_PARALLEL, .mlp = LMC_MLP_PLAIN,
     .bias = LMC_BIAS_USE_BIAS, .act_key = "activation", .act_default = "gelu", .prefix = "transformer.", .layers = "h.",
     .embed = "word_embeddings", .out_norm = "ln_f", .tie_default = 1, .variant = falcon_variant, .names = &falcon_names,
     .notes = "multi-query fused qkv (7B) or grouped (new_decoder_architecture, ln_attn/ln_mlp), parallel block; alibi refused"},
    {.model_type = "stablelm", .norm = LMC_NORM_LAYER, .qk_norm = LMC_QK_NORM_PER_HEAD_LN, .qk_norm_optional = 1,
     .qk_norm_split = 1, .bias = LMC_BIAS_QKV_CONFIG, .parallel_key = "use_parallel_residual",
     .parallel_block = LMC_BLOCK_PARALLEL, .prefix = "model.", .names = &stablelm_names,
     .notes = "LayerNorms with bias, per-head q/k LayerNorm (one tensor per head), use_parallel_residual, partial rotary"},
    {.model_type = "nemotron", .norm = LMC_NORM_LAYER_PLUS_ONE, .mlp = LMC_MLP_PLAIN, .act_default = "relu2",
     .prefix = "model.", .names = &plain_mlp_names,
     .notes = "LayerNorm1P ((1 + w) with bias), relu² MLP without gate, partial rotary"},
    {.model_type = "ministral3", .q_scale_llama4 = 1, .prefix = "model.", .names = &llama_names,
     .notes = "mistral block, yarn rope, llama-4 query scaling 1 + β·log(1 + floor(pos / original))"},
    {.model_type = "apertus", .qk_norm = LMC_QK_NORM_HEAD, .mlp = LMC_MLP_PLAIN, .act_default = "xielu",
     .prefix = "model.", .names = &apertus_names,
     .notes = "xIELU MLP (learned per-layer alpha_p/alpha_n) without gate, per-head q/k RMSNorm"},
};

/* Mixture-of-experts rows: the dense block with the MLP of sparse layers replaced (model/moe.c). */
static const lmc_arch moe_rows[] = {
    {.model_type = "mixtral", .prefix = "model.", .names = &llama_names, .moe = &moe_mixtral_d,
     .notes = "llama block, softmax top-k router renormalized, w1/w3/w2 experts"},
    {.model_type = "qwen2_moe", .bias = LMC_BIAS_QKV, .window = LMC_WINDOW_QWEN2, .prefix = "model.", .names = &llama_names,
     .moe = &moe_qwen2_d,
     .notes = "qwen2 block, softmax top-k (norm_topk_prob), shared expert with a sigmoid gate, decoder_sparse_step / mlp_only_layers"},
    {.model_type = "qwen3_moe", .qk_norm = LMC_QK_NORM_HEAD, .window = LMC_WINDOW_QWEN2, .prefix = "model.",
     .names = &llama_names, .moe = &moe_qwen_d,
     .notes = "qwen3 block, softmax top-k (norm_topk_prob), decoder_sparse_step / mlp_only_layers"},
    {.model_type = "olmoe", .qk_norm = LMC_QK_NORM_FULL, .prefix = "model.", .names = &llama_names, .moe = &moe_qwen_d,
     .notes = "llama block with q/k RMSNorm over all heads, softmax top-k (norm_topk_prob)"},
    {.model_type = "flex_olmo", .block = LMC_BLOCK_POST, .qk_norm = LMC_QK_NORM_FULL, .prefix = "model.",
     .names = &post_names, .moe = &moe_qwen_d,
     .notes = "olmo2 block (norms after each sublayer) with olmoe experts"},
    {.model_type = "granitemoe", .prefix = "model.", .names = &llama_names, .moe = &moe_granite_d,
     .notes = "granite multipliers, top-k logits softmaxed, fused input_linear / output_linear experts"},
    {.model_type = "granitemoeshared", .prefix = "model.", .names = &llama_names, .moe = &moe_granite_d,
     .notes = "granitemoe with an ungated shared MLP"},
    {.model_type = "phimoe", .norm = LMC_NORM_LAYER, .prefix = "model.", .names = &llama_names, .moe = &moe_phimoe_d,
     .lm_head_bias_key = "lm_head_bias",
     .notes = "LayerNorms, sparsemixer top-2 routing (inference form), optional LM-head bias; rope short/long_mscale refused"},
    {.model_type = "dots1", .qk_norm = LMC_QK_NORM_HEAD, .window = LMC_WINDOW_QWEN2, .prefix = "model.",
     .names = &llama_names, .moe = &moe_deepseek_d,
     .notes = "qwen3 attention, sigmoid router with selection bias and grouped top-k, scaling, shared experts, first_k_dense_replace"},
    {.model_type = "glm4_moe", .qk_norm = LMC_QK_NORM_HEAD, .qk_norm_optional = 1, .bias = LMC_BIAS_QKV_CONFIG,
     .prefix = "model.", .names = &llama_names, .moe = &moe_glm4_d,
     .notes = "partial rope, optional q/k norms, sigmoid grouped router with selection bias and scaling, shared experts"},
    {.model_type = "ernie4_5_moe", .bias = LMC_BIAS_USE_BIAS, .rope_interleaved = 1, .prefix = "model.",
     .names = &llama_names, .moe = &moe_ernie_d, .lm_head_bias_key = "use_bias",
     .notes = "ernie4_5 block, softmax router choosing by probability + selection bias, moe_norm_min, shared experts, moe_layer_interval"},
    {.model_type = "hunyuan_v1_moe", .qk_norm = LMC_QK_NORM_HEAD, .qk_norm_after_rope = 1, .prefix = "model.",
     .names = &hunyuan_names, .moe = &moe_hunyuan_d,
     .notes = "hunyuan block (q/k norms after rope), softmax top-k renormalized, shared MLP"},
    {.model_type = "gpt_oss", .bias = LMC_BIAS_ATTN_MLP_ALWAYS, .attn_bias_default = 1, .window = LMC_WINDOW_LAYER_TYPES,
     .sliding_pattern = 2, .prefix = "model.", .names = &gpt_oss_names, .moe = &moe_gpt_oss_d,
     .notes = "attention sinks, q/k/v/o biases, sliding/full layers (layer_types), yarn; router with bias, softmax "
              "over the top-k logits; input-major interleaved gate_up experts with biases, clamped GLU (swiglu_limit); MXFP4 experts (_blocks/_scales); "
              "GGUF gpt-oss (separate gate/up experts)"},
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
    {"solar_open", "glm4_moe"}, /* glm4_moe's experts under llama attention: the glm4_moe row without q/k norms
                                 * or dense layers, which its config leaves out */
};

#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))
#define N_ALIASES ((int)(sizeof aliases / sizeof aliases[0]))

#define N_MOE_ROWS ((int)(sizeof moe_rows / sizeof moe_rows[0]))

int lmc_arch_count(void) { return N_ROWS + N_MOE_ROWS; }

int lmc_arch_alias_at(int i, const char **from, const char **to) {
    if (i < 0 || i >= N_ALIASES) return 0;
    *from = aliases[i].from;
    *to = aliases[i].to;
    return 1;
}
const lmc_arch *lmc_arch_at(int i) {
    if (i >= 0 && i < N_ROWS) return &rows[i];
    if (i >= N_ROWS && i < N_ROWS + N_MOE_ROWS) return &moe_rows[i - N_ROWS];
    return NULL;
}

const lmc_arch *lmc_arch_find(const char *model_type, const char **alias_from) {
    if (alias_from) *alias_from = NULL;
    for (int i = 0; i < N_ALIASES; i++) {
        if (strcmp(model_type, aliases[i].from) == 0) {
            if (alias_from) *alias_from = aliases[i].from;
            model_type = aliases[i].to;
            break;
        }
    }
    for (int i = 0; i < lmc_arch_count(); i++)
        if (strcmp(lmc_arch_at(i)->model_type, model_type) == 0) return lmc_arch_at(i);
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
    const int nr = lmc_arch_count();
    for (int i = 0; i < nr + N_ALIASES; i++) {
        const char *name = i < nr ? lmc_arch_at(i)->model_type : aliases[i - nr].from;
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
    const int nr = lmc_arch_count();
    for (int i = 0; i < nr + N_ALIASES && at < cap; i++) {
        const char *name = i < nr ? lmc_arch_at(i)->model_type : aliases[i - nr].from;
        int n = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", name);
        if (n < 0) break;
        at += (size_t)n;
    }
    if (at < cap) snprintf(buf + at, cap - at, ", gemma4_text, gemma4 (targeted ports)");
}

const char *lmc_tier_name(lmc_tier t) {
    switch (t) {
    case LMC_TIER_EXACT: return "exact";
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
    if (!strcmp(cfg->hidden_act, "xielu")) { /* learned per-layer parameters: only the plain MLP carries them */
        if (a->mlp != LMC_MLP_PLAIN || a->moe)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "activation xielu is supported for %s only with a plain MLP", cfg->model_type);
    } else {
        LMC_TRY(lmc_act_from_name(cfg->hidden_act, &act));
    }
    int b;
    if (a->window == LMC_WINDOW_QWEN2 && lmc_config_bool(cfg, "use_sliding_window", &b) > 0 && b)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s with use_sliding_window=true is not supported yet", cfg->model_type);
    const lmc_rope_type rts[2] = {cfg->rope.type, cfg->rope_local.type};
    for (int i = 0; i < 2; i++) {
        lmc_rope_type rt = rts[i];
        if (rt != LMC_ROPE_DEFAULT && rt != LMC_ROPE_LINEAR && rt != LMC_ROPE_LLAMA3 && rt != LMC_ROPE_YARN &&
            rt != LMC_ROPE_LONGROPE && rt != LMC_ROPE_DYNAMIC)
            return lmc_fail(LMC_ERR_UNSUPPORTED,
                            "rope type \"%s\" is not supported yet for %s (supported: default, linear, dynamic, llama3, yarn, longrope)",
                            lmc_rope_type_name(rt), cfg->model_type);
    }
    /* dynamic NTK keeps one table per sequence (forward.c): the same rope on every layer */
    if ((cfg->rope.type == LMC_ROPE_DYNAMIC || cfg->rope_local.type == LMC_ROPE_DYNAMIC) &&
        (cfg->rope_local.type != cfg->rope.type || cfg->rope_local.theta != cfg->rope.theta ||
         cfg->rope_local.factor != cfg->rope.factor))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "dynamic rope with per-layer-type rope parameters is not supported");
    if (a->q_scale_llama4 && (!(cfg->rope.llama4_beta >= 0) || cfg->rope.original_max_position_embeddings <= 0))
        return lmc_fail(LMC_ERR_FORMAT, "%s needs rope llama_4_scaling_beta and original_max_position_embeddings",
                        cfg->model_type);
    double clip;
    if (lmc_config_double(cfg, "clip_qkv", &clip) > 0)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "clip_qkv is not supported yet");
    if (cfg->head_dim * cfg->rope.partial_rotary_factor < 2)
        return lmc_fail(LMC_ERR_FORMAT, "head_dim %d leaves nothing to rotate", cfg->head_dim);
    if (a->moe) LMC_TRY(lmc_moe_check_config(cfg, a));
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
    int targeted = 0; /* targeted ports first: gemma4_text (and the gemma4_assistant refusal) */
    lmc_status tst = lmc_gemma4_resolve(cfg, out, &targeted);
    if (targeted) return tst;
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
    out->block = a->block;
    out->names = a->names;
    out->qkv_layout = a->qkv_layout;
    if (a->parallel_key && cfg_flag(cfg, a->parallel_key, a->parallel_default)) out->block = a->parallel_block;
    if (a->tie_default && !cJSON_GetObjectItemCaseSensitive(cfg->raw, "tie_word_embeddings") &&
        !cJSON_GetObjectItemCaseSensitive(cfg->text, "tie_word_embeddings"))
        cfg->tie_word_embeddings = 1;
    if (a->variant) LMC_TRY(a->variant(cfg, out));
    if (a->pending_fixture)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "model_type \"%s\" is implemented but not yet held to F1 by a parity "
                        "fixture (tools/oracle/cases.py has its case); lmc refuses to run it unproven", a->model_type);
    LMC_TRY(check_knobs(cfg, a));
    out->tier = LMC_TIER_GENERIC;
    out->arch = a;
    out->graph = a->moe ? "moe" : "dense";
    out->fidelity = "F1 (CPU f32 vs transformers float64, fixture-gated)";
    snprintf(out->id, sizeof out->id, "generic-%s:%s", out->graph, a->model_type);
    if (alias_from) snprintf(out->alias_of, sizeof out->alias_of, "%s", alias_from);
    return LMC_OK;
}
