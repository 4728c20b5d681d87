/* cuda_kq_int8.cuh — the K-quant side of k_gemv_q (cuda_gemv_int8.cuh, its only includer): Q4_K,
 * Q5_K and Q6_K pieces of 32 elements read from the checkpoint layout into a warp's registers
 * (kqv_load), decoded to int8 codes and scales (kqv_decode) and multiplied by the int8
 * activations with __dp4a (kqv_dot), a batch whole or in parts (pieces u0..u1 - 1 a lane).
 * Included inside cuda_gemv_int8.cuh after qv_batch / qv_dot, whose layouts (qv_xpos) and batch
 * shape it shares.
 */
#ifndef LMC_CUDA_KQ_INT8_CUH
#define LMC_CUDA_KQ_INT8_CUH

/* K-quant pieces (32 elements, 16 bytes of code bytes) in the registers of a batch, as loaded. */
template <int TYPE> struct kqv_raw;
template <> struct kqv_raw<LMC_DTYPE_Q4_K> { uint4 q; };        /* qs (the header: kqv_batch.h) */
template <> struct kqv_raw<LMC_DTYPE_Q5_K> { uint4 h, q, qh; }; /* header {d, dmin, scales[12]}, qs, its 16 qh bytes */
template <> struct kqv_raw<LMC_DTYPE_Q6_K> { uint32_t ql[4], qh[4]; int s0, s1; uint16_t d; };
template <int TYPE, int RW, int U> struct kqv_batch {
    kqv_raw<TYPE> r[U][RW];
};
/* Q4_K: the 16-byte super-block headers of a batch are shared. Lanes 8g..8g + 7 read pieces of one
 * super-block for each u (pieces base + lane + 32u), so lane 8g + u loads the header of the super-block
 * of pieces base + 8g + 32u (one header a lane and row, U ≤ 8) and the others take it with shuffles:
 * the batch holds 16 useful bytes a load instead of 8 (header and codes loaded per piece). */
template <int RW, int U> struct kqv_batch<LMC_DTYPE_Q4_K, RW, U> {
    kqv_raw<LMC_DTYPE_Q4_K> r[U][RW];
    uint4 h[RW];
};
template <int TYPE, int RW, int U> struct qv_batch_of { typedef qv_batch<RW, U> T; };
template <int RW, int U> struct qv_batch_of<LMC_DTYPE_Q4_K, RW, U> { typedef kqv_batch<LMC_DTYPE_Q4_K, RW, U> T; };
template <int RW, int U> struct qv_batch_of<LMC_DTYPE_Q5_K, RW, U> { typedef kqv_batch<LMC_DTYPE_Q5_K, RW, U> T; };
template <int RW, int U> struct qv_batch_of<LMC_DTYPE_Q6_K, RW, U> { typedef kqv_batch<LMC_DTYPE_Q6_K, RW, U> T; };

/* 16 bytes from a 2-byte aligned address (Q6_K super-blocks are 210 bytes): five 4-byte loads and
 * funnel shifts; the fifth word lies inside the same super-block for every piece. */
static __device__ __forceinline__ void kqv_ld16_2(const uint8_t *p, uint32_t *o) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    const unsigned sh = ((unsigned)(uintptr_t)p & 3u) * 8u;
    uint32_t w[5];
#pragma unroll
    for (int i = 0; i < 5; i++) w[i] = __ldg(a + i);
#pragma unroll
    for (int i = 0; i < 4; i++) o[i] = __funnelshift_r(w[i], w[i + 1], sh);
}

/* Piece c of a row (super-block c / 8, piece j = c % 8 of it; the layouts in qv_xpos). */
template <int TYPE> static __device__ __forceinline__ void kqv_ld(kqv_raw<TYPE> &r, const uint8_t *row, int c) {
    const int j = c & 7;
    if constexpr (TYPE == LMC_DTYPE_Q6_K) { /* {ql[128], qh[64], scales[16], d} */
        const uint8_t *b = row + (size_t)(c >> 3) * 210;
        kqv_ld16_2(b + 16 * j, r.ql);
        kqv_ld16_2(b + 128 + 32 * (j >> 2) + 16 * (j & 1), r.qh);
        r.s0 = __ldg((const signed char *)b + 192 + j + (j & 4));
        r.s1 = __ldg((const signed char *)b + 196 + j + (j & 4));
        r.d = __ldg((const unsigned short *)(b + 208));
    } else if constexpr (TYPE == LMC_DTYPE_Q5_K) { /* {d, dmin, scales[12], qh[32], qs[128]} */
        const uint8_t *b = row + (size_t)(c >> 3) * 176;
        r.h = __ldg((const uint4 *)b);
        r.qh = __ldg((const uint4 *)(b + 16 + 16 * (j & 1)));
        r.q = __ldg((const uint4 *)(b + 48 + 16 * j));
    } else { /* Q4_K {d, dmin, scales[12], qs[128]}: the codes (the header: kqv_load) */
        r.q = __ldg((const uint4 *)(row + (size_t)(c >> 3) * 144 + 16 + 16 * j));
    }
}

