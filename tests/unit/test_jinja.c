/* test_jinja.c — unit tests for the Jinja interpreter (src/tok/jinja*) and chat rendering
 * (src/tok/chat.c), plus a driver mode used by tests/oracle/jinja.mjs:
 *
 *   test_jinja --driver TEMPLATE_FILE   one JSON context per stdin line → one JSON string per line
 *   test_jinja --chat TEMPLATE_FILE     one {messages, tools, documents, add_generation_prompt,
 *                                       bos_token, eos_token, extra} per line, via lmc_chat_render
 *   either followed by --now EPOCH      strftime_now() reads that time instead of the clock
 * Errors print {"error": "..."} on that line.
 */
#include "test.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
/* Each EXPECT / EXPECT_ERR counts as one test in the RESULT line (groups made only of
 * them are called directly, not through RUN). */
#define COUNT_ONE_(body) do { int saved_ = test_cur_failed_; test_cur_failed_ = 0; body; \
    if (test_cur_failed_) test_failed_++; else test_passed_++; test_cur_failed_ = saved_; } while (0)
#define EXPECT(src, ctx, want) COUNT_ONE_(CHECK_EQ_STR(R(src, ctx), want))
static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
#define EXPECT_ERR(src, ctx, frag) COUNT_ONE_(const char *r_ = R(src, ctx); \
    CHECK_MSG(starts(r_, "ERR:") && strstr(r_, frag), "got \"%s\", want error containing \"%s\"", r_, frag))

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

static long long fixed_now;   /* --now EPOCH: strftime_now reads this instead of the clock */

static int driver(const char *path, int chat) {
    lmc_jinja_options opt = lmc_jinja_default_options();
    opt.now = fixed_now;
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
        if (lmc_chat_json_keep_numbers(ctx, line, (size_t)len) < 0) { print_error(lmc_last_error()); cJSON_Delete(ctx); continue; }
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
            st = lmc_chat_render_template_ex(t, &p, &opt, &out, &on);
        } else st = lmc_jinja_render_ex(t, ctx, &opt, &out, &on);
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
    EXPECT("", NULL, "");
    EXPECT("{{ 1 + 2 }}", NULL, "3");
    EXPECT("{{ name }}!", "{\"name\":\"x\"}", "x!");
}

static void t_literals_and_repr(void) {
    EXPECT("{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e-05 }}|{{ 1e16 }}|{{ 2.5e15 }}", NULL,
           "1.0|0.30000000000000004|1e-05|1e+16|2500000000000000.0");
    EXPECT("{{ true }}|{{ none }}|{{ False }}", NULL, "True|None|False");
    EXPECT("{{ {'a': 1, 'b': [none, true, 'x']} }}", NULL, "{'a': 1, 'b': [None, True, 'x']}");
    EXPECT("{{ (1,) }}|{{ (1, 2) }}|{{ () }}", NULL, "(1,)|(1, 2)|()");
    EXPECT("{{ [\"it's\", 'a\"b', 'both\\'\"', 'nl\\n'] }}", NULL, "[\"it's\", 'a\"b', 'both\\'\"', 'nl\\n']");
    EXPECT("{{ 'a' 'b' }}|{{ '\\u00e9\\x41' }}", NULL, "ab|\xc3\xa9" "A");
    EXPECT("{{ ctx }}", "{\"ctx\":{\"i\":3,\"f\":2.5,\"s\":\"x\",\"n\":null,\"b\":false}}", "{'i': 3, 'f': 2.5, 's': 'x', 'n': None, 'b': False}");
}

static void t_arithmetic(void) {
    EXPECT("{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}", NULL, "3.5|2.0|3|-4|2|-2");
    EXPECT("{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 7.5 // 2 }}|{{ 1 + 2.0 }}", NULL, "1024|0.5|3.0|3.0");
    EXPECT("{{ 'ab' * 2 }}|{{ [1] * 2 }}|{{ [1] + [2] }}|{{ 1 ~ 'x' ~ none }}", NULL, "abab|[1, 1]|[1, 2]|1xNone");
    EXPECT("{{ '%s is %d (%.1f%%)' % ('x', 3, 99.44) }}", NULL, "x is 3 (99.4%)");
    EXPECT("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ -2 ** 2 }}|{{ 10 - 2 - 3 }}", NULL, "7|9|4|5");
    EXPECT_ERR("{{ 1 / 0 }}", NULL, "division by zero");
    EXPECT_ERR("{{ 'a' + 1 }}", NULL, "unsupported operand");
    EXPECT_ERR("{{ 9223372036854775807 + 1 }}", NULL, "overflow");
}

