/* jsmerge.c — allOf merging and format patterns (see jsmerge.h). Merging works on the
 * JSON of the schemas: every member is flattened (nested allOf, $ref, anyOf beside other
 * keywords), the plain keywords of all members are folded into one object, and members
 * with alternatives are distributed: allOf[A, anyOf[X, Y]] = anyOf[allOf[A, X], allOf[A, Y]].
 * Subschemas that meet (a property in two members, items) become {"allOf": [a, b]} and are
 * merged when compiled. Internal keys: "$lmc_patterns" (more patterns), "$lmc_not" (more nots).
 */
#include "jsmerge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MEMBERS 64
#define MAX_COMBOS 64
#define MAX_FLATTEN 16

/* ---- formats ---- */

#define DATE "\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|[12]\\d))"
#define TIME "([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d+)?([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
#define OCTET "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
#define ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
#define LABEL "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"

const char *lmc_jsformat_pattern(const char *f) {
    static const struct { const char *name, *pattern; } formats[] = {
        {"date", "^" DATE "$"},
        {"time", "^" TIME "$"},
        {"date-time", "^" DATE "[Tt]" TIME "$"},
        {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
        {"email", "^" ATEXT "+(\\." ATEXT "+)*@" LABEL "(\\." LABEL ")*$"},
        {"ipv4", "^" OCTET "(\\." OCTET "){3}$"},
    };
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (!strcmp(f, formats[i].name)) return formats[i].pattern;
    return NULL;
}

/* ---- $ref ---- */

lmc_status lmc_jsref_resolve(const cJSON *doc, const char *ref, const cJSON **out) {
    if (ref[0] != '#') return lmc_fail(LMC_ERR_UNSUPPORTED, "$ref '%.64s': only references within the schema (#/...) are supported", ref);
    const cJSON *cur = doc;
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

/* ---- flattening ---- */

static int is_annotation(const char *k) {
    static const char *const a[] = {"title", "description", "default", "examples", "$schema", "$id", "$defs",
                                    "definitions", "$comment", NULL};
    for (int i = 0; a[i]; i++) if (!strcmp(k, a[i])) return 1;
    return 0;
}

typedef struct members {
    const cJSON *m[MAX_MEMBERS];  /* plain members (no allOf/anyOf/oneOf/$ref at their top) */
    int n;
    const cJSON *alts[MAX_MEMBERS]; /* anyOf/oneOf lists */
    int one_of[MAX_MEMBERS];
    int n_alts;
    cJSON *owned;                 /* copies made while flattening (an array holding them) */
} members;

static lmc_status add_member(const cJSON *doc, const cJSON *j, members *ms, int depth);

/* j with only its plain keywords (a copy, owned by ms), or j itself when it has nothing else. */
static lmc_status plain_part(const cJSON *j, members *ms, const cJSON **out) {
    static const char *const skip[] = {"allOf", "anyOf", "oneOf", "$ref", NULL};
    cJSON *c = cJSON_CreateObject();
    if (!c) return lmc_fail(LMC_ERR_NOMEM, "schema");
    cJSON_AddItemToArray(ms->owned, c);
    const cJSON *k;
    cJSON_ArrayForEach(k, j) {
        int drop = 0;
        for (int i = 0; skip[i]; i++) drop |= !strcmp(k->string, skip[i]);
        if (!drop) {
            cJSON *d = cJSON_Duplicate(k, 1);
            if (!d) return lmc_fail(LMC_ERR_NOMEM, "schema");
            cJSON_AddItemToObject(c, k->string, d);
        }
    }
    *out = c;
    return LMC_OK;
}

static lmc_status add_member(const cJSON *doc, const cJSON *j, members *ms, int depth) {
    if (depth > MAX_FLATTEN) return lmc_fail(LMC_ERR_UNSUPPORTED, "allOf/$ref nest deeper than %d", MAX_FLATTEN);
    if (cJSON_IsTrue(j)) return LMC_OK;
    if (cJSON_IsFalse(j)) return lmc_fail(LMC_ERR_FORMAT, "an allOf member is false: no value satisfies the schema");
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "a schema must be an object or a boolean");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(j, "allOf"), *ref = cJSON_GetObjectItemCaseSensitive(j, "$ref");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(j, "anyOf"), *one = cJSON_GetObjectItemCaseSensitive(j, "oneOf");
    if (all && (!cJSON_IsArray(all) || cJSON_GetArraySize(all) == 0)) return lmc_fail(LMC_ERR_FORMAT, "'allOf' must be a non-empty list");
    if (any && (!cJSON_IsArray(any) || cJSON_GetArraySize(any) == 0)) return lmc_fail(LMC_ERR_FORMAT, "'anyOf' must be a non-empty list");
    if (one && (!cJSON_IsArray(one) || cJSON_GetArraySize(one) == 0)) return lmc_fail(LMC_ERR_FORMAT, "'oneOf' must be a non-empty list");
    const cJSON *e;
    if (all) cJSON_ArrayForEach(e, all) LMC_TRY(add_member(doc, e, ms, depth + 1));
    if (ref) {
        if (!cJSON_IsString(ref)) return lmc_fail(LMC_ERR_FORMAT, "'$ref' must be a string");
        const cJSON *t;
        LMC_TRY(lmc_jsref_resolve(doc, ref->valuestring, &t));
        LMC_TRY(add_member(doc, t, ms, depth + 1));
    }
    const cJSON *lists[2] = {any, one};
    for (int i = 0; i < 2; i++) {
        if (!lists[i]) continue;
        if (ms->n_alts >= MAX_MEMBERS) return lmc_fail(LMC_ERR_UNSUPPORTED, "allOf has too many members");
        ms->one_of[ms->n_alts] = i == 1;
        ms->alts[ms->n_alts++] = lists[i];
    }
    const cJSON *plain = j;
    if (all || ref || any || one) LMC_TRY(plain_part(j, ms, &plain));
    if (cJSON_GetArraySize(plain) == 0) return LMC_OK;
    if (ms->n >= MAX_MEMBERS) return lmc_fail(LMC_ERR_UNSUPPORTED, "allOf has more than %d members", MAX_MEMBERS);
    ms->m[ms->n++] = plain;
    return LMC_OK;
}

/* ---- folding plain members ---- */

enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64, T_ALL = 127 };

