"""Independent float64 forward of the dense decoder families, from files only.

Owned by the oracle. It reads a fixture folder the way an engine must (config.json
in either rope spelling + model.safetensors) and computes logits for a prompt in
float64 throughout, with torch tensors but no transformers code. make_fixtures.py
runs it on every case and records how far transformers' own float64 reference is
from it: a large gap means a knob was not applied the way the docs say (or the
config.json is not readable without transformers). Covers the llama block (llama,
mistral, ministral, qwen2, qwen3, smollm3, granite), gemma/gemma2/gemma3_text,
olmo2/olmo3, phi3, starcoder2, cohere and glm4; rope types default, linear, llama3,
yarn and longrope (partial, interleaved, per layer type, NoPE layers); and the gpt2 block
(gpt2 with Conv1D weights, gpt_bigcode with multi-query or per-head fused qkv).
"""

import json
import math
import os
import struct

import torch

# Per model_type: block layout, norm kind, q/k norm kind, rope pair layout, MLP kind.
#   block  pre: x += f(norm(x)); sandwich: x += post(f(pre(x))); post: x += post(f(x));
#          glm4: like sandwich with glm4's names; parallel: x += attn(n(x)) + mlp(n(x))
#   norm   rms: x * rsqrt(ms + eps) * w; rms1p: ... * (1 + w); ln: LayerNorm (bias if any)
#   qk     head: per-head norm over head_dim; full: RMSNorm over the whole projection;
#          head_ln: per-head LayerNorm with weights [heads, head_dim] (when use_qk_norm)
#   rope   neox: pairs (i, i + d/2); interleaved: pairs (2i, 2i + 1)
#   mlp    gated: down(act(gate) * up); fused: gate_up_proj halves [gate | up];
#          plain: c_proj(act(c_fc))
LLAMA = {"block": "pre", "norm": "rms", "qk": None, "rope": "neox", "mlp": "gated"}
ARCH = {
    "llama": LLAMA, "mistral": LLAMA, "ministral": LLAMA, "qwen2": LLAMA, "smollm3": LLAMA,
    "granite": LLAMA,
    "qwen3": dict(LLAMA, qk="head"),
    "gemma": dict(LLAMA, norm="rms1p"),
    "gemma2": dict(LLAMA, norm="rms1p", block="sandwich"),
    "gemma3_text": dict(LLAMA, norm="rms1p", block="sandwich", qk="head"),
    "olmo2": dict(LLAMA, block="post", qk="full"),
    "olmo3": dict(LLAMA, block="post", qk="full"),
    "phi3": dict(LLAMA, mlp="fused"),
    "starcoder2": dict(LLAMA, norm="ln", mlp="plain"),
    "cohere": dict(LLAMA, norm="ln", block="parallel", qk="head_ln", rope="interleaved"),
    "glm4": dict(LLAMA, block="glm4", mlp="fused", rope="interleaved"),
}
GEMMA = ("gemma", "gemma2", "gemma3_text")


