/* tok_pretok.c — the `pre_tokenizer` section of tokenizer.json, and patterns.
 *
 * Pre-tokenizers split normalized text into pieces the model tokenizes one by
 * one: ByteLevel (GPT-2 regex + byte->char map), Split (String or Regex pattern,
 * every SplitDelimiterBehavior, invert), Metaspace (prepend_scheme, split),
 * Whitespace, WhitespaceSplit, Punctuation, Digits, BertPreTokenizer,
 * CharDelimiterSplit and Sequence. Regexes are Oniguruma-flavoured in the
 * files; PCRE2 (UTF + UCP, JIT when available) runs them. Owned by the tokenizer.
 */
#include "tok/tok_internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- patterns ---------------- */

/* tokenizer.json regexes are Oniguruma (Ruby syntax) as HF compiles them; PCRE2 differs in
 * a few classes, rewritten here: \s is Unicode White_Space (PCRE2 adds U+180E), \w is
 * Letter|Mark|Number|Connector_Punctuation (PCRE2 lacks marks), \h is a hex digit (PCRE2:
 * horizontal space); ^ and $ are line anchors (PCRE2_MULTILINE at compile time). */
#define ONIG_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define ONIG_WORD "\\p{L}\\p{M}\\p{N}\\p{Pc}"
#define ONIG_HEX "0-9a-fA-F"

static lmc_status translate_onig(const char *src, tok_buf *out) {
    int depth = 0;  /* character-class nesting */
    for (size_t i = 0; src[i]; i++) {
        char c = src[i];
        if (c == '\\' && src[i + 1]) {
            char e = src[++i];
            const char *set = e == 's' || e == 'S' ? ONIG_WS : e == 'w' || e == 'W' ? ONIG_WORD :
                              e == 'h' || e == 'H' ? ONIG_HEX : NULL;
            int neg = e == 'S' || e == 'W' || e == 'H';
            if (!set) { LMC_TRY(tok_buf_putc(out, '\\')); LMC_TRY(tok_buf_putc(out, e)); continue; }
            if (depth == 0) {
                LMC_TRY(tok_buf_put(out, neg ? "[^" : "[", neg ? 2 : 1));
                LMC_TRY(tok_buf_put(out, set, strlen(set)));
                LMC_TRY(tok_buf_putc(out, ']'));
            } else if (!neg) LMC_TRY(tok_buf_put(out, set, strlen(set)));
            else { LMC_TRY(tok_buf_putc(out, '\\')); LMC_TRY(tok_buf_putc(out, e)); }  /* rare: keep PCRE2's */
            continue;
        }
        if (c == '[') {
            if (depth > 0 && src[i + 1] == ':') {  /* POSIX class [:alpha:] inside a class */
                const char *end = strstr(src + i + 2, ":]");
                if (end) {
                    LMC_TRY(tok_buf_put(out, src + i, (size_t)(end + 2 - (src + i))));
                    i = (size_t)(end + 1 - src);
                    continue;
                }
            }
            depth++;
            LMC_TRY(tok_buf_putc(out, c));
            /* a ']' right after '[' or '[^' is a literal */
            if (src[i + 1] == '^') { LMC_TRY(tok_buf_putc(out, '^')); i++; }
            if (src[i + 1] == ']') { LMC_TRY(tok_buf_put(out, "\\]", 2)); i++; }
            continue;
        }
        if (c == ']' && depth > 0) depth--;
        LMC_TRY(tok_buf_putc(out, c));
    }
    if (!out->data) LMC_TRY(tok_buf_reserve(out, 1));
    return LMC_OK;
}

lmc_status tok_pattern_compile_regex(tok_pattern *p, const char *src) {
    int err;
    PCRE2_SIZE eoff;
    tok_buf tr = {0};
    lmc_status st = translate_onig(src, &tr);
    if (st < 0) { tok_buf_free(&tr); return st; }
    /* \C (one code unit) could end a match inside a character; every subject and every match
     * boundary must stay valid UTF-8, since tok_pattern_find matches with PCRE2_NO_UTF_CHECK */
    p->re = pcre2_compile((PCRE2_SPTR)tr.data, tr.len, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C,
                          &err, &eoff, NULL);
    tok_buf_free(&tr);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return lmc_fail(LMC_ERR_UNSUPPORTED, "regex /%.80s/ at offset %zu: %s", src, (size_t)eoff, (char *)msg);
    }
    p->jit = pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE) == 0;
    return LMC_OK;
}

