/* cpu_backend.c — the CPU implementation of lmc_backend_i.
 *
 * Memory is plain host memory: alloc() is calloc, bind_weight() points at the
 * mapped checkpoint in place (no copy), except Q8_0 and Q4_0 weights, which the AVX-512 tier reads
 * faster regrouped as Q4_0R / Q8_0R (cpu_rebind.c; same values, not in reference mode). Every op splits its rows over the
 * thread pool by (ith, nth). In reference mode the pool has one thread and
 * matmul uses the scalar double-accumulating kernel: that mode is the oracle
 * the fast paths (and later the CUDA backend) are tested against.
 * The backend owns its pool and per-thread scratch; tensors are owned by callers.
 */
#include "backend/backend.h"
#include "core/quant.h"
#include "core/threadpool.h"
#include "cpu_kernels.h"
#include "cpu_rebind.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct cpu_ctx {
    lmc_pool *pool;
    int reference;
    int n_threads;
    float **scratch;      /* per thread */
    size_t scratch_floats; /* capacity of each */
    void *act;            /* activations prepared once per matmul for the decode kernels */
    size_t act_bytes;     /* capacity of act */
    void *moe;            /* matmul_id: slots grouped by expert (gathered inputs, outputs, tables) */
    size_t moe_bytes;     /* capacity of moe */
    lmc_cpu_rebinds rebound; /* Q4_0 / Q8_0 weights bound as Q4_0R / Q8_0R */
} cpu_ctx;

#define CTX(be) ((cpu_ctx *)(be)->ctx)

/* Make sure every thread has at least n floats of scratch (called outside parallel regions). */
static void scratch_reserve(cpu_ctx *c, size_t n) {
    if (n <= c->scratch_floats) return;
    for (int i = 0; i < c->n_threads; i++) {
        float *p = realloc(c->scratch[i], n * sizeof(float));
        LMC_ASSERT(p != NULL);
        c->scratch[i] = p;
    }
    c->scratch_floats = n;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Make sure the prepared-activation buffer holds n bytes, on a 64-byte boundary (its contents are
 * not kept): the kernels' 512-bit loads of it then never span two cache lines (realloc's 16-byte
 * alignment split 3 loads in 4). */
static void act_reserve(cpu_ctx *c, size_t n) {
    if (n <= c->act_bytes) return;
    free(c->act);
    c->act = aligned_alloc(64, align64(n));
    LMC_ASSERT(c->act != NULL);
    c->act_bytes = align64(n);
}

static int is_contig(const lmc_tensor *t) {
    size_t s = lmc_dtype_size(t->type);
    for (int i = 0; i < LMC_MAX_DIMS; i++) {
        if (t->nb[i] != s) return 0;
        s *= (size_t)t->ne[i];
    }
    return 1;
}

/* ------------------------------------------------------------------ memory */

static void cpu_free(lmc_backend *be) {
    cpu_ctx *c = CTX(be);
    lmc_pool_free(c->pool);
    for (int i = 0; i < c->n_threads; i++) free(c->scratch[i]);
    free(c->scratch);
    free(c->act);
    free(c->moe);
    lmc_cpu_rebinds_free(&c->rebound);
    free(c);
    free(be);
}

static lmc_status cpu_alloc(lmc_backend *be, lmc_tensor *t) {
    size_t n = lmc_tensor_nbytes(t);
    t->data = calloc(1, n ? n : 1);
    if (!t->data) return lmc_fail(LMC_ERR_NOMEM, "cannot allocate %zu bytes", n);
    return LMC_OK;
}

static void cpu_release(lmc_backend *be, lmc_tensor *t) {
    free(t->data);
    t->data = NULL;
}

static lmc_status cpu_bind_weight(lmc_backend *be, lmc_tensor *t, const void *host) {
    cpu_ctx *c = CTX(be);
    /* regrouped for the AVX-512 VNNI kernels, except where AMX int8 tiles take the blocks' prefill
     * batches (Intel: those tiles read the blocks as they are); or, a vector in a file mapping, copied */
    const int regroup = lmc_cpu_simd_avx512() && lmc_cpu_rebind_wants(t) && !lmc_cpu_amx_int8_wants(t, 512);
    if (!c->reference && (regroup || lmc_cpu_rebind_copy_wants(t, host))) return lmc_cpu_rebind(&c->rebound, t, host, c->pool);
    t->data = (void *)host; /* read-only mapping used in place */
    return LMC_OK;
}

static void cpu_unbind_weight(lmc_backend *be, lmc_tensor *t) {
    lmc_cpu_unrebind(&CTX(be)->rebound, t); /* a rewritten weight: the descriptor as it was bound */
    t->data = NULL;
}

static void cpu_set(lmc_backend *be, lmc_tensor *dst, const void *src, size_t off, size_t n) {
    LMC_ASSERT(off + n <= lmc_tensor_nbytes(dst));
    memcpy((char *)dst->data + off, src, n);
}

static void cpu_get(lmc_backend *be, void *dst, const lmc_tensor *src, size_t off, size_t n) {
    LMC_ASSERT(off + n <= lmc_tensor_nbytes(src));
    memcpy(dst, (const char *)src->data + off, n);
}

static lmc_status cpu_sync(lmc_backend *be) { return LMC_OK; }

/* ------------------------------------------------------------- op dispatch */

typedef enum {
    OP_GET_ROWS, OP_MATMUL, OP_ADD_BIAS, OP_ADD, OP_SCALE, OP_RMS_NORM, OP_LAYER_NORM, OP_ROPE,
    OP_KV_STORE, OP_ATTENTION, OP_ACT_MUL, OP_ACT, OP_SOFTCAP, OP_MOE_ROUTE, OP_MOE_SUM,
} op_kind;

typedef struct op_args {
    op_kind kind;
    cpu_ctx *c;
    lmc_tensor *y;
    const lmc_tensor *a, *b, *w, *bias, *pos, *seq, *k, *v;
    float f0, f1;
    lmc_act act;
    const lmc_rope_op *rope;
    const lmc_attn_op *attn;
    const void *xprep; /* matmul: prepared activations (NULL: none) */
    lmc_tensor *y2;    /* moe_route: the weights */
    const lmc_moe_route_op *moe;
} op_args;

