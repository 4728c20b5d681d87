/* test_gguf.c — GGUF reader, writer and architecture mapping.
 *
 * Round trips through the writer (every metadata type, arrays, tensors of
 * several GGML types, alignments 32/64/1), nested arrays from hand-built
 * bytes, dozens of crafted malformed files (each must be refused with a
 * message naming the problem), every truncation of a valid file, a mutation
 * fuzz loop (must never crash; run under ASan), the GGML type table, the
 * config.json and tensor-name mapping of each architecture (fed through
 * lmc's own config normalizer), and the inverse of llama.cpp's q/k permute.
 * The converter and the fixture round trips are in test_gguf_convert.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dtype.h"
#include "io/gguf.h"
#include "io/gguf_arch.h"
#include "io/gguf_view.h"
#include "model/config.h"
#include "test.h"
#include "test_rng.h"

static char tmpdir[128];

static void path_in_tmp(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

/* ---- byte builder for hand-made files --------------------------------------------------------- */

typedef struct bb { uint8_t *p; size_t n, cap; } bb;

static void bb_raw(bb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n) nc *= 2;
        b->p = realloc(b->p, nc);
        if (!b->p) abort();
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_raw(b, &v, 1); }
static void bb_u32(bb *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    bb_raw(b, x, 4);
}
static void bb_u64(bb *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    bb_raw(b, x, 8);
}
static void bb_str(bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_raw(b, s, strlen(s));
}
static void bb_pad(bb *b, size_t a) {
    while (b->n % a) bb_u8(b, 0);
}
static void hdr(bb *b, uint32_t version, uint64_t n_t, uint64_t n_kv) {
    bb_u32(b, LMC_GGUF_MAGIC);
    bb_u32(b, version);
    bb_u64(b, n_t);
    bb_u64(b, n_kv);
}
static void kv_u32(bb *b, const char *k, uint32_t v) {
    bb_str(b, k);
    bb_u32(b, LMC_GGUF_U32);
    bb_u32(b, v);
}
static void kv_str(bb *b, const char *k, const char *v) {
    bb_str(b, k);
    bb_u32(b, LMC_GGUF_STRING);
    bb_str(b, v);
}
static void tinfo(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) bb_u64(b, ne[i]);
    bb_u32(b, type);
    bb_u64(b, off);
}
static void data_bytes(bb *b, size_t align, size_t n) {
    bb_pad(b, align);
    for (size_t i = 0; i < n; i++) bb_u8(b, (uint8_t)(i * 7 + 1));
}

/* Open b's bytes from an exact-size heap copy (ASan sees any over-read). */
static lmc_status open_bytes(const bb *b, lmc_gguf **g, uint8_t **copy) {
    *copy = malloc(b->n ? b->n : 1);
    if (b->n) memcpy(*copy, b->p, b->n);
    return lmc_gguf_open_buffer(*copy, b->n, "test.gguf", g);
}

/* A valid hand-made file: 4 KVs incl. a string array, 2 tensors, data ending exactly at EOF. */
static void valid_file(bb *b) {
    hdr(b, 3, 2, 4);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "llama.block_count", 2);
    bb_str(b, "tokenizer.ggml.tokens");
    bb_u32(b, LMC_GGUF_ARRAY);
    bb_u32(b, LMC_GGUF_STRING);
    bb_u64(b, 3);
    bb_str(b, "a");
    bb_str(b, "");
    bb_str(b, "ccc");
    bb_str(b, "x.flag");
    bb_u32(b, LMC_GGUF_BOOL);
    bb_u8(b, 1);
    tinfo(b, "w", 2, (const uint64_t[]){4, 2}, LMC_GGML_F32, 0);
    tinfo(b, "q", 1, (const uint64_t[]){32}, LMC_GGML_Q8_0, 32);
    data_bytes(b, 32, 32 + 34);
}

/* ---- type table ------------------------------------------------------------------------------- */

static void test_type_table(void) {
    /* (id, block elements, block bytes) as listed in gguf-py's GGML_QUANT_SIZES */
    static const struct { uint32_t id; int block, size; const char *name; } want[] = {
        {0, 1, 4, "F32"}, {1, 1, 2, "F16"}, {2, 32, 18, "Q4_0"}, {3, 32, 20, "Q4_1"}, {6, 32, 22, "Q5_0"},
        {7, 32, 24, "Q5_1"}, {8, 32, 34, "Q8_0"}, {9, 32, 40, "Q8_1"}, {10, 256, 84, "Q2_K"}, {11, 256, 110, "Q3_K"},
        {12, 256, 144, "Q4_K"}, {13, 256, 176, "Q5_K"}, {14, 256, 210, "Q6_K"}, {15, 256, 292, "Q8_K"},
        {16, 256, 66, "IQ2_XXS"}, {17, 256, 74, "IQ2_XS"}, {18, 256, 98, "IQ3_XXS"}, {19, 256, 50, "IQ1_S"},
        {20, 32, 18, "IQ4_NL"}, {21, 256, 110, "IQ3_S"}, {22, 256, 82, "IQ2_S"}, {23, 256, 136, "IQ4_XS"},
        {24, 1, 1, "I8"}, {25, 1, 2, "I16"}, {26, 1, 4, "I32"}, {27, 1, 8, "I64"}, {28, 1, 8, "F64"},
        {29, 256, 56, "IQ1_M"}, {30, 1, 2, "BF16"}, {34, 256, 54, "TQ1_0"}, {35, 256, 66, "TQ2_0"},
        {39, 32, 17, "MXFP4"}, {40, 64, 36, "NVFP4"}, {41, 128, 18, "Q1_0"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_EQ_INT(lmc_ggml_block_size(want[i].id), want[i].block);
        CHECK_EQ_INT(lmc_ggml_type_size(want[i].id), want[i].size);
        CHECK_EQ_STR(lmc_ggml_type_name(want[i].id), want[i].name);
    }
    static const uint32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38, 42, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
        CHECK(lmc_ggml_type_name(removed[i]) == NULL);
        CHECK_EQ_INT(lmc_ggml_block_size(removed[i]), 0);
        CHECK_EQ_INT(lmc_ggml_type_size(removed[i]), 0);
    }
    size_t rb;
    CHECK_EQ_INT(lmc_ggml_row_bytes(LMC_GGML_Q4_K, 512, &rb), LMC_OK);
    CHECK_EQ_INT(rb, 288);
    CHECK(lmc_ggml_row_bytes(LMC_GGML_Q4_K, 100, &rb) == LMC_ERR_FORMAT);
    lmc_dtype dt;
    CHECK_EQ_INT(lmc_ggml_type_to_dtype(LMC_GGML_F32, &dt), LMC_OK);
    CHECK_EQ_INT(dt, LMC_DTYPE_F32);
    CHECK_EQ_INT(lmc_ggml_type_to_dtype(LMC_GGML_BF16, &dt), LMC_OK);
    CHECK_EQ_INT(dt, LMC_DTYPE_BF16);
    CHECK_EQ_INT(lmc_ggml_type_to_dtype(LMC_GGML_F16, &dt), LMC_OK);
    CHECK_EQ_INT(dt, LMC_DTYPE_F16);
    CHECK(lmc_ggml_type_to_dtype(LMC_GGML_IQ2_XXS, &dt) == LMC_ERR_UNSUPPORTED);
    CHECK(strstr(lmc_last_error(), "IQ2_XXS") != NULL);
    /* every mapped type agrees with core/dtype on name, block elements and block bytes, and maps back */
    int n_mapped = 0;
    for (uint32_t t = 0; t < LMC_GGML_TYPE_LIMIT; t++) {
        if (!lmc_ggml_type_name(t) || lmc_ggml_type_to_dtype(t, &dt) != LMC_OK) continue;
        n_mapped++;
        CHECK_EQ_STR(lmc_dtype_name(dt), lmc_ggml_type_name(t));
        CHECK_EQ_INT(lmc_dtype_block_elems(dt), lmc_ggml_block_size(t));
        CHECK_EQ_INT(lmc_dtype_block_bytes(dt), lmc_ggml_type_size(t));
        CHECK_EQ_INT(lmc_dtype_row_bytes(dt, 512), lmc_ggml_row_bytes(t, 512, &rb) == LMC_OK ? rb : 0);
        uint32_t back;
        CHECK(lmc_ggml_type_from_dtype(dt, &back) == LMC_OK && back == t);
    }
    CHECK_EQ_INT(n_mapped, 19); /* with MXFP4 (type 39) */
    CHECK(lmc_ggml_type_to_dtype(77, &dt) == LMC_ERR_UNSUPPORTED);
    CHECK(strstr(lmc_last_error(), "77") != NULL);
    uint32_t id;
    CHECK_EQ_INT(lmc_ggml_type_from_dtype(LMC_DTYPE_BF16, &id), LMC_OK);
    CHECK_EQ_INT(id, 30);
    CHECK(lmc_ggml_type_from_dtype(LMC_DTYPE_BOOL, &id) == LMC_ERR_UNSUPPORTED);
}

/* ---- writer round trip ------------------------------------------------------------------------ */

static uint8_t tdata[4][2048];

static void fill_tdata(void) {
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 2048; i++) tdata[t][i] = (uint8_t)(i * (t + 3) + t * 17 + (i >> 8));
}

