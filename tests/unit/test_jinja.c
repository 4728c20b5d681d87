/* test_jinja.c — unit tests for the Jinja interpreter (src/tok/jinja*) and chat rendering
 * (src/tok/chat.c), plus a driver mode used by tests/oracle/jinja.mjs:
 *
 *   test_jinja --driver TEMPLATE_FILE   one JSON context per stdin line → one JSON string per line
 *   test_jinja --chat TEMPLATE_FILE     one {messages, tools, documents, add_generation_prompt,
 *                                       bos_token, eos_token, extra} per line, via lmc_chat_render
 * Errors print {"error": "..."} on that line.
 */
#include "test.h"

#include <stdlib.h>
#include <string.h>

#include "tok/chat.h"
#include "tok/jinja.h"

/* ---- helpers ---------------------------------------------------------------------- */
static char result_buf[1 << 16];

/* Render src with JSON context; returns the output, or "ERR:<message>" on error. */
static const char *R(const char *src, const char *ctx_json) {
    lmc_jinja_template *t;
    if (lmc_jinja_parse(src, strlen(src), &t) < 0) {
        snprintf(result_buf, sizeof result_buf, "ERR:%s", lmc_last_error());
        return result_buf;
    }
    cJSON *ctx = ctx_json ? cJSON_Parse(ctx_json) : NULL;
    if (ctx_json && !ctx) { lmc_jinja_free(t); return "BADJSON"; }
    char *out; size_t n;
    lmc_status st = lmc_jinja_render(t, ctx, &out, &n);
    if (st < 0) snprintf(result_buf, sizeof result_buf, "ERR:%s", lmc_last_error());
    else {
        if (strlen(out) != n) snprintf(result_buf, sizeof result_buf, "LENMISMATCH");
        else snprintf(result_buf, sizeof result_buf, "%s", out);
        free(out);
    }
    cJSON_Delete(ctx);
    lmc_jinja_free(t);
    return result_buf;
}
#define EXPECT(src, ctx, want) CHECK_EQ_STR(R(src, ctx), want)
static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
#define EXPECT_ERR(src, ctx, frag) do { const char *r_ = R(src, ctx); \
    CHECK_MSG(starts(r_, "ERR:") && strstr(r_, frag), "got \"%s\", want error containing \"%s\"", r_, frag); } while (0)

/* ---- driver ------------------------------------------------------------------------- */
static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (!b) { fclose(f); return NULL; }
    size_t k = fread(b, 1, (size_t)sz, f);
    fclose(f);
    b[k] = 0;
    *n = k;
    return b;
}

static void print_json_string(const char *s, size_t n) {
    cJSON *j = cJSON_CreateString(s);
    char *p = cJSON_PrintUnformatted(j);
    (void)n;
    puts(p);
    free(p);
    cJSON_Delete(j);
}
static void print_error(const char *msg) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", msg);
    char *p = cJSON_PrintUnformatted(o);
    puts(p);
    free(p);
    cJSON_Delete(o);
}

static int driver(const char *path, int chat) {
    size_t n;
    char *src = slurp(path, &n);
    if (!src) { fprintf(stderr, "cannot read %s\n", path); return 2; }
    lmc_jinja_template *t = NULL;
    lmc_status pst = lmc_jinja_parse(src, n, &t);
    char *parse_err = pst < 0 ? strdup(lmc_last_error()) : NULL;
    char *line = NULL; size_t cap = 0; ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        if (parse_err) { print_error(parse_err); continue; }
        cJSON *ctx = cJSON_ParseWithLength(line, (size_t)len);
        if (!ctx) { print_error("bad JSON context line"); continue; }
        char *out = NULL; size_t on = 0;
        lmc_status st;
        if (chat) {
            lmc_chat_params p = lmc_chat_default_params();
            p.messages = cJSON_GetObjectItemCaseSensitive(ctx, "messages");
            const cJSON *tools = cJSON_GetObjectItemCaseSensitive(ctx, "tools");
            const cJSON *docs = cJSON_GetObjectItemCaseSensitive(ctx, "documents");
            p.tools = cJSON_IsNull(tools) ? NULL : tools;
            p.documents = cJSON_IsNull(docs) ? NULL : docs;
            p.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "add_generation_prompt"));
            p.continue_final_message = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "continue_final_message"));
            const cJSON *bos = cJSON_GetObjectItemCaseSensitive(ctx, "bos_token"), *eos = cJSON_GetObjectItemCaseSensitive(ctx, "eos_token");
            p.bos_token = cJSON_IsString(bos) ? bos->valuestring : NULL;
            p.eos_token = cJSON_IsString(eos) ? eos->valuestring : NULL;
            const cJSON *extra = cJSON_GetObjectItemCaseSensitive(ctx, "extra");
            p.extra = cJSON_IsObject(extra) ? extra : NULL;
            st = lmc_chat_render_template(t, &p, &out, &on);
        } else st = lmc_jinja_render(t, ctx, &out, &on);
        if (st < 0) print_error(lmc_last_error());
        else print_json_string(out, on);
        fflush(stdout);
        free(out);
        cJSON_Delete(ctx);
    }
    free(line);
    free(parse_err);
    lmc_jinja_free(t);
    free(src);
    return 0;
}

/* ---- tests ------------------------------------------------------------------------------ */
static void t_smoke(void) {
    EXPECT("hello", NULL, "hello");
    EXPECT("{{ 1 + 2 }}", NULL, "3");
    EXPECT("{{ name }}!", "{\"name\":\"x\"}", "x!");
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--driver")) return driver(argv[2], 0);
    if (argc == 3 && !strcmp(argv[1], "--chat")) return driver(argv[2], 1);
    RUN(t_smoke);
    return TEST_END();
}
