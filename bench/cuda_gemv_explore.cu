/* cuda_gemv_explore.cu — a standalone measurement of one-token Q4_0 matrix-vector kernel designs on
 * the Llama-3.1-8B shapes (q/k/v 4096x6144, o 4096x4096, gate+up 4096x28672, down 14336x4096), outside
 * the engine, to find where k_gemv_q's time goes (docs/BENCHMARKS.md, "CUDA decode: where a Q4_0
 * product's time goes"). Not part of the build; on a GPU machine:
 *     nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o gemv_explore bench/cuda_gemv_explore.cu && ./gemv_explore
 * Weights in k_gemv_q's repacked Q4_0 layout (16 code bytes a block, f16 scales apart), 8 copies
 * rotated so that no launch finds its weights in L2; every timed loop is one captured CUDA graph.
 * Kernels (RW rows a warp, U 16-byte chunks a lane per batch, one row group a warp):
 *   S  the loads alone (no activations, no products): what the launch shape can read;
 *   A  k_gemv_q's structure: int8 activations quantized into shared memory after the dependency
 *      wait, one register batch in flight (MODE 1: no quantization, MODE 2: no products);
 *   B  two register batches, the next in flight while one is multiplied;
 *   C  a cp.async ring of S stages a warp in shared memory;
 *   P  A plus an L2 bulk prefetch of part of the warp's rows before the dependency wait;
 *   R  no shared memory and no block barrier: each lane quantizes its own chunks' activations in registers.
 * Then a chain of the four products per layer x 320 layers (programmatic dependent launch). */
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <vector>
#include <cuda_fp16.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_next() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

struct QW { const uint8_t *codes; const uint16_t *sc; int K, N; };

__device__ __forceinline__ float f16f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ int pack4(int a, int b, int c, int d) {
    return (int)__byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// x f32 [K] -> smem int8 planes + meta (d, -8 d sum)
__device__ __forceinline__ void quantize(int8_t *xq, float2 *meta, const float *x, int K) {
    const int pieces = K / 8;
    for (int base = 0; base < pieces; base += blockDim.x) {
        int p = base + threadIdx.x;
        float4 a = make_float4(0, 0, 0, 0), b = a;
        if (p < pieces) { a = __ldg((const float4 *)(x + p * 8)); b = __ldg((const float4 *)(x + p * 8) + 1); }
        float m = fmaxf(fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))),
                        fmaxf(fmaxf(fabsf(b.x), fabsf(b.y)), fmaxf(fabsf(b.z), fabsf(b.w))));
        m = fmaxf(m, __shfl_xor_sync(~0u, m, 1));
        m = fmaxf(m, __shfl_xor_sync(~0u, m, 2));
        float id = m > 0 ? 127.f / m : 0.f, d = m / 127.f;
        int w0 = pack4(__float2int_rn(a.x * id), __float2int_rn(a.y * id), __float2int_rn(a.z * id), __float2int_rn(a.w * id));
        int w1 = pack4(__float2int_rn(b.x * id), __float2int_rn(b.y * id), __float2int_rn(b.z * id), __float2int_rn(b.w * id));
        int sum = __dp4a(w0, 0x01010101, __dp4a(w1, 0x01010101, 0));
        sum += __shfl_xor_sync(~0u, sum, 1);
        sum += __shfl_xor_sync(~0u, sum, 2);
        if (p >= pieces) continue;
        int e = p * 8, blk = e >> 5, j = e & 31;
        *(int2 *)(xq + (j >> 4) * (K / 2) + blk * 16 + (j & 15)) = make_int2(w0, w1);
        if ((threadIdx.x & 3) == 0) meta[blk] = make_float2(d, -8.f * d * (float)sum);
    }
}

__device__ __forceinline__ float dot_chunk(uint4 q, uint16_t sc, const int8_t *xq, const float2 *meta, int K, int c) {
    const int4 xa = *(const int4 *)(xq + c * 16);
    const int4 xb = *(const int4 *)(xq + K / 2 + c * 16);
    const float2 m = meta[c];
    uint32_t qq[4] = {q.x, q.y, q.z, q.w};
    int xs[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    int s = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) s = __dp4a((int)(qq[k] & 0x0F0F0F0Fu), xs[k], s);
#pragma unroll
    for (int k = 0; k < 4; k++) s = __dp4a((int)((qq[k] >> 4) & 0x0F0F0F0Fu), xs[4 + k], s);
    return f16f(sc) * fmaf(m.x, (float)s, m.y);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
    return v;
}

