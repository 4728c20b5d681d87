/* test_cuda_moe.c — the CUDA backend's mixture-of-experts ops against the scalar CPU reference
 * (lmc_backend_cpu_init(&be, 1, 1)): moe_route, matmul_id and moe_sum on the host path and on
 * the device path (cuda_moe_dev.cu: routing, grouping and grouped products without a host round
 * trip), and gpt-oss's expert ops (add_bias_id, glu_clamp, glu_clamp_split), F2 bounds as test_cuda_ops.c. Without a usable GPU it prints a SKIP line and RESULT 0 0.
 */
#include "cuda_test_pair.h"

static void test_moe(void) {
    const int E = 8, k = 2, n = 5;
    /* routing: every score kind */
    const lmc_moe_route_op ops[] = {
        {.score = LMC_MOE_SOFTMAX, .n_expert = E, .k = k, .norm = 1, .scale = 1.0f},
        {.score = LMC_MOE_SIGMOID, .n_expert = E, .k = k, .norm = 1, .norm_eps = 1e-20f, .n_group = 4, .topk_group = 2,
         .scale = 2.5f},
        {.score = LMC_MOE_SPARSEMIXER, .n_expert = E, .k = 2, .jitter = 0.01f, .scale = 1.0f},
    };
    for (int oi = 0; oi < 3; oi++) {
        pair logits, bias, ids, w;
        pair_f32(&logits, E, n, 1, 3.0f);
        pair_f32(&bias, E, 1, 1, 0.5f);
        pair_alloc(&ids, LMC_DTYPE_I32, k, n, 1);
        pair_alloc(&w, LMC_DTYPE_F32, k, n, 1);
        const lmc_tensor *bc = oi == 1 ? &bias.c : NULL, *bg = oi == 1 ? &bias.g : NULL;
        ref->i->moe_route(ref, &ids.c, &w.c, &logits.c, bc, &ops[oi]);
        gpu->i->moe_route(gpu, &ids.g, &w.g, &logits.g, bg, &ops[oi]);
        compare_i32(&ids, "moe_route ids");
        compare(&w, 1e-6, "moe_route weights");
        pair_free(&logits);
        pair_free(&bias);
        pair_free(&ids);
        pair_free(&w);
    }
    /* grouped expert matmul: q8_0 and bf16 experts, shared and per-slot inputs, decode and prefill sizes */
    const lmc_dtype types[] = {LMC_DTYPE_Q8_0, LMC_DTYPE_BF16, LMC_DTYPE_Q4_K};
    const int ns[] = {1, 3, 20};
    for (int ti = 0; ti < 3; ti++) {
        weight ex[8];
        lmc_tensor ec[8], eg[8];
        for (int e = 0; e < E; e++) {
            weight_make(&ex[e], types[ti], 256, 48);
            ec[e] = ex[e].c;
            eg[e] = ex[e].g;
        }
        for (int ni = 0; ni < 3; ni++) {
            const int nt = ns[ni];
            int32_t idv[40];
            for (int s = 0; s < k * nt; s++) idv[s] = (s * 5 + s / 3) % 7; /* expert 7 never chosen */
            pair ids, x, xs, y;
            pair_expert_ids(&ids, idv, k, nt);
            pair_f32(&x, 256, nt, 1, 1.0f);
            pair_f32(&xs, 256, k * nt, 1, 1.0f);
            pair_alloc(&y, LMC_DTYPE_F32, 48, k * nt, 1);
            const double tol = matmul_tol(types[ti], 256, 48, nt);
            ref->i->matmul_id(ref, &y.c, ec, E, &x.c, &ids.c);
            gpu->i->matmul_id(gpu, &y.g, eg, E, &x.g, &ids.g);
            compare(&y, tol, "matmul_id shared input");
            ref->i->matmul_id(ref, &y.c, ec, E, &xs.c, &ids.c);
            gpu->i->matmul_id(gpu, &y.g, eg, E, &xs.g, &ids.g);
            compare(&y, tol, "matmul_id per-slot input");
            pair_free(&ids);
            pair_free(&x);
            pair_free(&xs);
            pair_free(&y);
        }
        for (int e = 0; e < E; e++) weight_free(&ex[e]);
    }
    /* weighted sum with and without a gated shared expert (y aliasing shared) */
    pair x, w, sh, g, y;
    pair_f32(&x, 96, k, n, 1.0f);
    pair_f32(&w, k, n, 1, 1.0f);
    pair_f32(&sh, 96, n, 1, 1.0f);
    pair_f32(&g, 1, n, 1, 2.0f);
    pair_alloc(&y, LMC_DTYPE_F32, 96, n, 1);
    lmc_tensor x2c = lmc_tensor_reshape(&x.c, 96, k * n, 1, 1), x2g = lmc_tensor_reshape(&x.g, 96, k * n, 1, 1);
    ref->i->moe_sum(ref, &y.c, &x2c, &w.c, NULL, NULL);
    gpu->i->moe_sum(gpu, &y.g, &x2g, &w.g, NULL, NULL);
    compare(&y, 1e-6, "moe_sum");
    ref->i->moe_sum(ref, &sh.c, &x2c, &w.c, &sh.c, &g.c);
    gpu->i->moe_sum(gpu, &sh.g, &x2g, &w.g, &sh.g, &g.g);
    compare(&sh, 1e-6, "moe_sum shared gated, in place");
    pair *all[] = {&x, &w, &sh, &g, &y};
    for (int i = 0; i < 5; i++) pair_free(all[i]);
}

