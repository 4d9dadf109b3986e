#!/usr/bin/env python3
"""A Triton dequantize_and_gather_k_cache_sparse, one program per output row: the comparison point
for dsv4kv::cuda in the bench (issue 12), in the style of vLLM PR #42504's Triton fallback.

    dequantize_and_gather_k_cache_sparse_triton(out, k_cache, slot_indices, block_size, layout,
                                                use_fnuz=False, error_count=None)

Semantics are the spec's (spec/operations.md, "dequantize_and_gather_k_cache_sparse"): slot -1 is
padding (no load, no store); any other slot outside [0, num_blocks * block_size) is skipped, its
row untouched, and counted in `error_count` when one is given; every other row gets the dequantized
token (fp32 product of the code and the UE8M0 scale, rounded to bf16) and its RoPE bits. `out` may
have any row stride; `slot_indices` is int32 or int64.

No layout number is written here: `layout` is the dict `dsv4kv_bench --layout-json` prints
(bench/triton_bench.py reads the same), and SparseLayout derives the record offsets from it.

CPU self-check (no GPU, no Triton, no torch needed):
    python3 bench/triton_sparse_gather.py --self-check --layout-json FILE   (or --bench-bin BIN)
checks the row address arithmetic the kernel uses (slot_plan, written with the same expressions)
against the spec's worked example and against the shape of a block: every token's records are
disjoint and together tile the block's used bytes exactly; and the padding/range rule on the edge
slots.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass

try:  # the kernel needs Triton (GPU machine); the self-check does not
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the machine
    triton = None
    tl = None


@dataclass(frozen=True)
class SparseLayout:
    """The cache record sizes the kernel indexes with, derived from the spec's constants."""

    head_dim: int  # values per output row
    nope_dim: int  # FP8 codes per token
    num_tiles: int  # scale bytes used per token
    tile: int  # codes per scale byte
    rope_dim: int  # bf16 RoPE values per token
    token_data_bytes: int  # one token's codes + RoPE bytes
    scale_bytes: int  # one token's scale record (tiles + pad)

    @staticmethod
    def from_json(d: dict) -> "SparseLayout":
        token_data = d["nope_dim"] + d["rope_bytes"]
        return SparseLayout(
            head_dim=d["head_dim"],
            nope_dim=d["nope_dim"],
            num_tiles=d["num_tiles"],
            tile=d["nope_dim"] // d["num_tiles"],
            rope_dim=d["rope_bytes"] // d["bf16_bytes"],
            token_data_bytes=token_data,
            scale_bytes=d["token_bytes"] - token_data,
        )


def slot_plan(slot: int, block_size: int, num_blocks: int, block_stride: int, lay: SparseLayout):
    """What the kernel does for one slot: ("pad", None) for -1, ("bad", None) for any other slot
    outside the cache (counted), else ("row", (codes, scales, rope)): the cache byte offsets of the
    token's FP8 codes, its scale bytes and its RoPE values. Same expressions as the kernel."""
    if slot == -1:
        return "pad", None
    blk = slot // block_size
    if slot < 0 or blk >= num_blocks:
        return "bad", None
    pos = slot % block_size
    base = blk * block_stride
    codes = base + pos * lay.token_data_bytes
    scales = base + block_size * lay.token_data_bytes + pos * lay.scale_bytes
    rope = codes + lay.nope_dim
    return "row", (codes, scales, rope)


if triton is not None:

    @triton.jit
    def _sparse_gather_row_kernel(
        out_ptr,
        out_row_stride,
        cache_ptr,
        slots_ptr,
        err_ptr,
        num_blocks,
        block_stride,
        BLOCK_SIZE: tl.constexpr,
        NOPE: tl.constexpr,
        TILE: tl.constexpr,
        NUM_TILES: tl.constexpr,
        TILES_P2: tl.constexpr,
        ROPE: tl.constexpr,
        TOKEN_DATA: tl.constexpr,
        SCALE_BYTES: tl.constexpr,
        USE_FNUZ: tl.constexpr,
    ):
        row = tl.program_id(0)
        slot = tl.load(slots_ptr + row).to(tl.int64)
        blk = slot // BLOCK_SIZE
        ok = (slot >= 0) & (blk < num_blocks)
        if err_ptr is not None:
            bad = (slot != -1) & ((slot < 0) | (blk >= num_blocks))
            tl.atomic_add(err_ptr, 1, mask=bad)
        pos = slot % BLOCK_SIZE  # used only under `ok`
        base = cache_ptr + blk * block_stride
        codes_ptr = base + pos * TOKEN_DATA
        scales_ptr = base + BLOCK_SIZE * TOKEN_DATA + pos * SCALE_BYTES
        out_row = out_ptr + row.to(tl.int64) * out_row_stride

        # The NoPE values as a [tiles, tile] block: one scale byte per row of it.
        t = tl.arange(0, TILES_P2)[:, None]
        e = tl.arange(0, TILE)[None, :]
        m = (t < NUM_TILES) & ok
        codes = tl.load(codes_ptr + t * TILE + e, mask=m, other=0)
        s = tl.load(scales_ptr + t, mask=m, other=0).to(tl.int32)
        # UE8M0 byte s as fp32 bits s << 23: +0 for 0, 2^(s-127) for 1..254, +inf for 255 (the spec's S(s)).
        scale = (s << 23).to(tl.float32, bitcast=True)
        if USE_FNUZ:
            x = codes.to(tl.float8e4b8, bitcast=True).to(tl.float32)
        else:
            x = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        tl.store(out_row + t * TILE + e, (x * scale).to(tl.bfloat16), mask=m)

        # The RoPE values, copied as bf16 bits.
        r = tl.arange(0, ROPE)
        rope = tl.load((codes_ptr + NOPE).to(tl.pointer_type(tl.bfloat16)) + r, mask=ok)
        tl.store(out_row + NOPE + r, rope, mask=ok)


