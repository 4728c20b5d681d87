/* test_safetensors.c — the io module's safetensors reader/writer and JSON file helpers.
 *
 * Files are written into a fresh mkdtemp directory under /tmp, both through
 * lmc_st_write and as hand-crafted bytes, then read back: round trips of every
 * dtype, sharded sets through an index, directories, lookup, metadata, and
 * every rejection the reader promises (status code and message text).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "io/jsonfile.h"
#include "io/safetensors.h"

static char g_dir[256];

/* g_dir/name in one of a few rotating buffers. */
static const char *tp(const char *name) {
    static char bufs[8][512];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, 512, "%s/%s", g_dir, name);
    return b;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    if (n && fwrite(p, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

/* A safetensors file from a header text (length field = strlen(header)) and data_len bytes of data 0,1,2,... */
static void write_st(const char *path, const char *header, size_t data_len) {
    size_t hn = strlen(header);
    unsigned char *buf = malloc(8 + hn + data_len);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    memcpy(buf + 8, header, hn);
    for (size_t i = 0; i < data_len; i++) buf[8 + hn + i] = (unsigned char)i;
    write_bytes(path, buf, 8 + hn + data_len);
    free(buf);
}

static int contains(const char *hay, const char *needle) { return hay && needle && strstr(hay, needle) != NULL; }

/* Opening `path` fails with `want`, and the message mentions `needle` and the file's base name. */
static void expect_fail_path(const char *path, lmc_status want, const char *needle, const char *mention, int line) {
    lmc_clear_error();
    lmc_st_set *set = NULL;
    lmc_status st = lmc_st_open(path, &set);
    const char *msg = lmc_last_error();
    CHECK_MSG(st == want, "line %d: status %d (%s), want %d; message: %s", line, st, lmc_status_name(st), want, msg);
    CHECK_MSG(set == NULL, "line %d: set returned on failure", line);
    CHECK_MSG(contains(msg, needle), "line %d: message lacks \"%s\": %s", line, needle, msg);
    if (mention) CHECK_MSG(contains(msg, mention), "line %d: message lacks \"%s\": %s", line, mention, msg);
    if (set) lmc_st_close(set);
}

static int n_malformed;

/* A single-file header that must be rejected; the message must name the file. */
static void bad_header(const char *header, size_t data_len, lmc_status want, const char *needle, int line) {
    const char *p = tp("bad.safetensors");
    write_st(p, header, data_len);
    expect_fail_path(p, want, needle, "bad.safetensors", line);
    n_malformed++;
}
#define BAD(h, n, st, needle) bad_header(h, n, st, needle, __LINE__)

/* ---- round trips ------------------------------------------------------------------------------ */

static void test_roundtrip_all_dtypes(void) {
    /* one tensor per dtype, odd shapes, distinctive bytes */
    static const lmc_dtype types[] = {LMC_DTYPE_F64, LMC_DTYPE_I64, LMC_DTYPE_F32, LMC_DTYPE_I32, LMC_DTYPE_F16,
                                      LMC_DTYPE_BF16, LMC_DTYPE_I16, LMC_DTYPE_I8, LMC_DTYPE_U8, LMC_DTYPE_BOOL};
    enum { NT = sizeof types / sizeof types[0] };
    lmc_st_write_tensor w[NT];
    unsigned char *bufs[NT];
    char names[NT][32];
    size_t want_total = 0;
    for (int i = 0; i < NT; i++) {
        memset(&w[i], 0, sizeof w[i]);
        snprintf(names[i], sizeof names[i], "layer.%d.%s", i, lmc_dtype_name(types[i]));
        w[i].name = names[i];
        w[i].dtype = types[i];
        w[i].n_dims = 1 + i % 3;
        for (int d = 0; d < w[i].n_dims; d++) w[i].shape[d] = 2 + d + i % 2;
        size_t ne = 1;
        for (int d = 0; d < w[i].n_dims; d++) ne *= (size_t)w[i].shape[d];
        size_t nb = ne * lmc_dtype_size(types[i]);
        bufs[i] = malloc(nb);
        for (size_t b = 0; b < nb; b++) bufs[i][b] = (unsigned char)(b * 7 + (size_t)i * 31 + 1);
        if (types[i] == LMC_DTYPE_BOOL) for (size_t b = 0; b < nb; b++) bufs[i][b] &= 1;
        w[i].data = bufs[i];
        want_total += nb;
    }
    const char *meta[] = {"format", "pt", "note", "quote\" back\\slash \xc3\xa9"};
    const char *p = tp("all.safetensors");
    CHECK_EQ_INT(lmc_st_write(p, w, NT, meta, 2), LMC_OK);

    /* header length is a multiple of 8 */
    FILE *f = fopen(p, "rb");
    unsigned char len8[8] = {0};
    CHECK(f && fread(len8, 1, 8, f) == 8);
    if (f) fclose(f);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    CHECK_EQ_INT(hlen % 8, 0);

    lmc_st_set *set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (!set) return;
    CHECK_EQ_INT(lmc_st_count(set), NT);
    CHECK_EQ_INT(lmc_st_shard_count(set), 1);
    CHECK_EQ_INT(lmc_st_total_bytes(set), want_total);
    CHECK_EQ_STR(lmc_st_metadata(set, "format"), "pt");
    CHECK_EQ_STR(lmc_st_metadata(set, "note"), "quote\" back\\slash \xc3\xa9");
    CHECK(lmc_st_metadata(set, "missing") == NULL);
    CHECK_EQ_INT(lmc_st_metadata_count(set), 2);
    for (int i = 0; i < NT; i++) {
        const lmc_st_tensor *t = lmc_st_at(set, i);
        CHECK_EQ_STR(t->name, names[i]); /* file order kept */
        const lmc_st_tensor *u = lmc_st_find(set, names[i]);
        CHECK(u == t);
        CHECK_EQ_INT(lmc_st_index_of(set, u), i);
        CHECK_EQ_INT(t->dtype, types[i]);
        CHECK_EQ_INT(t->n_dims, w[i].n_dims);
        for (int d = 0; d < t->n_dims; d++) CHECK_EQ_INT(t->shape[d], w[i].shape[d]);
        CHECK_EQ_INT(t->nbytes, (size_t)lmc_st_nelem(t) * lmc_dtype_size(types[i]));
        CHECK(memcmp(t->data, bufs[i], t->nbytes) == 0);
        CHECK_EQ_INT(t->shard, 0);
        /* given in decreasing element size, every tensor is aligned to its element size */
        CHECK_EQ_INT((uintptr_t)t->data % lmc_dtype_size(t->dtype), 0);
    }
    lmc_st_tensor outside = *lmc_st_at(set, 0);
    CHECK_EQ_INT(lmc_st_index_of(set, &outside), -1);
    CHECK_EQ_INT(lmc_st_index_of(set, NULL), -1);
    CHECK(lmc_st_find(set, "layer.0") == NULL);
    CHECK(lmc_st_find(set, "") == NULL);
    CHECK(lmc_st_find(set, "zzz") == NULL);
    lmc_st_close(set);
    for (int i = 0; i < NT; i++) free(bufs[i]);
}

static void test_roundtrip_values(void) {
    /* float values through the dtype conversions: bf16 and f16 written from f32, read back as f32 */
    float src[6] = {1.0f, -2.5f, 0.15625f, 65504.0f, -0.0f, 3.0e-5f};
    uint16_t bf[6], hf[6];
    for (int i = 0; i < 6; i++) { bf[i] = lmc_f32_to_bf16(src[i]); hf[i] = lmc_f32_to_f16(src[i]); }
    lmc_st_write_tensor w[3] = {
        {.name = "f32", .dtype = LMC_DTYPE_F32, .n_dims = 2, .shape = {2, 3}, .data = src},
        {.name = "bf16", .dtype = LMC_DTYPE_BF16, .n_dims = 2, .shape = {3, 2}, .data = bf},
        {.name = "f16", .dtype = LMC_DTYPE_F16, .n_dims = 1, .shape = {6}, .data = hf},
    };
    const char *p = tp("vals.safetensors");
    CHECK_EQ_INT(lmc_st_write(p, w, 3, NULL, 0), LMC_OK);
    lmc_st_set *set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (!set) return;
    float got[6];
    const lmc_st_tensor *t = lmc_st_find(set, "f32");
    CHECK(t && t->nbytes == sizeof src);
    if (t) { memcpy(got, t->data, sizeof got); for (int i = 0; i < 6; i++) CHECK(got[i] == src[i]); }
    t = lmc_st_find(set, "bf16");
    CHECK(t != NULL);
    if (t) {
        lmc_to_f32(t->dtype, t->data, got, 6);
        CHECK(got[0] == 1.0f && got[1] == -2.5f && got[2] == 0.15625f);
    }
    t = lmc_st_find(set, "f16");
    CHECK(t != NULL);
    if (t) {
        lmc_to_f32(t->dtype, t->data, got, 6);
        CHECK(got[0] == 1.0f && got[1] == -2.5f && got[3] == 65504.0f);
        CHECK_NEAR(got[5], 3.0e-5, 1e-7);
    }
    CHECK(lmc_st_metadata(set, "format") == NULL);
    CHECK_EQ_INT(lmc_st_metadata_count(set), 0);
    lmc_st_close(set);
}

static void test_scalar_zero_size_and_empty(void) {
    int32_t scalar = -7;
    lmc_st_write_tensor w[3] = {
        {.name = "empty", .dtype = LMC_DTYPE_F32, .n_dims = 2, .shape = {0, 4}, .data = NULL},
        {.name = "scalar", .dtype = LMC_DTYPE_I32, .n_dims = 0, .data = &scalar},
        {.name = "empty2", .dtype = LMC_DTYPE_BF16, .n_dims = 1, .shape = {0}, .data = NULL},
    };
    const char *p = tp("zero.safetensors");
    CHECK_EQ_INT(lmc_st_write(p, w, 3, NULL, 0), LMC_OK);
    lmc_st_set *set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (set) {
        const lmc_st_tensor *t = lmc_st_find(set, "scalar");
        CHECK(t && t->n_dims == 0 && t->nbytes == 4 && lmc_st_nelem(t) == 1);
        if (t) { int32_t v; memcpy(&v, t->data, 4); CHECK_EQ_INT(v, -7); }
        t = lmc_st_find(set, "empty");
        CHECK(t && t->nbytes == 0 && t->shape[0] == 0 && t->shape[1] == 4 && lmc_st_nelem(t) == 0);
        CHECK_EQ_INT(lmc_st_total_bytes(set), 4);
        lmc_st_close(set);
    }
    /* a file with no tensors and an empty data region (nothing to map past the header) */
    p = tp("none.safetensors");
    CHECK_EQ_INT(lmc_st_write(p, NULL, 0, NULL, 0), LMC_OK);
    set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (set) { CHECK_EQ_INT(lmc_st_count(set), 0); CHECK(lmc_st_find(set, "x") == NULL); lmc_st_close(set); }
    /* only zero-size tensors: data region of length 0 */
    p = tp("zeroonly.safetensors");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                "\"b\":{\"dtype\":\"F16\",\"shape\":[3,0],\"data_offsets\":[0,0]}}", 0);
    set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (set) { CHECK_EQ_INT(lmc_st_count(set), 2); CHECK_EQ_INT(lmc_st_total_bytes(set), 0); lmc_st_close(set); }
}

static void test_handcrafted_valid(void) {
    /* unusual spacing, extra keys, tensors out of offset order, trailing pad, gaps between tensors */
    const char *h = "  { \"b\" : {\"shape\":[2], \"dtype\":\"U8\", \"data_offsets\":[6,8], \"extra\": [1,{}]},\n"
                    "\"__metadata__\": {\"k\": \"v\"},\t\"a\":{\"dtype\":\"I16\",\"shape\":[1,2],\"data_offsets\":[0,4]}}   ";
    const char *p = tp("hand.safetensors");
    write_st(p, h, 8);
    lmc_st_set *set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (!set) { fprintf(stderr, "%s\n", lmc_last_error()); return; }
    CHECK_EQ_INT(lmc_st_count(set), 2);
    CHECK_EQ_STR(lmc_st_at(set, 0)->name, "b");
    CHECK_EQ_STR(lmc_st_at(set, 1)->name, "a");
    CHECK_EQ_STR(lmc_st_metadata(set, "k"), "v");
    const lmc_st_tensor *b = lmc_st_find(set, "b"), *a = lmc_st_find(set, "a");
    CHECK(a && b);
    if (a && b) {
        const unsigned char *bb = b->data, *ab = a->data;
        CHECK(bb[0] == 6 && bb[1] == 7);   /* data byte i holds value i */
        CHECK(ab[0] == 0 && ab[3] == 3);
        CHECK(bb - ab == 6);
    }
    lmc_st_close(set);
}

static void test_sort_for_alignment(void) {
    /* sizes 1, 8, 2, 4, 1 in the given order would misalign; sorted they are aligned */
    uint8_t u[3] = {1, 2, 3};
    double d[1] = {0.5};
    uint16_t h[3] = {7, 8, 9};
    float f[1] = {2.0f};
    int8_t c[1] = {-1};
    lmc_st_write_tensor w[5] = {
        {.name = "u", .dtype = LMC_DTYPE_U8, .n_dims = 1, .shape = {3}, .data = u},
        {.name = "d", .dtype = LMC_DTYPE_F64, .n_dims = 1, .shape = {1}, .data = d},
        {.name = "h", .dtype = LMC_DTYPE_F16, .n_dims = 1, .shape = {3}, .data = h},
        {.name = "f", .dtype = LMC_DTYPE_F32, .n_dims = 1, .shape = {1}, .data = f},
        {.name = "c", .dtype = LMC_DTYPE_I8, .n_dims = 1, .shape = {1}, .data = c},
    };
    lmc_st_sort_for_alignment(w, 5);
    CHECK_EQ_STR(w[0].name, "d");
    CHECK_EQ_STR(w[1].name, "f");
    CHECK_EQ_STR(w[2].name, "h");
    CHECK_EQ_STR(w[3].name, "c");
    CHECK_EQ_STR(w[4].name, "u");
    const char *p = tp("sorted.safetensors");
    CHECK_EQ_INT(lmc_st_write(p, w, 5, NULL, 0), LMC_OK);
    lmc_st_set *set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (!set) return;
    for (int i = 0; i < lmc_st_count(set); i++) {
        const lmc_st_tensor *t = lmc_st_at(set, i);
        CHECK_EQ_INT((uintptr_t)t->data % lmc_dtype_size(t->dtype), 0);
    }
    const lmc_st_tensor *t = lmc_st_find(set, "d");
    double dv = 0;
    if (t) memcpy(&dv, t->data, 8);
    CHECK(dv == 0.5);
    lmc_st_close(set);
}

static void test_special_names(void) {
    const char *names[] = {"with \"quote\"", "back\\slash", "new\nline\ttab", "ünïcödé.权重", "a", "A", "a.b"};
    enum { N = sizeof names / sizeof names[0] };
    uint8_t vals[N];
    lmc_st_write_tensor w[N];
    for (int i = 0; i < N; i++) {
        vals[i] = (uint8_t)(100 + i);
        w[i] = (lmc_st_write_tensor){.name = names[i], .dtype = LMC_DTYPE_U8, .n_dims = 1, .shape = {1}, .data = &vals[i]};
    }
    const char *p = tp("names.safetensors");
    CHECK_EQ_INT(lmc_st_write(p, w, N, NULL, 0), LMC_OK);
    lmc_st_set *set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (!set) return;
    for (int i = 0; i < N; i++) {
        const lmc_st_tensor *t = lmc_st_find(set, names[i]);
        CHECK_MSG(t != NULL, "name %d", i);
        if (t) CHECK_EQ_INT(*(const uint8_t *)t->data, 100 + i);
    }
    lmc_st_close(set);
}

static void test_lookup_many(void) {
    /* enough tensors to exercise the binary search, names given in reverse order */
    enum { N = 300 };
    static lmc_st_write_tensor w[N];
    static char names[N][24];
    static int32_t vals[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "t.%05d", N - i);
        vals[i] = i;
        w[i] = (lmc_st_write_tensor){.name = names[i], .dtype = LMC_DTYPE_I32, .n_dims = 1, .shape = {1}, .data = &vals[i]};
    }
    const char *p = tp("many.safetensors");
    CHECK_EQ_INT(lmc_st_write(p, w, N, NULL, 0), LMC_OK);
    lmc_st_set *set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (!set) return;
    int ok = 1;
    for (int i = 0; i < N; i++) {
        const lmc_st_tensor *t = lmc_st_find(set, names[i]);
        int32_t v = -1;
        if (t) memcpy(&v, t->data, 4);
        if (!t || v != i) ok = 0;
    }
    CHECK(ok);
    CHECK(lmc_st_find(set, "t.00000") == NULL);
    CHECK(lmc_st_find(set, "t.99999") == NULL);
    lmc_st_close(set);
}

