#!/usr/bin/env bash
# soak.sh — the long soak of `lmc serve` (30 minutes, 32 clients; not in CI).
# The short version runs in `make test` through tests/oracle/server_soak.mjs.
#   BUILD=build tests/soak/soak.sh [--duration S] [--clients N] [--seed K]
set -eu
cd "$(dirname "$0")/../.."
if [ $# -eq 0 ]; then set -- --long; fi
exec node tests/soak/soak.mjs "$@"