// The batch of warp g's RW rows: chunks c0 + 32u (u < U) of each row and their scales (zero past the row).
template <int RW, int U>
__device__ __forceinline__ void load_batch(uint4 (&q)[U][RW], uint16_t (&d)[U][RW], const QW &w, int g, int c0) {
    const int K = w.K, nch = K / 32;
#pragma unroll
    for (int r = 0; r < RW; r++) {
        const int row = min(g * RW + r, w.N - 1);
        const uint4 *qp = (const uint4 *)(w.codes + (size_t)row * (K / 2));
        const uint16_t *dp = w.sc + (size_t)row * nch;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c < nch) { q[u][r] = __ldg(qp + c); d[u][r] = __ldg(dp + c); }
            else { q[u][r] = make_uint4(0, 0, 0, 0); d[u][r] = 0; }
        }
    }
}

// ---------------- A: one register batch of U chunks x RW rows, load -> dot (the current design)
template <int RW, int U, int MODE = 0>
__global__ void __launch_bounds__(512) kA(QW w, const float *x, float *y) {
    extern __shared__ __align__(16) unsigned char sm[];
    const int K = w.K, nch = K / 32;
    int8_t *xq = (int8_t *)sm;
    float2 *meta = (float2 *)(sm + K);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = blockIdx.x * (blockDim.x >> 5) + warp;
    const bool act = g * RW < w.N;
    uint4 q[U][RW];
    uint16_t d[U][RW];
    auto load = [&](int c0) { load_batch<RW, U>(q, d, w, g, c0); };
    if (act) load(lane);
    pdl_next();
    pdl_wait();
    if (MODE != 1) quantize(xq, meta, x, K);
    __syncthreads();
    if (!act) return;
    float acc[RW] = {};
    uint32_t xr = 0;
    for (int base = 0; base < nch; base += 32 * U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            int c = base + lane + 32 * u;
            if (c < nch) {
#pragma unroll
                for (int r = 0; r < RW; r++) {
                    if (MODE == 2) xr ^= q[u][r].x ^ q[u][r].y ^ q[u][r].z ^ q[u][r].w ^ d[u][r];
                    else acc[r] += dot_chunk(q[u][r], d[u][r], xq, meta, K, c);
                }
            }
        }
        if (base + 32 * U < nch) load(base + 32 * U + lane);
    }
#pragma unroll
    for (int r = 0; r < RW; r++) {
        float v = warp_sum(acc[r]) + (xr == 0x12345u ? 1.f : 0.f);
        if (lane == 0 && g * RW + r < w.N) y[g * RW + r] = v;
    }
}

// ---------------- B: two register batches, the next one in flight while the current is used
template <int RW, int U>
__global__ void __launch_bounds__(512) kB(QW w, const float *x, float *y) {
    extern __shared__ __align__(16) unsigned char sm[];
    const int K = w.K, nch = K / 32;
    int8_t *xq = (int8_t *)sm;
    float2 *meta = (float2 *)(sm + K);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = blockIdx.x * (blockDim.x >> 5) + warp;
    const bool act = g * RW < w.N;
    uint4 q[2][U][RW];
    uint16_t d[2][U][RW];
    auto load = [&](int bi, int c0) { load_batch<RW, U>(q[bi], d[bi], w, g, c0); };
    float acc[RW] = {};
    auto use = [&](int bi, int c0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            int c = c0 + 32 * u;
            if (c < nch) {
#pragma unroll
                for (int r = 0; r < RW; r++) acc[r] += dot_chunk(q[bi][u][r], d[bi][u][r], xq, meta, K, c);
            }
        }
    };
    if (act) { load(0, lane); load(1, lane + 32 * U); }
    pdl_next();
    pdl_wait();
    quantize(xq, meta, x, K);
    __syncthreads();
    if (!act) return;
    for (int base = 0; base < nch; base += 64 * U) {
        use(0, base + lane);
        if (base + 64 * U < nch) load(0, base + 64 * U + lane);
        if (base + 32 * U < nch) use(1, base + 32 * U + lane);
        if (base + 96 * U < nch) load(1, base + 96 * U + lane);
    }
