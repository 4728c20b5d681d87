/* tok_model.c — the `model` section of tokenizer.json: BPE, Unigram, WordLevel, WordPiece.
 *
 * BPE: merges are a hash map (left id, right id) -> (rank, merged id); a word is
 * a linked list of symbols merged lowest-rank-first (leftmost on ties) through
 * a binary heap, exactly as HF `tokenizers` does, with byte_fallback, unk
 * fusing, ignore_merges, continuing_subword_prefix and end_of_word_suffix.
 * Unigram: Viterbi over the vocabulary with HF's unknown-piece penalty.
 * A per-encode cache (tok_cache) remembers the ids of words already seen.
 */
#include "tok/tok_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lmc_status tok_ids_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        int cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, (size_t)cap * sizeof *v);
        if (!v) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return LMC_OK;
}

/* ---------------- word cache ---------------- */

typedef struct { uint32_t hash, key_off, key_len, ids_off, n_ids; } cache_ent;
/* Direct-mapped memo of BPE pair lookups (hits and misses): the merge map of a big
 * vocabulary is tens of MB, while the pairs of real text are a small hot set. */
#define PAIR_CACHE_BITS 16
typedef struct { uint64_t key, val; } pair_ent;   /* val: rank<<32 | id, or UINT64_MAX = no merge */
struct tok_cache { cache_ent *ent; uint32_t cap, n; tok_buf keys; tok_ids ids; pair_ent *pairs; };
#define CACHE_MAX_WORD 128
#define CACHE_MAX_ENTRIES (1u << 16)

tok_cache *tok_cache_new(void) { return calloc(1, sizeof(tok_cache)); }

lmc_status tok_cache_enable_pairs(tok_cache *c) {
    if (c->pairs) return LMC_OK;
    c->pairs = malloc(sizeof(pair_ent) << PAIR_CACHE_BITS);
    if (!c->pairs) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    memset(c->pairs, 0xFF, sizeof(pair_ent) << PAIR_CACHE_BITS);  /* key UINT64_MAX: empty */
    return LMC_OK;
}

void tok_cache_free(tok_cache *c) {
    if (!c) return;
    free(c->pairs);
    free(c->ent);
    tok_buf_free(&c->keys);
    free(c->ids.v);
    free(c);
}

static const cache_ent *cache_get(const tok_cache *c, const char *s, size_t n, uint32_t h) {
    if (!c->ent) return NULL;
    for (uint32_t j = h & (c->cap - 1); c->ent[j].key_len; j = (j + 1) & (c->cap - 1)) {
        const cache_ent *e = &c->ent[j];
        if (e->hash == h && e->key_len == n && memcmp(c->keys.data + e->key_off, s, n) == 0) return e;
    }
    return NULL;
}

static lmc_status cache_put(tok_cache *c, const char *s, size_t n, uint32_t h, const int32_t *ids, int n_ids) {
    if (n == 0 || n > CACHE_MAX_WORD) return LMC_OK;
    if (c->n >= CACHE_MAX_ENTRIES) { /* start over rather than grow without bound */
        memset(c->ent, 0, (size_t)c->cap * sizeof *c->ent);
        c->n = 0; c->keys.len = 0; c->ids.n = 0;
    }
    if ((c->n + 1) * 2 > c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 1024;
        cache_ent *ne = calloc(cap, sizeof *ne);
        if (!ne) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < c->cap; i++) {
            if (!c->ent[i].key_len) continue;
            uint32_t j = c->ent[i].hash & (cap - 1);
            while (ne[j].key_len) j = (j + 1) & (cap - 1);
            ne[j] = c->ent[i];
        }
        free(c->ent);
        c->ent = ne;
        c->cap = cap;
    }
    cache_ent e = {h, (uint32_t)c->keys.len, (uint32_t)n, (uint32_t)c->ids.n, (uint32_t)n_ids};
    LMC_TRY(tok_buf_put(&c->keys, s, n));
    for (int i = 0; i < n_ids; i++) LMC_TRY(tok_ids_push(&c->ids, ids[i]));
    uint32_t j = h & (c->cap - 1);
    while (c->ent[j].key_len) j = (j + 1) & (c->cap - 1);
    c->ent[j] = e;
    c->n++;
    return LMC_OK;
}

/* ---------------- loading ---------------- */

void tok_model_free(tok_model *m) {
    free(m->id_to_tok);
    free(m->strs);
    tok_strmap_free(&m->vocab);
    tok_u64map_free(&m->merges);
    free(m->cont_prefix);
    free(m->eow_suffix);
    free(m->scores);
    free(m->char_ids);
    memset(m, 0, sizeof *m);
}

