#!/usr/bin/env python3
"""Time the Triton transcription of the vLLM kernels at the shapes dsv4kv_bench times.

Usage (on a CUDA GPU, from the repository root):
    python3 bench/triton_bench.py --oracle-dir .oracle --out OUT/triton.json [--bench-bin BIN]
                                  [--quick] [--only OP,...]

--oracle-dir is a git-ignored copy of ../shared/oracle (dsv4_triton.py and bench.py). The timing
kernels are imported from that directory's dsv4_triton.py at run time. Timing is this file's own
harness, the same method as bench/timer.cu: each op (or chain) captured once in a CUDA graph, and before each
replay (outside the events) an L2 flush that leaves the L2 clean: a 256 MiB memset, then a
read-only reduction over another 256 MiB tensor (a memset alone leaves dirty lines that the timed
kernel would write back). Headline: median of the replays ("cold_graph_us"); the full run adds
triton.testing's do_bench and do_bench_cudagraph (warm) medians.

Shapes, input distributions and byte counts follow bench/cases.cpp; the join key of each row
("quantize tokens=65536 stride=...", ...) is the same string dsv4kv_bench writes, so
bench/compare.py can pair them. The block size, strides and spec constants (head dimension, token
bytes, row alignments) come from `dsv4kv_bench --layout-json` (--bench-bin, default
$DSV4KV_BENCH or .carry/dsv4kv_bench), which takes them from spec/include: nothing here restates
them, and the keys match the binary's by construction. Where the oracle offers several variants of one operation
(combine: the vLLM wrapper, which fills the -1 padding with torch.full before its kernel; the
kernel alone on a pre-filled buffer; the fork kernel with its wrapper) each variant is a row.
The chains ("chain decode", "chain prefill") run the same steps captured in one CUDA graph. Every
row with a check step is byte-checked (field "verify") against the dsv4kv package on the same
inputs when it is installed with CUDA on the machine, else "not run (...)"; the dense decode row
(the dense gather timed as a comparison point for the sparse one) has no check step.

The sparse gather has no oracle kernel: its Triton counterpart is written here (one program per
output row). So are current upstream's global top-k and DeepSeek-V4.1 combine and mixed-index
kernels (the semantics profiles vllm_v4 and vllm_v41), and vLLM's DeepSeek-V4.1 record writers and
gathers (the 528- and 288-byte records, the sources of bench/make_golden_records.py), which the
oracle predates. The sparse gather's index arithmetic is checked on the CPU (no GPU, torch or
Triton needed) by
    python3 bench/triton_bench.py --self-check [--layout-json FILE | --bench-bin BIN]
against the spec's worked example and the shape of a block (CTest: bench_triton_self_check).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

try:  # the sparse gather's kernel needs Triton (and a GPU); --list and --self-check do not
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the machine
    triton = None
    tl = None

OPS = ("quantize", "gather", "global_topk", "combine", "mixed", "sparse_gather", "chain")
ALIASES = {
    "quantize_and_insert_k_cache": "quantize",
    "dequantize_and_gather_k_cache": "gather",
    "compute_global_topk_indices_and_lens": "global_topk",
    "combine_topk_swa_indices": "combine",
    "build_flashinfer_mixed_sparse_indices": "mixed",
    "dequantize_and_gather_k_cache_sparse": "sparse_gather",
}



#: combine's problem: requests, query and prefix tokens per request, window, compression ratio.
C_NREQ, C_Q, C_P, C_WIN, C_CR = 4, 2048, 8192, 128, 4


def plan(lay: dict) -> list:
    """(op, key, parameters) of every timed case, in the operation table's order, chains last:
    the keys dsv4kv_bench --list prints (bench/test_case_keys.py compares the two)."""
    a, u = lay["aligned_stride"], lay["unaligned_stride"]
    p = [("quantize", f"quantize tokens={n} stride={s}", (n, s))
         for n, s in [(n, a) for n in (1, 64, 4096, 16384, 65536)] + [(65536, u)]]
    recs = lay.get("records", [])  # the V4.1 records, in dsv4kv_bench's order
    p += [("quantize", f"quantize tokens=65536 stride={r['block_stride']} record={r['name']}",
           (65536, r["block_stride"], r["name"])) for r in recs]
    p += [("gather", f"gather reqs={r} tokens={t} stride={s}", (r, t, s)) for (r, t), s in
          [(rt, a) for rt in ((1, 128), (1, 8192), (1, 32000), (4, 8192), (16, 8192), (64, 2048), (256, 128))]
          + [((16, 8192), u)]]
    p += [("gather", f"gather reqs=16 tokens=8192 stride={r['block_stride']} record={r['name']}",
           (16, 8192, r["block_stride"], r["name"])) for r in recs]
    p += [("sparse_gather", f"sparse_gather rows={r} topk={k} stride={a}", (r, k))
          for r, k in ((256, 512), (64, 2048), (1024, 2048))]
    p += [("sparse_gather", "sparse_gather decode reqs=256 ctx=8192 topk=512", ()),
          ("sparse_gather", "sparse_gather decode-dense reqs=256 ctx=8192", ())]
    for sem in ("seed", "vllm_v4"):
        p += [("global_topk", f"global_topk tokens={t} topk={k}{profile_suffix(sem)}", (t, k, sem, False))
              for t in (64, 8192) for k in (512, 2048)]
        p += [("global_topk", f"global_topk tokens=8192 topk={k} trailing{profile_suffix(sem)}", (8192, k, sem, True))
              for k in (512, 2048)]
    p += [("combine", f"combine tokens={C_NREQ * C_Q} topk={k} window={C_WIN} image={i}{profile_suffix(sem)}",
           (k, i, sem)) for k in (512, 2048) for i, sem in ((0, "seed"), (64, "seed"), (0, "vllm_v41"))]
    p += [("mixed", "mixed decode=256" + (f" draft={d} swa_width=192" if d > 1 else "")
           + f" prefill=8192 topk=512 window=128{profile_suffix(sem)}", (d, sem))
          for d, sem in ((1, "seed"), (1, "vllm_v41"), (4, "seed"), (4, "vllm_v4"))]
    p += [("chain", "chain decode", ()), ("chain", "chain prefill", ())]
    return p


def profile_suffix(semantics: str) -> str:
    """The key suffix of a semantics profile's row (dsv4kv_bench's semantics_suffix): none for the seed."""
    return "" if semantics == "seed" else f" semantics={semantics}"


def bench_layout(bench_bin: str) -> dict:
    """The spec constants and bench shapes, as `dsv4kv_bench --layout-json` prints them."""
    try:
        out = subprocess.run([bench_bin, "--layout-json"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
        return json.loads(out)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as e:
        sys.exit(f"triton_bench: cannot read the layout from {bench_bin} --layout-json ({e}); "
                 "pass the dsv4kv_bench binary with --bench-bin")


def round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


# ---------------------------------------------------------------------------
# dequantize_and_gather_k_cache_sparse in Triton: the oracle has no such kernel, so this is the
# comparison point for dsv4kv::cuda, one program per output row, in the style of vLLM
# PR #42504's Triton fallback. Semantics are the spec's (spec/operations.md): slot -1 is padding
# (no load, no store); any other slot outside [0, num_blocks * block_size) is skipped, its row
# untouched, and counted in `error_count` when one is given; every other row gets the dequantized
# token (fp32 product of the code and the UE8M0 scale, rounded to bf16) and its RoPE bits. `out`
# may have any row stride; `slot_indices` is int32 or int64. No layout number is written here:
# `layout` is the --layout-json dict, and SparseLayout derives the record offsets from it.
# ---------------------------------------------------------------------------


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
        raise RuntimeError("triton_bench: Triton is not installed")
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


# CPU self-check of the sparse gather's index arithmetic (--self-check).


# ---------------------------------------------------------------------------
# Current upstream index kernels (the semantics profiles vllm_v41 and vllm_v4 of spec/operations.md,
# "Semantics profiles"): the comparison points and golden-vector sources of those profiles
# (bench/make_golden_upstream.py). Each keeps upstream's grid, per-element formulas and masks; only
# the JIT warm-up machinery is left out (plain triton.jit kernels).
#
# combine_topk_swa_indices_v41
#   vllm-project/vllm, vllm/models/deepseek_v41/common/ops/cache_utils.py at commit
#   091b5c262a27725de1695495f3fdf6a3b3943e7b: ``CombineTopkSwaIndicesKernel.kernel`` and the
#   ``combine_topk_swa_indices`` wrapper. Token-parallel: grid cdiv(T, BLOCK_T = 2), num_warps 2;
#   each token finds its request by a binary search over query_start_loc rebased by its first
#   element; top-k values outside [0, N) become -1 but still count in the length; the window
#   starts at max(pos - (W - 1), 0, seq_len - gather_len); compress_ratio 0 gives no top-k
#   entries; the whole row [0, round_up(topk + W, 128)) is stored, -1 past the length; no image
#   windows. Tokens outside every request get an all -1 row and length 0.
#
# build_flashinfer_mixed_sparse_indices_v41
#   Same file and commit: ``_build_flashinfer_mixed_sparse_indices_kernel``, ``_remap_flashinfer_index``
#   and the ``build_flashinfer_mixed_sparse_indices`` wrapper (required keyword ``replay_start``).
#   One program per token (grid T = D + P), num_warps 4 when next_power_of_2 of SW or of P4 is
#   >= 256, else 1; SW = decode_swa_indices' width (>= window), P4 = round_up(max(topk, dct), 4),
#   rows [SW | P4], every element of [T, SW + P4] stored. Decode rows (t < D): all SW columns copied
#   through the block-span remap (no DSpark layout, also when SW > window); compressed columns
#   c < dct copied, or with local indices translated through the compressed table row
#   token_to_req[t] (decode_is_valid_token false rows are translated too), the rest -1; length SW +
#   (0 when dct = 0; local: #non-negative inputs when decode_is_valid_token, else 0; else
#   decode_compressed_topk_lens[t], else dct). Prefill rows: req = token_to_req[t], query_start_loc
#   holds global token indices, pos = seq_len - q + t - query_start; window start
#   max(max(pos - (W - 1), 0), replay_start[req]), swa_len = pos - start + 1 (<= 0: no column);
#   topk_len = min((pos + 1) // compress_ratio, topk), 0 for compress_ratio 0; compressed column c
#   reads prefill_topk[p, c] for c < min(its width, topk_len); length SW + topk_len (the window's
#   -1 columns count). No bounds on requests or table columns, no image windows, no error counter; a
#   looked-up negative table entry gives a negative slot that the remap turns into -1.
#
# compute_global_topk_indices_and_lens_v4
#   vLLM PR #55692 ("[Bugfix][Kernel][DSv4/4.1] Bound sparse MLA block-table gathers", open
#   when crawled), applied to both vllm/models/deepseek_v4 and deepseek_v41. The PR's final
#   kernel text was not found in the stored copies; what was found: the PR description (bounds
#   0 <= req < block_table.shape[0] and 0 <= local // B < block_table.shape[1], the logical shape
#   and not the row stride; invalid entries -1 and left out of topk_lens; survivors compacted
#   into the prefix topk_lens covers), its tests (tests/kernels/attention/
#   test_compute_global_topk_bounds.py, e.g. Blackwellboy/vllm @ ba60ac13 and vllm-project/vllm
#   @ 4e9e566c; tests/kernels/attention/test_flashmla_sparse.py, Blackwellboy/vllm @ 789f3b01)
#   and an early kernel of the PR branch (Blackwellboy/vllm @ e93aa092: one program per token,
#   TRITON_BLOCK_SIZE 1024, the lookup masked and its address clamped, no compaction yet). The
#   kernel here is written from those: one program per token, chunks of 1024 columns, entry c
#   kept iff local >= 0, req in range and local // B < cols, kept entries packed left in column
#   order, the rest of [0, topk) -1, topk_lens = #kept for valid tokens, else 0.
#   Inferred (not in any text found): how the row is compacted (here: the row is first filled
#   with -1, then each chunk scatters its kept entries after those of the chunks before it; any
#   compaction gives the same bytes) and what a token with is_valid_token false gets. The
#   description says the PR "includes is_valid_token in the gather mask"; its only discriminating
#   test asserts nothing about such a row's entries. Default here, as the description says and the
#   library's profiles do: such a row is all -1 (lens 0); ``mask_invalid_tokens=False`` gives the
#   early branch kernel's reading (translated, lens 0, the seed's rule).
#   Upstream has no error counter; a negative block-table entry that is looked up gives a negative
#   slot (block * B + offset) counted as valid.
# ---------------------------------------------------------------------------
#: Row width alignment of the V4.1 combine: the literal 128 of its wrapper (FlashMLA needs topk % 128 == 0).
COMBINE_ROW_ALIGNMENT = 128
#: Tokens per program of the V4.1 combine kernel.
COMBINE_BLOCK_T = 2
#: Columns per chunk of the global top-k kernel.
GLOBAL_TOPK_CHUNK = 1024


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def combine_row_width_v41(topk: int, window_size: int) -> int:
    """Width of a V4.1 combined row (no image columns)."""
    return round_up(topk + window_size, COMBINE_ROW_ALIGNMENT)


if triton is not None:

    @triton.jit(do_not_specialize=["combined_indices_stride", "topk_indices_stride", "M", "N", "num_tokens",
                                   "num_reqs"])
    def _combine_topk_swa_indices_v41_kernel(
        combined_indices_ptr,
        combined_indices_stride,
        combined_lens_ptr,
        topk_indices_ptr,
        topk_indices_stride,
        query_start_loc_ptr,
        seq_lens_ptr,
        gather_lens_ptr,
        M,
        N,
        num_tokens,
        num_reqs,
        TOP_K: tl.constexpr,
        COMPRESS_RATIO: tl.constexpr,
        WINDOW_SIZE: tl.constexpr,
        WIDTH: tl.constexpr,  # round_up(TOP_K + WINDOW_SIZE, 128), computed in the kernel upstream
        PADDED_WIDTH: tl.constexpr,
        BLOCK_T: tl.constexpr,
    ):
        # BLOCK_T consecutive tokens per program.
        token = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        valid_token = token < num_tokens
        base = tl.load(query_start_loc_ptr)

        # Request of each token: the last b in [0, num_reqs] with qsl[b] - base <= token, so a token
        # at the start of a request preceded by empty ones (repeated starts) goes to the non-empty one.
        # num_reqs is a runtime bound: the search loops while any lane is still narrowing.
        lo = tl.zeros((BLOCK_T,), tl.int32)
        hi = tl.full((BLOCK_T,), 0, tl.int32) + num_reqs
        while tl.sum((lo < hi).to(tl.int32), 0) > 0:
            active = lo < hi
            mid = (lo + hi + 1) // 2
            start = tl.load(query_start_loc_ptr + mid, mask=active, other=0) - base
            go_right = active & (start <= token)
            lo = tl.where(go_right, mid, lo)
            hi = tl.where(active & ~go_right, mid - 1, hi)

        batch_idx = tl.minimum(lo, num_reqs - 1)
        total_queries = tl.load(query_start_loc_ptr + num_reqs) - base
        # A token past the last request's end belongs to none: all -1, length 0.
        owned = valid_token & (token < total_queries)
        query_start = tl.load(query_start_loc_ptr + batch_idx, mask=owned, other=0) - base
        query_end = tl.load(query_start_loc_ptr + batch_idx + 1, mask=owned, other=0) - base
        seq_len = tl.load(seq_lens_ptr + batch_idx, mask=owned, other=0)
        gather_len = tl.load(gather_lens_ptr + batch_idx, mask=owned, other=0)
        pos = seq_len - (query_end - query_start) + token - query_start
        # The gathered SWA rows start at this position.
        gather_start = seq_len - gather_len
        if COMPRESS_RATIO > 0:
            topk_len = tl.maximum(tl.minimum((pos + 1) // COMPRESS_RATIO, TOP_K), 0)
        else:  # a layer without a compressed cache: no top-k entries
            topk_len = tl.full((BLOCK_T,), 0, tl.int32)
        topk_len = tl.where(owned, topk_len, 0)
        swa_start = tl.maximum(tl.maximum(pos - (WINDOW_SIZE - 1), 0), gather_start)
        swa_len = tl.where(owned, tl.maximum(pos - swa_start + 1, 0), 0)

        # The whole row [0, WIDTH) is stored (a reused buffer gets its -1 tail); top-k entries keep
        # their column and count in the length even when they are -1.
        offset = tl.arange(0, PADDED_WIDTH)[None, :]
        in_topk = offset < topk_len[:, None]
        topk_values = tl.load(
            topk_indices_ptr + token.to(tl.int64)[:, None] * topk_indices_stride + offset,
            mask=owned[:, None] & in_topk,
            other=-1,
        )
        valid_topk = (topk_values >= 0) & (topk_values < N)
        topk_values = tl.where(valid_topk, topk_values + M * batch_idx[:, None], -1)
        swa_values = (M * batch_idx[:, None] + N + swa_start[:, None] + offset - topk_len[:, None]
                      - gather_start[:, None])
        values = tl.where(in_topk, topk_values,
                          tl.where(offset < (topk_len + swa_len)[:, None], swa_values, -1))
        tl.store(
            combined_indices_ptr + token.to(tl.int64)[:, None] * combined_indices_stride + offset,
            values,
            mask=valid_token[:, None] & (offset < WIDTH),
        )
        tl.store(combined_lens_ptr + token, topk_len + swa_len, mask=valid_token)

    @triton.jit(do_not_specialize=["block_table_rows", "block_table_cols"])
    def _global_topk_v4_kernel(
        global_topk_indices_ptr,
        global_topk_indices_stride: tl.constexpr,
        topk_lens_ptr,
        topk_indices_ptr,
        topk_indices_stride: tl.constexpr,
        topk: tl.constexpr,
        token_to_req_indices_ptr,
        block_table_ptr,
        block_table_stride: tl.constexpr,
        block_table_rows,
        block_table_cols,
        block_size: tl.constexpr,
        is_valid_token_ptr,
        MASK_INVALID_TOKENS: tl.constexpr,
        TRITON_BLOCK_SIZE: tl.constexpr,
    ):
        token_idx = tl.program_id(0)
        is_valid_token = tl.load(is_valid_token_ptr + token_idx)
        req_idx = tl.load(token_to_req_indices_ptr + token_idx)
        # Row bound from the table's logical shape; a bad row is never addressed (clamped, masked).
        req_ok = (req_idx >= 0) & (req_idx < block_table_rows)
        safe_req = tl.where(req_ok, req_idx, 0)
        out_row = global_topk_indices_ptr + token_idx * global_topk_indices_stride

        # Pass 1: every column of [0, topk) becomes -1.
        for i in range(0, topk, TRITON_BLOCK_SIZE):
            offset = i + tl.arange(0, TRITON_BLOCK_SIZE)
            tl.store(out_row + offset, -1, mask=offset < topk)
        # Pass 2 writes columns other threads filled: order the fills before it.
        tl.debug_barrier()

        # Pass 2: kept entries, packed left in column order across chunks.
        count = tl.zeros((), dtype=tl.int32)
        for i in range(0, topk, TRITON_BLOCK_SIZE):
            offset = i + tl.arange(0, TRITON_BLOCK_SIZE)
            mask = offset < topk
            local_idx = tl.load(topk_indices_ptr + token_idx * topk_indices_stride + offset, mask=mask, other=-1)
            block_indices = local_idx // block_size
            # Column bound from the logical shape too, not the row stride.
            is_valid = (mask & (local_idx >= 0) & (block_indices >= 0) & (block_indices < block_table_cols)
                        & req_ok)
            if MASK_INVALID_TOKENS:
                is_valid = is_valid & is_valid_token
            safe_block = tl.where(is_valid, block_indices, 0)
            block_numbers = tl.load(block_table_ptr + safe_req * block_table_stride + safe_block, mask=is_valid,
                                    other=0)
            slot_ids = block_numbers * block_size + local_idx % block_size
            kept = is_valid.to(tl.int32)
            dst = count + tl.cumsum(kept, axis=0) - kept
            tl.store(out_row + dst, slot_ids, mask=is_valid)
            count += tl.sum(kept, axis=0)

        # Padding tokens get length 0.
        tl.store(topk_lens_ptr + token_idx, tl.where(is_valid_token, count, 0))


def _need_triton():
    if triton is None:
        raise RuntimeError("triton_bench: Triton (and torch) are needed to run the kernels")


def combine_topk_swa_indices_v41(topk_indices, query_start_loc, seq_lens, gather_lens, window_size: int,
                                 compress_ratio: int, topk: int, M: int, N: int, out=None):
    """vLLM V4.1's combine_topk_swa_indices. topk_indices [T, >= topk] int32 (unit inner stride, any row
    stride); query_start_loc [R + 1], seq_lens [R], gather_lens [>= R] int32. out: None, or
    (combined_indices [T, round_up(topk + window_size, 128)] int32 with any row stride and unit inner
    stride, combined_lens [T] int32 contiguous), every element of which is written. Returns the pair."""
    _need_triton()
    import torch
    num_tokens = topk_indices.shape[0]
    width = combine_row_width_v41(topk, window_size)
    if out is None:
        combined_indices = torch.empty((num_tokens, width), dtype=torch.int32, device=topk_indices.device)
        combined_lens = torch.empty(num_tokens, dtype=torch.int32, device=topk_indices.device)
    else:
        combined_indices, combined_lens = out
    if num_tokens == 0:
        return combined_indices, combined_lens
    assert combined_indices.stride(-1) == 1 and topk_indices.stride(-1) == 1
    assert num_tokens == 1 or combined_lens.stride(0) == 1
    num_reqs = seq_lens.shape[0]
    _combine_topk_swa_indices_v41_kernel[(cdiv(num_tokens, COMBINE_BLOCK_T),)](
        combined_indices,
        combined_indices.stride(0),
        combined_lens,
        topk_indices,
        topk_indices.stride(0),
        query_start_loc,
        seq_lens,
        gather_lens,
        M,
        N,
        num_tokens,
        num_reqs,
        TOP_K=topk,
        COMPRESS_RATIO=compress_ratio,
        WINDOW_SIZE=window_size,
        WIDTH=width,
        PADDED_WIDTH=next_power_of_2(width),
        BLOCK_T=COMBINE_BLOCK_T,
        num_warps=2,
    )
    return combined_indices, combined_lens


def compute_global_topk_indices_and_lens_v4(topk_indices, token_to_req_indices, block_table, block_size: int,
                                            is_valid_token, out=None, mask_invalid_tokens: bool = True):
    """compute_global_topk_indices_and_lens with vLLM PR #55692's bounds and compaction. topk_indices
    [T, topk] int32 (unit inner stride), token_to_req_indices [>= T] int32, block_table [R, C] int32
    (unit inner stride, any row stride: its bounds are its shape), is_valid_token [>= T] bool. out:
    None, or (global_topk_indices [T, topk] int32 with any row stride, topk_lens [T] int32
    contiguous); columns [0, topk) of every row are written. mask_invalid_tokens: see the module
    docstring. Returns the pair."""
    _need_triton()
    import torch
    num_tokens = topk_indices.shape[0]
    if out is None:
        global_topk_indices = torch.empty_like(topk_indices)
        topk_lens = torch.empty(num_tokens, dtype=torch.int32, device=topk_indices.device)
    else:
        global_topk_indices, topk_lens = out
    if num_tokens == 0:  # an empty grid is not launched
        return global_topk_indices, topk_lens
    assert block_table.dim() == 2 and block_table.stride(-1) == 1 and topk_indices.stride(-1) == 1
    assert global_topk_indices.stride(-1) == 1 and (num_tokens == 1 or topk_lens.stride(0) == 1)
    _global_topk_v4_kernel[(num_tokens,)](
        global_topk_indices,
        global_topk_indices.stride(0),
        topk_lens,
        topk_indices,
        topk_indices.stride(0),
        topk_indices.shape[-1],
        token_to_req_indices,
        block_table,
        block_table.stride(0),
        block_table.shape[0],
        block_table.shape[1],
        block_size,
        is_valid_token,
        MASK_INVALID_TOKENS=mask_invalid_tokens,
        TRITON_BLOCK_SIZE=GLOBAL_TOPK_CHUNK,
    )
    return global_topk_indices, topk_lens


#: Compressed-region alignment of the V4.1 mixed builder: FlashInfer loads index rows 16 bytes (4 int32) at a time.
MIXED_TOPK_ALIGNMENT = 4


def mixed_row_width_v41(swa_width: int, topk: int, decode_compressed_topk: int) -> int:
    """Width of a V4.1 mixed row: SW, then the compressed region padded to a multiple of 4."""
    return swa_width + round_up(max(topk, decode_compressed_topk), MIXED_TOPK_ALIGNMENT)


if triton is not None:

    @triton.jit
    def _remap_flashinfer_index_v41(values, block_size, block_span):
        # Packed pages: slot block * block_size + off is addressed as block * block_span + off.
        # Negative values stay -1.
        keep = values >= 0
        v = tl.where(keep, values, 0)
        v = (v // block_size) * block_span + v % block_size
        return tl.where(keep, v, -1)

    @triton.jit(do_not_specialize=["sparse_indices_stride", "decode_swa_stride", "decode_compressed_stride",
                                   "prefill_topk_stride", "swa_block_table_stride", "swa_block_size",
                                   "swa_block_span", "compressed_block_table_stride", "compressed_block_size",
                                   "compressed_block_span", "NUM_DECODE_TOKENS", "PREFILL_TOPK_STRIDE"])
    def _build_flashinfer_mixed_sparse_indices_v41_kernel(
        sparse_indices_ptr,
        sparse_indices_stride,
        sparse_topk_lens_ptr,
        decode_swa_indices_ptr,
        decode_swa_stride,
        decode_compressed_indices_ptr,
        decode_compressed_stride,
        decode_compressed_topk_lens_ptr,
        decode_is_valid_token_ptr,
        prefill_topk_indices_ptr,
        prefill_topk_stride,
        query_start_loc_ptr,
        seq_lens_ptr,
        token_to_req_indices_ptr,
        replay_start_ptr,
        swa_block_table_ptr,
        swa_block_table_stride,
        swa_block_size,
        swa_block_span,
        compressed_block_table_ptr,
        compressed_block_table_stride,
        compressed_block_size,
        compressed_block_span,
        NUM_DECODE_TOKENS,
        WINDOW_SIZE: tl.constexpr,
        SWA_INDEX_WIDTH: tl.constexpr,
        COMPRESS_RATIO: tl.constexpr,
        TOP_K: tl.constexpr,
        PADDED_TOP_K: tl.constexpr,
        PREFILL_TOPK_STRIDE,  # the width (shape[-1]) of prefill_topk_indices, upstream's name
        DECODE_COMPRESSED_TOPK: tl.constexpr,
        DECODE_COMPRESSED_INDICES_ARE_LOCAL: tl.constexpr,
        HAS_DECODE_COMPRESSED_LENS: tl.constexpr,
        WINDOW_BLOCK_SIZE: tl.constexpr,
        TOPK_BLOCK_SIZE: tl.constexpr,
    ):
        token_idx = tl.program_id(0)
        out_row = sparse_indices_ptr + token_idx * sparse_indices_stride

        if token_idx < NUM_DECODE_TOKENS:
            # Decode row, SWA region: the precomputed slots, remapped.
            for i in range(0, SWA_INDEX_WIDTH, WINDOW_BLOCK_SIZE):
                col = i + tl.arange(0, WINDOW_BLOCK_SIZE)
                in_region = col < SWA_INDEX_WIDTH
                slots = tl.load(decode_swa_indices_ptr + token_idx * decode_swa_stride + col, mask=in_region,
                                other=-1)
                tl.store(out_row + col, _remap_flashinfer_index_v41(slots, swa_block_size, swa_block_span),
                         mask=in_region)

            # Compressed region: dct given entries (global, or local ones translated), then -1.
            kept = tl.zeros((), dtype=tl.int32)
            for i in range(0, PADDED_TOP_K, TOPK_BLOCK_SIZE):
                col = i + tl.arange(0, TOPK_BLOCK_SIZE)
                in_region = col < PADDED_TOP_K
                entries = tl.load(decode_compressed_indices_ptr + token_idx * decode_compressed_stride + col,
                                  mask=col < DECODE_COMPRESSED_TOPK, other=-1)
                if DECODE_COMPRESSED_INDICES_ARE_LOCAL:
                    token_valid = tl.load(decode_is_valid_token_ptr + token_idx)
                    present = entries >= 0
                    req = tl.load(token_to_req_indices_ptr + token_idx)
                    blocks = tl.load(compressed_block_table_ptr + req * compressed_block_table_stride
                                     + entries // compressed_block_size, mask=in_region & present, other=-1)
                    entries = tl.where(present, blocks * compressed_block_size + entries % compressed_block_size,
                                       -1)
                    # Counted: non-negative inputs of a valid token (not checked after the lookup).
                    kept += tl.sum((present & token_valid).to(tl.int32), axis=0)
                entries = _remap_flashinfer_index_v41(entries, compressed_block_size, compressed_block_span)
                tl.store(out_row + SWA_INDEX_WIDTH + col, entries, mask=in_region)

            if DECODE_COMPRESSED_TOPK == 0:
                compressed_len = tl.zeros((), dtype=tl.int32)
            elif DECODE_COMPRESSED_INDICES_ARE_LOCAL:
                compressed_len = kept
            elif HAS_DECODE_COMPRESSED_LENS:
                compressed_len = tl.load(decode_compressed_topk_lens_ptr + token_idx)
            else:
                compressed_len = tl.full((), DECODE_COMPRESSED_TOPK, dtype=tl.int32)
            tl.store(sparse_topk_lens_ptr + token_idx, SWA_INDEX_WIDTH + compressed_len)
        else:
            # Prefill row: place the token (query_start_loc holds global token indices), no bounds.
            prefill_idx = token_idx - NUM_DECODE_TOKENS
            req = tl.load(token_to_req_indices_ptr + token_idx)
            query_start = tl.load(query_start_loc_ptr + req)
            query_len = tl.load(query_start_loc_ptr + req + 1) - query_start
            seq_len = tl.load(seq_lens_ptr + req)
            pos = seq_len - query_len + (token_idx - query_start)
            # The causal window, starting no earlier than the request's replay start (bounded replay).
            window_start = tl.maximum(pos - (WINDOW_SIZE - 1), 0)
            window_start = tl.maximum(window_start, tl.load(replay_start_ptr + req))
            window_len = pos - window_start + 1
            if COMPRESS_RATIO > 0:
                topk_len = tl.minimum((pos + 1) // COMPRESS_RATIO, TOP_K)
            else:  # a layer without a compressed cache
                topk_len = tl.zeros((), dtype=tl.int32)

            for i in range(0, SWA_INDEX_WIDTH, WINDOW_BLOCK_SIZE):
                col = i + tl.arange(0, WINDOW_BLOCK_SIZE)
                in_region = col < SWA_INDEX_WIDTH
                in_window = col < window_len
                position = window_start + col
                blocks = tl.load(swa_block_table_ptr + req * swa_block_table_stride + position // swa_block_size,
                                 mask=in_region & in_window, other=-1)
                slots = tl.where(in_window, blocks * swa_block_size + position % swa_block_size, -1)
                tl.store(out_row + col, _remap_flashinfer_index_v41(slots, swa_block_size, swa_block_span),
                         mask=in_region)

            for i in range(0, PADDED_TOP_K, TOPK_BLOCK_SIZE):
                col = i + tl.arange(0, TOPK_BLOCK_SIZE)
                in_region = col < PADDED_TOP_K
                in_topk = col < topk_len
                local = tl.load(prefill_topk_indices_ptr + prefill_idx * prefill_topk_stride + col,
                                mask=(col < PREFILL_TOPK_STRIDE) & in_topk, other=-1)
                present = local >= 0
                blocks = tl.load(compressed_block_table_ptr + req * compressed_block_table_stride
                                 + local // compressed_block_size, mask=in_region & present, other=-1)
                slots = tl.where(in_topk & present, blocks * compressed_block_size + local % compressed_block_size,
                                 -1)
                slots = _remap_flashinfer_index_v41(slots, compressed_block_size, compressed_block_span)
                tl.store(out_row + SWA_INDEX_WIDTH + col, slots, mask=in_region)

            # The whole SWA region counts, -1 columns included.
            tl.store(sparse_topk_lens_ptr + token_idx, SWA_INDEX_WIDTH + topk_len)


def build_flashinfer_mixed_sparse_indices_v41(decode_swa_indices, decode_compressed_indices,
                                              decode_compressed_topk_lens, prefill_topk_indices, query_start_loc,
                                              seq_lens, token_to_req_indices, swa_block_table, swa_block_size: int,
                                              compressed_block_table, compressed_block_size: int, window_size: int,
                                              compress_ratio: int, topk: int,
                                              decode_compressed_indices_are_local: bool = False,
                                              decode_is_valid_token=None, swa_block_span=None,
                                              compressed_block_span=None, *, replay_start, out=None):
    """vLLM V4.1's build_flashinfer_mixed_sparse_indices: decode rows [0, D) then prefill rows. Tensors
    int32 (decode_is_valid_token bool) with unit inner stride; replay_start [>= R] int32 (required).
    Upstream has no ``out``: it allocates both outputs. ``out`` (added here, the last keyword, so that
    pre-filled storages can be passed): None, or (sparse_indices [D + P, SW + round_up(max(topk, dct), 4)]
    int32 with any row stride, sparse_topk_lens [D + P] int32 contiguous), every element of which is
    written. Returns (sparse_indices, sparse_topk_lens)."""
    _need_triton()
    import torch
    assert decode_swa_indices.dtype == torch.int32 and decode_swa_indices.dim() == 2
    swa_width = decode_swa_indices.shape[-1]
    assert swa_width >= window_size
    assert prefill_topk_indices.dtype == torch.int32 and prefill_topk_indices.dim() == 2
    num_decode_tokens = decode_swa_indices.shape[0]
    num_tokens = num_decode_tokens + prefill_topk_indices.shape[0]
    assert token_to_req_indices.shape[0] >= num_tokens

    # Absent inputs take a placeholder pointer the kernel never reads, as upstream does.
    decode_compressed_topk = 0
    if decode_compressed_indices is None:
        decode_compressed_indices = prefill_topk_indices
    else:
        assert decode_compressed_indices.dim() == 2 and decode_compressed_indices.shape[0] == num_decode_tokens
        decode_compressed_topk = decode_compressed_indices.shape[-1]
    if decode_compressed_topk > 0 and decode_compressed_indices_are_local:
        assert decode_is_valid_token is not None and decode_is_valid_token.dtype == torch.bool
        assert decode_is_valid_token.shape[0] >= num_decode_tokens
    else:
        decode_is_valid_token = token_to_req_indices
    if compressed_block_table is None:
        compressed_block_table = swa_block_table
    has_decode_compressed_lens = decode_compressed_topk_lens is not None
    if decode_compressed_topk_lens is None:
        decode_compressed_topk_lens = token_to_req_indices

    padded_topk = round_up(max(topk, decode_compressed_topk), MIXED_TOPK_ALIGNMENT)
    width = swa_width + padded_topk
    if out is None:
        sparse_indices = torch.empty((num_tokens, width), dtype=torch.int32, device=decode_swa_indices.device)
        sparse_topk_lens = torch.empty(num_tokens, dtype=torch.int32, device=decode_swa_indices.device)
    else:
        sparse_indices, sparse_topk_lens = out
        assert tuple(sparse_indices.shape) == (num_tokens, width) and sparse_indices.stride(-1) == 1
        assert tuple(sparse_topk_lens.shape) == (num_tokens,) and (num_tokens <= 1 or sparse_topk_lens.stride(0) == 1)
    if num_tokens == 0:
        return sparse_indices, sparse_topk_lens
    for t in (decode_swa_indices, decode_compressed_indices, prefill_topk_indices, swa_block_table,
              compressed_block_table):
        assert t.stride(-1) == 1 or t.numel() == 0

    window_block_size = next_power_of_2(max(swa_width, 1))
    topk_block_size = next_power_of_2(max(padded_topk, 1))
    num_warps = 4 if max(window_block_size, topk_block_size) >= 256 else 1
    # span = page stride / token stride; the block size (identity remap) when not given.
    swa_span = swa_block_size if swa_block_span is None else swa_block_span
    compressed_span = compressed_block_size if compressed_block_span is None else compressed_block_span
    _build_flashinfer_mixed_sparse_indices_v41_kernel[(num_tokens,)](
        sparse_indices,
        sparse_indices.stride(0),
        sparse_topk_lens,
        decode_swa_indices,
        decode_swa_indices.stride(0),
        decode_compressed_indices,
        decode_compressed_indices.stride(0),
        decode_compressed_topk_lens,
        decode_is_valid_token,
        prefill_topk_indices,
        prefill_topk_indices.stride(0),
        query_start_loc,
        seq_lens,
        token_to_req_indices,
        replay_start,
        swa_block_table,
        swa_block_table.stride(0),
        swa_block_size,
        swa_span,
        compressed_block_table,
        compressed_block_table.stride(0),
        compressed_block_size,
        compressed_span,
        NUM_DECODE_TOKENS=num_decode_tokens,
        WINDOW_SIZE=window_size,
        SWA_INDEX_WIDTH=swa_width,
        COMPRESS_RATIO=compress_ratio,
        TOP_K=topk,
        PADDED_TOP_K=padded_topk,
        PREFILL_TOPK_STRIDE=prefill_topk_indices.shape[-1],
        DECODE_COMPRESSED_TOPK=decode_compressed_topk,
        DECODE_COMPRESSED_INDICES_ARE_LOCAL=decode_compressed_indices_are_local,
        HAS_DECODE_COMPRESSED_LENS=has_decode_compressed_lens,
        WINDOW_BLOCK_SIZE=window_block_size,
        TOPK_BLOCK_SIZE=topk_block_size,
        num_warps=num_warps,
    )
    return sparse_indices, sparse_topk_lens



# ---------------------------------------------------------------------------
# DeepSeek-V4.1 cache records (spec/records.md): vLLM's writers and gathers of the 528-byte MXFP8
# record (`mxfp8_ds_mla`) and the 288-byte FP4 record (`nvfp4_ds_mla`), the golden-vector sources of
# bench/make_golden_records.py. Each keeps upstream's grid, per-element formulas and masks; only the
# JIT warm-up machinery and the platform switches of a non-NVIDIA GPU are left out.
#
# _quantize_and_insert_k_mxfp8_kernel, _dequantize_and_gather_k_mxfp8_kernel,
# _dequantize_and_gather_k_nvfp4_kernel
#   vllm-project/vllm, vllm/models/deepseek_v41/common/ops/cache_utils.py at commit
#   091b5c262a27725de1695495f3fdf6a3b3943e7b (PRs #56893 and #56935; #57604 set the FP4 gather's
#   grid). The writer is quantize_and_insert_k_cache(bytes_per_token=528): one program per
#   slot_mapping entry, only slot -1 skipped (any other slot is written wherever it points), row pid
#   read at k + pid * 512; per 32 values e = ceil(log2(max(amax, 1e-4) * (1/448))), values
#   x * 2^-e clamped to +-448 and converted to e4m3fn, scale byte clamp(e + 127, 0, 255). The
#   gathers are dequantize_and_gather_k_cache_triton's two V4.1 branches (the record read off
#   k_cache.shape[-1]; grid (R, 128) for 528 bytes, (R, min(max(128, 2048 // max(1, R)),
#   max(128, out.shape[1] - offset))) for 288); block-table row b at block_table + b * shape[-1].
#   Upstream's dequantize_and_gather_k_cache sends the 528-byte record to a CuTe-DSL kernel when
#   CuTe-DSL is installed; the Triton path is the one transcribed, as for the 584-byte golden files.
#
# _rope_quant_insert_nvfp4_kernel
#   vllm/models/deepseek_v41/common/ops/fused_compress_quant_cache.py at commit
#   1bd28daa03df01a6b5955124cca638cbed474ee6: the 288-byte branch of rope_quant_insert, the only
#   writer of the FP4 record (the compressed cache of nvfp4_ds_mla). One program per slot
#   (num_warps 4); a slot < 0, or a position with (position + 1) % compress_ratio != 0, is skipped.
#   GPT-J RoPE in fp32 on value pairs 224..255 (values 448..511), cos and sin of position // ratio *
#   ratio; the other pairs load (cos, sin) = (1, 0) and are still computed (even * 1 - odd * 0,
#   odd * 1 + even * 0). Then per 16 values scale = e4m3fn(clamp(amax * (1/6), 2^-9, 448)) and
#   values e2m1(div_rn(x, scale)), the even value in the low nibble.
#   bench/make_golden_records.py calls it with cos 1 and sin 0 at every position and compress_ratio
#   1, so that it quantizes the given bf16 row as quantize_and_insert_k_cache(record="nvfp4_ds_mla")
#   does. That rotation is the identity except where x * 0 is not a zero that leaves the partner
#   alone: an infinity makes its pair partner NaN (inf * 0), and a -0 can come out +0 (-0 - (+0) is
#   -0 but -0 - (-0) is +0); the generator checks every row it writes for that (rotation_keeps).
#   e2m1: upstream's _fp32x2_to_fp4x2 is the PTX cvt.rn.satfinite.e2m1x2.f32, which exists only
#   from sm_100a on. On an older GPU (an H200 is sm_90) the kernel uses _fp32x2_to_fp4x2_rule: the
#   instruction's rule written in Triton (round to nearest, ties to the even code, saturation to
#   +-6, the sign kept, also on a zero; NaN to +6, as spec/records.md infers). That step is then a
#   transcription of the rule, not of the instruction; everything else (the scale arithmetic, the
#   e4m3 conversion, div_rn, the layout) is the kernel's. E2M1_PTX says which ran.
# ---------------------------------------------------------------------------
#: The V4.1 records' byte widths and groups, as cache_utils.py names them.
V41_HEAD_DIM = 512
V41_BYTES_PER_TOKEN = 528
V41_QUANT_BLOCK = 32
V41_NUM_SCALES = V41_HEAD_DIM // V41_QUANT_BLOCK
V41_NVFP4_BYTES_PER_TOKEN = 288
V41_NVFP4_QUANT_BLOCK = 16
V41_NVFP4_NUM_SCALES = V41_HEAD_DIM // V41_NVFP4_QUANT_BLOCK
#: Workers per request of the 528-byte gather (dequantize_and_gather_k_cache_triton's NUM_WORKERS).
V41_GATHER_WORKERS = 128


def nvfp4_gather_workers(num_reqs: int, out_rows: int, offset: int) -> int:
    """Workers per request of the 288-byte gather (PR #57604): short gathers keep 128."""
    return min(max(128, 2048 // max(1, num_reqs)), max(128, out_rows - offset))


if triton is not None:

    @triton.jit
    def _quantize_and_insert_k_mxfp8_kernel(
        k_ptr,  # [num_tokens, 512] bf16, contiguous rows
        slot_mapping_ptr,  # [num_tokens] int64
        k_cache_ptr,  # [num_blocks, block_bytes] uint8
        num_tokens,
        head_dim: tl.constexpr,  # 512, RoPE values included
        scale_dim: tl.constexpr,  # 16
        quant_block: tl.constexpr,  # 32 values per UE8M0 scale
        cache_block_size: tl.constexpr,  # tokens per block
        block_stride: tl.constexpr,  # bytes per block, k_cache.stride(0)
        fp8_max: tl.constexpr,
        use_fnuz: tl.constexpr = False,
    ):
        pid = tl.program_id(0)
        if pid >= num_tokens:
            return
        slot_idx = tl.load(slot_mapping_ptr + pid)
        if slot_idx == -1:  # only -1: any other slot is followed
            return
        block_idx = slot_idx // cache_block_size
        pos_in_block = slot_idx % cache_block_size
        cache_block_ptr = k_cache_ptr + block_idx.to(tl.int64) * block_stride
        token_data_ptr = cache_block_ptr + pos_in_block * head_dim
        token_scale_ptr = cache_block_ptr + cache_block_size * head_dim + pos_in_block * scale_dim

        d = tl.arange(0, head_dim)
        x = tl.load(k_ptr + pid.to(tl.int64) * head_dim + d).to(tl.float32)
        tiles = tl.reshape(x, (scale_dim, quant_block))
        # The absmax floor gives an all-zero group a finite scale.
        amax = tl.maximum(tl.max(tl.abs(tiles), 1), 1e-4)
        exponent = tl.ceil(tl.log2(amax * (1.0 / fp8_max)))
        scaled = tl.clamp(tiles * tl.reshape(tl.exp2(-exponent), (scale_dim, 1)), -fp8_max, fp8_max)
        if use_fnuz:
            fp8 = scaled.to(tl.float8e4b8)
        else:
            fp8 = scaled.to(tl.float8e4nv)
        tl.store(token_data_ptr + d, tl.reshape(fp8.to(tl.uint8, bitcast=True), (head_dim,)))
        # UE8M0: the byte is exponent + 127.
        encoded = tl.minimum(tl.maximum(exponent + 127.0, 0.0), 255.0)
        tl.store(token_scale_ptr + tl.arange(0, scale_dim), encoded.to(tl.uint8))

    @triton.jit
    def _dequantize_and_gather_k_mxfp8_kernel(
        out_ptr,  # [num_reqs, rows, 512] bf16, unit inner stride
        out_stride0,
        out_stride1,
        k_cache_ptr,  # [num_blocks, block_size, 528] uint8
        seq_lens_ptr,  # [num_reqs] int32
        block_table_ptr,  # [num_reqs, max_blocks_per_seq] int32, contiguous
        offset,
        gather_lens_ptr,  # [num_reqs] int32 or None
        max_blocks_per_seq: tl.constexpr,
        head_dim: tl.constexpr,  # 512
        scale_dim: tl.constexpr,  # 16
        quant_block: tl.constexpr,  # 32
        cache_block_size: tl.constexpr,
        block_stride: tl.constexpr,
        use_fnuz: tl.constexpr = False,
    ):
        batch_idx = tl.program_id(0)
        worker_id = tl.program_id(1)
        num_workers = tl.num_programs(1)
        seq_len = tl.load(seq_lens_ptr + batch_idx)
        if gather_lens_ptr is not None:  # noqa: SIM108
            gather_len = tl.load(gather_lens_ptr + batch_idx)
        else:
            gather_len = seq_len
        start_pos = seq_len - gather_len

        d = tl.arange(0, head_dim)
        s = tl.arange(0, scale_dim)
        for i in range(worker_id, gather_len, num_workers):
            pos = start_pos + i
            block_in_seq = pos // cache_block_size
            pos_in_block = pos % cache_block_size
            physical_block_idx = tl.load(block_table_ptr + batch_idx * max_blocks_per_seq + block_in_seq)
            cache_block_ptr = k_cache_ptr + physical_block_idx.to(tl.int64) * block_stride
            token_data_ptr = cache_block_ptr + pos_in_block * head_dim
            token_scale_ptr = cache_block_ptr + cache_block_size * head_dim + pos_in_block * scale_dim

            x_uint8 = tl.load(token_data_ptr + d)
            if use_fnuz:
                x_fp8 = x_uint8.to(tl.float8e4b8, bitcast=True)
            else:
                x_fp8 = x_uint8.to(tl.float8e4nv, bitcast=True)
            tiles = tl.reshape(x_fp8.to(tl.float32), (scale_dim, quant_block))
            # UE8M0: the multiplier is 2^(byte - 127).
            encoded = tl.load(token_scale_ptr + s)
            scale = tl.exp2(encoded.to(tl.float32) - 127.0)
            dequant = tl.reshape(tiles * tl.reshape(scale, (scale_dim, 1)), (head_dim,))
            output_row_ptr = out_ptr + batch_idx * out_stride0 + (offset + i) * out_stride1
            tl.store(output_row_ptr + d, dequant.to(tl.bfloat16))

    @triton.jit
    def _dequantize_and_gather_k_nvfp4_kernel(
        out_ptr,  # [num_reqs, rows, 512] bf16, unit inner stride
        out_stride0,
        out_stride1,
        k_cache_ptr,  # [num_blocks, block_size, 288] uint8
        seq_lens_ptr,  # [num_reqs] int32
        block_table_ptr,  # [num_reqs, max_blocks_per_seq] int32, contiguous
        offset,
        gather_lens_ptr,  # [num_reqs] int32 or None
        max_blocks_per_seq: tl.constexpr,
        head_dim: tl.constexpr,  # 512
        scale_dim: tl.constexpr,  # 32
        quant_block: tl.constexpr,  # 16
        cache_block_size: tl.constexpr,
        block_stride: tl.constexpr,
    ):
        batch_idx = tl.program_id(0)
        worker_id = tl.program_id(1)
        num_workers = tl.num_programs(1)
        seq_len = tl.load(seq_lens_ptr + batch_idx)
        if gather_lens_ptr is not None:  # noqa: SIM108
            gather_len = tl.load(gather_lens_ptr + batch_idx)
        else:
            gather_len = seq_len
        start_pos = seq_len - gather_len

        packed_bytes: tl.constexpr = head_dim // 2
        d = tl.arange(0, head_dim)
        for i in range(worker_id, gather_len, num_workers):
            pos = start_pos + i
            block_in_seq = pos // cache_block_size
            pos_in_block = pos % cache_block_size
            physical_block_idx = tl.load(block_table_ptr + batch_idx * max_blocks_per_seq + block_in_seq)
            page = k_cache_ptr + physical_block_idx.to(tl.int64) * block_stride

            packed = tl.load(page + pos_in_block * packed_bytes + tl.arange(0, packed_bytes))
            # The even value is the low nibble.
            codes = tl.interleave((packed & 0xF).to(tl.int32), (packed >> 4).to(tl.int32))
            # e2m1 magnitudes of codes 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
            mag_code = codes & 7
            e = (mag_code >> 1).to(tl.float32)
            m = (mag_code & 1).to(tl.float32)
            mag = tl.where(mag_code < 2, m * 0.5, (1.0 + m * 0.5) * tl.exp2(e - 1.0))
            vals = tl.where(codes >= 8, -mag, mag)

            sf = tl.load(page + cache_block_size * packed_bytes + pos_in_block * scale_dim + tl.arange(0, scale_dim))
            scale = sf.to(tl.float8e4nv, bitcast=True).to(tl.float32)
            tiles = tl.reshape(vals, (scale_dim, quant_block))
            dequant = tl.reshape(tiles * tl.reshape(scale, (scale_dim, 1)), (head_dim,))
            output_row_ptr = out_ptr + batch_idx * out_stride0 + (offset + i) * out_stride1
            tl.store(output_row_ptr + d, dequant.to(tl.bfloat16))

    @triton.jit
    def _fp32x2_to_fp4x2_ptx(x_lo, x_hi):
        # Upstream's conversion (vllm/models/deepseek_v4/common/ops/fused_indexer_q.py): two fp32
        # values to one byte of e2m1 nibbles, x_lo in bits 0..3. sm_100a and later only.
        return tl.inline_asm_elementwise(
            """
            {
                .reg .b8 tmp;
                cvt.rn.satfinite.e2m1x2.f32 tmp, $1, $2;
                cvt.u32.u8 $0, tmp;
            }
            """,
            constraints="=r,f,f",
            args=[x_hi, x_lo],  # $1 is the high nibble
            dtype=tl.uint32,
            is_pure=True,
            pack=1,
        ).to(tl.uint8)

    @triton.jit
    def _e2m1_rule(x):
        # The e2m1 nibble of fp32 x by the rule of cvt.rn.satfinite.e2m1x2.f32: the magnitude code of
        # 0, 0.5, 1, 1.5, 2, 3, 4, 6 nearest to |x|, a midpoint (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5)
        # to the even code (">" above an even code, ">=" above an odd one), +-6 from 5 up (inf
        # included); bit 3 the sign, also of a zero; NaN is +6.
        a = tl.abs(x)
        code = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
                + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
                + (a > 5.0).to(tl.int32))
        is_nan = x != x
        negative = (x.to(tl.int32, bitcast=True) < 0) & ~is_nan
        return tl.where(is_nan, 7, code + tl.where(negative, 8, 0))

    @triton.jit
    def _fp32x2_to_fp4x2_rule(x_lo, x_hi):
        # _fp32x2_to_fp4x2_ptx's result by the instruction's rule, for GPUs without it.
        return (_e2m1_rule(x_lo) | (_e2m1_rule(x_hi) << 4)).to(tl.uint8)

    @triton.jit
    def _rope_quant_insert_nvfp4_kernel(
        latent,  # [>= num_tokens, 512] bf16, contiguous
        positions,  # [>= num_tokens] int64
        cos_sin,  # [max_pos, 64]: 32 cos, then 32 sin
        cache,  # [num_blocks, block_size, 288] uint8
        cache_slots,  # [num_tokens] int64
        COS_STRIDE: tl.constexpr,
        CACHE_STRIDE: tl.constexpr,  # bytes per block, cache.stride(0)
        CACHE_BLOCK: tl.constexpr,  # tokens per block, cache.shape[1]
        COMPRESS_RATIO: tl.constexpr,
        SANITIZE_CACHE_NANS: tl.constexpr,  # upstream's gfx950 switch; False on NVIDIA
        E2M1_PTX: tl.constexpr,  # the PTX conversion (sm_100a+), else its rule
    ):
        t = tl.program_id(0)
        slot = tl.load(cache_slots + t)
        if slot < 0:
            return
        position = tl.load(positions + t)
        if (position + 1) % COMPRESS_RATIO != 0:
            return
        d = tl.arange(0, 512)
        normed = tl.load(latent + t.to(tl.int64) * 512 + d).to(tl.float32)

        # Pairs below 224 load (cos, sin) = (1, 0): the rotation is the identity there.
        even, odd = tl.split(tl.reshape(normed, (256, 2)))
        pair = tl.arange(0, 256) - 224
        cs = cos_sin + (position // COMPRESS_RATIO * COMPRESS_RATIO) * COS_STRIDE
        c = tl.load(cs + tl.maximum(pair, 0), pair >= 0, other=1.0).to(tl.float32)
        s = tl.load(cs + 32 + tl.maximum(pair, 0), pair >= 0, other=0.0).to(tl.float32)
        rotated = tl.interleave(even * c - odd * s, odd * c + even * s)
        if SANITIZE_CACHE_NANS:
            rotated = tl.where(rotated == rotated, rotated, 0.0)

        tiles = tl.reshape(rotated, (32, 16))
        amax = tl.max(tl.abs(tiles), 1)
        # amax / 6 (6: e2m1's largest magnitude) clamped to [2^-9, 448], rounded to e4m3fn.
        scale = tl.clamp(amax * (1.0 / 6.0), 0.001953125, 448.0).to(tl.float8e4nv)
        # A correctly rounded division: an approximate one misplaces values on an e2m1 tie.
        scaled = tl.math.div_rn(tiles, tl.reshape(scale.to(tl.float32), (32, 1)))
        lo, hi = tl.split(tl.reshape(tl.reshape(scaled, (512,)), (256, 2)))
        if E2M1_PTX:
            packed = _fp32x2_to_fp4x2_ptx(lo, hi)
        else:
            packed = _fp32x2_to_fp4x2_rule(lo, hi)

        page = cache + (slot // CACHE_BLOCK).to(tl.int64) * CACHE_STRIDE
        tl.store(page + (slot % CACHE_BLOCK) * 256 + tl.arange(0, 256), packed)
        scales = page + CACHE_BLOCK * 256 + (slot % CACHE_BLOCK) * 32
        tl.store(scales + tl.arange(0, 32), scale.to(tl.uint8, bitcast=True))


def e2m1_ptx_available(device) -> bool:
    """Whether `device` runs cvt.rn.satfinite.e2m1x2.f32 (compute capability 10.0 or later)."""
    import torch
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (10, 0)


def quantize_and_insert_k_cache_v41(k, k_cache, slot_mapping, block_size: int = 64, is_ue8m0: bool = True,
                                    use_fnuz: bool = False, bytes_per_token: int = V41_BYTES_PER_TOKEN):
    """vLLM V4.1's quantize_and_insert_k_cache, its 528-byte branch (the 584-byte one is the oracle's).
    k [>= T, 512] bf16 with contiguous rows (rows >= T unread), k_cache [num_blocks, ...] uint8 whose
    stride(0) is the block stride (>= block_size * 528), slot_mapping [T] int64. use_fnuz raises, as
    upstream does on a GPU whose FP8 is not FNUZ."""
    _need_triton()
    import torch
    assert bytes_per_token == V41_BYTES_PER_TOKEN, "only the 528-byte record is transcribed here"
    assert k.dim() == 2 and k.shape[1] == V41_HEAD_DIM and k.dtype == torch.bfloat16 and k.stride(1) == 1
    assert is_ue8m0, "Only support ue8m0 quantization."
    if use_fnuz:
        raise ValueError("use_fnuz=True requires a platform using FNUZ FP8")
    num_tokens = slot_mapping.shape[0]
    if num_tokens == 0:  # an empty grid is not launched
        return
    _quantize_and_insert_k_mxfp8_kernel[(num_tokens,)](
        k,
        slot_mapping,
        k_cache,
        num_tokens,
        head_dim=V41_HEAD_DIM,
        scale_dim=V41_NUM_SCALES,
        quant_block=V41_QUANT_BLOCK,
        cache_block_size=block_size,
        block_stride=k_cache.stride(0),
        fp8_max=torch.finfo(torch.float8_e4m3fn).max,
        use_fnuz=False,
    )


def dequantize_and_gather_k_cache_v41(out, k_cache, seq_lens, gather_lens, block_table, block_size: int,
                                      offset: int, use_fnuz: bool = False, max_gather_len=None):
    """vLLM V4.1's dequantize_and_gather_k_cache_triton, its two V4.1 branches: the record is
    k_cache.shape[-1] (528 or 288; the 584-byte branch is the oracle's). out [R, rows, 512] bf16 with
    unit inner stride, k_cache [num_blocks, block_size, record] uint8 whose stride(0) is the block
    stride, seq_lens [R] and gather_lens ([>= R] or None) int32, block_table [R, C] int32 contiguous.
    max_gather_len is accepted and unused, as upstream's V4.1 branches leave it."""
    _need_triton()
    num_reqs = seq_lens.shape[0]
    if num_reqs == 0:  # an empty grid is not launched
        return
    assert block_table.is_contiguous() and out.stride(-1) == 1
    record = k_cache.shape[-1]
    if record == V41_NVFP4_BYTES_PER_TOKEN:
        _dequantize_and_gather_k_nvfp4_kernel[(num_reqs, nvfp4_gather_workers(num_reqs, out.shape[1], offset))](
            out,
            out.stride(0),
            out.stride(1),
            k_cache,
            seq_lens,
            block_table,
            offset,
            gather_lens,
            max_blocks_per_seq=block_table.shape[-1],
            head_dim=V41_HEAD_DIM,
            scale_dim=V41_NVFP4_NUM_SCALES,
            quant_block=V41_NVFP4_QUANT_BLOCK,
            cache_block_size=block_size,
            block_stride=k_cache.stride(0),
        )
        return
    assert record == V41_BYTES_PER_TOKEN, f"not a V4.1 record width: {record}"
    _dequantize_and_gather_k_mxfp8_kernel[(num_reqs, V41_GATHER_WORKERS)](
        out,
        out.stride(0),
        out.stride(1),
        k_cache,
        seq_lens,
        block_table,
        offset,
        gather_lens,
        max_blocks_per_seq=block_table.shape[-1],
        head_dim=V41_HEAD_DIM,
        scale_dim=V41_NUM_SCALES,
        quant_block=V41_QUANT_BLOCK,
        cache_block_size=block_size,
        block_stride=k_cache.stride(0),
        use_fnuz=use_fnuz,
    )


def rope_quant_insert_v41(latent, positions, cos_sin_cache, kv_cache, slot_mapping, compress_ratio: int,
                          fp8_scale=None, e2m1_ptx=None):
    """vLLM V4.1's rope_quant_insert, its 288-byte branch (kv_cache uint8 [num_blocks, block_size, 288]
    whose stride(0) is the block stride). latent [>= T, 512] bf16 contiguous, positions [>= T] int64,
    cos_sin_cache [max_pos, 64] (cos, then sin), slot_mapping [T] int64, compress_ratio 1 or 2.
    e2m1_ptx: None picks the PTX conversion where the GPU has it (e2m1_ptx_available), else its rule;
    added here, the last keyword. Returns whether the PTX conversion ran."""
    _need_triton()
    import torch
    assert compress_ratio in (1, 2)
    assert latent.shape[1] == V41_HEAD_DIM and latent.dtype == torch.bfloat16 and latent.is_contiguous()
    assert kv_cache.dtype == torch.uint8 and kv_cache.shape[-1] == V41_NVFP4_BYTES_PER_TOKEN, \
        "only the 288-byte record is transcribed here"
    num_tokens = slot_mapping.numel()
    assert num_tokens <= min(latent.shape[0], positions.numel())
    ptx = e2m1_ptx_available(kv_cache.device) if e2m1_ptx is None else bool(e2m1_ptx)
    if num_tokens == 0:
        return ptx
    _rope_quant_insert_nvfp4_kernel[(num_tokens,)](
        latent,
        positions,
        cos_sin_cache,
        kv_cache,
        slot_mapping,
        COS_STRIDE=cos_sin_cache.stride(0),
        CACHE_STRIDE=kv_cache.stride(0),
        CACHE_BLOCK=kv_cache.shape[1],
        COMPRESS_RATIO=compress_ratio,
        SANITIZE_CACHE_NANS=False,
        E2M1_PTX=ptx,
        num_warps=4,
    )
    return ptx


def self_check(layout: dict) -> list[str]:
    """Failures of slot_plan against the spec's example and the shape of a block ([] = pass)."""
    lay = SparseLayout.from_json(layout)
    bs, stride = layout["block_size"], layout["aligned_stride"]
    fails = []

    # spec/operations.md, the sparse gather's example (checked in C++ by SpecExamples.SparseGather):
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


def load_oracle(oracle_dir: str):
    """Imports dsv4_triton (the Triton transcription) from oracle_dir."""
    oracle_dir = os.path.abspath(oracle_dir)
    if not os.path.isfile(os.path.join(oracle_dir, "dsv4_triton.py")):
        sys.exit(f"triton_bench: {oracle_dir}/dsv4_triton.py not found (copy ../shared/oracle there)")
    sys.path.insert(0, oracle_dir)
    import dsv4_triton  # noqa: E402

    return dsv4_triton


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle-dir", help="folder of dsv4_triton.py (required unless --list)")
    ap.add_argument("--bench-bin", default=os.environ.get("DSV4KV_BENCH", ".carry/dsv4kv_bench"),
                    help="dsv4kv_bench binary: source of the spec constants and shapes (--layout-json)")
    ap.add_argument("--out", help="JSON file to write (required unless --list)")
    ap.add_argument("--list", action="store_true", help="print the keys it would time and exit (no GPU, no torch)")
    ap.add_argument("--quick", action="store_true", help="cold graph timing only, 20 replays")
    ap.add_argument("--only", default="", help="comma-separated ops: " + ", ".join(OPS))
    ap.add_argument("--filter", default="", help="only keys containing this substring")
    ap.add_argument("--self-check", action="store_true",
                    help="check the sparse gather kernel's index arithmetic on the CPU and exit "
                         "(no GPU, torch or Triton)")
    ap.add_argument("--layout-json", default="", help="with --self-check: a file holding dsv4kv_bench --layout-json")
    a = ap.parse_args()
    if a.self_check:
        if a.layout_json:
            with open(a.layout_json) as f:
                layout = json.load(f)
        else:
            layout = bench_layout(a.bench_bin)
        fails = self_check(layout)
        for f in fails:
            print("FAIL:", f)
        print("triton_bench sparse gather self-check:", "FAILED" if fails else "passed")
        return 1 if fails else 0
    only = set()
    for op in filter(None, a.only.split(",")):
        op = ALIASES.get(op, op)
        if op not in OPS:
            ap.error(f"unknown op for --only: {op}")
        only.add(op)
    lay = bench_layout(a.bench_bin)
    wanted_cases = [(op, key, params) for op, key, params in plan(lay)
                    if (not only or op in only) and a.filter in key]
    if a.list:
        print("\n".join(key for _, key, _ in wanted_cases))
        return 0 if wanted_cases else 1
    if not a.oracle_dir or not a.out:
        ap.error("--oracle-dir and --out are required (unless --list)")
    cases = {}
    for op, key, params in wanted_cases:
        cases.setdefault(op, []).append((key, params))
    BS, NBLOCKS, HEAD_DIM = lay["block_size"], lay["num_blocks"], lay["head_dim"]
    ALIGNED_STRIDE, UNALIGNED_STRIDE = lay["aligned_stride"], lay["unaligned_stride"]
    # Minimal bytes per token, as bench/cases.cpp counts them: quantize reads the bf16 row and the int64
    # slot and writes the token's record; gather reads codes, RoPE and scale bytes and writes a bf16 row.
    row_bytes = HEAD_DIM * lay["bf16_bytes"]
    quant_bytes = row_bytes + 8 + lay["token_bytes"]
    gather_bytes = lay["nope_dim"] + lay["rope_bytes"] + lay["num_tiles"] + row_bytes

    import numpy as np
    import torch
    import triton
    import triton.testing as tt

    if not torch.cuda.is_available():
        print("triton_bench: no CUDA device visible to torch", file=sys.stderr)
        return 2
    K = load_oracle(a.oracle_dir)
    dev = "cuda"
    torch.manual_seed(0)

    props = torch.cuda.get_device_properties(0)
    info = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "quick": a.quick,
        "method": "headline cold_graph_us: op captured in a CUDA graph, before each replay a clean L2 flush "
        "(256 MiB zero_, then a read-only amax over another 256 MiB tensor), events around the replay, median. "
        "do_bench_us / warm_graph_us = triton.testing.do_bench / do_bench_cudagraph medians.",
    }
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
             "power.draw,power.limit,temperature.gpu", "--format=csv"],
            capture_output=True, text=True, timeout=20).stdout
    except Exception as e:  # noqa: BLE001
        info["nvidia_smi"] = repr(e)

    # Copy ceiling in this process too (torch copy_, (read+write)/time), for reference beside ours.
    copy = []
    for nbytes in (1 << 30, 4 << 30):
        try:
            src = torch.empty(nbytes, dtype=torch.uint8, device=dev).random_()
            dst = torch.empty_like(src)
            ms = tt.do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
            copy.append({"bytes": nbytes, "us": ms * 1e3, "GBps_read_plus_write": 2 * nbytes / ms / 1e6})
            del src, dst
        except Exception as e:  # noqa: BLE001
            print(f"copy {nbytes >> 20} MiB skipped: {e}", file=sys.stderr)
        torch.cuda.empty_cache()
    info["copy"] = copy
    ceiling = max((c["GBps_read_plus_write"] for c in copy), default=float("nan"))
    info["copy_ceiling_GBps"] = ceiling
    print(f"copy ceiling {ceiling:.0f} GB/s: {copy}", flush=True)

    # The clean L2 flush (same method as bench/timer.cu): memset, then a read-only pass.
    flush_w = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    flush_r = torch.zeros(64 << 20, dtype=torch.int32, device=dev)  # 256 MiB, only ever read

    def flush(clean=True):
        flush_w.zero_()
        if clean:
            torch.amax(flush_r)  # reads 256 MiB; writes one scalar

    def cold_graph_us(fn, n=60, clean=True):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        for _ in range(3):
            flush(clean)
            g.replay()
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for st, en in evs:
            flush(clean)
            st.record()
            g.replay()
            en.record()
        torch.cuda.synchronize()
        del g
        return 1e3 * float(np.median([st.elapsed_time(en) for st, en in evs]))

    # Flush-bias probe: a 1 MiB and a 32 MiB copy after each kind of flush.
    probes = []
    for mib in (1, 32):
        src = torch.ones(mib << 20, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        pr = {"what": f"copy_ {mib} MiB", "memset_only_flush_us": cold_graph_us(lambda: dst.copy_(src), 40, False),
              "clean_flush_us": cold_graph_us(lambda: dst.copy_(src), 40, True)}
        probes.append(pr)
        print(f"flush probe {pr['what']}: memset-only {pr['memset_only_flush_us']:.2f} us, "
              f"clean {pr['clean_flush_us']:.2f} us", flush=True)
        del src, dst
    info["flush_probe"] = probes

    rows = []

    # The byte check: dsv4kv's Python package (when it is installed with CUDA on this machine) on the
    # same inputs; every row's outputs after its timed replays must equal dsv4kv's byte for byte.
    try:
        import dsv4kv as D
        usable, why = D.cuda_available()
        if not usable:
            D, no_check = None, f"not run (dsv4kv has no CUDA here: {why})"
    except Exception as e:  # noqa: BLE001 (not installed, or installed without a loadable extension)
        D, no_check = None, f"not run (dsv4kv package not importable: {e})"

    def same_bytes(got, want):
        return got.shape == want.shape and torch.equal(got.contiguous().view(torch.uint8),
                                                       want.contiguous().view(torch.uint8))

    def verify(steps):
        """'ok', 'MISMATCH: op output', or why no check ran, for the steps' (op, triton outputs, ours) triples."""
        if D is None:
            return no_check
        torch.cuda.synchronize()
        for op, got, ours in steps:
            for i, (g, w) in enumerate(zip(got(), ours())):
                if not same_bytes(g, w):
                    return f"MISMATCH: {op} output {i}"
        return "ok"

    def add(op, key, shape, variant, fn, bytes_min, note="", steps=()):
        t0 = time.time()
        try:
            if a.quick:
                m = {"cold_graph_ms": cold_graph_us(fn, n=20) / 1e3}
            else:
                m = {"do_bench_ms": tt.do_bench(fn, warmup=25, rep=200, return_mode="median"),
                     "cold_graph_ms": cold_graph_us(fn) / 1e3,
                     "warm_graph_ms": tt.do_bench_cudagraph(fn, rep=100, return_mode="median")}
        except Exception as e:  # noqa: BLE001
            rows.append({"key": key, "op": op, "shape": shape, "variant": variant, "error": repr(e)[:400]})
            print(f"ERROR {key} [{variant}]: {e}", file=sys.stderr, flush=True)
            return
        try:  # a failing check must not cost the timing
            check = verify(steps) if steps else "not run (a comparison point without a check step)"
        except Exception as e:  # noqa: BLE001
            check = f"MISMATCH: the check failed: {e!r}"[:400]
        us = m["cold_graph_ms"] * 1e3
        gbps = bytes_min / (us * 1e-6) / 1e9
        r = {"key": key, "op": op, "shape": shape, "variant": variant, "cold_graph_us": us,
             "do_bench_us": m.get("do_bench_ms", float("nan")) * 1e3,
             "warm_graph_us": m.get("warm_graph_ms", float("nan")) * 1e3,
             "bytes_min": float(bytes_min), "GBps_cold": gbps, "frac_of_ceiling": gbps / ceiling, "note": note,
             "verify": check}
        rows.append(r)
        print(f"{key:60s} {variant:12s} cold {us:9.1f} us  {gbps:7.0f} GB/s ({100 * gbps / ceiling:5.1f}%)"
              f"  verify {check}  [{time.time() - t0:.1f} s]", flush=True)

    def bf16_randn(*shape):
        return torch.randn(*shape, device=dev, dtype=torch.float32).to(torch.bfloat16)

    # ---------------- caches (one per stride), shared by quantize and gather ----------------
    caches = {}

    def cache_for(stride):
        if stride not in caches:
            caches[stride] = torch.zeros((NBLOCKS, stride), dtype=torch.uint8, device=dev)
        return caches[stride]

    filled = set()

    def filled_cache(stride):
        """Random keys quantized into every slot, once per stride (gathers read realistic codes)."""
        c = cache_for(stride)
        if stride not in filled:
            chunk = 65536
            for first in range(0, NBLOCKS * BS, chunk):
                k = bf16_randn(chunk, HEAD_DIM)
                slots = torch.arange(first, first + chunk, device=dev, dtype=torch.int64)
                K.quantize_and_insert_k_cache(k, c, slots, BS)
            torch.cuda.synchronize()
            filled.add(stride)
        return c

    # Each *_step builds one op's inputs (the distributions of bench/cases.cpp) and returns
    # (Triton launch, byte-check triple, minimal bytes); the single-op rows and the chains share them.
    def quantize_step(n, stride):
        cache = cache_for(stride)
        k = bf16_randn(n, HEAD_DIM)
        perm = torch.randperm(NBLOCKS, device=dev)[: (n + BS - 1) // BS]
        t = torch.arange(n, device=dev)
        slots = (perm[t // BS] * BS + t % BS).to(torch.int64)

        def ours():  # the writes are idempotent: dsv4kv over the Triton cache must change no byte
            c = cache.clone()
            D.quantize_and_insert_k_cache(k, c, slots, BS)
            return (c,)
        return (lambda: K.quantize_and_insert_k_cache(k, cache, slots, BS),
                ("quantize", lambda: (cache,), ours), n * quant_bytes)

    def gather_step(R, T, stride):
        cache = filled_cache(stride)
        nb_per = (T + BS - 1) // BS
        bt = torch.randperm(NBLOCKS, device=dev)[: R * nb_per].to(torch.int32).view(R, nb_per).contiguous()
        seq = torch.full((R,), T, dtype=torch.int32, device=dev)
        out = torch.empty((R, T, HEAD_DIM), dtype=torch.bfloat16, device=dev)

        def ours():
            o = torch.empty_like(out)
            D.dequantize_and_gather_k_cache(o, cache, seq, None, bt, BS, 0)
            return (o,)
        return (lambda: K.dequantize_and_gather_k_cache_triton(out, cache, seq, None, bt, BS, 0),
                ("gather", lambda: (out,), ours), R * T * gather_bytes + bt.numel() * 4)

    topk_nreq, topk_ctx = 4, 32768
    topk_bt = torch.randperm(topk_nreq * topk_ctx // BS, device=dev).to(torch.int32).view(topk_nreq, -1)

    def topk_step(T, topk, sem="seed", trailing=False):
        """vllm_v4: current upstream's kernel (PR #55692, this file) against the library's profile.
        trailing: each row's -1 entries are its last ones (up to 10% of the row), as a top-k kernel
        leaves a short row; else 5% of the entries, scattered."""
        ti = torch.randint(0, topk_ctx, (T, topk), device=dev, dtype=torch.int32)
        if trailing:
            tail = torch.randint(0, int(2 * 0.05 * topk) + 1, (T, 1), device=dev)
            ti[torch.arange(topk, device=dev)[None, :] >= topk - tail] = -1
        else:
            ti[torch.rand(T, topk, device=dev) < 0.05] = -1
        t2r = torch.randint(0, topk_nreq, (T,), device=dev, dtype=torch.int32)
        valid = torch.rand(T, device=dev) > 0.1
        outs = (torch.empty_like(ti), torch.empty(T, dtype=torch.int32, device=dev))
        args = (ti, t2r, topk_bt, BS, valid)
        launch = (lambda: K.compute_global_topk_indices_and_lens(*args, out=outs)) if sem == "seed" else (
            lambda: compute_global_topk_indices_and_lens_v4(*args, out=outs))
        return (launch,
                ("global_topk", lambda: outs, lambda: D.compute_global_topk_indices_and_lens(*args, semantics=sem)),
                T * topk * 8 + T * 9 + topk_bt.numel() * 4)

    c_nreq, c_q, c_p, c_win, c_cr = C_NREQ, C_Q, C_P, C_WIN, C_CR
    c_T = c_nreq * c_q
    c_qsl = torch.arange(0, c_T + 1, c_q, device=dev, dtype=torch.int32)
    c_seq = torch.full((c_nreq,), c_p + c_q, dtype=torch.int32, device=dev)
    c_gl_val = c_q + min(c_p, c_win - 1)
    c_gl = torch.full((c_nreq,), c_gl_val, dtype=torch.int32, device=dev)
    c_N = (c_p + c_q + c_cr - 1) // c_cr
    c_M = c_N + c_gl_val + 8
    c_pos = np.concatenate([np.arange(c_p, c_p + c_q)] * c_nreq)

    def combine_steps(topk, img, sem="seed"):
        """{variant: (launch, check, bytes, note)} over the same inputs; vllm_v41: V4.1's combine (this
        file's transcription; 1% of the top-k values >= N, which it drops), no images."""
        ti = torch.randint(0, c_N, (c_T, topk), device=dev, dtype=torch.int32)
        width = round_up(topk + c_win + img, lay["combine_row_alignment"])
        if sem == "vllm_v41":
            ti[torch.rand(c_T, topk, device=dev) < 0.01] += c_N
            topk_used = int(np.minimum((c_pos + 1) // c_cr, topk).sum())
            args = (ti, c_qsl, c_seq, c_gl, c_win, c_cr, topk, c_M, c_N)
            ours41 = lambda: D.combine_topk_swa_indices(*args, semantics=sem)  # noqa: E731
            last41 = {}
            outs41 = (torch.empty((c_T, width), dtype=torch.int32, device=dev),
                      torch.empty(c_T, dtype=torch.int32, device=dev))

            def wrapper41():
                last41["out"] = combine_topk_swa_indices_v41(*args)
            nbytes41 = c_T * width * 4 + topk_used * 4 + c_T * 4
            return {"wrapper": (wrapper41, ("combine", lambda: last41["out"], ours41), nbytes41,
                                "V4.1's wrapper: torch.empty + its kernel, which writes whole rows"),
                    "kernel-only": (lambda: combine_topk_swa_indices_v41(*args, out=outs41),
                                    ("combine", lambda: outs41, ours41), nbytes41, "V4.1's kernel on given outputs")}
        topk_used = int(np.minimum((c_pos + 1) // c_cr, topk).sum())
        nbytes = c_T * width * 4 + topk_used * 4 + c_T * 4 + (c_T * 8 if img else 0)
        vis = {}
        if img:
            # Same spans as bench/cases.cpp: request r, span i = [s, e] inclusive,
            # s = p + 100 + 500 i + 37 r, length 64 - 8 ((i + r) % 4); DeepSeek's rule inside a span.
            lv = np.zeros(c_T, dtype=np.int32)
            rv = np.zeros(c_T, dtype=np.int32)
            for r in range(c_nreq):
                for i in range(4):
                    s = c_p + 100 + 500 * i + 37 * r
                    e = s + (64 - 8 * ((i + r) % 4)) - 1
                    for ps in range(s, e + 1):
                        t = r * c_q + (ps - c_p)
                        lv[t] = min(ps - s, img - 1)
                        rv[t] = min(e - ps, img)
            vis = {"left_visible": torch.from_numpy(lv).to(dev), "right_visible": torch.from_numpy(rv).to(dev)}
        args = (ti, c_qsl, c_seq, c_gl, c_win, c_cr, topk, c_M, c_N)
        ours = lambda: D.combine_topk_swa_indices(*args, max_image_tokens=img, **vis)  # noqa: E731
        res = {}
        last = {}  # the wrapper variants allocate: the check reads what their last call returned

        def keep(name, f):
            def run():
                last[name] = f()
            return run
        for name, f, note in (
                ("wrapper", lambda: K.combine_topk_swa_indices(*args, max_image_tokens=img, **vis),
                 "torch.full(-1) + kernel (vLLM)"),
                ("fork", lambda: K.combine_topk_swa_indices_fork(*args, max_image_tokens=img, **vis),
                 "fork semantics (the spec's): torch.full(-1) + kernel")):
            res[name] = (keep(name, f), ("combine", lambda name=name: last[name], ours), nbytes, note)
        outs = (torch.full((c_T, width), -1, dtype=torch.int32, device=dev),
                torch.empty(c_T, dtype=torch.int32, device=dev))
        res["kernel-only"] = (
            lambda: K.combine_topk_swa_indices(*args, max_image_tokens=img, out=outs, **vis),
            ("combine", lambda: outs, ours), nbytes,
            "kernel on a buffer pre-filled with -1 outside the timing (writes only valid entries)")
        return res

    def mixed_step(Dn, nprefill, draft=1, sem="seed"):
        """draft > 1: draft blocks of that many tokens per decode request, SWA rows 192 wide as DSpark's
        builder lays them out (bench/cases.cpp); vllm_v41: V4.1's builder (this file's transcription),
        replay_start 8,000 for the prefill requests."""
        q, p, topk, cr, win = 2048, 8192, 512, 4, 128
        sw = 192 if draft > 1 else win
        nd = Dn // draft
        P = nprefill * q
        qlens = [draft] * nd + [q] * nprefill
        qsl = torch.tensor(np.concatenate([[0], np.cumsum(qlens)]), dtype=torch.int32, device=dev)
        seqs = torch.tensor([p + draft] * nd + [p + q] * nprefill, dtype=torch.int32, device=dev)
        t2r = torch.repeat_interleave(torch.arange(nd + nprefill, device=dev, dtype=torch.int32),
                                      torch.tensor(qlens, device=dev))
        swa_bt = torch.randint(0, 100000, (nd + nprefill, (p + q) // 64 + 1), device=dev, dtype=torch.int32)
        comp_bt = torch.randint(0, 100000, (nd + nprefill, (p + q) // cr // 64 + 1), device=dev,
                                dtype=torch.int32)
        dswa = torch.randint(0, 10**7, (Dn, sw), device=dev, dtype=torch.int32)
        dswa[:, win + draft:] = -1
        dcomp = torch.randint(0, 10**7, (Dn, topk), device=dev, dtype=torch.int32)
        dlens = torch.full((Dn,), topk, dtype=torch.int32, device=dev)
        pti = torch.randint(0, (p + q) // cr, (P, topk), device=dev, dtype=torch.int32)
        T = Dn + P
        args = (dswa, dcomp, dlens, pti, qsl, seqs, t2r, swa_bt, 64, comp_bt, 64, win, cr, topk)
        kw = {}
        if sem == "vllm_v41":
            kw["replay_start"] = torch.tensor([0] * nd + [8000] * nprefill, dtype=torch.int32, device=dev)
        last = {}
        build = K.build_flashinfer_mixed_sparse_indices if sem == "seed" else build_flashinfer_mixed_sparse_indices_v41

        def run():
            last["out"] = build(*args, **kw)
        return (run, ("mixed", lambda: last["out"],
                      lambda: D.build_flashinfer_mixed_sparse_indices(*args, **kw, semantics=sem)),
                T * (sw + topk) * 4 + T * 4 + Dn * (sw + topk) * 4 + P * topk * 4)

    # ---------------- the V4.1 records: vLLM's V4.1 kernels (transcribed above) ----------------
    rec_info = {r["name"]: r for r in lay.get("records", [])}
    rec_caches = {}

    def record_cache(name, stride):
        """A [NBLOCKS, BS, W] view (upstream reads the record from its last dimension) over a stride-byte block."""
        if name not in rec_caches:
            w = rec_info[name]["token_bytes"]
            rec_caches[name] = torch.zeros((NBLOCKS, stride), dtype=torch.uint8, device=dev)
            rec_caches[name + " view"] = torch.as_strided(rec_caches[name], (NBLOCKS, BS, w), (stride, w, 1))
        return rec_caches[name], rec_caches[name + " view"]

    identity_rope = None

    def record_quantize_step(n, stride, name):
        """(Triton launch or None, check, bytes): vLLM's 528-byte writer; its 288-byte writer with an identity
        rotation (cos 1, sin 0: quantizes the given row; on a GPU without cvt...e2m1x2 its e2m1 rule in Triton);
        none for the indexer key (vLLM's writer is fused with RMSNorm and RoPE)."""
        nonlocal identity_rope
        info = rec_info[name]
        flat, view = record_cache(name, stride)
        k = bf16_randn(n, info["head_dim"])
        perm = torch.randperm(NBLOCKS, device=dev)[: (n + BS - 1) // BS]
        t = torch.arange(n, device=dev)
        slots = (perm[t // BS] * BS + t % BS).to(torch.int64)

        def ours():
            c = flat.clone()
            D.quantize_and_insert_k_cache(k, c, slots, BS, record=name)
            return (c,)
        if name == "mxfp8_ds_mla":
            fn = lambda: quantize_and_insert_k_cache_v41(k, flat, slots, BS)  # noqa: E731
        elif name == "nvfp4_ds_mla":
            if identity_rope is None:
                identity_rope = torch.cat([torch.ones(n, 32), torch.zeros(n, 32)], dim=1).to(dev)
            pos = torch.arange(n, device=dev, dtype=torch.int64)
            fn = lambda: rope_quant_insert_v41(k, pos, identity_rope, view, slots, 1)  # noqa: E731
        else:
            fn = None
        return fn, ("quantize", lambda: (flat,), ours), n * (2 * info["head_dim"] + 8 + info["token_bytes"])

    def record_gather_step(R, T, stride, name):
        info = rec_info[name]
        flat, view = record_cache(name, stride)
        for first in range(0, NBLOCKS * BS, 65536):  # random keys in every slot, through the library
            slots = torch.arange(first, first + 65536, device=dev, dtype=torch.int64)
            D.quantize_and_insert_k_cache(bf16_randn(65536, info["head_dim"]), flat, slots, BS, record=name)
        nb_per = (T + BS - 1) // BS
        bt = torch.randperm(NBLOCKS, device=dev)[: R * nb_per].to(torch.int32).view(R, nb_per).contiguous()
        seq = torch.full((R,), T, dtype=torch.int32, device=dev)
        out = torch.empty((R, T, info["head_dim"]), dtype=torch.bfloat16, device=dev)

        def ours():
            o = torch.empty_like(out)
            D.dequantize_and_gather_k_cache(o, flat, seq, None, bt, BS, 0, record=name)
            return (o,)
        fn = None if name == "mxfp4_indexer" else (
            lambda: dequantize_and_gather_k_cache_v41(out, view, seq, None, bt, BS, 0))
        nbytes = R * T * (info["data_bytes"] + info["num_scales"] + 2 * info["head_dim"]) + bt.numel() * 4
        return fn, ("gather", lambda: (out,), ours), nbytes

    # ---------------- quantize_and_insert_k_cache ----------------
    for key, params in cases.get("quantize", []):
        if len(params) == 3:
            fn, check, nbytes = record_quantize_step(*params)
            if fn is None:
                print(f"{key:60s} no Triton kernel (vLLM's indexer-key writer is fused with RMSNorm and RoPE)",
                      flush=True)
                continue
            add("quantize", key, key[len("quantize "):], "kernel", fn, nbytes, steps=[check])
            continue
        n, stride = params
        fn, check, nbytes = quantize_step(n, stride)
        add("quantize", key, f"tokens={n} bs={BS} blocks={NBLOCKS}", "kernel", fn, nbytes, steps=[check])

    # ---------------- dequantize_and_gather_k_cache ----------------
    for key, params in cases.get("gather", []):
        if len(params) == 4:
            fn, check, nbytes = record_gather_step(*params)
            if fn is None:
                print(f"{key:60s} no Triton kernel (vLLM has no gather of the indexer key)", flush=True)
                continue
            add("gather", key, key[len("gather "):], "kernel", fn, nbytes, steps=[check])
            continue
        R, T, stride = params
        fn, check, nbytes = gather_step(R, T, stride)
        add("gather", key, f"reqs={R} tokens/req={T} bs={BS}", "kernel", fn, nbytes, steps=[check])

    # ---------------- compute_global_topk_indices_and_lens ----------------
    for key, (T, topk, sem, trailing) in cases.get("global_topk", []):
        fn, check, nbytes = topk_step(T, topk, sem, trailing)
        add("global_topk", key,
            f"tokens={T} topk={topk} bs={BS}{' trailing' if trailing else ''}{profile_suffix(sem)}", "kernel", fn,
            nbytes, steps=[check])

    # ---------------- combine_topk_swa_indices ----------------
    for key, (topk, img, sem) in cases.get("combine", []):
        shape = (f"tokens={c_T} topk={topk} window={c_win}" + (f" images (max_image_tokens={img})" if img else "")
                 + profile_suffix(sem))
        for variant, (fn, check, nbytes, note) in combine_steps(topk, img, sem).items():
            add("combine", key, shape, variant, fn, nbytes, note, steps=[check])

    # ---------------- build_flashinfer_mixed_sparse_indices ----------------
    for key, (draft, sem) in cases.get("mixed", []):
        if sem == "vllm_v4":  # DSpark rows: upstream's kernel text was not available, so no Triton row
            print(f"{key:60s} no Triton kernel (vLLM's DSpark builder is known from its tests only)", flush=True)
            continue
        fn, check, nbytes = mixed_step(256, 4, draft, sem)
        add("mixed", key, key[len("mixed "):], "wrapper", fn, nbytes, steps=[check])

    # ---------------- dequantize_and_gather_k_cache_sparse ----------------
    # The oracle has no such kernel: the comparison point is this file's one, one Triton program
    # per output row. Slots: uniform over the filled cache, `pad` of them -1.

    def sparse_step(n, stride, pad=0.05):
        cache = filled_cache(stride)
        slots = torch.randint(0, NBLOCKS * BS, (n,), device=dev, dtype=torch.int32)
        slots[torch.rand(n, device=dev) < pad] = -1
        valid = int((slots >= 0).sum())
        out = torch.empty((n, HEAD_DIM), dtype=torch.bfloat16, device=dev)

        def ours():
            o = out.clone()  # rows of -1 keep their contents: start from the Triton output's bytes
            D.dequantize_and_gather_k_cache_sparse(o, cache, slots, BS)
            return (o,)
        return (lambda: dequantize_and_gather_k_cache_sparse_triton(out, cache, slots, BS, lay),
                ("sparse_gather", lambda: (out,), ours), valid * gather_bytes + n * 4)

    sparse = dict(cases.get("sparse_gather", []))
    for key, (R, topk) in [(k, p) for k, p in sparse.items() if p]:
        fn, check, nbytes = sparse_step(R * topk, ALIGNED_STRIDE)
        add("sparse_gather", key, f"slots={R}x{topk} (5% -1) bs={BS} blocks={NBLOCKS}", "one-program-per-row",
            fn, nbytes, steps=[check])
    # One decode step, 256 requests x 8,192 tokens with top-512: the sparse gather of the selected
    # rows, and the dense (oracle) gather of the same requests' whole context.
    key = "sparse_gather decode reqs=256 ctx=8192 topk=512"
    if key in sparse:
        fn, check, nbytes = sparse_step(256 * 512, ALIGNED_STRIDE, pad=0.0)
        add("sparse_gather", key, "decode: 256 reqs x top-512 of 8192 = 131072 rows (sparse)",
            "one-program-per-row", fn, nbytes, steps=[check])
    key = "sparse_gather decode-dense reqs=256 ctx=8192"
    if key in sparse:
        R, T = 256, 8192
        cache = filled_cache(ALIGNED_STRIDE)
        bt = torch.randint(0, NBLOCKS, (R, T // BS), device=dev, dtype=torch.int32)
        seq = torch.full((R,), T, dtype=torch.int32, device=dev)
        dense_out = torch.empty((R, T, HEAD_DIM), dtype=torch.bfloat16, device=dev)
        add("sparse_gather", key, "decode: dense gather of the same 256 reqs x 8192 tokens = 2097152 rows",
            "kernel", lambda: K.dequantize_and_gather_k_cache_triton(dense_out, cache, seq, None, bt, BS, 0),
            R * T * gather_bytes + bt.numel() * 4)
        del dense_out

    # ---------------- chains: one serving step captured in one CUDA graph ----------------
    def add_chain(key, shape, steps, note=""):
        fns = [s[0] for s in steps]

        def run():
            for fn in fns:
                fn()
        add("chain", key, shape, note or "kernel", run, sum(s[2] for s in steps),
            " + ".join(s[1][0] for s in steps), steps=[s[1] for s in steps])

    chains = dict(cases.get("chain", []))
    if "chain decode" in chains:
        add_chain("chain decode", "decode step: quantize 256 + global_topk 256x512 + mixed 256 decode rows",
                  [quantize_step(256, ALIGNED_STRIDE), topk_step(256, 512), mixed_step(256, 0)], "wrapper")
    if "chain prefill" in chains:
        head = [quantize_step(8192, ALIGNED_STRIDE), gather_step(4, 8192, ALIGNED_STRIDE), topk_step(8192, 2048)]
        for variant, (fn, check, nbytes, _) in combine_steps(2048, 0).items():
            add_chain("chain prefill", "prefill step: quantize 8192 + gather (4, 8192) + global_topk 8192x2048 + "
                      "combine 8192x2048", head + [(fn, check, nbytes)], f"combine {variant}")
    caches.clear()
    torch.cuda.empty_cache()

    res = {"tool": "triton_bench", "info": info, "rows": rows}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {a.out} ({len(rows)} rows)")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
