/* gguf_view.c — HF names, shapes and bytes over an open GGUF file.
 *
 * The view owns its tensor table, the HF names, the name index and the
 * buffers of rebuilt tensors (unpermuted q/k, norm weights minus one); every
 * other data pointer borrows the GGUF mapping, so the lmc_gguf must outlive
 * the view.
 */
#include "io/gguf_view.h"
#include "io/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lmc_gguf_hf_view {
    const lmc_gguf_arch_info *arch;
    lmc_gguf_hf_tensor *t;
    int64_t n;
    int64_t *sorted;   /* [n] indices by HF name */
    void **owned;      /* [n] buffers of rebuilt tensors (NULL when borrowed) */
};

void lmc_gguf_hf_view_close(lmc_gguf_hf_view *v) {
    if (!v) return;
    for (int64_t i = 0; i < v->n; i++) {
        free((char *)v->t[i].name);
        free(v->owned[i]);
    }
    free(v->t);
    free(v->owned);
    free(v->sorted);
    free(v);
}

/* An integer key that may be stored per layer (then all values must agree). */
static lmc_status head_count(const lmc_gguf *g, const char *key, int64_t *out) {
    int64_t i = lmc_gguf_find_key(g, key);
    if (i < 0) return lmc_fail(LMC_ERR_FORMAT, "GGUF metadata lacks %s", key);
    if (lmc_gguf_kv_type(g, i) != LMC_GGUF_ARRAY) return lmc_gguf_kv_int(g, i, out);
    lmc_gguf_array a;
    LMC_TRY(lmc_gguf_kv_arr(g, i, &a));
    if (a.n == 0) return lmc_fail(LMC_ERR_FORMAT, "GGUF %s is an empty array", key);
    LMC_TRY(lmc_gguf_arr_int(&a, 0, out));
    for (uint64_t k = 1; k < a.n; k++) {
        int64_t v;
        LMC_TRY(lmc_gguf_arr_int(&a, k, &v));
        if (v != *out) return lmc_fail(LMC_ERR_UNSUPPORTED, "GGUF %s differs between layers", key);
    }
    return LMC_OK;
}

/* 1 if name is blk.N.<what>.weight or blk.N.<what>.bias */
static int is_layer_tensor(const char *name, const char *what) {
    if (strncmp(name, "blk.", 4) != 0) return 0;
    const char *p = name + 4;
    while (*p >= '0' && *p <= '9') p++;
    if (p == name + 4 || *p != '.') return 0;
    p++;
    size_t n = strlen(what);
    return strncmp(p, what, n) == 0 && (strcmp(p + n, ".weight") == 0 || strcmp(p + n, ".bias") == 0);
}

static lmc_status unpermute(const lmc_gguf *g, const lmc_gguf_arch_info *a, const lmc_gguf_tensor *src, int is_k,
                            lmc_gguf_hf_tensor *dst, void **owned) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count%s", a->gguf_arch, is_k ? "_kv" : "");
    int64_t n_head;
    lmc_status st = head_count(g, key, &n_head);
    if (st == LMC_ERR_FORMAT && is_k) { /* head_count_kv absent: as many as query heads */
        snprintf(key, sizeof key, "%s.attention.head_count", a->gguf_arch);
        st = head_count(g, key, &n_head);
    }
    LMC_TRY(st);
    int64_t rows = src->n_dims >= 2 ? src->ne[1] : src->ne[0];
    if (src->n_dims > 2 || n_head <= 0 || rows % n_head || (rows / n_head) % 2) {
        return lmc_fail(LMC_ERR_FORMAT, "GGUF %s: %lld rows are not %lld heads of an even size", src->name, (long long)rows,
                        (long long)n_head);
    }
    size_t row_bytes = rows ? src->nbytes / (size_t)rows : 0;
    void *buf = malloc(src->nbytes ? src->nbytes : 1);
    if (!buf) return lmc_fail(LMC_ERR_NOMEM, "out of memory unpermuting %s", src->name);
    *owned = buf;
    LMC_TRY(lmc_gguf_unpermute_rows(buf, src->data, rows, row_bytes, rows / n_head));
    lmc_file_release(src->data, src->nbytes); /* the copy is what is read from now on */
    dst->data = buf;
    dst->transform = LMC_GGUF_HF_UNPERMUTED;
    return LMC_OK;
}