lmc_status tok_pattern_parse(tok_pattern *p, const cJSON *j, const char *what) {
    memset(p, 0, sizeof *p);
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "%s: \"pattern\" must be an object", what);
    const char *s = tok_json_str(j, "String");
    if (s) {
        p->lit_len = strlen(s);
        p->lit = strdup(s);
        if (!p->lit) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
        if (!tok_utf8_valid(s, p->lit_len)) return lmc_fail(LMC_ERR_FORMAT, "%s: pattern is not UTF-8", what);
        return LMC_OK;
    }
    const char *r = tok_json_str(j, "Regex");
    if (r) return tok_pattern_compile_regex(p, r);
    return lmc_fail(LMC_ERR_FORMAT, "%s: pattern needs \"String\" or \"Regex\"", what);
}

void tok_pattern_free(tok_pattern *p) {
    free(p->lit);
    if (p->re) pcre2_code_free(p->re);
    memset(p, 0, sizeof *p);
}

int tok_pattern_find(const tok_pattern *p, const char *s, size_t n, size_t from, pcre2_match_data *md,
                     size_t *ms, size_t *me) {
    if (from > n) return 0;
    if (p->lit) {
        if (p->lit_len == 0) return 0;
        const char *f = memmem(s + from, n - from, p->lit, p->lit_len);
        if (!f) return 0;
        *ms = (size_t)(f - s);
        *me = *ms + p->lit_len;
        return 1;
    }
    if (!p->re) return 0;
    /* NO_UTF_CHECK: s is valid UTF-8 and `from` a character boundary, by construction (input
     * text is sanitized, tokenizer.json strings inserted into text are checked at load, and
     * patterns cannot use \C); on invalid text PCRE2's JIT may read past the subject's end */
    int rc = p->jit ? pcre2_jit_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL)
                    : pcre2_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc < 0) return 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    if (*me < *ms) *me = *ms;  /* \K tricks: never report a negative span */
    return 1;
}

/* Iterate non-overlapping matches as Oniguruma's find_iter does (an empty match right
 * after the previous match is skipped by advancing one character). */
typedef struct { const tok_pattern *p; const char *s; size_t n, pos; long last; pcre2_match_data *md; } finder;

static int finder_next(finder *f, size_t *ms, size_t *me) {
    for (;;) {
        if (f->pos > f->n) return 0;
        if (!tok_pattern_find(f->p, f->s, f->n, f->pos, f->md, ms, me)) return 0;
        if (*ms == *me && (long)*me == f->last) {
            if (f->pos >= f->n) return 0;
            f->pos += (size_t)tok_utf8_len((unsigned char)f->s[f->pos]);
            continue;
        }
        f->pos = *me;
        f->last = (long)*me;
        return 1;
    }
}

lmc_status tok_pattern_replace(const tok_pattern *p, const char *s, size_t n, const char *with,
                               size_t with_len, pcre2_match_data *md, tok_buf *out) {
    finder f = {p, s, n, 0, -1, md};
    size_t ms, me, prev = 0;
    while (finder_next(&f, &ms, &me)) {
        LMC_TRY(tok_buf_put(out, s + prev, ms - prev));
        LMC_TRY(tok_buf_put(out, with, with_len));
        prev = me;
    }
    return tok_buf_put(out, s + prev, n - prev);
}

/* ---------------- pre-tokenizers ---------------- */

typedef enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS } behavior;
typedef enum { P_BYTELEVEL, P_SPLIT, P_METASPACE, P_WHITESPACE, P_WSSPLIT, P_PUNCT, P_DIGITS, P_BERT,
               P_CHARDELIM, P_SEQ } pkind;

