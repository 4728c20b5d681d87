/* cmd_serve.c — `lmc serve`: the OpenAI/Anthropic-compatible HTTP server on a
 * model (the demo model without -m). Runs until SIGINT or SIGTERM, then stops
 * cleanly: in-flight generations are cancelled and every thread is joined. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_spec.h"
#include "io/hfpath.h"
#include "server/server.h"
#include "tok/tokenizer.h"

static const char *serve_help =
    "usage: lmc serve [-m MODEL] [--host ADDR] [--port N] [--api-key KEY] [--alias NAME]\n"
    "                 [--ctx-size N] [--max-seqs N] [--max-queue N] [--max-body BYTES] [--timeout S]\n"
    "                 [--max-connections N] [--max-header BYTES] [--max-tokens N] [--threads N] [--batch N]\n"
    "                 [--backend cpu|cuda] [--tp N] [--no-mmap] [--mlock] [--compute f32|bf16] [--reasoning-format auto|none]\n"
    "                 [--spec ngram|draft|mtp [--draft-model P] [--draft-n N] [--ngram-min N] [--ngram-max N]]\n"
    "\n"
    "Serve a model over HTTP with OpenAI- and Anthropic-compatible routes:\n"
    "  POST /v1/chat/completions, /v1/completions, /v1/messages, /tokenize, /detokenize\n"
    "  GET  /v1/models, /health, /metrics (Prometheus)\n"
    "Without -m, the demo model. Defaults: 127.0.0.1:8080, 4 concurrent sequences,\n"
    "context min(model, 4096) per sequence, 64 queued requests, 1 MiB bodies, 32 KiB headers,\n"
    "128 connections, 60 s idle timeout (a body must also arrive within it), max_tokens up to the context.\n"
    "Binds to loopback unless --host says otherwise; see docs/SECURITY.md before exposing it.\n"
    "--port 0 picks a free port (printed on stderr). --api-key requires\n"
    "'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every route but /health.\n"
    "\n"
    "--reasoning-format auto (default): a thinking model's reasoning (\"<think> ... </think>\", gpt-oss's analysis\n"
    "channel) is returned apart: message.reasoning_content / delta.reasoning_content on /v1/chat/completions,\n"
    "thinking blocks on /v1/messages. none: everything the model writes is content. A request may say\n"
    "\"reasoning_format\": \"none\" or \"auto\" itself.\n"
    "\n"
    "--spec: each step drafts up to --draft-n tokens per sequence (ngram: prompt lookup; draft: a\n"
    "small model with the same tokenizer, --draft-model; mtp: a Gemma 4 assistant) and verifies\n"
    "them in the same batch (output and sampling distribution unchanged).\n"
    "--tp N: the model split over N ranks (GPUs with --backend cuda; CPU ranks otherwise), as for\n"
    "generate (docs/MULTIGPU.md); a --spec draft model runs on the host CPU beside them.\n"
    "\n"
    "example:\n"
    "  lmc serve -m Qwen/Qwen2.5-0.5B-Instruct --port 8080 --max-seqs 8\n";

int cmd_serve(int argc, char **argv) {
    cli_model_opts mo = {.tp_ok = 1};
    lmc_server_params sp = lmc_server_default_params();
    cli_spec_opts so = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long x;
        int r = cli_parse_model_opt(&mo, argc, argv, &i);
        if (r == 0) r = cli_parse_spec_opt(&so, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(serve_help, stdout); return 0; }
        else if (!strcmp(a, "--host")) { if (!(sp.host = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "--api-key")) { if (!(sp.api_key = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "--alias")) { if (!(sp.alias = cli_value(argc, argv, &i))) return EXIT_USAGE; }
        else if (!strcmp(a, "--port")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--port", 0, 65535, &x)) return EXIT_USAGE;
            sp.port = (int)x;
        } else if (!strcmp(a, "--ctx-size")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--ctx-size", 2, 1 << 24, &x)) return EXIT_USAGE;
            mo.n_ctx = (int)x;
        } else if (!strcmp(a, "--max-seqs")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--max-seqs", 1, 1024, &x)) return EXIT_USAGE;
            sp.n_seq = (int)x;
        } else if (!strcmp(a, "--max-queue")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--max-queue", 1, 1 << 20, &x)) return EXIT_USAGE;
            sp.max_queue = (int)x;
        } else if (!strcmp(a, "--max-body")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--max-body", 64, 1L << 34, &x)) return EXIT_USAGE;
            sp.max_body = (size_t)x;
        } else if (!strcmp(a, "--timeout")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--timeout", 1, 86400, &x)) return EXIT_USAGE;
            sp.timeout_s = (int)x;
        } else if (!strcmp(a, "--max-connections")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--max-connections", 1, 65536, &x)) return EXIT_USAGE;
            sp.max_connections = (int)x;
        } else if (!strcmp(a, "--max-header")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--max-header", 4096, 1L << 24, &x)) return EXIT_USAGE;
            sp.max_header = (size_t)x;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--max-tokens", 1, 1 << 24, &x)) return EXIT_USAGE;
            sp.max_tokens = (int)x;
        } else if (!strcmp(a, "--reasoning-format")) {
            if (!(v = cli_value(argc, argv, &i))) return EXIT_USAGE;
            if (strcmp(v, "auto") && strcmp(v, "none"))
                return cli_usage_error("serve", "--reasoning-format must be auto or none, not '%s'", v);
            sp.reasoning_none = !strcmp(v, "none");
        } else return cli_usage_error("serve", "unknown option '%s'", a);
    }
    if (!mo.model) mo.model = cli_demo_model();
    if (cli_spec_check(&so, &mo, "serve")) return EXIT_USAGE;
    if (cli_spec_on(&so)) {
        sp.spec_n_draft = so.n_draft;
        sp.spec_ngram_min = so.ngram_min;
        sp.spec_ngram_max = so.ngram_max;
    }
    /* Signals go to sigwait below, not to whichever thread runs; a closed socket is an error, not a kill. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    cli_model cm;
    int rc = cli_load_model(&mo, &cm);
    if (rc) return rc;
    lmc_tokenizer *tok = NULL;
    if ((rc = cli_load_tokenizer(cm.dir, &tok, 1)) != 0) { cli_free_model(&cm); return rc; }
    /* --spec draft: the draft model on the target's backend; --spec mtp: the assistant's path */
    lmc_model *draft = NULL;
    lmc_model_path dp;
    if (cli_spec_on(&so) && strcmp(so.kind, "ngram")) {
        if (lmc_hfpath_resolve(so.draft, &dp) < 0) rc = cli_error("draft model");
        else if (!strcmp(so.kind, "mtp")) sp.spec_mtp_path = dp.path;
        else if (lmc_model_load(dp.path, cm.be, &draft) < 0) rc = cli_error("draft model");
        else if (draft->cfg.vocab_size > cm.model->cfg.vocab_size) {
            fprintf(stderr, "lmc: draft model %s has a larger vocabulary (%d) than the target (%d)\n", dp.path,
                    draft->cfg.vocab_size, cm.model->cfg.vocab_size);
            rc = EXIT_RUNTIME;
        }
        sp.spec_draft_model = draft;
        if (rc) {
            lmc_model_free(draft);
            lmc_tokenizer_free(tok);
            cli_free_model(&cm);
            return rc;
        }
    }
    lmc_tp_params tp = lmc_tp_default_params();
    if (cm.tp > 1) { /* the scheduler's context runs over the ranks, as cli_context_init's */
        tp.n_ranks = cm.tp;
        tp.backend = cm.tp_backend;
        tp.n_threads = cm.tp_threads;
        sp.tp = &tp;
    }
    sp.model = cm.model;
    sp.tok = tok;
    sp.model_dir = cm.dir;
    sp.n_ctx = mo.n_ctx;
    sp.n_batch = mo.n_batch;
    lmc_server *srv = NULL;
    if (lmc_server_start(&sp, &srv) < 0) {
        rc = cli_error("serve");
    } else {
        fprintf(stderr, "lmc serve: listening on http://%s:%d (model %s, %d sequences)\n", sp.host,
                lmc_server_port(srv), cm.dir, sp.n_seq);
        fflush(stderr);
        int sig = 0;
        sigwait(&set, &sig);
        fprintf(stderr, "lmc serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        lmc_server_stop(srv);
        fprintf(stderr, "lmc serve: stopped\n");
    }
    lmc_tokenizer_free(tok);
    lmc_model_free(draft);
    cli_free_model(&cm);
    return rc;
}
