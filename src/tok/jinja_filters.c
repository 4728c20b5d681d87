/* jinja_filters.c — jinja2's builtin filters and tests, Python str/dict/list methods,
 * and the global functions (range, dict, namespace, cycler, joiner, plus the ones
 * transformers adds: raise_exception, strftime_now). tojson follows transformers'
 * override: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False), with those positional parameters in that order.
 */
#include "tok/jinja_strings.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

static int in_list(const char *const *l, const char *name, size_t n);

/* ---- argument access ------------------------------------------------------------ */
typedef struct fargs { jv *args; int nargs; const char **kwn; jv *kwv; int nkw; const jnode *at; const char *fname; } fargs;

/* positional idx or keyword name; absent → undefined */
static jv arg(const fargs *a, int idx, const char *name) {
    if (idx >= 0 && idx < a->nargs) return a->args[idx];
    if (name) for (int k = 0; k < a->nkw; k++) if (!strcmp(a->kwn[k], name)) return a->kwv[k];
    return jv_undef(NULL);
}
static int has(jv v) { return v.t != JV_UNDEF; }
static int64_t arg_int(jctx *c, const fargs *a, int idx, const char *name, int64_t dflt) {
    jv v = arg(a, idx, name);
    if (!has(v) || v.t == JV_NONE) return dflt;
    if (v.t == JV_INT) return v.u.i;
    if (v.t == JV_BOOL) return v.u.b;
    if (v.t == JV_FLOAT) return (int64_t)v.u.f;
    jz_fail(c, a->at, "%s: argument '%s' must be an integer, not %s", a->fname, name ? name : "?", jv_type_name(v));
}
static int arg_bool(const fargs *a, int idx, const char *name, int dflt) {
    jv v = arg(a, idx, name);
    return has(v) ? jv_truthy(v) : dflt;
}
static jv need_str(jctx *c, const fargs *a, jv v, const char *what) {
    if (v.t != JV_STR) jz_fail(c, a->at, "%s: %s must be a string, not %s", a->fname, what, jv_type_name(v));
    return v;
}
static void check_kwargs(jctx *c, const fargs *a, const char *const *allowed) {
    for (int k = 0; k < a->nkw; k++) {
        int ok = 0;
        for (int i = 0; allowed && allowed[i]; i++) if (!strcmp(allowed[i], a->kwn[k])) ok = 1;
        if (!ok) jz_fail(c, a->at, "%s() got an unexpected keyword argument '%s'", a->fname, a->kwn[k]);
    }
}

/* soft_str: undefined → "" */
static jv sstr(jctx *c, jv v) { return v.t == JV_UNDEF ? jv_strn("", 0) : jv_str(c, v); }

static jv as_lazy(jv l, int kind) { l.u.l->lazy = kind; return l; }

static jv mktuple2(jctx *c, jv x, jv y) {
    jv t = jv_list_new(c, 2);
    t.u.l->tuple = 1;
    jv_list_push(c, t, x); jv_list_push(c, t, y);
    return t;
}

static size_t seq_len(jctx *c, const jnode *at, jv v) {
    switch (v.t) {
    case JV_STR: return jz_utf8_len(v.u.s, v.n);
    case JV_LIST:
        if (v.u.l->lazy == JL_GEN || v.u.l->lazy == JL_REVITER) jz_fail(c, at, "object of type '%s' has no len()", jv_type_name(v));
        return v.u.l->n;
    case JV_DICT: case JV_NS: return v.u.d->n;
    case JV_UNDEF: return 0;
    default: jz_fail(c, at, "object of type '%s' has no len()", jv_type_name(v));
    }
}

/* attribute path "a.b.0" as jinja2's make_attrgetter does */
static jv attr_path(jctx *c, const jnode *at, jv obj, jv path) {
    if (path.t == JV_INT) return jz_getitem(c, at, obj, path);
    if (path.t != JV_STR) jz_fail(c, at, "attribute must be a string");
    size_t i = 0;
    while (i <= path.n) {
        size_t e = i;
        while (e < path.n && path.u.s[e] != '.') e++;
        const char *p = path.u.s + i; size_t pn = e - i;
        int digits = pn > 0;
        for (size_t z = 0; z < pn; z++) if (p[z] < '0' || p[z] > '9') digits = 0;
        obj = jz_getitem(c, at, obj, digits ? jv_int(atoll(p)) : jv_strn(p, pn));
        i = e + 1;
    }
    return obj;
}

/* ---- sorting (stable merge sort with a jinja comparison) ---------------------------- */
typedef struct sortctx { jctx *c; const jnode *at; int case_sensitive; int reverse; } sortctx;

static jv sort_key_fold(jctx *c, jv v, int cs) { return (!cs && v.t == JV_STR) ? jz_str_lower(c, v) : v; }

static int sort_cmp(sortctx *s, jv a, jv b) {
    int r = jv_compare(s->c, s->at, a, b);
    return s->reverse ? -r : r;
}
static void merge_sort(sortctx *s, jv *keys, jv *vals, size_t n, jv *tk, jv *tv) {
    if (n < 2) return;
    size_t m = n / 2;
    merge_sort(s, keys, vals, m, tk, tv);
    merge_sort(s, keys + m, vals + m, n - m, tk, tv);
    size_t i = 0, j = m, k = 0;
    while (i < m && j < n) {
        if (sort_cmp(s, keys[j], keys[i]) < 0) { tk[k] = keys[j]; tv[k++] = vals[j++]; }
        else { tk[k] = keys[i]; tv[k++] = vals[i++]; }
    }
    while (i < m) { tk[k] = keys[i]; tv[k++] = vals[i++]; }
    while (j < n) { tk[k] = keys[j]; tv[k++] = vals[j++]; }
    memcpy(keys, tk, n * sizeof *keys); memcpy(vals, tv, n * sizeof *vals);
}
static jv sorted(jctx *c, const jnode *at, jv list, jv *keys, int reverse) {
    size_t n = list.u.l->n;
    jv out = jv_list_new(c, n);
    jv *vals = jz_alloc(c, (n + 1) * sizeof(jv)), *tk = jz_alloc(c, (n + 1) * sizeof(jv)), *tv = jz_alloc(c, (n + 1) * sizeof(jv));
    if (n) memcpy(vals, list.u.l->v, n * sizeof(jv)); /* an empty list may have no storage */
    sortctx s = { c, at, 0, reverse };
    merge_sort(&s, keys, vals, n, tk, tv);
    for (size_t i = 0; i < n; i++) jv_list_push(c, out, vals[i]);
    return out;
}

