/* jschema.c — JSON Schema compiled to nodes, and the guided recognizer (see jschema.h).
 * The compiled schema owns every node (freed together); the recognizer state is a
 * fixed-size value with a frame per open container, so trying a token is a copy
 * of the live frames plus a feed. */
#include "jschema.h"

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
};

struct lmc_jschema {
    lmc_js_node *root;
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
    free(n);
}

void lmc_jschema_free(lmc_jschema *s) {
    if (!s) return;
    for (int i = 0; i < s->n_all; i++) node_free(s->all[i]);
    free(s->all);
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

static lmc_status compile_into(lmc_jschema *s, const cJSON *j, int depth, lmc_js_node *n) {
    if (cJSON_IsTrue(j)) { *n = s->any; return LMC_OK; }
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "a schema must be an object or true");
    if (depth > LMC_JS_MAX_DEPTH) return lmc_fail(LMC_ERR_UNSUPPORTED, "the schema nests deeper than %d", LMC_JS_MAX_DEPTH);
    static const char *const known[] = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                                        "enum", "const", "title", "description", "default", "examples", "$schema", "$id", NULL};
    const cJSON *k;
    cJSON_ArrayForEach(k, j) {
        int ok = 0;
        for (int i = 0; known[i]; i++) ok |= !strcmp(k->string, known[i]);
        if (!ok) return lmc_fail(LMC_ERR_UNSUPPORTED, "JSON Schema keyword '%.48s' is not supported for guided decoding", k->string);
    }
    n->min_items = 0;
    n->max_items = -1;
    n->items = &s->any;
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
    return LMC_OK;
}

static lmc_status compile(lmc_jschema *s, const cJSON *j, int depth, const lmc_js_node **out) {
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
    const lmc_js_node *root;
    lmc_status st = compile(s, schema, 0, &root);
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

/* An enum candidate fully matched at the current position. */
static int enum_complete(const lmc_jsstate *st) {
    for (int i = 0; i < st->value->n_enum; i++)
        if ((st->cand >> i & 1) && st->value->enum_len[i] == (size_t)st->pos) return 1;
    return 0;
}

int lmc_jsstate_done(const lmc_jsstate *st) {
    if (st->mode == M_DONE) return 1;
    if (st->depth == 0 && st->mode == M_ENUM) return enum_complete(st);
    if (st->depth == 0 && st->mode == M_NUM) return num_complete(st->sub);
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
        return 0;
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
        if (c == '"') { value_done(st); return 0; }
        if (c == '\\') { st->mode = M_ESC; return 0; }
        return (unsigned char)c < 0x20 ? -1 : 0;
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
            if (c == '0') { st->sub = N_ZERO; return 0; }
            if (c >= '1' && c <= '9') { st->sub = N_INT; return 0; }
            return -1;
        case N_ZERO:
        case N_INT:
            if (st->sub == N_INT && is_digit(c)) return 0;
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
        if (!num_complete(st->sub)) return -1;
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
            if (!num_complete(st->sub)) return -1;
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
