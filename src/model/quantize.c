/* quantize.c — MLX affine quantization of a Hugging Face checkpoint directory. */
#include "quantize.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/quant.h"
#include "io/jsonfile.h"
#include "io/safetensors.h"

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static lmc_status copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    if (!in || !out) {
        if (in) fclose(in);
        return lmc_fail(LMC_ERR_IO, "cannot copy %s to %s: %s", from, to, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    int bad = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) bad |= fwrite(buf, 1, n, out) != n;
    bad |= ferror(in);
    fclose(in);
    bad |= fclose(out) != 0;
    return bad ? lmc_fail(LMC_ERR_IO, "error copying %s", from) : LMC_OK;
}

static lmc_status write_config(const char *in_dir, const char *out_dir, int bits, int group, int mxfp4) {
    char path[4200];
    cJSON *cfg;
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    LMC_TRY(lmc_json_read_file(path, 16u << 20, &cfg));
    if (cJSON_GetObjectItemCaseSensitive(cfg, "quantization") ||
        cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config")) {
        cJSON_Delete(cfg);
        return lmc_fail(LMC_ERR_ARG, "%s is already quantized", in_dir);
    }
    for (int k = 0; k < 2; k++) {
        cJSON *q = cJSON_CreateObject();
        cJSON_AddNumberToObject(q, "group_size", group);
        cJSON_AddNumberToObject(q, "bits", bits);
        cJSON_AddStringToObject(q, "mode", mxfp4 ? "mxfp4" : "affine");
        cJSON_AddItemToObject(cfg, k ? "quantization_config" : "quantization", q);
    }
    char *text = cJSON_Print(cfg);
    cJSON_Delete(cfg);
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    FILE *f = fopen(path, "w");
    int bad = !f || !text || fputs(text, f) < 0;
    if (f) bad |= fclose(f) != 0;
    free(text);
    return bad ? lmc_fail(LMC_ERR_IO, "cannot write %s", path) : LMC_OK;
}

