# synth_llama8b.py OUT [LAYERS] — a random-weight Llama-3.1-8B-shape checkpoint (bf16, torch on a GPU)
# for the CUDA / tensor-parallel benchmarks (tests/cuda/tp_run.sh). Weights N(0, 0.02^2), norms 1.
import json, os, sys, torch
from safetensors.torch import save_file
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
H, L, NH, KV, I, V = 4096, int(sys.argv[2]) if len(sys.argv) > 2 else 32, 32, 8, 14336, 128256
cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": H, "num_hidden_layers": L,
       "num_attention_heads": NH, "num_key_value_heads": KV, "intermediate_size": I, "vocab_size": V,
       "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
       "torch_dtype": "bfloat16", "hidden_act": "silu"}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
g = torch.Generator(device="cuda").manual_seed(0)
def r(*s): return (torch.randn(*s, generator=g, device="cuda", dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()
t = {"model.embed_tokens.weight": r(V, H), "model.norm.weight": torch.ones(H, dtype=torch.bfloat16), "lm_head.weight": r(V, H)}
for i in range(L):
    p = "model.layers.%d." % i
    t[p + "input_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
    t[p + "post_attention_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
    t[p + "self_attn.q_proj.weight"] = r(NH * 128, H); t[p + "self_attn.k_proj.weight"] = r(KV * 128, H)
    t[p + "self_attn.v_proj.weight"] = r(KV * 128, H); t[p + "self_attn.o_proj.weight"] = r(H, NH * 128)
    t[p + "mlp.gate_proj.weight"] = r(I, H); t[p + "mlp.up_proj.weight"] = r(I, H); t[p + "mlp.down_proj.weight"] = r(H, I)
save_file(t, os.path.join(out, "model.safetensors"))
print("wrote", out)
