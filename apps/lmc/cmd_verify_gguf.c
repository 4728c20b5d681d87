/* cmd_verify_gguf.c — `lmc verify-gguf ASSISTANT.gguf [--target TARGET]`: checks a Gemma 4
 * assistant (MTP drafter) GGUF file (io/gguf_assistant.h): architecture, embedding lengths and
 * their parity with the target's hidden size, projection shapes, the centroid head's shape, an
 * I32 token ordering that permutes the vocabulary, a vocabulary divisible by the centroids.
 * Prints one line per check; exit 0 when all pass, 1 when one fails or the file is unreadable,
 * 2 on a usage error. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "io/gguf_assistant.h"
#include "model/weights.h"

static const char *usage =
    "usage: lmc verify-gguf ASSISTANT.gguf [--target TARGET]\n"
    "  Check a Gemma 4 assistant GGUF (written by lmc convert from a gemma4_assistant checkpoint).\n"
    "  --target TARGET   the target model (directory, .gguf or ORG/NAME): its hidden size must equal\n"
    "                    the assistant's backbone embedding length\n";

int cmd_verify_gguf(int argc, char **argv) {
    const char *path = NULL, *target = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--target")) {
            if (!(target = cli_value(argc, argv, &i))) return EXIT_USAGE;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("verify-gguf", "unknown option %s", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            return cli_usage_error("verify-gguf", "one assistant file expected (got %s too)", argv[i]);
        }
    }
    if (!path) return cli_usage_error("verify-gguf", "missing ASSISTANT.gguf");
    int64_t target_hidden = 0;
    if (target) {
        lmc_config cfg;
        if (lmc_checkpoint_config(target, &cfg) < 0) return cli_error("verify-gguf: target");
        target_hidden = cfg.hidden_size;
        lmc_config_free(&cfg);
    }
    char report[8192];
    int n_failed = 0;
    if (lmc_gguf_assistant_verify(path, target_hidden, report, sizeof report, &n_failed) < 0)
        return cli_error("verify-gguf");
    fputs(report, stdout);
    printf("%s: %s\n", path, n_failed ? "FAILED" : "ok");
    return n_failed ? EXIT_RUNTIME : 0;
}