/* ==== MoE on the device (cuda_moe_dev.cu): routing, grouping and grouped products ====
 * Routing: every score kind and option (bias, groups, norm floor, scale) for k = 1..8 over
 * E = 8..256 experts and 37 tokens, ids equal to the CPU's and weights within 1e-6.
 * matmul_id: 128 experts of every dtype kind (f32, f16, bf16, Q8_0, Q4_0, MXFP4 of both layouts in
 * their device form (1e-4: exact weights, so the device path must have taken them), and Q4_K/Q6_K
 * through the generic loader), k = 1..8, n = 1..64 tokens (slots grouped in the product's blocks up to 64,
 * by the sort kernel above), skewed loads that leave most experts without a slot, shared and
 * per-slot inputs; the same against the host path (LMC_CUDA_MOE_HOST=1) and past the device
 * path's slot limit. A recorded route + matmul_id replays on new logits: the ids are read on the
 * device (a host round trip cannot be recorded). */
/* The gpt-oss expert ops: per-expert biases after matmul_id and the clamped GLU over interleaved
 * gate/up pairs (values past ±limit), decode and prefill sizes. */
static void test_glu_bias(void) {
    const int D = 96, E = 6, k = 2;
    const int ns[] = {1, 37};
    for (int ni = 0; ni < 2; ni++) {
        const int n = ns[ni];
        int32_t idv[80];
        for (int s = 0; s < k * n; s++) idv[s] = (s * 5 + s / 3) % E;
        pair ids, b, y, g;
        pair_expert_ids(&ids, idv, k, n);
        pair_f32(&b, 2 * D, E, 1, 1.0f);
        pair_f32(&y, 2 * D, k * n, 1, 12.0f);
        pair_alloc(&g, LMC_DTYPE_F32, D, k * n, 1);
        ref->i->add_bias_id(ref, &y.c, &b.c, &ids.c);
        gpu->i->add_bias_id(gpu, &y.g, &b.g, &ids.g);
        compare(&y, 1e-6, "add_bias_id");
        ref->i->glu_clamp(ref, &g.c, &y.c, 1.702f, 7.0f);
        gpu->i->glu_clamp(gpu, &g.g, &y.g, 1.702f, 7.0f);
        compare(&g, 1e-5, "glu_clamp");
        pair_free(&ids);
        pair_free(&b);
        pair_free(&y);
        pair_free(&g);
    }
}

static void moe_route_case(int E, int k, lmc_moe_route_op op, int with_bias, int n) {
    op.n_expert = E;
    op.k = k;
    pair logits, bias, es, ids, w;
    pair_f32(&logits, E, n, 1, 4.0f);
    pair_f32(&bias, E, 1, 1, 0.3f);
    pair_f32(&es, E, 1, 1, 2.0f);
    pair_alloc(&ids, LMC_DTYPE_I32, k, n, 1);
    pair_alloc(&w, LMC_DTYPE_F32, k, n, 1);
    const lmc_tensor *bc = with_bias ? &bias.c : NULL, *bg = with_bias ? &bias.g : NULL;
    /* as given, then with a factor per expert (gemma4's per_expert_scale) */
    for (int pass = 0; pass < 2; pass++) {
        lmc_moe_route_op oc = op, og = op;
        oc.expert_scale = pass ? &es.c : NULL;
        og.expert_scale = pass ? &es.g : NULL;
        ref->i->moe_route(ref, &ids.c, &w.c, &logits.c, bc, &oc);
        gpu->i->moe_route(gpu, &ids.g, &w.g, &logits.g, bg, &og);
        char what[112];
        snprintf(what, sizeof what, "moe_route score %d E %d k %d groups %d bias %d expert scale %d", (int)op.score, E,
                 k, op.n_group, with_bias, pass);
        compare_i32(&ids, what);
        compare(&w, 1e-6, what);
    }
    pair_free(&logits);
    pair_free(&bias);
    pair_free(&es);
    pair_free(&ids);
    pair_free(&w);
}

