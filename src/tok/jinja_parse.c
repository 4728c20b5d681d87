/* jinja_parse.c — tokens → AST (statements and expressions), and lmc_jinja_parse().
 *
 * A recursive-descent parser following jinja2's precedence: conditional expression,
 * or, and, not, comparisons, + -, ~, * / // %, **, unary, then postfix (attribute,
 * subscript/slice, call) and the filter/test chain that binds tighter than any
 * binary operator (`a|length - 1` is `(a|length) - 1`). Nesting depth is bounded.
 * The AST and its strings live in the template's arena.
 */
#include "tok/jinja_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 200

typedef struct parser {
    const jtok *t; size_t n, i;
    jz_arena *a;
    jmp_buf jb;
    char *msg; size_t msg_cap;
    int depth;
} parser;

_Noreturn static void perr(parser *P, const jtok *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void perr(parser *P, const jtok *at, const char *fmt, ...) {
    int k = snprintf(P->msg, P->msg_cap, "template:%d:%d: ", at->line, at->col);
    if (k < 0) k = 0;
    if ((size_t)k < P->msg_cap) {
        va_list ap; va_start(ap, fmt);
        vsnprintf(P->msg + k, P->msg_cap - (size_t)k, fmt, ap);
        va_end(ap);
    }
    longjmp(P->jb, 1);
}

static void *palloc(parser *P, size_t n) {
    void *p = jz_arena_alloc(P->a, n);
    if (!p) perr(P, &P->t[P->i], "out of memory");
    return p;
}

static const jtok *cur(parser *P) { return &P->t[P->i]; }
static const jtok *next(parser *P) { const jtok *t = &P->t[P->i]; if (t->kind != JT_EOF) P->i++; return t; }
static int is_op(const jtok *t, const char *op) { return t->kind == JT_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0; }
static int is_name(const jtok *t, const char *nm) { return t->kind == JT_NAME && t->n == strlen(nm) && memcmp(t->s, nm, t->n) == 0; }

static const char *tok_desc(const jtok *t, char *buf, size_t cap) {
    switch (t->kind) {
    case JT_EOF: return "end of template";
    case JT_VAR_END: return "end of print statement";
    case JT_BLOCK_END: return "end of statement block";
    case JT_VAR_BEGIN: return "begin of print statement";
    case JT_BLOCK_BEGIN: return "begin of statement block";
    case JT_TEXT: return "template data";
    case JT_STRING: return "string";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    }
}

static void expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) { char b[64]; perr(P, cur(P), "expected '%s', got %s", op, tok_desc(cur(P), b, sizeof b)); }
    next(P);
}
static void expect_kind(parser *P, int kind, const char *what) {
    if (cur(P)->kind != kind) { char b[64]; perr(P, cur(P), "expected %s, got %s", what, tok_desc(cur(P), b, sizeof b)); }
    next(P);
}
static const jtok *expect_name(parser *P) {
    if (cur(P)->kind != JT_NAME) { char b[64]; perr(P, cur(P), "expected a name, got %s", tok_desc(cur(P), b, sizeof b)); }
    return next(P);
}

static jnode *mk(parser *P, int kind, const jtok *at) {
    jnode *n = palloc(P, sizeof *n);
    n->kind = kind; n->line = at->line; n->col = at->col;
    return n;
}

/* growable node vectors in the arena */
typedef struct nvec { jnode **v; int n, cap; } nvec;
static void nv_push(parser *P, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 4;
        jnode **nn = palloc(P, (size_t)nc * sizeof *nn);
        if (v->n) memcpy(nn, v->v, (size_t)v->n * sizeof *nn);
        v->v = nn; v->cap = nc;
    }
    v->v[v->n++] = x;
}

static jnode *parse_expr(parser *P, int with_cond);
static jnode *parse_unary(parser *P, int with_filter);
static jnode *parse_or(parser *P);
static jnode *parse_postfix(parser *P, jnode *node);
static jnode *parse_filter_expr(parser *P, jnode *node);

