"""dsv4kv.inspect and `python -m dsv4kv inspect` (the C++ inspector through the extension):
decoding agrees with the dequantize operation, flags catch bytes that break the spec, the loader
reads .npy and safetensors files and refuses the formats it does not read."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import dsv4kv
from dsv4kv import inspect as dinspect

L = dsv4kv.layout
B = 64


def written_cache(seed=0, blocks=2):
    rng = np.random.default_rng(seed)
    k = (rng.standard_normal((5, L.kHeadDim)) * np.array([10.0 ** rng.integers(-3, 4) for _ in range(5)])[:, None])
    k = k.astype(ml_dtypes.bfloat16)
    cache = np.zeros((blocks, L.vllm_block_stride(B)), np.uint8)
    slots = np.array([0, 1, 7, B + 3, B + 63], np.int64)
    dsv4kv.quantize_and_insert_k_cache(k, cache, slots, B)
    return k, cache, slots


def gathered(cache, slot):
    out = np.zeros((1, 1, L.kHeadDim), ml_dtypes.bfloat16)
    blk, pos = divmod(int(slot), B)
    dsv4kv.dequantize_and_gather_k_cache(out, cache, np.array([pos + 1], np.int32), np.array([1], np.int32),
                                         np.array([[blk]], np.int32), B, 0)
    return out[0, 0].astype(np.float32)


def test_decoding_equals_the_dequantize_operation():
    k, cache, slots = written_cache()
    for slot in slots:
        blk, pos = divmod(int(slot), B)
        rec = dinspect.decode_token(cache, blk, pos)
        np.testing.assert_array_equal(rec.values.view(np.uint32), gathered(cache, slot).view(np.uint32))
        assert rec.flags == [] and rec.pad == 0
        assert len(rec.scale_bytes) == L.kNumTiles
        np.testing.assert_array_equal(rec.rope, k[list(slots).index(slot), L.kNopeDim:].astype(np.float32))


def test_block_size_is_inferred_from_vllm_stride():
    _, cache, _ = written_cache()
    assert dinspect.infer_block_size(cache) == B
    assert dinspect.infer_block_size(np.zeros((1, L.vllm_block_stride(128)), np.uint8)) == 128
    assert dinspect.infer_block_size(np.zeros((1, 16, L.kTokenBytes), np.uint8)) == 16
    with pytest.raises(ValueError, match="cannot infer the block size"):
        dinspect.infer_block_size(np.zeros((1, 1000), np.uint8))


def test_flags_for_bytes_that_break_the_spec():
    _, cache, _ = written_cache()
    cache[0, L.scale_offset(B, 1, L.kScalePadIndex)] = 9  # pad byte
    cache[0, L.scale_offset(B, 7, 2)] = 255  # infinite scale
    cache[0, L.token_data_offset(0) + 5] = 0x7F  # OCP NaN codes
    cache[0, L.token_data_offset(0) + 6] = 0xFF
    cache[0, L.scale_offset(B, 7, 5)] = 255
    recs = {r.pos: r for r in dinspect.inspect_block(cache, 0)}
    assert recs[1].flags == ["pad=0x09"]
    assert recs[7].flags == ["scale255@2,5"] and recs[7].exponents[2] is None
    assert recs[0].flags == ["nan-codes=2"] and recs[0].nan_codes == 2
    table = dinspect.format_block([recs[0], recs[1], recs[7]]).splitlines()
    assert table[0].startswith("columns: ") and len(table) == 4
    assert table[2].endswith("  pad=0x09") and "  scale255@2,5" in table[3] and "  nan-codes=2" in table[1]
    # e4m3fnuz: 0x80 is the only NaN code
    assert dinspect.decode_token(cache, 0, 0, use_fnuz=True).nan_codes == int((cache[0, :L.kNopeDim] == 0x80).sum())


def test_exponents_are_scale_byte_minus_bias():
    _, cache, _ = written_cache()
    rec = dinspect.decode_token(cache, 0, 0)
    assert rec.exponents == [b - L.kScaleBias for b in rec.scale_bytes]
    assert "tile" in dinspect.format_token(rec)


def save_all_formats(tmp_path, cache):
    paths = {}
    paths["npy"] = tmp_path / "cache.npy"
    np.save(paths["npy"], cache)
    try:
        from safetensors.numpy import save_file

        paths["safetensors"] = tmp_path / "cache.safetensors"
        save_file({"layer0.k_cache": cache, "positions": np.arange(4, dtype=np.int32)}, str(paths["safetensors"]))
    except ImportError:
        pass
    return paths


def test_loaders(tmp_path):
    _, cache, _ = written_cache()
    for fmt, path in save_all_formats(tmp_path, cache).items():
        got = dinspect.load_cache(str(path))
        np.testing.assert_array_equal(got, cache, err_msg=fmt)
        assert not got.flags.writeable, fmt  # a read-only view of the mapped file


def test_formats_the_inspector_does_not_read_are_refused(tmp_path):
    # .npz and torch.save files: load them with NumPy/torch and pass the array instead.
    _, cache, _ = written_cache()
    npz = tmp_path / "cache.npz"
    np.savez(npz, k_cache=cache)
    with pytest.raises(dinspect.CacheFileError, match="not a safetensors file"):
        dinspect.load_cache(npz)
    with np.load(npz) as z:
        assert dinspect.inspect_block(z["k_cache"], 0)[7].flags == []


def test_ambiguous_safetensors_lists_the_candidates(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    _, cache, _ = written_cache()
    path = tmp_path / "two.safetensors"
    save_file({"layer0.k_cache": cache, "layer1.k_cache": cache}, str(path))
    with pytest.raises(dinspect.CacheFileError, match=r"cannot tell which tensor is the cache: 2 uint8 tensors "
                                                      r"of rank 2 or 3 \('layer0.k_cache', 'layer1.k_cache'\)"):
        dinspect.load_cache(path)
    np.testing.assert_array_equal(dinspect.load_cache(path, key="layer1.k_cache"), cache)


def test_safetensors_reader_matches_package(tmp_path):
    pytest.importorskip("safetensors")
    _, cache, _ = written_cache()
    path = save_all_formats(tmp_path, cache)["safetensors"]
    got = dinspect.read_safetensors(str(path))
    np.testing.assert_array_equal(got["layer0.k_cache"], cache)
    np.testing.assert_array_equal(got["positions"], np.arange(4, dtype=np.int32))
    assert got["positions"].dtype == np.int32


def write_safetensors(path, tensors, metadata=None):
    """A safetensors file written by hand (the format: u64 header length, JSON header, raw bytes),
    so bf16 and dtypes the reader does not know can be stored without torch. `tensors`: name ->
    (dtype name, shape, bytes)."""
    import json

    header, blobs, at = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header with spaces
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def test_safetensors_bf16_and_unknown_dtypes_are_readable(tmp_path):
    k, cache, _ = written_cache()
    bf16 = k[:3]  # ml_dtypes.bfloat16
    path = tmp_path / "mixed_records.safetensors"
    write_safetensors(path, {
        "keys": ("BF16", bf16.shape, bf16.tobytes()),
        "layer0.k_cache": ("U8", cache.shape, cache.tobytes()),
        "scales": ("F8_E8M0", (4,), bytes(4)),  # a dtype the reader does not know: left out
    }, metadata={"format": "pt"})
    got = dinspect.read_safetensors(str(path))
    assert got["keys"].dtype == ml_dtypes.bfloat16 and got["keys"].shape == bf16.shape
    np.testing.assert_array_equal(got["keys"].view(np.uint16), bf16.view(np.uint16))
    np.testing.assert_array_equal(got["layer0.k_cache"], cache)
    assert "scales" not in got
    np.testing.assert_array_equal(dinspect.load_cache(str(path)), cache)
    with pytest.raises(dinspect.CacheFileError, match="tensor 'scales' has dtype 'F8_E8M0', which dsv4kv cannot read"):
        dinspect.read_safetensors(str(path), ["scales"])
    r = run_cli("inspect", str(path), "--block", "1", "--token", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"cache: {path}  tensor layer0.k_cache  uint8 [2, {L.vllm_block_stride(B)}]"
    assert lines[4].startswith("     3 ") and lines[-1].startswith("summary: 1 tokens, 0 flagged")


def test_safetensors_bf16_written_by_torch(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    k, cache, _ = written_cache()
    path = tmp_path / "torch.safetensors"
    keys = torch.from_numpy(k.view(np.int16).copy()).view(torch.bfloat16)
    st.save_file({"keys": keys, "layer0.k_cache": torch.from_numpy(cache)}, str(path))
    got = dinspect.read_safetensors(str(path))
    np.testing.assert_array_equal(got["keys"].view(np.uint16), k.view(np.uint16))
    np.testing.assert_array_equal(dinspect.load_cache(str(path)), cache)


def run_cli(*args):
    # Run outside the source tree so `-m dsv4kv` finds the installed package (python/dsv4kv has no _ext).
    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.run([sys.executable, "-m", "dsv4kv", *args], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(here)) + "/conformance", timeout=120)


def test_cli_block_table_and_token(tmp_path):
    _, cache, _ = written_cache()
    cache[1, L.scale_offset(B, 3, L.kScalePadIndex)] = 1
    path = save_all_formats(tmp_path, cache)["npy"]
    r = run_cli("inspect", str(path), "--block", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith(f"layout: block_size {B}, ")  # inferred from the vLLM block stride
    assert lines[3].startswith("block 1 (cache bytes ")
    row3 = next(line for line in lines if line.startswith("     3 "))
    assert row3.endswith("  pad=0x01")
    assert row3 == dinspect.format_block(dinspect.inspect_block(cache, 1, tokens=[3])).splitlines()[1]
    assert lines[-1] == f"summary: {B} tokens, 1 flagged (non-zero pad byte: 1, scale byte 255: 0, NaN codes: 0)"
    r = run_cli("inspect", str(path), "--block", "1", "--token", "63")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-2].startswith("    63 ")


def test_cli_every_saved_format(tmp_path):
    _, cache, _ = written_cache()
    for fmt, path in save_all_formats(tmp_path, cache).items():
        r = run_cli("inspect", str(path), "--block", "0", "--token", "7")
        assert r.returncode == 0, (fmt, r.stderr)
        assert r.stdout.splitlines()[-2].startswith("     7 ")
    npz = tmp_path / "cache.npz"
    np.savez(npz, k_cache=cache)
    r = run_cli("inspect", str(npz))
    assert r.returncode == 1 and r.stdout == "" and r.stderr.startswith(f"dsv4kv inspect: {npz}: not a safetensors file")


def test_cli_usage():
    # No command: a usage error (2), the usage on stderr as for any usage error; --help: stdout, 0.
    r = run_cli()
    assert r.returncode == 2 and r.stdout == "" and "inspect FILE" in r.stderr
    assert r.stderr.splitlines()[-1] == "dsv4kv: a command is required (inspect)"
    r = run_cli("--help")
    assert r.returncode == 0 and r.stderr == "" and "inspect FILE" in r.stdout


@pytest.mark.parametrize("use_fnuz", [False, True])
def test_summary_counts_the_tokens_inspect_block_flags(use_fnuz):
    # Random bytes: pads, 255 scales and NaN codes in some tokens, not in others.
    rng = np.random.default_rng(11)
    cache = rng.integers(0, 256, (3, L.vllm_block_stride(B)), dtype=np.uint8)
    cache[:, :] = np.where(rng.random(cache.shape) < 0.995, cache % 120, cache)
    for p in range(0, B, 3):  # a third of the tokens keep a clean pad byte and no NaN code
        cache[:, L.scale_offset(B, p, L.kScalePadIndex)] = 0
    lines = dinspect.summarize_cache(cache, use_fnuz=use_fnuz).splitlines()
    assert len(lines) == 4
    for blk in range(3):
        recs = dinspect.inspect_block(cache, blk, use_fnuz=use_fnuz)
        flagged = sum(1 for r in recs if r.flags)
        scales = [s for r in recs for s in r.scale_bytes]
        assert lines[1 + blk] == (f"block {blk:>5}: scale bytes {min(scales):>3}..{max(scales):>3}, "
                                  f"{flagged} of {B} tokens flagged")
        assert 0 < flagged < B


# ---------------------------------------------------------------------------------------------
# The V4.1 records (spec/records.md): the record comes from a [n, B, W] shape's W or record=.
# ---------------------------------------------------------------------------------------------

#: record -> (token bytes, head_dim, scale bytes per token), as spec/records.md's table states them.
V41 = {"mxfp8_ds_mla": (528, 512, 16), "nvfp4_ds_mla": (288, 512, 32), "mxfp4_indexer": (68, 128, 4)}


def v41_cache(record, seed=0, blocks=2):
    width, head_dim, _ = V41[record]
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((5, head_dim)) * np.array([10.0 ** rng.integers(-3, 4) for _ in range(5)])[:, None]
    k = k.astype(ml_dtypes.bfloat16)
    cache = np.zeros((blocks, B, width), np.uint8)
    slots = np.array([0, 1, 7, B + 3, B + 63], np.int64)
    dsv4kv.quantize_and_insert_k_cache(k, cache, slots, B, record=record)
    return k, cache, slots


def v41_gathered(cache, slot, record):
    out = np.zeros((1, 1, V41[record][1]), ml_dtypes.bfloat16)
    blk, pos = divmod(int(slot), B)
    dsv4kv.dequantize_and_gather_k_cache(out, cache, np.array([pos + 1], np.int32), np.array([1], np.int32),
                                         np.array([[blk]], np.int32), B, 0, record=record)
    return out[0, 0].astype(np.float32)


@pytest.mark.parametrize("record", sorted(V41))
def test_v41_decoding_equals_the_gather(record):
    _, cache, slots = v41_cache(record)
    assert dinspect.record_of_shape(cache) == record
    assert dinspect.infer_block_size(cache) == B
    for slot in slots:
        blk, pos = divmod(int(slot), B)
        rec = dinspect.decode_token(cache, blk, pos)  # the record from the shape's width
        assert rec.record == record and rec.flags == [] and rec.pad == 0
        assert len(rec.scale_bytes) == V41[record][2] and rec.rope.size == 0
        np.testing.assert_array_equal(rec.values.view(np.uint32), v41_gathered(cache, slot, record).view(np.uint32))
    # The same bytes as a rank-2 cache: the record must be named.
    flat = cache.reshape(cache.shape[0], -1)
    assert dinspect.record_of_shape(flat) is None
    named = dinspect.decode_token(flat, 1, 3, record=record)
    np.testing.assert_array_equal(named.values, dinspect.decode_token(cache, 1, 3).values)
    assert dinspect.infer_block_size(flat, record) == B


def test_scale_flag_states_each_records_rule():
    # The flags of every scale byte, as spec/records.md states them, against the C++ rule.
    for b in range(256):
        ue8m0 = "scale255" if b == 255 else None
        assert dinspect.scale_flag("fp8_ds_mla", b) == ue8m0
        assert dinspect.scale_flag("mxfp8_ds_mla", b) == ue8m0
        fp4 = "scale-nan" if b in (0x7F, 0xFF) else "scale-neg" if b & 0x80 else "scale0" if b == 0 else None
        assert dinspect.scale_flag("nvfp4_ds_mla", b) == fp4, b
        assert dinspect.scale_flag("mxfp4_indexer", b) == ("scale-nan" if b == 255 else "scale0" if b == 0 else None)
    with pytest.raises(ValueError, match="record must be one of"):
        dinspect.scale_flag("fp4", 1)


def test_v41_flags_for_bytes_that_break_the_record():
    _, cache, _ = v41_cache("mxfp8_ds_mla")
    data = cache[0].reshape(-1)  # block 0, as its bytes
    data[B * 512 + 7 * 16 + 3] = 255  # token 7: scale byte 255 of group 3
    data[0 * 512 + 5] = 0x7F  # token 0: NaN codes
    data[0 * 512 + 6] = 0xFF
    recs = {r.pos: r for r in dinspect.inspect_block(cache, 0)}
    assert recs[7].flags == ["scale255@3"] and recs[7].exponents[3] is None
    assert recs[0].flags == ["nan-codes=2"] and recs[0].nan_codes == 2
    assert recs[1].flags == [] and recs[2].flags == []  # position 2 holds zero bytes: scale byte 0 is legal here
    table = dinspect.format_block([recs[0], recs[7]]).splitlines()
    assert table[0].startswith("columns: scale exponents of groups 0..15 ")
    assert "  nan-codes=2  (decoded: 2 NaN, 0 inf)" in table[1] and "  scale255@3" in table[2]

    _, cache, _ = v41_cache("nvfp4_ds_mla")
    data = cache[1].reshape(-1)
    scales = B * 256 + 3 * 32  # token 3 of block 1
    data[scales + 0], data[scales + 5], data[scales + 9] = 0x7F, 0xB0, 0x00
    rec = dinspect.decode_token(cache, 1, 3)
    assert rec.flags == ["scale-nan@0", "scale-neg@5", "scale0@9"]
    assert np.isnan(rec.values[:16]).all() and not np.isnan(rec.values[16:]).any()
    with pytest.raises(ValueError, match="e4m3 scales"):
        rec.exponents
    assert "scale-nan" in dinspect.format_token(rec)
    assert dinspect.format_block([rec]).splitlines()[0].startswith("columns: e4m3fn scale bytes of groups 0..31 (hex)")

    _, cache, _ = v41_cache("mxfp4_indexer")
    rec = dinspect.decode_token(cache, 0, 2)  # never written: its scale bytes are 0
    assert rec.flags == ["scale0@0,1,2,3"] and rec.exponents == [-127] * 4
    cache[0].reshape(-1)[B * 64 + 2 * 4 + 1] = 255  # a block's data records, then its scale records
    rec = dinspect.decode_token(cache, 0, 2)
    assert rec.flags == ["scale-nan@1", "scale0@0,2,3"] and int(np.isnan(rec.values).sum()) == 32
    assert rec.exponents[1] is None


def test_record_option_that_does_not_fit_the_shape():
    _, cache, _ = v41_cache("mxfp8_ds_mla")
    with pytest.raises(dinspect.CacheFileError, match=r"--format nvfp4_ds_mla does not fit the cache: its shape "
                                                      r"\[2, 64, 528\] has 528 bytes per token, the width of record "
                                                      r"mxfp8_ds_mla \(nvfp4_ds_mla has 288\)"):
        dinspect.inspect_block(cache, 0, record="nvfp4_ds_mla")
    with pytest.raises(dinspect.CacheFileError, match="--fnuz applies to record fp8_ds_mla only"):
        dinspect.inspect_block(cache, 0, use_fnuz=True)
    with pytest.raises(ValueError, match="record must be one of fp8_ds_mla, mxfp8_ds_mla"):
        dinspect.inspect_block(cache, 0, record="mxfp8")
    # A W that is no record's width: fp8_ds_mla (as before), or the record named, from the stride.
    odd = np.zeros((2, 4, 1000), np.uint8)
    assert dinspect.record_of_shape(odd) is None
    with pytest.raises(ValueError, match="block_size \\* 584"):
        dinspect.infer_block_size(odd)
    with pytest.raises(ValueError, match="block_size \\* 68"):
        dinspect.infer_block_size(odd, "mxfp4_indexer")
    assert [r.flags for r in dinspect.inspect_block(odd, 1, block_size=4, record="mxfp4_indexer")] == [
        ["scale0@0,1,2,3"]] * 4
    lines = dinspect.summarize_cache(cache).splitlines()
    assert lines[0] == f"2 blocks, block size {B}, block stride {B * 528} bytes"
    assert lines[1].endswith(f"0 of {B} tokens flagged")


@pytest.mark.parametrize("record", sorted(V41))
def test_cli_v41_record_from_the_shape(tmp_path, record):
    _, cache, _ = v41_cache(record)
    path = tmp_path / f"{record}.npy"
    np.save(path, cache)
    r = run_cli("inspect", str(path), "--block", "1", "--token", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith(f"layout: record {record}, block_size {B}, block_stride {B * V41[record][0]} bytes")
    row = lines[4]
    assert row == dinspect.format_block(dinspect.inspect_block(cache, 1, tokens=[3])).splitlines()[1]
    assert lines[-1].startswith("summary: 1 tokens, 0 flagged (")
    r = run_cli("inspect", str(path), "--format", "fp8_ds_mla")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"dsv4kv inspect: {path}: --format fp8_ds_mla does not fit the cache: its shape "
                        f"[2, {B}, {V41[record][0]}] has {V41[record][0]} bytes per token, the width of record "
                        f"{record} (fp8_ds_mla has 584)\n")
