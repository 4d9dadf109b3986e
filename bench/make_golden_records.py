#!/usr/bin/env python3
"""Writes golden vectors of the DeepSeek-V4.1 cache records (spec/records.md) as vLLM's own V4.1
kernels compute them, measured on a GPU from the Triton transcriptions in bench/triton_bench.py:

* conformance/golden/records_mxfp8_quantize.safetensors: op quantize_and_insert_k_cache, record
  mxfp8_ds_mla (528 bytes), kernel _quantize_and_insert_k_mxfp8_kernel (vLLM's
  quantize_and_insert_k_cache(bytes_per_token=528));
* conformance/golden/records_mxfp8_gather.safetensors: op dequantize_and_gather_k_cache, record
  mxfp8_ds_mla, kernel _dequantize_and_gather_k_mxfp8_kernel;
* conformance/golden/records_nvfp4_quantize.safetensors: op quantize_and_insert_k_cache, record
  nvfp4_ds_mla (288 bytes), kernel _rope_quant_insert_nvfp4_kernel (vLLM's rope_quant_insert, the
  record's only writer) with cos 1, sin 0 and compress_ratio 1, so that it quantizes the given bf16
  row; on a GPU without cvt.rn.satfinite.e2m1x2.f32 (before sm_100a: an H200) its e2m1 step is the
  instruction's rule written in Triton, not the instruction (bench/triton_bench.py; metadata `e2m1`);
* conformance/golden/records_nvfp4_gather.safetensors: op dequantize_and_gather_k_cache, record
  nvfp4_ds_mla, kernel _dequantize_and_gather_k_nvfp4_kernel.
One file per operation and record: a golden file holds one operation (its `op`).

Usage (GPU machine with CUDA, torch, Triton and numpy; from the repository root):
    python3 bench/make_golden_records.py --out conformance/golden
Dry run without a GPU (numpy, ml_dtypes and the dsv4kv package): --standin computes every output
with the library instead, for testing the replay; its files say so (`set` = `standin`) and are never
written under conformance/golden. TRITON_INTERPRET=1 runs the Triton kernels in Triton's interpreter
on the CPU (`set` = `interpreter`, a check of the transcription, not a measurement; not written under
conformance/golden either). --self-check runs only the numpy references on hand-worked cases (no
torch, no Triton, no dsv4kv) and exits 0 or 1.

Every file has the field layout (conformance/golden/README.md, "The field layout"): tensors and
parameters named after the fields of QuantizeInsertArgs / DequantizeGatherArgs by their Python
names, `caseNNN.record` (metadata) the record. Outputs start as the init pattern of param.init_salt
(the cache's stale contents; the sentinel around the gathered rows); the whole storage after the
call is stored. param.error_count is not measured (vLLM has no counter): it is the count the
library's failure model gives (spec/operations.md, spec/records.md "Reports"): quantize, one per
slot other than -1 outside the cache (here only slots below -1, for the FP4 writer) and one per
non-finite value of a written row; the MXFP8 gather none; the FP4 gather one per gathered row whose
scale record holds an e4m3 NaN (0x7F, 0xFF).

What goes in, quantize (both records):
* crafted rows: zeros, -0, bf16 subnormals, values below the MXFP8 floor 1e-4, bf16 max and the top
  of the bf16 range; the worked example of spec/records.md;
* MXFP8: group maxima 448 * 2^k for k = -30 .. 119 and their bf16 neighbours (every scale
  boundary), the floor's boundaries (1e-4, 448 * 2^-22), values on every e4m3 midpoint and next to
  it (ties of the value conversion), at several scales;
* FP4: group maxima on and next to 6 * m for every e4m3 midpoint m of the scale range [2^-9, 448]
  (ties of the scale conversion) and at 6 * v for every fifth e4m3 value v, the scale clamps
  (amax / 6 below 2^-9, above 448), values on the e2m1 midpoints and next to them under
  power-of-two and other scales (ties of div_rn and of the e2m1 rounding), quotients above 6 where
  the scale rounded down;
* non-finite values: MXFP8 NaNs of several payloads and signs, +-inf, all-NaN and all-inf groups;
  FP4 NaNs in pairs (both values of a pair NaN, which the writer's rotation keeps NaN) and an
  all-NaN group;
* random rows of every magnitude; block sizes 64, 32, 16, 7 and 1; vLLM's block strides, minimal
  ones, odd ones (V4.1 records store no bf16, so any stride is valid) and strides of a packed slab
  (the view narrower than the stride); 2-D and 3-D [num_blocks, B, record] views; k with rows past
  T; slot -1 padding, and for the FP4 writer slots below -1 (-2, -1000, INT64_MIN: skipped by vLLM,
  skipped and reported by the library); a batch of padding only.
What goes in, gather (both records):
* caches of uniform random bytes (every value and scale byte), a cache holding every (scale byte,
  value byte) pair (MXFP8) or every (scale byte, nibble) pair (FP4), and caches of quantized random
  rows over the init pattern;
* block sizes 64, 32, 16, 7 and 1, vLLM's, minimal and odd block strides; gather_lens absent,
  shorter than seq_lens, 0 and longer than R; offset > 0; out contiguous, with padded rows, at an
  odd element of its storage, and transposed ([rows, R, 512] storage); unread block-table entries
  holding -1 and garbage; the rows around the gathered ones keep the init pattern.
Left out, where vLLM's kernels are undefined or the library departs from them on purpose
(spec/records.md "Deviations", spec/operations.md):
* quantize: slots at or past the cache's capacity (both writers write out of bounds; the library
  skips and reports them), slots below -1 for the MXFP8 writer (it skips only -1 and follows the
  others; the library skips and reports them), duplicate slots (a race), use_fnuz (vLLM raises on
  NVIDIA; the library refuses it with a V4.1 record), T = 0 (no grid);
* the FP4 writer: infinities (its rotation, even with cos 1 and sin 0, computes x * 0 for every
  value and makes an infinity's pair partner NaN) and a -0 the rotation turns into +0 (an even -0
  beside a negative value or -0, an odd -0 beside a positive value or +0): every row is checked
  (rotation_keeps);
* gather: a request with gather_len > seq_len or < 0, rows past out.shape[1], block-table columns
  past the table or entries outside the cache (vLLM reads or writes out of bounds; the library
  skips and reports), a strided block table (vLLM steps by shape[-1]), R = 0.

Each case runs twice on fresh outputs and must give identical bytes, or the script stops.
`caseNNN.ref_match` = 1 when the numpy reimplementation of the rules below gives the same storage.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import numpy as np

# The init pattern and the safetensors writer are the sparse-gather generator's (same directory);
# the record widths are vLLM's, as the transcription names them.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_golden_sparse_gather import init_pattern, write_safetensors  # noqa: E402
import triton_bench as tb  # noqa: E402  (imports without Triton)

REPO = Path(__file__).resolve().parents[1]
GENERATOR = "bench/make_golden_records.py"
I64_MIN = -(2**63)
CACHE_UTILS = ("vllm-project/vllm vllm/models/deepseek_v41/common/ops/cache_utils.py @ "
               "091b5c262a27725de1695495f3fdf6a3b3943e7b")
FUSED = ("vllm-project/vllm vllm/models/deepseek_v41/common/ops/fused_compress_quant_cache.py @ "
         "1bd28daa03df01a6b5955124cca638cbed474ee6")

MX, NV = "mxfp8_ds_mla", "nvfp4_ds_mla"
#: record -> (token data bytes, scale bytes, values per scale, token bytes)
GEOM = {
    MX: (tb.V41_HEAD_DIM, tb.V41_NUM_SCALES, tb.V41_QUANT_BLOCK, tb.V41_BYTES_PER_TOKEN),
    NV: (tb.V41_HEAD_DIM // 2, tb.V41_NVFP4_NUM_SCALES, tb.V41_NVFP4_QUANT_BLOCK, tb.V41_NVFP4_BYTES_PER_TOKEN),
}
HEAD = tb.V41_HEAD_DIM
#: kind -> (file, op, record, kernel measured)
FILES = {
    "mxfp8_quantize": ("records_mxfp8_quantize.safetensors", "quantize_and_insert_k_cache", MX,
                       "bench/triton_bench.py _quantize_and_insert_k_mxfp8_kernel (transcription of " + CACHE_UTILS
                       + ": quantize_and_insert_k_cache(bytes_per_token=528), grid T)"),
    "mxfp8_gather": ("records_mxfp8_gather.safetensors", "dequantize_and_gather_k_cache", MX,
                     "bench/triton_bench.py _dequantize_and_gather_k_mxfp8_kernel (transcription of " + CACHE_UTILS
                     + ": dequantize_and_gather_k_cache_triton's 528-byte branch, grid (R, 128))"),
    "nvfp4_quantize": ("records_nvfp4_quantize.safetensors", "quantize_and_insert_k_cache", NV,
                       "bench/triton_bench.py _rope_quant_insert_nvfp4_kernel (transcription of " + FUSED
                       + ": rope_quant_insert's 288-byte branch, grid T, num_warps 4) with cos 1, sin 0, "
                       "compress_ratio 1, positions 0"),
    "nvfp4_gather": ("records_nvfp4_gather.safetensors", "dequantize_and_gather_k_cache", NV,
                     "bench/triton_bench.py _dequantize_and_gather_k_nvfp4_kernel (transcription of " + CACHE_UTILS
                     + ": dequantize_and_gather_k_cache_triton's 288-byte branch, grid (R, "
                     "min(max(128, 2048 // R), max(128, rows - offset))))"),
}


# ---------------------------------------------------------------------------
# numpy references of the rules (spec/records.md, "Numerics of the V4.1 records"); every fp32 step is
# one numpy float32 operation (IEEE, rounded to nearest even, subnormals kept)
# ---------------------------------------------------------------------------
F32 = np.float32
INV448 = F32(1.0) / F32(448.0)  # fl32(1/448): vLLM multiplies by the reciprocal
INV6 = F32(1.0) / F32(6.0)
AMAX_FLOOR = F32(1e-4)
NV_SCALE_MIN, NV_SCALE_MAX = F32(2.0**-9), F32(448.0)


def bf16_f32(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_bf16(x) -> np.ndarray:
    """fp32 -> bf16 bits, round to nearest even; a NaN gives 0x7FFF (what the GPU's conversion writes)."""
    x = np.asarray(x, np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), r).astype(np.uint16)


