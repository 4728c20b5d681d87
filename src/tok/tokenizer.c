/* tokenizer.c — loading tokenizer.json / tokenizer_config.json and the encode pipeline.
 *
 * Owns the lmc_tokenizer object: the model, normalizer, pre-tokenizer, post-processor
 * and decoder trees, the added-token vocabulary (two byte tries, raw and normalized,
 * matched leftmost-longest with lstrip/rstrip/single_word as HF does) and the
 * tokenizer_config.json facts (bos/eos, add_bos/add_eos, added tokens).
 * Encode = repair UTF-8 -> split out raw added tokens -> normalize -> split out
 * normalized added tokens -> pre-tokenize -> model -> post-process (add_special).
 */
#include "tok/tokenizer.h"
#include "tok/tok_internal.h"
#include "io/mapguard.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

typedef struct added_tok {
    char *content; size_t len;
    char *norm; size_t norm_len;   /* content after the normalizer (normalized tokens) */
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} added_tok;

typedef struct trie {
    tok_u64map edges;     /* (node << 8 | byte) -> child node */
    int32_t *tok;         /* [n_nodes] added-token index ending here, or -1 */
    int n_nodes, cap;
    uint8_t first[256];   /* bytes that start some token */
} trie;

typedef enum { POST_NONE, POST_TEMPLATE, POST_WRAP } post_kind;
typedef struct post_item { int is_seq; int32_t *ids; int n; } post_item;
typedef struct post_step {
    post_kind kind;
    post_item *items; int n_items;   /* TEMPLATE */
    int32_t cls, sep;                /* WRAP (Bert/Roberta): [cls] A [sep] */
} post_step;


/* Scratch state of one encode call: buffers, regex match data and the word cache.
 * The tokenizer keeps one behind a mutex that encode takes with trylock; a call
 * that finds it busy (another thread) uses a fresh one, so encode stays reentrant. */
typedef struct enc_ctx {
    const struct lmc_tokenizer *tok;
    pcre2_match_data *md;
    tok_cache *cache;
    tok_pieces a, b;
    tok_buf norm, tmp;
    tok_ids ids;
} enc_ctx;

struct lmc_tokenizer {
    tok_model model;
    tok_normalizer *norm;
    tok_pretok *pre;
    tok_decoder *dec;
    post_step *post; int n_post;
    added_tok *added; int n_added;
    tok_strmap added_map;            /* content -> index into added */
    tok_u64map added_ids;            /* id -> index into added (load time) */
    int32_t *id_added;               /* [n_vocab] added index or -1 */
    int32_t n_vocab;
    trie raw_trie, norm_trie;
    char *bos, *eos;
    int add_bos, add_eos;
    pthread_mutex_t lock;            /* guards `shared` */
    enc_ctx shared;
};

static void ctx_release(enc_ctx *c);

/* ---------------- JSON helpers ---------------- */

const char *tok_json_str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int tok_json_bool(const cJSON *obj, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static lmc_status read_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return lmc_fail(errno == ENOENT ? LMC_ERR_NOT_FOUND : LMC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) { fclose(f); return lmc_fail(LMC_ERR_IO, "%s is not a regular file", path); }
    char *buf = malloc((size_t)sb.st_size + 1);
    if (!buf) { fclose(f); return lmc_fail(LMC_ERR_NOMEM, "out of memory reading %s", path); }
    size_t n = fread(buf, 1, (size_t)sb.st_size, f);
    fclose(f);
    if (n != (size_t)sb.st_size) { free(buf); return lmc_fail(LMC_ERR_IO, "short read on %s", path); }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return LMC_OK;
}

/* Map a file read-only (empty files give an empty non-NULL buffer). */
static lmc_status map_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return lmc_fail(errno == ENOENT ? LMC_ERR_NOT_FOUND : LMC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) { fclose(f); return lmc_fail(LMC_ERR_IO, "%s is not a regular file", path); }
    *len = (size_t)sb.st_size;
    if (*len == 0) { fclose(f); *out = (char *)""; return LMC_OK; }
    void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fileno(f), 0);
    fclose(f);
    if (p == MAP_FAILED) return lmc_fail(LMC_ERR_IO, "cannot map %s: %s", path, strerror(errno));
    (void)lmc_mapguard_register(p, *len, path); /* best effort: full table = unguarded */
    *out = p;
    return LMC_OK;
}

