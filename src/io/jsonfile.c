/* jsonfile.c — JSON files through cJSON: bounded reads, parse errors with
 * positions, and typed getters for config parsing.
 *
 * Owns nothing beyond a call: the read buffer is freed before returning and the
 * parsed tree belongs to the caller.
 */
#include "io/jsonfile.h"
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JSON_MAX_SAFE_INT 9007199254740992.0 /* 2^53 */

lmc_status lmc_json_parse(const char *text, size_t len, const char *what, cJSON **out) {
    LMC_ASSERT(out != NULL && (text != NULL || len == 0));
    if (!what) what = "JSON text";
    const char *nul = len ? memchr(text, 0, len) : NULL;
    if (nul) {
        return lmc_fail(LMC_ERR_FORMAT, "%s: not valid JSON: NUL byte at byte offset %zu", what,
                        (size_t)(nul - text));
    }
    size_t skip = 0; /* a UTF-8 byte-order mark is not JSON, but editors write it */
    if (len >= 3 && (unsigned char)text[0] == 0xEF && (unsigned char)text[1] == 0xBB &&
        (unsigned char)text[2] == 0xBF) {
        skip = 3;
    }
    /* cJSON wants the terminating NUL inside the length to check for trailing garbage. */
    char *buf = malloc(len - skip + 1);
    if (!buf) return lmc_fail(LMC_ERR_NOMEM, "%s: out of memory for %zu bytes of JSON", what, len);
    if (len > skip) memcpy(buf, text + skip, len - skip);
    buf[len - skip] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len - skip + 1, &end, 1);
    if (!root) {
        size_t off = (end && end >= buf && end <= buf + (len - skip)) ? (size_t)(end - buf) : len - skip;
        size_t line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (buf[i] == '\n') { line++; col = 1; } else { col++; }
        }
        lmc_status st = lmc_fail(LMC_ERR_FORMAT, "%s: not valid JSON: error at line %zu, column %zu (byte offset %zu)%s",
                                 what, line, col, off + skip, off >= len - skip ? " (unexpected end of text)" : "");
        free(buf);
        return st;
    }
    free(buf);
    *out = root;
    return LMC_OK;
}

lmc_status lmc_json_read_file(const char *path, size_t max_bytes, cJSON **out) {
    LMC_ASSERT(path != NULL && out != NULL);
    int fd;
    uint64_t fsize;
    LMC_TRY(lmc_file_open_regular(path, &fd, &fsize));
    size_t size = (size_t)fsize;
    if (max_bytes && size > max_bytes) {
        close(fd);
        return lmc_fail(LMC_ERR_RANGE, "%s is %zu bytes, more than the limit of %zu for this JSON file", path, size,
                        max_bytes);
    }
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return lmc_fail(LMC_ERR_NOMEM, "out of memory reading %s (%zu bytes)", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return lmc_fail(LMC_ERR_IO, "cannot read %s: %s", path, strerror(e));
        }
        if (r == 0) break; /* file shrank while reading: parse what is there */
        got += (size_t)r;
    }
    close(fd);
    lmc_status st = lmc_json_parse(buf, got, path, out);
    free(buf);
    return st;
}

const char *lmc_json_type_name(const cJSON *item) {
    if (!item) return "absent";
    if (cJSON_IsObject(item)) return "object";
    if (cJSON_IsArray(item)) return "array";
    if (cJSON_IsString(item)) return "string";
    if (cJSON_IsNumber(item)) return "number";
    if (cJSON_IsBool(item)) return "boolean";
    if (cJSON_IsNull(item)) return "null";
    return "invalid";
}

int lmc_json_item_int(const cJSON *item, int64_t *out) {
    if (!cJSON_IsNumber(item)) return 0;
    double v = item->valuedouble;
    if (!isfinite(v) || floor(v) != v || fabs(v) > JSON_MAX_SAFE_INT) return 0;
    if (out) *out = (int64_t)v;
    return 1;
}

/* The item under key: sets *item and returns 1, or returns 0 (absent/null) or -1 (obj not an object). */
static int lookup(const cJSON *obj, const char *key, const cJSON **item) {
    if (!obj) return 0;
    if (!cJSON_IsObject(obj) || !key) return -1;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return 0;
    *item = it;
    return 1;
}

int lmc_json_get_int(const cJSON *obj, const char *key, int64_t *out) {
    const cJSON *it = NULL;
    int r = lookup(obj, key, &it);
    if (r <= 0) return r;
    return lmc_json_item_int(it, out) ? 1 : -1;
}

int lmc_json_get_double(const cJSON *obj, const char *key, double *out) {
    const cJSON *it = NULL;
    int r = lookup(obj, key, &it);
    if (r <= 0) return r;
    if (!cJSON_IsNumber(it)) return -1;
    if (out) *out = it->valuedouble;
    return 1;
}

int lmc_json_get_bool(const cJSON *obj, const char *key, int *out) {
    const cJSON *it = NULL;
    int r = lookup(obj, key, &it);
    if (r <= 0) return r;
    if (!cJSON_IsBool(it)) return -1;
    if (out) *out = cJSON_IsTrue(it) ? 1 : 0;
    return 1;
}

int lmc_json_get_string(const cJSON *obj, const char *key, const char **out) {
    const cJSON *it = NULL;
    int r = lookup(obj, key, &it);
    if (r <= 0) return r;
    if (!cJSON_IsString(it) || !it->valuestring) return -1;
    if (out) *out = it->valuestring;
    return 1;
}
