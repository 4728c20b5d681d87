/* gguf.c — GGUF reader (mmap or caller buffer, full validation at open) and
 * writer (version 3, atomic temp + rename).
 *
 * A context owns: the mapping (lmc_file_unmap on close), the label, NUL-terminated
 * copies of every key, scalar string value and tensor name, the sorted index
 * tables, and one pool of element offsets for every array whose elements
 * have variable size (strings, nested arrays), so element access is O(1).
 * Every count and length read from the file is checked against the bytes
 * that remain before it is used; every size is computed with overflow checks.
 */
#include "io/gguf.h"
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_KEY 65535          /* bytes of a metadata key */
#define GGUF_MAX_TENSOR_NAME 1023   /* bytes of a tensor name the reader accepts */

/* ---- type tables ------------------------------------------------------------------------------ */

typedef struct ggml_type_info { const char *name; int block, size; } ggml_type_info;

#define QK_K 256
static const ggml_type_info ggml_types[LMC_GGML_TYPE_LIMIT] = {
    [LMC_GGML_F32] = {"F32", 1, 4},
    [LMC_GGML_F16] = {"F16", 1, 2},
    [LMC_GGML_Q4_0] = {"Q4_0", 32, 2 + 16},
    [LMC_GGML_Q4_1] = {"Q4_1", 32, 2 + 2 + 16},
    [LMC_GGML_Q5_0] = {"Q5_0", 32, 2 + 4 + 16},
    [LMC_GGML_Q5_1] = {"Q5_1", 32, 2 + 2 + 4 + 16},
    [LMC_GGML_Q8_0] = {"Q8_0", 32, 2 + 32},
    [LMC_GGML_Q8_1] = {"Q8_1", 32, 4 + 4 + 32},
    [LMC_GGML_Q2_K] = {"Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4},
    [LMC_GGML_Q3_K] = {"Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12},
    [LMC_GGML_Q4_K] = {"Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12},
    [LMC_GGML_Q5_K] = {"Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12},
    [LMC_GGML_Q6_K] = {"Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16},
    [LMC_GGML_Q8_K] = {"Q8_K", QK_K, 4 + QK_K + QK_K / 8},
    [LMC_GGML_IQ2_XXS] = {"IQ2_XXS", QK_K, 2 + QK_K / 4},
    [LMC_GGML_IQ2_XS] = {"IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32},
    [LMC_GGML_IQ3_XXS] = {"IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8},
    [LMC_GGML_IQ1_S] = {"IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16},
    [LMC_GGML_IQ4_NL] = {"IQ4_NL", 32, 2 + 16},
    [LMC_GGML_IQ3_S] = {"IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4},
    [LMC_GGML_IQ2_S] = {"IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16},
    [LMC_GGML_IQ4_XS] = {"IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64},
    [LMC_GGML_I8] = {"I8", 1, 1},
    [LMC_GGML_I16] = {"I16", 1, 2},
    [LMC_GGML_I32] = {"I32", 1, 4},
    [LMC_GGML_I64] = {"I64", 1, 8},
    [LMC_GGML_F64] = {"F64", 1, 8},
    [LMC_GGML_IQ1_M] = {"IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32},
    [LMC_GGML_BF16] = {"BF16", 1, 2},
    [LMC_GGML_TQ1_0] = {"TQ1_0", QK_K, 2 + 4 * 13},
    [LMC_GGML_TQ2_0] = {"TQ2_0", QK_K, 2 + 64},
    [LMC_GGML_MXFP4] = {"MXFP4", 32, 1 + 16},
    [LMC_GGML_NVFP4] = {"NVFP4", 64, 4 + 32},
    [LMC_GGML_Q1_0] = {"Q1_0", 128, 2 + 16},
};

static const ggml_type_info *type_info(uint32_t type) {
    if (type >= LMC_GGML_TYPE_LIMIT || !ggml_types[type].name) return NULL;
    return &ggml_types[type];
}

const char *lmc_ggml_type_name(uint32_t type) {
    const ggml_type_info *ti = type_info(type);
    return ti ? ti->name : NULL;
}

int lmc_ggml_block_size(uint32_t type) {
    const ggml_type_info *ti = type_info(type);
    return ti ? ti->block : 0;
}

int lmc_ggml_type_size(uint32_t type) {
    const ggml_type_info *ti = type_info(type);
    return ti ? ti->size : 0;
}

lmc_status lmc_ggml_row_bytes(uint32_t type, int64_t n, size_t *out) {
    const ggml_type_info *ti = type_info(type);
    if (!ti) return lmc_fail(LMC_ERR_FORMAT, "unknown GGML type id %u", type);
    if (n < 0 || n % ti->block) {
        return lmc_fail(LMC_ERR_FORMAT, "a row of %lld elements is not a whole number of %s blocks (%d elements each)",
                        (long long)n, ti->name, ti->block);
    }
    uint64_t blocks = (uint64_t)n / (uint64_t)ti->block;
    if (blocks > SIZE_MAX / (uint64_t)ti->size) return lmc_fail(LMC_ERR_FORMAT, "row of %lld %s elements is too large", (long long)n, ti->name);
    *out = (size_t)(blocks * (uint64_t)ti->size);
    return LMC_OK;
}

lmc_status lmc_ggml_type_to_dtype(uint32_t type, lmc_dtype *out) {
    switch (type) {
    case LMC_GGML_F32: *out = LMC_DTYPE_F32; return LMC_OK;
    case LMC_GGML_F16: *out = LMC_DTYPE_F16; return LMC_OK;
    case LMC_GGML_BF16: *out = LMC_DTYPE_BF16; return LMC_OK;
    case LMC_GGML_F64: *out = LMC_DTYPE_F64; return LMC_OK;
    case LMC_GGML_I8: *out = LMC_DTYPE_I8; return LMC_OK;
    case LMC_GGML_I16: *out = LMC_DTYPE_I16; return LMC_OK;
    case LMC_GGML_I32: *out = LMC_DTYPE_I32; return LMC_OK;
    case LMC_GGML_I64: *out = LMC_DTYPE_I64; return LMC_OK;
    case LMC_GGML_Q8_0: *out = LMC_DTYPE_Q8_0; return LMC_OK;
    case LMC_GGML_Q4_0: *out = LMC_DTYPE_Q4_0; return LMC_OK;
    case LMC_GGML_Q4_1: *out = LMC_DTYPE_Q4_1; return LMC_OK;
    case LMC_GGML_Q5_0: *out = LMC_DTYPE_Q5_0; return LMC_OK;
    case LMC_GGML_Q5_1: *out = LMC_DTYPE_Q5_1; return LMC_OK;
    case LMC_GGML_Q2_K: *out = LMC_DTYPE_Q2_K; return LMC_OK;
    case LMC_GGML_Q3_K: *out = LMC_DTYPE_Q3_K; return LMC_OK;
    case LMC_GGML_Q4_K: *out = LMC_DTYPE_Q4_K; return LMC_OK;
    case LMC_GGML_Q5_K: *out = LMC_DTYPE_Q5_K; return LMC_OK;
    case LMC_GGML_Q6_K: *out = LMC_DTYPE_Q6_K; return LMC_OK;
    case LMC_GGML_MXFP4: *out = LMC_DTYPE_MXFP4; return LMC_OK;
    default: break;
    }
    const char *name = lmc_ggml_type_name(type);
    if (name) return lmc_fail(LMC_ERR_UNSUPPORTED, "GGML type %s (id %u) has no lmc dtype yet", name, type);
    return lmc_fail(LMC_ERR_UNSUPPORTED, "unknown GGML type id %u", type);
}

lmc_status lmc_ggml_type_from_dtype(lmc_dtype dt, uint32_t *out) {
    switch (dt) {
    case LMC_DTYPE_F32: *out = LMC_GGML_F32; return LMC_OK;
    case LMC_DTYPE_F16: *out = LMC_GGML_F16; return LMC_OK;
    case LMC_DTYPE_BF16: *out = LMC_GGML_BF16; return LMC_OK;
    case LMC_DTYPE_F64: *out = LMC_GGML_F64; return LMC_OK;
    case LMC_DTYPE_I8: *out = LMC_GGML_I8; return LMC_OK;
    case LMC_DTYPE_I16: *out = LMC_GGML_I16; return LMC_OK;
    case LMC_DTYPE_I32: *out = LMC_GGML_I32; return LMC_OK;
    case LMC_DTYPE_I64: *out = LMC_GGML_I64; return LMC_OK;
    case LMC_DTYPE_Q8_0: *out = LMC_GGML_Q8_0; return LMC_OK;
    case LMC_DTYPE_Q4_0: *out = LMC_GGML_Q4_0; return LMC_OK;
    case LMC_DTYPE_Q4_1: *out = LMC_GGML_Q4_1; return LMC_OK;
    case LMC_DTYPE_Q5_0: *out = LMC_GGML_Q5_0; return LMC_OK;
    case LMC_DTYPE_Q5_1: *out = LMC_GGML_Q5_1; return LMC_OK;
    case LMC_DTYPE_Q2_K: *out = LMC_GGML_Q2_K; return LMC_OK;
    case LMC_DTYPE_Q3_K: *out = LMC_GGML_Q3_K; return LMC_OK;
    case LMC_DTYPE_Q4_K: *out = LMC_GGML_Q4_K; return LMC_OK;
    case LMC_DTYPE_Q5_K: *out = LMC_GGML_Q5_K; return LMC_OK;
    case LMC_DTYPE_Q6_K: *out = LMC_GGML_Q6_K; return LMC_OK;
    case LMC_DTYPE_MXFP4: *out = LMC_GGML_MXFP4; return LMC_OK;
    default: return lmc_fail(LMC_ERR_UNSUPPORTED, "dtype %s has no GGML type", lmc_dtype_name(dt));
    }
}

static const char *const vtype_names[LMC_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *lmc_gguf_vtype_name(uint32_t vtype) {
    return vtype < LMC_GGUF_VTYPE_COUNT ? vtype_names[vtype] : "?";
}

/* Bytes of a fixed-size value type; 0 for string, array and unknown ids. */
static size_t vtype_size(uint32_t t) {
    switch (t) {
    case LMC_GGUF_U8: case LMC_GGUF_I8: case LMC_GGUF_BOOL: return 1;
    case LMC_GGUF_U16: case LMC_GGUF_I16: return 2;
    case LMC_GGUF_U32: case LMC_GGUF_I32: case LMC_GGUF_F32: return 4;
    case LMC_GGUF_U64: case LMC_GGUF_I64: case LMC_GGUF_F64: return 8;
    default: return 0;
    }
}

static int vtype_is_int(uint32_t t) {
    return t == LMC_GGUF_U8 || t == LMC_GGUF_I8 || t == LMC_GGUF_U16 || t == LMC_GGUF_I16 || t == LMC_GGUF_U32 ||
           t == LMC_GGUF_I32 || t == LMC_GGUF_U64 || t == LMC_GGUF_I64;
}

/* ---- little-endian loads ---------------------------------------------------------------------- */

static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld64(const uint8_t *p) { return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32); }

/* ---- context ---------------------------------------------------------------------------------- */

typedef struct gguf_kv {
    char *key;                 /* NUL-terminated copy */
    uint32_t type;
    uint64_t raw;              /* fixed-size scalars: the bytes, zero-extended */
    char *str;                 /* strings: NUL-terminated copy */
    size_t str_len;
    uint32_t arr_type;         /* arrays: element type, count, data offset, pool start */
    uint64_t arr_n, arr_off, arr_pool;
} gguf_kv;

typedef struct arr_ref { uint64_t data_off, pool_start; } arr_ref;

struct lmc_gguf {
    char *label;
    const uint8_t *base;       /* the file bytes */
    size_t size;
    void *map;                 /* non-NULL when mapped by us (lmc_file_map) */
    size_t map_len;
    uint32_t version, alignment;
    uint64_t data_off;
    gguf_kv *kv;
    int64_t n_kv;
    int64_t *kv_sorted;        /* [n_kv] kv indices sorted by key */
    lmc_gguf_tensor *tensors;
    int64_t n_tensors;
    int64_t *t_sorted;         /* [n_tensors] tensor indices sorted by name */
    uint64_t *pool;            /* element offsets of variable-size arrays */
    size_t n_pool, cap_pool;
    arr_ref *arrs;             /* variable-size arrays by increasing data offset */
    size_t n_arrs, cap_arrs;
    size_t total_bytes;
    struct lmc_gguf **parts;   /* a split GGUF's files 2..N (owned; their tensors are listed here too) */
    int64_t n_parts;
};

void lmc_gguf_close(lmc_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_parts; i++) lmc_gguf_close(g->parts[i]);
    free(g->parts);
    if (g->map) {
        lmc_file_unmap(g->map, g->map_len);
    }
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
    }
    free(g->kv);
    free(g->kv_sorted);
    for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->tensors);
    free(g->t_sorted);
    free(g->pool);
    free(g->arrs);
    free(g->label);
    free(g);
}

/* ---- parsing ---------------------------------------------------------------------------------- */

typedef struct cur {
    lmc_gguf *g;
    size_t pos;
} cur;

static size_t left(const cur *c) { return c->g->size - c->pos; }

static lmc_status truncated(const cur *c, const char *what) {
    return lmc_fail(LMC_ERR_FORMAT, "%s: truncated at byte %zu of %zu reading %s", c->g->label, c->pos, c->g->size,
                    what);
}

static lmc_status rd32(cur *c, uint32_t *v, const char *what) {
    if (left(c) < 4) return truncated(c, what);
    *v = ld32(c->g->base + c->pos);
    c->pos += 4;
    return LMC_OK;
}

static lmc_status rd64(cur *c, uint64_t *v, const char *what) {
    if (left(c) < 8) return truncated(c, what);
    *v = ld64(c->g->base + c->pos);
    c->pos += 8;
    return LMC_OK;
}

/* A string: sets *s to its bytes in the file and *len; checks the length against what remains. */
static lmc_status rd_str(cur *c, const uint8_t **s, uint64_t *len, const char *what) {
    LMC_TRY(rd64(c, len, what));
    if (*len > left(c)) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: %s at byte %zu claims %llu bytes but only %zu remain", c->g->label, what,
                        c->pos - 8, (unsigned long long)*len, left(c));
    }
    *s = c->g->base + c->pos;
    c->pos += (size_t)*len;
    return LMC_OK;
}

static char *dup_bytes(const uint8_t *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static lmc_status pool_reserve(lmc_gguf *g, uint64_t n, uint64_t *start) {
    if (n > SIZE_MAX / 16 - g->n_pool) return lmc_fail(LMC_ERR_NOMEM, "%s: too many array elements", g->label);
    size_t need = g->n_pool + (size_t)n;
    if (need > g->cap_pool) {
        size_t nc = g->cap_pool ? g->cap_pool : 256;
        while (nc < need) nc *= 2;
        uint64_t *np = realloc(g->pool, nc * sizeof *np);
        if (!np) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory for %zu array offsets", g->label, need);
        g->pool = np;
        g->cap_pool = nc;
    }
    *start = g->n_pool;
    g->n_pool = need;
    return LMC_OK;
}

static lmc_status arr_register(lmc_gguf *g, uint64_t data_off, uint64_t pool_start) {
    if (g->n_arrs == g->cap_arrs) {
        size_t nc = g->cap_arrs ? g->cap_arrs * 2 : 16;
        arr_ref *na = realloc(g->arrs, nc * sizeof *na);
        if (!na) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", g->label);
        g->arrs = na;
        g->cap_arrs = nc;
    }
    g->arrs[g->n_arrs].data_off = data_off;
    g->arrs[g->n_arrs].pool_start = pool_start;
    g->n_arrs++;
    return LMC_OK;
}

/* Validate one array body (after its key and value type): element type, count, elements.
 * Sets the element type, count, file offset of the first element and (for variable-size
 * elements) the pool index of its offsets table. `key` names it in messages. */
static lmc_status parse_array(cur *c, const char *key, int depth, uint32_t *etype, uint64_t *n, uint64_t *data_off,
                              uint64_t *pool_start) {
    lmc_gguf *g = c->g;
    if (depth > LMC_GGUF_MAX_DEPTH) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: metadata \"%s\": arrays nested deeper than %d", g->label, key,
                        LMC_GGUF_MAX_DEPTH);
    }
    LMC_TRY(rd32(c, etype, "an array element type"));
    if (*etype >= LMC_GGUF_VTYPE_COUNT) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: metadata \"%s\": unknown array element type %u", g->label, key, *etype);
    }
    LMC_TRY(rd64(c, n, "an array length"));
    *data_off = c->pos;
    *pool_start = 0;
    size_t esz = vtype_size(*etype);
    size_t min_sz = esz ? esz : (*etype == LMC_GGUF_STRING ? 8 : 12);
    if (*n > left(c) / min_sz) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: metadata \"%s\": array of %llu %s elements does not fit in the %zu bytes left",
                        g->label, key, (unsigned long long)*n, lmc_gguf_vtype_name(*etype), left(c));
    }
    if (esz) {
        if (*etype == LMC_GGUF_BOOL) {
            for (uint64_t i = 0; i < *n; i++) {
                uint8_t b = g->base[c->pos + i];
                if (b > 1) {
                    return lmc_fail(LMC_ERR_FORMAT, "%s: metadata \"%s\": bool element %llu is %u (not 0 or 1)", g->label,
                                    key, (unsigned long long)i, b);
                }
            }
        }
        c->pos += (size_t)(*n * esz);
        return LMC_OK;
    }
    uint64_t start = 0;
    LMC_TRY(pool_reserve(g, *n, &start));
    LMC_TRY(arr_register(g, *data_off, start));
    *pool_start = start;
    for (uint64_t i = 0; i < *n; i++) {
        g->pool[start + i] = c->pos - *data_off;
        if (*etype == LMC_GGUF_STRING) {
            const uint8_t *s;
            uint64_t len;
            LMC_TRY(rd_str(c, &s, &len, "a string array element"));
        } else {
            uint32_t et2;
            uint64_t n2, off2, pool2;
            LMC_TRY(parse_array(c, key, depth + 1, &et2, &n2, &off2, &pool2));
        }
    }
    return LMC_OK;
}

static int cmp_kv_key(const void *a, const void *b, void *ctx) {
    const lmc_gguf *g = ctx;
    return strcmp(g->kv[*(const int64_t *)a].key, g->kv[*(const int64_t *)b].key);
}

static int cmp_tensor_name(const void *a, const void *b, void *ctx) {
    const lmc_gguf *g = ctx;
    return strcmp(g->tensors[*(const int64_t *)a].name, g->tensors[*(const int64_t *)b].name);
}

static int cmp_tensor_offset(const void *a, const void *b, void *ctx) {
    const lmc_gguf *g = ctx;
    const lmc_gguf_tensor *x = &g->tensors[*(const int64_t *)a], *y = &g->tensors[*(const int64_t *)b];
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

static lmc_status parse_kvs(cur *c, uint64_t n_kv) {
    lmc_gguf *g = c->g;
    /* a pair takes at least 8 (key length) + 4 (type) + 1 (value) bytes */
    if (n_kv > left(c) / 13) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: header claims %llu metadata pairs but only %zu bytes follow", g->label,
                        (unsigned long long)n_kv, left(c));
    }
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    if (!g->kv) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory for %llu metadata pairs", g->label, (unsigned long long)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        const uint8_t *ks;
        uint64_t klen;
        char what[64];
        snprintf(what, sizeof what, "the key of metadata pair %llu", (unsigned long long)i);
        LMC_TRY(rd_str(c, &ks, &klen, what));
        if (klen == 0 || klen > GGUF_MAX_KEY || memchr(ks, 0, (size_t)klen)) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: metadata pair %llu has an invalid key (%llu bytes%s)", g->label,
                            (unsigned long long)i, (unsigned long long)klen,
                            klen && klen <= GGUF_MAX_KEY ? ", contains NUL" : "");
        }
        gguf_kv *kv = &g->kv[i];
        if (!(kv->key = dup_bytes(ks, (size_t)klen))) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", g->label);
        g->n_kv = (int64_t)i + 1;
        LMC_TRY(rd32(c, &kv->type, "a metadata value type"));
        if (kv->type >= LMC_GGUF_VTYPE_COUNT) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: metadata \"%s\" has unknown value type %u", g->label, kv->key, kv->type);
        }
        size_t sz = vtype_size(kv->type);
        if (sz) {
            if (left(c) < sz) return truncated(c, kv->key);
            const uint8_t *p = g->base + c->pos;
            kv->raw = sz == 1 ? p[0] : sz == 2 ? ld16(p) : sz == 4 ? ld32(p) : ld64(p);
            if (kv->type == LMC_GGUF_BOOL && kv->raw > 1) {
                return lmc_fail(LMC_ERR_FORMAT, "%s: metadata \"%s\": bool value is %u (not 0 or 1)", g->label, kv->key,
                                (unsigned)kv->raw);
            }
            c->pos += sz;
        } else if (kv->type == LMC_GGUF_STRING) {
            const uint8_t *s;
            uint64_t len;
            LMC_TRY(rd_str(c, &s, &len, kv->key));
            if (!(kv->str = dup_bytes(s, (size_t)len))) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", g->label);
            kv->str_len = (size_t)len;
        } else {
            LMC_TRY(parse_array(c, kv->key, 1, &kv->arr_type, &kv->arr_n, &kv->arr_off, &kv->arr_pool));
        }
    }
    g->kv_sorted = malloc((n_kv ? (size_t)n_kv : 1) * sizeof *g->kv_sorted);
    if (!g->kv_sorted) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", g->label);
    for (int64_t i = 0; i < g->n_kv; i++) g->kv_sorted[i] = i;
    qsort_r(g->kv_sorted, (size_t)g->n_kv, sizeof *g->kv_sorted, cmp_kv_key, g);
    for (int64_t i = 1; i < g->n_kv; i++) {
        if (strcmp(g->kv[g->kv_sorted[i - 1]].key, g->kv[g->kv_sorted[i]].key) == 0) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: metadata key \"%s\" appears twice", g->label, g->kv[g->kv_sorted[i]].key);
        }
    }
    return LMC_OK;
}

