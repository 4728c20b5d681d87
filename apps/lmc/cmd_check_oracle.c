/* cmd_check_oracle.c — `lmc check --oracle`: hold a checkpoint's architecture to F1 at tiny size.
 *
 * tools/oracle/make_fixtures.py --from-config builds, with transformers, a tiny random model
 * that keeps every knob of the checkpoint's config.json (only the sizes shrink), and writes
 * it with float64 reference logits as a parity fixture; the library's parity gate
 * (gen/parity.h) then runs it here. Needs python3 with torch and transformers; the
 * fixture folder is kept so that it can be added to tests/fixtures/ with the printed case.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gen/parity.h"

/* tools/oracle of the source tree this binary was built from, unless LMC_ORACLE_DIR says. */
static void oracle_dir(char *out, size_t n) {
    const char *env = getenv("LMC_ORACLE_DIR");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return;
    }
    char demo[1024];
    snprintf(demo, sizeof demo, "%s", cli_demo_model()); /* <tree>/models/demo */
    char *cut = strstr(demo, "models/demo");
    if (cut) *cut = 0;
    snprintf(out, n, "%stools/oracle", cut ? demo : "");
}

/* Run argv, stdout and stderr inherited (quiet: to /dev/null); returns the exit status or -1. */
static int run(char *const argv[], int quiet) {
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (quiet) {
            if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(127);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int cli_check_oracle(const char *model_dir, const char *python) {
    char tools[1200], script[1300], config[1200], tmp[] = "/tmp/lmc-oracle-XXXXXX", fixture[64];
    oracle_dir(tools, sizeof tools);
    snprintf(script, sizeof script, "%s/make_fixtures.py", tools);
    snprintf(config, sizeof config, "%s/config.json", model_dir);
    struct stat sb;
    if (stat(script, &sb) != 0) {
        fprintf(stderr, "lmc: --oracle needs lmc's tools/oracle (not found at %s; set LMC_ORACLE_DIR)\n", tools);
        return EXIT_RUNTIME;
    }
    char *probe[] = {(char *)python, "-c", "import torch, transformers", NULL};
    if (run(probe, 1) != 0) {
        fprintf(stderr, "lmc: --oracle needs %s with torch and transformers installed (pip install torch "
                        "transformers); `%s -c \"import torch, transformers\"` failed\n", python, python);
        return EXIT_RUNTIME;
    }
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "lmc: cannot create a folder under /tmp\n");
        return EXIT_RUNTIME;
    }
    printf("oracle: building a tiny %s with transformers (fixture in %s/candidate)\n", config, tmp);
    char *gen[] = {(char *)python, script, "--from-config", config, "--out", tmp, NULL};
    const int grc = run(gen, 0); /* non-zero also when only the independent cross-check is missing */
    snprintf(fixture, sizeof fixture, "%s/candidate", tmp);
    char ref[128];
    snprintf(ref, sizeof ref, "%s/ref.json", fixture);
    if (stat(ref, &sb) != 0) {
        fprintf(stderr, "lmc: the oracle wrote no fixture (exit %d): transformers could not build or run this "
                        "config at tiny size; see its output above\n", grc);
        return EXIT_RUNTIME;
    }
    lmc_backend *be;
    if (lmc_backend_cpu_init(&be, 0, 0) < 0) return cli_error("backend");
    lmc_parity_report r;
    const lmc_status st = lmc_parity_check(fixture, be, LMC_PARITY_F1, &r);
    lmc_backend_free(be);
    if (st < 0) {
        printf("F1 gate: does not run: %s\n", lmc_last_error());
        return EXIT_RUNTIME;
    }
    printf("F1 gate: %s — max |Δ| prefill %.2e, decode %.2e, greedy %.2e (tolerance %.2e); %d/%d greedy ids "
           "checked%s%s\n", r.pass ? "pass" : "FAIL", r.e_prefill, r.e_decode, r.e_greedy, r.tol, r.gated,
           r.n_greedy, r.pass ? "" : ": ", r.why);
    printf("to keep it: copy %s to tests/fixtures/<name>/ and add the case entry printed above to "
           "tools/oracle/cases.py\n", fixture);
    return r.pass ? 0 : EXIT_RUNTIME;
}
