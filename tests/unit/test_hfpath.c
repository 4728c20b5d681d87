/* test_hfpath.c — MODEL resolution against a fake Hugging Face cache.
 *
 * Builds a cache tree (models--ORG--NAME/{refs,snapshots}) in a mkdtemp
 * directory, points HF_HUB_CACHE / HF_HOME / XDG_CACHE_HOME / HOME at it in
 * turn, and checks directories, files, ORG/NAME, @rev (branch, hash, prefix),
 * refs/main, newest-snapshot fallback, the error messages and the cache scan.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "io/hfpath.h"

static char g_dir[256];

static const char *tp(const char *fmt, const char *a) {
    static char bufs[8][1024];
    static int k;
    char *b = bufs[k++ & 7];
    char rel[512];
    snprintf(rel, sizeof rel, fmt, a ? a : "");
    snprintf(b, 1024, "%s/%s", g_dir, rel);
    return b;
}
#define P(rel) tp("%s", rel)

/* mkdir -p */
static void mkdirs(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *c = tmp + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) { perror(tmp); exit(2); }
        *c = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) { perror(tmp); exit(2); }
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    fputs(s, f);
    fclose(f);
}

static void set_mtime(const char *path, time_t t) {
    struct timespec ts[2] = {{.tv_sec = t}, {.tv_sec = t}};
    if (utimensat(AT_FDCWD, path, ts, 0) != 0) { perror(path); exit(2); }
}

