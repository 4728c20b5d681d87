/* bench_cuda.c — speed of the dense forward on the CUDA backend next to the
 * GPU's own measured ceilings.
 *
 *   build-cuda/bench/bench_cuda [--shape llama8b|qwen05|qwen3moe] [--types bf16,q8_0,q4_0,...] [--gen N]
 *                               [--prefill 512,2048] [--batch 8,32] [--ctx N] [--kernels]
 *
 * Models are synthesized in memory from a shape (random weights, no file):
 * Llama-3.1-8B (hidden 4096, 32 layers, 32/8 heads, intermediate 14336, vocab
 * 128256, untied) or Qwen2.5-0.5B (hidden 896, 24 layers, 14/2 heads,
 * intermediate 4864, vocab 151936, tied, q/k/v biases) or a Qwen3-30B-A3B-like MoE (qwen3moe:
 * hidden 2048, 48 layers, 32/4 heads of 128, 128 experts of intermediate 768, top-8, vocab
 * 151936; its roofline counts the 8 selected experts a token reads, the matmul_id path is
 * chosen by LMC_CUDA_MOE_HOST). A block of random rows
 * is quantized once per matrix shape and tiled; each layer binds its matrices
 * at a different row offset of that host buffer, so every layer gets its own
 * device copy. Measured first: device-to-device copy bandwidth and the
 * cuBLAS bf16 GEMM rate (8192³). Then per type: batch-1 decode tok/s (greedy,
 * logits copied to the host each step) against the roofline bandwidth / bytes
 * of every matrix read once per token; prefill tok/s at each --prefill length
 * against the GEMM roofline (rate / 2·matrix parameters per token; attention
 * not counted); aggregate decode tok/s of --batch sequences (one token each
 * per forward, every row's logits to the host); GPU memory in use against
 * weights + KV cache. The cache holds the longest prefill + gen + 16 slots, or --ctx N
 * if more (lmc's default context is 4096: decode attention's launch depends on the cache's
 * size). --kernels instead times the decode kernels alone: matrix-vector products of the 8B
 * shape's matrices per type (GB/s) and decode attention over ranges of 64 / 1024 / 2048
 * positions in a cache of 2048 slots and 64 / 1024 / 8192 in one of 8192 (the kernel's cluster
 * form; LMC_CUDA_DEC_CLUSTER=0 its split form). Prints markdown tables. A benchmark, not a test.
 * Types: bf16 f16 q8_0 q4_0 q4_k q6_k (GGUF blocks, every matrix one type; the types lmc can
 * quantize to), q5_k (random codes: lmc reads it but does not write it), mxfp4 (ggml's MXFP4 block)
 * and mlx4 mlx8
 * (MLX affine, groups of 64, bf16 scales/biases; their bytes count in the roofline; --kernels
 * skips MLX).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"
#include "gen/context.h"
#include "gen/generate.h"

#ifndef LMC_CUDA
int main(void) {
    fprintf(stderr, "bench_cuda: this build has no CUDA backend (build with `make CUDA=1 BUILD=build-cuda bench`)\n");
    return 1;
}
#else
#include "backend/cuda/cuda_backend.h"

typedef struct shape {
    const char *name, *json;
} shape;

static const shape shapes[] = {
    {"llama8b", "{\"model_type\":\"llama\",\"hidden_size\":4096,\"intermediate_size\":14336,\"num_hidden_layers\":32,"
                "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"vocab_size\":128256,\"rms_norm_eps\":1e-5,"
                "\"rope_theta\":500000.0,\"max_position_embeddings\":131072,\"tie_word_embeddings\":false,"
                "\"hidden_act\":\"silu\"}"},
    {"qwen05", "{\"model_type\":\"qwen2\",\"hidden_size\":896,\"intermediate_size\":4864,\"num_hidden_layers\":24,"
               "\"num_attention_heads\":14,\"num_key_value_heads\":2,\"vocab_size\":151936,\"rms_norm_eps\":1e-6,"
               "\"rope_theta\":1000000.0,\"max_position_embeddings\":32768,\"tie_word_embeddings\":true,"
               "\"hidden_act\":\"silu\"}"},
    {"qwen3moe", "{\"model_type\":\"qwen3_moe\",\"hidden_size\":2048,\"intermediate_size\":6144,\"num_hidden_layers\":48,"
                 "\"num_attention_heads\":32,\"num_key_value_heads\":4,\"head_dim\":128,\"vocab_size\":151936,"
                 "\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0,\"max_position_embeddings\":40960,"
                 "\"tie_word_embeddings\":false,\"hidden_act\":\"silu\",\"num_experts\":128,"
                 "\"num_experts_per_tok\":8,\"moe_intermediate_size\":768,\"norm_topk_prob\":true,"
                 "\"decoder_sparse_step\":1,\"mlp_only_layers\":[]}"},
};

static uint32_t rng = 42;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return ((float)(rng >> 8) / 16777216.0f - 0.5f) * 0.1f;
}

static void die(const char *what) {
    fprintf(stderr, "bench_cuda: %s: %s\n", what, lmc_last_error());
    exit(1);
}

/* Host bytes of a [in, out + extra] matrix of dtype t: 64 random rows quantized, then tiled. */
static void *host_matrix(lmc_dtype t, int64_t in, int64_t rows) {
    const size_t rb = lmc_dtype_row_bytes(t, in);
    char *buf = malloc(rb * (size_t)rows);
    if (!buf) { fprintf(stderr, "bench_cuda: out of host memory\n"); exit(1); }
    float *f = malloc((size_t)in * sizeof *f);
    const int64_t base = rows < 64 ? rows : 64;
    for (int64_t r = 0; r < base; r++) {
        for (int64_t i = 0; i < in; i++) f[i] = frand();
        char *dst = buf + (size_t)r * rb;
        if (t == LMC_DTYPE_BF16) {
            for (int64_t i = 0; i < in; i++) { uint16_t h = lmc_f32_to_bf16(f[i]); memcpy(dst + 2 * i, &h, 2); }
        } else if (t == LMC_DTYPE_F32) {
            memcpy(dst, f, rb);
        } else if (t == LMC_DTYPE_Q5_K) { /* lmc does not quantize to it: random codes, scales d = dmin = 1/64 */
            for (size_t i = 0; i < rb; i++) dst[i] = (char)(rand() & 255);
            const uint16_t d = lmc_f32_to_f16(1.0f / 64);
            for (size_t b = 0; b < rb; b += lmc_dtype_block_bytes(t)) {
                memcpy(dst + b, &d, 2);
                memcpy(dst + b + 2, &d, 2);
            }
        } else if (lmc_quantize_row(t, f, dst, NULL, in) < 0) {
            die("quantize");
        }
    }
    for (int64_t r = base; r < rows; r++) memcpy(buf + (size_t)r * rb, buf + (size_t)(r % base) * rb, rb);
    free(f);
    return buf;
}

