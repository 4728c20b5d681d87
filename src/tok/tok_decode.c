/* tok_decode.c — the `decoder` section of tokenizer.json and streaming detokenization.
 *
 * Decoders turn the token strings of a list of ids back into text: ByteLevel,
 * Metaspace, ByteFallback, Fuse, Strip, Replace, WordPiece, BPEDecoder and
 * Sequence (each maps a list of strings to a list of strings; the results are
 * concatenated). lmc_detok_* keeps a small window of ids and emits only text
 * that is final: complete UTF-8 characters, never part of a token.
 */
#include "tok/tokenizer.h"
#include "tok/tok_internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

typedef enum { D_BYTELEVEL, D_METASPACE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_REPLACE, D_WORDPIECE, D_BPE,
               D_SEQ } dkind;

struct tok_decoder {
    dkind kind;
    tok_decoder **kids; int n_kids;
    char *str; size_t str_len;       /* Replace content, WordPiece prefix, BPE suffix */
    tok_pattern pat;                 /* Replace */
    char repl[8]; size_t repl_len;   /* Metaspace */
    int prepend;                     /* Metaspace: strip the first leading space */
    uint32_t content; int start, stop; /* Strip */
    int cleanup;                     /* WordPiece */
};

void tok_decoder_free(tok_decoder *d) {
    if (!d) return;
    for (int i = 0; i < d->n_kids; i++) tok_decoder_free(d->kids[i]);
    free(d->kids);
    free(d->str);
    tok_pattern_free(&d->pat);
    free(d);
}

static int json_int(const cJSON *j, const char *key, int dflt, int *ok) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e6) { *ok = 0; return dflt; }
    return v->valueint;
}

lmc_status tok_decoder_parse(const cJSON *j, tok_decoder **out) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return LMC_OK;
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "decoder: expected an object");
    const char *type = tok_json_str(j, "type");
    if (!type) return lmc_fail(LMC_ERR_FORMAT, "decoder: missing \"type\"");
    tok_decoder *d = calloc(1, sizeof *d);
    if (!d) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    lmc_status st = LMC_OK;
    if (!strcmp(type, "ByteLevel")) { d->kind = D_BYTELEVEL; tok_bytelevel_init(); }
    else if (!strcmp(type, "Metaspace")) {
        d->kind = D_METASPACE;
        const char *r = tok_json_str(j, "replacement");
        if (!r) r = "\xE2\x96\x81";
        size_t rl = strlen(r);
        uint32_t cp;
        /* one whole character: a partial one would be replaced inside other characters */
        if (rl == 0 || rl > 4 || !tok_utf8_valid(r, rl) || tok_utf8_next(r, rl, &cp) != (int)rl)
            st = lmc_fail(LMC_ERR_FORMAT, "decoder Metaspace: replacement must be one character");
        else { memcpy(d->repl, r, rl); d->repl_len = rl; }
        const char *ps = tok_json_str(j, "prepend_scheme");
        d->prepend = ps ? strcmp(ps, "never") != 0 : tok_json_bool(j, "add_prefix_space", 1);
    } else if (!strcmp(type, "ByteFallback")) d->kind = D_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse")) d->kind = D_FUSE;
    else if (!strcmp(type, "Strip")) {
        d->kind = D_STRIP;
        const char *c = tok_json_str(j, "content");
        int ok = 1;
        if (!c || !*c || !tok_utf8_valid(c, strlen(c))) st = lmc_fail(LMC_ERR_FORMAT, "decoder Strip: \"content\" must be one character");
        else tok_utf8_next(c, strlen(c), &d->content);
        d->start = json_int(j, "start", 0, &ok);
        d->stop = json_int(j, "stop", 0, &ok);
        if (!ok && st >= 0) st = lmc_fail(LMC_ERR_FORMAT, "decoder Strip: start/stop must be small non-negative integers");
    } else if (!strcmp(type, "Replace")) {
        d->kind = D_REPLACE;
        const char *c = tok_json_str(j, "content");
        if (!c) st = lmc_fail(LMC_ERR_FORMAT, "decoder Replace: missing string \"content\"");
        else if (!tok_utf8_valid(c, strlen(c))) st = lmc_fail(LMC_ERR_FORMAT, "decoder Replace: \"content\" is not UTF-8");
        else {
            d->str = strdup(c);
            d->str_len = strlen(c);
            st = tok_pattern_parse(&d->pat, cJSON_GetObjectItemCaseSensitive(j, "pattern"), "decoder Replace");
        }
    } else if (!strcmp(type, "WordPiece")) {
        d->kind = D_WORDPIECE;
        const char *p = tok_json_str(j, "prefix");
        d->str = strdup(p ? p : "##");
        d->str_len = strlen(d->str);
        d->cleanup = tok_json_bool(j, "cleanup", 1);
    } else if (!strcmp(type, "BPEDecoder")) {
        d->kind = D_BPE;
        const char *p = tok_json_str(j, "suffix");
        d->str = strdup(p ? p : "</w>");
        d->str_len = strlen(d->str);
    } else if (!strcmp(type, "Sequence")) {
        d->kind = D_SEQ;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(arr)) st = lmc_fail(LMC_ERR_FORMAT, "decoder Sequence: missing array \"decoders\"");
        else {
            d->kids = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *d->kids);
            if (!d->kids) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
            const cJSON *it;
            cJSON_ArrayForEach(it, arr) {
                if (st < 0) break;
                st = tok_decoder_parse(it, &d->kids[d->n_kids]);
                if (st >= 0 && d->kids[d->n_kids]) d->n_kids++;
            }
        }
    } else st = lmc_fail(LMC_ERR_UNSUPPORTED, "decoder type \"%s\" is not supported", type);
    if (st >= 0 && (d->kind == D_WORDPIECE || d->kind == D_BPE) && !d->str) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
    /* a prefix/suffix that is part of a character would be cut out of other characters */
    if (st >= 0 && (d->kind == D_WORDPIECE || d->kind == D_BPE) && !tok_utf8_valid(d->str, d->str_len))
        st = lmc_fail(LMC_ERR_FORMAT, "decoder %s: \"%s\" is not UTF-8", type, d->kind == D_BPE ? "suffix" : "prefix");
    if (st < 0) { tok_decoder_free(d); return st; }
    *out = d;
    return LMC_OK;
}

