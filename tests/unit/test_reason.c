/* test_reason.c — the reasoning splitter (src/server/reason.c): "<think>" and harmony outputs
 * fed whole, split at every byte position and byte by byte give the same reasoning and content;
 * prompts that open the reasoning; unterminated reasoning; outputs without markers; markers
 * inside text; the constrained-decoding state. */
#include <stdlib.h>
#include <string.h>

#include "server/reason.h"
#include "server/tools.h"
#include "test.h"

typedef struct split { char r[4096], c[4096]; size_t rn, cn; int order_ok, seen_content; } split;

static void emit(void *ctx, int reasoning, const char *p, size_t n) {
    split *s = ctx;
    if (reasoning && s->seen_content) s->order_ok = 0;
    if (!reasoning && n) s->seen_content = 1;
    char *dst = reasoning ? s->r : s->c;
    size_t *dn = reasoning ? &s->rn : &s->cn;
    if (*dn + n < sizeof s->r) { memcpy(dst + *dn, p, n); *dn += n; dst[*dn] = 0; }
}

/* Feed text in pieces cut at cuts[0..n_cuts) (ascending) and finish. */
static split run_cuts(lmc_reason_fmt fmt, const char *prompt, const char *text, const size_t *cuts, int n_cuts) {
    split s;
    memset(&s, 0, sizeof s);
    s.order_ok = 1;
    lmc_reason rs;
    lmc_reason_init(&rs, fmt, prompt, prompt ? strlen(prompt) : 0);
    size_t at = 0, len = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        lmc_reason_feed(&rs, text + at, to - at, 0, emit, &s);
        at = to;
    }
    lmc_reason_feed(&rs, "", 0, 1, emit, &s);
    lmc_reason_free(&rs);
    return s;
}

/* Whole, cut once at every position, cut twice at every pair (short texts), byte by byte:
 * always reasoning want_r and content want_c. Returns the number of mismatches. */
static int check_all(lmc_reason_fmt fmt, const char *prompt, const char *text, const char *want_r, const char *want_c) {
    size_t len = strlen(text);
    int bad = 0;
    split s = run_cuts(fmt, prompt, text, NULL, 0);
    if (strcmp(s.r, want_r) || strcmp(s.c, want_c) || !s.order_ok) {
        fprintf(stderr, "  whole %s: reasoning \"%s\" content \"%s\"\n", text, s.r, s.c);
        bad++;
    }
    for (size_t i = 0; i <= len; i++) {
        s = run_cuts(fmt, prompt, text, &i, 1);
        if (strcmp(s.r, want_r) || strcmp(s.c, want_c)) {
            if (!bad) fprintf(stderr, "  cut at %zu of %s: reasoning \"%s\" content \"%s\"\n", i, text, s.r, s.c);
            bad++;
        }
        for (size_t j = i; len <= 80 && j <= len; j++) {
            size_t two[2] = {i, j};
            s = run_cuts(fmt, prompt, text, two, 2);
            if (strcmp(s.r, want_r) || strcmp(s.c, want_c)) {
                if (!bad) fprintf(stderr, "  cuts at %zu,%zu of %s: reasoning \"%s\" content \"%s\"\n", i, j, text, s.r, s.c);
                bad++;
            }
        }
    }
    size_t *every = malloc((len + 1) * sizeof *every);
    for (size_t i = 0; i < len; i++) every[i] = i + 1;
    s = run_cuts(fmt, prompt, text, every, len ? (int)len - 1 : 0);
    free(every);
    if (strcmp(s.r, want_r) || strcmp(s.c, want_c)) {
        fprintf(stderr, "  byte by byte %s: reasoning \"%s\" content \"%s\"\n", text, s.r, s.c);
        bad++;
    }
    return bad;
}

static void test_think_markers(void) {
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, "<think>\nLet me see.\n</think>\n\nThe answer is 4.", "Let me see.", "The answer is 4."), 0);
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, "  <think>a < b, c </thin d</think>x", "a < b, c </thin d", "x"), 0);
    /* "<think>" only opens at the start; later it is content, as is a second "</think>" */
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, "Hello <think>no</think> world", "", "Hello <think>no</think> world"), 0);
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, "<think>a</think>b</think>c", "a", "b</think>c"), 0);
    /* nested opening markers are reasoning text; the first close ends it */
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, "<think><think>x</think>y</think>", "<think>x", "y</think>"), 0);
    /* empty reasoning */
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, "<think>\n\n</think>\n\nHi", "", "Hi"), 0);
}