/* mxfp4: MXFP4_MLX codes (U32) and U8 exponents, no biases (bits 4, group 32); else affine. */
static lmc_status quantize_dir(const char *in_dir, const char *out_dir, int bits, int group, int mxfp4,
                               lmc_quantize_stats *stats, void (*progress)(int done, int total, void *ud), void *ud) {
    static const lmc_dtype by_bits[9] = {0, 0, LMC_DTYPE_MLX2, LMC_DTYPE_MLX3, LMC_DTYPE_MLX4, LMC_DTYPE_MLX5,
                                         LMC_DTYPE_MLX6, 0, LMC_DTYPE_MLX8};
    lmc_quantize_stats st0 = {0};
    if (!stats) stats = &st0;
    *stats = st0;
    if (bits < 2 || bits > 8 || !by_bits[bits]) return lmc_fail(LMC_ERR_ARG, "--bits must be 2, 3, 4, 5, 6 or 8");
    if (group != 32 && group != 64 && group != 128) return lmc_fail(LMC_ERR_ARG, "--group-size must be 32, 64 or 128");
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) return lmc_fail(LMC_ERR_IO, "cannot create %s: %s", out_dir, strerror(errno));
    LMC_TRY(write_config(in_dir, out_dir, bits, group, mxfp4));
    lmc_st_set *set;
    LMC_TRY(lmc_st_open(in_dir, &set));
    const lmc_dtype qt = mxfp4 ? LMC_DTYPE_MXFP4_MLX : by_bits[bits];
    const lmc_dtype side_t = LMC_DTYPE_U8; /* mxfp4 exponents; affine sides keep the weight's dtype */
    const int n = lmc_st_count(set);
    lmc_st_write_tensor *outs = calloc((size_t)n * 3 + 1, sizeof *outs);
    void **bufs = calloc((size_t)n * 3 + 1, sizeof *bufs);
    char **names = calloc((size_t)n * 2 + 1, sizeof *names);
    int n_out = 0, n_bufs = 0, n_names = 0;
    lmc_status st = outs && bufs && names ? LMC_OK : lmc_fail(LMC_ERR_NOMEM, "quantize");
    for (int i = 0; st >= 0 && i < n; i++) {
        const lmc_st_tensor *t = lmc_st_at(set, i);
        if (progress && i) progress(i, n, ud);
        stats->bytes_in += t->nbytes;
        int quant = t->n_dims == 2 && ends_with(t->name, ".weight") && t->shape[1] % group == 0 &&
                    (t->dtype == LMC_DTYPE_F32 || t->dtype == LMC_DTYPE_F16 || t->dtype == LMC_DTYPE_BF16);
        if (!quant) {
            outs[n_out++] = (lmc_st_write_tensor){.name = t->name, .dtype = t->dtype, .n_dims = t->n_dims, .data = t->data};
            memcpy(outs[n_out - 1].shape, t->shape, sizeof outs[n_out - 1].shape);
            stats->bytes_out += t->nbytes;
            stats->n_copied++;
            continue;
        }
        const int64_t rows = t->shape[0], in = t->shape[1], per_row = in / group;
        const lmc_dtype st_t = mxfp4 ? side_t : t->dtype;
        const size_t code_row = lmc_dtype_row_bytes(qt, in), side_row = (size_t)per_row * lmc_dtype_size(st_t);
        uint8_t *codes = malloc(code_row * (size_t)rows);
        uint8_t *scales = malloc(side_row * (size_t)rows), *biases = malloc(side_row * (size_t)rows);
        float *f = malloc((size_t)in * sizeof *f);
        void *tmp = malloc((size_t)in * lmc_dtype_size(t->dtype));
        size_t blen = strlen(t->name) - 7;
        char *sname = malloc(blen + 8), *bname = malloc(blen + 8);
        bufs[n_bufs++] = codes; bufs[n_bufs++] = scales; bufs[n_bufs++] = biases;
        names[n_names++] = sname; names[n_names++] = bname;
        if (!codes || !scales || !biases || !f || !tmp || !sname || !bname || code_row % 4) {
            free(f); free(tmp);
            st = lmc_fail(LMC_ERR_NOMEM, "quantizing %s", t->name);
            break;
        }
        for (int64_t r = 0; st >= 0 && r < rows; r++) {
            memcpy(tmp, (const uint8_t *)t->data + (size_t)r * (size_t)in * lmc_dtype_size(t->dtype),
                   (size_t)in * lmc_dtype_size(t->dtype)); /* mapping data need not be aligned */
            lmc_to_f32(t->dtype, tmp, f, (size_t)in);
            lmc_mlx_row aux = {.group_size = group, .scale_type = st_t, .scales = scales + (size_t)r * side_row,
                               .biases = mxfp4 ? NULL : biases + (size_t)r * side_row};
            st = lmc_quantize_row(qt, f, codes + (size_t)r * code_row, &aux, in);
        }
        free(f);
        free(tmp);
        if (st < 0) break;
        snprintf(sname, blen + 8, "%.*s.scales", (int)blen, t->name);
        snprintf(bname, blen + 8, "%.*s.biases", (int)blen, t->name);
        outs[n_out++] = (lmc_st_write_tensor){.name = t->name, .dtype = LMC_DTYPE_U32, .n_dims = 2,
                                              .shape = {rows, (int64_t)(code_row / 4)}, .data = codes};
        outs[n_out++] = (lmc_st_write_tensor){.name = sname, .dtype = st_t, .n_dims = 2, .shape = {rows, per_row},
                                              .data = scales};
        if (!mxfp4)
            outs[n_out++] = (lmc_st_write_tensor){.name = bname, .dtype = t->dtype, .n_dims = 2, .shape = {rows, per_row},
                                                  .data = biases};
        stats->bytes_out += code_row * (size_t)rows + (mxfp4 ? 1 : 2) * side_row * (size_t)rows;
        stats->n_quantized++;
    }
    if (st >= 0) {
        if (progress) progress(n, n, ud);
        char path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
        const char *meta[2] = {"format", "mlx"};
        st = lmc_st_write(path, outs, n_out, meta, 1);
    }
    for (int i = 0; i < n_bufs; i++) free(bufs[i]);
    for (int i = 0; i < n_names; i++) free(names[i]);
    free(bufs);
    free(names);
    free(outs);
    lmc_st_close(set);
    /* tokenizer, generation and template files come along */
    DIR *d = st >= 0 ? opendir(in_dir) : NULL;
    struct dirent *e;
    while (d && st >= 0 && (e = readdir(d))) {
        const char *nm = e->d_name;
        if (nm[0] == '.' || !strcmp(nm, "config.json") || ends_with(nm, ".safetensors") ||
            !strcmp(nm, "model.safetensors.index.json"))
            continue;
        if (!ends_with(nm, ".json") && !ends_with(nm, ".jinja") && !ends_with(nm, ".model") && !ends_with(nm, ".txt"))
            continue;
        char from[4200], to[4200];
        snprintf(from, sizeof from, "%s/%s", in_dir, nm);
        snprintf(to, sizeof to, "%s/%s", out_dir, nm);
        st = copy_file(from, to);
    }
    if (d) closedir(d);
    return st;
}

lmc_status lmc_quantize_mlx(const char *in_dir, const char *out_dir, int bits, int group, lmc_quantize_stats *stats,
                            void (*progress)(int done, int total, void *ud), void *ud) {
    return quantize_dir(in_dir, out_dir, bits, group, 0, stats, progress, ud);
}

lmc_status lmc_quantize_mlx_mxfp4(const char *in_dir, const char *out_dir, lmc_quantize_stats *stats,
                                  void (*progress)(int done, int total, void *ud), void *ud) {
    return quantize_dir(in_dir, out_dir, 4, 32, 1, stats, progress, ud);
}
