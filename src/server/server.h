/* server.h — lmc's HTTP server: OpenAI- and Anthropic-compatible routes over
 * a continuous-batching scheduler.
 *
 *     lmc_server_params p = lmc_server_default_params();
 *     p.model = m; p.tok = tok; p.model_dir = dir; p.port = 8080;
 *     lmc_server *srv;
 *     if (lmc_server_start(&p, &srv) < 0) fprintf(stderr, "%s\n", lmc_last_error());
 *     ... wait for a signal ...
 *     lmc_server_stop(srv);      // cancels in-flight requests, joins every thread
 *
 * The server borrows the model and tokenizer (they must outlive it) and owns
 * its scheduler, KV cache and HTTP daemon.
 */
#ifndef LMC_SERVER_SERVER_H
#define LMC_SERVER_SERVER_H

#include <stddef.h>

#include "gen/tp_context.h"
#include "model/model.h"
#include "tok/tokenizer.h"

typedef struct lmc_server_params {
    lmc_model *model;            /* borrowed */
    const lmc_tokenizer *tok;    /* borrowed, required */
    const char *model_dir;       /* for the chat template */
    const char *alias;           /* model id clients see (NULL: the directory's last component) */
    const char *host;            /* NULL: 127.0.0.1 */
    int port;                    /* 0: any free port (lmc_server_port tells which) */
    const char *api_key;         /* NULL: no authentication */
    int n_ctx;                   /* positions per sequence (0: model default) */
    int n_seq;                   /* concurrent sequences (0: 4) */
    int n_batch;                 /* tokens per scheduler step (0: 256) */
    int max_queue;               /* waiting requests before 503 (0: 64) */
    size_t max_body;             /* request body limit in bytes (0: 1 MiB) */
    int timeout_s;               /* idle connection timeout, and the time a body may take to arrive (0: 60) */
    int max_connections;         /* open connections; more are closed at once (0: 128) */
    size_t max_header;           /* per-connection memory for the request line and headers (0: 32 KiB; min 4 KiB):
                                  * larger headers are answered 431 */
    int max_tokens;              /* cap on a request's max_tokens (0: the context size) */
    int spec_n_draft;            /* > 0: speculative decoding, drafts per sequence and step (n-gram lookup
                                  * unless one of the two below is set) */
    int spec_ngram_min, spec_ngram_max; /* (0: 1 and 3) */
    lmc_model *spec_draft_model; /* borrowed: a draft model with the target's tokenizer */
    const char *spec_mtp_path;   /* a Gemma 4 assistant beside a gemma4 target */
    int reasoning_none;          /* 1: all output is content (--reasoning-format none); 0 (auto): reasoning
                                  * ("<think>", gpt-oss channels) is returned apart, per request overridable */
    const lmc_tp_params *tp;     /* borrowed; n_ranks > 1: tensor parallel (lmc_sched_params.tp) */
} lmc_server_params;

typedef struct lmc_server lmc_server;

lmc_server_params lmc_server_default_params(void);
lmc_status lmc_server_start(const lmc_server_params *p, lmc_server **out);
int lmc_server_port(const lmc_server *s);
/* Stop accepting, cancel what is in flight, join all threads, free. NULL is fine. */
void lmc_server_stop(lmc_server *s);

#endif
