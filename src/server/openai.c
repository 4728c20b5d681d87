/* openai.c — the OpenAI routes: /v1/chat/completions, /v1/completions and
 * /v1/models. Parses and validates a request into an lmc_srv_req, and turns
 * its results into the reply body or the SSE chunks OpenAI's API sends. */
#include "server_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/arch.h"
#include "tools.h"

/* Fields lmc does not implement yet: refuse them clearly instead of ignoring them. */
static int refuse_unsupported(const cJSON *root, lmc_srv_req *r, lmc_srv_error *e) {
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "response_format")) && !cJSON_IsNull(v)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsObject(v) || !cJSON_IsString(t))
            return srv_err(e, 400, "response_format", "'response_format' must be an object with a 'type'");
        if (!strcmp(t->valuestring, "json_object")) r->json_mode = 1;
        else if (!strcmp(t->valuestring, "json_schema")) {
            const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
            const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
            if (!cJSON_IsObject(js) || !cJSON_IsObject(schema))
                return srv_err(e, 400, "response_format", "response_format json_schema needs json_schema.schema (an object)");
            if (lmc_jschema_compile(schema, &r->schema) < 0)
                return srv_err(e, 400, "response_format", "json_schema: %s", lmc_last_error());
            r->schema_doc = cJSON_Duplicate(schema, 1); /* NULL on OOM: the after-the-fact check is skipped */
            r->json_mode = 1;
        } else if (strcmp(t->valuestring, "text"))
            return srv_err(e, 400, "response_format",
                           "response_format '%.32s' is not supported (text, json_object, json_schema)", t->valuestring);
    }
    return 0;
}

static int common(const lmc_server *s, const cJSON *root, lmc_srv_req *r, lmc_srv_error *e) {
    const char *model = NULL;
    if (!cJSON_IsObject(root)) return srv_err(e, 400, NULL, "the request body must be a JSON object");
    if (jf_string(root, "model", &model, e) < 0) return -1;
    if (jf_bool(root, "stream", &r->stream, e) < 0) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return srv_err(e, 400, "stream_options", "'stream_options' must be an object");
        if (jf_bool(so, "include_usage", &r->include_usage, e) < 0) return -1;
    }
    if (refuse_unsupported(root, r, e) < 0) return -1;
    if (jf_sampling(s, root, 1, r, e) < 0) return -1;
    if (jf_stop(root, "stop", 16, r, e) < 0) return -1;
    int ign = 0;
    if (jf_bool(root, "ignore_eos", &ign, e) < 0) return -1;
    r->ignore_eos = ign;
    snprintf(r->model, sizeof r->model, "%s", s->model_id);
    r->created = (long)time(NULL);
    return 0;
}

/* tools and tool_choice: checks them and sets r->tool_mode; *use_tools gets the list to render
 * (NULL when there is none). */
int srv_require_any_tool(const cJSON *tools, lmc_srv_req *r, lmc_srv_error *e) {
    cJSON *schema = cJSON_CreateObject();
    cJSON_AddStringToObject(schema, "type", "object");
    cJSON *props = cJSON_AddObjectToObject(schema, "properties");
    cJSON *names = cJSON_AddArrayToObject(cJSON_AddObjectToObject(props, "name"), "enum");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "arguments"), "type", "object");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
        cJSON_AddItemToArray(names, cJSON_CreateString(n->valuestring));
    }
    cJSON *req = cJSON_AddArrayToObject(schema, "required");
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString("arguments"));
    lmc_status st = lmc_jschema_compile(schema, &r->schema);
    cJSON_Delete(schema);
    if (st < 0) return srv_err(e, 400, "tool_choice", "tool_choice over these tools: %s", lmc_last_error());
    r->tool_mode = 3;
    r->json_mode = 1;
    return 0;
}

/* A forced tool call and response_format's json_schema would both constrain the reply (and
 * both hold a compiled schema in r->schema): refused together. */
static int forced_tool_ok(const lmc_srv_req *r, lmc_srv_error *e) {
    if (r->schema)
        return srv_err(e, 400, "tool_choice",
                       "a forced tool_choice cannot be combined with response_format json_schema (both constrain the reply)");
    return 0;
}

