/* jinja_value.c — Jinja values with Python semantics: arena, string builder, UTF-8,
 * truthiness, equality/ordering, str()/repr() (True/False/None, {'a': 1}, float repr),
 * json.dumps as transformers' tojson calls it, and cJSON → value conversion.
 * All memory comes from the render arena (jctx) and is freed with it.
 */
#include "tok/jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- arena ------------------------------------------------------------------ */
struct jz_chunk { jz_chunk *next; size_t cap, used; max_align_t data[]; };
#define CHUNK_SIZE (64 * 1024)

void *jz_arena_alloc(jz_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->limit && (a->used + n > a->limit || a->used + n < a->used)) return NULL;
    jz_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_SIZE / 2 ? n : CHUNK_SIZE;
        jz_chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) return NULL;
        nc->cap = cap; nc->used = 0;
        if (c && n > CHUNK_SIZE / 2) { nc->next = c->next; c->next = nc; c = nc; }  /* keep the open chunk on top */
        else { nc->next = c; a->head = nc; c = nc; }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void jz_arena_free(jz_arena *a) {
    jz_chunk *c = a->head;
    while (c) { jz_chunk *nx = c->next; free(c); c = nx; }
    a->head = NULL; a->used = 0;
}

void *jz_alloc(jctx *c, size_t n) {
    void *p = jz_arena_alloc(&c->arena, n);
    if (!p) jz_fail(c, NULL, "out of memory (render memory limit %zu bytes)", c->lim.max_memory);
    return p;
}

/* ---- string builder ------------------------------------------------------------ */
void jsb_init(jsb *b, jctx *c) { b->c = c; b->p = NULL; b->n = b->cap = 0; }

static void jsb_grow(jsb *b, size_t extra) {
    if (b->n + extra <= b->cap) return;
    size_t nc = b->cap ? b->cap * 2 : 64;
    while (nc < b->n + extra) nc *= 2;
    char *np = jz_alloc(b->c, nc);
    if (b->n) memcpy(np, b->p, b->n);
    b->p = np; b->cap = nc;
}
void jsb_put(jsb *b, const char *s, size_t n) { if (!n) return; jsb_grow(b, n); memcpy(b->p + b->n, s, n); b->n += n; }
void jsb_puts(jsb *b, const char *s) { jsb_put(b, s, strlen(s)); }
void jsb_putc(jsb *b, char ch) { jsb_grow(b, 1); b->p[b->n++] = ch; }
void jsb_printf(jsb *b, const char *fmt, ...) {
    char buf[256];
    va_list ap; va_start(ap, fmt);
    int k = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof buf) { jsb_put(b, buf, (size_t)k); return; }
    jsb_grow(b, (size_t)k + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}
jv jsb_value(jsb *b) { return jv_strn(b->p ? b->p : "", b->n); }

/* ---- UTF-8 ---------------------------------------------------------------------- */
size_t jz_utf8_dec(const char *s, size_t n, int32_t *cp) {
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)(n > 4 ? 4 : n), &c);
    if (k <= 0) { *cp = (unsigned char)s[0]; return 1; }
    *cp = c;
    return (size_t)k;
}
size_t jz_utf8_enc(int32_t cp, char *out) {
    utf8proc_ssize_t k = utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
    return k > 0 ? (size_t)k : 0;
}
size_t jz_utf8_len(const char *s, size_t n) {
    size_t k = 0, i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) { i++; k++; continue; }
        int32_t cp; i += jz_utf8_dec(s + i, n - i, &cp); k++;
    }
    return k;
}
int jz_is_space(int32_t cp) {
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f)) return 1;
    if (cp < 0x80) return 0;
    if (cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
        cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000) return 1;
    return 0;
}

/* ---- constructors ----------------------------------------------------------------- */
jv jv_str_copy(jctx *c, const char *s, size_t n) {
    char *p = jz_alloc(c, n + 1);
    if (n) memcpy(p, s, n);
    return jv_strn(p, n);
}
jv jv_cstr(const char *s) { return jv_strn(s, strlen(s)); }