/* Write the round-trip file with the given alignment; 0 on success. */
static int write_roundtrip(const char *path, uint32_t align) {
    lmc_gguf_writer *w;
    if (lmc_gguf_writer_init(&w) < 0) return -1;
    int ok = 1;
    if (align != 32) ok &= lmc_gguf_writer_set_alignment(w, align) == LMC_OK;
    ok &= lmc_gguf_writer_add_u8(w, "t.u8", 250) == LMC_OK;
    ok &= lmc_gguf_writer_add_i8(w, "t.i8", -100) == LMC_OK;
    ok &= lmc_gguf_writer_add_u16(w, "t.u16", 65000) == LMC_OK;
    ok &= lmc_gguf_writer_add_i16(w, "t.i16", -32000) == LMC_OK;
    ok &= lmc_gguf_writer_add_u32(w, "t.u32", 4000000000u) == LMC_OK;
    ok &= lmc_gguf_writer_add_i32(w, "t.i32", -2000000000) == LMC_OK;
    ok &= lmc_gguf_writer_add_u64(w, "t.u64", 10000000000000000000ull) == LMC_OK;
    ok &= lmc_gguf_writer_add_i64(w, "t.i64", -9000000000000000000ll) == LMC_OK;
    ok &= lmc_gguf_writer_add_f32(w, "t.f32", 1e-6f) == LMC_OK;
    ok &= lmc_gguf_writer_add_f64(w, "t.f64", 3.141592653589793) == LMC_OK;
    ok &= lmc_gguf_writer_add_bool(w, "t.bool", 1) == LMC_OK;
    ok &= lmc_gguf_writer_add_bool(w, "t.false", 0) == LMC_OK;
    ok &= lmc_gguf_writer_add_str(w, "t.str", "héllo {{ template }}") == LMC_OK;
    ok &= lmc_gguf_writer_add_str(w, "t.empty", "") == LMC_OK;
    ok &= lmc_gguf_writer_add_strn(w, "t.nul", "a\0b", 3) == LMC_OK;
    const char *toks[] = {"<s>", "", "▁the", "\n"};
    ok &= lmc_gguf_writer_add_str_arr(w, "t.tokens", toks, 4) == LMC_OK;
    int32_t i32s[] = {-5, 0, 7, 2147483647};
    ok &= lmc_gguf_writer_add_arr(w, "t.i32s", LMC_GGUF_I32, i32s, 4) == LMC_OK;
    float f32s[] = {0.5f, -2.25f, 1e30f};
    ok &= lmc_gguf_writer_add_arr(w, "t.f32s", LMC_GGUF_F32, f32s, 3) == LMC_OK;
    double f64s[] = {1.0 / 3.0};
    ok &= lmc_gguf_writer_add_arr(w, "t.f64s", LMC_GGUF_F64, f64s, 1) == LMC_OK;
    uint8_t bools[] = {1, 0, 1};
    ok &= lmc_gguf_writer_add_arr(w, "t.bools", LMC_GGUF_BOOL, bools, 3) == LMC_OK;
    uint16_t u16s[] = {1, 65535};
    ok &= lmc_gguf_writer_add_arr(w, "t.u16s", LMC_GGUF_U16, u16s, 2) == LMC_OK;
    int8_t i8s[] = {-128, 127};
    ok &= lmc_gguf_writer_add_arr(w, "t.i8s", LMC_GGUF_I8, i8s, 2) == LMC_OK;
    uint64_t u64s[] = {0, 1ull << 40};
    ok &= lmc_gguf_writer_add_arr(w, "t.u64s", LMC_GGUF_U64, u64s, 2) == LMC_OK;
    ok &= lmc_gguf_writer_add_arr(w, "t.none", LMC_GGUF_I64, NULL, 0) == LMC_OK;
    /* tensors: F32 2-D, F16 1-D, BF16 3-D, Q8_0 2-D, Q4_K 1-D, I32 4-D (odd sizes force padding) */
    ok &= lmc_gguf_writer_add_tensor(w, "a.f32", LMC_GGML_F32, 2, (const int64_t[]){3, 5}, tdata[0]) == LMC_OK;
    ok &= lmc_gguf_writer_add_tensor(w, "b.f16", LMC_GGML_F16, 1, (const int64_t[]){7}, tdata[1]) == LMC_OK;
    ok &= lmc_gguf_writer_add_tensor(w, "c.bf16", LMC_GGML_BF16, 3, (const int64_t[]){2, 3, 4}, tdata[2]) == LMC_OK;
    ok &= lmc_gguf_writer_add_tensor(w, "d.q8_0", LMC_GGML_Q8_0, 2, (const int64_t[]){64, 3}, tdata[3]) == LMC_OK;
    ok &= lmc_gguf_writer_add_tensor(w, "e.q4_k", LMC_GGML_Q4_K, 1, (const int64_t[]){512}, tdata[0]) == LMC_OK;
    ok &= lmc_gguf_writer_add_tensor(w, "f.i32", LMC_GGML_I32, 4, (const int64_t[]){1, 2, 3, 5}, tdata[1]) == LMC_OK;
    ok &= lmc_gguf_writer_add_tensor(w, "g.empty", LMC_GGML_F32, 2, (const int64_t[]){4, 0}, tdata[1]) == LMC_OK;
    ok &= lmc_gguf_writer_write(w, path) == LMC_OK;
    lmc_gguf_writer_free(w);
    return ok ? 0 : -1;
}

static void check_roundtrip(const char *path, uint32_t align) {
    lmc_gguf *g;
    lmc_status st = lmc_gguf_open(path, &g);
    CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
    if (st < 0) return;
    CHECK_EQ_INT(lmc_gguf_version(g), 3);
    CHECK_EQ_INT(lmc_gguf_alignment(g), align);
    CHECK_EQ_INT(lmc_gguf_data_offset(g) % align, 0);
    CHECK_EQ_INT(lmc_gguf_n_kv(g), 24 + (align != 32));
    int64_t v;
    double d;
    int b;
    const char *s;
    size_t len;
    CHECK(lmc_gguf_get_int(g, "t.u8", &v) == LMC_OK && v == 250);
    CHECK(lmc_gguf_get_int(g, "t.i8", &v) == LMC_OK && v == -100);
    CHECK(lmc_gguf_get_int(g, "t.u16", &v) == LMC_OK && v == 65000);
    CHECK(lmc_gguf_get_int(g, "t.i16", &v) == LMC_OK && v == -32000);
    CHECK(lmc_gguf_get_int(g, "t.u32", &v) == LMC_OK && v == 4000000000ll);
    CHECK(lmc_gguf_get_int(g, "t.i32", &v) == LMC_OK && v == -2000000000);
    CHECK(lmc_gguf_get_int(g, "t.u64", &v) == LMC_ERR_RANGE); /* 10^19 > INT64_MAX */
    CHECK(lmc_gguf_get_int(g, "t.i64", &v) == LMC_OK && v == -9000000000000000000ll);
    CHECK(lmc_gguf_get_float(g, "t.f32", &d) == LMC_OK && d == (double)1e-6f);
    CHECK(lmc_gguf_get_float(g, "t.f64", &d) == LMC_OK && d == 3.141592653589793);
    CHECK(lmc_gguf_get_bool(g, "t.bool", &b) == LMC_OK && b == 1);
    CHECK(lmc_gguf_get_bool(g, "t.false", &b) == LMC_OK && b == 0);
    CHECK(lmc_gguf_get_str(g, "t.str", &s, &len) == LMC_OK && strcmp(s, "héllo {{ template }}") == 0 && len == strlen(s));
    CHECK(lmc_gguf_get_str(g, "t.empty", &s, &len) == LMC_OK && len == 0 && s[0] == 0);
    CHECK(lmc_gguf_get_str(g, "t.nul", &s, &len) == LMC_OK && len == 3 && memcmp(s, "a\0b", 4) == 0);
    if (align != 32) {
        CHECK(lmc_gguf_get_int(g, "general.alignment", &v) == LMC_OK && v == align);
        CHECK_EQ_INT(lmc_gguf_kv_type(g, lmc_gguf_find_key(g, "general.alignment")), LMC_GGUF_U32);
    }
    /* wrong kinds and absent keys are errors that say so */
    CHECK(lmc_gguf_get_int(g, "t.str", &v) == LMC_ERR_FORMAT && strstr(lmc_last_error(), "string"));
    CHECK(lmc_gguf_get_float(g, "t.i32", &d) == LMC_ERR_FORMAT);
    CHECK(lmc_gguf_get_bool(g, "t.u8", &b) == LMC_ERR_FORMAT);
    CHECK(lmc_gguf_get_str(g, "t.bool", &s, &len) == LMC_ERR_FORMAT);
    CHECK(lmc_gguf_get_int(g, "no.such.key", &v) == LMC_ERR_NOT_FOUND && strstr(lmc_last_error(), "no.such.key"));
    CHECK(lmc_gguf_find_key(g, "no.such.key") == -1);
    /* key order is file order, types as written */
    CHECK_EQ_STR(lmc_gguf_kv_key(g, align != 32 ? 1 : 0), "t.u8");
    CHECK_EQ_INT(lmc_gguf_kv_type(g, lmc_gguf_find_key(g, "t.f64")), LMC_GGUF_F64);
    CHECK_EQ_INT(lmc_gguf_kv_type(g, lmc_gguf_find_key(g, "t.i16")), LMC_GGUF_I16);
    /* arrays */
    lmc_gguf_array a;
    CHECK(lmc_gguf_get_arr(g, "t.tokens", &a) == LMC_OK && a.n == 4 && a.elem_type == LMC_GGUF_STRING);
    const char *toks[] = {"<s>", "", "▁the", "\n"};
    for (uint64_t i = 0; i < 4 && a.n == 4; i++) {
        CHECK(lmc_gguf_arr_str(&a, i, &s, &len) == LMC_OK && len == strlen(toks[i]) && memcmp(s, toks[i], len) == 0);
    }
    CHECK(lmc_gguf_arr_str(&a, 4, &s, &len) == LMC_ERR_RANGE);
    CHECK(lmc_gguf_arr_int(&a, 0, &v) == LMC_ERR_FORMAT);
    CHECK(lmc_gguf_get_arr(g, "t.i32s", &a) == LMC_OK && a.n == 4);
    int32_t i32s[] = {-5, 0, 7, 2147483647};
    for (uint64_t i = 0; i < 4; i++) CHECK(lmc_gguf_arr_int(&a, i, &v) == LMC_OK && v == i32s[i]);
    CHECK(lmc_gguf_arr_float(&a, 0, &d) == LMC_ERR_FORMAT);
    CHECK(lmc_gguf_get_arr(g, "t.f32s", &a) == LMC_OK && a.n == 3);
    CHECK(lmc_gguf_arr_float(&a, 0, &d) == LMC_OK && d == 0.5);
    CHECK(lmc_gguf_arr_float(&a, 1, &d) == LMC_OK && d == -2.25);
    CHECK(lmc_gguf_arr_float(&a, 2, &d) == LMC_OK && d == (double)1e30f);
    CHECK(lmc_gguf_get_arr(g, "t.f64s", &a) == LMC_OK && lmc_gguf_arr_float(&a, 0, &d) == LMC_OK && d == 1.0 / 3.0);
    CHECK(lmc_gguf_get_arr(g, "t.bools", &a) == LMC_OK && a.n == 3);
    CHECK(lmc_gguf_arr_bool(&a, 0, &b) == LMC_OK && b == 1);
    CHECK(lmc_gguf_arr_bool(&a, 1, &b) == LMC_OK && b == 0);
    CHECK(lmc_gguf_get_arr(g, "t.u16s", &a) == LMC_OK && lmc_gguf_arr_int(&a, 1, &v) == LMC_OK && v == 65535);
    CHECK(lmc_gguf_get_arr(g, "t.i8s", &a) == LMC_OK && lmc_gguf_arr_int(&a, 0, &v) == LMC_OK && v == -128);
    CHECK(lmc_gguf_get_arr(g, "t.u64s", &a) == LMC_OK && lmc_gguf_arr_int(&a, 1, &v) == LMC_OK && v == (1ll << 40));
    CHECK(lmc_gguf_get_arr(g, "t.none", &a) == LMC_OK && a.n == 0 && a.elem_type == LMC_GGUF_I64);
    CHECK(lmc_gguf_arr_int(&a, 0, &v) == LMC_ERR_RANGE);
    CHECK(lmc_gguf_get_arr(g, "t.u8", &a) == LMC_ERR_FORMAT);
    /* tensors */
    static const struct { const char *name; uint32_t type; int n_dims; int64_t ne[4]; size_t nbytes; int src; } want[] = {
        {"a.f32", LMC_GGML_F32, 2, {3, 5, 1, 1}, 60, 0},     {"b.f16", LMC_GGML_F16, 1, {7, 1, 1, 1}, 14, 1},
        {"c.bf16", LMC_GGML_BF16, 3, {2, 3, 4, 1}, 48, 2},  {"d.q8_0", LMC_GGML_Q8_0, 2, {64, 3, 1, 1}, 204, 3},
        {"e.q4_k", LMC_GGML_Q4_K, 1, {512, 1, 1, 1}, 288, 0}, {"f.i32", LMC_GGML_I32, 4, {1, 2, 3, 5}, 120, 1},
        {"g.empty", LMC_GGML_F32, 2, {4, 0, 1, 1}, 0, 1},
    };
    CHECK_EQ_INT(lmc_gguf_n_tensors(g), 7);
    size_t total = 0;
    for (int i = 0; i < 7 && lmc_gguf_n_tensors(g) == 7; i++) {
        const lmc_gguf_tensor *t = lmc_gguf_tensor_at(g, i);
        CHECK_EQ_STR(t->name, want[i].name);
        CHECK(lmc_gguf_find_tensor(g, want[i].name) == t);
        CHECK_EQ_INT(t->type, want[i].type);
        CHECK_EQ_INT(t->n_dims, want[i].n_dims);
        for (int k = 0; k < 4; k++) CHECK_EQ_INT(t->ne[k], want[i].ne[k]);
        CHECK_EQ_INT(t->nbytes, want[i].nbytes);
        CHECK_EQ_INT(t->offset % align, 0);
        CHECK_EQ_INT(((const uint8_t *)t->data - (const uint8_t *)lmc_gguf_tensor_at(g, 0)->data + lmc_gguf_data_offset(g)) % align, 0);
        CHECK(memcmp(t->data, tdata[want[i].src], t->nbytes) == 0);
        total += want[i].nbytes;
    }
    CHECK_EQ_INT(lmc_gguf_total_bytes(g), total);
    CHECK(lmc_gguf_find_tensor(g, "zzz") == NULL);
    CHECK(lmc_gguf_find_tensor(g, "") == NULL);
    lmc_gguf_close(g);
}

