#!/usr/bin/env python3
"""train.py — train lmc's embedded demo model (a small Llama) from scratch on the KJV Bible.

Runs on a CUDA machine with torch + transformers + tokenizers. Input: the text files written by
tools/demo/prepare_text.sh (train.txt, valid.txt, heldout.txt: one verse per line). Output: an
HF-layout model folder (config.json, generation_config.json, bf16 model.safetensors,
tokenizer.json, tokenizer_config.json with a chat template, train_log.json). Owned by the
demo-model area (tools/demo/); the model card is models/demo/README.md.

Held-out perplexity protocol (what `lmc perplexity --ctx N` must reproduce):
  ids = tokenizer.encode(whole file text, no special tokens); cut ids into consecutive chunks
  of N-1 tokens (the last one may be shorter); each chunk is run as [<|bos|>] + chunk and every
  chunk token is scored given the tokens before it in its window; ppl = exp(sum NLL / len(ids)).

Example:
  python3 tools/demo/train.py --data .dev/demo --out /tmp/demo --minutes 3 --epochs 30
"""
import argparse
import inspect
import json
import math
import os
import platform
import random
import shutil
import sys
import time

SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
PAD, BOS, EOS, USER, ASSISTANT, SYSTEM, END = SPECIAL_TOKENS

# Chat template (a small Jinja subset: for, if, attribute lookup, output). Each message is
#   <|role|>\n{content}<|end|>\n
# and the generation prompt is <|assistant|>\n. Generation stops at <|end|> or <|eos|>.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "Answer in the words of the King James Bible.",
    "You are lmc's demo model. You know only the King James Bible.",
]

PROMPTS = ["In the beginning", "And Jesus said", "The LORD is"]
CHAT_PROMPT = "The LORD is my shepherd; I shall not want."


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=".dev/demo", help="folder with train.txt, valid.txt, heldout.txt")
    p.add_argument("--out", required=True, help="output model folder")
    p.add_argument("--tokenizer-dir", default=None,
                   help="reuse tokenizer.json from this folder if present, else train it and save it there")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--max-pos", type=int, default=1024)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--seq", type=int, default=512, help="training sequence length (tokens, BOS included)")
    p.add_argument("--batch", type=int, default=32, help="sequences per step")
    p.add_argument("--epochs", type=float, default=30.0, help="training tokens = epochs x train tokens")
    p.add_argument("--minutes", type=float, default=7.0, help="wall-clock budget of the training loop")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--dropout", type=float, default=0.1, help="residual + embedding dropout (training only)")
    p.add_argument("--chat-frac", type=float, default=0.1, help="fraction of rows that are chat-formatted")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-ctx", type=int, nargs="+", default=[128, 256, 512, 1024])
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--max-steps", type=int, default=0, help="hard step cap (0: none), for smoke tests")
    p.add_argument("--tokenizer-only", action="store_true", help="train/load the tokenizer, then stop")
    p.add_argument("--samples", type=int, default=80, help="new tokens per sample generation")
    return p.parse_args(argv)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read_text(path):
    with open(path, "r", encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(train_text, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train_text.splitlines(keepends=True), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)])
    return tok


def tokenizer_config(max_len):
    added = {}
    for i, t in enumerate(SPECIAL_TOKENS):
        added[str(i)] = {"content": t, "lstrip": False, "rstrip": False, "normalized": False,
                         "single_word": False, "special": True}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": None,
        "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_len,
        "added_tokens_decoder": added,
        "additional_special_tokens": [USER, ASSISTANT, SYSTEM, END],
        "chat_template": CHAT_TEMPLATE,
    }


def load_or_train_tokenizer(args, train_text):
    from tokenizers import Tokenizer
    if args.tokenizer_dir and os.path.exists(os.path.join(args.tokenizer_dir, "tokenizer.json")):
        tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
        log(f"tokenizer loaded from {args.tokenizer_dir}")
    else:
        t0 = time.time()
        tok = train_tokenizer(train_text, args.vocab)
        log(f"tokenizer trained in {time.time() - t0:.1f}s, vocab {tok.get_vocab_size()}")
        if args.tokenizer_dir:
            os.makedirs(args.tokenizer_dir, exist_ok=True)
            tok.save(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:
            raise SystemExit(f"special token {t} has id {tok.token_to_id(t)}, expected {i}")
    if tok.get_vocab_size() != args.vocab:
        raise SystemExit(f"tokenizer vocab {tok.get_vocab_size()} != --vocab {args.vocab}")
    return tok


def render_chat(messages, add_generation_prompt):
    """Render CHAT_TEMPLATE with jinja2 exactly as transformers does (same globals we use)."""
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, bos_token=BOS, eos_token=EOS,
                                                  add_generation_prompt=add_generation_prompt)


