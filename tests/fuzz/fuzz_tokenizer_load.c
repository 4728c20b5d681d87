/* fuzz_tokenizer_load.c — fuzz target: loading tokenizer.json (lmc_tokenizer_load_json).
 *
 * The input is tokenizer.json text, optionally followed by "\n--config--\n" and
 * tokenizer_config.json text. A tokenizer that loads is then used: a fixed mixed text
 * (ASCII, accents, CJK, digits, an invalid byte, special-token-like strings) is encoded
 * and decoded with the checks of tok_common.h, and every id's token text is looked up.
 */
#include <stdint.h>

#include "tok_common.h"

int fuzz_tokenizer_load(const uint8_t *d, size_t n) {
    const uint8_t *cfg;
    size_t head, cfg_n;
    int has_cfg = fuzz_split(d, n, "\n--config--\n", &head, &cfg, &cfg_n);
    char *json = fuzz_strndup(d, head);
    char *cjson = has_cfg ? fuzz_strndup(cfg, cfg_n) : NULL;
    lmc_tokenizer *tok = NULL;
    if (json && (!has_cfg || cjson) &&
        lmc_tokenizer_load_json(json, head, cjson, has_cfg ? cfg_n : 0, &tok) == LMC_OK) {
        int vocab = lmc_tokenizer_n_vocab(tok);
        FUZZ_CHECK(vocab >= 0);
        for (int i = 0; i < vocab && i < 4096; i++) {
            const char *t = lmc_tokenizer_id_to_token(tok, i);
            if (t) (void)lmc_tokenizer_token_to_id(tok, t);
            (void)lmc_tokenizer_is_special(tok, i);
        }
        FUZZ_CHECK(lmc_tokenizer_id_to_token(tok, vocab) == NULL && lmc_tokenizer_id_to_token(tok, -1) == NULL);
        static const char text[] = "Hello world, h\xc3\xa9llo 123! <s> </s> [CLS] \xe4\xbd\xa0\xe5\xa5\xbd  \t\n-x- \xff\xfe ab";
        tok_roundtrip(tok, text, sizeof text - 1, 1, 0);
        tok_roundtrip(tok, text, sizeof text - 1, 0, 1);
        int32_t ids[] = {0, 1, 2, 3, vocab - 1, vocab, -1, 7, 100000};
        tok_check_decode(tok, ids, (int)(sizeof ids / sizeof *ids), 0);
        lmc_tokenizer_free(tok);
    }
    free(json);
    free(cjson);
    return 0;
}

#ifdef LMC_FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return fuzz_tokenizer_load(d, n); }
#endif
