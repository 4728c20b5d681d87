/* fuzz_server.c — fuzz target: HTTP request bodies of every POST route, without sockets.
 *
 * At start the demo model and tokenizer are loaded and a server object is built the way
 * lmc_server_start builds it (chat template, a tool-use template, a running scheduler
 * with a 256-position context) but without the HTTP daemon. Input: byte 0 picks the
 * route, byte 1 the template's tool-call format; then the body, optionally followed by
 * "\n--reply--\n" and the text a model "generated". The body goes through the checks
 * http.c applies (UTF-8, one JSON object) and the route's parser (openai_parse_chat,
 * openai_parse_completion, anthropic_parse, openai_parse_embeddings, count_tokens'
 * anthropic_parse, tokenize/detokenize as http.c does them). A request that parses is
 * then answered without running the model: the reply text is committed as the scheduler
 * would commit it (fed to the JSON state in json mode, stop strings searched) and turned
 * into the final body or the SSE stream, so the response builders and the tool-call
 * parsers see arbitrary model output too.
 */
#include <stdint.h>

#include "backend/backend.h"
#include "fuzz.h"
#include "model/model.h"
#include "server/server_int.h"
#include "server/stop.h"
#include "server/tools.h"
#include "tok/chat.h"

static lmc_backend *srv_be_;
static lmc_model *srv_model_;
static lmc_tokenizer *srv_tok_;
static lmc_server *srv_;

static const char srv_tools_tmpl_[] =
    "{%- if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools> reply with "
    "<tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>{% endif %}"
    "{%- for m in messages %}<|{{ m.role }}|>{{ m.content if m.content is string else '' }}"
    "{%- for tc in m.tool_calls or [] %}<tool_call>{{ tc.function | tojson }}</tool_call>{% endfor %}<|end|>{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}";

int fuzz_server_init(void) {
    if (srv_) return 0;
    if (lmc_backend_cpu_init(&srv_be_, 1, 0) < 0) goto fail;
    if (lmc_model_load(LMC_DEMO_DIR, srv_be_, &srv_model_) < 0) goto fail;
    if (lmc_tokenizer_load(LMC_DEMO_DIR, &srv_tok_) < 0) goto fail;
    srv_ = calloc(1, sizeof *srv_);
    if (!srv_) goto fail;
    srv_->p = lmc_server_default_params();
    srv_->p.model = srv_model_;
    srv_->p.tok = srv_tok_;
    srv_->p.model_dir = LMC_DEMO_DIR;
    pthread_mutex_init(&srv_->mu, NULL);
    snprintf(srv_->model_id, sizeof srv_->model_id, "demo");
    srv_->pooling = LMC_POOL_MEAN;
    srv_->reason_fmt = LMC_REASON_THINK; /* replies that open "<think>" take the reasoning paths */
    char *src = NULL;
    if (lmc_chat_template_load(LMC_DEMO_DIR, NULL, 0, &src) < 0) goto fail;
    lmc_status st = lmc_jinja_parse(src, strlen(src), &srv_->tmpl);
    free(src);
    if (st < 0 || lmc_jinja_parse(srv_tools_tmpl_, strlen(srv_tools_tmpl_), &srv_->tmpl_tools) < 0) goto fail;
    lmc_sched_params sp = {.model = srv_model_, .tok = srv_tok_, .n_ctx = 256, .n_seq = 1, .n_batch = 64,
                           .max_queue = 4};
    if (lmc_sched_start(&srv_->sched, &sp) < 0) goto fail;
    return 0;
fail:
    fprintf(stderr, "fuzz_server: setup failed: %s\n", lmc_last_error());
    return -1;
}

void fuzz_server_fini(void) {
    if (srv_) {
        if (srv_->sched) { lmc_sched_stop(srv_->sched); lmc_sched_free(srv_->sched); }
        lmc_jinja_free(srv_->tmpl);
        lmc_jinja_free(srv_->tmpl_tools);
        pthread_mutex_destroy(&srv_->mu);
        free(srv_);
        srv_ = NULL;
    }
    lmc_tokenizer_free(srv_tok_);
    lmc_model_free(srv_model_);
    lmc_backend_free(srv_be_);
    srv_tok_ = NULL; srv_model_ = NULL; srv_be_ = NULL;
}

