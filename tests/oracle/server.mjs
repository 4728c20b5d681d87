// server.mjs — `lmc serve` on the demo model, driven by the official `openai` and
// `@anthropic-ai/sdk` clients and by raw fetch.
//
// Checks: /health, /v1/models; chat and completions, non-streaming and streaming,
// greedy results equal across routes and equal to `lmc generate`; usage figures
// (prompt tokens = `lmc tokenize` count of the template rendered by @huggingface/jinja);
// stop sequences matched across token boundaries and never leaked; Anthropic
// /v1/messages and its streaming events; prompt-prefix reuse; 16 concurrent streaming
// greedy clients equal to the same requests run one at a time (and batched: fewer
// steps than tokens); a disconnect that frees the KV (seen in /metrics); ≥ 40 malformed
// requests each answered with the expected 4xx and JSON error body; a slow client;
// admission control (503 + Retry-After); API keys; SIGTERM shutdown with a stream in flight.
// Prints `RESULT <passed> <failed>`. Needs `npm ci` in tests/oracle and $BUILD/lmc.
import { readFileSync, writeFileSync, mkdtempSync, symlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import net from "node:net";
import { join } from "node:path";
import { check, finish, startServer, metrics, tokenCount, cliGenerate, cliLogits, logSoftmax, demo, sleep, withTimeout,
         batchExact } from "./server/harness.mjs";
import { malformedCases } from "./server/malformed.mjs";

let OpenAI, Anthropic, Template;
try {
  ({ default: OpenAI } = await import("openai"));
  ({ default: Anthropic } = await import("@anthropic-ai/sdk"));
  ({ Template } = await import("@huggingface/jinja"));
} catch (e) {
  console.log("missing npm packages (run `npm ci` in tests/oracle): " + e.message);
  console.log("RESULT 0 1");
  process.exit(1);
}

const watchdog = setTimeout(() => { console.log("FAIL watchdog: the suite took over 280 s"); check("watchdog", false); finish(); }, 280000);
watchdog.unref();

const tcfg = JSON.parse(readFileSync(join(demo, "tokenizer_config.json"), "utf8"));
const template = new Template(tcfg.chat_template);
const render = (messages) => template.render({ messages, bos_token: tcfg.bos_token, eos_token: tcfg.eos_token, add_generation_prompt: true });

const MODEL = "demo";
const ask = (text) => [{ role: "user", content: text }];

async function collectChatStream(client, body, opts) {
  const stream = await client.chat.completions.create({ ...body, stream: true }, opts);
  let text = "", finish = null, usage = null, roleSeen = false, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta?.role === "assistant") roleSeen = true;
      if (c.delta?.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage, roleSeen, chunks };
}