/* The permissions of the mapping of `file` that contains addr, from /proc/self/maps ("" if none). */
static void mapping_perms(const void *addr, const char *file, char perms[5]) {
    perms[0] = 0;
    char real[4096];
    if (!realpath(file, real)) return;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char pm[5];
        int n = 0;
        if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &lo, &hi, pm, &n) < 3 || n == 0) continue;
        char *path = line + n;
        path[strcspn(path, "\n")] = 0;
        if (strcmp(path, real) == 0 && (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
            memcpy(perms, pm, 5);
            break;
        }
    }
    fclose(f);
}

static void test_mapping_not_copied(void) {
    /* tensor data points into a read-only private mapping of the file itself */
    float v[3] = {1.0f, 2.0f, 3.0f};
    lmc_st_write_tensor w = {.name = "x", .dtype = LMC_DTYPE_F32, .n_dims = 1, .shape = {3}, .data = v};
    const char *p = tp("mapped.safetensors");
    CHECK_EQ_INT(lmc_st_write(p, &w, 1, NULL, 0), LMC_OK);
    lmc_st_set *set = NULL;
    CHECK_EQ_INT(lmc_st_open(p, &set), LMC_OK);
    if (!set) return;
    const lmc_st_tensor *t = lmc_st_find(set, "x");
    char perms[5];
    mapping_perms(t->data, p, perms);
    CHECK_EQ_STR(perms, "r--p");
    mapping_perms((const char *)t->data + t->nbytes - 1, p, perms);
    CHECK_EQ_STR(perms, "r--p");
    lmc_st_close(set);
    mapping_perms(v, p, perms); /* and a stack address is not in it */
    CHECK_EQ_STR(perms, "");
}