static void unmap_file(char *p, size_t len) {
    if (!p || !len) return;
    lmc_mapguard_unregister(p);
    munmap(p, len);
}

/* ---------------- tries ---------------- */

static lmc_status trie_new_node(trie *t, int32_t *node) {
    if (t->n_nodes == t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        int32_t *p = realloc(t->tok, (size_t)cap * sizeof *p);
        if (!p) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
        t->tok = p;
        t->cap = cap;
    }
    t->tok[t->n_nodes] = -1;
    *node = t->n_nodes++;
    return LMC_OK;
}

static lmc_status trie_add(trie *t, const char *s, size_t n, int32_t idx) {
    if (n == 0) return LMC_OK;
    if (!t->n_nodes) { int32_t root; LMC_TRY(trie_new_node(t, &root)); LMC_TRY(tok_u64map_init(&t->edges, 64)); }
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = ((uint64_t)(uint32_t)node << 8) | (unsigned char)s[i], v;
        if (tok_u64map_get(&t->edges, key, &v)) node = (int32_t)v;
        else {
            int32_t child;
            LMC_TRY(trie_new_node(t, &child));
            LMC_TRY(tok_u64map_put(&t->edges, key, (uint64_t)child));
            node = child;
        }
    }
    t->first[(unsigned char)s[0]] = 1;
    if (t->tok[node] < 0) t->tok[node] = idx;  /* first registration wins */
    return LMC_OK;
}

/* Longest token starting at s[i]; returns its index and sets *end, or -1. */
static int32_t trie_longest(const trie *t, const char *s, size_t n, size_t i, size_t *end) {
    int32_t node = 0, best = -1;
    for (size_t k = i; k < n; k++) {
        uint64_t v;
        if (!tok_u64map_get(&t->edges, ((uint64_t)(uint32_t)node << 8) | (unsigned char)s[k], &v)) break;
        node = (int32_t)v;
        if (t->tok[node] >= 0) { best = t->tok[node]; *end = k + 1; }
    }
    return best;
}

static void trie_free(trie *t) { tok_u64map_free(&t->edges); free(t->tok); memset(t, 0, sizeof *t); }

/* ---------------- loading ---------------- */

void lmc_tokenizer_free(lmc_tokenizer *tok) {
    if (!tok) return;
    tok_model_free(&tok->model);
    tok_normalizer_free(tok->norm);
    tok_pretok_free(tok->pre);
    tok_decoder_free(tok->dec);
    for (int i = 0; i < tok->n_post; i++) {
        for (int k = 0; k < tok->post[i].n_items; k++) free(tok->post[i].items[k].ids);
        free(tok->post[i].items);
    }
    free(tok->post);
    for (int i = 0; i < tok->n_added; i++) { free(tok->added[i].content); free(tok->added[i].norm); }
    free(tok->added);
    tok_strmap_free(&tok->added_map);
    tok_u64map_free(&tok->added_ids);
    free(tok->id_added);
    trie_free(&tok->raw_trie);
    trie_free(&tok->norm_trie);
    free(tok->bos);
    free(tok->eos);
    ctx_release(&tok->shared);
    pthread_mutex_destroy(&tok->lock);
    free(tok);
}

static lmc_status add_token(lmc_tokenizer *tok, const cJSON *j, int32_t forced_id) {
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "added token: expected an object");
    const char *content = tok_json_str(j, "content");
    if (!content) return lmc_fail(LMC_ERR_FORMAT, "added token: missing string \"content\"");
    if (!*content) return LMC_OK;  /* HF ignores empty added tokens */
    size_t len = strlen(content);
    if (!tok_utf8_valid(content, len)) return lmc_fail(LMC_ERR_FORMAT, "added token: content is not UTF-8");
    int32_t id = forced_id;
    if (id < 0) {
        const cJSON *jid = cJSON_GetObjectItemCaseSensitive(j, "id");
        if (!cJSON_IsNumber(jid) || jid->valuedouble < 0 || jid->valuedouble >= (1 << 26) || jid->valuedouble != (double)jid->valueint)
            return lmc_fail(LMC_ERR_FORMAT, "added token \"%.40s\": \"id\" must be a non-negative integer", content);
        id = jid->valueint;
    }
    uint64_t known;
    if (tok_u64map_get(&tok->added_ids, (uint64_t)id, &known)) return LMC_OK;  /* already known */
    added_tok *na = realloc(tok->added, (size_t)(tok->n_added + 1) * sizeof *na);
    if (!na) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    tok->added = na;
    added_tok *a = &tok->added[tok->n_added];
    memset(a, 0, sizeof *a);
    a->content = strdup(content);
    if (!a->content) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    a->len = len;
    a->id = id;
    a->special = (uint8_t)tok_json_bool(j, "special", 0);
    a->lstrip = (uint8_t)tok_json_bool(j, "lstrip", 0);
    a->rstrip = (uint8_t)tok_json_bool(j, "rstrip", 0);
    a->single_word = (uint8_t)tok_json_bool(j, "single_word", 0);
    /* an absent "normalized" defaults to true in tokenizer.json (serde Default of AddedToken)
     * and to `not special` in tokenizer_config.json (transformers' AddedToken) */
    a->normalized = (uint8_t)tok_json_bool(j, "normalized", forced_id >= 0 ? !a->special : 1);
    tok->n_added++;
    return tok_u64map_put(&tok->added_ids, (uint64_t)id, (uint64_t)(tok->n_added - 1));
}

