#!/usr/bin/env bash
# make-kit.sh — makes the device kit .dev/cudaval-kit (git-ignored) from this machine's Debian
# packages (scripts/install-deps.sh installs them), plus .dev/devrun.sh and .dev/mktree.sh.
#
# The GPU device machine has CUDA but none of lmc's Debian -dev packages. The kit carries what a
# build there needs, ~0.7 MB (the device tool carries at most 64 MiB with the tracked tree, which
# is ~62 MiB: every carried byte counts):
#   include/  cJSON, PCRE2, utf8proc, libmicrohttpd, cblas headers (copied from /usr/include)
#   lib/      libpcre2-8.a.xz, libutf8proc.a.xz (static, unpacked by build.sh), libcjson.so*
#             (shared, found through the rpath)
#   stubs.c   link stand-ins for OpenBLAS and libmicrohttpd; build.sh builds build-cuda/ there
# A run on the device (docs/CUDA.md, "Device runs"):
#   bash .dev/devrun.sh NAME 'build-cuda/tests/test_cuda_ops; ...'   carry: .dev/cudaval-kit, .dev/devrun.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
K=.dev/cudaval-kit
rm -rf "$K" && mkdir -p "$K/include" "$K/lib"
cp -r /usr/include/cjson "$K/include/"
cp /usr/include/pcre2.h /usr/include/utf8proc.h /usr/include/microhttpd.h "$K/include/"
cp -L /usr/include/x86_64-linux-gnu/cblas.h /usr/include/x86_64-linux-gnu/openblas_config.h "$K/include/"
cp /usr/lib/x86_64-linux-gnu/libpcre2-8.a /usr/lib/x86_64-linux-gnu/libutf8proc.a "$K/lib/"
xz -9 "$K/lib/libpcre2-8.a" "$K/lib/libutf8proc.a"
cp -a /usr/lib/x86_64-linux-gnu/libcjson.so* "$K/lib/"
cp tools/cudakit/stubs.c tools/cudakit/build.sh "$K/"
cp tools/cudakit/devrun.sh tools/cudakit/mktree.sh .dev/
echo "make-kit: $K ($(du -sh "$K" | cut -f1)), .dev/devrun.sh, .dev/mktree.sh"
