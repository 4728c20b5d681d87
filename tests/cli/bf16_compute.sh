#!/usr/bin/env bash
# bf16_compute.sh — --compute bf16 (F2): parity fixtures converted to bf16 GGUF, their prompt logits
# with the activations rounded to bf16 within 2e-2 of max |logit| of the exact f32 products on the
# same weights, the same argmax wherever the f32 top-2 gap is clear (≥ 0.05 · max), and not
# identical to them (the rounding took place); no --compute gives the bf16 logits bit for bit. Without
# AVX-512 BF16 lmc says so and keeps f32 products: then the logits must be identical. An unknown
# precision is refused.
set -u
source "$(dirname "$0")/common.bash"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$LMC" logits -m tests/fixtures/llama --ids 1,2 --out "$T/x.f32" --compute f16 2>"$T/err" && bad "--compute f16 accepted" ||
    { grep -q "f32 or bf16" "$T/err" && ok || bad "--compute f16: unclear error: $(cat "$T/err")"; }
for c in llama qwen2_untied qwen3 gemma2 phi3; do
    FX=tests/fixtures/$c
    prompt=$(node -e 'console.log(require(process.argv[1]).prompt_ids.join(","))' "$PWD/$FX/ref.json")
    "$LMC" convert "$FX" "$T/m.gguf" --type bf16 2>"$T/err" || { bad "$c: convert: $(cat "$T/err")"; continue; }
    "$LMC" logits -m "$T/m.gguf" --ids "$prompt" --out "$T/f.f32" --compute f32 2>"$T/err" || { bad "$c f32: $(cat "$T/err")"; continue; }
    "$LMC" logits -m "$T/m.gguf" --ids "$prompt" --out "$T/b.f32" --compute bf16 2>"$T/err" || { bad "$c bf16: $(cat "$T/err")"; continue; }
    nob=$(grep -c "no AVX-512 BF16" "$T/err")
    # the default for bf16 weights is bf16 compute: the same logits bit for bit
    "$LMC" logits -m "$T/m.gguf" --ids "$prompt" --out "$T/d.f32" 2>"$T/err" || { bad "$c default: $(cat "$T/err")"; continue; }
    cmp -s "$T/b.f32" "$T/d.f32" && ok || bad "$c: the default compute is not --compute bf16"
    if [ "$nob" != 0 ]; then
        cmp -s "$T/f.f32" "$T/b.f32" && ok || bad "$c: without bf16 products the logits changed"
        continue
    fi
    read -r rel agree < <(node -e '
const fs=require("fs");const r=p=>{const b=fs.readFileSync(p);return new Float32Array(b.buffer,b.byteOffset,b.length/4)};
const f=r(process.argv[1]),b=r(process.argv[2]),V=+process.argv[3];let m=0,e=0,clear=0,same=0;
for(let i=0;i<f.length;i++){m=Math.max(m,Math.abs(f[i]));e=Math.max(e,Math.abs(f[i]-b[i]))}
for(let row=0;row<f.length/V;row++){const o=row*V;let a=0,s=-1;
 for(let i=1;i<V;i++){if(f[o+i]>f[o+a]){s=a;a=i}else if(s<0||f[o+i]>f[o+s])s=i}
 let ab=0;for(let i=1;i<V;i++)if(b[o+i]>b[o+ab])ab=i;
 if(f[o+a]-f[o+s]>=0.05*m){clear++;if(ab===a)same++}}
console.log((f.length===b.length&&f.length?e/m:NaN).toExponential(2),same+"/"+clear)' "$T/f.f32" "$T/b.f32" \
        "$(node -e 'console.log(require(process.argv[1]).vocab_size)' "$PWD/$FX/ref.json")")
    echo "$c: bf16 compute vs f32 on bf16 weights: rel $rel, argmax on clear rows $agree" >&2
    at_most "$rel" 2e-2 && ok || bad "$c: bf16 compute logit error $rel > 2e-2"
    node -e "process.exit(+process.argv[1] > 0 ? 0 : 1)" "$rel" && ok || bad "$c: bf16 compute gave the f32 logits bit for bit"
    [ "${agree%/*}" = "${agree#*/}" ] && ok || bad "$c: argmax differs on clear rows ($agree)"
done
# lmc bench says which products bf16 weights got
"$LMC" bench -m tests/fixtures/llama -p 4 -n 2 -r 1 --threads 1 --compute f32 2>/dev/null | grep -q "bf16 weights: exact f32" &&
    ok || bad "bench --compute f32 does not say exact f32"
want="bf16 compute"; [ "${nob:-0}" != 0 ] && want="exact f32"
"$LMC" bench -m tests/fixtures/llama -p 4 -n 2 -r 1 --threads 1 2>/dev/null | grep -q "bf16 weights: $want" &&
    ok || bad "bench by default does not say $want"
finish
