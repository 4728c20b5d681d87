/* test_cuda_parity.c — F2 parity of the CUDA backend on every fixture in
 * tests/fixtures/ (DESIGN.md), through the same gate as test_parity
 * (gen/parity.h: one prefill, token-by-token decode, teacher-forced greedy
 * steps, lmc_generate's ids) with the F2 bound LMC_PARITY_F2 · max|ref| and
 * greedy ids equal wherever the reference top-2 gap is clear. Each fixture
 * gets a fresh cuda backend. Set LMC_FIXTURES to use another folder.
 * Without a usable GPU it prints a SKIP line and RESULT 0 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "backend/cuda/cuda_backend.h"
#include "gen/parity.h"

static void check_fixture(const char *dir, const char *name) {
    lmc_backend *be = NULL;
    if (lmc_backend_cuda_init(&be, 0) < 0) {
        CHECK_MSG(0, "%s: %s", name, lmc_last_error());
        return;
    }
    lmc_parity_report r;
    memset(&r, 0, sizeof r);
    lmc_status st = lmc_parity_check(dir, be, LMC_PARITY_F2, &r);
    CHECK_MSG(st == 0, "%s: %s", name, lmc_last_error());
    if (st == 0) {
        CHECK_MSG(r.pass, "%s: %s", name, r.why);
        fprintf(stderr, "  %-28s prompt %2d, greedy %d (gated %d): max err prefill %.2e decode %.2e greedy %.2e "
                        "(tol %.2e)%s\n", name, r.n_prompt, r.n_greedy, r.gated, r.e_prefill, r.e_decode, r.e_greedy,
                r.tol, r.generate_checked ? (r.generate_same ? ", generate ids same" : ", generate ids DIFFER") : "");
    }
    lmc_backend_free(be);
}

int main(void) {
    lmc_backend *probe;
    if (lmc_backend_cuda_init(&probe, 0) < 0) {
        printf("SKIP test_cuda_parity: %s\n", lmc_last_error());
        printf("RESULT 0 0\n");
        return 0;
    }
    lmc_backend_free(probe);
    const char *root = getenv("LMC_FIXTURES") ? getenv("LMC_FIXTURES") : "tests/fixtures";
    char **names;
    const int n = lmc_parity_list(root, &names);
    if (n < 0) { fprintf(stderr, "%s\n", lmc_last_error()); printf("RESULT 0 1\n"); return 1; }
    for (int i = 0; i < n; i++) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        test_cur_failed_ = 0;
        check_fixture(dir, names[i]);
        if (test_cur_failed_) { test_failed_++; fprintf(stderr, "FAIL %s\n", names[i]); } else test_passed_++;
    }
    lmc_parity_list_free(names, n);
    if (n == 0) { fprintf(stderr, "no fixtures found under %s\n", root); test_failed_++; }
    return TEST_END();
}
