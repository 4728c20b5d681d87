/* cuda_attn.cu — attention of a batch of queries over the KV cache.
 *
 * Kernels picked from shapes only (n, head_dim, group, cache size; never from
 * positions, so CUDA graphs can replay a launch):
 *  - k_fattn2 (n ≥ 64, head_dim ≤ 256, a multiple of 8, the bf16 copy below
 *    ≤ 1 GiB): k_fattn's rows, tiles and arithmetic over a bf16 copy of the
 *    slots the batch reads (k_kv_bf16, into the attention workspace), each K/V
 *    tile copied to shared memory with cp.async while the previous one is
 *    multiplied (two buffers). LMC_CUDA_FATTN=1 keeps k_fattn (A/B).
 *  - k_fattn (the other n ≥ 64, head_dim ≤ 256, a multiple of 4): FlashAttention-2 style
 *    on tensor cores. A block owns 128 rows (8 warps; 64 rows, 4 warps, for
 *    head_dim > 128) of (token, query head) pairs of one KV head (the grouped
 *    query heads of a token are adjacent rows, so K/V tiles are shared by the
 *    group), streams K/V tiles of the cache (f32 loads, 4+4 float4 in flight
 *    per thread, converted to bf16 in shared memory), computes S = QKᵀ and O += PV with
 *    mma.m16n8k16 (bf16 operands, f32 accumulators) and keeps the online
 *    softmax in registers. Rows of several sequences in one block are served
 *    one sequence per pass; key tiles no row of the pass can see are skipped.
 *  - k_attn_dec_cl (n < 64, head_dim ≤ 128, devices that launch clusters, while the working
 *    blocks fit one wave; LMC_CUDA_DEC_CLUSTER=0: k_attn_dec): k_attn_dec's block in clusters of up to 8
 *    splits of one piece of a token's range (256 positions a piece, at most 8
 *    pieces: longer ones past 2048 positions), the splits merged through the
 *    cluster's shared memory, several pieces by the last to finish.
 *  - k_attn_dec (n < 64, head_dim ≤ 256): f32, one block per (KV head, token,
 *    split) walking 32 positions per step (scores one quad of lanes per
 *    position, softmax one warp per query head, PV one thread per dimension).
 *    Splits are 64 positions (at most 256 splits: longer past 16k positions), two of
 *    32 for a range of at most 64 (LMC_CUDA_DEC_HALF), longer
 *    for a token whose range would take more than 32 of them (LMC_CUDA_DEC_SPLITS); a
 *    split beyond the token's range exits at once, and a token whose range
 *    fits in one split gets its output from split 0 directly; otherwise the
 *    last of its splits to finish (a counter per (token, KV head) in
 *    lmc_cuda_attn.done) merges them, or k_attn_dec_combine does when there
 *    are no counters (LMC_CUDA_ATTN_MERGE=0).
 *  - k_attn (everything else, e.g. head_dim 512): one warp per query head,
 *    f32, splits of 16 positions merged by k_attn_combine.
 * Positions, windows and ring slots follow the CPU reference: token t sees
 * positions [max(0, pos - window + 1), pos] (at most n_ctx of them) of
 * sequence seq[t] at slots p mod n_ctx; a token of no valid sequence gets 0.
 */
#include "cuda_common.cuh"
#include "cuda_gemv.cuh" /* qv_device */
#include "cuda_trace.cuh"

#include <cooperative_groups.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The positions [*b, *e] a token at position p_end sees. */
static __device__ __forceinline__ void attn_range_at(const lmc_cuda_attn &a, int64_t p_end, int64_t *b, int64_t *e) {
    int64_t p_begin = a.window > 0 ? p_end - a.window + 1 : 0;
    if (p_begin < 0) p_begin = 0;
    if (p_end - p_begin + 1 > a.n_ctx) p_begin = p_end - a.n_ctx + 1;
    *b = p_begin;
    *e = p_end;
}

static __device__ __forceinline__ void attn_range(const lmc_cuda_attn &a, int64_t t, int64_t *b, int64_t *e) {
    attn_range_at(a, a.pos[t], b, e);
}

/* Slot of position base_pos + j where base = base_pos mod n_ctx and 0 ≤ j < span. */
static __device__ __forceinline__ int64_t ring_slot(int64_t base, int j, int64_t n_ctx, int span) {
    int64_t s = base + j;
    if (s >= n_ctx) s = n_ctx >= span ? s - n_ctx : s % n_ctx;
    return s;
}

/* ring_slot for a position within n_ctx - 1 of the step's first (base its slot): one subtraction. A
 * decode step only dereferences the slots of positions in its range, which spans at most n_ctx
 * positions, so no modulo is compiled into its unrolled loads. */
static __device__ __forceinline__ int64_t ring_near(int64_t base, int j, int64_t n_ctx) {
    const int64_t s = base + j;
    return s >= n_ctx ? s - n_ctx : s;
}

/* ------------------------------------------------------------ tensor-core prefill */

#define FA_LOG2E 1.4426950408889634f
#define FA_LD 4  /* K and V float4 loads in flight per thread while a tile is staged */

/* The factor a row's accumulators take when its online softmax (running max m, sum l; in log2
 * units when log2u) ends: 1 / l, or with an attention sink σ = sinks[h] (natural units) joining
 * the denominator, c / (l·c + e^(σ - M)) with M = max(m, σ), c = e^(m - M). A row with no
 * position (m = -inf, l = 0) gets 0 either way. Every kernel and merge below ends through it. */
static __device__ __forceinline__ float attn_final(float l, float m, const float *sinks, int h, bool log2u) {
    if (!sinks) return l > 0 ? 1.0f / l : 0.0f;
    const float sg = log2u ? sinks[h] * FA_LOG2E : sinks[h];
    const float M = fmaxf(m, sg);
    const float c = log2u ? exp2f(m - M) : expf(m - M);
    return c / (l * c + (log2u ? exp2f(sg - M) : expf(sg - M)));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

static __device__ __forceinline__ void ldm_x4(uint32_t r[4], const uint16_t *p) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}

static __device__ __forceinline__ void ldm_x4_t(uint32_t r[4], const uint16_t *p) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}

/* c (16×8 f32) += a (16×16 bf16, row) · b (16×8 bf16, col) */
static __device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ---- pieces of the tensor-core prefill kernels (k_fattn, k_fattn2): block (row tile r0.., KV head g)
 * of NW warps; row r of the batch is token r / group, query head g·group + r % group; warp w owns
 * rows 16w..16w+15 (its lanes' rows a: 16w + lane/4, b: a + 8). Q is staged as bf16 [16·NW][HD+8]. */

/* Each row's sequence and position range (r_seq -1: none), then Q into sQ; ends with a barrier. */
template <int HD, int NW>
static __device__ __forceinline__ void fa_rows_q(const lmc_cuda_attn &a, int64_t n_rows, int64_t r0, int g, uint16_t *sQ,
                                                 int *r_seq, int *r_pb, int *r_pe) {
    constexpr int ST = HD + 8, FA_BM = 16 * NW, NT = 32 * NW;
    const int tid = threadIdx.x, group = a.n_head / a.n_kv_head, hd = a.head_dim;
    if (tid < FA_BM) {
        const int64_t r = r0 + tid;
        int sq = -1, pb = 1, pe = 0;
        if (r < n_rows) {
            const int64_t t = r / group, s = a.seq[t];
            if (s >= 0 && s < a.n_seq) {
                int64_t b, e;
                attn_range(a, t, &b, &e);
                if (b <= e) { sq = (int)s; pb = (int)b; pe = (int)e; }
            }
        }
        r_seq[tid] = sq;
        r_pb[tid] = pb;
        r_pe[tid] = pe;
    }
    for (int i = tid; i < FA_BM * HD / 4; i += NT) {
        const int row = i / (HD / 4), d = (i % (HD / 4)) * 4;
        const int64_t r = r0 + row;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < n_rows && d < hd) {
            const int64_t t = r / group;
            const int h = g * group + (int)(r % group);
            v = *(const float4 *)(a.q + (t * a.n_head + h) * hd + d);
        }
        *(uint2 *)(sQ + row * ST + d) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }
    __syncthreads();
}

/* The next pass: the smallest sequence above prev among the block's rows (cur) and the union of its
 * rows' ranges [lo, hi]; 0 when none is left. s3: three shared ints. */
template <int NW>
static __device__ __forceinline__ int fa_pass(int prev, const int *r_seq, const int *r_pb, const int *r_pe, int *s3,
                                              int *cur, int *lo, int *hi) {
    constexpr int FA_BM = 16 * NW;
    const int tid = threadIdx.x;
    if (tid == 0) { s3[0] = INT_MAX; s3[1] = INT_MAX; s3[2] = INT_MIN; }
    __syncthreads();
    if (tid < FA_BM && r_seq[tid] > prev) atomicMin(&s3[0], r_seq[tid]);
    __syncthreads();
    *cur = s3[0];
    if (*cur == INT_MAX) return 0;
    if (tid < FA_BM && r_seq[tid] == *cur) {
        atomicMin(&s3[1], r_pb[tid]);
        atomicMax(&s3[2], r_pe[tid]);
    }
    __syncthreads();
    *lo = s3[1];
    *hi = s3[2];
    return 1;
}

/* A warp's running softmax and output accumulators for its lanes' rows a and b. */
template <int HD> struct fa_acc {
    float o[HD / 8][4];
    float m_a, m_b, l_a, l_b;
};

