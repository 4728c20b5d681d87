/* cmd_chat.c — `lmc chat`: interactive multi-turn chat through the model's
 * chat template. Keeps the history; /clear, /system TEXT, /exit; Ctrl-C stops
 * the current reply but not the session. Works on a terminal or a pipe. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gen/generate.h"
#include "tok/chat.h"
#include "tok/tokenizer.h"

static const char *chat_help =
    "usage: lmc chat [-m MODEL] [--system TEXT] [-n N] [--ignore-eos] [sampling options]\n"
    "\n"
    "Chat with a model through its chat template. Without -m, the demo model.\n"
    "Commands: /clear (forget the conversation), /system TEXT (set the system\n"
    "message and clear), /exit. Ctrl-C stops the current reply; Ctrl-D or /exit quits.\n"
    "Defaults come from the model's generation_config.json, else temperature 0.7, top-p 0.9.\n"
    "--ignore-eos keeps a reply going past end-of-turn tokens, up to -n tokens.\n"
    "\n"
    "example:\n"
    "  lmc chat -m Qwen/Qwen2.5-0.5B-Instruct --system \"You are terse.\"\n"
    "\n"
    "sampling:\n";

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct reply {
    lmc_detok *detok;
    char *text;
    size_t len, cap;
    int32_t *ids;      /* generated ids (kept for the next turn's cached prefix) */
    int n_ids, cap_ids;
} reply;

static int on_token(int32_t tok, const float *logits, int n_vocab, void *ud) {
    reply *r = ud;
    (void)logits; (void)n_vocab;
    if (r->n_ids == r->cap_ids) {
        int cap = r->cap_ids ? 2 * r->cap_ids : 256;
        int32_t *p = realloc(r->ids, (size_t)cap * sizeof *p);
        if (!p) return 1;
        r->ids = p;
        r->cap_ids = cap;
    }
    r->ids[r->n_ids++] = tok;
    char *piece = NULL;
    size_t len = 0;
    if (lmc_detok_push(r->detok, tok, &piece, &len) < 0) return 1;
    if (r->len + len + 1 > r->cap) {
        size_t cap = (r->len + len + 1) * 2;
        char *t = realloc(r->text, cap);
        if (!t) { free(piece); return 1; }
        r->text = t;
        r->cap = cap;
    }
    memcpy(r->text + r->len, piece, len);
    r->len += len;
    r->text[r->len] = 0;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    free(piece);
    return interrupted;
}

static void add_message(cJSON *msgs, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
}

static void reset_messages(cJSON **msgs, const char *system) {
    cJSON_Delete(*msgs);
    *msgs = cJSON_CreateArray();
    if (system && *system) add_message(*msgs, "system", system);
}

