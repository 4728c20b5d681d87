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

#include "config.h"
#include "core/dtype.h"

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

/* 1 if path names a GGUF file (by its magic). */
int lmc_path_is_gguf(const char *path);
/* The config of the checkpoint at path: config.json (+ generation_config.json) of a
 * directory, or the one a GGUF file's metadata describes. */
lmc_status lmc_checkpoint_config(const char *path, lmc_config *cfg);

#endif
