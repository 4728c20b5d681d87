/* parity.h — the parity gate: a fixture's reference logits against this engine.
 *
 * A fixture (tests/fixtures/<case>/, written by tools/oracle/ from transformers) holds a
 * tiny checkpoint, ref.json (prompt_ids, greedy_ids, vocab_size) and float64 reference
 * logits for every prompt position and every greedy step. The gate runs the checkpoint on
 * a backend and compares, as DESIGN.md's fidelity levels define:
 *   1. one prefill, logits at every prompt position;
 *   2. the prompt token by token through the KV cache, then the greedy steps teacher-forced
 *      on the reference ids (longrope: the prompt in one forward, as generate() does;
 *      dynamic rope: each greedy row as one full forward, as the reference is made);
 *   3. lmc_generate's greedy ids (when every greedy step has a clear gap).
 * Logits must agree within rel_tol · max|ref| (F1: 1e-4; F2: 1e-2) and our argmax must be
 * the reference id wherever the reference top-2 gap is at least 1e-3.
 * Used by test_parity, the CUDA parity test and `lmc check --oracle`.
 */
#ifndef LMC_GEN_PARITY_H
#define LMC_GEN_PARITY_H

#include "backend/backend.h"
#include "core/status.h"

#define LMC_PARITY_F1 1e-4
#define LMC_PARITY_F2 1e-2
#define LMC_PARITY_GAP_MIN 1e-3

typedef struct lmc_parity_report {
    int n_prompt, n_greedy;
    int gated;            /* greedy steps whose reference top-2 gap is ≥ LMC_PARITY_GAP_MIN */
    int id_mismatch;      /* gated steps where our argmax or the reference argmax is not the reference id */
    int generate_checked; /* 1: step 3 ran */
    int generate_same;    /* step 3 reproduced the reference ids */
    int decode_checked;   /* 0 for dynamic rope (no token-by-token comparison exists) */
    double e_prefill, e_decode, e_greedy; /* max |Δ| of each part */
    double tol;           /* rel_tol · max |ref| */
    int pass;             /* every check within its bound */
    char why[256];        /* the first failed check, "" on a pass */
} lmc_parity_report;

/* The fixture folders under root (those holding a ref.json), sorted by name: *names gets a
 * malloc'd array of malloc'd names (free with lmc_parity_list_free). Returns the count, or a
 * negative status when root cannot be read. */
int lmc_parity_list(const char *root, char ***names);
void lmc_parity_list_free(char **names, int n);

/* Run the gate on the fixture folder `dir` with weights bound on `be`. Errors (an unreadable
 * fixture, a model that does not load) are returned as statuses; a model that loads but
 * disagrees is a report with pass = 0. */
lmc_status lmc_parity_check(const char *dir, lmc_backend *be, double rel_tol, lmc_parity_report *r);

/* The same gate tensor parallel (gen/tp_context.h): the checkpoint loaded on a host cpu backend,
 * split over tp->n_ranks ranks of tp->backend. A model that does not split is LMC_ERR_UNSUPPORTED. */
struct lmc_tp_params;
lmc_status lmc_parity_check_tp(const char *dir, const struct lmc_tp_params *tp, double rel_tol,
                               lmc_parity_report *r);

#endif
