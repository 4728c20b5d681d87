/* stop.h — text checks for generated output and request bodies: stop-string
 * search, the hold-back length that keeps a possible stop prefix unsent, and
 * strict UTF-8 validation. Pure functions over borrowed buffers. */
#ifndef LMC_SERVER_STOP_H
#define LMC_SERVER_STOP_H

#include <stddef.h>

/* Earliest position ≥ from where any stop string occurs in text[0..len) ((size_t)-1 if none);
 * *which gets its index. */
size_t lmc_stop_find(const char *text, size_t len, size_t from, char *const *stops, int n_stop, int *which);
/* Length of the longest suffix of text that is a proper prefix of some stop string. */
size_t lmc_stop_holdback(const char *text, size_t len, char *const *stops, int n_stop);
/* 1 when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF). */
int lmc_utf8_valid(const char *s, size_t n);

#endif