#pragma unroll
    for (int r = 0; r < RW; r++) {
        float v = warp_sum(acc[r]);
        if (lane == 0 && g * RW + r < w.N) y[g * RW + r] = v;
    }
}

// ---------------- C: cp.async ring of S stages per warp in shared memory
__device__ __forceinline__ void cpa16(void *s, const void *g) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g));
}
__device__ __forceinline__ void cpa4(void *s, const void *g) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(sa), "l"(g));
}
__device__ __forceinline__ void cpa_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cpa_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

template <int RW, int U, int S>
__global__ void __launch_bounds__(512) kC(QW w, const float *x, float *y) {
    extern __shared__ __align__(16) unsigned char sm[];
    const int K = w.K, nch = K / 32;
    int8_t *xq = (int8_t *)sm;
    float2 *meta = (float2 *)(sm + K);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr int STAGE_Q = RW * U * 32 * 16, STAGE_D = RW * U * 32 * 2, STAGE = STAGE_Q + STAGE_D;
    unsigned char *ring = sm + K + (K / 32) * 8 + (size_t)warp * S * STAGE;
    const int g = blockIdx.x * (blockDim.x >> 5) + warp;
    const bool act = g * RW < w.N;
    const int nsteps = (nch + 32 * U - 1) / (32 * U);
    auto issue = [&](int step) {
        if (step < nsteps) {
            unsigned char *st = ring + (step % S) * STAGE;
            const int c0 = step * 32 * U;
#pragma unroll
            for (int r = 0; r < RW; r++) {
                int row = min(g * RW + r, w.N - 1);
                const uint4 *qp = (const uint4 *)(w.codes + (size_t)row * (K / 2));
                const uint16_t *dp = w.sc + (size_t)row * nch;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    int c = c0 + 32 * u + lane;
                    if (c < nch) cpa16(st + ((u * RW + r) * 32 + lane) * 16, qp + c);
                    int cs = c0 + 32 * u + 2 * (lane & 15);
                    if (lane < 16 && cs < nch) cpa4(st + STAGE_Q + ((u * RW + r) * 32 + 2 * lane) * 2, dp + cs);
                }
            }
        }
        cpa_commit();
    };
    if (act) {
#pragma unroll
        for (int s = 0; s < S - 1; s++) issue(s);
    }
    pdl_next();
    pdl_wait();
    quantize(xq, meta, x, K);
    __syncthreads();
    if (!act) return;
    float acc[RW] = {};
    for (int step = 0; step < nsteps; step++) {
        cpa_wait<S - 2>();
        __syncwarp();
        const unsigned char *st = ring + (step % S) * STAGE;
        uint4 q[U][RW];
        uint16_t d[U][RW];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < RW; r++) {
                q[u][r] = *(const uint4 *)(st + ((u * RW + r) * 32 + lane) * 16);
                d[u][r] = *(const uint16_t *)(st + STAGE_Q + ((u * RW + r) * 32 + lane) * 2);
            }
        __syncwarp();
        issue(step + S - 1);
#pragma unroll
        for (int u = 0; u < U; u++) {
            int c = step * 32 * U + 32 * u + lane;
            if (c < nch) {
#pragma unroll
                for (int r = 0; r < RW; r++) acc[r] += dot_chunk(q[u][r], d[u][r], xq, meta, K, c);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RW; r++) {
        float v = warp_sum(acc[r]);
        if (lane == 0 && g * RW + r < w.N) y[g * RW + r] = v;
    }
}


// ---------------- P: A plus an L2 bulk prefetch of the first PF/8 of the warp's rows before the wait
__device__ __forceinline__ void l2pf(const void *g, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(g), "r"(bytes) : "memory");
}
template <int RW, int U, int PF>
__global__ void __launch_bounds__(512) kP(QW w, const float *x, float *y) {
    extern __shared__ __align__(16) unsigned char sm[];
    const int K = w.K, nch = K / 32;
    int8_t *xq = (int8_t *)sm;
    float2 *meta = (float2 *)(sm + K);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = blockIdx.x * (blockDim.x >> 5) + warp;
    const bool act = g * RW < w.N;
    uint4 q[U][RW];
    uint16_t d[U][RW];
    auto load = [&](int c0) { load_batch<RW, U>(q, d, w, g, c0); };
    if (act) {
        load(lane);
        const int rows = min(RW, w.N - g * RW);
        if (lane < rows && PF > 0) {
            const int row = g * RW + lane;
            const unsigned first = 32 * U * 16, rb = K / 2;
            unsigned want = (unsigned)((size_t)rb * PF / 8) & ~15u;
            if (want > first) l2pf(w.codes + (size_t)row * rb + first, want - first);
        }
    }
    pdl_next();
    pdl_wait();
    quantize(xq, meta, x, K);
    __syncthreads();
    if (!act) return;
    float acc[RW] = {};
    for (int base = 0; base < nch; base += 32 * U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            int c = base + lane + 32 * u;
            if (c < nch) {
#pragma unroll
                for (int r = 0; r < RW; r++) acc[r] += dot_chunk(q[u][r], d[u][r], xq, meta, K, c);
            }
        }
        if (base + 32 * U < nch) load(base + 32 * U + lane);
    }
