/* tok_json.c — a small, strict JSON scanner for the big parts of tokenizer.json.
 *
 * cJSON builds a node per value, which makes a 10 MB vocabulary + merges list
 * slow to load. This scanner validates and walks JSON text in place: it finds
 * the spans of model.vocab and model.merges (parsed here straight into the
 * model's tables) and lets cJSON parse the small rest. Never reads past `end`;
 * every malformed input is an LMC_ERR_FORMAT with the byte offset.
 */
#include "tok/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ws(tok_jscan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

static lmc_status err(const tok_jscan *s, const char *what) {
    return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: %s at byte %zu", what, (size_t)(s->p - s->start));
}

static int hex4(const char *p, uint32_t *v) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        x <<= 4;
        if (c >= '0' && c <= '9') x |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') x |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') x |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *v = x;
    return 1;
}

lmc_status tok_js_string(tok_jscan *s, tok_buf *out) {
    ws(s);
    if (s->p >= s->end || *s->p != '"') return err(s, "expected a string");
    s->p++;
    const char *run = s->p;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            LMC_TRY(tok_buf_put(out, run, (size_t)(s->p - run)));
            s->p++;
            return LMC_OK;
        }
        if (c < 0x20) return err(s, "control character in a string");
        if (c != '\\') { s->p++; continue; }
        LMC_TRY(tok_buf_put(out, run, (size_t)(s->p - run)));
        if (s->end - s->p < 2) return err(s, "truncated escape");
        char e = s->p[1];
        s->p += 2;
        switch (e) {
        case '"': LMC_TRY(tok_buf_putc(out, '"')); break;
        case '\\': LMC_TRY(tok_buf_putc(out, '\\')); break;
        case '/': LMC_TRY(tok_buf_putc(out, '/')); break;
        case 'b': LMC_TRY(tok_buf_putc(out, '\b')); break;
        case 'f': LMC_TRY(tok_buf_putc(out, '\f')); break;
        case 'n': LMC_TRY(tok_buf_putc(out, '\n')); break;
        case 'r': LMC_TRY(tok_buf_putc(out, '\r')); break;
        case 't': LMC_TRY(tok_buf_putc(out, '\t')); break;
        case 'u': {
            uint32_t cp, lo;
            if (s->end - s->p < 4 || !hex4(s->p, &cp)) return err(s, "bad \\u escape");
            s->p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' || !hex4(s->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return err(s, "unpaired surrogate escape");
                s->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) return err(s, "unpaired surrogate escape");
            LMC_TRY(tok_buf_put_cp(out, cp));
            break;
        }
        default: return err(s, "bad escape");
        }
        run = s->p;
    }
    return err(s, "unterminated string");
}

static lmc_status skip_string(tok_jscan *s) {
    /* validate without decoding */
    if (s->p >= s->end || *s->p != '"') return err(s, "expected a string");
    s->p++;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') { s->p++; return LMC_OK; }
        if (c < 0x20) return err(s, "control character in a string");
        if (c == '\\') {
            if (s->end - s->p < 2) return err(s, "truncated escape");
            if (s->p[1] == 'u') {
                uint32_t v;
                if (s->end - s->p < 6 || !hex4(s->p + 2, &v)) return err(s, "bad \\u escape");
                s->p += 6;
            } else if (strchr("\"\\/bfnrt", s->p[1]) && s->p[1]) s->p += 2;
            else return err(s, "bad escape");
        } else s->p++;
    }
    return err(s, "unterminated string");
}

static lmc_status skip_number(tok_jscan *s) {
    const char *b = s->p;
    if (s->p < s->end && *s->p == '-') s->p++;
    while (s->p < s->end && ((*s->p >= '0' && *s->p <= '9') || *s->p == '.' || *s->p == 'e' || *s->p == 'E' ||
                             *s->p == '+' || *s->p == '-')) s->p++;
    if (s->p == b) return err(s, "unexpected character");
    return LMC_OK;
}

