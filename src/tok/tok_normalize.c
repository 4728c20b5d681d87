/* tok_normalize.c — the `normalizer` section of tokenizer.json.
 *
 * NFC/NFD/NFKC/NFKD (utf8proc), Lowercase, Prepend, Replace, Strip,
 * StripAccents, BertNormalizer, ByteLevel and Sequence. A normalizer maps one valid
 * UTF-8 string to another; alignment offsets are not tracked (lmc needs ids,
 * not offsets). The parsed tree is owned by the tokenizer and read-only.
 */
#include "tok/tok_internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_PREPEND, N_REPLACE, N_STRIP, N_STRIP_ACCENTS,
               N_BERT, N_BYTELEVEL, N_SEQ } nkind;

struct tok_normalizer {
    nkind kind;
    tok_normalizer **kids; int n_kids;   /* Sequence */
    char *str; size_t str_len;           /* Prepend text, Replace content */
    tok_pattern pat;                     /* Replace */
    int left, right;                     /* Strip */
    int clean_text, chinese, strip_acc, lowercase; /* BertNormalizer (strip_acc -1 = follow lowercase) */
};

void tok_normalizer_free(tok_normalizer *n) {
    if (!n) return;
    for (int i = 0; i < n->n_kids; i++) tok_normalizer_free(n->kids[i]);
    free(n->kids);
    free(n->str);
    tok_pattern_free(&n->pat);
    free(n);
}

lmc_status tok_normalizer_parse(const cJSON *j, tok_normalizer **out) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return LMC_OK;
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "normalizer: expected an object");
    const char *type = tok_json_str(j, "type");
    if (!type) return lmc_fail(LMC_ERR_FORMAT, "normalizer: missing \"type\"");
    tok_normalizer *n = calloc(1, sizeof *n);
    if (!n) return lmc_fail(LMC_ERR_NOMEM, "normalizer: out of memory");
    lmc_status st = LMC_OK;
    if (!strcmp(type, "NFC")) n->kind = N_NFC;
    else if (!strcmp(type, "NFD")) n->kind = N_NFD;
    else if (!strcmp(type, "NFKC")) n->kind = N_NFKC;
    else if (!strcmp(type, "NFKD")) n->kind = N_NFKD;
    else if (!strcmp(type, "Lowercase")) n->kind = N_LOWER;
    else if (!strcmp(type, "StripAccents")) n->kind = N_STRIP_ACCENTS;
    else if (!strcmp(type, "ByteLevel")) { n->kind = N_BYTELEVEL; tok_bytelevel_init(); }
    else if (!strcmp(type, "Prepend")) {
        n->kind = N_PREPEND;
        const char *p = tok_json_str(j, "prepend");
        if (!p) st = lmc_fail(LMC_ERR_FORMAT, "normalizer Prepend: missing string \"prepend\"");
        /* the text is inserted into normalized text, which the regexes match as valid UTF-8 */
        else if (!tok_utf8_valid(p, strlen(p))) st = lmc_fail(LMC_ERR_FORMAT, "normalizer Prepend: \"prepend\" is not UTF-8");
        else if (!(n->str = strdup(p))) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
        else n->str_len = strlen(p);
    } else if (!strcmp(type, "Replace")) {
        n->kind = N_REPLACE;
        const char *c = tok_json_str(j, "content");
        if (!c) st = lmc_fail(LMC_ERR_FORMAT, "normalizer Replace: missing string \"content\"");
        else if (!tok_utf8_valid(c, strlen(c))) st = lmc_fail(LMC_ERR_FORMAT, "normalizer Replace: \"content\" is not UTF-8");
        else if (!(n->str = strdup(c))) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
        else { n->str_len = strlen(c); st = tok_pattern_parse(&n->pat, cJSON_GetObjectItemCaseSensitive(j, "pattern"), "normalizer Replace"); }
    } else if (!strcmp(type, "Strip")) {
        n->kind = N_STRIP;
        n->left = tok_json_bool(j, "strip_left", 1);
        n->right = tok_json_bool(j, "strip_right", 1);
    } else if (!strcmp(type, "BertNormalizer")) {
        n->kind = N_BERT;
        n->clean_text = tok_json_bool(j, "clean_text", 1);
        n->chinese = tok_json_bool(j, "handle_chinese_chars", 1);
        n->lowercase = tok_json_bool(j, "lowercase", 1);
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(j, "strip_accents");
        n->strip_acc = cJSON_IsBool(sa) ? cJSON_IsTrue(sa) : -1;
    } else if (!strcmp(type, "Sequence")) {
        n->kind = N_SEQ;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(arr)) st = lmc_fail(LMC_ERR_FORMAT, "normalizer Sequence: missing array \"normalizers\"");
        else {
            int cnt = cJSON_GetArraySize(arr);
            n->kids = calloc((size_t)cnt + 1, sizeof *n->kids);
            if (!n->kids) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
            const cJSON *it;
            cJSON_ArrayForEach(it, arr) {
                if (st < 0) break;
                st = tok_normalizer_parse(it, &n->kids[n->n_kids]);
                if (st >= 0 && n->kids[n->n_kids]) n->n_kids++;
            }
        }
    } else if (!strcmp(type, "Precompiled")) {
        st = lmc_fail(LMC_ERR_UNSUPPORTED, "normalizer \"Precompiled\" (SentencePiece charsmap) is not supported");
    } else {
        st = lmc_fail(LMC_ERR_UNSUPPORTED, "normalizer type \"%s\" is not supported", type);
    }
    if (st < 0) { tok_normalizer_free(n); return st; }
    *out = n;
    return LMC_OK;
}