static void test_roundtrip_align32(void) {
    char p[300];
    path_in_tmp(p, sizeof p, "rt32.gguf");
    CHECK_MSG(write_roundtrip(p, 32) == 0, "%s", lmc_last_error());
    check_roundtrip(p, 32);
}

static void test_roundtrip_align64(void) {
    char p[300];
    path_in_tmp(p, sizeof p, "rt64.gguf");
    CHECK_MSG(write_roundtrip(p, 64) == 0, "%s", lmc_last_error());
    check_roundtrip(p, 64);
}

static void test_roundtrip_align1(void) {
    char p[300];
    path_in_tmp(p, sizeof p, "rt1.gguf");
    CHECK_MSG(write_roundtrip(p, 1) == 0, "%s", lmc_last_error());
    check_roundtrip(p, 1);
}

static void test_writer_rejects(void) {
    lmc_gguf_writer *w;
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    CHECK(lmc_gguf_writer_add_u32(w, "k", 1) == LMC_OK);
    CHECK(lmc_gguf_writer_add_u32(w, "k", 2) == LMC_ERR_ARG && strstr(lmc_last_error(), "twice"));
    CHECK(lmc_gguf_writer_add_str(w, "k", "x") == LMC_ERR_ARG);
    CHECK(lmc_gguf_writer_add_u32(w, "", 2) == LMC_ERR_ARG);
    CHECK(lmc_gguf_writer_add_u32(w, "general.alignment", 64) == LMC_ERR_ARG);
    CHECK(lmc_gguf_writer_set_alignment(w, 48) == LMC_ERR_ARG);
    CHECK(lmc_gguf_writer_set_alignment(w, 0) == LMC_ERR_ARG);
    CHECK(lmc_gguf_writer_add_arr(w, "s", LMC_GGUF_STRING, "x", 1) == LMC_ERR_ARG);
    float f[64] = {0};
    CHECK(lmc_gguf_writer_add_tensor(w, "t", LMC_GGML_Q8_0, 1, (const int64_t[]){33}, f) == LMC_ERR_ARG);
    CHECK(lmc_gguf_writer_add_tensor(w, "t", 4, 1, (const int64_t[]){4}, f) == LMC_ERR_ARG);
    CHECK(lmc_gguf_writer_add_tensor(w, "t", LMC_GGML_F32, 5, (const int64_t[]){1, 1, 1, 1, 1}, f) == LMC_ERR_ARG);
    CHECK(lmc_gguf_writer_add_tensor(w, "t", LMC_GGML_F32, 1, (const int64_t[]){-1}, f) == LMC_ERR_ARG);
    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = 0;
    CHECK(lmc_gguf_writer_add_tensor(w, longname, LMC_GGML_F32, 1, (const int64_t[]){4}, f) == LMC_ERR_ARG);
    CHECK(lmc_gguf_writer_add_tensor(w, "t", LMC_GGML_F32, 1, (const int64_t[]){4}, f) == LMC_OK);
    CHECK(lmc_gguf_writer_add_tensor(w, "t", LMC_GGML_F32, 1, (const int64_t[]){4}, f) == LMC_ERR_ARG);
    /* the failed adds left nothing behind: the file holds exactly k and t */
    char p[300];
    path_in_tmp(p, sizeof p, "rej.gguf");
    CHECK(lmc_gguf_writer_write(w, p) == LMC_OK);
    lmc_gguf_writer_free(w);
    lmc_gguf *g;
    CHECK(lmc_gguf_open(p, &g) == LMC_OK);
    if (g) {
        CHECK_EQ_INT(lmc_gguf_n_kv(g), 1);
        CHECK_EQ_INT(lmc_gguf_n_tensors(g), 1);
        lmc_gguf_close(g);
    }
    /* writing into a missing directory fails cleanly */
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    CHECK(lmc_gguf_writer_write(w, "/nonexistent-dir-lmc/x.gguf") == LMC_ERR_IO);
    lmc_gguf_writer_free(w);
    CHECK(lmc_gguf_open("/nonexistent-dir-lmc/x.gguf", &g) == LMC_ERR_NOT_FOUND);
}

/* Nested arrays (not produced by the writer) and a version-2 header, from hand-made bytes. */
static void test_nested_arrays_v2(void) {
    bb b = {0};
    hdr(&b, 2, 0, 2);
    bb_str(&b, "nested");
    bb_u32(&b, LMC_GGUF_ARRAY);
    bb_u32(&b, LMC_GGUF_ARRAY); /* outer: 3 arrays */
    bb_u64(&b, 3);
    bb_u32(&b, LMC_GGUF_STRING); /* [ "ab", "c" ] */
    bb_u64(&b, 2);
    bb_str(&b, "ab");
    bb_str(&b, "c");
    bb_u32(&b, LMC_GGUF_U16); /* [ 7, 9 ] */
    bb_u64(&b, 2);
    bb_raw(&b, "\x07\x00\x09\x00", 4);
    bb_u32(&b, LMC_GGUF_ARRAY); /* [ [ "deep" ] ] */
    bb_u64(&b, 1);
    bb_u32(&b, LMC_GGUF_STRING);
    bb_u64(&b, 1);
    bb_str(&b, "deep");
    kv_str(&b, "after", "ok");
    lmc_gguf *g;
    uint8_t *copy;
    lmc_status st = open_bytes(&b, &g, &copy);
    CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
    if (st == LMC_OK) {
        CHECK_EQ_INT(lmc_gguf_version(g), 2);
        lmc_gguf_array a, x, y;
        const char *s;
        size_t len;
        int64_t v;
        CHECK(lmc_gguf_get_arr(g, "nested", &a) == LMC_OK && a.n == 3 && a.elem_type == LMC_GGUF_ARRAY);
        CHECK(lmc_gguf_arr_arr(&a, 0, &x) == LMC_OK && x.n == 2 && x.elem_type == LMC_GGUF_STRING);
        CHECK(lmc_gguf_arr_str(&x, 0, &s, &len) == LMC_OK && len == 2 && memcmp(s, "ab", 2) == 0);
        CHECK(lmc_gguf_arr_str(&x, 1, &s, &len) == LMC_OK && len == 1 && s[0] == 'c');
        CHECK(lmc_gguf_arr_arr(&a, 1, &x) == LMC_OK && x.elem_type == LMC_GGUF_U16);
        CHECK(lmc_gguf_arr_int(&x, 1, &v) == LMC_OK && v == 9);
        CHECK(lmc_gguf_arr_arr(&a, 2, &x) == LMC_OK && x.n == 1 && lmc_gguf_arr_arr(&x, 0, &y) == LMC_OK);
        CHECK(lmc_gguf_arr_str(&y, 0, &s, &len) == LMC_OK && len == 4 && memcmp(s, "deep", 4) == 0);
        CHECK(lmc_gguf_arr_arr(&a, 3, &x) == LMC_ERR_RANGE);
        CHECK(lmc_gguf_get_str(g, "after", &s, &len) == LMC_OK && strcmp(s, "ok") == 0);
        lmc_gguf_close(g);
    }
    free(copy);
    free(b.p);
}

/* ---- malformed files -------------------------------------------------------------------------- */

typedef void (*build_fn)(bb *);

