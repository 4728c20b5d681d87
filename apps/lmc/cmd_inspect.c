/* cmd_inspect.c — `lmc inspect MODEL`: tensors, resolved profile and audit. */
#include <string.h>

#include "cli.h"
#include "io/hfpath.h"

static const char *inspect_help =
    "usage: lmc inspect MODEL [--tensors]\n"
    "\n"
    "Show a checkpoint's resolved architecture and profile, its tensors (with\n"
    "--tensors, or when the audit fails), and the weight-audit result.\n"
    "\n"
    "example:\n"
    "  lmc inspect tests/fixtures/qwen2 --tensors\n";

static void print_shape(const lmc_st_tensor *t) {
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
    if (lmc_config_load(mp.path, &cfg) < 0) return cli_error(NULL);
    printf("model_type:    %s%s%s\n", cfg.model_type, strcmp(cfg.model_type, cfg.outer_model_type) ? " (inside " : "",
           strcmp(cfg.model_type, cfg.outer_model_type) ? cfg.outer_model_type : "");
    if (strcmp(cfg.model_type, cfg.outer_model_type)) printf(")\n");
    printf("architecture:  %s\n", cfg.architecture[0] ? cfg.architecture : "(not given)");
    printf("shape:         %d layers, hidden %d, %d heads (%d kv) x %d, ffn %d, vocab %d, tied %s\n", cfg.n_layers,
           cfg.hidden_size, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size,
           cfg.tie_word_embeddings ? "yes" : "no");
    printf("rope:          %s, theta %g%s\n", lmc_rope_type_name(cfg.rope.type), cfg.rope.theta,
           cfg.sliding_window ? ", sliding window set" : "");
    lmc_profile prof;
    int rc = 0;
    if (lmc_profile_resolve(&cfg, &prof) < 0) {
        printf("profile:       unsupported\n");
        printf("reason:        %s\n", lmc_last_error());
        rc = EXIT_RUNTIME;
    } else {
        printf("profile:       %s (tier %s, graph %s%s%s)\n", prof.id, lmc_tier_name(prof.tier), prof.graph,
               prof.alias_of[0] ? ", alias of " : "", prof.alias_of[0] ? prof.alias_of : "");
        printf("fidelity:      %s\n", prof.fidelity);
    }
    lmc_config_free(&cfg);

    lmc_st_set *st = NULL;
    if (lmc_st_open(mp.path, &st) < 0) return cli_error(NULL);
    printf("tensors:       %d in %d file(s), %.1f MB\n", lmc_st_count(st), lmc_st_shard_count(st),
           lmc_st_total_bytes(st) / 1e6);
    int audit_ok = 0;
    if (rc == 0) {
        lmc_backend *be = NULL;
        lmc_model *m = NULL;
        if (lmc_backend_cpu_init(&be, 1, 0) < 0) { lmc_st_close(st); return cli_error("backend"); }
        if (lmc_model_load(mp.path, be, &m) < 0) {
            printf("audit:         FAILED: %s\n", lmc_last_error());
            rc = EXIT_RUNTIME;
        } else {
            audit_ok = 1;
            printf("audit:         ok: %d tensors consumed, %d dropped by rule; %lld parameters, %.1f MB bound\n",
                   lmc_st_count(st) - m->n_audit_dropped, m->n_audit_dropped, (long long)m->n_params,
                   m->weight_bytes / 1e6);
            for (int i = 0; i < lmc_st_count(st); i++) {
                const char *rule = lmc_model_drop_rule(m, lmc_st_at(st, i)->name);
                if (rule) printf("  dropped %s: %s\n", lmc_st_at(st, i)->name, rule);
            }
        }
        lmc_model_free(m);
        lmc_backend_free(be);
    }
    if (show_tensors || !audit_ok) {
        for (int i = 0; i < lmc_st_count(st); i++) {
            const lmc_st_tensor *t = lmc_st_at(st, i);
            printf("  %-60s %-5s ", t->name, lmc_dtype_name(t->dtype));
            print_shape(t);
            printf("\n");
        }
    }
    lmc_st_close(st);
    return rc;
}