static lmc_status parse_alignment(lmc_gguf *g) {
    g->alignment = LMC_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = lmc_gguf_find_key(g, "general.alignment");
    if (i < 0) return LMC_OK;
    const gguf_kv *kv = &g->kv[i];
    if (kv->type != LMC_GGUF_U32) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: general.alignment is a %s, not a u32", g->label, lmc_gguf_vtype_name(kv->type));
    }
    uint32_t a = (uint32_t)kv->raw;
    if (a == 0 || (a & (a - 1))) return lmc_fail(LMC_ERR_FORMAT, "%s: general.alignment %u is not a power of two", g->label, a);
    g->alignment = a;
    return LMC_OK;
}

static lmc_status parse_tensor_infos(cur *c, uint64_t n_t) {
    lmc_gguf *g = c->g;
    /* an info takes at least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes */
    if (n_t > left(c) / 24) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: header claims %llu tensors but only %zu bytes follow", g->label,
                        (unsigned long long)n_t, left(c));
    }
    g->tensors = calloc(n_t ? (size_t)n_t : 1, sizeof *g->tensors);
    if (!g->tensors) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory for %llu tensors", g->label, (unsigned long long)n_t);
    for (uint64_t i = 0; i < n_t; i++) {
        lmc_gguf_tensor *t = &g->tensors[i];
        const uint8_t *ns;
        uint64_t nlen;
        char what[64];
        snprintf(what, sizeof what, "the name of tensor %llu", (unsigned long long)i);
        LMC_TRY(rd_str(c, &ns, &nlen, what));
        if (nlen == 0 || nlen > GGUF_MAX_TENSOR_NAME || memchr(ns, 0, (size_t)nlen)) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: tensor %llu has an invalid name (%llu bytes%s)", g->label,
                            (unsigned long long)i, (unsigned long long)nlen,
                            nlen && nlen <= GGUF_MAX_TENSOR_NAME ? ", contains NUL" : "");
        }
        if (!(t->name = dup_bytes(ns, (size_t)nlen))) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", g->label);
        g->n_tensors = (int64_t)i + 1;
        uint32_t n_dims;
        LMC_TRY(rd32(c, &n_dims, t->name));
        if (n_dims > LMC_GGUF_MAX_DIMS) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\" has %u dimensions (at most %d)", g->label, t->name, n_dims,
                            LMC_GGUF_MAX_DIMS);
        }
        t->n_dims = (int)n_dims;
        for (int d = 0; d < LMC_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        uint64_t nel = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t v;
            LMC_TRY(rd64(c, &v, t->name));
            if (v > (uint64_t)INT64_MAX) {
                return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\" dimension %u is %llu (negative as int64)", g->label,
                                t->name, d, (unsigned long long)v);
            }
            if (v && nel > (uint64_t)INT64_MAX / v) {
                return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\" has more than 2^63 elements", g->label, t->name);
            }
            nel *= v;
            t->ne[d] = (int64_t)v;
        }
        LMC_TRY(rd32(c, &t->type, t->name));
        const ggml_type_info *ti = type_info(t->type);
        if (!ti) {
            return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: tensor \"%s\" has unknown GGML type id %u", g->label, t->name,
                            t->type);
        }
        if (t->ne[0] % ti->block) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": row length %lld is not a multiple of the %s block size %d",
                            g->label, t->name, (long long)t->ne[0], ti->name, ti->block);
        }
        /* nbytes = ne0 / block × size × ne1 × ne2 × ne3, each step checked */
        uint64_t nb = (uint64_t)t->ne[0] / (uint64_t)ti->block * (uint64_t)ti->size; /* ≤ 2^63 / 1 × 292: check */
        if ((uint64_t)t->ne[0] / (uint64_t)ti->block > SIZE_MAX / (uint64_t)ti->size) nb = UINT64_MAX;
        for (int d = 1; d < LMC_GGUF_MAX_DIMS && nb != UINT64_MAX; d++) {
            uint64_t v = (uint64_t)t->ne[d];
            if (v && nb > SIZE_MAX / v) nb = UINT64_MAX;
            else nb *= v;
        }
        if (nb == UINT64_MAX || nb > g->size) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\" (%s, %lld x %lld x %lld x %lld) is larger than the file",
                            g->label, t->name, ti->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                            (long long)t->ne[3]);
        }
        t->nbytes = (size_t)nb;
        LMC_TRY(rd64(c, &t->offset, t->name));
    }
    g->t_sorted = malloc((n_t ? (size_t)n_t : 1) * sizeof *g->t_sorted);
    if (!g->t_sorted) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", g->label);
    for (int64_t i = 0; i < g->n_tensors; i++) g->t_sorted[i] = i;
    qsort_r(g->t_sorted, (size_t)g->n_tensors, sizeof *g->t_sorted, cmp_tensor_name, g);
    for (int64_t i = 1; i < g->n_tensors; i++) {
        if (strcmp(g->tensors[g->t_sorted[i - 1]].name, g->tensors[g->t_sorted[i]].name) == 0) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: tensor name \"%s\" appears twice", g->label,
                            g->tensors[g->t_sorted[i]].name);
        }
    }
    return LMC_OK;
}