template <int HD> static __device__ __forceinline__ void fa_acc_init(fa_acc<HD> &A) {
#pragma unroll
    for (int i = 0; i < HD / 8; i++) A.o[i][0] = A.o[i][1] = A.o[i][2] = A.o[i][3] = 0.0f;
    A.m_a = A.m_b = -INFINITY;
    A.l_a = A.l_b = 0.0f;
}

/* One key tile (keys kb.., staged bf16 in sK, sV [BN][HD+8]) of pass cur into the warp's rows: S = QKᵀ,
 * scale (log2 units), softcap, each row's range mask, the online softmax, O += P V. */
template <int HD, int BN>
static __device__ __forceinline__ void fa_tile(fa_acc<HD> &A, const lmc_cuda_attn &a, const uint16_t *sQ, const uint16_t *sK,
                                               const uint16_t *sV, int kb, int cur, const int *r_seq, const int *r_pb,
                                               const int *r_pe) {
    constexpr int ST = HD + 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3, hd = a.head_dim;
    const int ra = warp * 16 + gid, rb = ra + 8;
    const float cap = a.softcap, sc = cap > 0 ? a.scale : a.scale * FA_LOG2E;
    float(&o)[HD / 8][4] = A.o;
    float &m_a = A.m_a, &m_b = A.m_b, &l_a = A.l_a, &l_b = A.l_b;
    float s[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        if (kk * 16 >= hd) break;
        uint32_t af[4];
        ldm_x4(af, sQ + (warp * 16 + (lane & 15)) * ST + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int nn = 0; nn < BN / 16; nn++) {
            uint32_t bf[4];
            ldm_x4(bf, sK + (nn * 16 + (lane & 7) + ((lane >> 4) << 3)) * ST + kk * 16 + ((lane >> 3) & 1) * 8);
            mma_bf16(s[2 * nn], af, bf[0], bf[1]);
            mma_bf16(s[2 * nn + 1], af, bf[2], bf[3]);
        }
    }

    /* scale, softcap, mask (rows' ranges from shared memory); scores in log2 units */
    const bool on_a = r_seq[ra] == cur, on_b = r_seq[rb] == cur;
    const int pb_a = r_pb[ra], pe_a = r_pe[ra], pb_b = r_pb[rb], pe_b = r_pe[rb];
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int kp = kb + j * 8 + tig * 2 + (e & 1);
            const bool ok = e < 2 ? (on_a && kp >= pb_a && kp <= pe_a) : (on_b && kp >= pb_b && kp <= pe_b);
            float x = s[j][e] * sc;
            if (cap > 0) x = cap * tanhf(x / cap) * FA_LOG2E;
            x = ok ? x : -INFINITY;
            s[j][e] = x;
            if (e < 2) mx_a = fmaxf(mx_a, x);
            else mx_b = fmaxf(mx_b, x);
        }
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
    const float mu_a = mn_a == -INFINITY ? 0.0f : mn_a, mu_b = mn_b == -INFINITY ? 0.0f : mn_b;
    const float c_a = exp2f(m_a - mu_a), c_b = exp2f(m_b - mu_b);
    m_a = mn_a;
    m_b = mn_b;
    l_a *= c_a;
    l_b *= c_b;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        s[j][0] = exp2f(s[j][0] - mu_a);
        s[j][1] = exp2f(s[j][1] - mu_a);
        s[j][2] = exp2f(s[j][2] - mu_b);
        s[j][3] = exp2f(s[j][3] - mu_b);
        l_a += s[j][0] + s[j][1];
        l_b += s[j][2] + s[j][3];
    }
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
        o[i][0] *= c_a;
        o[i][1] *= c_a;
        o[i][2] *= c_b;
        o[i][3] *= c_b;
    }

    /* O += P V: the S accumulators of key tiles 2kk, 2kk+1 are the A fragment of step kk */
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        const uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dd = 0; dd < HD / 16; dd++) {
            if (dd * 16 >= hd) break;
            uint32_t bf[4];
            ldm_x4_t(bf, sV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ST + dd * 16 + (lane >> 4) * 8);
            mma_bf16(o[2 * dd], pa, bf[0], bf[1]);
            mma_bf16(o[2 * dd + 1], pa, bf[2], bf[3]);
        }
    }
}

/* The warp's rows' outputs: o / l (attn_final) into a.out. */
template <int HD>
static __device__ __forceinline__ void fa_store(fa_acc<HD> &A, const lmc_cuda_attn &a, int64_t n_rows, int64_t r0, int g) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int group = a.n_head / a.n_kv_head, hd = a.head_dim, ra = warp * 16 + gid, rb = ra + 8;
    float(&o)[HD / 8][4] = A.o;
    float &l_a = A.l_a, &l_b = A.l_b;
    const float m_a = A.m_a, m_b = A.m_b;
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    const float lh[2] = {l_a, l_b}, mh[2] = {m_a, m_b};
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int64_t r = r0 + (half ? rb : ra);
        if (r >= n_rows) continue;
        const int64_t t = r / group;
        const int h = g * group + (int)(r % group);
        const float inv = attn_final(lh[half], mh[half], a.sinks, h, true);
        float *op = a.out + (t * a.n_head + h) * hd;
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
            const int d = i * 8 + tig * 2;
            if (d < hd) *(float2 *)(op + d) = make_float2(o[i][2 * half] * inv, o[i][2 * half + 1] * inv);
        }
    }
}

template <int HD, int BN, int NW>
static constexpr size_t fa_smem_bytes() {
    return (size_t)(16 * NW + 2 * BN) * (HD + 8) * sizeof(uint16_t);
}

/* Block (row tile, kv head g) of NW warps (rows as fa_rows_q). HD ≥ head_dim (padded dims are
 * zero); BN keys per tile. Shared memory: Q [16·NW][HD+8], K [BN][HD+8], V [BN][HD+8] bf16 (rows
 * padded by 16 bytes: conflict-free ldmatrix); each tile's f32 K/V loaded and converted, then
 * fa_tile. */
template <int HD, int BN, int NW>
__global__ void __launch_bounds__(32 * NW, NW == 8 ? 2 : 1) k_fattn(lmc_cuda_attn a, int64_t n_rows) {
    constexpr int ST = HD + 8, FA_BM = 16 * NW, NT = 32 * NW;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    uint16_t *sQ = (uint16_t *)fa_smem, *sK = sQ + FA_BM * ST, *sV = sK + BN * ST;
    __shared__ int r_seq[FA_BM], r_pb[FA_BM], r_pe[FA_BM];
    __shared__ int s3[3];
    const int tid = threadIdx.x, g = blockIdx.y, hd = a.head_dim;
    const int64_t r0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * FA_BM; /* late (long) rows first */
    const int64_t kv_row = (int64_t)hd * a.n_kv_head;

    fa_rows_q<HD, NW>(a, n_rows, r0, g, sQ, r_seq, r_pb, r_pe);
    fa_acc<HD> A;
    fa_acc_init(A);

    for (int prev = -1;;) { /* one pass per sequence among the block's rows, in increasing order */
        int cur, lo, hi;
        if (!fa_pass<NW>(prev, r_seq, r_pb, r_pe, s3, &cur, &lo, &hi)) break;
        prev = cur;
        const float *kc = a.k + (int64_t)cur * a.n_ctx * kv_row + (int64_t)g * hd;
        const float *vc = a.v + (int64_t)cur * a.n_ctx * kv_row + (int64_t)g * hd;

        for (int kb = lo; kb <= hi; kb += BN) {
            const int hit = tid < FA_BM && r_seq[tid] == cur && r_pb[tid] <= kb + BN - 1 && r_pe[tid] >= kb;
            if (!__syncthreads_or(hit)) continue; /* no row of this pass sees these keys */
            const int64_t base = kb % a.n_ctx;
            /* FA_LD float4 of K and of V per thread in flight before any is stored */
            constexpr int NLD = BN * HD / 4 / NT;
            static_assert(NLD % FA_LD == 0, "tile loads");
#pragma unroll 1
            for (int c0 = 0; c0 < NLD; c0 += FA_LD) {
                float4 kv[FA_LD], vv[FA_LD];
#pragma unroll
                for (int u = 0; u < FA_LD; u++) {
                    const int i = tid + (c0 + u) * NT, j = i / (HD / 4), d = (i % (HD / 4)) * 4;
                    kv[u] = vv[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (kb + j <= hi && d < hd) {
                        const int64_t off = ring_slot(base, j, a.n_ctx, BN) * kv_row + d;
                        kv[u] = __ldg((const float4 *)(kc + off));
                        vv[u] = __ldg((const float4 *)(vc + off));
                    }
                }
#pragma unroll
                for (int u = 0; u < FA_LD; u++) {
                    const int i = tid + (c0 + u) * NT, j = i / (HD / 4), d = (i % (HD / 4)) * 4;
                    *(uint2 *)(sK + j * ST + d) = make_uint2(pack_bf16(kv[u].x, kv[u].y), pack_bf16(kv[u].z, kv[u].w));
                    *(uint2 *)(sV + j * ST + d) = make_uint2(pack_bf16(vv[u].x, vv[u].y), pack_bf16(vv[u].z, vv[u].w));
                }
            }
            __syncthreads();

            fa_tile<HD, BN>(A, a, sQ, sK, sV, kb, cur, r_seq, r_pb, r_pe);
        }
    }

    fa_store(A, a, n_rows, r0, g);
}

/* ------------------------------------------------------------ tensor-core prefill, bf16 K/V */

/* The K/V slots a batch reads, as bf16 (k_fattn2's input): block (slot chunk c, sequence s)
 * converts slots [KVC_SLOTS·c, KVC_SLOTS·(c+1)) of both caches of s below min(n_ctx, 1 + the
 * largest position of a token of s) — found by scanning the batch, so the launch depends on
 * shapes only. Rounding as pack_bf16 (k_fattn converts the same values the same way). */
#define KVC_SLOTS 8 /* 64 made 33 blocks for a 2064-slot cache: 39 µs for 24 MB at 2048 tokens */
__global__ void __launch_bounds__(256) k_kv_bf16(lmc_cuda_attn a, uint16_t *kb, uint16_t *vb) {
    __shared__ int s_need;
    const int s = blockIdx.y;
    const int64_t c0 = (int64_t)blockIdx.x * KVC_SLOTS;
    if (threadIdx.x == 0) s_need = 0;
    __syncthreads();
    int need = 0;
    for (int64_t t = threadIdx.x; t < a.n; t += blockDim.x)
        if (a.seq[t] == s && a.pos[t] >= 0) need = max(need, (int)min((int64_t)a.pos[t] + 1, a.n_ctx));
    if (need > 0) atomicMax(&s_need, need);
    __syncthreads();
    const int64_t end = min(c0 + KVC_SLOTS, (int64_t)s_need);
    if (c0 >= end) return;
    const int64_t row = (int64_t)a.head_dim * a.n_kv_head, base = ((int64_t)s * a.n_ctx + c0) * row;
    const int64_t n4 = (end - c0) * row / 4; /* row is a multiple of 8 */
    const float4 *k4 = (const float4 *)(a.k + base), *v4 = (const float4 *)(a.v + base);
    uint2 *ko = (uint2 *)(kb + base), *vo = (uint2 *)(vb + base);
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 k = __ldg(k4 + i), v = __ldg(v4 + i);
        ko[i] = make_uint2(pack_bf16(k.x, k.y), pack_bf16(k.z, k.w));
        vo[i] = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }
}