struct tok_pretok {
    pkind kind;
    tok_pretok **kids; int n_kids;
    tok_pattern pat;            /* Split, ByteLevel(use_regex), Whitespace */
    behavior beh;
    int invert;
    int add_prefix_space, use_regex;   /* ByteLevel */
    char repl[8]; size_t repl_len;     /* Metaspace replacement */
    int prepend;                       /* Metaspace: 0 never, 1 first, 2 always */
    int split;                         /* Metaspace */
    int individual;                    /* Digits */
    uint32_t delim;                    /* CharDelimiterSplit */
};

static const char *GPT2_RE =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void tok_pretok_free(tok_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_kids; i++) tok_pretok_free(p->kids[i]);
    free(p->kids);
    tok_pattern_free(&p->pat);
    free(p);
}

static lmc_status parse_behavior(const cJSON *j, behavior dflt, behavior *out) {
    const char *b = tok_json_str(j, "behavior");
    *out = dflt;
    if (!b) return cJSON_GetObjectItemCaseSensitive(j, "behavior") ?
        lmc_fail(LMC_ERR_FORMAT, "pre_tokenizer: \"behavior\" must be a string") : LMC_OK;
    if (!strcmp(b, "Removed")) *out = B_REMOVED;
    else if (!strcmp(b, "Isolated")) *out = B_ISOLATED;
    else if (!strcmp(b, "MergedWithPrevious")) *out = B_MERGED_PREV;
    else if (!strcmp(b, "MergedWithNext")) *out = B_MERGED_NEXT;
    else if (!strcmp(b, "Contiguous")) *out = B_CONTIGUOUS;
    else return lmc_fail(LMC_ERR_FORMAT, "pre_tokenizer: unknown behavior \"%s\"", b);
    return LMC_OK;
}