# ---------------------------------------------------------------- data

def build_chat_pool(tok, lines, n_rows, seq, rng):
    """Rows of chat-formatted text: a user turn quotes a verse, the assistant answers with the
    next one or two verses. Rows are filled with turns and cut at seq tokens."""
    import numpy as np
    enc = tok.encode_batch(lines, add_special_tokens=False)
    verse_ids = [e.ids for e in enc]
    nl = tok.encode("\n", add_special_tokens=False).ids
    sys_ids = [tok.encode(s, add_special_tokens=False).ids for s in SYSTEM_PROMPTS]
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    rows = np.zeros((n_rows, seq), dtype=np.int64)
    for r in range(n_rows):
        row = [ids[BOS]]
        if rng.random() < 0.3:
            row += [ids[SYSTEM]] + nl + sys_ids[rng.randrange(len(sys_ids))] + [ids[END]] + nl
        i = rng.randrange(len(verse_ids) - 64)
        while len(row) < seq and i + 3 < len(verse_ids):
            row += [ids[USER]] + nl + verse_ids[i] + [ids[END]] + nl
            k = 1 + (rng.random() < 0.4)
            answer = []
            for j in range(k):
                answer += (nl if j else []) + verse_ids[i + 1 + j]
            row += [ids[ASSISTANT]] + nl + answer + [ids[END]] + nl
            i += 1 + k
        row = row[:seq]
        if len(row) < seq:
            row += [ids[PAD]] * (seq - len(row))
        rows[r] = row
    return rows


def check_chat_encoding(tok, lines):
    """The hand-built chat rows must equal tokenizing the rendered template."""
    msgs = [{"role": "system", "content": SYSTEM_PROMPTS[0]},
            {"role": "user", "content": lines[0]}, {"role": "assistant", "content": lines[1]}]
    text = render_chat(msgs, False)
    a = tok.encode(text, add_special_tokens=False).ids
    nl = tok.encode("\n", add_special_tokens=False).ids
    t = tok.token_to_id
    b = [t(BOS), t(SYSTEM)] + nl + tok.encode(SYSTEM_PROMPTS[0], add_special_tokens=False).ids + [t(END)] + nl
    b += [t(USER)] + nl + tok.encode(lines[0], add_special_tokens=False).ids + [t(END)] + nl
    b += [t(ASSISTANT)] + nl + tok.encode(lines[1], add_special_tokens=False).ids + [t(END)] + nl
    if a != b:
        raise SystemExit(f"chat encoding mismatch:\n{a}\n{b}\nrendered: {text!r}")
    return text


# ---------------------------------------------------------------- model

def make_config(args, tok):
    from transformers import LlamaConfig
    kw = dict(vocab_size=tok.get_vocab_size(), hidden_size=args.hidden, intermediate_size=args.intermediate,
              num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
              head_dim=args.hidden // args.heads, max_position_embeddings=args.max_pos, rms_norm_eps=1e-5,
              hidden_act="silu", tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
              attention_dropout=0.0, initializer_range=0.02, use_cache=True,
              bos_token_id=tok.token_to_id(BOS), eos_token_id=tok.token_to_id(EOS), pad_token_id=tok.token_to_id(PAD))
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": args.rope_theta}
    else:
        kw["rope_theta"] = args.rope_theta
    cfg = LlamaConfig(**kw)
    cfg.architectures = ["LlamaForCausalLM"]
    return cfg


def add_dropout_hooks(model, p):
    """Residual dropout on every attention/MLP output and on the embeddings (training only).
    Hooks leave the saved architecture untouched: inference is a plain Llama."""
    import torch.nn.functional as F

    def hook(mod, inp, out):
        if not mod.training or p <= 0:
            return out
        if isinstance(out, tuple):
            return (F.dropout(out[0], p, True),) + tuple(out[1:])
        return F.dropout(out, p, True)

    handles = [model.model.embed_tokens.register_forward_hook(hook)]
    for layer in model.model.layers:
        handles.append(layer.self_attn.register_forward_hook(hook))
        handles.append(layer.mlp.register_forward_hook(hook))
    return handles