static lmc_status utf8proc_chunk(const char *s, size_t len, int flags, tok_buf *out) {
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                      (utf8proc_option_t)(UTF8PROC_STABLE | flags));
    if (r < 0) { free(dst); return lmc_fail(LMC_ERR_FORMAT, "normalizer: %s", utf8proc_errmsg(r)); }
    lmc_status st = tok_buf_put(out, dst, (size_t)r);
    free(dst);
    return st;
}

/* 1 when a normalization boundary lies before cp and cp is unchanged by the form:
 * combining class 0, no (canonical, or any for compat forms) decomposition, and for
 * composing forms not a possible second element of a composition (utf8proc marks
 * those with comb_index >= 0x8000; Hangul V/T jamo compose algorithmically). */
static int inert(uint32_t cp, int compose, int compat) {
    if (cp < 0x80) return 1;
    if (compose && !compat && cp < 0x300) return 1;  /* Latin-1..IPA: NFC_QC=Yes, ccc=0 */
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    if (p->combining_class != 0) return 0;
    if (p->decomp_seqindex != UINT16_MAX && (compat || p->decomp_type == 0)) return 0;
    if (cp >= 0xAC00 && cp <= 0xD7A3) return compose;                     /* Hangul syllables */
    if (compose && ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2))) return 0;
    if (compose && p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return 0;
    return 1;
}

/* Normalize chunk by chunk: text is cut before every inert character; chunks made only
 * of inert characters are copied, the others go through utf8proc. */
static lmc_status unicode_form(const char *s, size_t len, int flags, tok_buf *out) {
    int compose = (flags & UTF8PROC_COMPOSE) != 0, compat = (flags & UTF8PROC_COMPAT) != 0;
    size_t chunk = 0;
    int dirty = 0;
    for (size_t p = 0; p < len;) {
        uint32_t cp;
        int l = tok_utf8_next(s + p, len - p, &cp);
        if (inert(cp, compose, compat)) {
            if (p > chunk) LMC_TRY(dirty ? utf8proc_chunk(s + chunk, p - chunk, flags, out) : tok_buf_put(out, s + chunk, p - chunk));
            chunk = p;
            dirty = 0;
        } else dirty = 1;
        p += (size_t)l;
    }
    if (len > chunk) LMC_TRY(dirty ? utf8proc_chunk(s + chunk, len - chunk, flags, out) : tok_buf_put(out, s + chunk, len - chunk));
    return LMC_OK;
}

static lmc_status lowercase(const char *s, size_t len, tok_buf *out) {
    for (size_t i = 0; i < len;) {
        if ((unsigned char)s[i] < 0x80) {
            char c = s[i++];
            LMC_TRY(tok_buf_putc(out, (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c));
            continue;
        }
        uint32_t cp;
        i += (size_t)tok_utf8_next(s + i, len - i, &cp);
        if (cp == 0x130) { LMC_TRY(tok_buf_put(out, "i\xCC\x87", 3)); continue; } /* İ -> i + U+0307 */
        LMC_TRY(tok_buf_put_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp)));
    }
    return LMC_OK;
}

static int is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static lmc_status strip_marks(const char *s, size_t len, tok_buf *out) {
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int l = tok_utf8_next(s + i, len - i, &cp);
        if (!tok_is_mark(cp)) LMC_TRY(tok_buf_put(out, s + i, (size_t)l));
        i += (size_t)l;
    }
    return LMC_OK;
}