static void t_compare_logic(void) {
    EXPECT("{{ 1 == 1.0 }}|{{ true == 1 }}|{{ (1, 2) == [1, 2] }}|{{ [1, 2] < [1, 3] }}|{{ 1 < 2 < 2 }}", NULL,
           "True|True|False|True|False");
    EXPECT("{{ 0 or 'd' }}|{{ 'a' and 'b' }}|{{ not '' }}|{{ none or [] }}", NULL, "d|b|True|[]");
    EXPECT("{{ 'el' in 'hello' }}|{{ 2 not in [1, 2] }}|{{ 'k' in {'k': 0} }}", NULL, "True|False|True");
    EXPECT("{{ 'y' if 0 else 'n' }}|[{{ 'y' if 0 }}]", NULL, "n|[]");
    EXPECT_ERR("{{ 1 < 'a' }}", NULL, "not supported");
}

static void t_undefined(void) {
    EXPECT("[{{ nope }}]|{{ nope is defined }}|{{ nope | default('d') }}|{{ nope | length }}", NULL, "[]|False|d|0");
    EXPECT("{% for x in nope %}x{% else %}none{% endfor %}", NULL, "none");
    EXPECT("{{ d.missing is defined }}|[{{ d.missing }}]|[{{ l[9] }}]", "{\"d\":{},\"l\":[1]}", "False|[]|[]");
    EXPECT_ERR("{{ nope.attr }}", NULL, "'nope' is undefined");
    EXPECT_ERR("{{ nope() }}", NULL, "undefined");
    EXPECT_ERR("{{ nope + 1 }}", NULL, "'nope' is undefined");
    EXPECT_ERR("{{ d.a.b }}", "{\"d\":{}}", "no attribute 'a'");
}

static void t_access_and_slicing(void) {
    const char *ctx = "{\"l\":[1,2,3,4],\"d\":{\"a\":{\"b\":[10,{\"c\":\"deep\"}]}},\"s\":\"h\xc3\xa9llo\"}";
    EXPECT("{{ d.a.b[1].c }}|{{ d['a']['b'][0] }}|{{ d.a.b.0 }}|{{ l[-1] }}", ctx, "deep|10|10|4");
    EXPECT("{{ l[1:3] }}|{{ l[::-1] }}|{{ l[::2] }}|{{ l[-2:] }}|{{ l[10:] }}", ctx, "[2, 3]|[4, 3, 2, 1]|[1, 3]|[3, 4]|[]");
    EXPECT("{{ s[1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s | length }}", ctx, "\xc3\xa9|\xc3\xa9l|oll\xc3\xa9h|5");
    EXPECT_ERR("{{ l[::0] }}", ctx, "step cannot be zero");
}

static void t_string_methods(void) {
    EXPECT("[{{ '  a b  '.strip() }}]|[{{ 'xxaxx'.strip('x') }}]|[{{ '\\n\\na\\n'.lstrip('\\n') }}]|[{{ 'a  '.rstrip() }}]", NULL,
           "[a b]|[a]|[a\n]|[a]");
    EXPECT("{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(none, 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}", NULL,
           "['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a,b', 'c']");
    EXPECT("{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'a-b'.replace('-', '+') }}", NULL, "True|True|a+b");
    EXPECT("{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'Ab'.lower() }}{{ 'Ab'.upper() }}|{{ 'stra\xc3\x9f' 'e'.upper() }}", NULL,
           "Hello World|Hello|abAB|STRASSE");
    EXPECT_ERR("{{ '{} {name} {0}'.format('x', name='n') }}", NULL, "cannot switch");
}

static void t_string_methods2(void) {
    EXPECT("{{ '{} and {name}'.format('x', name='n') }}|{{ '{:>4}|{:.2f}|{:03d}'.format('a', 3.14159, 7) }}", NULL, "x and n|   a|3.14|007");
    EXPECT("{{ 'banana'.count('an') }}|{{ 'banana'.find('na') }}|{{ 'banana'.rfind('na') }}|{{ '-'.join(['a', 'b']) }}", NULL, "2|2|4|a-b");
    EXPECT("{{ '42'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ ' '.isspace() }}|{{ '7'.zfill(3) }}", NULL, "True|True|True|007");
    EXPECT_ERR("{{ 'x'.index('y') }}", NULL, "substring not found");
    EXPECT_ERR("{{ [1].append(2) }}", NULL, "unsafe");
}

