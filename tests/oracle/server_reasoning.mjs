// server_reasoning.mjs — reasoning output of `lmc serve` (--reasoning-format, reasoning_format):
// OpenAI message.reasoning_content and delta.reasoning_content, Anthropic thinking blocks.
//
// The demo model writes no reasoning markers, so the suite makes it: copies of the demo model
// whose tokenizer decodes a token of the greedy reply as "<think>" / "</think>" (as Qwen3's added
// tokens are), or as the special "<|return|>" beside a "<|channel|>" token and a template that opens
// gpt-oss's analysis channel (harmony). Re-mapping a token's text changes neither the prompt's
// tokens nor the greedy choice, so the raw reply is known from the plain demo model (or from a
// reasoning_format "none" request with logprobs, whose token texts keep special tokens), and the
// expected split is computed here by the rules README.md states. Checks: non-streaming and
// streaming splits on both APIs, Anthropic event order, reasoning_format "none" (per request and
// --reasoning-format none) leaving the text unchanged, a template that opens "<think>" in the
// prompt (unterminated reasoning at max_tokens), stop strings applying to the content only,
// response_format constraining only the content, and bad values refused.
// Prints `RESULT <passed> <failed>`. Needs `npm ci` in tests/oracle and $BUILD/lmc.
import { readFileSync, writeFileSync, mkdtempSync, symlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, finish, startServer, demo, withTimeout } from "./server/harness.mjs";

let OpenAI, Anthropic;
try {
  ({ default: OpenAI } = await import("openai"));
  ({ default: Anthropic } = await import("@anthropic-ai/sdk"));
} catch (e) {
  console.log("missing npm packages (run `npm ci` in tests/oracle): " + e.message);
  console.log("RESULT 0 1");
  process.exit(1);
}

const watchdog = setTimeout(() => { console.log("FAIL watchdog: the suite took over 200 s"); check("watchdog", false); finish(); }, 200000);
watchdog.unref();

const tcfg = JSON.parse(readFileSync(join(demo, "tokenizer_config.json"), "utf8"));
const tokj = JSON.parse(readFileSync(join(demo, "tokenizer.json"), "utf8"));
const ask = (text) => [{ role: "user", content: text }];
const Q = ask("Who made the heaven and the earth?");
const N = 40;
const dirs = [];

// A copy of the demo model with another chat template and tokens re-mapped ({id: [text, special]}).
function modelDir(template, remap = {}) {
  const d = mkdtempSync(join(tmpdir(), "lmc-reason-model-"));
  dirs.push(d);
  for (const f of ["config.json", "generation_config.json", "model.safetensors"]) symlinkSync(join(demo, f), join(d, f));
  const t = structuredClone(tokj);
  for (const [id, [content, special]] of Object.entries(remap)) {
    t.added_tokens = t.added_tokens.filter((a) => a.id !== Number(id));
    t.added_tokens.push({ id: Number(id), content, single_word: false, lstrip: false, rstrip: false, normalized: false, special });
  }
  writeFileSync(join(d, "tokenizer.json"), JSON.stringify(t));
  writeFileSync(join(d, "tokenizer_config.json"), JSON.stringify({ ...tcfg, chat_template: template }));
  return d;
}

// The rules of the "<think>" split (whitespace: space, tab, CR, LF).
const ltrim = (s) => s.replace(/^[ \t\r\n]+/, ""), rtrim = (s) => s.replace(/[ \t\r\n]+$/, "");
function splitThink(raw, open) {
  let s = raw;
  if (!open) {
    if (!ltrim(s).startsWith("<think>")) return { reasoning: "", content: raw };
    s = ltrim(s).slice(7);
  }
  const k = s.indexOf("</think>");
  if (k < 0) return { reasoning: rtrim(ltrim(s)), content: "" };
  return { reasoning: rtrim(ltrim(s.slice(0, k))), content: ltrim(s.slice(k + 8)) };
}

async function tokenId(url, text) {
  const ids = (await (await fetch(url + "/tokenize", { method: "POST", body: JSON.stringify({ content: text }) })).json()).tokens;
  return ids.length === 1 ? ids[0] : -1;
}

// The greedy reply's tokens (texts, specials included, and ids where a text is one token).
async function replyTokens(client, url, body) {
  const r = await client.chat.completions.create({ ...body, logprobs: true, temperature: 0 });
  const toks = r.choices[0].logprobs.content.map((e) => e.token);
  const ids = [];
  for (const t of toks) ids.push(await tokenId(url, t));
  return { toks, ids, content: r.choices[0].message.content, finish: r.choices[0].finish_reason };
}