static void enter(parser *P) { if (++P->depth > MAX_DEPTH) perr(P, cur(P), "template nesting too deep"); }
static void leave(parser *P) { P->depth--; }

/* expression list, optionally a bare tuple (a, b) */
static jnode *parse_tuple(parser *P, int explicit_parens, int with_cond) {
    const jtok *at = cur(P);
    nvec items = {0};
    int trailing_comma = 0;
    for (;;) {
        if (items.n) {
            if (!is_op(cur(P), ",")) break;
            next(P); trailing_comma = 1;
        }
        const jtok *c = cur(P);
        if (c->kind == JT_VAR_END || c->kind == JT_BLOCK_END || c->kind == JT_EOF || is_op(c, ")") ||
            (items.n && c->kind == JT_NAME && (is_name(c, "recursive") || is_name(c, "if"))))
            break;
        if (explicit_parens && items.n == 0 && is_op(c, ")")) break;
        nv_push(P, &items, parse_expr(P, with_cond));
        trailing_comma = 0;
    }
    if (items.n == 1 && !trailing_comma) return items.v[0];
    if (items.n == 0 && !explicit_parens) { char b[64]; perr(P, at, "expected an expression, got %s", tok_desc(at, b, sizeof b)); }
    jnode *t = mk(P, N_TUPLE, at);
    t->v = items.v; t->nv = items.n;
    return t;
}

static jnode *parse_primary(parser *P) {
    const jtok *t = cur(P);
    jnode *n;
    enter(P);
    switch (t->kind) {
    case JT_NAME:
        next(P);
        n = mk(P, N_LIT, t);
        if (is_name(t, "true") || is_name(t, "True")) n->lit = jv_bool(1);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = jv_bool(0);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = jv_none();
        else { n->kind = N_NAME; n->s = t->s; n->sn = t->n; }
        break;
    case JT_STRING: {
        next(P);
        size_t total = t->n, k = P->i;
        while (P->t[k].kind == JT_STRING) total += P->t[k++].n;
        char *s = palloc(P, total + 1);
        memcpy(s, t->s, t->n);
        size_t off = t->n;
        while (cur(P)->kind == JT_STRING) { const jtok *u = next(P); memcpy(s + off, u->s, u->n); off += u->n; }
        n = mk(P, N_LIT, t);
        n->lit = jv_strn(s, total);
        break;
    }
    case JT_INT: next(P); n = mk(P, N_LIT, t); n->lit = jv_int(t->i); break;
    case JT_FLOAT: next(P); n = mk(P, N_LIT, t); n->lit = jv_float(t->f); break;
    case JT_OP:
        if (is_op(t, "(")) {
            next(P);
            n = parse_tuple(P, 1, 1);
            expect_op(P, ")");
            break;
        }
        if (is_op(t, "[")) {
            next(P);
            nvec items = {0};
            while (!is_op(cur(P), "]")) {
                if (items.n) { expect_op(P, ","); if (is_op(cur(P), "]")) break; }
                nv_push(P, &items, parse_expr(P, 1));
            }
            next(P);
            n = mk(P, N_LIST, t); n->v = items.v; n->nv = items.n;
            break;
        }
        if (is_op(t, "{")) {
            next(P);
            nvec items = {0};
            while (!is_op(cur(P), "}")) {
                if (items.n) { expect_op(P, ","); if (is_op(cur(P), "}")) break; }
                nv_push(P, &items, parse_expr(P, 1));
                expect_op(P, ":");
                nv_push(P, &items, parse_expr(P, 1));
            }
            next(P);
            n = mk(P, N_DICT, t); n->v = items.v; n->nv = items.n;
            break;
        }
        /* fallthrough */
    default: {
        char b[64];
        perr(P, t, "unexpected %s", tok_desc(t, b, sizeof b));
    }
    }
    leave(P);
    return n;
}

