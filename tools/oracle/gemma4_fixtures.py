#!/usr/bin/env python3
"""Gemma 4 fixtures: the gemma4_text targeted port and the gemma4_assistant drafter.

Owned by the gemma4 area. Run on the GPU machine (torch + transformers 5.17), on its CPU:
    python3 tools/oracle/gemma4_fixtures.py OUT_DIR
Writes, under OUT_DIR:
  gemma4_e/      E-style gemma4_text (per-layer inputs, KV-shared layers, double-wide MLP on
                 the shared layers, sliding + full layers of different head dims, proportional
                 rope, v_norm, layer_scalar, final softcap): the parity layout of make_fixtures.py
                 (config.json, model.safetensors, ref.json, prompt_logits.bin, greedy_logits.bin).
  gemma4_a4b/    A4B-style gemma4_text (MoE block beside the dense MLP, attention_k_eq_v with
                 num_global_key_value_heads on full layers), same layout.
  gemma4_mm/     a Gemma4ForConditionalGeneration checkpoint (text stack under a prefix), when
                 transformers builds one from the tiny config (best effort).
  gemma4_mtp/    target/ (gemma4_text), assistant_dense/ and assistant_centroid/ (gemma4_assistant),
                 and per assistant rounds_<kind>.json + rounds_<kind>.bin: every drafter call made
                 by transformers' candidate generator during generate(assistant_model=...), with
                 its inputs (inputs_embeds, position, shared K/V, masks) and outputs (logits,
                 last_hidden_state), float64 (K/V float32).
  src/           the transformers sources the port follows (for reading only, never committed).
Every reference is computed in float64 (transformers forces float32 in its RMSNorm and rope).
"""

import json
import math
import os
import shutil
import struct
import sys
import time
import traceback

import torch
import transformers

OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/g4out"
os.makedirs(OUT, exist_ok=True)
LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.append(s)


ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                           "rope_theta": 1000000.0}}

BASE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, global_head_dim=32, max_position_embeddings=256,
            rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=30.0,
            pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
            rope_parameters=ROPE, attention_bias=False)

E_CFG = dict(BASE, num_hidden_layers=6, sliding_window=8,
             layer_types=["sliding_attention", "sliding_attention", "full_attention",
                          "sliding_attention", "sliding_attention", "full_attention"],
             num_kv_shared_layers=2, hidden_size_per_layer_input=16, vocab_size_per_layer_input=256,
             use_double_wide_mlp=True, attention_k_eq_v=False, enable_moe_block=False)

A_CFG = dict(BASE, num_hidden_layers=4, sliding_window=8,
             layer_types=["sliding_attention", "sliding_attention", "full_attention", "full_attention"],
             num_kv_shared_layers=0, hidden_size_per_layer_input=0, vocab_size_per_layer_input=256,
             use_double_wide_mlp=False, attention_k_eq_v=True, num_global_key_value_heads=1,
             enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32)

# MTP target: E-style with a window longer than any sequence here, so the target's sliding K/V
# handed to the drafter starts at position 0 (the candidate generator slices it by length).
T_CFG = dict(E_CFG, sliding_window=64)

SPECIAL = (0, 1, 2)
GAP_FLOOR = 0.01


def dump_sources():
    import importlib
    mods = ["transformers.models.gemma4.modeling_gemma4", "transformers.models.gemma4.configuration_gemma4",
            "transformers.models.gemma4_assistant.modeling_gemma4_assistant",
            "transformers.models.gemma4_assistant.configuration_gemma4_assistant",
            "transformers.generation.candidate_generator", "transformers.masking_utils",
            "transformers.modeling_rope_utils", "transformers.generation.utils"]
    d = os.path.join(OUT, "src")
    os.makedirs(d, exist_ok=True)
    for m in mods:
        try:
            mod = importlib.import_module(m)
            shutil.copy(mod.__file__, os.path.join(d, m.split(".")[-1] + ".py"))
        except Exception as e:  # noqa: BLE001
            log("source dump failed for", m, e)


# ----------------------------------------------------------------------------- init

