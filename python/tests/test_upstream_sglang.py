"""SGLang's own tests of its DeepSeek-V4 cache dequantization and of combine_topk_swa_indices,
ported to run against dsv4kv (drop-in fidelity: upstream's own tests must pass), on NumPy
arrays, torch CPU tensors and torch CUDA tensors (conftest.py's fixture ``xp``).

Upstream files (sgl-project/sglang, at the revisions named):

* test/registered/kernels/ops/attention/test_dsv4_dequant_k_cache.py (628bd299):
  ``dequantize_k_cache_paged`` against ``dequantize_k_cache_paged_ref``, bitwise with NaN equal
  to NaN, on caches of random bytes (every FP8 code, NaNs included, and every scale byte 0..255).
* test/registered/kernels/ops/attention/test_combine_topk_swa_indices.py (464f1dc8): the five
  tests of ``combine_topk_swa_indices`` against its per-row torch reference.

SGLang's signatures differ from vLLM's (which dsv4kv keeps), so each test goes through a small
shim, written here and documented on each function:

* ``dequantize_k_cache_paged(cache, page_table, page_size, out)`` gathers arbitrary token slots
  into ``[T, 1, 512]``: the shim makes token ``i`` request ``i`` of one row (seq_len
  ``slot % page_size + 1``, gather_len 1, block-table row ``[slot // page_size]``), so dsv4kv's
  gather decodes exactly slot ``i`` into ``out[i, 0]``.
* ``combine_topk_swa_indices(topk_indices, query_start_loc, query_pos, seq_lens, gather_lens,
  compressed_base, swa_base, window_size, compress_ratio, topk, out_indices, out_lens)`` takes
  per-request bases where vLLM (and dsv4kv) take ``M * b`` and ``M * b + N``, and explicit query
  positions. The shim calls dsv4kv once per request (as request 0, so ``M * b = 0``) with
  ``N = swa_base[r]`` and the request's non-negative top-k entries raised by
  ``compressed_base[r]`` beforehand (negative entries stay as they are, so dsv4kv's "-1 stays
  -1" is what is tested); a request whose query positions are not its trailing tokens is called
  token by token (a one-token request at ``pos`` with the same ``gather_start``); rows outside
  every request go through a call with no request. Every output element is written by dsv4kv
  (the shim pre-fills nothing but poison).

The floors: SGLang quantizes with amax floored at 1e-8 where vLLM and dsv4kv floor at 1e-4
(spec/numerics.md, "Other implementations' floors"); neither ported test quantizes. The floor's
effect is tested in test_upstream_flashmla.py (test_floor_variants_*), together with FlashMLA's.
"""

from __future__ import annotations

import numpy as np
import pytest

import dsv4kv
from _upstream import BF16, ceil_div, decode_record, host, same_bf16, token_record, upstream_block_stride

L = dsv4kv.layout


def i32(xp, values):
    return xp.from_np(np.asarray(values, np.int32))


