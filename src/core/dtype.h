/* dtype.h — element types of tensors and their scalar conversions.
 *
 * Storage types come from checkpoints (safetensors, GGUF); compute is f32.
 * Conversions are exact: bf16→f32 is a shift, f16→f32 handles subnormals,
 * f32→bf16/f16 round to nearest even (as torch does).
 * Plain element types are [0, LMC_DTYPE_COUNT) (the safetensors dtypes);
 * block-quantized types (GGUF blocks, MLX affine) live in
 * [LMC_DTYPE_QFIRST, LMC_DTYPE_END): a row of n elements takes
 * lmc_dtype_row_bytes(t, n) bytes; their layouts are in core/quant.h.
 */
#ifndef LMC_CORE_DTYPE_H
#define LMC_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum lmc_dtype {
    LMC_DTYPE_F32 = 0,
    LMC_DTYPE_F16,
    LMC_DTYPE_BF16,
    LMC_DTYPE_F64,
    LMC_DTYPE_I64,
    LMC_DTYPE_I32,
    LMC_DTYPE_I16,
    LMC_DTYPE_I8,
    LMC_DTYPE_U8,
    LMC_DTYPE_BOOL,
    LMC_DTYPE_U32,     /* MLX's packed quantized weights are stored as U32 in safetensors */
    LMC_DTYPE_COUNT,   /* number of plain element types (not itself a type) */

    /* GGUF block types, as ggml defines them (32-element blocks, 256-element K super-blocks) */
    LMC_DTYPE_QFIRST = 16,
    LMC_DTYPE_Q8_0 = LMC_DTYPE_QFIRST,
    LMC_DTYPE_Q4_0,
    LMC_DTYPE_Q4_1,
    LMC_DTYPE_Q5_0,
    LMC_DTYPE_Q5_1,
    LMC_DTYPE_Q2_K,
    LMC_DTYPE_Q3_K,
    LMC_DTYPE_Q4_K,
    LMC_DTYPE_Q5_K,
    LMC_DTYPE_Q6_K,
    /* MLX affine: packed little-endian bit stream of `bits`-bit codes; per-group
     * scales/biases live in the tensor's aux (lmc_quant_mlx, core/quant.h) */
    LMC_DTYPE_MLX2,
    LMC_DTYPE_MLX3,
    LMC_DTYPE_MLX4,
    LMC_DTYPE_MLX5,
    LMC_DTYPE_MLX6,
    LMC_DTYPE_MLX8,
    /* MXFP4 (OCP microscaling: 4-bit E2M1 codes, one E8M0 exponent per 32 elements):
     * MXFP4 is ggml's 17-byte block (exponent byte, then 16 bytes of nibbles: low
     * nibbles elements 0..15, high nibbles 16..31); MXFP4_MLX is the layout of mlx's
     * "mxfp4" mode and of Hugging Face `_blocks`/`_scales` pairs: 16 bytes of codes
     * per 32 elements (byte j: element 2j low nibble, 2j+1 high), the exponents in
     * the tensor's aux (lmc_quant_mlx with U8 scales, no biases; core/quant.h) */
    LMC_DTYPE_MXFP4,
    LMC_DTYPE_MXFP4_MLX,
    /* Q4_0 and Q8_0 regrouped: the CPU backend's own layouts of those weights (never in a
     * file; the codes of 16 blocks side by side, then the row's scales: core/quant.h). Their
     * rows are dequantized whole, never block by block. */
    LMC_DTYPE_Q4_0R,
    LMC_DTYPE_Q8_0R,
    /* BF16 weights packed by 16 rows: the CPU backend's own layout of BF16 matrices (never in a
     * file; core/quant.h). A row is not contiguous: lmc_tensor_row_to_f32 gathers it. */
    LMC_DTYPE_BF16P,
    LMC_DTYPE_END
} lmc_dtype;

/* Bytes per element of a plain type (asserts on block types: use lmc_dtype_row_bytes). */
size_t lmc_dtype_size(lmc_dtype t);
/* 1 for valid block-quantized types (GGUF blocks, MLX affine), else 0. */
int lmc_dtype_is_quant(lmc_dtype t);
/* 1 for the MLX affine types; lmc_dtype_mlx_bits gives their bits (0 for other types). */
int lmc_dtype_is_mlx(lmc_dtype t);
int lmc_dtype_mlx_bits(lmc_dtype t);
/* 1 for the types whose scales live in the tensor's aux (lmc_quant_mlx): MLX affine and MXFP4_MLX. */
int lmc_dtype_has_aux(lmc_dtype t);
/* Elements per block (1 for plain types) and bytes per block (the element size for plain types). */
int64_t lmc_dtype_block_elems(lmc_dtype t);
size_t lmc_dtype_block_bytes(lmc_dtype t);
/* Bytes of a row of n elements; 0 when n is not a multiple of the block size. */
size_t lmc_dtype_row_bytes(lmc_dtype t, int64_t n);
const char *lmc_dtype_name(lmc_dtype t);     /* "F32", "BF16", ... (safetensors spelling); "Q4_K", "MLX4", ... */
/* Parse a safetensors dtype string (plain types only); returns 0 and sets *out, or -1 if unknown. */
int lmc_dtype_from_name(const char *name, lmc_dtype *out);
int lmc_dtype_is_float(lmc_dtype t);

static inline float lmc_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t lmc_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float lmc_f16_to_f32(uint16_t h);
uint16_t lmc_f32_to_f16(float f);

/* Convert n elements of type t at src into f32 at dst (float types only). */
void lmc_to_f32(lmc_dtype t, const void *src, float *dst, size_t n);

#endif
