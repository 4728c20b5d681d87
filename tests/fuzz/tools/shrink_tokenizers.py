#!/usr/bin/env python3
"""shrink_tokenizers.py — small seeds for tests/fuzz/corpus/tokenizer_load/.

Takes each synthetic tokenizer.json of tests/oracle/tok/synth/ (every model type and most
normalizers, pre-tokenizers, post-processors and decoders) and keeps its pipeline but only
a few dozen vocabulary entries, the merges among them and the added tokens, so a seed is
a few KB and the fuzzer runs fast. Run from the repository root.
"""
import glob, json, os

KEEP = 48
for path in sorted(glob.glob('tests/oracle/tok/synth/*/tokenizer.json')):
    name = os.path.basename(os.path.dirname(path))
    t = json.load(open(path))
    m = t['model']
    added = {a['content']: a['id'] for a in t.get('added_tokens', [])}
    if isinstance(m.get('vocab'), dict):
        items = sorted(m['vocab'].items(), key=lambda kv: kv[1])
        keep = dict(items[:KEEP])
        for tok, i in items:  # byte-level alphabets and pieces the merges need stay whole
            if len(tok) == 1 and len(keep) < 3 * KEEP: keep[tok] = i
        ids = sorted(keep.values())
        remap = {old: new for new, old in enumerate(ids)}
        m['vocab'] = {tok: remap[i] for tok, i in keep.items()}
        if m.get('merges'):
            out = []
            for mg in m['merges']:
                a, b = mg.split(' ', 1) if isinstance(mg, str) else mg
                if a in keep and b in keep and (a + b) in keep: out.append(mg)
            m['merges'] = out[:KEEP]
        base = len(ids)
    else:
        m['vocab'] = m['vocab'][:KEEP]
        if m.get('unk_id') is not None and m['unk_id'] >= KEEP: m['unk_id'] = 0
        base = len(m['vocab'])
        remap = None
    na = []
    for a in t.get('added_tokens', [])[:16]:
        if remap is not None and a['id'] in remap: a['id'] = remap[a['id']]
        elif remap is not None or a['id'] >= base: a['id'] = base + len(na)
        na.append(a)
    t['added_tokens'] = na
    ids_of = {a['content']: a['id'] for a in na}
    pp = json.dumps(t.get('post_processor'))
    for content, old in added.items():  # special_tokens ids in post-processors follow the added tokens
        if content in ids_of: pp = pp.replace('[%d]' % old, '[%d]' % ids_of[content])
    t['post_processor'] = json.loads(pp)
    with open('tests/fuzz/corpus/tokenizer_load/' + name, 'w') as f:
        json.dump(t, f, ensure_ascii=False, separators=(',', ':'))