static const char *token_text(const cJSON *v) {  /* "str" or {"content": "str"} */
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) return tok_json_str(v, "content");
    return NULL;
}

static lmc_status parse_config(lmc_tokenizer *tok, const char *cfg, size_t len) {
    cJSON *j = cJSON_ParseWithLength(cfg, len);
    if (!j) return lmc_fail(LMC_ERR_FORMAT, "tokenizer_config.json: invalid JSON");
    lmc_status st = LMC_OK;
    if (!cJSON_IsObject(j)) st = lmc_fail(LMC_ERR_FORMAT, "tokenizer_config.json: expected an object");
    if (st >= 0) {
        const char *b = token_text(cJSON_GetObjectItemCaseSensitive(j, "bos_token"));
        const char *e = token_text(cJSON_GetObjectItemCaseSensitive(j, "eos_token"));
        if (b && !(tok->bos = strdup(b))) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
        if (e && !(tok->eos = strdup(e))) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(j, "add_bos_token");
        const cJSON *ae = cJSON_GetObjectItemCaseSensitive(j, "add_eos_token");
        tok->add_bos = cJSON_IsBool(ab) ? cJSON_IsTrue(ab) : -1;
        tok->add_eos = cJSON_IsBool(ae) ? cJSON_IsTrue(ae) : -1;
    }
    const cJSON *atd = cJSON_GetObjectItemCaseSensitive(j, "added_tokens_decoder");
    if (st >= 0 && atd) {
        if (!cJSON_IsObject(atd)) st = lmc_fail(LMC_ERR_FORMAT, "tokenizer_config.json: added_tokens_decoder must be an object");
        const cJSON *it;
        cJSON_ArrayForEach(it, atd) {
            if (st < 0) break;
            char *endp;
            long id = strtol(it->string ? it->string : "", &endp, 10);
            if (!it->string || *endp || endp == it->string || id < 0 || id >= (1 << 26))
                st = lmc_fail(LMC_ERR_FORMAT, "tokenizer_config.json: added_tokens_decoder key \"%.20s\" is not an id", it->string ? it->string : "");
            else st = add_token(tok, it, (int32_t)id);
        }
    }
    cJSON_Delete(j);
    return st;
}

static lmc_status parse_post(lmc_tokenizer *tok, const cJSON *j);

static lmc_status parse_template(lmc_tokenizer *tok, post_step *ps, const cJSON *j) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    (void)tok;
    if (!cJSON_IsArray(single)) return lmc_fail(LMC_ERR_FORMAT, "TemplateProcessing: \"single\" must be a list");
    ps->kind = POST_TEMPLATE;
    ps->items = calloc((size_t)cJSON_GetArraySize(single) + 1, sizeof *ps->items);
    if (!ps->items) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        post_item *pi = &ps->items[ps->n_items];
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *spt = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        if (cJSON_IsObject(seq)) { pi->is_seq = 1; ps->n_items++; continue; }
        if (!cJSON_IsObject(spt)) return lmc_fail(LMC_ERR_FORMAT, "TemplateProcessing: items must be Sequence or SpecialToken");
        const char *name = tok_json_str(spt, "id");
        if (!name) return lmc_fail(LMC_ERR_FORMAT, "TemplateProcessing: SpecialToken without \"id\"");
        const cJSON *def = cJSON_IsObject(sp) ? cJSON_GetObjectItemCaseSensitive(sp, name) : NULL;
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids");
        if (!cJSON_IsArray(ids)) return lmc_fail(LMC_ERR_FORMAT, "TemplateProcessing: special token \"%.40s\" is not defined in special_tokens", name);
        int n = cJSON_GetArraySize(ids);
        pi->ids = malloc((size_t)(n + 1) * sizeof *pi->ids);
        if (!pi->ids) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
        ps->n_items++;  /* counted before the ids are read: a bad id below must not leak pi->ids */
        const cJSON *x;
        cJSON_ArrayForEach(x, ids) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= (1 << 26))
                return lmc_fail(LMC_ERR_FORMAT, "TemplateProcessing: special token ids must be non-negative integers");
            pi->ids[pi->n++] = x->valueint;
        }
    }
    return LMC_OK;
}

