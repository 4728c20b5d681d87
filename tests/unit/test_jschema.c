/* test_jschema.c — guided decoding beyond the basics: the pattern regex subset (jsregex),
 * formats, anyOf/oneOf with alternatives that begin alike (parallel readings), allOf
 * merging, not, number bounds, and lmc_jschema_validate. A random-walk test drives the
 * recognizer byte by byte over many schemas: every text it completes must validate, and
 * no prefix it accepts may be a dead end.
 */
#include <stdlib.h>
#include <string.h>

#include "server/jschema.h"
#include "server/jsregex.h"
#include "server/jsmerge.h"
#include "test.h"

/* ---- regex ---- */

static int rx_match(const char *pattern, const char *s) {
    lmc_rx *rx;
    if (lmc_rx_compile(pattern, &rx) < 0) return -1;
    int m = lmc_rx_match(rx, s, strlen(s));
    lmc_rx_free(rx);
    return m;
}

static void test_regex(void) {
    static const struct { const char *pat, *s; int m; } cases[] = {
        {"abc", "abc", 1}, {"abc", "xxabcyy", 1}, {"abc", "abx", 0},            /* a search, not a full match */
        {"^abc", "abcd", 1}, {"^abc", "xabc", 0}, {"abc$", "xabc", 1}, {"abc$", "abcx", 0},
        {"^abc$", "abc", 1}, {"^abc$", "abcc", 0}, {"^$", "", 1}, {"^$", "a", 0}, {"", "anything", 1},
        {"^a|b$", "ax", 1}, {"^a|b$", "xb", 1}, {"^a|b$", "xa", 0},
        {"^[a-c]+$", "abcabc", 1}, {"^[a-c]+$", "abd", 0}, {"^[^a-c]+$", "xyz", 1}, {"^[^a-c]+$", "xaz", 0},
        {"^\\d{3}-\\d{4}$", "555-1234", 1}, {"^\\d{3}-\\d{4}$", "55-1234", 0}, {"^\\d{2,3}$", "1234", 0}, {"^\\d{2,}$", "12345", 1},
        {"^\\w+@\\w+\\.com$", "me@x.com", 1}, {"^\\w+@\\w+\\.com$", "me@x.org", 0},
        {"^\\s*$", " \t\n", 1}, {"^\\S+$", "a b", 0}, {"^\\D+$", "abc", 1}, {"^\\D+$", "a1", 0},
        {"^(ab)*$", "ababab", 1}, {"^(ab)*$", "aba", 0}, {"^(?:ab|cd)+$", "abcdab", 1}, {"^(?<x>a)b$", "ab", 1},
        {"^a?b+?c*$", "bbc", 1}, {"^colou?r$", "color", 1}, {"^colou?r$", "colouur", 0},
        {"^.$", "é", 1}, {"^.$", "\xe2\x82\xac", 1}, {"^.$", "\n", 0}, {"^..$", "é", 0},   /* '.' is one code point */
        {"^[é-ë]$", "ê", 1}, {"^[é-ë]$", "e", 0}, {"^[^a]$", "\xf0\x9f\x98\x80", 1},         /* classes over code points */
        {"^\\u00e9$", "é", 1}, {"^\\x41$", "A", 1}, {"^\\ud83d\\ude00$", "\xf0\x9f\x98\x80", 1},
        {"^\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\/$", ".*+?()[]{}|\\/", 1},
        {"^a{2}$", "aa", 1}, {"^a{2}$", "aaa", 0}, {"^x{$", "x{", 1},                          /* a lone { is a literal */
        {"^[-a]$", "-", 1}, {"^[a-]$", "-", 1}, {"^[\\]]$", "]", 1}, {"^[\\d.]+$", "3.14", 1},
        {"^(a|ab)(c|bcd)(d*)$", "abcd", 1}, {"^(a+)+b$", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", 1},   /* no backtracking blow-up */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK_MSG(rx_match(cases[i].pat, cases[i].s) == cases[i].m, "case %zu: /%s/ on '%s' → %d (%s)", i, cases[i].pat, cases[i].s,
                  rx_match(cases[i].pat, cases[i].s), lmc_last_error());
    static const char *const refused[] = {"(?=a)", "(?!a)", "(?<=a)", "a\\1", "\\bword", "\\p{L}", "a(^b)", "a$b", "(", "a)", "[a", "*a",
                                          "a**", "a{3,2}", "\\", "[z-a]", "a{1001}", "\\q", "\\ud800"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        lmc_rx *rx = NULL;
        CHECK_MSG(lmc_rx_compile(refused[i], &rx) < 0 && rx == NULL && strstr(lmc_last_error(), "pattern"), "refused %zu '%s'", i, refused[i]);
        lmc_rx_free(rx);
    }
    /* Prefix states: a byte that cannot lead to a match is refused at once. */
    lmc_rx *rx;
    CHECK(lmc_rx_compile("^ab+c$", &rx) == LMC_OK);
    int32_t st = lmc_rx_start(rx);
    st = lmc_rx_next(rx, st, 'a');
    CHECK(st >= 0 && !lmc_rx_accepts(rx, st));
    CHECK(lmc_rx_next(rx, st, 'c') == -1);
    st = lmc_rx_next(rx, lmc_rx_next(rx, st, 'b'), 'c');
    CHECK(lmc_rx_accepts(rx, st));
    CHECK(lmc_rx_next(rx, st, 'c') == -1);
    /* Intersection: strings both match. */
    lmc_rx *r2, *both;
    CHECK(lmc_rx_compile("^\\w*$", &r2) == LMC_OK && lmc_rx_and(rx, r2, &both) == LMC_OK);
    CHECK(lmc_rx_match(both, "abbc", 4) && !lmc_rx_match(both, "ac", 2));
    lmc_rx_free(both);
    lmc_rx *r3;
    CHECK(lmc_rx_compile("^x", &r3) == LMC_OK && lmc_rx_and(rx, r3, &both) < 0); /* nothing matches both */
    lmc_rx_free(r3);
    lmc_rx_free(r2);
    lmc_rx_free(rx);
    /* An automaton too large is refused, not built. */
    CHECK(lmc_rx_compile("(a|b)*a(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)(a|b)$", &rx) == LMC_ERR_UNSUPPORTED);
}

static void test_formats(void) {
    static const struct { const char *fmt, *s; int m; } cases[] = {
        {"date", "2024-02-29", 1}, {"date", "2024-13-01", 0}, {"date", "2024-04-31", 0}, {"date", "2024-4-01", 0}, {"date", "2024-01-31", 1},
        {"time", "23:59:60Z", 1}, {"time", "12:00:00.123+05:30", 1}, {"time", "24:00:00Z", 0}, {"time", "12:00:00", 0},
        {"date-time", "2026-11-29T15:36:57Z", 1}, {"date-time", "2026-11-29t15:36:57.5-01:00", 1}, {"date-time", "2026-11-29 15:36:57Z", 0},
        {"uuid", "123e4567-e89b-12d3-a456-426614174000", 1}, {"uuid", "123e4567e89b12d3a456426614174000", 0}, {"uuid", "g23e4567-e89b-12d3-a456-426614174000", 0},
        {"email", "jacob.israel@example.org", 1}, {"email", "a+b@c", 1}, {"email", "no at", 0}, {"email", "a@b@c", 0}, {"email", "a@-b.com", 0},
        {"ipv4", "192.168.0.1", 1}, {"ipv4", "255.255.255.255", 1}, {"ipv4", "256.1.1.1", 0}, {"ipv4", "01.1.1.1", 0}, {"ipv4", "1.1.1", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *p = lmc_jsformat_pattern(cases[i].fmt);
        CHECK_MSG(p && rx_match(p, cases[i].s) == cases[i].m, "format %s '%s'", cases[i].fmt, cases[i].s);
    }
    CHECK(lmc_jsformat_pattern("uri") == NULL);
}

/* ---- the recognizer ---- */

/* rc of feeding text (-2: the schema did not compile); *done when a whole value was read. */
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
        /* byte by byte through copies gives the same answer */
        lmc_jsstate a, b;
        lmc_jsstate_init(&a, sc);
        int rc1 = 0;
        for (size_t i = 0; text[i] && rc1 == 0; i++) {
            lmc_jsstate_copy(&b, &a);
            rc1 = lmc_jsstate_feed(&b, text + i, 1);
            lmc_jsstate_copy(&a, &b);
        }
        if (rc1 != rc || (rc == 0 && lmc_jsstate_done(&a) != *done)) rc = -3;
    }
    lmc_jschema_free(sc);
    cJSON_Delete(j);
    return rc;
}

