/* gguf_tok.c — tokenizer.ggml.* (llama.cpp GGUF vocabularies) <-> Hugging Face tokenizer.json.
 *
 * Reading: the token, type, score and merge arrays become a tokenizer.json that lmc's
 * tokenizer loads (byte-level BPE for "gpt2" with the split regex llama.cpp uses for the
 * pre name; SentencePiece-style BPE with byte fallback for "llama", its merges derived
 * from the scores). Writing: the reverse, as convert_hf_to_gguf.py lays the keys out.
 * Everything allocated here is freed before a function returns, except the text handed
 * to the caller.
 */
#include "io/gguf_tok.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS (1 << 24)

/* The split regexes of llama.cpp's pre-tokenizer types, in the spelling HF's tokenizer.json uses
 * for the same models ((?i:...) for the contractions). */
#define RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GPT-4o's o200k split (llama.cpp's "gpt-4o"; gpt-oss): case-aware letter runs with the contraction as
 * a suffix, digits in threes, a punctuation run that takes a trailing '/' */
#define RE_GPT4O                                                                                                      \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* llama.cpp's "default": four splits one after the other; "smollm": digits, then GPT-2's */
static const char *const k_default_seq[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};
static const char *const k_smollm_seq[] = {"\\p{N}", RE_GPT2, NULL};

typedef struct pre_def {
    const char *name;
    const char *regex; /* NULL: GPT-2's regex, i.e. the ByteLevel pre-tokenizer with use_regex */
    const char *const *seq; /* several splits in turn (when regex is NULL) */
    int ignore_merges; /* llama.cpp ignores merges for whole-word vocabulary hits (Llama 3) */
    int nfc;           /* HF's tokenizer.json normalizes to NFC first (Qwen 2) */
    int add_bos;       /* llama.cpp's default when tokenizer.ggml.add_bos_token is absent */
} pre_def;

/* llama.cpp's names for each pre-tokenizer type (llama-vocab.cpp); "default" first. */
static const pre_def k_pre[] = {
    {"default", NULL, k_default_seq, 0, 0, 0}, {"smollm", NULL, k_smollm_seq, 0, 0, 0},
    {"llama-bpe", RE_LLAMA3, NULL, 1, 0, 1}, {"llama3", RE_LLAMA3, NULL, 1, 0, 1}, {"llama-v3", RE_LLAMA3, NULL, 1, 0, 1},
    {"falcon3", RE_LLAMA3, NULL, 1, 0, 1}, {"falcon-h1", RE_LLAMA3, NULL, 1, 0, 1}, {"pixtral", RE_LLAMA3, NULL, 1, 0, 1},
    {"midm-2.0", RE_LLAMA3, NULL, 1, 0, 1}, {"lfm2", RE_LLAMA3, NULL, 1, 0, 1}, {"jina-v5-nano", RE_LLAMA3, NULL, 1, 0, 1},
    {"qwen2", RE_QWEN2, NULL, 0, 1, 0}, {"deepseek-r1-qwen", RE_QWEN2, NULL, 0, 1, 0}, {"kormo", RE_QWEN2, NULL, 0, 1, 0},
    {"megrez", RE_QWEN2, NULL, 0, 1, 0}, {"gpt-4o", RE_GPT4O, NULL, 0, 0, 0},
    {"gpt-2", NULL, NULL, 0, 0, 0}, {"phi-2", NULL, NULL, 0, 0, 0}, {"gigachat", NULL, NULL, 0, 0, 0}, {"a.x-4.0", NULL, NULL, 0, 0, 0},
    {"mellum", NULL, NULL, 0, 0, 0}, {"exaone4", NULL, NULL, 0, 0, 0},
};

/* ---- a token table with a string -> id hash ------------------------------------------------ */

typedef struct tokv {
    int64_t n;
    const char **tok; /* NUL-terminated (owned through `own` or borrowed) */
    size_t *len;
    int32_t *type;
    float *score;     /* NULL when the file has none */
    int64_t *ht;      /* id + 1, 0 = empty */
    uint64_t cap;
    char **own;       /* copies to free, n entries (NULL where borrowed) */
} tokv;

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static int64_t tokv_find(const tokv *v, const char *s, size_t n) {
    for (uint64_t i = fnv(s, n) & (v->cap - 1);; i = (i + 1) & (v->cap - 1)) {
        int64_t e = v->ht[i];
        if (!e) return -1;
        if (v->len[e - 1] == n && memcmp(v->tok[e - 1], s, n) == 0) return e - 1;
    }
}

static void tokv_free(tokv *v) {
    if (v->own)
        for (int64_t i = 0; i < v->n; i++) free(v->own[i]);
    free(v->own);
    free(v->tok);
    free(v->len);
    free(v->type);
    free(v->score);
    free(v->ht);
    memset(v, 0, sizeof *v);
}