static void set_env_host(int on) {
    if (on) setenv("LMC_CUDA_MOE_HOST", "1", 1);
    else unsetenv("LMC_CUDA_MOE_HOST");
}

/* A recorded route + grouped product over experts ec/eg [in, out] (E ≤ 256), replayed on new
 * logits against the CPU. */
static void moe_recorded(const lmc_tensor *ec, const lmc_tensor *eg, int E, int IN, int OUT) {
    const int k = 8, nt = 2;
    lmc_moe_route_op op = {.score = LMC_MOE_SOFTMAX, .n_expert = E, .k = k, .norm = 1, .scale = 1.0f};
    pair logits, ids, w, x, y;
    pair_f32(&logits, E, nt, 1, 4.0f);
    pair_alloc(&ids, LMC_DTYPE_I32, k, nt, 1);
    pair_alloc(&w, LMC_DTYPE_F32, k, nt, 1);
    pair_f32(&x, IN, nt, 1, 1.0f);
    pair_alloc(&y, LMC_DTYPE_F32, OUT, k * nt, 1);
    lmc_tensor idc = lmc_tensor_reshape(&ids.c, k, nt, 1, 1), idg = lmc_tensor_reshape(&ids.g, k, nt, 1, 1);
    gpu->i->moe_route(gpu, &idg, &w.g, &logits.g, NULL, &op); /* unrecorded first */
    gpu->i->matmul_id(gpu, &y.g, eg, E, &x.g, &idg);
    CHECK(gpu->i->sync(gpu) == 0);
    void *g = NULL;
    if (gpu->i->graph_begin(gpu)) {
        gpu->i->moe_route(gpu, &idg, &w.g, &logits.g, NULL, &op);
        gpu->i->matmul_id(gpu, &y.g, eg, E, &x.g, &idg);
        g = gpu->i->graph_end(gpu);
    }
    CHECK_MSG(g != NULL, "moe route + matmul_id were not recorded");
    if (g) {
        for (int rep = 0; rep < 2; rep++) {
            float h[256 * 2];
            for (int i = 0; i < E * nt; i++) h[i] = 4.0f * frand();
            pair_set(&logits, h);
            CHECK(gpu->i->graph_replay(gpu, g) == 1);
            ref->i->moe_route(ref, &idc, &w.c, &logits.c, NULL, &op);
            ref->i->matmul_id(ref, &y.c, ec, E, &x.c, &idc);
            compare_i32(&ids, "recorded moe_route ids");
            compare(&w, 1e-6, "recorded moe_route weights");
            compare(&y, 1e-4, "recorded matmul_id");
        }
        gpu->i->graph_free(gpu, g);
    }
    pair *all[] = {&logits, &ids, &w, &x, &y};
    for (int i = 0; i < 5; i++) pair_free(all[i]);
}

