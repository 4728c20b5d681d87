/* jinja_lex.c — Jinja source → tokens, with the whitespace control transformers uses.
 *
 * Applies jinja2's rules: `{%-`/`-%}` strip all whitespace on that side; lstrip_blocks
 * removes spaces/tabs before a block or comment tag that starts its line (unless
 * `{%+`); trim_blocks drops the first newline after a block or comment tag (unless
 * `+%}`). Brackets are balanced inside tags so `}}` closes a tag only at depth 0.
 * String literals are decoded here (Python escapes). Tokens live in the caller's arena.
 */
#include "tok/jinja_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    const char *src; size_t n;
    jz_arena *a;
    jtok *toks; size_t nt, cap;
    size_t cur_off; int cur_line, cur_col;     /* position cursor for line/col */
    char *msg; size_t msg_cap;
    int failed;
} lexer;

static void locate(lexer *L, size_t off, int *line, int *col) {
    if (off < L->cur_off) { L->cur_off = 0; L->cur_line = 1; L->cur_col = 1; }
    while (L->cur_off < off && L->cur_off < L->n) {
        unsigned char ch = (unsigned char)L->src[L->cur_off++];
        if (ch == '\n') { L->cur_line++; L->cur_col = 1; }
        else if ((ch & 0xC0) != 0x80) L->cur_col++;
    }
    *line = L->cur_line; *col = L->cur_col;
}

static int lex_error(lexer *L, size_t off, const char *fmt, ...) {
    int line, col;
    locate(L, off, &line, &col);
    int k = snprintf(L->msg, L->msg_cap, "template:%d:%d: ", line, col);
    if (k < 0) k = 0;
    if ((size_t)k < L->msg_cap) {
        va_list ap; va_start(ap, fmt);
        vsnprintf(L->msg + k, L->msg_cap - (size_t)k, fmt, ap);
        va_end(ap);
    }
    L->failed = 1;
    return -1;
}

static jtok *push(lexer *L, int kind, size_t off, const char *s, size_t n) {
    if (L->nt == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 256;
        jtok *t = jz_arena_alloc(L->a, nc * sizeof *t);
        if (!t) { lex_error(L, off, "out of memory"); return NULL; }
        if (L->nt) memcpy(t, L->toks, L->nt * sizeof *t);
        L->toks = t; L->cap = nc;
    }
    jtok *t = &L->toks[L->nt++];
    memset(t, 0, sizeof *t);
    t->kind = kind; t->s = s; t->n = n;
    locate(L, off, &t->line, &t->col);
    return t;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Decode a Python-style string literal body [s, s+n) into arena memory. */
static int decode_string(lexer *L, size_t off, const char *s, size_t n, const char **out, size_t *out_n) {
    char *d = jz_arena_alloc(L->a, n + 1);
    if (!d) return lex_error(L, off, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch != '\\' || i + 1 >= n) { d[k++] = ch; continue; }
        char e = s[++i];
        int32_t cp = -1; int digits = 0;
        switch (e) {
        case 'n': d[k++] = '\n'; break;
        case 't': d[k++] = '\t'; break;
        case 'r': d[k++] = '\r'; break;
        case '\\': d[k++] = '\\'; break;
        case '\'': d[k++] = '\''; break;
        case '"': d[k++] = '"'; break;
        case 'a': d[k++] = '\a'; break;
        case 'b': d[k++] = '\b'; break;
        case 'f': d[k++] = '\f'; break;
        case 'v': d[k++] = '\v'; break;
        case '\n': break;   /* line continuation */
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                int v = 0, m = 0;
                while (m < 3 && i < n && s[i] >= '0' && s[i] <= '7') { v = v * 8 + (s[i] - '0'); i++; m++; }
                i--;
                cp = v;
            } else { d[k++] = '\\'; d[k++] = e; }
        }
        if (digits) {
            int32_t v = 0;
            for (int m = 0; m < digits; m++) {
                if (i + 1 >= n || !isxdigit((unsigned char)s[i + 1]))
                    return lex_error(L, off, "truncated \\%c escape in string literal", e);
                char h = s[++i];
                v = v * 16 + (h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
                if (v > 0x10FFFF) return lex_error(L, off, "invalid \\%c escape in string literal", e);
            }
            cp = v;
        }
        if (cp >= 0) {
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
            k += jz_utf8_enc(cp, d + k);
        }
    }
    d[k] = 0;
    *out = d; *out_n = k;
    return 0;
}

static const char *const OPS3[] = { NULL };
static const char *const OPS2[] = { "**", "//", "==", "!=", "<=", ">=", NULL };

