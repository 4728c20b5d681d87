/* artifact.c — exact-artifact profiles (artifact.h): snapshot identity, config hash, registry. */
#include "artifact.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/jsonfile.h"

/* ---------------------------------------------------------------- SHA-256 (FIPS 180-4) */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        const uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        const uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        const uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

void lmc_sha256(const void *data, size_t n, unsigned char out[32]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const unsigned char *p = data;
    size_t left = n;
    for (; left >= 64; left -= 64, p += 64) sha256_block(h, p);
    unsigned char tail[128] = {0};
    memcpy(tail, p, left);
    tail[left] = 0x80;
    const size_t tlen = left + 9 <= 64 ? 64 : 128;
    const uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++) tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha256_block(h, tail);
    if (tlen == 128) sha256_block(h, tail + 64);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
}

lmc_status lmc_sha256_file(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return lmc_fail(LMC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    int bad = !buf;
    while (!bad) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break; /* end of file (or an error, checked below) */
        unsigned char *nb = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
        if (!nb) { bad = 1; break; }
        buf = nb;
        cap *= 2;
    }
    bad |= ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return lmc_fail(LMC_ERR_IO, "cannot read %s", path);
    }
    unsigned char d[32];
    lmc_sha256(buf, n, d);
    free(buf);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return LMC_OK;
}

/* ---------------------------------------------------------------- identity and registry */

int lmc_artifact_identity(const char *dir, char *repo, size_t repo_n, char *rev, size_t rev_n) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/') p[--len] = 0;
    char *slash = strrchr(p, '/');
    if (!slash) return 0;
    *slash = 0;
    const char *r = slash + 1; /* REV */
    char *snap = strrchr(p, '/');
    if (!snap || strcmp(snap + 1, "snapshots")) return 0;
    *snap = 0;
    char *top = strrchr(p, '/');
    const char *name = top ? top + 1 : p; /* models--ORG--NAME */
    if (strncmp(name, "models--", 8) || !*r) return 0;
    const char *org = name + 8, *sep = strstr(org, "--");
    if (sep && sep > org && sep[2]) snprintf(repo, repo_n, "%.*s/%s", (int)(sep - org), org, sep + 2);
    else if (*org) snprintf(repo, repo_n, "%s", org); /* a legacy repo without an organization */
    else return 0;
    snprintf(rev, rev_n, "%s", r);
    return 1;
}

lmc_status lmc_artifact_registry_path(char *buf, size_t n) {
    const char *e = getenv("LMC_ARTIFACTS"), *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    int w;
    if (e && *e) w = snprintf(buf, n, "%s", e);
    else if (xdg && *xdg) w = snprintf(buf, n, "%s/lmc/artifacts.json", xdg);
    else if (home && *home) w = snprintf(buf, n, "%s/.config/lmc/artifacts.json", home);
    else return lmc_fail(LMC_ERR_NOT_FOUND, "no artifact registry: set LMC_ARTIFACTS, XDG_CONFIG_HOME or HOME");
    if (w < 0 || (size_t)w >= n) return lmc_fail(LMC_ERR_RANGE, "artifact registry path too long");
    return LMC_OK;
}

/* The registry's entry array (created when absent); *root NULL and LMC_OK when the file does not exist
 * and create is 0. */
static lmc_status registry_load(const char *path, int create, cJSON **root, cJSON **list) {
    *root = NULL;
    *list = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (!create) return LMC_OK;
        *root = cJSON_CreateObject();
    } else {
        LMC_TRY(lmc_json_read_file(path, 16 << 20, root));
    }
    if (!*root || !cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        return lmc_fail(LMC_ERR_FORMAT, "%s: the artifact registry must be a JSON object", path);
    }
    *list = cJSON_GetObjectItemCaseSensitive(*root, "artifacts");
    if (!*list) *list = cJSON_AddArrayToObject(*root, "artifacts");
    if (!cJSON_IsArray(*list)) {
        cJSON_Delete(*root);
        *root = NULL;
        return lmc_fail(LMC_ERR_FORMAT, "%s: \"artifacts\" must be an array", path);
    }
    return LMC_OK;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int entry_matches(const cJSON *it, const char *repo, const char *rev) {
    const char *r = str_of(it, "repo"), *v = str_of(it, "revision");
    return r && v && !strcmp(r, repo) && (!strcmp(v, "*") || !strcmp(v, rev));
}

