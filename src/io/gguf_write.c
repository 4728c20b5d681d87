/* gguf_write.c — the GGUF writer (version 3, little-endian).
 *
 * The writer owns the encoded metadata bytes (keys and values are copied at
 * add time) and the tensor descriptors with copies of their names; tensor
 * data is borrowed from the caller until lmc_gguf_writer_write returns.
 * write() lays out: header, metadata (general.alignment first when it is not
 * the default), tensor infos, padding, data with every tensor aligned, and
 * goes through a temporary file in the same directory renamed over `path`.
 */
#include "io/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[LMC_GGUF_MAX_DIMS];
    const void *data;
    size_t nbytes;
    uint64_t offset; /* set by write */
} wtensor;

struct lmc_gguf_writer {
    uint8_t *kv;          /* encoded pairs */
    size_t kv_len, kv_cap;
    char **keys;          /* [n_kv] for duplicate checks */
    size_t n_kv, cap_keys;
    wtensor *t;
    size_t n_t, cap_t;
    uint32_t alignment;
};

lmc_status lmc_gguf_writer_init(lmc_gguf_writer **out) {
    lmc_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return lmc_fail(LMC_ERR_NOMEM, "out of memory for a GGUF writer");
    w->alignment = LMC_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return LMC_OK;
}

void lmc_gguf_writer_free(lmc_gguf_writer *w) {
    if (!w) return;
    free(w->kv);
    for (size_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

lmc_status lmc_gguf_writer_set_alignment(lmc_gguf_writer *w, uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > (1u << 20)) {
        return lmc_fail(LMC_ERR_ARG, "GGUF alignment %u is not a power of two ≤ 2^20", alignment);
    }
    w->alignment = alignment;
    return LMC_OK;
}

/* ---- encoding --------------------------------------------------------------------------------- */

static lmc_status put(lmc_gguf_writer *w, const void *p, size_t n) {
    if (n > SIZE_MAX / 2 - w->kv_len) return lmc_fail(LMC_ERR_NOMEM, "GGUF metadata too large");
    if (w->kv_len + n > w->kv_cap) {
        size_t nc = w->kv_cap ? w->kv_cap : 4096;
        while (nc < w->kv_len + n) nc *= 2;
        uint8_t *nk = realloc(w->kv, nc);
        if (!nk) return lmc_fail(LMC_ERR_NOMEM, "out of memory for GGUF metadata");
        w->kv = nk;
        w->kv_cap = nc;
    }
    if (n) memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return LMC_OK;
}

static void st32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void st64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static lmc_status put32(lmc_gguf_writer *w, uint32_t v) {
    uint8_t b[4];
    st32(b, v);
    return put(w, b, 4);
}
static lmc_status put64(lmc_gguf_writer *w, uint64_t v) {
    uint8_t b[8];
    st64(b, v);
    return put(w, b, 8);
}
static lmc_status put_str(lmc_gguf_writer *w, const char *s, size_t n) {
    LMC_TRY(put64(w, n));
    return put(w, s, n);
}

/* Start a pair: check the key, remember it, encode key and type. On error the
 * buffer is rolled back by the caller through `mark`. */
static lmc_status begin_kv(lmc_gguf_writer *w, const char *key, uint32_t type, size_t *mark) {
    if (!key || !*key) return lmc_fail(LMC_ERR_ARG, "GGUF metadata key is empty");
    if (strcmp(key, "general.alignment") == 0) {
        return lmc_fail(LMC_ERR_ARG, "general.alignment is written by lmc_gguf_writer_set_alignment");
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->keys[i], key) == 0) return lmc_fail(LMC_ERR_ARG, "GGUF metadata key \"%s\" added twice", key);
    }
    if (w->n_kv == w->cap_keys) {
        size_t nc = w->cap_keys ? w->cap_keys * 2 : 32;
        char **nk = realloc(w->keys, nc * sizeof *nk);
        if (!nk) return lmc_fail(LMC_ERR_NOMEM, "out of memory for GGUF metadata");
        w->keys = nk;
        w->cap_keys = nc;
    }
    size_t n = strlen(key);
    char *k = malloc(n + 1);
    if (!k) return lmc_fail(LMC_ERR_NOMEM, "out of memory for GGUF metadata");
    memcpy(k, key, n + 1);
    *mark = w->kv_len;
    lmc_status st = put_str(w, key, n);
    if (st == LMC_OK) st = put32(w, type);
    if (st < 0) {
        free(k);
        w->kv_len = *mark;
        return st;
    }
    w->keys[w->n_kv++] = k;
    return LMC_OK;
}

