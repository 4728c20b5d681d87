/* test_cuda_ops.c — every op of the CUDA backend on random inputs of several
 * shapes against the scalar CPU reference (lmc_backend_cpu_init(&be, 1, 1)).
 *
 * Bound (F2, DESIGN.md): max|Δ| ≤ tol · max|ref| per output, with tol 1e-2
 * where the CUDA path computes in bf16 (prefill-sized matmuls of non-f32
 * weights) and 1e-4 (1e-5 for exact element-wise ops) where it computes in
 * f32. Weight dtypes: f32, f16, bf16, every GGUF block type, MLX affine
 * (2..8 bits), MXFP4 in both layouts (cuda_test_mxfp4.h); rope cases in cuda_test_rope.h. Tests
 * added later run after the others
 * (test_matmul_mxfp4, test_attention_sinks) so that those draw the same random inputs as before:
 * one random sequence runs through the file, and some random-byte K-quant cases sit near the bound. The MoE ops are in test_cuda_moe.c, the shared pair/weight helpers in
 * cuda_test_pair.h. Without a usable GPU it prints a SKIP line and RESULT 0 0.
 */
#include "cuda_test_pair.h"
#include "backend/cuda/cuda_internal.h"

static const lmc_dtype all_types[] = {
    LMC_DTYPE_F32, LMC_DTYPE_F16, LMC_DTYPE_BF16, LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0, LMC_DTYPE_Q4_1,
    LMC_DTYPE_Q5_0, LMC_DTYPE_Q5_1, LMC_DTYPE_Q2_K, LMC_DTYPE_Q3_K, LMC_DTYPE_Q4_K, LMC_DTYPE_Q5_K,
    LMC_DTYPE_Q6_K, LMC_DTYPE_MLX2, LMC_DTYPE_MLX3, LMC_DTYPE_MLX4, LMC_DTYPE_MLX5, LMC_DTYPE_MLX6, LMC_DTYPE_MLX8,
};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

/* ------------------------------------------------------------ tests */

static void test_matmul(void) {
    static const int64_t shapes[][3] = {/* in, out, n_tokens (4096 x 4096 at 3: f16/bf16 through cuBLAS) */
                                        {256, 96, 1}, {512, 130, 3}, {256, 64, 8}, {1024, 72, 9},
                                        {256, 200, 64}, {768, 33, 2}, {4096, 4096, 3}};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const lmc_dtype t = all_types[ti];
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t in = shapes[si][0], out = shapes[si][1], n = shapes[si][2];
            if (lmc_dtype_row_bytes(t, in) == 0) continue;
            weight w;
            weight_make(&w, t, in, out);
            pair x, y;
            pair_f32(&x, in, n, 1, 1.0f);
            pair_alloc(&y, LMC_DTYPE_F32, out, n, 1);
            ref->i->matmul(ref, &y.c, &w.c, &x.c);
            gpu->i->matmul(gpu, &y.g, &w.g, &x.g);
            char what[96];
            snprintf(what, sizeof what, "matmul %s in %lld out %lld n %lld", lmc_dtype_name(t), (long long)in,
                     (long long)out, (long long)n);
            /* bf16 GEMM past the decode kernels' tokens; Q8_0/Q4_0 decode with int8 activations (test_matmul_int8) */
            compare(&y, matmul_tol(t, in, out, n), what);
            pair_free(&x);
            pair_free(&y);
            weight_free(&w);
        }
    }
}

/* matmul_n (q, k, v or gate, up in one launch) against the CPU's separate products: every weight
 * dtype, 2 and 3 matrices of different heights, decode-sized and prefill-sized batches (the
 * backend falls back to one product per matrix where it cannot fuse). */
static void test_matmul_n(void) {
    static const int64_t shapes[][4] = {/* in, out0, out1 (= out2), n_tokens */
                                        {256, 96, 32, 1}, {512, 130, 66, 3}, {256, 64, 16, 8}, {1024, 72, 24, 9},
                                        {264, 130, 33, 70}};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const lmc_dtype t = all_types[ti];
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t in = shapes[si][0], n = shapes[si][3];
            if (lmc_dtype_row_bytes(t, in) == 0) continue;
            for (int nm = 2; nm <= 3; nm++) {
                weight w[3];
                pair y[3], x;
                pair_f32(&x, in, n, 1, 1.0f);
                lmc_tensor *yg[3];
                const lmc_tensor *wg[3];
                for (int i = 0; i < nm; i++) {
                    const int64_t out = i == 0 ? shapes[si][1] : shapes[si][2];
                    weight_make(&w[i], t, in, out);
                    pair_alloc(&y[i], LMC_DTYPE_F32, out, n, 1);
                    ref->i->matmul(ref, &y[i].c, &w[i].c, &x.c);
                    yg[i] = &y[i].g;
                    wg[i] = &w[i].g;
                }
                gpu->i->matmul_n(gpu, nm, yg, wg, &x.g);
                for (int i = 0; i < nm; i++) {
                    char what[96];
                    snprintf(what, sizeof what, "matmul_n %d/%d %s in %lld n %lld", i, nm, lmc_dtype_name(t),
                             (long long)in, (long long)n);
                    /* the group goes one way: the largest matrix's bound */
                    const int64_t big = shapes[si][1] > shapes[si][2] ? shapes[si][1] : shapes[si][2];
                    compare(&y[i], matmul_tol(t, in, big, n), what);
                    pair_free(&y[i]);
                    weight_free(&w[i]);
                }
                pair_free(&x);
            }
        }
    }
}

/* The int8-activation decode path repeated on the host: each token's x quantized per
 * 32-element block as the kernel does it (float: d = amax/127, q = rint(x·127/amax)), then
 * y = Σ_blocks d_w·d·Σ code·q in double from the checkpoint bytes wb (ggml blocks) of Q8_0 / Q4_0,
 * or, given wf (the CPU's dequantized weights: K-quants, MXFP4), y = Σ_blocks d·Σ w·q. */
static void int8_ref_of(lmc_dtype t, const uint8_t *wb, const float *wf, int64_t in, int64_t out, const float *x,
                        int64_t n, float *y) {
    const size_t row = wb ? lmc_dtype_row_bytes(t, in) : 0, bb = t == LMC_DTYPE_Q8_0 ? 34 : 18;
    const int64_t nb = in / 32;
    int8_t *q = malloc((size_t)in);
    float *d = malloc((size_t)nb * sizeof *d);
    for (int64_t k = 0; k < n; k++) {
        const float *xk = x + k * in;
        for (int64_t b = 0; b < nb; b++) {
            float m = 0.0f;
            for (int j = 0; j < 32; j++) m = fmaxf(m, fabsf(xk[b * 32 + j]));
            const float id = m > 0.0f ? 127.0f / m : 0.0f;
            d[b] = m / 127.0f;
            for (int j = 0; j < 32; j++) q[b * 32 + j] = (int8_t)rintf(xk[b * 32 + j] * id);
        }
        for (int64_t o = 0; o < out; o++) {
            double acc = 0.0;
            for (int64_t b = 0; wf && b < nb; b++) {
                double s = 0.0;
                for (int j = 0; j < 32; j++) s += (double)wf[o * in + b * 32 + j] * q[b * 32 + j];
                acc += (double)d[b] * s;
            }
            for (int64_t b = 0; !wf && b < nb; b++) {
                const uint8_t *blk = wb + (size_t)o * row + (size_t)b * bb;
                uint16_t h;
                memcpy(&h, blk, 2);
                long s = 0;
                for (int j = 0; j < 32; j++) {
                    const int c = t == LMC_DTYPE_Q8_0 ? (int8_t)blk[2 + j]
                                                      : (j < 16 ? blk[2 + j] & 0x0F : blk[2 + j - 16] >> 4) - 8;
                    s += (long)c * q[b * 32 + j];
                }
                acc += (double)lmc_f16_to_f32(h) * d[b] * (double)s;
            }
            y[k * out + o] = (float)acc;
        }
    }
    free(q);
    free(d);
}

/* int8_ref_of for the checkpoint bytes wb of dtype t (K-quants through their dequantized rows). */
static void int8_ref(lmc_dtype t, const uint8_t *wb, int64_t in, int64_t out, const float *x, int64_t n, float *y) {
    const size_t row = lmc_dtype_row_bytes(t, in);
    float *wf = NULL;
    if (t != LMC_DTYPE_Q8_0 && t != LMC_DTYPE_Q4_0) {
        wf = malloc((size_t)(in * out) * sizeof *wf);
        for (int64_t o = 0; o < out; o++)
            LMC_ASSERT(lmc_dequantize_row(t, wb + (size_t)o * row, NULL, wf + o * in, in) == 0);
    }
    int8_ref_of(t, wb, wf, in, out, x, n, y);
    free(wf);
}

/* One product of w (in × out) over n tokens on both backends, activations of block magnitudes 1,
 * 4, 16 with block 1 of token 0 zero: against the f32 CPU reference (1e-2 on the int8-activation
 * path, 1e-4 off it) and, on the int8 path, against int8_ref (1e-5: the same int8 activations,
 * float summation order differs). x and y stay allocated for the caller (pair_free both).
 * Returns 1 when the int8 path took the product. */
static int int8_product(lmc_dtype t, const weight *w, int64_t in, int64_t out, int64_t n, pair *x, pair *y) {
    float *xh = malloc((size_t)(in * n) * sizeof *xh), *yr = malloc((size_t)(out * n) * sizeof *yr);
    float *yg = malloc((size_t)(out * n) * sizeof *yg);
    for (int64_t i = 0; i < in * n; i++)
        xh[i] = (i / 32 == 1) ? 0.0f : frand() * (float)(1 << (2 * ((i / 32) % 3)));
    pair_alloc(x, LMC_DTYPE_F32, in, n, 1);
    pair_set(x, xh);
    pair_alloc(y, LMC_DTYPE_F32, out, n, 1);
    ref->i->matmul(ref, &y->c, &w->c, &x->c);
    gpu->i->matmul(gpu, &y->g, &w->g, &x->g);
    const lmc_cuda_w wd = lmc_cuda_wdesc(&w->g);
    const int int8 = lmc_cuda_gemv_int8(t, in, n) || lmc_cuda_mmq_ok(&wd, n); /* k_gemv_q or k_mmqp */
    char what[128];
    snprintf(what, sizeof what, "matmul %s in %lld out %lld n %lld (%s activations) vs cpu", lmc_dtype_name(t),
             (long long)in, (long long)out, (long long)n, int8 ? "int8" : "f32");
    compare(y, int8 ? 1e-2 : 1e-4, what);
    if (int8) {
        int8_ref(t, w->bytes, in, out, xh, n, yr);
        gpu->i->get(gpu, yg, &y->g, 0, (size_t)(out * n) * 4);
        double err = 0, mx = 0;
        for (int64_t i = 0; i < out * n; i++) {
            err = fmax(err, fabs((double)yr[i] - yg[i]));
            mx = fmax(mx, fabs((double)yr[i]));
        }
        CHECK_MSG(err <= 1e-5 * mx && mx > 0, "%s in %lld out %lld n %lld vs int8 host reference: max|Δ| %.3g "
                  "vs max|ref| %.3g", lmc_dtype_name(t), (long long)in, (long long)out, (long long)n, err, mx);
    }
    free(xh);
    free(yr);
    free(yg);
    return int8;
}

/* Q8_0/Q4_0 products of 1..8 tokens: the int8-activation kernels (k_gemv_q, and k_mmqp from 3
 * tokens on where K fits its stages) against int8_ref (1e-5: only float summation order differs)
 * and against the f32 CPU reference (1e-2). Shapes: the shortest rows, odd row counts, several row
 * groups per warp, K of 14336 at 8 tokens (143 KB of k_gemv_q's shared memory), an all-zero
 * activation block, and K of 24576 at 8 tokens (k_mmqp's split K; test_matmul_int8_gemv: too long
 * for k_gemv_q, the f32-activation kernel). */