lmc_status lmc_artifact_apply(const char *dir, lmc_profile *prof) {
    char repo[512], rev[128], path[4096];
    if (!lmc_artifact_identity(dir, repo, sizeof repo, rev, sizeof rev)) return LMC_OK;
    if (lmc_artifact_registry_path(path, sizeof path) < 0) return LMC_OK; /* no place for a registry: none */
    cJSON *root, *list;
    LMC_TRY(registry_load(path, 0, &root, &list));
    if (!root) return LMC_OK;
    lmc_status st = LMC_OK;
    const cJSON *it, *hit = NULL;
    cJSON_ArrayForEach(it, list) if (cJSON_IsObject(it) && entry_matches(it, repo, rev)) hit = it;
    if (hit) {
        const char *want = str_of(hit, "config_sha256"), *fam = str_of(hit, "profile");
        char cfg[4200], got[65];
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        if (!want || strlen(want) != 64) {
            st = lmc_fail(LMC_ERR_FORMAT, "%s: the entry for %s has no config_sha256", path, repo);
        } else if ((st = lmc_sha256_file(cfg, got)) >= 0 && strcmp(got, want)) {
            st = lmc_fail(LMC_ERR_UNSUPPORTED,
                          "%s@%.12s has an exact-artifact profile (%s) for config.json sha256 %.16s…, but this "
                          "config.json hashes to %.16s…: the checkpoint changed since it was verified; re-verify "
                          "(lmc check DIR --oracle --record) or remove the entry", repo, rev, path, want, got);
        } else if (st >= 0 && fam && strcmp(fam, prof->id)) {
            st = lmc_fail(LMC_ERR_UNSUPPORTED, "%s@%.12s was verified as %s but now resolves to %s; re-verify it",
                          repo, rev, fam, prof->id);
        } else if (st >= 0) {
            /* the id keeps the repo's first 70 characters (a long name is cut; the registry has it whole) */
            snprintf(prof->id, sizeof prof->id, "exact:%.70s@%.12s", repo, rev);
            prof->tier = LMC_TIER_EXACT;
        }
    }
    cJSON_Delete(root);
    return st;
}

static lmc_status mkdirs_for(const char *file) {
    char p[4096];
    snprintf(p, sizeof p, "%s", file);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return lmc_fail(LMC_ERR_IO, "cannot create %s: %s", p, strerror(errno));
        *s = '/';
    }
    return LMC_OK;
}

lmc_status lmc_artifact_record(const char *dir, const lmc_profile *prof, const char *verified) {
    char repo[512], rev[128], path[4096], cfg[4200], hex[65];
    if (!lmc_artifact_identity(dir, repo, sizeof repo, rev, sizeof rev))
        return lmc_fail(LMC_ERR_ARG, "%s is not a snapshot of the Hugging Face cache (models--ORG--NAME/snapshots/REV): "
                                     "an exact-artifact profile needs that identity", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    LMC_TRY(lmc_sha256_file(cfg, hex));
    LMC_TRY(lmc_artifact_registry_path(path, sizeof path));
    cJSON *root, *list;
    LMC_TRY(registry_load(path, 1, &root, &list));
    for (int i = cJSON_GetArraySize(list) - 1; i >= 0; i--) {
        const cJSON *it = cJSON_GetArrayItem(list, i);
        const char *r = str_of(it, "repo"), *v = str_of(it, "revision");
        if (r && v && !strcmp(r, repo) && !strcmp(v, rev)) cJSON_DeleteItemFromArray(list, i);
    }
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "repo", repo);
    cJSON_AddStringToObject(e, "revision", rev);
    cJSON_AddStringToObject(e, "config_sha256", hex);
    cJSON_AddStringToObject(e, "profile", prof->id);
    cJSON_AddStringToObject(e, "verified", verified ? verified : "");
    cJSON_AddItemToArray(list, e);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return lmc_fail(LMC_ERR_NOMEM, "artifact registry");
    lmc_status st = mkdirs_for(path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = st >= 0 ? fopen(tmp, "w") : NULL;
    if (st >= 0 && !f) st = lmc_fail(LMC_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (f) {
        const int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
        if (fclose(f) != 0 || !ok) st = lmc_fail(LMC_ERR_IO, "cannot write %s", tmp);
        else if (rename(tmp, path) != 0) st = lmc_fail(LMC_ERR_IO, "cannot replace %s: %s", path, strerror(errno));
    }
    free(text);
    return st;
}
