#!/usr/bin/env bash
# tp.sh — `--tp N` through the CLI on parity fixtures (CPU ranks, one thread each):
# `lmc logits --tp 2/4` within F2 of the single-backend logits (and at F1 against the
# transformers reference), `lmc generate --tp 2/4 --greedy` reproduces the reference
# ids, `lmc bench --tp 2` runs; splits that do not divide are refused with exit 1 and a
# message, commands without tensor parallelism refuse --tp as a usage error (exit 2).
set -u
source "$(dirname "$0")/common.bash"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# max |a - b| <= rel * max |b| over two f32 files of equal size
within() {
    node -e '
const fs = require("fs");
const r = p => { const b = fs.readFileSync(p); return new Float32Array(b.buffer, b.byteOffset, b.length / 4); };
const a = r(process.argv[1]), b = r(process.argv[2]);
let s = 0, e = 0;
for (let i = 0; i < b.length; i++) { s = Math.max(s, Math.abs(b[i])); e = Math.max(e, Math.abs(a[i] - b[i])); }
if (a.length !== b.length || !(e <= +process.argv[3] * s)) { console.error(`max|d| ${e} scale ${s} (${a.length} vs ${b.length} floats)`); process.exit(1); }
' "$1" "$2" "$3"
}
for c in llama qwen2 gemma2 phi3 gpt_neox falcon mixtral qwen2_moe; do
    FX=tests/fixtures/$c
    prompt=$(node -e 'console.log(require(process.argv[1]).prompt_ids.join(","))' "$PWD/$FX/ref.json")
    n=$(node -e 'console.log(require(process.argv[1]).greedy_ids.length)' "$PWD/$FX/ref.json")
    want=$(node -e 'console.log(require(process.argv[1]).greedy_ids.join(" "))' "$PWD/$FX/ref.json")
    "$LMC" logits -m "$FX" --ids "$prompt" --out "$T/l1.f32" --threads 1 2>"$T/err" || { bad "$c: logits: $(cat "$T/err")"; continue; }
    for tp in 2 4; do
        "$LMC" logits -m "$FX" --ids "$prompt" --out "$T/l$tp.f32" --tp $tp 2>"$T/err" || { bad "$c tp $tp: logits: $(cat "$T/err")"; continue; }
        within "$T/l$tp.f32" "$T/l1.f32" 1e-3 2>"$T/err" && ok || bad "$c tp $tp: logits vs tp 1: $(cat "$T/err")"
        node tests/cli/cmp_logits.mjs "$FX" "$T/l$tp.f32" 2>"$T/err" && ok || bad "$c tp $tp: F1 vs reference: $(cat "$T/err")"
        got=$("$LMC" generate -m "$FX" --ids "$prompt" -n "$n" --greedy --ignore-eos --print-ids --tp $tp 2>"$T/err")
        [ "$got" = "$want" ] && ok || bad "$c tp $tp: greedy ids '$got', reference '$want' $(cat "$T/err")"
    done
done
FX=tests/fixtures/llama
"$LMC" bench -m "$FX" --tp 2 -p 8 -n 4 -r 1 >"$T/out" 2>"$T/err" && grep -q "cpu, tp 2" "$T/out" && ok || bad "bench --tp 2: $(cat "$T/err" "$T/out")"
# speculative decoding over tp ranks: rollbacks of rejected drafts reach every rank's KV, so the
# output is plain greedy's (the demo model: n-gram lookup accepts some drafts and rejects others)
P="In the beginning God created the heaven and the earth. And the earth was without form, and void. In the beginning God created"
plain=$("$LMC" generate -m models/demo -p "$P" -n 40 --greedy --ignore-eos --print-ids 2>"$T/err" | tail -n 1)
for s in "ngram" "draft --draft-model models/demo"; do
    got=$("$LMC" generate -m models/demo -p "$P" -n 40 --greedy --ignore-eos --print-ids --tp 2 --spec $s 2>"$T/err" | tail -n 1)
    [ -n "$plain" ] && [ "$got" = "$plain" ] && ok || bad "tp 2 --spec $s: ids '$got', plain '$plain'"
    grep -Eq "accepted [1-9][0-9]* " "$T/err" && ok || bad "tp 2 --spec $s accepted nothing: $(cat "$T/err")"
done
"$LMC" generate -m models/demo -p "$P" -n 40 --greedy --ignore-eos --print-ids --tp 2 --spec ngram 2>"$T/err" >/dev/null
grep -Eq "drafted ([0-9]+), accepted ([0-9]+)" "$T/err" && awk '{for(i=1;i<=NF;i++) if($i=="drafted") d=$(i+1)+0; else if($i=="accepted") a=$(i+1)+0} END {exit !(a < d)}' "$T/err" && ok || bad "tp 2 --spec ngram rejected no draft (no rollback exercised): $(cat "$T/err")"
"$LMC" generate -m models/demo -p "$P" -n 4 --tp 2 --spec mtp --draft-model models/demo >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--spec mtp does not run with --tp" "$T/err" && ok || bad "--spec mtp --tp 2: exit $rc, $(cat "$T/err")"
# refusals
"$LMC" generate -m "$FX" --ids 1,2,3 -n 2 --tp 3 >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "n_heads 4 is not divisible by --tp 3" "$T/err" && ok || bad "tp 3: exit $rc, $(cat "$T/err")"
"$LMC" generate -m tests/fixtures/olmo2 --ids 1,2,3 -n 2 --tp 2 >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "over all heads" "$T/err" && ok || bad "olmo2 tp 2: exit $rc, $(cat "$T/err")"
"$LMC" perplexity -m "$FX" --tp 2 >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--tp" "$T/err" && ok || bad "perplexity --tp: exit $rc, $(cat "$T/err")"
"$LMC" generate -m "$FX" --ids 1,2 --tp 0 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "--tp 0 accepted"
finish
