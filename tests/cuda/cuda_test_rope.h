/* cuda_test_rope.h — test_cuda_ops' rope cases: rope, rope_store, and the q/k/v products with
 * rope_store's work in their epilogue (matmul_fused OUT_ROPE), kept apart from the other ops' cases.
 * Included by test_cuda_ops.c after its shared references (compare_gpu), in the same binary: main's
 * order, and so every test's random draws, stay as they were. */
#ifndef LMC_CUDA_TEST_ROPE_H
#define LMC_CUDA_TEST_ROPE_H

static void test_rope(void) {
    const int cfg[][4] = {/* head_dim, n_rot, interleaved, n_head */ {64, 64, 0, 4}, {64, 32, 0, 3}, {128, 128, 1, 2},
                          {80, 40, 1, 5}, {128, 128, 0, 32}, {256, 64, 0, 9}, {512, 512, 0, 3}};
    for (int ci = 0; ci < 7; ci++) {
        const int hd = cfg[ci][0], nr = cfg[ci][1], nh = cfg[ci][3], n = 6;
        pair x, pos, inv;
        pair_f32(&x, hd, nh, n, 2.0f);
        int32_t p[6] = {0, 1, 7, 100, 4095, 70000};
        pair_i32(&pos, p, n);
        float f[256];
        for (int i = 0; i < nr / 2; i++) f[i] = powf(10000.0f, -2.0f * i / nr);
        pair_alloc(&inv, LMC_DTYPE_F32, nr / 2, 1, 1);
        pair_set(&inv, f);
        lmc_rope_op oc = {.n_rot = nr, .interleaved = cfg[ci][2], .attn_factor = 1.1f, .inv_freq = &inv.c};
        lmc_rope_op og = oc;
        og.inv_freq = &inv.g;
        ref->i->rope(ref, &x.c, &pos.c, &oc);
        gpu->i->rope(gpu, &x.g, &pos.g, &og);
        compare(&x, 1e-5, "rope");
        pair_free(&x);
        pair_free(&pos);
        pair_free(&inv);
    }
}

/* rope_store (rope of q and k, both cache stores in one op) vs the CPU's four ops: partial rotary,
 * grouped heads, several sequences, positions past n_ctx (ring slots); 5 tokens, and 70 (the
 * prefill grouping: more heads per block). */
static void test_rope_store(void) {
    const int cfg[][4] = {/* head_dim, n_rot, n_head, n_kv_head */ {128, 128, 32, 8}, {64, 32, 6, 2}, {256, 64, 8, 1},
                          {80, 80, 5, 5}};
    for (int ci = 0; ci < 8; ci++) {
        const int big = ci >= 4, hd = cfg[ci % 4][0], nr = cfg[ci % 4][1], hq = cfg[ci % 4][2], hkv = cfg[ci % 4][3];
        const int n = big ? 70 : 5, n_ctx = big ? 64 : 16, n_seq = 2;
        pair q, k, v, kc, vc, pos, seq, inv;
        pair_f32(&q, hd, hq, n, 2.0f);
        pair_f32(&k, hd, hkv, n, 2.0f);
        pair_f32(&v, hd * hkv, n, 1, 2.0f);
        pair_f32(&kc, hd * hkv, n_ctx, n_seq, 1.0f);
        pair_f32(&vc, hd * hkv, n_ctx, n_seq, 1.0f);
        int32_t p[70] = {0, 3, 15, 17, 40}, sq[70] = {0, 1, 0, 1, 0};
        for (int i = 0; big && i < n; i++) { /* one slot per token: seq 0 at 0..34, seq 1 at 40..74 (ring) */
            sq[i] = i % 2;
            p[i] = i / 2 + 40 * sq[i];
        }
        pair_i32(&pos, p, n);
        pair_i32(&seq, sq, n);
        float f[256];
        for (int i = 0; i < nr / 2; i++) f[i] = powf(10000.0f, -2.0f * i / nr);
        pair_alloc(&inv, LMC_DTYPE_F32, nr / 2, 1, 1);
        pair_set(&inv, f);
        lmc_rope_op oc = {.n_rot = nr, .interleaved = ci % 4 == 3, .attn_factor = 1.0f, .inv_freq = &inv.c};
        lmc_rope_op og = oc;
        og.inv_freq = &inv.g;
        ref->i->rope_store(ref, &q.c, &k.c, &v.c, &kc.c, &vc.c, &pos.c, &seq.c, &oc);
        gpu->i->rope_store(gpu, &q.g, &k.g, &v.g, &kc.g, &vc.g, &pos.g, &seq.g, &og);
        compare(&q, 1e-5, "rope_store q");
        compare(&k, 1e-5, "rope_store k");
        compare(&kc, 1e-5, "rope_store k cache");
        compare(&vc, 0, "rope_store v cache");
        pair *all[] = {&q, &k, &v, &kc, &vc, &pos, &seq, &inv};
        for (int i = 0; i < 8; i++) pair_free(all[i]);
    }
}