lmc_status tok_pretok_parse(const cJSON *j, tok_pretok **out) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return LMC_OK;
    if (!cJSON_IsObject(j)) return lmc_fail(LMC_ERR_FORMAT, "pre_tokenizer: expected an object");
    const char *type = tok_json_str(j, "type");
    if (!type) return lmc_fail(LMC_ERR_FORMAT, "pre_tokenizer: missing \"type\"");
    tok_pretok *p = calloc(1, sizeof *p);
    if (!p) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
    lmc_status st = LMC_OK;
    if (!strcmp(type, "ByteLevel")) {
        p->kind = P_BYTELEVEL;
        p->add_prefix_space = tok_json_bool(j, "add_prefix_space", 1);
        p->use_regex = tok_json_bool(j, "use_regex", 1);
        if (p->use_regex) st = tok_pattern_compile_regex(&p->pat, GPT2_RE);
        tok_bytelevel_init();
    } else if (!strcmp(type, "Split")) {
        p->kind = P_SPLIT;
        st = tok_pattern_parse(&p->pat, cJSON_GetObjectItemCaseSensitive(j, "pattern"), "pre_tokenizer Split");
        if (st >= 0) st = parse_behavior(j, B_ISOLATED, &p->beh);
        p->invert = tok_json_bool(j, "invert", 0);
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = P_METASPACE;
        const char *r = tok_json_str(j, "replacement");
        if (!r) r = "\xE2\x96\x81";
        uint32_t cp;
        size_t rl = strlen(r);
        if (rl == 0 || rl > 4 || !tok_utf8_valid(r, rl) || tok_utf8_next(r, rl, &cp) != (int)rl)
            st = lmc_fail(LMC_ERR_FORMAT, "pre_tokenizer Metaspace: replacement must be one character");
        else { memcpy(p->repl, r, rl); p->repl_len = rl; }
        const char *ps = tok_json_str(j, "prepend_scheme");
        if (ps) {
            if (!strcmp(ps, "always")) p->prepend = 2;
            else if (!strcmp(ps, "first")) p->prepend = 1;
            else if (!strcmp(ps, "never")) p->prepend = 0;
            else st = lmc_fail(LMC_ERR_FORMAT, "pre_tokenizer Metaspace: unknown prepend_scheme \"%s\"", ps);
        } else p->prepend = tok_json_bool(j, "add_prefix_space", 1) ? 2 : 0;
        p->split = tok_json_bool(j, "split", 1);
    } else if (!strcmp(type, "Whitespace")) {
        p->kind = P_WHITESPACE;
        /* HF compiles \w+|[^\w\s]+ with Rust's regex crate, whose \w is Alphabetic, marks,
         * decimal digits, connector punctuation and joiners (PCRE2's \w lacks the marks) */
        st = tok_pattern_compile_regex(&p->pat, "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]+"
                                                "|[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}\\s]+");
    } else if (!strcmp(type, "WhitespaceSplit")) p->kind = P_WSSPLIT;
    else if (!strcmp(type, "Punctuation")) { p->kind = P_PUNCT; st = parse_behavior(j, B_ISOLATED, &p->beh); }
    else if (!strcmp(type, "Digits")) { p->kind = P_DIGITS; p->individual = tok_json_bool(j, "individual_digits", 0); }
    else if (!strcmp(type, "BertPreTokenizer")) p->kind = P_BERT;
    else if (!strcmp(type, "CharDelimiterSplit")) {
        p->kind = P_CHARDELIM;
        const char *d = tok_json_str(j, "delimiter");
        if (!d || !*d || !tok_utf8_valid(d, strlen(d))) st = lmc_fail(LMC_ERR_FORMAT, "CharDelimiterSplit: bad delimiter");
        else tok_utf8_next(d, strlen(d), &p->delim);
    } else if (!strcmp(type, "Sequence")) {
        p->kind = P_SEQ;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(arr)) st = lmc_fail(LMC_ERR_FORMAT, "pre_tokenizer Sequence: missing array \"pretokenizers\"");
        else {
            p->kids = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *p->kids);
            if (!p->kids) st = lmc_fail(LMC_ERR_NOMEM, "out of memory");
            const cJSON *it;
            cJSON_ArrayForEach(it, arr) {
                if (st < 0) break;
                st = tok_pretok_parse(it, &p->kids[p->n_kids]);
                if (st >= 0 && p->kids[p->n_kids]) p->n_kids++;
            }
        }
    } else st = lmc_fail(LMC_ERR_UNSUPPORTED, "pre_tokenizer type \"%s\" is not supported", type);
    if (st < 0) { tok_pretok_free(p); return st; }
    *out = p;
    return LMC_OK;
}

/* ---- span lists: cover a piece with matches and gaps, then apply a behavior ---- */

static lmc_status span_add(tok_pieces *o, size_t s, size_t e, int m) {
    if (o->n_sp == o->cap_sp) {
        int cap = o->cap_sp ? o->cap_sp * 2 : 64;
        tok_span *sp = realloc(o->sp, (size_t)cap * sizeof *sp);
        if (!sp) return lmc_fail(LMC_ERR_NOMEM, "out of memory");
        o->sp = sp;
        o->cap_sp = cap;
    }
    o->sp[o->n_sp++] = (tok_span){s, e, m};
    return LMC_OK;
}

/* Apply `beh` to the spans in o->sp (covering text[0..n) of a piece) and append the kept
 * pieces to o (text copied from `text`). */
