/* tok_util.c — small building blocks shared by the tokenizer modules.
 *
 * Byte buffers and piece lists, two open-addressing hash maps (string->id for
 * vocabularies, u64->u64 for BPE merge ranks and tries), UTF-8 decoding and
 * sanitising, Unicode character classes (via utf8proc) and the GPT-2
 * byte<->char table of byte-level BPE. Nothing here allocates behind the
 * caller's back except the growable containers it is asked to grow.
 */
#include "tok/tok_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---------------- buffers ---------------- */

lmc_status tok_buf_reserve(tok_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return LMC_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory (%zu bytes)", cap);
    b->data = d;
    b->cap = cap;
    return LMC_OK;
}

lmc_status tok_buf_put(tok_buf *b, const void *p, size_t n) {
    LMC_TRY(tok_buf_reserve(b, n));
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return LMC_OK;
}

lmc_status tok_buf_putc(tok_buf *b, char c) { return tok_buf_put(b, &c, 1); }

lmc_status tok_buf_put_cp(tok_buf *b, uint32_t cp) {
    char u[4];
    int n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    return tok_buf_put(b, u, (size_t)n);
}

void tok_buf_free(tok_buf *b) { free(b->data); b->data = NULL; b->len = b->cap = 0; }

lmc_status tok_pieces_add_ref(tok_pieces *ps, size_t off, size_t len, int at_start) {
    if (ps->n == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 16;
        tok_piece *p = realloc(ps->p, (size_t)cap * sizeof *p);
        if (!p) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
        ps->p = p;
        ps->cap = cap;
    }
    ps->p[ps->n].off = (uint32_t)off;
    ps->p[ps->n].len = (uint32_t)len;
    ps->p[ps->n].at_start = (uint8_t)(at_start != 0);
    ps->n++;
    return LMC_OK;
}

lmc_status tok_pieces_add(tok_pieces *ps, const char *s, size_t len, int at_start) {
    size_t off = ps->text.len;
    LMC_TRY(tok_buf_put(&ps->text, s, len));
    return tok_pieces_add_ref(ps, off, len, at_start);
}

void tok_pieces_clear(tok_pieces *ps) { ps->n = 0; ps->text.len = 0; }
void tok_pieces_free(tok_pieces *ps) {
    tok_buf_free(&ps->text);
    free(ps->p);
    free(ps->sp);
    ps->p = NULL; ps->sp = NULL;
    ps->n = ps->cap = ps->n_sp = ps->cap_sp = 0;
}

/* ---------------- hashing ---------------- */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

uint32_t tok_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0x100000001B3ULL);
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, s, 8);
        h = (h ^ mix64(k)) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
        s += 8; n -= 8;
    }
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++) k |= (uint64_t)s[i] << (8 * i);
    h = mix64(h ^ k ^ 0x5bd1e995);
    return (uint32_t)h;
}

static uint32_t cap_for(size_t expect) {
    uint32_t cap = 16;
    while (cap < expect + expect / 2 + 2) cap *= 2;   /* load factor <= 2/3 */
    return cap;
}

static inline uint64_t head8(const char *key, size_t len) {
    uint64_t h = 0;
    memcpy(&h, key, len < 8 ? len : 8);
    return h;
}

lmc_status tok_strmap_init(tok_strmap *m, size_t expect) {
    m->cap = cap_for(expect);
    m->n = 0;
    m->ent = calloc(m->cap, sizeof *m->ent);
    if (!m->ent) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
    return LMC_OK;
}

static lmc_status strmap_grow(tok_strmap *m) {
    tok_strmap big;
    big.cap = m->cap * 2;
    big.n = 0;
    big.ent = calloc(big.cap, sizeof *big.ent);
    if (!big.ent) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
    for (uint32_t i = 0; i < m->cap; i++) {
        if (!m->ent[i].key) continue;
        uint32_t j = m->ent[i].hash & (big.cap - 1);
        while (big.ent[j].key) j = (j + 1) & (big.cap - 1);
        big.ent[j] = m->ent[i];
        big.n++;
    }
    free(m->ent);
    *m = big;
    return LMC_OK;
}

