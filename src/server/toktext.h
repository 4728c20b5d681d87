/* toktext.h — the text of every token as constrained decoding must see it: exactly
 * what the streaming detokenizer (lmc_detok) emits for it, for every tokenizer family.
 *
 * That text depends on context: SentencePiece decoders (Metaspace, Replace+Strip) drop the
 * leading space of the first token only, WordPiece joins "##" pieces, a <0xHH>
 * byte-fallback token is one raw byte of a run, and a byte-level BPE token may hold part
 * of a UTF-8 character. So each token has two texts, both derived by decoding through
 * lmc_tokenizer_decode: "first" (the first token of the output) and "in context" (after
 * other output). Bytes of an incomplete UTF-8 character are kept raw, so the texts of a
 * token sequence concatenate to its decoded text whenever that text is valid UTF-8.
 * The table is built once (two decodes per token) and read-only afterwards.
 */
#ifndef LMC_SERVER_TOKTEXT_H
#define LMC_SERVER_TOKTEXT_H

#include <stdint.h>

#include "core/status.h"
#include "tok/tokenizer.h"

typedef struct lmc_toktext lmc_toktext;

/* n_vocab: the model's vocabulary size (ids ≥ the tokenizer's get no text). */
lmc_status lmc_toktext_build(const lmc_tokenizer *tok, int n_vocab, lmc_toktext **out);
void lmc_toktext_free(lmc_toktext *t);
/* Token v's text (not NUL-terminated) and its length in *n; *n ≤ 0 means the token never
 * fits constrained output (special tokens, empty text, ids out of range). */
const char *lmc_toktext_get(const lmc_toktext *t, int32_t v, int first, int *n);

#endif
