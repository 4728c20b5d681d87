/* jinja.h — a Jinja2 template interpreter for Hugging Face chat templates.
 *
 * Parse once, render many times. The dialect is the one transformers configures
 * (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols,
 * the `generation` tag, HF's tojson/raise_exception/strftime_now). Values behave
 * as in Python (repr of dicts, True/False/None, int vs float arithmetic).
 *
 *     lmc_jinja_template *t;
 *     if (lmc_jinja_parse(src, strlen(src), &t) < 0) puts(lmc_last_error());
 *     char *out; size_t n;
 *     if (lmc_jinja_render(t, ctx_json_object, &out, &n) == LMC_OK) { ...; free(out); }
 *     lmc_jinja_free(t);
 *
 * Ownership: the template owns a private copy of the source; the rendered text is
 * malloc'ed and owned by the caller. A template may be rendered from several
 * threads at once (rendering never mutates it). Errors (parse errors, raise_exception,
 * type errors, undefined access) return LMC_ERR_FORMAT with "template:LINE:COL: message"
 * in lmc_last_error().
 *
 * Supported: all statements chat templates use (if/elif/else, for with loop.*, filters,
 * else and recursive, set incl. block set and namespace attributes, macro/call/caller,
 * filter blocks, with, break/continue, raw, generation), jinja2's builtin filters and tests
 * except filesizeformat/random/urlencode/urlize/wordwrap/xmlattr, Python str/dict/list
 * methods, slicing, %-formatting and str.format. Not supported: include/import/extends/
 * block (there is no loader), star-args in calls. Integers are 64-bit (overflow is an
 * error); lazy filter results behave as generators (truthy, no len) but can be consumed
 * more than once.
 */
#ifndef LMC_TOK_JINJA_H
#define LMC_TOK_JINJA_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "core/status.h"

typedef struct lmc_jinja_template lmc_jinja_template;

/* Render options: limits that keep a hostile template from exhausting the machine,
 * and the clock strftime_now() reads (fixed for reproducible renders). */
typedef struct lmc_jinja_options {
    size_t max_output;      /* bytes of rendered text (default 64 MiB) */
    size_t max_memory;      /* bytes of working memory for one render (default 512 MiB) */
    long long max_steps;    /* evaluated nodes (default 50 million) */
    int max_call_depth;     /* nested macro calls (default 64) */
    long long now;          /* seconds since the epoch for strftime_now (local time); 0 = current time */
} lmc_jinja_options;

lmc_jinja_options lmc_jinja_default_options(void);

/* Parse `len` bytes of template source (\r\n and \r become \n and one trailing newline is
 * dropped, as jinja2 does). On error returns LMC_ERR_FORMAT and sets *out to NULL. */
lmc_status lmc_jinja_parse(const char *source, size_t len, lmc_jinja_template **out);
void lmc_jinja_free(lmc_jinja_template *t);

/* Render with the variables of `context` (a cJSON object, may be NULL). Numbers that
 * are integral become Python ints, others floats. Output is NUL-terminated too. */
lmc_status lmc_jinja_render(const lmc_jinja_template *t, const cJSON *context, char **out, size_t *out_len);
lmc_status lmc_jinja_render_ex(const lmc_jinja_template *t, const cJSON *context, const lmc_jinja_options *opt,
                               char **out, size_t *out_len);

#endif