static lmc_status emit_spans(tok_pieces *o, const char *text, int at_start, behavior beh) {
    int n = o->n_sp, w = 0;
    tok_span *sp = o->sp;
    int prev = 0;
    switch (beh) {
    case B_ISOLATED: for (int i = 0; i < n; i++) sp[i].m = 0; w = n; break;
    case B_REMOVED: w = n; break;
    case B_CONTIGUOUS:
        for (int i = 0; i < n; i++) {
            int m = sp[i].m;
            if (w > 0 && m == prev) sp[w - 1].e = sp[i].e;
            else { sp[w] = sp[i]; sp[w].m = 0; w++; }
            prev = m;
        }
        break;
    case B_MERGED_PREV:
        for (int i = 0; i < n; i++) {
            int m = sp[i].m;
            if (m && !prev && w > 0) sp[w - 1].e = sp[i].e;
            else { sp[w] = sp[i]; sp[w].m = 0; w++; }
            prev = m;
        }
        break;
    case B_MERGED_NEXT: {
        /* walk backwards, merging a match into the piece after it; results stay in order */
        int r = n;
        for (int i = n - 1; i >= 0; i--) {
            int m = sp[i].m;
            if (m && !prev && r < n) sp[r].s = sp[i].s;
            else { r--; sp[r] = sp[i]; sp[r].m = 0; }
            prev = m;
        }
        for (int i = r; i < n; i++) sp[w++] = sp[i];
        break;
    }
    }
    for (int i = 0; i < w; i++) {
        if (sp[i].m || sp[i].e == sp[i].s) continue;
        LMC_TRY(tok_pieces_add(o, text + sp[i].s, sp[i].e - sp[i].s, at_start && sp[i].s == 0));
    }
    o->n_sp = 0;
    return LMC_OK;
}

static lmc_status split_regex(tok_pieces *o, const tok_pattern *pat, const char *s, size_t n, int at_start,
                              behavior beh, int invert, pcre2_match_data *md) {
    o->n_sp = 0;
    finder f = {pat, s, n, 0, -1, md};
    size_t ms, me, prev = 0;
    while (finder_next(&f, &ms, &me)) {
        if (ms > prev) LMC_TRY(span_add(o, prev, ms, invert));
        LMC_TRY(span_add(o, ms, me, !invert));
        prev = me;
    }
    if (prev < n) LMC_TRY(span_add(o, prev, n, invert));
    return emit_spans(o, s, at_start, beh);
}

typedef int (*char_pred)(uint32_t cp, uint32_t arg);
static int pred_ws(uint32_t cp, uint32_t a) { (void)a; return tok_is_whitespace(cp); }
static int pred_punct(uint32_t cp, uint32_t a) { (void)a; return tok_is_punct(cp); }
static int pred_num(uint32_t cp, uint32_t a) { (void)a; return tok_is_numeric(cp); }
static int pred_eq(uint32_t cp, uint32_t a) { return cp == a; }

/* Every character satisfying pred is one match. */
static lmc_status split_chars(tok_pieces *o, const char *s, size_t n, int at_start, char_pred pred, uint32_t arg,
                              behavior beh) {
    o->n_sp = 0;
    size_t prev = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = tok_utf8_next(s + i, n - i, &cp);
        if (pred(cp, arg)) {
            if (i > prev) LMC_TRY(span_add(o, prev, i, 0));
            LMC_TRY(span_add(o, i, i + (size_t)l, 1));
            prev = i + (size_t)l;
        }
        i += (size_t)l;
    }
    if (prev < n) LMC_TRY(span_add(o, prev, n, 0));
    return emit_spans(o, s, at_start, beh);
}

static lmc_status bytelevel_map(tok_pieces *o, const char *s, size_t n, int at_start) {
    size_t off = o->text.len;
    LMC_TRY(tok_buf_reserve(&o->text, 2 * n));
    char *d = o->text.data + off;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        d[0] = tok_bytelevel_utf8[b][0];
        if (tok_bytelevel_len[b] == 2) { d[1] = tok_bytelevel_utf8[b][1]; d += 2; } else d += 1;
    }
    size_t len = (size_t)(d - (o->text.data + off));
    o->text.len += len;
    o->text.data[o->text.len] = 0;
    return tok_pieces_add_ref(o, off, len, at_start);
}

