#!/usr/bin/env bash
# spec_run.sh — speculative decoding on a GPU machine (KIT=dir, default .dev/cudaval-kit): plain vs ngram vs self-draft on a random 8B-shape model (bench/synth_llama8b.py) and the demo; $OUT gets the build log
set -u
bash ${KIT:-.dev/cudaval-kit}/build.sh > $OUT/build.log 2>&1 || { echo build failed; tail -5 $OUT/build.log; exit 1; }
python3 bench/synth_llama8b.py /tmp/l8b 32 > /dev/null 2>&1 || { echo synth failed; exit 1; }
L=build-cuda/lmc
IDS=$(python3 -c "print(','.join(str(x) for x in [17,923,4051,77,3002,512,88,61]*8))")
run() { echo "== $1"; shift; timeout 120 "$@" 2>&1 | grep -E "^lmc:" | tail -2; }
for rep in 1 2; do
run "8B plain" $L generate -m /tmp/l8b --backend cuda --ids $IDS -n 128 --greedy --print-ids
run "8B ngram k4" $L generate -m /tmp/l8b --backend cuda --ids $IDS -n 128 --greedy --print-ids --spec ngram --draft-n 4
done
run "8B self-draft k4" $L generate -m /tmp/l8b --backend cuda --ids $IDS -n 128 --greedy --print-ids --spec draft --draft-model /tmp/l8b --draft-n 4
P="And God said, Let there be light: and there was light. And God saw the light, that it was good"
run "demo plain" $L generate -m models/demo --backend cuda -p "$P" -n 128 --greedy
run "demo ngram k4" $L generate -m models/demo --backend cuda -p "$P" -n 128 --greedy --spec ngram --draft-n 4
run "demo plain" $L generate -m models/demo --backend cuda -p "$P" -n 128 --greedy
run "demo ngram k4" $L generate -m models/demo --backend cuda -p "$P" -n 128 --greedy --spec ngram --draft-n 4
