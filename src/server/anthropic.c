/* anthropic.c — POST /v1/messages, Anthropic's Messages API: system, messages
 * with text / tool_use / tool_result content blocks, tools and tool_choice,
 * stop_sequences, max_tokens, sampling; the reply message and the streaming
 * events (message_start, content_block_start/delta/stop, message_delta,
 * message_stop). Requests are translated into the chat form the template and
 * the OpenAI side share. */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools.h"

/* Text blocks (or a string) joined into *out; other block types are errors unless allowed. */
static int blocks_text(const cJSON *content, const char *param, lmc_sbuf *out, lmc_srv_error *e) {
    if (cJSON_IsString(content)) { sbuf_puts(out, content->valuestring); return 0; }
    if (!cJSON_IsArray(content)) return srv_err(e, 400, param, "%s must be a string or a list of content blocks", param);
    const cJSON *blk;
    cJSON_ArrayForEach(blk, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(blk, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
        if (!cJSON_IsObject(blk) || !cJSON_IsString(type))
            return srv_err(e, 400, param, "each content block of %s must be an object with a 'type'", param);
        if (!strcmp(type->valuestring, "tool_use") || !strcmp(type->valuestring, "tool_result")) continue; /* handled by the caller */
        if (strcmp(type->valuestring, "text"))
            return srv_err(e, 400, param, "content block type '%.32s' is not supported (text, tool_use, tool_result)", type->valuestring);
        if (!cJSON_IsString(text)) return srv_err(e, 400, param, "a text block of %s needs a string 'text'", param);
        sbuf_puts(out, text->valuestring);
    }
    return 0;
}

static cJSON *message(const char *role, const char *text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", text ? text : "");
    return m;
}

/* One Anthropic message → chat messages appended to norm: tool_result blocks become tool
 * messages, tool_use blocks the assistant's tool_calls. */
static int convert_message(const cJSON *msg, int i, cJSON *norm, lmc_srv_error *e) {
    char param[32];
    snprintf(param, sizeof param, "messages.%d", i);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!cJSON_IsObject(msg) || !cJSON_IsString(role) ||
        (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return srv_err(e, 400, param, "%s.role must be 'user' or 'assistant'", param);
    if (!content) return srv_err(e, 400, param, "%s.content: Field required", param);
    int assistant = !strcmp(role->valuestring, "assistant");
    lmc_sbuf text = {0};
    sbuf_puts(&text, "");
    if (blocks_text(content, param, &text, e) < 0) { free(text.p); return -1; }
    cJSON *calls = NULL;
    int n_text_blocks = cJSON_IsString(content), n_results = 0;
    const cJSON *blk;
    const cJSON *blocks = cJSON_IsArray(content) ? content : NULL;
    cJSON_ArrayForEach(blk, blocks) {
        const char *type = cJSON_GetObjectItemCaseSensitive(blk, "type")->valuestring;
        if (!strcmp(type, "text")) { n_text_blocks++; continue; }
        if (!strcmp(type, "tool_use")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "id");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(blk, "name");
            const cJSON *input = cJSON_GetObjectItemCaseSensitive(blk, "input");
            if (!assistant || !cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input)) {
                cJSON_Delete(calls);
                free(text.p);
                return srv_err(e, 400, param, "%s: a tool_use block (assistant only) needs id, name and an input object", param);
            }
            if (!calls) calls = cJSON_CreateArray();
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "id", id->valuestring);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", name->valuestring);
            cJSON_AddItemToObject(fn, "arguments", cJSON_Duplicate(input, 1));
            cJSON_AddItemToArray(calls, c);
        } else { /* tool_result */
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "tool_use_id");
            const cJSON *rc = cJSON_GetObjectItemCaseSensitive(blk, "content");
            lmc_sbuf rt = {0};
            sbuf_puts(&rt, "");
            if (assistant || !cJSON_IsString(id) || (rc && blocks_text(rc, param, &rt, e) < 0)) {
                free(rt.p);
                cJSON_Delete(calls);
                free(text.p);
                if (e->status) return -1;
                return srv_err(e, 400, param, "%s: a tool_result block (user only) needs tool_use_id", param);
            }
            cJSON *m = message("tool", rt.p);
            cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
            cJSON_AddItemToArray(norm, m);
            free(rt.p);
            n_results++;
        }
    }
    if (n_text_blocks > 0 || calls || n_results == 0) {
        cJSON *m = message(role->valuestring, text.p);
        if (calls) cJSON_AddItemToObject(m, "tool_calls", calls);
        cJSON_AddItemToArray(norm, m);
    }
    free(text.p);
    return 0;
}

