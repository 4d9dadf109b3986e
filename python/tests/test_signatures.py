"""Drop-in compatibility with vLLM's cache_utils (the seed): names, positional order, keyword
names and defaults, and a script written against vLLM that runs with only its import changed."""

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

import dsv4kv

E = inspect.Parameter.empty
# Transcribed from the seed (vllm/models/deepseek_v4/common/ops/cache_utils.py): (name, default).
SEED = {
    "quantize_and_insert_k_cache": [
        ("k", E), ("k_cache", E), ("slot_mapping", E), ("block_size", 64), ("is_ue8m0", True), ("use_fnuz", False)],
    "dequantize_and_gather_k_cache": [
        ("out", E), ("k_cache", E), ("seq_lens", E), ("gather_lens", E), ("block_table", E), ("block_size", E),
        ("offset", E), ("use_fnuz", False)],
    "compute_global_topk_indices_and_lens": [
        ("topk_indices", E), ("token_to_req_indices", E), ("block_table", E), ("block_size", E),
        ("is_valid_token", E)],
    "combine_topk_swa_indices": [
        ("topk_indices", E), ("query_start_loc", E), ("seq_lens", E), ("gather_lens", E), ("window_size", E),
        ("compress_ratio", E), ("topk", E), ("M", E), ("N", E), ("out", None), ("left_visible", None),
        ("right_visible", None), ("max_image_tokens", 0)],
    "build_flashinfer_mixed_sparse_indices": [
        ("decode_swa_indices", E), ("decode_compressed_indices", E), ("decode_compressed_topk_lens", E),
        ("prefill_topk_indices", E), ("query_start_loc", E), ("seq_lens", E), ("token_to_req_indices", E),
        ("swa_block_table", E), ("swa_block_size", E), ("compressed_block_table", E), ("compressed_block_size", E),
        ("window_size", E), ("compress_ratio", E), ("topk", E), ("decode_compressed_indices_are_local", False),
        ("decode_is_valid_token", None), ("swa_block_span", None), ("compressed_block_span", None),
        ("prefill_left_visible", None), ("prefill_right_visible", None), ("max_image_tokens", 0)],
}
EXTRAS = {"error_count", "stream", "out"}  # keyword-only additions


@pytest.mark.parametrize("name", sorted(SEED))
def test_signature_matches_seed(name):
    params = list(inspect.signature(getattr(dsv4kv, name)).parameters.values())
    positional = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert [(p.name, p.default) for p in positional] == SEED[name]
    extras = [p for p in params if p.kind != p.POSITIONAL_OR_KEYWORD]
    assert all(p.kind == p.KEYWORD_ONLY and p.name in EXTRAS and p.default is None for p in extras)


@pytest.mark.parametrize("name", sorted(SEED))
def test_docstrings_give_shapes_and_dtypes(name):
    doc = getattr(dsv4kv, name).__doc__
    assert "int32" in doc and "[" in doc


# A script as a vLLM user writes it; the test swaps only its import line.
VLLM_SCRIPT = '''
import torch
from vllm.models.deepseek_v4.common.ops.cache_utils import (
    build_flashinfer_mixed_sparse_indices, combine_topk_swa_indices, compute_global_topk_indices_and_lens,
    dequantize_and_gather_k_cache, quantize_and_insert_k_cache)

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
block_size, num_blocks = 64, 4
k = torch.randn(10, 512, device=dev).to(torch.bfloat16)
k_cache = torch.zeros(num_blocks, 37440, dtype=torch.uint8, device=dev)
slot_mapping = torch.arange(10, dtype=torch.int64, device=dev) + 64
quantize_and_insert_k_cache(k, k_cache, slot_mapping, block_size=block_size, is_ue8m0=True)

out = torch.zeros(1, 16, 512, dtype=torch.bfloat16, device=dev)
seq_lens = torch.tensor([10], dtype=torch.int32, device=dev)
block_table = torch.tensor([[1, 2]], dtype=torch.int32, device=dev)
dequantize_and_gather_k_cache(out, k_cache, seq_lens, None, block_table, block_size, 0)
err = (out[0, :10].float() - k.float()).abs().max() / k.float().abs().max()
assert err < 0.07, err
assert torch.equal(out[0, :10, 448:], k[:, 448:])

topk_indices = torch.tensor([[0, 5, -1, 9]] * 10, dtype=torch.int32, device=dev)
token_to_req = torch.zeros(10, dtype=torch.int32, device=dev)
is_valid = torch.ones(10, dtype=torch.bool, device=dev)
g, lens = compute_global_topk_indices_and_lens(topk_indices, token_to_req, block_table, block_size, is_valid)
assert g[0].tolist() == [64, 69, -1, 73] and lens.tolist() == [3] * 10 and g.device == k.device

qsl = torch.tensor([0, 10], dtype=torch.int32, device=dev)
ci, cl = combine_topk_swa_indices(topk_indices, qsl, seq_lens, seq_lens, 8, 4, 4, 1024, 512)
assert ci.shape == (10, 128) and ci.dtype == torch.int32 and cl[9].item() == 2 + 8
ci2, cl2 = combine_topk_swa_indices(topk_indices, qsl, seq_lens, seq_lens, 8, 4, 4, 1024, 512, (ci, cl))
assert ci2 is ci

swa = torch.full((1, 8), -1, dtype=torch.int32, device=dev)
prefill = torch.zeros(3, 4, dtype=torch.int32, device=dev)
qsl2 = torch.tensor([0, 1, 4], dtype=torch.int32, device=dev)
seq2 = torch.tensor([20, 3], dtype=torch.int32, device=dev)
t2r = torch.tensor([0, 1, 1, 1], dtype=torch.int32, device=dev)
bt2 = torch.tensor([[0], [3]], dtype=torch.int32, device=dev)
si, sl = build_flashinfer_mixed_sparse_indices(
    swa, None, None, prefill, qsl2, seq2, t2r, bt2, 64, None, 64, 8, 4, 4,
    decode_compressed_indices_are_local=False, decode_is_valid_token=None, swa_block_span=None,
    compressed_block_span=None, prefill_left_visible=None, prefill_right_visible=None, max_image_tokens=0)
assert si.shape == (4, 12) and sl.tolist() == [8, 8, 8, 8]
print("ok", dev)
'''


def test_vllm_script_runs_with_only_the_import_changed(tmp_path):
    pytest.importorskip("torch", reason="the vLLM-style script uses torch tensors; torch is not installed")
    script = VLLM_SCRIPT.replace("from vllm.models.deepseek_v4.common.ops.cache_utils import", "from dsv4kv import")
    assert script.count("\n") == VLLM_SCRIPT.count("\n")
    changed = [a for a, b in zip(VLLM_SCRIPT.splitlines(), script.splitlines()) if a != b]
    assert len(changed) == 1
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=str(tmp_path), timeout=300,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok")
