#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan + coverage, separate build dir build-fuzz)
# and runs each for a bounded time, failing on any finding (crash, sanitizer report, leak, timeout,
# out-of-memory).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET=60] [TARGET...]
#
# Each run starts from the seed corpus in fuzz/corpus/<target>/ plus what earlier runs found in
# build-fuzz/corpus/<target>/ (the repository's corpus is never modified), with the dictionary
# fuzz/<target>.dict when there is one. A finding leaves its input
# in build-fuzz/artifacts/; reproduce it with `build-fuzz/<target> <file>`.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(fuzz_safetensors fuzz_npy fuzz_ops fuzz_validate)

cxx=${DSV4KV_FUZZ_CXX:-}
if [[ -z $cxx ]]; then
  for c in clang++ clang++-14 clang++-15 clang++-16 clang++-17 clang++-18; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
[[ -n $cxx ]] || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }

cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build build-fuzz --target "${targets[@]}" -j"$(nproc)"

mkdir -p build-fuzz/artifacts
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  dict=()
  [[ -f fuzz/$t.dict ]] && dict=(-dict="fuzz/$t.dict")
  echo "== $t: ${seconds}s"
  # -timeout: one input taking over 10 s is a finding (a loop the spec says must be bulk, say).
  if ! "build-fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix=build-fuzz/artifacts/ ${dict[@]+"${dict[@]}"} "build-fuzz/corpus/$t" "fuzz/corpus/$t" \
       >"build-fuzz/$t.log" 2>&1; then
    echo "fuzz.sh: $t FOUND A PROBLEM; last lines of build-fuzz/$t.log:" >&2
    tail -40 "build-fuzz/$t.log" >&2
    status=1
  else
    grep -E "^stat::(number_of_executed_units|new_units_added)|cov:" "build-fuzz/$t.log" | tail -3
  fi
done
exit $status
