/* cuda_stages.cu — a standalone measurement of how close a one-token decode step's chain of dependent
 * stages can come to the HBM bandwidth, by the way the stages are launched, with a stand-in for the
 * products' arithmetic: the design question left by issue 9's Q4_0 target (docs/BENCHMARKS.md, "CUDA batch-1 decode, session 32").
 * Not part of the build; on a GPU machine:
 *     nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o stages bench/cuda_stages.cu && ./stages [attn_ns] [spin_ns] [work]
 * A step is 32 layers of a Q4_0 Llama-3.1-8B's weight bytes: q/k/v 14.16 MB, attention (no weights:
 * attn_ns of waiting between two dependencies, default 3000), o 9.44 MB, gate/up 66.06 MB, down 33.03 MB,
 * every layer at its own addresses (3.9 GB, far past the L2). Each stage depends on the one before it:
 * after its dependency it reads the previous stage's activations (16 KB; down 57 KB) from L2, waits
 * spin_ns more (default 0: what quantizing them costs), then streams its bytes — each 16 bytes
 * xor-folded, and in a second table also put through work rounds of four dependent dp4a (default 4:
 * the order of a Q4_0 dot's arithmetic a 16-byte chunk) — and writes its activations. Three ways to
 * run the chain:
 *   launch  one kernel a stage (132 blocks of 16 warps, 16 loads of 16 bytes a lane in flight), the
 *           first batch asked for before griddepcontrol.wait, captured in one graph with programmatic
 *           dependent launch: lmc's current decode (k_gemv_q) without its arithmetic;
 *   launch, rings  the same with each warp's share streamed through its ring of shared-memory slots
 *           (below), the first slots asked for before the wait;
 *   reg     one persistent kernel (a block a multiprocessor), a grid-wide barrier between stages, each
 *           warp's first batch of the next stage asked for before the barrier;
 *   ring    one persistent kernel whose warps stream their shares through rings of shared memory slots
 *           filled by bulk copies (mbarrier completion): a slot is refilled from the next stage's bytes
 *           as soon as it is read, so the copies run on through the barriers and prologues as far
 *           as the ring reaches.
 * µs a layer and the share of the roofline (a layer's bytes at the device-to-device copy rate, as
 * bench_cuda counts it): if ring comes near the roofline where launch does not, a persistent decode
 * kernel is the way to the target (and "launch, rings" says how much of that the rings alone give);
 * if none does, the per-stage costs are elsewhere. */
#include "cuda_standalone.cuh"

enum { LAYERS = 32, PER_LAYER = 5, NST = LAYERS * PER_LAYER, ACT_FLOATS = 16384, L = 16, WARPS = 16 };

/* Stage i: its bytes at off (16-byte multiple), the previous stage's activations it reads (bytes),
 * and how long it waits (ns) before them: attention's time, taken as a second dependency. */
struct stage {
    size_t off, bytes;
    int act, pre_ns;
};

/* What a stage does besides streaming: spin_ns after its activations' read (their quantization), and
 * work rounds of four dependent dp4a on every 16 bytes it reads (a product's arithmetic) */
struct knobs {
    int spin_ns, work;
};

__device__ __forceinline__ uint32_t consume(uint4 v, uint32_t acc, int work) {
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
    for (int r = 0; r < work; r++) {
        acc = (uint32_t)__dp4a((int)v.x, (int)acc, (int)acc);
        acc = (uint32_t)__dp4a((int)v.y, (int)acc, (int)acc);
        acc = (uint32_t)__dp4a((int)v.z, (int)acc, (int)acc);
        acc = (uint32_t)__dp4a((int)v.w, (int)acc, (int)acc);
    }
    return acc;
}

__device__ __forceinline__ unsigned long long now_ns(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

__device__ __forceinline__ void spin(int ns) {
    if (ns <= 0) return;
    const unsigned long long t0 = now_ns();
    while (now_ns() - t0 < (unsigned long long)ns) {
    }
}

/* Every block of the grid (all resident: a cooperative launch) has arrived at barrier number k. */
__device__ __forceinline__ void grid_barrier(unsigned *ctr, unsigned k) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence(); /* the block's writes (seen through the CTA barrier) before its arrival */
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
        unsigned v;
        do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
        while (v < k * gridDim.x);
    }
    __syncthreads();
}