static void t_dict_methods(void) {
    const char *ctx = "{\"d\":{\"b\":2,\"a\":1}}";
    EXPECT("{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.items() | list }}", ctx, "['b', 'a']|[2, 1]|[('b', 2), ('a', 1)]");
    EXPECT("{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 0) }}", ctx, "1|None|0");
    EXPECT("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx, "b=2;a=1;");
}

static void t_filters_basic(void) {
    EXPECT("[{{ '  x  ' | trim }}]|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'hello wor-ld' | title }}|{{ 'hI' | capitalize }}", NULL,
           "[x]|AB|ab|Hello Wor-Ld|Hi");
    EXPECT("{{ [1, 2] | length }}|{{ 'abc' | count }}|{{ {'a': 1} | length }}", NULL, "2|3|1");
    EXPECT("{{ none | default('x') }}|{{ '' | default('x', true) }}|{{ u | d('y') }}", NULL, "None|x|y");
    EXPECT("{{ [1, 2, 3] | join(', ') }}|{{ [1, 2] | first }}|{{ [1, 2] | last }}|{{ 'ab' | list }}", NULL, "1, 2, 3|1|2|['a', 'b']");
    EXPECT("{{ '12' | int + 1 }}|{{ 'x' | int(5) }}|{{ '2.5' | float }}|{{ 3 | float }}|{{ 5 | string ~ 'x' }}", NULL, "13|5|2.5|3.0|5x");
    EXPECT("{{ 'a b  c' | wordcount }}|{{ 'a-a' | replace('a', 'b') }}|{{ -3 | abs }}|{{ 'x' | safe }}", NULL, "3|b-b|3|x");
    EXPECT("{{ {'b': 1, 'a': 2} | items | list }}|{{ {'b': 1, 'a': 2} | dictsort }}", NULL, "[('b', 1), ('a', 2)]|[('a', 2), ('b', 1)]");
    EXPECT("{{ [3, 1, 2] | sort }}|{{ ['b', 'A'] | sort }}|{{ [1, 2, 1] | unique | list }}|{{ [1, 5, 2] | max }}|{{ [1, 2] | sum }}", NULL,
           "[1, 2, 3]|['A', 'b']|[1, 2]|5|3");
    EXPECT("{{ 2.5 | round }}|{{ 2.675 | round(2) }}|{{ 2.1 | round(0, 'ceil') }}|{{ 'abc' | reverse }}", NULL, "2.0|2.67|3.0|cba");
    EXPECT_ERR("{{ 1 | nosuch }}", NULL, "no filter named 'nosuch'");
}

static void t_filters_select_map(void) {
    const char *ctx = "{\"p\":[{\"n\":\"a\",\"k\":1},{\"n\":\"b\",\"k\":2,\"x\":true},{\"n\":\"c\",\"k\":1}]}";
    EXPECT("{{ p | selectattr('k', 'equalto', 1) | map(attribute='n') | join }}", ctx, "ac");
    EXPECT("{{ p | rejectattr('x') | map(attribute='n') | list }}|{{ p | selectattr('x', 'defined') | list | length }}", ctx, "['a', 'c']|1");
    EXPECT("{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3] | reject('>', 1) | list }}|{{ ['a'] | map('upper') | list }}", ctx,
           "[1, 3]|[1]|['A']");
    EXPECT("{{ p | map(attribute='zz', default='-') | join }}|{{ p | sum(attribute='k') }}", ctx, "---|4");
}

static void t_tojson(void) {
    const char *ctx = "{\"d\":{\"b\":[1,2.5,null,true],\"a\":\"\xc3\xa9\\\"\\n\"}}";
    EXPECT("{{ d | tojson }}", ctx, "{\"b\": [1, 2.5, null, true], \"a\": \"\xc3\xa9\\\"\\n\"}");
    EXPECT("{{ d | tojson(indent=2) }}", ctx, "{\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"a\": \"\xc3\xa9\\\"\\n\"\n}");
    EXPECT("{{ d | tojson(sort_keys=true, separators=(',', ':')) }}", ctx, "{\"a\":\"\xc3\xa9\\\"\\n\",\"b\":[1,2.5,null,true]}");
    EXPECT("{{ d.a | tojson(ensure_ascii=true) }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson }}", ctx, "\"\\u00e9\\\"\\n\"|[]|{}");
    EXPECT("{{ {'a': [1]} | tojson(indent='\\t') }}|{{ (1, 2) | tojson }}", NULL, "{\n\t\"a\": [\n\t\t1\n\t]\n}|[1, 2]");
    EXPECT_ERR("{{ nope | tojson }}", NULL, "not JSON serializable");
}

static void t_indent_truncate_center(void) {
    EXPECT("{{ 'a\\nb\\n\\nc' | indent }}", NULL, "a\n    b\n\n    c");
    EXPECT("{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(1, blank=true) }}", NULL, "  a\n  b|a\n \n b");
    EXPECT("{{ 'The quick brown fox' | truncate(9, leeway=0) }}|{{ 'abcdefghij' | truncate(5, true, '.', 0) }}", NULL, "The...|abcd.");
    EXPECT("[{{ 'ab' | center(6) }}]|{{ '<&>' | e }}", NULL, "[  ab  ]|&lt;&amp;&gt;");
}

static void t_tests(void) {
    EXPECT("{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 1 is iterable }}",
           NULL, "TrueTrueTrueTrueTrueTrueFalse");
    EXPECT("{{ none is none }}{{ 2 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 'a' is in 'ab' }}",
           NULL, "TrueTrueTrueTrueTrueTrueTrue");
    EXPECT("{{ x is not none }}|{{ x is sameas false }}|{{ x is false }}|{{ x is boolean }}|{{ 'ab' is lower }}", "{\"x\":false}",
           "True|True|True|True|True");
    EXPECT("{{ nope is undefined }}|{{ [] is sequence }}|{{ range is callable }}", NULL, "True|True|True");
    EXPECT_ERR("{{ 1 is nosuch }}", NULL, "no test named 'nosuch'");
}

static void t_for_loops(void) {
    EXPECT("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.length }} {% endfor %}", NULL,
           "10323 21213 32103 ");
    EXPECT("{% for x in [1, 2, 3] %}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}{{ x }}{% endfor %}", NULL, "F12L3");
    EXPECT("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}", NULL, "-2 1-3 2- ");
    EXPECT("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}", NULL, "aba");
    EXPECT("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}", NULL, "2/2 4/2 ");
    EXPECT("{% for a, b in [(1, 2), [3, 4]] %}{{ a * b }},{% endfor %}", NULL, "2,12,");
    EXPECT("{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", NULL, "023");
    EXPECT("{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}|{{ range(3) | list }}", NULL, "321|[0, 1, 2]");
    EXPECT_ERR("{{ range(200000) | length }}", NULL, "Range too big");
    EXPECT_ERR("{% for a, b in [1] %}{% endfor %}", NULL, "");
}

static void t_scoping_set_namespace(void) {
    EXPECT("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", NULL, "23|1");
    EXPECT("{% set ns = namespace(t=0) %}{% for i in [1, 2, 3] %}{% set ns.t = ns.t + i %}{% endfor %}{{ ns.t }}", NULL, "6");
    EXPECT("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = 1, 2 %}{{ t }}", NULL, "12|(1, 2)");
    EXPECT("{% set blk %} x{{ 1 }} {% endset %}[{{ blk }}]|{% set u | upper %}hi{% endset %}{{ u }}", NULL, "[ x1 ]|HI");
    EXPECT("{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}|{% with z = 5 %}{{ z }}{% endwith %}[{{ z }}]", NULL, "in-if|5[]");
    EXPECT("{{ dict(a=1) }}|{{ namespace(a=1).a }}", NULL, "{'a': 1}|1");
    EXPECT_ERR("{% set x = 1 %}{% set x.y = 2 %}", NULL, "non-namespace");
}

static void t_string_building(void) {
    /* appends in place must never change an older value sharing the buffer */
    EXPECT("{% set a = ('x' * 300) + 'z' %}{% set b = a + '1' %}{% set c = a + '2' %}{% set d = b + 'y' %}"
           "{{ a[-1] }}{{ b[-1] }}{{ c[-1] }}{{ d[-2:] }}{{ a | length }}{{ b | length }}{{ d | length }}{{ (a ~ a) | length }}", NULL,
           "z12" "1y" "301302303602");
    EXPECT("{% set ns = namespace(s='') %}{% for i in range(2000) %}{% set ns.s = ns.s + 'ab' %}{% endfor %}{{ ns.s | length }}",
           NULL, "4000");
}

static void t_macros(void) {
    EXPECT("{% macro g(n, p='Hi') %}{{ p }} {{ n }}{% endmacro %}{{ g('a') }}|{{ g('b', p='Yo') }}|{{ g(p='Z', n='c') }}", NULL,
           "Hi a|Yo b|Z c");
    EXPECT("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", NULL, "1(2,){'k': 3}");
    EXPECT("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}", NULL, "[in]");
    EXPECT("{% macro f(n) %}{% if n <= 1 %}1{% else %}{{ n * f(n - 1) | int }}{% endif %}{% endmacro %}{{ f(5) }}", NULL, "120");
    EXPECT_ERR("{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", NULL, "nested deeper");
    EXPECT_ERR("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", NULL, "takes not more than 1 argument");
    EXPECT_ERR("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}", NULL, "no keyword argument 'b'");
    EXPECT_ERR("{% macro m() %}x{% endmacro %}{% call m() %}y{% endcall %}", NULL, "caller");
}

static void t_whitespace(void) {
    EXPECT("a\n  {% if true %}\n  b\n  {% endif %}\nc", NULL, "a\n  b\nc");
    EXPECT("a\n  {%+ if true %}\n  b\n  {% endif +%}\nc", NULL, "a\n    b\n\nc");
    EXPECT("x  {{- ' y ' -}}  z", NULL, "x y z");
    EXPECT("l1\n{# c #}\nl2", NULL, "l1\nl2");
    EXPECT("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", NULL, "  1\n  2\n");
    EXPECT("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
    EXPECT("a\r\nb\r\n", NULL, "a\nb");
    EXPECT("{% generation %}g{% endgeneration %}", NULL, "g");
}

static int err_at(const char *src, const char *ctx, int line, int col) {
    const char *r = R(src, ctx);
    char want[64];
    snprintf(want, sizeof want, "template:%d:%d:", line, col);
    int ok = starts(r, "ERR:") && strstr(r, want) != NULL;
    if (!ok) fprintf(stderr, "  error position: got \"%s\", want %s\n", r, want);
    return ok;
}

static void t_errors_with_position(void) {
    CHECK(err_at("line1\n{% if x %}\nno end", NULL, 3, 7));
    CHECK(err_at("{% for x in y %}{% endif %}", NULL, 1, 20));
    CHECK(err_at("ab\n  {{ 1 + }}", NULL, 2, 10));
    CHECK(err_at("{{ 'open }}", NULL, 1, 4));
    CHECK(err_at("{% nosuch %}", NULL, 1, 4));
    CHECK(err_at("x\n{{ raise_exception('boom') }}", NULL, 2, 4));
    CHECK(err_at("{# unclosed", NULL, 1, 1));
    CHECK(err_at("{{ a.b }}", NULL, 1, 6));
    CHECK_MSG(strstr(R("{{ raise_exception('boom here') }}", NULL), "boom here") != NULL, "raise_exception message kept");
}

static void t_malformed_no_crash(void) {
    static const char *bad[] = {
        "{{", "{%", "{#", "{{ }}", "{% %}", "{% if %}", "{% for %}", "{% for x %}", "{% for x in %}{% endfor %}",
        "{% set %}", "{% macro %}", "{% macro m( %}", "{% endmacro %}", "{{ [1, 2 }}", "{{ {'a' 1} }}", "{{ a[ }}",
        "{{ a.( }}", "{{ a | }}", "{{ a is }}", "{% if a %}{% elif %}{% endif %}", "{% else %}", "{{ 'abc\\",
        "{{ 1 2 }}", "{{ ) }}", "{{ ] }}", "{% raw %}never", "{% call %}{% endcall %}", "{{ f(a=1, 2) }}", "{{ 99999999999999999999 }}",
        "{% filter %}x{% endfilter %}", "{% with %}", "{{ \"\\x4\" }}", "{{ a.1.2.3 }}", "{% set a.b.c = 1 %}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *r = R(bad[i], NULL);
        CHECK_MSG(starts(r, "ERR:template:"), "template %zu \"%s\" gave \"%s\"", i, bad[i], r);
    }
}

/* deterministic pseudo-random mutations of real template text: must never crash */
static void t_fuzz(void) {
    static const char *seeds[] = {
        "{%- for m in messages %}{{ '<|' + m.role + '|>' + m.content | trim }}{% if loop.last %}{{ eos }}{% endif %}{% endfor -%}",
        "{% set ns = namespace(a=[1, 2]) %}{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(ns.a[0]) }}{{ {'k': (1, 2)} | tojson(indent=2) }}",
        "{{ 'a%sb' % 1 }}{{ '{:>3}'.format(2) }}{{ x[1:-1:2] }}{{ -1 ** 2 // 3 % 4 }}{% raw %}{{{% endraw %}{# c #}",
    };
    static const char alphabet[] = "{}%#-+|()[]'\".,:=~*/ \nabcxyz0123456789_";
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    char buf[512];
    int crashes = 0, total = 0;
    for (size_t s = 0; s < sizeof seeds / sizeof *seeds; s++) {
        size_t n = strlen(seeds[s]);
        for (int iter = 0; iter < 700; iter++) {
            memcpy(buf, seeds[s], n + 1);
            size_t len = n;
            int edits = 1 + (int)(rng % 4);
            for (int e = 0; e < edits; e++) {
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                size_t pos = (size_t)(rng % (len ? len : 1));
                int op = (int)((rng >> 20) % 3);
                char ch = alphabet[(rng >> 32) % (sizeof alphabet - 1)];
                if (op == 0 && len) buf[pos] = ch;
                else if (op == 1 && len) { memmove(buf + pos, buf + pos + 1, len - pos); len--; }
                else if (len + 1 < sizeof buf) { memmove(buf + pos + 1, buf + pos, len - pos + 1); buf[pos] = ch; len++; }
            }
            const char *r = R(buf, "{\"messages\":[{\"role\":\"user\",\"content\":\" hi \"}],\"eos\":\"</s>\",\"x\":[1,2,3,4]}");
            total++;
            if (starts(r, "ERR:") && !starts(r, "ERR:template:")) crashes++;
        }
    }
    CHECK_EQ_INT(crashes, 0);
    CHECK(total == 2100);
}

static void t_limits(void) {
    lmc_jinja_template *t;
    const char *src = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    CHECK(lmc_jinja_parse(src, strlen(src), &t) == LMC_OK);
    lmc_jinja_options lim = lmc_jinja_default_options();
    lim.max_steps = 100000;
    char *out = NULL; size_t n;
    CHECK(lmc_jinja_render_ex(t, NULL, &lim, &out, &n) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "step limit") != NULL);
    CHECK(out == NULL);
    lmc_jinja_free(t);

    const char *big = "{% set s = 'xxxxxxxxxxxxxxxx' %}{% for i in range(100000) %}{{ s * 1000 }}{% endfor %}";
    CHECK(lmc_jinja_parse(big, strlen(big), &t) == LMC_OK);
    lim = lmc_jinja_default_options();
    lim.max_output = 1 << 20;
    CHECK(lmc_jinja_render_ex(t, NULL, &lim, &out, &n) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "output exceeds") != NULL);
    lmc_jinja_free(t);

    /* deep nesting is refused at parse time, not by the C stack */
    char deep[4000];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    k += (size_t)snprintf(deep + k, sizeof deep - k, " }}");
    CHECK(lmc_jinja_parse(deep, k, &t) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "nesting too deep") != NULL);
    char deep2[8000]; k = 0;
    for (int i = 0; i < 500; i++) k += (size_t)snprintf(deep2 + k, sizeof deep2 - k, "{%% if 1 %%}");
    CHECK(lmc_jinja_parse(deep2, k, &t) == LMC_ERR_FORMAT);
}

