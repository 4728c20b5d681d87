/* http.c — the HTTP front of the server on libmicrohttpd: one thread per
 * connection, routing, the body-size limit, authentication, JSON error replies
 * (OpenAI style, Anthropic style on /v1/messages), waiting on and streaming
 * generation results, client-disconnect cancellation, start and stop.
 * Owns the daemon, the scheduler and the parsed chat template.
 */
#include "server_int.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "stop.h"
#include "tools.h"
#include "tok/chat.h"

enum route { R_HEALTH, R_MODELS, R_CHAT, R_COMPLETIONS, R_MESSAGES, R_TOKENIZE, R_DETOKENIZE, R_METRICS, R_EMBEDDINGS,
             R_COUNT_TOKENS, R_NONE };
_Static_assert(R_NONE + 1 == LMC_N_ROUTES, "one counter per route");

static const struct { const char *path, *method; enum route r; } routes[] = {
    {"/health", "GET", R_HEALTH},
    {"/v1/models", "GET", R_MODELS},
    {"/v1/chat/completions", "POST", R_CHAT},
    {"/v1/completions", "POST", R_COMPLETIONS},
    {"/v1/messages", "POST", R_MESSAGES},
    {"/tokenize", "POST", R_TOKENIZE},
    {"/detokenize", "POST", R_DETOKENIZE},
    {"/metrics", "GET", R_METRICS},
    {"/v1/embeddings", "POST", R_EMBEDDINGS},
    {"/v1/messages/count_tokens", "POST", R_COUNT_TOKENS},
};

typedef struct conn {
    lmc_sbuf body;
    int too_large;
    double t_headers;     /* when the headers were complete: the body must follow within timeout_s */
    lmc_srv_req *req;     /* generation in progress (this connection's reference) */
} conn;

lmc_server_params lmc_server_default_params(void) {
    lmc_server_params p = {0};
    p.host = "127.0.0.1";
    p.port = 8080;
    p.n_seq = 4;
    p.max_queue = 64;
    p.max_body = 1 << 20;
    p.timeout_s = 60;
    p.max_connections = 128;
    p.max_header = 32 * 1024;
    return p;
}

int lmc_server_port(const lmc_server *s) { return s->port; }

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void count_status(lmc_server *s, int status, enum route r) {
    pthread_mutex_lock(&s->mu);
    if (status >= 0 && status < LMC_STATUS_SLOTS) s->by_status[status]++;
    s->by_route[r]++;
    pthread_mutex_unlock(&s->mu);
}

static enum MHD_Result reply(lmc_server *s, struct MHD_Connection *c, enum route r, int status, char *body,
                             const char *ctype, int retry_after) {
    if (!body) { body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}"); status = 500; }
    if (!body) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) { free(body); return MHD_NO; }
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*"); /* browser front ends */
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (status == 405) {
        for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
            if (routes[i].r == r) MHD_add_response_header(resp, "Allow", routes[i].method);
    }
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    count_status(s, status, r);
    return ret;
}

static enum MHD_Result reply_json(lmc_server *s, struct MHD_Connection *c, enum route r, int status, cJSON *j) {
    char *body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return reply(s, c, r, status, body, "application/json", 0);
}

static const char *anthropic_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static enum MHD_Result reply_error(lmc_server *s, struct MHD_Connection *c, enum route r, const lmc_srv_error *e) {
    cJSON *j = cJSON_CreateObject();
    if (r == R_MESSAGES || r == R_COUNT_TOKENS) {
        cJSON_AddStringToObject(j, "type", "error");
        cJSON *err = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(err, "type", anthropic_type(e->status));
        cJSON_AddStringToObject(err, "message", e->msg);
    } else {
        cJSON *err = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(err, "message", e->msg);
        cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
        if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
        else cJSON_AddNullToObject(err, "param");
        if (e->code) cJSON_AddStringToObject(err, "code", e->code);
        else cJSON_AddNullToObject(err, "code");
    }
    char *body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    int retry = e->status == 503 || e->status == 429 ? 1 : 0;
    return reply(s, c, r, e->status, body, "application/json", retry);
}