static lmc_status wrap_id(const lmc_tokenizer *tok, const cJSON *j, const char *key, int32_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);  /* ["[CLS]", 101] */
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !cJSON_IsNumber(v->child->next))
        return lmc_fail(LMC_ERR_FORMAT, "post_processor: \"%s\" must be [token, id]", key);
    (void)tok;
    *out = v->child->next->valueint;
    if (*out < 0) return lmc_fail(LMC_ERR_FORMAT, "post_processor: negative id");
    return LMC_OK;
}

static lmc_status parse_post(lmc_tokenizer *tok, const cJSON *j) {
    if (!j || cJSON_IsNull(j)) return LMC_OK;
    const char *type = tok_json_str(j, "type");
    if (!cJSON_IsObject(j) || !type) return lmc_fail(LMC_ERR_FORMAT, "post_processor: expected an object with \"type\"");
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "processors"), *it;
        if (!cJSON_IsArray(arr)) return lmc_fail(LMC_ERR_FORMAT, "post_processor Sequence: missing list \"processors\"");
        cJSON_ArrayForEach(it, arr) LMC_TRY(parse_post(tok, it));
        return LMC_OK;
    }
    if (!strcmp(type, "ByteLevel")) return LMC_OK;  /* only trims offsets */
    post_step *np = realloc(tok->post, (size_t)(tok->n_post + 1) * sizeof *np);
    if (!np) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    tok->post = np;
    post_step *ps = &tok->post[tok->n_post++];
    memset(ps, 0, sizeof *ps);
    if (!strcmp(type, "TemplateProcessing")) return parse_template(tok, ps, j);
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        ps->kind = POST_WRAP;
        LMC_TRY(wrap_id(tok, j, "cls", &ps->cls));
        return wrap_id(tok, j, "sep", &ps->sep);
    }
    return lmc_fail(LMC_ERR_UNSUPPORTED, "post_processor type \"%s\" is not supported", type);
}

static lmc_status build_added(lmc_tokenizer *tok) {
    int32_t maxid = tok->model.n_vocab - 1;
    for (int i = 0; i < tok->n_added; i++) if (tok->added[i].id > maxid) maxid = tok->added[i].id;
    tok->n_vocab = maxid + 1;
    tok->id_added = malloc((size_t)(tok->n_vocab + 1) * sizeof *tok->id_added);
    if (!tok->id_added) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < tok->n_vocab; i++) tok->id_added[i] = -1;
    LMC_TRY(tok_strmap_init(&tok->added_map, (size_t)tok->n_added));
    tok_buf nb = {0}, tmp = {0};
    pcre2_match_data *md = pcre2_match_data_create(32, NULL);
    lmc_status st = md ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < tok->n_added && st >= 0; i++) {
        added_tok *a = &tok->added[i];
        tok->id_added[a->id] = i;
        if (tok_strmap_get(&tok->added_map, a->content, a->len) < 0)
            st = tok_strmap_put(&tok->added_map, a->content, a->len, i);
        if (st < 0) break;
        if (a->normalized && tok->norm) {
            st = tok_normalizer_apply(tok->norm, a->content, a->len, &nb, &tmp, md);
            if (st < 0) break;
            a->norm = malloc(nb.len + 1);
            if (!a->norm) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory"); break; }
            memcpy(a->norm, nb.data, nb.len + 1);
            a->norm_len = nb.len;
            st = trie_add(&tok->norm_trie, a->norm, a->norm_len, i);
        } else st = trie_add(&tok->raw_trie, a->content, a->len, i);
    }
    tok_buf_free(&nb);
    tok_buf_free(&tmp);
    if (md) pcre2_match_data_free(md);
    return st;
}