/* Allocate the string arena and id table for `count` strings of `bytes` total. */
static lmc_status vocab_alloc(tok_model *m, int32_t n_vocab, size_t bytes, int count) {
    m->n_vocab = n_vocab;
    m->id_to_tok = calloc((size_t)n_vocab + 1, sizeof *m->id_to_tok);
    m->strs = malloc(bytes + 1);
    if (!m->id_to_tok || !m->strs) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory for the vocabulary");
    return tok_strmap_init(&m->vocab, (size_t)count);
}

#define MAX_VOCAB (1 << 26)

static lmc_status parse_vocab_obj(tok_model *m, const cJSON *vocab) {
    if (!cJSON_IsObject(vocab)) return lmc_fail(LMC_ERR_FORMAT, "model: \"vocab\" must be an object");
    size_t bytes = 0;
    int count = 0;
    double max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= MAX_VOCAB ||
            it->valuedouble != floor(it->valuedouble))
            return lmc_fail(LMC_ERR_FORMAT, "model vocab: id of \"%.40s\" is not a valid integer", it->string ? it->string : "");
        if (!it->string) return lmc_fail(LMC_ERR_FORMAT, "model vocab: entry without a key");
        bytes += strlen(it->string) + 1;
        count++;
        if (it->valuedouble > max_id) max_id = it->valuedouble;
    }
    LMC_TRY(vocab_alloc(m, (int32_t)max_id + 1, bytes, count));
    char *p = m->strs;
    cJSON_ArrayForEach(it, vocab) {
        size_t l = strlen(it->string);
        if (!tok_utf8_valid(it->string, l)) return lmc_fail(LMC_ERR_FORMAT, "model vocab: token is not valid UTF-8");
        memcpy(p, it->string, l + 1);
        int32_t id = (int32_t)it->valuedouble;
        m->id_to_tok[id] = p;
        LMC_TRY(tok_strmap_put(&m->vocab, p, l, id));
        p += l + 1;
    }
    return LMC_OK;
}

typedef struct merge_ctx { size_t plen; char small[512]; char *big; size_t big_cap; uint32_t rank; } merge_ctx;

static lmc_status add_merge(tok_model *m, merge_ctx *c, const char *a, size_t al, const char *b, size_t bl) {
    int32_t ia = tok_strmap_get(&m->vocab, a, al), ib = tok_strmap_get(&m->vocab, b, bl);
    if (ia < 0 || ib < 0)
        return lmc_fail(LMC_ERR_FORMAT, "BPE merge %u: token \"%.*s\" is not in the vocabulary", c->rank,
                        (int)((ia < 0 ? al : bl) > 40 ? 40 : (ia < 0 ? al : bl)), ia < 0 ? a : b);
    const char *bs = b;
    size_t bsl = bl;
    if (c->plen && bl >= c->plen && memcmp(b, m->cont_prefix, c->plen) == 0) { bs += c->plen; bsl -= c->plen; }
    char *cat = c->small;
    if (al + bsl > sizeof c->small) {
        if (al + bsl > c->big_cap) {
            free(c->big);
            c->big_cap = al + bsl;
            c->big = malloc(c->big_cap);
            if (!c->big) { c->big_cap = 0; return lmc_fail(LMC_ERR_NOMEM, "out of memory"); }
        }
        cat = c->big;
    }
    memcpy(cat, a, al);
    memcpy(cat + al, bs, bsl);
    int32_t nid = tok_strmap_get(&m->vocab, cat, al + bsl);
    if (nid < 0)
        return lmc_fail(LMC_ERR_FORMAT, "BPE merge %u: merged token \"%.*s\" is not in the vocabulary", c->rank,
                        (int)(al + bsl > 60 ? 60 : al + bsl), cat);
    LMC_TRY(tok_u64map_put(&m->merges, ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib, ((uint64_t)c->rank << 32) | (uint32_t)nid));
    c->rank++;
    return LMC_OK;
}

static lmc_status split_merge_str(const char *s, size_t n, uint32_t rank, size_t *al) {
    const char *sp = NULL;
    int spaces = 0;
    for (size_t i = 0; i < n; i++) if (s[i] == ' ') { if (!sp) sp = s + i; spaces++; }
    if (spaces != 1)
        return lmc_fail(LMC_ERR_FORMAT, "BPE merge %u: \"%.*s\" is not two tokens separated by one space", rank,
                        (int)(n > 60 ? 60 : n), s);
    *al = (size_t)(sp - s);
    return LMC_OK;
}

