/* cmd_inspect.c — `lmc inspect MODEL`: tensors, resolved profile and audit. */
#include <string.h>

#include "cli.h"

#include "model/artifact.h"
#include "io/hfpath.h"

static const char *inspect_help =
    "usage: lmc inspect MODEL [--tensors]\n"
    "\n"
    "Show a checkpoint's resolved architecture and profile, its tensors (with\n"
    "--tensors, or when the audit fails), and the weight-audit result.\n"
    "\n"
    "example:\n"
    "  lmc inspect tests/fixtures/qwen2 --tensors\n";

static void print_shape(const lmc_weight *t) {
    printf("[");
    for (int d = 0; d < t->n_dims; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
    printf("]");
}

int cmd_inspect(int argc, char **argv) {
    const char *model = NULL;
    int show_tensors = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { fputs(inspect_help, stdout); return 0; }
        if (!strcmp(argv[i], "--tensors")) show_tensors = 1;
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (argv[i][0] == '-') return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        else if (!model) model = argv[i];
        else return cli_usage_error("inspect", "unexpected argument '%s'", argv[i]);
    }
    if (!model) return cli_usage_error("inspect", "MODEL is required");
    lmc_model_path mp;
    if (lmc_hfpath_resolve(model, &mp) < 0) return cli_error(NULL);
    printf("path:          %s\n", mp.path);
    if (mp.repo_id[0]) printf("repo:          %s@%s\n", mp.repo_id, mp.revision);
    lmc_config cfg;
    if (lmc_checkpoint_config(mp.path, &cfg) < 0) return cli_error(NULL);
    if (strcmp(cfg.model_type, cfg.outer_model_type))
        printf("model_type:    %s (text stack of %s)\n", cfg.model_type, cfg.outer_model_type);
    else
        printf("model_type:    %s\n", cfg.model_type);
    printf("architecture:  %s\n", cfg.architecture[0] ? cfg.architecture : "(not given)");
    printf("shape:         %d layers, hidden %d, %d heads (%d kv) x %d, ffn %d, vocab %d, tied %s\n", cfg.n_layers,
           cfg.hidden_size, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size,
           cfg.tie_word_embeddings ? "yes" : "no");
    if (cfg.n_experts > 0)
        printf("experts:       %d routed (%d per token), expert ffn %d, shared ffn %d (shared experts %d)\n",
               cfg.n_experts, cfg.n_experts_used, cfg.moe_intermediate_size,
               cfg.shared_intermediate_size, cfg.n_shared_experts);
    printf("rope:          %s, theta %g%s\n", lmc_rope_type_name(cfg.rope.type), cfg.rope.theta,
           cfg.sliding_window ? ", sliding window set" : "");
    lmc_profile prof;
    int rc = 0;
    if (lmc_profile_resolve(&cfg, &prof) < 0) {
        printf("profile:       unsupported\n");
        printf("reason:        %s\n", lmc_last_error());
        rc = EXIT_RUNTIME;
    } else if (lmc_artifact_apply(mp.path, &prof) < 0) {
        printf("profile:       refused\n");
        printf("reason:        %s\n", lmc_last_error());
        rc = EXIT_RUNTIME;
    } else {
        printf("profile:       %s (tier %s, graph %s%s%s)\n", prof.id, lmc_tier_name(prof.tier), prof.graph,
               prof.alias_of[0] ? ", alias of " : "", prof.alias_of[0] ? prof.alias_of : "");
        printf("fidelity:      %s\n", prof.fidelity);
    }
    lmc_config_free(&cfg);

    lmc_weights *st = NULL;
    if (lmc_weights_open(mp.path, &st) < 0) return cli_error(NULL);
    printf("tensors:       %d in %d %s file(s), %.1f MB\n", lmc_weights_count(st), lmc_weights_n_files(st),
           lmc_weights_format(st), lmc_weights_total_bytes(st) / 1e6);
    int audit_ok = 0;
    if (rc == 0) {
        lmc_backend *be = NULL;
        lmc_model *m = NULL;
        if (lmc_backend_cpu_init(&be, 1, 0) < 0) { lmc_weights_close(st); return cli_error("backend"); }
        if (lmc_model_load(mp.path, be, &m) < 0) {
            printf("audit:         FAILED: %s\n", lmc_last_error());
            rc = EXIT_RUNTIME;
        } else {
            audit_ok = 1;
            printf("audit:         ok: %d tensors consumed, %d dropped by rule; %lld parameters, %.1f MB bound\n",
                   lmc_weights_count(st) - m->n_audit_dropped, m->n_audit_dropped, (long long)m->n_params,
                   m->weight_bytes / 1e6);
            if (m->moe_layers)
                printf("active:        %lld parameters per token (%d of %d routed experts per sparse layer)\n",
                       (long long)m->n_params_active, m->cfg.n_experts_used, m->cfg.n_experts);
            for (int i = 0; i < lmc_weights_count(st); i++) {
                const char *rule = lmc_model_drop_rule(m, lmc_weights_at(st, i)->name);
                if (rule) printf("  dropped %s: %s\n", lmc_weights_at(st, i)->name, rule);
            }
        }
        lmc_model_free(m);
        lmc_backend_free(be);
    }
    if (show_tensors || !audit_ok) {
        for (int i = 0; i < lmc_weights_count(st); i++) {
            const lmc_weight *t = lmc_weights_at(st, i);
            printf("  %-60s %-5s ", t->name, lmc_dtype_name(t->dtype));
            print_shape(t);
            printf("\n");
        }
    }
    lmc_weights_close(st);
    return rc;
}

