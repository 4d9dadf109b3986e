#!/usr/bin/env python3
"""Writes golden vectors of three index operations as CURRENT upstream vLLM computes them, measured on a
GPU from the Triton transcriptions in bench/triton_bench.py:

* conformance/golden/upstream_combine_v41.safetensors: op combine_topk_swa_indices, semantics
  vllm_v41 (vllm/models/deepseek_v41/common/ops/cache_utils.py at commit 091b5c26...);
* conformance/golden/upstream_global_topk.safetensors: op compute_global_topk_indices_and_lens,
  semantics vllm_v4 (vLLM PR #55692's bounds and left compaction; see bench/triton_bench.py
  for what of it is inferred);
* conformance/golden/upstream_mixed_v41.safetensors: op build_flashinfer_mixed_sparse_indices, semantics
  vllm_v41 (the same V4.1 file and commit; SWA bounded replay through replay_start).

Usage (GPU machine with CUDA, torch, Triton and numpy; from the repository root):
    python3 bench/make_golden_upstream.py --out conformance/golden
Dry run without a GPU (numpy and the dsv4kv package): --standin computes every output with the
library instead (semantics "vllm_v41" / "vllm_v4"), for testing the replay; its files say so
(`set` = `standin`) and are never written under conformance/golden. --self-check runs only the
numpy references on hand-worked cases (no torch, no Triton, no dsv4kv) and exits 0 or 1.

Every file has the field layout (conformance/golden/README.md, "The field layout"): tensors and
parameters are named after the fields of CombineArgs / GlobalTopkArgs / MixedSparseArgs
(spec/include/dsv4kv/spec/ops.hpp) by their Python names (an input passed as None is absent; booleans
are 0/1 parameters; a span parameter is there only when passed), and `caseNNN.semantics` (metadata)
names the profile. Outputs start as the init pattern of param.init_salt ("stale contents"); the whole
storage after the call is stored.
param.error_count is not measured (upstream has no counter): it is the count the library's failure
model gives for the case (spec/semantics.hpp lookup_slot; reference/src/global_topk.cpp): 0 for every
combine case; for global top-k one per token whose request is outside the table's rows and one per
entry >= 0 of a token with a valid request whose block column is >= the table's columns; for the mixed
builder one per prefill token of a request whose replay_start is negative (read as 0), and no other
(the cases hold none of the library's other reports: spec/operations.md, steps 1-7).

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
What goes in, mixed (V4.1 has no image windows: max_image_tokens 0, no visibility arrays):
* upstream's inputs: test_v41_flashinfer_mixed_sparse_indices_respect_replay_start (replay_start 0
  and [0, 16, 0]), and the V4 DSpark and CUDA-graph pad tests' inputs (V4.1 copies those decode rows);
* decode rows with global compressed indices (with and without decode_compressed_topk_lens, one
  length past the row's entries) and local ones (decode_is_valid_token false rows, translated but
  not counted); multi-token decode requests; no compressed decode indices;
* prefill rows with replay_start 0, inside the first token's window, equal to a token's pos, past
  every token (the SWA region all -1, the length still SW + topk_len), negative; decode requests'
  replay_start never read (-5, 10**6); fresh prefills, prefixes shorter than the window;
* block sizes 64, 32, 16, 8, 7, 4, 1, 128 and 256; packed pages (spans 72 and 20) and identity spans
  passed; compress ratios 4, 128, 2, 1 and 0 (topk 0, and topk 16: a region of -1); topk 512, 100,
  64, 32, 24, 16, 6 and 0; prefill_topk_indices narrower (-1 columns, counted) and wider than topk
  (columns past topk_len hold values never read); decode_compressed_indices wider than topk;
* SW > window (160 / 128, 13 / 8): decode rows copied whole; rows not a multiple of 4 wide;
* CUDA-graph padding: a decode-only batch whose pad rows lie past the last request, token_to_req
  the zero-length pad request (as upstream's tests) or 0, SWA rows all -1, invalid tokens;
* negative table entries where no lookup reads; decode-only and prefill-only batches;
* reused outputs (sparse_indices row stride > width at an offset, rows past T; sparse_topk_lens at
  an offset); token_to_req, replay_start and decode lengths longer than needed; in the measurement
  prefill_topk_indices and swa_block_table strided views (the file holds their contiguous copies).
Left out, where upstream is undefined or departs from the library on purpose:
* combine: seq_len < query length, gather_len outside [0, seq_len], a non-monotone query_start_loc
  (the library reports such requests), M * b + N + window index or v + M * b past INT32_MAX
  (int32 wrap), topk > topk_indices' width (out-of-bounds reads), T = 0;
* global top-k: a looked-up negative table entry (upstream gives a negative slot counted as valid;
  the library gives -1 and reports it), block * B + offset past INT32_MAX, an empty block table,
  T = 0;
* mixed: a lookup outside its table row or of a negative entry (upstream reads out of bounds, or its
  remap makes -1 with no report; a decode row counts the input), a prefill token outside its request
  or of a request outside [0, R) (upstream computes with it anyway; the library writes an all -1 row
  and reports it), slots, remapped indices or lengths past INT32_MAX, T = 0.

Each case runs twice on fresh outputs and must give identical bytes, or the script stops.
`caseNNN.ref_match` = 1 when the numpy reimplementation of the same upstream rules below gives the
same storages.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import numpy as np

# The init pattern and the safetensors writer are the sparse-gather generator's (same directory).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_golden_sparse_gather import init_pattern, write_safetensors  # noqa: E402

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
    "mixed": ("upstream_mixed_v41.safetensors", "build_flashinfer_mixed_sparse_indices", "vllm_v41",
              "bench/triton_bench.py _build_flashinfer_mixed_sparse_indices_v41_kernel (transcription of "
              f"vllm-project/vllm vllm/models/deepseek_v41/common/ops/cache_utils.py @ {V41_COMMIT}, "
              "_build_flashinfer_mixed_sparse_indices_kernel: grid T, num_warps 4 or 1)"),
}


def init_i32(numel: int, salt: int) -> np.ndarray:
    """An int32 storage of `numel` elements holding the init pattern of its bytes."""
    return init_pattern(4 * numel, salt).view("<i4").astype(np.int32)


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


class Undefined(ValueError):
    """A case outside what upstream defines (or where the library departs from it on purpose)."""


def ref_mixed_v41(dswa, dcomp, dlens, ptopk, qsl, seq_lens, t2r, stable, sbs, ctable, cbs, W, CR, K, local=False,
                  dvalid=None, sspan=None, cspan=None, *, replay):
    """V4.1 build_flashinfer_mixed_sparse_indices on row-major arrays: (sparse [D + P, SW + P4], lens [D + P])
    as int64 and the library's error count (one per prefill token of a request whose replay_start is
    negative: read as 0). Raises Undefined for a lookup outside its table row or of a negative entry, a
    malformed prefill token or an index past INT32_MAX (upstream reads out of bounds or wraps there)."""
    dswa = np.asarray(dswa, np.int64)
    ptopk = np.asarray(ptopk, np.int64)
    stable = np.asarray(stable, np.int64)
    ctable = stable if ctable is None else np.asarray(ctable, np.int64)
    sspan = sbs if sspan is None else sspan
    cspan = cbs if cspan is None else cspan
    D, SW = dswa.shape
    P, tw = ptopk.shape
    dct = 0 if dcomp is None else np.asarray(dcomp).shape[1]
    P4 = round_up(max(K, dct), 4)
    R = len(seq_lens)
    out = np.full((D + P, SW + P4), -1, np.int64)
    lens = np.zeros(D + P, np.int64)
    errors = 0

    def need(ok, what):
        if not ok:
            raise Undefined(what)

    def lookup(table, req, v, bs, where):  # v >= 0
        need(0 <= req < table.shape[0] and v // bs < table.shape[1], f"{where}: lookup outside the table")
        blk = int(table[req, v // bs])
        need(blk >= 0, f"{where}: negative table entry looked up")
        need(blk * bs + v % bs <= I32_MAX, f"{where}: slot past INT32_MAX")
        return blk * bs + v % bs

    def remap(v, bs, span, where):
        if v < 0:
            return -1
        r = (v // bs) * span + v % bs
        need(r <= I32_MAX, f"{where}: remapped index past INT32_MAX")
        return r

    for t in range(D):
        for c in range(SW):
            out[t, c] = remap(int(dswa[t, c]), sbs, sspan, f"decode {t}")
        kept = 0
        for c in range(P4):
            v = int(dcomp[t, c]) if c < dct else -1
            if local and dct > 0 and v >= 0:
                v = lookup(ctable, int(t2r[t]), v, cbs, f"decode {t} column {c}")
                kept += bool(dvalid[t])  # upstream counts the non-negative inputs of a valid token
            out[t, SW + c] = remap(v, cbs, cspan, f"decode {t}")
        clen = 0 if dct == 0 else kept if local else int(dlens[t]) if dlens is not None else dct
        lens[t] = SW + clen
        need(I32_MIN <= lens[t] <= I32_MAX, f"decode {t}: length outside int32")
    for p in range(P):
        t = D + p
        r = int(t2r[t])
        need(0 <= r < R, f"prefill {t}: request {r} outside [0, {R})")
        qs, qe, s = int(qsl[r]), int(qsl[r + 1]), int(seq_lens[r])
        need(qs <= t < qe and s >= qe - qs, f"prefill {t}: not inside request {r}")
        pos = s - (qe - qs) + t - qs
        rs = int(replay[r])
        errors += rs < 0
        start = max(pos - (W - 1), 0, rs)
        n = pos - start + 1
        tk = 0 if CR == 0 else min((pos + 1) // CR, K)
        for c in range(min(n, SW)):
            out[t, c] = remap(lookup(stable, r, start + c, sbs, f"prefill {t} window"), sbs, sspan, f"prefill {t}")
        for c in range(min(tw, tk)):
            v = int(ptopk[p, c])
            if v >= 0:
                out[t, SW + c] = remap(lookup(ctable, r, v, cbs, f"prefill {t} column {c}"), cbs, cspan,
                                       f"prefill {t}")
        lens[t] = SW + tk
    return out, lens, errors


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
    # Mixed V4.1 by hand (spec/operations.md's example): window 4, topk 2, ratio 1, block sizes 4, spans 6;
    # decode token 0 (request 0), prefill token 1 at pos 5 of request 1 (table row [3, 8]).
    def expect_mixed(name, got, want):  # (rows, lens[, error count]); numbers compared as plain lists
        got = [np.asarray(g).tolist() for g in got]
        if got != [np.asarray(w).tolist() for w in want]:
            fails.append(f"{name}: got {got}, want {want}")

    def mixed(dswa=((40, 41, -1, 43),), dcomp=None, dlens=None, ptopk=((1, 4),), CR=1, K=2, local=False,
              dvalid=None, replay=(0, 0), t2r=(0, 1)):
        o, ln, e = ref_mixed_v41(dswa, None if dcomp is None else np.array(dcomp), dlens, ptopk, [0, 1, 2], [9, 6],
                                 t2r, [[0, 0], [3, 8]], 4, None, 4, 4, CR, K, local, dvalid, 6, 6, replay=replay)
        return o.tolist(), ln.tolist(), e

    dec = [60, 61, -1, 63, -1, -1, -1, -1]
    expect_mixed("mixed v4.1 spec example", mixed(), ([dec, [20, 21, 48, 49, 19, 48, -1, -1]], [4, 6], 0))
    for rs, swa in ((4, [48, 49, -1, -1]), (5, [49, -1, -1, -1]), (6, [-1] * 4), (99, [-1] * 4)):
        expect_mixed(f"mixed v4.1 replay_start {rs}", mixed(replay=(0, rs)), ([dec, swa + [19, 48, -1, -1]], [4, 6], 0))
    expect_mixed("mixed v4.1 negative replay_start", mixed(replay=(-9, -3)),
           ([dec, [20, 21, 48, 49, 19, 48, -1, -1]], [4, 6], 1))
    expect_mixed("mixed v4.1 ratio 0", mixed(CR=0), ([dec, [20, 21, 48, 49, -1, -1, -1, -1]], [4, 4], 0))
    expect_mixed("mixed v4.1 ratio 4", mixed(CR=4), ([dec, [20, 21, 48, 49, 19, -1, -1, -1]], [4, 5], 0))
    expect_mixed("mixed v4.1 narrow prefill_topk", mixed(ptopk=((1,),)),
                 ([dec, [20, 21, 48, 49, 19, -1, -1, -1]], [4, 6], 0))
    expect_mixed("mixed v4.1 wide prefill_topk", mixed(ptopk=((1, 4, I32_MAX, -77),)),
           ([dec, [20, 21, 48, 49, 19, 48, -1, -1]], [4, 6], 0))
    pre = [20, 21, 48, 49, 19, 48, -1, -1]
    for ok, n in ((True, 2), (False, 0)):
        expect_mixed(f"mixed v4.1 local decode, valid {ok}",
               mixed(dcomp=[[5, -1, 0]], local=True, dvalid=[ok], t2r=(1, 1)),
               ([dec[:4] + [49, -1, 18, -1], pre], [4 + n, 6], 0))
    expect_mixed("mixed v4.1 global decode with lens", mixed(dcomp=[[7, -5, 2]], dlens=[9]),
           ([dec[:4] + [9, -1, 2, -1], pre], [13, 6], 0))
    expect_mixed("mixed v4.1 global decode", mixed(dcomp=[[7, -5, 2]]), ([dec[:4] + [9, -1, 2, -1], pre], [7, 6], 0))
    expect_mixed("mixed v4.1 SW > window: decode copied", mixed(dswa=((40, 41, -1, 43, 44, -1),)),
           ([[60, 61, -1, 63, 66, -1, -1, -1, -1, -1], [20, 21, 48, 49, -1, -1, 19, 48, -1, -1]], [6, 8], 0))
    # Upstream's DSpark inputs (test_flashmla_sparse.py): V4.1 has no DSpark layout, rows are copied.
    o, ln, _ = ref_mixed_v41([[0, 1, 2, -1, -1, -1, -1, -1]] * 2, np.array([[100, 101, -1, -1]] * 2), [2, 2],
                             np.zeros((0, 4)), [0, 2], [3], [0, 0], [[0]], 64, [[0]], 64, 4, 128, 0, replay=[0])
    expect_mixed("mixed v4.1 DSpark inputs", (o, ln), ([[0, 1, 2, -1, -1, -1, -1, -1, 100, 101, -1, -1]] * 2, [10, 10]))
    # Upstream's CUDA-graph pad test inputs: the pad token (request 1, zero-length) copied, lengths SW.
    swa = np.full((3, 192), -1)
    swa[:2, :3] = np.arange(3)
    o, ln, _ = ref_mixed_v41(swa, None, None, np.zeros((0, 0)), [0, 2, 2], [3, 0], [0, 0, 1], np.zeros((2, 1)), 64,
                             None, 64, 128, 1, 0, replay=[0, 0])
    expect_mixed("mixed v4.1 pad row", (o, ln), (swa.tolist(), [192] * 3))
    # test_v41_flashinfer_mixed_sparse_indices_respect_replay_start (tests/v1/attention/
    # test_deepseek_v4_swa_visible.py): window 8, block size 64, table row r = [r].
    for replay in ([0, 0, 0], [0, 16, 0]):
        o, ln, _ = ref_mixed_v41(np.zeros((1, 8)), None, None, np.zeros((33, 0)), [0, 1, 25, 34], [20, 40, 9],
                                 [0] + [1] * 24 + [2] * 9, [[0], [1], [2]], 64, None, 64, 8, 1, 0, replay=replay)
        rows = []
        for r, (s, q) in enumerate(((20, 1), (40, 24), (9, 9))):
            for pos in range(s - q, s):
                row = [r * 64 + x for x in range(max(pos - 7, 0, replay[r]), pos + 1)]
                rows.append(row + [-1] * (8 - len(row)))
        expect_mixed(f"mixed v4.1 upstream replay test {replay}", (o[1:], o[0], ln), (rows[1:], [0] * 8, [8] * 34))
    for bad, args in (("column past the table", dict(ptopk=((1, 8),))), ("request past R", dict(t2r=(0, 2))),
                      ("token outside its request", dict(t2r=(0, 0)))):
        try:
            mixed(**args)
            fails.append(f"mixed v4.1 {bad}: not refused")
        except Undefined:
            pass
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


def mixed_specs() -> list[dict]:
    """W, SW (decode_swa width, default W), block sizes and spans (None = not passed), CR, K (topk), tw
    (prefill_topk width, default K), dreqs: decode requests (tokens, seq_len), npad: CUDA-graph pad
    decode rows, preqs: prefill requests (tokens, prefix, replay: an int, 'in' (inside the first token's
    window), 'pos' (= the pos of the middle token), 'past' (past the last token), 'neg' or 'rand') or
    ('random', n, (q0, q1), (p0, p1)), dcomp None / 'global' / 'local' with dct columns, dlens (global:
    decode_compressed_topk_lens given), dinvalid (local: fraction of invalid decode tokens), ctable
    (False: compressed_block_table None), neg_unused (negative entries in cells no lookup reads),
    dreplay (replay_start of decode requests: never read), out layout, entries past T / R / D, and the
    measurement's extra row strides of prefill_topk_indices (tpad) and swa_block_table (bpad)."""
    d = dict(W=128, SW=None, sbs=64, cbs=64, sspan=None, cspan=None, CR=4, K=512, tw=None, dreqs=[], npad=0,
             preqs=[], dcomp=None, dct=0, dlens=False, dinvalid=0.0, ctable=True, neg_unused=False, dreplay=None,
             special=0.05, opad=0, ooff=0, oextra=0, loff=0, lextra=0, textra=0, rextra=0, dextra=0, tpad=0,
             bpad=0)
    rnd = ("random", 3, (20, 50), (0, 3000))
    return [
        {**d, "literal": "replay_test", "replay": [0, 0, 0],
         "desc": "upstream's test_v41_flashinfer_mixed_sparse_indices_respect_replay_start, replay_start 0 (plain)"},
        {**d, "literal": "replay_test", "replay": [0, 16, 0],
         "desc": "upstream's test_v41_flashinfer_mixed_sparse_indices_respect_replay_start, replay_start [0, 16, 0]"},
        {**d, "literal": "dspark_inputs",
         "desc": "inputs of upstream's V4 DSpark test (window 4, SW 8): V4.1 copies the decode rows, length SW + 2"},
        {**d, "literal": "pad_inputs",
         "desc": "inputs of upstream's V4 CUDA-graph pad test (window 128, SW 192, a zero-length pad request): "
                 "V4.1 copies the rows, lengths SW"},
        {**d, "dreqs": [(1, 200 + 450 * i) for i in range(8)], "preqs": rnd, "dcomp": "global", "dct": 512,
         "dlens": True, "desc": "random batch: 8 decode rows (global compressed indices and lengths), 3 prefill "
                                "requests with prefixes to 3000 (the top-k saturates at 512), random replay starts"},
        {**d, "cbs": 16, "CR": 128, "dreqs": [(2, 3000), (3, 7000), (1, 128)],
         "preqs": ("random", 2, (10, 30), (2000, 8000)), "dcomp": "local", "dct": 512, "dinvalid": 0.3,
         "desc": "ratio 128, compressed block size 16: multi-token decode requests with local compressed indices "
                 "and invalid tokens (translated, length SW)"},
        {**d, "CR": 0, "K": 0, "ctable": False, "dreqs": [(1, 90), (1, 3000), (2, 400), (1, 5)],
         "preqs": [(60, 500, 0), (40, 300, "in"), (30, 100, "past"), (20, 0, "pos")],
         "desc": "compress_ratio 0 (SWA-only layer): topk 0, prefill_topk_indices [P, 0], no compressed table"},
        {**d, "CR": 0, "K": 16, "ctable": False, "dreqs": [(1, 77)], "preqs": [(30, 200, "rand"), (25, 10, 0)],
         "desc": "compress_ratio 0 with topk 16: 16 compressed columns of -1; prefill_topk_indices never read"},
        {**d, "W": 8, "sbs": 16, "cbs": 4, "CR": 1, "K": 16, "tw": 10, "dreqs": [(1, 30), (1, 3)],
         "preqs": [(12, 0, 0), (9, 20, "in"), (6, 4, "pos"), (5, 30, 33)], "dcomp": "global", "dct": 12,
         "desc": "ratio 1, window 8, topk 16 over a 10-wide prefill_topk_indices (columns 10..15 -1, counted); "
                 "block sizes 16 and 4; global decode indices without lengths (length SW + 12)"},
        {**d, "W": 64, "sbs": 32, "cbs": 8, "CR": 4, "K": 16, "tw": 40, "dreqs": [(1, 100), (2, 60)],
         "preqs": [(50, 0, 0), (30, 90, "in"), (20, 10, "past")], "dcomp": "local", "dct": 16, "dinvalid": 0.2,
         "desc": "topk 16 of a 40-wide prefill_topk_indices (columns past topk_len hold values never read)"},
        {**d, "sbs": 64, "sspan": 72, "cbs": 16, "cspan": 20, "K": 64, "dreqs": [(1, 900), (1, 2500), (1, 64)],
         "preqs": ("random", 3, (10, 40), (0, 1500)), "dcomp": "local", "dct": 64,
         "desc": "packed pages: swa_block_span 72 (block size 64), compressed_block_span 20 (block size 16)"},
        {**d, "sbs": 32, "sspan": 32, "cbs": 8, "cspan": 8, "K": 32, "dreqs": [(1, 500), (1, 20)],
         "preqs": ("random", 2, (10, 40), (0, 600)), "dcomp": "global", "dct": 32, "dlens": True,
         "desc": "identity spans passed (swa_block_span = 32 = block size, compressed_block_span = 8)"},
        {**d, "SW": 160, "K": 64, "dreqs": [(2, 700), (1, 150), (3, 2000)],
         "preqs": ("random", 2, (20, 40), (0, 1000)), "dcomp": "global", "dct": 64,
         "desc": "decode_swa_indices wider than the window (SW 160, window 128): decode rows copied whole, "
                 "prefill windows in the first 128 columns"},
        {**d, "W": 8, "SW": 13, "sbs": 8, "cbs": 4, "CR": 2, "K": 6, "dreqs": [(2, 20), (1, 9)],
         "preqs": [(10, 0, 0), (7, 12, "in")], "dcomp": "local", "dct": 5,
         "desc": "SW 13 > window 8, topk 6 and 5 local decode columns: compressed region padded to 8"},
        {**d, "W": 64, "K": 32, "dreqs": [(1, 100 + 37 * i) for i in range(6)], "npad": 4, "dcomp": "local",
         "dct": 32, "desc": "CUDA-graph padding: decode-only batch, 4 pad rows past the last request (token_to_req "
                           "the zero-length pad request, or 0), all -1 SWA rows, is_valid_token false"},
        {**d, "K": 100, "dreqs": [(1, 300), (1, 1200)], "preqs": ("random", 2, (10, 30), (0, 900)),
         "dcomp": "global", "dct": 100, "dlens": True, "opad": 13, "ooff": 5, "oextra": 3, "loff": 2, "lextra": 4,
         "textra": 3, "rextra": 2, "dextra": 2, "tpad": 7, "bpad": 5,
         "desc": "reused outputs: sparse_indices row stride width+13 at element 5, 3 rows past T; sparse_topk_lens "
                 "at element 2, 4 past T; token_to_req, replay_start, decode lengths longer than needed; "
                 "prefill_topk_indices row stride +7 and swa_block_table row stride +5 in the measurement"},
        {**d, "W": 16, "sbs": 7, "cbs": 1, "CR": 2, "K": 24, "dreqs": [(1, 50), (1, 13)],
         "preqs": [(20, 30, "in"), (9, 0, 0)], "dcomp": "local", "dct": 24,
         "desc": "block sizes 7 (SWA) and 1 (compressed: one entry a block)"},
        {**d, "sbs": 256, "cbs": 128, "dreqs": [(1, 5000), (1, 300)], "preqs": ("random", 2, (10, 25), (2000, 6000)),
         "dcomp": "global", "dct": 512, "dlens": True, "desc": "block sizes 256 and 128, topk 512"},
        {**d, "W": 32, "K": 16, "dreqs": [(1, 40), (1, 50)], "preqs": [(20, 40, "neg"), (15, 30, "past"), (10, 60, 0)],
         "dreplay": [-5, 10**6], "desc": "a negative replay_start (read as 0; the library reports each of its "
                                        "prefill tokens), one past every token; decode requests' replay_start "
                                        "-5 and 10**6 (never read)"},
        {**d, "K": 16, "dreqs": [(1, 10), (2, 129), (1, 4000)],
         "desc": "decode only, no compressed decode indices, topk 16: 16 columns of -1, length SW"},
        {**d, "K": 64, "preqs": [(150, 0, 0), (20, 5, 0), (40, 1000, "in"), (30, 600, "pos")], "neg_unused": True,
         "desc": "prefill only: a fresh prefill longer than the window, a prefix shorter than it; negative "
                 "table entries where no lookup reads (blocks below the windows and past the top-k)"},
        {**d, "W": 64, "K": 16, "dreqs": [(1, 300), (1, 90)], "preqs": [(20, 100, 0)], "dcomp": "global", "dct": 20,
         "dlens": True, "desc": "decode_compressed_indices 20 wide, topk 16: compressed region 20"},
        {**d, "W": 64, "K": 0, "dreqs": [(1, 300), (2, 90)], "preqs": [(20, 100, 0)], "dcomp": "local", "dct": 6,
         "desc": "topk 0 with 6 local decode columns: region 8, prefill rows' compressed columns -1"},
    ]