int cmd_chat(int argc, char **argv) {
    cli_model_opts mo = {0};
    const char *system = NULL;
    long n_predict = 512;
    lmc_sampler_params sp = lmc_sampler_default_params();
    int have_temp = 0, have_top_p = 0, ignore_eos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_parse_model_opt(&mo, argc, argv, &i);
        if (r == 0) r = cli_parse_sampler_opt(&sp, argc, argv, &i, &have_temp, &have_top_p);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(chat_help, stdout); fputs(cli_sampler_help, stdout); return 0; }
        else if (!strcmp(a, "--system")) { if (!(system = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "-n")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "-n", 1, 1 << 20, &n_predict)) return EXIT_USAGE;
        } else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else return cli_usage_error("chat", "unknown option '%s'", a);
    }
    if (!mo.model) mo.model = cli_demo_model();
    cli_model cm;
    int rc = cli_load_model(&mo, &cm);
    if (rc) return rc;
    const lmc_config *c = &cm.model->cfg;
    if (!have_temp) sp.temperature = c->gen_temperature > 0 ? (float)c->gen_temperature : 0.7f;
    if (!have_top_p) sp.top_p = c->gen_top_p > 0 ? (float)c->gen_top_p : 0.9f;
    lmc_tokenizer *tok = NULL;
    char *tmpl = NULL;
    lmc_context *ctx = NULL;
    cJSON *msgs = NULL;
    char *line = NULL;
    int32_t *cached = NULL; /* token ids in the KV cache for sequence 0 */
    int n_cached = 0;
    size_t line_cap = 0;
    if ((rc = cli_load_tokenizer(cm.dir, &tok, 1)) != 0) goto done;
    if (lmc_chat_template_load(cm.dir, NULL, 0, &tmpl) < 0) { rc = cli_error("chat template"); goto done; }
    lmc_context_params cp = lmc_context_default_params();
    if (mo.n_ctx) cp.n_ctx = mo.n_ctx;
    if (lmc_context_init(&ctx, cm.model, &cp) < 0) { rc = cli_error("context"); goto done; }

    struct sigaction sa = {0};
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read at the prompt returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    int tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    if (tty) fprintf(stderr, "lmc chat — %s. /exit to quit, /clear to start over, Ctrl-C stops a reply.\n", cm.dir);
    reset_messages(&msgs, system);
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        interrupted = 0;
        errno = 0;
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) {
            if (errno == EINTR) { clearerr(stdin); if (tty) fputc('\n', stdout); continue; }
            break; /* end of input */
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/clear")) { reset_messages(&msgs, system); fputs("(conversation cleared)\n", stdout); continue; }
        if (!strncmp(line, "/system", 7) && (line[7] == ' ' || line[7] == 0)) {
            static char sysbuf[8192];
            snprintf(sysbuf, sizeof sysbuf, "%s", line[7] ? line + 8 : "");
            system = sysbuf;
            reset_messages(&msgs, system);
            fputs("(system message set; conversation cleared)\n", stdout);
            continue;
        }
        add_message(msgs, "user", line);
        lmc_chat_params chp = lmc_chat_default_params();
        chp.messages = msgs;
        chp.add_generation_prompt = 1;
        chp.bos_token = lmc_tokenizer_bos_token(tok);
        chp.eos_token = lmc_tokenizer_eos_token(tok);
        char *prompt = NULL;
        size_t plen = 0;
        int32_t *ids = NULL;
        int n_ids = 0;
        if (lmc_chat_render(tmpl, &chp, &prompt, &plen) < 0 || lmc_tokenizer_encode_chat(tok, prompt, plen, &ids, &n_ids) < 0) {
            cli_error("chat template");
            free(prompt);
            cJSON_DeleteItemFromArray(msgs, cJSON_GetArraySize(msgs) - 1);
            continue;
        }
        free(prompt);
        int room = ctx->kv.n_ctx - n_ids;
        if (room <= 0) {
            fprintf(stderr, "lmc: the conversation (%d tokens) fills the context (%d); /clear to start over\n", n_ids,
                    ctx->kv.n_ctx);
            free(ids);
            cJSON_DeleteItemFromArray(msgs, cJSON_GetArraySize(msgs) - 1);
            continue;
        }
        reply r = {0};
        lmc_detok_init(&r.detok, tok, 1);
        /* the conversation so far is in the cache: only what differs is prefilled */
        int common = 0;
        while (common < n_cached && common < n_ids && cached[common] == ids[common]) common++;
        lmc_gen_params gp = {.n_predict = room < n_predict ? room : (int)n_predict, .stop_ids = c->eos_token_ids,
                             .n_stop = c->n_eos, .ignore_eos = ignore_eos, .n_reuse = common, .fn_no_logits = 1,
                             .sampler = sp};
        lmc_status st = lmc_generate(ctx, ids, n_ids, &gp, on_token, &r, NULL);
        /* the cache now holds the prompt and every generated token but the last */
        n_cached = 0;
        int32_t *nc = st >= 0 ? realloc(cached, (size_t)(n_ids + r.n_ids) * sizeof *nc) : NULL;
        if (nc) {
            cached = nc;
            memcpy(cached, ids, (size_t)n_ids * sizeof *cached);
            if (r.n_ids > 1) memcpy(cached + n_ids, r.ids, (size_t)(r.n_ids - 1) * sizeof *cached);
            n_cached = n_ids + (r.n_ids > 1 ? r.n_ids - 1 : 0);
        }
        free(r.ids);
        char *rest = NULL;
        size_t rlen = 0;
        if (lmc_detok_flush(r.detok, &rest, &rlen) == 0 && rlen) fwrite(rest, 1, rlen, stdout);
        free(rest);
        fputc('\n', stdout);
        if (interrupted) fputs("(stopped)\n", stdout);
        fflush(stdout);
        if (st < 0) cli_error(NULL);
        add_message(msgs, "assistant", r.text ? r.text : "");
        free(r.text);
        lmc_detok_free(r.detok);
        free(ids);
    }
done:
    free(cached);
    free(line);
    cJSON_Delete(msgs);
    free(tmpl);
    lmc_context_free(ctx);
    lmc_tokenizer_free(tok);
    cli_free_model(&cm);
    return rc;
}