def rope_params(cfg, layer_type=None):
    """Normalize both spellings (and per-layer-type dicts) to (rope_type, params)."""
    rp = cfg.get("rope_parameters")
    if rp and layer_type is not None and isinstance(rp.get(layer_type), dict):
        p = dict(rp[layer_type])
    elif rp and "rope_type" in rp or rp and "type" in rp or rp and "rope_theta" in rp:
        p = dict(rp)
    elif rp:  # nested without a layer type asked: the full-attention one
        p = dict(rp.get("full_attention") or {})
    else:
        p = dict(cfg.get("rope_scaling") or {})
    p.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    if "partial_rotary_factor" not in p and cfg.get("partial_rotary_factor") is not None:
        p["partial_rotary_factor"] = cfg["partial_rotary_factor"]
    rtype = p.get("rope_type", p.get("type", "default"))
    if rtype in ("llama3", "yarn", "longrope"):
        if cfg.get("original_max_position_embeddings"):  # Phi-3 keeps it at the top level
            p["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
        p.setdefault("original_max_position_embeddings", cfg["max_position_embeddings"])
    return rtype, p


def head_dim_of(cfg):
    hd = cfg.get("head_dim")
    return int(hd) if hd else cfg["hidden_size"] // cfg["num_attention_heads"]


def inv_freq(cfg, layer_type=None, seq_len=None, with_scale=False):
    """Inverse frequencies [rotary_dim/2] in float64, plus band counts for llama3;
    with_scale also returns the cos/sin attention factor."""
    rtype, p = rope_params(cfg, layer_type)
    dim = int(head_dim_of(cfg) * float(p.get("partial_rotary_factor", 1.0)))
    theta = float(p["rope_theta"])
    expo = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    inv = 1.0 / theta ** expo
    bands = None
    scale = 1.0
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
    elif rtype == "yarn":
        factor = float(p["factor"])
        orig = float(p["original_max_position_embeddings"])

        def mscale(s, m=1.0):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
        if p.get("attention_factor") is not None:
            scale = float(p["attention_factor"])
        elif p.get("mscale") and p.get("mscale_all_dim"):
            scale = mscale(factor, float(p["mscale"])) / mscale(factor, float(p["mscale_all_dim"]))
        else:
            scale = mscale(factor)
        beta_fast = float(p.get("beta_fast") or 32)
        beta_slow = float(p.get("beta_slow") or 1)

        def corr_dim(rot):
            return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = corr_dim(beta_fast), corr_dim(beta_slow)
        if p.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
        keep = 1.0 - ramp      # 1: extrapolate (original frequency), 0: interpolate (/factor)
        inv = inv / factor * (1.0 - keep) + inv * keep
    elif rtype == "longrope":
        orig = float(p["original_max_position_embeddings"])
        factor = p.get("factor")
        factor = float(factor) if factor else cfg["max_position_embeddings"] / orig
        if p.get("attention_factor") is not None:
            scale = float(p["attention_factor"])
        else:
            scale = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = p["long_factor"] if seq_len is not None and seq_len > orig else p["short_factor"]
        ext = torch.tensor([float(v) for v in ext], dtype=torch.float64)
        if ext.numel() != inv.numel():
            raise ValueError("indep_ref: longrope factors have %d entries, want %d" % (
                ext.numel(), inv.numel()))
        inv = 1.0 / (ext * theta ** expo)
    else:
        raise NotImplementedError("indep_ref: rope type %r not implemented" % rtype)
    if with_scale:
        return inv, bands, scale
    return inv, bands


def rope_apply(x, inv, scale, pos, layout):
    """x: (heads, T, hd). Rotates the first 2*len(inv) dims; the rest pass through."""
    rd = 2 * inv.numel()
    ang = torch.outer(pos, inv)                      # (T, rd/2)
    xr, xp = x[..., :rd], x[..., rd:]
    if layout == "neox":
        cos = torch.cat((ang, ang), dim=-1).cos() * scale
        sin = torch.cat((ang, ang), dim=-1).sin() * scale
        h = rd // 2
        rot = torch.cat((-xr[..., h:], xr[..., :h]), dim=-1)
    else:
        cos = ang.repeat_interleave(2, dim=-1).cos() * scale
        sin = ang.repeat_interleave(2, dim=-1).sin() * scale
        rot = torch.stack((-xr[..., 1::2], xr[..., 0::2]), dim=-1).flatten(-2)
    return torch.cat((xr * cos + rot * sin, xp), dim=-1)


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


def activation(name):
    if name == "silu":
        return torch.nn.functional.silu
    if name in ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new"):
        c = math.sqrt(2.0 / math.pi)
        return lambda x: 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x * x * x)))
    if name == "gelu":
        return lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    raise NotImplementedError("indep_ref: activation %r not implemented" % name)


