/* tp_nccl.c — the NCCL implementation of the tensor-parallel all-reduce
 * (model/tp.h lmc_tp_comm) for CUDA ranks that are threads of one process.
 *
 * Built only with `make CUDA=1` (like everything in src/backend/cuda/).
 * libnccl.so.2 is opened at run time (dlopen), so the build links nothing
 * new and a machine without NCCL gets a clear error instead of a loader
 * failure. ncclCommInitAll makes one communicator per device with NVLink
 * multicast (NVLS) disabled: NCCL_NVLS_ENABLE=0 is set before it.
 *
 * A CUDA rank reduces in place on its backend's own stream (cuda_internal.h,
 * private to src/backend/cuda/): enqueued after the ops that made the partial
 * sums and before those that read the result, with no host wait. A rank on
 * another backend (none today) would be synced and reduced on a stream of
 * this file's. Owns the communicators and those streams.
 */
#include "model/tp.h"

#include "cuda_internal.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

typedef struct nccl_api {
    void *lib;
    ncclResult_t (*comm_init_all)(ncclComm_t *comms, int n, const int *devlist);
    ncclResult_t (*all_reduce)(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*comm_destroy)(ncclComm_t comm);
    ncclResult_t (*comm_abort)(ncclComm_t comm);
    const char *(*error_string)(ncclResult_t r);
} nccl_api;

typedef struct nccl_comm {
    nccl_api api;
    int n;
    int dev[LMC_TP_MAX_RANKS];
    ncclComm_t comm[LMC_TP_MAX_RANKS];
    cudaStream_t stream[LMC_TP_MAX_RANKS]; /* created on the rank's thread */
    volatile int aborted;
} nccl_comm;

static lmc_status load_api(nccl_api *a) {
    memset(a, 0, sizeof *a);
    a->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) a->lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) return lmc_fail(LMC_ERR_UNSUPPORTED, "tensor parallelism over cuda needs NCCL: %s", dlerror());
    *(void **)&a->comm_init_all = dlsym(a->lib, "ncclCommInitAll");
    *(void **)&a->all_reduce = dlsym(a->lib, "ncclAllReduce");
    *(void **)&a->comm_destroy = dlsym(a->lib, "ncclCommDestroy");
    *(void **)&a->comm_abort = dlsym(a->lib, "ncclCommAbort");
    *(void **)&a->error_string = dlsym(a->lib, "ncclGetErrorString");
    if (!a->comm_init_all || !a->all_reduce || !a->comm_destroy || !a->comm_abort || !a->error_string) {
        dlclose(a->lib);
        a->lib = NULL;
        return lmc_fail(LMC_ERR_UNSUPPORTED, "libnccl lacks the functions lmc uses (ncclCommInitAll, ncclAllReduce, ...)");
    }
    return LMC_OK;
}

static lmc_status nccl_thread_init(lmc_tp_comm *c, int rank) {
    nccl_comm *k = c->ctx;
    cudaError_t e = cudaSetDevice(k->dev[rank]);
    if (e != cudaSuccess) return lmc_fail(LMC_ERR_IO, "rank %d: cudaSetDevice(%d): %s", rank, k->dev[rank], cudaGetErrorString(e));
    return LMC_OK;
}

/* The stream of a rank whose backend is not cuda (created on the rank's thread). */
static lmc_status own_stream(nccl_comm *k, int rank) {
    cudaError_t e;
    if (!k->stream[rank]) {
        e = cudaStreamCreateWithFlags(&k->stream[rank], cudaStreamNonBlocking);
        if (e != cudaSuccess) return lmc_fail(LMC_ERR_IO, "rank %d: all-reduce stream: %s", rank, cudaGetErrorString(e));
    }
    return LMC_OK;
}

static void nccl_abort(lmc_tp_comm *c) {
    nccl_comm *k = c->ctx;
    if (k->aborted) return;
    k->aborted = 1;
    for (int r = 0; r < k->n; r++) /* unblocks ranks waiting on a collective that will not complete */
        if (k->comm[r]) k->api.comm_abort(k->comm[r]);
}