static lmc_status tokv_alloc(tokv *v, int64_t n) {
    memset(v, 0, sizeof *v);
    v->n = n;
    v->cap = 16;
    while (v->cap < (uint64_t)n * 2) v->cap <<= 1;
    v->tok = calloc((size_t)n, sizeof *v->tok);
    v->len = calloc((size_t)n, sizeof *v->len);
    v->type = calloc((size_t)n, sizeof *v->type);
    v->own = calloc((size_t)n, sizeof *v->own);
    v->ht = calloc(v->cap, sizeof *v->ht);
    if (!v->tok || !v->len || !v->type || !v->own || !v->ht) {
        tokv_free(v);
        return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory for %lld tokens", (long long)n);
    }
    return LMC_OK;
}

/* Index every token (the first of duplicates wins, as a JSON object keeps one). */
static void tokv_index(tokv *v) {
    for (int64_t id = 0; id < v->n; id++) {
        if (tokv_find(v, v->tok[id], v->len[id]) >= 0) continue;
        uint64_t i = fnv(v->tok[id], v->len[id]) & (v->cap - 1);
        while (v->ht[i]) i = (i + 1) & (v->cap - 1);
        v->ht[i] = id + 1;
    }
}

/* ---- GGUF -> tokenizer.json ----------------------------------------------------------------- */

static lmc_status read_vocab(const lmc_gguf *g, tokv *v) {
    lmc_gguf_array a;
    memset(v, 0, sizeof *v);
    LMC_TRY(lmc_gguf_get_arr(g, "tokenizer.ggml.tokens", &a));
    if (a.elem_type != LMC_GGUF_STRING)
        return lmc_fail(LMC_ERR_FORMAT, "tokenizer.ggml.tokens: an array of %s, not of strings", lmc_gguf_vtype_name(a.elem_type));
    if (a.n == 0 || a.n > MAX_TOKENS) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens", (unsigned long long)a.n);
    LMC_TRY(tokv_alloc(v, (int64_t)a.n));
    for (uint64_t i = 0; i < a.n; i++) {
        const char *s;
        size_t n;
        lmc_status st = lmc_gguf_arr_str(&a, i, &s, &n);
        if (st < 0) return st;
        if (memchr(s, 0, n)) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.ggml.tokens[%llu] holds a NUL byte", (unsigned long long)i);
        if (!(v->own[i] = malloc(n + 1))) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
        memcpy(v->own[i], s, n);
        v->own[i][n] = 0;
        v->tok[i] = v->own[i];
        v->len[i] = n;
        v->type[i] = LMC_GGUF_TOKEN_NORMAL;
    }
    if (lmc_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        LMC_TRY(lmc_gguf_get_arr(g, "tokenizer.ggml.token_type", &a));
        if (a.n != (uint64_t)v->n)
            return lmc_fail(LMC_ERR_FORMAT, "tokenizer.ggml.token_type has %llu entries for %lld tokens", (unsigned long long)a.n, (long long)v->n);
        for (uint64_t i = 0; i < a.n; i++) {
            int64_t t;
            LMC_TRY(lmc_gguf_arr_int(&a, i, &t));
            if (t < LMC_GGUF_TOKEN_NORMAL || t > LMC_GGUF_TOKEN_BYTE)
                return lmc_fail(LMC_ERR_FORMAT, "tokenizer.ggml.token_type[%llu] = %lld is not a token type", (unsigned long long)i, (long long)t);
            v->type[i] = (int32_t)t;
        }
    }
    if (lmc_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
        LMC_TRY(lmc_gguf_get_arr(g, "tokenizer.ggml.scores", &a));
        if (a.n != (uint64_t)v->n)
            return lmc_fail(LMC_ERR_FORMAT, "tokenizer.ggml.scores has %llu entries for %lld tokens", (unsigned long long)a.n, (long long)v->n);
        if (!(v->score = malloc((size_t)v->n * sizeof *v->score))) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
        for (uint64_t i = 0; i < a.n; i++) {
            double d;
            LMC_TRY(lmc_gguf_arr_float(&a, i, &d));
            v->score[i] = (float)d;
        }
    }
    tokv_index(v);
    return LMC_OK;
}

/* An optional token id key: -1 when absent; an id outside the vocabulary is an error. */
static lmc_status opt_id(const lmc_gguf *g, const char *key, int64_t n, int64_t *out) {
    *out = -1;
    if (lmc_gguf_find_key(g, key) < 0) return LMC_OK;
    LMC_TRY(lmc_gguf_get_int(g, key, out));
    if (*out < 0 || *out >= n) return lmc_fail(LMC_ERR_FORMAT, "%s = %lld is outside the %lld-token vocabulary", key, (long long)*out, (long long)n);
    return LMC_OK;
}

static int opt_bool(const lmc_gguf *g, const char *key, int dflt) {
    int b;
    if (lmc_gguf_find_key(g, key) < 0 || lmc_gguf_get_bool(g, key, &b) < 0) {
        lmc_clear_error();
        return dflt;
    }
    return b;
}

