/* fuzz_gguf.c — fuzz target: GGUF files, and what lmc derives from their metadata.
 *
 * The input is a whole GGUF file, copied into a buffer of exactly its size (so ASan sees
 * any read past the end) and opened with lmc_gguf_open_buffer. On success: every
 * metadata value is read through the typed getters (arrays walked, nested ones too, up
 * to a budget), every tensor is checked to lie inside the buffer, the HF config is built
 * from the metadata and normalized (lmc_gguf_arch_config → lmc_config_from_json →
 * lmc_profile_resolve → rope tables, as lmc_model_load does), the HF tensor view is
 * opened, and a tokenizer.ggml.* vocabulary is rebuilt as tokenizer.json and loaded.
 */
#include <stdint.h>

#include "fuzz.h"
#include "io/gguf.h"
#include "io/gguf_arch.h"
#include "io/gguf_tok.h"
#include "io/gguf_view.h"
#include "model/arch.h"
#include "model/config.h"
#include "model/rope.h"
#include "tok/tokenizer.h"

static void gguf_walk_arr(const lmc_gguf_array *a, int depth, long *budget) {
    for (uint64_t i = 0; i < a->n && *budget > 0; i++, (*budget)--) {
        int64_t iv;
        double fv;
        int bv;
        const char *s;
        size_t len;
        lmc_gguf_array sub;
        switch (a->elem_type) {
        case LMC_GGUF_STRING:
            if (lmc_gguf_arr_str(a, i, &s, &len) == LMC_OK && len) FUZZ_CHECK(s != NULL);
            break;
        case LMC_GGUF_ARRAY:
            FUZZ_CHECK(depth < LMC_GGUF_MAX_DEPTH + 1);
            if (lmc_gguf_arr_arr(a, i, &sub) == LMC_OK) gguf_walk_arr(&sub, depth + 1, budget);
            break;
        case LMC_GGUF_F32: case LMC_GGUF_F64: (void)lmc_gguf_arr_float(a, i, &fv); break;
        case LMC_GGUF_BOOL: (void)lmc_gguf_arr_bool(a, i, &bv); break;
        default: (void)lmc_gguf_arr_int(a, i, &iv); break;
        }
    }
    int64_t iv;
    FUZZ_CHECK(lmc_gguf_arr_int(a, a->n, &iv) < 0); /* one past the end is refused */
}

static void gguf_config(const lmc_gguf *g) {
    cJSON *raw = NULL;
    if (lmc_gguf_arch_config(g, &raw) < 0) return;
    static lmc_config cfg; /* large (per-layer tables): not on the stack */
    lmc_status st = lmc_config_from_json(raw, NULL, &cfg);
    lmc_profile prof;
    if (st >= 0) st = lmc_profile_resolve(&cfg, &prof);
    static lmc_rope_table rt;
    if (st >= 0) (void)lmc_rope_build(&cfg.rope, cfg.head_dim, cfg.max_position_embeddings, &rt);
    lmc_config_free(&cfg);
}

static void gguf_tokenizer(const lmc_gguf *g) {
    char *json = NULL, *cfg = NULL;
    size_t len = 0;
    if (lmc_gguf_tokenizer_json(g, &json, &len, &cfg) == LMC_OK) {
        FUZZ_CHECK(json && strlen(json) == len);
        lmc_tokenizer *tok = NULL;
        if (lmc_tokenizer_load_json(json, len, cfg, cfg ? strlen(cfg) : 0, &tok) == LMC_OK) {
            int32_t *ids = NULL;
            int n = 0;
            static const char text[] = "ab a\xc3\xa9 <s>c\xff";
            if (lmc_tokenizer_encode(tok, text, sizeof text - 1, 1, &ids, &n) == LMC_OK) {
                for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0); /* post-processor ids may pass n_vocab */
                char *out = NULL;
                size_t olen = 0;
                if (lmc_tokenizer_decode(tok, ids, n, 0, &out, &olen) == LMC_OK) free(out);
                free(ids);
            }
            lmc_tokenizer_free(tok);
        }
    }
    free(json);
    free(cfg);
}

int fuzz_gguf(const uint8_t *d, size_t n) {
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return 0;
    if (n) memcpy(buf, d, n);
    lmc_gguf *g = NULL;
    if (lmc_gguf_open_buffer(buf, n, "fuzz.gguf", &g) == LMC_OK) {
        long budget = 200000;
        for (int64_t i = 0; i < lmc_gguf_n_kv(g); i++) {
            const char *key = lmc_gguf_kv_key(g, i);
            FUZZ_CHECK(key != NULL);
            FUZZ_CHECK(lmc_gguf_find_key(g, key) == i);
            int64_t iv;
            double fv;
            int bv;
            const char *s;
            size_t len;
            lmc_gguf_array a;
            switch (lmc_gguf_kv_type(g, i)) {
            case LMC_GGUF_STRING:
                if (lmc_gguf_kv_str(g, i, &s, &len) == LMC_OK) FUZZ_CHECK(s && s[len] == 0);
                break;
            case LMC_GGUF_ARRAY:
                if (lmc_gguf_kv_arr(g, i, &a) == LMC_OK) gguf_walk_arr(&a, 1, &budget);
                break;
            case LMC_GGUF_F32: case LMC_GGUF_F64: FUZZ_CHECK(lmc_gguf_kv_float(g, i, &fv) == LMC_OK); break;
            case LMC_GGUF_BOOL: FUZZ_CHECK(lmc_gguf_kv_bool(g, i, &bv) == LMC_OK); break;
            default: (void)lmc_gguf_kv_int(g, i, &iv); break;
            }
        }
        size_t total = 0;
        for (int64_t i = 0; i < lmc_gguf_n_tensors(g); i++) {
            const lmc_gguf_tensor *t = lmc_gguf_tensor_at(g, i);
            FUZZ_CHECK(t && t->name);
            FUZZ_CHECK(lmc_gguf_find_tensor(g, t->name) == t);
            FUZZ_CHECK(t->n_dims >= 0 && t->n_dims <= LMC_GGUF_MAX_DIMS);
            const uint8_t *p = t->data;
            FUZZ_CHECK(t->nbytes == 0 || (p >= buf && t->nbytes <= n && (size_t)(p - buf) <= n - t->nbytes));
            const volatile uint8_t *vp = p;
            if (t->nbytes) { (void)vp[0]; (void)vp[t->nbytes - 1]; }
            total += t->nbytes;
        }
        FUZZ_CHECK(total == lmc_gguf_total_bytes(g));
        gguf_config(g);
        lmc_gguf_hf_view *v = NULL;
        if (lmc_gguf_hf_view_open(g, &v) == LMC_OK) {
            for (int64_t i = 0; i < lmc_gguf_hf_view_count(v); i++) {
                const lmc_gguf_hf_tensor *t = lmc_gguf_hf_view_at(v, i);
                FUZZ_CHECK(t && t->name && lmc_gguf_hf_view_find(v, t->name) == t);
                const volatile uint8_t *p = t->data;
                if (t->nbytes) (void)p[t->nbytes - 1];
            }
            lmc_gguf_hf_view_close(v);
        }
        gguf_tokenizer(g);
        lmc_gguf_close(g);
    }
    free(buf);
    return 0;
}

#ifdef LMC_FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return fuzz_gguf(d, n); }
#endif
