#!/usr/bin/env python3
"""mtp_cost.py — costs and computed speedups from bench/mtp_run.sh's output (stdin or a file).

Per backend: plain ms/token (1000 / the plain run's generated tok/s), drafter ms per drafted
token (draft ms / drafted) and verification ms per round (verify ms / rounds) of each assistant,
the drafted token's cost as a fraction of a plain step, and the speedup at a per-token
acceptance α with block k = 4: E = (1 − α^(k+1)) / (1 − α) tokens per round (k + 1 at α = 1),
a round costing k drafter calls + one verification, speedup = E · t_plain / (k · t_draft + t_verify)
(the formula of docs/BENCHMARKS.md's MTP section). Also checks that each backend's speculative
runs gave the plain run's ids.

    python3 bench/mtp_cost.py mtp_run.log
"""
import re
import sys

K = 4
text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
runs = {}
for block in text.split("== ")[1:]:
    label, _, body = block.partition("\n")
    r = {}
    m = re.search(r"generated (\d+) tok, ([\d.]+) tok/s", body)
    if m:
        r["tps"] = float(m.group(2))
    m = re.search(r"drafted (\d+), accepted (\d+).* in (\d+) rounds.*draft (\d+) ms, verify (\d+) ms", body)
    if m:
        r.update(drafted=int(m.group(1)), accepted=int(m.group(2)), rounds=int(m.group(3)),
                 draft_ms=float(m.group(4)), verify_ms=float(m.group(5)))
    m = re.search(r"^ids (\S+)", body, re.M)
    r["ids"] = m.group(1) if m else None
    runs[label.strip()] = r


def tokens_per_round(a):
    return K + 1 if a >= 1 else (1 - a ** (K + 1)) / (1 - a)


ok = True
for be in ("cuda", "cpu"):
    plain = runs.get(be + " plain")
    if not plain or "tps" not in plain:
        continue
    tp = 1000.0 / plain["tps"]
    print(f"{be}: plain {tp:.3f} ms/token ({plain['tps']:.1f} tok/s)")
    for kind in ("dense", "centroid"):
        r = runs.get(f"{be} mtp {kind}")
        if not r or "drafted" not in r or not r["drafted"] or not r["rounds"]:
            print(f"  {kind}: no statistics")
            ok = False
            continue
        td, tv = r["draft_ms"] / r["drafted"], r["verify_ms"] / r["rounds"]
        same = r["ids"] == plain["ids"]
        ok = ok and same
        sp = " ".join(f"α={a}: {tokens_per_round(a) * tp / (K * td + tv):.2f}x" for a in (0.6, 0.8, 1.0))
        print(f"  {kind}: draft {td:.3f} ms/drafted token ({td / tp:.2f} of a plain step), verify {tv:.3f} ms/round "
              f"({tv / tp:.2f} steps), accepted {r['accepted']}/{r['drafted']}, ids {'= plain' if same else 'DIFFER'}; {sp}")
sys.exit(0 if ok else 1)
