/* test_server.c — the server's pure text checks (stop strings, hold-back, UTF-8)
 * and its scheduler without HTTP: continuous-batched greedy outputs equal
 * single-sequence lmc_generate on the demo model, prefix reuse, queueing beyond the
 * slots, cancellation freeing the slot, and a prompt that does not fit. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen/generate.h"
#include "server/jschema.h"
#include "server/jsonfsm.h"
#include "server/sched.h"
#include "server/tools.h"
#include "server/stop.h"
#include "test.h"
#include "srv_wait.h"

static void test_stop_find(void) {
    char *stops[] = {"world", "lo w", "zz"};
    const char *t = "hello world";
    int which = -1;
    CHECK_EQ_INT(lmc_stop_find(t, strlen(t), 0, stops, 3, &which), 3); /* "lo w" starts before "world" */
    CHECK_EQ_INT(which, 1);
    CHECK_EQ_INT(lmc_stop_find(t, strlen(t), 4, stops, 3, &which), 6);
    CHECK_EQ_INT(which, 0);
    CHECK(lmc_stop_find(t, strlen(t), 7, stops, 3, &which) == (size_t)-1);
    CHECK(lmc_stop_find(t, strlen(t), 0, stops, 0, &which) == (size_t)-1);
    CHECK(lmc_stop_find("wor", 3, 0, stops, 1, &which) == (size_t)-1); /* a prefix is not a match */
}

static void test_stop_holdback(void) {
    char *stops[] = {"</end>", "STOP"};
    CHECK_EQ_INT(lmc_stop_holdback("abc </e", 7, stops, 2), 3);
    CHECK_EQ_INT(lmc_stop_holdback("abc <", 5, stops, 2), 1);
    CHECK_EQ_INT(lmc_stop_holdback("abc", 3, stops, 2), 0);
    CHECK_EQ_INT(lmc_stop_holdback("xSTO", 4, stops, 2), 3);
    CHECK_EQ_INT(lmc_stop_holdback("ST", 2, stops, 2), 2);      /* the whole text may be held */
    CHECK_EQ_INT(lmc_stop_holdback("STOP", 4, stops, 2), 0);    /* complete: find() handles it */
    char *rep[] = {"aab"};
    CHECK_EQ_INT(lmc_stop_holdback("xaa", 3, rep, 1), 2);
    CHECK_EQ_INT(lmc_stop_holdback("xa", 2, rep, 1), 1);
}