static lmc_status parse_merges(tok_model *m, const cJSON *merges) {
    if (!merges || cJSON_IsNull(merges)) return tok_u64map_init(&m->merges, 16);
    if (!cJSON_IsArray(merges)) return lmc_fail(LMC_ERR_FORMAT, "BPE: \"merges\" must be an array");
    LMC_TRY(tok_u64map_init(&m->merges, (size_t)cJSON_GetArraySize(merges)));
    merge_ctx c = {0};
    c.plen = m->cont_prefix ? strlen(m->cont_prefix) : 0;
    lmc_status st = LMC_OK;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        if (cJSON_IsString(it)) {
            size_t n = strlen(it->valuestring), al;
            if ((st = split_merge_str(it->valuestring, n, c.rank, &al)) < 0) break;
            st = add_merge(m, &c, it->valuestring, al, it->valuestring + al + 1, n - al - 1);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
                   cJSON_IsString(it->child->next)) {
            const char *a = it->child->valuestring, *b = it->child->next->valuestring;
            st = add_merge(m, &c, a, strlen(a), b, strlen(b));
        } else st = lmc_fail(LMC_ERR_FORMAT, "BPE merge %u: expected \"a b\" or [\"a\", \"b\"]", c.rank);
        if (st < 0) break;
    }
    free(c.big);
    return st;
}

/* The same from raw JSON text, without building cJSON nodes. Merges are decoded in
 * batches of B; each batch's hash slots (vocabulary lookups, then merge-map inserts)
 * are prefetched before use, because the tables are far bigger than the caches. */
typedef struct { uint32_t a, al, b, bl, c, cl; } mrec;  /* offsets into the batch arena: a, b, a+b' */

enum { MERGE_BATCH = 16 };

static lmc_status resolve_merges(tok_model *m, const tok_buf *ar, const mrec *r, size_t k, uint32_t rank0) {
    uint32_t h[MERGE_BATCH][3];
    uint64_t key[MERGE_BATCH], val[MERGE_BATCH];
    for (size_t i = 0; i < k; i++) {
        h[i][0] = tok_hash(ar->data + r[i].a, r[i].al);
        h[i][1] = tok_hash(ar->data + r[i].b, r[i].bl);
        h[i][2] = tok_hash(ar->data + r[i].c, r[i].cl);
        for (int q = 0; q < 3; q++) tok_strmap_prefetch(&m->vocab, h[i][q]);
    }
    for (size_t i = 0; i < k; i++) {
        const mrec *x = &r[i];
        uint32_t rank = rank0 + (uint32_t)i;
        int32_t ia = tok_strmap_get_h(&m->vocab, ar->data + x->a, x->al, h[i][0]);
        int32_t ib = tok_strmap_get_h(&m->vocab, ar->data + x->b, x->bl, h[i][1]);
        int32_t nid = tok_strmap_get_h(&m->vocab, ar->data + x->c, x->cl, h[i][2]);
        if (ia < 0 || ib < 0)
            return lmc_fail(LMC_ERR_FORMAT, "BPE merge %u: token \"%.*s\" is not in the vocabulary", rank,
                            (int)((ia < 0 ? x->al : x->bl) > 40 ? 40 : (ia < 0 ? x->al : x->bl)), ar->data + (ia < 0 ? x->a : x->b));
        if (nid < 0)
            return lmc_fail(LMC_ERR_FORMAT, "BPE merge %u: merged token \"%.*s\" is not in the vocabulary", rank,
                            (int)(x->cl > 60 ? 60 : x->cl), ar->data + x->c);
        key[i] = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
        val[i] = ((uint64_t)rank << 32) | (uint32_t)nid;
        tok_u64map_prefetch(&m->merges, key[i]);
    }
    for (size_t i = 0; i < k; i++) LMC_TRY(tok_u64map_put(&m->merges, key[i], val[i]));
    return LMC_OK;
}

static lmc_status parse_merges_fast(tok_model *m, const char *doc, const char *b, const char *e) {
    tok_jscan s = {doc, b, e};
    size_t plen = m->cont_prefix ? strlen(m->cont_prefix) : 0;
    tok_buf ar = {0};
    mrec r[MERGE_BATCH];
    size_t k = 0;
    uint32_t n = 0;
    lmc_status st = tok_u64map_init(&m->merges, (size_t)(e - b) / 10 + 16);
    if (st >= 0) st = tok_js_expect(&s, '[');
    if (st >= 0 && !tok_js_accept(&s, ']')) for (;;) {
        mrec *x = &r[k];
        int ch = tok_js_peek(&s);
        size_t o = ar.len;
        if (ch == '"') {
            size_t al;
            if ((st = tok_js_string(&s, &ar)) < 0) break;
            if ((st = split_merge_str(ar.data + o, ar.len - o, n, &al)) < 0) break;
            x->a = (uint32_t)o; x->al = (uint32_t)al;
            x->b = (uint32_t)(o + al + 1); x->bl = (uint32_t)(ar.len - o - al - 1);
        } else if (ch == '[') {
            s.p++;
            if ((st = tok_js_string(&s, &ar)) < 0) { lmc_fail_context(st, "BPE merge %u", n); break; }
            x->a = (uint32_t)o; x->al = (uint32_t)(ar.len - o);
            if ((st = tok_js_expect(&s, ',')) < 0 || (st = tok_js_string(&s, &ar)) < 0 || (st = tok_js_expect(&s, ']')) < 0) {
                lmc_fail_context(st, "BPE merge %u", n);
                break;
            }
            x->b = x->a + x->al; x->bl = (uint32_t)(ar.len - x->b);
        } else { st = lmc_fail(LMC_ERR_FORMAT, "BPE merge %u: expected \"a b\" or [\"a\", \"b\"]", n); break; }
        /* the merged token a + b (minus b's continuing-subword prefix) */
        size_t bo = x->b, bl = x->bl;
        if (plen && bl >= plen && memcmp(ar.data + bo, m->cont_prefix, plen) == 0) { bo += plen; bl -= plen; }
        size_t co = ar.len;
        if ((st = tok_buf_reserve(&ar, x->al + bl)) < 0) break;
        memcpy(ar.data + co, ar.data + x->a, x->al);
        memcpy(ar.data + co + x->al, ar.data + bo, bl);
        ar.len += x->al + bl;
        x->c = (uint32_t)co; x->cl = (uint32_t)(x->al + bl);
        n++;
        int more = tok_js_accept(&s, ',');
        if (++k == MERGE_BATCH || !more) {
            if ((st = resolve_merges(m, &ar, r, k, n - (uint32_t)k)) < 0) break;
            k = 0;
            ar.len = 0;
        }
        if (more) continue;
        st = tok_js_expect(&s, ']');
        break;
    }
    tok_buf_free(&ar);
    return st;
}

