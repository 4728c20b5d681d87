/* jsvalid.c — lmc_jschema_validate (declared in jschema.h): a plain JSON Schema validator
 * over the schema document as written, for the keywords guided decoding supports. It
 * checks what a streaming recognizer leaves open (that exactly one oneOf alternative
 * matches) and serves tests as an independent check of the recognizer. Borrowed inputs
 * only; nothing is kept.
 */
#include "jschema.h"
#include "jsmerge.h"
#include "jsregex.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_VDEPTH 64

typedef struct vctx { const cJSON *doc; char *why; size_t cap; } vctx;

static int no(vctx *c, const char *fmt, ...) {
    if (c->why && c->cap && !c->why[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, c->cap, fmt, ap);
        va_end(ap);
    }
    return 0;
}

static int type_ok(const char *t, const cJSON *v) {
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    return 0;
}

static size_t code_points(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int pattern_ok(const char *pattern, const char *s) {
    lmc_rx *rx;
    if (lmc_rx_compile(pattern, &rx) < 0) return 0;
    int ok = lmc_rx_match(rx, s, strlen(s));
    lmc_rx_free(rx);
    return ok;
}

static int valid(vctx *c, const cJSON *sch, const cJSON *v, int strict, int depth);

static int valid_keywords(vctx *c, const cJSON *sch, const cJSON *v, int strict, int depth) {
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(sch, "$ref"))) {
        const cJSON *t;
        if (!cJSON_IsString(k) || lmc_jsref_resolve(c->doc, k->valuestring, &t) < 0) return no(c, "unresolvable $ref");
        if (!valid(c, t, v, strict, depth + 1)) return 0;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(sch, "type"))) {
        int ok = 0;
        if (cJSON_IsString(k)) ok = type_ok(k->valuestring, v);
        const cJSON *t;
        if (cJSON_IsArray(k)) cJSON_ArrayForEach(t, k) ok |= cJSON_IsString(t) && type_ok(t->valuestring, v);
        if (!ok) return no(c, "wrong type");
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(sch, "const")) && !cJSON_Compare(k, v, 1)) return no(c, "not the const value");
    if ((k = cJSON_GetObjectItemCaseSensitive(sch, "enum"))) {
        int hit = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, k) hit |= cJSON_Compare(e, v, 1);
        if (!hit) return no(c, "not an enum value");
    }
    if (cJSON_IsString(v)) {
        size_t n = code_points(v->valuestring);
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "minLength")) && cJSON_IsNumber(k) && n < k->valuedouble) return no(c, "shorter than minLength");
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "maxLength")) && cJSON_IsNumber(k) && n > k->valuedouble) return no(c, "longer than maxLength");
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "pattern")) && cJSON_IsString(k) && !pattern_ok(k->valuestring, v->valuestring))
            return no(c, "does not match pattern '%.48s'", k->valuestring);
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "format")) && cJSON_IsString(k)) {
            const char *p = lmc_jsformat_pattern(k->valuestring);
            if (p && !pattern_ok(p, v->valuestring)) return no(c, "not a valid %.32s", k->valuestring);
        }
    }
    if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "minimum")) && cJSON_IsNumber(k) && x < k->valuedouble) return no(c, "below minimum");
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "maximum")) && cJSON_IsNumber(k) && x > k->valuedouble) return no(c, "above maximum");
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "exclusiveMinimum")) && cJSON_IsNumber(k) && x <= k->valuedouble) return no(c, "not above exclusiveMinimum");
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "exclusiveMaximum")) && cJSON_IsNumber(k) && x >= k->valuedouble) return no(c, "not below exclusiveMaximum");
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(sch, "properties");
        const cJSON *addl = cJSON_GetObjectItemCaseSensitive(sch, "additionalProperties");
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, e->string);
            if (ps) { if (!valid(c, ps, e, 1, depth + 1)) return 0; continue; }
            if (addl) { if (!valid(c, addl, e, 1, depth + 1)) return no(c, "property '%.48s' is not allowed", e->string); }
            else if (props && strict) return no(c, "property '%.48s' is not allowed", e->string);
        }
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(sch, "required"), *r;
        cJSON_ArrayForEach(r, req)
            if (cJSON_IsString(r) && !cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) return no(c, "'%.48s' is required", r->valuestring);
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "minItems")) && cJSON_IsNumber(k) && n < k->valuedouble) return no(c, "fewer than minItems");
        if ((k = cJSON_GetObjectItemCaseSensitive(sch, "maxItems")) && cJSON_IsNumber(k) && n > k->valuedouble) return no(c, "more than maxItems");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(sch, "items"), *e;
        if (items) cJSON_ArrayForEach(e, v) if (!valid(c, items, e, 1, depth + 1)) return 0;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(sch, "allOf"))) {
        const cJSON *e;
        cJSON_ArrayForEach(e, k) if (!valid(c, e, v, 0, depth + 1)) return 0;
    }
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(sch, "anyOf"), *one = cJSON_GetObjectItemCaseSensitive(sch, "oneOf");
    const cJSON *lists[2] = {any, one};
    for (int l = 0; l < 2; l++) {
        if (!lists[l]) continue;
        int hits = 0;
        const cJSON *e;
        char keep = c->why ? c->why[0] : 0;
        cJSON_ArrayForEach(e, lists[l]) hits += valid(c, e, v, strict, depth + 1);
        if (c->why && c->cap) c->why[0] = keep; /* the alternatives' own reasons are not the answer */
        if (l == 0 && hits == 0) return no(c, "matches no anyOf alternative");
        if (l == 1 && hits != 1) return no(c, hits ? "matches %d oneOf alternatives (exactly one is allowed)" : "matches no oneOf alternative", hits);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(sch, "not"))) {
        char keep = c->why ? c->why[0] : 0;
        int hit = valid(c, k, v, strict, depth + 1);
        if (c->why && c->cap) c->why[0] = keep;
        if (hit) return no(c, "matches 'not'");
    }
    return 1;
}

static int valid(vctx *c, const cJSON *sch, const cJSON *v, int strict, int depth) {
    if (depth > MAX_VDEPTH) return no(c, "the schema nests too deep");
    if (cJSON_IsTrue(sch)) return 1;
    if (!cJSON_IsObject(sch)) return no(c, "false schema");
    return valid_keywords(c, sch, v, strict, depth);
}

int lmc_jschema_validate(const cJSON *schema, const char *text, size_t n, char *why, size_t why_cap) {
    vctx c = {schema, why, why_cap};
    if (why && why_cap) why[0] = 0;
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!v) return no(&c, "not JSON");
    while (end && end < text + n && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
    int ok = end == text + n ? valid(&c, schema, v, 1, 0) : no(&c, "text after the JSON value");
    cJSON_Delete(v);
    return ok;
}
