"""One inspector: the C++ `dsv4kv inspect` program and `python -m dsv4kv inspect` print the same
stdout, the same stderr and the same exit status, for golden files, crafted caches, malformed
files, non-files and command-line errors.

The C++ program is found through the environment variable DSV4KV_CLI (scripts/test.sh sets it to
build/tools/dsv4kv); without it these tests are skipped, saying so."""

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dsv4kv

L = dsv4kv.layout
B = 64
CLI = os.environ.get("DSV4KV_CLI", "")
GOLDEN = Path(__file__).resolve().parents[2] / "conformance" / "golden"

pytestmark = pytest.mark.skipif(
    not (CLI and os.access(CLI, os.X_OK)),
    reason="DSV4KV_CLI does not name the C++ dsv4kv program (build it with -DDSV4KV_BUILD_TOOLS=ON and set "
           "DSV4KV_CLI=build/tools/dsv4kv)")


def run(cmd, cwd):
    r = subprocess.run(cmd, capture_output=True, timeout=120, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def st_bytes(tensors):
    """safetensors image of {name: uint8 array}, written by hand (no safetensors package needed)."""
    import json

    header, blobs, at = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": "U8", "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def crafted_cache():
    """A written cache with a non-zero pad byte, two infinite scales and NaN codes."""
    rng = np.random.default_rng(5)
    import ml_dtypes

    k = (rng.standard_normal((4, L.kHeadDim)) * 30).astype(ml_dtypes.bfloat16)
    cache = np.zeros((3, L.vllm_block_stride(B)), np.uint8)
    dsv4kv.quantize_and_insert_k_cache(k, cache, np.array([0, 5, B + 1, 2 * B + 63], np.int64), B)
    cache[0, L.scale_offset(B, 5, L.kScalePadIndex)] = 0x33
    cache[1, L.scale_offset(B, 1, 0)] = 255
    cache[1, L.scale_offset(B, 1, 6)] = 255
    cache[2, L.token_data_offset(63) + 3] = 0x7F
    cache[2, L.token_data_offset(63) + 4] = 0x80  # NaN only in e4m3fnuz
    return cache


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("parity")
    cache = crafted_cache()
    out = {
        "crafted.npy": npy_bytes(cache),
        "rank3.npy": npy_bytes(cache[:, :L.block_data_bytes(B)].reshape(3, B, L.kTokenBytes)),
        "odd_stride.npy": npy_bytes(np.zeros((2, L.block_data_bytes(B) + 2), np.uint8)),
        "two.safetensors": st_bytes({"layer0.k_cache": cache, "layer1.k_cache": cache[:2]}),
        "one.safetensors": st_bytes({"kv": cache}),
        "text.safetensors": b"not a tensor file\n",
        "cut.npy": npy_bytes(cache)[:300],
    }
    for name, blob in out.items():
        (d / name).write_bytes(blob)
    (d / "a_directory").mkdir()
    os.mkfifo(d / "fifo.npy")
    return d


def cases():
    q = str(GOLDEN / "quantize.safetensors")
    dq = str(GOLDEN / "dequantize.safetensors")
    return [
        # golden files: ambiguous, named, a stride that implies no block size, --block-size given
        [q], [q, "--tensor", "case000.k_cache_after"], [q, "--key", "case001.k_cache_after", "--block", "0", "--rope", "64"],
        [dq, "--tensor", "case004.k_cache"], [dq, "--tensor", "case004.k_cache", "--block-size", "64", "--token", "2"],
        [dq, "--tensor", "nope"],
        # crafted caches
        ["crafted.npy"], ["crafted.npy", "--fnuz", "--block", "2"], ["crafted.npy", "--token", "1", "--rope", "0"],
        ["crafted.npy", "--block", "1", "--token=1"], ["rank3.npy", "--block", "1"], ["odd_stride.npy"],
        ["odd_stride.npy", "--block-size", "64"], ["crafted.npy", "--block-size", "65"],
        ["two.safetensors"], ["two.safetensors", "--tensor", "layer1.k_cache", "--block", "1"],
        ["one.safetensors", "--block", "0", "--token", "5"],
        # file errors
        ["crafted.npy", "--block", "3"], ["crafted.npy", "--token", "64"], ["text.safetensors"], ["cut.npy"],
        ["missing.npy"], ["a_directory"], ["fifo.npy"], ["crafted.npy", "--max-file-size", "100"],
        # usage errors
        ["crafted.npy", "--block", "-1"], ["crafted.npy", "--rope", "65"], ["crafted.npy", "--frobnicate"],
        ["crafted.npy", "--block"], ["crafted.npy", "--block-size", "0"], ["crafted.npy", "other.npy"], [], ["--help"],
    ]


@pytest.mark.parametrize("args", cases(), ids=lambda a: " ".join(Path(x).name for x in a) or "(none)")
def test_cpp_and_python_print_the_same(files, args):
    cpp = run([CLI, "inspect", *args], files)
    py = run([sys.executable, "-m", "dsv4kv", "inspect", *args], files)
    assert py == cpp
    status, out, err = cpp
    # Every case says something: a report with its summary, the help, or one error line.
    if status == 0:
        assert err == b"" and (out.rstrip().split(b"\n")[-1].startswith(b"summary: ") or out.startswith(b"usage: "))
    else:
        assert out == b"" and err.count(b"\n") == 1 and err.startswith(b"dsv4kv inspect: ")


def test_the_cases_cover_every_exit_status(files):
    statuses = {run([CLI, "inspect", *a], files)[0] for a in cases()}
    assert statuses == {0, 1, 2}
