/* gguf_arch.h — from GGUF (llama.cpp conventions) to the Hugging Face facts
 * lmc's loader already understands: a synthetic config.json and tensor names.
 *
 * Architectures: llama (with experts: Mixtral), qwen2, qwen3, qwen2moe, qwen3moe,
 * gemma, gemma2, gemma3, phi3, gpt-oss (the value of general.architecture). Binding a GGUF model then reads:
 *
 *     const lmc_gguf_arch_info *a;
 *     char *json;
 *     lmc_gguf_arch_of(g, &a);                 // refuses other architectures, naming them
 *     lmc_gguf_arch_config_json(g, &json);     // HF-style config.json text (free with free())
 *     for each GGUF tensor t:
 *         lmc_gguf_arch_hf_name(a, t->name, hf, sizeof hf)   // "model.layers.3.self_attn.q_proj.weight"
 *
 * (io/gguf_view.h does the per-tensor part in one call, undoing 1 and 2
 * below, so a loader can bind a GGUF exactly like a safetensors checkpoint.)
 *
 * Three things differ from the HF checkpoint beyond names and must be undone
 * (or matched) by the loader:
 *
 * 1. Q/K row permutation — llama only. llama.cpp's converter (LlamaModel,
 *    undo_permute = True) reorders the rows of q_proj and k_proj weights (and
 *    biases) within each head so that llama.cpp's "normal" rope (adjacent
 *    pairs rotated, GPT-J style) gives the same result as HF's rotate_half
 *    (first half with second half, "neox"). Within a head of D rows, HF row
 *    i·D/2 + j (i ∈ {0,1}, j < D/2) is stored at GGUF row 2j + i. qwen2,
 *    qwen3, gemma, gemma2, gemma3 and phi3 are converted unpermuted (llama.cpp
 *    runs them with neox rope). Undo with lmc_gguf_unpermute_rows (or run an
 *    interleaved rope on the permuted rows: the two are equivalent).
 * 2. Norm weights + 1 — gemma, gemma2, gemma3. HF computes x̂·(1 + w); the
 *    converter stores w + 1 in every tensor whose HF name ends in
 *    "norm.weight" (input/post-attention/pre- and post-feedforward layernorms,
 *    q_norm, k_norm, model.norm), so llama.cpp applies a plain RMSNorm. Either
 *    subtract 1 at load or run plain RMSNorm (lmc_gguf_arch_norm_shifted).
 * 3. Tensors with no HF counterpart, consumed into the config here:
 *    rope_freqs.weight (llama3 rope: per-frequency divisors) and
 *    rope_factors_long/short.weight (phi3 longrope factor tables).
 *    lmc_gguf_arch_is_config_tensor says which; the weight audit drops them.
 *
 * Shapes: a GGUF tensor's ne is innermost first; the HF (torch) shape is ne
 * reversed. phi3's attn_qkv / ffn_up are the fused qkv_proj / gate_up_proj.
 */
#ifndef LMC_IO_GGUF_ARCH_H
#define LMC_IO_GGUF_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "io/gguf.h"

typedef struct lmc_gguf_arch_info {
    const char *gguf_arch;       /* general.architecture: "llama", "gemma3", ... */
    const char *model_type;      /* HF model_type written to the config: "llama", "gemma3_text", ... */
    const char *hf_architecture; /* "LlamaForCausalLM", ... */
    int qk_permuted;             /* 1: q/k rows permuted by the converter (see above) */
    int norm_plus_one;           /* 1: norm weights stored as HF weight + 1 */
    int sandwich;                /* 1: gemma2/3 norm layout (ffn_norm = pre_feedforward_layernorm) */
    int fused;                   /* 1: phi3 fused attn_qkv / ffn_up (gate_up) */
    int moe;                     /* expert tensors' HF names: 0 none, LMC_GGUF_MOE_QWEN, LMC_GGUF_MOE_MIXTRAL */
} lmc_gguf_arch_info;

/* Mixture-of-experts families (llama.cpp: blk.N.ffn_gate_inp router, blk.N.ffn_{gate,up,down}_exps
 * experts stacked in one tensor of ne [in, out, n_expert], blk.N.ffn_{gate,up,down}_shexp shared
 * expert, blk.N.ffn_gate_inp_shexp its sigmoid gate; keys {arch}.expert_count, expert_used_count,
 * expert_feed_forward_length, expert_shared_feed_forward_length, expert_weights_norm):
 *   QWEN    qwen2moe, qwen3moe: mlp.gate, mlp.experts.E.{gate,up,down}_proj, mlp.shared_expert.*,
 *           mlp.shared_expert_gate (HF [1, D]). A layer without ffn_gate_inp is dense (mlp.*):
 *           the config gets mlp_only_layers.
 *   MIXTRAL llama files with {arch}.expert_count: block_sparse_moe.gate,
 *           block_sparse_moe.experts.E.{w1,w3,w2} (gate, up, down); model_type mixtral.
 *   GPTOSS  gpt-oss: mlp.router (weight and bias), mlp.experts.E.{gate,up,down}_proj.weight and the
 *           stacked biases blk.N.ffn_{gate,up,down}_exps.bias [out, E] as mlp.experts.{gate,up,down}_proj.bias
 *           (HF [E, out]). llama.cpp's converter splits HF's input-major gate_up_proj [E, D, 2I], whose
 *           columns interleave gate (even) and up (odd), into gate = [..., ::2] and up = [..., 1::2],
 *           each transposed to [E, I, D]; the biases alike. The model runs the two halves as separate
 *           matrices (model/moe.h). Also blk.N.attn_sinks.weight ↔ self_attn.sinks (no suffix in HF)
 *           and blk.N.post_attention_norm ↔ post_attention_layernorm. */