/* Place the data section and check every tensor's bytes lie in it, aligned, without overlap. */
static lmc_status place_tensors(lmc_gguf *g, size_t infos_end) {
    uint64_t a = g->alignment;
    uint64_t pad = (a - infos_end % a) % a;
    g->data_off = (uint64_t)infos_end + pad; /* infos_end < size ≤ SIZE_MAX; pad < 2^32: no overflow in 64 bits */
    if (g->n_tensors == 0) return LMC_OK;
    if (g->data_off > g->size) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: the data section (byte %llu) starts past the end of the file (%zu bytes)",
                        g->label, (unsigned long long)g->data_off, g->size);
    }
    uint64_t avail = g->size - g->data_off;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        lmc_gguf_tensor *t = &g->tensors[i];
        if (t->offset % a) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\" offset %llu is not a multiple of the alignment %u",
                            g->label, t->name, (unsigned long long)t->offset, g->alignment);
        }
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            return lmc_fail(LMC_ERR_FORMAT,
                            "%s: tensor \"%s\" (bytes %llu..%llu of the data section) runs past the end of the file "
                            "(data section holds %llu bytes)",
                            g->label, t->name, (unsigned long long)t->offset,
                            (unsigned long long)t->offset + (unsigned long long)t->nbytes, (unsigned long long)avail);
        }
        t->data = g->base + g->data_off + t->offset;
        g->total_bytes += t->nbytes;
    }
    int64_t *ord = malloc((size_t)g->n_tensors * sizeof *ord);
    if (!ord) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", g->label);
    for (int64_t i = 0; i < g->n_tensors; i++) ord[i] = i;
    qsort_r(ord, (size_t)g->n_tensors, sizeof *ord, cmp_tensor_offset, g);
    lmc_status st = LMC_OK;
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const lmc_gguf_tensor *p = &g->tensors[ord[i - 1]], *t = &g->tensors[ord[i]];
        if (p->nbytes && t->nbytes && p->offset + p->nbytes > t->offset) {
            st = lmc_fail(LMC_ERR_FORMAT, "%s: tensors \"%s\" and \"%s\" overlap (offsets %llu+%zu and %llu)", g->label,
                          p->name, t->name, (unsigned long long)p->offset, p->nbytes, (unsigned long long)t->offset);
            break;
        }
    }
    free(ord);
    return st;
}

