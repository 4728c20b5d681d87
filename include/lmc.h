/* lmc.h — the public C API of lmc: run Hugging Face checkpoints directly.
 *
 *     #include <lmc.h>
 *
 *     static int print_piece(const char *text, size_t len, int32_t id, void *ud) {
 *         fwrite(text, 1, len, stdout);
 *         return 0;                                  // non-zero stops generation
 *     }
 *
 *     lmc_engine *eng;
 *     lmc_engine_params ep = lmc_engine_default_params();      // cpu, one thread per core
 *     if (lmc_engine_open("Qwen/Qwen2.5-0.5B", &ep, &eng) != LMC_OK) {
 *         fprintf(stderr, "%s\n", lmc_last_error());
 *         return 1;
 *     }
 *     lmc_session *s;
 *     lmc_session_open(eng, NULL, &s);                         // KV cache + scratch
 *     lmc_sampler_params sp = lmc_sampler_default_params();   // greedy
 *     lmc_session_generate_text(s, "The capital of France is", 32, &sp, print_piece, NULL);
 *     lmc_session_close(s);
 *     lmc_engine_close(eng);
 *
 * Link with -llmc (static build/liblmc.a or shared build/liblmc.so).
 * Every function returning lmc_status returns LMC_OK (0) on success and a
 * negative code on failure; lmc_last_error() then holds a one-line message
 * (per thread). An engine (weights, tokenizer) is read-only once opened and
 * may be shared by sessions; a session (KV cache, sampler) is used by one
 * thread at a time. Buffers the API returns are freed with lmc_free().
 */
#ifndef LMC_H
#define LMC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lmc_status {
    LMC_OK              = 0,
    LMC_ERR_IO          = -1,  /* open/read/mmap failed */
    LMC_ERR_FORMAT      = -2,  /* malformed file or input */
    LMC_ERR_UNSUPPORTED = -3,  /* valid input lmc does not handle (yet) */
    LMC_ERR_NOMEM       = -4,  /* allocation failed or the plan does not fit */
    LMC_ERR_ARG         = -5,  /* invalid argument from the caller */
    LMC_ERR_AUDIT       = -6,  /* weight audit: missing or unconsumed tensors */
    LMC_ERR_NOT_FOUND   = -7,  /* named thing (file, tensor, model) absent */
    LMC_ERR_RANGE       = -8,  /* index, position or context size out of range */
} lmc_status;

/* This thread's last error message ("" when none). */
const char *lmc_last_error(void);

/* One forward's worth of tokens: prefill, batched decode, or a mix. Each
 * token carries its position within its sequence and its sequence id. */
typedef struct lmc_batch {
    int n_tokens;
    const int32_t *token;        /* [n_tokens] */
    const int32_t *pos;          /* [n_tokens] position within its sequence */
    const int32_t *seq;          /* [n_tokens] sequence id (KV slot) */
    const uint8_t *want_logits;  /* [n_tokens] rows whose logits are kept; NULL = the last token only */
} lmc_batch;

/* The sampler chain, applied in transformers' order: repetition penalty,
 * temperature, top-k, top-p, min-p. temperature ≤ 0 is greedy. */
typedef struct lmc_sampler_params {
    float temperature;        /* ≤ 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* ≥ 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off */
    int repetition_window;    /* tokens of history the penalty looks at (0: all) */
    uint64_t seed;            /* same seed, same logits → same tokens */
} lmc_sampler_params;

lmc_sampler_params lmc_sampler_default_params(void);

typedef struct lmc_engine lmc_engine;
typedef struct lmc_session lmc_session;

typedef struct lmc_engine_params {
    const char *backend;  /* "cpu" (default) or "cuda" */
    int n_threads;        /* cpu threads; 0 = one per core */
    const char *compute;  /* cpu, process-wide: products with bf16 weights on activations rounded to bf16
                           * ("bf16", the default: as PyTorch, llama.cpp and mlx compute a bf16
                           * checkpoint; where the CPU has AVX-512 BF16) or exact in f32 ("f32");
                           * NULL leaves the process's setting */
} lmc_engine_params;

lmc_engine_params lmc_engine_default_params(void);

/* Process-wide, once, before opening models (optional): a model file truncated on disk while
 * mapped then ends the process with one line naming the file on stderr and exit status 74,
 * instead of SIGBUS (the lmc CLI does this; docs/SECURITY.md). LMC_ERR_UNSUPPORTED when another
 * SIGBUS handler (a sanitizer's) stays in charge. */
lmc_status lmc_guard_mapped_files(void);

/* model: a Hugging Face model directory, or ORG/NAME[@REV] in the local HF cache. */
lmc_status lmc_engine_open(const char *model, const lmc_engine_params *p, lmc_engine **out);
void lmc_engine_close(lmc_engine *eng);
int lmc_engine_n_vocab(const lmc_engine *eng);
/* 1 when the model directory has a tokenizer (text in and out). */
int lmc_engine_has_tokenizer(const lmc_engine *eng);

/* Text → ids (add_special: BOS/EOS as the tokenizer's post-processor adds them). */
lmc_status lmc_tokenize(const lmc_engine *eng, const char *text, size_t len, int add_special, int32_t **ids, int *n_ids);
/* ids → text (NUL-terminated). */
lmc_status lmc_detokenize(const lmc_engine *eng, const int32_t *ids, int n_ids, int skip_special, char **text);
void lmc_free(void *p);

typedef struct lmc_session_params {
    int n_ctx;    /* positions per sequence (0: min(max_position_embeddings, 4096)) */
    int n_seq;    /* sequences / KV slots (0: 1) */
    int n_batch;  /* tokens per forward (0: 256) */
} lmc_session_params;

lmc_session_params lmc_session_default_params(void);
lmc_status lmc_session_open(lmc_engine *eng, const lmc_session_params *p, lmc_session **out);
void lmc_session_close(lmc_session *s);

/* Low level: run a batch, then read the logits ([n_vocab] floats) of the i-th wanted row. */
lmc_status lmc_session_decode(lmc_session *s, const lmc_batch *b);
const float *lmc_session_logits(const lmc_session *s, int i);
/* Forget sequence seq from position n on (n = 0: the whole sequence). */
void lmc_session_truncate(lmc_session *s, int seq, int n);

/* Called for each generated token: its id and its text (complete UTF-8 only;
 * may be empty). Return non-zero to stop. */
typedef int (*lmc_piece_fn)(const char *text, size_t len, int32_t id, void *ud);

/* Generate up to n_predict tokens after `prompt` ids on sequence 0, stopping at EOS. */
lmc_status lmc_session_generate(lmc_session *s, const int32_t *prompt, int n_prompt, int n_predict,
                                const lmc_sampler_params *sp, lmc_piece_fn fn, void *ud);
/* The same from text (tokenized with special tokens added). */
lmc_status lmc_session_generate_text(lmc_session *s, const char *prompt, int n_predict, const lmc_sampler_params *sp,
                                     lmc_piece_fn fn, void *ud);

#ifdef __cplusplus
}
#endif

#endif