static int parse_tools(const lmc_server *s, const cJSON *root, lmc_srv_req *r, const cJSON **use_tools, lmc_srv_error *e) {
    *use_tools = NULL;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) return srv_err(e, 400, "tools", "'tools' must be a list");
        if (cJSON_GetArraySize(tools) > 128) return srv_err(e, 400, "tools", "at most 128 tools");
        const cJSON *t;
        int i = 0;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
            if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(fn))
                return srv_err(e, 400, "tools", "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", i);
            if (!cJSON_IsString(name) || !*name->valuestring || strlen(name->valuestring) > 64 ||
                strspn(name->valuestring, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != strlen(name->valuestring))
                return srv_err(e, 400, "tools", "tools[%d].function.name must be 1-64 letters, digits, '_', '-' or '.'", i);
            if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
                return srv_err(e, 400, "tools", "tools[%d].function.parameters must be a JSON Schema object", i);
            i++;
        }
        if (i > 0) { *use_tools = tools; r->tool_mode = 1; }
    }
    if (!choice || cJSON_IsNull(choice)) return 0;
    if (cJSON_IsString(choice)) {
        const char *c = choice->valuestring;
        if (!strcmp(c, "none")) { r->tool_mode = 0; return 0; }
        if (!strcmp(c, "auto")) return 0;
        if (strcmp(c, "required")) return srv_err(e, 400, "tool_choice", "'tool_choice' must be none, auto, required or a named function");
        if (!*use_tools) return srv_err(e, 400, "tool_choice", "tool_choice 'required' needs tools");
        if (forced_tool_ok(r, e) < 0) return -1;
        if (cJSON_GetArraySize(*use_tools) != 1) return srv_require_any_tool(*use_tools, r, e);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(*use_tools, 0), "function");
        snprintf(r->tool_name, sizeof r->tool_name, "%s", cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring);
    } else {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsObject(choice) || !cJSON_IsString(name))
            return srv_err(e, 400, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        int found = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, *use_tools) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
            found |= !strcmp(n->valuestring, name->valuestring);
        }
        if (!found) return srv_err(e, 400, "tool_choice", "tool_choice names '%.64s', which is not among the tools", name->valuestring);
        if (forced_tool_ok(r, e) < 0) return -1;
        snprintf(r->tool_name, sizeof r->tool_name, "%s", name->valuestring);
    }
    r->tool_mode = 2;   /* the reply is the named function's arguments: a JSON object */
    r->json_mode = 1;
    const cJSON *t;
    cJSON_ArrayForEach(t, *use_tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (strcmp(cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring, r->tool_name) || !cJSON_IsObject(params)) continue;
        /* Arguments follow the parameters schema when lmc's guided decoding handles it; otherwise
         * they are only guaranteed to be a JSON object. The first tool of that name decides. */
        if (lmc_jschema_compile(params, &r->schema) < 0) { r->schema = NULL; lmc_clear_error(); }
        break;
    }
    return 0;
}

int openai_parse_chat(const lmc_server *s, const cJSON *root, lmc_srv_req *r, lmc_srv_error *e) {
    r->api = LMC_API_CHAT;
    srv_make_id(r->id, sizeof r->id, "chatcmpl-");
    if (common(s, root, r, e) < 0) return -1;
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!messages) return srv_err(e, 400, "messages", "'messages' is required");
    long max = 0;
    int rc1, rc2 = 1;
    if ((rc1 = jf_int(root, "max_completion_tokens", 0, 1L << 30, &max, e)) < 0) return -1;
    if (rc1 && (rc2 = jf_int(root, "max_tokens", 0, 1L << 30, &max, e)) < 0) return -1;
    int have = rc1 == 0 || (rc1 && rc2 == 0);
    long top = 0;
    int rc;
    if (jf_bool(root, "logprobs", &r->logprobs, e) < 0) return -1;
    if ((rc = jf_int(root, "top_logprobs", 0, LMC_MAX_TOP_LOGPROBS, &top, e)) < 0) return -1;
    if (rc == 0 && !r->logprobs) return srv_err(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r->top_logprobs = (int)top;
    const cJSON *tools = NULL;
    if (parse_tools(s, root, r, &tools, e) < 0) return -1;
    r->tool_fmt = s->tool_fmt;
    if (srv_reasoning_format(s, root, r, e) < 0) return -1;
    if (srv_render_chat(s, messages, tools, r, e) < 0) return -1;
    return srv_check_length(s, r, max, have, rc1 == 0 ? "max_completion_tokens" : "max_tokens", e);
}

