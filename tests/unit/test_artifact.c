/* test_artifact.c — exact-artifact profiles (model/artifact.h): SHA-256 against the FIPS 180-4
 * examples, snapshot identity from hub-cache paths, and the record / apply / refuse cycle on a
 * copy of a fixture laid out as a cache snapshot, with its registry in a temporary folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "backend/backend.h"
#include "model/artifact.h"
#include "model/model.h"

static void hex_of(const unsigned char d[32], char out[65]) {
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha256(void) {
    static const struct { const char *in; const char *hex; } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    unsigned char d[32];
    char hex[65];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        lmc_sha256(v[i].in, strlen(v[i].in), d);
        hex_of(d, hex);
        CHECK_EQ_STR(hex, v[i].hex);
    }
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    lmc_sha256(a, 1000000, d);
    hex_of(d, hex);
    CHECK_EQ_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* lengths around the padding boundary agree between the one-shot and the file path */
    char path[] = "/tmp/lmc-sha-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    CHECK(f && fwrite(a, 1, 119, f) == 119);
    fclose(f);
    char fhex[65];
    CHECK(lmc_sha256_file(path, fhex) == LMC_OK);
    lmc_sha256(a, 119, d);
    hex_of(d, hex);
    CHECK_EQ_STR(fhex, hex);
    remove(path);
    free(a);
}

static void test_identity(void) {
    char repo[512], rev[128];
    CHECK(lmc_artifact_identity("/c/hub/models--Qwen--Qwen2.5-0.5B/snapshots/abc123/", repo, sizeof repo, rev, sizeof rev));
    CHECK_EQ_STR(repo, "Qwen/Qwen2.5-0.5B");
    CHECK_EQ_STR(rev, "abc123");
    CHECK(lmc_artifact_identity("models--gpt2/snapshots/r1", repo, sizeof repo, rev, sizeof rev));
    CHECK_EQ_STR(repo, "gpt2");
    CHECK(!lmc_artifact_identity("/c/hub/models--Qwen--X/refs/main", repo, sizeof repo, rev, sizeof rev));
    CHECK(!lmc_artifact_identity("/home/me/Qwen2.5-0.5B", repo, sizeof repo, rev, sizeof rev));
    CHECK(!lmc_artifact_identity("/c/datasets--a--b/snapshots/r", repo, sizeof repo, rev, sizeof rev));
    CHECK(!lmc_artifact_identity("", repo, sizeof repo, rev, sizeof rev));
}

static int sh(const char *fmt, const char *a, const char *b) {
    char cmd[4600];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    return system(cmd);
}

/* Load dir and return its status; the profile id and tier go to id / tier. */
static lmc_status load(lmc_backend *be, const char *dir, char *id, lmc_tier *tier) {
    lmc_model *m = NULL;
    const lmc_status st = lmc_model_load(dir, be, &m);
    if (st == LMC_OK) {
        snprintf(id, 96, "%s", m->profile.id);
        *tier = m->profile.tier;
    }
    lmc_model_free(m);
    return st;
}

static void test_record_apply_refuse(void) {
    char root[] = "/tmp/lmc-artifact-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    char snap[1024], snap2[1024], reg[1024], id[96];
    snprintf(snap, sizeof snap, "%s/hub/models--acme--tiny/snapshots/rev1", root);
    snprintf(snap2, sizeof snap2, "%s/hub/models--acme--tiny/snapshots/rev2", root);
    snprintf(reg, sizeof reg, "%s/conf/lmc/artifacts.json", root);
    CHECK(sh("mkdir -p %s %s", snap, snap2) == 0);
    CHECK(sh("cp tests/fixtures/llama/config.json tests/fixtures/llama/model.safetensors %s/ && true %s", snap, "") == 0);
    CHECK(sh("cp tests/fixtures/llama/config.json tests/fixtures/llama/model.safetensors %s/ && true %s", snap2, "") == 0);
    setenv("LMC_ARTIFACTS", reg, 1);
    lmc_backend *be;
    CHECK(lmc_backend_cpu_init(&be, 1, 0) == LMC_OK);
    lmc_tier tier = LMC_TIER_UNSUPPORTED;

    /* no registry: the family profile */
    CHECK(load(be, snap, id, &tier) == LMC_OK);
    CHECK_EQ_STR(id, "generic-dense:llama");
    CHECK(tier == LMC_TIER_GENERIC);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(snap, be, &m) == LMC_OK);
    CHECK(m && lmc_artifact_record(snap, &m->profile, "test") == LMC_OK);
    CHECK(m && lmc_artifact_record("tests/fixtures/llama", &m->profile, "test") == LMC_ERR_ARG); /* not a snapshot */
    lmc_model_free(m);
    /* recorded: exact, for this revision only */
    CHECK(load(be, snap, id, &tier) == LMC_OK);
    CHECK_EQ_STR(id, "exact:acme/tiny@rev1");
    CHECK(tier == LMC_TIER_EXACT);
    CHECK(load(be, snap2, id, &tier) == LMC_OK);
    CHECK(tier == LMC_TIER_GENERIC);
    /* recording again replaces the entry instead of adding one */
    CHECK(lmc_model_load(snap2, be, &m) == LMC_OK);
    lmc_model_free(m);
    FILE *f = fopen(reg, "r");
    char text[8192] = {0};
    CHECK(f && fread(text, 1, sizeof text - 1, f) > 0);
    if (f) fclose(f);
    CHECK(strstr(text, "\"config_sha256\"") && strstr(text, "acme/tiny"));
    /* the config changed: refused, naming both hashes */
    CHECK(sh("printf ' ' >> %s/config.json %s", snap, "") == 0);
    CHECK(load(be, snap, id, &tier) == LMC_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(lmc_last_error(), "changed since it was verified") != NULL, "%s", lmc_last_error());
    /* a malformed registry is an error that names the file, not a crash */
    f = fopen(reg, "w");
    CHECK(f && fputs("[1, 2]", f) >= 0);
    if (f) fclose(f);
    CHECK(load(be, snap2, id, &tier) == LMC_ERR_FORMAT);
    CHECK(strstr(lmc_last_error(), "artifacts.json") != NULL);
    unsetenv("LMC_ARTIFACTS");
    lmc_backend_free(be);
    CHECK(sh("rm -rf %s %s", root, "") == 0);
}

int main(void) {
    RUN(test_sha256);
    RUN(test_identity);
    RUN(test_record_apply_refuse);
    return TEST_END();
}