def literal_mixed(s: dict) -> dict:
    """The inputs of upstream's tests, as given there."""
    if s["literal"] == "replay_test":
        return dict(W=8, CR=1, K=0, sbs=64, cbs=64, dswa=np.zeros((1, 8), np.int32), ptopk=np.zeros((33, 0), np.int32),
                    qsl=[0, 1, 25, 34], seq=[20, 40, 9], t2r=[0] + [1] * 24 + [2] * 9,
                    stable=np.arange(3, dtype=np.int32).reshape(3, 1), replay=s["replay"])
    if s["literal"] == "dspark_inputs":
        return dict(W=4, CR=128, K=0, sbs=64, cbs=64,
                    dswa=np.array([[0, 1, 2, -1, -1, -1, -1, -1]] * 2, np.int32), ptopk=np.zeros((0, 4), np.int32),
                    dcomp=np.array([[100, 101, -1, -1]] * 2, np.int32), dlens=np.array([2, 2], np.int32),
                    qsl=[0, 2], seq=[3], t2r=[0, 0], stable=np.zeros((1, 1), np.int32),
                    ctable=np.zeros((1, 1), np.int32), replay=[0])
    assert s["literal"] == "pad_inputs"
    swa = np.full((3, 192), -1, np.int32)
    swa[:2, :3] = np.arange(3)
    return dict(W=128, CR=1, K=0, sbs=64, cbs=64, dswa=swa, ptopk=np.zeros((0, 0), np.int32), qsl=[0, 2, 2],
                seq=[3, 0], t2r=[0, 0, 1], stable=np.zeros((2, 1), np.int32), replay=[0, 0])