static lmc_status parse(lmc_gguf *g) {
    cur c = {g, 0};
    if (g->size < 4) return lmc_fail(LMC_ERR_FORMAT, "%s: not a GGUF file (%zu bytes)", g->label, g->size);
    uint32_t magic;
    LMC_TRY(rd32(&c, &magic, "the magic"));
    if (magic != LMC_GGUF_MAGIC) {
        const uint8_t *m = g->base;
        return lmc_fail(LMC_ERR_FORMAT, "%s: not a GGUF file (magic %02x %02x %02x %02x, expected \"GGUF\")", g->label, m[0],
                        m[1], m[2], m[3]);
    }
    LMC_TRY(rd32(&c, &g->version, "the version"));
    if (g->version == 1) {
        return lmc_fail(LMC_ERR_UNSUPPORTED,
                        "%s: GGUF version 1 (32-bit counts, before August 2023) is not supported; reconvert the model",
                        g->label);
    }
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && (g->version >> 16)) {
            return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: big-endian GGUF (version %u byte-swapped) is not supported",
                            g->label, __builtin_bswap32(g->version));
        }
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)", g->label, g->version);
    }
    uint64_t n_t, n_kv;
    LMC_TRY(rd64(&c, &n_t, "the tensor count"));
    LMC_TRY(rd64(&c, &n_kv, "the metadata count"));
    LMC_TRY(parse_kvs(&c, n_kv));
    LMC_TRY(parse_alignment(g));
    LMC_TRY(parse_tensor_infos(&c, n_t));
    return place_tensors(g, c.pos);
}

