#!/usr/bin/env bash
# mtp_run.sh — the MTP drafter's mechanical cost on a random-weight Gemma 4 target of realistic
# width (bench/mtp_synth.py): plain greedy decoding vs --spec mtp with the dense and the centroid
# assistant, on --backend cuda and cpu. Run on the GPU machine after a CUDA build:
#   LMC=build-cuda/lmc bash bench/mtp_run.sh [DIR]
# Each run prints lmc's statistics line (tok/s; for speculation: drafted, accepted, rounds and the
# milliseconds spent drafting and verifying). Random weights: nothing is accepted, so the draft
# milliseconds per drafted token and the verify milliseconds per round are what to read.
set -u
L=${LMC:-build-cuda/lmc}
D=${1:-/tmp/g4mtp}
[ -d "$D/target" ] || python3 bench/mtp_synth.py "$D" > /dev/null || { echo "synth failed"; exit 1; }
IDS=$(python3 -c "print(','.join(str(3 + (i * 7919) % 262000) for i in range(32)))")
stat() { grep -o "lmc:.*" | tail -n 2; }
for be in cuda cpu; do
    echo "== $be plain";        timeout 90 $L generate -m "$D/target" --backend $be --ids "$IDS" -n 64 --greedy 2>&1 | stat
    echo "== $be mtp dense";    timeout 90 $L generate -m "$D/target" --backend $be --ids "$IDS" -n 64 --greedy --spec mtp --draft "$D/dense" --draft-n 4 2>&1 | stat
    echo "== $be mtp centroid"; timeout 90 $L generate -m "$D/target" --backend $be --ids "$IDS" -n 64 --greedy --spec mtp --draft "$D/centroid" --draft-n 4 2>&1 | stat
done
