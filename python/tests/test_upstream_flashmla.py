"""FlashMLA's tests/quant.py round trip, ported to run against dsv4kv (drop-in fidelity:
upstream's own tests must pass), and the floor variants of SGLang and FlashMLA (spec/numerics.md,
"Other implementations' floors"), on NumPy arrays, torch CPU tensors and torch CUDA tensors
(conftest.py's fixture ``xp``).

Upstream: deepseek-ai/FlashMLA tests/quant.py and tests/lib.py at 9241ae3.
FlashMLA's sparse tests build their KV cache with ``quantize_k_cache(blocked_k,
MODEL1_FP8Sparse)`` and compare the attention kernels against ``dequantize_k_cache`` of that
cache (``KVScope.quant_and_dequant_``); the data is ``randn / 10`` clamped to [-1, 1] in bf16,
with every KV row no index selects set to NaN so that a stray read shows. ``quant.py`` also
holds ``abs_indices2indices_in_kvcache``, the block-table translation that
compute_global_topk_indices_and_lens performs. FlashMLA states no tolerance of its own for the
round trip: the ports assert that dsv4kv writes FlashMLA's bytes wherever the two floors agree,
that each reads the other's caches exactly as the other does, and the error bounds of vLLM's
round-trip test under each implementation's own scale.

References (quantizers and decoders) are written here from the upstream semantics in
_upstream.py; nothing is copied.
"""

from __future__ import annotations

import numpy as np
import pytest

import dsv4kv
from _upstream import (BF16, FP8_MAX, ceil_div, decode_record, e4m3_to_f32, host, quantize_tiles, same_bf16,
                       tile_exponents, token_record, write_cache_reference)

L = dsv4kv.layout

#: FlashMLA's FP8KVCacheLayout.MODEL1_FP8Sparse.get_meta(): (d, d_nope, d_rope, tile_size, num_tiles),
#: its per-token bytes d_nope + 2 * d_rope + num_tiles + 1 and its page rounding unit (facts of
#: FlashMLA, compared below with dsv4kv's layout).
FLASHMLA_MODEL1 = dict(d=512, d_nope=448, d_rope=64, tile_size=64, num_tiles=7, page_rounding=576)

#: FlashMLA's quantizer on a NaN tile: NaN amax -> NaN scale (e8m0 byte 0xFF), x / NaN -> e4m3 NaN.
FLASHMLA_NAN_TILE = (0xFF, 0x7F)


def i32(xp, values):
    return xp.from_np(np.asarray(values, np.int32))


def quantize_with_dsv4kv(xp, k: np.ndarray, num_blocks: int, block_size: int):
    """Tokens t -> slot t of a zeroed cache of vLLM's (= FlashMLA's) page size; returns the host
    cache and error_count."""
    cache = xp.from_np(np.zeros((num_blocks, L.vllm_block_stride(block_size)), np.uint8))
    ec = i32(xp, [0])
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(k), cache, xp.from_np(np.arange(k.shape[0], dtype=np.int64)),
                                       block_size, error_count=ec)
    return host(xp, cache), int(host(xp, ec)[0])


def gather_all_with_dsv4kv(xp, cache_host: np.ndarray, num_tokens: int, block_size: int) -> np.ndarray:
    """bf16 bits [num_tokens, 512] of slots 0..num_tokens-1: one request over the blocks in order."""
    out = xp.from_np(np.zeros((1, num_tokens, L.kHeadDim), BF16))
    dsv4kv.dequantize_and_gather_k_cache(out, xp.from_np(cache_host), i32(xp, [num_tokens]), None,
                                         i32(xp, np.arange(cache_host.shape[0])[None, :]), block_size, 0)
    return host(xp, out)[0].view(np.uint16)


