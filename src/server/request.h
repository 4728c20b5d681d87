/* request.h — one generation request, shared by the HTTP side and the scheduler.
 *
 * The HTTP side fills the immutable part (prompt ids, sampling, limits, stop
 * strings), submits it, then reads results under `mu`: `out` grows with text
 * that can no longer turn into a stop string, and `done` ends it with a finish
 * reason and token counts. The scheduler owns the fields marked (sched).
 * References: the HTTP side and the scheduler each hold one; the last
 * lmc_srv_req_unref frees it.
 */
#ifndef LMC_SERVER_REQUEST_H
#define LMC_SERVER_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gen/sampler.h"
#include "jschema.h"
#include "jsonfsm.h"
#include "reason.h"
#include <cjson/cJSON.h>
#include "tok/tokenizer.h"

typedef enum lmc_srv_api { LMC_API_CHAT = 0, LMC_API_COMPLETION, LMC_API_MESSAGES, LMC_API_EMBEDDING } lmc_srv_api;

typedef enum lmc_pooling { LMC_POOL_NONE = 0, LMC_POOL_MEAN, LMC_POOL_LAST } lmc_pooling;

typedef enum lmc_finish {
    LMC_FINISH_NONE = 0,
    LMC_FINISH_STOP,      /* EOS token or a stop string */
    LMC_FINISH_LENGTH,    /* max_tokens or the context size */
    LMC_FINISH_CANCELLED, /* client gone or server shutting down */
    LMC_FINISH_ERROR,     /* decode failed: err holds the message */
} lmc_finish;

#define LMC_MAX_TOP_LOGPROBS 20

/* One sampled token's log-probability under the model (log-softmax of the raw logits)
 * and the most likely alternatives. */
typedef struct lmc_srv_logprob {
    int32_t id;
    float lp;
    int n_top;
    int32_t top_id[LMC_MAX_TOP_LOGPROBS];
    float top_lp[LMC_MAX_TOP_LOGPROBS];
} lmc_srv_logprob;

typedef struct lmc_srv_req {
    /* --- set before submission, read-only afterwards --- */
    lmc_srv_api api;
    int stream, include_usage;
    int32_t *prompt;              /* [n_prompt] owned */
    int n_prompt;
    int max_tokens;               /* ≥ 1 */
    lmc_sampler_params sp;
    float presence_penalty, frequency_penalty;
    int n_bias;
    int32_t *bias_id;             /* [n_bias] owned */
    float *bias_val;              /* [n_bias] owned */
    char **stop;                  /* [n_stop] owned, non-empty strings */
    int n_stop;
    int ignore_eos;
    int logprobs, top_logprobs;   /* record log-probabilities (top_logprobs ≤ LMC_MAX_TOP_LOGPROBS) */
    int json_mode;                /* response_format json_object: only tokens that keep valid JSON */
    lmc_pooling pooling;          /* embedding request: prefill only, pool the final hidden states */
    int tool_mode;                /* 0 no tools; 1 auto: parse calls from the reply; 2 forced: the reply is tool_name's
                                   * arguments; 3 required among several: the reply is {"name", "arguments"} */
    int tool_fmt;                 /* lmc_tool_fmt of the template (auto mode) */
    lmc_reason_fmt reason_fmt;    /* how the output splits into reasoning and content (OFF: all content) */
    char tool_name[128];
    char id[64];                  /* chatcmpl-…, cmpl-…, msg_… */
    char model[128];
    long created;

    /* --- shared, under mu --- */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    char *out;                    /* committed text (NUL-terminated): the content */
    size_t out_len, out_cap;
    char *rout;                   /* committed reasoning text (NUL-terminated; NULL: none yet) */
    size_t rout_len, rout_cap;
    int done;
    lmc_finish finish;
    int stop_index;               /* which stop string ended it (-1 none) */
    int n_gen;                    /* tokens sampled */
    int n_reasoning;              /* of those, tokens whose text is (or opens, closes or frames) the reasoning */
    int n_cached;                 /* prompt tokens whose KV was reused */
    char err[256];
    float *embedding;             /* [n_embd] L2-normalized, set before done (embedding requests) */
    int n_embd;
    lmc_srv_logprob *lps;         /* [n_lps] when logprobs */
    int n_lps, cap_lps;
    atomic_int cancelled;         /* set by the HTTP side; the scheduler retires the request */
    double t_submit, t_first_token, t_done;

    /* --- (sched) generation state --- */
    lmc_sampler *sampler;
    lmc_detok *detok;
    char *text;                   /* all generated text so far, [text_len] */
    size_t text_len, text_cap, committed;
    int *counts;                  /* [n_vocab] generated-token counts when penalties are on */
    lmc_jfsm js;                  /* JSON state of the output so far (json_mode) */
    lmc_jschema *schema;          /* owned; json_mode with a schema (response_format json_schema, tool parameters) */
    lmc_jsstate jss;              /* its state */
    cJSON *schema_doc;            /* owned: response_format's schema, checked in full at the end (oneOf) */
    int json_fed;                 /* tokens fed to the JSON state (0: the next token decodes as the first) */
    lmc_reason rs;                /* splits the detokenized output (initialized from the rendered prompt) */

    /* --- HTTP-side streaming state (only the connection's thread touches it) --- */
    void *conn;                   /* MHD connection, valid until the request completes */
    int phase;
    size_t sent;                  /* bytes of out already turned into events */
    size_t rsent;                 /* bytes of rout already turned into events */
    int lps_sent;                 /* logprob entries already sent */
    size_t tc_emitted;            /* auto tool mode: bytes of out streamed as content */
    int tc_hold;                  /* auto tool mode: a tool call began; the rest waits for the end */
    int block_open;               /* Anthropic stream: the text block has started */
    int blk_kind, blk_index;      /* Anthropic stream: the open block (0 none, 1 thinking, 2 text) and the next index */
    double hb_last;               /* when bytes last went to MHD (keep-alive comments while waiting) */
    char *pend;                   /* formatted bytes not yet handed to MHD */
    size_t pend_len, pend_off, pend_cap;
    const void *server;           /* the owning server (borrowed) */
} lmc_srv_req;

lmc_srv_req *lmc_srv_req_new(void);
void lmc_srv_req_ref(lmc_srv_req *r);
void lmc_srv_req_unref(lmc_srv_req *r);
/* Append text to r->out (caller holds r->mu). Returns 0, or -1 when out of memory. */
int lmc_srv_req_commit(lmc_srv_req *r, const char *text, size_t len);
/* Append reasoning text to r->rout (caller holds r->mu). Returns 0, or -1 when out of memory. */
int lmc_srv_req_commit_reasoning(lmc_srv_req *r, const char *text, size_t len);
/* Finish (caller holds r->mu): sets done, reason, time, and wakes readers. */
void lmc_srv_req_finish_locked(lmc_srv_req *r, lmc_finish f);
const char *lmc_finish_openai(lmc_finish f);

/* Auto tool mode: the text of out that is now safe to stream as content (no tool-call
 * marker can begin in it), from tc_emitted on; malloc'ed (NULL when none), *len its
 * bytes. Advances tc_emitted past it and sets tc_hold when a call has begun. */
char *lmc_srv_req_take_content(lmc_srv_req *r, size_t *len);

#endif
