/* test_api.c — the public API (include/lmc.h) used as a library user would:
 * only <lmc.h>, on the demo model (models/demo) and a parity fixture. */
#include <lmc.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

typedef struct text_buf { char s[4096]; size_t n; int tokens; int32_t first; } text_buf;

static int collect(const char *text, size_t len, int32_t id, void *ud) {
    text_buf *b = ud;
    if (id >= 0 && b->tokens++ == 0) b->first = id;
    if (b->n + len < sizeof b->s) { memcpy(b->s + b->n, text, len); b->n += len; b->s[b->n] = 0; }
    return 0;
}

static int stop_after_three(const char *text, size_t len, int32_t id, void *ud) {
    (void)text; (void)len;
    return id >= 0 && ++*(int *)ud >= 3;
}

static void test_engine_and_text(void) {
    lmc_engine *eng = NULL;
    lmc_engine_params ep = lmc_engine_default_params();
    ep.n_threads = 2;
    CHECK_MSG(lmc_engine_open("models/demo", &ep, &eng) == LMC_OK, "%s", lmc_last_error());
    if (!eng) return;
    CHECK_EQ_INT(lmc_engine_n_vocab(eng), 4096);
    CHECK(lmc_engine_has_tokenizer(eng));
    int32_t *ids = NULL;
    int n = 0;
    CHECK(lmc_tokenize(eng, "In the beginning", 16, 1, &ids, &n) == LMC_OK);
    CHECK(n >= 3 && ids[0] == 1); /* <|bos|> added */
    char *back = NULL;
    CHECK(lmc_detokenize(eng, ids, n, 1, &back) == LMC_OK);
    CHECK_EQ_STR(back, "In the beginning");
    lmc_free(back);

    lmc_session *s = NULL;
    CHECK(lmc_session_open(eng, NULL, &s) == LMC_OK);
    lmc_sampler_params sp = lmc_sampler_default_params();
    text_buf a = {{0}, 0, 0, -1}, b = {{0}, 0, 0, -1};
    CHECK(lmc_session_generate_text(s, "In the beginning", 24, &sp, collect, &a) == LMC_OK);
    CHECK(lmc_session_generate(s, ids, n, 24, &sp, collect, &b) == LMC_OK);
    CHECK(a.tokens > 0 && a.tokens <= 24);
    CHECK(a.n > 20 && strcmp(a.s, b.s) == 0); /* text and ids give the same greedy continuation */
    int count = 0;
    CHECK(lmc_session_generate(s, ids, n, 24, &sp, stop_after_three, &count) == LMC_OK);
    CHECK_EQ_INT(count, 3); /* the callback stops generation */

    /* low level: one batch, logits of every row; the last row's argmax is the first generated token */
    int32_t pos[64], seq[64];
    uint8_t want[64];
    for (int i = 0; i < n; i++) { pos[i] = i; seq[i] = 0; want[i] = 1; }
    lmc_session_truncate(s, 0, 0);
    lmc_batch batch = {n, ids, pos, seq, want};
    CHECK(lmc_session_decode(s, &batch) == LMC_OK);
    const float *last = lmc_session_logits(s, n - 1);
    CHECK(last != NULL && lmc_session_logits(s, n) == NULL);
    int best = 0;
    for (int v = 1; last && v < 4096; v++) if (last[v] > last[best]) best = v;
    text_buf c = {{0}, 0, 0, -1};
    CHECK(lmc_session_generate(s, ids, n, 1, &sp, collect, &c) == LMC_OK);
    CHECK_MSG(c.first == best, "argmax %d vs generated %d", best, c.first);
    /* a skipped position is an error with a message, not a crash */
    int32_t far = 999, zero = 0, tok = 5;
    lmc_batch bad = {1, &tok, &far, &zero, NULL};
    CHECK(lmc_session_decode(s, &bad) == LMC_ERR_RANGE && strlen(lmc_last_error()) > 0);
    lmc_free(ids);
    lmc_session_close(s);
    lmc_engine_close(eng);
}

static void test_errors(void) {
    lmc_engine *eng = NULL;
    CHECK(lmc_engine_open("/nonexistent/model", NULL, &eng) < 0 && eng == NULL);
    CHECK(strstr(lmc_last_error(), "/nonexistent/model") != NULL);
    /* a fixture without tokenizer: text calls fail cleanly, ids work */
    CHECK(lmc_engine_open("tests/fixtures/llama", NULL, &eng) == LMC_OK);
    if (!eng) return;
    CHECK(!lmc_engine_has_tokenizer(eng));
    int32_t *ids = NULL;
    int n = 0;
    CHECK(lmc_tokenize(eng, "x", 1, 1, &ids, &n) == LMC_ERR_NOT_FOUND);
    lmc_engine_close(eng);
    /* an unknown compute precision is refused by name */
    lmc_engine_params ep = lmc_engine_default_params();
    CHECK(ep.compute && !strcmp(ep.compute, "bf16"));
    ep.compute = "f16";
    eng = NULL;
    CHECK(lmc_engine_open("tests/fixtures/llama", &ep, &eng) == LMC_ERR_ARG && eng == NULL);
    CHECK_MSG(strstr(lmc_last_error(), "'f16'") != NULL, "%s", lmc_last_error());
    ep.compute = "f32";
    CHECK(lmc_engine_open("tests/fixtures/llama", &ep, &eng) == LMC_OK);
    lmc_engine_close(eng);
}

int main(void) {
    RUN(test_engine_and_text);
    RUN(test_errors);
    return TEST_END();
}