template <int TYPE, int RW, int U, bool GLU>
static __device__ __forceinline__ void kqv_load(kqv_batch<TYPE, RW, U> &b, const lmc_cuda_w &w0, const lmc_cuda_w &w1,
                                                int64_t g, int c0, int nch, int u0 = 0, int u1 = U) {
#pragma unroll
    for (int r = 0; r < RW; r++) {
        const lmc_cuda_w &w = GLU && (r & 1) ? w1 : w0;
        const int64_t rr = GLU ? g * (RW / 2) + r / 2 : g * RW + r;
        const uint8_t *row = (const uint8_t *)w.data + (size_t)(rr < w.ne1 ? rr : w.ne1 - 1) * w.nb1;
#pragma unroll
        for (int u = 0; u < U; u++)
            if (u >= u0 && u < u1 && c0 + 32 * u < nch) kqv_ld<TYPE>(b.r[u][r], row, c0 + 32 * u);
        if constexpr (TYPE == LMC_DTYPE_Q4_K) { /* this lane's shared header (kqv_batch<Q4_K>) */
            const int lane = c0 & 31, uh = lane & 7, ch = c0 - lane + (lane & ~7) + 32 * uh;
            if (uh < U && uh >= u0 && uh < u1)
                b.h[r] = ch < nch ? __ldg((const uint4 *)(row + (size_t)(ch >> 3) * 144)) : make_uint4(0, 0, 0, 0);
        }
    }
}

/* A piece's codes as int8 (lo: the 16 low-plane elements, hi: the 16 high-plane ones; Q4_K's hi as
 * 16·code, unsigned bytes), the scales of the two halves (weight scale per hi / lo value: Q4_K's a1 is
 * d·sc / 16) and their mins (Q4_K/Q5_K: the piece with h = 0 carries the mins of both 32-element
 * sub-blocks, the h = 1 piece none). */
template <int TYPE>
static __device__ __forceinline__ void kqv_decode(const kqv_raw<TYPE> &r, const uint4 &hd, int c, int (&lo)[4],
                                                  int (&hi)[4], float &a0, float &a1, float &m0, float &m1) {
    if constexpr (TYPE == LMC_DTYPE_Q6_K) {
        const int qq = (c >> 1) & 1;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t l = (r.ql[k] & 0x0F0F0F0Fu) | (((r.qh[k] >> (2 * qq)) & 0x03030303u) << 4);
            const uint32_t h = ((r.ql[k] >> 4) & 0x0F0F0F0Fu) | (((r.qh[k] >> (2 * qq + 4)) & 0x03030303u) << 4);
            /* q - 32 as a signed byte: v = q ^ 32 is q - 32 as a 6-bit two's complement; bit 5 copied
             * into bits 6 and 7 (·6 stays inside each byte) */
            const uint32_t vl = l ^ 0x20202020u, vh = h ^ 0x20202020u;
            lo[k] = (int)(vl | ((vl & 0x20202020u) * 6u));
            hi[k] = (int)(vh | ((vh & 0x20202020u) * 6u));
        }
        const float d = f16_to_f(r.d);
        a0 = d * (float)r.s0;
        a1 = d * (float)r.s1;
        m0 = m1 = 0.0f;
    } else {
        const int cc = (c >> 1) & 3;
        const float d = f16_to_f((uint16_t)(hd.x & 0xffff)), dm = f16_to_f((uint16_t)(hd.x >> 16));
        int sc[2], mn[2]; /* 6-bit scales/mins of sub-blocks 2cc, 2cc + 1 */
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int i = 2 * cc + hh;
            if (i < 4) {
                sc[hh] = (hd.y >> (8 * i)) & 63;
                mn[hh] = (hd.z >> (8 * i)) & 63;
            } else {
                const int s = 8 * (i - 4);
                sc[hh] = ((hd.w >> s) & 0x0F) | (((hd.y >> (s + 6)) & 3) << 4);
                mn[hh] = ((hd.w >> (s + 4)) & 0x0F) | (((hd.z >> (s + 6)) & 3) << 4);
            }
        }
        const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            /* Q4_K: the high nibbles left in place (16·n), summed by kqv_dot's unsigned dp4a and scaled
             * by a1 / 16 (exact: the same products; decode +1.3 % on the H200, session 31) */
            uint32_t l = q[k] & 0x0F0F0F0Fu, h = TYPE == LMC_DTYPE_Q4_K ? q[k] & 0xF0F0F0F0u : (q[k] >> 4) & 0x0F0F0F0Fu;
            if constexpr (TYPE == LMC_DTYPE_Q5_K) {
                const uint32_t qh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
                l |= ((qh[k] >> (2 * cc)) & 0x01010101u) << 4;
                h |= ((qh[k] >> (2 * cc + 1)) & 0x01010101u) << 4;
            }
            lo[k] = (int)l;
            hi[k] = (int)h;
        }
        a0 = d * (float)sc[0];
        a1 = d * (float)sc[1] * (TYPE == LMC_DTYPE_Q4_K ? 0.0625f : 1.0f);
        const float own = (c & 1) ? 0.0f : dm;
        m0 = own * (float)mn[0];
        m1 = own * (float)mn[1];
    }
}

