/* backend.c — backend selection by name. */
#include "backend.h"

#include <string.h>

#ifdef LMC_CUDA
#include "cuda/cuda_backend.h"
#endif

lmc_status lmc_backend_init(lmc_backend **out, const lmc_backend_params *p) {
    const char *name = p && p->name ? p->name : "cpu";
    const char *compute = p ? p->compute : NULL;
    if (compute && strcmp(compute, "f32") && strcmp(compute, "bf16"))
        return lmc_fail(LMC_ERR_ARG, "unknown compute precision '%s' (expected f32 or bf16)", compute);
    if (strcmp(name, "cpu") == 0) {
        if (compute) lmc_backend_cpu_set_bf16_compute(!strcmp(compute, "bf16"));
        return lmc_backend_cpu_init(out, p ? p->n_threads : 0, 0);
    }
    if (strcmp(name, "cpu-ref") == 0) return lmc_backend_cpu_init(out, 1, 1);
    if (strcmp(name, "cuda") == 0) {
#ifdef LMC_CUDA
        return lmc_backend_cuda_init(out, p ? p->device : 0);
#else
        return lmc_fail(LMC_ERR_UNSUPPORTED, "this lmc was built without CUDA (rebuild with `make CUDA=1`)");
#endif
    }
    return lmc_fail(LMC_ERR_ARG, "unknown backend '%s' (expected cpu or cuda)", name);
}

void lmc_backend_free(lmc_backend *be) {
    if (be) be->i->free(be);
}