static float act_apply(lmc_act act, float x) {
    switch (act) {
    case LMC_ACT_SILU: return x / (1.0f + expf(-x));
    case LMC_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case LMC_ACT_GELU_TANH: {
        const float k = 0.79788456080286536f; /* sqrt(2/pi) */
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case LMC_ACT_RELU: return x > 0 ? x : 0;
    case LMC_ACT_RELU2: return x > 0 ? x * x : 0;
    }
    return x;
}

#define ROW_CHUNK 256 /* elements of a weight row converted to f32 at a time by the row-wise ops */

/* n elements of t from element i on, as f32 (t contiguous) */
static void elem_row_f32(const lmc_tensor *t, int64_t i, float *dst, int64_t n) {
    lmc_to_f32(t->type, (const char *)t->data + (size_t)i * lmc_dtype_size(t->type), dst, (size_t)n);
}

static void run_get_rows(op_args *o, int ith, int nth) {
    const int64_t d = o->y->ne[0], n = lmc_tensor_nrows(o->y);
    const int32_t *ids = o->pos->data;
    long r0, r1;
    lmc_split(n, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *dst = (float *)o->y->data + (size_t)r * d;
        lmc_tensor_row_to_f32(o->w, ids[r], dst);
        if (o->f0 != 1.0f) for (int64_t i = 0; i < d; i++) dst[i] *= o->f0;
    }
}

static void run_matmul(op_args *o, int ith, int nth) {
    const int64_t out = o->w->ne[1], n_tok = lmc_tensor_nrows(o->a);
    const int64_t grp = lmc_cpu_matmul_grain(o->w, n_tok);
    long g0, g1;
    lmc_split((out + grp - 1) / grp, ith, nth, &g0, &g1);
    int64_t r0 = g0 * grp, r1 = g1 * grp < out ? g1 * grp : out;
    if (r0 >= r1) return;
    if (o->c->reference) lmc_cpu_matmul_rows_ref(o->y->data, o->w, o->a->data, n_tok, r0, r1);
    else lmc_cpu_matmul_rows(o->y->data, o->w, o->a->data, o->xprep, n_tok, r0, r1, o->c->scratch[ith]);
}

static void run_rowwise(op_args *o, int ith, int nth) {
    const int64_t d = o->y->ne[0], n = lmc_tensor_nrows(o->y);
    long r0, r1;
    lmc_split(n, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *y = (float *)o->y->data + (size_t)r * d;
        const float *a = o->a ? (const float *)o->a->data + (size_t)r * d : NULL;
        switch (o->kind) {
        case OP_ADD_BIAS: {
            float bb[ROW_CHUNK];
            for (int64_t i0 = 0; i0 < d; i0 += ROW_CHUNK) {
                const int64_t n = d - i0 < ROW_CHUNK ? d - i0 : ROW_CHUNK;
                elem_row_f32(o->bias, i0, bb, n);
                for (int64_t i = 0; i < n; i++) y[i0 + i] += bb[i];
            }
        } break;
        case OP_ADD: {
            const float *b = (const float *)o->b->data + (size_t)r * d;
            for (int64_t i = 0; i < d; i++) y[i] = a[i] + b[i];
        } break;
        case OP_SCALE:
            for (int64_t i = 0; i < d; i++) y[i] = a[i] * o->f0;
            break;
        case OP_RMS_NORM: {
            const int64_t woff = o->w ? (r % (lmc_tensor_nelem(o->w) / d)) * d : 0;
            double ss = 0;
            if (o->c->reference) for (int64_t i = 0; i < d; i++) ss += (double)a[i] * a[i];
            else ss = lmc_cpu_sumsq(a, d);
            float inv = (float)(1.0 / sqrt(ss / (double)d + (double)o->f0));
            float wb[ROW_CHUNK];
            for (int64_t i0 = 0; i0 < d; i0 += ROW_CHUNK) {
                const int64_t n = d - i0 < ROW_CHUNK ? d - i0 : ROW_CHUNK;
                if (o->w) elem_row_f32(o->w, woff + i0, wb, n);
                for (int64_t i = 0; i < n; i++) y[i0 + i] = a[i0 + i] * inv * (o->w ? wb[i] + o->f1 : 1.0f);
            }
        } break;
        case OP_LAYER_NORM: {
            const int64_t woff = o->w ? (r % (lmc_tensor_nelem(o->w) / d)) * d : 0;
            const int64_t boff = o->bias ? (r % (lmc_tensor_nelem(o->bias) / d)) * d : 0;
            double mean = 0, var = 0;
            for (int64_t i = 0; i < d; i++) mean += a[i];
            mean /= (double)d;
            for (int64_t i = 0; i < d; i++) var += ((double)a[i] - mean) * ((double)a[i] - mean);
            var /= (double)d;
            float inv = (float)(1.0 / sqrt(var + (double)o->f0));
            float wb[ROW_CHUNK], bb[ROW_CHUNK];
            for (int64_t i0 = 0; i0 < d; i0 += ROW_CHUNK) {
                const int64_t n = d - i0 < ROW_CHUNK ? d - i0 : ROW_CHUNK;
                if (o->w) elem_row_f32(o->w, woff + i0, wb, n);
                if (o->bias) elem_row_f32(o->bias, boff + i0, bb, n);
                for (int64_t i = 0; i < n; i++) {
                    float v = ((float)((double)a[i0 + i] - mean)) * inv;
                    if (o->w) v *= wb[i];
                    if (o->bias) v += bb[i];
                    y[i0 + i] = v;
                }
            }
        } break;
        case OP_ACT_MUL: {
            const float *b = (const float *)o->b->data + (size_t)r * d;
            if (!o->c->reference && lmc_cpu_act_vectorized(o->act)) lmc_cpu_act_row(o->act, y, a, b, d);
            else for (int64_t i = 0; i < d; i++) y[i] = act_apply(o->act, a[i]) * b[i];
        } break;
        case OP_ACT:
            if (!o->c->reference && lmc_cpu_act_vectorized(o->act)) lmc_cpu_act_row(o->act, y, a, NULL, d);
            else for (int64_t i = 0; i < d; i++) y[i] = act_apply(o->act, a[i]);
            break;
        case OP_SOFTCAP:
            for (int64_t i = 0; i < d; i++) y[i] = o->f0 * tanhf(a[i] / o->f0);
            break;
        default: LMC_ASSERT(!"not a row-wise op");
        }
    }
}

static void run_rope(op_args *o, int ith, int nth) {
    lmc_tensor *x = o->y;
    const int64_t hd = x->ne[0], n_head = x->ne[1], n_tok = x->ne[2];
    const lmc_rope_op *r = o->rope;
    const int half = r->n_rot / 2;
    const float *inv = r->inv_freq->data;
    const int32_t *pos = o->pos->data;
    float *cs = o->c->scratch[ith]; /* [half] cos, [half] sin */
    long t0, t1;
    lmc_split(n_tok, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        for (int i = 0; i < half; i++) {
            float ang = (float)pos[t] * inv[i];
            cs[i] = cosf(ang) * r->attn_factor;
            cs[half + i] = sinf(ang) * r->attn_factor;
        }
        for (int64_t h = 0; h < n_head; h++) {
            float *v = (float *)x->data + ((size_t)t * n_head + h) * hd;
            for (int i = 0; i < half; i++) {
                int i0 = r->interleaved ? 2 * i : i;
                int i1 = r->interleaved ? 2 * i + 1 : i + half;
                float x0 = v[i0], x1 = v[i1], c = cs[i], s = cs[half + i];
                v[i0] = x0 * c - x1 * s;
                v[i1] = x1 * c + x0 * s;
            }
        }
    }
}

static void run_kv_store(op_args *o, int ith, int nth) {
    lmc_tensor *cache = o->y;
    const int64_t row = cache->ne[0], n_ctx = cache->ne[1], n_seq = cache->ne[2];
    const int64_t n = lmc_tensor_nrows(o->a);
    const int32_t *pos = o->pos->data, *seq = o->seq->data;
    long t0, t1;
    lmc_split(n, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        LMC_ASSERT(seq[t] >= 0 && seq[t] < n_seq && pos[t] >= 0);
        size_t slot = (size_t)seq[t] * (size_t)n_ctx + (size_t)(pos[t] % n_ctx);
        memcpy((float *)cache->data + slot * (size_t)row, (const float *)o->a->data + (size_t)t * row,
               (size_t)row * sizeof(float));
    }
}

typedef float attn_v16 __attribute__((vector_size(64)));

/* The first position a token at p_end attends to (the range holds at most n_ctx positions). */
static int64_t attn_begin(const lmc_attn_op *p, int64_t p_end, int64_t n_ctx) {
    int64_t p_begin = p->window > 0 ? p_end - p->window + 1 : 0;
    if (p_begin < 0) p_begin = 0;
    if (p_end - p_begin + 1 > n_ctx) p_begin = p_end - n_ctx + 1; /* caller bug guard: never read stale slots */
    return p_begin;
}

/* The reference: one query head at a time, products summed in double. */
static void run_attention_ref(op_args *o, int ith, int nth) {
    const lmc_attn_op *p = o->attn;
    const int64_t hd = p->head_dim, nh = p->n_head, group = p->n_head / p->n_kv_head;
    const int64_t n_tok = lmc_tensor_nrows(o->a), n_ctx = o->k->ne[1];
    const int64_t kv_row = o->k->ne[0];
    const int32_t *pos = o->pos->data, *seq = o->seq->data;
    float *scores = o->c->scratch[ith];
    long j0, j1;
    lmc_split(n_tok * nh, ith, nth, &j0, &j1);
    for (long j = j0; j < j1; j++) {
        const int64_t t = j / nh, h = j % nh, kvh = h / group;
        const float *q = (const float *)o->a->data + (size_t)t * nh * hd + (size_t)h * hd;
        float *out = (float *)o->y->data + (size_t)t * nh * hd + (size_t)h * hd;
        const int64_t p_end = pos[t], p_begin = attn_begin(p, p_end, n_ctx);
        const float *kbase = (const float *)o->k->data + (size_t)seq[t] * n_ctx * kv_row + (size_t)kvh * hd;
        const float *vbase = (const float *)o->v->data + (size_t)seq[t] * n_ctx * kv_row + (size_t)kvh * hd;
        float mx = -INFINITY;
        /* ring slots pp mod n_ctx, advanced without a division per position */
        const int64_t slot0 = p_begin % n_ctx;
        for (int64_t pp = p_begin, sl = slot0; pp <= p_end; pp++, sl = sl + 1 == n_ctx ? 0 : sl + 1) {
            const float *k = kbase + (size_t)sl * kv_row;
            double d = 0;
            for (int64_t i = 0; i < hd; i++) d += (double)q[i] * k[i];
            float s = (float)d * p->scale;
            if (p->softcap > 0) s = p->softcap * tanhf(s / p->softcap);
            scores[pp - p_begin] = s;
            if (s > mx) mx = s;
        }
        /* an attention sink joins the softmax's max and denominator, and no value follows it */
        const float sink = p->sinks ? ((const float *)p->sinks->data)[h] : 0.0f;
        if (p->sinks && sink > mx) mx = sink;
        double sum = p->sinks ? expf(sink - mx) : 0;
        for (int64_t pp = p_begin; pp <= p_end; pp++) {
            float e = expf(scores[pp - p_begin] - mx);
            scores[pp - p_begin] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int64_t i = 0; i < hd; i++) out[i] = 0;
        /* 16 lanes at a time (each out[i] still sums its positions in order, a multiply then an
         * add: the same result as the scalar loop) */
        for (int64_t pp = p_begin, sl = slot0; pp <= p_end; pp++, sl = sl + 1 == n_ctx ? 0 : sl + 1) {
            const float *v = vbase + (size_t)sl * kv_row;
            const float wgt = scores[pp - p_begin] * inv;
            int64_t i = 0;
            for (; i + 16 <= hd; i += 16) {
                attn_v16 a, b;
                memcpy(&a, out + i, sizeof a);
                memcpy(&b, v + i, sizeof b);
                a += wgt * b;
                memcpy(out + i, &a, sizeof a);
            }
            for (; i < hd; i++) out[i] += wgt * v[i];
        }
    }
}

/* The fast path: jobs of (token, KV head, a share of that head's query heads — the whole group unless
 * there are fewer groups than threads), so the query heads of a group read each cached row from
 * memory once (lmc_cpu_attn_dots / _wsum work in blocks of rows that the later heads find in L1).
 * The ring's slots of a range are at most two runs of consecutive slots. Scratch: [heads][n_ctx]. */
static void run_attention_fast(op_args *o, int ith, int nth) {
    const lmc_attn_op *p = o->attn;
    const int64_t hd = p->head_dim, nh = p->n_head, nkv = p->n_kv_head, group = nh / nkv;
    const int64_t n_tok = lmc_tensor_nrows(o->a), n_ctx = o->k->ne[1], kv_row = o->k->ne[0];
    const int32_t *pos = o->pos->data, *seq = o->seq->data;
    int64_t parts = n_tok * nkv < nth ? (nth + n_tok * nkv - 1) / (n_tok * nkv) : 1;
    if (parts > group) parts = group;
    const int64_t hs = (group + parts - 1) / parts; /* query heads a job */
    parts = (group + hs - 1) / hs;
    float *scores = o->c->scratch[ith];
    long j0, j1;
    lmc_split(n_tok * nkv * parts, ith, nth, &j0, &j1);
    for (long j = j0; j < j1; j++) {
        const int64_t t = j / (nkv * parts), kvh = j / parts % nkv, h0 = kvh * group + j % parts * hs;
        const int g_n = (int)(hs < (kvh + 1) * group - h0 ? hs : (kvh + 1) * group - h0);
        const float *q = (const float *)o->a->data + (size_t)t * nh * hd + (size_t)h0 * hd;
        float *out = (float *)o->y->data + (size_t)t * nh * hd + (size_t)h0 * hd;
        const int64_t p_end = pos[t], p_begin = attn_begin(p, p_end, n_ctx), n = p_end - p_begin + 1;
        const int64_t slot0 = p_begin % n_ctx, run0 = n_ctx - slot0 < n ? n_ctx - slot0 : n;
        const float *kbase = (const float *)o->k->data + (size_t)seq[t] * n_ctx * kv_row + (size_t)kvh * hd;
        const float *vbase = (const float *)o->v->data + (size_t)seq[t] * n_ctx * kv_row + (size_t)kvh * hd;
        lmc_cpu_attn_dots(q, hd, g_n, kbase + (size_t)slot0 * kv_row, kv_row, run0, hd, scores, n_ctx);
        if (run0 < n) lmc_cpu_attn_dots(q, hd, g_n, kbase, kv_row, n - run0, hd, scores + run0, n_ctx);
        for (int g = 0; g < g_n; g++) {
            float *s = scores + (size_t)g * n_ctx, mx = -INFINITY;
            if (p->softcap > 0) {
                for (int64_t i = 0; i < n; i++) {
                    const float v = p->softcap * tanhf(s[i] * p->scale / p->softcap);
                    s[i] = v;
                    if (v > mx) mx = v;
                }
            } else {
                mx = lmc_cpu_scale_max(s, n, p->scale);
            }
            /* an attention sink joins the softmax's max and denominator, and no value follows it */
            const float sink = p->sinks ? ((const float *)p->sinks->data)[h0 + g] : 0.0f;
            if (p->sinks && sink > mx) mx = sink;
            const double sum = (p->sinks ? expf(sink - mx) : 0) + lmc_cpu_softmax_exp(s, n, mx);
            const float inv = (float)(1.0 / sum);
            for (int64_t i = 0; i < n; i++) s[i] *= inv;
            memset(out + (size_t)g * hd, 0, (size_t)hd * sizeof(float));
        }
        lmc_cpu_attn_wsum(vbase + (size_t)slot0 * kv_row, kv_row, scores, n_ctx, g_n, run0, hd, out, hd);
        if (run0 < n) lmc_cpu_attn_wsum(vbase, kv_row, scores + run0, n_ctx, g_n, n - run0, hd, out, hd);
    }
}

static void run_attention(op_args *o, int ith, int nth) {
    if (o->c->reference) run_attention_ref(o, ith, nth);
    else run_attention_fast(o, ith, nth);
}

static void run_moe_rows(op_args *o, int ith, int nth) {
    const int64_t n = lmc_tensor_nrows(o->kind == OP_MOE_ROUTE ? o->a : o->y);
    long t0, t1;
    lmc_split(n, ith, nth, &t0, &t1);
    if (t0 >= t1) return;
    if (o->kind == OP_MOE_ROUTE)
        lmc_cpu_moe_route_rows(o->y->data, o->y2->data, o->a->data, o->bias ? o->bias->data : NULL, o->moe, t0, t1,
                               o->c->scratch[ith]);
    else
        lmc_cpu_moe_sum_rows(o->y->data, o->a->data, o->b->data, o->k ? o->k->data : NULL, o->v ? o->v->data : NULL,
                             o->y->ne[0], (int)o->b->ne[0], t0, t1);
}

static void op_worker(void *arg, int ith, int nth) {
    op_args *o = arg;
    switch (o->kind) {
    case OP_GET_ROWS: run_get_rows(o, ith, nth); break;
    case OP_MATMUL: run_matmul(o, ith, nth); break;
    case OP_ROPE: run_rope(o, ith, nth); break;
    case OP_KV_STORE: run_kv_store(o, ith, nth); break;
    case OP_ATTENTION: run_attention(o, ith, nth); break;
    case OP_MOE_ROUTE: case OP_MOE_SUM: run_moe_rows(o, ith, nth); break;
    default: run_rowwise(o, ith, nth); break;
    }
}

/* Rows an op splits over threads (matmul and attention: always worth the pool). */
static int64_t op_rows(const op_args *o) {
    switch (o->kind) {
    case OP_MATMUL: case OP_ATTENTION: return INT64_MAX;
    case OP_ROPE: return o->y->ne[2];
    case OP_KV_STORE: return lmc_tensor_nrows(o->a);
    case OP_MOE_ROUTE: return lmc_tensor_nrows(o->a);
    default: return lmc_tensor_nrows(o->y);
    }
}

static void dispatch(lmc_backend *be, op_args *o) {
    o->c = CTX(be);
    /* a single row would go to thread 0 alone: run it here and spare the other threads a
     * wake-up (most ops of a decoded token: norms, rope, adds, activations, KV stores) */
    if (op_rows(o) < 2) { op_worker(o, 0, 1); return; }
    lmc_pool_run(o->c->pool, op_worker, o);
}

/* ------------------------------------------------------------------- ops */

static void cpu_get_rows(lmc_backend *be, lmc_tensor *y, const lmc_tensor *table, const lmc_tensor *ids, float scale) {
    LMC_ASSERT(y->type == LMC_DTYPE_F32 && ids->type == LMC_DTYPE_I32 && table->ne[0] == y->ne[0]);
    LMC_ASSERT(lmc_tensor_nelem(ids) == lmc_tensor_nrows(y));
    const int32_t *id = ids->data;
    for (int64_t i = 0; i < lmc_tensor_nelem(ids); i++) LMC_ASSERT(id[i] >= 0 && id[i] < table->ne[1]);
    op_args o = {.kind = OP_GET_ROWS, .y = y, .w = table, .pos = ids, .f0 = scale};
    dispatch(be, &o);
}

/* Activations of a prefill batch prepared for the SIMD kernels by every thread, a share of the
 * tokens each (a token's layout stands alone); smaller batches and the AMX layouts on one. */
typedef struct prep_job {
    const lmc_tensor *w;
    const float *x;
    int64_t n_tok;
    size_t tb; /* bytes a token */
    char *buf;
} prep_job;

static void prep_worker(void *arg, int ith, int nth) {
    const prep_job *j = arg;
    long t0, t1;
    lmc_split(j->n_tok, ith, nth, &t0, &t1);
    if (t0 < t1) lmc_cpu_act_prepare(j->w, j->x + (size_t)t0 * (size_t)j->w->ne[0], t1 - t0, j->buf + j->tb * (size_t)t0);
}

static void act_prepare(cpu_ctx *c, const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    const size_t tb = n_tok >= LMC_CPU_GEMM_MIN_TOKENS ? lmc_cpu_act_token_bytes(w, n_tok) : 0;
    if (!tb) {
        lmc_cpu_act_prepare(w, x, n_tok, buf);
        return;
    }
    prep_job j = {.w = w, .x = x, .n_tok = n_tok, .tb = tb, .buf = buf};
    lmc_pool_run(c->pool, prep_worker, &j);
}

static void cpu_matmul(lmc_backend *be, lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *x) {
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && y->type == LMC_DTYPE_F32);
    LMC_ASSERT(w->ne[0] == x->ne[0] && w->ne[1] == y->ne[0] && lmc_tensor_nrows(x) == lmc_tensor_nrows(y));
    LMC_ASSERT(is_contig(x) && is_contig(y) && w->nb[0] == lmc_dtype_block_bytes(w->type));
    LMC_ASSERT(w->nb[1] >= lmc_dtype_row_bytes(w->type, w->ne[0]) && lmc_dtype_row_bytes(w->type, w->ne[0]) > 0);
    LMC_ASSERT(!lmc_dtype_has_aux(w->type) || lmc_quant_mlx_check(w->type, w->ne[0], w->ne[1], w->aux) == LMC_OK);
    cpu_ctx *c = CTX(be);
    scratch_reserve(c, (size_t)w->ne[0] * LMC_CPU_GEMM_BLOCK);
    op_args o = {.kind = OP_MATMUL, .y = y, .w = w, .a = x};
    if (!c->reference) {
        const int64_t n_tok = lmc_tensor_nrows(x);
        size_t nb = lmc_cpu_act_bytes(w, n_tok);
        if (nb) {
            act_reserve(c, nb);
            act_prepare(c, w, x->data, n_tok, c->act);
            o.xprep = c->act;
        }
    }
    dispatch(be, &o);
}