static void test_jschema_features(void) {
    const char *two_objs = "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"cat\":{\"type\":\"string\"}},\"required\":[\"cat\"]},"
                           "{\"type\":\"object\",\"properties\":{\"dog\":{\"type\":\"integer\"}},\"required\":[\"dog\"]}]}";
    const char *shapes = "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\"}},\"required\":[\"kind\",\"r\"]},"
                         "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"square\"},\"side\":{\"type\":\"number\"}},\"required\":[\"kind\",\"side\"]}]}";
    const char *merged = "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"a\"]},"
                         "{\"properties\":{\"a\":{\"maximum\":9},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}";
    const char *closed = "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false},"
                         "{\"properties\":{\"b\":{}}}]}";
    const char *dist = "{\"type\":\"object\",\"properties\":{\"v\":{}},\"required\":[\"v\"],\"anyOf\":[{\"properties\":{\"v\":{\"type\":\"string\"}}},"
                       "{\"properties\":{\"v\":{\"type\":\"integer\"}}}]}";
    static const struct { int which; const char *text; int ok, done; } cases[] = {
        /* anyOf with two objects: both readings run until a key tells them apart */
        {0, "{\"cat\":\"tom\"}", 1, 1}, {0, "{\"dog\":3}", 1, 1}, {0, "{\"cow\"", 0, 0}, {0, "{\"cat\":3", 0, 0}, {0, "{}", 0, 0},
        {0, "{\"dog\":3,\"cat\"", 0, 0},
        /* oneOf told apart only by a const inside */
        {1, "{\"kind\":\"circle\",\"r\":2.5}", 1, 1}, {1, "{\"kind\":\"square\",\"side\":1}", 1, 1},
        {1, "{\"kind\":\"circle\",\"side\"", 0, 0}, {1, "{\"kind\":\"tri", 0, 0},
        /* allOf: properties meet, bounds tighten, required unite */
        {2, "{\"a\":5,\"b\":\"x\"}", 1, 1}, {2, "{\"a\":10", 0, 0}, {2, "{\"a\":-1", 0, 0}, {2, "{\"a\":-0,\"b\":\"\"}", 1, 1}, {2, "{\"a\":5}", 0, 0},
        {2, "{\"b\":\"x\",\"a\":0}", 1, 1},
        /* allOf: a member's additionalProperties false excludes the other member's property */
        {3, "{\"a\":1}", 1, 1}, {3, "{\"b\"", 0, 0},
        /* anyOf beside other keywords: distributed */
        {4, "{\"v\":\"s\"}", 1, 1}, {4, "{\"v\":7}", 1, 1}, {4, "{\"v\":true", 0, 0}, {4, "{}", 0, 0},
        /* allOf: a member's additionalProperties schema constrains the other member's properties */
        {5, "{\"a\":\"x\",\"b\":1,\"c\":2}", 1, 1}, {5, "{\"b\":\"x\"", 0, 0}, {5, "{\"c\":[", 0, 0},
    };
    const char *typed = "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"integer\"}},"
                        "{\"properties\":{\"b\":{},\"c\":{}}}]}";
    const char *schemas[] = {two_objs, shapes, merged, closed, dist, typed};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int done;
        int rc = js(schemas[cases[i].which], cases[i].text, &done);
        CHECK_MSG(rc > -2 && (rc == 0) == cases[i].ok && done == cases[i].done, "case %zu '%s': rc %d done %d (%s)", i, cases[i].text, rc, done,
                  rc == -2 ? lmc_last_error() : "");
    }
    static const struct { const char *schema, *text; int ok, done; } more[] = {
        /* pattern: matched on the decoded string, escapes included */
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+$\"}", "\"AB-12\"", 1, 1},
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+$\"}", "\"AB-\"", 0, 0},
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+$\"}", "\"Ab", 0, 0},
        {"{\"type\":\"string\",\"pattern\":\"^a\\\"b$\"}", "\"a\\\"b\"", 1, 1},
        {"{\"type\":\"string\",\"pattern\":\"^\\\\n$\"}", "\"\\n\"", 1, 1},
        {"{\"type\":\"string\",\"pattern\":\"^é$\"}", "\"\\u00e9\"", 0, 0},   /* no \\u escapes under a pattern */
        {"{\"type\":\"string\",\"pattern\":\"^é$\"}", "\"\\u00e8", 0, 0},
        {"{\"type\":\"string\",\"pattern\":\"^é$\"}", "\"é\"", 1, 1},
        {"{\"type\":\"string\",\"pattern\":\"b\"}", "\"abc\"", 1, 1},
        {"{\"type\":\"string\",\"pattern\":\"b\"}", "\"ac\"", 0, 0},
        {"{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":3}", "\"aaaa", 0, 0},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-29\"", 1, 1},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-3", 0, 0},
        {"{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^0\"}", "\"023e4567-e89b-12d3-a456-426614174000\"", 1, 1},
        {"{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^0\"}", "\"1", 0, 0},
        {"{\"type\":[\"string\",\"null\"],\"format\":\"ipv4\"}", "null", 1, 1},
        /* number bounds: a prefix grows only while some continuation stays in range */
        {"{\"type\":\"number\",\"minimum\":1.5,\"maximum\":2.5}", "2.25", 1, 1},
        {"{\"type\":\"number\",\"minimum\":1.5,\"maximum\":2.5}", "1.4", 0, 0},
        {"{\"type\":\"number\",\"minimum\":1.5,\"maximum\":2.5}", "3", 0, 0},
        {"{\"type\":\"number\",\"minimum\":1.5,\"maximum\":2.5}", "1", 1, 0},     /* 1.5… still possible, 1 itself is not */
        {"{\"type\":\"number\",\"minimum\":1.5,\"maximum\":2.5}", "2e0", 0, 0},   /* no exponent under bounds */
        {"{\"type\":\"number\",\"exclusiveMaximum\":10}", "9.99", 1, 1},
        {"{\"type\":\"number\",\"exclusiveMaximum\":10}", "10", 0, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.", 1, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.0", 1, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.01", 1, 1},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "-", 0, 0},
        {"{\"type\":\"number\",\"maximum\":-2}", "-2", 1, 1},
        {"{\"type\":\"number\",\"maximum\":-2}", "-1.9", 0, 0},
        {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1}}}", "{\"p\":0.5}", 1, 1},
        {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1}}}", "{\"p\":1.5", 0, 0},
        /* not */
        {"{\"not\":{\"type\":\"null\"}}", "null", 0, 0},
        {"{\"not\":{\"type\":\"null\"}}", "3", 1, 1},
        {"{\"type\":\"string\",\"not\":{\"enum\":[\"a\",\"b\"]}}", "\"a\"", 0, 0},
        {"{\"type\":\"string\",\"not\":{\"enum\":[\"a\",\"b\"]}}", "\"\\u0061\"", 0, 0},   /* an escaped 'a' is still 'a' */
        {"{\"type\":\"string\",\"not\":{\"enum\":[\"a\",\"b\"]}}", "\"ab\"", 1, 1},
        {"{\"type\":\"integer\",\"not\":{\"const\":0}}", "0", 1, 0},
        {"{\"type\":\"integer\",\"not\":{\"const\":0}}", "0,", 0, 0},
        {"{\"type\":\"integer\",\"not\":{\"const\":0}}", "10", 1, 1},
        {"{\"type\":\"boolean\",\"not\":{\"const\":true}}", "true", 0, 0},
        {"{\"type\":\"boolean\",\"not\":{\"const\":true}}", "false", 1, 1},
        {"{\"enum\":[\"x\",\"y\",1],\"not\":{\"enum\":[\"y\"]}}", "\"y\"", 0, 0},
        {"{\"enum\":[\"x\",\"y\",1],\"not\":{\"enum\":[\"y\"]}}", "1", 1, 1},
        /* anyOf of alike scalars: both readings live */
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"string\",\"pattern\":\"^z+$\"}]}", "\"zzzz\"", 1, 1},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"string\",\"pattern\":\"^z+$\"}]}", "\"ab\"", 1, 1},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"string\",\"pattern\":\"^z+$\"}]}", "\"abc", 0, 0},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"minimum\":5}]}", "3.5", 0, 0},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"minimum\":5}]}", "5.5", 1, 1},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"minimum\":5}]}", "3", 1, 1},
        /* arrays of alike alternatives: readings merge again after each item */
        {"{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"minLength\":1}]}}",
         "[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\"]", 1, 1},
        /* recursion through $ref under allOf */
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":\"#/$defs/n\"}}}},\"allOf\":[{\"$ref\":\"#/$defs/n\"}]}",
         "{\"k\":{\"k\":{}}}", 1, 1},
    };
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
        int done;
        int rc = js(more[i].schema, more[i].text, &done);
        CHECK_MSG(rc > -2 && (rc == 0) == more[i].ok && done == more[i].done, "more %zu %s '%s': rc %d done %d (%s)", i, more[i].schema,
                  more[i].text, rc, done, rc == -2 ? lmc_last_error() : "");
    }
    /* compile-time refusals and contradictions */
    static const char *const bad[] = {
        "{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",          /* no common type */
        "{\"allOf\":[{\"enum\":[1,2]},{\"enum\":[3]}]}",                        /* no common value */
        "{\"type\":\"number\",\"minimum\":3,\"exclusiveMaximum\":3}",
        "{\"type\":\"string\",\"pattern\":\"[]\"}",                            /* matches nothing */
        "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false},{\"properties\":{\"b\":{}},\"required\":[\"b\"]}]}",
        "{\"$defs\":{\"x\":{\"allOf\":[{\"$ref\":\"#/$defs/x\"}]}},\"$ref\":\"#/$defs/x\"}", /* endless */
        "{\"enum\":[1],\"not\":{\"const\":1}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *j = cJSON_Parse(bad[i]);
        lmc_jschema *sc = NULL;
        CHECK_MSG(j && lmc_jschema_compile(j, &sc) < 0 && !sc, "bad %zu compiled", i);
        lmc_jschema_free(sc);
        cJSON_Delete(j);
    }
}

