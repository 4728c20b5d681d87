#!/usr/bin/env bash
# devrun.sh NAME [COMMAND...] — run on the device machine from the repository root: a copy of the
# carried tree in /tmp/w-NAME, with another worktree's sources (.dev/NAME/tree.tar.xz, made by
# mktree.sh) laid over it when present, built through the kit (.dev/cudaval-kit/build.sh), then
# COMMAND run there (bash -c). Logs: $OUT/build-NAME.log.
set -uo pipefail
N=$1; shift
R=$(pwd); D=/tmp/w-$N; OUT=${OUT:-/tmp/out}; mkdir -p "$D" "$OUT"
tar -C "$R" --exclude=./build-cuda --exclude=./.git --exclude=./.dev -cf - . | tar -C "$D" -xf -
mkdir -p "$D/.dev" && cp -r "$R/.dev/cudaval-kit" "$D/.dev/"
[ -f "$R/.dev/$N/tree.tar.xz" ] && tar -C "$D" -xJf "$R/.dev/$N/tree.tar.xz"
cd "$D" || exit 1
t0=$(date +%s)
if ! bash .dev/cudaval-kit/build.sh >"$OUT/build-$N.log" 2>&1; then
    echo "build FAILED"; grep -E 'error|Error' "$OUT/build-$N.log" | head -n 40; exit 1
fi
echo "build ok ($(( $(date +%s) - t0 )) s) in $D"
[ $# -gt 0 ] && bash -c "$*"