/* The reasoning splitter's output, committed as the scheduler does (caller holds r->mu). */
static void srv_emit(void *ctx, int reasoning, const char *p, size_t n) {
    lmc_srv_req *r = ctx;
    FUZZ_CHECK((reasoning ? lmc_srv_req_commit_reasoning(r, p, n) : lmc_srv_req_commit(r, p, n)) == 0);
}

/* Answer a parsed generation request with `reply` as the model's text, as the scheduler
 * and http.c's stream reader / final body would. */
static void srv_answer(lmc_srv_req *r, const char *reply, size_t rn) {
    if (r->json_mode) {
        lmc_jfsm_init(&r->js, 1);
        if (r->schema) lmc_jsstate_init(&r->jss, r->schema);
    }
    size_t half = rn / 2;
    while (half < rn && ((unsigned char)reply[half] & 0xC0) == 0x80) half++; /* pieces are whole characters */
    size_t cut[3] = {0, half, rn};
    lmc_sbuf b = {0};
    for (int k = 0; k < 2; k++) {
        const char *p = reply + cut[k];
        size_t n = cut[k + 1] - cut[k];
        if (r->json_mode) {
            if (r->schema) (void)lmc_jsstate_feed(&r->jss, p, n);
            else (void)lmc_jfsm_feed(&r->js, p, n);
        }
        pthread_mutex_lock(&r->mu);
        int last = k == 1;
        FUZZ_CHECK(lmc_reason_feed(&r->rs, p, n, last, srv_emit, r) == 0);
        if (!r->out) FUZZ_CHECK(lmc_srv_req_commit(r, "", 0) == 0);
        r->n_gen++;
        if (last) {
            int which = -1;
            size_t at = lmc_stop_find(r->out, r->out_len, 0, r->stop, r->n_stop, &which);
            FUZZ_CHECK(at == (size_t)-1 || (at <= r->out_len && which >= 0 && which < r->n_stop));
            (void)lmc_stop_holdback(r->out, r->out_len, r->stop, r->n_stop);
            lmc_srv_req_finish_locked(r, LMC_FINISH_STOP);
        }
        size_t m = r->out_len - r->sent;
        char *text = m ? malloc(m) : NULL;
        if (text) memcpy(text, r->out + r->sent, m);
        else m = 0;
        r->sent += m;
        size_t rm = r->rout_len - r->rsent;
        char *rtext = rm ? malloc(rm) : NULL;
        if (rtext) memcpy(rtext, r->rout + r->rsent, rm);
        else rm = 0;
        r->rsent += rm;
        pthread_mutex_unlock(&r->mu);
        if (r->stream) {
            if (r->api == LMC_API_MESSAGES) anthropic_stream(srv_, r, rtext, rm, text, m, last, &b);
            else openai_stream(srv_, r, rtext, rm, text, m, last, &b);
        }
        free(text);
        free(rtext);
    }
    if (!r->stream) {
        char *body = r->api == LMC_API_MESSAGES ? anthropic_final_body(srv_, r) : openai_final_body(srv_, r);
        if (body) {
            cJSON *j = cJSON_Parse(body);
            FUZZ_CHECK(j != NULL); /* the server's replies are JSON */
            cJSON_Delete(j);
        }
        free(body);
    } else {
        FUZZ_CHECK(!b.oom);
    }
    free(b.p);
}

static void srv_tokenize(const cJSON *root) {
    lmc_srv_error e = {0};
    const char *text = NULL;
    int add_special = 0, rc;
    if ((rc = jf_string(root, "content", &text, &e)) < 0) return;
    if (rc == 1 && jf_string(root, "text", &text, &e) < 0) return;
    if (!text || jf_bool(root, "add_special", &add_special, &e) < 0) return;
    int32_t *ids = NULL;
    int n = 0;
    if (lmc_tokenizer_encode(srv_tok_, text, strlen(text), add_special, &ids, &n) == LMC_OK) free(ids);
}

static void srv_detokenize(const cJSON *root) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(a)) return;
    int n = cJSON_GetArraySize(a), k = 0, vocab = lmc_tokenizer_n_vocab(srv_tok_);
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) return;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < vocab) ||
            x->valuedouble != (double)(int32_t)x->valuedouble) { free(ids); return; }
        ids[k++] = (int32_t)x->valuedouble;
    }
    char *text = NULL;
    size_t len = 0;
    if (lmc_tokenizer_decode(srv_tok_, ids, k, 0, &text, &len) == LMC_OK) free(text);
    free(ids);
}

