/* chat.c — apply_chat_template around the Jinja renderer, and chat template discovery.
 *
 * The context mirrors transformers' render_jinja_template: messages, tools (None when
 * absent), documents (None when absent), add_generation_prompt, then the special tokens
 * and extra keyword arguments (extra wins over bos/eos). continue_final_message trims
 * the output after the final message's content exactly as transformers does.
 */
#include "tok/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lmc_chat_params lmc_chat_default_params(void) {
    lmc_chat_params p;
    memset(&p, 0, sizeof p);
    return p;
}

static int is_py_space(unsigned char ch) { return ch == ' ' || (ch >= 9 && ch <= 13) || (ch >= 0x1c && ch <= 0x1f); }

/* ASCII-whitespace strip (Python also strips Unicode spaces; messages rarely end in them) */
static void strip_span(const char *s, size_t n, size_t *b, size_t *e, int left, int right) {
    size_t i = 0, j = n;
    if (left) while (i < j && is_py_space((unsigned char)s[i])) i++;
    if (right) while (j > i && is_py_space((unsigned char)s[j - 1])) j--;
    *b = i; *e = j;
}

static lmc_status continue_final(const lmc_chat_params *p, char *out, size_t *len) {
    const cJSON *last = cJSON_GetArrayItem(p->messages, cJSON_GetArraySize(p->messages) - 1);
    const cJSON *content = last ? cJSON_GetObjectItemCaseSensitive(last, "content") : NULL;
    const char *msg = NULL;
    if (cJSON_IsString(content)) msg = content->valuestring;
    else if (cJSON_IsArray(content)) {
        for (int i = cJSON_GetArraySize(content) - 1; i >= 0 && !msg; i--) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(content, i), "text");
            if (cJSON_IsString(t)) msg = t->valuestring;
        }
        if (!msg) return lmc_fail(LMC_ERR_ARG, "continue_final_message is set but we could not find any text to continue in the final message");
    }
    if (!msg) return lmc_fail(LMC_ERR_ARG, "continue_final_message is set but the final message has no content");
    size_t mn = strlen(msg), sb, se, lb, le;
    strip_span(msg, mn, &sb, &se, 1, 1);
    strip_span(msg, mn, &lb, &le, 1, 0);
    size_t sn = se - sb;
    /* rindex of the stripped message */
    const char *found = NULL;
    if (sn <= *len)
        for (size_t k = *len - sn + 1; k-- > 0;)
            if (memcmp(out + k, msg + sb, sn) == 0) { found = out + k; break; }
    if (!found)
        return lmc_fail(LMC_ERR_ARG, "continue_final_message is set but the final message does not appear in the "
                                     "chat after applying the chat template");
    size_t loc = (size_t)(found - out), cut;
    size_t lstrip_len = le - lb;
    if (loc + lstrip_len <= *len && lstrip_len == mn && memcmp(out + loc, msg, mn) == 0) cut = loc + mn;
    else cut = loc + sn;
    if (cut > *len) cut = *len;
    out[cut] = 0;
    *len = cut;
    return LMC_OK;
}

lmc_status lmc_chat_render_template(const lmc_jinja_template *t, const lmc_chat_params *p, char **out, size_t *out_len) {
    return lmc_chat_render_template_ex(t, p, NULL, out, out_len);
}

