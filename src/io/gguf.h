/* gguf.h — read and write GGUF files (the llama.cpp / ggml container).
 *
 * Reader: the file is mapped read-only and validated in full at open time
 * (header, every metadata value, every tensor info, alignment, data bounds,
 * overlaps, duplicates); afterwards lookups cannot read out of bounds. The
 * context owns the mapping, the key and tensor-name copies and the index
 * tables; every pointer it hands out stays valid until lmc_gguf_close.
 * Writer: collects metadata and tensor descriptors (tensor data is borrowed,
 * not copied) and writes one version-3 file atomically (temp file + rename).
 *
 *     lmc_gguf *g;
 *     if (lmc_gguf_open("model.gguf", &g) < 0) puts(lmc_last_error());
 *     const char *arch; int64_t n_layer;
 *     lmc_gguf_get_str(g, "general.architecture", &arch, NULL);
 *     lmc_gguf_get_int(g, "llama.block_count", &n_layer);
 *     const lmc_gguf_tensor *t = lmc_gguf_find_tensor(g, "blk.0.attn_q.weight");
 *     ... t->type (GGML id), t->ne[0..3] (innermost first), t->data, t->nbytes ...
 *     lmc_gguf_close(g);
 *
 * Format (little-endian): "GGUF", u32 version (2 or 3), u64 n_tensors,
 * u64 n_kv, n_kv × (string key, u32 value type, value), n_tensors ×
 * (string name, u32 n_dims, n_dims × u64 ne, u32 ggml type, u64 offset),
 * padding to `general.alignment` (default 32), then the data section; each
 * tensor's offset is relative to the data section and a multiple of the
 * alignment. A string is u64 length + bytes (no NUL). An array is u32
 * element type + u64 count + elements (arrays may nest).
 */
#ifndef LMC_IO_GGUF_H
#define LMC_IO_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

#define LMC_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define LMC_GGUF_VERSION 3         /* written; 2 and 3 are read (same layout) */
#define LMC_GGUF_DEFAULT_ALIGNMENT 32
#define LMC_GGUF_MAX_DIMS 4
#define LMC_GGUF_MAX_NAME 63       /* bytes of a tensor name the writer accepts (ggml's limit) */
#define LMC_GGUF_MAX_DEPTH 8       /* nesting of arrays accepted by the reader */

/* Metadata value types (GGUFValueType). */
typedef enum lmc_gguf_vtype {
    LMC_GGUF_U8 = 0,
    LMC_GGUF_I8 = 1,
    LMC_GGUF_U16 = 2,
    LMC_GGUF_I16 = 3,
    LMC_GGUF_U32 = 4,
    LMC_GGUF_I32 = 5,
    LMC_GGUF_F32 = 6,
    LMC_GGUF_BOOL = 7,
    LMC_GGUF_STRING = 8,
    LMC_GGUF_ARRAY = 9,
    LMC_GGUF_U64 = 10,
    LMC_GGUF_I64 = 11,
    LMC_GGUF_F64 = 12,
    LMC_GGUF_VTYPE_COUNT
} lmc_gguf_vtype;

/* Tensor types: GGML type ids as stored in the file (GGMLQuantizationType).
 * Ids 4, 5, 31-33 and 36-38 belonged to formats removed from ggml and are
 * rejected like any unknown id. */