/* ---- tojson -------------------------------------------------------------------------- */
static jv do_tojson(jctx *c, const fargs *a, jv in) {
    static const char *const kws[] = { "ensure_ascii", "indent", "separators", "sort_keys", NULL };
    check_kwargs(c, a, kws);
    int ensure_ascii = arg_bool(a, 0, "ensure_ascii", 0);
    jv ind = arg(a, 1, "indent");
    jv seps = arg(a, 2, "separators");
    int sort_keys = arg_bool(a, 3, "sort_keys", 0);
    const char *indent = NULL; size_t indent_n = 0;
    char spaces[256];
    if (has(ind) && ind.t != JV_NONE) {
        if (ind.t == JV_STR) { indent = ind.u.s; indent_n = ind.n; }
        else if (ind.t == JV_INT || ind.t == JV_BOOL) {
            int64_t k = ind.t == JV_BOOL ? ind.u.b : ind.u.i;
            if (k < 0) k = 0;
            if (k > 255) jz_fail(c, a->at, "tojson: indent too large");
            memset(spaces, ' ', (size_t)k);
            spaces[k] = 0;
            indent = spaces; indent_n = (size_t)k;
        } else jz_fail(c, a->at, "tojson: indent must be an int or a string");
    }
    const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
    if (has(seps) && seps.t != JV_NONE) {
        if (seps.t != JV_LIST || seps.u.l->n != 2 || seps.u.l->v[0].t != JV_STR || seps.u.l->v[1].t != JV_STR)
            jz_fail(c, a->at, "tojson: separators must be a pair of strings");
        item_sep = jv_str_copy(c, seps.u.l->v[0].u.s, seps.u.l->v[0].n).u.s;
        key_sep = jv_str_copy(c, seps.u.l->v[1].u.s, seps.u.l->v[1].n).u.s;
    }
    jsb b; jsb_init(&b, c);
    jv_to_json(c, a->at, &b, in, indent, indent_n, item_sep, key_sep, sort_keys, ensure_ascii, 0);
    return jsb_value(&b);
}

/* ---- indent filter (jinja2 3.1) -------------------------------------------------------- */
static jv do_indent(jctx *c, const fargs *a, jv in) {
    if (in.t != JV_STR) jz_fail(c, a->at, "indent: expected a string, not %s", jv_type_name(in));
    jv s = in;
    jv w = arg(a, 0, "width");
    int first = arg_bool(a, 1, "first", 0), blank = arg_bool(a, 2, "blank", 0);
    jv ind;
    if (w.t == JV_STR) ind = w;
    else {
        int64_t k = has(w) ? arg_int(c, a, 0, "width", 4) : 4;
        if (k < 0) k = 0;
        if (k > 10000) jz_fail(c, a->at, "indent: width too large");
        char *p = jz_alloc(c, (size_t)k + 1);
        memset(p, ' ', (size_t)k);
        ind = jv_strn(p, (size_t)k);
    }
    jsb t; jsb_init(&t, c);
    jsb_put(&t, s.u.s, s.n); jsb_putc(&t, '\n');
    jv lines = jz_str_splitlines(c, jsb_value(&t), 0);
    jsb b; jsb_init(&b, c);
    jlist *L = lines.u.l;
    if (blank) {
        for (size_t i = 0; i < L->n; i++) {
            if (i) { jsb_putc(&b, '\n'); jsb_put(&b, ind.u.s, ind.n); }
            jsb_put(&b, L->v[i].u.s, L->v[i].n);
        }
    } else if (L->n) {
        jsb_put(&b, L->v[0].u.s, L->v[0].n);
        for (size_t i = 1; i < L->n; i++) {
            jsb_putc(&b, '\n');
            if (L->v[i].n) jsb_put(&b, ind.u.s, ind.n);
            jsb_put(&b, L->v[i].u.s, L->v[i].n);
        }
    }
    if (first) {
        jsb f; jsb_init(&f, c);
        jsb_put(&f, ind.u.s, ind.n); jsb_put(&f, b.p ? b.p : "", b.n);
        return jsb_value(&f);
    }
    return jsb_value(&b);
}

static jv html_escape(jctx *c, jv s) {
    jsb b; jsb_init(&b, c);
    for (size_t i = 0; i < s.n; i++) {
        switch (s.u.s[i]) {
        case '&': jsb_puts(&b, "&amp;"); break;
        case '<': jsb_puts(&b, "&lt;"); break;
        case '>': jsb_puts(&b, "&gt;"); break;
        case '"': jsb_puts(&b, "&#34;"); break;
        case '\'': jsb_puts(&b, "&#39;"); break;
        default: jsb_putc(&b, s.u.s[i]);
        }
    }
    return jsb_value(&b);
}

/* Python int(str) / float(str) parsing; returns 0 on failure */
static int parse_int(jv s, int base, int64_t *out) {
    jv t = jz_str_strip(s, jv_none(), 3);
    char buf[80]; size_t k = 0;
    if (!t.n || t.n >= sizeof buf) return 0;
    for (size_t i = 0; i < t.n; i++) {
        char ch = t.u.s[i];
        if (ch == '_' && i > 0 && i + 1 < t.n) continue;
        buf[k++] = ch;
    }
    buf[k] = 0;
    char *end;
    long long v = strtoll(buf, &end, base);
    if (*end || end == buf) return 0;
    *out = v;
    return 1;
}
static int parse_float(jv s, double *out) {
    jv t = jz_str_strip(s, jv_none(), 3);
    char buf[80];
    if (!t.n || t.n >= sizeof buf) return 0;
    memcpy(buf, t.u.s, t.n); buf[t.n] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (*end || end == buf) return 0;
    *out = v;
    return 1;
}

static int is_word_cp(int32_t cp) {
    if (cp == '_') return 1;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return 1;
    default: return 0;
    }
}

static jv select_impl(jctx *c, const fargs *a, jv in, int by_attr, int reject) {
    jv items = jv_iterable_to_list(c, a->at, in);
    jv out = jv_list_new(c, items.u.l->n);
    int first_arg = by_attr ? 1 : 0;
    jv attr = by_attr ? arg(a, 0, NULL) : jv_undef(NULL);
    if (by_attr && !has(attr)) jz_fail(c, a->at, "%s: missing attribute argument", a->fname);
    jv test = arg(a, first_arg, NULL);
    char tname[64] = "";
    if (has(test)) {
        need_str(c, a, test, "test name");
        size_t n = test.n < sizeof tname - 1 ? test.n : sizeof tname - 1;
        memcpy(tname, test.u.s, n); tname[n] = 0;
    }
    int nextra = a->nargs - first_arg - 1;
    jv *extra = nextra > 0 ? a->args + first_arg + 1 : NULL;
    for (size_t i = 0; i < items.u.l->n; i++) {
        jv item = items.u.l->v[i];
        jv v = by_attr ? attr_path(c, a->at, item, attr) : item;
        int r = tname[0] ? jz_test(c, a->at, tname, v, extra, nextra > 0 ? nextra : 0) : jv_truthy(v);
        if (r != reject) jv_list_push(c, out, item);
    }
    return as_lazy(out, JL_GEN);
}

static jv minmax(jctx *c, const fargs *a, jv in, int want_max) {
    jv items = jv_iterable_to_list(c, a->at, in);
    int cs = arg_bool(a, 0, "case_sensitive", 0);
    jv attr = arg(a, 1, "attribute");
    if (!items.u.l->n) return jv_undef(NULL);
    jv best = items.u.l->v[0];
    jv bk = sort_key_fold(c, has(attr) ? attr_path(c, a->at, best, attr) : best, cs);
    for (size_t i = 1; i < items.u.l->n; i++) {
        jv v = items.u.l->v[i];
        jv k = sort_key_fold(c, has(attr) ? attr_path(c, a->at, v, attr) : v, cs);
        int r = jv_compare(c, a->at, k, bk);
        if (want_max ? r > 0 : r < 0) { best = v; bk = k; }
    }
    return best;
}

