#!/usr/bin/env bash
# gen_parallel.sh — run make_fixtures.py once per case, all cases at the same time.
#
# Owned by the oracle. For the GPU machine (it has torch + transformers and many
# cores; the reference runs on its CPU in float64): each case is its own process with
# one torch thread, so a slow seed search delays only its own case.
#   tools/oracle/gen_parallel.sh OUTDIR LOGFILE CASE...
# Writes OUTDIR/<case>/ for every case that succeeds; LOGFILE gets every case's log,
# one after the other. Exits 1 if any case failed.
set -u
out=$1; log=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
mkdir -p "$out"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
pids=()
for c in "$@"; do
    timeout "${CASE_TIMEOUT:-170}" python3 "$here/make_fixtures.py" --out "$out" --case "$c" \
        --threads 1 >"$tmp/$c.log" 2>&1 &
    pids+=($!)
done
rc=0; i=0
for c in "$@"; do
    wait "${pids[$i]}" || { rc=1; echo "case $c exited non-zero" >>"$tmp/$c.log"; }
    i=$((i + 1))
done
: >"$log"
for c in "$@"; do
    { echo "===== $c"; cat "$tmp/$c.log"; } >>"$log"
done
rm -rf "$tmp"
exit $rc