int openai_parse_completion(const lmc_server *s, const cJSON *root, lmc_srv_req *r, lmc_srv_error *e) {
    r->api = LMC_API_COMPLETION;
    srv_make_id(r->id, sizeof r->id, "cmpl-");
    if (common(s, root, r, e) < 0) return -1;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "echo")) && cJSON_IsTrue(v))
        return srv_err(e, 400, "echo", "echo is not supported by this server yet");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!prompt || cJSON_IsNull(prompt)) return srv_err(e, 400, "prompt", "'prompt' is required");
    if (cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) == 1 && cJSON_IsString(cJSON_GetArrayItem(prompt, 0)))
        prompt = cJSON_GetArrayItem(prompt, 0);
    if (cJSON_IsString(prompt)) {
        if (!*prompt->valuestring) return srv_err(e, 400, "prompt", "'prompt' must not be empty");
        if (lmc_tokenizer_encode(s->p.tok, prompt->valuestring, strlen(prompt->valuestring), 1, &r->prompt, &r->n_prompt) < 0)
            return srv_err(e, 400, "prompt", "tokenizing the prompt failed: %s", lmc_last_error());
    } else if (cJSON_IsArray(prompt)) {
        int n = cJSON_GetArraySize(prompt);
        if (n == 0) return srv_err(e, 400, "prompt", "'prompt' must not be empty");
        r->prompt = malloc((size_t)n * sizeof *r->prompt);
        if (!r->prompt) return srv_err(e, 500, "prompt", "out of memory");
        int vocab = s->p.model->cfg.vocab_size;
        const cJSON *x;
        cJSON_ArrayForEach(x, prompt) {
            if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < vocab) ||
                x->valuedouble != (double)(int32_t)x->valuedouble)
                return srv_err(e, 400, "prompt", "'prompt' must be a string, or a list of token ids below %d (one prompt per request)", vocab);
            r->prompt[r->n_prompt++] = (int32_t)x->valuedouble;
        }
    } else {
        return srv_err(e, 400, "prompt", "'prompt' must be a string or a list of token ids");
    }
    long max = 16; /* OpenAI's default for completions */
    long lp = 0;
    int rc;
    if ((rc = jf_int(root, "logprobs", 0, 5, &lp, e)) < 0) return -1;
    if (rc == 0) { r->logprobs = 1; r->top_logprobs = (int)lp; }
    if ((rc = jf_int(root, "max_tokens", 0, 1L << 30, &max, e)) < 0) return -1;
    return srv_check_length(s, r, max, 1, "max_tokens", e);
}

static char *token_text(const lmc_server *s, int32_t id) {
    char *t = NULL;
    size_t n = 0;
    if (lmc_tokenizer_decode(s->p.tok, &id, 1, 0, &t, &n) < 0) return NULL;
    return t;
}

static cJSON *token_entry(const lmc_server *s, int32_t id, float lp) {
    cJSON *j = cJSON_CreateObject();
    char *t = token_text(s, id);
    cJSON_AddStringToObject(j, "token", t ? t : "");
    cJSON_AddNumberToObject(j, "logprob", lp);
    cJSON *b = cJSON_AddArrayToObject(j, "bytes");
    for (const unsigned char *p = (const unsigned char *)(t ? t : ""); *p; p++) cJSON_AddItemToArray(b, cJSON_CreateNumber(*p));
    free(t);
    return j;
}

/* Logprob entries [from, to) of r in the chat format ({"content": [...]}) or the
 * completions format ({"tokens", "token_logprobs", "top_logprobs", "text_offset"}). */
