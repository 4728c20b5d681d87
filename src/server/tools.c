/* tools.c — tool-call formats of chat-template families and the reply parser (see tools.h).
 * Formats are recognised by the marker a template writes (<tool_call>, [TOOL_CALLS],
 * <|python_tag|>); a reply that does not parse as calls stays plain content. */
#include "tools.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

lmc_tool_fmt lmc_tool_fmt_detect(const char *src) {
    if (!src) return LMC_TOOL_FMT_NONE;
    if (strstr(src, "<tool_call>")) return LMC_TOOL_FMT_HERMES;
    if (strstr(src, "<|channel|>") && strstr(src, "to=")) return LMC_TOOL_FMT_HARMONY;
    if (strstr(src, "[TOOL_CALLS]")) return LMC_TOOL_FMT_MISTRAL;
    if (strstr(src, "<|python_tag|>") || (strstr(src, "\"parameters\"") && strstr(src, "<|eom_id|>")))
        return LMC_TOOL_FMT_LLAMA3;
    return LMC_TOOL_FMT_NONE;
}

const char *lmc_tool_fmt_name(lmc_tool_fmt f) {
    switch (f) {
    case LMC_TOOL_FMT_HERMES: return "hermes";
    case LMC_TOOL_FMT_MISTRAL: return "mistral";
    case LMC_TOOL_FMT_LLAMA3: return "llama3";
    case LMC_TOOL_FMT_HARMONY: return "harmony";
    default: return "none";
    }
}

/* {"name": s, "arguments"|"parameters": v} → {"name", "arguments": JSON text}; NULL if not a call. */
static cJSON *to_call(const cJSON *o) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !*name->valuestring) return NULL;
    char *a = NULL;
    if (!args) a = strdup("{}");
    else if (cJSON_IsString(args)) a = strdup(args->valuestring); /* already JSON text */
    else a = cJSON_PrintUnformatted(args);
    if (!a) return NULL;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", name->valuestring);
    cJSON_AddStringToObject(c, "arguments", a);
    free(a);
    return c;
}

static char *trimmed(const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) { s++; n--; }
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (!n) return NULL;
    char *t = malloc(n + 1);
    if (t) { memcpy(t, s, n); t[n] = 0; }
    return t;
}

static void append(char **buf, size_t *len, const char *s, size_t n) {
    char *b = realloc(*buf, *len + n + 1);
    if (!b) return;
    memcpy(b + *len, s, n);
    *len += n;
    b[*len] = 0;
    *buf = b;
}

static int parse_hermes(const char *text, cJSON *calls, char **content) {
    const char *open = "<tool_call>", *close = "</tool_call>";
    size_t lo = strlen(open), lc = strlen(close);
    char *rest = NULL;
    size_t rlen = 0;
    const char *p = text;
    for (;;) {
        const char *a = strstr(p, open);
        if (!a) break;
        const char *b = strstr(a + lo, close);
        size_t inner = b ? (size_t)(b - (a + lo)) : strlen(a + lo); /* an unclosed last call still counts */
        cJSON *o = cJSON_ParseWithLength(a + lo, inner);
        cJSON *c = o ? to_call(o) : NULL;
        cJSON_Delete(o);
        if (!c) break; /* not a call: leave the text as content */
        append(&rest, &rlen, p, (size_t)(a - p));
        cJSON_AddItemToArray(calls, c);
        p = b ? b + lc : a + lo + inner;
    }
    append(&rest, &rlen, p, strlen(p));
    *content = rest ? trimmed(rest, rlen) : NULL;
    free(rest);
    return cJSON_GetArraySize(calls);
}

static int parse_json_calls(const char *start, const char *text_before, size_t before_len, cJSON *calls, char **content) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithOpts(start, &end, 0);
    if (!v) return 0;
    int ok = 1;
    if (cJSON_IsArray(v)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, v) {
            cJSON *c = to_call(x);
            if (!c) { ok = 0; break; }
            cJSON_AddItemToArray(calls, c);
        }
    } else {
        cJSON *c = to_call(v);
        if (c) cJSON_AddItemToArray(calls, c);
        else ok = 0;
    }
    cJSON_Delete(v);
    if (!ok) {
        while (cJSON_GetArraySize(calls)) cJSON_DeleteItemFromArray(calls, 0);
        return 0;
    }
    char *rest = NULL;
    size_t rlen = 0;
    append(&rest, &rlen, text_before, before_len);
    if (end) append(&rest, &rlen, end, strlen(end));
    *content = rest ? trimmed(rest, rlen) : NULL;
    free(rest);
    return cJSON_GetArraySize(calls);
}

/* Where the harmony call whose recipient is at `to` begins: its header's "<|channel|>" when that comes
 * first (with no message between), else the recipient itself. */
static const char *harmony_call_start(const char *text, const char *to) {
    const char *best = to;
    for (const char *c = text; (c = strstr(c, "<|channel|>")) && c < to; c++) {
        const char *m = strstr(c, "<|message|>");
        if (!m || m > to) { best = c; break; }
    }
    return best;
}