static void int8_shapes(const int64_t (*shapes)[3], size_t n_shapes) {
    const lmc_dtype types[] = {LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0};
    for (int ti = 0; ti < 2; ti++) {
        const lmc_dtype t = types[ti];
        for (size_t si = 0; si < n_shapes; si++) {
            const int64_t in = shapes[si][0], out = shapes[si][1], n = shapes[si][2];
            weight w;
            weight_make(&w, t, in, out);
            pair x, y;
            const int int8 = int8_product(t, &w, in, out, n, &x, &y);
            CHECK_MSG(int8 || in * n * 5 / 4 > 200 * 1024 || getenv("LMC_CUDA_QGEMV"), "%s in %lld n %lld: int8 path expected",
                      lmc_dtype_name(t), (long long)in, (long long)n);
            pair_free(&x);
            pair_free(&y);
            weight_free(&w);
        }
    }
}

static void test_matmul_int8(void) {
    static const int64_t shapes[][3] = {/* in, out, n_tokens */
                                        {32, 5, 1}, {64, 33, 2}, {256, 96, 3}, {544, 257, 5}, {1024, 130, 8},
                                        {64, 4500, 1}, {32, 9000, 4}, {4096, 40, 6}, {14336, 12, 8},
                                        {128, 70, 7}, {24576, 3, 8}, {4096, 4500, 1}, {2048, 4400, 1}};
    int8_shapes(shapes, sizeof shapes / sizeof shapes[0]);
}

/* 3..8 tokens with k_mmqp left out (lmc_cuda_mmq_min_set): k_gemv_q as before it took them, K of
 * 24576 at 8 tokens and of 98304 at 2 past its shared memory (the f32-activation kernel, 1e-4). */
static void test_matmul_int8_gemv(void) {
    static const int64_t shapes[][3] = {{256, 96, 3}, {544, 257, 5}, {1024, 130, 8}, {32, 9000, 4}, {4096, 40, 6},
                                        {14336, 12, 8}, {128, 70, 7}, {24576, 3, 8}, {98304, 3, 2}};
    lmc_cuda_mmq_min_set(LMC_CUDA_GEMV_MAX_TOKENS + 1);
    int8_shapes(shapes, sizeof shapes / sizeof shapes[0]);
    lmc_cuda_mmq_min_set(0);
}

/* One and two tokens whose activations take k_gemv_q's prologue (qv_quantize) more than one pass: down_proj's
 * K of 14336 with few rows (small blocks) and with full blocks, and K of 11008 at two tokens. */
static void test_matmul_int8_passes(void) {
    static const int64_t shapes[][3] = {{14336, 40, 1}, {14336, 4100, 1}, {11008, 96, 2}};
    int8_shapes(shapes, sizeof shapes / sizeof shapes[0]);
}

/* max|a - b| ≤ tol · max|b| over two f32 tensors of the GPU backend. */
static void compare_gpu(const lmc_tensor *a, const lmc_tensor *b, double tol, const char *what) {
    CHECK_MSG(gpu->i->sync(gpu) == 0, "%s: %s", what, lmc_last_error());
    size_t n = (size_t)lmc_tensor_nelem(a);
    float *ha = malloc(n * 4), *hb = malloc(n * 4);
    gpu->i->get(gpu, ha, a, 0, n * 4);
    gpu->i->get(gpu, hb, b, 0, n * 4);
    double err = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)ha[i] - hb[i]));
        mx = fmax(mx, fabs((double)hb[i]));
    }
    CHECK_MSG(err <= tol * fmax(mx, 1e-30), "%s: max|Δ| %.3g vs max|ref| %.3g (tol %.1g)", what, err, mx, tol);
    free(ha);
    free(hb);
}

/* matmul_fused against the CPU's plain op sequence: rms_norm + products (q, k, v), rms_norm +
 * gate/up + act_mul, act_mul + product (+ add), product + add; dtypes the kernels take and some
 * they decline (then nothing may be enqueued and the answer must be 0), odd row counts, rows not
 * a multiple of 32 elements, 1..8 tokens (decode kernels) and 9 (y += through cuBLAS). */
static void test_matmul_fused(void) {
    static const int64_t shapes[][4] = {/* in, out0, out1, n_tokens */
                                        {256, 96, 32, 1}, {264, 33, 17, 2}, {512, 130, 66, 3}, {1024, 72, 24, 4},
                                        {96, 41, 9, 5}, {768, 65, 31, 6}, {4096, 24, 8, 7}, {320, 57, 57, 8},
                                        {512, 40, 16, 9}, {544, 257, 129, 1}, {4096, 31, 7, 1}, {1024, 64, 4500, 1},
                                        /* prefill-sized (bf16 GEMMs with the input op in front) */
                                        {264, 33, 17, 64}, {96, 130, 41, 33}, {1056, 65, 31, 130}};
    /* (no Q5_K: weight_make gives it random bytes whose mins make every gate product of a shape one
     * large number of one sign, and act(gate)·up of large negative gates is ill-conditioned;
     * test_matmul_kq_int8 covers its int8 path) */
    const lmc_dtype types[] = {LMC_DTYPE_F32, LMC_DTYPE_F16, LMC_DTYPE_BF16, LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0,
                               LMC_DTYPE_Q4_K, LMC_DTYPE_Q6_K, LMC_DTYPE_MLX4};
    if (getenv("LMC_CUDA_FUSE") || getenv("LMC_CUDA_QGEMV")) {
        printf("SKIP test_matmul_fused: LMC_CUDA_FUSE / LMC_CUDA_QGEMV set\n");
        return;
    }
    int cnt[4] = {0, 0, 0, 0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const lmc_dtype t = types[ti];
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t in = shapes[si][0], o0 = shapes[si][1], o1 = shapes[si][2], n = shapes[si][3];
            if (lmc_dtype_row_bytes(t, in) == 0 || (lmc_dtype_is_mlx(t) && in % 64)) continue;
            const int flt = t == LMC_DTYPE_F32 || t == LMC_DTYPE_F16 || t == LMC_DTYPE_BF16;
            const int qv = lmc_cuda_gemv_int8(t, in, n), e = t == LMC_DTYPE_F32 ? 4 : flt ? 8 : 32;
            /* the decode kernels take it: f32 up to 8 tokens, f16/bf16 up to lmc_cuda_gemv_max_tokens
             * of the largest matrix, Q8_0/Q4_0 (int8 path) at one token */
            const int64_t dmax = lmc_cuda_gemv_max_tokens(t, in, o0 > o1 ? o0 : o1);
            const int dec_f = n <= dmax && in % e == 0 && flt, dec_q = qv && n == 1, dec = dec_f || dec_q;
            /* past those tokens every non-f32, non-MLX weight takes the bf16 GEMM path (not OUT_GLU),
             * but for those the int8 tensor-core products take (checked below, once bound) */
            int gemm = n > dmax && t != LMC_DTYPE_F32 && !lmc_dtype_is_mlx(t);
            const double tol = qv || (n > dmax && t != LMC_DTYPE_F32) ? 1e-2 : 1e-4;
            const lmc_act act = si % 2 ? LMC_ACT_GELU_TANH : LMC_ACT_SILU;
            const float off = si % 3 == 1 ? 1.0f : 0.0f;
            weight w[3], g;
            const lmc_dtype gt = si % 3 == 0 ? LMC_DTYPE_F32 : LMC_DTYPE_BF16;
            weight_make(&g, gt, in, 1);
            for (int i = 0; i < 3; i++) weight_make(&w[i], t, in, i == 0 ? o0 : o1);
            for (int i = 0; i < 3; i++) {
                lmc_cuda_w wd = {.type = t, .data = w[i].g.data, .nb1 = w[i].g.nb[1], .ne0 = in, .ne1 = i == 0 ? o0 : o1,
                                 .repacked = t == LMC_DTYPE_Q8_0 || t == LMC_DTYPE_Q4_0};
                if (lmc_cuda_mmq_ok(&wd, n)) gemm = 0;
            }
            pair x, x2, h, y[3], tmp, yp;
            pair_f32(&x, in, n, 1, 3.0f);
            pair_f32(&x2, in, n, 1, 1.0f);
            pair_alloc(&h, LMC_DTYPE_F32, in, n, 1);
            pair_alloc(&tmp, LMC_DTYPE_F32, o0, n, 1);
            pair_alloc(&yp, LMC_DTYPE_F32, o0, n, 1);
            for (int i = 0; i < 3; i++) pair_alloc(&y[i], LMC_DTYPE_F32, i == 0 ? o0 : o1, n, 1);
            lmc_tensor *yg[3] = {&y[0].g, &y[1].g, &y[2].g};
            const lmc_tensor *wg[3] = {&w[0].g, &w[1].g, &w[2].g};
            char what[128];
            const int none = si % 4 == 3; /* a parameter-free norm */
            lmc_fuse_op op = {.in = LMC_FUSE_IN_RMS, .out = LMC_FUSE_OUT_SET, .norm_w = none ? NULL : &g.g,
                              .eps = 1e-5f, .w_offset = off, .act = act};
            /* 1. y[i] = w[i] · rms_norm(x), i < 3 */
            ref->i->rms_norm(ref, &h.c, &x.c, none ? NULL : &g.c, 1e-5f, off);
            for (int i = 0; i < 3; i++) ref->i->matmul(ref, &y[i].c, &w[i].c, &h.c);
            int took = gpu->i->matmul_fused(gpu, 3, yg, wg, &x.g, &op);
            CHECK_MSG(took == (dec || gemm), "fused rms 3 %s in %lld n %lld: taken %d, expected %d", lmc_dtype_name(t),
                      (long long)in, (long long)n, took, dec || gemm);
            /* The int8 path (one token) also against the GPU's plain rms_norm and products: the codes of
             * x·g and of x·g/rms are the same (the block scale absorbs 1/rms) up to a rare rounding flip,
             * so 2e-3. Against the CPU the F2 bound (tol · max|ref|) is left to matrices of 8 rows or
             * more there: the largest of a few int8 products can fall far below their typical size
             * while their activation rounding does not (7 rows: 1.5% seen with an ordinary error). */
            const int plain = dec_q && took;
            if (plain) gpu->i->rms_norm(gpu, &h.g, &x.g, none ? NULL : &g.g, 1e-5f, off);
            for (int i = 0; took && i < 3; i++) {
                const int64_t rows = i == 0 ? o0 : o1;
                snprintf(what, sizeof what, "fused rms→%d/3 %s in %lld n %lld", i, lmc_dtype_name(t), (long long)in,
                         (long long)n);
                if (!qv || rows >= 8) compare(&y[i], tol, what);
                if (plain) {
                    pair yq;
                    pair_alloc(&yq, LMC_DTYPE_F32, rows, n, 1);
                    gpu->i->matmul(gpu, &yq.g, wg[i], &h.g);
                    compare_gpu(&y[i].g, &yq.g, 2e-3, what);
                    pair_free(&yq);
                }
            }
            cnt[0] += took;
            /* 2. y0 = act(w1 · rms_norm(x)) · (w2 · rms_norm(x)) (w1, w2 of one shape) */
            op.out = LMC_FUSE_OUT_GLU;
            ref->i->matmul(ref, &y[1].c, &w[1].c, &h.c);
            ref->i->matmul(ref, &y[2].c, &w[2].c, &h.c);
            ref->i->act_mul(ref, &y[1].c, &y[1].c, &y[2].c, act);
            took = gpu->i->matmul_fused(gpu, 2, (lmc_tensor *[]){&y[1].g, &y[2].g}, (const lmc_tensor *[]){wg[1], wg[2]},
                                        &x.g, &op);
            /* Q8_0/Q4_0 at one token: gate and up rows side by side in k_gemv_q (LMC_CUDA_QGLU=0: declined) */
            const int glu_q = dec_q && !(getenv("LMC_CUDA_QGLU") && !strcmp(getenv("LMC_CUDA_QGLU"), "0"));
            CHECK_MSG(took == (dec_f || glu_q), "fused rms glu %s in %lld n %lld: taken %d", lmc_dtype_name(t),
                      (long long)in, (long long)n, took);
            snprintf(what, sizeof what, "fused rms glu %s in %lld n %lld", lmc_dtype_name(t), (long long)in, (long long)n);
            if (took && (!qv || o1 >= 8)) compare(&y[1], qv ? 2e-2 : tol, what); /* int8 activations of two products: F2 */
            if (took && qv) { /* and the GPU's plain sequence (as in 1.; act·mul amplifies a flip: 5e-3) */
                pair ya, yb;
                pair_alloc(&ya, LMC_DTYPE_F32, o1, n, 1);
                pair_alloc(&yb, LMC_DTYPE_F32, o1, n, 1);
                gpu->i->rms_norm(gpu, &h.g, &x.g, none ? NULL : &g.g, 1e-5f, off);
                gpu->i->matmul(gpu, &ya.g, wg[1], &h.g);
                gpu->i->matmul(gpu, &yb.g, wg[2], &h.g);
                gpu->i->act_mul(gpu, &ya.g, &ya.g, &yb.g, act);
                compare_gpu(&y[1].g, &ya.g, 5e-3, what);
                pair_free(&ya);
                pair_free(&yb);
            }
            cnt[1] += took;
            /* 3. y0 (+)= w0 · (act(x) · x2); the int8 path quantizes the very values act_mul makes, so it
             * also equals the GPU's own plain sequence up to summation order */
            for (int accum = 0; accum < 2; accum++) {
                op = (lmc_fuse_op){.in = LMC_FUSE_IN_GLU, .out = accum ? LMC_FUSE_OUT_ACC : LMC_FUSE_OUT_SET,
                                   .x2 = &x2.g, .act = act};
                ref->i->act_mul(ref, &h.c, &x.c, &x2.c, act);
                ref->i->matmul(ref, &tmp.c, &w[0].c, &h.c);
                if (accum) ref->i->add(ref, &y[0].c, &y[0].c, &tmp.c);
                else ref->i->matmul(ref, &y[0].c, &w[0].c, &h.c);
                gpu->i->act_mul(gpu, &h.g, &x.g, &x2.g, act);
                gpu->i->matmul(gpu, &tmp.g, wg[0], &h.g);
                if (accum) gpu->i->add(gpu, &yp.g, &y[0].g, &tmp.g);
                else gpu->i->matmul(gpu, &yp.g, wg[0], &h.g);
                took = gpu->i->matmul_fused(gpu, 1, yg, wg, &x.g, &op);
                CHECK_MSG(took == (dec_q || gemm), "fused glu-in %s in %lld n %lld: taken %d", lmc_dtype_name(t),
                          (long long)in, (long long)n, took);
                if (!took) { /* keep the two sides equal for the next case */
                    gpu->i->act_mul(gpu, &h.g, &x.g, &x2.g, act);
                    gpu->i->matmul(gpu, &tmp.g, wg[0], &h.g);
                    if (accum) gpu->i->add(gpu, &y[0].g, &y[0].g, &tmp.g);
                    else gpu->i->matmul(gpu, &y[0].g, wg[0], &h.g);
                }
                snprintf(what, sizeof what, "fused glu-in %s %s in %lld n %lld", accum ? "acc" : "set", lmc_dtype_name(t),
                         (long long)in, (long long)n);
                compare(&y[0], qv ? 2e-2 : tol, what); /* int8 activations of a product: F2 */
                if (took) compare_gpu(&y[0].g, &yp.g, 1e-5, what);
                cnt[2] += took;
            }
            /* 4. y0 += w0 · x (the residual add; any dtype but MLX, cuBLAS past the decode kernels' tokens) */
            op = (lmc_fuse_op){.in = LMC_FUSE_IN_X, .out = LMC_FUSE_OUT_ACC};
            ref->i->matmul(ref, &tmp.c, &w[0].c, &x.c);
            ref->i->add(ref, &y[0].c, &y[0].c, &tmp.c);
            took = gpu->i->matmul_fused(gpu, 1, yg, wg, &x.g, &op);
            CHECK_MSG(took == !lmc_dtype_is_mlx(t), "fused acc %s in %lld n %lld: taken %d", lmc_dtype_name(t),
                      (long long)in, (long long)n, took);
            if (took) {
                snprintf(what, sizeof what, "fused acc %s in %lld n %lld", lmc_dtype_name(t), (long long)in, (long long)n);
                compare(&y[0], tol, what);
            }
            cnt[3] += took;
            /* nothing fused is not a fused product */
            op = (lmc_fuse_op){.in = LMC_FUSE_IN_X, .out = LMC_FUSE_OUT_SET};
            CHECK(gpu->i->matmul_fused(gpu, 1, yg, wg, &x.g, &op) == 0);
            for (int i = 0; i < 3; i++) {
                pair_free(&y[i]);
                weight_free(&w[i]);
            }
            weight_free(&g);
            pair_free(&x);
            pair_free(&x2);
            pair_free(&h);
            pair_free(&tmp);
            pair_free(&yp);
        }
    }
    printf("matmul_fused taken: rms %d, rms glu %d, glu-in %d, acc %d\n", cnt[0], cnt[1], cnt[2], cnt[3]);
    CHECK(cnt[0] > 0 && cnt[1] > 0 && cnt[2] > 0 && cnt[3] > 0);
}