static enum MHD_Result fail(lmc_server *s, struct MHD_Connection *c, enum route r, int status, const char *type,
                            const char *code, const char *fmt, const char *arg) {
    lmc_srv_error e = {0};
    e.type = type;
    e.code = code;
    srv_err(&e, status, NULL, fmt, arg);
    return reply_error(s, c, r, &e);
}

/* 1 when the peer has closed its end (or the socket failed). */
static int peer_closed(const lmc_server *s, struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return 1;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    return 0;
}

static void cancel(lmc_server *s, lmc_srv_req *r) {
    atomic_store(&r->cancelled, 1);
    lmc_sched_poke(s->sched);
}

/* Wait up to ms for new text or the end; returns with r->mu held. */
static void wait_news(lmc_srv_req *r, int ms) {
    pthread_mutex_lock(&r->mu);
    if (r->done || r->out_len > r->sent || r->rout_len > r->rsent) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

/* MHD pulls the SSE stream from here (the connection's own thread; blocking is fine). */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    lmc_srv_req *r = cls;
    const lmc_server *s = r->server;
    (void)pos;
    for (;;) {
        if (r->pend_off < r->pend_len) {
            size_t n = r->pend_len - r->pend_off;
            if (n > max) n = max;
            memcpy(buf, r->pend + r->pend_off, n);
            r->pend_off += n;
            r->hb_last = mono_s();
            return (ssize_t)n;
        }
        if (r->phase == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        wait_news(r, 100);
        int done = r->done;
        size_t n = r->out_len > r->sent ? r->out_len - r->sent : 0;
        char *text = n ? malloc(n) : NULL;
        if (text) memcpy(text, r->out + r->sent, n);
        else n = 0;
        r->sent += n;
        size_t rn = r->rout_len > r->rsent ? r->rout_len - r->rsent : 0; /* new reasoning, sent before new content */
        char *rtext = rn ? malloc(rn) : NULL;
        if (rtext) memcpy(rtext, r->rout + r->rsent, rn);
        else rn = 0;
        r->rsent += rn;
        pthread_mutex_unlock(&r->mu);
        if (!n && !rn && !done) {
            if (peer_closed(s, r->conn)) { cancel((lmc_server *)s, r); return MHD_CONTENT_READER_END_WITH_ERROR; }
            /* Nothing yet (queued, or a long prefill): an SSE comment now and then, which clients ignore, so the
             * idle timeout never drops a stream that is only waiting for its first token. */
            double now = mono_s(), every = s->p.timeout_s / 3.0 < 15 ? s->p.timeout_s / 3.0 : 15;
            if (r->hb_last == 0) r->hb_last = now;
            if (now - r->hb_last >= every) {
                static const char hb[] = ": keep-alive\n\n";
                size_t k = sizeof hb - 1 < max ? sizeof hb - 1 : max;
                memcpy(buf, hb, k);
                r->hb_last = now;
                return (ssize_t)k;
            }
            continue;
        }
        lmc_sbuf b = {.p = r->pend, .len = 0, .cap = r->pend_cap};
        if (b.p) b.p[0] = 0;
        if (r->api == LMC_API_MESSAGES) anthropic_stream(s, r, rtext, rn, text, n, done, &b);
        else openai_stream(s, r, rtext, rn, text, n, done, &b);
        free(text);
        free(rtext);
        r->pend = b.p;
        r->pend_cap = b.cap;
        r->pend_len = b.oom ? 0 : b.len;
        r->pend_off = 0;
        if (b.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) { lmc_srv_req_unref(cls); }

static enum MHD_Result generate(lmc_server *s, struct MHD_Connection *c, conn *cs, enum route r, const cJSON *root) {
    lmc_srv_error e = {0};
    lmc_srv_req *req = lmc_srv_req_new();
    if (!req) return fail(s, c, r, 500, "server_error", NULL, "%s", "out of memory");
    req->server = s;
    req->conn = c;
    int rc = r == R_CHAT ? openai_parse_chat(s, root, req, &e)
             : r == R_COMPLETIONS ? openai_parse_completion(s, root, req, &e) : anthropic_parse(s, root, req, &e);
    if (rc < 0) { lmc_srv_req_unref(req); return reply_error(s, c, r, &e); }
    lmc_status st = lmc_sched_submit(s->sched, req);
    if (st < 0) {
        lmc_srv_req_unref(req);
        if (st == LMC_ERR_RANGE) { e.code = "context_length_exceeded"; srv_err(&e, 400, "messages", "%s", lmc_last_error()); }
        else { e.type = "server_error"; srv_err(&e, 503, NULL, "%s", lmc_last_error()); }
        return reply_error(s, c, r, &e);
    }
    cs->req = req;
    if (req->stream) {
        lmc_srv_req_ref(req); /* the response's reference */
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, req, stream_free);
        if (!resp) { lmc_srv_req_unref(req); cancel(s, req); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        count_status(s, 200, r);
        return ret;
    }
    for (;;) {
        wait_news(req, 100);
        int done = req->done;
        req->sent = req->out_len;
        pthread_mutex_unlock(&req->mu);
        if (done) break;
        if (peer_closed(s, c)) { cancel(s, req); return MHD_NO; }
    }
    if (req->finish == LMC_FINISH_ERROR) return fail(s, c, r, 500, "server_error", NULL, "%s", req->err);
    if (req->finish == LMC_FINISH_CANCELLED) return fail(s, c, r, 503, "server_error", NULL, "%s", "the server is shutting down");
    char *body = r == R_MESSAGES ? anthropic_final_body(s, req) : openai_final_body(s, req);
    return reply(s, c, r, 200, body, "application/json", 0);
}

/* /v1/embeddings: every input is its own request in the scheduler (they batch like any others). */
static enum MHD_Result embeddings(lmc_server *s, struct MHD_Connection *c, enum route r, const cJSON *root) {
    lmc_srv_error e = {0};
    lmc_srv_req **reqs = NULL;
    int n = 0, base64 = 0, dims = 0, submitted = 0;
    enum MHD_Result ret;
    if (openai_parse_embeddings(s, root, &reqs, &n, &base64, &dims, &e) < 0) { ret = reply_error(s, c, r, &e); goto done; }
    int gone = 0, failed = -1, oldest = 0;
    while (submitted < n && !gone) {
        lmc_status st = lmc_sched_submit(s->sched, reqs[submitted]);
        if (st >= 0) { submitted++; continue; }
        if (st == LMC_ERR_NOMEM && oldest < submitted) {
            /* More inputs than the queue holds: wait for one of ours to finish, then go on. */
            for (;;) {
                wait_news(reqs[oldest], 100);
                int done = reqs[oldest]->done;
                pthread_mutex_unlock(&reqs[oldest]->mu);
                if (done) break;
                if (peer_closed(s, c)) { gone = 1; break; }
            }
            oldest++;
            continue;
        }
        e.type = "server_error";
        srv_err(&e, st == LMC_ERR_RANGE ? 400 : 503, "input", "%s", lmc_last_error());
        break;
    }
    for (int i = 0; i < submitted; i++) {
        for (;;) {
            if (e.status || gone) { cancel(s, reqs[i]); break; }
            wait_news(reqs[i], 100);
            int done = reqs[i]->done;
            pthread_mutex_unlock(&reqs[i]->mu);
            if (done) break;
            if (peer_closed(s, c)) gone = 1;
        }
        if (reqs[i]->done && reqs[i]->finish != LMC_FINISH_STOP && failed < 0) failed = i;
    }
    if (gone) { ret = MHD_NO; goto done; }
    if (e.status) { ret = reply_error(s, c, r, &e); goto done; }
    if (failed >= 0) {
        ret = fail(s, c, r, reqs[failed]->finish == LMC_FINISH_CANCELLED ? 503 : 500, "server_error", NULL, "%s",
                   reqs[failed]->finish == LMC_FINISH_CANCELLED ? "the server is shutting down" : reqs[failed]->err);
        goto done;
    }
    ret = reply(s, c, r, 200, openai_embeddings_body(s, reqs, n, base64, dims), "application/json", 0);
done:
    for (int i = 0; i < n; i++) lmc_srv_req_unref(reqs[i]);
    free(reqs);
    return ret;
}

/* POST /v1/messages/count_tokens: the prompt a /v1/messages request would have. */
static enum MHD_Result count_tokens(lmc_server *s, struct MHD_Connection *c, enum route r, const cJSON *root) {
    lmc_srv_error e = {0};
    cJSON *copy = cJSON_Duplicate(root, 1);
    lmc_srv_req *req = lmc_srv_req_new();
    if (!copy || !req) { cJSON_Delete(copy); lmc_srv_req_unref(req); return fail(s, c, r, 500, "server_error", NULL, "%s", "out of memory"); }
    if (!cJSON_GetObjectItemCaseSensitive(copy, "max_tokens")) cJSON_AddNumberToObject(copy, "max_tokens", 1);
    enum MHD_Result ret;
    if (anthropic_parse(s, copy, req, &e) < 0) ret = reply_error(s, c, r, &e);
    else {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "input_tokens", req->n_prompt);
        ret = reply_json(s, c, r, 200, j);
    }
    cJSON_Delete(copy);
    lmc_srv_req_unref(req);
    return ret;
}

static enum MHD_Result tokenize(lmc_server *s, struct MHD_Connection *c, enum route r, const cJSON *root) {
    lmc_srv_error e = {0};
    const char *text = NULL;
    int add_special = 0, rc;
    if ((rc = jf_string(root, "content", &text, &e)) < 0) return reply_error(s, c, r, &e);
    if (rc == 1 && jf_string(root, "text", &text, &e) < 0) return reply_error(s, c, r, &e);
    if (!text) { srv_err(&e, 400, "content", "'content' (a string) is required"); return reply_error(s, c, r, &e); }
    if (jf_bool(root, "add_special", &add_special, &e) < 0) return reply_error(s, c, r, &e);
    int32_t *ids = NULL;
    int n = 0;
    if (lmc_tokenizer_encode(s->p.tok, text, strlen(text), add_special, &ids, &n) < 0)
        return fail(s, c, r, 400, NULL, NULL, "%s", lmc_last_error());
    cJSON *j = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(j, "tokens");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    free(ids);
    return reply_json(s, c, r, 200, j);
}

static enum MHD_Result detokenize(lmc_server *s, struct MHD_Connection *c, enum route r, const cJSON *root) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(a)) return fail(s, c, r, 400, NULL, NULL, "%s", "'tokens' (a list of token ids) is required");
    int n = cJSON_GetArraySize(a), k = 0;
    int vocab = lmc_tokenizer_n_vocab(s->p.tok);
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) return fail(s, c, r, 500, "server_error", NULL, "%s", "out of memory");
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < vocab) ||
            x->valuedouble != (double)(int32_t)x->valuedouble) {
            free(ids);
            char msg[96];
            snprintf(msg, sizeof msg, "'tokens' must hold token ids in [0, %d)", vocab);
            return fail(s, c, r, 400, NULL, NULL, "%s", msg);
        }
        ids[k++] = (int32_t)x->valuedouble;
    }
    char *text = NULL;
    size_t len = 0;
    lmc_status st = lmc_tokenizer_decode(s->p.tok, ids, k, 0, &text, &len);
    free(ids);
    if (st < 0) return fail(s, c, r, 400, NULL, NULL, "%s", lmc_last_error());
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "content", text);
    free(text);
    return reply_json(s, c, r, 200, j);
}

