/* test_fuzz_regress.c — replays the fuzz targets' committed inputs in the normal test suite.
 *
 * Every target of tests/fuzz/ is compiled in here without libFuzzer. Each file of
 * tests/fuzz/corpus/<target>/ (the seeds) and tests/fuzz/regress/<target>/ (inputs that
 * once crashed or broke an invariant, each fixed since) is fed to the same entry point
 * libFuzzer calls. A test fails when a FUZZ_CHECK invariant fails or a directory cannot
 * be read; a crash ends the binary without a RESULT line, which tests/run.sh counts as a
 * failure. Under `make asan` the sanitizers watch every input too.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "../fuzz/fuzz_chat.c"
#include "../fuzz/fuzz_config.c"
#include "../fuzz/fuzz_gguf.c"
#include "../fuzz/fuzz_safetensors.c"
#include "../fuzz/fuzz_server.c"
#include "../fuzz/fuzz_tokenizer_encode.c"
#include "../fuzz/fuzz_tokenizer_load.c"

typedef int (*fuzz_fn)(const uint8_t *, size_t);

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Feed every file of tests/fuzz/<kind>/<target>/ to fn; returns the number fed, -1 if the
 * directory cannot be read (a missing regress directory is 0: no finding yet). */
static int replay_dir(const char *kind, const char *target, fuzz_fn fn) {
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/%s/%s", fuzz_repo_root(), kind, target);
    DIR *d = opendir(dir);
    if (!d) return strcmp(kind, "regress") == 0 ? 0 : -1;
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        if (e->d_name[0] == '.') continue;
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    int fed = 0;
    for (int i = 0; i < n; i++) {
        char path[8600];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        uint8_t *buf = NULL;
        long len = -1;
        if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t)len + 1)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
            int before = fuzz_check_failures_;
            fn(buf, (size_t)len);
            if (fuzz_check_failures_ != before) fprintf(stderr, "  (input %s)\n", path);
            fed++;
        } else {
            fprintf(stderr, "  cannot read %s\n", path);
            fed = -1;
        }
        free(buf);
        if (f) fclose(f);
        free(names[i]);
        if (fed < 0) { for (int j = i + 1; j < n; j++) free(names[j]); break; }
    }
    return fed;
}

static void replay(const char *target, fuzz_fn fn) {
    int before = fuzz_check_failures_;
    int seeds = replay_dir("corpus", target, fn);
    int regress = replay_dir("regress", target, fn);
    CHECK_MSG(seeds > 0, "%s: no seed inputs read (%d)", target, seeds);
    CHECK_MSG(regress >= 0, "%s: regress inputs unreadable", target);
    CHECK_MSG(fuzz_check_failures_ == before, "%s: %d invariant failures", target, fuzz_check_failures_ - before);
}

static void test_safetensors(void) {
    CHECK(fuzz_safetensors_init() == 0);
    replay("safetensors", fuzz_safetensors);
}
static void test_gguf(void) { replay("gguf", fuzz_gguf); }
static void test_config(void) { replay("config", fuzz_config); }
static void test_tokenizer_load(void) { replay("tokenizer_load", fuzz_tokenizer_load); }
static void test_tokenizer_encode(void) {
    CHECK(fuzz_tokenizer_encode_init() == 0);
    replay("tokenizer_encode", fuzz_tokenizer_encode);
    for (int i = 0; i < tokenc_n_; i++) lmc_tokenizer_free(tokenc_tok_[i]);
    tokenc_n_ = 0;
}
static void test_chat(void) { replay("chat", fuzz_chat); }
static void test_server(void) {
    CHECK(fuzz_server_init() == 0);
    replay("server", fuzz_server);
    fuzz_server_fini();
}

/* FUZZ_CHECK counts its failures here, so a broken invariant cannot pass unnoticed. */
static void test_checks_can_fail(void) {
    int before = fuzz_check_failures_;
    FUZZ_CHECK(1 + 1 == 3);
    CHECK(fuzz_check_failures_ == before + 1);
    fuzz_check_failures_ = before;
}

int main(void) {
    RUN(test_checks_can_fail);
    RUN(test_safetensors);
    RUN(test_gguf);
    RUN(test_config);
    RUN(test_tokenizer_load);
    RUN(test_tokenizer_encode);
    RUN(test_chat);
    RUN(test_server);
    return TEST_END();
}