/* Anthropic tools → the OpenAI form the templates read; tool_choice → r->tool_mode. */
static int convert_tools(const cJSON *root, lmc_srv_req *r, cJSON **out, lmc_srv_error *e) {
    *out = NULL;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) return srv_err(e, 400, "tools", "tools must be a list");
        cJSON *list = cJSON_CreateArray();
        const cJSON *t;
        int i = 0;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
            const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
            const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
            if (!cJSON_IsObject(t) || !cJSON_IsString(name) || !*name->valuestring || strlen(name->valuestring) > 64 ||
                !cJSON_IsObject(schema)) {
                cJSON_Delete(list);
                return srv_err(e, 400, "tools", "tools.%d needs a name (1-64 characters) and an input_schema object", i);
            }
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(fn, "name", name->valuestring);
            if (cJSON_IsString(desc)) cJSON_AddStringToObject(fn, "description", desc->valuestring);
            cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, 1));
            cJSON_AddItemToArray(list, o);
            i++;
        }
        if (i > 0) { *out = list; r->tool_mode = 1; }
        else cJSON_Delete(list);
    }
    if (!choice || cJSON_IsNull(choice)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(choice, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(choice, "name");
    if (!cJSON_IsObject(choice) || !cJSON_IsString(type))
        return srv_err(e, 400, "tool_choice", "tool_choice must be an object with a type (auto, any, tool, none)");
    const char *ty = type->valuestring;
    if (!strcmp(ty, "auto")) return 0;
    if (!strcmp(ty, "none")) { r->tool_mode = 0; return 0; }
    if (!*out) return srv_err(e, 400, "tool_choice", "tool_choice '%.16s' needs tools", ty);
    const char *pick = NULL;
    if (!strcmp(ty, "any")) {
        if (cJSON_GetArraySize(*out) != 1) return srv_require_any_tool(*out, r, e);
        pick = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(*out, 0), "function"), "name")->valuestring;
    } else if (!strcmp(ty, "tool")) {
        if (!cJSON_IsString(name)) return srv_err(e, 400, "tool_choice", "tool_choice 'tool' needs a name");
        const cJSON *t;
        cJSON_ArrayForEach(t, *out) {
            const char *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name")->valuestring;
            if (!strcmp(n, name->valuestring)) pick = n;
        }
        if (!pick) return srv_err(e, 400, "tool_choice", "tool_choice names '%.64s', which is not among the tools", name->valuestring);
    } else {
        return srv_err(e, 400, "tool_choice", "tool_choice type must be auto, any, tool or none");
    }
    snprintf(r->tool_name, sizeof r->tool_name, "%s", pick);
    r->tool_mode = 2;
    r->json_mode = 1;
    const cJSON *t;
    cJSON_ArrayForEach(t, *out) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (strcmp(cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring, pick)) continue;
        /* The input follows input_schema when guided decoding handles it; otherwise it is only a JSON
         * object. The first tool of that name decides. */
        if (lmc_jschema_compile(cJSON_GetObjectItemCaseSensitive(fn, "parameters"), &r->schema) < 0) { r->schema = NULL; lmc_clear_error(); }
        break;
    }
    return 0;
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
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!messages) return srv_err(e, 400, "messages", "messages: Field required");
    if (!cJSON_IsArray(messages)) return srv_err(e, 400, "messages", "messages must be a list");
    if (cJSON_GetArraySize(messages) == 0) return srv_err(e, 400, "messages", "messages: at least one message is required");
    cJSON *tools = NULL;
    if (convert_tools(root, r, &tools, e) < 0) { cJSON_Delete(tools); return -1; }
    r->tool_fmt = s->tool_fmt;
    if (srv_reasoning_format(s, root, r, e) < 0) { cJSON_Delete(tools); return -1; }

    cJSON *norm = cJSON_CreateArray();
    if (!norm) { cJSON_Delete(tools); return srv_err(e, 500, NULL, "out of memory"); }
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(root, "system");
    rc = 0;
    if (system && !cJSON_IsNull(system)) {
        lmc_sbuf t = {0};
        sbuf_puts(&t, "");
        rc = blocks_text(system, "system", &t, e);
        if (rc == 0) cJSON_AddItemToArray(norm, message("system", t.p));
        free(t.p);
    }
    const cJSON *msg;
    int i = 0;
    cJSON_ArrayForEach(msg, messages) {
        if (rc < 0) break;
        rc = convert_message(msg, i++, norm, e);
    }
    if (rc == 0) rc = srv_render_chat(s, norm, tools, r, e);
    cJSON_Delete(norm);
    cJSON_Delete(tools);
    if (rc < 0) return -1;
    return srv_check_length(s, r, max, 1, "max_tokens", e);
}