static jv do_round(jctx *c, const fargs *a, jv in) {
    int64_t prec = arg_int(c, a, 0, "precision", 0);
    jv m = arg(a, 1, "method");
    const char *method = "common";
    if (has(m)) { need_str(c, a, m, "method"); method = jv_str_copy(c, m.u.s, m.n).u.s; }
    if (!jv_is_number(in)) jz_fail(c, a->at, "round: value must be a number");
    double x = jv_num(in), p = pow(10.0, (double)prec);
    if (!strcmp(method, "common")) {
        if (in.t != JV_FLOAT) return in.t == JV_BOOL ? jv_int(in.u.b) : in;
        if (!isfinite(x)) return in;
        if (prec >= 0 && prec <= 300) {
            /* printf rounds the exact binary value half-to-even, as Python's round() does */
            char buf[512];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            return jv_float(strtod(buf, NULL));
        }
        return jv_float(nearbyint(x * p) / p);
    }
    if (!strcmp(method, "ceil")) return jv_float(ceil(x * p) / p);
    if (!strcmp(method, "floor")) return jv_float(floor(x * p) / p);
    jz_fail(c, a->at, "round: method must be common, ceil or floor");
}

static jv do_truncate(jctx *c, const fargs *a, jv in) {
    if (in.t != JV_STR) {   /* jinja2 only measures len(); short sequences come back unchanged */
        if (in.t == JV_UNDEF) return in;
        if (in.t != JV_LIST && in.t != JV_DICT) jz_fail(c, a->at, "object of type '%s' has no len()", jv_type_name(in));
    }
    jv s = in.t == JV_STR ? in : jv_str(c, in);
    int64_t length = arg_int(c, a, 0, "length", 255);
    int killwords = arg_bool(a, 1, "killwords", 0);
    jv end = arg(a, 2, "end");
    if (!has(end)) end = jv_cstr("...");
    end = jv_str(c, end);
    int64_t leeway = arg_int(c, a, 3, "leeway", 5);
    int64_t len = in.t == JV_STR ? (int64_t)jz_utf8_len(s.u.s, s.n) : (int64_t)(in.t == JV_LIST ? in.u.l->n : in.u.d->n);
    int64_t endlen = (int64_t)jz_utf8_len(end.u.s, end.n);
    if (length < endlen) jz_fail(c, a->at, "truncate: length must be >= len(end)");
    if (leeway < 0) jz_fail(c, a->at, "truncate: leeway must be >= 0");
    if (len <= length + leeway) return in;
    if (in.t != JV_STR) jz_fail(c, a->at, "truncate: expected a string, not %s", jv_type_name(in));
    int64_t keep = length - endlen;
    size_t cut = 0;
    for (int64_t k = 0; k < keep && cut < s.n; k++) { int32_t cp; cut += jz_utf8_dec(s.u.s + cut, s.n - cut, &cp); }
    jv head = jv_strn(s.u.s, cut);
    if (!killwords) {
        const char *sp = NULL;
        for (size_t i = head.n; i-- > 0;) if (head.u.s[i] == ' ') { sp = head.u.s + i; break; }
        if (sp) head.n = (size_t)(sp - head.u.s);
    }
    return jz_binop(c, a->at, OP_ADD, head, end);
}

