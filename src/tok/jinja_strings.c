/* jinja_strings.c — Python str semantics used by filters and methods: strip with
 * Unicode whitespace, split/rsplit/splitlines, case mapping (utf8proc), title and
 * capitalize, replace, find/count, padding, and str.format() with format specs.
 * Every result is allocated in the render arena.
 */
#include "tok/jinja_strings.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int in_chars(int32_t cp, jv chars) {
    size_t i = 0;
    while (i < chars.n) {
        int32_t c2; i += jz_utf8_dec(chars.u.s + i, chars.n - i, &c2);
        if (c2 == cp) return 1;
    }
    return 0;
}

/* strip: which = 1 left, 2 right, 3 both; chars NULL-type (JV_NONE/UNDEF) = whitespace */
jv jz_str_strip(jv s, jv chars, int which) {
    int ws = chars.t != JV_STR;
    size_t b = 0, e = s.n;
    if (which & 1) {
        while (b < e) {
            int32_t cp; size_t k = jz_utf8_dec(s.u.s + b, e - b, &cp);
            if (ws ? !jz_is_space(cp) : !in_chars(cp, chars)) break;
            b += k;
        }
    }
    if (which & 2) {
        while (e > b) {
            size_t st = e - 1;
            while (st > b && ((unsigned char)s.u.s[st] & 0xC0) == 0x80 && e - st < 4) st--;
            int32_t cp; size_t k = jz_utf8_dec(s.u.s + st, e - st, &cp);
            if (k != e - st) { st = e - 1; cp = (unsigned char)s.u.s[st]; }
            if (ws ? !jz_is_space(cp) : !in_chars(cp, chars)) break;
            e = st;
        }
    }
    return jv_strn(s.u.s + b, e - b);
}

/* Unicode SpecialCasing entries Python applies that map one code point to several */
static const char *special_upper(int32_t cp) {
    switch (cp) {
    case 0xDF: return "SS";
    case 0x149: return "\xCA\xBCN";
    case 0x1F0: return "J\xCC\x8C";
    case 0xFB00: return "FF";
    case 0xFB01: return "FI";
    case 0xFB02: return "FL";
    case 0xFB03: return "FFI";
    case 0xFB04: return "FFL";
    case 0xFB05: case 0xFB06: return "ST";
    default: return NULL;
    }
}

static jv case_map(jctx *c, jv s, int mode /*0 lower 1 upper 2 swap*/) {
    jsb b; jsb_init(&b, c);
    size_t i = 0;
    while (i < s.n) {
        int32_t cp; size_t k = jz_utf8_dec(s.u.s + i, s.n - i, &cp);
        const char *sp = mode == 1 || (mode == 2 && utf8proc_islower(cp)) ? special_upper(cp) : NULL;
        if (sp) { jsb_puts(&b, sp); i += k; continue; }
        if (mode != 1 && cp == 0x130) { jsb_puts(&b, "i\xCC\x87"); i += k; continue; }
        int32_t m = cp;
        if (mode == 0) m = utf8proc_tolower(cp);
        else if (mode == 1) m = utf8proc_toupper(cp);
        else m = utf8proc_islower(cp) ? utf8proc_toupper(cp) : utf8proc_isupper(cp) ? utf8proc_tolower(cp) : cp;
        if (m == cp) jsb_put(&b, s.u.s + i, k);
        else { char u[4]; size_t q = jz_utf8_enc(m, u); jsb_put(&b, u, q); }
        i += k;
    }
    return jsb_value(&b);
}
jv jz_str_lower(jctx *c, jv s) { return case_map(c, s, 0); }
jv jz_str_upper(jctx *c, jv s) { return case_map(c, s, 1); }
jv jz_str_swapcase(jctx *c, jv s) { return case_map(c, s, 2); }

static int is_cased(int32_t cp) { return utf8proc_islower(cp) || utf8proc_isupper(cp) || utf8proc_category(cp) == UTF8PROC_CATEGORY_LT; }

static void put_cp(jsb *b, int32_t cp) { char u[4]; size_t q = jz_utf8_enc(cp, u); jsb_put(b, u, q); }

/* Python str.title(): a cased char after an uncased one is titlecased, others lowered */
jv jz_str_title_method(jctx *c, jv s) {
    jsb b; jsb_init(&b, c);
    size_t i = 0; int prev_cased = 0;
    while (i < s.n) {
        int32_t cp; size_t k = jz_utf8_dec(s.u.s + i, s.n - i, &cp);
        if (is_cased(cp)) { put_cp(&b, prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp)); prev_cased = 1; }
        else { jsb_put(&b, s.u.s + i, k); prev_cased = 0; }
        i += k;
    }
    return jsb_value(&b);
}

