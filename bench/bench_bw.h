/* bench_bw.h — the read-bandwidth probe the CPU benchmarks put their roofline on
 * (bench_dense, bench_moe): a 1 GiB buffer (larger than any cache here) summed by n
 * threads with 64-byte loads, each thread's share read as 1, 2, 4 or 8 stretches side by
 * side (one core reads memory faster from several places at once: 11 vs 15 GB/s on this
 * Xeon), and the best pattern counts: the roofline is what the hardware can read.
 * Header-only: each benchmark is one translation unit. */
#ifndef LMC_BENCH_BW_H
#define LMC_BENCH_BW_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "gen/generate.h"

typedef struct bw_arg { const float *buf; size_t n; int streams; double sum[64]; } bw_arg;
typedef float v16f __attribute__((vector_size(64)));

/* Sum the thread's share with 64-byte vector loads into 8 independent accumulators
 * (load-bound, not add-latency-bound, so the figure is the memory's, not the core's),
 * 128 floats (two lines) of each of `streams` stretches per step. */
static void bw_read(void *p, int ith, int nth) {
    bw_arg *a = p;
    long b, e;
    lmc_split((long)(a->n / 128), ith, nth, &b, &e);
    const int ns = a->streams;
    const long per = (e - b) / ns; /* 128-float chunks per stretch (a remainder of < ns chunks is not read) */
    v16f s[8] = {{0}};
    for (long i = 0; i < per; i++)
        for (int k = 0; k < ns; k++) {
            const float *q = a->buf + (size_t)(b + k * per + i) * 128;
            for (int j = 0; j < 8; j++) {
                v16f v;
                memcpy(&v, q + 16 * j, sizeof v);
                s[j] += v;
            }
        }
    for (int k = 1; k < 8; k++) s[0] += s[k];
    double t = 0;
    for (int k = 0; k < 16; k++) t += s[0][k];
    a->sum[ith] = t;
}

/* Read bandwidth in GB/s over a 1 GiB buffer: for each of 1, 2, 4 and 8 stretches per
 * thread the best of 3 passes; the best of all. */
static double measure_bandwidth(int n_threads) {
    size_t n = (1u << 30) / sizeof(float);
    float *buf = aligned_alloc(64, n * sizeof *buf);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    lmc_pool *pool;
    lmc_pool_init(&pool, n_threads);
    double best = 0;
    for (int ns = 1; ns <= 8; ns *= 2) {
        bw_arg a = {buf, n, ns, {0}};
        const long chunks = (long)(n / 128) / n_threads / ns * ns * n_threads; /* what bw_read reads */
        for (int r = 0; r < 3; r++) {
            double t0 = lmc_now_s();
            lmc_pool_run(pool, bw_read, &a);
            double dt = lmc_now_s() - t0;
            best = fmax(best, (double)chunks * 128 * sizeof *buf / dt / 1e9);
        }
    }
    lmc_pool_free(pool);
    free(buf);
    return best;
}

/* measure_bandwidth(n_threads) in a child process (its 1 GiB buffer must not count in the
 * next run's peak RSS); -1 on failure. Other load on a shared machine moves the figure from
 * minute to minute, so the benchmarks measure it right before each run. */
static double measure_bandwidth_in_child(int n_threads) {
    int fd[2];
    double bw = -1;
    if (pipe(fd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        double b = measure_bandwidth(n_threads);
        _exit(write(fd[1], &b, sizeof b) == (ssize_t)sizeof b ? 0 : 1);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
    if (pid < 0 || read(fd[0], &bw, sizeof bw) != (ssize_t)sizeof bw) bw = -1;
    close(fd[0]);
    close(fd[1]);
    return bw;
}

#endif
