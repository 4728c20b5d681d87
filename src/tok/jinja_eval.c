/* jinja_eval.c — executes a parsed template: scopes, statements, expressions, calls,
 * macros, and lmc_jinja_render().
 *
 * Scoping follows jinja2: `for`, macros and `with` open a scope; `set` writes to the
 * innermost scope (so a set inside a loop is invisible after it — use namespace());
 * reads fall back through enclosing scopes, then the render context, then the global
 * functions. Undefined values print as "", are falsy and iterate as empty; attribute or
 * item access on them, calling them, or arithmetic with them is an error.
 */
#include "tok/jinja_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SIG_NONE, SIG_BREAK, SIG_CONTINUE };

void jz_fail(jctx *c, const jnode *node, const char *fmt, ...) {
    int k = node ? snprintf(c->msg, sizeof c->msg, "template:%d:%d: ", node->line, node->col)
                 : snprintf(c->msg, sizeof c->msg, "template: ");
    if (k < 0) k = 0;
    if ((size_t)k < sizeof c->msg) {
        va_list ap; va_start(ap, fmt);
        vsnprintf(c->msg + k, sizeof c->msg - (size_t)k, fmt, ap);
        va_end(ap);
    }
    c->err = LMC_ERR_FORMAT;
    longjmp(*c->jb, 1);
}

static void step(jctx *c, const jnode *n) {
    if (++c->steps > c->lim.max_steps) jz_fail(c, n, "template exceeded the step limit (%lld)", c->lim.max_steps);
}

static void emit(jctx *c, const jnode *at, const char *s, size_t n) {
    if (c->sink->n + n > c->lim.max_output) jz_fail(c, at, "output exceeds the limit of %zu bytes", c->lim.max_output);
    jsb_put(c->sink, s, n);
}

/* "'x' is undefined" style messages are carried by undefined values */
static jv undef_msg(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static jv undef_msg(jctx *c, const char *fmt, ...) {
    char buf[256];
    va_list ap; va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    jv s = jv_str_copy(c, buf, strlen(buf));
    return jv_undef(s.u.s);
}

_Noreturn static void fail_undef(jctx *c, const jnode *at, jv u) {
    jz_fail(c, at, "%s", u.u.s ? u.u.s : "undefined value");
}

/* ---- scopes -------------------------------------------------------------------- */
static jscope *scope_new(jctx *c, jscope *parent) {
    jscope *s = jz_alloc(c, sizeof *s);
    s->parent = parent;
    return s;
}
static void scope_set(jctx *c, jscope *s, const char *name, size_t n, jv v) {
    jv *slot = jdict_get_str(&s->vars, name, n);
    if (slot) { *slot = v; return; }
    jdict_set(c, &s->vars, jv_strn(name, n), v);
}
static jv lookup(jctx *c, jscope *s, const char *name, size_t n) {
    for (; s; s = s->parent) {
        jv *v = jdict_get_str(&s->vars, name, n);
        if (v) return *v;
    }
    int fn = jz_builtin_lookup(name, n);
    if (fn >= 0) { jv v = {0}; v.t = JV_FUNC; v.u.fn = fn; return v; }
    return undef_msg(c, "'%.*s' is undefined", (int)(n > 100 ? 100 : n), name);
}

/* ---- attribute / item access ------------------------------------------------------ */
static jv bound(jctx *c, jv self, const char *name, size_t n) {
    jmethod *m = jz_alloc(c, sizeof *m);
    char *nm = jz_alloc(c, n + 1);
    memcpy(nm, name, n);
    m->self = self; m->name = nm;
    jv v = {0}; v.t = JV_METHOD; v.u.bm = m;
    return v;
}

static int name_is(const char *s, size_t n, const char *lit) { return strlen(lit) == n && memcmp(s, lit, n) == 0; }

static jv loop_attr(jctx *c, const jnode *at, jv lv, const char *name, size_t n) {
    jloop *L = lv.u.loop;
    int64_t len = (int64_t)L->items->n, i = (int64_t)L->idx;
    if (name_is(name, n, "index")) return jv_int(i + 1);
    if (name_is(name, n, "index0")) return jv_int(i);
    if (name_is(name, n, "revindex")) return jv_int(len - i);
    if (name_is(name, n, "revindex0")) return jv_int(len - i - 1);
    if (name_is(name, n, "first")) return jv_bool(i == 0);
    if (name_is(name, n, "last")) return jv_bool(i == len - 1);
    if (name_is(name, n, "length")) return jv_int(len);
    if (name_is(name, n, "depth")) return jv_int(L->depth);
    if (name_is(name, n, "depth0")) return jv_int(L->depth - 1);
    if (name_is(name, n, "previtem"))
        return i > 0 ? L->items->v[i - 1] : undef_msg(c, "there is no previous item");
    if (name_is(name, n, "nextitem"))
        return i + 1 < len ? L->items->v[i + 1] : undef_msg(c, "there is no next item");
    if (name_is(name, n, "cycle") || name_is(name, n, "changed")) return bound(c, lv, name, n);
    return undef_msg(c, "'LoopContext' object has no attribute '%.*s'", (int)(n > 100 ? 100 : n), name);
}

jv jz_getattr(jctx *c, const jnode *at, jv obj, const char *name, size_t n) {
    int nn = (int)(n > 100 ? 100 : n);
    switch (obj.t) {
    case JV_UNDEF: fail_undef(c, at, obj);
    case JV_DICT: {
        if (jz_has_method(obj, name, n)) return bound(c, obj, name, n);
        jv *v = jdict_get_str(obj.u.d, name, n);
        if (v) return *v;
        return undef_msg(c, "'dict object' has no attribute '%.*s'", nn, name);
    }
    case JV_NS: {
        jv *v = jdict_get_str(obj.u.d, name, n);
        if (v) return *v;
        return undef_msg(c, "'Namespace' object has no attribute '%.*s'", nn, name);
    }
    case JV_LOOP: return loop_attr(c, at, obj, name, n);
    case JV_LIST:
        if (obj.u.l->tuple == 2 && name_is(name, n, "grouper")) return obj.u.l->v[0];
        if (obj.u.l->tuple == 2 && name_is(name, n, "list")) return obj.u.l->v[1];
        if (jz_has_method(obj, name, n)) return bound(c, obj, name, n);
        break;
    case JV_CYCLER:
        if (name_is(name, n, "current")) return obj.u.cy->items->v[obj.u.cy->pos];
        if (name_is(name, n, "next") || name_is(name, n, "reset")) return bound(c, obj, name, n);
        break;
    default:
        if (jz_has_method(obj, name, n)) return bound(c, obj, name, n);
        if (obj.t == JV_INT && name_is(name, n, "real")) return obj;
        if (obj.t == JV_FLOAT && name_is(name, n, "real")) return obj;
        break;
    }
    if (obj.t == JV_NONE) return undef_msg(c, "'None' has no attribute '%.*s'", nn, name);
    return undef_msg(c, "'%s object' has no attribute '%.*s'", jv_type_name(obj), nn, name);
}

jv jz_getitem(jctx *c, const jnode *at, jv obj, jv key) {
    switch (obj.t) {
    case JV_UNDEF: fail_undef(c, at, obj);
    case JV_LIST:
        if (obj.u.l->lazy) return undef_msg(c, "'%s' object is not subscriptable", jv_type_name(obj));
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int64_t i = key.t == JV_BOOL ? key.u.b : key.u.i, len = (int64_t)obj.u.l->n;
            if (i < 0) i += len;
            if (i < 0 || i >= len) return undef_msg(c, "%s index out of range", jv_type_name(obj));
            return obj.u.l->v[i];
        }
        break;
    case JV_STR:
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int ok;
            jv r = jv_str_index(c, obj, key.t == JV_BOOL ? key.u.b : key.u.i, &ok);
            return ok ? r : undef_msg(c, "string index out of range");
        }
        break;
    case JV_DICT: {
        jv *v = jdict_get(obj.u.d, key);
        if (v) return *v;
        break;
    }
    default: break;
    }
    if (key.t == JV_STR) return jz_getattr(c, at, obj, key.u.s, key.n);
    jsb b; jsb_init(&b, c);
    jv_to_repr(c, &b, key);
    return undef_msg(c, "'%s object' has no element %.*s", jv_type_name(obj), (int)(b.n > 100 ? 100 : b.n), b.p);
}

