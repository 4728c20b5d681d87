/* proc_status.h — one value of /proc/self/status, for the tests and benchmarks that measure memory. */
#ifndef LMC_TESTS_PROC_STATUS_H
#define LMC_TESTS_PROC_STATUS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* kB of a "Key:   N kB" line of /proc/self/status (-1 when absent). */
static inline long proc_status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    const size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') v = atol(line + n + 1);
    if (f) fclose(f);
    return v;
}

#endif
