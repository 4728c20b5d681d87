/* hfpath.c — MODEL resolution (local path or HF cache repo id) and cache listing.
 *
 * Reads the environment and the file system only; never downloads, never
 * writes. Results go into caller-owned fixed buffers; temporary directory
 * listings are freed before returning.
 */
#include "io/hfpath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_PATH_MAX 4096

/* ---- helpers ---------------------------------------------------------------------------------- */

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* snprintf into buf; LMC_ERR_RANGE if it does not fit. */
static lmc_status fmt_path(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static lmc_status fmt_path(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n) return lmc_fail(LMC_ERR_RANGE, "path too long (%d bytes)", k);
    return LMC_OK;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted names of the subdirectories of dir (no "." or ".."); missing dir → 0 entries. */
typedef struct name_list { char **v; int n; } name_list;

static void name_list_free(name_list *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static lmc_status list_subdirs(const char *dir, name_list *out) {
    out->v = NULL;
    out->n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT || errno == ENOTDIR) return LMC_OK;
        return lmc_fail(LMC_ERR_IO, "cannot list %s: %s", dir, strerror(errno));
    }
    int cap = 0;
    struct dirent *e;
    char full[HF_PATH_MAX];
    lmc_status st = LMC_OK;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (fmt_path(full, sizeof full, "%s/%s", dir, e->d_name) < 0 || !is_dir(full)) continue;
        if (out->n == cap) {
            int nc = cap ? cap * 2 : 8;
            char **nv = realloc(out->v, (size_t)nc * sizeof *nv);
            if (!nv) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory listing %s", dir); break; }
            out->v = nv;
            cap = nc;
        }
        size_t len = strlen(e->d_name) + 1;
        char *s = malloc(len);
        if (!s) { st = lmc_fail(LMC_ERR_NOMEM, "out of memory listing %s", dir); break; }
        memcpy(s, e->d_name, len);
        out->v[out->n++] = s;
    }
    closedir(d);
    if (st < 0) { name_list_free(out); return st; }
    if (out->n > 1) qsort(out->v, (size_t)out->n, sizeof *out->v, cmp_str_ptr);
    return LMC_OK;
}

/* A value from the environment, NULL when unset or empty. */
static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

/* dir with a leading "~" or "~/" expanded from $HOME, then "/suffix" if suffix. */
static lmc_status expand(char *buf, size_t n, const char *dir, const char *suffix) {
    const char *home = env("HOME");
    if (dir[0] == '~' && (dir[1] == '/' || dir[1] == 0) && home) {
        return suffix ? fmt_path(buf, n, "%s%s/%s", home, dir + 1, suffix) : fmt_path(buf, n, "%s%s", home, dir + 1);
    }
    return suffix ? fmt_path(buf, n, "%s/%s", dir, suffix) : fmt_path(buf, n, "%s", dir);
}