def forward_gpt2(cfg, W, ids):
    """gpt2 / gpt_bigcode: learned positions, LayerNorm pre-block, fused c_attn, plain MLP.
    gpt2 stores Conv1D weights [in, out]; gpt_bigcode nn.Linear [out, in]. gpt_bigcode's c_attn
    rows are [q heads | k | v] with one K/V head (multi_query) or per head [q_h | k_h | v_h]."""
    mt = cfg["model_type"]
    D, H = cfg["n_embd"], cfg["n_head"]
    hd = D // H
    eps = float(cfg["layer_norm_epsilon"])
    act = activation(cfg["activation_function"])
    T = len(ids)

    def lin(x, name):
        w = W[name + ".weight"]
        y = x @ (w if mt == "gpt2" else w.T)
        return y + W[name + ".bias"]

    def ln(x, name):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) * torch.rsqrt(var + eps) * W[name + ".weight"] + W[name + ".bias"]

    idx = torch.arange(T)
    mask = torch.zeros((T, T), dtype=torch.float64).masked_fill(idx[None, :] > idx[:, None], float("-inf"))
    x = W["transformer.wte.weight"][torch.tensor(ids)] + W["transformer.wpe.weight"][:T]
    for l in range(cfg["n_layer"]):
        p = "transformer.h.%d." % l
        qkv = lin(ln(x, p + "ln_1"), p + "attn.c_attn")
        if mt == "gpt_bigcode" and not cfg.get("multi_query", True):
            q, k, v = qkv.view(T, H, 3 * hd).split(hd, dim=-1)             # (T, H, hd) each
        else:
            kv = 1 if mt == "gpt_bigcode" else H
            q, k, v = qkv.split([D, kv * hd, kv * hd], dim=-1)
            q, k, v = q.view(T, H, hd), k.view(T, kv, hd), v.view(T, kv, hd)
            k, v = k.expand(T, H, hd), v.expand(T, H, hd)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # (H, T, hd)
        a = torch.softmax((q @ k.transpose(1, 2)) * hd ** -0.5 + mask, dim=-1) @ v
        x = x + lin(a.transpose(0, 1).reshape(T, D), p + "attn.c_proj")
        x = x + lin(act(lin(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    head = W.get("lm_head.weight")
    if head is None:
        head = W["transformer.wte.weight"]
    return x @ head.T


def forward(folder, ids):
    """Logits [len(ids), vocab] float64 for one sequence, positions 0..T-1."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    W = load_tensors(folder)
    mt = cfg["model_type"]
    if mt in ("gpt2", "gpt_bigcode"):
        return forward_gpt2(cfg, W, ids)
    if mt not in ARCH:
        raise NotImplementedError("indep_ref: model_type %r not implemented" % mt)
    A = dict(ARCH[mt])
    if mt == "cohere" and not cfg.get("use_qk_norm"):
        A["qk"] = None
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = head_dim_of(cfg)
    eps = float(cfg.get("rms_norm_eps") or cfg.get("layer_norm_eps") or cfg.get("norm_epsilon"))
    if mt in ("gemma2", "gemma3_text"):
        act = activation(cfg.get("hidden_activation", "gelu_pytorch_tanh"))
    else:
        act = activation(cfg.get("hidden_act", "silu"))
    T = len(ids)
    pos = torch.arange(T, dtype=torch.float64)
    n_layers = cfg["num_hidden_layers"]
    layer_types = cfg.get("layer_types")
    window = cfg.get("sliding_window")
    nope = cfg.get("no_rope_layers")

    def norm(x, name):
        w = W[name + ".weight"]
        if A["norm"] == "ln" or name.endswith("_norm") and A["qk"] == "head_ln":
            mu = x.mean(-1, keepdim=True)
            var = ((x - mu) ** 2).mean(-1, keepdim=True)
            y = (x - mu) * torch.rsqrt(var + eps) * w
            b = W.get(name + ".bias")
            return y + b if b is not None else y
        y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
        return y * (1.0 + w) if A["norm"] == "rms1p" else y * w

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        b = W.get(name + ".bias")
        return y + b if b is not None else y

    idx = torch.arange(T)
    causal = idx[None, :] <= idx[:, None]

    def attention(h, l, p):
        lt = layer_types[l] if layer_types else "full_attention"
        if layer_types:
            sliding = (lt == "sliding_attention" and window is not None
                       and cfg.get("use_sliding_window", True))
        else:
            sliding = window is not None and cfg.get("use_sliding_window", True)
        allowed = causal & (idx[:, None] - idx[None, :] < window) if sliding else causal
        mask = torch.zeros((T, T), dtype=torch.float64).masked_fill(~allowed, float("-inf"))
        if p + "self_attn.qkv_proj.weight" in W:
            qkv = lin(h, p + "self_attn.qkv_proj")
            q, k, v = qkv.split([H * hd, KV * hd, KV * hd], dim=-1)
        else:
            q = lin(h, p + "self_attn.q_proj")
            k = lin(h, p + "self_attn.k_proj")
            v = lin(h, p + "self_attn.v_proj")
        if A["qk"] == "full":
            q, k = norm(q, p + "self_attn.q_norm"), norm(k, p + "self_attn.k_norm")
        q, k, v = q.view(T, H, hd), k.view(T, KV, hd), v.view(T, KV, hd)
        if A["qk"] == "head_ln":
            q, k = norm(q, p + "self_attn.q_norm"), norm(k, p + "self_attn.k_norm")
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)   # (heads, T, hd)
        if A["qk"] == "head":
            q, k = norm(q, p + "self_attn.q_norm"), norm(k, p + "self_attn.k_norm")
        use_rope = not nope or bool(nope[l])
        if use_rope:
            rp = cfg.get("rope_parameters") or {}
            ltype = lt if isinstance(rp.get(lt), dict) else None
            inv, _, scale = inv_freq(cfg, ltype, seq_len=T, with_scale=True)
            q = rope_apply(q, inv, scale, pos, A["rope"])
            k = rope_apply(k, inv, scale, pos, A["rope"])
        rep = H // KV
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        if mt in ("gemma2", "gemma3_text"):
            sc = float(cfg["query_pre_attn_scalar"]) ** -0.5
        elif mt == "granite":
            sc = float(cfg["attention_multiplier"])
        else:
            sc = hd ** -0.5
        s = (q @ k.transpose(1, 2)) * sc
        cap = cfg.get("attn_logit_softcapping") if mt in ("gemma2", "gemma3_text") else None
        if cap:
            s = torch.tanh(s / cap) * cap
        a = torch.softmax(s + mask, dim=-1) @ v                     # (H, T, hd)
        return lin(a.transpose(0, 1).reshape(T, H * hd), p + "self_attn.o_proj")

    def mlp(h, p):
        if A["mlp"] == "plain":
            return lin(act(lin(h, p + "mlp.c_fc")), p + "mlp.c_proj")
        if A["mlp"] == "fused":
            g, u = lin(h, p + "mlp.gate_up_proj").chunk(2, dim=-1)
        else:
            g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        return lin(act(g) * u, p + "mlp.down_proj")

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]          # (T, hidden)
    if mt in GEMMA:  # transformers keeps sqrt(hidden) as a float32 scalar
        x = x * float(torch.tensor(cfg["hidden_size"] ** 0.5, dtype=torch.float32))
    if mt == "granite":
        x = x * float(cfg["embedding_multiplier"])
    rm = float(cfg.get("residual_multiplier", 1.0)) if mt == "granite" else 1.0
    for l in range(n_layers):
        p = "model.layers.%d." % l
        if A["block"] == "pre":
            x = x + rm * attention(norm(x, p + "input_layernorm"), l, p)
            x = x + rm * mlp(norm(x, p + "post_attention_layernorm"), p)
        elif A["block"] == "sandwich":
            x = x + norm(attention(norm(x, p + "input_layernorm"), l, p),
                         p + "post_attention_layernorm")
            x = x + norm(mlp(norm(x, p + "pre_feedforward_layernorm"), p),
                         p + "post_feedforward_layernorm")
        elif A["block"] == "post":
            x = x + norm(attention(x, l, p), p + "post_attention_layernorm")
            x = x + norm(mlp(x, p), p + "post_feedforward_layernorm")
        elif A["block"] == "glm4":
            x = x + norm(attention(norm(x, p + "input_layernorm"), l, p),
                         p + "post_self_attn_layernorm")
            x = x + norm(mlp(norm(x, p + "post_attention_layernorm"), p),
                         p + "post_mlp_layernorm")
        else:  # parallel
            h = norm(x, p + "input_layernorm")
            x = x + attention(h, l, p) + mlp(h, p)
    x = norm(x, "model.norm")
    head = W.get("lm_head.weight")
    if head is None:
        if not cfg.get("tie_word_embeddings", False):
            raise ValueError("indep_ref: lm_head.weight missing and embeddings not tied")
        head = W["model.embed_tokens.weight"]
    logits = x @ head.T
    if mt == "granite":
        logits = logits / float(cfg["logits_scaling"])
    if mt == "cohere":
        logits = logits * float(cfg["logit_scale"])
    cap = cfg.get("final_logit_softcapping")
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits
