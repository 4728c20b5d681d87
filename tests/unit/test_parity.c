/* test_parity.c — F1 parity on every fixture in tests/fixtures/ (DESIGN.md).
 *
 * Each fixture holds a tiny checkpoint written by tools/oracle/ from
 * transformers, with float64 reference logits. For each one, on the CPU
 * (fast kernels, 2 threads) in f32:
 *   - prompt logits at every position, through one prefill and through
 *     token-by-token decode with the KV cache:  max|Δ| ≤ 1e-4 · max|ref|;
 *   - greedy steps (teacher-forced on the reference ids): per-step logits
 *     within the same bound, and our argmax equal to the reference id
 *     wherever the reference top-2 gap is ≥ 1e-3;
 *   - lmc_generate greedy reproduces the reference ids.
 * The gate itself is the library's (gen/parity.h), shared with the CUDA parity test and
 * `lmc check --oracle`. Set LMC_FIXTURES to use another folder. */
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "gen/parity.h"

static int n_fixtures;

static void check_fixture(const char *dir) {
    lmc_backend *be;
    CHECK(lmc_backend_cpu_init(&be, 2, 0) == 0);
    lmc_parity_report r;
    const lmc_status st = lmc_parity_check(dir, be, LMC_PARITY_F1, &r);
    lmc_backend_free(be);
    CHECK_MSG(st == 0, "%s: %s", dir, lmc_last_error());
    if (st < 0) return;
    n_fixtures++;
    CHECK_MSG(r.pass, "%s: %s", dir, r.why);
    const char *name = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    if (r.decode_checked)
        fprintf(stderr, "  %-28s prompt %2d, greedy %d (gated %d): max err prefill %.2e decode %.2e greedy %.2e "
                        "(tol %.2e)%s\n", name, r.n_prompt, r.n_greedy, r.gated, r.e_prefill, r.e_decode, r.e_greedy,
                r.tol, r.generate_checked ? "" : " (generate not checked)");
    else
        fprintf(stderr, "  %-28s prompt %2d, greedy %d (gated %d): max err prefill %.2e greedy %.2e as full forwards "
                        "(dynamic rope) (tol %.2e)\n", name, r.n_prompt, r.n_greedy, r.gated, r.e_prefill, r.e_greedy,
                r.tol);
}

/* The gate must fail a fixture whose reference was nudged: one greedy logit moved by 10·tol. */
static void gate_catches_a_nudge(void) {
    const char *src = "tests/fixtures/llama";
    char tmp[] = "/tmp/lmc-parity-XXXXXX", cmd[3200];
    if (!mkdtemp(tmp)) { CHECK_MSG(0, "mkdtemp"); return; }
    snprintf(cmd, sizeof cmd, "cp %s/* %s/", src, tmp);
    CHECK(system(cmd) == 0);
    lmc_backend *be;
    CHECK(lmc_backend_cpu_init(&be, 1, 0) == 0);
    lmc_parity_report r;
    CHECK(lmc_parity_check(tmp, be, LMC_PARITY_F1, &r) == 0);
    CHECK_MSG(r.pass, "the untouched copy passes: %s", r.why);
    char path[1100];
    snprintf(path, sizeof path, "%s/greedy_logits.bin", tmp);
    FILE *f = fopen(path, "r+b");
    double v;
    CHECK(f && fseek(f, 8 * 77, SEEK_SET) == 0 && fread(&v, 8, 1, f) == 1);
    v += 10 * r.tol;
    CHECK(f && fseek(f, 8 * 77, SEEK_SET) == 0 && fwrite(&v, 8, 1, f) == 1);
    if (f) fclose(f);
    CHECK(lmc_parity_check(tmp, be, LMC_PARITY_F1, &r) == 0);
    CHECK_MSG(!r.pass && strstr(r.why, "greedy-step logits"), "a nudged reference is caught (%s)", r.why);
    lmc_backend_free(be);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
}

int main(void) {
    const char *root = getenv("LMC_FIXTURES") ? getenv("LMC_FIXTURES") : "tests/fixtures";
    char **names;
    const int n = lmc_parity_list(root, &names);
    if (n < 0) { fprintf(stderr, "%s\n", lmc_last_error()); printf("RESULT 0 1\n"); return 1; }
    for (int i = 0; i < n; i++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        test_cur_failed_ = 0;
        check_fixture(dir);
        if (test_cur_failed_) { test_failed_++; fprintf(stderr, "FAIL %s\n", names[i]); } else test_passed_++;
    }
    lmc_parity_list_free(names, n);
    test_cur_failed_ = 0;
    gate_catches_a_nudge();
    if (test_cur_failed_) { test_failed_++; fprintf(stderr, "FAIL gate_catches_a_nudge\n"); } else test_passed_++;
    if (n_fixtures == 0) { fprintf(stderr, "no fixtures found under %s\n", root); test_failed_++; }
    return TEST_END();
}
