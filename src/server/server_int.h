/* server_int.h — what the server's modules share: the server object, error
 * replies, a growable byte buffer, request-field readers and the per-API
 * entry points (openai.c, anthropic.c). Internal to src/server/.
 */
#ifndef LMC_SERVER_INT_H
#define LMC_SERVER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include <microhttpd.h>
#include "request.h"
#include "sched.h"
#include "server.h"
#include "tok/jinja.h"

/* An error reply: HTTP status, OpenAI-style type/param/code, and a message. */
typedef struct lmc_srv_error {
    int status;
    const char *type;     /* invalid_request_error, authentication_error, not_found_error, … */
    const char *code;     /* NULL or e.g. "context_length_exceeded" */
    char param[64];       /* offending field or "" */
    char msg[512];
} lmc_srv_error;

/* Fill e and return -1, so parsers read: `return srv_err(e, 400, "messages", "…")`. */
int srv_err(lmc_srv_error *e, int status, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

typedef struct lmc_sbuf { char *p; size_t len, cap; int oom; } lmc_sbuf;
void sbuf_add(lmc_sbuf *b, const char *s, size_t n);
void sbuf_puts(lmc_sbuf *b, const char *s);
void sbuf_printf(lmc_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "event: NAME\n" (when name) + "data: JSON\n\n"; consumes j. */
void sbuf_sse(lmc_sbuf *b, const char *event, cJSON *j);

#define LMC_STATUS_SLOTS 600
#define LMC_N_ROUTES 11
struct lmc_server {
    lmc_server_params p;
    struct MHD_Daemon *daemon;
    lmc_sched *sched;
    lmc_jinja_template *tmpl;     /* chat template, parsed once (NULL: none) */
    lmc_jinja_template *tmpl_tools; /* the template used when a request has tools (often the same text) */
    int tool_fmt;                 /* lmc_tool_fmt the tools template asks for */
    lmc_reason_fmt reason_fmt;    /* the model's reasoning format (requests use it unless reasoning_format is none) */
    lmc_pooling pooling;          /* how /v1/embeddings pools (sentence-transformers config, else mean) */
    char model_id[128];
    int port;
    atomic_int stopping;
    atomic_int active;            /* requests between their headers and MHD's completion callback */
    long started_at;
    pthread_mutex_t mu;           /* guards the counters below */
    uint64_t by_status[LMC_STATUS_SLOTS];
    uint64_t by_route[LMC_N_ROUTES];   /* by enum route in http.c; the last is "other" */
};

/* ---- request fields (sjson.c): each returns 0, 1 when absent, -1 with e filled ---- */
int jf_number(const cJSON *o, const char *key, double lo, double hi, double *out, lmc_srv_error *e);
int jf_int(const cJSON *o, const char *key, long lo, long hi, long *out, lmc_srv_error *e);
int jf_bool(const cJSON *o, const char *key, int *out, lmc_srv_error *e);
int jf_string(const cJSON *o, const char *key, const char **out, lmc_srv_error *e);
/* Reject keys not in `known` (NULL-terminated)? No: unknown keys are ignored, as OpenAI's
 * SDKs send extras. Stop strings: a string or list of ≤ max strings. */
int jf_stop(const cJSON *o, const char *key, int max, lmc_srv_req *r, lmc_srv_error *e);
/* Sampling fields shared by the OpenAI routes and /v1/messages (temperature, top_p, top_k,
 * min_p, seed, penalties, logit_bias when allowed). */
int jf_sampling(const lmc_server *s, const cJSON *o, int openai, lmc_srv_req *r, lmc_srv_error *e);
/* Render messages ({role, content string or text parts, tool_calls?, tool_call_id?, name?}) and
 * tools (NULL: none) through the chat template and tokenize into r->prompt. */
int srv_render_chat(const lmc_server *s, const cJSON *messages, const cJSON *tools, lmc_srv_req *r, lmc_srv_error *e);
/* Check prompt + max_tokens against the context; default max_tokens to the room left. */
int srv_check_length(const lmc_server *s, lmc_srv_req *r, long max_tokens, int have_max, const char *param,
                     lmc_srv_error *e);
void srv_make_id(char *out, size_t cap, const char *prefix);
/* reasoning_format of a chat request ("auto" or "none"; absent: the server's) into r->reason_fmt. */
int srv_reasoning_format(const lmc_server *s, const cJSON *root, lmc_srv_req *r, lmc_srv_error *e);

/* ---- OpenAI routes (openai.c) ---- */
int openai_parse_chat(const lmc_server *s, const cJSON *root, lmc_srv_req *r, lmc_srv_error *e);
int openai_parse_completion(const lmc_server *s, const cJSON *root, lmc_srv_req *r, lmc_srv_error *e);
char *openai_final_body(const lmc_server *s, lmc_srv_req *r);
/* Append the SSE events for new reasoning (rtext), new text (and for the end when done) to b. */
void openai_stream(const lmc_server *s, lmc_srv_req *r, const char *rtext, size_t rn, const char *text, size_t n, int done,
                   lmc_sbuf *b);
char *openai_models_body(const lmc_server *s);
char *openai_model_body(const lmc_server *s);   /* GET /v1/models/{id} */
/* /v1/embeddings: one request per input (*reqs, *n malloc'ed; each to be submitted), and the reply. */
int openai_parse_embeddings(const lmc_server *s, const cJSON *root, lmc_srv_req ***reqs, int *n, int *base64, int *dims,
                            lmc_srv_error *e);
char *openai_embeddings_body(const lmc_server *s, lmc_srv_req **reqs, int n, int base64, int dims);

/* tool_choice required/any over several tools: r decodes {"name": one of the tools, "arguments": {...}}
 * under a schema built from the tools (OpenAI-form list). Sets tool_mode 3. */
int srv_require_any_tool(const cJSON *tools, lmc_srv_req *r, lmc_srv_error *e);

/* The reply (from byte `from` of r->out) as tool calls: forced mode always; auto mode when the
 * template's format parses. Returns OpenAI tool_calls items ({id, type, function: {name,
 * arguments}}) or NULL; *content gets the remaining text (malloc'ed or NULL). */
cJSON *srv_reply_tool_calls(const lmc_srv_req *r, size_t from, char **content);

/* ---- Anthropic /v1/messages (anthropic.c) ---- */
int anthropic_parse(const lmc_server *s, const cJSON *root, lmc_srv_req *r, lmc_srv_error *e);
char *anthropic_final_body(const lmc_server *s, lmc_srv_req *r);
void anthropic_stream(const lmc_server *s, lmc_srv_req *r, const char *rtext, size_t rn, const char *text, size_t n, int done,
                      lmc_sbuf *b);

/* ---- metrics.c ---- */
char *metrics_body(lmc_server *s);

#endif