static lmc_status bert(const tok_normalizer *n, const char *s, size_t len, tok_buf *out) {
    tok_buf a = {0}, b = {0};
    lmc_status st = LMC_OK;
    for (size_t i = 0; i < len && st >= 0;) {
        uint32_t cp;
        int l = tok_utf8_next(s + i, len - i, &cp);
        i += (size_t)l;
        if (n->clean_text) {
            if (cp == 0 || cp == 0xFFFD) continue;
            utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
            if (cp != '\t' && cp != '\n' && cp != '\r' &&
                (k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO ||
                 k == UTF8PROC_CATEGORY_CN)) continue;
            if (tok_is_whitespace(cp)) { st = tok_buf_putc(&a, ' '); continue; }
        }
        if (n->chinese && is_chinese(cp)) {
            st = tok_buf_putc(&a, ' ');
            if (st >= 0) st = tok_buf_put_cp(&a, cp);
            if (st >= 0) st = tok_buf_putc(&a, ' ');
            continue;
        }
        st = tok_buf_put_cp(&a, cp);
    }
    int strip = n->strip_acc < 0 ? n->lowercase : n->strip_acc;
    const char *cur = a.data ? a.data : "";
    size_t cur_len = a.len;
    if (st >= 0 && strip) {
        st = unicode_form(cur, cur_len, UTF8PROC_DECOMPOSE, &b);
        a.len = 0;
        if (st >= 0) st = strip_marks(b.data ? b.data : "", b.len, &a);
        cur = a.data ? a.data : "";
        cur_len = a.len;
    }
    if (st >= 0) st = n->lowercase ? lowercase(cur, cur_len, out) : tok_buf_put(out, cur, cur_len);
    tok_buf_free(&a);
    tok_buf_free(&b);
    return st;
}

static lmc_status apply_one(const tok_normalizer *n, const char *s, size_t len, tok_buf *out,
                            pcre2_match_data *md) {
    switch (n->kind) {
    case N_NFC: return unicode_form(s, len, UTF8PROC_COMPOSE, out);
    case N_NFD: return unicode_form(s, len, UTF8PROC_DECOMPOSE, out);
    case N_NFKC: return unicode_form(s, len, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case N_NFKD: return unicode_form(s, len, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
    case N_LOWER: return lowercase(s, len, out);
    case N_PREPEND:
        if (len) LMC_TRY(tok_buf_put(out, n->str, n->str_len));
        return tok_buf_put(out, s, len);
    case N_REPLACE: return tok_pattern_replace(&n->pat, s, len, n->str, n->str_len, md, out);
    case N_STRIP: {
        size_t b = 0, e = len;
        while (n->left && b < e) {
            uint32_t cp;
            int l = tok_utf8_next(s + b, e - b, &cp);
            if (!tok_is_whitespace(cp)) break;
            b += (size_t)l;
        }
        while (n->right && e > b) {
            size_t k = e - 1;
            while (k > b && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
            uint32_t cp;
            tok_utf8_next(s + k, e - k, &cp);
            if (!tok_is_whitespace(cp)) break;
            e = k;
        }
        return tok_buf_put(out, s + b, e - b);
    }
    case N_STRIP_ACCENTS: return strip_marks(s, len, out);
    case N_BERT: return bert(n, s, len, out);
    case N_BYTELEVEL:
        for (size_t i = 0; i < len; i++) {
            unsigned char b = (unsigned char)s[i];
            LMC_TRY(tok_buf_put(out, tok_bytelevel_utf8[b], tok_bytelevel_len[b]));
        }
        return LMC_OK;
    case N_SEQ: {
        tok_buf a = {0};
        lmc_status st = tok_buf_put(out, s, len);
        for (int i = 0; i < n->n_kids && st >= 0; i++) {
            a.len = 0;
            st = tok_buf_put(&a, out->data, out->len);
            out->len = 0;
            if (st >= 0) st = apply_one(n->kids[i], a.data, a.len, out, md);
            if (out->data) out->data[out->len] = 0;
        }
        tok_buf_free(&a);
        return st;
    }
    }
    return LMC_OK;
}

lmc_status tok_normalizer_apply(const tok_normalizer *n, const char *s, size_t len, tok_buf *out,
                                tok_buf *tmp, pcre2_match_data *md) {
    (void)tmp;
    out->len = 0;
    LMC_TRY(tok_buf_reserve(out, len));
    out->data[0] = 0;
    if (!n) return tok_buf_put(out, s, len);
    return apply_one(n, s, len, out, md);
}
