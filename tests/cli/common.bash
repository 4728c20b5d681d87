# common.bash — sourced by tests/cli/*.sh (not a test itself: tests/run.sh runs *.sh only).
# Moves to the repository root and defines: B (the build folder, absolute), LMC (the CLI),
# ok / bad (count a passed / failed check; bad prints why), finish (prints the RESULT line
# tests/run.sh adds up and exits non-zero on any failure).
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
B=${BUILD:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
LMC=$B/lmc
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
finish() { echo "RESULT $pass $fail"; [ "$fail" -eq 0 ]; exit $?; }
# maxrel A.f32 B.f32: max |a - b| / max |b| of two f32 files (NaN when their lengths differ or are 0)
maxrel() {
    node -e 'const fs=require("fs");const r=p=>{const b=fs.readFileSync(p);return new Float32Array(b.buffer,b.byteOffset,b.length/4)};
const a=r(process.argv[1]),b=r(process.argv[2]);let m=0,e=0;for(let i=0;i<b.length;i++){m=Math.max(m,Math.abs(b[i]));e=Math.max(e,Math.abs(a[i]-b[i]))}
console.log(a.length===b.length&&b.length>0?(e/m).toExponential(2):"NaN")' "$1" "$2"
}
# at_most X BOUND: succeeds when the number X is at most BOUND (NaN or not a number: fails)
at_most() { node -e "process.exit(+process.argv[1] <= +process.argv[2] ? 0 : 1)" "$1" "$2"; }
