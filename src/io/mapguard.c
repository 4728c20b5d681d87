/* mapguard.c — registry of mapped model files and the SIGBUS handler that reads it.
 *
 * Owns a static table of LMC_MAPGUARD_MAX_MAPS slots (no allocation, so the handler can
 * read it) and the previously installed SIGBUS action. A slot is claimed and released with
 * compare-and-swap on its state; its generation counter is bumped on every change so that a
 * lookup racing a change (a seqlock read) never reports a path torn between two mappings.
 * The handler uses only async-signal-safe calls: write(2), _exit(2), sigaction, raise, pause.
 * Mappings are registered by their loaders (safetensors.c, gguf.c, tokenizer.c).
 */
#include "io/mapguard.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#if ATOMIC_INT_LOCK_FREE != 2 || ATOMIC_POINTER_LOCK_FREE != 2
#error "mapguard needs lock-free atomics (they are read from a signal handler)"
#endif

enum { SLOT_FREE = 0, SLOT_BUSY = 1, SLOT_LIVE = 2 };

typedef struct mg_slot {
    atomic_int state;               /* SLOT_FREE / SLOT_BUSY (being changed) / SLOT_LIVE */
    atomic_uint gen;                /* bumped on every register and unregister */
    atomic_uintptr_t base;          /* first byte of the mapping */
    atomic_uintptr_t len;           /* its length in bytes */
    char path[LMC_MAPGUARD_PATH_MAX];
} mg_slot;

static mg_slot slots_[LMC_MAPGUARD_MAX_MAPS];
static atomic_int n_live_;
static atomic_int installed_;       /* 0 no, 1 being installed, 2 installed */
static struct sigaction prev_;      /* SIGBUS action before ours; written once, before ours runs */
static atomic_flag dying_ = ATOMIC_FLAG_INIT;

/* Keep path in dst (cap bytes, NUL-terminated); a path that does not fit keeps its tail. */
static void copy_path(char *dst, size_t cap, const char *path) {
    size_t n = strlen(path);
    if (n < cap) { memcpy(dst, path, n + 1); return; }
    size_t keep = cap - 4; /* "..." + tail + NUL */
    memcpy(dst, "...", 3);
    memcpy(dst + 3, path + n - keep, keep);
    dst[cap - 1] = 0;
}

lmc_status lmc_mapguard_register(const void *base, size_t len, const char *path) {
    if (!base || !len) return lmc_fail(LMC_ERR_RANGE, "mapguard: empty mapping of %s not registered", path ? path : "?");
    for (int i = 0; i < LMC_MAPGUARD_MAX_MAPS; i++) {
        mg_slot *s = &slots_[i];
        int expect = SLOT_FREE;
        if (!atomic_compare_exchange_strong_explicit(&s->state, &expect, SLOT_BUSY, memory_order_acquire,
                                                     memory_order_relaxed))
            continue;
        atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&s->base, (uintptr_t)base, memory_order_relaxed);
        atomic_store_explicit(&s->len, (uintptr_t)len, memory_order_relaxed);
        copy_path(s->path, sizeof s->path, path ? path : "(unnamed mapping)");
        atomic_store_explicit(&s->state, SLOT_LIVE, memory_order_release);
        atomic_fetch_add_explicit(&n_live_, 1, memory_order_relaxed);
        return LMC_OK;
    }
    return lmc_fail(LMC_ERR_RANGE, "mapguard: %d mappings already registered; %s is not guarded against truncation",
                    LMC_MAPGUARD_MAX_MAPS, path ? path : "?");
}

void lmc_mapguard_unregister(const void *base) {
    if (!base) return;
    for (int i = 0; i < LMC_MAPGUARD_MAX_MAPS; i++) {
        mg_slot *s = &slots_[i];
        if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_LIVE) continue;
        if (atomic_load_explicit(&s->base, memory_order_relaxed) != (uintptr_t)base) continue;
        int expect = SLOT_LIVE;
        if (!atomic_compare_exchange_strong_explicit(&s->state, &expect, SLOT_BUSY, memory_order_acquire,
                                                     memory_order_relaxed))
            continue;
        atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&s->base, 0, memory_order_relaxed);
        atomic_store_explicit(&s->len, 0, memory_order_relaxed);
        atomic_store_explicit(&s->state, SLOT_FREE, memory_order_release);
        atomic_fetch_sub_explicit(&n_live_, 1, memory_order_relaxed);
        return;
    }
}

int lmc_mapguard_count(void) { return atomic_load_explicit(&n_live_, memory_order_relaxed); }

