/* jschema.h — JSON Schema guided decoding: a schema compiled into nodes and a
 * byte-level recognizer that accepts exactly the JSON texts (prefix by prefix)
 * the schema allows, for response_format json_schema and tool arguments.
 *
 * Supported keywords: type (a name or a list), properties, required,
 * additionalProperties (false, true or a schema; absent with properties means false,
 * as OpenAI's strict mode), items, minItems, maxItems, enum, const, minLength/maxLength
 * (code points; a \u escape counts as one), pattern (an ECMA-262 subset, see
 * jsregex.h; matched on the decoded string; no \u escapes are written in such a string,
 * and maxLength is weighed against what the pattern still needs), format date, time, date-time, uuid, email,
 * ipv4 (as patterns; a date's day is checked against its month, not leap years),
 * minimum/maximum/exclusiveMinimum/exclusiveMaximum (integers exactly, digit by digit;
 * numbers too: a number may only grow while some continuation stays in range, with no
 * exponent, and it ends only inside the range), anyOf/oneOf (alternatives run in
 * parallel, so they may begin alike; oneOf is decoded as anyOf — that exactly one
 * alternative matches is checked after the fact by lmc_jschema_validate), allOf (merged
 * into one schema: types intersect, properties and required unite, bounds tighten,
 * patterns combine, alternatives distribute; an allOf member's additionalProperties
 * applies to the properties the other members add), not with type, enum or const
 * (excluded types and values), $ref to a JSON pointer within the document
 * ($defs/definitions; recursion allowed), and the annotations title/description/
 * default/examples/$schema/$id/$comment. Anything else (multipleOf, uniqueItems,
 * patternProperties, other formats, not over objects, …) is refused at compile time
 * with a message naming it — never silently ignored. Objects have at most 64 properties.
 * A compiled schema is owned by its lmc_jschema; states are plain values (copy
 * them to try a candidate token). A state holds up to LMC_JS_MAX_THREADS parallel
 * readings; beyond that, later alternatives are dropped (output stays valid).
 */
#ifndef LMC_SERVER_JSCHEMA_H
#define LMC_SERVER_JSCHEMA_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "core/status.h"

#define LMC_JS_MAX_DEPTH 16

typedef struct lmc_js_node lmc_js_node;
typedef struct lmc_jschema lmc_jschema;

typedef struct lmc_js_frame {
    const lmc_js_node *node;  /* schema of the container (or of the value being read) */
    uint8_t kind;             /* '{' or '[' */
    uint8_t key_done;         /* object: a key has been read, its value comes next */
    int16_t key;              /* object: index of the current key's property (-1: free key) */
    uint64_t used;            /* object: properties already present */
    int32_t n_items;          /* array: items so far */
} lmc_js_frame;

/* One reading of the text (one choice among anyOf alternatives so far). */
typedef struct lmc_js_thread {
    uint8_t mode, sub, ws, depth;
    const lmc_js_node *value;  /* schema of the value being read (strings, numbers, literals) */
    uint64_t cand;             /* key / enum candidates still matching */
    int32_t pos;               /* bytes matched in a key / enum literal; code points of a string value */
    uint8_t lit, is_key, integer, neg;
    uint8_t u8;                /* continuation bytes still due in a string's UTF-8 character */
    uint8_t num_len;           /* bytes in num */
    uint16_t hex;              /* a \u escape's value so far */
    int32_t rx;                /* pattern automaton state of a string value */
    int32_t xpos;              /* decoded bytes of a string value (for excluded strings) */
    uint64_t xcand;            /* excluded strings still equal to the string so far */
    int64_t ival;              /* magnitude of an integer being read (only with a range) */
    char num[32];              /* the number's text (only with number bounds or excluded numbers) */
    lmc_js_frame stack[LMC_JS_MAX_DEPTH];
} lmc_js_thread;

#define LMC_JS_MAX_THREADS 8

typedef struct lmc_jsstate {
    int n;                     /* live readings (0: the text cannot be completed) */
    lmc_js_thread t[LMC_JS_MAX_THREADS];
} lmc_jsstate;

/* Compile a schema; LMC_ERR_UNSUPPORTED / LMC_ERR_FORMAT with a message naming the problem. */
lmc_status lmc_jschema_compile(const cJSON *schema, lmc_jschema **out);
void lmc_jschema_free(lmc_jschema *s);
void lmc_jsstate_init(lmc_jsstate *st, const lmc_jschema *s);
/* 0 while the bytes keep a valid prefix of a schema-conforming text, -1 otherwise. */
int lmc_jsstate_feed(lmc_jsstate *st, const char *p, size_t n);
/* 1 when a complete conforming value has been read. */
int lmc_jsstate_done(const lmc_jsstate *st);
/* Copy only the live part of a state (cheaper than a struct copy for trials). */
void lmc_jsstate_copy(lmc_jsstate *dst, const lmc_jsstate *src);
/* The full semantics of the schema document (the one compiled; oneOf exactly one, number
 * bounds, patterns, not, …) checked on a complete JSON text: 1 valid, 0 not (*why says
 * where, when why is given). The strict-mode default applies: properties without
 * additionalProperties allow no other keys (not inside allOf members). */
int lmc_jschema_validate(const cJSON *schema, const char *text, size_t n, char *why, size_t why_cap);

#endif
