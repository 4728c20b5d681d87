#!/usr/bin/env bash
# install-deps.sh — installs what lmc needs on a fresh Debian 12 machine.
#
#   scripts/install-deps.sh          build dependencies (compiler, libraries)
#   scripts/install-deps.sh --test   plus what the tests need (node + npm oracle packages)
#
# Only Debian packages at run time; npm packages are test oracles only.
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

pkgs=(build-essential pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libopenblas-dev)
# wamerican: the English word list the demo-model test checks text against; tmux drives lmc chat in a terminal
[ "$want_test" = 1 ] && pkgs+=(wamerican tmux)
# node/npm: keep whatever provides them (the machine image may ship its own nodejs build)
if [ "$want_test" = 1 ] && ! { command -v node && command -v npm; } >/dev/null; then pkgs+=(nodejs npm); fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "install-deps: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ "$want_test" = 1 ] && [ -f tests/oracle/package.json ]; then
    if [ ! -d tests/oracle/node_modules ] || [ tests/oracle/package-lock.json -nt tests/oracle/node_modules ]; then
        echo "install-deps: installing npm test oracles (tests/oracle)"
        (cd tests/oracle && npm ci --no-audit --no-fund --loglevel=error)
    fi
fi
