"""vLLM's own tests of the five functions, ported to run against dsv4kv (drop-in fidelity:
upstream's own tests must pass), on NumPy arrays, torch CPU tensors and torch CUDA tensors
(conftest.py's fixture ``xp``).

Upstream files (vllm-project/vllm, at the revisions named):

* tests/kernels/test_compressor_kv_cache.py (00a51a3e; tests A and the magnitude test also at
  505cbbab): the DeepSeek-V4 attention round trip, the fused dequant+gather against a reference,
  the non-contiguous block-table gather, and the magnitude range; and its DeepSeek-V4.1 record
  tests (section "DeepSeek-V4.1 records" below: ``test_v41_mxfp8_cache_round_trip``,
  ``test_v41_rope_insert_nvfp4_record``, ``test_v41_nvfp4_gather_matches_insert``, through
  dsv4kv's ``record=``), with the 68-byte indexer key's layout test of the DeepSeek-V4.1
  "numerical contracts" tests. The indexer writer (fused with RMSNorm and RoPE) and the
  compressor tests of that file exercise other kernels and are not ported.
* tests/kernels/attention/test_compute_global_topk_bounds.py (4bc98fd4, vLLM PR #55692): every
  test, for its two modules ``deepseek_v4`` and ``deepseek_v4_1`` (dsv4kv's profiles ``vllm_v4``
  and ``vllm_v41``), and for the seed's semantics where the seed agrees.
* tests/v1/attention/test_deepseek_v4_swa_visible.py (06d0369d): the tests that call
  ``combine_topk_swa_indices`` and ``build_flashinfer_mixed_sparse_indices``: the DeepSeek-V4
  ones for the seed and ``vllm_v4``, and the DeepSeek-V4.1 combine ones for ``vllm_v41`` (of
  ``test_v41_image_prefill_uses_causal_swa`` its combine assertions) and the V4.1 mixed replay
  test for ``vllm_v41`` (the other tests drive vLLM's metadata builder kernels, not these
  functions).
* tests/kernels/attention/test_flashmla_sparse.py (00a51a3e): the three tests that call
  ``build_flashinfer_mixed_sparse_indices`` directly, for the seed and ``vllm_v4`` (the two
  DSpark non-causal tests are current vLLM's: the seed's rows are asserted for the seed).

Same inputs, same assertions, vLLM's call signatures (dsv4kv keeps vLLM's names, argument order
and defaults). Random inputs come from NumPy's generator with upstream's distributions (torch is
optional here). Expected values come from references written here from the semantics the
upstream tests state. Where dsv4kv deliberately differs from the revision a test was written
for, the port asserts dsv4kv's behaviour and cites spec/operations.md. A few extra assertions
(marked "dsv4kv:") check error_count where upstream has no counter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dsv4kv
from _records import E4M3, PAD, e2m1, pack, page_bytes, unpack
from _upstream import (BF16, FP8_MAX, VLLM_FLOOR, ceil_div, decode_record, host, randn_bf16, same_bf16,
                       token_record)

L = dsv4kv.layout


def i32(xp, values):
    return xp.from_np(np.asarray(values, np.int32))


def row_stride(a) -> int:
    """stride(0) in elements, for NumPy arrays and torch tensors alike."""
    return a.stride(0) if hasattr(a, "stride") and callable(a.stride) else a.strides[0] // a.itemsize


# ===========================================================================
# tests/kernels/test_compressor_kv_cache.py
# ===========================================================================
def vllm_ref_tile_scales(row_nope_f32: np.ndarray) -> np.ndarray:
    """The scales of vLLM's test helper _ue8m0_reference: per 64-value tile,
    2^ceil(log2(max(amax, 1e-4) / 448)), the division in fp32 and log2 in double."""
    scales = []
    for tile in row_nope_f32.reshape(L.kNumTiles, L.kTileSize):
        amax = max(np.float32(np.abs(tile).max()), VLLM_FLOOR)
        raw = np.float32(amax) / np.float32(FP8_MAX)
        scales.append(2.0 ** math.ceil(math.log2(float(raw))))
    return np.array(scales)


def gather_reference(k_cache_host: np.ndarray, seq_lens, gather_lens, block_table, block_size: int):
    """vLLM's _dequantize_and_gather_k_cache_reference, as rows: {(req, i): bf16 bits [512]} with
    fp32(code) * exp2(byte - 127) rounded once to bf16 and the RoPE bytes copied."""
    cache = k_cache_host.reshape(k_cache_host.shape[0], -1)
    rows = {}
    for req, seq_len in enumerate(seq_lens):
        g = gather_lens[req] if gather_lens is not None else seq_len
        for i in range(g):
            pos = seq_len - g + i
            blk = int(block_table[req, pos // block_size])
            rows[(req, i)] = decode_record(*token_record(cache, blk, pos % block_size, block_size), "exp2")
    return rows


@pytest.mark.parametrize("num_tokens", [1, 4, 8, 17])
@pytest.mark.parametrize("block_size", [16, 64])
def test_deepseek_v4_attention_quant_cache_roundtrip(xp, num_tokens, block_size):
    """Test A: quantize_and_insert_k_cache -> dequantize_and_gather_k_cache -> original."""
    num_blocks = ceil_div(num_tokens, block_size) + 1
    rng = np.random.default_rng(100 * num_tokens + block_size)
    compressed_kv = randn_bf16(rng, (num_tokens, L.kHeadDim))

    # [num_blocks, block_size, 584]: block stride block_size * 584 (not rounded to 576).
    k_cache = xp.from_np(np.zeros((num_blocks, block_size, L.kTokenBytes), np.uint8))
    k_cache_2d = k_cache.reshape(num_blocks, -1)
    slot_mapping = xp.from_np(np.arange(num_tokens, dtype=np.int64))
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(compressed_kv), k_cache_2d, slot_mapping, block_size=block_size)

    out = xp.from_np(np.zeros((1, num_tokens, L.kHeadDim), BF16))
    seq_lens = i32(xp, [num_tokens])
    block_table = i32(xp, np.arange(num_blocks)[None, :])
    dsv4kv.dequantize_and_gather_k_cache(out, k_cache, seq_lens, None, block_table, block_size, offset=0)

    recovered = host(xp, out)[0, :num_tokens].astype(np.float32)
    orig = compressed_kv.astype(np.float32)
    nope_diff = np.abs(recovered[:, :L.kNopeDim] - orig[:, :L.kNopeDim])
    for t in range(num_tokens):
        # Half an e4m3 ulp at 448 (ulp 32) times the tile's scale bounds the error.
        max_allowed = 16.0 * vllm_ref_tile_scales(orig[t, :L.kNopeDim]).max()
        assert nope_diff[t].max() <= max_allowed, (t, nope_diff[t].max(), max_allowed)
    # RoPE stored as bf16: exact.
    assert np.abs(recovered[:, L.kNopeDim:] - orig[:, L.kNopeDim:]).max() == 0.0


@pytest.mark.parametrize(
    ("seq_lens_host", "gather_lens_host", "offset"),
    [([9, 23, 7], None, 0), ([19, 8, 257], [6, 8, 129], 5)],
)
def test_dequantize_and_gather_k_cache(xp, seq_lens_host, gather_lens_host, offset):
    """Test B: the gather against a reference, through a randomized block table whose padded
    entries are invalid (-1e6)."""
    block_size = 64
    num_reqs = len(seq_lens_host)
    num_tokens = sum(seq_lens_host)
    max_gather_len = max(gather_lens_host or seq_lens_host)
    max_blocks_per_seq = ceil_div(max(seq_lens_host), block_size)
    num_blocks = sum(ceil_div(s, block_size) for s in seq_lens_host)
    rng = np.random.default_rng(7 + offset)

    compressed_kv = randn_bf16(rng, (num_tokens, L.kHeadDim))
    physical_blocks = rng.permutation(num_blocks)
    block_table = np.full((num_reqs, max_blocks_per_seq), int(-1e6), np.int32)
    start = 0
    for req, seq_len in enumerate(seq_lens_host):
        n = ceil_div(seq_len, block_size)
        block_table[req, :n] = physical_blocks[start:start + n]
        start += n
    slot_mapping = np.concatenate([
        block_table[req, np.arange(s) // block_size].astype(np.int64) * block_size + np.arange(s) % block_size
        for req, s in enumerate(seq_lens_host)])

    # torch.empty upstream: garbage bytes in every slot the insert does not write.
    k_cache = xp.from_np(rng.integers(0, 256, (num_blocks, block_size, L.kTokenBytes), dtype=np.uint8))
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(compressed_kv), k_cache.reshape(num_blocks, -1),
                                       xp.from_np(slot_mapping), block_size)

    out_shape = (num_reqs, offset + max_gather_len + 3, L.kHeadDim)
    actual_out = xp.from_np(rng.integers(0, 1 << 16, out_shape, dtype=np.uint16).view(BF16))
    gather_lens = i32(xp, gather_lens_host) if gather_lens_host is not None else None
    ec = i32(xp, [0])
    dsv4kv.dequantize_and_gather_k_cache(actual_out, k_cache, i32(xp, seq_lens_host), gather_lens,
                                         i32(xp, block_table), block_size, offset, error_count=ec)
    actual = host(xp, actual_out).view(np.uint16)
    ref = gather_reference(host(xp, k_cache), seq_lens_host, gather_lens_host, block_table, block_size)
    for (req, i), want in ref.items():
        same_bf16(actual[req, offset + i], want, f"req {req} row {i}")
    assert int(host(xp, ec)[0]) == 0  # dsv4kv: valid input, nothing skipped


@pytest.mark.parametrize("num_reqs", [1, 2, 4, 8, 16, 32, 64, 128, 256])
def test_dequantize_and_gather_k_cache_triton(xp, num_reqs):
    """Test B (kernel form): the gather respects a non-contiguous block-table view."""
    block_size = 256
    rng = np.random.default_rng(num_reqs)
    compressed_kv = randn_bf16(rng, (num_reqs, L.kHeadDim))
    physical_blocks = rng.permutation(num_reqs)
    storage = np.full((num_reqs, 4), int(-1e6), np.int32)
    storage[:, 0] = physical_blocks
    block_table = xp.from_np(storage)[:, :1]
    assert row_stride(block_table) != block_table.shape[-1]

    slot_mapping = physical_blocks.astype(np.int64) * block_size
    k_cache = xp.from_np(rng.integers(0, 256, (num_reqs, block_size, L.kTokenBytes), dtype=np.uint8))
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(compressed_kv), k_cache.reshape(num_reqs, -1),
                                       xp.from_np(slot_mapping), block_size)
    seq_lens = np.ones(num_reqs, np.int32)
    actual = xp.from_np(np.zeros((num_reqs, 1, L.kHeadDim), BF16))
    dsv4kv.dequantize_and_gather_k_cache(actual, k_cache, xp.from_np(seq_lens), None, block_table, block_size, 0)
    got = host(xp, actual).view(np.uint16)
    ref = gather_reference(host(xp, k_cache), seq_lens, None, storage[:, :1], block_size)
    for (req, i), want in ref.items():
        same_bf16(got[req, i], want, f"req {req}")


def test_deepseek_v4_quant_magnitude_range(xp):
    """Test D: small, unit, large and random rows survive the round trip."""
    block_size, num_tokens, num_blocks = 16, 4, 2
    rng = np.random.default_rng(4)
    compressed_kv = np.zeros((num_tokens, L.kHeadDim), np.float32)
    compressed_kv[0] = 0.001
    compressed_kv[1] = 1.0
    compressed_kv[2] = 100.0
    compressed_kv = compressed_kv.astype(BF16)
    compressed_kv[3] = randn_bf16(rng, (L.kHeadDim,))

    k_cache = xp.from_np(np.zeros((num_blocks, block_size, L.kTokenBytes), np.uint8))
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(compressed_kv), k_cache.reshape(num_blocks, -1),
                                       xp.from_np(np.arange(num_tokens, dtype=np.int64)), block_size)
    out = xp.from_np(np.zeros((1, num_tokens, L.kHeadDim), BF16))
    dsv4kv.dequantize_and_gather_k_cache(out, k_cache, i32(xp, [num_tokens]), None,
                                         i32(xp, np.arange(num_blocks)[None, :]), block_size, offset=0)
    recovered = host(xp, out)[0].astype(np.float32)
    orig = compressed_kv.astype(np.float32)
    assert np.abs(recovered[:, L.kNopeDim:] - orig[:, L.kNopeDim:]).max() == 0.0
    for t in range(num_tokens):
        o, r = orig[t, :L.kNopeDim], recovered[t, :L.kNopeDim]
        magnitude = np.abs(o).max()
        if magnitude > 0.01:
            assert np.abs(r - o).max() / magnitude < 0.15, t


# ===========================================================================
# tests/kernels/attention/test_compute_global_topk_bounds.py
# ===========================================================================
BLOCK_SIZE = 64


#: The test file is parametrized over vLLM's two model modules (profiles vllm_v4, vllm_v41); the
#: seed's semantics agree with it except on packing (test_invalid_before_valid_compacts_left).
GLOBAL_PROFILES = ["seed", "vllm_v4", "vllm_v41"]


@pytest.fixture(params=GLOBAL_PROFILES)
def profile(request):
    return request.param


def run_global(xp, profile, topk, token_to_req, block_table, is_valid):
    """compute_global_topk_indices_and_lens with vLLM's positional signature under `profile`; host
    outputs and dsv4kv's error_count."""
    ec = i32(xp, [0])
    t = xp.from_np(np.asarray(topk, np.int32))
    bt = i32(xp, block_table) if isinstance(block_table, list) else block_table  # an xp view as it is
    out, lens = dsv4kv.compute_global_topk_indices_and_lens(
        t, i32(xp, token_to_req), bt, BLOCK_SIZE, xp.from_np(np.asarray(is_valid, np.bool_)), semantics=profile,
        error_count=ec)
    return host(xp, out), host(xp, lens), int(host(xp, ec)[0])


