/* tokenizer.h — Hugging Face tokenizer.json tokenizers: text <-> ids, identical to HF `tokenizers`.
 *
 *     lmc_tokenizer *tok;
 *     if (lmc_tokenizer_load("models/qwen3", &tok) < 0) { puts(lmc_last_error()); ... }
 *     int32_t *ids; int n;
 *     lmc_tokenizer_encode(tok, "Hello", 5, 1, &ids, &n);        // add_special as HF add_special_tokens
 *     char *text; size_t len;
 *     lmc_tokenizer_decode(tok, ids, n, 0, &text, &len);         // caller frees ids and text
 *     free(ids); free(text); lmc_tokenizer_free(tok);
 *
 * Encode/decode may run from many threads at once on one tokenizer (one caller at a
 * time gets the word cache; the others run without it). Input text that is not valid
 * UTF-8 is first repaired (each ill-formed sequence becomes U+FFFD, as Python's
 * `errors="replace"` and WHATWG TextDecoder do). Reference: Python `tokenizers` 0.23
 * (e.g. a normalized added token reads back in its normalized form).
 * Every function returning lmc_status sets lmc_last_error() on failure.
 */
#ifndef LMC_TOK_TOKENIZER_H
#define LMC_TOK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct lmc_tokenizer lmc_tokenizer;

/* path: a directory holding tokenizer.json (and optionally tokenizer_config.json), or a
 * tokenizer.json file (the config is then looked for beside it). Chat templates are
 * found by lmc_chat_template_load (tok/chat.h). */
lmc_status lmc_tokenizer_load(const char *path, lmc_tokenizer **out);
/* Same from memory: tokenizer.json text and optional tokenizer_config.json text (NULL). */
lmc_status lmc_tokenizer_load_json(const char *json, size_t len, const char *config_json, size_t config_len,
                                   lmc_tokenizer **out);
void lmc_tokenizer_free(lmc_tokenizer *tok);

/* add_special: as HF `add_special_tokens=True` (runs the post-processor). *ids is
 * malloc'ed (never NULL on success, even when *n_ids is 0); the caller frees it. */
lmc_status lmc_tokenizer_encode(const lmc_tokenizer *tok, const char *text, size_t len, int add_special,
                                int32_t **ids, int *n_ids);
/* What transformers' apply_chat_template(tokenize=True) does with rendered template
 * text: encode without the post-processor, so a template that already wrote the
 * BOS text does not get a second BOS. */
lmc_status lmc_tokenizer_encode_chat(const lmc_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                                     int *n_ids);
/* skip_special: as HF skip_special_tokens. Ids outside the vocabulary are skipped.
 * *text is malloc'ed and NUL-terminated; the caller frees it. */
lmc_status lmc_tokenizer_decode(const lmc_tokenizer *tok, const int32_t *ids, int n, int skip_special,
                                char **text, size_t *len);

int lmc_tokenizer_n_vocab(const lmc_tokenizer *tok);  /* model vocab + added tokens (max id + 1) */
const char *lmc_tokenizer_id_to_token(const lmc_tokenizer *tok, int32_t id);  /* NULL if none */
int32_t lmc_tokenizer_token_to_id(const lmc_tokenizer *tok, const char *token); /* -1 if absent */
int lmc_tokenizer_is_special(const lmc_tokenizer *tok, int32_t id);
int32_t lmc_tokenizer_bos_id(const lmc_tokenizer *tok);  /* -1 if none */
int32_t lmc_tokenizer_eos_id(const lmc_tokenizer *tok);  /* -1 if none */
const char *lmc_tokenizer_bos_token(const lmc_tokenizer *tok);  /* NULL if none */
const char *lmc_tokenizer_eos_token(const lmc_tokenizer *tok);
/* tokenizer_config.json add_bos_token / add_eos_token: 1, 0, or -1 when absent. */
int lmc_tokenizer_add_bos(const lmc_tokenizer *tok);
int lmc_tokenizer_add_eos(const lmc_tokenizer *tok);

/* Streaming detokenizer: feed ids one by one; emits only complete UTF-8 and never part
 * of an added token. Each *piece is malloc'ed (possibly ""), the caller frees it. The
 * concatenation of all pieces and the final flush equals lmc_tokenizer_decode of all ids. */
typedef struct lmc_detok lmc_detok;
lmc_status lmc_detok_init(lmc_detok **out, const lmc_tokenizer *tok, int skip_special);
lmc_status lmc_detok_push(lmc_detok *d, int32_t id, char **piece, size_t *len);
lmc_status lmc_detok_flush(lmc_detok *d, char **piece, size_t *len);
void lmc_detok_free(lmc_detok *d);

#endif
