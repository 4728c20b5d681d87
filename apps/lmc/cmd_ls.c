/* cmd_ls.c — `lmc ls` (what is on this machine and whether lmc runs it) and
 * `lmc models` (the supported model_types, from the descriptor table). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "model/artifact.h"
#include "gen/plan.h"
#include "io/hfpath.h"
#include "io/jsonfile.h"

static const char *ls_help =
    "usage: lmc ls [DIR ...]\n"
    "\n"
    "List the models in the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub or\n"
    "~/.cache/huggingface/hub) and in the directories given: repo id, model_type,\n"
    "tier (exact / targeted / generic / drafter / unsupported; changed: a verified snapshot's\n"
    "config.json no longer has its recorded hash), parameters (mixture-of-experts\n"
    "models: total/active per token), bytes, dtype,\n"
    "and whether the weights fit in the memory available now.\n"
    "\n"
    "example:\n"
    "  lmc ls ./models\n";

static void human(double bytes, char *buf, size_t n) {
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (bytes >= 1000 && i < 4) { bytes /= 1000; i++; }
    snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", bytes, u[i]);
}

static int n_listed;

/* One row for a model directory (repo id may be NULL: use the path). */
static void list_one(const char *repo_id, const char *revision, const char *dir, void *ud) {
    (void)ud;
    char name[600];
    if (repo_id) snprintf(name, sizeof name, "%s@%.8s", repo_id, revision);
    else snprintf(name, sizeof name, "%s", dir);
    lmc_config cfg;
    if (lmc_checkpoint_config(dir, &cfg) < 0) {
        printf("%-44s %-16s %-11s %s\n", name, "?", "unsupported", lmc_last_error());
        n_listed++;
        return;
    }
    const char *tier = "unsupported";
    lmc_profile prof = {0};
    size_t len = strlen(cfg.model_type);
    if (len > 10 && !strcmp(cfg.model_type + len - 10, "_assistant")) tier = "drafter";
    else if (lmc_profile_resolve(&cfg, &prof) == 0)
        tier = lmc_artifact_apply(dir, &prof) == 0 ? lmc_tier_name(prof.tier) : "changed";
    lmc_weights *st = NULL;
    char bytes[32] = "?", params[32] = "?", fits[16] = "?";
    const char *dtype = cfg.torch_dtype[0] ? cfg.torch_dtype : "?";
    if (lmc_weights_open(dir, &st) == 0) {
        long long n = 0;
        for (int i = 0; i < lmc_weights_count(st); i++) {
            const lmc_weight *w = lmc_weights_at(st, i);
            size_t len = strlen(w->name);
            if (cfg.quant_bits && len > 7 && (!strcmp(w->name + len - 7, ".scales") || !strcmp(w->name + len - 7, ".biases")))
                continue; /* MLX side data, not parameters */
            long long e = lmc_weight_nelem(w);
            n += w->dtype == LMC_DTYPE_U32 && cfg.quant_bits ? e * 32 / cfg.quant_bits : e; /* packed codes */
        }
        size_t b = lmc_weights_total_bytes(st);
        human((double)b, bytes, sizeof bytes);
        if (n >= 1000000000LL) snprintf(params, sizeof params, "%.2fB", n / 1e9);
        else snprintf(params, sizeof params, "%.1fM", n / 1e6);
        if (prof.arch && prof.arch->moe) {
            /* mixture of experts: total/active (k of E routed experts per token) */
            long long act = n - (long long)lmc_moe_inactive_params(&cfg, prof.arch);
            size_t at = strlen(params);
            if (act >= 1000000000LL) snprintf(params + at, sizeof params - at, "/%.2fB", act / 1e9);
            else snprintf(params + at, sizeof params - at, "/%.1fM", act / 1e6);
        }
        unsigned long long avail = lmc_mem_available();
        if (avail) snprintf(fits, sizeof fits, "%s", b < avail ? "yes" : "no");
        if (lmc_weights_count(st) > 0 && !cfg.torch_dtype[0]) dtype = lmc_dtype_name(lmc_weights_at(st, 0)->dtype);
        if (!strcmp(lmc_weights_format(st), "gguf")) {
            /* the type most of the bytes are stored in */
            size_t best = 0, by[LMC_DTYPE_END] = {0};
            for (int i = 0; i < lmc_weights_count(st); i++) by[lmc_weights_at(st, i)->dtype] += lmc_weights_at(st, i)->nbytes;
            for (int t = 0; t < LMC_DTYPE_END; t++)
                if (by[t] > best) { best = by[t]; dtype = lmc_dtype_name((lmc_dtype)t); }
        }
        lmc_weights_close(st);
    }
    char qname[24];
    if (cfg.quant_bits) {
        if (cfg.quant_mxfp4) snprintf(qname, sizeof qname, "mlx-mxfp4");
        else snprintf(qname, sizeof qname, "mlx%d/g%d", cfg.quant_bits, cfg.quant_group);
        dtype = qname;
    }
    printf("%-44s %-16s %-11s %9s %10s %-9s %s\n", name, cfg.model_type, tier, params, bytes, dtype, fits);
    lmc_config_free(&cfg);
    n_listed++;
}

