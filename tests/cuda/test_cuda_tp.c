/* test_cuda_tp.c — tensor parallelism over CUDA devices (issue 12) against the float64
 * references of tests/fixtures/: every fixture that splits in two runs at --tp 2 on
 * devices 0 and 1 through the parity gate (gen/parity.h) at F2 with greedy ids equal,
 * once with the NCCL all-reduce and once with the host all-reduce, and at --tp 1 through
 * the same tensor-parallel context. Fixtures whose shape does not split are counted as
 * refused (the refusal must name the reason). Needs two GPUs: with fewer it prints a
 * SKIP line and RESULT 0 0. Set LMC_FIXTURES to use another folder.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "backend/cuda/cuda_backend.h"
#include "gen/parity.h"
#include "gen/tp_context.h"

static int n_run[3], n_refused[3];

static void check_fixture(const char *dir, const char *name) {
    static const struct { int ranks, host_reduce; const char *what; } runs[] = {
        {1, 0, "tp 1"}, {2, 0, "tp 2 nccl"}, {2, 1, "tp 2 host all-reduce"}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        lmc_tp_params tp = lmc_tp_default_params();
        tp.n_ranks = runs[k].ranks;
        tp.backend = "cuda";
        tp.host_reduce = runs[k].host_reduce;
        lmc_parity_report r;
        const lmc_status st = lmc_parity_check_tp(dir, &tp, LMC_PARITY_F2, &r);
        if (st == LMC_ERR_UNSUPPORTED) {
            n_refused[k]++;
            fprintf(stderr, "  %-28s %s refused: %s\n", name, runs[k].what, lmc_last_error());
            continue;
        }
        CHECK_MSG(st == 0, "%s %s: %s", name, runs[k].what, lmc_last_error());
        if (st < 0) continue;
        n_run[k]++;
        CHECK_MSG(r.pass, "%s %s: %s", name, runs[k].what, r.why);
        fprintf(stderr, "  %-28s %-22s max err prefill %.2e decode %.2e greedy %.2e (tol %.2e, gated %d)\n", name,
                runs[k].what, r.e_prefill, r.e_decode, r.e_greedy, r.tol, r.gated);
    }
}

int main(void) {
    lmc_backend *probe[2] = {NULL, NULL};
    for (int d = 0; d < 2; d++) {
        if (lmc_backend_cuda_init(&probe[d], d) < 0) {
            printf("SKIP test_cuda_tp: needs two CUDA devices (device %d: %s)\n", d, lmc_last_error());
            lmc_backend_free(probe[0]);
            printf("RESULT 0 0\n");
            return 0;
        }
    }
    lmc_backend_free(probe[0]);
    lmc_backend_free(probe[1]);
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
    fprintf(stderr, "tp 1: %d run, %d refused; tp 2 nccl: %d run, %d refused; tp 2 host: %d run, %d refused\n",
            n_run[0], n_refused[0], n_run[1], n_refused[1], n_run[2], n_refused[2]);
    CHECK_MSG(n_run[1] > 0, "no fixture ran at tp 2");
    return TEST_END();
}
