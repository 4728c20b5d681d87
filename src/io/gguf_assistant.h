/* gguf_assistant.h — the Gemma 4 assistant (MTP drafter, model_type gemma4_assistant) as a
 * GGUF file, in the names and layouts of the llama.cpp MTP fork (shared/seeds/000_…):
 *
 *   pre_projection.weight              mtp.pre_projection.weight     ne [2·B, H]
 *   post_projection.weight             mtp.post_projection.weight    ne [H, B]
 *   model.embed_tokens.weight          token_embd.weight             ne [H, V]
 *   model.norm.weight                  output_norm.weight
 *   lm_head.weight (untied only)       output.weight
 *   model.layers.N.<…>                 blk.N.<attn_norm, attn_q, attn_q_norm, attn_output,
 *                                        post_attention_norm, ffn_norm, ffn_gate, ffn_up, ffn_down,
 *                                        post_ffw_norm, layer_output_scale>.weight
 *   masked_embedding.centroids.weight  mtp.centroids.weight          ne [H, n_centroids]
 *   masked_embedding.token_ordering    mtp.token_ordering.weight     I32, ne [V]
 *
 * (ne innermost first: an HF [rows, cols] tensor is stored as written, ne = [cols, rows].)
 * Metadata: general.architecture "gemma4-assistant", gemma4-assistant.{embedding_length,
 * backbone_embedding_length, block_count, vocab_size, use_ordered_embeddings, num_centroids,
 * centroid_top_k, …} and lmc.hf_config, the config.json the file came from (so a reader rebuilds
 * the exact config). Tensor bytes are copied as stored (F32/F16/BF16), the ordering as I32.
 * The reader hands the tensors back under their HF names; the file must outlive the handle's use.
 */
#ifndef LMC_IO_GGUF_ASSISTANT_H
#define LMC_IO_GGUF_ASSISTANT_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

#define LMC_GGUF_ASSISTANT_ARCH "gemma4-assistant"

/* Write the assistant checkpoint in hf_dir (config.json + safetensors) as a GGUF file. */
lmc_status lmc_gguf_assistant_convert(const char *hf_dir, const char *out_path);

/* 1 if path is a GGUF file whose general.architecture is gemma4-assistant. */
int lmc_gguf_is_assistant(const char *path);

typedef struct lmc_gguf_asst_tensor {
    const char *hf_name;     /* owned by the handle */
    const char *gguf_name;
    lmc_dtype dtype;
    int n_dims;
    int64_t shape[4];        /* torch order, outermost first */
    const void *data;        /* into the mapping */
    size_t nbytes;
} lmc_gguf_asst_tensor;

typedef struct lmc_gguf_assistant lmc_gguf_assistant;

/* Open and map a converted assistant: every tensor must have an HF name (else an error naming it). */
lmc_status lmc_gguf_assistant_open(const char *path, lmc_gguf_assistant **out);
void lmc_gguf_assistant_close(lmc_gguf_assistant *a); /* NULL is a no-op */
const char *lmc_gguf_assistant_config(const lmc_gguf_assistant *a); /* the stored config.json text */
int lmc_gguf_assistant_count(const lmc_gguf_assistant *a);
const lmc_gguf_asst_tensor *lmc_gguf_assistant_at(const lmc_gguf_assistant *a, int i);

/* The checks of `lmc verify-gguf`: architecture, embedding lengths (and parity with the target's
 * hidden size when target_hidden > 0), projection shapes, centroid shape [H, n_centroids],
 * I32 ordering of V ids that is a permutation, V divisible by n_centroids. Each check is one
 * line "ok: …" or "FAIL: …" in report; *n_failed counts the failures. Returns an error only
 * when the file cannot be read at all. */
lmc_status lmc_gguf_assistant_verify(const char *path, int64_t target_hidden, char *report, size_t cap,
                                     int *n_failed);

#endif
