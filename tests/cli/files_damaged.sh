#!/usr/bin/env bash
# files_damaged.sh — the CLI on truncated, corrupted and swapped model files: each run
# ends with exit code 1 and one clear line on stderr that names the file (or, for a
# header whose tensor names were damaged, the directory and the tensor), never a crash
# (signal, sanitizer report) and never output from a cut file.
set -u
source "$(dirname "$0")/common.bash"
FX=tests/fixtures/llama
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# run_damaged DESCRIPTION NAME_IN_MESSAGE MODEL: lmc logits must fail cleanly
run_damaged() {
    local what=$1 name=$2 model=$3 rc
    "$LMC" logits -m "$model" --ids 1,2,3 --out "$T/out.f32" >"$T/stdout" 2>"$T/stderr"
    rc=$?
    if [ "$rc" -ne 1 ]; then bad "$what: exit $rc, expected 1 ($(head -c 300 "$T/stderr"))"; return; fi
    if grep -q -E 'Sanitizer|runtime error|Segmentation|core dumped' "$T/stderr"; then bad "$what: $(head -c 300 "$T/stderr")"; return; fi
    [ "$(wc -l < "$T/stderr")" -eq 1 ] || { bad "$what: error is not one line: $(head -c 300 "$T/stderr")"; return; }
    grep -q -F "$name" "$T/stderr" && ok || bad "$what: error does not name $name: $(cat "$T/stderr")"
}

mkdir -p "$T/m"
cp "$FX/config.json" "$T/m/"
size=$(stat -c %s "$FX/model.safetensors")
hlen=$(od -An -t u8 -N 8 "$FX/model.safetensors" | tr -d ' ')

# the intact copy works (so the failures below are the damage, not the setup)
cp "$FX/model.safetensors" "$T/m/"
"$LMC" logits -m "$T/m" --ids 1,2,3 --out "$T/out.f32" 2>"$T/stderr" && ok || bad "intact copy fails: $(cat "$T/stderr")"

for cut in 0 5 8 $((8 + hlen / 2)) $((8 + hlen)) $((8 + hlen + 100)) $((size / 2)) $((size - 1)); do
    head -c "$cut" "$FX/model.safetensors" > "$T/m/model.safetensors"
    run_damaged "safetensors cut at $cut of $size" model.safetensors "$T/m"
done
cp "$FX/model.safetensors" "$T/m/"

# header damage: the length prefix, the JSON, a dtype, an offset
printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$T/m/model.safetensors" bs=1 seek=0 conv=notrunc status=none
run_damaged "header length 2^63" model.safetensors "$T/m"
cp "$FX/model.safetensors" "$T/m/"
printf '}' | dd of="$T/m/model.safetensors" bs=1 seek=8 conv=notrunc status=none
run_damaged "header JSON broken" model.safetensors "$T/m"
cp "$FX/model.safetensors" "$T/m/"
sed -i '0,/"F32"/s//"F99"/' "$T/m/model.safetensors"
run_damaged "unknown dtype" model.safetensors "$T/m"
cp "$FX/model.safetensors" "$T/m/"

# config.json cut in half, then not an object
head -c 100 "$FX/config.json" > "$T/m/config.json"
run_damaged "config.json cut" config.json "$T/m"
echo '[1, 2]' > "$T/m/config.json"
run_damaged "config.json not an object" config.json "$T/m"
cp "$FX/config.json" "$T/m/"

# a GGUF file cut short and with a bad magic
G=tests/fuzz/corpus/gguf/llama_bpe.gguf
"$LMC" logits -m "$G" --ids 1,2,3 --out "$T/out.f32" 2>"$T/stderr" && ok || bad "intact gguf fails: $(cat "$T/stderr")"
for cut in 3 24 100 $(( $(stat -c %s "$G") - 1 )); do
    head -c "$cut" "$G" > "$T/cut.gguf"
    run_damaged "gguf cut at $cut" cut.gguf "$T/cut.gguf"
done
{ printf 'FUGG'; tail -c +5 "$G"; } > "$T/cut.gguf"
run_damaged "gguf bad magic" cut.gguf "$T/cut.gguf"

# tokenizer.json cut: -p needs it, and says which file is broken
cp tests/oracle/tok/synth/bytelevel_roberta/tokenizer.json "$T/m/"
head -c 5000 tests/oracle/tok/synth/bytelevel_roberta/tokenizer.json > "$T/m/tokenizer.json"
"$LMC" generate -m "$T/m" -p "hello" -n 1 >"$T/stdout" 2>"$T/stderr"
rc=$?
[ "$rc" -eq 1 ] && grep -q tokenizer.json "$T/stderr" && ok || bad "cut tokenizer.json: exit $rc, $(head -c 300 "$T/stderr")"
finish
