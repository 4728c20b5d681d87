#!/usr/bin/env bash
# spec_serve.sh — `lmc serve --spec ngram|draft`: completions at temperature 0 (plain, with a
# frequency penalty, in JSON mode, two at once) are the same text as a server without speculation,
# drafts are really verified (/metrics drafted and accepted counts; a self-draft keeps them all),
# and bad combinations are refused (exit 2 for usage, 1 with one line for a wrong assistant).
set -u
source "$(dirname "$0")/common.bash"
E=$(mktemp)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -f "$E" "$E".*; }
trap cleanup EXIT
# Same texts alone and batched need a token's products not to depend on its batch: true of every CPU
# kernel but AMX's tiles (bf16 weights' prefill); with bf16 rounding (the default) a last-bit
# difference can round an activation the other way, so on AMX machines every server computes exactly.
amx=(); grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null && amx=(--compute f32)
start() { # logfile args... → sets PORT
    local log=$1; shift
    "$LMC" serve --port 0 -t 1 "${amx[@]}" "$@" 2>"$log" &
    pids+=($!)
    PID=$!
    PORT=
    for _ in $(seq 200); do
        PORT=$(sed -n 's/.*listening on http:\/\/.*:\([0-9]*\) .*/\1/p' "$log")
        [ -n "$PORT" ] && return 0
        kill -0 "$PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
text() { # port json → the completion's text
    curl -sf "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' -d "$2" |
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{try{process.stdout.write(JSON.parse(s).choices[0].text)}catch(e){process.stdout.write("<bad response>")}})'
}
timeout 10 "$LMC" serve --spec draft --port 0 >/dev/null 2>"$E"; [ $? -eq 2 ] && ok || bad "serve --spec draft without a model not refused: $(cat "$E")"
timeout 20 "$LMC" serve --spec mtp --draft-model models/demo --port 0 >/dev/null 2>"$E"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$E")" -eq 1 ] && ok || bad "serve --spec mtp with a llama assistant: exit $rc: $(cat "$E")"
timeout 10 "$LMC" serve --spec ngram --draft-n 0 --port 0 >/dev/null 2>"$E"; [ $? -eq 2 ] && ok || bad "serve --draft-n 0 not refused"

