// harness.mjs — start and stop `lmc serve` for the server tests, and count checks.
//
// startServer(args) spawns `$BUILD/lmc serve --port 0 ...` on the demo model, reads the
// port from its "listening on" line, waits for GET /health, and returns {url, proc, stop}.
// Every server started is killed on exit, even when a test throws. check() records a
// pass/fail line; finish() prints `RESULT <passed> <failed>` and exits.
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const root = join(here, "..", "..", "..");
export const build = process.env.BUILD || "build";
export const lmc = resolve(root, build, "lmc");
export const demo = join(root, "models", "demo");
// Server options (and the CLI runs compared with such a server) for checks that a greedy answer is the
// same alone and batched: a token's products do
// not depend on its batch in every CPU kernel but AMX's tiles (bf16 weights' prefill and batches of 8+),
// and with bf16 rounding (the default) a last-bit difference can round an activation the other way, so
// on AMX machines such servers compute exactly.
export const batchExact = (() => {
  try { return / amx_bf16( |$)/m.test(readFileSync("/proc/cpuinfo", "utf8")) ? ["--compute", "f32"] : []; } catch { return []; }
})();
const verbose = !!process.env.LMC_SERVER_VERBOSE;

let passed = 0, failed = 0;
const live = new Set();
const logs = [];   // stderr of every server started, shown when something failed

export function check(name, ok, detail = "") {
  if (ok) passed++; else failed++;
  if (!ok || verbose) console.log(`${ok ? "ok  " : "FAIL"} ${name}${!ok && detail ? " — " + detail : ""}`);
  return ok;
}

export function finish() {
  for (const p of live) { try { p.kill("SIGKILL"); } catch {} }
  if (failed) for (const l of logs) console.log("--- lmc serve stderr (tail):\n" + l().slice(-3000));
  console.log(`RESULT ${passed} ${failed}`);
  process.exit(failed ? 1 : 0);
}

process.on("exit", () => { for (const p of live) { try { p.kill("SIGKILL"); } catch {} } });

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function withTimeout(promise, ms, what) {
  let t;
  return Promise.race([promise, new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`${what}: timed out after ${ms} ms`)), ms); })])
    .finally(() => clearTimeout(t));
}

export async function startServer(args = [], { timeoutMs = 20000 } = {}) {
  const proc = spawn(lmc, ["serve", "--port", "0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
  live.add(proc);
  let stderr = "";
  proc.on("error", (e) => { stderr += String(e); });
  logs.push(() => stderr);
  const exited = new Promise((r) => proc.on("exit", (code, sig) => { live.delete(proc); r({ code, sig }); }));
  const port = await withTimeout(new Promise((resolve, reject) => {
    proc.stderr.on("data", (d) => {
      stderr += d;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(stderr);
      if (m) resolve(Number(m[1]));
    });
    proc.on("exit", (code) => reject(new Error(`lmc serve exited (${code}): ${stderr.trim()}`)));
  }), timeoutMs, "server start");
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try { if ((await fetch(url + "/health")).ok) break; } catch {}
    if (Date.now() > deadline) throw new Error("server never became healthy");
    await sleep(50);
  }
  const stop = async (signal = "SIGTERM", ms = 10000) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return exited;
    proc.kill(signal);
    try { return await withTimeout(exited, ms, "server stop"); }
    catch (e) { proc.kill("SIGKILL"); throw e; }
  };
  return { url, port, proc, stop, exited, stderr: () => stderr };
}

export async function metrics(url) {
  const text = await (await fetch(url + "/metrics")).text();
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^(\S+)\s+(\S+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

// Token count of text by `lmc tokenize` (no special tokens added: the template writes them).
export function tokenCount(text) {
  const r = spawnSync(lmc, ["tokenize", "-m", demo, "--no-special", text], { encoding: "utf8", timeout: 20000 });
  if (r.status !== 0) throw new Error("lmc tokenize failed: " + r.stderr);
  return r.stdout.trim().split(/\s+/).filter(Boolean).length;
}

export function cliGenerate(prompt, n) {
  const r = spawnSync(lmc, ["generate", "-m", demo, "-p", prompt, "-n", String(n), "--greedy", ...batchExact],
                      { encoding: "utf8", timeout: 30000 });
  if (r.status !== 0) throw new Error("lmc generate failed: " + r.stderr);
  return r.stdout.replace(/\n$/, "");
}

// Greedy generation by `lmc generate --logits-out`: the logits each generated token was chosen from,
// as rows of a Float32Array [n, vocab].
export function cliLogits(prompt, n, vocab) {
  const file = join(tmpdir(), `lmc-server-logits-${process.pid}.bin`);
  const r = spawnSync(lmc, ["generate", "-m", demo, "-p", prompt, "-n", String(n), "--greedy", "--logits-out", file,
                            ...batchExact],
                      { encoding: "utf8", timeout: 30000 });
  if (r.status !== 0) throw new Error("lmc generate --logits-out failed: " + r.stderr);
  const buf = readFileSync(file);
  rmSync(file, { force: true });
  const all = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
  return Array.from({ length: all.length / vocab }, (_, i) => all.subarray(i * vocab, (i + 1) * vocab));
}

export function logSoftmax(row, id) {
  let mx = -Infinity;
  for (const v of row) if (v > mx) mx = v;
  let sum = 0;
  for (const v of row) sum += Math.exp(v - mx);
  return row[id] - mx - Math.log(sum);
}
