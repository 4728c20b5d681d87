/* jinja_int.h — types shared by the Jinja modules (not a public header).
 *
 * jinja_lex.c turns source into tokens (applying whitespace control), jinja_parse.c
 * builds the AST, jinja_value.c holds values (arena-allocated, Python semantics for
 * str/repr/json/compare), jinja_eval.c runs statements and expressions, and
 * jinja_filters.c has filters, tests, methods and global functions. Every render
 * allocates from one arena freed at the end; errors unwind with longjmp to the
 * render (or parse) entry point, so no code between needs cleanup paths.
 */
#ifndef LMC_TOK_JINJA_INT_H
#define LMC_TOK_JINJA_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/jinja.h"

/* ---- arena ---------------------------------------------------------------- */
typedef struct jz_chunk jz_chunk;
typedef struct jz_arena {
    jz_chunk *head;
    size_t used, limit;     /* bytes handed out, max allowed (0 = none) */
} jz_arena;
void *jz_arena_alloc(jz_arena *a, size_t n);   /* zeroed, 16-aligned; NULL when over limit/out of memory */
void jz_arena_free(jz_arena *a);

/* ---- values ---------------------------------------------------------------- */
typedef enum jv_type {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_NS,      /* namespace(): a dict whose attributes can be assigned */
    JV_MACRO,   /* macro or call-block caller */
    JV_FUNC,    /* global builtin function (range, dict, namespace, ...) */
    JV_METHOD,  /* bound method: self + method name */
    JV_LOOP,    /* the `loop` variable of a for */
    JV_CYCLER, JV_JOINER,
} jv_type;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jmacro jmacro;
typedef struct jmethod jmethod;
typedef struct jloop jloop;

typedef struct jv {
    uint8_t t;
    size_t n;                       /* JV_STR: byte length */
    union {
        int b; int64_t i; double f;
        const char *s;              /* JV_STR bytes (not NUL-terminated); JV_UNDEF: name or NULL */
        jlist *l; jdict *d; jmacro *m; jmethod *bm; jloop *loop; int fn;
        struct jcycler *cy;
    } u;
} jv;

/* jlist.lazy: what Python object the sequence stands for. Generators (map, select, ...)
 * and reverse iterators are always truthy and have no len(); dict views print as such. */
enum { JL_LIST = 0, JL_GEN, JL_REVITER, JL_ITEMS, JL_KEYS, JL_VALUES };
struct jlist { jv *v; size_t n, cap; int tuple; int lazy; };
struct jdict { jv *k, *v; size_t n, cap; };
struct jmethod { jv self; const char *name; };
struct jcycler { jlist *items; size_t pos; const char *sep; size_t sep_n; int used; };

/* ---- tokens ----------------------------------------------------------------- */
typedef enum jtok_kind {
    JT_EOF, JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
} jtok_kind;

typedef struct jtok {
    int kind, line, col;
    const char *s; size_t n;        /* TEXT/STRING: decoded text; NAME/OP: source span */
    int64_t i; double f;
} jtok;

/* ---- AST --------------------------------------------------------------------- */
typedef enum jn_kind {
    /* expressions */
    N_LIT, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_KWARG,
    N_FILTER, N_TEST, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_BIN, N_CMP, N_COND,
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK,
    N_FILTERBLOCK, N_WITH, N_BREAK, N_CONTINUE, N_PARAM,
} jn_kind;

/* N_MACRO / N_CALLBLOCK .flag: names the body refers to */
enum { JZ_USES_CALLER = 1, JZ_USES_VARARGS = 2, JZ_USES_KWARGS = 4 };

/* binary / comparison operators (N_BIN, N_CMP .op) */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef struct jnode jnode;
struct jnode {
    int kind, op, line, col, flag;  /* flag: N_TEST negated, N_FOR recursive, N_MACRO JZ_USES_* */
    jv lit;                         /* N_LIT value, N_TEXT text */
    const char *s; size_t sn;       /* name: N_NAME, N_ATTR, N_FILTER, N_TEST, N_KWARG, N_MACRO, N_PARAM */
    jnode *a, *b, *c, *d;
    jnode **v; int nv;              /* items / args (N_KWARG among them) / body */
    jnode **w; int nw;              /* else-body / params / filters */
};

struct lmc_jinja_template {
    char *src;                      /* normalized source copy */
    jz_arena arena;                 /* AST + decoded strings */
    jnode *root;
};

/* ---- render context --------------------------------------------------------- */
typedef struct jscope jscope;
struct jscope { jscope *parent; jdict vars; };

struct jmacro { const jnode *node; jscope *closure; const jnode *caller_body; jscope *caller_scope; int is_caller; };

struct jloop {
    jlist *items; size_t idx; int depth;
    const jnode *node; jscope *scope;       /* the for statement, for loop(...) in recursive loops */
    jv last_changed; int changed_init;
};

struct jsb;
typedef struct jctx {
    jz_arena arena;
    struct jsb *sink;                          /* where output goes (captures swap it) */
    /* strings made by + / ~ with spare capacity, by start address: appending to the
     * longest value of such a string happens in place, so `{% set s = s + x %}` in a
     * loop is linear instead of quadratic */
    struct jgrow { const char *p; size_t len, cap; } *grow;
    size_t grow_n, grow_cap;
    lmc_jinja_options lim;
    long long steps;
    int call_depth, eval_depth;
    jscope *globals;
    jmp_buf *jb;
    lmc_status err;
    char msg[768];
} jctx;