jv jz_filter(jctx *c, const jnode *at, const char *name, jv in, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    fargs A = { args, nargs, kwn, kwv, nkw, at, name }, *a = &A;
#define IS(s) (!strcmp(name, s))
    if (IS("tojson")) return do_tojson(c, a, in);
    if (IS("trim")) return jz_str_strip(sstr(c, in), arg(a, 0, "chars"), 3);
    if (IS("length") || IS("count")) return jv_int((int64_t)seq_len(c, at, in));
    if (IS("string")) return sstr(c, in);
    if (IS("safe")) return in.t == JV_STR ? in : sstr(c, in);
    if (IS("upper")) return jz_str_upper(c, sstr(c, in));
    if (IS("lower")) return jz_str_lower(c, sstr(c, in));
    if (IS("capitalize")) return jz_str_capitalize(c, sstr(c, in));
    if (IS("title")) return jz_str_title_filter(c, sstr(c, in));
    if (IS("default") || IS("d")) {
        jv dv = arg(a, 0, "default_value");
        if (!has(dv)) dv = jv_strn("", 0);
        int boolean = arg_bool(a, 1, "boolean", 0);
        if (in.t == JV_UNDEF || (boolean && !jv_truthy(in))) return dv;
        return in;
    }
    if (IS("items")) {
        if (in.t == JV_UNDEF) return jv_list_new(c, 0);
        if (in.t != JV_DICT && in.t != JV_NS) jz_fail(c, at, "Can only get item pairs from a mapping.");
        jv out = jv_list_new(c, in.u.d->n);
        for (size_t i = 0; i < in.u.d->n; i++) jv_list_push(c, out, mktuple2(c, in.u.d->k[i], in.u.d->v[i]));
        return as_lazy(out, JL_GEN);
    }
    if (IS("list")) {
        jv l = jv_iterable_to_list(c, at, in);
        if (l.u.l == in.u.l && in.t == JV_LIST) {   /* copy so tuples become lists */
            jv out = jv_list_new(c, l.u.l->n);
            for (size_t i = 0; i < l.u.l->n; i++) jv_list_push(c, out, l.u.l->v[i]);
            return out;
        }
        return l;
    }
    if (IS("join")) {
        jv items = jv_iterable_to_list(c, at, in);
        jv sep = arg(a, 0, "d");
        jv attr = arg(a, 1, "attribute");
        sep = has(sep) ? jv_str(c, sep) : jv_strn("", 0);
        jsb b; jsb_init(&b, c);
        for (size_t i = 0; i < items.u.l->n; i++) {
            if (i) jsb_put(&b, sep.u.s, sep.n);
            jv v = items.u.l->v[i];
            if (has(attr)) v = attr_path(c, at, v, attr);
            jv_to_str(c, &b, v);
        }
        return jsb_value(&b);
    }
    if (IS("first")) {
        if (in.t == JV_DICT || in.t == JV_NS || in.t == JV_STR || in.t == JV_LIST || in.t == JV_UNDEF) {
            jv l = jv_iterable_to_list(c, at, in);
            return l.u.l->n ? l.u.l->v[0] : jv_undef(NULL);
        }
        jz_fail(c, at, "'%s' object is not iterable", jv_type_name(in));
    }
    if (IS("last")) {
        if (in.t == JV_NS || (in.t == JV_LIST && (in.u.l->lazy == JL_GEN || in.u.l->lazy == JL_REVITER)))
            jz_fail(c, at, "'%s' object is not reversible", jv_type_name(in));
        jv l = jv_iterable_to_list(c, at, in);
        return l.u.l->n ? l.u.l->v[l.u.l->n - 1] : jv_undef(NULL);
    }
    if (IS("reverse")) {
        if (in.t == JV_STR) {
            jv l = jv_iterable_to_list(c, at, in);
            jsb b; jsb_init(&b, c);
            for (size_t i = l.u.l->n; i-- > 0;) jsb_put(&b, l.u.l->v[i].u.s, l.u.l->v[i].n);
            return jsb_value(&b);
        }
        jv l = jv_iterable_to_list(c, at, in);
        jv out = jv_list_new(c, l.u.l->n);
        for (size_t i = l.u.l->n; i-- > 0;) jv_list_push(c, out, l.u.l->v[i]);
        /* reversed(list) is an iterator; a generator is first turned into a list */
        return (in.t == JV_LIST && !in.u.l->lazy && !in.u.l->tuple) ? as_lazy(out, JL_REVITER) : out;
    }
    if (IS("selectattr")) return select_impl(c, a, in, 1, 0);
    if (IS("rejectattr")) return select_impl(c, a, in, 1, 1);
    if (IS("select")) return select_impl(c, a, in, 0, 0);
    if (IS("reject")) return select_impl(c, a, in, 0, 1);
    if (IS("map")) {
        jv items = jv_iterable_to_list(c, at, in);
        jv out = jv_list_new(c, items.u.l->n);
        jv attr = arg(a, -1, "attribute");
        if (has(attr)) {
            jv dflt = arg(a, -1, "default");
            for (size_t i = 0; i < items.u.l->n; i++) {
                jv v = attr_path(c, at, items.u.l->v[i], attr);
                if (v.t == JV_UNDEF && has(dflt)) v = dflt;
                jv_list_push(c, out, v);
            }
            return as_lazy(out, JL_GEN);
        }
        jv fname = arg(a, 0, NULL);
        if (!has(fname)) jz_fail(c, at, "map: a filter name or attribute= is required");
        need_str(c, a, fname, "filter name");
        char fn[64];
        size_t n = fname.n < sizeof fn - 1 ? fname.n : sizeof fn - 1;
        memcpy(fn, fname.u.s, n); fn[n] = 0;
        for (size_t i = 0; i < items.u.l->n; i++)
            jv_list_push(c, out, jz_filter(c, at, fn, items.u.l->v[i], args + 1, nargs - 1, kwn, kwv, nkw));
        return as_lazy(out, JL_GEN);
    }
    if (IS("indent")) return do_indent(c, a, in);
    if (IS("replace")) {
        jv s = sstr(c, in);
        jv old = jv_str(c, arg(a, 0, "old")), rep = jv_str(c, arg(a, 1, "new"));
        return jz_str_replace(c, s, old, rep, arg_int(c, a, 2, "count", -1));
    }
    if (IS("int")) {
        int64_t dflt = arg_int(c, a, 0, "default", 0), base = arg_int(c, a, 1, "base", 10), v;
        if (in.t == JV_UNDEF) jz_fail(c, at, "%s", in.u.s ? in.u.s : "undefined value");   /* int(Undefined) raises */
        if (in.t == JV_INT) return in;
        if (in.t == JV_BOOL) return jv_int(in.u.b);
        if (in.t == JV_FLOAT) return isfinite(in.u.f) ? jv_int((int64_t)in.u.f) : jv_int(dflt);
        if (in.t == JV_STR) {
            double f;
            if (parse_int(in, (int)base, &v)) return jv_int(v);
            if (parse_float(in, &f) && isfinite(f) && fabs(f) < 9.2e18) return jv_int((int64_t)f);
        }
        return jv_int(dflt);
    }
    if (IS("float")) {
        jv dv = arg(a, 0, "default");
        double f;
        if (in.t == JV_UNDEF) jz_fail(c, at, "%s", in.u.s ? in.u.s : "undefined value");
        if (in.t == JV_FLOAT) return in;
        if (in.t == JV_INT || in.t == JV_BOOL) return jv_float(jv_num(in));
        if (in.t == JV_STR && parse_float(in, &f)) return jv_float(f);
        return has(dv) ? dv : jv_float(0.0);
    }
    if (IS("abs")) {
        if (in.t == JV_INT) { if (in.u.i == INT64_MIN) jz_fail(c, at, "integer overflow"); return jv_int(in.u.i < 0 ? -in.u.i : in.u.i); }
        if (in.t == JV_BOOL) return jv_int(in.u.b);
        if (in.t == JV_FLOAT) return jv_float(fabs(in.u.f));
        jz_fail(c, at, "bad operand type for abs(): '%s'", jv_type_name(in));
    }
    if (IS("wordcount")) {
        jv s = sstr(c, in);
        int64_t words = 0; int inw = 0;
        size_t i = 0;
        while (i < s.n) {
            int32_t cp; i += jz_utf8_dec(s.u.s + i, s.n - i, &cp);
            int w = is_word_cp(cp);
            if (w && !inw) words++;
            inw = w;
        }
        return jv_int(words);
    }
    if (IS("center")) return jz_str_pad(c, sstr(c, in), arg_int(c, a, 0, "width", 80), '^', " ", 1);
    if (IS("escape") || IS("e") || IS("forceescape")) return html_escape(c, sstr(c, in));
    if (IS("pprint")) { jsb b; jsb_init(&b, c); jv_to_repr(c, &b, in); return jsb_value(&b); }
    if (IS("format")) {
        jv s = need_str(c, a, sstr(c, in), "format string");
        jv t;
        if (nkw) {
            t = jv_dict_new(c);
            for (int k = 0; k < nkw; k++) jdict_set(c, t.u.d, jv_cstr(kwn[k]), kwv[k]);
        } else {
            t = jv_list_new(c, (size_t)nargs);
            t.u.l->tuple = 1;
            for (int i = 0; i < nargs; i++) jv_list_push(c, t, args[i]);
        }
        return jz_binop(c, at, OP_MOD, s, t);
    }
    if (IS("sort")) {
        int reverse = arg_bool(a, 0, "reverse", 0), cs = arg_bool(a, 1, "case_sensitive", 0);
        jv attr = arg(a, 2, "attribute");
        jv l = jv_iterable_to_list(c, at, in);
        jv *keys = jz_alloc(c, (l.u.l->n + 1) * sizeof(jv));
        for (size_t i = 0; i < l.u.l->n; i++)
            keys[i] = sort_key_fold(c, has(attr) ? attr_path(c, at, l.u.l->v[i], attr) : l.u.l->v[i], cs);
        return sorted(c, at, l, keys, reverse);
    }
    if (IS("dictsort")) {
        if (in.t != JV_DICT && in.t != JV_NS) jz_fail(c, at, "dictsort: value must be a dict");
        int cs = arg_bool(a, 0, "case_sensitive", 0);
        jv by = arg(a, 1, "by");
        int by_value = has(by) && by.t == JV_STR && by.n == 5 && !memcmp(by.u.s, "value", 5);
        int reverse = arg_bool(a, 2, "reverse", 0);
        jv l = jv_list_new(c, in.u.d->n);
        jv *keys = jz_alloc(c, (in.u.d->n + 1) * sizeof(jv));
        for (size_t i = 0; i < in.u.d->n; i++) {
            jv_list_push(c, l, mktuple2(c, in.u.d->k[i], in.u.d->v[i]));
            keys[i] = sort_key_fold(c, by_value ? in.u.d->v[i] : in.u.d->k[i], cs);
        }
        return sorted(c, at, l, keys, reverse);
    }
    if (IS("unique")) {
        int cs = arg_bool(a, 0, "case_sensitive", 0);
        jv attr = arg(a, 1, "attribute");
        jv l = jv_iterable_to_list(c, at, in);
        jv out = jv_list_new(c, 0), seen = jv_list_new(c, 0);
        for (size_t i = 0; i < l.u.l->n; i++) {
            jv k = sort_key_fold(c, has(attr) ? attr_path(c, at, l.u.l->v[i], attr) : l.u.l->v[i], cs);
            if (jz_contains(c, at, seen, k)) continue;
            jv_list_push(c, seen, k); jv_list_push(c, out, l.u.l->v[i]);
        }
        return as_lazy(out, JL_GEN);
    }
    if (IS("max")) return minmax(c, a, in, 1);
    if (IS("min")) return minmax(c, a, in, 0);
    if (IS("sum")) {
        jv l = jv_iterable_to_list(c, at, in);
        jv attr = arg(a, 0, "attribute");
        jv acc = arg(a, 1, "start");
        if (!has(acc)) acc = jv_int(0);
        for (size_t i = 0; i < l.u.l->n; i++)
            acc = jz_binop(c, at, OP_ADD, acc, has(attr) ? attr_path(c, at, l.u.l->v[i], attr) : l.u.l->v[i]);
        return acc;
    }
    if (IS("batch")) {
        int64_t n = arg_int(c, a, 0, "linecount", 1);
        jv fill = arg(a, 1, "fill_with");
        jv l = jv_iterable_to_list(c, at, in), out = jv_list_new(c, 0), cur = jv_list_new(c, 0);
        for (size_t i = 0; i < l.u.l->n; i++) {   /* jinja2's loop, including its n <= 0 behaviour */
            if ((int64_t)cur.u.l->n == n) { jv_list_push(c, out, cur); cur = jv_list_new(c, 0); }
            jv_list_push(c, cur, l.u.l->v[i]);
        }
        if (cur.u.l->n) {
            if (has(fill) && fill.t != JV_NONE) while ((int64_t)cur.u.l->n < n) jv_list_push(c, cur, fill);
            jv_list_push(c, out, cur);
        }
        return as_lazy(out, JL_GEN);
    }
    if (IS("groupby")) {
        jv attr = arg(a, 0, "attribute");
        jv dflt = arg(a, 1, "default");
        int cs = arg_bool(a, 2, "case_sensitive", 0);
        jv l = jv_iterable_to_list(c, at, in);
        size_t n = l.u.l->n;
        jv *keys = jz_alloc(c, (n + 1) * sizeof(jv)), *raw = jz_alloc(c, (n + 1) * sizeof(jv));
        for (size_t i = 0; i < n; i++) {
            jv k = attr_path(c, at, l.u.l->v[i], attr);
            if (k.t == JV_UNDEF && has(dflt)) k = dflt;
            raw[i] = k;
            keys[i] = sort_key_fold(c, k, cs);
        }
        /* sort items and their original keys together by the folded key (stable) */
        jv pairs = jv_list_new(c, n);
        for (size_t i = 0; i < n; i++) jv_list_push(c, pairs, mktuple2(c, l.u.l->v[i], raw[i]));
        jv *sk = jz_alloc(c, (n + 1) * sizeof(jv));
        memcpy(sk, keys, n * sizeof(jv));
        jv sp = sorted(c, at, pairs, sk, 0);
        jv out = jv_list_new(c, 0);
        for (size_t i = 0; i < n;) {
            size_t j = i;
            jv grp = jv_list_new(c, 0);
            while (j < n && jv_equal(sk[j], sk[i])) { jv_list_push(c, grp, sp.u.l->v[j].u.l->v[0]); j++; }
            jv t = mktuple2(c, sp.u.l->v[i].u.l->v[1], grp);
            t.u.l->tuple = 2;   /* _GroupTuple(grouper, list) */
            jv_list_push(c, out, t);
            i = j;
        }
        return out;
    }
    if (IS("attr")) {
        jv nm = need_str(c, a, arg(a, 0, "name"), "attribute name");
        if (in.t == JV_DICT) {
            if (jz_has_method(in, nm.u.s, nm.n)) return jz_getattr(c, at, in, nm.u.s, nm.n);
            return jv_undef(NULL);
        }
        return jz_getattr(c, at, in, nm.u.s, nm.n);
    }
    if (IS("round")) return do_round(c, a, in);
    if (IS("truncate")) return do_truncate(c, a, in);
    if (IS("striptags")) {
        jv s = sstr(c, in);
        jsb b; jsb_init(&b, c);
        int intag = 0, pending_space = 0, any = 0;
        for (size_t i = 0; i < s.n; i++) {
            char ch = s.u.s[i];
            if (ch == '<') { intag = 1; continue; }
            if (intag) { if (ch == '>') intag = 0; continue; }
            if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v') { pending_space = any; continue; }
            if (pending_space) { jsb_putc(&b, ' '); pending_space = 0; }
            jsb_putc(&b, ch); any = 1;
        }
        return jsb_value(&b);
    }
    if (IS("slice")) {
        int64_t slices = arg_int(c, a, 0, "slices", 1);
        jv fill = arg(a, 1, "fill_with");
        if (slices <= 0) jz_fail(c, at, "slice: slices must be positive");
        if (slices > 1000000) jz_fail(c, at, "slice: too many slices");
        jv seq = jv_iterable_to_list(c, at, in), out = jv_list_new(c, (size_t)slices);
        int64_t length = (int64_t)seq.u.l->n, per = length / slices, extra = length % slices, offset = 0;
        for (int64_t k = 0; k < slices; k++) {
            int64_t start = offset + k * per;
            if (k < extra) offset++;
            int64_t end = offset + (k + 1) * per;
            jv part = jv_list_new(c, 0);
            for (int64_t i = start; i < end && i < length; i++) jv_list_push(c, part, seq.u.l->v[i]);
            if (has(fill) && fill.t != JV_NONE && k >= extra) jv_list_push(c, part, fill);
            jv_list_push(c, out, part);
        }
        return as_lazy(out, JL_GEN);
    }
    if (jz_is_filter_name(name, strlen(name))) jz_fail(c, at, "the '%s' filter is not supported by lmc", name);
    jz_fail(c, at, "no filter named '%s'", name);
#undef IS
}

