/* anthropic.c — POST /v1/messages, Anthropic's Messages API: system, messages
 * with text content blocks, stop_sequences, max_tokens, sampling; the reply
 * message and the streaming events (message_start, content_block_start/delta/
 * stop, message_delta, message_stop). */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Content (string or text blocks) → a string item. */
static cJSON *blocks_text(const cJSON *content, const char *param, lmc_srv_error *e) {
    if (cJSON_IsString(content)) return cJSON_CreateString(content->valuestring);
    if (!cJSON_IsArray(content)) {
        srv_err(e, 400, param, "%s must be a string or a list of content blocks", param);
        return NULL;
    }
    lmc_sbuf b = {0};
    sbuf_puts(&b, "");
    const cJSON *blk;
    cJSON_ArrayForEach(blk, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(blk, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
        if (!cJSON_IsObject(blk) || !cJSON_IsString(type)) {
            srv_err(e, 400, param, "each content block of %s must be an object with a 'type'", param);
            free(b.p);
            return NULL;
        }
        if (strcmp(type->valuestring, "text")) {
            srv_err(e, 400, param, "content block type '%.32s' is not supported (text only)", type->valuestring);
            free(b.p);
            return NULL;
        }
        if (!cJSON_IsString(text)) {
            srv_err(e, 400, param, "a text block of %s needs a string 'text'", param);
            free(b.p);
            return NULL;
        }
        sbuf_puts(&b, text->valuestring);
    }
    cJSON *s = b.oom ? NULL : cJSON_CreateString(b.p);
    free(b.p);
    if (!s) srv_err(e, 500, param, "out of memory");
    return s;
}

int anthropic_parse(const lmc_server *s, const cJSON *root, lmc_srv_req *r, lmc_srv_error *e) {
    r->api = LMC_API_MESSAGES;
    srv_make_id(r->id, sizeof r->id, "msg_");
    snprintf(r->model, sizeof r->model, "%s", s->model_id);
    r->created = (long)time(NULL);
    if (!cJSON_IsObject(root)) return srv_err(e, 400, NULL, "the request body must be a JSON object");
    const char *model = NULL;
    if (jf_string(root, "model", &model, e) < 0) return -1;
    long max = 0;
    int rc = jf_int(root, "max_tokens", 1, 1L << 30, &max, e);
    if (rc < 0) return -1;
    if (rc == 1) return srv_err(e, 400, "max_tokens", "max_tokens: Field required");
    if (jf_bool(root, "stream", &r->stream, e) < 0) return -1;
    if (jf_sampling(s, root, 0, r, e) < 0) return -1;
    const cJSON *ss = cJSON_GetObjectItemCaseSensitive(root, "stop_sequences");
    if (ss && !cJSON_IsNull(ss) && !cJSON_IsArray(ss))
        return srv_err(e, 400, "stop_sequences", "stop_sequences must be a list of strings");
    if (jf_stop(root, "stop_sequences", 16, r, e) < 0) return -1;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0)
        return srv_err(e, 400, "tools", "tools are not supported by this server yet");
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!messages) return srv_err(e, 400, "messages", "messages: Field required");
    if (!cJSON_IsArray(messages)) return srv_err(e, 400, "messages", "messages must be a list");
    if (cJSON_GetArraySize(messages) == 0) return srv_err(e, 400, "messages", "messages: at least one message is required");

    cJSON *norm = cJSON_CreateArray();
    if (!norm) return srv_err(e, 500, NULL, "out of memory");
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (system && !cJSON_IsNull(system)) {
        cJSON *t = blocks_text(system, "system", e);
        if (!t) { cJSON_Delete(norm); return -1; }
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddItemToObject(m, "content", t);
        cJSON_AddItemToArray(norm, m);
    }
    const cJSON *msg;
    int i = 0;
    cJSON_ArrayForEach(msg, messages) {
        char param[32];
        snprintf(param, sizeof param, "messages.%d", i++);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(role) ||
            (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant"))) {
            cJSON_Delete(norm);
            return srv_err(e, 400, param, "%s.role must be 'user' or 'assistant'", param);
        }
        if (!content) { cJSON_Delete(norm); return srv_err(e, 400, param, "%s.content: Field required", param); }
        cJSON *t = blocks_text(content, param, e);
        if (!t) { cJSON_Delete(norm); return -1; }
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", role->valuestring);
        cJSON_AddItemToObject(m, "content", t);
        cJSON_AddItemToArray(norm, m);
    }
    rc = srv_render_chat(s, norm, NULL, r, e);
    cJSON_Delete(norm);
    if (rc < 0) return -1;
    return srv_check_length(s, r, max, 1, "max_tokens", e);
}