typedef struct mat_src {
    void *host;
    int64_t in, out;
    void *sc, *bi; /* MLX: bf16 [rows, in / MLX_GROUP] scales and biases (host), else NULL */
} mat_src;

#define MLX_GROUP 64
static lmc_model *g_synth; /* the model synth_model builds (its mlx_aux holds the MLX side data) */

static lmc_dtype type_of(const char *t) {
    static const struct { const char *name; lmc_dtype t; } tab[] = {
        {"bf16", LMC_DTYPE_BF16}, {"f16", LMC_DTYPE_F16}, {"q8_0", LMC_DTYPE_Q8_0}, {"q4_0", LMC_DTYPE_Q4_0},
        {"q4_k", LMC_DTYPE_Q4_K}, {"q5_k", LMC_DTYPE_Q5_K}, {"q6_k", LMC_DTYPE_Q6_K}, {"mlx4", LMC_DTYPE_MLX4},
        {"mlx8", LMC_DTYPE_MLX8}, {"mxfp4", LMC_DTYPE_MXFP4}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(t, tab[i].name)) return tab[i].t;
    return LMC_DTYPE_END;
}

/* host_matrix for any type: MLX codes with their scales/biases (64 random rows, tiled), or the
 * GGUF/float rows. */
static mat_src host_mat(lmc_dtype t, int64_t in, int64_t rows, int64_t out) {
    mat_src m = {NULL, in, out, NULL, NULL};
    if (!lmc_dtype_is_mlx(t)) {
        m.host = host_matrix(t, in, rows);
        return m;
    }
    const size_t rb = lmc_dtype_row_bytes(t, in), ng = (size_t)(in / MLX_GROUP);
    char *codes = malloc(rb * (size_t)rows);
    uint16_t *sc = malloc(ng * 2 * (size_t)rows), *bi = malloc(ng * 2 * (size_t)rows);
    float *f = malloc((size_t)in * sizeof *f);
    if (!codes || !sc || !bi || !f) { fprintf(stderr, "bench_cuda: out of host memory\n"); exit(1); }
    const int64_t base = rows < 64 ? rows : 64;
    for (int64_t r = 0; r < rows; r++) {
        if (r < base) {
            for (int64_t i = 0; i < in; i++) f[i] = frand();
            lmc_mlx_row a = {MLX_GROUP, LMC_DTYPE_BF16, sc + (size_t)r * ng, bi + (size_t)r * ng};
            if (lmc_quantize_row(t, f, codes + (size_t)r * rb, &a, in) < 0) die("quantize");
        } else {
            memcpy(codes + (size_t)r * rb, codes + (size_t)(r % base) * rb, rb);
            memcpy(sc + (size_t)r * ng, sc + (size_t)(r % base) * ng, ng * 2);
            memcpy(bi + (size_t)r * ng, bi + (size_t)(r % base) * ng, ng * 2);
        }
    }
    free(f);
    m.host = codes;
    m.sc = sc;
    m.bi = bi;
    return m;
}