static void test_get_rows(void) {
    const lmc_dtype types[] = {LMC_DTYPE_F32, LMC_DTYPE_F16, LMC_DTYPE_BF16, LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0,
                               LMC_DTYPE_Q5_1, LMC_DTYPE_Q4_K, LMC_DTYPE_Q6_K, LMC_DTYPE_MLX4, LMC_DTYPE_MLX3};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        weight w;
        weight_make(&w, types[ti], 512, 50);
        int32_t ids[7] = {0, 49, 3, 3, 17, 25, 8};
        pair id, y;
        pair_i32(&id, ids, 7);
        pair_alloc(&y, LMC_DTYPE_F32, 512, 7, 1);
        ref->i->get_rows(ref, &y.c, &w.c, &id.c, 1.5f);
        gpu->i->get_rows(gpu, &y.g, &w.g, &id.g, 1.5f);
        char what[64];
        snprintf(what, sizeof what, "get_rows %s", lmc_dtype_name(types[ti]));
        compare(&y, 1e-6, what);
        pair_free(&id);
        pair_free(&y);
        weight_free(&w);
    }
}

static void test_elementwise(void) {
    const int64_t shapes[][2] = {{64, 3}, {896, 5}, {4099, 2}};
    for (size_t si = 0; si < 3; si++) {
        const int64_t d = shapes[si][0], n = shapes[si][1];
        pair a, b, y;
        pair_f32(&a, d, n, 1, 4.0f);
        pair_f32(&b, d, n, 1, 4.0f);
        pair_alloc(&y, LMC_DTYPE_F32, d, n, 1);

        ref->i->add(ref, &y.c, &a.c, &b.c);
        gpu->i->add(gpu, &y.g, &a.g, &b.g);
        compare(&y, 1e-6, "add");
        ref->i->scale(ref, &y.c, &a.c, -0.37f);
        gpu->i->scale(gpu, &y.g, &a.g, -0.37f);
        compare(&y, 1e-6, "scale");
        ref->i->softcap(ref, &y.c, &a.c, 2.5f);
        gpu->i->softcap(gpu, &y.g, &a.g, 2.5f);
        compare(&y, 1e-5, "softcap");
        /* xIELU with apertus-like parameters (softplus(0.8), 0.5 + softplus(0.8), 0.5, -1e-6), out of place
         * and in place; inputs span both branches and the eps clamp */
        const float xp[4] = {1.1711f, 1.6711f, 0.5f, -1e-6f};
        ref->i->xielu(ref, &y.c, &a.c, xp);
        gpu->i->xielu(gpu, &y.g, &a.g, xp);
        compare(&y, 1e-5, "xielu");
        ref->i->xielu(ref, &y.c, &y.c, xp);
        gpu->i->xielu(gpu, &y.g, &y.g, xp);
        compare(&y, 1e-5, "xielu in place");
        for (int act = LMC_ACT_SILU; act <= LMC_ACT_RELU2; act++) {
            char what[48];
            ref->i->act(ref, &y.c, &a.c, (lmc_act)act);
            gpu->i->act(gpu, &y.g, &a.g, (lmc_act)act);
            snprintf(what, sizeof what, "act %d", act);
            compare(&y, 1e-5, what);
            ref->i->act_mul(ref, &y.c, &a.c, &b.c, (lmc_act)act);
            gpu->i->act_mul(gpu, &y.g, &a.g, &b.g, (lmc_act)act);
            snprintf(what, sizeof what, "act_mul %d", act);
            compare(&y, 1e-5, what);
        }
        /* bias of each float dtype, in place */
        const lmc_dtype bt[] = {LMC_DTYPE_F32, LMC_DTYPE_BF16, LMC_DTYPE_F16};
        for (int k = 0; k < 3; k++) {
            weight bias;
            weight_make(&bias, bt[k], d, 1);
            bias.c.ne[1] = bias.g.ne[1] = 1;
            ref->i->add(ref, &y.c, &a.c, &b.c);
            gpu->i->add(gpu, &y.g, &a.g, &b.g);
            lmc_tensor bc = lmc_tensor_reshape(&bias.c, d, 1, 1, 1), bg = lmc_tensor_reshape(&bias.g, d, 1, 1, 1);
            ref->i->add_bias(ref, &y.c, &bc);
            gpu->i->add_bias(gpu, &y.g, &bg);
            compare(&y, 1e-6, "add_bias");
            weight_free(&bias);
        }
        pair_free(&a);
        pair_free(&b);
        pair_free(&y);
    }
}

static void test_norms(void) {
    /* 9000 > 8 · 1024: the row does not stay in registers */
    const int64_t shapes[][2] = {{64, 3}, {896, 5}, {4099, 2}, {128, 24}, {9000, 2}};
    for (size_t si = 0; si < 5; si++) {
        const int64_t d = shapes[si][0], n = shapes[si][1];
        pair x, y;
        pair_f32(&x, d, n, 1, 3.0f);
        pair_alloc(&y, LMC_DTYPE_F32, d, n, 1);
        weight w1, w4, b1;
        weight_make(&w1, LMC_DTYPE_BF16, d, 1);
        weight_make(&b1, LMC_DTYPE_F32, d, 1);
        const int64_t R = n % 4 == 0 ? 4 : 1; /* per-head weights: rows r use w row r mod R */
        weight_make(&w4, LMC_DTYPE_F32, d, R);
        ref->i->rms_norm(ref, &y.c, &x.c, &w1.c, 1e-6f, 0.0f);
        gpu->i->rms_norm(gpu, &y.g, &x.g, &w1.g, 1e-6f, 0.0f);
        compare(&y, 1e-5, "rms_norm");
        ref->i->rms_norm(ref, &y.c, &x.c, &w4.c, 1e-5f, 1.0f);
        gpu->i->rms_norm(gpu, &y.g, &x.g, &w4.g, 1e-5f, 1.0f);
        compare(&y, 1e-5, "rms_norm rows + offset");
        ref->i->rms_norm(ref, &y.c, &x.c, NULL, 1e-6f, 0.0f);
        gpu->i->rms_norm(gpu, &y.g, &x.g, NULL, 1e-6f, 0.0f);
        compare(&y, 1e-5, "rms_norm no weight");
        ref->i->layer_norm(ref, &y.c, &x.c, &w1.c, &b1.c, 1e-5f);
        gpu->i->layer_norm(gpu, &y.g, &x.g, &w1.g, &b1.g, 1e-5f);
        compare(&y, 1e-5, "layer_norm");
        ref->i->layer_norm(ref, &y.c, &x.c, NULL, NULL, 1e-5f);
        gpu->i->layer_norm(gpu, &y.g, &x.g, NULL, NULL, 1e-5f);
        compare(&y, 1e-5, "layer_norm bare");
        /* the residual add fused with the norm after it: x += r, y = norm(x) */
        pair r;
        pair_f32(&r, d, n, 1, 1.0f);
        ref->i->add_rms_norm(ref, &x.c, &r.c, &y.c, &w4.c, 1e-5f, 1.0f);
        gpu->i->add_rms_norm(gpu, &x.g, &r.g, &y.g, &w4.g, 1e-5f, 1.0f);
        compare(&y, 1e-5, "add_rms_norm");
        compare(&x, 1e-6, "add_rms_norm sum");
        ref->i->add_rms_norm(ref, &x.c, &r.c, &y.c, NULL, 1e-6f, 0.0f);
        gpu->i->add_rms_norm(gpu, &x.g, &r.g, &y.g, NULL, 1e-6f, 0.0f);
        compare(&y, 1e-5, "add_rms_norm no weight");
        pair_free(&r);
        /* in place */
        ref->i->rms_norm(ref, &x.c, &x.c, &w1.c, 1e-6f, 0.0f);
        gpu->i->rms_norm(gpu, &x.g, &x.g, &w1.g, 1e-6f, 0.0f);
        compare(&x, 1e-5, "rms_norm in place");
        weight_free(&w1);
        weight_free(&w4);
        weight_free(&b1);
        pair_free(&x);
        pair_free(&y);
    }
}

