"""dsv4kv.dequantize_and_gather_k_cache_sparse: a slot list is a dense gather of single-token
requests (slot s: seq_len s % B + 1, gather_len 1, block-table row [s // B]), byte for byte,
on NumPy, torch CPU and, when available, torch CUDA; rows of -1 and of out-of-range slots keep
their contents and only the latter are counted; int32 and int64 slot ids give the same bytes."""

from __future__ import annotations

import numpy as np
import pytest

import dsv4kv
from _support import BF16, bits, cuda_skip_reason, frameworks_available, make_xp, require_cuda

L = dsv4kv.layout


def frameworks():
    names = list(frameworks_available())
    reason = cuda_skip_reason()
    names.append(pytest.param("torch-cuda", marks=pytest.mark.skipif(reason is not None and not require_cuda(),
                                                                     reason=f"GPU run: {reason}")))
    return names


def problem(seed, block_size=16, num_blocks=5, n=40):
    """A cache of random bytes and `n` slots: mostly valid, some -1, some out of range."""
    rng = np.random.default_rng(seed)
    stride = L.vllm_block_stride(block_size)
    cache = rng.integers(0, 256, size=(num_blocks, stride), dtype=np.uint8)
    cap = num_blocks * block_size
    slots = rng.integers(0, cap, size=n).astype(np.int64)
    slots[rng.random(n) < 0.15] = -1
    bad = rng.random(n) < 0.15
    slots[bad] = rng.choice(np.array([cap, cap + 7, -2, -(1 << 20), (1 << 31) - 1], dtype=np.int64), size=int(bad.sum()))
    return cache, slots, block_size


def run_sparse(xp, cache, slots, bs, dtype, fnuz=False, extra_rows=2):
    n = len(slots)
    out0 = np.full((n + extra_rows, L.kHeadDim), 7, dtype=np.uint16).view(BF16)
    out, ec = xp.from_np(out0), xp.from_np(np.zeros(1, np.int32))
    dsv4kv.dequantize_and_gather_k_cache_sparse(out, xp.from_np(cache), xp.from_np(slots.astype(dtype)), bs,
                                                use_fnuz=fnuz, error_count=ec)
    xp.synchronize()
    return bits(xp.to_np(out)), int(xp.to_np(ec)[0])


def run_dense_equivalent(xp, cache, slots, bs, fnuz=False, extra_rows=2):
    """The dense gather of the single-token requests equivalent to `slots`, into [n, 1, 512] rows
    of the same buffer shape (rows >= n untouched)."""
    n = len(slots)
    seq, gat, table = np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros((max(n, 1), 1), np.int32)
    for i, s in enumerate(slots):
        if s == -1:
            continue  # length 0: nothing gathered, nothing counted
        if s < 0:
            seq[i] = -1  # malformed request: one report
            continue
        seq[i], gat[i] = s % bs + 1, 1
        table[i, 0] = min(s // bs, np.iinfo(np.int32).max)
    buf = np.full((n + extra_rows, L.kHeadDim), 7, dtype=np.uint16).view(BF16)
    out = xp.from_np(buf)
    ec = xp.from_np(np.zeros(1, np.int32))
    view = xp.strided(out, (n, 1, L.kHeadDim), (L.kHeadDim, L.kHeadDim, 1))
    dsv4kv.dequantize_and_gather_k_cache(view, xp.from_np(cache), xp.from_np(seq), xp.from_np(gat),
                                         xp.from_np(table[:n] if n else table[:0]), bs, 0, use_fnuz=fnuz,
                                         error_count=ec)
    xp.synchronize()
    return bits(xp.to_np(out)), int(xp.to_np(ec)[0])


@pytest.mark.parametrize("framework", frameworks())
@pytest.mark.parametrize("fnuz", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_equals_the_dense_gather_of_single_token_requests(framework, fnuz, seed):
    xp = make_xp(framework)
    cache, slots, bs = problem(seed)
    got, count = run_sparse(xp, cache, slots, bs, np.int32, fnuz)
    want, want_count = run_dense_equivalent(xp, cache, slots, bs, fnuz)
    np.testing.assert_array_equal(got, want)
    assert count == want_count
    cap = cache.shape[0] * bs
    assert count == int(((slots != -1) & ((slots < 0) | (slots >= cap))).sum()) > 0


@pytest.mark.parametrize("framework", frameworks())
def test_skipped_rows_and_rows_past_n_are_untouched(framework):
    xp = make_xp(framework)
    cache, slots, bs = problem(7)
    got, _ = run_sparse(xp, cache, slots, bs, np.int64)
    cap = cache.shape[0] * bs
    skipped = (slots < 0) | (slots >= cap)
    assert skipped.any() and (slots == -1).any()
    assert (got[:len(slots)][skipped] == 7).all()
    assert (got[len(slots):] == 7).all()
    # a read row holds the token's RoPE bits, copied from the cache
    i = int(np.flatnonzero(~skipped)[0])
    blk, pos = divmod(int(slots[i]), bs)
    rope = cache[blk, L.rope_offset(pos):L.rope_offset(pos) + 2 * (L.kHeadDim - L.kNopeDim)].view(np.uint16)
    np.testing.assert_array_equal(got[i, L.kNopeDim:], rope)


@pytest.mark.parametrize("framework", frameworks())
def test_int32_and_int64_slot_ids_agree(framework):
    xp = make_xp(framework)
    cache, slots, bs = problem(11)
    a, ca = run_sparse(xp, cache, slots, bs, np.int32)
    b, cb = run_sparse(xp, cache, slots, bs, np.int64)
    np.testing.assert_array_equal(a, b)
    assert ca == cb


def test_bad_slot_dtype_is_a_contract_error():
    cache, slots, bs = problem(1)
    out = np.zeros((len(slots), L.kHeadDim), dtype=BF16)
    with pytest.raises(TypeError, match="dequantize_and_gather_k_cache_sparse: slot_indices must be int32 or int64"):
        dsv4kv.dequantize_and_gather_k_cache_sparse(out, cache, slots.astype(np.uint8), bs)
