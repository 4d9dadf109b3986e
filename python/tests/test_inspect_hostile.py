"""`python -m dsv4kv inspect` (the C++ inspector) on hostile input: every user error ends with
exactly one stderr line "dsv4kv inspect: <reason>" and nothing on stdout, never a traceback, a
hang or a read of an endless file. The statuses are the inspector's one table (InspectStatus,
spec/failure_model.md#failure_model_inspect_status): 1 when the file cannot be used (missing, not
a regular file, malformed .npy/.safetensors, a format the inspector does not read (.npz, torch),
an unknown tensor, --block/--token/--block-size that do not fit the cache); 2 when the command
line alone is wrong (unknown option, a value that is not an integer or out of its range)."""

import io
import json
import os
import stat
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import dsv4kv
from dsv4kv import inspect as dinspect

L = dsv4kv.layout
B = 64
STRIDE = L.vllm_block_stride(B)


def cache_bytes(blocks=2):
    rng = np.random.default_rng(3)
    return rng.integers(0, 120, size=(blocks, STRIDE), dtype=np.uint8)


def npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def npy_with_header(header: str, data: bytes = b"", version=1):
    """A .npy file whose header dict is `header` verbatim (padded as the format asks)."""
    text = header.encode("latin1")
    prefix = 10 if version == 1 else 12
    pad = -(prefix + len(text) + 1) % 64
    text = text + b" " * pad + b"\n"
    size = len(text).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + size + text + data


def safetensors_bytes(header, data=b"", raw_header=None):
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