static void m_empty(bb *b) { (void)b; }
static void m_magic(bb *b) { bb_raw(b, "GGML", 4); bb_u32(b, 3); bb_u64(b, 0); bb_u64(b, 0); }
static void m_v1(bb *b) { hdr(b, 1, 0, 0); }
static void m_v4(bb *b) { hdr(b, 4, 0, 0); }
static void m_bigendian(bb *b) { hdr(b, 0x03000000u, 0, 0); }
static void m_short_header(bb *b) { bb_u32(b, LMC_GGUF_MAGIC); bb_u32(b, 3); bb_u32(b, 0); }
static void m_huge_kv(bb *b) { hdr(b, 3, 0, 1ull << 62); kv_u32(b, "a", 1); }
static void m_huge_tensors(bb *b) { hdr(b, 3, 1ull << 61, 0); tinfo(b, "w", 1, (const uint64_t[]){4}, 0, 0); }
static void m_key_len(bb *b) { hdr(b, 3, 0, 1); bb_u64(b, 1ull << 40); bb_raw(b, "abc", 3); }
static void m_key_len_max(bb *b) { hdr(b, 3, 0, 1); bb_u64(b, UINT64_MAX); bb_raw(b, "abcdefghijklmnop", 16); }
static void m_key_empty(bb *b) { hdr(b, 3, 0, 1); bb_u64(b, 0); bb_u32(b, LMC_GGUF_U8); bb_u8(b, 1); }
static void m_key_nul(bb *b) { hdr(b, 3, 0, 1); bb_u64(b, 3); bb_raw(b, "a\0b", 3); bb_u32(b, LMC_GGUF_U8); bb_u8(b, 1); }
static void m_vtype(bb *b) { hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, 13); bb_u32(b, 0); }
static void m_bool2(bb *b) { hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, LMC_GGUF_BOOL); bb_u8(b, 2); }
static void m_scalar_cut(bb *b) { hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, LMC_GGUF_U64); bb_u32(b, 5); }
static void m_str_len(bb *b) { hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, LMC_GGUF_STRING); bb_u64(b, 100); bb_raw(b, "short", 5); }
static void m_arr_etype(bb *b) { hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, LMC_GGUF_ARRAY); bb_u32(b, 99); bb_u64(b, 0); }
static void m_arr_count(bb *b) { hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, LMC_GGUF_ARRAY); bb_u32(b, LMC_GGUF_U32); bb_u64(b, 1ull << 60); bb_u32(b, 1); }
static void m_arr_strcount(bb *b) { hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, LMC_GGUF_ARRAY); bb_u32(b, LMC_GGUF_STRING); bb_u64(b, UINT64_MAX); bb_str(b, "x"); }
static void m_arr_badstr(bb *b) {
    hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, LMC_GGUF_ARRAY); bb_u32(b, LMC_GGUF_STRING); bb_u64(b, 2);
    bb_str(b, "ok"); bb_u64(b, 1000); bb_raw(b, "abcdefgh", 8);
}
static void m_arr_bool(bb *b) { hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, LMC_GGUF_ARRAY); bb_u32(b, LMC_GGUF_BOOL); bb_u64(b, 2); bb_u8(b, 0); bb_u8(b, 7); }
static void m_deep(bb *b) {
    hdr(b, 3, 0, 1); bb_str(b, "k"); bb_u32(b, LMC_GGUF_ARRAY);
    for (int i = 0; i < 20; i++) { bb_u32(b, LMC_GGUF_ARRAY); bb_u64(b, 1); }
    bb_u32(b, LMC_GGUF_U8); bb_u64(b, 0);
}
static void m_dup_key(bb *b) { hdr(b, 3, 0, 3); kv_u32(b, "a.b", 1); kv_u32(b, "c", 2); kv_str(b, "a.b", "x"); }
static void m_align_type(bb *b) { hdr(b, 3, 0, 1); bb_str(b, "general.alignment"); bb_u32(b, LMC_GGUF_U64); bb_u64(b, 64); }
static void m_align_48(bb *b) { hdr(b, 3, 0, 1); kv_u32(b, "general.alignment", 48); }
static void m_align_0(bb *b) { hdr(b, 3, 0, 1); kv_u32(b, "general.alignment", 0); }
static void m_tname_empty(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "", 1, (const uint64_t[]){4}, 0, 0); data_bytes(b, 32, 16); }
static void m_tname_long(bb *b) {
    char name[2001];
    memset(name, 'n', 2000);
    name[2000] = 0;
    hdr(b, 3, 1, 0); tinfo(b, name, 1, (const uint64_t[]){4}, 0, 0); data_bytes(b, 32, 16);
}
static void m_tname_len(bb *b) { hdr(b, 3, 1, 0); bb_u64(b, 1ull << 50); bb_raw(b, "w", 1); bb_u32(b, 1); bb_u64(b, 4); bb_u32(b, 0); bb_u64(b, 0); }
static void m_ndims(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 5, (const uint64_t[]){1, 1, 1, 1, 4}, 0, 0); data_bytes(b, 32, 16); }
static void m_negdim(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 2, (const uint64_t[]){4, 1ull << 63}, 0, 0); data_bytes(b, 32, 16); }
static void m_dim_overflow(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 3, (const uint64_t[]){1ull << 32, 1ull << 32, 4}, 0, 0); data_bytes(b, 32, 16); }
static void m_too_big(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 2, (const uint64_t[]){1ull << 20, 1ull << 20}, 0, 0); data_bytes(b, 32, 16); }
static void m_bytes_overflow(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 1, (const uint64_t[]){1ull << 62}, LMC_GGML_F64, 0); data_bytes(b, 32, 16); }
static void m_type4(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 1, (const uint64_t[]){32}, 4, 0); data_bytes(b, 32, 64); }
static void m_type1000(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 1, (const uint64_t[]){32}, 1000, 0); data_bytes(b, 32, 64); }
static void m_block(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 2, (const uint64_t[]){33, 2}, LMC_GGML_Q8_0, 0); data_bytes(b, 32, 128); }
static void m_misaligned(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 1, (const uint64_t[]){4}, 0, 4); data_bytes(b, 32, 64); }
static void m_past_end(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 1, (const uint64_t[]){16}, 0, 0); data_bytes(b, 32, 63); }
static void m_offset_huge(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 1, (const uint64_t[]){4}, 0, 1ull << 63); data_bytes(b, 32, 64); }
static void m_offset_wrap(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 1, (const uint64_t[]){8}, 0, UINT64_MAX - 31); data_bytes(b, 32, 64); }
static void m_overlap(bb *b) {
    hdr(b, 3, 2, 0);
    tinfo(b, "a", 1, (const uint64_t[]){16}, 0, 0);
    tinfo(b, "b", 1, (const uint64_t[]){16}, 0, 32);
    data_bytes(b, 32, 128);
}
static void m_dup_tensor(bb *b) {
    hdr(b, 3, 2, 0);
    tinfo(b, "w", 1, (const uint64_t[]){4}, 0, 0);
    tinfo(b, "w", 1, (const uint64_t[]){4}, 0, 32);
    data_bytes(b, 32, 64);
}
static void m_no_data(bb *b) { hdr(b, 3, 1, 0); tinfo(b, "w", 1, (const uint64_t[]){4}, 0, 0); }
static void m_tinfo_cut(bb *b) { hdr(b, 3, 1, 0); bb_str(b, "w"); bb_u32(b, 4); bb_u64(b, 4); bb_u64(b, 4); }
static void m_kv_count_lie(bb *b) { hdr(b, 3, 0, 2); kv_u32(b, "a", 1); }
static void m_align_respected(bb *b) {
    hdr(b, 3, 1, 1);
    kv_u32(b, "general.alignment", 64);
    tinfo(b, "w", 1, (const uint64_t[]){4}, 0, 32); /* a multiple of 32 but not of 64 */
    data_bytes(b, 64, 128);
}

static const struct mcase { const char *name; build_fn fn; lmc_status st; const char *msg; } mcases[] = {
    {"empty file", m_empty, LMC_ERR_FORMAT, "not a GGUF file"},
    {"bad magic", m_magic, LMC_ERR_FORMAT, "magic"},
    {"version 1", m_v1, LMC_ERR_UNSUPPORTED, "version 1"},
    {"version 4", m_v4, LMC_ERR_UNSUPPORTED, "version 4"},
    {"big-endian", m_bigendian, LMC_ERR_UNSUPPORTED, "big-endian"},
    {"short header", m_short_header, LMC_ERR_FORMAT, "truncated"},
    {"huge kv count", m_huge_kv, LMC_ERR_FORMAT, "metadata pairs"},
    {"huge tensor count", m_huge_tensors, LMC_ERR_FORMAT, "tensors but only"},
    {"key length past end", m_key_len, LMC_ERR_FORMAT, "claims"},
    {"key length u64 max", m_key_len_max, LMC_ERR_FORMAT, "claims"},
    {"empty key", m_key_empty, LMC_ERR_FORMAT, "invalid key"},
    {"key with NUL", m_key_nul, LMC_ERR_FORMAT, "contains NUL"},
    {"unknown value type", m_vtype, LMC_ERR_FORMAT, "unknown value type 13"},
    {"bool 2", m_bool2, LMC_ERR_FORMAT, "not 0 or 1"},
    {"scalar cut", m_scalar_cut, LMC_ERR_FORMAT, "truncated"},
    {"string length past end", m_str_len, LMC_ERR_FORMAT, "claims 100 bytes"},
    {"array element type", m_arr_etype, LMC_ERR_FORMAT, "unknown array element type 99"},
    {"array count huge", m_arr_count, LMC_ERR_FORMAT, "does not fit"},
    {"string array count huge", m_arr_strcount, LMC_ERR_FORMAT, "does not fit"},
    {"string array bad length", m_arr_badstr, LMC_ERR_FORMAT, "claims 1000 bytes"},
    {"bool array element 7", m_arr_bool, LMC_ERR_FORMAT, "is 7"},
    {"arrays nested too deep", m_deep, LMC_ERR_FORMAT, "nested deeper"},
    {"duplicate key", m_dup_key, LMC_ERR_FORMAT, "\"a.b\" appears twice"},
    {"alignment not u32", m_align_type, LMC_ERR_FORMAT, "not a u32"},
    {"alignment 48", m_align_48, LMC_ERR_FORMAT, "48 is not a power of two"},
    {"alignment 0", m_align_0, LMC_ERR_FORMAT, "power of two"},
    {"empty tensor name", m_tname_empty, LMC_ERR_FORMAT, "invalid name"},
    {"tensor name 2000 bytes", m_tname_long, LMC_ERR_FORMAT, "invalid name"},
    {"tensor name length past end", m_tname_len, LMC_ERR_FORMAT, "claims"},
    {"5 dims", m_ndims, LMC_ERR_FORMAT, "5 dimensions"},
    {"negative dim", m_negdim, LMC_ERR_FORMAT, "negative"},
    {"dims product overflow", m_dim_overflow, LMC_ERR_FORMAT, "2^63"},
    {"tensor larger than file", m_too_big, LMC_ERR_FORMAT, "larger than the file"},
    {"byte size overflow", m_bytes_overflow, LMC_ERR_FORMAT, "larger than the file"},
    {"removed type 4", m_type4, LMC_ERR_UNSUPPORTED, "unknown GGML type id 4"},
    {"type 1000", m_type1000, LMC_ERR_UNSUPPORTED, "unknown GGML type id 1000"},
    {"row not whole blocks", m_block, LMC_ERR_FORMAT, "not a multiple of the Q8_0 block size"},
    {"misaligned offset", m_misaligned, LMC_ERR_FORMAT, "not a multiple of the alignment"},
    {"tensor past end", m_past_end, LMC_ERR_FORMAT, "past the end"},
    {"offset 2^63", m_offset_huge, LMC_ERR_FORMAT, "past the end"},
    {"offset wraps", m_offset_wrap, LMC_ERR_FORMAT, "past the end"},
    {"overlapping tensors", m_overlap, LMC_ERR_FORMAT, "overlap"},
    {"duplicate tensor", m_dup_tensor, LMC_ERR_FORMAT, "\"w\" appears twice"},
    {"no data section", m_no_data, LMC_ERR_FORMAT, "past the end"},
    {"tensor info cut", m_tinfo_cut, LMC_ERR_FORMAT, "truncated"},
    {"kv count larger than pairs", m_kv_count_lie, LMC_ERR_FORMAT, "metadata pairs"},
    {"offset aligned to 32 not 64", m_align_respected, LMC_ERR_FORMAT, "alignment 64"},
};

static void run_mcase(const struct mcase *c) {
    bb b = {0};
    c->fn(&b);
    lmc_gguf *g = NULL;
    uint8_t *copy;
    lmc_status st = open_bytes(&b, &g, &copy);
    CHECK_MSG(st == c->st, "case \"%s\": status %d (want %d): %s", c->name, st, c->st, lmc_last_error());
    CHECK_MSG(strstr(lmc_last_error(), c->msg) != NULL, "case \"%s\": message \"%s\" lacks \"%s\"", c->name,
              lmc_last_error(), c->msg);
    CHECK_MSG(strstr(lmc_last_error(), "test.gguf") != NULL || b.n == 0, "case \"%s\": message does not name the file",
              c->name);
    if (st == LMC_OK) lmc_gguf_close(g);
    free(copy);
    free(b.p);
}

