/* jschema.c — JSON Schema compiled to nodes, and the guided recognizer (see jschema.h).
 * The compiled schema owns every node (freed together) and their pattern automata; the
 * recognizer state is a fixed-size set of readings ("threads"), each with a frame per
 * open container, so trying a token is a copy of the live frames plus a feed. anyOf
 * forks a reading per alternative that may begin with the next byte; readings that
 * fail die, equal ones merge. allOf and siblings of anyOf/$ref are rewritten by
 * jsmerge.c before they are compiled; lmc_jschema_validate is in jsvalid.c.
 */
#include "jschema.h"
#include "jsmerge.h"
#include "jsonfsm.h"
#include "jsregex.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64, T_ALL = 127 };

#define MAX_NODES 20000

struct lmc_js_node {
    unsigned types;              /* allowed JSON types (T_*) */
    int n_props;
    char **names;                /* [n_props] property names */
    size_t *name_len;
    lmc_js_node **props;         /* [n_props] their schemas */
    uint64_t required;           /* bit i: names[i] is required */
    const lmc_js_node *additional; /* schema of other keys' values; NULL: no other keys */
    const lmc_js_node *items;    /* array items */
    int min_items, max_items;    /* max -1: unbounded */
    int n_enum;                  /* > 0: the value is one of these compact JSON texts */
    char **enum_text;
    size_t *enum_len;
    int min_len, max_len;        /* string length in code points (max -1: unbounded) */
    lmc_rx *rx;                  /* owned: patterns and formats a string must match (NULL: none) */
    int has_range;               /* integer bounds apply */
    int64_t lo, hi;              /* inclusive integer bounds */
    int has_frange;              /* number bounds apply (types include non-integers) */
    double flo, fhi;             /* number bounds, -inf/+inf when absent */
    uint8_t flo_ex, fhi_ex;      /* exclusive */
    uint8_t no_true, no_false;   /* not: excluded literals */
    int n_xstr;                  /* not: excluded strings (decoded, compared byte for byte) */
    char **xstr;
    size_t *xstr_len;
    int n_xnum;                  /* not: excluded numbers */
    double *xnum;
    int n_alts;                  /* > 0: anyOf/oneOf; readings run for every alternative that fits */
    int one_of;
    const lmc_js_node **alts;
};

#define RANGE_LIMIT 1000000000000000LL  /* |bound| kept below 1e15: digit arithmetic never overflows */

struct lmc_jschema {
    lmc_js_node *root;
    const cJSON *doc;            /* the schema document while compiling ($ref targets) */
    const cJSON **ref_json;      /* [n_refs] resolved $ref targets … */
    lmc_js_node **ref_node;      /* … and their nodes (a recursive schema points back to one) */
    int n_refs, cap_refs;
    lmc_js_node **all;           /* every node, for freeing */
    int n_all, cap_all;
    cJSON *scratch;              /* merged schemas made while compiling (freed after) */
    lmc_js_node any;             /* any JSON value */
};

enum { M_VALUE, M_OBJ_OPEN, M_OBJ_KEY, M_KEY, M_COLON, M_AFTER, M_STRING, M_ESC, M_HEX, M_LIT, M_ENUM, M_NUM, M_DONE };
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
static const char *const lits[3] = {"true", "false", "null"};
#define MAX_WS 2

/* ---- compiling ---- */

static void node_free(lmc_js_node *n) {
    for (int i = 0; i < n->n_props; i++) free(n->names[i]);
    for (int i = 0; i < n->n_enum; i++) free(n->enum_text[i]);
    for (int i = 0; i < n->n_xstr; i++) free(n->xstr[i]);
    free(n->names); free(n->name_len); free(n->props); free(n->enum_text); free(n->enum_len);
    free(n->xstr); free(n->xstr_len); free(n->xnum);
    lmc_rx_free(n->rx);
    free(n->alts);
    free(n);
}

void lmc_jschema_free(lmc_jschema *s) {
    if (!s) return;
    for (int i = 0; i < s->n_all; i++) node_free(s->all[i]);
    free(s->all);
    free(s->ref_json);
    free(s->ref_node);
    cJSON_Delete(s->scratch);
    free(s);
}

static lmc_status new_node(lmc_jschema *s, lmc_js_node **out) {
    if (s->n_all >= MAX_NODES) return lmc_fail(LMC_ERR_UNSUPPORTED, "the schema expands to more than %d nodes", MAX_NODES);
    if (s->n_all == s->cap_all) {
        int cap = s->cap_all ? s->cap_all * 2 : 16;
        lmc_js_node **a = realloc(s->all, (size_t)cap * sizeof *a);
        if (!a) return lmc_fail(LMC_ERR_NOMEM, "schema");
        s->all = a;
        s->cap_all = cap;
    }
    lmc_js_node *n = calloc(1, sizeof *n);
    if (!n) return lmc_fail(LMC_ERR_NOMEM, "schema");
    s->all[s->n_all++] = n;
    *out = n;
    return LMC_OK;
}

static unsigned type_bit(const char *t) {
    static const struct { const char *name; unsigned bit; } names[] = {
        {"object", T_OBJ}, {"array", T_ARR}, {"string", T_STR}, {"number", T_NUM | T_INT},
        {"integer", T_INT}, {"boolean", T_BOOL}, {"null", T_NULL}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(t, names[i].name)) return names[i].bit;
    return 0;
}

static unsigned type_bits(const cJSON *type) {
    unsigned b = 0;
    if (cJSON_IsString(type)) return type_bit(type->valuestring);
    const cJSON *t;
    if (cJSON_IsArray(type)) cJSON_ArrayForEach(t, type) if (cJSON_IsString(t)) b |= type_bit(t->valuestring);
    return b;
}

static lmc_status compile(lmc_jschema *s, const cJSON *j, int depth, const lmc_js_node **out);
static lmc_status compile_into(lmc_jschema *s, const cJSON *j, int depth, lmc_js_node *n);

/* 1 when a value of schema n may begin with byte c. */
static int may_start(const lmc_js_node *n, int c) {
    if (n->n_alts) {
        for (int i = 0; i < n->n_alts; i++)
            if (may_start(n->alts[i], c)) return 1;
        return 0;
    }
    if (n->n_enum) {
        for (int i = 0; i < n->n_enum; i++)
            if (n->enum_text[i][0] == c) return 1;
        return 0;
    }
    switch (c) {
    case '{': return (n->types & T_OBJ) != 0;
    case '[': return (n->types & T_ARR) != 0;
    case '"': return (n->types & T_STR) != 0;
    case 't': return (n->types & T_BOOL) && !n->no_true;
    case 'f': return (n->types & T_BOOL) && !n->no_false;
    case 'n': return (n->types & T_NULL) != 0;
    default: return (c == '-' || (c >= '0' && c <= '9')) && (n->types & (T_NUM | T_INT));
    }
}