typedef enum lmc_ggml_type {
    LMC_GGML_F32 = 0,
    LMC_GGML_F16 = 1,
    LMC_GGML_Q4_0 = 2,
    LMC_GGML_Q4_1 = 3,
    LMC_GGML_Q5_0 = 6,
    LMC_GGML_Q5_1 = 7,
    LMC_GGML_Q8_0 = 8,
    LMC_GGML_Q8_1 = 9,
    LMC_GGML_Q2_K = 10,
    LMC_GGML_Q3_K = 11,
    LMC_GGML_Q4_K = 12,
    LMC_GGML_Q5_K = 13,
    LMC_GGML_Q6_K = 14,
    LMC_GGML_Q8_K = 15,
    LMC_GGML_IQ2_XXS = 16,
    LMC_GGML_IQ2_XS = 17,
    LMC_GGML_IQ3_XXS = 18,
    LMC_GGML_IQ1_S = 19,
    LMC_GGML_IQ4_NL = 20,
    LMC_GGML_IQ3_S = 21,
    LMC_GGML_IQ2_S = 22,
    LMC_GGML_IQ4_XS = 23,
    LMC_GGML_I8 = 24,
    LMC_GGML_I16 = 25,
    LMC_GGML_I32 = 26,
    LMC_GGML_I64 = 27,
    LMC_GGML_F64 = 28,
    LMC_GGML_IQ1_M = 29,
    LMC_GGML_BF16 = 30,
    LMC_GGML_TQ1_0 = 34,
    LMC_GGML_TQ2_0 = 35,
    LMC_GGML_MXFP4 = 39,
    LMC_GGML_NVFP4 = 40,
    LMC_GGML_Q1_0 = 41,
    LMC_GGML_TYPE_LIMIT /* one past the largest id */
} lmc_ggml_type;

/* Name ("Q8_0"), elements per block and bytes per block of a GGML type id;
 * NULL / 0 / 0 for an id that is not a known type. */
const char *lmc_ggml_type_name(uint32_t type);
int lmc_ggml_block_size(uint32_t type);
int lmc_ggml_type_size(uint32_t type);
/* Bytes of a row of n elements: n / block_size × type_size. LMC_ERR_FORMAT if
 * the type is unknown or n is not a multiple of the block size. */
lmc_status lmc_ggml_row_bytes(uint32_t type, int64_t n, size_t *out);
/* The lmc dtype holding the same bytes; LMC_ERR_UNSUPPORTED (naming the type)
 * for a type lmc has no dtype for yet. Mapped today: F32 F16 BF16 F64 I8 I16
 * I32 I64 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K (not Q8_1, Q8_K,
 * the IQ*, TQ*, MXFP4, NVFP4, Q1_0 types). */
lmc_status lmc_ggml_type_to_dtype(uint32_t type, lmc_dtype *out);
/* The GGML id of an lmc dtype; LMC_ERR_UNSUPPORTED if GGUF has none (U8, BOOL, MLX affine). */
lmc_status lmc_ggml_type_from_dtype(lmc_dtype dt, uint32_t *out);
/* "u8", "string", "array", ...; "?" for an unknown id. */
const char *lmc_gguf_vtype_name(uint32_t vtype);

/* ---- reader ---------------------------------------------------------------------------------- */

typedef struct lmc_gguf lmc_gguf;

typedef struct lmc_gguf_tensor {
    const char *name;                 /* NUL-terminated, owned by the context */
    uint32_t type;                    /* GGML type id (lmc_ggml_type) */
    int n_dims;                       /* 1..4 as in the file (0 is read as a scalar) */
    int64_t ne[LMC_GGUF_MAX_DIMS];    /* elements per dim, innermost (row) first; unused dims are 1.
                                         The torch shape is ne reversed: [ne[n_dims-1], ..., ne[0]] */
    uint64_t offset;                  /* from the start of the data section, as in the file */
    const void *data;                 /* into the read-only mapping */
    size_t nbytes;                    /* ne product / block size × type size */
} lmc_gguf_tensor;

/* An array value (possibly an element of another array). Element access
 * goes through lmc_gguf_arr_*; the fields are for inspection. */
typedef struct lmc_gguf_array {
    const lmc_gguf *g;
    uint32_t elem_type;          /* lmc_gguf_vtype */
    uint64_t n;                  /* element count */
    const uint8_t *data;         /* first element, into the mapping (unaligned, little-endian) */
    const uint64_t *offsets;     /* string/array elements: byte offset of element i from data; else NULL */
} lmc_gguf_array;

/* Map and validate a file. Errors: LMC_ERR_NOT_FOUND / LMC_ERR_IO (cannot
 * open/map), LMC_ERR_FORMAT (malformed; the message names the file and the
 * offending key, tensor or byte offset), LMC_ERR_UNSUPPORTED (version 1,
 * big-endian files, unknown tensor type ids — named), LMC_ERR_NOMEM. */