/* Errors through the mmap path: a malformed file on disk, a directory, an empty file. */
static void test_open_file_errors(void) {
    bb b = {0};
    m_overlap(&b);
    char p[300];
    path_in_tmp(p, sizeof p, "overlap.gguf");
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(b.p, 1, b.n, f);
        fclose(f);
    }
    free(b.p);
    lmc_gguf *g = NULL;
    CHECK(lmc_gguf_open(p, &g) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "overlap") && strstr(lmc_last_error(), "overlap.gguf"));
    CHECK(lmc_gguf_open(tmpdir, &g) == LMC_ERR_IO);
    CHECK(strstr(lmc_last_error(), "not a regular file") != NULL);
    path_in_tmp(p, sizeof p, "empty.gguf");
    f = fopen(p, "wb");
    if (f) fclose(f);
    CHECK(lmc_gguf_open(p, &g) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "not a GGUF file") != NULL);
}

/* The hand-made valid file opens, and every proper prefix of it is refused. */
static void test_truncations(void) {
    bb b = {0};
    valid_file(&b);
    lmc_gguf *g;
    uint8_t *copy;
    lmc_status st = open_bytes(&b, &g, &copy);
    CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
    if (st == LMC_OK) {
        const lmc_gguf_tensor *q = lmc_gguf_find_tensor(g, "q");
        CHECK(q && q->nbytes == 34 && (const uint8_t *)q->data + 34 == copy + b.n);
        lmc_gguf_array a;
        const char *s;
        size_t len;
        CHECK(lmc_gguf_get_arr(g, "tokenizer.ggml.tokens", &a) == LMC_OK && lmc_gguf_arr_str(&a, 2, &s, &len) == LMC_OK &&
              len == 3 && memcmp(s, "ccc", 3) == 0);
        lmc_gguf_close(g);
    }
    free(copy);
    int n_bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        size_t full = b.n;
        b.n = n;
        st = open_bytes(&b, &g, &copy);
        b.n = full;
        if (st == LMC_OK) {
            n_bad++;
            lmc_gguf_close(g);
        } else if (!strstr(lmc_last_error(), "test.gguf")) {
            n_bad++;
        }
        free(copy);
    }
    CHECK_EQ_INT(n_bad, 0);
    free(b.p);
}

/* ---- fuzz ------------------------------------------------------------------------------------- */

/* Touch everything an accepted file exposes; returns a checksum so nothing is optimised away. */
static uint64_t exercise(const lmc_gguf *g) {
    uint64_t sum = 0;
    for (int64_t i = 0; i < lmc_gguf_n_kv(g); i++) {
        int64_t v;
        double d;
        int b;
        const char *s;
        size_t len;
        lmc_gguf_array a;
        const char *key = lmc_gguf_kv_key(g, i);
        sum += strlen(key) + (uint64_t)lmc_gguf_find_key(g, key);
        if (lmc_gguf_kv_int(g, i, &v) == LMC_OK) sum += (uint64_t)v;
        if (lmc_gguf_kv_float(g, i, &d) == LMC_OK) sum += d == d;
        if (lmc_gguf_kv_bool(g, i, &b) == LMC_OK) sum += (uint64_t)b;
        if (lmc_gguf_kv_str(g, i, &s, &len) == LMC_OK) sum += len + (uint8_t)s[len];
        if (lmc_gguf_kv_arr(g, i, &a) == LMC_OK) {
            lmc_gguf_array stack[LMC_GGUF_MAX_DEPTH + 2];
            int depth = 0;
            stack[depth++] = a;
            while (depth) {
                lmc_gguf_array cur = stack[--depth];
                for (uint64_t k = 0; k < cur.n && k < 64; k++) {
                    lmc_gguf_array sub;
                    if (lmc_gguf_arr_int(&cur, k, &v) == LMC_OK) sum += (uint64_t)v;
                    if (lmc_gguf_arr_float(&cur, k, &d) == LMC_OK) sum += d == d;
                    if (lmc_gguf_arr_bool(&cur, k, &b) == LMC_OK) sum += (uint64_t)b;
                    if (lmc_gguf_arr_str(&cur, k, &s, &len) == LMC_OK && len) sum += (uint8_t)s[0] + (uint8_t)s[len - 1];
                    if (lmc_gguf_arr_arr(&cur, k, &sub) == LMC_OK && depth < LMC_GGUF_MAX_DEPTH + 2) stack[depth++] = sub;
                }
            }
        }
    }
    for (int64_t i = 0; i < lmc_gguf_n_tensors(g); i++) {
        const lmc_gguf_tensor *t = lmc_gguf_tensor_at(g, i);
        if (lmc_gguf_find_tensor(g, t->name) != t) sum += 1000000;
        if (t->nbytes) sum += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        sum += (uint64_t)lmc_gguf_nelem(t);
    }
    char *json;
    if (lmc_gguf_arch_config_json(g, &json) == LMC_OK) {
        sum += strlen(json);
        free(json);
    }
    lmc_gguf_hf_view *v;
    if (lmc_gguf_hf_view_open(g, &v) == LMC_OK) {
        for (int64_t i = 0; i < lmc_gguf_hf_view_count(v); i++) {
            const lmc_gguf_hf_tensor *t = lmc_gguf_hf_view_at(v, i);
            if (lmc_gguf_hf_view_find(v, t->name) != t) sum += 1000000;
            if (t->nbytes) sum += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        }
        lmc_gguf_hf_view_close(v);
    }
    return sum;
}

static void fuzz_one_base(const uint8_t *base, size_t n, int iters, int *n_ok) {
    uint8_t *buf = malloc(n);
    for (int it = 0; it < iters; it++) {
        memcpy(buf, base, n);
        size_t len = n;
        int n_mut = 1 + (int)(rng_next() % 6);
        for (int m = 0; m < n_mut; m++) {
            /* most mutations land in the header and metadata, where the parser works */
            size_t span = rng_next() % 4 ? (n < 512 ? n : 512) : n;
            size_t pos = (size_t)(rng_next() % span);
            switch (rng_next() % 5) {
            case 0: buf[pos] ^= (uint8_t)(1u << (rng_next() % 8)); break;
            case 1: buf[pos] = (uint8_t)rng_next(); break;
            case 2: buf[pos] = 0xff; break;
            case 3: buf[pos] = 0; break;
            default: { /* an aligned little-endian field set to an interesting value */
                static const uint64_t vals[] = {0, 1, 2, 31, 32, 64, 0xffffffffull, 1ull << 32, 1ull << 63, UINT64_MAX};
                uint64_t v = vals[rng_next() % 10];
                size_t p8 = pos & ~(size_t)7;
                for (int k = 0; k < 8 && p8 + k < n; k++) buf[p8 + k] = (uint8_t)(v >> (8 * k));
            }
            }
        }
        if (rng_next() % 4 == 0) len = (size_t)(rng_next() % (n + 1));
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, buf, len);
        lmc_gguf *g;
        if (lmc_gguf_open_buffer(copy, len, "fuzz.gguf", &g) == LMC_OK) {
            (*n_ok)++;
            volatile uint64_t s = exercise(g);
            (void)s;
            lmc_gguf_close(g);
        } else {
            CHECK(lmc_last_error()[0] != 0);
        }
        free(copy);
    }
    free(buf);
}

static uint8_t *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

static void write_model(const char *arch, const char *path, int variant);

static void test_fuzz(void) {
    int n_ok = 0;
    char p[300];
    path_in_tmp(p, sizeof p, "fuzz64.gguf");
    CHECK(write_roundtrip(p, 64) == 0);
    size_t n;
    uint8_t *base = read_whole(p, &n);
    CHECK(base != NULL);
    if (base) fuzz_one_base(base, n, 3000, &n_ok);
    free(base);
    bb b = {0};
    valid_file(&b);
    fuzz_one_base(b.p, b.n, 3000, &n_ok);
    free(b.p);
    /* a model file, so the config mapping runs on mutated metadata too */
    path_in_tmp(p, sizeof p, "fuzzmodel.gguf");
    write_model("gemma3", p, 1);
    base = read_whole(p, &n);
    CHECK(base != NULL);
    if (base) fuzz_one_base(base, n, 2000, &n_ok);
    free(base);
    path_in_tmp(p, sizeof p, "fuzzllama.gguf");
    write_model("llama", p, 1);
    base = read_whole(p, &n);
    CHECK(base != NULL);
    if (base) fuzz_one_base(base, n, 2000, &n_ok);
    free(base);
    /* some mutants must survive, or the loop only tested the magic check */
    CHECK_MSG(n_ok > 50, "only %d of 10000 mutants opened", n_ok);
    fprintf(stderr, "  fuzz: %d of 10000 mutants opened, none crashed\n", n_ok);
}

/* ---- architectures ---------------------------------------------------------------------------- */

#define HID 64
#define NH 4
#define NKV 2
#define FF 96
#define VOCAB 100
#define NL 2

static float zeros[HID * VOCAB * 4];

static void add_t(lmc_gguf_writer *w, const char *name, int64_t ne0, int64_t ne1) {
    lmc_status st = ne1 ? lmc_gguf_writer_add_tensor(w, name, LMC_GGML_F32, 2, (const int64_t[]){ne0, ne1}, zeros)
                        : lmc_gguf_writer_add_tensor(w, name, LMC_GGML_F32, 1, (const int64_t[]){ne0}, zeros);
    if (st < 0) fprintf(stderr, "add_t %s: %s\n", name, lmc_last_error());
}

/* A tiny model of the given llama.cpp architecture. variant 1 adds the optional extras
 * (rope scaling, layer patterns, special tokens) that arch's tests look at. */
