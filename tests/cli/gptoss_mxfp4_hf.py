#!/usr/bin/env python3
"""gptoss_mxfp4_hf.py SRC DST — DST: the gpt_oss checkpoint SRC with its experts in Hugging Face's
MXFP4 form (config quantization_config quant_method "mxfp4"): each BF16 expert stack
`<name>` [E, in, out] (gate_up_proj, down_proj) becomes `<name>_blocks` U8 [E, out, in/32, 16]
(E2M1 codes, element 2k in the low nibble of byte k) and `<name>_scales` U8 [E, out, in/32]
(E8M0 exponents, 127 = 1.0), quantized as mlx does: e = round(log2(amax / 6)), each code the
nearest E2M1 value to x / 2^e (first of equals). Other tensors are copied. Standard library only
(runs where numpy is not installed)."""
import json
import math
import struct
import sys

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def bf16_values(raw):
    n = len(raw) // 2
    return struct.unpack("<%df" % n, b"".join(b"\0\0" + raw[2 * i:2 * i + 2] for i in range(n)))


def quant_block(x):
    amax = max(abs(v) for v in x)
    e = 0 if amax == 0 else int(round(math.log2(amax / 6.0)))  # Python rounds ties to even, like rintf
    e = max(-127, min(127, e))
    p = 2.0 ** e
    codes = [min(range(16), key=lambda c: abs(E2M1[c] - v / p)) for v in x]
    return bytes(codes[2 * k] | (codes[2 * k + 1] << 4) for k in range(16)), e + 127


def main(src, dst):
    with open(src + "/model.safetensors", "rb") as f:
        buf = f.read()
    hlen = struct.unpack("<Q", buf[:8])[0]
    head = json.loads(buf[8:8 + hlen])
    base = 8 + hlen
    meta = head.pop("__metadata__", None)
    out, parts, extra, off = {}, [], [], 0
    for name, t in head.items():
        a, z = t["data_offsets"]
        raw = buf[base + a:base + z]
        if name.endswith(("gate_up_proj", "down_proj")) and len(t["shape"]) == 3:
            assert t["dtype"] == "BF16", name
            E, n_in, n_out = t["shape"]
            assert n_in % 32 == 0, name
            w = bf16_values(raw)
            blocks, scales = bytearray(), bytearray()
            for e in range(E):
                for o in range(n_out):
                    row = [w[(e * n_in + k) * n_out + o] for k in range(n_in)]
                    for b in range(0, n_in, 32):
                        codes, s = quant_block(row[b:b + 32])
                        blocks += codes
                        scales.append(s)
            extra.append((name + "_blocks", [E, n_out, n_in // 32, 16], bytes(blocks)))
            extra.append((name + "_scales", [E, n_out, n_in // 32], bytes(scales)))
            continue
        out[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [off, off + len(raw)]}
        parts.append(raw)
        off += len(raw)
    for name, shape, raw in extra:  # U8 last: the float tensors keep their alignment
        out[name] = {"dtype": "U8", "shape": shape, "data_offsets": [off, off + len(raw)]}
        parts.append(raw)
        off += len(raw)
    if meta is not None:
        out["__metadata__"] = meta
    hj = json.dumps(out).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(dst + "/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(parts))
    with open(src + "/config.json") as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "mxfp4"}
    with open(dst + "/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    print("%s: %d expert stacks as _blocks/_scales" % (dst, len(extra) // 2))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