/* cJSON building helpers: a NULL anywhere is caught once at the end (cJSON ignores NULL items). */
static cJSON *obj_type(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static cJSON *byte_level(int trim, int use_regex) {
    cJSON *o = obj_type("ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", 0);
    cJSON_AddBoolToObject(o, "trim_offsets", trim);
    cJSON_AddBoolToObject(o, "use_regex", use_regex);
    return o;
}

static cJSON *replace(const char *from, const char *to) {
    cJSON *o = obj_type("Replace"), *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "String", from);
    cJSON_AddItemToObject(o, "pattern", p);
    cJSON_AddStringToObject(o, "content", to);
    return o;
}

static cJSON *template_piece(const char *kind, const char *id) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateObject();
    cJSON_AddStringToObject(in, "id", id);
    cJSON_AddNumberToObject(in, "type_id", 0);
    cJSON_AddItemToObject(o, kind, in);
    return o;
}

/* TemplateProcessing with optional BOS before and EOS after each sequence. */
static cJSON *template_post(const tokv *v, int64_t bos, int64_t eos) {
    cJSON *o = obj_type("TemplateProcessing"), *single = cJSON_CreateArray(), *pair = cJSON_CreateArray();
    cJSON *sp = cJSON_CreateObject();
    for (int seq = 0; seq < 2; seq++) {
        cJSON *arr = seq ? pair : single;
        for (int part = 0; part < (seq ? 2 : 1); part++) {
            if (bos >= 0) cJSON_AddItemToArray(arr, template_piece("SpecialToken", v->tok[bos]));
            cJSON_AddItemToArray(arr, template_piece("Sequence", part ? "B" : "A"));
            if (eos >= 0) cJSON_AddItemToArray(arr, template_piece("SpecialToken", v->tok[eos]));
        }
    }
    for (int k = 0; k < 2; k++) {
        int64_t id = k ? eos : bos;
        if (id < 0 || cJSON_GetObjectItemCaseSensitive(sp, v->tok[id])) continue;
        cJSON *e = cJSON_CreateObject(), *ids = cJSON_CreateArray(), *toks = cJSON_CreateArray();
        cJSON_AddStringToObject(e, "id", v->tok[id]);
        cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)id));
        cJSON_AddItemToArray(toks, cJSON_CreateString(v->tok[id]));
        cJSON_AddItemToObject(e, "ids", ids);
        cJSON_AddItemToObject(e, "tokens", toks);
        cJSON_AddItemToObject(sp, v->tok[id], e);
    }
    cJSON_AddItemToObject(o, "single", single);
    cJSON_AddItemToObject(o, "pair", pair);
    cJSON_AddItemToObject(o, "special_tokens", sp);
    return o;
}

static cJSON *merge_pair(const char *a, size_t na, const char *b, size_t nb) {
    cJSON *m = cJSON_CreateArray();
    char *s = malloc(na + nb + 2);
    if (!s) return m;
    memcpy(s, a, na);
    s[na] = 0;
    memcpy(s + na + 1, b, nb);
    s[na + 1 + nb] = 0;
    cJSON_AddItemToArray(m, cJSON_CreateString(s));
    cJSON_AddItemToArray(m, cJSON_CreateString(s + na + 1));
    free(s);
    return m;
}

/* "a b" merges of a gpt2 vocabulary (split at the first space after the first byte, as llama.cpp). */
static lmc_status gpt2_merges(const lmc_gguf *g, const tokv *v, cJSON *out) {
    lmc_gguf_array a;
    if (lmc_gguf_find_key(g, "tokenizer.ggml.merges") < 0) return lmc_fail(LMC_ERR_FORMAT, "gpt2 tokenizer without tokenizer.ggml.merges");
    LMC_TRY(lmc_gguf_get_arr(g, "tokenizer.ggml.merges", &a));
    if (a.elem_type != LMC_GGUF_STRING) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.ggml.merges: not an array of strings");
    char *buf = NULL;
    size_t cap = 0;
    for (uint64_t i = 0; i < a.n; i++) {
        const char *s;
        size_t n;
        LMC_TRY(lmc_gguf_arr_str(&a, i, &s, &n));
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) {
            free(buf);
            return lmc_fail(LMC_ERR_FORMAT, "tokenizer.ggml.merges[%llu] has no space between two tokens", (unsigned long long)i);
        }
        size_t na = (size_t)(sp - s), nb = n - na - 1;
        if (n > cap) {
            char *nbuf = realloc(buf, cap = n * 2);
            if (!nbuf) {
                free(buf);
                return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
            }
            buf = nbuf;
        }
        memcpy(buf, s, na);
        memcpy(buf + na, sp + 1, nb);
        if (tokv_find(v, s, na) < 0 || tokv_find(v, sp + 1, nb) < 0 || tokv_find(v, buf, na + nb) < 0) {
            free(buf);
            return lmc_fail(LMC_ERR_FORMAT, "tokenizer.ggml.merges[%llu] \"%.*s\" names a token outside the vocabulary",
                            (unsigned long long)i, (int)(n > 60 ? 60 : n), s);
        }
        cJSON_AddItemToArray(out, merge_pair(s, na, sp + 1, nb));
    }
    free(buf);
    return LMC_OK;
}