int cmd_ls(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { fputs(ls_help, stdout); return 0; }
    printf("%-44s %-16s %-11s %9s %10s %-9s %s\n", "MODEL", "MODEL_TYPE", "TIER", "PARAMS", "BYTES", "DTYPE", "FITS");
    char cache[4096];
    const char *which = NULL;
    if (lmc_hfpath_cache_dir(cache, sizeof cache, &which) == 0) lmc_hfpath_scan_cache(list_one, NULL);
    for (int i = 1; i < argc; i++) {
        char cfgp[8400];
        snprintf(cfgp, sizeof cfgp, "%s/config.json", argv[i]);
        FILE *f = fopen(cfgp, "r");
        if (f) { fclose(f); list_one(NULL, NULL, argv[i], NULL); continue; }
        if (lmc_path_is_gguf(argv[i])) { list_one(NULL, NULL, argv[i], NULL); continue; }
        /* a folder of model folders */
        DIR *d = opendir(argv[i]);
        if (!d) { fprintf(stderr, "lmc: cannot open %s\n", argv[i]); continue; }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char sub[4096];
            if (strlen(argv[i]) + strlen(e->d_name) + 16 > sizeof sub) continue;
            snprintf(sub, sizeof sub, "%s/%s", argv[i], e->d_name);
            snprintf(cfgp, sizeof cfgp, "%s/config.json", sub);
            if ((f = fopen(cfgp, "r"))) { fclose(f); list_one(NULL, NULL, sub, NULL); }
        }
        closedir(d);
    }
    if (!n_listed) fprintf(stderr, "lmc: no models found (cache: %s)\n", which ? cache : "none");
    return 0;
}

static const char *models_help =
    "usage: lmc models [--markdown] [--fixtures DIR]\n"
    "\n"
    "List the model_types lmc runs, from its descriptor table, with the parity\n"
    "fixtures (tests/fixtures) that prove each one. --markdown writes docs/MODELS.md's table.\n";

/* Fixture names whose config.json model_type maps (through aliases) to `type`; alias_only 2:
 * any fixture whose (text) model_type is `type`, with or without a descriptor row (targeted
 * ports); a fixture folder without config.json names its sub-folder `target` (a drafter pair). */
static void fixtures_for(const char *root, const char *type, int alias_only, char *out, size_t cap) {
    out[0] = 0;
    DIR *d = opendir(root);
    if (!d) return;
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        if (e->d_name[0] == '.') continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s/config.json", root, e->d_name);
        cJSON *j = NULL;
        if (lmc_json_read_file(p, 1 << 20, &j) < 0) {
            if (alias_only != 2) continue;
            snprintf(p, sizeof p, "%s/%s/target/config.json", root, e->d_name);
            if (lmc_json_read_file(p, 1 << 20, &j) < 0) continue;
        }
        const char *mt = NULL;
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "text_config");
        if (lmc_json_get_string(cJSON_IsObject(tc) ? tc : j, "model_type", &mt) > 0 && mt) {
            const char *from = NULL;
            const lmc_arch *a = lmc_arch_find(mt, &from);
            int match = alias_only == 1 ? (from && !strcmp(mt, type)) : (!strcmp(mt, type));
            if ((a || alias_only == 2) && match) names[n++] = strdup(e->d_name);
        }
        cJSON_Delete(j);
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if (strcmp(names[k], names[i]) < 0) { char *t = names[i]; names[i] = names[k]; names[k] = t; }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(out + at, cap > at ? cap - at : 0, "%s`%s`", i ? ", " : "", names[i]);
        if (w > 0) at += (size_t)w;
        free(names[i]);
    }
}