/* ---- locating model.vocab / model.merges in the raw text ---- */

static lmc_status model_member(void *ctx, const char *key, size_t klen, tok_jscan *s) {
    tok_spans *sp = ctx;
    int c = tok_js_peek(s);
    const char *v = s->p;
    int big = (klen == 5 && !memcmp(key, "vocab", 5) && c == '{') || (klen == 6 && !memcmp(key, "merges", 6) && c == '[');
    /* vocab and merges are validated by their own strict parsers later */
    LMC_TRY(big ? tok_js_skip_container(s) : tok_js_skip(s, 1));
    if (klen == 5 && !memcmp(key, "vocab", 5) && c == '{') { sp->vocab = v; sp->vocab_end = s->p; }
    if (klen == 6 && !memcmp(key, "merges", 6) && c == '[') { sp->merges = v; sp->merges_end = s->p; }
    return LMC_OK;
}

static lmc_status top_member(void *ctx, const char *key, size_t klen, tok_jscan *s) {
    if (klen == 5 && !memcmp(key, "model", 5) && tok_js_peek(s) == '{') return tok_js_object(s, model_member, ctx);
    return tok_js_skip(s, 1);
}

/* Validate the whole document, find the big spans and return a copy of the text with
 * them replaced by null, for cJSON to parse quickly. */
static lmc_status slim_json(const char *json, size_t len, tok_spans *sp, char **slim, size_t *slim_len) {
    memset(sp, 0, sizeof *sp);
    sp->doc = json;
    tok_jscan s = {json, json, json + len};
    LMC_TRY(tok_js_object(&s, top_member, sp));
    if (tok_js_peek(&s) != -1) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: trailing characters after the top-level object");
    const char *cut[2][2] = {{sp->vocab, sp->vocab_end}, {sp->merges, sp->merges_end}};
    if (cut[0][0] && cut[1][0] && cut[1][0] < cut[0][0]) {
        const char *t0 = cut[0][0], *t1 = cut[0][1];
        cut[0][0] = cut[1][0]; cut[0][1] = cut[1][1];
        cut[1][0] = t0; cut[1][1] = t1;
    }
    tok_buf b = {0};
    const char *pos = json;
    for (int i = 0; i < 2; i++) {
        if (!cut[i][0]) continue;
        LMC_TRY(tok_buf_put(&b, pos, (size_t)(cut[i][0] - pos)));
        LMC_TRY(tok_buf_put(&b, "null", 4));
        pos = cut[i][1];
    }
    LMC_TRY(tok_buf_put(&b, pos, (size_t)(json + len - pos)));
    *slim = b.data;
    *slim_len = b.len;
    return LMC_OK;
}

lmc_status lmc_tokenizer_load_json(const char *json, size_t len, const char *config_json, size_t config_len,
                                   lmc_tokenizer **out) {
    if (!json || !out) return lmc_fail(LMC_ERR_ARG, "lmc_tokenizer_load_json: NULL argument");
    *out = NULL;
    lmc_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    tok->add_bos = tok->add_eos = -1;
    pthread_mutex_init(&tok->lock, NULL);
    tok_spans sp;
    char *slim = NULL;
    size_t slim_len = 0;
    cJSON *j = NULL;
    lmc_status st = slim_json(json, len, &sp, &slim, &slim_len);
    if (st >= 0) {
        j = cJSON_ParseWithLength(slim, slim_len);
        if (!j) st = lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: invalid JSON");
        else if (!cJSON_IsObject(j)) st = lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: expected an object");
    }
    free(slim);
    if (st >= 0) st = tok_model_parse_fast(cJSON_GetObjectItemCaseSensitive(j, "model"), &sp, &tok->model);
    if (st >= 0) st = tok_normalizer_parse(cJSON_GetObjectItemCaseSensitive(j, "normalizer"), &tok->norm);
    if (st >= 0) st = tok_pretok_parse(cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), &tok->pre);
    if (st >= 0) st = tok_decoder_parse(cJSON_GetObjectItemCaseSensitive(j, "decoder"), &tok->dec);
    if (st >= 0) st = parse_post(tok, cJSON_GetObjectItemCaseSensitive(j, "post_processor"));
    if (st >= 0) {
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), *it;
        if (at && !cJSON_IsNull(at) && !cJSON_IsArray(at)) st = lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: \"added_tokens\" must be a list");
        else cJSON_ArrayForEach(it, at) { if ((st = add_token(tok, it, -1)) < 0) break; }
    }
    if (j) cJSON_Delete(j);
    if (st >= 0 && config_json) st = parse_config(tok, config_json, config_len);
    if (st >= 0) st = build_added(tok);
    if (st < 0) { lmc_tokenizer_free(tok); return st; }
    *out = tok;
    return LMC_OK;
}

