"""Every golden case (conformance/golden, Triton on an H200) through the Python API on the CPU:
NumPy arrays always, torch CPU tensors when torch is installed. Outputs must match byte for byte.
Files with a layout of their own go through their operation's runner (op_cases GOLDEN); files of
the field layout (metadata `layout` = `fields`, conformance/golden/README.md) through one runner
written against the operation's signature."""

import copy

import numpy as np
import pytest

import dsv4kv
from dsv4kv import _opspec
from _support import (RUNNERS, all_cases, bits, check_against_golden, expected_quantize_count, frameworks_available,
                      golden_dir, have_golden, init_pattern, load_cases, make_xp)
from op_cases import BY_NAME, OPS

CASES = all_cases()
pytestmark = pytest.mark.skipif(not have_golden(), reason="golden files not found (set DSV4KV_GOLDEN_DIR)")


def test_golden_set_is_complete():
    assert len(CASES) >= 59  # 60 cases, one of them the dequantize table (checked separately)


@pytest.mark.parametrize("framework", ["numpy", "torch-cpu"])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_golden_case(framework, case):
    if framework not in frameworks_available():
        pytest.skip("torch is not installed")
    result = RUNNERS[case.file](make_xp(framework), case)
    check_against_golden(result, case)
    if case.file.startswith("quantize"):
        assert result["error_count"] == expected_quantize_count(case)
    if case.file == "dequantize.safetensors":
        assert result["error_count"] == 0  # the golden inputs respect every precondition


def test_error_counts_agree_between_numpy_and_torch():
    if "torch-cpu" not in frameworks_available():
        pytest.skip("torch is not installed")
    for case in CASES:
        a = RUNNERS[case.file](make_xp("numpy"), case)["error_count"]
        b = RUNNERS[case.file](make_xp("torch-cpu"), case)["error_count"]
        assert a == b, case


def test_nonfinite_quantize_counts_errors():
    case = load_cases("quantize_nonfinite.safetensors")[0]
    assert expected_quantize_count(case) > 0
    assert RUNNERS[case.file](make_xp("numpy"), case)["error_count"] == expected_quantize_count(case)


def test_dequantize_table_matches_spec_helper():
    table = load_cases("dequantize_table.safetensors")[0].get("table")
    mine = np.frombuffer(dsv4kv._ext.dequantize_table(False), dtype=np.uint16).reshape(256, 256)
    np.testing.assert_array_equal(mine, bits(table))


