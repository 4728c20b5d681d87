/* cmd_bench.c — `lmc bench -m MODEL`: prefill and decode speed of one model on
 * this machine (prompt of N token ids, then greedy decode), best of R runs. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "core/threadpool.h"
#include "gen/generate.h"

static const char *bench_help =
    "usage: lmc bench -m MODEL [-p N] [-n N] [-r RUNS] [--threads N] [--backend B] [--tp N] [--compute f32|bf16] [--mlock]\n"
    "\n"
    "Prefill N prompt tokens (-p, default 64) and decode N tokens greedily\n"
    "(-n, default 32), best of RUNS (default 3), and print tokens per second,\n"
    "time to first token and peak memory. Token ids are spread over the vocabulary.\n"
    "\n"
    "example:\n"
    "  lmc bench -m Qwen/Qwen2.5-0.5B --threads 2\n";

int cmd_bench(int argc, char **argv) {
    cli_model_opts mo = {.tp_ok = 1};
    long n_prompt = 64, n_gen = 32, runs = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_parse_model_opt(&mo, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(bench_help, stdout); return 0; }
        else if (!strcmp(a, "-p")) { if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "-p", 1, 1 << 20, &n_prompt)) return EXIT_USAGE; }
        else if (!strcmp(a, "-n")) { if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "-n", 2, 1 << 20, &n_gen)) return EXIT_USAGE; }
        else if (!strcmp(a, "-r")) { if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "-r", 1, 1000, &runs)) return EXIT_USAGE; }
        else return cli_usage_error("bench", "unknown option '%s'", a);
    }
    if (!mo.model) return cli_usage_error("bench", "-m MODEL is required");
    cli_model cm;
    int rc = cli_load_model(&mo, &cm);
    if (rc) return rc;
    const lmc_config *c = &cm.model->cfg;
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = (int)(n_prompt + n_gen);
    if (mo.n_batch) cp.n_batch = mo.n_batch;
    lmc_context *ctx = NULL;
    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
    if (!prompt) { rc = cli_error("out of memory"); goto done; }
    if ((rc = cli_context_init(&cm, &cp, &ctx)) != 0) goto done;
    for (long i = 0; i < n_prompt; i++) prompt[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    lmc_gen_params gp = {.n_predict = (int)n_gen, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
    double best_pp = 0, best_tg = 0, best_ttft = 1e30;
    for (long r = 0; r < runs + 1; r++) { /* run 0 warms the mapping and caches */
        lmc_gen_stats st;
        if (lmc_generate(ctx, prompt, (int)n_prompt, &gp, NULL, NULL, &st) < 0) { rc = cli_error(NULL); goto done; }
        if (r == 0) continue;
        double pp = st.n_prompt / st.t_prompt_s, tg = (st.n_generated - 1) / st.t_gen_s;
        if (pp > best_pp) best_pp = pp;
        if (tg > best_tg) best_tg = tg;
        if (st.t_prompt_s < best_ttft) best_ttft = st.t_prompt_s;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const int cpu = !strcmp(cm.tp > 1 ? cm.tp_backend : cm.be->i->name, "cpu");
    printf("model: %s (%s, %.1f M parameters, %.1f MB of weights%s)\n", cm.dir, cm.model->profile.id,
           cm.model->n_params / 1e6, cm.model->weight_bytes / 1e6,
           !cpu ? "" : lmc_backend_cpu_bf16_compute() ? "; bf16 weights: bf16 compute" : "; bf16 weights: exact f32");
    printf("| backend | threads | prompt | prefill tok/s | gen | decode tok/s | first token ms | peak RSS MB |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    char backend[64];
    if (cm.tp > 1) snprintf(backend, sizeof backend, "%s, tp %d", cm.tp_backend, cm.tp);
    else snprintf(backend, sizeof backend, "%s", cm.be->i->name);
    printf("| %s | %d | %ld | %.1f | %ld | %.2f | %.1f | %.0f |\n", backend,
           mo.n_threads ? mo.n_threads : cm.tp > 1 ? 1 : lmc_cpu_count(), n_prompt, best_pp, n_gen, best_tg, best_ttft * 1e3,
           ru.ru_maxrss / 1024.0);
done:
    free(prompt);
    lmc_context_free(ctx);
    cli_free_model(&cm);
    return rc;
}