/* matmul_fused OUT_ROPE (q, k, v products with rope_store's work in their epilogue) against the GPU's
 * plain sequence (the fused RMSNorm products, then rope_store: the same sums, so 1e-5) and against the
 * CPU's ops (rms_norm, three products, rope_store; 1e-2 with int8 activations, else 1e-4): Q8_0 and Q4_0
 * (k_gemv_q, rows four a warp where short, else two) and bf16 (k_gemv_s) at one token, pairs as halves
 * and interleaved, a ring slot; and the cases it declines (partial rotary, Q6_K weights): 0. */
static void test_matmul_fused_rope(void) {
    static const int cfg[][5] = {/* in, head_dim, n_head, n_kv_head, interleaved */
                                 {4096, 128, 32, 8, 0}, {2048, 128, 16, 8, 1}, {896, 64, 14, 2, 0}, {320, 80, 5, 5, 1}};
    const lmc_dtype types[] = {LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0, LMC_DTYPE_BF16};
    if (getenv("LMC_CUDA_FUSE") || getenv("LMC_CUDA_QGEMV")) {
        printf("SKIP test_matmul_fused_rope: LMC_CUDA_FUSE / LMC_CUDA_QGEMV set\n");
        return;
    }
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int ci = 0; ci < 4; ci++) {
            const lmc_dtype t = types[ti];
            const int in = cfg[ci][0], hd = cfg[ci][1], hq = cfg[ci][2], hkv = cfg[ci][3], n_ctx = 16, n_seq = 2;
            weight w[3], g;
            weight_make(&g, LMC_DTYPE_BF16, in, 1);
            for (int i = 0; i < 3; i++) weight_make(&w[i], t, in, (int64_t)hd * (i ? hkv : hq));
            pair x, h, y[3], y2[3], kc, vc, kc2, vc2, pos, seq, inv;
            pair_f32(&x, in, 1, 1, 3.0f);
            pair_alloc(&h, LMC_DTYPE_F32, in, 1, 1);
            for (int i = 0; i < 3; i++) {
                pair_alloc(&y[i], LMC_DTYPE_F32, (int64_t)hd * (i ? hkv : hq), 1, 1);
                pair_alloc(&y2[i], LMC_DTYPE_F32, (int64_t)hd * (i ? hkv : hq), 1, 1);
            }
            pair *caches[] = {&kc, &vc, &kc2, &vc2};
            for (int i = 0; i < 4; i++) pair_alloc(caches[i], LMC_DTYPE_F32, (int64_t)hd * hkv, n_ctx, n_seq);
            const int32_t p[1] = {ci % 2 ? 37 : 5}, sq[1] = {1}; /* 37: slot 5 of the ring */
            pair_i32(&pos, p, 1);
            pair_i32(&seq, sq, 1);
            float f[64];
            for (int i = 0; i < hd / 2; i++) f[i] = powf(500000.0f, -2.0f * i / hd);
            pair_alloc(&inv, LMC_DTYPE_F32, hd / 2, 1, 1);
            pair_set(&inv, f);
            lmc_rope_op oc = {.n_rot = hd, .interleaved = cfg[ci][4], .attn_factor = ci == 2 ? 1.25f : 1.0f,
                              .inv_freq = &inv.c};
            lmc_rope_op og = oc;
            og.inv_freq = &inv.g;
            /* the CPU's ops */
            ref->i->rms_norm(ref, &h.c, &x.c, &g.c, 1e-5f, 0.0f);
            for (int i = 0; i < 3; i++) ref->i->matmul(ref, &y[i].c, &w[i].c, &h.c);
            lmc_tensor qh = lmc_tensor_reshape(&y[0].c, hd, hq, 1, 1), kh = lmc_tensor_reshape(&y[1].c, hd, hkv, 1, 1);
            ref->i->rope_store(ref, &qh, &kh, &y[2].c, &kc.c, &vc.c, &pos.c, &seq.c, &oc);
            /* the fused product */
            lmc_tensor *yg[3] = {&y[0].g, &y[1].g, &y[2].g}, *y2g[3] = {&y2[0].g, &y2[1].g, &y2[2].g};
            const lmc_tensor *wg[3] = {&w[0].g, &w[1].g, &w[2].g};
            lmc_fuse_op op = {.in = LMC_FUSE_IN_RMS, .out = LMC_FUSE_OUT_ROPE, .norm_w = &g.g, .eps = 1e-5f,
                              .head_dim = hd, .rope = &og, .k_cache = &kc.g, .v_cache = &vc.g, .pos = &pos.g,
                              .seq = &seq.g};
            char what[128];
            snprintf(what, sizeof what, "fused rope %s in %d hd %d %s", lmc_dtype_name(t), in, hd,
                     cfg[ci][4] ? "interleaved" : "halves");
            CHECK_MSG(gpu->i->matmul_fused(gpu, 3, yg, wg, &x.g, &op) == 1, "%s: not taken", what);
            const double tol = t == LMC_DTYPE_BF16 ? 1e-4 : 1e-2;
            compare(&y[0], tol, what);
            compare(&y[1], tol, what);
            compare(&y[2], tol, what);
            compare(&kc, tol, what);
            compare(&vc, tol, what);
            /* the GPU's plain sequence */
            lmc_fuse_op plain = op;
            plain.out = LMC_FUSE_OUT_SET;
            CHECK(gpu->i->matmul_fused(gpu, 3, y2g, wg, &x.g, &plain) == 1);
            lmc_tensor q2 = lmc_tensor_reshape(&y2[0].g, hd, hq, 1, 1), k2 = lmc_tensor_reshape(&y2[1].g, hd, hkv, 1, 1);
            gpu->i->rope_store(gpu, &q2, &k2, &y2[2].g, &kc2.g, &vc2.g, &pos.g, &seq.g, &og);
            for (int i = 0; i < 3; i++) compare_gpu(&y[i].g, &y2[i].g, 1e-5, what);
            compare_gpu(&kc.g, &kc2.g, 1e-5, what);
            compare_gpu(&vc.g, &vc2.g, 1e-5, what);
            /* declined: partial rotary; Q6_K weights */
            lmc_rope_op part = og;
            part.n_rot = hd / 2;
            op.rope = &part;
            CHECK_MSG(gpu->i->matmul_fused(gpu, 3, y2g, wg, &x.g, &op) == 0, "%s: partial rotary taken", what);
            op.rope = &og;
            if (ci == 0 && ti == 0) {
                weight wb[3];
                for (int i = 0; i < 3; i++) weight_make(&wb[i], LMC_DTYPE_Q6_K, in, (int64_t)hd * (i ? hkv : hq));
                const lmc_tensor *wbg[3] = {&wb[0].g, &wb[1].g, &wb[2].g};
                CHECK_MSG(gpu->i->matmul_fused(gpu, 3, y2g, wbg, &x.g, &op) == 0, "%s: Q6_K taken", what);
                for (int i = 0; i < 3; i++) weight_free(&wb[i]);
            }
            pair *all[] = {&x, &h, &y[0], &y[1], &y[2], &y2[0], &y2[1], &y2[2], &kc, &vc, &kc2, &vc2, &pos, &seq, &inv};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
            for (int i = 0; i < 3; i++) weight_free(&w[i]);
            weight_free(&g);
        }
}

#endif