# ===========================================================================
# test_dsv4_dequant_k_cache.py
# ===========================================================================
def sglang_dequantize_k_cache_paged(xp, quant_k_cache, page_table, page_size, out=None, error_count=None):
    """SGLang's dequantize_k_cache_paged through dsv4kv.dequantize_and_gather_k_cache (see the
    module docstring). The table is read on the host to build the per-token requests."""
    table = host(xp, page_table).astype(np.int64)
    num_tokens = table.shape[0]
    if out is None:  # torch.empty upstream: poison, so every element must be written
        out = xp.from_np(np.full((num_tokens, 1, L.kHeadDim), 0x7FC1, np.uint16).view(BF16))
    dsv4kv.dequantize_and_gather_k_cache(
        out, quant_k_cache, i32(xp, table % page_size + 1), i32(xp, np.ones(num_tokens)),
        i32(xp, (table // page_size)[:, None]), page_size, 0, error_count=error_count)
    return out


def sglang_ref(cache_host: np.ndarray, table: np.ndarray, page_size: int) -> np.ndarray:
    """dequantize_k_cache_paged_ref's semantics: fp32(code) * 2^(byte - 127) with scales below
    2^-126 (byte 0) zeroed and byte 255 = exp2(128) = inf, rounded to bf16; RoPE bytes copied."""
    rows = [decode_record(*token_record(cache_host, int(s) // page_size, int(s) % page_size, page_size), "sglang")
            for s in table]
    return np.stack(rows)[:, None, :]


# (num_tokens, page_size): SGLang's cases.
CASES = [(1, 64), (3, 64), (333, 64), (256, 256), (4097, 256)]


def make_cache(rng, num_pages: int, page_size: int) -> np.ndarray:
    """Random bytes in SGLang's page size, ceil(P * (576 + 8) / 576) * 576 (vLLM's too)."""
    stride = upstream_block_stride(page_size)
    assert stride == L.vllm_block_stride(page_size)
    return rng.integers(0, 256, (num_pages, stride), dtype=np.uint8)


def check_dequant(xp, num_tokens, page_size, table_dtype=np.int32, out=None, seed=0):
    rng = np.random.default_rng(seed)
    num_pages = max(2, ceil_div(num_tokens, page_size) + 1)
    cache = make_cache(rng, num_pages, page_size)
    table = rng.integers(0, num_pages * page_size, num_tokens).astype(table_dtype)
    ec = i32(xp, [0])
    got = sglang_dequantize_k_cache_paged(xp, xp.from_np(cache), xp.from_np(table), page_size, out=out,
                                          error_count=ec)
    same_bf16(host(xp, got).view(np.uint16), sglang_ref(cache, table, page_size), f"{num_tokens} tokens")
    assert int(host(xp, ec)[0]) == 0  # dsv4kv: every slot exists
    return got


@pytest.mark.parametrize("num_tokens,page_size", CASES)
def test_matches_reference(xp, num_tokens, page_size):
    check_dequant(xp, num_tokens, page_size, seed=num_tokens)


def test_int64_page_table(xp):
    # SGLang takes an int32 or int64 table; the shim reads it on the host (dsv4kv's block
    # table is int32).
    check_dequant(xp, 333, 256, table_dtype=np.int64, seed=5)


def test_workspace_slice_output(xp):
    """The output is a slice of a larger workspace; rows past the slice stay untouched."""
    num_tokens, page_size = 777, 256
    workspace = xp.from_np(np.full((num_tokens + 512, 1, L.kHeadDim), np.nan, np.float32).astype(BF16))
    check_dequant(xp, num_tokens, page_size, out=workspace[:num_tokens], seed=6)
    assert np.isnan(host(xp, workspace)[num_tokens:].astype(np.float32)).all()


def test_reference_reads_every_scale_byte(xp):
    """dsv4kv extra, checking the port itself: SGLang's random caches hold every scale byte,
    0 and 255 included, and byte 0 decodes to 0, byte 255 to inf/NaN, as in SGLang's reference
    (spec/numerics.md, "The multiplier of a byte")."""
    rng = np.random.default_rng(9)
    page_size = 4
    cache = make_cache(rng, 1, page_size)
    so = L.scale_offset(page_size, 0, 0)
    cache[0, so:so + L.kNumTiles] = [0, 1, 127, 254, 255, 255, 128]
    d = L.token_data_offset(0)
    cache[0, d:d + L.kNopeDim] = 0x38  # every code 1.0
    cache[0, d + 5 * L.kTileSize] = 0  # 0 * inf in tile 5
    got = host(xp, sglang_dequantize_k_cache_paged(xp, xp.from_np(cache), i32(xp, [0]), page_size))
    vals = got[0, 0, :L.kNopeDim].astype(np.float32).reshape(L.kNumTiles, L.kTileSize)
    assert (vals[0] == 0).all() and (vals[1] == 2.0 ** -126).all() and (vals[2] == 1).all()
    assert (vals[3] == 2.0 ** 127).all() and np.isposinf(vals[4]).all()
    assert np.isnan(vals[5, 0]) and np.isposinf(vals[5, 1:]).all() and (vals[6] == 2).all()


# ===========================================================================
# test_combine_topk_swa_indices.py
# ===========================================================================
WINDOW = 128
TOPK_ALIGNMENT = 128  # flash_mla_sparse_fwd reads rows in 128-wide tiles


def sglang_combine(xp, topk_indices, query_start_loc, query_pos, seq_lens, gather_lens, compressed_base,
                   swa_base, window_size, compress_ratio, topk, out_indices=None, out_lens=None):
    """SGLang's combine_topk_swa_indices through dsv4kv.combine_topk_swa_indices (see the module
    docstring for the mapping)."""
    qsl, qpos, sl, gl, cb, sb = (host(xp, a).astype(np.int64) for a in
                                 (query_start_loc, query_pos, seq_lens, gather_lens, compressed_base, swa_base))
    topk_host = host(xp, topk_indices).astype(np.int64)
    num_tokens = topk_host.shape[0]
    width = L.combine_row_width(topk, window_size, 0)
    if out_indices is None:  # allocated upstream; poison here so every element must be written
        out_indices = xp.from_np(np.full((num_tokens, width), 1 << 30, np.int32))
        out_lens = xp.from_np(np.full(num_tokens, 1 << 30, np.int32))

    def call(rows, a, b, seq_len, gather_len, N):
        req = [] if seq_len is None else [seq_len]
        dsv4kv.combine_topk_swa_indices(
            i32(xp, rows), i32(xp, [0, b - a] if req else [0]), i32(xp, req),
            i32(xp, [gather_len] if req else []), window_size, compress_ratio, topk, 0, int(N),
            out=(out_indices[a:b], out_lens[a:b]))

    base = qsl[0]
    R = sl.shape[0]
    trailing = all((qpos[qsl[r] - base:qsl[r + 1] - base] == sl[r] - (qsl[r + 1] - qsl[r])
                    + np.arange(qsl[r + 1] - qsl[r])).all() for r in range(R))
    M = int(cb[1] - cb[0]) if R > 1 else 0
    if trailing and R > 0 and M >= 0 and (cb == M * np.arange(R)).all() and (sb - cb == sb[0]).all():
        # Bases of vLLM's form (compressed_base = M * b, swa_base = M * b + N): one plain call.
        dsv4kv.combine_topk_swa_indices(
            topk_indices, query_start_loc, seq_lens, gather_lens, window_size, compress_ratio, topk, M,
            int(sb[0]), out=(out_indices, out_lens))
        return out_indices, out_lens
    covered = np.zeros(num_tokens, bool)
    for r in range(R):
        a, b = int(qsl[r] - base), int(qsl[r + 1] - base)
        if b <= a:
            continue
        covered[a:b] = True
        shifted = topk_host[a:b].copy()
        shifted[shifted >= 0] += cb[r]
        gather_start = sl[r] - gl[r]
        if (qpos[a:b] == sl[r] - (b - a) + np.arange(b - a)).all():  # trailing tokens: one request
            call(shifted, a, b, sl[r], gl[r], sb[r])
        else:  # explicit positions: one-token requests at pos, same gather_start
            for t in range(a, b):
                p = qpos[t]
                call(shifted[t - a:t - a + 1], t, t + 1, p + 1, p + 1 - gather_start, sb[r])
    t = 0
    while t < num_tokens:  # rows in no request: a call without requests
        if covered[t]:
            t += 1
            continue
        e = t
        while e < num_tokens and not covered[e]:
            e += 1
        call(topk_host[t:e], t, e, None, None, 0)
        t = e
    return out_indices, out_lens


def sglang_reference(topk_indices, query_start_loc, query_pos, seq_lens, gather_lens, compressed_base, swa_base,
                     window_size, compress_ratio, topk):
    """SGLang's per-row reference: top-k prefix with -1 holes kept, then the causal window
    [pos - swa_len + 1, pos], swa_len = min(pos + 1, window), addressed from swa_base - gather_start."""
    num_tokens = topk_indices.shape[0]
    width = ceil_div(topk + window_size, TOPK_ALIGNMENT) * TOPK_ALIGNMENT
    out = np.full((num_tokens, width), -1, np.int64)
    lens = np.zeros(num_tokens, np.int64)
    base = query_start_loc[0]
    for r in range(len(seq_lens)):
        gather_start = seq_lens[r] - gather_lens[r]
        for t in range(query_start_loc[r] - base, query_start_loc[r + 1] - base):
            pos = query_pos[t]
            topk_len = min((pos + 1) // compress_ratio, topk)
            swa_len = min(pos + 1, window_size)
            vals = topk_indices[t, :topk_len].astype(np.int64)
            out[t, :topk_len] = np.where(vals >= 0, vals + compressed_base[r], -1)
            out[t, topk_len:topk_len + swa_len] = swa_base[r] + np.arange(swa_len) + pos - swa_len + 1 - gather_start
            lens[t] = topk_len + swa_len
    return out, lens


def as_xp(xp, case):
    return {k: (xp.from_np(v) if isinstance(v, np.ndarray) else v) for k, v in case.items()}


def check(xp, case, **out):
    got_idx, got_lens = sglang_combine(xp, **as_xp(xp, case), **out)
    ref_idx, ref_lens = sglang_reference(**case)
    got_idx, got_lens = host(xp, got_idx), host(xp, got_lens)
    assert got_lens.tolist() == ref_lens.tolist()
    assert got_idx.tolist() == ref_idx.tolist()
    return got_idx, got_lens


def trailing_case(seq_lens, extend_lens, topk, compress_ratio, seed=0, pad_rows=0):
    """Rows are the trailing extend_lens[r] tokens of request r, then pad_rows rows past the last
    request (positions 0, never read)."""
    rng = np.random.default_rng(seed)
    query_pos = [p for s, e in zip(seq_lens, extend_lens) for p in range(s - e, s)] + [0] * pad_rows
    starts = np.concatenate([[0], np.cumsum(extend_lens)])
    return dict(
        topk_indices=rng.integers(0, 1 << 20, (len(query_pos), topk), dtype=np.int32),
        query_start_loc=starts.astype(np.int32),
        query_pos=np.array(query_pos, np.int32),
        seq_lens=np.array(seq_lens, np.int32),
        gather_lens=np.array([min(s, e + WINDOW - 1) for s, e in zip(seq_lens, extend_lens)], np.int32),
        compressed_base=np.array([1000 * r for r in range(len(seq_lens))], np.int32),
        swa_base=np.array([5000 + 300 * r for r in range(len(seq_lens))], np.int32),
        window_size=WINDOW,
        compress_ratio=compress_ratio,
        topk=topk,
    )


def test_combine_width_is_sglangs():
    """SGLang's combined_topk_width is dsv4kv's combine_row_width with no image columns."""
    assert L.kCombineRowAlignment == TOPK_ALIGNMENT
    for topk, window in [(64, 128), (0, 128), (512, 128), (1, 1)]:
        assert L.combine_row_width(topk, window, 0) == ceil_div(topk + window, TOPK_ALIGNMENT) * TOPK_ALIGNMENT


@pytest.mark.parametrize("compress_ratio", [4, 128])
@pytest.mark.parametrize("seq_lens,extend_lens", [([96, 144], [3, 2]), ([7, 300, 1000], [7, 130, 5]), ([1], [1])])
def test_trailing_extend_matches_reference(xp, seq_lens, extend_lens, compress_ratio):
    check(xp, trailing_case(seq_lens, extend_lens, topk=64, compress_ratio=compress_ratio))


def test_negative_one_holes_are_kept(xp):
    case = trailing_case([512, 640], [4, 4], topk=64, compress_ratio=4)
    case["topk_indices"][:, 0] = -1
    case["topk_indices"][:, 5] = -1
    case["topk_indices"][3, 10:20] = -1
    got_idx, got_lens = check(xp, case)
    assert (got_idx[:, 0] == -1).all()
    assert (got_idx[:, 5] == -1).all()
    assert (got_idx[3, 10:20] == -1).all()
    assert int(got_lens[0]) == 64 + WINDOW  # the scanned prefix still counts the holes


def test_non_trailing_query_positions(xp):
    seq_lens, extend_lens = [96, 144], [6, 4]
    query_pos = [90, 92, 94, 140, 142]
    topk = 32
    check(xp, dict(
        topk_indices=np.arange(len(query_pos) * topk, dtype=np.int32).reshape(len(query_pos), topk),
        query_start_loc=np.array([10, 13, 15], np.int32),  # a cross-chunk offset, rebased
        query_pos=np.array(query_pos, np.int32),
        seq_lens=np.array(seq_lens, np.int32),
        gather_lens=np.array([min(s, e + WINDOW - 1) for s, e in zip(seq_lens, extend_lens)], np.int32),
        compressed_base=np.array([0, 24], np.int32),
        swa_base=np.array([48, 181], np.int32),
        window_size=WINDOW,
        compress_ratio=4,
        topk=topk,
    ))


def test_negative_one_holes_are_kept_in_one_call(xp):
    """dsv4kv extra: the holes test with bases of vLLM's form (compressed_base = M * b,
    swa_base = M * b + N), so the shim makes one dsv4kv call and request 1's holes meet
    M * b = 4096: they must stay -1 (spec/operations.md, combine deviation table, first row:
    vLLM's seed would write M * b - 1; SGLang's contract keeps -1)."""
    case = trailing_case([512, 640], [4, 4], topk=64, compress_ratio=4, seed=3)
    case["compressed_base"] = np.array([0, 4096], np.int32)
    case["swa_base"] = np.array([1000, 5096], np.int32)
    case["topk_indices"][:, 0] = -1
    case["topk_indices"][5:, 7:9] = -1
    got_idx, got_lens = check(xp, case)
    assert (got_idx[:, 0] == -1).all() and (got_idx[5:, 7:9] == -1).all()
    assert (got_idx[4:, 1] >= 4096).all()  # request 1's entries carry M * b


def test_reused_buffers_are_overwritten_whole(xp):
    """Uninitialized and already-written output buffers: every row handed over is rewritten."""
    width = ceil_div(64 + WINDOW, TOPK_ALIGNMENT) * TOPK_ALIGNMENT
    wide = trailing_case([512, 640], [8, 8], topk=64, compress_ratio=4)
    num_tokens = wide["topk_indices"].shape[0]
    out_indices = xp.from_np(np.full((num_tokens, width), 1 << 30, np.int32))
    out_lens = xp.from_np(np.full(num_tokens, 1 << 30, np.int32))
    got_idx, got_lens = check(xp, wide, out_indices=out_indices, out_lens=out_lens)
    assert int(got_lens[0]) == 64 + WINDOW

    narrow = trailing_case([20, 36, 48], [2, 0, 3], topk=64, compress_ratio=4, pad_rows=num_tokens - 5)
    assert narrow["topk_indices"].shape[0] == num_tokens
    got_idx, got_lens = check(xp, narrow, out_indices=out_indices, out_lens=out_lens)
    assert int(got_lens[0]) < 64 + WINDOW
    assert (got_lens[5:] == 0).all()
    assert (got_idx[5:] == -1).all()
    np.testing.assert_array_equal(host(xp, out_indices), got_idx)  # the caller's buffer holds the rows


def test_swa_only_layer(xp):
    case = trailing_case([200, 50], [2, 2], topk=0, compress_ratio=4)
    case["topk_indices"] = np.zeros((4, 1), np.int32)
    _, got_lens = check(xp, case)
    assert got_lens.tolist() == [WINDOW, WINDOW, 49, 50]