static int is_annotation(const char *k) {
    static const char *const a[] = {"title", "description", "default", "examples", "$schema", "$id", "$defs",
                                    "definitions", "$comment", NULL};
    for (int i = 0; a[i]; i++) if (!strcmp(k, a[i])) return 1;
    return 0;
}

/* anyOf / oneOf alone (with annotations): one node whose alternatives are read in parallel. */
static lmc_status compile_alts(lmc_jschema *s, const cJSON *alts, int one_of, int depth, lmc_js_node *n) {
    if (!cJSON_IsArray(alts) || cJSON_GetArraySize(alts) == 0) return lmc_fail(LMC_ERR_FORMAT, "'anyOf'/'oneOf' must be a non-empty list");
    int na = cJSON_GetArraySize(alts);
    if (na > 64) return lmc_fail(LMC_ERR_UNSUPPORTED, "at most 64 alternatives");
    n->alts = calloc((size_t)na, sizeof *n->alts);
    if (!n->alts) return lmc_fail(LMC_ERR_NOMEM, "schema");
    n->one_of = one_of;
    const cJSON *a;
    cJSON_ArrayForEach(a, alts) {
        const lmc_js_node *c;
        if (cJSON_IsFalse(a)) continue; /* an alternative nothing satisfies */
        LMC_TRY(compile(s, a, depth + 1, &c));
        n->alts[n->n_alts++] = c;
    }
    if (!n->n_alts) return lmc_fail(LMC_ERR_FORMAT, "no anyOf/oneOf alternative can be satisfied");
    n->types = 0;
    return LMC_OK;
}

static lmc_status compile_lengths(const cJSON *j, lmc_js_node *n) {
    const cJSON *mi = cJSON_GetObjectItemCaseSensitive(j, "minLength"), *ma = cJSON_GetObjectItemCaseSensitive(j, "maxLength");
    if (mi && (!cJSON_IsNumber(mi) || mi->valuedouble < 0 || mi->valuedouble > 1e6 || mi->valuedouble != floor(mi->valuedouble)))
        return lmc_fail(LMC_ERR_FORMAT, "bad minLength");
    if (ma && (!cJSON_IsNumber(ma) || ma->valuedouble < 0 || ma->valuedouble > 1e6 || ma->valuedouble != floor(ma->valuedouble)))
        return lmc_fail(LMC_ERR_FORMAT, "bad maxLength");
    if (mi) n->min_len = (int)mi->valuedouble;
    if (ma) n->max_len = (int)ma->valuedouble;
    if (ma && n->max_len < n->min_len) return lmc_fail(LMC_ERR_FORMAT, "maxLength < minLength");
    return LMC_OK;
}

/* minimum/maximum and the exclusive forms (draft 6+ numbers). Integers: the digit automaton only
 * lets a number grow while some extension of it stays in range. Numbers: the same over decimal
 * prefixes (no exponent), and the value is checked exactly where it ends. */
static lmc_status compile_range(const cJSON *j, lmc_js_node *n) {
    static const char *const keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    n->lo = -RANGE_LIMIT;
    n->hi = RANGE_LIMIT;
    n->flo = -INFINITY;
    n->fhi = INFINITY;
    for (int i = 0; i < 4; i++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        if (!b) continue;
        if (!cJSON_IsNumber(b)) return lmc_fail(LMC_ERR_UNSUPPORTED, "'%s' must be a number (draft 4 booleans are not supported)", keys[i]);
        double v = b->valuedouble;
        if (!(fabs(v) < (double)RANGE_LIMIT))
            return lmc_fail(LMC_ERR_UNSUPPORTED, "'%s' must lie within ±1e15 for guided decoding", keys[i]);
        if (n->types & T_NUM) {
            n->has_frange = 1;
            if (i < 2 && (v > n->flo || (v == n->flo && i == 1))) { n->flo = v; n->flo_ex = i == 1; }
            if (i >= 2 && (v < n->fhi || (v == n->fhi && i == 3))) { n->fhi = v; n->fhi_ex = i == 3; }
            continue;
        }
        if (!(n->types & T_INT)) continue; /* bounds constrain numbers only */
        n->has_range = 1;
        if (i < 2) {
            int64_t lo = (int64_t)ceil(v);
            if (i == 1 && (double)lo == v) lo++;
            if (lo > n->lo) n->lo = lo;
        } else {
            int64_t hi = (int64_t)floor(v);
            if (i == 3 && (double)hi == v) hi--;
            if (hi < n->hi) n->hi = hi;
        }
    }
    if (n->has_range && n->lo > n->hi) return lmc_fail(LMC_ERR_FORMAT, "no integer lies between minimum and maximum");
    if (n->has_frange && (n->flo > n->fhi || (n->flo == n->fhi && (n->flo_ex || n->fhi_ex))))
        return lmc_fail(LMC_ERR_FORMAT, "no number lies between minimum and maximum");
    return LMC_OK;
}

/* pattern, format and merged patterns: one automaton for all of them. */
static lmc_status compile_patterns(const cJSON *j, lmc_js_node *n) {
    const char *list[66];
    int k = 0;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pattern"), *f = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *more = cJSON_GetObjectItemCaseSensitive(j, "$lmc_patterns");
    if (p) {
        if (!cJSON_IsString(p)) return lmc_fail(LMC_ERR_FORMAT, "'pattern' must be a string");
        list[k++] = p->valuestring;
    }
    if (f) {
        const char *fp = cJSON_IsString(f) ? lmc_jsformat_pattern(f->valuestring) : NULL;
        if (!fp) return lmc_fail(LMC_ERR_UNSUPPORTED, "format '%.32s' is not supported for guided decoding (date, time, date-time, uuid, email, ipv4)",
                                 cJSON_IsString(f) ? f->valuestring : "?");
        list[k++] = fp;
    }
    const cJSON *m;
    if (cJSON_IsArray(more)) cJSON_ArrayForEach(m, more) if (cJSON_IsString(m) && k < 66) list[k++] = m->valuestring;
    for (int i = 0; i < k; i++) {
        lmc_rx *rx;
        LMC_TRY(lmc_rx_compile(list[i], &rx));
        if (!n->rx) { n->rx = rx; continue; }
        lmc_rx *both;
        lmc_status st = lmc_rx_and(n->rx, rx, &both);
        lmc_rx_free(rx);
        if (st < 0) return st;
        lmc_rx_free(n->rx);
        n->rx = both;
    }
    return LMC_OK;
}