static void test_utf8(void) {
    static const struct { const char *s; int ok; } cases[] = {
        {"plain", 1}, {"caf\xc3\xa9", 1}, {"\xe2\x82\xac", 1}, {"\xf0\x9f\x98\x80", 1}, {"", 1},
        {"\xff", 0}, {"\xc3", 0}, {"\xc0\xaf", 0}, {"\xe0\x80\xaf", 0}, {"\xed\xa0\x80", 0},
        {"\xf4\x90\x80\x80", 0}, {"\xe2\x82", 0}, {"a\x80", 0}, {"\xf8\x88\x80\x80\x80", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK_MSG(lmc_utf8_valid(cases[i].s, strlen(cases[i].s)) == cases[i].ok, "case %zu", i);
}

static int jf(const char *text, int object_only, int *done) {
    lmc_jfsm j;
    lmc_jfsm_init(&j, object_only);
    int rc = lmc_jfsm_feed(&j, text, strlen(text));
    *done = rc == 0 && lmc_jfsm_done(&j);
    return rc;
}

static void test_jsonfsm(void) {
    static const struct { const char *s; int obj, ok, done; } cases[] = {
        {"{}", 1, 1, 1},
        {"{\"a\": [1, -2.5e+3, true, false, null, \"x\\n\\u00e9\"], \"b\": {}}", 1, 1, 1},
        {"{\"a\":", 1, 1, 0},
        {"{\"a\": 1", 1, 1, 0},
        {"{\"a\": 1,", 1, 1, 0},
        {"{\"caf\xc3\xa9\": \"\"}", 1, 1, 1},
        {"\"\xe2\x82\xac \xf0\x9f\x98\x80\"", 0, 1, 1},  /* well-formed UTF-8 in strings */
        {"\"\xe2\x82", 0, 1, 0},                           /* a character under way */
        {"\"\xe2\x82\"", 0, 0, 0},                          /* … cut short by the quote */
        {"\"\xe2z", 0, 0, 0},
        {"\"\x82", 0, 0, 0},                                /* a stray continuation byte */
        {"\"\xc0\xaf", 0, 0, 0},                            /* C0/C1 and F5..FF never lead */
        {"\"\xf5\x80\x80\x80", 0, 0, 0},
        {"[]", 0, 1, 1},
        {"[1,2]", 0, 1, 1},
        {"[1,2]", 1, 0, 0},           /* json_object: the top level is an object */
        {"\"s\"", 0, 1, 1},
        {"tr", 0, 1, 0},
        {" {}", 1, 0, 0},             /* no whitespace before the value */
        {"{}  ", 1, 1, 1},
        {"{}   ", 1, 0, 0},           /* whitespace runs are capped */
        {"{} x", 1, 0, 0},
        {"{,}", 1, 0, 0},
        {"{\"a\" 1}", 1, 0, 0},
        {"{\"a\":1,}", 1, 0, 0},
        {"[1,]", 0, 0, 0},
        {"{\"a\":01}", 1, 0, 0},
        {"{\"a\":1.}", 1, 0, 0},
        {"{\"a\":-}", 1, 0, 0},
        {"{\"a\":tru}", 1, 0, 0},
        {"{\"a\":\"\\x\"}", 1, 0, 0},
        {"{\"a\":\"\\u12g4\"}", 1, 0, 0},
        {"{\"a\":\"line\nbreak\"}", 1, 0, 0}, /* raw control character in a string */
        {"{\"a\":[}", 1, 0, 0},
        {"{\"a\":{]}", 1, 0, 0},
        {"{1:2}", 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int done;
        int rc = jf(cases[i].s, cases[i].obj, &done);
        CHECK_MSG((rc == 0) == cases[i].ok && done == cases[i].done, "case %zu '%s': rc %d done %d", i, cases[i].s, rc, done);
    }
    /* Byte-at-a-time feeding agrees with feeding the whole text. */
    const char *t = "{\"k\": [10, 2.5, {\"x\": null}], \"s\": \"a\\\"b\"}";
    lmc_jfsm j;
    lmc_jfsm_init(&j, 1);
    int rc = 0;
    for (size_t i = 0; t[i] && rc == 0; i++) rc = lmc_jfsm_feed(&j, t + i, 1);
    CHECK(rc == 0 && lmc_jfsm_done(&j));
    /* Nesting deeper than the stack is refused, not overflowed. */
    char deep[LMC_JFSM_MAX_DEPTH + 3];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    lmc_jfsm_init(&j, 0);
    CHECK(lmc_jfsm_feed(&j, deep, strlen(deep)) == -1);
}

/* rc of feeding text to a fresh state of schema (compile must succeed); *done as in jf(). */
static int js(const char *schema, const char *text, int *done) {
    cJSON *j = cJSON_Parse(schema);
    lmc_jschema *sc = NULL;
    int rc = -2;
    *done = 0;
    if (j && lmc_jschema_compile(j, &sc) == LMC_OK) {
        lmc_jsstate st;
        lmc_jsstate_init(&st, sc);
        rc = lmc_jsstate_feed(&st, text, strlen(text));
        *done = rc == 0 && lmc_jsstate_done(&st);
        lmc_jsstate copy;
        lmc_jsstate_copy(&copy, &st);
        if (rc == 0 && lmc_jsstate_done(&copy) != *done) rc = -3;
    }
    lmc_jschema_free(sc);
    cJSON_Delete(j);
    return rc;
}

static void test_jschema(void) {
    const char *person = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                         "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"bb\",1,10]},\"minItems\":1,\"maxItems\":2},"
                         "\"ok\":{\"type\":[\"boolean\",\"null\"]}},\"required\":[\"name\",\"age\"]}";
    static const struct { const char *text; int ok, done; } cases[] = {
        {"{\"name\": \"Jacob\", \"age\": 147}", 1, 1},
        {"{\"age\":1,\"name\":\"x\",\"tags\":[\"bb\",10],\"ok\":null}", 1, 1},
        {"{\"age\":1,\"name\":\"x\",\"tags\":[1],\"ok\":true}", 1, 1},
        {"{\"name\": \"Jacob\"", 1, 0},
        {"{\"name\": \"Jacob\"}", 0, 0},          /* age is required */
        {"{\"nam", 1, 0},
        {"{\"nick\"", 0, 0},                         /* no such property */
        {"{\"name\":\"a\",\"name\"", 0, 0},        /* twice */
        {"{\"age\": 1.5", 0, 0},                     /* integer */
        {"{\"age\": \"1\"", 0, 0},
        {"{\"age\":1,\"name\":\"x\",\"tags\":[]", 0, 0},        /* minItems */
        {"{\"age\":1,\"name\":\"x\",\"tags\":[1,1,1", 0, 0},    /* maxItems */
        {"{\"age\":1,\"name\":\"x\",\"tags\":[\"c\"", 0, 0},  /* not in the enum */
        {"{\"age\":1,\"name\":\"x\",\"tags\":[100", 0, 0},
        {"{\"age\":1,\"name\":\"x\",\"ok\":1", 0, 0},
        {"[1]", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int done;
        int rc = js(person, cases[i].text, &done);
        CHECK_MSG((rc == 0) == cases[i].ok && done == cases[i].done && rc > -2, "case %zu '%s': rc %d done %d", i, cases[i].text, rc, done);
    }
    int done;
    CHECK(js("{\"type\":\"integer\"}", "12", &done) == 0 && done);   /* a top-level number is complete … */
    CHECK(js("{\"type\":\"integer\"}", "12 ", &done) == 0 && done);
    CHECK(js("{\"type\":\"object\"}", "{\"any\": [1, {\"x\": null}]}", &done) == 0 && done); /* no properties: anything */
    CHECK(js("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":{\"type\":\"number\"}}", "{\"k\": 2.5e3}", &done) == 0 && done);
    CHECK(js("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":{\"type\":\"number\"}}", "{\"k\": true", &done) == -1);
    CHECK(js("{\"const\":{\"a\":1}}", "{\"a\":1}", &done) == 0 && done);
    /* Unsupported keywords are refused, naming them. */
    static const struct { const char *schema, *word; } refused[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"(?=a)\"}}}", "lookahead"},
        {"{\"type\":\"number\",\"multipleOf\":3}", "multipleOf"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems"},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "uri"},
        {"{\"not\":{\"type\":\"object\",\"properties\":{}}}", "properties"},
        {"{\"allOf\":[{\"type\":\"string\",\"contentMediaType\":\"a\"},{\"contentMediaType\":\"b\"}]}", "contentMediaType"},
        {"{\"$ref\":\"other.json#/x\"}", "$ref"},
        {"{\"type\":\"integer\",\"minimum\":true}", "minimum"},
    };
    lmc_jschema *sc = NULL;
    cJSON *j;
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        j = cJSON_Parse(refused[i].schema);
        sc = NULL;
        CHECK_MSG(j && lmc_jschema_compile(j, &sc) == LMC_ERR_UNSUPPORTED && strstr(lmc_last_error(), refused[i].word),
                  "refused %zu: %s", i, lmc_last_error());
        lmc_jschema_free(sc);
        sc = NULL;
        cJSON_Delete(j);
    }
    static const char *const malformed[] = {"{\"anyOf\":[]}", "{\"$ref\":\"#/$defs/none\"}", "{\"$ref\":3}",
                                            "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}",
                                            "{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "{\"type\":\"string\",\"maxLength\":-1}"};
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++) {
        j = cJSON_Parse(malformed[i]);
        CHECK_MSG(j && lmc_jschema_compile(j, &sc) == LMC_ERR_FORMAT, "malformed %zu: %s", i, malformed[i]);
        cJSON_Delete(j);
    }
    j = cJSON_Parse("{\"type\":\"object\",\"required\":[\"b\"],\"properties\":{\"a\":{}}}");
    CHECK(lmc_jschema_compile(j, &sc) < 0);
    cJSON_Delete(j);
}


/* Keywords beyond the first subset: nullable type lists, anyOf/oneOf, integer ranges enforced digit by digit, string lengths, $ref/$defs (also recursive). */
static void test_jschema_more(void) {
    static const struct { const char *schema, *text; int ok, done; } cases[] = {
        {"{\"type\":[\"string\",\"null\"]}", "null", 1, 1},
        {"{\"type\":[\"string\",\"null\"]}", "\"x\"", 1, 1},
        {"{\"type\":[\"string\",\"null\"]}", "1", 0, 0},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}]}", "null", 1, 1},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}]}", "\"ab\"", 1, 1},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}]}", "\"abc", 0, 0},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}]}", "true", 0, 0},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
         "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}},{\"enum\":[\"x\",7]}]}", "{\"a\":3}", 1, 1},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
         "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}},{\"enum\":[\"x\",7]}]}", "[true,false]", 1, 1},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
         "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}},{\"enum\":[\"x\",7]}]}", "7", 1, 1},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
         "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}},{\"enum\":[\"x\",7]}]}", "[1", 0, 0},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
         "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}},{\"enum\":[\"x\",7]}]}", "8", 0, 0},
        /* integer ranges: a digit is allowed only while some continuation stays in range */
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":250}", "1", 1, 0},   /* 1 alone is too small, 1x fits */
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":250}", "17", 1, 1},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":250}", "250", 1, 1},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":250}", "251", 0, 0},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":250}", "26", 1, 1},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":250}", "260", 0, 0}, /* no third digit after 26 */
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":250}", "0", 0, 0},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":250}", "-", 0, 0},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":250}", "1000", 0, 0},
        {"{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMaximum\":3}", "-5", 1, 1},
        {"{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMaximum\":3}", "-6", 0, 0},
        {"{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMaximum\":3}", "-0", 1, 1},
        {"{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMaximum\":3}", "2", 1, 1},
        {"{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMaximum\":3}", "3", 0, 0},
        {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"exclusiveMinimum\":0,\"maximum\":9}}}", "{\"n\":0}", 0, 0},
        {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"exclusiveMinimum\":0,\"maximum\":9}}}", "{\"n\":9 }", 1, 1},
        {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"exclusiveMinimum\":0,\"maximum\":9}}}", "{\"n\":10", 0, 0},
        /* string lengths in code points; an escape is one */
        {"{\"type\":\"string\",\"maxLength\":1}", "\"\xf0\x9f\x98\x80\"", 1, 1},   /* one code point, four bytes */
        {"{\"type\":\"string\",\"maxLength\":1}", "\"\xf0\x9f\"", 0, 0},           /* unfinished character */
        {"{\"type\":\"string\"}", "\"\x9f\x98", 0, 0},                                 /* stray continuation bytes */
        {"{\"type\":\"object\"}", "{\"\xe2\x82\xac\":1}", 1, 1},                       /* a free key in UTF-8 */
        {"{\"type\":\"object\"}", "{\"\xe2\x82\":1}", 0, 0},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\"", 0, 0},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9\xe2\x82\xac\\n\"", 1, 1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\\u00e9bc\"", 1, 1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd", 0, 0},
        /* $ref / $defs, recursion */
        {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
         "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},"
         "\"$ref\":\"#/$defs/node\"}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}", 1, 1},
        {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
         "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},"
         "\"$ref\":\"#/$defs/node\"}", "{\"v\":1,\"next\":{\"v\":2}", 0, 0},
        {"{\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/p~1q\"},\"definitions\":{\"p/q\":{\"enum\":[\"a\",\"b\"]}}}",
         "[\"a\",\"b\"]", 1, 1},
        {"{\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/p~1q\"},\"definitions\":{\"p/q\":{\"enum\":[\"a\",\"b\"]}}}",
         "[\"c\"", 0, 0},
        {"{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}},\"required\":[\"t\"]}",
         "{\"t\":[{\"t\":[]}]}", 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int done;
        int rc = js(cases[i].schema, cases[i].text, &done);
        CHECK_MSG((rc == 0) == cases[i].ok && done == cases[i].done && rc > -2, "case %zu '%s': rc %d done %d", i, cases[i].text, rc, done);
    }
}