typedef struct { uint32_t off, len, id; } vent;

static lmc_status parse_vocab_fast(tok_model *m, const char *doc, const char *b, const char *e) {
    tok_jscan s = {doc, b, e};
    tok_buf arena = {0};
    vent *v = NULL;
    size_t n = 0, cap = 0;
    uint32_t max_id = 0;
    lmc_status st = tok_buf_reserve(&arena, (size_t)(e - b) + 16);
    if (st >= 0) st = tok_js_expect(&s, '{');
    if (st >= 0 && !tok_js_accept(&s, '}')) for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            vent *nv = realloc(v, cap * sizeof *nv);
            if (!nv) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory"); break; }
            v = nv;
        }
        size_t off = arena.len;
        uint32_t id;
        if ((st = tok_js_string(&s, &arena)) < 0) break;
        size_t len = arena.len - off;
        if (!tok_utf8_valid(arena.data + off, len)) { st = lmc_fail(LMC_ERR_FORMAT, "model vocab: token is not valid UTF-8"); break; }
        if ((st = tok_buf_putc(&arena, 0)) < 0) break;
        if ((st = tok_js_expect(&s, ':')) < 0) break;
        if ((st = tok_js_uint(&s, MAX_VOCAB - 1, &id)) < 0) {
            lmc_fail_context(st, "model vocab: id of \"%.40s\"", arena.data + off);
            break;
        }
        v[n++] = (vent){(uint32_t)off, (uint32_t)len, id};
        if (id > max_id) max_id = id;
        if (tok_js_accept(&s, ',')) continue;
        st = tok_js_expect(&s, '}');
        break;
    }
    if (st >= 0) {
        m->n_vocab = n ? (int32_t)max_id + 1 : 0;
        m->id_to_tok = calloc((size_t)m->n_vocab + 1, sizeof *m->id_to_tok);
        if (!m->id_to_tok) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
        else st = tok_strmap_init(&m->vocab, n);
    }
    if (st >= 0) {
        m->strs = arena.data;   /* the arena becomes the model's string store */
        arena.data = NULL;
        enum { B = 16 };
        for (size_t i0 = 0; i0 < n && st >= 0; i0 += B) {
            size_t k = n - i0 < B ? n - i0 : B;
            uint32_t h[B];
            for (size_t i = 0; i < k; i++) {
                h[i] = tok_hash(m->strs + v[i0 + i].off, v[i0 + i].len);
                tok_strmap_prefetch(&m->vocab, h[i]);
            }
            for (size_t i = 0; i < k && st >= 0; i++) {
                const vent *x = &v[i0 + i];
                char *p = m->strs + x->off;
                m->id_to_tok[x->id] = p;
                st = tok_strmap_put_h(&m->vocab, p, x->len, (int32_t)x->id, h[i]);
            }
        }
    }
    tok_buf_free(&arena);
    free(v);
    return st;
}

static char *dup_opt_str(const cJSON *j, const char *key) {
    const char *s = tok_json_str(j, key);
    return (s && *s) ? strdup(s) : NULL;
}

