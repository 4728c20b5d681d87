#!/usr/bin/env bash
# mxfp4_quant.sh — MXFP4 checkpoints: `lmc quantize --mode mxfp4` (mlx's layout, U32 codes + U8
# exponents, no biases) and `lmc convert --type mxfp4` (ggml's block, GGUF type 39) on parity
# fixtures (dense and MoE: matmul_id on MXFP4 experts), run back: logits within the bound measured
# and written in docs/MODELS.md (4-bit E2M1 on these wide-spread random weights moves logits as
# much as 4-bit affine does). Config and tensor refusals: an mxfp4 block with other bits / group,
# affine side tensors under "mode": "mxfp4", biases beside mxfp4 codes, a missing exponent
# tensor, a truncated MXFP4 GGUF, an unknown quantization mode or method.
set -u
source "$(dirname "$0")/common.bash"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cfg_edit() { # cfg_edit DIR 'js statement on c (the config)'
    node -e 'const fs=require("fs");const p=process.argv[1]+"/config.json";const c=JSON.parse(fs.readFileSync(p));'"$2"';fs.writeFileSync(p,JSON.stringify(c))' "$1"
}
for c in llama qwen2 qwen3 gemma2 phi3 mixtral qwen2_moe; do
    FX=tests/fixtures/$c
    prompt=$(node -e 'console.log(require(process.argv[1]).prompt_ids.join(","))' "$PWD/$FX/ref.json")
    rm -rf "$T/q"
    "$LMC" quantize "$FX" "$T/q" --mode mxfp4 2>"$T/err" || { bad "$c: quantize --mode mxfp4: $(cat "$T/err")"; continue; }
    "$LMC" inspect "$T/q" --tensors >"$T/tens"
    grep -q "layers.0.self_attn.o_proj.weight *U32" "$T/tens" && grep -q "layers.0.self_attn.o_proj.scales *U8" "$T/tens" &&
        ! grep -q "o_proj.biases" "$T/tens" && ok || bad "$c: o_proj not stored as mxfp4 codes + U8 exponents"
    "$LMC" logits -m "$T/q" --ids "$prompt" --out "$T/l.f32" 2>"$T/err" || { bad "$c mxfp4: logits: $(cat "$T/err")"; continue; }
    read -r _ rel _ agree _ clear < <(node tests/cli/quant_err.mjs "$FX" "$T/l.f32")
    echo "$c mxfp4 (mlx): rel $rel, argmax agree $agree, on clear rows $clear" >&2
    at_most "$rel" 1.2 && ok || bad "$c mxfp4: logit error $rel > 1.2"
done
for c in llama qwen2_untied qwen3 gemma2 phi3 mistral; do
    FX=tests/fixtures/$c
    prompt=$(node -e 'console.log(require(process.argv[1]).prompt_ids.join(","))' "$PWD/$FX/ref.json")
    rm -f "$T/m.gguf"
    "$LMC" convert "$FX" "$T/m.gguf" --type mxfp4 2>"$T/err" || { bad "$c: convert --type mxfp4: $(cat "$T/err")"; continue; }
    "$LMC" inspect "$T/m.gguf" --tensors | grep -q "layers.0.self_attn.o_proj.weight *MXFP4" && ok || bad "$c: o_proj not MXFP4"
    "$LMC" logits -m "$T/m.gguf" --ids "$prompt" --out "$T/l.f32" 2>"$T/err" || { bad "$c MXFP4 gguf: logits: $(cat "$T/err")"; continue; }
    read -r _ rel _ agree _ clear < <(node tests/cli/quant_err.mjs "$FX" "$T/l.f32")
    echo "$c MXFP4 (gguf): rel $rel, argmax agree $agree, on clear rows $clear" >&2
    at_most "$rel" 1.0 && ok || bad "$c MXFP4 gguf: logit error $rel > 1.0"
