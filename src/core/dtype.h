/* dtype.h — element types of tensors and their scalar conversions.
 *
 * Storage types come from checkpoints (safetensors, GGUF); compute is f32.
 * Conversions are exact: bf16→f32 is a shift, f16→f32 handles subnormals,
 * f32→bf16/f16 round to nearest even (as torch does).
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
    LMC_DTYPE_COUNT
} lmc_dtype;

size_t lmc_dtype_size(lmc_dtype t);          /* bytes per element */
const char *lmc_dtype_name(lmc_dtype t);     /* "F32", "BF16", ... (safetensors spelling) */
/* Parse a safetensors dtype string; returns 0 and sets *out, or -1 if unknown. */
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