/* call arguments after '(' up to ')': positional exprs and N_KWARG nodes */
static void parse_args(parser *P, jnode *call) {
    nvec args = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (args.n) { expect_op(P, ","); if (is_op(cur(P), ")")) break; }
        const jtok *c = cur(P);
        if (is_op(c, "*") || is_op(c, "**")) perr(P, c, "*args and **kwargs in calls are not supported");
        if (c->kind == JT_NAME && is_op(&P->t[P->i + 1], "=")) {
            next(P); next(P);
            jnode *kw = mk(P, N_KWARG, c);
            kw->s = c->s; kw->sn = c->n;
            kw->a = parse_expr(P, 1);
            nv_push(P, &args, kw);
        } else {
            for (int k = 0; k < args.n; k++)
                if (args.v[k]->kind == N_KWARG) perr(P, c, "positional argument follows keyword argument");
            nv_push(P, &args, parse_expr(P, 1));
        }
    }
    next(P);
    call->v = args.v; call->nv = args.n;
}

static jnode *parse_subscript(parser *P, jnode *node) {
    const jtok *t = next(P);
    if (is_op(t, ".")) {
        const jtok *a = cur(P);
        if (a->kind == JT_NAME) {
            next(P);
            jnode *n = mk(P, N_ATTR, a); n->a = node; n->s = a->s; n->sn = a->n;
            return n;
        }
        if (a->kind == JT_INT) {
            next(P);
            jnode *k = mk(P, N_LIT, a); k->lit = jv_int(a->i);
            jnode *n = mk(P, N_ITEM, a); n->a = node; n->b = k;
            return n;
        }
        char b[64];
        perr(P, a, "expected an attribute name after '.', got %s", tok_desc(a, b, sizeof b));
    }
    /* '[' */
    jnode *parts[3] = {0};
    int is_slice = 0, k = 0;
    for (;;) {
        if (is_op(cur(P), ":")) {
            next(P); is_slice = 1;
            if (++k > 2) perr(P, cur(P), "too many ':' in slice");
            continue;
        }
        if (is_op(cur(P), "]")) break;
        if (parts[k]) { char b[64]; perr(P, cur(P), "expected ']', got %s", tok_desc(cur(P), b, sizeof b)); }
        parts[k] = parse_expr(P, 1);
    }
    next(P);
    if (!is_slice) {
        if (!parts[0]) perr(P, t, "empty subscript");
        jnode *n = mk(P, N_ITEM, t); n->a = node; n->b = parts[0];
        return n;
    }
    jnode *n = mk(P, N_SLICE, t);
    n->a = node; n->b = parts[0]; n->c = parts[1]; n->d = parts[2];
    return n;
}

static jnode *parse_postfix(parser *P, jnode *node) {
    for (;;) {
        const jtok *c = cur(P);
        if (is_op(c, ".") || is_op(c, "[")) node = parse_subscript(P, node);
        else if (is_op(c, "(")) {
            jnode *call = mk(P, N_CALL, c);
            call->line = node->line; call->col = node->col;   /* errors point at the callee */
            call->a = node;
            parse_args(P, call);
            node = call;
        } else return node;
    }
}

static jnode *parse_filter(parser *P, jnode *node) {
    const jtok *nm = expect_name(P);
    jnode *f = mk(P, N_FILTER, nm);
    f->a = node;
    /* dotted filter names (rare) are joined with '.' */
    size_t len = nm->n; const char *s = nm->s;
    while (is_op(cur(P), ".")) {
        next(P);
        const jtok *more = expect_name(P);
        len = (size_t)(more->s + more->n - s);
    }
    f->s = s; f->sn = len;
    if (is_op(cur(P), "(")) parse_args(P, f);
    return f;
}

static jnode *parse_test(parser *P, jnode *node) {
    const jtok *at = cur(P);
    int neg = 0;
    if (is_name(cur(P), "not")) { next(P); neg = 1; }
    const jtok *nm = expect_name(P);
    jnode *t = mk(P, N_TEST, at);
    t->a = node; t->s = nm->s; t->sn = nm->n; t->flag = neg;
    const jtok *c = cur(P);
    if (is_op(c, "(")) parse_args(P, t);
    else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT ||
              is_op(c, "[") || is_op(c, "{")) &&
             !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) perr(P, c, "you cannot chain multiple tests with 'is'");
        jnode *arg = parse_postfix(P, parse_primary(P));
        t->v = palloc(P, sizeof(jnode *)); t->v[0] = arg; t->nv = 1;
    }
    return t;
}

