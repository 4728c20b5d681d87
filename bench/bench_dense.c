/* bench_dense.c — CPU prefill/decode speed of the dense forward, next to the
 * machine's measured memory bandwidth and the decode roofline it implies.
 *
 *   build/bench/bench_dense [--model DIR] [--prompt N] [--gen N] [--threads 1,2]
 *
 * Without --model it writes (once, into /tmp/lmc-bench-qwen05) a random-weight
 * bf16 checkpoint of Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14/2 heads,
 * intermediate 4864, vocab 151936, tied). Prints a markdown table; peak RSS is
 * reported per thread count from a child process so runs do not mix.
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

#include "../tests/unit/tiny_model.h"
#include "core/threadpool.h"
#include "gen/context.h"
#include "gen/generate.h"

typedef struct bw_arg { const double *buf; size_t n; double sum[64]; } bw_arg;

static void bw_read(void *p, int ith, int nth) {
    bw_arg *a = p;
    long b, e;
    lmc_split((long)a->n, ith, nth, &b, &e);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (long i = b; i + 4 <= e; i += 4) { s0 += a->buf[i]; s1 += a->buf[i + 1]; s2 += a->buf[i + 2]; s3 += a->buf[i + 3]; }
    a->sum[ith] = s0 + s1 + s2 + s3;
}

/* Read bandwidth in GB/s over a 1 GiB buffer, best of 5. */
static double measure_bandwidth(int n_threads) {
    size_t n = (1u << 30) / sizeof(double);
    double *buf = malloc(n * sizeof *buf);
    for (size_t i = 0; i < n; i++) buf[i] = (double)(i & 7);
    lmc_pool *pool;
    lmc_pool_init(&pool, n_threads);
    bw_arg a = {buf, n, {0}};
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = lmc_now_s();
        lmc_pool_run(pool, bw_read, &a);
        double dt = lmc_now_s() - t0;
        best = fmax(best, (double)(n * sizeof *buf) / dt / 1e9);
    }
    lmc_pool_free(pool);
    free(buf);
    return best;
}

static int run_one(const char *dir, int n_threads, int n_prompt, int n_gen, double bw) {
    lmc_backend *be;
    lmc_model *m;
    if (lmc_backend_cpu_init(&be, n_threads, 0) < 0 || lmc_model_load(dir, be, &m) < 0) {
        fprintf(stderr, "bench: %s\n", lmc_last_error());
        return 1;
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
    if (lmc_generate(ctx, prompt, n_prompt, &gp, NULL, NULL, &st) < 0) { fprintf(stderr, "bench: %s\n", lmc_last_error()); return 1; }
    double pp = st.n_prompt / st.t_prompt_s, tg = (st.n_generated - 1) / st.t_gen_s;
    size_t kv = lmc_kv_bytes(m, cp.n_ctx, 1, cp.n_batch);
    double bytes_tok = (double)m->weight_bytes; /* every weight read once per decoded token (tied head read once) */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = ru.ru_maxrss / 1024.0;
    printf("| %d | %d | %.1f | %d | %.2f | %.2f | %.0f%% | %.0f | %.0f (%.2fx) |\n", n_threads, n_prompt, pp, n_gen,
           tg, bw / (bytes_tok / 1e9), 100.0 * tg / (bw / (bytes_tok / 1e9)), rss,
           (m->weight_bytes + kv) / 1048576.0, rss / ((m->weight_bytes + kv) / 1048576.0));
    fflush(stdout);
    free(prompt);
    lmc_context_free(ctx);
    lmc_model_free(m);
    lmc_backend_free(be);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    int n_prompt = 128, n_gen = 32;
    int threads[8] = {1, 2}, n_thr = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            n_thr = 0;
            for (char *t = strtok(argv[++i], ","); t && n_thr < 8; t = strtok(NULL, ",")) threads[n_thr++] = atoi(t);
        } else { fprintf(stderr, "usage: bench_dense [--model DIR] [--prompt N] [--gen N] [--threads 1,2]\n"); return 2; }
    }
    if (!dir) {
        dir = "/tmp/lmc-bench-qwen05";
        struct stat sb;
        char cfg[256];
        snprintf(cfg, sizeof cfg, "%s/model.safetensors", dir);
        if (stat(cfg, &sb) != 0) {
            mkdir(dir, 0755);
            tiny_opts o = {"qwen2", 151936, 896, 24, 14, 2, 64, 4864, 1, 0, 1, NULL, NULL, 7, 32768, 0};
            fprintf(stderr, "bench: writing a random bf16 Qwen2.5-0.5B-shaped checkpoint to %s\n", dir);
            if (tiny_model_write(dir, &o) != 0) { fprintf(stderr, "bench: cannot write %s\n", dir); return 1; }
        }
    }
    double bw1 = measure_bandwidth(1), bw2 = measure_bandwidth(2);
    printf("model: %s\n", dir);
    printf("memory read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (2 threads)\n\n", bw1, bw2);
    printf("| threads | prompt tok | prefill tok/s | gen tok | decode tok/s | roofline tok/s | of roofline | peak RSS MiB | weights+KV MiB (RSS ratio) |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    for (int i = 0; i < n_thr; i++) {
        pid_t pid = fork();
        if (pid == 0) _exit(run_one(dir, threads[i], n_prompt, n_gen, threads[i] > 1 ? bw2 : bw1));
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    }
    return 0;
}