/* jinja2's title filter: words split on runs of [-\s({[<]; first char upper, rest lower */
jv jz_str_title_filter(jctx *c, jv s) {
    jsb b; jsb_init(&b, c);
    size_t i = 0; int at_start = 1;
    while (i < s.n) {
        int32_t cp; size_t k = jz_utf8_dec(s.u.s + i, s.n - i, &cp);
        int sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jz_is_space(cp);
        if (sep) { jsb_put(&b, s.u.s + i, k); at_start = 1; }
        else { put_cp(&b, at_start ? utf8proc_toupper(cp) : utf8proc_tolower(cp)); at_start = 0; }
        i += k;
    }
    return jsb_value(&b);
}

jv jz_str_capitalize(jctx *c, jv s) {
    jsb b; jsb_init(&b, c);
    size_t i = 0;
    while (i < s.n) {
        int32_t cp; size_t k = jz_utf8_dec(s.u.s + i, s.n - i, &cp);
        put_cp(&b, i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp));
        i += k;
    }
    return jsb_value(&b);
}

jv jz_str_replace(jctx *c, jv s, jv old, jv rep, int64_t count) {
    jsb b; jsb_init(&b, c);
    if (count < 0) count = INT64_MAX;
    if (old.n == 0) {
        size_t i = 0; int64_t done = 0;
        while (i <= s.n) {
            if (done < count) { jsb_put(&b, rep.u.s, rep.n); done++; }
            if (i == s.n) break;
            int32_t cp; size_t k = jz_utf8_dec(s.u.s + i, s.n - i, &cp);
            jsb_put(&b, s.u.s + i, k);
            i += k;
        }
        return jsb_value(&b);
    }
    size_t i = 0; int64_t done = 0;
    while (i < s.n) {
        const char *f = done < count ? memmem(s.u.s + i, s.n - i, old.u.s, old.n) : NULL;
        if (!f) { jsb_put(&b, s.u.s + i, s.n - i); break; }
        jsb_put(&b, s.u.s + i, (size_t)(f - (s.u.s + i)));
        jsb_put(&b, rep.u.s, rep.n);
        i = (size_t)(f - s.u.s) + old.n;
        done++;
    }
    if (!b.p) return jv_strn("", 0);
    return jsb_value(&b);
}

/* byte offset → code point index */
int64_t jz_str_cp_index(jv s, size_t byte_off) { return (int64_t)jz_utf8_len(s.u.s, byte_off); }

/* split on sep (or whitespace runs when sep is not a string); maxsplit < 0 = all */
jv jz_str_split(jctx *c, const jnode *at, jv s, jv sep, int64_t maxsplit, int from_right) {
    jv out = jv_list_new(c, 0);
    if (sep.t == JV_STR) {
        if (!sep.n) jz_fail(c, at, "empty separator");
        if (!from_right) {
            size_t i = 0; int64_t k = 0;
            for (;;) {
                const char *f = (maxsplit < 0 || k < maxsplit) ? memmem(s.u.s + i, s.n - i, sep.u.s, sep.n) : NULL;
                if (!f) { jv_list_push(c, out, jv_strn(s.u.s + i, s.n - i)); break; }
                jv_list_push(c, out, jv_strn(s.u.s + i, (size_t)(f - s.u.s) - i));
                i = (size_t)(f - s.u.s) + sep.n; k++;
            }
            return out;
        }
        /* rsplit: collect from the right then reverse */
        jv rev = jv_list_new(c, 0);
        size_t e = s.n; int64_t k = 0;
        for (;;) {
            const char *f = NULL;
            if ((maxsplit < 0 || k < maxsplit) && e >= sep.n)
                for (size_t p = e - sep.n + 1; p-- > 0;) if (memcmp(s.u.s + p, sep.u.s, sep.n) == 0) { f = s.u.s + p; break; }
            if (!f) { jv_list_push(c, rev, jv_strn(s.u.s, e)); break; }
            size_t p = (size_t)(f - s.u.s);
            jv_list_push(c, rev, jv_strn(s.u.s + p + sep.n, e - p - sep.n));
            e = p; k++;
        }
        for (size_t i = rev.u.l->n; i-- > 0;) jv_list_push(c, out, rev.u.l->v[i]);
        return out;
    }
    /* whitespace split */
    size_t n = s.n;
    size_t *starts = jz_alloc(c, (n + 1) * sizeof *starts), *ends = jz_alloc(c, (n + 1) * sizeof *ends);
    size_t nw = 0, i = 0;
    while (i < n) {
        int32_t cp; size_t k = jz_utf8_dec(s.u.s + i, n - i, &cp);
        if (jz_is_space(cp)) { i += k; continue; }
        starts[nw] = i;
        while (i < n) { k = jz_utf8_dec(s.u.s + i, n - i, &cp); if (jz_is_space(cp)) break; i += k; }
        ends[nw++] = i;
    }
    if (maxsplit < 0 || (size_t)maxsplit >= nw) {
        for (size_t w = 0; w < nw; w++) jv_list_push(c, out, jv_strn(s.u.s + starts[w], ends[w] - starts[w]));
        return out;
    }
    if (!from_right) {
        for (int64_t w = 0; w < maxsplit; w++) jv_list_push(c, out, jv_strn(s.u.s + starts[w], ends[w] - starts[w]));
        jv rest = jz_str_strip(jv_strn(s.u.s + starts[maxsplit], n - starts[maxsplit]), jv_none(), 2);
        jv_list_push(c, out, rest);
    } else {
        size_t first = nw - (size_t)maxsplit;
        jv rest = jz_str_strip(jv_strn(s.u.s, ends[first - 1]), jv_none(), 1);
        jv_list_push(c, out, rest);
        for (size_t w = first; w < nw; w++) jv_list_push(c, out, jv_strn(s.u.s + starts[w], ends[w] - starts[w]));
    }
    return out;
}