def bf(*values) -> np.ndarray:
    """bf16 bits of finite values (round to nearest even)."""
    return f32_bf16(np.array(values, np.float32))


def _e4m3_table() -> np.ndarray:
    v = np.zeros(256, np.float32)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v[b] = np.nan
        elif e == 0:
            v[b] = sign * m * 2.0**-9
        else:
            v[b] = sign * (1 + m / 8) * 2.0 ** (e - 7)
    return v


E4M3 = _e4m3_table()  # the value of every e4m3fn byte (0x7F, 0xFF: NaN)
E4M3_POS = E4M3[:0x7F].astype(np.float64)  # 0 .. 448, ascending: codes 0 .. 0x7E
# As read back: nibble 8 (-0) is +0, for vLLM's gather negates as 0 - magnitude (spec/records.md).
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def e4m3_encode(y) -> np.ndarray:
    """e4m3fn bytes of finite fp32 values with |y| <= 448: nearest, ties to the even code, sign kept."""
    y = np.asarray(y, np.float32)
    a = np.abs(y).astype(np.float64)
    i = np.clip(np.searchsorted(E4M3_POS, a), 1, 126)  # E4M3_POS[i - 1] < a <= E4M3_POS[i]
    lo, hi = E4M3_POS[i - 1], E4M3_POS[i]
    tie_up = (i - 1) % 2 == 1  # on a midpoint, the even code
    code = np.where(a - lo < hi - a, i - 1, np.where(a - lo > hi - a, i, np.where(tie_up, i, i - 1)))
    return (code | np.where(np.signbit(y), 0x80, 0)).astype(np.uint8)


def e2m1_encode(x) -> np.ndarray:
    """e2m1 nibbles: nearest, ties to the even code, saturating at 6 (inf too), sign kept; NaN is +6."""
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore"):
        a = np.abs(x)
        code = sum(((a > t) if even else (a >= t)).astype(np.uint8)
                   for t, even in ((0.25, 1), (0.75, 0), (1.25, 1), (1.75, 0), (2.5, 1), (3.5, 0), (5.0, 1)))
    nan = np.isnan(x)
    code = np.where(nan, 7, code + np.where(np.signbit(x) & ~nan, 8, 0))
    return code.astype(np.uint8)


def ceil_log2(q: np.float32) -> int:
    """ceil(log2(q)) of a positive finite fp32 value, exactly."""
    m, e = np.frexp(np.float32(q))
    return int(e) - 1 if m == 0.5 else int(e)


def group_amax(xf: np.ndarray) -> np.float32:
    """Largest |x| over the non-NaN values; NaN when every value is NaN."""
    a = np.abs(xf[~np.isnan(xf)])
    return F32(a.max()) if a.size else F32(np.nan)


def mxfp8_group(x: np.ndarray):
    """(scale byte, 32 e4m3 bytes) of one group of bf16 bits."""
    xf = bf16_f32(x)
    amax = group_amax(xf)
    m = AMAX_FLOOR if (np.isnan(amax) or amax < AMAX_FLOOR) else amax
    bad = ~np.isfinite(xf)
    if np.isinf(m):  # an infinite group: finite values become zeros of their sign
        return 255, np.where(bad, 0x7E, np.where(np.signbit(xf), 0x80, 0x00)).astype(np.uint8)
    e = ceil_log2(m * INV448)
    with np.errstate(invalid="ignore"):
        y = np.clip(xf * F32(2.0**-e), F32(-448), F32(448))
        codes = e4m3_encode(np.where(bad, F32(0), y))
    return int(np.clip(e + 127, 0, 255)), np.where(bad, 0x7E, codes).astype(np.uint8)


def nvfp4_scale_byte(amax: np.float32) -> int:
    s = NV_SCALE_MIN if np.isnan(amax) else F32(amax) * INV6
    return int(e4m3_encode(np.clip(s, NV_SCALE_MIN, NV_SCALE_MAX))[()])


def nvfp4_group(x: np.ndarray):
    """(scale byte, 8 bytes of e2m1 pairs) of one group of 16 bf16 bits."""
    xf = bf16_f32(x)
    sb = nvfp4_scale_byte(group_amax(xf))
    with np.errstate(invalid="ignore", over="ignore"):
        nib = e2m1_encode(xf / E4M3[sb])
    return sb, (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)


def encode_token(rec: str, row: np.ndarray):
    """(data bytes, scale bytes) of one 512-value bf16 row."""
    _, ns, grp, _ = GEOM[rec]
    fn = mxfp8_group if rec == MX else nvfp4_group
    parts = [fn(row[g * grp:(g + 1) * grp]) for g in range(ns)]
    return np.concatenate([p[1] for p in parts]), np.array([p[0] for p in parts], np.uint8)