static jnode *parse_filter_expr(parser *P, jnode *node) {
    for (;;) {
        const jtok *c = cur(P);
        if (is_op(c, "|")) { next(P); node = parse_filter(P, node); }
        else if (is_name(c, "is")) { next(P); node = parse_test(P, node); }
        else if (is_op(c, "(")) {
            jnode *call = mk(P, N_CALL, c);
            call->a = node; parse_args(P, call); node = call;
        } else return node;
    }
}

static jnode *parse_unary(parser *P, int with_filter) {
    const jtok *c = cur(P);
    jnode *node;
    enter(P);
    if (is_op(c, "-") || is_op(c, "+")) {
        next(P);
        node = mk(P, is_op(c, "-") ? N_NEG : N_POS, c);
        node->a = parse_unary(P, 0);
    } else node = parse_primary(P);
    node = parse_postfix(P, node);
    if (with_filter) node = parse_filter_expr(P, node);
    leave(P);
    return node;
}

static jnode *bin(parser *P, int kind, int op, const jtok *at, jnode *a, jnode *b) {
    jnode *n = mk(P, kind, at); n->op = op; n->a = a; n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *l = parse_unary(P, 1);
    while (is_op(cur(P), "**")) { const jtok *t = next(P); l = bin(P, N_BIN, OP_POW, t, l, parse_unary(P, 1)); }
    return l;
}
static jnode *parse_math2(parser *P) {
    jnode *l = parse_pow(P);
    for (;;) {
        const jtok *t = cur(P); int op;
        if (is_op(t, "*")) op = OP_MUL; else if (is_op(t, "/")) op = OP_DIV;
        else if (is_op(t, "//")) op = OP_FLOORDIV; else if (is_op(t, "%")) op = OP_MOD; else return l;
        next(P); l = bin(P, N_BIN, op, t, l, parse_pow(P));
    }
}
static jnode *parse_concat(parser *P) {
    jnode *l = parse_math2(P);
    while (is_op(cur(P), "~")) { const jtok *t = next(P); l = bin(P, N_BIN, OP_CONCAT, t, l, parse_math2(P)); }
    return l;
}
static jnode *parse_math1(parser *P) {
    jnode *l = parse_concat(P);
    for (;;) {
        const jtok *t = cur(P); int op;
        if (is_op(t, "+")) op = OP_ADD; else if (is_op(t, "-")) op = OP_SUB; else return l;
        next(P); l = bin(P, N_BIN, op, t, l, parse_concat(P));
    }
}
static jnode *parse_compare(parser *P) {
    jnode *l = parse_math1(P), *result = NULL;
    for (;;) {
        const jtok *t = cur(P); int op;
        if (is_op(t, "==")) op = OP_EQ; else if (is_op(t, "!=")) op = OP_NE;
        else if (is_op(t, "<")) op = OP_LT; else if (is_op(t, "<=")) op = OP_LE;
        else if (is_op(t, ">")) op = OP_GT; else if (is_op(t, ">=")) op = OP_GE;
        else if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(&P->t[P->i + 1], "in")) { op = OP_NOTIN; next(P); }
        else break;
        next(P);
        jnode *r = parse_math1(P);
        jnode *cmp = bin(P, N_CMP, op, t, l, r);
        result = result ? bin(P, N_AND, 0, t, result, cmp) : cmp;   /* a < b < c → a<b and b<c */
        l = r;
    }
    return result ? result : l;
}
static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        const jtok *t = next(P);
        enter(P);
        jnode *n = mk(P, N_NOT, t); n->a = parse_not(P);
        leave(P);
        return n;
    }
    return parse_compare(P);
}
static jnode *parse_and(parser *P) {
    jnode *l = parse_not(P);
    while (is_name(cur(P), "and")) { const jtok *t = next(P); l = bin(P, N_AND, 0, t, l, parse_not(P)); }
    return l;
}
static jnode *parse_or(parser *P) {
    jnode *l = parse_and(P);
    while (is_name(cur(P), "or")) { const jtok *t = next(P); l = bin(P, N_OR, 0, t, l, parse_and(P)); }
    return l;
}
static jnode *parse_expr(parser *P, int with_cond) {
    enter(P);
    jnode *e = parse_or(P);
    while (with_cond && is_name(cur(P), "if")) {
        const jtok *t = next(P);
        jnode *n = mk(P, N_COND, t);
        n->a = e; n->b = parse_or(P);
        if (is_name(cur(P), "else")) { next(P); n->c = parse_expr(P, 1); }
        e = n;
    }
    leave(P);
    return e;
}