/* ---- tests ----------------------------------------------------------------------------------- */
int jz_test(jctx *c, const jnode *at, const char *name, jv in, jv *args, int nargs) {
#define IS(s) (!strcmp(name, s))
    jv a0 = nargs > 0 ? args[0] : jv_undef(NULL);
    if (IS("defined")) return in.t != JV_UNDEF;
    if (IS("undefined")) return in.t == JV_UNDEF;
    if (IS("none")) return in.t == JV_NONE;
    if (IS("boolean")) return in.t == JV_BOOL;
    if (IS("true")) return in.t == JV_BOOL && in.u.b;
    if (IS("false")) return in.t == JV_BOOL && !in.u.b;
    if (IS("integer")) return in.t == JV_INT;
    if (IS("float")) return in.t == JV_FLOAT;
    if (IS("number")) return in.t == JV_INT || in.t == JV_FLOAT || in.t == JV_BOOL;
    if (IS("string")) return in.t == JV_STR;
    if (IS("mapping")) return in.t == JV_DICT;
    if (IS("iterable")) return in.t == JV_STR || in.t == JV_LIST || in.t == JV_DICT || in.t == JV_UNDEF;
    if (IS("sequence")) return in.t == JV_STR || (in.t == JV_LIST && !in.u.l->lazy) || in.t == JV_DICT || in.t == JV_UNDEF;
    if (IS("callable")) return in.t == JV_MACRO || in.t == JV_FUNC || in.t == JV_METHOD || in.t == JV_JOINER;
    if (IS("sameas")) {
        if (in.t != a0.t) return 0;
        if (in.t == JV_NONE || in.t == JV_UNDEF) return 1;
        if (in.t == JV_BOOL) return in.u.b == a0.u.b;
        if (in.t == JV_INT) return in.u.i == a0.u.i && in.u.i >= -5 && in.u.i <= 256;   /* CPython small ints */
        if (in.t == JV_STR) return in.u.s == a0.u.s && in.n == a0.n;
        return in.u.l == a0.u.l;
    }
    if (IS("eq") || IS("equalto") || IS("==")) return jv_equal(in, a0);
    if (IS("ne") || IS("!=")) return !jv_equal(in, a0);
    if (IS("lt") || IS("lessthan") || IS("<")) return jv_compare(c, at, in, a0) < 0;
    if (IS("le") || IS("<=")) return jv_compare(c, at, in, a0) <= 0;
    if (IS("gt") || IS("greaterthan") || IS(">")) return jv_compare(c, at, in, a0) > 0;
    if (IS("ge") || IS(">=")) return jv_compare(c, at, in, a0) >= 0;
    if (IS("in")) return jz_contains(c, at, a0, in);
    if (IS("odd") || IS("even") || IS("divisibleby")) {
        if (in.t != JV_INT && in.t != JV_BOOL && in.t != JV_FLOAT) jz_fail(c, at, "test '%s' needs a number, not %s", name, jv_type_name(in));
        if (IS("divisibleby")) {
            if (!jv_is_number(a0)) jz_fail(c, at, "divisibleby needs a number argument");
            if (jv_num(a0) == 0) jz_fail(c, at, "division by zero");
            jv m = jz_binop(c, at, OP_MOD, in, a0);
            return jv_num(m) == 0;
        }
        jv m = jz_binop(c, at, OP_MOD, in, jv_int(2));
        return IS("odd") ? jv_num(m) == 1 : jv_num(m) == 0;
    }
    if (IS("lower") || IS("upper")) {   /* str(value).islower() */
        if (in.t != JV_STR) in = sstr(c, in);
        int cased = 0;
        size_t i = 0;
        while (i < in.n) {
            int32_t cp; i += jz_utf8_dec(in.u.s + i, in.n - i, &cp);
            if (utf8proc_isupper(cp) || utf8proc_category(cp) == UTF8PROC_CATEGORY_LT) { if (IS("lower")) return 0; cased = 1; }
            else if (utf8proc_islower(cp)) { if (IS("upper")) return 0; cased = 1; }
        }
        return cased;
    }
    if (IS("escaped")) return 0;
    if (IS("filter")) return in.t == JV_STR && jz_is_filter_name(in.u.s, in.n);
    if (IS("test")) return in.t == JV_STR && jz_is_test_name(in.u.s, in.n);
    jz_fail(c, at, "no test named '%s'", name);
#undef IS
}