/* Python slice semantics over a sequence of length len */
static void slice_indices(jctx *c, const jnode *at, jv start, jv stop, jv stepv, int64_t len,
                          int64_t *ps, int64_t *pe, int64_t *pstep) {
    int64_t st = 1;
    if (stepv.t != JV_UNDEF && stepv.t != JV_NONE) {
        if (stepv.t != JV_INT) jz_fail(c, at, "slice indices must be integers or None");
        st = stepv.u.i;
        if (st == 0) jz_fail(c, at, "slice step cannot be zero");
    }
    int64_t lo, hi;
    if (st > 0) { lo = 0; hi = len; } else { lo = -1; hi = len - 1; }
    int64_t s = st > 0 ? lo : hi, e = st > 0 ? hi : lo;
    if (start.t != JV_UNDEF && start.t != JV_NONE) {
        if (start.t != JV_INT) jz_fail(c, at, "slice indices must be integers or None");
        s = start.u.i;
        if (s < 0) { s += len; if (s < lo) s = lo; } else if (s > hi) s = hi;
    }
    if (stop.t != JV_UNDEF && stop.t != JV_NONE) {
        if (stop.t != JV_INT) jz_fail(c, at, "slice indices must be integers or None");
        e = stop.u.i;
        if (e < 0) { e += len; if (e < lo) e = lo; } else if (e > hi) e = hi;
    }
    *ps = s; *pe = e; *pstep = st;
}

static jv do_slice(jctx *c, const jnode *at, jv obj, jv start, jv stop, jv stepv) {
    int64_t s, e, st;
    if (obj.t == JV_UNDEF) fail_undef(c, at, obj);
    if (obj.t == JV_LIST && obj.u.l->lazy) jz_fail(c, at, "'%s' object is not subscriptable", jv_type_name(obj));
    if (obj.t == JV_LIST) {
        slice_indices(c, at, start, stop, stepv, (int64_t)obj.u.l->n, &s, &e, &st);
        jv out = jv_list_new(c, 0);
        out.u.l->tuple = obj.u.l->tuple;
        for (int64_t i = s; st > 0 ? i < e : i > e; i += st) jv_list_push(c, out, obj.u.l->v[i]);
        return out;
    }
    if (obj.t == JV_STR) {
        /* code point offsets */
        size_t len = jz_utf8_len(obj.u.s, obj.n);
        size_t *off = jz_alloc(c, (len + 1) * sizeof *off);
        size_t i = 0, k = 0;
        while (i < obj.n) { off[k++] = i; int32_t cp; i += jz_utf8_dec(obj.u.s + i, obj.n - i, &cp); }
        off[k] = obj.n;
        slice_indices(c, at, start, stop, stepv, (int64_t)len, &s, &e, &st);
        if (st == 1) return e > s ? jv_strn(obj.u.s + off[s], off[e] - off[s]) : jv_strn("", 0);
        jsb b; jsb_init(&b, c);
        for (int64_t j = s; st > 0 ? j < e : j > e; j += st) jsb_put(&b, obj.u.s + off[j], off[j + 1] - off[j]);
        return jsb_value(&b);
    }
    if (obj.t == JV_UNDEF) fail_undef(c, at, obj);
    jz_fail(c, at, "'%s' object is not subscriptable", jv_type_name(obj));
}

