#!/usr/bin/env bash
# make-fuzzkit.sh [TARGET...] — packs libFuzzer targets for a parallel campaign on the device
# machine's CPU cores (16 there against 2 here) into .dev/fzc (git-ignored, ~1 MB a target):
# fuzz_TARGET.xz relinked from build-fuzz-lf's objects (`make fuzz-build` first) against the device
# kit's static PCRE2/utf8proc and link stand-ins (the device has no libmicrohttpd/OpenBLAS; no
# target calls them), the kit's libcjson (found next to the binary through $ORIGIN), and
# fuzzrun.sh. The binaries find the repository's files under /tmp/fz, which fuzzrun.sh links to
# the device's copy of the tree. Needs .dev/cudaval-kit (make-kit.sh). A run (docs/FUZZING.md):
#   run(command="bash .dev/fzc/fuzzrun.sh chat 16 330", carry=[".dev/fzc"])
set -euo pipefail
cd "$(dirname "$0")/../.."
K=.dev/cudaval-kit; Z=.dev/fzc
[ -d "$K" ] || { echo "make-fuzzkit: run tools/cudakit/make-kit.sh first" >&2; exit 1; }
[ -f build-fuzz-lf/liblmc.a ] || { echo "make-fuzzkit: run make fuzz-build first" >&2; exit 1; }
mkdir -p "$Z"; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
for a in "$K"/lib/*.a.xz; do xz -dc "$a" >"$T/$(basename "${a%.xz}")"; done
gcc -O2 -I"$K/include" -c "$K/stubs.c" -o "$T/stubs.o"
for t in "${@:-chat tokenizer_encode}"; do
    for n in $t; do
        clang -Iinclude -Isrc -Itests/fuzz -DLMC_DEMO_DIR='"/tmp/fz/models/demo"' -DLMC_FUZZ_LIBFUZZER -std=c11 \
            -D_GNU_SOURCE -O1 -g -march=native -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer -o "$T/fuzz_$n" "tests/fuzz/fuzz_$n.c" build-fuzz-lf/liblmc.a "$T/stubs.o" \
            "$T/libpcre2-8.a" "$T/libutf8proc.a" "$K/lib/libcjson.so.1" -lm -lpthread -Wl,-rpath,'$ORIGIN'
        xz -9 -c "$T/fuzz_$n" >"$Z/fuzz_$n.xz"
    done
done
cp -L "$K/lib/libcjson.so.1" "$Z/"
cp tools/cudakit/fuzzrun.sh "$Z/"
ls -la "$Z"
