// bench.mjs — aggregate generation throughput and time to first token of `lmc serve`
// at 1, 4 and 16 concurrent streaming clients (not a test: run by hand).
//
//   node tests/oracle/server/bench.mjs [--model DIR] [--tokens N] [--threads N] [--streams 1,4,16]
//
// Starts `$BUILD/lmc serve --max-seqs 16` on the demo model (or --model), warms it up, then for
// each concurrency runs that many greedy streaming chat requests (distinct prompts, ignore_eos,
// N tokens each) at once and prints a table: aggregate generated tok/s (completion tokens of all
// streams / wall time), per-stream tok/s, mean and max time to first token.
import { startServer, finish } from "./harness.mjs";

const arg = (name, def) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : def; };
const nTok = Number(arg("--tokens", "128"));
const streams = arg("--streams", "1,4,16").split(",").map(Number);
const extra = [];
if (arg("--model")) extra.push("-m", arg("--model"));
if (arg("--threads")) extra.push("--threads", arg("--threads"));

const topics = ["Moses", "Abraham", "David", "the sea", "the temple", "Egypt", "the LORD", "Jacob",
                "the king", "bread", "the mountain", "Jerusalem", "the prophet", "Noah", "the river", "light"];

async function one(url, i) {
  const t0 = performance.now();
  const res = await fetch(url + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: `Tell me of ${topics[i % topics.length]}.` }], max_tokens: nTok,
                           temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } }) });
  let ttft = null, usage = null, buf = "";
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, k); buf = buf.slice(k + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6));
      if (ttft === null && j.choices?.[0]?.delta?.content) ttft = performance.now() - t0;
      if (j.usage) usage = j.usage;
    }
  }
  return { ttft, tokens: usage?.completion_tokens ?? 0, ms: performance.now() - t0 };
}

const srv = await startServer(["--max-seqs", "16", ...extra]);
await Promise.all([0, 1].map((i) => one(srv.url, i)));   // warm-up
console.log(`lmc serve bench: ${nTok} tokens per stream, greedy, ignore_eos`);
console.log("streams | aggregate tok/s | per-stream tok/s | TTFT mean ms | TTFT max ms | wall s");
let base = null;
for (const n of streams) {
  const t0 = performance.now();
  const rs = await Promise.all(Array.from({ length: n }, (_, i) => one(srv.url, i)));
  const wall = (performance.now() - t0) / 1000;
  const toks = rs.reduce((a, r) => a + r.tokens, 0);
  const agg = toks / wall;
  if (base === null) base = agg;
  const tt = rs.map((r) => r.ttft);
  console.log(`${String(n).padStart(7)} | ${agg.toFixed(1).padStart(15)} | ${(agg / n).toFixed(1).padStart(16)} | ` +
              `${(tt.reduce((a, b) => a + b, 0) / n).toFixed(1).padStart(12)} | ${Math.max(...tt).toFixed(1).padStart(11)} | ${wall.toFixed(2)}` +
              (n > 1 ? `   (${(agg / base).toFixed(2)}× the 1-stream rate)` : ""));
}
await srv.stop();
finish();