lmc_status tok_js_skip(tok_jscan *s, int depth) {
    ws(s);
    if (depth > 256) return err(s, "nesting too deep");
    if (s->p >= s->end) return err(s, "unexpected end");
    char c = *s->p;
    if (c == '"') return skip_string(s);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        s->p++;
        ws(s);
        if (s->p < s->end && *s->p == close) { s->p++; return LMC_OK; }
        for (;;) {
            if (c == '{') {
                ws(s);
                LMC_TRY(skip_string(s));
                ws(s);
                if (s->p >= s->end || *s->p != ':') return err(s, "expected ':'");
                s->p++;
            }
            LMC_TRY(tok_js_skip(s, depth + 1));
            ws(s);
            if (s->p >= s->end) return err(s, "unexpected end");
            if (*s->p == ',') { s->p++; continue; }
            if (*s->p == close) { s->p++; return LMC_OK; }
            return err(s, "expected ',' or a closing bracket");
        }
    }
    static const char *words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(words[i]);
        if ((size_t)(s->end - s->p) >= l && !memcmp(s->p, words[i], l)) { s->p += l; return LMC_OK; }
    }
    return skip_number(s);
}

/* Find the end of the array/object at s->p without validating its contents (the
 * strict parsers of those contents run afterwards): brackets are counted outside
 * strings, strings are crossed with memchr. */
lmc_status tok_js_skip_container(tok_jscan *s) {
    ws(s);
    if (s->p >= s->end || (*s->p != '[' && *s->p != '{')) return tok_js_skip(s, 1);
    long depth = 0;
    const char *p = s->p;
    while (p < s->end) {
        char c = *p;
        if (c == '"') {
            for (;;) {
                const char *q = memchr(p + 1, '"', (size_t)(s->end - p - 1));
                if (!q) { s->p = s->end; return err(s, "unterminated string"); }
                const char *k = q;
                while (k > p + 1 && k[-1] == '\\') k--;
                p = q;
                if (((q - k) & 1) == 0) break;   /* an even run of backslashes: the quote is real */
            }
            p++;
            continue;
        }
        if (c == '[' || c == '{') depth++;
        else if (c == ']' || c == '}') {
            if (--depth == 0) { s->p = p + 1; return LMC_OK; }
        }
        p++;
    }
    s->p = s->end;
    return err(s, "unterminated array or object");
}

/* Walk the members of the object at s->p; for each key call fn(key, scanner at the value),
 * which must move the scanner past the value (tok_js_skip when it has no use for it). */
lmc_status tok_js_object(tok_jscan *s, lmc_status (*fn)(void *ctx, const char *key, size_t klen, tok_jscan *s),
                         void *ctx) {
    ws(s);
    if (s->p >= s->end || *s->p != '{') return err(s, "expected an object");
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return LMC_OK; }
    tok_buf key = {0};
    lmc_status st = LMC_OK;
    for (;;) {
        key.len = 0;
        if ((st = tok_js_string(s, &key)) < 0) break;
        ws(s);
        if (s->p >= s->end || *s->p != ':') { st = err(s, "expected ':'"); break; }
        s->p++;
        ws(s);
        if ((st = fn(ctx, key.data ? key.data : "", key.len, s)) < 0) break;
        ws(s);
        if (s->p < s->end && *s->p == ',') { s->p++; ws(s); continue; }
        if (s->p < s->end && *s->p == '}') { s->p++; break; }
        st = err(s, "expected ',' or '}'");
        break;
    }
    tok_buf_free(&key);
    return st;
}

/* Parse a non-negative integer value (ids). */
lmc_status tok_js_uint(tok_jscan *s, uint32_t max, uint32_t *out) {
    ws(s);
    const char *b = s->p;
    uint64_t v = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        v = v * 10 + (uint64_t)(*s->p - '0');
        if (v > max) return err(s, "id out of range");
        s->p++;
    }
    if (s->p == b) return err(s, "expected a non-negative integer id");
    if (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E')) {
        /* allow 12.0 but nothing fractional */
        const char *q = s->p;
        if (*q == '.') { q++; while (q < s->end && *q == '0') q++; }
        if (q < s->end && ((*q >= '0' && *q <= '9') || *q == 'e' || *q == 'E' || *q == '.')) return err(s, "id is not an integer");
        s->p = q;
    }
    *out = (uint32_t)v;
    return LMC_OK;
}

lmc_status tok_js_expect(tok_jscan *s, char c) {
    ws(s);
    if (s->p >= s->end || *s->p != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return err(s, what);
    }
    s->p++;
    return LMC_OK;
}

/* 1 when the next non-space char is c (consumed), else 0. */
int tok_js_accept(tok_jscan *s, char c) {
    ws(s);
    if (s->p < s->end && *s->p == c) { s->p++; return 1; }
    return 0;
}

int tok_js_peek(tok_jscan *s) {
    ws(s);
    return s->p < s->end ? (unsigned char)*s->p : -1;
}
