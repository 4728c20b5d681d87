/* jinja_strings.h — Python str operations for the Jinja interpreter (internal header).
 *
 * Implemented in jinja_strings.c; used by jinja_filters.c (filters and str methods).
 * Results live in the render arena of the jctx passed in.
 */
#ifndef LMC_TOK_JINJA_STRINGS_H
#define LMC_TOK_JINJA_STRINGS_H

#include "tok/jinja_int.h"

jv jz_str_strip(jv s, jv chars, int which);          /* which: 1 left, 2 right, 3 both */
jv jz_str_lower(jctx *c, jv s);
jv jz_str_upper(jctx *c, jv s);
jv jz_str_swapcase(jctx *c, jv s);
jv jz_str_title_method(jctx *c, jv s);              /* str.title() */
jv jz_str_title_filter(jctx *c, jv s);              /* jinja2 |title */
jv jz_str_capitalize(jctx *c, jv s);
jv jz_str_replace(jctx *c, jv s, jv old, jv rep, int64_t count);
int64_t jz_str_cp_index(jv s, size_t byte_off);
jv jz_str_split(jctx *c, const jnode *at, jv s, jv sep, int64_t maxsplit, int from_right);
jv jz_str_splitlines(jctx *c, jv s, int keepends);
jv jz_str_pad(jctx *c, jv s, int64_t width, char align, const char *fill, size_t fill_n);
void jz_format_spec(jctx *c, const jnode *at, jsb *out, jv v, const char *spec, size_t n);
jv jz_str_format(jctx *c, const jnode *at, jv fmt, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);

#endif