def test_exact_valid_metadata_unchanged(xp, profile):
    out, lens, ec = run_global(xp, profile, [[0, 64, -1, -1]], [0], [[10, 11, 12, 13]], [True])
    assert out[0, 0] == 10 * BLOCK_SIZE + 0
    assert out[0, 1] == 11 * BLOCK_SIZE + 0
    assert out[0, 2] == -1
    assert lens[0] == 2
    assert ec == 0  # dsv4kv: -1 is a sentinel, not an error


def test_req_idx_equal_rows(xp, profile):
    out, lens, ec = run_global(xp, profile, [[0, -1, -1, -1]], [1], [[10, 11, 12, 13]], [True])
    assert out[0].tolist() == [-1, -1, -1, -1]
    assert lens[0] == 0
    assert ec == 1  # dsv4kv: one report for the token


def test_req_idx_greater_than_rows(xp, profile):
    out, lens, ec = run_global(xp, profile, [[0, -1, -1, -1]], [5], [[10, 11]], [True])
    assert all(v == -1 for v in out[0].tolist())
    assert lens[0] == 0


def test_req_idx_negative(xp, profile):
    out, lens, ec = run_global(xp, profile, [[0, -1, -1, -1]], [-1], [[10, 11, 12, 13]], [True])
    assert all(v == -1 for v in out[0].tolist())
    assert lens[0] == 0