/* Finish a pair: on error, undo begin_kv. */
static lmc_status end_kv(lmc_gguf_writer *w, size_t mark, lmc_status st) {
    if (st < 0) {
        w->kv_len = mark;
        free(w->keys[--w->n_kv]);
    }
    return st;
}

static lmc_status add_scalar(lmc_gguf_writer *w, const char *key, uint32_t type, uint64_t bits, size_t size) {
    size_t mark;
    LMC_TRY(begin_kv(w, key, type, &mark));
    uint8_t b[8];
    st64(b, bits);
    return end_kv(w, mark, put(w, b, size));
}

lmc_status lmc_gguf_writer_add_u8(lmc_gguf_writer *w, const char *key, uint8_t v) { return add_scalar(w, key, LMC_GGUF_U8, v, 1); }
lmc_status lmc_gguf_writer_add_i8(lmc_gguf_writer *w, const char *key, int8_t v) { return add_scalar(w, key, LMC_GGUF_I8, (uint8_t)v, 1); }
lmc_status lmc_gguf_writer_add_u16(lmc_gguf_writer *w, const char *key, uint16_t v) { return add_scalar(w, key, LMC_GGUF_U16, v, 2); }
lmc_status lmc_gguf_writer_add_i16(lmc_gguf_writer *w, const char *key, int16_t v) { return add_scalar(w, key, LMC_GGUF_I16, (uint16_t)v, 2); }
lmc_status lmc_gguf_writer_add_u32(lmc_gguf_writer *w, const char *key, uint32_t v) { return add_scalar(w, key, LMC_GGUF_U32, v, 4); }
lmc_status lmc_gguf_writer_add_i32(lmc_gguf_writer *w, const char *key, int32_t v) { return add_scalar(w, key, LMC_GGUF_I32, (uint32_t)v, 4); }
lmc_status lmc_gguf_writer_add_u64(lmc_gguf_writer *w, const char *key, uint64_t v) { return add_scalar(w, key, LMC_GGUF_U64, v, 8); }
lmc_status lmc_gguf_writer_add_i64(lmc_gguf_writer *w, const char *key, int64_t v) { return add_scalar(w, key, LMC_GGUF_I64, (uint64_t)v, 8); }
lmc_status lmc_gguf_writer_add_bool(lmc_gguf_writer *w, const char *key, int v) { return add_scalar(w, key, LMC_GGUF_BOOL, v != 0, 1); }

lmc_status lmc_gguf_writer_add_f32(lmc_gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return add_scalar(w, key, LMC_GGUF_F32, u, 4);
}

lmc_status lmc_gguf_writer_add_f64(lmc_gguf_writer *w, const char *key, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return add_scalar(w, key, LMC_GGUF_F64, u, 8);
}

lmc_status lmc_gguf_writer_add_strn(lmc_gguf_writer *w, const char *key, const char *s, size_t len) {
    if (!s && len) return lmc_fail(LMC_ERR_ARG, "GGUF metadata \"%s\": NULL string", key ? key : "");
    size_t mark;
    LMC_TRY(begin_kv(w, key, LMC_GGUF_STRING, &mark));
    return end_kv(w, mark, put_str(w, s, len));
}

lmc_status lmc_gguf_writer_add_str(lmc_gguf_writer *w, const char *key, const char *s) {
    if (!s) return lmc_fail(LMC_ERR_ARG, "GGUF metadata \"%s\": NULL string", key ? key : "");
    return lmc_gguf_writer_add_strn(w, key, s, strlen(s));
}

