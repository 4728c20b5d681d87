/* artifact.h — exact-artifact profiles: one verified Hugging Face snapshot, by identity.
 *
 * A family profile (arch.c) says "this model_type runs"; an exact-artifact profile says
 * "this snapshot, ORG/NAME@REVISION with this config.json, was verified" (with `lmc check
 * --oracle --record`: the F1 gate passed on its config at tiny size). It outranks the family
 * profile (tier "exact") and refuses the snapshot when its config.json no longer has the
 * recorded SHA-256 — a changed config is not silently run under an old verdict.
 *
 * Entries live in a JSON registry: $LMC_ARTIFACTS, else $XDG_CONFIG_HOME/lmc/artifacts.json,
 * else ~/.config/lmc/artifacts.json; a missing file holds no entries:
 *   {"artifacts": [{"repo": "ORG/NAME", "revision": "<commit>" or "*", "config_sha256": "<hex>",
 *                   "profile": "generic-dense:llama", "verified": "<how, when>"}]}
 * A snapshot's identity comes from its path in the hub cache: .../models--ORG--NAME/snapshots/REV.
 */
#ifndef LMC_MODEL_ARTIFACT_H
#define LMC_MODEL_ARTIFACT_H

#include <stddef.h>

#include "model/arch.h"

/* SHA-256 of a file as 64 lowercase hex digits (+ NUL). */
lmc_status lmc_sha256_file(const char *path, char hex[65]);
/* SHA-256 of n bytes. */
void lmc_sha256(const void *data, size_t n, unsigned char out[32]);

/* ORG/NAME and REV of a snapshot directory of the hub cache; 0 when dir is not one. */
int lmc_artifact_identity(const char *dir, char *repo, size_t repo_n, char *rev, size_t rev_n);

/* The registry file in use (it may not exist). */
lmc_status lmc_artifact_registry_path(char *buf, size_t n);

/* Apply the registry to a resolved family profile of the checkpoint in dir: an entry for its
 * identity makes the profile exact (id "exact:ORG/NAME@REV", tier LMC_TIER_EXACT) when
 * config.json has the recorded hash, and is LMC_ERR_UNSUPPORTED (naming both hashes) when it
 * does not. No entry, or no identity: the profile is left as it is. */
lmc_status lmc_artifact_apply(const char *dir, lmc_profile *prof);

/* Record (or replace) the entry for dir's snapshot with its current config hash and the
 * family profile id; LMC_ERR_ARG when dir is not a snapshot of the hub cache. */
lmc_status lmc_artifact_record(const char *dir, const lmc_profile *prof, const char *verified);

#endif