/* Bind layer `il`'s copy: rows [il, il + out) of the shared host buffer. */
static void bind_mat(lmc_backend *be, lmc_tensor *t, lmc_dtype type, const mat_src *s, int il, double *bytes) {
    *t = lmc_tensor_make(type, s->in, s->out, 1, 1);
    const char *p = (const char *)s->host + (size_t)il * lmc_dtype_row_bytes(type, s->in);
    if (lmc_dtype_is_mlx(type)) { /* side data bound at the same row offset, counted as read */
        lmc_model *m = g_synth;
        if (m->n_mlx_aux >= m->cap_mlx_aux) die("mlx aux table");
        lmc_quant_mlx *q = &m->mlx_aux[m->n_mlx_aux++];
        const int64_t ng = s->in / MLX_GROUP;
        q->group_size = MLX_GROUP;
        q->scales = lmc_tensor_make(LMC_DTYPE_BF16, ng, s->out, 1, 1);
        q->biases = q->scales;
        if (be->i->bind_weight(be, &q->scales, (const uint16_t *)s->sc + (size_t)(il * ng)) < 0 ||
            be->i->bind_weight(be, &q->biases, (const uint16_t *)s->bi + (size_t)(il * ng)) < 0)
            die("bind");
        t->aux = q;
        *bytes += 2.0 * (double)lmc_tensor_nbytes(&q->scales);
    }
    if (be->i->bind_weight(be, t, p) < 0) die("bind");
    *bytes += (double)lmc_tensor_nbytes(t);
}