static unsigned type_name_bit(const char *t) {
    static const struct { const char *name; unsigned bit; } names[] = {
        {"object", T_OBJ}, {"array", T_ARR}, {"string", T_STR}, {"number", T_NUM | T_INT},
        {"integer", T_INT}, {"boolean", T_BOOL}, {"null", T_NULL}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(t, names[i].name)) return names[i].bit;
    return 0;
}

/* The types a "type" value allows (0: none named). */
static unsigned type_of(const cJSON *t) {
    if (cJSON_IsString(t)) return type_name_bit(t->valuestring);
    unsigned b = 0;
    const cJSON *x;
    if (cJSON_IsArray(t)) cJSON_ArrayForEach(x, t) if (cJSON_IsString(x)) b |= type_name_bit(x->valuestring);
    return b;
}

static cJSON *type_json(unsigned b) {
    cJSON *a = cJSON_CreateArray();
    if (!a) return NULL;
    if (b & T_OBJ) cJSON_AddItemToArray(a, cJSON_CreateString("object"));
    if (b & T_ARR) cJSON_AddItemToArray(a, cJSON_CreateString("array"));
    if (b & T_STR) cJSON_AddItemToArray(a, cJSON_CreateString("string"));
    if (b & T_NUM) cJSON_AddItemToArray(a, cJSON_CreateString("number"));
    else if (b & T_INT) cJSON_AddItemToArray(a, cJSON_CreateString("integer"));
    if (b & T_BOOL) cJSON_AddItemToArray(a, cJSON_CreateString("boolean"));
    if (b & T_NULL) cJSON_AddItemToArray(a, cJSON_CreateString("null"));
    return a;
}

/* out[key] = allOf of its old value and v (a copy of v when key is new). */
static lmc_status meet(cJSON *out, const char *key, const cJSON *v) {
    cJSON *d = cJSON_Duplicate(v, 1);
    if (!d) return lmc_fail(LMC_ERR_NOMEM, "schema");
    cJSON *old = cJSON_DetachItemFromObjectCaseSensitive(out, key);
    if (!old) { cJSON_AddItemToObject(out, key, d); return LMC_OK; }
    cJSON *w = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(w, "allOf");
    if (!w || !a) { cJSON_Delete(w); cJSON_Delete(d); cJSON_Delete(old); return lmc_fail(LMC_ERR_NOMEM, "schema"); }
    cJSON_AddItemToArray(a, old);
    cJSON_AddItemToArray(a, d);
    cJSON_AddItemToObject(out, key, w);
    return LMC_OK;
}

