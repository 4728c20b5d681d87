/* mapguard.h — turn SIGBUS on a model file that was truncated while mapped into one
 * clear line and a documented exit status instead of a crash.
 *
 * Loaders that mmap a file (safetensors shards, GGUF files, tokenizer.json while it is
 * parsed) register the mapping here and unregister it before munmap. The registry is a
 * fixed-size table of atomics, readable from a signal handler. The library never installs
 * the handler itself: a program (the lmc CLI, at start) calls lmc_mapguard_install() once.
 *
 *     lmc_mapguard_install();                       // apps/lmc/main.c, before anything else
 *     lmc_mapguard_register(map, len, path);        // loader, after mmap
 *     lmc_mapguard_unregister(map);                 // loader, before munmap
 *
 * With the handler installed, a SIGBUS whose fault address lies in a registered mapping
 * (on any thread: CPU-backend workers, server threads) writes
 *     lmc: <path> changed on disk while in use (truncated?): cannot read its weights; ...
 * to stderr with write(2) and ends the whole process with _exit(LMC_MAPGUARD_EXIT_STATUS).
 * Any other SIGBUS goes to the handler that was installed before (ASan's, for example) or,
 * when there was none, is re-raised with the default action (the process dies by signal 7).
 */
#ifndef LMC_IO_MAPGUARD_H
#define LMC_IO_MAPGUARD_H

#include <stddef.h>

#include "core/status.h"

/* Exit status after a SIGBUS in a registered mapping (sysexits.h EX_IOERR). */
#define LMC_MAPGUARD_EXIT_STATUS 74

/* Slots in the registry (one per live mapping) and the bytes of a path kept per slot
 * (longer paths keep their last bytes behind "..."). */
#define LMC_MAPGUARD_MAX_MAPS 512
#define LMC_MAPGUARD_PATH_MAX 512

/* Record [base, base + len) as the mapping of `path`. Thread-safe. Returns LMC_OK, or
 * LMC_ERR_RANGE (with a last-error message) when the table is full or base/len is empty;
 * callers treat that as "this mapping is not guarded" and go on (a SIGBUS in it then
 * kills the process as without the guard). */
lmc_status lmc_mapguard_register(const void *base, size_t len, const char *path);

/* Forget the mapping that starts at `base` (a no-op when it is not registered). Call it
 * before munmap. Thread-safe. */
void lmc_mapguard_unregister(const void *base);

/* Install the SIGBUS handler (sigaction, SA_SIGINFO). Idempotent and thread-safe; the
 * handler that was installed before is kept and called for faults outside registered
 * mappings. Returns LMC_ERR_IO when sigaction fails and LMC_ERR_UNSUPPORTED when the handler
 * does not stay installed (ASan with allow_user_segv_handler=0 ignores it). */
lmc_status lmc_mapguard_install(void);

/* Live registered mappings (for tests and diagnostics). */
int lmc_mapguard_count(void);

/* Copy the path of the registered mapping that contains `addr` into out (NUL-terminated,
 * at most cap bytes). Returns 1 when found, 0 otherwise. Async-signal-safe: it is what the
 * handler uses. */
int lmc_mapguard_lookup(const void *addr, char *out, size_t cap);

/* 1 when [p, p + n) lies inside one registered mapping (two mappings side by side do not count:
 * what lies between them may be anything). */
int lmc_mapguard_contains(const void *p, size_t n);

#endif