static void write_model(const char *arch, const char *path, int variant) {
    lmc_gguf_writer *w;
    if (lmc_gguf_writer_init(&w) < 0) return;
    char k[128];
    int gemma = strncmp(arch, "gemma", 5) == 0, phi3 = strcmp(arch, "phi3") == 0, qwen3 = strcmp(arch, "qwen3") == 0;
    int64_t hd = gemma || qwen3 ? 32 : HID / NH; /* gemma/qwen3: head_dim ≠ hidden / heads */
    int64_t nl = strcmp(arch, "gemma2") == 0 && variant == 2 ? 46 : NL;
    lmc_gguf_writer_add_str(w, "general.architecture", arch);
    lmc_gguf_writer_add_str(w, "general.name", "tiny");
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", arch, s), k)
    lmc_gguf_writer_add_u32(w, KEY("context_length"), 4096);
    lmc_gguf_writer_add_u32(w, KEY("embedding_length"), HID);
    lmc_gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)nl);
    lmc_gguf_writer_add_u32(w, KEY("feed_forward_length"), FF);
    lmc_gguf_writer_add_u32(w, KEY("attention.head_count"), NH);
    lmc_gguf_writer_add_u32(w, KEY("attention.head_count_kv"), NKV);
    lmc_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-6f);
    if (gemma || qwen3) {
        lmc_gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)hd);
        lmc_gguf_writer_add_u32(w, KEY("attention.value_length"), (uint32_t)hd);
    }
    if (strcmp(arch, "gemma") != 0 && strcmp(arch, "gemma2") != 0) lmc_gguf_writer_add_f32(w, KEY("rope.freq_base"), 1000000.0f);
    lmc_gguf_writer_add_u32(w, KEY("rope.dimension_count"), (uint32_t)(phi3 ? 12 : hd));
    if (strcmp(arch, "gemma2") == 0) {
        lmc_gguf_writer_add_f32(w, KEY("attn_logit_softcapping"), 50.0f);
        lmc_gguf_writer_add_f32(w, KEY("final_logit_softcapping"), 30.0f);
        lmc_gguf_writer_add_u32(w, KEY("attention.sliding_window"), 4096);
    }
    if (strcmp(arch, "gemma3") == 0) {
        lmc_gguf_writer_add_u32(w, KEY("attention.sliding_window"), 512);
        if (variant == 1) {
            lmc_gguf_writer_add_str(w, KEY("rope.scaling.type"), "linear");
            lmc_gguf_writer_add_f32(w, KEY("rope.scaling.factor"), 8.0f);
        }
        if (variant == 2) {
            uint8_t pat[NL] = {1, 0};
            lmc_gguf_writer_add_arr(w, KEY("attention.sliding_window_pattern"), LMC_GGUF_BOOL, pat, NL);
        }
    }
    if (phi3) {
        lmc_gguf_writer_add_u32(w, KEY("rope.scaling.original_context_length"), 1024);
        lmc_gguf_writer_add_u32(w, KEY("attention.sliding_window"), 2047);
    }
    if (strcmp(arch, "qwen2") == 0 && variant == 1) {
        lmc_gguf_writer_add_str(w, KEY("rope.scaling.type"), "yarn");
        lmc_gguf_writer_add_f32(w, KEY("rope.scaling.factor"), 4.0f);
        lmc_gguf_writer_add_u32(w, KEY("rope.scaling.original_context_length"), 1024);
    }
    lmc_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
    lmc_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
    if (variant == 1) lmc_gguf_writer_add_u32(w, "tokenizer.ggml.eot_token_id", 7);
    lmc_gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", 0);
#undef KEY
    add_t(w, "token_embd.weight", HID, VOCAB);
    add_t(w, "output_norm.weight", HID, 0);
    int untied = strcmp(arch, "llama") == 0 || phi3;
    if (untied) add_t(w, "output.weight", HID, VOCAB);
    for (int l = 0; l < nl; l++) {
        char n[64];
#define T(s, a, b) (snprintf(n, sizeof n, "blk.%d.%s", l, s), add_t(w, n, a, b))
        T("attn_norm.weight", HID, 0);
        if (phi3) {
            T("attn_qkv.weight", HID, (NH + 2 * NKV) * hd);
            T("ffn_up.weight", HID, 2 * FF);
        } else {
            T("attn_q.weight", HID, NH * hd);
            T("attn_k.weight", HID, NKV * hd);
            T("attn_v.weight", HID, NKV * hd);
            T("ffn_gate.weight", HID, FF);
            T("ffn_up.weight", HID, FF);
        }
        T("attn_output.weight", NH * hd, HID);
        T("ffn_down.weight", FF, HID);
        T("ffn_norm.weight", HID, 0);
        if (strcmp(arch, "qwen2") == 0) {
            T("attn_q.bias", NH * hd, 0);
            T("attn_k.bias", NKV * hd, 0);
            T("attn_v.bias", NKV * hd, 0);
        }
        if (qwen3 || strcmp(arch, "gemma3") == 0) {
            T("attn_q_norm.weight", hd, 0);
            T("attn_k_norm.weight", hd, 0);
        }
        if (strcmp(arch, "gemma2") == 0 || strcmp(arch, "gemma3") == 0) {
            T("post_attention_norm.weight", HID, 0);
            T("post_ffw_norm.weight", HID, 0);
        }
#undef T
    }
    static float table[8];
    if (phi3) {
        for (int i = 0; i < 6; i++) table[i] = 1.0f + 0.25f * (float)i;
        lmc_gguf_writer_add_tensor(w, "rope_factors_long.weight", LMC_GGML_F32, 1, (const int64_t[]){6}, table);
        lmc_gguf_writer_add_tensor(w, "rope_factors_short.weight", LMC_GGML_F32, 1, (const int64_t[]){6}, zeros);
    }
    if (lmc_gguf_writer_write(w, path) < 0) fprintf(stderr, "write_model %s: %s\n", arch, lmc_last_error());
    lmc_gguf_writer_free(w);
}

typedef struct model_fx { lmc_gguf *g; cJSON *cfg; lmc_config lc; int lc_ok; } model_fx;

/* Open the model, build its config, feed the config to lmc's normalizer. */
static int open_model(const char *arch, int variant, model_fx *m) {
    memset(m, 0, sizeof *m);
    char p[300], name[64];
    snprintf(name, sizeof name, "%s_%d.gguf", arch, variant);
    path_in_tmp(p, sizeof p, name);
    write_model(arch, p, variant);
    lmc_status st = lmc_gguf_open(p, &m->g);
    CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
    if (st < 0) return 0;
    st = lmc_gguf_arch_config(m->g, &m->cfg);
    CHECK_MSG(st == LMC_OK, "%s config: %s", arch, lmc_last_error());
    if (st < 0) return 0;
    char *text = cJSON_Print(m->cfg);
    cJSON *copy = cJSON_Parse(text);
    free(text);
    st = lmc_config_from_json(copy, NULL, &m->lc);
    CHECK_MSG(st == LMC_OK, "%s: lmc_config_from_json: %s", arch, lmc_last_error());
    m->lc_ok = st == LMC_OK;
    return 1;
}

static void close_model(model_fx *m) {
    if (m->lc_ok) lmc_config_free(&m->lc);
    cJSON_Delete(m->cfg);
    lmc_gguf_close(m->g);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -12345.0;
}
static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "(absent)";
}
static int is_true(const cJSON *o, const char *k) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k)); }
static int is_false(const cJSON *o, const char *k) { return cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, k)); }

/* Every tensor maps to an HF name (or is a config table) and maps back; `pairs` must all appear. */
static void check_names(const model_fx *m, const char *const *pairs, int n_pairs) {
    const lmc_gguf_arch_info *a;
    CHECK(lmc_gguf_arch_of(m->g, &a) == LMC_OK);
    if (!a) return;
    char hf[128], back[128];
    int n_config = 0;
    for (int64_t i = 0; i < lmc_gguf_n_tensors(m->g); i++) {
        const char *name = lmc_gguf_tensor_at(m->g, i)->name;
        if (lmc_gguf_arch_is_config_tensor(name)) {
            n_config++;
            CHECK(lmc_gguf_arch_hf_name(a, name, hf, sizeof hf) == LMC_ERR_NOT_FOUND);
            continue;
        }
        lmc_status st = lmc_gguf_arch_hf_name(a, name, hf, sizeof hf);
        CHECK_MSG(st == LMC_OK, "%s: %s", name, lmc_last_error());
        if (st < 0) continue;
        CHECK_MSG(strncmp(hf, "model.", 6) == 0 || strcmp(hf, "lm_head.weight") == 0, "%s -> %s", name, hf);
        st = lmc_gguf_arch_gguf_name(a, hf, back, sizeof back);
        CHECK_MSG(st == LMC_OK && strcmp(back, name) == 0, "%s -> %s -> %s", name, hf, back);
    }
    for (int i = 0; i < n_pairs; i++) {
        CHECK_MSG(lmc_gguf_arch_hf_name(a, pairs[2 * i], hf, sizeof hf) == LMC_OK && strcmp(hf, pairs[2 * i + 1]) == 0,
                  "%s: %s -> %s (want %s)", a->gguf_arch, pairs[2 * i], hf, pairs[2 * i + 1]);
    }
    CHECK(lmc_gguf_arch_hf_name(a, "blk.0.unknown_thing.weight", hf, sizeof hf) == LMC_ERR_NOT_FOUND);
    CHECK(strstr(lmc_last_error(), "unknown_thing") != NULL);
    CHECK(lmc_gguf_arch_hf_name(a, "blk.x.attn_q.weight", hf, sizeof hf) == LMC_ERR_NOT_FOUND);
    CHECK(lmc_gguf_arch_hf_name(a, "blk.01.attn_q.weight", hf, sizeof hf) == LMC_ERR_NOT_FOUND);
    CHECK(lmc_gguf_arch_hf_name(a, "blk.0.attn_q.scales", hf, sizeof hf) == LMC_ERR_NOT_FOUND);
    CHECK(lmc_gguf_arch_hf_name(a, "blk.12.attn_q.weight", hf, 10) == LMC_ERR_RANGE);
    (void)n_config;
}

static void check_common(const model_fx *m, const char *model_type, int head_dim, int tie) {
    const cJSON *c = m->cfg;
    CHECK_EQ_STR(str(c, "model_type"), model_type);
    CHECK_EQ_INT(num(c, "hidden_size"), HID);
    CHECK_EQ_INT(num(c, "num_attention_heads"), NH);
    CHECK_EQ_INT(num(c, "num_key_value_heads"), NKV);
    CHECK_EQ_INT(num(c, "intermediate_size"), FF);
    CHECK_EQ_INT(num(c, "head_dim"), head_dim);
    CHECK_EQ_INT(num(c, "vocab_size"), VOCAB);
    CHECK_EQ_INT(num(c, "max_position_embeddings"), 4096);
    CHECK(num(c, "rms_norm_eps") == 1e-6); /* tidied from f32 */
    CHECK(tie ? is_true(c, "tie_word_embeddings") : is_false(c, "tie_word_embeddings"));
    CHECK_EQ_INT(num(c, "bos_token_id"), 2);
    CHECK_EQ_INT(num(c, "pad_token_id"), 0);
    CHECK_EQ_STR(str(c, "torch_dtype"), "float32");
    if (m->lc_ok) {
        CHECK_EQ_STR(m->lc.model_type, model_type);
        CHECK_EQ_INT(m->lc.hidden_size, HID);
        CHECK_EQ_INT(m->lc.n_heads, NH);
        CHECK_EQ_INT(m->lc.n_kv_heads, NKV);
        CHECK_EQ_INT(m->lc.head_dim, head_dim);
        CHECK_EQ_INT(m->lc.vocab_size, VOCAB);
        CHECK_EQ_INT(m->lc.tie_word_embeddings, tie);
        CHECK_NEAR(m->lc.norm_eps, 1e-6, 1e-18);
        CHECK_EQ_INT(m->lc.bos_token_id, 2);
    }
}