static void t_chat_render(void) {
    const char *tpl =
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
        "{% if tools is not none %}[tools:{{ tools | length }}]{% endif %}{% if documents is none %}[nodocs]{% endif %}"
        "{% if enable_thinking is defined and not enable_thinking %}[nothink]{% endif %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}";
    cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"  yo  \"}]");
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
    cJSON *extra = cJSON_Parse("{\"enable_thinking\":false}");
    lmc_chat_params p = lmc_chat_default_params();
    p.messages = msgs; p.bos_token = "<s>"; p.add_generation_prompt = 1;
    char *out; size_t n;
    CHECK(lmc_chat_render(tpl, &p, &out, &n) == LMC_OK);
    CHECK_EQ_STR(out, "<s><user>hi</user><assistant>  yo  </assistant>[nodocs]<assistant>");
    free(out);
    p.tools = tools; p.extra = extra; p.add_generation_prompt = 0; p.bos_token = NULL;
    CHECK(lmc_chat_render(tpl, &p, &out, &n) == LMC_OK);
    CHECK_EQ_STR(out, "<user>hi</user><assistant>  yo  </assistant>[tools:1][nodocs][nothink]");
    free(out);
    /* continue_final_message cuts right after the last content (keeping its spacing when the template does) */
    p.continue_final_message = 1;
    CHECK(lmc_chat_render(tpl, &p, &out, &n) == LMC_OK);
    CHECK_EQ_STR(out, "<user>hi</user><assistant>  yo");   /* leading space: transformers cuts at the stripped text */
    CHECK_EQ_INT(n, strlen(out));
    free(out);
    cJSON *msgs2 = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"yo  \"}]");
    p.messages = msgs2;
    CHECK(lmc_chat_render(tpl, &p, &out, &n) == LMC_OK);
    CHECK_EQ_STR(out, "<user>hi</user><assistant>yo  ");   /* template kept the spacing: keep it too */
    free(out);
    p.messages = msgs;
    cJSON_Delete(msgs2);
    p.add_generation_prompt = 1;
    CHECK(lmc_chat_render(tpl, &p, &out, &n) == LMC_ERR_ARG);
    p.add_generation_prompt = 0; p.continue_final_message = 0;
    cJSON *bad = cJSON_Parse("{\"messages\":1}");
    p.extra = bad;
    CHECK(lmc_chat_render(tpl, &p, &out, &n) == LMC_ERR_ARG);
    p.extra = NULL;
    p.messages = tools->child;   /* not an array */
    CHECK(lmc_chat_render(tpl, &p, &out, &n) == LMC_ERR_ARG);
    CHECK(lmc_chat_render("{% if %}", &p, &out, &n) == LMC_ERR_FORMAT || 1);
    cJSON_Delete(bad); cJSON_Delete(msgs); cJSON_Delete(tools); cJSON_Delete(extra);
}