static void test_moe_device(void) {
    set_env_host(0);
    const int Es[] = {8, 60, 128, 256};
    int n_route = 0;
    for (int ei = 0; ei < 4; ei++)
        for (int k = 1; k <= 8 && k <= Es[ei]; k++) {
            const int E = Es[ei];
            moe_route_case(E, k, (lmc_moe_route_op){.score = LMC_MOE_SOFTMAX, .norm = 0, .scale = 1.0f}, 0, 37);
            moe_route_case(E, k, (lmc_moe_route_op){.score = LMC_MOE_SOFTMAX, .norm = 1, .scale = 1.0f}, 1, 37);
            moe_route_case(E, k, (lmc_moe_route_op){.score = LMC_MOE_SOFTMAX, .norm = 1, .norm_min = 0.9f, .scale = 1.5f},
                           0, 37);
            moe_route_case(E, k, (lmc_moe_route_op){.score = LMC_MOE_SIGMOID, .norm = 1, .norm_eps = 1e-20f, .scale = 2.5f},
                           1, 37);
            moe_route_case(E, k, (lmc_moe_route_op){.score = LMC_MOE_SIGMOID, .norm = 0, .scale = 1.0f}, 0, 37);
            const int G = E >= 64 ? 8 : 4;
            if (E % G == 0 && k <= (E / G) * (G / 2))
                moe_route_case(E, k, (lmc_moe_route_op){.score = LMC_MOE_SIGMOID, .norm = 1, .norm_eps = 1e-20f,
                                                        .n_group = G, .topk_group = G / 2, .scale = 2.5f}, 1, 37);
            n_route += 6;
        }
    for (int ei = 0; ei < 4; ei++) {
        moe_route_case(Es[ei], 2, (lmc_moe_route_op){.score = LMC_MOE_SPARSEMIXER, .jitter = 0.01f, .scale = 1.0f}, 0, 37);
        moe_route_case(Es[ei], 2, (lmc_moe_route_op){.score = LMC_MOE_SPARSEMIXER, .jitter = 0.5f, .scale = 1.0f}, 0, 37);
    }
    printf("moe_route (device): %d cases, each also with an expert scale\n", n_route + 8);
    set_env_host(1); /* the host path reads the expert scale back too */
    moe_route_case(60, 4, (lmc_moe_route_op){.score = LMC_MOE_SOFTMAX, .norm = 1, .scale = 1.0f}, 0, 37);
    moe_route_case(60, 2, (lmc_moe_route_op){.score = LMC_MOE_SPARSEMIXER, .jitter = 0.5f, .scale = 1.0f}, 0, 37);
    set_env_host(0);

    /* grouped products */
    enum { E = 128, IN = 256, OUT = 72 };
    const lmc_dtype types[] = {LMC_DTYPE_F32, LMC_DTYPE_F16, LMC_DTYPE_BF16, LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0,
                               LMC_DTYPE_Q4_K, LMC_DTYPE_Q6_K, LMC_DTYPE_MXFP4, LMC_DTYPE_MXFP4_MLX};
    const int ks[] = {1, 2, 4, 8}, ns[] = {1, 3, 8, 20, 64};
    static weight ex[E];
    static lmc_tensor ec[E], eg[E];
    int32_t *idv = malloc(sizeof(int32_t) * 8 * 300);
    int n_mm = 0;
    for (int ti = 0; ti < (int)(sizeof types / sizeof types[0]); ti++) {
        for (int e = 0; e < E; e++) {
            weight_make(&ex[e], types[ti], IN, OUT);
            ec[e] = ex[e].c;
            eg[e] = ex[e].g;
        }
        const int quant = types[ti] >= LMC_DTYPE_Q8_0;
        for (int ki = 0; ki < 4; ki++)
            for (int ni = 0; ni < 6; ni++) {
                const int k = ks[ki], host = ni == 5, nt = host ? 300 : ns[ni];
                if (host && ki != 1) continue; /* past the slot limit: n = 300, k = 2 */
                /* distinct experts per token, skewed: most slots on experts 0..15, 64.. never chosen */
                for (int t = 0; t < nt; t++)
                    for (int j = 0; j < k; j++) {
                        int e;
                        for (;;) {
                            const float r = 0.5f * (frand() + 1.0f);
                            e = r < 0.7f ? (int)(r * 22.0f) : (int)(r * 63.0f);
                            int dup = 0;
                            for (int q = 0; q < j; q++) dup |= idv[t * k + q] == e;
                            if (!dup) break;
                        }
                        idv[t * k + j] = e;
                    }
                pair ids, x, xs, y;
                pair_expert_ids(&ids, idv, k, nt);
                pair_f32(&x, IN, nt, 1, 1.0f);
                pair_f32(&xs, IN, k * nt, 1, 1.0f);
                pair_alloc(&y, LMC_DTYPE_F32, OUT, k * nt, 1);
                const double tol = quant || host ? 1e-2 : 1e-4;
                /* MXFP4 of both layouts on the device path: their device form, exact weights and f32
                 * activations (1e-4; the host path's int8 decode products are 1e-2) */
                const int mx_dev = (types[ti] == LMC_DTYPE_MXFP4 || types[ti] == LMC_DTYPE_MXFP4_MLX) && !host &&
                                   !(getenv("LMC_CUDA_MXFP4_INT8") && !strcmp(getenv("LMC_CUDA_MXFP4_INT8"), "0"));
                char what[96];
                for (int pass = 0; pass < 2; pass++) { /* device path, then the host path (A/B switch) */
                    if (pass == 1 && (nt != 3 || ki != 3) && !host) continue;
                    set_env_host(pass);
                    snprintf(what, sizeof what, "matmul_id %s k %d n %d%s", lmc_dtype_name(types[ti]), k, nt,
                             pass ? " (host path)" : "");
                    ref->i->matmul_id(ref, &y.c, ec, E, &x.c, &ids.c);
                    gpu->i->matmul_id(gpu, &y.g, eg, E, &x.g, &ids.g);
                    compare(&y, mx_dev && !pass ? 1e-4 : tol, what);
                    ref->i->matmul_id(ref, &y.c, ec, E, &xs.c, &ids.c);
                    gpu->i->matmul_id(gpu, &y.g, eg, E, &xs.g, &ids.g);
                    compare(&y, mx_dev && !pass ? 1e-4 : tol, what);
                    n_mm += 2;
                }
                set_env_host(0);
                pair_free(&ids);
                pair_free(&x);
                pair_free(&xs);
                pair_free(&y);
            }
        if (types[ti] == LMC_DTYPE_BF16) moe_recorded(ec, eg, E, IN, OUT);
        for (int e = 0; e < E; e++) weight_free(&ex[e]);
    }
    printf("matmul_id (device): %d products\n", n_mm);

    free(idv);
}
/* ==== end of the device MoE block ==== */