static lmc_status new_ctx(const char *label, lmc_gguf **out) {
    lmc_gguf *g = calloc(1, sizeof *g);
    if (!g) return lmc_fail(LMC_ERR_NOMEM, "out of memory opening %s", label);
    size_t n = strlen(label);
    if (!(g->label = dup_bytes((const uint8_t *)label, n))) {
        free(g);
        return lmc_fail(LMC_ERR_NOMEM, "out of memory opening %s", label);
    }
    *out = g;
    return LMC_OK;
}

lmc_status lmc_gguf_open_buffer(const void *buf, size_t len, const char *label, lmc_gguf **out) {
    if (!buf && len) return lmc_fail(LMC_ERR_ARG, "lmc_gguf_open_buffer: NULL buffer");
    lmc_gguf *g;
    LMC_TRY(new_ctx(label ? label : "(buffer)", &g));
    g->base = buf;
    g->size = len;
    lmc_status st = parse(g);
    if (st < 0) {
        lmc_gguf_close(g);
        return st;
    }
    *out = g;
    return LMC_OK;
}

static lmc_status open_split(lmc_gguf *g, const char *path);

/* as_part: a later file of a split GGUF, opened by its first file's open_split */
static lmc_status open_file(const char *path, int as_part, lmc_gguf **out) {
    int fd;
    uint64_t fsize;
    LMC_TRY(lmc_file_open_regular(path, &fd, &fsize));
    if (fsize < 4) {
        close(fd);
        return lmc_fail(LMC_ERR_FORMAT, "%s: not a GGUF file (%lld bytes)", path, (long long)fsize);
    }
    void *map = NULL;
    lmc_status st = lmc_file_map(fd, fsize, path, &map);
    close(fd);
    LMC_TRY(st);
    lmc_gguf *g;
    st = new_ctx(path, &g);
    if (st < 0) {
        lmc_file_unmap(map, (size_t)fsize);
        return st;
    }
    g->map = map;
    g->map_len = (size_t)fsize;
    g->base = map;
    g->size = (size_t)fsize;
    if ((st = parse(g)) < 0 || (!as_part && (st = open_split(g, path)) < 0)) {
        lmc_gguf_close(g);
        return st;
    }
    *out = g;
    return LMC_OK;
}