static cJSON *logprobs_json(const lmc_server *s, lmc_srv_req *r, int from, int to, size_t offset0) {
    pthread_mutex_lock(&r->mu);
    int n = to - from;
    lmc_srv_logprob *e = n > 0 ? malloc((size_t)n * sizeof *e) : NULL;
    if (e) memcpy(e, r->lps + from, (size_t)n * sizeof *e);
    else n = 0;
    pthread_mutex_unlock(&r->mu);
    cJSON *j = cJSON_CreateObject();
    if (r->api == LMC_API_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(j, "content");
        for (int i = 0; i < n; i++) {
            cJSON *t = token_entry(s, e[i].id, e[i].lp);
            cJSON *top = cJSON_AddArrayToObject(t, "top_logprobs");
            for (int k = 0; k < e[i].n_top; k++) cJSON_AddItemToArray(top, token_entry(s, e[i].top_id[k], e[i].top_lp[k]));
            cJSON_AddItemToArray(content, t);
        }
        cJSON_AddNullToObject(j, "refusal");
    } else {
        cJSON *tokens = cJSON_AddArrayToObject(j, "tokens"), *lps = cJSON_AddArrayToObject(j, "token_logprobs");
        cJSON *tops = cJSON_AddArrayToObject(j, "top_logprobs"), *offs = cJSON_AddArrayToObject(j, "text_offset");
        size_t off = offset0;
        for (int i = 0; i < n; i++) {
            char *t = token_text(s, e[i].id);
            cJSON_AddItemToArray(tokens, cJSON_CreateString(t ? t : ""));
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(e[i].lp));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
            off += t ? strlen(t) : 0;
            free(t);
            cJSON *top = cJSON_CreateObject();
            for (int k = 0; k < e[i].n_top; k++) {
                char *tt = token_text(s, e[i].top_id[k]);
                if (!cJSON_GetObjectItemCaseSensitive(top, tt ? tt : "")) cJSON_AddNumberToObject(top, tt ? tt : "", e[i].top_lp[k]);
                free(tt);
            }
            cJSON_AddItemToArray(tops, top);
        }
    }
    free(e);
    return j;
}

static cJSON *usage_json(const lmc_srv_req *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", r->n_cached);
    if (r->n_reasoning > 0)
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "completion_tokens_details"), "reasoning_tokens", r->n_reasoning);
    return u;
}

static cJSON *head(const lmc_srv_req *r, const char *object) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", r->id);
    cJSON_AddStringToObject(j, "object", object);
    cJSON_AddNumberToObject(j, "created", (double)r->created);
    cJSON_AddStringToObject(j, "model", r->model);
    cJSON_AddStringToObject(j, "system_fingerprint", "lmc");
    return j;
}

static void call_id(char *out, size_t cap, const lmc_srv_req *r, int i) {
    snprintf(out, cap, "call_%.20s_%d", r->id + (strncmp(r->id, "chatcmpl-", 9) ? 0 : 9), i);
}

cJSON *srv_reply_tool_calls(const lmc_srv_req *r, size_t from, char **content) {
    *content = NULL;
    if (r->tool_mode == 2) {
        cJSON *calls = cJSON_CreateArray();
        cJSON *c = cJSON_CreateObject();
        char id[64];
        call_id(id, sizeof id, r, 0);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", r->tool_name);
        cJSON_AddStringToObject(fn, "arguments", r->out ? r->out : "");
        cJSON_AddItemToArray(calls, c);
        return calls;
    }
    if (r->tool_mode == 3) { /* {"name": ..., "arguments": {...}} decoded under the tools' schema */
        cJSON *o = cJSON_Parse(r->out ? r->out : "");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name"), *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
        cJSON *calls = NULL;
        if (cJSON_IsString(name) && cJSON_IsObject(args)) {
            calls = cJSON_CreateArray();
            cJSON *c = cJSON_CreateObject();
            char id[64];
            call_id(id, sizeof id, r, 0);
            cJSON_AddStringToObject(c, "id", id);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", name->valuestring);
            char *a = cJSON_PrintUnformatted(args);
            cJSON_AddStringToObject(fn, "arguments", a ? a : "{}");
            free(a);
            cJSON_AddItemToArray(calls, c);
        }
        cJSON_Delete(o);
        return calls;
    }
    if (r->tool_mode != 1 || r->tool_fmt == LMC_TOOL_FMT_NONE) return NULL;
    cJSON *parsed = NULL;
    if (lmc_tools_parse((lmc_tool_fmt)r->tool_fmt, r->out && from <= r->out_len ? r->out + from : "", &parsed, content) <= 0) return NULL;
    cJSON *calls = cJSON_CreateArray();
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, parsed) {
        cJSON *c = cJSON_CreateObject();
        char id[64];
        call_id(id, sizeof id, r, i++);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", cJSON_GetObjectItemCaseSensitive(p, "name")->valuestring);
        cJSON_AddStringToObject(fn, "arguments", cJSON_GetObjectItemCaseSensitive(p, "arguments")->valuestring);
        cJSON_AddItemToArray(calls, c);
    }
    cJSON_Delete(parsed);
    return calls;
}