static void test_arch_llama(void) {
    model_fx m;
    if (open_model("llama", 0, &m)) {
        check_common(&m, "llama", HID / NH, 0);
        CHECK_EQ_INT(num(m.cfg, "num_hidden_layers"), NL);
        CHECK(num(m.cfg, "rope_theta") == 1000000.0);
        CHECK_EQ_STR(str(m.cfg, "hidden_act"), "silu");
        CHECK(is_false(m.cfg, "attention_bias") && is_false(m.cfg, "mlp_bias"));
        CHECK_EQ_INT(num(m.cfg, "eos_token_id"), 1);
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(m.cfg, "lmc_gguf");
        CHECK(is_true(x, "qk_permuted") && is_false(x, "norm_plus_one"));
        CHECK(cJSON_GetObjectItemCaseSensitive(m.cfg, "rope_scaling") == NULL);
        static const char *const pairs[] = {
            "token_embd.weight", "model.embed_tokens.weight", "output_norm.weight", "model.norm.weight",
            "output.weight", "lm_head.weight", "blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight",
            "blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight", "blk.1.attn_k.weight",
            "model.layers.1.self_attn.k_proj.weight", "blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight",
            "blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight", "blk.0.ffn_norm.weight",
            "model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_gate.weight", "model.layers.0.mlp.gate_proj.weight",
            "blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight", "blk.0.ffn_down.weight",
            "model.layers.0.mlp.down_proj.weight", "blk.123.attn_q.bias", "model.layers.123.self_attn.q_proj.bias",
        };
        check_names(&m, pairs, sizeof pairs / sizeof pairs[0] / 2);
        const lmc_gguf_arch_info *a = lmc_gguf_arch_find("llama");
        CHECK(a && a->qk_permuted && !lmc_gguf_arch_norm_shifted(a, "output_norm.weight"));
    }
    close_model(&m);
}

static void test_arch_qwen2(void) {
    model_fx m;
    if (open_model("qwen2", 1, &m)) {
        check_common(&m, "qwen2", HID / NH, 1);
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m.cfg, "sliding_window")));
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(m.cfg, "rope_scaling");
        CHECK_EQ_STR(str(rs, "rope_type"), "yarn");
        CHECK(num(rs, "factor") == 4.0);
        CHECK_EQ_INT(num(rs, "original_max_position_embeddings"), 1024);
        const cJSON *eos = cJSON_GetObjectItemCaseSensitive(m.cfg, "eos_token_id");
        CHECK(cJSON_GetArraySize(eos) == 2 && cJSON_GetArrayItem(eos, 0)->valueint == 1 &&
              cJSON_GetArrayItem(eos, 1)->valueint == 7);
        if (m.lc_ok) {
            CHECK_EQ_INT(m.lc.rope.type, LMC_ROPE_YARN);
            CHECK_NEAR(m.lc.rope.factor, 4.0, 0);
            CHECK_EQ_INT(m.lc.n_eos, 2);
            CHECK_EQ_INT(m.lc.sliding_window, 0);
        }
        static const char *const pairs[] = {
            "blk.0.attn_q.bias", "model.layers.0.self_attn.q_proj.bias", "blk.1.attn_k.bias",
            "model.layers.1.self_attn.k_proj.bias", "blk.1.attn_v.bias", "model.layers.1.self_attn.v_proj.bias",
        };
        check_names(&m, pairs, 3);
        CHECK(!lmc_gguf_arch_find("qwen2")->qk_permuted);
    }
    close_model(&m);
}

static void test_arch_qwen3(void) {
    model_fx m;
    if (open_model("qwen3", 0, &m)) {
        check_common(&m, "qwen3", 32, 1);
        static const char *const pairs[] = {
            "blk.0.attn_q_norm.weight", "model.layers.0.self_attn.q_norm.weight", "blk.1.attn_k_norm.weight",
            "model.layers.1.self_attn.k_norm.weight",
        };
        check_names(&m, pairs, 2);
        CHECK(!lmc_gguf_arch_find("qwen3")->qk_permuted);
        CHECK(!lmc_gguf_arch_norm_shifted(lmc_gguf_arch_find("qwen3"), "blk.0.attn_q_norm.weight"));
    }
    close_model(&m);
}

static void test_arch_gemma(void) {
    model_fx m;
    if (open_model("gemma", 0, &m)) {
        check_common(&m, "gemma", 32, 1);
        CHECK(num(m.cfg, "rope_theta") == 10000.0); /* the default: key absent */
        CHECK_EQ_STR(str(m.cfg, "hidden_activation"), "gelu_pytorch_tanh");
        CHECK(is_true(cJSON_GetObjectItemCaseSensitive(m.cfg, "lmc_gguf"), "norm_plus_one"));
        const lmc_gguf_arch_info *a = lmc_gguf_arch_find("gemma");
        CHECK(lmc_gguf_arch_norm_shifted(a, "blk.0.attn_norm.weight"));
        CHECK(lmc_gguf_arch_norm_shifted(a, "output_norm.weight"));
        CHECK(!lmc_gguf_arch_norm_shifted(a, "blk.0.attn_q.weight"));
        static const char *const pairs[] = {"blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"};
        check_names(&m, pairs, 1);
        if (m.lc_ok) CHECK_EQ_STR(m.lc.hidden_act, "gelu_pytorch_tanh");
    }
    close_model(&m);
}

static void test_arch_gemma2(void) {
    model_fx m;
    if (open_model("gemma2", 0, &m)) {
        check_common(&m, "gemma2", 32, 1);
        CHECK(num(m.cfg, "attn_logit_softcapping") == 50.0);
        CHECK(num(m.cfg, "final_logit_softcapping") == 30.0);
        CHECK_EQ_INT(num(m.cfg, "sliding_window"), 4096);
        CHECK(num(m.cfg, "query_pre_attn_scalar") == 32.0);
        static const char *const pairs[] = {
            "blk.0.ffn_norm.weight", "model.layers.0.pre_feedforward_layernorm.weight",
            "blk.0.post_attention_norm.weight", "model.layers.0.post_attention_layernorm.weight",
            "blk.1.post_ffw_norm.weight", "model.layers.1.post_feedforward_layernorm.weight",
        };
        check_names(&m, pairs, 3);
        if (m.lc_ok) {
            CHECK_NEAR(m.lc.attn_softcap, 50.0, 0);
            CHECK_NEAR(m.lc.final_softcap, 30.0, 0);
            CHECK_EQ_INT(m.lc.sliding_window, 4096);
        }
    }
    close_model(&m);
    /* the 27B shape (46 layers) scales attention by (hidden / heads)^-0.5, as llama.cpp does */
    if (open_model("gemma2", 2, &m)) CHECK(num(m.cfg, "query_pre_attn_scalar") == HID / NH);
    close_model(&m);
}

static void test_arch_gemma3(void) {
    model_fx m;
    if (open_model("gemma3", 1, &m)) {
        check_common(&m, "gemma3_text", 32, 1);
        CHECK_EQ_STR(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m.cfg, "architectures"), 0)->valuestring,
                     "Gemma3ForCausalLM");
        CHECK_EQ_INT(num(m.cfg, "sliding_window"), 512);
        CHECK_EQ_INT(num(m.cfg, "sliding_window_pattern"), 6);
        CHECK(num(m.cfg, "rope_local_base_freq") == 10000.0);
        CHECK(num(m.cfg, "rope_theta") == 1000000.0);
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(m.cfg, "rope_scaling");
        CHECK_EQ_STR(str(rs, "rope_type"), "linear");
        CHECK(num(rs, "factor") == 8.0);
        if (m.lc_ok) {
            CHECK_EQ_INT(m.lc.rope.type, LMC_ROPE_LINEAR);
            CHECK_NEAR(m.lc.rope.factor, 8.0, 0);
            CHECK_NEAR(m.lc.rope_local.theta, 10000.0, 0);
            CHECK_EQ_INT(m.lc.sliding_pattern, 6);
        }
        static const char *const pairs[] = {
            "blk.0.attn_q_norm.weight", "model.layers.0.self_attn.q_norm.weight", "blk.0.ffn_norm.weight",
            "model.layers.0.pre_feedforward_layernorm.weight",
        };
        check_names(&m, pairs, 2);
        CHECK(lmc_gguf_arch_norm_shifted(lmc_gguf_arch_find("gemma3"), "blk.0.attn_k_norm.weight"));
    }
    close_model(&m);
    /* a per-layer bool pattern becomes layer_types */
    if (open_model("gemma3", 2, &m)) {
        const cJSON *lt = cJSON_GetObjectItemCaseSensitive(m.cfg, "layer_types");
        CHECK(cJSON_GetArraySize(lt) == NL);
        CHECK(lt && strcmp(cJSON_GetArrayItem(lt, 0)->valuestring, "sliding_attention") == 0);
        CHECK(lt && strcmp(cJSON_GetArrayItem(lt, 1)->valuestring, "full_attention") == 0);
        if (m.lc_ok) {
            CHECK_EQ_INT(m.lc.has_layer_types, 1);
            CHECK_EQ_INT(m.lc.layer_sliding[0], 1);
            CHECK_EQ_INT(m.lc.layer_sliding[1], 0);
        }
    }
    close_model(&m);
}

static void test_arch_phi3(void) {
    model_fx m;
    if (open_model("phi3", 0, &m)) {
        check_common(&m, "phi3", HID / NH, 0);
        CHECK(num(m.cfg, "partial_rotary_factor") == 0.75);
        CHECK_EQ_INT(num(m.cfg, "original_max_position_embeddings"), 1024);
        CHECK_EQ_INT(num(m.cfg, "sliding_window"), 2047);
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(m.cfg, "rope_scaling");
        CHECK_EQ_STR(str(rs, "rope_type"), "longrope");
        const cJSON *lf = cJSON_GetObjectItemCaseSensitive(rs, "long_factor");
        const cJSON *sf = cJSON_GetObjectItemCaseSensitive(rs, "short_factor");
        CHECK(cJSON_GetArraySize(lf) == 6 && cJSON_GetArraySize(sf) == 6);
        CHECK(lf && cJSON_GetArrayItem(lf, 5)->valuedouble == 2.25);
        if (m.lc_ok) {
            CHECK_EQ_INT(m.lc.rope.type, LMC_ROPE_LONGROPE);
            CHECK_EQ_INT(m.lc.rope.n_long_factor, 6);
            CHECK_NEAR(m.lc.rope.long_factor[5], 2.25, 0);
            CHECK_NEAR(m.lc.rope.partial_rotary_factor, 0.75, 0);
        }
        static const char *const pairs[] = {
            "blk.0.attn_qkv.weight", "model.layers.0.self_attn.qkv_proj.weight", "blk.0.ffn_up.weight",
            "model.layers.0.mlp.gate_up_proj.weight", "blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight",
        };
        check_names(&m, pairs, 3);
        CHECK(lmc_gguf_arch_is_config_tensor("rope_factors_long.weight"));
    }
    close_model(&m);
}