/* assignment target: name, name.attr (namespace), or a tuple of names */
static jnode *parse_target(parser *P, int allow_attr) {
    const jtok *at = cur(P);
    nvec items = {0};
    int paren = 0, trailing = 0;
    if (is_op(at, "(")) { next(P); paren = 1; }
    for (;;) {
        const jtok *nm = expect_name(P);
        jnode *n = mk(P, N_NAME, nm); n->s = nm->s; n->sn = nm->n;
        if (allow_attr && !items.n && is_op(cur(P), ".")) {
            next(P);
            const jtok *attr = expect_name(P);
            jnode *a = mk(P, N_ATTR, attr); a->a = n; a->s = attr->s; a->sn = attr->n;
            return a;
        }
        nv_push(P, &items, n);
        trailing = 0;
        if (!is_op(cur(P), ",")) break;
        next(P); trailing = 1;
        if (cur(P)->kind != JT_NAME) break;
    }
    if (paren) expect_op(P, ")");
    if (items.n == 1 && !trailing && !paren) return items.v[0];
    jnode *t = mk(P, N_TUPLE, at); t->v = items.v; t->nv = items.n;
    return t;
}

static jnode *parse_body(parser *P, const char *const *ends, const jtok **end_tok);

/* Which of caller / varargs / kwargs a macro body refers to (JZ_USES_* bits): jinja2 only
 * accepts extra arguments and a caller when the body uses them. */
static int special_refs(const jnode *n, int depth) {
    if (!n || depth > 4 * MAX_DEPTH) return 0;
    int r = 0;
    if (n->kind == N_NAME) {
        if (n->sn == 6 && !memcmp(n->s, "caller", 6)) r |= JZ_USES_CALLER;
        if (n->sn == 7 && !memcmp(n->s, "varargs", 7)) r |= JZ_USES_VARARGS;
        if (n->sn == 6 && !memcmp(n->s, "kwargs", 6)) r |= JZ_USES_KWARGS;
    }
    r |= special_refs(n->a, depth + 1) | special_refs(n->b, depth + 1) | special_refs(n->c, depth + 1) | special_refs(n->d, depth + 1);
    for (int i = 0; i < n->nv; i++) r |= special_refs(n->v[i], depth + 1);
    for (int i = 0; i < n->nw; i++) r |= special_refs(n->w[i], depth + 1);
    return r;
}

static void end_block(parser *P) { expect_kind(P, JT_BLOCK_END, "end of statement block"); }

static jnode *parse_params(parser *P, int *out_n, jnode ***out_v) {
    nvec ps = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (ps.n) { expect_op(P, ","); if (is_op(cur(P), ")")) break; }
        const jtok *nm = expect_name(P);
        jnode *p = mk(P, N_PARAM, nm); p->s = nm->s; p->sn = nm->n;
        if (is_op(cur(P), "=")) { next(P); p->a = parse_expr(P, 1); }
        else for (int k = 0; k < ps.n; k++)
            if (ps.v[k]->a) perr(P, nm, "non-default argument follows default argument");
        nv_push(P, &ps, p);
    }
    next(P);
    *out_n = ps.n; *out_v = ps.v;
    return NULL;
}

