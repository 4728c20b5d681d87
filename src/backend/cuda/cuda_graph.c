/* cuda_graph.c — recorded op sequences (CUDA graphs) for the backend's graph_* entries.
 *
 * A decode step is ~500 small kernels; launched one by one from the host the GPU waits
 * for the launches (≈ 1.7 ms of a 6.7 ms 8B step). Recorded once by stream capture and
 * replayed as one graph launch they run back to back. The caller (model/forward.c) keeps
 * one recording per step shape; every value that changes between steps (token ids,
 * positions, sequence ids, rows wanted) lives in device memory the kernels read, so a
 * recording replays unchanged. A recording holds workspace addresses: lmc_cuda_ws counts
 * reallocations (ws_gen) and a recording made before one is refused at replay. Capture
 * never allocates: an op that would grow a workspace marks the capture bad and the
 * recording is dropped (the caller then runs the step the ordinary way, which grows it).
 * LMC_CUDA_GRAPHS=0 turns recordings off (and a capture the driver refuses turns them off
 * for the backend's lifetime). Kernels launched with programmatic dependent launch
 * (lmc_launch, cuda_common.cuh) are captured with programmatic edges, so a replay keeps
 * their overlap (test_cuda_ops test_pdl_chain: a recorded chain equals the serial one).
 */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "cuda_internal.h"

typedef struct cuda_graph {
    cudaGraphExec_t exec;
    unsigned ws_gen; /* workspaces' generation when recorded */
} cuda_graph;

int lmc_cuda_graph_begin(lmc_backend *be) {
    cuda_ctx *c = CTX(be);
    if (c->graphs_off || c->capturing || c->err) return 0;
    /* relaxed: other threads (a second model's backend, tensor-parallel ranks) may use
     * CUDA meanwhile; this stream's ops are recorded either way */
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        c->graphs_off = 1;
        return 0;
    }
    c->capturing = 1;
    c->capture_bad = 0;
    return 1;
}

void *lmc_cuda_graph_end(lmc_backend *be) {
    cuda_ctx *c = CTX(be);
    if (!c->capturing) return NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    c->capturing = 0;
    cuda_graph *r = NULL;
    if (e == cudaSuccess && g && !c->capture_bad && !c->err) {
        r = malloc(sizeof *r);
        if (r && cudaGraphInstantiate(&r->exec, g, 0) == cudaSuccess) {
            r->ws_gen = c->ws_gen;
        } else {
            free(r);
            r = NULL;
        }
    }
    if (g) cudaGraphDestroy(g);
    if (!r) {
        cudaGetLastError(); /* a refused capture is not the step's error */
        if (e != cudaSuccess || !c->capture_bad) c->graphs_off = 1; /* the driver refused: stop trying */
        if (c->err && e != cudaSuccess) c->err = 0; /* launch errors noted while capturing came from the capture */
    }
    c->capture_bad = 0;
    return r;
}

int lmc_cuda_graph_replay(lmc_backend *be, void *g) {
    cuda_ctx *c = CTX(be);
    cuda_graph *r = g;
    if (!r || r->ws_gen != c->ws_gen) return 0;
    lmc_cuda_note(c, cudaGraphLaunch(r->exec, c->stream), "graph launch");
    return 1;
}

void lmc_cuda_graph_free(lmc_backend *be, void *g) {
    (void)be;
    cuda_graph *r = g;
    if (!r) return;
    cudaGraphExecDestroy(r->exec);
    free(r);
}