static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(gmem), "r"(src_bytes) : "memory");
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <int HD, int BN, int NW>
static constexpr size_t fa2_smem_bytes() {
    return (size_t)(16 * NW + 4 * BN) * (HD + 8) * sizeof(uint16_t);
}

/* k_fattn over the bf16 copy of the K/V slots (k_kv_bf16; head_dim a multiple of 8): the same
 * rows, tiles, masks and arithmetic, but each K/V tile goes straight to shared memory with
 * cp.async (16-byte chunks, zero-filled past the range or head_dim) into one of two buffers,
 * the next tile's copies in flight while the current one is multiplied. Shared memory: Q
 * [16·NW][HD+8], then K and V [BN][HD+8] of buffer 0 and of buffer 1. */
template <int HD, int BN, int NW>
__global__ void __launch_bounds__(32 * NW, NW == 8 ? 2 : 1)
    k_fattn2(lmc_cuda_attn a, int64_t n_rows, const uint16_t *kb16, const uint16_t *vb16) {
    constexpr int ST = HD + 8, FA_BM = 16 * NW, NT = 32 * NW, CPR = HD / 8;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    uint16_t *sQ = (uint16_t *)fa_smem, *sKV = sQ + FA_BM * ST; /* buffer b: K at sKV + 2b·BN·ST, V after it */
    __shared__ int r_seq[FA_BM], r_pb[FA_BM], r_pe[FA_BM];
    __shared__ int s3[3];
    const int tid = threadIdx.x, g = blockIdx.y, hd = a.head_dim;
    const int64_t r0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * FA_BM; /* late (long) rows first */
    const int64_t kv_row = (int64_t)hd * a.n_kv_head;

    fa_rows_q<HD, NW>(a, n_rows, r0, g, sQ, r_seq, r_pb, r_pe);
    fa_acc<HD> A;
    fa_acc_init(A);

    for (int prev = -1;;) { /* one pass per sequence among the block's rows, in increasing order */
        int cur, lo, hi;
        if (!fa_pass<NW>(prev, r_seq, r_pb, r_pe, s3, &cur, &lo, &hi)) break;
        prev = cur;
        const uint16_t *kc = kb16 + (int64_t)cur * a.n_ctx * kv_row + (int64_t)g * hd;
        const uint16_t *vc = vb16 + (int64_t)cur * a.n_ctx * kv_row + (int64_t)g * hd;
        /* the next key tile from kb on that some row of this pass sees (> hi: none) */
        auto next_tile = [&](int kb) {
            for (; kb <= hi; kb += BN) {
                const int hit = tid < FA_BM && r_seq[tid] == cur && r_pb[tid] <= kb + BN - 1 && r_pe[tid] >= kb;
                if (__syncthreads_or(hit)) break;
            }
            return kb;
        };
        auto stage = [&](int kb, int buf) {
            uint16_t *sK = sKV + 2 * buf * BN * ST, *sV = sK + BN * ST;
            const int64_t base = kb % a.n_ctx;
            static_assert(BN * CPR % NT == 0, "tile copies");
#pragma unroll
            for (int u = 0; u < BN * CPR / NT; u++) {
                const int i = tid + u * NT, j = i / CPR, d = (i % CPR) * 8;
                const bool ok = kb + j <= hi && d < hd;
                const int64_t off = ok ? ring_slot(base, j, a.n_ctx, BN) * kv_row + d : 0;
                cp_async16(sK + j * ST + d, kc + off, ok ? 16 : 0);
                cp_async16(sV + j * ST + d, vc + off, ok ? 16 : 0);
            }
            cp_async_commit();
        };
        int kb = next_tile(lo), buf = 0;
        if (kb <= hi) stage(kb, 0);
        while (kb <= hi) {
            const int nk = next_tile(kb + BN);
            if (nk <= hi) {
                stage(nk, buf ^ 1);
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            const uint16_t *sK = sKV + 2 * buf * BN * ST, *sV = sK + BN * ST;
            fa_tile<HD, BN>(A, a, sQ, sK, sV, kb, cur, r_seq, r_pb, r_pe);
            __syncthreads(); /* buffer buf is free for the copies of the tile after next */
            kb = nk;
            buf ^= 1;
        }
    }

    fa_store(A, a, n_rows, r0, g);
}

/* ------------------------------------------------------------ decode (few tokens), f32 */

#define DEC_T 32      /* positions per step */
#define DEC_GROUP 16  /* most query heads per KV head */
#define DEC_MAX_SPLIT 256 /* ≤ 256 (k_attn_dec_combine's weights) */
#define DEC_CLUSTER 8     /* splits a cluster (k_attn_dec_cl) */
#define DEC_PIECES 8      /* pieces (one cluster each) a token at most (LMC_CUDA_DEC_PIECES) */
#define DEC_PIECES_MAX 32

/* The split length for a token whose range holds len positions: the launch's chunk (sized for
 * n_ctx) while that makes at most `target` splits, else the multiple of DEC_T that makes about
 * target (a long range gets fewer, longer splits: less for the last block to merge); target 0:
 * always chunk. Never shorter than chunk, so the launch's splits always suffice, except with
 * half: a range of at most chunk positions in two splits of chunk / 2 (the launch has ≥ 2). */
static __device__ __forceinline__ int64_t dec_len_chunk(int64_t len, int chunk, int target, int half) {
    if (half && len <= chunk) return chunk / 2;
    const int64_t c = target > 0 ? (len + target - 1) / target : 0;
    return c <= chunk ? chunk : (c + DEC_T - 1) / DEC_T * DEC_T;
}

/* The merge of the ns splits of (token t, KV head g) that k_attn_dec wrote to part, by the block
 * that finished last: warp w merges query heads w, w + 4, … of the group; lane l owns dimensions
 * 4l..4l+3 (+ 128c). Weights exp(m_s − M) (empty splits: 0), splits added in split order
 * (deterministic); the partials are read past L1 (other blocks wrote them). */
template <int NC>
static __device__ void dec_merge(const lmc_cuda_attn &a, const float *part, int n_split, int ns, int64_t t, int g) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = a.n_head / a.n_kv_head, hd = a.head_dim;
    const int64_t st = hd + 2;
    for (int i = warp; i < group; i += 4) {
        const int h = g * group + i;
        const float *pp = part + (t * a.n_head + h) * n_split * st;
        float mx = -INFINITY;
        for (int s = lane; s < ns; s += 32) mx = fmaxf(mx, __ldcg(pp + s * st));
        mx = warp_max(mx);
        float L = 0.0f;
        for (int s = lane; s < ns; s += 32) {
            const float ms = __ldcg(pp + s * st);
            if (ms != -INFINITY) L += __ldcg(pp + s * st + 1) * expf(ms - mx);
        }
        L = warp_sum(L);
        float4 acc[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (int s = 0; s < ns; s++) {
            const float ms = __ldcg(pp + s * st);
            const float w = ms == -INFINITY ? 0.0f : expf(ms - mx);
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const int d = 4 * lane + 128 * c;
                if (d < hd) { /* hd % 4 == 0; rows of hd + 2 floats: 8-byte aligned */
                    const float2 u = __ldcg((const float2 *)(pp + s * st + 2 + d));
                    const float2 v = __ldcg((const float2 *)(pp + s * st + 4 + d));
                    acc[c].x += u.x * w;
                    acc[c].y += u.y * w;
                    acc[c].z += v.x * w;
                    acc[c].w += v.y * w;
                }
            }
        }
        const float inv = attn_final(L, mx, a.sinks, h, false);
        float *o = a.out + (t * a.n_head + h) * hd;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int d = 4 * lane + 128 * c;
            if (d < hd) *(float4 *)(o + d) = make_float4(acc[c].x * inv, acc[c].y * inv, acc[c].z * inv, acc[c].w * inv);
        }
    }
}

