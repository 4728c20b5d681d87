/* test_gguf_moe.c — mixture-of-experts GGUF files (llama.cpp's layout) written by
 * lmc_gguf_convert_hf from the qwen3_moe, qwen2_moe and mixtral fixtures and read back.
 *
 * The stacked expert tensors blk.N.ffn_{gate,up,down}_exps.weight are [in, out, E] in ggml's
 * order and come back as per-expert views into the mapping (no copy); the expert keys give the
 * fixture's MoE config; a Q8_0 file's experts dequantize to the fixture's within Q8_0's step
 * (router kept in its float type); a stacked Q4_K tensor's per-expert views are its experts' blocks;
 * the models load from the files. Malformed files (expert count against the tensors, used > count, a missing expert
 * tensor, stacked experts in a file without expert_count) are refused with errors that name
 * what is wrong. gpt_oss (llama.cpp's gpt-oss layout: gate_up split, biases, sinks) in test_gptoss;
 * a Hugging Face MXFP4 gpt_oss checkpoint repacked into GGUF MXFP4 in test_gptoss_mxfp4.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/quant.h"
#include "gen/context.h"
#include "io/gguf.h"
#include "io/gguf_arch.h"
#include "io/gguf_convert.h"
#include "io/gguf_view.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "prompt_logits.h"
#include "test.h"

static char tmpdir[128];

static const char *fixtures_root(void) { return getenv("LMC_FIXTURES") ? getenv("LMC_FIXTURES") : "tests/fixtures"; }

static lmc_status convert(const char *fx, const char *out, int quant) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", fixtures_root(), fx);
    lmc_gguf_convert_params p = {.skip_tokenizer = 1, .quant_type = quant};
    return lmc_gguf_convert_hf(dir, out, &p);
}

static lmc_status checkpoint_config(const char *path, lmc_config *c) { return lmc_checkpoint_config(path, c); }

/* The fixture's MoE config facts come back from the GGUF's keys and router tensors. */
static void test_config_and_layout(void) {
    static const char *const fxs[] = {"qwen3_moe", "qwen2_moe", "mixtral"};
    static const char *const archs[] = {"qwen3moe", "qwen2moe", "llama"};
    for (int i = 0; i < 3; i++) {
        char out[300], dir[600];
        snprintf(out, sizeof out, "%s/%s.gguf", tmpdir, fxs[i]);
        snprintf(dir, sizeof dir, "%s/%s", fixtures_root(), fxs[i]);
        lmc_status st = convert(fxs[i], out, 0);
        CHECK_MSG(st == LMC_OK, "%s: convert: %s", fxs[i], lmc_last_error());
        if (st < 0) continue;
        lmc_gguf *g = NULL;
        CHECK(lmc_gguf_open(out, &g) == LMC_OK);
        if (!g) continue;
        const char *arch = NULL;
        CHECK(lmc_gguf_get_str(g, "general.architecture", &arch, NULL) == LMC_OK && strcmp(arch, archs[i]) == 0);
        lmc_config o, s;
        CHECK_MSG(checkpoint_config(dir, &o) == LMC_OK, "%s", lmc_last_error());
        CHECK_MSG(checkpoint_config(out, &s) == LMC_OK, "%s: %s", fxs[i], lmc_last_error());
        CHECK_MSG(strcmp(o.model_type, s.model_type) == 0, "%s: model_type %s vs %s", fxs[i], o.model_type, s.model_type);
        CHECK_EQ_INT(o.n_experts, s.n_experts);
        CHECK_EQ_INT(o.n_experts_used, s.n_experts_used);
        CHECK_EQ_INT(o.moe_intermediate_size, s.moe_intermediate_size);
        CHECK_EQ_INT(o.shared_intermediate_size, s.shared_intermediate_size);
        CHECK_EQ_INT(o.intermediate_size, s.intermediate_size);
        CHECK_MSG((o.norm_topk_prob > 0) == (s.norm_topk_prob > 0), "%s: norm_topk_prob %d vs %d", fxs[i], o.norm_topk_prob,
                  s.norm_topk_prob);
        for (int l = 0; l < o.n_layers; l++) CHECK_MSG(o.layer_dense[l] == s.layer_dense[l], "%s: layer %d dense %d vs %d", fxs[i], l,
                                                       o.layer_dense[l], s.layer_dense[l]);
        /* the stacked tensor of the first sparse layer: ne [in, out, E], llama.cpp's names */
        int sl = 0;
        while (sl < o.n_layers && o.layer_dense[sl]) sl++;
        char name[96];
        const int64_t I = strcmp(fxs[i], "mixtral") == 0 ? o.intermediate_size : o.moe_intermediate_size;
        static const char *const kinds[3] = {"gate", "up", "down"};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.weight", sl, kinds[k]);
            const lmc_gguf_tensor *t = lmc_gguf_find_tensor(g, name);
            CHECK_MSG(t != NULL, "%s: %s missing", fxs[i], name);
            if (!t) continue;
            const int64_t in = k == 2 ? I : o.hidden_size, outd = k == 2 ? o.hidden_size : I;
            CHECK(t->n_dims == 3 && t->ne[0] == in && t->ne[1] == outd && t->ne[2] == o.n_experts);
        }
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", sl);
        const lmc_gguf_tensor *r = lmc_gguf_find_tensor(g, name);
        CHECK(r && r->n_dims == 2 && r->ne[0] == o.hidden_size && r->ne[1] == o.n_experts);
        if (strcmp(fxs[i], "qwen2_moe") == 0) {
            CHECK(lmc_gguf_find_tensor(g, "blk.0.ffn_gate_inp_shexp.weight") != NULL);
            CHECK(lmc_gguf_find_tensor(g, "blk.0.ffn_down_shexp.weight") != NULL);
            CHECK(lmc_gguf_find_tensor(g, "blk.1.ffn_down.weight") != NULL); /* mlp_only_layers [1]: dense */
        }
        lmc_config_free(&o);
        lmc_config_free(&s);
        lmc_gguf_close(g);
    }
}