static int parse_harmony(const char *text, cJSON *calls, char **content) {
    static const char rcpt[] = "to=functions.";
    char *rest = NULL;
    size_t rlen = 0;
    const char *p = text;
    for (const char *to; (to = strstr(p, rcpt));) {
        const char *start = harmony_call_start(p, to), *name = to + strlen(rcpt), *ne = name;
        while (*ne && !isspace((unsigned char)*ne) && *ne != '<') ne++;
        const char *msg = strstr(ne, "<|message|>");
        if (ne == name || !msg) break;
        const char *args = msg + strlen("<|message|>");
        /* the arguments run to the next call's header (or the end; a trailing "<|call|>" is not theirs) */
        const char *next = strstr(args, rcpt), *end = next ? harmony_call_start(args, next) : args + strlen(args);
        const char *call_end = strstr(args, "<|call|>");
        const char *ae = call_end && call_end < end ? call_end : end;
        cJSON *v = cJSON_ParseWithLength(args, (size_t)(ae - args));
        if (!cJSON_IsObject(v)) { cJSON_Delete(v); break; }
        char *a = cJSON_PrintUnformatted(v);
        cJSON_Delete(v);
        if (!a) break;
        char *nm = strndup(name, (size_t)(ne - name));
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "name", nm ? nm : "");
        cJSON_AddStringToObject(c, "arguments", a);
        free(nm);
        free(a);
        cJSON_AddItemToArray(calls, c);
        append(&rest, &rlen, p, (size_t)(start - p));
        p = call_end && call_end < end ? call_end + strlen("<|call|>") : end;
    }
    append(&rest, &rlen, p, strlen(p));
    *content = rest ? trimmed(rest, rlen) : NULL;
    free(rest);
    return cJSON_GetArraySize(calls);
}

int lmc_tools_parse(lmc_tool_fmt f, const char *text, cJSON **calls_out, char **content) {
    *calls_out = NULL;
    *content = NULL;
    cJSON *calls = cJSON_CreateArray();
    if (!calls) return -1;
    int n = 0;
    if (f == LMC_TOOL_FMT_HERMES) {
        n = parse_hermes(text, calls, content);
    } else if (f == LMC_TOOL_FMT_MISTRAL) {
        const char *m = strstr(text, "[TOOL_CALLS]");
        if (m) n = parse_json_calls(m + strlen("[TOOL_CALLS]"), text, (size_t)(m - text), calls, content);
    } else if (f == LMC_TOOL_FMT_HARMONY) {
        n = parse_harmony(text, calls, content);
    } else if (f == LMC_TOOL_FMT_LLAMA3) {
        const char *m = strstr(text, "<|python_tag|>");
        const char *start = m ? m + strlen("<|python_tag|>") : text;
        while (isspace((unsigned char)*start)) start++;
        if (*start == '{') n = parse_json_calls(start, text, m ? (size_t)(m - text) : 0, calls, content);
    }
    if (n <= 0) {
        cJSON_Delete(calls);
        free(*content);
        *content = strdup(text);
        return *content ? 0 : -1;
    }
    *calls_out = calls;
    return n;
}

size_t lmc_tools_safe_prefix(lmc_tool_fmt f, const char *text, size_t len, int *calls_start) {
    *calls_start = 0;
    const char *marker = f == LMC_TOOL_FMT_HERMES ? "<tool_call>" : f == LMC_TOOL_FMT_MISTRAL ? "[TOOL_CALLS]" : NULL;
    if (f == LMC_TOOL_FMT_LLAMA3) {
        /* A call is the whole reply: it starts with '{' or <|python_tag|> after optional whitespace. */
        size_t i = 0;
        while (i < len && isspace((unsigned char)text[i])) i++;
        const char *tag = "<|python_tag|>";
        size_t rest = len - i, tl = strlen(tag);
        if (i == len || (rest < tl && !memcmp(text + i, tag, rest))) return 0;     /* undecided yet */
        if (text[i] == '{' || (rest >= tl && !memcmp(text + i, tag, tl))) { *calls_start = 1; return 0; }
        return len;
    }
    if (f == LMC_TOOL_FMT_HARMONY) {
        /* a call's header: "<|channel|>" (the splitter leaves no other in the content) or the recipient */
        const char *ms[2] = {"<|channel|>", "to=functions."};
        size_t keep = len;
        for (int m = 0; m < 2; m++) {
            size_t ml = strlen(ms[m]);
            for (size_t p = 0; p + ml <= len && p < keep; p++)
                if (!memcmp(text + p, ms[m], ml)) { *calls_start = 1; keep = p; break; }
        }
        if (*calls_start) return keep;
        for (int m = 0; m < 2; m++)
            for (size_t k = strlen(ms[m]) - 1; k > 0; k--)
                if (k <= len && !memcmp(text + len - k, ms[m], k)) { keep = len - k < keep ? len - k : keep; break; }
        return keep;
    }
    if (!marker) return len;
    size_t ml = strlen(marker);
    for (size_t p = 0; p + ml <= len; p++)
        if (text[p] == marker[0] && !memcmp(text + p, marker, ml)) { *calls_start = 1; return p; }
    for (size_t k = ml - 1; k > 0; k--) /* the longest tail that could grow into the marker */
        if (k <= len && !memcmp(text + len - k, marker, k)) return len - k;
    return len;
}
