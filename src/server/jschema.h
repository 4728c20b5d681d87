/* jschema.h — JSON Schema guided decoding: a schema compiled into nodes and a
 * byte-level recognizer that accepts exactly the JSON texts (prefix by prefix)
 * the schema allows, for response_format json_schema.
 *
 * Supported keywords: type (a name or a list, e.g. ["string","null"]), properties,
 * required, additionalProperties (false, true or a schema; absent with properties
 * means false, as OpenAI's strict mode), items, minItems, maxItems, enum, const,
 * minLength/maxLength (code points; a \u escape counts as one), minimum/maximum and
 * exclusiveMinimum/exclusiveMaximum for "integer" only (|bound| < 1e15), anyOf/oneOf
 * whose alternatives differ in their first byte (e.g. a string or null; not two
 * objects), $ref to a JSON pointer within the document ($defs/definitions;
 * recursion allowed), and the annotations title/description/default/examples/
 * $schema/$id/$comment. Anything else (pattern, format, allOf, not, minimum on
 * "number", …) is refused at compile time with a message naming it — never
 * silently ignored. Objects have at most 64 properties.
 * A compiled schema is owned by its lmc_jschema; states are plain values (copy
 * them to try a candidate token).
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

typedef struct lmc_jsstate {
    uint8_t mode, sub, ws, depth;
    const lmc_js_node *value;  /* schema of the value being read (strings, numbers, literals) */
    uint64_t cand;             /* key / enum candidates still matching */
    int32_t pos;               /* bytes matched in a key / enum literal; code points of a string value */
    uint8_t lit, is_key, integer, neg;
    uint8_t u8;                /* continuation bytes still due in a string's UTF-8 character */
    int64_t ival;              /* magnitude of an integer being read (only with a range) */
    lmc_js_frame stack[LMC_JS_MAX_DEPTH];
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

#endif
