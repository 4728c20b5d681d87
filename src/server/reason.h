/* reason.h — splits a thinking model's output into reasoning and content, incrementally.
 *
 * Two formats: "think" (Qwen3, DeepSeek-R1: "<think> … </think>" before the answer, or only
 * "</think>" when the chat template already opened "<think>" in the prompt) and "harmony"
 * (gpt-oss: "<|channel|>analysis<|message|> … <|end|><|start|>assistant<|channel|>final<|message|> …";
 * analysis is reasoning, final and commentary are content). Bytes are fed as the detokenizer
 * produces them; a marker may arrive split over any number of pieces, so only the bytes that
 * could still begin a marker (and, in "think" reasoning, a trailing whitespace run) are held
 * back. Decided bytes go to a callback in output order. The splitter owns its hold buffer.
 */
#ifndef LMC_SERVER_REASON_H
#define LMC_SERVER_REASON_H

#include <stddef.h>

typedef enum lmc_reason_fmt { LMC_REASON_OFF = 0, LMC_REASON_THINK, LMC_REASON_HARMONY } lmc_reason_fmt;

/* reasoning: 1 for reasoning bytes, 0 for content. */
typedef void (*lmc_reason_emit)(void *ctx, int reasoning, const char *p, size_t n);

typedef struct lmc_reason {
    lmc_reason_fmt fmt;
    int state;            /* per format (reason.c) */
    int dest;             /* harmony message body: 1 reasoning, 0 content */
    char *buf;            /* undecided bytes: a possible marker start, whitespace, a harmony header */
    size_t len, cap;
    size_t pre;           /* leading bytes of buf that came from the prompt (an open harmony header) */
    int bare_calls;       /* harmony: a message to a recipient goes to the content without its header (set after
                           * init for a forced tool call, whose content is the arguments alone) */
    int oom;
} lmc_reason;

/* Start state from the end of the rendered prompt (NULL: the output starts fresh): a prompt that
 * ends inside "<think>" (ignoring whitespace) starts in reasoning; a harmony prompt ending with
 * "<|channel|>NAME<|message|>" starts inside that channel's message. */
void lmc_reason_init(lmc_reason *rs, lmc_reason_fmt fmt, const char *prompt, size_t n_prompt);
void lmc_reason_free(lmc_reason *rs);
/* Feed n bytes; emits what is decided. final: the output ended, emit everything still held
 * (unterminated reasoning stays reasoning; an unfinished marker is text). Returns 0, -1 when out of memory. */
int lmc_reason_feed(lmc_reason *rs, const char *p, size_t n, int final, lmc_reason_emit emit, void *ctx);
/* 1 when bytes that come next are content (constrained decoding applies to content only):
 * before a "think" output has shown whether it opens with "<think>", after "</think>", in a
 * harmony final/commentary message; 0 in reasoning and in harmony headers. */
int lmc_reason_in_content(const lmc_reason *rs);
/* "off", "think", "harmony". */
const char *lmc_reason_fmt_name(lmc_reason_fmt f);
/* The format a model's chat template (and tokenizer's special tokens) implies: harmony when the
 * template writes "<|channel|>" and has_channel_token, else think. */
lmc_reason_fmt lmc_reason_detect(const char *template_src, int has_channel_token);

#endif
