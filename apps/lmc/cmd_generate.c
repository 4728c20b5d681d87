/* cmd_generate.c — `lmc generate` and `lmc logits` (the CLI contract in DESIGN.md). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_spec.h"
#include "gen/generate.h"
#include "tok/tokenizer.h"

static const char *generate_help =
    "usage: lmc generate -m MODEL (-p TEXT | --ids 1,2,3) [options]\n"
    "\n"
    "Generate a continuation of a prompt.\n"
    "\n"
    "  -m, --model MODEL     model directory, .gguf file, or ORG/NAME in the Hugging Face cache\n"
    "  -p, --prompt TEXT     prompt text (needs tokenizer.json)\n"
    "      --ids LIST        prompt as comma-separated token ids\n"
    "  -n, --n-predict N     tokens to generate (default 64)\n"
    "      --ignore-eos      do not stop at end-of-sequence tokens\n"
    "      --print-ids       print the generated ids, space-separated, on one stdout line\n"
    "      --logits-out FILE write the logits each generated token was chosen from\n"
    "                        (f32 little-endian [n_generated, vocab])\n"
    "      --backend B       cpu (default) or cuda\n"
    "  -t, --threads N       CPU threads (default: one per core; with --tp: per rank, default 1)\n"
    "      --compute P       bf16 (default) or f32: on the CPU, products with bf16 weights on the\n"
    "                        activations rounded to bf16 (as PyTorch, llama.cpp and mlx compute them;\n"
    "                        used where the CPU has AVX-512 BF16) or exact in f32 (F1, the reference)\n"
    "      --no-mmap         read the weights into memory instead of mapping the files (a file\n"
    "                        replaced or truncated while lmc runs cannot affect it; every command\n"
    "                        that loads a model takes it, as does LMC_NO_MMAP=1)\n"
    "      --mlock           lock the weights in memory (mlock), so the kernel never pages them out\n"
    "                        (needs a large enough locked-memory limit, ulimit -l; any model command)\n"
    "  -c, --ctx N           context size (default: min(max_position_embeddings, 4096))\n"
    "      --tp N            tensor parallel over N ranks (one backend each: cpu, or cuda devices 0..N-1)\n"
    "\n"
    "examples:\n"
    "  lmc generate -m ./Qwen2.5-0.5B --ids 9707,11 -n 16 --greedy --print-ids\n"
    "  lmc generate -m Qwen/Qwen2.5-0.5B -p \"The capital of France is\" --temp 0.7 --top-p 0.9\n"
    "  lmc generate -m Qwen/Qwen2.5-7B --draft-model Qwen/Qwen2.5-0.5B -p \"def fib(n):\" --draft-n 6\n"
    "\n"
    "sampling (greedy unless --temp is given):\n";

typedef struct gen_out {
    int print_ids;
    lmc_detok *detok;          /* text output when not NULL */
    FILE *logits_f;
    int32_t *ids;
    int n_ids, cap_ids;
    int write_error;
} gen_out;

static int on_token(int32_t tok, const float *logits, int n_vocab, void *ud) {
    gen_out *g = ud;
    if (g->logits_f && fwrite(logits, sizeof(float), (size_t)n_vocab, g->logits_f) != (size_t)n_vocab) {
        g->write_error = 1;
        return 1;
    }
    if (g->n_ids == g->cap_ids) {
        int cap = g->cap_ids ? 2 * g->cap_ids : 64;
        int32_t *p = realloc(g->ids, (size_t)cap * sizeof *p);
        if (!p) { g->write_error = 1; return 1; }
        g->ids = p;
        g->cap_ids = cap;
    }
    g->ids[g->n_ids++] = tok;
    if (g->detok) {
        char *piece = NULL;
        size_t len = 0;
        if (lmc_detok_push(g->detok, tok, &piece, &len) < 0) { g->write_error = 1; return 1; }
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
        free(piece);
    }
    return 0;
}