jv jv_list_new(jctx *c, size_t cap) {
    jv v = {0};
    v.t = JV_LIST;
    v.u.l = jz_alloc(c, sizeof(jlist));
    if (cap) { v.u.l->v = jz_alloc(c, cap * sizeof(jv)); v.u.l->cap = cap; }
    return v;
}
void jv_list_push(jctx *c, jv list, jv item) {
    jlist *l = list.u.l;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        jv *nv = jz_alloc(c, nc * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv; l->cap = nc;
    }
    l->v[l->n++] = item;
}
jv jv_dict_new(jctx *c) {
    jv v = {0};
    v.t = JV_DICT;
    v.u.d = jz_alloc(c, sizeof(jdict));
    return v;
}
jv *jdict_get(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++) if (jv_equal(d->k[i], key)) return &d->v[i];
    return NULL;
}
jv *jdict_get_str(const jdict *d, const char *s, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].n == n && memcmp(d->k[i].u.s, s, n) == 0) return &d->v[i];
    return NULL;
}
void jdict_set(jctx *c, jdict *d, jv key, jv val) {
    jv *slot = jdict_get(d, key);
    if (slot) { *slot = val; return; }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 8;
        jv *nk = jz_alloc(c, nc * sizeof(jv)), *nv = jz_alloc(c, nc * sizeof(jv));
        if (d->n) { memcpy(nk, d->k, d->n * sizeof(jv)); memcpy(nv, d->v, d->n * sizeof(jv)); }
        d->k = nk; d->v = nv; d->cap = nc;
    }
    d->k[d->n] = key; d->v[d->n] = val; d->n++;
}

/* ---- predicates ---------------------------------------------------------------------- */
const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST:
        switch (v.u.l->lazy) {
        case JL_GEN: return "generator";
        case JL_REVITER: return "list_reverseiterator";
        case JL_ITEMS: return "dict_items";
        case JL_KEYS: return "dict_keys";
        case JL_VALUES: return "dict_values";
        }
        return v.u.l->tuple == 2 ? "_GroupTuple" : v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    case JV_METHOD: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    case JV_CYCLER: return "Cycler";
    case JV_JOINER: return "Joiner";
    }
    return "object";
}

int jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.n != 0;
    case JV_LIST: return v.u.l->lazy == JL_GEN || v.u.l->lazy == JL_REVITER || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

int jv_is_number(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
double jv_num(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? v.u.b : 0.0; }

/* Values are immutable, so nesting only grows by construction; deeper than this is
 * compared as unequal rather than recursing without bound. */
#define MAX_CMP_DEPTH 500

static int equal_at(jv a, jv b, int depth);
int jv_equal(jv a, jv b) { return equal_at(a, b, 0); }

static int equal_at(jv a, jv b, int depth) {
    if (depth > MAX_CMP_DEPTH) return 0;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
            return x == y;
        }
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.n == b.n && (a.n == 0 || memcmp(a.u.s, b.u.s, a.n) == 0);
    case JV_LIST:
        if (a.u.l->lazy || b.u.l->lazy) return a.u.l == b.u.l;
        if (!a.u.l->tuple != !b.u.l->tuple || a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++) if (!equal_at(a.u.l->v[i], b.u.l->v[i], depth + 1)) return 0;
        return 1;
    case JV_DICT: case JV_NS:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jdict_get(b.u.d, a.u.d->k[i]);
            if (!o || !equal_at(a.u.d->v[i], *o, depth + 1)) return 0;
        }
        return 1;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return a.u.s == b.u.s;
    }
}

static int compare_at(jctx *c, const jnode *at, jv a, jv b, int depth);
int jv_compare(jctx *c, const jnode *at, jv a, jv b) { return compare_at(c, at, a, b, 0); }

