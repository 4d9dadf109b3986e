"""One inspector: the C++ `dsv4kv inspect` program and `python -m dsv4kv inspect` print the same
stdout, the same stderr and the same exit status, for golden files, crafted caches, malformed
files, non-files and command-line errors; and both return the one table of exit statuses
(InspectStatus of harness/inspect.hpp, shown in spec/failure_model.md#failure_model_inspect_status):
STATUS_TABLE gives each case its status, and test_exit_status_table runs it against each front end.

The C++ program is found through the environment variable DSV4KV_CLI (scripts/test.sh sets it to
build/tools/dsv4kv); without it the tests that need it are skipped, saying so, and the table runs
against `python -m dsv4kv inspect` alone."""

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dsv4kv
from dsv4kv.inspect import InspectStatus

L = dsv4kv.layout
B = 64
CLI = os.environ.get("DSV4KV_CLI", "")
ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "conformance" / "golden"
HAVE_CLI = bool(CLI and os.access(CLI, os.X_OK))
NO_CLI = ("DSV4KV_CLI does not name the C++ dsv4kv program (build it with -DDSV4KV_BUILD_TOOLS=ON and set "
          "DSV4KV_CLI=build/tools/dsv4kv)")
needs_cli = pytest.mark.skipif(not HAVE_CLI, reason=NO_CLI)

#: The table, by number: what scripts and shells rely on (InspectStatus must keep these values).
OK, FAILED, USAGE = 0, 1, 2


#: Python buffers stdout unless told otherwise (python -u): the default is what users run.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def run(cmd, cwd, stdout="pipe"):
    """(status, stdout, stderr) of `cmd`; stdout "pipe" (captured), "full" (/dev/full: every write
    fails) or "closed" (a pipe whose reader has gone: every write fails with EPIPE)."""
    kw = dict(stderr=subprocess.PIPE, timeout=120, cwd=cwd, env=ENV)
    if stdout == "pipe":
        r = subprocess.run(cmd, stdout=subprocess.PIPE, **kw)
        return r.returncode, r.stdout, r.stderr
    if stdout == "full":
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        with open("/dev/full", "wb") as sink:
            r = subprocess.run(cmd, stdout=sink, **kw)
        return r.returncode, b"", r.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run(cmd, stdout=write_end, **kw)
    finally:
        os.close(write_end)
    return r.returncode, b"", r.stderr


#: The front ends, each a command that takes the arguments after `inspect`: the C++ program and
#: the Python module, with its stdout buffered (the default) and unbuffered.
FRONT_ENDS = {
    "dsv4kv": lambda: [CLI, "inspect"],
    "python -m dsv4kv": lambda: [sys.executable, "-m", "dsv4kv", "inspect"],
    "python -u -m dsv4kv": lambda: [sys.executable, "-u", "-m", "dsv4kv", "inspect"],
}


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


def good_cache():
    """A cache whose every token quantize wrote: no byte breaks the layout's rules."""
    import ml_dtypes

    k = (np.random.default_rng(7).standard_normal((2 * B, L.kHeadDim)) * 4).astype(ml_dtypes.bfloat16)
    cache = np.zeros((2, L.vllm_block_stride(B)), np.uint8)
    dsv4kv.quantize_and_insert_k_cache(k, cache, np.arange(2 * B, dtype=np.int64), B)
    return cache


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


def v41_cache(record, width, head_dim, blocks):
    """A rank-3 [blocks, B, width] cache of a V4.1 record with tokens written at a few slots."""
    import ml_dtypes

    k = (np.random.default_rng(9).standard_normal((4, head_dim)) * 3).astype(ml_dtypes.bfloat16)
    cache = np.zeros((blocks, B, width), np.uint8)
    dsv4kv.quantize_and_insert_k_cache(k, cache, np.array([0, 5, B + 1, B + 7], np.int64), B, record=record)
    return cache