static lmc_status apply_piece(const tok_pretok *p, tok_pieces *o, const char *s, size_t n, int at_start,
                              pcre2_match_data *md, tok_buf *scratch) {
    switch (p->kind) {
    case P_BYTELEVEL: {
        if (p->add_prefix_space && (n == 0 || s[0] != ' ')) {
            scratch->len = 0;
            LMC_TRY(tok_buf_putc(scratch, ' '));
            LMC_TRY(tok_buf_put(scratch, s, n));
            s = scratch->data;
            n = scratch->len;
        }
        if (!p->use_regex) return bytelevel_map(o, s, n, at_start);
        /* split with the GPT-2 regex (Isolated), mapping every piece's bytes */
        finder f = {&p->pat, s, n, 0, -1, md};
        size_t ms, me, prev = 0;
        while (finder_next(&f, &ms, &me)) {
            if (ms > prev) LMC_TRY(bytelevel_map(o, s + prev, ms - prev, at_start && prev == 0));
            if (me > ms) LMC_TRY(bytelevel_map(o, s + ms, me - ms, at_start && ms == 0));
            prev = me;
        }
        if (prev < n) LMC_TRY(bytelevel_map(o, s + prev, n - prev, at_start && prev == 0));
        return LMC_OK;
    }
    case P_SPLIT:
        if (p->pat.lit && p->pat.lit_len == 0) return tok_pieces_add(o, s, n, at_start);
        return split_regex(o, &p->pat, s, n, at_start, p->beh, p->invert, md);
    case P_WHITESPACE: return split_regex(o, &p->pat, s, n, at_start, B_REMOVED, 1, md);
    case P_WSSPLIT: return split_chars(o, s, n, at_start, pred_ws, 0, B_REMOVED);
    case P_PUNCT: return split_chars(o, s, n, at_start, pred_punct, 0, p->beh);
    case P_DIGITS: return split_chars(o, s, n, at_start, pred_num, 0, p->individual ? B_ISOLATED : B_CONTIGUOUS);
    case P_CHARDELIM: return split_chars(o, s, n, at_start, pred_eq, p->delim, B_REMOVED);
    case P_METASPACE: {
        scratch->len = 0;
        int starts = n >= p->repl_len && memcmp(s, p->repl, p->repl_len) == 0;
        /* replace ' ' first: a leading space becomes the replacement and counts as "starts with" */
        if (n && s[0] == ' ') starts = 1;
        if (!starts && (p->prepend == 2 || (p->prepend == 1 && at_start)))
            LMC_TRY(tok_buf_put(scratch, p->repl, p->repl_len));
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') LMC_TRY(tok_buf_put(scratch, p->repl, p->repl_len));
            else LMC_TRY(tok_buf_putc(scratch, s[i]));
        }
        if (!p->split) return tok_pieces_add(o, scratch->data, scratch->len, at_start);
        tok_pattern lit = {0};
        lit.lit = (char *)p->repl;
        lit.lit_len = p->repl_len;
        /* the scratch text must outlive emit_spans' copy: it does (copied into o->text) */
        return split_regex(o, &lit, scratch->data, scratch->len, at_start, B_MERGED_NEXT, 0, md);
    }
    case P_BERT: {
        tok_pieces mid = {0};
        lmc_status st = split_chars(&mid, s, n, at_start, pred_ws, 0, B_REMOVED);
        for (int i = 0; i < mid.n && st >= 0; i++)
            st = split_chars(o, mid.text.data + mid.p[i].off, mid.p[i].len, mid.p[i].at_start, pred_punct, 0,
                             B_ISOLATED);
        tok_pieces_free(&mid);
        return st;
    }
    case P_SEQ: break;
    }
    return LMC_OK;
}

lmc_status tok_pretok_apply(const tok_pretok *p, tok_pieces **in, tok_pieces **tmp, pcre2_match_data *md) {
    if (!p) return LMC_OK;
    if (p->kind == P_SEQ) {
        for (int i = 0; i < p->n_kids; i++) LMC_TRY(tok_pretok_apply(p->kids[i], in, tmp, md));
        return LMC_OK;
    }
    tok_pieces *src = *in, *dst = *tmp;
    tok_pieces_clear(dst);
    tok_buf scratch = {0};
    lmc_status st = LMC_OK;
    for (int i = 0; i < src->n && st >= 0; i++)
        st = apply_piece(p, dst, src->text.data + src->p[i].off, src->p[i].len, src->p[i].at_start, md, &scratch);
    tok_buf_free(&scratch);
    *in = dst;
    *tmp = src;
    return st;
}
