/* run_matmul.h — one matmul through a backend's interface for the kernel tests
 * (test_quant, test_amx_int8, test_amx_bf16): y[n_tok, w->ne[1]] = x[n_tok, w->ne[0]] · wᵀ,
 * the activations uploaded and the result read back as any caller of the backend would.
 */
#ifndef LMC_TEST_RUN_MATMUL_H
#define LMC_TEST_RUN_MATMUL_H

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"

static void run_matmul(lmc_backend *be, const lmc_tensor *w, const float *x, int64_t n_tok, float *y) {
    lmc_tensor xt = lmc_tensor_make(LMC_DTYPE_F32, w->ne[0], n_tok, 1, 1);
    lmc_tensor yt = lmc_tensor_make(LMC_DTYPE_F32, w->ne[1], n_tok, 1, 1);
    LMC_ASSERT(be->i->alloc(be, &xt) == LMC_OK && be->i->alloc(be, &yt) == LMC_OK);
    be->i->set(be, &xt, x, 0, lmc_tensor_nbytes(&xt));
    be->i->matmul(be, &yt, w, &xt);
    LMC_ASSERT(be->i->sync(be) == LMC_OK);
    be->i->get(be, y, &yt, 0, lmc_tensor_nbytes(&yt));
    be->i->release(be, &xt);
    be->i->release(be, &yt);
}

#endif