/* Python str.splitlines line boundaries */
jv jz_str_splitlines(jctx *c, jv s, int keepends) {
    jv out = jv_list_new(c, 0);
    size_t i = 0, line = 0;
    while (i < s.n) {
        int32_t cp; size_t k = jz_utf8_dec(s.u.s + i, s.n - i, &cp);
        int brk = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                  cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!brk) { i += k; continue; }
        size_t e = i + k;
        if (cp == '\r' && e < s.n && s.u.s[e] == '\n') e++;
        jv_list_push(c, out, jv_strn(s.u.s + line, (keepends ? e : i) - line));
        i = line = e;
    }
    if (line < s.n) jv_list_push(c, out, jv_strn(s.u.s + line, s.n - line));
    return out;
}

/* pad to width code points: align '<' '>' '^' (Python center rounding) */
jv jz_str_pad(jctx *c, jv s, int64_t width, char align, const char *fill, size_t fill_n) {
    int64_t len = (int64_t)jz_utf8_len(s.u.s, s.n);
    if (width <= len) return s;
    if (width - len > 100000000) jz_fail(c, NULL, "padding too large");
    int64_t marg = width - len, left;
    if (align == '<') left = 0;
    else if (align == '>') left = marg;
    else left = marg / 2 + (marg & width & 1);
    jsb b; jsb_init(&b, c);
    for (int64_t i = 0; i < left; i++) jsb_put(&b, fill, fill_n);
    jsb_put(&b, s.u.s, s.n);
    for (int64_t i = left; i < marg; i++) jsb_put(&b, fill, fill_n);
    return jsb_value(&b);
}

