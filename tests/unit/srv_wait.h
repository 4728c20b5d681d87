/* srv_wait.h — shared by the server unit tests: wait for a request to finish. */
#ifndef LMC_TESTS_SRV_WAIT_H
#define LMC_TESTS_SRV_WAIT_H

#include <pthread.h>
#include <time.h>

#include "gen/generate.h"
#include "server/request.h"

/* 1 when r->done is set within timeout_s seconds, else 0 (polls every 2 ms). */
static inline int wait_done(lmc_srv_req *r, double timeout_s) {
    double t0 = lmc_now_s();
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int d = r->done;
        pthread_mutex_unlock(&r->mu);
        if (d) return 1;
        if (lmc_now_s() - t0 > timeout_s) return 0;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

#endif
