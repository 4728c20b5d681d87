/* cli.h — shared pieces of the lmc command-line tool (apps/ is the only
 * layer that prints usage or exits). Each command is `int cmd_x(int argc, char **argv)`
 * returning the process exit code: 0 ok, 1 runtime error, 2 usage error. */
#ifndef LMC_APPS_CLI_H
#define LMC_APPS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "gen/context.h"
#include "gen/sampler.h"
#include "model/model.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

/* Options every model-running command takes. */
typedef struct cli_model_opts {
    const char *model;     /* -m MODEL */
    const char *backend;   /* --backend cpu|cuda */
    int n_threads;         /* --threads N */
    const char *compute;   /* --compute f32|bf16 (NULL: bf16) */
    int n_ctx;             /* --ctx N */
    int n_batch;           /* --batch N */
    int tp;                /* --tp N: tensor parallel over N ranks (0/1: one backend) */
    int tp_ok;             /* set by a command that runs its context through cli_context_init */
} cli_model_opts;

/* A loaded model with its backend. */
typedef struct cli_model {
    char dir[4096];
    lmc_backend *be;
    lmc_model *model;
    int tp;                /* > 1: model is in host memory; contexts run over tp ranks of tp_backend */
    const char *tp_backend;
    int tp_threads;
} cli_model;

/* Parse a common option at argv[*i]; returns 1 if consumed (advancing *i), 0 if
 * not a common option, -1 on a usage error (message printed). */
int cli_parse_model_opt(cli_model_opts *o, int argc, char **argv, int *i);
/* Parse a sampling option at argv[*i] (--greedy --temp --top-k --top-p --min-p
 * --repeat-penalty --seed) into sp; like cli_parse_model_opt. Sets *set_temp when
 * --temp or --greedy was given and *set_top_p for --top-p (either may be NULL). */
int cli_parse_sampler_opt(lmc_sampler_params *sp, int argc, char **argv, int *i, int *set_temp, int *set_top_p);
/* The sampling options' help lines, for a command's --help. */
extern const char *cli_sampler_help;
/* A progress bar on stderr when it is a terminal (silent when piped); ud is the label. */
void cli_progress(int done, int total, void *ud);
/* Read a whole file (NUL-terminated, length in *len); NULL if it cannot be read. */
char *cli_read_file(const char *path, size_t *len);

/* The value after option argv[*i]; prints a usage error and returns NULL if missing. */
const char *cli_value(int argc, char **argv, int *i);
int cli_parse_int(const char *s, const char *what, long lo, long hi, long *out);
int cli_parse_float(const char *s, const char *what, double *out);
/* "1,2,3" → ids (malloc'ed). Returns count, or -1 with a message. */
int cli_parse_ids(const char *s, int32_t **ids);

int cli_load_model(const cli_model_opts *o, cli_model *cm);
void cli_free_model(cli_model *cm);
/* A context over cm's model: lmc_context_init, or with --tp N > 1 lmc_context_init_tp
 * (gen/tp_context.h). Returns 0 or prints the error and returns EXIT_RUNTIME. */
int cli_context_init(const cli_model *cm, const lmc_context_params *cp, lmc_context **ctx);
/* Print lmc_last_error() as one line and return EXIT_RUNTIME. */
int cli_error(const char *what);
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Load dir's tokenizer. required = 0: a missing tokenizer.json is not an error (*tok = NULL). */
struct lmc_tokenizer;
int cli_load_tokenizer(const char *dir, struct lmc_tokenizer **tok, int required);
/* Generate from text or ids and print text (or ids with print_ids), after the prompt when echo;
 * the shared body of generate and run. */
int cli_generate(const cli_model_opts *mo, const char *prompt, const char *ids_arg, int n_predict,
                 const lmc_sampler_params *sp, int ignore_eos, int print_ids, const char *logits_out, int echo);
/* The demo model's directory (LMC_DEMO_MODEL, else the one built in). */
const char *cli_demo_model(void);

int cmd_generate(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_verify_gguf(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* `lmc check --oracle` (cmd_check_oracle.c): F1 at tiny size with transformers' reference. */
int cli_check_oracle(const char *model_dir, const char *python);

#endif