int cmd_models(int argc, char **argv) {
    int md = 0;
    const char *root = "tests/fixtures";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { fputs(models_help, stdout); return 0; }
        if (!strcmp(argv[i], "--markdown")) md = 1;
        else if (!strcmp(argv[i], "--fixtures") && i + 1 < argc) root = argv[++i];
        else return cli_usage_error("models", "unknown option '%s'", argv[i]);
    }
    if (md) {
        printf("# Supported model types\n\n"
               "Generated by `lmc models --markdown` from the descriptor table (src/model/arch.c) and the parity\n"
               "fixtures in tests/fixtures (each passes F1 against transformers in CI). Do not edit by hand.\n\n"
               "| model_type | tier | fixtures | notes |\n|---|---|---|---|\n");
    }
    for (int i = 0; i < lmc_arch_count(); i++) {
        const lmc_arch *a = lmc_arch_at(i);
        char fx[2048];
        fixtures_for(root, a->model_type, 0, fx, sizeof fx);
        if (a->pending_fixture) {
            if (md) printf("| %s | refused until its fixture exists | — | %s |\n", a->model_type, a->notes);
            else printf("%-14s pending   (refused: implemented, no fixture yet)\n", a->model_type);
            continue;
        }
        if (md) printf("| %s | generic | %s | %s |\n", a->model_type, fx[0] ? fx : "**none — not claimed**", a->notes);
        else printf("%-14s generic   %s\n", a->model_type, fx[0] ? fx : "(no fixture)");
    }
    /* targeted ports: their own forward (src/model/gemma4.c), outranking the table */
    static const struct { const char *type, *tier, *notes; } targeted[] = {
        {"gemma4_text", "targeted", "Gemma 4 port: per-layer head dims and KV heads, proportional rope, q/k/v norms, "
                                    "k_eq_v, per-layer inputs, KV-shared layers, MoE beside the MLP, layer_scalar, "
                                    "final softcap; the text stack of `gemma4` checkpoints"},
        {"gemma4_assistant", "drafter (`--spec mtp --draft DIR`; never run alone)",
         "Gemma 4 MTP assistant: dense tied head and centroid masked head, no KV of its own; assistant GGUF "
         "(`lmc convert`, `lmc verify-gguf`)"},
    };
    for (size_t i = 0; i < sizeof targeted / sizeof targeted[0]; i++) {
        char fx[2048];
        fixtures_for(root, targeted[i].type, 2, fx, sizeof fx);
        if (!fx[0] && !strcmp(targeted[i].type, "gemma4_assistant")) {
            char p[4200];
            snprintf(p, sizeof p, "%s/gemma4_mtp/assistant_dense/config.json", root);
            FILE *f = fopen(p, "r");
            if (f) { fclose(f); snprintf(fx, sizeof fx, "`gemma4_mtp`"); }
        }
        if (md) printf("| %s | %s | %s | %s |\n", targeted[i].type, targeted[i].tier, fx[0] ? fx : "**none — not claimed**",
                       targeted[i].notes);
        else printf("%-14s %-9s %s\n", targeted[i].type, strncmp(targeted[i].tier, "drafter", 7) ? "targeted" : "drafter",
                    fx[0] ? fx : "(no fixture)");
    }
    for (int i = 0;; i++) {
        const char *from, *to;
        if (!lmc_arch_alias_at(i, &from, &to)) break;
        char fx[2048];
        fixtures_for(root, from, 1, fx, sizeof fx);
        if (md) printf("| %s | generic (alias of %s) | %s | as %s |\n", from, to, fx[0] ? fx : "**none — not claimed**", to);
        else printf("%-14s alias of %s   %s\n", from, to, fx[0] ? fx : "(no fixture)");
    }
    return 0;
}
