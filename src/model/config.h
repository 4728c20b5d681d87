/* config.h — one normalized text config from a checkpoint's config.json.
 *
 * Hugging Face configs spell the same thing many ways: nested text_config
 * (multimodal wrappers), rope_scaling + rope_theta (transformers 4) or
 * rope_parameters (transformers 5, possibly per layer type), eos as an int
 * or a list, head_dim absent or null. lmc_config_load reads config.json
 * (and generation_config.json beside it) into this struct, with per-arch
 * defaults taken from the descriptor table. The config owns `raw` (the
 * whole parsed config.json) so arch-specific keys can be read later.
 */
#ifndef LMC_MODEL_CONFIG_H
#define LMC_MODEL_CONFIG_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/status.h"

#define LMC_MAX_EOS 16
#define LMC_MAX_LAYERS 1024
#define LMC_ROPE_MAX_FACTORS 512

typedef enum lmc_rope_type {
    LMC_ROPE_DEFAULT = 0,
    LMC_ROPE_LINEAR,
    LMC_ROPE_DYNAMIC,
    LMC_ROPE_LLAMA3,
    LMC_ROPE_YARN,
    LMC_ROPE_LONGROPE,
    LMC_ROPE_PROPORTIONAL,
    LMC_ROPE_NONE, /* NoPE layers */
} lmc_rope_type;

typedef struct lmc_rope_config {
    lmc_rope_type type;
    double theta;
    double partial_rotary_factor;   /* fraction of head_dim rotated (1 = all) */
    double factor;                  /* linear / dynamic / llama3 / yarn / longrope */
    double low_freq_factor, high_freq_factor; /* llama3 */
    int original_max_position_embeddings;     /* llama3 / yarn / longrope; 0 = absent */
    double attention_factor;        /* yarn / longrope; < 0 = absent */
    double beta_fast, beta_slow, mscale, mscale_all_dim; /* yarn */
    int truncate;                   /* yarn: 1 = truncate the correction range (default) */
    int n_short_factor, n_long_factor;                   /* longrope */
    int rotary_dim;                 /* rotated dims given as a count (gptj rotary_dim); 0: from partial_rotary_factor */
    double llama4_beta;             /* llama_4_scaling_beta (ministral3 query scaling); < 0 = absent */
    double short_factor[LMC_ROPE_MAX_FACTORS / 2], long_factor[LMC_ROPE_MAX_FACTORS / 2];
} lmc_rope_config;