/* The dependency's end: the previous stage's activations (act bytes of buffer (i + 1) & 1, read past
 * L1), then spin_ns. Returns something of them so the loads are kept. */
__device__ __forceinline__ uint32_t prologue(const float *act, int i, int bytes, int spin_ns) {
    const float4 *a = (const float4 *)(act + (size_t)((i + 1) & 1) * ACT_FLOATS);
    float s = 0.0f;
    for (int j = threadIdx.x; j < bytes / 16; j += blockDim.x) {
        const float4 v = __ldcg(a + j);
        s += v.x + v.y + v.z + v.w;
    }
    spin(spin_ns);
    __syncthreads();
    return __float_as_uint(s);
}

/* This block's part of stage i's activations (buffer i & 1), after its bytes. */
__device__ __forceinline__ void write_act(float *act, int i, uint32_t acc) {
    float *a = act + (size_t)(i & 1) * ACT_FLOATS;
    const int per = ACT_FLOATS / gridDim.x;
    if ((int)threadIdx.x < per) a[blockIdx.x * per + threadIdx.x] = (float)(acc & 0xff);
}

/* ------------------------------------------------------------------ launch: a kernel a stage */

__global__ void __launch_bounds__(WARPS * 32, 1) k_stage(const uint8_t *w, stage st, int i, float *act, knobs kn,
                                                         uint32_t *sink) {
    const size_t nt = (size_t)gridDim.x * blockDim.x, tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4 *p = (const uint4 *)(w + st.off);
    const size_t n16 = st.bytes / 16;
    uint4 v[L];
    auto load = [&](size_t base) {
#pragma unroll
        for (int k = 0; k < L; k++) {
            const size_t j = base + (size_t)k * nt + tid;
            v[k] = j < n16 ? ld_stream(p + j) : make_uint4(0, 0, 0, 0);
        }
    };
    load(0);
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    uint32_t acc = 0;
    if (st.pre_ns > 0) spin(st.pre_ns);
    acc ^= prologue(act, i, st.act, kn.spin_ns);
    for (size_t base = 0;;) {
#pragma unroll
        for (int k = 0; k < L; k++) acc = consume(v[k], acc, kn.work);
        base += nt * L;
        if (base >= n16) break;
        load(base);
    }
    write_act(act, i, acc);
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* ------------------------------------------------------------------ reg: persistent, registers */

__global__ void __launch_bounds__(WARPS * 32, 1) k_reg_chain(const uint8_t *w, const stage *sts, int nst, float *act,
                                                             unsigned *ctr, knobs kn, uint32_t *sink) {
    const size_t nt = (size_t)gridDim.x * blockDim.x, tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint4 v[L];
    auto load = [&](int i, size_t base) {
        const uint4 *p = (const uint4 *)(w + sts[i].off);
        const size_t n16 = sts[i].bytes / 16;
#pragma unroll
        for (int k = 0; k < L; k++) {
            const size_t j = base + (size_t)k * nt + tid;
            v[k] = j < n16 ? ld_stream(p + j) : make_uint4(0, 0, 0, 0);
        }
    };
    uint32_t acc = 0;
    unsigned bars = 0;
    load(0, 0);
    for (int i = 0; i < nst; i++) {
        const stage st = sts[i];
        if (i > 0) { /* v already holds this stage's first batch */
            grid_barrier(ctr, ++bars);
            if (st.pre_ns > 0) {
                spin(st.pre_ns);
                grid_barrier(ctr, ++bars);
            }
            acc ^= prologue(act, i, st.act, kn.spin_ns);
        }
        const size_t n16 = st.bytes / 16;
        for (size_t base = 0;;) {
#pragma unroll
            for (int k = 0; k < L; k++) acc = consume(v[k], acc, kn.work);
            base += nt * L;
            if (base < n16) {
                load(i, base);
                continue;
            }
            if (i + 1 < nst) load(i + 1, 0); /* the next stage's first batch, before the barrier */
            break;
        }
        write_act(act, i, acc);
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* ------------------------------------------------------------------ ring: persistent, bulk copies */

/* A warp's ring of ns slots of sb bytes in shared memory, filled by lane 0's bulk copies (mbarrier
 * completion), read in the order they were filled; every lane keeps the same counts. */
struct warp_ring {
    uint8_t *ring;
    uint64_t *bar;
    int sb, ns;
    unsigned issued, used;
    uint64_t pol;

    __device__ void init(uint8_t *sm, int sb_, int ns_) {
        const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5;
        sb = sb_;
        ns = ns_;
        ring = sm + (size_t)warp * ns * sb;
        bar = (uint64_t *)(sm + (size_t)nw * ns * sb) + warp * ns;
        issued = used = 0;
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
        if ((threadIdx.x & 31) == 0) {
            for (int k = 0; k < ns; k++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(bar + k)) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncwarp();
    }
    /* lane 0: n bytes (16-byte multiple) of src into the next slot; the slot was read (done) before */
    __device__ void put(const uint8_t *src, uint32_t n) {
        const int k = (int)(issued % (unsigned)ns);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(bar + k)), "r"(n) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
                         sa(ring + (size_t)k * sb)),
                     "l"(src), "r"(n), "r"(sa(bar + k)), "l"(pol)
                     : "memory");
    }
    /* every lane, after lane 0's put */
    __device__ void count_put(void) { issued++; }
    /* the oldest filled slot, once its bytes are there */
    __device__ const uint4 *take(void) {
        const int k = (int)(used % (unsigned)ns);
        uint32_t done;
        do {
            asm volatile("{\n\t.reg .pred q;\n\tmbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2;\n\tselp.u32 %0, 1, 0, q;\n\t}"
                         : "=r"(done)
                         : "r"(sa(bar + k)), "r"((used / (unsigned)ns) & 1u)
                         : "memory");
        } while (!done);
        return (const uint4 *)(ring + (size_t)k * sb);
    }
    /* every lane: the slot taken has been read */
    __device__ void done(void) {
        __syncwarp();
        used++;
    }
};

/* bytes of item it of a share of per bytes in slots of sb */
__device__ __forceinline__ uint32_t item_bytes(size_t per, int it, int sb) {
    const size_t o = (size_t)it * sb;
    return (uint32_t)(per - o < (size_t)sb ? per - o : (size_t)sb);
}

/* launch, by rings: k_stage with the warp's share of the stage streamed through its ring, the
 * first ns slots asked for before griddepcontrol.wait */
__global__ void __launch_bounds__(WARPS * 32, 1) k_stage_ring(const uint8_t *w, stage st, int i, float *act, knobs kn,
                                                              int sb, int ns, uint32_t *sink) {
    extern __shared__ __align__(128) uint8_t sm[];
    const int nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    const size_t gw = (size_t)blockIdx.x * nw + (threadIdx.x >> 5), nwg = (size_t)gridDim.x * nw;
    const size_t per = st.bytes / nwg / 16 * 16;
    const int items = (int)((per + sb - 1) / (size_t)sb);
    const uint8_t *src = w + st.off + gw * per;
    warp_ring r;
    r.init(sm, sb, ns);
    int next = 0;
    for (; next < ns && next < items; next++) {
        if (lane == 0) r.put(src + (size_t)next * sb, item_bytes(per, next, sb));
        r.count_put();
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    uint32_t acc = 0;
    if (st.pre_ns > 0) spin(st.pre_ns);
    acc ^= prologue(act, i, st.act, kn.spin_ns);
    for (int it = 0; it < items; it++) {
        const uint4 *s = r.take();
        const int n16 = (int)(item_bytes(per, it, sb) / 16);
        for (int j = lane; j < n16; j += 32) acc = consume(s[j], acc, kn.work);
        r.done();
        if (next < items) {
            if (lane == 0) r.put(src + (size_t)next * sb, item_bytes(per, next, sb));
            r.count_put();
            next++;
        }
    }
    write_act(act, i, acc);
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* ring: warp gw of the grid streams the contiguous share [gw·per, (gw + 1)·per) of every stage (per:
 * the stage's bytes over the grid's warps, down to 16) through its ring; a producer cursor (stage ps,
 * item pit) walks all stages' items in order and refills each slot as soon as the warp has read it,
 * across stage boundaries. */
__global__ void __launch_bounds__(WARPS * 32, 1) k_ring_chain(const uint8_t *w, const stage *sts, int nst, float *act,
                                                              unsigned *ctr, knobs kn, int sb, int ns,
                                                              uint32_t *sink) {
    extern __shared__ __align__(128) uint8_t sm[];
    const int nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    const size_t gw = (size_t)blockIdx.x * nw + (threadIdx.x >> 5), nwg = (size_t)gridDim.x * nw;
    auto per_of = [&](int i) { return sts[i].bytes / nwg / 16 * 16; };
    auto items_of = [&](int i) { return (int)((per_of(i) + sb - 1) / (size_t)sb); };
    warp_ring r;
    r.init(sm, sb, ns);
    int ps = 0, pit = 0; /* the producer's next item */
    auto put_next = [&]() { /* the next item of any stage into the next slot, if there is one */
        while (ps < nst && pit >= items_of(ps)) {
            ps++;
            pit = 0;
        }
        if (ps >= nst) return;
        const size_t per = per_of(ps);
        if (lane == 0) r.put(w + sts[ps].off + gw * per + (size_t)pit * sb, item_bytes(per, pit, sb));
        r.count_put();
        pit++;
    };
    for (int k = 0; k < ns; k++) put_next();
    uint32_t acc = 0;
    unsigned bars = 0;
    for (int i = 0; i < nst; i++) {
        const stage st = sts[i];
        if (i > 0) {
            grid_barrier(ctr, ++bars);
            if (st.pre_ns > 0) {
                spin(st.pre_ns);
                grid_barrier(ctr, ++bars);
            }
            acc ^= prologue(act, i, st.act, kn.spin_ns);
        }
        const int items = items_of(i);
        const size_t per = per_of(i);
        for (int it = 0; it < items; it++) {
            const uint4 *s = r.take();
            const int n16 = (int)(item_bytes(per, it, sb) / 16);
            for (int j = lane; j < n16; j += 32) acc = consume(s[j], acc, kn.work);
            r.done();
            put_next();
        }
        write_act(act, i, acc);
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

/* ------------------------------------------------------------------ host */

static int sms;
static uint8_t *wbuf;
static float *act;
static unsigned *ctr;
static uint32_t *sink;
static stage hst[NST]; /* attention as a stage of no bytes */
static stage cst[NST]; /* the stages with bytes, attention's wait folded into the next one's pre_ns */
static int nc;
static stage *dst_;

/* a block of WARPS warps a multiprocessor, with one launch attribute */
static cudaLaunchConfig_t one_wave(cudaLaunchAttribute *at, cudaStream_t s) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)sms);
    cfg.blockDim = dim3(WARPS * 32);
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cfg;
}

/* one kernel a stage, launched by f(cfg, i) with programmatic dependent launch and smem bytes of
 * dynamic shared memory, captured in one graph: best of reps */
template <typename F> static double time_launch(F f, size_t smem, int reps) {
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = one_wave(at, s);
    cfg.dynamicSmemBytes = smem;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < nc; i++) f(cfg, i);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double us = time_us(s, [&] { CK(cudaGraphLaunch(ge, s)); });
        if (us < best) best = us;
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    return best;
}

/* one cooperative launch of a persistent kernel over the whole chain, best of reps */
template <typename F> static double time_coop(F launch, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        CK(cudaMemset(ctr, 0, sizeof(unsigned)));
        const double us = time_us(0, launch);
        if (us < best) best = us;
    }
    return best;
}