static lmc_model *synth_model(lmc_backend *be, const shape *sh, lmc_dtype type, double *mat_bytes,
                              double *mat_params) {
    lmc_model *m = calloc(1, sizeof *m);
    m->be = be;
    g_synth = m;
    cJSON *raw = cJSON_Parse(sh->json);
    if (!raw || lmc_config_from_json(raw, NULL, &m->cfg) < 0) die("config");
    if (lmc_profile_resolve(&m->cfg, &m->profile) < 0) die("profile");
    if (lmc_act_from_name(m->cfg.hidden_act, &m->act) < 0) die("act");
    if (lmc_rope_build(&m->cfg.rope, m->cfg.head_dim, m->cfg.max_position_embeddings, &m->rope[0]) < 0 ||
        lmc_rope_build(&m->cfg.rope_local, m->cfg.head_dim, m->cfg.max_position_embeddings, &m->rope[1]) < 0)
        die("rope");
    m->embed_scale = (float)m->cfg.embed_mult;
    const lmc_config *c = &m->cfg;
    const int L = c->n_layers;
    const int64_t D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
    const int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    /* one host buffer per matrix shape, extra rows for the per-layer offsets (no two bindings share one) */
    m->cap_mlx_aux = 7 * L + 2;
    m->mlx_aux = calloc((size_t)m->cap_mlx_aux, sizeof *m->mlx_aux);
    mat_src q = host_mat(type, D, qd + L, qd), kv = host_mat(type, D, kvd + 2 * L, kvd);
    mat_src o = host_mat(type, qd, D + L, D), gu = host_mat(type, D, I + 2 * L, I);
    mat_src dn = host_mat(type, I, D + L, D), emb = host_mat(type, D, V + 1, V);
    float *ones = malloc((size_t)(I > D ? I : D) * sizeof(float) * 4);
    for (int64_t i = 0; i < (I > D ? I : D) * 4; i++) ones[i] = 1.0f + frand();
    mat_src nrm = {ones, D, 1, NULL, NULL}, bias_q = {ones, qd, 1, NULL, NULL}, bias_kv = {ones, kvd, 1, NULL, NULL};
    double bytes = 0, dummy = 0;
    m->layers = calloc((size_t)L, sizeof *m->layers);
    /* MoE: per layer a router [D, E] and E experts of [D, Ie], [D, Ie], [Ie, D], each bound at its
     * own row offset (every expert its own device copy); a token reads k of them */
    const int E = c->n_experts, K = c->n_experts_used;
    const int64_t Ie = c->moe_intermediate_size;
    mat_src rt = {0}, egu = {0}, edn = {0};
    double expert_bytes = 0;
    if (E) {
        m->moe_layers = calloc((size_t)L, sizeof *m->moe_layers);
        m->moe_views = calloc((size_t)L * 3 * (size_t)E, sizeof *m->moe_views);
        rt = host_mat(type, D, E + L, E);
        egu = host_mat(type, D, Ie + 2 * (int64_t)L * E, Ie);
        edn = host_mat(type, Ie, D + (int64_t)L * E, D);
    }
    const int attn_bias = !strcmp(sh->name, "qwen05");
    for (int il = 0; il < L; il++) {
        lmc_layer *ly = &m->layers[il];
        bind_mat(be, &ly->wq, type, &q, il, &bytes);
        bind_mat(be, &ly->wk, type, &kv, il, &bytes);
        bind_mat(be, &ly->wv, type, &kv, L + il, &bytes);
        bind_mat(be, &ly->wo, type, &o, il, &bytes);
        if (E) {
            lmc_moe_layer *M = &m->moe_layers[il];
            lmc_tensor *views = m->moe_views + (size_t)il * 3 * (size_t)E;
            M->gate = views;
            M->up = views + E;
            M->down = views + 2 * E;
            bind_mat(be, &M->router, type, &rt, il, &bytes);
            for (int e = 0; e < E; e++) {
                bind_mat(be, &M->gate[e], type, &egu, il * E + e, &expert_bytes);
                bind_mat(be, &M->up[e], type, &egu, (L + il) * E + e, &expert_bytes);
                bind_mat(be, &M->down[e], type, &edn, il * E + e, &expert_bytes);
            }
            ly->moe = M;
            bind_mat(be, &ly->q_norm, LMC_DTYPE_F32, &nrm, 3, &dummy);
            bind_mat(be, &ly->k_norm, LMC_DTYPE_F32, &nrm, 4, &dummy);
            ly->q_norm = lmc_tensor_reshape(&ly->q_norm, c->head_dim, 1, 1, 1);
            ly->k_norm = lmc_tensor_reshape(&ly->k_norm, c->head_dim, 1, 1, 1);
        } else {
            bind_mat(be, &ly->w_gate, type, &gu, il, &bytes);
            bind_mat(be, &ly->w_up, type, &gu, L + il, &bytes);
            bind_mat(be, &ly->w_down, type, &dn, il, &bytes);
        }
        bind_mat(be, &ly->attn_norm, LMC_DTYPE_F32, &nrm, 0, &dummy);
        bind_mat(be, &ly->ffn_norm, LMC_DTYPE_F32, &nrm, 1, &dummy);
        ly->attn_norm = lmc_tensor_reshape(&ly->attn_norm, D, 1, 1, 1);
        ly->ffn_norm = lmc_tensor_reshape(&ly->ffn_norm, D, 1, 1, 1);
        if (attn_bias) {
            bind_mat(be, &ly->bq, LMC_DTYPE_F32, &bias_q, 0, &dummy);
            bind_mat(be, &ly->bk, LMC_DTYPE_F32, &bias_kv, 0, &dummy);
            bind_mat(be, &ly->bv, LMC_DTYPE_F32, &bias_kv, 1, &dummy);
            ly->bq = lmc_tensor_reshape(&ly->bq, qd, 1, 1, 1);
            ly->bk = lmc_tensor_reshape(&ly->bk, kvd, 1, 1, 1);
            ly->bv = lmc_tensor_reshape(&ly->bv, kvd, 1, 1, 1);
        }
        ly->window = 0;
        ly->rope = 0;
    }
    bind_mat(be, &m->out_norm, LMC_DTYPE_F32, &nrm, 2, &dummy);
    m->out_norm = lmc_tensor_reshape(&m->out_norm, D, 1, 1, 1);
    bind_mat(be, &m->lm_head, type, &emb, 0, &bytes);
    if (c->tie_word_embeddings) m->tok_embd = m->lm_head;
    else bind_mat(be, &m->tok_embd, type, &emb, 1, &dummy); /* read one row per token: not counted */
    for (int r = 0; r < 4; r++) {
        const lmc_rope_table *rt = &m->rope[r / 2];
        lmc_tensor *t = &m->rope_freq[r / 2][r % 2];
        *t = lmc_tensor_make(LMC_DTYPE_F32, rt->n_rot / 2, 1, 1, 1);
        if (be->i->alloc(be, t) < 0) die("alloc");
        be->i->set(be, t, r % 2 ? rt->inv_freq_long : rt->inv_freq, 0, lmc_tensor_nbytes(t));
    }
    if (be->i->sync(be) < 0) die("upload");
    void *bufs[] = {q.host, kv.host, o.host, gu.host, dn.host, emb.host, ones, q.sc, q.bi, kv.sc, kv.bi,
                    o.sc, o.bi, gu.sc, gu.bi, dn.sc, dn.bi, emb.sc, emb.bi, rt.host, rt.sc, rt.bi, egu.host, egu.sc,
                    egu.bi, edn.host, edn.sc, edn.bi};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    m->weight_bytes = (size_t)(bytes + expert_bytes);
    *mat_bytes = bytes + (E ? expert_bytes * K / E : 0); /* a token reads k of the E experts */
    const double ffn = E ? (double)D * E + 3.0 * D * Ie * K : 3.0 * D * I;
    *mat_params = (double)L * ((double)(D * qd * 2 + D * kvd * 2) + ffn) + (double)D * V;
    return m;
}

