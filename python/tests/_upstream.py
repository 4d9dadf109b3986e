"""Shared pieces of the upstream-test ports (test_upstream_vllm.py, test_upstream_sglang.py,
test_upstream_flashmla.py).

The ports run on NumPy arrays, torch CPU tensors and torch CUDA tensors through the ``xp``
fixture of conftest.py.

* Reference encoders/decoders written from the upstream semantics (not their code), in NumPy:
  FP8 e4m3fn and bf16 conversions through ml_dtypes (round to nearest even), the UE8M0 scale of a
  tile under each upstream's amax floor, and the three upstream cache decoders.

Every layout number comes from ``dsv4kv.layout``; the floors below are the upstream
implementations' own constants (the facts under test), not the library's.
"""

from __future__ import annotations

from typing import Optional

import ml_dtypes
import numpy as np

import dsv4kv
from _support import BF16

L = dsv4kv.layout
E4M3 = ml_dtypes.float8_e4m3fn
#: e4m3fn's largest finite value: the fp8_max of every upstream quantizer (vLLM, SGLang, FlashMLA).
FP8_MAX = float(ml_dtypes.finfo(E4M3).max)

# The upstream quantizers' amax floors (spec/numerics.md, "Other implementations' floors").
#: vLLM (and its tests' _ue8m0_reference): max(amax, 1e-4) before dividing by fp8_max.
VLLM_FLOOR = np.float32(1e-4)
#: SGLang's quant_to_nope_fp8_rope_bf16_pack_triton: EPS = 1e-8, before dividing.
SGLANG_FLOOR = np.float32(1e-8)
#: FlashMLA's tests/quant.py: clamp_min(amax / 448, 1e-4), after dividing.
FLASHMLA_FLOOR_AFTER_DIVIDE = np.float32(1e-4)


# ---------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------
def host(xp, a) -> np.ndarray:
    """Outputs back on the host as NumPy (after the device finished)."""
    xp.synchronize()
    return xp.to_np(a)


def randn_bf16(rng: np.random.Generator, shape, scale: float = 1.0) -> np.ndarray:
    """torch.randn(..., dtype=bfloat16) stand-in: standard normal, rounded once to bf16."""
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(BF16)


# ---------------------------------------------------------------------------
# FP8 / bf16 scalars
# ---------------------------------------------------------------------------
def e4m3_to_f32(codes: np.ndarray) -> np.ndarray:
    return np.asarray(codes, np.uint8).view(E4M3).astype(np.float32)


def f32_to_e4m3(x: np.ndarray) -> np.ndarray:
    """Round to nearest even e4m3fn (the inputs here are already inside +-fp8_max)."""
    return np.asarray(x, np.float32).astype(E4M3).view(np.uint8)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).astype(BF16).view(np.uint16)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return np.asarray(b, np.uint16).view(BF16).astype(np.float32)


def ceil_log2(q: np.ndarray) -> np.ndarray:
    """ceil(log2(q)) of positive finite fp32 values, exactly (frexp: q = m * 2^x, m in [0.5, 1))."""
    m, x = np.frexp(np.asarray(q, np.float32))
    return np.where(m == 0.5, x - 1, x).astype(np.int64)


def tile_exponents(nope_f32: np.ndarray, variant: str) -> np.ndarray:
    """The UE8M0 exponent of every 64-value tile of [..., 448] finite fp32 values, as each
    upstream computes it: "vllm" (and dsv4kv), "sglang" (floors before dividing) or "flashmla"
    (floors after dividing)."""
    tiles = np.abs(nope_f32.reshape(*nope_f32.shape[:-1], L.kNumTiles, L.kTileSize)).max(axis=-1)
    tiles = tiles.astype(np.float32)
    fmax = np.float32(FP8_MAX)
    if variant == "vllm":
        q = np.maximum(tiles, VLLM_FLOOR) / fmax
    elif variant == "sglang":
        q = np.maximum(tiles, SGLANG_FLOOR) / fmax
    elif variant == "flashmla":
        q = np.maximum(tiles / fmax, FLASHMLA_FLOOR_AFTER_DIVIDE)
    else:
        raise ValueError(variant)
    return ceil_log2(q.astype(np.float32))