static void test_think_no_markers(void) {
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, "Just an answer, no tags.", "", "Just an answer, no tags."), 0);
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, "  <thin", "", "  <thin"), 0);   /* a cut marker at the end is text */
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, "<b>bold</b>", "", "<b>bold</b>"), 0);
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, NULL, " \n ", "", " \n "), 0);
    CHECK_EQ_INT(check_all(LMC_REASON_OFF, NULL, "<think>kept</think>all", "", "<think>kept</think>all"), 0);
}

static void test_think_open_in_prompt(void) {
    const char *p = "<|im_start|>assistant\n<think>\n";
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, p, "Step one.\nStep two.\n</think>\n\nDone.", "Step one.\nStep two.", "Done."), 0);
    /* unterminated (max_tokens): everything is reasoning, a cut close marker included */
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, p, "Still thinking about it \n", "Still thinking about it", ""), 0);
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, p, "Still </thi", "Still </thi", ""), 0);
    /* a prompt that closed the reasoning (thinking disabled) starts fresh */
    CHECK_EQ_INT(check_all(LMC_REASON_THINK, "<think>\n\n</think>\n\n", "Plain.", "", "Plain."), 0);
}

static void test_harmony(void) {
    const char *p = "<|start|>user<|message|>Hi<|end|><|start|>assistant";
    const char *out = "<|channel|>analysis<|message|>User says hi.<|end|><|start|>assistant<|channel|>final<|message|>Hello!";
    CHECK_EQ_INT(check_all(LMC_REASON_HARMONY, p, out, "User says hi.", "Hello!"), 0);
    /* the header may be completed by the output (prompt ends inside it) */
    CHECK_EQ_INT(check_all(LMC_REASON_HARMONY, "<|start|>assistant<|channel|>",
                           "analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>ok", "think", "ok"), 0);
    /* the prompt opened the final channel */
    CHECK_EQ_INT(check_all(LMC_REASON_HARMONY, "<|start|>assistant<|channel|>final<|message|>", "Direct <|x", "", "Direct <|x"), 0);
    /* a template without "<|start|>" markers that opens the analysis channel */
    CHECK_EQ_INT(check_all(LMC_REASON_HARMONY, "<|user|>\nHi<|end|>\n<|assistant|>\n<|channel|>analysis<|message|>",
                           "hm<|end|>x", "hm", "x"), 0);
    /* unterminated analysis at max_tokens */
    CHECK_EQ_INT(check_all(LMC_REASON_HARMONY, p, "<|channel|>analysis<|message|>Need to <|en", "Need to <|en", ""), 0);
    /* a commentary call keeps its header in the content */
    CHECK_EQ_INT(check_all(LMC_REASON_HARMONY, p,
                           "<|channel|>analysis<|message|>Use tool.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}",
                           "Use tool.", "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}"), 0);
    /* two analysis messages join; text that is not harmony at all is content */
    CHECK_EQ_INT(check_all(LMC_REASON_HARMONY, p, "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>",
                           "ab", ""), 0);
    CHECK_EQ_INT(check_all(LMC_REASON_HARMONY, p, "plain text", "", "plain text"), 0);
}

static void test_in_content(void) {
    lmc_reason rs;
    split s;
    memset(&s, 0, sizeof s);
    lmc_reason_init(&rs, LMC_REASON_THINK, "<think>\n", 8);
    CHECK(!lmc_reason_in_content(&rs));
    lmc_reason_feed(&rs, "hmm</th", 7, 0, emit, &s);
    CHECK(!lmc_reason_in_content(&rs));
    lmc_reason_feed(&rs, "ink>", 4, 0, emit, &s);
    CHECK(lmc_reason_in_content(&rs));
    lmc_reason_free(&rs);
    lmc_reason_init(&rs, LMC_REASON_THINK, NULL, 0);
    CHECK(lmc_reason_in_content(&rs));   /* undecided: constraints apply from the first token */
    lmc_reason_free(&rs);
    lmc_reason_init(&rs, LMC_REASON_HARMONY, "<|start|>assistant", 18);
    CHECK(!lmc_reason_in_content(&rs));
    lmc_reason_feed(&rs, "<|channel|>analysis<|message|>x", 31, 0, emit, &s);
    CHECK(!lmc_reason_in_content(&rs));
    lmc_reason_feed(&rs, "<|end|><|start|>assistant<|channel|>final<|message|>", 52, 0, emit, &s);
    CHECK(lmc_reason_in_content(&rs));
    lmc_reason_free(&rs);
}