/* ---- replies ---- */

static cJSON *tool_use_block(const cJSON *call, int with_input) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    const char *id = cJSON_GetObjectItemCaseSensitive(call, "id")->valuestring;
    char tid[80];
    snprintf(tid, sizeof tid, "toolu_%s", strncmp(id, "call_", 5) ? id : id + 5);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", tid);
    cJSON_AddStringToObject(b, "name", cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring);
    cJSON *input = with_input ? cJSON_Parse(cJSON_GetObjectItemCaseSensitive(fn, "arguments")->valuestring) : NULL;
    if (!cJSON_IsObject(input)) { cJSON_Delete(input); input = cJSON_CreateObject(); }
    cJSON_AddItemToObject(b, "input", input);
    return b;
}

static const char *stop_reason(const lmc_srv_req *r, int has_calls) {
    if (r->finish == LMC_FINISH_LENGTH) return "max_tokens";
    if (has_calls) return "tool_use";
    return r->stop_index >= 0 ? "stop_sequence" : "end_turn";
}

static void add_stop_fields(cJSON *j, const lmc_srv_req *r, int has_calls) {
    cJSON_AddStringToObject(j, "stop_reason", stop_reason(r, has_calls));
    if (r->stop_index >= 0 && !has_calls) cJSON_AddStringToObject(j, "stop_sequence", r->stop[r->stop_index]);
    else cJSON_AddNullToObject(j, "stop_sequence");
}

static cJSON *typed_block(const char *type) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", type);
    return j;
}

static cJSON *message_json(const lmc_srv_req *r, int final) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", r->id);
    cJSON_AddStringToObject(j, "type", "message");
    cJSON_AddStringToObject(j, "role", "assistant");
    cJSON_AddStringToObject(j, "model", r->model);
    cJSON *content = cJSON_AddArrayToObject(j, "content");
    if (final && r->rout_len) { /* the reasoning as a thinking block before the reply */
        cJSON *t = typed_block("thinking");
        cJSON_AddStringToObject(t, "thinking", r->rout);
        cJSON_AddStringToObject(t, "signature", "");
        cJSON_AddItemToArray(content, t);
    }
    if (final) {
        char *text = NULL;
        cJSON *calls = srv_reply_tool_calls(r, 0, &text);
        const char *t = calls ? text : r->out;
        if (!calls || (t && *t)) {
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "type", "text");
            cJSON_AddStringToObject(b, "text", t ? t : "");
            cJSON_AddItemToArray(content, b);
        }
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) cJSON_AddItemToArray(content, tool_use_block(c, 1));
        add_stop_fields(j, r, calls != NULL);
        cJSON_Delete(calls);
        free(text);
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
    cJSON *j = message_json(r, 1);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return out;
}

static cJSON *typed(const char *type) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", type);
    return j;
}

static void block_start(lmc_sbuf *b, int index, cJSON *block) {
    cJSON *j = typed("content_block_start");
    cJSON_AddNumberToObject(j, "index", index);
    cJSON_AddItemToObject(j, "content_block", block);
    sbuf_sse(b, "content_block_start", j);
}

static void block_delta(lmc_sbuf *b, int index, const char *kind, const char *field, const char *text, size_t n) {
    cJSON *j = typed("content_block_delta");
    cJSON_AddNumberToObject(j, "index", index);
    cJSON *d = cJSON_AddObjectToObject(j, "delta");
    cJSON_AddStringToObject(d, "type", kind);
    char *t = malloc(n + 1);
    if (t) { memcpy(t, text, n); t[n] = 0; }
    cJSON_AddStringToObject(d, field, t ? t : "");
    free(t);
    sbuf_sse(b, "content_block_delta", j);
}

static void block_stop(lmc_sbuf *b, int index) {
    cJSON *j = typed("content_block_stop");
    cJSON_AddNumberToObject(j, "index", index);
    sbuf_sse(b, "content_block_stop", j);
}

static cJSON *text_block(void) {
    cJSON *blk = typed("text");
    cJSON_AddStringToObject(blk, "text", "");
    return blk;
}

static cJSON *thinking_block(void) {
    cJSON *blk = typed("thinking");
    cJSON_AddStringToObject(blk, "thinking", "");
    cJSON_AddStringToObject(blk, "signature", "");
    return blk;
}

/* Make `start` (a thinking, text or tool_use block of kind 1, 2 or 3) the open block, closing an open
 * block of another kind first; returns its index. Blocks are numbered in the order they open. */
