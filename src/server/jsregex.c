/* jsregex.c — pattern → syntax tree → byte-level NFA (UTF-8 sequences for code-point
 * classes) → DFA by subset construction over byte classes, with states that cannot reach
 * a match pruned (see jsregex.h). Everything built here is owned by the returned lmc_rx;
 * the tree and the NFA are freed before lmc_rx_compile returns.
 */
#include "jsregex.h"

#include <stdlib.h>
#include <string.h>

#define MAX_NFA 30000
#define MAX_REPEAT 1000
#define MAX_NEST 64
#define CP_MAX 0x10FFFF

struct lmc_rx {
    int n_states, n_classes, start;
    uint8_t cls[256];     /* byte → class */
    int32_t *next;        /* [n_states][n_classes], -1: dead */
    uint8_t *accept;      /* [n_states] */
    int32_t *min_cps;     /* [n_states] fewest code points still needed to match */
};

/* ---- code-point sets ---- */

typedef struct { int32_t lo, hi; } cprange;
typedef struct { cprange *r; int n, cap; } cpset;

static int set_add(cpset *s, int32_t lo, int32_t hi) {
    if (lo > hi) return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        cprange *r = realloc(s->r, (size_t)cap * sizeof *r);
        if (!r) return -1;
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (cprange){lo, hi};
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void set_norm(cpset *s) {
    if (s->n < 2) return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int k = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[k].hi + 1) { if (s->r[i].hi > s->r[k].hi) s->r[k].hi = s->r[i].hi; }
        else s->r[++k] = s->r[i];
    }
    s->n = k + 1;
}

/* Complement within the scalar values (no surrogates). */
static int set_negate(cpset *s) {
    set_norm(s);
    cpset o = {0};
    int32_t at = 0;
    for (int i = 0; i < s->n; i++) {
        if (set_add(&o, at, s->r[i].lo - 1) < 0) { free(o.r); return -1; }
        at = s->r[i].hi + 1;
    }
    if (set_add(&o, at, CP_MAX) < 0) { free(o.r); return -1; }
    free(s->r);
    *s = o;
    return 0;
}

/* Remove the surrogates (never a character of well-formed UTF-8). */
static int set_drop_surrogates(cpset *s) {
    cpset o = {0};
    set_norm(s);
    for (int i = 0; i < s->n; i++) {
        cprange r = s->r[i];
        int rc = 0;
        if (r.hi < 0xD800 || r.lo > 0xDFFF) rc = set_add(&o, r.lo, r.hi);
        else rc = set_add(&o, r.lo, 0xD7FF) | set_add(&o, 0xE000, r.hi);
        if (rc < 0) { free(o.r); return -1; }
    }
    free(s->r);
    *s = o;
    return 0;
}

static int add_class(cpset *s, int c, int negated) {
    cpset t = {0};
    int rc = 0;
    switch (c) {
    case 'd': rc = set_add(&t, '0', '9'); break;
    case 'w': rc = set_add(&t, '0', '9') | set_add(&t, 'A', 'Z') | set_add(&t, 'a', 'z') | set_add(&t, '_', '_'); break;
    case 's': {
        static const int32_t ws[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                                        {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) rc |= set_add(&t, ws[i][0], ws[i][1]);
        break;
    }
    }
    if (!rc && negated) rc = set_negate(&t);
    for (int i = 0; !rc && i < t.n; i++) rc = set_add(s, t.r[i].lo, t.r[i].hi);
    free(t.r);
    return rc;
}

/* ---- syntax tree ---- */

enum { A_SET, A_CAT, A_ALT, A_REP };
typedef struct ast {
    int kind;
    cpset set;
    struct ast **kid;
    int n_kid, cap_kid;
    int min, max;   /* A_REP; max -1: unbounded */
} ast;

static void ast_free(ast *a) {
    if (!a) return;
    for (int i = 0; i < a->n_kid; i++) ast_free(a->kid[i]);
    free(a->kid);
    free(a->set.r);
    free(a);
}

static ast *ast_new(int kind) {
    ast *a = calloc(1, sizeof *a);
    if (a) a->kind = kind;
    return a;
}

static int ast_push(ast *a, ast *k) {
    if (!k) return -1;
    if (a->n_kid == a->cap_kid) {
        int cap = a->cap_kid ? a->cap_kid * 2 : 4;
        ast **n = realloc(a->kid, (size_t)cap * sizeof *n);
        if (!n) { ast_free(k); return -1; }
        a->kid = n;
        a->cap_kid = cap;
    }
    a->kid[a->n_kid++] = k;
    return 0;
}

typedef struct parser {
    const char *p, *end, *pat;
    lmc_status st;
} parser;

static ast *perr(parser *ps, lmc_status st, const char *what) {
    if (ps->st >= 0) ps->st = lmc_fail(st, "pattern '%.64s': %s", ps->pat, what);
    return NULL;
}

/* One UTF-8 code point of the pattern. */
static int32_t next_cp(parser *ps) {
    const unsigned char *p = (const unsigned char *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    int32_t c = p[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || (size_t)n > left) { perr(ps, LMC_ERR_FORMAT, "not UTF-8"); return -1; }
    if (n > 1) c &= 0x3F >> (n - 1);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) { perr(ps, LMC_ERR_FORMAT, "not UTF-8"); return -1; }
        c = c << 6 | (p[i] & 0x3F);
    }
    ps->p += n;
    return c;
}

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int32_t read_hex(parser *ps, int n) {
    int32_t v = 0;
    for (int i = 0; i < n; i++) {
        int h = ps->p < ps->end ? hexval((unsigned char)*ps->p) : -1;
        if (h < 0) { perr(ps, LMC_ERR_FORMAT, "bad hex escape"); return -1; }
        v = v * 16 + h;
        ps->p++;
    }
    return v;
}