#define LMC_GGUF_MOE_QWEN 1
#define LMC_GGUF_MOE_MIXTRAL 2
#define LMC_GGUF_MOE_GPTOSS 3
#define LMC_GGUF_EXPERT_GATE 0
#define LMC_GGUF_EXPERT_UP 1
#define LMC_GGUF_EXPERT_DOWN 2
/* Which stacked expert tensor gguf_name is (blk.N.ffn_gate_exps.weight → LMC_GGUF_EXPERT_GATE, layer N);
 * -1 for any other name. */
int lmc_gguf_arch_expert_kind(const char *gguf_name, long *layer);
/* The GGUF name of a stacked expert tensor: "blk.N.ffn_up_exps.weight". */
lmc_status lmc_gguf_arch_expert_gguf_name(long layer, int kind, char *out, size_t cap);
/* The HF name of one expert's matrix of a stacked tensor (a->moe's family; LMC_ERR_UNSUPPORTED when
 * a->moe is 0). */
lmc_status lmc_gguf_arch_expert_hf_name(const lmc_gguf_arch_info *a, long layer, long expert, int kind, char *out,
                                        size_t cap);
/* The inverse: 1 and (layer, expert, kind) if hf_name is a per-expert matrix of a->moe's family, else 0. */
int lmc_gguf_arch_parse_expert(const lmc_gguf_arch_info *a, const char *hf_name, long *layer, long *expert, int *kind);

/* The row of the table for a general.architecture value; NULL if unsupported. */
const lmc_gguf_arch_info *lmc_gguf_arch_find(const char *gguf_arch);
/* The same from the file's general.architecture; LMC_ERR_FORMAT if the key is
 * missing or not a string, LMC_ERR_UNSUPPORTED (naming it and the supported
 * list) for other architectures. */
lmc_status lmc_gguf_arch_of(const lmc_gguf *g, const lmc_gguf_arch_info **out);

/* A config.json object with the facts HF's config gives: model_type,
 * architectures, hidden_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads, head_dim, intermediate_size, rms_norm_eps, rope_theta,
 * rope_scaling (linear / yarn / llama3 / longrope when the file says so),
 * partial_rotary_factor, max_position_embeddings, vocab_size (token_embd rows),
 * tie_word_embeddings (no output.weight), sliding_window, layer_types or
 * sliding_window_pattern, softcaps and query_pre_attn_scalar (gemma2/3:
 * from {arch}.attention.scale when present, else llama.cpp's size rule),
 * rope_local_base_freq (gemma3), hidden_act / hidden_activation,
 * attention_bias / mlp_bias (llama), bos/eos/pad ids (eos: eos, eot and eom
 * ids, as a list when more than one), torch_dtype (from token_embd if it is a
 * float type), and an "lmc_gguf" object (architecture, qk_permuted,
 * norm_plus_one; rope_freq_factors when rope_freqs.weight cannot be
 * reproduced by llama3 rope parameters). llama.cpp stores llama3 rope as a
 * table of per-frequency divisors (rope_freqs.weight); the table fixes only
 * the factor and the two wavelength thresholds, so the parameters written are
 * a fit (original_max_position_embeddings an integer near old/low_freq_factor)
 * that reproduces every divisor within 1e-5. Caller frees with cJSON_Delete.
 * Errors: LMC_ERR_FORMAT naming the missing or malformed key,
 * LMC_ERR_UNSUPPORTED (architecture; per-layer head counts that differ). */
lmc_status lmc_gguf_arch_config(const lmc_gguf *g, cJSON **out);
/* The same printed (formatted JSON text, NUL-terminated); free with free(). */
lmc_status lmc_gguf_arch_config_json(const lmc_gguf *g, char **out);

/* llama.cpp tensor name → HF name ("blk.3.attn_q.weight" →
 * "model.layers.3.self_attn.q_proj.weight"). LMC_ERR_NOT_FOUND (message
 * names it) for a name with no rule, including the config tensors;
 * LMC_ERR_RANGE if it does not fit in cap bytes. */
lmc_status lmc_gguf_arch_hf_name(const lmc_gguf_arch_info *a, const char *gguf_name, char *out, size_t cap);
/* HF name → llama.cpp name (the inverse of the above). */
lmc_status lmc_gguf_arch_gguf_name(const lmc_gguf_arch_info *a, const char *hf_name, char *out, size_t cap);
/* 1 for rope_freqs.weight, rope_factors_long.weight, rope_factors_short.weight. */
int lmc_gguf_arch_is_config_tensor(const char *gguf_name);
/* 1 if this GGUF tensor holds HF weight + 1 (norm_plus_one archs, names ending in "norm.weight"). */
int lmc_gguf_arch_norm_shifted(const lmc_gguf_arch_info *a, const char *gguf_name);

/* Q/K permutation (llama). head_dim D even; rows of a head h are h·D..h·D+D-1.
 * GGUF row r holds HF row lmc_gguf_hf_row(r, D); HF row r is GGUF row lmc_gguf_gguf_row(r, D). */
int64_t lmc_gguf_hf_row(int64_t gguf_row, int64_t head_dim);
int64_t lmc_gguf_gguf_row(int64_t hf_row, int64_t head_dim);
/* Copy src (GGUF row order) to dst (HF row order): n_rows rows of row_bytes
 * bytes each (any storage type: quantized rows are whole blocks; a bias is
 * n_rows rows of one element). n_rows must be a multiple of head_dim and
 * head_dim even (LMC_ERR_ARG otherwise). dst and src must not overlap. */
lmc_status lmc_gguf_unpermute_rows(void *dst, const void *src, int64_t n_rows, size_t row_bytes, int64_t head_dim);

#endif
