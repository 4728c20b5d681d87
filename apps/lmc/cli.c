/* cli.c — option parsing and model loading shared by the commands. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen/plan.h"
#include "gen/tp_context.h"
#include "io/file.h"
#include "io/gguf.h"
#include "io/gguf_tok.h"
#include "io/hfpath.h"
#include "tok/tokenizer.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "lmc %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see `lmc %s --help`)\n", cmd);
    return EXIT_USAGE;
}

int cli_error(const char *what) {
    const char *msg = lmc_last_error();
    fprintf(stderr, "lmc: %s%s%s\n", what ? what : "", what && *msg ? ": " : "", msg);
    return EXIT_RUNTIME;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "lmc: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_parse_int(const char *s, const char *what, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "lmc: %s must be an integer in [%ld, %ld], got '%s'\n", what, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *s, const char *what, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v != v) {
        fprintf(stderr, "lmc: %s must be a number, got '%s'\n", what, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_ids(const char *s, int32_t **ids) {
    int cap = 16, n = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "lmc: --ids expects comma-separated token ids, got '%s'\n", s);
            free(v);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) { free(v); return -1; }
            v = nv;
        }
        v[n++] = (int32_t)x;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p) {
            fprintf(stderr, "lmc: --ids expects comma-separated token ids, got '%s'\n", s);
            free(v);
            return -1;
        }
    }
    if (n == 0) {
        fprintf(stderr, "lmc: --ids is empty\n");
        free(v);
        return -1;
    }
    *ids = v;
    return n;
}

int cli_parse_model_opt(cli_model_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    long x;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        o->model = v;
    } else if (!strcmp(a, "--backend")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        o->backend = v;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(v, "--threads", 1, 1024, &x)) return -1;
        o->n_threads = (int)x;
    } else if (!strcmp(a, "--compute")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        if (strcmp(v, "f32") && strcmp(v, "bf16")) {
            fprintf(stderr, "lmc: --compute takes f32 or bf16, not '%s'\n", v);
            return -1;
        }
        o->compute = v;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(v, "--ctx", 1, 1 << 24, &x)) return -1;
        o->n_ctx = (int)x;
    } else if (!strcmp(a, "--tp")) {
        if (!o->tp_ok) {
            fprintf(stderr, "lmc: --tp is taken by generate, run, logits, bench and serve\n");
            return -1;
        }
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(v, "--tp", 1, 64, &x)) return -1;
        o->tp = (int)x;
    } else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(v, "--batch", 1, 1 << 16, &x)) return -1;
        o->n_batch = (int)x;
    } else if (!strcmp(a, "--mlock")) {
        lmc_file_set_lock(1); /* the weights stay resident: never paged out or reclaimed */
    } else if (!strcmp(a, "--no-mmap")) {
        lmc_file_set_copy(1); /* weights read into memory: a file changed later cannot fault them */
    } else {
        return 0;
    }
    return 1;
}

int cli_load_model(const cli_model_opts *o, cli_model *cm) {
    memset(cm, 0, sizeof *cm);
    lmc_model_path mp;
    if (lmc_hfpath_resolve(o->model, &mp) < 0) return cli_error(NULL);
    if (mp.is_file && !lmc_path_is_gguf(mp.path)) {
        fprintf(stderr, "lmc: %s is a single file but not GGUF; lmc loads Hugging Face model directories "
                        "(config.json + *.safetensors) or .gguf files\n", mp.path);
        return EXIT_RUNTIME;
    }
    snprintf(cm->dir, sizeof cm->dir, "%s", mp.path);
    /* the memory plan, from config.json and the headers, before any weight is read */
    lmc_config cfg;
    lmc_weights *wts = NULL;
    if (lmc_checkpoint_config(cm->dir, &cfg) < 0) return cli_error(NULL);
    /* the architecture's rules fill what the plan counts (falcon's multi-query KV heads, say);
     * an unknown architecture is refused with its own message by the load below */
    lmc_profile prof;
    (void)lmc_profile_resolve(&cfg, &prof);
    lmc_status pst = lmc_weights_open(cm->dir, &wts);
    if (pst >= 0) {
        int n_ctx = o->n_ctx ? o->n_ctx : (cfg.max_position_embeddings < 4096 ? cfg.max_position_embeddings : 4096);
        lmc_plan plan;
        lmc_plan_compute(&cfg, lmc_weights_total_bytes(wts), n_ctx, 1, o->n_batch ? o->n_batch : 256, &plan);
        pst = lmc_plan_check(&plan);
    }
    lmc_weights_close(wts);
    lmc_config_free(&cfg);
    if (pst < 0) return cli_error(NULL);
    /* bf16 weights are computed as their checkpoint's precision implies (activations rounded to bf16, as
     * PyTorch, llama.cpp and mlx compute them) unless --compute f32 asks for the exact F1 products */
    lmc_backend_params bp = {.name = o->backend ? o->backend : "cpu", .n_threads = o->n_threads,
                             .compute = o->compute ? o->compute : "bf16"};
    const int asked_bf16 = o->compute && !strcmp(o->compute, "bf16") && !strcmp(bp.name, "cpu");
    if (o->tp > 1) {
        /* tensor parallel: the checkpoint stays in host memory; each rank gets its own backend */
        cm->tp = o->tp;
        cm->tp_backend = bp.name;
        cm->tp_threads = o->n_threads;
        bp.name = "cpu";
        bp.n_threads = 1;
    }
    if (lmc_backend_init(&cm->be, &bp) < 0) return cli_error("backend");
    if (asked_bf16 && !lmc_backend_cpu_bf16_compute())
        fprintf(stderr, "lmc: --compute bf16: this CPU has no AVX-512 BF16 products; bf16 weights keep f32 ones\n");
    if (lmc_model_load(cm->dir, cm->be, &cm->model) < 0) {
        lmc_backend_free(cm->be);
        cm->be = NULL;
        return cli_error(NULL);
    }
    return 0;
}