def crafted_v41():
    """{file name: cache} of the V4.1 records with bytes that break their rules (spec/records.md)."""
    mx8 = v41_cache("mxfp8_ds_mla", 528, 512, 3)
    mx8[0].reshape(-1)[B * 512 + 5 * 16 + 2] = 255  # token 5: an infinite scale
    mx8[1].reshape(-1)[1 * 512 + 9] = 0x7F  # token 1 of block 1: a NaN code
    nv4 = v41_cache("nvfp4_ds_mla", 288, 512, 2)
    scales = nv4[1].reshape(-1)[B * 256:]
    scales[7 * 32 + 0], scales[7 * 32 + 1] = 0xFF, 0xC0  # token 7: a NaN and a negative scale
    idx = v41_cache("mxfp4_indexer", 68, 128, 2)
    idx[0].reshape(-1)[B * 64 + 5 * 4 + 3] = 255  # token 5: E8M0's NaN
    return {"mx8.npy": mx8, "nv4.npy": nv4, "idx.npy": idx}


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
        "good.npy": npy_bytes(good_cache()),
        "odd_w.npy": npy_bytes(np.zeros((2, 4, 1000), np.uint8)),
    }
    v41 = crafted_v41()
    out.update({name: npy_bytes(cache) for name, cache in v41.items()})
    out["nv4.safetensors"] = st_bytes({"layer0.k_cache": v41["nv4.npy"]})
    out["nv4_flat.npy"] = npy_bytes(v41["nv4.npy"].reshape(2, -1))
    out["cut_mx8.npy"] = npy_bytes(v41["mx8.npy"])[:-100]
    for name, blob in out.items():
        (d / name).write_bytes(blob)
    shutil.copy(d / "good.npy", os.path.join(os.fsencode(d), b"g\xffod.npy"))  # a name that is not UTF-8
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
        # the V4.1 records: from the shape's width or --format
        ["mx8.npy"], ["mx8.npy", "--block", "1", "--rope", "8"], ["mx8.npy", "--format", "mxfp8_ds_mla", "--token", "5"],
        ["nv4.npy", "--block", "1"], ["nv4.safetensors", "--token", "7", "--rope", "64"], ["idx.npy", "--record=mxfp4_indexer"],
        ["nv4_flat.npy", "--format", "nvfp4_ds_mla", "--block", "1"], ["nv4_flat.npy", "--block", "0", "--token", "0"],
        ["odd_w.npy", "--format", "mxfp4_indexer", "--block-size", "4"], ["odd_w.npy"],
        ["mx8.npy", "--format", "nvfp4_ds_mla"], ["idx.npy", "--format", "fp8_ds_mla"], ["mx8.npy", "--fnuz"],
        ["cut_mx8.npy"], ["mx8.npy", "--format", "fp4"], ["mx8.npy", "--fnuz", "--format", "mxfp8_ds_mla"],
        # file errors
        ["crafted.npy", "--block", "3"], ["crafted.npy", "--token", "64"], ["text.safetensors"], ["cut.npy"],
        ["missing.npy"], ["a_directory"], ["fifo.npy"], ["crafted.npy", "--max-file-size", "100"],
        # usage errors
        ["crafted.npy", "--block", "-1"], ["crafted.npy", "--rope", "65"], ["crafted.npy", "--frobnicate"],
        ["crafted.npy", "--block"], ["crafted.npy", "--block-size", "0"], ["crafted.npy", "other.npy"], [], ["--help"],
    ]


@needs_cli
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


@needs_cli
def test_the_cases_cover_every_exit_status(files):
    statuses = {run([CLI, "inspect", *a], files)[0] for a in cases()}
    assert statuses == {int(s) for s in InspectStatus}


# ---------------------------------------------------------------------------------------------
# The one table of exit statuses, case by case, for both front ends.
# ---------------------------------------------------------------------------------------------