done
# the fast kernels (int8 activations on AVX-512 / AVX2) against the exact reference backend on the same
# MXFP4 weights, 5 greedy decode steps: ids identical (these steps have clear gaps), the logits each
# step chose from within 5e-2 of the largest (measured up to 3.1e-2: the int8 activations' error)
for c in llama qwen3 mixtral gguf; do
    FX=tests/fixtures/${c/gguf/llama}
    prompt=$(node -e 'console.log(require(process.argv[1]).prompt_ids.join(","))' "$PWD/$FX/ref.json")
    M=$T/q
    if [ "$c" = gguf ]; then M=$T/m.gguf; "$LMC" convert "$FX" "$M" --type mxfp4 2>/dev/null; else rm -rf "$M"; "$LMC" quantize "$FX" "$M" --mode mxfp4 2>/dev/null; fi
    a=$("$LMC" generate -m "$M" --ids "$prompt" -n 5 --greedy --print-ids --logits-out "$T/a.f32" 2>/dev/null)
    b=$("$LMC" generate -m "$M" --ids "$prompt" -n 5 --greedy --print-ids --logits-out "$T/b.f32" --backend cpu-ref 2>/dev/null)
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "$c mxfp4: greedy ids cpu '$a' vs cpu-ref '$b'"
    d=$(node -e 'const fs=require("fs");const r=p=>{const b=fs.readFileSync(p);return new Float32Array(b.buffer,b.byteOffset,b.length/4)};
const a=r(process.argv[1]),b=r(process.argv[2]);let m=0,e=0;for(let i=0;i<b.length;i++){m=Math.max(m,Math.abs(b[i]));e=Math.max(e,Math.abs(a[i]-b[i]))}
console.log(a.length===b.length&&b.length>0?(e/m).toExponential(2):"NaN")' "$T/a.f32" "$T/b.f32")
    echo "$c mxfp4: decode cpu vs cpu-ref max |Δlogit| / max|logit| $d" >&2
    at_most "$d" 5e-2 && ok || bad "$c mxfp4: cpu vs cpu-ref $d > 5e-2"
done
FX=tests/fixtures/llama
prompt=$(node -e 'console.log(require(process.argv[1]).prompt_ids.join(","))' "$PWD/$FX/ref.json")
rm -rf "$T/q" && "$LMC" quantize "$FX" "$T/q" --mode mxfp4 2>/dev/null
"$LMC" ls "$T/q" 2>/dev/null | grep -qE "llama +generic .* mlx-mxfp4" && ok || bad "lmc ls on the mxfp4 copy: $("$LMC" ls "$T/q" 2>&1 | tail -1)"
# refusals
cp -r "$T/q" "$T/r1" && cfg_edit "$T/r1" 'c.quantization.bits=8;c.quantization_config.bits=8'
"$LMC" logits -m "$T/r1" --ids 1 --out "$T/x" 2>"$T/err" && bad "mxfp4 with bits 8 accepted" || ok
grep -q "mxfp4 quantization has 4 bits in groups of 32" "$T/err" && ok || bad "bits 8 message: $(cat "$T/err")"
cp -r "$T/q" "$T/r2" && cfg_edit "$T/r2" 'c.quantization.mode="nvfp4";c.quantization_config.mode="nvfp4"'
"$LMC" logits -m "$T/r2" --ids 1 --out "$T/x" 2>"$T/err" && bad "nvfp4 accepted" || ok
grep -q 'mode "nvfp4" is not supported' "$T/err" && ok || bad "nvfp4 message: $(cat "$T/err")"
cp -r "$T/q" "$T/r3" && cfg_edit "$T/r3" 'c.quantization_config={quant_method:"fp8"};delete c.quantization'
"$LMC" logits -m "$T/r3" --ids 1 --out "$T/x" 2>"$T/err" && bad "quant_method fp8 accepted" || ok
grep -q 'quantization method "fp8" is not supported' "$T/err" && ok || bad "fp8 message: $(cat "$T/err")"
# affine side tensors read as mxfp4 (F32 scales, biases present)
rm -rf "$T/a4" && "$LMC" quantize "$FX" "$T/a4" --bits 4 --group-size 32 2>/dev/null
cfg_edit "$T/a4" 'c.quantization.mode="mxfp4";c.quantization_config.mode="mxfp4"'
"$LMC" logits -m "$T/a4" --ids 1 --out "$T/x" 2>"$T/err" && bad "affine tensors under mode mxfp4 accepted" || ok
grep -q "must be U8 .* (mxfp4 exponents)" "$T/err" && ok || bad "affine-as-mxfp4 message: $(cat "$T/err")"
# a per-module override back to affine for an mxfp4-written layer: its scales are U8, no biases
cp -r "$T/q" "$T/r4" && cfg_edit "$T/r4" 'c.quantization["model.layers.0.self_attn.o_proj"]={bits:4,group_size:32,mode:"affine"}'
"$LMC" logits -m "$T/r4" --ids 1 --out "$T/x" 2>"$T/err" && bad "affine override over mxfp4 tensors accepted" || ok
grep -q "quantized weight is missing model.layers.0.self_attn.o_proj.biases" "$T/err" && ok || bad "override message: $(cat "$T/err")"
# a missing exponent tensor (rewritten without it)
node -e '
const fs=require("fs");const [src,dst]=process.argv.slice(1);const b=fs.readFileSync(src);
const n=Number(b.readBigUInt64LE(0));const h=JSON.parse(b.slice(8,8+n).toString());const data=b.slice(8+n);
delete h["model.layers.1.mlp.down_proj.scales"];const hs=Buffer.from(JSON.stringify(h));const len=Buffer.alloc(8);
len.writeBigUInt64LE(BigInt(hs.length));fs.writeFileSync(dst,Buffer.concat([len,hs,data]));' "$T/q/model.safetensors" "$T/ms.safetensors"
cp -r "$T/q" "$T/r5" && mv "$T/ms.safetensors" "$T/r5/model.safetensors"
"$LMC" logits -m "$T/r5" --ids 1 --out "$T/x" 2>"$T/err" && bad "missing exponents accepted" || ok
grep -q "missing model.layers.1.mlp.down_proj.scales" "$T/err" && ok || bad "missing-scales message: $(cat "$T/err")"
# a truncated MXFP4 GGUF
"$LMC" convert "$FX" "$T/m.gguf" --type mxfp4 2>/dev/null
head -c $(( $(stat -c %s "$T/m.gguf") - 100 )) "$T/m.gguf" >"$T/t.gguf"
"$LMC" logits -m "$T/t.gguf" --ids 1 --out "$T/x" 2>"$T/err" && bad "truncated MXFP4 GGUF accepted" || ok
[ -s "$T/err" ] && ok || bad "truncated GGUF: no message"
# Hugging Face quant_method mxfp4 passes the config (its `_blocks`/`_scales` pairs are the architecture's);
# a dense model with no such tensors then loads as usual
cp -r "$FX" "$T/hf" && cfg_edit "$T/hf" 'c.quantization_config={quant_method:"mxfp4",modules_to_not_convert:["lm_head"]}'
"$LMC" logits -m "$T/hf" --ids "$prompt" --out "$T/l.f32" 2>"$T/err" && ok || bad "quant_method mxfp4 config refused: $(cat "$T/err")"
finish
