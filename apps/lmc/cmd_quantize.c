/* cmd_quantize.c — `lmc quantize IN OUT --bits B [--group-size G]`: an MLX-affine
 * quantized copy of a checkpoint, in the layout mlx-lm writes and reads. */
#include <string.h>

#include "cli.h"
#include "io/hfpath.h"
#include "model/quantize.h"

static const char *quantize_help =
    "usage: lmc quantize MODEL OUT_DIR [--bits 4|8|2|3|5|6] [--group-size 64|32|128] [--mode affine|mxfp4]\n"
    "\n"
    "Write OUT_DIR: MODEL with its Linear and Embedding weights quantized as mlx does\n"
    "(affine, per-group scales and biases in the weights' dtype; default 4 bits, groups\n"
    "of 64). Norms and other tensors are copied, config.json gains the quantization block,\n"
    "tokenizer files are copied. lmc and mlx-lm load the result. --mode mxfp4 writes\n"
    "mlx's mxfp4 instead (E2M1 codes, one E8M0 exponent per 32 elements, no biases).\n"
    "\n"
    "example:\n"
    "  lmc quantize models/demo /tmp/demo-4bit --bits 4\n";

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    long bits = 4, group = 64;
    int mxfp4 = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(quantize_help, stdout); return 0; }
        if (!strcmp(a, "--bits")) { if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--bits", 2, 8, &bits)) return EXIT_USAGE; }
        else if (!strcmp(a, "--group-size")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(v, "--group-size", 32, 128, &group)) return EXIT_USAGE;
        } else if (!strcmp(a, "--mode")) {
            if (!(v = cli_value(argc, argv, &i))) return EXIT_USAGE;
            if (!strcmp(v, "mxfp4")) mxfp4 = 1;
            else if (strcmp(v, "affine")) return cli_usage_error("quantize", "--mode must be affine or mxfp4, not '%s'", v);
        } else if (a[0] == '-') return cli_usage_error("quantize", "unknown option '%s'", a);
        else if (!in) in = a;
        else if (!out) out = a;
        else return cli_usage_error("quantize", "unexpected argument '%s'", a);
    }
    if (!in || !out) return cli_usage_error("quantize", "MODEL and OUT_DIR are required");
    lmc_model_path mp;
    if (lmc_hfpath_resolve(in, &mp) < 0) return cli_error(NULL);
    lmc_quantize_stats st;
    lmc_status qs = mxfp4 ? lmc_quantize_mlx_mxfp4(mp.path, out, &st, cli_progress, "quantize")
                          : lmc_quantize_mlx(mp.path, out, (int)bits, (int)group, &st, cli_progress, "quantize");
    if (qs < 0) {
        fputc('\n', stderr);
        return cli_error("quantize");
    }
    if (mxfp4) bits = 4, group = 32;
    fprintf(stderr, "lmc: wrote %s: %d matrices at %ld bits (groups of %ld%s), %d tensors copied, %.1f MB -> %.1f MB\n",
            out, st.n_quantized, bits, group, mxfp4 ? ", mxfp4" : "", st.n_copied, st.bytes_in / 1e6, st.bytes_out / 1e6);
    return 0;
}
