/* test_cuda_parity.c — F2 parity of the CUDA backend on every fixture in
 * tests/fixtures/ (DESIGN.md), through the same gate as test_parity
 * (gen/parity.h: one prefill, token-by-token decode, teacher-forced greedy
 * steps, lmc_generate's ids) with the F2 bound LMC_PARITY_F2 · max|ref| and
 * greedy ids equal wherever the reference top-2 gap is clear. Each fixture
 * gets a fresh cuda backend. Set LMC_FIXTURES to use another folder.
 * Without a usable GPU it prints a SKIP line and RESULT 0 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "unit/tiny_model.h"

#include "backend/cuda/cuda_backend.h"
#include "gen/context.h"
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

/* Logits of every position of a one-sequence prefill of ids[0..n) in forwards of n_batch tokens. */
static float *prefill_all(lmc_model *m, const int32_t *ids, int n, int n_batch) {
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n;
    cp.n_batch = n_batch;
    lmc_context *ctx;
    if (lmc_context_init(&ctx, m, &cp) < 0) return NULL;
    int32_t *pos = malloc((size_t)n * 4), *seq = malloc((size_t)n * 4);
    uint8_t *want = malloc((size_t)n);
    float *out = NULL;
    if (pos && seq && want) {
        for (int i = 0; i < n; i++) { pos[i] = i; seq[i] = 0; want[i] = 1; }
        lmc_batch b = {n, ids, pos, seq, want};
        const size_t sz = (size_t)n * m->cfg.vocab_size * sizeof *out;
        if (lmc_context_decode(ctx, &b) == 0 && ctx->n_logits == n && (out = malloc(sz)))
            memcpy(out, lmc_context_logits(ctx, 0), sz);
    }
    free(pos);
    free(seq);
    free(want);
    lmc_context_free(ctx);
    return out;
}

/* A forward longer than LMC_MLP_CHUNK over bf16 weights runs its MLP in passes (forward.c): the fused
 * products over 512 tokens, then a 4-token pass (the decode kernels). Against the same prompt in forwards
 * of 100 tokens (one pass each) on the GPU and in one forward on the CPU backend. */
static void test_mlp_passes(void) {
    char dir[] = "/tmp/lmc-cuda-mlp-XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0); return; }
    tiny_opts o = tiny_default();
    o.bf16 = 1;
    o.max_pos = 1024;
    o.hidden = 64;
    o.inter = 160;
    CHECK(tiny_model_write(dir, &o) == 0);
    lmc_backend *gpu = NULL, *cpu = NULL;
    lmc_model *mg = NULL, *mc = NULL;
    CHECK(lmc_backend_cuda_init(&gpu, 0) == 0 && lmc_backend_cpu_init(&cpu, 2, 0) == 0);
    if (gpu && cpu) {
        CHECK_MSG(lmc_model_load(dir, gpu, &mg) == 0, "%s", lmc_last_error());
        CHECK_MSG(lmc_model_load(dir, cpu, &mc) == 0, "%s", lmc_last_error());
    }
    enum { N = 516 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % o.vocab;
    float *one = mg ? prefill_all(mg, ids, N, 600) : NULL, *parts = mg ? prefill_all(mg, ids, N, 100) : NULL;
    float *ref = mc ? prefill_all(mc, ids, N, 600) : NULL;
    CHECK(one && parts && ref);
    if (one && parts && ref) {
        const size_t sz = (size_t)N * o.vocab;
        double scale = 0, d_parts = 0, d_ref = 0;
        for (size_t i = 0; i < sz; i++) {
            scale = fmax(scale, fabs(ref[i]));
            d_parts = fmax(d_parts, fabs(one[i] - parts[i]));
            d_ref = fmax(d_ref, fabs(one[i] - ref[i]));
        }
        CHECK(scale > 0.5);
        CHECK_MSG(d_parts <= LMC_PARITY_F2 * scale && d_ref <= LMC_PARITY_F2 * scale,
                  "516-token forward vs 100-token forwards %g, vs the CPU %g (max|ref| %g)", d_parts, d_ref, scale);
        fprintf(stderr, "  mlp passes: max|ref| %.3g, vs 100-token forwards %.2e, vs the CPU %.2e\n", scale, d_parts, d_ref);
    }
    free(one);
    free(parts);
    free(ref);
    lmc_model_free(mg);
    lmc_model_free(mc);
    lmc_backend_free(gpu);
    lmc_backend_free(cpu);
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char path[64];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
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
    RUN(test_mlp_passes);
    return TEST_END();
}
