/* gguf_tok.h — the tokenizer of a llama.cpp GGUF file (tokenizer.ggml.*) as Hugging Face JSON.
 *
 * llama.cpp GGUF files carry their vocabulary as tokenizer.ggml.* arrays rather than a
 * tokenizer.json. lmc_gguf_tokenizer_json rebuilds an equivalent tokenizer.json (and a
 * tokenizer_config.json with bos/eos/add_bos/chat_template) that lmc_tokenizer_load_json
 * reads; lmc_gguf_tok_write_ggml writes those keys from a tokenizer.json, the way
 * llama.cpp's convert_hf_to_gguf.py lays them out. This module owns nothing past a call.
 *
 *     char *json, *cfg; size_t len;
 *     if (lmc_gguf_tokenizer_json(g, &json, &len, &cfg) < 0) puts(lmc_last_error());
 *     lmc_tokenizer_load_json(json, len, cfg, strlen(cfg), &tok);
 *     free(json); free(cfg);
 *
 * Models: "gpt2" (byte-level BPE; pre "llama-bpe", "qwen2", "gpt-2", "default") and
 * "llama" (SentencePiece BPE with byte fallback: merge ranks come from the scores, as
 * llama.cpp's SPM tokenizer ranks pairs by the score of the merged piece; a
 * tokenizer.ggml.merges list, when the file has one, is used as it stands).
 */
#ifndef LMC_IO_GGUF_TOK_H
#define LMC_IO_GGUF_TOK_H

#include <stddef.h>

#include "core/status.h"
#include "io/gguf.h"

/* llama.cpp token types (tokenizer.ggml.token_type). */
enum {
    LMC_GGUF_TOKEN_NORMAL = 1,
    LMC_GGUF_TOKEN_UNKNOWN = 2,
    LMC_GGUF_TOKEN_CONTROL = 3,
    LMC_GGUF_TOKEN_USER_DEFINED = 4,
    LMC_GGUF_TOKEN_UNUSED = 5,
    LMC_GGUF_TOKEN_BYTE = 6,
};

/* Build tokenizer.json text (*json, *len, NUL-terminated) and tokenizer_config.json text
 * (*config_json, NUL-terminated; may be NULL if the caller does not want it) from the
 * tokenizer.ggml.* metadata of g. Both malloc'ed; the caller frees them.
 * Errors: LMC_ERR_NOT_FOUND (no tokenizer.ggml.model), LMC_ERR_UNSUPPORTED (model "none"
 * or another model, an unknown pre name — named), LMC_ERR_FORMAT (missing or inconsistent
 * arrays, a merge naming an unknown token, ids out of range), LMC_ERR_NOMEM. */
lmc_status lmc_gguf_tokenizer_json(const lmc_gguf *g, char **json, size_t *len, char **config_json);

/* Write tokenizer.ggml.{model,pre,tokens,token_type,scores (llama),merges (gpt2),
 * unknown_token_id (llama),add_bos_token,add_eos_token} from tokenizer.json text and
 * optional tokenizer_config.json text (NULL). write_ids: also write bos/eos/padding ids
 * (from the config's bos_token/eos_token/pad_token), for callers that do not write them
 * from config.json themselves. Byte-level BPE becomes "gpt2" with pre named from its split
 * regex (llama-bpe, qwen2, gpt-2); SentencePiece-style BPE with byte fallback becomes
 * "llama" with scores = -(rank of the first merge producing the piece).
 * Errors: LMC_ERR_FORMAT (malformed JSON), LMC_ERR_UNSUPPORTED (another model type or a
 * pre-tokenizer llama.cpp has no name for here), LMC_ERR_NOMEM, writer errors. */
lmc_status lmc_gguf_tok_write_ggml(lmc_gguf_writer *w, const char *json, size_t len, const char *config_json,
                                   size_t config_len, int write_ids);

#endif
