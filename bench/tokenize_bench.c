/* tokenize_bench.c — tokenizer load time and encode throughput (not a test).
 *
 *     build/bench/tokenize_bench DIR [TEXTFILE]
 *
 * Loads DIR/tokenizer.json (best of 3), then encodes TEXTFILE (default: 1 MB of
 * built-in mixed text) split into documents at blank lines ("\n\n"), repeated until
 * at least 2 s have passed, and prints one line: load ms, MB/s, tokens/s.
 * bench/tokenize_bench.mjs runs it next to @huggingface/tokenizers on the same text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tok/tokenizer.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static char *builtin_text(size_t want, size_t *len) {
    static const char *parts[] = {
        "The quick brown fox jumps over the lazy dog. ", "It's 3.14159 — or about $1,234.56 in 2024!\n",
        "def main(argv):\n    return sum(int(x) for x in argv[1:])\n\n", "naïve café résumé Ångström ",
        "你好，世界！机器学习很有趣。", "مرحبا بالعالم ", "👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 ", "Русский текст, Ελληνικά. ",
        "<div class=\"x\">a &amp; b</div>\r\n", "    indented\twith\ttabs   and   spaces\n\n",
    };
    char *buf = malloc(want + 256);
    size_t n = 0;
    unsigned s = 12345;
    while (n < want) {
        s = s * 1103515245u + 12345u;
        const char *p = parts[(s >> 16) % (sizeof parts / sizeof parts[0])];
        size_t l = strlen(p);
        memcpy(buf + n, p, l);
        n += l;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s TOKENIZER_DIR [TEXTFILE]\n", argv[0]); return 2; }
    size_t len;
    char *text;
    if (argc > 2) {
        FILE *f = fopen(argv[2], "rb");
        if (!f) { perror(argv[2]); return 1; }
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        rewind(f);
        text = malloc(len + 1);
        if (fread(text, 1, len, f) != len) { fclose(f); fprintf(stderr, "short read\n"); return 1; }
        fclose(f);
        text[len] = 0;
    } else text = builtin_text(1 << 20, &len);

    double best = 1e30;
    lmc_tokenizer *tok = NULL;
    for (int r = 0; r < 3; r++) {
        double t0 = now_ms();
        if (lmc_tokenizer_load(argv[1], &tok) < 0) { fprintf(stderr, "%s\n", lmc_last_error()); return 1; }
        double t = now_ms() - t0;
        if (t < best) best = t;
        if (r < 2) lmc_tokenizer_free(tok);
    }
    /* documents split at blank lines */
    size_t n_docs = 0, cap = 1024;
    size_t *off = malloc(cap * sizeof *off), *dl = malloc(cap * sizeof *dl);
    for (size_t i = 0; i < len;) {
        const char *e = strstr(text + i, "\n\n");
        size_t end = e ? (size_t)(e - text) + 2 : len;
        if (n_docs == cap) { cap *= 2; off = realloc(off, cap * sizeof *off); dl = realloc(dl, cap * sizeof *dl); }
        off[n_docs] = i;
        dl[n_docs++] = end - i;
        i = end;
    }
    long long tokens = 0;
    int reps = 0;
    double t0 = now_ms(), el;
    do {
        for (size_t d = 0; d < n_docs; d++) {
            int32_t *ids;
            int n;
            if (lmc_tokenizer_encode(tok, text + off[d], dl[d], 0, &ids, &n) < 0) { fprintf(stderr, "%s\n", lmc_last_error()); return 1; }
            tokens += n;
            free(ids);
        }
        reps++;
        el = now_ms() - t0;
    } while (el < 2000);
    double mb = (double)len * reps / 1e6;
    printf("load_ms %.1f  encode_MBps %.2f  tokens_per_s %.0f  docs %zu  bytes %zu  reps %d\n", best, mb / (el / 1e3),
           (double)tokens / (el / 1e3), n_docs, len, reps);
    lmc_tokenizer_free(tok);
    free(off);
    free(dl);
    free(text);
    return 0;
}