/* ---- rejections of single files --------------------------------------------------------------- */

static void test_reject_file_level(void) {
    const char *p = tp("short.safetensors");
    write_bytes(p, "", 0);
    expect_fail_path(p, LMC_ERR_FORMAT, "shorter than the 8-byte", "short.safetensors", __LINE__);
    n_malformed++;
    write_bytes(p, "\x05\0\0\0\0", 5);
    expect_fail_path(p, LMC_ERR_FORMAT, "5 bytes", "short.safetensors", __LINE__);
    n_malformed++;

    unsigned char b[16] = {0};
    p = tp("len.safetensors");
    write_bytes(p, b, 16); /* header length 0 */
    expect_fail_path(p, LMC_ERR_FORMAT, "header length is 0", "len.safetensors", __LINE__);
    n_malformed++;
    uint64_t big = 100000001;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(big >> (8 * i));
    write_bytes(p, b, 16);
    expect_fail_path(p, LMC_ERR_FORMAT, "exceeds the limit", "len.safetensors", __LINE__);
    n_malformed++;
    memset(b, 0, 8);
    b[0] = 9; /* 9 > 16 - 8 */
    memcpy(b + 8, "{}      ", 8);
    write_bytes(p, b, 16);
    expect_fail_path(p, LMC_ERR_FORMAT, "runs past the end", "len.safetensors", __LINE__);
    n_malformed++;
    for (int i = 0; i < 8; i++) b[i] = 0xff; /* 2^64-1: no overflow in the bounds check */
    write_bytes(p, b, 16);
    expect_fail_path(p, LMC_ERR_FORMAT, "exceeds the limit", "len.safetensors", __LINE__);
    n_malformed++;

    /* a NUL inside the header */
    p = tp("nul.safetensors");
    unsigned char nb[8 + 8] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, ' ', ' ', ' ', ' ', ' '};
    write_bytes(p, nb, sizeof nb);
    expect_fail_path(p, LMC_ERR_FORMAT, "NUL byte", "nul.safetensors", __LINE__);
    n_malformed++;

    expect_fail_path(tp("does-not-exist.safetensors"), LMC_ERR_NOT_FOUND, "does-not-exist.safetensors", NULL,
                     __LINE__);
}