/* not: excluded types (not {type}) or values (not {enum} / not {const}); objects and arrays as
 * values, and any other keyword under not, are refused. */
static lmc_status compile_not_one(const cJSON *x, lmc_js_node *n) {
    if (!cJSON_IsObject(x)) return lmc_fail(LMC_ERR_UNSUPPORTED, "'not' must be a schema object");
    const cJSON *k;
    cJSON_ArrayForEach(k, x)
        if (!is_annotation(k->string) && strcmp(k->string, "type") && strcmp(k->string, "enum") && strcmp(k->string, "const"))
            return lmc_fail(LMC_ERR_UNSUPPORTED, "'not' is supported for guided decoding only with type, enum or const (not '%.48s')", k->string);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(x, "type"), *en = cJSON_GetObjectItemCaseSensitive(x, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(x, "const");
    unsigned tb = type ? type_bits(type) : T_ALL;
    if (type && !tb) return lmc_fail(LMC_ERR_FORMAT, "'not': 'type' must name JSON types");
    if (!en && !cn) {
        if (!type) return lmc_fail(LMC_ERR_FORMAT, "'not': {} excludes every value");
        if ((tb & T_INT) && !(tb & T_NUM) && (n->types & T_NUM))
            return lmc_fail(LMC_ERR_UNSUPPORTED, "'not' {\"type\": \"integer\"} on numbers is not supported for guided decoding");
        n->types &= ~tb;
        return LMC_OK;
    }
    if (en && !cJSON_IsArray(en)) return lmc_fail(LMC_ERR_FORMAT, "'enum' must be a list");
    int cnt = (en ? cJSON_GetArraySize(en) : 0) + (cn ? 1 : 0);
    for (int i = 0; i < cnt; i++) {
        const cJSON *v = en && i < cJSON_GetArraySize(en) ? cJSON_GetArrayItem(en, i) : cn;
        unsigned vt = cJSON_IsString(v) ? T_STR : cJSON_IsNumber(v) ? (v->valuedouble == floor(v->valuedouble) ? T_INT : T_NUM)
                      : cJSON_IsBool(v) ? T_BOOL : cJSON_IsNull(v) ? T_NULL : cJSON_IsObject(v) ? T_OBJ : T_ARR;
        if (!(tb & vt) && !(vt == T_INT && (tb & T_NUM))) continue; /* not (type ∧ value): a value of another type is not excluded */
        if (vt & (T_OBJ | T_ARR)) return lmc_fail(LMC_ERR_UNSUPPORTED, "'not' with object or array values is not supported for guided decoding");
        if (vt == T_NULL) n->types &= ~(unsigned)T_NULL;
        else if (vt == T_BOOL) { if (cJSON_IsTrue(v)) n->no_true = 1; else n->no_false = 1; }
        else if (vt == T_STR) {
            if (n->n_xstr >= 64) return lmc_fail(LMC_ERR_UNSUPPORTED, "at most 64 excluded strings");
            char **xs = realloc(n->xstr, (size_t)(n->n_xstr + 1) * sizeof *xs);
            if (xs) n->xstr = xs;
            size_t *xl = realloc(n->xstr_len, (size_t)(n->n_xstr + 1) * sizeof *xl);
            if (xl) n->xstr_len = xl;
            char *d = xs && xl ? strdup(v->valuestring) : NULL;
            if (!d) return lmc_fail(LMC_ERR_NOMEM, "schema");
            n->xstr[n->n_xstr] = d;
            n->xstr_len[n->n_xstr++] = strlen(d);
        } else {
            double *xn = realloc(n->xnum, (size_t)(n->n_xnum + 1) * sizeof *xn);
            if (!xn) return lmc_fail(LMC_ERR_NOMEM, "schema");
            n->xnum = xn;
            n->xnum[n->n_xnum++] = v->valuedouble;
        }
    }
    if (n->no_true && n->no_false) n->types &= ~(unsigned)T_BOOL;
    return LMC_OK;
}

static lmc_status compile_not(const cJSON *j, lmc_js_node *n) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "not"), *more = cJSON_GetObjectItemCaseSensitive(j, "$lmc_not"), *m;
    if (x) LMC_TRY(compile_not_one(x, n));
    if (cJSON_IsArray(more)) cJSON_ArrayForEach(m, more) LMC_TRY(compile_not_one(m, n));
    if (!n->n_enum) return LMC_OK;
    /* an enum loses the values not excludes */
    int k = 0;
    for (int i = 0; i < n->n_enum; i++) {
        cJSON *v = cJSON_Parse(n->enum_text[i]);
        int out = !v;
        if (cJSON_IsString(v)) for (int e = 0; e < n->n_xstr; e++) out |= !strcmp(v->valuestring, n->xstr[e]);
        if (cJSON_IsNumber(v)) for (int e = 0; e < n->n_xnum; e++) out |= v->valuedouble == n->xnum[e];
        if (cJSON_IsTrue(v)) out |= n->no_true;
        if (cJSON_IsFalse(v)) out |= n->no_false;
        if (cJSON_IsNull(v)) out |= !(n->types & T_NULL);
        cJSON_Delete(v);
        if (out) { free(n->enum_text[i]); continue; }
        n->enum_text[k] = n->enum_text[i];
        n->enum_len[k++] = n->enum_len[i];
    }
    n->n_enum = k;
    if (!k) return lmc_fail(LMC_ERR_FORMAT, "'not' excludes every value of the enum");
    return LMC_OK;
}