/* finish_reason: "tool_calls" when the model chose to call (auto); a forced call ends with "stop", as OpenAI's does. */
static const char *finish_reason(const lmc_srv_req *r, int has_calls) {
    if (has_calls && (r->tool_mode == 1 || r->tool_mode == 3) && r->finish == LMC_FINISH_STOP) return "tool_calls";
    return lmc_finish_openai(r->finish);
}

/* response_format json_schema: the decoder enforces the schema as it goes, except that exactly one
 * oneOf alternative matches (decoded as anyOf). The finished reply is checked against the whole
 * schema; a violation is reported in the choice as "schema_violation" (an lmc extension). */
static void schema_check(const lmc_srv_req *r, cJSON *choice) {
    if (!r->schema_doc || !choice || r->finish != LMC_FINISH_STOP || !r->out) return;
    char why[160];
    if (!lmc_jschema_validate(r->schema_doc, r->out, r->out_len, why, sizeof why))
        cJSON_AddStringToObject(choice, "schema_violation", why);
}

char *openai_final_body(const lmc_server *s, lmc_srv_req *r) {
    int chat = r->api == LMC_API_CHAT;
    cJSON *j = head(r, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(j, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *calls = NULL;
    if (chat) {
        char *content = NULL;
        calls = srv_reply_tool_calls(r, 0, &content);
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (!calls) cJSON_AddStringToObject(m, "content", r->out ? r->out : "");
        else if (content) cJSON_AddStringToObject(m, "content", content);
        else cJSON_AddNullToObject(m, "content");
        free(content);
        cJSON_AddNullToObject(m, "refusal");
        if (r->rout_len) cJSON_AddStringToObject(m, "reasoning_content", r->rout);
        if (calls) cJSON_AddItemToObject(m, "tool_calls", calls);
    } else {
        cJSON_AddStringToObject(c, "text", r->out ? r->out : "");
    }
    if (r->logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, r, 0, r->n_lps, 0));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", finish_reason(r, calls != NULL));
    schema_check(r, c);
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(j, "usage", usage_json(r));
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return out;
}

/* A chunk whose delta carries tool_calls (consumed). */
static cJSON *tool_chunk(lmc_srv_req *r, cJSON *tool_calls, int role) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", r->id);
    cJSON_AddStringToObject(j, "object", "chat.completion.chunk");
    cJSON_AddNumberToObject(j, "created", (double)r->created);
    cJSON_AddStringToObject(j, "model", r->model);
    cJSON_AddStringToObject(j, "system_fingerprint", "lmc");
    cJSON *choices = cJSON_AddArrayToObject(j, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    if (role) { cJSON_AddStringToObject(d, "role", "assistant"); cJSON_AddNullToObject(d, "content"); }
    cJSON_AddItemToObject(d, "tool_calls", tool_calls);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (r->include_usage) cJSON_AddNullToObject(j, "usage");
    return j;
}

/* Forced tool call, streamed: the first delta names the function, later ones add argument text. */
static cJSON *forced_delta(lmc_srv_req *r, const char *text, size_t n, int first) {
    cJSON *calls = cJSON_CreateArray();
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (first) {
        char id[64];
        call_id(id, sizeof id, r, 0);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
    }
    cJSON *fn = cJSON_AddObjectToObject(c, "function");
    if (first) cJSON_AddStringToObject(fn, "name", r->tool_name);
    char *t = malloc(n + 1);
    if (t) { memcpy(t, text, n); t[n] = 0; }
    cJSON_AddStringToObject(fn, "arguments", t ? t : "");
    free(t);
    cJSON_AddItemToArray(calls, c);
    return tool_chunk(r, calls, first);
}

static cJSON *chunk(lmc_srv_req *r, const char *text, size_t n, int role, const char *finish, cJSON *logprobs) {
    int chat = r->api == LMC_API_CHAT;
    cJSON *j = head(r, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(j, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *t = malloc(n + 1);
    if (t) { memcpy(t, text, n); t[n] = 0; }
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (!finish) cJSON_AddStringToObject(d, "content", t ? t : "");
    } else {
        cJSON_AddStringToObject(c, "text", t ? t : "");
    }
    free(t);
    if (logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (r->include_usage) cJSON_AddNullToObject(j, "usage");
    return j;
}

/* A chunk whose delta carries reasoning text (what llama.cpp's and vLLM's servers call reasoning_content). */
static cJSON *reasoning_chunk(lmc_srv_req *r, const char *text, size_t n) {
    cJSON *j = head(r, "chat.completion.chunk");
    cJSON *choices = cJSON_AddArrayToObject(j, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    char *t = malloc(n + 1);
    if (t) { memcpy(t, text, n); t[n] = 0; }
    cJSON_AddStringToObject(d, "reasoning_content", t ? t : "");
    free(t);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (r->include_usage) cJSON_AddNullToObject(j, "usage");
    return j;
}

void openai_stream(const lmc_server *s, lmc_srv_req *r, const char *rtext, size_t rn, const char *text, size_t n, int done,
                   lmc_sbuf *b) {
    /* Auto tool mode with a known format: the reply is only known to be calls or text at the end. */
    int buffered = r->api == LMC_API_CHAT && ((r->tool_mode == 1 && r->tool_fmt != LMC_TOOL_FMT_NONE) || r->tool_mode == 3);
    if (r->tool_mode == 3) r->tc_hold = 1; /* the call is known once its JSON is complete */
    if (r->phase == 0) {
        if (r->tool_mode == 2) sbuf_sse(b, NULL, forced_delta(r, "", 0, 1));
        else if (r->api == LMC_API_CHAT) sbuf_sse(b, NULL, chunk(r, "", 0, 1, NULL, NULL));
        r->phase = 1;
    }
    if (rn > 0 && r->api == LMC_API_CHAT) sbuf_sse(b, NULL, reasoning_chunk(r, rtext, rn));
    int has_calls = 0;
    if (r->tool_mode == 2) {
        if (n > 0) sbuf_sse(b, NULL, forced_delta(r, text, n, 0));
        n = 0;
        has_calls = 1;
    } else if (buffered) {
        /* Content streams until the template's tool-call marker could begin; from there the
         * rest waits for the end and is parsed into calls. */
        n = 0;
        if (!r->tc_hold) {
            size_t k;
            char *piece = lmc_srv_req_take_content(r, &k);
            if (piece) {
                sbuf_sse(b, NULL, chunk(r, piece, k, 0, NULL, NULL));
                free(piece);
            }
        }
        if (done && r->finish != LMC_FINISH_ERROR && r->finish != LMC_FINISH_CANCELLED && r->phase == 1) {
            char *content = NULL;
            cJSON *calls = r->tc_hold ? srv_reply_tool_calls(r, r->tc_emitted, &content) : NULL;
            if (!calls && r->tool_mode != 3) { free(content); content = strdup(r->out && r->tc_emitted <= r->out_len ? r->out + r->tc_emitted : ""); }
            if (content && *content) sbuf_sse(b, NULL, chunk(r, content, strlen(content), 0, NULL, NULL));
            free(content);
            if (calls) {
                int i = 0;
                cJSON *c;
                cJSON_ArrayForEach(c, calls) cJSON_AddNumberToObject(c, "index", i++);
                sbuf_sse(b, NULL, tool_chunk(r, calls, 0));
                has_calls = 1;
            }
        }
    }
    if (n > 0) {
        cJSON *lp = NULL;
        if (r->logprobs) {
            pthread_mutex_lock(&r->mu);
            int to = r->n_lps;
            pthread_mutex_unlock(&r->mu);
            lp = logprobs_json(s, r, r->lps_sent, to, r->sent - n);
            r->lps_sent = to;
        }
        sbuf_sse(b, NULL, chunk(r, text, n, 0, NULL, lp));
    }
    if (!done || r->phase == 2) return;
    if (r->finish == LMC_FINISH_ERROR || r->finish == LMC_FINISH_CANCELLED) {
        cJSON *j = cJSON_CreateObject();
        cJSON *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "message", r->finish == LMC_FINISH_ERROR ? r->err : "the server is shutting down");
        cJSON_AddStringToObject(e, "type", "server_error");
        cJSON_AddNullToObject(e, "param");
        cJSON_AddNullToObject(e, "code");
        sbuf_sse(b, NULL, j);
    } else {
        cJSON *fin = chunk(r, "", 0, 0, finish_reason(r, has_calls), NULL);
        schema_check(r, cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(fin, "choices"), 0));
        sbuf_sse(b, NULL, fin);
        if (r->include_usage) {
            cJSON *j = head(r, r->api == LMC_API_CHAT ? "chat.completion.chunk" : "text_completion");
            cJSON_AddArrayToObject(j, "choices");
            cJSON_AddItemToObject(j, "usage", usage_json(r));
            sbuf_sse(b, NULL, j);
        }
    }
    sbuf_puts(b, "data: [DONE]\n\n");
    r->phase = 2;
}

static cJSON *model_json(const lmc_server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started_at);
    cJSON_AddStringToObject(m, "owned_by", "lmc");
    cJSON_AddStringToObject(m, "tier", lmc_tier_name(s->p.model->profile.tier));
    cJSON_AddStringToObject(m, "profile", s->p.model->profile.id);
    cJSON_AddNumberToObject(m, "context_length", lmc_sched_n_ctx(s->sched));
    cJSON_AddNumberToObject(m, "max_model_len", lmc_sched_n_ctx(s->sched));
    cJSON_AddNumberToObject(m, "parameters", (double)s->p.model->n_params);
    cJSON_AddNumberToObject(m, "bytes", (double)s->p.model->weight_bytes);
    return m;
}

char *openai_models_body(const lmc_server *s) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(j, "data");
    cJSON_AddItemToArray(data, model_json(s));
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return out;
}

