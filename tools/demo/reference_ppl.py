#!/usr/bin/env python3
"""reference_ppl.py — CPU float32 reference for the demo model, in numpy (no torch).

Reads models/demo (config.json, bf16 model.safetensors), runs a plain Llama forward in float32
(the same maths as transformers' LlamaForCausalLM: RMSNorm, rotate-half RoPE, GQA causal
attention, SwiGLU, tied head), and computes:
  - held-out perplexity under the protocol of models/demo/README.md (chunks of ctx-1 tokens,
    each run as [<|bos|>] + chunk, every token scored once);
  - greedy continuations of the prompts recorded in train_log.json, compared with the ids the
    training run recorded on the GPU (with the top-2 logit gap at every step).
Token ids come from @huggingface/tokenizers through node (tests/oracle/node_modules).
Usage: python3 tools/demo/reference_ppl.py [--model models/demo] [--text .dev/demo/heldout.txt]
       [--ctx 1024] [--steps 20]      Prints `RESULT <passed> <failed>`.
Owned by the demo-model area (tools/demo/).
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

NODE_ENCODE = r"""
const { createRequire } = require("node:module");
const fs = require("node:fs");
const req = createRequire(process.argv[1] + "/tests/oracle/package.json");
const { Tokenizer } = req("@huggingface/tokenizers");
const dir = process.argv[2];
const tok = new Tokenizer(JSON.parse(fs.readFileSync(dir + "/tokenizer.json", "utf8")),
                          JSON.parse(fs.readFileSync(dir + "/tokenizer_config.json", "utf8")));
const text = fs.readFileSync(process.argv[3], "utf8");
process.stdout.write(JSON.stringify(tok.encode(text, { add_special_tokens: false }).ids));
"""


def load_safetensors_bf16(path):
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        if t["dtype"] != "BF16":
            raise SystemExit(f"{name}: dtype {t['dtype']}, expected BF16")
        a, b = t["data_offsets"]
        raw = np.frombuffer(data, dtype="<u2", count=(b - a) // 2, offset=8 + hlen + a)
        out[name] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(t["shape"])
    return out


class Llama:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = json.load(f)
        self.c = c
        self.w = load_safetensors_bf16(os.path.join(model_dir, "model.safetensors"))
        self.H, self.nh, self.nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim") or self.H // self.nh
        self.eps = c["rms_norm_eps"]
        theta = (c.get("rope_parameters") or {}).get("rope_theta", c.get("rope_theta", 10000.0))
        self.inv_freq = 1.0 / (theta ** (np.arange(0, self.hd, 2, dtype=np.float32) / self.hd))

    def rms(self, x, w):
        var = np.mean(x * x, axis=-1, keepdims=True)
        return (x / np.sqrt(var + self.eps)).astype(np.float32) * w

    def rope(self, x, cos, sin):                      # x: (T, heads, hd)
        half = self.hd // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    def logits(self, ids):
        """ids: list of T token ids (positions 0..T-1) -> (T, vocab) float32 logits."""
        w, T, nh, nkv, hd = self.w, len(ids), self.nh, self.nkv, self.hd
        x = w["model.embed_tokens.weight"][np.asarray(ids)]           # (T, H)
        freqs = np.arange(T, dtype=np.float32)[:, None] * self.inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)                # (T, hd)
        cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
        mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), k=1)
        group = nh // nkv
        for l in range(self.c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = self.rms(x, w[p + "input_layernorm.weight"])
            q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            att = np.empty((T, nh, hd), dtype=np.float32)
            for head in range(nh):
                kh, vh = k[:, head // group], v[:, head // group]
                s = (q[:, head] @ kh.T) / np.float32(math.sqrt(hd)) + mask
                s = np.exp(s - s.max(axis=-1, keepdims=True))
                att[:, head] = (s / s.sum(axis=-1, keepdims=True)) @ vh
            x = x + att.reshape(T, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
            h = self.rms(x, w[p + "post_attention_layernorm.weight"])
            g = h @ w[p + "mlp.gate_proj.weight"].T
            u = h @ w[p + "mlp.up_proj.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * u) @ w[p + "mlp.down_proj.weight"].T
        x = self.rms(x, w["model.norm.weight"])
        return x @ w["model.embed_tokens.weight"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo"))
    ap.add_argument("--text", default=os.path.join(ROOT, ".dev", "demo", "heldout.txt"))
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="greedy steps checked per recorded prompt")
    ap.add_argument("--tol", type=float, default=0.01, help="relative perplexity tolerance")
    args = ap.parse_args()
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if ok:
            passed += 1
        else:
            failed += 1

    m = Llama(args.model)
    with open(os.path.join(args.model, "train_log.json")) as f:
        log = json.load(f)
    bos = m.c["bos_token_id"]

    for s in (log["samples"] if args.steps > 0 else []):
        ids = list(s["prompt_ids"])
        want = s["greedy_ids"][:args.steps]
        got, gaps = [], []
        for _ in range(len(want)):
            last = m.logits(ids)[-1]
            top2 = np.argsort(last)[-2:]
            got.append(int(top2[1]))
            gaps.append(float(last[top2[1]] - last[top2[0]]))
            ids.append(got[-1])
        # Where the GPU run (TF32 matmuls) and this f32 run may legitimately differ: a near tie.
        first_diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        label = s.get("prompt", "chat")
        if first_diff is None:
            check(True, f"greedy {label!r}: {len(want)} ids match the training run (min top-2 gap {min(gaps):.3f})")
        else:
            check(gaps[first_diff] < 1e-2,
                  f"greedy {label!r}: first difference at step {first_diff} (top-2 gap {gaps[first_diff]:.4f})")

    if not os.path.exists(args.text):
        print(f"note: {args.text} absent (tools/demo/prepare_text.sh makes it): perplexity not checked")
    else:
        r = subprocess.run(["node", "-e", NODE_ENCODE, ROOT, args.model, args.text],
                           capture_output=True, text=True)
        if r.returncode != 0:
            check(False, f"node tokenizer: {r.stderr.strip()[:300]}")
        else:
            ids = json.loads(r.stdout)
            n = args.ctx - 1
            total = 0.0
            for i in range(0, len(ids), n):
                chunk = ids[i:i + n]
                lg = m.logits([bos] + chunk)[:-1].astype(np.float64)
                lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
                total += float(np.sum(lse - lg[np.arange(len(chunk)), chunk]))
            ppl = math.exp(total / len(ids))
            ref = log["heldout"]["by_ctx"].get(str(args.ctx), {}).get("ppl")
            print(f"held-out ctx {args.ctx}: {len(ids)} tokens, loss {total / len(ids):.5f}, ppl {ppl:.4f} "
                  f"(training run: {ref})")
            check(ref is not None and abs(ppl / ref - 1) <= args.tol,
                  f"perplexity {ppl:.4f} within {args.tol:.0%} of the training run's {ref}")
    print(f"RESULT {passed} {failed}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