lmc_status lmc_tokenizer_load(const char *path, lmc_tokenizer **out) {
    if (!path || !out) return lmc_fail(LMC_ERR_ARG, "lmc_tokenizer_load: NULL argument");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return lmc_fail(LMC_ERR_NOT_FOUND, "tokenizer: %s does not exist", path);
    size_t pl = strlen(path);
    char *dir = malloc(pl + 64), *file = malloc(pl + 64);
    if (!dir || !file) { free(dir); free(file); return lmc_fail(LMC_ERR_NOMEM, "out of memory"); }
    if (S_ISDIR(sb.st_mode)) {
        snprintf(dir, pl + 64, "%s", path);
        snprintf(file, pl + 64, "%s/tokenizer.json", path);
    } else {
        snprintf(file, pl + 64, "%s", path);
        const char *slash = strrchr(path, '/');
        if (slash) snprintf(dir, pl + 64, "%.*s", (int)(slash - path), path);
        else snprintf(dir, pl + 64, ".");
    }
    char *json = NULL, *cfg = NULL;
    size_t jl = 0, cl = 0;
    char cpath[4096];
    lmc_status st = map_file(file, &json, &jl);
    if (st >= 0) {
        snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
        if (read_file(cpath, &cfg, &cl) < 0) { cfg = NULL; lmc_clear_error(); }
        st = lmc_tokenizer_load_json(json, jl, cfg, cl, out);
        if (st < 0) lmc_fail_context(st, "loading %s", file);
    }
    unmap_file(json, jl);
    free(cfg);
    free(dir);
    free(file);
    return st;
}

/* ---------------- encode ---------------- */

static void ctx_release(enc_ctx *c) {
    if (c->md) pcre2_match_data_free(c->md);
    tok_cache_free(c->cache);
    tok_pieces_free(&c->a);
    tok_pieces_free(&c->b);
    tok_buf_free(&c->norm);
    tok_buf_free(&c->tmp);
    memset(c, 0, sizeof *c);
}

static int is_word_char(uint32_t cp) { return tok_is_word(cp); }

static uint32_t last_cp(const char *s, size_t n) {
    size_t k = n - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    tok_utf8_next(s + k, n - k, &cp);
    return cp;
}

/* Split s[0..n) on the added tokens of trie t. For every stretch of plain text call
 * `plain(ctx, text, len, at_start)`; for every token push its id. */
typedef lmc_status (*plain_fn)(enc_ctx *c, const char *s, size_t n, int at_start);

