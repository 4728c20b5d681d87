#!/usr/bin/env bash
# gguf_gptoss.sh — the gpt_oss fixture written as GGUF by `lmc convert` in llama.cpp's gpt-oss layout
# (HF's interleaved gate_up_proj split into blk.N.ffn_gate_exps / ffn_up_exps [D, I, E] with their
# biases [I, E], attn_sinks, post_attention_norm, router ffn_gate_inp with bias) and run from the file
# (the model's separate gate/up form, glu_clamp_split):
#   bf16 (the fixture's own type), f32 and f16 copies: the GGUF gives the same logits as the safetensors
#   checkpoint it came from (≤ 1e-6 of the largest logit), the reference's greedy ids and F1 logits
#   (--compute f32: the exact products F1 is defined on);
#   q8_0 / q4_0 / mxfp4: logits within the bounds measured and written in docs/MODELS.md;
#   configs llama.cpp's layout cannot express are refused by name.
set -u
source "$(dirname "$0")/common.bash"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
FX=tests/fixtures/gpt_oss
# retype SRC DST F32|F16: DST/model.safetensors = SRC's float tensors (BF16, F16 or F32) as the type
# named (F16: round to nearest even), config copied
retype() {
    mkdir -p "$2" && cp "$1/config.json" "$2/" && node -e '
const fs=require("fs");const b=fs.readFileSync(process.argv[1]+"/model.safetensors");const to=process.argv[3];
const n=Number(b.readBigUInt64LE(0));const h=JSON.parse(b.slice(8,8+n).toString());const base=8+n;
const f32=new Float32Array(1),u32=new Uint32Array(f32.buffer);
function h2f(x){const s=x&0x8000?-1:1,e=(x>>>10)&31,m=x&1023;return e===0?s*m*2**-24:e===31?(m?NaN:s*Infinity):s*(1+m/1024)*2**(e-15)}
function rd(t,a,i){if(t==="F32")return b.readFloatLE(a+4*i);if(t==="BF16"){u32[0]=b.readUInt16LE(a+2*i)<<16;return f32[0]}
 if(t==="F16")return h2f(b.readUInt16LE(a+2*i));throw new Error("dtype "+t)}
function f2h(x){f32[0]=x;const u=u32[0],s=(u>>>16)&0x8000;let e=((u>>>23)&0xff)-112,m=u&0x7fffff;
 if(e>=31)return s|0x7c00; if(e<=0){if(e<-10)return s;m|=0x800000;const sh=14-e;let r=m>>>sh;const rem=m&((1<<sh)-1),half=1<<(sh-1);
 if(rem>half||(rem===half&&(r&1)))r++;return s|r;}
 let r=(e<<10)|(m>>>13);const rem=m&0x1fff;if(rem>0x1000||(rem===0x1000&&(r&1)))r++;return s|r;}
const names=Object.keys(h).filter(k=>k!=="__metadata__").sort();const out={};const parts=[];let off=0;
for(const k of names){const t=h[k];const [a,z]=t.data_offsets;const es=t.dtype==="F32"?4:2;const cnt=(z-a)/es;
 const o=Buffer.alloc(cnt*(to==="F32"?4:2));
 for(let i=0;i<cnt;i++){const v=rd(t.dtype,base+a,i);if(to==="F32")o.writeFloatLE(v,4*i);else o.writeUInt16LE(f2h(v),2*i)}
 out[k]={dtype:to,shape:t.shape,data_offsets:[off,off+o.length]};off+=o.length;parts.push(o);}
let hj=Buffer.from(JSON.stringify(out));const pad=(8-hj.length%8)%8;hj=Buffer.concat([hj,Buffer.alloc(pad,0x20)]);
const len=Buffer.alloc(8);len.writeBigUInt64LE(BigInt(hj.length));
fs.writeFileSync(process.argv[2]+"/model.safetensors",Buffer.concat([len,hj,...parts]));' "$1" "$2" "$3"
}
prompt=$(node -e 'console.log(require(process.argv[1]).prompt_ids.join(","))' "$PWD/$FX/ref.json")
greedy=$(node -e 'console.log(require(process.argv[1]).greedy_ids.join(" "))' "$PWD/$FX/ref.json")
n=$(echo "$greedy" | wc -w)
retype "$FX" "$T/f32" F32 && retype "$FX" "$T/f16" F16 || bad "retyped copies of the fixture"
for v in bf16 f32 f16; do
    src=$FX; [ "$v" = bf16 ] || src=$T/$v
    "$LMC" convert "$src" "$T/$v.gguf" 2>"$T/err" || { bad "$v: convert failed: $(cat "$T/err")"; continue; }
    "$LMC" inspect "$T/$v.gguf" --tensors >"$T/ins" 2>&1
    grep -qE "experts\.3\.up_proj\.weight +${v^^} +\[32, 64\]" "$T/ins" && ok || bad "$v: expert 3's up_proj missing or not ${v^^} [32, 64]"
    grep -qE "experts\.gate_proj\.bias +F32 +\[4, 32\]" "$T/ins" && ok || bad "$v: stacked gate bias missing or not F32 [4, 32]"
    grep -qE "self_attn\.sinks +F32 +\[4\]" "$T/ins" && ok || bad "$v: sinks missing or not F32"
    "$LMC" logits -m "$src" --ids "$prompt" --out "$T/a.f32" --compute f32 2>/dev/null &&
        "$LMC" logits -m "$T/$v.gguf" --ids "$prompt" --out "$T/b.f32" --compute f32 2>"$T/err" || { bad "$v: logits: $(cat "$T/err")"; continue; }
    d=$(maxrel "$T/b.f32" "$T/a.f32")
    echo "gpt_oss $v: GGUF vs safetensors logits $d" >&2
    at_most "$d" 1e-6 && ok || bad "$v: GGUF vs safetensors logits differ by $d"
    [ "$v" = f16 ] && continue
    got=$("$LMC" generate -m "$T/$v.gguf" --ids "$prompt" -n "$n" --greedy --ignore-eos --print-ids --compute f32 \
          --logits-out "$T/s.f32" 2>"$T/err") || { bad "$v: generate: $(cat "$T/err")"; continue; }
    [ "$got" = "$greedy" ] && ok || bad "$v: greedy ids from GGUF '$got' != '$greedy'"
    node tests/cli/cmp_logits.mjs "$FX" "$T/b.f32" "$T/s.f32" "$n" 2>"$T/err" && ok || bad "$v: $(cat "$T/err")"
