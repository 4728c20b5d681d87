// cmp_logits.mjs — compare lmc's f32 logits files with a fixture's float64 reference at F1.
//   node cmp_logits.mjs FIXTURE_DIR PROMPT_F32 [STEPS_F32 N_STEPS]
// Exits 0 when max |Δ| ≤ 1e-4 · max |ref| for every row given, else prints the error and exits 1.
import fs from 'fs';
const [fx, promptFile, stepsFile, nSteps] = process.argv.slice(2);
const ref = JSON.parse(fs.readFileSync(fx + '/ref.json'));
const V = ref.vocab_size, np = ref.prompt_ids.length;
const f32 = p => { const b = fs.readFileSync(p); return new Float32Array(b.buffer, b.byteOffset, b.length / 4); };
const f64 = p => { const b = fs.readFileSync(p); return new Float64Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length)); };
const cmp = (got, want, rows, what) => {
  if (got.length !== rows * V) { console.error(`${what}: ${got.length} floats, expected ${rows * V}`); return false; }
  let scale = 0, err = 0;
  for (let i = 0; i < rows * V; i++) { scale = Math.max(scale, Math.abs(want[i])); err = Math.max(err, Math.abs(got[i] - want[i])); }
  if (err > 1e-4 * scale) { console.error(`${what}: max error ${err} > ${1e-4 * scale}`); return false; }
  return true;
};
let ok = cmp(f32(promptFile), f64(fx + '/prompt_logits.bin'), np, 'prompt logits');
if (stepsFile) ok = cmp(f32(stepsFile), f64(fx + '/greedy_logits.bin'), +nSteps, 'greedy-step logits') && ok;
process.exit(ok ? 0 : 1);
