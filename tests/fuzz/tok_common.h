/* tok_common.h — checks the tokenizer fuzz targets share (included by fuzz_tokenizer_*.c).
 *
 * tok_roundtrip encodes a text and decodes the ids, checking what tokenizer.h promises:
 * ids lie in [0, n_vocab) (except post-processor ids, see below), and the streaming detokenizer's pieces concatenate to exactly
 * what lmc_tokenizer_decode returns for the same ids.
 */
#ifndef LMC_FUZZ_TOK_COMMON_H
#define LMC_FUZZ_TOK_COMMON_H

#include "fuzz.h"
#include "tok/tokenizer.h"

/* Decode ids both ways (whole and streamed) and compare. */
static void tok_check_decode(const lmc_tokenizer *tok, const int32_t *ids, int n, int skip_special) {
    char *text = NULL;
    size_t len = 0;
    if (lmc_tokenizer_decode(tok, ids, n, skip_special, &text, &len) != LMC_OK) return;
    FUZZ_CHECK(text != NULL && text[len] == 0);
    lmc_detok *dt = NULL;
    if (lmc_detok_init(&dt, tok, skip_special) == LMC_OK) {
        char *acc = malloc(len + 1);
        size_t at = 0;
        int ok = acc != NULL;
        for (int i = 0; ok && i <= n; i++) {
            char *piece = NULL;
            size_t pl = 0;
            lmc_status st = i < n ? lmc_detok_push(dt, ids[i], &piece, &pl) : lmc_detok_flush(dt, &piece, &pl);
            if (st != LMC_OK) { ok = 0; break; }
            if (at + pl > len) { FUZZ_CHECK(!"streamed pieces longer than the decoded text"); ok = 0; }
            else { memcpy(acc + at, piece, pl); at += pl; }
            free(piece);
        }
        if (ok) FUZZ_CHECK(at == len && memcmp(acc, text, len) == 0);
        free(acc);
        lmc_detok_free(dt);
    }
    free(text);
}

static void tok_roundtrip(const lmc_tokenizer *tok, const char *text, size_t len, int add_special, int skip_special) {
    int32_t *ids = NULL;
    int n = 0;
    int vocab = lmc_tokenizer_n_vocab(tok);
    if (lmc_tokenizer_encode(tok, text, len, add_special, &ids, &n) == LMC_OK) {
        FUZZ_CHECK(ids != NULL && n >= 0);
        /* A post-processor's special-token ids are taken as written (as HF does), so with
         * add_special they need not lie below n_vocab; the forward refuses such ids. */
        for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && (add_special || ids[i] < vocab));
        tok_check_decode(tok, ids, n, skip_special);
        free(ids);
    }
    ids = NULL;
    if (lmc_tokenizer_encode_chat(tok, text, len, &ids, &n) == LMC_OK) {
        for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);
        free(ids);
    }
}

#endif
