/* bench_matmul.c — speed of the CPU backend's matmul per weight type, alone.
 *
 *   build/bench/bench_matmul [--in N] [--out N] [--fit BYTES] [--tokens 1,64] [--threads 1,2] [--reps N]
 *                            [--types q8_0,q4_0,...] [--compute f32|bf16]
 *
 * A random weight [in, out] (default 896 × 151936: Qwen2.5-0.5B's tied head,
 * 130-270 MB so it streams from memory) is quantized to each type; for each
 * token count the best of --reps runs is reported as ms, weight GB/s (decode:
 * the fraction of memory bandwidth the kernel reaches) and GFLOP/s (prefill).
 * --fit BYTES sizes --out per type so the weight takes about BYTES (e.g. 1048576: it
 * stays in L2 and the figure is the kernel's compute rate, not the memory's). The cpu ms
 * column (process CPU time / threads) is less disturbed by other load than the wall clock
 * (the pool's threads spin while waiting, so with 2 threads it counts that too).
 * A benchmark, not a test: results go to docs/BENCHMARKS.md by hand.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/quant.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the whole process (all threads): on a shared machine, time-slicing inflates the
 * wall clock but not this (cpu ms column = CPU time / threads, best run). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int64_t in = 896, out = 151936;
    int toks[8] = {1, 64}, n_toks = 2, thr[8] = {1, 2}, n_thr = 2, reps = 5;
    long long fit = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--in") && i + 1 < argc) in = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fit") && i + 1 < argc) fit = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--compute") && i + 1 < argc) { /* bf16: BF16 weights on bf16 activations */
            const int on = !strcmp(argv[++i], "bf16");
            if (lmc_backend_cpu_set_bf16_compute(on) != on) {
                fprintf(stderr, "bench: no bf16 compute on this CPU\n");
                return 1;
            }
        }
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            n_toks = 0;
            for (char *t = strtok(argv[++i], ","); t && n_toks < 8; t = strtok(NULL, ",")) toks[n_toks++] = atoi(t);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            n_thr = 0;
            for (char *t = strtok(argv[++i], ","); t && n_thr < 8; t = strtok(NULL, ",")) thr[n_thr++] = atoi(t);
        } else {
            fprintf(stderr, "usage: bench_matmul [--in N] [--out N] [--fit BYTES] [--tokens 1,64] [--threads 1,2] "
                            "[--reps N] [--types bf16,q8_0,...] [--compute f32|bf16]\n");
            return 2;
        }
    }
    const lmc_dtype types[] = {LMC_DTYPE_BF16, LMC_DTYPE_F16, LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0, LMC_DTYPE_MLX4,
                               LMC_DTYPE_MLX8, LMC_DTYPE_Q4_K, LMC_DTYPE_Q6_K, LMC_DTYPE_MXFP4, LMC_DTYPE_MXFP4_MLX};
    float *row = malloc((size_t)in * sizeof *row);
    int maxt = 0;
    for (int k = 0; k < n_toks; k++) maxt = toks[k] > maxt ? toks[k] : maxt;
    float *x = malloc((size_t)in * maxt * sizeof *x), *y = NULL;
    unsigned s = 1;
    for (int64_t i = 0; i < in * maxt; i++) { s = s * 1103515245u + 12345u; x[i] = (float)((s >> 9) % 2001) / 1000.0f - 1.0f; }
    const int64_t out_arg = out;
    printf("weight [%lld, out]\n\n| type | out | threads | tokens | ms | weight GB/s | GFLOP/s | cpu ms | GFLOP/s by cpu time |\n|---|---|---|---|---|---|---|---|---|\n",
           (long long)in);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const lmc_dtype t = types[ti];
        if (only) { /* a comma-separated list of lower-case names */
            char name[16];
            snprintf(name, sizeof name, "%s", lmc_dtype_name(t));
            for (char *c = name; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
            const char *hit = strstr(only, name);
            const size_t nl = strlen(name);
            if (!hit || (hit != only && hit[-1] != ',') || (hit[nl] && hit[nl] != ',')) continue;
        }
        out = out_arg;
        if (fit) out = (int64_t)((double)fit / ((double)lmc_dtype_row_bytes(t, in) + 1e-9)) / 4 * 4 + 4;
        free(y);
        y = malloc((size_t)out * maxt * sizeof *y);
        if (in % lmc_dtype_block_elems(t)) { printf("| %s | - | - | - | (in %% %lld != 0) | | |\n", lmc_dtype_name(t), (long long)lmc_dtype_block_elems(t)); continue; }
        lmc_tensor w = lmc_tensor_make(t, in, out, 1, 1);
        size_t wbytes = lmc_tensor_nbytes(&w);
        w.data = aligned_alloc(64, (wbytes + 63) / 64 * 64);
        lmc_quant_mlx aux = {0};
        if (lmc_dtype_is_mlx(t)) {
            aux.group_size = 64;
            aux.scales = lmc_tensor_make(LMC_DTYPE_BF16, in / 64, out, 1, 1);
            aux.biases = aux.scales;
            aux.scales.data = malloc(lmc_tensor_nbytes(&aux.scales));
            aux.biases.data = malloc(lmc_tensor_nbytes(&aux.scales));
            w.aux = &aux;
            wbytes += 2 * lmc_tensor_nbytes(&aux.scales);
        } else if (t == LMC_DTYPE_MXFP4_MLX) { /* U8 exponents per 32, no biases */
            aux.group_size = 32;
            aux.scales = lmc_tensor_make(LMC_DTYPE_U8, in / 32, out, 1, 1);
            aux.scales.data = malloc(lmc_tensor_nbytes(&aux.scales));
            w.aux = &aux;
            wbytes += lmc_tensor_nbytes(&aux.scales);
        }
        for (int64_t o = 0; o < out; o++) {
            for (int64_t i = 0; i < in; i++) { s = s * 1103515245u + 12345u; row[i] = ((float)((s >> 9) % 2001) / 1000.0f - 1.0f) * 0.05f; }
            lmc_mlx_row r = lmc_dtype_has_aux(t) ? lmc_quant_mlx_row(&aux, o) : (lmc_mlx_row){0};
            if (lmc_quantize_row(t, row, (char *)w.data + (size_t)o * w.nb[1], lmc_dtype_has_aux(t) ? &r : NULL, in) < 0) {
                fprintf(stderr, "bench: %s\n", lmc_last_error());
                return 1;
            }
        }
        for (int hi = 0; hi < n_thr; hi++) {
            lmc_backend *be;
            if (lmc_backend_cpu_init(&be, thr[hi], 0) < 0) { fprintf(stderr, "bench: %s\n", lmc_last_error()); return 1; }
            /* bound as the loader binds it: the AVX-512 tier rewrites Q8_0 as MLX8 and Q4_0 as Q4_0R (cpu_rebind.c) */
            lmc_tensor wb = lmc_tensor_make(t, in, out, 1, 1);
            wb.aux = w.aux;
            if (be->i->bind_weight(be, &wb, w.data) < 0) { fprintf(stderr, "bench: %s\n", lmc_last_error()); return 1; }
            char tname[32];
            snprintf(tname, sizeof tname, wb.type == t ? "%s" : "%s as %s", lmc_dtype_name(t), lmc_dtype_name(wb.type));
            for (int k = 0; k < n_toks; k++) {
                lmc_tensor xt = lmc_tensor_make(LMC_DTYPE_F32, in, toks[k], 1, 1), yt = lmc_tensor_make(LMC_DTYPE_F32, out, toks[k], 1, 1);
                xt.data = x;
                yt.data = y;
                double best = 1e30, best_cpu = 1e30;
                for (int r = 0; r < reps + 1; r++) { /* the first run warms caches and scratch */
                    double t0 = now_s(), c0 = cpu_s();
                    be->i->matmul(be, &yt, &wb, &xt);
                    be->i->sync(be);
                    double dt = now_s() - t0, dc = (cpu_s() - c0) / thr[hi];
                    if (r > 0 && dt < best) best = dt;
                    if (r > 0 && dc < best_cpu) best_cpu = dc;
                }
                const double flop = 2.0 * (double)in * (double)out * toks[k];
                printf("| %s | %lld | %d | %d | %.3f | %.1f | %.1f | %.3f | %.1f |\n", tname, (long long)out, thr[hi],
                       toks[k], best * 1e3, (double)wbytes / best / 1e9, flop / best / 1e9, best_cpu * 1e3, flop / best_cpu / 1e9);
                fflush(stdout);
            }
            be->i->unbind_weight(be, &wb);
            lmc_backend_free(be);
        }
        free(w.data);
        free(aux.scales.data);
        free(aux.biases.data);
    }
    free(row); free(x); free(y);
    return 0;
}