static void test_validate(void) {
    static const struct { const char *schema, *text; int ok; } cases[] = {
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"minimum\":0}]}", "5", 0},   /* both match: not exactly one */
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"minimum\":0}]}", "-5", 1},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"minimum\":0}]}", "0.5", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}}}", "{\"b\":1}", 0},                     /* strict: no other keys */
        {"{\"allOf\":[{\"properties\":{\"a\":{}}},{\"properties\":{\"b\":{}}}]}", "{\"a\":1,\"b\":2}", 1},
        {"{\"type\":\"string\",\"format\":\"email\"}", "\"x@y.z\"", 1},
        {"{\"type\":\"string\",\"format\":\"email\"}", "\"xy.z\"", 0},
        {"{\"type\":\"number\",\"exclusiveMaximum\":1}", "1", 0},
        {"{\"not\":{\"enum\":[\"a\"]}}", "\"a\"", 0},
        {"{\"type\":\"string\",\"maxLength\":1}", "\"é\"", 1},
        {"{\"type\":\"integer\"}", "1 x", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *j = cJSON_Parse(cases[i].schema);
        char why[128];
        int ok = lmc_jschema_validate(j, cases[i].text, strlen(cases[i].text), why, sizeof why);
        CHECK_MSG(ok == cases[i].ok && (ok || why[0]), "validate %zu: %d (%s)", i, ok, why);
        cJSON_Delete(j);
    }
}

