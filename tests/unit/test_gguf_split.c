/* test_gguf_split.c — split GGUF files (llama.cpp's gguf-split layout): written by
 * lmc_gguf_writer_write_split and read back as one file from the first part; hand-made damaged
 * sets (a part numbered wrong, a tensor in two parts, a wrong total, a count that disagrees, a
 * missing part, the first part renamed, a later part opened alone) are refused by name.
 * The CLI side (lmc convert --split-max-tensors, -m on the first file) is tests/cli/gguf_split.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/gguf.h"
#include "test.h"

static char tmpdir[128];

static void path_in_tmp(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

/* A file of one split set written by hand: split keys as given, one f32 tensor named tname. */
static void split_file(const char *path, int no, int count, int tensors_count, const char *tname) {
    lmc_gguf_writer *w;
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    if (no == 0) CHECK(lmc_gguf_writer_add_str(w, "general.name", "split") == LMC_OK);
    CHECK(lmc_gguf_writer_add_u16(w, "split.no", (uint16_t)no) == LMC_OK);
    CHECK(lmc_gguf_writer_add_u16(w, "split.count", (uint16_t)count) == LMC_OK);
    CHECK(lmc_gguf_writer_add_i32(w, "split.tensors.count", tensors_count) == LMC_OK);
    static const float v[4] = {1, 2, 3, 4};
    const int64_t ne[1] = {4};
    CHECK(lmc_gguf_writer_add_tensor(w, tname, LMC_GGML_F32, 1, ne, v) == LMC_OK);
    CHECK(lmc_gguf_writer_write(w, path) == LMC_OK);
    lmc_gguf_writer_free(w);
}

/* Split GGUF (llama.cpp's gguf-split layout): written by lmc_gguf_writer_write_split and read
 * back as one file from its first part; damaged sets are refused naming the problem. */
static void test_split(void) {
    lmc_gguf_writer *w;
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    CHECK(lmc_gguf_writer_add_str(w, "general.architecture", "llama") == LMC_OK);
    CHECK(lmc_gguf_writer_add_u32(w, "test.value", 42) == LMC_OK);
    float data[5][8];
    char names[5][24]; /* room for any int: -Wformat-truncation at -O1 */
    for (int t = 0; t < 5; t++) {
        for (int i = 0; i < 8; i++) data[t][i] = (float)(t * 10 + i);
        snprintf(names[t], sizeof names[t], "t%d.weight", t);
        const int64_t ne[2] = {4, 2};
        CHECK(lmc_gguf_writer_add_tensor(w, names[t], LMC_GGML_F32, 2, ne, data[t]) == LMC_OK);
    }
    char prefix[300], p1[400], p2[400], p3[400];
    path_in_tmp(prefix, sizeof prefix, "sp");
    int n_files = 0;
    CHECK(lmc_gguf_writer_write_split(w, prefix, 2, &n_files) == LMC_OK);
    CHECK_EQ_INT(n_files, 3);
    CHECK(lmc_gguf_writer_write_split(w, prefix, 0, NULL) == LMC_ERR_ARG);
    lmc_gguf_writer_free(w);
    CHECK(lmc_gguf_split_path(prefix, 1, 3, p1, sizeof p1) == LMC_OK);
    CHECK(lmc_gguf_split_path(prefix, 2, 3, p2, sizeof p2) == LMC_OK);
    CHECK(lmc_gguf_split_path(prefix, 3, 3, p3, sizeof p3) == LMC_OK);
    CHECK(strstr(p1, "sp-00001-of-00003.gguf") != NULL);

    lmc_gguf *g = NULL;
    CHECK(lmc_gguf_open(p1, &g) == LMC_OK);
    if (g) {
        CHECK_EQ_INT(lmc_gguf_n_tensors(g), 5);
        CHECK_EQ_INT(lmc_gguf_n_files(g), 3);
        int64_t v = 0;
        CHECK(lmc_gguf_get_int(g, "test.value", &v) == LMC_OK && v == 42);
        for (int t = 0; t < 5; t++) {
            const lmc_gguf_tensor *x = lmc_gguf_find_tensor(g, names[t]);
            CHECK_MSG(x && x->nbytes == sizeof data[t] && !memcmp(x->data, data[t], sizeof data[t]), "%s", names[t]);
        }
        CHECK_EQ_INT(lmc_gguf_total_bytes(g), 5 * sizeof data[0]);
        lmc_gguf_close(g);
    }
    /* a later part alone: refused, pointing at the first */
    CHECK(lmc_gguf_open(p2, &g) == LMC_ERR_ARG);
    CHECK(strstr(lmc_last_error(), "file 2 of 3") && strstr(lmc_last_error(), "00001-of-00003"));
    /* a missing part: named */
    CHECK(unlink(p3) == 0);
    CHECK(lmc_gguf_open(p1, &g) < 0);
    CHECK(strstr(lmc_last_error(), "file 3 of the split") && strstr(lmc_last_error(), "sp-00003-of-00003.gguf"));
    /* the first file under another name: its parts cannot be found */
    char other[300];
    path_in_tmp(other, sizeof other, "renamed.gguf");
    CHECK(rename(p1, other) == 0);
    CHECK(lmc_gguf_open(other, &g) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "must be named PREFIX-00001-of-00003.gguf") != NULL);
    unlink(other);
    unlink(p2);

    /* hand-made sets of two: a part numbered wrong, a tensor in both, a wrong total, a count
     * that disagrees */
    path_in_tmp(prefix, sizeof prefix, "hs");
    CHECK(lmc_gguf_split_path(prefix, 1, 2, p1, sizeof p1) == LMC_OK);
    CHECK(lmc_gguf_split_path(prefix, 2, 2, p2, sizeof p2) == LMC_OK);
    split_file(p1, 0, 2, 2, "a");
    split_file(p2, 0, 2, 2, "b");
    CHECK(lmc_gguf_open(p1, &g) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "split.no 0 of 2 where file 2 of 2") != NULL);
    split_file(p2, 1, 2, 2, "a");
    CHECK(lmc_gguf_open(p1, &g) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "tensor a is in two files") != NULL);
    split_file(p2, 1, 2, 2, "b");
    split_file(p1, 0, 2, 3, "a");
    CHECK(lmc_gguf_open(p1, &g) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "split.tensors.count is 3") != NULL);
    split_file(p1, 0, 2, 2, "a");
    split_file(p2, 1, 3, 2, "b");
    CHECK(lmc_gguf_open(p1, &g) == LMC_ERR_FORMAT);
    split_file(p2, 1, 2, 2, "b");
    CHECK(lmc_gguf_open(p1, &g) == LMC_OK);
    if (g) {
        CHECK(lmc_gguf_find_tensor(g, "a") && lmc_gguf_find_tensor(g, "b"));
        lmc_gguf_close(g);
    }
    unlink(p1);
    unlink(p2);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lmc-test-gguf-split-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_split);
    rmdir(tmpdir);
    return TEST_END();
}