static lmc_status split_added(enc_ctx *c, const trie *t, const char *s, size_t n, int at_start, plain_fn plain) {
    const lmc_tokenizer *tok = c->tok;
    size_t done = 0;  /* start of the pending plain text */
    if (!t->n_nodes) return n ? plain(c, s, n, at_start) : LMC_OK;
    for (size_t i = 0; i < n;) {
        if (!t->first[(unsigned char)s[i]]) { i++; continue; }
        size_t end = 0;
        int32_t idx = trie_longest(t, s, n, i, &end);
        if (idx < 0) { i++; continue; }
        const added_tok *a = &tok->added[idx];
        size_t ms = i, me = end;
        if (a->single_word) {
            int left_ok = ms == 0 || !is_word_char(last_cp(s, ms));
            uint32_t nc = 0;
            if (me < n) tok_utf8_next(s + me, n - me, &nc);
            int right_ok = me == n || !is_word_char(nc);
            if (!left_ok || !right_ok) { i = end; continue; }
        }
        if (a->lstrip) {
            while (ms > done) {
                size_t k = ms - 1;
                while (k > done && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
                uint32_t cp;
                tok_utf8_next(s + k, ms - k, &cp);
                if (!tok_is_whitespace(cp)) break;
                ms = k;
            }
        }
        if (a->rstrip) {
            while (me < n) {
                uint32_t cp;
                int l = tok_utf8_next(s + me, n - me, &cp);
                if (!tok_is_whitespace(cp)) break;
                me += (size_t)l;
            }
        }
        if (ms > done) LMC_TRY(plain(c, s + done, ms - done, at_start && done == 0));
        LMC_TRY(tok_ids_push(&c->ids, a->id));
        done = me;
        i = me > end ? me : end;
    }
    if (n > done) LMC_TRY(plain(c, s + done, n - done, at_start && done == 0));
    return LMC_OK;
}

static lmc_status encode_words(enc_ctx *c, const char *s, size_t n, int at_start) {
    const lmc_tokenizer *tok = c->tok;
    tok_pieces *in = &c->a, *tmp = &c->b;
    tok_pieces_clear(in);
    LMC_TRY(tok_pieces_add(in, s, n, at_start));
    LMC_TRY(tok_pretok_apply(tok->pre, &in, &tmp, c->md));
    for (int i = 0; i < in->n; i++)
        LMC_TRY(tok_model_tokenize(&tok->model, in->text.data + in->p[i].off, in->p[i].len, c->cache, &c->ids));
    return LMC_OK;
}

static lmc_status encode_plain(enc_ctx *c, const char *s, size_t n, int at_start) {
    const lmc_tokenizer *tok = c->tok;
    if (!tok->norm) return split_added(c, &tok->norm_trie, s, n, at_start, encode_words);
    LMC_TRY(tok_normalizer_apply(tok->norm, s, n, &c->norm, &c->tmp, c->md));
    if (c->norm.len == 0) return LMC_OK;
    /* encode_words never touches c->norm, so the normalized text stays valid */
    return split_added(c, &tok->norm_trie, c->norm.data, c->norm.len, at_start, encode_words);
}

static lmc_status post_process(const lmc_tokenizer *tok, tok_ids *ids) {
    for (int k = 0; k < tok->n_post; k++) {
        const post_step *ps = &tok->post[k];
        tok_ids out = {0};
        lmc_status st = LMC_OK;
        if (ps->kind == POST_WRAP) {
            st = tok_ids_push(&out, ps->cls);
            for (int i = 0; i < ids->n && st >= 0; i++) st = tok_ids_push(&out, ids->v[i]);
            if (st >= 0) st = tok_ids_push(&out, ps->sep);
        } else if (ps->kind == POST_TEMPLATE) {
            for (int t = 0; t < ps->n_items && st >= 0; t++) {
                const post_item *pi = &ps->items[t];
                if (pi->is_seq) for (int i = 0; i < ids->n && st >= 0; i++) st = tok_ids_push(&out, ids->v[i]);
                else for (int i = 0; i < pi->n && st >= 0; i++) st = tok_ids_push(&out, pi->ids[i]);
            }
        } else continue;
        if (st < 0) { free(out.v); return st; }
        free(ids->v);
        *ids = out;
    }
    return LMC_OK;
}

lmc_status lmc_tokenizer_encode(const lmc_tokenizer *tok, const char *text, size_t len, int add_special,
                                int32_t **ids, int *n_ids) {
    if (!tok || (!text && len) || !ids || !n_ids) return lmc_fail(LMC_ERR_ARG, "lmc_tokenizer_encode: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    if (len > (size_t)1 << 30) return lmc_fail(LMC_ERR_RANGE, "tokenizer: input of %zu bytes is too large", len);
    lmc_tokenizer *mt = (lmc_tokenizer *)tok;  /* only the mutex-guarded scratch is mutated */
    int shared = pthread_mutex_trylock(&mt->lock) == 0;
    enc_ctx local = {0}, *c = shared ? &mt->shared : &local;
    c->tok = tok;
    c->ids = (tok_ids){0};
    tok_buf clean = {0};
    lmc_status st = LMC_OK;
    if (len && !tok_utf8_valid(text, len)) {
        st = tok_utf8_sanitize(text, len, &clean);
        text = clean.data;
        len = clean.len;
    }
    if (!c->md) c->md = pcre2_match_data_create(32, NULL);
    if (!c->cache) c->cache = tok_cache_new();
    if (!c->md || !c->cache) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
    else if (shared && tok->model.kind == TOK_MODEL_BPE) st = tok_cache_enable_pairs(c->cache);
    if (st >= 0 && len) st = split_added(c, &tok->raw_trie, text, len, 1, encode_plain);
    if (st >= 0 && add_special) st = post_process(tok, &c->ids);
    if (st >= 0 && !c->ids.v) st = tok_ids_push(&c->ids, 0), c->ids.n = 0;
    tok_ids res = c->ids;
    c->ids = (tok_ids){0};
    /* do not keep the scratch of one huge input alive (the word cache stays) */
    if (shared && (c->a.text.cap > (16u << 20) || c->b.text.cap > (16u << 20) || c->norm.cap > (16u << 20))) {
        tok_pieces_free(&c->a);
        tok_pieces_free(&c->b);
        tok_buf_free(&c->norm);
        tok_buf_free(&c->tmp);
    }
    if (shared) pthread_mutex_unlock(&mt->lock);
    else ctx_release(&local);
    tok_buf_free(&clean);
    if (st < 0) { free(res.v); return st; }
    *ids = res.v;
    *n_ids = res.n;
    return LMC_OK;
}

lmc_status lmc_tokenizer_encode_chat(const lmc_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                                     int *n_ids) {
    return lmc_tokenizer_encode(tok, text, len, 0, ids, n_ids);
}

/* ---------------- decode and lookups ---------------- */

const char *lmc_tokenizer_id_to_token(const lmc_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab) return NULL;
    if (tok->id_added[id] >= 0) {
        /* as HF tokenizers 0.23: a normalized added token reads back in its normalized form */
        const added_tok *a = &tok->added[tok->id_added[id]];
        return a->norm ? a->norm : a->content;
    }
    return id < tok->model.n_vocab ? tok->model.id_to_tok[id] : NULL;
}

int32_t lmc_tokenizer_token_to_id(const lmc_tokenizer *tok, const char *token) {
    if (!tok || !token) return -1;
    size_t n = strlen(token);
    int32_t i = tok_strmap_get(&tok->added_map, token, n);
    if (i >= 0) return tok->added[i].id;
    return tok_strmap_get(&tok->model.vocab, token, n);
}

int lmc_tokenizer_is_special(const lmc_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab || tok->id_added[id] < 0) return 0;
    return tok->added[tok->id_added[id]].special;
}

