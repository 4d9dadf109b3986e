"""NumPy models of the DeepSeek-V4.1 records (spec "Cache records") for the tests: the e2m1 grid,
nibble packing, the page size vLLM allocates, and whole-record encoders and decoders written
from the upstream tests' own definitions."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
PAD = 165  # the byte upstream fills its pages with, and asserts untouched
GRID = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)
MIDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float64)


def page_bytes(block_size: int, record_bytes: int) -> int:
    return math.ceil(block_size * record_bytes / 512) * 512


def e2m1(y: np.ndarray) -> np.ndarray:
    """Nibbles of round-to-nearest e2m1, ties to the even code, saturating (the tests' ``_e2m1``)."""
    m = np.abs(y.astype(np.float64))
    code = (m[..., None] > MIDS).sum(-1) + ((m[..., None] == MIDS) & (np.arange(7) % 2 == 1)).sum(-1)
    return (np.minimum(code, 7) | np.where(np.signbit(y), 8, 0)).astype(np.uint8)


def pack(codes: np.ndarray) -> np.ndarray:
    return (codes[..., ::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def unpack(packed: np.ndarray) -> np.ndarray:
    codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    vals = GRID[codes & 7]
    # Nibble 8 (-0) reads as +0, as vLLM's FP4 gather computes it (spec/records.md, "Deviations").
    return np.where((codes >= 8) & ((codes & 7) != 0), -vals, vals)


def encode_mxfp8(x: np.ndarray):
    """(512 value bytes, 16 scale bytes) of one fp32 row as vLLM's test reference writes them."""
    tiles = x.astype(np.float32).reshape(16, 32)
    amax = np.maximum(np.abs(tiles).max(1), np.float32(1e-4))
    exponent = np.ceil(np.log2(amax.astype(np.float64) / 448.0))
    q = np.clip(tiles / np.exp2(exponent)[:, None], -448, 448).astype(E4M3)
    return q.view(np.uint8).reshape(-1), (exponent + 127).astype(np.uint8)


def decode_mxfp8(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The float64 row of a 528-byte record's bytes (finite codes and scale bytes 1..254)."""
    return (values.view(E4M3).astype(np.float64).reshape(16, 32) * np.exp2(scales.astype(np.float64) - 127)[:, None]).reshape(-1)


def decode_nvfp4(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The float64 row of a 288-byte record's bytes (finite scales)."""
    return (unpack(values).reshape(32, 16) * scales.view(E4M3).astype(np.float64)[:, None]).reshape(-1)
