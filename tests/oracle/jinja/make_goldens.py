#!/usr/bin/env python3
"""make_goldens.py — render test cases with Python jinja2 configured as transformers does.

Input (argv[1]): JSON list of {"key", "template", "context"}; output (argv[2]): JSON object
key -> {"text": ...} or {"error": ...}; with argv[3] == "--hash", texts are replaced by the
first 24 hex digits of their SHA-256 ({"sha256": ...}), for templates whose text is not ours
to commit. argv[4] (optional): a fixed epoch for strftime_now. The environment matches transformers'
chat_template_utils: ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks) with the
loopcontrols extension and a `generation` block tag, a tojson filter that calls
json.dumps(ensure_ascii=False, indent, separators, sort_keys), raise_exception and
strftime_now. Used by tests/oracle/jinja.mjs --write-goldens (test tooling only).
"""
import hashlib
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers tracks indices)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


NOW = None


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: (datetime.fromtimestamp(NOW) if NOW else datetime.now()).strftime(fmt)
    return env


def main():
    global NOW
    hashed = len(sys.argv) > 3 and sys.argv[3] == "--hash"
    if len(sys.argv) > 4:
        NOW = int(sys.argv[4])
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    env = make_env()
    compiled = {}
    out = {}
    for c in cases:
        src = c["template"]
        try:
            if src not in compiled:
                compiled[src] = env.from_string(src)
            ctx = c["context"]
            if isinstance(ctx, str):  # raw JSON text: keeps 1.0 apart from 1
                ctx = json.loads(ctx)
            text = compiled[src].render(**ctx)
            if hashed:
                out[c["key"]] = {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]}
            else:
                out[c["key"]] = {"text": text}
        except Exception as e:  # parse and render errors alike
            out[c["key"]] = {"error": f"{type(e).__name__}: {e}"[:200]}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
