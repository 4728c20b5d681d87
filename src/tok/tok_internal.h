/* tok_internal.h — types shared by the tokenizer modules (not a public header).
 *
 * tokenizer.c owns the lmc_tokenizer object and the encode pipeline; the
 * stages live in tok_normalize.c, tok_pretok.c, tok_model.c (BPE, Unigram,
 * WordLevel, WordPiece) and tok_decode.c; tok_util.c holds the hash maps,
 * byte buffers, UTF-8 helpers and the GPT-2 byte<->char table they share.
 * Everything here is loaded once and read-only afterwards (thread-safe encode).
 */
#ifndef LMC_TOK_INTERNAL_H
#define LMC_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct cJSON;

/* ---- growable byte buffer ---- */
typedef struct tok_buf { char *data; size_t len, cap; } tok_buf;
lmc_status tok_buf_reserve(tok_buf *b, size_t extra);
lmc_status tok_buf_put(tok_buf *b, const void *p, size_t n);
lmc_status tok_buf_putc(tok_buf *b, char c);
lmc_status tok_buf_put_cp(tok_buf *b, uint32_t cp);   /* UTF-8 encode a code point */
void tok_buf_free(tok_buf *b);

/* ---- list of text pieces living in one buffer ---- */
typedef struct tok_piece { uint32_t off, len; uint8_t at_start; } tok_piece;
typedef struct tok_span { size_t s, e; int m; } tok_span;   /* a match (m=1) or a gap (m=0) */
typedef struct tok_pieces { tok_buf text; tok_piece *p; int n, cap; tok_span *sp; int n_sp, cap_sp; } tok_pieces;
lmc_status tok_pieces_add(tok_pieces *ps, const char *s, size_t len, int at_start);
/* Adds a piece already present in ps->text at [off, off+len). */
lmc_status tok_pieces_add_ref(tok_pieces *ps, size_t off, size_t len, int at_start);
void tok_pieces_clear(tok_pieces *ps);
void tok_pieces_free(tok_pieces *ps);

/* ---- string -> int32 hash map (keys are borrowed; the owner keeps them alive) ---- */
typedef struct tok_strmap_ent {
    const char *key; uint32_t len, hash; int32_t val; uint32_t pad; uint64_t head; /* first 8 bytes, zero-padded */
} tok_strmap_ent;
typedef struct tok_strmap { tok_strmap_ent *ent; uint32_t cap, n; } tok_strmap;
uint32_t tok_hash(const void *p, size_t n);
lmc_status tok_strmap_init(tok_strmap *m, size_t expect);
/* Insert or overwrite. */
lmc_status tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val);
lmc_status tok_strmap_put_h(tok_strmap *m, const char *key, size_t len, int32_t val, uint32_t h);
/* Returns the value or -1. */
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len);
/* The same with a precomputed tok_hash(key, len); prefetch warms the slot for it. */
int32_t tok_strmap_get_h(const tok_strmap *m, const char *key, size_t len, uint32_t h);
void tok_strmap_prefetch(const tok_strmap *m, uint32_t h);
void tok_strmap_free(tok_strmap *m);

/* ---- uint64 -> uint64 hash map (BPE pair ranks, trie edges) ---- */
typedef struct tok_u64slot { uint64_t key, val; } tok_u64slot;
typedef struct tok_u64map { tok_u64slot *slot; uint32_t cap, n; } tok_u64map;
lmc_status tok_u64map_init(tok_u64map *m, size_t expect);
lmc_status tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val);
int tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val); /* 1 found */
void tok_u64map_prefetch(const tok_u64map *m, uint64_t key);
void tok_u64map_free(tok_u64map *m);

/* ---- UTF-8 ---- */
/* Decode one code point from valid UTF-8 at s (n bytes available); returns its length. */
int tok_utf8_next(const char *s, size_t n, uint32_t *cp);
int tok_utf8_len(unsigned char lead);
/* Copy s into out replacing every ill-formed sequence by U+FFFD (maximal subparts, as
 * WHATWG/Python "replace" do). */
lmc_status tok_utf8_sanitize(const char *s, size_t n, tok_buf *out);
int tok_utf8_valid(const char *s, size_t n);
int tok_is_whitespace(uint32_t cp);   /* Unicode White_Space (Rust char::is_whitespace) */
int tok_is_alnum(uint32_t cp);        /* L* or N* */
int tok_is_word(uint32_t cp);         /* Rust regex \w: Alphabetic, M*, Nd, Pc, ZWNJ/ZWJ */
int tok_is_numeric(uint32_t cp);      /* Nd, Nl, No */
int tok_is_punct(uint32_t cp);        /* ASCII punctuation or P* */
int tok_is_mark(uint32_t cp);         /* Mn, Mc, Me */

/* ---- GPT-2 byte <-> printable char table ---- */
extern char tok_bytelevel_utf8[256][3]; /* NUL-terminated UTF-8 of each byte's char */
extern uint8_t tok_bytelevel_len[256];
int tok_bytelevel_byte(uint32_t cp);  /* byte of a mapped char, or -1 */
void tok_bytelevel_init(void);

/* ---- regex / literal pattern (Split, Replace) ---- */
typedef struct tok_pattern {
    char *lit; size_t lit_len;   /* literal (String pattern), or NULL */
    pcre2_code *re;              /* compiled Regex pattern, or NULL */
    int jit;
} tok_pattern;
lmc_status tok_pattern_parse(tok_pattern *p, const struct cJSON *j, const char *what);
lmc_status tok_pattern_compile_regex(tok_pattern *p, const char *src);
void tok_pattern_free(tok_pattern *p);
/* Next match at or after `from` in s[0..n): returns 1 and [*ms,*me) or 0. Empty matches
 * are reported (the caller advances). */