#: (case, arguments after `inspect`, stdout, status, a piece of stdout (status 0) or of the one
#: stderr line (otherwise)). Arguments are bytes where a str cannot say them.
STATUS_TABLE = [
    ("a good file", ["good.npy"], "pipe", OK, b"summary: 128 tokens, 0 flagged"),
    ("a V4.1 cache, the record from its shape", ["mx8.npy"], "pipe", OK,
     b"summary: 192 tokens, 2 flagged (scale byte 255: 1, NaN codes: 1)"),
    ("a V4.1 FP4 cache breaking its rules", ["nv4.npy"], "pipe", OK,
     b"summary: 128 tokens, 125 flagged (NaN scale: 1, negative scale: 1, scale byte 0: 124)"),
    ("a rank-2 V4.1 cache named by --format", ["nv4_flat.npy", "--format", "nvfp4_ds_mla"], "pipe", OK,
     b"layout: record nvfp4_ds_mla, block_size 64,"),
    ("a file breaking the layout's rules", ["crafted.npy"], "pipe", OK, b"summary: 192 tokens, 3 flagged"),
    ("a file name that is not UTF-8", [b"g\xffod.npy"], "pipe", OK, b"cache: g\\xffod.npy"),
    ("help", ["--help"], "pipe", OK, b"spec/failure_model.md#failure_model_inspect_status"),
    ("a reader that goes away", ["good.npy"], "closed", OK, b""),
    ("a reader that goes away, a short report", ["good.npy", "--block", "0", "--token", "0"], "closed", OK, b""),
    ("a missing file", ["missing.npy"], "pipe", FAILED, b"missing.npy: cannot open: No such file or directory"),
    ("a missing file whose name is not UTF-8", [b"m\xffssing.npy"], "pipe", FAILED, b"m\\xffssing.npy: cannot open"),
    ("a directory", ["a_directory"], "pipe", FAILED, b"not a regular file (a directory)"),
    ("a FIFO", ["fifo.npy"], "pipe", FAILED, b"not a regular file (a FIFO)"),
    ("a device", ["/dev/zero"], "pipe", FAILED, b"not a regular file (a character device)"),
    ("a truncated file", ["cut.npy"], "pipe", FAILED, b"cut.npy: shape needs"),
    ("a truncated V4.1 cache", ["cut_mx8.npy"], "pipe", FAILED, b"cut_mx8.npy: shape needs"),
    ("a --format the shape's width contradicts", ["mx8.npy", "--format", "nvfp4_ds_mla"], "pipe", FAILED,
     b"--format nvfp4_ds_mla does not fit the cache: its shape [3, 64, 528] has 528 bytes per token"),
    ("--fnuz on a V4.1 record's shape", ["idx.npy", "--fnuz"], "pipe", FAILED,
     b"--fnuz applies to record fp8_ds_mla only, but the cache's record is mxfp4_indexer"),
    ("a W that is no record's width", ["odd_w.npy"], "pipe", FAILED, b"cannot infer the block size"),
    ("not a cache", ["text.safetensors"], "pipe", FAILED, b"not a safetensors file"),
    ("options the file cannot satisfy", ["crafted.npy", "--block", "3"], "pipe", FAILED, b"block 3 out of range"),
    ("over the size cap", ["good.npy", "--max-file-size", "100"], "pipe", FAILED, b"over the limit of 100 bytes"),
    ("a stdout that cannot be written", ["good.npy"], "full", FAILED,
     b"dsv4kv: cannot write to stdout: No space left on device"),
    ("a stdout that cannot be written, a short report", ["good.npy", "--block", "0", "--token", "0"], "full", FAILED,
     b"dsv4kv: cannot write to stdout: No space left on device"),
    ("an unknown flag", ["good.npy", "--frobnicate"], "pipe", USAGE, b"unknown option '--frobnicate'"),
    ("a negative value", ["good.npy", "--block", "-1"], "pipe", USAGE, b"--block must be >= 0, got -1"),
    ("a value out of its range", ["good.npy", "--rope", "65"], "pipe", USAGE, b"--rope must be <= 64, got 65"),
    ("a flag without its value", ["good.npy", "--block"], "pipe", USAGE, b"--block needs a value"),
    ("a --format that names no record", ["mx8.npy", "--format", "fp4"], "pipe", USAGE,
     b"--format must be one of fp8_ds_mla, mxfp8_ds_mla, nvfp4_ds_mla, mxfp4_indexer, got 'fp4'"),
    ("--fnuz with a V4.1 --format", ["mx8.npy", "--fnuz", "--record", "mxfp8_ds_mla"], "pipe", USAGE,
     b"--fnuz applies to record fp8_ds_mla only, not to mxfp8_ds_mla"),
    ("two files", ["good.npy", "crafted.npy"], "pipe", USAGE, b"one FILE only"),
    ("no arguments", [], "pipe", USAGE, b"missing FILE"),
]


