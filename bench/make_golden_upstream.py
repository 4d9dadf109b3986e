#!/usr/bin/env python3
"""Writes golden vectors of two index operations as CURRENT upstream vLLM computes them, measured on a
GPU from the Triton transcriptions in bench/triton_bench.py:

* conformance/golden/upstream_combine_v41.safetensors: op combine_topk_swa_indices, semantics
  vllm_v41 (vllm/models/deepseek_v41/common/ops/cache_utils.py at commit 091b5c26...);
* conformance/golden/upstream_global_topk.safetensors: op compute_global_topk_indices_and_lens,
  semantics vllm_v4 (vLLM PR #55692's bounds and left compaction; see bench/triton_bench.py
  for what of it is inferred).

Usage (GPU machine with CUDA, torch, Triton and numpy; from the repository root):
    python3 bench/make_golden_upstream.py --out conformance/golden
Dry run without a GPU (numpy and the dsv4kv package): --standin computes every output with the
library instead (semantics="vllm_v41" / "vllm_v4"), for testing the replay; its files say so
(`set` = `standin`) and are never written under conformance/golden. --self-check runs only the
numpy references on hand-worked cases (no torch, no Triton, no dsv4kv) and exits 0 or 1.

Both files have the field layout (conformance/golden/README.md, "The field layout"): tensors and
parameters are named after the fields of CombineArgs / GlobalTopkArgs (spec/include/dsv4kv/spec/ops.hpp)
by their Python names, and `caseNNN.semantics` (metadata) names the profile. Outputs start as the
init pattern of param.init_salt ("stale contents"); the whole storage after the call is stored.
param.error_count is not measured (upstream has no counter): it is the count the library's failure
model gives for the case (spec/semantics.hpp lookup_slot; reference/src/global_topk.cpp): 0 for every
combine case; for global top-k one per token whose request is outside the table's rows and one per
entry >= 0 of a token with a valid request whose block column is >= the table's columns.

What goes in, combine (max_image_tokens 0, no visibility arrays: V4.1 has none):
* random well-formed batches (windows 128, 64 and 8; compress ratios 4, 128, 1 and 0; topk 512,
  2048, 37, 10, 100, 64, 24, 16, 20 and 0; topk_indices wider than topk; 64 one-token requests);
* top-k values < 0, == N, > N, INT32_MAX and INT32_MIN inside the top-k prefix (-1, still counted);
* padding tokens past the last request (qsl[R] - qsl[0] < T), empty requests (repeated starts) at
  the start, the middle and the end, query_start_loc starting at 1234, an odd T, no request at all;
* compress_ratio 0 (topk 0 with a [T, 0] topk_indices, and topk 20: a wider row, no top-k entries);
* gather_len < q + min(prefix, W - 1) (window start clamped to gather_start), gather_len < q
  (gather_start > pos: empty windows), gather_len 0, gather_len == seq_len;
* outputs as reused workspace: combined_indices rows of a larger row stride at an offset with rows
  past T, combined_lens at an offset; topk_indices a strided view in the measurement (the file holds
  its contiguous copy: the kernel reads columns < topk only); gather_lens longer than R.
What goes in, global top-k:
* random well-formed batches, block sizes 64, 16, 2, 7, 1, 128 and 256, topk 512, 2048 and 1030
  (compaction across the 1024-column chunks), 100, 64, 24, 17, 13, 8, 3 and 0;
* request index -1, == rows, > rows, INT32_MAX, INT32_MIN; block column == cols, > cols; local
  index -5, INT32_MIN, INT32_MAX; invalid entries before valid ones; is_valid_token false rows;
  the cases of the PR's tests;
* a strided block-table view (row stride > cols) in the measurement, with entries past the logical
  columns that a stride bound would read (the file holds the logical [R, C] table: upstream's
  output depends only on it);
* negative table entries where no entry looks (rows and columns never referenced);
* global_topk_indices rows of a larger row stride at an offset with rows past T; token_to_req and
  is_valid_token longer than T.
Left out, where upstream is undefined or departs from the library on purpose:
* combine: seq_len < query length, gather_len outside [0, seq_len], a non-monotone query_start_loc
  (the library reports such requests), M * b + N + window index or v + M * b past INT32_MAX
  (int32 wrap), topk > topk_indices' width (out-of-bounds reads), T = 0;
* global top-k: a looked-up negative table entry (upstream gives a negative slot counted as valid;
  the library gives -1 and reports it), block * B + offset past INT32_MAX, an empty block table,
  T = 0.

Each case runs twice on fresh outputs and must give identical bytes, or the script stops.
`caseNNN.ref_match` = 1 when the numpy reimplementation of the same upstream rules below gives the
same storages.
"""

from __future__ import annotations

import argparse
import datetime
import json
import struct
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
GENERATOR = "bench/make_golden_upstream.py"
I32_MAX, I32_MIN = 2**31 - 1, -(2**31)

