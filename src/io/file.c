/* file.c — lmc_file_open_regular, lmc_file_map (file pages or a private copy). */
#include "file.h"
#include "mapguard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_int copy_mode_ = -1; /* -1: not decided yet (LMC_NO_MMAP decides) */

void lmc_file_set_copy(int on) { atomic_store(&copy_mode_, on ? 1 : 0); }

/* The live --no-mmap copies: lmc_file_release gives back pages inside one (the process's own memory,
 * which nothing reads once a weight's rewritten copy is made), and only there. */
enum { COPIES_MAX = 512 };
static struct {
    const void *base;
    size_t len;
} copies_[COPIES_MAX];
static pthread_mutex_t copies_mu_ = PTHREAD_MUTEX_INITIALIZER;

static void copies_note(const void *base, size_t len) { /* len 0: forget base */
    pthread_mutex_lock(&copies_mu_);
    for (int i = 0; i < COPIES_MAX; i++)
        if (len ? !copies_[i].base : copies_[i].base == base) {
            copies_[i].base = len ? base : NULL;
            copies_[i].len = len;
            break;
        }
    pthread_mutex_unlock(&copies_mu_);
}

static int in_copy(const void *p, size_t n) {
    int in = 0;
    pthread_mutex_lock(&copies_mu_);
    for (int i = 0; i < COPIES_MAX && !in; i++)
        in = copies_[i].base && (uintptr_t)p >= (uintptr_t)copies_[i].base &&
             (uintptr_t)p + n <= (uintptr_t)copies_[i].base + copies_[i].len;
    pthread_mutex_unlock(&copies_mu_);
    return in;
}

static atomic_int lock_mode_; /* 1: lmc_file_map locks what it maps (--mlock) */
void lmc_file_set_lock(int on) { atomic_store(&lock_mode_, on ? 1 : 0); }
int lmc_file_lock_mode(void) { return atomic_load(&lock_mode_); }

/* map (size bytes of path) locked in memory, or unmapped and an error naming the limit */
static lmc_status lock_fail(int e, size_t size, const char *path) {
    struct rlimit rl;
    char lim[64] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY) snprintf(lim, sizeof lim, "unlimited");
        else snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)rl.rlim_cur);
    }
    return lmc_fail(LMC_ERR_NOMEM, "--mlock: cannot lock the %zu bytes of %s in memory: %s (locked-memory limit, ulimit -l: %s)",
                    size, path, strerror(e), lim);
}

static lmc_status lock_or_fail(void *map, size_t size, const char *path) {
    if (!atomic_load(&lock_mode_) || mlock(map, size) == 0) return LMC_OK;
    const int e = errno;
    lmc_file_unmap(map, size);
    return lock_fail(e, size, path);
}

lmc_status lmc_file_lock_memory(const void *p, size_t size, const char *what) {
    if (!atomic_load(&lock_mode_) || !size || mlock(p, size) == 0) return LMC_OK;
    return lock_fail(errno, size, what);
}

int lmc_file_copy_mode(void) {
    int m = atomic_load(&copy_mode_);
    if (m < 0) {
        const char *e = getenv("LMC_NO_MMAP");
        m = e && *e && strcmp(e, "0") != 0;
        int expect = -1;
        if (!atomic_compare_exchange_strong(&copy_mode_, &expect, m)) m = expect;
    }
    return m;
}

/* size bytes of fd into a fresh private anonymous mapping, read-only afterwards. */
static lmc_status map_copy(int fd, size_t size, const char *path, void **out) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return lmc_fail(LMC_ERR_NOMEM, "cannot allocate %zu bytes to read %s into", size, path);
    size_t at = 0;
    while (at < size) {
        size_t want = size - at < ((size_t)1 << 30) ? size - at : ((size_t)1 << 30);
        ssize_t got = pread(fd, (char *)p + at, want, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            int e = got < 0 ? errno : 0;
            munmap(p, size);
            if (!e) return lmc_fail(LMC_ERR_IO, "%s: the file ended after %zu of %zu bytes while it was read", path, at, size);
            return lmc_fail(LMC_ERR_IO, "cannot read %s: %s", path, strerror(e));
        }
        at += (size_t)got;
    }
    (void)mprotect(p, size, PROT_READ);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* the copy is what stays resident */
    LMC_TRY(lock_or_fail(p, size, path));
    copies_note(p, size); /* a full table: its pages are only offered for reclaim */
    *out = p;
    return LMC_OK;
}

lmc_status lmc_file_map(int fd, uint64_t size, const char *path, void **out) {
    if (size == 0) return lmc_fail(LMC_ERR_IO, "%s is empty", path);
    if (size > (uint64_t)SIZE_MAX) return lmc_fail(LMC_ERR_IO, "%s is too large to map", path);
    if (lmc_file_copy_mode()) return map_copy(fd, (size_t)size, path, out);
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        int e = errno;
        return lmc_fail(LMC_ERR_IO, "cannot mmap %s: %s", path, strerror(e));
    }
    (void)lmc_mapguard_register(map, (size_t)size, path); /* best effort: full table = unguarded */
    LMC_TRY(lock_or_fail(map, (size_t)size, path));
    *out = map;
    return LMC_OK;
}

int lmc_file_is_mapped(const void *p, size_t n) { return lmc_mapguard_contains(p, n); }

void lmc_file_release(const void *p, size_t n) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)p + pg - 1) / pg * pg,
                    e = ((uintptr_t)p + n) / pg * pg;
    if (e <= a) return;
    if (atomic_load(&lock_mode_)) (void)munlock((const void *)a, e - a); /* locked pages would stay */
    if (lmc_file_is_mapped((const void *)a, e - a)) {
        (void)madvise((void *)a, e - a, MADV_DONTNEED);
        return;
    }
    if (in_copy(p, n)) {
        /* the memory goes back, the addresses stay the copy's (unmapped, a later mapping could land
         * there and go with the copy's munmap); a stray read now faults instead of finding zeros */
        (void)madvise((void *)a, e - a, MADV_DONTNEED);
        (void)mprotect((void *)a, e - a, PROT_NONE);
        return;
    }
#ifdef MADV_PAGEOUT
    (void)madvise((void *)a, e - a, MADV_PAGEOUT);
#endif
}

void lmc_file_unmap(void *map, size_t size) {
    if (!map) return;
    lmc_mapguard_unregister(map); /* a no-op for a copy */
    copies_note(map, 0);              /* a no-op for a mapping */
    munmap(map, size);
}

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