#include "cuda_test_rope.h" /* test_rope, test_rope_store, test_matmul_fused_rope */

/* Fill caches through kv_store, then attend with decode-like and prefill-like batches.
 * Batches of ≥ 64 tokens with head_dim ≤ 256 take the tensor-core kernel (bf16 operands:
 * tol 1e-2), the others f32 (1e-4). attn_qamp scales the queries (peaked softmax when > 1). */
static float attn_qamp = 1.0f;
static float attn_sink_amp = 0.0f; /* > 0: attention sinks, one logit per head uniform in ±amp */
static void attn_case(int hd, int nh, int nkv, int n_ctx, int n_seq, int window, float softcap, int n,
                      const int32_t *qpos, const int32_t *qseq) {
    const int row = hd * nkv;
    pair kc, vc, kv, vv, fpos, fseq;
    pair_alloc(&kc, LMC_DTYPE_F32, row, n_ctx, n_seq);
    pair_alloc(&vc, LMC_DTYPE_F32, row, n_ctx, n_seq);
    const int nf = n_ctx * n_seq;
    pair_f32(&kv, row, nf, 1, 1.0f);
    pair_f32(&vv, row, nf, 1, 1.0f);
    int32_t *p = malloc((size_t)nf * 4), *s = malloc((size_t)nf * 4);
    for (int i = 0; i < nf; i++) { p[i] = i % n_ctx + n_ctx; s[i] = i / n_ctx; } /* ring positions */
    pair_i32(&fpos, p, nf);
    pair_i32(&fseq, s, nf);
    ref->i->kv_store(ref, &kc.c, &kv.c, &fpos.c, &fseq.c);
    gpu->i->kv_store(gpu, &kc.g, &kv.g, &fpos.g, &fseq.g);
    ref->i->kv_store(ref, &vc.c, &vv.c, &fpos.c, &fseq.c);
    gpu->i->kv_store(gpu, &vc.g, &vv.g, &fpos.g, &fseq.g);
    compare(&kc, 0, "kv_store");

    pair q, out, qp, qs;
    pair_f32(&q, hd * nh, n, 1, attn_qamp);
    pair_alloc(&out, LMC_DTYPE_F32, hd * nh, n, 1);
    pair_i32(&qp, qpos, n);
    pair_i32(&qs, qseq, n);
    pair sk; /* drawn only with sinks: the cases without draw the same random inputs as before sinks existed */
    const int sinks = attn_sink_amp > 0;
    if (sinks) pair_f32(&sk, nh, 1, 1, attn_sink_amp);
    lmc_attn_op op = {.n_head = nh, .n_kv_head = nkv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                      .softcap = softcap, .window = window};
    op.sinks = sinks ? &sk.c : NULL;
    ref->i->attention(ref, &out.c, &q.c, &kc.c, &vc.c, &qp.c, &qs.c, &op);
    op.sinks = sinks ? &sk.g : NULL;
    gpu->i->attention(gpu, &out.g, &q.g, &kc.g, &vc.g, &qp.g, &qs.g, &op);
    char what[160];
    snprintf(what, sizeof what, "attention hd %d heads %d/%d ctx %d window %d softcap %g n %d qamp %g sinks %g", hd, nh,
             nkv, n_ctx, window, softcap, n, attn_qamp, attn_sink_amp);
    compare(&out, n >= 64 && hd % 4 == 0 && hd <= 256 ? 1e-2 : 1e-4, what);
    pair *all[] = {&kc, &vc, &kv, &vv, &fpos, &fseq, &q, &out, &qp, &qs};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
    if (sinks) pair_free(&sk);
    free(p);
    free(s);
}

static void test_attention(void) {
    int32_t pos[64], seq[64];
    /* decode: one token per sequence */
    int32_t dp[3] = {5, 39, 77}, ds[3] = {0, 1, 2};
    attn_case(64, 8, 2, 40, 3, 0, 0, 3, dp, ds);
    attn_case(128, 4, 4, 40, 3, 7, 30.0f, 3, dp, ds);
    attn_case(48, 6, 3, 40, 3, 0, 0, 3, dp, ds);
    attn_case(256, 2, 1, 40, 3, 16, 0, 3, dp, ds);
    attn_case(512, 4, 2, 40, 3, 0, 0, 3, dp, ds);
    attn_case(64, 32, 2, 40, 3, 0, 0, 3, dp, ds); /* 16 query heads per KV head */
    /* long cache: split-K */
    int32_t lp[2] = {1999, 1234}, ls[2] = {0, 1};
    attn_case(128, 8, 2, 2000, 2, 0, 0, 2, lp, ls);
    attn_case(64, 4, 1, 2000, 2, 500, 50.0f, 1, lp, ls);
    /* prefill: 64 consecutive positions of one sequence, then a mixed batch */
    for (int i = 0; i < 64; i++) { pos[i] = i; seq[i] = 1; }
    attn_case(64, 8, 2, 80, 2, 0, 0, 64, pos, seq);
    attn_case(64, 8, 8, 80, 2, 9, 0, 64, pos, seq);
    for (int i = 0; i < 64; i++) { pos[i] = (i * 37) % 150; seq[i] = i % 3; }
    attn_case(96, 4, 2, 160, 3, 0, 0, 64, pos, seq);

    /* tensor-core prefill: row tails, head_dim 64/80/128/256, GQA groups 1..16, windows, softcap,
     * ring slots (positions past n_ctx), a continuation after cached positions, peaked softmax */
    int32_t *bp = malloc(300 * sizeof *bp), *bs = malloc(300 * sizeof *bs);
    for (int i = 0; i < 300; i++) { bp[i] = i; bs[i] = 0; }
    attn_case(128, 32, 8, 256, 1, 0, 0, 200, bp, bs);
    attn_case(64, 16, 1, 40, 1, 0, 0, 64, bp, bs);   /* 16 query heads per KV head; ring, n_ctx clamp */
    attn_case(64, 8, 2, 40, 1, 16, 0, 65, bp, bs);   /* ring with a window */
    attn_qamp = 4.0f;
    attn_case(128, 32, 8, 300, 1, 0, 0, 300, bp, bs);
    for (int i = 0; i < 96; i++) { bp[i] = 100 + i; bs[i] = 1; }
    attn_case(256, 4, 2, 256, 2, 50, 30.0f, 96, bp, bs);
    for (int i = 0; i < 70; i++) { bp[i] = 30 + i; bs[i] = 0; }
    attn_case(80, 8, 8, 128, 1, 0, 0, 70, bp, bs);
    attn_case(128, 8, 2, 128, 1, 20, 0, 70, bp, bs);
    for (int i = 0; i < 150; i++) { bp[i] = i < 75 ? 200 + i : i - 75; bs[i] = i < 75 ? 2 : 0; } /* two prompts */
    attn_case(64, 12, 4, 320, 3, 0, 0, 150, bp, bs);
    /* decode kernel: many tokens of mixed sequences over a split cache, a ring shorter than a step */
    for (int i = 0; i < 20; i++) { bp[i] = (i * 613) % 2000; bs[i] = i % 2; }
    attn_case(128, 32, 8, 2000, 2, 0, 0, 20, bp, bs);
    attn_case(256, 8, 1, 2000, 2, 700, 20.0f, 20, bp, bs);
    int32_t rp[3] = {25, 44, 7}, rs[3] = {0, 1, 0};
    attn_case(64, 8, 2, 20, 2, 0, 0, 3, rp, rs);
    attn_qamp = 1.0f;
    free(bp);
    free(bs);
}

/* The decode kernels are instantiated by query heads a KV head (cuda_attn.cu: 4, 8, 16): groups of 8 and 7
 * (k_attn_dec_cl<8>; the split form k_attn_dec<1, 8>), 8 at head_dim 256 (k_attn_dec<2, 16>), one token of
 * three sequences, positions past the 40-slot ring. */
static void test_attention_groups(void) {
    int32_t dp[3] = {5, 39, 77}, ds[3] = {0, 1, 2};
    for (int form = 0; form < 2; form++) {
        setenv("LMC_CUDA_DEC_CLUSTER", form ? "0" : "1", 1);
        attn_case(64, 16, 2, 40, 3, 0, 0, 3, dp, ds);
        attn_case(128, 14, 2, 40, 3, 0, 0, 3, dp, ds);
        attn_case(256, 16, 2, 40, 3, 0, 0, 3, dp, ds);
    }
    unsetenv("LMC_CUDA_DEC_CLUSTER");
}

/* Batched decode as bench_cuda's 32 sequences: short ranges in a long cache (a batch's splits bounded,
 * cuda_attn.cu dec_splits: one split each here), and 8 sequences of long ranges (several splits merged). */
static void test_attention_batch(void) {
    int32_t bp[32], bs[32];
    for (int i = 0; i < 32; i++) { bp[i] = 16 + (i * 7) % 64; bs[i] = i; }
    attn_case(128, 32, 8, 2128, 32, 0, 0, 32, bp, bs);
    for (int i = 0; i < 8; i++) { bp[i] = 2127 - 300 * i; bs[i] = i; }
    attn_case(128, 32, 8, 2128, 8, 0, 0, 8, bp, bs);
}

/* The decode kernel's two forms on the same cases: the cluster form (head_dim ≤ 128, the default:
 * splits merged through the cluster's shared memory, pieces of a long range through partials) and
 * the split form with its counters (LMC_CUDA_DEC_CLUSTER=0); caches of 1..8 splits a cluster, one to
 * eight pieces of one step a split and longer pieces past 2048 positions (24 pieces with
 * LMC_CUDA_DEC_PIECES=32), short ranges in long caches, windows, softcaps, sinks, rings, 16-head
 * groups. */