/* ---- random walks: what the recognizer completes validates; what it accepts can complete ---- */

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }

static void test_random_walks(void) {
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"bb\",3]},\"maxItems\":3}},\"required\":[\"name\",\"age\"]}",
        "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"cat\":{\"type\":\"string\",\"pattern\":\"^[a-c]{1,3}$\"}},\"required\":[\"cat\"]},"
        "{\"type\":\"object\",\"properties\":{\"dog\":{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":2}},\"required\":[\"dog\"]}]}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"date\"},\"minItems\":1,\"maxItems\":2}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"ipv4\"},\"maxItems\":2}",
        "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":0}},\"required\":[\"x\"]},"
        "{\"properties\":{\"x\":{\"maximum\":0.75},\"y\":{\"not\":{\"enum\":[\"no\",null]}}}}]}",
        "{\"oneOf\":[{\"type\":\"string\",\"pattern\":\"^a\"},{\"type\":\"string\",\"pattern\":\"^b\"},{\"type\":\"integer\",\"exclusiveMinimum\":3,\"maximum\":40}]}",
        "{\"type\":\"string\",\"format\":\"date-time\"}",
        "{\"type\":\"string\",\"format\":\"email\",\"maxLength\":12}",
    };
    const char *prefer = "\"}]0123456789,:-ab.@T";
    int completed = 0, dead = 0, invalid = 0;
    for (size_t si = 0; si < sizeof schemas / sizeof *schemas; si++) {
        cJSON *j = cJSON_Parse(schemas[si]);
        lmc_jschema *sc = NULL;
        CHECK_MSG(j && lmc_jschema_compile(j, &sc) == LMC_OK, "walk schema %zu: %s", si, lmc_last_error());
        for (int walk = 0; sc && walk < 60; walk++) {
            lmc_jsstate st, t;
            lmc_jsstate_init(&st, sc);
            char text[400];
            size_t n = 0;
            for (;;) {
                if (lmc_jsstate_done(&st) && (rnd() % 4 == 0 || n > 200)) break;
                if (n + 1 >= sizeof text) break;
                int allowed[256], na = 0, pa = 0, pref[64];
                for (int c = 1; c < 256; c++) {
                    char ch = (char)c;
                    lmc_jsstate_copy(&t, &st);
                    if (lmc_jsstate_feed(&t, &ch, 1) == 0) {
                        allowed[na++] = c;
                        if (strchr(prefer, c) && pa < 64) pref[pa++] = c;
                    }
                }
                if (!na) break;
                int c = (n > 40 && pa && rnd() % 4) ? pref[rnd() % pa] : allowed[rnd() % na];
                char ch = (char)c;
                CHECK(lmc_jsstate_feed(&st, &ch, 1) == 0);
                text[n++] = ch;
            }
            text[n] = 0;
            if (!lmc_jsstate_done(&st)) {
                if (n + 1 < sizeof text) { dead++; fprintf(stderr, "  dead end, schema %zu: %s\n", si, text); }
                continue;
            }
            completed++;
            char why[128];
            int expect_exact = si != 5; /* oneOf of "^a"/"^b"/integer: disjoint, so exact too */
            if (!lmc_jschema_validate(j, text, n, why, sizeof why) && expect_exact) {
                invalid++;
                fprintf(stderr, "  invalid, schema %zu: %s (%s)\n", si, text, why);
            }
        }
        lmc_jschema_free(sc);
        cJSON_Delete(j);
    }
    CHECK_MSG(completed > 300 && dead == 0 && invalid == 0, "completed %d, dead ends %d, invalid %d", completed, dead, invalid);
}

