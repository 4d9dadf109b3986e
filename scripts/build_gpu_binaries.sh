#!/usr/bin/env bash
# Builds (no GPU needed) the binaries that bench/verify_gpu.sh, bench/verify_ptx_jit.sh and
# bench/run_gpu.sh run on a machine with an NVIDIA GPU, into one folder, DSV4KV_BIN_DIR
# (default .carry, git-ignored; a relative folder is taken from the repository root):
#   fat    $DSV4KV_BIN_DIR/        the default build (SASS sm_89, sm_90a, sm_100a, sm_120 + compute_89
#                                  PTX): every conformance *_test, tools/dsv4kv and bench/dsv4kv_bench,
#                                  for bench/verify_gpu.sh and bench/run_gpu.sh
#   ptx89  $DSV4KV_BIN_DIR/ptx89/  the CUDA suites and tools/dsv4kv built with
#                                  DSV4KV_CUDA_ARCHS=compute_89 (PTX only), for bench/verify_ptx_jit.sh
# Static C++ and CUDA runtimes (DSV4KV_PORTABLE_BINARIES), stripped; the GPU code of each set is
# checked with scripts/check_fatbin.sh before it is copied. Prints the sizes, with the Triton
# transcription's folder (DSV4KV_TRITON_DIR, default .oracle) when it exists, against
# DSV4KV_SIZE_LIMIT_MIB (default 64; 0 = no limit) for copying both to a GPU machine.
#   bash scripts/build_gpu_binaries.sh [fat] [ptx89]      (default: both)
# Then, on a machine with an NVIDIA GPU, from the repository root, with the same DSV4KV_BIN_DIR:
#   bash bench/verify_gpu.sh; bash bench/verify_ptx_jit.sh; bash bench/run_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(fat ptx89)
jobs=${DSV4KV_JOBS:-$(nproc)}
carry=${DSV4KV_BIN_DIR:-.carry}
triton_dir=${DSV4KV_TRITON_DIR:-${DSV4KV_ORACLE_DIR:-.oracle}}
limit_mib=${DSV4KV_SIZE_LIMIT_MIB:-64}
cuda_suites=(golden_test cuda_smoke_test properties_cuda_test bad_inputs_test huge_cache_test pdl_test)
common=(-G Ninja -DDSV4KV_WITH_CUDA=ON -DDSV4KV_PORTABLE_BINARIES=ON -DDSV4KV_BUILD_TESTS=ON -DDSV4KV_BUILD_TOOLS=ON)
mkdir -p "$carry"

for set in "${sets[@]}"; do
  case "$set" in
    fat)
      dir=build-gpu
      cmake -S . -B "$dir" "${common[@]}" -DDSV4KV_BUILD_BENCH=ON -UDSV4KV_CUDA_ARCHS >/dev/null
      t0=$SECONDS
      cmake --build "$dir" -j"$jobs"
      echo "build_gpu_binaries: fat set built in $((SECONDS - t0)) s"
      bash scripts/check_fatbin.sh --exact --pdl "$dir/cuda/libdsv4kv_cuda.a" sm_89 sm_90a sm_100a sm_120 compute_89
      rm -f "$carry"/*_test "$carry/dsv4kv" "$carry/dsv4kv_bench"
      cp "$dir"/conformance/*_test "$dir/tools/dsv4kv" "$dir/bench/dsv4kv_bench" "$carry/"
      strip "$carry"/*_test "$carry/dsv4kv" "$carry/dsv4kv_bench"
      bash scripts/check_fatbin.sh "$carry/golden_test" sm_89 sm_90a sm_100a sm_120 compute_89
      ;;
    ptx89)
      dir=build-gpu-ptx89
      cmake -S . -B "$dir" "${common[@]}" -DDSV4KV_BUILD_BENCH=OFF -DDSV4KV_CUDA_ARCHS=compute_89 >/dev/null
      t0=$SECONDS
      cmake --build "$dir" -j"$jobs" --target "${cuda_suites[@]}" dsv4kv
      echo "build_gpu_binaries: ptx89 set built in $((SECONDS - t0)) s"
      bash scripts/check_fatbin.sh --exact "$dir/cuda/libdsv4kv_cuda.a" compute_89
      rm -rf "${carry:?}/ptx89"
      mkdir -p "$carry/ptx89"
      for s in "${cuda_suites[@]}"; do cp "$dir/conformance/$s" "$carry/ptx89/"; done
      cp "$dir/tools/dsv4kv" "$carry/ptx89/"
      strip "$carry"/ptx89/*
      for s in "${cuda_suites[@]}" dsv4kv; do bash scripts/check_fatbin.sh --exact "$carry/ptx89/$s" compute_89 >/dev/null; done
      ;;
    *) echo "build_gpu_binaries: unknown set $set (fat, ptx89)" >&2; exit 64 ;;
  esac
done

echo "== sizes"
for f in build-gpu/cuda/libdsv4kv_cuda.a build-gpu-ptx89/cuda/libdsv4kv_cuda.a; do
  [ -f "$f" ] && printf '%10d  %s\n' "$(stat -c %s "$f")" "$f"
done
find "$carry" -maxdepth 2 -type f -perm -u+x -printf '%10s  %p\n' | sort -k2
total=$(du -sb "$carry" | cut -f1)
what="$carry"
if [ -d "$triton_dir" ]; then
  total=$((total + $(du -sb "$triton_dir" | cut -f1)))
  what="$carry + $triton_dir"
fi
echo "binaries and Triton transcription ($what): $((total / 1048576)) MiB"
if [ "$limit_mib" -gt 0 ] && [ "$total" -gt $((limit_mib * 1048576)) ]; then
  echo "build_gpu_binaries: WARNING: over DSV4KV_SIZE_LIMIT_MIB=$limit_mib MiB; copy fewer files" >&2
fi
