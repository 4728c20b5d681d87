/* jschema.c — JSON Schema compiled to nodes, and the guided recognizer (see jschema.h).
 * The compiled schema owns every node (freed together); the recognizer state is a
 * fixed-size value with a frame per open container, so trying a token is a copy
 * of the live frames plus a feed. */
#include "jschema.h"
#include "jsonfsm.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64, T_ALL = 127 };

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
    int has_range;               /* integer bounds apply */
    int64_t lo, hi;              /* inclusive integer bounds */
    int n_alts;                  /* > 0: anyOf/oneOf; the first byte picks exactly one alternative */
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
    free(n->names); free(n->name_len); free(n->props); free(n->enum_text); free(n->enum_len);
    free(n->alts);
    free(n);
}

void lmc_jschema_free(lmc_jschema *s) {
    if (!s) return;
    for (int i = 0; i < s->n_all; i++) node_free(s->all[i]);
    free(s->all);
    free(s->ref_json);
    free(s->ref_node);
    free(s);
}

static lmc_js_node *new_node(lmc_jschema *s) {
    if (s->n_all == s->cap_all) {
        int cap = s->cap_all ? s->cap_all * 2 : 16;
        lmc_js_node **a = realloc(s->all, (size_t)cap * sizeof *a);
        if (!a) return NULL;
        s->all = a;
        s->cap_all = cap;
    }
    lmc_js_node *n = calloc(1, sizeof *n);
    if (n) s->all[s->n_all++] = n;
    return n;
}

static unsigned type_bit(const char *t) {
    static const struct { const char *name; unsigned bit; } names[] = {
        {"object", T_OBJ}, {"array", T_ARR}, {"string", T_STR}, {"number", T_NUM | T_INT},
        {"integer", T_INT}, {"boolean", T_BOOL}, {"null", T_NULL}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(t, names[i].name)) return names[i].bit;
    return 0;
}

static lmc_status compile(lmc_jschema *s, const cJSON *j, int depth, const lmc_js_node **out);
static lmc_status compile_into(lmc_jschema *s, const cJSON *j, int depth, lmc_js_node *n);

/* 1 when a value of schema n may begin with byte c (its first byte decides the alternative). */
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
    case 't': case 'f': return (n->types & T_BOOL) != 0;
    case 'n': return (n->types & T_NULL) != 0;
    default: return (c == '-' || (c >= '0' && c <= '9')) && (n->types & (T_NUM | T_INT));
    }
}

static const char first_bytes[] = "{[\"tfn-0123456789";

/* anyOf / oneOf: alternatives told apart by their first byte (e.g. a string or null, an object or
 * an array). Alternatives that can begin alike would need parallel states: refused by name. With
 * disjoint first bytes at most one alternative can match, so oneOf is anyOf. */
static lmc_status compile_alts(lmc_jschema *s, const cJSON *j, const cJSON *alts, int depth, lmc_js_node *n) {
    static const char *const ok[] = {"anyOf", "oneOf", "title", "description", "default", "examples", "$schema", "$id",
                                     "$defs", "definitions", "$comment", NULL};
    const cJSON *k;
    cJSON_ArrayForEach(k, j) {
        int known = 0;
        for (int i = 0; ok[i]; i++) known |= !strcmp(k->string, ok[i]);
        if (!known) return lmc_fail(LMC_ERR_UNSUPPORTED, "'%.48s' beside anyOf/oneOf is not supported for guided decoding", k->string);
    }
    if (cJSON_HasObjectItem(j, "anyOf") && cJSON_HasObjectItem(j, "oneOf"))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "anyOf together with oneOf is not supported for guided decoding");
    if (!cJSON_IsArray(alts) || cJSON_GetArraySize(alts) == 0) return lmc_fail(LMC_ERR_FORMAT, "'anyOf'/'oneOf' must be a non-empty list");
    int na = cJSON_GetArraySize(alts);
    if (na > 64) return lmc_fail(LMC_ERR_UNSUPPORTED, "at most 64 alternatives");
    n->alts = calloc((size_t)na, sizeof *n->alts);
    if (!n->alts) return lmc_fail(LMC_ERR_NOMEM, "schema");
    const cJSON *a;
    cJSON_ArrayForEach(a, alts) {
        const lmc_js_node *c;
        LMC_TRY(compile(s, a, depth + 1, &c));
        n->alts[n->n_alts++] = c;
    }
    for (const char *p = first_bytes; *p; p++) {
        int hits = 0;
        for (int i = 0; i < n->n_alts; i++) hits += may_start(n->alts[i], *p) ? 1 : 0;
        if (hits > 1)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "anyOf/oneOf alternatives that can both begin with '%c' are not supported "
                                                 "for guided decoding (alternatives must differ in type)", *p);
    }
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

