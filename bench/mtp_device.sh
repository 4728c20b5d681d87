#!/usr/bin/env bash
# mtp_device.sh — everything the MTP GPU work is checked and timed with, in one call on the GPU
# machine (run tool, carry .dev/cudaval-kit; $OUT gets the logs): the kit build, test_gemma4_mtp
# with LMC_TEST_BACKEND=cuda (chained drafts = the host loop), test_cuda_parity on the gemma4
# fixtures, --spec mtp ids = plain ids on the fixture pair, then bench/mtp_run.sh (cuda twice, cpu)
# with bench/mtp_cost.py summaries. `mtp_device.sh quick`: no unit test, models from
# bench/mtp_synth_fast.py (seconds instead of torch's minute and a half), cuda timings once.
set -u
K=.dev/cudaval-kit
Q=${1:-}
t0=$(date +%s)
M=/tmp/g4mtp; [ "$Q" = quick ] && M=/tmp/g4fast
if [ "$Q" = quick ]; then S="python3 bench/mtp_synth_fast.py $M"; else S="python3 bench/mtp_synth.py $M"; fi
(if [ ! -d $M/target ]; then $S > $OUT/synth.log 2>&1; fi; echo done > /tmp/synth.done) &
bash $K/build.sh > $OUT/build.log 2>&1 || { echo BUILD FAILED; grep -E "error" $OUT/build.log | head -20; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
if [ "$Q" != quick ]; then
    gcc -std=c11 -D_GNU_SOURCE -O2 -pthread -Iinclude -Isrc -Itests -I$K/include -I/usr/local/cuda/include -DLMC_CUDA \
        -o /tmp/tgm tests/unit/test_gemma4_mtp.c build-cuda/kit/liblmc.a -L$K/lib -Wl,-rpath,$K/lib -lcjson -lpcre2-8 \
        -lutf8proc -lm -lpthread -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublas -lcudart -lstdc++ &&
        LMC_TEST_BACKEND=cuda timeout 100 /tmp/tgm > $OUT/tgm.log 2>&1
    echo "test_gemma4_mtp (cuda chain): rc $?"; grep -E "chain|FAIL|RESULT" $OUT/tgm.log | head -12
fi
mkdir -p /tmp/fx; for f in tests/fixtures/gemma4_*; do ln -sf $PWD/$f /tmp/fx/; done
LMC_FIXTURES=/tmp/fx timeout 100 build-cuda/tests/test_cuda_parity > $OUT/parity.log 2>&1; echo "parity gemma4: rc $?"
grep -E "gemma4|FAIL|RESULT" $OUT/parity.log | head
G=tests/fixtures/gemma4_mtp
for a in dense centroid; do
  p=$(build-cuda/lmc generate -m $G/target --ids 1,5,9,33,7,90,12 -n 24 --ignore-eos --greedy --print-ids --backend cuda 2>/dev/null | tail -1)
  s=$(build-cuda/lmc generate -m $G/target --ids 1,5,9,33,7,90,12 -n 24 --ignore-eos --greedy --print-ids --backend cuda --spec mtp --draft $G/assistant_$a --draft-n 3 2>$OUT/fx_$a.err | tail -1)
  [ -n "$p" ] && [ "$p" = "$s" ] && echo "fixture mtp $a cuda: same ids" || echo "fixture mtp $a cuda: DIFFER ($p | $s) $(tail -2 $OUT/fx_$a.err)"
done
while [ ! -f /tmp/synth.done ]; do sleep 1; done; tail -3 $OUT/synth.log 2>/dev/null
echo "t $(( $(date +%s) - t0 )) s"
LMC=build-cuda/lmc BACKENDS=cuda bash bench/mtp_run.sh $M > $OUT/mtp.log 2>&1
cat $OUT/mtp.log; python3 bench/mtp_cost.py $OUT/mtp.log
echo "t $(( $(date +%s) - t0 )) s"
[ "$Q" = quick ] && exit 0
LMC=build-cuda/lmc BACKENDS=cuda bash bench/mtp_run.sh $M > $OUT/mtp2.log 2>&1
python3 bench/mtp_cost.py $OUT/mtp2.log
LMC=build-cuda/lmc BACKENDS=cpu timeout 120 bash bench/mtp_run.sh $M > $OUT/mtp_cpu.log 2>&1
cat $OUT/mtp_cpu.log; python3 bench/mtp_cost.py $OUT/mtp_cpu.log
echo "t $(( $(date +%s) - t0 )) s"