V41_COMMIT = "091b5c262a27725de1695495f3fdf6a3b3943e7b"
#: op kind -> (file name, op, semantics profile, kernel measured)
FILES = {
    "combine": ("upstream_combine_v41.safetensors", "combine_topk_swa_indices", "vllm_v41",
                "bench/triton_bench.py _combine_topk_swa_indices_v41_kernel (transcription of vllm-project/vllm "
                f"vllm/models/deepseek_v41/common/ops/cache_utils.py @ {V41_COMMIT}, CombineTopkSwaIndicesKernel: "
                "grid cdiv(T, 2), BLOCK_T=2, num_warps=2)"),
    "global_topk": ("upstream_global_topk.safetensors", "compute_global_topk_indices_and_lens", "vllm_v4",
                    "bench/triton_bench.py _global_topk_v4_kernel (vLLM PR #55692 'Bound sparse MLA block-table "
                    "gathers': bounds on block_table.shape, left compaction; written from the PR's description and "
                    "tests, its final kernel text not found; one program per token, 1024-column chunks)"),
}


def init_pattern(n: int, salt: int) -> np.ndarray:
    """conformance/golden/README.md: init_byte(i) = (i * 131 + 17 + init_salt) mod 251."""
    i = np.arange(n, dtype=np.uint64)
    return ((i * np.uint64(131) + np.uint64(17) + np.uint64(salt)) % np.uint64(251)).astype(np.uint8)


def init_i32(numel: int, salt: int) -> np.ndarray:
    """An int32 storage of `numel` elements holding the init pattern of its bytes."""
    return init_pattern(4 * numel, salt).view("<i4").astype(np.int32)


# ---------------------------------------------------------------------------
# safetensors, as conformance/golden/README.md describes it
# ---------------------------------------------------------------------------
_ST = {np.dtype(np.uint8): "U8", np.dtype(np.int32): "I32", np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}


