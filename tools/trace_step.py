#!/usr/bin/env python3
"""trace_step.py FILE [--section N] — the decode step's timeline from a measurement build's trace.

A build with `make CUDA=1 CUDA_TRACE=1` records one line per block of its instrumented kernels
(src/backend/cuda/cuda_trace.cuh): kind, id (the launch's first weight or K cache), block, and six
%globaltimer readings: start, four points (k_gemv_q: first loads issued, wait returned, activations
quantized, first batch used; attention: wait returned, q staged, steps done, cluster merge done),
end (a point a block did not pass reads 0 and is left out of the medians; a build with
-DLMC_CUDA_TRACE_ATT_STEP in NVCCFLAGS records attention's first step's scores and softmax done as
its first two points). This groups the blocks into launches (same kind and id, starts within 20 µs), cuts the launches
into steps at the kernel that starts each step's first layer, and prints, as medians over the steps
and the layers, each launch's times from the previous launch's last block end: its first block's
start, the median block's four points, the last block's third and fourth, its median and last
block end (µs). Kinds: 1 decode attention (2: its spare blocks,
which prefetch), 100·dtype + 10·tokens + 1 plain / 2 gate·up / 3 q·k·v with rope.
"""
import sys
from collections import defaultdict
from statistics import median


def sections(path):
    cur = []
    out = [cur]
    for line in open(path):
        if line.startswith('#'):
            cur = []
            out.append(cur)
            continue
        f = line.split()
        if len(f) != 9:
            continue
        cur.append((int(f[0]), f[1], int(f[2])) + tuple(int(x) for x in f[3:]))
    return [s for s in out if s]


def launches(recs):
    by = defaultdict(list)
    for r in recs:
        by[(r[0], r[1])].append(r)
    out = []
    for key, rs in by.items():
        rs.sort(key=lambda r: r[3])
        cur = [rs[0]]
        for r in rs[1:]:
            if r[3] - cur[-1][3] > 20000:
                out.append((key, cur))
                cur = []
            cur.append(r)
        out.append((key, cur))
    res = []
    for (kind, ident), rs in out:
        # a point a block never passed is 0 (TRACE_ONCE in a loop the block skipped): left out
        t = [[r[3 + k] for r in rs if r[3 + k]] or [rs[0][3]] for k in range(6)]
        res.append(dict(kind=kind, id=ident, n=len(rs), start=min(t[0]), p1=median(t[1]), p2=median(t[2]),
                        p3=median(t[3]), p4=median(t[4]), p3x=max(t[3]), p4x=max(t[4]), e_med=median(t[5]),
                        e_max=max(t[5])))
    res.sort(key=lambda l: l['start'])
    return res


def name(kind):
    if kind == 1:
        return 'attention'
    if kind == 2:
        return 'attn prefetch'
    v = kind % 10
    return {1: 'product', 2: 'gate/up', 3: 'q/k/v+rope'}.get(v, '?') + ' (%d tok)' % (kind // 10 % 10)


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    sec = -1
    if '--section' in args:
        i = args.index('--section')
        sec = int(args[i + 1])
        del args[i:i + 2]
    secs = sections(args[0])
    if not secs:
        print('no records')
        return 1
    ls = [l for l in launches(secs[sec]) if l['kind'] != 2]
    ls = [l for l in ls if l['kind'] == 1 or l['kind'] // 10 % 10 == 1]  # one token
    qkv = [l for l in ls if l['kind'] % 10 == 3]
    if not qkv:
        print('no q/k/v launches (one token) in the trace')
        return 1
    ids = []
    for l in qkv:
        if l['id'] not in ids:
            ids.append(l['id'])
    # a step starts with layer 0's q/k/v: the q/k/v launch after the largest gap between q/k/v launches
    # (the LM head, sampling and the embedding lie in it)
    gaps = [(qkv[i]['start'] - qkv[i - 1]['e_max'], qkv[i]['id']) for i in range(1, len(qkv))]
    first_id = max(gaps)[1] if gaps else qkv[0]['id']
    starts = [i for i, l in enumerate(ls) if l['kind'] % 10 == 3 and l['id'] == first_id]
    steps = [ls[starts[i]:starts[i + 1]] for i in range(len(starts) - 1)]
    steps = steps[1:]  # the first one may be cut by the buffer's wrap
    if not steps:
        print('fewer than three steps in the trace')
        return 1
    n_layers = len(ids)
    print('%d steps, %d layers; step time (first q/k/v start to next): median %.1f µs' %
          (len(steps), n_layers, median([ls[starts[i + 1]]['start'] - ls[starts[i]]['start'] for i in range(1, len(starts) - 1)]) / 1000))
    # per position in the layer (q/k/v, attention, o, gate/up, down): times from the previous launch's end
    pos = defaultdict(lambda: defaultdict(list))
    for st in steps:
        layer = -1
        k = 0
        prev = None
        for l in st:
            if l['kind'] % 10 == 3:
                layer += 1
                k = 0
            else:
                k += 1
            if 0 < layer < n_layers and prev is not None:  # layer 0 follows the embedding, not a product
                d = pos[k]
                d['kind'].append(l['kind'])
                d['blocks'].append(l['n'])
                base = prev['e_max']
                for f in ('start', 'p1', 'p2', 'p3', 'p4', 'p3x', 'p4x', 'e_med', 'e_max'):
                    d[f].append((l[f] - base) / 1000)
                d['dur'].append((l['e_max'] - prev['e_max']) / 1000)
            prev = l
    print('position  kind                 blocks  start     p1     p2     p3     p4 p3/p4 last  end med/max  end-to-end (µs)')
    tot = 0
    for k in sorted(pos):
        d = pos[k]
        m = {f: median(v) for f, v in d.items() if f != 'kind'}
        if k <= 4:
            tot += m['dur']
        print('%8d  %-20s %6d %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f   %6.2f' % (
            k, name(d['kind'][0]), m['blocks'], m['start'], m['p1'], m['p2'], m['p3'], m['p4'], m['p3x'], m['p4x'],
            m['e_med'], m['e_max'], m['dur']))
    print('layer (positions 0-4, sum of the medians): %.2f µs' % tot)
    return 0


if __name__ == '__main__':
    sys.exit(main())