lmc_status lmc_tokenizer_decode(const lmc_tokenizer *tok, const int32_t *ids, int n, int skip_special,
                                char **text, size_t *len) {
    if (!tok || (!ids && n) || n < 0 || !text) return lmc_fail(LMC_ERR_ARG, "lmc_tokenizer_decode: bad argument");
    *text = NULL;
    if (len) *len = 0;
    tok_pieces toks = {0}, tmp = {0};
    tok_buf out = {0};
    lmc_status st = LMC_OK;
    for (int i = 0; i < n && st >= 0; i++) {
        const char *t = lmc_tokenizer_id_to_token(tok, ids[i]);
        if (!t || (skip_special && lmc_tokenizer_is_special(tok, ids[i]))) continue;
        st = tok_pieces_add(&toks, t, strlen(t), 0);
    }
    if (st >= 0) st = tok_decoder_run(tok->dec, &toks, &tmp, &out);
    tok_pieces_free(&toks);
    tok_pieces_free(&tmp);
    if (st < 0) { tok_buf_free(&out); return st; }
    *text = out.data;
    if (len) *len = out.len;
    return LMC_OK;
}

int lmc_tokenizer_n_vocab(const lmc_tokenizer *tok) { return tok ? tok->n_vocab : 0; }
const char *lmc_tokenizer_bos_token(const lmc_tokenizer *tok) { return tok ? tok->bos : NULL; }
const char *lmc_tokenizer_eos_token(const lmc_tokenizer *tok) { return tok ? tok->eos : NULL; }
int32_t lmc_tokenizer_bos_id(const lmc_tokenizer *tok) { return tok && tok->bos ? lmc_tokenizer_token_to_id(tok, tok->bos) : -1; }
int32_t lmc_tokenizer_eos_id(const lmc_tokenizer *tok) { return tok && tok->eos ? lmc_tokenizer_token_to_id(tok, tok->eos) : -1; }
int lmc_tokenizer_add_bos(const lmc_tokenizer *tok) { return tok ? tok->add_bos : -1; }
int lmc_tokenizer_add_eos(const lmc_tokenizer *tok) { return tok ? tok->add_eos : -1; }