static char pick(const char *set) { return set[rnd() % strlen(set)]; }

/* Mangled schemas and patterns: compile or refuse, never crash or hang (run under ASan/UBSan too). */
static void test_mangled(void) {
    static const char *const seeds[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^[a-z]{2,4}(x|y)*$\"},\"b\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":3},{\"type\":\"number\",\"maximum\":1.5}]}},\"required\":[\"a\"]}",
        "{\"allOf\":[{\"$ref\":\"#/$defs/p\"},{\"properties\":{\"q\":{\"not\":{\"enum\":[1,\"x\",null]}}}}],\"$defs\":{\"p\":{\"type\":\"object\",\"properties\":{\"q\":{}},\"additionalProperties\":false}}}",
        "{\"oneOf\":[{\"type\":\"string\",\"format\":\"date-time\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":3}]}",
    };
    int compiled = 0, tried = 0;
    for (int it = 0; it < 4000; it++) {
        const char *seed = seeds[it % 3];
        char buf[512];
        size_t n = strlen(seed);
        memcpy(buf, seed, n + 1);
        for (int k = 0; k < 1 + (int)(rnd() % 3); k++) buf[rnd() % n] = pick("{}[]\":,\\^$()|*+?.-0123456789abcdefxyz");
        cJSON *j = cJSON_Parse(buf);
        if (!j) continue;
        tried++;
        lmc_jschema *sc = NULL;
        if (lmc_jschema_compile(j, &sc) == LMC_OK) {
            compiled++;
            lmc_jsstate st;
            lmc_jsstate_init(&st, sc);
            char text[64];
            for (size_t i = 0; i < sizeof text; i++) text[i] = pick("{}[]\":,0123456789-.aeflnrstux\\ ");
            for (size_t i = 0; i < sizeof text && lmc_jsstate_feed(&st, text + i, 1) == 0; i++) (void)lmc_jsstate_done(&st);
            char why[64];
            static const char doc[] = "{\"a\":\"abx\",\"b\":2}";
            (void)lmc_jschema_validate(j, doc, sizeof doc - 1, why, sizeof why);
        }
        lmc_jschema_free(sc);
        cJSON_Delete(j);
    }
    CHECK_MSG(tried > 500 && compiled > 50, "tried %d, compiled %d", tried, compiled);
    int ok = 0;
    for (int it = 0; it < 3000; it++) {
        char pat[24];
        int n = 1 + (int)(rnd() % 20);
        for (int i = 0; i < n; i++) pat[i] = pick("ab()[]{}|*+?.^$\\-,0123dws");
        pat[n] = 0;
        lmc_rx *rx = NULL;
        if (lmc_rx_compile(pat, &rx) == LMC_OK) { ok++; (void)lmc_rx_match(rx, "ab12", 4); }
        lmc_rx_free(rx);
    }
    CHECK(ok > 100);
}

int main(void) {
    RUN(test_regex);
    RUN(test_formats);
    RUN(test_jschema_features);
    RUN(test_validate);
    RUN(test_random_walks);
    RUN(test_mangled);
    return TEST_END();
}
