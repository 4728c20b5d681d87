/* toktext.c — per-token texts for constrained decoding (see toktext.h). "First" texts are
 * decode([v]); "in context" texts are decode([ref, v]) minus decode([ref]) for an ASCII
 * reference token that decodes the same alone and after itself. Raw bytes replace what
 * decoding turns into U+FFFD: a <0xHH> byte-fallback token is its byte, a byte-level token
 * holding part of a character is its bytes (GPT-2's byte-to-character map reversed).
 * The table owns one byte buffer and two offset/length arrays.
 */
#include "toktext.h"

#include <stdlib.h>
#include <string.h>

struct lmc_toktext {
    int n_vocab;
    char *buf;
    int64_t *off;   /* [2 * n_vocab]: first texts, then in-context texts */
    int *len;       /* [2 * n_vocab]; -1: never allowed */
};

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The byte of a "<0xHH>" token, or -1. */
static int byte_token_value(const lmc_tokenizer *tok, int32_t v) {
    const char *t = lmc_tokenizer_id_to_token(tok, v);
    if (!t || strlen(t) != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>') return -1;
    int hi = hexval(t[3]), lo = hexval(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static int has_replacement(const char *s, size_t n) {
    for (size_t i = 0; i + 3 <= n; i++)
        if (!memcmp(s + i, "\xEF\xBF\xBD", 3)) return 1;
    return 0;
}

/* Byte-level BPE: the bytes a token string's characters stand for (GPT-2's map: printable
 * Latin-1 bytes are themselves, the other 68 bytes are U+0100.. in order). 0 when some
 * character is outside the map. out holds at most cap bytes. */
static int bytelevel_bytes(const char *s, char *out, size_t cap, size_t *n_out) {
    int16_t rev[324]; /* character → byte (built per call: only tokens that decode to U+FFFD get here) */
    for (int b = 0, k = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        if (printable) rev[b] = (int16_t)b;
        else { rev[b] = -1; rev[256 + k++] = (int16_t)b; }
    }
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        uint32_t cp;
        if (*p < 0x80) cp = *p++;
        else if ((*p & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) { cp = (uint32_t)(*p & 0x1F) << 6 | (p[1] & 0x3F); p += 2; }
        else return 0;
        if (cp >= 324 || rev[cp] < 0 || n >= cap) return 0;
        out[n++] = (char)rev[cp];
    }
    *n_out = n;
    return 1;
}

/* 1 when s[0..n) is complete, valid UTF-8. */
static int utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int k = p[i] < 0x80 ? 1 : (p[i] & 0xE0) == 0xC0 ? 2 : (p[i] & 0xF0) == 0xE0 ? 3 : (p[i] & 0xF8) == 0xF0 ? 4 : 0;
        if (!k || i + (size_t)k > n) return 0;
        for (int j = 1; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* An ASCII alphanumeric token whose text is the same alone and twice in a row. */
static int32_t find_ref_token(const lmc_tokenizer *tok, int V) {
    for (int32_t v = 0; v < V; v++) {
        if (lmc_tokenizer_is_special(tok, v) || byte_token_value(tok, v) >= 0 || !lmc_tokenizer_id_to_token(tok, v)) continue;
        char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        int32_t two[2] = {v, v};
        int ok = lmc_tokenizer_decode(tok, &v, 1, 0, &a, &al) >= 0 && al >= 1 && al <= 4;
        for (size_t k = 0; ok && k < al; k++)
            ok = (a[k] >= 'a' && a[k] <= 'z') || (a[k] >= 'A' && a[k] <= 'Z') || (a[k] >= '0' && a[k] <= '9');
        ok = ok && lmc_tokenizer_decode(tok, two, 2, 0, &b, &bl) >= 0 && bl == 2 * al && !memcmp(b, a, al) &&
             !memcmp(b + al, a, al);
        free(a);
        free(b);
        if (ok) return v;
    }
    return -1;
}

typedef struct builder { char *buf; size_t used, cap; } builder;

/* Append p[0..n) and return its offset, or -1 when out of memory. */
static int64_t put(builder *b, const char *p, size_t n) {
    if (b->used + n > b->cap) {
        size_t nc = (b->used + n) * 2 + 64;
        char *t = realloc(b->buf, nc);
        if (!t) return -1;
        b->buf = t;
        b->cap = nc;
    }
    if (n) memcpy(b->buf + b->used, p, n);
    b->used += n;
    return (int64_t)(b->used - n);
}

void lmc_toktext_free(lmc_toktext *t) {
    if (!t) return;
    free(t->buf);
    free(t->off);
    free(t->len);
    free(t);
}

/* The two texts of token v into slots v (first) and V + v (in context). */
static lmc_status build_one(lmc_toktext *t, builder *b, const lmc_tokenizer *tok, int32_t v, int32_t ref,
                            const char *rt, size_t rl) {
    int V = t->n_vocab;
    t->off[v] = t->off[V + v] = 0;
    t->len[v] = t->len[V + v] = -1;
    if (v >= lmc_tokenizer_n_vocab(tok) || !lmc_tokenizer_id_to_token(tok, v) || lmc_tokenizer_is_special(tok, v))
        return LMC_OK;
    char *a = NULL, *c = NULL;
    size_t an = 0, cn = 0;
    if (lmc_tokenizer_decode(tok, &v, 1, 0, &a, &an) < 0) { free(a); lmc_clear_error(); return LMC_OK; }
    int32_t two[2] = {ref, v};
    int ctx_ok = ref >= 0 && lmc_tokenizer_decode(tok, two, 2, 0, &c, &cn) >= 0 && cn >= rl && !memcmp(c, rt, rl);
    if (!ctx_ok) lmc_clear_error();
    const char *m = ctx_ok ? c + rl : a; /* in context (the text alone when no reference token exists) */
    size_t mn = ctx_ok ? cn - rl : an;
    char raw[256];
    size_t rn = 0;
    int byte = byte_token_value(tok, v), use_raw = 0;
    if (byte >= 0 && (an == 1 ? (unsigned char)a[0] == byte : byte >= 0x80 && has_replacement(a, an))) {
        raw[0] = (char)byte; /* ByteFallback decodes it (U+FFFD alone when it is part of a character) */
        rn = 1;
        use_raw = 1;
    } else if (has_replacement(m, mn)) {
        const char *s = lmc_tokenizer_id_to_token(tok, v);
        use_raw = !strstr(s, "\xEF\xBF\xBD") && bytelevel_bytes(s, raw, sizeof raw, &rn) && !utf8_valid(raw, rn);
    }
    lmc_status st = LMC_OK;
    if (use_raw) {
        int64_t o = put(b, raw, rn);
        if (o < 0) st = lmc_fail(LMC_ERR_NOMEM, "token texts");
        else {
            t->off[v] = t->off[V + v] = o;
            t->len[v] = t->len[V + v] = (int)rn;
        }
    } else {
        int64_t o = put(b, a, an);
        if (o < 0) st = lmc_fail(LMC_ERR_NOMEM, "token texts");
        else {
            t->off[v] = o;
            t->len[v] = an > 0 ? (int)an : -1;
            if (mn == an && !memcmp(m, a, an)) { t->off[V + v] = o; t->len[V + v] = t->len[v]; }
            else if ((o = put(b, m, mn)) < 0) st = lmc_fail(LMC_ERR_NOMEM, "token texts");
            else { t->off[V + v] = o; t->len[V + v] = mn > 0 ? (int)mn : -1; }
        }
    }
    free(a);
    free(c);
    return st;
}

lmc_status lmc_toktext_build(const lmc_tokenizer *tok, int n_vocab, lmc_toktext **out) {
    if (!tok || !out || n_vocab <= 0) return lmc_fail(LMC_ERR_ARG, "lmc_toktext_build: bad argument");
    lmc_toktext *t = calloc(1, sizeof *t);
    if (!t) return lmc_fail(LMC_ERR_NOMEM, "token texts");
    t->n_vocab = n_vocab;
    t->off = malloc((size_t)2 * n_vocab * sizeof *t->off);
    t->len = malloc((size_t)2 * n_vocab * sizeof *t->len);
    builder b = {NULL, 0, 0};
    if (!t->off || !t->len) { lmc_toktext_free(t); return lmc_fail(LMC_ERR_NOMEM, "token texts"); }
    int V = lmc_tokenizer_n_vocab(tok) < n_vocab ? lmc_tokenizer_n_vocab(tok) : n_vocab;
    int32_t ref = find_ref_token(tok, V);
    char *rt = NULL;
    size_t rl = 0;
    lmc_status st = LMC_OK;
    if (ref >= 0 && lmc_tokenizer_decode(tok, &ref, 1, 0, &rt, &rl) < 0) { lmc_clear_error(); ref = -1; }
    for (int32_t v = 0; st >= 0 && v < n_vocab; v++) st = build_one(t, &b, tok, v, ref, rt, rl);
    free(rt);
    t->buf = b.buf;
    if (st < 0) { lmc_toktext_free(t); return st; }
    *out = t;
    return LMC_OK;
}

const char *lmc_toktext_get(const lmc_toktext *t, int32_t v, int first, int *n) {
    if (v < 0 || v >= t->n_vocab) { *n = -1; return ""; }
    int k = first ? v : t->n_vocab + v;
    *n = t->len[k];
    return *n > 0 ? t->buf + t->off[k] : "";
}