/* ---- arithmetic ------------------------------------------------------------------------ */
static int64_t ival(jv v) { return v.t == JV_BOOL ? v.u.b : v.u.i; }

static jv str_percent_format(jctx *c, const jnode *at, jv fmt, jv args);

static size_t grow_slot(const jctx *c, const char *p) {
    uintptr_t h = (uintptr_t)p >> 4;
    h ^= h >> 17; h *= 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)h & (c->grow_cap - 1);
    while (c->grow[i].p && c->grow[i].p != p) i = (i + 1) & (c->grow_cap - 1);
    return i;
}

static void grow_register(jctx *c, const char *p, size_t len, size_t cap) {
    if (c->grow_n * 2 >= c->grow_cap) {
        size_t ncap = c->grow_cap ? c->grow_cap * 2 : 64;
        struct jgrow *old = c->grow;
        size_t ocap = c->grow_cap;
        c->grow = jz_alloc(c, ncap * sizeof *c->grow);
        c->grow_cap = ncap;
        for (size_t i = 0; i < ocap; i++)
            if (old[i].p) c->grow[grow_slot(c, old[i].p)] = old[i];
    }
    size_t i = grow_slot(c, p);
    if (!c->grow[i].p) c->grow_n++;
    c->grow[i].p = p; c->grow[i].len = len; c->grow[i].cap = cap;
}

/* a + b for strings. Long results get spare capacity; appending to the longest value
 * of such a buffer writes in place (shorter, older values keep their bytes). */
static jv str_concat(jctx *c, const jnode *at, jv a, jv b) {
    if (a.n + b.n > c->lim.max_output) jz_fail(c, at, "string too long");
    size_t n = a.n + b.n;
    if (a.n && b.n && c->grow_cap) {
        struct jgrow *g = &c->grow[grow_slot(c, a.u.s)];
        if (g->p == a.u.s && g->len == a.n && g->cap >= n + 1) {
            char *w = (char *)a.u.s;
            memmove(w + a.n, b.u.s, b.n);
            w[n] = 0;
            g->len = n;
            return jv_strn(a.u.s, n);
        }
    }
    size_t cap = n >= 256 ? 2 * n + 1 : n + 1;
    char *p = jz_alloc(c, cap);
    if (a.n) memcpy(p, a.u.s, a.n);
    if (b.n) memcpy(p + a.n, b.u.s, b.n);
    if (cap > n + 1) grow_register(c, p, n, cap);
    return jv_strn(p, n);
}

jv jz_binop(jctx *c, const jnode *at, int op, jv a, jv b) {
    if (op == OP_CONCAT && a.t == JV_STR && b.t == JV_STR) return str_concat(c, at, a, b);
    if (op == OP_CONCAT) {
        jsb s; jsb_init(&s, c);
        jv_to_str(c, &s, a); jv_to_str(c, &s, b);
        return jsb_value(&s);
    }
    if (op == OP_MOD && a.t == JV_STR) return str_percent_format(c, at, a, b);
    if (a.t == JV_UNDEF) fail_undef(c, at, a);
    if (b.t == JV_UNDEF) fail_undef(c, at, b);
    int an = jv_is_number(a), bn = jv_is_number(b);
    if (an && bn) {
        int both_int = a.t != JV_FLOAT && b.t != JV_FLOAT;
        if (both_int) {
            int64_t x = ival(a), y = ival(b), r;
            switch (op) {
            case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto overflow; return jv_int(r);
            case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto overflow; return jv_int(r);
            case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto overflow; return jv_int(r);
            case OP_DIV: if (!y) goto zero; return jv_float((double)x / (double)y);
            case OP_FLOORDIV: {
                if (!y) goto zero;
                if (x == INT64_MIN && y == -1) goto overflow;
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
                return jv_int(q);
            }
            case OP_MOD: {
                if (!y) goto zero;
                if (y == -1) return jv_int(0);
                int64_t m = x % y;
                if (m && ((m < 0) != (y < 0))) m += y;
                return jv_int(m);
            }
            case OP_POW: {
                if (y < 0) {
                    if (x == 0) jz_fail(c, at, "0.0 cannot be raised to a negative power");
                    return jv_float(pow((double)x, (double)y));
                }
                int64_t res = 1, base = x;
                while (y) {
                    if (y & 1) { if (__builtin_mul_overflow(res, base, &res)) goto overflow; }
                    y >>= 1;
                    if (y && __builtin_mul_overflow(base, base, &base)) goto overflow;
                }
                return jv_int(res);
            }
            }
        } else {
            double x = jv_num(a), y = jv_num(b);
            switch (op) {
            case OP_ADD: return jv_float(x + y);
            case OP_SUB: return jv_float(x - y);
            case OP_MUL: return jv_float(x * y);
            case OP_DIV: if (y == 0) goto zero; return jv_float(x / y);
            case OP_FLOORDIV: if (y == 0) goto zero; return jv_float(floor(x / y));
            case OP_MOD: {
                if (y == 0) goto zero;
                double m = fmod(x, y);
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                return jv_float(m);
            }
            case OP_POW:
                if (x == 0 && y < 0) jz_fail(c, at, "0.0 cannot be raised to a negative power");
                if (x < 0 && y != floor(y)) jz_fail(c, at, "complex results are not supported");
                return jv_float(pow(x, y));
            }
        }
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) return str_concat(c, at, a, b);
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple && !a.u.l->lazy && !b.u.l->lazy) {
        jv r = jv_list_new(c, a.u.l->n + b.u.l->n);
        r.u.l->tuple = a.u.l->tuple;
        for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(c, r, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(c, r, b.u.l->v[i]);
        return r;
    }
    if (op == OP_MUL && (((a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL)) ||
                         ((b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL)))) {
        jv seq = a.t == JV_STR || a.t == JV_LIST ? a : b;
        if (seq.t == JV_LIST && seq.u.l->lazy) jz_fail(c, at, "unsupported operand type(s) for *: '%s' and 'int'", jv_type_name(seq));
        int64_t k = ival(a.t == JV_STR || a.t == JV_LIST ? b : a);
        if (k < 0) k = 0;
        size_t unit = seq.t == JV_STR ? seq.n : seq.u.l->n * sizeof(jv);
        if (!unit) k = 0;  /* '' * n and [] * n are empty: no n-times loop (n can be 10**13) */
        if (unit && (uint64_t)k > c->lim.max_output / unit) jz_fail(c, at, "repetition result too large");
        if (seq.t == JV_STR) {
            jsb s; jsb_init(&s, c);
            for (int64_t i = 0; i < k; i++) jsb_put(&s, seq.u.s, seq.n);
            return jsb_value(&s);
        }
        jv r = jv_list_new(c, 0);
        r.u.l->tuple = seq.u.l->tuple;
        for (int64_t i = 0; i < k; i++) for (size_t j = 0; j < seq.u.l->n; j++) jv_list_push(c, r, seq.u.l->v[j]);
        return r;
    }
    if (op == OP_MOD && a.t == JV_STR) return str_percent_format(c, at, a, b);
    {
        static const char *const names[] = { "+", "-", "*", "/", "//", "%", "**", "~" };
        jz_fail(c, at, "unsupported operand type(s) for %s: '%s' and '%s'", names[op], jv_type_name(a), jv_type_name(b));
    }
overflow:
    jz_fail(c, at, "integer overflow");
zero:
    jz_fail(c, at, "division by zero");
}

