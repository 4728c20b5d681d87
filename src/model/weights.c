/* weights.c — safetensors sets and GGUF views behind one tensor table. */
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/gguf_arch.h"
#include "io/gguf_view.h"
#include "io/safetensors.h"

struct lmc_weights {
    lmc_st_set *st;           /* safetensors, or */
    lmc_gguf *gguf;           /* a GGUF file and */
    lmc_gguf_hf_view *view;   /* its Hugging Face view */
    lmc_weight *items;        /* [n] */
    int n;
    size_t total;
};

int lmc_path_is_gguf(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    return got == 4 && !memcmp(magic, "GGUF", 4);
}

static lmc_status open_safetensors(lmc_weights *w, const char *path) {
    LMC_TRY(lmc_st_open(path, &w->st));
    w->n = lmc_st_count(w->st);
    w->items = calloc((size_t)w->n + 1, sizeof *w->items);
    if (!w->items) return lmc_fail(LMC_ERR_NOMEM, "weights table");
    for (int i = 0; i < w->n; i++) {
        const lmc_st_tensor *t = lmc_st_at(w->st, i);
        lmc_weight *x = &w->items[i];
        x->name = t->name;
        x->dtype = t->dtype;
        x->n_dims = t->n_dims;
        memcpy(x->shape, t->shape, sizeof x->shape);
        x->data = t->data;
        x->nbytes = t->nbytes;
        w->total += t->nbytes;
    }
    return LMC_OK;
}

static lmc_status open_gguf(lmc_weights *w, const char *path) {
    LMC_TRY(lmc_gguf_open(path, &w->gguf));
    LMC_TRY(lmc_gguf_hf_view_open(w->gguf, &w->view));
    w->n = (int)lmc_gguf_hf_view_count(w->view);
    w->items = calloc((size_t)w->n + 1, sizeof *w->items);
    if (!w->items) return lmc_fail(LMC_ERR_NOMEM, "weights table");
    for (int i = 0; i < w->n; i++) {
        const lmc_gguf_hf_tensor *t = lmc_gguf_hf_view_at(w->view, i);
        lmc_weight *x = &w->items[i];
        LMC_TRY(lmc_ggml_type_to_dtype(t->type, &x->dtype));
        x->name = t->name;
        x->n_dims = t->n_dims;
        for (int d = 0; d < t->n_dims && d < 8; d++) x->shape[d] = t->shape[d];
        x->data = t->data;
        x->nbytes = t->nbytes;
        w->total += t->nbytes;
    }
    return LMC_OK;
}

lmc_status lmc_weights_open(const char *path, lmc_weights **out) {
    lmc_weights *w = calloc(1, sizeof *w);
    if (!w) return lmc_fail(LMC_ERR_NOMEM, "weights");
    lmc_status st = lmc_path_is_gguf(path) ? open_gguf(w, path) : open_safetensors(w, path);
    if (st < 0) { lmc_weights_close(w); return st; }
    *out = w;
    return LMC_OK;
}

void lmc_weights_close(lmc_weights *w) {
    if (!w) return;
    free(w->items);
    lmc_gguf_hf_view_close(w->view);
    lmc_gguf_close(w->gguf);
    lmc_st_close(w->st);
    free(w);
}

int lmc_weights_count(const lmc_weights *w) { return w->n; }
const lmc_weight *lmc_weights_at(const lmc_weights *w, int i) { return i >= 0 && i < w->n ? &w->items[i] : NULL; }
size_t lmc_weights_total_bytes(const lmc_weights *w) { return w->total; }
const char *lmc_weights_format(const lmc_weights *w) { return w->gguf ? "gguf" : "safetensors"; }
int lmc_weights_n_files(const lmc_weights *w) { return w->st ? lmc_st_shard_count(w->st) : (int)lmc_gguf_n_files(w->gguf); }

int64_t lmc_weight_nelem(const lmc_weight *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->shape[d];
    return n;
}

const lmc_weight *lmc_weights_find(const lmc_weights *w, const char *name) {
    if (w->st) {
        const lmc_st_tensor *t = lmc_st_find(w->st, name);
        return t ? &w->items[lmc_st_index_of(w->st, t)] : NULL;
    }
    const lmc_gguf_hf_tensor *t = lmc_gguf_hf_view_find(w->view, name);
    if (!t) return NULL;
    for (int i = 0; i < w->n; i++) /* the view keeps its own order; names are unique */
        if (w->items[i].name == t->name) return &w->items[i];
    return NULL;
}

