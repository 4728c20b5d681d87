/* arch.h — the architecture descriptor table: models are data.
 *
 * One row per supported model_type selects the branches of the generic
 * dense forward; an alias table maps other names onto rows (mistral → llama,
 * as mlx-lm's MODEL_REMAPPING does). No config sniffing identifies an
 * architecture: model_type does. Profiles (which forward runs a checkpoint,
 * at which tier) are resolved from the config alone, before any weight is read.
 */
#ifndef LMC_MODEL_ARCH_H
#define LMC_MODEL_ARCH_H

#include "backend/backend.h"
#include "config.h"

typedef enum lmc_norm_kind {
    LMC_NORM_RMS = 0,       /* x/rms · w */
    LMC_NORM_RMS_PLUS_ONE,  /* x/rms · (1 + w)  (gemma family) */
    LMC_NORM_LAYER,         /* (x - mean)/std · w + b (bias when the checkpoint has one) */
    LMC_NORM_LAYER_PLUS_ONE,/* (x - mean)/std · (1 + w) + b (nemotron LayerNorm1P; 1 + w is formed at load) */
} lmc_norm_kind;

/* Where the norms sit around the two sublayers of a decoder block. */
typedef enum lmc_block_kind {
    LMC_BLOCK_PRE = 0,      /* x += attn(n1(x)); x += mlp(n2(x))                     (llama) */
    LMC_BLOCK_SANDWICH,     /* x += n1b(attn(n1(x))); x += n2b(mlp(n2(x)))           (gemma2/3, glm4) */
    LMC_BLOCK_POST,         /* x += n1b(attn(x)); x += n2b(mlp(x))                   (olmo2/3) */
    LMC_BLOCK_PARALLEL,     /* h = n1(x); x += attn(h) + mlp(h)                      (cohere, gptj, phi) */
    LMC_BLOCK_PARALLEL2,    /* x += attn(n1(x)) + mlp(n2(x))                         (gpt-neox, falcon new arch) */
} lmc_block_kind;

/* How a fused qkv weight orders its rows (model.c splits it at load). */
typedef enum lmc_qkv_layout {
    LMC_QKV_CONCAT = 0,     /* [q heads | k heads | v heads] (phi3, gpt2, falcon multi-query): row views */
    LMC_QKV_GROUPED,        /* per KV group g: [q heads of g | k_g | v_g] (falcon new arch; with one q head
                             * per group: per head [q_h | k_h | v_h], gpt-neox): rows regrouped at load */
} lmc_qkv_layout;

typedef enum lmc_qk_norm {
    LMC_QK_NORM_NONE = 0,
    LMC_QK_NORM_HEAD,       /* arch norm over head_dim of each head, before rope (qwen3, gemma3) */
    LMC_QK_NORM_FULL,       /* RMSNorm over all heads' q (k) before splitting into heads (olmo2) */
    LMC_QK_NORM_PER_HEAD_LN,/* LayerNorm over head_dim with separate weights per head (cohere) */
} lmc_qk_norm;

typedef enum lmc_mlp_kind {
    LMC_MLP_GATED = 0,      /* down(act(gate(x)) · up(x)) */
    LMC_MLP_GATED_FUSED,    /* the same from one gate_up weight [2I, D] (gate rows first) (phi3, glm4) */
    LMC_MLP_PLAIN,          /* down(act(up(x))) (starcoder2) */
} lmc_mlp_kind;

typedef enum lmc_bias_rule {
    LMC_BIAS_FROM_CONFIG = 0, /* q/k/v/o biases iff config attention_bias (o: attention_out_bias when given);
                               * MLP iff mlp_bias (llama, seed_oss) */
    LMC_BIAS_QKV,             /* q/k/v always, o never (qwen2) */
    LMC_BIAS_USE_BIAS,        /* every linear iff config use_bias, default true (starcoder2) */
    LMC_BIAS_ALL,             /* every linear has a bias (phi) */
    LMC_BIAS_QKV_CONFIG,      /* q/k/v iff config attention_bias, o never, MLP iff mlp_bias (glm, glm4, helium) */
    LMC_BIAS_ATTN_MLP_ALWAYS, /* q/k/v/o iff attention_bias (default: the row's attn_bias_default), MLP always (gpt_neox) */
    LMC_BIAS_MLP_ONLY,        /* attention none, MLP always (gptj) */
} lmc_bias_rule;