static void test_reject_headers(void) {
    BAD("{\"a\":", 0, LMC_ERR_FORMAT, "not valid JSON");
    BAD("{} x", 0, LMC_ERR_FORMAT, "not valid JSON");
    BAD("{\"a\":{\"dtype\":\"F32\",}}", 0, LMC_ERR_FORMAT, "column");
    BAD("[]", 0, LMC_ERR_FORMAT, "not an object");
    BAD("\"str\"", 0, LMC_ERR_FORMAT, "not an object");
    BAD("{\"a\":5}", 0, LMC_ERR_FORMAT, "entry is a JSON number, not an object");
    BAD("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, LMC_ERR_FORMAT, "\"dtype\" is missing");
    BAD("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, LMC_ERR_FORMAT, "\"dtype\" is a JSON number");
    BAD("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, LMC_ERR_FORMAT, "\"shape\" is missing");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4, LMC_ERR_FORMAT,
        "\"shape\" is a JSON string");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, LMC_ERR_FORMAT, "\"data_offsets\" is missing");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, LMC_ERR_FORMAT, "wrong length");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"b\":0}}}", 8, LMC_ERR_FORMAT,
        "\"data_offsets\" is a JSON object");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, LMC_ERR_FORMAT,
        "shape[0] = -1 is not a non-negative integer");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,12]}}", 12, LMC_ERR_FORMAT,
        "shape[1] = 1.5 is not");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, LMC_ERR_FORMAT,
        "shape[0] is a JSON string");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e400],\"data_offsets\":[0,8]}}", 8, LMC_ERR_FORMAT,
        "is not a non-negative integer");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}", 8, LMC_ERR_FORMAT,
        "shape product overflows");
    BAD("{\"a\":{\"dtype\":\"F64\",\"shape\":[9007199254740992,4096],\"data_offsets\":[0,8]}}", 8, LMC_ERR_FORMAT,
        "shape product overflows");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, LMC_ERR_FORMAT, "before begin");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8, LMC_ERR_FORMAT,
        "two non-negative integers");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}}", 8, LMC_ERR_FORMAT,
        "two non-negative integers");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, LMC_ERR_FORMAT,
        "span 4 bytes but F32 shape needs 8 bytes");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8, LMC_ERR_FORMAT, "beyond the file");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, LMC_ERR_FORMAT, "overlap");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8, LMC_ERR_FORMAT, "overlap");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, LMC_ERR_FORMAT,
        "duplicate tensor name \"a\"");
    BAD("{\"w.q\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, LMC_ERR_UNSUPPORTED,
        "dtype \"F8_E4M3\"");
    BAD("{\"w.q\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, LMC_ERR_UNSUPPORTED,
        "tensor \"w.q\"");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, LMC_ERR_UNSUPPORTED,
        "9 dimensions");
    BAD("{\"__metadata__\":[1],\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, LMC_ERR_FORMAT,
        "\"__metadata__\" is a JSON array");
    BAD("{\"__metadata__\":{\"k\":1}}", 0, LMC_ERR_FORMAT, "value of \"k\" is a JSON number");
    BAD("{\"__metadata__\":{\"k\":\"1\"},\"__metadata__\":{}}", 0, LMC_ERR_FORMAT, "\"__metadata__\" 2 times");
    BAD("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, LMC_ERR_FORMAT, "the key \"k\" twice");
    /* an error late in the header after valid tensors leaves nothing behind (ASan checks the cleanup) */
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1]}}",
        8, LMC_ERR_FORMAT, "tensor \"b\"");
    CHECK_MSG(n_malformed >= 25, "only %d malformed single files", n_malformed);
}

