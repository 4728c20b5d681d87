/* safetensors.c — safetensors reader (mmap, single file, index or directory)
 * and single-file writer.
 *
 * A set owns: the shard mappings (lmc_file_unmap on close), the shard paths, every
 * tensor name, the sorted-by-name lookup table and shard 0's metadata strings.
 * Headers are validated completely at open; afterwards lookups cannot fail.
 * Format: u64 little-endian header length N, N bytes of JSON, data buffer.
 */
#include "io/safetensors.h"
#include "io/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "io/jsonfile.h"

#define ST_MAX_INDEX_BYTES ((size_t)1 << 28) /* 256 MiB of index JSON */

typedef struct st_shard {
    char *path;
    void *map;       /* whole file, read-only (lmc_file_map: its pages or a private copy) */
    size_t map_len;  /* file size (> 0 whenever map != NULL) */
} st_shard;

struct lmc_st_set {
    st_shard *shards;
    int n_shards;
    lmc_st_tensor *tensors;   /* [n_tensors], file order */
    int n_tensors, cap_tensors;
    const lmc_st_tensor **by_name; /* [n_tensors], sorted by name */
    char **meta;              /* [2*n_meta]: key, value, ... of shard 0 */
    int n_meta;
    size_t total_bytes;
};

/* ---- small helpers ---------------------------------------------------------------------------- */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* path joined as dir/name into a fresh string, or NULL on OOM. */
static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted names of the regular files in dir ending with suffix; *n_out entries, caller frees each and the array. */
static lmc_status list_files_with_suffix(const char *dir, const char *suffix, char ***out, int *n_out) {
    DIR *d = opendir(dir);
    if (!d) return lmc_fail(LMC_ERR_IO, "cannot list directory %s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    lmc_status st = LMC_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!has_suffix(e->d_name, suffix) || strlen(e->d_name) == strlen(suffix)) continue;
        char *full = join_path(dir, e->d_name);
        if (!full) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory listing %s", dir); break; }
        struct stat sb;
        int is_reg = stat(full, &sb) == 0 && S_ISREG(sb.st_mode);
        free(full);
        if (!is_reg) continue;
        if (n == cap) {
            int nc = cap ? cap * 2 : 16;
            char **nn = realloc(names, (size_t)nc * sizeof *nn);
            if (!nn) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory listing %s", dir); break; }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = dup_str(e->d_name))) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory listing %s", dir); break; }
        n++;
    }
    closedir(d);
    if (st < 0) {
        for (int i = 0; i < n; i++) free(names[i]);
        free(names);
        return st;
    }
    if (n > 1) qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
    *out = names;
    *n_out = n;
    return LMC_OK;
}

