/* dtype.c — dtype names, sizes and f16 conversions. */
#include "dtype.h"
#include "status.h"

static const struct { const char *name; size_t size; int is_float; } info[LMC_DTYPE_COUNT] = {
    [LMC_DTYPE_F32] = {"F32", 4, 1},  [LMC_DTYPE_F16] = {"F16", 2, 1},
    [LMC_DTYPE_BF16] = {"BF16", 2, 1}, [LMC_DTYPE_F64] = {"F64", 8, 1},
    [LMC_DTYPE_I64] = {"I64", 8, 0},  [LMC_DTYPE_I32] = {"I32", 4, 0},
    [LMC_DTYPE_I16] = {"I16", 2, 0},  [LMC_DTYPE_I8] = {"I8", 1, 0},
    [LMC_DTYPE_U8] = {"U8", 1, 0},    [LMC_DTYPE_BOOL] = {"BOOL", 1, 0},
    [LMC_DTYPE_U32] = {"U32", 4, 0},
};

/* block types: elements and bytes per block (ggml-common.h sizes; MLX: 32 codes of `bits` bits) */
static const struct { const char *name; int64_t elems; size_t bytes; int mlx_bits; } qinfo[LMC_DTYPE_END - LMC_DTYPE_QFIRST] = {
    [LMC_DTYPE_Q8_0 - LMC_DTYPE_QFIRST] = {"Q8_0", 32, 34, 0},
    [LMC_DTYPE_Q4_0 - LMC_DTYPE_QFIRST] = {"Q4_0", 32, 18, 0},
    [LMC_DTYPE_Q4_1 - LMC_DTYPE_QFIRST] = {"Q4_1", 32, 20, 0},
    [LMC_DTYPE_Q5_0 - LMC_DTYPE_QFIRST] = {"Q5_0", 32, 22, 0},
    [LMC_DTYPE_Q5_1 - LMC_DTYPE_QFIRST] = {"Q5_1", 32, 24, 0},
    [LMC_DTYPE_Q2_K - LMC_DTYPE_QFIRST] = {"Q2_K", 256, 84, 0},
    [LMC_DTYPE_Q3_K - LMC_DTYPE_QFIRST] = {"Q3_K", 256, 110, 0},
    [LMC_DTYPE_Q4_K - LMC_DTYPE_QFIRST] = {"Q4_K", 256, 144, 0},
    [LMC_DTYPE_Q5_K - LMC_DTYPE_QFIRST] = {"Q5_K", 256, 176, 0},
    [LMC_DTYPE_Q6_K - LMC_DTYPE_QFIRST] = {"Q6_K", 256, 210, 0},
    [LMC_DTYPE_MLX2 - LMC_DTYPE_QFIRST] = {"MLX2", 32, 8, 2},
    [LMC_DTYPE_MLX3 - LMC_DTYPE_QFIRST] = {"MLX3", 32, 12, 3},
    [LMC_DTYPE_MLX4 - LMC_DTYPE_QFIRST] = {"MLX4", 32, 16, 4},
    [LMC_DTYPE_MLX5 - LMC_DTYPE_QFIRST] = {"MLX5", 32, 20, 5},
    [LMC_DTYPE_MLX6 - LMC_DTYPE_QFIRST] = {"MLX6", 32, 24, 6},
    [LMC_DTYPE_MLX8 - LMC_DTYPE_QFIRST] = {"MLX8", 32, 32, 8},
    [LMC_DTYPE_MXFP4 - LMC_DTYPE_QFIRST] = {"MXFP4", 32, 17, 0},
    [LMC_DTYPE_MXFP4_MLX - LMC_DTYPE_QFIRST] = {"MXFP4_MLX", 32, 16, 0},
    [LMC_DTYPE_Q4_0R - LMC_DTYPE_QFIRST] = {"Q4_0R", 32, 18, 0},
    [LMC_DTYPE_Q8_0R - LMC_DTYPE_QFIRST] = {"Q8_0R", 32, 34, 0},
    [LMC_DTYPE_BF16P - LMC_DTYPE_QFIRST] = {"BF16P", 32, 64, 0},
};