static inline int ent_eq(const tok_strmap_ent *e, uint32_t h, const char *key, size_t len, uint64_t hd) {
    if (e->hash != h || e->len != len || e->head != hd) return 0;
    return len <= 8 || memcmp(e->key + 8, key + 8, len - 8) == 0;
}

lmc_status tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val) {
    return tok_strmap_put_h(m, key, len, val, tok_hash(key, len));
}

lmc_status tok_strmap_put_h(tok_strmap *m, const char *key, size_t len, int32_t val, uint32_t h) {
    if (!m->ent) LMC_TRY(tok_strmap_init(m, 16));
    if ((m->n + 1) * 3 > m->cap * 2) LMC_TRY(strmap_grow(m));
    uint32_t j = h & (m->cap - 1);
    uint64_t hd = head8(key, len);
    while (m->ent[j].key) {
        tok_strmap_ent *e = &m->ent[j];
        if (ent_eq(e, h, key, len, hd)) { e->val = val; return LMC_OK; }
        j = (j + 1) & (m->cap - 1);
    }
    tok_strmap_ent *e = &m->ent[j];
    e->key = key ? key : "";
    e->len = (uint32_t)len;
    e->hash = h;
    e->val = val;
    e->head = hd;
    m->n++;
    return LMC_OK;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    return tok_strmap_get_h(m, key, len, tok_hash(key, len));
}

void tok_strmap_prefetch(const tok_strmap *m, uint32_t h) {
    if (m->ent) __builtin_prefetch(&m->ent[h & (m->cap - 1)]);
}

void tok_u64map_prefetch(const tok_u64map *m, uint64_t key) {
    if (m->slot) __builtin_prefetch(&m->slot[(uint32_t)mix64(key) & (m->cap - 1)]);
}

int32_t tok_strmap_get_h(const tok_strmap *m, const char *key, size_t len, uint32_t h) {
    if (!m->ent) return -1;
    uint32_t j = h & (m->cap - 1);
    uint64_t hd = head8(key, len);
    while (m->ent[j].key) {
        const tok_strmap_ent *e = &m->ent[j];
        if (ent_eq(e, h, key, len, hd)) return e->val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tok_strmap_free(tok_strmap *m) { free(m->ent); m->ent = NULL; m->cap = m->n = 0; }

#define U64_EMPTY UINT64_MAX

lmc_status tok_u64map_init(tok_u64map *m, size_t expect) {
    m->cap = cap_for(expect);
    m->n = 0;
    m->slot = malloc((size_t)m->cap * sizeof *m->slot);
    if (!m->slot) return lmc_fail(LMC_ERR_NOMEM, "tokenizer: out of memory");
    memset(m->slot, 0xFF, (size_t)m->cap * sizeof *m->slot);
    return LMC_OK;
}

static lmc_status u64map_grow(tok_u64map *m) {
    tok_u64map big;
    LMC_TRY(tok_u64map_init(&big, m->cap));
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->slot[i].key == U64_EMPTY) continue;
        uint32_t j = (uint32_t)mix64(m->slot[i].key) & (big.cap - 1);
        while (big.slot[j].key != U64_EMPTY) j = (j + 1) & (big.cap - 1);
        big.slot[j] = m->slot[i];
        big.n++;
    }
    tok_u64map_free(m);
    *m = big;
    return LMC_OK;
}

lmc_status tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val) {
    LMC_ASSERT(key != U64_EMPTY);
    if (!m->slot) LMC_TRY(tok_u64map_init(m, 16));
    if ((m->n + 1) * 3 > m->cap * 2) LMC_TRY(u64map_grow(m));
    uint32_t j = (uint32_t)mix64(key) & (m->cap - 1);
    while (m->slot[j].key != U64_EMPTY) {
        if (m->slot[j].key == key) { m->slot[j].val = val; return LMC_OK; }
        j = (j + 1) & (m->cap - 1);
    }
    m->slot[j].key = key;
    m->slot[j].val = val;
    m->n++;
    return LMC_OK;
}

int tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val) {
    if (!m->slot) return 0;
    uint32_t j = (uint32_t)mix64(key) & (m->cap - 1);
    while (m->slot[j].key != U64_EMPTY) {
        if (m->slot[j].key == key) { *val = m->slot[j].val; return 1; }
        j = (j + 1) & (m->cap - 1);
    }
    return 0;
}

void tok_u64map_free(tok_u64map *m) {
    free(m->slot);
    m->slot = NULL;
    m->cap = m->n = 0;
}

/* ---------------- UTF-8 ---------------- */

int tok_utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    return 4;
}

int tok_utf8_next(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    int len = tok_utf8_len(u[0]);
    if ((size_t)len > n) len = 1;  /* cannot happen on sanitized text; stay in bounds */
    switch (len) {
    case 1: *cp = u[0]; break;
    case 2: *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F); break;
    case 3: *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F); break;
    default:
        *cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
              ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    }
    return len;
}

/* Length of the well-formed sequence at s, or -(bytes of the maximal ill-formed subpart). */
static int utf8_check(const unsigned char *s, size_t n) {
    unsigned char b = s[0];
    if (b < 0x80) return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) { need = 2; lo = 0xA0; }
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) need = 2;
    else if (b == 0xED) { need = 2; hi = 0x9F; }
    else if (b == 0xF0) { need = 3; lo = 0x90; }
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else if (b == 0xF4) { need = 3; hi = 0x8F; }
    else return -1;
    size_t j = 1;
    for (int k = 0; k < need; k++, j++) {
        if (j >= n) return -(int)j;
        unsigned char c = s[j];
        if (c < (k == 0 ? lo : 0x80) || c > (k == 0 ? hi : 0xBF)) return -(int)j;
    }
    return (int)j;
}

int tok_utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) { i++; continue; }
        int r = utf8_check((const unsigned char *)s + i, n - i);
        if (r < 0) return 0;
        i += (size_t)r;
    }
    return 1;
}

lmc_status tok_utf8_sanitize(const char *s, size_t n, tok_buf *out) {
    LMC_TRY(tok_buf_reserve(out, n));
    size_t i = 0, run = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) { i++; continue; }
        int r = utf8_check((const unsigned char *)s + i, n - i);
        if (r > 0) { i += (size_t)r; continue; }
        LMC_TRY(tok_buf_put(out, s + run, i - run));
        LMC_TRY(tok_buf_put(out, "\xEF\xBF\xBD", 3));
        i += (size_t)(-r);
        run = i;
    }
    return tok_buf_put(out, s + run, n - run);
}

int tok_is_whitespace(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

int tok_is_alnum(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO ? 1 :
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

int tok_is_word(uint32_t c) {
    if (c < 0x80) return c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
    if (c == 0x200C || c == 0x200D) return 1;
    /* Other_Alphabetic symbols: circled and squared Latin letters */
    if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
        (c >= 0x1F170 && c <= 0x1F189)) return 1;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) ||
           k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}

int tok_is_numeric(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

int tok_is_punct(uint32_t c) {
    if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

int tok_is_mark(uint32_t c) {
    if (c < 0x300) return 0;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME;
}

/* ---------------- GPT-2 byte-level table ---------------- */

char tok_bytelevel_utf8[256][3];
uint8_t tok_bytelevel_len[256];
static int16_t cp_to_byte[324];
static pthread_once_t bl_once = PTHREAD_ONCE_INIT;

static void bl_init(void) {
    int n = 0;
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        cp_to_byte[cp] = (int16_t)b;
        char *u = tok_bytelevel_utf8[b];
        if (cp < 0x80) { u[0] = (char)cp; u[1] = 0; tok_bytelevel_len[b] = 1; }
        else { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); u[2] = 0; tok_bytelevel_len[b] = 2; }
    }
}

void tok_bytelevel_init(void) { pthread_once(&bl_once, bl_init); }

int tok_bytelevel_byte(uint32_t cp) { return cp < 324 ? cp_to_byte[cp] : -1; }