async function collect(client, body) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let reasoning = "", content = "", order = true, finish = null;
  for await (const ch of stream) {
    for (const c of ch.choices) {
      if (c.delta?.reasoning_content) { reasoning += c.delta.reasoning_content; if (content) order = false; }
      if (c.delta?.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { reasoning, content, order, finish };
}

const oa = (url) => new OpenAI({ baseURL: url + "/v1", apiKey: "none", maxRetries: 0, timeout: 60000 });
const an = (url) => new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0, timeout: 60000 });

async function main() {
  // ---- the plain demo model: its greedy reply, and no split where no marker appears ----
  const P = await startServer([]);
  const po = oa(P.url);
  const base = await replyTokens(po, P.url, { model: "x", messages: Q, max_tokens: N });
  check("plain model: a reply of max_tokens tokens", base.toks.length === N && base.toks.join("") === base.content, JSON.stringify(base.content));
  const plainAuto = await po.chat.completions.create({ model: "x", messages: Q, max_tokens: N, temperature: 0 });
  check("no markers: content unchanged, no reasoning_content", plainAuto.choices[0].message.content === base.content &&
        !("reasoning_content" in plainAuto.choices[0].message), JSON.stringify(plainAuto.choices[0].message));
  const bad = await fetch(P.url + "/v1/chat/completions", { method: "POST", body: JSON.stringify({ messages: Q, reasoning_format: "deep" }) });
  check("reasoning_format: an unknown value is a 400 naming the field", bad.status === 400 && (await bad.json()).error?.param === "reasoning_format");
  const badA = await fetch(P.url + "/v1/messages", { method: "POST", body: JSON.stringify({ max_tokens: 4, messages: Q, reasoning_format: 3 }) });
  check("reasoning_format (messages): a non-string is a 400", badA.status === 400);
  await P.stop();

  // ---- "<think>" … "</think>" written by the model: the first reply token opens, a later one closes ----
  const iOpen = 0, iClose = base.ids.findIndex((id, i) => i >= 6 && id >= 0 && id !== base.ids[0]);
  check("setup: an opening and a closing token found in the reply", base.ids[iOpen] >= 0 && iClose > 0, JSON.stringify(base.ids));
  const open = base.ids[iOpen], close = base.ids[iClose];
  const raw = base.toks.map((t, i) => base.ids[i] === open ? "<think>" : base.ids[i] === close ? "</think>" : t).join("");
  const want = splitThink(raw, false);
  check("setup: the reply splits into reasoning and content", want.reasoning.length > 0 && want.content.length > 0, JSON.stringify(want));
  const T = await startServer(["-m", modelDir(tcfg.chat_template, { [open]: ["<think>", false], [close]: ["</think>", false] })]);
  const to = oa(T.url), ta = an(T.url);
  const body = { model: "x", messages: Q, max_tokens: N, temperature: 0 };
  const none = await to.chat.completions.create({ ...body, reasoning_format: "none" });
  check("think, reasoning_format none: the raw text as content", none.choices[0].message.content === raw &&
        !("reasoning_content" in none.choices[0].message), JSON.stringify(none.choices[0].message));
  const auto = await to.chat.completions.create(body);
  const m = auto.choices[0].message;
  check("think: reasoning_content is the text between the markers", m.reasoning_content === want.reasoning, `${JSON.stringify(m.reasoning_content)} vs ${JSON.stringify(want.reasoning)}`);
  check("think: content is the text after </think>", m.content === want.content, `${JSON.stringify(m.content)} vs ${JSON.stringify(want.content)}`);
  check("think: finish_reason and usage unchanged", auto.choices[0].finish_reason === "length" && auto.usage.completion_tokens === N);
  check("think: usage.completion_tokens_details.reasoning_tokens counts <think> to </think>",
        auto.usage.completion_tokens_details?.reasoning_tokens === iClose + 1 && !none.usage.completion_tokens_details, JSON.stringify(auto.usage));
  const st = await collect(to, body);
  check("think stream: reasoning deltas then content deltas, equal to the non-streamed message",
        st.reasoning === want.reasoning && st.content === want.content && st.order && st.finish === "length", JSON.stringify(st));
  const stNone = await collect(to, { ...body, reasoning_format: "none" });
  check("think stream, none: the raw text as content deltas", stNone.content === raw && stNone.reasoning === "");

  // stop strings apply to the content: one inside the reasoning does not stop it
  const inR = want.reasoning.slice(1, 5), inC = want.content.slice(2, 6);
  if (!raw.slice(raw.indexOf("</think>")).includes(inR)) {
    const sr = await to.chat.completions.create({ ...body, stop: [inR] });
    check("think: a stop string found only in the reasoning does not end the reply", sr.choices[0].message.reasoning_content === want.reasoning &&
          sr.choices[0].message.content === want.content && sr.choices[0].finish_reason === "length", JSON.stringify(sr.choices[0]));
  }
  const sc = await to.chat.completions.create({ ...body, stop: [inC] });
  check("think: a stop string in the content cuts the content, reasoning intact", sc.choices[0].message.reasoning_content === want.reasoning &&
        sc.choices[0].message.content === want.content.slice(0, want.content.indexOf(inC)) && sc.choices[0].finish_reason === "stop",
        JSON.stringify(sc.choices[0]));
  const scs = await collect(to, { ...body, stop: [inC] });
  check("think stream: the same cut", scs.reasoning === want.reasoning && scs.content === sc.choices[0].message.content && scs.finish === "stop");

  // Anthropic: a thinking block before the text block
  const am = await ta.messages.create({ model: "x", max_tokens: N, messages: Q, temperature: 0 });
  check("messages: a thinking block, then the text block", am.content.length === 2 && am.content[0].type === "thinking" &&
        am.content[0].thinking === want.reasoning && am.content[1].type === "text" && am.content[1].text === want.content &&
        am.stop_reason === "max_tokens", JSON.stringify(am.content));
  const amNone = await ta.messages.create({ model: "x", max_tokens: N, messages: Q, temperature: 0, reasoning_format: "none" });
  check("messages, none: one text block with the raw text", amNone.content.length === 1 && amNone.content[0].text === raw);
  const events = [];
  let thinking = "", text = "";
  const ras = await ta.messages.create({ model: "x", max_tokens: N, messages: Q, temperature: 0, stream: true });
  for await (const ev of ras) {
    const tag = ev.type + (ev.type === "content_block_start" ? ":" + ev.content_block.type + ev.index :
                           ev.type === "content_block_delta" ? ":" + ev.delta.type + ev.index : ev.type === "content_block_stop" ? ev.index : "");
    if (events[events.length - 1] !== tag) events.push(tag);
    if (ev.type === "content_block_delta" && ev.delta.type === "thinking_delta") thinking += ev.delta.thinking;
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
  }
  check("messages stream: thinking block 0, text block 1, in order", events.join(",") ===
        "message_start,content_block_start:thinking0,content_block_delta:thinking_delta0,content_block_stop0," +
        "content_block_start:text1,content_block_delta:text_delta1,content_block_stop1,message_delta,message_stop", events.join(","));
  check("messages stream: thinking and text equal the non-streamed blocks", thinking === want.reasoning && text === want.content);
  const helper = ta.messages.stream({ model: "x", max_tokens: N, messages: Q, temperature: 0 });
  const fin = await withTimeout(helper.finalMessage(), 30000, "messages.stream");
  check("messages stream helper: finalMessage holds both blocks", fin.content[0]?.thinking === want.reasoning && fin.content[1]?.text === want.content,
        JSON.stringify(fin.content));

  // JSON mode: the output is constrained from its first token, where no "<think>" can open
  const isObj = (t) => { try { const v = JSON.parse(t); return v !== null && typeof v === "object" && !Array.isArray(v); } catch { return false; } };
  const jm = await to.chat.completions.create({ ...body, max_tokens: 200, response_format: { type: "json_object" } });
  check("think + json mode without an opened <think>: a JSON object as content, no reasoning", isObj(jm.choices[0].message.content) &&
        !jm.choices[0].message.reasoning_content, JSON.stringify(jm.choices[0].message));
  await T.stop();

  // ---- --reasoning-format none: the server's default ----
  const TN = await startServer(["-m", modelDir(tcfg.chat_template, { [open]: ["<think>", false], [close]: ["</think>", false] }), "--reasoning-format", "none"]);
  const tn = await oa(TN.url).chat.completions.create(body);
  check("--reasoning-format none: the raw text as content", tn.choices[0].message.content === raw && !tn.choices[0].message.reasoning_content);
  const tna = await oa(TN.url).chat.completions.create({ ...body, reasoning_format: "auto" });
  check("--reasoning-format none, request auto: split", tna.choices[0].message.reasoning_content === want.reasoning);
  await TN.stop();

  // ---- a template that opens "<think>" in the prompt (DeepSeek-R1 style) ----
  const openTemplate = tcfg.chat_template.replace("'<|assistant|>\\n'", "'<|assistant|>\\n<think>\\n'");
  check("setup: the template opens <think>", openTemplate !== tcfg.chat_template);
  const O1 = await startServer(["-m", modelDir(openTemplate)]);
  const o1 = oa(O1.url);
  const ob = await replyTokens(o1, O1.url, { model: "x", messages: Q, max_tokens: N, reasoning_format: "none" });
  const uo = await o1.chat.completions.create(body);
  check("opened <think>, no </think> (max_tokens): all of it is reasoning", uo.choices[0].message.reasoning_content === rtrim(ltrim(ob.content)) &&
        uo.choices[0].message.content === "" && uo.choices[0].finish_reason === "length", JSON.stringify(uo.choices[0].message));
  check("opened <think>: every token is a reasoning token", uo.usage.completion_tokens_details?.reasoning_tokens === N, JSON.stringify(uo.usage));
  const ua = await an(O1.url).messages.create({ model: "x", max_tokens: N, messages: Q, temperature: 0 });
  check("opened <think>, messages: the thinking block holds it all", ua.content[0]?.type === "thinking" && ua.content[0].thinking === rtrim(ltrim(ob.content)));
  await O1.stop();
  const oClose = ob.ids.findIndex((id, i) => i >= 4 && id >= 0 && ob.ids.indexOf(id) === i);
  check("setup: a closing token in the opened reply", oClose > 0);
  const O2 = await startServer(["-m", modelDir(openTemplate, { [ob.ids[oClose]]: ["</think>", false] })]);
  const o2 = oa(O2.url);
  const oraw = ob.toks.map((t, i) => ob.ids[i] === ob.ids[oClose] ? "</think>" : t).join("");
  const ow = splitThink(oraw, true);
  const os = await o2.chat.completions.create(body);
  check("opened <think>: split at </think>", os.choices[0].message.reasoning_content === ow.reasoning && os.choices[0].message.content === ow.content,
        `${JSON.stringify(os.choices[0].message)} vs ${JSON.stringify(ow)}`);
  // constrained decoding applies to the content only: the reasoning is the unconstrained greedy text
  const oj = await o2.chat.completions.create({ ...body, max_tokens: 200, response_format: { type: "json_object" } });
  const ojc = oj.choices[0];
  check("opened <think> + json mode: unconstrained reasoning, then a JSON object as content", ojc.message.reasoning_content === ow.reasoning &&
        (ojc.finish_reason === "stop" ? isObj(ojc.message.content) : ojc.message.content.startsWith("{")), JSON.stringify(ojc));
  const ojs = await collect(o2, { ...body, max_tokens: 200, response_format: { type: "json_object" } });
  check("opened <think> + json mode, streamed: the same", ojs.reasoning === ow.reasoning && ojs.content === ojc.message.content);
  await O2.stop();

  // ---- harmony (gpt-oss): the template opens the analysis channel; a special token ends the message ----
  const hTemplate = tcfg.chat_template.replace("'<|assistant|>\\n'", "'<|assistant|>\\n<|channel|>analysis<|message|>'");
  const hmap = { 5: ["<|channel|>", true] };   // "<|system|>" (unused here) becomes the channel token
  const H1 = await startServer(["-m", modelDir(hTemplate, hmap)]);
  const hb = await replyTokens(oa(H1.url), H1.url, { model: "x", messages: Q, max_tokens: N, reasoning_format: "none" });
  await H1.stop();
  const hEnd = hb.ids.findIndex((id, i) => i >= 4 && id >= 0 && hb.ids.indexOf(id) === i && hb.ids.lastIndexOf(id) === i);
  check("setup: a token seen once in the analysis reply", hEnd > 0, JSON.stringify(hb.ids));
  const H2 = await startServer(["-m", modelDir(hTemplate, { ...hmap, [hb.ids[hEnd]]: ["<|return|>", true] })]);
  const h2 = oa(H2.url);
  const hw = { reasoning: hb.toks.slice(0, hEnd).join(""), content: ltrim(hb.toks.slice(hEnd + 1).join("")) };
  const hr = await h2.chat.completions.create(body);
  check("harmony: the analysis message (to the special end token, kept by the detokenizer) is reasoning",
        hr.choices[0].message.reasoning_content === hw.reasoning, `${JSON.stringify(hr.choices[0].message.reasoning_content)} vs ${JSON.stringify(hw.reasoning)}`);
  check("harmony: text after it without markup is content, no marker leaks", hr.choices[0].message.content === hw.content &&
        !hr.choices[0].message.content.includes("<|"), `${JSON.stringify(hr.choices[0].message.content)} vs ${JSON.stringify(hw.content)}`);
  const hs = await collect(h2, body);
  check("harmony stream: the same parts", hs.reasoning === hw.reasoning && hs.content === hw.content, JSON.stringify(hs));
  const hn = await h2.chat.completions.create({ ...body, reasoning_format: "none" });
  check("harmony, none: special tokens skipped as before", hn.choices[0].message.content === hb.toks.filter((_, i) => i !== hEnd).join(""),
        JSON.stringify(hn.choices[0].message.content));
  await H2.stop();

  // ---- harmony tool call: a commentary message to functions.NAME becomes tool_calls ----
  const call = '<|end|><|start|>assistant<|channel|>commentary to=functions.get_verse <|constrain|>json<|message|>{"book": "Genesis"}';
  const H3 = await startServer(["-m", modelDir(hTemplate + "{# calls are written to=functions.NAME #}", { ...hmap, [hb.ids[hEnd]]: [call, false] })]);
  const verse = { type: "function", function: { name: "get_verse", parameters: { type: "object", properties: { book: { type: "string" } } } } };
  const tc = await oa(H3.url).chat.completions.create({ ...body, tools: [verse] });
  const tm = tc.choices[0].message;
  check("harmony tools: the analysis is reasoning, the commentary call a tool call", tm.reasoning_content === hw.reasoning &&
        tm.tool_calls?.length === 1 && tm.tool_calls[0].function.name === "get_verse" &&
        JSON.stringify(JSON.parse(tm.tool_calls[0].function.arguments)) === '{"book":"Genesis"}' && !tm.content, JSON.stringify(tm));
  const tcs = await oa(H3.url).chat.completions.create({ ...body, tools: [verse], stream: true });
  let sr = "", sc2 = "", calls = [];
  for await (const ch of tcs) for (const c of ch.choices) {
    sr += c.delta?.reasoning_content ?? ""; sc2 += c.delta?.content ?? "";
    for (const t of c.delta?.tool_calls ?? []) calls.push(t);
  }
  check("harmony tools, streamed: reasoning deltas, then the call", sr === hw.reasoning && sc2 === "" && calls.length === 1 &&
        calls[0].function.name === "get_verse", JSON.stringify({ sr, sc2, calls }));
  const am3 = await an(H3.url).messages.create({ model: "x", max_tokens: N, messages: Q, temperature: 0,
    tools: [{ name: "get_verse", input_schema: verse.function.parameters }] });
  check("harmony tools, messages: a thinking block, then a tool_use block", am3.content.map((b) => b.type).join(",") === "thinking,tool_use" &&
        am3.content[0].thinking === hw.reasoning && am3.content[1].name === "get_verse" && am3.content[1].input.book === "Genesis", JSON.stringify(am3.content));
  // forced: the analysis runs unconstrained, the call's arguments are the content alone (JSON-checked from there)
  const fc = await oa(H3.url).chat.completions.create({ ...body, tools: [verse], tool_choice: { type: "function", function: { name: "get_verse" } } });
  const fm = fc.choices[0].message;
  check("harmony tools, forced: reasoning, then the arguments alone, ended when the JSON closed", fm.reasoning_content === hw.reasoning &&
        fm.tool_calls?.[0]?.function.arguments.startsWith('{"book": "Genesis"}') &&
        JSON.parse(fm.tool_calls[0].function.arguments).book === "Genesis" && fc.choices[0].finish_reason === "stop", JSON.stringify(fc.choices[0]));
  await H3.stop();
}

try {
  await main();
} catch (e) {
  check("suite ran to the end", false, e.stack || String(e));
}
for (const d of dirs) rmSync(d, { recursive: true, force: true });
finish();