def build_mixed_case(rng, s: dict) -> dict:
    if "literal" in s:
        c = {"dcomp": None, "dlens": None, "ctable": None, "dvalid": None, "local": False, "sspan": None,
             "cspan": None, **literal_mixed(s)}
        for k in ("qsl", "seq", "t2r", "replay"):
            c[k] = np.array(c[k], np.int32)
    else:
        c = random_mixed(rng, s)
    W, CR, K = c["W"], c["CR"], c["K"]
    c.update(spec=s, D=c["dswa"].shape[0], P=c["ptopk"].shape[0], SW=c["dswa"].shape[1],
             dct=0 if c["dcomp"] is None else c["dcomp"].shape[1])
    c["T"] = c["D"] + c["P"]
    c["width"] = mixed_row_width(c["SW"], K, c["dct"])
    out, lens, err = ref_mixed_v41(c["dswa"], c["dcomp"], c["dlens"], c["ptopk"], c["qsl"], c["seq"], c["t2r"],
                                   c["stable"], c["sbs"], c["ctable"], c["cbs"], W, CR, K, c["local"], c["dvalid"],
                                   c["sspan"], c["cspan"], replay=c["replay"])  # raises Undefined outside
    assert c["T"] > 0 and c["width"] <= I32_MAX
    c.update(ref=(out, lens), want_err=err)
    S = c["width"] + s["opad"]
    rows = c["T"] + s["oextra"]
    c["si"] = dict(offset=s["ooff"], stride=S, numel=s["ooff"] + rows * S + 2)
    c["sl"] = dict(offset=s["loff"], numel=s["loff"] + c["T"] + s["lextra"])
    c["tpad"], c["bpad"] = s["tpad"], s["bpad"]
    c["desc"] = (f"{s['desc']} | D={c['D']} P={c['P']} R={len(c['seq'])} W={W} SW={c['SW']} ratio={CR} topk={K} "
                 f"prefill_topk_width={c['ptopk'].shape[1]} dct={c['dct']} "
                 f"local={int(c['local'])} swa_block_size={c['sbs']} compressed_block_size={c['cbs']} "
                 f"spans={c['sspan']},{c['cspan']} width={c['width']} replay_start={c['replay'][:8].tolist()}")
    return c