/* ---- sharded sets ----------------------------------------------------------------------------- */

static void make_dir(const char *name) {
    if (mkdir(tp(name), 0755) != 0 && errno != EEXIST) { perror(name); exit(2); }
}

/* Two shards with tensors a,b (shard 1) and c (shard 2) under dir. */
static void write_two_shards(const char *dir) {
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/%s/model-00001-of-00002.safetensors", g_dir, dir);
    snprintf(p2, sizeof p2, "%s/%s/model-00002-of-00002.safetensors", g_dir, dir);
    float a[2] = {1, 2}, b[3] = {3, 4, 5};
    uint16_t c[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
    lmc_st_write_tensor w1[2] = {
        {.name = "model.a", .dtype = LMC_DTYPE_F32, .n_dims = 1, .shape = {2}, .data = a},
        {.name = "model.b", .dtype = LMC_DTYPE_F32, .n_dims = 2, .shape = {1, 3}, .data = b},
    };
    lmc_st_write_tensor w2[1] = {{.name = "lm_head.c", .dtype = LMC_DTYPE_BF16, .n_dims = 2, .shape = {2, 2}, .data = c}};
    const char *m1[] = {"format", "pt", "shard", "one"};
    const char *m2[] = {"shard", "two"};
    CHECK_EQ_INT(lmc_st_write(p1, w1, 2, m1, 2), LMC_OK);
    CHECK_EQ_INT(lmc_st_write(p2, w2, 1, m2, 1), LMC_OK);
}

static void write_index(const char *dir, const char *weight_map_body) {
    char p[512], text[2048];
    snprintf(p, sizeof p, "%s/%s/model.safetensors.index.json", g_dir, dir);
    snprintf(text, sizeof text, "{\n  \"metadata\": {\"total_size\": 28},\n  \"weight_map\": {%s}\n}\n",
             weight_map_body);
    write_text(p, text);
}

#define GOOD_MAP "\"model.a\": \"model-00001-of-00002.safetensors\", \"lm_head.c\": \"model-00002-of-00002.safetensors\"," \
                 "\"model.b\": \"model-00001-of-00002.safetensors\""

static void check_two_shard_set(lmc_st_set *set) {
    CHECK_EQ_INT(lmc_st_count(set), 3);
    CHECK_EQ_INT(lmc_st_shard_count(set), 2);
    CHECK_EQ_INT(lmc_st_total_bytes(set), 8 + 12 + 8);
    const lmc_st_tensor *a = lmc_st_find(set, "model.a"), *b = lmc_st_find(set, "model.b"),
                        *c = lmc_st_find(set, "lm_head.c");
    CHECK(a && b && c);
    if (!(a && b && c)) return;
    CHECK_EQ_INT(a->shard, 0);
    CHECK_EQ_INT(b->shard, 0);
    CHECK_EQ_INT(c->shard, 1);
    CHECK(contains(lmc_st_shard_path(set, 1), "model-00002-of-00002.safetensors"));
    float bv[3];
    memcpy(bv, b->data, 12);
    CHECK(bv[0] == 3 && bv[2] == 5 && b->shape[0] == 1 && b->shape[1] == 3);
    float cv[4];
    lmc_to_f32(c->dtype, c->data, cv, 4);
    CHECK(cv[0] == 1 && cv[1] == 2 && cv[2] == 3 && cv[3] == 4);
    CHECK_EQ_STR(lmc_st_metadata(set, "shard"), "one"); /* shard 0's metadata */
    CHECK_EQ_STR(lmc_st_metadata(set, "format"), "pt");
}

static void test_sharded_index(void) {
    make_dir("sh");
    write_two_shards("sh");
    write_index("sh", GOOD_MAP);
    lmc_st_set *set = NULL;
    /* by the index file */
    CHECK_EQ_INT(lmc_st_open(tp("sh/model.safetensors.index.json"), &set), LMC_OK);
    if (set) { check_two_shard_set(set); lmc_st_close(set); }
    else fprintf(stderr, "  %s\n", lmc_last_error());
    /* by the directory */
    set = NULL;
    CHECK_EQ_INT(lmc_st_open(tp("sh"), &set), LMC_OK);
    if (set) { check_two_shard_set(set); lmc_st_close(set); }
    /* an index named relative to the working directory, without a slash */
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(tp("sh")) == 0);
    set = NULL;
    CHECK_EQ_INT(lmc_st_open("model.safetensors.index.json", &set), LMC_OK);
    if (set) {
        check_two_shard_set(set);
        CHECK_EQ_STR(lmc_st_shard_path(set, 0), "./model-00001-of-00002.safetensors");
        lmc_st_close(set);
    }
    CHECK(chdir(cwd) == 0);
    /* a directory with a trailing slash */
    set = NULL;
    CHECK_EQ_INT(lmc_st_open(tp("sh/"), &set), LMC_OK);
    if (set) { check_two_shard_set(set); lmc_st_close(set); }
}