static lmc_status compile_ref(lmc_jschema *s, const cJSON *j, int depth, const lmc_js_node **out) {
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(j, "$ref");
    if (!cJSON_IsString(ref)) return lmc_fail(LMC_ERR_FORMAT, "'$ref' must be a string");
    const cJSON *target;
    LMC_TRY(lmc_jsref_resolve(s->doc, ref->valuestring, &target));
    for (int i = 0; i < s->n_refs; i++)
        if (s->ref_json[i] == target) { *out = s->ref_node[i]; return LMC_OK; }
    if (depth > LMC_JS_MAX_DEPTH) return lmc_fail(LMC_ERR_UNSUPPORTED, "the schema nests deeper than %d", LMC_JS_MAX_DEPTH);
    if (cJSON_IsObject(target) && cJSON_HasObjectItem(target, "$ref")) return compile(s, target, depth + 1, out);
    if (s->n_refs == s->cap_refs) {
        int cap = s->cap_refs ? s->cap_refs * 2 : 8;
        const cJSON **a = realloc(s->ref_json, (size_t)cap * sizeof *a);
        if (a) s->ref_json = a;
        lmc_js_node **b = realloc(s->ref_node, (size_t)cap * sizeof *b);
        if (b) s->ref_node = b;
        if (!a || !b) return lmc_fail(LMC_ERR_NOMEM, "schema");
        s->cap_refs = cap;
    }
    lmc_js_node *n;
    LMC_TRY(new_node(s, &n));
    s->ref_json[s->n_refs] = target;
    s->ref_node[s->n_refs++] = n; /* registered first: a reference inside it points back here */
    *out = n;
    return compile_into(s, target, depth + 1, n);
}

/* Objects needing a rewrite first: allOf, or anyOf/oneOf/$ref beside other keywords. */
static int needs_merge(const cJSON *j) {
    if (cJSON_HasObjectItem(j, "allOf")) return 1;
    int special = 0, other = 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, j) {
        if (!strcmp(k->string, "anyOf") || !strcmp(k->string, "oneOf") || !strcmp(k->string, "$ref")) special++;
        else if (!is_annotation(k->string)) other++;
    }
    return special > 1 || (special && other);
}

static lmc_status compile_into(lmc_jschema *s, const cJSON *j, int depth, lmc_js_node *n) {
    if (cJSON_IsTrue(j)) { *n = s->any; return LMC_OK; }
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "a schema must be an object or true");
    if (depth > LMC_JS_MAX_DEPTH) return lmc_fail(LMC_ERR_UNSUPPORTED, "the schema nests deeper than %d", LMC_JS_MAX_DEPTH);
    if (needs_merge(j)) {
        cJSON *m;
        LMC_TRY(lmc_jsmerge(s->doc, j, &m));
        cJSON_AddItemToArray(s->scratch, m); /* kept until compiling ends */
        return compile_into(s, m, depth + 1, n);
    }
    static const char *const known[] = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                                        "enum", "const", "title", "description", "default", "examples", "$schema", "$id",
                                        "$defs", "definitions", "$comment", "anyOf", "oneOf", "minLength", "maxLength",
                                        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "format",
                                        "not", "$lmc_patterns", "$lmc_not", NULL};
    const cJSON *k;
    cJSON_ArrayForEach(k, j) {
        int ok = 0;
        for (int i = 0; known[i]; i++) ok |= !strcmp(k->string, known[i]);
        if (!ok) return lmc_fail(LMC_ERR_UNSUPPORTED, "JSON Schema keyword '%.48s' is not supported for guided decoding", k->string);
    }
    n->min_items = 0;
    n->max_items = -1;
    n->max_len = -1;
    n->items = &s->any;
    const cJSON *alts = cJSON_GetObjectItemCaseSensitive(j, "anyOf");
    if (alts) return compile_alts(s, alts, 0, depth, n);
    if ((alts = cJSON_GetObjectItemCaseSensitive(j, "oneOf"))) return compile_alts(s, alts, 1, depth, n);
    LMC_TRY(compile_lengths(j, n));
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    n->types = type ? type_bits(type) : T_ALL;
    if (!n->types) return lmc_fail(LMC_ERR_FORMAT, "schema 'type' must name JSON types");
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(j, "properties");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(j, "additionalProperties");
    if (props) {
        if (!cJSON_IsObject(props)) return lmc_fail(LMC_ERR_FORMAT, "'properties' must be an object");
        int np = cJSON_GetArraySize(props);
        if (np > 64) return lmc_fail(LMC_ERR_UNSUPPORTED, "at most 64 properties per object");
        n->names = calloc((size_t)np + 1, sizeof *n->names);
        n->name_len = calloc((size_t)np + 1, sizeof *n->name_len);
        n->props = calloc((size_t)np + 1, sizeof *n->props);
        if (!n->names || !n->name_len || !n->props) return lmc_fail(LMC_ERR_NOMEM, "schema");
        const cJSON *p;
        cJSON_ArrayForEach(p, props) {
            if (strpbrk(p->string, "\"\\") || !*p->string)
                return lmc_fail(LMC_ERR_UNSUPPORTED, "property names with quotes or backslashes are not supported");
            if (!(n->names[n->n_props] = strdup(p->string))) return lmc_fail(LMC_ERR_NOMEM, "schema");
            n->name_len[n->n_props] = strlen(p->string);
            int k2 = n->n_props++; /* counted now, so node_free frees the name if the child fails */
            const lmc_js_node *c;
            if (cJSON_IsFalse(p)) { /* a property that may not appear */
                free(n->names[k2]);
                n->n_props--;
                continue;
            }
            LMC_TRY(compile(s, p, depth + 1, &c));
            n->props[k2] = (lmc_js_node *)c;
        }
    }
    if (!addl) n->additional = props ? NULL : &s->any;
    else if (cJSON_IsFalse(addl)) n->additional = NULL;
    else LMC_TRY(compile(s, addl, depth + 1, &n->additional));
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(j, "required");
    if (req) {
        if (!cJSON_IsArray(req)) return lmc_fail(LMC_ERR_FORMAT, "'required' must be a list of property names");
        const cJSON *r;
        cJSON_ArrayForEach(r, req) {
            int found = -1;
            for (int i = 0; cJSON_IsString(r) && i < n->n_props; i++)
                if (!strcmp(n->names[i], r->valuestring)) found = i;
            if (found < 0) return lmc_fail(LMC_ERR_UNSUPPORTED, "required property '%.48s' is not among 'properties'",
                                           cJSON_IsString(r) ? r->valuestring : "?");
            n->required |= 1ull << found;
        }
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(j, "items");
    if (items) LMC_TRY(compile(s, items, depth + 1, &n->items));
    const cJSON *mi = cJSON_GetObjectItemCaseSensitive(j, "minItems"), *ma = cJSON_GetObjectItemCaseSensitive(j, "maxItems");
    if (mi && (!cJSON_IsNumber(mi) || mi->valuedouble < 0 || mi->valuedouble > 1e6)) return lmc_fail(LMC_ERR_FORMAT, "bad minItems");
    if (ma && (!cJSON_IsNumber(ma) || ma->valuedouble < 0 || ma->valuedouble > 1e6)) return lmc_fail(LMC_ERR_FORMAT, "bad maxItems");
    if (mi) n->min_items = (int)mi->valuedouble;
    if (ma) n->max_items = (int)ma->valuedouble;
    if (ma && n->max_items < n->min_items) return lmc_fail(LMC_ERR_FORMAT, "maxItems < minItems");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(j, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(j, "const");
    if (en || cn) {
        if (en && (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0)) return lmc_fail(LMC_ERR_FORMAT, "'enum' must be a non-empty list");
        int ne = en ? cJSON_GetArraySize(en) : 1;
        if (ne > 64) return lmc_fail(LMC_ERR_UNSUPPORTED, "at most 64 enum values");
        n->enum_text = calloc((size_t)ne, sizeof *n->enum_text);
        n->enum_len = calloc((size_t)ne, sizeof *n->enum_len);
        if (!n->enum_text || !n->enum_len) return lmc_fail(LMC_ERR_NOMEM, "schema");
        for (int i = 0; i < ne; i++) {
            char *t = cJSON_PrintUnformatted(en ? cJSON_GetArrayItem(en, i) : cn);
            if (!t) return lmc_fail(LMC_ERR_NOMEM, "schema");
            n->enum_text[n->n_enum] = t;
            n->enum_len[n->n_enum++] = strlen(t);
        }
    }
    if (n->types & T_STR) LMC_TRY(compile_patterns(j, n));
    else if (cJSON_HasObjectItem(j, "format") && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "format")))
        return lmc_fail(LMC_ERR_FORMAT, "'format' must be a string");
    LMC_TRY(compile_not(j, n));
    if (!n->types && !n->n_enum) return lmc_fail(LMC_ERR_FORMAT, "'not' excludes every type the schema allows");
    return compile_range(j, n);
}