def zip_bytes(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, content in members.items():
            z.writestr(name, content)
    return buf.getvalue()


GOOD = cache_bytes()
GOOD_NPY = npy_bytes(GOOD)
HEADER_END = GOOD_NPY.index(b"\n") + 1
U8_ENTRY = {"dtype": "U8", "shape": [2, STRIDE], "data_offsets": [0, 2 * STRIDE]}

#: The V4.1 records' token widths (spec/records.md): a rank-3 [n, B, W] cache of one is read as it.
V41_WIDTHS = {"mxfp8_ds_mla": 528, "nvfp4_ds_mla": 288, "mxfp4_indexer": 68}


def v41_npy(width, blocks=2, block_size=4):
    rng = np.random.default_rng(width)
    return npy_bytes(rng.integers(0, 256, size=(blocks, block_size, width), dtype=np.uint8))


MX8_NPY = v41_npy(528)


def malformed_files():
    """(file name, bytes, extra CLI options): each one a user error."""
    c = []
    # .npy
    c += [("empty.npy", b"", []), ("garbage.npy", os.urandom(1000), []),
          ("magic_only.npy", b"\x93NUMPY", []), ("cut_in_header.npy", GOOD_NPY[:HEADER_END - 5], []),
          ("cut_in_data.npy", GOOD_NPY[:HEADER_END + 100], []),
          ("bad_version.npy", b"\x93NUMPY\x09\x00" + GOOD_NPY[8:], []),
          ("header_not_dict.npy", npy_with_header("[1, 2, 3]"), []),
          ("header_nul.npy", npy_with_header("{'descr': '|u1', 'fortran_order': False, 'shape': (2, \x00)}"), []),
          ("huge_shape.npy", npy_with_header("{'descr': '|u1', 'fortran_order': False, 'shape': (4611686018427387904, "
                                             "4611686018427387904), }"), []),
          ("shape_beyond_file.npy", npy_with_header(f"{{'descr': '|u1', 'fortran_order': False, 'shape': (9, {STRIDE}), }}",
                                                    GOOD.tobytes()), []),
          ("negative_dim.npy", npy_with_header("{'descr': '|u1', 'fortran_order': False, 'shape': (-1, 37440), }"), []),
          ("object_dtype.npy", npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", bytes(16)), []),
          ("bad_descr.npy", npy_with_header("{'descr': '<x9', 'fortran_order': False, 'shape': (2,), }"), []),
          ("fortran_yes.npy", npy_with_header("{'descr': '|u1', 'fortran_order': 'yes', 'shape': (1, 2), }", b"ab"), []),
          ("v2_huge_header.npy", b"\x93NUMPY\x02\x00" + (2**31).to_bytes(4, "little") + b"{", []),
          ("float_cache.npy", npy_bytes(np.zeros((2, STRIDE), np.float32)), []),
          ("rank1.npy", npy_bytes(np.zeros(STRIDE, np.uint8)), []),
          ("stride_unknown.npy", npy_bytes(np.zeros((2, 1000), np.uint8)), []),
          ("empty_cache.npy", npy_bytes(np.zeros((0, STRIDE), np.uint8)), ["--block", "0"]),
          ("fortran_true.npy", npy_with_header("{'descr': '|u1', 'fortran_order': True, 'shape': (1, 2), }", b"ab"), [])]
    # .npz
    c += [("garbage.npz", os.urandom(500), []), ("cut.npz", zip_bytes({"k_cache.npy": GOOD_NPY})[:300], []),
          ("no_arrays.npz", zip_bytes({"readme.txt": b"hi"}), []),
          ("two_caches.npz", zip_bytes({"a.npy": GOOD_NPY, "b.npy": GOOD_NPY}), []),
          ("bad_member.npz", zip_bytes({"k_cache.npy": b"\x93NUMPY\x01\x00\xff\xff{"}), []),
          ("member_size_lie.npz", zip_bytes({"k_cache.npy": GOOD_NPY[:HEADER_END + 10]}), []),
          ("object_member.npz", zip_bytes({"k_cache.npy": npy_with_header(
              "{'descr': '|O', 'fortran_order': False, 'shape': (2, 2), }", bytes(32))}), []),
          ("unknown_key.npz", zip_bytes({"k_cache.npy": GOOD_NPY}), ["--key", "nope"])]
    # .safetensors
    deep = b"[" * 10000 + b"]" * 10000
    c += [("empty.safetensors", b"", []), ("seven.safetensors", b"\x01" * 7, []),
          ("length_past_end.safetensors", (1000).to_bytes(8, "little") + b"{}", []),
          ("length_2_63.safetensors", (2**63).to_bytes(8, "little") + b"{}", []),
          ("not_brace.safetensors", safetensors_bytes(None, raw_header=b"[1, 2]"), []),
          ("bad_json.safetensors", safetensors_bytes(None, raw_header=b'{"a": '), []),
          ("nul_after_json.safetensors", safetensors_bytes(None, raw_header=json.dumps({"c": U8_ENTRY}).encode()
                                                           + b"\x00"), []),
          ("nul_in_name.safetensors", safetensors_bytes(None, raw_header=b'{"k\x00": 1}'), []),
          ("not_utf8.safetensors", safetensors_bytes(None, raw_header=b'{"\xff\xfe": 1}'), []),
          ("deep.safetensors", safetensors_bytes(None, raw_header=b'{"a": ' + deep + b"}"), []),
          ("entry_not_object.safetensors", safetensors_bytes({"c": [1, 2]}), []),
          ("no_dtype.safetensors", safetensors_bytes({"c": {"shape": [1], "data_offsets": [0, 1]}}, b"x"), []),
          ("dtype_int.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "dtype": 7}}, GOOD.tobytes()), []),
          ("shape_negative.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "shape": [-2, STRIDE]}}, GOOD.tobytes()), []),
          ("shape_huge.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "shape": [2**70, 2**70]}}, GOOD.tobytes()), []),
          ("shape_bool.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "shape": [True, STRIDE]}}, GOOD.tobytes()), []),
          ("shape_not_list.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "shape": "2x3"}}, GOOD.tobytes()), []),
          ("offsets_reversed.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "data_offsets": [10, 0]}}, GOOD.tobytes()), []),
          ("offsets_past_end.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "data_offsets": [0, 10**12]}}, GOOD.tobytes()), []),
          ("offsets_three.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "data_offsets": [0, 1, 2]}}, GOOD.tobytes()), []),
          ("offsets_negative.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "data_offsets": [-5, 5]}}, GOOD.tobytes()), []),
          ("size_mismatch.safetensors", safetensors_bytes({"c": {**U8_ENTRY, "shape": [3, STRIDE]}}, GOOD.tobytes()), []),
          ("truncated_data.safetensors", safetensors_bytes({"c": U8_ENTRY}, GOOD.tobytes()[:100]), []),
          ("top_level_list.safetensors", safetensors_bytes(None, raw_header=b"{}")[:8] + b"[]", []),
          ("no_uint8.safetensors", safetensors_bytes({"f": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
                                                     bytes(8)), []),
          ("unknown_dtype_named.safetensors", safetensors_bytes({"c": U8_ENTRY, "s": {"dtype": "F8_E8M0", "shape": [4],
                                                                 "data_offsets": [0, 4]}}, GOOD.tobytes()), ["--key", "s"]),
          ("unknown_key.safetensors", safetensors_bytes({"c": U8_ENTRY}, GOOD.tobytes()), ["--key", "layer9"]),
          ("bf16_cache.safetensors", safetensors_bytes({"c": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}},
                                                       bytes(8)), ["--key", "c"])]
    # V4.1 records: rank-3 caches cut short, widths and options that do not fit
    c += [("v41_mx8_cut_data.npy", MX8_NPY[:-1], []), ("v41_nv4_cut_header.npy", v41_npy(288)[:HEADER_END - 3], []),
          ("v41_idx_truncated.safetensors", safetensors_bytes({"c": {"dtype": "U8", "shape": [2, 4, 68],
                                                                     "data_offsets": [0, 544]}}, bytes(300)), []),
          ("v41_no_record_width.npy", npy_bytes(np.zeros((2, 4, 1000), np.uint8)), []),
          ("v41_zero_block_size.npy", npy_bytes(np.zeros((2, 0, 528), np.uint8)), []),
          ("v41_format_mismatch.npy", MX8_NPY, ["--format", "nvfp4_ds_mla"]),
          ("v41_format_fp8_on_v41.npy", MX8_NPY, ["--record", "fp8_ds_mla"]),
          ("v41_fnuz_from_shape.npy", MX8_NPY, ["--fnuz"]),
          ("v41_block_size_too_big.npy", MX8_NPY, ["--block-size", "5"]),
          ("v41_token_past_end.npy", MX8_NPY, ["--token", "4"]),
          ("v41_pages_ambiguous.npy", npy_bytes(np.zeros((2, 512), np.uint8)), ["--format", "mxfp4_indexer"]),
          ("v41_format_unknown.npy", MX8_NPY, ["--format", "nvfp5"]), ("v41_format_empty.npy", MX8_NPY, ["--format="]),
          ("v41_format_missing.npy", MX8_NPY, ["--record"]),
          ("v41_fnuz_with_format.npy", MX8_NPY, ["--fnuz", "--format", "nvfp4_ds_mla"])]
    # torch.save (any other extension)
    c += [("garbage.pt", os.urandom(300), []), ("empty.pt", b"", []), ("zip_not_torch.pt", zip_bytes({"x": b"y"}), [])]
    # options
    npy = [("opt_block_negative.npy", GOOD_NPY, ["--block", "-5"]), ("opt_block_past_end.npy", GOOD_NPY, ["--block", "2"]),
           ("opt_block_huge.npy", GOOD_NPY, ["--block", str(10**30)]),
           ("opt_token_negative.npy", GOOD_NPY, ["--block", "0", "--token", "-1"]),
           ("opt_token_past_end.npy", GOOD_NPY, ["--block", "0", "--token", str(B)]),
           ("opt_block_size_zero.npy", GOOD_NPY, ["--block-size", "0"]),
           ("opt_block_size_negative.npy", GOOD_NPY, ["--block", "0", "--block-size", "-3"]),
           ("opt_block_size_huge.npy", GOOD_NPY, ["--block", "0", "--block-size", str(10**30)]),
           ("opt_block_size_too_big.npy", GOOD_NPY, ["--block", "0", "--block-size", "1000"]),
           ("opt_block_not_int.npy", GOOD_NPY, ["--block", "x"]), ("opt_unknown.npy", GOOD_NPY, ["--frobnicate"]),
           ("opt_rope_too_many.npy", GOOD_NPY, ["--rope", "65"]), ("opt_value_missing.npy", GOOD_NPY, ["--block"]),
           ("opt_max_file_size_zero.npy", GOOD_NPY, ["--max-file-size", "0"])]
    return [(n, b, o, USAGE if n in USAGE_ERRORS else FILE) for n, b, o in c + npy]


FILE, USAGE = 1, 2
#: The cases whose command line alone is wrong: exit status 2; every other case is a file error (1).
USAGE_ERRORS = {"opt_block_negative.npy", "opt_block_huge.npy", "opt_token_negative.npy", "opt_block_size_zero.npy",
                "opt_block_size_negative.npy", "opt_block_size_huge.npy", "opt_block_not_int.npy", "opt_unknown.npy",
                "opt_rope_too_many.npy", "opt_value_missing.npy", "opt_max_file_size_zero.npy",
                "v41_format_unknown.npy", "v41_format_empty.npy", "v41_format_missing.npy", "v41_fnuz_with_format.npy"}


CASES = malformed_files()


def assert_one_line_error(rc, out, err, what, want=FILE):
    lines = err.splitlines()
    assert rc == want, f"{what}: exit status {rc}, want {want}, stderr {err!r}"
    assert len(lines) == 1 and lines[0].startswith("dsv4kv inspect: "), f"{what}: stderr {err!r}"
    assert "Traceback" not in err and out == "", f"{what}: stdout {out!r}"
    assert len(lines[0]) < 600, f"{what}: a message of {len(lines[0])} characters"


@pytest.mark.parametrize("name,content,options,want", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_one_line_and_exit_1_or_2(tmp_path, capsys, name, content, options, want):
    path = tmp_path / name
    path.write_bytes(content)
    rc = dinspect.main([str(path), *options])
    out, err = capsys.readouterr()
    assert_one_line_error(rc, out, err, name, want)


def test_the_good_file_of_the_corpus_is_read(tmp_path, capsys):
    # The corpus is built around a readable cache: the errors above come from the damage alone.
    path = tmp_path / "good.npy"
    path.write_bytes(GOOD_NPY)
    assert dinspect.main([str(path), "--block", "1", "--token", str(B - 1)]) == 0
    assert capsys.readouterr().out.splitlines()[-2].startswith(f"    {B - 1} ")
    assert dinspect.main([str(path), "--token", "1"]) == 0  # position 1 of every block
    assert capsys.readouterr().out.splitlines()[-1].startswith("summary: 2 tokens")
    path = tmp_path / "npy_inside.safetensors"  # files are told apart by their bytes, not their names
    path.write_bytes(GOOD_NPY)
    assert dinspect.main([str(path), "--token", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("summary: 2 tokens")
    path = tmp_path / "good.safetensors"
    path.write_bytes(safetensors_bytes({"c": U8_ENTRY}, GOOD.tobytes()))
    assert dinspect.main([str(path), "--block", "0"]) == 0


@pytest.mark.parametrize("record", sorted(V41_WIDTHS))
def test_random_bytes_of_each_v41_width_are_read(tmp_path, capsys, record):
    # Random bytes break the V4.1 records' rules too: findings in the report, status 0.
    path = tmp_path / f"{record}.npy"
    path.write_bytes(v41_npy(V41_WIDTHS[record]))
    assert dinspect.main([str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith(f"layout: record {record}, block_size 4, ") and out[-1].startswith("summary: 8 tokens, ")
    flat = tmp_path / f"{record}_flat.npy"  # the same bytes as [n, block_stride]: the record must be named
    flat.write_bytes(npy_bytes(np.load(path).reshape(2, -1)))
    assert dinspect.main([str(flat), "--format", record]) == 0
    assert capsys.readouterr().out.splitlines()[3:] == out[3:]


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo", "device", "symlink_loop"])
def test_files_that_are_not_regular(tmp_path, capsys, kind):
    path = tmp_path / f"{kind}.npy"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it for reading must not block
    elif kind == "device":
        if not os.path.exists("/dev/zero") or not stat.S_ISCHR(os.stat("/dev/zero").st_mode):
            pytest.skip("no /dev/zero character device here")
        path = "/dev/zero"  # an endless file: must be refused, not read
    elif kind == "symlink_loop":
        os.symlink(path, path)
    rc = dinspect.main([str(path)])
    out, err = capsys.readouterr()
    assert_one_line_error(rc, out, err, kind)
    if kind != "missing" and kind != "symlink_loop":
        assert "not a regular file" in err


def test_messages_name_the_broken_rule(tmp_path, capsys):
    def run(name, content, *options, want=FILE):
        path = tmp_path / name
        path.write_bytes(content)
        rc = dinspect.main([str(path), *options])
        err = capsys.readouterr().err
        assert rc == want, err
        return err.strip()

    a = tmp_path / "a.npy"
    assert run("a.npy", GOOD_NPY, "--block", "-5", want=USAGE) == "dsv4kv inspect: --block must be >= 0, got -5"
    assert run("a.npy", GOOD_NPY, "--block", "2") == f"dsv4kv inspect: {a}: block 2 out of range: the cache has 2 blocks"
    assert run("a.npy", GOOD_NPY, "--block", "0", "--token", str(B)) == (
        f"dsv4kv inspect: {a}: token {B} out of range: block_size is {B}")
    assert run("s.npy", npy_bytes(np.zeros((2, 1000), np.uint8))) == (
        f"dsv4kv inspect: {tmp_path / 's.npy'}: cannot infer the block size from a block stride of 1000 bytes "
        f"(neither block_size * {L.kTokenBytes} nor vLLM's allocation for any block size); pass --block-size")
    assert "not a safetensors file" in run("n.safetensors", b"#!/bin/sh\necho hi\n")
    deep = b'{"c": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": ' + b"[" * 9999 + b"]" * 9999 + b"}}"
    assert "nesting deeper than 64 levels" in run("d.safetensors", safetensors_bytes(None, b"\0", raw_header=deep))
    assert "data_offsets" in run("o.safetensors", safetensors_bytes(
        {"c": {**U8_ENTRY, "data_offsets": [0, 10**12]}}, GOOD.tobytes()))
    assert "no tensor named 'layer9'" in run("k.safetensors", safetensors_bytes({"c": U8_ENTRY}, GOOD.tobytes()),
                                             "--key", "layer9")
    assert "cannot tell which tensor is the cache: 2 uint8 tensors of rank 2 or 3 ('a', 'b')" in run(
        "ab.safetensors", safetensors_bytes({"a": U8_ENTRY, "b": {**U8_ENTRY, "data_offsets": [2 * STRIDE, 4 * STRIDE]}},
                                            GOOD.tobytes() * 2))
    m = tmp_path / "m.npy"
    assert run("m.npy", MX8_NPY, "--format", "nvfp4_ds_mla") == (
        f"dsv4kv inspect: {m}: --format nvfp4_ds_mla does not fit the cache: its shape [2, 4, 528] has 528 bytes per "
        f"token, the width of record mxfp8_ds_mla (nvfp4_ds_mla has 288)")
    assert run("m.npy", MX8_NPY, "--format", "v4", want=USAGE) == (
        "dsv4kv inspect: --format must be one of fp8_ds_mla, mxfp8_ds_mla, nvfp4_ds_mla, mxfp4_indexer, got 'v4'")
    assert run("p.npy", npy_bytes(np.zeros((2, 512), np.uint8)), "--format", "mxfp4_indexer") == (
        f"dsv4kv inspect: {tmp_path / 'p.npy'}: cannot infer the block size of record mxfp4_indexer from a block "
        f"stride of 512 bytes (neither block_size * 68 nor vLLM's allocation for exactly one block size); "
        f"pass --block-size")
    missing = tmp_path / "does_not_exist.npy"
    assert dinspect.main([str(missing)]) == FILE
    assert capsys.readouterr().err.strip().startswith(f"dsv4kv inspect: {missing}: cannot open")


def run_module(*args):
    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.run([sys.executable, "-m", "dsv4kv", "inspect", *args], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(here)) + "/conformance", timeout=120)


def test_python_dash_m_exit_status_and_single_line(tmp_path):
    """The same through the real entry point (`python -m dsv4kv inspect`), for a few cases."""
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(safetensors_bytes(None, raw_header=b'{"a": '))
    good = tmp_path / "good.npy"
    good.write_bytes(GOOD_NPY)
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    for args, want in (([str(tmp_path / "missing.npy")], FILE), ([str(bad)], FILE), ([str(good), "--block", "7"], FILE),
                       ([str(fifo)], FILE), ([str(good), "--block", "-1"], USAGE)):
        r = run_module(*args)
        assert_one_line_error(r.returncode, r.stdout, r.stderr, args, want)


def test_a_large_cache_is_streamed_in_bounded_memory(tmp_path):
    """A 400 MB (sparse) cache, every token decoded: the file is mapped and its decoded pages
    dropped, never read into memory whole, so the process stays far below the file's size."""
    blocks = 400 * 2**20 // STRIDE
    header = json.dumps({"kv": {"dtype": "U8", "shape": [blocks, STRIDE], "data_offsets": [0, blocks * STRIDE]}}).encode()
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + blocks * STRIDE)
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.Popen([sys.executable, "-m", "dsv4kv", "inspect", str(path), "--rope", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=os.path.dirname(os.path.dirname(here)) + "/conformance")
    last, err = b"", p.stderr
    for line in p.stdout:  # read as it comes: the report is streamed, not built whole
        last = line
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = 0  # reaped above
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, err.read()
    assert last.startswith(f"summary: {blocks * B} tokens, 0 flagged".encode())
    # Baseline: the peak RSS of importing dsv4kv alone (with torch installed it registers the
    # torch operators, and importing torch costs ~540 MB); the inspector may add 200 MB, half the file.
    base = subprocess.run([sys.executable, "-c", "import resource, dsv4kv; "
                           "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                          capture_output=True, text=True, check=True).stdout
    budget = int(base) + 200 * 1024
    assert usage.ru_maxrss < budget, (f"peak RSS {usage.ru_maxrss} KB (import dsv4kv alone: {int(base)} KB) for a "
                                      f"{blocks * STRIDE >> 20} MB cache")