lmc_status lmc_chat_render_template_ex(const lmc_jinja_template *t, const lmc_chat_params *p,
                                       const lmc_jinja_options *opt, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!p || !cJSON_IsArray(p->messages)) return lmc_fail(LMC_ERR_ARG, "chat: messages must be a JSON array");
    if (p->add_generation_prompt && p->continue_final_message)
        return lmc_fail(LMC_ERR_ARG, "chat: continue_final_message and add_generation_prompt are not compatible");
    if (p->extra && !cJSON_IsObject(p->extra)) return lmc_fail(LMC_ERR_ARG, "chat: extra arguments must be a JSON object");
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx) return lmc_fail(LMC_ERR_NOMEM, "chat: out of memory");
    /* borrowed references: freed with ctx without touching the caller's objects */
    cJSON_AddItemReferenceToObject(ctx, "messages", (cJSON *)p->messages);
    if (p->tools) cJSON_AddItemReferenceToObject(ctx, "tools", (cJSON *)p->tools);
    else cJSON_AddNullToObject(ctx, "tools");
    if (p->documents) cJSON_AddItemReferenceToObject(ctx, "documents", (cJSON *)p->documents);
    else cJSON_AddNullToObject(ctx, "documents");
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", p->add_generation_prompt != 0);
    if (p->bos_token) cJSON_AddStringToObject(ctx, "bos_token", p->bos_token);
    if (p->eos_token) cJSON_AddStringToObject(ctx, "eos_token", p->eos_token);
    if (p->extra) {
        for (cJSON *e = p->extra->child; e; e = e->next) {
            if (!e->string) continue;
            if (!strcmp(e->string, "messages") || !strcmp(e->string, "tools") || !strcmp(e->string, "documents") ||
                !strcmp(e->string, "add_generation_prompt")) {
                cJSON_Delete(ctx);
                return lmc_fail(LMC_ERR_ARG, "chat: extra argument '%s' collides with a chat parameter", e->string);
            }
            cJSON_DeleteItemFromObjectCaseSensitive(ctx, e->string);
            cJSON_AddItemReferenceToObject(ctx, e->string, e);
        }
    }
    char *text = NULL; size_t n = 0;
    lmc_status st = lmc_jinja_render_ex(t, ctx, opt, &text, &n);
    cJSON_Delete(ctx);
    if (st < 0) return st;
    if (p->continue_final_message) {
        st = continue_final(p, text, &n);
        if (st < 0) { free(text); return st; }
    }
    *out = text;
    if (out_len) *out_len = n;
    return LMC_OK;
}

lmc_status lmc_chat_render(const char *template_source, const lmc_chat_params *p, char **out, size_t *out_len) {
    *out = NULL;
    if (!template_source) return lmc_fail(LMC_ERR_ARG, "chat: no template");
    lmc_jinja_template *t;
    LMC_TRY(lmc_jinja_parse(template_source, strlen(template_source), &t));
    lmc_status st = lmc_chat_render_template(t, p, out, out_len);
    lmc_jinja_free(t);
    return st;
}

/* number tokens of a JSON text, in document order */
typedef struct numspan { const char *p; size_t n; } numspan;

static size_t scan_numbers(const char *t, size_t len, numspan *out, size_t cap) {
    size_t k = 0, i = 0;
    while (i < len) {
        char ch = t[i];
        if (ch == '"') {
            for (i++; i < len && t[i] != '"'; i++) if (t[i] == '\\') i++;
            i++;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t s = i++;
            while (i < len && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.' || t[i] == 'e' || t[i] == 'E' ||
                               t[i] == '+' || t[i] == '-')) i++;
            if (out && k < cap) { out[k].p = t + s; out[k].n = i - s; }
            k++;
        } else i++;
    }
    return k;
}

static size_t collect_numbers(cJSON *node, cJSON **out, size_t k, int depth) {
    if (!node || depth > 1000) return k;
    if (cJSON_IsNumber(node)) { if (out) out[k] = node; return k + 1; }
    for (cJSON *c = node->child; c; c = c->next) k = collect_numbers(c, out, k, depth + 1);
    return k;
}