/* printf-style str % args (%s %r %d %i %f %e %g %x %o %c %%) */
static jv str_percent_format(jctx *c, const jnode *at, jv fmt, jv args) {
    jsb b; jsb_init(&b, c);
    size_t ai = 0;
    int is_tuple = args.t == JV_LIST && args.u.l->tuple;
    const char *s = fmt.u.s; size_t n = fmt.n;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') { jsb_putc(&b, s[i]); continue; }
        if (++i >= n) jz_fail(c, at, "incomplete format");
        if (s[i] == '%') { jsb_putc(&b, '%'); continue; }
        jv key = {0}; int has_key = 0;
        if (s[i] == '(') {
            size_t q = i + 1;
            while (q < n && s[q] != ')') q++;
            if (q >= n) jz_fail(c, at, "incomplete format key");
            if (args.t != JV_DICT) jz_fail(c, at, "format requires a mapping");
            jv *v = jdict_get_str(args.u.d, s + i + 1, q - i - 1);
            if (!v) jz_fail(c, at, "format key '%.*s' not found", (int)(q - i - 1), s + i + 1);
            key = *v; has_key = 1;
            i = q + 1;
        }
        char spec[32]; size_t k = 0;
        spec[k++] = '%';
        while (i < n && strchr("-+ #0", s[i]) && k < 10) spec[k++] = s[i++];
        while (i < n && s[i] >= '0' && s[i] <= '9' && k < 20) spec[k++] = s[i++];
        if (i < n && s[i] == '.') { spec[k++] = s[i++]; while (i < n && s[i] >= '0' && s[i] <= '9' && k < 28) spec[k++] = s[i++]; }
        if (i >= n) jz_fail(c, at, "incomplete format");
        char conv = s[i];
        jv arg;
        if (has_key) arg = key;
        else if (is_tuple) {
            if (ai >= args.u.l->n) jz_fail(c, at, "not enough arguments for format string");
            arg = args.u.l->v[ai++];
        } else {
            if (ai++ > 0) jz_fail(c, at, "not enough arguments for format string");
            arg = args;
        }
        spec[k] = 0;
        switch (conv) {
        case 's': case 'r': {
            jsb t; jsb_init(&t, c);
            if (conv == 's') jv_to_str(c, &t, arg); else jv_to_repr(c, &t, arg);
            /* width/alignment only */
            int width = 0, left = strchr(spec, '-') != NULL;
            for (const char *p = spec + 1; *p; p++) if (*p >= '1' && *p <= '9') { width = atoi(p); break; }
            size_t cps = jz_utf8_len(t.p ? t.p : "", t.n);
            if (!left) for (size_t w = cps; (int)w < width; w++) jsb_putc(&b, ' ');
            jsb_put(&b, t.p ? t.p : "", t.n);
            if (left) for (size_t w = cps; (int)w < width; w++) jsb_putc(&b, ' ');
            break;
        }
        case 'd': case 'i': case 'x': case 'X': case 'o': case 'c': {
            if (!jv_is_number(arg)) jz_fail(c, at, "%%%c format: a number is required, not %s", conv, jv_type_name(arg));
            int64_t v = arg.t == JV_FLOAT ? (int64_t)arg.u.f : ival(arg);
            if (conv == 'c') { char u[8]; size_t m = jz_utf8_enc((int32_t)v, u); jsb_put(&b, u, m); break; }
            char f2[40];
            snprintf(f2, sizeof f2, "%sll%c", spec, conv == 'i' ? 'd' : conv);
            jsb_printf(&b, f2, (long long)v);
            break;
        }
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
            if (!jv_is_number(arg)) jz_fail(c, at, "%%%c format: a real number is required, not %s", conv, jv_type_name(arg));
            char f2[40];
            snprintf(f2, sizeof f2, "%s%c", spec, conv);
            jsb_printf(&b, f2, jv_num(arg));
            break;
        }
        default:
            jz_fail(c, at, "unsupported format character '%c'", conv);
        }
    }
    if (is_tuple && ai < args.u.l->n) jz_fail(c, at, "not all arguments converted during string formatting");
    /* Python: an unused single argument is an error unless it is a mapping-like object */
    if (!is_tuple && ai == 0 && args.t != JV_DICT && args.t != JV_LIST && args.t != JV_UNDEF && args.t != JV_NS)
        jz_fail(c, at, "not all arguments converted during string formatting");
    return jsb_value(&b);
}