/* A JSON number that is a non-negative integer <= 2^53. */
static int json_uint(const cJSON *item, uint64_t *out) {
    int64_t v;
    if (!lmc_json_item_int(item, &v) || v < 0) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* ---- set lifetime ----------------------------------------------------------------------------- */

void lmc_st_close(lmc_st_set *set) {
    if (!set) return;
    for (int i = 0; i < set->n_shards; i++) {
        if (set->shards[i].map) {
            lmc_file_unmap(set->shards[i].map, set->shards[i].map_len);
        }
        free(set->shards[i].path);
    }
    free(set->shards);
    for (int i = 0; i < set->n_tensors; i++) free((char *)set->tensors[i].name);
    free(set->tensors);
    free(set->by_name);
    for (int i = 0; i < 2 * set->n_meta; i++) free(set->meta[i]);
    free(set->meta);
    free(set);
}

static lmc_status add_shard(lmc_st_set *set, const char *path, int *idx) {
    st_shard *ns = realloc(set->shards, (size_t)(set->n_shards + 1) * sizeof *ns);
    if (!ns) return lmc_fail(LMC_ERR_NOMEM, "out of memory opening %s", path);
    set->shards = ns;
    st_shard *s = &set->shards[set->n_shards];
    memset(s, 0, sizeof *s);
    if (!(s->path = dup_str(path))) return lmc_fail(LMC_ERR_NOMEM, "out of memory opening %s", path);
    *idx = set->n_shards++;
    return LMC_OK;
}

static lmc_status grow_tensors(lmc_st_set *set, int extra, const char *path) {
    if (extra > INT32_MAX - set->n_tensors) return lmc_fail(LMC_ERR_FORMAT, "%s: too many tensors", path);
    int need = set->n_tensors + extra;
    if (need <= set->cap_tensors) return LMC_OK;
    int nc = set->cap_tensors ? set->cap_tensors : 64;
    while (nc < need) nc = nc > INT32_MAX / 2 ? need : nc * 2;
    lmc_st_tensor *nt = realloc(set->tensors, (size_t)nc * sizeof *nt);
    if (!nt) return lmc_fail(LMC_ERR_NOMEM, "out of memory for %d tensor descriptors", need);
    set->tensors = nt;
    set->cap_tensors = nc;
    return LMC_OK;
}

/* ---- one shard -------------------------------------------------------------------------------- */

typedef struct st_span { uint64_t begin, end; int idx; } st_span;

static int cmp_span(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static lmc_status parse_metadata(lmc_st_set *set, const cJSON *meta, const char *path, int keep) {
    if (cJSON_IsNull(meta)) return LMC_OK;
    if (!cJSON_IsObject(meta)) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: \"__metadata__\" is a JSON %s, not an object of strings", path,
                        lmc_json_type_name(meta));
    }
    int n = cJSON_GetArraySize(meta);
    for (const cJSON *kv = meta->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv) || !kv->valuestring) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: \"__metadata__\" value of \"%s\" is a JSON %s, not a string", path,
                            kv->string ? kv->string : "", lmc_json_type_name(kv));
        }
    }
    for (const cJSON *kv = meta->child; kv; kv = kv->next) {
        for (const cJSON *o = kv->next; o; o = o->next) {
            if (kv->string && o->string && strcmp(kv->string, o->string) == 0) {
                return lmc_fail(LMC_ERR_FORMAT, "%s: \"__metadata__\" has the key \"%s\" twice", path, kv->string);
            }
        }
    }
    if (!keep || n == 0) return LMC_OK;
    set->meta = calloc((size_t)n * 2, sizeof *set->meta);
    if (!set->meta) return lmc_fail(LMC_ERR_NOMEM, "out of memory for metadata of %s", path);
    for (const cJSON *kv = meta->child; kv; kv = kv->next) {
        int i = set->n_meta++;
        set->meta[2 * i] = dup_str(kv->string ? kv->string : "");
        set->meta[2 * i + 1] = dup_str(kv->valuestring);
        if (!set->meta[2 * i] || !set->meta[2 * i + 1]) return lmc_fail(LMC_ERR_NOMEM, "out of memory for metadata");
    }
    return LMC_OK;
}

