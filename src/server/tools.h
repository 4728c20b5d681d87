/* tools.h — tool calls in model output: which format a chat template's family
 * uses, and parsing a finished reply into OpenAI tool_calls plus the remaining
 * content. Pure functions; results are cJSON trees / strings the caller owns.
 */
#ifndef LMC_SERVER_TOOLS_H
#define LMC_SERVER_TOOLS_H

#include <cjson/cJSON.h>

typedef enum lmc_tool_fmt {
    LMC_TOOL_FMT_NONE = 0,   /* the template defines no tool-call format */
    LMC_TOOL_FMT_HERMES,     /* <tool_call>{"name": …, "arguments": {…}}</tool_call> (Qwen 2.5/3, Hermes) */
    LMC_TOOL_FMT_MISTRAL,    /* [TOOL_CALLS] [{"name": …, "arguments": {…}}, …] */
    LMC_TOOL_FMT_LLAMA3,     /* [<|python_tag|>]{"name": …, "parameters": {…}} (Llama 3.1+) */
    LMC_TOOL_FMT_HARMONY,    /* gpt-oss: a commentary message to functions.NAME, as the reasoning splitter leaves it in
                              * the content: "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}"
                              * or "to=functions.NAME<|channel|>commentary json<|message|>{…}" */
} lmc_tool_fmt;

/* The format a chat template's source asks the model to write. */
lmc_tool_fmt lmc_tool_fmt_detect(const char *template_source);
const char *lmc_tool_fmt_name(lmc_tool_fmt f);

/* Parse reply text. Returns the number of calls found (0: *calls NULL, *content a copy of
 * text). Each call is {"name": string, "arguments": JSON text}; *content is the text outside
 * the calls, trimmed (NULL when empty). -1 on allocation failure. */
int lmc_tools_parse(lmc_tool_fmt f, const char *text, cJSON **calls, char **content);

/* Streaming: how many bytes of text can go out as content now. Stops where the format's
 * tool-call marker begins (*calls_start = 1) and holds back a tail that could still become
 * the marker. */
size_t lmc_tools_safe_prefix(lmc_tool_fmt f, const char *text, size_t len, int *calls_start);

#endif
