/* cuda_inflight.cu — a standalone measurement of how much of the HBM bandwidth a streaming kernel gets
 * for the bytes each multiprocessor keeps in flight, by register loads and by bulk copies into shared
 * memory (the two ways a decode product can hold weights on their way), and how long a cold kernel
 * takes to stream the sizes of the Llama-3.1-8B products. It answers the design question of issue 9's
 * batch-1 decode (docs/BENCHMARKS.md, "CUDA streaming against bytes in flight, session 29"). Not part
 * of the build; on a GPU machine:
 *     nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o inflight bench/cuda_inflight.cu && ./inflight
 * Kernels, one block a multiprocessor of W warps, reading a 2 GB buffer once (far past the L2):
 *   R<L>  every lane L loads of 16 bytes in flight (ld.global.nc, L1 bypassed, L2 evict_first), then
 *         uses them and issues the next L (the latency chain of k_gemv_q's one-batch form);
 *   T     every warp a ring of NS slots of SB bytes in shared memory, filled by lane 0's
 *         cp.async.bulk copies (mbarrier completion), read by the warp, refilled at once.
 * Each timed loop is one captured CUDA graph; GB/s counts the bytes read. */
#include "cuda_standalone.cuh"

/* bytes [0, n16·16) of p: lane i of the grid takes 16-byte chunks base + k·nt + i, k < L, per round */
template <int L, int MAXT>
__global__ void __launch_bounds__(MAXT, 1) k_reg(const uint4 *p, size_t n16, uint32_t *sink) {
    const size_t nt = (size_t)gridDim.x * blockDim.x, tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (size_t base = 0; base < n16; base += nt * L) {
        uint4 v[L];
#pragma unroll
        for (int k = 0; k < L; k++) {
            const size_t i = base + (size_t)k * nt + tid;
            v[k] = i < n16 ? ld_stream(p + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < L; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* bytes [0, nb) of p: warp w of the grid takes the contiguous share [w·per, (w + 1)·per) (per: nb over the
 * grid's warps, down to 16 bytes), slot by slot, the last one partly filled */
__global__ void __launch_bounds__(1024, 1) k_tma(const uint8_t *p, size_t nb, int sb, int ns, uint32_t *sink) {
    extern __shared__ __align__(128) uint8_t sm[];
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint8_t *ring = sm + (size_t)warp * ns * sb;
    uint64_t *bar = (uint64_t *)(sm + (size_t)nw * ns * sb) + warp * ns;
    const size_t gw = (size_t)blockIdx.x * nw + warp, nwg = (size_t)gridDim.x * nw, per = nb / nwg / 16 * 16;
    const uint8_t *src = p + gw * per;
    const int items = (int)((per + sb - 1) / (size_t)sb);
    auto bytes_of = [&](int it) { return (uint32_t)(per - (size_t)it * sb < (size_t)sb ? per - (size_t)it * sb : sb); };
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    auto issue = [&](int it) {
        const int k = it % ns;
        const uint32_t n = bytes_of(it);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(bar + k)), "r"(n) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
                         sa(ring + (size_t)k * sb)),
                     "l"(src + (size_t)it * sb), "r"(n), "r"(sa(bar + k)), "l"(pol)
                     : "memory");
    };
    if (lane == 0) {
        for (int k = 0; k < ns; k++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(bar + k)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int it = 0; it < ns && it < items; it++) issue(it);
    }
    __syncwarp();
    uint32_t acc = 0;
    for (int it = 0; it < items; it++) {
        const int k = it % ns;
        uint32_t done;
        do {
            asm volatile("{\n\t.reg .pred q;\n\tmbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2;\n\tselp.u32 %0, 1, 0, q;\n\t}"
                         : "=r"(done)
                         : "r"(sa(bar + k)), "r"((uint32_t)(it / ns) & 1u)
                         : "memory");
        } while (!done);
        const uint4 *s = (const uint4 *)(ring + (size_t)k * sb);
        const int n16 = (int)(bytes_of(it) / 16);
        for (int j = lane; j < n16; j += 32) {
            const uint4 v = s[j];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncwarp();
        if (lane == 0 && it + ns < items) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue(it + ns);
        }
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

static int sms;
static uint8_t *buf;
static uint32_t *sink;
static const size_t BUF = (size_t)2 << 30;

/* µs a launch of f over reps launches captured in one graph, each reading bytes at its own offset
 * (offsets rotate over the buffer so that no launch finds its bytes in L2) */
template <typename F> static double time_graph(F f, size_t bytes, int reps) {
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    const size_t step = (bytes + ((size_t)64 << 20) + 4095) / 4096 * 4096;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int r = 0; r < reps; r++) f(s, buf + (size_t)r * step % (BUF - bytes) / 4096 * 4096);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s)); /* warm-up */
    CK(cudaStreamSynchronize(s));
    const double us = time_us(s, [&] { CK(cudaGraphLaunch(ge, s)); });
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    return us / reps;
}

template <int L, int W> static double run_reg(size_t bytes, int reps) {
    return time_graph([&](cudaStream_t s, const uint8_t *p) {
        k_reg<L, W * 32><<<sms, W * 32, 0, s>>>((const uint4 *)p, bytes / 16, sink);
    }, bytes, reps);
}

static double run_tma(size_t bytes, int w, int sb, int ns, int reps) {
    const size_t smem = (size_t)w * ns * (sb + 8);
    CK(cudaFuncSetAttribute(k_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return time_graph([&](cudaStream_t s, const uint8_t *p) { k_tma<<<sms, w * 32, smem, s>>>(p, bytes, sb, ns, sink); },
                      bytes, reps);
}

template <int L, int W> static void row_reg(void) {
    const size_t big = (size_t)1 << 30;
    const double t = run_reg<L, W>(big, 4);
    printf("| R | %d warps x %d loads | %zu KB | %.0f |", W, L, (size_t)W * 32 * L * 16 / 1024, big / t / 1e3);
    const size_t sizes[] = {(size_t)14 << 20, (size_t)9 << 20, (size_t)33 << 20, (size_t)66 << 20};
    for (size_t z : sizes) printf(" %.2f |", run_reg<L, W>(z, 40));
    printf("\n");
}

static void row_tma(int w, int sb, int ns) {
    const size_t big = (size_t)1 << 30;
    const double t = run_tma(big, w, sb, ns, 4);
    printf("| T | %d warps x %d slots of %d KB | %d KB | %.0f |", w, ns, sb / 1024, w * ns * sb / 1024, big / t / 1e3);
    const size_t sizes[] = {(size_t)14 << 20, (size_t)9 << 20, (size_t)33 << 20, (size_t)66 << 20};
    for (size_t z : sizes) printf(" %.2f |", run_tma(z, w, sb, ns, 40));
    printf("\n");
}

int main(void) {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaMalloc(&buf, BUF));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(buf, 1, BUF));
    printf("%d multiprocessors; device-to-device copy %.0f GB/s (read + write)\n\n", sms, copy_gbs(buf));
    printf("| kind | shape | in flight a multiprocessor | 1 GB stream GB/s | 14 MB µs | 9 MB µs | 33 MB µs | 66 MB µs |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    row_reg<4, 16>();
    row_reg<8, 16>();
    row_reg<16, 16>();
    row_reg<8, 8>();
    row_reg<16, 8>();
    row_reg<32, 8>();
    row_reg<4, 32>();
    row_reg<8, 32>();
    const int tma[][3] = {{4, 4096, 4},  {4, 8192, 4},  {4, 16384, 3}, {4, 16384, 2}, {8, 4096, 4},  {8, 8192, 3},
                          {8, 2048, 8},  {8, 8192, 2},  {16, 2048, 4}, {16, 4096, 3}, {16, 4096, 2}, {4, 32768, 1},
                          {2, 32768, 3}, {1, 65536, 3}, {4, 8192, 6},  {8, 4096, 6}};
    for (auto &c : tma) row_tma(c[0], c[1], c[2]);
    printf("\nideal (bytes / copy bandwidth read half): see the copy line; 14 / 9 / 33 / 66 MB are the q/k/v, o, down and gate+up bytes of a Q4_0 Llama-8B layer\n");
    return 0;
}
