/* status.c — the per-thread last-error message behind lmc_fail(). */
#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

lmc_status lmc_fail(lmc_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

lmc_status lmc_fail_context(lmc_status st, const char *fmt, ...) {
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t np = strlen(prefix), no = strlen(old), cap = sizeof last_error - 1;
    if (np > cap) np = cap;
    memcpy(last_error, prefix, np);
    size_t at = np;
    if (at + 2 <= cap) { memcpy(last_error + at, ": ", 2); at += 2; }
    if (no > cap - at) no = cap - at;
    memcpy(last_error + at, old, no);
    last_error[at + no] = 0;
    return st;
}

const char *lmc_last_error(void) { return last_error; }
void lmc_clear_error(void) { last_error[0] = 0; }

const char *lmc_status_name(lmc_status st) {
    switch (st) {
    case LMC_OK: return "ok";
    case LMC_ERR_IO: return "i/o error";
    case LMC_ERR_FORMAT: return "malformed input";
    case LMC_ERR_UNSUPPORTED: return "unsupported";
    case LMC_ERR_NOMEM: return "out of memory";
    case LMC_ERR_ARG: return "invalid argument";
    case LMC_ERR_AUDIT: return "weight audit failed";
    case LMC_ERR_NOT_FOUND: return "not found";
    case LMC_ERR_RANGE: return "out of range";
    }
    return "unknown status";
}

void lmc_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "lmc: internal error: assertion `%s` failed at %s:%d\n", expr, file, line);
    abort();
}