lmc_status lmc_gguf_open(const char *path, lmc_gguf **out) { return open_file(path, 0, out); }

/* ---- split files (llama.cpp's gguf-split: PREFIX-00001-of-0000N.gguf, ...) ------------------ */

/* split.no (0-based) and split.count of a file; a file without them is 0 of 1. */
static lmc_status split_keys(const lmc_gguf *g, int64_t *no, int64_t *count) {
    *no = 0;
    *count = 1;
    if (lmc_gguf_find_key(g, "split.count") < 0) return LMC_OK;
    LMC_TRY(lmc_gguf_get_int(g, "split.count", count));
    if (lmc_gguf_find_key(g, "split.no") < 0) return lmc_fail(LMC_ERR_FORMAT, "%s: split.count without split.no", g->label);
    LMC_TRY(lmc_gguf_get_int(g, "split.no", no));
    if (*count < 1 || *count > LMC_GGUF_MAX_SPLITS || *no < 0 || *no >= *count)
        return lmc_fail(LMC_ERR_FORMAT, "%s: split.no %lld of split.count %lld", g->label, (long long)*no,
                        (long long)*count);
    return LMC_OK;
}

/* The first file of a split GGUF opens the others beside it (same prefix) and lists their tensors
 * with its own: every later lookup sees one model. Each file is validated as any GGUF; the files
 * must agree on the count, number themselves in order, and hold split.tensors.count tensors with
 * no name twice. */
static lmc_status open_split(lmc_gguf *g, const char *path) {
    int64_t no, count;
    LMC_TRY(split_keys(g, &no, &count));
    if (count == 1) return LMC_OK;
    char suffix[64], name[4096];
    snprintf(suffix, sizeof suffix, "-%05lld-of-%05lld.gguf", (long long)no + 1, (long long)count);
    if (no != 0)
        return lmc_fail(LMC_ERR_ARG, "%s is file %lld of %lld of a split GGUF: open the first one (...-00001-of-%05lld.gguf)",
                        path, (long long)no + 1, (long long)count, (long long)count);
    const size_t n = strlen(path), sl = strlen(suffix);
    if (n <= sl || strcmp(path + n - sl, suffix) != 0 || n - sl >= sizeof name)
        return lmc_fail(LMC_ERR_FORMAT, "%s: file 1 of a split GGUF of %lld files must be named PREFIX%s (its other files are "
                        "found by that name)", path, (long long)count, suffix);
    char prefix[4096];
    memcpy(prefix, path, n - sl);
    prefix[n - sl] = 0;
    g->parts = calloc((size_t)count - 1, sizeof *g->parts);
    if (!g->parts) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", path);
    int64_t total = g->n_tensors;
    for (int64_t i = 1; i < count; i++) {
        LMC_TRY(lmc_gguf_split_path(prefix, (int)i + 1, (int)count, name, sizeof name));
        lmc_gguf *p;
        lmc_status st = open_file(name, 1, &p);
        if (st < 0) return lmc_fail_context(st, "file %lld of the split GGUF %s", (long long)i + 1, path);
        g->parts[g->n_parts++] = p;
        int64_t pno, pcount;
        LMC_TRY(split_keys(p, &pno, &pcount));
        if (pcount != count || pno != i)
            return lmc_fail(LMC_ERR_FORMAT, "%s: split.no %lld of %lld where file %lld of %lld of %s was expected", name,
                            (long long)pno, (long long)pcount, (long long)i + 1, (long long)count, path);
        total += p->n_tensors;
    }
    int64_t declared = total;
    if (lmc_gguf_find_key(g, "split.tensors.count") >= 0) LMC_TRY(lmc_gguf_get_int(g, "split.tensors.count", &declared));
    if (declared != total)
        return lmc_fail(LMC_ERR_FORMAT, "%s: split.tensors.count is %lld but its %lld files hold %lld tensors", path,
                        (long long)declared, (long long)count, (long long)total);
    lmc_gguf_tensor *t = realloc(g->tensors, (size_t)(total ? total : 1) * sizeof *t);
    if (!t) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", path);
    g->tensors = t;
    int64_t *ts = realloc(g->t_sorted, (size_t)(total ? total : 1) * sizeof *ts);
    if (!ts) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", path);
    g->t_sorted = ts;
    for (int64_t i = 0; i < g->n_parts; i++) {
        const lmc_gguf *p = g->parts[i];
        for (int64_t j = 0; j < p->n_tensors; j++) {
            lmc_gguf_tensor c = p->tensors[j]; /* offset stays relative to its own file's data section */
            if (!(c.name = dup_bytes((const uint8_t *)p->tensors[j].name, strlen(p->tensors[j].name))))
                return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory", path);
            g->tensors[g->n_tensors++] = c;
        }
        g->total_bytes += p->total_bytes;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) g->t_sorted[i] = i;
    qsort_r(g->t_sorted, (size_t)g->n_tensors, sizeof *g->t_sorted, cmp_tensor_name, g);
    for (int64_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->tensors[g->t_sorted[i - 1]].name, g->tensors[g->t_sorted[i]].name) == 0)
            return lmc_fail(LMC_ERR_FORMAT, "%s: tensor %s is in two files of the split", path,
                            g->tensors[g->t_sorted[i]].name);
    return LMC_OK;
}