#pragma unroll
    for (int r = 0; r < RW; r++) {
        float v = warp_sum(acc[r]);
        if (lane == 0 && g * RW + r < w.N) y[g * RW + r] = v;
    }
}

// ---------------- R: no shared memory, no block barrier: each lane quantizes the activations of its own
// chunks in registers (one 32-element block a chunk: the lane owns the whole block, so amax, d and the
// code sum need no shuffles), read after the dependency wait while the first weights are in flight
template <int RW, int U>
__global__ void __launch_bounds__(512) kR(QW w, const float *x, float *y) {
    const int K = w.K, nch = K / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = blockIdx.x * (blockDim.x >> 5) + warp;
    const bool act = g * RW < w.N;
    uint4 q[U][RW];
    uint16_t d[U][RW];
    auto load = [&](int c0) { load_batch<RW, U>(q, d, w, g, c0); };
    if (act) load(lane);
    pdl_next();
    pdl_wait();
    if (!act) return;
    float acc[RW] = {};
    for (int base = 0; base < nch; base += 32 * U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = base + lane + 32 * u;
            if (c >= nch) continue;
            float v[32];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float4 f = __ldg((const float4 *)(x + 32 * c) + k);
                v[4 * k] = f.x; v[4 * k + 1] = f.y; v[4 * k + 2] = f.z; v[4 * k + 3] = f.w;
            }
            float m = 0.f;
#pragma unroll
            for (int k = 0; k < 32; k++) m = fmaxf(m, fabsf(v[k]));
            const float id = m > 0 ? 127.f / m : 0.f, dx = m / 127.f;
            int xs[8], sum = 0;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                xs[k] = pack4(__float2int_rn(v[4 * k] * id), __float2int_rn(v[4 * k + 1] * id),
                              __float2int_rn(v[4 * k + 2] * id), __float2int_rn(v[4 * k + 3] * id));
                sum = __dp4a(xs[k], 0x01010101, sum);
            }
            const float my = -8.f * dx * (float)sum;
#pragma unroll
            for (int r = 0; r < RW; r++) {
                const uint32_t qq[4] = {q[u][r].x, q[u][r].y, q[u][r].z, q[u][r].w};
                int s2 = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) s2 = __dp4a((int)(qq[k] & 0x0F0F0F0Fu), xs[k], s2);
#pragma unroll
                for (int k = 0; k < 4; k++) s2 = __dp4a((int)((qq[k] >> 4) & 0x0F0F0F0Fu), xs[4 + k], s2);
                acc[r] += f16f(d[u][r]) * fmaf(dx, (float)s2, my);
            }
        }
        if (base + 32 * U < nch) load(base + 32 * U + lane);
    }
#pragma unroll
    for (int r = 0; r < RW; r++) {
        float v = warp_sum(acc[r]);
        if (lane == 0 && g * RW + r < w.N) y[g * RW + r] = v;
    }
}

// ---------------- S: read the bytes only (reference), same launch shape
template <int RW, int U>
__global__ void __launch_bounds__(512) kS(QW w, const float *x, float *y) {
    const int K = w.K, nch = K / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = blockIdx.x * (blockDim.x >> 5) + warp;
    pdl_next();
    pdl_wait();
    if (g * RW >= w.N) return;
    uint32_t acc = 0;
    for (int base = 0; base < nch; base += 32 * U) {
        uint4 q[U][RW];
#pragma unroll
        for (int r = 0; r < RW; r++) {
            const uint4 *qp = (const uint4 *)(w.codes + (size_t)(g * RW + r) * (K / 2));
#pragma unroll
            for (int u = 0; u < U; u++) { int c = base + lane + 32 * u; q[u][r] = c < nch ? __ldg(qp + c) : make_uint4(0, 0, 0, 0); }
        }
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int u = 0; u < U; u++) acc ^= q[u][r].x ^ q[u][r].y ^ q[u][r].z ^ q[u][r].w;
    }
    if (acc == 0x12345678u) y[0] = 1.f;
}

