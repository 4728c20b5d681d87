/* quantize.h — write an MLX-affine quantized copy of a checkpoint (`lmc quantize`).
 *
 * Every 2-D weight whose rows are a multiple of the group size (the Linear and
 * Embedding weights of the dense architectures) becomes `<name>` U32 codes,
 * `<base>.scales` and `<base>.biases` in the source dtype, rounded as mlx's
 * quantize does (core/quant.h); norms and other tensors are copied. config.json
 * gains mlx-lm's "quantization" / "quantization_config" block; tokenizer and
 * generation files are copied. mlx-lm and lmc read the result.
 */
#ifndef LMC_MODEL_QUANTIZE_H
#define LMC_MODEL_QUANTIZE_H

#include "core/status.h"

typedef struct lmc_quantize_stats {
    int n_quantized, n_copied;
    size_t bytes_in, bytes_out;
} lmc_quantize_stats;

/* progress (may be NULL) is called after each tensor with (done, total, ud). */
lmc_status lmc_quantize_mlx(const char *in_dir, const char *out_dir, int bits, int group_size, lmc_quantize_stats *stats,
                            void (*progress)(int done, int total, void *ud), void *ud);

/* The same in mlx's "mxfp4" mode: `<name>` U32 E2M1 codes and `<base>.scales` U8 E8M0 exponents
 * per 32 elements (no biases), rounded as mlx's mxfp4 quantize does; config "mode": "mxfp4". */
lmc_status lmc_quantize_mlx_mxfp4(const char *in_dir, const char *out_dir, lmc_quantize_stats *stats,
                                  void (*progress)(int done, int total, void *ud), void *ud);

#endif