/* ---- methods ---------------------------------------------------------------------------------- */
static const char *const STR_METHODS[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "replace", "lower",
    "upper", "title", "capitalize", "casefold", "swapcase", "format", "count", "find", "rfind", "index", "rindex",
    "join", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "isnumeric", "isdecimal", "zfill",
    "center", "ljust", "rjust", "removeprefix", "removesuffix", "partition", "rpartition", "encode", NULL };
static const char *const DICT_METHODS[] = { "items", "keys", "values", "get", "copy", "pop", "update", "setdefault",
                                            "popitem", "clear", NULL };
static const char *const LIST_METHODS[] = { "index", "count", "copy", "append", "extend", "insert", "pop", "remove",
                                            "clear", "sort", "reverse", NULL };

static int in_list(const char *const *l, const char *name, size_t n) {
    for (int i = 0; l[i]; i++) if (strlen(l[i]) == n && !memcmp(l[i], name, n)) return 1;
    return 0;
}

int jz_has_method(jv self, const char *name, size_t n) {
    switch (self.t) {
    case JV_STR: return in_list(STR_METHODS, name, n);
    case JV_DICT: return in_list(DICT_METHODS, name, n);
    case JV_LIST: return !self.u.l->lazy && in_list(LIST_METHODS, name, n);
    default: return 0;
    }
}

static int prefix_match(jctx *c, const fargs *a, jv s, jv p, int suffix) {
    if (p.t == JV_LIST && p.u.l->tuple) {
        for (size_t i = 0; i < p.u.l->n; i++) if (prefix_match(c, a, s, p.u.l->v[i], suffix)) return 1;
        return 0;
    }
    need_str(c, a, p, "prefix");
    if (p.n > s.n) return 0;
    return memcmp(suffix ? s.u.s + s.n - p.n : s.u.s, p.u.s, p.n) == 0;
}

static int all_cp(jv s, int (*pred)(int32_t)) {
    if (!s.n) return 0;
    size_t i = 0;
    while (i < s.n) { int32_t cp; i += jz_utf8_dec(s.u.s + i, s.n - i, &cp); if (!pred(cp)) return 0; }
    return 1;
}
static int p_digit(int32_t cp) { return utf8proc_category(cp) == UTF8PROC_CATEGORY_ND || (cp >= 0x2070 && cp <= 0x2079) || cp == 0xb2 || cp == 0xb3 || cp == 0xb9; }
static int p_decimal(int32_t cp) { return utf8proc_category(cp) == UTF8PROC_CATEGORY_ND; }
static int p_numeric(int32_t cp) { int k = utf8proc_category(cp); return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO; }
static int p_alpha(int32_t cp) { int k = utf8proc_category(cp); return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO; }
static int p_alnum(int32_t cp) { return p_alpha(cp) || p_numeric(cp); }
static int p_space(int32_t cp) { return jz_is_space(cp); }

/* find sub in s[start:end] (code point indices); returns cp index or -1 */
static int64_t str_find(jctx *c, jv s, jv sub, int from_right) {
    if (sub.n > s.n) return -1;
    if (!from_right) {
        const char *f = sub.n ? memmem(s.u.s, s.n, sub.u.s, sub.n) : s.u.s;
        return f ? jz_str_cp_index(s, (size_t)(f - s.u.s)) : -1;
    }
    for (size_t p = s.n - sub.n + 1; p-- > 0;)
        if (!sub.n || memcmp(s.u.s + p, sub.u.s, sub.n) == 0) return jz_str_cp_index(s, p);
    return -1;
}