def test_dequantize_table_through_the_operation():
    """Every (scale byte, code) pair of the exhaustive table, written into a cache and gathered."""
    L = dsv4kv.layout
    table = bits(load_cases("dequantize_table.safetensors")[0].get("table"))
    B = 64
    tiles_needed = 256 * (256 // L.kTileSize)  # each scale byte needs 256/64 tiles to cover all codes
    tokens = -(-tiles_needed // L.kNumTiles)
    blocks = -(-tokens // B)
    stride = L.vllm_block_stride(B)
    cache = np.zeros((blocks, stride), np.uint8)
    expect = np.zeros((tokens, L.kNopeDim), np.uint16)
    for tile_id in range(tiles_needed):
        s, part = divmod(tile_id, 256 // L.kTileSize)
        tok, j = divmod(tile_id, L.kNumTiles)
        blk, pos = divmod(tok, B)
        codes = np.arange(part * L.kTileSize, (part + 1) * L.kTileSize, dtype=np.uint8)
        at = L.token_data_offset(pos) + j * L.kTileSize
        cache[blk, at:at + L.kTileSize] = codes
        cache[blk, L.scale_offset(B, pos, j)] = s
        expect[tok, j * L.kTileSize:(j + 1) * L.kTileSize] = table[s, codes]
    out = np.zeros((1, blocks * B, L.kHeadDim), dsv4kv_bf16())
    dsv4kv.dequantize_and_gather_k_cache(out, cache, np.array([blocks * B], np.int32), None,
                                         np.arange(blocks, dtype=np.int32)[None, :], B, 0)
    np.testing.assert_array_equal(out.view(np.uint16)[0, :tokens, :L.kNopeDim], expect)


def dsv4kv_bf16():
    import ml_dtypes

    return ml_dtypes.bfloat16


def _unread_visibility(n: int) -> np.ndarray:
    """Arbitrary visibility values, negatives included (they would be counted if read)."""
    return ((np.arange(n, dtype=np.int64) * 37) % 23 - 5).astype(np.int32)


#: golden file -> (visibility array prefix, rows of case c), for the operations with image visibility.
VISIBILITY = {f: m.VISIBILITY for m in OPS if hasattr(m, "VISIBILITY") for f in m.GOLDEN}


@pytest.mark.parametrize("case", [c for c in CASES if c.file in VISIBILITY
                                  and c.p["has_image"] == 0 and c.p["max_image_tokens"] == 0], ids=repr)
def test_visibility_passed_with_zero_max_image_tokens_is_not_read(case):
    """vLLM reads the visibility arrays only when IMAGE_WIDTH = max_image_tokens > 0: passed with
    max_image_tokens == 0 they change nothing, so the golden bytes stay the expected output."""
    xp = make_xp("numpy")
    prefix, rows_of = VISIBILITY[case.file]
    c = copy.copy(case)
    c.t, c.p = dict(case.t), dict(case.p)
    rows = rows_of(c)
    c.t[prefix + "left_visible"], c.t[prefix + "right_visible"] = _unread_visibility(rows), _unread_visibility(rows)
    c.p["has_image"] = 1  # the runner passes the arrays; max_image_tokens stays 0
    result = RUNNERS[c.file](xp, c)
    check_against_golden(result, c)
    assert result["error_count"] == 0


# ---------------------------------------------------------------------------
# The field layout: tensors and parameters named by the operation's parameters
# ---------------------------------------------------------------------------
def _field_layout_cases():
    if not have_golden():
        return []
    cases = []
    for path in sorted(golden_dir().glob("*.safetensors")):
        if path.name in RUNNERS:
            continue
        loaded = load_cases(path.name)
        if loaded and loaded[0].meta.get("layout") == "fields":
            cases.extend(loaded)
    return cases


FIELD_CASES = _field_layout_cases()


def run_field_layout(xp, c):
    """The call the case describes: input `f` as given, output `f` a view (param.f_offset,
    f_dim<i>, f_stride<i>) of a storage that starts as the init pattern (or tensor `f`) and is
    compared whole with `f_after`, scalars from param.f, the count with param.error_count."""
    m = BY_NAME[c.meta["op"]]
    params = list(m.SIGNATURE) + list(getattr(m, "KEYWORD_ONLY", []))
    # The outputs an index operation returns are passed as its out=(...) tuple, in return order.
    returned = _opspec.spec(getattr(dsv4kv, m.NAME)).returned
    kwargs, storages = {}, {}

    def output_view(name):
        after = c.t[name + "_after"]
        before = c.t[name] if name in c.t else init_pattern(after.nbytes, c.p["init_salt"]).view(after.dtype)
        buf = xp.from_np(np.ascontiguousarray(before).reshape(-1))
        rank = next(i for i in range(4) if f"{name}_dim{i}" not in c.p)
        shape = [c.p[f"{name}_dim{i}"] for i in range(rank)]
        strides = [c.p[f"{name}_stride{i}"] for i in range(rank)]
        storages[name + "_after"] = buf
        return xp.strided(buf[c.p.get(f"{name}_offset", 0):], shape, strides)

    for name, default in params:
        if name + "_after" in c.t:
            kwargs[name] = output_view(name)
        elif name in c.t:
            kwargs[name] = xp.from_np(c.t[name])
        elif name in c.p:
            kwargs[name] = bool(c.p[name]) if isinstance(default, bool) else c.p[name]
        elif name != "out":
            kwargs[name] = None
    # Keyword-only array fields the seed signature lacks (replay_start): passed when the case has them.
    for kw in _opspec.spec(getattr(dsv4kv, m.NAME)).kwparams:
        if kw.name not in kwargs and kw.name in c.t:
            kwargs[kw.name] = xp.from_np(c.t[kw.name])
    if returned and all(name + "_after" in c.t for name in returned):
        kwargs["out"] = tuple(output_view(name) for name in returned)
    for keyword in ("semantics", "record"):  # a case's profile and cache record, named in its metadata
        value = c.meta.get(f"case{c.index:03d}.{keyword}")
        if value:
            kwargs[keyword] = value
    ec = xp.from_np(np.zeros(1, np.int32))
    getattr(dsv4kv, m.NAME)(**kwargs, error_count=ec)
    xp.synchronize()
    result = {k: xp.to_np(v) for k, v in storages.items()}
    result["error_count"] = int(xp.to_np(ec)[0])
    return result


@pytest.mark.parametrize("framework", ["numpy", "torch-cpu"])
@pytest.mark.parametrize("case", FIELD_CASES, ids=repr)
def test_field_layout_case(framework, case):
    if framework not in frameworks_available():
        pytest.skip("torch is not installed")
    result = run_field_layout(make_xp(framework), case)
    check_against_golden(result, case)
    assert result["error_count"] == case.p["error_count"]