def quantize_tiles(nope_f32: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """FP8 codes of [..., 448] values under per-tile exponents: x / 2^e (exact), clamped to
    +-fp8_max, rounded to nearest even."""
    scale = np.repeat(np.ldexp(np.float32(1), exponents).astype(np.float32), L.kTileSize, axis=-1)
    return f32_to_e4m3(np.clip(nope_f32 / scale, -FP8_MAX, FP8_MAX))


# ---------------------------------------------------------------------------
# Caches written and read the upstream ways (the layout is dsv4kv's, which is FlashMLA's
# MODEL1_FP8Sparse and SGLang's V4 page)
# ---------------------------------------------------------------------------
def write_cache_reference(k_bf16: np.ndarray, cache: np.ndarray, slots: np.ndarray, block_size: int,
                          variant: str, nan_tile_bytes: Optional[tuple] = None) -> None:
    """Write token rows into a [num_blocks, stride] uint8 cache as the upstream quantizer
    `variant` would (finite rows); `nan_tile_bytes=(scale_byte, code)` is what it stores for a
    tile whose amax is NaN."""
    kf = np.asarray(k_bf16, BF16).astype(np.float32)
    for t, s in enumerate(np.asarray(slots)):
        blk, p = divmod(int(s), block_size)
        nope = kf[t, :L.kNopeDim]
        nan_tiles = np.isnan(nope.reshape(L.kNumTiles, L.kTileSize)).any(axis=1)
        e = tile_exponents(np.where(np.isnan(nope), 0, nope), variant)
        codes = quantize_tiles(np.where(np.isnan(nope), 0, nope), e)
        sbytes = np.clip(e + L.kScaleBias, 0, 255).astype(np.uint8)
        if nan_tiles.any():
            assert nan_tile_bytes is not None
            codes.reshape(L.kNumTiles, L.kTileSize)[nan_tiles] = nan_tile_bytes[1]
            sbytes[nan_tiles] = nan_tile_bytes[0]
        d = L.token_data_offset(p)
        cache[blk, d:d + L.kNopeDim] = codes
        r = L.rope_offset(p)
        cache[blk, r:r + L.kRopeBytes] = np.asarray(k_bf16, BF16)[t, L.kNopeDim:].view(np.uint8)
        so = L.scale_offset(block_size, p, 0)
        cache[blk, so:so + L.kNumTiles] = sbytes


def token_record(cache: np.ndarray, block: int, pos: int, block_size: int):
    """(448 codes, 7 scale bytes, 128 RoPE bytes) of one token of a [num_blocks, stride] cache."""
    d = L.token_data_offset(pos)
    r = L.rope_offset(pos)
    s = L.scale_offset(block_size, pos, 0)
    return (cache[block, d:d + L.kNopeDim], cache[block, s:s + L.kNumTiles], cache[block, r:r + L.kRopeBytes])


def decode_record(codes, sbytes, rope, scale_rule: str) -> np.ndarray:
    """bf16 bits [512] of one token record.

    scale_rule "exp2": fp32(code) * exp2(byte - 127) in fp32, rounded once to bf16 (vLLM's test
    reference, SGLang's dequantize_k_cache_paged_ref after its zeroing of scales below 2^-126,
    which only touches byte 0, and FlashMLA's bf16 product, which for the bytes 1..254 it reads
    is the same single rounding). "sglang" adds SGLang's rule: a scale below 2^-126 (byte 0)
    is 0; byte 255 is exp2(128) = inf. "flashmla": FlashMLA's e8m0 decode, byte 0 = 2^-127,
    byte 255 = NaN."""
    vals = e4m3_to_f32(codes).reshape(L.kNumTiles, L.kTileSize)
    b = np.asarray(sbytes, np.int64)
    with np.errstate(over="ignore"):
        scale = np.ldexp(np.float64(1), b - L.kScaleBias).astype(np.float32)  # 255 -> inf
    if scale_rule == "sglang":
        scale = np.where(scale < np.float32(2.0 ** -126), np.float32(0), scale)
    elif scale_rule == "flashmla":
        scale = np.where(b == 255, np.float32(np.nan), scale)
    elif scale_rule != "exp2":
        raise ValueError(scale_rule)
    with np.errstate(invalid="ignore", over="ignore"):
        nope = (vals * scale[:, None].astype(np.float32)).astype(np.float32).reshape(-1)
    return np.concatenate([f32_to_bf16_bits(nope), np.asarray(rope, np.uint8).view(np.uint16)])


def same_bf16(got_bits: np.ndarray, want_bits: np.ndarray, msg: str = "") -> None:
    """Bit equality, with every NaN equal to every NaN (torch's equal_nan=True); stricter than
    upstream's assert_close(atol=0, rtol=0), which also accepts -0 for +0."""
    got = np.asarray(got_bits, np.uint16).reshape(-1)
    want = np.asarray(want_bits, np.uint16).reshape(-1)
    gnan = (got & 0x7FFF) > 0x7F80
    wnan = (want & 0x7FFF) > 0x7F80
    np.testing.assert_array_equal(gnan, wnan, err_msg=f"{msg}: NaN positions")
    np.testing.assert_array_equal(got[~gnan], want[~wnan], err_msg=f"{msg}: bits")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def upstream_block_stride(block_size: int) -> int:
    """The page size the upstream allocators compute: ceil(B * bytes/token / 576) * 576 (vLLM,
    SGLang, FlashMLA alike); dsv4kv exposes it as vllm_block_stride."""
    return ceil_div(L.block_data_bytes(block_size), L.kVllmBlockRounding) * L.kVllmBlockRounding