/* A numeric keyword: keep the tighter of two values (larger for lower bounds). */
static lmc_status tighten(cJSON *out, const cJSON *v, int larger) {
    if (!cJSON_IsNumber(v)) return lmc_fail(LMC_ERR_FORMAT, "'%.48s' must be a number", v->string);
    cJSON *old = cJSON_GetObjectItemCaseSensitive(out, v->string);
    if (old && cJSON_IsNumber(old) && (larger ? old->valuedouble >= v->valuedouble : old->valuedouble <= v->valuedouble)) return LMC_OK;
    cJSON_DeleteItemFromObjectCaseSensitive(out, v->string);
    cJSON_AddNumberToObject(out, v->string, v->valuedouble);
    return LMC_OK;
}

static lmc_status push_to(cJSON *out, const char *list, const cJSON *v) {
    cJSON *a = cJSON_GetObjectItemCaseSensitive(out, list);
    if (!a && !(a = cJSON_AddArrayToObject(out, list))) return lmc_fail(LMC_ERR_NOMEM, "schema");
    cJSON *d = cJSON_Duplicate(v, 1);
    if (!d) return lmc_fail(LMC_ERR_NOMEM, "schema");
    cJSON_AddItemToArray(a, d);
    return LMC_OK;
}

static lmc_status add_pattern(cJSON *out, const char *pattern) {
    cJSON *s = cJSON_CreateString(pattern);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "schema");
    lmc_status st = LMC_OK;
    if (!cJSON_HasObjectItem(out, "pattern")) cJSON_AddItemToObject(out, "pattern", s);
    else { st = push_to(out, "$lmc_patterns", s); cJSON_Delete(s); }
    return st;
}