lmc_status lmc_gguf_open(const char *path, lmc_gguf **out);
/* The same over a caller-owned buffer, not copied: it must outlive the
 * context. `label` names it in messages. */
lmc_status lmc_gguf_open_buffer(const void *buf, size_t len, const char *label, lmc_gguf **out);
void lmc_gguf_close(lmc_gguf *g); /* NULL is a no-op */

uint32_t lmc_gguf_version(const lmc_gguf *g);
uint32_t lmc_gguf_alignment(const lmc_gguf *g);
uint64_t lmc_gguf_data_offset(const lmc_gguf *g); /* file offset of the data section */
size_t lmc_gguf_file_size(const lmc_gguf *g);
int64_t lmc_gguf_n_files(const lmc_gguf *g); /* 1, or a split GGUF's file count (its tensors are all listed) */

/* Metadata, in file order: i in [0, n_kv). */
int64_t lmc_gguf_n_kv(const lmc_gguf *g);
const char *lmc_gguf_kv_key(const lmc_gguf *g, int64_t i);
lmc_gguf_vtype lmc_gguf_kv_type(const lmc_gguf *g, int64_t i);
/* Index of a key, or -1 if absent (O(log n), no error recorded). */
int64_t lmc_gguf_find_key(const lmc_gguf *g, const char *key);

/* Typed getters by key. Absent key: LMC_ERR_NOT_FOUND; a value of another
 * kind: LMC_ERR_FORMAT naming the key and both types (error message set in
 * both cases). get_int accepts every integer width (a u64 above INT64_MAX is
 * LMC_ERR_RANGE); get_float accepts f32 and f64; get_bool only bool.
 * get_str returns a NUL-terminated copy owned by the context; *len (if not
 * NULL) is its byte length (the string may hold NUL bytes). */
lmc_status lmc_gguf_get_int(const lmc_gguf *g, const char *key, int64_t *out);
lmc_status lmc_gguf_get_float(const lmc_gguf *g, const char *key, double *out);
lmc_status lmc_gguf_get_bool(const lmc_gguf *g, const char *key, int *out);
lmc_status lmc_gguf_get_str(const lmc_gguf *g, const char *key, const char **out, size_t *len);
lmc_status lmc_gguf_get_arr(const lmc_gguf *g, const char *key, lmc_gguf_array *out);
/* The same by index i in [0, n_kv). */
lmc_status lmc_gguf_kv_int(const lmc_gguf *g, int64_t i, int64_t *out);
lmc_status lmc_gguf_kv_float(const lmc_gguf *g, int64_t i, double *out);
lmc_status lmc_gguf_kv_bool(const lmc_gguf *g, int64_t i, int *out);
lmc_status lmc_gguf_kv_str(const lmc_gguf *g, int64_t i, const char **out, size_t *len);
lmc_status lmc_gguf_kv_arr(const lmc_gguf *g, int64_t i, lmc_gguf_array *out);

/* Array elements, i in [0, a->n) (else LMC_ERR_RANGE); element kinds as for
 * the getters above. arr_str gives a pointer into the mapping that is NOT
 * NUL-terminated, with its length. arr_arr gives a nested array. */
lmc_status lmc_gguf_arr_int(const lmc_gguf_array *a, uint64_t i, int64_t *out);
lmc_status lmc_gguf_arr_float(const lmc_gguf_array *a, uint64_t i, double *out);
lmc_status lmc_gguf_arr_bool(const lmc_gguf_array *a, uint64_t i, int *out);
lmc_status lmc_gguf_arr_str(const lmc_gguf_array *a, uint64_t i, const char **s, size_t *len);
lmc_status lmc_gguf_arr_arr(const lmc_gguf_array *a, uint64_t i, lmc_gguf_array *out);

/* Tensors in file order, i in [0, n_tensors). */
int64_t lmc_gguf_n_tensors(const lmc_gguf *g);
const lmc_gguf_tensor *lmc_gguf_tensor_at(const lmc_gguf *g, int64_t i);
/* NULL if absent; O(log n). */
const lmc_gguf_tensor *lmc_gguf_find_tensor(const lmc_gguf *g, const char *name);
/* Elements of a tensor (product of ne). */
int64_t lmc_gguf_nelem(const lmc_gguf_tensor *t);
/* Sum of tensor bytes. */
size_t lmc_gguf_total_bytes(const lmc_gguf *g);