/* Validate one tensor entry of a header and fill *t (name not set). */
static lmc_status parse_entry(const cJSON *e, const char *path, const char *name, uint64_t data_len,
                              lmc_st_tensor *t, st_span *span) {
    if (!cJSON_IsObject(e)) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": entry is a JSON %s, not an object", path, name,
                        lmc_json_type_name(e));
    }
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd) || !jd->valuestring) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": \"dtype\" is %s%s, expected a string", path, name,
                        jd ? "a JSON " : "", jd ? lmc_json_type_name(jd) : "missing");
    }
    if (!cJSON_IsArray(js)) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": \"shape\" is %s%s, expected an array of integers", path,
                        name, js ? "a JSON " : "", js ? lmc_json_type_name(js) : "missing");
    }
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": \"data_offsets\" is %s%s, expected [begin, end]", path,
                        name, jo ? "a JSON " : "", jo ? (cJSON_IsArray(jo) ? "array of the wrong length"
                                                                           : lmc_json_type_name(jo))
                                                      : "missing");
    }
    if (lmc_dtype_from_name(jd->valuestring, &t->dtype) != 0) {
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: tensor \"%s\": dtype \"%s\" is not supported (lmc reads F64, F32, "
                        "F16, BF16, I64, I32, I16, I8, U8, BOOL)", path, name, jd->valuestring);
    }
    int nd = cJSON_GetArraySize(js);
    if (nd > LMC_ST_MAX_DIMS) {
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: tensor \"%s\": %d dimensions; lmc handles at most %d", path, name,
                        nd, LMC_ST_MAX_DIMS);
    }
    t->n_dims = nd;
    uint64_t nelem = 1;
    int d = 0;
    for (const cJSON *v = js->child; v; v = v->next, d++) {
        uint64_t x;
        if (!json_uint(v, &x)) {
            if (cJSON_IsNumber(v)) {
                return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": shape[%d] = %.17g is not a non-negative integer",
                                path, name, d, v->valuedouble);
            }
            return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": shape[%d] is a JSON %s, not a non-negative integer",
                            path, name, d, lmc_json_type_name(v));
        }
        t->shape[d] = (int64_t)x;
        if (__builtin_mul_overflow(nelem, x, &nelem)) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": shape product overflows", path, name);
        }
    }
    for (int k = nd; k < LMC_ST_MAX_DIMS; k++) t->shape[k] = 0;
    uint64_t nbytes;
    if (__builtin_mul_overflow(nelem, (uint64_t)lmc_dtype_size(t->dtype), &nbytes) || nbytes > (uint64_t)SIZE_MAX ||
        nelem > (uint64_t)INT64_MAX) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": shape product overflows", path, name);
    }
    uint64_t b, en;
    if (!json_uint(jo->child, &b) || !json_uint(jo->child->next, &en)) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": \"data_offsets\" must be two non-negative integers", path,
                        name);
    }
    if (en < b) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": data_offsets end %llu is before begin %llu", path, name,
                        (unsigned long long)en, (unsigned long long)b);
    }
    if (en - b != nbytes) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": data_offsets span %llu bytes but %s shape needs %llu bytes",
                        path, name, (unsigned long long)(en - b), lmc_dtype_name(t->dtype),
                        (unsigned long long)nbytes);
    }
    if (en > data_len) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: tensor \"%s\": data [%llu, %llu) lies beyond the file's data buffer "
                        "(%llu bytes; file truncated?)", path, name, (unsigned long long)b, (unsigned long long)en,
                        (unsigned long long)data_len);
    }
    t->nbytes = (size_t)nbytes;
    span->begin = b;
    span->end = en;
    return LMC_OK;
}