static lmc_status minus_one(const lmc_gguf_tensor *src, lmc_gguf_hf_tensor *dst, void **owned) {
    lmc_dtype dt;
    if (src->type != LMC_GGML_F32 && src->type != LMC_GGML_F16 && src->type != LMC_GGML_BF16) {
        return lmc_fail(LMC_ERR_FORMAT, "GGUF norm weight %s is %s (expected F32, F16 or BF16)", src->name,
                        lmc_ggml_type_name(src->type));
    }
    LMC_TRY(lmc_ggml_type_to_dtype(src->type, &dt));
    int64_t n = lmc_gguf_nelem(src);
    float *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
    if (!buf) return lmc_fail(LMC_ERR_NOMEM, "out of memory for %s", src->name);
    *owned = buf;
    if (src->type == LMC_GGML_F32) memcpy(buf, src->data, (size_t)n * sizeof *buf); /* data may be unaligned */
    else {
        /* f16/bf16 storage is 2-byte aligned in any file whose alignment is ≥ 2; copy to be safe */
        uint16_t *tmp = malloc((size_t)(n ? n : 1) * 2);
        if (!tmp) return lmc_fail(LMC_ERR_NOMEM, "out of memory for %s", src->name);
        memcpy(tmp, src->data, (size_t)n * 2);
        lmc_to_f32(dt, tmp, buf, (size_t)n);
        free(tmp);
    }
    for (int64_t i = 0; i < n; i++) buf[i] -= 1.0f;
    dst->data = buf;
    dst->nbytes = (size_t)n * sizeof *buf;
    dst->type = LMC_GGML_F32;
    dst->transform = LMC_GGUF_HF_NORM_MINUS_ONE;
    return LMC_OK;
}

static int cmp_name_r(const void *a, const void *b, void *ctx) {
    const lmc_gguf_hf_view *v = ctx;
    return strcmp(v->t[*(const int64_t *)a].name, v->t[*(const int64_t *)b].name);
}

/* A stacked expert tensor blk.N.ffn_{gate,up,down}_exps.weight (ne [in, out, E]) as E HF matrices
 * [out, in] whose data point at expert e's slice of the mapping (no copy). */
static lmc_status add_experts(const lmc_gguf *g, lmc_gguf_hf_view *v, const lmc_gguf_tensor *src, long layer, int kind) {
    char key[96];
    snprintf(key, sizeof key, "%s.expert_count", v->arch->gguf_arch);
    int64_t n_expert = 0;
    if (!v->arch->moe || lmc_gguf_find_key(g, key) < 0)
        return lmc_fail(LMC_ERR_FORMAT, "GGUF tensor %s holds stacked experts, but the file has no %s", src->name, key);
    LMC_TRY(lmc_gguf_get_int(g, key, &n_expert));
    if (src->n_dims != 3 || src->ne[2] != n_expert || n_expert <= 0) {
        return lmc_fail(LMC_ERR_FORMAT, "GGUF %s must be [%s %lld experts, out, in]: it has %d dims, %lld experts", src->name,
                        key, (long long)n_expert, src->n_dims, (long long)(src->n_dims == 3 ? src->ne[2] : 0));
    }
    const size_t per = src->nbytes / (size_t)n_expert;
    if (per * (size_t)n_expert != src->nbytes) return lmc_fail(LMC_ERR_FORMAT, "GGUF %s: bytes do not split into experts", src->name);
    for (int64_t e = 0; e < n_expert; e++) {
        char hf[256];
        LMC_TRY(lmc_gguf_arch_expert_hf_name(v->arch, layer, (long)e, kind, hf, sizeof hf));
        lmc_gguf_hf_tensor *t = &v->t[v->n];
        char *name = malloc(strlen(hf) + 1);
        if (!name) return lmc_fail(LMC_ERR_NOMEM, "out of memory for a GGUF view");
        memcpy(name, hf, strlen(hf) + 1);
        t->name = name;
        v->n++;
        t->type = src->type;
        t->n_dims = 2;
        for (int d = 0; d < LMC_GGUF_MAX_DIMS; d++) t->shape[d] = 1;
        t->shape[0] = src->ne[1];
        t->shape[1] = src->ne[0];
        t->data = (const uint8_t *)src->data + (size_t)e * per;
        t->nbytes = per;
        t->gguf = src;
        t->transform = LMC_GGUF_HF_AS_STORED;
    }
    return LMC_OK;
}

