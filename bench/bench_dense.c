/* bench_dense.c — CPU prefill/decode speed of the dense forward, next to the
 * machine's measured memory bandwidth and the decode roofline it implies.
 *
 *   build/bench/bench_dense [--model DIR | --shape qwen05|llama1b] [--prompt N] [--gen N] [--reps N]
 *                           [--threads 1,2] [--types bf16,q8_0,q4_0,mlx4]
 *
 * Type bf16c: the bf16 checkpoint with bf16 compute (lmc --compute bf16: activations rounded to bf16).
 *
 * --reps N runs the prompt + generation N times after the warm-up and reports the best
 * prefill and decode rates (default 1).
 *
 * Without --model it writes (once, into /tmp/lmc-bench-<shape>) a random-weight
 * bf16 checkpoint of Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14/2 heads,
 * intermediate 4864, vocab 151936, tied) or Llama-3.2-1B's (hidden 2048, 16
 * layers, 32/8 heads, intermediate 8192, vocab 128256, tied). Each --types entry
 * other than the checkpoint's own converts every matrix (and the tied
 * embedding) in memory after loading: q8_0 / q4_0 with lmc_quantize_row, mlx4 as
 * mlx's 4-bit affine with group 64 and bf16 scales, then binds it on the backend as the
 * loader binds a weight of that type (the AVX-512 tier rewrites q8_0 as MLX8: bytes per
 * token count what is read then). Prints a markdown table;
 * each (type, threads) runs in a child process so runs and peak RSS do not mix.
 * Bytes/token = all matrix bytes read once per decoded token (the tied
 * embedding counted once, as the head); roofline = bandwidth / bytes per token,
 * with the bandwidth measured (same thread count, in a child of its own) right
 * before each run, because other load on a shared machine moves it.
 * A benchmark, not a test: results go to docs/BENCHMARKS.md by hand.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tests/unit/proc_status.h"
#include "../tests/unit/tiny_model.h"
#include "core/quant.h"
#include "core/threadpool.h"
#include "gen/context.h"
#include "gen/generate.h"

#include "bench_bw.h"

/* Convert weight t (bf16/f16/f32, [in, out]) to type `to` in fresh memory; returns the
 * bytes it had before and adds the new bytes (with MLX scales/biases) to *new_bytes.
 * The buffers live until the process exits (each run is a child). */
static size_t convert_weight(lmc_backend *be, lmc_tensor *t, lmc_dtype to, size_t *new_bytes) {
    const int64_t in = t->ne[0], out = t->ne[1];
    size_t old = lmc_tensor_nbytes(t);
    lmc_tensor q = lmc_tensor_make(to, in, out, 1, 1);
    q.data = aligned_alloc(64, (lmc_tensor_nbytes(&q) + 63) / 64 * 64);
    lmc_quant_mlx *aux = NULL;
    if (lmc_dtype_is_mlx(to)) {
        aux = calloc(1, sizeof *aux);
        aux->group_size = 64;
        aux->scales = lmc_tensor_make(LMC_DTYPE_BF16, in / 64, out, 1, 1);
        aux->biases = aux->scales;
        aux->scales.data = malloc(lmc_tensor_nbytes(&aux->scales));
        aux->biases.data = malloc(lmc_tensor_nbytes(&aux->biases));
        q.aux = aux;
    } else if (to == LMC_DTYPE_MXFP4_MLX) { /* U8 exponents per 32, no biases */
        aux = calloc(1, sizeof *aux);
        aux->group_size = 32;
        aux->scales = lmc_tensor_make(LMC_DTYPE_U8, in / 32, out, 1, 1);
        aux->scales.data = malloc(lmc_tensor_nbytes(&aux->scales));
        q.aux = aux;
    }
    float *row = malloc((size_t)in * sizeof *row);
    for (int64_t o = 0; o < out; o++) {
        lmc_tensor_row_to_f32(t, o, row);
        lmc_mlx_row r = aux ? lmc_quant_mlx_row(aux, o) : (lmc_mlx_row){0};
        if (lmc_quantize_row(to, row, (char *)q.data + (size_t)o * q.nb[1], aux ? &r : NULL, in) < 0) {
            fprintf(stderr, "bench: %s\n", lmc_last_error());
            exit(1);
        }
    }
    free(row);
    /* bound as the loader binds a weight of this type: the CPU backend's AVX-512 tier rewrites
     * Q8_0 as MLX8 (cpu_rebind.c) into memory of its own */
    lmc_tensor b = lmc_tensor_make(to, in, out, 1, 1);
    b.aux = q.aux;
    if (be->i->bind_weight(be, &b, q.data) < 0) {
        fprintf(stderr, "bench: %s\n", lmc_last_error());
        exit(1);
    }
    if (b.data != q.data) free(q.data);
    const lmc_quant_mlx *side = b.aux;
    *new_bytes += lmc_tensor_nbytes(&b) + (side ? lmc_tensor_nbytes(&side->scales) * (side->biases.data ? 2 : 1) : 0);
    *t = b;
    return old;
}

