/* file.h — opening the files lmc reads, with the same errors everywhere. */
#ifndef LMC_IO_FILE_H
#define LMC_IO_FILE_H

#include <stdint.h>

#include "core/status.h"

/* Open `path` read-only; it must be a regular file. On success *fd is open
 * (the caller closes it) and *size is its length. Errors: LMC_ERR_NOT_FOUND,
 * LMC_ERR_IO (cannot open or stat, not a regular file), each naming the path. */
lmc_status lmc_file_open_regular(const char *path, int *fd, uint64_t *size);

#endif
