#!/usr/bin/env bash
# gguf_parity.sh — the F1 fixtures written as GGUF by `lmc convert` (llama.cpp's
# layout: q/k rows permuted for llama, gemma norms + 1, blk.* names) and run
# from the .gguf file give the reference logits and greedy ids; the demo model's
# GGUF carries its tokenizer and writes the same text. F1 is the exact products: --compute f32 (the
# default computes bf16 weights on bf16-rounded activations, F2: bf16_compute.sh).
set -u
source "$(dirname "$0")/common.bash"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for c in llama llama_bf16 llama_rope_llama3 llama_tied_linear mistral qwen2 qwen2_untied qwen3 gemma gemma2 \
         gemma3_text phi3 phi3_longrope; do
    FX=tests/fixtures/$c
    "$LMC" convert "$FX" "$T/$c.gguf" 2>"$T/err" || { bad "$c: convert failed: $(cat "$T/err")"; continue; }
    prompt=$(node -e 'console.log(require(process.argv[1]).prompt_ids.join(","))' "$PWD/$FX/ref.json")
    greedy=$(node -e 'console.log(require(process.argv[1]).greedy_ids.join(" "))' "$PWD/$FX/ref.json")
    n=$(echo "$greedy" | wc -w)
    "$LMC" logits -m "$T/$c.gguf" --ids "$prompt" --out "$T/p.f32" --compute f32 2>"$T/err" || { bad "$c: logits: $(cat "$T/err")"; continue; }
    got=$("$LMC" generate -m "$T/$c.gguf" --ids "$prompt" -n "$n" --greedy --ignore-eos --print-ids --compute f32 \
          --logits-out "$T/s.f32" 2>"$T/err") || { bad "$c: generate: $(cat "$T/err")"; continue; }
    [ "$got" = "$greedy" ] && ok || bad "$c: greedy ids from GGUF '$got' != '$greedy'"
    node tests/cli/cmp_logits.mjs "$FX" "$T/p.f32" "$T/s.f32" "$n" 2>"$T/err" && ok || bad "$c: $(cat "$T/err")"
done
# a checkpoint the converter cannot represent is refused by name
"$LMC" convert tests/fixtures/cohere "$T/x.gguf" 2>"$T/err" && bad "cohere converted" || ok
grep -qi "cohere" "$T/err" && ok || bad "convert refusal does not name the model_type: $(cat "$T/err")"
# the demo model through GGUF: same text as from safetensors (tokenizer embedded)
"$LMC" convert models/demo "$T/demo.gguf" 2>/dev/null && ok || bad "demo convert"
a=$("$LMC" run models/demo "In the beginning" -n 24 2>/dev/null)
b=$("$LMC" run "$T/demo.gguf" "In the beginning" -n 24 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "demo text differs through GGUF: '$a' vs '$b'"
"$LMC" ls "$T/demo.gguf" 2>/dev/null | grep -qE "llama +generic +7\.3M .* BF16" && ok || bad "lmc ls on a GGUF file: $("$LMC" ls "$T/demo.gguf" 2>&1 | tail -1)"
ta=$("$LMC" tokenize -m models/demo "And God said, Let there be light")
tb=$("$LMC" tokenize -m "$T/demo.gguf" "And God said, Let there be light")
[ -n "$ta" ] && [ "$ta" = "$tb" ] && ok || bad "lmc tokenize differs through GGUF: '$ta' vs '$tb'"
finish
