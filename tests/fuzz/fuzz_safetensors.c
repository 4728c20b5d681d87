/* fuzz_safetensors.c — fuzz target: safetensors headers and sharded indexes (lmc_st_open).
 *
 * An input is one .safetensors file (opened through a memfd), or, when it starts with
 * "IDX\n", a model.safetensors.index.json followed by up to three shard files
 * s0/s1/s2.safetensors, each introduced by "\n--shard--\n"; they are written into a
 * private directory on tmpfs and the directory is opened. On success every tensor is
 * checked against its header (bytes = elements × dtype size, lookups agree) and every
 * data byte is read, so a descriptor that points outside its file faults.
 */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "io/safetensors.h"

static char st_dir_[256];

static int st_write_file(const char *dir, const char *name, const uint8_t *d, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(d, 1, n, f) : 0;
    fclose(f);
    return w == n ? 0 : -1;
}

static void st_check_set(lmc_st_set *set) {
    int n = lmc_st_count(set);
    size_t total = 0;
    unsigned sum = 0;
    for (int i = 0; i < n; i++) {
        const lmc_st_tensor *t = lmc_st_at(set, i);
        FUZZ_CHECK(t && t->name);
        FUZZ_CHECK(t->n_dims >= 0 && t->n_dims <= LMC_ST_MAX_DIMS);
        FUZZ_CHECK(t->shard >= 0 && t->shard < lmc_st_shard_count(set));
        FUZZ_CHECK((uint64_t)lmc_st_nelem(t) * lmc_dtype_size(t->dtype) == t->nbytes);
        FUZZ_CHECK(lmc_st_find(set, t->name) == t);
        FUZZ_CHECK(lmc_st_index_of(set, t) == i);
        const unsigned char *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) sum += p[k];
        total += t->nbytes;
    }
    FUZZ_CHECK(total == lmc_st_total_bytes(set));
    for (int i = 0; i < lmc_st_metadata_count(set); i++) {
        const char *k = NULL, *v = NULL;
        lmc_st_metadata_at(set, i, &k, &v);
        FUZZ_CHECK(k && v && lmc_st_metadata(set, k) != NULL);
    }
    (void)sum;
}

static void st_cleanup(void);
static void st_remove_dir(void) {
    st_cleanup();
    rmdir(st_dir_);
}

int fuzz_safetensors_init(void) {
    if (st_dir_[0]) return 0;
    snprintf(st_dir_, sizeof st_dir_, "%s/lmc-fuzz-st-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(st_dir_)) { st_dir_[0] = 0; return -1; }
    atexit(st_remove_dir);
    return 0;
}

static void st_cleanup(void) {
    if (!st_dir_[0]) return;
    const char *names[] = {"model.safetensors.index.json", "s0.safetensors", "s1.safetensors", "s2.safetensors"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/%s", st_dir_, names[i]);
        unlink(path);
    }
}

int fuzz_safetensors(const uint8_t *d, size_t n) {
    lmc_st_set *set = NULL;
    if (n >= 4 && memcmp(d, "IDX\n", 4) == 0) {
        if (fuzz_safetensors_init() < 0) return 0;
        st_cleanup();
        const uint8_t *rest;
        size_t head, rest_n;
        int more = fuzz_split(d + 4, n - 4, "\n--shard--\n", &head, &rest, &rest_n);
        if (st_write_file(st_dir_, "model.safetensors.index.json", d + 4, head) < 0) return 0;
        for (int i = 0; more && i < 3; i++) {
            const uint8_t *part = rest;
            size_t part_n;
            more = fuzz_split(part, rest_n, "\n--shard--\n", &part_n, &rest, &rest_n);
            char name[32];
            snprintf(name, sizeof name, "s%d.safetensors", i);
            if (st_write_file(st_dir_, name, part, part_n) < 0) return 0;
        }
        if (lmc_st_open(st_dir_, &set) == LMC_OK) st_check_set(set);
        lmc_st_close(set);
        st_cleanup();
        return 0;
    }
    int fd = memfd_create("lmc-fuzz-st", 0);
    if (fd < 0) return 0;
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, d + off, n - off);
        if (w <= 0) { close(fd); return 0; }
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (lmc_st_open(path, &set) == LMC_OK) st_check_set(set);
    lmc_st_close(set);
    close(fd);
    return 0;
}

#ifdef LMC_FUZZ_LIBFUZZER
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    return fuzz_safetensors_init();
}
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return fuzz_safetensors(d, n); }
#endif