def decode_token(rec: str, data: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The 512 bf16 bits one token's record reads back as."""
    _, _, grp, _ = GEOM[rec]
    with np.errstate(invalid="ignore", over="ignore"):
        if rec == MX:
            s = scales.astype(np.int64)
            mult = np.where(s == 0, F32(0), np.where(s == 255, F32(np.inf),
                                                     np.ldexp(F32(1), np.clip(s, 1, 254) - 127).astype(np.float32)))
            prod = E4M3[data] * np.repeat(mult.astype(np.float32), grp)
        else:
            nib = np.empty(HEAD, np.uint8)
            nib[0::2], nib[1::2] = data & 0xF, data >> 4
            prod = E2M1[nib] * np.repeat(E4M3[scales], grp)
    return f32_bf16(prod)


def rotation_keeps(row: np.ndarray) -> bool:
    """Whether the FP4 writer's rotation with cos 1 and sin 0 (even * 1 - odd * 0, odd * 1 + even * 0 in
    fp32) gives back `row` (NaN for NaN: the payload reaches no output)."""
    x = bf16_f32(row)
    even, odd = x[0::2], x[1::2]
    with np.errstate(invalid="ignore"):
        new = np.empty_like(x)
        new[0::2] = even * F32(1) - odd * F32(0)
        new[1::2] = odd * F32(1) + even * F32(0)
    same = (new.view(np.uint32) == x.view(np.uint32)) | (np.isnan(new) & np.isnan(x))
    return bool(same.all())


def ref_quantize(rec: str, k: np.ndarray, slots: np.ndarray, storage: np.ndarray, bs: int, stride: int) -> np.ndarray:
    """The storage after vLLM's writer of `rec`: every slot < 0 skipped (the cases hold no slot it
    would follow)."""
    out = storage.copy()
    D, SB, _, _ = GEOM[rec]
    for t, s in enumerate(slots.astype(np.int64)):
        if s < 0:
            continue
        blk, p = divmod(int(s), bs)
        data, scales = encode_token(rec, k[t])
        base = blk * stride
        out[base + p * D:base + (p + 1) * D] = data
        out[base + bs * D + p * SB:base + bs * D + (p + 1) * SB] = scales
    return out


def token_record(rec: str, cache: np.ndarray, blk: int, p: int, bs: int):
    D, SB, _, _ = GEOM[rec]
    return cache[blk, p * D:(p + 1) * D], cache[blk, bs * D + p * SB:bs * D + (p + 1) * SB]


def ref_gather(rec: str, c: dict, storage: np.ndarray) -> np.ndarray:
    """The out storage after vLLM's gather of `rec` (well-formed requests only)."""
    out = storage.copy()
    o = c["out"]
    gat = c["seq"] if c["gat"] is None else c["gat"]
    for b in range(len(c["seq"])):
        seq, g = int(c["seq"][b]), int(gat[b])
        for i in range(g):
            pos = seq - g + i
            row = decode_token(rec, *token_record(rec, c["cache"], int(c["table"][b, pos // c["bs"]]), pos % c["bs"],
                                                  c["bs"]))
            at = o["offset"] + b * o["strides"][0] + (c["offset"] + i) * o["strides"][1]
            out[at:at + HEAD * o["strides"][2]:o["strides"][2]] = row
    return out


def quantize_errors(k: np.ndarray, slots: np.ndarray, capacity: int) -> int:
    """The library's count: one per slot other than -1 outside the cache, one per non-finite value of a
    written row."""
    n = 0
    for t, s in enumerate(slots.astype(np.int64)):
        if s == -1:
            continue
        if not 0 <= s < capacity:
            n += 1
            continue
        n += int((~np.isfinite(bf16_f32(k[t]))).sum())
    return n


def gather_errors(rec: str, c: dict) -> int:
    """The library's count for well-formed requests: one per gathered FP4 row whose scales hold a NaN."""
    if rec != NV:
        return 0
    gat = c["seq"] if c["gat"] is None else c["gat"]
    n = 0
    for b in range(len(c["seq"])):
        seq, g = int(c["seq"][b]), int(gat[b])
        for pos in range(seq - g, seq):
            _, sc = token_record(rec, c["cache"], int(c["table"][b, pos // c["bs"]]), pos % c["bs"], c["bs"])
            n += int(((sc & 0x7F) == 0x7F).any())
    return n


# ---------------------------------------------------------------------------
# Hand-worked cases of the references (--self-check)
# ---------------------------------------------------------------------------
def self_check() -> list[str]:
    fails = []

    def expect(name, got, want):
        got = [np.asarray(g).tolist() for g in got] if isinstance(got, tuple) else np.asarray(got).tolist()
        want = [np.asarray(w).tolist() for w in want] if isinstance(want, tuple) else np.asarray(want).tolist()
        if got != want:
            fails.append(f"{name}: got {got}, want {want}")

    # vLLM's reciprocals are the spec's constants (record_numerics.hpp kInv448Bits, kInv6Bits).
    expect("fl32(1/448), fl32(1/6)", [int(INV448.view(np.uint32)), int(INV6.view(np.uint32))],
           [0x3B124925, 0x3E2AAAAB])
    expect("fl32(fl64(1/448)), fl32(fl64(1/6)) (a Triton constant)",
           [int(F32(1.0 / 448.0).view(np.uint32)), int(F32(1.0 / 6.0).view(np.uint32))], [0x3B124925, 0x3E2AAAAB])

    # spec/records.md, the worked example: group 0 of (1, -0.30078125, 5, 0, ...).
    g = np.zeros(32, np.uint16)
    g[:3] = [0x3F80, 0xBE9A, 0x40A0]
    sb, codes = mxfp8_group(g)
    expect("worked example, MXFP8 scale byte and codes", (sb, codes[:4]), (0x79, [0x68, 0xDA, 0x7A, 0x00]))
    row = np.zeros(HEAD, np.uint16)
    row[:3] = g[:3]
    data, scales = encode_token(MX, row)
    expect("worked example, MXFP8 read back", decode_token(MX, data, scales)[:3], bf(1, -0.3125, 5))
    sb, packed = nvfp4_group(g[:16])
    expect("worked example, FP4 scale byte and bytes", (sb, packed[:4]), (0x35, [0x92, 0x07, 0x00, 0x00]))
    data, scales = encode_token(NV, row)
    expect("worked example, FP4 read back", decode_token(NV, data, scales)[:3], bf(0.8125, -0.40625, 4.875))

    # e2m1: the midpoints go to the even code (the fork test's test_e2m1_reference_midpoints).
    expect("e2m1 midpoints", e2m1_encode([0, .25, .75, 1.25, 1.75, 2.5, 3.5, 5]) & 7, [0, 0, 2, 2, 4, 4, 6, 6])
    expect("e2m1 saturation, signs, NaN",
           e2m1_encode([6, 7, np.inf, -np.inf, np.nan, -np.nan, -0.0, -0.2499, 5.0001, -0.75, 0.7499]),
           [7, 7, 7, 15, 7, 7, 8, 8, 7, 10, 1])

    # spec/numerics.md's table of tile maxima (e4m3fn): amax bits -> scale byte.
    for amax, byte in ((0x0000, 105), (0x38E0, 105), (0x38E1, 106), (0x3F00, 118), (0x4040, 120), (0x40E0, 121),
                       (0x43E0, 127), (0x7F7F, 247)):
        g = np.zeros(32, np.uint16)
        g[5] = amax
        expect(f"MXFP8 scale byte of amax 0x{amax:04X}", mxfp8_group(g)[0], byte)
    # 448 * 2^k for every k the floor leaves alone: byte k + 127; the next bf16 value: k + 128.
    for k in range(-22, 120):
        g = np.zeros(32, np.uint16)
        g[0] = 0x43E0 + (k << 7)
        g[1] = 0x43E1 + (k << 7)
        expect(f"MXFP8 boundary 448*2^{k}", mxfp8_group(g[[0]].repeat(32))[0], k + 127)
        expect(f"MXFP8 above 448*2^{k}", mxfp8_group(g[[1]].repeat(32))[0], k + 128)
    # The top of the bf16 range: 248 * 2^120 rounds to 256 (0x78) and reads back as inf.
    g = np.full(32, 0x7F78, np.uint16)
    expect("top of bf16", mxfp8_group(g), (247, [0x78] * 32))
    # e4m3 ties to even: 272 (between 256 and 288) -> 256; 0.5 * 2^-9 -> 0; 1.5 * 2^-9 -> 2^-8.
    expect("e4m3 ties", e4m3_encode([272, -272, 2.0**-10, 3 * 2.0**-10, 0.0, -0.0, 448]),
           [0x78, 0xF8, 0x00, 0x02, 0x00, 0x80, 0x7E])
    # Non-finite MXFP8 groups (spec/numerics.md "Non-finite keys"): NaN -> 0x7E; all-NaN: byte 105;
    # inf: byte 255, finite values signed zeros.
    nan_group = np.full(32, 0x7FC0, np.uint16)
    expect("all-NaN group", mxfp8_group(nan_group), (105, [0x7E] * 32))
    g = np.zeros(32, np.uint16)
    g[:4] = [0x7F80, 0xBF80, 0x3F80, 0xFFC1]
    expect("infinite group", mxfp8_group(g)[0], 255)
    expect("infinite group codes", mxfp8_group(g)[1][:5], [0x7E, 0x80, 0x00, 0x7E, 0x00])
    # FP4 scales: an all-zero group gets 2^-9 (0x01); 448 caps; 5.0625 / 6 = 0.84375 is the tie of
    # 0.8125 and 0.875: the even code 0x36.
    expect("FP4 all-zero group", nvfp4_group(np.zeros(16, np.uint16)), (0x01, [0] * 8))
    expect("FP4 scale clamp", [nvfp4_scale_byte(F32(v)) for v in (0.0, 0.001, 2688.0, 1e30, np.inf, np.nan)],
           [0x01, 0x01, 0x7E, 0x7E, 0x7E, 0x01])
    expect("FP4 scale tie", nvfp4_scale_byte(F32(5.0625)), 0x36)
    # Decoding: MXFP8 byte 0 is +0 (a negative code gives -0), 255 is inf; a NaN code reads 0x7FFF.
    d = decode_token(MX, np.array([0x38, 0xB8, 0x7F, 0x00] * 128, np.uint8), np.array([0, 255] + [127] * 14, np.uint8))
    expect("MXFP8 decode of bytes 0 and 255", [d[0], d[1], d[2], d[32], d[33], d[34], d[35]],
           [0x0000, 0x8000, 0x7FFF, 0x7F80, 0xFF80, 0x7FFF, 0x7FFF])
    # FP4: an e4m3 NaN scale byte makes its group NaN.
    d = decode_token(NV, np.full(256, 0x71, np.uint8), np.array([0x7F, 0x38] + [0x00] * 30, np.uint8))
    expect("FP4 decode", [d[0], d[1], d[16], d[17], d[32]], [0x7FFF, 0x7FFF, 0x3F00, 0x40C0, 0x0000])
    # The identity rotation: which pairs it keeps.
    for pair, keeps in (((0x8000, 0x0000), True), ((0x8000, 0x3F80), True), ((0xBF80, 0x8000), True),
                        ((0x8000, 0xBF80), False), ((0x8000, 0x8000), False), ((0x0000, 0x8000), False),
                        ((0x3F80, 0x8000), False), ((0x7F80, 0x3F80), False), ((0x7FC0, 0xFFC0), True),
                        ((0x7FC0, 0x3F80), False), ((0x0001, 0x8001), True)):
        r = np.zeros(HEAD, np.uint16)
        r[:2] = pair
        expect(f"rotation keeps {pair[0]:04X} {pair[1]:04X}", rotation_keeps(r), keeps)
    return fails


# ---------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------
def rand_group(rng, n: int, amax_bits: int, sign_amax: bool = True) -> np.ndarray:
    """n bf16 values: `amax_bits` (the largest magnitude, a random sign when sign_amax) at a random
    place, the others uniform in (-amax, amax) rounded to bf16 (never above it), none zero."""
    amax = abs(float(bf16_f32([amax_bits])[0]))
    v = bf(*(rng.uniform(-1, 1, size=n) * amax)) if amax > 0 else np.zeros(n, np.uint16)
    v = np.where((v & 0x7FFF) == 0, np.uint16(amax_bits & 0x7FFF) if amax > 0 else v, v).astype(np.uint16)
    j = int(rng.integers(0, n))
    v[j] = amax_bits | (0x8000 if sign_amax and rng.random() < 0.5 else 0)
    return v


def random_rows(rng, n: int, group: int, lo: float = -12, hi: float = 12) -> np.ndarray:
    """n rows of N(0, 1) values, each group scaled by 2^U(lo, hi), in bf16 (no zeros)."""
    x = rng.standard_normal((n, HEAD)).astype(np.float64)
    x *= np.repeat(2.0 ** rng.uniform(lo, hi, size=(n, HEAD // group)), group, axis=1)
    b = f32_bf16(x.astype(np.float32))
    b[(b & 0x7FFF) == 0] = 0x3F80
    return b


def pack_groups(rng, groups: list, group: int) -> tuple[np.ndarray, list]:
    """Rows of HEAD values from named groups (a last partial row filled with random groups); the names,
    one per group of every row."""
    per = HEAD // group
    rows, names = [], []
    for start in range(0, len(groups), per):
        chunk = groups[start:start + per]
        while len(chunk) < per:
            chunk.append(("random", rand_group(rng, group, int(bf(2.0 ** rng.uniform(-8, 8))[0]))))
        rows.append(np.concatenate([g for _, g in chunk]))
        names += [n for n, _ in chunk]
    return np.array(rows, np.uint16), names


def e4m3_midpoints() -> np.ndarray:
    """The midpoints between consecutive positive finite e4m3 values (fp64; exact in bf16)."""
    return (E4M3_POS[:-1] + E4M3_POS[1:]) / 2


def mxfp8_crafted(rng) -> tuple[np.ndarray, list]:
    G = tb.V41_QUANT_BLOCK
    gs = [("zeros", np.zeros(G, np.uint16)), ("negative zeros", np.full(G, 0x8000, np.uint16)),
          ("signed zeros", np.tile(np.array([0x0000, 0x8000], np.uint16), G // 2))]
    sub = rng.integers(1, 0x80, size=G).astype(np.uint16) | (rng.integers(0, 2, size=G).astype(np.uint16) << 15)
    gs += [("bf16 subnormals", sub)]
    gs += [("bf16 subnormals and 1.0", np.concatenate([sub[:-1], bf(1.0)]))]
    gs += [("below the floor (amax 1e-5)", rand_group(rng, G, int(bf(1e-5)[0])))]
    for b in (0x38D1, 0x38D2, 0x38E0, 0x38E1):
        gs += [(f"floor boundary amax 0x{b:04X}", rand_group(rng, G, b))]
    for v in (0.5, 3.0, 7.0):
        one = np.zeros(G, np.uint16)
        one[int(rng.integers(0, G))] = bf(v)[0]
        gs += [(f"one value {v}", one)]
    for k in range(-30, 120):
        for d, what in ((-1, "below"), (0, "at"), (1, "above")):
            b = 0x43E0 + d + (k << 7)
            gs += [(f"amax {what} 448*2^{k}", rand_group(rng, G, b))]
    mids = e4m3_midpoints()
    for k in (0, -20, 7, 100):
        on = bf(*(mids * 2.0**k))  # exact: a midpoint has 5 significant bits
        for where, d in (("on", 0), ("below", -1), ("above", 1)):
            b = (on.astype(np.int32) + d).astype(np.uint16)  # the bf16 neighbours (positive bit patterns)
            b |= rng.integers(0, 2, size=b.size).astype(np.uint16) << 15
            for s in range(0, b.size, G - 1):
                chunk = b[s:s + G - 1]
                chunk = np.concatenate([chunk, bf(*([448.0 * 2.0**k] * (G - chunk.size)))])
                gs += [(f"e4m3 midpoints {where}, scale 2^{k}", chunk)]
    top = np.array([0x7F78 + i for i in range(8)] + [0xFF78 + i for i in range(8)], np.uint16)
    gs += [("top of bf16", np.concatenate([top, rand_group(rng, G - top.size, 0x7F00)])),
           ("bf16 max", rand_group(rng, G, 0x7F7F)), ("-bf16 max", rand_group(rng, G, 0xFF7F, False))]
    rows, names = pack_groups(rng, gs, G)
    ex = np.zeros(HEAD, np.uint16)
    ex[:3] = [0x3F80, 0xBE9A, 0x40A0]  # spec/records.md, the worked example
    return np.vstack([ex, rows]), ["worked example"] + ["zeros"] * (HEAD // G - 1) + names


def mxfp8_nonfinite(rng) -> tuple[np.ndarray, list]:
    G = tb.V41_QUANT_BLOCK
    gs = []
    for bits, what in ((0x7F80, "+inf"), (0xFF80, "-inf"), (0x7FC0, "NaN"), (0xFFC0, "-NaN"), (0x7F81, "NaN 0x7F81"),
                       (0xFF81, "-NaN 0xFF81"), (0x7FFF, "NaN 0x7FFF")):
        g = rand_group(rng, G, 0x4000)
        g[rng.choice(G, size=3, replace=False)] = bits
        gs += [(f"{what} among finite values", g)]
    g = rand_group(rng, G, 0x4480)
    g[:2] = [0x7F80, 0xFF80]
    gs += [("+inf and -inf", g)]
    g = rand_group(rng, G, 0x3C00)
    g[3:5] = [0x7F80, 0x7FC0]
    gs += [("inf and NaN", g)]
    gs += [("all NaN", np.full(G, 0x7FC0, np.uint16)), ("all -NaN", np.full(G, 0xFFC1, np.uint16)),
           ("all +inf", np.full(G, 0x7F80, np.uint16))]
    g = np.full(G, 0x7FC0, np.uint16)
    g[7] = 0x3A00
    gs += [("NaN and one finite value", g)]
    return pack_groups(rng, gs, G)


def nvfp4_crafted(rng) -> tuple[np.ndarray, list]:
    G = tb.V41_NVFP4_QUANT_BLOCK
    gs = [("zeros", np.zeros(G, np.uint16))]
    # -0 where the rotation keeps it: an even -0 beside +0 or a positive value, an odd -0 beside a
    # negative value.
    gs += [("signed zeros the rotation keeps",
            np.array([0x8000, 0x0000, 0xBF80, 0x8000, 0x8000, 0x3F80, 0xC000, 0x8000] * 2, np.uint16))]
    sub = rng.integers(1, 0x80, size=G).astype(np.uint16) | (rng.integers(0, 2, size=G).astype(np.uint16) << 15)
    gs += [("bf16 subnormals", sub)]
    for v in (0.001, 0.01, 2.0**-7 * 1.5):  # amax / 6 below 2^-9: scale 2^-9
        gs += [(f"amax {v}: scale clamped to 2^-9", rand_group(rng, G, int(bf(v)[0])))]
    for b in (0x3C3F, 0x3C40, 0x3C41):  # around 6 * 2^-9 = 0.01171875
        gs += [(f"amax 0x{b:04X} near 6*2^-9", rand_group(rng, G, b))]
    for b in (0x4527, 0x4528, 0x4529):  # around 6 * 448 = 2688
        gs += [(f"amax 0x{b:04X} near 6*448", rand_group(rng, G, b))]
    gs += [("amax 1e30: scale clamped to 448", rand_group(rng, G, int(bf(1e30)[0]))),
           ("bf16 max", rand_group(rng, G, 0x7F7F)), ("-bf16 max", rand_group(rng, G, 0xFF7F, False))]
    # Scale ties: group maxima at and beside 6 * m for every e4m3 midpoint m in [2^-9, 448].
    for m in e4m3_midpoints()[1:]:
        b = int(bf(6 * m)[0])
        for d, what in ((-1, "below"), (0, "at"), (1, "above")):
            gs += [(f"amax {what} 6*{m:g} (e4m3 midpoint)", rand_group(rng, G, b + d))]
    for v in E4M3_POS[1::5]:
        gs += [(f"amax 6*{v:g} (e4m3 value)", rand_group(rng, G, int(bf(6 * v)[0])))]
    # e2m1 midpoints and their neighbours under several scales: group [6S, +-m*S, ...] has scale S.
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    for sb in (0x38, 0x01, 0x08, 0x33, 0x35, 0x3F, 0x55, 0x7E):
        S = float(E4M3[sb])
        on = bf(*(mids * S))
        assert np.array_equal(bf16_f32(on).astype(np.float64), mids * S)  # m * S is exact in bf16
        for where, d in (("on", 0), ("below", -1), ("above", 1)):
            b = (on.astype(np.int32) + d).astype(np.uint16)
            b = np.concatenate([b, b | 0x8000])
            gs += [(f"e2m1 midpoints {where}, scale 0x{sb:02X}", np.concatenate([bf(6 * S, -6 * S), b]))]
    # Quotients above 6: a scale that rounded down (amax 5: scale 0.8125, 5 / 0.8125 = 6.15).
    for v in (5.0, -5.0, 5.0625, 11.0, 0.0390625):
        gs += [(f"amax {v}: quotient above 6", rand_group(rng, G, int(bf(v)[0]), False))]
    rows, names = pack_groups(rng, gs, G)
    ex = np.zeros(HEAD, np.uint16)
    ex[:3] = [0x3F80, 0xBE9A, 0x40A0]
    return np.vstack([ex, rows]), ["worked example"] + ["zeros"] * (HEAD // G - 1) + names


def nvfp4_nan(rng) -> tuple[np.ndarray, list]:
    """NaNs in pairs (both values of a pair NaN: the rotation keeps them NaN)."""
    G = tb.V41_NVFP4_QUANT_BLOCK
    gs = []
    for a, b in ((0x7FC0, 0x7FC0), (0xFFC0, 0x7F81), (0x7FFF, 0xFF81)):
        g = rand_group(rng, G, 0x4000)
        p = 2 * int(rng.integers(0, G // 2))
        g[p:p + 2] = [a, b]
        gs += [(f"NaN pair {a:04X} {b:04X} among finite values", g)]
    g = rand_group(rng, G, 0x3E00)
    g[0:4] = 0x7FC0
    gs += [("two NaN pairs beside the maximum", g)]
    gs += [("all NaN", np.full(G, 0x7FC0, np.uint16))]
    g = np.full(G, 0xFFC0, np.uint16)
    g[10:12] = bf(0.5, -3.0)
    gs += [("NaN and one finite pair", g)]
    return pack_groups(rng, gs, G)


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------
def vllm_stride(rec: str, bs: int) -> int:
    """vLLM's page for a cache of this record alone: bs * record rounded up to 512."""
    return -(-bs * GEOM[rec][3] // 512) * 512


def quantize_specs(rec: str) -> list[dict]:
    """Rows, block size, block stride (None: vLLM's; "min": bs * record; else an integer), blocks (None:
    enough for the rows), view ("2d", "2d-narrow": the view bs * record wide, "3d"), rows past T, slots
    ("shuffled": distinct slots in random order; "padding": all -1), padding rows inserted (pad), rows
    of slots below -1 inserted (bad)."""
    W = GEOM[rec][3]
    crafted = "mxfp8 crafted" if rec == MX else "nvfp4 crafted"
    nonfinite = "mxfp8 nonfinite" if rec == MX else "nvfp4 nan"
    bad = rec == NV  # slots below -1: only the FP4 writer skips them
    v2, v3 = ("2d", "3d") if rec == MX else ("3d", "2d")
    return [
        dict(rows=crafted, bs=64, stride=None, nb=None, view=v2, extra=3, slots="shuffled", pad=3,
             desc="crafted groups (group_names); vLLM's stride; 3 rows past T"),
        dict(rows=nonfinite, bs=64, stride=None, nb=2, view=v2, extra=0, slots="shuffled", pad=1,
             desc="non-finite values (group_names)"),
        dict(rows="random", n=96, bs=32, stride=None, nb=4, view=v3, extra=1, slots="shuffled", pad=12, bad=bad,
             desc="random rows, block size 32, vLLM's stride"),
        dict(rows="random", n=40, bs=16, stride=16 * W + 7, nb=4, view=v2, extra=0, slots="shuffled", pad=4,
             bad=bad, desc="block size 16, odd stride 16*record+7"),
        dict(rows="random", n=30, bs=7, stride="min", nb=6, view="2d", extra=2, slots="shuffled", pad=4,
             desc="block size 7, minimal stride"),
        dict(rows="random", n=24, bs=1, stride=W + 5, nb=30, view="3d", extra=0, slots="shuffled", pad=5, bad=bad,
             desc="block size 1, stride record+5"),
        dict(rows="random", n=50, bs=64, stride=vllm_stride(rec, 64) + 4096 + 1, nb=2, view="2d-narrow", extra=0,
             slots="shuffled", pad=4,
             desc="a packed slab: stride vLLM's + 4097, the view bs*record wide"),
        dict(rows="random", n=8, bs=64, stride=None, nb=1, view=v2, extra=0, slots="padding",
             desc="padding only: nothing is written"),
    ]


def make_slots(rng, s: dict, T: int, cap: int) -> np.ndarray:
    """Distinct slots of the cache in random order for rows [0, T); padding rows (slot -1) and, with
    "bad", rows of slots -2, -1000 and INT64_MIN are rows of their own (see build_quantize_case)."""
    if s["slots"] == "padding":
        return np.full(T, -1, np.int64)
    assert T <= cap
    return rng.permutation(cap)[:T].astype(np.int64)


def build_quantize_case(rng, rec: str, s: dict) -> dict:
    W = GEOM[rec][3]
    names = None
    if s["rows"] == "random":
        k = random_rows(rng, s["n"], GEOM[rec][2])
    else:
        k, names = {"mxfp8 crafted": mxfp8_crafted, "mxfp8 nonfinite": mxfp8_nonfinite,
                    "nvfp4 crafted": nvfp4_crafted, "nvfp4 nan": nvfp4_nan}[s["rows"]](rng)
    n = k.shape[0]
    bs = s["bs"]
    stride = vllm_stride(rec, bs) if s["stride"] is None else bs * W if s["stride"] == "min" else s["stride"]
    nb = s["nb"] if s["nb"] is not None else -(-n // bs) + 1
    slots = make_slots(rng, s, n, nb * bs)
    # Rows that are skipped, inserted at random places: padding (-1) and, for the FP4 writer, slots
    # below -1.
    skipped = [-1] * s.get("pad", 0) + ([-2, -1000, I64_MIN] if s.get("bad") else [])
    per = HEAD // GEOM[rec][2]
    if names is not None:
        names = [names[r * per:(r + 1) * per] for r in range(n)]
    for v in skipped:
        at = int(rng.integers(0, k.shape[0] + 1))
        k = np.insert(k, at, random_rows(rng, 1, GEOM[rec][2]), axis=0)
        slots = np.insert(slots, at, v)
        if names is not None:
            names.insert(at, ["skipped row"] * per)
    if names is not None:
        names = [x for row in names for x in row]
    T = k.shape[0]
    if s["extra"]:  # rows past T, never read
        k = np.vstack([k, random_rows(rng, s["extra"], GEOM[rec][2])])
    if rec == NV:
        bad = [t for t in range(T) if not rotation_keeps(k[t])]
        assert not bad, f"rows {bad} are not kept by the FP4 writer's rotation"
    if s["view"] == "3d":
        dims, strides = (nb, bs, W), (stride, W, 1)
    elif s["view"] == "2d-narrow":
        dims, strides = (nb, bs * W), (stride, 1)
    else:
        dims, strides = (nb, stride), (stride, 1)
    return dict(k=k, slots=slots, T=T, bs=bs, stride=stride, nb=nb, dims=dims, strides=strides, names=names,
                numel=nb * stride,
                desc=(f"{s['desc']} | T={T} rows={k.shape[0]} B={bs} stride={stride} blocks={nb} view={list(dims)} "
                      f"padding={int((slots == -1).sum())} below -1={int((slots < -1).sum())}"))


def gather_specs(rec: str) -> list[dict]:
    """Block size, stride, cache kind, requests (seq_len, gather_len or None), gather_lens extra entries,
    offset, out layout ("contiguous", "padded", "transposed"), rows, storage offset."""
    W = GEOM[rec][3]
    return [
        dict(bs=64, stride=None, cache="table", reqs="table", offset=0, out="contiguous", orow=0, ooff=0,
             desc="every (scale byte, value) pair: the table tokens, gathered whole"),
        dict(bs=64, stride=None, cache="random", reqs=[(100, 40), (7, 7), (64, 0), (130, 129)], gextra=0, offset=5,
             out="padded", orow=3, ooff=0, desc="random bytes; gather_lens < seq_lens, 0 and == seq_len; offset 5; "
                                                "rows padded to 520"),
        dict(bs=32, stride=None, cache="shaped", reqs=[(90, None), (33, None), (1, None)], offset=0,
             out="transposed", orow=2, ooff=0,
             desc="quantized rows over the init pattern; no gather_lens; out a transposed [rows, R, 512] storage"),
        dict(bs=16, stride=16 * W + 5, cache="random", reqs=[(50, 20), (16, 16), (17, 1)], gextra=2, offset=3,
             out="contiguous", orow=1, ooff=1,
             desc="block size 16, odd stride 16*record+5; gather_lens 2 longer than R; out at element 1"),
        dict(bs=7, stride="min", cache="shaped", reqs=[(30, 12), (8, 8), (15, 9), (2, 2)], gextra=0, offset=2,
             out="padded", orow=0, ooff=0, desc="block size 7, minimal stride"),
        dict(bs=1, stride=W + 3, cache="random", reqs=[(9, 5), (4, None)], gextra=0, offset=1, out="transposed",
             orow=1, ooff=3, desc="block size 1, stride record+3, out at element 3"),
        dict(bs=64, stride=vllm_stride(rec, 64) + 2048 + 7, cache="shaped", reqs=[(200, 150), (64, 64)], gextra=1,
             offset=0, out="padded", orow=2, ooff=0, desc="a packed slab stride (vLLM's + 2055)"),
        dict(bs=64, stride=None, cache="random", reqs=[(0, 0), (3, 0)], gextra=0, offset=0, out="contiguous", orow=2,
             ooff=0, desc="nothing to gather (seq_len 0, gather_len 0)"),
    ]


def table_cache(rec: str, bs: int, stride: int, rng):
    """A cache of random bytes whose first tokens hold every (scale byte, value) pair: MXFP8 group g
    holds the 32 value bytes 32 (g mod 8) .. +31 under scale byte g // 8 (2048 groups, 128 tokens); FP4
    group g holds every nibble once (bytes 0x10, 0x32, .., 0xFE) under scale byte g (256 groups, 8
    tokens). Returns (cache, tokens)."""
    D, SB, G, _ = GEOM[rec]
    groups = 256 * 256 // G if rec == MX else 256
    tokens = groups // SB
    nb = -(-tokens // bs) + 1
    cache = rng.integers(0, 256, size=(nb, stride), dtype=np.uint8)
    nibbles = np.array([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE], np.uint8)
    for g in range(groups):
        tok, j = divmod(g, SB)
        blk, p = divmod(tok, bs)
        if rec == MX:
            vals, sb = (np.arange(G) + G * (g % (256 // G))).astype(np.uint8), g // (256 // G)
        else:
            vals, sb = nibbles, g
        at = p * D + j * len(vals)
        cache[blk, at:at + len(vals)] = vals
        cache[blk, bs * D + p * SB + j] = sb
    return cache, tokens


def build_gather_case(rng, rec: str, s: dict, salt: int) -> dict:
    D, SB, G, W = GEOM[rec]
    bs = s["bs"]
    stride = vllm_stride(rec, bs) if s["stride"] is None else bs * W if s["stride"] == "min" else s["stride"]
    if s["cache"] == "table":
        cache, tokens = table_cache(rec, bs, stride, rng)
        nb = cache.shape[0]
        reqs = [(tokens, None)]
    else:
        reqs = s["reqs"]
    max_seq = max((r[0] for r in reqs), default=0)
    cols = -(-max_seq // bs) + 2  # two columns past every request's need
    R = len(reqs)
    if s["cache"] != "table":
        nb = max(R * (cols - 2) + 3, 2)
        if s["cache"] == "random":
            cache = rng.integers(0, 256, size=(nb, stride), dtype=np.uint8)
        else:  # quantized random rows over the init pattern, at 3/4 of the slots
            cache = init_pattern(nb * stride, 1000 + salt).reshape(nb, stride)
            cap = nb * bs
            picks = rng.permutation(cap)[:(3 * cap) // 4]
            rows = random_rows(rng, len(picks), G)
            for row, slot in zip(rows, picks):
                blk, p = divmod(int(slot), bs)
                data, scales = encode_token(rec, row)
                cache[blk, p * D:(p + 1) * D] = data
                cache[blk, bs * D + p * SB:bs * D + (p + 1) * SB] = scales
    # The block table: each request's needed columns take distinct blocks (shuffled), the rest -1 or
    # garbage (never read).
    table = rng.choice(np.array([-1, 7777, -5], np.int32), size=(R, cols)).astype(np.int32)
    free = list(rng.permutation(nb))
    for b, (seq, _) in enumerate(reqs):
        for col in range(-(-seq // bs)):
            # The table tokens are read in order (position i is table token i); other requests take
            # distinct blocks at random.
            table[b, col] = col if s["cache"] == "table" else free.pop()
    seq = np.array([r[0] for r in reqs], np.int32)
    gat = None
    if any(r[1] is not None for r in reqs) or s.get("gextra"):
        gat = np.array([r[0] if r[1] is None else r[1] for r in reqs]
                       + [int(x) for x in rng.integers(0, 9, size=s.get("gextra", 0))], np.int32)
    g_eff = seq if gat is None else gat[:R]
    rows = s["offset"] + max((int(x) for x in g_eff), default=0) + s["orow"]
    if s["out"] == "transposed":
        dims, strides = (R, rows, HEAD), (HEAD, R * HEAD, 1)
        span = rows * R * HEAD
    else:
        rs = HEAD + (8 if s["out"] == "padded" else 0)
        dims, strides = (R, rows, HEAD), (rows * rs, rs, 1)
        span = R * rows * rs
    out = dict(offset=s["ooff"], dims=dims, strides=strides, numel=s["ooff"] + span + 3)
    return dict(cache=cache, seq=seq, gat=gat, table=table, bs=bs, stride=stride, nb=nb, offset=s["offset"],
                out=out, R=R,
                desc=(f"{s['desc']} | B={bs} stride={stride} blocks={nb} cache={s['cache']} seq_lens={seq.tolist()} "
                      f"gather_lens={None if gat is None else gat.tolist()} offset={s['offset']} "
                      f"out={list(dims)} strides={list(strides)} at element {s['ooff']}"))


# ---------------------------------------------------------------------------
# The kernels: Triton (on the GPU, or in Triton's interpreter), or the library for a stand-in
# ---------------------------------------------------------------------------
class Triton:
    def __init__(self):
        import torch
        import triton

        self.interpret = os.environ.get("TRITON_INTERPRET") == "1"
        if not self.interpret and not torch.cuda.is_available():
            sys.exit("make_golden_records: no CUDA device (use --standin for a dry run)")
        self.torch, self.dev = torch, "cpu" if self.interpret else "cuda"
        self.meta = {"torch": torch.__version__, "triton": triton.__version__,
                     "gpu": "Triton interpreter (CPU)" if self.interpret else torch.cuda.get_device_name(),
                     "set": "interpreter" if self.interpret else "public"}
        self.e2m1 = None

    def t(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.dev)

    def sync(self):
        if not self.interpret:
            self.torch.cuda.synchronize()

    def quantize(self, rec: str, c: dict, salt: int):
        torch = self.torch
        buf = self.t(init_pattern(c["numel"], salt))
        k = self.t(c["k"].view(np.int16)).view(torch.bfloat16)
        slots = self.t(c["slots"])
        if rec == MX:
            view = torch.as_strided(buf, c["dims"], c["strides"])
            tb.quantize_and_insert_k_cache_v41(k, view, slots, c["bs"])
        else:
            # rope_quant_insert reads the record off a [num_blocks, B, 288] view; cos 1, sin 0 at position 0.
            W = GEOM[rec][3]
            view = torch.as_strided(buf, (c["nb"], c["bs"], W), (c["stride"], W, 1))
            cos_sin = self.t(np.array([[1.0] * 32 + [0.0] * 32], np.float32))
            positions = self.t(np.zeros(k.shape[0], np.int64))
            ptx = tb.rope_quant_insert_v41(k, positions, cos_sin, view, slots, 1)
            self.e2m1 = "ptx" if ptx else "rule"
        self.sync()
        return buf.cpu().numpy(), None

    def gather(self, rec: str, c: dict, salt: int):
        torch = self.torch
        o = c["out"]
        buf = self.t(init_pattern(2 * o["numel"], salt).view(np.int16)).view(torch.bfloat16)
        out = torch.as_strided(buf, o["dims"], o["strides"], o["offset"])
        W = GEOM[rec][3]
        cache = torch.as_strided(self.t(c["cache"]), (c["nb"], c["bs"], W), (c["stride"], W, 1))
        gat = None if c["gat"] is None else self.t(c["gat"])
        tb.dequantize_and_gather_k_cache_v41(out, cache, self.t(c["seq"]), gat, self.t(c["table"]), c["bs"],
                                             c["offset"])
        self.sync()
        return buf.view(torch.int16).cpu().numpy().view(np.uint16), None


class Standin:
    def __init__(self):
        import dsv4kv
        import ml_dtypes

        self.dsv4kv, self.bf16 = dsv4kv, ml_dtypes.bfloat16
        self.meta = {"set": "standin"}
        self.e2m1 = "the dsv4kv library"

    @staticmethod
    def strided(buf, offset, shape, strides):
        item = buf.dtype.itemsize
        return np.lib.stride_tricks.as_strided(buf[offset:], shape, tuple(s * item for s in strides))

    def quantize(self, rec: str, c: dict, salt: int):
        buf = init_pattern(c["numel"], salt)
        err = np.zeros(1, np.int32)
        self.dsv4kv.quantize_and_insert_k_cache(c["k"].view(self.bf16), self.strided(buf, 0, c["dims"], c["strides"]),
                                                c["slots"], c["bs"], record=rec, error_count=err)
        return buf, int(err[0])

    def gather(self, rec: str, c: dict, salt: int):
        o = c["out"]
        buf = init_pattern(2 * o["numel"], salt).view(np.uint16).copy()
        out = self.strided(buf.view(self.bf16), o["offset"], o["dims"], o["strides"])
        err = np.zeros(1, np.int32)
        self.dsv4kv.dequantize_and_gather_k_cache(out, c["cache"], c["seq"], c["gat"], c["table"], c["bs"], c["offset"],
                                                  record=rec, error_count=err)
        return buf, int(err[0])


def view_params(name: str, offset: int, dims, strides) -> dict:
    p = {f"{name}_offset": offset}
    for i, (d, s) in enumerate(zip(dims, strides)):
        p[f"{name}_dim{i}"], p[f"{name}_stride{i}"] = d, s
    return p


def build(kind: str, kernels, rng):
    """(tensors, metadata, cases whose ref_match is 0, warnings, number of cases) of one file."""
    _, _, rec, _ = FILES[kind]
    quantize = kind.endswith("quantize")
    specs = quantize_specs(rec) if quantize else gather_specs(rec)
    tensors, meta, mismatches, warnings = {}, {}, [], []
    for idx, s in enumerate(specs):
        c = f"case{idx:03d}"
        salt = 5 + 7 * idx
        if quantize:
            case = build_quantize_case(rng, rec, s)
            run = kernels.quantize
            want = ref_quantize(rec, case["k"], case["slots"], init_pattern(case["numel"], salt), case["bs"],
                                case["stride"])
            want_err = quantize_errors(case["k"], case["slots"], case["nb"] * case["bs"])
        else:
            case = build_gather_case(rng, rec, s, salt)
            run = kernels.gather
            want = ref_gather(rec, case, init_pattern(2 * case["out"]["numel"], salt).view("<u2"))
            want_err = gather_errors(rec, case)
        first = run(rec, case, salt)
        second = run(rec, case, salt)
        if not np.array_equal(first[0], second[0]) or first[1] != second[1]:
            sys.exit(f"make_golden_records: {kind} {c}: two runs gave different bytes")
        if first[1] is not None and first[1] != want_err:
            warnings.append(f"{kind} {c}: the stand-in counted {first[1]} errors, the failure model {want_err}")
        ref_match = np.array_equal(first[0], want)
        if not ref_match:
            mismatches.append(c)

        if quantize:
            tensors[f"{c}.k"] = ("BF16", case["k"])
            tensors[f"{c}.slot_mapping"] = case["slots"]
            tensors[f"{c}.k_cache_after"] = first[0].reshape(case["nb"], case["stride"]).astype(np.uint8)
            params = {"block_size": case["bs"], "is_ue8m0": 1, "use_fnuz": 0}
            params.update(view_params("k_cache", 0, case["dims"], case["strides"]))
        else:
            tensors[f"{c}.k_cache"] = case["cache"]
            tensors[f"{c}.seq_lens"] = case["seq"]
            if case["gat"] is not None:
                tensors[f"{c}.gather_lens"] = case["gat"]
            tensors[f"{c}.block_table"] = case["table"]
            tensors[f"{c}.out_after"] = ("BF16", np.asarray(first[0], np.uint16))
            o = case["out"]
            params = {"block_size": case["bs"], "offset": case["offset"], "use_fnuz": 0}
            params.update(view_params("out", o["offset"], o["dims"], o["strides"]))
        params.update({"init_salt": salt, "error_count": want_err})
        for k, v in params.items():
            tensors[f"{c}.param.{k}"] = np.array([v], dtype=np.int64)
        meta[f"{c}.desc"] = case["desc"]
        meta[f"{c}.ref_match"] = int(ref_match)
        meta[f"{c}.record"] = rec
        if quantize and case["names"] is not None:
            meta[f"{c}.group_names"] = json.dumps(case["names"][:case["T"] * GEOM[rec][1]])
    return tensors, meta, mismatches, warnings, len(specs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "conformance/golden"),
                    help="folder to write the files (" + ", ".join(f[0] for f in FILES.values()) + ") into")
    ap.add_argument("--only", choices=sorted(FILES), help="write one of the files")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--standin", action="store_true",
                    help="no GPU: outputs from the dsv4kv library, for testing the replay (never committed)")
    ap.add_argument("--self-check", action="store_true",
                    help="only check the numpy references on hand-worked cases (no torch, Triton or dsv4kv)")
    a = ap.parse_args()
    fails = self_check()
    for f in fails:
        print(f"make_golden_records: self-check: {f}")
    if a.self_check or fails:
        print(f"make_golden_records: self-check {'failed' if fails else 'passed'}")
        return 1 if fails else 0
    out = Path(a.out).resolve()
    kernels = Standin() if a.standin else Triton()
    if kernels.meta["set"] != "public" and (REPO / "conformance/golden").resolve() in (out, *out.parents):
        sys.exit(f"make_golden_records: a {kernels.meta['set']} file is not written under conformance/golden")
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    for n, kind in enumerate(sorted(FILES)):
        if a.only and kind != a.only:
            continue
        fname, op, rec, kernel = FILES[kind]
        rng = np.random.default_rng([a.seed, n])
        tensors, meta, mismatches, warnings, num_cases = build(kind, kernels, rng)
        header = {"format": "dsv4kv-golden-v1", "op": op, "layout": "fields", "seed": a.seed, "generator": GENERATOR,
                  "date": datetime.date.today().isoformat(), "num_cases": num_cases, "runs": "2 (identical)",
                  "kernel": kernel if not a.standin else "the dsv4kv library (a stand-in, not a measurement)",
                  "record": rec}
        header.update(kernels.meta)
        if kind == "nvfp4_quantize":
            header["e2m1"] = {"ptx": "cvt.rn.satfinite.e2m1x2.f32 (measured)",
                              "rule": "the instruction's rule in Triton (_fp32x2_to_fp4x2_rule; the GPU lacks it)"
                              }.get(kernels.e2m1, kernels.e2m1)
        header.update(meta)
        path = out / fname
        write_safetensors(path, tensors, header)
        print(f"make_golden_records: wrote {path} ({path.stat().st_size} bytes, {num_cases} cases, "
              f"set {header['set']})")
        for w in warnings:
            print(f"make_golden_records: warning: {w}")
        if mismatches:
            print(f"make_golden_records: {kind}: ref_match = 0 for {', '.join(mismatches)} (kept as measured)")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