static void srv_embeddings(const cJSON *root) {
    lmc_srv_error e = {0};
    lmc_srv_req **reqs = NULL;
    int n = 0, base64 = 0, dims = 0;
    if (openai_parse_embeddings(srv_, root, &reqs, &n, &base64, &dims, &e) == 0) {
        FUZZ_CHECK(n >= 1 && reqs != NULL);
        int hidden = srv_model_->cfg.hidden_size;
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(reqs[i]->n_prompt >= 1 && reqs[i]->n_prompt <= lmc_sched_n_ctx(srv_->sched));
            reqs[i]->embedding = calloc((size_t)hidden, sizeof(float));
            if (reqs[i]->embedding) { reqs[i]->n_embd = hidden; reqs[i]->embedding[i % hidden] = 1.0f; }
            pthread_mutex_lock(&reqs[i]->mu);
            lmc_srv_req_finish_locked(reqs[i], LMC_FINISH_STOP);
            pthread_mutex_unlock(&reqs[i]->mu);
        }
        char *body = openai_embeddings_body(srv_, reqs, n, base64, dims);
        if (body) {
            cJSON *j = cJSON_Parse(body);
            FUZZ_CHECK(j != NULL);
            cJSON_Delete(j);
        }
        free(body);
    } else {
        FUZZ_CHECK(e.status >= 400 && e.status < 600);
    }
    for (int i = 0; i < n; i++) lmc_srv_req_unref(reqs[i]);
    free(reqs);
}

int fuzz_server(const uint8_t *d, size_t n) {
    if (n < 2 || !srv_) return 0;
    int route = d[0] % 7;
    srv_->tool_fmt = d[1] % 4;
    const uint8_t *reply;
    size_t body_n, reply_n;
    int has_reply = fuzz_split(d + 2, n - 2, "\n--reply--\n", &body_n, &reply, &reply_n);
    const char *body = (const char *)d + 2;
    if (body_n == 0 || !lmc_utf8_valid(body, body_n)) return 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, body_n, &end, 0);
    if (root && end) {
        while (end < body + body_n && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
        if (end != body + body_n) { cJSON_Delete(root); root = NULL; }
    }
    if (!cJSON_IsObject(root)) { cJSON_Delete(root); return 0; }
    if (route == 3) srv_embeddings(root);
    else if (route == 5) srv_tokenize(root);
    else if (route == 6) srv_detokenize(root);
    else {
        lmc_srv_error e = {0};
        lmc_srv_req *r = lmc_srv_req_new();
        cJSON *copy = NULL;
        if (r) {
            r->server = srv_;
            int rc;
            if (route == 0) rc = openai_parse_chat(srv_, root, r, &e);
            else if (route == 1) rc = openai_parse_completion(srv_, root, r, &e);
            else if (route == 2) rc = anthropic_parse(srv_, root, r, &e);
            else { /* count_tokens, as http.c: a default max_tokens, then the /v1/messages parser */
                copy = cJSON_Duplicate(root, 1);
                if (copy && !cJSON_GetObjectItemCaseSensitive(copy, "max_tokens")) cJSON_AddNumberToObject(copy, "max_tokens", 1);
                rc = copy ? anthropic_parse(srv_, copy, r, &e) : -1;
            }
            if (rc == 0) {
                FUZZ_CHECK(r->n_prompt >= 1 && r->prompt != NULL);
                FUZZ_CHECK(r->max_tokens >= 1 && r->n_prompt + r->max_tokens <= lmc_sched_n_ctx(srv_->sched));
                FUZZ_CHECK(r->top_logprobs >= 0 && r->top_logprobs <= LMC_MAX_TOP_LOGPROBS);
                for (int i = 0; i < r->n_prompt; i++) FUZZ_CHECK(r->prompt[i] >= 0 && r->prompt[i] < lmc_tokenizer_n_vocab(srv_tok_));
                for (int i = 0; i < r->n_stop; i++) FUZZ_CHECK(r->stop[i] && r->stop[i][0]);
                if (route != 4 && has_reply && lmc_utf8_valid((const char *)reply, reply_n))
                    srv_answer(r, (const char *)reply, reply_n);
            } else {
                FUZZ_CHECK(e.status >= 400 && e.status < 600 && e.msg[0]);
            }
            lmc_srv_req_unref(r);
        }
        cJSON_Delete(copy);
    }
    cJSON_Delete(root);
    return 0;
}

#ifdef LMC_FUZZ_LIBFUZZER
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    if (fuzz_server_init() < 0) abort();
    return 0;
}
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return fuzz_server(d, n); }
#endif