static void test_attention_cluster(void) {
    int32_t dp[3] = {5, 39, 77}, ds[3] = {0, 1, 2}, p2[2] = {499, 300}, s2[2] = {0, 1}, p1[1] = {511}, s1[1] = {0};
    int32_t p4[4] = {600, 3, 64, 130}, s4[4] = {0, 1, 2, 3}, lp[2] = {1999, 1234}, ls[2] = {0, 1};
    int32_t pl[1] = {2047}, sl[1] = {0}, pv[3] = {5999, 2500, 70}, sv[3] = {0, 1, 1};
    for (int form = 0; form < 2; form++) {
        setenv("LMC_CUDA_DEC_CLUSTER", form ? "0" : "1", 1);
        attn_case(128, 8, 2, 2000, 2, 0, 0, 2, lp, ls);      /* 8 pieces */
        attn_case(64, 4, 1, 2048, 1, 0, 0, 1, pl, sl);      /* the most pieces, all full */
        attn_case(128, 8, 2, 2048, 1, 1500, 0, 1, pl, sl);  /* a window over 6 pieces */
        attn_case(128, 8, 2, 2049, 1, 0, 0, 1, pl, sl);     /* one slot more: 8 pieces of 256 still */
        attn_case(128, 8, 2, 6000, 1, 0, 0, 1, pv, sv);     /* 8 pieces of 768: three steps a split */
        attn_case(64, 8, 2, 6000, 2, 0, 0, 3, pv, sv);      /* 768, 512 and 256 positions a piece */
        attn_case(128, 8, 2, 6000, 1, 3000, 0, 1, pv, sv);  /* a window: pieces of 512 */
        setenv("LMC_CUDA_DEC_PIECES", "32", 1);
        attn_case(128, 8, 2, 6000, 1, 0, 0, 1, pv, sv);     /* 24 pieces of 256 */
        unsetenv("LMC_CUDA_DEC_PIECES");
        attn_case(128, 32, 8, 96, 1, 0, 0, 1, dp + 2, ds); /* the Llama-8B decode of bench_cuda */
        attn_case(64, 8, 2, 40, 3, 0, 0, 3, dp, ds);
        attn_case(128, 32, 8, 500, 2, 0, 0, 2, p2, s2);
        attn_case(64, 32, 2, 512, 1, 100, 30.0f, 1, p1, s1);
        attn_case(48, 6, 3, 256, 4, 0, 0, 4, p4, s4);
        attn_case(128, 8, 8, 31, 4, 7, 0, 4, p4, s4);
        attn_qamp = 4.0f;
        attn_sink_amp = 2.0f;
        attn_case(128, 16, 4, 200, 2, 0, 0, 2, p2, s2);
        attn_case(64, 8, 2, 40, 3, 16, 0, 3, dp, ds);
        attn_case(128, 8, 2, 2000, 2, 300, 0, 2, lp, ls);
        attn_sink_amp = 0.0f;
        attn_qamp = 1.0f;
    }
    unsetenv("LMC_CUDA_DEC_CLUSTER");
}

/* Attention sinks (gpt-oss) through every kernel's ending: decode in one split and split-K merged
 * by the last split (k_attn_dec_combine under LMC_CUDA_ATTN_MERGE=0), the generic kernel alone and
 * with k_attn_combine (head_dim 512), the tensor-core prefill with the bf16 copy (k_fattn2) and
 * without (head_dim 68: k_fattn); sinks from small to dominant (±8), windows, peaked queries. */
static void test_attention_sinks(void) {
    int32_t dp[3] = {5, 39, 77}, ds[3] = {0, 1, 2}, lp[2] = {1999, 1234}, ls[2] = {0, 1};
    int32_t pos[64], seq[64];
    for (int i = 0; i < 64; i++) { pos[i] = i; seq[i] = 1; }
    const float amps[2] = {2.0f, 8.0f};
    for (int ai = 0; ai < 2; ai++) {
        attn_sink_amp = amps[ai];
        attn_case(64, 8, 2, 40, 3, 0, 0, 3, dp, ds);        /* decode, one split */
        attn_case(64, 8, 2, 40, 3, 16, 0, 3, dp, ds);       /* with a window */
        attn_case(128, 8, 2, 2000, 2, 0, 0, 2, lp, ls);     /* split-K, merged */
        attn_case(64, 4, 1, 2000, 2, 500, 0, 2, lp, ls);
        attn_case(512, 4, 2, 40, 3, 0, 0, 3, dp, ds);       /* generic, k_attn_combine */
        attn_case(512, 4, 2, 16, 1, 0, 0, 1, dp, ds);       /* generic, one split */
        attn_case(64, 8, 2, 80, 2, 0, 0, 64, pos, seq);     /* k_fattn2 */
        attn_case(64, 8, 2, 80, 2, 9, 0, 64, pos, seq);
        attn_case(68, 4, 2, 80, 2, 0, 0, 64, pos, seq);     /* k_fattn */
        attn_qamp = 4.0f;
        attn_case(128, 8, 2, 80, 2, 20, 0, 64, pos, seq);
        attn_case(64, 8, 2, 2000, 2, 0, 0, 2, lp, ls);
        attn_qamp = 1.0f;
    }
    attn_sink_amp = 0.0f;
}

/* Decode attention over long ranges, where a token's splits grow past the launch's length
 * (LMC_CUDA_DEC_SPLITS): one and several tokens, a window, a cache long enough for the launch's own
 * splits to double (n_ctx 20000), sinks. */
static void test_attention_long(void) {
    int32_t p1[1] = {5999}, s1[1] = {0};
    attn_case(64, 8, 2, 6000, 1, 0, 0, 1, p1, s1);
    attn_case(128, 8, 2, 6000, 1, 5000, 0, 1, p1, s1);
    int32_t p3[3] = {5999, 4100, 70}, s3[3] = {0, 1, 1};
    attn_case(64, 8, 2, 6000, 2, 0, 20.0f, 3, p3, s3);
    p1[0] = 19999;
    attn_case(64, 4, 1, 20000, 1, 0, 0, 1, p1, s1);
    attn_sink_amp = 2.0f;
    p1[0] = 8191;
    attn_case(128, 8, 2, 8192, 1, 0, 0, 1, p1, s1);
    attn_sink_amp = 0.0f;
}

/* Sampling reductions (argmax, topk) against the CPU backend's exactly: rows with heavy ties,
 * -0/+0, NaN (also first), ±inf, all -inf / all NaN, lengths around the 2048-key chunk and full
 * vocabularies (151936, 262144), 1..16 rows; topk sums within 1e-10 relative (backend.h: the CPU sums
 * in index order, the GPU per chunk; 1.2e-12 was seen at V = 262144). */
static void sample_row(float *r, int64_t V, int kind) {
    for (int64_t i = 0; i < V; i++) {
        float v = 8.0f * frand();
        if (kind == 1) { v = (float)((int)(fabsf(frand()) * 7.0f) - 3) * 0.5f; if (v == 0 && frand() < 0) v = -0.0f; }
        if (kind == 2 && frand() > 0.96f) v = frand() > 0 ? NAN : -INFINITY;
        if (kind == 3 && i == 0) v = NAN;
        if (kind == 4) v = -INFINITY;
        if (kind == 5) v = frand() > 0 ? NAN : -INFINITY;
        if (kind == 6 && frand() > 0.99f) v = INFINITY;
        r[i] = v;
    }
}

static void test_sample(void) {
    const int64_t Vs[] = {1, 100, 2047, 2049, 5000, 151936, 262144};
    const int64_t ns[] = {1, 3, 16};
    const int ks[] = {1, 40, 256};
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int64_t V = Vs[vi], n = ns[ni];
            float *h = malloc((size_t)(V * n) * 4);
            for (int64_t t = 0; t < n; t++) sample_row(h + t * V, V, (int)((t + vi) % 7));
            pair x, ids;
            pair_alloc(&x, LMC_DTYPE_F32, V, n, 1);
            pair_set(&x, h);
            pair_alloc(&ids, LMC_DTYPE_I32, n, 1, 1);
            ref->i->argmax(ref, &ids.c, &x.c);
            gpu->i->argmax(gpu, &ids.g, &x.g);
            char what[96];
            snprintf(what, sizeof what, "argmax V %lld n %lld", (long long)V, (long long)n);
            compare_i32(&ids, what);
            pair_free(&ids);
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                const int k = ks[ki];
                const float scale = ki == 1 ? 1.0f / 0.7f : 1.0f;
                pair ti, tv, ts;
                pair_alloc(&ti, LMC_DTYPE_I32, k, n, 1);
                pair_alloc(&tv, LMC_DTYPE_F32, k, n, 1);
                pair_alloc(&ts, LMC_DTYPE_F32, 4, n, 1);
                ref->i->topk(ref, &ti.c, &tv.c, &ts.c, &x.c, k, scale);
                gpu->i->topk(gpu, &ti.g, &tv.g, &ts.g, &x.g, k, scale);
                snprintf(what, sizeof what, "topk V %lld n %lld k %d", (long long)V, (long long)n, k);
                compare_i32(&ti, what);
                float *a = malloc((size_t)(k * n) * 4), *b = malloc((size_t)(k * n) * 4);
                ref->i->get(ref, a, &tv.c, 0, (size_t)(k * n) * 4);
                gpu->i->get(gpu, b, &tv.g, 0, (size_t)(k * n) * 4);
                CHECK_MSG(memcmp(a, b, (size_t)(k * n) * 4) == 0, "%s: values differ", what);
                float sa[64], sb[64];
                ref->i->get(ref, sa, &ts.c, 0, (size_t)n * 16);
                gpu->i->get(gpu, sb, &ts.g, 0, (size_t)n * 16);
                for (int64_t t = 0; t < n; t++) {
                    const double ra = (double)sa[t * 4 + 1] + sa[t * 4 + 2], rb = (double)sb[t * 4 + 1] + sb[t * 4 + 2];
                    CHECK_MSG(memcmp(&sa[t * 4], &sb[t * 4], 4) == 0, "%s: max %g vs %g", what, sb[t * 4], sa[t * 4]);
                    CHECK_MSG((isnan(ra) && isnan(rb)) || fabs(ra - rb) <= 1e-10 * fabs(ra), "%s row %lld: sum %.17g vs %.17g",
                              what, (long long)t, rb, ra);
                }
                free(a);
                free(b);
                pair_free(&ti);
                pair_free(&tv);
                pair_free(&ts);
            }
            pair_free(&x);
            free(h);
        }
}

/* Q8_0/Q4_0 products of 9..64 tokens (cuda_mmq.cu: int8 tensor cores, K split over a cluster)
 * against int8_ref (1e-5: the same int8 activations, only float summation order differs) and the
 * f32 CPU reference (1e-2). Shapes: odd row counts, rows past the last tile, K of one block, K
 * not a multiple of the blocks a lane loads at once (544 = 17 blocks), long K (14336, 8 splits),
 * one split (51000 rows of 2 blocks), tokens not a multiple of 8; then matmul_n (three heights,
 * one launch) and matmul_fused's y += w·x. LMC_CUDA_MMQ=0: the same cases through cuBLAS (1e-2). */
static void mmq_check(lmc_dtype t, const weight *w, int64_t in, int64_t out, const float *xh, int64_t n,
                      const lmc_tensor *yg, const float *base, const char *what) {
    float *yr = malloc((size_t)(out * n) * sizeof *yr), *gv = malloc((size_t)(out * n) * sizeof *gv);
    int8_ref(t, w->bytes, in, out, xh, n, yr);
    CHECK_MSG(gpu->i->sync(gpu) == 0, "%s: %s", what, lmc_last_error());
    gpu->i->get(gpu, gv, yg, 0, (size_t)(out * n) * 4);
    double err = 0, mx = 0;
    for (int64_t i = 0; i < out * n; i++) {
        const double r = (double)yr[i] + (base ? base[i] : 0.0);
        err = fmax(err, fabs(r - gv[i]));
        mx = fmax(mx, fabs(r));
    }
    CHECK_MSG(err <= 1e-5 * mx && mx > 0, "%s vs int8 host reference: max|Δ| %.3g vs max|ref| %.3g", what, err, mx);
    free(yr);
    free(gv);
}

