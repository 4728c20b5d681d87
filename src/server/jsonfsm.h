/* jsonfsm.h — a byte-level JSON prefix recognizer for constrained decoding.
 *
 * The state is a small value (copy it to try a candidate token): feeding bytes
 * answers whether the text so far can still be extended into one valid JSON
 * value (RFC 8259; for response_format json_object the top level must be an
 * object), and lmc_jfsm_done tells when that value is complete. String contents must
 * be well-formed UTF-8 (constrained decoding sees raw bytes, so a token that would leave
 * a character unfinished or broken is refused). No whitespace
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
    uint8_t u8;            /* continuation bytes still due in a string's UTF-8 character */
    char stack[LMC_JFSM_MAX_DEPTH];  /* '{' or '[' */
} lmc_jfsm;

void lmc_jfsm_init(lmc_jfsm *j, int object_only);
/* Feed bytes: 0 while the text is a valid prefix, -1 once it cannot be (the state is then undefined). */
int lmc_jfsm_feed(lmc_jfsm *j, const char *s, size_t n);
/* 1 when a complete top-level value has been read (only whitespace may follow). */
int lmc_jfsm_done(const lmc_jfsm *j);
/* One byte of a string's UTF-8 text: 0 while it stays well-formed (no stray continuation
 * byte, no C0/C1/F5..FF lead, no character cut short), -1 otherwise; *pending holds the
 * continuation bytes still due (0 between characters). Shared with jschema.c. */
int lmc_jfsm_utf8(uint8_t *pending, int c);

#endif