static int use_block(lmc_sbuf *b, lmc_srv_req *r, int kind, cJSON *start) {
    if (r->blk_kind == kind) { cJSON_Delete(start); return r->blk_index - 1; }
    if (r->blk_kind) block_stop(b, r->blk_index - 1);
    block_start(b, r->blk_index, start);
    r->blk_kind = kind;
    if (kind != 1) r->block_open = 1; /* the reply's text (or forced tool_use) block exists */
    return r->blk_index++;
}

static void close_block(lmc_sbuf *b, lmc_srv_req *r) {
    if (r->blk_kind) block_stop(b, r->blk_index - 1);
    r->blk_kind = 0;
}

/* The forced tool's tool_use block (tool_mode 2). */
static cJSON *forced_block(const lmc_srv_req *r) {
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(call, "function");
    char id[80];
    snprintf(id, sizeof id, "call_%.20s_0", r->id + (strncmp(r->id, "msg_", 4) ? 0 : 4));
    cJSON_AddStringToObject(call, "id", id);
    cJSON_AddStringToObject(fn, "name", r->tool_name);
    cJSON *blk = tool_use_block(call, 0);
    cJSON_Delete(call);
    return blk;
}

void anthropic_stream(const lmc_server *s, lmc_srv_req *r, const char *rtext, size_t rn, const char *text, size_t n, int done,
                      lmc_sbuf *b) {
    (void)s;
    /* Auto tool mode with a known format: text streams until a call could begin, calls come at the end. */
    int buffered = (r->tool_mode == 1 && r->tool_fmt != LMC_TOOL_FMT_NONE) || r->tool_mode == 3;
    if (r->tool_mode == 3) r->tc_hold = 1; /* the call is known once its JSON is complete */
    if (r->phase == 0) {
        cJSON *j = typed("message_start");
        cJSON_AddItemToObject(j, "message", message_json(r, 0));
        sbuf_sse(b, "message_start", j);
        sbuf_sse(b, "ping", typed("ping"));
        r->phase = 1;
    }
    /* Blocks open as their text arrives: thinking (reasoning) first, then the reply's text or tool input. */
    if (rn > 0) block_delta(b, use_block(b, r, 1, thinking_block()), "thinking_delta", "thinking", rtext, rn);
    if (n > 0 && !buffered) {
        if (r->tool_mode == 2) block_delta(b, use_block(b, r, 3, forced_block(r)), "input_json_delta", "partial_json", text, n);
        else block_delta(b, use_block(b, r, 2, text_block()), "text_delta", "text", text, n);
    }
    if (buffered && !r->tc_hold) {
        /* Text streams until the template's tool-call marker could begin. */
        size_t k;
        char *piece = lmc_srv_req_take_content(r, &k);
        if (piece) {
            block_delta(b, use_block(b, r, 2, text_block()), "text_delta", "text", piece, k);
            free(piece);
        }
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
    int has_calls = r->tool_mode == 2;
    if (buffered) {
        char *content = NULL;
        cJSON *calls = r->tc_hold ? srv_reply_tool_calls(r, r->tc_emitted, &content) : NULL;
        if (!calls && r->tool_mode != 3) { free(content); content = strdup(r->out && r->tc_emitted <= r->out_len ? r->out + r->tc_emitted : ""); }
        if ((content && *content) || (!calls && !r->block_open)) {
            int index = use_block(b, r, 2, text_block());
            if (content && *content) block_delta(b, index, "text_delta", "text", content, strlen(content));
        }
        close_block(b, r);
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
            const char *args = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "arguments")->valuestring;
            block_start(b, r->blk_index, tool_use_block(c, 0));
            block_delta(b, r->blk_index, "input_json_delta", "partial_json", args, strlen(args));
            block_stop(b, r->blk_index++);
        }
        has_calls = calls != NULL;
        cJSON_Delete(calls);
        free(content);
    } else {
        if (!r->block_open) use_block(b, r, r->tool_mode == 2 ? 3 : 2, r->tool_mode == 2 ? forced_block(r) : text_block());
        close_block(b, r);
    }
    cJSON *j = typed("message_delta");
    cJSON *d = cJSON_AddObjectToObject(j, "delta");
    add_stop_fields(d, r, has_calls);
    cJSON *u = cJSON_AddObjectToObject(j, "usage");
    cJSON_AddNumberToObject(u, "output_tokens", r->n_gen);
    sbuf_sse(b, "message_delta", j);
    sbuf_sse(b, "message_stop", typed("message_stop"));
}