/* After a backslash: a class (*cls set to its letter, negated in *neg) or one code point. */
static int32_t parse_escape(parser *ps, int in_class, int *cls, int *neg) {
    *cls = 0;
    if (ps->p >= ps->end) { perr(ps, LMC_ERR_FORMAT, "a pattern cannot end with a backslash"); return -1; }
    int c = (unsigned char)*ps->p++;
    switch (c) {
    case 'd': case 'w': case 's': *cls = c; *neg = 0; return 0;
    case 'D': case 'W': case 'S': *cls = c + 32; *neg = 1; return 0;
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0':
        if (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') { perr(ps, LMC_ERR_UNSUPPORTED, "octal escapes are not supported"); return -1; }
        return 0;
    case 'x': return read_hex(ps, 2);
    case 'u': {
        int32_t v = read_hex(ps, 4);
        if (v >= 0xD800 && v <= 0xDBFF && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
            parser save = *ps;
            ps->p += 2;
            int32_t lo = read_hex(ps, 4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            *ps = save;
            ps->st = LMC_OK;
        }
        if (v >= 0xD800 && v <= 0xDFFF) { perr(ps, LMC_ERR_UNSUPPORTED, "lone surrogate escapes are not supported"); return -1; }
        return v;
    }
    case 'b':
        if (in_class) return 8;
        perr(ps, LMC_ERR_UNSUPPORTED, "word boundaries (\\b) are not supported");
        return -1;
    case 'B': perr(ps, LMC_ERR_UNSUPPORTED, "word boundaries (\\B) are not supported"); return -1;
    case 'p': case 'P': perr(ps, LMC_ERR_UNSUPPORTED, "Unicode property escapes (\\p) are not supported"); return -1;
    case 'k': perr(ps, LMC_ERR_UNSUPPORTED, "named backreferences are not supported"); return -1;
    case 'c': perr(ps, LMC_ERR_UNSUPPORTED, "control escapes (\\c) are not supported"); return -1;
    default:
        if (c >= '1' && c <= '9') { perr(ps, LMC_ERR_UNSUPPORTED, "backreferences are not supported"); return -1; }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) {
            perr(ps, LMC_ERR_FORMAT, "unknown escape");
            return -1;
        }
        return c; /* \. \\ \/ \- \[ … */
    }
}

static ast *parse_class(parser *ps) {
    ast *a = ast_new(A_SET);
    if (!a) return perr(ps, LMC_ERR_NOMEM, "out of memory");
    int neg = 0;
    if (ps->p < ps->end && *ps->p == '^') { neg = 1; ps->p++; }
    for (;;) {
        if (ps->p >= ps->end) { ast_free(a); return perr(ps, LMC_ERR_FORMAT, "unterminated character class"); }
        if (*ps->p == ']') { ps->p++; break; }
        int cls = 0, cneg = 0;
        int32_t lo;
        if (*ps->p == '\\') { ps->p++; lo = parse_escape(ps, 1, &cls, &cneg); }
        else lo = next_cp(ps);
        if (ps->st < 0) { ast_free(a); return NULL; }
        if (cls) {
            if (add_class(&a->set, cls, cneg) < 0) { ast_free(a); return perr(ps, LMC_ERR_NOMEM, "out of memory"); }
            continue;
        }
        int32_t hi = lo;
        if (ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            int hcls = 0, hneg = 0;
            if (*ps->p == '\\') { ps->p++; hi = parse_escape(ps, 1, &hcls, &hneg); }
            else hi = next_cp(ps);
            if (ps->st < 0) { ast_free(a); return NULL; }
            if (hcls) { ast_free(a); return perr(ps, LMC_ERR_UNSUPPORTED, "a class escape cannot end a range"); }
            if (hi < lo) { ast_free(a); return perr(ps, LMC_ERR_FORMAT, "a range out of order in a character class"); }
        }
        if (set_add(&a->set, lo, hi) < 0) { ast_free(a); return perr(ps, LMC_ERR_NOMEM, "out of memory"); }
    }
    if ((neg && set_negate(&a->set) < 0) || set_drop_surrogates(&a->set) < 0) { ast_free(a); return perr(ps, LMC_ERR_NOMEM, "out of memory"); }
    return a;
}

static ast *set_of(parser *ps, int32_t lo, int32_t hi) {
    ast *a = ast_new(A_SET);
    if (!a || set_add(&a->set, lo, hi) < 0 || set_drop_surrogates(&a->set) < 0) { ast_free(a); return perr(ps, LMC_ERR_NOMEM, "out of memory"); }
    return a;
}

/* {n}, {n,}, {n,m} at ps->p (just past '{'): 1 and the bounds, or 0 when it is not a quantifier (a literal '{'). */
static int read_braces(parser *ps, int *mn, int *mx) {
    const char *q = ps->p;
    long a = 0, b = -1;
    int digits = 0;
    while (q < ps->end && *q >= '0' && *q <= '9') { if (a <= MAX_REPEAT) a = a * 10 + (*q - '0'); q++; digits++; }
    if (!digits) return 0;
    if (q < ps->end && *q == ',') {
        q++;
        int d2 = 0;
        long m = 0;
        while (q < ps->end && *q >= '0' && *q <= '9') { if (m <= MAX_REPEAT) m = m * 10 + (*q - '0'); q++; d2++; }
        b = d2 ? m : -1;
    } else b = a;
    if (q >= ps->end || *q != '}') return 0;
    ps->p = q + 1;
    *mn = (int)(a > MAX_REPEAT ? MAX_REPEAT + 1 : a);
    *mx = b < 0 ? -1 : (int)(b > MAX_REPEAT ? MAX_REPEAT + 1 : b);
    return 1;
}

static ast *parse_alt(parser *ps, int depth);

static ast *parse_atom(parser *ps, int depth) {
    int c = (unsigned char)*ps->p;
    switch (c) {
    case '(': {
        ps->p++;
        if (ps->p < ps->end && *ps->p == '?') {
            if (ps->end - ps->p >= 2 && ps->p[1] == ':') ps->p += 2;
            else if (ps->end - ps->p >= 3 && ps->p[1] == '<' && ps->p[2] != '=' && ps->p[2] != '!') {
                const char *q = memchr(ps->p, '>', (size_t)(ps->end - ps->p));
                if (!q) return perr(ps, LMC_ERR_FORMAT, "unterminated group name");
                ps->p = q + 1;
            } else return perr(ps, LMC_ERR_UNSUPPORTED, "lookahead and lookbehind are not supported");
        }
        if (depth >= MAX_NEST) return perr(ps, LMC_ERR_UNSUPPORTED, "groups nest too deep");
        ast *g = parse_alt(ps, depth + 1);
        if (!g) return NULL;
        if (ps->p >= ps->end || *ps->p != ')') { ast_free(g); return perr(ps, LMC_ERR_FORMAT, "unbalanced parenthesis"); }
        ps->p++;
        return g;
    }
    case '[': ps->p++; return parse_class(ps);
    case '.': {
        ps->p++;
        ast *a = ast_new(A_SET);
        if (!a || set_add(&a->set, '\n', '\n') < 0 || set_add(&a->set, '\r', '\r') < 0 || set_add(&a->set, 0x2028, 0x2029) < 0 ||
            set_negate(&a->set) < 0 || set_drop_surrogates(&a->set) < 0) { ast_free(a); return perr(ps, LMC_ERR_NOMEM, "out of memory"); }
        return a;
    }
    case '\\': {
        ps->p++;
        int cls = 0, neg = 0;
        int32_t v = parse_escape(ps, 0, &cls, &neg);
        if (ps->st < 0) return NULL;
        if (!cls) return set_of(ps, v, v);
        ast *a = ast_new(A_SET);
        if (!a || add_class(&a->set, cls, neg) < 0 || set_drop_surrogates(&a->set) < 0) { ast_free(a); return perr(ps, LMC_ERR_NOMEM, "out of memory"); }
        return a;
    }
    case '*': case '+': case '?': return perr(ps, LMC_ERR_FORMAT, "nothing to repeat");
    case '^': case '$': return perr(ps, LMC_ERR_UNSUPPORTED, "^ and $ are supported only at the start and end of the pattern");
    case '{': {
        int mn, mx;
        parser save = *ps;
        ps->p++;
        if (read_braces(ps, &mn, &mx)) return perr(ps, LMC_ERR_FORMAT, "nothing to repeat");
        *ps = save;
        ps->p++;
        return set_of(ps, '{', '{');
    }
    default: {
        int32_t v = next_cp(ps);
        return v < 0 ? NULL : set_of(ps, v, v);
    }
    }
}

/* A sequence up to '|' or ')' (or the end). top: a top-level alternative, where ^ may open and $ may close it. */
static ast *parse_seq(parser *ps, int depth, int top, int *bol, int *eol) {
    ast *cat = ast_new(A_CAT);
    if (!cat) return perr(ps, LMC_ERR_NOMEM, "out of memory");
    if (top && ps->p < ps->end && *ps->p == '^') { *bol = 1; ps->p++; }
    while (ps->p < ps->end && *ps->p != '|' && *ps->p != ')') {
        if (top && *ps->p == '$' && (ps->p + 1 == ps->end || ps->p[1] == '|')) { *eol = 1; ps->p++; break; }
        ast *a = parse_atom(ps, depth);
        if (!a) { ast_free(cat); return NULL; }
        int mn = -2, mx = -2;
        if (ps->p < ps->end) {
            char q = *ps->p;
            if (q == '*') { mn = 0; mx = -1; ps->p++; }
            else if (q == '+') { mn = 1; mx = -1; ps->p++; }
            else if (q == '?') { mn = 0; mx = 1; ps->p++; }
            else if (q == '{') {
                ps->p++;
                if (!read_braces(ps, &mn, &mx)) { ps->p--; mn = -2; }
            }
        }
        if (mn != -2) {
            if (mn > MAX_REPEAT || mx > MAX_REPEAT) { ast_free(a); ast_free(cat); return perr(ps, LMC_ERR_UNSUPPORTED, "a repeat count above 1000"); }
            if (mx >= 0 && mx < mn) { ast_free(a); ast_free(cat); return perr(ps, LMC_ERR_FORMAT, "a repeat {n,m} with m < n"); }
            if (ps->p < ps->end && *ps->p == '?') ps->p++; /* lazy: the same strings */
            if (ps->p < ps->end && (*ps->p == '*' || *ps->p == '+' || *ps->p == '?')) {
                ast_free(a); ast_free(cat);
                return perr(ps, LMC_ERR_FORMAT, "nothing to repeat");
            }
            ast *r = ast_new(A_REP);
            if (!r || ast_push(r, a) < 0) { if (!r) ast_free(a); ast_free(r); ast_free(cat); return perr(ps, LMC_ERR_NOMEM, "out of memory"); }
            r->min = mn;
            r->max = mx;
            a = r;
        }
        if (ast_push(cat, a) < 0) { ast_free(cat); return perr(ps, LMC_ERR_NOMEM, "out of memory"); }
    }
    return cat;
}

static ast *parse_alt(parser *ps, int depth) {
    ast *alt = ast_new(A_ALT);
    if (!alt) return perr(ps, LMC_ERR_NOMEM, "out of memory");
    for (;;) {
        int bol = 0, eol = 0;
        ast *s = parse_seq(ps, depth, 0, &bol, &eol);
        if (!s || ast_push(alt, s) < 0) { ast_free(alt); return s ? perr(ps, LMC_ERR_NOMEM, "out of memory") : NULL; }
        if (ps->p < ps->end && *ps->p == '|') { ps->p++; continue; }
        return alt;
    }
}

/* Any string: [\s\S]*. */
static ast *any_star(parser *ps) {
    ast *s = set_of(ps, 0, CP_MAX), *r = ast_new(A_REP);
    if (!s || !r || ast_push(r, s) < 0) { if (!r) ast_free(s); ast_free(r); return perr(ps, LMC_ERR_NOMEM, "out of memory"); }
    r->min = 0;
    r->max = -1;
    return r;
}

/* The whole pattern: top-level alternatives, each wrapped in .* where it is not anchored. */
static ast *parse_top(parser *ps) {
    ast *alt = ast_new(A_ALT);
    if (!alt) return perr(ps, LMC_ERR_NOMEM, "out of memory");
    for (;;) {
        int bol = 0, eol = 0;
        ast *s = parse_seq(ps, 0, 1, &bol, &eol);
        if (!s) { ast_free(alt); return NULL; }
        ast *w = ast_new(A_CAT);
        int rc = w ? 0 : -1;
        if (!rc && !bol) rc = ast_push(w, any_star(ps));
        if (!rc) rc = ast_push(w, s); else ast_free(s);
        if (!rc && !eol) rc = ast_push(w, any_star(ps));
        if (rc < 0 || ast_push(alt, w) < 0) { if (rc < 0) ast_free(w); ast_free(alt); return ps->st < 0 ? NULL : perr(ps, LMC_ERR_NOMEM, "out of memory"); }
        if (ps->p < ps->end && *ps->p == '|') { ps->p++; continue; }
        if (ps->p < ps->end) { ast_free(alt); return perr(ps, LMC_ERR_FORMAT, "unbalanced parenthesis"); }
        return alt;
    }
}

/* ---- NFA, built backwards: each fragment is emitted in front of its continuation ---- */

enum { N_EPS, N_BYTE, N_MATCH };
typedef struct { uint8_t kind, lo, hi; int32_t out, out2; } nstate;
typedef struct { nstate *s; int n, cap; lmc_status st; } nfa;

static int nfa_new(nfa *a, int kind, int lo, int hi, int out, int out2) {
    if (a->st < 0) return -1;
    if (a->n >= MAX_NFA) { a->st = lmc_fail(LMC_ERR_UNSUPPORTED, "the pattern is too large for guided decoding"); return -1; }
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 256;
        nstate *s = realloc(a->s, (size_t)cap * sizeof *s);
        if (!s) { a->st = lmc_fail(LMC_ERR_NOMEM, "pattern"); return -1; }
        a->s = s;
        a->cap = cap;
    }
    a->s[a->n] = (nstate){(uint8_t)kind, (uint8_t)lo, (uint8_t)hi, out, out2};
    return a->n++;
}