int cli_context_init(const cli_model *cm, const lmc_context_params *cp, lmc_context **ctx) {
    lmc_status st;
    if (cm->tp > 1) {
        lmc_tp_params tp = lmc_tp_default_params();
        tp.n_ranks = cm->tp;
        tp.backend = cm->tp_backend;
        tp.n_threads = cm->tp_threads;
        st = lmc_context_init_tp(ctx, cm->model, cp, &tp);
    } else {
        st = lmc_context_init(ctx, cm->model, cp);
    }
    return st < 0 ? cli_error("context") : 0;
}

void cli_free_model(cli_model *cm) {
    lmc_model_free(cm->model);
    lmc_backend_free(cm->be);
    cm->model = NULL;
    cm->be = NULL;
}

/* A GGUF written by lmc convert carries tokenizer.json in tokenizer.huggingface.json. */
static int load_gguf_tokenizer(const char *path, lmc_tokenizer **tok, int required) {
    lmc_gguf *g;
    if (lmc_gguf_open(path, &g) < 0) return cli_error(NULL);
    const char *json = NULL;
    size_t len = 0;
    int rc = 0;
    char *gj = NULL, *gc = NULL; /* tokenizer.ggml.* rebuilt as tokenizer.json when the HF one is absent */
    if (lmc_gguf_get_str(g, "tokenizer.huggingface.json", &json, &len) < 0) {
        lmc_status st = lmc_gguf_tokenizer_json(g, &gj, &len, &gc);
        if (st == LMC_OK) {
            if (lmc_tokenizer_load_json(gj, len, gc, strlen(gc), tok) < 0) rc = cli_error("tokenizer");
        } else if (required) {
            fprintf(stderr, "lmc: %s: no usable tokenizer (%s): give the prompt as token ids with --ids\n", path,
                    lmc_last_error());
            rc = EXIT_RUNTIME;
        }
        free(gj);
        free(gc);
    } else if (lmc_tokenizer_load_json(json, len, NULL, 0, tok) < 0) {
        rc = cli_error("tokenizer");
    }
    lmc_gguf_close(g);
    return rc;
}

int cli_load_tokenizer(const char *dir, lmc_tokenizer **tok, int required) {
    char path[4200];
    *tok = NULL;
    if (lmc_path_is_gguf(dir)) return load_gguf_tokenizer(dir, tok, required);
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode)) /* a tokenizer.json file itself */
        return lmc_tokenizer_load(dir, tok) < 0 ? cli_error("tokenizer") : 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (!required) return 0;
        fprintf(stderr, "lmc: %s has no tokenizer.json: give the prompt as token ids with --ids\n", dir);
        return EXIT_RUNTIME;
    }
    fclose(f);
    if (lmc_tokenizer_load(dir, tok) < 0) return cli_error("tokenizer");
    return 0;
}

#ifndef LMC_DEMO_DIR
#define LMC_DEMO_DIR "models/demo"
#endif

const char *cli_demo_model(void) {
    const char *env = getenv("LMC_DEMO_MODEL");
    return env && *env ? env : LMC_DEMO_DIR;
}

const char *cli_sampler_help =
    "      --greedy          pick the most likely token\n"
    "      --temp T          sampling temperature (0 = greedy)\n"
    "      --top-k K         keep the K most likely tokens (0 = off)\n"
    "      --top-p P         nucleus sampling mass (1 = off)\n"
    "      --min-p M         drop tokens below M x the top probability (0 = off)\n"
    "      --repeat-penalty R  penalty on tokens of the last 64 (1 = off)\n"
    "      --seed S          random seed (default 0): same seed, same output\n";

int cli_parse_sampler_opt(lmc_sampler_params *sp, int argc, char **argv, int *i, int *set_temp, int *set_top_p) {
    const char *a = argv[*i], *v;
    long x;
    double d;
    if (!strcmp(a, "--greedy")) {
        sp->temperature = 0;
        if (set_temp) *set_temp = 1;
    } else if (!strcmp(a, "--temp")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_float(v, "--temp", &d)) return -1;
        sp->temperature = (float)d;
        if (set_temp) *set_temp = 1;
    } else if (!strcmp(a, "--top-k")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(v, "--top-k", 0, 1 << 24, &x)) return -1;
        sp->top_k = (int)x;
    } else if (!strcmp(a, "--top-p")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_float(v, "--top-p", &d)) return -1;
        sp->top_p = (float)d;
        if (set_top_p) *set_top_p = 1;
    } else if (!strcmp(a, "--min-p")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_float(v, "--min-p", &d)) return -1;
        sp->min_p = (float)d;
    } else if (!strcmp(a, "--repeat-penalty")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_float(v, "--repeat-penalty", &d)) return -1;
        sp->repetition_penalty = (float)d;
    } else if (!strcmp(a, "--seed")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(v, "--seed", 0, 0x7fffffffffffffffL, &x)) return -1;
        sp->seed = (uint64_t)x;
    } else {
        return 0;
    }
    return 1;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf) { buf[n] = 0; *len = n; }
    return buf;
}

void cli_progress(int done, int total, void *ud) {
    static int tty = -1;
    if (tty < 0) tty = isatty(STDERR_FILENO);
    if (!tty || total <= 0) return;
    const int width = 30, filled = (int)((long)done * width / total);
    fprintf(stderr, "\r%s [", ud ? (const char *)ud : "");
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : ' ', stderr);
    fprintf(stderr, "] %d/%d%s", done, total, done >= total ? "\n" : "");
    fflush(stderr);
}