/* matmul_n: the n products of one x in one pool job (the threads split the row groups of all n
 * matrices, lmc_cpu_matmul_grain's), x prepared once for each distinct layout: q, k and v (gate and
 * up) of one dtype share one preparation and one wake-up of the threads instead of three. Every row
 * gets what cpu_matmul would give it (same kernels, preparation and row grain). */
typedef struct mm_n_job {
    cpu_ctx *c;
    int n;
    lmc_tensor *const *y;
    const lmc_tensor *const *w;
    const lmc_tensor *x;
    const void *xp[3];
    int64_t grp[3], unit0[4]; /* matrix i: row groups of grp[i] rows, units unit0[i] .. unit0[i + 1] */
} mm_n_job;

static void mm_n_worker(void *arg, int ith, int nth) {
    const mm_n_job *j = arg;
    long u0, u1;
    lmc_split(j->unit0[j->n], ith, nth, &u0, &u1);
    const int64_t n_tok = lmc_tensor_nrows(j->x);
    for (int i = 0; i < j->n; i++) {
        const int64_t a = u0 > j->unit0[i] ? u0 : j->unit0[i], b = u1 < j->unit0[i + 1] ? u1 : j->unit0[i + 1];
        if (a >= b) continue;
        const int64_t out = j->w[i]->ne[1], o0 = (a - j->unit0[i]) * j->grp[i];
        const int64_t o1 = (b - j->unit0[i]) * j->grp[i] < out ? (b - j->unit0[i]) * j->grp[i] : out;
        if (j->c->reference) lmc_cpu_matmul_rows_ref(j->y[i]->data, j->w[i], j->x->data, n_tok, o0, o1);
        else lmc_cpu_matmul_rows(j->y[i]->data, j->w[i], j->x->data, j->xp[i], n_tok, o0, o1, j->c->scratch[ith]);
    }
}