/* Two-way split joining a list of starts. */
static int fan(nfa *a, const int *starts, int n) {
    if (n == 0) return -1;
    int s = starts[n - 1];
    for (int i = n - 2; i >= 0; i--) s = nfa_new(a, N_EPS, 0, 0, starts[i], s);
    return s;
}

/* Code points lo..hi (same UTF-8 length, same leading bytes where needed) as byte ranges, in front of next. */
static int utf8_seq(nfa *a, int32_t lo, int32_t hi, int next) {
    uint8_t bl[4], bh[4];
    int n = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
    for (int k = n - 1; k > 0; k--) { bl[k] = 0x80 | (lo & 0x3F); bh[k] = 0x80 | (hi & 0x3F); lo >>= 6; hi >>= 6; }
    static const uint8_t lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    bl[0] = (uint8_t)(lead[n] | lo);
    bh[0] = (uint8_t)(lead[n] | hi);
    int s = next;
    for (int k = n - 1; k >= 0; k--) s = nfa_new(a, N_BYTE, bl[k], bh[k], s, -1);
    return s;
}

/* Split lo..hi into pieces whose UTF-8 forms are products of byte ranges; emit each. */
static int utf8_split(nfa *a, int32_t lo, int32_t hi, int next, int *starts, int *n, int cap) {
    static const int32_t lens[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= lens[i] && hi > lens[i])
            return utf8_split(a, lo, lens[i], next, starts, n, cap) | utf8_split(a, lens[i] + 1, hi, next, starts, n, cap);
    int nb = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
    for (int i = 1; i < nb; i++) {
        int32_t m = (1 << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) return utf8_split(a, lo, lo | m, next, starts, n, cap) | utf8_split(a, (lo | m) + 1, hi, next, starts, n, cap);
            if ((hi & m) != m) return utf8_split(a, lo, (hi & ~m) - 1, next, starts, n, cap) | utf8_split(a, hi & ~m, hi, next, starts, n, cap);
        }
    }
    if (*n >= cap) { a->st = lmc_fail(LMC_ERR_UNSUPPORTED, "a character class is too complex"); return -1; }
    starts[(*n)++] = utf8_seq(a, lo, hi, next);
    return 0;
}