char *openai_model_body(const lmc_server *s) {
    cJSON *m = model_json(s);
    char *out = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return out;
}

/* ---- /v1/embeddings ---- */

static lmc_srv_req *embed_req(const lmc_server *s) {
    lmc_srv_req *r = lmc_srv_req_new();
    if (!r) return NULL;
    r->api = LMC_API_EMBEDDING;
    r->pooling = s->pooling;
    r->max_tokens = 1;
    r->server = s;
    return r;
}

int openai_parse_embeddings(const lmc_server *s, const cJSON *root, lmc_srv_req ***out, int *n_out, int *base64, int *dims,
                            lmc_srv_error *e) {
    *out = NULL;
    *n_out = 0;
    *base64 = 0;
    *dims = 0;
    const char *model = NULL, *fmt = NULL;
    if (jf_string(root, "model", &model, e) < 0 || jf_string(root, "encoding_format", &fmt, e) < 0) return -1;
    if (fmt && strcmp(fmt, "float") && strcmp(fmt, "base64"))
        return srv_err(e, 400, "encoding_format", "'encoding_format' must be 'float' or 'base64'");
    *base64 = fmt && !strcmp(fmt, "base64");
    long d = 0;
    int rc = jf_int(root, "dimensions", 1, s->p.model->cfg.hidden_size, &d, e);
    if (rc < 0) return -1;
    *dims = rc == 0 ? (int)d : 0;
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (!input || cJSON_IsNull(input)) return srv_err(e, 400, "input", "'input' is required");
    /* A string, a list of strings, a list of token ids, or a list of lists of token ids. */
    int n = 1, ids_single = 0;
    if (cJSON_IsArray(input)) {
        n = cJSON_GetArraySize(input);
        if (n == 0) return srv_err(e, 400, "input", "'input' must not be empty");
        if (n > 2048) return srv_err(e, 400, "input", "at most 2048 inputs per request");
        ids_single = cJSON_IsNumber(cJSON_GetArrayItem(input, 0));
        if (ids_single) n = 1;
    } else if (!cJSON_IsString(input)) {
        return srv_err(e, 400, "input", "'input' must be a string, a list of strings or a list of token-id lists");
    }
    lmc_srv_req **reqs = calloc((size_t)n, sizeof *reqs);
    if (!reqs) return srv_err(e, 500, "input", "out of memory");
    *out = reqs;
    int vocab = s->p.model->cfg.vocab_size, n_ctx = lmc_sched_n_ctx(s->sched);
    for (int i = 0; i < n; i++) {
        const cJSON *it = cJSON_IsString(input) || ids_single ? input : cJSON_GetArrayItem(input, i);
        lmc_srv_req *r = reqs[i] = embed_req(s);
        *n_out = i + 1;
        if (!r) return srv_err(e, 500, "input", "out of memory");
        if (cJSON_IsString(it)) {
            if (!*it->valuestring) return srv_err(e, 400, "input", "input %d is empty", i);
            if (lmc_tokenizer_encode(s->p.tok, it->valuestring, strlen(it->valuestring), 1, &r->prompt, &r->n_prompt) < 0)
                return srv_err(e, 400, "input", "tokenizing input %d failed: %s", i, lmc_last_error());
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) > 0) {
            int k = cJSON_GetArraySize(it);
            r->prompt = malloc((size_t)k * sizeof *r->prompt);
            if (!r->prompt) return srv_err(e, 500, "input", "out of memory");
            const cJSON *x;
            cJSON_ArrayForEach(x, it) {
                if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < vocab) || x->valuedouble != (double)(int32_t)x->valuedouble)
                    return srv_err(e, 400, "input", "input %d: token ids must be integers in [0, %d)", i, vocab);
                r->prompt[r->n_prompt++] = (int32_t)x->valuedouble;
            }
        } else {
            return srv_err(e, 400, "input", "input %d must be a non-empty string or list of token ids", i);
        }
        if (r->n_prompt == 0) return srv_err(e, 400, "input", "input %d has no tokens", i);
        if (r->n_prompt >= n_ctx) {
            e->code = "context_length_exceeded";
            return srv_err(e, 400, "input", "input %d has %d tokens; the context holds %d", i, r->n_prompt, n_ctx - 1);
        }
    }
    return 0;
}

