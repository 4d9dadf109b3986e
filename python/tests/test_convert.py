"""dsv4kv.convert_k_cache (spec "Cache records", "Converting a cache"): every token of a cache
re-encoded as another record, checked against NumPy models of both records (the source written
by a NumPy encoder, the destination decoded by a NumPy decoder), on NumPy arrays, torch CPU
tensors and torch CUDA tensors."""

from __future__ import annotations

import numpy as np
import pytest

import dsv4kv
from _records import BF16, E4M3, PAD, decode_mxfp8, decode_nvfp4, encode_mxfp8, page_bytes

B = 16


def mxfp8_cache(rng, blocks: int, stride: int):
    """A 528-byte-record cache of random keys (NumPy encoder) and the float64 rows it decodes to."""
    cache = np.full((blocks, stride), PAD, dtype=np.uint8)
    rows = np.zeros((blocks * B, 512))
    for s in range(blocks * B):
        b, p = divmod(s, B)
        x = (rng.standard_normal(512) * rng.choice([1e-3, 1.0, 50.0])).astype(BF16).astype(np.float32)
        values, scales = encode_mxfp8(x)
        cache[b, p * 512:(p + 1) * 512] = values
        cache[b, B * 512 + p * 16:B * 512 + (p + 1) * 16] = scales
        rows[s] = decode_mxfp8(values, scales)
    return cache, rows


def test_mxfp8_to_nvfp4(xp):
    rng = np.random.default_rng(7)
    blocks = 3
    src, rows = mxfp8_cache(rng, blocks, page_bytes(B, 528))
    stride = page_bytes(B, 288) + 16
    dst = xp.from_np(np.full((blocks + 1, stride), PAD, dtype=np.uint8))
    count = xp.from_np(np.zeros(1, dtype=np.int32))
    dsv4kv.convert_k_cache(xp.from_np(src), dst, B, src_record="mxfp8_ds_mla", dst_record="nvfp4_ds_mla",
                           chunk_tokens=7, error_count=count)
    xp.synchronize()
    got = xp.to_np(dst)
    assert int(xp.to_np(count)[0]) == 0
    for s in range(blocks * B):
        b, p = divmod(s, B)
        values = got[b, p * 256:(p + 1) * 256]
        scales = got[b, B * 256 + p * 32:B * 256 + (p + 1) * 32]
        groups = rows[s].reshape(32, 16)
        want = np.clip(np.abs(groups).max(1).astype(np.float32) / 6, 2.0**-9, 448).astype(E4M3)
        np.testing.assert_array_equal(scales, want.view(np.uint8))
        sv = want.astype(np.float64)[:, None]
        y = np.abs(groups) / sv
        bound = np.where(y < 2, 0.25, np.where(y < 4, 0.5, 1.0)) * sv + np.maximum(0, np.abs(groups) - 6 * sv)
        assert np.all(np.abs(decode_nvfp4(values, scales).reshape(32, 16) - groups) <= bound * (1 + 2**-20))
    assert np.all(got[:, B * 288:] == PAD)  # block tails
    assert np.all(got[blocks] == PAD)  # a block past the source's


def test_mxfp8_to_fp8_ds_mla_keeps_the_last_64_values_exactly(xp):
    rng = np.random.default_rng(8)
    blocks = 2
    src, rows = mxfp8_cache(rng, blocks, page_bytes(B, 528))
    stride = B * 584 + 64
    dst = xp.from_np(np.full((blocks, stride), PAD, dtype=np.uint8))
    dsv4kv.convert_k_cache(xp.from_np(src), dst, B, src_record="mxfp8_ds_mla", dst_record="fp8_ds_mla")
    xp.synchronize()
    got = xp.to_np(dst)
    for s in range(blocks * B):
        b, p = divmod(s, B)
        rope = got[b, p * 576 + 448:(p + 1) * 576].view(np.uint16)
        np.testing.assert_array_equal(rope, rows[s][448:].astype(np.float32).astype(BF16).view(np.uint16))
        scales = got[b, B * 576 + p * 8:B * 576 + (p + 1) * 8]
        tiles = rows[s][:448].reshape(7, 64)
        e = np.ceil(np.log2(np.maximum(np.abs(tiles).max(1), np.float64(np.float32(1e-4))) / 448))
        np.testing.assert_array_equal(scales[:7], (e + 127).astype(np.uint8))
        assert scales[7] == 0
        codes = got[b, p * 576:p * 576 + 448].view(E4M3).astype(np.float64).reshape(7, 64)
        step = np.exp2(np.floor(np.log2(np.maximum(np.abs(tiles) / np.exp2(e)[:, None], 2.0**-6))) - 3)
        assert np.all(np.abs(codes * np.exp2(e)[:, None] - tiles) <= 0.5 * step * np.exp2(e)[:, None])
    assert np.all(got[:, B * 584:] == PAD)


def test_refusals():
    src = np.zeros((1, page_bytes(B, 528)), dtype=np.uint8)
    dst = np.zeros((1, page_bytes(B, 68)), dtype=np.uint8)
    with pytest.raises(ValueError, match="hold keys of different widths"):
        dsv4kv.convert_k_cache(src, dst, B, src_record="mxfp8_ds_mla", dst_record="mxfp4_indexer")
    with pytest.raises(ValueError, match="dst_record must be one of fp8_ds_mla, mxfp8_ds_mla"):
        dsv4kv.convert_k_cache(src, dst, B, src_record="mxfp8_ds_mla", dst_record="fp4")
    with pytest.raises(ValueError, match="dst has 0 blocks, fewer than src's 1"):
        dsv4kv.convert_k_cache(src, dst[:0], B, src_record="mxfp8_ds_mla", dst_record="nvfp4_ds_mla")
    with pytest.raises(ValueError, match="k_cache must hold at least block_size\\*288"):
        dsv4kv.convert_k_cache(src, np.zeros((1, 100), dtype=np.uint8), B, src_record="mxfp8_ds_mla",
                               dst_record="nvfp4_ds_mla")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compile_fullgraph_matches_eager(device):
    """The record= keyword through torch.ops.dsv4kv's schemas (a str argument): a conversion
    traced by torch.compile(fullgraph=True) writes the eager bytes, random source bytes (NaN
    codes and scales) included."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if device == "cuda":
        from _support import skip_without_cuda

        skip_without_cuda()
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(5)
    src = torch.randint(0, 256, (3, page_bytes(B, 528)), dtype=torch.uint8, generator=g).to(device)

    def convert(s):
        d = torch.full((3, page_bytes(B, 288)), PAD, dtype=torch.uint8, device=device)
        dsv4kv.convert_k_cache(s, d, B, src_record="mxfp8_ds_mla", dst_record="nvfp4_ds_mla", chunk_tokens=20)
        return d

    assert torch.equal(convert(src), torch.compile(convert, fullgraph=True)(src))
