/* fuzz_chat.c — fuzz target: chat-template parsing and rendering with arbitrary messages.
 *
 * The input is a Jinja template source, then "\n--chat--\n", then a JSON request: either
 * a messages array or an object {messages, tools, documents, add_generation_prompt,
 * continue_final_message, extra}. The template is parsed (lmc_jinja_parse) and rendered
 * through lmc_chat_render_template_ex — the server's path — with the numbers kept as
 * source text (lmc_chat_json_keep_numbers) and with tight render limits so a hostile
 * template ends as an error, not as a timeout. Without the separator the whole input is
 * a template rendered over a fixed two-message conversation.
 */
#include <stdint.h>

#include "fuzz.h"
#include "server/tools.h"
#include "tok/chat.h"

static const char chat_default_msgs_[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi \\u00e9 1.0\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"arguments\":{\"a\":1}}}]},{\"role\":\"tool\",\"content\":\"42\",\"tool_call_id\":\"c1\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
    "\"add_generation_prompt\":true,\"extra\":{\"enable_thinking\":false}}";

int fuzz_chat(const uint8_t *d, size_t n) {
    const uint8_t *req;
    size_t tlen, req_n;
    int has_req = fuzz_split(d, n, "\n--chat--\n", &tlen, &req, &req_n);
    char *src = fuzz_strndup(d, tlen);
    if (!src) return 0;
    const char *rtext = has_req ? (const char *)req : chat_default_msgs_;
    size_t rlen = has_req ? req_n : sizeof chat_default_msgs_ - 1;
    cJSON *root = cJSON_ParseWithLength(rtext, rlen);
    (void)lmc_tool_fmt_detect(src);
    lmc_jinja_template *t = NULL;
    if (root && lmc_jinja_parse(src, tlen, &t) == LMC_OK) {
        (void)lmc_chat_json_keep_numbers(root, rtext, rlen);
        lmc_chat_params p = lmc_chat_default_params();
        if (cJSON_IsArray(root)) {
            p.messages = root;
        } else {
            p.messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
            p.tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
            p.documents = cJSON_GetObjectItemCaseSensitive(root, "documents");
            p.extra = cJSON_GetObjectItemCaseSensitive(root, "extra");
            p.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt"));
            p.continue_final_message = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "continue_final_message"));
        }
        p.bos_token = "<s>";
        p.eos_token = "</s>";
        lmc_jinja_options opt = lmc_jinja_default_options();
        opt.max_output = 1 << 20;
        opt.max_memory = 64 << 20;
        opt.max_steps = 200000;
        opt.now = 1753000000;
        char *out = NULL;
        size_t out_len = 0;
        if (lmc_chat_render_template_ex(t, &p, &opt, &out, &out_len) == LMC_OK) {
            FUZZ_CHECK(out != NULL && out[out_len] == 0 && out_len <= opt.max_output);
            free(out);
        }
        lmc_jinja_free(t);
    }
    cJSON_Delete(root);
    free(src);
    return 0;
}

#ifdef LMC_FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return fuzz_chat(d, n); }
#endif