/* w[i]'s preparation of x is w[k]'s (k < i): same dtype, width and MLX group size. */
static int same_prep(const lmc_tensor *a, const lmc_tensor *b) {
    if (a->type != b->type || a->ne[0] != b->ne[0]) return 0;
    return !lmc_dtype_is_mlx(a->type) ||
           ((const lmc_quant_mlx *)a->aux)->group_size == ((const lmc_quant_mlx *)b->aux)->group_size;
}

static void cpu_matmul_n(lmc_backend *be, int n, lmc_tensor *const *y, const lmc_tensor *const *w, const lmc_tensor *x) {
    LMC_ASSERT(n >= 1 && n <= 3);
    cpu_ctx *c = CTX(be);
    const int64_t n_tok = lmc_tensor_nrows(x);
    mm_n_job j = {.c = c, .n = n, .y = y, .w = w, .x = x};
    size_t need = 0, at[3] = {0, 0, 0}, bytes[3] = {0, 0, 0};
    int src[3]; /* the matrix whose preparation matrix i reads */
    for (int i = 0; i < n; i++) {
        LMC_ASSERT(x->type == LMC_DTYPE_F32 && y[i]->type == LMC_DTYPE_F32 && is_contig(x) && is_contig(y[i]));
        LMC_ASSERT(w[i]->ne[0] == x->ne[0] && w[i]->ne[1] == y[i]->ne[0] && lmc_tensor_nrows(y[i]) == n_tok);
        LMC_ASSERT(w[i]->nb[0] == lmc_dtype_block_bytes(w[i]->type) && lmc_dtype_row_bytes(w[i]->type, w[i]->ne[0]) > 0 &&
                   w[i]->nb[1] >= lmc_dtype_row_bytes(w[i]->type, w[i]->ne[0]));
        LMC_ASSERT(!lmc_dtype_has_aux(w[i]->type) ||
                   lmc_quant_mlx_check(w[i]->type, w[i]->ne[0], w[i]->ne[1], w[i]->aux) == LMC_OK);
        scratch_reserve(c, (size_t)w[i]->ne[0] * LMC_CPU_GEMM_BLOCK);
        j.grp[i] = lmc_cpu_matmul_grain(w[i], n_tok);
        j.unit0[i + 1] = j.unit0[i] + (w[i]->ne[1] + j.grp[i] - 1) / j.grp[i];
        src[i] = i;
        for (int k = 0; k < i; k++)
            if (same_prep(w[k], w[i])) {
                src[i] = src[k];
                break;
            }
        if (src[i] == i && !c->reference) {
            bytes[i] = lmc_cpu_act_bytes(w[i], n_tok);
            at[i] = need;
            need += align64(bytes[i]);
        }
    }
    act_reserve(c, need);
    for (int i = 0; i < n && !c->reference; i++) {
        if (src[i] != i) {
            j.xp[i] = j.xp[src[i]];
        } else if (bytes[i]) {
            j.xp[i] = (char *)c->act + at[i];
            act_prepare(c, w[i], x->data, n_tok, (void *)(uintptr_t)j.xp[i]);
        }
    }
    if (j.unit0[n] < 2) mm_n_worker(&j, 0, 1);
    else lmc_pool_run(c->pool, mm_n_worker, &j);
}