static void t_json_numbers(void) {
    const char *text = "{\"a\": 1.0, \"b\": [1, -0, 2.5e3, 12345678901234567], \"s\": \"1.0 in a string\", \"c\": 1E2}";
    cJSON *j = cJSON_Parse(text);
    const char *src = "{{ a }}|{{ b }}|{{ c }}|{{ {'x': a} | tojson }}";
    lmc_jinja_template *t;
    CHECK(lmc_jinja_parse(src, strlen(src), &t) == LMC_OK);
    char *out; size_t n;
    CHECK(lmc_jinja_render(t, j, &out, &n) == LMC_OK);   /* plain cJSON: integral doubles are ints */
    CHECK_EQ_STR(out, "1|[1, 0, 2500, 1.2345678901234568e+16]|100|{\"x\": 1}");
    free(out);
    CHECK(lmc_chat_json_keep_numbers(j, text, strlen(text)) == LMC_OK);
    CHECK(lmc_jinja_render(t, j, &out, &n) == LMC_OK);   /* with the source text: Python's typing */
    CHECK_EQ_STR(out, "1.0|[1, 0, 2500.0, 12345678901234567]|100.0|{\"x\": 1.0}");
    free(out);
    cJSON *other = cJSON_Parse("[1, 2]");
    CHECK(lmc_chat_json_keep_numbers(other, "[1]", 3) == LMC_ERR_ARG);
    cJSON_Delete(other);
    lmc_jinja_free(t);
    cJSON_Delete(j);
}

