#!/usr/bin/env bash
# fuzzrun.sh TARGET WORKERS SECONDS — on the device machine, from the repository root: a parallel
# libFuzzer campaign of WORKERS jobs (-jobs=-workers=WORKERS) sharing one working corpus seeded
# from tests/fuzz/corpus/TARGET, each for SECONDS, with the flags of `make fuzz`. Per-job logs go to
# $OUT/logs.tgz, any crash input to $OUT/art.tgz; prints each job's executions and their total.
set -u
T=$1; N=$2; S=$3
R=$(pwd); ln -sfn "$R" /tmp/fz
B=/tmp/fzb; mkdir -p "$B"; xz -dc "$R/.dev/fzc/fuzz_$T.xz" >"$B/fuzz_$T"; chmod +x "$B/fuzz_$T"
cp "$R/.dev/fzc/libcjson.so.1" "$B/"
W=/tmp/fzw/$T; mkdir -p "$W/corpus" "$W/art"; cp -r "$R/tests/fuzz/corpus/$T/." "$W/corpus/"
dict=; [ -f "$R/tests/fuzz/dict/$T.dict" ] && dict=-dict=$R/tests/fuzz/dict/$T.dict
lscpu | grep -E "Model name|^CPU\(s\)"
cd "$W" && "$B/fuzz_$T" -jobs="$N" -workers="$N" -max_total_time="$S" -timeout=25 -rss_limit_mb=2560 \
    -print_final_stats=1 -artifact_prefix="$W/art/" $dict "$W/corpus" >"$OUT/main.log" 2>&1
echo "libFuzzer rc $?"
tar -czf "$OUT/logs.tgz" fuzz-*.log
tot=0
for f in fuzz-*.log; do
    n=$(grep -a "stat::number_of_executed_units" "$f" | awk '{print $2}')
    echo "$f executions ${n:-none}"; tot=$((tot + ${n:-0}))
done
echo "total executions $tot; corpus $(ls "$W/corpus" | wc -l) inputs; artifacts: $(ls "$W/art" | wc -l)"
if [ -n "$(ls "$W/art")" ]; then tar -C "$W" -czf "$OUT/art.tgz" art; fi
