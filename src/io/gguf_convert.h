/* gguf_convert.h — write a Hugging Face checkpoint directory as a GGUF file
 * the way llama.cpp's converter (convert_hf_to_gguf.py) lays it out.
 *
 * Architectures: model_type llama (and mistral, as llama), qwen2, qwen3,
 * gemma, gemma2, gemma3_text (as gemma3), phi3, and the mixture-of-experts
 * qwen2_moe (qwen2moe), qwen3_moe (qwen3moe), mixtral (llama with
 * {arch}.expert_count): per-expert matrices stacked into
 * blk.N.ffn_{gate,up,down}_exps.weight [in, out, E] as llama.cpp's converter
 * does, router ffn_gate_inp and the shared expert's gate ffn_gate_inp_shexp
 * kept in their float type (never quantized), keys expert_count,
 * expert_used_count, expert_feed_forward_length,
 * expert_shared_feed_forward_length, expert_weights_norm (norm_topk_prob).
 * Dense layers of a MoE model (mlp_only_layers) are written as ffn_gate/up/down. What it writes, matching
 * llama.cpp: tensor names blk.N.* (lmc_gguf_arch_gguf_name), llama q/k rows
 * permuted for its "normal" rope, gemma norm weights + 1 (stored F32), no
 * output.weight when embeddings are tied, llama3 rope as rope_freqs.weight,
 * phi3 longrope as rope_factors_long/short.weight, the {arch}.* keys that
 * lmc_gguf_arch_config reads back, and tokenizer.ggml.bos/eos/padding ids.
 * Tensors keep their storage type (F32, F16, BF16) unless quant_type asks (matrices and
 * stacked experts whose rows fit its blocks). Where llama.cpp would
 * lose a fact HF needs, it is kept in a standard key: gemma2/3
 * query_pre_attn_scalar as {arch}.attention.scale when it differs from
 * llama.cpp's size rule; gemma3 layer_types as a bool array
 * {arch}.attention.sliding_window_pattern; gemma3's local rope base as
 * {arch}.rope.freq_base_swa. tokenizer.json and the chat template (when the
 * directory has them) go in tokenizer.huggingface.json / tokenizer.chat_template,
 * and the vocabulary also as llama.cpp's tokenizer.ggml.* keys (io/gguf_tok.h).
 * Configs this cannot represent (yarn mscale, dynamic rope, multimodal
 * wrappers, qwen sliding windows, ...) are refused naming the field.
 *
 * Round trip: lmc_gguf_arch_config + lmc_gguf_hf_view on the written file give
 * back the checkpoint's config facts and tensors (norms up to f32 rounding of
 * w + 1 - 1).
 */
#ifndef LMC_IO_GGUF_CONVERT_H
#define LMC_IO_GGUF_CONVERT_H

#include <stdint.h>

#include "core/status.h"

typedef enum { LMC_CONVERT_KEEP = 0, LMC_CONVERT_F32, LMC_CONVERT_F16, LMC_CONVERT_BF16 } lmc_convert_float;

typedef struct lmc_gguf_convert_params {
    uint32_t alignment;     /* 0: 32 */
    int skip_tokenizer;     /* 1: do not embed tokenizer.json / chat template */
    /* called after each tensor with (done, total); may be NULL */
    void (*progress)(int done, int total, void *ud);
    void *progress_ud;
    int quant_type;         /* an lmc_dtype: 0 keeps storage types; else 2-D weight matrices whose rows
                               fit its blocks are quantized to it (Q8_0, Q4_0, Q4_K, Q6_K; others stay) */
    lmc_convert_float float_type; /* without quant_type: the 2-D weight matrices stored as F32, F16 or
                                     BF16 (rounded to nearest even), as llama.cpp's --outtype; 0 keeps */
    int64_t split_max_tensors; /* > 0: split files of at most this many tensors (llama.cpp's gguf-split
                                  layout, lmc_gguf_writer_write_split): out_path must end in .gguf and
                                  names PREFIX.gguf, written as PREFIX-00001-of-0000N.gguf ... */
    int *n_split_files;     /* with split_max_tensors: set to N, the number of files written (may be NULL) */
} lmc_gguf_convert_params;

/* dir: an HF model directory (config.json + safetensors). out_path: the GGUF
 * to write (atomically). params may be NULL. Errors: those of reading the
 * checkpoint; LMC_ERR_UNSUPPORTED (architecture, config knob or dtype, named);
 * LMC_ERR_FORMAT (config values missing or inconsistent); LMC_ERR_IO. */
lmc_status lmc_gguf_convert_hf(const char *dir, const char *out_path, const lmc_gguf_convert_params *params);

#endif