typedef enum lmc_window_rule {
    LMC_WINDOW_WHEN_SET = 0,  /* layer_types when given, else every layer uses sliding_window when set */
    LMC_WINDOW_LAYER_TYPES,   /* only layers marked sliding_attention in layer_types (or the arch's pattern) */
    LMC_WINDOW_QWEN2,         /* only with use_sliding_window (refused for now) */
} lmc_window_rule;

/* Tensor names of one decoder layer (after "<prefix>layers.<i>.", before ".weight"/".bias").
 * NULL entries are not part of the architecture. */
typedef struct lmc_names {
    const char *attn_norm, *attn_post_norm, *ffn_norm, *ffn_post_norm;
    const char *q, *k, *v, *qkv, *o, *q_norm, *k_norm;
    const char *gate, *up, *gate_up, *down;
    const char *sinks;      /* attention-sink logits [H], full name after the layer prefix (gpt-oss) */
} lmc_names;

/* Mixture of experts (model/moe.h): tensor names of a sparse layer (after "<prefix>layers.<i>.";
 * weights end in ".weight" unless said). A row may list two layouts (e.g. the saved per-expert
 * names and transformers 5's fused ones); the one whose router is present is used. */
typedef struct lmc_moe_names {
    const char *router;         /* router weight [E, D] */
    const char *sel_bias;       /* expert-selection bias [E] or [1, E], full name (NULL: none) */
    const char *expert;         /* per-expert prefix, printf with the expert index: "mlp.experts.%d." */
    const char *e_gate, *e_up, *e_down;  /* within an expert (e_gate NULL: plain MLP) */
    const char *f_gate_up, *f_down;      /* fused full names: [E, 2I, D] (gate rows first), [E, D, I] */
    const char *shared;         /* prefix of the shared expert(s) (NULL: none) */
    const char *s_gate, *s_up, *s_down, *s_gate_up; /* within the shared expert (s_gate_up: fused [2Is, D]) */
    const char *shared_gate;    /* sigmoid gate of the shared expert [1, D] (qwen2_moe) */
    int router_bias;            /* the router has a bias [E] (gpt-oss) */
    const char *x_gate_up, *x_down; /* input-major fused full names (no ".weight"): [E, D, 2I] with gate/up
                                     * interleaved (gate at even rows of the output), [E, I, D]; each with a
                                     * per-expert bias "<name>_bias" [E, 2I], [E, D] (gpt-oss) */
    const char *e_bias;         /* glu_clamp rows with per-expert gate/up/down matrices (GGUF's split form):
                                 * printf with e_gate / e_up / e_down gives the stacked bias [E, out] */
} lmc_moe_names;

typedef enum lmc_moe_norm_rule {
    LMC_MOE_NORM_CONFIG = 0,    /* renormalize the top-k weights iff norm_topk_prob (default false) */
    LMC_MOE_NORM_CONFIG_TRUE,   /* the same, default true */
    LMC_MOE_NORM_ALWAYS,        /* always (mixtral, granitemoe's softmax over the top-k logits, hunyuan) */
    LMC_MOE_NORM_NEVER,         /* never (phimoe's sparsemixer) */
} lmc_moe_norm_rule;