def dequantize_and_gather_k_cache_sparse_triton(out, k_cache, slot_indices, block_size, layout,
                                                use_fnuz=False, error_count=None):
    """out [>= N, head_dim] bf16 (any row stride), k_cache [num_blocks, ...] uint8 with each block's
    bytes contiguous, slot_indices [N] int32 or int64 contiguous, error_count None or an int32
    tensor of one element. `layout`: the `--layout-json` dict or a SparseLayout."""
    if triton is None:
        raise RuntimeError("triton_sparse_gather: Triton is not installed")
    lay = layout if isinstance(layout, SparseLayout) else SparseLayout.from_json(layout)
    n = slot_indices.shape[0]
    if n == 0:
        return
    assert out.shape[-1] == lay.head_dim and out.stride(-1) == 1 and slot_indices.stride(0) == 1
    _sparse_gather_row_kernel[(n,)](
        out,
        out.stride(0),
        k_cache,
        slot_indices,
        error_count,
        k_cache.shape[0],
        k_cache.stride(0),
        BLOCK_SIZE=block_size,
        NOPE=lay.nope_dim,
        TILE=lay.tile,
        NUM_TILES=lay.num_tiles,
        TILES_P2=triton.next_power_of_2(lay.num_tiles),
        ROPE=lay.rope_dim,
        TOKEN_DATA=lay.token_data_bytes,
        SCALE_BYTES=lay.scale_bytes,
        USE_FNUZ=use_fnuz,
        num_warps=1,
    )


# ---------------------------------------------------------------------------
# CPU self-check of the index arithmetic
# ---------------------------------------------------------------------------


def self_check(layout: dict) -> list[str]:
    """Failures of slot_plan against the spec's example and the shape of a block ([] = pass)."""
    lay = SparseLayout.from_json(layout)
    bs, stride = layout["block_size"], layout["aligned_stride"]
    fails = []

    # spec/operations.md, the sparse gather's example (checked in C++ by SparseGather.SpecExample):
    # slot 130 of 4 blocks at vLLM's stride: codes at 76,032, tile-0 scale at 111,760, RoPE at 76,480.
    got = slot_plan(130, bs, 4, stride, lay)
    if got != ("row", (76032, 111760, 76480)):
        fails.append(f"spec example: slot 130 -> {got}, want row at (76032, 111760, 76480)")
    for slot, want in ((-1, "pad"), (7, "row"), (300, "bad"), (-5, "bad"), (255, "row"), (256, "bad"),
                       (-2, "bad"), (-(2**31), "bad"), (2**31 - 1, "bad"), (-(2**63), "bad"), (2**63 - 1, "bad")):
        kind = slot_plan(slot, bs, 4, stride, lay)[0]
        if kind != want:
            fails.append(f"slot {slot} of a 4-block cache: {kind}, want {want}")

    # Every block size: the records of all positions of one block are disjoint and tile
    # [0, B * token_bytes) exactly; codes + RoPE fill one data record; the scale record comes after
    # all data records; block b's records are those of block 0 moved by b * stride.
    for b in (1, 2, 5, 16, 64, 128):
        used = bytearray(b * (lay.token_data_bytes + lay.scale_bytes))
        for pos in range(b):
            kind, (codes, scales, rope) = slot_plan(pos, b, 1, len(used), lay)
            if rope != codes + lay.nope_dim or rope + 2 * lay.rope_dim != codes + lay.token_data_bytes:
                fails.append(f"B={b} pos={pos}: codes {codes} and RoPE {rope} do not fill one data record")
            if scales < b * lay.token_data_bytes:
                fails.append(f"B={b} pos={pos}: scale record {scales} inside the data records")
            if lay.num_tiles >= lay.scale_bytes:
                fails.append(f"{lay.num_tiles} scale bytes do not fit a {lay.scale_bytes}-byte record")
            for lo, n in ((codes, lay.token_data_bytes), (scales, lay.scale_bytes)):
                for k in range(lo, lo + n):
                    if k >= len(used) or used[k]:
                        fails.append(f"B={b} pos={pos}: byte {k} outside the block or used twice")
                        break
                    used[k] = 1
            far = slot_plan(3 * b + pos, b, 4, stride, lay)[1]
            if far != tuple(x + 3 * stride for x in (codes, scales, rope)):
                fails.append(f"B={b} slot {3 * b + pos}: {far} is not block 0's records moved by 3 * stride")
        if not all(used):
            fails.append(f"B={b}: {used.count(0)} bytes of the block's used region are in no record")
    return fails


def read_layout(args) -> dict:
    if args.layout_json:
        with open(args.layout_json) as f:
            return json.load(f)
    out = subprocess.run([args.bench_bin, "--layout-json"], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-check", action="store_true", help="check the index arithmetic on the CPU")
    ap.add_argument("--layout-json", default="", help="file with the output of dsv4kv_bench --layout-json")
    ap.add_argument("--bench-bin", default="build/bench/dsv4kv_bench", help="dsv4kv_bench, asked for --layout-json")
    args = ap.parse_args()
    if not args.self_check:
        ap.print_help()
        return 2
    fails = self_check(read_layout(args))
    for f in fails:
        print("FAIL:", f)
    print("triton_sparse_gather self-check:", "FAILED" if fails else "passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