/* Map `path` as shard `shard` and append its tensors. keep_meta: store "__metadata__". */
static lmc_status load_shard(lmc_st_set *set, const char *path, int keep_meta) {
    int shard = -1;
    LMC_TRY(add_shard(set, path, &shard));
    int fd;
    uint64_t fsize;
    LMC_TRY(lmc_file_open_regular(path, &fd, &fsize));
    if (fsize < 8) {
        close(fd);
        return lmc_fail(LMC_ERR_FORMAT, "%s: file is %llu bytes, shorter than the 8-byte safetensors header length",
                        path, (unsigned long long)fsize);
    }
    void *map = NULL;
    lmc_status mst = lmc_file_map(fd, fsize, path, &map);
    close(fd);
    LMC_TRY(mst);
    set->shards[shard].map = map;
    set->shards[shard].map_len = (size_t)fsize;

    const unsigned char *bytes = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
    if (hlen == 0) return lmc_fail(LMC_ERR_FORMAT, "%s: header length is 0 (not a safetensors file)", path);
    if (hlen > LMC_ST_MAX_HEADER) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: header length %llu exceeds the limit of %llu bytes (not a safetensors "
                        "file?)", path, (unsigned long long)hlen, (unsigned long long)LMC_ST_MAX_HEADER);
    }
    if (hlen > fsize - 8) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%llu bytes)", path,
                        (unsigned long long)hlen, (unsigned long long)fsize);
    }
    const unsigned char *data = bytes + 8 + hlen;
    uint64_t data_len = fsize - 8 - hlen;

    char what[600];
    snprintf(what, sizeof what, "%s: header", path);
    cJSON *root = NULL;
    LMC_TRY(lmc_json_parse((const char *)bytes + 8, (size_t)hlen, what, &root));
    lmc_status st = LMC_OK;
    st_span *spans = NULL;
    if (!cJSON_IsObject(root)) {
        st = lmc_fail(LMC_ERR_FORMAT, "%s: header is a JSON %s, not an object", path, lmc_json_type_name(root));
        goto done;
    }
    int n_entries = 0, n_meta_keys = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (e->string && strcmp(e->string, "__metadata__") == 0) n_meta_keys++;
        else n_entries++;
    }
    if (n_meta_keys > 1) {
        st = lmc_fail(LMC_ERR_FORMAT, "%s: header has \"__metadata__\" %d times", path, n_meta_keys);
        goto done;
    }
    if ((st = grow_tensors(set, n_entries, path)) < 0) goto done;
    spans = malloc((size_t)(n_entries ? n_entries : 1) * sizeof *spans);
    if (!spans) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory reading %s", path); goto done; }
    int n_spans = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        const char *name = e->string ? e->string : "";
        if (strcmp(name, "__metadata__") == 0) {
            if ((st = parse_metadata(set, e, path, keep_meta)) < 0) goto done;
            continue;
        }
        lmc_st_tensor *t = &set->tensors[set->n_tensors];
        memset(t, 0, sizeof *t);
        st_span sp;
        if ((st = parse_entry(e, path, name, data_len, t, &sp)) < 0) goto done;
        if (!(t->name = dup_str(name))) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory reading %s", path); goto done; }
        t->data = data + sp.begin;
        t->shard = shard;
        set->n_tensors++;
        set->total_bytes += t->nbytes;
        if (sp.end > sp.begin) { sp.idx = set->n_tensors - 1; spans[n_spans++] = sp; }
    }
    /* No two tensors may share bytes (zero-size tensors occupy none). */
    qsort(spans, (size_t)n_spans, sizeof *spans, cmp_span);
    for (int i = 1; i < n_spans; i++) {
        if (spans[i].begin < spans[i - 1].end) {
            st = lmc_fail(LMC_ERR_FORMAT, "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap", path,
                          set->tensors[spans[i - 1].idx].name, (unsigned long long)spans[i - 1].begin,
                          (unsigned long long)spans[i - 1].end, set->tensors[spans[i].idx].name,
                          (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end);
            goto done;
        }
        /* keep the furthest end so far in place for the next comparison */
        if (spans[i].end < spans[i - 1].end) spans[i].end = spans[i - 1].end;
    }
done:
    free(spans);
    cJSON_Delete(root);
    return st;
}

/* ---- name table ------------------------------------------------------------------------------- */