async function main() {
  const A = await startServer(["--max-seqs", "16", "--max-body", "65536", ...batchExact]);
  const openai = new OpenAI({ baseURL: A.url + "/v1", apiKey: "none", maxRetries: 0, timeout: 60000 });
  const anthropic = new Anthropic({ baseURL: A.url, apiKey: "none", maxRetries: 0, timeout: 60000 });

  // ---- models ----
  const models = await openai.models.list();
  const m0 = models.data[0];
  check("models: one model", models.data.length === 1, JSON.stringify(models.data));
  check("models: id, tier, context length", m0?.id === MODEL && m0?.tier === "generic" && m0?.context_length === 1024, JSON.stringify(m0));

  const one = await openai.models.retrieve(MODEL);
  check("models: retrieve by id", one.id === MODEL && one.object === "model");
  const missing = await openai.models.retrieve("no-such-model").then(() => null, (e) => e);
  check("models: an unknown id is a 404 model_not_found", missing?.status === 404 && missing?.code === "model_not_found", String(missing));

  // ---- chat, non-streaming ----
  const msgs = ask("Who made the heaven and the earth?");
  const nPrompt = tokenCount(render(msgs));
  const r1 = await openai.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 24, temperature: 0 });
  const c1 = r1.choices[0];
  check("chat: object and role", r1.object === "chat.completion" && c1.message.role === "assistant" && r1.id.startsWith("chatcmpl-"));
  check("chat: text generated", typeof c1.message.content === "string" && c1.message.content.length > 0, JSON.stringify(c1));
  check("chat: finish_reason length at max_tokens", c1.finish_reason === "length", c1.finish_reason);
  check("chat: usage.prompt_tokens = lmc tokenize of the rendered template", r1.usage.prompt_tokens === nPrompt,
        `${r1.usage.prompt_tokens} vs ${nPrompt}`);
  check("chat: usage.completion_tokens = max_tokens", r1.usage.completion_tokens === 24 && r1.usage.total_tokens === nPrompt + 24,
        JSON.stringify(r1.usage));
  const r1b = await openai.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 24, temperature: 0 });
  check("chat: greedy is repeatable", r1b.choices[0].message.content === c1.message.content);
  check("chat: prefix reuse reported as cached tokens", (r1b.usage.prompt_tokens_details?.cached_tokens ?? 0) >= nPrompt - 1,
        JSON.stringify(r1b.usage));
  const parts = await openai.chat.completions.create({ model: MODEL, max_tokens: 24, temperature: 0,
    messages: [{ role: "user", content: [{ type: "text", text: "Who made the heaven " }, { type: "text", text: "and the earth?" }] }] });
  check("chat: content-part arrays equal the joined string", parts.choices[0].message.content === c1.message.content);

  // ---- chat, streaming ----
  const s1 = await collectChatStream(openai, { model: MODEL, messages: msgs, max_tokens: 24, temperature: 0, stream_options: { include_usage: true } });
  check("stream: same text as non-streaming", s1.text === c1.message.content, `${JSON.stringify(s1.text)} vs ${JSON.stringify(c1.message.content)}`);
  check("stream: role chunk, finish_reason", s1.roleSeen && s1.finish === "length");
  check("stream: include_usage chunk", s1.usage?.prompt_tokens === nPrompt && s1.usage?.completion_tokens === 24, JSON.stringify(s1.usage));
  check("stream: several chunks", s1.chunks >= 5, String(s1.chunks));

  // ---- EOS ends a reply with "stop" ----
  const long = await openai.chat.completions.create({ model: MODEL, messages: ask("What is love?"), max_tokens: 400, temperature: 0 });
  check("chat: a reply ending at EOS has finish_reason stop", long.choices[0].finish_reason === "stop" && long.usage.completion_tokens < 400,
        `${long.choices[0].finish_reason} ${long.usage.completion_tokens}`);

  // ---- stop sequences ----
  const full = c1.message.content;
  const cut = Math.floor(full.length / 2);
  const stops = [full.slice(cut, cut + 4), full.slice(cut + 1, cut + 7)].filter((s) => s.trim().length > 1);
  for (const stop of stops) {
    const expect = full.slice(0, full.indexOf(stop));
    const r = await openai.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 24, temperature: 0, stop: [stop, "\u00a7never"] });
    check(`stop ${JSON.stringify(stop)}: text cut before it`, r.choices[0].message.content === expect,
          `${JSON.stringify(r.choices[0].message.content)} vs ${JSON.stringify(expect)}`);
    check(`stop ${JSON.stringify(stop)}: finish_reason stop`, r.choices[0].finish_reason === "stop");
    const s = await collectChatStream(openai, { model: MODEL, messages: msgs, max_tokens: 24, temperature: 0, stop });
    check(`stop ${JSON.stringify(stop)}: streamed text cut, nothing leaked`, s.text === expect && s.finish === "stop",
          `${JSON.stringify(s.text)} vs ${JSON.stringify(expect)}`);
  }

  // ---- completions vs lmc generate ----
  const cliText = cliGenerate("In the beginning", 12);
  const comp = await openai.completions.create({ model: MODEL, prompt: "In the beginning", max_tokens: 12, temperature: 0 });
  check("completions: equals `lmc generate --greedy`", comp.choices[0].text === cliText,
        `${JSON.stringify(comp.choices[0].text)} vs ${JSON.stringify(cliText)}`);
  check("completions: object, usage", comp.object === "text_completion" && comp.usage.completion_tokens === 12 &&
        comp.usage.prompt_tokens === tokenCount("<|bos|>In the beginning"), JSON.stringify(comp.usage));
  const compStream = await openai.completions.create({ model: MODEL, prompt: "In the beginning", max_tokens: 12, temperature: 0, stream: true });
  let ct = "", cf = null;
  for await (const ch of compStream) { ct += ch.choices[0]?.text ?? ""; cf = ch.choices[0]?.finish_reason ?? cf; }
  check("completions: streamed equals non-streamed", ct === cliText && cf === "length", JSON.stringify(ct));
  const seeded = async () => (await openai.completions.create({ model: MODEL, prompt: "And God said", max_tokens: 16, temperature: 0.9, seed: 42 })).choices[0].text;
  check("completions: same seed, same sample", (await seeded()) === (await seeded()));
  const biased = await openai.completions.create({ model: MODEL, prompt: "In the beginning", max_tokens: 4, temperature: 0, logit_bias: { "6": 100 } });
  check("logit_bias: +100 on an end token stops at once", biased.choices[0].finish_reason === "stop" && biased.choices[0].text === "" &&
        biased.usage.completion_tokens === 1, JSON.stringify(biased.choices[0]));
  const fp = await openai.completions.create({ model: MODEL, prompt: "In the beginning", max_tokens: 40, temperature: 0, frequency_penalty: 2, presence_penalty: 2 });
  const plain = await openai.completions.create({ model: MODEL, prompt: "In the beginning", max_tokens: 40, temperature: 0 });
  check("presence/frequency penalties change a repetitive greedy text", fp.choices[0].text !== plain.choices[0].text);

  // ---- logprobs ----
  const vocab = JSON.parse(readFileSync(join(demo, "config.json"), "utf8")).vocab_size;
  const rows = cliLogits("In the beginning", 8, vocab);
  const clp = await openai.completions.create({ model: MODEL, prompt: "In the beginning", max_tokens: 8, temperature: 0, logprobs: 3 });
  const L = clp.choices[0].logprobs;
  let lpOk = L && L.tokens.length === 8 && L.tokens.join("") === clp.choices[0].text, worst = 0;
  for (let i = 0; lpOk && i < 8; i++) {
    const tops = Object.entries(L.top_logprobs[i]).sort((a, b) => b[1] - a[1]);
    lpOk = tops.length === 3 && tops[0][0] === L.tokens[i] && L.text_offset[i] === L.tokens.slice(0, i).join("").length;
    const ids = (await (await fetch(A.url + "/tokenize", { method: "POST", body: JSON.stringify({ content: L.tokens[i] }) })).json()).tokens;
    worst = Math.max(worst, Math.abs(L.token_logprobs[i] - logSoftmax(rows[i], ids[0])));
  }
  check("logprobs (completions): tokens, offsets, greedy token is the top one", lpOk, JSON.stringify(L).slice(0, 300));
  check("logprobs = log-softmax of `lmc generate --logits-out` logits", worst < 1e-3, String(worst));
  const chatLp = await openai.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = chatLp.choices[0].logprobs?.content ?? [];
  check("logprobs (chat): one entry per token, text joins to content, top_logprobs sorted",
        content.length === 10 && content.map((e) => e.token).join("") === chatLp.choices[0].message.content &&
        content.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2 && e.top_logprobs[0].token === e.token &&
                             e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob &&
                             Buffer.from(e.bytes).toString("utf8") === e.token), JSON.stringify(content[0]));
  const lpStream = await openai.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2, stream: true });
  const streamedLp = [];
  for await (const ch of lpStream) for (const c of ch.choices) if (c.logprobs?.content) streamedLp.push(...c.logprobs.content);
  // (prefix reuse computes the prompt's last rows differently, so logprobs agree to rounding, not bits)
  check("logprobs (chat stream): the same entries", streamedLp.length === content.length && streamedLp.every((e, i) =>
        e.token === content[i].token && Math.abs(e.logprob - content[i].logprob) < 1e-4 &&
        e.top_logprobs.map((t) => t.token).join("|") === content[i].top_logprobs.map((t) => t.token).join("|")));

  // ---- JSON mode: constrained decoding ----
  const isObj = (t) => { try { const v = JSON.parse(t); return v !== null && typeof v === "object" && !Array.isArray(v); } catch { return false; } };
  check("json mode: the unconstrained reply is not JSON (so the constraint matters)", !isObj(full));
  for (const q of ["Give me JSON about Moses.", "Who made the heaven and the earth?"]) {
    const j = await openai.chat.completions.create({ model: MODEL, messages: ask(q), max_tokens: 200, temperature: 0, response_format: { type: "json_object" } });
    check(`json mode (greedy, ${JSON.stringify(q)}): a JSON object, finish stop`, isObj(j.choices[0].message.content) && j.choices[0].finish_reason === "stop",
          JSON.stringify(j.choices[0]));
    const js = await collectChatStream(openai, { model: MODEL, messages: ask(q), max_tokens: 200, temperature: 0, response_format: { type: "json_object" } });
    check("json mode: streamed equals non-streamed", js.text === j.choices[0].message.content);
  }
  let sampledOk = 0;
  for (let seed = 1; seed <= 6; seed++) {
    const j = await openai.chat.completions.create({ model: MODEL, messages: ask("List the sons of Jacob as JSON."), max_tokens: 48, temperature: 1, seed,
                                                     response_format: { type: "json_object" } });
    const c = j.choices[0];
    // A reply cut by max_tokens is a prefix of JSON: it starts with "{" and closing it may fail, so only complete replies must parse.
    if ((c.finish_reason === "stop" && isObj(c.message.content)) || (c.finish_reason === "length" && c.message.content.startsWith("{"))) sampledOk++;
    else console.log("  json mode sampled:", JSON.stringify(c));
  }
  check("json mode (sampled, 6 seeds): complete replies parse, cut ones start an object", sampledOk === 6, String(sampledOk));

  // ---- JSON mode with a schema ----
  const schema = { type: "object", properties: { tribe: { enum: ["Judah", "Levi", "Dan"] }, age: { type: "integer" },
                   alive: { type: "boolean" }, sons: { type: "array", items: { enum: ["Reuben", "Simeon"] }, maxItems: 2 } },
                   required: ["tribe", "age", "alive"] };
  const conforms = (t) => {
    let v; try { v = JSON.parse(t); } catch { return false; }
    const keys = Object.keys(v);
    return keys.every((k) => k in schema.properties) && schema.required.every((k) => keys.includes(k)) &&
           ["Judah", "Levi", "Dan"].includes(v.tribe) && Number.isInteger(v.age) && typeof v.alive === "boolean" &&
           (v.sons === undefined || (Array.isArray(v.sons) && v.sons.length <= 2 && v.sons.every((x) => x === "Reuben" || x === "Simeon")));
  };
  let schemaOk = 0;
  for (const [temperature, seed] of [[0, 0], [1, 1], [1, 2], [1, 3], [1.5, 4]]) {
    const r = await openai.chat.completions.create({ model: MODEL, messages: ask("Describe Jacob."), max_tokens: 120, temperature, seed,
                                                     response_format: { type: "json_schema", json_schema: { name: "person", schema, strict: true } } });
    if (r.choices[0].finish_reason === "stop" && conforms(r.choices[0].message.content)) schemaOk++;
    else console.log("  json_schema:", JSON.stringify(r.choices[0]));
  }
  check("json_schema: 5 replies (greedy and sampled) conform to the schema", schemaOk === 5, String(schemaOk));

  // ---- the wider subset: $ref/$defs, anyOf (nullable), integer ranges, string lengths ----
  const schema2 = { $defs: { son: { type: "object", properties: { name: { type: "string", minLength: 2, maxLength: 12 },
                                                                   age: { type: "integer", minimum: 10, maximum: 120 } },
                                    required: ["name", "age"] } },
                    type: "object", properties: { eldest: { $ref: "#/$defs/son" }, twin: { anyOf: [{ $ref: "#/$defs/son" }, { type: "null" }] },
                                                  count: { type: "integer", exclusiveMinimum: 0, maximum: 12 }, note: { type: ["string", "null"], maxLength: 5 } },
                    required: ["eldest", "twin", "count", "note"] };
  const sonOk = (x) => x && typeof x === "object" && Object.keys(x).length === 2 && typeof x.name === "string" &&
                       [...x.name].length >= 2 && [...x.name].length <= 12 && Number.isInteger(x.age) && x.age >= 10 && x.age <= 120;
  const conforms2 = (t) => {
    let v; try { v = JSON.parse(t); } catch { return false; }
    return v && Object.keys(v).length === 4 && sonOk(v.eldest) && (v.twin === null || sonOk(v.twin)) && Number.isInteger(v.count) &&
           v.count >= 1 && v.count <= 12 && (v.note === null || (typeof v.note === "string" && [...v.note].length <= 5));
  };
  let schema2Ok = 0;
  for (const [temperature, seed] of [[0, 0], [1, 5], [1, 6], [1.5, 7]]) {
    const r = await openai.chat.completions.create({ model: MODEL, messages: ask("Describe the sons of Jacob."), max_tokens: 160, temperature, seed,
                                                     response_format: { type: "json_schema", json_schema: { name: "sons", schema: schema2 } } });
    if (r.choices[0].finish_reason === "stop" && conforms2(r.choices[0].message.content)) schema2Ok++;
    else console.log("  json_schema ($ref/anyOf/ranges):", JSON.stringify(r.choices[0]));
  }
  check("json_schema with $ref, anyOf, integer ranges, lengths: 4 replies conform", schema2Ok === 4, String(schema2Ok));
  // ---- pattern, format, number bounds, anyOf of alike objects, allOf, not (checked here in JS, independently) ----
  const schema3 = { type: "object", properties: {
      id: { type: "string", format: "uuid" }, born: { type: "string", format: "date" },
      code: { type: "string", pattern: "^[A-Z]{3}-\\d{2}$" }, score: { type: "number", minimum: 0, exclusiveMaximum: 1 },
      pet: { anyOf: [{ type: "object", properties: { cat: { type: "string", maxLength: 8 } }, required: ["cat"] },
                     { type: "object", properties: { dog: { type: "integer", minimum: 1, maximum: 9 } }, required: ["dog"] }] },
      tag: { allOf: [{ type: "string", maxLength: 6 }, { not: { enum: ["none"] } }, { minLength: 1 }] },
      email: { type: "string", format: "email", maxLength: 24 } },
    required: ["id", "born", "code", "score", "pet", "tag", "email"] };
  const days = { "02": 29, "04": 30, "06": 30, "09": 30, "11": 30 };
  const conforms3 = (t) => {
    let v; try { v = JSON.parse(t); } catch { return false; }
    const m = /^\d{4}-(\d\d)-(\d\d)$/.exec(v.born ?? "");
    const pk = v.pet && typeof v.pet === "object" ? Object.keys(v.pet) : [];
    return Object.keys(v).length === 7 && /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/.test(v.id) &&
           !!m && +m[1] >= 1 && +m[1] <= 12 && +m[2] >= 1 && +m[2] <= (days[m[1]] ?? 31) && /^[A-Z]{3}-\d{2}$/.test(v.code) &&
           typeof v.score === "number" && v.score >= 0 && v.score < 1 &&
           pk.length === 1 && ((pk[0] === "cat" && typeof v.pet.cat === "string" && [...v.pet.cat].length <= 8) ||
                               (pk[0] === "dog" && Number.isInteger(v.pet.dog) && v.pet.dog >= 1 && v.pet.dog <= 9)) &&
           typeof v.tag === "string" && [...v.tag].length >= 1 && [...v.tag].length <= 6 && v.tag !== "none" &&
           typeof v.email === "string" && [...v.email].length <= 24 && /^[^@\s]+@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$/.test(v.email);
  };
  let schema3Ok = 0;
  for (const [temperature, seed] of [[0, 0], [1, 8], [1, 9], [1.5, 10]]) {
    const r = await openai.chat.completions.create({ model: MODEL, messages: ask("Describe a pet."), max_tokens: 400, temperature, seed,
                                                     response_format: { type: "json_schema", json_schema: { name: "pet", schema: schema3 } } });
    if (r.choices[0].finish_reason === "stop" && conforms3(r.choices[0].message.content) && !r.choices[0].schema_violation) schema3Ok++;
    else console.log("  json_schema (pattern/format/anyOf/allOf/not):", JSON.stringify(r.choices[0]));
  }
  check("json_schema with pattern, formats, number bounds, alike anyOf objects, allOf, not: 4 replies conform", schema3Ok === 4, String(schema3Ok));
  // oneOf is decoded as anyOf; a reply that matches two alternatives is flagged after the fact
  let flagged = 0;
  for (const seed of [0, 1, 2, 3, 4, 5]) {
    const r = await openai.chat.completions.create({ model: MODEL, messages: ask("A number?"), max_tokens: 20, temperature: 1.2, seed,
      response_format: { type: "json_schema", json_schema: { name: "n", schema: { oneOf: [{ type: "integer" }, { type: "number", minimum: 0 }] } } } });
    const c = r.choices[0], x = Number(c.message.content);
    const both = c.finish_reason === "stop" && Number.isInteger(x) && x >= 0;
    if (both === !!c.schema_violation && (!both || /oneOf/.test(c.schema_violation))) flagged++;
    else console.log("  oneOf check:", JSON.stringify(c));
  }
  check("json_schema oneOf: a reply matching two alternatives carries schema_violation, others none (6 seeds)", flagged === 6, String(flagged));

  // ---- tools: a named or required function is decoded as its JSON arguments ----
  const verseTool = { type: "function", function: { name: "get_verse", description: "Look up a verse",
                      parameters: { type: "object", properties: { book: { type: "string" }, chapter: { type: "integer" } } } } };
  const forced = await openai.chat.completions.create({ model: MODEL, messages: ask("Find Genesis 1:1"), max_tokens: 60, temperature: 0,
                                                       tools: [verseTool], tool_choice: { type: "function", function: { name: "get_verse" } } });
  const fc = forced.choices[0];
  const call = fc.message.tool_calls?.[0];
  check("tools (named): tool_calls with the function and JSON-object arguments", call?.type === "function" && call.function.name === "get_verse" &&
        isObj(call.function.arguments) && call.id?.startsWith("call_") && fc.message.content === null && fc.finish_reason === "stop", JSON.stringify(fc));
  const req = await openai.chat.completions.create({ model: MODEL, messages: ask("Find Genesis 1:1"), max_tokens: 60, temperature: 0,
                                                    tools: [verseTool], tool_choice: "required" });
  check("tools (required, one tool): the same call", JSON.stringify(req.choices[0].message.tool_calls) .replace(/call_[^"]*/g, "") ===
        JSON.stringify(fc.message.tool_calls).replace(/call_[^"]*/g, ""));
  const ts = await openai.chat.completions.create({ model: MODEL, messages: ask("Find Genesis 1:1"), max_tokens: 60, temperature: 0, stream: true,
                                                   tools: [verseTool], tool_choice: { type: "function", function: { name: "get_verse" } } });
  let tname = "", targs = "", tfin = null, tid = null;
  for await (const ch of ts) for (const c of ch.choices) {
    for (const t of c.delta?.tool_calls ?? []) { if (t.function?.name) tname += t.function.name; if (t.id) tid = t.id; targs += t.function?.arguments ?? ""; }
    if (c.finish_reason) tfin = c.finish_reason;
  }
  const strictTool = { type: "function", function: { name: "set_tribe", parameters: { type: "object", properties: { tribe: { enum: ["Judah", "Levi"] }, count: { type: "integer" } }, required: ["tribe", "count"] } } };
  const st1 = await openai.chat.completions.create({ model: MODEL, messages: ask("Pick a tribe."), max_tokens: 40, temperature: 0,
                                                    tools: [strictTool, verseTool], tool_choice: { type: "function", function: { name: "set_tribe" } } });
  const stArgs = JSON.parse(st1.choices[0].message.tool_calls?.[0]?.function.arguments ?? "null");
  check("tools: arguments follow the function's parameters schema", stArgs && ["Judah", "Levi"].includes(stArgs.tribe) && Number.isInteger(stArgs.count) &&
        Object.keys(stArgs).length === 2, JSON.stringify(stArgs));
  const any2 = await openai.chat.completions.create({ model: MODEL, messages: ask("Find Genesis 1:1"), max_tokens: 80, temperature: 0,
                                                     tools: [verseTool, strictTool], tool_choice: "required" });
  const a2 = any2.choices[0].message.tool_calls?.[0];
  check("tools (required, several): one call to one of the tools with object arguments", ["get_verse", "set_tribe"].includes(a2?.function.name) &&
        isObj(a2.function.arguments) && any2.choices[0].finish_reason === "tool_calls" && any2.choices[0].message.content === null, JSON.stringify(any2.choices[0]));
  const any2s = await openai.chat.completions.create({ model: MODEL, messages: ask("Find Genesis 1:1"), max_tokens: 80, temperature: 0, stream: true,
                                                      tools: [verseTool, strictTool], tool_choice: "required" });
  let s2name = "", s2args = "", s2fin = null;
  for await (const ch of any2s) for (const c of ch.choices) {
    for (const t of c.delta?.tool_calls ?? []) { s2name += t.function?.name ?? ""; s2args += t.function?.arguments ?? ""; }
    if (c.finish_reason) s2fin = c.finish_reason;
  }
  check("tools (required, several, streamed): the same call", s2name === a2?.function.name && s2args === a2?.function.arguments && s2fin === "tool_calls",
        `${s2name} ${s2args} ${s2fin}`);
  check("tools (named, streamed): deltas assemble into the same call", tname === "get_verse" && targs === call?.function.arguments && tfin === "stop" && !!tid,
        `${tname} ${targs} ${tfin}`);
  const none = await openai.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 24, temperature: 0, tools: [verseTool], tool_choice: "none" });
  check("tools: tool_choice none answers in text (template without tools support)", none.choices[0].message.content === full && !none.choices[0].message.tool_calls);

  // ---- Anthropic ----
  const am = await anthropic.messages.create({ model: MODEL, max_tokens: 24, messages: msgs, temperature: 0 });
  check("messages: type/role/content", am.type === "message" && am.role === "assistant" && am.content[0]?.type === "text");
  check("messages: same greedy text as chat completions", am.content[0]?.text === full, JSON.stringify(am.content));
  check("messages: stop_reason max_tokens and usage", am.stop_reason === "max_tokens" && am.usage.input_tokens === nPrompt && am.usage.output_tokens === 24,
        JSON.stringify(am));
  const sysMsgs = [{ role: "system", content: "Answer as the scripture." }, ...msgs];
  const withSys = await openai.chat.completions.create({ model: MODEL, messages: sysMsgs, max_tokens: 16, temperature: 0 });
  const amSys = await anthropic.messages.create({ model: MODEL, max_tokens: 16, system: "Answer as the scripture.", temperature: 0,
    messages: [{ role: "user", content: [{ type: "text", text: "Who made the heaven and the earth?" }] }] });
  check("messages: system + content blocks render like chat", amSys.content[0].text === withSys.choices[0].message.content &&
        amSys.usage.input_tokens === tokenCount(render(sysMsgs)));
  const counted = await anthropic.messages.countTokens({ model: MODEL, system: "Answer as the scripture.",
    messages: [{ role: "user", content: [{ type: "text", text: "Who made the heaven and the earth?" }] }] });
  check("messages count_tokens: the prompt /v1/messages would run", counted.input_tokens === amSys.usage.input_tokens, JSON.stringify(counted));
  const stopSeq = stops[0];
  const amStop = await anthropic.messages.create({ model: MODEL, max_tokens: 24, messages: msgs, temperature: 0, stop_sequences: [stopSeq] });
  check("messages: stop_sequences", amStop.stop_reason === "stop_sequence" && amStop.stop_sequence === stopSeq &&
        amStop.content[0].text === full.slice(0, full.indexOf(stopSeq)), JSON.stringify(amStop));
  const events = [];
  let streamed = "";
  const raw = await anthropic.messages.create({ model: MODEL, max_tokens: 24, messages: msgs, temperature: 0, stream: true });
  for await (const ev of raw) {
    if (events[events.length - 1] !== ev.type) events.push(ev.type);
    if (ev.type === "content_block_delta") streamed += ev.delta.text;
    if (ev.type === "message_delta") check("messages stream: message_delta stop_reason/usage", ev.delta.stop_reason === "max_tokens" && ev.usage.output_tokens === 24);
  }
  // (the SDK swallows ping events)
  check("messages stream: event order", events.filter((t) => t !== "ping").join(",") ===
        "message_start,content_block_start,content_block_delta,content_block_stop,message_delta,message_stop", events.join(","));
  check("messages stream: text equals non-streamed", streamed === full);
  const helper = anthropic.messages.stream({ model: MODEL, max_tokens: 24, messages: msgs, temperature: 0 });
  const fin = await withTimeout(helper.finalMessage(), 30000, "messages.stream");
  check("messages stream helper: finalMessage", fin.content[0].text === full && fin.stop_reason === "max_tokens");

  // ---- Anthropic tools ----
  const aTool = { name: "get_verse", description: "Look up a verse", input_schema: { type: "object", properties: { book: { type: "string" } } } };
  const au = await anthropic.messages.create({ model: MODEL, max_tokens: 60, temperature: 0, messages: ask("Find Genesis 1:1"),
                                              tools: [aTool], tool_choice: { type: "tool", name: "get_verse" } });
  const tu = au.content.find((b) => b.type === "tool_use");
  check("messages tools (named): a tool_use block with an input object", tu?.name === "get_verse" && tu.id.startsWith("toolu_") &&
        tu.input && typeof tu.input === "object" && au.stop_reason === "tool_use", JSON.stringify(au));
  check("messages tools: the same arguments as the OpenAI route", JSON.stringify(tu?.input) === JSON.stringify(JSON.parse(call.function.arguments)));
  const aus = anthropic.messages.stream({ model: MODEL, max_tokens: 60, temperature: 0, messages: ask("Find Genesis 1:1"),
                                          tools: [aTool], tool_choice: { type: "any" } });
  const auf = await withTimeout(aus.finalMessage(), 30000, "tool stream");
  check("messages tools (any, streamed): the SDK assembles the same tool_use", JSON.stringify(auf.content.find((b) => b.type === "tool_use")?.input) === JSON.stringify(tu?.input) &&
        auf.stop_reason === "tool_use", JSON.stringify(auf.content));
  const aTool2 = { name: "set_tribe", input_schema: { type: "object", properties: { tribe: { enum: ["Judah", "Levi"] } }, required: ["tribe"] } };
  const anyA = await anthropic.messages.create({ model: MODEL, max_tokens: 60, temperature: 0, messages: ask("Find Genesis 1:1"),
                                                tools: [aTool, aTool2], tool_choice: { type: "any" } });
  const anyU = anyA.content.find((b) => b.type === "tool_use");
  check("messages tools (any, several): one tool_use of one of the tools", ["get_verse", "set_tribe"].includes(anyU?.name) &&
        typeof anyU.input === "object" && anyA.stop_reason === "tool_use", JSON.stringify(anyA.content));
  const hist = await anthropic.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, tools: [aTool], messages: [
    { role: "user", content: "Read me Genesis." },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_verse", input: { book: "Genesis" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "In the beginning." }] }] });
  check("messages tools: tool_use / tool_result history accepted", hist.content[0]?.type === "text" && hist.stop_reason === "max_tokens");

  // ---- embeddings ----
  const texts = ["In the beginning God created the heaven and the earth.", "And God said, Let there be light.", "Jesus wept."];
  // an earlier request (a stream the client cut, say) may still be finishing its last step:
  // count from an idle server, or its LM-head rows land between the two readings
  for (let i = 0; i < 100; i++) {
    const m = await metrics(A.url);
    if (!m.lmc_running_sequences && !m.lmc_queue_depth) break;
    await sleep(100);
  }
  const mEmb0 = await metrics(A.url);
  const emb = await openai.embeddings.create({ model: MODEL, input: texts });   // the SDK asks for base64 and decodes it
  const mEmb1 = await metrics(A.url);
  check("embeddings: no LM head rows (hidden states only)", mEmb1.lmc_lm_head_rows_total === mEmb0.lmc_lm_head_rows_total &&
        mEmb1.lmc_hidden_only_rows_total - mEmb0.lmc_hidden_only_rows_total >= texts.length,
        `${mEmb0.lmc_lm_head_rows_total}->${mEmb1.lmc_lm_head_rows_total}, ${mEmb0.lmc_hidden_only_rows_total}->${mEmb1.lmc_hidden_only_rows_total}`);
  const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
  check("embeddings: one L2-normalized vector of hidden_size per input", emb.data.length === 3 &&
        emb.data.every((d, i) => d.index === i && d.embedding.length === 256 && Math.abs(norm(d.embedding) - 1) < 1e-5), JSON.stringify(emb.usage));
  check("embeddings: usage counts the input tokens", emb.usage.prompt_tokens === texts.reduce((a, t) => a + tokenCount("<|bos|>" + t), 0));
  let embSame = true;
  for (let i = 0; i < 3; i++) {
    const one = await (await fetch(A.url + "/v1/embeddings", { method: "POST", body: JSON.stringify({ input: texts[i], encoding_format: "float" }) })).json();
    embSame &&= one.data[0].embedding.every((x, k) => Math.abs(x - emb.data[i].embedding[k]) < 1e-5);
  }
  check("embeddings: batched equals one at a time (float and base64 encodings)", embSame);
  const short = await openai.embeddings.create({ model: MODEL, input: texts[0], dimensions: 32 });
  check("embeddings: dimensions shortens and renormalizes", short.data[0].embedding.length === 32 && Math.abs(norm(short.data[0].embedding) - 1) < 1e-5);
  const cos = (a, b) => a.reduce((acc, x, k) => acc + x * b[k], 0);
  check("embeddings: distinct texts give distinct vectors", cos(emb.data[0].embedding, emb.data[2].embedding) < 0.9999);

  // ---- multi-turn prefix reuse ----
  const turn2 = [...msgs, { role: "assistant", content: full }, { role: "user", content: "And what did he say?" }];
  const before = await metrics(A.url);
  const t2 = await openai.chat.completions.create({ model: MODEL, messages: turn2, max_tokens: 8, temperature: 0 });
  const after = await metrics(A.url);
  check("multi-turn: history not re-prefilled", t2.usage.prompt_tokens_details.cached_tokens >= nPrompt &&
        after.lmc_prompt_tokens_reused_total - before.lmc_prompt_tokens_reused_total === t2.usage.prompt_tokens_details.cached_tokens,
        JSON.stringify(t2.usage));

  // ---- 16 concurrent streaming clients = the same requests one at a time ----
  const topics = ["Moses", "Abraham", "David", "the sea", "the temple", "Egypt", "the LORD", "Jacob",
                  "the king", "bread", "the mountain", "Jerusalem", "the prophet", "Noah", "the river", "light"];
  const reqs = topics.map((t) => ({ model: MODEL, messages: ask(`Tell me of ${t}.`), max_tokens: 32, temperature: 0 }));
  const serial = [];
  for (const r of reqs) serial.push(await collectChatStream(openai, r));
  const m1 = await metrics(A.url);
  const conc = await withTimeout(Promise.all(reqs.map((r) => collectChatStream(openai, r))), 60000, "16 concurrent streams");
  const m2 = await metrics(A.url);
  let same = 0;
  conc.forEach((c, i) => { if (c.text === serial[i].text && c.finish === serial[i].finish) same++; else console.log(`  differs: ${topics[i]}: ${JSON.stringify(c.text)} vs ${JSON.stringify(serial[i].text)}`); });
  check("16 concurrent greedy streams equal the serial runs", same === 16, `${same}/16`);
  const steps = m2.lmc_scheduler_steps_total - m1.lmc_scheduler_steps_total;
  const toks = m2.lmc_generated_tokens_total - m1.lmc_generated_tokens_total;
  check("16 concurrent: batched (≥ 4 tokens per step)", toks >= 4 * steps && toks > 0, `${toks} tokens in ${steps} steps`);

  // ---- disconnect frees the KV ----
  const base = await metrics(A.url);
  const ac = new AbortController();
  let got = 0, during = null;
  try {
    const st = await openai.chat.completions.create({ model: MODEL, messages: ask("Tell me everything."), max_tokens: 900, temperature: 0, stream: true, ignore_eos: true }, { signal: ac.signal });
    for await (const ch of st) {
      if (++got === 4) { during = await metrics(A.url); ac.abort(); }
    }
  } catch (e) { /* aborted */ }
  check("disconnect: running and holding KV before", during && during.lmc_running_sequences === 1 && during.lmc_kv_tokens_active > 0, JSON.stringify(during));
  let freed = null;
  for (let i = 0; i < 200; i++) {
    const m = await metrics(A.url);
    if (m.lmc_running_sequences === 0 && m.lmc_kv_tokens_active === 0) { freed = m; break; }
    await sleep(50);
  }
  check("disconnect: KV freed in /metrics", freed !== null);
  check("disconnect: counted as cancelled, generation stopped early", freed && freed.lmc_requests_cancelled_total === base.lmc_requests_cancelled_total + 1 &&
        freed.lmc_generated_tokens_total - base.lmc_generated_tokens_total < 900, JSON.stringify(freed));

  // ---- malformed requests ----
  const cases = malformedCases();
  let okCases = 0;
  for (const c of cases) {
    let status = 0, body = null, text = "";
    try {
      const res = await withTimeout(fetch(A.url + c.path, { method: c.method || "POST", headers: { "content-type": "application/json", ...(c.headers || {}) },
                                                   body: c.body }), 15000, c.name);
      status = res.status;
      text = await res.text();
      body = JSON.parse(text);
    } catch (e) { text = String(e); }
    const anth = c.path.startsWith("/v1/messages");
    const shape = anth ? body?.type === "error" && typeof body?.error?.type === "string" && typeof body?.error?.message === "string"
                       : typeof body?.error?.message === "string" && typeof body?.error?.type === "string" && "param" in body.error && "code" in body.error;
    const codeOk = !c.code || body?.error?.code === c.code;
    if (check(`malformed: ${c.name} → ${c.status}`, status === c.status && shape && codeOk, `${status} ${text.slice(0, 200)}`)) okCases++;
  }
  check("malformed: at least 40 cases", cases.length >= 40, String(cases.length));
  const healthy = await openai.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 24, temperature: 0 });
  check("after malformed requests: healthy, same answer", (await fetch(A.url + "/health")).ok && healthy.choices[0].message.content === full);

  // ---- CORS for browser front ends ----
  const pre = await fetch(A.url + "/v1/chat/completions", { method: "OPTIONS", headers: { origin: "http://example.test", "access-control-request-method": "POST" } });
  check("CORS: preflight answered 204 with the allowed methods and headers", pre.status === 204 && pre.headers.get("access-control-allow-origin") === "*" &&
        /POST/.test(pre.headers.get("access-control-allow-methods")) && /authorization/i.test(pre.headers.get("access-control-allow-headers")));
  const corsGet = await fetch(A.url + "/v1/models", { headers: { origin: "http://example.test" } });
  check("CORS: responses allow any origin", corsGet.headers.get("access-control-allow-origin") === "*");

  // ---- tokenize / detokenize ----
  const tk = await (await fetch(A.url + "/tokenize", { method: "POST", body: JSON.stringify({ content: "In the beginning God" }) })).json();
  check("tokenize: equals lmc tokenize", tk.tokens.length === tokenCount("In the beginning God"));
  const dt = await (await fetch(A.url + "/detokenize", { method: "POST", body: JSON.stringify({ tokens: tk.tokens }) })).json();
  check("detokenize: round trip", dt.content === "In the beginning God", JSON.stringify(dt));

  // ---- SIGTERM with a stream in flight ----
  const ac2 = new AbortController();
  const inflight = (async () => {
    try {
      const st = await openai.chat.completions.create({ model: MODEL, messages: ask("Speak."), max_tokens: 900, temperature: 0, stream: true, ignore_eos: true }, { signal: ac2.signal });
      for await (const ch of st) { /* until the server ends it */ }
      return "ended";
    } catch (e) { return "error"; }
  })();
  await sleep(300);
  const t1 = Date.now();
  const ex = await A.stop("SIGTERM", 10000);
  check("SIGTERM: exits 0 promptly with a stream in flight", ex.code === 0 && Date.now() - t1 < 5000, JSON.stringify(ex));
  const how = await withTimeout(inflight, 5000, "in-flight stream after shutdown").catch(() => "hung");
  check("SIGTERM: the in-flight stream ended", how !== "hung", how);
  ac2.abort();

  // ---- tools through a template that renders them (hermes-style, written for this test) ----
  const toolTemplate = "{{ bos_token }}{% if tools %}<|system|>\nTools you may call, each as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>:\n" +
    "{% for t in tools %}- {{ t.function.name }}: {{ t.function.description }}\n{% endfor %}<|end|>\n{% endif %}" +
    "{% for m in messages %}{% if m.role == 'assistant' and m.tool_calls %}<|assistant|>\n{% for c in m.tool_calls %}<tool_call>{\"name\": \"{{ c.function.name }}\", " +
    "\"arguments\": {\"book\": \"{{ c.function.arguments.book }}\"}}</tool_call>{% endfor %}<|end|>\n" +
    "{% elif m.role == 'tool' %}<|user|>\n<tool_response>{{ m.content }}</tool_response><|end|>\n" +
    "{% else %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";
  const tdir = mkdtempSync(join(tmpdir(), "lmc-tools-model-"));
  try {
    for (const f of ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]) symlinkSync(join(demo, f), join(tdir, f));
    writeFileSync(join(tdir, "tokenizer_config.json"), JSON.stringify({ ...tcfg, chat_template: toolTemplate }));
    const C = await startServer(["-m", tdir]);
    const oc = new OpenAI({ baseURL: C.url + "/v1", apiKey: "none", maxRetries: 0 });
    const conv = [{ role: "user", content: "Read me Genesis." },
                  { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_verse", arguments: JSON.stringify({ book: "Genesis" }) } }] },
                  { role: "tool", tool_call_id: "call_1", content: "In the beginning God created the heaven and the earth." }];
    const tr = await oc.chat.completions.create({ model: "x", messages: conv, tools: [verseTool], max_tokens: 8, temperature: 0 });
    const ref = new Template(toolTemplate).render({ messages: conv.map((m) => m.tool_calls ? { ...m, tool_calls: m.tool_calls.map((c) => ({ ...c, function: { ...c.function, arguments: JSON.parse(c.function.arguments) } })) } : m),
                                                    tools: [verseTool], bos_token: tcfg.bos_token, eos_token: tcfg.eos_token, add_generation_prompt: true });
    check("tools template: tools, assistant tool_calls and tool results rendered as @huggingface/jinja does",
          tr.usage.prompt_tokens === tokenCount(ref), `${tr.usage.prompt_tokens} vs ${tokenCount(ref)}`);
    check("tools template: a text reply stays content", typeof tr.choices[0].message.content === "string" && !tr.choices[0].message.tool_calls);
    // 64 tokens: long enough that a reply which streams arrives in several pieces however the
    // generation and the connection's thread share the cores (text that streams is sent as it comes)
    const plainQ = { model: "x", messages: ask("Who made the heaven and the earth?"), tools: [verseTool], max_tokens: 64, temperature: 0 };
    const tplain = await oc.chat.completions.create(plainQ);
    const tstream = await collectChatStream(oc, plainQ);
    check("tools template, streamed: text without a call streams as content, as non-streamed",
          tstream.text === tplain.choices[0].message.content && tstream.chunks > 4 && tstream.finish === tplain.choices[0].finish_reason,
          `${tstream.chunks} ${JSON.stringify(tstream.text)} vs ${JSON.stringify(tplain.choices[0].message.content)}`);
    const ac3 = new Anthropic({ baseURL: C.url, apiKey: "none", maxRetries: 0 });
    const aq = { model: "x", max_tokens: 64, temperature: 0, messages: ask("Who made the heaven and the earth?"), tools: [aTool] };
    const aplain = await ac3.messages.create(aq);
    let adeltas = 0;
    const astream = ac3.messages.stream(aq).on("text", () => adeltas++);
    const afin = await withTimeout(astream.finalMessage(), 30000, "anthropic tools stream");
    check("tools template, Anthropic streamed: text streams as a text block, as non-streamed",
          afin.content.length === 1 && afin.content[0].text === aplain.content[0].text && adeltas > 2 && afin.stop_reason === aplain.stop_reason,
          `${adeltas} ${JSON.stringify(afin.content)} vs ${JSON.stringify(aplain.content)}`);
    const exC = await C.stop();
    check("tools server: clean exit", exC.code === 0, JSON.stringify(exC));
  } finally {
    rmSync(tdir, { recursive: true, force: true });
  }

  // ---- second server: API key, admission control ----
  const B = await startServer(["--api-key", "sekrit", "--max-seqs", "1", "--max-queue", "1", "--alias", "bible", "--timeout", "2"]);
  // ---- slow client: a stalled upload does not block others and is dropped ----
  const sock = net.connect(B.port, "127.0.0.1");
  let closed = false;
  sock.on("close", () => { closed = true; });
  sock.on("error", () => {});
  sock.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"messages\":");
  await sleep(200);
  const t0 = Date.now();
  const h = await fetch(B.url + "/health");
  check("slow client: others still served", h.ok && Date.now() - t0 < 3000);
  for (let i = 0; i < 120 && !closed; i++) await sleep(50);
  check("slow client: dropped after the idle timeout", closed);
  sock.destroy();


  const noKey = await fetch(B.url + "/v1/models");
  const noKeyBody = await noKey.json().catch(() => null);
  check("api key: 401 without it, OpenAI-style body", noKey.status === 401 && noKeyBody?.error?.type === "authentication_error");
  const badKey = await fetch(B.url + "/v1/messages", { method: "POST", headers: { "x-api-key": "wrong" }, body: "{}" });
  const badKeyBody = await badKey.json().catch(() => null);
  check("api key: 401 with a wrong key, Anthropic-style body", badKey.status === 401 && badKeyBody?.type === "error" && badKeyBody?.error?.type === "authentication_error");
  check("api key: /health stays open", (await fetch(B.url + "/health")).ok);
  const near = [];
  for (const k of ["sekri", "sekritt", "SEKRIT", "sekriu", "sekrit\u0000"]) {
    near.push((await fetch(B.url + "/v1/models", { headers: { authorization: "Bearer " + k.replace("\u0000", "%00") } })).status);
    near.push((await fetch(B.url + "/v1/models", { headers: { "x-api-key": k.replace("\u0000", "x") } })).status);
  }
  check("api key: prefixes, extensions and near misses of the key get 401 (constant-time compare)", near.every((x) => x === 401), JSON.stringify(near));
  check("api key: CORS preflight needs no key", (await fetch(B.url + "/v1/messages", { method: "OPTIONS" })).status === 204);
  const okB = new OpenAI({ baseURL: B.url + "/v1", apiKey: "sekrit", maxRetries: 0 });
  const bm = await okB.models.list();
  check("api key: openai client with the key; --alias names the model", bm.data[0]?.id === "bible");
  const okBa = new Anthropic({ baseURL: B.url, apiKey: "sekrit", maxRetries: 0 });
  const ba = await okBa.messages.create({ model: "bible", max_tokens: 4, messages: msgs, temperature: 0 });
  check("api key: anthropic client with the key", ba.content[0].text.length > 0 && ba.model === "bible");
  const burst = await Promise.all(Array.from({ length: 6 }, () =>
    fetch(B.url + "/v1/chat/completions", { method: "POST", headers: { authorization: "Bearer sekrit" },
      body: JSON.stringify({ messages: ask("Tell me everything."), max_tokens: 200, temperature: 0, ignore_eos: true }) })
      .then(async (r) => ({ status: r.status, retry: r.headers.get("retry-after"), body: await r.json().catch(() => null) }))));
  const refused = burst.filter((b) => b.status === 503);
  check("admission: a full queue answers 503 + Retry-After with a JSON error", refused.length >= 1 && refused.every((b) => b.retry && b.body?.error?.message),
        JSON.stringify(burst.map((b) => b.status)));
  check("admission: admitted requests complete", burst.filter((b) => b.status === 200).length >= 1 &&
        burst.every((b) => b.status === 200 || b.status === 503), JSON.stringify(burst));
  const exB = await B.stop("SIGINT", 10000);
  check("SIGINT: exits 0", exB.code === 0, JSON.stringify(exB));
}

try {
  await main();
} catch (e) {
  check("suite ran to the end", false, e.stack || String(e));
}
finish();
