// server_soak.mjs — the short soak of `lmc serve` in the normal test run: tests/soak/soak.mjs
// for 45 s with 32 clients (valid, malformed, cancelled, oversized and slow requests, a filled
// sequence, SIGTERM under load). The 30-minute run: tests/soak/soak.sh (not in CI).
import { check, finish } from "./server/harness.mjs";
import { runSoak } from "../soak/soak.mjs";

try {
  await runSoak({ duration: Number(process.env.LMC_SOAK_SECONDS || 45), clients: 32, seed: 1 });
} catch (e) {
  check("soak ran to the end", false, e.stack || String(e));
}
finish();
