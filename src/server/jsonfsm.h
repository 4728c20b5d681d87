/* jsonfsm.h — a byte-level JSON prefix recognizer for constrained decoding.
 *
 * The state is a small value (copy it to try a candidate token): feeding bytes
 * answers whether the text so far can still be extended into one valid JSON
 * value (RFC 8259; for response_format json_object the top level must be an
 * object), and lmc_jfsm_done tells when that value is complete. No whitespace
 * may precede the top-level value and runs of it are capped (LMC_JFSM_MAX_WS), so a
 * model cannot stall in whitespace; the output is still plain RFC 8259 JSON.
 */
#ifndef LMC_SERVER_JSONFSM_H
#define LMC_SERVER_JSONFSM_H

#include <stddef.h>
#include <stdint.h>

#define LMC_JFSM_MAX_DEPTH 48
#define LMC_JFSM_MAX_WS 2

typedef struct lmc_jfsm {
    uint8_t mode;          /* lexer mode (jsonfsm.c) */
    uint8_t sub;           /* position inside a literal / \u escape / number part */
    uint8_t in_key;        /* the current string is an object key */
    uint8_t object_only;   /* top level must be an object */
    uint8_t ws;            /* consecutive whitespace bytes */
    uint8_t depth;
    char stack[LMC_JFSM_MAX_DEPTH];  /* '{' or '[' */
} lmc_jfsm;

void lmc_jfsm_init(lmc_jfsm *j, int object_only);
/* Feed bytes: 0 while the text is a valid prefix, -1 once it cannot be (the state is then undefined). */
int lmc_jfsm_feed(lmc_jfsm *j, const char *s, size_t n);
/* 1 when a complete top-level value has been read (only whitespace may follow). */
int lmc_jfsm_done(const lmc_jfsm *j);

#endif