static size_t elem_size(lmc_gguf_vtype t) {
    switch (t) {
    case LMC_GGUF_U8: case LMC_GGUF_I8: case LMC_GGUF_BOOL: return 1;
    case LMC_GGUF_U16: case LMC_GGUF_I16: return 2;
    case LMC_GGUF_U32: case LMC_GGUF_I32: case LMC_GGUF_F32: return 4;
    case LMC_GGUF_U64: case LMC_GGUF_I64: case LMC_GGUF_F64: return 8;
    default: return 0;
    }
}

lmc_status lmc_gguf_writer_add_arr(lmc_gguf_writer *w, const char *key, lmc_gguf_vtype elem_type, const void *data,
                                   uint64_t n) {
    size_t sz = elem_size(elem_type);
    if (!sz) {
        return lmc_fail(LMC_ERR_ARG, "GGUF metadata \"%s\": lmc_gguf_writer_add_arr takes fixed-size elements, not %s",
                        key ? key : "", lmc_gguf_vtype_name(elem_type));
    }
    if (n && !data) return lmc_fail(LMC_ERR_ARG, "GGUF metadata \"%s\": NULL array data", key ? key : "");
    if (n > SIZE_MAX / 16) return lmc_fail(LMC_ERR_ARG, "GGUF metadata \"%s\": array too long", key ? key : "");
    size_t mark;
    LMC_TRY(begin_kv(w, key, LMC_GGUF_ARRAY, &mark));
    lmc_status st = put32(w, elem_type);
    if (st == LMC_OK) st = put64(w, n);
    const uint8_t *p = data;
    for (uint64_t i = 0; i < n && st == LMC_OK; i++) {
        uint8_t b[8];
        switch (sz) {
        case 1: b[0] = elem_type == LMC_GGUF_BOOL ? (p[i] != 0) : p[i]; break;
        case 2: { uint16_t v; memcpy(&v, p + 2 * i, 2); b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); break; }
        case 4: { uint32_t v; memcpy(&v, p + 4 * i, 4); st32(b, v); break; }
        default: { uint64_t v; memcpy(&v, p + 8 * i, 8); st64(b, v); break; }
        }
        st = put(w, b, sz);
    }
    return end_kv(w, mark, st);
}

lmc_status lmc_gguf_writer_add_str_arr(lmc_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (n && !strs) return lmc_fail(LMC_ERR_ARG, "GGUF metadata \"%s\": NULL string array", key ? key : "");
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) return lmc_fail(LMC_ERR_ARG, "GGUF metadata \"%s\": string %llu is NULL", key ? key : "", (unsigned long long)i);
    }
    size_t mark;
    LMC_TRY(begin_kv(w, key, LMC_GGUF_ARRAY, &mark));
    lmc_status st = put32(w, LMC_GGUF_STRING);
    if (st == LMC_OK) st = put64(w, n);
    for (uint64_t i = 0; i < n && st == LMC_OK; i++) st = put_str(w, strs[i], strlen(strs[i]));
    return end_kv(w, mark, st);
}

/* ---- tensors ---------------------------------------------------------------------------------- */