/* ---- accessors -------------------------------------------------------------------------------- */

uint32_t lmc_gguf_version(const lmc_gguf *g) { return g->version; }
uint32_t lmc_gguf_alignment(const lmc_gguf *g) { return g->alignment; }
uint64_t lmc_gguf_data_offset(const lmc_gguf *g) { return g->data_off; }
size_t lmc_gguf_file_size(const lmc_gguf *g) { return g->size; }
int64_t lmc_gguf_n_files(const lmc_gguf *g) { return 1 + g->n_parts; }
int64_t lmc_gguf_n_kv(const lmc_gguf *g) { return g->n_kv; }

const char *lmc_gguf_kv_key(const lmc_gguf *g, int64_t i) {
    LMC_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].key;
}

lmc_gguf_vtype lmc_gguf_kv_type(const lmc_gguf *g, int64_t i) {
    LMC_ASSERT(i >= 0 && i < g->n_kv);
    return (lmc_gguf_vtype)g->kv[i].type;
}

int64_t lmc_gguf_find_key(const lmc_gguf *g, const char *key) {
    int64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kv[g->kv_sorted[mid]].key, key);
        if (c == 0) return g->kv_sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* Integer value of a fixed-size integer element at p. */
static lmc_status int_of(uint32_t type, uint64_t raw, int64_t *out, const char *what) {
    switch (type) {
    case LMC_GGUF_U8: case LMC_GGUF_U16: case LMC_GGUF_U32: *out = (int64_t)raw; return LMC_OK;
    case LMC_GGUF_I8: *out = (int8_t)(uint8_t)raw; return LMC_OK;
    case LMC_GGUF_I16: *out = (int16_t)(uint16_t)raw; return LMC_OK;
    case LMC_GGUF_I32: *out = (int32_t)(uint32_t)raw; return LMC_OK;
    case LMC_GGUF_I64: *out = (int64_t)raw; return LMC_OK;
    case LMC_GGUF_U64:
        if (raw > (uint64_t)INT64_MAX) return lmc_fail(LMC_ERR_RANGE, "%s: u64 value %llu exceeds int64", what, (unsigned long long)raw);
        *out = (int64_t)raw;
        return LMC_OK;
    default: return lmc_fail(LMC_ERR_FORMAT, "%s is a %s, not an integer", what, lmc_gguf_vtype_name(type));
    }
}

static lmc_status float_of(uint32_t type, uint64_t raw, double *out, const char *what) {
    if (type == LMC_GGUF_F32) {
        uint32_t u = (uint32_t)raw;
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return LMC_OK;
    }
    if (type == LMC_GGUF_F64) {
        memcpy(out, &raw, 8);
        return LMC_OK;
    }
    return lmc_fail(LMC_ERR_FORMAT, "%s is a %s, not a float", what, lmc_gguf_vtype_name(type));
}

static lmc_status kv_check(const lmc_gguf *g, int64_t i) {
    if (i < 0 || i >= g->n_kv) return lmc_fail(LMC_ERR_RANGE, "%s: metadata index %lld out of range", g->label, (long long)i);
    return LMC_OK;
}

static lmc_status kv_by_key(const lmc_gguf *g, const char *key, int64_t *i) {
    *i = lmc_gguf_find_key(g, key);
    if (*i < 0) return lmc_fail(LMC_ERR_NOT_FOUND, "%s: no metadata key \"%s\"", g->label, key);
    return LMC_OK;
}

lmc_status lmc_gguf_kv_int(const lmc_gguf *g, int64_t i, int64_t *out) {
    LMC_TRY(kv_check(g, i));
    return int_of(g->kv[i].type, g->kv[i].raw, out, g->kv[i].key);
}

lmc_status lmc_gguf_kv_float(const lmc_gguf *g, int64_t i, double *out) {
    LMC_TRY(kv_check(g, i));
    return float_of(g->kv[i].type, g->kv[i].raw, out, g->kv[i].key);
}

lmc_status lmc_gguf_kv_bool(const lmc_gguf *g, int64_t i, int *out) {
    LMC_TRY(kv_check(g, i));
    if (g->kv[i].type != LMC_GGUF_BOOL) {
        return lmc_fail(LMC_ERR_FORMAT, "%s is a %s, not a bool", g->kv[i].key, lmc_gguf_vtype_name(g->kv[i].type));
    }
    *out = g->kv[i].raw != 0;
    return LMC_OK;
}

lmc_status lmc_gguf_kv_str(const lmc_gguf *g, int64_t i, const char **out, size_t *len) {
    LMC_TRY(kv_check(g, i));
    if (g->kv[i].type != LMC_GGUF_STRING) {
        return lmc_fail(LMC_ERR_FORMAT, "%s is a %s, not a string", g->kv[i].key, lmc_gguf_vtype_name(g->kv[i].type));
    }
    *out = g->kv[i].str;
    if (len) *len = g->kv[i].str_len;
    return LMC_OK;
}

lmc_status lmc_gguf_kv_arr(const lmc_gguf *g, int64_t i, lmc_gguf_array *out) {
    LMC_TRY(kv_check(g, i));
    const gguf_kv *kv = &g->kv[i];
    if (kv->type != LMC_GGUF_ARRAY) {
        return lmc_fail(LMC_ERR_FORMAT, "%s is a %s, not an array", kv->key, lmc_gguf_vtype_name(kv->type));
    }
    out->g = g;
    out->elem_type = kv->arr_type;
    out->n = kv->arr_n;
    out->data = g->base + kv->arr_off;
    out->offsets = vtype_size(kv->arr_type) || !g->pool ? NULL : g->pool + kv->arr_pool; /* no pool: only empty arrays */
    return LMC_OK;
}