start "$E.plain" --max-seqs 2 && P1=$PORT || bad "plain server did not start: $(cat "$E.plain")"
start "$E.spec" --max-seqs 2 --spec ngram --draft-n 5 && P2=$PORT || bad "spec server did not start: $(cat "$E.spec")"
start "$E.draft" --max-seqs 2 --draft-model models/demo --draft-n 4 && P3=$PORT || bad "draft server did not start: $(cat "$E.draft")"
if [ -n "${P1:-}" ] && [ -n "${P2:-}" ] && [ -n "${P3:-}" ]; then
    R1='{"prompt":"And God said, Let there be light: and there was light. And God said","max_tokens":48,"temperature":0}'
    R2='{"prompt":"In the beginning God created the heaven and the earth. And the earth was","max_tokens":40,"temperature":0,"frequency_penalty":0.4}'
    R3='{"prompt":"A JSON object of the tribes of Israel:","max_tokens":30,"temperature":0,"response_format":{"type":"json_object"}}'
    # the self-draft server's first request is plain greedy: every draft is kept
    text "$P3" "$R1" >/dev/null
    m=$(curl -sf "http://127.0.0.1:$P3/metrics")
    dr3=$(printf '%s\n' "$m" | sed -n 's/^lmc_spec_drafted_tokens_total \([0-9]*\).*/\1/p')
    ac3=$(printf '%s\n' "$m" | sed -n 's/^lmc_spec_accepted_tokens_total \([0-9]*\).*/\1/p')
    [ -n "$dr3" ] && [ "$dr3" -gt 0 ] && [ "$ac3" = "$dr3" ] && ok || bad "self-draft server: drafted '$dr3', accepted '$ac3'"
    for R in "$R1" "$R2" "$R3"; do
        a=$(text "$P1" "$R"); b=$(text "$P2" "$R"); c=$(text "$P3" "$R")
        [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "ngram server differs for $R: '$a' vs '$b'"
        [ "$a" = "$c" ] && ok || bad "draft-model server differs for $R: '$a' vs '$c'"
    done
    # two at once on the speculating server: each the same as alone
    a1=$(text "$P1" "$R1"); a2=$(text "$P1" "$R2")
    text "$P2" "$R1" > "$E.c1" & c1=$!
    text "$P2" "$R2" > "$E.c2" & c2=$!
    wait $c1 $c2
    [ "$(cat "$E.c1")" = "$a1" ] && [ "$(cat "$E.c2")" = "$a2" ] && ok || bad "concurrent speculative requests differ"
    text "$P3" "$R1" > "$E.c1" & c1=$!
    text "$P3" "$R2" > "$E.c2" & c2=$!
    wait $c1 $c2
    [ "$(cat "$E.c1")" = "$a1" ] && [ "$(cat "$E.c2")" = "$a2" ] && ok || bad "concurrent draft-model requests differ"
    m=$(curl -sf "http://127.0.0.1:$P2/metrics")
    acc=$(printf '%s\n' "$m" | sed -n 's/^lmc_spec_accepted_tokens_total \([0-9]*\).*/\1/p')
    dr=$(printf '%s\n' "$m" | sed -n 's/^lmc_spec_drafted_tokens_total \([0-9]*\).*/\1/p')
    [ -n "$acc" ] && [ -n "$dr" ] && [ "$dr" -gt 0 ] && [ "$acc" -gt 0 ] && [ "$acc" -le "$dr" ] && ok ||
        bad "metrics: drafted '$dr' accepted '$acc'"
    # tensor parallel over 2 CPU ranks, plain and speculating: the same texts, alone and two at once, as
    # one rank's. The ranks' partial sums of o_proj and down_proj add up in another order than one
    # rank's sums, so these servers compute exactly (--compute f32): with the activations rounded to
    # bf16 (the default) a last-bit difference can round an activation the other way
    start "$E.f32" --max-seqs 2 --compute f32 && P6=$PORT || bad "f32 server did not start: $(cat "$E.f32")"
    start "$E.tp" --max-seqs 2 --tp 2 --compute f32 && P4=$PORT || bad "tp 2 server did not start: $(cat "$E.tp")"
    start "$E.tps" --max-seqs 2 --tp 2 --spec ngram --draft-n 4 --compute f32 && P5=$PORT ||
        bad "tp 2 spec server did not start: $(cat "$E.tps")"
    if [ -n "${P4:-}" ] && [ -n "${P5:-}" ] && [ -n "${P6:-}" ]; then
        a1=$(text "$P6" "$R1"); a2=$(text "$P6" "$R2")
        for R in "$R1" "$R2" "$R3"; do
            a=$(text "$P6" "$R"); d=$(text "$P4" "$R"); e=$(text "$P5" "$R")
            [ -n "$a" ] && [ "$a" = "$d" ] && ok || bad "tp 2 server differs for $R: '$a' vs '$d'"
            [ "$a" = "$e" ] && ok || bad "tp 2 speculating server differs for $R: '$a' vs '$e'"
        done
        text "$P5" "$R1" > "$E.c1" & c1=$!
        text "$P5" "$R2" > "$E.c2" & c2=$!
        wait $c1 $c2
        [ "$(cat "$E.c1")" = "$a1" ] && [ "$(cat "$E.c2")" = "$a2" ] && ok || bad "concurrent tp 2 speculative requests differ"
        dr=$(curl -sf "http://127.0.0.1:$P5/metrics" | sed -n 's/^lmc_spec_drafted_tokens_total \([0-9]*\).*/\1/p')
        [ -n "$dr" ] && [ "$dr" -gt 0 ] && ok || bad "tp 2 speculating server drafted '$dr'"
    fi
fi
timeout 10 "$LMC" serve --tp 2 --spec mtp --draft-model models/demo --port 0 >/dev/null 2>"$E"; [ $? -eq 2 ] && ok ||
    bad "serve --tp 2 --spec mtp not refused: $(cat "$E")"
finish
