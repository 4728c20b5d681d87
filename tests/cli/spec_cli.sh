#!/usr/bin/env bash
# spec_cli.sh — `lmc generate/run --spec ngram|draft|mtp`: greedy ids identical to plain decoding
# (demo model, a sliding-window fixture rolled back at its cache limit, the Gemma 4 target with its
# MTP assistants), a self-draft accepts everything, the statistics line, seeded sampling repeats,
# --logits-out keeps its shape, and bad combinations are refused with the documented exit codes.
set -u
source "$(dirname "$0")/common.bash"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
DEMO=models/demo
P="And God said, Let there be light: and there was light. And God saw the light, that it was good"

same_ids() { # name, plain args..., -- spec args...
    local name=$1; shift
    local plain=() rest=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do plain+=("$1"); shift; done
    shift; rest=("$@")
    local a b
    a=$("$LMC" generate "${plain[@]}" --print-ids -t 1 2>/dev/null) || { bad "$name: plain run failed"; return; }
    b=$("$LMC" generate "${plain[@]}" "${rest[@]}" --print-ids -t 1 2>"$T/err") || { bad "$name: spec run failed: $(cat "$T/err")"; return; }
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "$name: ids differ: '$a' vs '$b'"
    grep -q "^lmc: spec " "$T/err" && ok || bad "$name: no spec statistics line"
}

same_ids "demo ngram" -m $DEMO -p "$P" -n 40 -- --spec ngram
same_ids "demo ngram 2..4, block 7" -m $DEMO -p "$P" -n 40 -- --spec ngram --ngram-min 2 --ngram-max 4 --draft-n 7
same_ids "demo self-draft" -m $DEMO -p "$P" -n 40 -- --draft-model $DEMO --draft-n 5
grep -Eq "drafted ([0-9]+), accepted \1 \(100.0%\)" "$T/err" && ok || bad "self-draft did not accept everything: $(cat "$T/err")"
same_ids "demo, repetition penalty, draft" -m $DEMO -p "$P" -n 30 --repeat-penalty 1.3 -- --spec draft --draft-model $DEMO
same_ids "mistral_swa at the rollback limit" -m tests/fixtures/mistral_swa --ids 1,5,9,5,9,5,9,3 -n 60 --ignore-eos --batch 5 -- --spec ngram --draft-n 4
same_ids "gemma2 self-draft, window 8" -m tests/fixtures/gemma2 --ids 1,5,9,5,9,5,9,3 -n 40 --ignore-eos --batch 7 -- --draft-model tests/fixtures/gemma2 --draft-n 6
G=tests/fixtures/gemma4_mtp
if [ -d $G/target ]; then
    same_ids "gemma4 mtp dense" -m $G/target --ids 1,5,9,33,7,90,12 -n 20 --ignore-eos -- --spec mtp --draft-model $G/assistant_dense --draft-n 3
    grep -Eq "drafted [1-9]" "$T/err" && ok || bad "mtp drafted nothing: $(cat "$T/err")"
    same_ids "gemma4 mtp centroid" -m $G/target --ids 1,5,9,33,7,90,12 -n 20 --ignore-eos -- --spec mtp --draft-model $G/assistant_centroid
    "$LMC" generate -m tests/fixtures/llama --ids 1,2 -n 2 --spec mtp --draft-model $G/assistant_dense >/dev/null 2>"$T/err"
    rc=$?; [ $rc -eq 1 ] && [ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "gemma4" "$T/err" && ok || bad "mtp beside llama: exit $rc, $(cat "$T/err")"
else
    bad "no gemma4_mtp fixture"
fi

# sampling: the same seed repeats, the text is the demo's English
s1=$("$LMC" generate -m $DEMO -p "$P" -n 30 --temp 0.8 --seed 7 --draft-model $DEMO --draft-n 3 -t 1 2>/dev/null)
s2=$("$LMC" generate -m $DEMO -p "$P" -n 30 --temp 0.8 --seed 7 --draft-model $DEMO --draft-n 3 -t 1 2>/dev/null)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok || bad "seeded speculative sampling does not repeat"
out=$("$LMC" run "In the beginning" -n 20 --spec ngram -t 1 2>/dev/null); rc=$?
[ $rc -eq 0 ] && case "$out" in "In the beginning"*) true ;; *) false ;; esac && ok || bad "lmc run --spec ngram: exit $rc: ${out:0:60}"

# --logits-out: [n_generated, vocab] f32 like plain decoding
"$LMC" generate -m $DEMO -p "$P" -n 12 --spec ngram --logits-out "$T/l.f32" -t 1 >/dev/null 2>&1
[ "$(stat -c %s "$T/l.f32" 2>/dev/null)" = $((12 * 4096 * 4)) ] && ok || bad "--logits-out size with --spec"

# refusals: usage errors exit 2, runtime errors exit 1 with one line
expect() { # code, args...
    local code=$1; shift
    "$LMC" generate "$@" >/dev/null 2>"$T/err"; local rc=$?
    [ $rc -eq "$code" ] && [ "$(wc -l < "$T/err")" -eq 1 ] && ok || bad "generate $*: exit $rc (want $code): $(cat "$T/err")"
}
expect 2 -m $DEMO --ids 1,2 --spec bogus
expect 2 -m $DEMO --ids 1,2 --spec draft
expect 2 -m $DEMO --ids 1,2 --spec ngram --draft-model $DEMO
expect 2 -m $DEMO --ids 1,2 --draft-n 4
expect 2 -m $DEMO --ids 1,2 --spec ngram --draft-n 0
expect 2 -m $DEMO --ids 1,2 --spec ngram --batch 4 --draft-n 4
expect 2 -m $DEMO --ids 1,2 --spec ngram --ngram-min 4 --ngram-max 2
expect 1 -m $DEMO --ids 1,2 --draft-model "$T/missing"
expect 1 -m tests/fixtures/llama --ids 1,2 --draft-model tests/fixtures/llama_tied_linear --draft-n 2
# a draft model with a smaller vocabulary drafts until the target emits an id it lacks
same_ids "smaller draft vocabulary" -m tests/fixtures/llama_tied_linear --ids 1,2,3 -n 20 --ignore-eos -- --draft-model tests/fixtures/llama
finish