static int emit(nfa *a, const ast *x, int next) {
    if (a->st < 0) return -1;
    switch (x->kind) {
    case A_SET: {
        int starts[256], n = 0;
        for (int i = 0; i < x->set.n; i++)
            if (utf8_split(a, x->set.r[i].lo, x->set.r[i].hi, next, starts, &n, 256) < 0) return -1;
        if (n == 0) return nfa_new(a, N_BYTE, 1, 0, next, -1); /* an empty class: a state nothing passes */
        return fan(a, starts, n);
    }
    case A_CAT:
        for (int i = x->n_kid - 1; i >= 0; i--) next = emit(a, x->kid[i], next);
        return next;
    case A_ALT: {
        int *starts = malloc((size_t)(x->n_kid ? x->n_kid : 1) * sizeof *starts);
        if (!starts) { a->st = lmc_fail(LMC_ERR_NOMEM, "pattern"); return -1; }
        for (int i = 0; i < x->n_kid; i++) starts[i] = emit(a, x->kid[i], next);
        int s = x->n_kid ? fan(a, starts, x->n_kid) : next;
        free(starts);
        return s;
    }
    case A_REP: {
        const ast *k = x->kid[0];
        int s;
        if (x->max < 0) { /* loop: L → k → L, or on */
            s = nfa_new(a, N_EPS, 0, 0, -1, next);
            if (s < 0) return -1;
            int body = emit(a, k, s);
            if (body < 0) return -1;
            a->s[s].out = body;
        } else {
            s = next;
            for (int i = 0; i < x->max - x->min; i++) s = nfa_new(a, N_EPS, 0, 0, emit(a, k, s), next);
        }
        for (int i = 0; i < x->min; i++) s = emit(a, k, s);
        return s;
    }
    }
    return -1;
}

