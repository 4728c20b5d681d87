/* cmd_text.c — `lmc run` (the first-run experience) and `lmc tokenize`. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_spec.h"
#include "io/hfpath.h"
#include "io/jsonfile.h"
#include "tok/tokenizer.h"

static const char *run_help =
    "usage: lmc run [MODEL] [PROMPT] [-n N] [--tp N] [sampling options]\n"
    "\n"
    "Continue PROMPT with MODEL. Without MODEL, the demo model that ships with lmc\n"
    "(a small llama trained on the King James Bible) answers.\n"
    "Defaults: 160 tokens, temperature 0.8, top-p 0.95, repeat penalty 1.1, seed 0.\n"
    "\n"
    "examples:\n"
    "  lmc run\n"
    "  lmc run \"And the LORD said\"\n"
    "  lmc run Qwen/Qwen2.5-0.5B \"The capital of France is\" -n 32 --greedy\n"
    "\n"
    "sampling:\n";

static int is_model_arg(const char *s) {
    /* a directory, or ORG/NAME: contains a '/' and no spaces */
    return strchr(s, '/') && !strchr(s, ' ') && !strchr(s, '\n');
}

int cmd_run(int argc, char **argv) {
    cli_model_opts mo = {.tp_ok = 1};
    const char *prompt = NULL;
    long n_predict = 160;
    lmc_sampler_params sp = lmc_sampler_default_params();
    sp.temperature = 0.8f;
    sp.top_p = 0.95f;
    sp.repetition_penalty = 1.1f;
    cli_spec_opts so = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_parse_gen_opt(&mo, &sp, &so, run_help, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r == 2) return 0;
        if (r > 0) continue;
        if (!strcmp(a, "-n")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "-n", 1, 1 << 20, &n_predict)) return EXIT_USAGE;
        } else if (a[0] == '-' && a[1]) return cli_usage_error("run", "unknown option '%s'", a);
        else if (!mo.model && !prompt && is_model_arg(a) && i + 1 < argc) mo.model = a;
        else if (!mo.model && !prompt && is_model_arg(a) && i + 1 == argc) {
            /* one argument that looks like a path: a model if it exists, else a prompt */
            FILE *f = NULL;
            char cfg[4200];
            snprintf(cfg, sizeof cfg, "%s/config.json", a);
            if ((f = fopen(cfg, "r"))) { fclose(f); mo.model = a; }
            else if (lmc_path_is_gguf(a)) mo.model = a;
            else prompt = a;
        } else if (!prompt) prompt = a;
        else return cli_usage_error("run", "unexpected argument '%s'", a);
    }
    if (!mo.model) mo.model = cli_demo_model();
    if (!prompt) prompt = "In the beginning";
    if (cli_spec_check(&so, &mo, "run")) return EXIT_USAGE;
    return cli_generate_spec(&mo, prompt, NULL, (int)n_predict, &sp, 0, 0, NULL, 1, &so);
}

static const char *tokenize_help =
    "usage: lmc tokenize -m MODEL [--no-special] (TEXT | --file F | --jsonl F)\n"
    "\n"
    "Print the token ids of TEXT, space-separated. MODEL may be a directory that\n"
    "holds only tokenizer files. With --jsonl, each input line is one JSON string\n"
    "and each output line holds its ids.\n"
    "\n"
    "  --no-special   do not add BOS/EOS (as add_special_tokens=False)\n"
    "\n"
    "examples:\n"
    "  lmc tokenize -m Qwen/Qwen2.5-0.5B \"Hello world\"\n"
    "  lmc tokenize -m ./tok --jsonl lines.jsonl\n";

static int print_ids(const lmc_tokenizer *tok, const char *text, size_t len, int special) {
    int32_t *ids = NULL;
    int n = 0;
    if (lmc_tokenizer_encode(tok, text, len, special, &ids, &n) < 0) return cli_error("tokenize");
    for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    free(ids);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *jsonl = NULL, *text = NULL;
    int special = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(tokenize_help, stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(model = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "--file")) { if (!(file = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "--jsonl")) { if (!(jsonl = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "--no-special")) special = 0;
        else if (a[0] == '-' && a[1]) return cli_usage_error("tokenize", "unknown option '%s'", a);
        else if (!text) text = a;
        else return cli_usage_error("tokenize", "unexpected argument '%s'", a);
    }
    if (!model) return cli_usage_error("tokenize", "-m MODEL is required");
    if ((text != NULL) + (file != NULL) + (jsonl != NULL) != 1)
        return cli_usage_error("tokenize", "give exactly one of TEXT, --file F or --jsonl F");
    lmc_model_path mp;
    if (lmc_hfpath_resolve(model, &mp) < 0) return cli_error(NULL);
    lmc_tokenizer *tok;
    int trc = cli_load_tokenizer(mp.path, &tok, 1); /* a directory, tokenizer.json or .gguf */
    if (trc) return trc;
    int rc = 0;
    if (text) {
        rc = print_ids(tok, text, strlen(text), special);
    } else {
        size_t len = 0;
        char *buf = cli_read_file(file ? file : jsonl, &len);
        if (!buf) {
            fprintf(stderr, "lmc: cannot read %s\n", file ? file : jsonl);
            rc = EXIT_RUNTIME;
        } else if (file) {
            rc = print_ids(tok, buf, len, special);
        } else {
            int line_no = 0;
            for (char *line = buf; rc == 0 && line < buf + len;) {
                char *nl = memchr(line, '\n', (size_t)(buf + len - line));
                size_t ll = nl ? (size_t)(nl - line) : (size_t)(buf + len - line);
                line_no++;
                if (ll > 0) {
                    cJSON *j = NULL;
                    if (lmc_json_parse(line, ll, jsonl, &j) < 0 || !cJSON_IsString(j)) {
                        fprintf(stderr, "lmc: %s line %d: expected one JSON string\n", jsonl, line_no);
                        rc = EXIT_RUNTIME;
                    } else {
                        rc = print_ids(tok, j->valuestring, strlen(j->valuestring), special);
                    }
                    cJSON_Delete(j);
                }
                line = nl ? nl + 1 : buf + len;
            }
        }
        free(buf);
    }
    lmc_tokenizer_free(tok);
    return rc;
}
