/* steprec.c — the record-once, replay-after policy of steprec.h (the dense forward, the
 * gemma4 port and its drafter record their steps through it). Owns nothing but the
 * recording a slot holds.
 */
#include "steprec.h"

#include <string.h>

int lmc_steprec_play(lmc_backend *be, lmc_steprec *r, void (*body)(void *ud), void *ud) {
    if (r->g) {
        if (be->i->graph_replay(be, r->g)) return 1;
        be->i->graph_free(be, r->g); /* a workspace moved since: record again */
        r->g = NULL;
    }
    if (r->runs < 0 || r->runs++ == 0) return 0;
    if (!be->i->graph_begin(be)) return 0;
    body(ud);
    r->g = be->i->graph_end(be);
    if (!r->g) {
        if (++r->fails >= 3) r->runs = -1; /* keeps failing: run this slot unrecorded */
        return 0;
    }
    return be->i->graph_replay(be, r->g);
}

void lmc_steprec_free(lmc_backend *be, lmc_steprec *r) {
    if (r->g) be->i->graph_free(be, r->g);
    memset(r, 0, sizeof *r);
}
