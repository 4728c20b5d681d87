/* reason.c — the reasoning splitter (see reason.h). Bytes are appended to a hold buffer and
 * a small state machine decides as much of it as it can: "think" skips leading whitespace,
 * opens on "<think>" at the very start (or starts open), closes on the first "</think>" and
 * trims whitespace around both parts; "harmony" reads a header up to "<|message|>", routes the
 * body by channel until "<|end|>" (or "<|return|>", "<|call|>", "<|start|>"), and drops the
 * markup between messages. Only a suffix that may still become a marker stays held.
 */
#include "reason.h"

#include <stdlib.h>
#include <string.h>

enum {
    T_START = 0, /* nothing but whitespace yet: "<think>" may still open */
    T_LEAD,      /* reasoning, before its first non-whitespace byte */
    T_REASON,    /* reasoning */
    T_AFTER,     /* after "</think>", before the content's first non-whitespace byte */
    T_CONTENT,   /* content to the end */
    H_HEADER,    /* harmony: role / channel / recipient up to "<|message|>" */
    H_BODY,      /* harmony: a message's text */
    H_BETWEEN,   /* harmony: after a message's end, before the next "<|start|>" */
};

#define NPOS ((size_t)-1)
#define HEADER_MAX 4096 /* a longer "header" is not harmony markup: it becomes content */

static const char *const body_ends[] = {"<|end|>", "<|return|>", "<|call|>", "<|start|>"};

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static size_t find(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    for (size_t i = 0; i + ml <= n; i++)
        if (s[i] == m[0] && !memcmp(s + i, m, ml)) return i;
    return NPOS;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of m. */
static size_t partial(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, m, k)) return k;
    return 0;
}

static void consume(lmc_reason *rs, size_t k) {
    if (k == 0) return;
    if (k < rs->len) memmove(rs->buf, rs->buf + k, rs->len - k);
    rs->len -= k;
    rs->pre = rs->pre > k ? rs->pre - k : 0;
}

static int append(lmc_reason *rs, const char *p, size_t n) {
    if (rs->len + n > rs->cap) {
        size_t cap = (rs->len + n) * 2 + 64;
        char *b = realloc(rs->buf, cap);
        if (!b) { rs->oom = 1; return -1; }
        rs->buf = b;
        rs->cap = cap;
    }
    if (n) memcpy(rs->buf + rs->len, p, n);
    rs->len += n;
    return 0;
}

/* A harmony header h[0..n) (without "<|message|>"): where its body goes, and whether it
 * addresses a recipient (a tool call: its header is kept as content text). */
static int header_dest(const char *h, size_t n, int *to) {
    *to = find(h, n, "to=") != NPOS;
    size_t c = find(h, n, "<|channel|>");
    if (c == NPOS) return 0;
    const char *name = h + c + 11;
    size_t k = 0;
    while (c + 11 + k < n && !is_ws(name[k]) && name[k] != '<') k++;
    return !*to && k == 8 && !memcmp(name, "analysis", 8);
}

void lmc_reason_init(lmc_reason *rs, lmc_reason_fmt fmt, const char *prompt, size_t n) {
    memset(rs, 0, sizeof *rs);
    rs->fmt = fmt;
    rs->state = fmt == LMC_REASON_HARMONY ? H_HEADER : fmt == LMC_REASON_THINK ? T_START : T_CONTENT;
    if (!prompt) return;
    if (fmt == LMC_REASON_THINK) {
        while (n > 0 && is_ws(prompt[n - 1])) n--;
        if (n >= 7 && !memcmp(prompt + n - 7, "<think>", 7)) rs->state = T_LEAD;
    } else if (fmt == LMC_REASON_HARMONY) {
        /* The prompt's last message header, from its last "<|start|>" on. */
        size_t s = 0, c = NPOS;
        for (size_t i = 0; i + 11 <= n; i++) {
            if (!memcmp(prompt + i, "<|start|>", 9)) { s = i + 9; c = NPOS; }
            if (!memcmp(prompt + i, "<|channel|>", 11)) c = i;
        }
        if (n >= 11 && !memcmp(prompt + n - 11, "<|message|>", 11)) { /* the prompt opened a message */
            const char *h = prompt + (c != NPOS && c > s ? c : s);
            size_t hn = (size_t)(prompt + n - 11 - h);
            int to;
            if (find(h, hn, "<|message|>") != NPOS) return;
            rs->dest = header_dest(h, hn, &to);
            rs->state = H_BODY;
            return;
        }
        if (s == 0) return;
        const char *h = prompt + s;
        size_t hn = n - s, m = find(h, hn, "<|message|>");
        if (m == NPOS && find(h, hn, "<|end|>") == NPOS && hn < HEADER_MAX) {
            append(rs, h, hn); /* an open header: the output completes it */
            rs->pre = hn;
        }
    }
}

void lmc_reason_free(lmc_reason *rs) {
    free(rs->buf);
    rs->buf = NULL;
    rs->len = rs->cap = 0;
}