static int cmp_tensor_name(const void *a, const void *b) {
    const lmc_st_tensor *x = *(const lmc_st_tensor *const *)a, *y = *(const lmc_st_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return (x > y) - (x < y);
}

static lmc_status build_name_table(lmc_st_set *set) {
    set->by_name = malloc((size_t)(set->n_tensors ? set->n_tensors : 1) * sizeof *set->by_name);
    if (!set->by_name) return lmc_fail(LMC_ERR_NOMEM, "out of memory for the tensor name table");
    for (int i = 0; i < set->n_tensors; i++) set->by_name[i] = &set->tensors[i];
    qsort(set->by_name, (size_t)set->n_tensors, sizeof *set->by_name, cmp_tensor_name);
    for (int i = 1; i < set->n_tensors; i++) {
        const lmc_st_tensor *a = set->by_name[i - 1], *b = set->by_name[i];
        if (strcmp(a->name, b->name) != 0) continue;
        if (a->shard == b->shard) {
            return lmc_fail(LMC_ERR_FORMAT, "%s: duplicate tensor name \"%s\"", set->shards[a->shard].path, a->name);
        }
        return lmc_fail(LMC_ERR_FORMAT, "tensor \"%s\" appears in two shards: %s and %s", a->name,
                        set->shards[a->shard].path, set->shards[b->shard].path);
    }
    return LMC_OK;
}

/* ---- index and directory ---------------------------------------------------------------------- */

static int shard_name_ok(const char *s) {
    return s[0] != 0 && strchr(s, '/') == NULL && strchr(s, '\\') == NULL && strstr(s, "..") == NULL;
}

static lmc_status open_index(lmc_st_set *set, const char *index_path) {
    cJSON *root = NULL;
    LMC_TRY(lmc_json_read_file(index_path, ST_MAX_INDEX_BYTES, &root));
    lmc_status st = LMC_OK;
    const char **files = NULL;  /* views into root */
    char *dir = NULL, *full = NULL;
    const cJSON *wm = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        st = lmc_fail(LMC_ERR_FORMAT, "%s: %s", index_path,
                      cJSON_IsObject(root) ? "no \"weight_map\" object in the index" : "index is not a JSON object");
        goto done;
    }
    int n = cJSON_GetArraySize(wm);
    if (n == 0) { st = lmc_fail(LMC_ERR_FORMAT, "%s: \"weight_map\" lists no tensors", index_path); goto done; }
    files = malloc((size_t)n * sizeof *files);
    if (!files) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory reading %s", index_path); goto done; }
    int k = 0;
    for (const cJSON *e = wm->child; e; e = e->next, k++) {
        if (!cJSON_IsString(e) || !e->valuestring) {
            st = lmc_fail(LMC_ERR_FORMAT, "%s: weight_map entry \"%s\" is a JSON %s, not a file name", index_path,
                          e->string ? e->string : "", lmc_json_type_name(e));
            goto done;
        }
        if (!shard_name_ok(e->valuestring)) {
            st = lmc_fail(LMC_ERR_FORMAT, "%s: weight_map entry \"%s\" names shard \"%s\", which is not a plain file "
                          "name in the index's directory", index_path, e->string ? e->string : "", e->valuestring);
            goto done;
        }
        files[k] = e->valuestring;
    }
    {   /* each tensor listed once */
        const char **keys = malloc((size_t)n * sizeof *keys);
        if (!keys) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory reading %s", index_path); goto done; }
        int j = 0;
        for (const cJSON *e = wm->child; e; e = e->next) keys[j++] = e->string ? e->string : "";
        qsort(keys, (size_t)n, sizeof *keys, cmp_str_ptr);
        for (j = 1; j < n; j++) {
            if (strcmp(keys[j - 1], keys[j]) == 0) {
                st = lmc_fail(LMC_ERR_FORMAT, "%s: weight_map lists tensor \"%s\" twice", index_path, keys[j]);
                break;
            }
        }
        free(keys);
        if (st < 0) goto done;
    }
    qsort(files, (size_t)n, sizeof *files, cmp_str_ptr);
    const char *slash = strrchr(index_path, '/');
    if (slash) {
        size_t dl = (size_t)(slash - index_path);
        dir = malloc(dl + 2);
        if (!dir) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory"); goto done; }
        memcpy(dir, index_path, dl ? dl : 1); /* "/x.json" → "/" */
        dir[dl ? dl : 1] = 0;
    } else {
        dir = dup_str(".");
        if (!dir) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory"); goto done; }
    }
    for (int i = 0; i < n; i++) {
        if (i > 0 && strcmp(files[i], files[i - 1]) == 0) continue;
        free(full);
        full = join_path(dir, files[i]);
        if (!full) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory"); goto done; }
        if ((st = load_shard(set, full, set->n_shards == 0)) < 0) {
            lmc_fail_context(st, "shard %s listed in %s", files[i], index_path);
            goto done;
        }
    }
    if ((st = build_name_table(set)) < 0) goto done;
    /* every listed tensor is in the shard the index names */
    for (const cJSON *e = wm->child; e; e = e->next) {
        const lmc_st_tensor *t = lmc_st_find(set, e->string ? e->string : "");
        const char *want = e->valuestring;
        if (!t) {
            st = lmc_fail(LMC_ERR_FORMAT, "%s: index maps tensor \"%s\" to %s, but that file does not contain it",
                          index_path, e->string ? e->string : "", want);
            goto done;
        }
        const char *got = strrchr(set->shards[t->shard].path, '/');
        got = got ? got + 1 : set->shards[t->shard].path;
        if (strcmp(got, want) != 0) {
            st = lmc_fail(LMC_ERR_FORMAT, "%s: index maps tensor \"%s\" to %s, but it is in %s", index_path, t->name,
                          want, got);
            goto done;
        }
    }
done:
    free(full);
    free(dir);
    free(files);
    cJSON_Delete(root);
    return st;
}