static lmc_status fold(const members *ms, cJSON *out) {
    unsigned types = T_ALL;
    int typed = 0;
    cJSON *en = NULL; /* enum so far (owned) */
    lmc_status st = LMC_OK;
    for (int i = 0; i < ms->n && st >= 0; i++) {
        const cJSON *k;
        cJSON_ArrayForEach(k, ms->m[i]) {
            const char *key = k->string;
            if (is_annotation(key) || !strcmp(key, "additionalProperties")) continue;
            if (!strcmp(key, "type")) {
                unsigned b = type_of(k);
                if (!b) { st = lmc_fail(LMC_ERR_FORMAT, "schema 'type' must name JSON types"); break; }
                types &= b;
                typed = 1;
            } else if (!strcmp(key, "properties")) {
                if (!cJSON_IsObject(k)) { st = lmc_fail(LMC_ERR_FORMAT, "'properties' must be an object"); break; }
                cJSON *props = cJSON_GetObjectItemCaseSensitive(out, "properties");
                if (!props && !(props = cJSON_AddObjectToObject(out, "properties"))) { st = lmc_fail(LMC_ERR_NOMEM, "schema"); break; }
                const cJSON *p;
                cJSON_ArrayForEach(p, k) if ((st = meet(props, p->string, p)) < 0) break;
            } else if (!strcmp(key, "required")) {
                if (!cJSON_IsArray(k)) { st = lmc_fail(LMC_ERR_FORMAT, "'required' must be a list of property names"); break; }
                cJSON *req = cJSON_GetObjectItemCaseSensitive(out, "required");
                if (!req && !(req = cJSON_AddArrayToObject(out, "required"))) { st = lmc_fail(LMC_ERR_NOMEM, "schema"); break; }
                const cJSON *r, *q;
                cJSON_ArrayForEach(r, k) {
                    int have = 0;
                    cJSON_ArrayForEach(q, req) have |= cJSON_Compare(q, r, 1);
                    if (!have) cJSON_AddItemToArray(req, cJSON_Duplicate(r, 1));
                }
            } else if (!strcmp(key, "items")) st = meet(out, "items", k);
            else if (!strcmp(key, "minItems") || !strcmp(key, "minLength") || !strcmp(key, "minimum") || !strcmp(key, "exclusiveMinimum"))
                st = tighten(out, k, 1);
            else if (!strcmp(key, "maxItems") || !strcmp(key, "maxLength") || !strcmp(key, "maximum") || !strcmp(key, "exclusiveMaximum"))
                st = tighten(out, k, 0);
            else if (!strcmp(key, "enum") || !strcmp(key, "const")) {
                cJSON *vals = cJSON_CreateArray();
                if (!vals) { st = lmc_fail(LMC_ERR_NOMEM, "schema"); break; }
                if (!strcmp(key, "const")) cJSON_AddItemToArray(vals, cJSON_Duplicate(k, 1));
                else if (!cJSON_IsArray(k) || cJSON_GetArraySize(k) == 0) { cJSON_Delete(vals); st = lmc_fail(LMC_ERR_FORMAT, "'enum' must be a non-empty list"); break; }
                else { const cJSON *v; cJSON_ArrayForEach(v, k) cJSON_AddItemToArray(vals, cJSON_Duplicate(v, 1)); }
                if (en) { /* intersect */
                    cJSON *keep = cJSON_CreateArray();
                    const cJSON *a, *b;
                    cJSON_ArrayForEach(a, en) {
                        int hit = 0;
                        cJSON_ArrayForEach(b, vals) hit |= cJSON_Compare(a, b, 1);
                        if (hit) cJSON_AddItemToArray(keep, cJSON_Duplicate(a, 1));
                    }
                    cJSON_Delete(en);
                    cJSON_Delete(vals);
                    en = keep;
                } else en = vals;
            } else if (!strcmp(key, "pattern")) {
                if (!cJSON_IsString(k)) { st = lmc_fail(LMC_ERR_FORMAT, "'pattern' must be a string"); break; }
                st = add_pattern(out, k->valuestring);
            } else if (!strcmp(key, "format")) {
                const char *p = cJSON_IsString(k) ? lmc_jsformat_pattern(k->valuestring) : NULL;
                if (!p) { st = lmc_fail(LMC_ERR_UNSUPPORTED, "format '%.32s' is not supported for guided decoding (date, time, date-time, uuid, email, ipv4)",
                                        cJSON_IsString(k) ? k->valuestring : "?"); break; }
                st = add_pattern(out, p);
            } else if (!strcmp(key, "$lmc_patterns")) {
                const cJSON *p;
                cJSON_ArrayForEach(p, k) if (cJSON_IsString(p) && (st = add_pattern(out, p->valuestring)) < 0) break;
            } else if (!strcmp(key, "not")) st = push_to(out, "$lmc_not", k);
            else if (!strcmp(key, "$lmc_not")) {
                const cJSON *p;
                cJSON_ArrayForEach(p, k) if ((st = push_to(out, "$lmc_not", p)) < 0) break;
            } else {
                /* anything else: kept when the members agree, so the compiler names what it does not support */
                cJSON *old = cJSON_GetObjectItemCaseSensitive(out, key);
                if (old && !cJSON_Compare(old, k, 1)) { st = lmc_fail(LMC_ERR_UNSUPPORTED, "allOf members with different '%.48s' are not supported", key); break; }
                if (!old) cJSON_AddItemToObject(out, key, cJSON_Duplicate(k, 1));
            }
            if (st < 0) break;
        }
    }
    if (st >= 0 && typed) {
        if (!types) st = lmc_fail(LMC_ERR_FORMAT, "allOf members allow no common type");
        else cJSON_AddItemToObject(out, "type", type_json(types));
    }
    if (st >= 0 && en) {
        if (cJSON_GetArraySize(en) == 0) st = lmc_fail(LMC_ERR_FORMAT, "allOf members allow no common enum value");
        else { cJSON_AddItemToObject(out, "enum", en); en = NULL; }
    }
    cJSON_Delete(en);
    if (st < 0) return st;
    /* additionalProperties: a member's applies to the properties only other members declare */
    cJSON *props = cJSON_GetObjectItemCaseSensitive(out, "properties");
    int closed = 0;
    cJSON *addl = NULL;
    for (int i = 0; i < ms->n; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(ms->m[i], "additionalProperties");
        if (!a || cJSON_IsTrue(a)) continue;
        const cJSON *own = cJSON_GetObjectItemCaseSensitive(ms->m[i], "properties");
        /* the names first: meet() and deletion reorder the list */
        cJSON *names = cJSON_CreateArray();
        if (!names) return lmc_fail(LMC_ERR_NOMEM, "schema");
        const cJSON *p, *nm;
        cJSON_ArrayForEach(p, props) if (!cJSON_GetObjectItemCaseSensitive(own, p->string)) cJSON_AddItemToArray(names, cJSON_CreateString(p->string));
        lmc_status st2 = LMC_OK;
        cJSON_ArrayForEach(nm, names) {
            if (!cJSON_IsString(nm)) { st2 = lmc_fail(LMC_ERR_NOMEM, "schema"); break; }
            if (cJSON_IsFalse(a)) {
                const cJSON *req = cJSON_GetObjectItemCaseSensitive(out, "required"), *r;
                cJSON_ArrayForEach(r, req)
                    if (cJSON_IsString(r) && !strcmp(r->valuestring, nm->valuestring))
                        st2 = lmc_fail(LMC_ERR_FORMAT, "allOf: property '%.48s' is required by one member and excluded by another's additionalProperties", nm->valuestring);
                if (st2 < 0) break;
                cJSON_DeleteItemFromObjectCaseSensitive(props, nm->valuestring);
            } else if ((st2 = meet(props, nm->valuestring, a)) < 0) break;
        }
        cJSON_Delete(names);
        if (st2 < 0) return st2;
        if (cJSON_IsFalse(a)) closed = 1;
        else if (!closed) {
            if (!addl) { addl = cJSON_CreateObject(); if (!addl || !cJSON_AddArrayToObject(addl, "allOf")) { cJSON_Delete(addl); return lmc_fail(LMC_ERR_NOMEM, "schema"); } }
            cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(addl, "allOf"), cJSON_Duplicate(a, 1));
        }
    }
    if (closed) { cJSON_Delete(addl); cJSON_AddFalseToObject(out, "additionalProperties"); }
    else if (addl) cJSON_AddItemToObject(out, "additionalProperties", addl);
    return LMC_OK;
}