/* format one value with a Python format spec: [[fill]align][sign][#][0][width][,][.prec][type] */
void jz_format_spec(jctx *c, const jnode *at, jsb *out, jv v, const char *spec, size_t n) {
    char fill[8] = " "; size_t fill_n = 1; char align = 0, sign = '-';
    size_t i = 0;
    if (n >= 2) {
        int32_t cp; size_t k = jz_utf8_dec(spec, n, &cp);
        if (k < n && strchr("<>^=", spec[k])) { memcpy(fill, spec, k); fill_n = k; align = spec[k]; i = k + 1; }
    }
    if (!align && i < n && strchr("<>^=", spec[i])) align = spec[i++];
    if (i < n && strchr("+- ", spec[i])) sign = spec[i++];
    int alt = 0, zero = 0;
    if (i < n && spec[i] == '#') { alt = 1; i++; }
    if (i < n && spec[i] == '0') { zero = 1; i++; }
    int64_t width = 0; int prec = -1;
    while (i < n && spec[i] >= '0' && spec[i] <= '9') { width = width * 10 + (spec[i++] - '0'); if (width > 1000000) jz_fail(c, at, "format width too large"); }
    int comma = 0;
    if (i < n && (spec[i] == ',' || spec[i] == '_')) { comma = spec[i]; i++; }
    if (i < n && spec[i] == '.') { i++; prec = 0; while (i < n && spec[i] >= '0' && spec[i] <= '9') { prec = prec * 10 + (spec[i++] - '0'); if (prec > 200) jz_fail(c, at, "format precision too large"); } }
    char type = i < n ? spec[i++] : 0;
    if (i != n) jz_fail(c, at, "invalid format specifier '%.*s'", (int)n, spec);
    jsb t; jsb_init(&t, c);
    int numeric = 0;
    if (type == 's' || (!type && (v.t == JV_STR || !jv_is_number(v)))) {
        jv s = jv_str(c, v);
        if (prec >= 0) {
            size_t cut = 0; int64_t k = 0;
            while (cut < s.n && k < prec) { int32_t cp; cut += jz_utf8_dec(s.u.s + cut, s.n - cut, &cp); k++; }
            s.n = cut;
        }
        jsb_put(&t, s.u.s, s.n);
        if (!align) align = '<';
    } else {
        if (!jv_is_number(v)) jz_fail(c, at, "unknown format code '%c' for object of type '%s'", type ? type : 's', jv_type_name(v));
        numeric = 1;
        char buf[512];
        char sflag[2] = { sign == '-' ? 0 : sign, 0 };
        if (!type && v.t != JV_FLOAT) type = 'd';
        if ((type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b' || type == 'c') && v.t == JV_FLOAT)
            jz_fail(c, at, "unknown format code '%c' for object of type 'float'", type);
        if (type == 'd' || type == 'n') {
            long long x = v.t == JV_BOOL ? v.u.b : (long long)v.u.i;
            snprintf(buf, sizeof buf, "%s%lld", x < 0 ? "" : sflag, x);
            if (comma) {   /* group digits */
                char g[600]; const char *d = buf; size_t gi = 0;
                while (*d && (*d < '0' || *d > '9')) g[gi++] = *d++;
                size_t nd = strlen(d);
                for (size_t q = 0; q < nd; q++) { if (q && (nd - q) % 3 == 0) g[gi++] = (char)comma; g[gi++] = d[q]; }
                g[gi] = 0;
                size_t gl = gi < sizeof buf - 1 ? gi : sizeof buf - 1;
                memcpy(buf, g, gl); buf[gl] = 0;
            }
        } else if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
            long long x = v.t == JV_BOOL ? v.u.b : (long long)v.u.i;
            unsigned long long ux = x < 0 ? (unsigned long long)(-(x + 1)) + 1 : (unsigned long long)x;
            char digs[80]; int nd = 0;
            unsigned base = type == 'o' ? 8 : type == 'b' ? 2 : 16;
            do { unsigned d = (unsigned)(ux % base); digs[nd++] = (char)(d < 10 ? '0' + d : (type == 'X' ? 'A' : 'a') + d - 10); ux /= base; } while (ux);
            size_t bi = 0;
            if (x < 0) buf[bi++] = '-'; else if (sflag[0]) buf[bi++] = sflag[0];
            if (alt) { buf[bi++] = '0'; buf[bi++] = type == 'X' ? 'X' : type; }
            while (nd) buf[bi++] = digs[--nd];
            buf[bi] = 0;
        } else if (type == 'c') {
            int32_t cp = (int32_t)(v.t == JV_BOOL ? v.u.b : v.u.i);
            size_t q = jz_utf8_enc(cp, buf); buf[q] = 0; numeric = 0;
        } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == '%' || type == 'g' || type == 'G' || !type) {
            double x = jv_num(v);
            if (!type) {
                if (prec < 0) { jv_format_float(x, buf, sizeof buf); if (sflag[0] && x >= 0) { memmove(buf + 1, buf, strlen(buf) + 1); buf[0] = sflag[0]; } }
                else snprintf(buf, sizeof buf, "%s%.*g", x < 0 ? "" : sflag, prec ? prec : 1, x);
            } else if (type == '%') snprintf(buf, sizeof buf, "%s%.*f%%", x < 0 ? "" : sflag, prec < 0 ? 6 : prec, x * 100);
            else {
                char f2[16];
                snprintf(f2, sizeof f2, "%%s%%.*%c", type);
                snprintf(buf, sizeof buf, f2, x < 0 ? "" : sflag, prec < 0 ? 6 : prec, x);
            }
        } else jz_fail(c, at, "unknown format code '%c'", type);
        jsb_puts(&t, buf);
        if (!align) align = '>';
    }
    jv s = jsb_value(&t);
    if (zero && numeric && !align) align = '=';
    if (zero && numeric && fill_n == 1 && fill[0] == ' ') { fill[0] = '0'; if (align == '>') align = '='; }
    int64_t len = (int64_t)jz_utf8_len(s.u.s, s.n);
    if (width > len && align == '=') {
        size_t pre = 0;
        if (s.n && strchr("+- ", s.u.s[0])) pre = 1;
        jsb_put(out, s.u.s, pre);
        for (int64_t q = len; q < width; q++) jsb_put(out, fill, fill_n);
        jsb_put(out, s.u.s + pre, s.n - pre);
        return;
    }
    if (align == '=') align = '>';
    s = jz_str_pad(c, s, width, align, fill, fill_n);
    jsb_put(out, s.u.s, s.n);
}

