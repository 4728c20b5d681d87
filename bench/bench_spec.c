/* bench_spec.c — speculative decoding: acceptance and wall-clock speedup against
 * plain greedy decoding, and the mechanical cost of verification, on any backend.
 *
 *   build/bench/bench_spec [--model DIR] [--draft DIR] [--gen N] [--threads N] [--blocks 2,4,8]
 *                          [--backend cpu|cuda] [--random H,L,HEADS,KV,INTER,VOCAB]
 *
 * --random writes (once, under /tmp) a random-weight bf16 llama of that shape and benches it
 * instead of the default pair, e.g. Llama-3.2-1B: --random 2048,16,32,8,8192,128256.
 *
 * Without --model it runs the demo model (models/demo) and a random-weight bf16
 * llama written once to /tmp/lmc-bench-spec-rand (hidden 768, 12 layers, 12/4
 * heads, intermediate 2048, vocab 8192: ~88M parameters), with a 2-layer random
 * model of the same vocabulary as its --draft. Per model it prints:
 *  - verify cost: wall time of one forward of k+1 rows over one of 1 row, at a
 *    fixed position (what a round of k drafts costs in target passes);
 *  - a table of plain greedy vs self-draft (the upper bound: every draft
 *    accepted), n-gram lookup on a repetitive prompt, and the draft model, each
 *    with drafted/accepted tokens, tokens per round, tok/s and the speedup.
 * Every speculative run is checked token-identical to plain greedy. A benchmark,
 * not a test: results go to docs/BENCHMARKS.md by hand.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tests/unit/tiny_model.h"
#include "gen/spec.h"
#include "tok/tokenizer.h"

typedef struct ids { int32_t *v; int n, cap; } ids;

static int collect(int32_t tok, const float *logits, int n_vocab, void *ud) {
    ids *o = ud;
    if (o->n < o->cap) o->v[o->n++] = tok;
    return 0;
}

static lmc_context *new_ctx(lmc_model *m, int n_ctx, int want_hidden) {
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n_ctx;
    cp.want_hidden = want_hidden;
    lmc_context *ctx = NULL;
    if (lmc_context_init(&ctx, m, &cp) < 0) fprintf(stderr, "context: %s\n", lmc_last_error());
    return ctx;
}

/* Forward of k+1 rows vs 1 row at position `at` (median of reps), as a ratio. */
static void verify_cost(lmc_model *m, const int32_t *prompt, int n_prompt, const int *blocks, int n_blocks) {
    lmc_context *ctx = new_ctx(m, n_prompt + 80, 0);
    if (!ctx) return;
    int32_t pos[128], seq[128], tok[128];
    uint8_t want[128];
    for (int i = 0; i < n_prompt; i++) { pos[i] = i; seq[i] = 0; }
    lmc_batch b = {.n_tokens = n_prompt, .token = prompt, .pos = pos, .seq = seq, .want_logits = NULL};
    if (lmc_context_decode(ctx, &b) < 0) { fprintf(stderr, "%s\n", lmc_last_error()); goto out; }
    double base = 0;
    printf("verify cost (one forward of k+1 rows / one of 1 row, at position %d; bound = speedup if all k\n"
           "drafts are accepted and drafting is free, (k+1) / ratio):\n\n| k | rows | ms | ratio | bound |\n|---|---|---|---|---|\n",
           n_prompt);
    for (int bi = -1; bi < n_blocks; bi++) {
        int k = bi < 0 ? 0 : blocks[bi];
        double t[7];
        for (int r = 0; r < 7; r++) {
            for (int i = 0; i <= k; i++) {
                tok[i] = prompt[i % n_prompt];
                pos[i] = n_prompt + i;
                seq[i] = 0;
                want[i] = 1;
            }
            lmc_kv_truncate(&ctx->kv, 0, n_prompt);
            lmc_batch vb = {.n_tokens = k + 1, .token = tok, .pos = pos, .seq = seq, .want_logits = want};
            double t0 = lmc_now_s();
            if (lmc_context_decode(ctx, &vb) < 0) { fprintf(stderr, "%s\n", lmc_last_error()); goto out; }
            (void)lmc_context_argmax(ctx, k); /* what a verification reads; waits for a GPU backend */
            t[r] = lmc_now_s() - t0;
        }
        for (int i = 0; i < 7; i++) /* median */
            for (int j = i + 1; j < 7; j++)
                if (t[j] < t[i]) { double x = t[i]; t[i] = t[j]; t[j] = x; }
        if (k == 0) base = t[3];
        printf("| %d | %d | %.2f | %.2f | %.2f |\n", k, k + 1, t[3] * 1e3, t[3] / base, (k + 1) / (t[3] / base));
    }
    printf("\n");
out:
    lmc_context_free(ctx);
}

