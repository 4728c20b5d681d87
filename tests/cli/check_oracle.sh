#!/usr/bin/env bash
# check_oracle.sh — `lmc check --oracle` without torch (CI has none): a clear refusal, exit 1;
# and the oracle's config shrinker (tools/oracle/shrink.py, no torch needed) on real-shaped
# configs: sizes become the tiny shape, every other knob stays, per-layer lists are cut.
# The full path (transformers builds the case, the F1 gate runs) needs torch: run it with
# `lmc check DIR --oracle` where torch is installed (docs/DEVELOPING.md).
set -u
source "$(dirname "$0")/common.bash"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

"$LMC" check tests/fixtures/qwen3_moe --oracle --python /bin/false >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 1 ] && ok || bad "no-torch oracle: exit $rc"
grep -q "needs /bin/false with torch and transformers" "$T/err" && ok || bad "no-torch message: $(cat "$T/err")"
grep -q "^verdict: runs" "$T/out" && ok || bad "the plain check still runs first: $(cat "$T/out")"

"$LMC" check tests/fixtures/qwen3_moe --python >"$T/out" 2>"$T/err"
[ $? -eq 2 ] && ok || bad "--python without a program is a usage error"

if command -v python3 >/dev/null; then
    cat >"$T/big.json" <<'JSON'
{"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "torch_dtype": "bfloat16",
 "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
 "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
 "num_experts_per_tok": 8, "norm_topk_prob": true, "vocab_size": 151936, "bos_token_id": 151643,
 "eos_token_id": 151645, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
 "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
 "sliding_window": 4096, "layer_types": ["full_attention", "full_attention", "full_attention"],
 "mlp_only_layers": [0, 47], "tie_word_embeddings": false}
JSON
    python3 - "$T/big.json" >"$T/py" 2>&1 <<'PY'
import sys
sys.path.insert(0, "tools/oracle")
import shrink
c = shrink.load_case(sys.argv[1])
k = c["config"]
want = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
        "num_experts_per_tok": 2, "vocab_size": 256, "bos_token_id": 1, "eos_token_id": 2,
        "sliding_window": 8, "mlp_only_layers": [0], "norm_topk_prob": True}
bad = {n: (k.get(n), v) for n, v in want.items() if k.get(n) != v}
bad.update({n: k[n] for n in ("architectures", "torch_dtype") if n in k})
if k["rope_scaling"] != {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}:
    bad["rope_scaling"] = k["rope_scaling"]
if k["layer_types"] != ["full_attention", "full_attention"]:
    bad["layer_types"] = k["layer_types"]
if c["model_type"] != "qwen3_moe" or "model_type" in k or c.get("router") != {"n_expert": 8, "k": 2}:
    bad["case"] = (c["model_type"], c.get("router"))
print("BAD", bad) if bad else print("OK")
PY
    grep -q "^OK$" "$T/py" && ok || bad "shrink.py: $(cat "$T/py")"
fi
finish