/* text.data is NULL while every piece so far is empty (nothing was allocated). */
static inline const char *P(const tok_pieces *ps, int i) { return ps->text.data ? ps->text.data + ps->p[i].off : ""; }

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* transformers' clean_up_tokenization (WordPiece decoder cleanup) */
static lmc_status cleanup_put(tok_pieces *o, const char *s, size_t n, int at_start) {
    static const char *from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    static const char *to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    tok_buf b = {0};
    lmc_status st = tok_buf_put(&b, s, n);
    for (int k = 0; k < 10 && st >= 0; k++) {
        tok_buf c = {0};
        size_t fl = strlen(from[k]);
        for (size_t i = 0; i < b.len && st >= 0;) {
            if (i + fl <= b.len && memcmp(b.data + i, from[k], fl) == 0) { st = tok_buf_put(&c, to[k], strlen(to[k])); i += fl; }
            else st = tok_buf_putc(&c, b.data[i++]);
        }
        tok_buf_free(&b);
        b = c;
    }
    if (st >= 0) st = tok_pieces_add(o, b.data ? b.data : "", b.len, at_start);
    tok_buf_free(&b);
    return st;
}

static lmc_status run_one(const tok_decoder *d, const tok_pieces *in, tok_pieces *o) {
    tok_pieces_clear(o);
    switch (d->kind) {
    case D_BYTELEVEL: {
        tok_buf raw = {0};
        lmc_status st = LMC_OK;
        for (int i = 0; i < in->n && st >= 0; i++) {
            const char *s = P(in, i);
            size_t n = in->p[i].len, mark = raw.len;
            int ok = 1;
            for (size_t k = 0; k < n && st >= 0;) {
                uint32_t cp;
                int l = tok_utf8_next(s + k, n - k, &cp);
                int b = tok_bytelevel_byte(cp);
                if (b < 0) { ok = 0; break; }
                st = tok_buf_putc(&raw, (char)b);
                k += (size_t)l;
            }
            if (!ok) { raw.len = mark; st = tok_buf_put(&raw, s, n); }
        }
        if (st >= 0) {
            size_t off = o->text.len;
            st = tok_utf8_sanitize(raw.data ? raw.data : "", raw.len, &o->text);
            if (st >= 0) st = tok_pieces_add_ref(o, off, o->text.len - off, 1);
        }
        tok_buf_free(&raw);
        return st;
    }
    case D_METASPACE:
        for (int i = 0; i < in->n; i++) {
            const char *s = P(in, i);
            size_t n = in->p[i].len, off = o->text.len;
            for (size_t k = 0; k < n;) {
                if (k + d->repl_len <= n && memcmp(s + k, d->repl, d->repl_len) == 0) { LMC_TRY(tok_buf_putc(&o->text, ' ')); k += d->repl_len; }
                else LMC_TRY(tok_buf_putc(&o->text, s[k++]));
            }
            size_t len = o->text.len - off;
            if (i == 0 && d->prepend && len && o->text.data[off] == ' ') { off++; len--; }
            LMC_TRY(tok_pieces_add_ref(o, off, len, 0));
        }
        return LMC_OK;
    case D_BYTEFALLBACK: {
        tok_buf bytes = {0};
        lmc_status st = LMC_OK;
        for (int i = 0; i <= in->n && st >= 0; i++) {
            const char *s = i < in->n ? P(in, i) : NULL;
            int byte = -1;
            if (s && in->p[i].len == 6 && !memcmp(s, "<0x", 3) && s[5] == '>') {
                int hi = hexval(s[3]), lo = hexval(s[4]);
                if (hi >= 0 && lo >= 0) byte = hi * 16 + lo;
            }
            if (byte >= 0) { st = tok_buf_putc(&bytes, (char)byte); continue; }
            if (bytes.len) {
                if (tok_utf8_valid(bytes.data, bytes.len)) st = tok_pieces_add(o, bytes.data, bytes.len, 0);
                else {
                    size_t off = o->text.len;
                    for (size_t k = 0; k < bytes.len && st >= 0; k++) st = tok_buf_put(&o->text, "\xEF\xBF\xBD", 3);
                    if (st >= 0) st = tok_pieces_add_ref(o, off, o->text.len - off, 0);
                }
                bytes.len = 0;
            }
            if (s && st >= 0) st = tok_pieces_add(o, s, in->p[i].len, 0);
        }
        tok_buf_free(&bytes);
        return st;
    }
    case D_FUSE: {
        size_t off = o->text.len;
        for (int i = 0; i < in->n; i++) LMC_TRY(tok_buf_put(&o->text, P(in, i), in->p[i].len));
        return tok_pieces_add_ref(o, off, o->text.len - off, 0);
    }
    case D_STRIP:
        for (int i = 0; i < in->n; i++) {
            const char *s = P(in, i);
            size_t n = in->p[i].len, b = 0, e = n;
            for (int k = 0; k < d->start && b < e; k++) {
                uint32_t cp; int l = tok_utf8_next(s + b, e - b, &cp);
                if (cp != d->content) break;
                b += (size_t)l;
            }
            for (int k = 0; k < d->stop && e > b; k++) {
                size_t q = e - 1;
                while (q > b && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                uint32_t cp; tok_utf8_next(s + q, e - q, &cp);
                if (cp != d->content) break;
                e = q;
            }
            LMC_TRY(tok_pieces_add(o, s + b, e - b, 0));
        }
        return LMC_OK;
    case D_REPLACE: {
        pcre2_match_data *md = d->pat.re ? pcre2_match_data_create_from_pattern(d->pat.re, NULL) : NULL;
        lmc_status st = LMC_OK;
        if (d->pat.re && !md) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
        for (int i = 0; i < in->n && st >= 0; i++) {
            size_t off = o->text.len;
            st = tok_pattern_replace(&d->pat, P(in, i), in->p[i].len, d->str, d->str_len, md, &o->text);
            if (st >= 0) st = tok_pieces_add_ref(o, off, o->text.len - off, 0);
        }
        if (md) pcre2_match_data_free(md);
        return st;
    }
    case D_WORDPIECE:
        for (int i = 0; i < in->n; i++) {
            const char *s = P(in, i);
            size_t n = in->p[i].len;
            tok_buf t = {0};
            lmc_status st = LMC_OK;
            if (i != 0) {
                if (n >= d->str_len && memcmp(s, d->str, d->str_len) == 0) st = tok_buf_put(&t, s + d->str_len, n - d->str_len);
                else { st = tok_buf_putc(&t, ' '); if (st >= 0) st = tok_buf_put(&t, s, n); }
            } else st = tok_buf_put(&t, s, n);
            if (st >= 0) st = d->cleanup ? cleanup_put(o, t.data ? t.data : "", t.len, 0) : tok_pieces_add(o, t.data ? t.data : "", t.len, 0);
            tok_buf_free(&t);
            LMC_TRY(st);
        }
        return LMC_OK;
    case D_BPE:
        for (int i = 0; i < in->n; i++) {
            const char *s = P(in, i);
            size_t n = in->p[i].len, off = o->text.len;
            for (size_t k = 0; k < n;) {
                if (k + d->str_len <= n && d->str_len && memcmp(s + k, d->str, d->str_len) == 0) {
                    if (i != in->n - 1) LMC_TRY(tok_buf_putc(&o->text, ' '));
                    k += d->str_len;
                } else LMC_TRY(tok_buf_putc(&o->text, s[k++]));
            }
            LMC_TRY(tok_pieces_add_ref(o, off, o->text.len - off, 0));
        }
        return LMC_OK;
    case D_SEQ: break;
    }
    return LMC_OK;
}

static lmc_status run_chain(const tok_decoder *d, tok_pieces **cur, tok_pieces **tmp) {
    if (d->kind == D_SEQ) {
        for (int i = 0; i < d->n_kids; i++) LMC_TRY(run_chain(d->kids[i], cur, tmp));
        return LMC_OK;
    }
    LMC_TRY(run_one(d, *cur, *tmp));
    tok_pieces *t = *cur;
    *cur = *tmp;
    *tmp = t;
    return LMC_OK;
}

lmc_status tok_decoder_run(const tok_decoder *d, tok_pieces *toks, tok_pieces *tmp, tok_buf *out) {
    tok_pieces *cur = toks, *other = tmp;
    if (d) LMC_TRY(run_chain(d, &cur, &other));
    for (int i = 0; i < cur->n; i++) {
        if (!d && i > 0) LMC_TRY(tok_buf_putc(out, ' '));
        LMC_TRY(tok_buf_put(out, P(cur, i), cur->p[i].len));
    }
    if (!out->data) LMC_TRY(tok_buf_reserve(out, 1));
    out->data[out->len] = 0;
    return LMC_OK;
}

/* ---------------- streaming detokenizer ---------------- */

struct lmc_detok {
    const lmc_tokenizer *tok;
    int skip_special;
    tok_ids ids;
    int prefix, read;    /* ids[prefix..read) were already emitted (kept as decoding context) */
};

lmc_status lmc_detok_init(lmc_detok **out, const lmc_tokenizer *tok, int skip_special) {
    if (!out || !tok) return lmc_fail(LMC_ERR_ARG, "lmc_detok_init: NULL argument");
    lmc_detok *d = calloc(1, sizeof *d);
    if (!d) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    d->tok = tok;
    d->skip_special = skip_special;
    *out = d;
    return LMC_OK;
}

void lmc_detok_free(lmc_detok *d) {
    if (!d) return;
    free(d->ids.v);
    free(d);
}

/* ids whose text decides whether a long held-back window may be emitted (detok_step) */
#define DETOK_TAIL 8

static int ends_incomplete(const char *s, size_t n) {
    return n >= 3 && memcmp(s + n - 3, "\xEF\xBF\xBD", 3) == 0;
}

/* 1 when id's token reads <0xAB>: ByteFallback decodes a whole run of such tokens at once
 * (an invalid run becomes one U+FFFD per byte, even a valid prefix of it), so text that
 * ends in one is not final until a different token (or the flush) closes the run. */
static int is_byte_token(const lmc_tokenizer *tok, int32_t id) {
    const char *t = lmc_tokenizer_id_to_token(tok, id);
    return t && strlen(t) == 6 && !memcmp(t, "<0x", 3) && t[5] == '>';
}

static lmc_status detok_step(lmc_detok *d, int final, char **piece, size_t *len) {
    char *a = NULL, *b = NULL;
    size_t al = 0, bl = 0;
    *piece = NULL;
    *len = 0;
    /* the last token decode will actually see (skipped specials and unknown ids drop out) */
    int last = d->ids.n - 1;
    while (last >= d->prefix && (!lmc_tokenizer_id_to_token(d->tok, d->ids.v[last]) ||
                                 (d->skip_special && lmc_tokenizer_is_special(d->tok, d->ids.v[last])))) last--;
    if (!final && last >= d->prefix && is_byte_token(d->tok, d->ids.v[last])) {
        *piece = calloc(1, 1);
        return *piece ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory");
    }
    static const int32_t no_ids[1];
    const int32_t *v = d->ids.v ? d->ids.v : no_ids; /* NULL until the first push */
    lmc_status st;
    if (!final && d->ids.n - d->read > DETOK_TAIL) {
        /* A long held-back window (a run of invalid bytes, each a U+FFFD) would be decoded
         * whole at every push — quadratic. Its last DETOK_TAIL ids decide cheaply: a UTF-8
         * sequence spans at most 4 bytes, so when their text still ends in U+FFFD the
         * window's text does too (for byte-level and byte-fallback decoders; where a
         * decoder's context makes the tail disagree, the window is only held one token
         * longer than Hugging Face's DecodeStream would — the streamed text is the same). */
        st = lmc_tokenizer_decode(d->tok, v + d->ids.n - DETOK_TAIL, DETOK_TAIL, d->skip_special, &b, &bl);
        int hold = st >= 0 && ends_incomplete(b, bl);
        free(b);
        b = NULL;
        if (st < 0) return st;
        if (hold) {
            *piece = calloc(1, 1);
            return *piece ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory");
        }
    }
    st = lmc_tokenizer_decode(d->tok, v + d->prefix, d->read - d->prefix, d->skip_special, &a, &al);
    if (st >= 0) st = lmc_tokenizer_decode(d->tok, v + d->prefix, d->ids.n - d->prefix, d->skip_special, &b, &bl);
    if (st >= 0) {
        if (bl > al && (final || !ends_incomplete(b, bl)) && memcmp(a, b, al) != 0) {
            /* the decoder rewrote text already streamed (BPEDecoder gives the last token's suffix
             * as "" and a token's inner occurrences as " " once another token follows): the old
             * code re-emitted the whole window, duplicating text; Hugging Face's DecodeStream
             * fails here too (InvalidPrefix) */
            st = lmc_fail(LMC_ERR_UNSUPPORTED, "detokenizer: a later token changed text already streamed "
                                               "(this tokenizer's decoder cannot be streamed)");
        } else if (bl > al && (final || !ends_incomplete(b, bl))) {
            size_t keep = al;
            *len = bl - keep;
            memmove(b, b + keep, *len);
            b[*len] = 0;
            *piece = b;
            b = NULL;
            d->prefix = d->read;
            d->read = d->ids.n;
        } else if (final) {
            d->prefix = d->read = d->ids.n;
        }
        if (st >= 0 && !*piece) { *piece = calloc(1, 1); if (!*piece) st = lmc_fail(LMC_ERR_NOMEM, "out of memory"); }
    }
    free(a);
    free(b);
    /* keep the id window short: drop ids before `prefix` */
    if (st >= 0 && d->prefix > 64) {
        memmove(d->ids.v, d->ids.v + d->prefix, (size_t)(d->ids.n - d->prefix) * sizeof *d->ids.v);
        d->ids.n -= d->prefix;
        d->read -= d->prefix;
        d->prefix = 0;
    }
    return st;
}

lmc_status lmc_detok_push(lmc_detok *d, int32_t id, char **piece, size_t *len) {
    if (!d || !piece || !len) return lmc_fail(LMC_ERR_ARG, "lmc_detok_push: NULL argument");
    /* an id that decode drops (no token, or a skipped special) changes no text: it is not kept,
     * so a long run of them cannot make every later step decode an ever longer window */
    if (!lmc_tokenizer_id_to_token(d->tok, id) || (d->skip_special && lmc_tokenizer_is_special(d->tok, id))) {
        *piece = calloc(1, 1);
        *len = 0;
        return *piece ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory");
    }
    LMC_TRY(tok_ids_push(&d->ids, id));
    return detok_step(d, 0, piece, len);
}

lmc_status lmc_detok_flush(lmc_detok *d, char **piece, size_t *len) {
    if (!d || !piece || !len) return lmc_fail(LMC_ERR_ARG, "lmc_detok_flush: NULL argument");
    return detok_step(d, 1, piece, len);
}