static void b64(lmc_sbuf *b, const unsigned char *p, size_t n) {
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {tbl[v >> 18 & 63], tbl[v >> 12 & 63], i + 1 < n ? tbl[v >> 6 & 63] : '=', i + 2 < n ? tbl[v & 63] : '='};
        sbuf_add(b, q, 4);
    }
}

char *openai_embeddings_body(const lmc_server *s, lmc_srv_req **reqs, int n, int base64, int dims) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(j, "data");
    long tokens = 0;
    for (int i = 0; i < n; i++) {
        lmc_srv_req *r = reqs[i];
        int d = dims > 0 && dims < r->n_embd ? dims : r->n_embd;
        float *v = malloc((size_t)d * sizeof *v);
        if (!v) { cJSON_Delete(j); return NULL; }
        double norm = 0;
        for (int k = 0; k < d; k++) norm += (double)r->embedding[k] * r->embedding[k];
        float inv = d < r->n_embd && norm > 0 ? (float)(1.0 / sqrt(norm)) : 1.0f; /* shortened: renormalize */
        for (int k = 0; k < d; k++) v[k] = r->embedding[k] * inv;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "embedding");
        cJSON_AddNumberToObject(o, "index", i);
        if (base64) {
            lmc_sbuf b = {0};
            b64(&b, (const unsigned char *)v, (size_t)d * sizeof *v); /* little-endian f32, as OpenAI's */
            cJSON_AddStringToObject(o, "embedding", b.p ? b.p : "");
            free(b.p);
        } else {
            cJSON *a = cJSON_AddArrayToObject(o, "embedding");
            for (int k = 0; k < d; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[k]));
        }
        free(v);
        cJSON_AddItemToArray(data, o);
        tokens += r->n_prompt;
    }
    cJSON_AddStringToObject(j, "model", s->model_id);
    cJSON *u = cJSON_AddObjectToObject(j, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)tokens);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return out;
}