static lmc_status nccl_all_reduce(lmc_tp_comm *c, int rank, lmc_backend *be, lmc_tensor *y) {
    nccl_comm *k = c->ctx;
    LMC_ASSERT(rank >= 0 && rank < k->n && y->type == LMC_DTYPE_F32);
    if (k->aborted) return lmc_fail(LMC_ERR_IO, "all-reduce: the tensor-parallel group was aborted");
    const size_t n = (size_t)lmc_tensor_nelem(y);
    if (strcmp(be->i->name, "cuda") == 0) {
        /* in stream order with the backend's ops: no host wait */
        ncclResult_t r = k->api.all_reduce(y->data, y->data, n, ncclFloat, ncclSum, k->comm[rank], CTX(be)->stream);
        if (r != ncclSuccess) {
            nccl_abort(c);
            return lmc_fail(LMC_ERR_IO, "ncclAllReduce (rank %d): %s", rank, k->api.error_string(r));
        }
        return LMC_OK;
    }
    LMC_TRY(own_stream(k, rank));
    lmc_status st = be->i->sync(be); /* the partial sums are complete */
    if (st < 0) { nccl_abort(c); return st; }
    ncclResult_t r = k->api.all_reduce(y->data, y->data, n, ncclFloat, ncclSum, k->comm[rank], k->stream[rank]);
    if (r != ncclSuccess) {
        nccl_abort(c);
        return lmc_fail(LMC_ERR_IO, "ncclAllReduce (rank %d): %s", rank, k->api.error_string(r));
    }
    cudaError_t e = cudaStreamSynchronize(k->stream[rank]); /* before the backend's next op reads y */
    if (e != cudaSuccess || k->aborted) {
        nccl_abort(c);
        return lmc_fail(LMC_ERR_IO, "all-reduce (rank %d): %s", rank, e != cudaSuccess ? cudaGetErrorString(e) : "aborted");
    }
    return LMC_OK;
}

static void nccl_free(lmc_tp_comm *c) {
    nccl_comm *k = c->ctx;
    for (int r = 0; r < k->n; r++) {
        if (k->comm[r] && !k->aborted) k->api.comm_destroy(k->comm[r]);
        if (k->stream[r]) {
            cudaSetDevice(k->dev[r]);
            cudaStreamDestroy(k->stream[r]);
        }
    }
    if (k->api.lib) dlclose(k->api.lib);
    free(k);
    free(c);
}

static const lmc_tp_comm_i nccl_i = {
    .name = "nccl",
    .thread_init = nccl_thread_init,
    .all_reduce = nccl_all_reduce,
    .abort = nccl_abort,
    .free = nccl_free,
};

lmc_status lmc_tp_comm_nccl_init(lmc_tp_comm **out, int n_ranks, const int *devices) {
    *out = NULL;
    if (n_ranks < 1 || n_ranks > LMC_TP_MAX_RANKS) return lmc_fail(LMC_ERR_ARG, "%d ranks (1..%d)", n_ranks, LMC_TP_MAX_RANKS);
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess) return lmc_fail(LMC_ERR_UNSUPPORTED, "no CUDA device (%s)", cudaGetErrorString(e));
    for (int r = 0; r < n_ranks; r++)
        if (devices[r] < 0 || devices[r] >= n_dev)
            return lmc_fail(LMC_ERR_ARG, "--tp %d needs CUDA device %d; this machine has %d", n_ranks, devices[r], n_dev);
    lmc_tp_comm *c = calloc(1, sizeof *c);
    nccl_comm *k = calloc(1, sizeof *k);
    if (!c || !k) { free(c); free(k); return lmc_fail(LMC_ERR_NOMEM, "NCCL communicator"); }
    lmc_status st = load_api(&k->api);
    if (st < 0) { free(c); free(k); return st; }
    k->n = n_ranks;
    memcpy(k->dev, devices, (size_t)n_ranks * sizeof *devices);
    setenv("NCCL_NVLS_ENABLE", "0", 1); /* NVLink multicast stays off (issue #12) */
    int cur = 0;
    cudaGetDevice(&cur);
    ncclResult_t r = k->api.comm_init_all(k->comm, n_ranks, devices);
    cudaSetDevice(cur);
    if (r != ncclSuccess) {
        st = lmc_fail(LMC_ERR_IO, "ncclCommInitAll over %d devices: %s", n_ranks, k->api.error_string(r));
        dlclose(k->api.lib);
        free(c);
        free(k);
        return st;
    }
    c->i = &nccl_i;
    c->n_ranks = n_ranks;
    c->ctx = k;
    *out = c;
    return LMC_OK;
}