/* minimum/maximum (and the exclusive forms, draft 6+ numbers) for integers: the digit automaton
 * only lets a number grow while some extension of it stays in range. Not for "number". */
static lmc_status compile_range(const cJSON *j, lmc_js_node *n) {
    static const char *const keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    n->lo = -RANGE_LIMIT;
    n->hi = RANGE_LIMIT;
    for (int i = 0; i < 4; i++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        if (!b) continue;
        if (!cJSON_IsNumber(b)) return lmc_fail(LMC_ERR_UNSUPPORTED, "'%s' must be a number (draft 4 booleans are not supported)", keys[i]);
        if ((n->types & T_NUM) || !(n->types & T_INT))
            return lmc_fail(LMC_ERR_UNSUPPORTED, "'%s' is supported for guided decoding only with \"type\": \"integer\"", keys[i]);
        double v = b->valuedouble;
        if (!(fabs(v) < (double)RANGE_LIMIT))
            return lmc_fail(LMC_ERR_UNSUPPORTED, "'%s' must lie within ±1e15 for guided decoding", keys[i]);
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
    return LMC_OK;
}

/* "$ref": "#", "#/$defs/Name", "#/definitions/Name", any JSON pointer into the same document. */
static lmc_status resolve_ref(const lmc_jschema *s, const char *ref, const cJSON **out) {
    if (ref[0] != '#') return lmc_fail(LMC_ERR_UNSUPPORTED, "$ref '%.64s': only references within the schema (#/...) are supported", ref);
    const cJSON *cur = s->doc;
    const char *p = ref + 1;
    if (*p && *p != '/') return lmc_fail(LMC_ERR_UNSUPPORTED, "$ref '%.64s': only JSON pointers (#/...) are supported", ref);
    while (*p == '/') {
        char tok[256];
        size_t k = 0;
        for (p++; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~') {
                if (p[1] == '0') c = '~';
                else if (p[1] == '1') c = '/';
                else return lmc_fail(LMC_ERR_FORMAT, "$ref '%.64s': bad ~ escape", ref);
                p++;
            } else if (c == '%') return lmc_fail(LMC_ERR_UNSUPPORTED, "$ref '%.64s': percent-encoding is not supported", ref);
            if (k + 1 >= sizeof tok) return lmc_fail(LMC_ERR_FORMAT, "$ref '%.64s': name too long", ref);
            tok[k++] = c;
        }
        tok[k] = 0;
        if (cJSON_IsObject(cur)) cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        else if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            cur = *tok && !*end && i >= 0 ? cJSON_GetArrayItem(cur, (int)i) : NULL;
        } else cur = NULL;
        if (!cur) return lmc_fail(LMC_ERR_FORMAT, "$ref '%.64s' does not resolve within the schema", ref);
    }
    *out = cur;
    return LMC_OK;
}

