/* chat.h — what transformers' apply_chat_template does around the Jinja renderer.
 *
 * Builds the render context (messages, tools, documents, add_generation_prompt, the
 * special tokens and extra keyword arguments such as enable_thinking), renders the
 * template, and applies continue_final_message. Also finds a model's template:
 * chat_template.jinja, chat_template.json, or tokenizer_config.json's "chat_template"
 * (a string or a list of {name, template}).
 *
 *     lmc_chat_params p = lmc_chat_default_params();
 *     p.messages = msgs; p.add_generation_prompt = 1; p.bos_token = "<s>";
 *     char *text; size_t n;
 *     if (lmc_chat_render(template_source, &p, &text, &n) < 0) fprintf(stderr, "%s\n", lmc_last_error());
 *
 * Inputs are borrowed (never modified or freed); the output is malloc'ed for the caller.
 */
#ifndef LMC_TOK_CHAT_H
#define LMC_TOK_CHAT_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "core/status.h"
#include "tok/jinja.h"

typedef struct lmc_chat_params {
    const cJSON *messages;      /* [{role, content, tool_calls?, tool_call_id?, name?}, ...]; content: string or parts */
    const cJSON *tools;         /* list of tool schemas, or NULL (the template then sees tools = None) */
    const cJSON *documents;     /* or NULL (documents = None) */
    int add_generation_prompt;
    int continue_final_message; /* cut the output right after the last message's content (no end-of-turn) */
    const char *bos_token, *eos_token;  /* NULL: the variable is left undefined */
    const cJSON *extra;         /* object of extra variables, e.g. {"enable_thinking": false}; may be NULL */
} lmc_chat_params;

lmc_chat_params lmc_chat_default_params(void);

/* Parse `template_source` and render it. */
lmc_status lmc_chat_render(const char *template_source, const lmc_chat_params *p, char **out, size_t *out_len);
/* Same with a template parsed once by lmc_jinja_parse (the server's path); opt may be NULL
 * (defaults: lmc_jinja_default_options()). */
lmc_status lmc_chat_render_template(const lmc_jinja_template *t, const lmc_chat_params *p, char **out, size_t *out_len);
lmc_status lmc_chat_render_template_ex(const lmc_jinja_template *t, const lmc_chat_params *p,
                                       const lmc_jinja_options *opt, char **out, size_t *out_len);

/* cJSON keeps numbers as doubles only, so `1.0` and `1` look alike and large integers lose
 * digits. Python's json.loads keeps them apart, and templates print them differently
 * (tojson: 1.0 vs 1). Call this on a tree that cJSON_Parse made from `text` (same bytes):
 * it records each number's source text in its valuestring (freed by cJSON_Delete), which
 * the renderer then uses for Python's int/float typing. LMC_ERR_ARG if text and tree
 * disagree (nothing is changed then). */
lmc_status lmc_chat_json_keep_numbers(cJSON *root, const char *text, size_t len);

/* Pick a template from a tokenizer_config.json "chat_template" value: a string, or a list of
 * {"name", "template"}. name NULL → "tool_use" when has_tools and present, else "default".
 * *out is malloc'ed. LMC_ERR_NOT_FOUND if there is none by that name. */
lmc_status lmc_chat_template_select(const cJSON *value, const char *name, int has_tools, char **out);

/* Find a model directory's chat template: chat_template.jinja, then chat_template.json
 * ({"chat_template": ...}), then tokenizer_config.json. LMC_ERR_NOT_FOUND if none. */
lmc_status lmc_chat_template_load(const char *model_dir, const char *name, int has_tools, char **out);

#endif