typedef struct run_result { double tok_s, ms_round; int n_drafted, n_accepted, n_rounds, identical; } run_result;

static int run_one(lmc_model *m, lmc_draft_source *ds, int n_draft, const int32_t *prompt, int n_prompt, int n_gen,
                   const ids *ref, ids *out, run_result *res) {
    lmc_context *ctx = new_ctx(m, n_prompt + n_gen + 8, ds && (ds->flags & LMC_DRAFT_NEEDS_HIDDEN));
    if (!ctx) return -1;
    lmc_gen_params gp = {.n_predict = n_gen, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
    out->n = 0;
    lmc_status st;
    memset(res, 0, sizeof *res);
    if (ds) {
        lmc_spec_params spp = {.n_draft = n_draft};
        lmc_spec_stats ss;
        st = lmc_spec_generate(ctx, ds, prompt, n_prompt, &gp, &spp, collect, out, &ss);
        res->tok_s = (ss.gen.n_generated - 1) / ss.gen.t_gen_s;
        res->n_drafted = ss.n_drafted;
        res->n_accepted = ss.n_accepted;
        res->n_rounds = ss.n_rounds;
        res->ms_round = ss.n_rounds ? 1e3 * ss.t_verify_s / ss.n_rounds : 0;
    } else {
        lmc_gen_stats gs;
        st = lmc_generate(ctx, prompt, n_prompt, &gp, collect, out, &gs);
        res->tok_s = (gs.n_generated - 1) / gs.t_gen_s;
        res->ms_round = 1e3 * gs.t_gen_s / (gs.n_generated - 1);
    }
    if (st < 0) fprintf(stderr, "run: %s\n", lmc_last_error());
    res->identical = ref ? ref->n == out->n && !memcmp(ref->v, out->v, (size_t)out->n * sizeof *out->v) : 1;
    lmc_context_free(ctx);
    return st;
}

static void bench_model(const char *name, lmc_model *m, lmc_model *draft, const int32_t *prompt, int n_prompt,
                        const int32_t *rep_prompt, int n_rep, int n_gen, const int *blocks, int n_blocks) {
    printf("### %s\n\n", name);
    verify_cost(m, prompt, n_prompt, blocks, n_blocks);
    ids ref = {malloc((size_t)n_gen * sizeof(int32_t)), 0, n_gen}, out = {malloc((size_t)n_gen * sizeof(int32_t)), 0, n_gen};
    ids ref_rep = {malloc((size_t)n_gen * sizeof(int32_t)), 0, n_gen};
    run_result plain, plain_rep, r, r2, pl;
    run_one(m, NULL, 0, prompt, n_prompt, n_gen, NULL, &ref, &plain);
    run_one(m, NULL, 0, rep_prompt, n_rep, n_gen, NULL, &ref_rep, &plain_rep);
    printf("Each row: plain and speculative runs alternated twice, best of each; speedup = the two\n"
           "best tok/s measured in the same minute (the machine is shared).\n\n");
    printf("verify ms = target forward + acceptance per round, in the loop; plain ms = per token.\n\n");
    printf("| source | prompt | block | drafted | accepted | rate | tok/round | plain ms | verify ms | plain tok/s | spec tok/s | speedup | = plain |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int bi = 0; bi < n_blocks; bi++) {
        const int k = blocks[bi];
        struct { const char *src; lmc_model *dm; int rep; } cases[] = {
            {"self-draft", m, 0}, {"ngram 1..3", NULL, 1}, {"ngram 1..3", NULL, 0}, {"draft model", draft, 0}};
        for (int c = 0; c < 4; c++) {
            lmc_draft_source *ds = NULL;
            if (!strcmp(cases[c].src, "draft model") && !draft) continue;
            lmc_status st = cases[c].dm ? lmc_draft_model_init(&ds, cases[c].dm, n_prompt + n_rep + n_gen + 16)
                                        : lmc_draft_ngram_init(&ds, 1, 3);
            if (st < 0) { fprintf(stderr, "%s\n", lmc_last_error()); continue; }
            const int32_t *p = cases[c].rep ? rep_prompt : prompt;
            const int np = cases[c].rep ? n_rep : n_prompt;
            const ids *rf = cases[c].rep ? &ref_rep : &ref;
            double best_plain = 0, best_spec = 0, ms_plain = 0, ms_round = 0;
            int identical = 1;
            for (int rp = 0; rp < 2; rp++) {
                run_one(m, NULL, 0, p, np, n_gen, rf, &out, &pl);
                run_one(m, ds, k, p, np, n_gen, rf, &out, &r2);
                if (pl.tok_s > best_plain) { best_plain = pl.tok_s; ms_plain = pl.ms_round; }
                if (r2.tok_s > best_spec) { best_spec = r2.tok_s; ms_round = r2.ms_round; }
                identical &= r2.identical;
                r = r2;
            }
            printf("| %s | %s | %d | %d | %d | %.0f%% | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f | %s |\n", cases[c].src,
                   cases[c].rep ? "repetitive" : "normal", k, r.n_drafted, r.n_accepted,
                   r.n_drafted ? 100.0 * r.n_accepted / r.n_drafted : 0.0,
                   r.n_rounds ? (double)(n_gen - 1) / r.n_rounds : 0.0, ms_plain, ms_round, best_plain, best_spec,
                   best_spec / best_plain,
                   identical ? "yes" : "NO");
            fflush(stdout);
            lmc_draft_source_free(ds);
        }
    }
    printf("\n");
    free(ref.v);
    free(out.v);
    free(ref_rep.v);
}

static int write_random(const char *dir, int hidden, int layers, int heads, int kv_heads, int inter, int vocab,
                        unsigned seed) {
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    if (access(cfg, R_OK) == 0) return 0;
    mkdir(dir, 0755);
    tiny_opts o = tiny_default();
    o.vocab = vocab;
    o.hidden = hidden;
    o.layers = layers;
    o.heads = heads;
    o.kv_heads = kv_heads;
    o.head_dim = hidden / heads;
    o.inter = inter;
    o.bf16 = 1;
    o.max_pos = 4096;
    o.seed = seed;
    fprintf(stderr, "writing %s\n", dir);
    return tiny_model_write(dir, &o);
}

int main(int argc, char **argv) {
    const char *model = NULL, *draft_dir = NULL, *be_name = "cpu";
    int n_gen = 64, n_threads = 1, blocks[8] = {2, 4, 8}, n_blocks = 3, rnd[6] = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--draft") && i + 1 < argc) draft_dir = argv[++i];
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) be_name = argv[++i];
        else if (!strcmp(argv[i], "--random") && i + 1 < argc &&
                 sscanf(argv[++i], "%d,%d,%d,%d,%d,%d", &rnd[0], &rnd[1], &rnd[2], &rnd[3], &rnd[4], &rnd[5]) == 6 &&
                 rnd[0] > 0 && rnd[1] > 0 && rnd[2] > 0 && rnd[3] > 0 && rnd[4] > 0 && rnd[5] > 16 &&
                 rnd[0] % rnd[2] == 0 && rnd[2] % rnd[3] == 0) {
        }
        else if (!strcmp(argv[i], "--blocks") && i + 1 < argc) {
            n_blocks = 0;
            for (char *s = argv[++i]; *s && n_blocks < 8;) {
                blocks[n_blocks++] = (int)strtol(s, &s, 10);
                if (*s == ',') s++;
            }
        } else {
            fprintf(stderr, "usage: bench_spec [--model DIR] [--draft DIR] [--gen N] [--threads N] [--blocks 2,4,8]\n"
                            "                  [--backend cpu|cuda] [--random H,L,HEADS,KV,INTER,VOCAB]\n");
            return 2;
        }
    }
    if (n_gen < 2) n_gen = 2;
    lmc_backend *be;
    lmc_backend_params bp = {.name = be_name, .n_threads = n_threads};
    if (lmc_backend_init(&be, &bp) < 0) { fprintf(stderr, "%s\n", lmc_last_error()); return 1; }
    const char *models[2];
    const char *drafts[2] = {draft_dir, NULL};
    int n_models = 0;
    char rdir[128];
    if (model) models[n_models++] = model;
    else if (rnd[0]) {
        snprintf(rdir, sizeof rdir, "/tmp/lmc-bench-spec-%d-%d-%d-%d-%d-%d", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
        if (write_random(rdir, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], 3) != 0) {
            fprintf(stderr, "cannot write %s\n", rdir);
            return 1;
        }
        models[n_models++] = rdir;
    } else {
        models[n_models++] = "models/demo";
        if (write_random("/tmp/lmc-bench-spec-rand", 768, 12, 12, 4, 2048, 8192, 1) != 0 ||
            write_random("/tmp/lmc-bench-spec-rand-draft", 256, 2, 4, 2, 512, 8192, 2) != 0) {
            fprintf(stderr, "cannot write the random models\n");
            return 1;
        }
        models[n_models++] = "/tmp/lmc-bench-spec-rand";
        drafts[1] = "/tmp/lmc-bench-spec-rand-draft";
    }
    printf("bench_spec: backend %s, %d threads, %d generated tokens, greedy\n\n", be_name, n_threads, n_gen);
    for (int mi = 0; mi < n_models; mi++) {
        lmc_model *m = NULL, *dm = NULL;
        if (lmc_model_load(models[mi], be, &m) < 0) { fprintf(stderr, "%s\n", lmc_last_error()); return 1; }
        if (drafts[mi] && lmc_model_load(drafts[mi], be, &dm) < 0) { fprintf(stderr, "%s\n", lmc_last_error()); return 1; }
        /* a plain prompt, and a repetitive one (the same passage twice) */
        const char *text = "In the beginning God created the heaven and the earth. And the earth was without form, "
                           "and void; and darkness was upon the face of the deep.";
        int32_t *p = NULL, *rp = NULL;
        int np = 0, nrp = 0;
        lmc_tokenizer *tok = NULL;
        char tj[1100];
        snprintf(tj, sizeof tj, "%s/tokenizer.json", models[mi]);
        if (access(tj, R_OK) == 0 && lmc_tokenizer_load(models[mi], &tok) == 0 &&
            lmc_tokenizer_encode(tok, text, strlen(text), 1, &p, &np) == 0) {
            char twice[600];
            snprintf(twice, sizeof twice, "%s %s", text, text);
            lmc_tokenizer_encode(tok, twice, strlen(twice), 1, &rp, &nrp);
        } else {
            np = 32;
            p = malloc(np * sizeof *p);
            for (int i = 0; i < np; i++) p[i] = (int32_t)((i * 7919 + 13) % m->cfg.vocab_size);
            nrp = 64;
            rp = malloc(nrp * sizeof *rp);
            for (int i = 0; i < nrp; i++) rp[i] = p[i % 32];
        }
        lmc_tokenizer_free(tok);
        char name[1200];
        snprintf(name, sizeof name, "%s (%d layers, hidden %d, vocab %d%s%s)", models[mi], m->cfg.n_layers,
                 m->cfg.hidden_size, m->cfg.vocab_size, dm ? "; draft " : "", dm ? drafts[mi] : "");
        bench_model(name, m, dm, p, np, rp, nrp, n_gen, blocks, n_blocks);
        free(p);
        free(rp);
        lmc_model_free(dm);
        lmc_model_free(m);
    }
    lmc_backend_free(be);
    return 0;
}