def init_model(model, seed, gain=1.3, embed_std=0.125):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if name.endswith("embed_tokens.weight"):
                v = embed_std * torch.randn(shape, generator=g)
            elif name.endswith("embed_tokens_per_layer.weight"):
                v = 0.25 * torch.randn(shape, generator=g)
            elif len(shape) == 1:  # norm weights, router.scale, router.per_expert_scale
                v = 1.0 + 0.1 * torch.randn(shape, generator=g)
            elif name.endswith("experts.gate_up_proj"):
                v = torch.randn(shape, generator=g) * (gain / math.sqrt(shape[2]))
            elif name.endswith("experts.down_proj"):
                v = torch.randn(shape, generator=g) * (gain / math.sqrt(shape[2]))
            elif len(shape) == 2 and name.endswith(".weight"):
                v = torch.randn(shape, generator=g) * (gain / math.sqrt(shape[1]))
            elif name.endswith(".bias"):
                v = 0.1 * torch.randn(shape, generator=g)
            elif "vision" in name or "audio" in name:  # towers a text forward never runs
                v = 0.02 * torch.randn(shape, generator=g)
            else:
                raise RuntimeError("no init rule for %s %s" % (name, shape))
            p.copy_(v.to(p.dtype))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_((0.6 + 0.8 * torch.rand(tuple(b.shape), generator=g)).to(b.dtype))
            elif name.endswith("token_ordering"):
                b.copy_(torch.randperm(b.numel(), generator=g).to(b.dtype).view(b.shape))


# ----------------------------------------------------------------------------- parity cases

def fwd(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].to(torch.float64)


def gap2(row):
    v = torch.topk(row, 2).values
    return float(v[0] - v[1])


def reference(model, prompt, n_greedy, floor):
    pl = fwd(model, prompt)
    gaps = [gap2(r) for r in pl]
    if floor and min(gaps) < floor:
        return None
    seq, gids, rows = list(prompt), [], []
    for _ in range(n_greedy):
        row = fwd(model, seq)[-1]
        t = int(torch.argmax(row))
        gaps.append(gap2(row))
        if floor and (gaps[-1] < floor or t in SPECIAL):
            return None
        rows.append(row)
        gids.append(t)
        seq.append(t)
    return pl, gids, torch.stack(rows), min(gaps)


def write_f64(path, t):
    with open(path, "wb") as f:
        f.write(t.to(torch.float64).contiguous().cpu().numpy().astype("<f8").tobytes())


def tensor_table(folder):
    from safetensors import safe_open
    table = {}
    with safe_open(os.path.join(folder, "model.safetensors"), framework="pt") as f:
        for k in sorted(f.keys()):
            s = f.get_slice(k)
            table[k] = {"dtype": s.get_dtype(), "shape": list(s.get_shape())}
    return table


def prompt_ids(seed, n, vocab):
    import random
    r = random.Random(seed)
    return [r.randrange(3, vocab) for _ in range(n)]


def build_text(cfg):
    config = transformers.AutoConfig.for_model("gemma4_text", **cfg)
    try:  # float64 needs the eager experts loop (grouped_mm takes f32/bf16/f16 only)
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                              experts_implementation="eager")
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return model.to(torch.float32).eval()