lmc_status lmc_jsmerge(const cJSON *doc, const cJSON *j, cJSON **out) {
    members ms = {0};
    ms.owned = cJSON_CreateArray();
    cJSON *base = cJSON_CreateObject(), *res = NULL;
    lmc_status st = ms.owned && base ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "schema");
    if (st >= 0) st = add_member(doc, j, &ms, 0);
    if (st >= 0) st = fold(&ms, base);
    if (st >= 0 && ms.n_alts == 0) { res = base; base = NULL; }
    else if (st >= 0) {
        /* distribute: one combination per choice in every alternatives list */
        long combos = 1;
        for (int i = 0; i < ms.n_alts; i++) {
            combos *= cJSON_GetArraySize(ms.alts[i]);
            if (combos > MAX_COMBOS) combos = MAX_COMBOS + 1;
        }
        if (combos > MAX_COMBOS) st = lmc_fail(LMC_ERR_UNSUPPORTED, "allOf over anyOf/oneOf lists makes more than %d combinations", MAX_COMBOS);
        res = cJSON_CreateObject();
        int one = ms.n_alts == 1 && ms.one_of[0]; /* oneOf[A,B] ∧ C is oneOf[A∧C, B∧C] */
        cJSON *list = st >= 0 && res ? cJSON_AddArrayToObject(res, one ? "oneOf" : "anyOf") : NULL;
        if (st >= 0 && !list) st = lmc_fail(LMC_ERR_NOMEM, "schema");
        for (long c = 0; st >= 0 && c < combos; c++) {
            cJSON *item = cJSON_CreateObject(), *all = item ? cJSON_AddArrayToObject(item, "allOf") : NULL;
            if (!all) { cJSON_Delete(item); st = lmc_fail(LMC_ERR_NOMEM, "schema"); break; }
            cJSON_AddItemToArray(all, cJSON_Duplicate(base, 1));
            long rest = c;
            for (int i = 0; i < ms.n_alts; i++) {
                int n = cJSON_GetArraySize(ms.alts[i]);
                cJSON_AddItemToArray(all, cJSON_Duplicate(cJSON_GetArrayItem(ms.alts[i], (int)(rest % n)), 1));
                rest /= n;
            }
            cJSON_AddItemToArray(list, item);
        }
    }
    cJSON_Delete(base);
    cJSON_Delete(ms.owned);
    if (st < 0) { cJSON_Delete(res); return st; }
    *out = res;
    return LMC_OK;
}