lmc_status lmc_gguf_get_int(const lmc_gguf *g, const char *key, int64_t *out) {
    int64_t i;
    LMC_TRY(kv_by_key(g, key, &i));
    return lmc_gguf_kv_int(g, i, out);
}

lmc_status lmc_gguf_get_float(const lmc_gguf *g, const char *key, double *out) {
    int64_t i;
    LMC_TRY(kv_by_key(g, key, &i));
    return lmc_gguf_kv_float(g, i, out);
}

lmc_status lmc_gguf_get_bool(const lmc_gguf *g, const char *key, int *out) {
    int64_t i;
    LMC_TRY(kv_by_key(g, key, &i));
    return lmc_gguf_kv_bool(g, i, out);
}

lmc_status lmc_gguf_get_str(const lmc_gguf *g, const char *key, const char **out, size_t *len) {
    int64_t i;
    LMC_TRY(kv_by_key(g, key, &i));
    return lmc_gguf_kv_str(g, i, out, len);
}

lmc_status lmc_gguf_get_arr(const lmc_gguf *g, const char *key, lmc_gguf_array *out) {
    int64_t i;
    LMC_TRY(kv_by_key(g, key, &i));
    return lmc_gguf_kv_arr(g, i, out);
}

/* Raw bytes of fixed-size element i, zero-extended. */
static lmc_status arr_fixed(const lmc_gguf_array *a, uint64_t i, uint64_t *raw) {
    if (i >= a->n) return lmc_fail(LMC_ERR_RANGE, "array index %llu out of range (%llu elements)", (unsigned long long)i, (unsigned long long)a->n);
    size_t sz = vtype_size(a->elem_type);
    if (!sz) return lmc_fail(LMC_ERR_FORMAT, "array of %s: elements are not numbers", lmc_gguf_vtype_name(a->elem_type));
    const uint8_t *p = a->data + i * sz;
    *raw = sz == 1 ? p[0] : sz == 2 ? ld16(p) : sz == 4 ? ld32(p) : ld64(p);
    return LMC_OK;
}

lmc_status lmc_gguf_arr_int(const lmc_gguf_array *a, uint64_t i, int64_t *out) {
    uint64_t raw;
    if (!vtype_is_int(a->elem_type)) {
        return lmc_fail(LMC_ERR_FORMAT, "array of %s: elements are not integers", lmc_gguf_vtype_name(a->elem_type));
    }
    LMC_TRY(arr_fixed(a, i, &raw));
    return int_of(a->elem_type, raw, out, "array element");
}

lmc_status lmc_gguf_arr_float(const lmc_gguf_array *a, uint64_t i, double *out) {
    uint64_t raw;
    if (a->elem_type != LMC_GGUF_F32 && a->elem_type != LMC_GGUF_F64) {
        return lmc_fail(LMC_ERR_FORMAT, "array of %s: elements are not floats", lmc_gguf_vtype_name(a->elem_type));
    }
    LMC_TRY(arr_fixed(a, i, &raw));
    return float_of(a->elem_type, raw, out, "array element");
}

lmc_status lmc_gguf_arr_bool(const lmc_gguf_array *a, uint64_t i, int *out) {
    uint64_t raw;
    if (a->elem_type != LMC_GGUF_BOOL) {
        return lmc_fail(LMC_ERR_FORMAT, "array of %s: elements are not bools", lmc_gguf_vtype_name(a->elem_type));
    }
    LMC_TRY(arr_fixed(a, i, &raw));
    *out = raw != 0;
    return LMC_OK;
}

lmc_status lmc_gguf_arr_str(const lmc_gguf_array *a, uint64_t i, const char **s, size_t *len) {
    if (a->elem_type != LMC_GGUF_STRING) {
        return lmc_fail(LMC_ERR_FORMAT, "array of %s: elements are not strings", lmc_gguf_vtype_name(a->elem_type));
    }
    if (i >= a->n) return lmc_fail(LMC_ERR_RANGE, "array index %llu out of range (%llu elements)", (unsigned long long)i, (unsigned long long)a->n);
    const uint8_t *p = a->data + a->offsets[i];
    *len = (size_t)ld64(p);
    *s = (const char *)p + 8;
    return LMC_OK;
}

lmc_status lmc_gguf_arr_arr(const lmc_gguf_array *a, uint64_t i, lmc_gguf_array *out) {
    if (a->elem_type != LMC_GGUF_ARRAY) {
        return lmc_fail(LMC_ERR_FORMAT, "array of %s: elements are not arrays", lmc_gguf_vtype_name(a->elem_type));
    }
    if (i >= a->n) return lmc_fail(LMC_ERR_RANGE, "array index %llu out of range (%llu elements)", (unsigned long long)i, (unsigned long long)a->n);
    const lmc_gguf *g = a->g;
    const uint8_t *p = a->data + a->offsets[i];
    out->g = g;
    out->elem_type = ld32(p);
    out->n = ld64(p + 4);
    out->data = p + 12;
    out->offsets = NULL;
    if (!vtype_size(out->elem_type)) {
        uint64_t off = (uint64_t)(out->data - g->base);
        size_t lo = 0, hi = g->n_arrs;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (g->arrs[mid].data_off < off) lo = mid + 1;
            else hi = mid;
        }
        LMC_ASSERT(lo < g->n_arrs && g->arrs[lo].data_off == off); /* registered while parsing */
        out->offsets = g->pool ? g->pool + g->arrs[lo].pool_start : NULL; /* no pool: only empty arrays */
    }
    return LMC_OK;
}

int64_t lmc_gguf_n_tensors(const lmc_gguf *g) { return g->n_tensors; }

const lmc_gguf_tensor *lmc_gguf_tensor_at(const lmc_gguf *g, int64_t i) {
    LMC_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->tensors[i];
}

const lmc_gguf_tensor *lmc_gguf_find_tensor(const lmc_gguf *g, const char *name) {
    int64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const lmc_gguf_tensor *t = &g->tensors[g->t_sorted[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int64_t lmc_gguf_nelem(const lmc_gguf_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

size_t lmc_gguf_total_bytes(const lmc_gguf *g) { return g->total_bytes; }