static int compare_at(jctx *c, const jnode *at, jv a, jv b, int depth) {
    if (depth > MAX_CMP_DEPTH) jz_fail(c, at, "values nested too deeply to compare");
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
            return (x > y) - (x < y);
        }
        double x = jv_num(a), y = jv_num(b);
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = a.n < b.n ? a.n : b.n;
        int r = m ? memcmp(a.u.s, b.u.s, m) : 0;
        if (r) return r < 0 ? -1 : 1;
        return (a.n > b.n) - (a.n < b.n);
    }
    if (a.t == JV_LIST && b.t == JV_LIST && !a.u.l->tuple == !b.u.l->tuple && !a.u.l->lazy && !b.u.l->lazy) {
        size_t m = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < m; i++) {
            if (equal_at(a.u.l->v[i], b.u.l->v[i], depth + 1)) continue;
            return compare_at(c, at, a.u.l->v[i], b.u.l->v[i], depth + 1);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) {
        jv u = a.t == JV_UNDEF ? a : b;
        if (u.u.s) jz_fail(c, at, "'%s' is undefined", u.u.s);
        jz_fail(c, at, "undefined value in comparison");
    }
    jz_fail(c, at, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

/* ---- float formatting (Python repr) ------------------------------------------------------- */
void jv_format_float(double f, char *buf, size_t cap) {
    if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0"); return; }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX */
    const char *p = tmp;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    char digits[32]; int nd = 0;
    while (*p && *p != 'e') { if (*p != '.') digits[nd++] = *p; p++; }
    digits[nd] = 0;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;
    int decpt = exp10 + 1;
    char out[64]; int k = 0;
    if (neg) out[k++] = '-';
    if (decpt <= -4 || decpt > 16) {
        out[k++] = digits[0];
        if (nd > 1) { out[k++] = '.'; for (int i = 1; i < nd; i++) out[k++] = digits[i]; }
        k += snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        out[k++] = '0'; out[k++] = '.';
        for (int i = 0; i < -decpt; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
    } else {
        for (int i = 0; i < decpt; i++) out[k++] = i < nd ? digits[i] : '0';
        out[k++] = '.';
        if (nd > decpt) for (int i = decpt; i < nd; i++) out[k++] = digits[i];
        else out[k++] = '0';
    }
    out[k] = 0;
    snprintf(buf, cap, "%s", out);
}

/* ---- str / repr ---------------------------------------------------------------------------- */
static int is_printable(int32_t cp) {
    if (cp == ' ') return 1;
    if (cp < 0x20 || cp == 0x7f) return 0;
    if (cp < 0x7f) return 1;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return 0;
    default: return 1;
    }
}

static void repr_str(jsb *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jsb_putc(b, q);
    size_t i = 0;
    while (i < n) {
        int32_t cp; size_t k = jz_utf8_dec(s + i, n - i, &cp);
        if (cp == q || cp == '\\') { jsb_putc(b, '\\'); jsb_putc(b, (char)cp); }
        else if (cp == '\n') jsb_puts(b, "\\n");
        else if (cp == '\r') jsb_puts(b, "\\r");
        else if (cp == '\t') jsb_puts(b, "\\t");
        else if (!is_printable(cp)) {
            if (cp < 0x100) jsb_printf(b, "\\x%02x", cp);
            else if (cp < 0x10000) jsb_printf(b, "\\u%04x", cp);
            else jsb_printf(b, "\\U%08x", cp);
        } else jsb_put(b, s + i, k);
        i += k;
    }
    jsb_putc(b, q);
}

static void to_str_impl(jctx *c, jsb *b, jv v, int repr, int depth) {
    char buf[64];
    if (depth > 200) jz_fail(c, NULL, "value nesting too deep to print");
    switch (v.t) {
    case JV_UNDEF: if (repr) jsb_puts(b, "Undefined"); return;
    case JV_NONE: jsb_puts(b, "None"); return;
    case JV_BOOL: jsb_puts(b, v.u.b ? "True" : "False"); return;
    case JV_INT: jsb_printf(b, "%lld", (long long)v.u.i); return;
    case JV_FLOAT: jv_format_float(v.u.f, buf, sizeof buf); jsb_puts(b, buf); return;
    case JV_STR: if (repr) repr_str(b, v.u.s, v.n); else jsb_put(b, v.u.s, v.n); return;
    case JV_LIST: {
        jlist *l = v.u.l;
        if (l->lazy == JL_GEN || l->lazy == JL_REVITER) { jsb_printf(b, "<%s object>", jv_type_name(v)); return; }
        if (l->lazy) jsb_printf(b, "%s(", jv_type_name(v));
        jsb_putc(b, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jsb_puts(b, ", ");
            to_str_impl(c, b, l->v[i], 1, depth + 1);
        }
        if (l->tuple && l->n == 1) jsb_putc(b, ',');
        jsb_putc(b, l->tuple ? ')' : ']');
        if (l->lazy) jsb_putc(b, ')');
        return;
    }
    case JV_NS: jsb_puts(b, "<Namespace "); /* fallthrough */
    case JV_DICT: {
        jdict *d = v.u.d;
        jsb_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) jsb_puts(b, ", ");
            to_str_impl(c, b, d->k[i], 1, depth + 1);
            jsb_puts(b, ": ");
            to_str_impl(c, b, d->v[i], 1, depth + 1);
        }
        jsb_putc(b, '}');
        if (v.t == JV_NS) jsb_putc(b, '>');
        return;
    }
    case JV_MACRO: jsb_puts(b, "<Macro>"); return;
    case JV_FUNC: jsb_puts(b, "<built-in function>"); return;
    case JV_METHOD: jsb_printf(b, "<built-in method %s>", v.u.bm->name); return;
    case JV_LOOP: jsb_puts(b, "<LoopContext>"); return;
    case JV_CYCLER: jsb_puts(b, "<Cycler>"); return;
    case JV_JOINER: jsb_puts(b, "<Joiner>"); return;
    }
}