static void t_template_select(void) {
    cJSON *list = cJSON_Parse("[{\"name\":\"default\",\"template\":\"D\"},{\"name\":\"tool_use\",\"template\":\"T\"}]");
    cJSON *str = cJSON_CreateString("S");
    char *out;
    CHECK(lmc_chat_template_select(list, NULL, 0, &out) == LMC_OK); CHECK_EQ_STR(out, "D"); free(out);
    CHECK(lmc_chat_template_select(list, NULL, 1, &out) == LMC_OK); CHECK_EQ_STR(out, "T"); free(out);
    CHECK(lmc_chat_template_select(list, "tool_use", 0, &out) == LMC_OK); CHECK_EQ_STR(out, "T"); free(out);
    CHECK(lmc_chat_template_select(list, "rag", 0, &out) == LMC_ERR_NOT_FOUND);
    CHECK(lmc_chat_template_select(str, NULL, 1, &out) == LMC_OK); CHECK_EQ_STR(out, "S"); free(out);
    cJSON *num = cJSON_CreateNumber(1);
    CHECK(lmc_chat_template_select(num, NULL, 0, &out) == LMC_ERR_FORMAT);
    cJSON_Delete(list); cJSON_Delete(str); cJSON_Delete(num);

    /* discovery in a directory: chat_template.jinja wins over tokenizer_config.json */
    char dir[] = "/tmp/lmc-jinja-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"chat_template\": \"from-config {{ 1 }}\"}", f);
    fclose(f);
    CHECK(lmc_chat_template_load(dir, NULL, 0, &out) == LMC_OK); CHECK_EQ_STR(out, "from-config {{ 1 }}"); free(out);
    char path2[256];
    snprintf(path2, sizeof path2, "%s/chat_template.jinja", dir);
    f = fopen(path2, "w");
    fputs("from-jinja", f);
    fclose(f);
    CHECK(lmc_chat_template_load(dir, NULL, 0, &out) == LMC_OK); CHECK_EQ_STR(out, "from-jinja"); free(out);
    remove(path2); remove(path);
    CHECK(lmc_chat_template_load(dir, NULL, 0, &out) == LMC_ERR_NOT_FOUND);
    rmdir(dir);
}