static void test_arch_refusals(void) {
    lmc_gguf_writer *w;
    char p[300];
    path_in_tmp(p, sizeof p, "bert.gguf");
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    lmc_gguf_writer_add_str(w, "general.architecture", "bert");
    CHECK(lmc_gguf_writer_write(w, p) == LMC_OK);
    lmc_gguf_writer_free(w);
    lmc_gguf *g;
    cJSON *c;
    CHECK(lmc_gguf_open(p, &g) == LMC_OK);
    if (g) {
        CHECK(lmc_gguf_arch_config(g, &c) == LMC_ERR_UNSUPPORTED);
        CHECK(strstr(lmc_last_error(), "\"bert\"") && strstr(lmc_last_error(), "gemma3"));
        lmc_gguf_close(g);
    }
    /* a llama file without its block count */
    path_in_tmp(p, sizeof p, "nolayers.gguf");
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    lmc_gguf_writer_add_str(w, "general.architecture", "llama");
    lmc_gguf_writer_add_u32(w, "llama.embedding_length", 64);
    CHECK(lmc_gguf_writer_write(w, p) == LMC_OK);
    lmc_gguf_writer_free(w);
    CHECK(lmc_gguf_open(p, &g) == LMC_OK);
    if (g) {
        CHECK(lmc_gguf_arch_config(g, &c) == LMC_ERR_FORMAT);
        CHECK(strstr(lmc_last_error(), "llama.block_count") != NULL);
        lmc_gguf_close(g);
    }
    /* no architecture at all */
    path_in_tmp(p, sizeof p, "noarch.gguf");
    CHECK(lmc_gguf_writer_init(&w) == LMC_OK);
    CHECK(lmc_gguf_writer_write(w, p) == LMC_OK);
    lmc_gguf_writer_free(w);
    CHECK(lmc_gguf_open(p, &g) == LMC_OK);
    if (g) {
        CHECK(lmc_gguf_arch_config(g, &c) == LMC_ERR_FORMAT && strstr(lmc_last_error(), "general.architecture"));
        lmc_gguf_close(g);
    }
}

/* Meta's llama3 scaling rule, per frequency: keep high frequencies, divide low ones by factor, blend between. */
static double l3_divisor(double base, int dim, int i, double factor, double lff, double hff, double old) {
    double inv = pow(base, -2.0 * i / dim), wl = 2 * M_PI / inv;
    if (wl < old / hff) return 1.0;
    if (wl > old / lff) return factor;
    double s = (old / wl - lff) / (hff - lff);
    return 1.0 / ((1.0 - s) / factor + s);
}

/* A llama file of head_dim `dim` with the given rope_freqs table; returns its config (NULL on failure). */
static cJSON *llama_with_freqs(int dim, double base, const float *tab) {
    lmc_gguf_writer *w;
    char p[300];
    path_in_tmp(p, sizeof p, "llama3.gguf");
    if (lmc_gguf_writer_init(&w) < 0) return NULL;
    lmc_gguf_writer_add_str(w, "general.architecture", "llama");
    lmc_gguf_writer_add_u32(w, "llama.embedding_length", HID);
    lmc_gguf_writer_add_u32(w, "llama.block_count", 1);
    lmc_gguf_writer_add_u32(w, "llama.feed_forward_length", FF);
    lmc_gguf_writer_add_u32(w, "llama.attention.head_count", NH);
    lmc_gguf_writer_add_u32(w, "llama.attention.key_length", (uint32_t)dim);
    lmc_gguf_writer_add_u32(w, "llama.attention.value_length", (uint32_t)dim);
    lmc_gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    lmc_gguf_writer_add_f32(w, "llama.rope.freq_base", (float)base);
    add_t(w, "token_embd.weight", HID, VOCAB);
    lmc_gguf_writer_add_tensor(w, "rope_freqs.weight", LMC_GGML_F32, 1, (const int64_t[]){dim / 2}, tab);
    lmc_status st = lmc_gguf_writer_write(w, p);
    lmc_gguf_writer_free(w);
    lmc_gguf *g;
    cJSON *c = NULL;
    if (st < 0 || lmc_gguf_open(p, &g) < 0) return NULL;
    st = lmc_gguf_arch_config(g, &c);
    CHECK_MSG(st == LMC_OK, "%s", lmc_last_error());
    lmc_gguf_close(g);
    return c;
}

/* The emitted llama3 parameters reproduce the table. */
static void check_l3_reproduces(const cJSON *rs, double base, int dim, const float *tab) {
    CHECK_EQ_STR(str(rs, "rope_type"), "llama3");
    double f = num(rs, "factor"), lff = num(rs, "low_freq_factor"), hff = num(rs, "high_freq_factor");
    double old = num(rs, "original_max_position_embeddings");
    CHECK(old == floor(old) && old >= 1); /* an integer, as HF's config wants */
    for (int i = 0; i < dim / 2; i++) {
        double d = l3_divisor(base, dim, i, f, lff, hff, old);
        CHECK_MSG(fabs(d - tab[i]) <= 2e-5 * tab[i], "entry %d: %g vs %g", i, d, (double)tab[i]);
    }
}

/* rope_freqs.weight: a llama3 table becomes rope_scaling llama3; any other table is passed through. */
static void test_llama3_rope_freqs(void) {
    static const struct { int dim; double base, factor, lff, hff, old; } cases[] = {
        {128, 500000.0, 8.0, 1.0, 4.0, 8192.0},  /* Llama 3.1: many blended entries, parameters recovered */
        {64, 500000.0, 32.0, 1.0, 4.0, 8192.0},  /* Llama 3.2 factor */
        {16, 500000.0, 8.0, 1.0, 4.0, 8192.0},   /* one blended entry: a fit, not the same numbers */
        {16, 10000.0, 4.0, 1.0, 4.0, 16.0},      /* the llama_rope_llama3 fixture: no entry of 1 */
        {16, 10000.0, 2.0, 1.0, 4.0, 1000.0},    /* no blended entry */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float tab[64];
        int dim = cases[c].dim;
        for (int i = 0; i < dim / 2; i++)
            tab[i] = (float)l3_divisor(cases[c].base, dim, i, cases[c].factor, cases[c].lff, cases[c].hff, cases[c].old);
        cJSON *cfg = llama_with_freqs(dim, cases[c].base, tab);
        CHECK(cfg != NULL);
        if (!cfg) continue;
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
        CHECK_MSG(rs != NULL, "case %zu: no rope_scaling", c);
        if (rs) check_l3_reproduces(rs, cases[c].base, dim, tab);
        CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cfg, "lmc_gguf"), "rope_freq_factors") == NULL);
        if (c < 2 && rs) {
            CHECK_NEAR(num(rs, "factor"), cases[c].factor, 1e-6);
            CHECK_NEAR(num(rs, "low_freq_factor"), 1.0, 1e-4);
            CHECK_NEAR(num(rs, "high_freq_factor"), 4.0, 1e-3);
            CHECK_EQ_INT(num(rs, "original_max_position_embeddings"), 8192);
        }
        CHECK_EQ_INT(num(cfg, "num_key_value_heads"), NH); /* head_count_kv absent: MHA */
        /* lmc's own normalizer takes it as llama3 */
        lmc_config lc;
        if (lmc_config_from_json(cJSON_Duplicate(cfg, 1), NULL, &lc) == LMC_OK) {
            CHECK_EQ_INT(lc.rope.type, LMC_ROPE_LLAMA3);
            lmc_config_free(&lc);
        } else {
            CHECK_MSG(0, "lmc_config_from_json: %s", lmc_last_error());
        }
        cJSON_Delete(cfg);
    }
    /* not a llama3 table (decreasing): passed through as lmc_gguf.rope_freq_factors */
    float odd[8];
    for (int i = 0; i < 8; i++) odd[i] = 4.0f - 0.25f * (float)i;
    cJSON *cfg = llama_with_freqs(16, 10000.0, odd);
    CHECK(cfg != NULL);
    if (cfg) {
        CHECK(cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling") == NULL);
        const cJSON *ff = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cfg, "lmc_gguf"), "rope_freq_factors");
        CHECK(cJSON_GetArraySize(ff) == 8 && cJSON_GetArrayItem(ff, 2)->valuedouble == 3.5);
        cJSON_Delete(cfg);
    }
}

/* llama.cpp's permute, written from its numpy definition: reshape(n_head, 2, D/2, ...), swapaxes(1, 2),
 * reshape back. Our unpermute must undo it for q (n_head heads) and k (n_kv heads), weights and biases. */
static void test_unpermute(void) {
    const int D = 8, n_head = 3, cols = 5;
    const int rows = D * n_head;
    float hf[24 * 5], gg[24 * 5], back[24 * 5];
    for (int i = 0; i < rows * cols; i++) hf[i] = (float)i;
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < D / 2; j++) {
                int src = h * D + i * (D / 2) + j; /* index [h, i, j] of the first reshape */
                int dst = h * D + j * 2 + i;       /* index [h, j, i] after swapaxes */
                memcpy(gg + dst * cols, hf + src * cols, sizeof(float) * cols);
            }
    CHECK(lmc_gguf_unpermute_rows(back, gg, rows, sizeof(float) * cols, D) == LMC_OK);
    CHECK(memcmp(back, hf, sizeof hf) == 0);
    for (int r = 0; r < rows; r++) {
        CHECK_EQ_INT(lmc_gguf_gguf_row(lmc_gguf_hf_row(r, D), D), r);
        CHECK(memcmp(gg + r * cols, hf + lmc_gguf_hf_row(r, D) * cols, sizeof(float) * cols) == 0);
    }
    /* a bias: one element per row */
    float bias_hf[24], bias_gg[24], bias_back[24];
    for (int r = 0; r < rows; r++) bias_hf[r] = (float)(100 + r);
    for (int r = 0; r < rows; r++) bias_gg[r] = bias_hf[lmc_gguf_hf_row(r, D)];
    CHECK(lmc_gguf_unpermute_rows(bias_back, bias_gg, rows, sizeof(float), D) == LMC_OK);
    CHECK(memcmp(bias_back, bias_hf, sizeof bias_hf) == 0);
    /* known positions: head 0 of D=8: GGUF rows 0..7 hold HF rows 0,4,1,5,2,6,3,7 */
    static const int want[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    for (int r = 0; r < 8; r++) CHECK_EQ_INT(lmc_gguf_hf_row(r, 8), want[r]);
    CHECK_EQ_INT(lmc_gguf_hf_row(8 + 1, 8), 8 + 4);
    CHECK(lmc_gguf_unpermute_rows(back, gg, 20, 4, 8) == LMC_ERR_ARG);
    CHECK(lmc_gguf_unpermute_rows(back, gg, 21, 4, 7) == LMC_ERR_ARG);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lmc_test_gguf_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    fill_tdata();
    RUN(test_type_table);
    RUN(test_roundtrip_align32);
    RUN(test_roundtrip_align64);
    RUN(test_roundtrip_align1);
    RUN(test_writer_rejects);
    RUN(test_nested_arrays_v2);
    for (size_t i = 0; i < sizeof mcases / sizeof mcases[0]; i++) {
        test_cur_failed_ = 0;
        run_mcase(&mcases[i]);
        if (test_cur_failed_) {
            test_failed_++;
            fprintf(stderr, "FAIL malformed: %s\n", mcases[i].name);
        } else {
            test_passed_++;
        }
    }
    RUN(test_open_file_errors);
    RUN(test_truncations);
    RUN(test_fuzz);
    RUN(test_arch_llama);
    RUN(test_arch_qwen2);
    RUN(test_arch_qwen3);
    RUN(test_arch_gemma);
    RUN(test_arch_gemma2);
    RUN(test_arch_gemma3);
    RUN(test_arch_phi3);
    RUN(test_arch_refusals);
    RUN(test_llama3_rope_freqs);
    RUN(test_unpermute);
    /* clean up the temporary files */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_END();
}