def parity_case(name, cfg, seed, n_prompt=20, n_greedy=8, gain=1.3, description="", knobs=(),
                builder=None, budget=40.0, model_type="gemma4_text"):
    t0 = time.time()
    model = (builder or build_text)(cfg)
    log(name, "built", type(model).__name__, "params", sum(p.numel() for p in model.parameters()))
    model.to(torch.float64)
    vocab = cfg.get("vocab_size") or cfg["text_config"]["vocab_size"]
    prompt = prompt_ids(seed, n_prompt, vocab)
    chosen, floor = None, GAP_FLOOR
    for attempt in range(5000):
        if time.time() - t0 > budget:
            break
        if floor == GAP_FLOOR and time.time() - t0 > 0.6 * budget:
            floor = 0.003
        init_model(model, seed + attempt, gain=gain)
        res = reference(model, prompt, n_greedy, floor)
        if res is not None and len(set(res[1])) >= 4:
            chosen = (seed + attempt, attempt) + res
            break
    if chosen is None:
        log(name, "NO SEED met the gap floor; writing the last seed without the gate")
        init_model(model, seed, gain=gain)
        chosen = (seed, -1) + reference(model, prompt, n_greedy, None)
    s, attempt, pl, gids, gl, gap = chosen
    folder = os.path.join(OUT, name)
    if os.path.exists(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    # cached generate() must pick the same ids
    try:
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=n_greedy, do_sample=False,
                                 use_cache=True, pad_token_id=0)
        cache_ok = [int(t) for t in out[0][len(prompt):]] == gids
    except Exception as e:  # noqa: BLE001
        log(name, "generate failed", e)
        cache_ok = False
    model.to(torch.float32)
    model.save_pretrained(folder)
    model.to(torch.float64)
    # reload check
    reload_diff = None
    try:
        try:
            m2 = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager",
                                                                   experts_implementation="eager")
        except TypeError:
            m2 = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
        m2 = m2.to(torch.float64).eval()
        reload_diff = float((fwd(m2, prompt) - pl).abs().max())
    except Exception as e:  # noqa: BLE001
        log(name, "reload failed", e)
        traceback.print_exc()
    write_f64(os.path.join(folder, "prompt_logits.bin"), pl)
    write_f64(os.path.join(folder, "greedy_logits.bin"), gl)
    max_abs = float(max(pl.abs().max(), gl.abs().max()))
    ref = {
        "case": name, "model_type": model_type, "dtype": "float32",
        "prompt_ids": prompt, "greedy_ids": gids, "vocab_size": vocab, "n_prompt": len(prompt),
        "n_greedy": n_greedy, "min_top2_gap": gap, "max_abs_logit": max_abs,
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "description": description, "knobs": list(knobs), "config_spelling": "new", "seed": s,
        "seed_attempts": attempt + 1, "gap_floor": floor,
        "init": "Linear W ~ N(0, %.1f^2/fan_in), embeddings N(0,0.125^2), per-layer embeddings N(0,0.25^2), "
                "norm/router scales 1+N(0,0.1^2), layer_scalar U(0.6,1.4); one torch.Generator" % gain,
        "tensors": tensor_table(folder),
        "checks": {"reload_max_abs_diff": reload_diff, "generate_with_cache_same_ids": cache_ok},
        "layout": {"prompt_logits.bin": "float64 LE [n_prompt, vocab_size]",
                   "greedy_logits.bin": "float64 LE [n_greedy, vocab_size]; row i after prompt + greedy[:i]"},
    }
    with open(os.path.join(folder, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)
    log("%s seed %d gap %.4f max|l| %.2f reload %s cache %s %.1fs" % (name, s, gap, max_abs, reload_diff,
                                                                       cache_ok, time.time() - t0))
    return model


def build_mm(cfg):
    text = {k: v for k, v in cfg.items() if k not in ("pad_token_id", "eos_token_id", "bos_token_id",
                                                      "tie_word_embeddings")}
    conf = transformers.AutoConfig.for_model(
        "gemma4", text_config=text,
        vision_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "patch_size": 4,
                       "pooling_kernel_size": 2, "position_embedding_size": 64},
        audio_config=None, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    model = transformers.AutoModelForImageTextToText.from_config(conf, attn_implementation="eager")
    return model.to(torch.float32).eval()


# ----------------------------------------------------------------------------- MTP

def assistant_config(use_ordered):
    text = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                max_position_embeddings=256, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                sliding_window=6, layer_types=["sliding_attention"] * 3 + ["full_attention"],
                num_kv_shared_layers=4, hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
                use_double_wide_mlp=False, enable_moe_block=False, attention_k_eq_v=False,
                rope_parameters=ROPE, final_logit_softcapping=None, pad_token_id=0, eos_token_id=1,
                bos_token_id=2)
    return transformers.AutoConfig.for_model(
        "gemma4_assistant", text_config=text, backbone_hidden_size=64, use_ordered_embeddings=use_ordered,
        num_centroids=16, centroid_intermediate_top_k=4, tie_word_embeddings=True)