lmc_status lmc_gguf_writer_add_tensor(lmc_gguf_writer *w, const char *name, uint32_t type, int n_dims,
                                      const int64_t *ne, const void *data) {
    if (!name || !*name || strlen(name) > LMC_GGUF_MAX_NAME) {
        return lmc_fail(LMC_ERR_ARG, "GGUF tensor name \"%s\" is empty or longer than %d bytes", name ? name : "",
                        LMC_GGUF_MAX_NAME);
    }
    if (n_dims < 1 || n_dims > LMC_GGUF_MAX_DIMS) {
        return lmc_fail(LMC_ERR_ARG, "GGUF tensor \"%s\": %d dimensions (1..%d)", name, n_dims, LMC_GGUF_MAX_DIMS);
    }
    const char *tname = lmc_ggml_type_name(type);
    if (!tname) return lmc_fail(LMC_ERR_ARG, "GGUF tensor \"%s\": unknown GGML type id %u", name, type);
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->t[i].name, name) == 0) return lmc_fail(LMC_ERR_ARG, "GGUF tensor \"%s\" added twice", name);
    }
    wtensor t = {.type = type, .n_dims = n_dims, .data = data};
    for (int d = 0; d < LMC_GGUF_MAX_DIMS; d++) t.ne[d] = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return lmc_fail(LMC_ERR_ARG, "GGUF tensor \"%s\": dimension %d is %lld", name, d, (long long)ne[d]);
        t.ne[d] = ne[d];
    }
    size_t nb;
    lmc_status st = lmc_ggml_row_bytes(type, t.ne[0], &nb);
    if (st < 0) return lmc_fail_context(LMC_ERR_ARG, "GGUF tensor \"%s\"", name);
    for (int d = 1; d < LMC_GGUF_MAX_DIMS; d++) {
        if (t.ne[d] && nb > SIZE_MAX / 2 / (size_t)t.ne[d]) return lmc_fail(LMC_ERR_ARG, "GGUF tensor \"%s\" is too large", name);
        nb *= (size_t)t.ne[d];
    }
    if (nb && !data) return lmc_fail(LMC_ERR_ARG, "GGUF tensor \"%s\": NULL data", name);
    t.nbytes = nb;
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *nt = realloc(w->t, nc * sizeof *nt);
        if (!nt) return lmc_fail(LMC_ERR_NOMEM, "out of memory for GGUF tensors");
        w->t = nt;
        w->cap_t = nc;
    }
    size_t n = strlen(name);
    if (!(t.name = malloc(n + 1))) return lmc_fail(LMC_ERR_NOMEM, "out of memory for GGUF tensors");
    memcpy(t.name, name, n + 1);
    w->t[w->n_t++] = t;
    return LMC_OK;
}

/* ---- output ----------------------------------------------------------------------------------- */

static int write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

static int write_zeros(FILE *f, size_t n) {
    static const uint8_t z[256];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        if (fwrite(z, 1, k, f) != k) return 0;
        n -= k;
    }
    return 1;
}

static size_t pad_to(uint64_t pos, uint32_t a) { return (size_t)((a - pos % a) % a); }

/* One file: the metadata of `meta` (NULL: none) then the pairs already encoded in extra
 * (n_extra of them), and tensors [t0, t1) of w. */
