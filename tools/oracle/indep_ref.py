"""Independent float64 forward of the dense Llama-family block, from files only.

Owned by the oracle. It reads a fixture folder the way an engine must (config.json
in either rope spelling + model.safetensors) and computes logits for a prompt in
float64 throughout, with torch tensors but no transformers code. make_fixtures.py
runs it on every case and records how far transformers' own float64 reference is
from it: a large gap means a knob was not applied the way the docs say (or the
config.json is not readable without transformers). Covers llama, mistral, qwen2,
qwen3 (q_norm/k_norm) and rope types default, linear and llama3.
"""

import json
import math
import os
import struct

import torch


def rope_params(cfg):
    """Normalize both spellings to (rope_type, params dict incl. rope_theta)."""
    rp = cfg.get("rope_parameters")
    if rp:
        p = dict(rp)
        p.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    else:
        p = dict(cfg.get("rope_scaling") or {})
        p["rope_theta"] = cfg.get("rope_theta", 10000.0)
    rtype = p.get("rope_type", p.get("type", "default"))
    return rtype, p


def head_dim_of(cfg):
    hd = cfg.get("head_dim")
    return int(hd) if hd else cfg["hidden_size"] // cfg["num_attention_heads"]


def inv_freq(cfg):
    """Inverse frequencies [head_dim/2] in float64, plus band counts for llama3."""
    rtype, p = rope_params(cfg)
    dim = int(head_dim_of(cfg) * float(p.get("partial_rotary_factor", 1.0)))
    theta = float(p["rope_theta"])
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    bands = None
    if rtype == "default":
        pass
    elif rtype == "linear":
        inv = inv / float(p["factor"])
    elif rtype == "llama3":
        factor = float(p["factor"])
        low, high = float(p["low_freq_factor"]), float(p["high_freq_factor"])
        old = float(p["original_max_position_embeddings"])
        low_wl, high_wl = old / low, old / high
        out = inv.clone()
        bands = {"kept": 0, "smoothed": 0, "divided": 0}
        for i in range(inv.numel()):
            wl = 2.0 * math.pi / float(inv[i])
            if wl < high_wl:
                bands["kept"] += 1
            elif wl > low_wl:
                out[i] = inv[i] / factor
                bands["divided"] += 1
            else:
                s = (old / wl - low) / (high - low)
                out[i] = (1.0 - s) * inv[i] / factor + s * inv[i]
                bands["smoothed"] += 1
        inv = out
    else:
        raise ValueError("indep_ref: rope type %r not implemented" % rtype)
    return inv, bands


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope_apply(x, cos, sin):
    # x: (heads, T, hd); rotate-half convention (first half pairs with second half)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    rot = torch.cat((-x2, x1), dim=-1)
    return x * cos + rot * sin


def load_tensors(folder):
    """Read model.safetensors with a reader of our own (F32/F16/BF16) into float64."""
    path = os.path.join(folder, "model.safetensors")
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = bytearray(data[base + a:base + b])
        dt = info["dtype"]
        if dt == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32)
        elif dt == "F16":
            t = torch.frombuffer(raw, dtype=torch.float16)
        elif dt == "BF16":
            t = torch.frombuffer(raw, dtype=torch.bfloat16)
        else:
            raise ValueError("indep_ref: dtype %s of %s not handled" % (dt, name))
        out[name] = t.to(torch.float64).reshape(info["shape"])
    return out


def forward(folder, ids):
    """Logits [len(ids), vocab] float64 for one sequence, positions 0..T-1."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    W = load_tensors(folder)
    mt = cfg["model_type"]
    if mt not in ("llama", "mistral", "qwen2", "qwen3"):
        raise ValueError("indep_ref: model_type %r not implemented" % mt)
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = head_dim_of(cfg)
    eps = float(cfg["rms_norm_eps"])
    T = len(ids)
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError("indep_ref: only silu is implemented")

    inv, _ = inv_freq(cfg)
    pos = torch.arange(T, dtype=torch.float64)
    ang = torch.outer(pos, inv)                      # (T, hd/2)
    ang = torch.cat((ang, ang), dim=-1)              # (T, hd)
    cos, sin = ang.cos(), ang.sin()
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        b = W.get(name + ".bias")
        return y + b if b is not None else y

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]          # (T, hidden)
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj").view(T, H, hd).transpose(0, 1)   # (H, T, hd)
        k = lin(h, p + "self_attn.k_proj").view(T, KV, hd).transpose(0, 1)  # (KV, T, hd)
        v = lin(h, p + "self_attn.v_proj").view(T, KV, hd).transpose(0, 1)
        if mt == "qwen3":
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = rope_apply(q, cos, sin), rope_apply(k, cos, sin)
        rep = H // KV
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        s = (q @ k.transpose(1, 2)) / math.sqrt(hd) + mask
        a = torch.softmax(s, dim=-1) @ v                             # (H, T, hd)
        a = a.transpose(0, 1).reshape(T, H * hd)
        x = x + lin(a, p + "self_attn.o_proj")
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = lin(h, p + "mlp.gate_proj")
        u = lin(h, p + "mlp.up_proj")
        x = x + lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj")
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight")
    if head is None:
        if not cfg.get("tie_word_embeddings", False):
            raise ValueError("indep_ref: lm_head.weight missing and embeddings not tied")
        head = W["model.embed_tokens.weight"]
    return x @ head.T