/* ---- calls ------------------------------------------------------------------------------------ */
static int exec_node(jctx *c, jscope *sc, const jnode *n);
static jv call_loop(jctx *c, const jnode *at, jloop *L, jv *args, int nargs);

static jv call_macro(jctx *c, const jnode *at, jmacro *m, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    if (++c->call_depth > c->lim.max_call_depth)
        jz_fail(c, at, "macro calls nested deeper than %d", c->lim.max_call_depth);
    const jnode *def = m->node;
    jscope *sc = scope_new(c, m->closure);
    int np = def->nw;
    jv varargs = jv_list_new(c, 0);
    varargs.u.l->tuple = 1;
    jv kwargs = jv_dict_new(c);
    char *set = jz_alloc(c, (size_t)np + 1);
    const char *mname = def->kind == N_MACRO ? def->s : "caller";
    int mn = def->kind == N_MACRO ? (int)def->sn : 6;
    if (nargs > np && !(def->flag & JZ_USES_VARARGS))
        jz_fail(c, at, "macro '%.*s' takes not more than %d argument(s)", mn, mname, np);
    for (int i = 0; i < nargs; i++) {
        if (i < np) { scope_set(c, sc, def->w[i]->s, def->w[i]->sn, args[i]); set[i] = 1; }
        else jv_list_push(c, varargs, args[i]);
    }
    for (int k = 0; k < nkw; k++) {
        int found = 0;
        for (int i = 0; i < np; i++)
            if (name_is(def->w[i]->s, def->w[i]->sn, kwn[k])) {
                if (set[i]) jz_fail(c, at, "macro got multiple values for argument '%s'", kwn[k]);
                scope_set(c, sc, def->w[i]->s, def->w[i]->sn, kwv[k]); set[i] = 1; found = 1;
            }
        if (!found) {
            if (!strcmp(kwn[k], "caller")) {
                if (!(def->flag & JZ_USES_CALLER))
                    jz_fail(c, at, "macro '%.*s' was invoked with a caller it does not use", mn, mname);
                scope_set(c, sc, "caller", 6, kwv[k]);
            } else if (!(def->flag & JZ_USES_KWARGS))
                jz_fail(c, at, "macro '%.*s' takes no keyword argument '%s'", mn, mname, kwn[k]);
            else jdict_set(c, kwargs.u.d, jv_cstr(kwn[k]), kwv[k]);
        }
    }
    for (int i = 0; i < np; i++) {
        if (set[i]) continue;
        jv v = def->w[i]->a ? jz_eval_in(c, sc, def->w[i]->a)
                            : undef_msg(c, "parameter '%.*s' was not provided", (int)def->w[i]->sn, def->w[i]->s);
        scope_set(c, sc, def->w[i]->s, def->w[i]->sn, v);
    }
    scope_set(c, sc, "varargs", 7, varargs);
    scope_set(c, sc, "kwargs", 6, kwargs);
    jsb out; jsb_init(&out, c);
    jsb *saved = c->sink;
    c->sink = &out;
    exec_node(c, sc, def->b);
    c->sink = saved;
    c->call_depth--;
    return jsb_value(&out);
}

static jv loop_method(jctx *c, const jnode *at, jmethod *m, jv *args, int nargs) {
    jloop *L = m->self.u.loop;
    if (!strcmp(m->name, "cycle")) {
        if (nargs == 0) jz_fail(c, at, "no items for cycling given");
        return args[L->idx % (size_t)nargs];
    }
    /* changed(*values) */
    jv cur = jv_list_new(c, (size_t)nargs);
    for (int i = 0; i < nargs; i++) jv_list_push(c, cur, args[i]);
    int changed = !L->changed_init || !jv_equal(cur, L->last_changed);
    L->changed_init = 1; L->last_changed = cur;
    return jv_bool(changed);
}

jv jz_call_value(jctx *c, const jnode *at, jv fn, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    switch (fn.t) {
    case JV_MACRO: return call_macro(c, at, fn.u.m, args, nargs, kwn, kwv, nkw);
    case JV_FUNC: return jz_call_builtin(c, at, fn.u.fn, args, nargs, kwn, kwv, nkw);
    case JV_METHOD: {
        jv self = fn.u.bm->self;
        if (self.t == JV_LOOP) return loop_method(c, at, fn.u.bm, args, nargs);
        if (self.t == JV_CYCLER) {
            struct jcycler *cy = self.u.cy;
            if (!strcmp(fn.u.bm->name, "reset")) { cy->pos = 0; return jv_none(); }
            jv v = cy->items->v[cy->pos];
            cy->pos = (cy->pos + 1) % cy->items->n;
            return v;
        }
        return jz_method(c, at, self, fn.u.bm->name, args, nargs, kwn, kwv, nkw);
    }
    case JV_LOOP: return call_loop(c, at, fn.u.loop, args, nargs);
    case JV_JOINER: {
        struct jcycler *j = fn.u.cy;
        if (!j->used) { j->used = 1; return jv_strn("", 0); }
        return jv_strn(j->sep, j->sep_n);
    }
    case JV_UNDEF: fail_undef(c, at, fn);
    default: jz_fail(c, at, "'%s' object is not callable", jv_type_name(fn));
    }
}

