/* jsonfsm.c — the JSON prefix recognizer (see jsonfsm.h). One byte at a time:
 * a mode for what may come next, a container stack, and sub-positions inside
 * literals, escapes and numbers. */
#include "jsonfsm.h"

#include <string.h>

enum {
    M_VALUE,       /* a value must start (whitespace allowed) */
    M_KEY_OR_END,  /* after '{': '"' or '}' */
    M_KEY,         /* after ',' in an object: '"' */
    M_COLON,       /* after a key */
    M_AFTER,       /* after a value: ',' or a closer, or the end at top level */
    M_STRING,      /* inside a string */
    M_ESC,         /* after '\' */
    M_HEX,         /* inside \uXXXX (sub = digits read) */
    M_LIT,         /* inside true/false/null (sub = index, in_key = which literal) */
    M_NUM,         /* inside a number (sub = number state) */
    M_DONE,        /* top-level value complete */
};

/* number states */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static const char *const lits[3] = {"true", "false", "null"};

void lmc_jfsm_init(lmc_jfsm *j, int object_only) {
    memset(j, 0, sizeof *j);
    j->mode = M_VALUE;
    j->object_only = (uint8_t)(object_only != 0);
}

int lmc_jfsm_done(const lmc_jfsm *j) { return j->mode == M_DONE; }

int lmc_jfsm_utf8(uint8_t *pending, int c) {
    if (*pending) {
        if ((c & 0xC0) != 0x80) return -1;
        (*pending)--;
        return 0;
    }
    if (c < 0x80) return 0;
    if (c >= 0xC2 && c <= 0xDF) *pending = 1;
    else if (c >= 0xE0 && c <= 0xEF) *pending = 2;
    else if (c >= 0xF0 && c <= 0xF4) *pending = 3;
    else return -1;
    return 0;
}

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* A value ended: where do we go? */
static void value_done(lmc_jfsm *j) { j->mode = j->depth == 0 ? M_DONE : M_AFTER; }

static int start_value(lmc_jfsm *j, int c) {
    if (j->depth == 0 && j->object_only && c != '{') return -1;
    switch (c) {
    case '{':
    case '[':
        if (j->depth >= LMC_JFSM_MAX_DEPTH) return -1;
        j->stack[j->depth++] = (char)c;
        j->mode = c == '{' ? M_KEY_OR_END : M_VALUE;
        j->sub = c == '[' ? 1 : 0; /* in M_VALUE, sub = 1: ']' may close an empty array */
        return 0;
    case '"': j->mode = M_STRING; j->in_key = 0; return 0;
    case 't': j->mode = M_LIT; j->in_key = 0; j->sub = 1; return 0;
    case 'f': j->mode = M_LIT; j->in_key = 1; j->sub = 1; return 0;
    case 'n': j->mode = M_LIT; j->in_key = 2; j->sub = 1; return 0;
    case '-': j->mode = M_NUM; j->sub = N_MINUS; return 0;
    case '0': j->mode = M_NUM; j->sub = N_ZERO; return 0;
    default:
        if (c >= '1' && c <= '9') { j->mode = M_NUM; j->sub = N_INT; return 0; }
        return -1;
    }
}

static int close_container(lmc_jfsm *j, int c) {
    if (j->depth == 0) return -1;
    char open = j->stack[j->depth - 1];
    if ((c == '}' && open != '{') || (c == ']' && open != '[')) return -1;
    j->depth--;
    value_done(j);
    return 0;
}

static int after_value(lmc_jfsm *j, int c) {
    if (c == ',') {
        j->mode = j->stack[j->depth - 1] == '{' ? M_KEY : M_VALUE;
        j->sub = 0;
        return 0;
    }
    if (c == '}' || c == ']') return close_container(j, c);
    return -1;
}

/* Can the number end here (is it complete)? */
static int num_complete(int sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

static int step(lmc_jfsm *j, int c) {
    if (is_ws(c) && (j->mode == M_VALUE || j->mode == M_KEY_OR_END || j->mode == M_KEY || j->mode == M_COLON ||
                     j->mode == M_AFTER || j->mode == M_DONE)) {
        if (j->mode == M_VALUE && j->depth == 0) return -1; /* nothing before the top-level value */
        if (++j->ws > LMC_JFSM_MAX_WS) return -1;
        return 0;
    }
    if (j->mode != M_STRING) j->ws = 0;
    switch (j->mode) {
    case M_VALUE:
        if (c == ']' && j->sub == 1) return close_container(j, c);
        return start_value(j, c);
    case M_KEY_OR_END:
        if (c == '}') return close_container(j, c);
        /* fall through */
    case M_KEY:
        if (c != '"') return -1;
        j->mode = M_STRING;
        j->in_key = 1;
        return 0;
    case M_COLON:
        if (c != ':') return -1;
        j->mode = M_VALUE;
        j->sub = 0;
        return 0;
    case M_AFTER: return after_value(j, c);
    case M_STRING:
        j->ws = 0;
        if (lmc_jfsm_utf8(&j->u8, c) < 0) return -1;
        if (c >= 0x80) return 0;
        if (c == '"') {
            if (j->in_key) j->mode = M_COLON;
            else value_done(j);
            return 0;
        }
        if (c == '\\') { j->mode = M_ESC; return 0; }
        return (unsigned char)c < 0x20 ? -1 : 0;
    case M_ESC:
        if (strchr("\"\\/bfnrt", c) && c) { j->mode = M_STRING; return 0; }
        if (c == 'u') { j->mode = M_HEX; j->sub = 0; return 0; }
        return -1;
    case M_HEX:
        if (!(is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return -1;
        if (++j->sub == 4) j->mode = M_STRING;
        return 0;
    case M_LIT: {
        const char *lit = lits[j->in_key];
        if (c != lit[j->sub]) return -1;
        if (!lit[++j->sub]) value_done(j);
        return 0;
    }
    case M_NUM:
        switch (j->sub) {
        case N_MINUS:
            if (c == '0') { j->sub = N_ZERO; return 0; }
            if (c >= '1' && c <= '9') { j->sub = N_INT; return 0; }
            return -1;
        case N_ZERO:
        case N_INT:
            if (j->sub == N_INT && is_digit(c)) return 0;
            if (c == '.') { j->sub = N_DOT; return 0; }
            if (c == 'e' || c == 'E') { j->sub = N_E; return 0; }
            break;
        case N_DOT:
            if (is_digit(c)) { j->sub = N_FRAC; return 0; }
            return -1;
        case N_FRAC:
            if (is_digit(c)) return 0;
            if (c == 'e' || c == 'E') { j->sub = N_E; return 0; }
            break;
        case N_E:
            if (c == '+' || c == '-') { j->sub = N_ESIGN; return 0; }
            /* fall through */
        case N_ESIGN:
            if (is_digit(c)) { j->sub = N_EXP; return 0; }
            return -1;
        case N_EXP:
            if (is_digit(c)) return 0;
            break;
        }
        /* The number ended at c; c must continue what follows a value. */
        if (!num_complete(j->sub)) return -1;
        value_done(j);
        if (j->mode == M_DONE) return -1; /* only whitespace may follow a top-level value */
        return after_value(j, c);
    case M_DONE: return -1;
    }
    return -1;
}

int lmc_jfsm_feed(lmc_jfsm *j, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        /* A top-level number is complete only at a delimiter; whitespace after it ends it. */
        if (j->mode == M_NUM && is_ws(c)) {
            if (!num_complete(j->sub)) return -1;
            value_done(j);
        }
        if (step(j, c) < 0) return -1;
    }
    return 0;
}
