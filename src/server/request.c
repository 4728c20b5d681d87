/* request.c — request lifetime (references), the committed-text channel, and
 * the text checks of stop.h: stop-string search, the hold-back that never lets
 * a stop string's prefix reach a client, and strict UTF-8 validation.
 * A request is freed by whichever side drops the last reference. */
#include "request.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stop.h"
#include "tools.h"

lmc_srv_req *lmc_srv_req_new(void) {
    lmc_srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->refs = 1;
    r->stop_index = -1;
    atomic_init(&r->cancelled, 0);
    r->sp = lmc_sampler_default_params();
    return r;
}

void lmc_srv_req_ref(lmc_srv_req *r) {
    pthread_mutex_lock(&r->mu);
    r->refs++;
    pthread_mutex_unlock(&r->mu);
}

void lmc_srv_req_unref(lmc_srv_req *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left > 0) return;
    free(r->prompt);
    free(r->bias_id);
    free(r->bias_val);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->out);
    free(r->rout);
    lmc_reason_free(&r->rs);
    free(r->lps);
    free(r->embedding);
    lmc_jschema_free(r->schema);
    cJSON_Delete(r->schema_doc);
    lmc_sampler_free(r->sampler);
    lmc_detok_free(r->detok);
    free(r->text);
    free(r->counts);
    free(r->pend);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int lmc_srv_req_commit(lmc_srv_req *r, const char *text, size_t len) {
    if (r->out_len + len + 1 > r->out_cap) {
        size_t cap = (r->out_len + len + 1) * 2 + 64;
        char *o = realloc(r->out, cap);
        if (!o) return -1;
        r->out = o;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, text, len);
    r->out_len += len;
    r->out[r->out_len] = 0;
    pthread_cond_broadcast(&r->cv);
    return 0;
}

int lmc_srv_req_commit_reasoning(lmc_srv_req *r, const char *text, size_t len) {
    if (r->rout_len + len + 1 > r->rout_cap) {
        size_t cap = (r->rout_len + len + 1) * 2 + 64;
        char *o = realloc(r->rout, cap);
        if (!o) return -1;
        r->rout = o;
        r->rout_cap = cap;
    }
    memcpy(r->rout + r->rout_len, text, len);
    r->rout_len += len;
    r->rout[r->rout_len] = 0;
    pthread_cond_broadcast(&r->cv);
    return 0;
}

void lmc_srv_req_finish_locked(lmc_srv_req *r, lmc_finish f) {
    if (r->done) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r->t_done = ts.tv_sec + ts.tv_nsec * 1e-9;
    if (!r->out) lmc_srv_req_commit(r, "", 0);
    r->done = 1;
    r->finish = f;
    pthread_cond_broadcast(&r->cv);
}

const char *lmc_finish_openai(lmc_finish f) {
    switch (f) {
    case LMC_FINISH_LENGTH: return "length";
    default: return "stop";
    }
}

/* ---- stop strings ---- */

size_t lmc_stop_find(const char *text, size_t len, size_t from, char *const *stops, int n_stop, int *which) {
    size_t best = (size_t)-1;
    for (int i = 0; i < n_stop; i++) {
        size_t sl = strlen(stops[i]);
        if (sl == 0 || sl > len) continue;
        for (size_t p = from; p + sl <= len && p < best; p++) {
            if (text[p] == stops[i][0] && !memcmp(text + p, stops[i], sl)) {
                best = p;
                if (which) *which = i;
                break;
            }
        }
    }
    return best;
}

size_t lmc_stop_holdback(const char *text, size_t len, char *const *stops, int n_stop) {
    size_t hold = 0;
    for (int i = 0; i < n_stop; i++) {
        size_t sl = strlen(stops[i]);
        /* longest k < sl with text ending in stops[i][0..k) */
        for (size_t k = sl > 0 ? sl - 1 : 0; k > hold; k--) {
            if (k <= len && !memcmp(text + len - k, stops[i], k)) { hold = k; break; }
        }
    }
    return hold;
}

int lmc_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) { i++; continue; }
        int k;
        unsigned min;
        if (c >= 0xc2 && c <= 0xdf) { k = 1; min = 0x80; }
        else if (c >= 0xe0 && c <= 0xef) { k = 2; min = 0x800; }
        else if (c >= 0xf0 && c <= 0xf4) { k = 3; min = 0x10000; }
        else return 0;
        unsigned cp = c & (0x3f >> k);
        for (int j = 1; j <= k; j++) {
            if (i + (size_t)j >= n) return 0;
            unsigned d = p[i + j];
            if ((d & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (d & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

char *lmc_srv_req_take_content(lmc_srv_req *r, size_t *len) {
    pthread_mutex_lock(&r->mu);
    int start = 0;
    size_t safe = lmc_tools_safe_prefix((lmc_tool_fmt)r->tool_fmt, r->out ? r->out : "", r->out_len, &start);
    size_t k = safe > r->tc_emitted ? safe - r->tc_emitted : 0;
    char *piece = k ? malloc(k) : NULL;
    if (piece) memcpy(piece, r->out + r->tc_emitted, k);
    pthread_mutex_unlock(&r->mu);
    if (piece) r->tc_emitted = safe;
    r->tc_hold = start;
    *len = piece ? k : 0;
    return piece;
}
