/* fuzz_tokenizer_encode.c — fuzz target: encoding arbitrary bytes with loaded tokenizers.
 *
 * At start the demo model's tokenizer and the nine synthetic tokenizers of
 * tests/oracle/tok/synth/ (byte-level BPE, SentencePiece BPE, Unigram with and without
 * byte fallback, WordLevel, WordPiece, added-token flags, split behaviours) are loaded.
 * Input: byte 0 picks the tokenizer, byte 1 the flags (add_special, skip_special, and
 * whether the rest is also read as little-endian 16-bit ids to decode); the rest is the
 * text, arbitrary bytes (invalid UTF-8 included). Checks: tok_common.h.
 */
#include <stdint.h>

#include "tok_common.h"

#define TOKENC_MAX 16
static lmc_tokenizer *tokenc_tok_[TOKENC_MAX];
static int tokenc_n_;

int fuzz_tokenizer_encode_init(void) {
    if (tokenc_n_) return 0;
    static const char *synth[] = {"added_flags", "bytelevel_noregex_nfc", "bytelevel_roberta", "sp_bpe_metaspace_first",
                                  "split_behaviors", "unigram_always", "unigram_nosplit_bytefallback", "wordlevel_seq",
                                  "wordpiece_bert"};
    char path[4200];
    if (lmc_tokenizer_load(LMC_DEMO_DIR, &tokenc_tok_[tokenc_n_]) == LMC_OK) tokenc_n_++;
    for (size_t i = 0; i < sizeof synth / sizeof *synth; i++) {
        snprintf(path, sizeof path, "%s/tests/oracle/tok/synth/%s/tokenizer.json", fuzz_repo_root(), synth[i]);
        if (lmc_tokenizer_load(path, &tokenc_tok_[tokenc_n_]) == LMC_OK) tokenc_n_++;
        else fprintf(stderr, "fuzz_tokenizer_encode: cannot load %s: %s\n", path, lmc_last_error());
    }
    return tokenc_n_ == 1 + (int)(sizeof synth / sizeof *synth) ? 0 : -1;
}

int fuzz_tokenizer_encode(const uint8_t *d, size_t n) {
    if (n < 2 || tokenc_n_ == 0) return 0;
    const lmc_tokenizer *tok = tokenc_tok_[d[0] % tokenc_n_];
    int flags = d[1];
    const char *text = (const char *)d + 2;
    size_t len = n - 2;
    tok_roundtrip(tok, text, len, flags & 1, (flags >> 1) & 1);
    if (flags & 4) {
        int n_ids = (int)(len / 2);
        int32_t *ids = malloc((size_t)(n_ids ? n_ids : 1) * sizeof *ids);
        if (ids) {
            for (int i = 0; i < n_ids; i++) ids[i] = (int16_t)(d[2 + 2 * i] | d[3 + 2 * i] << 8);
            tok_check_decode(tok, ids, n_ids, (flags >> 1) & 1);
            free(ids);
        }
    }
    return 0;
}

#ifdef LMC_FUZZ_LIBFUZZER
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    if (fuzz_tokenizer_encode_init() < 0) abort();
    return 0;
}
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return fuzz_tokenizer_encode(d, n); }
#endif