/* ---- expressions ------------------------------------------------------------------------------ */
typedef struct callargs { jv *args; int nargs; const char **kwn; jv *kwv; int nkw; } callargs;

static void eval_args(jctx *c, jscope *sc, const jnode *n, callargs *ca) {
    ca->args = jz_alloc(c, ((size_t)n->nv + 1) * sizeof(jv));
    ca->kwv = jz_alloc(c, ((size_t)n->nv + 1) * sizeof(jv));
    ca->kwn = jz_alloc(c, ((size_t)n->nv + 1) * sizeof(char *));
    ca->nargs = ca->nkw = 0;
    for (int i = 0; i < n->nv; i++) {
        const jnode *a = n->v[i];
        if (a->kind == N_KWARG) {
            char *nm = jz_alloc(c, a->sn + 1);
            memcpy(nm, a->s, a->sn);
            ca->kwn[ca->nkw] = nm;
            ca->kwv[ca->nkw++] = jz_eval_in(c, sc, a->a);
        } else ca->args[ca->nargs++] = jz_eval_in(c, sc, a);
    }
}

static jv apply_filter(jctx *c, jscope *sc, const jnode *f, jv in) {
    callargs ca;
    eval_args(c, sc, f, &ca);
    char name[64];
    size_t nn = f->sn < sizeof name - 1 ? f->sn : sizeof name - 1;
    memcpy(name, f->s, nn); name[nn] = 0;
    return jz_filter(c, f, name, in, ca.args, ca.nargs, ca.kwn, ca.kwv, ca.nkw);
}