lmc_status tok_model_parse_fast(const cJSON *j, const tok_spans *sp, tok_model *m) {
    memset(m, 0, sizeof *m);
    m->unk_id = -1;
    for (int i = 0; i < 256; i++) m->byte_ids[i] = -1;
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: missing \"model\" object");
    const char *type = tok_json_str(j, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(j, "vocab");
    if (!type) {  /* old files omit the type: infer it as HF does */
        if (cJSON_GetObjectItemCaseSensitive(j, "merges")) type = "BPE";
        else if (cJSON_IsArray(vocab)) type = "Unigram";
        else if (cJSON_GetObjectItemCaseSensitive(j, "continuing_subword_prefix")) type = "WordPiece";
        else type = "WordLevel";
    }
    const char *unk = tok_json_str(j, "unk_token");
    if (!strcmp(type, "BPE") || !strcmp(type, "WordLevel") || !strcmp(type, "WordPiece")) {
        m->kind = !strcmp(type, "BPE") ? TOK_MODEL_BPE : !strcmp(type, "WordLevel") ? TOK_MODEL_WORDLEVEL : TOK_MODEL_WORDPIECE;
        if (sp && sp->vocab) LMC_TRY(parse_vocab_fast(m, sp->doc, sp->vocab, sp->vocab_end));
        else LMC_TRY(parse_vocab_obj(m, vocab));
        if (unk) {
            m->unk_id = tok_strmap_get(&m->vocab, unk, strlen(unk));
            m->unk_missing = m->unk_id < 0;
        }
        if (m->kind == TOK_MODEL_BPE) {
            m->cont_prefix = dup_opt_str(j, "continuing_subword_prefix");
            m->eow_suffix = dup_opt_str(j, "end_of_word_suffix");
            m->fuse_unk = tok_json_bool(j, "fuse_unk", 0);
            m->byte_fallback = tok_json_bool(j, "byte_fallback", 0);
            m->ignore_merges = tok_json_bool(j, "ignore_merges", 0);
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "dropout");
            if (d && !cJSON_IsNull(d) && (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1))
                return lmc_fail(LMC_ERR_FORMAT, "BPE: dropout must be null or in [0, 1]");
            /* dropout is a training-time knob: ignored at inference, as documented */
            if (sp && sp->merges) LMC_TRY(parse_merges_fast(m, sp->doc, sp->merges, sp->merges_end));
            else LMC_TRY(parse_merges(m, cJSON_GetObjectItemCaseSensitive(j, "merges")));
        } else if (m->kind == TOK_MODEL_WORDPIECE) {
            m->cont_prefix = dup_opt_str(j, "continuing_subword_prefix");
            if (!m->cont_prefix && !tok_json_str(j, "continuing_subword_prefix")) m->cont_prefix = strdup("##");
            const cJSON *mx = cJSON_GetObjectItemCaseSensitive(j, "max_input_chars_per_word");
            m->max_input_chars = cJSON_IsNumber(mx) ? mx->valueint : 100;
        }
    } else if (!strcmp(type, "Unigram")) {
        m->kind = TOK_MODEL_UNIGRAM;
        if (!cJSON_IsArray(vocab)) return lmc_fail(LMC_ERR_FORMAT, "Unigram: \"vocab\" must be an array of [piece, score]");
        int count = cJSON_GetArraySize(vocab);
        size_t bytes = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, vocab) {
            if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 || !cJSON_IsString(it->child) || !cJSON_IsNumber(it->child->next))
                return lmc_fail(LMC_ERR_FORMAT, "Unigram vocab: every entry must be [piece, score]");
            bytes += strlen(it->child->valuestring) + 1;
        }
        if (count == 0) return lmc_fail(LMC_ERR_FORMAT, "Unigram: empty vocabulary");
        LMC_TRY(vocab_alloc(m, count, bytes, count));
        m->scores = malloc((size_t)count * sizeof *m->scores);
        if (!m->scores) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
        char *p = m->strs;
        int32_t id = 0;
        m->min_score = INFINITY;
        cJSON_ArrayForEach(it, vocab) {
            const char *s = it->child->valuestring;
            size_t l = strlen(s);
            if (!tok_utf8_valid(s, l)) return lmc_fail(LMC_ERR_FORMAT, "Unigram vocab: piece is not valid UTF-8");
            memcpy(p, s, l + 1);
            m->id_to_tok[id] = p;
            m->scores[id] = it->child->next->valuedouble;
            if (m->scores[id] < m->min_score) m->min_score = m->scores[id];
            if ((int)l > m->max_tok_len) m->max_tok_len = (int)l;
            if (tok_strmap_get(&m->vocab, p, l) < 0) LMC_TRY(tok_strmap_put(&m->vocab, p, l, id));
            p += l + 1;
            id++;
        }
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "unk_id");
        if (cJSON_IsNumber(u)) {
            if (u->valueint < 0 || u->valueint >= count) return lmc_fail(LMC_ERR_FORMAT, "Unigram: unk_id %d out of range", u->valueint);
            m->unk_id = u->valueint;
        } else if (u && !cJSON_IsNull(u)) return lmc_fail(LMC_ERR_FORMAT, "Unigram: unk_id must be an integer");
        m->byte_fallback = tok_json_bool(j, "byte_fallback", 0);
        m->fuse_unk = 1;
    } else return lmc_fail(LMC_ERR_UNSUPPORTED, "model type \"%s\" is not supported", type);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tok_strmap_get(&m->vocab, name, 6);
    }
    m->char_ids = malloc(0x10000 * sizeof *m->char_ids);
    if (!m->char_ids) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    for (uint32_t cp = 0; cp < 0x10000; cp++) m->char_ids[cp] = -2;  /* -2: not looked up yet */
    return LMC_OK;
}