static lmc_status write_file(lmc_gguf_writer *w, const char *path, const lmc_gguf_writer *meta,
                             const lmc_gguf_writer *extra, size_t t0, size_t t1) {
    uint32_t a = w->alignment;
    /* tensor offsets within the data section */
    uint64_t off = 0;
    for (size_t i = t0; i < t1; i++) {
        off += pad_to(off, a);
        w->t[i].offset = off;
        off += w->t[i].nbytes;
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) return lmc_fail(LMC_ERR_NOMEM, "out of memory writing %s", path);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        lmc_status st = lmc_fail(LMC_ERR_IO, "cannot create a temporary file beside %s: %s", path, strerror(errno));
        free(tmp);
        return st;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        lmc_status st = lmc_fail(LMC_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return st;
    }
    int ok = 1;
    uint64_t pos = 0;
    uint8_t b[8];
    int with_align = a != LMC_GGUF_DEFAULT_ALIGNMENT;
    /* header */
    st32(b, LMC_GGUF_MAGIC); ok = ok && write_all(f, b, 4);
    st32(b, LMC_GGUF_VERSION); ok = ok && write_all(f, b, 4);
    st64(b, t1 - t0); ok = ok && write_all(f, b, 8);
    st64(b, (meta ? meta->n_kv : 0) + (extra ? extra->n_kv : 0) + (with_align ? 1 : 0)); ok = ok && write_all(f, b, 8);
    pos += 24;
    if (with_align) {
        static const char k[] = "general.alignment";
        st64(b, sizeof k - 1); ok = ok && write_all(f, b, 8);
        ok = ok && write_all(f, k, sizeof k - 1);
        st32(b, LMC_GGUF_U32); ok = ok && write_all(f, b, 4);
        st32(b, a); ok = ok && write_all(f, b, 4);
        pos += 8 + sizeof k - 1 + 4 + 4;
    }
    if (meta) {
        ok = ok && write_all(f, meta->kv, meta->kv_len);
        pos += meta->kv_len;
    }
    if (extra) {
        ok = ok && write_all(f, extra->kv, extra->kv_len);
        pos += extra->kv_len;
    }
    /* tensor infos */
    for (size_t i = t0; i < t1 && ok; i++) {
        const wtensor *t = &w->t[i];
        size_t n = strlen(t->name);
        st64(b, n); ok = ok && write_all(f, b, 8);
        ok = ok && write_all(f, t->name, n);
        st32(b, (uint32_t)t->n_dims); ok = ok && write_all(f, b, 4);
        for (int d = 0; d < t->n_dims; d++) { st64(b, (uint64_t)t->ne[d]); ok = ok && write_all(f, b, 8); }
        st32(b, t->type); ok = ok && write_all(f, b, 4);
        st64(b, t->offset); ok = ok && write_all(f, b, 8);
        pos += 8 + n + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    /* data */
    ok = ok && write_zeros(f, pad_to(pos, a));
    uint64_t doff = 0;
    for (size_t i = t0; i < t1 && ok; i++) {
        const wtensor *t = &w->t[i];
        ok = ok && write_zeros(f, (size_t)(t->offset - doff));
        ok = ok && write_all(f, t->data, t->nbytes);
        doff = t->offset + t->nbytes;
    }
    if (t1 > t0) ok = ok && write_zeros(f, pad_to(doff, a));
    int e = errno;
    if (ok && fflush(f) != 0) ok = 0, e = errno;
    if (ok && fsync(fileno(f)) != 0) ok = 0, e = errno;
    if (fclose(f) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
    lmc_status st = LMC_OK;
    if (!ok) {
        st = lmc_fail(LMC_ERR_IO, "cannot write %s: %s", path, strerror(e));
        unlink(tmp);
    }
    free(tmp);
    return st;
}

lmc_status lmc_gguf_writer_write(lmc_gguf_writer *w, const char *path) { return write_file(w, path, w, NULL, 0, w->n_t); }

lmc_status lmc_gguf_split_path(const char *prefix, int no, int count, char *out, size_t cap) {
    if (count < 1 || count > LMC_GGUF_MAX_SPLITS || no < 1 || no > count)
        return lmc_fail(LMC_ERR_ARG, "split %d of %d (1..%d shards)", no, count, LMC_GGUF_MAX_SPLITS);
    int n = snprintf(out, cap, "%s-%05d-of-%05d.gguf", prefix, no, count);
    if (n < 0 || (size_t)n >= cap) return lmc_fail(LMC_ERR_ARG, "split file name too long: %s", prefix);
    return LMC_OK;
}

lmc_status lmc_gguf_writer_write_split(lmc_gguf_writer *w, const char *prefix, int64_t max_tensors, int *n_files) {
    if (max_tensors < 1) return lmc_fail(LMC_ERR_ARG, "a split needs at least one tensor per file");
    int64_t count = w->n_t ? ((int64_t)w->n_t + max_tensors - 1) / max_tensors : 1;
    if (count > LMC_GGUF_MAX_SPLITS)
        return lmc_fail(LMC_ERR_ARG, "%zu tensors at %lld per file make %lld files (at most %d)", w->n_t,
                        (long long)max_tensors, (long long)count, LMC_GGUF_MAX_SPLITS);
    char path[4096];
    for (int64_t i = 0; i < count; i++) {
        /* the split keys as llama.cpp's gguf-split writes them: every shard has them, the first
         * one also carries all the metadata */
        lmc_gguf_writer *sk;
        LMC_TRY(lmc_gguf_writer_init(&sk));
        lmc_status st = lmc_gguf_writer_add_u16(sk, "split.no", (uint16_t)i);
        if (st >= 0) st = lmc_gguf_writer_add_u16(sk, "split.count", (uint16_t)count);
        if (st >= 0) st = lmc_gguf_writer_add_i32(sk, "split.tensors.count", (int32_t)w->n_t);
        if (st >= 0) st = lmc_gguf_split_path(prefix, (int)i + 1, (int)count, path, sizeof path);
        const size_t t0 = (size_t)(i * max_tensors), t1 = t0 + (size_t)max_tensors < w->n_t ? t0 + (size_t)max_tensors : w->n_t;
        if (st >= 0) st = write_file(w, path, i == 0 ? w : NULL, sk, t0, t1);
        lmc_gguf_writer_free(sk);
        if (st < 0) return st;
    }
    if (n_files) *n_files = (int)count;
    return LMC_OK;
}