// ---------------- host
static double ref_row(const std::vector<uint8_t> &codes, const std::vector<uint16_t> &sc, const std::vector<float> &x, int K, int row) {
    double s = 0;
    for (int b = 0; b < K / 32; b++) {
        __half h = __ushort_as_half(sc[(size_t)row * (K / 32) + b]);
        float d = __half2float(h);
        for (int k = 0; k < 16; k++) {
            uint8_t byte = codes[(size_t)row * (K / 2) + b * 16 + k];
            s += (double)d * ((byte & 15) - 8) * x[b * 32 + k];
            s += (double)d * ((byte >> 4) - 8) * x[b * 32 + k + 16];
        }
    }
    return s;
}

struct Cfg { const char *name; void (*k)(QW, const float *, float *); int rw, wpb; size_t ring; };

static void launch(const Cfg &c, QW w, const float *x, float *y, cudaStream_t s, bool pdl) {
    int ng = (w.N + c.rw - 1) / c.rw;
    int blocks = (ng + c.wpb - 1) / c.wpb;
    size_t smem = w.K + (w.K / 32) * 8 + c.ring * c.wpb;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = pdl;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(c.wpb * 32); cfg.dynamicSmemBytes = smem; cfg.stream = s;
    cfg.attrs = at; cfg.numAttrs = 1;
    static std::vector<void *> done;
    bool have = false;
    for (void *f : done) have |= f == (void *)c.k;
    if (!have) { CK(cudaFuncSetAttribute(c.k, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024)); done.push_back((void *)c.k); }
    CK(cudaLaunchKernelEx(&cfg, c.k, w, x, y));
}

