// quant_err.mjs — error of a quantized model's logits against a fixture's float64 reference.
//   node quant_err.mjs FIXTURE_DIR PROMPT_F32
// Prints "rel <max|Δ|/max|ref|> agree <argmax agreements>/<rows> clear_agree <a>/<n> " where "clear" rows
// have a reference top-2 gap of at least 0.05 · max|ref|.
import fs from 'fs';
const [fx, file] = process.argv.slice(2);
const ref = JSON.parse(fs.readFileSync(fx + '/ref.json'));
const V = ref.vocab_size, np = ref.prompt_ids.length;
const b = fs.readFileSync(file);
const got = new Float32Array(b.buffer, b.byteOffset, b.length / 4);
const rb = fs.readFileSync(fx + '/prompt_logits.bin');
const want = new Float64Array(rb.buffer.slice(rb.byteOffset, rb.byteOffset + rb.length));
if (got.length !== np * V) { console.error(`size ${got.length} != ${np * V}`); process.exit(1); }
let scale = 0, err = 0;
for (let i = 0; i < np * V; i++) { scale = Math.max(scale, Math.abs(want[i])); err = Math.max(err, Math.abs(got[i] - want[i])); }
let agree = 0, clear = 0, clearAgree = 0;
for (let r = 0; r < np; r++) {
  let a = 0, g = 0;
  for (let v = 1; v < V; v++) { if (want[r * V + v] > want[r * V + a]) a = v; if (got[r * V + v] > got[r * V + g]) g = v; }
  let second = -Infinity;
  for (let v = 0; v < V; v++) if (v !== a) second = Math.max(second, want[r * V + v]);
  agree += a === g;
  if (want[r * V + a] - second >= 0.05 * scale) { clear++; clearAgree += a === g; }
}
console.log(`rel ${(err / scale).toExponential(2)} agree ${agree}/${np} clear_agree ${clearAgree}/${clear}`);