jv jz_eval_in(jctx *c, jscope *sc, const jnode *n) {
    step(c, n);
    switch (n->kind) {
    case N_LIT: return n->lit;
    case N_NAME: return lookup(c, sc, n->s, n->sn);
    case N_LIST: case N_TUPLE: {
        jv l = jv_list_new(c, (size_t)n->nv);
        l.u.l->tuple = n->kind == N_TUPLE;
        for (int i = 0; i < n->nv; i++) jv_list_push(c, l, jz_eval_in(c, sc, n->v[i]));
        return l;
    }
    case N_DICT: {
        jv d = jv_dict_new(c);
        for (int i = 0; i + 1 < n->nv; i += 2) {
            jv k = jz_eval_in(c, sc, n->v[i]);
            if (k.t == JV_LIST && !k.u.l->tuple) jz_fail(c, n->v[i], "unhashable type: 'list'");
            if (k.t == JV_DICT) jz_fail(c, n->v[i], "unhashable type: 'dict'");
            jdict_set(c, d.u.d, k, jz_eval_in(c, sc, n->v[i + 1]));
        }
        return d;
    }
    case N_ATTR: return jz_getattr(c, n, jz_eval_in(c, sc, n->a), n->s, n->sn);
    case N_ITEM: {
        jv o = jz_eval_in(c, sc, n->a);
        return jz_getitem(c, n, o, jz_eval_in(c, sc, n->b));
    }
    case N_SLICE: {
        jv o = jz_eval_in(c, sc, n->a);
        jv s = n->b ? jz_eval_in(c, sc, n->b) : jv_none();
        jv e = n->c ? jz_eval_in(c, sc, n->c) : jv_none();
        jv st = n->d ? jz_eval_in(c, sc, n->d) : jv_none();
        return do_slice(c, n, o, s, e, st);
    }
    case N_CALL: {
        jv fn = jz_eval_in(c, sc, n->a);
        callargs ca;
        eval_args(c, sc, n, &ca);
        return jz_call_value(c, n, fn, ca.args, ca.nargs, ca.kwn, ca.kwv, ca.nkw);
    }
    case N_FILTER: return apply_filter(c, sc, n, jz_eval_in(c, sc, n->a));
    case N_TEST: {
        jv in = jz_eval_in(c, sc, n->a);
        callargs ca;
        eval_args(c, sc, n, &ca);
        char name[64];
        size_t nn = n->sn < sizeof name - 1 ? n->sn : sizeof name - 1;
        memcpy(name, n->s, nn); name[nn] = 0;
        int r = jz_test(c, n, name, in, ca.args, ca.nargs);
        return jv_bool(n->flag ? !r : r);
    }
    case N_NEG: case N_POS: {
        jv a = jz_eval_in(c, sc, n->a);
        if (a.t == JV_UNDEF) fail_undef(c, n, a);
        if (!jv_is_number(a)) jz_fail(c, n, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', jv_type_name(a));
        if (n->kind == N_POS) return a.t == JV_BOOL ? jv_int(a.u.b) : a;
        if (a.t == JV_FLOAT) return jv_float(-a.u.f);
        if (ival(a) == INT64_MIN) jz_fail(c, n, "integer overflow");
        return jv_int(-ival(a));
    }
    case N_NOT: return jv_bool(!jv_truthy(jz_eval_in(c, sc, n->a)));
    case N_AND: { jv a = jz_eval_in(c, sc, n->a); return jv_truthy(a) ? jz_eval_in(c, sc, n->b) : a; }
    case N_OR: { jv a = jz_eval_in(c, sc, n->a); return jv_truthy(a) ? a : jz_eval_in(c, sc, n->b); }
    case N_BIN: {
        jv a = jz_eval_in(c, sc, n->a);
        return jz_binop(c, n, n->op, a, jz_eval_in(c, sc, n->b));
    }
    case N_CMP: {
        jv a = jz_eval_in(c, sc, n->a), b = jz_eval_in(c, sc, n->b);
        switch (n->op) {
        case OP_EQ: return jv_bool(jv_equal(a, b));
        case OP_NE: return jv_bool(!jv_equal(a, b));
        case OP_LT: return jv_bool(jv_compare(c, n, a, b) < 0);
        case OP_LE: return jv_bool(jv_compare(c, n, a, b) <= 0);
        case OP_GT: return jv_bool(jv_compare(c, n, a, b) > 0);
        case OP_GE: return jv_bool(jv_compare(c, n, a, b) >= 0);
        case OP_IN: case OP_NOTIN: {
            int r = jz_contains(c, n, b, a);
            return jv_bool(n->op == OP_IN ? r : !r);
        }
        }
        break;
    }
    case N_COND:
        if (jv_truthy(jz_eval_in(c, sc, n->b))) return jz_eval_in(c, sc, n->a);
        return n->c ? jz_eval_in(c, sc, n->c) : undef_msg(c, "the inline if-expression evaluated to false and no else section was defined");
    default: break;
    }
    jz_fail(c, n, "internal error: not an expression (kind %d)", n->kind);
}

int jz_contains(jctx *c, const jnode *at, jv container, jv item) {
    switch (container.t) {
    case JV_STR: {
        if (item.t != JV_STR) jz_fail(c, at, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (!item.n) return 1;
        if (item.n > container.n) return 0;
        return memmem(container.u.s, container.n, item.u.s, item.n) != NULL;
    }
    case JV_LIST:
        for (size_t i = 0; i < container.u.l->n; i++) if (jv_equal(container.u.l->v[i], item)) return 1;
        return 0;
    case JV_DICT: case JV_NS:
        if ((item.t == JV_LIST && !item.u.l->tuple) || item.t == JV_DICT || item.t == JV_NS)
            jz_fail(c, at, "unhashable type: '%s'", jv_type_name(item));
        return jdict_get(container.u.d, item) != NULL;
    case JV_UNDEF: return 0;
    default: jz_fail(c, at, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

/* ---- statements --------------------------------------------------------------------------------- */
static void assign(jctx *c, jscope *sc, const jnode *target, jv v) {
    if (target->kind == N_NAME) {
        if (name_is(target->s, target->sn, "loop") && 0) return;
        scope_set(c, sc, target->s, target->sn, v);
        return;
    }
    if (target->kind == N_TUPLE) {
        jv l = jv_iterable_to_list(c, target, v);
        if ((int)l.u.l->n != target->nv)
            jz_fail(c, target, "%s values to unpack (expected %d, got %zu)",
                    (int)l.u.l->n > target->nv ? "too many" : "not enough", target->nv, l.u.l->n);
        for (int i = 0; i < target->nv; i++) assign(c, sc, target->v[i], l.u.l->v[i]);
        return;
    }
    if (target->kind == N_ATTR) {
        jv ns = lookup(c, sc, target->a->s, target->a->sn);
        if (ns.t != JV_NS) jz_fail(c, target, "cannot assign attribute on non-namespace object");
        jdict_set(c, ns.u.d, jv_str_copy(c, target->s, target->sn), v);
        return;
    }
    jz_fail(c, target, "cannot assign to this expression");
}

static jv capture(jctx *c, jscope *sc, const jnode *body) {
    jsb out; jsb_init(&out, c);
    jsb *saved = c->sink;
    c->sink = &out;
    exec_node(c, sc, body);
    c->sink = saved;
    return jsb_value(&out);
}

/* for over `seq` (loop.depth = depth); recursive loops call back here through loop(...) */
static int run_for(jctx *c, jscope *sc, const jnode *n, jv seq, int depth) {
    jv items = jv_iterable_to_list(c, n->b, seq);
    jscope *ls = scope_new(c, sc);
    if (n->c) {   /* filter: for x in xs if cond */
        jv kept = jv_list_new(c, items.u.l->n);
        for (size_t i = 0; i < items.u.l->n; i++) {
            assign(c, ls, n->a, items.u.l->v[i]);
            if (jv_truthy(jz_eval_in(c, ls, n->c))) jv_list_push(c, kept, items.u.l->v[i]);
        }
        items = kept;
    }
    if (items.u.l->n == 0) {
        if (n->nw) return exec_node(c, sc, n->w[0]);
        return SIG_NONE;
    }
    jloop *L = jz_alloc(c, sizeof *L);
    L->items = items.u.l;
    L->depth = depth;   /* only recursive loops nest depth in jinja2 */
    L->node = n; L->scope = sc;
    jv lv = {0}; lv.t = JV_LOOP; lv.u.loop = L;
    size_t count = items.u.l->n;
    for (size_t i = 0; i < count; i++) {
        L->idx = i;
        ls = scope_new(c, sc);   /* jinja2: assignments in the body do not survive to the next iteration */
        scope_set(c, ls, "loop", 4, lv);
        assign(c, ls, n->a, items.u.l->v[i]);
        int sig = exec_node(c, ls, n->d);
        if (sig == SIG_BREAK) break;
    }
    return SIG_NONE;
}

static int exec_for(jctx *c, jscope *sc, const jnode *n) {
    return run_for(c, sc, n, jz_eval_in(c, sc, n->b), 1);
}

/* loop(children) inside a `for ... recursive` */
static jv call_loop(jctx *c, const jnode *at, jloop *L, jv *args, int nargs) {
    if (!L->node || !L->node->flag) jz_fail(c, at, "the loop is not recursive (add 'recursive' to the for tag)");
    if (nargs != 1) jz_fail(c, at, "loop() takes exactly one argument");
    if (++c->call_depth > c->lim.max_call_depth)
        jz_fail(c, at, "recursive loop nested deeper than %d", c->lim.max_call_depth);
    jsb out; jsb_init(&out, c);
    jsb *saved = c->sink;
    c->sink = &out;
    run_for(c, L->scope, L->node, args[0], L->depth + 1);
    c->sink = saved;
    c->call_depth--;
    return jsb_value(&out);
}

static int exec_node(jctx *c, jscope *sc, const jnode *n) {
    step(c, n);
    switch (n->kind) {
    case N_BODY:
        for (int i = 0; i < n->nv; i++) {
            int sig = exec_node(c, sc, n->v[i]);
            if (sig) return sig;
        }
        return SIG_NONE;
    case N_TEXT: emit(c, n, n->lit.u.s, n->lit.n); return SIG_NONE;
    case N_OUTPUT: {
        jv v = jz_eval_in(c, sc, n->a);
        if (v.t == JV_STR) emit(c, n, v.u.s, v.n);
        else {
            jsb b; jsb_init(&b, c);
            jv_to_str(c, &b, v);
            emit(c, n, b.p ? b.p : "", b.n);
        }
        return SIG_NONE;
    }
    case N_IF:
        if (jv_truthy(jz_eval_in(c, sc, n->a))) return exec_node(c, sc, n->b);
        return n->c ? exec_node(c, sc, n->c) : SIG_NONE;
    case N_FOR: return exec_for(c, sc, n);
    case N_SET: assign(c, sc, n->a, jz_eval_in(c, sc, n->b)); return SIG_NONE;
    case N_SETBLOCK: {
        jv v = capture(c, sc, n->b);
        for (int i = 0; i < n->nw; i++) v = apply_filter(c, sc, n->w[i], v);
        assign(c, sc, n->a, v);
        return SIG_NONE;
    }
    case N_MACRO: {
        jmacro *m = jz_alloc(c, sizeof *m);
        m->node = n; m->closure = sc;
        jv v = {0}; v.t = JV_MACRO; v.u.m = m;
        scope_set(c, sc, n->s, n->sn, v);
        return SIG_NONE;
    }
    case N_CALLBLOCK: {
        jmacro *m = jz_alloc(c, sizeof *m);
        m->node = n; m->closure = sc; m->is_caller = 1;
        jv caller = {0}; caller.t = JV_MACRO; caller.u.m = m;
        const jnode *call = n->a;
        jv fn = jz_eval_in(c, sc, call->a);
        callargs ca;
        eval_args(c, sc, call, &ca);
        ca.kwn[ca.nkw] = "caller";
        ca.kwv[ca.nkw++] = caller;
        jv r = jz_call_value(c, call, fn, ca.args, ca.nargs, ca.kwn, ca.kwv, ca.nkw);
        jv s = jv_str(c, r);
        emit(c, n, s.u.s, s.n);
        return SIG_NONE;
    }
    case N_FILTERBLOCK: {
        jv v = capture(c, sc, n->b);
        for (int i = 0; i < n->nw; i++) v = apply_filter(c, sc, n->w[i], v);
        jv s = jv_str(c, v);
        emit(c, n, s.u.s, s.n);
        return SIG_NONE;
    }
    case N_WITH: {
        jscope *ws = scope_new(c, sc);
        for (int i = 0; i < n->nw; i++) assign(c, ws, n->w[i]->a, jz_eval_in(c, sc, n->w[i]->b));
        return exec_node(c, ws, n->b);
    }
    case N_BREAK: return SIG_BREAK;
    case N_CONTINUE: return SIG_CONTINUE;
    default: break;
    }
    jz_fail(c, n, "internal error: not a statement (kind %d)", n->kind);
}

/* ---- entry points ------------------------------------------------------------------------------------- */
lmc_jinja_options lmc_jinja_default_options(void) {
    lmc_jinja_options l = { .max_output = 64u << 20, .max_memory = 512u << 20, .max_steps = 50000000LL, .max_call_depth = 64 };
    return l;
}

lmc_status lmc_jinja_render_ex(const lmc_jinja_template *t, const cJSON *context, const lmc_jinja_options *lim,
                               char **out, size_t *out_len) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out) return lmc_fail(LMC_ERR_ARG, "jinja: NULL template or output");
    if (context && !cJSON_IsObject(context)) return lmc_fail(LMC_ERR_ARG, "jinja: context must be a JSON object");
    jctx *c = calloc(1, sizeof *c);
    if (!c) return lmc_fail(LMC_ERR_NOMEM, "jinja: out of memory");
    c->lim = lim ? *lim : lmc_jinja_default_options();
    c->arena.limit = c->lim.max_memory;
    jmp_buf jb;
    c->jb = &jb;
    lmc_status st = LMC_OK;
    if (setjmp(jb) == 0) {
        jsb root; jsb_init(&root, c);
        c->sink = &root;
        c->globals = scope_new(c, NULL);
        if (context)
            for (const cJSON *e = context->child; e; e = e->next)
                if (e->string) scope_set(c, c->globals, e->string, strlen(e->string), jv_from_cjson(c, e, 0));
        jscope *top = scope_new(c, c->globals);
        exec_node(c, top, t->root);
        char *res = malloc(root.n + 1);
        if (!res) st = lmc_fail(LMC_ERR_NOMEM, "jinja: out of memory");
        else {
            if (root.n) memcpy(res, root.p, root.n);
            res[root.n] = 0;
            *out = res;
            if (out_len) *out_len = root.n;
        }
    } else {
        st = lmc_fail(c->err ? c->err : LMC_ERR_FORMAT, "%s", c->msg);
    }
    jz_arena_free(&c->arena);
    free(c);
    return st;
}

lmc_status lmc_jinja_render(const lmc_jinja_template *t, const cJSON *context, char **out, size_t *out_len) {
    return lmc_jinja_render_ex(t, context, NULL, out, out_len);
}