static void cpu_add_bias(lmc_backend *be, lmc_tensor *y, const lmc_tensor *b) {
    LMC_ASSERT(lmc_tensor_nelem(b) == y->ne[0]);
    op_args o = {.kind = OP_ADD_BIAS, .y = y, .bias = b};
    dispatch(be, &o);
}

static void cpu_add(lmc_backend *be, lmc_tensor *y, const lmc_tensor *a, const lmc_tensor *b) {
    LMC_ASSERT(lmc_tensor_nelem(a) == lmc_tensor_nelem(y) && lmc_tensor_nelem(b) == lmc_tensor_nelem(y));
    op_args o = {.kind = OP_ADD, .y = y, .a = a, .b = b};
    dispatch(be, &o);
}

static void cpu_scale(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float s) {
    LMC_ASSERT(lmc_tensor_nelem(x) == lmc_tensor_nelem(y));
    op_args o = {.kind = OP_SCALE, .y = y, .a = x, .f0 = s};
    dispatch(be, &o);
}

static void cpu_rms_norm(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w, float eps,
                         float w_offset) {
    LMC_ASSERT(x->ne[0] == y->ne[0] && lmc_tensor_nrows(x) == lmc_tensor_nrows(y));
    LMC_ASSERT(!w || (lmc_tensor_nelem(w) % x->ne[0] == 0 && lmc_tensor_nelem(w) >= x->ne[0]));
    op_args o = {.kind = OP_RMS_NORM, .y = y, .a = x, .w = w, .f0 = eps, .f1 = w_offset};
    dispatch(be, &o);
}

/* The fused add + norm as the two ops in sequence (the same arithmetic). */
static void cpu_add_rms_norm(lmc_backend *be, lmc_tensor *x, const lmc_tensor *r, lmc_tensor *y, const lmc_tensor *w,
                             float eps, float w_offset) {
    cpu_add(be, x, x, r);
    cpu_rms_norm(be, y, x, w, eps, w_offset);
}

static void cpu_layer_norm(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *w,
                           const lmc_tensor *b, float eps) {
    LMC_ASSERT(x->ne[0] == y->ne[0] && lmc_tensor_nrows(x) == lmc_tensor_nrows(y));
    LMC_ASSERT(!w || (lmc_tensor_nelem(w) % x->ne[0] == 0 && lmc_tensor_nelem(w) >= x->ne[0]));
    LMC_ASSERT(!b || (lmc_tensor_nelem(b) % x->ne[0] == 0 && lmc_tensor_nelem(b) >= x->ne[0]));
    op_args o = {.kind = OP_LAYER_NORM, .y = y, .a = x, .w = w, .bias = b, .f0 = eps};
    dispatch(be, &o);
}

static void cpu_rope(lmc_backend *be, lmc_tensor *x, const lmc_tensor *pos, const lmc_rope_op *op) {
    LMC_ASSERT(op->n_rot % 2 == 0 && op->n_rot <= x->ne[0] && lmc_tensor_nelem(pos) == x->ne[2]);
    scratch_reserve(CTX(be), (size_t)op->n_rot);
    op_args o = {.kind = OP_ROPE, .y = x, .pos = pos, .rope = op};
    dispatch(be, &o);
}

