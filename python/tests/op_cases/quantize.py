"""quantize_and_insert_k_cache: its samples and builders for the generic tests."""

import inspect

import numpy as np

import dsv4kv

NAME = "quantize_and_insert_k_cache"
L = dsv4kv.layout
_E = inspect.Parameter.empty

#: Transcribed from the seed (vllm/models/deepseek_v4/common/ops/cache_utils.py): (name, default).
SIGNATURE = [("k", _E), ("k_cache", _E), ("slot_mapping", _E), ("block_size", 64), ("is_ue8m0", True),
             ("use_fnuz", False)]

#: The required array arguments: None for any of them is a contract error.
#: The operation takes record= (spec "Cache records"; test_signatures.py).
TAKES_RECORD = True

REQUIRED = ["k", "k_cache", "slot_mapping"]

#: Its part of test_signatures.py's script as a vLLM user writes it (the parts run in table order
#: and may use the variables of earlier parts and `dev`).
VLLM_SCRIPT = '''\
block_size, num_blocks = 64, 4
k = torch.randn(10, 512, device=dev).to(torch.bfloat16)
k_cache = torch.zeros(num_blocks, 37440, dtype=torch.uint8, device=dev)
slot_mapping = torch.arange(10, dtype=torch.int64, device=dev) + 64
quantize_and_insert_k_cache(k, k_cache, slot_mapping, block_size=block_size, is_ue8m0=True)
'''



def valid_call(xp):
    """(function, argument dict) of a valid call; REQUIRED names entries of the dict."""
    from _support import BF16

    k = xp.from_np(np.ones((2, L.kHeadDim), BF16))
    cache = xp.from_np(np.zeros((2, L.vllm_block_stride(64)), np.uint8))
    return dsv4kv.quantize_and_insert_k_cache, dict(k=k, k_cache=cache, slot_mapping=xp.from_np(np.arange(2, dtype=np.int64)))


def run_golden(xp, c):
    from _support import init_pattern

    nb, stride = c.p["num_blocks"], c.p["block_stride"]
    cache = xp.from_np(init_pattern(nb * stride, c.p["init_salt"]).reshape(nb, stride))
    ec = xp.from_np(np.zeros(1, np.int32))
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(c.get("k")), cache, xp.from_np(c.get("slot_mapping")),
                                       c.p["block_size"], error_count=ec)
    xp.synchronize()
    return {"k_cache_after": xp.to_np(cache), "error_count": int(xp.to_np(ec)[0])}


#: golden file -> runner; the runner's result keys (except error_count) are golden tensor names.
GOLDEN = {f: run_golden for f in ("quantize.safetensors", "quantize_special.safetensors",
                                  "quantize_nonfinite.safetensors")}


def problem(rng, pr, shared):
    """Adds this operation's random inputs to pr (shared: sizes and the nonfinite/bad_values flags)."""
    from _support import BF16

    T, nb, B = shared["T"], shared["nb"], pr["B"]
    scales = 10.0 ** rng.integers(-6, 6, size=(T, 1))
    k = (rng.standard_normal((T + 7, L.kHeadDim)) * np.vstack([scales, np.ones((7, 1))])).astype(BF16)
    if shared["nonfinite"]:
        kb = k.view(np.uint16)
        kb[3, 17] = 0x7F80  # +inf
        kb[4, 100] = 0xFFC1  # NaN with payload
        kb[5, :64] = 0x7FC0  # all-NaN tile
    slots = rng.permutation(nb * B)[:T].astype(np.int64)
    slots[::17] = -1
    if shared["bad_values"]:
        slots[5] = nb * B  # out of range: skipped and counted
        slots[6] = -7
    cache = rng.integers(0, 256, size=(nb, shared["stride"]), dtype=np.uint8)
    pr.update(k=k, slots=slots, cache=cache)


def preallocated(pr):
    """Output buffers the call writes into, as NumPy arrays (none: it writes pr's cache)."""
    return {}


def sample(t, pr):
    """(args, kwargs) of torch.ops.dsv4kv's schema on the converted arrays t (test_torch_ops.py)."""
    return (t["k"], t["cache"].clone(), t["slots"], pr["B"]), {}


def small_problem(ctx):
    """bench/host_cost.py's problem, small enough that the host and not the GPU sets the time:
    (args, kwargs) as the public function takes them, torch tensors from ctx (host_cost.py's)."""
    torch, B = ctx["torch"], ctx["B"]
    k = torch.randn(1, L.kHeadDim, generator=ctx["gen"]).to(torch.bfloat16).to(ctx["device"])
    return (k, ctx["cache"], ctx["rnd"](0, ctx["nb"] * B, (1,), torch.int64), B), {}


def run(t, pr, ec, **kw):
    """The call on the converted arrays t (pr's and preallocated()'s); returns its outputs."""
    dsv4kv.quantize_and_insert_k_cache(t["k"], t["cache"], t["slots"], pr["B"], error_count=ec, **kw)
    return {"cache": t["cache"]}