/* The header of piece u of row r for this lane: Q4_K's from the lane that loaded it (kqv_batch<Q4_K>), the
 * others' from the piece itself (Q6_K has none). */
template <int TYPE, int RW, int U>
static __device__ __forceinline__ uint4 kqv_header(const kqv_batch<TYPE, RW, U> &b, int r, int u, int lane) {
    if constexpr (TYPE == LMC_DTYPE_Q4_K) {
        const int src = (lane & ~7) | u;
        return make_uint4(__shfl_sync(0xffffffffu, b.h[r].x, src), __shfl_sync(0xffffffffu, b.h[r].y, src),
                          __shfl_sync(0xffffffffu, b.h[r].z, src), __shfl_sync(0xffffffffu, b.h[r].w, src));
    } else if constexpr (TYPE == LMC_DTYPE_Q5_K) {
        (void)lane;
        return b.r[u][r].h;
    } else {
        (void)b; (void)r; (void)u; (void)lane;
        return make_uint4(0, 0, 0, 0);
    }
}

/* acc[r][t] += the batch's K-quant pieces · token t's int8 activations: per piece two runs of 16
 * (low and high plane, 4 __dp4a each), each times its weight scale and its 32-block's activation
 * scale; Q4_K/Q5_K minus min · d·Σq of the activation block. */
template <int TYPE, int NT, int RW, int U>
static __device__ __forceinline__ void kqv_dot(float (&acc)[RW][NT], const kqv_batch<TYPE, RW, U> &b, const int8_t *xq,
                                               const float2 *meta, int K, int c0, int nch, int u0 = 0, int u1 = U) {
    const int nbk = K / 32;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = c0 + 32 * u;
        if (u < u0 || u >= u1) continue;
        uint4 hdr[RW]; /* Q4_K: shuffled, by the whole warp, before lanes past the row's end leave */
#pragma unroll
        for (int r = 0; r < RW; r++) hdr[r] = kqv_header(b, r, u, c0 & 31);
        if (c >= nch) {
            if (TYPE == LMC_DTYPE_Q4_K) continue;
            break;
        }
        /* the natural 32-element activation blocks of the piece's low and high runs */
        const int blo = TYPE == LMC_DTYPE_Q6_K ? (c & ~7) + (c & 4) + ((c >> 1) & 1) : c & ~1;
        const int bhi = blo + (TYPE == LMC_DTYPE_Q6_K ? 2 : 1);
        int lo[RW][4], hi[RW][4];
        float a0[RW], a1[RW], m0[RW], m1[RW];
#pragma unroll
        for (int r = 0; r < RW; r++) kqv_decode<TYPE>(b.r[u][r], hdr[r], c, lo[r], hi[r], a0[r], a1[r], m0[r], m1[r]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int4 xa = *(const int4 *)(xq + t * K + c * 16);
            const int4 xb = *(const int4 *)(xq + t * K + K / 2 + c * 16);
            const float2 ml = meta[t * nbk + blo], mh = meta[t * nbk + bhi];
#pragma unroll
            for (int r = 0; r < RW; r++) {
                const int sl = dp4a_x4<false>(lo[r], xa, 0);
                const int sh = dp4a_x4<TYPE == LMC_DTYPE_Q4_K>(hi[r], xb, 0); /* Q4_K: unsigned 16·code */
                float v = fmaf(a0[r] * ml.x, (float)sl, (a1[r] * mh.x) * (float)sh);
                if (TYPE != LMC_DTYPE_Q6_K) v -= fmaf(m0[r], ml.y, m1[r] * mh.y);
                acc[r][t] += v;
            }
        }
    }
}

#endif