int tok_pattern_find(const tok_pattern *p, const char *s, size_t n, size_t from, pcre2_match_data *md,
                     size_t *ms, size_t *me);
lmc_status tok_pattern_replace(const tok_pattern *p, const char *s, size_t n, const char *with,
                               size_t with_len, pcre2_match_data *md, tok_buf *out);

/* ---- normalizers ---- */
typedef struct tok_normalizer tok_normalizer;
lmc_status tok_normalizer_parse(const struct cJSON *j, tok_normalizer **out);
void tok_normalizer_free(tok_normalizer *n);
/* Normalize s into out (out is cleared first). */
lmc_status tok_normalizer_apply(const tok_normalizer *n, const char *s, size_t len, tok_buf *out,
                                tok_buf *tmp, pcre2_match_data *md);

/* ---- pre-tokenizers ---- */
typedef struct tok_pretok tok_pretok;
lmc_status tok_pretok_parse(const struct cJSON *j, tok_pretok **out);
void tok_pretok_free(tok_pretok *p);
/* Transform the pieces in *in (may swap *in and *tmp); result left in *in. */
lmc_status tok_pretok_apply(const tok_pretok *p, tok_pieces **in, tok_pieces **tmp, pcre2_match_data *md);

/* ---- models ---- */
typedef enum { TOK_MODEL_BPE, TOK_MODEL_UNIGRAM, TOK_MODEL_WORDLEVEL, TOK_MODEL_WORDPIECE } tok_model_kind;
typedef struct tok_model {
    tok_model_kind kind;
    int32_t n_vocab;           /* ids 0..n_vocab-1 (holes possible: NULL strings) */
    char **id_to_tok;          /* [n_vocab], NUL-terminated, owned via `strs` */
    char *strs;                /* arena of all vocab strings */
    tok_strmap vocab;
    int32_t unk_id;            /* -1 if none */
    int unk_missing;           /* BPE: unk_token named but absent from the vocab (HF errors when needed) */
    /* BPE */
    tok_u64map merges;         /* (a<<32|b) -> (rank<<32|new_id) */
    char *cont_prefix, *eow_suffix;
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256];     /* id of "<0xAB>" or -1 (byte_fallback) */
    int32_t *char_ids;         /* [0x10000] id of the one-character token of a BMP code point, -1 none,
                                  -2 not looked up yet (filled lazily by encode, atomically) */
    /* Unigram */
    double *scores;            /* [n_vocab] */
    double min_score;
    int max_tok_len;           /* bytes */
    /* WordPiece */
    int max_input_chars;
} tok_model;
lmc_status tok_model_parse(const struct cJSON *j, tok_model *m);
void tok_model_free(tok_model *m);

typedef struct tok_cache tok_cache;  /* per-encode word cache */
tok_cache *tok_cache_new(void);
/* Add the 1 MB memo of BPE pair lookups (for a cache that lives across calls). */
lmc_status tok_cache_enable_pairs(tok_cache *c);
void tok_cache_free(tok_cache *c);
typedef struct tok_ids { int32_t *v; int n, cap; } tok_ids;
lmc_status tok_ids_push(tok_ids *ids, int32_t id);
/* Tokenize one pre-token and append its ids. */
lmc_status tok_model_tokenize(const tok_model *m, const char *s, size_t n, tok_cache *cache, tok_ids *out);

/* ---- decoders ---- */
typedef struct tok_decoder tok_decoder;
lmc_status tok_decoder_parse(const struct cJSON *j, tok_decoder **out);
void tok_decoder_free(tok_decoder *d);
/* Decode a list of token strings (pieces) into out (appended). */
lmc_status tok_decoder_run(const tok_decoder *d, tok_pieces *toks, tok_pieces *tmp, tok_buf *out);

/* ---- fast in-place JSON scanning (tok_json.c) for the big vocab/merges sections ---- */
typedef struct tok_jscan { const char *start, *p, *end; } tok_jscan;
lmc_status tok_js_string(tok_jscan *s, tok_buf *out);       /* decode a string, appended to out */
lmc_status tok_js_skip(tok_jscan *s, int depth);           /* validate and skip any value */
lmc_status tok_js_skip_container(tok_jscan *s);            /* skip [..]/{..} without validating */
lmc_status tok_js_object(tok_jscan *s, lmc_status (*fn)(void *ctx, const char *key, size_t klen, tok_jscan *s),
                         void *ctx);
lmc_status tok_js_uint(tok_jscan *s, uint32_t max, uint32_t *out);
lmc_status tok_js_expect(tok_jscan *s, char c);
int tok_js_accept(tok_jscan *s, char c);
int tok_js_peek(tok_jscan *s);

/* Raw JSON spans of model.vocab (an object) and model.merges, or NULL to use cJSON. */
typedef struct tok_spans { const char *doc, *vocab, *vocab_end, *merges, *merges_end; } tok_spans;
lmc_status tok_model_parse_fast(const struct cJSON *j, const tok_spans *sp, tok_model *m);

/* ---- JSON helpers ---- */
const char *tok_json_str(const struct cJSON *obj, const char *key); /* NULL if absent/not string */
int tok_json_bool(const struct cJSON *obj, const char *key, int dflt);

#endif
