"""Contract errors raised by the C++ library come back as Python exceptions with the library's
exact message, on NumPy arrays, torch CPU tensors and torch CUDA tensors, in a child process.

A child process, because the failure this guards against kills the interpreter: a package whose
C++ runtime is interposed by another library in the process (python/CMakeLists.txt) can die with
a segmentation fault on a contract error whose message has a number in it. In-process, such a
crash takes the whole pytest run with it; here it is one failed test that shows the child's
signal and output.
The CUDA variant needs torch with a CUDA device and the CUDA backend (skipped with the reason
otherwise; DSV4KV_REQUIRE_CUDA=1 turns the skip into a failure).
"""

import json
import os
import signal
import subprocess
import sys

import pytest

import dsv4kv
from op_cases import OPS

CHILD = r'''
import json, sys
import ml_dtypes, numpy as np
import dsv4kv

L = dsv4kv.layout
BF16 = ml_dtypes.bfloat16
kind = sys.argv[1]
if kind == "numpy":
    conv = lambda a: np.array(a, copy=True)
else:
    import torch
    device = "cpu" if kind == "torch-cpu" else "cuda"
    def conv(a):
        a = np.ascontiguousarray(a)
        if a.dtype == BF16:
            return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
        return torch.from_numpy(a.copy()).to(device)

def quant(cols=L.kHeadDim, stride=None, slots=2):
    stride = L.vllm_block_stride(64) if stride is None else stride
    return (conv(np.ones((2, cols), BF16)), conv(np.zeros((2, stride), np.uint8)),
            conv(np.arange(slots, dtype=np.int64)))

i32 = lambda v: conv(np.array(v, np.int32))
cases = [
    ("wrong width", lambda: dsv4kv.quantize_and_insert_k_cache(*quant(cols=L.kNopeDim))),
    ("odd block stride", lambda: dsv4kv.quantize_and_insert_k_cache(*quant(stride=L.block_data_bytes(64) + 1))),
    ("more slots than rows", lambda: dsv4kv.quantize_and_insert_k_cache(*quant(slots=3))),
    ("offset range", lambda: dsv4kv.dequantize_and_gather_k_cache(
        conv(np.zeros((1, 4, L.kHeadDim), BF16)), conv(np.zeros((1, L.vllm_block_stride(64)), np.uint8)),
        i32([2]), None, i32([[0]]), 64, 5)),
    ("is_ue8m0 false", lambda: dsv4kv.quantize_and_insert_k_cache(*quant(), 64, False)),
    ("dtype", lambda: dsv4kv.quantize_and_insert_k_cache(*quant()[:2], i32([0, 1]))),
    ("None", lambda: dsv4kv.quantize_and_insert_k_cache(quant()[0], None, quant()[2])),
]

class Conv:  # the adapter interface (from_np) of the operations' own cases
    from_np = staticmethod(conv)

sys.path.append(sys.argv[2])  # the tests folder, for op_cases (after the installed package)
from op_cases import OPS
cases += [(name, lambda call=call: call(Conv)) for m in OPS for name, call, _, _ in getattr(m, "ISOLATED_ERRORS", [])]
results = []
for name, call in cases:
    for _ in range(20):  # repeated: a corrupted runtime rarely survives twenty throws
        try:
            call()
            got = ["no exception", ""]
        except Exception as e:
            got = [type(e).__name__, str(e)]
    results.append([name] + got)
print(json.dumps(results))
'''

STRIDE_ODD = dsv4kv.layout.block_data_bytes(64) + 1
EXPECTED = [
    ["wrong width", "ValueError", "quantize_and_insert_k_cache: k must have 512 columns, got 448"],
    ["odd block stride", "ValueError", "quantize_and_insert_k_cache: k_cache block stride must be even (bf16 RoPE "
                                       f"values are 2-byte aligned), got {STRIDE_ODD}"],
    ["more slots than rows", "ValueError", "quantize_and_insert_k_cache: slot_mapping must not have more entries (3) "
                                           "than k has rows (2)"],
    ["offset range", "ValueError", "dequantize_and_gather_k_cache: offset must be in [0, out.shape[1] = 4], got 5"],
    ["is_ue8m0 false", "ValueError", "quantize_and_insert_k_cache: is_ue8m0 must be true: only UE8M0 (power-of-two) "
                                     "scales are supported"],
    ["dtype", "TypeError", "quantize_and_insert_k_cache: slot_mapping must be int64, got int32"],
    ["None", "ValueError", "quantize_and_insert_k_cache: k_cache is required"],
] + [[name, exc, message] for m in OPS for name, _, exc, message in getattr(m, "ISOLATED_ERRORS", [])]


def _skip_reason(kind):
    if kind == "numpy":
        return None
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if kind == "cuda":
        if not torch.cuda.is_available():
            return "no CUDA device visible to torch"
        ok, why = dsv4kv.cuda_available()
        if not ok:
            return f"dsv4kv CUDA backend unavailable: {why}"
    return None


def run_child(kind, tmp_path):
    # cwd outside the source tree, so the child imports the installed package, as the parent does.
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", CHILD, kind,
                           os.path.dirname(os.path.abspath(__file__))],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)


def describe(r):
    if r.returncode < 0:
        status = f"killed by {signal.Signals(-r.returncode).name}"
    else:
        status = f"exit status {r.returncode}"
    return f"child {status}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-4000:]}"


@pytest.mark.parametrize("kind", ["numpy", "torch-cpu", "cuda"])
def test_contract_errors_come_back_with_the_library_message(kind, tmp_path):
    reason = _skip_reason(kind)
    if reason is not None:
        if kind == "cuda" and os.environ.get("DSV4KV_REQUIRE_CUDA") == "1":
            pytest.fail(f"DSV4KV_REQUIRE_CUDA=1 but: {reason}")
        pytest.skip(reason)
    r = run_child(kind, tmp_path)
    assert r.returncode == 0, describe(r)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for want, have in zip(EXPECTED, got):
        assert have == want, f"{kind}: {have} != {want}"
    assert len(got) == len(EXPECTED)