static const char *stop_reason(const lmc_srv_req *r) {
    if (r->finish == LMC_FINISH_LENGTH) return "max_tokens";
    return r->stop_index >= 0 ? "stop_sequence" : "end_turn";
}

static void add_stop_fields(cJSON *j, const lmc_srv_req *r) {
    cJSON_AddStringToObject(j, "stop_reason", stop_reason(r));
    if (r->stop_index >= 0) cJSON_AddStringToObject(j, "stop_sequence", r->stop[r->stop_index]);
    else cJSON_AddNullToObject(j, "stop_sequence");
}

static cJSON *message(const lmc_srv_req *r, int final) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", r->id);
    cJSON_AddStringToObject(j, "type", "message");
    cJSON_AddStringToObject(j, "role", "assistant");
    cJSON_AddStringToObject(j, "model", r->model);
    cJSON *content = cJSON_AddArrayToObject(j, "content");
    if (final) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", r->out ? r->out : "");
        cJSON_AddItemToArray(content, b);
        add_stop_fields(j, r);
    } else {
        cJSON_AddNullToObject(j, "stop_reason");
        cJSON_AddNullToObject(j, "stop_sequence");
    }
    cJSON *u = cJSON_AddObjectToObject(j, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "output_tokens", final ? r->n_gen : 0);
    return j;
}

char *anthropic_final_body(const lmc_server *s, lmc_srv_req *r) {
    (void)s;
    cJSON *j = message(r, 1);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return out;
}

static cJSON *typed(const char *type) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", type);
    return j;
}

void anthropic_stream(const lmc_server *s, lmc_srv_req *r, const char *text, size_t n, int done, lmc_sbuf *b) {
    (void)s;
    if (r->phase == 0) {
        cJSON *j = typed("message_start");
        cJSON_AddItemToObject(j, "message", message(r, 0));
        sbuf_sse(b, "message_start", j);
        j = typed("content_block_start");
        cJSON_AddNumberToObject(j, "index", 0);
        cJSON *blk = cJSON_AddObjectToObject(j, "content_block");
        cJSON_AddStringToObject(blk, "type", "text");
        cJSON_AddStringToObject(blk, "text", "");
        sbuf_sse(b, "content_block_start", j);
        sbuf_sse(b, "ping", typed("ping"));
        r->phase = 1;
    }
    if (n > 0) {
        cJSON *j = typed("content_block_delta");
        cJSON_AddNumberToObject(j, "index", 0);
        cJSON *d = cJSON_AddObjectToObject(j, "delta");
        cJSON_AddStringToObject(d, "type", "text_delta");
        char *t = malloc(n + 1);
        if (t) { memcpy(t, text, n); t[n] = 0; }
        cJSON_AddStringToObject(d, "text", t ? t : "");
        free(t);
        sbuf_sse(b, "content_block_delta", j);
    }
    if (!done || r->phase == 2) return;
    r->phase = 2;
    if (r->finish == LMC_FINISH_ERROR || r->finish == LMC_FINISH_CANCELLED) {
        cJSON *j = typed("error");
        cJSON *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "type", r->finish == LMC_FINISH_ERROR ? "api_error" : "overloaded_error");
        cJSON_AddStringToObject(e, "message", r->finish == LMC_FINISH_ERROR ? r->err : "the server is shutting down");
        sbuf_sse(b, "error", j);
        return;
    }
    cJSON *j = typed("content_block_stop");
    cJSON_AddNumberToObject(j, "index", 0);
    sbuf_sse(b, "content_block_stop", j);
    j = typed("message_delta");
    cJSON *d = cJSON_AddObjectToObject(j, "delta");
    add_stop_fields(d, r);
    cJSON *u = cJSON_AddObjectToObject(j, "usage");
    cJSON_AddNumberToObject(u, "output_tokens", r->n_gen);
    sbuf_sse(b, "message_delta", j);
    sbuf_sse(b, "message_stop", typed("message_stop"));
}