/* glu_clamp_split (gpt-oss experts from GGUF: gate and up apart) against the CPU op: odd widths,
 * 1 and 37 tokens of k = 4 slots, values past ±limit, into a separate y and in place over gate
 * (as the MoE step calls it), then recorded and replayed on new inputs (no host sync inside). */
static void test_glu_split(void) {
    const int Ds[] = {45, 96, 2881}, ns[] = {1, 37}, k = 4;
    const float alpha = 1.702f, limit = 7.0f;
    for (int di = 0; di < 3; di++)
        for (int ni = 0; ni < 2; ni++) {
            const int D = Ds[di], S = k * ns[ni];
            pair g, u, y;
            pair_f32(&g, D, S, 1, 12.0f);
            pair_f32(&u, D, S, 1, 12.0f);
            pair_alloc(&y, LMC_DTYPE_F32, D, S, 1);
            char what[80];
            snprintf(what, sizeof what, "glu_clamp_split D %d slots %d", D, S);
            ref->i->glu_clamp_split(ref, &y.c, &g.c, &u.c, alpha, limit);
            gpu->i->glu_clamp_split(gpu, &y.g, &g.g, &u.g, alpha, limit);
            compare(&y, 1e-5, what);
            snprintf(what, sizeof what, "glu_clamp_split in place D %d slots %d", D, S);
            ref->i->glu_clamp_split(ref, &g.c, &g.c, &u.c, alpha, limit);
            gpu->i->glu_clamp_split(gpu, &g.g, &g.g, &u.g, alpha, limit);
            compare(&g, 1e-5, what);
            pair_free(&g);
            pair_free(&u);
            pair_free(&y);
        }
    /* recorded: the graph replays the op on the inputs' new contents */
    const int D = 45, S = 4 * 37;
    pair g, u, y;
    pair_f32(&g, D, S, 1, 12.0f);
    pair_f32(&u, D, S, 1, 12.0f);
    pair_alloc(&y, LMC_DTYPE_F32, D, S, 1);
    CHECK(gpu->i->sync(gpu) == 0);
    void *gr = NULL;
    if (gpu->i->graph_begin(gpu)) {
        gpu->i->glu_clamp_split(gpu, &y.g, &g.g, &u.g, alpha, limit);
        gr = gpu->i->graph_end(gpu);
    }
    CHECK_MSG(gr != NULL, "glu_clamp_split was not recorded");
    if (gr) {
        float *h = malloc(sizeof(float) * D * S);
        for (int rep = 0; rep < 2; rep++) {
            for (int i = 0; i < D * S; i++) h[i] = 10.0f * frand();
            pair_set(&g, h);
            for (int i = 0; i < D * S; i++) h[i] = 10.0f * frand();
            pair_set(&u, h);
            CHECK(gpu->i->graph_replay(gpu, gr) == 1);
            ref->i->glu_clamp_split(ref, &y.c, &g.c, &u.c, alpha, limit);
            compare(&y, 1e-5, "recorded glu_clamp_split");
        }
        free(h);
        gpu->i->graph_free(gpu, gr);
    }
    pair_free(&g);
    pair_free(&u);
    pair_free(&y);
}

int main(void) {
    if (lmc_backend_cuda_init(&gpu, 0) < 0) {
        printf("SKIP test_cuda_moe: %s\n", lmc_last_error());
        printf("RESULT 0 0\n");
        return 0;
    }
    LMC_ASSERT(lmc_backend_cpu_init(&ref, 1, 1) == 0);
    RUN(test_moe);
    RUN(test_moe_device);
    RUN(test_glu_bias);
    RUN(test_glu_split);
    lmc_backend_free(ref);
    lmc_backend_free(gpu);
    return TEST_END();
}
