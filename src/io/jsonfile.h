/* jsonfile.h — read a JSON file into a cJSON tree, and small typed getters.
 *
 * lmc_json_read_file reads a whole file (bounded by max_bytes), rejects NUL
 * bytes, skips a UTF-8 byte-order mark, and parses with cJSON; on failure the
 * last-error message names the file and the line, column and byte offset of
 * the parse error. The caller owns the returned tree (cJSON_Delete).
 *
 * The getters look a key up case-sensitively and return 1 when the key is
 * present with the wanted type, 0 when it is absent or JSON null (or obj is
 * NULL), and -1 when it is present with another type (or obj is not an object).
 * *out is written only when 1 is returned, so a default set before the call stays.
 */
#ifndef LMC_IO_JSONFILE_H
#define LMC_IO_JSONFILE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/status.h"

/* Read and parse `path`. max_bytes = 0 means no size limit. *out is set only
 * on success. Errors: LMC_ERR_IO / LMC_ERR_NOT_FOUND (open, read), LMC_ERR_RANGE
 * (file larger than max_bytes), LMC_ERR_FORMAT (not valid JSON), LMC_ERR_NOMEM. */
lmc_status lmc_json_read_file(const char *path, size_t max_bytes, cJSON **out);

/* Parse `len` bytes of text (need not be NUL-terminated) the same way;
 * `what` names the source in error messages (e.g. a file name). */
lmc_status lmc_json_parse(const char *text, size_t len, const char *what, cJSON **out);

/* An integer: a JSON number with no fractional part and |v| <= 2^53. */
int lmc_json_get_int(const cJSON *obj, const char *key, int64_t *out);
/* Any JSON number. */
int lmc_json_get_double(const cJSON *obj, const char *key, double *out);
/* true or false; *out is set to 1 or 0. */
int lmc_json_get_bool(const cJSON *obj, const char *key, int *out);
/* A string; *out views the tree's storage (valid while the tree lives). */
int lmc_json_get_string(const cJSON *obj, const char *key, const char **out);

/* 1 if item is a number holding an integer with |v| <= 2^53 (then *out set). */
int lmc_json_item_int(const cJSON *item, int64_t *out);

/* The JSON type of item as a word for error messages: "object", "array",
 * "string", "number", "boolean", "null", or "absent" for NULL. */
const char *lmc_json_type_name(const cJSON *item);

#endif