/* Constant-time comparison of a presented key with the server's: the time taken depends only on
 * the length of the server's key, never on where the first differing byte is. */
static int key_equal(const char *given, const char *key) {
    size_t gl = strlen(given), kl = strlen(key);
    unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < kl; i++) {
        unsigned char g = i < gl ? (unsigned char)given[i] : 0; /* stays within given: i < gl */
        diff |= (unsigned char)(g ^ (unsigned char)key[i]);
    }
    return diff == 0;
}

static int authorized(const lmc_server *s, struct MHD_Connection *c) {
    if (!s->p.api_key || !*s->p.api_key) return 1;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    int ok = 0;
    if (auth && !strncasecmp(auth, "Bearer ", 7)) {
        const char *v = auth + 7;
        while (*v == ' ') v++;
        ok |= key_equal(v, s->p.api_key);
    }
    if (xkey) ok |= key_equal(xkey, s->p.api_key);
    return ok;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    lmc_server *s = cls;
    (void)version;
    conn *cs = *con_cls;
    enum route r = R_NONE;
    int path_known = 0;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        if (strcmp(url, routes[i].path)) continue;
        path_known = 1;
        r = routes[i].r;
        if (!strcmp(method, routes[i].method)) break;
        r = routes[i].r;
        path_known = 2; /* right path, wrong method (for now) */
    }
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        cs->t_headers = mono_s();
        atomic_fetch_add(&s->active, 1);
        /* Refuse a declared oversized body before reading it. */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->p.max_body) {
            cs->too_large = 1;
            char msg[96];
            snprintf(msg, sizeof msg, "%zu bytes", s->p.max_body);
            return fail(s, c, r == R_NONE ? R_CHAT : r, 413, NULL, "request_too_large",
                        "the request body exceeds the limit of %s", msg);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        /* A body trickling in (slowloris) is cut off: the idle timeout alone would let one byte a minute hold a thread. */
        if (mono_s() - cs->t_headers > s->p.timeout_s || atomic_load(&s->stopping)) return MHD_NO;
        if (!cs->too_large && cs->body.len + *upload_size <= s->p.max_body) sbuf_add(&cs->body, upload, *upload_size);
        else cs->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    enum route er = r == R_NONE ? R_CHAT : r; /* error style: Anthropic on /v1/messages */
    if (!strcmp(method, "OPTIONS") && (path_known || !strncmp(url, "/v1/models/", 11))) { /* CORS preflight: no auth */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                    "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
        enum MHD_Result ret = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        count_status(s, 204, r);
        return ret;
    }
    if (!path_known && !strncmp(url, "/v1/models/", 11) && !strcmp(method, "GET")) {
        if (!authorized(s, c)) return fail(s, c, R_MODELS, 401, "authentication_error", "invalid_api_key", "%s", "a valid API key is required");
        if (strcmp(url + 11, s->model_id))
            return fail(s, c, R_MODELS, 404, "invalid_request_error", "model_not_found", "The model '%s' does not exist", url + 11);
        return reply(s, c, R_MODELS, 200, openai_model_body(s), "application/json", 0);
    }
    if (!path_known) return fail(s, c, R_NONE, 404, "not_found_error", NULL, "unknown route '%s'", url);
    if (path_known == 2) {
        char msg[96];
        snprintf(msg, sizeof msg, "%.16s", method);
        return fail(s, c, er, 405, NULL, "method_not_allowed", "method %s is not allowed here", msg);
    }
    if (cs->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "%zu bytes", s->p.max_body);
        return fail(s, c, er, 413, NULL, "request_too_large", "the request body exceeds the limit of %s", msg);
    }
    if (r != R_HEALTH && !authorized(s, c))
        return fail(s, c, er, 401, "authentication_error", "invalid_api_key", "%s", "a valid API key is required");
    if (atomic_load(&s->stopping)) return fail(s, c, er, 503, "server_error", NULL, "%s", "the server is shutting down");
    switch (r) {
    case R_HEALTH: {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "status", "ok");
        return reply_json(s, c, r, 200, j);
    }
    case R_MODELS: return reply(s, c, r, 200, openai_models_body(s), "application/json", 0);
    case R_METRICS: return reply(s, c, r, 200, metrics_body(s), "text/plain; version=0.0.4", 0);
    default: break;
    }
    /* POST routes: a JSON object body. */
    if (cs->body.oom) return fail(s, c, er, 500, "server_error", NULL, "%s", "out of memory");
    if (cs->body.len == 0) return fail(s, c, er, 400, NULL, NULL, "%s", "the request body is empty (a JSON object is expected)");
    if (!lmc_utf8_valid(cs->body.p, cs->body.len))
        return fail(s, c, er, 400, NULL, NULL, "%s", "the request body is not valid UTF-8");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(cs->body.p, cs->body.len, &end, 0);
    if (root && end) {
        while (end < cs->body.p + cs->body.len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
        if (end != cs->body.p + cs->body.len) { cJSON_Delete(root); root = NULL; }
    }
    if (!root) return fail(s, c, er, 400, NULL, NULL, "%s", "the request body is not valid JSON");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fail(s, c, er, 400, NULL, NULL, "%s", "the request body must be a JSON object");
    }
    enum MHD_Result ret;
    if (r == R_TOKENIZE) ret = tokenize(s, c, r, root);
    else if (r == R_DETOKENIZE) ret = detokenize(s, c, r, root);
    else if (r == R_EMBEDDINGS) ret = embeddings(s, c, r, root);
    else if (r == R_COUNT_TOKENS) ret = count_tokens(s, c, r, root);
    else ret = generate(s, c, cs, r, root);
    cJSON_Delete(root);
    return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    lmc_server *s = cls;
    conn *cs = *con_cls;
    (void)c;
    (void)toe;
    if (!cs) return;
    if (cs->req) {
        pthread_mutex_lock(&cs->req->mu);
        int done = cs->req->done;
        pthread_mutex_unlock(&cs->req->mu);
        if (!done) cancel(s, cs->req);
        lmc_srv_req_unref(cs->req);
    }
    free(cs->body.p);
    free(cs);
    *con_cls = NULL;
    atomic_fetch_sub(&s->active, 1);
}