/* Q8_0 experts: per-expert views point into the stacked tensor (no copy) and dequantize to the
 * fixture's values within Q8_0's rounding; the router and the shared expert's gate stay F32. */
static void test_q8_0_views(void) {
    char out[300], dir[600];
    snprintf(out, sizeof out, "%s/q8.gguf", tmpdir);
    snprintf(dir, sizeof dir, "%s/qwen2_moe", fixtures_root());
    lmc_status st = convert("qwen2_moe", out, LMC_DTYPE_Q8_0);
    CHECK_MSG(st == LMC_OK, "convert q8_0: %s", lmc_last_error());
    if (st < 0) return;
    lmc_gguf *g = NULL;
    lmc_gguf_hf_view *v = NULL;
    lmc_st_set *set = NULL;
    CHECK(lmc_gguf_open(out, &g) == LMC_OK);
    CHECK(g && lmc_gguf_hf_view_open(g, &v) == LMC_OK);
    CHECK(lmc_st_open(dir, &set) == LMC_OK);
    if (!v || !set) goto done;
    const lmc_gguf_tensor *stk = lmc_gguf_find_tensor(g, "blk.0.ffn_up_exps.weight");
    CHECK(stk && stk->type == LMC_GGML_Q8_0);
    const lmc_gguf_tensor *router = lmc_gguf_find_tensor(g, "blk.0.ffn_gate_inp.weight");
    CHECK(router && router->type == LMC_GGML_F32);
    const lmc_gguf_tensor *shg = lmc_gguf_find_tensor(g, "blk.0.ffn_gate_inp_shexp.weight");
    CHECK(shg && shg->type == LMC_GGML_F32);
    int n_checked = 0;
    for (int i = 0; i < lmc_st_count(set); i++) {
        const lmc_st_tensor *t = lmc_st_at(set, i);
        if (!strstr(t->name, ".mlp.experts.")) continue;
        const lmc_gguf_hf_tensor *h = lmc_gguf_hf_view_find(v, t->name);
        CHECK_MSG(h != NULL, "%s missing from the view", t->name);
        if (!h) continue;
        CHECK(h->type == LMC_GGML_Q8_0 && h->n_dims == 2 && h->shape[0] == t->shape[0] && h->shape[1] == t->shape[1]);
        const char *base = h->gguf->data;
        CHECK_MSG((const char *)h->data >= base && (const char *)h->data + h->nbytes <= base + h->gguf->nbytes,
                  "%s: view is not inside its stacked tensor", t->name);
        const int64_t rows = t->shape[0], cols = t->shape[1];
        float *want = malloc((size_t)cols * 4), *got = malloc((size_t)cols * 4);
        const size_t qrow = lmc_dtype_row_bytes(LMC_DTYPE_Q8_0, cols);
        double worst = 0;
        for (int64_t r = 0; r < rows; r++) {
            memcpy(want, (const char *)t->data + (size_t)r * cols * 4, (size_t)cols * 4);
            CHECK(lmc_dequantize_row(LMC_DTYPE_Q8_0, (const char *)h->data + (size_t)r * qrow, NULL, got, cols) == LMC_OK);
            for (int64_t b = 0; b < cols; b += 32) {
                double amax = 0;
                for (int64_t j = b; j < b + 32; j++) amax = fmax(amax, fabs(want[j]));
                for (int64_t j = b; j < b + 32; j++) worst = fmax(worst, fabs(want[j] - got[j]) / (amax / 127.0 + 1e-30));
            }
        }
        /* half a step, plus the f16 rounding of the block scale seen by the largest code (127 · 2^-11 steps) */
        CHECK_MSG(worst <= 0.5 + 127.0 / 2048.0, "%s: Q8_0 error %.3g of a step", t->name, worst);
        free(want);
        free(got);
        n_checked++;
    }
    CHECK_EQ_INT(n_checked, 2 * 8 * 3); /* layers 0 and 2: 8 experts x gate/up/down (layer 1 is dense) */
done:
    lmc_st_close(set);
    lmc_gguf_hf_view_close(v);
    lmc_gguf_close(g);
}