def decode_all(cache_host: np.ndarray, num_tokens: int, block_size: int, rule: str) -> np.ndarray:
    return np.stack([decode_record(*token_record(cache_host, t // block_size, t % block_size, block_size), rule)
                     for t in range(num_tokens)])


def records_equal(a: np.ndarray, b: np.ndarray, t: int, block_size: int) -> bool:
    ra = token_record(a, t // block_size, t % block_size, block_size)
    rb = token_record(b, t // block_size, t % block_size, block_size)
    return all(np.array_equal(x, y) for x, y in zip(ra, rb))


def flashmla_blocked_k(rng, num_blocks: int, block_size: int, nan_fraction: float = 0.25):
    """KV rows as FlashMLA's generate_one_k_scope makes them: randn / 10 clamped to [-1, 1] in
    bf16, then the rows no index uses set to NaN (here a random quarter of the rows)."""
    n = num_blocks * block_size
    k = np.clip(rng.standard_normal((n, L.kHeadDim)) / 10, -1, 1).astype(np.float32).astype(BF16)
    nan_rows = rng.random(n) < nan_fraction
    k[nan_rows] = np.float32(np.nan)
    return k, nan_rows


def test_model1_layout_is_dsv4kv_layout():
    """FlashMLA's MODEL1_FP8Sparse page: [B x (448 FP8 + 64 bf16)] then [B x 8 bytes, 7 UE8M0 +
    1 unused], padded to a multiple of 576 bytes: dsv4kv's layout, byte for byte."""
    m = FLASHMLA_MODEL1
    assert (m["d"], m["d_nope"], m["d_rope"], m["tile_size"], m["num_tiles"]) == (
        L.kHeadDim, L.kNopeDim, L.kRopeDim, L.kTileSize, L.kNumTiles)
    bytes_per_token = m["d_nope"] + 2 * m["d_rope"] + m["num_tiles"] + 1
    assert bytes_per_token == L.kTokenBytes and m["page_rounding"] == L.kVllmBlockRounding
    for bs in (1, 16, 64, 128):
        padded = ceil_div(bs * bytes_per_token, m["page_rounding"]) * m["page_rounding"]
        assert padded == L.vllm_block_stride(bs)
        data = m["d_nope"] + 2 * m["d_rope"]
        for p in (0, 1, bs - 1):
            assert L.token_data_offset(p) == p * data
            assert L.rope_offset(p) == p * data + m["d_nope"]
            assert L.scale_offset(bs, p, 0) == bs * data + p * (m["num_tiles"] + 1)


@pytest.mark.parametrize("block_size", [64, 16])
def test_quant_round_trip_matches_flashmla(xp, block_size):
    """KVScope.quant_and_dequant_ on FlashMLA's data, with dsv4kv as the quantizer and the gather."""
    num_blocks = 4
    rng = np.random.default_rng(block_size)
    k, nan_rows = flashmla_blocked_k(rng, num_blocks, block_size)
    n = k.shape[0]
    finite = ~nan_rows
    kf = k.astype(np.float32)
    # FlashMLA's data keeps every finite tile above FlashMLA's floor (amax > 448 * 2^-14), where
    # both floors give the same exponent.
    amax = np.abs(kf[finite, :L.kNopeDim].reshape(-1, L.kNumTiles, L.kTileSize)).max(-1)
    assert (amax > FP8_MAX * 2.0 ** -14).all()

    ours, ec = quantize_with_dsv4kv(xp, k, num_blocks, block_size)
    assert ec == int(nan_rows.sum()) * L.kNopeDim  # dsv4kv: each non-finite NoPE value is reported
    theirs = np.zeros_like(ours)
    write_cache_reference(k, theirs, np.arange(n), block_size, "flashmla", nan_tile_bytes=FLASHMLA_NAN_TILE)

    for t in np.flatnonzero(finite):
        assert records_equal(ours, theirs, t, block_size), f"token {t}: dsv4kv's bytes differ from FlashMLA's"

    # NaN rows: dsv4kv writes vLLM's measured bytes (the floor's scale byte, codes 0x7E), not
    # FlashMLA's NaN scale and NaN codes (the measured semantics are the definition:
    # spec/numerics.md "Non-finite keys"); the RoPE bytes (NaN) are copied by both.
    floor_byte = int(tile_exponents(np.zeros(L.kNopeDim, np.float32), "vllm")[0]) + L.kScaleBias
    for t in np.flatnonzero(nan_rows):
        codes, sbytes, rope = token_record(ours, t // block_size, t % block_size, block_size)
        assert (sbytes == floor_byte).all() and (codes == 0x7E).all()
        assert np.array_equal(rope, token_record(theirs, t // block_size, t % block_size, block_size)[2])

    got = gather_all_with_dsv4kv(xp, ours, n, block_size)
    # dsv4kv's gather of its own cache = FlashMLA's dequantize_k_cache of that cache, every row.
    same_bf16(got, decode_all(ours, n, block_size, "flashmla"), "dequantize(dsv4kv cache)")
    # ... = FlashMLA's own round trip on every finite row.
    same_bf16(got[finite], decode_all(theirs, n, block_size, "flashmla")[finite], "FlashMLA round trip")
    # dsv4kv reads a FlashMLA-written cache exactly as FlashMLA does, NaN rows included
    # (scale byte 255 -> inf, code 0x7F -> NaN: NaN either way).
    same_bf16(gather_all_with_dsv4kv(xp, theirs, n, block_size), decode_all(theirs, n, block_size, "flashmla"),
              "dsv4kv reading FlashMLA's cache")
    # The NaN rows come back finite from dsv4kv's cache (FlashMLA's own cache gives NaN).
    nope = got[nan_rows, :L.kNopeDim].view(BF16).astype(np.float32)
    assert np.isfinite(nope).all() and (nope == FP8_MAX * 2.0 ** (floor_byte - L.kScaleBias)).all()


def test_abs_indices_to_indices_in_kvcache(xp):
    """quant.py's abs_indices2indices_in_kvcache: [b, s_q, topk] request-local indices (unique,
    below the request's cache length, -1 padded, as _randperm_batch draws them) through the
    request's block-table row; -1 stays -1. dsv4kv's compute_global_topk_indices_and_lens on the
    flattened rows gives the same indices, and lengths = the number of valid entries."""
    rng = np.random.default_rng(11)
    b, s_q, topk, block_size = 3, 4, 64, 64
    cache_seqlens = np.array([200, 37, 0])
    max_blocks = ceil_div(int(cache_seqlens.max()), block_size) + 1
    block_table = rng.permutation(b * max_blocks).reshape(b, max_blocks).astype(np.int32)
    abs_indices = np.full((b, s_q, topk), -1, np.int32)
    for i in range(b):
        for q in range(s_q):
            k = min(topk, int(cache_seqlens[i]))
            abs_indices[i, q, :k] = rng.permutation(int(cache_seqlens[i]))[:k]
    expected = np.where(abs_indices == -1, -1,
                        block_table[np.arange(b)[:, None, None], np.maximum(abs_indices, 0) // block_size]
                        * block_size + np.maximum(abs_indices, 0) % block_size)

    ec = i32(xp, [0])
    out, lens = dsv4kv.compute_global_topk_indices_and_lens(
        xp.from_np(abs_indices.reshape(b * s_q, topk)), i32(xp, np.repeat(np.arange(b), s_q)),
        xp.from_np(block_table), block_size, xp.from_np(np.ones(b * s_q, np.bool_)), error_count=ec)
    np.testing.assert_array_equal(host(xp, out).reshape(b, s_q, topk), expected)
    np.testing.assert_array_equal(host(xp, lens), (abs_indices >= 0).sum(-1).reshape(-1))
    assert int(host(xp, ec)[0]) == 0


# ---------------------------------------------------------------------------
# The floors: SGLang (1e-8 before dividing) and FlashMLA (1e-4 after dividing) against vLLM's
# and dsv4kv's (1e-4 before dividing)
# ---------------------------------------------------------------------------
def tiles_across_magnitudes(rng, num_tokens: int) -> np.ndarray:
    """bf16 rows whose tiles' amax span 2^-34 .. 2^3, with the thresholds of numerics.md
    (448 * 2^-14, 448 * 2^-22, 448 * 2^-23), all-zero tiles and a 1e-9 tile placed exactly."""
    x = rng.standard_normal((num_tokens, L.kNumTiles, L.kTileSize))
    x /= np.abs(x).max(-1, keepdims=True)
    amax = 2.0 ** rng.uniform(-34, 3, (num_tokens, L.kNumTiles, 1))
    special = [FP8_MAX * 2.0 ** -14, FP8_MAX * 2.0 ** -22, FP8_MAX * 2.0 ** -23, 0.0, 1e-9, 1.0]
    amax.reshape(-1)[:len(special)] = special
    k = np.concatenate([(x * amax).reshape(num_tokens, L.kNopeDim),
                        rng.standard_normal((num_tokens, L.kRopeDim))], axis=1)
    return k.astype(np.float32).astype(BF16)


# Where a variant's exponent equals dsv4kv's (spec/numerics.md): FlashMLA above 448 * 2^-14,
# SGLang above 448 * 2^-23.
AGREE_ABOVE = {"flashmla": FP8_MAX * 2.0 ** -14, "sglang": FP8_MAX * 2.0 ** -23}
DECODE_RULE = {"flashmla": "flashmla", "sglang": "sglang"}


@pytest.mark.parametrize("variant", ["flashmla", "sglang"])
def test_floor_variants_bytes_and_decode(xp, variant):
    """dsv4kv writes the variant's bytes exactly where the floors agree and vLLM's elsewhere, and
    reads a cache the variant wrote exactly as the variant's own decoder does."""
    block_size, num_blocks = 16, 4
    n = block_size * num_blocks
    k = tiles_across_magnitudes(np.random.default_rng(21), n)
    kf = k.astype(np.float32)
    amax = np.abs(kf[:, :L.kNopeDim].reshape(n, L.kNumTiles, L.kTileSize)).max(-1)

    ours, ec = quantize_with_dsv4kv(xp, k, num_blocks, block_size)
    assert ec == 0
    theirs = np.zeros_like(ours)
    write_cache_reference(k, theirs, np.arange(n), block_size, variant)

    e_ours = tile_exponents(kf[:, :L.kNopeDim], "vllm")
    e_theirs = tile_exponents(kf[:, :L.kNopeDim], variant)
    for t in range(n):
        codes_o, s_o, _ = token_record(ours, t // block_size, t % block_size, block_size)
        codes_t, s_t, _ = token_record(theirs, t // block_size, t % block_size, block_size)
        np.testing.assert_array_equal(s_o.astype(np.int64) - L.kScaleBias, e_ours[t])  # dsv4kv = vLLM's floor
        agree = amax[t] > AGREE_ABOVE[variant]
        np.testing.assert_array_equal(agree, e_ours[t] == e_theirs[t], err_msg=f"token {t}: threshold")
        np.testing.assert_array_equal(s_o[agree], s_t[agree])
        np.testing.assert_array_equal(codes_o.reshape(L.kNumTiles, -1)[agree], codes_t.reshape(L.kNumTiles, -1)[agree])
        # Below the threshold: FlashMLA's exponent is larger (-13), SGLang's smaller (down to -35).
        if variant == "flashmla":
            assert (e_theirs[t][~agree] == -13).all() and (e_theirs[t][~agree] > e_ours[t][~agree]).all()
        else:
            assert (e_theirs[t][~agree] < e_ours[t][~agree]).all()
    assert (amax <= AGREE_ABOVE[variant]).sum() >= 10  # the case does exercise the difference

    # A cache any of them wrote is read the same by all: dsv4kv's gather of the variant's cache
    # equals the variant's own decoder.
    same_bf16(gather_all_with_dsv4kv(xp, theirs, n, block_size), decode_all(theirs, n, block_size,
                                                                           DECODE_RULE[variant]), variant)


@pytest.mark.parametrize("variant", ["flashmla", "sglang"])
def test_floor_variants_round_trip_bounds(xp, variant):
    """vLLM's round-trip bound (error <= 16 * the tile's scale: half an e4m3 ulp at 448) holds
    for dsv4kv with its own scale on every tile, and with the variant's scale wherever the variant's
    scale is not the finer one: FlashMLA's everywhere (its floor only coarsens), SGLang's above
    448 * 2^-23. Below that SGLang's finer grid gives at most dsv4kv's error, element by element;
    its tighter bound is not dsv4kv's claim there (spec/numerics.md, "Other implementations'
    floors": only tiles of small magnitude differ)."""
    block_size, num_blocks = 16, 4
    n = block_size * num_blocks
    k = tiles_across_magnitudes(np.random.default_rng(22), n)
    kf = k.astype(np.float32)
    nope = kf[:, :L.kNopeDim]

    ours, _ = quantize_with_dsv4kv(xp, k, num_blocks, block_size)
    rt_ours = gather_all_with_dsv4kv(xp, ours, n, block_size).view(BF16).astype(np.float64)[:, :L.kNopeDim]
    e_ours = tile_exponents(nope, "vllm")
    e_var = tile_exponents(nope, variant)
    # The variant's own round trip, from its reference encoder (values x / 2^e rounded to e4m3,
    # times 2^e, rounded to bf16, which is exact here).
    rt_var = (e4m3_to_f32(quantize_tiles(nope, e_var)).reshape(n, L.kNumTiles, L.kTileSize)
              * np.ldexp(1.0, e_var)[..., None]).reshape(n, -1)

    err_ours = np.abs(rt_ours - nope).reshape(n, L.kNumTiles, L.kTileSize)
    err_var = np.abs(rt_var - nope).reshape(n, L.kNumTiles, L.kTileSize)
    bound = lambda e: 16.0 * np.ldexp(1.0, e)[..., None]  # noqa: E731
    assert (err_ours <= bound(e_ours)).all()
    assert (err_var <= bound(e_var)).all()
    coarser_or_same = e_var >= e_ours
    assert (err_ours[coarser_or_same] <= bound(e_var)[coarser_or_same]).all()
    finer = ~coarser_or_same
    assert (err_var[finer] <= err_ours[finer]).all()
    assert (err_ours[coarser_or_same] <= err_var[coarser_or_same]).all()
    if variant == "sglang":
        assert finer.sum() >= 10 and (np.abs(nope).reshape(n, L.kNumTiles, -1).max(-1)[finer]
                                      <= AGREE_ABOVE["sglang"]).all()
    else:
        assert not finer.any()