/* ---- DFA ---- */

typedef struct {
    const nfa *a;
    int32_t *stack;       /* [n] */
    uint32_t *mark;       /* [n] generation marks */
    uint32_t gen;
} closure_ctx;

/* The important states (byte edges, match) reachable by epsilon moves from seeds; sorted into out. */
static int closure(closure_ctx *c, const int32_t *seeds, int ns, int32_t *out) {
    int sp = 0, n = 0;
    c->gen++;
    for (int i = 0; i < ns; i++)
        if (seeds[i] >= 0 && c->mark[seeds[i]] != c->gen) { c->mark[seeds[i]] = c->gen; c->stack[sp++] = seeds[i]; }
    while (sp) {
        int s = c->stack[--sp];
        const nstate *st = &c->a->s[s];
        if (st->kind != N_EPS) { out[n++] = s; continue; }
        int o[2] = {st->out, st->out2};
        for (int k = 0; k < 2; k++)
            if (o[k] >= 0 && c->mark[o[k]] != c->gen) { c->mark[o[k]] = c->gen; c->stack[sp++] = o[k]; }
    }
    for (int i = 1; i < n; i++) { /* insertion sort: sets are small */
        int32_t v = out[i];
        int j = i;
        while (j > 0 && out[j - 1] > v) { out[j] = out[j - 1]; j--; }
        out[j] = v;
    }
    return n;
}

typedef struct {
    int32_t **sets;   /* [n] sorted NFA states */
    int *len;
    int n, cap;
    int32_t *table;   /* hash → index + 1 */
    int tcap;
} setmap;

static uint32_t hash_set(const int32_t *s, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) { h ^= (uint32_t)s[i]; h *= 16777619u; }
    return h ^ (uint32_t)n;
}