static void check_call(const cJSON *calls, int i, const char *name, const char *args) {
    const cJSON *c = cJSON_GetArrayItem(calls, i);
    CHECK_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name")), name);
    CHECK_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "arguments")), args);
}

static void test_tools_parse(void) {
    cJSON *calls;
    char *content;
    CHECK_EQ_INT(lmc_tool_fmt_detect("{% if tools %}<tool_call>{{ x }}</tool_call>{% endif %}"), LMC_TOOL_FMT_HERMES);
    CHECK_EQ_INT(lmc_tool_fmt_detect("[TOOL_CALLS] {{ calls }}"), LMC_TOOL_FMT_MISTRAL);
    CHECK_EQ_INT(lmc_tool_fmt_detect("{{ '<|python_tag|>' }}"), LMC_TOOL_FMT_LLAMA3);
    CHECK_EQ_INT(lmc_tool_fmt_detect("{{ bos_token }}{{ m.content }}"), LMC_TOOL_FMT_NONE);
    /* Hermes: two calls around text. */
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_HERMES,
                                 "Let me look.\n<tool_call>\n{\"name\": \"get_verse\", \"arguments\": {\"book\": \"Genesis\", \"ch\": 1}}\n</tool_call>\n"
                                 "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>",
                                 &calls, &content), 2);
    check_call(calls, 0, "get_verse", "{\"book\":\"Genesis\",\"ch\":1}");
    check_call(calls, 1, "now", "{}");
    CHECK_EQ_STR(content, "Let me look.");
    cJSON_Delete(calls);
    free(content);
    /* Only a call: no content. An unclosed final call still parses. */
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1]}}", &calls, &content), 1);
    check_call(calls, 0, "f", "{\"a\":[1]}");
    CHECK(content == NULL);
    cJSON_Delete(calls);
    /* Not a call: the text stays content. */
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_HERMES, "<tool_call>not json</tool_call>", &calls, &content), 0);
    CHECK(calls == NULL);
    CHECK_EQ_STR(content, "<tool_call>not json</tool_call>");
    free(content);
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_HERMES, "<tool_call>{\"arguments\": {}}</tool_call>", &calls, &content), 0);
    free(content);
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_HERMES, "Plain answer.", &calls, &content), 0);
    CHECK_EQ_STR(content, "Plain answer.");
    free(content);
    /* Mistral: a list after the marker; arguments given as a JSON string stay as they are. */
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_MISTRAL,
                                 "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": \"{\\\"y\\\": 2}\"}]",
                                 &calls, &content), 2);
    check_call(calls, 0, "a", "{\"x\":1}");
    check_call(calls, 1, "b", "{\"y\": 2}");
    CHECK(content == NULL);
    cJSON_Delete(calls);
    /* Llama 3: a JSON object with "parameters", with or without <|python_tag|>. */
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_LLAMA3, "{\"name\": \"w\", \"parameters\": {\"city\": \"Ur\"}}", &calls, &content), 1);
    check_call(calls, 0, "w", "{\"city\":\"Ur\"}");
    cJSON_Delete(calls);
    free(content);
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_LLAMA3, "<|python_tag|>{\"name\": \"w\", \"parameters\": {}}", &calls, &content), 1);
    cJSON_Delete(calls);
    free(content);
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_LLAMA3, "The weather is fine.", &calls, &content), 0);
    CHECK_EQ_STR(content, "The weather is fine.");
    free(content);
    /* Streaming: how much may go out as content before a call could begin. */
    int start;
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_HERMES, "Let me look.", 12, &start), 12);
    CHECK_EQ_INT(start, 0);
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_HERMES, "Let me <tool", 12, &start), 7);   /* could be the marker */
    CHECK_EQ_INT(start, 0);
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_HERMES, "Hi <tool_call>{", 15, &start), 3);
    CHECK_EQ_INT(start, 1);
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_MISTRAL, "ok [TOOL", 8, &start), 3);
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_LLAMA3, "  <|python", 10, &start), 0);
    CHECK_EQ_INT(start, 0);
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_LLAMA3, " {\"name", 7, &start), 0);
    CHECK_EQ_INT(start, 1);
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_LLAMA3, "Sunny.", 6, &start), 6);
    CHECK_EQ_INT(lmc_tools_safe_prefix(LMC_TOOL_FMT_NONE, "<tool_call>", 11, &start), 11);
    CHECK_EQ_INT(lmc_tools_parse(LMC_TOOL_FMT_NONE, "<tool_call>{\"name\": \"f\"}</tool_call>", &calls, &content), 0);
    free(content);
}

