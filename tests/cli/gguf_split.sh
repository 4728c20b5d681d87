#!/usr/bin/env bash
# gguf_split.sh — split GGUF files (llama.cpp's gguf-split layout) through the CLI: `lmc convert
# --split-max-tensors N` writes PREFIX-0000k-of-0000K.gguf, `-m` on the first file reads them all
# with the logits and greedy ids of the single file; a later file alone, a missing file and a
# bad --split-max-tensors are refused with a message.
set -u
source "$(dirname "$0")/common.bash"
FX=tests/fixtures/qwen2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$LMC" convert $FX "$T/one.gguf" 2>"$T/err" && ok || bad "convert: $(cat "$T/err")"
"$LMC" convert $FX "$T/m.gguf" --split-max-tensors 7 2>"$T/err" && ok || bad "convert --split-max-tensors: $(cat "$T/err")"
n=$(ls "$T"/m-*-of-*.gguf 2>/dev/null | wc -l)
first=$(ls "$T"/m-00001-of-*.gguf 2>/dev/null)
[ "$n" -gt 2 ] && [ -n "$first" ] && ok || bad "split files: $n ($(ls "$T"))"
grep -q "wrote $n split files, the first $first" "$T/err" && ok || bad "convert's message: $(cat "$T/err")"
a=$("$LMC" generate -m "$T/one.gguf" --ids 1,2,3,4,5 -n 12 --greedy --print-ids 2>/dev/null)
b=$("$LMC" generate -m "$first" --ids 1,2,3,4,5 -n 12 --greedy --print-ids 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "greedy ids: single [$a] split [$b]"
"$LMC" logits -m "$T/one.gguf" --ids 1,2,3,4,5,6 --out "$T/a.bin" >/dev/null 2>&1
"$LMC" logits -m "$first" --ids 1,2,3,4,5,6 --out "$T/b.bin" >/dev/null 2>&1
[ -s "$T/a.bin" ] && cmp -s "$T/a.bin" "$T/b.bin" && ok || bad "logits of the split files differ from the single file's"
"$LMC" inspect -m "$first" >"$T/out" 2>&1 && grep -q "in $n gguf file(s)" "$T/out" && ok \
    || bad "inspect does not count $n files: $(grep -i file "$T/out" | head -3)"
second=$(ls "$T"/m-00002-of-*.gguf)
"$LMC" generate -m "$second" --ids 1,2 -n 2 >"$T/out" 2>&1
[ $? -ne 0 ] && grep -q "open the first one" "$T/out" && ok || bad "a later file alone: $(tail -2 "$T/out")"
rm "$second"
"$LMC" generate -m "$first" --ids 1,2 -n 2 >"$T/out" 2>&1
[ $? -ne 0 ] && grep -q "$(basename "$second")" "$T/out" && ok || bad "a missing file: $(tail -2 "$T/out")"
grep -qE "Sanitizer|runtime error|Segmentation" "$T/out" && bad "missing file: $(head -3 "$T/out")" || ok
"$LMC" convert $FX "$T/x.gguf" --split-max-tensors 0 >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "--split-max-tensors 0 is a usage error"
"$LMC" convert $FX "$T/x.bin" --split-max-tensors 3 >"$T/out" 2>&1
[ $? -ne 0 ] && grep -q "PREFIX.gguf" "$T/out" && ok || bad "a split output not named .gguf: $(tail -1 "$T/out")"
finish