/* Query head h of token t from a softmax's max m, sum l and accumulators v (thread tid: dimensions
 * tid + 128c): to the output (pp NULL), or as the partial row pp (m, l, v: dec_merge's rows). */
template <int NC>
static __device__ __forceinline__ void dec_store(const lmc_cuda_attn &a, float *pp, int64_t t, int h, float m, float l,
                                                 const float (&v)[NC]) {
    const int tid = threadIdx.x, hd = a.head_dim;
    float *row;
    float scale = 1.0f;
    if (pp) {
        if (tid == 0) { pp[0] = m; pp[1] = l; }
        row = pp + 2;
    } else {
        row = a.out + (t * a.n_head + h) * hd;
        scale = attn_final(l, m, a.sinks, h, false);
    }
#pragma unroll
    for (int c = 0; c < NC; c++)
        if (tid + 128 * c < hd) row[tid + 128 * c] = v[c] * scale;
}

/* The last of the ns producers of partials for (token t, KV head g) — splits of k_attn_dec, pieces
 * of k_attn_dec_cl, n_split rows apart — to count (lmc_cuda_attn.done, left zero) merges them; each
 * producer's partials are fenced before this. */
template <int NC>
static __device__ __forceinline__ void dec_count_merge(const lmc_cuda_attn &a, const float *part, int n_split, int ns,
                                                       int64_t t, int g) {
    __shared__ int last;
    if (threadIdx.x == 0) {
        unsigned *cnt = a.done + t * a.n_kv_head + g;
        last = atomicAdd(cnt, 1u) == (unsigned)ns - 1;
        if (last) *cnt = 0; /* every producer has counted: zero for the next call */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    dec_merge<NC>(a, part, n_split, ns, t, g);
}

/* The merge of a cluster's n_split splits of (token t, KV head g) (k_attn_dec_cl): every split
 * leaves its running max, sum and accumulators (the latter in sq, free after the last step) in its
 * shared memory; split r then merges query heads r, r + n_split, … reading the others' through the
 * cluster (splits added in split order: deterministic) into the output, or (pp) into piece zi's
 * partial of z (max, sum, accumulators: dec_merge's rows). The second cluster barrier keeps each
 * block's shared memory alive until the others have read it. */
template <int NC>
static __device__ __forceinline__ void dec_merge_cluster(const lmc_cuda_attn &a, float *sq, const float *s_m,
                                                         const float *s_l, int n_split, int64_t t, int g, float *pp,
                                                         int zi, int z) {
    namespace cg = cooperative_groups;
    constexpr int HP = 128 * NC;
    const int tid = threadIdx.x, group = a.n_head / a.n_kv_head, hd = a.head_dim;
    cg::cluster_group cl = cg::this_cluster();
    const int r = (int)cl.block_rank();
    cl.sync();
    for (int i = r; i < group; i += n_split) {
        /* every split's max, sum and accumulators requested at once (one round trip through the
         * cluster, not one per split) */
        float mb[DEC_CLUSTER], lb[DEC_CLUSTER], ob[DEC_CLUSTER][NC];
#pragma unroll
        for (int b = 0; b < DEC_CLUSTER; b++) {
            const bool in = b < n_split;
            mb[b] = in ? *cl.map_shared_rank(s_m + i, b) : -INFINITY;
            lb[b] = in ? *cl.map_shared_rank(s_l + i, b) : 0.0f;
            const float *pb = in ? cl.map_shared_rank(sq + i * HP, b) : NULL;
#pragma unroll
            for (int c = 0; c < NC; c++) ob[b][c] = in && tid + 128 * c < hd ? pb[tid + 128 * c] : 0.0f;
        }
        float mx = -INFINITY;
#pragma unroll
        for (int b = 0; b < DEC_CLUSTER; b++) mx = fmaxf(mx, mb[b]);
        float L = 0.0f, o[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) o[c] = 0.0f;
#pragma unroll
        for (int b = 0; b < DEC_CLUSTER; b++) {
            if (b >= n_split) break;
            const float w = mb[b] == -INFINITY ? 0.0f : expf(mb[b] - mx);
            L += lb[b] * w;
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (tid + 128 * c < hd) o[c] += ob[b][c] * w;
        }
        const int h = g * group + i;
        dec_store<NC>(a, pp ? pp + ((t * a.n_head + h) * z + zi) * (int64_t)(hd + 2) : NULL, t, h, mx, L, o);
    }
    if (pp) __threadfence(); /* the partials before the piece's count (after the barrier) */
    cl.sync();
}

/* Block (kv head g, token t, split sp) of 128 threads; head_dim ≤ 128·NC. Positions of a step:
 * quad q of warp w scores position 8w + q against every query head of the group; warp w then
 * updates the softmax of heads w, w+4, …; thread i accumulates dimensions i + 128c.
 * (Loading the next step's K/V rows into a second register set while the current step is
 * computed measured 1.5% slower end to end on the H200, Llama-8B shape Q4_0: not kept.)
 * CL (k_attn_dec_cl): the range is cut into at most chunk (here: Z) pieces of n_split·DEC_T
 * positions, or of a multiple of that where Z of those would not hold the range; a piece is one
 * thread-block cluster of n_split splits (grid: split, KV head, token·Z + piece), which merge through
 * distributed shared memory (dec_merge_cluster). A range of one piece gets its output there; else
 * each piece leaves a partial and the last piece to finish (lmc_cuda_attn.done) merges them
 * (dec_merge). */
template <int NC, bool CL, int G>
static __device__ __forceinline__ void attn_dec(const lmc_cuda_attn &a, int n_split, int chunk, int target, float *part,
                                                int half, const lmc_cuda_l2set &pf) {
    constexpr int HP = 128 * NC;
    /* head_dim ≤ 128: a step's V rows copied into shared memory by cp.async (waited for after the
     * softmax, before P·V), so that P·V is a loop instead of 32 positions unrolled over registers
     * (k_attn_dec_cl<4> 105 → 90 KB of code; Llama-8B Q4_0 decode +1.4 %, docs/CUDA.md) */
    constexpr bool VS = NC == 1;
    __shared__ __align__(16) float sq[G * HP];
    __shared__ __align__(16) float sv[VS ? DEC_T * HP : 4];
    __shared__ float sp_[G][DEC_T + 1];
    __shared__ float s_m[G], s_l[G], s_c[G];
    const int g = CL ? blockIdx.y : blockIdx.x, sp = CL ? blockIdx.x : blockIdx.z, tid = threadIdx.x, warp = tid >> 5,
              lane = tid & 31, lq = lane & 3;
    const int64_t t = CL ? blockIdx.z / chunk : blockIdx.y;
    const int zi = CL ? (int)(blockIdx.z % chunk) : 0; /* CL: the piece */
    const int group = a.n_head / a.n_kv_head, hd = a.head_dim;
    TRACE_T(tr0);
    if (CL ? g >= a.n_kv_head : sp >= n_split) { /* a spare block (CL: a spare cluster): its share of the next ops' weights into L2 */
        const unsigned spare = CL ? blockIdx.y - a.n_kv_head : blockIdx.z - n_split;
        const unsigned outer = CL ? gridDim.y - a.n_kv_head : gridDim.z - n_split;
        const unsigned mid = CL ? gridDim.z : gridDim.y, in = CL ? blockIdx.z : blockIdx.y;
        const int64_t b = ((int64_t)spare * mid + in) * gridDim.x + blockIdx.x;
        l2_prefetch(pf, b * 128 + tid, (int64_t)outer * mid * gridDim.x * 128);
        if (tid == 0) TRACE_PUT(a.k, 2, tr0, tr0, tr0, tr0, tr0);
        return;
    }
    pdl_next();
    /* Positions and sequence ids are host copies made before the step (no kernel writes them:
     * backend.h), so they are read before the wait, from L2 (an L1 line could be an older
     * step's); a split or piece past the token's range leaves at once. */
    const int64_t sqn = __ldcg(a.seq + t);
    int64_t pb = 0, pe = -1;
    if (sqn >= 0 && sqn < a.n_seq) attn_range_at(a, __ldcg(a.pos + t), &pb, &pe);
    const int64_t len = pe >= pb ? pe - pb + 1 : 0;
    /* CL: at most chunk pieces of zck positions: n_split steps, or a multiple of that */
    int64_t zck = 0, ck;
    int ns;
    if constexpr (CL) {
        const int64_t unit = (int64_t)n_split * DEC_T, per = (len + chunk - 1) / chunk;
        zck = per <= unit ? unit : (per + unit - 1) / unit * unit;
        ck = zck / n_split;
        ns = (int)((len + zck - 1) / zck); /* pieces */
        if (zi > 0 && zi >= ns) return;   /* beyond this token's range: the whole cluster */
    } else {
        ck = dec_len_chunk(len, chunk, target, half);
        ns = (int)((len + ck - 1) / ck);
        if (sp > 0 && sp >= ns) return; /* beyond this token's range */
    }
    pdl_wait();
#ifdef LMC_CUDA_TRACE_ATT_STEP /* measurement: p1 / p2 the first step's scores / softmax done */
    TRACE_VAR(tr1);
    TRACE_VAR(tr2);
#else
    TRACE_T(tr1);
#endif
    const int64_t lo = pb + zi * zck + (int64_t)sp * ck, hi = lo + ck - 1 < pe ? lo + ck - 1 : pe;
    const int64_t kv_row = (int64_t)hd * a.n_kv_head;
    const float *kb = a.k + (len ? sqn : 0) * a.n_ctx * kv_row + (int64_t)g * hd;
    const float *vb = a.v + (len ? sqn : 0) * a.n_ctx * kv_row + (int64_t)g * hd;
    const int jw = warp * 8 + (lane >> 2);

    /* the K row this quad scores and the V values this thread accumulates, of the step at k0 */
    auto load = [&](int64_t k0, float4 (&kr)[HP / 16], float (&vr)[DEC_T][NC]) {
        const int64_t base = k0 % a.n_ctx;
        const bool okw = k0 + jw <= hi;
        const float *kp = kb + ring_near(base, jw, a.n_ctx) * kv_row;
#pragma unroll
        for (int c = 0; c < HP / 16; c++) {
            const int d = (c * 4 + lq) * 4;
            kr[c] = okw && d < hd ? *(const float4 *)(kp + d) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        if constexpr (VS) { /* float4 f of the tile: position f / 32, dimensions 4·(f % 32) .. */
#pragma unroll
            for (int k = 0; k < DEC_T * HP / 4 / 128; k++) {
                const int f = tid + 128 * k, j = f / (HP / 4), d = (f % (HP / 4)) * 4;
                const bool ok = k0 + j <= hi && d < hd;
                cp_async16(sv + j * HP + d, ok ? vb + ring_near(base, j, a.n_ctx) * kv_row + d : vb, ok ? 16 : 0);
            }
            cp_async_commit();
            (void)vr;
        } else {
#pragma unroll
            for (int j = 0; j < DEC_T; j++) {
                const bool ok = k0 + j <= hi;
                const float *vp = vb + ring_near(base, j, a.n_ctx) * kv_row;
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const int d = tid + 128 * c;
                    vr[j][c] = ok && d < hd ? vp[d] : 0.0f;
                }
            }
        }
    };
    float4 kr0[HP / 16];
    float vr0[DEC_T][NC];
    if (lo <= hi) load(lo, kr0, vr0); /* the first step's rows in flight while q is staged */

    for (int i = tid; i < group * HP / 4; i += 128) {
        const int hh = i / (HP / 4), d = (i % (HP / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (d < hd) v = *(const float4 *)(a.q + (t * a.n_head + g * group + hh) * hd + d);
        *(float4 *)(sq + hh * HP + d) = v;
    }
    if (tid < G) { s_m[tid] = -INFINITY; s_l[tid] = 0.0f; }
    __syncthreads();
#ifndef LMC_CUDA_TRACE_ATT_STEP
    TRACE_T(tr2);
#endif

    float acc[G][NC];
#pragma unroll
    for (int i = 0; i < G; i++)
#pragma unroll
        for (int c = 0; c < NC; c++) acc[i][c] = 0.0f;

    /* one step of 32 positions from registers (block-uniform: every thread calls it) */
    auto step = [&](int64_t k0, const float4 (&kr)[HP / 16], const float (&vr)[DEC_T][NC]) {
        const bool okw = k0 + jw <= hi;
#pragma unroll
        for (int i = 0; i < G; i++) {
            if (i >= group) break;
            float d = 0.0f;
#pragma unroll
            for (int c = 0; c < HP / 16; c++) {
                const float4 qv = *(const float4 *)(sq + i * HP + (c * 4 + lq) * 4);
                d += qv.x * kr[c].x + qv.y * kr[c].y + qv.z * kr[c].z + qv.w * kr[c].w;
            }
            d += __shfl_xor_sync(0xffffffffu, d, 1);
            d += __shfl_xor_sync(0xffffffffu, d, 2);
            if (lq == 0) {
                float x = d * a.scale;
                if (a.softcap > 0) x = a.softcap * tanhf(x / a.softcap);
                sp_[i][jw] = okw ? x : -INFINITY;
            }
        }
        __syncthreads();
#ifdef LMC_CUDA_TRACE_ATT_STEP
        TRACE_ONCE(tr1);
#endif
        for (int i = warp; i < group; i += 4) {
            const float x = sp_[i][lane], mo = s_m[i];
            const float mn = fmaxf(mo, warp_max(x));
            const float mu = mn == -INFINITY ? 0.0f : mn;
            const float p = expf(x - mu);
            const float sum = warp_sum(p);
            sp_[i][lane] = p;
            if (lane == 0) {
                const float c = expf(mo - mu);
                s_c[i] = c;
                s_l[i] = s_l[i] * c + sum;
                s_m[i] = mn;
            }
        }
        if constexpr (VS) cp_async_wait<0>(); /* this thread's V copies; the barrier shows all of them */
        __syncthreads();
#ifdef LMC_CUDA_TRACE_ATT_STEP
        TRACE_ONCE(tr2);
#endif
#pragma unroll
        for (int i = 0; i < G; i++) {
            if (i >= group) break;
            const float c = s_c[i];
            if constexpr (VS) {
                float v = acc[i][0] * c;
#pragma unroll 4
                for (int j = 0; j < DEC_T; j++) v += sp_[i][j] * sv[j * HP + tid];
                acc[i][0] = v;
            } else {
#pragma unroll
                for (int cc = 0; cc < NC; cc++) {
                    float v = acc[i][cc] * c;
#pragma unroll
                    for (int j = 0; j < DEC_T; j++) v += sp_[i][j] * vr[j][cc];
                    acc[i][cc] = v;
                }
            }
        }
        __syncthreads();
    };

    for (int64_t k0 = lo; k0 <= hi; k0 += DEC_T) {
        if (k0 > lo) load(k0, kr0, vr0);
        step(k0, kr0, vr0);
    }

    if constexpr (CL) {
#pragma unroll
        for (int i = 0; i < G; i++) {
            if (i >= group) break;
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (tid + 128 * c < hd) sq[i * HP + tid + 128 * c] = acc[i][c];
        }
        TRACE_T(tr3);
        dec_merge_cluster<NC>(a, sq, s_m, s_l, n_split, t, g, ns > 1 ? part : NULL, zi, chunk);
        TRACE_T(tr4);
        if (ns > 1 && sp == 0) dec_count_merge<NC>(a, part, chunk, ns, t, g); /* a piece counts by its first split */
        if (tid == 0) TRACE_PUT(a.k, 1, tr0, tr1, tr2, tr3, tr4);
    } else {
#pragma unroll
        for (int i = 0; i < G; i++) {
            if (i >= group) break;
            const int h = g * group + i;
            /* ns ≤ 1: the whole range was this split's, final output; else its partial */
            dec_store<NC>(a, ns <= 1 ? NULL : part + ((t * a.n_head + h) * n_split + sp) * (int64_t)(hd + 2), t, h,
                          s_m[i], s_l[i], acc[i]);
        }
        if (ns <= 1 || !a.done) return;
        __threadfence(); /* this block's partials before its count */
        __syncthreads();
        dec_count_merge<NC>(a, part, n_split, ns, t, g); /* no k_attn_dec_combine launch */
    }
}

template <int NC, int G>
__global__ void __launch_bounds__(128) k_attn_dec(lmc_cuda_attn a, int n_split, int chunk, int target, float *part,
                                                  int half, lmc_cuda_l2set pf) {
    attn_dec<NC, false, G>(a, n_split, chunk, target, part, half, pf);
}

/* The cluster form (head_dim ≤ 128): clusters of n_split blocks, z pieces a token at most, part
 * their partials; min. one block a multiprocessor in the bound (without it ptxas kept 128 registers
 * a thread and the merge spilled) */
template <int G>
__global__ void __launch_bounds__(128, 1) k_attn_dec_cl(lmc_cuda_attn a, int n_split, int z, float *part,
                                                       lmc_cuda_l2set pf) {
    attn_dec<1, true, G>(a, n_split, z, 0, part, 0, pf);
}

/* ------------------------------------------------------------ generic (any head_dim ≤ 512), f32 */

/* Block (kv head g, token t, split): warp j is query head g·group + j, so the group's
 * warps read each K/V row together (one L2 read, L1 hits for the others). */
template <int ATT_MAXD> /* ≥ head_dim / 32: values per lane */
__global__ void __launch_bounds__(512) k_attn(lmc_cuda_attn a, int n_split, int64_t chunk, float *part) {
    const int g = blockIdx.x, lane = threadIdx.x & 31, j = threadIdx.x >> 5;
    const int group = a.n_head / a.n_kv_head, h = g * group + j;
    const int64_t t = blockIdx.y;
    const int sp = blockIdx.z;
    const int hd = a.head_dim;
    const int64_t sq = a.seq[t];
    int64_t p_begin, p_end;
    attn_range(a, t, &p_begin, &p_end);
    const int64_t lo = p_begin + (int64_t)sp * chunk;
    const int64_t hi = lo + chunk - 1 < p_end ? lo + chunk - 1 : p_end;
    const int64_t kv_row = (int64_t)hd * a.n_kv_head;
    const int valid = sq >= 0 && sq < a.n_seq;
    const float *kb = a.k + (valid ? sq : 0) * a.n_ctx * kv_row + (int64_t)g * hd;
    const float *vb = a.v + (valid ? sq : 0) * a.n_ctx * kv_row + (int64_t)g * hd;
    const float *qp = a.q + (t * a.n_head + h) * hd;

    float q[ATT_MAXD], acc[ATT_MAXD];
#pragma unroll
    for (int jj = 0; jj < ATT_MAXD; jj++) {
        const int i = lane + 32 * jj;
        q[jj] = i < hd ? qp[i] : 0.0f;
        acc[jj] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int64_t p = lo;
    /* two positions per step: both K and both V rows loaded before any use */
    for (; valid && p + 1 <= hi; p += 2) {
        const float *k0 = kb + (p % a.n_ctx) * kv_row, *k1 = kb + ((p + 1) % a.n_ctx) * kv_row;
        const float *v0 = vb + (p % a.n_ctx) * kv_row, *v1 = vb + ((p + 1) % a.n_ctx) * kv_row;
        float ka[ATT_MAXD], kc[ATT_MAXD], va[ATT_MAXD], vc[ATT_MAXD];
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            const int i = lane + 32 * jj;
            ka[jj] = i < hd ? k0[i] : 0.0f;
            kc[jj] = i < hd ? k1[i] : 0.0f;
            va[jj] = i < hd ? v0[i] : 0.0f;
            vc[jj] = i < hd ? v1[i] : 0.0f;
        }
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            s0 += q[jj] * ka[jj];
            s1 += q[jj] * kc[jj];
        }
        s0 = warp_sum(s0) * a.scale;
        s1 = warp_sum(s1) * a.scale;
        if (a.softcap > 0) {
            s0 = a.softcap * tanhf(s0 / a.softcap);
            s1 = a.softcap * tanhf(s1 / a.softcap);
        }
        const float mn = fmaxf(m, fmaxf(s0, s1));
        const float corr = expf(m - mn), e0 = expf(s0 - mn), e1 = expf(s1 - mn);
        l = l * corr + e0 + e1;
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) acc[jj] = acc[jj] * corr + e0 * va[jj] + e1 * vc[jj];
        m = mn;
    }
    if (valid && p <= hi) {
        const float *k0 = kb + (p % a.n_ctx) * kv_row, *v0 = vb + (p % a.n_ctx) * kv_row;
        float s0 = 0.0f;
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            const int i = lane + 32 * jj;
            if (i < hd) s0 += q[jj] * k0[i];
        }
        s0 = warp_sum(s0) * a.scale;
        if (a.softcap > 0) s0 = a.softcap * tanhf(s0 / a.softcap);
        const float mn = fmaxf(m, s0);
        const float corr = expf(m - mn), e0 = expf(s0 - mn);
        l = l * corr + e0;
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            const int i = lane + 32 * jj;
            if (i < hd) acc[jj] = acc[jj] * corr + e0 * v0[i];
        }
        m = mn;
    }
    if (n_split == 1) {
        float *o = a.out + (t * a.n_head + h) * hd;
        const float inv = attn_final(l, m, a.sinks, h, false);
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            const int i = lane + 32 * jj;
            if (i < hd) o[i] = acc[jj] * inv;
        }
        return;
    }
    float *pp = part + ((t * a.n_head + h) * n_split + sp) * (int64_t)(hd + 2);
    if (lane == 0) { pp[0] = m; pp[1] = l; }
