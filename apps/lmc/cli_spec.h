/* cli_spec.h — speculative decoding on the command line: the --spec, --draft-model,
 * --draft-n and --ngram-* options of generate and run, the draft source they build
 * beside a loaded target, and the statistics line. */
#ifndef LMC_APPS_CLI_SPEC_H
#define LMC_APPS_CLI_SPEC_H

#include "cli.h"
#include "gen/spec.h"

typedef struct cli_spec_opts {
    const char *kind;        /* --spec ngram|draft|mtp (NULL: plain decoding; --draft-model alone: draft) */
    const char *draft;       /* --draft-model / --draft PATH: the draft model, or the MTP assistant */
    int n_draft;             /* --draft-n N: tokens drafted per round at most (0: 4) */
    int ngram_min, ngram_max;/* --ngram-min / --ngram-max (0: 1 and 3) */
} cli_spec_opts;

/* A draft source opened beside a target (and the draft model it owns, for --spec draft). */
typedef struct cli_spec {
    lmc_draft_source *ds;
    lmc_model *draft;
} cli_spec;

extern const char *cli_spec_help;
/* Like cli_parse_model_opt, for the options above. */
int cli_parse_spec_opt(cli_spec_opts *o, int argc, char **argv, int *i);
/* The options every generating command shares: model, sampler and speculation options, and
 * -h/--help (prints help, then the sampler and speculation help). -1 usage error (printed),
 * 1 consumed, 2 help printed (the command returns 0), 0 not one of them. */
int cli_parse_gen_opt(cli_model_opts *mo, lmc_sampler_params *sp, cli_spec_opts *so, const char *help, int argc,
                      char **argv, int *i);
/* Fill defaults and check the combination; 0, or a usage error printed and EXIT_USAGE. */
int cli_spec_check(cli_spec_opts *o, const cli_model_opts *mo, const char *cmd);
/* 1 when the options ask for speculative decoding. */
int cli_spec_on(const cli_spec_opts *o);
/* Open the draft source for target cm (n_ctx: positions the run needs). 0, or EXIT_RUNTIME printed. */
int cli_spec_open(const cli_spec_opts *o, cli_model *cm, int n_ctx, cli_spec *out);
void cli_spec_close(cli_spec *s);
/* One stderr line: source, drafted/accepted tokens, acceptance rate, rounds, draft/verify time. */
void cli_spec_print_stats(const cli_spec_opts *o, const lmc_spec_stats *st);

/* cli_generate with speculative options (NULL or off: plain decoding). */
int cli_generate_spec(const cli_model_opts *mo, const char *prompt, const char *ids_arg, int n_predict,
                      const lmc_sampler_params *sp, int ignore_eos, int print_ids, const char *logits_out, int echo,
                      const cli_spec_opts *spec);

#endif
