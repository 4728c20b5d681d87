/* fuzz_config.c — fuzz target: config.json normalization.
 *
 * The input is config.json text, optionally followed by "\n--gen--\n" and
 * generation_config.json text. Both are parsed as lmc_config_load parses them, then the
 * config goes the way lmc_model_load takes it before any weight is read:
 * lmc_config_from_json → lmc_profile_resolve → lmc_act_from_name → both rope tables.
 * Invariants: a config that normalizes has positive sizes within its limits and its
 * per-layer tables stay inside LMC_MAX_LAYERS.
 */
#include <stdint.h>

#include "fuzz.h"
#include "io/jsonfile.h"
#include "model/arch.h"
#include "model/config.h"
#include "model/rope.h"

int fuzz_config(const uint8_t *d, size_t n) {
    const uint8_t *gen_text;
    size_t head, gen_n;
    int has_gen = fuzz_split(d, n, "\n--gen--\n", &head, &gen_text, &gen_n);
    cJSON *raw = NULL, *gen = NULL;
    if (lmc_json_parse((const char *)d, head, "config.json", &raw) < 0) return 0;
    if (has_gen && lmc_json_parse((const char *)gen_text, gen_n, "generation_config.json", &gen) < 0) {
        cJSON_Delete(raw);
        return 0;
    }
    static lmc_config cfg; /* large (per-layer tables): not on the stack */
    lmc_status st = lmc_config_from_json(raw, gen, &cfg);
    cJSON_Delete(gen);
    if (st >= 0) {
        FUZZ_CHECK(cfg.vocab_size > 0 && cfg.hidden_size > 0 && cfg.n_heads > 0 && cfg.n_kv_heads > 0);
        FUZZ_CHECK(cfg.n_layers > 0 && cfg.n_layers <= LMC_MAX_LAYERS);
        FUZZ_CHECK(cfg.n_eos >= 0 && cfg.n_eos <= LMC_MAX_EOS);
        FUZZ_CHECK(cfg.rope.n_short_factor >= 0 && cfg.rope.n_short_factor <= LMC_ROPE_MAX_FACTORS / 2);
        FUZZ_CHECK(cfg.rope.n_long_factor >= 0 && cfg.rope.n_long_factor <= LMC_ROPE_MAX_FACTORS / 2);
        FUZZ_CHECK(memchr(cfg.model_type, 0, sizeof cfg.model_type) != NULL);
        lmc_profile prof;
        lmc_act act;
        static lmc_rope_table rt;
        if (lmc_profile_resolve(&cfg, &prof) >= 0 && lmc_act_from_name(cfg.hidden_act, &act) >= 0) {
            FUZZ_CHECK(prof.tier != LMC_TIER_UNSUPPORTED);
            if (lmc_rope_build(&cfg.rope, cfg.head_dim, cfg.max_position_embeddings, &rt) >= 0)
                FUZZ_CHECK(rt.n_rot >= 0 && rt.n_rot / 2 <= LMC_ROPE_MAX_HALF);
            if (lmc_rope_build(&cfg.rope_local, cfg.head_dim, cfg.max_position_embeddings, &rt) >= 0)
                FUZZ_CHECK(rt.n_rot >= 0 && rt.n_rot / 2 <= LMC_ROPE_MAX_HALF);
        }
    }
    lmc_config_free(&cfg);
    return 0;
}

#ifdef LMC_FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return fuzz_config(d, n); }
#endif
