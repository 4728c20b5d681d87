/* safetensors.h — read safetensors checkpoints over mmap, write single files.
 *
 * A set is one or more shard files mapped read-only (MAP_PRIVATE, PROT_READ);
 * tensors point into the mappings and are never copied. The set owns the
 * mappings and every name; all pointers stay valid until lmc_st_close.
 * Every header is validated in full at open time (offsets, sizes, overlaps,
 * duplicate names, index consistency); a bad file is an error naming the file
 * and the tensor, never a crash.
 *
 *     lmc_st_set *set;
 *     if (lmc_st_open("path/to/model_dir", &set) < 0) puts(lmc_last_error());
 *     const lmc_st_tensor *t = lmc_st_find(set, "model.embed_tokens.weight");
 *     ... t->dtype, t->shape[0..n_dims), t->data, t->nbytes ...
 *     lmc_st_close(set);
 *
 * Alignment: data is as aligned as the file makes it. Files written by the
 * reference writer (and by lmc_st_write when tensors are given in order of
 * decreasing element size) have every tensor aligned to its element size;
 * other files may not, so a consumer that needs alignment checks
 * ((uintptr_t)t->data % lmc_dtype_size(t->dtype)) or copies.
 */
#ifndef LMC_IO_SAFETENSORS_H
#define LMC_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

#define LMC_ST_MAX_DIMS 8
#define LMC_ST_MAX_HEADER ((uint64_t)100000000) /* bytes of JSON header accepted */

typedef struct lmc_st_tensor {
    const char *name;                 /* owned by the set */
    lmc_dtype dtype;
    int n_dims;                       /* 0..8 */
    int64_t shape[LMC_ST_MAX_DIMS];   /* as in the file: outermost first (torch order) */
    const void *data;                 /* points into the read-only mapping */
    size_t nbytes;
    int shard;                        /* index of the file it came from */
} lmc_st_tensor;

typedef struct lmc_st_set lmc_st_set;

/* path: a .safetensors file; a model.safetensors.index.json (any *.json is read
 * as an index); or a directory holding model.safetensors or
 * model.safetensors.index.json (or, failing both, exactly the *.safetensors
 * files in it, sorted by name). Shards of an index are numbered in the sorted
 * order of their file names. Errors: LMC_ERR_NOT_FOUND (no such file, no
 * shards), LMC_ERR_IO, LMC_ERR_FORMAT (malformed), LMC_ERR_UNSUPPORTED (dtype
 * or rank lmc does not handle), LMC_ERR_NOMEM. *out is set only on success. */
lmc_status lmc_st_open(const char *path, lmc_st_set **out);
void lmc_st_close(lmc_st_set *set); /* NULL is a no-op */

int lmc_st_count(const lmc_st_set *set);
/* Tensors in file order: shard by shard, each shard in header order. i in [0,count). */
const lmc_st_tensor *lmc_st_at(const lmc_st_set *set, int i);
/* NULL if absent; O(log n). */
const lmc_st_tensor *lmc_st_find(const lmc_st_set *set, const char *name);
/* The index i with lmc_st_at(set, i) == t, in O(1); -1 if t is not one of the set's tensors. */
int lmc_st_index_of(const lmc_st_set *set, const lmc_st_tensor *t);
/* "__metadata__" string values of shard 0; NULL if absent. */
const char *lmc_st_metadata(const lmc_st_set *set, const char *key);
/* Number of "__metadata__" pairs of shard 0, and the i-th pair (i in [0,n)). */
int lmc_st_metadata_count(const lmc_st_set *set);
void lmc_st_metadata_at(const lmc_st_set *set, int i, const char **key, const char **value);
/* Sum of tensor bytes over all shards. */
size_t lmc_st_total_bytes(const lmc_st_set *set);
/* Number of shard files, and the path of one (as opened). */
int lmc_st_shard_count(const lmc_st_set *set);
const char *lmc_st_shard_path(const lmc_st_set *set, int shard);
/* Elements of a tensor (product of its shape; 1 for a scalar). */
int64_t lmc_st_nelem(const lmc_st_tensor *t);

/* Write one .safetensors file (used by quantize/convert and by tests).
 * The header JSON is padded with spaces to a multiple of 8 bytes, so the data
 * buffer starts 8-byte aligned; tensors are stored in the given order,
 * back to back (the reference loader rejects gaps between tensors), so give
 * them in order of decreasing element size (lmc_st_sort_for_alignment) to keep
 * each one aligned.
 * metadata_kv holds n_meta key/value string pairs (2*n_meta strings) or is NULL.
 * data may be NULL only for a tensor of zero elements. The file is written
 * to a temporary name beside `path` and renamed into place.
 * Errors: LMC_ERR_ARG (bad name, dtype, rank, shape, duplicate), LMC_ERR_IO. */
typedef struct lmc_st_write_tensor {
    const char *name;
    lmc_dtype dtype;
    int n_dims;
    int64_t shape[LMC_ST_MAX_DIMS];
    const void *data;
} lmc_st_write_tensor;
lmc_status lmc_st_write(const char *path, const lmc_st_write_tensor *tensors, int n,
                        const char *const *metadata_kv, int n_meta);
/* Reorder tensors for lmc_st_write so every tensor is aligned to its element
 * size: decreasing element size, then by name (as the reference writer does). */
void lmc_st_sort_for_alignment(lmc_st_write_tensor *tensors, int n);

#endif
