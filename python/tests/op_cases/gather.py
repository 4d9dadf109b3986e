"""dequantize_and_gather_k_cache: its samples and builders for the generic tests."""

import inspect

import numpy as np

import dsv4kv

NAME = "dequantize_and_gather_k_cache"
L = dsv4kv.layout
_E = inspect.Parameter.empty

#: Transcribed from the seed (vllm/models/deepseek_v4/common/ops/cache_utils.py): (name, default).
SIGNATURE = [("out", _E), ("k_cache", _E), ("seq_lens", _E), ("gather_lens", _E), ("block_table", _E),
             ("block_size", _E), ("offset", _E), ("use_fnuz", False)]

#: The required array arguments: None for any of them is a contract error.
#: The operation takes record= (spec "Cache records"; test_signatures.py).
TAKES_RECORD = True

REQUIRED = ["out", "k_cache", "seq_lens", "block_table"]

#: Its part of test_signatures.py's script as a vLLM user writes it (the parts run in table order
#: and may use the variables of earlier parts and `dev`).
VLLM_SCRIPT = '''\
out = torch.zeros(1, 16, 512, dtype=torch.bfloat16, device=dev)
seq_lens = torch.tensor([10], dtype=torch.int32, device=dev)
block_table = torch.tensor([[1, 2]], dtype=torch.int32, device=dev)
dequantize_and_gather_k_cache(out, k_cache, seq_lens, None, block_table, block_size, 0)
err = (out[0, :10].float() - k.float()).abs().max() / k.float().abs().max()
assert err < 0.07, err
assert torch.equal(out[0, :10, 448:], k[:, 448:])
'''



def valid_call(xp):
    """(function, argument dict) of a valid call; REQUIRED names entries of the dict."""
    from _support import BF16

    i32 = lambda v: xp.from_np(np.array(v, np.int32))  # noqa: E731
    return dsv4kv.dequantize_and_gather_k_cache, dict(
        out=xp.from_np(np.zeros((1, 4, L.kHeadDim), BF16)),
        k_cache=xp.from_np(np.zeros((1, L.vllm_block_stride(64)), np.uint8)),
        seq_lens=i32([2]), gather_lens=None, block_table=i32([[0]]), block_size=64, offset=0)


def run_golden(xp, c):
    from _support import BF16, init_pattern

    p = c.p
    buf = xp.from_np(init_pattern(2 * p["out_numel"], p["init_salt"]).view(BF16))
    out = xp.strided(buf, (p["num_reqs"], p["out_dim1"], L.kHeadDim), (p["out_stride0"], p["out_stride1"], 1))
    gather = c.get("gather_lens") if p["has_gather_lens"] else None
    ec = xp.from_np(np.zeros(1, np.int32))
    dsv4kv.dequantize_and_gather_k_cache(out, xp.from_np(c.get("k_cache")), xp.from_np(c.get("seq_lens")),
                                         xp.from_np(gather), xp.from_np(c.get("block_table")), p["block_size"],
                                         p["offset"], error_count=ec)
    xp.synchronize()
    return {"out_after": xp.to_np(buf), "error_count": int(xp.to_np(ec)[0])}


#: golden file -> runner; the runner's result keys (except error_count) are golden tensor names.
GOLDEN = {"dequantize.safetensors": run_golden}


def problem(rng, pr, shared):
    """Adds this operation's random inputs to pr (shared: sizes and the bad_values flag)."""
    seq_lens = np.array([130, 64, 200], np.int32)
    gather_lens = np.array([100, 64, 7], np.int32)
    if shared["bad_values"]:
        gather_lens[2] = 250  # > seq_len: request skipped and counted
    max_blocks = 5
    block_table = rng.integers(0, shared["nb"], size=(shared["R"], max_blocks + 2), dtype=np.int32)
    if shared["bad_values"]:
        block_table[0, 1] = shared["nb"] + 3  # out of range entry
    pr.update(seq_lens=seq_lens, gather_lens=gather_lens, block_table=block_table, out_rows=110)


def preallocated(pr):
    """Output buffers the call writes into, as NumPy arrays: out, 7 where nothing is written."""
    from _support import BF16

    return {"out": np.full((4, pr["out_rows"], L.kHeadDim), 7, BF16)}


def sample(t, pr):
    """(args, kwargs) of torch.ops.dsv4kv's schema on the converted arrays t (test_torch_ops.py)."""
    return (t["out"], t["cache"], t["seq_lens"], t["gather_lens"], t["block_table"][:, :5], pr["B"], 3), {}


#: Its name in the Triton transcription (bench/host_cost.py; the others keep the public name).
TRITON_NAME = "dequantize_and_gather_k_cache_triton"


def small_problem(ctx):
    """bench/host_cost.py's problem, small enough that the host and not the GPU sets the time:
    (args, kwargs) as the public function takes them, torch tensors from ctx (host_cost.py's)."""
    torch, dev = ctx["torch"], ctx["device"]
    return (torch.empty(1, 128, L.kHeadDim, dtype=torch.bfloat16, device=dev), ctx["cache"],
            torch.tensor([128], dtype=torch.int32, device=dev), None, ctx["rnd"](0, ctx["nb"], (1, 2)), ctx["B"], 0), {}


def run(t, pr, ec, **kw):
    """The call on the converted arrays t (pr's and preallocated()'s); returns its outputs."""
    dsv4kv.dequantize_and_gather_k_cache(t["out"], t["cache"], t["seq_lens"], t["gather_lens"],
                                         t["block_table"][:, :5], pr["B"], 3, error_count=ec, **kw)
    return {"out": t["out"]}