int lmc_dtype_is_quant(lmc_dtype t) { return t >= LMC_DTYPE_QFIRST && t < LMC_DTYPE_END; }
int lmc_dtype_mlx_bits(lmc_dtype t) { return lmc_dtype_is_quant(t) ? qinfo[t - LMC_DTYPE_QFIRST].mlx_bits : 0; }
int lmc_dtype_is_mlx(lmc_dtype t) { return lmc_dtype_mlx_bits(t) != 0; }
int lmc_dtype_has_aux(lmc_dtype t) { return lmc_dtype_is_mlx(t) || t == LMC_DTYPE_MXFP4_MLX; }

int64_t lmc_dtype_block_elems(lmc_dtype t) {
    if (lmc_dtype_is_quant(t)) return qinfo[t - LMC_DTYPE_QFIRST].elems;
    LMC_ASSERT(t < LMC_DTYPE_COUNT);
    return 1;
}

size_t lmc_dtype_block_bytes(lmc_dtype t) {
    if (lmc_dtype_is_quant(t)) return qinfo[t - LMC_DTYPE_QFIRST].bytes;
    LMC_ASSERT(t < LMC_DTYPE_COUNT);
    return info[t].size;
}

size_t lmc_dtype_row_bytes(lmc_dtype t, int64_t n) {
    int64_t be = lmc_dtype_block_elems(t);
    if (n < 0 || n % be) return 0;
    return (size_t)(n / be) * lmc_dtype_block_bytes(t);
}

size_t lmc_dtype_size(lmc_dtype t) { LMC_ASSERT(t < LMC_DTYPE_COUNT); return info[t].size; }
const char *lmc_dtype_name(lmc_dtype t) {
    if (lmc_dtype_is_quant(t)) return qinfo[t - LMC_DTYPE_QFIRST].name;
    return t < LMC_DTYPE_COUNT ? info[t].name : "?";
}
int lmc_dtype_is_float(lmc_dtype t) { return t < LMC_DTYPE_COUNT && info[t].is_float; }

int lmc_dtype_from_name(const char *name, lmc_dtype *out) {
    for (int t = 0; t < LMC_DTYPE_COUNT; t++) {
        if (strcmp(name, info[t].name) == 0) { *out = (lmc_dtype)t; return 0; }
    }
    return -1;
}

float lmc_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) { man <<= 1; exp--; }
            man &= 0x3ffu;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t lmc_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);        /* NaN */
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);       /* overflow → inf */
    if (abs < 0x38800000u) {                                          /* subnormal or zero */
        if (abs < 0x33000000u) return (uint16_t)sign;                 /* < half the smallest subnormal */
        uint32_t e = abs >> 23, m = (abs & 0x7fffffu) | 0x800000u;
        /* value = m * 2^(e-150); in units of the f16 subnormal step 2^-24 that
         * is m >> (126 - e), rounded to nearest even. */
        uint32_t sh = 126 - e;
        uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = abs - 0x38000000u;                                    /* rebias exponent */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

void lmc_to_f32(lmc_dtype t, const void *src, float *dst, size_t n) {
    switch (t) {
    case LMC_DTYPE_F32: memcpy(dst, src, n * 4); break;
    case LMC_DTYPE_BF16: { const uint16_t *s = src; for (size_t i = 0; i < n; i++) dst[i] = lmc_bf16_to_f32(s[i]); } break;
    case LMC_DTYPE_F16: { const uint16_t *s = src; for (size_t i = 0; i < n; i++) dst[i] = lmc_f16_to_f32(s[i]); } break;
    case LMC_DTYPE_F64: { const double *s = src; for (size_t i = 0; i < n; i++) dst[i] = (float)s[i]; } break;
    default: LMC_ASSERT(!"lmc_to_f32 on a non-float dtype");
    }
}