#pragma unroll
    for (int jj = 0; jj < ATT_MAXD; jj++) {
        const int i = lane + 32 * jj;
        if (i < hd) pp[2 + i] = acc[jj];
    }
}

/* Merge the splits of one (token, head): the splits' weights exp(m_s - M) are computed once
 * into shared memory (empty splits, m_s = -inf, get 0 and are skipped), then each thread sums
 * its elements over the non-empty splits in split order (deterministic). chunk > 0 (k_attn_dec):
 * only the token's first ceil(range / chunk) splits were written, and a token with one of them
 * has its output already; chunk = 0 (k_attn): every split was written. */
__global__ void k_attn_combine(lmc_cuda_attn a, int n_split, int chunk, const float *part) {
    __shared__ float f[1024], red[32];
    const int h = blockIdx.x;
    const int64_t t = blockIdx.y;
    const int hd = a.head_dim, lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int ns = n_split;
    if (chunk > 0) {
        const int64_t sqn = a.seq[t];
        int64_t pb = 0, pe = -1;
        if (sqn >= 0 && sqn < a.n_seq) attn_range(a, t, &pb, &pe);
        const int64_t len = pe >= pb ? pe - pb + 1 : 0;
        ns = (int)((len + chunk - 1) / chunk);
        if (ns <= 1) return;
    }
    const float *pp = part + (t * a.n_head + h) * n_split * (int64_t)(hd + 2);
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < ns; s += blockDim.x) mx = fmaxf(mx, pp[s * (hd + 2)]);
    mx = warp_max(mx);
    if (lane == 0) red[wid] = mx;
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < nw; w++) M = fmaxf(M, red[w]);
    __syncthreads();
    float lsum = 0.0f;
    for (int s = threadIdx.x; s < ns; s += blockDim.x) {
        const float ms = pp[s * (hd + 2)];
        const float w = ms == -INFINITY ? 0.0f : expf(ms - M);
        if (w != 0.0f) lsum += pp[s * (hd + 2) + 1] * w;
        f[s] = w;
    }
    lsum = warp_sum(lsum);
    if (lane == 0) red[wid] = lsum;
    __syncthreads();
    float L = 0.0f;
    for (int w = 0; w < nw; w++) L += red[w];
    const float inv = attn_final(L, M, a.sinks, h, false);
    float *o = a.out + (t * a.n_head + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float v = 0.0f;
        for (int k = 0; k < ns; k++)
            if (f[k] != 0.0f) v += pp[k * (int64_t)(hd + 2) + 2 + i] * f[k];
        o[i] = v * inv;
    }
}

