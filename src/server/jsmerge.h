/* jsmerge.h — schema rewriting for guided decoding: allOf merged into one schema
 * (with anyOf/oneOf members distributed over the rest), and the "format" names lmc
 * turns into patterns. Results are new cJSON trees the caller owns; the inputs are
 * only read. Used by jschema.c; the semantics are listed in jschema.h.
 */
#ifndef LMC_SERVER_JSMERGE_H
#define LMC_SERVER_JSMERGE_H

#include <cjson/cJSON.h>

#include "core/status.h"

/* The pattern (jsregex.h syntax) for a "format" value, or NULL when lmc does not support it. */
const char *lmc_jsformat_pattern(const char *format);

/* j: a schema object that has allOf, or anyOf/oneOf/$ref beside other keywords. *out: an
 * equivalent schema without allOf at its top (perhaps {"anyOf": [...]} of merged members).
 * doc resolves "$ref"s of the members (JSON pointers into it). */
lmc_status lmc_jsmerge(const cJSON *doc, const cJSON *j, cJSON **out);

/* The target of a "$ref" JSON pointer within doc (#, #/$defs/x, …). */
lmc_status lmc_jsref_resolve(const cJSON *doc, const char *ref, const cJSON **out);

#endif