lmc_status tok_model_parse(const cJSON *j, tok_model *m) { return tok_model_parse_fast(j, NULL, m); }

/* ---------------- BPE ---------------- */

typedef struct { int32_t id; int32_t prev, next; uint32_t len; } sym;
typedef struct { uint32_t rank; int32_t pos; int32_t new_id; } hnode;

static inline int h_less(hnode a, hnode b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void h_push(hnode *h, int *n, hnode x) {
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!h_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static hnode h_pop(hnode *h, int *n) {
    hnode top = h[0], x = h[--(*n)];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h_less(h[c + 1], h[c])) c++;
        if (!h_less(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = x;
    return top;
}

static inline int merge_get(const tok_model *m, pair_ent *pc, int32_t a, int32_t b, uint32_t *rank, int32_t *nid) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, v;
    pair_ent *e = NULL;
    if (pc) {
        e = &pc[(key * 0x9E3779B97F4A7C15ULL) >> (64 - PAIR_CACHE_BITS)];
        if (e->key == key) {
            if (e->val == UINT64_MAX) return 0;
            *rank = (uint32_t)(e->val >> 32);
            *nid = (int32_t)(uint32_t)e->val;
            return 1;
        }
    }
    int found = tok_u64map_get(&m->merges, key, &v);
    if (e) { e->key = key; e->val = found ? v : UINT64_MAX; }
    if (!found) return 0;
    *rank = (uint32_t)(v >> 32);
    *nid = (int32_t)(uint32_t)v;
    return 1;
}

/* id of the one-character token for code point cp (< 0x10000), memoized in m->char_ids
 * (filled lazily; racing threads store the same value) */
static inline int32_t char_id(const tok_model *m, const char *s, size_t l, uint32_t cp) {
    int32_t id = __atomic_load_n(&m->char_ids[cp], __ATOMIC_RELAXED);
    if (id != -2) return id;
    id = tok_strmap_get(&m->vocab, s, l);
    __atomic_store_n(&m->char_ids[cp], id, __ATOMIC_RELAXED);
    return id;
}

static lmc_status bpe_word(const tok_model *m, const char *w, size_t n, pair_ent *pc, tok_ids *out) {
    sym sbuf[256];
    hnode hbuf[3 * 256 + 4];
    sym *s = sbuf;
    hnode *h = hbuf;
    if (n > 256) {
        s = malloc(n * sizeof *s);
        h = malloc((n + 1) * 3 * sizeof *h);
        if (!s || !h) { free(s); free(h); return lmc_fail(LMC_ERR_NOMEM, "out of memory"); }
    }
    int ns = 0;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    char tmp[64];
    size_t plen = m->cont_prefix ? strlen(m->cont_prefix) : 0, slen = m->eow_suffix ? strlen(m->eow_suffix) : 0;
    for (size_t i = 0; i < n;) {
        size_t cl = (size_t)tok_utf8_len((unsigned char)w[i]);
        if (i + cl > n) cl = n - i;
        int first = i == 0, last = i + cl >= n;
        int32_t id;
        if ((plen && !first) || (slen && last)) {
            size_t k = 0;
            if (plen && !first && plen + cl + slen <= sizeof tmp) { memcpy(tmp, m->cont_prefix, plen); k = plen; }
            memcpy(tmp + k, w + i, cl); k += cl;
            if (slen && last && k + slen <= sizeof tmp) { memcpy(tmp + k, m->eow_suffix, slen); k += slen; }
            id = tok_strmap_get(&m->vocab, tmp, k);
        } else if (cl == 1) id = char_id(m, w + i, 1, (unsigned char)w[i]);
        else if (cl == 2) id = char_id(m, w + i, 2, ((uint32_t)(w[i] & 0x1F) << 6) | (uint32_t)(w[i + 1] & 0x3F));
        else if (cl == 3) id = char_id(m, w + i, 3, ((uint32_t)(w[i] & 0x0F) << 12) | ((uint32_t)(w[i + 1] & 0x3F) << 6) |
                                                    (uint32_t)(w[i + 2] & 0x3F));
        else id = tok_strmap_get(&m->vocab, w + i, cl);
        if (id >= 0) {
            if (unk_id >= 0) { s[ns++] = (sym){unk_id, 0, 0, unk_len}; unk_id = -1; }
            s[ns++] = (sym){id, 0, 0, (uint32_t)cl};
        } else {
            int done = 0;
            if (m->byte_fallback) {
                int ok = 1;
                for (size_t k = 0; k < cl; k++) if (m->byte_ids[(unsigned char)w[i + k]] < 0) ok = 0;
                if (ok) {
                    /* as HF: a pending <unk> is NOT flushed before byte-fallback tokens */
                    for (size_t k = 0; k < cl; k++) s[ns++] = (sym){m->byte_ids[(unsigned char)w[i + k]], 0, 0, 1};
                    done = 1;
                }
            }
            if (!done && m->unk_missing) {
                if (s != sbuf) { free(s); free(h); }
                return lmc_fail(LMC_ERR_FORMAT, "BPE: unk_token is not in the vocabulary");
            }
            if (!done && m->unk_id >= 0) {
                if (unk_id >= 0 && m->fuse_unk) unk_len += (uint32_t)cl;
                else {
                    if (unk_id >= 0) s[ns++] = (sym){unk_id, 0, 0, unk_len};
                    unk_id = m->unk_id;
                    unk_len = (uint32_t)cl;
                }
            }
        }
        i += cl;
    }
    if (unk_id >= 0) s[ns++] = (sym){unk_id, 0, 0, unk_len};
    for (int i = 0; i < ns; i++) { s[i].prev = i - 1; s[i].next = i + 1 < ns ? i + 1 : -1; }
    int nh = 0;
    for (int i = 0; i + 1 < ns; i++) {
        uint32_t r; int32_t nid;
        if (merge_get(m, pc, s[i].id, s[i + 1].id, &r, &nid)) h_push(h, &nh, (hnode){r, i, nid});
    }
    while (nh > 0) {
        hnode top = h_pop(h, &nh);
        sym *cur = &s[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        sym *right = &s[cur->next];
        uint32_t r; int32_t nid;
        if (!merge_get(m, pc, cur->id, right->id, &r, &nid) || nid != top.new_id) continue;
        cur->id = top.new_id;
        cur->len += right->len;
        right->len = 0;
        int32_t rn = right->next;
        cur->next = rn;
        if (rn >= 0) s[rn].prev = top.pos;
        if (cur->prev >= 0 && merge_get(m, pc, s[cur->prev].id, cur->id, &r, &nid))
            h_push(h, &nh, (hnode){r, cur->prev, nid});
        if (cur->next >= 0 && merge_get(m, pc, cur->id, s[cur->next].id, &r, &nid))
            h_push(h, &nh, (hnode){r, top.pos, nid});
    }
    lmc_status st = LMC_OK;
    for (int i = 0; i < ns && st >= 0; i++) if (s[i].len) st = tok_ids_push(out, s[i].id);
    if (s != sbuf) { free(s); free(h); }
    return st;
}

/* ---------------- Unigram ---------------- */

typedef struct { double score; int32_t start; int32_t id; } unode;

static lmc_status unigram_word(const tok_model *m, const char *w, size_t n, tok_ids *out) {
    unode *best = malloc((n + 1) * sizeof *best);
    if (!best) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i <= n; i++) best[i] = (unode){0, -1, -1};
    best[0].start = 0;
    double unk_score = m->min_score - 10.0;
    for (size_t i = 0; i < n;) {
        size_t cl = (size_t)tok_utf8_len((unsigned char)w[i]);
        if (i + cl > n) cl = n - i;
        double base = best[i].score;
        int single = 0;
        size_t maxl = n - i < (size_t)m->max_tok_len ? n - i : (size_t)m->max_tok_len;
        for (size_t l = 1; l <= maxl; l++) {
            int32_t id = tok_strmap_get(&m->vocab, w + i, l);
            if (id < 0) continue;
            double sc = base + m->scores[id];
            unode *t = &best[i + l];
            if (t->start < 0 || sc > t->score) { t->score = sc; t->start = (int32_t)i; t->id = id; }
            if (l == cl) single = 1;
        }
        if (!single) {
            if (m->unk_id < 0) { free(best); return lmc_fail(LMC_ERR_FORMAT, "Unigram: a character has no piece and the model has no unk_id"); }
            unode *t = &best[i + cl];
            double sc = base + unk_score;
            if (t->start < 0 || sc > t->score) { t->score = sc; t->start = (int32_t)i; t->id = m->unk_id; }
        }
        i += cl;
    }
    /* backtrack; collect (start, end, id) in reverse, fusing consecutive unknowns */
    int cnt = 0;
    int32_t *seg = malloc((n + 1) * 3 * sizeof *seg);
    if (!seg) { free(best); return lmc_fail(LMC_ERR_NOMEM, "out of memory"); }
    for (size_t e = n; e > 0;) {
        unode *nd = &best[e];
        size_t b = (size_t)nd->start;
        if (m->unk_id >= 0 && nd->id == m->unk_id && cnt > 0 && seg[3 * (cnt - 1) + 2] == m->unk_id &&
            (size_t)seg[3 * (cnt - 1)] == e)
            seg[3 * (cnt - 1)] = (int32_t)b;
        else { seg[3 * cnt] = (int32_t)b; seg[3 * cnt + 1] = (int32_t)e; seg[3 * cnt + 2] = nd->id; cnt++; }
        e = b;
    }
    lmc_status st = LMC_OK;
    for (int k = cnt - 1; k >= 0 && st >= 0; k--) {
        int32_t b = seg[3 * k], e = seg[3 * k + 1], id = seg[3 * k + 2];
        if (id == m->unk_id) {
            int32_t direct = tok_strmap_get(&m->vocab, w + b, (size_t)(e - b));
            if (direct >= 0) { st = tok_ids_push(out, direct); continue; }
            if (m->byte_fallback) {
                int ok = 1;
                for (int32_t q = b; q < e; q++) if (m->byte_ids[(unsigned char)w[q]] < 0) ok = 0;
                if (ok) {
                    for (int32_t q = b; q < e && st >= 0; q++) st = tok_ids_push(out, m->byte_ids[(unsigned char)w[q]]);
                    continue;
                }
            }
        }
        st = tok_ids_push(out, id);
    }
    free(seg);
    free(best);
    return st;
}

/* ---------------- WordPiece ---------------- */

static lmc_status wordpiece_word(const tok_model *m, const char *w, size_t n, tok_ids *out) {
    size_t nchars = 0;
    for (size_t i = 0; i < n; i += (size_t)tok_utf8_len((unsigned char)w[i])) nchars++;
    if (m->unk_id < 0 && nchars > (size_t)m->max_input_chars)
        return lmc_fail(LMC_ERR_FORMAT, "WordPiece: word too long and no unk_token");
    if (nchars > (size_t)m->max_input_chars) return tok_ids_push(out, m->unk_id);
    int start_n = out->n;
    size_t plen = m->cont_prefix ? strlen(m->cont_prefix) : 0;
    tok_buf b = {0};
    lmc_status st = LMC_OK;
    for (size_t start = 0; start < n && st >= 0;) {
        size_t end = n;
        int32_t found = -1;
        while (end > start) {
            b.len = 0;
            if (start > 0 && plen) st = tok_buf_put(&b, m->cont_prefix, plen);
            if (st >= 0) st = tok_buf_put(&b, w + start, end - start);
            if (st < 0) break;
            found = tok_strmap_get(&m->vocab, b.data, b.len);
            if (found >= 0) break;
            do end--; while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80);
        }
        if (st < 0) break;
        if (found < 0) {
            out->n = start_n;
            if (m->unk_id < 0) st = lmc_fail(LMC_ERR_FORMAT, "WordPiece: no piece matches and no unk_token");
            else st = tok_ids_push(out, m->unk_id);
            break;
        }
        st = tok_ids_push(out, found);
        start = end;
    }
    tok_buf_free(&b);
    return st;
}

/* ---------------- dispatch ---------------- */

lmc_status tok_model_tokenize(const tok_model *m, const char *s, size_t n, tok_cache *cache, tok_ids *out) {
    if (n == 0) return LMC_OK;
    if (m->kind == TOK_MODEL_WORDLEVEL) {
        int32_t id = tok_strmap_get(&m->vocab, s, n);
        if (id < 0) id = m->unk_id;
        if (id < 0) return lmc_fail(LMC_ERR_FORMAT, "WordLevel: \"%.*s\" is not in the vocabulary and there is no unk_token", (int)(n > 40 ? 40 : n), s);
        return tok_ids_push(out, id);
    }
    if (m->kind == TOK_MODEL_BPE && m->ignore_merges) {
        int32_t id = tok_strmap_get(&m->vocab, s, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    uint32_t h = 0;
    if (cache && n <= CACHE_MAX_WORD) {
        h = tok_hash(s, n);
        const cache_ent *e = cache_get(cache, s, n, h);
        if (e) {
            for (uint32_t i = 0; i < e->n_ids; i++) LMC_TRY(tok_ids_push(out, cache->ids.v[e->ids_off + i]));
            return LMC_OK;
        }
    }
    int before = out->n;
    switch (m->kind) {
    case TOK_MODEL_BPE: LMC_TRY(bpe_word(m, s, n, cache ? cache->pairs : NULL, out)); break;
    case TOK_MODEL_UNIGRAM: LMC_TRY(unigram_word(m, s, n, out)); break;
    case TOK_MODEL_WORDPIECE: LMC_TRY(wordpiece_word(m, s, n, out)); break;
    case TOK_MODEL_WORDLEVEL: break;
    }
    if (cache && n <= CACHE_MAX_WORD) /* out->v is NULL while no id was pushed (a word that yields none) */
        LMC_TRY(cache_put(cache, s, n, h, out->v ? out->v + before : NULL, out->n - before));
    return LMC_OK;
}