typedef struct spm_merge {
    float score;
    int32_t merged, left, right;
} spm_merge;

static int cmp_merge(const void *pa, const void *pb) {
    const spm_merge *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->merged != b->merged) return a->merged < b->merged ? -1 : 1;
    if (a->left != b->left) return a->left < b->left ? -1 : 1;
    return (a->right > b->right) - (a->right < b->right);
}

static int piece_ok(const tokv *v, int64_t id) {
    return id >= 0 && (v->type[id] == LMC_GGUF_TOKEN_NORMAL || v->type[id] == LMC_GGUF_TOKEN_USER_DEFINED);
}

/* SentencePiece BPE: every split of a normal piece into two known pieces is a merge, ranked
 * by the merged piece's score (higher first), then by ids — llama.cpp's SPM tokenizer merges
 * the best-scoring pair first. */
static lmc_status spm_merges(const tokv *v, cJSON *out) {
    size_t n = 0, cap = 1024;
    spm_merge *m = malloc(cap * sizeof *m);
    if (!m) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
    for (int64_t id = 0; id < v->n; id++) {
        if (!piece_ok(v, id)) continue; /* user-defined pieces too: Gemma's whitespace runs are both */
        const char *s = v->tok[id];
        for (size_t k = 1; k < v->len[id]; k++) {
            if (((uint8_t)s[k] & 0xC0) == 0x80) continue;
            int64_t l = tokv_find(v, s, k), r = tokv_find(v, s + k, v->len[id] - k);
            if (!piece_ok(v, l) || !piece_ok(v, r)) continue;
            if (n == cap) {
                spm_merge *nm = realloc(m, (cap *= 2) * sizeof *m);
                if (!nm) {
                    free(m);
                    return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
                }
                m = nm;
            }
            m[n++] = (spm_merge){v->score ? v->score[id] : 0.0f, (int32_t)id, (int32_t)l, (int32_t)r};
        }
    }
    qsort(m, n, sizeof *m, cmp_merge);
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(out, merge_pair(v->tok[m[i].left], v->len[m[i].left], v->tok[m[i].right], v->len[m[i].right]));
    free(m);
    return LMC_OK;
}