/* Merge the splits of one (token, head) of k_attn_dec: only the token's first
 * ns = ceil(range / chunk) splits were written, and a token with one has its output already.
 * Weights exp(m_s - M) go to shared memory; warp w sums splits w, w+4, … of two dimensions
 * per lane (float2), the four warps' sums are added in warp order (deterministic). */
__global__ void __launch_bounds__(128) k_attn_dec_combine(lmc_cuda_attn a, int n_split, int chunk, int target,
                                                          const float *part, int half) {
    __shared__ float f[256], red[4], acc_s[4][256];
    const int h = blockIdx.x, tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    const int64_t t = blockIdx.y;
    const int hd = a.head_dim;
    pdl_next();
    pdl_wait();
    const int64_t sqn = a.seq[t];
    int64_t pb = 0, pe = -1;
    if (sqn >= 0 && sqn < a.n_seq) attn_range(a, t, &pb, &pe);
    const int64_t len = pe >= pb ? pe - pb + 1 : 0, ck = dec_len_chunk(len, chunk, target, half);
    const int ns = (int)((len + ck - 1) / ck);
    if (ns <= 1) return;
    const int64_t st = hd + 2;
    const float *pp = part + (t * a.n_head + h) * n_split * st;
    float mx = -INFINITY;
    for (int s = tid; s < ns; s += 128) mx = fmaxf(mx, pp[s * st]);
    mx = warp_max(mx);
    if (lane == 0) red[wid] = mx;
    __syncthreads();
    const float M = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    __syncthreads();
    float lsum = 0.0f;
    for (int s = tid; s < ns; s += 128) {
        const float ms = pp[s * st];
        const float w = ms == -INFINITY ? 0.0f : expf(ms - M);
        if (w != 0.0f) lsum += pp[s * st + 1] * w;
        f[s] = w;
    }
    lsum = warp_sum(lsum);
    if (lane == 0) red[wid] = lsum;
    __syncthreads();
    const float L = red[0] + red[1] + red[2] + red[3];
    float2 acc[4];
#pragma unroll
    for (int c = 0; c < 4; c++) acc[c] = make_float2(0.0f, 0.0f);
#pragma unroll 2
    for (int s = wid; s < ns; s += 4) {
        const float w = f[s];
        if (w == 0.0f) continue;
        const float *ps = pp + s * st + 2;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int d = lane * 2 + 64 * c;
            if (d < hd) {
                const float2 v = *(const float2 *)(ps + d);
                acc[c].x += v.x * w;
                acc[c].y += v.y * w;
            }
        }
    }
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int d = lane * 2 + 64 * c;
        if (d < hd) { acc_s[wid][d] = acc[c].x; acc_s[wid][d + 1] = acc[c].y; }
    }
    __syncthreads();
    const float inv = attn_final(L, M, a.sinks, h, false);
    float *o = a.out + (t * a.n_head + h) * hd;
    for (int d = tid; d < hd; d += 128) o[d] = (acc_s[0][d] + acc_s[1][d] + acc_s[2][d] + acc_s[3][d]) * inv;
}

/* ------------------------------------------------------------ host side */

enum { ATT_FLASH, ATT_FLASH2, ATT_DEC, ATT_GENERIC };

