#!/usr/bin/env python3
"""mtp_synth_fast.py — the models of bench/mtp_synth.py (a random-weight Gemma 4 target, hidden
1536, 8 layers, vocab 262144, and its dense-head and centroid-head 4-layer assistants) written
without torch or transformers: the config.json keys transformers 5.17 writes for these configs and
random bf16 weights (magnitudes 2^-9 .. 2^-6, random signs; norms and layer_scalar 1), in seconds
instead of the minute and a half torch's initialisation takes on the GPU machine. Random weights:
drafts are never accepted, the runs measure mechanical costs (bench/mtp_run.sh).

    python3 bench/mtp_synth_fast.py OUT [layers] [vocab]
"""
import array
import json
import os
import random
import struct
import sys

OUT = sys.argv[1]
LAYERS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
V = int(sys.argv[3]) if len(sys.argv) > 3 else 262144
random.seed(0)
ROPE = {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}
# high bytes of bf16 values: sign and the top 7 exponent bits (exponents 118..121 with the low byte's bit)
HI = bytes([(0x3B, 0x3C, 0xBB, 0xBC)[b & 3] for b in range(256)])
ONE = struct.pack("<H", 0x3F80)


def rand_bf16(n):
    buf = bytearray(2 * n)
    buf[0::2] = os.urandom(n)
    buf[1::2] = os.urandom(n).translate(HI)
    return buf


def write_st(path, tensors):
    """tensors: list of (name, dtype, shape, bytes)"""
    header, off = {}, 0
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)


def text_config(hidden, inter, layers, heads, types, shared):
    return {"attention_bias": False, "attention_dropout": 0.0, "attention_k_eq_v": False, "bos_token_id": 2,
            "enable_moe_block": False, "eos_token_id": 1, "final_logit_softcapping": 30.0 if not shared else None,
            "global_head_dim": 512, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": hidden, "hidden_size_per_layer_input": 0, "initializer_range": 0.02,
            "intermediate_size": inter, "layer_types": types, "max_position_embeddings": 4096,
            "model_type": "gemma4_text", "moe_intermediate_size": None, "num_attention_heads": heads,
            "num_experts": None, "num_hidden_layers": layers, "num_key_value_heads": 2,
            "num_kv_shared_layers": shared, "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_parameters": ROPE,
            "sliding_window": 512, "tie_word_embeddings": True, "top_k_experts": None,
            "use_bidirectional_attention": None, "use_cache": True, "use_double_wide_mlp": False,
            "vocab_size": V, "vocab_size_per_layer_input": V if not shared else 0}


def layer_tensors(i, hidden, inter, heads, hd, own_kv):
    p = f"model.layers.{i}."
    t = [(p + "input_layernorm.weight", [hidden]), (p + "post_attention_layernorm.weight", [hidden]),
         (p + "pre_feedforward_layernorm.weight", [hidden]), (p + "post_feedforward_layernorm.weight", [hidden]),
         (p + "self_attn.q_norm.weight", [hd])]
    out = [(n, "BF16", s, ONE * s[0]) for n, s in t]
    out.append((p + "layer_scalar", "BF16", [1], ONE))
    mats = [("self_attn.q_proj", [heads * hd, hidden]), ("self_attn.o_proj", [hidden, heads * hd]),
            ("mlp.gate_proj", [inter, hidden]), ("mlp.up_proj", [inter, hidden]), ("mlp.down_proj", [hidden, inter])]
    if own_kv:
        out.append((p + "self_attn.k_norm.weight", "BF16", [hd], ONE * hd))
        mats += [("self_attn.k_proj", [2 * hd, hidden]), ("self_attn.v_proj", [2 * hd, hidden])]
    out += [(p + n + ".weight", "BF16", s, rand_bf16(s[0] * s[1])) for n, s in mats]
    return out


def save(d, config, tensors):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_st(os.path.join(d, "model.safetensors"), tensors)


types = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(LAYERS)]
types[-1] = "full_attention"  # Gemma 4 configs end on a full-attention layer (transformers makes it so)
cfg = dict(text_config(1536, 6144, LAYERS, 8, types, 0), architectures=["Gemma4ForCausalLM"], dtype="bfloat16",
           transformers_version="5.17.0")
ts = [("model.embed_tokens.weight", "BF16", [V, 1536], rand_bf16(V * 1536)),
      ("model.norm.weight", "BF16", [1536], ONE * 1536)]
for i in range(LAYERS):
    ts += layer_tensors(i, 1536, 6144, 8, 512 if types[i] == "full_attention" else 256, True)
save(os.path.join(OUT, "target"), cfg, ts)
print("target written", flush=True)
del ts
ordering = list(range(V))
random.shuffle(ordering)
for kind in ("dense", "centroid"):
    atypes = ["sliding_attention"] * 3 + ["full_attention"]
    cfg = {"architectures": ["Gemma4AssistantForCausalLM"], "backbone_hidden_size": 1536,
           "centroid_intermediate_top_k": 32, "dtype": "bfloat16", "model_type": "gemma4_assistant",
           "num_centroids": 2048, "text_config": text_config(512, 2048, 4, 4, atypes, 4),
           "tie_word_embeddings": True, "transformers_version": "5.17.0",
           "use_ordered_embeddings": kind == "centroid"}
    ts = [("model.embed_tokens.weight", "BF16", [V, 512], rand_bf16(V * 512)),
          ("model.norm.weight", "BF16", [512], ONE * 512),
          ("pre_projection.weight", "BF16", [512, 2 * 1536], rand_bf16(512 * 3072)),
          ("post_projection.weight", "BF16", [1536, 512], rand_bf16(1536 * 512))]
    for i in range(4):
        ts += layer_tensors(i, 512, 2048, 4, 512 if atypes[i] == "full_attention" else 256, False)
    if kind == "centroid":
        ts += [("masked_embedding.centroids.weight", "BF16", [2048, 512], rand_bf16(2048 * 512)),
               ("masked_embedding.token_ordering", "I64", [V], array.array("q", ordering).tobytes())]
    save(os.path.join(OUT, kind), cfg, ts)
    print(kind, "written", flush=True)