/* Convert every matrix of the model (and the tied embedding) to `to`; returns the
 * model's bytes per decoded token afterwards. */
static double convert_model(lmc_model *m, lmc_dtype to) {
    size_t old = 0, add = 0;
    const int tied = m->lm_head.data == m->tok_embd.data;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        lmc_layer *L = &m->layers[l];
        lmc_tensor *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            if (mats[i]->data) old += convert_weight(m->be, mats[i], to, &add);
    }
    old += convert_weight(m->be, &m->lm_head, to, &add);
    if (tied) m->tok_embd = m->lm_head;
    return (double)(m->weight_bytes - old + add);
}

static int run_one(const char *dir, const char *type, int n_threads, int n_prompt, int n_gen, int reps, double bw) {
    lmc_backend *be;
    lmc_model *m;
    const int bf16c = !strcmp(type, "bf16c"); /* bf16 weights, bf16 compute (--compute bf16) */
    if (bf16c && !lmc_backend_cpu_set_bf16_compute(1)) {
        fprintf(stderr, "bench: bf16c: this CPU has no AVX-512 BF16 products\n");
        return 1;
    }
    if (lmc_backend_cpu_init(&be, n_threads, 0) < 0 || lmc_model_load(dir, be, &m) < 0) {
        fprintf(stderr, "bench: %s\n", lmc_last_error());
        return 1;
    }
    double bytes_tok = (double)m->weight_bytes; /* every weight read once per decoded token (tied head read once) */
    if (strcmp(type, "bf16") != 0 && !bf16c) {
        lmc_dtype to = !strcmp(type, "q8_0") ? LMC_DTYPE_Q8_0 : !strcmp(type, "q4_0") ? LMC_DTYPE_Q4_0
                     : !strcmp(type, "q4_k") ? LMC_DTYPE_Q4_K : !strcmp(type, "q6_k") ? LMC_DTYPE_Q6_K
                     : !strcmp(type, "mlx4") ? LMC_DTYPE_MLX4 : !strcmp(type, "mlx8") ? LMC_DTYPE_MLX8
                     : !strcmp(type, "mxfp4") ? LMC_DTYPE_MXFP4 : !strcmp(type, "mxfp4_mlx") ? LMC_DTYPE_MXFP4_MLX
                     : LMC_DTYPE_END;
        if (to == LMC_DTYPE_END) { fprintf(stderr, "bench: unknown type %s\n", type); return 1; }
        bytes_tok = convert_model(m, to);
    }
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n_prompt + n_gen;
    cp.n_batch = n_prompt;
    lmc_context *ctx;
    if (lmc_context_init(&ctx, m, &cp) < 0) { fprintf(stderr, "bench: %s\n", lmc_last_error()); return 1; }
    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
    for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)((i * 7919) % m->cfg.vocab_size);
    lmc_gen_params gp = {.n_predict = n_gen, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
    lmc_gen_stats st;
    /* warm-up pass faults the mapping in, then the measured run */
    lmc_generate(ctx, prompt, n_prompt, &(lmc_gen_params){.n_predict = 2, .ignore_eos = 1, .sampler = gp.sampler},
                 NULL, NULL, &st);
    double pp = 0, tg = 0; /* the best of --reps runs (other load on a shared machine only slows a run down) */
    for (int r = 0; r < reps; r++) {
        if (lmc_generate(ctx, prompt, n_prompt, &gp, NULL, NULL, &st) < 0) { fprintf(stderr, "bench: %s\n", lmc_last_error()); return 1; }
        if (st.n_prompt / st.t_prompt_s > pp) pp = st.n_prompt / st.t_prompt_s;
        if (st.n_generated > 1 && (st.n_generated - 1) / st.t_gen_s > tg) tg = (st.n_generated - 1) / st.t_gen_s;
    }
    size_t kv = lmc_kv_bytes(m, cp.n_ctx, 1, cp.n_batch);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = ru.ru_maxrss / 1024.0;
    double roof = bw / (bytes_tok / 1e9);
    /* converted types: their weights are anonymous memory, the bf16 file stays mapped (file pages) */
    double anon = fmax(0, (double)proc_status_kb("RssAnon")) / 1024.0; /* 0 when absent */
    printf("| %s | %d | %d | %.1f | %d | %.2f | %.0f | %.1f | %.2f | %.0f%% | %.0f | %.0f | %.0f (%.2fx) |\n", type,
           n_threads, n_prompt, pp, n_gen, tg, bytes_tok / 1048576.0, bw, roof, 100.0 * tg / roof, rss, anon,
           (bytes_tok + kv) / 1048576.0, rss / ((bytes_tok + kv) / 1048576.0));
    fflush(stdout);
    free(prompt);
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *shape = "qwen05";
    int n_prompt = 128, n_gen = 32, reps = 1;
    int threads[8] = {1, 2}, n_thr = 2;
    const char *types[8] = {"bf16", "q8_0", "q4_0", "mlx4"};
    int n_types = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) shape = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            n_thr = 0;
            for (char *t = strtok(argv[++i], ","); t && n_thr < 8; t = strtok(NULL, ",")) threads[n_thr++] = atoi(t);
        } else if (!strcmp(argv[i], "--types") && i + 1 < argc) {
            n_types = 0;
            for (char *t = strtok(argv[++i], ","); t && n_types < 8; t = strtok(NULL, ",")) types[n_types++] = t;
        } else {
            fprintf(stderr, "usage: bench_dense [--model DIR | --shape qwen05|llama1b] [--prompt N] [--gen N] [--reps N] "
                            "[--threads 1,2] [--types bf16,bf16c,q8_0,q4_0,mlx4,q4_k,q6_k,mlx8,mxfp4,mxfp4_mlx]\n");
            return 2;
        }
    }
    if (!dir) {
        static char path[256];
        snprintf(path, sizeof path, "/tmp/lmc-bench-%s", shape);
        dir = path;
        struct stat sb;
        char cfg[300];
        snprintf(cfg, sizeof cfg, "%s/model.safetensors", dir);
        if (stat(cfg, &sb) != 0) {
            tiny_opts o;
            if (!strcmp(shape, "qwen05")) o = (tiny_opts){"qwen2", 151936, 896, 24, 14, 2, 64, 4864, 1, 0, 1, NULL, NULL, 7, 32768, 0};
            else if (!strcmp(shape, "llama1b")) o = (tiny_opts){"llama", 128256, 2048, 16, 32, 8, 64, 8192, 1, 0, 1, NULL, NULL, 7, 32768, 0};
            else { fprintf(stderr, "bench: unknown shape %s (qwen05, llama1b)\n", shape); return 2; }
            mkdir(dir, 0755);
            fprintf(stderr, "bench: writing a random bf16 %s-shaped checkpoint to %s\n", shape, dir);
            if (tiny_model_write(dir, &o) != 0) { fprintf(stderr, "bench: cannot write %s\n", dir); return 1; }
        }
    }
    printf("model: %s\n\n", dir);
    printf("| type | threads | prompt tok | prefill tok/s | gen tok | decode tok/s | MiB/token | read GB/s | roofline tok/s | of roofline | peak RSS MiB | anon RSS MiB | weights+KV MiB (peak RSS ratio) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    for (int k = 0; k < n_types; k++)
        for (int i = 0; i < n_thr; i++) {
            /* the machine's bandwidth now, with this run's threads, from its own child (its
             * buffer must not count in the run's peak RSS): other load on a shared machine
             * moves it from minute to minute, so the roofline is measured next to its run */
            const double bw = measure_bandwidth_in_child(threads[i]);
            if (bw < 0) return 1;
            pid_t pid = fork();
            if (pid == 0) _exit(run_one(dir, types[k], threads[i], n_prompt, n_gen, reps, bw));
            int status;
            waitpid(pid, &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
        }
    return 0;
}