static void test_directory_glob_and_single(void) {
    /* no model.safetensors and no index: every *.safetensors, sorted */
    make_dir("glob");
    write_two_shards("glob");
    write_text(tp("glob/notes.txt"), "not a shard");
    make_dir("glob/sub.safetensors"); /* a directory with the suffix is not a shard */
    lmc_st_set *set = NULL;
    CHECK_EQ_INT(lmc_st_open(tp("glob"), &set), LMC_OK);
    if (set) { check_two_shard_set(set); lmc_st_close(set); }
    else fprintf(stderr, "  %s\n", lmc_last_error());

    /* model.safetensors wins over an index and other files */
    make_dir("single");
    write_two_shards("single");
    write_index("single", GOOD_MAP);
    int32_t v = 5;
    lmc_st_write_tensor w = {.name = "only", .dtype = LMC_DTYPE_I32, .n_dims = 1, .shape = {1}, .data = &v};
    CHECK_EQ_INT(lmc_st_write(tp("single/model.safetensors"), &w, 1, NULL, 0), LMC_OK);
    set = NULL;
    CHECK_EQ_INT(lmc_st_open(tp("single"), &set), LMC_OK);
    if (set) {
        CHECK_EQ_INT(lmc_st_count(set), 1);
        CHECK(lmc_st_find(set, "only") != NULL);
        lmc_st_close(set);
    }

    /* an empty directory */
    make_dir("emptydir");
    expect_fail_path(tp("emptydir"), LMC_ERR_NOT_FOUND, "no model.safetensors", "emptydir", __LINE__);

    /* the same tensor in two globbed files */
    make_dir("dupglob");
    float x = 1;
    lmc_st_write_tensor wx = {.name = "x", .dtype = LMC_DTYPE_F32, .n_dims = 1, .shape = {1}, .data = &x};
    CHECK_EQ_INT(lmc_st_write(tp("dupglob/a.safetensors"), &wx, 1, NULL, 0), LMC_OK);
    CHECK_EQ_INT(lmc_st_write(tp("dupglob/b.safetensors"), &wx, 1, NULL, 0), LMC_OK);
    expect_fail_path(tp("dupglob"), LMC_ERR_FORMAT, "appears in two shards", "b.safetensors", __LINE__);
}

