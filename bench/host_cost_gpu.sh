#!/usr/bin/env bash
# The host-cost figures (bench/RESULTS.md#host-cost) on a machine with an NVIDIA GPU, from the
# repository root (the Triton rows need the Triton transcription in .oracle/):
#   bash bench/host_cost_gpu.sh
# 1. builds and installs the package with the compiled fast path (dsv4kv._torch_ext needs the
#    interpreter's torch at build time: --no-build-isolation), Hopper code only;
# 2. checks that the fast path is built and in use for this torch;
# 3. bench/host_cost.py: per-op host us for dsv4kv, torch.ops, no-fast, dlpack and Triton, and
#    the FIGURE ... PASS/FAIL lines; then --profile, the stage breakdown of one call;
# 4. the torch tests with CUDA and the fast path required.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
t0=$SECONDS
DSV4KV_CUDA_ARCHS="${DSV4KV_CUDA_ARCHS:-90a}" "$py" -m pip install -q --no-build-isolation --no-deps .
echo "host_cost_gpu: installed in $((SECONDS - t0)) s"
cd /tmp  # import the installed package, not the source tree
"$py" -c "import torch, dsv4kv; from dsv4kv import _torch; f = _torch._FAST; \
print('dsv4kv', dsv4kv.backends, 'torch', torch.__version__, '_torch_ext:', f and f.torch_version, 'cuda:', f and f.has_cuda); \
assert f is not None and f.has_cuda, 'the compiled fast path is not in use'"
cd - >/dev/null
"$py" bench/host_cost.py --device cuda --oracle-dir "${DSV4KV_ORACLE_DIR:-.oracle}" --json /tmp/host_cost.json
"$py" bench/host_cost.py --device cuda --profile --calls 2000 --reps 5
root=$PWD
cd /tmp
DSV4KV_REQUIRE_CUDA=1 DSV4KV_EXPECT_TORCH_EXT=1 "$py" -m pytest -q -x -n 4 "$root/python/tests/test_torch_ops.py" \
  "$root/python/tests/test_linkage.py" "$root/python/tests/test_golden.py" "$root/python/tests/test_errors.py" \
  "$root/python/tests/test_cuda.py"