static int contains(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

#define HASH_A "aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111"
#define HASH_B "bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222"
#define HASH_C "cccc3333cccc3333cccc3333cccc3333cccc3333"

static void build_cache(void) {
    const char *r = "hub/models--org--model";
    char p[512];
    snprintf(p, sizeof p, "%s/refs", r); mkdirs(P(p));
    snprintf(p, sizeof p, "%s/refs/main", r); write_text(P(p), HASH_A "\n");
    snprintf(p, sizeof p, "%s/refs/dev", r); write_text(P(p), HASH_B);
    snprintf(p, sizeof p, "%s/refs/refs/pr", r); mkdirs(P(p));
    snprintf(p, sizeof p, "%s/refs/refs/pr/1", r); write_text(P(p), HASH_C "\r\n");
    snprintf(p, sizeof p, "%s/snapshots/" HASH_A, r); mkdirs(P(p));
    snprintf(p, sizeof p, "%s/snapshots/" HASH_A "/config.json", r); write_text(P(p), "{}");
    snprintf(p, sizeof p, "%s/snapshots/" HASH_B, r); mkdirs(P(p));
    snprintf(p, sizeof p, "%s/snapshots/" HASH_C, r); mkdirs(P(p));
    /* newest snapshot wins without refs/main: "zzz-old" sorts last but is older */
    mkdirs(P("hub/models--org--norefs/snapshots/zzz-old"));
    mkdirs(P("hub/models--org--norefs/snapshots/aaa-new"));
    set_mtime(P("hub/models--org--norefs/snapshots/zzz-old"), 1000000000);
    set_mtime(P("hub/models--org--norefs/snapshots/aaa-new"), 1700000000);
    mkdirs(P("hub/models--org--single/snapshots/only"));
    mkdirs(P("hub/models--gpt2/snapshots/h1"));
    mkdirs(P("hub/models--org--brokenref/refs"));
    write_text(P("hub/models--org--brokenref/refs/main"), "deadbeef");
    mkdirs(P("hub/models--org--brokenref/snapshots/other"));
    mkdirs(P("hub/models--org--nosnap"));
    mkdirs(P("hub/models--org--ambig/snapshots/abcd1234"));
    mkdirs(P("hub/models--org--ambig/snapshots/abcd5678"));
    mkdirs(P("hub/datasets--org--data/snapshots/x"));
    write_text(P("hub/version.txt"), "1");
    /* local models */
    mkdirs(P("local/model"));
    write_text(P("local/w.safetensors"), "x");
    write_text(P("local/m.gguf"), "x");
    write_text(P("local/notes.txt"), "x");
}

static void use_hub_cache(void) {
    unsetenv("HUGGINGFACE_HUB_CACHE");
    unsetenv("HF_HOME");
    unsetenv("XDG_CACHE_HOME");
    setenv("HF_HUB_CACHE", P("hub"), 1);
}

static void test_local_paths(void) {
    use_hub_cache();
    lmc_model_path mp;
    CHECK_EQ_INT(lmc_hfpath_resolve(P("local/model"), &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, P("local/model"));
    CHECK_EQ_INT(mp.is_file, 0);
    CHECK_EQ_STR(mp.repo_id, "");
    CHECK_EQ_STR(mp.revision, "");
    CHECK_EQ_INT(lmc_hfpath_resolve(P("local/w.safetensors"), &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, P("local/w.safetensors"));
    CHECK_EQ_INT(mp.is_file, 1);
    CHECK_EQ_INT(lmc_hfpath_resolve(P("local/m.gguf"), &mp), LMC_OK);
    CHECK_EQ_INT(mp.is_file, 1);
    CHECK_EQ_INT(lmc_hfpath_resolve(P("local/notes.txt"), &mp), LMC_ERR_UNSUPPORTED);
    CHECK(contains(lmc_last_error(), "notes.txt"));
    CHECK_EQ_INT(lmc_hfpath_resolve("", &mp), LMC_ERR_ARG);
    CHECK_EQ_INT(lmc_hfpath_resolve(NULL, &mp), LMC_ERR_ARG);
    CHECK_EQ_INT(lmc_hfpath_resolve(P("local/absent/x.gguf"), &mp), LMC_ERR_NOT_FOUND);
    CHECK(contains(lmc_last_error(), "no such file or directory"));
    CHECK(contains(lmc_last_error(), "local/absent/x.gguf"));
    /* a local directory shadows a cached repo of the same spelling (run from g_dir) */
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    mkdirs(P("org/model"));
    CHECK(chdir(g_dir) == 0);
    CHECK_EQ_INT(lmc_hfpath_resolve("org/model", &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, "org/model");
    CHECK_EQ_STR(mp.repo_id, "");
    CHECK(chdir(cwd) == 0);
}

static void test_repo_ids(void) {
    use_hub_cache();
    lmc_model_path mp;
    /* refs/main */
    CHECK_EQ_INT(lmc_hfpath_resolve("org/model", &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, P("hub/models--org--model/snapshots/" HASH_A));
    CHECK_EQ_STR(mp.repo_id, "org/model");
    CHECK_EQ_STR(mp.revision, HASH_A);
    CHECK_EQ_INT(mp.is_file, 0);
    /* a branch */
    CHECK_EQ_INT(lmc_hfpath_resolve("org/model@dev", &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, P("hub/models--org--model/snapshots/" HASH_B));
    CHECK_EQ_STR(mp.revision, HASH_B);
    CHECK_EQ_STR(mp.repo_id, "org/model");
    /* a pull-request ref, stored under refs/refs/pr/1 */
    CHECK_EQ_INT(lmc_hfpath_resolve("org/model@refs/pr/1", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, HASH_C);
    /* a full commit hash and a prefix */
    CHECK_EQ_INT(lmc_hfpath_resolve("org/model@" HASH_C, &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, P("hub/models--org--model/snapshots/" HASH_C));
    CHECK_EQ_INT(lmc_hfpath_resolve("org/model@cccc33", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, HASH_C);
    CHECK_EQ_INT(lmc_hfpath_resolve("org/model@main", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, HASH_A);
    /* no refs/main: the newest snapshot, not the last by name */
    CHECK_EQ_INT(lmc_hfpath_resolve("org/norefs", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, "aaa-new");
    CHECK_EQ_INT(lmc_hfpath_resolve("org/single", &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, P("hub/models--org--single/snapshots/only"));
    /* a legacy id without an organisation */
    CHECK_EQ_INT(lmc_hfpath_resolve("gpt2", &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, P("hub/models--gpt2/snapshots/h1"));
    CHECK_EQ_STR(mp.repo_id, "gpt2");
    /* a repo directory of the cache given as a path resolves to its snapshot */
    CHECK_EQ_INT(lmc_hfpath_resolve(P("hub/models--org--model/"), &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, P("hub/models--org--model/snapshots/" HASH_A));
    CHECK_EQ_STR(mp.repo_id, "org/model");
    CHECK_EQ_STR(mp.revision, HASH_A);
    CHECK_EQ_INT(lmc_hfpath_resolve(P("hub/models--gpt2"), &mp), LMC_OK);
    CHECK_EQ_STR(mp.repo_id, "gpt2");
    CHECK_EQ_INT(lmc_hfpath_resolve(P("hub/models--org--model/snapshots/" HASH_B), &mp), LMC_OK);
    CHECK_EQ_STR(mp.repo_id, ""); /* a snapshot directory is an ordinary model directory */
    /* repo ids match the cache case-insensitively, keeping the cache's spelling */
    CHECK_EQ_INT(lmc_hfpath_resolve("ORG/Model@dev", &mp), LMC_OK);
    CHECK_EQ_STR(mp.path, P("hub/models--org--model/snapshots/" HASH_B));
    CHECK_EQ_STR(mp.repo_id, "org/model");
    /* unique prefix of 4+ characters */
    CHECK_EQ_INT(lmc_hfpath_resolve("org/ambig@abcd5", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, "abcd5678");
}

static void test_errors(void) {
    use_hub_cache();
    lmc_model_path mp;
    CHECK_EQ_INT(lmc_hfpath_resolve("org/missing", &mp), LMC_ERR_NOT_FOUND);
    const char *m = lmc_last_error();
    CHECK_MSG(contains(m, "org/missing (no such file or directory)"), "%s", m);
    CHECK_MSG(contains(m, P("hub/models--org--missing")), "%s", m);
    CHECK_MSG(contains(m, "HF_HUB_CACHE"), "%s", m);
    CHECK_MSG(contains(m, "huggingface-cli download org/missing"), "%s", m);
    CHECK(mp.path[0] == 0);

    CHECK_EQ_INT(lmc_hfpath_resolve("org/model@nope", &mp), LMC_ERR_NOT_FOUND);
    m = lmc_last_error();
    CHECK_MSG(contains(m, "revision \"nope\"") && contains(m, "--revision nope") && contains(m, HASH_B), "%s", m);
    CHECK_MSG(contains(m, P("hub/models--org--model/refs/nope")), "%s", m);

    CHECK_EQ_INT(lmc_hfpath_resolve("org/brokenref", &mp), LMC_ERR_NOT_FOUND);
    CHECK_MSG(contains(lmc_last_error(), "deadbeef") && contains(lmc_last_error(), "refs/main"), "%s",
              lmc_last_error());
    CHECK_EQ_INT(lmc_hfpath_resolve("org/nosnap", &mp), LMC_ERR_NOT_FOUND);
    CHECK_MSG(contains(lmc_last_error(), "no snapshot"), "%s", lmc_last_error());
    CHECK_EQ_INT(lmc_hfpath_resolve("org/ambig@abcd", &mp), LMC_ERR_ARG);
    CHECK_MSG(contains(lmc_last_error(), "matches 2 snapshots"), "%s", lmc_last_error());
    /* not a repo id: traversal and odd characters never reach the cache */
    CHECK_EQ_INT(lmc_hfpath_resolve("../hub/models--org--model", &mp), LMC_ERR_NOT_FOUND);
    CHECK(contains(lmc_last_error(), "no such file or directory"));
    CHECK_EQ_INT(lmc_hfpath_resolve("org/model@../../x", &mp), LMC_ERR_NOT_FOUND);
    CHECK(!contains(lmc_last_error(), "huggingface-cli"));
    CHECK_EQ_INT(lmc_hfpath_resolve("org--x/model", &mp), LMC_ERR_NOT_FOUND);
    CHECK_EQ_INT(lmc_hfpath_resolve("a/b/c", &mp), LMC_ERR_NOT_FOUND);

    /* a cache directory that does not exist is named as such */
    setenv("HF_HUB_CACHE", P("no-cache-here"), 1);
    CHECK_EQ_INT(lmc_hfpath_resolve("org/model", &mp), LMC_ERR_NOT_FOUND);
    CHECK_MSG(contains(lmc_last_error(), "does not exist") && contains(lmc_last_error(), "no-cache-here"), "%s",
              lmc_last_error());
}

static void test_env_precedence(void) {
    char buf[1024];
    const char *which = NULL;
    mkdirs(P("home/hub/models--x--y/snapshots/r1"));
    mkdirs(P("xdg/huggingface/hub/models--x--y/snapshots/r2"));
    mkdirs(P("userhome/.cache/huggingface/hub/models--x--y/snapshots/r3"));
    mkdirs(P("legacy/models--x--y/snapshots/r4"));
    lmc_model_path mp;
    const char *old_home = getenv("HOME");
    char saved_home[1024];
    snprintf(saved_home, sizeof saved_home, "%s", old_home ? old_home : "");

    setenv("HF_HUB_CACHE", P("hub"), 1);
    setenv("HUGGINGFACE_HUB_CACHE", P("legacy"), 1);
    setenv("HF_HOME", P("home"), 1);
    setenv("XDG_CACHE_HOME", P("xdg"), 1);
    setenv("HOME", P("userhome"), 1);
    CHECK_EQ_INT(lmc_hfpath_cache_dir(buf, sizeof buf, &which), LMC_OK);
    CHECK_EQ_STR(buf, P("hub"));
    CHECK_EQ_STR(which, "HF_HUB_CACHE");
    CHECK_EQ_INT(lmc_hfpath_resolve("x/y", &mp), LMC_ERR_NOT_FOUND); /* only the chosen cache is searched */

    setenv("HF_HUB_CACHE", "", 1); /* empty counts as unset */
    CHECK_EQ_INT(lmc_hfpath_resolve("x/y", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, "r4");
    unsetenv("HUGGINGFACE_HUB_CACHE");
    CHECK_EQ_INT(lmc_hfpath_resolve("x/y", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, "r1");
    CHECK_EQ_STR(mp.path, P("home/hub/models--x--y/snapshots/r1"));
    CHECK_EQ_INT(lmc_hfpath_resolve("x/z", &mp), LMC_ERR_NOT_FOUND);
    CHECK_MSG(contains(lmc_last_error(), "$HF_HOME"), "%s", lmc_last_error());

    unsetenv("HF_HOME");
    CHECK_EQ_INT(lmc_hfpath_resolve("x/y", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, "r2");
    unsetenv("XDG_CACHE_HOME");
    CHECK_EQ_INT(lmc_hfpath_resolve("x/y", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, "r3");
    CHECK_EQ_INT(lmc_hfpath_cache_dir(buf, sizeof buf, &which), LMC_OK);
    CHECK_EQ_STR(which, "HOME");
    /* "~" in a variable expands from HOME */
    setenv("HOME", g_dir, 1);
    setenv("HF_HOME", "~/home", 1);
    CHECK_EQ_INT(lmc_hfpath_resolve("x/y", &mp), LMC_OK);
    CHECK_EQ_STR(mp.revision, "r1");
    /* nothing set at all */
    unsetenv("HF_HOME");
    unsetenv("HOME");
    CHECK_EQ_INT(lmc_hfpath_cache_dir(buf, sizeof buf, &which), LMC_ERR_NOT_FOUND);
    CHECK_EQ_INT(lmc_hfpath_resolve("x/y", &mp), LMC_ERR_NOT_FOUND);
    CHECK(contains(lmc_last_error(), "huggingface-cli download x/y"));
    /* too small a buffer */
    setenv("HF_HUB_CACHE", P("hub"), 1);
    CHECK_EQ_INT(lmc_hfpath_cache_dir(buf, 4, &which), LMC_ERR_RANGE);
    if (saved_home[0]) setenv("HOME", saved_home, 1);
}

typedef struct scan_rec { int n; char lines[32][1200]; } scan_rec;

static void on_repo(const char *repo_id, const char *revision, const char *dir, void *ud) {
    scan_rec *r = ud;
    if (r->n < 32) snprintf(r->lines[r->n], sizeof r->lines[0], "%s@%s=%s", repo_id, revision, dir);
    r->n++;
}

static void test_scan(void) {
    use_hub_cache();
    static scan_rec rec;
    rec.n = 0;
    CHECK_EQ_INT(lmc_hfpath_scan_cache(on_repo, &rec), LMC_OK);
    static const char *want[] = {
        "gpt2@h1", "org/ambig@abcd1234", "org/ambig@abcd5678", "org/brokenref@other",
        "org/model@" HASH_A, "org/model@" HASH_B, "org/model@" HASH_C,
        "org/norefs@aaa-new", "org/norefs@zzz-old", "org/single@only",
    };
    enum { NW = sizeof want / sizeof want[0] };
    CHECK_EQ_INT(rec.n, NW);
    for (int i = 0; i < NW && i < rec.n; i++) {
        char prefix[300];
        snprintf(prefix, sizeof prefix, "%s=", want[i]);
        CHECK_MSG(strncmp(rec.lines[i], prefix, strlen(prefix)) == 0, "entry %d: %s, want %s", i, rec.lines[i],
                  want[i]);
    }
    CHECK(rec.n > 4 && contains(rec.lines[4], P("hub/models--org--model/snapshots/" HASH_A)));
    /* a missing cache lists nothing and is not an error */
    setenv("HF_HUB_CACHE", P("no-cache-here"), 1);
    rec.n = 0;
    CHECK_EQ_INT(lmc_hfpath_scan_cache(on_repo, &rec), LMC_OK);
    CHECK_EQ_INT(rec.n, 0);
    CHECK_EQ_INT(lmc_hfpath_scan_cache(NULL, &rec), LMC_ERR_ARG);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/lmc-test-hf-XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 2; }
    build_cache();
    RUN(test_local_paths);
    RUN(test_repo_ids);
    RUN(test_errors);
    RUN(test_scan);
    RUN(test_env_precedence);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return TEST_END();
}