static double g_bw, g_gemm; /* GB/s, TFLOP/s */

static void run_type(const shape *sh, const char *tname, int n_gen, const int *prefill, int n_prefill,
                     const int *batch, int n_batch, int ctx_min) {
    lmc_dtype type = type_of(tname);
    if (type == LMC_DTYPE_END) { fprintf(stderr, "bench_cuda: unknown type %s\n", tname); return; }
    size_t used0 = 0, used1 = 0;
    lmc_cuda_device_info(0, NULL, 0, NULL, NULL, &used0);
    lmc_backend *be;
    if (lmc_backend_cuda_init(&be, 0) < 0) die("cuda backend");
    double mat_bytes, mat_params;
    double t0 = lmc_now_s();
    lmc_model *m = synth_model(be, sh, type, &mat_bytes, &mat_params);
    double t_load = lmc_now_s() - t0;
    int max_prefill = 512;
    for (int i = 0; i < n_prefill; i++) max_prefill = prefill[i] > max_prefill ? prefill[i] : max_prefill;
    int max_batch = 1;
    for (int i = 0; i < n_batch; i++) max_batch = batch[i] > max_batch ? batch[i] : max_batch;
    const int n_ctx = max_prefill + n_gen + 16 > ctx_min ? max_prefill + n_gen + 16 : ctx_min;
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = max_batch;
    cp.n_batch = max_prefill;
    lmc_context *ctx;
    if (lmc_context_init(&ctx, m, &cp) < 0) die("context");
    const int V = m->cfg.vocab_size;
    int32_t *tok = malloc((size_t)n_ctx * max_batch * 4), *pos = malloc((size_t)n_ctx * max_batch * 4);
    int32_t *seq = malloc((size_t)n_ctx * max_batch * 4);
    uint8_t *want = malloc((size_t)n_ctx * max_batch);
    for (int i = 0; i < n_ctx * max_batch; i++) tok[i] = (int32_t)((i * 7919) % V);

    /* batch-1 decode: a 16-token prompt, then n_gen greedy tokens */
    lmc_gen_params gp = {.n_predict = n_gen, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
    gp.sampler.temperature = 0;
    lmc_gen_stats st;
    lmc_generate(ctx, tok, 16, &(lmc_gen_params){.n_predict = 4, .ignore_eos = 1, .sampler = gp.sampler}, NULL, NULL,
                 &st);
    lmc_kv_clear(&ctx->kv, 0);
    if (lmc_generate(ctx, tok, 16, &gp, NULL, NULL, &st) < 0) die("generate");
    const double dec = (st.n_generated - 1) / st.t_gen_s;
    const double roof = g_bw * 1e9 / mat_bytes;
    lmc_kv_clear(&ctx->kv, 0);

    /* prefill at each length (one warm-up pass of the first) */
    double pre[8] = {0};
    for (int k = -1; k < n_prefill; k++) {
        const int P = prefill[k < 0 ? 0 : k];
        for (int i = 0; i < P; i++) { pos[i] = i; seq[i] = 0; want[i] = i == P - 1; }
        lmc_batch b = {P, tok, pos, seq, want};
        double t1 = lmc_now_s();
        if (lmc_context_decode(ctx, &b) < 0) die("prefill");
        double dt = lmc_now_s() - t1;
        if (k >= 0) pre[k] = P / dt;
        lmc_kv_clear(&ctx->kv, 0);
    }
    const double pre_roof = g_gemm * 1e12 / (2.0 * mat_params);

    /* batched decode: B sequences, 16-token prompts prefilled together, then n_gen steps of B tokens */
    double agg[8] = {0};
    for (int k = 0; k < n_batch; k++) {
        const int B = batch[k];
        for (int s = 0; s < B; s++) lmc_kv_clear(&ctx->kv, s);
        int n = 0;
        for (int s = 0; s < B; s++)
            for (int i = 0; i < 16; i++, n++) { pos[n] = i; seq[n] = s; want[n] = i == 15; }
        lmc_batch b = {n, tok, pos, seq, want};
        if (lmc_context_decode(ctx, &b) < 0) die("batched prefill");
        double t1 = 0;
        for (int step = 0; step <= n_gen; step++) {
            if (step == 1) t1 = lmc_now_s(); /* step 0 warms up */
            for (int s = 0; s < B; s++) { pos[s] = 16 + step; seq[s] = s; want[s] = 1; }
            lmc_batch d = {B, tok + step, pos, seq, want};
            if (lmc_context_decode(ctx, &d) < 0) die("batched decode");
        }
        agg[k] = (double)B * n_gen / (lmc_now_s() - t1);
    }
    lmc_cuda_device_info(0, NULL, 0, NULL, NULL, &used1);
    const double kvb = (double)lmc_kv_bytes(m, n_ctx, max_batch, max_prefill);
    lmc_cuda_mem ms;
    if (lmc_cuda_mem_stats(be, &ms) < 0) die("mem stats");
    /* every weight on the device (the embedding table and norms too), the KV cache; the rest:
     * activation buffers (the context's tensors past the cache), workspaces, the driver's */
    const double used = (double)(used1 - used0), wkv = (double)ms.weights + kvb;

    printf("| %s | %s | %.2f | %.1f | %.1f | %.0f%% |", sh->name, tname, mat_bytes / 1e9, dec, roof, 100 * dec / roof);
    for (int k = 0; k < n_prefill; k++) printf(" %.0f (%.0f%%) |", pre[k], 100 * pre[k] / pre_roof);
    for (int k = 0; k < n_batch; k++) printf(" %.0f (%.1fx) |", agg[k], agg[k] / dec);
    printf(" %.2f / %.2f (+%.0f%%) | %.2f / %.2f / %.2f | %.1f |\n", used / 1e9, wkv / 1e9, 100 * (used / wkv - 1),
           ((double)ms.tensors - kvb) / 1e9, (double)ms.workspaces / 1e9,
           (used - (double)ms.weights - (double)ms.tensors - (double)ms.workspaces) / 1e9, t_load);
    fprintf(stderr, "%s %s workspaces MB: weight rows %.1f, activations %.1f, attention/sampling %.1f, moe %.1f, "
            "staging %.1f, cuBLAS %.1f\n", sh->name, tname, ms.ws_w / 1e6, ms.ws_x / 1e6, ms.ws_a / 1e6, ms.ws_m / 1e6,
            ms.stage / 1e6, ms.blas / 1e6);
    fflush(stdout);
    free(tok); free(pos); free(seq); free(want);
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
}

/* One op alone, timed over `reps` back-to-back calls (after one warm-up), in µs per call. */
typedef void (*op_fn)(lmc_backend *be, void *ud);
static double time_op(lmc_backend *be, op_fn fn, void *ud, int reps) {
    fn(be, ud);
    if (be->i->sync(be) < 0) die("kernel");
    double t0 = lmc_now_s();
    for (int i = 0; i < reps; i++) fn(be, ud);
    if (be->i->sync(be) < 0) die("kernel");
    return (lmc_now_s() - t0) / reps * 1e6;
}

typedef struct mm_args { lmc_tensor *y, *w, *x; } mm_args;
static void op_matmul(lmc_backend *be, void *ud) {
    mm_args *a = ud;
    be->i->matmul(be, a->y, a->w, a->x);
}

typedef struct at_args { lmc_tensor *out, *q, *k, *v, *pos, *seq; lmc_attn_op op; } at_args;
static void op_attn(lmc_backend *be, void *ud) {
    at_args *a = ud;
    be->i->attention(be, a->out, a->q, a->k, a->v, a->pos, a->seq, &a->op);
}

/* Decode kernels alone: matrix-vector products of the 8B shape's largest matrices per type
 * (GB/s against the copy bandwidth) and decode attention over caches of several lengths. */
static void kernels(const char *types) {
    lmc_backend *be;
    if (lmc_backend_cuda_init(&be, 0) < 0) die("cuda backend");
    printf("| kernel | type | shape | tokens | µs / call | GB/s | of copy bandwidth |\n|---|---|---|---|---|---|---|\n");
    const int64_t shp[][2] = {{4096, 14336}, {14336, 4096}, {4096, 1024}};
    const int toks[] = {1, 2, 4, 8, 9, 16, 32, 64};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", types);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        lmc_dtype type = type_of(t);
        if (type == LMC_DTYPE_END || lmc_dtype_is_mlx(type)) continue;
        for (int si = 0; si < 3; si++) {
            const int64_t in = shp[si][0], out = shp[si][1];
            void *host = host_matrix(type, in, out);
            lmc_tensor w = lmc_tensor_make(type, in, out, 1, 1);
            if (be->i->bind_weight(be, &w, host) < 0) die("bind");
            for (int ti = 0; ti < (int)(sizeof toks / sizeof toks[0]); ti++) {
                lmc_tensor x = lmc_tensor_make(LMC_DTYPE_F32, in, toks[ti], 1, 1);
                lmc_tensor y = lmc_tensor_make(LMC_DTYPE_F32, out, toks[ti], 1, 1);
                if (be->i->alloc(be, &x) < 0 || be->i->alloc(be, &y) < 0) die("alloc");
                mm_args a = {&y, &w, &x};
                double us = time_op(be, op_matmul, &a, 50);
                double gb = (double)lmc_tensor_nbytes(&w) / (us * 1e-6) / 1e9;
                printf("| matmul | %s | %lld x %lld | %d | %.1f | %.0f | %.0f%% |\n", t, (long long)in, (long long)out,
                       toks[ti], us, gb, 100 * gb / g_bw);
                be->i->release(be, &x);
                be->i->release(be, &y);
            }
            be->i->unbind_weight(be, &w);
            free(host);
        }
    }
    /* decode attention, 8B shape: 32 query heads, 8 KV heads, head_dim 128 (cuda_attn.cu) */
    const int caches[2] = {2048, 8192};
    const int lens[2][3] = {{64, 1024, 2048}, {64, 1024, 8192}};
    for (int ci = 0; ci < 2; ci++) {
        const int n_ctx = caches[ci];
        lmc_tensor kc = lmc_tensor_make(LMC_DTYPE_F32, 1024, n_ctx, 1, 1), vc = kc;
        lmc_tensor q = lmc_tensor_make(LMC_DTYPE_F32, 4096, 1, 1, 1), o = q;
        lmc_tensor pos = lmc_tensor_make(LMC_DTYPE_I32, 1, 1, 1, 1), seq = pos;
        if (be->i->alloc(be, &kc) < 0 || be->i->alloc(be, &vc) < 0 || be->i->alloc(be, &q) < 0 ||
            be->i->alloc(be, &o) < 0 || be->i->alloc(be, &pos) < 0 || be->i->alloc(be, &seq) < 0)
            die("alloc");
        for (int li = 0; li < 3; li++) {
            int32_t p = lens[ci][li] - 1;
            be->i->set(be, &pos, &p, 0, 4);
            at_args a = {&o, &q, &kc, &vc, &pos, &seq, {.n_head = 32, .n_kv_head = 8, .head_dim = 128,
                         .scale = 0.088f, .softcap = 0, .window = 0}};
            double us = time_op(be, op_attn, &a, 50);
            double gb = 2.0 * lens[ci][li] * 1024 * 4 / (us * 1e-6) / 1e9;
            printf("| attention (32/8 heads, hd 128, cache %d) | f32 KV | %d positions | 1 | %.1f | %.0f | %.0f%% |\n",
                   n_ctx, lens[ci][li], us, gb, 100 * gb / g_bw);
        }
        lmc_tensor *all[] = {&kc, &vc, &q, &o, &pos, &seq};
        for (int i = 0; i < 6; i++) be->i->release(be, all[i]);
    }
    lmc_backend_free(be);
    fflush(stdout);
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        out[n++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    return n;
}

int main(int argc, char **argv) {
    const char *shape_name = "llama8b", *types = "bf16,q8_0,q4_0";
    int only_kernels = 0;
    int n_gen = 64, prefill[8] = {512, 2048}, n_prefill = 2, batch[8] = {8, 32}, n_batch = 2, ctx_min = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc) shape_name = argv[++i];
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) n_prefill = parse_list(argv[++i], prefill, 8);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) n_batch = parse_list(argv[++i], batch, 8);
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) ctx_min = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kernels")) only_kernels = 1;
        else { fprintf(stderr, "usage: bench_cuda [--shape llama8b|qwen05|qwen3moe] [--types bf16,q8_0,q4_0] [--gen N] "
                               "[--prefill 512,2048] [--batch 8,32] [--ctx N] [--kernels]\n"); return 2; }
    }
    const shape *sh = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, shape_name)) sh = &shapes[i];
    if (!sh) { fprintf(stderr, "bench_cuda: unknown shape %s\n", shape_name); return 2; }
    char name[256];
    int n_sm = 0;
    size_t total = 0;
    if (lmc_cuda_device_info(0, name, sizeof name, &n_sm, &total, NULL) < 0) die("device");
    if (lmc_cuda_measure_copy_bw(0, (size_t)2 << 30, &g_bw) < 0) die("bandwidth");
    if (lmc_cuda_measure_gemm(0, 8192, &g_gemm) < 0) die("gemm");
    printf("device: %s, %d SMs, %.1f GB; copy bandwidth %.0f GB/s (D2D, read + write); cuBLAS bf16 GEMM %.0f TFLOP/s "
           "(8192^3)\n\n", name, n_sm, total / 1e9, g_bw, g_gemm);
    if (only_kernels) { kernels(types); return 0; }
    printf("| shape | type | matrix GB | decode tok/s | roofline tok/s | of roofline |");
    for (int k = 0; k < n_prefill; k++) printf(" prefill %d tok/s (of GEMM roof) |", prefill[k]);
    for (int k = 0; k < n_batch; k++) printf(" %d-seq decode tok/s (x single) |", batch[k]);
    printf(" GPU mem used GB / weights+KV GB | of which activations / workspaces / driver GB | load s |\n"
           "|---|---|---|---|---|---|");
    for (int k = 0; k < n_prefill + n_batch; k++) printf("---|");
    printf("---|---|---|\n");
    fflush(stdout);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", types);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
        run_type(sh, t, n_gen, prefill, n_prefill, batch, n_batch, ctx_min);
    return 0;
}
#endif
