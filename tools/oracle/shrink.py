"""Turn a real checkpoint's config.json into a tiny parity case (for `lmc check --oracle`).

Owned by the oracle. The case keeps every knob of the given config (model_type, rope,
norms, activations, biases, windows, MoE routing, multipliers, ...) and replaces only the
sizes with the tiny shape of cases.BASE: hidden 64, 4 heads of 16, 2 KV heads, 2 layers,
intermediate 128, vocabulary 256; expert counts are capped at 8 (top-k at 2 unless it was
1), per-layer lists are cut to the new layer count, and windows and original rope contexts
are capped below the prompt so that they still act. Keys that only describe the file
(architectures, dtype, quantization, auto_map, ...) are dropped. Pure data: no torch.
"""

import copy
import json

import cases as C

DROP_KEYS = ("model_type", "architectures", "torch_dtype", "dtype", "transformers_version", "auto_map",
             "quantization_config", "_name_or_path", "use_cache", "model_name", "name_or_path")
# size keys -> tiny value
SIZES = {
    "hidden_size": 64, "n_embd": 64, "d_model": 64,
    "num_attention_heads": 4, "n_head": 4,
    "intermediate_size": 128, "n_inner": 128, "ffn_hidden_size": 128,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "shared_intermediate_size": 48,
    "vocab_size": 256,
    "max_position_embeddings": 256, "n_positions": 256,
}
LAYER_KEYS = ("num_hidden_layers", "n_layer")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOPK_KEYS = ("num_experts_per_tok", "moe_k", "moe_topk", "top_k_experts")
KV_KEYS = ("num_key_value_heads", "num_kv_heads")
N_LAYERS = 2
WINDOW = 8        # sliding windows capped here (the prompt is 32 tokens)
ORIG_CTX = 16     # original_max_position_embeddings capped here


def _shrink_text(cfg):
    out = {k: v for k, v in cfg.items() if k not in DROP_KEYS}
    for k, v in SIZES.items():
        if k in out and out[k] is not None:
            out[k] = v
    if "head_dim" in out and out["head_dim"]:
        out["head_dim"] = 16
    for k in KV_KEYS:
        if k in out and out[k]:
            out[k] = 1 if out[k] == 1 else 2  # keep multi-query as multi-query
    for k in LAYER_KEYS:
        if k in out:
            out[k] = N_LAYERS
    for k in EXPERT_KEYS:
        if isinstance(out.get(k), int) and out[k] > 0:
            out[k] = min(out[k], 8)
    for k in TOPK_KEYS:
        if isinstance(out.get(k), int) and out[k] > 1:
            out[k] = 2
    for k in ("n_group", "topk_group"):
        if isinstance(out.get(k), int) and out[k] > 1:
            out[k] = 2 if k == "n_group" else 1
    for k in ("first_k_dense_replace", "moe_layer_start_index"):
        if isinstance(out.get(k), int) and out[k] > 0:
            out[k] = 1
    if isinstance(out.get("mlp_only_layers"), list):
        out["mlp_only_layers"] = [i for i in out["mlp_only_layers"] if i < N_LAYERS]
    for k in ("layer_types", "no_rope_layers"):
        if isinstance(out.get(k), list):
            out[k] = out[k][:N_LAYERS]
    if isinstance(out.get("sliding_window"), int) and out["sliding_window"] > WINDOW:
        out["sliding_window"] = WINDOW
    for holder in (out, out.get("rope_parameters"), out.get("rope_scaling")):
        if not isinstance(holder, dict):
            continue
        subs = [holder] + [v for v in holder.values() if isinstance(v, dict)]
        for d in subs:
            if isinstance(d.get("original_max_position_embeddings"), int):
                d["original_max_position_embeddings"] = min(d["original_max_position_embeddings"], ORIG_CTX)
            for f in ("short_factor", "long_factor"):
                if isinstance(d.get(f), list):  # one factor per rotary pair of the new head size
                    rot = int(16 * float(d.get("partial_rotary_factor", out.get("partial_rotary_factor", 1.0))))
                    d[f] = (d[f] * 64)[:max(rot // 2, 1)]
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):  # special ids inside the tiny vocabulary
        if k in out and out[k] is not None:
            out[k] = C.BASE[k]
    out["tie_word_embeddings"] = bool(cfg.get("tie_word_embeddings", False))
    return out


def case_from_config(cfg, name="candidate"):
    """A cases.py entry for a real config (a dict loaded from config.json)."""
    cfg = copy.deepcopy(cfg)
    mt = cfg.get("model_type")
    if not mt:
        raise ValueError("config.json has no model_type")
    if isinstance(cfg.get("text_config"), dict):
        conf = {k: v for k, v in cfg.items() if k not in DROP_KEYS and k not in SIZES}
        conf["text_config"] = _shrink_text(cfg["text_config"])
        drop = []
    else:
        conf = _shrink_text(cfg)
        # BASE keys the config spells otherwise (gpt2's n_embd, ...) must not be added beside them
        drop = [k for k in C.BASE if k not in conf and any(a in conf for a in ("n_embd", "n_layer"))]
    tied = bool(cfg.get("tie_word_embeddings", False))
    case = {
        "name": name,
        "model_type": mt,
        "config": conf,
        "dtype": "float32", "n_prompt": 32, "n_greedy": 8, "seed": 9001,
        "spelling": "none" if "rope_parameters" not in conf and "rope_scaling" not in conf
                    and "rope_theta" not in conf else "new",
        "knobs": ["generated by lmc check --oracle from a real config.json"],
        "description": "Tiny %s with the knobs of a real checkpoint's config." % mt,
    }
    if drop:
        case["base_drop"] = drop
    if tied:
        case["linear_gain"] = 2.0
    if mt.startswith("gemma"):
        case.update({"norm_init": "zero_centered", "embed_std": 0.1})
    for k in EXPERT_KEYS:
        n = conf.get(k) if "text_config" not in conf else conf["text_config"].get(k)
        if isinstance(n, int) and n > 0:
            topk = next((conf.get(t) for t in TOPK_KEYS if isinstance(conf.get(t), int)), 2)
            case["router"] = {"n_expert": n, "k": topk}
    return case


def load_case(path, name="candidate"):
    with open(path) as f:
        return case_from_config(json.load(f), name)
