/* steprec.h — the record-once, replay-after policy for a fixed op sequence on a backend
 * with recorded op sequences (graph_* entries of backend.h, CUDA graphs).
 *
 * A caller keeps one lmc_steprec per step shape (whatever fixes the op sequence and the
 * tensors it touches: batch size, rows wanted, KV cache addresses) and calls lmc_steprec_play
 * with a function that enqueues the step's ops. The first call of a slot runs nothing
 * (returns 0: the caller runs the ops itself, so workspaces grow to their size); the second
 * records and replays; later ones replay. A recording refused at replay (a workspace moved)
 * is dropped and made again; a slot whose recording fails 3 times stays unrecorded.
 * Per-step values (token ids, positions) must be set in device tensors before the call.
 * Used by the dense forward (model/forward.c), the gemma4 port (model/gemma4.c) and its MTP
 * drafter (model/gemma4_mtp.c); the slot owns its recording (lmc_steprec_free).
 */
#ifndef LMC_MODEL_STEPREC_H
#define LMC_MODEL_STEPREC_H

#include "backend/backend.h"

typedef struct lmc_steprec {
    int runs;   /* steps of this slot so far (the first runs unrecorded); -1: never record */
    int fails;  /* recordings that could not be made */
    void *g;    /* the recording (NULL: none yet) */
} lmc_steprec;

/* 1: body's ops were enqueued (replayed from the recording); 0: nothing was enqueued (run body
 * the ordinary way). The backend must have graph_begin (callers check). */
int lmc_steprec_play(lmc_backend *be, lmc_steprec *r, void (*body)(void *ud), void *ud);
/* Release the slot's recording and reset it (a new shape takes the slot). */
void lmc_steprec_free(lmc_backend *be, lmc_steprec *r);

#endif