def test_block_idx_equal_logical_cols(xp, profile):
    # logical cols = 2; local 2 * 64 -> block column 2 == cols
    out, lens, ec = run_global(xp, profile, [[128, -1, -1, -1]], [0], [[10, 11]], [True])
    assert out[0, 0] == -1
    assert lens[0] == 0
    assert ec == 1  # dsv4kv: one report per untranslatable index


def test_block_idx_greater_than_logical_cols(xp, profile):
    out, lens, ec = run_global(xp, profile, [[256, -1, -1, -1]], [0], [[10, 11]], [True])
    assert out[0, 0] == -1
    assert lens[0] == 0


def test_block_idx_negative_via_neg_local(xp, profile):
    out, lens, ec = run_global(xp, profile, [[-5, -1, -1, -1]], [0], [[10, 11, 12, 13]], [True])
    assert out[0, 0] == -1
    assert lens[0] == 0
    assert ec == 0  # dsv4kv: any negative local index is a sentinel


def test_mixed_valid_invalid_and_topk_lens(xp, profile):
    out, lens, ec = run_global(xp, profile, [[0, -1, -1, -1], [0, -1, -1, -1]], [0, 1], [[10, 11, 12, 13]], [True, True])
    assert out[0, 0] == 10 * BLOCK_SIZE
    assert lens[0] == 1
    assert all(v == -1 for v in out[1].tolist())
    assert lens[1] == 0
    assert out[1, 0] != 10 * BLOCK_SIZE  # token 1 must not alias onto row 0


def test_column_oob_mixed_with_valid(xp, profile):
    out, lens, ec = run_global(xp, profile, [[0, 128, -1, -1]], [0], [[10, 11]], [True])
    assert out[0, 0] == 10 * BLOCK_SIZE
    assert out[0, 1] == -1
    assert lens[0] == 1


def test_invalid_before_valid_compacts_left(xp, profile):
    """Upstream packs the surviving entries to the left: [11 * 64, -1, ...] (profiles vllm_v4 and
    vllm_v41). The seed keeps every entry in its column (spec/operations.md,
    compute_global_topk_indices_and_lens); the length and the -1 for the bad index agree."""
    out, lens, ec = run_global(xp, profile, [[128, 64, -1, -1]], [0], [[10, 11]], [True])
    if profile == "seed":
        assert out[0].tolist() == [-1, 11 * BLOCK_SIZE, -1, -1]
    else:
        assert out[0].tolist() == [11 * BLOCK_SIZE, -1, -1, -1]
    assert lens[0] == 1
    assert ec == 1  # dsv4kv: the block column past the table


def test_logical_cols_not_stride_boundary(xp, profile):
    backing = i32(xp, [[10, 11, 12]])
    block_table = backing[:, :2]
    assert tuple(block_table.shape) == (1, 2)
    assert row_stride(block_table) == 3
    # local 128 -> block column 2: below the row stride (3) but equal to the column count
    out, lens, ec = run_global(xp, profile, [[128, -1, -1, -1]], [0], block_table, [True])
    assert out[0, 0] == -1
    assert lens[0] == 0


def test_cg_padded_block_table_rows(xp, profile):
    out, lens, ec = run_global(xp, profile, [[0, -1, -1, -1], [64, -1, -1, -1]], [0, 1],
                               [[10, 11, 12, 13], [90, 91, 92, 93]], [True, True])
    assert out[0, 0] == 10 * BLOCK_SIZE
    assert out[1, 0] == 91 * BLOCK_SIZE
    assert lens.tolist() == [1, 1]


def test_normal_prefill_multi_req(xp, profile):
    out, lens, ec = run_global(xp, profile, [[0, -1, -1, -1], [0, -1, -1, -1], [64, -1, -1, -1]], [0, 1, 1],
                               [[10, 11], [20, 21]], [True, True, True])
    assert out[0, 0] == 10 * BLOCK_SIZE
    assert out[1, 0] == 20 * BLOCK_SIZE
    assert out[2, 0] == 21 * BLOCK_SIZE
    assert lens.tolist() == [1, 1, 1]
    assert ec == 0


# ===========================================================================
# tests/v1/attention/test_deepseek_v4_swa_visible.py
# ===========================================================================
WINDOW = 8
MAX_IMG = 6
WIDTH = WINDOW + MAX_IMG
SWA_BLOCK_SIZE = 64


def ref_left_right(seq_lens, query_lens, spans_per_req, max_image_tokens):
    """Per-token (left, right) of DeepSeek's get_image_visible: inside an inclusive span [s, e],
    left = min(pos - s, max_image_tokens - 1), right = min(e - pos, max_image_tokens)."""
    lefts, rights = [], []
    for seq_len, query_len, spans in zip(seq_lens, query_lens, spans_per_req):
        for i in range(query_len):
            pos = seq_len - query_len + i
            left = right = 0
            for s, e in spans:
                if s <= pos <= e:
                    left = min(pos - s, max_image_tokens - 1)
                    right = min(e - pos, max_image_tokens)
            lefts.append(left)
            rights.append(right)
    return lefts, rights


