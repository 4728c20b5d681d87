/* test_config.c — lmc_config_from_json / lmc_config_load: both rope spellings
 * (transformers 5 rope_parameters, flat or per layer type; transformers 4
 * rope_scaling + rope_theta), nested text_config, defaults (head_dim, kv heads),
 * eos/bos from config.json and generation_config.json, and the error for every
 * missing or mistyped field. Configs are written here as JSON string literals.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "test.h"

#include "model/arch.h"
#include "model/config.h"

/* A small llama-like config every test starts from. */
static const char *BASE =
    "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 128,"
    " \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05,"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"hidden_act\": \"silu\","
    " \"bos_token_id\": 1, \"eos_token_id\": 2, \"torch_dtype\": \"bfloat16\"}";

/* Parse `json` (and `gen` when given) into cfg; the caller frees cfg. */
static lmc_status parse(const char *json, const char *gen, lmc_config *cfg) {
    cJSON *raw = cJSON_Parse(json);
    CHECK_MSG(raw != NULL, "test JSON does not parse: %s", json);
    if (!raw) { memset(cfg, 0, sizeof *cfg); return LMC_ERR_ARG; }
    cJSON *g = gen ? cJSON_Parse(gen) : NULL;
    CHECK(!gen || g);
    lmc_clear_error();
    lmc_status st = lmc_config_from_json(raw, g, cfg);
    cJSON_Delete(g);
    return st;
}

/* BASE with `key` replaced by the JSON value `value` (NULL: key removed). */
static lmc_status parse_base_with(const char *key, const char *value, lmc_config *cfg) {
    cJSON *raw = cJSON_Parse(BASE);
    LMC_ASSERT(raw);
    cJSON_DeleteItemFromObjectCaseSensitive(raw, key);
    if (value) {
        cJSON *v = cJSON_Parse(value);
        LMC_ASSERT(v);
        cJSON_AddItemToObject(raw, key, v);
    }
    lmc_clear_error();
    return lmc_config_from_json(raw, NULL, cfg);
}

/* Expect parsing BASE[key = value] to fail with st and a message holding `needle`. */
static void expect_base_error(const char *key, const char *value, lmc_status want, const char *needle) {
    lmc_config cfg;
    lmc_status st = parse_base_with(key, value, &cfg);
    CHECK_MSG(st == want, "%s = %s: status %d, want %d (%s)", key, value ? value : "(absent)", st, want,
              lmc_last_error());
    CHECK_MSG(strstr(lmc_last_error(), needle) != NULL, "%s = %s: message \"%s\" lacks \"%s\"", key,
              value ? value : "(absent)", lmc_last_error(), needle);
    lmc_config_free(&cfg);
}

static int has_eos(const lmc_config *c, int id) {
    for (int i = 0; i < c->n_eos; i++) if (c->eos_token_ids[i] == id) return 1;
    return 0;
}

/* ------------------------------------------------------------------ basics */

static void test_base_fields(void) {
    lmc_config c;
    CHECK_EQ_INT(parse(BASE, NULL, &c), LMC_OK);
    CHECK_EQ_STR(c.model_type, "llama");
    CHECK_EQ_STR(c.outer_model_type, "llama");
    CHECK_EQ_STR(c.architecture, "LlamaForCausalLM");
    CHECK_EQ_STR(c.torch_dtype, "bfloat16");
    CHECK_EQ_INT(c.vocab_size, 128);
    CHECK_EQ_INT(c.hidden_size, 64);
    CHECK_EQ_INT(c.intermediate_size, 96);
    CHECK_EQ_INT(c.n_layers, 2);
    CHECK_EQ_INT(c.n_heads, 4);
    CHECK_EQ_INT(c.n_kv_heads, 2);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_EQ_INT(c.max_position_embeddings, 256);
    CHECK(c.norm_eps == 1e-5);
    CHECK_EQ_INT(c.tie_word_embeddings, 0);
    CHECK_EQ_STR(c.hidden_act, "silu");
    CHECK_EQ_INT(c.sliding_window, 0);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_DEFAULT);
    CHECK(c.rope.theta == 500000.0);
    CHECK(c.rope.partial_rotary_factor == 1.0);
    CHECK(c.rope_local.theta == 500000.0);
    CHECK_EQ_INT(c.bos_token_id, 1);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.eos_token_ids[0], 2);
    CHECK_EQ_INT(c.pad_token_id, -1);
    CHECK(c.raw != NULL && c.text == c.raw);
    int64_t v;
    CHECK(lmc_config_int(&c, "num_hidden_layers", &v) == 1 && v == 2);
    CHECK_EQ_INT(lmc_config_int(&c, "no_such_key", &v), 0);
    CHECK_EQ_INT(lmc_config_int(&c, "hidden_act", &v), -1);
    lmc_config_free(&c);
    CHECK(c.raw == NULL);
    lmc_config_free(&c); /* twice is harmless */
}

