/* cmd_convert.c — `lmc convert MODEL OUT.gguf`: a Hugging Face checkpoint
 * written as GGUF, laid out as llama.cpp's converter lays it out. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "io/gguf.h"
#include "io/gguf_assistant.h"
#include "io/gguf_convert.h"
#include "io/hfpath.h"
#include "model/weights.h"

static const char *convert_help =
    "usage: lmc convert MODEL OUT.gguf [--type TYPE] [--no-tokenizer] [--split-max-tensors N]\n"
    "\n"
    "Write MODEL (a Hugging Face directory or ORG/NAME in the cache) as a GGUF file\n"
    "with llama.cpp's tensor names and metadata keys. Tensors keep their storage type\n"
    "(f32, f16, bf16) unless --type q8_0|q4_0|q4_k|q6_k|mxfp4 quantizes the weight matrices\n"
    "whose rows fit its blocks (norms and odd-sized rows keep their type), or --type\n"
    "f32|f16|bf16 stores the weight matrices in that float type (rounded to nearest even).\n"
    "tokenizer.json and the chat template are embedded unless\n"
    "--no-tokenizer. Architectures: llama, mistral, qwen2, qwen3, gemma, gemma2,\n"
    "gemma3_text, phi3, and the mixture-of-experts qwen2_moe, qwen3_moe, mixtral\n"
    "(experts stacked as llama.cpp's *_exps tensors). lmc reads the file back with -m OUT.gguf.\n"
    "--split-max-tensors N writes OUT-00001-of-0000K.gguf ... of at most N tensors each\n"
    "(llama.cpp's gguf-split layout); -m OUT-00001-of-0000K.gguf reads them all.\n"
    "\n"
    "example:\n"
    "  lmc convert Qwen/Qwen2.5-0.5B qwen2.5-0.5b.gguf\n";

int cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int n_files = 0;
    lmc_gguf_convert_params p = {.progress = cli_progress, .progress_ud = "convert", .n_split_files = &n_files};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { fputs(convert_help, stdout); return 0; }
        if (!strcmp(argv[i], "--no-tokenizer")) p.skip_tokenizer = 1;
        else if (!strcmp(argv[i], "--split-max-tensors") && i + 1 < argc) {
            char *end;
            long long v = strtoll(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1000000)
                return cli_usage_error("convert", "--split-max-tensors must be an integer in [1, 1000000], got '%s'", argv[i]);
            p.split_max_tensors = v;
        }
        else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            static const struct { const char *name; lmc_dtype t; lmc_convert_float f; } types[] = {
                {"q8_0", LMC_DTYPE_Q8_0, 0}, {"q4_0", LMC_DTYPE_Q4_0, 0}, {"q4_k", LMC_DTYPE_Q4_K, 0}, {"q6_k", LMC_DTYPE_Q6_K, 0},
                {"mxfp4", LMC_DTYPE_MXFP4, 0}, {"f32", 0, LMC_CONVERT_F32}, {"f16", 0, LMC_CONVERT_F16},
                {"bf16", 0, LMC_CONVERT_BF16}, {"keep", 0, 0}};
            const char *v = argv[++i];
            int found = 0;
            for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
                if (!strcmp(v, types[k].name)) { p.quant_type = (int)types[k].t; p.float_type = types[k].f; found = 1; }
            if (!found)
                return cli_usage_error("convert", "--type must be f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, mxfp4 or keep, not '%s'", v);
        }
        else if (argv[i][0] == '-') return cli_usage_error("convert", "unknown option '%s'", argv[i]);
        else if (!in) in = argv[i];
        else if (!out) out = argv[i];
        else return cli_usage_error("convert", "unexpected argument '%s'", argv[i]);
    }
    if (!in || !out) return cli_usage_error("convert", "MODEL and OUT.gguf are required");
    lmc_model_path mp;
    if (lmc_hfpath_resolve(in, &mp) < 0) return cli_error(NULL);
    lmc_config cfg;
    if (lmc_checkpoint_config(mp.path, &cfg) < 0) return cli_error(NULL);
    const int assistant = !strcmp(cfg.outer_model_type, "gemma4_assistant");
    lmc_config_free(&cfg);
    if (assistant) { /* an MTP drafter: the seed's assistant layout (lmc verify-gguf checks it) */
        if (p.quant_type || p.float_type) return cli_usage_error("convert", "--type is not supported for gemma4_assistant files");
        if (p.split_max_tensors) return cli_usage_error("convert", "--split-max-tensors is not supported for gemma4_assistant files");
        if (lmc_gguf_assistant_convert(mp.path, out) < 0) return cli_error("convert");
    } else if (lmc_gguf_convert_hf(mp.path, out, &p) < 0) {
        return cli_error("convert");
    }
    if (p.split_max_tensors) { /* name the first file: that is what -m takes */
        const size_t n = strlen(out);
        char prefix[4096], first[4200];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(n - 5), out); /* ends in .gguf: the convert checked */
        if (lmc_gguf_split_path(prefix, 1, n_files, first, sizeof first) < 0) return cli_error("convert");
        fprintf(stderr, "lmc: wrote %d split files, the first %s\n", n_files, first);
    } else {
        fprintf(stderr, "lmc: wrote %s\n", out);
    }
    return 0;
}