lmc_status lmc_server_start(const lmc_server_params *pp, lmc_server **out) {
    lmc_server_params dp = lmc_server_default_params();
    lmc_server_params p = *pp;
    if (!p.host) p.host = dp.host;
    if (p.n_seq <= 0) p.n_seq = dp.n_seq;
    if (p.max_queue <= 0) p.max_queue = dp.max_queue;
    if (p.max_body == 0) p.max_body = dp.max_body;
    if (p.timeout_s <= 0) p.timeout_s = dp.timeout_s;
    if (p.max_connections <= 0) p.max_connections = dp.max_connections;
    if (p.max_header == 0) p.max_header = dp.max_header;
    if (p.max_header < 4096) p.max_header = 4096;
    if (!p.model || !p.tok) return lmc_fail(LMC_ERR_ARG, "the server needs a model and its tokenizer");
    lmc_server *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "server");
    s->p = p;
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->stopping, 0);
    atomic_init(&s->active, 0);
    s->started_at = (long)time(NULL);
    lmc_status st = LMC_OK;
    if (p.alias && *p.alias) snprintf(s->model_id, sizeof s->model_id, "%s", p.alias);
    else {
        const char *d = p.model_dir ? p.model_dir : "model";
        size_t n = strlen(d);
        while (n > 1 && d[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && d[b - 1] != '/') b--;
        snprintf(s->model_id, sizeof s->model_id, "%.*s", (int)(n - b), d + b);
    }
    char *src = NULL;
    if (p.model_dir && lmc_chat_template_load(p.model_dir, NULL, 0, &src) >= 0) {
        st = lmc_jinja_parse(src, strlen(src), &s->tmpl);
        free(src);
        if (st < 0) { lmc_server_stop(s); return lmc_fail_context(st, "chat template"); }
        if (lmc_chat_template_load(p.model_dir, NULL, 1, &src) >= 0) {
            s->tool_fmt = lmc_tool_fmt_detect(src);
            st = lmc_jinja_parse(src, strlen(src), &s->tmpl_tools);
            free(src);
            if (st < 0) { lmc_server_stop(s); return lmc_fail_context(st, "tool-use chat template"); }
        }
    }
    /* Reasoning: gpt-oss channels when the template writes them and the tokenizer has the token, else
     * "<think>" (which only splits an output that opens it or a prompt that ends inside it). */
    char *tsrc = NULL;
    if (!p.model_dir || lmc_chat_template_load(p.model_dir, NULL, 0, &tsrc) < 0) lmc_clear_error();
    s->reason_fmt = lmc_reason_detect(tsrc, lmc_tokenizer_token_to_id(p.tok, "<|channel|>") >= 0);
    free(tsrc);
    s->pooling = LMC_POOL_MEAN;
    if (p.model_dir) { /* sentence-transformers pooling config, when the checkpoint ships one */
        char path[4200];
        snprintf(path, sizeof path, "%s/1_Pooling/config.json", p.model_dir);
        FILE *f = fopen(path, "rb");
        if (f) {
            char buf[4096];
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = 0;
            cJSON *pc = cJSON_Parse(buf);
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pc, "pooling_mode_lasttoken"))) s->pooling = LMC_POOL_LAST;
            cJSON_Delete(pc);
        }
    }
    lmc_sched_params sp = {.model = p.model, .tok = p.tok, .n_ctx = p.n_ctx, .n_seq = p.n_seq, .n_batch = p.n_batch,
                           .max_queue = p.max_queue, .spec_n_draft = p.spec_n_draft,
                           .spec_ngram_min = p.spec_ngram_min, .spec_ngram_max = p.spec_ngram_max,
                           .spec_draft_model = p.spec_draft_model, .spec_mtp_path = p.spec_mtp_path, .tp = p.tp};
    if ((st = lmc_sched_start(&s->sched, &sp)) < 0) { lmc_server_stop(s); return st; }

    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", p.port);
    int gai = getaddrinfo(p.host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        lmc_server_stop(s);
        return lmc_fail(LMC_ERR_ARG, "cannot resolve host '%s': %s", p.host, gai_strerror(gai));
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC; /* ITC: quiesce at stop */
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, (uint16_t)p.port, NULL, NULL, handler, s,
                                     MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                     MHD_OPTION_CONNECTION_LIMIT, (unsigned)p.max_connections,
                                     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p.timeout_s,
                                     MHD_OPTION_CONNECTION_MEMORY_LIMIT, p.max_header,
                                     MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                                     MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        lmc_server_stop(s);
        return lmc_fail(LMC_ERR_IO, "cannot listen on %s:%d (in use, or not an address of this machine?)", p.host, p.port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di && di->port ? di->port : p.port;
    *out = s;
    return LMC_OK;
}

void lmc_server_stop(lmc_server *s) {
    if (!s) return;
    atomic_store(&s->stopping, 1);
    MHD_socket lfd = s->daemon ? MHD_quiesce_daemon(s->daemon) : MHD_INVALID_SOCKET; /* no new connections */
    lmc_sched_stop(s->sched);               /* every request ends: waiters and streams return */
    /* Let in-flight replies (a stream's last events, a waiter's 503) reach their clients before the
     * daemon closes the connections; a body still trickling in is cut off (see the upload path). */
    for (int i = 0; i < 500 && atomic_load(&s->active) > 0; i++) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (s->daemon) MHD_stop_daemon(s->daemon); /* joins the connection threads */
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    lmc_sched_free(s->sched);
    lmc_jinja_free(s->tmpl);
    lmc_jinja_free(s->tmpl_tools);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