static void test_reject_index(void) {
    make_dir("ix");
    write_two_shards("ix");
    const char *ip = tp("ix/model.safetensors.index.json");

    write_text(ip, "{\"metadata\": {}}");
    expect_fail_path(ip, LMC_ERR_FORMAT, "no \"weight_map\"", "index.json", __LINE__);
    write_text(ip, "[1, 2]");
    expect_fail_path(ip, LMC_ERR_FORMAT, "not a JSON object", "index.json", __LINE__);
    write_text(ip, "{\"weight_map\": {\n \"model.a\": \"x\",\n }}");
    expect_fail_path(ip, LMC_ERR_FORMAT, "line 3", "index.json", __LINE__);
    write_index("ix", "");
    expect_fail_path(ip, LMC_ERR_FORMAT, "lists no tensors", "index.json", __LINE__);
    write_index("ix", "\"model.a\": 3");
    expect_fail_path(ip, LMC_ERR_FORMAT, "is a JSON number, not a file name", "model.a", __LINE__);
    write_index("ix", "\"model.a\": \"../ix/model-00001-of-00002.safetensors\"");
    expect_fail_path(ip, LMC_ERR_FORMAT, "not a plain file name", "../ix", __LINE__);
    write_index("ix", "\"model.a\": \"/etc/passwd\"");
    expect_fail_path(ip, LMC_ERR_FORMAT, "not a plain file name", "/etc/passwd", __LINE__);
    write_index("ix", "\"model.a\": \"..\"");
    expect_fail_path(ip, LMC_ERR_FORMAT, "not a plain file name", "model.a", __LINE__);
    write_index("ix", GOOD_MAP ", \"model.z\": \"model-00003-of-00003.safetensors\"");
    expect_fail_path(ip, LMC_ERR_NOT_FOUND, "model-00003-of-00003.safetensors", "index.json", __LINE__);
    write_index("ix", GOOD_MAP ", \"model.missing\": \"model-00002-of-00002.safetensors\"");
    expect_fail_path(ip, LMC_ERR_FORMAT, "does not contain it", "model.missing", __LINE__);
    write_index("ix", "\"model.a\": \"model-00002-of-00002.safetensors\", "
                      "\"lm_head.c\": \"model-00002-of-00002.safetensors\", "
                      "\"model.b\": \"model-00001-of-00002.safetensors\"");
    expect_fail_path(ip, LMC_ERR_FORMAT, "but it is in model-00001-of-00002.safetensors", "model.a", __LINE__);
    write_index("ix", GOOD_MAP ", \"model.a\": \"model-00001-of-00002.safetensors\"");
    expect_fail_path(ip, LMC_ERR_FORMAT, "lists tensor \"model.a\" twice", "index.json", __LINE__);

    /* a tensor present in two shards */
    make_dir("ix2");
    write_two_shards("ix2");
    float x = 9;
    lmc_st_write_tensor w[2] = {
        {.name = "lm_head.c", .dtype = LMC_DTYPE_F32, .n_dims = 1, .shape = {1}, .data = &x},
        {.name = "model.a", .dtype = LMC_DTYPE_F32, .n_dims = 1, .shape = {1}, .data = &x},
    };
    CHECK_EQ_INT(lmc_st_write(tp("ix2/model-00002-of-00002.safetensors"), w, 2, NULL, 0), LMC_OK);
    write_index("ix2", "\"model.a\": \"model-00001-of-00002.safetensors\", "
                       "\"lm_head.c\": \"model-00002-of-00002.safetensors\"");
    expect_fail_path(tp("ix2/model.safetensors.index.json"), LMC_ERR_FORMAT, "appears in two shards", "model.a",
                     __LINE__);

    /* a malformed shard is reported with the shard and the index named */
    make_dir("ix3");
    write_st(tp("ix3/s1.safetensors"), "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
    write_index("ix3", "\"t\": \"s1.safetensors\"");
    expect_fail_path(tp("ix3/model.safetensors.index.json"), LMC_ERR_FORMAT, "beyond the file", "s1.safetensors",
                     __LINE__);
    expect_fail_path(tp("ix3/model.safetensors.index.json"), LMC_ERR_FORMAT, "listed in", "index.json", __LINE__);
}

/* ---- mutations: every damaged file is rejected with a message or reads within bounds -------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static void test_mutations(void) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {1, 2, 3};
    uint8_t c[5] = {9, 8, 7, 6, 5};
    lmc_st_write_tensor w[3] = {
        {.name = "model.a", .dtype = LMC_DTYPE_F32, .n_dims = 2, .shape = {2, 3}, .data = a},
        {.name = "model.b", .dtype = LMC_DTYPE_BF16, .n_dims = 1, .shape = {3}, .data = b},
        {.name = "model.c", .dtype = LMC_DTYPE_U8, .n_dims = 3, .shape = {1, 5, 1}, .data = c},
    };
    const char *meta[] = {"format", "pt"};
    const char *base_path = tp("base.safetensors");
    CHECK_EQ_INT(lmc_st_write(base_path, w, 3, meta, 1), LMC_OK);
    FILE *f = fopen(base_path, "rb");
    unsigned char base[4096];
    size_t base_len = f ? fread(base, 1, sizeof base, f) : 0;
    if (f) fclose(f);
    CHECK(base_len > 8);
    if (base_len <= 8) return;
    size_t hlen = base[0] | (size_t)base[1] << 8;
    static const char pool[] = "{}[]\",:0123456789-.eE  tfnul\\";
    const char *p = tp("mut.safetensors");
    int n_ok = 0, n_fail = 0, bad_msg = 0;
    unsigned char buf[4096];
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(buf, base, base_len);
        size_t len = base_len;
        int kind = (int)(rnd() % 4);
        if (kind == 0) { /* overwrite 1-3 header bytes with JSON-ish characters */
            int k = 1 + (int)(rnd() % 3);
            for (int j = 0; j < k; j++) buf[8 + rnd() % hlen] = (unsigned char)pool[rnd() % (sizeof pool - 1)];
        } else if (kind == 1) { /* truncate */
            len = rnd() % base_len;
        } else if (kind == 2) { /* shift the header length */
            size_t nl = hlen + (rnd() % 33) - 16;
            buf[0] = (unsigned char)nl;
            buf[1] = (unsigned char)(nl >> 8);
        } else { /* change one digit of the header (shapes and offsets) */
            size_t pos = 8 + rnd() % hlen;
            for (size_t j = 0; j < hlen && !(buf[pos] >= '0' && buf[pos] <= '9'); j++) pos = 8 + (pos - 8 + 1) % hlen;
            buf[pos] = (unsigned char)('0' + rnd() % 10);
        }
        write_bytes(p, buf, len);
        lmc_clear_error();
        lmc_st_set *set = NULL;
        lmc_status st = lmc_st_open(p, &set);
        if (st == LMC_OK) {
            unsigned sum = 0;
            for (int i = 0; i < lmc_st_count(set); i++) {
                const lmc_st_tensor *t = lmc_st_at(set, i);
                if ((int64_t)t->nbytes != lmc_st_nelem(t) * (int64_t)lmc_dtype_size(t->dtype)) bad_msg++;
                for (size_t k = 0; k < t->nbytes; k++) sum += ((const unsigned char *)t->data)[k];
            }
            (void)sum;
            lmc_st_close(set);
            n_ok++;
        } else {
            if (!contains(lmc_last_error(), "mut.safetensors") || set != NULL) {
                bad_msg++;
                fprintf(stderr, "  mutation %d: status %d, message: %s\n", iter, st, lmc_last_error());
            }
            n_fail++;
        }
    }
    CHECK_MSG(n_ok > 0 && n_fail > 0, "ok %d fail %d", n_ok, n_fail);
    CHECK_EQ_INT(bad_msg, 0);
}

/* ---- writer argument checks ------------------------------------------------------------------- */

static void test_write_rejects(void) {
    float v[2] = {1, 2};
    lmc_st_write_tensor w[2] = {
        {.name = "a", .dtype = LMC_DTYPE_F32, .n_dims = 1, .shape = {2}, .data = v},
        {.name = "a", .dtype = LMC_DTYPE_F32, .n_dims = 1, .shape = {1}, .data = v},
    };
    const char *p = tp("w.safetensors");
    CHECK_EQ_INT(lmc_st_write(p, w, 2, NULL, 0), LMC_ERR_ARG);
    CHECK(contains(lmc_last_error(), "duplicate tensor name"));
    w[1].name = "__metadata__";
    CHECK_EQ_INT(lmc_st_write(p, w, 2, NULL, 0), LMC_ERR_ARG);
    w[1].name = "b";
    w[1].data = NULL;
    CHECK_EQ_INT(lmc_st_write(p, w, 2, NULL, 0), LMC_ERR_ARG);
    CHECK(contains(lmc_last_error(), "no data"));
    w[1].data = v;
    w[1].n_dims = 9;
    CHECK_EQ_INT(lmc_st_write(p, w, 2, NULL, 0), LMC_ERR_ARG);
    w[1].n_dims = 1;
    w[1].shape[0] = -1;
    CHECK_EQ_INT(lmc_st_write(p, w, 2, NULL, 0), LMC_ERR_ARG);
    w[1].shape[0] = 1;
    const char *meta[] = {"k", "1", "k", "2"};
    CHECK_EQ_INT(lmc_st_write(p, w, 2, meta, 2), LMC_ERR_ARG);
    CHECK(contains(lmc_last_error(), "duplicate metadata key"));
    CHECK_EQ_INT(lmc_st_write(tp("no-such-dir/w.safetensors"), w, 2, NULL, 0), LMC_ERR_IO);
    CHECK(contains(lmc_last_error(), "no-such-dir"));
    struct stat sb;
    CHECK(stat(p, &sb) != 0); /* nothing written by the failed calls */
    CHECK_EQ_INT(lmc_st_write(p, w, 2, meta, 1), LMC_OK);
    CHECK(stat(p, &sb) == 0);
}