static cJSON *build_json(const lmc_gguf *g, const tokv *v, int spm, const pre_def *pre, int64_t bos, int64_t eos,
                         int64_t unk, int add_bos, int add_eos, lmc_status *st) {
    cJSON *root = cJSON_CreateObject(), *added = cJSON_CreateArray(), *model = obj_type("BPE");
    cJSON *vocab = cJSON_CreateObject(), *merges = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    for (int64_t id = 0; id < v->n; id++) {
        int t = v->type[id];
        if (t == LMC_GGUF_TOKEN_CONTROL || t == LMC_GGUF_TOKEN_UNKNOWN || t == LMC_GGUF_TOKEN_USER_DEFINED) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)id);
            cJSON_AddStringToObject(a, "content", v->tok[id]);
            cJSON_AddBoolToObject(a, "single_word", 0);
            cJSON_AddBoolToObject(a, "lstrip", 0);
            cJSON_AddBoolToObject(a, "rstrip", 0);
            cJSON_AddBoolToObject(a, "normalized", 0);
            cJSON_AddBoolToObject(a, "special", t != LMC_GGUF_TOKEN_USER_DEFINED);
            cJSON_AddItemToArray(added, a);
        }
        if (tokv_find(v, v->tok[id], v->len[id]) == id) cJSON_AddItemToObject(vocab, v->tok[id], cJSON_CreateNumber((double)id));
    }
    cJSON_AddItemToObject(root, "added_tokens", added);
    cJSON *post = NULL;
    if (spm) {
        int prefix = opt_bool(g, "tokenizer.ggml.add_space_prefix", 1);
        cJSON *norm = obj_type("Sequence"), *ns = cJSON_CreateArray();
        if (prefix) {
            cJSON *p = obj_type("Prepend");
            cJSON_AddStringToObject(p, "prepend", "\xe2\x96\x81");
            cJSON_AddItemToArray(ns, p);
        }
        cJSON_AddItemToArray(ns, replace(" ", "\xe2\x96\x81"));
        cJSON_AddItemToObject(norm, "normalizers", ns);
        cJSON_AddItemToObject(root, "normalizer", norm);
        cJSON_AddNullToObject(root, "pre_tokenizer");
        cJSON *dec = obj_type("Sequence"), *ds = cJSON_CreateArray();
        cJSON_AddItemToArray(ds, replace("\xe2\x96\x81", " "));
        cJSON_AddItemToArray(ds, obj_type("ByteFallback"));
        cJSON_AddItemToArray(ds, obj_type("Fuse"));
        if (prefix) {
            cJSON *strip = obj_type("Strip");
            cJSON_AddStringToObject(strip, "content", " ");
            cJSON_AddNumberToObject(strip, "start", 1);
            cJSON_AddNumberToObject(strip, "stop", 0);
            cJSON_AddItemToArray(ds, strip);
        }
        cJSON_AddItemToObject(dec, "decoders", ds);
        if ((add_bos && bos >= 0) || (add_eos && eos >= 0)) post = template_post(v, add_bos ? bos : -1, add_eos ? eos : -1);
        cJSON_AddItemToObject(root, "post_processor", post ? post : cJSON_CreateNull());
        cJSON_AddItemToObject(root, "decoder", dec);
    } else {
        if (pre->nfc) cJSON_AddItemToObject(root, "normalizer", obj_type("NFC"));
        else cJSON_AddNullToObject(root, "normalizer");
        if (pre->regex || pre->seq) {
            cJSON *seq = obj_type("Sequence"), *ps = cJSON_CreateArray();
            const char *one[] = {pre->regex, NULL};
            for (const char *const *re = pre->regex ? one : pre->seq; *re; re++) {
                cJSON *split = obj_type("Split"), *pat = cJSON_CreateObject();
                cJSON_AddStringToObject(pat, "Regex", *re);
                cJSON_AddItemToObject(split, "pattern", pat);
                cJSON_AddStringToObject(split, "behavior", "Isolated");
                cJSON_AddBoolToObject(split, "invert", 0);
                cJSON_AddItemToArray(ps, split);
            }
            cJSON_AddItemToArray(ps, byte_level(0, 0));
            cJSON_AddItemToObject(seq, "pretokenizers", ps);
            cJSON_AddItemToObject(root, "pre_tokenizer", seq);
        } else {
            cJSON_AddItemToObject(root, "pre_tokenizer", byte_level(1, 1));
        }
        if ((add_bos && bos >= 0) || (add_eos && eos >= 0)) post = template_post(v, add_bos ? bos : -1, add_eos ? eos : -1);
        cJSON_AddItemToObject(root, "post_processor", post ? post : byte_level(0, 0));
        cJSON_AddItemToObject(root, "decoder", byte_level(0, 0));
    }
    cJSON_AddNullToObject(model, "dropout");
    if (spm && unk >= 0) cJSON_AddStringToObject(model, "unk_token", v->tok[unk]);
    else cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", spm);
    cJSON_AddBoolToObject(model, "byte_fallback", spm);
    cJSON_AddBoolToObject(model, "ignore_merges", !spm && pre->ignore_merges);
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON_AddItemToObject(model, "merges", merges);
    cJSON_AddItemToObject(root, "model", model);
    /* SPM: merges from the scores, unless the file also lists HF's merges (convert_hf_to_gguf.py's
     * tokenizer.json path writes them with flat -1000 scores, which would rank nothing) */
    *st = spm && lmc_gguf_find_key(g, "tokenizer.ggml.merges") < 0 ? spm_merges(v, merges) : gpt2_merges(g, v, merges);
    return root;
}

static cJSON *build_config(const lmc_gguf *g, const tokv *v, int64_t bos, int64_t eos, int64_t unk, int64_t pad,
                           int add_bos, int add_eos) {
    cJSON *c = cJSON_CreateObject();
    if (bos >= 0) cJSON_AddStringToObject(c, "bos_token", v->tok[bos]);
    if (eos >= 0) cJSON_AddStringToObject(c, "eos_token", v->tok[eos]);
    if (unk >= 0) cJSON_AddStringToObject(c, "unk_token", v->tok[unk]);
    if (pad >= 0) cJSON_AddStringToObject(c, "pad_token", v->tok[pad]);
    cJSON_AddBoolToObject(c, "add_bos_token", add_bos);
    cJSON_AddBoolToObject(c, "add_eos_token", add_eos);
    const char *tmpl;
    if (lmc_gguf_find_key(g, "tokenizer.chat_template") >= 0 && lmc_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL) == LMC_OK)
        cJSON_AddStringToObject(c, "chat_template", tmpl);
    lmc_clear_error();
    return c;
}

