/* bench_moe.c — CPU decode (and prefill) speed of the generic MoE forward on a
 * random-weight checkpoint shaped like Qwen3-30B-A3B with fewer layers, next to
 * the roofline of the bytes a decoded token must read (its active weights).
 *
 *   build/bench/bench_moe [--layers N] [--prompt N] [--gen N] [--threads 1,2] [--dir DIR]
 *
 * Shape (Qwen3-30B-A3B's config): hidden 2048, 32 query / 4 KV heads of 128,
 * q/k norms, 128 experts of ffn 768, top-8 renormalized, vocab 151936, untied;
 * only num_hidden_layers is cut (default 4 of 48) to fit this machine. The
 * checkpoint is written once as bf16 with one tensor per expert (the layout of
 * the published checkpoint) to DIR (default /tmp/lmc-bench-qwen3moe-L<N>).
 * Active bytes/token = every non-expert weight (embedding row aside: the head
 * is read whole) + per sparse layer 8 of 128 experts; roofline = read bandwidth
 * (measured in a child right before each run, same thread count) / those bytes.
 * Each thread count runs in a child process. Prints a markdown table for
 * docs/BENCHMARKS.md. A benchmark, not a test.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "gen/context.h"
#include "gen/generate.h"
#include "io/safetensors.h"

#include "bench_bw.h"

enum { D = 2048, NH = 32, NKV = 4, HD = 128, E = 128, K = 8, IE = 768, V = 151936 };

static unsigned rng = 7;
static uint16_t rbf16(float scale) {
    rng = rng * 1664525u + 1013904223u;
    float f = ((float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f) * scale;
    return lmc_f32_to_bf16(f);
}

/* One bf16 tensor [out, in] (torch order) of U(-1, 1)·1.7/sqrt(in), or all ones for norms. */
typedef struct wt { char name[96]; int n_dims; int64_t shape[2]; uint16_t *data; } wt;

static int write_checkpoint(const char *dir, int L) {
    int cap = 8 + L * (10 + 3 * E), n = 0;
    wt *t = calloc((size_t)cap, sizeof *t);
#define ADD(nm, a, b) do { snprintf(t[n].name, sizeof t[n].name, "%s", nm); t[n].n_dims = (b) ? 2 : 1; \
    t[n].shape[0] = (a); t[n].shape[1] = (b); n++; } while (0)
    char nm[96];
    ADD("model.embed_tokens.weight", V, D);
    ADD("lm_head.weight", V, D);
    ADD("model.norm.weight", D, 0);
    for (int l = 0; l < L; l++) {
        struct { const char *s; int64_t a, b; } per[] = {
            {"self_attn.q_proj.weight", NH * HD, D}, {"self_attn.k_proj.weight", NKV * HD, D},
            {"self_attn.v_proj.weight", NKV * HD, D}, {"self_attn.o_proj.weight", D, NH * HD},
            {"self_attn.q_norm.weight", HD, 0}, {"self_attn.k_norm.weight", HD, 0},
            {"input_layernorm.weight", D, 0}, {"post_attention_layernorm.weight", D, 0}, {"mlp.gate.weight", E, D},
        };
        for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, per[i].s);
            ADD(nm, per[i].a, per[i].b);
        }
        for (int e = 0; e < E; e++) {
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
            ADD(nm, IE, D);
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
            ADD(nm, IE, D);
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
            ADD(nm, D, IE);
        }
    }
#undef ADD
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)t[i].shape[0] * (t[i].n_dims == 2 ? (size_t)t[i].shape[1] : 1);
    uint16_t *all = malloc(total * 2);
    if (!all) return 1;
    size_t at = 0;
    lmc_st_write_tensor *wt_ = calloc((size_t)n, sizeof *wt_);
    for (int i = 0; i < n; i++) {
        size_t ne = (size_t)t[i].shape[0] * (t[i].n_dims == 2 ? (size_t)t[i].shape[1] : 1);
        t[i].data = all + at;
        at += ne;
        const int norm = t[i].n_dims == 1;
        const float sc = norm ? 0 : strstr(t[i].name, "embed") ? 1.0f : 1.7f / sqrtf((float)t[i].shape[1]);
        for (size_t j = 0; j < ne; j++) t[i].data[j] = norm ? lmc_f32_to_bf16(1.0f) : rbf16(sc);
        wt_[i] = (lmc_st_write_tensor){.name = t[i].name, .dtype = LMC_DTYPE_BF16, .n_dims = t[i].n_dims,
                                       .shape = {t[i].shape[0], t[i].shape[1]}, .data = t[i].data};
    }
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\", \"torch_dtype\": \"bfloat16\",\n"
               " \"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": 6144, \"num_hidden_layers\": %d,\n"
               " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"max_position_embeddings\": 40960,\n"
               " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": false,\n"
               " \"num_experts\": %d, \"num_experts_per_tok\": %d, \"moe_intermediate_size\": %d, \"norm_topk_prob\": true,\n"
               " \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"bos_token_id\": 151643, \"eos_token_id\": 151645}\n",
            V, D, L, NH, NKV, HD, E, K, IE);
    fclose(f);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    lmc_status st = lmc_st_write(path, wt_, n, NULL, 0);
    if (st < 0) fprintf(stderr, "bench: %s\n", lmc_last_error());
    free(all);
    free(wt_);
    free(t);
    return st < 0;
}

