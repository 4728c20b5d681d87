#!/usr/bin/env python3
"""make_gguf_seeds.py — writes the small GGUF seed files of tests/fuzz/corpus/gguf/.

A one-layer llama with 4-wide hidden states and an 8-token byte-level BPE vocabulary
(tokenizer.ggml.* as llama.cpp lays it out), an SPM-vocabulary variant, and a file of
one Q8_0 tensor with nested metadata arrays. Written by hand from the GGUF format
(little-endian, version 3, 32-byte alignment); run from the repository root.
"""
import struct, sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)

def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack('<Q', len(b)) + b

def val(t, v):
    if t == STR: return s(v)
    if t == ARR:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(val(et, i) for i in items)
    fmt = {U8: 'B', I8: 'b', U16: 'H', I16: 'h', U32: 'I', I32: 'i', F32: 'f', BOOL: '?', U64: 'Q', I64: 'q', F64: 'd'}[t]
    return struct.pack('<' + fmt, v)

def gguf(kvs, tensors, align=32):
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack('<I', t) + val(t, v)
    data = b''
    for name, gtype, ne, raw in tensors:
        while len(data) % align: data += b'\0'
        out += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n) for n in ne)
        out += struct.pack('<IQ', gtype, len(data))
        data += raw
    while len(out) % align: out += b'\0'
    return out + data

def f32(n, seed=1):
    return b''.join(struct.pack('<f', ((i * 7 + seed) % 11 - 5) / 8.0) for i in range(n))

D, H, KV, HD, FF, V = 4, 2, 1, 2, 4, 8
llama_kv = [
    ('general.architecture', STR, 'llama'), ('general.name', STR, 'fuzz-seed'),
    ('llama.block_count', U32, 1), ('llama.context_length', U32, 64), ('llama.embedding_length', U32, D),
    ('llama.feed_forward_length', U32, FF), ('llama.attention.head_count', U32, H),
    ('llama.attention.head_count_kv', U32, KV), ('llama.rope.freq_base', F32, 10000.0),
    ('llama.attention.layer_norm_rms_epsilon', F32, 1e-5), ('llama.vocab_size', U32, V),
]
tensors = [
    ('token_embd.weight', 0, [D, V], f32(D * V)), ('output_norm.weight', 0, [D], f32(D, 2)),
    ('blk.0.attn_norm.weight', 0, [D], f32(D, 3)), ('blk.0.attn_q.weight', 0, [D, H * HD], f32(D * H * HD, 4)),
    ('blk.0.attn_k.weight', 0, [D, KV * HD], f32(D * KV * HD, 5)), ('blk.0.attn_v.weight', 0, [D, KV * HD], f32(D * KV * HD, 6)),
    ('blk.0.attn_output.weight', 0, [H * HD, D], f32(D * H * HD, 7)), ('blk.0.ffn_norm.weight', 0, [D], f32(D, 8)),
    ('blk.0.ffn_gate.weight', 0, [D, FF], f32(D * FF, 9)), ('blk.0.ffn_up.weight', 0, [D, FF], f32(D * FF, 10)),
    ('blk.0.ffn_down.weight', 0, [FF, D], f32(D * FF, 11)),
]
bpe_tok = [
    ('tokenizer.ggml.model', STR, 'gpt2'), ('tokenizer.ggml.pre', STR, 'qwen2'),
    ('tokenizer.ggml.tokens', ARR, (STR, ['a', 'b', 'Ġ', 'ab', 'Ġa', '<s>', '</s>', 'c'])),
    ('tokenizer.ggml.token_type', ARR, (I32, [1, 1, 1, 1, 1, 3, 3, 1])),
    ('tokenizer.ggml.merges', ARR, (STR, ['a b', 'Ġ a'])),
    ('tokenizer.ggml.bos_token_id', U32, 5), ('tokenizer.ggml.eos_token_id', U32, 6),
    ('tokenizer.ggml.add_bos_token', BOOL, True),
    ('tokenizer.chat_template', STR, "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"),
]
spm_tok = [
    ('tokenizer.ggml.model', STR, 'llama'),
    ('tokenizer.ggml.tokens', ARR, (STR, ['<unk>', '<s>', '</s>', '<0x41>', '▁', 'a', '▁a', 'b'])),
    ('tokenizer.ggml.scores', ARR, (F32, [0, 0, 0, 0, -1, -2, -3, -4])),
    ('tokenizer.ggml.token_type', ARR, (I32, [2, 3, 3, 6, 1, 1, 1, 1])),
    ('tokenizer.ggml.bos_token_id', U32, 1), ('tokenizer.ggml.eos_token_id', U32, 2),
    ('tokenizer.ggml.unknown_token_id', U32, 0), ('tokenizer.ggml.add_space_prefix', BOOL, True),
]
out = sys.argv[1] if len(sys.argv) > 1 else 'tests/fuzz/corpus/gguf'
open(out + '/llama_bpe.gguf', 'wb').write(gguf(llama_kv + bpe_tok, tensors))
open(out + '/llama_spm.gguf', 'wb').write(gguf(llama_kv + spm_tok, tensors))
q8 = struct.pack('<e', 0.5) + bytes(range(32))
meta = [('general.architecture', STR, 'qwen2'), ('general.alignment', U32, 64),
        ('x.nested', ARR, (ARR, [(U8, [1, 2]), (STR, ['x', 'yz'])])),
        ('x.all', ARR, (F64, [1.5, -2.0])), ('x.i64', I64, -3), ('x.u16', U16, 7), ('x.i8', I8, -1),
        ('x.u64', U64, 2**63 + 1), ('x.i16', I16, -2), ('x.f64', F64, 0.25)]
open(out + '/q8_nested.gguf', 'wb').write(gguf(meta, [('blk.0.ffn_up.weight', 8, [32, 1], q8)], align=64))