lmc_status lmc_gguf_tokenizer_json(const lmc_gguf *g, char **json, size_t *len, char **config_json) {
    *json = NULL;
    *len = 0;
    if (config_json) *config_json = NULL;
    const char *model;
    if (lmc_gguf_find_key(g, "tokenizer.ggml.model") < 0) return lmc_fail(LMC_ERR_NOT_FOUND, "no tokenizer.ggml.model in the GGUF file");
    LMC_TRY(lmc_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL));
    int spm;
    if (strcmp(model, "gpt2") == 0) spm = 0;
    else if (strcmp(model, "llama") == 0) spm = 1;
    else if (strcmp(model, "none") == 0 || !*model)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "the GGUF file has no tokenizer (tokenizer.ggml.model \"%s\"): give token ids", model);
    else
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tokenizer.ggml.model \"%.40s\" is not supported (gpt2, llama are)", model);
    const pre_def *pre = &k_pre[0]; /* "default" */
    if (!spm && lmc_gguf_find_key(g, "tokenizer.ggml.pre") >= 0) {
        const char *name;
        LMC_TRY(lmc_gguf_get_str(g, "tokenizer.ggml.pre", &name, NULL));
        pre = NULL;
        for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
            if (strcmp(name, k_pre[i].name) == 0) pre = &k_pre[i];
        if (!pre)
            return lmc_fail(LMC_ERR_UNSUPPORTED, "tokenizer.ggml.pre \"%.60s\" is not supported (the llama-bpe, qwen2 and gpt-2 families and default are)", name);
    }
    tokv v;
    lmc_status st = read_vocab(g, &v);
    if (st < 0) {
        tokv_free(&v);
        return st;
    }
    int64_t bos, eos, unk, pad;
    if ((st = opt_id(g, "tokenizer.ggml.bos_token_id", v.n, &bos)) < 0 || (st = opt_id(g, "tokenizer.ggml.eos_token_id", v.n, &eos)) < 0 ||
        (st = opt_id(g, "tokenizer.ggml.unknown_token_id", v.n, &unk)) < 0 ||
        (st = opt_id(g, "tokenizer.ggml.padding_token_id", v.n, &pad)) < 0) {
        tokv_free(&v);
        return st;
    }
    if (spm) { /* llama.cpp's SPM defaults when the keys are absent: unk 0, bos 1, eos 2 */
        if (bos < 0 && lmc_gguf_find_key(g, "tokenizer.ggml.bos_token_id") < 0 && v.n > 1) bos = 1;
        if (eos < 0 && lmc_gguf_find_key(g, "tokenizer.ggml.eos_token_id") < 0 && v.n > 2) eos = 2;
    }
    if (spm && unk < 0) {
        for (int64_t i = 0; i < v.n && unk < 0; i++)
            if (v.type[i] == LMC_GGUF_TOKEN_UNKNOWN) unk = i;
        if (unk < 0) unk = tokv_find(&v, "<unk>", 5);
    }
    int add_bos = opt_bool(g, "tokenizer.ggml.add_bos_token", spm ? 1 : pre->add_bos);
    int add_eos = opt_bool(g, "tokenizer.ggml.add_eos_token", 0);
    cJSON *root = build_json(g, &v, spm, pre, bos, eos, unk, add_bos, add_eos, &st);
    cJSON *cfg = st == LMC_OK && config_json ? build_config(g, &v, bos, eos, unk, pad, add_bos, add_eos) : NULL;
    tokv_free(&v);
    if (st == LMC_OK) {
        *json = root ? cJSON_PrintUnformatted(root) : NULL;
        if (config_json) *config_json = cfg ? cJSON_PrintUnformatted(cfg) : NULL;
        if (!*json || (config_json && !*config_json)) {
            free(*json);
            if (config_json) free(*config_json), *config_json = NULL;
            *json = NULL;
            st = lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory building tokenizer.json");
        } else {
            *len = strlen(*json);
        }
    }
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return st;
}

/* ---- tokenizer.json -> tokenizer.ggml.* ----------------------------------------------------- */

/* The Split regex and ByteLevel use_regex of a pre_tokenizer (single or Sequence). */
static void find_pre(const cJSON *p, const char **regex, int *bl_regex, int *has_bl) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
    if (!cJSON_IsString(t)) return;
    if (strcmp(t->valuestring, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers")) find_pre(e, regex, bl_regex, has_bl);
    } else if (strcmp(t->valuestring, "Split") == 0) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "pattern"), "Regex");
        if (cJSON_IsString(r)) *regex = r->valuestring;
    } else if (strcmp(t->valuestring, "ByteLevel") == 0) {
        *has_bl = 1;
        *bl_regex = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(p, "use_regex"));
    }
}