static lmc_status open_dir(lmc_st_set *set, const char *dir) {
    char *p = join_path(dir, "model.safetensors");
    if (!p) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    struct stat sb;
    if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
        lmc_status st = load_shard(set, p, 1);
        free(p);
        if (st < 0) return st;
        return build_name_table(set);
    }
    free(p);
    p = join_path(dir, "model.safetensors.index.json");
    if (!p) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
        lmc_status st = open_index(set, p);
        free(p);
        return st;
    }
    free(p);
    char **names = NULL;
    int n = 0;
    LMC_TRY(list_files_with_suffix(dir, ".safetensors", &names, &n));
    lmc_status st = LMC_OK;
    if (n == 0) {
        st = lmc_fail(LMC_ERR_NOT_FOUND, "%s: no model.safetensors, model.safetensors.index.json or *.safetensors "
                      "file in this directory", dir);
    }
    for (int i = 0; i < n && st == LMC_OK; i++) {
        char *full = join_path(dir, names[i]);
        if (!full) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory"); break; }
        st = load_shard(set, full, i == 0);
        free(full);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (st < 0) return st;
    return build_name_table(set);
}

lmc_status lmc_st_open(const char *path, lmc_st_set **out) {
    if (!path || !out) return lmc_fail(LMC_ERR_ARG, "lmc_st_open: NULL argument");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        return lmc_fail(e == ENOENT ? LMC_ERR_NOT_FOUND : LMC_ERR_IO, "cannot open %s: %s", path, strerror(e));
    }
    lmc_st_set *set = calloc(1, sizeof *set);
    if (!set) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    lmc_status st;
    if (S_ISDIR(sb.st_mode)) {
        st = open_dir(set, path);
    } else if (has_suffix(path, ".json")) {
        st = open_index(set, path);
    } else {
        st = load_shard(set, path, 1);
        if (st == LMC_OK) st = build_name_table(set);
    }
    if (st < 0) {
        lmc_st_close(set);
        return st;
    }
    *out = set;
    return LMC_OK;
}

/* ---- queries ---------------------------------------------------------------------------------- */

int lmc_st_count(const lmc_st_set *set) { return set->n_tensors; }

const lmc_st_tensor *lmc_st_at(const lmc_st_set *set, int i) {
    LMC_ASSERT(i >= 0 && i < set->n_tensors);
    return &set->tensors[i];
}