static int run_one(const char *dir, int n_threads, int n_prompt, int n_gen, double bw) {
    lmc_backend *be;
    lmc_model *m;
    if (lmc_backend_cpu_init(&be, n_threads, 0) < 0 || lmc_model_load(dir, be, &m) < 0) {
        fprintf(stderr, "bench: %s\n", lmc_last_error());
        return 1;
    }
    /* bytes a decoded token reads: everything bound but the unselected experts and the embedding table
     * (one row of it) */
    const double expert_bytes = 3.0 * D * IE * 2;
    double inactive = 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (m->layers[l].moe) inactive += (E - K) * expert_bytes;
    const double embd = (double)V * D * 2;
    double bytes_tok = (double)m->weight_bytes - inactive - embd;
    double per_layer = (double)K * expert_bytes + (NH * HD * D * 2.0 + 2.0 * NKV * HD * D + E * D) * 2;
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n_prompt + n_gen;
    cp.n_batch = n_prompt;
    lmc_context *ctx;
    if (lmc_context_init(&ctx, m, &cp) < 0) { fprintf(stderr, "bench: %s\n", lmc_last_error()); return 1; }
    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
    for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    lmc_gen_params gp = {.n_predict = n_gen, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
    lmc_gen_stats st;
    /* warm-up: fault every expert page in (a long prompt touches nearly all of them), then measure */
    lmc_generate(ctx, prompt, n_prompt, &(lmc_gen_params){.n_predict = 2, .ignore_eos = 1, .sampler = gp.sampler},
                 NULL, NULL, &st);
    if (lmc_generate(ctx, prompt, n_prompt, &gp, NULL, NULL, &st) < 0) {
        fprintf(stderr, "bench: %s\n", lmc_last_error());
        return 1;
    }
    double pp = st.n_prompt / st.t_prompt_s, tg = (st.n_generated - 1) / st.t_gen_s;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double roof = bw / (bytes_tok / 1e9);
    printf("| %d | %d | %d | %.1f | %d | %.2f | %.0f | %.0f | %.0f | %.1f | %.2f | %.0f%% | %.0f |\n", m->cfg.n_layers,
           n_threads, n_prompt, pp, n_gen, tg, m->weight_bytes / 1048576.0, per_layer / 1048576.0,
           bytes_tok / 1048576.0, bw, roof, 100.0 * tg / roof, ru.ru_maxrss / 1024.0);
    fflush(stdout);
    free(prompt);
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
    return 0;
}

int main(int argc, char **argv) {
    int L = 4, n_prompt = 64, n_gen = 32, threads[8] = {1, 2}, n_thr = 2;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc) L = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            n_thr = 0;
            for (char *t = strtok(argv[++i], ","); t && n_thr < 8; t = strtok(NULL, ",")) threads[n_thr++] = atoi(t);
        } else {
            fprintf(stderr, "usage: bench_moe [--layers N] [--prompt N] [--gen N] [--threads 1,2] [--dir DIR]\n");
            return 2;
        }
    }
    if (L < 1 || L > 48 || n_prompt < 1 || n_gen < 2) { fprintf(stderr, "bench: bad sizes\n"); return 2; }
    static char path[256];
    if (!dir) {
        snprintf(path, sizeof path, "/tmp/lmc-bench-qwen3moe-L%d", L);
        dir = path;
    }
    char st_path[512];
    struct stat sb;
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    if (stat(st_path, &sb) != 0) {
        mkdir(dir, 0755);
        fprintf(stderr, "bench: writing a random bf16 Qwen3-30B-A3B-shaped checkpoint with %d layers to %s\n", L, dir);
        if (write_checkpoint(dir, L) != 0) { fprintf(stderr, "bench: cannot write %s\n", dir); return 1; }
    }
    printf("model: %s (Qwen3-30B-A3B shape: hidden %d, %d/%d heads × %d, %d experts × ffn %d, top-%d, vocab %d)\n\n",
           dir, D, NH, NKV, HD, E, IE, K, V);
    printf("| layers | threads | prompt tok | prefill tok/s | gen tok | decode tok/s | weights MiB | active MiB/layer | "
           "active MiB/token | read GB/s | roofline tok/s | of roofline | peak RSS MiB |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    for (int i = 0; i < n_thr; i++) {
        const double bw = measure_bandwidth_in_child(threads[i]);
        if (bw < 0) return 1;
        pid_t pid = fork();
        if (pid == 0) _exit(run_one(dir, threads[i], n_prompt, n_gen, bw));
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    }
    return 0;
}