/* Index of set s (added if new); -1 on overflow or allocation failure. */
static int setmap_get(setmap *m, const int32_t *s, int n, int *added) {
    uint32_t h = hash_set(s, n);
    for (uint32_t i = h & (uint32_t)(m->tcap - 1);; i = (i + 1) & (uint32_t)(m->tcap - 1)) {
        int k = m->table[i];
        if (!k) break;
        k--;
        if (m->len[k] == n && !memcmp(m->sets[k], s, (size_t)n * sizeof *s)) { *added = 0; return k; }
    }
    if (m->n >= LMC_RX_MAX_STATES) return -1;
    if (m->n == m->cap) {
        int cap = m->cap ? m->cap * 2 : 64;
        int32_t **ns = realloc(m->sets, (size_t)cap * sizeof *ns);
        if (ns) m->sets = ns;
        int *nl = realloc(m->len, (size_t)cap * sizeof *nl);
        if (nl) m->len = nl;
        if (!ns || !nl) return -1;
        m->cap = cap;
    }
    int32_t *copy = malloc((size_t)(n ? n : 1) * sizeof *copy);
    if (!copy) return -1;
    memcpy(copy, s, (size_t)n * sizeof *s);
    m->sets[m->n] = copy;
    m->len[m->n] = n;
    for (uint32_t i = h & (uint32_t)(m->tcap - 1);; i = (i + 1) & (uint32_t)(m->tcap - 1))
        if (!m->table[i]) { m->table[i] = m->n + 1; break; }
    *added = 1;
    return m->n++;
}

/* Drop states that cannot reach a match: transitions into them become -1 (the start too when it is dead). */
static void prune(lmc_rx *rx) {
    int n = rx->n_states, k = rx->n_classes;
    uint8_t *live = calloc((size_t)n, 1);
    if (!live) return; /* unpruned is still correct, only slower to refuse */
    for (int i = 0; i < n; i++) live[i] = rx->accept[i];
    int changed = 1;
    while (changed) { /* backwards reachability; automata are small */
        changed = 0;
        for (int i = 0; i < n; i++) {
            if (live[i]) continue;
            for (int c = 0; c < k; c++) {
                int32_t t = rx->next[(size_t)i * k + c];
                if (t >= 0 && live[t]) { live[i] = 1; changed = 1; break; }
            }
        }
    }
    for (int i = 0; i < n * k; i++)
        if (rx->next[i] >= 0 && !live[rx->next[i]]) rx->next[i] = -1;
    if (!live[rx->start]) rx->start = -1;
    free(live);
}

/* Fewest code points from each state to a match (a 0-1 breadth-first search backwards: a byte
 * that begins a character costs one, a continuation byte nothing). */
static lmc_status measure(lmc_rx *rx) {
    int n = rx->n_states, k = rx->n_classes;
    uint8_t rep_lead[256];
    for (int c = 0; c < k; c++) rep_lead[c] = 0;
    for (int b = 255; b >= 0; b--) rep_lead[rx->cls[b]] = (uint8_t)(b < 0x80 || b >= 0xC0);
    int *cnt = calloc((size_t)n + 1, sizeof *cnt), *src = malloc(((size_t)n * k + 1) * sizeof *src);
    uint8_t *w = malloc((size_t)n * k + 1);
    int *dq = malloc((size_t)(2 * n * (k + 1) + 2) * sizeof *dq);
    rx->min_cps = malloc((size_t)(n ? n : 1) * sizeof *rx->min_cps);
    if (!cnt || !src || !w || !dq || !rx->min_cps) { free(cnt); free(src); free(w); free(dq); return lmc_fail(LMC_ERR_NOMEM, "pattern"); }
    for (int i = 0; i < n * k; i++) if (rx->next[i] >= 0) cnt[rx->next[i] + 1]++;
    for (int i = 0; i < n; i++) cnt[i + 1] += cnt[i];
    int *fill = calloc((size_t)n + 1, sizeof *fill);
    if (!fill) { free(cnt); free(src); free(w); free(dq); return lmc_fail(LMC_ERR_NOMEM, "pattern"); }
    for (int s = 0; s < n; s++)
        for (int c = 0; c < k; c++) {
            int t = rx->next[(size_t)s * k + c];
            if (t < 0) continue;
            int at = cnt[t] + fill[t]++;
            src[at] = s;
            w[at] = rep_lead[c];
        }
    int head = n * (k + 1) + 1, tail = head; /* a deque in the middle of dq */
    for (int s = 0; s < n; s++) {
        rx->min_cps[s] = rx->accept[s] ? 0 : INT32_MAX;
        if (rx->accept[s]) dq[tail++] = s;
    }
    while (head < tail) {
        int t = dq[head++];
        for (int e = cnt[t]; e < cnt[t + 1]; e++) {
            int s = src[e];
            int32_t d = rx->min_cps[t] + w[e];
            if (d < rx->min_cps[s]) {
                rx->min_cps[s] = d;
                if (w[e]) dq[tail++] = s; else dq[--head] = s;
            }
        }
    }
    free(cnt); free(src); free(w); free(dq); free(fill);
    return LMC_OK;
}

static lmc_status build_dfa(const nfa *a, int start, lmc_rx **out) {
    lmc_rx *rx = calloc(1, sizeof *rx);
    if (!rx) return lmc_fail(LMC_ERR_NOMEM, "pattern");
    /* byte classes: bytes no edge tells apart share a class */
    uint8_t cut[257] = {0};
    for (int i = 0; i < a->n; i++)
        if (a->s[i].kind == N_BYTE && a->s[i].lo <= a->s[i].hi) { cut[a->s[i].lo] = 1; cut[a->s[i].hi + 1] = 1; }
    int k = -1, rep[256];
    for (int b = 0; b < 256; b++) {
        if (b == 0 || cut[b]) rep[++k] = b;
        rx->cls[b] = (uint8_t)k;
    }
    rx->n_classes = k + 1;
    closure_ctx c = {a, malloc((size_t)a->n * sizeof(int32_t)), calloc((size_t)a->n, sizeof(uint32_t)), 0};
    int32_t *buf = malloc((size_t)a->n * sizeof *buf), *seeds = malloc((size_t)a->n * sizeof *seeds);
    setmap m = {0};
    m.tcap = 2 * LMC_RX_MAX_STATES;
    m.table = calloc((size_t)m.tcap, sizeof *m.table);
    int cap_next = 0;
    lmc_status st = LMC_OK;
    if (!c.stack || !c.mark || !buf || !seeds || !m.table) { st = lmc_fail(LMC_ERR_NOMEM, "pattern"); goto done; }
    int added;
    int n0 = closure(&c, &start, 1, buf);
    if (setmap_get(&m, buf, n0, &added) < 0) { st = lmc_fail(LMC_ERR_NOMEM, "pattern"); goto done; }
    for (int d = 0; d < m.n; d++) {
        if (m.n * rx->n_classes > cap_next) {
            int cap = (m.n + 64) * 2 * rx->n_classes;
            int32_t *nx = realloc(rx->next, (size_t)cap * sizeof *nx);
            if (!nx) { st = lmc_fail(LMC_ERR_NOMEM, "pattern"); goto done; }
            rx->next = nx;
            cap_next = cap;
        }
        for (int cl = 0; cl < rx->n_classes; cl++) {
            int b = rep[cl], ns = 0;
            for (int i = 0; i < m.len[d]; i++) {
                const nstate *s = &a->s[m.sets[d][i]];
                if (s->kind == N_BYTE && s->lo <= b && b <= s->hi) seeds[ns++] = s->out;
            }
            int32_t t = -1;
            if (ns) {
                int n = closure(&c, seeds, ns, buf);
                if (n) {
                    t = setmap_get(&m, buf, n, &added);
                    if (t < 0) { st = lmc_fail(LMC_ERR_UNSUPPORTED, "the pattern needs more than %d automaton states", LMC_RX_MAX_STATES); goto done; }
                    if (m.n * rx->n_classes > cap_next) {
                        int cap = (m.n + 64) * 2 * rx->n_classes;
                        int32_t *nx = realloc(rx->next, (size_t)cap * sizeof *nx);
                        if (!nx) { st = lmc_fail(LMC_ERR_NOMEM, "pattern"); goto done; }
                        rx->next = nx;
                        cap_next = cap;
                    }
                }
            }
            rx->next[(size_t)d * rx->n_classes + cl] = t;
        }
    }
    rx->n_states = m.n;
    rx->accept = calloc((size_t)(m.n > 0 ? m.n : 1), 1);
    if (!rx->accept) { st = lmc_fail(LMC_ERR_NOMEM, "pattern"); goto done; }
    for (int d = 0; d < m.n; d++)
        for (int i = 0; i < m.len[d]; i++)
            if (a->s[m.sets[d][i]].kind == N_MATCH) rx->accept[d] = 1;
    rx->start = 0;
    prune(rx);
    st = measure(rx);
done:
    for (int i = 0; i < m.n; i++) free(m.sets[i]);
    free(m.sets); free(m.len); free(m.table);
    free(c.stack); free(c.mark); free(buf); free(seeds);
    if (st < 0) { lmc_rx_free(rx); return st; }
    *out = rx;
    return LMC_OK;
}

lmc_status lmc_rx_compile(const char *pattern, lmc_rx **out) {
    parser ps = {pattern, pattern + strlen(pattern), pattern, LMC_OK};
    ast *t = parse_top(&ps);
    if (!t) return ps.st < 0 ? ps.st : lmc_fail(LMC_ERR_FORMAT, "pattern '%.64s' could not be read", pattern);
    nfa a = {0};
    int match = nfa_new(&a, N_MATCH, 0, 0, -1, -1);
    int start = emit(&a, t, match);
    ast_free(t);
    lmc_status st = a.st;
    if (st >= 0 && start < 0) st = lmc_fail(LMC_ERR_FORMAT, "pattern '%.64s' could not be compiled", pattern);
    if (st >= 0) st = build_dfa(&a, start, out);
    free(a.s);
    if (st < 0) return st;
    if ((*out)->start < 0) {
        lmc_rx_free(*out);
        *out = NULL;
        return lmc_fail(LMC_ERR_FORMAT, "pattern '%.64s' matches no string", pattern);
    }
    return LMC_OK;
}