def ref_swa_bounds(pos, window, left, right, replay_start=0):
    """[start, end) of the widened window of one query token; under SWA bounded replay no window KV
    exists below `replay_start`."""
    left_add = max(left - (window - 1), 0)
    return max(pos - (window - 1) - left_add, 0, replay_start), pos + right + 1


def ref_swa_slot_rows(seq_lens, query_lens, spans_per_req, block_table, window, max_image_tokens, width,
                      replay_starts=None):
    """Paged slot rows (padded with -1 to `width`) and lengths of every token."""
    lefts, rights = ref_left_right(seq_lens, query_lens, spans_per_req, max_image_tokens)
    replay_starts = replay_starts or [0] * len(seq_lens)
    rows, lens, token = [], [], 0
    for req, (seq_len, query_len) in enumerate(zip(seq_lens, query_lens)):
        for i in range(query_len):
            pos = seq_len - query_len + i
            start, end = ref_swa_bounds(pos, window, lefts[token], rights[token], replay_starts[req])
            row = [int(block_table[req, p // SWA_BLOCK_SIZE]) * SWA_BLOCK_SIZE + p % SWA_BLOCK_SIZE
                   for p in range(start, end)]
            lens.append(len(row))
            rows.append(row + [-1] * (width - len(row)))
            token += 1
    return rows, lens


CASES = [
    {"seq_lens": [30, 12], "query_lens": [30, 12], "spans": [[(4, 12), (20, 24)], []]},
    {"seq_lens": [26], "query_lens": [26], "spans": [[(2, 17)]]},
    {"seq_lens": [40, 9], "query_lens": [16, 9], "spans": [[(30, 38)], []]},
    {"seq_lens": [7, 15], "query_lens": [7, 15], "spans": [[(0, 6)], [(10, 14)]]},
]


def combine_case(xp, compress_ratio, topk, seq_lens, query_lens, spans, with_image, replay_starts=None,
                 semantics="seed", in_range_topk=False):
    """vLLM's combine_case: run combine_topk_swa_indices and build the expected rows. `semantics`
    stands for upstream's `combine_fn` (vllm_v41: V4.1's combine, which has no image parameters);
    `in_range_topk` draws top-k values below N, for combiners that drop out-of-range ones."""
    num_reqs = len(seq_lens)
    replay_starts = replay_starts or [0] * num_reqs
    qsl = np.zeros(num_reqs + 1, np.int32)
    qsl[1:] = np.cumsum(query_lens)
    num_tokens = int(qsl[-1])
    # The builder's gather covers only the context above the replay start.
    gather_lens = np.array([q + min(max(s - q - r, 0), WINDOW - 1)
                            for s, q, r in zip(seq_lens, query_lens, replay_starts)], np.int32)
    N = ceil_div(max(seq_lens), compress_ratio)
    M = N + int(gather_lens.max()) + 8
    rng = np.random.default_rng(0)
    # Top-k values from [0, 4096), most of them >= N: the V4 combine passes them through as v + M * b.
    topk_indices = rng.integers(0, N if in_range_topk else 4096, (num_tokens, max(topk, 1)), dtype=np.int32)

    lefts, rights = ref_left_right(seq_lens, query_lens, spans if with_image else [[] for _ in seq_lens], MAX_IMG)
    left_t = i32(xp, lefts) if with_image else None
    right_t = i32(xp, rights) if with_image else None
    ec = i32(xp, [0])
    # vLLM's V4 combine has the visibility parameters, so max_image_tokens is passed either way; V4.1's has none.
    has_image = semantics != "vllm_v41"
    image_kwargs = dict(left_visible=left_t, right_visible=right_t, max_image_tokens=MAX_IMG) if has_image else {}
    indices, lens = dsv4kv.combine_topk_swa_indices(
        xp.from_np(topk_indices), i32(xp, qsl), i32(xp, seq_lens), i32(xp, gather_lens), WINDOW, compress_ratio,
        topk, M, N, **image_kwargs, semantics=semantics, error_count=ec)

    width = ceil_div(topk + WINDOW + (MAX_IMG if has_image else 0), L.kCombineRowAlignment) * L.kCombineRowAlignment
    rows, exp_lens, token = [], [], 0
    for b, (seq_len, query_len) in enumerate(zip(seq_lens, query_lens)):
        gather_start = seq_len - int(gather_lens[b])
        for i in range(query_len):
            pos = seq_len - query_len + i
            topk_len = min((pos + 1) // compress_ratio, topk)
            start, end = ref_swa_bounds(pos, WINDOW, lefts[token], rights[token])
            start = max(start, gather_start)  # the window never reaches below the gathered buffer
            row = [-1] * width
            for j in range(topk_len):
                row[j] = int(topk_indices[token, j]) + M * b
            for j in range(end - start):
                row[topk_len + j] = M * b + N + start + j - gather_start
            rows.append(row)
            exp_lens.append(topk_len + end - start)
            token += 1
    return host(xp, indices), host(xp, lens), rows, exp_lens, int(host(xp, ec)[0])


COMBINE_CASES = [dict(compress_ratio=1, topk=0), dict(compress_ratio=4, topk=16)]
#: The DeepSeek-V4 combine: the seed's and current vLLM's (profile vllm_v4).
V4_PROFILES = ["seed", "vllm_v4"]


@pytest.mark.parametrize("semantics", V4_PROFILES)
@pytest.mark.parametrize("cfg", COMBINE_CASES)
def test_combine_topk_swa_with_image_spans(xp, cfg, semantics):
    case = CASES[0]
    indices, lens, rows, exp_lens, ec = combine_case(xp, cfg["compress_ratio"], cfg["topk"], case["seq_lens"],
                                                     case["query_lens"], case["spans"], with_image=True,
                                                     semantics=semantics)
    assert lens.tolist() == exp_lens
    assert indices.tolist() == rows
    assert ec == 0


@pytest.mark.parametrize("semantics", V4_PROFILES)
@pytest.mark.parametrize("cfg", COMBINE_CASES)
def test_combine_topk_swa_without_image_unchanged(xp, cfg, semantics):
    """left_visible=None must reproduce the plain causal combined indices."""
    case = CASES[0]
    indices, lens, rows, exp_lens, ec = combine_case(xp, cfg["compress_ratio"], cfg["topk"], case["seq_lens"],
                                                     case["query_lens"], case["spans"], with_image=False,
                                                     semantics=semantics)
    assert lens.tolist() == exp_lens
    assert indices.tolist() == rows


@pytest.mark.parametrize("cfg", COMBINE_CASES)
@pytest.mark.parametrize("query_len", [24, 20])
def test_v41_combine_topk_swa_stops_at_replay_start(xp, cfg, query_len):
    """SWA bounded replay: the gathered buffer starts at replay_start, so the window never indexes
    below it (V4.1's combine: profile vllm_v41)."""
    # Request 0 replays from 16: a 24-token chunk starts there, a 20-token chunk leaves only 4
    # context tokens above it (fewer than the window).
    indices, lens, rows, exp_lens, ec = combine_case(xp, cfg["compress_ratio"], cfg["topk"], [40, 12],
                                                     [query_len, 12], [[], []], with_image=False,
                                                     replay_starts=[16, 0], semantics="vllm_v41",
                                                     in_range_topk=True)
    assert lens.tolist() == exp_lens
    assert indices.tolist() == rows
    assert ec == 0


@pytest.mark.parametrize("compress_ratio", [0, 1, 2])
@pytest.mark.parametrize("query_len", [100, 4000])
def test_v41_image_prefill_uses_causal_swa(xp, compress_ratio, query_len):
    """The combine half of upstream's test: V4.1's combine with no top-k (compress_ratio 0 included)
    gives each token its causal window of the gathered rows [n, m). Upstream takes n, m and
    gather_len from its metadata builder's chunk plan (gather_len = query_len + min(seq_len -
    query_len, window - 1)); here they are that plan's values."""
    seq_len, window = 4000, 128
    gather_len = query_len + min(seq_len - query_len, window - 1)
    n = 17  # any compressed-row count; the plan's m - n is gather_len
    m = n + gather_len
    indices, lens = dsv4kv.combine_topk_swa_indices(
        xp.from_np(np.zeros((query_len, 0), np.int32)), i32(xp, [0, query_len]), i32(xp, [seq_len]),
        i32(xp, [gather_len]), window, compress_ratio, 0, m, n, semantics="vllm_v41")
    indices, lens = host(xp, indices), host(xp, lens).tolist()
    for token, pos in enumerate(range(seq_len - query_len, seq_len)):
        lo, hi = max(0, pos - window + 1), pos + 1
        row = indices[token, : lens[token]]
        assert lens[token] == hi - lo
        assert np.all((row >= n) & (row < m))
        assert (row - n + seq_len - gather_len).tolist() == list(range(lo, hi))


def test_v41_combine_drops_out_of_range_topk(xp):
    """dsv4kv: V4.1's rule for top-k values outside [0, N) (vLLM deepseek_v41 combine at 091b5c26:
    they become -1 and keep their place in the length); the V4 profiles offset them."""
    topk = np.array([[0, 3, 4, 9, -1, 2]], np.int32)  # N = 4: 4 and 9 are past the compressed rows
    args = (xp.from_np(topk), i32(xp, [0, 1]), i32(xp, [24]), i32(xp, [24]), 4, 4, 6, 100, 4)
    ec = i32(xp, [0])
    idx, lens = dsv4kv.combine_topk_swa_indices(*args, semantics="vllm_v41", error_count=ec)
    assert host(xp, idx)[0, :10].tolist() == [0, 3, -1, -1, -1, 2, 4 + 20, 4 + 21, 4 + 22, 4 + 23]
    assert host(xp, lens).tolist() == [10]
    assert int(host(xp, ec)[0]) == 0  # upstream's rule, not a bad value
    idx, lens = dsv4kv.combine_topk_swa_indices(*args, semantics="vllm_v4")
    assert host(xp, idx)[0, :6].tolist() == [0, 3, 4, 9, -1, 2]
    assert host(xp, lens).tolist() == [10]


@pytest.mark.parametrize("semantics", V4_PROFILES)
def test_flashinfer_mixed_sparse_indices_with_image_spans(xp, semantics):
    # 1 decode token (req 0) + two prefill requests (reqs 1, 2).
    seq_lens = [20, 30, 9]
    query_lens = [1, 30, 9]
    spans = [[], [(4, 12)], [(0, 6)]]
    block_table = np.arange(3, dtype=np.int32).reshape(3, 1)
    lefts, rights = ref_left_right(seq_lens, query_lens, spans, MAX_IMG)
    sparse_indices, sparse_lens = dsv4kv.build_flashinfer_mixed_sparse_indices(
        decode_swa_indices=i32(xp, [[100, 101, 102, 103, 104, 105, 106, 107]]),
        decode_compressed_indices=None,
        decode_compressed_topk_lens=None,
        prefill_topk_indices=xp.from_np(np.zeros((39, 0), np.int32)),
        query_start_loc=i32(xp, [0, 1, 31, 40]),
        seq_lens=i32(xp, seq_lens),
        token_to_req_indices=i32(xp, [0] + [1] * 30 + [2] * 9),
        swa_block_table=xp.from_np(block_table),
        swa_block_size=SWA_BLOCK_SIZE,
        compressed_block_table=None,
        compressed_block_size=SWA_BLOCK_SIZE,
        window_size=WINDOW,
        compress_ratio=1,
        topk=0,
        prefill_left_visible=i32(xp, lefts),
        prefill_right_visible=i32(xp, rights),
        max_image_tokens=MAX_IMG,
        semantics=semantics,
    )
    swa_total = WINDOW + MAX_IMG
    indices, lens = host(xp, sparse_indices), host(xp, sparse_lens)
    assert indices.shape == (40, swa_total)
    assert lens.tolist() == [swa_total] * 40
    assert indices[0, :WINDOW].tolist() == list(range(100, 108))  # decode row: copied
    assert indices[0, WINDOW:].tolist() == [-1] * MAX_IMG  # image columns padded with -1
    exp_rows, _ = ref_swa_slot_rows(seq_lens, query_lens, spans, block_table, WINDOW, MAX_IMG, swa_total)
    assert indices[1:].tolist() == exp_rows[1:]


# ===========================================================================
# tests/kernels/attention/test_flashmla_sparse.py: the build_flashinfer_mixed_sparse_indices tests
# ===========================================================================
@pytest.mark.parametrize("semantics", ["seed", "vllm_v4", "vllm_v41"])
def test_flashinfer_mixed_sparse_indices_separates_window_and_padded_width(xp, semantics):
    padded_width, logical_window = 8, 4
    sparse_indices, sparse_lens = dsv4kv.build_flashinfer_mixed_sparse_indices(
        decode_swa_indices=xp.from_np(np.zeros((0, padded_width), np.int32)),
        decode_compressed_indices=None,
        decode_compressed_topk_lens=None,
        prefill_topk_indices=xp.from_np(np.zeros((1, 0), np.int32)),
        query_start_loc=i32(xp, [0, 1]),
        seq_lens=i32(xp, [logical_window]),
        token_to_req_indices=i32(xp, [0]),
        swa_block_table=i32(xp, [[0]]),
        swa_block_size=64,
        compressed_block_table=None,
        compressed_block_size=64,
        window_size=logical_window,
        compress_ratio=1,
        topk=0,
        semantics=semantics,
        **({"replay_start": i32(xp, [0])} if semantics == "vllm_v41" else {}),
    )
    indices = host(xp, sparse_indices)
    assert indices.shape == (1, padded_width)
    assert indices[0].tolist() == [0, 1, 2, 3, -1, -1, -1, -1]
    assert host(xp, sparse_lens).tolist() == [padded_width]


@pytest.mark.parametrize("semantics", V4_PROFILES)
def test_flashinfer_mixed_sparse_indices_noncausal_rows_have_no_active_gaps(xp, semantics):
    """A DSpark non-causal row keeps -1 out of the kernel's active ranges (current vLLM,
    profile vllm_v4): each draft token's causal window holds its first visible entries, the rest
    of the block starts at column `window`, and the compressed entries follow directly. The seed
    has no DSpark rows: decode rows copy their SWA indices, the whole SWA region counts, and the
    compressed columns follow at column SW (spec/operations.md, build_flashinfer_mixed_sparse_indices,
    "Profile vllm_v4")."""
    window, width = 4, 8
    # One request: 1 context token, a 2-token draft block, slots 0..2 visible.
    decode_swa = np.full((2, width), -1, np.int32)
    decode_swa[:, :3] = np.arange(3)
    sparse_indices, sparse_lens = dsv4kv.build_flashinfer_mixed_sparse_indices(
        decode_swa_indices=xp.from_np(decode_swa),
        decode_compressed_indices=i32(xp, [[100, 101, -1, -1]] * 2),
        decode_compressed_topk_lens=i32(xp, [2, 2]),
        prefill_topk_indices=xp.from_np(np.zeros((0, 4), np.int32)),
        query_start_loc=i32(xp, [0, 2]),
        seq_lens=i32(xp, [3]),
        token_to_req_indices=i32(xp, [0, 0]),
        swa_block_table=i32(xp, [[0]]),
        swa_block_size=64,
        compressed_block_table=i32(xp, [[0]]),
        compressed_block_size=64,
        window_size=window,
        compress_ratio=128,
        topk=0,
        semantics=semantics,
    )
    if semantics == "seed":
        seed_row = [0, 1, 2, -1, -1, -1, -1, -1, 100, 101, -1, -1]
        assert host(xp, sparse_indices).tolist() == [seed_row, seed_row]
        assert host(xp, sparse_lens).tolist() == [width + 2, width + 2]
        return
    assert host(xp, sparse_indices).tolist() == [
        # pos 1: window [0, 1]; slot 2 spills to column 4; compressed after it.
        [0, 1, -1, -1, 2, 100, 101, -1, -1, -1, -1, -1],
        # pos 2: window [0, 1, 2]; nothing spills; compressed at column 4.
        [0, 1, 2, -1, 100, 101, -1, -1, -1, -1, -1, -1],
    ]
    assert host(xp, sparse_lens).tolist() == [7, 6]


@pytest.mark.parametrize("semantics", V4_PROFILES)
def test_flashinfer_mixed_sparse_indices_noncausal_pad_rows_keep_min_length(xp, semantics):
    """A CUDA-graph pad token of the DSpark graph (a zero-length request) gets a causal pad row's
    shape instead of negative spill arithmetic (vllm_v4: lengths [129, 128, 128]). The seed's
    decode rows count the whole SWA region, 192. The pad token's row is all -1 in both."""
    window, width = 128, 192
    decode_swa = np.full((3, width), -1, np.int32)
    decode_swa[:2, :3] = np.arange(3)
    sparse_indices, sparse_lens = dsv4kv.build_flashinfer_mixed_sparse_indices(
        decode_swa_indices=xp.from_np(decode_swa),
        decode_compressed_indices=None,
        decode_compressed_topk_lens=None,
        prefill_topk_indices=xp.from_np(np.zeros((0, 0), np.int32)),
        # Request 1 is the padding: no query tokens, seq_len 0.
        query_start_loc=i32(xp, [0, 2, 2]),
        seq_lens=i32(xp, [3, 0]),
        token_to_req_indices=i32(xp, [0, 0, 1]),
        swa_block_table=xp.from_np(np.zeros((2, 1), np.int32)),
        swa_block_size=64,
        compressed_block_table=None,
        compressed_block_size=64,
        window_size=window,
        compress_ratio=1,
        topk=0,
        semantics=semantics,
    )
    indices = host(xp, sparse_indices)
    assert host(xp, sparse_lens).tolist() == ([width] * 3 if semantics == "seed" else [129, 128, 128])
    assert (indices[2] == -1).all()
    if semantics == "seed":
        assert indices[:2].tolist() == decode_swa[:2].tolist()


def test_v41_flashinfer_mixed_sparse_indices_respect_replay_start(xp):
    """V4.1's builder (profile vllm_v41): the decode row is copied through; prefill rows follow
    the window bounded at each request's replay_start."""
    # 1 decode token (req 0) + two prefill requests; req 1 resumes at 16.
    seq_lens = [20, 40, 9]
    query_lens = [1, 24, 9]
    replay_starts = [0, 16, 0]
    block_table = np.arange(3, dtype=np.int32).reshape(3, 1)
    kwargs = dict(
        decode_swa_indices=xp.from_np(np.zeros((1, WINDOW), np.int32)),
        decode_compressed_indices=None,
        decode_compressed_topk_lens=None,
        prefill_topk_indices=xp.from_np(np.zeros((33, 0), np.int32)),
        query_start_loc=i32(xp, [0, 1, 25, 34]),
        seq_lens=i32(xp, seq_lens),
        token_to_req_indices=i32(xp, [0] + [1] * 24 + [2] * 9),
        swa_block_table=xp.from_np(block_table),
        swa_block_size=BLOCK_SIZE,
        compressed_block_table=None,
        compressed_block_size=BLOCK_SIZE,
        window_size=WINDOW,
        compress_ratio=1,
        topk=0,
        semantics="vllm_v41",
    )
    plain, _ = dsv4kv.build_flashinfer_mixed_sparse_indices(replay_start=i32(xp, [0, 0, 0]), **kwargs)
    bounded, _ = dsv4kv.build_flashinfer_mixed_sparse_indices(replay_start=i32(xp, replay_starts), **kwargs)
    rows, _ = ref_swa_slot_rows(seq_lens, query_lens, [[], [], []], block_table, WINDOW, MAX_IMG, WINDOW,
                                replay_starts=replay_starts)
    assert host(xp, bounded)[0].tolist() == host(xp, plain)[0].tolist()
    assert host(xp, bounded)[1:].tolist() == rows[1:]

# ---------------------------------------------------------------------------
# DeepSeek-V4.1 records (spec "Cache records"). Upstream's
# test_v41_rope_insert_nvfp4_record drives its fused RoPE writer; dsv4kv's quantize takes the
# rotated row, so the port quantizes a random row (its assertions do not depend on the rotation).
# References from the tests' own definitions (NumPy, ml_dtypes' e4m3fn).
# ---------------------------------------------------------------------------
def random_keys(rng, t: int, dim: int) -> np.ndarray:
    return (rng.standard_normal((t, dim)) * rng.choice([0.01, 1.0, 30.0], size=(t, 1))).astype(BF16)


def cache(xp, blocks: int, page: int):
    return xp.from_np(np.full((blocks, page), PAD, dtype=np.uint8))


def slots_for(rng, t: int, blocks: int, block_size: int) -> np.ndarray:
    s = rng.permutation(blocks * block_size)[:t].astype(np.int64)
    s[rng.random(t) < 0.1] = -1
    return s


def test_v41_mxfp8_cache_round_trip(xp):
    rng = np.random.default_rng(41)
    B, T, blocks = 64, 150, 4
    page = page_bytes(B, 528) + 64  # upstream pads the page past the record's bytes
    k = random_keys(rng, T, 512)
    slots = slots_for(rng, T, blocks, B)
    kc = cache(xp, blocks, page)
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(k), kc, xp.from_np(slots), B, bytes_per_token=528)  # vLLM's call
    xp.synchronize()
    got = xp.to_np(kc)
    want = np.full((blocks, page), PAD, dtype=np.uint8)
    x = k.astype(np.float32)
    for t, s in enumerate(slots):
        if s < 0:
            continue
        b, p = divmod(int(s), B)
        tiles = x[t].reshape(16, 32)
        amax = np.maximum(np.abs(tiles).max(1), np.float32(1e-4))
        exponent = np.ceil(np.log2(amax.astype(np.float64) / 448.0))
        scale = np.exp2(exponent)
        q = np.clip(tiles / scale[:, None], -448, 448).astype(E4M3)
        want[b, p * 512:(p + 1) * 512] = q.view(np.uint8).reshape(-1)
        want[b, B * 512 + p * 16:B * 512 + (p + 1) * 16] = (exponent + 127).astype(np.uint8)
    np.testing.assert_array_equal(got, want)

    # The gather: within 16 scale units of each tile, as upstream asserts.
    seq = np.array([B * blocks], dtype=np.int32)
    table = np.arange(blocks, dtype=np.int32)[None]
    out = xp.from_np(np.zeros((1, B * blocks, 512), dtype=BF16))
    dsv4kv.dequantize_and_gather_k_cache(out, kc, xp.from_np(seq), None, xp.from_np(table), B, 0,
                                         record="mxfp8_ds_mla")
    xp.synchronize()
    deq = xp.to_np(out).astype(np.float32)[0]
    for t, s in enumerate(slots):
        if s < 0:
            continue
        tiles = x[t].reshape(16, 32)
        bound = 16 * np.exp2(np.ceil(np.log2(np.maximum(np.abs(tiles).max(1), 1e-4) / 448.0)))
        err = np.abs(deq[s].reshape(16, 32) - tiles).max(1)
        assert np.all(err <= bound), (t, err, bound)


def test_v41_nvfp4_record(xp):
    rng = np.random.default_rng(288)
    B, T, blocks = 64, 130, 3
    page = page_bytes(B, 288)
    # Upstream's distribution (standard normal): its one-scale bound assumes normal e4m3 scales; a
    # group whose amax / 6 lies below 2^-6 gets a subnormal scale, up to 1/3 too small, and its
    # saturated values miss by more (spec "Cache records": the bound of the properties covers them).
    k = rng.standard_normal((T, 512)).astype(BF16)
    slots = slots_for(rng, T, blocks, B)
    kc = cache(xp, blocks, page)
    count = xp.from_np(np.zeros(1, dtype=np.int32))
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(k), kc, xp.from_np(slots), B, record="nvfp4_ds_mla",
                                       error_count=count)
    xp.synchronize()
    got = xp.to_np(kc)
    assert int(xp.to_np(count)[0]) == 0
    written = np.zeros((blocks, page), dtype=bool)
    x = k.astype(np.float32)
    for t, s in enumerate(slots):
        if s < 0:
            continue
        b, p = divmod(int(s), B)
        groups = x[t].reshape(32, 16)
        scale = np.clip(np.abs(groups).max(1) / 6, 2.0**-9, 448).astype(E4M3)
        sb = got[b, B * 256 + p * 32:B * 256 + (p + 1) * 32]
        np.testing.assert_array_equal(sb, scale.view(np.uint8))
        decoded = unpack(got[b, p * 256:(p + 1) * 256]).reshape(32, 16) * scale.astype(np.float64)[:, None]
        assert np.all(np.abs(decoded - groups) <= scale.astype(np.float64)[:, None])
        written[b, p * 256:(p + 1) * 256] = True
        written[b, B * 256 + p * 32:B * 256 + (p + 1) * 32] = True
    assert np.all(got[~written] == PAD)


@pytest.mark.parametrize("num_reqs,num_tokens", [(1, 70), (8, 128), (3, 129)])
def test_v41_nvfp4_gather_matches_insert(xp, num_reqs, num_tokens):
    rng = np.random.default_rng(num_reqs * 1000 + num_tokens)
    B = 64
    per_req = math.ceil(num_tokens / B)
    blocks = num_reqs * per_req + 1
    page = page_bytes(B, 288)
    k = random_keys(rng, num_reqs * num_tokens, 512)
    table = rng.permutation(blocks)[:num_reqs * per_req].reshape(num_reqs, per_req).astype(np.int32)
    slots = np.array([table[r, i // B] * B + i % B for r in range(num_reqs) for i in range(num_tokens)], np.int64)
    kc = cache(xp, blocks, page)
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(k), kc, xp.from_np(slots), B, record="nvfp4_ds_mla")
    seq = np.full(num_reqs, num_tokens, dtype=np.int32)
    gl = seq - 3
    offset = 7
    out_np = np.full((num_reqs, offset + num_tokens, 512), -123, dtype=np.float32).astype(BF16)
    out = xp.from_np(out_np)
    dsv4kv.dequantize_and_gather_k_cache(out, kc, xp.from_np(seq), xp.from_np(gl), xp.from_np(table), B, offset,
                                         record="nvfp4_ds_mla")
    xp.synchronize()
    got = xp.to_np(out)
    cache_np = xp.to_np(kc)
    want = out_np.copy()
    for r in range(num_reqs):
        for i in range(int(gl[r])):
            pos = int(seq[r] - gl[r]) + i
            b, p = int(table[r, pos // B]), pos % B
            scale = cache_np[b, B * 256 + p * 32:B * 256 + (p + 1) * 32].view(E4M3).astype(np.float64)
            row = unpack(cache_np[b, p * 256:(p + 1) * 256]).reshape(32, 16) * scale[:, None]
            want[r, offset + i] = row.reshape(-1).astype(np.float32).astype(BF16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_indexer_key_cache_is_segregated_not_interleaved(xp):
    rng = np.random.default_rng(68)
    B, T, blocks = 64, 100, 2
    page = page_bytes(B, 68)
    k = random_keys(rng, T, 128)
    slots = slots_for(rng, T, blocks, B)
    kc = cache(xp, blocks, page)
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(k), kc, xp.from_np(slots), B, record="mxfp4_indexer")
    xp.synchronize()
    got = xp.to_np(kc)
    want = np.full((blocks, page), PAD, dtype=np.uint8)
    x = k.astype(np.float32)
    for t, s in enumerate(slots):
        if s < 0:
            continue
        b, r = divmod(int(s), B)
        groups = x[t].reshape(4, 32)
        amax = np.maximum(np.abs(groups).max(1), np.float32(6 * 2.0**-126))
        e = np.clip(np.ceil(np.log2(amax.astype(np.float64) / 6)), -127, 127)
        want[b, r * 64:(r + 1) * 64] = pack(e2m1(groups * np.exp2(-e)[:, None])).reshape(-1)
        want[b, B * 64 + r * 4:B * 64 + (r + 1) * 4] = (e + 127).astype(np.uint8)
    np.testing.assert_array_equal(got, want)

    # dsv4kv's gather of the key (upstream has none): every slot, the host decoder, exactly.
    seq = np.array([B * blocks], dtype=np.int32)
    table = np.arange(blocks, dtype=np.int32)[None]
    out = xp.from_np(np.zeros((1, B * blocks, 128), dtype=BF16))
    dsv4kv.dequantize_and_gather_k_cache(out, kc, xp.from_np(seq), None, xp.from_np(table), B, 0,
                                         record="mxfp4_indexer")
    xp.synchronize()
    deq = xp.to_np(out)[0]
    for s in range(B * blocks):
        b, r = divmod(s, B)
        e = got[b, B * 64 + r * 4:B * 64 + (r + 1) * 4].astype(np.float64) - 127
        row = unpack(got[b, r * 64:(r + 1) * 64]).reshape(4, 32) * np.exp2(e)[:, None]
        want_row = row.reshape(-1).astype(np.float32).astype(BF16)
        np.testing.assert_array_equal(deq[s].view(np.uint16), want_row.view(np.uint16))


def test_records_keyword_and_errors():
    assert dsv4kv.RECORDS == ("fp8_ds_mla", "mxfp8_ds_mla", "nvfp4_ds_mla", "mxfp4_indexer")
    k = np.zeros((1, 512), dtype=BF16)
    kc = np.zeros((1, 64 * 528), dtype=np.uint8)
    slots = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="record must be one of fp8_ds_mla, mxfp8_ds_mla, nvfp4_ds_mla, "
                                         "mxfp4_indexer, got 'mxfp8'"):
        dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64, record="mxfp8")
    with pytest.raises(ValueError, match="k_cache must hold at least block_size\\*584 = 37376 bytes per block"):
        dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64)
    with pytest.raises(ValueError, match="use_fnuz must be False with record mxfp8_ds_mla"):
        dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64, use_fnuz=True, record="mxfp8_ds_mla")
    dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64, record="mxfp8_ds_mla")
    assert kc[0, 64 * 512] == 105  # an all-zero group's scale byte


