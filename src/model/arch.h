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
    LMC_NORM_RMS_PLUS_ONE,  /* x/rms · (1 + w)  (gemma) */
    LMC_NORM_LAYER,         /* layer norm with weight and bias */
} lmc_norm_kind;

typedef enum lmc_qk_norm {
    LMC_QK_NORM_NONE = 0,
    LMC_QK_NORM_HEAD_RMS,   /* RMSNorm over head_dim of each head, before rope (qwen3) */
} lmc_qk_norm;

typedef enum lmc_bias_rule {
    LMC_BIAS_FROM_CONFIG = 0, /* q/k/v/o biases iff config attention_bias (llama, mistral) */
    LMC_BIAS_QKV,             /* q/k/v always, o never (qwen2) */
} lmc_bias_rule;

typedef enum lmc_window_rule {
    LMC_WINDOW_WHEN_SET = 0,  /* every layer uses sliding_window when the config sets one */
    LMC_WINDOW_IGNORED,       /* the arch has no sliding attention */
    LMC_WINDOW_QWEN2,         /* only with use_sliding_window (refused for now) */
} lmc_window_rule;

typedef struct lmc_arch {
    const char *model_type;
    lmc_norm_kind norm;
    lmc_qk_norm qk_norm;
    lmc_bias_rule bias;
    lmc_window_rule window;
    const char *prefix;     /* tensor name prefix of the decoder ("model.") */
    const char *notes;      /* one line for docs/MODELS.md */
} lmc_arch;

typedef enum lmc_tier { LMC_TIER_UNSUPPORTED = 0, LMC_TIER_GENERIC, LMC_TIER_TARGETED } lmc_tier;

/* What runs a checkpoint: resolved once per load, before weights are read. */
typedef struct lmc_profile {
    char id[96];            /* e.g. "generic-dense:qwen2" */
    lmc_tier tier;
    const lmc_arch *arch;   /* descriptor row (generic tier) */
    const char *graph;      /* "dense" */
    const char *fidelity;   /* "F1 vs transformers (fixture-gated)" */
    char alias_of[64];      /* model_type the row was reached through an alias from, or "" */
} lmc_profile;

/* Row for a model_type (after aliases); NULL if none. *alias_from gets the
 * original name when an alias was followed (may be NULL). */
const lmc_arch *lmc_arch_find(const char *model_type, const char **alias_from);
int lmc_arch_count(void);
const lmc_arch *lmc_arch_at(int i);
/* The supported name closest to model_type (edit distance), for error messages. */
const char *lmc_arch_nearest(const char *model_type);
/* Comma-separated list of supported model_types (rows and aliases) into buf. */
void lmc_arch_supported_list(char *buf, size_t cap);
const char *lmc_tier_name(lmc_tier t);

/* Resolve the profile from the config: targeted > generic > refuse (with the
 * supported list and the nearest match in the message). Also checks the
 * config's knobs are ones the row's forward implements; nothing downgrades. */
lmc_status lmc_profile_resolve(const lmc_config *cfg, lmc_profile *out);

/* Activation named by config hidden_act. */
lmc_status lmc_act_from_name(const char *name, lmc_act *out);

#endif
