#!/usr/bin/env bash
# Correctness on a machine with an NVIDIA GPU, on the binaries of scripts/build_gpu_binaries.sh
# (see bench/README.md): every conformance binary (golden, CUDA smoke, properties + differential,
# bad inputs, huge cache, PDL), compute-sanitizer memcheck / racecheck / initcheck, and the CLI
# (`dsv4kv demo` on CUDA, `dsv4kv check-golden` through reference and CUDA).
#   DSV4KV_BIN_DIR=DIR bash bench/verify_gpu.sh
# DSV4KV_BIN_DIR: the folder holding the *_test binaries and dsv4kv (default .carry; the older
# name DSV4KV_CARRY is still read); relative folders are taken from the repository root.
# Logs land in $OUT (or ./build-verify-out). Exit status: the number of failed steps (0 = all passed).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${DSV4KV_BIN_DIR:-${DSV4KV_CARRY:-.carry}}
out=${OUT:-build-verify-out}
mkdir -p "$out"
export DSV4KV_GOLDEN_DIR=${DSV4KV_GOLDEN_DIR:-$PWD/conformance/golden}
export DSV4KV_SOURCE_DIR=${DSV4KV_SOURCE_DIR:-$PWD}
log="$out/verify.log"
failed=0
. bench/step.sh  # step NAME CMD... (the scripts run from the repository root)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
for t in "$bin"/*_test; do
  step "$(basename "$t")" "$t" --gtest_brief=1
done
cs="compute-sanitizer --error-exitcode 9"
step "memcheck golden_test" $cs --tool memcheck "$bin/golden_test" --gtest_filter='*Cuda*' --gtest_brief=1
step "memcheck bad_inputs_test" $cs --tool memcheck "$bin/bad_inputs_test" --gtest_filter='*Cuda*' --gtest_brief=1
step "memcheck cuda_smoke_test" $cs --tool memcheck "$bin/cuda_smoke_test" --gtest_filter='CudaSmoke.Large*' --gtest_brief=1
step "memcheck properties_cuda_test" $cs --tool memcheck "$bin/properties_cuda_test" --gtest_filter='CudaDifferential*' --gtest_brief=1
step "racecheck cuda_smoke_test" $cs --tool racecheck "$bin/cuda_smoke_test" --gtest_filter='CudaSmoke.Large*' --gtest_brief=1
step "racecheck bad_inputs_test" $cs --tool racecheck "$bin/bad_inputs_test" --gtest_filter='*Cuda*' --gtest_brief=1
step "racecheck properties_cuda_test" $cs --tool racecheck "$bin/properties_cuda_test" --gtest_filter='CudaDifferential*' --gtest_brief=1
step "memcheck pdl_test" $cs --tool memcheck "$bin/pdl_test" --gtest_filter='PdlChain.*' --gtest_brief=1
# With PDL on, the index operations' one-wave launches prefetch their inputs before the wait
# (rows.cuh): the differential properties and memcheck over them, that way.
pdl_props='CudaDifferential.GlobalTopk*:CudaDifferential.Combine*:CudaDifferential.MixedSparse*:CudaDifferential.FixedShapes*'
step "properties_cuda_test, PDL on" env DSV4KV_CUDA_PDL=1 "$bin/properties_cuda_test" --gtest_brief=1
step "memcheck properties_cuda_test, PDL on (index ops)" env DSV4KV_CUDA_PDL=1 $cs --tool memcheck "$bin/properties_cuda_test" --gtest_filter="$pdl_props" --gtest_brief=1
# The fat build carries sm_90a/sm_100a/sm_120 SASS with the wait: a device of compute capability
# >= 9.0 must get PDL launches (else the pdl rows and tests measure plain launches).
pdl_where_expected() {
  local o; o=$("$bin/pdl_test" --gtest_filter='PdlChain.OnStream*') || return 1
  printf '%s\n' "$o" | grep "programmatic_launch_supported"
  printf '%s\n' "$o" | grep -Eq "supported: yes|supported: no \(compute capability [0-8]\."
}
step "pdl_test: PDL in effect on compute capability >= 9.0" pdl_where_expected
step "initcheck bad_inputs_test" $cs --tool initcheck "$bin/bad_inputs_test" --gtest_filter='*Cuda*' --gtest_brief=1
step "initcheck properties_cuda_test" $cs --tool initcheck "$bin/properties_cuda_test" --gtest_filter='CudaDifferential*' --gtest_brief=1
step "dsv4kv demo (auto = cuda)" "$bin/dsv4kv" demo
step "dsv4kv check-golden" "$bin/dsv4kv" check-golden conformance/golden/*.safetensors
grep -E "^(backend|PASS:|FAIL)|passed, .* failed" "$log" | tail -n 8
echo "verify_gpu: $failed failed step(s); full log in $log"
exit $failed