void jv_to_str(jctx *c, jsb *b, jv v) { to_str_impl(c, b, v, 0, 0); }
void jv_to_repr(jctx *c, jsb *b, jv v) { to_str_impl(c, b, v, 1, 0); }
jv jv_str(jctx *c, jv v) {
    if (v.t == JV_STR) return v;
    jsb b; jsb_init(&b, c);
    jv_to_str(c, &b, v);
    return jsb_value(&b);
}

/* ---- JSON (Python json.dumps) ------------------------------------------------------------------ */
static void json_str(jsb *b, const char *s, size_t n, int ensure_ascii) {
    jsb_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x80) {
            switch (ch) {
            case '"': jsb_puts(b, "\\\""); break;
            case '\\': jsb_puts(b, "\\\\"); break;
            case '\n': jsb_puts(b, "\\n"); break;
            case '\r': jsb_puts(b, "\\r"); break;
            case '\t': jsb_puts(b, "\\t"); break;
            case '\b': jsb_puts(b, "\\b"); break;
            case '\f': jsb_puts(b, "\\f"); break;
            default:
                if (ch < 0x20) jsb_printf(b, "\\u%04x", ch);
                else jsb_putc(b, (char)ch);
            }
            i++;
            continue;
        }
        int32_t cp; size_t k = jz_utf8_dec(s + i, n - i, &cp);
        if (ensure_ascii) {
            if (cp >= 0x10000) {
                int32_t v = cp - 0x10000;
                jsb_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else jsb_printf(b, "\\u%04x", cp);
        } else jsb_put(b, s + i, k);
        i += k;
    }
    jsb_putc(b, '"');
}

static void json_newline(jsb *b, const char *indent, size_t indent_n, int level) {
    jsb_putc(b, '\n');
    for (int i = 0; i < level; i++) jsb_put(b, indent, indent_n);
}

typedef struct kv_ref { jv k, v; } kv_ref;
static int cmp_json_keys(const void *x, const void *y) {
    const kv_ref *a = x, *b = y;
    size_t m = a->k.n < b->k.n ? a->k.n : b->k.n;
    int r = m ? memcmp(a->k.u.s, b->k.u.s, m) : 0;
    if (r) return r;
    return (a->k.n > b->k.n) - (a->k.n < b->k.n);
}