/* Python str.format(*args, **kwargs) */
static int all_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) if (s[i] < '0' || s[i] > '9') return 0;
    return n > 0;
}

jv jz_str_format(jctx *c, const jnode *at, jv fmt, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    jsb b; jsb_init(&b, c);
    const char *s = fmt.u.s; size_t n = fmt.n;
    int auto_idx = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '}') {
            if (i + 1 < n && s[i + 1] == '}') { jsb_putc(&b, '}'); i++; continue; }
            jz_fail(c, at, "single '}' encountered in format string");
        }
        if (ch != '{') { jsb_putc(&b, ch); continue; }
        if (i + 1 < n && s[i + 1] == '{') { jsb_putc(&b, '{'); i++; continue; }
        size_t q = i + 1;
        while (q < n && s[q] != '}' && s[q] != '!' && s[q] != ':') q++;
        if (q >= n) jz_fail(c, at, "expected '}' before end of string");
        const char *field = s + i + 1; size_t fn = q - i - 1;
        char conv = 0;
        if (s[q] == '!') { if (q + 1 >= n) jz_fail(c, at, "end of string while looking for conversion specifier"); conv = s[q + 1]; q += 2; }
        const char *spec = ""; size_t sn = 0;
        if (q < n && s[q] == ':') {
            size_t e = q + 1;
            while (e < n && s[e] != '}') e++;
            spec = s + q + 1; sn = e - q - 1; q = e;
        }
        if (q >= n || s[q] != '}') jz_fail(c, at, "expected '}' before end of string");
        /* field name: index, keyword, optionally followed by .attr / [key] */
        size_t base_n = 0;
        while (base_n < fn && field[base_n] != '.' && field[base_n] != '[') base_n++;
        jv v;
        if (base_n == 0) {
            if (auto_idx < 0) jz_fail(c, at, "cannot switch from manual field numbering to automatic");
            if (auto_idx >= nargs) jz_fail(c, at, "Replacement index %d out of range for positional args tuple", auto_idx);
            v = args[auto_idx++];
        } else if (all_digits(field, base_n)) {
            /* an index of any length: atoi overflowed (to a negative index read before args) */
            int64_t idx = 0;
            for (size_t z = 0; z < base_n && idx <= nargs; z++) idx = idx * 10 + (field[z] - '0');
            if (auto_idx > 0) jz_fail(c, at, "cannot switch from automatic field numbering to manual");
            auto_idx = -1;
            if (idx >= nargs) jz_fail(c, at, "Replacement index %.*s out of range for positional args tuple", (int)base_n, field);
            v = args[idx];
        } else {
            int found = -1;
            for (int k = 0; k < nkw; k++) if (strlen(kwn[k]) == base_n && !memcmp(kwn[k], field, base_n)) found = k;
            if (found < 0) jz_fail(c, at, "KeyError: '%.*s'", (int)base_n, field);
            v = kwv[found];
        }
        size_t p = base_n;
        while (p < fn) {
            if (field[p] == '.') {
                size_t e = p + 1;
                while (e < fn && field[e] != '.' && field[e] != '[') e++;
                v = jz_getattr(c, at, v, field + p + 1, e - p - 1);
                p = e;
            } else {
                size_t e = p + 1;
                while (e < fn && field[e] != ']') e++;
                const char *k = field + p + 1; size_t kn = e - p - 1;
                int digits = kn > 0;
                for (size_t z = 0; z < kn; z++) if (k[z] < '0' || k[z] > '9') digits = 0;
                v = jz_getitem(c, at, v, digits ? jv_int(atoll(k)) : jv_strn(k, kn));
                p = e + 1;
            }
        }
        if (conv == 'r' || conv == 'a') { jsb t; jsb_init(&t, c); jv_to_repr(c, &t, v); v = jsb_value(&t); }
        else if (conv == 's') v = jv_str(c, v);
        else if (conv) jz_fail(c, at, "unknown conversion specifier %c", conv);
        jz_format_spec(c, at, &b, v, spec, sn);
        i = q;
    }
    return jsb_value(&b);
}
