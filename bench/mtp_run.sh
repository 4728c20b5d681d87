#!/usr/bin/env bash
# mtp_run.sh — the MTP drafter's mechanical cost on a random-weight Gemma 4 target of realistic
# width (bench/mtp_synth.py): plain greedy decoding vs --spec mtp with the dense and the centroid
# assistant, on --backend cuda and cpu. Run on the GPU machine after a CUDA build:
#   LMC=build-cuda/lmc bash bench/mtp_run.sh [DIR]        (BACKENDS="cuda cpu" by default)
# Each run prints lmc's statistics line (tok/s; for speculation: drafted, accepted, rounds and the
# milliseconds spent drafting and verifying) and a digest of its ids (speculative greedy must give
# the plain run's ids). Random weights: nothing is accepted, so the draft milliseconds per drafted
# token and the verify milliseconds per round are what to read; bench/mtp_cost.py turns them into
# costs and the speedup they give at a per-token acceptance α (block 4), the table BENCHMARKS.md keeps.
set -u
L=${LMC:-build-cuda/lmc}
D=${1:-/tmp/g4mtp}
[ -d "$D/target" ] || python3 bench/mtp_synth.py "$D" > /dev/null || { echo "synth failed"; exit 1; }
IDS=$(python3 -c "print(','.join(str(3 + (i * 7919) % 262000) for i in range(32)))")
E=$(mktemp); trap 'rm -f "$E"' EXIT
run() { # label, tokens, args...
    local label=$1 n=$2; shift 2
    local ids
    ids=$(timeout 120 "$L" generate -m "$D/target" --ids "$IDS" -n "$n" --greedy --print-ids "$@" 2>"$E" | tail -n 1)
    echo "== $label"
    grep -o "lmc:.*" "$E" | tail -n 2
    echo "ids $(printf '%s' "$ids" | md5sum | cut -c1-12) ($(printf '%s' "$ids" | wc -w) ids)"
}
for be in ${BACKENDS:-cuda cpu}; do
    n=256; [ "$be" = cpu ] && n=64 # the CPU part is informative; fewer tokens keep it short
    run "$be plain" $n --backend "$be"
    run "$be mtp dense" $n --backend "$be" --spec mtp --draft "$D/dense" --draft-n 4
    run "$be mtp centroid" $n --backend "$be" --spec mtp --draft "$D/centroid" --draft-n 4
done
