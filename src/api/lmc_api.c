/* lmc_api.c — the public API (include/lmc.h) over the internal modules.
 *
 * An engine owns its backend, model and (optional) tokenizer; a session owns
 * a context (KV cache + scratch). This file only composes: no model logic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/generate.h"
#include "io/hfpath.h"
#include "io/mapguard.h"
#include "tok/tokenizer.h"

struct lmc_engine {
    lmc_backend *be;
    lmc_model *model;
    lmc_tokenizer *tok; /* NULL without tokenizer.json */
};

struct lmc_session {
    lmc_engine *eng;
    lmc_context *ctx;
};

lmc_engine_params lmc_engine_default_params(void) {
    lmc_engine_params p = {.backend = "cpu", .n_threads = 0, .compute = "bf16"};
    return p;
}

lmc_session_params lmc_session_default_params(void) {
    lmc_session_params p = {.n_ctx = 0, .n_seq = 1, .n_batch = 256};
    return p;
}

void lmc_free(void *p) { free(p); }

lmc_status lmc_guard_mapped_files(void) { return lmc_mapguard_install(); }

lmc_status lmc_engine_open(const char *model, const lmc_engine_params *pp, lmc_engine **out) {
    lmc_engine_params p = pp ? *pp : lmc_engine_default_params();
    lmc_model_path mp;
    LMC_TRY(lmc_hfpath_resolve(model, &mp));
    if (mp.is_file && !lmc_path_is_gguf(mp.path))
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: a single file that is not GGUF", mp.path);
    lmc_engine *e = calloc(1, sizeof *e);
    if (!e) return lmc_fail(LMC_ERR_NOMEM, "engine");
    lmc_backend_params bp = {.name = p.backend, .n_threads = p.n_threads, .compute = p.compute};
    lmc_status st = lmc_backend_init(&e->be, &bp);
    if (st >= 0) st = lmc_model_load(mp.path, e->be, &e->model);
    if (st >= 0) {
        char tj[4200];
        snprintf(tj, sizeof tj, "%s/tokenizer.json", mp.path);
        FILE *f = fopen(tj, "rb");
        if (f) {
            fclose(f);
            st = lmc_tokenizer_load(mp.path, &e->tok);
        }
    }
    if (st < 0) { lmc_engine_close(e); return st; }
    *out = e;
    return LMC_OK;
}

void lmc_engine_close(lmc_engine *e) {
    if (!e) return;
    lmc_tokenizer_free(e->tok);
    lmc_model_free(e->model);
    lmc_backend_free(e->be);
    free(e);
}

int lmc_engine_n_vocab(const lmc_engine *e) { return e->model->cfg.vocab_size; }
int lmc_engine_has_tokenizer(const lmc_engine *e) { return e->tok != NULL; }

lmc_status lmc_tokenize(const lmc_engine *e, const char *text, size_t len, int add_special, int32_t **ids, int *n) {
    if (!e->tok) return lmc_fail(LMC_ERR_NOT_FOUND, "this model has no tokenizer.json; pass token ids instead");
    return lmc_tokenizer_encode(e->tok, text, len, add_special, ids, n);
}

lmc_status lmc_detokenize(const lmc_engine *e, const int32_t *ids, int n, int skip_special, char **text) {
    if (!e->tok) return lmc_fail(LMC_ERR_NOT_FOUND, "this model has no tokenizer.json");
    size_t len;
    return lmc_tokenizer_decode(e->tok, ids, n, skip_special, text, &len);
}

lmc_status lmc_session_open(lmc_engine *e, const lmc_session_params *pp, lmc_session **out) {
    lmc_session_params p = pp ? *pp : lmc_session_default_params();
    lmc_context_params cp = {.n_ctx = p.n_ctx, .n_seq = p.n_seq, .n_batch = p.n_batch};
    lmc_session *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "session");
    s->eng = e;
    lmc_status st = lmc_context_init(&s->ctx, e->model, &cp);
    if (st < 0) { free(s); return st; }
    *out = s;
    return LMC_OK;
}

void lmc_session_close(lmc_session *s) {
    if (!s) return;
    lmc_context_free(s->ctx);
    free(s);
}

lmc_status lmc_session_decode(lmc_session *s, const lmc_batch *b) { return lmc_context_decode(s->ctx, b); }

const float *lmc_session_logits(const lmc_session *s, int i) {
    return i >= 0 && i < s->ctx->n_logits ? lmc_context_logits(s->ctx, i) : NULL;
}

void lmc_session_truncate(lmc_session *s, int seq, int n) {
    if (seq >= 0 && seq < s->ctx->kv.n_seq && n >= 0) lmc_kv_truncate(&s->ctx->kv, seq, n);
}

typedef struct piece_state {
    lmc_detok *detok;
    lmc_piece_fn fn;
    void *ud;
    lmc_status err;
} piece_state;

static int on_token(int32_t tok, const float *logits, int n_vocab, void *ud) {
    piece_state *ps = ud;
    (void)logits; (void)n_vocab;
    char *piece = NULL;
    size_t len = 0;
    if (ps->detok) {
        lmc_status st = lmc_detok_push(ps->detok, tok, &piece, &len);
        if (st < 0) { ps->err = st; return 1; }
    }
    int stop = ps->fn ? ps->fn(piece ? piece : "", len, tok, ps->ud) : 0;
    free(piece);
    return stop;
}

lmc_status lmc_session_generate(lmc_session *s, const int32_t *prompt, int n_prompt, int n_predict,
                                const lmc_sampler_params *sp, lmc_piece_fn fn, void *ud) {
    const lmc_config *c = &s->eng->model->cfg;
    piece_state ps = {.fn = fn, .ud = ud};
    if (s->eng->tok) LMC_TRY(lmc_detok_init(&ps.detok, s->eng->tok, 1));
    lmc_gen_params gp = {.n_predict = n_predict, .stop_ids = c->eos_token_ids, .n_stop = c->n_eos, .fn_no_logits = 1,
                         .sampler = sp ? *sp : lmc_sampler_default_params()};
    lmc_status st = lmc_generate(s->ctx, prompt, n_prompt, &gp, on_token, &ps, NULL);
    if (st >= 0 && ps.err < 0) st = ps.err;
    if (st >= 0 && ps.detok && fn) {
        char *rest = NULL;
        size_t len = 0;
        st = lmc_detok_flush(ps.detok, &rest, &len);
        if (st >= 0 && len) fn(rest, len, -1, ud);
        free(rest);
    }
    lmc_detok_free(ps.detok);
    return st;
}

lmc_status lmc_session_generate_text(lmc_session *s, const char *prompt, int n_predict, const lmc_sampler_params *sp,
                                     lmc_piece_fn fn, void *ud) {
    int32_t *ids;
    int n;
    LMC_TRY(lmc_tokenize(s->eng, prompt, strlen(prompt), 1, &ids, &n));
    lmc_status st = lmc_session_generate(s, ids, n, n_predict, sp, fn, ud);
    free(ids);
    return st;
}