static lmc_status compile(lmc_jschema *s, const cJSON *j, int depth, const lmc_js_node **out) {
    if (cJSON_IsObject(j) && cJSON_HasObjectItem(j, "$ref") && !needs_merge(j)) return compile_ref(s, j, depth, out);
    lmc_js_node *n;
    LMC_TRY(new_node(s, &n));
    *out = n;
    return compile_into(s, j, depth, n);
}

lmc_status lmc_jschema_compile(const cJSON *schema, lmc_jschema **out) {
    lmc_jschema *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "schema");
    s->any.types = T_ALL;
    s->any.additional = &s->any;
    s->any.items = &s->any;
    s->any.max_items = -1;
    s->any.max_len = -1;
    s->doc = schema;
    s->scratch = cJSON_CreateArray();
    if (!s->scratch) { free(s); return lmc_fail(LMC_ERR_NOMEM, "schema"); }
    const lmc_js_node *root;
    lmc_status st = compile(s, schema, 0, &root);
    s->doc = NULL;
    cJSON_Delete(s->scratch);
    s->scratch = NULL;
    if (st < 0) { lmc_jschema_free(s); return st; }
    s->root = (lmc_js_node *)root;
    *out = s;
    return LMC_OK;
}

/* ---- recognizing one reading ---- */

typedef lmc_js_thread thr;

static size_t thr_size(const thr *t) { return offsetof(thr, stack) + (size_t)t->depth * sizeof t->stack[0]; }