static lmc_status build(const lmc_gguf *g, lmc_gguf_hf_view *v) {
    LMC_TRY(lmc_gguf_arch_of(g, &v->arch));
    int64_t n_all = 0;
    for (int64_t i = 0; i < lmc_gguf_n_tensors(g); i++) { /* stacked experts become one entry per expert */
        const lmc_gguf_tensor *src = lmc_gguf_tensor_at(g, i);
        long layer;
        n_all += lmc_gguf_arch_expert_kind(src->name, &layer) >= 0 && src->n_dims == 3 ? (src->ne[2] > 0 ? src->ne[2] : 1) : 1;
    }
    v->t = calloc((size_t)(n_all ? n_all : 1), sizeof *v->t);
    v->owned = calloc((size_t)(n_all ? n_all : 1), sizeof *v->owned);
    v->sorted = malloc((size_t)(n_all ? n_all : 1) * sizeof *v->sorted);
    if (!v->t || !v->owned || !v->sorted) return lmc_fail(LMC_ERR_NOMEM, "out of memory for a GGUF view");
    for (int64_t i = 0; i < lmc_gguf_n_tensors(g); i++) {
        const lmc_gguf_tensor *src = lmc_gguf_tensor_at(g, i);
        if (lmc_gguf_arch_is_config_tensor(src->name)) continue;
        long layer;
        int kind = lmc_gguf_arch_expert_kind(src->name, &layer);
        if (kind >= 0) {
            if (src->n_dims != 3 || v->n + src->ne[2] > n_all)
                return lmc_fail(LMC_ERR_FORMAT, "GGUF %s must be [experts, out, in] (it has %d dims)", src->name, src->n_dims);
            LMC_TRY(add_experts(g, v, src, layer, kind));
            continue;
        }
        char hf[256];
        LMC_TRY(lmc_gguf_arch_hf_name(v->arch, src->name, hf, sizeof hf));
        lmc_gguf_hf_tensor *t = &v->t[v->n];
        size_t len = strlen(hf);
        char *name = malloc(len + 1);
        if (!name) return lmc_fail(LMC_ERR_NOMEM, "out of memory for a GGUF view");
        memcpy(name, hf, len + 1);
        t->name = name;
        v->n++;
        t->type = src->type;
        t->n_dims = src->n_dims;
        for (int d = 0; d < LMC_GGUF_MAX_DIMS; d++) t->shape[d] = 1;
        for (int d = 0; d < src->n_dims; d++) t->shape[d] = src->ne[src->n_dims - 1 - d];
        t->data = src->data;
        t->nbytes = src->nbytes;
        t->gguf = src;
        t->transform = LMC_GGUF_HF_AS_STORED;
        void **own = &v->owned[v->n - 1];
        if (v->arch->qk_permuted && is_layer_tensor(src->name, "attn_q")) LMC_TRY(unpermute(g, v->arch, src, 0, t, own));
        else if (v->arch->qk_permuted && is_layer_tensor(src->name, "attn_k")) LMC_TRY(unpermute(g, v->arch, src, 1, t, own));
        else if (lmc_gguf_arch_norm_shifted(v->arch, src->name)) LMC_TRY(minus_one(src, t, own));
        else if (src->n_dims == 1 && v->arch->moe && is_layer_tensor(src->name, "ffn_gate_inp_shexp")) {
            t->n_dims = 2; /* llama.cpp declares it [n_embd]; HF's shared_expert_gate is [1, D] */
            t->shape[0] = 1;
            t->shape[1] = src->ne[0];
        }
    }
    for (int64_t i = 0; i < v->n; i++) v->sorted[i] = i;
    qsort_r(v->sorted, (size_t)v->n, sizeof *v->sorted, cmp_name_r, v);
    for (int64_t i = 1; i < v->n; i++) {
        if (strcmp(v->t[v->sorted[i - 1]].name, v->t[v->sorted[i]].name) == 0) {
            return lmc_fail(LMC_ERR_FORMAT, "GGUF tensors map to the same HF name %s", v->t[v->sorted[i]].name);
        }
    }
    return LMC_OK;
}

lmc_status lmc_gguf_hf_view_open(const lmc_gguf *g, lmc_gguf_hf_view **out) {
    lmc_gguf_hf_view *v = calloc(1, sizeof *v);
    if (!v) return lmc_fail(LMC_ERR_NOMEM, "out of memory for a GGUF view");
    lmc_status st = build(g, v);
    if (st < 0) {
        lmc_gguf_hf_view_close(v);
        return st;
    }
    *out = v;
    return LMC_OK;
}

const lmc_gguf_arch_info *lmc_gguf_hf_view_arch(const lmc_gguf_hf_view *v) { return v->arch; }
int64_t lmc_gguf_hf_view_count(const lmc_gguf_hf_view *v) { return v->n; }

const lmc_gguf_hf_tensor *lmc_gguf_hf_view_at(const lmc_gguf_hf_view *v, int64_t i) {
    LMC_ASSERT(i >= 0 && i < v->n);
    return &v->t[i];
}

const lmc_gguf_hf_tensor *lmc_gguf_hf_view_find(const lmc_gguf_hf_view *v, const char *hf_name) {
    int64_t lo = 0, hi = v->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const lmc_gguf_hf_tensor *t = &v->t[v->sorted[mid]];
        int c = strcmp(t->name, hf_name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
