/* tensor.h — the tensor descriptor every module passes around.
 *
 * A tensor is a view: it never owns its memory. Who allocated `data` says
 * who frees it (a backend buffer, a mapped file, an arena). Shapes are
 * innermost first, as in ggml: a [rows, cols] row-major matrix has
 * ne[0] = cols, ne[1] = rows. Weights of a Linear(in, out) are [in, out]
 * (ne[0] = in). Activations are [features, n_tokens].
 */
#ifndef LMC_CORE_TENSOR_H
#define LMC_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#define LMC_MAX_DIMS 4

typedef struct lmc_tensor {
    lmc_dtype type;
    int64_t ne[LMC_MAX_DIMS]; /* shape, innermost first; unused dims are 1 */
    size_t nb[LMC_MAX_DIMS];  /* strides in bytes */
    void *data;               /* host or device pointer, per the owning backend */
    const void *aux;          /* format side data (quant scales); NULL otherwise */
} lmc_tensor;

/* A contiguous tensor descriptor of the given shape (data left NULL). */
static inline lmc_tensor lmc_tensor_make(lmc_dtype type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    lmc_tensor t = {0};
    t.type = type;
    t.ne[0] = ne0; t.ne[1] = ne1; t.ne[2] = ne2; t.ne[3] = ne3;
    /* nb[0] is the element size (the block size for block types, as ggml); a row of a
     * block type takes lmc_dtype_row_bytes (ne0 must be a multiple of the block) */
    t.nb[0] = lmc_dtype_block_bytes(type);
    t.nb[1] = lmc_dtype_row_bytes(type, ne0);
    for (int i = 2; i < LMC_MAX_DIMS; i++) t.nb[i] = t.nb[i - 1] * (size_t)t.ne[i - 1];
    return t;
}

static inline int64_t lmc_tensor_nelem(const lmc_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

static inline size_t lmc_tensor_nbytes(const lmc_tensor *t) {
    return (size_t)(t->ne[1] * t->ne[2] * t->ne[3]) * lmc_dtype_row_bytes(t->type, t->ne[0]);
}

/* Rows of a contiguous tensor seen as a 2-D [ne0, rows] matrix. */
static inline int64_t lmc_tensor_nrows(const lmc_tensor *t) {
    return t->ne[1] * t->ne[2] * t->ne[3];
}

/* The same memory seen with another contiguous shape (element count must match). */
static inline lmc_tensor lmc_tensor_reshape(const lmc_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    lmc_tensor r = lmc_tensor_make(t->type, ne0, ne1, ne2, ne3);
    r.data = t->data;
    r.aux = t->aux;
    return r;
}

/* Rows [first, first + n) of a contiguous tensor along its outermost used dim 1. */
static inline lmc_tensor lmc_tensor_rows(const lmc_tensor *t, int64_t first, int64_t n) {
    lmc_tensor r = lmc_tensor_make(t->type, t->ne[0], n, 1, 1);
    r.data = (char *)t->data + (size_t)first * t->nb[1];
    r.aux = t->aux;
    return r;
}

#endif