/* Bytes of the bf16 K/V copy k_fattn2 reads (both caches' slots, every sequence). */
static size_t kv_bf16_bytes(const lmc_cuda_attn *a) {
    return (size_t)a->n_seq * (size_t)a->n_ctx * (size_t)a->head_dim * (size_t)a->n_kv_head * 2 * sizeof(uint16_t);
}

/* LMC_CUDA_FATTN=1: prefill through k_fattn (f32 K/V loads) only, for A/B comparisons */
static int fattn_old(void) {
    static int v = -1;
    if (v < 0) v = getenv("LMC_CUDA_FATTN") && !strcmp(getenv("LMC_CUDA_FATTN"), "1");
    return v;
}

static int attn_path(const lmc_cuda_attn *a) {
    const int group = a->n_head / a->n_kv_head;
    if (a->head_dim % 4 || a->head_dim > 256 || group > DEC_GROUP) return ATT_GENERIC;
    if (a->n < LMC_CUDA_FATTN_MIN_TOKENS) return ATT_DEC;
    /* the bf16 copy of the slots: 16-byte rows of head_dim, at most 1 GiB of workspace */
    if (a->head_dim % 8 == 0 && kv_bf16_bytes(a) <= ((size_t)1 << 30) && !fattn_old()) return ATT_FLASH2;
    return ATT_FLASH;
}

/* Splits of the generic kernel: 16 positions each (a short serial chain per warp), fewer when
 * the partials (n · heads · splits · (head_dim + 2) floats) would pass 256 MB, at most 1024. */
static int attn_splits(const lmc_cuda_attn *a, int64_t *chunk) {
    int64_t s = (a->n_ctx + 15) / 16;
    const int64_t per = a->n * a->n_head * (int64_t)(a->head_dim + 2) * 4;
    const int64_t cap = per > 0 ? ((int64_t)256 << 20) / per : 1;
    if (s > cap) s = cap;
    if (s > 1024) s = 1024;
    if (s < 1) s = 1;
    *chunk = (a->n_ctx + s - 1) / s;
    return (int)s;
}

/* LMC_CUDA_DEC_CHUNK=32|128: the first split length tried instead of 64 (A/B measurement: 32 was
 * 1-2% faster end to end over contexts of ≤ 200 positions and 1.6× slower at 8192 positions, where
 * the last block merges 256 splits; docs/BENCHMARKS.md). */
static int dec_chunk(void) {
    static int v = 0;
    if (!v) {
        const char *e = getenv("LMC_CUDA_DEC_CHUNK");
        const int c = e ? atoi(e) : 64;
        v = c == 32 || c == 128 ? c : 64;
    }
    return v;
}

/* A count of splits from the environment variable name, dflt when unset or outside [0, DEC_MAX_SPLIT]. */
static int env_splits(const char *name, int dflt) {
    const char *e = getenv(name);
    const int v = e ? atoi(e) : dflt;
    return v < 0 || v > DEC_MAX_SPLIT ? dflt : v;
}

/* LMC_CUDA_DEC_SPLITS=n: the most splits a token's range is cut into before its splits grow past
 * the launch's length (dec_len_chunk; default 32, 0: never — every range in splits of the launch's
 * length, as before). Measured (H200, 32/8 heads, head_dim 128, 8192 positions, bench_cuda
 * --kernels): 0 → 63.1 µs, 64 → 47.7, 32 → 41.4, 16 → 60.1; 64 and 1024 positions unchanged. */
static int dec_target(void) {
    static int v = -1;
    if (v < 0) v = env_splits("LMC_CUDA_DEC_SPLITS", 32);
    return v;
}

/* LMC_CUDA_DEC_HALF=0: ranges of at most one split length are not cut in two (A/B). Splits of 32
 * everywhere (LMC_CUDA_DEC_CHUNK=32) were 1-3% faster end to end at contexts of 16-80 positions but
 * 11% slower than 64 at 1024 positions (bench_cuda --kernels), so only short ranges are halved.
 * Measured on the H200 (docs/BENCHMARKS.md): q8_0 decode +1.7%, q4_0 and bf16 unchanged (two
 * runs each); the kernel alone at 64 positions 7.4 → 7.9 µs (its merge), 1024 / 8192 unchanged. */
static int dec_half(void) {
    static int v = -1;
    if (v < 0) v = !(getenv("LMC_CUDA_DEC_HALF") && !strcmp(getenv("LMC_CUDA_DEC_HALF"), "0"));
    return v;
}

/* LMC_CUDA_DEC_BATCH_SPLITS=n: the most splits a (token, KV head) of a batch of DEC_BATCH tokens or
 * more is launched with (default 16; 0: no bound, splits for the whole cache as for one token). A
 * batch keeps the device busy with its tokens, and the launch's splits are sized for the cache, not
 * the ranges: 32 tokens over a 2128-slot cache launched 34 splits a (token, KV head), 8704 blocks of
 * which ~512 had positions, and every range longer than 32 positions was merged. */
#define DEC_BATCH 8
static int dec_batch_splits(void) {
    static int v = -1;
    if (v < 0) v = env_splits("LMC_CUDA_DEC_BATCH_SPLITS", 16);
    return v;
}

/* Splits of the decode kernel: 64 positions (a multiple of DEC_T) each, at most 256 splits
 * (longer splits past 16k positions), partials within 256 MB; *half (dec_len_chunk): a range of
 * at most one split length is cut in two halves (when they are whole steps), so at least 2 splits.
 * Batches of DEC_BATCH tokens or more: at most dec_batch_splits() splits (longer ones), no halves. */
static int dec_splits(const lmc_cuda_attn *a, int *chunk, int *half) {
    const int64_t per = a->n * a->n_head * (int64_t)(a->head_dim + 2) * 4;
    int64_t c = dec_chunk();
    const int bs = a->n >= DEC_BATCH ? dec_batch_splits() : 0;
    if (bs > 0 && (a->n_ctx + c - 1) / c > bs) c = ((a->n_ctx + bs - 1) / bs + c - 1) / c * c;
    for (;;) {
        int64_t s = (a->n_ctx + c - 1) / c;
        if (s <= 1 || (s <= DEC_MAX_SPLIT && s * per <= ((int64_t)256 << 20))) {
            *chunk = (int)c;
            *half = !bs && dec_half() && c % (2 * DEC_T) == 0 && 2 * per <= ((int64_t)256 << 20);
            if (*half && s < 2) s = 2;
            return s < 1 ? 1 : (int)s;
        }
        c *= 2;
    }
}

LMC_TRACE_TU(lmc_cuda_trace_attn)

extern "C" size_t lmc_cuda_attn_scratch(const lmc_cuda_attn *a) {
    int s = 1;
    switch (attn_path(a)) {
    case ATT_FLASH: return 0;
    case ATT_FLASH2: return kv_bf16_bytes(a) / sizeof(float);
    case ATT_DEC: {
        int chunk, half;
        s = dec_splits(a, &chunk, &half);
        break;
    }
    default: {
        int64_t chunk;
        s = attn_splits(a, &chunk);
    }
    }
    return s == 1 ? 0 : (size_t)a->n * a->n_head * s * (size_t)(a->head_dim + 2);
}

template <int HD, int BN, int NW>
static void launch_fattn(cudaStream_t st, const lmc_cuda_attn *a) {
    const size_t smem = fa_smem_bytes<HD, BN, NW>();
    cudaFuncSetAttribute(k_fattn<HD, BN, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const int64_t rows = a->n * (a->n_head / a->n_kv_head), bm = 16 * NW;
    dim3 grid((unsigned)((rows + bm - 1) / bm), (unsigned)a->n_kv_head);
    k_fattn<HD, BN, NW><<<grid, 32 * NW, smem, st>>>(*a, rows);
}

template <int HD, int BN, int NW>
static void launch_fattn2(cudaStream_t st, const lmc_cuda_attn *a, float *scratch) {
    uint16_t *kb = (uint16_t *)scratch, *vb = kb + kv_bf16_bytes(a) / 4;
    const dim3 cg((unsigned)((a->n_ctx + KVC_SLOTS - 1) / KVC_SLOTS), (unsigned)a->n_seq);
    k_kv_bf16<<<cg, 256, 0, st>>>(*a, kb, vb);
    const size_t smem = fa2_smem_bytes<HD, BN, NW>();
    cudaFuncSetAttribute(k_fattn2<HD, BN, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const int64_t rows = a->n * (a->n_head / a->n_kv_head), bm = 16 * NW;
    dim3 grid((unsigned)((rows + bm - 1) / bm), (unsigned)a->n_kv_head);
    k_fattn2<HD, BN, NW><<<grid, 32 * NW, smem, st>>>(*a, rows, kb, vb);
}

/* The cluster form on devices that launch clusters: 0 never, 1 always, 2 while its blocks fit one
 * wave (dec_cluster_room). LMC_CUDA_DEC_CLUSTER=0: the split form always, =1: the cluster form
 * wherever it can run (A/B and tests; read at every launch — a recorded step reads it once — so
 * that a test can switch it). */
static int dec_cluster_mode(void) {
    const char *e = getenv("LMC_CUDA_DEC_CLUSTER");
    if (e && !strcmp(e, "0")) return 0;
    static int cache[16]; /* per device: 1 + whether it launches clusters (sm_90 on) */
    int dev, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (dev >= 0 && dev < 16 && cache[dev]) v = cache[dev] - 1;
    else {
        if (cudaDeviceGetAttribute(&v, cudaDevAttrClusterLaunch, dev) != cudaSuccess) v = 0;
        if (dev >= 0 && dev < 16) cache[dev] = 1 + (v != 0);
    }
    return !v ? 0 : e && !strcmp(e, "1") ? 1 : 2;
}

/* LMC_CUDA_DEC_PIECES=n (1..DEC_PIECES_MAX): the cluster form's pieces a token at most (A/B; read at
 * every launch). Measured on the H200 (kernel alone, 8192 positions): 8 pieces 46 µs, 16 56, 32 71
 * (the split form 43.5). */
static int dec_pieces(void) {
    const char *e = getenv("LMC_CUDA_DEC_PIECES");
    const int v = e ? atoi(e) : DEC_PIECES;
    return v >= 1 && v <= DEC_PIECES_MAX ? v : DEC_PIECES;
}

/* Blocks of k_attn_dec_cl the device holds at once (per device, cached). */
static int64_t dec_cluster_room(void) {
    static int64_t cache[16];
    int dev, sms, per = 0;
    size_t smb;
    if (!qv_device(&dev, &sms, &smb)) return 0;
    if (dev >= 0 && dev < 16 && cache[dev]) return cache[dev];
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_attn_dec_cl<DEC_GROUP>, 128, 0) != cudaSuccess) per = 1;
    const int64_t v = (int64_t)(per > 0 ? per : 1) * sms;
    if (dev >= 0 && dev < 16) cache[dev] = v;
    return v;
}