static void cpu_kv_store(lmc_backend *be, lmc_tensor *cache, const lmc_tensor *kv, const lmc_tensor *pos,
                         const lmc_tensor *seq) {
    LMC_ASSERT(cache->ne[0] == kv->ne[0] && cache->type == LMC_DTYPE_F32);
    op_args o = {.kind = OP_KV_STORE, .y = cache, .a = kv, .pos = pos, .seq = seq};
    dispatch(be, &o);
}

/* rope_store as the four ops in sequence. */
static void cpu_rope_store(lmc_backend *be, lmc_tensor *q, lmc_tensor *k, const lmc_tensor *v, lmc_tensor *k_cache,
                           lmc_tensor *v_cache, const lmc_tensor *pos, const lmc_tensor *seq, const lmc_rope_op *op) {
    cpu_rope(be, q, pos, op);
    cpu_rope(be, k, pos, op);
    lmc_tensor kr = lmc_tensor_reshape(k, k->ne[0] * k->ne[1], k->ne[2], 1, 1);
    cpu_kv_store(be, k_cache, &kr, pos, seq);
    cpu_kv_store(be, v_cache, v, pos, seq);
}

static void cpu_attention(lmc_backend *be, lmc_tensor *out, const lmc_tensor *q, const lmc_tensor *k_cache,
                          const lmc_tensor *v_cache, const lmc_tensor *pos, const lmc_tensor *seq,
                          const lmc_attn_op *op) {
    LMC_ASSERT(op->n_kv_head > 0 && op->n_head % op->n_kv_head == 0);
    LMC_ASSERT(q->ne[0] * q->ne[1] * q->ne[2] * q->ne[3] ==
               (int64_t)op->head_dim * op->n_head * lmc_tensor_nelem(pos));
    LMC_ASSERT(k_cache->ne[0] == (int64_t)op->head_dim * op->n_kv_head);
    LMC_ASSERT(!op->sinks || (op->sinks->type == LMC_DTYPE_F32 && lmc_tensor_nelem(op->sinks) == op->n_head));
    scratch_reserve(CTX(be), (size_t)k_cache->ne[1] * (size_t)(op->n_head / op->n_kv_head)); /* [group][n_ctx] */
    lmc_tensor qv = lmc_tensor_reshape(q, (int64_t)op->head_dim * op->n_head, lmc_tensor_nelem(pos), 1, 1);
    op_args o = {.kind = OP_ATTENTION, .y = out, .a = &qv, .k = k_cache, .v = v_cache, .pos = pos, .seq = seq,
                 .attn = op};
    dispatch(be, &o);
}

static void cpu_act_mul(lmc_backend *be, lmc_tensor *y, const lmc_tensor *gate, const lmc_tensor *up, lmc_act act) {
    LMC_ASSERT(lmc_tensor_nelem(gate) == lmc_tensor_nelem(y) && lmc_tensor_nelem(up) == lmc_tensor_nelem(y));
    op_args o = {.kind = OP_ACT_MUL, .y = y, .a = gate, .b = up, .act = act};
    dispatch(be, &o);
}

static void cpu_act(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, lmc_act act) {
    op_args o = {.kind = OP_ACT, .y = y, .a = x, .act = act};
    dispatch(be, &o);
}

static void cpu_softcap(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float cap) {
    op_args o = {.kind = OP_SOFTCAP, .y = y, .a = x, .f0 = cap};
    dispatch(be, &o);
}

/* ------------------------------------------------------ mixture of experts */

static void cpu_moe_route(lmc_backend *be, lmc_tensor *ids, lmc_tensor *weights, const lmc_tensor *logits,
                          const lmc_tensor *sel_bias, const lmc_moe_route_op *op) {
    const int64_t n = lmc_tensor_nrows(logits);
    LMC_ASSERT(logits->type == LMC_DTYPE_F32 && logits->ne[0] == op->n_expert && is_contig(logits));
    LMC_ASSERT(ids->type == LMC_DTYPE_I32 && weights->type == LMC_DTYPE_F32);
    LMC_ASSERT(op->k >= 1 && op->k <= op->n_expert && ids->ne[0] == op->k && weights->ne[0] == op->k);
    LMC_ASSERT(lmc_tensor_nrows(ids) == n && lmc_tensor_nrows(weights) == n);
    LMC_ASSERT(op->score != LMC_MOE_SPARSEMIXER || op->k == 2);
    LMC_ASSERT(op->n_group <= 1 || (op->n_group <= 256 && op->n_expert % op->n_group == 0 &&
                                    op->topk_group >= 1 && op->topk_group <= op->n_group));
    LMC_ASSERT(!sel_bias || (sel_bias->type == LMC_DTYPE_F32 && lmc_tensor_nelem(sel_bias) == op->n_expert));
    LMC_ASSERT(!op->expert_scale || (op->expert_scale->type == LMC_DTYPE_F32 &&
                                     lmc_tensor_nelem(op->expert_scale) == op->n_expert));
    scratch_reserve(CTX(be), (size_t)op->n_expert * 3);
    op_args o = {.kind = OP_MOE_ROUTE, .y = ids, .y2 = weights, .a = logits, .bias = sel_bias, .moe = op};
    dispatch(be, &o);
}

static void cpu_moe_sum(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const lmc_tensor *weights,
                        const lmc_tensor *shared, const lmc_tensor *shared_gate) {
    const int64_t D = y->ne[0], n = lmc_tensor_nrows(y), k = weights->ne[0];
    LMC_ASSERT(y->type == LMC_DTYPE_F32 && x->type == LMC_DTYPE_F32 && weights->type == LMC_DTYPE_F32);
    LMC_ASSERT(x->ne[0] == D && lmc_tensor_nrows(x) == k * n && lmc_tensor_nrows(weights) == n);
    LMC_ASSERT(!shared || (shared->ne[0] == D && lmc_tensor_nrows(shared) == n));
    LMC_ASSERT(!shared_gate || lmc_tensor_nelem(shared_gate) == n);
    op_args o = {.kind = OP_MOE_SUM, .y = y, .a = x, .b = weights, .k = shared, .v = shared_gate};
    dispatch(be, &o);
}

/* matmul_id: the slots of each selected expert gathered into one contiguous block. */
typedef struct mmid_job {
    cpu_ctx *c;
    const lmc_tensor *experts;
    int n_used;
    const int32_t *used;     /* [n_used] expert ids */
    const int64_t *start;    /* [n_used + 1] first slot of each expert's block */
    const int64_t *unit0;    /* [n_used + 1] first work unit of each expert */
    void *const *xp;         /* [n_used] prepared activations (NULL: none) */
    const float *xg;         /* [in, S] inputs by block */
    float *yg;               /* [out, S] outputs by block */
    int64_t in, out;
} mmid_job;

static void mmid_worker(void *arg, int ith, int nth) {
    mmid_job *j = arg;
    long u0, u1;
    lmc_split((long)j->unit0[j->n_used], ith, nth, &u0, &u1);
    int e = 0;
    for (long u = u0; u < u1;) {
        while (j->unit0[e + 1] <= u) e++;
        const int64_t cnt = j->start[e + 1] - j->start[e], grp = lmc_cpu_matmul_grain(&j->experts[j->used[e]], cnt);
        long ue = u1 < j->unit0[e + 1] ? u1 : (long)j->unit0[e + 1]; /* this thread's units of expert e */
        int64_t o0 = (u - j->unit0[e]) * grp, o1 = (ue - j->unit0[e]) * grp;
        if (o1 > j->out) o1 = j->out;
        const lmc_tensor *w = &j->experts[j->used[e]];
        float *y = j->yg + (size_t)j->start[e] * j->out;
        const float *x = j->xg + (size_t)j->start[e] * j->in;
        if (j->c->reference) lmc_cpu_matmul_rows_ref(y, w, x, cnt, o0, o1);
        else lmc_cpu_matmul_rows(y, w, x, j->xp[e], cnt, o0, o1, j->c->scratch[ith]);
        u = ue;
    }
}