typedef struct lmc_config {
    char model_type[64];        /* of the text config (e.g. gemma3_text inside gemma3) */
    char outer_model_type[64];  /* of config.json's top level */
    char architecture[96];      /* architectures[0], "" if absent */
    char torch_dtype[16];       /* "bfloat16", "float32", ... "" if absent */
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int max_position_embeddings;
    double norm_eps;
    int tie_word_embeddings;
    int attention_bias;         /* q/k/v (and o, per arch) carry biases (stablelm spells it use_qkv_bias) */
    int attention_bias_given;   /* attention_bias (or use_qkv_bias) present in config.json */
    int mlp_bias;
    int attention_out_bias;     /* o_proj bias when given separately (seed_oss); -1 when absent */
    char hidden_act[32];        /* config hidden_act, else "silu"; lmc_profile_resolve applies the arch's key and default */
    int hidden_act_given;       /* hidden_act present in config.json */
    int sliding_window;         /* 0: none */
    int has_layer_types;        /* layer_types given: layer_sliding is authoritative */
    unsigned char layer_sliding[LMC_MAX_LAYERS]; /* 1: sliding_attention layer */
    unsigned char layer_nope[LMC_MAX_LAYERS];    /* 1: the layer applies no rope (no_rope_layers) */
    int has_no_rope_layers;     /* no_rope_layers given */
    int nope_interval;          /* no_rope_layer_interval (0: absent) */
    int sliding_pattern;        /* sliding_window_pattern (0: absent) */
    /* scalars of the forward (neutral values when absent) */
    double attn_scale;          /* multiplies q·k; 0 = head_dim^-0.5 */
    double attn_softcap;        /* attn_logit_softcapping, 0 = none */
    double final_softcap;       /* final_logit_softcapping, 0 = none */
    double embed_mult;          /* embedding_multiplier (granite) */
    double resid_mult;          /* residual_multiplier (granite) */
    double logits_mult;         /* logit_scale (cohere) or 1/logits_scaling (granite) */
    int use_qk_norm;            /* use_qk_norm (cohere); -1 when absent */
    int use_bias;               /* use_bias (starcoder2); -1 when absent */
    int quant_bits, quant_group;/* MLX "quantization" / "quantization_config" block (0 when absent) */
    int quant_mxfp4;            /* its "mode" is "mxfp4" (E2M1 codes, E8M0 scales; per-module "mode" overrides) */
    int quant_hf_mxfp4;         /* Hugging Face quantization_config.quant_method "mxfp4" (`_blocks`/`_scales` pairs) */
    const cJSON *quant;         /* that block (per-module overrides are its object members) */
    /* mixture of experts (model/moe.h); n_experts 0 = a dense model */
    int n_experts;              /* num_local_experts | num_experts | moe_num_experts | n_routed_experts */
    int n_experts_used;         /* num_experts_per_tok | moe_k | moe_topk (top-k) */
    int moe_intermediate_size;  /* moe_intermediate_size, else intermediate_size (per expert) */
    int n_shared_experts;       /* n_shared_experts | moe_num_shared_experts (0: absent) */
    int shared_intermediate_size; /* shared_expert_intermediate_size | shared_intermediate_size (0: absent) */
    int norm_topk_prob;         /* -1: absent */
    double routed_scaling_factor; /* 1 when absent */
    int n_group, topk_group;    /* grouped top-k (0: absent) */
    double router_jitter;       /* router_jitter_noise (phimoe's sparsemixer threshold); -1 absent */
    double moe_norm_min;        /* moe_norm_min (ernie4_5_moe); 0 absent */
    unsigned char layer_dense[LMC_MAX_LAYERS]; /* 1: a dense MLP layer of an MoE model (mlp_only_layers,
                                 * decoder_sparse_step, first_k_dense_replace, moe_layer_interval/start/end) */
    lmc_rope_config rope;       /* full-attention layers */
    lmc_rope_config rope_local; /* sliding layers (equal to rope unless given per layer type) */
    int bos_token_id;           /* -1: none */
    int pad_token_id;           /* -1: none */
    int n_eos;
    int eos_token_ids[LMC_MAX_EOS];
    /* generation_config.json defaults (-1 / 0 when absent) */
    double gen_temperature, gen_top_p, gen_min_p, gen_repetition_penalty;
    int gen_top_k, gen_do_sample;
    cJSON *raw;                 /* whole config.json (owned) */
    const cJSON *text;          /* the text config object inside raw (raw itself when flat) */
} lmc_config;

/* Read dir/config.json (+ dir/generation_config.json when present). */
lmc_status lmc_config_load(const char *dir, lmc_config *cfg);
/* Parse from an already-read config.json tree (takes ownership of raw). gen may be NULL. */
lmc_status lmc_config_from_json(cJSON *raw, const cJSON *gen, lmc_config *cfg);
void lmc_config_free(lmc_config *cfg);

const char *lmc_rope_type_name(lmc_rope_type t);
/* Parse one rope dict (rope_parameters or rope_scaling spelling) over defaults. */
lmc_status lmc_rope_config_parse(const cJSON *obj, lmc_rope_config *rc);

/* Lookup helpers reading the text config first, then the top level. */
int lmc_config_int(const lmc_config *cfg, const char *key, int64_t *out);
int lmc_config_double(const lmc_config *cfg, const char *key, double *out);
int lmc_config_bool(const lmc_config *cfg, const char *key, int *out);

#endif