/* ---- writer ---------------------------------------------------------------------------------- */

typedef struct lmc_gguf_writer lmc_gguf_writer;

lmc_status lmc_gguf_writer_init(lmc_gguf_writer **out);
void lmc_gguf_writer_free(lmc_gguf_writer *w); /* NULL is a no-op */

/* Alignment of the data section and of every tensor (a power of two, ≤ 2^20).
 * Any value other than 32 is also recorded as the u32 key general.alignment. */
lmc_status lmc_gguf_writer_set_alignment(lmc_gguf_writer *w, uint32_t alignment);

/* Metadata, written in call order. A key given twice is LMC_ERR_ARG. */
lmc_status lmc_gguf_writer_add_u8(lmc_gguf_writer *w, const char *key, uint8_t v);
lmc_status lmc_gguf_writer_add_i8(lmc_gguf_writer *w, const char *key, int8_t v);
lmc_status lmc_gguf_writer_add_u16(lmc_gguf_writer *w, const char *key, uint16_t v);
lmc_status lmc_gguf_writer_add_i16(lmc_gguf_writer *w, const char *key, int16_t v);
lmc_status lmc_gguf_writer_add_u32(lmc_gguf_writer *w, const char *key, uint32_t v);
lmc_status lmc_gguf_writer_add_i32(lmc_gguf_writer *w, const char *key, int32_t v);
lmc_status lmc_gguf_writer_add_u64(lmc_gguf_writer *w, const char *key, uint64_t v);
lmc_status lmc_gguf_writer_add_i64(lmc_gguf_writer *w, const char *key, int64_t v);
lmc_status lmc_gguf_writer_add_f32(lmc_gguf_writer *w, const char *key, float v);
lmc_status lmc_gguf_writer_add_f64(lmc_gguf_writer *w, const char *key, double v);
lmc_status lmc_gguf_writer_add_bool(lmc_gguf_writer *w, const char *key, int v);
lmc_status lmc_gguf_writer_add_str(lmc_gguf_writer *w, const char *key, const char *s);
lmc_status lmc_gguf_writer_add_strn(lmc_gguf_writer *w, const char *key, const char *s, size_t len);
/* Array of a fixed-size element type: data holds n values of the matching C
 * type (uint8_t ... double; bool as uint8_t 0/1), copied now. */
lmc_status lmc_gguf_writer_add_arr(lmc_gguf_writer *w, const char *key, lmc_gguf_vtype elem_type,
                                   const void *data, uint64_t n);
/* Array of n NUL-terminated strings, copied now. */
lmc_status lmc_gguf_writer_add_str_arr(lmc_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/* A tensor: ne innermost first (ne[0] = row length, a multiple of the type's
 * block size), data of exactly the implied byte size, borrowed until
 * lmc_gguf_writer_write returns. Tensors are stored in call order. */
lmc_status lmc_gguf_writer_add_tensor(lmc_gguf_writer *w, const char *name, uint32_t type, int n_dims,
                                      const int64_t *ne, const void *data);

/* Write the file: to a temporary file beside `path`, then rename over it
 * (an existing file is replaced only once the new one is complete). */
lmc_status lmc_gguf_writer_write(lmc_gguf_writer *w, const char *path);

/* Split files (llama.cpp's gguf-split layout): PREFIX-00001-of-0000N.gguf ... each with the keys
 * split.no (u16, from 0), split.count (u16) and split.tensors.count (i32, all files' tensors); the
 * first file also holds all the metadata; tensors in call order, max_tensors per file. The reader
 * opens the first file and finds the others beside it (lmc_gguf_open). */
#define LMC_GGUF_MAX_SPLITS 9999
lmc_status lmc_gguf_writer_write_split(lmc_gguf_writer *w, const char *prefix, int64_t max_tensors, int *n_files);
/* PREFIX-%05d-of-%05d.gguf for file no (1-based) of count. */
lmc_status lmc_gguf_split_path(const char *prefix, int no, int count, char *out, size_t cap);

#endif