def mixed_row_width(SW: int, K: int, dct: int) -> int:
    return SW + round_up(max(K, dct), 4)


def random_mixed(rng, s: dict) -> dict:
    """A well-formed decode-first batch of the spec (see mixed_specs)."""
    W, CR, K, sbs, cbs = s["W"], s["CR"], s["K"], s["sbs"], s["cbs"]
    SW = s["SW"] or W
    tw = K if s["tw"] is None else s["tw"]
    preqs = s["preqs"]
    if isinstance(preqs, tuple):
        _, n, (q0, q1), (p0, p1) = preqs
        preqs = [(int(rng.integers(q0, q1 + 1)), int(rng.integers(p0, p1 + 1)), "rand") for _ in range(n)]
    dreqs, npad = s["dreqs"], s["npad"]
    assert npad == 0 or not preqs  # pad rows only in decode-only batches (past the last request)
    D = sum(q for q, _ in dreqs) + npad
    # Requests: decode ones, prefill ones, then the zero-length pad request.
    q = [q for q, _ in dreqs] + [q for q, _, _ in preqs] + ([0] if npad else [])
    seq = [x for _, x in dreqs] + [p + qq for qq, p, _ in preqs] + ([0] if npad else [])
    R = len(seq)
    qsl = np.concatenate([[0], np.cumsum(q)]).astype(np.int64)
    t2r = np.repeat(np.arange(R), q).astype(np.int64)
    pads = np.array([R - 1 if i % 3 else 0 for i in range(npad)], np.int64)  # the pad request, or 0
    t2r = np.concatenate([t2r[:D - npad], pads, t2r[D - npad:]])
    T = len(t2r)
    assert T == int(qsl[-1]) or npad
    pos = np.array([int(seq[r] - q[r] + t - qsl[r]) for t, r in enumerate(t2r)], np.int64)

    # Tables: the SWA table covers every position, the compressed one every compressed entry.
    ncomp = [x // CR if CR else 0 for x in seq]
    need_s = max([-(-x // sbs) for x in seq] + [1])
    need_c = max([-(-n // cbs) for n in ncomp] + [1])
    Cs = need_s + int(rng.integers(0, 3)) + (0 if s["ctable"] else need_c)
    Cc = need_c + int(rng.integers(0, 3))
    nblocks = min(4 * R * max(Cs, Cc) + 16, 40000)
    stable = rng.integers(0, nblocks, size=(R, Cs)).astype(np.int64)
    ctable = rng.integers(0, nblocks, size=(R, Cc)).astype(np.int64) if s["ctable"] else None
    ctab = stable if ctable is None else ctable

    def slot(table, r, p, bs):
        return int(table[r, p // bs]) * bs + p % bs

    def sprinkle(row, pool):
        m = rng.random(len(row)) < s["special"]
        row[m] = rng.choice(pool, int(m.sum()))
        return row

    # Decode rows: the causal window's slots (plus spill columns when SW > W), then -1.
    dswa = np.full((D, SW), -1, np.int64)
    for t in range(D - npad):
        r, p = int(t2r[t]), int(pos[t])
        win = [slot(stable, r, x, sbs) for x in range(max(p - W + 1, 0), p + 1)]
        dswa[t, :len(win)] = win
        if SW > W:
            extra = int(rng.integers(0, SW - W + 1))
            dswa[t, W:W + extra] = rng.integers(0, nblocks * sbs, size=extra)
        dswa[t] = sprinkle(dswa[t], [-1, -2, I32_MIN])
    dct = s["dct"] if s["dcomp"] else 0
    dcomp = dlens = dvalid = None
    if s["dcomp"]:
        dcomp = np.full((D, dct), -1, np.int64)
        for t in range(D):
            r = int(t2r[t])
            n = (int(pos[t]) + 1) // CR if CR and t < D - npad else 0
            if t >= D - npad and t % 2:  # a pad row with indices into its request's table row
                n = ctab.shape[1] * cbs
            m = int(rng.integers(0, min(n, dct) + 1)) if rng.random() < 0.5 else min(n, dct)
            loc = rng.integers(0, max(n, 1), size=m)
            dcomp[t, :m] = loc if s["dcomp"] == "local" else [slot(ctab, r, int(v), cbs) for v in loc]
            dcomp[t] = sprinkle(dcomp[t], [-1, -5, I32_MIN])
        if s["dcomp"] == "global" and s["dlens"]:
            dlens = rng.integers(0, dct + 1, size=D + s["dextra"])
            dlens[0], dlens[D - 1] = 0, dct + 3  # a length past the row's entries passes through
        if s["dcomp"] == "local":
            dvalid = rng.random(D + s["dextra"]) >= s["dinvalid"]
            dvalid[D - npad:D] = False
    # Prefill rows: local indices below (pos + 1) // CR for c < topk_len, values never read past it.
    ptopk = np.zeros((T - D, tw), np.int64)
    for t in range(D, T):
        p = int(pos[t])
        tk = min((p + 1) // CR, K) if CR else 0
        m = min(tw, tk)
        ptopk[t - D, :m] = sprinkle(rng.integers(0, max((p + 1) // CR if CR else 1, 1), size=m), [-1, -7, I32_MIN])
        ptopk[t - D, m:] = rng.choice([-1, -99, I32_MAX, 10**6, nblocks * 1000], tw - m)
    # replay_start: prefill requests per the spec; decode (and pad) requests any value (never read).
    replay = list(s["dreplay"] or rng.integers(0, 50, size=len(dreqs)))
    for qq, p, how in preqs:
        if how == "rand":
            how = rng.choice(["0", "in", "pos", "past", "in"])
        if isinstance(how, (int, np.integer)):
            replay.append(int(how))
        else:
            replay.append({"0": 0, "in": max(p - int(rng.integers(0, W - 1)), 0), "pos": p + qq // 2,
                           "past": p + qq + 5, "neg": -3}[how])
    replay += [0] * (R - len(replay)) + list(rng.integers(-9, 99, size=s["rextra"]))  # the pad request
    if s["neg_unused"]:  # negative entries in every cell no lookup reads
        used_s, used_c = np.zeros(stable.shape, bool), np.zeros(ctab.shape, bool)
        for t in range(D, T):
            r, p = int(t2r[t]), int(pos[t])
            start = max(p - (W - 1), 0, replay[r])
            used_s[r, [x // sbs for x in range(start, p + 1)]] = True
            tk = min((p + 1) // CR, K) if CR else 0
            v = ptopk[t - D, :min(tw, tk)]
            (used_s if ctable is None else used_c)[r, v[v >= 0] // cbs] = True
        if dcomp is not None and s["dcomp"] == "local":
            for t in range(D):
                v = dcomp[t][dcomp[t] >= 0]
                (used_s if ctable is None else used_c)[int(t2r[t]), v // cbs] = True
        stable[~used_s] = rng.choice([-1, -2, -1000, I32_MIN], int((~used_s).sum()))
        if ctable is not None:
            ctable[~used_c] = rng.choice([-1, -2, -1000, I32_MIN], int((~used_c).sum()))
        assert (~used_s).any()
    t2r_full = np.concatenate([t2r, rng.integers(-3, R + 3, size=s["textra"])])
    i32 = (lambda a: None if a is None else np.asarray(a).astype(np.int32))
    return dict(W=W, CR=CR, K=K, sbs=sbs, cbs=cbs, sspan=s["sspan"], cspan=s["cspan"], local=s["dcomp"] == "local",
                dswa=i32(dswa), dcomp=i32(dcomp), dlens=i32(dlens), ptopk=i32(ptopk), qsl=i32(qsl), seq=i32(seq),
                t2r=i32(t2r_full), stable=i32(stable), ctable=i32(ctable),
                dvalid=None if dvalid is None else dvalid.astype(np.bool_), replay=i32(replay))


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

    def mixed(self, c: dict, salt: int):
        torch = self.torch
        si_buf = self.dev(init_i32(c["si"]["numel"], salt))
        sl_buf = self.dev(init_i32(c["sl"]["numel"], salt))
        si = self.strided(si_buf, c["si"]["offset"], (c["T"], c["width"]), (c["si"]["stride"], 1))
        sl = self.strided(sl_buf, c["sl"]["offset"], (c["T"],), (1,))
        opt = (lambda a: None if a is None else self.dev(a))

        def padded(a, pad, fill):  # a view of `a` in rows `pad` elements longer, `fill` past its columns
            back = np.full((a.shape[0], a.shape[1] + pad), fill, np.int32)
            back[:, :a.shape[1]] = a
            return self.dev(back)[:, :a.shape[1]]

        ptopk = padded(c["ptopk"], c["tpad"], -99) if c["tpad"] else self.dev(c["ptopk"])
        # Past the table's logical columns: values a lookup past them would use (none does).
        stable = padded(c["stable"], c["bpad"], 77777) if c["bpad"] else self.dev(c["stable"])
        self.up.build_flashinfer_mixed_sparse_indices_v41(
            self.dev(c["dswa"]), opt(c["dcomp"]), opt(c["dlens"]), ptopk, self.dev(c["qsl"]), self.dev(c["seq"]),
            self.dev(c["t2r"]), stable, c["sbs"], opt(c["ctable"]), c["cbs"], c["W"], c["CR"], c["K"], c["local"],
            opt(c["dvalid"]), c["sspan"], c["cspan"], replay_start=self.dev(c["replay"]), out=(si, sl))
        torch.cuda.synchronize()
        return si_buf.cpu().numpy(), sl_buf.cpu().numpy(), None


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

    def mixed(self, c: dict, salt: int):
        si_buf, sl_buf = init_i32(c["si"]["numel"], salt), init_i32(c["sl"]["numel"], salt)
        si = self.strided(si_buf, c["si"]["offset"], (c["T"], c["width"]), (c["si"]["stride"], 1))
        sl = self.strided(sl_buf, c["sl"]["offset"], (c["T"],), (1,))
        ec = np.zeros(1, np.int32)
        self.dsv4kv.build_flashinfer_mixed_sparse_indices(
            c["dswa"], c["dcomp"], c["dlens"], c["ptopk"], c["qsl"], c["seq"], c["t2r"], c["stable"], c["sbs"],
            c["ctable"], c["cbs"], c["W"], c["CR"], c["K"], c["local"], c["dvalid"], c["sspan"], c["cspan"],
            max_image_tokens=0, replay_start=c["replay"], semantics="vllm_v41", out=(si, sl), error_count=ec)
        return si_buf, sl_buf, int(ec[0])


def out_params(name: str, off: int, dims, strides) -> dict:
    p = {f"{name}_offset": off}
    for i, (d, s) in enumerate(zip(dims, strides)):
        p[f"{name}_dim{i}"], p[f"{name}_stride{i}"] = d, s
    return p


def build(kind: str, kernels, rng, mask_invalid_tokens: bool):
    """(tensors, metadata, cases whose ref_match is 0) of one file."""
    _, _, semantics, _ = FILES[kind]
    tensors, meta, mismatches, warnings = {}, {}, [], []
    specs = {"combine": combine_specs, "global_topk": global_specs, "mixed": mixed_specs}[kind]()
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
        elif kind == "mixed":
            case = build_mixed_case(rng, s)
            run = kernels.mixed
            ro, rl = case["ref"]
            want_err = case["want_err"]
            a, b = case["si"], case["sl"]
            # Python parameter names; an input passed as None is absent.
            ins = {"decode_swa_indices": case["dswa"], "decode_compressed_indices": case["dcomp"],
                   "decode_compressed_topk_lens": case["dlens"], "prefill_topk_indices": case["ptopk"],
                   "query_start_loc": case["qsl"], "seq_lens": case["seq"], "token_to_req_indices": case["t2r"],
                   "swa_block_table": case["stable"], "compressed_block_table": case["ctable"],
                   "decode_is_valid_token": case["dvalid"], "replay_start": case["replay"]}
            ins = {k: v for k, v in ins.items() if v is not None}
            names = ("sparse_indices", "sparse_topk_lens")
            params = {"swa_block_size": case["sbs"], "compressed_block_size": case["cbs"], "window_size": case["W"],
                      "compress_ratio": case["CR"], "topk": case["K"],
                      "decode_compressed_indices_are_local": int(case["local"]), "max_image_tokens": 0}
            params.update({k: v for k, v in (("swa_block_span", case["sspan"]),
                                             ("compressed_block_span", case["cspan"])) if v is not None})
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
        rng = np.random.default_rng([a.seed, {"combine": 0, "global_topk": 1, "mixed": 2}[kind]])
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
