/* file.h — opening and mapping the files lmc reads, with the same errors everywhere. */
#ifndef LMC_IO_FILE_H
#define LMC_IO_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Open `path` read-only; it must be a regular file. On success *fd is open
 * (the caller closes it) and *size is its length. Errors: LMC_ERR_NOT_FOUND,
 * LMC_ERR_IO (cannot open or stat, not a regular file), each naming the path. */
lmc_status lmc_file_open_regular(const char *path, int *fd, uint64_t *size);

/* The whole of an open file (size > 0 bytes, as lmc_file_open_regular gave it), read-only:
 * by default the file's own pages (mmap MAP_PRIVATE, registered with io/mapguard.h, so a
 * truncation after this call ends the process with a message when a dropped page is
 * touched); in copy mode a private anonymous copy read with pread, which a later change
 * or truncation of the file cannot reach (the process's memory holds every byte; the
 * file's page cache is dropped after the read). Errors: LMC_ERR_IO naming the path (also
 * when the file is shorter than size by the time it is read). Release with lmc_file_unmap. */
lmc_status lmc_file_map(int fd, uint64_t size, const char *path, void **map);
void lmc_file_unmap(void *map, size_t size);

/* Bytes [p, p + n) that this process will not read again (whole pages inside the range): inside one
 * file mapping of lmc_file_map (registered with mapguard: read-only, private, never written) they are
 * dropped from the process (MADV_DONTNEED; a later read faults them in again from the file, which
 * stays in the page cache); inside one --no-mmap copy of lmc_file_map they are given back and made
 * inaccessible (MADV_DONTNEED, PROT_NONE: a later read faults); elsewhere (a caller's buffer) only offered for reclaim
 * (MADV_PAGEOUT, which keeps the data). A hint: failure changes nothing. */
void lmc_file_release(const void *p, size_t n);
/* 1 when [p, p + n) lies inside one file mapping of lmc_file_map (mapguard's registry). */
int lmc_file_is_mapped(const void *p, size_t n);

/* Copy mode for every later lmc_file_map (process-wide; `--no-mmap`, or LMC_NO_MMAP=1 in
 * the environment). */
void lmc_file_set_copy(int on);
int lmc_file_copy_mode(void);
/* Lock mode for every later lmc_file_map (process-wide; `--mlock`): what it maps (the file's pages or
 * the copy) is locked in memory (mlock), so the kernel never reclaims it, under memory pressure or by
 * proactive reclaim; lmc_file_release unlocks what it releases. A limit on locked memory too small
 * (RLIMIT_MEMLOCK, ulimit -l) makes lmc_file_map fail with LMC_ERR_NOMEM. */
void lmc_file_set_lock(int on);
/* In lock mode, lock [p, p + size) too (memory holding weights read from a file: a rewritten copy);
 * the error names --mlock and the limit, as lmc_file_map's. LMC_OK otherwise. */
lmc_status lmc_file_lock_memory(const void *p, size_t size, const char *what);
int lmc_file_lock_mode(void);

#endif
