/* weights.h — a checkpoint's tensors and config, whatever the container.
 *
 * A Hugging Face directory (config.json + safetensors, sharded or not) or a
 * GGUF file seen under Hugging Face tensor names (llama q/k rows unpermuted,
 * gemma norms unshifted; io/gguf_view.h) with a config synthesized from its
 * metadata. The model loader binds from here and never knows which it was.
 * lmc_weights owns the mappings; weights point into them.
 */
#ifndef LMC_MODEL_WEIGHTS_H
#define LMC_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config.h"
#include "core/dtype.h"
#include "core/quant.h"

typedef struct lmc_weight {
    const char *name;      /* Hugging Face name */
    lmc_dtype dtype;
    int n_dims;
    int64_t shape[8];      /* torch order: outermost first */
    const void *data;
    size_t nbytes;
} lmc_weight;

typedef struct lmc_weights lmc_weights;

/* path: a model directory, or a .gguf file. */
lmc_status lmc_weights_open(const char *path, lmc_weights **out);
void lmc_weights_close(lmc_weights *w);
int lmc_weights_count(const lmc_weights *w);
const lmc_weight *lmc_weights_at(const lmc_weights *w, int i);
const lmc_weight *lmc_weights_find(const lmc_weights *w, const char *name);
int lmc_weights_index_of(const lmc_weights *w, const lmc_weight *t);
size_t lmc_weights_total_bytes(const lmc_weights *w);
int64_t lmc_weight_nelem(const lmc_weight *t);
const char *lmc_weights_format(const lmc_weights *w); /* "safetensors" or "gguf" */
int lmc_weights_n_files(const lmc_weights *w);

/* Bind an MXFP4 pair of Hugging Face's layout (gpt-oss `quant_method: mxfp4`) as an lmc weight:
 *   blocks = `<name>_blocks` U8 [..., rows, in/32, 16]  (byte j of a block: element 2j low
 *            nibble, 2j + 1 high), scales = `<name>_scales` U8 [..., rows, in/32] (E8M0).
 * Leading dims (experts) are flattened: `expert` picks one (0 for a plain [rows, in/32, 16]).
 * Rows [row0, row0 + n_rows) of it become *w = MXFP4_MLX [in, n_rows] on be (bind_weight, no
 * copy on the cpu backend), its exponents *aux (group 32, U8 scales [in/32, n_rows], bound on
 * be too). aux is the caller's and must outlive w; unbind both w and aux->scales to release.
 * Errors (LMC_ERR_FORMAT naming the tensors): dtypes, shapes that do not pair, out-of-range
 * expert or rows. */
lmc_status lmc_weight_bind_mxfp4(lmc_backend *be, const lmc_weight *blocks, const lmc_weight *scales, int64_t expert,
                                 int64_t row0, int64_t n_rows, lmc_tensor *w, lmc_quant_mlx *aux);

/* 1 if path names a GGUF file (by its magic). */
int lmc_path_is_gguf(const char *path);
/* The config of the checkpoint at path: config.json (+ generation_config.json) of a
 * directory, or the one a GGUF file's metadata describes. */
lmc_status lmc_checkpoint_config(const char *path, lmc_config *cfg);

#endif