typedef struct lmc_moe_desc {
    const lmc_moe_names *names[2]; /* layouts, tried in order (names[1] may be NULL) */
    lmc_moe_score score;        /* backend.h: softmax, sigmoid (grouped top-k, scaling), sparsemixer */
    lmc_moe_norm_rule norm;
    int expert_i_dense;         /* experts use intermediate_size even when moe_intermediate_size is given */
    int shared_i_dense;         /* the shared expert uses intermediate_size (hunyuan) */
    float norm_eps;             /* added to the renormalization denominator (sigmoid routers: 1e-20) */
    int norm_min_key;           /* the denominator is clamped by moe_norm_min (ernie4_5_moe) */
    int scale_key;              /* routed_scaling_factor applies */
    int group_keys;             /* n_group / topk_group apply */
    int glu_clamp;              /* experts: clamped GLU over interleaved gate/up (backend glu_clamp) with
                                 * per-expert biases; limit = config swiglu_limit (7), alpha = swiglu_alpha
                                 * (1.702) */
} lmc_moe_desc;

typedef struct lmc_profile lmc_profile;

typedef struct lmc_arch {
    const char *model_type;
    lmc_norm_kind norm;
    lmc_block_kind block;
    lmc_qk_norm qk_norm;
    lmc_mlp_kind mlp;
    lmc_bias_rule bias;
    lmc_window_rule window;
    int sliding_pattern;    /* LMC_WINDOW_LAYER_TYPES without layer_types: layer i is full iff (i+1) % pattern == 0 */
    int embed_scale_sqrt;   /* embeddings × sqrt(hidden) (gemma family) */
    int rope_interleaved;   /* rotate pairs (2i, 2i+1) (cohere, glm) */
    int qk_norm_optional;   /* qk norm only when config use_qk_norm (cohere) */
    int nope_interval;      /* without no_rope_layers: every nope_interval-th layer has no rope (smollm3) */
    int nope_full_layers;   /* with a sliding window configured, full-attention layers apply no rope (cohere2, exaone4) */
    int qk_norm_after_rope; /* q/k norms apply after rope (hunyuan_v1_dense) */
    int use_bias_default;   /* LMC_BIAS_USE_BIAS without use_bias in the config (starcoder2 1, ernie4_5 0) */
    int norm_no_weight;     /* every norm is parameter-free (nanochat) */
    int embed_norm;         /* the final norm is also applied to the embeddings before layer 0 (nanochat) */
    int rope_negate;        /* rotate by -angle: rotate_half returns (x2, -x1) (nanochat) */
    int lm_head_bias;       /* the LM head has a bias (phi) */
    double norm_eps_fixed;  /* the norms' epsilon is fixed by the architecture, not the config (olmo: 1e-5) */
    const char *out_norm;   /* final norm name after the prefix (NULL: "norm") */
    int pending_fixture;    /* implemented, but no parity fixture proves it yet: refused, never run unproven */
    const char *act_key;    /* config key naming the activation (NULL: "hidden_act") */
    const char *act_default;/* when the config does not name one (NULL: "silu") */
    const char *prefix;     /* decoder prefix ("model."); a multimodal wrapper's text stack may differ */
    const lmc_names *names; /* per-layer tensor names */
    const lmc_moe_desc *moe;/* mixture of experts: the router and experts of sparse layers (NULL: dense) */
    const char *lm_head_bias_key; /* config bool that gives the LM head a bias (phimoe lm_head_bias) */
    const char *notes;      /* one line for docs/MODELS.md */
    /* non-llama layouts (NULL / 0: the llama spelling) */
    const char *layers;     /* per-layer infix after the prefix (NULL: "layers."; gpt2: "h.") */
    const char *embed;      /* token embedding name after the prefix (NULL: "embed_tokens") */
    const char *lm_head;    /* LM head name without ".weight" (NULL: "lm_head"; gpt_neox: "embed_out") */
    const char *prefix_alt; /* a second decoder prefix older checkpoints use (gpt2: "") */
    const char *pos_embed;  /* learned absolute position table after the prefix (gpt2: "wpe"); no rope */
    lmc_qkv_layout qkv_layout;
    int conv1d;             /* linear weights stored [in, out] (gpt2 Conv1D): transposed at load */
    int qk_norm_split;      /* per-head q/k norm weights stored one tensor per head "<name>.norms.<h>" (stablelm) */
    int q_scale_llama4;     /* q ×= 1 + β·log(1 + floor(pos / original_max)) after rope (ministral3) */
    int tie_default;        /* tie_word_embeddings when config.json does not say (gpt2, falcon) */
    int attn_bias_default;  /* attention_bias when config.json does not say (LMC_BIAS_ATTN_MLP_ALWAYS) */
    int mask_buffers;       /* older checkpoints carry attn(ention).bias / masked_bias causal-mask buffers (dropped) */
    const char *parallel_key; /* config bool that selects parallel_block over block (use_parallel_residual) */
    int parallel_default;   /* its value when absent */
    lmc_block_kind parallel_block;
    /* arch-specific config normalization and variant choice (falcon); NULL: none */
    lmc_status (*variant)(lmc_config *cfg, lmc_profile *p);
} lmc_arch;