def mtp_case(target, kind, seed):
    from transformers.generation import candidate_generator as cg
    folder = os.path.join(OUT, "gemma4_mtp")
    conf = assistant_config(kind == "centroid")
    try:
        asst = transformers.AutoModelForCausalLM.from_config(conf, attn_implementation="eager")
    except Exception as e:  # noqa: BLE001
        log("AutoModelForCausalLM refused the assistant config (%s); using the class" % e)
        from transformers.models.gemma4_assistant.modeling_gemma4_assistant import Gemma4AssistantForCausalLM
        conf._attn_implementation = "eager"
        asst = Gemma4AssistantForCausalLM(conf)
    log("assistant", kind, type(asst).__name__)
    init_model(asst, seed, gain=2.0, embed_std=1.0)
    asst = asst.to(torch.float64).eval()
    adir = os.path.join(folder, "assistant_" + kind)
    asst.to(torch.float32)
    asst.save_pretrained(adir)
    asst.to(torch.float64)

    calls, rounds = [], []
    inner = {}

    def pre_hook(mod, args, kwargs):
        inner["kw"] = kwargs

    def inner_hook(mod, args, kwargs):
        am = kwargs.get("attention_mask")
        inner["masks"] = am

    def hook(mod, args, kwargs, output):
        kv = kwargs["shared_kv_states"]
        rec = {"inputs_embeds": kwargs["inputs_embeds"].detach().clone(),
               "position_ids": kwargs["position_ids"].detach().clone(),
               "kv": {k: (v[0].detach().clone(), v[1].detach().clone()) for k, v in kv.items()},
               "logits": output.logits.detach().clone(),
               "last_hidden_state": output.last_hidden_state.detach().clone(),
               "masks": inner.get("masks")}
        calls.append(rec)

    h1 = asst.register_forward_hook(hook, with_kwargs=True)
    h2 = asst.model.register_forward_pre_hook(inner_hook, with_kwargs=True)
    klass = None
    for nm in dir(cg):
        if nm.startswith("SinglePosition"):
            klass = getattr(cg, nm)
    orig = klass.get_candidates

    def wrapped(self, *args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        mo = kwargs.get("model_outputs")
        nlm, first = kwargs.get("n_last_matches"), kwargs.get("is_first_iteration")
        rec = {"input_ids": [int(t) for t in ids[0]], "n_first_call": len(calls),
               "n_last_matches": None if nlm is None else int(nlm),
               "is_first_iteration": None if first is None else bool(first)}
        if mo is not None and getattr(mo, "hidden_states", None) is not None:
            hs = mo.hidden_states[-1]
            rec["target_hidden_rows"] = int(hs.shape[1])
            if getattr(mo, "last_hidden_state", None) is not None:
                rec["hidden_eq_last"] = float((hs - mo.last_hidden_state).abs().max())
        rounds.append(rec)
        return orig(self, *args, **kwargs)

    klass.get_candidates = wrapped
    prompt = prompt_ids(4400, 12, 256)
    asst.generation_config.num_assistant_tokens = 3
    asst.generation_config.num_assistant_tokens_schedule = "constant"
    try:
        with torch.no_grad():
            out = target.generate(torch.tensor([prompt]), assistant_model=asst, max_new_tokens=10,
                                  do_sample=False, pad_token_id=0)
            plain = target.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False, pad_token_id=0)
    finally:
        klass.get_candidates = orig
        h1.remove()
        h2.remove()
    gen = [int(t) for t in out[0][len(prompt):]]
    plain_ids = [int(t) for t in plain[0][len(prompt):]]
    log("mtp", kind, "calls", len(calls), "rounds", len(rounds), "gen", gen, "plain", plain_ids)

    # also: the target's hidden state (after its final norm) and logits at every position of the final
    # sequence, so lmc's own target can be checked on this checkpoint
    full = prompt + gen
    with torch.no_grad():
        o = target(input_ids=torch.tensor([full]), use_cache=False, output_hidden_states=True)
    blob = bytearray()

    def put(t, dt="<f8"):
        off = len(blob)
        a = t.detach().to(torch.float64).contiguous().cpu().numpy().astype(dt)
        blob.extend(a.tobytes())
        return [off, int(a.size), dt]

    info = {"prompt_ids": prompt, "generated_ids": gen, "plain_greedy_ids": plain_ids, "kind": kind,
            "rounds": [], "calls": [],
            "target_sequence": full,
            "target_hidden": put(o.hidden_states[-1][0]),
            "target_logits": put(o.logits[0]),
            "target_last_hidden_state_eq_hidden_states_last": None}
    try:
        info["target_last_hidden_state_eq_hidden_states_last"] = float(
            (target.model(input_ids=torch.tensor([full]), use_cache=False).last_hidden_state - o.hidden_states[-1]).abs().max())
    except Exception as e:  # noqa: BLE001
        log("last_hidden_state check failed", e)
    kv_seen = {}
    for i, c in enumerate(calls):
        r = {"pos": int(c["position_ids"].reshape(-1)[0]), "inputs_embeds": put(c["inputs_embeds"][0, 0]),
             "logits": put(c["logits"][0, 0]), "last_hidden_state": put(c["last_hidden_state"][0, 0]),
             "argmax": int(torch.argmax(c["logits"][0, 0]))}
        for lt, (k, v) in c["kv"].items():
            r["kv_len_" + lt] = int(k.shape[2])
            r["kv_shape_" + lt] = list(k.shape)
            key = (lt, id(c["kv"][lt][0]), int(k.shape[2]))
            r["k_" + lt] = put(k[0], "<f4")
            r["v_" + lt] = put(v[0], "<f4")
        m = c["masks"]
        if isinstance(m, dict):
            for lt, mm in m.items():
                if mm is None:
                    r["mask_" + lt] = None
                else:
                    mm = mm.reshape(-1, mm.shape[-1])[0]
                    ok = mm == 0 if mm.dtype != torch.bool else mm
                    r["mask_" + lt] = [int(j) for j in torch.nonzero(ok).reshape(-1)]
        info["calls"].append(r)
    for rd in rounds:
        info["rounds"].append(rd)
    with open(os.path.join(folder, "rounds_%s.bin" % kind), "wb") as f:
        f.write(bytes(blob))
    with open(os.path.join(folder, "rounds_%s.json" % kind), "w") as f:
        json.dump(info, f)
    log("mtp", kind, "bin bytes", len(blob), "spec==plain", gen == plain_ids)
    return info