void jv_to_json(jctx *c, const jnode *at, jsb *b, jv v, const char *indent, size_t indent_n,
                const char *item_sep, const char *key_sep, int sort_keys, int ensure_ascii, int level) {
    char buf[64];
    if (level > 200) jz_fail(c, at, "tojson: value nesting too deep");
    switch (v.t) {
    case JV_NONE: jsb_puts(b, "null"); return;
    case JV_BOOL: jsb_puts(b, v.u.b ? "true" : "false"); return;
    case JV_INT: jsb_printf(b, "%lld", (long long)v.u.i); return;
    case JV_FLOAT:
        if (isnan(v.u.f)) jsb_puts(b, "NaN");
        else if (isinf(v.u.f)) jsb_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else { jv_format_float(v.u.f, buf, sizeof buf); jsb_puts(b, buf); }
        return;
    case JV_STR: json_str(b, v.u.s, v.n, ensure_ascii); return;
    case JV_LIST: {
        jlist *l = v.u.l;
        if (l->lazy) jz_fail(c, at, "Object of type %s is not JSON serializable", jv_type_name(v));
        if (!l->n) { jsb_puts(b, "[]"); return; }
        jsb_putc(b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jsb_puts(b, item_sep);
            if (indent) json_newline(b, indent, indent_n, level + 1);
            jv_to_json(c, at, b, l->v[i], indent, indent_n, item_sep, key_sep, sort_keys, ensure_ascii, level + 1);
        }
        if (indent) json_newline(b, indent, indent_n, level);
        jsb_putc(b, ']');
        return;
    }
    case JV_DICT: {
        jdict *d = v.u.d;
        if (!d->n) { jsb_puts(b, "{}"); return; }
        kv_ref *items = jz_alloc(c, d->n * sizeof *items);
        for (size_t i = 0; i < d->n; i++) {
            jv k = d->k[i];
            if (k.t == JV_STR) {}
            else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                jsb kb; jsb_init(&kb, c);
                if (k.t == JV_BOOL) jsb_puts(&kb, k.u.b ? "true" : "false");
                else if (k.t == JV_NONE) jsb_puts(&kb, "null");
                else jv_to_str(c, &kb, k);
                k = jsb_value(&kb);
            } else jz_fail(c, at, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
            items[i].k = k; items[i].v = d->v[i];
        }
        if (sort_keys) qsort(items, d->n, sizeof *items, cmp_json_keys);
        jsb_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) jsb_puts(b, item_sep);
            if (indent) json_newline(b, indent, indent_n, level + 1);
            json_str(b, items[i].k.u.s, items[i].k.n, ensure_ascii);
            jsb_puts(b, key_sep);
            jv_to_json(c, at, b, items[i].v, indent, indent_n, item_sep, key_sep, sort_keys, ensure_ascii, level + 1);
        }
        if (indent) json_newline(b, indent, indent_n, level);
        jsb_putc(b, '}');
        return;
    }
    default:
        jz_fail(c, at, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

/* ---- cJSON → value --------------------------------------------------------------------------- */
jv jv_from_cjson(jctx *c, const cJSON *j, int depth) {
    if (!j) return jv_none();
    if (depth > 256) jz_fail(c, NULL, "context nesting too deep");
    if (cJSON_IsObject(j)) {
        jv d = jv_dict_new(c);
        for (const cJSON *e = j->child; e; e = e->next) {
            if (!e->string) continue;
            jdict_set(c, d.u.d, jv_cstr(e->string), jv_from_cjson(c, e, depth + 1));
        }
        return d;
    }
    if (cJSON_IsArray(j)) {
        jv l = jv_list_new(c, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *e = j->child; e; e = e->next) jv_list_push(c, l, jv_from_cjson(c, e, depth + 1));
        return l;
    }
    if (cJSON_IsString(j)) return j->valuestring ? jv_cstr(j->valuestring) : jv_strn("", 0);
    if (cJSON_IsNumber(j)) {
        double f = j->valuedouble;
        if (j->valuestring) {   /* source text kept by lmc_chat_json_keep_numbers: Python's typing */
            const char *t = j->valuestring;
            if (strpbrk(t, ".eE")) return jv_float(f);
            errno = 0;
            long long v = strtoll(t, NULL, 10);
            if (errno != ERANGE) return jv_int(v);
            return jv_float(f);
        }
        if (isfinite(f) && f == floor(f) && fabs(f) < 9007199254740992.0) return jv_int((int64_t)f);
        return jv_float(f);
    }
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    return jv_none();
}

/* ---- iteration ------------------------------------------------------------------------------- */
jv jv_iterable_to_list(jctx *c, const jnode *at, jv v) {
    switch (v.t) {
    case JV_LIST: return v;
    case JV_UNDEF: return jv_list_new(c, 0);
    case JV_DICT: case JV_NS: {
        jv l = jv_list_new(c, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(c, l, v.u.d->k[i]);
        return l;
    }
    case JV_STR: {
        jv l = jv_list_new(c, v.n);
        size_t i = 0;
        while (i < v.n) {
            int32_t cp; size_t k = jz_utf8_dec(v.u.s + i, v.n - i, &cp);
            jv_list_push(c, l, jv_strn(v.u.s + i, k));
            i += k;
        }
        return l;
    }
    default:
        jz_fail(c, at, "'%s' object is not iterable", jv_type_name(v));
    }
}

jv jv_str_index(jctx *c, jv s, int64_t idx, int *ok) {
    *ok = 0;
    size_t len = jz_utf8_len(s.u.s, s.n);
    if (idx < 0) idx += (int64_t)len;
    if (idx < 0 || (size_t)idx >= len) return jv_undef(NULL);
    size_t i = 0;
    for (int64_t k = 0; k < idx; k++) { int32_t cp; i += jz_utf8_dec(s.u.s + i, s.n - i, &cp); }
    int32_t cp; size_t k = jz_utf8_dec(s.u.s + i, s.n - i, &cp);
    *ok = 1;
    return jv_strn(s.u.s + i, k);
}
