/* cli_spec.c — option parsing and draft-source setup for speculative decoding. */
#include "cli_spec.h"

#include <stdlib.h>
#include <string.h>

#include "io/hfpath.h"

const char *cli_spec_help =
    "speculative decoding (same greedy output, same sampling distribution, fewer target passes):\n"
    "      --spec KIND       ngram (prompt lookup), draft (a small model, --draft-model) or\n"
    "                        mtp (a Gemma 4 assistant beside a gemma4 target, --draft-model)\n"
    "      --draft-model P   the draft model (same tokenizer) or the MTP assistant; alone: --spec draft\n"
    "      --draft-n N       tokens drafted per round at most (default 4)\n"
    "      --ngram-min N     shortest history suffix the ngram source matches (default 1)\n"
    "      --ngram-max N     longest history suffix it tries first (default 3)\n";

int cli_parse_gen_opt(cli_model_opts *mo, lmc_sampler_params *sp, cli_spec_opts *so, const char *help, int argc,
                      char **argv, int *i) {
    int r = cli_parse_model_opt(mo, argc, argv, i);
    if (r == 0) r = cli_parse_sampler_opt(sp, argc, argv, i, NULL, NULL);
    if (r == 0) r = cli_parse_spec_opt(so, argc, argv, i);
    if (r != 0) return r < 0 ? -1 : 1;
    if (strcmp(argv[*i], "-h") && strcmp(argv[*i], "--help")) return 0;
    fputs(help, stdout);
    fputs(cli_sampler_help, stdout);
    fputs("\n", stdout);
    fputs(cli_spec_help, stdout);
    return 2;
}

int cli_parse_spec_opt(cli_spec_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    long x;
    if (!strcmp(a, "--spec")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        o->kind = v;
    } else if (!strcmp(a, "--draft-model") || !strcmp(a, "--draft")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        o->draft = v;
    } else if (!strcmp(a, "--draft-n")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(v, "--draft-n", 1, 64, &x)) return -1;
        o->n_draft = (int)x;
    } else if (!strcmp(a, "--ngram-min")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(v, "--ngram-min", 1, 64, &x)) return -1;
        o->ngram_min = (int)x;
    } else if (!strcmp(a, "--ngram-max")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(v, "--ngram-max", 1, 64, &x)) return -1;
        o->ngram_max = (int)x;
    } else {
        return 0;
    }
    return 1;
}

int cli_spec_on(const cli_spec_opts *o) { return o && o->kind != NULL; }

int cli_spec_check(cli_spec_opts *o, const cli_model_opts *mo, const char *cmd) {
    if (!o->kind && o->draft) o->kind = "draft";
    if (!o->kind) {
        if (o->n_draft || o->ngram_min || o->ngram_max)
            return cli_usage_error(cmd, "--draft-n and --ngram-* need --spec ngram|draft|mtp");
        return 0;
    }
    if (strcmp(o->kind, "ngram") && strcmp(o->kind, "draft") && strcmp(o->kind, "mtp"))
        return cli_usage_error(cmd, "--spec takes ngram, draft or mtp, not '%s'", o->kind);
    if (!strcmp(o->kind, "ngram") && o->draft) return cli_usage_error(cmd, "--spec ngram takes no --draft-model");
    if (strcmp(o->kind, "ngram") && !o->draft) return cli_usage_error(cmd, "--spec %s needs --draft-model PATH", o->kind);
    if (strcmp(o->kind, "ngram") && (o->ngram_min || o->ngram_max))
        return cli_usage_error(cmd, "--ngram-min/--ngram-max belong to --spec ngram");
    if (!o->n_draft) o->n_draft = lmc_spec_default_params().n_draft;
    if (!o->ngram_min) o->ngram_min = 1;
    if (!o->ngram_max) o->ngram_max = o->ngram_min > 3 ? o->ngram_min : 3;
    if (o->ngram_min > o->ngram_max) return cli_usage_error(cmd, "--ngram-min is above --ngram-max");
    /* the assistant reads the target's KV of whole layers and its hidden state: one device only */
    if (mo->tp > 1 && !strcmp(o->kind, "mtp")) return cli_usage_error(cmd, "--spec mtp does not run with --tp");
    if (mo->n_batch && mo->n_batch <= o->n_draft)
        return cli_usage_error(cmd, "--batch (%d) must be above --draft-n (%d)", mo->n_batch, o->n_draft);
    return 0;
}

int cli_spec_open(const cli_spec_opts *o, cli_model *cm, int n_ctx, cli_spec *out) {
    memset(out, 0, sizeof *out);
    lmc_status st;
    if (!strcmp(o->kind, "ngram")) {
        st = lmc_draft_ngram_init(&out->ds, o->ngram_min, o->ngram_max);
        return st < 0 ? cli_error("ngram source") : 0;
    }
    lmc_model_path mp;
    if (lmc_hfpath_resolve(o->draft, &mp) < 0) return cli_error("draft model");
    if (!strcmp(o->kind, "mtp")) {
        st = lmc_draft_mtp_init(&out->ds, mp.path, cm->model);
        return st < 0 ? cli_error("mtp assistant") : 0;
    }
    /* draft: a second model on the target's backend */
    if (lmc_model_load(mp.path, cm->be, &out->draft) < 0) return cli_error("draft model");
    const lmc_config *dc = &out->draft->cfg, *tc = &cm->model->cfg;
    if (dc->vocab_size > tc->vocab_size) {
        fprintf(stderr, "lmc: draft model %s has a larger vocabulary (%d) than the target (%d): it needs the target's tokenizer\n",
                mp.path, dc->vocab_size, tc->vocab_size);
        cli_spec_close(out);
        return EXIT_RUNTIME;
    }
    st = lmc_draft_model_init(&out->ds, out->draft, n_ctx + o->n_draft);
    if (st < 0) {
        cli_spec_close(out);
        return cli_error("draft model");
    }
    return 0;
}

void cli_spec_close(cli_spec *s) {
    lmc_draft_source_free(s->ds);
    lmc_model_free(s->draft);
    memset(s, 0, sizeof *s);
}

void cli_spec_print_stats(const cli_spec_opts *o, const lmc_spec_stats *st) {
    fprintf(stderr, "lmc: spec %s (block %d): drafted %d, accepted %d (%.1f%%) in %d rounds, %.2f tok/round | "
                    "draft %.0f ms, verify %.0f ms\n",
            o->kind, o->n_draft, st->n_drafted, st->n_accepted,
            st->n_drafted ? 100.0 * st->n_accepted / st->n_drafted : 0.0, st->n_rounds,
            st->n_rounds ? (double)(st->gen.n_generated - 1) / st->n_rounds : 0.0, st->t_draft_s * 1e3,
            st->t_verify_s * 1e3);
}
