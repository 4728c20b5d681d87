/* status.h — error handling shared by every lmc module.
 *
 * Three tiers (STYLE.md): LMC_ASSERT for programming bugs (aborts with
 * file:line); lmc_status returns for everything that can go wrong at run time
 * (negative = error, 0 = ok); and a last-error message, kept per thread, that
 * the CLI and the server show to the user. Library code never prints or exits.
 */
#ifndef LMC_CORE_STATUS_H
#define LMC_CORE_STATUS_H

#include <stdarg.h>

#include "lmc.h" /* lmc_status and lmc_last_error() are public */

/* Record a formatted message as this thread's last error and return `st`,
 * so call sites read: `return lmc_fail(LMC_ERR_FORMAT, "bad header in %s", p);` */
lmc_status lmc_fail(lmc_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefix the current last-error message with context ("loading x: ..."). */
lmc_status lmc_fail_context(lmc_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void lmc_clear_error(void);
const char *lmc_status_name(lmc_status st);

/* Abort with file:line on a broken invariant (a bug, never bad input). */
void lmc_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define LMC_ASSERT(x) ((x) ? (void)0 : lmc_assert_fail(#x, __FILE__, __LINE__))

/* Propagate an error status unchanged. */
#define LMC_TRY(expr) do { lmc_status st_try_ = (expr); if (st_try_ < 0) return st_try_; } while (0)

#endif
