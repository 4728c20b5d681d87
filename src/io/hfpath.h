/* hfpath.h — resolve what the user names as MODEL, and list the local HF cache.
 *
 * MODEL is, in this order: an existing directory (HF layout), an existing
 * .gguf or .safetensors file, or a repo id "ORG/NAME" (or a legacy "NAME")
 * with an optional "@REV", found in the local Hugging Face hub cache. Nothing
 * is downloaded. The cache directory is $HF_HUB_CACHE, else
 * $HUGGINGFACE_HUB_CACHE (legacy spelling), else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; inside it a
 * repo lives at models--ORG--NAME/{refs/<branch>, snapshots/<commit>/}.
 *
 *     lmc_model_path mp;
 *     if (lmc_hfpath_resolve(argv[1], &mp) < 0) { fprintf(stderr, "%s\n", lmc_last_error()); return 1; }
 *     ... mp.path is a directory (or a file when mp.is_file) ...
 */
#ifndef LMC_IO_HFPATH_H
#define LMC_IO_HFPATH_H

#include <stddef.h>

#include "core/status.h"

typedef struct lmc_model_path {
    char path[4096];      /* the directory or file to load */
    char repo_id[512];    /* "ORG/NAME" when found in the cache, else "" */
    char revision[128];   /* the snapshot's commit hash when found in the cache, else "" */
    int is_file;          /* 1 when path is a single .gguf or .safetensors file */
} lmc_model_path;

/* Resolve MODEL. A directory named models--ORG--NAME holding snapshots/ (a
 * repo directory of the cache) resolves like ORG/NAME. A repo id that is not
 * in the cache with its exact spelling matches a unique case-insensitive one.
 * Without "@REV", refs/main names the snapshot, else the only
 * (or most recently modified) one. "@REV" may be a branch or tag (refs/REV),
 * a full commit hash, or an unambiguous commit prefix of at least 4 characters.
 * Errors: LMC_ERR_NOT_FOUND — the message lists every place it looked and how
 * to download (`huggingface-cli download ORG/NAME`); LMC_ERR_UNSUPPORTED — an
 * existing file of another kind; LMC_ERR_ARG — empty MODEL or an ambiguous
 * revision; LMC_ERR_RANGE — a path too long for lmc_model_path. */
lmc_status lmc_hfpath_resolve(const char *model, lmc_model_path *out);

/* The hub cache directory the rules above choose (it may not exist), and the
 * name of the variable that chose it ("HF_HUB_CACHE", "HF_HOME", ..., "HOME").
 * which may be NULL. Errors: LMC_ERR_NOT_FOUND when no variable is set,
 * LMC_ERR_RANGE when buf is too small. */
lmc_status lmc_hfpath_cache_dir(char *buf, size_t n, const char **which);

/* Enumerate cached repos (for `lmc ls`): calls fn for each
 * models--*\/snapshots/<rev> directory, repos and revisions in name order.
 * A missing cache directory is not an error (fn is never called). */
lmc_status lmc_hfpath_scan_cache(void (*fn)(const char *repo_id, const char *revision, const char *snapshot_dir,
                                            void *ud),
                                 void *ud);

#endif