def window_nll(model, ids, bos_id, ctx, device, batch=16, autocast=True):
    """Sum of NLL and token count over ids under the held-out protocol (see module doc)."""
    import torch
    import torch.nn.functional as F
    n = ctx - 1
    chunks = [ids[i:i + n] for i in range(0, len(ids), n)]
    total, count = 0.0, 0
    full = [c for c in chunks if len(c) == n]
    rest = [c for c in chunks if len(c) != n]
    groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[c] for c in rest]
    with torch.no_grad():
        for g in groups:
            x = torch.tensor([[bos_id] + c for c in g], dtype=torch.long, device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and device.type == "cuda"):
                logits = model(input_ids=x).logits
            logits = logits[:, :-1].float()
            tgt = x[:, 1:]
            nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), reduction="sum")
            total += nll.item()
            count += tgt.numel()
    assert count == len(ids)
    return total, count


# ---------------------------------------------------------------- main

def main(argv=None):
    args = parse_args(argv)
    t_start = time.time()
    import numpy as np
    import torch
    import torch.nn.functional as F
    import transformers
    import tokenizers
    from transformers import AutoModelForCausalLM, GenerationConfig

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    log(f"torch {torch.__version__} transformers {transformers.__version__} tokenizers {tokenizers.__version__} "
        f"device {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}")

    train_text = read_text(os.path.join(args.data, "train.txt"))
    valid_text = read_text(os.path.join(args.data, "valid.txt"))
    heldout_text = read_text(os.path.join(args.data, "heldout.txt"))
    tok = load_or_train_tokenizer(args, train_text)
    if args.tokenizer_only:
        return
    bos_id, eos_id, end_id, pad_id = (tok.token_to_id(t) for t in (BOS, EOS, END, PAD))

    t0 = time.time()
    train_ids = tok.encode(train_text, add_special_tokens=False).ids
    valid_ids = tok.encode(valid_text, add_special_tokens=False).ids
    heldout_ids = tok.encode(heldout_text, add_special_tokens=False).ids
    if tok.decode(heldout_ids, skip_special_tokens=False) != heldout_text:
        raise SystemExit("tokenizer round trip of heldout.txt failed")
    log(f"tokens: train {len(train_ids)} valid {len(valid_ids)} heldout {len(heldout_ids)} "
        f"(bytes/token {len(train_text.encode()) / len(train_ids):.2f}, {time.time() - t0:.1f}s)")
    lines = train_text.splitlines()
    chat_example = check_chat_encoding(tok, lines)
    rng = random.Random(args.seed)
    n_chat_rows = max(64, int(args.chat_frac * 16 * len(train_ids) / args.seq)) if args.chat_frac > 0 else 0
    chat_pool = build_chat_pool(tok, lines, n_chat_rows, args.seq, rng) if n_chat_rows else None

    # Plain rows start either at a verse start (after "\n") or anywhere, half and half.
    nl_id = tok.encode("\n", add_special_tokens=False).ids
    assert len(nl_id) == 1, nl_id
    stream = torch.tensor(train_ids, dtype=torch.long, device=device)
    L = args.seq - 1
    verse_starts = (torch.nonzero(stream[:-L - 1] == nl_id[0]).flatten() + 1)
    verse_starts = torch.cat([torch.zeros(1, dtype=torch.long, device=device), verse_starts])
    chat_t = torch.tensor(chat_pool, device=device) if chat_pool is not None else None
    ar = torch.arange(L, device=device)
    bos_col = torch.full((args.batch, 1), bos_id, dtype=torch.long, device=device)
    n_chat = int(round(args.batch * args.chat_frac)) if chat_t is not None else 0

    def get_batch():
        n_plain = args.batch - n_chat
        any_start = torch.randint(0, len(train_ids) - L, (n_plain,), device=device)
        vs = verse_starts[torch.randint(0, len(verse_starts), (n_plain,), device=device)]
        pick = torch.rand(n_plain, device=device) < 0.5
        starts = torch.where(pick, vs, any_start)
        x = torch.cat([bos_col[:n_plain], stream[starts[:, None] + ar]], dim=1)
        if n_chat:
            x = torch.cat([x, chat_t[torch.randint(0, len(chat_t), (n_chat,), device=device)]], dim=0)
        return x

    config = make_config(args, tok)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "embeddings not tied"
    log(f"model: {n_params} parameters ({n_params * 2 / 2**20:.2f} MiB in bf16)")
    hooks = add_dropout_hooks(model, args.dropout)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")

    tokens_per_step = args.batch * args.seq
    planned_steps = max(1, int(args.epochs * len(train_ids) / tokens_per_step))
    if args.max_steps:
        planned_steps = min(planned_steps, args.max_steps)
    budget_s = args.minutes * 60.0
    log(f"plan: {planned_steps} steps x {tokens_per_step} tokens ({args.epochs} epochs), budget {budget_s:.0f}s")

    def lr_at(progress, step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        floor = args.lr * args.min_lr_frac
        return floor + 0.5 * (args.lr - floor) * (1 + math.cos(math.pi * min(1.0, progress)))

    def eval_valid():
        model.eval()
        tot, cnt = window_nll(model, valid_ids, bos_id, args.seq, device)
        model.train()
        return tot / cnt

    curve, evals = [], []
    best = {"loss": float("inf"), "step": -1, "state": None}
    step, tokens_seen, acc, acc_n = 0, 0, 0.0, 0
    t_loop = time.time()
    while True:
        elapsed = time.time() - t_loop
        progress = max(step / planned_steps, elapsed / budget_s)
        if progress >= 1.0:
            break
        lr = lr_at(progress, step)
        for g in opt.param_groups:
            g["lr"] = lr
        x = get_batch()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(input_ids=x).logits
        tgt = x[:, 1:]
        loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.size(-1)), tgt.reshape(-1),
                               ignore_index=pad_id)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += x.numel()
        acc = acc + loss.detach()
        acc_n += 1
        if step % args.log_every == 0 or step == 1:
            tl = float(acc) / acc_n
            acc, acc_n = 0.0, 0
            curve.append({"step": step, "tokens": tokens_seen, "train_loss": round(tl, 4), "lr": lr,
                          "grad_norm": round(float(gnorm), 3), "elapsed_s": round(time.time() - t_loop, 1)})
            log(f"step {step} loss {tl:.4f} lr {lr:.2e} gnorm {float(gnorm):.2f} "
                f"tok {tokens_seen / 1e6:.1f}M {tokens_seen / (time.time() - t_loop) / 1e3:.0f}k tok/s")
        if step % args.eval_every == 0:
            vl = eval_valid()
            evals.append({"step": step, "tokens": tokens_seen, "valid_loss": round(vl, 4),
                          "valid_ppl": round(math.exp(vl), 3), "elapsed_s": round(time.time() - t_loop, 1)})
            log(f"  eval step {step}: valid loss {vl:.4f} ppl {math.exp(vl):.2f}")
            if vl < best["loss"]:
                best = {"loss": vl, "step": step,
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    train_wall = time.time() - t_loop
    vl = eval_valid()
    evals.append({"step": step, "tokens": tokens_seen, "valid_loss": round(vl, 4),
                  "valid_ppl": round(math.exp(vl), 3), "elapsed_s": round(train_wall, 1)})
    log(f"end step {step}: valid loss {vl:.4f} ppl {math.exp(vl):.2f}, {train_wall:.0f}s")
    if vl <= best["loss"]:
        kept = {"step": step, "valid_loss": vl}
    else:
        model.load_state_dict(best["state"])
        kept = {"step": best["step"], "valid_loss": best["loss"]}
        log(f"restored best checkpoint of step {best['step']} (valid loss {best['loss']:.4f})")
    best = None
    for h in hooks:
        h.remove()

    # ---- save: bf16 weights, configs, tokenizer files
    out = args.out
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=bos_id, eos_token_id=[eos_id, end_id],
                                               pad_token_id=pad_id, do_sample=True, temperature=0.8,
                                               top_p=0.95, max_new_tokens=128)
    model.to(torch.bfloat16).save_pretrained(tmp)
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.move(os.path.join(tmp, name), os.path.join(out, name))
    left = sorted(os.listdir(tmp))
    shutil.rmtree(tmp, ignore_errors=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(args.max_pos), f, indent=2)
        f.write("\n")

    with open(os.path.join(out, "config.json")) as f:
        saved_config = json.load(f)
    from safetensors import safe_open
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        tensors = {k: [str(f.get_slice(k).get_dtype()), list(f.get_slice(k).get_shape())] for k in f.keys()}
    dtypes = sorted({v[0] for v in tensors.values()})
    log(f"saved {len(tensors)} tensors, dtypes {dtypes}; extra files not kept: {left}")

    # ---- reload what was saved (bf16 weights, f32 compute, like lmc's CPU path) and evaluate
    del model, opt, best
    torch.cuda.empty_cache()
    try:
        m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32)
    m = m.to(device).eval()
    # Plain float32 for the reference figures (the models shipped up to round 2 were evaluated
    # with TF32 matmuls still on; the perplexity moves far less than lmc's 1% tolerance).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    results = {}
    for ctx in args.eval_ctx:
        if ctx > args.max_pos:
            continue
        tot, cnt = window_nll(m, heldout_ids, bos_id, ctx, device, autocast=False)
        results[str(ctx)] = {"nll_sum": tot, "tokens": cnt, "loss": tot / cnt, "ppl": math.exp(tot / cnt)}
        log(f"heldout ctx {ctx}: loss {tot / cnt:.4f} ppl {math.exp(tot / cnt):.3f} over {cnt} tokens")
    vt, vc = window_nll(m, valid_ids, bos_id, args.seq, device, autocast=False)
    valid_final = {"ctx": args.seq, "loss": vt / vc, "ppl": math.exp(vt / vc), "tokens": vc}
    log(f"valid ctx {args.seq}: loss {vt / vc:.4f} ppl {math.exp(vt / vc):.3f}")

    # ---- samples
    samples = []
    gen_kw = dict(max_new_tokens=args.samples, pad_token_id=pad_id, eos_token_id=[eos_id, end_id])
    for prompt in PROMPTS:
        ids = tok.encode(prompt).ids  # BOS added by the post-processor
        x = torch.tensor([ids], device=device)
        with torch.no_grad():
            g = m.generate(input_ids=x, do_sample=False, **gen_kw)[0, len(ids):].tolist()
            torch.manual_seed(args.seed)
            s = m.generate(input_ids=x, do_sample=True, temperature=0.8, top_p=0.95, **gen_kw)[0, len(ids):].tolist()
        samples.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": g,
                        "greedy": tok.decode(g, skip_special_tokens=False),
                        "sampled_t0.8_p0.95": tok.decode(s, skip_special_tokens=False)})
        log(f"--- {prompt!r}\n  greedy : {prompt}{samples[-1]['greedy']!r}\n  sampled: "
            f"{prompt}{samples[-1]['sampled_t0.8_p0.95']!r}")
    chat_text = render_chat([{"role": "user", "content": CHAT_PROMPT}], True)
    ids = tok.encode(chat_text, add_special_tokens=False).ids
    with torch.no_grad():
        g = m.generate(input_ids=torch.tensor([ids], device=device), do_sample=False, **gen_kw)[0, len(ids):].tolist()
    samples.append({"chat_prompt": chat_text, "prompt_ids": ids, "greedy_ids": g,
                    "greedy": tok.decode(g, skip_special_tokens=False)})
    log(f"--- chat {CHAT_PROMPT!r}\n  greedy : {samples[-1]['greedy']!r}")

    # ---- check that transformers itself loads the tokenizer files the same way
    hf_check = {}
    try:
        from transformers import AutoTokenizer
        ht = AutoTokenizer.from_pretrained(out)
        hf_check["class"] = type(ht).__name__
        hf_check["encode_matches"] = ht("In the beginning")["input_ids"] == tok.encode("In the beginning").ids
        rendered = ht.apply_chat_template([{"role": "user", "content": CHAT_PROMPT}], tokenize=False,
                                          add_generation_prompt=True)
        hf_check["chat_template_matches"] = rendered == chat_text
    except Exception as e:  # recorded, not fatal: the files are what lmc reads
        hf_check["error"] = f"{type(e).__name__}: {e}"
    log(f"transformers tokenizer check: {hf_check}")

    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    train_log = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "args": vars(args),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "cuda_device": torch.cuda.get_device_name() if device.type == "cuda" else None},
        "data": {"train_tokens": len(train_ids), "valid_tokens": len(valid_ids), "heldout_tokens": len(heldout_ids),
                 "train_bytes": len(train_text.encode()), "chat_rows": n_chat_rows},
        "model": {"parameters": n_params, "tensors": tensors, "config": saved_config},
        "train": {"steps": step, "planned_steps": planned_steps, "tokens_seen": tokens_seen,
                  "epochs_seen": tokens_seen / len(train_ids), "wall_s": round(train_wall, 1),
                  "kept_checkpoint": kept,
                  "loss_curve": curve, "evals": evals},
        "heldout": {"protocol": "ids = encode(file text, no special tokens); chunks of ctx-1 tokens; "
                                "each chunk run as [bos]+chunk; every chunk token scored; ppl = exp(sum nll / n_ids); "
                                "bf16 weights from model.safetensors, float32 compute (TF32 matmuls off)",
                    "by_ctx": results},
        "valid_final": valid_final,
        "samples": samples,
        "chat_example": chat_example,
        "hf_tokenizer_check": hf_check,
        "file_sizes": sizes,
        "total_wall_s": round(time.time() - t_start, 1),
    }
    with open(os.path.join(out, "train_log.json"), "w") as f:
        json.dump(train_log, f, indent=1)
        f.write("\n")
    log(f"wrote {out}: {sizes}")
    big = [f for f, s in sizes.items() if s > 16 * 2**20]
    if big or sum(sizes.values()) > 30 * 10**6:
        raise SystemExit(f"model folder too large: {sizes}")



if __name__ == "__main__":
    main()