static void cpu_matmul_id(lmc_backend *be, lmc_tensor *y, const lmc_tensor *experts, int n_experts,
                          const lmc_tensor *x, const lmc_tensor *ids) {
    cpu_ctx *c = CTX(be);
    const int64_t k = ids->ne[0], n = lmc_tensor_nrows(ids), S = k * n;
    const int64_t in = experts[0].ne[0], out = experts[0].ne[1];
    LMC_ASSERT(n_experts >= 1 && ids->type == LMC_DTYPE_I32 && is_contig(ids));
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && y->type == LMC_DTYPE_F32 && is_contig(x) && is_contig(y));
    LMC_ASSERT(x->ne[0] == in && (lmc_tensor_nrows(x) == n || lmc_tensor_nrows(x) == S));
    LMC_ASSERT(y->ne[0] == out && lmc_tensor_nrows(y) == S);
    const int per_slot = lmc_tensor_nrows(x) == S;
    const int32_t *id = ids->data;
    for (int64_t s = 0; s < S; s++) LMC_ASSERT(id[s] >= 0 && id[s] < n_experts);
    /* plan: counts per expert, then one buffer holding every table and block */
    size_t need = align64((size_t)(n_experts + 1) * sizeof(int64_t)) * 4 + align64((size_t)n_experts * sizeof(int32_t)) +
                  align64((size_t)n_experts * sizeof(void *)) + align64((size_t)S * sizeof(int64_t)) +
                  align64((size_t)S * (size_t)in * 4) + align64((size_t)S * (size_t)out * 4);
    if (need > c->moe_bytes) {
        void *p = realloc(c->moe, need);
        LMC_ASSERT(p != NULL);
        c->moe = p;
        c->moe_bytes = need;
    }
    char *at = c->moe;
    int64_t *count = (int64_t *)(void *)at; at += align64((size_t)(n_experts + 1) * sizeof(int64_t));
    int64_t *start = (int64_t *)(void *)at; at += align64((size_t)(n_experts + 1) * sizeof(int64_t));
    int64_t *unit0 = (int64_t *)(void *)at; at += align64((size_t)(n_experts + 1) * sizeof(int64_t));
    int64_t *fill = (int64_t *)(void *)at; at += align64((size_t)(n_experts + 1) * sizeof(int64_t));
    int32_t *used = (int32_t *)(void *)at; at += align64((size_t)n_experts * sizeof(int32_t));
    void **xp = (void **)(void *)at; at += align64((size_t)n_experts * sizeof(void *));
    int64_t *where = (int64_t *)(void *)at; at += align64((size_t)S * sizeof(int64_t)); /* slot → block column */
    float *xg = (float *)(void *)at; at += align64((size_t)S * (size_t)in * 4);
    float *yg = (float *)(void *)at;
    memset(count, 0, (size_t)n_experts * sizeof *count);
    for (int64_t s = 0; s < S; s++) count[id[s]]++;
    int n_used = 0;
    int64_t pos = 0, units = 0;
    for (int e = 0; e < n_experts; e++) {
        if (!count[e]) continue;
        LMC_ASSERT(experts[e].ne[0] == in && experts[e].ne[1] == out && experts[e].data);
        used[n_used] = e;
        start[n_used] = pos;
        unit0[n_used] = units;
        fill[e] = pos;
        pos += count[e];
        const int64_t grp = lmc_cpu_matmul_grain(&experts[e], count[e]);
        units += (out + grp - 1) / grp;
        n_used++;
    }
    start[n_used] = pos;
    unit0[n_used] = units;
    for (int64_t s = 0; s < S; s++) {
        int64_t col = fill[id[s]]++;
        where[s] = col;
        const float *src = (const float *)x->data + (size_t)(per_slot ? s : s / k) * (size_t)in;
        memcpy(xg + (size_t)col * in, src, (size_t)in * 4);
    }
    /* activations prepared per expert block, all in one buffer */
    scratch_reserve(c, (size_t)in * LMC_CPU_GEMM_BLOCK);
    size_t act_need = 0;
    for (int u = 0; u < n_used && !c->reference; u++)
        act_need += align64(lmc_cpu_act_bytes(&experts[used[u]], start[u + 1] - start[u]));
    act_reserve(c, act_need);
    size_t act_at = 0;
    for (int u = 0; u < n_used; u++) {
        const int64_t cnt = start[u + 1] - start[u];
        size_t nb = c->reference ? 0 : lmc_cpu_act_bytes(&experts[used[u]], cnt);
        xp[u] = NULL;
        if (nb) {
            xp[u] = (char *)c->act + act_at;
            act_prepare(c, &experts[used[u]], xg + (size_t)start[u] * in, cnt, xp[u]);
            act_at += align64(nb);
        }
    }
    mmid_job j = {.c = c, .experts = experts, .n_used = n_used, .used = used, .start = start, .unit0 = unit0,
                  .xp = xp, .xg = xg, .yg = yg, .in = in, .out = out};
    if (units < 2) mmid_worker(&j, 0, 1);
    else lmc_pool_run(c->pool, mmid_worker, &j);
    for (int64_t s = 0; s < S; s++)
        memcpy((float *)y->data + (size_t)s * out, yg + (size_t)where[s] * out, (size_t)out * 4);
}

/* Per-expert bias and the clamped interleaved GLU: elementwise, one thread, one pass. */
static void cpu_add_bias_id(lmc_backend *be, lmc_tensor *y, const lmc_tensor *b, const lmc_tensor *ids) {
    (void)be;
    const int64_t D = y->ne[0], S = lmc_tensor_nelem(ids), E = b->ne[1];
    LMC_ASSERT(y->type == LMC_DTYPE_F32 && b->type == LMC_DTYPE_F32 && ids->type == LMC_DTYPE_I32);
    LMC_ASSERT(is_contig(y) && is_contig(b) && is_contig(ids) && b->ne[0] == D && lmc_tensor_nrows(y) == S);
    const int32_t *id = ids->data;
    for (int64_t s = 0; s < S; s++) {
        LMC_ASSERT(id[s] >= 0 && id[s] < E);
        float *row = (float *)y->data + (size_t)s * D;
        const float *bias = (const float *)b->data + (size_t)id[s] * D;
        for (int64_t i = 0; i < D; i++) row[i] += bias[i];
    }
}

static void cpu_glu_clamp(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, float alpha, float limit) {
    (void)be;
    const int64_t D = y->ne[0], n = lmc_tensor_nrows(y);
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && y->type == LMC_DTYPE_F32 && is_contig(x) && is_contig(y));
    LMC_ASSERT(x->ne[0] == 2 * D && lmc_tensor_nrows(x) == n && x->data != y->data);
    for (int64_t t = 0; t < n; t++) {
        const float *a = (const float *)x->data + (size_t)t * 2 * D;
        float *o = (float *)y->data + (size_t)t * D;
        for (int64_t i = 0; i < D; i++) {
            const float g = fminf(a[2 * i], limit), u = fminf(fmaxf(a[2 * i + 1], -limit), limit);
            o[i] = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
        }
    }
}

