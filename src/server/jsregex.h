/* jsregex.h — JSON Schema "pattern" regexes (an ECMA-262 subset) compiled to a DFA over
 * the UTF-8 bytes of a string's content, for guided decoding and validation.
 *
 * Supported: literals, '.', classes [...] with ranges and negation, \d \D \w \W \s \S,
 * \t \n \r \f \v \0 \xHH \uHHHH (surrogate pairs too), identity escapes of punctuation,
 * groups (...), (?:...), (?<name>...), alternation, quantifiers * + ? {n} {n,} {n,m}
 * (lazy forms too: the language is the same), and ^ / $ at the start / end of a
 * top-level alternative. Matching is a search, as JSON Schema says: an alternative
 * without ^ may begin anywhere, one without $ may end anywhere. Refused with a message:
 * lookaround, backreferences, \b \B, \p{...}, anchors elsewhere, and patterns whose
 * automaton would exceed LMC_RX_MAX_STATES states.
 * A compiled lmc_rx is immutable (share it freely); a match state is an int32.
 */
#ifndef LMC_SERVER_JSREGEX_H
#define LMC_SERVER_JSREGEX_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define LMC_RX_MAX_STATES 4096

typedef struct lmc_rx lmc_rx;

lmc_status lmc_rx_compile(const char *pattern, lmc_rx **out);
/* An automaton for strings both a and b match (allOf, pattern + format). */
lmc_status lmc_rx_and(const lmc_rx *a, const lmc_rx *b, lmc_rx **out);
void lmc_rx_free(lmc_rx *rx);
int32_t lmc_rx_start(const lmc_rx *rx);
/* The state after byte c, or -1 when no continuation can match any more. */
int32_t lmc_rx_next(const lmc_rx *rx, int32_t st, unsigned char c);
/* 1 when the bytes read so far match. */
int lmc_rx_accepts(const lmc_rx *rx, int32_t st);
/* The fewest code points that must still follow state st for a match (INT32_MAX: none can). */
int32_t lmc_rx_min_cps(const lmc_rx *rx, int32_t st);
/* 1 when the whole of s[0..n) matches. */
int lmc_rx_match(const lmc_rx *rx, const char *s, size_t n);
int lmc_rx_n_states(const lmc_rx *rx);

#endif