static const char *check_help =
    "usage: lmc check MODEL_DIR [--oracle [--python PY] [--record]]\n"
    "\n"
    "The port verdict for a checkpoint: config.json keys lmc does not understand,\n"
    "the profile it would get, and a weight-audit dry run from the headers alone\n"
    "(no weight is read). Exit 0 when lmc would run it, 1 otherwise.\n"
    "\n"
    "  --oracle      also build, with transformers, a tiny random model with every knob\n"
    "                of this config (only the sizes shrink), compute float64 reference\n"
    "                logits and run the F1 parity gate on it; prints the verdict and the\n"
    "                fixture case to add (needs python3 with torch and transformers)\n"
    "  --python PY   the Python to run the oracle with (default python3)\n"
    "  --record      after a passing gate, record this snapshot (ORG/NAME@REV of the HF\n"
    "                cache) with its config.json SHA-256 as an exact-artifact profile: it then\n"
    "                loads as tier exact, and is refused if its config.json changes\n"
    "                (registry: $LMC_ARTIFACTS or ~/.config/lmc/artifacts.json)\n"
    "\n"
    "example:\n"
    "  lmc check ~/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B/snapshots/*/\n"
    "  lmc check Qwen/Qwen3-30B-A3B --oracle\n";

/* config.json keys lmc reads, or knows to be irrelevant to inference. */
static const char *known_keys[] = {
    /* read by the config normalizer and the descriptor table */
    "model_type", "architectures", "torch_dtype", "dtype", "vocab_size", "hidden_size", "intermediate_size",
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
    "rms_norm_eps", "layer_norm_eps", "norm_epsilon", "tie_word_embeddings", "attention_bias", "attention_out_bias", "mlp_bias", "use_bias",
    "hidden_act", "hidden_activation", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "rope_local_base_freq",
    "original_max_position_embeddings", "no_rope_layers", "no_rope_layer_interval", "sliding_window_pattern",
    "query_pre_attn_scalar", "qk_layernorm", "clip_qkv", "attn_logit_softcapping", "final_logit_softcapping", "embedding_multiplier",
    "attention_multiplier", "residual_multiplier", "logits_scaling", "logit_scale", "use_qk_norm",
    "use_bidirectional_attention", "bos_token_id", "eos_token_id", "pad_token_id", "text_config",
    /* mixture of experts (model/moe.c) */
    "num_local_experts", "num_experts", "moe_num_experts", "n_routed_experts", "num_experts_per_tok", "moe_k",
    "moe_topk", "moe_intermediate_size", "n_shared_experts", "moe_num_shared_experts", "shared_expert_intermediate_size",
    "shared_intermediate_size", "norm_topk_prob", "routed_scaling_factor", "n_group", "topk_group",
    "router_jitter_noise", "moe_norm_min", "decoder_sparse_step", "mlp_only_layers", "first_k_dense_replace",
    "moe_layer_interval", "moe_layer_start_index", "moe_layer_end_index", "lm_head_bias",
    "output_router_logits", "router_aux_loss_coef", "router_z_loss_coef", "input_jitter_noise", "topk_method",
    "num_shared_expert", "use_mixed_mlp_moe", "moe_drop_tokens", "moe_random_routing_dropped_token", "num_nextn_predict_layers",
    /* training, tooling and metadata: no effect on the forward */
    "initializer_range", "use_cache", "attention_dropout", "hidden_dropout", "embedding_dropout", "residual_dropout",
    "mlp_dropout", "resid_pdrop", "embd_pdrop", "transformers_version", "pretraining_tp", "_name_or_path",
    "output_attentions", "output_hidden_states", "return_dict", "id2label", "label2id", "problem_type",
    "tokenizer_class", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention",
    "tie_encoder_decoder", "torchscript", "use_return_dict", "cache_implementation", "auto_map",
    "quantization_config", "_attn_implementation_autoset", "keys_to_ignore_at_inference", "base_model_tp_plan",
    "base_model_pp_plan", "bos_token", "eos_token", "pad_token",
};