/* the stages with bytes; attention (no bytes) folded into the next stage's pre_ns */
static int compact(stage *out) {
    int n = 0;
    int pre = 0;
    for (int i = 0; i < NST; i++) {
        if (hst[i].bytes == 0) {
            pre += hst[i].pre_ns;
            continue;
        }
        out[n] = hst[i];
        out[n].pre_ns += pre;
        pre = 0;
        n++;
    }
    return n;
}

int main(int argc, char **argv) {
    const int attn_ns = argc > 1 ? atoi(argv[1]) : 3000, spin_ns = argc > 2 ? atoi(argv[2]) : 0,
              work = argc > 3 ? atoi(argv[3]) : 4;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t sz[PER_LAYER] = {14155776, 0, 9437184, 66060288, 33030144}; /* Q4_0 bytes: 4096·6144, -, 4096², 2·4096·14336, 14336·4096 at 4.5 bits */
    const int actb[PER_LAYER] = {16384, 0, 16384, 16384, 57344};
    size_t layer = 0;
    for (int k = 0; k < PER_LAYER; k++) layer += sz[k];
    CK(cudaMalloc(&wbuf, layer * LAYERS));
    CK(cudaMemset(wbuf, 1, layer * LAYERS));
    CK(cudaMalloc(&act, 2 * ACT_FLOATS * sizeof(float)));
    CK(cudaMemset(act, 0, 2 * ACT_FLOATS * sizeof(float)));
    CK(cudaMalloc(&ctr, sizeof(unsigned)));
    CK(cudaMalloc(&sink, 4));
    size_t off = 0;
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < PER_LAYER; k++) {
            stage &st = hst[l * PER_LAYER + k];
            st.off = off;
            st.bytes = sz[k];
            st.act = actb[k];
            st.pre_ns = k == 1 ? attn_ns : 0;
            off += sz[k];
        }
    nc = compact(cst);
    CK(cudaMalloc(&dst_, sizeof cst));
    CK(cudaMemcpy(dst_, cst, sizeof cst, cudaMemcpyHostToDevice));

    const double copy = copy_gbs(wbuf); /* GB/s, read + write, as bench_cuda */
    const double ideal = layer / copy / 1e3; /* µs a layer */
    printf("%d multiprocessors; copy %.0f GB/s; a layer %.2f MB, %.2f µs at that rate; attention %d ns, prologue spin %d ns\n\n",
           sms, copy, layer / 1e6, ideal, attn_ns, spin_ns);
    int coop = 0;
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    if (!coop) printf("no cooperative launch on this device: the persistent ways (reg, ring) are skipped\n\n");
    cudaLaunchAttribute ca[1];
    ca[0].id = cudaLaunchAttributeCooperative;
    ca[0].val.cooperative = 1;
    printf("| way | shape | dp4a a 16 bytes | µs a layer | of the roofline |\n|---|---|---|---|---|\n");
    const int works[2] = {0, work};
    const int rings[][2] = {{4096, 3}, {8192, 1}, {4096, 2}, {2048, 6}, {2048, 4}, {1024, 8}}; /* ≤ 197 KB a block */
    for (int wi = 0; wi < (work > 0 ? 2 : 1); wi++) {
        const knobs kn = {spin_ns, works[wi]};
        auto row = [&](const char *way, const char *shape, double us) {
            printf("| %s | %s | %d | %.2f | %.0f %% |\n", way, shape, 4 * kn.work, us / LAYERS, 100.0 * ideal * LAYERS / us);
        };
        row("launch", "16 warps x 16 loads", time_launch([&](cudaLaunchConfig_t &c, int i) {
                CK(cudaLaunchKernelEx(&c, k_stage, (const uint8_t *)wbuf, cst[i], i, act, kn, sink));
            }, 0, 5));
        cudaLaunchConfig_t cfg = one_wave(ca, 0);
        if (coop)
            row("reg", "16 warps x 16 loads", time_coop([&] {
                    CK(cudaLaunchKernelEx(&cfg, k_reg_chain, (const uint8_t *)wbuf, (const stage *)dst_, nc, act, ctr, kn, sink));
                }, 5));
        for (auto &r : rings) {
            const int sb = r[0], ns = r[1];
            const size_t smem = (size_t)WARPS * ns * (sb + 8);
            char shape[64];
            snprintf(shape, sizeof shape, "16 warps x %d slots of %d KB", ns, sb / 1024);
            CK(cudaFuncSetAttribute(k_stage_ring, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            row("launch, rings", shape, time_launch([&](cudaLaunchConfig_t &c, int i) {
                    CK(cudaLaunchKernelEx(&c, k_stage_ring, (const uint8_t *)wbuf, cst[i], i, act, kn, sb, ns, sink));
                }, smem, 5));
            if (!coop) continue;
            CK(cudaFuncSetAttribute(k_ring_chain, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            cfg.dynamicSmemBytes = smem;
            row("ring", shape, time_coop([&] {
                    CK(cudaLaunchKernelEx(&cfg, k_ring_chain, (const uint8_t *)wbuf, (const stage *)dst_, nc, act, ctr, kn, sb,
                                          ns, sink));
                }, 5));
        }
    }
    return 0;
}