static void test_matmul_mmq(void) {
    static const int64_t shapes[][3] = {/* in, out, n_tokens */
                                        {32, 5, 9},      {64, 33, 13},   {256, 96, 16},  {544, 257, 31},
                                        {1024, 130, 32}, {4096, 40, 33}, {96, 200, 64},  {14336, 12, 24},
                                        {64, 51000, 9},  {128, 70, 57},  {2048, 129, 40}};
    const lmc_dtype types[] = {LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0};
    const int off = getenv("LMC_CUDA_MMQ") != NULL;
    int taken = 0;
    for (int ti = 0; ti < 2; ti++) {
        const lmc_dtype t = types[ti];
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t in = shapes[si][0], out = shapes[si][1], n = shapes[si][2];
            weight w;
            weight_make(&w, t, in, out);
            float *xh = malloc((size_t)(in * n) * sizeof *xh);
            for (int64_t i = 0; i < in * n; i++) /* block magnitudes 1, 4, 16; block 1 of token 0 zero */
                xh[i] = (i / 32 == 1) ? 0.0f : frand() * (float)(1 << (2 * ((i / 32) % 3)));
            pair x, y;
            pair_alloc(&x, LMC_DTYPE_F32, in, n, 1);
            pair_set(&x, xh);
            pair_alloc(&y, LMC_DTYPE_F32, out, n, 1);
            ref->i->matmul(ref, &y.c, &w.c, &x.c);
            gpu->i->matmul(gpu, &y.g, &w.g, &x.g);
            const lmc_cuda_w cw = {.type = t, .data = w.g.data, .ne0 = in, .ne1 = out, .repacked = 1};
            const int mmq = lmc_cuda_mmq_ok(&cw, n);
            CHECK_MSG(mmq || off, "%s in %lld out %lld n %lld: mmq path expected", lmc_dtype_name(t), (long long)in,
                      (long long)out, (long long)n);
            taken += mmq;
            char what[112];
            snprintf(what, sizeof what, "mmq %s in %lld out %lld n %lld", lmc_dtype_name(t), (long long)in,
                     (long long)out, (long long)n);
            compare(&y, 1e-2, what);
            if (mmq) mmq_check(t, &w, in, out, xh, n, &y.g, NULL, what);
            /* y += w·x (matmul_fused, the residual add) */
            if (out < 1000) {
                float *y0 = malloc((size_t)(out * n) * sizeof *y0);
                gpu->i->get(gpu, y0, &y.g, 0, (size_t)(out * n) * 4);
                pair tmp;
                pair_alloc(&tmp, LMC_DTYPE_F32, out, n, 1);
                ref->i->matmul(ref, &tmp.c, &w.c, &x.c);
                ref->i->add(ref, &y.c, &y.c, &tmp.c);
                const lmc_fuse_op op = {.in = LMC_FUSE_IN_X, .out = LMC_FUSE_OUT_ACC};
                lmc_tensor *yg = &y.g;
                const lmc_tensor *wg = &w.g;
                CHECK(gpu->i->matmul_fused(gpu, 1, &yg, &wg, &x.g, &op) == 1);
                snprintf(what, sizeof what, "mmq acc %s in %lld out %lld n %lld", lmc_dtype_name(t), (long long)in,
                         (long long)out, (long long)n);
                compare(&y, 1e-2, what);
                if (mmq) mmq_check(t, &w, in, out, xh, n, &y.g, y0, what);
                pair_free(&tmp);
                free(y0);
            }
            pair_free(&x);
            pair_free(&y);
            weight_free(&w);
            free(xh);
        }
        /* matmul_n: three heights over one x (q, k, v), one launch */
        const int64_t in = 1024, n = 24, outs[3] = {200, 72, 33};
        weight w[3];
        pair x, y[3];
        float *xh = malloc((size_t)(in * n) * sizeof *xh);
        for (int64_t i = 0; i < in * n; i++) xh[i] = frand();
        pair_alloc(&x, LMC_DTYPE_F32, in, n, 1);
        pair_set(&x, xh);
        lmc_tensor *yg[3];
        const lmc_tensor *wg[3];
        for (int i = 0; i < 3; i++) {
            weight_make(&w[i], t, in, outs[i]);
            pair_alloc(&y[i], LMC_DTYPE_F32, outs[i], n, 1);
            ref->i->matmul(ref, &y[i].c, &w[i].c, &x.c);
            yg[i] = &y[i].g;
            wg[i] = &w[i].g;
        }
        gpu->i->matmul_n(gpu, 3, yg, wg, &x.g);
        for (int i = 0; i < 3; i++) {
            char what[96];
            snprintf(what, sizeof what, "mmq matmul_n %d/3 %s in %lld n %lld", i, lmc_dtype_name(t), (long long)in,
                     (long long)n);
            compare(&y[i], 1e-2, what);
            if (!off) mmq_check(t, &w[i], in, outs[i], xh, n, &y[i].g, NULL, what);
            pair_free(&y[i]);
            weight_free(&w[i]);
        }
        pair_free(&x);
        free(xh);
    }
    printf("matmul_mmq: %d products on the mmq path\n", taken);
}

/* ------------------------------------------------------------ decode products of K-quants / Q4_1 / Q5_x / MLX */

/* A random [in, out] MLX weight of dtype t with groups of `group` (f16 scales/biases), bound on both. */
static void weight_make_mlx(weight *w, lmc_dtype t, int64_t in, int64_t out, int group) {
    memset(w, 0, sizeof *w);
    const size_t row = lmc_dtype_row_bytes(t, in);
    const int64_t ng = in / group;
    w->bytes = calloc((size_t)out, row);
    w->sc = malloc((size_t)(out * ng) * 2);
    w->bi = malloc((size_t)(out * ng) * 2);
    float *f = malloc((size_t)in * sizeof *f);
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++) f[i] = frand();
        lmc_mlx_row a = {group, LMC_DTYPE_F16, (uint16_t *)w->sc + (size_t)(o * ng), (uint16_t *)w->bi + (size_t)(o * ng)};
        LMC_ASSERT(lmc_quantize_row(t, f, (uint8_t *)w->bytes + (size_t)o * row, &a, in) == 0);
    }
    free(f);
    weight_bind(w, t, in, out, group, LMC_DTYPE_F16);
}

/* The formats cuda_gemv_q.cu multiplies in place, 1..8 tokens, against the CPU's product at 1e-4
 * (f32 activations): GGUF widths of 1..17 blocks (block counts that leave threads of the last
 * round idle), odd row counts, MLX with groups of 32/64/128 at widths that are multiples of the
 * group only; each product must be the one the kernels take (lmc_cuda_gemv_ok), and y += w·x
 * through matmul_fused (in x, out acc) for the GGUF ones. Q4_K/Q5_K/Q6_K take the int8 path of
 * k_gemv_q unless LMC_CUDA_KQ_INT8=0: against int8_ref at 1e-5 and the CPU at 1e-2, the latter
 * from 8 rows on (one row's sum can cancel far below the activations' rounding). */
static void test_matmul_kq(void) {
    static const lmc_dtype types[] = {LMC_DTYPE_Q4_K, LMC_DTYPE_Q5_K, LMC_DTYPE_Q6_K, LMC_DTYPE_Q2_K, LMC_DTYPE_Q3_K,
                                      LMC_DTYPE_Q4_1, LMC_DTYPE_Q5_0, LMC_DTYPE_Q5_1, LMC_DTYPE_MLX2, LMC_DTYPE_MLX3,
                                      LMC_DTYPE_MLX4, LMC_DTYPE_MLX5, LMC_DTYPE_MLX6, LMC_DTYPE_MLX8};
    static const int64_t gguf[][2] = {{256, 37}, {1280, 131}, {4352, 9}, {768, 1}}; /* in, out */
    static const int64_t mlx[][3] = {{96, 37, 32}, {4160, 11, 64}, {384, 131, 128}, {1152, 5, 32}}; /* in, out, group */
    if (getenv("LMC_CUDA_KQGEMV")) {
        printf("SKIP test_matmul_kq: LMC_CUDA_KQGEMV set\n");
        return;
    }
    int n_cases = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const lmc_dtype t = types[ti];
        const int is_mlx = lmc_dtype_is_mlx(t);
        for (int si = 0; si < 4; si++) {
            const int64_t in = is_mlx ? mlx[si][0] : gguf[si][0], out = is_mlx ? mlx[si][1] : gguf[si][1];
            weight w;
            if (is_mlx) weight_make_mlx(&w, t, in, out, (int)mlx[si][2]);
            else weight_make(&w, t, in, out);
            for (int64_t n = 1; n <= LMC_CUDA_GEMV_MAX_TOKENS; n++) {
                pair x, y, tmp;
                pair_f32(&x, in, n, 1, 1.0f);
                pair_alloc(&y, LMC_DTYPE_F32, out, n, 1);
                pair_alloc(&tmp, LMC_DTYPE_F32, out, n, 1);
                lmc_cuda_w wd = {.type = t, .data = w.g.data, .nb1 = w.g.nb[1], .ne0 = in, .ne1 = out};
                if (is_mlx) {
                    wd.mlx_scales = w.qg.scales.data;
                    wd.mlx_biases = w.qg.biases.data;
                    wd.mlx_stype = w.qg.scales.type;
                    wd.mlx_snb1 = w.qg.scales.nb[1];
                    wd.group = w.qg.group_size;
                }
                char what[128];
                snprintf(what, sizeof what, "kq gemv %s in %lld out %lld n %lld%s", lmc_dtype_name(t), (long long)in,
                         (long long)out, (long long)n, is_mlx ? (mlx[si][2] == 32 ? " g32" : mlx[si][2] == 64 ? " g64" : " g128") : "");
                CHECK_MSG(lmc_cuda_gemv_ok(&wd, x.g.data, n) == 1, "%s: not taken by the decode kernels", what);
                ref->i->matmul(ref, &y.c, &w.c, &x.c);
                gpu->i->matmul(gpu, &y.g, &w.g, &x.g);
                const int int8 = lmc_cuda_gemv_int8(t, in, n);
                float *xh = malloc((size_t)(in * n) * sizeof *xh);
                ref->i->get(ref, xh, &x.c, 0, (size_t)(in * n) * 4);
                if (!int8 || out >= 8) compare(&y, int8 ? 1e-2 : 1e-4, what);
                if (int8) mmq_check(t, &w, in, out, xh, n, &y.g, NULL, what);
                n_cases++;
                if (!is_mlx) { /* y += w·x (matmul_fused in x, out acc: the residual add) */
                    lmc_fuse_op op = {.in = LMC_FUSE_IN_X, .out = LMC_FUSE_OUT_ACC};
                    ref->i->matmul(ref, &tmp.c, &w.c, &x.c);
                    ref->i->add(ref, &y.c, &y.c, &tmp.c);
                    float *y0 = malloc((size_t)(out * n) * sizeof *y0); /* y before: the int8 reference's base */
                    CHECK(gpu->i->sync(gpu) == 0);
                    gpu->i->get(gpu, y0, &y.g, 0, (size_t)(out * n) * 4);
                    lmc_tensor *yg = &y.g;
                    const lmc_tensor *wg = &w.g;
                    CHECK_MSG(gpu->i->matmul_fused(gpu, 1, &yg, &wg, &x.g, &op) == 1, "%s: fused acc not taken", what);
                    snprintf(what + strlen(what), sizeof what - strlen(what), " (acc)");
                    if (!int8 || out >= 8) compare(&y, int8 ? 1e-2 : 1e-4, what);
                    if (int8) mmq_check(t, &w, in, out, xh, n, &y.g, y0, what);
                    free(y0);
                }
                free(xh);
                pair_free(&x);
                pair_free(&y);
                pair_free(&tmp);
            }
            weight_free(&w);
        }
    }
    printf("matmul_kq: %d products\n", n_cases);
}

/* A [in, out] Q4_K/Q5_K/Q6_K weight of random bytes (every code, scale and min value, Q6_K's
 * signed scales of both signs) with sane f16 super-block scales, bound on both backends. */
static void weight_make_kq_bytes(weight *w, lmc_dtype t, int64_t in, int64_t out) {
    memset(w, 0, sizeof *w);
    const size_t row = lmc_dtype_row_bytes(t, in), bb = lmc_dtype_block_bytes(t);
    w->bytes = calloc((size_t)out, row);
    uint8_t *p = w->bytes;
    for (size_t k = 0; k < (size_t)out * row; k++) p[k] = (uint8_t)(frand() * 128 + 128);
    for (size_t b = 0; b < (size_t)out * row / bb; b++) {
        uint8_t *blk = p + b * bb;
        if (t == LMC_DTYPE_Q6_K) put16(blk + 208, f16_scale());
        else {
            put16(blk, f16_scale());
            put16(blk + 2, f16_scale());
        }
    }
    weight_bind(w, t, in, out, 64, LMC_DTYPE_BF16);
}