def front_end(name):
    if name == "dsv4kv" and not HAVE_CLI:
        pytest.skip(NO_CLI)
    return FRONT_ENDS[name]()


@pytest.mark.parametrize("name", FRONT_ENDS)
@pytest.mark.parametrize("case,args,stdout,want,says", STATUS_TABLE, ids=[c[0] for c in STATUS_TABLE])
def test_exit_status_table(files, name, case, args, stdout, want, says):
    status, out, err = run([*front_end(name), *args], files, stdout)
    assert status == want, f"{name} inspect, {case}: status {status}, want {want}; stderr {err!r}"
    if want == OK:
        assert err == b"" and says in out, f"{case}: stdout {out[-300:]!r}, stderr {err!r}"
    else:
        assert out == b"" and err.count(b"\n") == 1 and err.endswith(b"\n"), f"{case}: stderr {err!r}"
        prefix = b"dsv4kv: " if stdout == "full" else b"dsv4kv inspect: "
        assert err.startswith(prefix) and says in err, f"{case}: stderr {err!r}"


@needs_cli
@pytest.mark.parametrize("case,args,stdout", [c[:3] for c in STATUS_TABLE], ids=[c[0] for c in STATUS_TABLE])
def test_the_table_prints_the_same_from_both(files, case, args, stdout):
    cpp = run([*FRONT_ENDS["dsv4kv"](), *args], files, stdout)
    for python in ("python -m dsv4kv", "python -u -m dsv4kv"):
        assert run([*FRONT_ENDS[python](), *args], files, stdout) == cpp, python


def test_the_table_has_a_case_for_every_status():
    assert {c[3] for c in STATUS_TABLE} == {int(s) for s in InspectStatus}


def spec_table():
    """{status: name} of the table in spec/failure_model.md#failure_model_inspect_status."""
    page = (ROOT / "spec" / "failure_model.md").read_text()
    start = page.index('<a id="failure_model_inspect_status"></a>')
    rows = {}
    for line in page[start:].splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|\s*`(\w+)`\s*\|", line)
        if m:
            rows[int(m.group(1))] = m.group(2)
        elif rows and not line.startswith("|"):
            break  # the end of the table
    return rows


def test_the_spec_states_the_table_of_the_code():
    # One table: the spec's rows are InspectStatus's members, with the numbers scripts rely on.
    assert spec_table() == {int(s): s.name for s in InspectStatus}
    assert {int(InspectStatus.kInspectOk), int(InspectStatus.kInspectFailed),
            int(InspectStatus.kInspectUsageError)} == {OK, FAILED, USAGE}
    assert (int(InspectStatus.kInspectOk), int(InspectStatus.kInspectFailed),
            int(InspectStatus.kInspectUsageError)) == (OK, FAILED, USAGE)


@pytest.mark.parametrize("args", [[], ["frobnicate"]], ids=["no command", "an unknown command"])
def test_a_missing_or_unknown_command_is_a_usage_error(tmp_path, args):
    status, out, err = run([sys.executable, "-m", "dsv4kv", *args], tmp_path)
    assert status == USAGE and out == b"" and err.splitlines()[-1].startswith(b"dsv4kv: ")
    if HAVE_CLI:
        assert run([CLI, *args], tmp_path)[0] == USAGE