static lmc_status compile_ref(lmc_jschema *s, const cJSON *j, int depth, const lmc_js_node **out) {
    static const char *const ok[] = {"$ref", "title", "description", "default", "examples", "$schema", "$id",
                                     "$defs", "definitions", "$comment", NULL};
    const cJSON *k;
    cJSON_ArrayForEach(k, j) {
        int known = 0;
        for (int i = 0; ok[i]; i++) known |= !strcmp(k->string, ok[i]);
        if (!known) return lmc_fail(LMC_ERR_UNSUPPORTED, "'%.48s' beside $ref is not supported for guided decoding", k->string);
    }
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(j, "$ref");
    if (!cJSON_IsString(ref)) return lmc_fail(LMC_ERR_FORMAT, "'$ref' must be a string");
    const cJSON *target;
    LMC_TRY(resolve_ref(s, ref->valuestring, &target));
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
    lmc_js_node *n = new_node(s);
    if (!n) return lmc_fail(LMC_ERR_NOMEM, "schema");
    s->ref_json[s->n_refs] = target;
    s->ref_node[s->n_refs++] = n; /* registered first: a reference inside it points back here */
    *out = n;
    return compile_into(s, target, depth + 1, n);
}

static lmc_status compile_into(lmc_jschema *s, const cJSON *j, int depth, lmc_js_node *n) {
    if (cJSON_IsTrue(j)) { *n = s->any; return LMC_OK; }
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "a schema must be an object or true");
    if (depth > LMC_JS_MAX_DEPTH) return lmc_fail(LMC_ERR_UNSUPPORTED, "the schema nests deeper than %d", LMC_JS_MAX_DEPTH);
    static const char *const known[] = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                                        "enum", "const", "title", "description", "default", "examples", "$schema", "$id",
                                        "$defs", "definitions", "$comment", "anyOf", "oneOf", "minLength", "maxLength",
                                        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
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
    if (!alts) alts = cJSON_GetObjectItemCaseSensitive(j, "oneOf");
    if (alts) return compile_alts(s, j, alts, depth, n);
    LMC_TRY(compile_lengths(j, n));
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!type) n->types = T_ALL;
    else if (cJSON_IsString(type)) n->types = type_bit(type->valuestring);
    else if (cJSON_IsArray(type)) {
        const cJSON *t;
        cJSON_ArrayForEach(t, type) if (cJSON_IsString(t)) n->types |= type_bit(t->valuestring);
    }
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
            int k = n->n_props++; /* counted now, so node_free frees the name if the child fails */
            const lmc_js_node *c;
            LMC_TRY(compile(s, p, depth + 1, &c));
            n->props[k] = (lmc_js_node *)c;
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
    return compile_range(j, n);
}

static lmc_status compile(lmc_jschema *s, const cJSON *j, int depth, const lmc_js_node **out) {
    if (cJSON_IsObject(j) && cJSON_HasObjectItem(j, "$ref")) return compile_ref(s, j, depth, out);
    lmc_js_node *n = new_node(s);
    if (!n) return lmc_fail(LMC_ERR_NOMEM, "schema");
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
    const lmc_js_node *root;
    lmc_status st = compile(s, schema, 0, &root);
    s->doc = NULL;
    if (st < 0) { lmc_jschema_free(s); return st; }
    s->root = (lmc_js_node *)root;
    *out = s;
    return LMC_OK;
}

/* ---- recognizing ---- */

void lmc_jsstate_init(lmc_jsstate *st, const lmc_jschema *s) {
    memset(st, 0, offsetof(lmc_jsstate, stack));
    st->mode = M_VALUE;
    st->value = s->root;
}

void lmc_jsstate_copy(lmc_jsstate *dst, const lmc_jsstate *src) {
    memcpy(dst, src, offsetof(lmc_jsstate, stack) + (size_t)src->depth * sizeof src->stack[0]);
}