def write_safetensors(path: Path, tensors: dict, meta: dict) -> None:
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _ST[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------------------
# numpy reimplementations of the upstream rules (independent of the Triton code; int64 arithmetic)
# ---------------------------------------------------------------------------
def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def tdiv(a: int, b: int) -> int:
    """Integer division rounding toward zero (Triton's and C's)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ref_combine_v41(topk, qsl, seq_lens, gather_lens, W, CR, K, M, N):
    """V4.1 combine on row-major arrays: (combined [T, round_up(K + W, 128)], lens [T]) as int64."""
    topk = np.asarray(topk, np.int64)
    qsl = [int(x) for x in qsl]
    R, T = len(seq_lens), topk.shape[0]
    width = round_up(K + W, 128)
    out = np.full((T, width), -1, np.int64)
    lens = np.zeros(T, np.int64)
    base = qsl[0]
    for t in range(T):
        if t >= qsl[R] - base:  # outside every request
            continue
        b = max(i for i in range(R + 1) if qsl[i] - base <= t)  # the last start at or before t
        b = min(b, R - 1)
        qs, qe = qsl[b] - base, qsl[b + 1] - base
        seq, gat = int(seq_lens[b]), int(gather_lens[b])
        pos = seq - (qe - qs) + t - qs
        gs = seq - gat
        tk = 0 if CR == 0 else max(min(tdiv(pos + 1, CR), K), 0)
        ss = max(pos - (W - 1), 0, gs)
        sl = max(pos - ss + 1, 0)
        for j in range(tk):
            v = int(topk[t, j])
            out[t, j] = v + M * b if 0 <= v < N else -1
        for j in range(tk, tk + sl):
            out[t, j] = M * b + N + ss + j - tk - gs
        lens[t] = tk + sl
    return out, lens


def ref_global_topk_v4(topk, t2r, table, B, valid, mask_invalid_tokens=False):
    """PR #55692's global top-k: (out [T, K], lens [T]) as int64; `table` is the logical [R, C] table."""
    topk = np.asarray(topk, np.int64)
    table = np.asarray(table, np.int64)
    T, K = topk.shape
    R, C = table.shape
    out = np.full((T, K), -1, np.int64)
    lens = np.zeros(T, np.int64)
    for t in range(T):
        r, ok_tok = int(t2r[t]), bool(valid[t])
        kept = []
        for c in range(K):
            loc = int(topk[t, c])
            if loc < 0 or not 0 <= r < R or loc // B >= C or (mask_invalid_tokens and not ok_tok):
                continue
            kept.append(int(table[r, loc // B]) * B + loc % B)
        out[t, :len(kept)] = kept
        lens[t] = len(kept) if ok_tok else 0
    return out, lens


def global_topk_library_errors(topk, t2r, table, B, valid=None) -> int:
    """The library's error count (see the module docstring); `valid`: the tokens' is_valid_token when
    invalid tokens are not looked up (rows all -1)."""
    R, C = np.asarray(table).shape
    n = 0
    for t in range(np.asarray(topk).shape[0]):
        r = int(t2r[t])
        if not 0 <= r < R:
            n += 1
            continue
        if valid is not None and not bool(valid[t]):
            continue
        n += sum(1 for v in np.asarray(topk)[t] if v >= 0 and v // B >= C)
    return n


def place(storage: np.ndarray, offset: int, rows: int, cols: int, stride: int, values: np.ndarray) -> np.ndarray:
    """`storage` (1-D) with the [rows, cols] view at `offset`, row stride `stride`, set to `values`."""
    s = storage.copy()
    for r in range(rows):
        s[offset + r * stride:offset + r * stride + cols] = values[r]
    return s


# ---------------------------------------------------------------------------
# Hand-worked cases of the references (--self-check)
# ---------------------------------------------------------------------------
def self_check() -> list[str]:
    fails = []

    def expect(name, got, want):
        got = [np.asarray(g).tolist() for g in got]
        if got != [list(w) for w in want]:
            fails.append(f"{name}: got {got}, want {want}")

    # PR #55692's tests (block size 64 unless said).
    expect("invalid before valid compacts left", ref_global_topk_v4([[128, 64, -1, -1]], [0], [[10, 11]], 64, [1]),
           ([[704, -1, -1, -1]], [1]))
    expect("exact valid metadata", ref_global_topk_v4([[0, 64, -1, -1]], [0], [[10, 11, 12, 13]], 64, [1]),
           ([[640, 704, -1, -1]], [2]))
    for r in (-1, 1, 5):
        expect(f"request {r} outside 1 row", ref_global_topk_v4([[0, -1, -1, -1]], [r], [[10, 11]], 64, [1]),
               ([[-1, -1, -1, -1]], [0]))
    expect("column == cols", ref_global_topk_v4([[128, -1]], [0], [[10, 11]], 64, [1]), ([[-1, -1]], [0]))
    expect("column > cols", ref_global_topk_v4([[256, -1]], [0], [[10, 11]], 64, [1]), ([[-1, -1]], [0]))
    expect("negative local", ref_global_topk_v4([[-5, -1]], [0], [[10, 11]], 64, [1]), ([[-1, -1]], [0]))
    expect("column oob beside valid", ref_global_topk_v4([[0, 128, -1, -1]], [0], [[10, 11]], 64, [1]),
           ([[640, -1, -1, -1]], [1]))
    expect("mixed rows", ref_global_topk_v4([[0, -1], [0, -1]], [0, 1], [[10, 11, 12, 13]], 64, [1, 1]),
           ([[640, -1], [-1, -1]], [1, 0]))
    expect("padded table rows", ref_global_topk_v4([[0, -1], [64, -1]], [0, 1], [[10, 11, 12, 13], [90, 91, 92, 93]],
                                                    64, [1, 1]), ([[640, -1], [5824, -1]], [1, 1]))
    backing = np.array([[10, 11, 12]])
    expect("logical cols, not stride", ref_global_topk_v4([[128, -1, -1, -1]], [0], backing[:, :2], 64, [1]),
           ([[-1, -1, -1, -1]], [0]))
    # test_flashmla_sparse.py, block size 4.
    expect("oob block table axes", ref_global_topk_v4([[0, 5], [0, 5], [8, -1]], [0, 1, 0], backing[:, :2], 4, [1] * 3),
           ([[40, 45], [-1, -1], [-1, -1]], [2, 0, 0]))
    expect("invalid token, bad request", ref_global_topk_v4([[0, 5]], [7], [[10, 11]], 4, [0]), ([[-1, -1]], [0]))
    # An invalid token with a good request: all -1 (the library's rule), or translated (the early branch kernel).
    expect("invalid token, translated", ref_global_topk_v4([[9, 0, 5]], [0], [[10, 11]], 4, [0]),
           ([[40, 45, -1]], [0]))
    expect("invalid token, masked", ref_global_topk_v4([[9, 0, 5]], [0], [[10, 11]], 4, [0], True),
           ([[-1, -1, -1]], [0]))
    if global_topk_library_errors([[9, 0, 5, -3], [1, 2, 3, 4]], [0, 3], [[10, 11]], 4) != 2:
        fails.append("library error count")

    # combine V4.1 by hand: W 4, ratio 2, topk 3, M 100, N 10; requests [0, 2), [2, 2) (empty), [2, 5)
    # of query_start_loc [5, 7, 7, 10]; seq_lens [6, 9, 4], gather_lens [3, 2, 4]; token 5 is padding.
    topk = [[3, 12, 5], [-1, 9, 10], [7, 1, 1], [I32_MAX, 1, 1], [0, 9, 1], [1, 1, 1]]
    out, lens = ref_combine_v41(topk, [5, 7, 7, 10], [6, 9, 4], [3, 2, 4], 4, 2, 3, 100, 10)
    rows = [[3, -1, 10, 11], [-1, 9, -1, 10, 11, 12], [207, 210, 211], [-1, 210, 211, 212],
            [200, 209, 210, 211, 212, 213], []]
    want = np.full((6, 128), -1)
    for t, r in enumerate(rows):
        want[t, :len(r)] = r
    expect("combine v4.1 by hand", (out, lens), (want.tolist(), [4, 6, 3, 4, 6, 0]))
    # Same with compress_ratio 0: no top-k entries, the window starts at column 0.
    out, lens = ref_combine_v41(topk, [5, 7, 7, 10], [6, 9, 4], [3, 2, 4], 4, 0, 3, 100, 10)
    rows = [[10, 11], [10, 11, 12], [210, 211], [210, 211, 212], [210, 211, 212, 213], []]
    want = np.full((6, 128), -1)
    for t, r in enumerate(rows):
        want[t, :len(r)] = r
    expect("combine v4.1 ratio 0", (out, lens), (want.tolist(), [2, 3, 2, 3, 4, 0]))
    # No request: every token outside.
    out, lens = ref_combine_v41([[1], [2]], [3], [], [], 8, 4, 1, 50, 5)
    expect("combine no request", (out[:, :4], lens), ([[-1] * 4] * 2, [0, 0]))
    return fails


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------
SPECIALS = (-1, -2, -1000, I32_MIN, I32_MAX)


def topk_values(rng, T: int, width: int, N: int, special: float) -> np.ndarray:
    """Top-k values in [0, N) with a fraction `special` of -1, < -1, N, > N, INT32_MAX, INT32_MIN."""
    v = rng.integers(0, max(N, 1), size=(T, width), dtype=np.int64)
    pool = np.array(SPECIALS + (N, N + 1, N + 12345), np.int64)
    m = rng.random((T, width)) < special
    v[m] = rng.choice(pool, size=int(m.sum()))
    return v.astype(np.int32)


def combine_specs() -> list[dict]:
    """W, CR, K (topk), tw (topk_indices width), reqs: (q, prefix, gather_len or None = q + min(prefix,
    W - 1)) or 'random', base, pad (tokens past the last request), special (fraction of special top-k
    values), out layout (row stride pad, offset, rows past T; lens offset, elements past T), tpad
    (extra row stride of topk_indices in the measurement), gpad (gather_lens entries past R)."""
    d = dict(base=0, pad=0, special=0.02, opad=0, ooff=0, oextra=0, loff=0, lextra=0, tpad=0, gpad=0)
    return [
        {**d, "W": 128, "CR": 4, "K": 512, "tw": 512, "reqs": ("random", 4, (1, 100), (0, 3000)),
         "desc": "random batch: 4 requests, window 128, ratio 4, topk 512"},
        {**d, "W": 128, "CR": 4, "K": 2048, "tw": 2048, "reqs": ("random", 2, (10, 40), (6000, 9000)),
         "desc": "topk 2048, prefixes 6000..9000 (the top-k prefix saturates at topk)"},
        {**d, "W": 64, "CR": 128, "K": 37, "tw": 40, "reqs": ("random", 5, (1, 90), (0, 6000)),
         "desc": "ratio 128, topk 37 (not a multiple of 4) of a 40-wide topk_indices, window 64"},
        {**d, "W": 128, "CR": 0, "K": 0, "tw": 0, "reqs": ("random", 3, (1, 150), (0, 400)), "N": 0,
         "desc": "compress_ratio 0 (SWA-only layer): topk 0, topk_indices [T, 0], N 0"},
        {**d, "W": 128, "CR": 0, "K": 20, "tw": 20, "reqs": ("random", 3, (1, 60), (0, 300)), "N": 7,
         "desc": "compress_ratio 0 with topk 20: a 256-wide row, no top-k entries"},
        {**d, "W": 8, "CR": 1, "K": 10, "tw": 12, "reqs": ("random", 6, (1, 12), (0, 20)), "special": 0.35,
         "desc": "ratio 1, window 8, topk 10: top-k values -1, < -1, N, > N, INT32_MAX, INT32_MIN in the prefix"},
        {**d, "W": 64, "CR": 4, "K": 24, "tw": 24, "base": 1234, "pad": 7,
         "reqs": [(0, 5, None), (5, 30, None), (0, 10, None), (0, 7, None), (9, 3, None), (0, 50, None)],
         "desc": "query_start_loc from 1234; empty requests at the start, middle and end; 7 padding tokens; "
                 "odd T"},
        {**d, "W": 64, "CR": 4, "K": 16, "tw": 16,
         "reqs": [(40, 100, 50), (40, 100, 20), (30, 70, 0), (25, 10, 35), (16, 200, 16), (3, 0, 3)],
         "desc": "gather clamps: gather_len 50 < q + 63, gather_len 20 < q (empty windows), gather_len 0, "
                 "gather_len == seq_len, gather_len == q, no prefix"},
        {**d, "W": 128, "CR": 4, "K": 100, "tw": 128, "reqs": ("random", 3, (1, 80), (0, 2000)), "opad": 40,
         "ooff": 7, "oextra": 5, "loff": 3, "lextra": 4, "tpad": 24, "gpad": 2,
         "desc": "reused workspace: combined_indices row stride width+40 at element 7, 5 rows past T; "
                 "combined_lens at element 3, 4 past T; topk_indices row stride tw+24 in the measurement; "
                 "gather_lens 2 longer than R"},
        {**d, "W": 128, "CR": 4, "K": 16, "tw": 16, "reqs": [], "pad": 5, "base": 3,
         "desc": "no request (R = 0): all 5 tokens outside, rows -1, length 0"},
        {**d, "W": 128, "CR": 4, "K": 512, "tw": 512, "reqs": ("random", 64, (1, 1), (0, 5000)),
         "desc": "64 one-token requests (decode-like), ratio 4, topk 512"},
        {**d, "W": 128, "CR": 4, "K": 64, "tw": 64, "reqs": [(300, 0, None), (129, 0, None)],
         "desc": "fresh prefill (no prefix): the top-k length grows from 0, the window from 1"},
    ]


def build_combine_case(rng, s: dict) -> dict:
    reqs = s["reqs"]
    if isinstance(reqs, tuple):
        _, n, (q0, q1), (p0, p1) = reqs
        reqs = [(int(rng.integers(q0, q1 + 1)), int(rng.integers(p0, p1 + 1)), None) for _ in range(n)]
    W, CR, K = s["W"], s["CR"], s["K"]
    q = [r[0] for r in reqs]
    seq = [r[0] + r[1] for r in reqs]
    gat = [r[0] + min(r[1], W - 1) if r[2] is None else r[2] for r in reqs]
    qsl = [s["base"] + int(x) for x in np.concatenate([[0], np.cumsum(q, dtype=np.int64)])]
    T = sum(q) + s["pad"]
    N = s["N"] if "N" in s else max(1, max((x // CR for x in seq), default=1))
    M = N + max(gat, default=0) + 17
    assert all(0 <= g <= x and x >= qq for g, x, qq in zip(gat, seq, q))  # well-formed requests only
    assert M * max(len(reqs) - 1, 0) + N + max(seq, default=0) <= I32_MAX  # no int32 wrap
    assert K <= s["tw"]
    gather = np.array(gat + [int(x) for x in rng.integers(0, 50, size=s["gpad"])], np.int32)
    width = round_up(K + W, 128)
    S = width + s["opad"]
    rows = T + s["oextra"]
    return dict(
        spec=s, T=T, R=len(reqs), W=W, CR=CR, K=K, M=M, N=N, width=width,
        topk=topk_values(rng, T, s["tw"], N, s["special"]),
        qsl=np.array(qsl, np.int32), seq=np.array(seq, np.int32), gat=gather,
        ci=dict(offset=s["ooff"], stride=S, numel=s["ooff"] + rows * S + 2),
        cl=dict(offset=s["loff"], numel=s["loff"] + T + s["lextra"]),
        tpad=s["tpad"],
        desc=(f"{s['desc']} | T={T} R={len(reqs)} W={W} ratio={CR} topk={K} topk_width={s['tw']} M={M} N={N} "
              f"width={width} qsl={qsl if len(qsl) <= 8 else str(qsl[:8])[:-1] + ', ...]'}"),
    )


def global_specs() -> list[dict]:
    """B, K, T, R, C, kind of top-k rows, valid fraction of tokens, table row stride pad, out layout,
    extra token_to_req / is_valid_token entries, negative unused table entries."""
    d = dict(invalid_tok=0.1, bad=0.0, bpad=0, opad=0, ooff=0, oextra=0, loff=0, lextra=0, textra=0, neg_unused=False)
    return [
        {**d, "B": 64, "K": 512, "T": 40, "R": 4, "C": 16, "desc": "random well-formed batch, block size 64, topk 512"},
        {**d, "B": 16, "K": 2048, "T": 12, "R": 3, "C": 200, "bad": 0.15,
         "desc": "topk 2048, block size 16: entries with a column past the table and tokens of a bad request "
                 "spread over both 1024-column chunks (compaction across chunks)"},
        {**d, "B": 2, "K": 1030, "T": 9, "R": 2, "C": 600, "bad": 0.1,
         "desc": "topk 1030 (not a multiple of 4), block size 2"},
        {**d, "B": 64, "K": 0, "T": 6, "R": 2, "C": 4, "desc": "topk 0: topk_indices [T, 0]; lengths 0"},
        {**d, "B": 7, "K": 3, "T": 10, "R": 3, "C": 3, "bad": 0.3, "desc": "topk 3, block size 7, invalid entries"},
        {**d, "B": 64, "K": 8, "crafted": "bounds",
         "desc": "the PR's bounds: requests -1, == rows, > rows, INT32_MAX, INT32_MIN; columns == cols, > cols; "
                 "locals -5, INT32_MIN, INT32_MAX; invalid before valid; is_valid_token false rows; the PR's "
                 "test rows"},
        {**d, "B": 16, "K": 24, "T": 12, "R": 4, "C": 5, "bpad": 3, "bad": 0.2, "colbait": True,
         "desc": "a strided block-table view in the measurement (row stride cols + 3, entries past the logical "
                 "columns that a stride bound would read); locals of columns C, C+1, C+2"},
        {**d, "B": 7, "K": 13, "T": 10, "R": 5, "C": 9, "bad": 0.1, "neg_unused": True,
         "desc": "negative table entries in rows and columns no entry looks up"},
        {**d, "B": 128, "K": 100, "T": 11, "R": 3, "C": 6, "bad": 0.1, "opad": 9, "ooff": 5, "oextra": 2,
         "loff": 2, "lextra": 3, "textra": 3,
         "desc": "global_topk_indices row stride topk+9 at element 5, 2 rows past T; topk_lens at element 2, 3 "
                 "past T; token_to_req_indices and is_valid_token 3 longer than T"},
        {**d, "B": 1, "K": 17, "T": 8, "R": 5, "C": 40, "bad": 0.1, "desc": "block size 1 (one token a block)"},
        {**d, "B": 256, "K": 64, "T": 16, "R": 2, "C": 8, "desc": "block size 256"},
    ]


def crafted_bounds():
    """(topk, token_to_req, table, is_valid) of the bounds case, block size 64, 3 rows of 2 columns."""
    table = np.array([[10, 11], [20, 21], [30, 31]], np.int32)
    rows = [
        ([0, 64, -1, -1, -1, -1, -1, -1], 0, 1),  # the PR's exact valid metadata
        ([128, 64, -1, -1, -1, -1, -1, -1], 0, 1),  # invalid before valid
        ([0, 128, -1, -1, -1, -1, -1, -1], 0, 1),  # column == cols beside a valid entry
        ([256, 5, 127, 128, 63, I32_MAX, -1, 64], 1, 1),  # columns > cols, a huge local
        ([-5, 0, I32_MIN, 65, -1, 66, 129, 1], 2, 1),  # negative locals
        ([0, 1, 2, -1, -1, -1, -1, -1], -1, 1),  # request -1
        ([0, 1, 2, 3, -1, -1, -1, -1], 3, 1),  # request == rows
        ([0, 64, -1, -1, -1, -1, -1, -1], 7, 1),  # request > rows
        ([0, 64, 65, -1, -1, -1, -1, -1], I32_MAX, 1),
        ([0, 64, 65, -1, -1, -1, -1, -1], I32_MIN, 1),
        ([128, 3, 64, -1, 70, -1, -1, -1], 1, 0),  # invalid token, good request
        ([0, 5, -1, -1, -1, -1, -1, -1], 7, 0),  # invalid token, bad request (the PR's padding test)
        ([-1, -1, -1, -1, -1, -1, -1, -1], 0, 0),
        ([64, 0, 64, 0, 127, 126, 1, 2], 2, 1),  # repeats
    ]
    topk = np.array([r[0] for r in rows], np.int32)
    return topk, np.array([r[1] for r in rows], np.int32), table, np.array([bool(r[2]) for r in rows])


def build_global_case(rng, s: dict) -> dict:
    B, K = s["B"], s["K"]
    if s.get("crafted") == "bounds":
        topk, t2r, table, valid = crafted_bounds()
        T, R, C = topk.shape[0], table.shape[0], table.shape[1]
    else:
        T, R, C = s["T"], s["R"], s["C"]
        table = rng.integers(0, 100000, size=(R, C)).astype(np.int32)
        t2r = rng.integers(0, R, size=T).astype(np.int64)
        topk = np.full((T, K), -1, np.int64)
        for t in range(T):
            n = int(rng.integers(0, K + 1)) if rng.random() < 0.7 else K
            topk[t, :n] = rng.integers(0, C * B, size=n)
            if s["bad"] > 0:  # invalid entries anywhere in the row: negative, column >= C
                m = rng.random(K) < s["bad"]
                hi = C + 3 if s.get("colbait") else C + 40
                topk[t, m] = np.where(rng.random(int(m.sum())) < 0.3, rng.choice([-1, -7, I32_MIN], int(m.sum())),
                                      rng.integers(C * B, hi * B, size=int(m.sum())))
        if s["bad"] > 0:  # some tokens of a bad request
            bad = rng.random(T) < 0.15
            t2r[bad] = rng.choice([-1, R, R + 5], int(bad.sum()))
        valid = rng.random(T) >= s["invalid_tok"]
        t2r = t2r.astype(np.int32)
        topk = topk.astype(np.int32)
    if s["neg_unused"]:  # negative entries where no entry looks
        used = np.zeros((R, C), bool)
        for t in range(T):
            if 0 <= t2r[t] < R:
                cols = topk[t][(topk[t] >= 0)].astype(np.int64) // B
                used[t2r[t], cols[cols < C]] = True
        table[~used] = rng.choice([-1, -2, -1000, I32_MIN], int((~used).sum()))
        assert (~used).any()
    # Exclusions: no looked-up negative entry, no int32 wrap of block * B + offset.
    for t in range(T):
        if 0 <= t2r[t] < R:
            for v in topk[t]:
                if v >= 0 and v // B < C:
                    blk = int(table[t2r[t], v // B])
                    assert 0 <= blk and blk * B + B - 1 <= I32_MAX
    extra = s["textra"]
    t2r_full = np.concatenate([t2r, rng.integers(-3, R + 3, size=extra)]).astype(np.int32)
    valid_full = np.concatenate([valid, rng.random(extra) < 0.5]).astype(np.bool_)
    S = K + s["opad"]
    rows = T + s["oextra"]
    return dict(
        spec=s, T=T, R=R, C=C, B=B, K=K, topk=topk, t2r=t2r_full, table=table, valid=valid_full,
        bpad=s["bpad"],
        gi=dict(offset=s["ooff"], stride=max(S, 1), numel=s["ooff"] + rows * S + 3),
        gl=dict(offset=s["loff"], numel=s["loff"] + T + s["lextra"]),
        desc=(f"{s['desc']} | T={T} R={R} C={C} block_size={B} topk={K} valid tokens={int(valid.sum())}"),
    )


# ---------------------------------------------------------------------------
# The kernels: Triton on the GPU, or the library for a stand-in
# ---------------------------------------------------------------------------
class Triton:
    def __init__(self, mask_invalid_tokens: bool):
        import torch
        import triton

        if not torch.cuda.is_available():
            sys.exit("make_golden_upstream: no CUDA device (use --standin for a dry run)")
        sys.path.insert(0, str(REPO / "bench"))
        import triton_bench

        self.torch, self.up, self.mask = torch, triton_bench, mask_invalid_tokens
        self.meta = {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name(),
                     "set": "public"}

    def dev(self, a: np.ndarray):
        """A CUDA copy of `a`; an empty array still gets a real pointer (a view of one element)."""
        flat = np.concatenate([np.ascontiguousarray(a).reshape(-1), np.zeros(1, a.dtype)])
        return self.torch.from_numpy(flat).cuda()[:a.size].view(a.shape)

    def strided(self, buf, offset, shape, strides):
        return self.torch.as_strided(buf, shape, strides, offset)

    def combine(self, c: dict, salt: int):
        torch = self.torch
        ci_buf = self.dev(init_i32(c["ci"]["numel"], salt))
        cl_buf = self.dev(init_i32(c["cl"]["numel"], salt))
        ci = self.strided(ci_buf, c["ci"]["offset"], (c["T"], c["width"]), (c["ci"]["stride"], 1))
        cl = self.strided(cl_buf, c["cl"]["offset"], (c["T"],), (1,))
        topk = c["topk"]
        if c["tpad"]:  # a row stride wider than topk_indices, garbage past its columns
            back = np.full((topk.shape[0], topk.shape[1] + c["tpad"]), -99, np.int32)
            back[:, :topk.shape[1]] = topk
            t = self.dev(back)[:, :topk.shape[1]]
        else:
            t = self.dev(topk)
        self.up.combine_topk_swa_indices_v41(t, self.dev(c["qsl"]), self.dev(c["seq"]), self.dev(c["gat"]), c["W"],
                                             c["CR"], c["K"], c["M"], c["N"], out=(ci, cl))
        torch.cuda.synchronize()
        return ci_buf.cpu().numpy(), cl_buf.cpu().numpy(), None

    def global_topk(self, c: dict, salt: int):
        torch = self.torch
        gi_buf = self.dev(init_i32(c["gi"]["numel"], salt))
        gl_buf = self.dev(init_i32(c["gl"]["numel"], salt))
        gi = self.strided(gi_buf, c["gi"]["offset"], (c["T"], c["K"]), (c["gi"]["stride"], 1))
        gl = self.strided(gl_buf, c["gl"]["offset"], (c["T"],), (1,))
        table = c["table"]
        if c["bpad"]:  # logical [R, C] view of a wider table; past C: values a stride bound would use
            back = np.full((table.shape[0], table.shape[1] + c["bpad"]), 77777, np.int32)
            back[:, table.shape[1]:] -= np.arange(c["bpad"], dtype=np.int32)
            back[:, :table.shape[1]] = table
            bt = self.dev(back)[:, :table.shape[1]]
            assert bt.stride(0) > bt.shape[1]
        else:
            bt = self.dev(table)
        self.up.compute_global_topk_indices_and_lens_v4(self.dev(c["topk"]), self.dev(c["t2r"]), bt, c["B"],
                                                        self.dev(c["valid"]), out=(gi, gl),
                                                        mask_invalid_tokens=self.mask)
        torch.cuda.synchronize()
        return gi_buf.cpu().numpy(), gl_buf.cpu().numpy(), None


class Standin:
    def __init__(self):
        import dsv4kv

        self.dsv4kv = dsv4kv
        self.meta = {"set": "standin"}

    @staticmethod
    def strided(buf, offset, shape, strides):
        item = buf.dtype.itemsize
        return np.lib.stride_tricks.as_strided(buf[offset:], shape, tuple(s * item for s in strides))

    def combine(self, c: dict, salt: int):
        ci_buf, cl_buf = init_i32(c["ci"]["numel"], salt), init_i32(c["cl"]["numel"], salt)
        ci = self.strided(ci_buf, c["ci"]["offset"], (c["T"], c["width"]), (c["ci"]["stride"], 1))
        cl = self.strided(cl_buf, c["cl"]["offset"], (c["T"],), (1,))
        ec = np.zeros(1, np.int32)
        self.dsv4kv.combine_topk_swa_indices(c["topk"], c["qsl"], c["seq"], c["gat"], c["W"], c["CR"], c["K"], c["M"],
                                             c["N"], out=(ci, cl), max_image_tokens=0, semantics="vllm_v41",
                                             error_count=ec)
        return ci_buf, cl_buf, int(ec[0])

    def global_topk(self, c: dict, salt: int):
        gi_buf, gl_buf = init_i32(c["gi"]["numel"], salt), init_i32(c["gl"]["numel"], salt)
        gi = self.strided(gi_buf, c["gi"]["offset"], (c["T"], c["K"]), (c["gi"]["stride"], 1))
        gl = self.strided(gl_buf, c["gl"]["offset"], (c["T"],), (1,))
        ec = np.zeros(1, np.int32)
        self.dsv4kv.compute_global_topk_indices_and_lens(c["topk"], c["t2r"], c["table"], c["B"], c["valid"],
                                                         semantics="vllm_v4", out=(gi, gl), error_count=ec)
        return gi_buf, gl_buf, int(ec[0])


def out_params(name: str, off: int, dims, strides) -> dict:
    p = {f"{name}_offset": off}
    for i, (d, s) in enumerate(zip(dims, strides)):
        p[f"{name}_dim{i}"], p[f"{name}_stride{i}"] = d, s
    return p


def build(kind: str, kernels, rng, mask_invalid_tokens: bool):
    """(tensors, metadata, cases whose ref_match is 0) of one file."""
    _, _, semantics, _ = FILES[kind]
    tensors, meta, mismatches, warnings = {}, {}, [], []
    specs = combine_specs() if kind == "combine" else global_specs()
    for idx, s in enumerate(specs):
        c = f"case{idx:03d}"
        salt = 11 + 3 * idx
        if kind == "combine":
            case = build_combine_case(rng, s)
            run = kernels.combine
            ro, rl = ref_combine_v41(case["topk"], case["qsl"], case["seq"], case["gat"], case["W"], case["CR"],
                                     case["K"], case["M"], case["N"])
            want_err = 0
            a, b = case["ci"], case["cl"]
            ins = {"topk_indices": case["topk"], "query_start_loc": case["qsl"], "seq_lens": case["seq"],
                   "gather_lens": case["gat"]}
            names = ("combined_indices", "combined_lens")
            params = {"window_size": case["W"], "compress_ratio": case["CR"], "topk": case["K"], "M": case["M"],
                      "N": case["N"], "max_image_tokens": 0}
            params.update(out_params(names[0], a["offset"], (case["T"], case["width"]), (a["stride"], 1)))
            cols = case["width"]
        else:
            case = build_global_case(rng, s)
            run = kernels.global_topk
            T = case["T"]
            ro, rl = ref_global_topk_v4(case["topk"], case["t2r"][:T], case["table"], case["B"], case["valid"][:T],
                                        mask_invalid_tokens)
            want_err = global_topk_library_errors(case["topk"], case["t2r"][:T], case["table"], case["B"],
                                                  case["valid"][:T] if mask_invalid_tokens else None)
            a, b = case["gi"], case["gl"]
            ins = {"topk_indices": case["topk"], "token_to_req_indices": case["t2r"], "block_table": case["table"],
                   "is_valid_token": case["valid"]}
            names = ("global_topk_indices", "topk_lens")
            params = {"block_size": case["B"]}
            params.update(out_params(names[0], a["offset"], (T, case["K"]), (a["stride"], 1)))
            cols = case["K"]
        params.update(out_params(names[1], b["offset"], (case["T"],), (1,)))
        params.update({"init_salt": salt, "error_count": want_err})

        first = run(case, salt)
        second = run(case, salt)
        if any(not np.array_equal(x, y) for x, y in zip(first[:2], second[:2])) or first[2] != second[2]:
            sys.exit(f"make_golden_upstream: {kind} {c}: two runs gave different bytes")
        if first[2] is not None and first[2] != want_err:
            warnings.append(f"{kind} {c}: the stand-in counted {first[2]} errors, the failure model {want_err}")
        want_idx = place(init_i32(a["numel"], salt), a["offset"], case["T"], cols, a["stride"], ro)
        want_len = init_i32(b["numel"], salt)
        want_len[b["offset"]:b["offset"] + case["T"]] = rl
        ref_match = np.array_equal(first[0], want_idx) and np.array_equal(first[1], want_len)
        if not ref_match:
            mismatches.append(c)

        for k, v in ins.items():
            tensors[f"{c}.{k}"] = v
        tensors[f"{c}.{names[0]}_after"] = first[0].astype(np.int32)
        tensors[f"{c}.{names[1]}_after"] = first[1].astype(np.int32)
        for k, v in params.items():
            tensors[f"{c}.param.{k}"] = np.array([v], dtype=np.int64)
        meta[f"{c}.desc"] = case["desc"]
        meta[f"{c}.ref_match"] = int(ref_match)
        meta[f"{c}.semantics"] = semantics
    return tensors, meta, mismatches, warnings, len(specs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "conformance/golden"),
                    help="folder to write upstream_combine_v41.safetensors and upstream_global_topk.safetensors into")
    ap.add_argument("--only", choices=sorted(FILES), help="write one of the two files")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--standin", action="store_true",
                    help="no GPU: outputs from the dsv4kv library, for testing the replay (never committed)")
    ap.add_argument("--self-check", action="store_true",
                    help="only check the numpy references on hand-worked cases (no torch, Triton or dsv4kv)")
    a = ap.parse_args()
    fails = self_check()
    for f in fails:
        print(f"make_golden_upstream: self-check: {f}")
    if a.self_check or fails:
        print(f"make_golden_upstream: self-check {'failed' if fails else 'passed'}")
        return 1 if fails else 0
    out = Path(a.out).resolve()
    if a.standin and (REPO / "conformance/golden").resolve() in (out, *out.parents):
        sys.exit("make_golden_upstream: a stand-in is not written under conformance/golden")
    out.mkdir(parents=True, exist_ok=True)
    # Rows of invalid tokens are all -1: the PR's gather mask includes is_valid_token (bench/triton_bench.py).
    mask = True
    kernels = Standin() if a.standin else Triton(mask)
    status = 0
    for kind in [a.only] if a.only else sorted(FILES):
        fname, op, semantics, kernel = FILES[kind]
        rng = np.random.default_rng([a.seed, 0 if kind == "combine" else 1])
        tensors, meta, mismatches, warnings, num_cases = build(kind, kernels, rng, mask)
        header = {"format": "dsv4kv-golden-v1", "op": op, "layout": "fields", "seed": a.seed, "generator": GENERATOR,
                  "date": datetime.date.today().isoformat(), "num_cases": num_cases, "runs": "2 (identical)",
                  "kernel": kernel if not a.standin else "the dsv4kv library (a stand-in, not a measurement)",
                  "semantics": semantics}
        header.update(kernels.meta)
        header.update(meta)
        path = out / fname
        write_safetensors(path, tensors, header)
        print(f"make_golden_upstream: wrote {path} ({path.stat().st_size} bytes, {num_cases} cases, "
              f"set {header['set']})")
        for w in warnings:
            print(f"make_golden_upstream: warning: {w}")
        if mismatches:
            print(f"make_golden_upstream: {kind}: ref_match = 0 for {', '.join(mismatches)} (kept as measured)")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
