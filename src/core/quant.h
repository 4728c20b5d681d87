/* quant.h — block-quantized weight formats: layouts, exact dequantization, quantization.
 *
 * GGUF blocks (Q8_0 Q4_0 Q4_1 Q5_0 Q5_1: 32 elements; Q2_K..Q6_K: 256-element
 * super-blocks) are laid out byte for byte as ggml's block structs, and
 * dequantize with ggml's float operations in ggml's order (f16 scales widened
 * exactly; products and sums in f32, never fused), so results are bit-exact.
 * MLX affine rows are a little-endian bit stream of `bits`-bit codes q (for
 * bits 2/4/8 this is mlx's uint32 packing; 3/5/6 bits use mlx's 3/5/3-byte
 * packs, the same stream); w = scale·q + bias per group, in f32.
 *
 *   lmc_quant_mlx aux = {.group_size = 64, .scales = s, .biases = b};
 *   lmc_tensor w = lmc_tensor_make(LMC_DTYPE_MLX4, in, out, 1, 1); w.data = packed; w.aux = &aux;
 *   lmc_tensor_row_to_f32(&w, row, dst);          // any dtype, one row of `in` floats
 *
 * MXFP4 (both layouts, core/dtype.h): w = E2M1(code) · 2^(e - 127) per 32-element
 * block; as ggml computes it, kvalues (E2M1 × 2, small integers) times the half scale
 * 2^(e - 128), the same f32 value (products by powers of two are exact). ggml's block
 * (MXFP4) takes e = 255 as 2^127 (its E8M0 half-scale helper); mlx (MXFP4_MLX) as inf.
 *   lmc_quant_mlx aux = {.group_size = 32, .scales = u8 [in/32, out]};   // biases unused
 *   lmc_tensor w = lmc_tensor_make(LMC_DTYPE_MXFP4_MLX, in, out, 1, 1); w.aux = &aux;
 *
 * Q4_0R (core/dtype.h) holds a Q4_0 row's codes and scales regrouped for the CPU's VNNI kernels:
 * its nb blocks in chunks of 16 (the last chunk holds the rest, w = nb % 16 blocks); a chunk of w
 * blocks is 4 strips of 4w bytes, and byte 4l + i of strip p holds element 8p + i of the chunk's
 * block l in its low nibble, element 8p + 4 + i in its high one (Q4_0's codes q, w = (q - 8)·d).
 * The nb f16 scales d follow the 16·nb code bytes in block order: 18 bytes a block, as Q4_0.
 * Q8_0R likewise for Q8_0: a chunk of w blocks is 8 strips of 4w bytes, byte 4l + i of strip m
 * holds element 4m + i of block l as q + 128 (unsigned; w = q·d), and the nb f16 scales follow
 * the 32·nb code bytes: 34 bytes a block. Rows of either are dequantized whole (n = the row),
 * never a block at a time.
 *
 * BF16P holds a BF16 matrix of out rows (a multiple of 16) and in inputs (even) packed by 16 rows,
 * for vdpbf16ps with activation pairs broadcast: rows 16b..16b+15 are one run of in/2 pieces of 64
 * bytes, and piece j of run b holds, as bf16 pair r (r < 16), inputs 2j and 2j + 1 of row 16b + r.
 * Values are BF16's; a row of it is gathered (lmc_tensor_row_to_f32), never addressed by nb[1].
 *
 * Quantizers (lmc_quantize_row) exist for the types lmc writes: Q8_0, Q4_0
 * (ggml's reference rounding), Q4_K, Q6_K (lmc's own scale search; any valid
 * block is readable by ggml), MLX affine of every width (mlx's rounding), MXFP4
 * (ggml's quantize_row_mxfp4_ref) and MXFP4_MLX (mlx's mxfp4 quantize: e =
 * round(log2(amax / 6)), nearest E2M1 value, ties to the lower code).
 * Nothing here allocates; the caller owns every buffer.
 */
#ifndef LMC_CORE_QUANT_H
#define LMC_CORE_QUANT_H

#include <math.h>
#include <string.h>

#include "status.h"
#include "tensor.h"

/* aux of an MLX affine weight [in, out] (ne[0] = in): per-group scales and biases;
 * of an MXFP4_MLX weight: group_size 32, U8 E8M0 scales, biases unused (data NULL). */
