"""The same inputs through dsv4kv (torch CUDA tensors) and through the Triton transcription of
vLLM's kernels (shared/oracle/dsv4_triton.py): caches and indices must be byte-identical.

Runs on a CUDA GPU when DSV4KV_ORACLE_DIR points at a copy of the oracle folder, e.g.
``DSV4KV_ORACLE_DIR=$PWD/.oracle pytest python/tests/test_oracle.py``. Inputs respect the
Triton kernels' preconditions (they do not check them): unique slots, contiguous block tables,
block-table columns that exist, gather lengths within the sequence.
"""

import importlib
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import dsv4kv
from _support import BF16, TorchXP, bits, init_pattern
from op_cases import adopt

L = dsv4kv.layout


def _oracle_or_reason():
    where = os.environ.get("DSV4KV_ORACLE_DIR")
    if not where:
        return None, "DSV4KV_ORACLE_DIR is not set (point it at a copy of shared/oracle)"
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA device visible to torch"
    if not dsv4kv.HAS_CUDA:
        return None, "dsv4kv was built without the CUDA backend"
    try:
        import triton  # noqa: F401
    except ImportError:
        return None, "triton is not installed"
    sys.path.insert(0, where)
    try:
        return importlib.import_module("dsv4_triton"), None
    except Exception as e:  # pragma: no cover - reported as the skip reason
        return None, f"cannot import dsv4_triton from {where}: {e!r}"


