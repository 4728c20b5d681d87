#!/usr/bin/env python3
"""mtp_synth.py — a random-weight Gemma 4 target and its two assistants (dense tied head and
centroid head) of realistic width, for timing speculative decoding with the MTP drafter
(bench/mtp_run.sh). Needs torch + transformers (the GPU machine has both).

    python3 bench/mtp_synth.py OUT [layers]

Writes OUT/target (gemma4_text: hidden 1536, 8 query / 2 KV heads, head_dim 256,
full layers 512, intermediate 6144, vocab 262144, every 4th layer full, bf16), OUT/dense and
OUT/centroid (gemma4_assistant: 4 layers, hidden 512, the target's KV heads and head dims,
2048 centroids, top 32). Random weights: drafts are never accepted, so what a run measures is
the mechanical cost of drafting and verifying, not a speedup.
"""
import os
import sys

import torch
import transformers

OUT = sys.argv[1]
LAYERS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}}
V = 262144
types = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(LAYERS)]
target = dict(vocab_size=V, hidden_size=1536, intermediate_size=6144, num_hidden_layers=LAYERS,
              num_attention_heads=8, num_key_value_heads=2, head_dim=256, global_head_dim=512,
              max_position_embeddings=4096, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
              final_logit_softcapping=30.0, pad_token_id=0, eos_token_id=1, bos_token_id=2,
              tie_word_embeddings=True, rope_parameters=ROPE, attention_bias=False, sliding_window=512,
              layer_types=types, num_kv_shared_layers=0, hidden_size_per_layer_input=0,
              vocab_size_per_layer_input=V, use_double_wide_mlp=False, attention_k_eq_v=False,
              enable_moe_block=False)


def init_buffers(model):
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("token_ordering"):
                b.copy_(torch.randperm(b.numel()).to(b.dtype).view(b.shape))
            elif name.endswith("layer_scalar"):
                b.fill_(1.0)


cfg = transformers.AutoConfig.for_model("gemma4_text", **target)
m = transformers.AutoModelForCausalLM.from_config(cfg)
init_buffers(m)
m.save_pretrained(os.path.join(OUT, "target"))
print("target", sum(p.numel() for p in m.parameters()) / 1e6, "M parameters", flush=True)
del m
for kind in ("dense", "centroid"):
    text = dict(vocab_size=V, hidden_size=512, intermediate_size=2048, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=256, global_head_dim=512,
                max_position_embeddings=4096, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                sliding_window=512, layer_types=["sliding_attention"] * 3 + ["full_attention"],
                num_kv_shared_layers=4, hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
                use_double_wide_mlp=False, enable_moe_block=False, attention_k_eq_v=False,
                rope_parameters=ROPE, final_logit_softcapping=None, pad_token_id=0, eos_token_id=1,
                bos_token_id=2)
    conf = transformers.AutoConfig.for_model(
        "gemma4_assistant", text_config=text, backbone_hidden_size=1536,
        use_ordered_embeddings=kind == "centroid", num_centroids=2048, centroid_intermediate_top_k=32,
        tie_word_embeddings=True)
    a = transformers.AutoModelForCausalLM.from_config(conf)
    init_buffers(a)
    a.save_pretrained(os.path.join(OUT, kind))
    print(kind, sum(p.numel() for p in a.parameters()) / 1e6, "M parameters", flush=True)