lmc_status lmc_rx_and(const lmc_rx *a, const lmc_rx *b, lmc_rx **out) {
    lmc_rx *rx = calloc(1, sizeof *rx);
    if (!rx) return lmc_fail(LMC_ERR_NOMEM, "pattern");
    /* classes of the product: pairs of classes */
    int pair[256], rep[256], k = 0;
    for (int x = 0; x < 256; x++) {
        int key = a->cls[x] * 256 + b->cls[x], found = -1;
        for (int j = 0; j < k && found < 0; j++) if (pair[j] == key) found = j;
        if (found < 0) { pair[k] = key; rep[k] = x; found = k++; }
        rx->cls[x] = (uint8_t)found;
    }
    rx->n_classes = k;
    int cap = 64, n = 0;
    int32_t *pa = malloc((size_t)cap * sizeof *pa), *pb = malloc((size_t)cap * sizeof *pb);
    int tcap = 4 * LMC_RX_MAX_STATES;
    int32_t *table = calloc((size_t)tcap, sizeof *table);
    rx->next = malloc((size_t)cap * k * sizeof *rx->next);
    lmc_status st = LMC_OK;
    if (!pa || !pb || !table || !rx->next) { st = lmc_fail(LMC_ERR_NOMEM, "pattern"); goto done; }
    pa[0] = a->start; pb[0] = b->start; n = 1;
    table[((uint32_t)a->start * 2654435761u ^ (uint32_t)b->start) & (uint32_t)(tcap - 1)] = 1;
    for (int d = 0; d < n; d++) {
        for (int c = 0; c < k; c++) {
            int32_t x = lmc_rx_next(a, pa[d], (unsigned char)rep[c]), y = lmc_rx_next(b, pb[d], (unsigned char)rep[c]);
            int32_t t = -1;
            if (x >= 0 && y >= 0) {
                uint32_t i = ((uint32_t)x * 2654435761u ^ (uint32_t)y) & (uint32_t)(tcap - 1);
                for (;; i = (i + 1) & (uint32_t)(tcap - 1)) {
                    int e = table[i];
                    if (!e) break;
                    if (pa[e - 1] == x && pb[e - 1] == y) { t = e - 1; break; }
                }
                if (t < 0) {
                    if (n >= LMC_RX_MAX_STATES) { st = lmc_fail(LMC_ERR_UNSUPPORTED, "patterns combined need more than %d automaton states", LMC_RX_MAX_STATES); goto done; }
                    if (n == cap) {
                        cap *= 2;
                        int32_t *na = realloc(pa, (size_t)cap * sizeof *na);
                        if (na) pa = na;
                        int32_t *nb = realloc(pb, (size_t)cap * sizeof *nb);
                        if (nb) pb = nb;
                        int32_t *nx = realloc(rx->next, (size_t)cap * k * sizeof *nx);
                        if (nx) rx->next = nx;
                        if (!na || !nb || !nx) { st = lmc_fail(LMC_ERR_NOMEM, "pattern"); goto done; }
                    }
                    pa[n] = x; pb[n] = y;
                    table[i] = n + 1;
                    t = n++;
                }
            }
            rx->next[(size_t)d * k + c] = t;
        }
    }
    rx->n_states = n;
    rx->accept = malloc((size_t)n);
    if (!rx->accept) { st = lmc_fail(LMC_ERR_NOMEM, "pattern"); goto done; }
    for (int d = 0; d < n; d++) rx->accept[d] = (uint8_t)(lmc_rx_accepts(a, pa[d]) && lmc_rx_accepts(b, pb[d]));
    rx->start = 0;
    prune(rx);
    if (rx->start < 0) st = lmc_fail(LMC_ERR_FORMAT, "the patterns together match no string");
    else st = measure(rx);
done:
    free(pa); free(pb); free(table);
    if (st < 0) { lmc_rx_free(rx); return st; }
    *out = rx;
    return LMC_OK;
}

void lmc_rx_free(lmc_rx *rx) {
    if (!rx) return;
    free(rx->next);
    free(rx->accept);
    free(rx->min_cps);
    free(rx);
}

int32_t lmc_rx_start(const lmc_rx *rx) { return rx->start; }

int32_t lmc_rx_next(const lmc_rx *rx, int32_t st, unsigned char c) {
    if (st < 0) return -1;
    return rx->next[(size_t)st * rx->n_classes + rx->cls[c]];
}

int lmc_rx_accepts(const lmc_rx *rx, int32_t st) { return st >= 0 && rx->accept[st]; }

int lmc_rx_match(const lmc_rx *rx, const char *s, size_t n) {
    int32_t st = rx->start;
    for (size_t i = 0; i < n && st >= 0; i++) st = lmc_rx_next(rx, st, (unsigned char)s[i]);
    return lmc_rx_accepts(rx, st);
}

int lmc_rx_n_states(const lmc_rx *rx) { return rx->n_states; }

int32_t lmc_rx_min_cps(const lmc_rx *rx, int32_t st) { return st >= 0 && rx->min_cps ? rx->min_cps[st] : INT32_MAX; }