static int num_complete(int sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

static int need_text(const lmc_js_node *n) { return n->has_frange || n->n_xnum; }

/* Does [a, b] (each end open or closed) meet the node's number bounds? */
static int meets(const lmc_js_node *n, long double a, int a_open, long double b, int b_open) {
    long double lo = a, hi = b;
    int lo_open = a_open, hi_open = b_open;
    if ((long double)n->flo > lo || ((long double)n->flo == lo && n->flo_ex)) { lo = n->flo; lo_open = n->flo_ex || ((long double)n->flo == a && a_open); }
    if ((long double)n->fhi < hi || ((long double)n->fhi == hi && n->fhi_ex)) { hi = n->fhi; hi_open = n->fhi_ex || ((long double)n->fhi == b && b_open); }
    return lo < hi || (lo == hi && !lo_open && !hi_open);
}

/* Some continuation of the decimal prefix in t->num (no exponent) lies within the number bounds. */
static int frange_feasible(const thr *t) {
    const lmc_js_node *n = t->value;
    if (!n->has_frange) return 1;
    const char *q = t->num + (t->num[0] == '-');
    int neg = t->num[0] == '-';
    if (!*q) return neg ? meets(n, -INFINITY, 1, 0, 0) : 1;
    const char *dot = strchr(q, '.');
    long double v = strtold(q, NULL);
    long double a, b; /* magnitudes [a, b) */
    if (!dot) {
        if (!strcmp(q, "0")) { a = 0; b = 1; }
        else {
            /* [v, v+1) (this integer part, any fraction) or [10v, ∞) (more digits) */
            int hit = neg ? meets(n, -(v + 1), 1, -v, 0) || meets(n, -INFINITY, 1, -10 * v, 0)
                          : meets(n, v, 0, v + 1, 1) || meets(n, 10 * v, 0, INFINITY, 1);
            return hit;
        }
    } else {
        int d = (int)strlen(dot + 1);
        a = v;
        b = v + powl(10.0L, -d);
    }
    return neg ? meets(n, -b, 1, -a, 0) : meets(n, a, 0, b, 1);
}

/* The number read so far may end here: complete, within an integer range, within number bounds,
 * and not an excluded value. */
static int num_end_ok(const thr *t) {
    if (!num_complete(t->sub)) return 0;
    const lmc_js_node *n = t->value;
    if (n->has_range) {
        int64_t v = t->neg ? -t->ival : t->ival;
        if (v < n->lo || v > n->hi) return 0;
    }
    if (need_text(n)) {
        double x = strtod(t->num, NULL);
        if (n->has_frange && (x < n->flo || x > n->fhi || (n->flo_ex && x == n->flo) || (n->fhi_ex && x == n->fhi))) return 0;
        for (int i = 0; i < n->n_xnum; i++) if (x == n->xnum[i]) return 0;
    }
    return 1;
}

/* Some continuation of the integer read so far (more digits, or none) lies in range. */
static int range_feasible(const thr *t) {
    const lmc_js_node *n = t->value;
    if (!n->has_range) return 1;
    if (t->sub == N_MINUS) return n->lo <= 0;
    if (t->sub == N_ZERO) return n->lo <= 0 && n->hi >= 0;
    int64_t first = t->ival, span = 1; /* d more digits: magnitudes [first, first + span - 1] */
    for (int d = 0; d < 19; d++) {
        int64_t a = first, b = first + span - 1;
        int64_t x = t->neg ? -b : a, y = t->neg ? -a : b;
        if (x <= n->hi && y >= n->lo) return 1;
        if (first > RANGE_LIMIT) break;
        first *= 10;
        span *= 10;
    }
    return 0;
}

/* One more byte of a number's text (kept only when bounds or exclusions need it). */
static int num_text(thr *t, int c) {
    if (!need_text(t->value)) return 0;
    if ((size_t)t->num_len + 1 >= sizeof t->num) return -1; /* long numbers are not needed */
    t->num[t->num_len++] = (char)c;
    t->num[t->num_len] = 0;
    return frange_feasible(t) ? 0 : -1;
}

/* One more digit of an integer part. */
static int num_digit(thr *t, int c) {
    if (num_text(t, c) < 0) return -1;
    if (!t->value->has_range) return 0;
    if (t->ival > RANGE_LIMIT * 10) return -1;
    t->ival = t->ival * 10 + (c - '0');
    return range_feasible(t) ? 0 : -1;
}

/* An enum candidate fully matched at the current position. */
static int enum_complete(const thr *t) {
    for (int i = 0; i < t->value->n_enum; i++)
        if ((t->cand >> i & 1) && t->value->enum_len[i] == (size_t)t->pos) return 1;
    return 0;
}

static int thr_done(const thr *t) {
    if (t->mode == M_DONE) return 1;
    if (t->depth == 0 && t->mode == M_ENUM) return enum_complete(t);
    if (t->depth == 0 && t->mode == M_NUM) return num_end_ok(t);
    return 0;
}

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* Forget what only the finished value needed, so equal readings compare equal. */
static void clear_value(thr *t) {
    t->value = NULL;
    t->cand = 0;
    t->pos = 0;
    t->lit = t->is_key = t->integer = t->neg = t->u8 = t->num_len = 0;
    t->hex = 0;
    t->rx = 0;
    t->xpos = 0;
    t->xcand = 0;
    t->ival = 0;
    memset(t->num, 0, sizeof t->num);
}

/* A value ended: back to its container, or done at the top level. */
static void value_done(thr *t) {
    clear_value(t);
    t->sub = 0;
    if (t->depth == 0) { t->mode = M_DONE; return; }
    lmc_js_frame *f = &t->stack[t->depth - 1];
    if (f->kind == '[') f->n_items++;
    else {
        if (f->key >= 0) f->used |= 1ull << f->key;
        f->key_done = 0;
    }
    t->mode = M_AFTER;
}

/* The pattern can still be matched within the code points maxLength leaves. */
static int rx_room(const thr *t, int32_t rs) {
    const lmc_js_node *n = t->value;
    return rs >= 0 && (n->max_len < 0 || lmc_rx_min_cps(n->rx, rs) <= n->max_len - t->pos);
}

static int start_value(thr *t, int c) {
    const lmc_js_node *n = t->value;
    if (n->n_alts) return -1; /* expanded by the caller */
    if (n->n_enum) {
        uint64_t cand = 0;
        for (int i = 0; i < n->n_enum; i++)
            if (n->enum_text[i][0] == c) cand |= 1ull << i;
        if (!cand) return -1;
        t->mode = M_ENUM;
        t->cand = cand;
        t->pos = 1;
        return 0;
    }
    switch (c) {
    case '{':
    case '[': {
        if (!(n->types & (c == '{' ? T_OBJ : T_ARR)) || t->depth >= LMC_JS_MAX_DEPTH) return -1;
        lmc_js_frame *f = &t->stack[t->depth++];
        memset(f, 0, sizeof *f);
        f->node = n;
        f->kind = (uint8_t)c;
        f->key = -1;
        clear_value(t);
        if (c == '{') { t->mode = M_OBJ_OPEN; return 0; }
        if (n->max_items == 0) { t->mode = M_AFTER; return 0; } /* only ']' may follow */
        t->mode = M_VALUE;
        t->value = n->items;
        t->sub = n->min_items == 0; /* ']' may close it at once */
        return 0;
    }
    case '"':
        if (!(n->types & T_STR)) return -1;
        t->mode = M_STRING;
        t->is_key = 0;
        t->pos = 0; /* code points so far */
        t->rx = n->rx ? lmc_rx_start(n->rx) : 0;
        if (n->rx && !rx_room(t, t->rx)) return -1;
        t->xpos = 0;
        t->xcand = n->n_xstr >= 64 ? ~0ull : (1ull << n->n_xstr) - 1;
        return 0;
    case 't': case 'f': case 'n':
        if (!may_start(n, c)) return -1;
        t->mode = M_LIT;
        t->lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
        t->sub = 1;
        return 0;
    default:
        if (!(c == '-' || is_digit(c)) || !(n->types & (T_NUM | T_INT))) return -1;
        t->mode = M_NUM;
        t->integer = !(n->types & T_NUM);
        t->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        t->neg = c == '-';
        t->ival = is_digit(c) ? c - '0' : 0;
        t->num_len = 0;
        if (num_text(t, c) < 0) return -1;
        return range_feasible(t) ? 0 : -1;
    }
}

static int more_keys_possible(const lmc_js_frame *f) {
    const lmc_js_node *n = f->node;
    uint64_t all = n->n_props == 64 ? ~0ull : (1ull << n->n_props) - 1;
    return n->additional || (f->used & all) != all;
}

static int close_container(thr *t, int c) {
    if (t->depth == 0) return -1;
    lmc_js_frame *f = &t->stack[t->depth - 1];
    if (c != (f->kind == '{' ? '}' : ']')) return -1;
    if (f->kind == '{' && (f->node->required & ~f->used)) return -1;
    if (f->kind == '[' && f->n_items < f->node->min_items) return -1;
    t->depth--;
    value_done(t);
    return 0;
}

static int after_value(thr *t, int c) {
    lmc_js_frame *f = &t->stack[t->depth - 1];
    if (c == ',') {
        if (f->kind == '{') {
            if (!more_keys_possible(f)) return -1;
            t->mode = M_OBJ_KEY;
        } else {
            if (f->node->max_items >= 0 && f->n_items >= f->node->max_items) return -1;
            t->mode = M_VALUE;
            t->value = f->node->items;
            t->sub = 0;
        }
        return 0;
    }
    return close_container(t, c);
}

static int open_key(thr *t) {
    lmc_js_frame *f = &t->stack[t->depth - 1];
    if (!more_keys_possible(f)) return -1;
    t->mode = M_KEY;
    t->is_key = 1;
    t->pos = 0;
    t->cand = f->node->n_props == 64 ? ~0ull : (1ull << f->node->n_props) - 1; /* used ones too: to refuse duplicates */
    return 0;
}

static int close_key(thr *t) {
    lmc_js_frame *f = &t->stack[t->depth - 1];
    const lmc_js_node *n = f->node;
    int hit = -1;
    for (int i = 0; i < n->n_props; i++)
        if ((t->cand >> i & 1) && n->name_len[i] == (size_t)t->pos) hit = i;
    if (hit >= 0 && (f->used >> hit & 1)) return -1; /* a property twice */
    if (hit < 0 && !n->additional) return -1;
    f->key = (int16_t)hit;
    f->key_done = 1;
    t->mode = M_COLON;
    t->cand = 0;
    t->pos = 0;
    t->is_key = 0;
    return 0;
}

/* One decoded byte of a string value's content: its pattern and the excluded strings. */
static int content_byte(thr *t, int c) {
    const lmc_js_node *n = t->value;
    if (n->rx && ((t->rx = lmc_rx_next(n->rx, t->rx, (unsigned char)c)) < 0 || !rx_room(t, t->rx))) return -1;
    if (t->xcand) {
        uint64_t keep = 0;
        for (int i = 0; i < n->n_xstr; i++)
            if ((t->xcand >> i & 1) && (size_t)t->xpos < n->xstr_len[i] && (unsigned char)n->xstr[i][t->xpos] == c) keep |= 1ull << i;
        t->xcand = keep;
    }
    t->xpos++;
    return 0;
}

static int string_end_ok(const thr *t) {
    const lmc_js_node *n = t->value;
    if (t->pos < n->min_len) return 0;
    if (n->rx && !lmc_rx_accepts(n->rx, t->rx)) return 0;
    for (int i = 0; i < n->n_xstr; i++)
        if ((t->xcand >> i & 1) && n->xstr_len[i] == (size_t)t->xpos) return 0;
    return 1;
}

/* A \u escape of a string value, as UTF-8 content (surrogates refused where content matters). */
static int content_cp(thr *t, unsigned v) {
    const lmc_js_node *n = t->value;
    if (!n->rx && !n->n_xstr) return 0;
    if (v >= 0xD800 && v <= 0xDFFF) return -1;
    unsigned char b[3];
    int k = v < 0x80 ? 1 : v < 0x800 ? 2 : 3;
    if (k == 1) b[0] = (unsigned char)v;
    else if (k == 2) { b[0] = (unsigned char)(0xC0 | v >> 6); b[1] = (unsigned char)(0x80 | (v & 0x3F)); }
    else { b[0] = (unsigned char)(0xE0 | v >> 12); b[1] = (unsigned char)(0x80 | (v >> 6 & 0x3F)); b[2] = (unsigned char)(0x80 | (v & 0x3F)); }
    for (int i = 0; i < k; i++) if (content_byte(t, b[i]) < 0) return -1;
    return 0;
}

static int hexval(int c) {
    return is_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static const char escapes[] = "\"\\/bfnrt", dec_escapes[] = "\"\\/\b\f\n\r\t";

static int step(thr *t, int c) {
    int between = t->mode == M_VALUE || t->mode == M_OBJ_OPEN || t->mode == M_OBJ_KEY || t->mode == M_COLON ||
                  t->mode == M_AFTER || t->mode == M_DONE;
    if (between && is_ws(c)) {
        if (t->mode == M_VALUE && t->depth == 0) return -1; /* nothing before the top-level value */
        return ++t->ws > MAX_WS ? -1 : 0;
    }
    t->ws = 0;
    switch (t->mode) {
    case M_VALUE:
        if (c == ']' && t->sub == 1) return close_container(t, c);
        return start_value(t, c);
    case M_OBJ_OPEN:
        if (c == '}') return close_container(t, c);
        /* fall through */
    case M_OBJ_KEY:
        return c == '"' ? open_key(t) : -1;
    case M_COLON:
        if (c != ':') return -1;
        {
            lmc_js_frame *f = &t->stack[t->depth - 1];
            t->value = f->key >= 0 ? f->node->props[f->key] : f->node->additional;
        }
        t->mode = M_VALUE;
        t->sub = 0;
        return 0;
    case M_AFTER: return after_value(t, c);
    case M_KEY:
        if (lmc_jfsm_utf8(&t->u8, c) < 0) return -1;
        if (c == '"') return close_key(t);
        if (c == '\\') { t->cand = 0; t->mode = M_ESC; return t->stack[t->depth - 1].node->additional ? 0 : -1; }
        if ((unsigned char)c < 0x20) return -1;
        {
            const lmc_js_node *n = t->stack[t->depth - 1].node;
            uint64_t keep = 0;
            for (int i = 0; i < n->n_props; i++)
                if ((t->cand >> i & 1) && (size_t)t->pos < n->name_len[i] && n->names[i][t->pos] == c) keep |= 1ull << i;
            t->cand = keep;
            t->pos++;
            /* a prefix of a property not yet present, or any key when others are allowed */
            return (keep & ~t->stack[t->depth - 1].used) || n->additional ? 0 : -1;
        }
    case M_STRING:
        if (lmc_jfsm_utf8(&t->u8, c) < 0) return -1; /* also: no '"' inside a character */
        if (c == '"') {
            if (!string_end_ok(t)) return -1;
            value_done(t);
            return 0;
        }
        if ((unsigned char)c < 0x20) return -1;
        if ((c & 0xC0) != 0x80) { /* a code point starts (an escape counts as one) */
            if (t->value->max_len >= 0 && t->pos >= t->value->max_len) return -1;
            t->pos++;
        }
        if (c == '\\') {
            t->mode = M_ESC;
            if (!t->value->rx) return 0;
            for (const char *e = dec_escapes; *e; e++) /* some escape must keep the pattern matchable */
                if (rx_room(t, lmc_rx_next(t->value->rx, t->rx, (unsigned char)*e))) return 0;
            return -1;
        }
        return content_byte(t, c);
    case M_ESC: {
        const char *e = c ? strchr(escapes, c) : NULL;
        if (e) {
            t->mode = t->is_key ? M_KEY : M_STRING;
            return t->is_key ? 0 : content_byte(t, dec_escapes[e - escapes]);
        }
        /* \u escapes are refused where a pattern applies: a half-written one could leave no way on */
        if (c == 'u' && (t->is_key || !t->value->rx)) { t->mode = M_HEX; t->sub = 0; t->hex = 0; return 0; }
        return -1;
    }
    case M_HEX: {
        int h = hexval(c);
        if (h < 0) return -1;
        t->hex = (uint16_t)(t->hex * 16 + h);
        if (++t->sub < 4) return 0;
        t->mode = t->is_key ? M_KEY : M_STRING;
        t->sub = 0;
        return t->is_key ? 0 : content_cp(t, t->hex);
    }
    case M_LIT:
        if (c != lits[t->lit][t->sub]) return -1;
        if (!lits[t->lit][++t->sub]) value_done(t);
        return 0;
    case M_ENUM: {
        const lmc_js_node *n = t->value;
        uint64_t keep = 0;
        for (int i = 0; i < n->n_enum; i++)
            if ((t->cand >> i & 1) && (size_t)t->pos < n->enum_len[i] && n->enum_text[i][t->pos] == c) keep |= 1ull << i;
        if (keep) { t->cand = keep; t->pos++; return 0; }
        if (!enum_complete(t)) return -1;
        value_done(t); /* the literal ended before c */
        if (t->mode == M_DONE) return -1;
        return after_value(t, c);
    }
    case M_NUM:
        switch (t->sub) {
        case N_MINUS:
            if (c == '0') { t->sub = N_ZERO; return num_text(t, c) < 0 ? -1 : range_feasible(t) ? 0 : -1; }
            if (c >= '1' && c <= '9') { t->sub = N_INT; return num_digit(t, c); }
            return -1;
        case N_ZERO:
        case N_INT:
            if (t->sub == N_INT && is_digit(c)) return num_digit(t, c);
            if (!t->integer && c == '.') { t->sub = N_DOT; return num_text(t, c); }
            if (!t->integer && (c == 'e' || c == 'E')) { t->sub = N_E; return t->value->has_frange ? -1 : num_text(t, c); }
            break;
        case N_DOT:
            if (is_digit(c)) { t->sub = N_FRAC; return num_text(t, c); }
            return -1;
        case N_FRAC:
            if (is_digit(c)) return num_text(t, c);
            if (c == 'e' || c == 'E') { t->sub = N_E; return t->value->has_frange ? -1 : num_text(t, c); }
            break;
        case N_E:
            if (c == '+' || c == '-') { t->sub = N_ESIGN; return num_text(t, c); }
            /* fall through */
        case N_ESIGN:
            if (is_digit(c)) { t->sub = N_EXP; return num_text(t, c); }
            return -1;
        case N_EXP:
            if (is_digit(c)) return num_text(t, c);
            break;
        }
        if (!num_end_ok(t)) return -1;
        value_done(t);
        if (t->mode == M_DONE) return -1;
        return after_value(t, c);
    case M_DONE: return -1;
    }
    return -1;
}

static int thr_feed(thr *t, int c) {
    /* Whitespace ends a number or an enum literal that can end here. */
    if (is_ws(c) && t->mode == M_NUM) {
        if (!num_end_ok(t)) return -1;
        value_done(t);
    } else if (is_ws(c) && t->mode == M_ENUM) {
        int cont = 0;
        for (int k = 0; k < t->value->n_enum; k++)
            if ((t->cand >> k & 1) && (size_t)t->pos < t->value->enum_len[k] && t->value->enum_text[k][t->pos] == c) cont = 1;
        if (!cont) {
            if (!enum_complete(t)) return -1;
            value_done(t);
        }
    }
    return step(t, c);
}

/* ---- the set of readings ---- */

void lmc_jsstate_init(lmc_jsstate *st, const lmc_jschema *s) {
    memset(&st->t[0], 0, sizeof st->t[0]);
    st->n = 1;
    st->t[0].mode = M_VALUE;
    st->t[0].value = s->root;
}

void lmc_jsstate_copy(lmc_jsstate *dst, const lmc_jsstate *src) {
    dst->n = src->n;
    for (int i = 0; i < src->n; i++) memcpy(&dst->t[i], &src->t[i], thr_size(&src->t[i]));
}

int lmc_jsstate_done(const lmc_jsstate *st) {
    for (int i = 0; i < st->n; i++)
        if (thr_done(&st->t[i])) return 1;
    return 0;
}

/* The alternatives (flattened) of node n that may begin with c, into out; returns their count. */
static int pick_alts(const lmc_js_node *n, int c, const lmc_js_node **out, int k, int cap) {
    for (int i = 0; i < n->n_alts && k < cap; i++) {
        const lmc_js_node *a = n->alts[i];
        if (a->n_alts) k = pick_alts(a, c, out, k, cap);
        else if (may_start(a, c)) {
            int dup = 0;
            for (int j = 0; j < k; j++) dup |= out[j] == a;
            if (!dup) out[k++] = a;
        }
    }
    return k;
}

static int thr_equal(const thr *a, const thr *b) {
    size_t n = thr_size(a);
    return n == thr_size(b) && !memcmp(a, b, n);
}

int lmc_jsstate_feed(lmc_jsstate *st, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)p[i];
        /* A value starts at c: a reading whose schema has alternatives forks into those that fit. */
        int count = st->n;
        for (int k = 0; k < count; k++) {
            thr *t = &st->t[k];
            if (t->mode != M_VALUE || is_ws(c) || (c == ']' && t->sub == 1) || !t->value || !t->value->n_alts) continue;
            const lmc_js_node *alts[LMC_JS_MAX_THREADS];
            int na = pick_alts(t->value, c, alts, 0, LMC_JS_MAX_THREADS);
            if (na == 0) { t->value = NULL; t->mode = M_DONE; t->depth = 0; continue; } /* dies in the step below */
            for (int a = 1; a < na && st->n < LMC_JS_MAX_THREADS; a++) {
                memcpy(&st->t[st->n], t, thr_size(t));
                st->t[st->n++].value = alts[a];
            }
            t->value = alts[0];
        }
        int live = 0;
        for (int k = 0; k < st->n; k++) {
            thr *t = &st->t[k];
            if (thr_feed(t, c) < 0) continue;
            int dup = 0;
            for (int j = 0; j < live && !dup; j++) dup = thr_equal(&st->t[j], t);
            if (dup) continue;
            if (live != k) memcpy(&st->t[live], t, thr_size(t));
            live++;
        }
        st->n = live;
        if (!live) return -1;
    }
    return 0;
}
