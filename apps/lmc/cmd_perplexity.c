/* cmd_perplexity.c — `lmc perplexity -m MODEL FILE [--ctx N]`.
 *
 * The text is encoded without special tokens and cut into consecutive chunks
 * of N-1 tokens; each chunk runs as [BOS] + chunk and every chunk token is
 * scored by the logits before it. Perplexity = exp(Σ NLL / number of tokens).
 * (Without a BOS id the first token of each chunk is context, not scored.)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tok/tokenizer.h"

static const char *ppl_help =
    "usage: lmc perplexity -m MODEL FILE [--ctx N] [--batch N] [--threads N]\n"
    "\n"
    "Perplexity of MODEL over the text in FILE, in windows of N tokens (default 512):\n"
    "each window is BOS + N-1 tokens of the text, every text token scored once.\n"
    "\n"
    "example:\n"
    "  lmc perplexity -m models/demo .dev/demo/heldout.txt --ctx 1024\n";

/* -log softmax(logits)[target] in double */
static double nll(const float *logits, int V, int32_t target) {
    float mx = logits[0];
    for (int i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)logits[i] - mx);
    return log(z) + mx - logits[target];
}

int cmd_perplexity(int argc, char **argv) {
    cli_model_opts mo = {0};
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        int r = cli_parse_model_opt(&mo, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { fputs(ppl_help, stdout); return 0; }
        if (argv[i][0] == '-') return cli_usage_error("perplexity", "unknown option '%s'", argv[i]);
        if (file) return cli_usage_error("perplexity", "unexpected argument '%s'", argv[i]);
        file = argv[i];
    }
    if (!file) return cli_usage_error("perplexity", "FILE is required");
    if (!mo.model) mo.model = cli_demo_model();
    const int n_ctx = mo.n_ctx ? mo.n_ctx : 512;
    if (n_ctx < 2) return cli_usage_error("perplexity", "--ctx must be at least 2");
    size_t len = 0;
    char *text = cli_read_file(file, &len);
    if (!text) { fprintf(stderr, "lmc: cannot read %s\n", file); return EXIT_RUNTIME; }
    cli_model cm;
    int rc = cli_load_model(&mo, &cm);
    if (rc) { free(text); return rc; }
    lmc_tokenizer *tok = NULL;
    lmc_context *ctx = NULL;
    int32_t *ids = NULL, *buf = NULL, *pos = NULL, *seq = NULL;
    uint8_t *want = NULL;
    int n_ids = 0;
    if ((rc = cli_load_tokenizer(cm.dir, &tok, 1)) != 0) goto done;
    if (lmc_tokenizer_encode(tok, text, len, 0, &ids, &n_ids) < 0) { rc = cli_error("tokenizing"); goto done; }
    int32_t bos = lmc_tokenizer_bos_id(tok);
    if (bos < 0) bos = cm.model->cfg.bos_token_id;
    const int V = cm.model->cfg.vocab_size, chunk = bos >= 0 ? n_ctx - 1 : n_ctx;
    if (n_ids < (bos >= 0 ? 1 : 2)) { fprintf(stderr, "lmc: %s has too few tokens to score\n", file); rc = EXIT_RUNTIME; goto done; }
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n_ctx;
    if (mo.n_batch) cp.n_batch = mo.n_batch;
    if (lmc_context_init(&ctx, cm.model, &cp) < 0) { rc = cli_error("context"); goto done; }
    buf = malloc((size_t)n_ctx * sizeof *buf);
    pos = malloc((size_t)n_ctx * sizeof *pos);
    seq = calloc((size_t)n_ctx, sizeof *seq);
    want = malloc((size_t)n_ctx);
    if (!buf || !pos || !seq || !want) { fprintf(stderr, "lmc: out of memory\n"); rc = EXIT_RUNTIME; goto done; }
    double total = 0;
    long scored = 0;
    const int tty = isatty(STDERR_FILENO);
    const int step = cp.n_batch;
    for (int c0 = 0; c0 < n_ids; c0 += chunk) {
        int n_chunk = n_ids - c0 < chunk ? n_ids - c0 : chunk, n = 0;
        if (bos >= 0) buf[n++] = bos;
        memcpy(buf + n, ids + c0, (size_t)n_chunk * sizeof *buf);
        n += n_chunk;
        lmc_kv_clear(&ctx->kv, 0);
        /* positions [b0, b0 + nb) at a time; row j's logits score buf[j + 1] */
        for (int b0 = 0; b0 < n - 1; b0 += step) {
            int nb = n - 1 - b0 < step ? n - 1 - b0 : step;
            for (int j = 0; j < nb; j++) { pos[j] = b0 + j; want[j] = 1; }
            lmc_batch b = {.n_tokens = nb, .token = buf + b0, .pos = pos, .seq = seq, .want_logits = want};
            if (lmc_context_decode(ctx, &b) < 0) { rc = cli_error(NULL); goto done; }
            for (int j = 0; j < nb; j++) total += nll(lmc_context_logits(ctx, j), V, buf[b0 + j + 1]);
            scored += nb;
        }
        if (tty) fprintf(stderr, "\rperplexity: %d/%d tokens, running ppl %.4f", c0 + n_chunk, n_ids, exp(total / scored));
    }
    if (tty) fputc('\n', stderr);
    printf("perplexity %.4f over %ld tokens (ctx %d, %d windows)\n", exp(total / scored), scored, n_ctx,
           (n_ids + chunk - 1) / chunk);
done:
    free(text);
    free(ids);
    free(buf);
    free(pos);
    free(seq);
    free(want);
    lmc_context_free(ctx);
    lmc_tokenizer_free(tok);
    cli_free_model(&cm);
    return rc;
}