static jv str_method(jctx *c, const fargs *a, jv s, const char *m) {
#define IS(x) (!strcmp(m, x))
    if (IS("strip")) return jz_str_strip(s, arg(a, 0, "chars"), 3);
    if (IS("lstrip")) return jz_str_strip(s, arg(a, 0, "chars"), 1);
    if (IS("rstrip")) return jz_str_strip(s, arg(a, 0, "chars"), 2);
    if (IS("split") || IS("rsplit")) {
        jv sep = arg(a, 0, "sep");
        if (has(sep) && sep.t != JV_NONE) need_str(c, a, sep, "separator");
        return jz_str_split(c, a->at, s, sep, arg_int(c, a, 1, "maxsplit", -1), IS("rsplit"));
    }
    if (IS("splitlines")) return jz_str_splitlines(c, s, arg_bool(a, 0, "keepends", 0));
    if (IS("startswith") || IS("endswith")) {
        jv p = arg(a, 0, NULL);
        if (!has(p)) jz_fail(c, a->at, "%s() takes at least 1 argument", m);
        jv t = s;
        if (a->nargs > 1) {   /* start[, end] in code points */
            jv l = jv_iterable_to_list(c, a->at, s);
            int64_t st = arg_int(c, a, 1, NULL, 0), en = a->nargs > 2 ? arg_int(c, a, 2, NULL, (int64_t)l.u.l->n) : (int64_t)l.u.l->n;
            int64_t len = (int64_t)l.u.l->n;
            if (st < 0) st += len;
            if (st < 0) st = 0;
            if (en < 0) en += len;
            if (en > len) en = len;
            jsb b; jsb_init(&b, c);
            for (int64_t i = st; i < en; i++) jsb_put(&b, l.u.l->v[i].u.s, l.u.l->v[i].n);
            if (st > len) return jv_bool(0);
            t = jsb_value(&b);
        }
        return jv_bool(prefix_match(c, a, t, p, IS("endswith")));
    }
    if (IS("replace")) {
        jv old = need_str(c, a, arg(a, 0, "old"), "old"), rep = need_str(c, a, arg(a, 1, "new"), "new");
        return jz_str_replace(c, s, old, rep, arg_int(c, a, 2, "count", -1));
    }
    if (IS("lower") || IS("casefold")) return jz_str_lower(c, s);
    if (IS("upper")) return jz_str_upper(c, s);
    if (IS("swapcase")) return jz_str_swapcase(c, s);
    if (IS("title")) return jz_str_title_method(c, s);
    if (IS("capitalize")) return jz_str_capitalize(c, s);
    if (IS("format")) return jz_str_format(c, a->at, s, a->args, a->nargs, a->kwn, a->kwv, a->nkw);
    if (IS("count")) {
        jv sub = need_str(c, a, arg(a, 0, NULL), "substring");
        if (!sub.n) return jv_int((int64_t)jz_utf8_len(s.u.s, s.n) + 1);
        int64_t k = 0; size_t i = 0;
        while (i + sub.n <= s.n) {
            const char *f = memmem(s.u.s + i, s.n - i, sub.u.s, sub.n);
            if (!f) break;
            k++; i = (size_t)(f - s.u.s) + sub.n;
        }
        return jv_int(k);
    }
    if (IS("find") || IS("rfind") || IS("index") || IS("rindex")) {
        jv sub = need_str(c, a, arg(a, 0, NULL), "substring");
        int64_t r = str_find(c, s, sub, m[0] == 'r');
        if (r < 0 && (IS("index") || IS("rindex"))) jz_fail(c, a->at, "substring not found");
        return jv_int(r);
    }
    if (IS("join")) {
        jv l = jv_iterable_to_list(c, a->at, arg(a, 0, NULL));
        jsb b; jsb_init(&b, c);
        for (size_t i = 0; i < l.u.l->n; i++) {
            if (l.u.l->v[i].t != JV_STR) jz_fail(c, a->at, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l.u.l->v[i]));
            if (i) jsb_put(&b, s.u.s, s.n);
            jsb_put(&b, l.u.l->v[i].u.s, l.u.l->v[i].n);
        }
        return jsb_value(&b);
    }
    if (IS("isdigit")) return jv_bool(all_cp(s, p_digit));
    if (IS("isdecimal")) return jv_bool(all_cp(s, p_decimal));
    if (IS("isnumeric")) return jv_bool(all_cp(s, p_numeric));
    if (IS("isalpha")) return jv_bool(all_cp(s, p_alpha));
    if (IS("isalnum")) return jv_bool(all_cp(s, p_alnum));
    if (IS("isspace")) return jv_bool(all_cp(s, p_space));
    if (IS("islower") || IS("isupper")) return jv_bool(jz_test(c, a->at, m + 2, s, NULL, 0));
    if (IS("zfill")) {
        int64_t w = arg_int(c, a, 0, "width", 0), len = (int64_t)jz_utf8_len(s.u.s, s.n);
        if (w <= len) return s;
        if (w > 100000000) jz_fail(c, a->at, "zfill: width too large");
        jsb b; jsb_init(&b, c);
        size_t pre = s.n && (s.u.s[0] == '+' || s.u.s[0] == '-') ? 1 : 0;
        jsb_put(&b, s.u.s, pre);
        for (int64_t i = len; i < w; i++) jsb_putc(&b, '0');
        jsb_put(&b, s.u.s + pre, s.n - pre);
        return jsb_value(&b);
    }
    if (IS("center") || IS("ljust") || IS("rjust")) {
        jv fill = arg(a, 1, "fillchar");
        const char *f = " "; size_t fn = 1;
        if (has(fill)) { need_str(c, a, fill, "fillchar"); f = fill.u.s; fn = fill.n; }
        return jz_str_pad(c, s, arg_int(c, a, 0, "width", 0), IS("center") ? '^' : IS("ljust") ? '<' : '>', f, fn);
    }
    if (IS("removeprefix") || IS("removesuffix")) {
        jv p = need_str(c, a, arg(a, 0, NULL), "affix");
        int suf = IS("removesuffix");
        if (p.n && prefix_match(c, a, s, p, suf)) return suf ? jv_strn(s.u.s, s.n - p.n) : jv_strn(s.u.s + p.n, s.n - p.n);
        return s;
    }
    if (IS("partition") || IS("rpartition")) {
        jv sep = need_str(c, a, arg(a, 0, NULL), "separator");
        if (!sep.n) jz_fail(c, a->at, "empty separator");
        jv t = jv_list_new(c, 3); t.u.l->tuple = 1;
        const char *f = NULL;
        if (IS("partition")) f = memmem(s.u.s, s.n, sep.u.s, sep.n);
        else if (sep.n <= s.n) for (size_t p = s.n - sep.n + 1; p-- > 0;) if (!memcmp(s.u.s + p, sep.u.s, sep.n)) { f = s.u.s + p; break; }
        if (!f) {
            jv e = jv_strn("", 0);
            if (IS("partition")) { jv_list_push(c, t, s); jv_list_push(c, t, e); jv_list_push(c, t, e); }
            else { jv_list_push(c, t, e); jv_list_push(c, t, e); jv_list_push(c, t, s); }
            return t;
        }
        size_t p = (size_t)(f - s.u.s);
        jv_list_push(c, t, jv_strn(s.u.s, p)); jv_list_push(c, t, sep); jv_list_push(c, t, jv_strn(s.u.s + p + sep.n, s.n - p - sep.n));
        return t;
    }
    jz_fail(c, a->at, "str.%s() is not supported", m);
#undef IS
}