int lmc_mapguard_lookup(const void *addr, char *out, size_t cap) {
    uintptr_t a = (uintptr_t)addr;
    if (!out || cap == 0) return 0;
    for (int i = 0; i < LMC_MAPGUARD_MAX_MAPS; i++) {
        mg_slot *s = &slots_[i];
        unsigned g = atomic_load_explicit(&s->gen, memory_order_acquire);
        if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_LIVE) continue;
        uintptr_t b = atomic_load_explicit(&s->base, memory_order_relaxed);
        uintptr_t l = atomic_load_explicit(&s->len, memory_order_relaxed);
        if (a < b || a - b >= l) continue;
        size_t n = 0;
        const volatile char *p = s->path;
        while (n + 1 < cap && n < sizeof s->path && p[n]) { out[n] = p[n]; n++; }
        out[n] = 0;
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->state, memory_order_relaxed) == SLOT_LIVE &&
            atomic_load_explicit(&s->gen, memory_order_relaxed) == g)
            return 1;
    }
    return 0;
}

int lmc_mapguard_contains(const void *p, size_t n) {
    const uintptr_t a = (uintptr_t)p;
    if (n == 0) return 0;
    for (int i = 0; i < LMC_MAPGUARD_MAX_MAPS; i++) {
        mg_slot *s = &slots_[i];
        if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_LIVE) continue;
        const uintptr_t b = atomic_load_explicit(&s->base, memory_order_relaxed);
        const uintptr_t l = atomic_load_explicit(&s->len, memory_order_relaxed);
        if (a >= b && a - b < l && n <= l - (a - b)) return 1;
    }
    return 0;
}

/* ---- the handler ------------------------------------------------------------------------------- */

static size_t append(char *buf, size_t at, size_t cap, const char *s) {
    while (*s && at + 1 < cap) buf[at++] = *s++;
    return at;
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    char path[LMC_MAPGUARD_PATH_MAX];
    /* si_code > 0: raised by the kernel for a fault (BUS_ADRERR for a page past the end of
     * a truncated file), not sent by kill(2), whose si_addr means nothing. */
    if (si && si->si_code > 0 && lmc_mapguard_lookup(si->si_addr, path, sizeof path)) {
        if (atomic_flag_test_and_set(&dying_)) {
            for (;;) pause(); /* another thread is writing the line; its _exit ends us */
        }
        char line[LMC_MAPGUARD_PATH_MAX + 256];
        size_t n = 0;
        n = append(line, n, sizeof line, "lmc: ");
        n = append(line, n, sizeof line, path);
        n = append(line, n, sizeof line, " changed on disk while in use (truncated?): cannot read its weights; "
                                         "replace model files by renaming a new file over them, not in place\n");
        size_t off = 0;
        while (off < n) {
            ssize_t w = write(STDERR_FILENO, line + off, n - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        _exit(LMC_MAPGUARD_EXIT_STATUS);
    }
    /* Not ours: the previous handler (ASan's, a host program's), else the default action. */
    if ((prev_.sa_flags & SA_SIGINFO) && prev_.sa_sigaction) {
        prev_.sa_sigaction(sig, si, uc);
        return;
    }
    if (!(prev_.sa_flags & SA_SIGINFO) && prev_.sa_handler != SIG_DFL && prev_.sa_handler != SIG_IGN) {
        prev_.sa_handler(sig);
        return;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
    /* A fault re-executes the instruction on return and dies by the default action; a SIGBUS
     * sent by kill(2) is raised again (pending while this handler runs, delivered on return). */
    raise(SIGBUS);
}

lmc_status lmc_mapguard_install(void) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&installed_, &expect, 1)) {
        while (atomic_load(&installed_) == 1) { /* another thread is installing: a few instructions */ }
        return atomic_load(&installed_) == 2 ? LMC_OK : lmc_fail(LMC_ERR_IO, "mapguard: SIGBUS handler not installed");
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &prev_) != 0) {
        atomic_store(&installed_, 0);
        return lmc_fail(LMC_ERR_IO, "mapguard: cannot install the SIGBUS handler: %s", strerror(errno));
    }
    /* Read it back: a sanitizer runtime may keep its own handler and ignore ours
     * (ASan with ASAN_OPTIONS=allow_user_segv_handler=0). */
    struct sigaction cur;
    if (sigaction(SIGBUS, NULL, &cur) != 0 || !(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != on_sigbus) {
        atomic_store(&installed_, 0);
        return lmc_fail(LMC_ERR_UNSUPPORTED, "mapguard: the SIGBUS handler did not stay installed (a sanitizer keeps "
                        "its own? ASAN_OPTIONS=allow_user_segv_handler=0)");
    }
    atomic_store(&installed_, 2);
    return LMC_OK;
}