/* A multimodal checkpoint whose text stack lmc runs: the outer model_type, the
 * layouts its text weights may be stored under (transformers 5 and 4), and
 * the towers dropped by the weight audit. */
typedef struct lmc_wrapper {
    const char *outer_model_type;     /* "gemma3" */
    const char *text_model_type;      /* "gemma3_text" */
    const char *prefixes[3];          /* decoder prefixes, tried in order (NULL-terminated) */
    const char *lm_heads[3];          /* lm_head names, matching prefixes */
    const char *drop_prefixes[6];     /* non-text towers (NULL-terminated) */
} lmc_wrapper;

/* exact: a verified snapshot (model/artifact.h) over its family profile */
typedef enum lmc_tier { LMC_TIER_UNSUPPORTED = 0, LMC_TIER_GENERIC, LMC_TIER_TARGETED, LMC_TIER_EXACT } lmc_tier;

/* What runs a checkpoint: resolved once per load, before weights are read. */
struct lmc_profile {
    char id[96];            /* e.g. "generic-dense:qwen2" */
    lmc_tier tier;
    const lmc_arch *arch;   /* descriptor row (generic tier) */
    const char *graph;      /* "dense" */
    const char *fidelity;   /* "F1 vs transformers (fixture-gated)" */
    char alias_of[64];      /* model_type the row was reached through an alias from, or "" */
    const lmc_wrapper *wrapper; /* multimodal wrapper whose text stack runs, or NULL */
    /* resolved from the row and the config (a row's parallel_key or variant may change them) */
    lmc_block_kind block;
    const lmc_names *names;
    lmc_qkv_layout qkv_layout;
};

/* Row for a model_type (after aliases); NULL if none. *alias_from gets the
 * original name when an alias was followed (may be NULL). */
const lmc_arch *lmc_arch_find(const char *model_type, const char **alias_from);
int lmc_arch_count(void);
const lmc_arch *lmc_arch_at(int i);
/* The i-th alias (0 when i is past the end). */
int lmc_arch_alias_at(int i, const char **from, const char **to);
/* The supported name closest to model_type (edit distance), for error messages. */
const char *lmc_arch_nearest(const char *model_type);
/* Comma-separated list of supported model_types (rows and aliases) into buf. */
void lmc_arch_supported_list(char *buf, size_t cap);
const char *lmc_tier_name(lmc_tier t);

/* Resolve the profile from the config: targeted > generic > refuse (with the
 * supported list and the nearest match in the message). Also checks the
 * config's knobs are ones the row's forward implements; nothing downgrades.
 * Fills the arch-dependent config fields (the activation name). */
lmc_status lmc_profile_resolve(lmc_config *cfg, lmc_profile *out);

/* Activation named by config hidden_act. */
lmc_status lmc_act_from_name(const char *name, lmc_act *out);

#endif
