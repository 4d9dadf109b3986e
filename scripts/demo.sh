#!/usr/bin/env bash
# Installs dependencies, builds dsv4kv and runs the main job: `dsv4kv demo`
# (the CPU reference by default; the CUDA backend when a GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DDSV4KV_BUILD_TESTS=OFF -DDSV4KV_BUILD_BENCH=OFF
cmake --build build -j"$(nproc)" --target dsv4kv
./build/tools/dsv4kv demo "$@"