/* Q4_K/Q5_K/Q6_K products of 1..8 tokens on the int8-activation path of k_gemv_q (activations
 * quantized per 32 elements, __dp4a per 16-element run): against int8_ref (1e-5: the same int8
 * activations, float summation order differs) and the f32 CPU reference (1e-2, as Q8_0/Q4_0).
 * Weights quantized from random floats and of random bytes; one super-block rows, odd row counts,
 * rows of several super-blocks, many row groups a warp (4500 rows), K of 14336 at 8 tokens, an
 * all-zero activation block; matmul_n of two K-quant matrices over one x. LMC_CUDA_KQ_INT8=0 (or
 * LMC_CUDA_QGEMV=off): the f32 kernel must take them instead (1e-4). */
static void test_matmul_kq_int8(void) {
    static const int64_t shapes[][3] = {/* in, out, n_tokens */
                                        {256, 5, 1}, {512, 33, 2}, {768, 257, 3}, {1280, 131, 4}, {256, 96, 5},
                                        {4096, 40, 6}, {1024, 70, 7}, {14336, 12, 8}, {256, 4500, 1},
                                        {4352, 9, 1}, {2048, 4400, 1}, {4096, 130, 8}};
    static const lmc_dtype types[] = {LMC_DTYPE_Q4_K, LMC_DTYPE_Q5_K, LMC_DTYPE_Q6_K};
    const int off = (getenv("LMC_CUDA_KQ_INT8") && !strcmp(getenv("LMC_CUDA_KQ_INT8"), "0")) ||
                    (getenv("LMC_CUDA_QGEMV") && !strcmp(getenv("LMC_CUDA_QGEMV"), "off"));
    int n_int8 = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const lmc_dtype t = types[ti];
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t in = shapes[si][0], out = shapes[si][1], n = shapes[si][2];
            weight w;
            /* Q5_K has no quantizer: always random bytes; Q4_K/Q6_K alternate */
            if (t == LMC_DTYPE_Q5_K || si % 2) weight_make_kq_bytes(&w, t, in, out);
            else weight_make(&w, t, in, out);
            pair x, y;
            const int int8 = int8_product(t, &w, in, out, n, &x, &y);
            char what[128];
            snprintf(what, sizeof what, "matmul %s in %lld out %lld n %lld", lmc_dtype_name(t), (long long)in,
                     (long long)out, (long long)n);
            CHECK_MSG(int8 == !off, "%s: int8 path %s expected", what, off ? "not" : "");
            if (int8) {
                n_int8++;
                /* matmul_n: this matrix and a second one of other height over the same x, one launch */
                weight w2;
                const int64_t out2 = out / 3 + 1;
                weight_make_kq_bytes(&w2, t, in, out2);
                pair y2, ya;
                pair_alloc(&y2, LMC_DTYPE_F32, out2, n, 1);
                pair_alloc(&ya, LMC_DTYPE_F32, out, n, 1);
                ref->i->matmul(ref, &ya.c, &w.c, &x.c);
                ref->i->matmul(ref, &y2.c, &w2.c, &x.c);
                gpu->i->matmul_n(gpu, 2, (lmc_tensor *[]){&ya.g, &y2.g}, (const lmc_tensor *[]){&w.g, &w2.g}, &x.g);
                snprintf(what, sizeof what, "matmul_n %s in %lld out %lld/%lld n %lld", lmc_dtype_name(t), (long long)in,
                         (long long)out, (long long)out2, (long long)n);
                compare(&ya, 1e-2, what);
                compare(&y2, 1e-2, what);
                compare_gpu(&ya.g, &y.g, 1e-5, what); /* the same int8 products as the single one */
                pair_free(&y2);
                pair_free(&ya);
                weight_free(&w2);
            }
            pair_free(&x);
            pair_free(&y);
            weight_free(&w);
        }
    }
    printf("matmul_kq_int8: %d products on the int8 path\n", n_int8);
}


/* ------------------------------------------------------------ pipelined Q8_0/Q4_0 products (k_mmqp) */

/* k_mmqp (cuda_mmq.cu) streams the weights through shared memory in stages when K is a multiple
 * of 128 (Q8_0) / 256 (Q4_0). Shapes: long K in several splits of many stages (14336, 8192), one
 * stage per split (256), row tiles past the matrix end, many row tiles (4500 rows), 9, 16, 24,
 * 33, 57 and 64 tokens (each stage count the shared memory allows); y = w·x and y += w·x, against
 * int8_ref (1e-5) and the f32 reference (1e-2). By default Q8_0 up to 32 tokens takes the wide
 * stages and Q4_0 the narrow ones; LMC_CUDA_MMQ_WIDE=1 / 0 in the environment: wide / narrow for
 * both; LMC_CUDA_MMQ_ST / LMC_CUDA_MMQ_SPLIT vary stages and splits; LMC_CUDA_MMQ_PIPE=0 or
 * LMC_CUDA_MMQ=0: k_mmq / cuBLAS. */
static void test_matmul_mmq_pipe(void) {
    static const int64_t shapes[][3] = {/* in, out, n_tokens */
                                        {4096, 300, 9},  {4096, 130, 16}, {14336, 257, 32}, {256, 140, 57},
                                        {2048, 1000, 64}, {8192, 64, 33},  {1024, 4500, 24}};
    const lmc_dtype types[] = {LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0};
    const int off = getenv("LMC_CUDA_MMQ") != NULL || getenv("LMC_CUDA_MMQ_PIPE") != NULL;
    int taken = 0;
    for (int ti = 0; ti < 2; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const lmc_dtype t = types[ti];
            const int64_t in = shapes[si][0], out = shapes[si][1], n = shapes[si][2];
            weight w;
            weight_make(&w, t, in, out);
            float *xh = malloc((size_t)(in * n) * sizeof *xh), *y0 = malloc((size_t)(out * n) * sizeof *y0);
            for (int64_t i = 0; i < in * n; i++) /* block magnitudes 1, 8, 1/8 */
                xh[i] = frand() * (float)(1 << (3 * ((i / 32) % 3))) / 8.0f;
            pair x, y, tmp;
            pair_alloc(&x, LMC_DTYPE_F32, in, n, 1);
            pair_set(&x, xh);
            pair_alloc(&y, LMC_DTYPE_F32, out, n, 1);
            pair_alloc(&tmp, LMC_DTYPE_F32, out, n, 1);
            const lmc_cuda_w cw = {.type = t, .data = w.g.data, .ne0 = in, .ne1 = out, .repacked = 1};
            const int pipe = lmc_cuda_mmq_pipelined(&cw, n);
            char what[112];
            snprintf(what, sizeof what, "mmq pipe %s in %lld out %lld n %lld", lmc_dtype_name(t), (long long)in,
                     (long long)out, (long long)n);
            CHECK_MSG(pipe || off, "%s: pipelined path expected", what);
            taken += pipe;
            ref->i->matmul(ref, &y.c, &w.c, &x.c);
            gpu->i->matmul(gpu, &y.g, &w.g, &x.g);
            compare(&y, 1e-2, what);
            if (pipe) mmq_check(t, &w, in, out, xh, n, &y.g, NULL, what);
            /* y += w·x */
            gpu->i->get(gpu, y0, &y.g, 0, (size_t)(out * n) * 4);
            ref->i->matmul(ref, &tmp.c, &w.c, &x.c);
            ref->i->add(ref, &y.c, &y.c, &tmp.c);
            const lmc_fuse_op op = {.in = LMC_FUSE_IN_X, .out = LMC_FUSE_OUT_ACC};
            lmc_tensor *yg = &y.g;
            const lmc_tensor *wg = &w.g;
            CHECK(gpu->i->matmul_fused(gpu, 1, &yg, &wg, &x.g, &op) == 1);
            snprintf(what + strlen(what), sizeof what - strlen(what), " (acc)");
            compare(&y, 1e-2, what);
            if (pipe) mmq_check(t, &w, in, out, xh, n, &y.g, y0, what);
            pair_free(&x);
            pair_free(&y);
            pair_free(&tmp);
            weight_free(&w);
            free(xh);
            free(y0);
        }
    printf("matmul_mmq_pipe: %d products on the pipelined path\n", taken);
}

/* One decode layer's ops on the GPU, the way model/forward.c chains them (fused products where the
 * backend takes them): x [D] is the residual stream. */
typedef struct chain {
    weight wq, wk, wv, wo, wg, wu, wd, norm;
    lmc_tensor x, q, k, v, att, gate, up, kc, vc, pos, seq, inv;
    int D, I, hd, nh, nkv, n_ctx;
    int prefetch; /* attention told the o, gate and up weights come next (lmc_attn_op.next_w) */
} chain;

static void chain_layer(chain *c) {
    lmc_fuse_op op = {.in = LMC_FUSE_IN_RMS, .out = LMC_FUSE_OUT_SET, .norm_w = &c->norm.g, .eps = 1e-5f,
                      .act = LMC_ACT_SILU};
    CHECK(gpu->i->matmul_fused(gpu, 3, (lmc_tensor *[]){&c->q, &c->k, &c->v},
                               (const lmc_tensor *[]){&c->wq.g, &c->wk.g, &c->wv.g}, &c->x, &op) == 1);
    lmc_tensor qh = lmc_tensor_reshape(&c->q, c->hd, c->nh, 1, 1), kh = lmc_tensor_reshape(&c->k, c->hd, c->nkv, 1, 1);
    lmc_rope_op ro = {.n_rot = c->hd, .attn_factor = 1.0f, .inv_freq = &c->inv};
    gpu->i->rope_store(gpu, &qh, &kh, &c->v, &c->kc, &c->vc, &c->pos, &c->seq, &ro);
    lmc_attn_op ao = {.n_head = c->nh, .n_kv_head = c->nkv, .head_dim = c->hd, .scale = 1.0f / sqrtf((float)c->hd),
                      .next_w = {c->prefetch ? &c->wo.g : NULL, c->prefetch ? &c->wg.g : NULL, c->prefetch ? &c->wu.g : NULL}};
    gpu->i->attention(gpu, &c->att, &c->q, &c->kc, &c->vc, &c->pos, &c->seq, &ao);
    lmc_fuse_op acc = {.in = LMC_FUSE_IN_X, .out = LMC_FUSE_OUT_ACC};
    CHECK(gpu->i->matmul_fused(gpu, 1, (lmc_tensor *[]){&c->x}, (const lmc_tensor *[]){&c->wo.g}, &c->att, &acc) == 1);
    op.out = LMC_FUSE_OUT_GLU;
    lmc_tensor *gu[] = {&c->gate, &c->up};
    const lmc_tensor *wgu[] = {&c->wg.g, &c->wu.g};
    if (gpu->i->matmul_fused(gpu, 2, gu, wgu, &c->x, &op)) { /* gate = act(gate)·up */
        CHECK(gpu->i->matmul_fused(gpu, 1, (lmc_tensor *[]){&c->x}, (const lmc_tensor *[]){&c->wd.g}, &c->gate,
                                   &acc) == 1);
        return;
    }
    op.out = LMC_FUSE_OUT_SET;
    CHECK(gpu->i->matmul_fused(gpu, 2, gu, wgu, &c->x, &op) == 1);
    lmc_fuse_op glu = {.in = LMC_FUSE_IN_GLU, .out = LMC_FUSE_OUT_ACC, .x2 = &c->up, .act = LMC_ACT_SILU};
    CHECK(gpu->i->matmul_fused(gpu, 1, (lmc_tensor *[]){&c->x}, (const lmc_tensor *[]){&c->wd.g}, &c->gate, &glu) == 1);
}

static void gpu_f32(lmc_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2) {
    *t = lmc_tensor_make(LMC_DTYPE_F32, ne0, ne1, ne2, 1);
    LMC_ASSERT(gpu->i->alloc(gpu, t) == 0);
}

/* Reset x and the caches, run `layers` layers with no host sync between the ops (graph: record
 * them and replay the recording), return the final x on the host. */