/* ---- scheduler on the demo model ---- */

static lmc_backend *be;
static lmc_model *model;
static lmc_tokenizer *tok;

static lmc_srv_req *make_req(const char *text, int max_tokens) {
    lmc_srv_req *r = lmc_srv_req_new();
    if (lmc_tokenizer_encode(tok, text, strlen(text), 1, &r->prompt, &r->n_prompt) < 0) abort();
    r->max_tokens = max_tokens;
    r->ignore_eos = 1;
    r->sp = lmc_sampler_default_params(); /* greedy */
    return r;
}


/* The text lmc_generate produces greedily for `text` (single sequence, fresh context). */
static char *reference(const char *text, int n) {
    lmc_context *ctx;
    lmc_context_params cp = lmc_context_default_params();
    if (lmc_context_init(&ctx, model, &cp) < 0) return NULL;
    int32_t *ids;
    int n_ids;
    lmc_tokenizer_encode(tok, text, strlen(text), 1, &ids, &n_ids);
    typedef struct { int32_t ids[512]; int n; } acc;
    acc a = {.n = 0};
    lmc_gen_params gp = {.n_predict = n, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
    int on_tok(int32_t t, const float *l, int nv, void *ud);
    lmc_status st = lmc_generate(ctx, ids, n_ids, &gp, on_tok, &a, NULL);
    free(ids);
    lmc_context_free(ctx);
    if (st < 0) return NULL;
    char *out;
    size_t len;
    if (lmc_tokenizer_decode(tok, a.ids, a.n, 1, &out, &len) < 0) return NULL;
    return out;
}

int on_tok(int32_t t, const float *l, int nv, void *ud) {
    (void)l; (void)nv;
    struct { int32_t ids[512]; int n; } *a = ud;
    if (a->n < 512) a->ids[a->n++] = t;
    return 0;
}

static const char *prompts[] = {"In the beginning", "And God said", "The LORD is my shepherd", "Blessed are the",
                                "And Moses went up", "For God so loved", "Let there be light", "And it came to pass"};
#define N_PROMPTS 8

static void test_sched_batched_equals_single(void) {
    /* References first: the backend serves one thread at a time, and the scheduler's thread owns it below. */
    char *ref[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) CHECK((ref[i] = reference(prompts[i], 20)) != NULL);
    lmc_sched *s;
    lmc_sched_params p = {.model = model, .tok = tok, .n_ctx = 256, .n_seq = 3, .n_batch = 64, .max_queue = 16};
    CHECK(lmc_sched_start(&s, &p) == LMC_OK);
    lmc_srv_req *r[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        r[i] = make_req(prompts[i], 20);
        CHECK(lmc_sched_submit(s, r[i]) == LMC_OK); /* 8 requests, 3 slots: the rest wait in the queue */
    }
    for (int i = 0; i < N_PROMPTS; i++) {
        CHECK(wait_done(r[i], 60));
        CHECK_EQ_INT(r[i]->finish, LMC_FINISH_LENGTH);
        CHECK_EQ_INT(r[i]->n_gen, 20);
        CHECK_EQ_STR(r[i]->out, ref[i]);
        free(ref[i]);
    }
    lmc_sched_stats st;
    lmc_sched_get_stats(s, &st);
    CHECK_EQ_INT(st.generated_tokens, 20 * N_PROMPTS);
    CHECK(st.steps < 20 * N_PROMPTS); /* sequences shared steps */
    /* The last prompt again (its slot still holds it) reuses all but its last token. */
    lmc_srv_req *again = make_req(prompts[N_PROMPTS - 1], 4);
    CHECK(lmc_sched_submit(s, again) == LMC_OK);
    CHECK(wait_done(again, 30));
    CHECK_EQ_INT(again->n_cached, again->n_prompt - 1);
    CHECK(strncmp(again->out, r[N_PROMPTS - 1]->out, strlen(again->out)) == 0);
    for (int i = 0; i < N_PROMPTS; i++) lmc_srv_req_unref(r[i]);
    lmc_srv_req_unref(again);
    lmc_sched_free(s);
}

/* A tokenizer whose decoder rewrites text already streamed (a BPEDecoder whose suffix "\u0120"
 * starts the demo's word tokens: the last token drops it, an inner one turns it into a space)
 * cannot be streamed: the request ends with an error, the text sent so far intact, and the
 * slot serves the next request normally. */
static void test_sched_detok_error(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", LMC_DEMO_DIR);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    static char json[1 << 20];
    size_t n = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    json[n] = 0;
    cJSON *root = cJSON_Parse(json);
    CHECK(root != NULL);
    cJSON *dec = cJSON_CreateObject();
    cJSON_AddStringToObject(dec, "type", "BPEDecoder");
    cJSON_AddStringToObject(dec, "suffix", "\xc4\xa0");
    cJSON_ReplaceItemInObjectCaseSensitive(root, "decoder", dec);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    lmc_tokenizer *bad = NULL;
    CHECK(text && lmc_tokenizer_load_json(text, strlen(text), NULL, 0, &bad) == LMC_OK);
    free(text);
    if (!bad) return;
    lmc_sched *s;
    lmc_sched_params p = {.model = model, .tok = bad, .n_ctx = 128, .n_seq = 1, .n_batch = 32, .max_queue = 4};
    CHECK(lmc_sched_start(&s, &p) == LMC_OK);
    lmc_srv_req *r = make_req("In the beginning", 20);
    CHECK(lmc_sched_submit(s, r) == LMC_OK);
    CHECK(wait_done(r, 60));
    CHECK_EQ_INT(r->finish, LMC_FINISH_ERROR);
    CHECK(strstr(r->err, "detokenizer") != NULL);
    CHECK(r->n_gen >= 2 && r->n_gen < 20);
    /* a request that generates one token never meets the rewrite: it completes */
    lmc_srv_req *one = make_req("And God said", 1);
    CHECK(lmc_sched_submit(s, one) == LMC_OK);
    CHECK(wait_done(one, 60));
    CHECK_EQ_INT(one->finish, LMC_FINISH_LENGTH);
    CHECK_EQ_INT(one->n_gen, 1);
    lmc_srv_req_unref(r);
    lmc_srv_req_unref(one);
    lmc_sched_free(s);
    lmc_tokenizer_free(bad);
}

static void test_sched_cancel_and_limits(void) {
    lmc_sched *s;
    lmc_sched_params p = {.model = model, .tok = tok, .n_ctx = 128, .n_seq = 1, .n_batch = 32, .max_queue = 1};
    CHECK(lmc_sched_start(&s, &p) == LMC_OK);
    lmc_srv_req *a = make_req("In the beginning", 120);
    CHECK(lmc_sched_submit(s, a) == LMC_OK);
    /* Wait until it produced something, then cancel. */
    for (int i = 0; i < 5000; i++) {
        pthread_mutex_lock(&a->mu);
        size_t n = a->out_len;
        pthread_mutex_unlock(&a->mu);
        if (n > 0) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    lmc_srv_req *b = make_req("And God said", 4);
    lmc_srv_req *c = make_req("Let there be", 4);
    CHECK(lmc_sched_submit(s, b) == LMC_OK);
    CHECK(lmc_sched_submit(s, c) == LMC_ERR_NOMEM); /* the queue (1) is full */
    atomic_store(&a->cancelled, 1);
    lmc_sched_poke(s);
    CHECK(wait_done(a, 30));
    CHECK_EQ_INT(a->finish, LMC_FINISH_CANCELLED);
    CHECK(a->n_gen < 120);
    CHECK(wait_done(b, 30));
    CHECK_EQ_INT(b->finish, LMC_FINISH_LENGTH);
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    lmc_sched_stats st;
    lmc_sched_get_stats(s, &st);
    CHECK_EQ_INT(st.running, 0);
    CHECK_EQ_INT(st.kv_tokens_active, 0);
    CHECK_EQ_INT(st.cancelled, 1);
    /* A prompt that does not fit the context is refused at submission. */
    lmc_srv_req *big = lmc_srv_req_new();
    big->n_prompt = 128;
    big->prompt = calloc(128, sizeof(int32_t));
    big->max_tokens = 1;
    CHECK(lmc_sched_submit(s, big) == LMC_ERR_RANGE);
    /* Generation stops at the context end with "length". */
    lmc_srv_req *fill = make_req("In the beginning", 1000);
    CHECK(lmc_sched_submit(s, fill) == LMC_OK);
    CHECK(wait_done(fill, 60));
    CHECK_EQ_INT(fill->finish, LMC_FINISH_LENGTH);
    CHECK_EQ_INT(fill->n_prompt + fill->n_gen, 128 + 1); /* the last sampled token is never fed */
    /* Shutdown cancels what is queued or running. */
    lmc_srv_req *late = make_req("And", 100);
    CHECK(lmc_sched_submit(s, late) == LMC_OK);
    lmc_sched_stop(s);
    CHECK(late->done);
    CHECK(lmc_sched_submit(s, c) == LMC_ERR_ARG);
    lmc_sched_free(s);
    lmc_srv_req_unref(a);
    lmc_srv_req_unref(b);
    lmc_srv_req_unref(c);
    lmc_srv_req_unref(big);
    lmc_srv_req_unref(fill);
    lmc_srv_req_unref(late);
}

/* Embeddings: the scheduler (chunked prefill, sharing steps with a generation) pools the same
 * vector (mean, or the last token's) as one direct forward over the whole input, without
 * running the LM head for the embedding's rows. */
static void sched_embedding(lmc_pooling pooling) {
    const char *text = "In the beginning God created the heaven and the earth.";
    int32_t *ids;
    int n;
    CHECK(lmc_tokenizer_encode(tok, text, strlen(text), 1, &ids, &n) == LMC_OK);
    int D = model->cfg.hidden_size;
    double *ref = calloc((size_t)D, sizeof *ref);
    lmc_context *ctx;
    lmc_context_params cp = lmc_context_default_params();
    cp.want_hidden = 1;
    CHECK(lmc_context_init(&ctx, model, &cp) == LMC_OK);
    int32_t pos[64], seq[64];
    uint8_t want[64];
    for (int i = 0; i < n; i++) { pos[i] = i; seq[i] = 0; want[i] = 1; }
    lmc_batch b = {.n_tokens = n, .token = ids, .pos = pos, .seq = seq, .want_logits = want};
    CHECK(lmc_context_decode(ctx, &b) == LMC_OK);
    double norm = 0;
    for (int d = 0; d < D; d++) {
        if (pooling == LMC_POOL_MEAN) {
            for (int i = 0; i < n; i++) ref[d] += lmc_context_hidden(ctx, i)[d];
            ref[d] /= n;
        } else {
            ref[d] = lmc_context_hidden(ctx, n - 1)[d];
        }
        norm += ref[d] * ref[d];
    }
    lmc_context_free(ctx);

    lmc_sched *s;
    lmc_sched_params p = {.model = model, .tok = tok, .n_ctx = 128, .n_seq = 2, .n_batch = 5, .max_queue = 4};
    CHECK(lmc_sched_start(&s, &p) == LMC_OK);
    lmc_srv_req *g = make_req("And God said", 30);
    lmc_srv_req *r = lmc_srv_req_new();
    r->api = LMC_API_EMBEDDING;
    r->pooling = pooling;
    r->max_tokens = 1;
    r->prompt = ids;
    r->n_prompt = n;
    CHECK(lmc_sched_submit(s, g) == LMC_OK);
    CHECK(lmc_sched_submit(s, r) == LMC_OK);
    CHECK(wait_done(r, 30) && wait_done(g, 30));
    CHECK_EQ_INT(r->finish, LMC_FINISH_STOP);
    CHECK_EQ_INT(r->n_embd, D);
    double worst = 0, n2 = 0;
    for (int d = 0; d < D && r->embedding; d++) {
        double x = ref[d] / sqrt(norm);
        worst = fmax(worst, fabs(r->embedding[d] - x));
        n2 += (double)r->embedding[d] * r->embedding[d];
    }
    CHECK_MSG(worst < 1e-5, "max |Δ| %g", worst);
    CHECK_NEAR(n2, 1.0, 1e-5);
    CHECK_EQ_INT(g->n_gen, 30); /* the generation beside it was not disturbed */
    /* Only the generation's rows went through the LM head (its prompt's last row, then one per
     * fed token); the embedding's rows produced hidden states only. */
    lmc_sched_stats st;
    lmc_sched_get_stats(s, &st);
    CHECK_EQ_INT((int)st.lm_head_rows, 30);
    CHECK_EQ_INT((int)st.hidden_only_rows, pooling == LMC_POOL_MEAN ? n : 1);
    lmc_sched_free(s);
    lmc_srv_req_unref(g);
    lmc_srv_req_unref(r);
    free(ref);
}

static void test_sched_embedding_mean(void) { sched_embedding(LMC_POOL_MEAN); }
static void test_sched_embedding_last(void) { sched_embedding(LMC_POOL_LAST); }

int main(void) {
    RUN(test_stop_find);
    RUN(test_stop_holdback);
    RUN(test_utf8);
    RUN(test_jsonfsm);
    RUN(test_tools_parse);
    RUN(test_jschema);
    RUN(test_jschema_more);
    lmc_backend_params bp = {.name = "cpu", .n_threads = 1};
    if (lmc_backend_init(&be, &bp) < 0 || lmc_model_load(LMC_DEMO_DIR, be, &model) < 0 ||
        lmc_tokenizer_load(LMC_DEMO_DIR, &tok) < 0) {
        fprintf(stderr, "demo model: %s\n", lmc_last_error());
        test_failed_++;
        return TEST_END();
    }
    RUN(test_sched_batched_equals_single);
    RUN(test_sched_cancel_and_limits);
    RUN(test_sched_detok_error);
    RUN(test_sched_embedding_mean);
    RUN(test_sched_embedding_last);
    lmc_tokenizer_free(tok);
    lmc_model_free(model);
    lmc_backend_free(be);
    return TEST_END();
}