/* Lex tokens inside a tag until its end delimiter. kind: '%' or '{'. */
static int lex_tag(lexer *L, size_t *pos, int kind, int *line_starting) {
    size_t p = *pos; int depth = 0;
    (void)OPS3;
    for (;;) {
        while (p < L->n && is_ws(L->src[p])) p++;
        if (p >= L->n)
            return lex_error(L, p, "unexpected end of template, expected '%s'", kind == '%' ? "%}" : "}}");
        const char *s = L->src + p;
        size_t left = L->n - p;
        if (depth == 0) {
            char e = kind == '%' ? '%' : '}';
            int sign = 0; size_t m = 0;
            if ((s[0] == '-' || s[0] == '+') && left >= 3 && s[1] == e && s[2] == '}') { sign = s[0]; m = 3; }
            else if (left >= 2 && s[0] == e && s[1] == '}') m = 2;
            if (m) {
                if (!push(L, kind == '%' ? JT_BLOCK_END : JT_VAR_END, p, s, m)) return -1;
                p += m;
                if (sign == '-') { while (p < L->n && is_ws(L->src[p])) p++; }
                else if (sign != '+' && kind == '%' && p < L->n && L->src[p] == '\n') p++;
                *line_starting = p > 0 && L->src[p - 1] == '\n';
                *pos = p;
                return 0;
            }
        }
        unsigned char ch = (unsigned char)s[0];
        if (isalpha(ch) || ch == '_' || ch >= 0x80) {
            size_t m = 1;
            while (m < left && (isalnum((unsigned char)s[m]) || s[m] == '_' || (unsigned char)s[m] >= 0x80)) m++;
            if (!push(L, JT_NAME, p, s, m)) return -1;
            p += m; continue;
        }
        if (isdigit(ch)) {
            size_t m = 0; int is_float = 0;
            char buf[128]; size_t bn = 0;
            while (m < left && (isdigit((unsigned char)s[m]) || (s[m] == '_' && m + 1 < left && isdigit((unsigned char)s[m + 1])))) {
                if (s[m] != '_' && bn < sizeof buf - 1) buf[bn++] = s[m];
                m++;
            }
            if (m + 1 < left && s[m] == '.' && isdigit((unsigned char)s[m + 1])) {
                is_float = 1; m++;
                if (bn < sizeof buf - 1) buf[bn++] = '.';
                else bn = sizeof buf - 1; /* too long: refused below (the '.' never overruns buf) */
                while (m < left && (isdigit((unsigned char)s[m]) || (s[m] == '_' && m + 1 < left && isdigit((unsigned char)s[m + 1])))) {
                    if (s[m] != '_' && bn < sizeof buf - 1) buf[bn++] = s[m];
                    m++;
                }
            }
            if (m < left && (s[m] == 'e' || s[m] == 'E')) {
                size_t q = m + 1;
                if (q < left && (s[q] == '+' || s[q] == '-')) q++;
                if (q < left && isdigit((unsigned char)s[q])) {
                    is_float = 1;
                    if (bn < sizeof buf - 1) buf[bn++] = 'e';
                    for (size_t r = m + 1; r < q; r++) if (bn < sizeof buf - 1) buf[bn++] = s[r];
                    m = q;
                    while (m < left && isdigit((unsigned char)s[m])) { if (bn < sizeof buf - 1) buf[bn++] = s[m]; m++; }
                }
            }
            buf[bn] = 0;
            if (bn >= sizeof buf - 1) return lex_error(L, p, "number literal too long");
            jtok *t = push(L, is_float ? JT_FLOAT : JT_INT, p, s, m);
            if (!t) return -1;
            errno = 0;
            if (is_float) t->f = strtod(buf, NULL);
            else {
                t->i = strtoll(buf, NULL, 10);
                if (errno == ERANGE) return lex_error(L, p, "integer literal too large");
            }
            p += m; continue;
        }
        if (ch == '\'' || ch == '"') {
            size_t m = 1;
            while (m < left && s[m] != (char)ch) { if (s[m] == '\\') m++; m++; }
            if (m >= left) return lex_error(L, p, "unterminated string literal");
            jtok *t = push(L, JT_STRING, p, NULL, 0);
            if (!t) return -1;
            if (decode_string(L, p, s + 1, m - 1, &t->s, &t->n) < 0) return -1;
            p += m + 1; continue;
        }
        size_t m = 0;
        for (int k = 0; OPS2[k]; k++) if (left >= 2 && s[0] == OPS2[k][0] && s[1] == OPS2[k][1]) { m = 2; break; }
        if (!m && strchr("+-*/%~[](){}<>=.:|,;!", ch)) m = 1;
        if (!m || (m == 1 && ch == '!')) return lex_error(L, p, "unexpected character '%c'", ch);
        if (ch == '(' || ch == '[' || ch == '{') depth++;
        if (ch == ')' || ch == ']' || ch == '}') {
            if (depth == 0) return lex_error(L, p, "unexpected '%c'", ch);
            depth--;
        }
        if (!push(L, JT_OP, p, s, m)) return -1;
        p += m;
    }
}

