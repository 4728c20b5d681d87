/* fuzz.h — what the fuzz targets in tests/fuzz/ share.
 *
 * Each target file fuzz_<name>.c defines `int fuzz_<name>(const uint8_t *d, size_t n)`
 * (and optionally `int fuzz_<name>_init(void)`), which feeds one input to lmc's real
 * entry points and checks invariants with FUZZ_CHECK. Built with -DLMC_FUZZ_LIBFUZZER
 * (make fuzz) the file also defines libFuzzer's entry points and a failed check aborts;
 * built into tests/unit/test_fuzz_regress.c (make test) the same function replays the
 * committed seeds and regression inputs, and a failed check counts as a test failure.
 */
#ifndef LMC_FUZZ_H
#define LMC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LMC_FUZZ_LIBFUZZER
#define FUZZ_CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "FUZZ_CHECK failed %s:%d: %s\n", __FILE__, __LINE__, #cond); abort(); } } while (0)
#else
static int fuzz_check_failures_;
#define FUZZ_CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "  FUZZ_CHECK failed %s:%d: %s\n", __FILE__, __LINE__, #cond); fuzz_check_failures_++; } } while (0)
#endif

/* A NUL-terminated malloc'ed copy of d[0..n) (NULL when out of memory). */
static inline char *fuzz_strndup(const uint8_t *d, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, d, n);
    s[n] = 0;
    return s;
}

/* Split d[0..n) at the first occurrence of sep (not included in either part). Returns 1
 * and the second part in *rest, *rest_n when sep occurs; 0 (whole input in *head_n) otherwise. */
static inline int fuzz_split(const uint8_t *d, size_t n, const char *sep, size_t *head_n, const uint8_t **rest,
                             size_t *rest_n) {
    size_t k = strlen(sep);
    for (size_t i = 0; k && i + k <= n; i++) {
        if (memcmp(d + i, sep, k) == 0) {
            *head_n = i;
            *rest = d + i + k;
            *rest_n = n - i - k;
            return 1;
        }
    }
    *head_n = n;
    *rest = NULL;
    *rest_n = 0;
    return 0;
}

/* The repository root (tests read committed files from it), derived from the demo
 * model's directory that the Makefile compiles in. */
static inline const char *fuzz_repo_root(void) {
    static char root[4096];
    if (!root[0]) {
        snprintf(root, sizeof root, "%s", LMC_DEMO_DIR);
        char *p = strstr(root, "/models/demo");
        if (p) *p = 0;
    }
    return root;
}

#endif