const lmc_st_tensor *lmc_st_find(const lmc_st_set *set, const char *name) {
    if (!name) return NULL;
    int lo = 0, hi = set->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(set->by_name[mid]->name, name);
        if (c == 0) return set->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

int lmc_st_index_of(const lmc_st_set *set, const lmc_st_tensor *t) {
    /* compare addresses as integers: t may point anywhere */
    uintptr_t base = (uintptr_t)set->tensors, p = (uintptr_t)t;
    if (!t || p < base || p >= base + (uintptr_t)set->n_tensors * sizeof *t || (p - base) % sizeof *t) return -1;
    return (int)((p - base) / sizeof *t);
}

const char *lmc_st_metadata(const lmc_st_set *set, const char *key) {
    if (!key) return NULL;
    for (int i = 0; i < set->n_meta; i++) {
        if (strcmp(set->meta[2 * i], key) == 0) return set->meta[2 * i + 1];
    }
    return NULL;
}

int lmc_st_metadata_count(const lmc_st_set *set) { return set->n_meta; }

void lmc_st_metadata_at(const lmc_st_set *set, int i, const char **key, const char **value) {
    LMC_ASSERT(i >= 0 && i < set->n_meta);
    if (key) *key = set->meta[2 * i];
    if (value) *value = set->meta[2 * i + 1];
}

size_t lmc_st_total_bytes(const lmc_st_set *set) { return set->total_bytes; }
int lmc_st_shard_count(const lmc_st_set *set) { return set->n_shards; }

const char *lmc_st_shard_path(const lmc_st_set *set, int shard) {
    LMC_ASSERT(shard >= 0 && shard < set->n_shards);
    return set->shards[shard].path;
}

int64_t lmc_st_nelem(const lmc_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->shape[d];
    return n;
}

/* ---- writer ----------------------------------------------------------------------------------- */

typedef struct st_buf { char *p; size_t n, cap; int oom; } st_buf;

static void buf_put(st_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void buf_puts(st_buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_printf_u64(st_buf *b, uint64_t v) {
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    buf_put(b, tmp, (size_t)k);
}

/* s as a JSON string literal (UTF-8 passes through; quotes, backslashes and controls escaped). */
static void buf_json_str(st_buf *b, const char *s) {
    buf_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        if (*c == '"' || *c == '\\') { esc[0] = '\\'; esc[1] = (char)*c; buf_put(b, esc, 2); }
        else if (*c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", *c); buf_put(b, esc, 6); }
        else buf_put(b, (const char *)c, 1);
    }
    buf_put(b, "\"", 1);
}

static lmc_status write_all(int fd, const void *p, size_t n, const char *path) {
    const char *c = p;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write(fd, c, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return lmc_fail(LMC_ERR_IO, "cannot write %s: %s", path, w < 0 ? strerror(errno) : "short write");
        c += w;
        n -= (size_t)w;
    }
    return LMC_OK;
}

static lmc_status check_write_args(const lmc_st_write_tensor *tensors, int n, const char *const *kv, int n_meta,
                                   uint64_t *nbytes) {
    if (n < 0 || n_meta < 0 || (n > 0 && !tensors) || (n_meta > 0 && !kv)) {
        return lmc_fail(LMC_ERR_ARG, "lmc_st_write: bad tensor or metadata list");
    }
    for (int i = 0; i < n; i++) {
        const lmc_st_write_tensor *t = &tensors[i];
        if (!t->name) return lmc_fail(LMC_ERR_ARG, "lmc_st_write: tensor %d has no name", i);
        if (strcmp(t->name, "__metadata__") == 0) {
            return lmc_fail(LMC_ERR_ARG, "lmc_st_write: \"__metadata__\" is reserved, not a tensor name");
        }
        if ((unsigned)t->dtype >= LMC_DTYPE_COUNT) {
            return lmc_fail(LMC_ERR_ARG, "lmc_st_write: tensor \"%s\" has an invalid dtype %d", t->name, (int)t->dtype);
        }
        if (t->n_dims < 0 || t->n_dims > LMC_ST_MAX_DIMS) {
            return lmc_fail(LMC_ERR_ARG, "lmc_st_write: tensor \"%s\" has %d dimensions (0..%d allowed)", t->name,
                            t->n_dims, LMC_ST_MAX_DIMS);
        }
        uint64_t ne = 1;
        for (int d = 0; d < t->n_dims; d++) {
            if (t->shape[d] < 0 || __builtin_mul_overflow(ne, (uint64_t)t->shape[d], &ne)) {
                return lmc_fail(LMC_ERR_ARG, "lmc_st_write: tensor \"%s\" has a negative or overflowing shape",
                                t->name);
            }
        }
        if (__builtin_mul_overflow(ne, (uint64_t)lmc_dtype_size(t->dtype), &nbytes[i]) || nbytes[i] > SIZE_MAX) {
            return lmc_fail(LMC_ERR_ARG, "lmc_st_write: tensor \"%s\" is too large", t->name);
        }
        if (nbytes[i] > 0 && !t->data) return lmc_fail(LMC_ERR_ARG, "lmc_st_write: tensor \"%s\" has no data", t->name);
        for (int j = 0; j < i; j++) {
            if (strcmp(tensors[j].name, t->name) == 0) {
                return lmc_fail(LMC_ERR_ARG, "lmc_st_write: duplicate tensor name \"%s\"", t->name);
            }
        }
    }
    for (int i = 0; i < n_meta; i++) {
        if (!kv[2 * i] || !kv[2 * i + 1]) return lmc_fail(LMC_ERR_ARG, "lmc_st_write: metadata pair %d has a NULL", i);
        for (int j = 0; j < i; j++) {
            if (strcmp(kv[2 * j], kv[2 * i]) == 0) {
                return lmc_fail(LMC_ERR_ARG, "lmc_st_write: duplicate metadata key \"%s\"", kv[2 * i]);
            }
        }
    }
    return LMC_OK;
}

lmc_status lmc_st_write(const char *path, const lmc_st_write_tensor *tensors, int n, const char *const *metadata_kv,
                        int n_meta) {
    if (!path) return lmc_fail(LMC_ERR_ARG, "lmc_st_write: NULL path");
    uint64_t *nbytes = malloc((size_t)(n > 0 ? n : 1) * sizeof *nbytes);
    if (!nbytes) return lmc_fail(LMC_ERR_NOMEM, "out of memory writing %s", path);
    lmc_status st = check_write_args(tensors, n, metadata_kv, n_meta, nbytes);
    if (st < 0) { free(nbytes); return st; }

    st_buf h = {0};
    buf_puts(&h, "{");
    if (n_meta > 0) {
        buf_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) buf_puts(&h, ",");
            buf_json_str(&h, metadata_kv[2 * i]);
            buf_puts(&h, ":");
            buf_json_str(&h, metadata_kv[2 * i + 1]);
        }
        buf_puts(&h, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const lmc_st_write_tensor *t = &tensors[i];
        if (i || n_meta > 0) buf_puts(&h, ",");
        buf_json_str(&h, t->name);
        buf_puts(&h, ":{\"dtype\":\"");
        buf_puts(&h, lmc_dtype_name(t->dtype));
        buf_puts(&h, "\",\"shape\":[");
        for (int d = 0; d < t->n_dims; d++) {
            if (d) buf_puts(&h, ",");
            buf_printf_u64(&h, (uint64_t)t->shape[d]);
        }
        buf_puts(&h, "],\"data_offsets\":[");
        buf_printf_u64(&h, off);
        buf_puts(&h, ",");
        off += nbytes[i];
        buf_printf_u64(&h, off);
        buf_puts(&h, "]}");
    }
    buf_puts(&h, "}");
    while (!h.oom && h.n % 8 != 0) buf_puts(&h, " ");
    if (h.oom) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory building the header of %s", path); goto done; }
    if ((uint64_t)h.n > LMC_ST_MAX_HEADER) {
        st = lmc_fail(LMC_ERR_RANGE, "%s: header would be %zu bytes, over the %llu-byte limit readers accept", path,
                      h.n, (unsigned long long)LMC_ST_MAX_HEADER);
        goto done;
    }

    size_t pl = strlen(path);
    char *tmp = malloc(pl + 32);
    if (!tmp) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory writing %s", path); goto done; }
    snprintf(tmp, pl + 32, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = lmc_fail(LMC_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        goto done;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    st = write_all(fd, len8, 8, path);
    if (st == LMC_OK) st = write_all(fd, h.p, h.n, path);
    for (int i = 0; i < n && st == LMC_OK; i++) {
        if (nbytes[i]) st = write_all(fd, tensors[i].data, (size_t)nbytes[i], path);
    }
    if (close(fd) != 0 && st == LMC_OK) st = lmc_fail(LMC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (st == LMC_OK && rename(tmp, path) != 0) {
        st = lmc_fail(LMC_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
    if (st < 0) unlink(tmp);
    free(tmp);
done:
    free(h.p);
    free(nbytes);
    return st;
}

static int cmp_write_tensor(const void *a, const void *b) {
    const lmc_st_write_tensor *x = a, *y = b;
    size_t sx = lmc_dtype_size(x->dtype), sy = lmc_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name ? x->name : "", y->name ? y->name : "");
}

void lmc_st_sort_for_alignment(lmc_st_write_tensor *tensors, int n) {
    if (n > 1) qsort(tensors, (size_t)n, sizeof *tensors, cmp_write_tensor);
}