def main():
    t0 = time.time()
    dump_sources()
    log("transformers", transformers.__version__, "torch", torch.__version__)
    torch.set_num_threads(4)
    if os.environ.get("G4_ONLY"):
        parity_case(os.environ["G4_ONLY"], A_CFG, 4200, gain=1.6,
                    description="Gemma 4 A4B-style: MoE beside the dense MLP, attention_k_eq_v.",
                    knobs=["enable_moe_block: 4 experts top-2, per_expert_scale, router scale",
                           "attention_k_eq_v with num_global_key_value_heads 1", "layer_types [s,s,f,f]"])
        return
    try:
        parity_case("gemma4_e", E_CFG, 4100, gain=1.6,
                    description="Gemma 4 E-style: per-layer inputs, KV-shared layers, double-wide MLP.",
                    knobs=["layer_types [s,s,f,s,s,f], window 8", "num_kv_shared_layers 2 (layers 4,5 reuse 3 and 2)",
                           "hidden_size_per_layer_input 16", "use_double_wide_mlp", "head_dim 16 / global_head_dim 32",
                           "proportional rope 0.25 on full layers", "final softcap 30", "layer_scalar"])
    except Exception:  # noqa: BLE001
        log("gemma4_e FAILED", traceback.format_exc())
    try:
        parity_case("gemma4_a4b", A_CFG, 4200, gain=1.6,
                    description="Gemma 4 A4B-style: MoE beside the dense MLP, attention_k_eq_v.",
                    knobs=["enable_moe_block: 4 experts top-2, per_expert_scale, router scale",
                           "attention_k_eq_v with num_global_key_value_heads 1", "layer_types [s,s,f,f]"])
    except Exception:  # noqa: BLE001
        log("gemma4_a4b FAILED", traceback.format_exc())
    try:
        target = build_text(T_CFG).to(torch.float64)
        tp = prompt_ids(4400, 12, 256)
        for tseed in range(4300, 4800):  # a target whose greedy run varies and hits no special id
            init_model(target, tseed, gain=1.6)
            res = reference(target, tp, 12, 0.003)
            if res is not None and len(set(res[1])) >= 6:
                break
        log("mtp target seed", tseed, "greedy", None if res is None else res[1])
        target = target.eval()
        tdir = os.path.join(OUT, "gemma4_mtp", "target")
        target.to(torch.float32)
        target.save_pretrained(tdir)
        target.to(torch.float64)
        for kind, seed in (("dense", 4400), ("centroid", 4500)):
            try:
                mtp_case(target, kind, seed)
            except Exception:  # noqa: BLE001
                log("mtp", kind, "FAILED", traceback.format_exc())
    except Exception:  # noqa: BLE001
        log("mtp target FAILED", traceback.format_exc())
    try:
        parity_case("gemma4_mm", dict(E_CFG), 4600, gain=1.6, builder=build_mm, budget=20.0, model_type="gemma4",
                    description="Gemma 4 multimodal checkpoint: the E-style text stack under a prefix.",
                    knobs=["Gemma4ForConditionalGeneration layout", "vision tower present (dropped)"])
    except Exception:  # noqa: BLE001
        log("gemma4_mm FAILED", traceback.format_exc())
    log("total %.1fs" % (time.time() - t0))
    with open(os.path.join(OUT, "log.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")


if __name__ == "__main__":
    main()
