#!/usr/bin/env bash
# The sm_89 code path on real hardware (run on a machine with an NVIDIA GPU): the CUDA suites built
# with DSV4KV_CUDA_ARCHS=compute_89 (PTX only, no SASS; scripts/build_gpu_binaries.sh puts them in
# $DSV4KV_BIN_DIR/ptx89/) run with CUDA_FORCE_PTX_JIT=1, so the driver JIT-compiles the compute_89
# PTX for the GPU at hand and every kernel executes the code compiled for Ada. Each suite compares
# the CUDA backend with the reference byte for byte, as in bench/verify_gpu.sh.
#   DSV4KV_BIN_DIR=DIR bash bench/verify_ptx_jit.sh
# DSV4KV_PTX_BIN_DIR: the folder of the PTX-only binaries (default $DSV4KV_BIN_DIR/ptx89, and
# DSV4KV_BIN_DIR defaults to .carry; the older name DSV4KV_PTX_CARRY is still read); relative
# folders are taken from the repository root.
# Logs land in $OUT (or ./build-verify-out). Exit status: the number of failed steps (0 = all passed).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${DSV4KV_PTX_BIN_DIR:-${DSV4KV_PTX_CARRY:-${DSV4KV_BIN_DIR:-.carry}/ptx89}}
out=${OUT:-build-verify-out}
mkdir -p "$out"
export DSV4KV_GOLDEN_DIR=${DSV4KV_GOLDEN_DIR:-$PWD/conformance/golden}
export DSV4KV_SOURCE_DIR=${DSV4KV_SOURCE_DIR:-$PWD}
export CUDA_FORCE_PTX_JIT=1
# A JIT cache from an earlier run would hide a JIT failure; each run compiles afresh.
export CUDA_CACHE_DISABLE=1
log="$out/verify_ptx_jit.log"
: >"$log"
failed=0
. bench/step.sh  # step NAME CMD... (the scripts run from the repository root)
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee -a "$log"
suites=(golden_test cuda_smoke_test properties_cuda_test bad_inputs_test huge_cache_test pdl_test)
for s in "${suites[@]}"; do
  [ -x "$bin/$s" ] || { echo "FAIL  $s (not in $bin: run scripts/build_gpu_binaries.sh first)"; failed=$((failed + 1)); }
done
# What the binaries carry, where the GPU machine has cuobjdump: compute_89 PTX and nothing else.
for c in cuobjdump /usr/local/cuda/bin/cuobjdump; do
  if command -v "$c" >/dev/null; then
    for s in "${suites[@]}"; do
      [ -x "$bin/$s" ] && step "$s carries compute_89 PTX only" env CUOBJDUMP="$(command -v "$c")" \
        bash scripts/check_fatbin.sh --exact "$bin/$s" compute_89
    done
    break
  fi
done
# The carried binaries hold compute_89 PTX and no SASS (checked before they were carried); with
# CUDA_FORCE_PTX_JIT=1 a binary without PTX could not launch a kernel at all, so a pass means the
# JIT-compiled sm_89 code ran. A skipped CUDA test (no usable device) would hide that: fail on any.
for s in "${suites[@]}"; do
  [ -x "$bin/$s" ] || continue
  before=$(wc -l <"$log")
  step "$s (compute_89 PTX, CUDA_FORCE_PTX_JIT=1)" "$bin/$s" --gtest_brief=1
  if tail -n +"$((before + 1))" "$log" | grep -q "^\[  SKIPPED \]"; then
    echo "FAIL  $s skipped tests (no usable device?)"; failed=$((failed + 1))
  fi
done
# The JIT-compiled compute_89 code has no griddepcontrol.wait: the library must not launch it with
# PDL (pdl_test's runs "with PDL" are then plain launches, and it says so).
if [ -x "$bin/pdl_test" ]; then
  step "pdl_test: no PDL for compute_89 PTX" bash -c \
    "'$bin/pdl_test' --gtest_filter='PdlChain.OnStream*' | grep -q 'programmatic_launch_supported: no'"
fi
# check-golden runs CUDA only where a device is usable: require both backends.
check_golden_cuda() {
  local o rc
  o=$("$1" check-golden conformance/golden/*.safetensors); rc=$?
  printf '%s\n' "$o"
  [ $rc -eq 0 ] && grep -q "(2 backends)" <<<"$o"
}
if [ -x "$bin/dsv4kv" ]; then
  step "dsv4kv demo --backend cuda (PTX JIT)" "$bin/dsv4kv" demo --backend cuda
  step "dsv4kv check-golden, reference and CUDA (PTX JIT)" check_golden_cuda "$bin/dsv4kv"
fi
grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]" "$log"
echo "verify_ptx_jit: $failed failed step(s); full log in $log"
exit $failed
