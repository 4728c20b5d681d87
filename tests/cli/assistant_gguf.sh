#!/usr/bin/env bash
# assistant_gguf.sh — the Gemma 4 assistant through the CLI: `lmc convert` writes an assistant
# GGUF (the seed's layout), `lmc verify-gguf` passes it against its target and fails a cut
# copy, and `--spec mtp --draft FILE.gguf` gives the ids of plain greedy decoding.
set -u
source "$(dirname "$0")/common.bash"
FX=tests/fixtures/gemma4_mtp
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
plain=$("$LMC" generate -m $FX/target --ids 5,6,7,8 -n 10 --greedy --print-ids 2>/dev/null)
[ -n "$plain" ] && ok || bad "plain greedy on the target"
for head in dense centroid; do
    "$LMC" convert $FX/assistant_$head "$T/$head.gguf" 2>"$T/err" && ok || bad "convert $head: $(cat "$T/err")"
    "$LMC" verify-gguf "$T/$head.gguf" --target $FX/target >"$T/out" 2>&1 && grep -q ": ok$" "$T/out" && ok \
        || bad "verify-gguf $head: $(tail -3 "$T/out")"
    got=$("$LMC" generate -m $FX/target --ids 5,6,7,8 -n 10 --greedy --print-ids --spec mtp --draft "$T/$head.gguf" 2>"$T/err")
    [ "$got" = "$plain" ] && ok || bad "spec mtp from $head GGUF: '$got' vs plain '$plain' ($(tail -2 "$T/err"))"
    grep -q "spec mtp" "$T/err" && ok || bad "no speculation statistics line for $head"
done
head -c 2000 "$T/centroid.gguf" >"$T/cut.gguf"
"$LMC" verify-gguf "$T/cut.gguf" --target $FX/target >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 1 ] && ok || bad "verify-gguf on a cut file: exit $rc"
grep -qE "Sanitizer|runtime error|Segmentation" "$T/out" && bad "cut file: $(head -3 "$T/out")" || ok
"$LMC" convert $FX/assistant_dense "$T/q.gguf" --type q8_0 >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "--type on an assistant is a usage error"
finish
