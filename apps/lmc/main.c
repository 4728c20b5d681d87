/* main.c — the lmc command-line tool: dispatch to subcommands.
 * Before any command runs it installs the SIGBUS guard (src/io/mapguard.h): a model file
 * truncated while mapped then ends lmc with one line and exit status 74, not signal 7. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "io/mapguard.h"

static const char *usage =
    "lmc — run Hugging Face language models directly from their checkpoints\n"
    "\n"
    "usage: lmc COMMAND [options]   (lmc COMMAND --help for details)\n"
    "\n"
    "commands:\n"
    "  generate   generate a continuation (-m MODEL -p TEXT | --ids 1,2,3)\n"
    "  logits     one prefill pass, write the logits at every position\n"
    "  run        continue a prompt (no MODEL: the demo model that ships with lmc)\n"
    "  chat       chat through the model's chat template (no -m: the demo model)\n"
    "  perplexity perplexity of a model over a text file\n"
    "  tokenize   print the token ids of a text\n"
    "  ls         list local models (HF cache and given folders) with tier, size and fit\n"
    "  models     list the supported model_types and their parity fixtures\n"
    "  bench      prefill and decode speed of a model on this machine\n"
    "  quantize   write an MLX-affine quantized copy of a checkpoint (4 or 8 bits, ...)\n"
    "  convert    write a Hugging Face checkpoint as a GGUF file\n"
    "  check      port verdict for a checkpoint: unknown config keys, profile, audit dry run\n"
    "  verify-gguf check an assistant (MTP drafter) GGUF file, optionally against its target\n"
    "  inspect    show a checkpoint's profile, tensors and weight audit\n"
    "  serve      OpenAI/Anthropic-compatible HTTP server (no -m: the demo model)\n"
    "\n"
    "MODEL is a Hugging Face model directory, a .gguf file, or an ORG/NAME repo id\n"
    "in the local Hugging Face cache (~/.cache/huggingface/hub).\n"
    "\n"
    "examples:\n"
    "  lmc generate -m Qwen/Qwen2.5-0.5B --ids 9707,11 -n 16 --print-ids\n"
    "  lmc inspect ./my-model\n";

int main(int argc, char **argv) {
    /* Best effort: sigaction(SIGBUS) cannot fail with valid arguments; without the guard a
     * truncated model file kills lmc by SIGBUS as before. */
    (void)lmc_mapguard_install();
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "perplexity")) return cmd_perplexity(argc - 1, argv + 1);
    if (!strcmp(cmd, "ls")) return cmd_ls(argc - 1, argv + 1);
    if (!strcmp(cmd, "check")) return cmd_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "verify-gguf")) return cmd_verify_gguf(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "models")) return cmd_models(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    fprintf(stderr, "lmc: unknown command '%s' (see `lmc --help`)\n", cmd);
    return EXIT_USAGE;
}
