#!/usr/bin/env bash
# tp_run.sh — on a machine with two GPUs: build lmc with CUDA, run test_cuda_tp (every fixture at
# tp 1 / tp 2 against the float64 references), then bench a random Llama-3.1-8B-shape checkpoint
# (bench/synth_llama8b.py, needs torch) at tp 1 and tp 2. The GPU machines lack the Debian -dev
# packages, so the build goes through a kit folder (KIT=dir, default .dev/cudaval-kit: build.sh plus
# the cJSON / PCRE2 / utf8proc headers and libraries, not in the repository); logs go to $OUT.
set -u
OUT=${OUT:-tp-logs}; mkdir -p "$OUT"
K=${KIT:-.dev/cudaval-kit}
bash $K/build.sh > $OUT/build.log 2>&1 || { echo "build FAILED"; tail -30 $OUT/build.log; exit 1; }
B=build-cuda/kit
CF="-std=c11 -D_GNU_SOURCE -O2 -march=native -pthread -Iinclude -Isrc -I$K/include -I/usr/local/cuda/include -DLMC_CUDA"
L="$B/liblmc.a -L$K/lib -Wl,-rpath,$K/lib -lcjson -lpcre2-8 -lutf8proc -lm -lpthread -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublas -lcudart -lstdc++ -ldl"
gcc $CF -Itests -o build-cuda/tests/test_cuda_tp tests/cuda/test_cuda_tp.c $L || exit 1
NL=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) + '/lib')" 2>/dev/null)
export LD_LIBRARY_PATH=${NL}:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
nvidia-smi -L; echo "nccl lib: $NL"; ls $NL 2>/dev/null | head -3
git log -1 --format='commit %h' 2>/dev/null
timeout 240 build-cuda/tests/test_cuda_tp > $OUT/tp.log 2>&1; echo "test_cuda_tp rc $?"; grep -E "RESULT|FAIL|tp 1:|SKIP" $OUT/tp.log | head -30
python3 bench/synth_llama8b.py /tmp/l8b 32 > $OUT/synth.log 2>&1 || { echo synth failed; tail -5 $OUT/synth.log; exit 0; }
for tp in 1 2; do
  echo "== tp $tp"; timeout 150 build-cuda/lmc bench -m /tmp/l8b --backend cuda --tp $tp -p 512 -n 64 -r 2 2>&1 | tail -4
done