K, REASON = _oracle_or_reason()
if REASON and os.environ.get("DSV4KV_REQUIRE_CUDA") == "1" and os.environ.get("DSV4KV_ORACLE_DIR"):
    raise RuntimeError(f"oracle comparison requested but: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"Triton oracle: {REASON}")

XP = None if REASON else TorchXP("cuda")


def same(a, b, what):
    np.testing.assert_array_equal(bits(XP.to_np(a)), bits(XP.to_np(b)), err_msg=what)


@pytest.mark.parametrize("seed,block_size,nonfinite", [(1, 64, False), (2, 128, False), (3, 64, True), (4, 32, True)])
def test_quantize(seed, block_size, nonfinite):
    rng = np.random.default_rng(seed)
    nb, T = 40, 700
    stride = L.vllm_block_stride(block_size)
    scales = 10.0 ** rng.integers(-8, 8, size=(T, 1))
    k = (rng.standard_normal((T + 5, L.kHeadDim)) * np.vstack([scales, np.ones((5, 1))])).astype(BF16)
    if nonfinite:
        kb = k.view(np.uint16)
        kb[rng.integers(0, T, 20), rng.integers(0, L.kHeadDim, 20)] = rng.choice([0x7F80, 0xFF80, 0x7FC0, 0xFFFF], 20)
    slots = rng.permutation(nb * block_size)[:T].astype(np.int64)
    slots[rng.random(T) < 0.1] = -1
    cache0 = init_pattern(nb * stride, seed).reshape(nb, stride)
    ours, theirs = XP.from_np(cache0), XP.from_np(cache0)
    kk, ss = XP.from_np(k), XP.from_np(slots)
    dsv4kv.quantize_and_insert_k_cache(kk, ours, ss, block_size)
    K.quantize_and_insert_k_cache(kk, theirs, ss, block_size)
    same(ours, theirs, "k_cache")


@pytest.mark.parametrize("seed,block_size,permuted", [(1, 64, False), (2, 128, True), (3, 64, True)])
def test_dequantize(seed, block_size, permuted):
    import torch

    rng = np.random.default_rng(seed)
    nb, R, max_blocks = 30, 4, 6
    stride = L.vllm_block_stride(block_size)
    cache = XP.from_np(rng.integers(0, 256, size=(nb, stride), dtype=np.uint8))  # every code and scale byte
    seq = rng.integers(1, max_blocks * block_size, size=R).astype(np.int32)
    gather = np.minimum(seq, rng.integers(0, 300, size=R)).astype(np.int32)
    bt = rng.integers(0, nb, size=(R, max_blocks), dtype=np.int32)
    rows = int(gather.max()) + 3
    if permuted:
        buf_ours = torch.full((rows, R, L.kHeadDim), 3.0, dtype=torch.bfloat16, device="cuda")
        buf_theirs = buf_ours.clone()
        out_ours, out_theirs = buf_ours.transpose(0, 1), buf_theirs.transpose(0, 1)
    else:
        buf_ours = torch.full((R, rows, L.kHeadDim), 3.0, dtype=torch.bfloat16, device="cuda")
        buf_theirs = buf_ours.clone()
        out_ours, out_theirs = buf_ours, buf_theirs
    args = (cache, XP.from_np(seq), XP.from_np(gather), XP.from_np(bt), block_size, 2)
    dsv4kv.dequantize_and_gather_k_cache(out_ours, *args)
    K.dequantize_and_gather_k_cache(out_theirs, *args)
    same(buf_ours, buf_theirs, "out")


@pytest.mark.parametrize("seed,block_size,topk", [(1, 64, 512), (2, 128, 2048), (3, 16, 100)])
def test_global_topk(seed, block_size, topk):
    rng = np.random.default_rng(seed)
    T, R, cols = 300, 5, 40
    idx = rng.integers(-1, cols * block_size, size=(T, topk + 3), dtype=np.int32)
    t2r = rng.integers(0, R, size=T, dtype=np.int32)
    bt = rng.integers(0, 10000, size=(R, cols), dtype=np.int32)
    valid = rng.random(T) < 0.8
    args = (XP.from_np(idx)[:, :topk], XP.from_np(t2r), XP.from_np(bt), block_size, XP.from_np(valid))
    g1, l1 = dsv4kv.compute_global_topk_indices_and_lens(*args)
    g2, l2 = K.compute_global_topk_indices_and_lens(*args)
    same(g1, g2, "global_topk_indices")
    same(l1, l2, "topk_lens")


def image_visibility(rng, seq_lens, query_lens, max_img):
    """DeepSeek's rule per token inside an image span [s, e]: left = min(pos - s, max_img - 1),
    right = min(e - pos, max_img); spans no longer than max_img, inside the sequence."""
    left, right = [], []
    for s_len, q_len in zip(seq_lens, query_lens):
        spans = []
        p = 0
        while p < s_len:
            p += int(rng.integers(1, 40))
            n = int(rng.integers(1, max_img + 1))
            if p + n <= s_len:
                spans.append((p, p + n - 1))
            p += n
        for pos in range(s_len - q_len, s_len):
            lv = rv = 0
            for s, e in spans:
                if s <= pos <= e:
                    lv, rv = min(pos - s, max_img - 1), min(e - pos, max_img)
            left.append(lv)
            right.append(rv)
    return np.array(left, np.int32), np.array(right, np.int32)


@pytest.mark.parametrize("seed,local,image,spans,dct", [(1, False, False, False, 512), (2, True, False, True, 64),
                                                       (3, False, True, False, 0), (4, True, True, True, 130)])
def test_mixed_sparse(seed, local, image, spans, dct):
    rng = np.random.default_rng(seed)
    D, R_p = 7, 3
    window, cr, topk, sbs, cbs, max_img = 128, 4, 96, 64, 16, 24
    p_query = rng.integers(1, 50, size=R_p)
    p_seq = p_query + rng.integers(0, 500, size=R_p)
    d_seq = rng.integers(1, 600, size=D)
    seq = np.concatenate([d_seq, p_seq]).astype(np.int32)
    qsl = np.concatenate([np.arange(D + 1), D + np.cumsum(p_query)]).astype(np.int32)
    P = int(p_query.sum())
    t2r = np.concatenate([np.arange(D), np.repeat(np.arange(D, D + R_p), p_query)]).astype(np.int32)
    cols = int(seq.max()) // min(sbs, cbs) + 4
    swa_bt = rng.integers(0, 3000, size=(D + R_p, cols), dtype=np.int32)
    comp_bt = rng.integers(0, 3000, size=(D + R_p, cols), dtype=np.int32)
    dswa = rng.integers(-1, 100000, size=(D, window + 3), dtype=np.int32)
    dcomp = rng.integers(-1, (cols - 1) * cbs if local else 100000, size=(D, dct), dtype=np.int32) if dct else None
    dlens = rng.integers(0, dct + 1, size=D, dtype=np.int32) if dct and not local else None
    dvalid = (rng.random(D) < 0.8) if local else None
    ptopk = rng.integers(-1, int(seq.max()) // cr + 1, size=(P, topk + 2), dtype=np.int32)
    if image:
        lv_p, rv_p = image_visibility(rng, p_seq, p_query, max_img)
        lv = np.concatenate([np.zeros(D, np.int32), lv_p])
        rv = np.concatenate([np.zeros(D, np.int32), rv_p])
    f = lambda a: None if a is None else XP.from_np(a)  # noqa: E731
    args = (f(dswa), f(dcomp), f(dlens), f(ptopk)[:, :topk], f(qsl), f(seq), f(t2r), f(swa_bt), sbs, f(comp_bt), cbs,
            window, cr, topk)
    kw = dict(decode_compressed_indices_are_local=local and dct > 0, decode_is_valid_token=f(dvalid),
              swa_block_span=80 if spans else None, compressed_block_span=24 if spans else None,
              prefill_left_visible=f(lv) if image else None, prefill_right_visible=f(rv) if image else None,
              max_image_tokens=max_img if image else 0)
    i1, l1 = dsv4kv.build_flashinfer_mixed_sparse_indices(*args, **kw)
    i2, l2 = K.build_flashinfer_mixed_sparse_indices(*args, **kw)
    same(i1, i2, "sparse_indices")
    same(l1, l2, "sparse_topk_lens")


# Each operation's own oracle tests (op_cases/<op>.py), skipped here like the ones above; they
# use K, XP, same and image_visibility from this module.
adopt(globals(), "ORACLE_TESTS")
