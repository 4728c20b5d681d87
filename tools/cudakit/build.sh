#!/usr/bin/env bash
# build.sh — run on the device machine from the kit folder (.dev/cudaval-kit, made by
# tools/cudakit/make-kit.sh): builds build-cuda/ (lmc, the tests/cuda tests, bench_cuda, bench_spec)
# with the kit's headers, PCRE2/utf8proc static, cJSON shared, libopenblas/libmicrohttpd from stubs.c,
# for sm_90a only.
set -euo pipefail
K=$(cd "$(dirname "$0")" && pwd)
cd "$K/../.."
for z in "$K"/lib/*.a.xz; do [ -f "${z%.xz}" ] || xz -dkc "$z" >"${z%.xz}"; done
gcc -O2 -fPIC -I"$K/include" -c "$K/stubs.c" -o "$K/stubs.o"
ar rcs "$K/lib/libopenblas.a" "$K/stubs.o"
ar rcs "$K/lib/libmicrohttpd.a" "$K/stubs.o"
export CPPFLAGS="-I$K/include"
# the device machine is an H200: sm_90a code only (the compute_90 PTX adds ~30% to nvcc's CPU time);
# CUDA_ARCH=... in the environment overrides
export CUDA_ARCH="${CUDA_ARCH:--gencode=arch=compute_90a,code=sm_90a}"
export LDFLAGS="-L$K/lib -Wl,-rpath,$K/lib"
make CUDA=1 BUILD=build-cuda -j"${JOBS:-$(nproc)}" build-cuda/lmc build-cuda/tests/test_cuda_ops build-cuda/tests/test_cuda_moe \
    build-cuda/tests/test_cuda_parity build-cuda/tests/test_cuda_tp build-cuda/bench/bench_cuda \
    build-cuda/bench/bench_spec "$@"