static int num_complete(int sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

/* The number read so far may end here: complete, and within an integer range. */
static int num_end_ok(const lmc_jsstate *st) {
    if (!num_complete(st->sub)) return 0;
    const lmc_js_node *n = st->value;
    if (!n->has_range) return 1;
    int64_t v = st->neg ? -st->ival : st->ival;
    return v >= n->lo && v <= n->hi;
}

/* Some continuation of the integer read so far (more digits, or none) lies in range. */
static int range_feasible(const lmc_jsstate *st) {
    const lmc_js_node *n = st->value;
    if (!n->has_range) return 1;
    if (st->sub == N_MINUS) return n->lo <= 0;
    if (st->sub == N_ZERO) return n->lo <= 0 && n->hi >= 0;
    int64_t first = st->ival, span = 1; /* d more digits: magnitudes [first, first + span - 1] */
    for (int d = 0; d < 19; d++) {
        int64_t a = first, b = first + span - 1;
        int64_t x = st->neg ? -b : a, y = st->neg ? -a : b;
        if (x <= n->hi && y >= n->lo) return 1;
        if (first > RANGE_LIMIT) break;
        first *= 10;
        span *= 10;
    }
    return 0;
}

/* One more digit of an integer with a range. */
static int num_digit(lmc_jsstate *st, int c) {
    if (!st->value->has_range) return 0;
    if (st->ival > RANGE_LIMIT * 10) return -1;
    st->ival = st->ival * 10 + (c - '0');
    return range_feasible(st) ? 0 : -1;
}

/* An enum candidate fully matched at the current position. */
static int enum_complete(const lmc_jsstate *st) {
    for (int i = 0; i < st->value->n_enum; i++)
        if ((st->cand >> i & 1) && st->value->enum_len[i] == (size_t)st->pos) return 1;
    return 0;
}

int lmc_jsstate_done(const lmc_jsstate *st) {
    if (st->mode == M_DONE) return 1;
    if (st->depth == 0 && st->mode == M_ENUM) return enum_complete(st);
    if (st->depth == 0 && st->mode == M_NUM) return num_end_ok(st);
    return 0;
}

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* A value ended: back to its container, or done at the top level. */
static void value_done(lmc_jsstate *st) {
    if (st->depth == 0) { st->mode = M_DONE; return; }
    lmc_js_frame *f = &st->stack[st->depth - 1];
    if (f->kind == '[') f->n_items++;
    else {
        if (f->key >= 0) f->used |= 1ull << f->key;
        f->key_done = 0;
    }
    st->mode = M_AFTER;
}

static int start_value(lmc_jsstate *st, int c) {
    const lmc_js_node *n = st->value;
    while (n->n_alts) { /* the one alternative that can begin with c */
        const lmc_js_node *pick = NULL;
        for (int i = 0; i < n->n_alts && !pick; i++)
            if (may_start(n->alts[i], c)) pick = n->alts[i];
        if (!pick) return -1;
        st->value = n = pick;
    }
    if (n->n_enum) {
        uint64_t cand = 0;
        for (int i = 0; i < n->n_enum; i++)
            if (n->enum_text[i][0] == c) cand |= 1ull << i;
        if (!cand) return -1;
        st->mode = M_ENUM;
        st->cand = cand;
        st->pos = 1;
        return 0;
    }
    switch (c) {
    case '{':
    case '[': {
        if (!(n->types & (c == '{' ? T_OBJ : T_ARR)) || st->depth >= LMC_JS_MAX_DEPTH) return -1;
        lmc_js_frame *f = &st->stack[st->depth++];
        memset(f, 0, sizeof *f);
        f->node = n;
        f->kind = (uint8_t)c;
        f->key = -1;
        if (c == '{') { st->mode = M_OBJ_OPEN; return 0; }
        if (n->max_items == 0) { st->mode = M_AFTER; return 0; } /* only ']' may follow */
        st->mode = M_VALUE;
        st->value = n->items;
        st->sub = n->min_items == 0; /* ']' may close it at once */
        return 0;
    }
    case '"':
        if (!(n->types & T_STR)) return -1;
        st->mode = M_STRING;
        st->is_key = 0;
        st->pos = 0; /* code points so far */
        return 0;
    case 't': case 'f': case 'n':
        if (!(n->types & (c == 'n' ? T_NULL : T_BOOL))) return -1;
        st->mode = M_LIT;
        st->lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
        st->sub = 1;
        return 0;
    default:
        if (!(c == '-' || is_digit(c)) || !(n->types & (T_NUM | T_INT))) return -1;
        st->mode = M_NUM;
        st->integer = !(n->types & T_NUM);
        st->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        st->neg = c == '-';
        st->ival = is_digit(c) ? c - '0' : 0;
        return range_feasible(st) ? 0 : -1;
    }
}

static int more_keys_possible(const lmc_js_frame *f) {
    const lmc_js_node *n = f->node;
    uint64_t all = n->n_props == 64 ? ~0ull : (1ull << n->n_props) - 1;
    return n->additional || (f->used & all) != all;
}

static int close_container(lmc_jsstate *st, int c) {
    if (st->depth == 0) return -1;
    lmc_js_frame *f = &st->stack[st->depth - 1];
    if (c != (f->kind == '{' ? '}' : ']')) return -1;
    if (f->kind == '{' && (f->node->required & ~f->used)) return -1;
    if (f->kind == '[' && f->n_items < f->node->min_items) return -1;
    st->depth--;
    value_done(st);
    return 0;
}

static int after_value(lmc_jsstate *st, int c) {
    lmc_js_frame *f = &st->stack[st->depth - 1];
    if (c == ',') {
        if (f->kind == '{') {
            if (!more_keys_possible(f)) return -1;
            st->mode = M_OBJ_KEY;
        } else {
            if (f->node->max_items >= 0 && f->n_items >= f->node->max_items) return -1;
            st->mode = M_VALUE;
            st->value = f->node->items;
            st->sub = 0;
        }
        return 0;
    }
    return close_container(st, c);
}

static int open_key(lmc_jsstate *st) {
    lmc_js_frame *f = &st->stack[st->depth - 1];
    if (!more_keys_possible(f)) return -1;
    st->mode = M_KEY;
    st->is_key = 1;
    st->pos = 0;
    st->cand = f->node->n_props == 64 ? ~0ull : (1ull << f->node->n_props) - 1; /* used ones too: to refuse duplicates */
    return 0;
}

static int close_key(lmc_jsstate *st) {
    lmc_js_frame *f = &st->stack[st->depth - 1];
    const lmc_js_node *n = f->node;
    int hit = -1;
    for (int i = 0; i < n->n_props; i++)
        if ((st->cand >> i & 1) && n->name_len[i] == (size_t)st->pos) hit = i;
    if (hit >= 0 && (f->used >> hit & 1)) return -1; /* a property twice */
    if (hit < 0 && !n->additional) return -1;
    f->key = (int16_t)hit;
    f->key_done = 1;
    st->mode = M_COLON;
    return 0;
}

static int step(lmc_jsstate *st, int c) {
    int between = st->mode == M_VALUE || st->mode == M_OBJ_OPEN || st->mode == M_OBJ_KEY || st->mode == M_COLON ||
                  st->mode == M_AFTER || st->mode == M_DONE;
    if (between && is_ws(c)) {
        if (st->mode == M_VALUE && st->depth == 0) return -1; /* nothing before the top-level value */
        return ++st->ws > MAX_WS ? -1 : 0;
    }
    st->ws = 0;
    switch (st->mode) {
    case M_VALUE:
        if (c == ']' && st->sub == 1) return close_container(st, c);
        return start_value(st, c);
    case M_OBJ_OPEN:
        if (c == '}') return close_container(st, c);
        /* fall through */
    case M_OBJ_KEY:
        return c == '"' ? open_key(st) : -1;
    case M_COLON:
        if (c != ':') return -1;
        {
            lmc_js_frame *f = &st->stack[st->depth - 1];
            st->value = f->key >= 0 ? f->node->props[f->key] : f->node->additional;
        }
        st->mode = M_VALUE;
        st->sub = 0;
        return 0;
    case M_AFTER: return after_value(st, c);
    case M_KEY:
        if (lmc_jfsm_utf8(&st->u8, c) < 0) return -1;
        if (c == '"') return close_key(st);
        if (c == '\\') { st->cand = 0; st->mode = M_ESC; return st->stack[st->depth - 1].node->additional ? 0 : -1; }
        if ((unsigned char)c < 0x20) return -1;
        {
            const lmc_js_node *n = st->stack[st->depth - 1].node;
            uint64_t keep = 0;
            for (int i = 0; i < n->n_props; i++)
                if ((st->cand >> i & 1) && (size_t)st->pos < n->name_len[i] && n->names[i][st->pos] == c) keep |= 1ull << i;
            st->cand = keep;
            st->pos++;
            /* a prefix of a property not yet present, or any key when others are allowed */
            return (keep & ~st->stack[st->depth - 1].used) || n->additional ? 0 : -1;
        }
    case M_STRING:
        if (lmc_jfsm_utf8(&st->u8, c) < 0) return -1; /* also: no '"' inside a character */
        if (c == '"') {
            if (st->pos < st->value->min_len) return -1;
            value_done(st);
            return 0;
        }
        if ((unsigned char)c < 0x20) return -1;
        if ((c & 0xC0) != 0x80) { /* a code point starts (an escape counts as one) */
            if (st->value->max_len >= 0 && st->pos >= st->value->max_len) return -1;
            st->pos++;
        }
        if (c == '\\') st->mode = M_ESC;
        return 0;
    case M_ESC:
        if (c && strchr("\"\\/bfnrt", c)) { st->mode = st->is_key ? M_KEY : M_STRING; return 0; }
        if (c == 'u') { st->mode = M_HEX; st->sub = 0; return 0; }
        return -1;
    case M_HEX:
        if (!(is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return -1;
        if (++st->sub == 4) st->mode = st->is_key ? M_KEY : M_STRING;
        return 0;
    case M_LIT:
        if (c != lits[st->lit][st->sub]) return -1;
        if (!lits[st->lit][++st->sub]) value_done(st);
        return 0;
    case M_ENUM: {
        const lmc_js_node *n = st->value;
        uint64_t keep = 0;
        for (int i = 0; i < n->n_enum; i++)
            if ((st->cand >> i & 1) && (size_t)st->pos < n->enum_len[i] && n->enum_text[i][st->pos] == c) keep |= 1ull << i;
        if (keep) { st->cand = keep; st->pos++; return 0; }
        if (!enum_complete(st)) return -1;
        value_done(st); /* the literal ended before c */
        if (st->mode == M_DONE) return -1;
        return after_value(st, c);
    }
    case M_NUM:
        switch (st->sub) {
        case N_MINUS:
            if (c == '0') { st->sub = N_ZERO; return range_feasible(st) ? 0 : -1; }
            if (c >= '1' && c <= '9') { st->sub = N_INT; return num_digit(st, c); }
            return -1;
        case N_ZERO:
        case N_INT:
            if (st->sub == N_INT && is_digit(c)) return num_digit(st, c);
            if (!st->integer && c == '.') { st->sub = N_DOT; return 0; }
            if (!st->integer && (c == 'e' || c == 'E')) { st->sub = N_E; return 0; }
            break;
        case N_DOT:
            if (is_digit(c)) { st->sub = N_FRAC; return 0; }
            return -1;
        case N_FRAC:
            if (is_digit(c)) return 0;
            if (c == 'e' || c == 'E') { st->sub = N_E; return 0; }
            break;
        case N_E:
            if (c == '+' || c == '-') { st->sub = N_ESIGN; return 0; }
            /* fall through */
        case N_ESIGN:
            if (is_digit(c)) { st->sub = N_EXP; return 0; }
            return -1;
        case N_EXP:
            if (is_digit(c)) return 0;
            break;
        }
        if (!num_end_ok(st)) return -1;
        value_done(st);
        if (st->mode == M_DONE) return -1;
        return after_value(st, c);
    case M_DONE: return -1;
    }
    return -1;
}

int lmc_jsstate_feed(lmc_jsstate *st, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)p[i];
        /* Whitespace ends a number or an enum literal that can end here. */
        if (is_ws(c) && st->mode == M_NUM) {
            if (!num_end_ok(st)) return -1;
            value_done(st);
        } else if (is_ws(c) && st->mode == M_ENUM) {
            int cont = 0;
            for (int k = 0; k < st->value->n_enum; k++)
                if ((st->cand >> k & 1) && (size_t)st->pos < st->value->enum_len[k] && st->value->enum_text[k][st->pos] == c) cont = 1;
            if (!cont) {
                if (!enum_complete(st)) return -1;
                value_done(st);
            }
        }
        if (step(st, c) < 0) return -1;
    }
    return 0;
}
