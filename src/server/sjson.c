/* sjson.c — request-field readers with OpenAI-style errors, chat rendering
 * for the routes (messages normalized, tools passed through, the template
 * parsed once at start), the context-length check, ids, and the growable reply
 * buffer. Everything here is called from connection threads and keeps no state. */
#include "server_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tok/chat.h"

int srv_err(lmc_srv_error *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    if (!e->type)
        e->type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                  : status >= 500 ? "server_error" : "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

void sbuf_add(lmc_sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2 + 256;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sbuf_puts(lmc_sbuf *b, const char *s) { sbuf_add(b, s, strlen(s)); }

void sbuf_printf(lmc_sbuf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { sbuf_add(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sbuf_add(b, big, (size_t)n);
    free(big);
}

void sbuf_sse(lmc_sbuf *b, const char *event, cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) { b->oom = 1; return; }
    if (event) { sbuf_puts(b, "event: "); sbuf_puts(b, event); sbuf_puts(b, "\n"); }
    sbuf_puts(b, "data: ");
    sbuf_puts(b, s);
    sbuf_puts(b, "\n\n");
    free(s);
}

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int jf_number(const cJSON *o, const char *key, double lo, double hi, double *out, lmc_srv_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 1;
    if (!cJSON_IsNumber(v)) return srv_err(e, 400, key, "'%s' must be a number", key);
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi) return srv_err(e, 400, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = x;
    return 0;
}

int jf_int(const cJSON *o, const char *key, long lo, long hi, long *out, lmc_srv_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 1;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
        return srv_err(e, 400, key, "'%s' must be an integer", key);
    double x = v->valuedouble;
    if (x < (double)lo || x > (double)hi) return srv_err(e, 400, key, "'%s' must be in [%ld, %ld], got %.0f", key, lo, hi, x);
    *out = (long)x;
    return 0;
}

int jf_bool(const cJSON *o, const char *key, int *out, lmc_srv_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 1;
    if (!cJSON_IsBool(v)) return srv_err(e, 400, key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

int jf_string(const cJSON *o, const char *key, const char **out, lmc_srv_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 1;
    if (!cJSON_IsString(v)) return srv_err(e, 400, key, "'%s' must be a string", key);
    *out = v->valuestring;
    return 0;
}

static int add_stop(lmc_srv_req *r, const char *s) {
    char **st = realloc(r->stop, (size_t)(r->n_stop + 1) * sizeof *st);
    if (!st) return -1;
    r->stop = st;
    if (!(st[r->n_stop] = strdup(s))) return -1;
    r->n_stop++;
    return 0;
}

int jf_stop(const cJSON *o, const char *key, int max, lmc_srv_req *r, lmc_srv_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return 1;
    if (cJSON_IsString(v)) {
        if (!*v->valuestring) return srv_err(e, 400, key, "'%s' must not be empty", key);
        return add_stop(r, v->valuestring) ? srv_err(e, 500, key, "out of memory") : 0;
    }
    if (!cJSON_IsArray(v)) return srv_err(e, 400, key, "'%s' must be a string or a list of strings", key);
    int n = cJSON_GetArraySize(v);
    if (n > max) return srv_err(e, 400, key, "'%s' takes at most %d strings, got %d", key, max, n);
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        if (!cJSON_IsString(x)) return srv_err(e, 400, key, "'%s' must be a list of strings", key);
        if (!*x->valuestring) return srv_err(e, 400, key, "'%s' must not contain empty strings", key);
        if (strlen(x->valuestring) > 1024) return srv_err(e, 400, key, "a stop string is longer than 1024 bytes");
        if (add_stop(r, x->valuestring)) return srv_err(e, 500, key, "out of memory");
    }
    return 0;
}

int jf_sampling(const lmc_server *s, const cJSON *o, int openai, lmc_srv_req *r, lmc_srv_error *e) {
    const lmc_config *c = &s->p.model->cfg;
    lmc_sampler_params sp = lmc_sampler_default_params();
    sp.temperature = c->gen_temperature > 0 ? (float)c->gen_temperature : 1.0f;
    sp.top_p = c->gen_top_p > 0 ? (float)c->gen_top_p : 1.0f;
    sp.top_k = c->gen_top_k > 0 ? c->gen_top_k : 0;
    sp.min_p = c->gen_min_p > 0 ? (float)c->gen_min_p : 0.0f;
    static atomic_ulong counter;
    sp.seed = (uint64_t)time(NULL) * 6364136223846793005ull + atomic_fetch_add(&counter, 1);
    double d;
    long x;
    int rc;
    if ((rc = jf_number(o, "temperature", 0, openai ? 2 : 1, &d, e)) < 0) return -1;
    if (rc == 0) sp.temperature = (float)d;
    if ((rc = jf_number(o, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (rc == 0) {
        if (d <= 0) return srv_err(e, 400, "top_p", "'top_p' must be > 0");
        sp.top_p = (float)d;
    }
    if ((rc = jf_int(o, "top_k", 0, 1 << 30, &x, e)) < 0) return -1;
    if (rc == 0) sp.top_k = (int)x;
    if ((rc = jf_number(o, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (rc == 0) sp.min_p = (float)d;
    if ((rc = jf_number(o, "repetition_penalty", 0, 100, &d, e)) < 0) return -1;
    if (rc == 0) {
        if (d <= 0) return srv_err(e, 400, "repetition_penalty", "'repetition_penalty' must be > 0");
        sp.repetition_penalty = (float)d;
    }
    if (openai) {
        if ((rc = jf_int(o, "seed", -(1L << 62), 1L << 62, &x, e)) < 0) return -1;
        if (rc == 0) sp.seed = (uint64_t)x;
        if ((rc = jf_number(o, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
        if (rc == 0) r->presence_penalty = (float)d;
        if ((rc = jf_number(o, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
        if (rc == 0) r->frequency_penalty = (float)d;
        if ((rc = jf_int(o, "n", 1, 1, &x, e)) < 0) return srv_err(e, 400, "n", "only n = 1 is supported");
        const cJSON *lb = field(o, "logit_bias");
        if (lb) {
            if (!cJSON_IsObject(lb)) return srv_err(e, 400, "logit_bias", "'logit_bias' must be an object of token id → bias");
            int n = cJSON_GetArraySize(lb);
            if (n > 1024) return srv_err(e, 400, "logit_bias", "'logit_bias' takes at most 1024 entries");
            r->bias_id = malloc((size_t)(n ? n : 1) * sizeof *r->bias_id);
            r->bias_val = malloc((size_t)(n ? n : 1) * sizeof *r->bias_val);
            if (!r->bias_id || !r->bias_val) return srv_err(e, 500, "logit_bias", "out of memory");
            const cJSON *it;
            cJSON_ArrayForEach(it, lb) {
                char *end;
                long id = strtol(it->string, &end, 10);
                if (!*it->string || *end || id < 0 || id >= c->vocab_size)
                    return srv_err(e, 400, "logit_bias", "logit_bias key '%s' is not a token id below %d", it->string,
                                   c->vocab_size);
                if (!cJSON_IsNumber(it) || !(it->valuedouble >= -100 && it->valuedouble <= 100))
                    return srv_err(e, 400, "logit_bias", "logit_bias values must be numbers in [-100, 100]");
                r->bias_id[r->n_bias] = (int32_t)id;
                r->bias_val[r->n_bias++] = (float)it->valuedouble;
            }
        }
    }
    r->sp = sp;
    return 0;
}

/* Message content → one string: a string as is, or the text parts of a list joined. */
static int content_text(const cJSON *content, const char *param, lmc_sbuf *out, lmc_srv_error *e) {
    if (cJSON_IsString(content)) { sbuf_puts(out, content->valuestring); return 0; }
    if (!cJSON_IsArray(content)) return srv_err(e, 400, param, "message content must be a string or a list of content parts");
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return srv_err(e, 400, param, "each content part must be an object with a 'type'");
        if (strcmp(type->valuestring, "text") != 0)
            return srv_err(e, 400, param, "content part type '%.64s' is not supported (text only)", type->valuestring);
        if (!cJSON_IsString(text)) return srv_err(e, 400, param, "a text content part needs a string 'text'");
        sbuf_puts(out, text->valuestring);
    }
    return 0;
}

/* An assistant message's tool_calls, checked, with JSON-text arguments parsed into objects
 * (templates read them as mappings, as transformers' callers pass them). */
static cJSON *norm_tool_calls(const cJSON *tc, const char *param, lmc_srv_error *e) {
    if (!cJSON_IsArray(tc)) { srv_err(e, 400, param, "%s.tool_calls must be a list", param); return NULL; }
    cJSON *out = cJSON_CreateArray();
    const cJSON *c;
    cJSON_ArrayForEach(c, tc) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        if (!cJSON_IsObject(c) || !cJSON_IsObject(fn) || !cJSON_IsString(name) || (args && !cJSON_IsString(args) && !cJSON_IsObject(args))) {
            cJSON_Delete(out);
            srv_err(e, 400, param, "%s.tool_calls: each needs function.name and function.arguments (a JSON string)", param);
            return NULL;
        }
        cJSON *nc = cJSON_CreateObject();
        if (cJSON_IsString(id)) cJSON_AddStringToObject(nc, "id", id->valuestring);
        cJSON_AddStringToObject(nc, "type", "function");
        cJSON *nf = cJSON_AddObjectToObject(nc, "function");
        cJSON_AddStringToObject(nf, "name", name->valuestring);
        cJSON *a = NULL;
        if (cJSON_IsString(args)) a = cJSON_Parse(args->valuestring);
        else if (args) a = cJSON_Duplicate(args, 1);
        if (!a) a = cJSON_IsString(args) ? cJSON_CreateString(args->valuestring) : cJSON_CreateObject();
        cJSON_AddItemToObject(nf, "arguments", a);
        cJSON_AddItemToArray(out, nc);
    }
    return out;
}

int srv_reasoning_format(const lmc_server *s, const cJSON *root, lmc_srv_req *r, lmc_srv_error *e) {
    const char *f = NULL;
    r->reason_fmt = s->p.reasoning_none ? LMC_REASON_OFF : s->reason_fmt;
    if (jf_string(root, "reasoning_format", &f, e) < 0) return -1;
    if (!f) return 0;
    if (!strcmp(f, "auto")) { r->reason_fmt = s->reason_fmt; return 0; }
    if (!strcmp(f, "none")) { r->reason_fmt = LMC_REASON_OFF; return 0; }
    return srv_err(e, 400, "reasoning_format", "'reasoning_format' must be 'auto' or 'none'");
}

int srv_render_chat(const lmc_server *s, const cJSON *messages, const cJSON *tools, lmc_srv_req *r, lmc_srv_error *e) {
    if (!cJSON_IsArray(messages)) return srv_err(e, 400, "messages", "'messages' must be a list");
    if (cJSON_GetArraySize(messages) == 0) return srv_err(e, 400, "messages", "'messages' must not be empty");
    const lmc_jinja_template *tmpl = tools && s->tmpl_tools ? s->tmpl_tools : s->tmpl;
    if (!tmpl) return srv_err(e, 400, "messages", "the model has no chat template; use /v1/completions");
    cJSON *norm = cJSON_CreateArray();
    if (!norm) return srv_err(e, 500, NULL, "out of memory");
    const cJSON *m;
    int i = 0, rc = 0;
    cJSON_ArrayForEach(m, messages) {
        char param[32];
        snprintf(param, sizeof param, "messages[%d]", i++);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m)) { rc = srv_err(e, 400, param, "%s must be an object", param); break; }
        if (!cJSON_IsString(role)) { rc = srv_err(e, 400, param, "%s.role must be a string", param); break; }
        const char *rl = role->valuestring;
        if (!strcmp(rl, "developer")) rl = "system";
        if (strcmp(rl, "system") && strcmp(rl, "user") && strcmp(rl, "assistant") && strcmp(rl, "tool")) {
            rc = srv_err(e, 400, param, "%s.role '%.32s' is not one of system, developer, user, assistant, tool", param,
                         role->valuestring);
            break;
        }
        lmc_sbuf text = {0};
        if (!content || cJSON_IsNull(content)) {
            if (strcmp(rl, "assistant")) { rc = srv_err(e, 400, param, "%s.content is required", param); break; }
        } else if (content_text(content, param, &text, e) < 0) {
            free(text.p);
            rc = -1;
            break;
        }
        cJSON *nm = cJSON_CreateObject();
        cJSON_AddStringToObject(nm, "role", rl);
        cJSON_AddStringToObject(nm, "content", text.p ? text.p : "");
        free(text.p);
        cJSON_AddItemToArray(norm, nm);
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (tc && !cJSON_IsNull(tc)) {
            cJSON *ntc = norm_tool_calls(tc, param, e);
            if (!ntc) { rc = -1; break; }
            cJSON_AddItemToObject(nm, "tool_calls", ntc);
        }
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        if (cJSON_IsString(tid)) cJSON_AddStringToObject(nm, "tool_call_id", tid->valuestring);
        const cJSON *nmn = cJSON_GetObjectItemCaseSensitive(m, "name");
        if (cJSON_IsString(nmn)) cJSON_AddStringToObject(nm, "name", nmn->valuestring);
    }
    if (rc < 0) { cJSON_Delete(norm); return -1; }
    lmc_chat_params cp = lmc_chat_default_params();
    cp.messages = norm;
    cp.tools = tools;
    cp.add_generation_prompt = 1;
    cp.bos_token = lmc_tokenizer_bos_token(s->p.tok);
    cp.eos_token = lmc_tokenizer_eos_token(s->p.tok);
    char *prompt = NULL;
    size_t plen = 0;
    lmc_status st = lmc_chat_render_template(tmpl, &cp, &prompt, &plen);
    cJSON_Delete(norm);
    if (st < 0) return srv_err(e, 400, "messages", "the chat template failed on these messages: %s", lmc_last_error());
    lmc_reason_free(&r->rs);
    lmc_reason_init(&r->rs, r->reason_fmt, prompt, plen); /* whether the output starts inside the reasoning */
    r->rs.bare_calls = r->tool_mode >= 2; /* a forced call's content is its arguments */
    st = lmc_tokenizer_encode_chat(s->p.tok, prompt, plen, &r->prompt, &r->n_prompt);
    free(prompt);
    if (st < 0) return srv_err(e, 400, "messages", "tokenizing the prompt failed: %s", lmc_last_error());
    return 0;
}

int srv_check_length(const lmc_server *s, lmc_srv_req *r, long max_tokens, int have_max, const char *param,
                     lmc_srv_error *e) {
    int n_ctx = lmc_sched_n_ctx(s->sched);
    if (r->n_prompt == 0) return srv_err(e, 400, "prompt", "the prompt is empty");
    if (r->n_prompt >= n_ctx) {
        e->code = "context_length_exceeded";
        return srv_err(e, 400, "messages",
                       "This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.",
                       n_ctx, r->n_prompt);
    }
    if (have_max) {
        if (max_tokens < 1) return srv_err(e, 400, param, "'%s' must be at least 1", param);
        if (r->n_prompt + max_tokens > n_ctx) {
            e->code = "context_length_exceeded";
            return srv_err(e, 400, param,
                           "This model's maximum context length is %d tokens. However, you requested %ld tokens "
                           "(%d in the messages, %ld in the completion).",
                           n_ctx, r->n_prompt + max_tokens, r->n_prompt, max_tokens);
        }
        if (s->p.max_tokens > 0 && max_tokens > s->p.max_tokens)
            return srv_err(e, 400, param, "'%s' is %ld; this server allows at most %d", param, max_tokens, s->p.max_tokens);
        r->max_tokens = (int)max_tokens;
    } else {
        r->max_tokens = n_ctx - r->n_prompt;
        if (s->p.max_tokens > 0 && r->max_tokens > s->p.max_tokens) r->max_tokens = s->p.max_tokens;
    }
    return 0;
}

void srv_make_id(char *out, size_t cap, const char *prefix) {
    static atomic_ulong counter;
    unsigned long k = atomic_fetch_add(&counter, 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec * 2654435761ull ^ k * 0x9e3779b97f4a7c15ull;
    snprintf(out, cap, "%s%016llx%04lx", prefix, (unsigned long long)x, k & 0xffff);
}