def test_vllm_v41_keywords():
    """vLLM V4.1's bytes_per_token= names the record by its width; max_gather_len= is checked, and changes no byte."""
    width = {n: dsv4kv._ext.inspect_record_layout(n)[4] for n in dsv4kv.RECORDS}  # bytes per token
    mx, default = width["mxfp8_ds_mla"], width["fp8_ds_mla"]
    rng = np.random.default_rng(5)
    k = random_keys(rng, 3, 512)
    slots = np.array([0, 5, 70], dtype=np.int64)
    caches = {}
    for how in ({"record": "mxfp8_ds_mla"}, {"bytes_per_token": mx}, {"bytes_per_token": mx, "record": "mxfp8_ds_mla"},
                {"bytes_per_token": np.int32(mx)}):
        kc = np.full((2, 64 * mx), PAD, dtype=np.uint8)
        dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64, **how)
        caches[str(how)] = kc
    first = next(iter(caches.values()))
    for how, kc in caches.items():
        np.testing.assert_array_equal(kc, first, err_msg=how)
    assert not np.array_equal(first, np.full_like(first, PAD))
    kc = np.zeros((2, 64 * default), dtype=np.uint8)
    listed = ", ".join(str(width[n]) for n in dsv4kv.RECORDS)
    with pytest.raises(ValueError, match=rf"bytes_per_token must be the token bytes of a record \({listed}\), got 512"):
        dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64, bytes_per_token=512)
    with pytest.raises(ValueError, match=rf"bytes_per_token must be the token bytes of a record \({listed}\), got {2**70}"):
        dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64, bytes_per_token=2**70)
    with pytest.raises(ValueError, match=f"bytes_per_token={mx} is record mxfp8_ds_mla, but record='nvfp4_ds_mla'"):
        dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64, bytes_per_token=mx, record="nvfp4_ds_mla")
    with pytest.raises(TypeError, match="bytes_per_token must be an integer, got bool"):
        dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64, bytes_per_token=True)
    dsv4kv.quantize_and_insert_k_cache(k, kc, slots, 64, bytes_per_token=default)  # the default record, by width
    seq = np.array([71], dtype=np.int32)
    table = np.array([[0, 1]], dtype=np.int32)
    outs = []
    for extra in ({}, {"max_gather_len": 71}, {"max_gather_len": 0}):  # too small a bound still gathers every row
        out = np.zeros((1, 72, 512), dtype=BF16)
        dsv4kv.dequantize_and_gather_k_cache(out, kc, seq, None, table, 64, 1, **extra)
        outs.append(out.view(np.uint16))
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(outs[2], outs[0])
    assert np.any(outs[0][0, 71] != 0)  # the last row (position 70) was gathered
    with pytest.raises(ValueError, match="max_gather_len must be >= 0, got -1"):
        dsv4kv.dequantize_and_gather_k_cache(out, kc, seq, None, table, 64, 1, max_gather_len=-1)
    with pytest.raises(TypeError, match="max_gather_len must be an integer, got float"):
        dsv4kv.dequantize_and_gather_k_cache(out, kc, seq, None, table, 64, 1, max_gather_len=7.0)