static float *chain_run(chain *c, const float *x0, const float *kv0, int layers, int graph) {
    gpu->i->set(gpu, &c->x, x0, 0, (size_t)c->D * 4);
    const size_t cb = lmc_tensor_nbytes(&c->kc);
    gpu->i->set(gpu, &c->kc, kv0, 0, cb);
    gpu->i->set(gpu, &c->vc, kv0 + cb / 4, 0, cb);
    void *g = NULL;
    if (graph) {
        CHECK(gpu->i->sync(gpu) == 0);
        graph = gpu->i->graph_begin(gpu); /* 0 with LMC_CUDA_GRAPHS=0: the ops run as they come */
    }
    for (int l = 0; l < layers; l++) chain_layer(c);
    if (graph) {
        g = gpu->i->graph_end(gpu);
        CHECK_MSG(g != NULL, "recording a decode chain failed");
        if (g) CHECK(gpu->i->graph_replay(gpu, g) == 1);
    }
    float *out = malloc((size_t)c->D * 4);
    CHECK_MSG(gpu->i->sync(gpu) == 0, "chain: %s", lmc_last_error());
    gpu->i->get(gpu, out, &c->x, 0, (size_t)c->D * 4);
    if (g) gpu->i->graph_free(gpu, g);
    return out;
}

/* Programmatic dependent launch (lmc_cuda_pdl): a chain of decode layers (fused RMSNorm + q/k/v,
 * rope_store, decode attention over a cache of several splits merged by the last split, o +=,
 * gate/up, down +=; each op reads what the one before wrote) with PDL off, on, and recorded as a
 * graph with PDL on must give the same bits: a kernel that read its input or wrote its output
 * before waiting for the previous one would see a half-written input. The serial run leaves the
 * next weights alone, the other two have attention's spare blocks prefetch o, gate and up
 * (lmc_attn_op.next_w), which must change nothing either. */
static void test_pdl_chain(void) {
    const lmc_dtype types[] = {LMC_DTYPE_BF16, LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        chain c = {.D = 1024, .I = 2816, .hd = 64, .nh = 16, .nkv = 4, .n_ctx = 512};
        const lmc_dtype t = types[ti];
        const int kvd = c.hd * c.nkv;
        weight_make(&c.wq, t, c.D, c.D);
        weight_make(&c.wk, t, c.D, kvd);
        weight_make(&c.wv, t, c.D, kvd);
        weight_make(&c.wo, t, c.D, c.D);
        weight_make(&c.wg, t, c.D, c.I);
        weight_make(&c.wu, t, c.D, c.I);
        weight_make(&c.wd, t, c.I, c.D);
        weight_make(&c.norm, LMC_DTYPE_F32, c.D, 1);
        gpu_f32(&c.x, c.D, 1, 1);
        gpu_f32(&c.q, c.D, 1, 1);
        gpu_f32(&c.k, kvd, 1, 1);
        gpu_f32(&c.v, kvd, 1, 1);
        gpu_f32(&c.att, c.D, 1, 1);
        gpu_f32(&c.gate, c.I, 1, 1);
        gpu_f32(&c.up, c.I, 1, 1);
        gpu_f32(&c.kc, kvd, c.n_ctx, 1);
        gpu_f32(&c.vc, kvd, c.n_ctx, 1);
        gpu_f32(&c.inv, c.hd / 2, 1, 1);
        c.pos = lmc_tensor_make(LMC_DTYPE_I32, 1, 1, 1, 1);
        c.seq = c.pos;
        LMC_ASSERT(gpu->i->alloc(gpu, &c.pos) == 0 && gpu->i->alloc(gpu, &c.seq) == 0);
        const int32_t p = 300, sq = 0; /* 301 positions: 5 splits of 64 */
        gpu->i->set(gpu, &c.pos, &p, 0, 4);
        gpu->i->set(gpu, &c.seq, &sq, 0, 4);
        float f[64];
        for (int i = 0; i < c.hd / 2; i++) f[i] = powf(10000.0f, -2.0f * i / c.hd);
        gpu->i->set(gpu, &c.inv, f, 0, (size_t)c.hd / 2 * 4);
        float *x0 = malloc((size_t)c.D * 4), *kv0 = malloc((size_t)kvd * c.n_ctx * 2 * 4);
        for (int i = 0; i < c.D; i++) x0[i] = frand();
        for (int i = 0; i < kvd * c.n_ctx * 2; i++) kv0[i] = frand();
        const int layers = 6;
        lmc_cuda_pdl_set(0);
        float *a = chain_run(&c, x0, kv0, layers, 0);
        c.prefetch = 1;
        lmc_cuda_pdl_set(1);
        float *b = chain_run(&c, x0, kv0, layers, 0), *g = chain_run(&c, x0, kv0, layers, 1);
        lmc_cuda_pdl_set(-1);
        int diff_b = 0, diff_g = 0, finite = 1;
        double mx = 0;
        for (int i = 0; i < c.D; i++) {
            diff_b += memcmp(&a[i], &b[i], 4) != 0;
            diff_g += memcmp(&a[i], &g[i], 4) != 0;
            finite &= isfinite(a[i]);
            mx = fmax(mx, fabs(a[i]));
        }
        CHECK_MSG(finite && mx > 0, "pdl chain %s: output not finite or zero", lmc_dtype_name(t));
        CHECK_MSG(diff_b == 0 && diff_g == 0, "pdl chain %s (pdl %d): %d / %d of %d values differ from the serial run",
                  lmc_dtype_name(t), lmc_cuda_pdl(), diff_b, diff_g, c.D);
        free(a);
        free(b);
        free(g);
        free(x0);
        free(kv0);
        weight *ws[] = {&c.wq, &c.wk, &c.wv, &c.wo, &c.wg, &c.wu, &c.wd, &c.norm};
        for (int i = 0; i < 8; i++) weight_free(ws[i]);
        lmc_tensor *ts[] = {&c.x, &c.q, &c.k, &c.v, &c.att, &c.gate, &c.up, &c.kc, &c.vc, &c.inv, &c.pos, &c.seq};
        for (int i = 0; i < 12; i++) gpu->i->release(gpu, ts[i]);
    }
}

#include "cuda_test_mxfp4.h" /* test_matmul_mxfp4, test_matmul_mxfp4_int8 */

/* The weights' arena (cuda_arena.c): blocks of odd sizes packed at 256-byte alignment without
 * overlap, what is mapped past the end under one granule, freed blocks' holes merged and reused,
 * the end lowered and the mappings past it returned, every live block's bytes intact throughout. */
static int arena_intact(void *const *p, const size_t *sz, const uint8_t *live, int n) {
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        if (!live[i]) continue;
        uint8_t *h = malloc(sz[i]);
        ok = h && cudaMemcpy(h, p[i], sz[i], cudaMemcpyDeviceToHost) == cudaSuccess;
        for (size_t k = 0; ok && k < sz[i]; k++) ok = h[k] == (uint8_t)(i + 1);
        free(h);
    }
    return ok;
}

static void test_weight_arena(void) {
    cuda_arena a;
    if (!lmc_cuda_arena_init(&a, 0)) {
        printf("  arena off (LMC_CUDA_ARENA=0 or no virtual memory management): not tested\n");
        return;
    }
    enum { N = 24 };
    const size_t MiB = (size_t)1 << 20;
    size_t sz[N];
    void *p[N] = {0};
    uint8_t live[N] = {0};
    for (int i = 0; i < N; i++) /* 2.25 MiB, 9 MiB, 31.5 MiB, a few hundred bytes, a granule plus one */
        sz[i] = i % 5 == 0 ? 9 * MiB / 4 + (size_t)i : i % 5 == 1 ? 9 * MiB : i % 5 == 2 ? 63 * MiB / 2 - 7
              : i % 5 == 3 ? 300 + (size_t)i : a.gran + 1;
    size_t used = 0;
    for (int i = 0; i < N; i++) {
        p[i] = lmc_cuda_arena_alloc(&a, sz[i]);
        CHECK(p[i] != NULL && (uintptr_t)p[i] % 256 == 0 && lmc_cuda_arena_owns(&a, p[i]));
        if (!p[i]) { lmc_cuda_arena_release(&a); return; }
        live[i] = 1;
        used += (sz[i] + 255) / 256 * 256;
        CHECK(cudaMemset(p[i], i + 1, sz[i]) == cudaSuccess);
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            if (i != j) CHECK((char *)p[i] + sz[i] <= (char *)p[j] || (char *)p[j] + sz[j] <= (char *)p[i]);
    CHECK(a.used == used && a.top == used && a.mapped >= a.top && a.mapped - a.top < a.gran && a.n_holes == 0);
    /* every third block freed, two neighbours among them (3, 4 merge into one hole) */
    const int gone[] = {3, 4, 9, 15, 21};
    for (int k = 0; k < 5; k++) {
        lmc_cuda_arena_free(&a, p[gone[k]], sz[gone[k]]);
        live[gone[k]] = 0;
        used -= (sz[gone[k]] + 255) / 256 * 256;
    }
    CHECK(a.used == used && a.n_holes == 4);
    CHECK(arena_intact(p, sz, live, N));
    /* a block that fits the merged hole of 3 and 4 lands there, below the end */
    const size_t top = a.top;
    const int r = 4;
    sz[r] = 1000;
    p[r] = lmc_cuda_arena_alloc(&a, sz[r]);
    CHECK(p[r] == p[3] && a.top == top);
    live[r] = 1;
    CHECK(cudaMemset(p[r], r + 1, sz[r]) == cudaSuccess);
    CHECK(arena_intact(p, sz, live, N));
    /* the last blocks freed from the end: the end comes down, the mappings wholly past it are returned */
    const size_t mapped = a.mapped;
    for (int i = N - 1; i >= N - 4; i--) {
        if (live[i]) lmc_cuda_arena_free(&a, p[i], sz[i]);
        live[i] = 0;
    }
    CHECK(a.top < top && a.mapped < mapped && a.n_maps > 0 && a.maps[a.n_maps - 1].off < a.top);
    CHECK(arena_intact(p, sz, live, N));
    for (int i = 0; i < N; i++)
        if (live[i]) lmc_cuda_arena_free(&a, p[i], sz[i]);
    CHECK(a.top == 0 && a.mapped == 0 && a.n_maps == 0 && a.n_holes == 0 && a.used == 0);
    /* the range is reusable after emptying */
    void *q = lmc_cuda_arena_alloc(&a, 5 * MiB);
    CHECK(q != NULL && cudaMemset(q, 7, 5 * MiB) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess);
    lmc_cuda_arena_release(&a);
    CHECK(!a.on && lmc_cuda_arena_alloc(&a, 1) == NULL);
}

int main(void) {
    if (lmc_backend_cuda_init(&gpu, 0) < 0) {
        printf("SKIP test_cuda_ops: %s\n", lmc_last_error());
        printf("RESULT 0 0\n");
        return 0;
    }
    LMC_ASSERT(lmc_backend_cpu_init(&ref, 1, 1) == 0);
    RUN(test_matmul);
    RUN(test_sample);
    RUN(test_matmul_int8);
    RUN(test_matmul_mmq);
    RUN(test_matmul_n);
    RUN(test_matmul_fused);
    RUN(test_get_rows);
    RUN(test_elementwise);
    RUN(test_norms);
    RUN(test_rope);
    RUN(test_rope_store);
    RUN(test_attention);
    RUN(test_matmul_kq);
    RUN(test_matmul_kq_int8);
    RUN(test_matmul_mmq_pipe);
    RUN(test_pdl_chain);
    RUN(test_matmul_mxfp4);
    RUN(test_attention_sinks); /* after test_matmul_mxfp4: the tests before it draw the random inputs they drew before it */
    RUN(test_attention_long); /* after them for the same reason */
    RUN(test_matmul_mxfp4_int8); /* after them for the same reason */
    RUN(test_weight_arena);
    RUN(test_matmul_int8_gemv); /* after them for the same reason */
    RUN(test_attention_cluster); /* after every test that draws random inputs, for the same reason */
    RUN(test_matmul_fused_rope); /* after them for the same reason */
    RUN(test_attention_batch); /* after them for the same reason */
    RUN(test_attention_groups); /* after them for the same reason */
    RUN(test_matmul_int8_passes); /* after them for the same reason */
    lmc_backend_free(ref);
    lmc_backend_free(gpu);
    return TEST_END();
}