/* Decide what can be decided of the held bytes. */
static void run(lmc_reason *rs, int final, lmc_reason_emit emit, void *ctx) {
    for (;;) {
        const char *b = rs->buf;
        size_t n = rs->len, i = 0;
        switch (rs->state) {
        case T_START:
            while (i < n && is_ws(b[i])) i++;
            if (i == n) {
                if (final && n) { emit(ctx, 0, b, n); consume(rs, n); }
                return;
            }
            if (n - i >= 7 && !memcmp(b + i, "<think>", 7)) { consume(rs, i + 7); rs->state = T_LEAD; continue; }
            if (n - i < 7 && !memcmp(b + i, "<think>", n - i) && !final) return;
            rs->state = T_CONTENT;
            continue;
        case T_LEAD:
        case T_AFTER:
            while (i < n && is_ws(b[i])) i++;
            consume(rs, i);
            if (i == n) return;
            rs->state = rs->state == T_LEAD ? T_REASON : T_CONTENT;
            continue;
        case T_REASON: {
            size_t k = find(b, n, "</think>");
            size_t e = k != NPOS ? k : final ? n : n - partial(b, n, "</think>");
            while (e > 0 && is_ws(b[e - 1])) e--; /* a trailing whitespace run waits for what follows */
            if (e) emit(ctx, 1, b, e);
            if (k != NPOS) { consume(rs, k + 8); rs->state = T_AFTER; continue; }
            consume(rs, final ? n : e);
            return;
        }
        case T_CONTENT:
            if (n) emit(ctx, 0, b, n);
            consume(rs, n);
            return;
        case H_HEADER: {
            size_t k = find(b, n, "<|message|>");
            if (k == NPOS) {
                if (final) { /* a cut header is markup, unless it holds none (not harmony at all) */
                    if (n > rs->pre && find(b + rs->pre, n - rs->pre, "<|") == NPOS) emit(ctx, 0, b + rs->pre, n - rs->pre);
                    consume(rs, n);
                } else if (n > HEADER_MAX) {
                    consume(rs, rs->pre);
                    rs->state = H_BODY;
                    rs->dest = 0;
                    continue;
                }
                return;
            }
            int to;
            rs->dest = header_dest(b, k, &to);
            if (to && !rs->bare_calls) { /* a call's header stays visible to the client, from its first marker or recipient on */
                size_t m = find(b, k, "<|"), t = find(b, k, "to=");
                m = m < t ? m : t;
                m = m > rs->pre ? m : rs->pre;
                emit(ctx, 0, b + m, k + 11 - m);
            }
            consume(rs, k + 11);
            rs->state = H_BODY;
            continue;
        }
        case H_BODY: {
            size_t k = NPOS, ml = 0, hold = 0;
            int start = 0;
            for (int m = 0; m < 4; m++) {
                size_t at = find(b, n, body_ends[m]), h = partial(b, n, body_ends[m]);
                if (at < k) { k = at; ml = strlen(body_ends[m]); start = m == 3; }
                if (h > hold) hold = h;
            }
            size_t e = k != NPOS ? k : final ? n : n - hold;
            if (e) emit(ctx, rs->dest, b, e);
            if (k == NPOS) { consume(rs, e); return; }
            consume(rs, k + ml);
            rs->state = start ? H_HEADER : H_BETWEEN;
            continue;
        }
        case H_BETWEEN:
            while (i < n && is_ws(b[i])) i++;
            if (i == n) { consume(rs, n); return; }
            if (n - i >= 9 && !memcmp(b + i, "<|start|>", 9)) { consume(rs, i + 9); rs->state = H_HEADER; continue; }
            if (n - i < 9 && !memcmp(b + i, "<|start|>", n - i) && !final) return;
            consume(rs, i); /* a header without "<|start|>" */
            rs->state = H_HEADER;
            continue;
        default:
            return;
        }
    }
}

int lmc_reason_feed(lmc_reason *rs, const char *p, size_t n, int final, lmc_reason_emit emit, void *ctx) {
    if (rs->fmt == LMC_REASON_OFF) {
        if (n) emit(ctx, 0, p, n);
        return 0;
    }
    if (append(rs, p, n) < 0) return -1;
    run(rs, final, emit, ctx);
    return rs->oom ? -1 : 0;
}

int lmc_reason_in_content(const lmc_reason *rs) {
    switch (rs->state) {
    case T_LEAD:
    case T_REASON:
    case H_HEADER:
    case H_BETWEEN: return 0;
    case H_BODY: return rs->dest == 0;
    default: return 1;
    }
}

const char *lmc_reason_fmt_name(lmc_reason_fmt f) {
    return f == LMC_REASON_THINK ? "think" : f == LMC_REASON_HARMONY ? "harmony" : "off";
}

lmc_reason_fmt lmc_reason_detect(const char *src, int has_channel_token) {
    if (src && has_channel_token && strstr(src, "<|channel|>")) return LMC_REASON_HARMONY;
    return LMC_REASON_THINK;
}