static void test_detect(void) {
    CHECK_EQ_INT(lmc_reason_detect("{{ '<|start|>assistant<|channel|>final<|message|>' }}", 1), LMC_REASON_HARMONY);
    CHECK_EQ_INT(lmc_reason_detect("{{ '<|start|>assistant<|channel|>final<|message|>' }}", 0), LMC_REASON_THINK);
    CHECK_EQ_INT(lmc_reason_detect("{{ '<|im_start|>assistant\\n' }}", 1), LMC_REASON_THINK);
}

/* A gpt-oss reply through the splitter, then the content through the harmony tool-call parser. */
static void test_harmony_tool_calls(void) {
    const char *p = "<|start|>user<|message|>Weather?<|end|><|start|>assistant";
    const char *outs[2] = {
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Paris\"}",
    };
    for (int k = 0; k < 2; k++) {
        split s = run_cuts(LMC_REASON_HARMONY, p, outs[k], NULL, 0);
        CHECK_EQ_STR(s.r, "Need weather.");
        cJSON *calls = NULL;
        char *content = NULL;
        CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_HARMONY, s.c, &calls, &content), 1);
        cJSON *c = cJSON_GetArrayItem(calls, 0);
        CHECK_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")), "get_weather");
        CHECK_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItem(c, "arguments")), "{\"city\":\"Paris\"}");
        CHECK(content == NULL);
        cJSON_Delete(calls);
        free(content);
        int start = 0;
        size_t n = strlen(s.c);
        CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_HARMONY, s.c, n, &start), 0); /* the call holds from its header on */
        CHECK(start);
    }
    /* a forced call (bare_calls): the content is the arguments alone */
    {
        split s;
        memset(&s, 0, sizeof s);
        lmc_reason rs;
        lmc_reason_init(&rs, LMC_REASON_HARMONY, p, strlen(p));
        rs.bare_calls = 1;
        lmc_reason_feed(&rs, outs[0], strlen(outs[0]), 1, emit, &s);
        lmc_reason_free(&rs);
        CHECK_EQ_STR(s.r, "Need weather.");
        CHECK_EQ_STR(s.c, "{\"city\": \"Paris\"}");
    }
    /* a final answer before a call stays content; text that only begins a header is held back */
    cJSON *calls = NULL;
    char *content = NULL;
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_HARMONY, "Let me check. <|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>",
                                 &calls, &content), 1);
    CHECK_EQ_STR(content, "Let me check.");
    CHECK_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "arguments")), "{}");
    cJSON_Delete(calls);
    free(content);
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_HARMONY, "no call to=functions.f<|message|>not json", &calls, &content), 0);
    CHECK_EQ_STR(content, "no call to=functions.f<|message|>not json");
    free(content);
    int start = 0;
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_HARMONY, "Answer <|chan", 13, &start), 7);
    CHECK(!start);
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_HARMONY, "Answer to=fun", 13, &start), 7);
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_HARMONY, "Answer.", 7, &start), 7);
    CHECK_EQ_INT(lmc_tool_fmt_detect("{{ '<|start|>assistant to=' + 'functions.' + name + '<|channel|>commentary json<|message|>' }}"),
                 LMC_TOOL_FMT_HARMONY);
}

int main(void) {
    RUN(test_think_markers);
    RUN(test_think_no_markers);
    RUN(test_think_open_in_prompt);
    RUN(test_harmony);
    RUN(test_in_content);
    RUN(test_detect);
    RUN(test_harmony_tool_calls);
    return TEST_END();
}
