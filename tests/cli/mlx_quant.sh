#!/usr/bin/env bash
# mlx_quant.sh — `lmc quantize` (MLX affine) on parity fixtures and the demo model, loaded back
# through the config's quantization block: logits within measured bounds of the float64
# reference (8-bit: every clear row's argmax unchanged), fused weights (phi3) and tied
# quantized embeddings work, and the 4-bit demo model still writes English.
set -u
source "$(dirname "$0")/common.bash"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for c in llama llama_bf16 qwen2 qwen3 gemma2 phi3 cohere; do
    FX=tests/fixtures/$c
    prompt=$(node -e 'console.log(require(process.argv[1]).prompt_ids.join(","))' "$PWD/$FX/ref.json")
    for b in 8 4; do
        rm -rf "$T/q"
        "$LMC" quantize "$FX" "$T/q" --bits "$b" --group-size 32 2>"$T/err" || { bad "$c $b-bit: quantize: $(cat "$T/err")"; continue; }
        "$LMC" inspect "$T/q" --tensors | grep -q "layers.0.self_attn.o_proj.weight *U32" && ok || bad "$c $b-bit: o_proj not packed"
        "$LMC" logits -m "$T/q" --ids "$prompt" --out "$T/l.f32" 2>"$T/err" || { bad "$c $b-bit: logits: $(cat "$T/err")"; continue; }
        read -r _ rel _ agree _ clear < <(node tests/cli/quant_err.mjs "$FX" "$T/l.f32")
        echo "$c mlx$b: rel $rel, argmax agree $agree, on clear rows $clear" >&2
        if [ "$b" = 8 ]; then
            at_most "$rel" 0.08 && ok || bad "$c 8-bit: logit error $rel > 0.08"
            [ "${clear%/*}" = "${clear#*/}" ] && ok || bad "$c 8-bit: argmax differs on clear rows ($clear)"
        else
            at_most "$rel" 1.0 && ok || bad "$c 4-bit: logit error $rel > 1.0"
        fi
    done
done
# quantizing twice is refused
"$LMC" quantize "$T/q" "$T/qq" 2>"$T/err" && bad "re-quantize accepted" || ok
grep -q "already quantized" "$T/err" && ok || bad "re-quantize message: $(cat "$T/err")"
# the 4-bit demo model
rm -rf "$T/demo4"
"$LMC" quantize models/demo "$T/demo4" --bits 4 2>/dev/null && ok || bad "demo quantize"
"$LMC" ls "$T/demo4" 2>/dev/null | grep -qE "llama +generic +7\.3M .* mlx4/g64" && ok || bad "lmc ls on the 4-bit demo: $("$LMC" ls "$T/demo4" 2>&1 | tail -1)"
out=$("$LMC" run "$T/demo4" "In the beginning" -n 80 2>/dev/null)
words=$(printf '%s' "$out" | tr -c "A-Za-z'\n" ' ' | tr ' ' '\n' | sed "s/'s\$//; s/'//g" | grep -v '^$')
n=$(printf '%s\n' "$words" | grep -c .)
known=$(printf '%s\n' "$words" | tr 'A-Z' 'a-z' | grep -c -x -i -F -f <(tr 'A-Z' 'a-z' < /usr/share/dict/words))
[ "$n" -ge 30 ] && [ $((known * 100)) -ge $((n * 80)) ] && ok || bad "4-bit demo text: $known of $n words English"
finish