typedef struct lmc_quant_mlx {
    int group_size;    /* 32, 64 or 128 (in must be a multiple) */
    lmc_tensor scales; /* F32/F16/BF16 [in / group_size, out]; MXFP4_MLX: U8 [in / 32, out] */
    lmc_tensor biases; /* same dtype and shape as scales; MXFP4_MLX: none */
} lmc_quant_mlx;

/* The side data of one MLX row, as the row functions take it (aux argument). */
typedef struct lmc_mlx_row {
    int group_size;
    lmc_dtype scale_type; /* F32, F16 or BF16; U8 for MXFP4_MLX */
    void *scales;         /* [n / group_size] of scale_type (written by lmc_quantize_row) */
    void *biases;         /* NULL for MXFP4_MLX */
} lmc_mlx_row;

/* E2M1 codes as ggml's kvalues_mxfp4: twice the value, small integers. */
static const int8_t lmc_mxfp4_kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* The half scale 2^(e - 128) of an E8M0 exponent, as ggml's GGML_E8M0_TO_FP32_HALF
 * (subnormal for e < 2; e = 255 gives 2^127). */
static inline float lmc_e8m0_half_ggml(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The same for mlx's mxfp4 scales (2^(e - 127) as a bf16, halved): e = 255 is inf. */
static inline float lmc_e8m0_half_mlx(uint8_t e) {
    return e == 255 ? (float)HUGE_VAL : lmc_e8m0_half_ggml(e);
}

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block's 12 packed bytes. */
static inline void lmc_q4k_scale_min(int j, const uint8_t *s, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Element i of an MLX scales/biases row stored as f32, f16 or bf16. */
static inline float lmc_mlx_side_at(lmc_dtype t, const void *p, int64_t i) {
    if (t == LMC_DTYPE_BF16) return lmc_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == LMC_DTYPE_F16) return lmc_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Row `row` of an MLX weight's side data. */
lmc_mlx_row lmc_quant_mlx_row(const lmc_quant_mlx *q, int64_t row);

/* Check an MLX weight (affine or MXFP4_MLX) of type t, shape [in, out], against its aux;
 * LMC_ERR_FORMAT naming the problem. */
lmc_status lmc_quant_mlx_check(lmc_dtype t, int64_t in, int64_t out, const lmc_quant_mlx *q);

/* Dequantize one row of n elements of type t (any float or block type) into f32.
 * aux: NULL, or a const lmc_mlx_row * for MLX types. Errors: n not a multiple of the
 * block / group size, unsupported type, bad aux. */
lmc_status lmc_dequantize_row(lmc_dtype t, const void *src, const void *aux, float *dst, int64_t n);

/* Quantize one row of n f32 values into type t (Q8_0, Q4_0, Q4_K, Q6_K, MLX2..MLX8, MXFP4,
 * MXFP4_MLX). For MLX types aux is an lmc_mlx_row * whose scales/biases (scale_type) receive
 * the groups; for MXFP4_MLX its scales (U8, group 32) receive the exponents. */
lmc_status lmc_quantize_row(lmc_dtype t, const float *src, void *dst, void *aux, int64_t n);

/* Row `row` of a 2-D weight of any float or block dtype as f32 (no checks: hot path). */
void lmc_tensor_row_to_f32(const lmc_tensor *w, int64_t row, float *dst);

/* A Q4_0 / Q8_0 row of n elements (n a multiple of 32) regrouped as Q4_0R / Q8_0R (same values). */
void lmc_q4_0_regroup_row(const void *q4_0, void *q4_0r, int64_t n);
void lmc_q8_0_regroup_row(const void *q8_0, void *q8_0r, int64_t n);

/* Rows 16b..16b+15 of a bf16 matrix of `in` inputs (row r at rows + r·in) as run b of BF16P. */
void lmc_bf16p_pack(const uint16_t *rows, int64_t in, uint16_t *run);

/* The unchecked row kernels behind the functions above (n a multiple of the block). */
void lmc_dequant_row_unchecked(lmc_dtype t, const void *src, const lmc_mlx_row *aux, float *dst, int64_t n);

#endif