done
# quantized matrices (experts included): measured bounds
for t in q8_0 q4_0 mxfp4; do
    "$LMC" convert "$FX" "$T/m.gguf" --type "$t" 2>"$T/err" || { bad "$t: convert: $(cat "$T/err")"; continue; }
    "$LMC" inspect "$T/m.gguf" --tensors | grep -qE "experts\.0\.gate_proj\.weight +${t^^}" && ok || bad "$t: experts not stored as $t"
    "$LMC" logits -m "$T/m.gguf" --ids "$prompt" --out "$T/l.f32" 2>"$T/err" || { bad "$t: logits: $(cat "$T/err")"; continue; }
    read -r _ rel _ agree _ clear < <(node tests/cli/quant_err.mjs "$FX" "$T/l.f32")
    echo "gpt_oss $t: rel $rel, argmax agree $agree, on clear rows $clear" >&2
    bound=0.8; [ "$t" = q8_0 ] && bound=0.15
    at_most "$rel" "$bound" && ok || bad "$t: logit error $rel > $bound"
done
# configs llama.cpp's gpt-oss layout cannot express are refused by name
refuse() { # refuse WHAT JS-EDIT: the fixture with config c edited by JS-EDIT must not convert, naming WHAT
    rm -rf "$T/x" && mkdir "$T/x" && cp "$FX"/* "$T/x/"
    node -e 'const fs=require("fs");const p=process.argv[1]+"/config.json";const c=JSON.parse(fs.readFileSync(p));'"$2"';fs.writeFileSync(p,JSON.stringify(c))' "$T/x"
    "$LMC" convert "$T/x" "$T/x.gguf" 2>"$T/err" && bad "converted with $1" || ok
    grep -q "$1" "$T/err" && ok || bad "refusal does not name $1: $(cat "$T/err")"
}
refuse "swiglu_limit" 'c.swiglu_limit=5'
refuse "layer_types" 'c.layer_types=["full_attention","sliding_attention"]'
refuse "truncate" 'c.rope_parameters.truncate=true'
finish
