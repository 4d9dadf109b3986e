"""CPU properties of the Python layer: frameworks agree byte for byte, views with byte offsets
and strides are honoured, out= buffers are used, bad values are skipped and counted, and the
quantize/dequantize round trip stays within FP8 precision."""

import ml_dtypes
import numpy as np
import pytest

import dsv4kv
from _support import assert_same, frameworks_available, make_xp, random_problem, run_all
from op_cases import adopt

L = dsv4kv.layout
BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("seed,block_size", [(1, 64), (2, 128), (3, 16)])
def test_random_problem_numpy_vs_torch_cpu(seed, block_size):
    if "torch-cpu" not in frameworks_available():
        pytest.skip("torch is not installed")
    pr = random_problem(seed, block_size)
    a = run_all(make_xp("numpy"), pr)
    b = run_all(make_xp("torch-cpu"), pr)
    assert a["ec"].sum() > 0
    assert_same(a, b)


def test_random_problem_counts_every_planted_fault():
    pr = random_problem(11)
    ec = run_all(make_xp("numpy"), pr)["ec"]
    # quantize: 2 bad slots + 1 inf + 1 NaN + 64 NaN of the three non-finite tokens that are written
    written = [t for t in (3, 4, 5) if pr["slots"][t] != -1 and 0 <= pr["slots"][t] < 12 * pr["B"]]
    nonfinite = {3: 1, 4: 1, 5: 64}
    assert ec[0] == 2 + sum(nonfinite[t] for t in written)
    assert ec[1] > 0 and ec[2] > 0


def test_roundtrip_precision():
    rng = np.random.default_rng(0)
    k = (rng.standard_normal((64, L.kHeadDim)) * 3).astype(BF16)
    cache = np.zeros((1, L.vllm_block_stride(64)), np.uint8)
    dsv4kv.quantize_and_insert_k_cache(k, cache, np.arange(64, dtype=np.int64))
    out = np.zeros((1, 64, L.kHeadDim), BF16)
    dsv4kv.dequantize_and_gather_k_cache(out, cache, np.array([64], np.int32), None, np.zeros((1, 1), np.int32),
                                         64, 0)
    x, y = k.astype(np.float32), out[0].astype(np.float32)
    np.testing.assert_array_equal(y[:, L.kNopeDim:], x[:, L.kNopeDim:])  # RoPE bit-exact
    for j in range(L.kNumTiles):
        tile = slice(j * L.kTileSize, (j + 1) * L.kTileSize)
        amax = np.abs(x[:, tile]).max(axis=1, keepdims=True)
        # e4m3: 3 mantissa bits -> relative step 2^-3 at the top binade, absolute step <= amax * 2^-3 / 2 * 2
        assert (np.abs(y[:, tile] - x[:, tile]) <= amax * 2.0 ** -3).all()


def test_views_with_byte_offsets_and_strides():
    """Inputs that start inside a larger buffer (DLPack byte offsets) and strided rows."""
    rng = np.random.default_rng(3)
    B = 64
    stride = L.vllm_block_stride(B)
    k_big = (rng.standard_normal((9, L.kHeadDim + 8))).astype(BF16)
    k = k_big[2:8, 4:4 + L.kHeadDim]  # offset start, row stride 520
    slots_big = np.array([99, 3, 70, -1, 5, 64, 1, 99], np.int64)
    slots = slots_big[1:7]
    cache_big = np.zeros((4, stride), np.uint8)
    cache = cache_big[1:3]  # the cache view starts one block in
    dsv4kv.quantize_and_insert_k_cache(k, cache, slots)
    ref = np.zeros((2, stride), np.uint8)
    dsv4kv.quantize_and_insert_k_cache(np.ascontiguousarray(k), ref, np.ascontiguousarray(slots))
    np.testing.assert_array_equal(cache, ref)
    assert not cache_big[0].any() and not cache_big[3].any()

    bt_big = np.array([[9, 0, 1, 9], [9, 1, 0, 9]], np.int32)
    out = np.zeros((2, 3, L.kHeadDim), BF16)
    dsv4kv.dequantize_and_gather_k_cache(out, cache, np.array([71, 70], np.int32), np.array([3, 2], np.int32),
                                         bt_big[:, 1:3], B, 1)
    out_ref = np.zeros_like(out)
    dsv4kv.dequantize_and_gather_k_cache(out_ref, ref, np.array([71, 70], np.int32), np.array([3, 2], np.int32),
                                         np.ascontiguousarray(bt_big[:, 1:3]), B, 1)
    np.testing.assert_array_equal(out.view(np.uint16), out_ref.view(np.uint16))
    assert out.view(np.uint16)[:, 0].max() == 0  # rows before offset untouched


def test_out_buffers_are_filled_in_place():
    i32 = lambda v: np.array(v, np.int32)  # noqa: E731
    g = np.full((2, 3), 5, np.int32)
    lens = np.full(2, 5, np.int32)
    rg, rl = dsv4kv.compute_global_topk_indices_and_lens(i32([[0, 65, -1], [2, -1, -1]]), i32([0, 1]),
                                                         i32([[4, 6], [7, 7]]), 64, np.array([True, False]),
                                                         out=(g, lens))
    assert rg is g and rl is lens
    assert g.tolist() == [[256, 385, -1], [450, -1, -1]] and lens.tolist() == [2, 0]


def test_slot_out_of_range_is_skipped_and_counted():
    k = np.ones((2, L.kHeadDim), BF16)
    cache = np.zeros((1, L.vllm_block_stride(64)), np.uint8)
    ec = np.zeros(1, np.int32)
    dsv4kv.quantize_and_insert_k_cache(k, cache, np.array([64, -1], np.int64), error_count=ec)
    assert ec[0] == 1 and not cache.any()


def test_numpy_integer_scalars_are_accepted():
    k = np.ones((1, L.kHeadDim), BF16)
    cache = np.zeros((1, L.vllm_block_stride(64)), np.uint8)
    dsv4kv.quantize_and_insert_k_cache(k, cache, np.array([0], np.int64), np.int64(64))
    assert cache.any()


def test_empty_batches():
    i32 = lambda *s: np.zeros(s, np.int32)  # noqa: E731
    g, lens = dsv4kv.compute_global_topk_indices_and_lens(i32(0, 8), i32(0), i32(1, 1), 64, np.zeros(0, bool))
    assert g.shape == (0, 8) and lens.shape == (0,)
    si, sl = dsv4kv.build_flashinfer_mixed_sparse_indices(i32(0, 8), None, None, i32(0, 4), i32(1), i32(0), i32(0),
                                                          i32(0, 1), 64, None, 64, 8, 4, 4)
    assert si.shape == (0, 12) and sl.shape == (0,)


# Each operation's own property tests (op_cases/<op>.py).
adopt(globals(), "PROPERTY_TESTS")