/* 0 when launched, -1 when not (the launch refused: no error left; or, in mode 2, more working
 * blocks than one wave: a batch of tokens is then faster in the split form — H200, Llama-8B shape,
 * 8 / 16 / 32 sequences 2% / 10% / 18% more tokens a second split, 1 / 2 / 4 sequences 8% / 4% / 6%
 * more clustered). Grid (split, KV head + spare
 * rows, token · pieces), clusters of the splits of one piece of one
 * (KV head, token): DEC_CLUSTER splits (fewer for a cache of fewer DEC_T steps), as many pieces
 * of one step a split as the cache needs, at most dec_pieces() (the kernel makes a longer range's
 * pieces longer) and at most the split form's splits (its scratch; else the split form). Spare
 * clusters prefetch pf into L2 while the
 * splits leave half the multiprocessors idle (as the split form does). Measured on the H200 (kernel
 * alone, 32/8 heads, head_dim 128, one token): clusters of 16 slower at 64 positions (8.5 µs against
 * 6.9 with 8; the split form 8.0). */
static int launch_dec_cluster(cudaStream_t st, const lmc_cuda_attn *a, float *scratch, const lmc_cuda_l2set *pf,
                              int mode) {
    int64_t cs = (a->n_ctx + DEC_T - 1) / DEC_T;
    if (cs > DEC_CLUSTER) cs = DEC_CLUSTER;
    if (cs < 1) cs = 1;
    if (mode == 2 && a->n * a->n_kv_head * cs > dec_cluster_room()) return -1;
    int chunk, half;
    const int zmax = dec_pieces();
    int64_t z = (a->n_ctx + cs * DEC_T - 1) / (cs * DEC_T);
    if (z > zmax) z = zmax;
    if (z > dec_splits(a, &chunk, &half)) return -1; /* more partials than the scratch holds */
    int dev, sms;
    size_t smb;
    int64_t units = 0, rows = 0;
    if (pf && qv_device(&dev, &sms, &smb) && (int64_t)a->n_kv_head * a->n * cs <= sms / 2)
        for (int i = 0; i < pf->n; i++) units += l2_units(pf->r[i]);
    const int64_t per_row = cs * a->n * z * 128;
    if (units > 0) rows = (units + per_row - 1) / per_row;
    if (rows > 1024) rows = 1024;
    lmc_cuda_l2set none;
    memset(&none, 0, sizeof none);
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)cs;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((unsigned)cs, (unsigned)(a->n_kv_head + rows), (unsigned)(a->n * z));
    cfg.blockDim = dim3(128);
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = lmc_cuda_pdl() ? 2 : 1;
    const lmc_cuda_l2set &p = rows ? *pf : none;
    const int group = a->n_head / a->n_kv_head;
    cudaError_t e = group <= 4   ? cudaLaunchKernelEx(&cfg, k_attn_dec_cl<4>, *a, (int)cs, (int)z, scratch, p)
                    : group <= 8 ? cudaLaunchKernelEx(&cfg, k_attn_dec_cl<8>, *a, (int)cs, (int)z, scratch, p)
                                 : cudaLaunchKernelEx(&cfg, k_attn_dec_cl<DEC_GROUP>, *a, (int)cs, (int)z, scratch, p);
    if (e == cudaSuccess) return 0;
    cudaGetLastError(); /* a cluster the device refuses: the caller takes the split form */
    return -1;
}

extern "C" void lmc_cuda_attention(cudaStream_t st, const lmc_cuda_attn *a, float *scratch, const lmc_cuda_l2set *pf) {
    if (a->n <= 0) return;
    const int path = attn_path(a);
    if (path == ATT_FLASH2) {
        /* 64-key tiles at head_dim 128 measured slower (8 warps: spills at 128 registers; 4 warps:
         * 200 registers): 2048-token Llama-8B prefill 34387 / 34347 tok/s against 35843 */
        if (a->head_dim <= 64) launch_fattn2<64, 64, 8>(st, a, scratch);
        else if (a->head_dim <= 128) launch_fattn2<128, 32, 8>(st, a, scratch);
        else launch_fattn2<256, 32, 4>(st, a, scratch);
        return;
    }
    if (path == ATT_FLASH) {
        if (a->head_dim <= 64) launch_fattn<64, 64, 8>(st, a);
        else if (a->head_dim <= 128) launch_fattn<128, 32, 8>(st, a);
        else launch_fattn<256, 32, 4>(st, a);
        return;
    }
    if (path == ATT_DEC && a->head_dim <= 128 && a->done && a->n * a->n_kv_head <= LMC_CUDA_ATTN_DONE) {
        const int mode = dec_cluster_mode();
        if (mode && launch_dec_cluster(st, a, scratch, pf, mode) == 0) return;
    }
    if (path == ATT_DEC) {
        int chunk, half;
        const int s = dec_splits(a, &chunk, &half);
        /* spare blocks after the splits, 128 threads a block, one L2 piece a thread; only while the
         * blocks of a short range (two splits a KV head and token) leave half the multiprocessors
         * idle (measured at 1 and 2 tokens; batches keep HBM busy with their own K/V) */
        int64_t units = 0;
        lmc_cuda_l2set none;
        memset(&none, 0, sizeof none);
        int dev, sms;
        size_t smb;
        if (pf && (!qv_device(&dev, &sms, &smb) || (int64_t)a->n_kv_head * a->n * 2 > sms / 2)) pf = NULL;
        for (int i = 0; pf && i < pf->n; i++) units += l2_units(pf->r[i]);
        const int64_t per_z = (int64_t)a->n_kv_head * a->n * 128;
        const int64_t pz = (units + per_z - 1) / per_z;
        dim3 grid((unsigned)a->n_kv_head, (unsigned)a->n, (unsigned)(s + (pz < 1024 ? pz : 1024)));
        lmc_cuda_attn b = *a;
        if (b.n * b.n_kv_head > LMC_CUDA_ATTN_DONE) b.done = NULL;
        const int tg = dec_target();
        const lmc_cuda_l2set &p = pz ? *pf : none;
        const int group = b.n_head / b.n_kv_head;
        if (b.head_dim <= 128 && group <= 4) lmc_launch(k_attn_dec<1, 4>, grid, dim3(128), 0, st, b, s, chunk, tg, scratch, half, p);
        else if (b.head_dim <= 128 && group <= 8) lmc_launch(k_attn_dec<1, 8>, grid, dim3(128), 0, st, b, s, chunk, tg, scratch, half, p);
        else if (b.head_dim <= 128) lmc_launch(k_attn_dec<1, DEC_GROUP>, grid, dim3(128), 0, st, b, s, chunk, tg, scratch, half, p);
        else if (group <= 4) lmc_launch(k_attn_dec<2, 4>, grid, dim3(128), 0, st, b, s, chunk, tg, scratch, half, p);
        else lmc_launch(k_attn_dec<2, DEC_GROUP>, grid, dim3(128), 0, st, b, s, chunk, tg, scratch, half, p);
        if (s > 1 && !b.done)
            lmc_launch(k_attn_dec_combine, dim3((unsigned)a->n_head, (unsigned)a->n), dim3(128), 0, st, b, s, chunk, tg,
                       (const float *)scratch, half);
        return;
    }
    int64_t chunk;
    const int s = attn_splits(a, &chunk);
    dim3 grid((unsigned)a->n_kv_head, (unsigned)a->n, (unsigned)s);
    const int th = 32 * (a->n_head / a->n_kv_head);
    if (a->head_dim <= 128) k_attn<4><<<grid, th, 0, st>>>(*a, s, chunk, scratch);
    else if (a->head_dim <= 256) k_attn<8><<<grid, th, 0, st>>>(*a, s, chunk, scratch);
    else k_attn<16><<<grid, th, 0, st>>>(*a, s, chunk, scratch);
    if (s > 1) k_attn_combine<<<dim3((unsigned)a->n_head, (unsigned)a->n), 128, 0, st>>>(*a, s, 0, scratch);
}