int cmd_generate(int argc, char **argv) {
    cli_model_opts mo = {.tp_ok = 1};
    const char *prompt = NULL, *ids_arg = NULL, *logits_out = NULL;
    long n_predict = 64;
    int print_ids = 0, ignore_eos = 0;
    lmc_sampler_params sp = lmc_sampler_default_params(); /* greedy */
    cli_spec_opts so = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_parse_gen_opt(&mo, &sp, &so, generate_help, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r == 2) return 0;
        if (r > 0) continue;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(prompt = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "--ids")) { if (!(ids_arg = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "-n", 0, 1 << 24, &n_predict)) return EXIT_USAGE;
        } else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else if (!strcmp(a, "--print-ids")) print_ids = 1;
        else if (!strcmp(a, "--logits-out")) { if (!(logits_out = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else return cli_usage_error("generate", "unknown option '%s'", a);
    }
    if (!mo.model) return cli_usage_error("generate", "-m MODEL is required");
    if (!prompt == !ids_arg) return cli_usage_error("generate", "give exactly one of -p TEXT or --ids LIST");
    if (cli_spec_check(&so, &mo, "generate")) return EXIT_USAGE;
    return cli_generate_spec(&mo, prompt, ids_arg, (int)n_predict, &sp, ignore_eos, print_ids, logits_out, 0, &so);
}

int cli_generate(const cli_model_opts *mo, const char *prompt, const char *ids_arg, int n_predict,
                 const lmc_sampler_params *sp, int ignore_eos, int print_ids, const char *logits_out, int echo) {
    return cli_generate_spec(mo, prompt, ids_arg, n_predict, sp, ignore_eos, print_ids, logits_out, echo, NULL);
}

int cli_generate_spec(const cli_model_opts *mo_in, const char *prompt, const char *ids_arg, int n_predict,
                      const lmc_sampler_params *spp, int ignore_eos, int print_ids, const char *logits_out, int echo,
                      const cli_spec_opts *so) {
    cli_model_opts mo = *mo_in;
    lmc_sampler_params sp = *spp;
    int32_t *ids = NULL;
    int n_ids = 0;
    if (ids_arg && (n_ids = cli_parse_ids(ids_arg, &ids)) < 0) return EXIT_USAGE;
    cli_model cm;
    int rc = cli_load_model(&mo, &cm);
    if (rc) { free(ids); return rc; }
    lmc_tokenizer *tok = NULL;
    if (prompt || !print_ids) {
        if (cli_load_tokenizer(cm.dir, &tok, prompt != NULL) != 0) { cli_free_model(&cm); return EXIT_RUNTIME; }
    }
    if (prompt && lmc_tokenizer_encode(tok, prompt, strlen(prompt), 1, &ids, &n_ids) < 0) {
        rc = cli_error("tokenizing the prompt");
        lmc_tokenizer_free(tok);
        cli_free_model(&cm);
        return rc;
    }
    if (n_ids == 0) {
        fprintf(stderr, "lmc: the prompt has no tokens\n");
        lmc_tokenizer_free(tok);
        cli_free_model(&cm);
        return EXIT_USAGE;
    }
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = mo.n_ctx ? mo.n_ctx : n_ids + n_predict;
    if (mo.n_batch) cp.n_batch = mo.n_batch;
    lmc_context *ctx = NULL;
    gen_out g = {.print_ids = print_ids};
    cli_spec spec = {0};
    lmc_spec_stats sstats;
    const int use_spec = cli_spec_on(so);
    if (use_spec) {
        if ((rc = cli_spec_open(so, &cm, cp.n_ctx, &spec)) != 0) goto done;
        if (spec.ds->flags & LMC_DRAFT_NEEDS_HIDDEN) cp.want_hidden = 1;
    }
    if (tok && !print_ids && lmc_detok_init(&g.detok, tok, 1) < 0) { rc = cli_error(NULL); goto done; }
    if (echo && prompt && !print_ids) {
        fputs(prompt, stdout);
        fflush(stdout);
    }
    lmc_gen_stats stats;
    const lmc_config *c = &cm.model->cfg;
    lmc_gen_params gp = {.n_predict = n_predict, .ignore_eos = ignore_eos, .stop_ids = c->eos_token_ids,
                         .n_stop = c->n_eos, .fn_no_logits = !logits_out, .sampler = sp};
    if ((rc = cli_context_init(&cm, &cp, &ctx)) != 0) goto done;
    if (logits_out && !(g.logits_f = fopen(logits_out, "wb"))) {
        fprintf(stderr, "lmc: cannot write %s\n", logits_out);
        rc = EXIT_RUNTIME;
        goto done;
    }
    if (use_spec && n_predict > 0) {
        lmc_spec_params spp_ = {.n_draft = so->n_draft};
        if (lmc_spec_generate(ctx, spec.ds, ids, n_ids, &gp, &spp_, on_token, &g, &sstats) < 0) { rc = cli_error(NULL); goto done; }
        stats = sstats.gen;
    } else if (n_predict > 0 && lmc_generate(ctx, ids, n_ids, &gp, on_token, &g, &stats) < 0) {
        rc = cli_error(NULL);
        goto done;
    }
    if (g.write_error) { fprintf(stderr, "lmc: write error on %s\n", logits_out); rc = EXIT_RUNTIME; goto done; }
    if (g.detok) {
        char *rest = NULL;
        size_t len = 0;
        if (lmc_detok_flush(g.detok, &rest, &len) == 0) fwrite(rest, 1, len, stdout);
        free(rest);
    } else {
        for (int i = 0; i < g.n_ids; i++) printf("%s%d", i ? " " : "", g.ids[i]);
    }
    printf("\n");
    if (n_predict > 0)
        fprintf(stderr, "lmc: prompt %d tok, %.1f tok/s | generated %d tok, %.1f tok/s | first token after %.0f ms\n",
                stats.n_prompt, stats.n_prompt / (stats.t_prompt_s > 0 ? stats.t_prompt_s : 1e-9), stats.n_generated,
                stats.n_generated > 1 ? (stats.n_generated - 1) / (stats.t_gen_s > 0 ? stats.t_gen_s : 1e-9) : 0.0,
                stats.t_prompt_s * 1e3);
    if (use_spec && n_predict > 0) cli_spec_print_stats(so, &sstats);
done:
    if (g.logits_f && fclose(g.logits_f) != 0 && rc == 0) { fprintf(stderr, "lmc: write error on %s\n", logits_out); rc = EXIT_RUNTIME; }
    free(g.ids);
    free(ids);
    lmc_detok_free(g.detok);
    lmc_tokenizer_free(tok);
    lmc_context_free(ctx);
    cli_spec_close(&spec);
    cli_free_model(&cm);
    return rc;
}

static const char *logits_help =
    "usage: lmc logits -m MODEL --ids 1,2,3 --out FILE\n"
    "\n"
    "Run one prefill pass and write the logits at every position:\n"
    "f32 little-endian [n_ids, vocab].\n"
    "\n"
    "  -m, --model MODEL   model directory or ORG/NAME\n"
    "      --ids LIST      comma-separated token ids\n"
    "      --out FILE      output file\n"
    "      --backend B, -t N, -b N (tokens per forward), --tp N (tensor parallel ranks), --compute f32|bf16\n"
    "\n"
    "example:\n"
    "  lmc logits -m tests/fixtures/llama --ids 5,17,42 --out /tmp/logits.f32\n";

int cmd_logits(int argc, char **argv) {
    cli_model_opts mo = {.tp_ok = 1};
    const char *ids_arg = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_parse_model_opt(&mo, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(logits_help, stdout); return 0; }
        else if (!strcmp(a, "--ids")) { if (!(ids_arg = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) { if (!(out = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else return cli_usage_error("logits", "unknown option '%s'", a);
    }
    if (!mo.model || !ids_arg || !out) return cli_usage_error("logits", "-m MODEL, --ids LIST and --out FILE are required");
    int32_t *ids = NULL;
    int n = cli_parse_ids(ids_arg, &ids);
    if (n < 0) return EXIT_USAGE;
    cli_model cm;
    int rc = cli_load_model(&mo, &cm);
    if (rc) { free(ids); return rc; }
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = mo.n_ctx ? mo.n_ctx : n;
    if (mo.n_batch) cp.n_batch = mo.n_batch;
    lmc_context *ctx = NULL;
    int32_t *pos = calloc((size_t)n, sizeof *pos), *seq = calloc((size_t)n, sizeof *seq);
    uint8_t *want = malloc((size_t)n);
    FILE *f = NULL;
    if (!pos || !seq || !want) { fprintf(stderr, "lmc: out of memory\n"); rc = EXIT_RUNTIME; goto done; }
    for (int i = 0; i < n; i++) { pos[i] = i; want[i] = 1; }
    if ((rc = cli_context_init(&cm, &cp, &ctx)) != 0) goto done;
    lmc_batch b = {.n_tokens = n, .token = ids, .pos = pos, .seq = seq, .want_logits = want};
    if (lmc_context_decode(ctx, &b) < 0) { rc = cli_error(NULL); goto done; }
    if (!(f = fopen(out, "wb"))) { fprintf(stderr, "lmc: cannot write %s\n", out); rc = EXIT_RUNTIME; goto done; }
    size_t total = (size_t)n * cm.model->cfg.vocab_size;
    if (fwrite(lmc_context_logits(ctx, 0), sizeof(float), total, f) != total || fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "lmc: write error on %s\n", out);
        rc = EXIT_RUNTIME;
        goto done;
    }
    f = NULL;
done:
    if (f) fclose(f);
    free(pos);
    free(seq);
    free(want);
    free(ids);
    lmc_context_free(ctx);
    cli_free_model(&cm);
    return rc;
}
