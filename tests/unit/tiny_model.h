/* tiny_model.h — writes small random llama-family checkpoints for tests.
 *
 * tiny_model_write(dir, opts) creates dir/config.json and dir/model.safetensors
 * with seeded random weights (N(0, 1/fan_in)-like spread), so tests can load
 * real files through the real loader without any external fixture.
 */
#ifndef LMC_TESTS_TINY_MODEL_H
#define LMC_TESTS_TINY_MODEL_H

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/safetensors.h"

typedef struct tiny_opts {
    const char *model_type;  /* "llama", "qwen2", "qwen3", "mistral" */
    int vocab, hidden, layers, heads, kv_heads, head_dim, inter;
    int tied, attn_bias, bf16;
    const char *extra_tensor; /* name of an unexpected extra tensor, or NULL */
    const char *skip_tensor;  /* name of a tensor to leave out, or NULL */
    unsigned seed;
    int max_pos;              /* max_position_embeddings (0: 128) */
    int window;               /* sliding_window (0: none) */
} tiny_opts;

static inline tiny_opts tiny_default(void) {
    tiny_opts o = {"llama", 96, 32, 2, 4, 2, 8, 48, 0, 0, 0, NULL, NULL, 1, 0, 0};
    return o;
}

static float tiny_rand(unsigned *s) { /* roughly N(0,1): sum of uniforms */
    float a = 0;
    for (int i = 0; i < 4; i++) {
        *s = *s * 1103515245u + 12345u;
        a += (float)((*s >> 8) & 0xffff) / 65535.0f - 0.5f;
    }
    return a * 1.7320508f;
}

typedef struct tiny_buf { lmc_st_write_tensor t[1024]; void *mem[1024]; int n; } tiny_buf;

static void tiny_add(tiny_buf *b, const tiny_opts *o, const char *name, int64_t d0, int64_t d1, float scale,
                     float offset, unsigned *seed) {
    if (o->skip_tensor && strcmp(o->skip_tensor, name) == 0) return;
    int64_t n = d0 * (d1 ? d1 : 1);
    lmc_st_write_tensor *t = &b->t[b->n];
    t->name = strdup(name);
    t->dtype = o->bf16 ? LMC_DTYPE_BF16 : LMC_DTYPE_F32;
    t->n_dims = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    void *mem = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        float v = offset + scale * tiny_rand(seed);
        if (o->bf16) ((uint16_t *)mem)[i] = lmc_f32_to_bf16(v);
        else ((float *)mem)[i] = v;
    }
    t->data = mem;
    b->mem[b->n++] = mem;
}

static int tiny_model_write(const char *dir, const tiny_opts *o) {
    char path[1024], name[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "{\"model_type\": \"%s\", \"architectures\": [\"X\"], \"vocab_size\": %d, \"hidden_size\": %d,"
            " \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d,"
            " \"head_dim\": %d, \"intermediate_size\": %d, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0,"
            " \"max_position_embeddings\": %d, \"tie_word_embeddings\": %s, \"attention_bias\": %s,"
            " \"hidden_act\": \"silu\", \"bos_token_id\": 1, \"eos_token_id\": 2, \"sliding_window\": %d}\n",
            o->model_type, o->vocab, o->hidden, o->layers, o->heads, o->kv_heads, o->head_dim, o->inter,
            o->max_pos ? o->max_pos : 128, o->tied ? "true" : "false", o->attn_bias ? "true" : "false", o->window);
    fclose(f);
    static tiny_buf b;
    b.n = 0;
    unsigned seed = o->seed;
    const int D = o->hidden, qd = o->heads * o->head_dim, kvd = o->kv_heads * o->head_dim, I = o->inter;
    int qkv_bias = o->attn_bias || !strcmp(o->model_type, "qwen2");
    tiny_add(&b, o, "model.embed_tokens.weight", o->vocab, D, 1.0f, 0, &seed);
    tiny_add(&b, o, "model.norm.weight", D, 0, 0.1f, 1.0f, &seed);
    if (!o->tied) tiny_add(&b, o, "lm_head.weight", o->vocab, D, 1.0f / sqrtf((float)D), 0, &seed);
    for (int l = 0; l < o->layers; l++) {
#define T(s, d0, d1, sc, off) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), tiny_add(&b, o, name, d0, d1, sc, off, &seed))
        T("input_layernorm.weight", D, 0, 0.1f, 1.0f);
        T("self_attn.q_proj.weight", qd, D, 1.0f / sqrtf((float)D), 0);
        T("self_attn.k_proj.weight", kvd, D, 1.0f / sqrtf((float)D), 0);
        T("self_attn.v_proj.weight", kvd, D, 1.0f / sqrtf((float)D), 0);
        T("self_attn.o_proj.weight", D, qd, 1.0f / sqrtf((float)qd), 0);
        if (qkv_bias) {
            T("self_attn.q_proj.bias", qd, 0, 0.1f, 0);
            T("self_attn.k_proj.bias", kvd, 0, 0.1f, 0);
            T("self_attn.v_proj.bias", kvd, 0, 0.1f, 0);
        }
        if (o->attn_bias && strcmp(o->model_type, "qwen2")) T("self_attn.o_proj.bias", D, 0, 0.1f, 0);
        if (!strcmp(o->model_type, "qwen3")) {
            T("self_attn.q_norm.weight", o->head_dim, 0, 0.1f, 1.0f);
            T("self_attn.k_norm.weight", o->head_dim, 0, 0.1f, 1.0f);
        }
        T("post_attention_layernorm.weight", D, 0, 0.1f, 1.0f);
        T("mlp.gate_proj.weight", I, D, 1.0f / sqrtf((float)D), 0);
        T("mlp.up_proj.weight", I, D, 1.0f / sqrtf((float)D), 0);
        T("mlp.down_proj.weight", D, I, 1.0f / sqrtf((float)I), 0);
#undef T
    }
    if (o->extra_tensor) tiny_add(&b, o, o->extra_tensor, 4, 0, 1.0f, 0, &seed);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    lmc_status st = lmc_st_write(path, b.t, b.n, NULL, 0);
    for (int i = 0; i < b.n; i++) { free((void *)b.t[i].name); free(b.mem[i]); }
    return st < 0 ? -1 : 0;
}

#endif