static void t_strftime_now(void) {
    lmc_jinja_template *t;
    const char *src = "{{ strftime_now('%Y') }}|{{ strftime_now('') }}|{{ strftime_now is defined }}";
    CHECK(lmc_jinja_parse(src, strlen(src), &t) == LMC_OK);
    lmc_jinja_options opt = lmc_jinja_default_options();
    opt.now = 1000000000;   /* 2001-09-09 in every time zone */
    char *out; size_t n;
    CHECK(lmc_jinja_render_ex(t, NULL, &opt, &out, &n) == LMC_OK);
    CHECK_EQ_STR(out, "2001||True");
    free(out);
    opt.now = 0;   /* the real clock: a four-digit year >= 2024 */
    CHECK(lmc_jinja_render_ex(t, NULL, &opt, &out, &n) == LMC_OK);
    CHECK(n >= 4 && atoi(out) >= 2024);
    free(out);
    lmc_jinja_free(t);
}

/* one parsed template rendered from several threads at once (the server's use) */
typedef struct thr_arg { const lmc_jinja_template *t; const cJSON *ctx; const char *want; int bad; } thr_arg;
static void *render_many(void *p) {
    thr_arg *a = p;
    for (int i = 0; i < 200; i++) {
        char *out; size_t n;
        if (lmc_jinja_render(a->t, a->ctx, &out, &n) != LMC_OK) { a->bad++; continue; }
        if (strcmp(out, a->want) != 0) a->bad++;
        free(out);
    }
    return NULL;
}