static const char *token_text(const cJSON *t) {
    if (cJSON_IsString(t)) return t->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(t, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static int is_byte_piece(const char *s) {
    return strlen(s) == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && strchr("0123456789ABCDEF", s[3]) &&
           strchr("0123456789ABCDEF", s[4]);
}

typedef struct wctx {
    cJSON *j, *cfg;
    tokv v;
    char **merges; /* "a b" */
    size_t n_merges;
    float *scores;
} wctx;

static void wctx_free(wctx *c) {
    for (size_t i = 0; i < c->n_merges; i++) free(c->merges[i]);
    free(c->merges);
    free(c->scores);
    tokv_free(&c->v);
    cJSON_Delete(c->j);
    cJSON_Delete(c->cfg);
}

static lmc_status write_ggml(wctx *c, lmc_gguf_writer *w, int write_ids) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(c->j, "model");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "BPE") != 0)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "tokenizer.json model %s: only BPE has a tokenizer.ggml form here",
                        cJSON_IsString(mt) ? mt->valuestring : "(none)");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *added = cJSON_GetObjectItemCaseSensitive(c->j, "added_tokens");
    if (!cJSON_IsObject(vocab)) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: model.vocab is not an object");
    int64_t n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_TOKENS || e->valuedouble != (double)(int64_t)e->valuedouble)
            return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: vocab id of \"%.40s\" is not a small non-negative integer", e->string);
        if ((int64_t)e->valuedouble + 1 > n) n = (int64_t)e->valuedouble + 1;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= MAX_TOKENS || !token_text(e))
            return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: an added token without a valid id and content");
        if ((int64_t)id->valuedouble + 1 > n) n = (int64_t)id->valuedouble + 1;
    }
    if (n == 0) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: empty vocabulary");
    LMC_TRY(tokv_alloc(&c->v, n));
    tokv *v = &c->v;
    int spm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    cJSON_ArrayForEach(e, vocab) {
        int64_t id = (int64_t)e->valuedouble;
        v->tok[id] = e->string;
        v->type[id] = spm && is_byte_piece(e->string) ? LMC_GGUF_TOKEN_BYTE : LMC_GGUF_TOKEN_NORMAL;
    }
    const char *unk = token_text(cJSON_GetObjectItemCaseSensitive(model, "unk_token"));
    cJSON_ArrayForEach(e, added) {
        int64_t id = (int64_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        v->tok[id] = token_text(e);
        int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"));
        v->type[id] = spm && unk && strcmp(unk, v->tok[id]) == 0 ? LMC_GGUF_TOKEN_UNKNOWN
                      : special                                  ? LMC_GGUF_TOKEN_CONTROL
                                                                 : LMC_GGUF_TOKEN_USER_DEFINED;
    }
    for (int64_t id = 0; id < n; id++) {
        if (!v->tok[id]) { /* a hole in the ids: llama.cpp's placeholder */
            char buf[32];
            snprintf(buf, sizeof buf, "[PAD%lld]", (long long)id);
            if (!(v->own[id] = strdup(buf))) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
            v->tok[id] = v->own[id];
            v->type[id] = LMC_GGUF_TOKEN_UNUSED;
        }
        v->len[id] = strlen(v->tok[id]);
    }
    tokv_index(v);

    const char *pre_name = "default";
    if (!spm) {
        const char *regex = NULL;
        int bl_regex = 0, has_bl = 0;
        find_pre(cJSON_GetObjectItemCaseSensitive(c->j, "pre_tokenizer"), &regex, &bl_regex, &has_bl);
        if (!has_bl) return lmc_fail(LMC_ERR_UNSUPPORTED, "tokenizer.json: a BPE without byte fallback nor a ByteLevel pre-tokenizer");
        if (regex && strcmp(regex, RE_LLAMA3) == 0) pre_name = "llama-bpe";
        else if (regex && strcmp(regex, RE_QWEN2) == 0) pre_name = "qwen2";
        else if (regex && strcmp(regex, RE_GPT4O) == 0) pre_name = "gpt-4o";
        else if (!regex && bl_regex) pre_name = "gpt-2";
        else return lmc_fail(LMC_ERR_UNSUPPORTED, "tokenizer.json: a pre-tokenizer regex without a llama.cpp pre name here (llama-bpe, qwen2, gpt-4o, gpt-2)");
    }

    /* merges, as "a b" */
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    size_t nm = (size_t)cJSON_GetArraySize(merges);
    if (!(c->merges = calloc(nm ? nm : 1, sizeof *c->merges))) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
    cJSON_ArrayForEach(e, merges) {
        const char *a = NULL, *b = NULL;
        char *s;
        if (cJSON_IsString(e)) {
            s = strdup(e->valuestring);
        } else {
            if (cJSON_GetArraySize(e) == 2) a = cJSON_GetArrayItem(e, 0)->valuestring, b = cJSON_GetArrayItem(e, 1)->valuestring;
            if (!a || !b) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: a merge is neither \"a b\" nor [a, b]");
            size_t na = strlen(a), nb = strlen(b);
            if ((s = malloc(na + nb + 2))) {
                memcpy(s, a, na);
                s[na] = ' ';
                memcpy(s + na + 1, b, nb + 1);
            }
        }
        if (!s) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
        c->merges[c->n_merges++] = s;
    }
    if (spm) { /* score of a piece = -(rank of the first merge producing it) */
        if (!(c->scores = malloc((size_t)n * sizeof *c->scores))) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
        for (int64_t id = 0; id < n; id++) c->scores[id] = piece_ok(v, id) ? -(float)(nm + (size_t)id) : 0.0f;
        for (size_t i = 0; i < c->n_merges; i++) {
            char *s = c->merges[i], *sp = strchr(s + (s[0] != 0), ' ');
            if (!sp) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json: merge \"%.40s\" has no space", s);
            size_t na = (size_t)(sp - s), nb = strlen(sp + 1);
            char *cat = malloc(na + nb + 1);
            if (!cat) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
            memcpy(cat, s, na);
            memcpy(cat + na, sp + 1, nb + 1);
            int64_t id = tokv_find(v, cat, na + nb);
            free(cat);
            if (piece_ok(v, id) && c->scores[id] < -(float)i) c->scores[id] = -(float)i;
        }
    }

    LMC_TRY(lmc_gguf_writer_add_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2"));
    LMC_TRY(lmc_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre_name));
    LMC_TRY(lmc_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", v->tok, (uint64_t)n));
    if (spm) LMC_TRY(lmc_gguf_writer_add_arr(w, "tokenizer.ggml.scores", LMC_GGUF_F32, c->scores, (uint64_t)n));
    LMC_TRY(lmc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LMC_GGUF_I32, v->type, (uint64_t)n));
    if (!spm) LMC_TRY(lmc_gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", (const char *const *)c->merges, c->n_merges));
    if (spm) { /* the ▁ that HF prepends (Prepend normalizer or Metaspace prepend_scheme) */
        int prefix = 0;
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(c->j, "normalizer"), *pre = cJSON_GetObjectItemCaseSensitive(c->j, "pre_tokenizer");
        const cJSON *ns = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
        if (cJSON_IsArray(ns)) {
            cJSON_ArrayForEach(e, ns) prefix |= cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "prepend"));
        } else {
            prefix |= cJSON_IsString(cJSON_GetObjectItemCaseSensitive(norm, "prepend"));
        }
        const cJSON *scheme = cJSON_GetObjectItemCaseSensitive(pre, "prepend_scheme");
        if (cJSON_IsString(scheme) && strcmp(scheme->valuestring, "never") != 0) prefix = 1;
        LMC_TRY(lmc_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", prefix));
    }
    if (spm && unk) {
        int64_t id = tokv_find(v, unk, strlen(unk));
        if (id >= 0) LMC_TRY(lmc_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)id));
    }
    if (write_ids) {
        static const char *const names[] = {"bos_token", "eos_token", "pad_token"};
        static const char *const keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"};
        for (int k = 0; k < 3; k++) {
            const char *t = token_text(cJSON_GetObjectItemCaseSensitive(c->cfg, names[k]));
            int64_t id = t ? tokv_find(v, t, strlen(t)) : -1;
            if (id >= 0) LMC_TRY(lmc_gguf_writer_add_u32(w, keys[k], (uint32_t)id));
        }
    }
    /* add_bos/add_eos: tokenizer_config.json, else what the post-processor template does */
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(c->cfg, "add_bos_token"), *ae = cJSON_GetObjectItemCaseSensitive(c->cfg, "add_eos_token");
    int add_bos = 0, add_eos = 0;
    const cJSON *post = cJSON_GetObjectItemCaseSensitive(c->j, "post_processor"), *single = NULL;
    const cJSON *procs = cJSON_GetObjectItemCaseSensitive(post, "processors"); /* a Sequence: its template */
    if (cJSON_IsArray(procs)) {
        cJSON_ArrayForEach(e, procs) if (cJSON_GetObjectItemCaseSensitive(e, "single")) single = cJSON_GetObjectItemCaseSensitive(e, "single");
    } else {
        single = cJSON_GetObjectItemCaseSensitive(post, "single");
    }
    if (cJSON_IsArray(single) && cJSON_GetArraySize(single) > 0) {
        add_bos = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(single, 0), "SpecialToken") != NULL;
        add_eos = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(single, cJSON_GetArraySize(single) - 1), "SpecialToken") != NULL;
    }
    if (cJSON_IsBool(ab)) add_bos = cJSON_IsTrue(ab);
    if (cJSON_IsBool(ae)) add_eos = cJSON_IsTrue(ae);
    LMC_TRY(lmc_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", add_bos));
    LMC_TRY(lmc_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", add_eos));
    return LMC_OK;
}

lmc_status lmc_gguf_tok_write_ggml(lmc_gguf_writer *w, const char *json, size_t len, const char *config_json,
                                   size_t config_len, int write_ids) {
    wctx c;
    memset(&c, 0, sizeof c);
    if (!(c.j = cJSON_ParseWithLength(json, len))) return lmc_fail(LMC_ERR_FORMAT, "tokenizer.json is not valid JSON");
    if (config_json && !(c.cfg = cJSON_ParseWithLength(config_json, config_len))) {
        cJSON_Delete(c.j);
        return lmc_fail(LMC_ERR_FORMAT, "tokenizer_config.json is not valid JSON");
    }
    lmc_status st = write_ggml(&c, w, write_ids);
    wctx_free(&c);
    return st;
}