/* after 'if' or 'elif' has been consumed: cond %} body, then elif/else/endif */
static jnode *parse_if(parser *P, const jtok *kw) {
    const jtok *end_tok;
    jnode *n = mk(P, N_IF, kw);
    enter(P);
    n->a = parse_expr(P, 1);
    end_block(P);
    static const char *const ends[] = { "elif", "else", "endif", NULL };
    n->b = parse_body(P, ends, &end_tok);
    if (is_name(end_tok, "elif")) {
        jnode *body = mk(P, N_BODY, end_tok);
        body->v = palloc(P, sizeof(jnode *));
        body->v[0] = parse_if(P, end_tok);   /* consumes through endif */
        body->nv = 1;
        n->c = body;
        leave(P);
        return n;
    }
    if (is_name(end_tok, "else")) {
        end_block(P);
        static const char *const ends2[] = { "endif", NULL };
        n->c = parse_body(P, ends2, &end_tok);
    }
    end_block(P);
    leave(P);
    return n;
}

static jnode *parse_statement(parser *P) {
    const jtok *kw = cur(P);
    if (kw->kind != JT_NAME) { char b[64]; perr(P, kw, "expected a tag name, got %s", tok_desc(kw, b, sizeof b)); }
    next(P);
    const jtok *end_tok;
    enter(P);
    jnode *n = NULL;
    if (is_name(kw, "if")) {
        n = parse_if(P, kw);
    } else if (is_name(kw, "for")) {
        n = mk(P, N_FOR, kw);
        n->a = parse_target(P, 0);
        if (!is_name(cur(P), "in")) { char b[64]; perr(P, cur(P), "expected 'in', got %s", tok_desc(cur(P), b, sizeof b)); }
        next(P);
        n->b = parse_tuple(P, 0, 0);
        if (is_name(cur(P), "if")) { next(P); n->c = parse_expr(P, 1); }
        if (is_name(cur(P), "recursive")) { next(P); n->flag = 1; }
        end_block(P);
        static const char *const ends[] = { "else", "endfor", NULL };
        n->d = parse_body(P, ends, &end_tok);
        if (is_name(end_tok, "else")) {
            end_block(P);
            static const char *const ends2[] = { "endfor", NULL };
            jnode *eb = parse_body(P, ends2, &end_tok);
            n->w = palloc(P, sizeof(jnode *)); n->w[0] = eb; n->nw = 1;
        }
        end_block(P);
    } else if (is_name(kw, "set")) {
        jnode *target = parse_target(P, 1);
        if (is_op(cur(P), "=")) {
            next(P);
            n = mk(P, N_SET, kw);
            n->a = target; n->b = parse_tuple(P, 0, 1);
            end_block(P);
        } else {
            n = mk(P, N_SETBLOCK, kw);
            n->a = target;
            nvec fs = {0};
            while (is_op(cur(P), "|")) { next(P); nv_push(P, &fs, parse_filter(P, NULL)); }
            n->w = fs.v; n->nw = fs.n;
            end_block(P);
            static const char *const ends[] = { "endset", NULL };
            n->b = parse_body(P, ends, &end_tok);
            end_block(P);
        }
    } else if (is_name(kw, "macro")) {
        n = mk(P, N_MACRO, kw);
        const jtok *nm = expect_name(P);
        n->s = nm->s; n->sn = nm->n;
        parse_params(P, &n->nw, &n->w);
        end_block(P);
        static const char *const ends[] = { "endmacro", NULL };
        n->b = parse_body(P, ends, &end_tok);
        n->flag = special_refs(n->b, 0);
        if (cur(P)->kind == JT_NAME) next(P);   /* optional name after endmacro */
        end_block(P);
    } else if (is_name(kw, "call")) {
        n = mk(P, N_CALLBLOCK, kw);
        if (is_op(cur(P), "(")) parse_params(P, &n->nw, &n->w);
        n->a = parse_expr(P, 1);
        if (n->a->kind != N_CALL) perr(P, kw, "expected a call after 'call'");
        end_block(P);
        static const char *const ends[] = { "endcall", NULL };
        n->b = parse_body(P, ends, &end_tok);
        n->flag = special_refs(n->b, 0);
        end_block(P);
    } else if (is_name(kw, "filter")) {
        n = mk(P, N_FILTERBLOCK, kw);
        nvec fs = {0};
        nv_push(P, &fs, parse_filter(P, NULL));
        while (is_op(cur(P), "|")) { next(P); nv_push(P, &fs, parse_filter(P, NULL)); }
        n->w = fs.v; n->nw = fs.n;
        end_block(P);
        static const char *const ends[] = { "endfilter", NULL };
        n->b = parse_body(P, ends, &end_tok);
        end_block(P);
    } else if (is_name(kw, "with")) {
        n = mk(P, N_WITH, kw);
        nvec as = {0};
        while (cur(P)->kind != JT_BLOCK_END) {
            if (as.n) expect_op(P, ",");
            jnode *set = mk(P, N_SET, cur(P));
            set->a = parse_target(P, 0);
            expect_op(P, "=");
            set->b = parse_expr(P, 1);
            nv_push(P, &as, set);
        }
        n->w = as.v; n->nw = as.n;
        end_block(P);
        static const char *const ends[] = { "endwith", NULL };
        n->b = parse_body(P, ends, &end_tok);
        end_block(P);
    } else if (is_name(kw, "generation")) {
        end_block(P);
        static const char *const ends[] = { "endgeneration", NULL };
        n = parse_body(P, ends, &end_tok);
        end_block(P);
    } else if (is_name(kw, "break") || is_name(kw, "continue")) {
        n = mk(P, is_name(kw, "break") ? N_BREAK : N_CONTINUE, kw);
        end_block(P);
    } else {
        perr(P, kw, "unknown tag '%.*s'", (int)(kw->n > 40 ? 40 : kw->n), kw->s);
    }
    leave(P);
    return n;
}