lmc_status lmc_hfpath_cache_dir(char *buf, size_t n, const char **which) {
    static const struct { const char *var, *suffix; } rules[] = {
        {"HF_HUB_CACHE", NULL},
        {"HUGGINGFACE_HUB_CACHE", NULL},
        {"HF_HOME", "hub"},
        {"XDG_CACHE_HOME", "huggingface/hub"},
        {"HOME", ".cache/huggingface/hub"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        const char *v = env(rules[i].var);
        if (!v) continue;
        if (which) *which = rules[i].var;
        return expand(buf, n, v, rules[i].suffix);
    }
    return lmc_fail(LMC_ERR_NOT_FOUND, "no Hugging Face cache directory: none of HF_HUB_CACHE, HF_HOME, "
                    "XDG_CACHE_HOME or HOME is set");
}

/* A repo id as the hub allows it: NAME or ORG/NAME, each part of [A-Za-z0-9._-],
 * not starting or ending with '.' or '-', without "--" or "..", at most 96 chars. */
static int valid_repo_part(const char *s, size_t n) {
    if (n == 0 || n > 96) return 0;
    if (s[0] == '.' || s[0] == '-' || s[n - 1] == '.' || s[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                 c == '_' || c == '-';
        if (!ok) return 0;
        if (i + 1 < n && (c == '-' || c == '.') && s[i + 1] == c) return 0;
    }
    return 1;
}

static int valid_repo_id(const char *id) {
    const char *slash = strchr(id, '/');
    if (!slash) return valid_repo_part(id, strlen(id));
    if (strchr(slash + 1, '/')) return 0;
    return valid_repo_part(id, (size_t)(slash - id)) && valid_repo_part(slash + 1, strlen(slash + 1));
}

/* A revision names a ref file or a snapshot: printable, no spaces, no "..", not absolute. */
static int valid_revision(const char *r) {
    if (!r[0] || r[0] == '/' || strstr(r, "..") || strlen(r) >= 128) return 0;
    for (const char *c = r; *c; c++) {
        if ((unsigned char)*c <= ' ' || *c == '\\' || (unsigned char)*c == 0x7f) return 0;
    }
    return 1;
}

/* Read the commit hash stored in a refs/<name> file into buf (trimmed). 1 ok, 0 absent, <0 error. */
static int read_ref(const char *path, char *buf, size_t n) {
    if (!is_file(path)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return lmc_fail(LMC_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    size_t k = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[k] = 0;
    while (k > 0 && (buf[k - 1] == '\n' || buf[k - 1] == '\r' || buf[k - 1] == ' ' || buf[k - 1] == '\t')) buf[--k] = 0;
    if (k == 0 || !valid_revision(buf) || strchr(buf, '/')) {
        return lmc_fail(LMC_ERR_FORMAT, "%s does not hold a commit hash", path);
    }
    return 1;
}

/* Snapshot names of a repo, comma-separated, for messages. */
static void describe_snapshots(const name_list *snaps, char *buf, size_t n) {
    buf[0] = 0;
    size_t k = 0;
    for (int i = 0; i < snaps->n && k + 1 < n; i++) {
        int w = snprintf(buf + k, n - k, "%s%s", i ? ", " : "", snaps->v[i]);
        if (w < 0) break;
        k += (size_t)w;
    }
    if (snaps->n == 0) snprintf(buf, n, "none");
}

/* ---- resolve ---------------------------------------------------------------------------------- */

static lmc_status pick_snapshot(const char *repo_dir, const char *repo_id, const char *rev, lmc_model_path *out);

/* "models--ORG--NAME" (the last path component of dir) as "ORG/NAME" into id; 0 if dir is not so named. */
static int repo_id_from_cache_name(const char *dir, char *id, size_t n) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/') start--;
    if (len - start <= 8 || strncmp(dir + start, "models--", 8) != 0 || len - start - 8 >= n) return 0;
    memcpy(id, dir + start + 8, len - start - 8);
    id[len - start - 8] = 0;
    char *sep = strstr(id, "--");
    if (sep) {
        sep[0] = '/';
        memmove(sep + 1, sep + 2, strlen(sep + 2) + 1);
    }
    return 1;
}

static lmc_status resolve_local(const char *model, const struct stat *sb, lmc_model_path *out) {
    if (S_ISDIR(sb->st_mode)) {
        /* a repo directory of the cache itself (models--ORG--NAME/ with snapshots/): take its snapshot */
        char repo[HF_PATH_MAX], snaps[HF_PATH_MAX], id[512];
        if (repo_id_from_cache_name(model, id, sizeof id) && fmt_path(repo, sizeof repo, "%s", model) == LMC_OK) {
            size_t n = strlen(repo);
            while (n > 1 && repo[n - 1] == '/') repo[--n] = 0;
            if (fmt_path(snaps, sizeof snaps, "%s/snapshots", repo) == LMC_OK && is_dir(snaps)) {
                return pick_snapshot(repo, id, NULL, out);
            }
        }
        LMC_TRY(fmt_path(out->path, sizeof out->path, "%s", model));
        return LMC_OK;
    }
    if (S_ISREG(sb->st_mode)) {
        if (!has_suffix(model, ".gguf") && !has_suffix(model, ".safetensors")) {
            return lmc_fail(LMC_ERR_UNSUPPORTED, "%s is a file but neither .gguf nor .safetensors; MODEL is an HF "
                            "model directory, a .gguf or .safetensors file, or ORG/NAME from the HF cache", model);
        }
        LMC_TRY(fmt_path(out->path, sizeof out->path, "%s", model));
        out->is_file = 1;
        return LMC_OK;
    }
    return lmc_fail(LMC_ERR_UNSUPPORTED, "%s is neither a directory nor a regular file", model);
}

/* Pick the snapshot directory of repo_dir for rev (NULL = default) into out. */
static lmc_status pick_snapshot(const char *repo_dir, const char *repo_id, const char *rev, lmc_model_path *out) {
    char snap_root[HF_PATH_MAX], ref_path[HF_PATH_MAX], hash[256], listing[600];
    LMC_TRY(fmt_path(snap_root, sizeof snap_root, "%s/snapshots", repo_dir));
    name_list snaps;
    LMC_TRY(list_subdirs(snap_root, &snaps));
    lmc_status st = LMC_OK;
    const char *chosen = NULL;
    char chosen_buf[256];
    const char *ref = rev ? rev : "main";

    int r = 0;
    if ((st = fmt_path(ref_path, sizeof ref_path, "%s/refs/%s", repo_dir, ref)) < 0) goto done;
    if ((r = read_ref(ref_path, hash, sizeof hash)) < 0) { st = (lmc_status)r; goto done; }
    if (r == 1) {
        /* refs/<ref> names a commit: its snapshot must be there */
        for (int i = 0; i < snaps.n; i++) if (strcmp(snaps.v[i], hash) == 0) chosen = snaps.v[i];
        if (!chosen) {
            describe_snapshots(&snaps, listing, sizeof listing);
            st = lmc_fail(LMC_ERR_NOT_FOUND, "model \"%s\": %s names commit %s, but %s/%s is missing (snapshots "
                          "present: %s); download it with: huggingface-cli download %s%s%s", repo_id, ref_path, hash,
                          snap_root, hash, listing, repo_id, rev ? " --revision " : "", rev ? rev : "");
            goto done;
        }
    } else if (rev) {
        /* a commit hash or a unique prefix of one */
        int n_match = 0;
        for (int i = 0; i < snaps.n; i++) {
            if (strcmp(snaps.v[i], rev) == 0) { chosen = snaps.v[i]; n_match = 1; break; }
            if (strlen(rev) >= 4 && strncmp(snaps.v[i], rev, strlen(rev)) == 0) { chosen = snaps.v[i]; n_match++; }
        }
        if (n_match > 1) {
            st = lmc_fail(LMC_ERR_ARG, "model \"%s\": revision \"%s\" matches %d snapshots in %s; give more of the "
                          "commit hash", repo_id, rev, n_match, snap_root);
            goto done;
        }
        if (!chosen) {
            describe_snapshots(&snaps, listing, sizeof listing);
            st = lmc_fail(LMC_ERR_NOT_FOUND, "model \"%s\": revision \"%s\" not in the HF cache; looked at %s (no "
                          "such ref) and %s (snapshots present: %s); download it with: huggingface-cli download %s "
                          "--revision %s", repo_id, rev, ref_path, snap_root, listing, repo_id, rev);
            goto done;
        }
    } else {
        /* no refs/main: the only snapshot, or the most recently modified */
        if (snaps.n == 0) {
            st = lmc_fail(LMC_ERR_NOT_FOUND, "model \"%s\": the HF cache has %s but no snapshot in %s (looked for "
                          "%s too); download it with: huggingface-cli download %s", repo_id, repo_dir, snap_root,
                          ref_path, repo_id);
            goto done;
        }
        double best = -1;
        for (int i = 0; i < snaps.n; i++) {
            char p[HF_PATH_MAX];
            struct stat sb;
            if (fmt_path(p, sizeof p, "%s/%s", snap_root, snaps.v[i]) < 0 || stat(p, &sb) != 0) continue;
            double t = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
            if (t >= best) { best = t; chosen = snaps.v[i]; }
        }
        if (!chosen) chosen = snaps.v[snaps.n - 1];
    }
    snprintf(chosen_buf, sizeof chosen_buf, "%s", chosen);
    if ((st = fmt_path(out->path, sizeof out->path, "%s/%s", snap_root, chosen_buf)) < 0) goto done;
    if ((st = fmt_path(out->repo_id, sizeof out->repo_id, "%s", repo_id)) < 0) goto done;
    if ((st = fmt_path(out->revision, sizeof out->revision, "%s", chosen_buf)) < 0) goto done;
done:
    name_list_free(&snaps);
    return st;
}

lmc_status lmc_hfpath_resolve(const char *model, lmc_model_path *out) {
    if (!out) return lmc_fail(LMC_ERR_ARG, "lmc_hfpath_resolve: NULL output");
    memset(out, 0, sizeof *out);
    if (!model || !model[0]) return lmc_fail(LMC_ERR_ARG, "no MODEL given");
    struct stat sb;
    if (stat(model, &sb) == 0) return resolve_local(model, &sb, out);
    int stat_errno = errno;
    if (stat_errno != ENOENT && stat_errno != ENOTDIR) {
        return lmc_fail(LMC_ERR_IO, "cannot access %s: %s", model, strerror(stat_errno));
    }

    /* ORG/NAME[@REV] */
    char id[512], rev_buf[256];
    const char *rev = NULL;
    const char *at = strchr(model, '@');
    size_t id_len = at ? (size_t)(at - model) : strlen(model);
    if (id_len >= sizeof id || (at && strlen(at + 1) >= sizeof rev_buf)) {
        return lmc_fail(LMC_ERR_NOT_FOUND, "MODEL %s: no such file or directory", model);
    }
    memcpy(id, model, id_len);
    id[id_len] = 0;
    if (at) {
        snprintf(rev_buf, sizeof rev_buf, "%s", at + 1);
        rev = rev_buf;
    }
    if (!valid_repo_id(id) || (rev && !valid_revision(rev))) {
        return lmc_fail(LMC_ERR_NOT_FOUND, "MODEL %s: no such file or directory (and not an ORG/NAME[@REV] repo id)",
                        model);
    }

    char cache[HF_PATH_MAX], repo_dir[HF_PATH_MAX];
    const char *which = NULL;
    lmc_status st = lmc_hfpath_cache_dir(cache, sizeof cache, &which);
    if (st < 0) {
        return lmc_fail(LMC_ERR_NOT_FOUND, "model \"%s\" not found: %s is not a file or directory, and no HF cache "
                        "is configured (set HF_HUB_CACHE or HF_HOME); download it with: huggingface-cli download %s",
                        model, model, id);
    }
    char dir_name[600];
    snprintf(dir_name, sizeof dir_name, "models--%s", id);
    char *slash = strchr(dir_name, '/');
    if (slash) {
        /* "/" becomes "--" */
        memmove(slash + 2, slash + 1, strlen(slash + 1) + 1);
        slash[0] = '-';
        slash[1] = '-';
    }
    LMC_TRY(fmt_path(repo_dir, sizeof repo_dir, "%s/%s", cache, dir_name));
    if (!is_dir(repo_dir)) {
        /* the hub matches repo ids case-insensitively; the cache keeps the spelling of the download */
        name_list all;
        LMC_TRY(list_subdirs(cache, &all));
        int n_match = 0;
        const char *match = NULL;
        for (int i = 0; i < all.n; i++) {
            if (strcasecmp(all.v[i], dir_name) == 0) { match = all.v[i]; n_match++; }
        }
        if (n_match == 1) {
            char id2[512];
            st = fmt_path(repo_dir, sizeof repo_dir, "%s/%s", cache, match);
            if (st == LMC_OK && repo_id_from_cache_name(repo_dir, id2, sizeof id2)) {
                name_list_free(&all);
                return pick_snapshot(repo_dir, id2, rev, out);
            }
        }
        name_list_free(&all);
        LMC_TRY(fmt_path(repo_dir, sizeof repo_dir, "%s/%s", cache, dir_name));
    }
    if (!is_dir(repo_dir)) {
        return lmc_fail(LMC_ERR_NOT_FOUND, "model \"%s\" not found; looked at: %s (no such file or directory), "
                        "%s (absent from the HF cache %s, chosen by $%s%s); download it with: huggingface-cli "
                        "download %s%s%s", model, model, repo_dir, cache, which,
                        is_dir(cache) ? "" : ", which does not exist", id, rev ? " --revision " : "", rev ? rev : "");
    }
    return pick_snapshot(repo_dir, id, rev, out);
}

/* ---- cache listing ---------------------------------------------------------------------------- */

lmc_status lmc_hfpath_scan_cache(void (*fn)(const char *repo_id, const char *revision, const char *snapshot_dir,
                                            void *ud),
                                 void *ud) {
    if (!fn) return lmc_fail(LMC_ERR_ARG, "lmc_hfpath_scan_cache: NULL callback");
    char cache[HF_PATH_MAX];
    LMC_TRY(lmc_hfpath_cache_dir(cache, sizeof cache, NULL));
    name_list repos;
    LMC_TRY(list_subdirs(cache, &repos));
    lmc_status st = LMC_OK;
    for (int i = 0; i < repos.n && st == LMC_OK; i++) {
        const char *name = repos.v[i];
        char repo_id[512];
        if (!repo_id_from_cache_name(name, repo_id, sizeof repo_id)) continue;
        char snap_root[HF_PATH_MAX];
        if (fmt_path(snap_root, sizeof snap_root, "%s/%s/snapshots", cache, name) < 0) continue;
        name_list snaps;
        if ((st = list_subdirs(snap_root, &snaps)) < 0) break;
        for (int j = 0; j < snaps.n; j++) {
            char dir[HF_PATH_MAX];
            if (fmt_path(dir, sizeof dir, "%s/%s", snap_root, snaps.v[j]) < 0) continue;
            fn(repo_id, snaps.v[j], dir, ud);
        }
        name_list_free(&snaps);
    }
    name_list_free(&repos);
    return st;
}