int lmc_weights_index_of(const lmc_weights *w, const lmc_weight *t) {
    return t >= w->items && t < w->items + w->n ? (int)(t - w->items) : -1;
}

lmc_status lmc_weight_bind_mxfp4(lmc_backend *be, const lmc_weight *blocks, const lmc_weight *scales, int64_t expert,
                                 int64_t row0, int64_t n_rows, lmc_tensor *w, lmc_quant_mlx *aux) {
    const int nd = blocks->n_dims;
    if (blocks->dtype != LMC_DTYPE_U8 || scales->dtype != LMC_DTYPE_U8)
        return lmc_fail(LMC_ERR_FORMAT, "MXFP4 %s / %s have dtypes %s / %s, expected U8 / U8", blocks->name, scales->name,
                        lmc_dtype_name(blocks->dtype), lmc_dtype_name(scales->dtype));
    if (nd < 3 || nd > 6 || blocks->shape[nd - 1] != 16 || scales->n_dims != nd - 1)
        return lmc_fail(LMC_ERR_FORMAT, "MXFP4 %s must be [..., rows, in/32, 16] with %s [..., rows, in/32]", blocks->name,
                        scales->name);
    int64_t n_expert = 1;
    for (int d = 0; d < nd - 1; d++) {
        if (scales->shape[d] != blocks->shape[d] || blocks->shape[d] <= 0)
            return lmc_fail(LMC_ERR_FORMAT, "MXFP4 %s and %s differ in dim %d (%lld vs %lld)", blocks->name, scales->name,
                            d, (long long)blocks->shape[d], (long long)scales->shape[d]);
        if (d < nd - 3) n_expert *= blocks->shape[d];
    }
    const int64_t rows = blocks->shape[nd - 3], groups = blocks->shape[nd - 2];
    if (expert < 0 || expert >= n_expert || row0 < 0 || n_rows <= 0 || row0 + n_rows > rows)
        return lmc_fail(LMC_ERR_FORMAT, "MXFP4 %s: expert %lld rows [%lld, %lld) outside its %lld x %lld rows",
                        blocks->name, (long long)expert, (long long)row0, (long long)(row0 + n_rows), (long long)n_expert,
                        (long long)rows);
    if (blocks->nbytes != (size_t)(n_expert * rows * groups * 16) || scales->nbytes != (size_t)(n_expert * rows * groups))
        return lmc_fail(LMC_ERR_FORMAT, "MXFP4 %s / %s: byte sizes do not match their shapes", blocks->name, scales->name);
    const size_t first = (size_t)(expert * rows + row0);
    memset(aux, 0, sizeof *aux);
    aux->group_size = 32;
    aux->scales = lmc_tensor_make(LMC_DTYPE_U8, groups, n_rows, 1, 1);
    *w = lmc_tensor_make(LMC_DTYPE_MXFP4_MLX, groups * 32, n_rows, 1, 1);
    LMC_TRY(be->i->bind_weight(be, &aux->scales, (const char *)scales->data + first * (size_t)groups));
    w->aux = aux;
    lmc_status st = lmc_quant_mlx_check(w->type, w->ne[0], w->ne[1], aux);
    if (st >= 0) st = be->i->bind_weight(be, w, (const char *)blocks->data + first * (size_t)groups * 16);
    if (st < 0) be->i->unbind_weight(be, &aux->scales);
    return st;
}

lmc_status lmc_checkpoint_config(const char *path, lmc_config *cfg) {
    if (!lmc_path_is_gguf(path)) return lmc_config_load(path, cfg);
    lmc_gguf *g;
    LMC_TRY(lmc_gguf_open(path, &g));
    cJSON *raw = NULL;
    lmc_status st = lmc_gguf_arch_config(g, &raw);
    lmc_gguf_close(g);
    if (st < 0) return lmc_fail_context(st, "%s", path);
    st = lmc_config_from_json(raw, NULL, cfg);
    if (st < 0) {
        lmc_config_free(cfg);
        return lmc_fail_context(st, "%s (config from GGUF metadata)", path);
    }
    return LMC_OK;
}