/* Errors: record "line L, column C: msg" and unwind. node may be NULL. */
_Noreturn void jz_fail(jctx *c, const jnode *node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void *jz_alloc(jctx *c, size_t n);          /* arena alloc or fail("out of memory") */

/* ---- strings ----------------------------------------------------------------- */
typedef struct jsb { jctx *c; char *p; size_t n, cap; } jsb;   /* arena-backed builder */
void jsb_init(jsb *b, jctx *c);
void jsb_put(jsb *b, const char *s, size_t n);
void jsb_puts(jsb *b, const char *s);
void jsb_putc(jsb *b, char ch);
void jsb_printf(jsb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jv jsb_value(jsb *b);

/* UTF-8 helpers: decode one code point (invalid byte → itself as U+00xx, len 1) */
size_t jz_utf8_dec(const char *s, size_t n, int32_t *cp);
size_t jz_utf8_enc(int32_t cp, char *out);
size_t jz_utf8_len(const char *s, size_t n);          /* code points */
int jz_is_space(int32_t cp);                          /* Python str.isspace */

/* ---- value helpers (jinja_value.c) -------------------------------------------- */
static inline jv jv_undef(const char *name) { jv v = {0}; v.t = JV_UNDEF; v.u.s = name; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(int b) { jv v = {0}; v.t = JV_BOOL; v.u.b = b != 0; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.u.f = f; return v; }
static inline jv jv_strn(const char *s, size_t n) { jv v = {0}; v.t = JV_STR; v.u.s = s; v.n = n; return v; }
jv jv_str_copy(jctx *c, const char *s, size_t n);
jv jv_cstr(const char *s);                              /* static/persistent C string */
jv jv_list_new(jctx *c, size_t cap);
void jv_list_push(jctx *c, jv list, jv item);
jv jv_dict_new(jctx *c);
void jdict_set(jctx *c, jdict *d, jv key, jv val);
jv *jdict_get(const jdict *d, jv key);                  /* NULL if absent */
jv *jdict_get_str(const jdict *d, const char *s, size_t n);

const char *jv_type_name(jv v);
int jv_truthy(jv v);
int jv_equal(jv a, jv b);
int jv_compare(jctx *c, const jnode *at, jv a, jv b); /* <0,0,>0; fails on incomparable */
int jv_is_number(jv v);
double jv_num(jv v);
void jv_to_str(jctx *c, jsb *b, jv v);                  /* Python str() */
void jv_to_repr(jctx *c, jsb *b, jv v);                 /* Python repr() */
jv jv_str(jctx *c, jv v);                               /* str() as a value */
void jv_format_float(double f, char *buf, size_t cap);  /* Python repr(float) */
/* json.dumps(v, ensure_ascii, indent (NULL = none), separators, sort_keys) */
void jv_to_json(jctx *c, const jnode *at, jsb *b, jv v, const char *indent, size_t indent_n,
                const char *item_sep, const char *key_sep, int sort_keys, int ensure_ascii, int level);
jv jv_from_cjson(jctx *c, const cJSON *j, int depth);
jv jv_iterable_to_list(jctx *c, const jnode *at, jv v);  /* list of items (dict → keys, str → chars) */
jv jv_str_index(jctx *c, jv s, int64_t i, int *ok);       /* code point i (negative from end) */

/* ---- evaluator (jinja_eval.c) ------------------------------------------------- */
jv jz_eval_in(jctx *c, jscope *sc, const jnode *n);
int jz_contains(jctx *c, const jnode *at, jv container, jv item);
jv jz_call_value(jctx *c, const jnode *at, jv fn, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);
jv jz_getattr(jctx *c, const jnode *at, jv obj, const char *name, size_t n);
jv jz_getitem(jctx *c, const jnode *at, jv obj, jv key);
jv jz_binop(jctx *c, const jnode *at, int op, jv a, jv b);

/* ---- filters, tests, methods, globals (jinja_filters.c) ------------------------ */
enum { FN_RANGE, FN_DICT, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_CYCLER, FN_JOINER, FN_LIPSUM_UNUSED };
jv jz_filter(jctx *c, const jnode *at, const char *name, jv in, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);
int jz_test(jctx *c, const jnode *at, const char *name, jv in, jv *args, int nargs);
int jz_has_method(jv self, const char *name, size_t n);
jv jz_method(jctx *c, const jnode *at, jv self, const char *name, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);
jv jz_call_builtin(jctx *c, const jnode *at, int fn, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);
int jz_builtin_lookup(const char *name, size_t n);       /* FN_* or -1 */
/* Names jinja2 (plus transformers' tojson) defines; unknown ones fail at parse time as in jinja2. */
int jz_is_filter_name(const char *name, size_t n);
int jz_is_test_name(const char *name, size_t n);

/* ---- lexer / parser ------------------------------------------------------------- */
typedef struct jlex_out { jtok *toks; size_t n; } jlex_out;
/* returns 0 or fills msg and returns -1 */
int jz_lex(const char *src, size_t n, jz_arena *a, jlex_out *out, char *msg, size_t msg_cap);
int jz_parse(const jtok *toks, size_t n, jz_arena *a, jnode **root, char *msg, size_t msg_cap);

#endif
