#!/usr/bin/env bash
# Builds the reference and the conformance suite with AddressSanitizer + UndefinedBehaviorSanitizer
# (host code only, DSV4KV_WITH_CUDA=OFF) in build-asan and runs ctest. Any sanitizer report aborts
# the test that triggered it, so ctest fails. Then runs the sanitized `dsv4kv inspect` and
# `dsv4kv check-golden` on a generated corpus of malformed and mutated files and on non-files
# (scripts/hostile_corpus.py): any crash, hang, sanitizer report, run above 1 GB RSS or malformed
# file not refused with a one-line error fails the stage. DSV4KV_SKIP_HOSTILE=1 skips that part.
#
#   scripts/sanitize.sh [extra ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4KV_SANITIZE=ON -DDSV4KV_WITH_CUDA=OFF \
  -DDSV4KV_BUILD_TESTS=ON -DDSV4KV_BUILD_TOOLS=ON -DDSV4KV_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$(nproc)"
# The huge-cache test maps a 2.25 GB cache: let ASan's allocator hand it out (lazily zeroed pages).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" "$@"
if [[ ${DSV4KV_SKIP_HOSTILE:-0} != 1 ]]; then
  python3 scripts/hostile_corpus.py all build-asan/tools/dsv4kv build-asan/hostile_corpus --jobs "$(nproc)" \
    --timeout 60 --max-rss-mb 1024
fi