/* Is there "{% raw %}" (with optional -/+) at p? Returns its length, with *strip_after set. */
static size_t match_raw(const char *s, size_t left, const char *word, int *sign_before, int *sign_after) {
    size_t q = 2;
    *sign_before = *sign_after = 0;
    if (q < left && (s[q] == '-' || s[q] == '+')) *sign_before = s[q++];
    while (q < left && is_ws(s[q])) q++;
    size_t wl = strlen(word);
    if (q + wl > left || memcmp(s + q, word, wl) != 0) return 0;
    q += wl;
    if (q < left && (isalnum((unsigned char)s[q]) || s[q] == '_')) return 0;
    while (q < left && is_ws(s[q])) q++;
    if (q < left && (s[q] == '-' || s[q] == '+')) *sign_after = s[q++];
    if (q + 2 > left || s[q] != '%' || s[q + 1] != '}') return 0;
    return q + 2;
}

static int emit_text(lexer *L, size_t off, const char *s, size_t n) {
    if (!n) return 0;
    return push(L, JT_TEXT, off, s, n) ? 0 : -1;
}

int jz_lex(const char *src, size_t n, jz_arena *a, jlex_out *out, char *msg, size_t msg_cap) {
    lexer L = { .src = src, .n = n, .a = a, .cur_line = 1, .cur_col = 1, .msg = msg, .msg_cap = msg_cap };
    size_t pos = 0;
    int line_starting = 1;
    while (pos < n) {
        size_t start = pos;
        while (start + 1 < n && !(src[start] == '{' && (src[start + 1] == '{' || src[start + 1] == '%' || src[start + 1] == '#')))
            start++;
        if (start + 1 >= n) { if (emit_text(&L, pos, src + pos, n - pos) < 0) return -1; break; }
        const char *text = src + pos;
        size_t tn = start - pos;
        char kind = src[start + 1];
        char sign = (start + 2 < n && (src[start + 2] == '-' || src[start + 2] == '+')) ? src[start + 2] : 0;
        if (kind == '{' && sign == '+') sign = 0;   /* "{{+" is not a modifier */
        if (sign == '-') {
            while (tn && is_ws(text[tn - 1])) tn--;
        } else if (sign != '+' && kind != '{') {
            size_t l_pos = tn;
            while (l_pos && text[l_pos - 1] != '\n') l_pos--;
            if (l_pos > 0 || line_starting) {
                size_t q = l_pos;
                while (q < tn && (text[q] == ' ' || text[q] == '\t')) q++;
                if (q == tn) tn = l_pos;
            }
        }
        if (emit_text(&L, pos, text, tn) < 0) return -1;
        size_t p = start + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t q = p;
            while (q + 1 < n && !(src[q] == '#' && src[q + 1] == '}')) q++;
            if (q + 1 >= n) return lex_error(&L, start, "missing end of comment tag");
            char esign = (q > p && (src[q - 1] == '-' || src[q - 1] == '+')) ? src[q - 1] : 0;
            size_t e = q + 2;
            if (esign == '-') { while (e < n && is_ws(src[e])) e++; }
            else if (esign != '+' && e < n && src[e] == '\n') e++;
            line_starting = src[e - 1] == '\n';
            pos = e;
            continue;
        }
        if (kind == '%') {
            int sb, sa;
            size_t rl = match_raw(src + start, n - start, "raw", &sb, &sa);
            if (rl) {
                size_t q = start + rl;
                if (sa == '-') { while (q < n && is_ws(src[q])) q++; }
                else if (sa != '+' && q < n && src[q] == '\n') q++;
                size_t body = q, end_len = 0;
                int eb = 0, ea = 0;
                while (q + 1 < n) {
                    if (src[q] == '{' && src[q + 1] == '%' && (end_len = match_raw(src + q, n - q, "endraw", &eb, &ea))) break;
                    q++;
                }
                if (!end_len) return lex_error(&L, start, "missing {%% endraw %%}");
                size_t bn = q - body;
                if (eb == '-') while (bn && is_ws(src[body + bn - 1])) bn--;
                if (emit_text(&L, body, src + body, bn) < 0) return -1;
                size_t e = q + end_len;
                if (ea == '-') { while (e < n && is_ws(src[e])) e++; }
                else if (ea != '+' && e < n && src[e] == '\n') e++;
                line_starting = src[e - 1] == '\n';
                pos = e;
                continue;
            }
        }
        if (!push(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, start, src + start, p - start)) return -1;
        pos = p;
        if (lex_tag(&L, &pos, kind, &line_starting) < 0) return -1;
    }
    if (!push(&L, JT_EOF, n, src + n, 0)) return -1;
    out->toks = L.toks; out->n = L.nt;
    return 0;
}