/* Parse until a block tag whose name is in `ends` (NULL = until EOF). *end_tok is that name
 * token (already consumed). */
static jnode *parse_body(parser *P, const char *const *ends, const jtok **end_tok) {
    const jtok *start = cur(P);
    jnode *body = mk(P, N_BODY, start);
    nvec items = {0};
    enter(P);
    for (;;) {
        const jtok *t = cur(P);
        if (t->kind == JT_EOF) {
            if (ends) {
                int last = 0;
                while (ends[last + 1]) last++;
                perr(P, t, "unexpected end of template, expected '%s' (block opened at line %d)", ends[last], start->line);
            }
            break;
        }
        if (t->kind == JT_TEXT) {
            next(P);
            jnode *x = mk(P, N_TEXT, t); x->lit = jv_strn(t->s, t->n);
            nv_push(P, &items, x);
        } else if (t->kind == JT_VAR_BEGIN) {
            next(P);
            jnode *x = mk(P, N_OUTPUT, t);
            x->a = parse_tuple(P, 0, 1);
            expect_kind(P, JT_VAR_END, "end of print statement");
            nv_push(P, &items, x);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            next(P);
            const jtok *nm = cur(P);
            int is_end = 0;
            if (ends) for (int k = 0; ends[k]; k++) if (is_name(nm, ends[k])) is_end = 1;
            if (is_end) { next(P); *end_tok = nm; break; }
            if (nm->kind == JT_NAME && (nm->n >= 3 && (memcmp(nm->s, "end", 3) == 0 || is_name(nm, "else") || is_name(nm, "elif"))))
                perr(P, nm, "unexpected '%.*s'", (int)(nm->n > 40 ? 40 : nm->n), nm->s);
            if (nm->kind == JT_NAME && (is_name(nm, "else") || is_name(nm, "elif")))
                perr(P, nm, "unexpected '%.*s'", (int)nm->n, nm->s);
            nv_push(P, &items, parse_statement(P));
        } else {
            char b[64];
            perr(P, t, "unexpected %s", tok_desc(t, b, sizeof b));
        }
    }
    leave(P);
    body->v = items.v; body->nv = items.n;
    return body;
}

/* jinja2 rejects unknown filter and test names when compiling, except inside an `if`
 * (its test and branches) or a conditional expression, where the error waits for run
 * time; a for/macro/call/filter/set block or with body starts a strict scope again. */