static void cpu_glu_clamp_split(lmc_backend *be, lmc_tensor *y, const lmc_tensor *gate, const lmc_tensor *up, float alpha,
                                float limit) {
    (void)be;
    const int64_t n = lmc_tensor_nelem(y);
    LMC_ASSERT(gate->type == LMC_DTYPE_F32 && up->type == LMC_DTYPE_F32 && y->type == LMC_DTYPE_F32);
    LMC_ASSERT(is_contig(gate) && is_contig(up) && is_contig(y) && lmc_tensor_nelem(gate) == n && lmc_tensor_nelem(up) == n);
    const float *a = gate->data, *b = up->data;
    float *o = y->data;
    for (int64_t i = 0; i < n; i++) {
        const float g = fminf(a[i], limit), u = fminf(fmaxf(b[i], -limit), limit);
        o[i] = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
    }
}

/* Elementwise and cheap next to the matmuls around it: one thread, one pass. */
static void cpu_xielu(lmc_backend *be, lmc_tensor *y, const lmc_tensor *x, const float p[4]) {
    (void)be;
    LMC_ASSERT(is_contig(x) && is_contig(y) && lmc_tensor_nelem(x) == lmc_tensor_nelem(y));
    const float *a = x->data;
    float *o = y->data;
    for (int64_t i = 0, n = lmc_tensor_nelem(y); i < n; i++) {
        const float v = a[i];
        o[i] = v > 0 ? p[0] * v * v + p[2] * v : (expm1f(fminf(v, p[3])) - v) * p[1] + p[2] * v;
    }
}

/* ------------------------------------------------------------------ sampling reductions */

/* Per row: lmc_argmax exactly (first index of the largest; NaN never beats anything). */
static void cpu_argmax(lmc_backend *be, lmc_tensor *ids, const lmc_tensor *x) {
    (void)be;
    const int64_t V = x->ne[0], n = lmc_tensor_nrows(x);
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && is_contig(x) && V >= 1);
    LMC_ASSERT(ids->type == LMC_DTYPE_I32 && lmc_tensor_nelem(ids) == n);
    for (int64_t t = 0; t < n; t++) {
        const float *r = (const float *)x->data + t * V;
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (r[i] > r[best]) best = i;
        ((int32_t *)ids->data)[t] = (int32_t)best;
    }
}

/* a before b in the sampler's candidate order: larger value, then lower index */
static int topk_before(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

static void cpu_topk(lmc_backend *be, lmc_tensor *ids, lmc_tensor *vals, lmc_tensor *stats, const lmc_tensor *x, int k,
                     float scale) {
    (void)be;
    const int64_t V = x->ne[0], n = lmc_tensor_nrows(x);
    LMC_ASSERT(x->type == LMC_DTYPE_F32 && is_contig(x) && V >= 1 && k >= 1 && k <= 256);
    LMC_ASSERT(ids->type == LMC_DTYPE_I32 && ids->ne[0] == k && lmc_tensor_nrows(ids) == n);
    LMC_ASSERT(vals->type == LMC_DTYPE_F32 && vals->ne[0] == k && lmc_tensor_nrows(vals) == n);
    LMC_ASSERT(stats->type == LMC_DTYPE_F32 && stats->ne[0] == 4 && lmc_tensor_nrows(stats) == n);
    for (int64_t t = 0; t < n; t++) {
        const float *r = (const float *)x->data + t * V;
        int32_t *id = (int32_t *)ids->data + t * k;
        float *v = (float *)vals->data + t * k;
        int have = 0;
        float m = -INFINITY;
        for (int64_t i = 0; i < V; i++) {
            const float w = r[i] * scale;
            if (w != w) continue;
            if (w > m) m = w;
            if (have == k && !topk_before(w, (int32_t)i, v[k - 1], id[k - 1])) continue;
            int j = have < k ? have++ : k - 1; /* insertion into the sorted list */
            while (j > 0 && topk_before(w, (int32_t)i, v[j - 1], id[j - 1])) {
                v[j] = v[j - 1];
                id[j] = id[j - 1];
                j--;
            }
            v[j] = w;
            id[j] = (int32_t)i;
        }
        for (int j = have; j < k; j++) {
            v[j] = -INFINITY;
            id[j] = -1;
        }
        double s = 0;
        for (int64_t i = 0; i < V; i++) s += exp((double)(r[i] * scale) - m);
        if (!isfinite(m)) s = NAN;
        float *st = (float *)stats->data + t * 4;
        st[0] = m;
        st[1] = (float)s;
        st[2] = (float)(s - (double)st[1]);
        st[3] = 0;
    }
}

static const lmc_backend_i cpu_iface = {
    .name = "cpu",
    .free = cpu_free,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .bind_weight = cpu_bind_weight,
    .unbind_weight = cpu_unbind_weight,
    .set = cpu_set,
    .get = cpu_get,
    .sync = cpu_sync,
    .get_rows = cpu_get_rows,
    .matmul = cpu_matmul,
    .matmul_n = cpu_matmul_n,
    .add_bias = cpu_add_bias,
    .add = cpu_add,
    .scale = cpu_scale,
    .rms_norm = cpu_rms_norm,
    .add_rms_norm = cpu_add_rms_norm,
    .layer_norm = cpu_layer_norm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .rope_store = cpu_rope_store,
    .attention = cpu_attention,
    .act_mul = cpu_act_mul,
    .act = cpu_act,
    .softcap = cpu_softcap,
    .moe_route = cpu_moe_route,
    .matmul_id = cpu_matmul_id,
    .moe_sum = cpu_moe_sum,
    .add_bias_id = cpu_add_bias_id,
    .glu_clamp = cpu_glu_clamp,
    .glu_clamp_split = cpu_glu_clamp_split,
    .xielu = cpu_xielu,
    .argmax = cpu_argmax,
    .topk = cpu_topk,
};

int lmc_backend_cpu_set_bf16_compute(int on) { return lmc_cpu_simd_set_bf16_act(on); }
int lmc_backend_cpu_bf16_compute(void) { return lmc_cpu_simd_bf16_act(); }

lmc_status lmc_backend_cpu_init(lmc_backend **out, int n_threads, int reference) {
    /* the pool splits rows over threads itself: each sgemm call runs on one */
    openblas_set_num_threads(1);
    lmc_backend *be = calloc(1, sizeof *be);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) { free(be); free(c); return lmc_fail(LMC_ERR_NOMEM, "cpu backend"); }
    if (reference) n_threads = 1;
    lmc_status st = lmc_pool_init(&c->pool, n_threads);
    if (st < 0) { free(be); free(c); return st; }
    c->n_threads = lmc_pool_size(c->pool);
    c->reference = reference;
    c->scratch = calloc((size_t)c->n_threads, sizeof *c->scratch);
    if (!c->scratch) { lmc_pool_free(c->pool); free(be); free(c); return lmc_fail(LMC_ERR_NOMEM, "cpu backend"); }
    be->i = &cpu_iface;
    be->ctx = c;
    *out = be;
    return LMC_OK;
}