int main(int argc, char **argv) {
    int shapes[][2] = {{4096, 6144}, {4096, 4096}, {4096, 28672}, {14336, 4096}};
    const char *sname[] = {"qkv", "o", "gate_up", "down"};
    cudaStream_t s; CK(cudaStreamCreate(&s));
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    for (int si = 0; si < 4; si++) {
        const int K = shapes[si][0], N = shapes[si][1];
        const int NB = 8; // rotating weight copies (beyond L2)
        size_t cb = (size_t)N * K / 2, sb = (size_t)N * (K / 32) * 2;
        std::vector<uint8_t> hc(cb); std::vector<uint16_t> hs(N * (size_t)(K / 32)); std::vector<float> hx(K);
        srand(1 + si);
        for (auto &v : hc) v = rand() & 255;
        for (auto &v : hs) v = __half_as_ushort(__float2half(0.001f + (rand() % 1000) * 1e-5f));
        for (auto &v : hx) v = (rand() % 2001 - 1000) * 1e-3f;
        uint8_t *dc; uint16_t *ds; float *dx, *dy;
        CK(cudaMalloc(&dc, cb * NB)); CK(cudaMalloc(&ds, sb * NB)); CK(cudaMalloc(&dx, K * 4)); CK(cudaMalloc(&dy, N * 4));
        for (int b = 0; b < NB; b++) { CK(cudaMemcpy(dc + b * cb, hc.data(), cb, cudaMemcpyHostToDevice)); CK(cudaMemcpy(ds + b * (sb / 2), hs.data(), sb, cudaMemcpyHostToDevice)); }
        CK(cudaMemcpy(dx, hx.data(), K * 4, cudaMemcpyHostToDevice));
        std::vector<Cfg> cfgs = {
            {"S rw2 u4", kS<2, 4>, 2, 16, 0},
            {"R rw2 u4", kR<2, 4>, 2, 16, 0}, {"R rw4 u4", kR<4, 4>, 4, 16, 0}, {"R rw2 u2", kR<2, 2>, 2, 16, 0},
            {"R rw4 u4 w8", kR<4, 4>, 4, 8, 0},
            {"A rw2 u4", kA<2, 4>, 2, 16, 0}, {"A rw2 u4 noquant", kA<2, 4, 1>, 2, 16, 0}, {"A rw2 u4 nodot", kA<2, 4, 2>, 2, 16, 0},
            {"A rw4 u4", kA<4, 4>, 4, 16, 0}, {"A rw4 u4 w8", kA<4, 4>, 4, 8, 0}, {"A rw4 u4 w4", kA<4, 4>, 4, 4, 0},
            {"A rw4 u4 noquant", kA<4, 4, 1>, 4, 16, 0}, {"A rw4 u4 nodot", kA<4, 4, 2>, 4, 16, 0},
            {"A rw2 u8", kA<2, 8>, 2, 16, 0}, {"A rw2 u8 w8", kA<2, 8>, 2, 8, 0},
            {"C rw2 u2 s3", kC<2, 2, 3>, 2, 16, 3 * (2 * 2 * 32 * 18)}, {"C rw2 u2 s4 w8", kC<2, 2, 4>, 2, 8, 4 * (2 * 2 * 32 * 18)},
            {"C rw4 u2 s3 w8", kC<4, 2, 3>, 4, 8, 3 * (4 * 2 * 32 * 18)}, {"C rw4 u1 s4", kC<4, 1, 4>, 4, 16, 4 * (4 * 1 * 32 * 18)},
            {"C rw2 u4 s3 w8", kC<2, 4, 3>, 2, 8, 3 * (2 * 4 * 32 * 18)},
        };
        double gb = (double)(cb + sb) / 1e9;
        printf("\n%s K=%d N=%d  %.1f MB  ideal@4.2TB/s %.2f us\n", sname[si], K, N, gb * 1e3, gb / 4.2e3 * 1e6);
        std::vector<float> hy(N);
        for (auto &c : cfgs) {
            size_t smem = K + (K / 32) * 8 + c.ring * c.wpb;
            if (smem > 227 * 1024) { printf("%-16s smem %zu: skip\n", c.name, smem); continue; }
            for (int pdl = 0; pdl < 2; pdl++) {
                QW w = {dc, ds, K, N};
                launch(c, w, dx, dy, s, pdl);
                CK(cudaStreamSynchronize(s));
                if (!pdl && c.name[0] != 'S' && !strstr(c.name, "no")) {
                    CK(cudaMemcpy(hy.data(), dy, N * 4, cudaMemcpyDeviceToHost));
                    double maxe = 0, maxr = 0;
                    for (int r = 0; r < N; r += N / 64) { double rf = ref_row(hc, hs, hx, K, r); maxe = fmax(maxe, fabs(rf - hy[r])); maxr = fmax(maxr, fabs(rf)); }
                    if (maxe > 0.02 * maxr) printf("%-16s WRONG err %.3g of %.3g\n", c.name, maxe, maxr);
                }
                const int it = 400;
                cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
                for (int i = 0; i < 16; i++) { QW ww = {dc + (i % NB) * cb, ds + (i % NB) * (sb / 2), K, N}; launch(c, ww, dx, dy, s, pdl); }
                cudaGraph_t gr; cudaGraphExec_t ge;
                CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
                for (int i = 0; i < it; i++) { QW ww = {dc + (i % NB) * cb, ds + (i % NB) * (sb / 2), K, N}; launch(c, ww, dx, dy, s, pdl); }
                CK(cudaStreamEndCapture(s, &gr));
                CK(cudaGraphInstantiate(&ge, gr, 0));
                CK(cudaGraphLaunch(ge, s));
                cudaEventRecord(e0, s);
                CK(cudaGraphLaunch(ge, s));
                cudaEventRecord(e1, s);
                CK(cudaEventSynchronize(e1));
                float ms; cudaEventElapsedTime(&ms, e0, e1);
                double us = ms * 1e3 / it;
                printf("%-16s pdl=%d %7.2f us  %6.0f GB/s\n", c.name, pdl, us, gb / us * 1e6);
            }
        }
        cudaFree(dc); cudaFree(ds); cudaFree(dx); cudaFree(dy);
    }

    // chain: qkv -> o -> gate_up -> down per layer, rotating weight copies, PDL on
    {
        const int NB = 8;
        uint8_t *dc[4]; uint16_t *ds[4]; size_t cb[4], sb[4]; float *dx, *dy; double tot = 0;
        CK(cudaMalloc(&dx, 14336 * 4)); CK(cudaMalloc(&dy, 28672 * 4));
        std::vector<float> hx(14336); for (auto &v : hx) v = (rand() % 2001 - 1000) * 1e-3f;
        CK(cudaMemcpy(dx, hx.data(), 14336 * 4, cudaMemcpyHostToDevice));
        for (int si = 0; si < 4; si++) {
            int K = shapes[si][0], N = shapes[si][1];
            cb[si] = (size_t)N * K / 2; sb[si] = (size_t)N * (K / 32) * 2; tot += (double)(cb[si] + sb[si]);
            CK(cudaMalloc(&dc[si], cb[si] * NB)); CK(cudaMalloc(&ds[si], sb[si] * NB));
            CK(cudaMemset(dc[si], 0x37, cb[si] * NB)); CK(cudaMemset(ds[si], 0x11, sb[si] * NB));
        }
        printf("\nchain per layer: %.1f MB, ideal %.2f us\n", tot / 1e6, tot / 4.2e12 * 1e6);
        struct CC { const char *name; Cfg c[4]; } ccs[] = {
            {"A qkv4 o2u8 gu2u4 d2u4", {{"", kA<4, 4>, 4, 16, 0}, {"", kA<2, 8>, 2, 16, 0}, {"", kA<2, 4>, 2, 16, 0}, {"", kA<2, 4>, 2, 16, 0}}},
            {"A all rw4 w8, down C", {{"", kA<4, 4>, 4, 8, 0}, {"", kA<4, 4>, 4, 8, 0}, {"", kA<4, 4>, 4, 8, 0}, {"", kC<2, 2, 3>, 2, 16, 3 * (2 * 2 * 32 * 18)}}},
            {"C all", {{"", kC<4, 1, 4>, 4, 16, 4 * (4 * 1 * 32 * 18)}, {"", kC<4, 1, 4>, 4, 16, 4 * (4 * 1 * 32 * 18)}, {"", kC<2, 2, 3>, 2, 16, 3 * (2 * 2 * 32 * 18)}, {"", kC<2, 2, 3>, 2, 16, 3 * (2 * 2 * 32 * 18)}}},
            {"R qkv4 o4 gu4 d2", {{"", kR<4, 4>, 4, 16, 0}, {"", kR<4, 4>, 4, 16, 0}, {"", kR<4, 4>, 4, 16, 0}, {"", kR<2, 4>, 2, 16, 0}}},
            {"S all", {{"", kS<2, 4>, 2, 16, 0}, {"", kS<2, 4>, 2, 16, 0}, {"", kS<2, 4>, 2, 16, 0}, {"", kS<2, 4>, 2, 16, 0}}},
        };
        for (auto &cc : ccs) {
            cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
            const int layers = 320;
            cudaGraph_t gr; cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
            for (int l = 0; l < layers; l++)
                for (int si = 0; si < 4; si++) {
                    QW ww = {dc[si] + (l % NB) * cb[si], ds[si] + (l % NB) * (sb[si] / 2), shapes[si][0], shapes[si][1]};
                    launch(cc.c[si], ww, dx, dy, s, true);
                }
            CK(cudaStreamEndCapture(s, &gr));
            CK(cudaGraphInstantiate(&ge, gr, 0));
            CK(cudaGraphLaunch(ge, s));
            cudaEventRecord(e0, s);
            CK(cudaGraphLaunch(ge, s));
            cudaEventRecord(e1, s);
            CK(cudaEventSynchronize(e1));
            float ms; cudaEventElapsedTime(&ms, e0, e1);
            printf("%-22s %7.2f us/layer  %5.0f GB/s\n", cc.name, ms * 1e3 / layers, tot / (ms * 1e-3 / layers) / 1e9);
        }
    }
    // copy roofline
    size_t nb = 512 << 20; void *a, *b; CK(cudaMalloc(&a, nb)); CK(cudaMalloc(&b, nb));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaMemcpyAsync(b, a, nb, cudaMemcpyDeviceToDevice, s);
    cudaEventRecord(e0, s); for (int i = 0; i < 10; i++) cudaMemcpyAsync(b, a, nb, cudaMemcpyDeviceToDevice, s); cudaEventRecord(e1, s);
    CK(cudaEventSynchronize(e1)); float ms; cudaEventElapsedTime(&ms, e0, e1);
    printf("\ncopy %.0f GB/s (read+write)\n", 2.0 * nb * 10 / (ms * 1e-3) / 1e9);
    return 0;
}