lmc_status lmc_chat_json_keep_numbers(cJSON *root, const char *text, size_t len) {
    if (!root || !text) return lmc_fail(LMC_ERR_ARG, "json: NULL tree or text");
    size_t nt = scan_numbers(text, len, NULL, 0), nn = collect_numbers(root, NULL, 0, 0);
    if (nt != nn) return lmc_fail(LMC_ERR_ARG, "json: the text has %zu numbers but the tree %zu", nt, nn);
    if (!nn) return LMC_OK;
    numspan *spans = malloc(nn * sizeof *spans);
    cJSON **nodes = malloc(nn * sizeof *nodes);
    char **copies = calloc(nn, sizeof *copies);
    lmc_status st = LMC_OK;
    if (!spans || !nodes || !copies) st = lmc_fail(LMC_ERR_NOMEM, "json: out of memory");
    if (st == LMC_OK) {
        scan_numbers(text, len, spans, nn);
        collect_numbers(root, nodes, 0, 0);
        for (size_t i = 0; i < nn && st == LMC_OK; i++) {
            if (nodes[i]->valuestring || spans[i].n > 64) { st = lmc_fail(LMC_ERR_ARG, "json: unexpected number node"); break; }
            copies[i] = malloc(spans[i].n + 1);
            if (!copies[i]) { st = lmc_fail(LMC_ERR_NOMEM, "json: out of memory"); break; }
            memcpy(copies[i], spans[i].p, spans[i].n);
            copies[i][spans[i].n] = 0;
        }
    }
    if (st == LMC_OK) for (size_t i = 0; i < nn; i++) nodes[i]->valuestring = copies[i];
    else if (copies) for (size_t i = 0; i < nn; i++) free(copies[i]);
    free(spans); free(nodes); free(copies);
    return st;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

lmc_status lmc_chat_template_select(const cJSON *value, const char *name, int has_tools, char **out) {
    *out = NULL;
    if (cJSON_IsString(value)) {
        if (name && strcmp(name, "default") != 0)
            return lmc_fail(LMC_ERR_NOT_FOUND, "chat template '%s' not found (the model has a single template)", name);
        *out = dup_str(value->valuestring);
        return *out ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory");
    }
    if (!cJSON_IsArray(value)) return lmc_fail(LMC_ERR_FORMAT, "chat_template must be a string or a list of {name, template}");
    const char *want = name;
    if (!want) {
        want = "default";
        if (has_tools)
            for (const cJSON *e = value->child; e; e = e->next) {
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
                if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "tool_use")) want = "tool_use";
            }
    }
    for (const cJSON *e = value->child; e; e = e->next) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name"), *tp = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (!cJSON_IsString(nm) || !cJSON_IsString(tp))
            return lmc_fail(LMC_ERR_FORMAT, "chat_template list entries need string 'name' and 'template'");
        if (!strcmp(nm->valuestring, want)) {
            *out = dup_str(tp->valuestring);
            return *out ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory");
        }
    }
    return lmc_fail(LMC_ERR_NOT_FOUND, "chat template '%s' not found", want);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL; size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 65536 * 2;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); return NULL; }
            buf = nb;
        }
        size_t k = fread(buf + n, 1, 65536, f);
        n += k;
        if (k < 65536) break;
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

static lmc_status from_json_file(const char *path, const char *name, int has_tools, char **out, int *found) {
    size_t n;
    char *text = read_file(path, &n);
    *found = 0;
    if (!text) return LMC_OK;
    cJSON *j = cJSON_ParseWithLength(text, n);
    free(text);
    if (!j) return lmc_fail(LMC_ERR_FORMAT, "%s: invalid JSON", path);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    lmc_status st = LMC_OK;
    if (v) {
        *found = 1;
        st = lmc_chat_template_select(v, name, has_tools, out);
        if (st < 0) lmc_fail_context(st, "%s", path);
    }
    cJSON_Delete(j);
    return st;
}

lmc_status lmc_chat_template_load(const char *model_dir, const char *name, int has_tools, char **out) {
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", model_dir);
    if (!name || !strcmp(name, "default")) {
        size_t n;
        char *text = read_file(path, &n);
        if (text) {
            if (strlen(text) != n) { free(text); return lmc_fail(LMC_ERR_FORMAT, "%s: NUL byte in template", path); }
            *out = text;
            return LMC_OK;
        }
    } else {
        snprintf(path, sizeof path, "%s/additional_chat_templates/%s.jinja", model_dir, name);
        char *text = read_file(path, NULL);
        if (text) { *out = text; return LMC_OK; }
    }
    int found;
    snprintf(path, sizeof path, "%s/chat_template.json", model_dir);
    LMC_TRY(from_json_file(path, name, has_tools, out, &found));
    if (found) return LMC_OK;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    LMC_TRY(from_json_file(path, name, has_tools, out, &found));
    if (found) return LMC_OK;
    return lmc_fail(LMC_ERR_NOT_FOUND, "%s: no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json)", model_dir);
}