jv jz_method(jctx *c, const jnode *at, jv self, const char *m, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    fargs A = { args, nargs, kwn, kwv, nkw, at, m }, *a = &A;
    if (self.t == JV_STR) return str_method(c, a, self, m);
    if (self.t == JV_DICT) {
        jdict *d = self.u.d;
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            jv out = jv_list_new(c, d->n);
            for (size_t i = 0; i < d->n; i++)
                jv_list_push(c, out, m[0] == 'i' ? mktuple2(c, d->k[i], d->v[i]) : m[0] == 'k' ? d->k[i] : d->v[i]);
            return as_lazy(out, m[0] == 'i' ? JL_ITEMS : m[0] == 'k' ? JL_KEYS : JL_VALUES);
        }
        if (!strcmp(m, "get")) {
            jv *v = jdict_get(d, arg(a, 0, NULL));
            if (v) return *v;
            jv dv = arg(a, 1, NULL);
            return has(dv) ? dv : jv_none();
        }
        if (!strcmp(m, "copy")) {
            jv out = jv_dict_new(c);
            for (size_t i = 0; i < d->n; i++) jdict_set(c, out.u.d, d->k[i], d->v[i]);
            return out;
        }
    }
    if (self.t == JV_LIST) {
        jlist *l = self.u.l;
        if (!strcmp(m, "index")) {
            jv x = arg(a, 0, NULL);
            for (size_t i = 0; i < l->n; i++) if (jv_equal(l->v[i], x)) return jv_int((int64_t)i);
            jz_fail(c, at, "value is not in list");
        }
        if (!strcmp(m, "count")) {
            jv x = arg(a, 0, NULL); int64_t k = 0;
            for (size_t i = 0; i < l->n; i++) k += jv_equal(l->v[i], x);
            return jv_int(k);
        }
        if (!strcmp(m, "copy")) {
            jv out = jv_list_new(c, l->n);
            for (size_t i = 0; i < l->n; i++) jv_list_push(c, out, l->v[i]);
            return out;
        }
    }
    jz_fail(c, at, "access to attribute '%s' of '%s' object is unsafe (the sandbox makes values immutable)",
            m, jv_type_name(self));
}

/* ---- name tables (jinja2 3.1 builtins) ---------------------------------------------------------------- */
static const char *const FILTER_NAMES[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "items", "join", "last",
    "length", "list", "lower", "map", "max", "min", "pprint", "random", "reject", "rejectattr", "replace", "reverse",
    "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr", NULL };
static const char *const TEST_NAMES[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter", "float",
    "ge", "gt", "greaterthan", "in", "integer", "iterable", "le", "lower", "lt", "lessthan", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper", "==", "!=", "<", "<=", ">",
    ">=", NULL };

int jz_is_filter_name(const char *name, size_t n) { return in_list(FILTER_NAMES, name, n); }
int jz_is_test_name(const char *name, size_t n) { return in_list(TEST_NAMES, name, n); }

/* ---- global functions ------------------------------------------------------------------------------ */
static const char *const BUILTINS[] = { "range", "dict", "namespace", "raise_exception", "strftime_now", "cycler", "joiner", NULL };

int jz_builtin_lookup(const char *name, size_t n) {
    for (int i = 0; BUILTINS[i]; i++) if (strlen(BUILTINS[i]) == n && !memcmp(BUILTINS[i], name, n)) return i;
    return -1;
}

#define MAX_RANGE 100000   /* jinja2's sandbox limit */

jv jz_call_builtin(jctx *c, const jnode *at, int fn, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    fargs A = { args, nargs, kwn, kwv, nkw, at, BUILTINS[fn] }, *a = &A;
    switch (fn) {
    case FN_RANGE: {
        if (nkw) jz_fail(c, at, "range() takes no keyword arguments");
        if (nargs < 1 || nargs > 3) jz_fail(c, at, "range expected 1 to 3 arguments, got %d", nargs);
        for (int i = 0; i < nargs; i++)
            if (args[i].t != JV_INT && args[i].t != JV_BOOL) jz_fail(c, at, "'%s' object cannot be interpreted as an integer", jv_type_name(args[i]));
        int64_t start = 0, stop, st = 1;
        if (nargs == 1) stop = arg_int(c, a, 0, NULL, 0);
        else { start = arg_int(c, a, 0, NULL, 0); stop = arg_int(c, a, 1, NULL, 0); if (nargs == 3) st = arg_int(c, a, 2, NULL, 1); }
        if (st == 0) jz_fail(c, at, "range() arg 3 must not be zero");
        double count = st > 0 ? ceil(((double)stop - (double)start) / (double)st) : ceil(((double)start - (double)stop) / (double)-st);
        if (count > MAX_RANGE) jz_fail(c, at, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
        jv out = jv_list_new(c, count > 0 ? (size_t)count : 0);
        for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) jv_list_push(c, out, jv_int(i));
        return out;
    }
    case FN_DICT: case FN_NAMESPACE: {
        jv d = jv_dict_new(c);
        if (fn == FN_NAMESPACE) d.t = JV_NS;
        if (nargs > 1) jz_fail(c, at, "%s() takes at most 1 positional argument", BUILTINS[fn]);
        if (nargs == 1) {
            jv src = args[0];
            if (src.t == JV_DICT || src.t == JV_NS) for (size_t i = 0; i < src.u.d->n; i++) jdict_set(c, d.u.d, src.u.d->k[i], src.u.d->v[i]);
            else {
                jv l = jv_iterable_to_list(c, at, src);
                for (size_t i = 0; i < l.u.l->n; i++) {
                    jv p = jv_iterable_to_list(c, at, l.u.l->v[i]);
                    if (p.u.l->n != 2) jz_fail(c, at, "dictionary update sequence element #%zu has length %zu; 2 is required", i, p.u.l->n);
                    jdict_set(c, d.u.d, p.u.l->v[0], p.u.l->v[1]);
                }
            }
        }
        for (int k = 0; k < nkw; k++) jdict_set(c, d.u.d, jv_cstr(kwn[k]), kwv[k]);
        return d;
    }
    case FN_RAISE: {
        jv m = nargs ? jv_str(c, args[0]) : jv_strn("", 0);
        jz_fail(c, at, "%.*s", (int)(m.n > 600 ? 600 : m.n), m.u.s);
    }
    case FN_STRFTIME: {
        jv f = nargs ? args[0] : arg(a, -1, "format");
        need_str(c, a, f, "format");
        char fmt[256], out[512];
        if (f.n >= sizeof fmt) jz_fail(c, at, "strftime_now: format too long");
        memcpy(fmt, f.u.s, f.n); fmt[f.n] = 0;
        time_t now = c->lim.now ? (time_t)c->lim.now : time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        size_t k = fmt[0] ? strftime(out, sizeof out, fmt, &tmv) : 0;
        return jv_str_copy(c, out, k);
    }
    case FN_CYCLER: {
        if (!nargs) jz_fail(c, at, "cycler() needs at least one item");
        struct jcycler *cy = jz_alloc(c, sizeof *cy);
        jv l = jv_list_new(c, (size_t)nargs);
        for (int i = 0; i < nargs; i++) jv_list_push(c, l, args[i]);
        cy->items = l.u.l;
        jv v = {0}; v.t = JV_CYCLER; v.u.cy = cy;
        return v;
    }
    case FN_JOINER: {
        struct jcycler *j = jz_alloc(c, sizeof *j);
        jv sep = arg(a, 0, "sep");
        if (!has(sep)) sep = jv_cstr(", ");
        sep = jv_str(c, sep);
        j->sep = sep.u.s; j->sep_n = sep.n;
        jv v = {0}; v.t = JV_JOINER; v.u.cy = j;
        return v;
    }
    }
    jz_fail(c, at, "unknown function");
}
