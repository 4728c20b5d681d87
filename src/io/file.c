/* file.c — lmc_file_open_regular. */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

lmc_status lmc_file_open_regular(const char *path, int *fd_out, uint64_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return lmc_fail(e == ENOENT ? LMC_ERR_NOT_FOUND : LMC_ERR_IO, "cannot open %s: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return lmc_fail(LMC_ERR_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return lmc_fail(LMC_ERR_IO, "%s is not a regular file", path);
    }
    *fd_out = fd;
    *size = (uint64_t)sb.st_size;
    return LMC_OK;
}