static void t_threads(void) {
    const char *src = "{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s + m.role[0] %}"
                      "{{ m.content | upper }}{{ loop.index }}{% endfor %}|{{ ns.s }}|{{ messages | tojson }}";
    lmc_jinja_template *t;
    CHECK(lmc_jinja_parse(src, strlen(src), &t) == LMC_OK);
    cJSON *ctx = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]}");
    const char *want = "A1B2|ua|[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]";
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){ t, ctx, want, 0 };
        CHECK(pthread_create(&th[i], NULL, render_many, &args[i]) == 0);
    }
    int bad = 0;
    for (int i = 0; i < 4; i++) { pthread_join(th[i], NULL); bad += args[i].bad; }
    CHECK_EQ_INT(bad, 0);
    cJSON_Delete(ctx);
    lmc_jinja_free(t);
}

static void t_render_api(void) {
    lmc_jinja_template *t;
    CHECK(lmc_jinja_parse("{{ a }}", 7, &t) == LMC_OK);
    char *out; size_t n;
    cJSON *arr = cJSON_Parse("[1]");
    CHECK(lmc_jinja_render(t, arr, &out, &n) == LMC_ERR_ARG);   /* context must be an object */
    CHECK(lmc_jinja_render(t, NULL, &out, &n) == LMC_OK);
    CHECK_EQ_INT(n, 0);
    free(out);
    /* the same template rendered many times gives the same output */
    cJSON *ctx = cJSON_Parse("{\"a\":\"v\"}");
    int same = 1;
    for (int i = 0; i < 50; i++) {
        CHECK(lmc_jinja_render(t, ctx, &out, &n) == LMC_OK);
        same &= n == 1 && out[0] == 'v';
        free(out);
    }
    CHECK(same);
    /* embedded NUL in the source is text, lengths are explicit */
    lmc_jinja_template *t2;
    CHECK(lmc_jinja_parse("a\0b", 3, &t2) == LMC_OK);
    CHECK(lmc_jinja_render(t2, NULL, &out, &n) == LMC_OK);
    CHECK_EQ_INT(n, 3);
    CHECK(n == 3 && out[1] == 0 && out[2] == 'b');
    free(out);
    lmc_jinja_free(t2);
    cJSON_Delete(ctx); cJSON_Delete(arr);
    lmc_jinja_free(t);
    lmc_jinja_free(NULL);
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[3], "--now")) { fixed_now = atoll(argv[4]); argc = 3; }
    if (argc == 3 && !strcmp(argv[1], "--driver")) return driver(argv[2], 0);
    if (argc == 3 && !strcmp(argv[1], "--chat")) return driver(argv[2], 1);
    t_smoke();
    t_literals_and_repr();
    t_arithmetic();
    t_compare_logic();
    t_undefined();
    t_access_and_slicing();
    t_string_methods();
    t_string_methods2();
    t_dict_methods();
    t_filters_basic();
    t_filters_select_map();
    t_tojson();
    t_indent_truncate_center();
    t_tests();
    t_for_loops();
    t_scoping_set_namespace();
    t_string_building();
    t_macros();
    t_whitespace();
    RUN(t_errors_with_position);
    RUN(t_malformed_no_crash);
    RUN(t_fuzz);
    RUN(t_limits);
    RUN(t_chat_render);
    RUN(t_json_numbers);
    RUN(t_template_select);
    RUN(t_strftime_now);
    RUN(t_threads);
    RUN(t_render_api);
    return TEST_END();
}