static void check_names(parser *P, const jnode *n, int soft, int depth) {
    if (!n || depth > 8 * MAX_DEPTH) return;
    if (!soft && n->kind == N_FILTER && !jz_is_filter_name(n->s, n->sn)) {
        jtok at = { .line = n->line, .col = n->col };
        perr(P, &at, "no filter named '%.*s'", (int)(n->sn > 60 ? 60 : n->sn), n->s);
    }
    if (!soft && n->kind == N_TEST && !jz_is_test_name(n->s, n->sn)) {
        jtok at = { .line = n->line, .col = n->col };
        perr(P, &at, "no test named '%.*s'", (int)(n->sn > 60 ? 60 : n->sn), n->s);
    }
    int inner = soft;
    switch (n->kind) {
    case N_IF: case N_COND: soft = inner = 1; break;
    case N_FOR:   /* iterable in the enclosing frame, the rest in the loop's own */
        check_names(P, n->b, soft, depth + 1);
        check_names(P, n->a, 0, depth + 1); check_names(P, n->c, 0, depth + 1); check_names(P, n->d, 0, depth + 1);
        for (int i = 0; i < n->nw; i++) check_names(P, n->w[i], soft, depth + 1);
        return;
    case N_MACRO: case N_SETBLOCK: case N_FILTERBLOCK: inner = 0; soft = 0; break;
    case N_CALLBLOCK: check_names(P, n->a, soft, depth + 1); soft = inner = 0;
        check_names(P, n->b, 0, depth + 1);
        for (int i = 0; i < n->nw; i++) check_names(P, n->w[i], 0, depth + 1);
        return;
    case N_WITH:
        for (int i = 0; i < n->nw; i++) check_names(P, n->w[i], soft, depth + 1);
        check_names(P, n->b, 0, depth + 1);
        return;
    default: break;
    }
    check_names(P, n->a, soft, depth + 1); check_names(P, n->b, inner, depth + 1);
    check_names(P, n->c, inner, depth + 1); check_names(P, n->d, inner, depth + 1);
    for (int i = 0; i < n->nv; i++) check_names(P, n->v[i], inner, depth + 1);
    for (int i = 0; i < n->nw; i++) check_names(P, n->w[i], inner, depth + 1);
}

int jz_parse(const jtok *toks, size_t n, jz_arena *a, jnode **root, char *msg, size_t msg_cap) {
    parser P = { .t = toks, .n = n, .a = a, .msg = msg, .msg_cap = msg_cap };
    if (setjmp(P.jb)) return -1;
    const jtok *end;
    *root = parse_body(&P, NULL, &end);
    check_names(&P, *root, 0, 0);
    return 0;
}

lmc_status lmc_jinja_parse(const char *source, size_t len, lmc_jinja_template **out) {
    *out = NULL;
    if (!source && len) return lmc_fail(LMC_ERR_ARG, "jinja: NULL source");
    lmc_jinja_template *t = calloc(1, sizeof *t);
    char *src = malloc(len + 1);
    if (!t || !src) { free(t); free(src); return lmc_fail(LMC_ERR_NOMEM, "jinja: out of memory"); }
    /* jinja2 normalizes \r\n and \r to \n and drops one trailing newline */
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') { src[k++] = '\n'; if (i + 1 < len && source[i + 1] == '\n') i++; }
        else src[k++] = source[i];
    }
    if (k && src[k - 1] == '\n') k--;
    src[k] = 0;
    t->src = src;
    char msg[512] = {0};
    jlex_out lx;
    if (jz_lex(src, k, &t->arena, &lx, msg, sizeof msg) < 0 || jz_parse(lx.toks, lx.n, &t->arena, &t->root, msg, sizeof msg) < 0) {
        lmc_jinja_free(t);
        return lmc_fail(LMC_ERR_FORMAT, "%s", msg);
    }
    *out = t;
    return LMC_OK;
}

void lmc_jinja_free(lmc_jinja_template *t) {
    if (!t) return;
    jz_arena_free(&t->arena);
    free(t->src);
    free(t);
}