/* The models load from the GGUF with their sparse layers bound (logits: tests/cli/gguf_moe.sh). */
static void test_load(void) {
    static const char *const fxs[] = {"qwen3_moe", "mixtral"};
    for (int i = 0; i < 2; i++) {
        char out[300];
        snprintf(out, sizeof out, "%s/%s.gguf", tmpdir, fxs[i]);
        if (access(out, R_OK) != 0) CHECK(convert(fxs[i], out, 0) == LMC_OK);
        lmc_backend *be = NULL;
        lmc_model *m = NULL;
        CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
        lmc_status st = lmc_model_load(out, be, &m);
        CHECK_MSG(st == LMC_OK, "%s: %s", fxs[i], lmc_last_error());
        if (m) {
            CHECK(m->layers[strcmp(fxs[i], "mixtral") == 0 ? 0 : 1].moe != NULL);
            lmc_model_free(m);
        }
        lmc_backend_free(be);
    }
}

/* K-quant experts (rows of 256): a stacked Q4_K tensor's per-expert views are its experts' own
 * blocks, and dequantize to what each expert's rows quantized to on their own. */
static void test_kquant_views(void) {
    enum { IN = 512, OUT = 3, E = 4 };
    const size_t row = lmc_dtype_row_bytes(LMC_DTYPE_Q4_K, IN);
    CHECK(row == 2 * 144);
    uint8_t *stk = malloc(row * OUT * E);
    float *src = malloc(sizeof(float) * IN * OUT * E), *got = malloc(sizeof(float) * IN), embd[IN];
    uint32_t seed = 7;
    for (int i = 0; i < IN * OUT * E; i++) {
        seed = seed * 1664525u + 1013904223u;
        src[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (1.0f + (float)(i / (IN * OUT))); /* experts differ in scale */
    }
    for (int i = 0; i < IN; i++) embd[i] = 0.01f * (float)i;
    for (int r = 0; r < OUT * E; r++) CHECK(lmc_quantize_row(LMC_DTYPE_Q4_K, src + (size_t)r * IN, stk + (size_t)r * row, NULL, IN) == LMC_OK);
    char path[300];
    snprintf(path, sizeof path, "%s/q4k.gguf", tmpdir);
    lmc_gguf_writer *w;
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    CHECK(lmc_gguf_writer_add_str(w, "general.architecture", "qwen3moe") == LMC_OK);
    CHECK(lmc_gguf_writer_add_u32(w, "qwen3moe.expert_count", E) == LMC_OK);
    const int64_t ne_e[2] = {IN, 1}, ne[3] = {IN, OUT, E};
    CHECK(lmc_gguf_writer_add_tensor(w, "token_embd.weight", LMC_GGML_F32, 2, ne_e, embd) == LMC_OK);
    CHECK(lmc_gguf_writer_add_tensor(w, "blk.0.ffn_up_exps.weight", LMC_GGML_Q4_K, 3, ne, stk) == LMC_OK);
    CHECK(lmc_gguf_writer_write(w, path) == LMC_OK);
    lmc_gguf_writer_free(w);
    lmc_gguf *g = NULL;
    lmc_gguf_hf_view *v = NULL;
    CHECK(lmc_gguf_open(path, &g) == LMC_OK);
    CHECK_MSG(g && lmc_gguf_hf_view_open(g, &v) == LMC_OK, "%s", lmc_last_error());
    for (int e = 0; v && e < E; e++) {
        char name[96];
        snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.up_proj.weight", e);
        const lmc_gguf_hf_tensor *h = lmc_gguf_hf_view_find(v, name);
        CHECK_MSG(h != NULL, "%s missing", name);
        if (!h) continue;
        CHECK(h->type == LMC_GGML_Q4_K && h->shape[0] == OUT && h->shape[1] == IN && h->nbytes == row * OUT);
        CHECK(memcmp(h->data, stk + (size_t)e * OUT * row, row * OUT) == 0);
        double worst = 0, amax = 0;
        for (int r = 0; r < OUT; r++) {
            CHECK(lmc_dequantize_row(LMC_DTYPE_Q4_K, (const uint8_t *)h->data + (size_t)r * row, NULL, got, IN) == LMC_OK);
            const float *want = src + ((size_t)e * OUT + r) * IN;
            for (int i = 0; i < IN; i++) {
                worst = fmax(worst, fabs(got[i] - want[i]));
                amax = fmax(amax, fabs(want[i]));
            }
        }
        /* 4-bit codes over each 32-value sub-block's range (min and scale): within a code step of the range */
        CHECK_MSG(worst <= 2 * amax / 15.0, "expert %d: Q4_K error %g of max %g", e, worst, amax);
    }
    lmc_gguf_hf_view_close(v);
    lmc_gguf_close(g);
    free(stk);
    free(src);
    free(got);
}

/* ---- malformed files: a converted file rewritten with one change -------------------------------- */

typedef struct edit {
    const char *key;          /* a u32 key to set (NULL: none) */
    uint32_t value;
    const char *drop_key;     /* a key to leave out */
    const char *drop_tensor;  /* a tensor to leave out */
    const char *regroup;      /* a stacked tensor to relabel as [in, out·2, E/2] (same bytes) */
    const char *flip;         /* a 2-D tensor to relabel as [ne0·2, ne1/2] (same bytes) */
} edit;

static lmc_status rewrite(const char *src, const char *dst, const edit *e) {
    lmc_gguf *g;
    LMC_TRY(lmc_gguf_open(src, &g));
    lmc_gguf_writer *w;
    lmc_status st = lmc_gguf_writer_init(&w);
    int key_done = 0;
    for (int64_t i = 0; st >= 0 && i < lmc_gguf_n_kv(g); i++) {
        const char *k = lmc_gguf_kv_key(g, i);
        if (e->drop_key && strcmp(k, e->drop_key) == 0) continue;
        if (e->key && strcmp(k, e->key) == 0) {
            st = lmc_gguf_writer_add_u32(w, k, e->value);
            key_done = 1;
            continue;
        }
        int64_t iv;
        double dv;
        const char *sv;
        size_t len;
        int bv;
        switch (lmc_gguf_kv_type(g, i)) {
        case LMC_GGUF_STRING: st = lmc_gguf_kv_str(g, i, &sv, &len); if (st >= 0) st = lmc_gguf_writer_add_strn(w, k, sv, len); break;
        case LMC_GGUF_F32: case LMC_GGUF_F64: st = lmc_gguf_kv_float(g, i, &dv); if (st >= 0) st = lmc_gguf_writer_add_f32(w, k, (float)dv); break;
        case LMC_GGUF_BOOL: st = lmc_gguf_kv_bool(g, i, &bv); if (st >= 0) st = lmc_gguf_writer_add_bool(w, k, bv); break;
        case LMC_GGUF_ARRAY: break;
        default: st = lmc_gguf_kv_int(g, i, &iv); if (st >= 0) st = lmc_gguf_writer_add_u32(w, k, (uint32_t)iv); break;
        }
    }
    if (st >= 0 && e->key && !key_done) st = lmc_gguf_writer_add_u32(w, e->key, e->value);
    for (int64_t i = 0; st >= 0 && i < lmc_gguf_n_tensors(g); i++) {
        const lmc_gguf_tensor *t = lmc_gguf_tensor_at(g, i);
        if (e->drop_tensor && strcmp(t->name, e->drop_tensor) == 0) continue;
        int64_t ne[LMC_GGUF_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        if (e->regroup && strcmp(t->name, e->regroup) == 0) {
            ne[1] *= 2;
            ne[2] /= 2;
        }
        if (e->flip && strcmp(t->name, e->flip) == 0) {
            ne[0] *= 2;
            ne[1] /= 2;
        }
        st = lmc_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data);
    }
    if (st >= 0) st = lmc_gguf_writer_write(w, dst);
    lmc_gguf_writer_free(w);
    lmc_gguf_close(g);
    return st;
}

/* Open the view, build the config and load the model from path; the first failure's status. */
static lmc_status read_all(const char *path) {
    lmc_gguf *g;
    LMC_TRY(lmc_gguf_open(path, &g));
    lmc_gguf_hf_view *v = NULL;
    cJSON *cfg = NULL;
    lmc_status st = lmc_gguf_hf_view_open(g, &v);
    if (st >= 0) st = lmc_gguf_arch_config(g, &cfg);
    cJSON_Delete(cfg);
    lmc_gguf_hf_view_close(v);
    lmc_gguf_close(g);
    if (st < 0) return st;
    lmc_backend *be;
    LMC_TRY(lmc_backend_cpu_init(&be, 1, 0));
    lmc_model *m = NULL;
    st = lmc_model_load(path, be, &m);
    if (m) lmc_model_free(m);
    lmc_backend_free(be);
    return st;
}

static void test_malformed(void) {
    char good[300], q3[300], bad[300];
    snprintf(good, sizeof good, "%s/mixtral.gguf", tmpdir);
    snprintf(q3, sizeof q3, "%s/qwen3_moe.gguf", tmpdir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", tmpdir);
    if (access(good, R_OK) != 0) CHECK(convert("mixtral", good, 0) == LMC_OK);
    if (access(q3, R_OK) != 0) CHECK(convert("qwen3_moe", q3, 0) == LMC_OK);
    CHECK_MSG(read_all(good) == LMC_OK, "the unedited file: %s", lmc_last_error());
    static const struct { int qwen; edit e; const char *msg; } cases[] = {
        {0, {.key = "llama.expert_count", .value = 4}, "expert_count"},          /* tensors hold 8 */
        {1, {.key = "qwen3moe.expert_count", .value = 16}, "expert_count"},
        {0, {.key = "llama.expert_used_count", .value = 9}, "expert_used_count"}, /* > 8 */
        {1, {.key = "qwen3moe.expert_used_count", .value = 0}, "expert_used_count"},
        {0, {.drop_tensor = "blk.1.ffn_down_exps.weight"}, "experts.0.w2"},
        {1, {.drop_tensor = "blk.1.ffn_gate_exps.weight"}, "experts.0.gate_proj"},
        {1, {.drop_key = "qwen3moe.expert_count"}, "expert_count"},
        {0, {.drop_key = "llama.expert_count"}, "expert_count"},             /* stacked experts, no count */
        {1, {.regroup = "blk.2.ffn_up_exps.weight"}, "ffn_up_exps"},           /* 4 experts of 2·I rows */
        {1, {.drop_key = "qwen3moe.expert_feed_forward_length"}, "expert_feed_forward_length"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lmc_status st = rewrite(cases[i].qwen ? q3 : good, bad, &cases[i].e);
        CHECK_MSG(st == LMC_OK, "case %zu: rewrite: %s", i, lmc_last_error());
        if (st < 0) continue;
        lmc_clear_error();
        st = read_all(bad);
        CHECK_MSG(st < 0, "case %zu: a malformed file was accepted", i);
        fprintf(stderr, "  refused: %s\n", lmc_last_error());
        CHECK_MSG(strstr(lmc_last_error(), cases[i].msg) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, lmc_last_error(),
                  cases[i].msg);
    }
}

/* gpt-oss (llama.cpp's gpt-oss layout): HF's input-major gate_up_proj [E, D, 2I] with gate at even and up
 * at odd columns becomes ffn_gate_exps / ffn_up_exps ne [D, I, E] (bytes compared here, independently of
 * the model's forward), biases [I, E] in F32, sinks and post-attention norm under llama.cpp's names; the
 * config comes back (experts, expert size, sliding window on even layers, yarn unrounded, GLU clamp);
 * files without sinks, with a bias of the wrong shape or without an expert bias are refused by name. */
static void test_gptoss(void) {
    char out[300], dir[600], bad[300];
    snprintf(out, sizeof out, "%s/gpt_oss.gguf", tmpdir);
    snprintf(bad, sizeof bad, "%s/bad_gptoss.gguf", tmpdir);
    snprintf(dir, sizeof dir, "%s/gpt_oss", fixtures_root());
    lmc_status st = convert("gpt_oss", out, 0);
    CHECK_MSG(st == LMC_OK, "convert: %s", lmc_last_error());
    if (st < 0) return;
    lmc_config o, s;
    CHECK_MSG(checkpoint_config(dir, &o) == LMC_OK, "%s", lmc_last_error());
    CHECK_MSG(checkpoint_config(out, &s) == LMC_OK, "%s", lmc_last_error());
    CHECK(strcmp(s.model_type, "gpt_oss") == 0);
    CHECK_EQ_INT(o.n_experts, s.n_experts);
    CHECK_EQ_INT(o.n_experts_used, s.n_experts_used);
    CHECK_EQ_INT(o.intermediate_size, s.intermediate_size);
    CHECK_EQ_INT(o.sliding_window, s.sliding_window);
    for (int l = 0; l < o.n_layers; l++) CHECK_EQ_INT(o.layer_sliding[l], s.layer_sliding[l]);
    CHECK_EQ_INT(o.rope.type, s.rope.type);
    CHECK(o.rope.factor == s.rope.factor && o.rope.theta == s.rope.theta && o.rope.beta_fast == s.rope.beta_fast &&
          o.rope.beta_slow == s.rope.beta_slow);
    CHECK_EQ_INT(o.rope.original_max_position_embeddings, s.rope.original_max_position_embeddings);
    CHECK_EQ_INT(o.rope.truncate, s.rope.truncate);
    CHECK_EQ_INT(s.rope.truncate, 0);
    double lo = 0, ls = 0;
    CHECK(lmc_config_double(&o, "swiglu_limit", &lo) > 0 && lmc_config_double(&s, "swiglu_limit", &ls) > 0 && lo == ls);
    lmc_config_free(&o);
    lmc_config_free(&s);

    /* names both ways */
    const lmc_gguf_arch_info *a = lmc_gguf_arch_find("gpt-oss");
    char nm[128];
    CHECK(a && lmc_gguf_arch_hf_name(a, "blk.3.attn_sinks.weight", nm, sizeof nm) == LMC_OK &&
          strcmp(nm, "model.layers.3.self_attn.sinks") == 0);
    CHECK(a && lmc_gguf_arch_gguf_name(a, "model.layers.3.self_attn.sinks", nm, sizeof nm) == LMC_OK &&
          strcmp(nm, "blk.3.attn_sinks.weight") == 0);
    CHECK(a && lmc_gguf_arch_gguf_name(a, "model.layers.1.post_attention_layernorm.weight", nm, sizeof nm) == LMC_OK &&
          strcmp(nm, "blk.1.post_attention_norm.weight") == 0);
    CHECK(a && lmc_gguf_arch_hf_name(a, "blk.1.ffn_gate_inp.bias", nm, sizeof nm) == LMC_OK &&
          strcmp(nm, "model.layers.1.mlp.router.bias") == 0);

    /* the split, element by element against the safetensors bytes */
    lmc_gguf *g = NULL;
    lmc_st_set *set = NULL;
    CHECK(lmc_gguf_open(out, &g) == LMC_OK);
    CHECK(lmc_st_open(dir, &set) == LMC_OK);
    if (g && set) {
        const lmc_st_tensor *gu = lmc_st_find(set, "model.layers.1.mlp.experts.gate_up_proj");
        const lmc_st_tensor *gub = lmc_st_find(set, "model.layers.1.mlp.experts.gate_up_proj_bias");
        const lmc_st_tensor *dn = lmc_st_find(set, "model.layers.1.mlp.experts.down_proj");
        const lmc_gguf_tensor *tg = lmc_gguf_find_tensor(g, "blk.1.ffn_gate_exps.weight");
        const lmc_gguf_tensor *tu = lmc_gguf_find_tensor(g, "blk.1.ffn_up_exps.weight");
        const lmc_gguf_tensor *td = lmc_gguf_find_tensor(g, "blk.1.ffn_down_exps.weight");
        const lmc_gguf_tensor *tb = lmc_gguf_find_tensor(g, "blk.1.ffn_up_exps.bias");
        CHECK(gu && gub && dn && tg && tu && td && tb);
        if (gu && gub && dn && tg && tu && td && tb) {
            const int64_t E = gu->shape[0], D = gu->shape[1], I2 = gu->shape[2], I = I2 / 2;
            CHECK(gu->dtype == LMC_DTYPE_BF16 && tg->type == LMC_GGML_BF16 && tb->type == LMC_GGML_F32);
            CHECK(tg->n_dims == 3 && tg->ne[0] == D && tg->ne[1] == I && tg->ne[2] == E);
            CHECK(td->n_dims == 3 && td->ne[0] == I && td->ne[1] == D && td->ne[2] == E);
            CHECK(tb->n_dims == 2 && tb->ne[0] == I && tb->ne[1] == E);
            const uint16_t *src = gu->data, *gs = tg->data, *us = tu->data, *ds = td->data, *dsrc = dn->data, *bsrc = gub->data;
            const float *bu = tb->data;
            int64_t mism = 0;
            for (int64_t e = 0; e < E; e++)
                for (int64_t i = 0; i < D; i++)
                    for (int64_t o2 = 0; o2 < I; o2++) {
                        const uint16_t hg = src[(e * D + i) * I2 + 2 * o2], hu = src[(e * D + i) * I2 + 2 * o2 + 1];
                        mism += gs[(e * I + o2) * D + i] != hg || us[(e * I + o2) * D + i] != hu;
                        mism += ds[(e * D + i) * I + o2] != dsrc[(e * I + o2) * D + i];
                    }
            for (int64_t e = 0; e < E; e++)
                for (int64_t o2 = 0; o2 < I; o2++) {
                    float want;
                    lmc_to_f32(LMC_DTYPE_BF16, &bsrc[e * I2 + 2 * o2 + 1], &want, 1);
                    mism += bu[e * I + o2] != want;
                }
            CHECK_MSG(mism == 0, "%lld elements of layer 1's experts are not where llama.cpp puts them", (long long)mism);
        }
    }
    lmc_st_close(set);
    lmc_gguf_close(g);

    CHECK_MSG(read_all(out) == LMC_OK, "the unedited file: %s", lmc_last_error());
    /* feed_forward_length is redundant with expert_feed_forward_length here: a file without it loads */
    CHECK(rewrite(out, bad, &(edit){.drop_key = "gpt-oss.feed_forward_length"}) == LMC_OK);
    CHECK_MSG(read_all(bad) == LMC_OK, "without feed_forward_length: %s", lmc_last_error());
    static const struct { edit e; const char *msg; } cases[] = {
        {{.drop_tensor = "blk.1.attn_sinks.weight"}, "self_attn.sinks"},
        {{.flip = "blk.0.ffn_gate_exps.bias"}, "gate_proj.bias"},
        {{.drop_tensor = "blk.1.ffn_up_exps.bias"}, "up_proj.bias"},
        {{.drop_tensor = "blk.0.ffn_gate_inp.bias"}, "router.bias"},
        {{.drop_key = "gpt-oss.attention.sliding_window"}, "sliding_window"},
        {{.drop_key = "gpt-oss.expert_feed_forward_length"}, "expert_feed_forward_length"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st = rewrite(out, bad, &cases[i].e);
        CHECK_MSG(st == LMC_OK, "gpt-oss case %zu: rewrite: %s", i, lmc_last_error());
        if (st < 0) continue;
        lmc_clear_error();
        st = read_all(bad);
        CHECK_MSG(st < 0, "gpt-oss case %zu: a malformed file was accepted", i);
        fprintf(stderr, "  refused: %s\n", lmc_last_error());
        CHECK_MSG(strstr(lmc_last_error(), cases[i].msg) != NULL, "gpt-oss case %zu: \"%s\" lacks \"%s\"", i, lmc_last_error(),
                  cases[i].msg);
    }
}

/* A Hugging Face MXFP4 gpt-oss checkpoint (quant_method mxfp4: `<name>_blocks` U8 [E, out, in/32, 16] and
 * `<name>_scales` U8 [E, out, in/32], made here from the fixture's experts) converts without
 * requantizing: every row of the GGUF's MXFP4 ffn_{gate,up,down}_exps dequantizes to exactly the
 * checkpoint's row (gate: even rows of gate_up, up: odd ones), and the two files give the same logits
 * on the reference backend (exact f32 activations). */
static void test_gptoss_mxfp4(void) {
    char src[600], mx[300], out[300], path[400], cmd[1400];
    snprintf(src, sizeof src, "%s/gpt_oss", fixtures_root());
    snprintf(mx, sizeof mx, "%s/gptoss_mx", tmpdir);
    snprintf(out, sizeof out, "%s/gptoss_mx.gguf", tmpdir);
    CHECK(mkdir(mx, 0700) == 0);
    lmc_st_set *set = NULL;
    if (lmc_st_open(src, &set) != LMC_OK) { CHECK_MSG(0, "%s", lmc_last_error()); return; }
    const int n = lmc_st_count(set);
    lmc_st_write_tensor *tw = calloc((size_t)n + 8, sizeof *tw);
    void *bufs[16];
    char names[16][128];
    int nw = 0, nb = 0, nn = 0;
    for (int i = 0; i < n && tw; i++) {
        const lmc_st_tensor *x = lmc_st_at(set, i);
        const size_t len = strlen(x->name);
        const int gu = len > 12 && !strcmp(x->name + len - 12, "gate_up_proj"), dn = len > 9 && !strcmp(x->name + len - 9, "down_proj");
        if (!gu && !dn) {
            tw[nw] = (lmc_st_write_tensor){.name = x->name, .dtype = x->dtype, .n_dims = x->n_dims, .data = x->data};
            for (int d = 0; d < x->n_dims; d++) tw[nw].shape[d] = x->shape[d];
            nw++;
            continue;
        }
        if (x->n_dims != 3 || x->dtype != LMC_DTYPE_BF16 || nb + 2 > 16) { CHECK(0); continue; }
        const int64_t E = x->shape[0], in = x->shape[1], o_n = x->shape[2];
        uint8_t *blk = malloc((size_t)(E * o_n * in / 2)), *sc = malloc((size_t)(E * o_n * in / 32));
        float *row = malloc(sizeof(float) * (size_t)in);
        for (int64_t e = 0; e < E; e++)
            for (int64_t o = 0; o < o_n; o++) {
                for (int64_t k = 0; k < in; k++) lmc_to_f32(LMC_DTYPE_BF16, (const uint16_t *)x->data + (e * in + k) * o_n + o, &row[k], 1);
                const size_t r = (size_t)(e * o_n + o);
                lmc_mlx_row aux = {.group_size = 32, .scale_type = LMC_DTYPE_U8, .scales = sc + r * (size_t)(in / 32)};
                CHECK(lmc_quantize_row(LMC_DTYPE_MXFP4_MLX, row, blk + r * (size_t)(in / 2), &aux, in) == LMC_OK);
            }
        free(row);
        snprintf(names[nn], sizeof names[0], "%s_blocks", x->name);
        tw[nw++] = (lmc_st_write_tensor){.name = names[nn++], .dtype = LMC_DTYPE_U8, .n_dims = 4, .shape = {E, o_n, in / 32, 16}, .data = blk};
        snprintf(names[nn], sizeof names[0], "%s_scales", x->name);
        tw[nw++] = (lmc_st_write_tensor){.name = names[nn++], .dtype = LMC_DTYPE_U8, .n_dims = 3, .shape = {E, o_n, in / 32}, .data = sc};
        bufs[nb++] = blk;
        bufs[nb++] = sc;
    }
    CHECK_EQ_INT(nn, 8);
    snprintf(path, sizeof path, "%s/model.safetensors", mx);
    lmc_st_sort_for_alignment(tw, nw);
    CHECK(lmc_st_write(path, tw, nw, NULL, 0) == LMC_OK);
    snprintf(cmd, sizeof cmd, "sed 's/^{/{\"quantization_config\": {\"quant_method\": \"mxfp4\"},/' %s/config.json > %s/config.json",
             src, mx);
    CHECK(system(cmd) == 0);
    lmc_gguf_convert_params p = {.skip_tokenizer = 1};
    lmc_status st = lmc_gguf_convert_hf(mx, out, &p);
    CHECK_MSG(st == LMC_OK, "convert: %s", lmc_last_error());

    /* rows: GGUF layer 1 expert rows against the checkpoint's */
    lmc_st_set *ms = NULL;
    lmc_gguf *g = NULL;
    if (st == LMC_OK && lmc_st_open(mx, &ms) == LMC_OK && lmc_gguf_open(out, &g) == LMC_OK) {
        static const char *const gg[3] = {"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight"};
        int64_t bad = 0, rows = 0;
        for (int k = 0; k < 3; k++) {
            const char *hn = k == 2 ? "model.layers.1.mlp.experts.down_proj" : "model.layers.1.mlp.experts.gate_up_proj";
            char bn[160], sn[160];
            snprintf(bn, sizeof bn, "%s_blocks", hn);
            snprintf(sn, sizeof sn, "%s_scales", hn);
            const lmc_st_tensor *hb = lmc_st_find(ms, bn), *hs = lmc_st_find(ms, sn);
            const lmc_gguf_tensor *t = lmc_gguf_find_tensor(g, gg[k]);
            CHECK(hb && hs && t && t->type == LMC_GGML_MXFP4 && t->n_dims == 3);
            if (!hb || !hs || !t || t->type != LMC_GGML_MXFP4) continue;
            const int64_t in = t->ne[0], R = t->ne[1], E = t->ne[2], step = k == 2 ? 1 : 2, off = k == 1;
            float a[256], b[256];
            for (int64_t e = 0; e < E && in <= 256; e++)
                for (int64_t r = 0; r < R; r++) {
                    const size_t hr = (size_t)(e * R * step + r * step + off);
                    lmc_mlx_row aux = {.group_size = 32, .scale_type = LMC_DTYPE_U8, .scales = (uint8_t *)hs->data + hr * (size_t)(in / 32)};
                    CHECK(lmc_dequantize_row(LMC_DTYPE_MXFP4_MLX, (const uint8_t *)hb->data + hr * (size_t)(in / 2), &aux, a, in) == LMC_OK);
                    CHECK(lmc_dequantize_row(LMC_DTYPE_MXFP4, (const uint8_t *)t->data + (size_t)(e * R + r) * (size_t)(in / 32) * 17, NULL, b, in) == LMC_OK);
                    bad += memcmp(a, b, sizeof(float) * (size_t)in) != 0;
                    rows++;
                }
        }
        CHECK_MSG(bad == 0 && rows == 2 * 4 * 32 + 4 * 64, "%lld of %lld MXFP4 rows differ after the repack", (long long)bad,
                  (long long)rows);
    } else {
        CHECK_MSG(0, "reopen: %s", lmc_last_error());
    }
    lmc_gguf_close(g);
    lmc_st_close(ms);

    /* logits: the checkpoint and its GGUF on the reference backend */
    lmc_backend *be;
    if (st == LMC_OK && lmc_backend_cpu_init(&be, 1, 1) == LMC_OK) {
        const int32_t ids[10] = {5, 17, 99, 3, 250, 42, 42, 7, 128, 64};
        int V1 = 0, V2 = 0;
        float *l1 = prompt_logits_of(be, mx, ids, 10, &V1, NULL, NULL), *l2 = prompt_logits_of(be, out, ids, 10, &V2, NULL, NULL);
        CHECK(l1 && l2 && V1 == V2);
        if (l1 && l2 && V1 == V2) {
            double e = 0, scale = 0;
            for (int i = 0; i < 10 * V1; i++) {
                e = fmax(e, fabs(l1[i] - l2[i]));
                scale = fmax(scale, fabs(l1[i]));
            }
            fprintf(stderr, "  gpt_oss HF mxfp4 vs its GGUF (reference backend): max|d| %.3g of max %.3g\n", e, scale);
            CHECK_MSG(e <= 1e-5 * scale, "logits differ by %.3g", e);
        }
        free(l1);
        free(l2);
        lmc_backend_free(be);
    }
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(tw);
    lmc_st_close(set);
}

/* The converter refuses MoE configs it cannot write. */
static void test_convert_refusals(void) {
    char cdir[300], cpath[400], out[300];
    snprintf(cdir, sizeof cdir, "%s/cfg", tmpdir);
    snprintf(cpath, sizeof cpath, "%s/config.json", cdir);
    snprintf(out, sizeof out, "%s/refused.gguf", tmpdir);
    CHECK(mkdir(cdir, 0700) == 0);
    FILE *f = fopen(cpath, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
          "\"intermediate_size\": 8, \"moe_intermediate_size\": 8, \"rms_norm_eps\": 1e-6, \"num_experts\": 4, "
          "\"num_experts_per_tok\": 5}", f);
    fclose(f);
    CHECK(lmc_gguf_convert_hf(cdir, out, NULL) == LMC_ERR_FORMAT);
    CHECK_MSG(strstr(lmc_last_error(), "num_experts_per_tok") != NULL, "%s", lmc_last_error());
    CHECK(access(out, F_OK) != 0);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lmc_test_gguf_moe_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_config_and_layout);
    RUN(test_q8_0_views);
    RUN(test_load);
    RUN(test_kquant_views);
    RUN(test_malformed);
    RUN(test_gptoss);
    RUN(test_gptoss_mxfp4);
    RUN(test_convert_refusals);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_END();
}
