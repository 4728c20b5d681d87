// check_model.mjs — checks the shipped demo model folder (models/demo/) without PyTorch.
//
// Structure: file sizes (each <= 16 MiB, folder <= 30 MB), config.json fields, the
// safetensors header (exactly the tensors a tied Llama of that config has, all BF16, shapes
// and offsets consistent, every value finite), tokenizer/generation configs and special ids.
// Oracles: @huggingface/tokenizers (from tests/oracle/node_modules) must encode the prompts
// of train_log.json to the ids the training run recorded and decode its greedy ids to its
// text; @huggingface/jinja must render the chat template to the recorded chat prompt; if
// .dev/demo/heldout.txt exists, its token count must match the training run's.
// Usage: node tools/demo/check_model.mjs [MODEL_DIR]   Prints `RESULT <passed> <failed>`.
// Owned by the demo-model area (tools/demo/).
import { existsSync, readFileSync, statSync, openSync, readSync, closeSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const dir = resolve(process.argv[2] || join(root, "models", "demo"));
let passed = 0, failed = 0;
function check(ok, what) {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${what}`); }
  return ok;
}
const readJson = (name) => JSON.parse(readFileSync(join(dir, name), "utf8"));
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// ---- files
const FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
  "tokenizer_config.json", "train_log.json"];
let total = 0;
for (const f of FILES) {
  const p = join(dir, f);
  if (!check(existsSync(p), `${f} exists`)) continue;
  const size = statSync(p).size;
  total += size;
  check(size <= 16 * 1024 * 1024, `${f} is ${size} bytes (limit 16 MiB)`);
}
check(total <= 30e6, `model folder is ${total} bytes (limit 30 MB)`);
if (failed) { console.log(`RESULT ${passed} ${failed}`); process.exit(1); }

// ---- config.json
const cfg = readJson("config.json");
const H = cfg.hidden_size, nh = cfg.num_attention_heads, nkv = cfg.num_key_value_heads;
const hd = cfg.head_dim ?? H / nh, I = cfg.intermediate_size, V = cfg.vocab_size, nl = cfg.num_hidden_layers;
check(cfg.model_type === "llama" && same(cfg.architectures, ["LlamaForCausalLM"]), "config: llama / LlamaForCausalLM");
check(hd * nh === H && nh % nkv === 0, `config: heads ${nh} x head_dim ${hd} = hidden ${H}, kv ${nkv} divides heads`);
check(cfg.tie_word_embeddings === true, "config: tied embeddings");
check(V === 4096 && cfg.max_position_embeddings === 1024, `config: vocab ${V}, max_position_embeddings ${cfg.max_position_embeddings}`);
const theta = cfg.rope_parameters?.rope_theta ?? cfg.rope_theta;
check(theta === 10000 && (cfg.rope_parameters?.rope_type ?? "default") === "default", `config: default rope, theta ${theta}`);

// ---- model.safetensors
const stPath = join(dir, "model.safetensors");
const buf = readFileSync(stPath);
const hlen = Number(buf.readBigUInt64LE(0));
check(hlen > 2 && 8 + hlen <= buf.length, `safetensors header length ${hlen}`);
const header = JSON.parse(buf.subarray(8, 8 + hlen).toString("utf8"));
delete header.__metadata__;
const expected = { "model.embed_tokens.weight": [V, H], "model.norm.weight": [H] };
for (let l = 0; l < nl; l++) {
  const p = `model.layers.${l}.`;
  Object.assign(expected, {
    [p + "input_layernorm.weight"]: [H], [p + "post_attention_layernorm.weight"]: [H],
    [p + "self_attn.q_proj.weight"]: [nh * hd, H], [p + "self_attn.k_proj.weight"]: [nkv * hd, H],
    [p + "self_attn.v_proj.weight"]: [nkv * hd, H], [p + "self_attn.o_proj.weight"]: [H, nh * hd],
    [p + "mlp.gate_proj.weight"]: [I, H], [p + "mlp.up_proj.weight"]: [I, H], [p + "mlp.down_proj.weight"]: [H, I],
  });
}
const names = Object.keys(header).sort();
check(same(names, Object.keys(expected).sort()), `safetensors holds exactly the ${Object.keys(expected).length} tensors of a tied llama (has ${names.length})`);
let params = 0, end = 0, badShape = [], badDtype = [], nonFinite = 0;
const spans = [];
for (const [n, t] of Object.entries(header)) {
  if (t.dtype !== "BF16") badDtype.push(n);
  if (expected[n] && !same(t.shape, expected[n])) badShape.push(n);
  const count = t.shape.reduce((a, b) => a * b, 1);
  params += count;
  check(t.data_offsets[1] - t.data_offsets[0] === count * 2, `${n}: byte span matches shape`);
  spans.push(t.data_offsets);
  end = Math.max(end, t.data_offsets[1]);
  const base = 8 + hlen + t.data_offsets[0];
  for (let i = 0; i < count; i++) if ((buf.readUInt16LE(base + 2 * i) & 0x7f80) === 0x7f80) nonFinite++;
}
spans.sort((a, b) => a[0] - b[0]);
check(spans.every((s, i) => s[0] === (i ? spans[i - 1][1] : 0)), "safetensors data spans are contiguous");
check(8 + hlen + end === buf.length, "safetensors data ends at the end of the file");
check(badDtype.length === 0, `all tensors BF16 (not: ${badDtype.slice(0, 3)})`);
check(badShape.length === 0, `tensor shapes match config (not: ${badShape.slice(0, 3)})`);
check(nonFinite === 0, `${nonFinite} non-finite bf16 values`);
check(params <= 7.5e6, `${params} parameters (<= 7.5M)`);
// A trained model: the final norm's weights have moved away from their initial value of 1.
const bf16 = (off) => { const b = Buffer.alloc(4); b.writeUInt16LE(buf.readUInt16LE(off), 2); return b.readFloatLE(0); };
const norm = header["model.norm.weight"];
let dev = 0;
for (let i = 0; i < H; i++) dev += Math.abs(bf16(8 + hlen + norm.data_offsets[0] + 2 * i) - 1);
check(dev / H > 0.05, `final norm weights moved from 1 (mean |w-1| = ${(dev / H).toFixed(3)})`);

// ---- tokenizer files and generation config
const tj = readJson("tokenizer.json"), tc = readJson("tokenizer_config.json"), gc = readJson("generation_config.json");
const SPECIAL = ["<|pad|>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"];
check(tj.model.type === "BPE" && tj.pre_tokenizer?.type === "ByteLevel" && tj.decoder?.type === "ByteLevel",
  "tokenizer.json: byte-level BPE");
check(SPECIAL.every((t, i) => tj.added_tokens.some((a) => a.id === i && a.content === t && a.special)),
  "tokenizer.json: special tokens at ids 0..6");
check(Object.keys(tj.model.vocab).length === V, `tokenizer vocab ${Object.keys(tj.model.vocab).length} == config vocab ${V}`);
check(tj.post_processor?.type === "TemplateProcessing", "tokenizer.json: TemplateProcessing adds <|bos|>");
check(tc.bos_token === "<|bos|>" && tc.eos_token === "<|eos|>" && tc.add_bos_token === true &&
  typeof tc.chat_template === "string", "tokenizer_config: bos/eos, add_bos_token, chat_template");
check(cfg.bos_token_id === 1 && cfg.eos_token_id === 2 && gc.bos_token_id === 1 && same(gc.eos_token_id, [2, 6]),
  "config/generation_config: bos 1, eos 2 (generation stops at 2 or 6 = <|end|>)");

// ---- oracles: transformers' tokenizer (JS port) and jinja against what training recorded
const log = readJson("train_log.json");
check(log.heldout?.by_ctx?.["1024"]?.ppl > 1 && log.heldout.by_ctx["1024"].ppl < 40, "train_log: held-out perplexity recorded");
const req = createRequire(join(root, "tests", "oracle", "package.json"));
let Tokenizer, Template;
try {
  // The packages resolve to CommonJS builds here: their exports may sit under `default`.
  const t = await import(pathToFileURL(req.resolve("@huggingface/tokenizers")).href);
  const j = await import(pathToFileURL(req.resolve("@huggingface/jinja")).href);
  Tokenizer = t.Tokenizer ?? t.default?.Tokenizer;
  Template = j.Template ?? j.default?.Template;
} catch (e) {
  console.log(`oracle packages missing (run: (cd tests/oracle && npm ci)): ${e.message}`);
}
if (check(typeof Tokenizer === "function" && typeof Template === "function", "oracle packages load")) {
  const tok = new Tokenizer(tj, tc);
  for (const s of log.samples) {
    if (s.prompt !== undefined) {
      check(same(tok.encode(s.prompt).ids, s.prompt_ids), `encode(${JSON.stringify(s.prompt)}) = ${s.prompt_ids}`);
    } else {
      const text = new Template(tc.chat_template).render({
        messages: [{ role: "user", content: log.samples.at(-1).chat_prompt.split("\n")[1].replace("<|end|>", "") }],
        bos_token: tc.bos_token, eos_token: tc.eos_token, add_generation_prompt: true });
      check(text === s.chat_prompt, `chat template renders ${JSON.stringify(s.chat_prompt)} (got ${JSON.stringify(text)})`);
      check(same(tok.encode(s.chat_prompt, { add_special_tokens: false }).ids, s.prompt_ids), "encode(chat prompt)");
    }
    check(tok.decode(s.greedy_ids, { skip_special_tokens: false }) === s.greedy, "decode(greedy ids) = recorded text");
  }
  const ho = join(root, ".dev", "demo", "heldout.txt");
  if (existsSync(ho)) {
    const n = tok.encode(readFileSync(ho, "utf8"), { add_special_tokens: false }).ids.length;
    check(n === log.data.heldout_tokens, `heldout.txt: ${n} tokens (training run: ${log.data.heldout_tokens})`);
  } else {
    console.log("note: .dev/demo/heldout.txt absent (tools/demo/prepare_text.sh makes it): token count not checked");
  }
}
console.log(`RESULT ${passed} ${failed}`);
process.exit(failed ? 1 : 0);