int cmd_check(int argc, char **argv) {
    const char *model = NULL, *python = "python3";
    int oracle = 0, record = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { fputs(check_help, stdout); return 0; }
        if (!strcmp(argv[i], "--oracle")) { oracle = 1; continue; }
        if (!strcmp(argv[i], "--record")) { record = 1; continue; }
        if (!strcmp(argv[i], "--python")) {
            if (i + 1 >= argc) return cli_usage_error("check", "--python needs a program");
            python = argv[++i];
            continue;
        }
        if (argv[i][0] == '-') return cli_usage_error("check", "unknown option '%s'", argv[i]);
        if (model) return cli_usage_error("check", "unexpected argument '%s'", argv[i]);
        model = argv[i];
    }
    if (!model) return cli_usage_error("check", "MODEL_DIR is required");
    lmc_model_path mp;
    if (lmc_hfpath_resolve(model, &mp) < 0) return cli_error(NULL);
    lmc_config cfg;
    if (lmc_checkpoint_config(mp.path, &cfg) < 0) return cli_error(NULL);
    int n_unknown = 0;
    const cJSON *objs[2] = {cfg.raw, cfg.text != cfg.raw ? cfg.text : NULL};
    for (int o = 0; o < 2; o++) {
        const cJSON *it;
        if (!objs[o]) continue;
        cJSON_ArrayForEach(it, objs[o]) {
            int known = 0;
            for (size_t k = 0; k < sizeof known_keys / sizeof known_keys[0] && !known; k++)
                known = !strcmp(it->string, known_keys[k]);
            if (!known) {
                if (!n_unknown) printf("config keys lmc does not understand (check they do not change the forward):\n");
                printf("  %s%s\n", o ? "text_config." : "", it->string);
                n_unknown++;
            }
        }
    }
    if (!n_unknown) printf("config keys: all understood\n");
    lmc_profile prof, family;
    int rc = 0;
    if (lmc_profile_resolve(&cfg, &prof) < 0) {
        printf("profile: unsupported: %s\n", lmc_last_error());
        rc = EXIT_RUNTIME;
    } else {
        family = prof;
        if (lmc_artifact_apply(mp.path, &prof) < 0) printf("exact-artifact profile: %s\n", lmc_last_error());
        printf("profile: %s (tier %s)\n", prof.id, lmc_tier_name(prof.tier));
        lmc_backend *be = NULL;
        lmc_model *m = NULL;
        if (lmc_backend_cpu_init(&be, 1, 0) < 0) { lmc_config_free(&cfg); return cli_error("backend"); }
        if (lmc_model_load(mp.path, be, &m) < 0) {
            printf("audit: FAILED: %s\n", lmc_last_error());
            rc = EXIT_RUNTIME;
        } else {
            printf("audit: ok (%lld parameters bound, %d tensors dropped by rule)\n", (long long)m->n_params,
                   m->n_audit_dropped);
        }
        lmc_model_free(m);
        lmc_backend_free(be);
    }
    printf("verdict: %s\n", rc == 0 ? (n_unknown ? "runs (review the keys above)" : "runs") : "does not run");
    if (rc != 0)
        printf("to port: add a descriptor row for \"%s\" (src/model/arch.c) and a fixture case (tools/oracle/cases.py, "
               "generated with transformers), then hold it to F1 with the parity test\n", cfg.model_type);
    lmc_config_free(&cfg);
    if (rc == 0 && oracle) rc = cli_check_oracle(mp.path, python);
    if (record) {
        if (rc != 0 || !oracle) {
            fprintf(stderr, "lmc: --record needs --oracle and a passing F1 gate\n");
            return rc ? rc : EXIT_USAGE;
        }
        char reg[4096];
        if (lmc_artifact_record(mp.path, &family, "lmc check --oracle: F1 gate passed at tiny size") < 0 ||
            lmc_artifact_registry_path(reg, sizeof reg) < 0)
            return cli_error("record");
        printf("recorded: %s now runs under an exact-artifact profile (registry %s)\n", model, reg);
    }
    return rc;
}