/* ---- jsonfile --------------------------------------------------------------------------------- */

static void test_json_file(void) {
    const char *p = tp("cfg.json");
    write_text(p, "\xef\xbb\xbf{\"n\": 12, \"neg\": -3, \"f\": 0.5, \"big\": 9007199254740994, \"max\": -9007199254740992, \"e\": 1e3,"
                  " \"t\": true, \"s\": \"hi\", \"z\": null, \"arr\": [1]}");
    cJSON *root = NULL;
    CHECK_EQ_INT(lmc_json_read_file(p, 0, &root), LMC_OK);
    if (!root) return;
    int64_t i = 0;
    double d = 0;
    int b = -1;
    const char *s = NULL;
    CHECK_EQ_INT(lmc_json_get_int(root, "n", &i), 1);
    CHECK_EQ_INT(i, 12);
    CHECK_EQ_INT(lmc_json_get_int(root, "neg", &i), 1);
    CHECK_EQ_INT(i, -3);
    CHECK_EQ_INT(lmc_json_get_int(root, "e", &i), 1);
    CHECK_EQ_INT(i, 1000);
    CHECK_EQ_INT(lmc_json_get_int(root, "f", &i), -1);
    CHECK_EQ_INT(lmc_json_get_int(root, "big", &i), -1);
    CHECK_EQ_INT(lmc_json_get_int(root, "max", &i), 1);
    CHECK(i == -9007199254740992LL);
    CHECK_EQ_INT(lmc_json_get_int(root, "s", &i), -1);
    i = 77;
    CHECK_EQ_INT(lmc_json_get_int(root, "absent", &i), 0);
    CHECK_EQ_INT(i, 77);
    CHECK_EQ_INT(lmc_json_get_int(root, "z", &i), 0);
    CHECK_EQ_INT(lmc_json_get_double(root, "f", &d), 1);
    CHECK(d == 0.5);
    CHECK_EQ_INT(lmc_json_get_double(root, "t", &d), -1);
    CHECK_EQ_INT(lmc_json_get_bool(root, "t", &b), 1);
    CHECK_EQ_INT(b, 1);
    CHECK_EQ_INT(lmc_json_get_bool(root, "n", &b), -1);
    CHECK_EQ_INT(lmc_json_get_string(root, "s", &s), 1);
    CHECK_EQ_STR(s, "hi");
    CHECK_EQ_INT(lmc_json_get_string(root, "arr", &s), -1);
    CHECK_EQ_INT(lmc_json_get_string(NULL, "s", &s), 0);
    CHECK_EQ_INT(lmc_json_get_int(cJSON_GetObjectItem(root, "arr"), "x", &i), -1);
    CHECK_EQ_STR(lmc_json_type_name(cJSON_GetObjectItem(root, "arr")), "array");
    cJSON_Delete(root);

    /* errors: position, size limit, missing file, NUL, trailing garbage, empty */
    write_text(p, "{\n  \"a\": 1,\n  \"b\": tru\n}");
    root = NULL;
    CHECK_EQ_INT(lmc_json_read_file(p, 0, &root), LMC_ERR_FORMAT);
    CHECK(root == NULL);
    CHECK_MSG(contains(lmc_last_error(), "line 3") && contains(lmc_last_error(), "cfg.json"), "%s", lmc_last_error());
    write_text(p, "{\"a\": 1} {}");
    CHECK_EQ_INT(lmc_json_read_file(p, 0, &root), LMC_ERR_FORMAT);
    CHECK(contains(lmc_last_error(), "byte offset 9"));
    write_text(p, "");
    CHECK_EQ_INT(lmc_json_read_file(p, 0, &root), LMC_ERR_FORMAT);
    CHECK(contains(lmc_last_error(), "unexpected end"));
    write_bytes(p, "{}\0{}", 5);
    CHECK_EQ_INT(lmc_json_read_file(p, 0, &root), LMC_ERR_FORMAT);
    CHECK(contains(lmc_last_error(), "NUL byte at byte offset 2"));
    write_text(p, "{\"a\": [1, 2, 3, 4, 5, 6, 7, 8]}");
    CHECK_EQ_INT(lmc_json_read_file(p, 10, &root), LMC_ERR_RANGE);
    CHECK(contains(lmc_last_error(), "limit"));
    CHECK_EQ_INT(lmc_json_read_file(p, 1000, &root), LMC_OK);
    cJSON_Delete(root);
    root = NULL;
    CHECK_EQ_INT(lmc_json_read_file(tp("nope.json"), 0, &root), LMC_ERR_NOT_FOUND);
    CHECK(contains(lmc_last_error(), "nope.json"));
    CHECK_EQ_INT(lmc_json_read_file(g_dir, 0, &root), LMC_ERR_IO);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/lmc-test-st-XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 2; }
    RUN(test_roundtrip_all_dtypes);
    RUN(test_roundtrip_values);
    RUN(test_scalar_zero_size_and_empty);
    RUN(test_handcrafted_valid);
    RUN(test_sort_for_alignment);
    RUN(test_special_names);
    RUN(test_lookup_many);
    RUN(test_mapping_not_copied);
    RUN(test_reject_file_level);
    RUN(test_reject_headers);
    RUN(test_sharded_index);
    RUN(test_directory_glob_and_single);
    RUN(test_reject_index);
    RUN(test_write_rejects);
    RUN(test_mutations);
    RUN(test_json_file);
    fprintf(stderr, "%d malformed single-file inputs rejected\n", n_malformed);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return TEST_END();
}