/* Defaults when optional keys are absent: no rope key at all → default rope, theta 10000. */
static void test_minimal_defaults(void) {
    lmc_config c;
    CHECK_EQ_INT(parse("{\"model_type\": \"qwen2\", \"vocab_size\": 50, \"hidden_size\": 48,"
                       " \"num_hidden_layers\": 1, \"num_attention_heads\": 3}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_EQ_INT(c.n_kv_heads, 3);
    CHECK_EQ_INT(c.intermediate_size, 4 * 48);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_DEFAULT);
    CHECK(c.rope.theta == 10000.0);
    CHECK_EQ_INT(c.bos_token_id, -1);
    CHECK_EQ_INT(c.n_eos, 0);
    CHECK_EQ_STR(c.hidden_act, "silu");
    CHECK_EQ_STR(c.architecture, "");
    CHECK_EQ_STR(c.torch_dtype, "");
    CHECK(c.gen_temperature < 0 && c.gen_top_k < 0);
    lmc_config_free(&c);
}

/* ------------------------------------------------------------------ rope spellings */

static void test_rope_parameters_flat(void) {
    lmc_config c;
    CHECK_EQ_INT(parse("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0,"
                       " \"factor\": 32.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
                       " \"original_max_position_embeddings\": 8192}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_LLAMA3);
    CHECK(c.rope.theta == 500000.0);
    CHECK(c.rope.factor == 32.0);
    CHECK(c.rope.low_freq_factor == 1.0 && c.rope.high_freq_factor == 4.0);
    CHECK_EQ_INT(c.rope.original_max_position_embeddings, 8192);
    CHECK_EQ_INT(c.rope_local.type, LMC_ROPE_LLAMA3); /* one rope for every layer */
    CHECK(c.rope_local.factor == 32.0);
    lmc_config_free(&c);
    /* rope_parameters wins over a stale transformers-4 rope_scaling */
    CHECK_EQ_INT(parse("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000.0},"
                       " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_DEFAULT);
    CHECK(c.rope.theta == 1000.0);
    lmc_config_free(&c);
}

static void test_rope_parameters_per_layer_type(void) {
    lmc_config c;
    CHECK_EQ_INT(parse("{\"model_type\": \"gemma3_text\", \"vocab_size\": 10, \"hidden_size\": 32,"
                       " \"num_hidden_layers\": 6, \"num_attention_heads\": 2, \"sliding_window\": 512,"
                       " \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0,"
                       " \"rope_theta\": 1000000.0}, \"sliding_attention\": {\"rope_type\": \"default\","
                       " \"rope_theta\": 10000.0}}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_LINEAR);
    CHECK(c.rope.factor == 8.0);
    CHECK(c.rope.theta == 1000000.0);
    CHECK_EQ_INT(c.rope_local.type, LMC_ROPE_DEFAULT);
    CHECK(c.rope_local.theta == 10000.0);
    CHECK(c.rope_local.factor != 8.0); /* the full layers' scaling does not leak into sliding ones */
    CHECK_EQ_INT(c.sliding_window, 512);
    lmc_config_free(&c);
    /* only full_attention given: sliding layers share it */
    CHECK_EQ_INT(parse("{\"model_type\": \"x\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\","
                       " \"rope_theta\": 75000.0, \"partial_rotary_factor\": 0.25}}}", NULL, &c), LMC_OK);
    CHECK(c.rope.theta == 75000.0 && c.rope_local.theta == 75000.0);
    CHECK(c.rope.partial_rotary_factor == 0.25 && c.rope_local.partial_rotary_factor == 0.25);
    lmc_config_free(&c);
    /* an unsupported type inside a per-layer dict is still refused, by name */
    CHECK_EQ_INT(parse("{\"model_type\": \"x\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\"},"
                       " \"sliding_attention\": {\"rope_type\": \"zigzag\"}}}", NULL, &c), LMC_ERR_UNSUPPORTED);
    CHECK(strstr(lmc_last_error(), "zigzag") != NULL);
    lmc_config_free(&c);
}

static void test_rope_scaling_type(void) {
    lmc_config c;
    CHECK_EQ_INT(parse("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_theta\": 250000.0,"
                       " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_LINEAR);
    CHECK(c.rope.factor == 2.0);
    CHECK(c.rope.theta == 250000.0); /* top-level rope_theta carries into the scaling dict */
    CHECK_EQ_INT(c.rope_local.type, LMC_ROPE_LINEAR);
    lmc_config_free(&c);
    /* rope_scaling: null means none */
    CHECK_EQ_INT(parse("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_theta\": 1e6, \"rope_scaling\": null}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_DEFAULT);
    CHECK(c.rope.theta == 1e6);
    lmc_config_free(&c);
    /* dynamic */
    CHECK_EQ_INT(parse("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 3.5}}", NULL, &c),
                 LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_DYNAMIC);
    CHECK(c.rope.factor == 3.5);
    lmc_config_free(&c);
}

static void test_rope_scaling_rope_type_llama3(void) {
    lmc_config c;
    CHECK_EQ_INT(parse("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0,"
                       " \"low_freq_factor\": 2.0, \"high_freq_factor\": 6.0, \"original_max_position_embeddings\": 4096,"
                       " \"rope_type\": \"llama3\"}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_LLAMA3);
    CHECK(c.rope.theta == 500000.0);
    CHECK(c.rope.factor == 8.0);
    CHECK(c.rope.low_freq_factor == 2.0 && c.rope.high_freq_factor == 6.0);
    CHECK_EQ_INT(c.rope.original_max_position_embeddings, 4096);
    lmc_config_free(&c);
    /* both keys: rope_type wins over type (as transformers reads them) */
    CHECK_EQ_INT(parse("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"linear\", \"rope_type\": \"dynamic\","
                       " \"factor\": 2.0}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_DYNAMIC);
    lmc_config_free(&c);
}

static void test_rope_yarn_and_longrope_fields(void) {
    lmc_config c;
    CHECK_EQ_INT(parse("{\"model_type\": \"qwen2\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_theta\": 1000000.0, \"rope_scaling\": {\"rope_type\": \"yarn\","
                       " \"factor\": 4.0, \"original_max_position_embeddings\": 32768, \"beta_fast\": 16.0,"
                       " \"beta_slow\": 2.0, \"attention_factor\": 1.25, \"mscale\": 0.707, \"mscale_all_dim\": 1.0,"
                       " \"truncate\": false}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_YARN);
    CHECK(c.rope.factor == 4.0);
    CHECK_EQ_INT(c.rope.original_max_position_embeddings, 32768);
    CHECK(c.rope.beta_fast == 16.0 && c.rope.beta_slow == 2.0);
    CHECK(c.rope.attention_factor == 1.25);
    CHECK(c.rope.mscale == 0.707 && c.rope.mscale_all_dim == 1.0);
    CHECK_EQ_INT(c.rope.truncate, 0);
    lmc_config_free(&c);
    /* yarn defaults: beta 32/1, attention_factor absent (< 0), truncate on */
    CHECK_EQ_INT(parse("{\"model_type\": \"qwen2\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", NULL, &c),
                 LMC_OK);
    CHECK(c.rope.beta_fast == 32.0 && c.rope.beta_slow == 1.0);
    CHECK(c.rope.attention_factor < 0);
    CHECK_EQ_INT(c.rope.truncate, 1);
    CHECK_EQ_INT(c.rope.original_max_position_embeddings, 0);
    lmc_config_free(&c);
    /* longrope ("su" is its old name) with factor lists */
    CHECK_EQ_INT(parse("{\"model_type\": \"phi3\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1.0, 1.5, 2.0],"
                       " \"long_factor\": [3, 4.5], \"original_max_position_embeddings\": 4096}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_LONGROPE);
    CHECK_EQ_INT(c.rope.n_short_factor, 3);
    CHECK_EQ_INT(c.rope.n_long_factor, 2);
    CHECK(c.rope.short_factor[2] == 2.0 && c.rope.long_factor[1] == 4.5);
    lmc_config_free(&c);
}

static void test_rope_unknown_and_bad_fields(void) {
    const char *head = "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, ";
    struct { const char *tail; lmc_status st; const char *needle; } cases[] = {
        {"\"rope_scaling\": {\"type\": \"fancy_rope\", \"factor\": 2.0}}", LMC_ERR_UNSUPPORTED, "fancy_rope"},
        {"\"rope_parameters\": {\"rope_type\": \"ntk_magic\"}}", LMC_ERR_UNSUPPORTED, "ntk_magic"},
        {"\"rope_scaling\": {\"type\": 3}}", LMC_ERR_FORMAT, "rope type"},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": \"2\"}}", LMC_ERR_FORMAT, "factor"},
        {"\"rope_scaling\": [1, 2]}", LMC_ERR_FORMAT, "rope"},
        {"\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": -5.0}}", LMC_ERR_FORMAT, "rope_theta"},
        {"\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 0}}", LMC_ERR_FORMAT, "rope_theta"},
        {"\"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0}}", LMC_ERR_FORMAT,
         "partial_rotary_factor"},
        {"\"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 1.5}}", LMC_ERR_FORMAT,
         "partial_rotary_factor"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"original_max_position_embeddings\": -1}}", LMC_ERR_FORMAT,
         "original_max_position_embeddings"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"original_max_position_embeddings\": 8192.5}}", LMC_ERR_FORMAT,
         "original_max_position_embeddings"},
        {"\"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": 1.0}}", LMC_ERR_FORMAT, "short_factor"},
        {"\"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": [1.0, \"x\"]}}", LMC_ERR_FORMAT, "long_factor"},
        {"\"rope_theta\": \"10000\"}", LMC_ERR_FORMAT, "rope_theta"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, "%s%s", head, cases[i].tail);
        lmc_config c;
        lmc_status st = parse(json, NULL, &c);
        CHECK_MSG(st == cases[i].st, "%s: status %d, want %d (%s)", cases[i].tail, st, cases[i].st, lmc_last_error());
        CHECK_MSG(strstr(lmc_last_error(), cases[i].needle) != NULL, "%s: \"%s\" lacks \"%s\"", cases[i].tail,
                  lmc_last_error(), cases[i].needle);
        lmc_config_free(&c);
    }
    /* a longrope list longer than the table holds is refused, not overrun */
    char *json = malloc(16384);
    int n = snprintf(json, 16384, "%s\"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": [", head);
    for (int i = 0; i < LMC_ROPE_MAX_FACTORS; i++) n += snprintf(json + n, (size_t)(16384 - n), "%s1.0", i ? "," : "");
    snprintf(json + n, (size_t)(16384 - n), "]}}");
    lmc_config c;
    CHECK_EQ_INT(parse(json, NULL, &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "too long") != NULL);
    lmc_config_free(&c);
    free(json);
}

/* lmc_rope_config_parse directly: it overlays the dict on what rc holds. */
static void test_rope_config_parse_direct(void) {
    lmc_rope_config rc;
    memset(&rc, 0, sizeof rc);
    rc.theta = 123.0;
    rc.partial_rotary_factor = 0.5;
    rc.factor = 1.0;
    cJSON *o = cJSON_Parse("{\"rope_type\": \"linear\", \"factor\": 6}");
    CHECK_EQ_INT(lmc_rope_config_parse(o, &rc), LMC_OK);
    CHECK_EQ_INT(rc.type, LMC_ROPE_LINEAR);
    CHECK(rc.factor == 6.0 && rc.theta == 123.0 && rc.partial_rotary_factor == 0.5);
    cJSON_Delete(o);
    CHECK_EQ_INT(lmc_rope_config_parse(NULL, &rc), LMC_ERR_FORMAT);
    for (int t = LMC_ROPE_DEFAULT; t <= LMC_ROPE_NONE; t++) CHECK(strcmp(lmc_rope_type_name((lmc_rope_type)t), "?") != 0);
    CHECK_EQ_STR(lmc_rope_type_name(LMC_ROPE_LLAMA3), "llama3");
    CHECK_EQ_STR(lmc_rope_type_name((lmc_rope_type)99), "?");
}

/* ------------------------------------------------------------------ text_config */

static void test_text_config_nested(void) {
    lmc_config c;
    CHECK_EQ_INT(parse("{\"model_type\": \"gemma3\", \"architectures\": [\"Gemma3ForConditionalGeneration\"],"
                       " \"tie_word_embeddings\": true, \"eos_token_id\": [1, 106], \"torch_dtype\": \"float32\","
                       " \"vision_config\": {\"hidden_size\": 1152, \"model_type\": \"siglip_vision_model\"},"
                       " \"text_config\": {\"model_type\": \"gemma3_text\", \"vocab_size\": 262, \"hidden_size\": 40,"
                       " \"intermediate_size\": 80, \"num_hidden_layers\": 3, \"num_attention_heads\": 4,"
                       " \"num_key_value_heads\": 1, \"head_dim\": 16, \"hidden_activation\": \"gelu_pytorch_tanh\","
                       " \"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0, \"sliding_window\": 32,"
                       " \"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": false}}", NULL, &c), LMC_OK);
    CHECK_EQ_STR(c.model_type, "gemma3_text");
    CHECK_EQ_STR(c.outer_model_type, "gemma3");
    CHECK_EQ_STR(c.architecture, "Gemma3ForConditionalGeneration");
    CHECK_EQ_STR(c.torch_dtype, "float32");
    CHECK_EQ_INT(c.hidden_size, 40);     /* not the vision tower's 1152 */
    CHECK_EQ_INT(c.vocab_size, 262);
    CHECK_EQ_INT(c.n_layers, 3);
    CHECK_EQ_INT(c.n_kv_heads, 1);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_EQ_INT(c.sliding_window, 32);
    lmc_profile prof;
    CHECK_EQ_INT(lmc_profile_resolve(&c, &prof), LMC_OK); /* gemma3_text names its activation hidden_activation */
    CHECK_EQ_STR(c.hidden_act, "gelu_pytorch_tanh");
    CHECK(c.rope.theta == 1000000.0);
    CHECK_EQ_INT(c.tie_word_embeddings, 1); /* the outer config's value wins */
    CHECK_EQ_INT(c.n_eos, 2);               /* eos found on the outer config */
    CHECK(has_eos(&c, 1) && has_eos(&c, 106));
    CHECK(c.text != c.raw);
    double d;
    CHECK(lmc_config_double(&c, "rope_local_base_freq", &d) == 1 && d == 10000.0);
    lmc_config_free(&c);
}

/* Keys missing from text_config fall back to the top level; tie only inside text_config still counts. */
static void test_text_config_fallbacks(void) {
    lmc_config c;
    CHECK_EQ_INT(parse("{\"model_type\": \"wrapper\", \"vocab_size\": 99, \"text_config\": {\"model_type\": \"inner\","
                       " \"hidden_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
                       " \"tie_word_embeddings\": true, \"eos_token_id\": 5}, \"eos_token_id\": 7}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.vocab_size, 99);
    CHECK_EQ_INT(c.tie_word_embeddings, 1);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.eos_token_ids[0], 5); /* the text config's eos first */
    lmc_config_free(&c);
    /* text_config: null is a flat config */
    CHECK_EQ_INT(parse("{\"model_type\": \"llama\", \"text_config\": null, \"vocab_size\": 9, \"hidden_size\": 32,"
                       " \"num_hidden_layers\": 1, \"num_attention_heads\": 2}", NULL, &c), LMC_OK);
    CHECK_EQ_STR(c.model_type, "llama");
    CHECK(c.text == c.raw);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse("{\"model_type\": \"llama\", \"text_config\": [1], \"vocab_size\": 9, \"hidden_size\": 32,"
                       " \"num_hidden_layers\": 1, \"num_attention_heads\": 2}", NULL, &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "text_config") != NULL);
    lmc_config_free(&c);
}

/* ------------------------------------------------------------------ heads */

static void test_head_dim(void) {
    lmc_config c;
    CHECK_EQ_INT(parse_base_with("head_dim", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.head_dim, 16);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("head_dim", "null", &c), LMC_OK);
    CHECK_EQ_INT(c.head_dim, 16);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("head_dim", "128", &c), LMC_OK); /* qwen3/gemma: not hidden / heads */
    CHECK_EQ_INT(c.head_dim, 128);
    lmc_config_free(&c);
    expect_base_error("head_dim", "\"16\"", LMC_ERR_FORMAT, "head_dim");
    expect_base_error("head_dim", "0", LMC_ERR_FORMAT, "head_dim");
    expect_base_error("head_dim", "-16", LMC_ERR_FORMAT, "head_dim");
    expect_base_error("head_dim", "16.5", LMC_ERR_FORMAT, "head_dim");
}

static void test_kv_heads(void) {
    lmc_config c;
    CHECK_EQ_INT(parse_base_with("num_key_value_heads", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.n_kv_heads, 4);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("num_key_value_heads", "null", &c), LMC_OK);
    CHECK_EQ_INT(c.n_kv_heads, 4);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("num_key_value_heads", "1", &c), LMC_OK);
    CHECK_EQ_INT(c.n_kv_heads, 1);
    lmc_config_free(&c);
    expect_base_error("num_key_value_heads", "3", LMC_ERR_FORMAT, "not a multiple");
    expect_base_error("num_key_value_heads", "8", LMC_ERR_FORMAT, "num_key_value_heads");
    expect_base_error("num_key_value_heads", "0", LMC_ERR_FORMAT, "num_key_value_heads");
    expect_base_error("num_key_value_heads", "\"2\"", LMC_ERR_FORMAT, "num_key_value_heads");
}

/* ------------------------------------------------------------------ required and typed fields */

static void test_required_fields(void) {
    const char *req[] = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"};
    for (size_t i = 0; i < 4; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "missing \"%s\"", req[i]);
        expect_base_error(req[i], NULL, LMC_ERR_FORMAT, needle);
        expect_base_error(req[i], "null", LMC_ERR_FORMAT, needle);
    }
    expect_base_error("model_type", NULL, LMC_ERR_FORMAT, "model_type");
    expect_base_error("model_type", "\"\"", LMC_ERR_FORMAT, "model_type");
    expect_base_error("model_type", "7", LMC_ERR_FORMAT, "model_type");
    /* the top level itself */
    lmc_config c;
    CHECK_EQ_INT(parse("[1, 2]", NULL, &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "object") != NULL);
    lmc_config_free(&c);
}

static void test_wrong_types_and_ranges(void) {
    const char *ints[] = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                          "intermediate_size", "max_position_embeddings"};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        expect_base_error(ints[i], "\"64\"", LMC_ERR_FORMAT, ints[i]);     /* string where int expected */
        expect_base_error(ints[i], "64.5", LMC_ERR_FORMAT, ints[i]);       /* not an integer */
        expect_base_error(ints[i], "-4", LMC_ERR_FORMAT, ints[i]);         /* negative */
        expect_base_error(ints[i], "0", LMC_ERR_FORMAT, ints[i]);          /* zero */
        expect_base_error(ints[i], "1e15", LMC_ERR_FORMAT, ints[i]);       /* absurdly large */
        expect_base_error(ints[i], "true", LMC_ERR_FORMAT, ints[i]);
        expect_base_error(ints[i], "[64]", LMC_ERR_FORMAT, ints[i]);
    }
    expect_base_error("rms_norm_eps", "\"1e-5\"", LMC_ERR_FORMAT, "epsilon");
    expect_base_error("rms_norm_eps", "-1e-5", LMC_ERR_FORMAT, "epsilon");
    expect_base_error("layer_norm_eps", "\"x\"", LMC_ERR_FORMAT, "epsilon");
    expect_base_error("bos_token_id", "\"<s>\"", LMC_ERR_FORMAT, "bos_token_id");
    expect_base_error("pad_token_id", "1.5", LMC_ERR_FORMAT, "pad_token_id");
    expect_base_error("eos_token_id", "\"</s>\"", LMC_ERR_FORMAT, "eos_token_id");
    expect_base_error("eos_token_id", "-2", LMC_ERR_FORMAT, "token id");
    expect_base_error("eos_token_id", "[2, \"x\"]", LMC_ERR_FORMAT, "eos_token_id");
    expect_base_error("eos_token_id", "[2, -1]", LMC_ERR_FORMAT, "eos_token_id");
    expect_base_error("sliding_window", "\"4096\"", LMC_ERR_FORMAT, "sliding_window");
    /* eps given as layer_norm_eps */
    lmc_config c;
    CHECK_EQ_INT(parse_base_with("layer_norm_eps", "1e-12", &c), LMC_OK);
    CHECK(c.norm_eps == 1e-12);
    lmc_config_free(&c);
}

static void test_sliding_window(void) {
    lmc_config c;
    CHECK_EQ_INT(parse_base_with("sliding_window", "null", &c), LMC_OK);
    CHECK_EQ_INT(c.sliding_window, 0);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("sliding_window", "4096", &c), LMC_OK);
    CHECK_EQ_INT(c.sliding_window, 4096);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("sliding_window", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.sliding_window, 0);
    lmc_config_free(&c);
}

static void test_hidden_act(void) {
    lmc_config c;
    CHECK_EQ_INT(parse_base_with("hidden_act", "\"gelu_new\"", &c), LMC_OK);
    CHECK_EQ_STR(c.hidden_act, "gelu_new");
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("hidden_act", NULL, &c), LMC_OK);
    CHECK_EQ_STR(c.hidden_act, "silu"); /* default */
    lmc_config_free(&c);
    CHECK_EQ_INT(parse("{\"model_type\": \"gemma\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"hidden_activation\": \"gelu_pytorch_tanh\"}", NULL, &c), LMC_OK);
    lmc_profile prof;
    CHECK_EQ_INT(lmc_profile_resolve(&c, &prof), LMC_OK);
    CHECK_EQ_STR(c.hidden_act, "gelu_pytorch_tanh"); /* gemma reads hidden_act, default gelu_pytorch_tanh */
    lmc_config_free(&c);
    CHECK_EQ_INT(parse("{\"model_type\": \"gemma\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"hidden_act\": \"gelu\", \"hidden_activation\": null}", NULL, &c), LMC_OK);
    CHECK_EQ_STR(c.hidden_act, "gelu");
    lmc_config_free(&c);
}

static void test_partial_rotary_top_level(void) {
    lmc_config c;
    CHECK_EQ_INT(parse_base_with("partial_rotary_factor", "0.5", &c), LMC_OK);
    CHECK(c.rope.partial_rotary_factor == 0.5);
    CHECK(c.rope_local.partial_rotary_factor == 0.5);
    lmc_config_free(&c);
}

/* ------------------------------------------------------------------ per-arch knobs */

#define HEAD3 "{\"model_type\": \"x\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 3," \
              " \"num_attention_heads\": 2, "

/* transformers 4 gemma3: rope_local_base_freq gives the sliding layers a default rope at that base. */
static void test_rope_local_base_freq(void) {
    lmc_config c;
    CHECK_EQ_INT(parse(HEAD3 "\"rope_theta\": 1000000.0, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0},"
                       " \"rope_local_base_freq\": 10000.0}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_LINEAR);
    CHECK(c.rope.factor == 8.0 && c.rope.theta == 1000000.0);
    CHECK_EQ_INT(c.rope_local.type, LMC_ROPE_DEFAULT);
    CHECK(c.rope_local.theta == 10000.0);
    lmc_config_free(&c);
    /* with per-layer-type rope_parameters (transformers 5) those win: the full layers keep their dict */
    CHECK_EQ_INT(parse(HEAD3 "\"rope_local_base_freq\": 10000.0, \"rope_parameters\": {\"full_attention\":"
                       " {\"rope_type\": \"linear\", \"factor\": 8.0, \"rope_theta\": 1000000.0}, \"sliding_attention\":"
                       " {\"rope_type\": \"default\", \"rope_theta\": 20000.0}}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_LINEAR);
    CHECK(c.rope.factor == 8.0 && c.rope.theta == 1000000.0);
    CHECK_EQ_INT(c.rope_local.type, LMC_ROPE_DEFAULT);
    CHECK(c.rope_local.theta == 20000.0);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse(HEAD3 "\"rope_local_base_freq\": \"10000\"}", NULL, &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "rope_local_base_freq") != NULL);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse(HEAD3 "\"rope_local_base_freq\": -1}", NULL, &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "rope_local_base_freq") != NULL);
    lmc_config_free(&c);
}

static void test_layer_types(void) {
    lmc_config c;
    CHECK_EQ_INT(parse(HEAD3 "\"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\"],"
                       " \"no_rope_layers\": [1, 0, 1]}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.has_layer_types, 1);
    CHECK(c.layer_sliding[0] == 1 && c.layer_sliding[1] == 0 && c.layer_sliding[2] == 1);
    CHECK(c.layer_nope[0] == 0 && c.layer_nope[1] == 1 && c.layer_nope[2] == 0); /* 0 in the list: no rope */
    lmc_config_free(&c);
    CHECK_EQ_INT(parse(HEAD3 "\"layer_types\": null}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.has_layer_types, 0);
    lmc_config_free(&c);
    struct { const char *tail; lmc_status st; const char *needle; } bad[] = {
        {"\"layer_types\": [\"full_attention\", \"full_attention\"]}", LMC_ERR_FORMAT, "layer_types"},
        {"\"layer_types\": \"full_attention\"}", LMC_ERR_FORMAT, "layer_types"},
        {"\"layer_types\": [\"full_attention\", 1, \"full_attention\"]}", LMC_ERR_FORMAT, "layer_types"},
        {"\"layer_types\": [\"full_attention\", \"chunked_attention\", \"full_attention\"]}", LMC_ERR_UNSUPPORTED,
         "chunked_attention"},
        {"\"no_rope_layers\": [1, 1]}", LMC_ERR_FORMAT, "no_rope_layers"},
        {"\"no_rope_layers\": [1, \"x\", 1]}", LMC_ERR_FORMAT, "no_rope_layers"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, HEAD3 "%s", bad[i].tail);
        lmc_status st = parse(json, NULL, &c);
        CHECK_MSG(st == bad[i].st, "%s: status %d, want %d (%s)", bad[i].tail, st, bad[i].st, lmc_last_error());
        CHECK_MSG(strstr(lmc_last_error(), bad[i].needle) != NULL, "%s: \"%s\" lacks \"%s\"", bad[i].tail,
                  lmc_last_error(), bad[i].needle);
        lmc_config_free(&c);
    }
}

static void test_forward_scalars(void) {
    lmc_config c;
    CHECK_EQ_INT(parse(HEAD3 "\"rms_norm_eps\": 1e-6}", NULL, &c), LMC_OK); /* neutral when absent */
    CHECK(c.attn_scale == 0 && c.attn_softcap == 0 && c.final_softcap == 0);
    CHECK(c.embed_mult == 1 && c.resid_mult == 1 && c.logits_mult == 1);
    CHECK(c.use_qk_norm == -1 && c.use_bias == -1);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse(HEAD3 "\"query_pre_attn_scalar\": 256, \"attn_logit_softcapping\": 50.0,"
                       " \"final_logit_softcapping\": 30.0, \"use_qk_norm\": true, \"use_bias\": false}", NULL, &c), LMC_OK);
    CHECK_NEAR(c.attn_scale, 1.0 / 16, 1e-15);
    CHECK(c.attn_softcap == 50.0 && c.final_softcap == 30.0);
    CHECK(c.use_qk_norm == 1 && c.use_bias == 0);
    lmc_config_free(&c);
    /* granite: multipliers; logits are divided by logits_scaling */
    CHECK_EQ_INT(parse(HEAD3 "\"embedding_multiplier\": 12.0, \"residual_multiplier\": 0.22, \"logits_scaling\": 8.0,"
                       " \"attention_multiplier\": 0.015625}", NULL, &c), LMC_OK);
    CHECK(c.embed_mult == 12.0 && c.resid_mult == 0.22);
    CHECK_NEAR(c.logits_mult, 0.125, 1e-15);
    CHECK(c.attn_scale == 0.015625);
    lmc_config_free(&c);
    /* cohere: logits multiplied by logit_scale */
    CHECK_EQ_INT(parse(HEAD3 "\"logit_scale\": 0.0625, \"layer_norm_eps\": 1e-5}", NULL, &c), LMC_OK);
    CHECK(c.logits_mult == 0.0625);
    CHECK(c.norm_eps == 1e-5);
    lmc_config_free(&c);
    struct { const char *tail; const char *needle; } bad[] = {
        {"\"query_pre_attn_scalar\": -4}", "query_pre_attn_scalar"},
        {"\"query_pre_attn_scalar\": \"256\"}", "query_pre_attn_scalar"},
        {"\"attn_logit_softcapping\": -50.0}", "softcap"},
        {"\"final_logit_softcapping\": \"30\"}", "final_logit_softcapping"},
        {"\"embedding_multiplier\": [12]}", "embedding_multiplier"},
        {"\"logits_scaling\": true}", "logits_scaling"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, HEAD3 "%s", bad[i].tail);
        lmc_status st = parse(json, NULL, &c);
        CHECK_MSG(st == LMC_ERR_FORMAT, "%s: status %d (%s)", bad[i].tail, st, lmc_last_error());
        CHECK_MSG(strstr(lmc_last_error(), bad[i].needle) != NULL, "%s: \"%s\" lacks \"%s\"", bad[i].tail,
                  lmc_last_error(), bad[i].needle);
        lmc_config_free(&c);
    }
}

/* phi3: a top-level original_max_position_embeddings fills the scaling dict's (transformers'
 * standardize_rope_params); it does not turn a default rope into a scaled one. */
static void test_top_level_original_max_pos(void) {
    lmc_config c;
    CHECK_EQ_INT(parse(HEAD3 "\"original_max_position_embeddings\": 4096, \"rope_scaling\": {\"rope_type\": \"yarn\","
                       " \"factor\": 4.0}}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.original_max_position_embeddings, 4096);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse(HEAD3 "\"original_max_position_embeddings\": 4096}", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.rope.type, LMC_ROPE_DEFAULT);
    lmc_config_free(&c);
}

/* ------------------------------------------------------------------ eos / bos / generation_config */

static void test_eos_forms(void) {
    lmc_config c;
    CHECK_EQ_INT(parse_base_with("eos_token_id", "[128001, 128008, 128009, 128008]", &c), LMC_OK);
    CHECK_EQ_INT(c.n_eos, 3); /* duplicates removed */
    CHECK(has_eos(&c, 128001) && has_eos(&c, 128008) && has_eos(&c, 128009));
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("eos_token_id", "null", &c), LMC_OK);
    CHECK_EQ_INT(c.n_eos, 0);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("eos_token_id", "[]", &c), LMC_OK);
    CHECK_EQ_INT(c.n_eos, 0);
    lmc_config_free(&c);
}

static void test_eos_union_with_generation_config(void) {
    lmc_config c;
    /* config: 2; generation_config: [2, 7, 7, 9] → {2, 7, 9} */
    CHECK_EQ_INT(parse(BASE, "{\"eos_token_id\": [2, 7, 7, 9], \"temperature\": 0.6, \"top_p\": 0.9,"
                             " \"top_k\": 20, \"do_sample\": true, \"min_p\": 0.05, \"repetition_penalty\": 1.1}", &c),
                 LMC_OK);
    CHECK_EQ_INT(c.n_eos, 3);
    CHECK(has_eos(&c, 2) && has_eos(&c, 7) && has_eos(&c, 9));
    CHECK_EQ_INT(c.eos_token_ids[0], 2); /* config's own first */
    CHECK_NEAR(c.gen_temperature, 0.6, 1e-12);
    CHECK_NEAR(c.gen_top_p, 0.9, 1e-12);
    CHECK_NEAR(c.gen_min_p, 0.05, 1e-12);
    CHECK_NEAR(c.gen_repetition_penalty, 1.1, 1e-12);
    CHECK_EQ_INT(c.gen_top_k, 20);
    CHECK_EQ_INT(c.gen_do_sample, 1);
    lmc_config_free(&c);
    /* generation_config eos as an int; bos only in generation_config */
    CHECK_EQ_INT(parse("{\"model_type\": \"x\", \"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2}", "{\"eos_token_id\": 3, \"bos_token_id\": 0}", &c), LMC_OK);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.eos_token_ids[0], 3);
    CHECK_EQ_INT(c.bos_token_id, 0);
    lmc_config_free(&c);
    /* config's bos wins over generation_config's */
    CHECK_EQ_INT(parse(BASE, "{\"bos_token_id\": 77}", &c), LMC_OK);
    CHECK_EQ_INT(c.bos_token_id, 1);
    lmc_config_free(&c);
    /* a malformed generation_config eos is an error naming the file */
    CHECK_EQ_INT(parse(BASE, "{\"eos_token_id\": \"eos\"}", &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "generation_config.json") != NULL);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse(BASE, "[]", &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "generation_config.json") != NULL);
    lmc_config_free(&c);
}

static void test_bos(void) {
    lmc_config c;
    CHECK_EQ_INT(parse_base_with("bos_token_id", "128000", &c), LMC_OK);
    CHECK_EQ_INT(c.bos_token_id, 128000);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("bos_token_id", "null", &c), LMC_OK);
    CHECK_EQ_INT(c.bos_token_id, -1);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("bos_token_id", NULL, &c), LMC_OK);
    CHECK_EQ_INT(c.bos_token_id, -1);
    lmc_config_free(&c);
    CHECK_EQ_INT(parse_base_with("pad_token_id", "0", &c), LMC_OK);
    CHECK_EQ_INT(c.pad_token_id, 0);
    lmc_config_free(&c);
}

/* ------------------------------------------------------------------ lmc_config_load */

static char tmp_root[256];

static int write_file(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static void remove_files(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    unlink(p);
    rmdir(dir);
}

static void test_load_dir(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/good", tmp_root);
    CHECK(mkdir(dir, 0700) == 0);
    CHECK(write_file(dir, "config.json", BASE) == 0);
    CHECK(write_file(dir, "generation_config.json", "{\"eos_token_id\": [2, 11], \"top_k\": 5}") == 0);
    lmc_config c;
    CHECK_EQ_INT(lmc_config_load(dir, &c), LMC_OK);
    CHECK_EQ_STR(c.model_type, "llama");
    CHECK_EQ_INT(c.n_eos, 2);
    CHECK(has_eos(&c, 2) && has_eos(&c, 11));
    CHECK_EQ_INT(c.gen_top_k, 5);
    lmc_config_free(&c);
    /* without generation_config.json */
    char p[512];
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    unlink(p);
    CHECK_EQ_INT(lmc_config_load(dir, &c), LMC_OK);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.gen_top_k, -1);
    lmc_config_free(&c);
    remove_files(dir);
}

static void test_load_errors(void) {
    char dir[300];
    lmc_config c;
    /* malformed config.json: FORMAT, names the file */
    snprintf(dir, sizeof dir, "%s/bad_json", tmp_root);
    CHECK(mkdir(dir, 0700) == 0);
    CHECK(write_file(dir, "config.json", "{\"model_type\": \"llama\", \"vocab_size\": 12,\n  \"hidden_size\": }") == 0);
    CHECK_EQ_INT(lmc_config_load(dir, &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "config.json") != NULL);
    CHECK(strstr(lmc_last_error(), "bad_json") != NULL);
    CHECK(strstr(lmc_last_error(), "line 2") != NULL);
    remove_files(dir);
    /* valid JSON, invalid config: the message carries the path and the key */
    snprintf(dir, sizeof dir, "%s/bad_field", tmp_root);
    CHECK(mkdir(dir, 0700) == 0);
    CHECK(write_file(dir, "config.json", "{\"model_type\": \"llama\", \"vocab_size\": 12}") == 0);
    CHECK_EQ_INT(lmc_config_load(dir, &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "bad_field/config.json") != NULL);
    CHECK(strstr(lmc_last_error(), "hidden_size") != NULL);
    CHECK(c.raw == NULL);
    remove_files(dir);
    /* malformed generation_config.json: names that file */
    snprintf(dir, sizeof dir, "%s/bad_gen", tmp_root);
    CHECK(mkdir(dir, 0700) == 0);
    CHECK(write_file(dir, "config.json", BASE) == 0);
    CHECK(write_file(dir, "generation_config.json", "{\"eos_token_id\": [1,,2]}") == 0);
    CHECK_EQ_INT(lmc_config_load(dir, &c), LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "generation_config.json") != NULL);
    remove_files(dir);
    /* no config.json at all */
    snprintf(dir, sizeof dir, "%s/empty", tmp_root);
    CHECK(mkdir(dir, 0700) == 0);
    CHECK_EQ_INT(lmc_config_load(dir, &c), LMC_ERR_NOT_FOUND);
    CHECK(strstr(lmc_last_error(), "config.json") != NULL);
    remove_files(dir);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/lmc_test_config_%d", (int)getpid());
    if (mkdir(tmp_root, 0700) != 0) { perror(tmp_root); printf("RESULT 0 1\n"); return 1; }
    RUN(test_base_fields);
    RUN(test_minimal_defaults);
    RUN(test_rope_parameters_flat);
    RUN(test_rope_parameters_per_layer_type);
    RUN(test_rope_scaling_type);
    RUN(test_rope_scaling_rope_type_llama3);
    RUN(test_rope_yarn_and_longrope_fields);
    RUN(test_rope_unknown_and_bad_fields);
    RUN(test_rope_config_parse_direct);
    RUN(test_text_config_nested);
    RUN(test_text_config_fallbacks);
    RUN(test_head_dim);
    RUN(test_kv_heads);
    RUN(test_required_fields);
    RUN(test_wrong_types_and_ranges);
    RUN(test_sliding_window);
    RUN(test_hidden_act);
    RUN(test_partial_rotary_top_level);
    RUN(test_rope_local_base_freq);
    RUN(test_layer_types);
    RUN(test_forward_scalars);
    RUN(test_top_level_original_max_pos);
    RUN(test_eos_forms);
    RUN(test_eos_union_with_generation_config);
    RUN(test_bos);
    RUN(test_load_dir);
    RUN(test_load_errors);
    rmdir(tmp_root);
    return TEST_END();
}
