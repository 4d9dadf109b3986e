"""compute_global_topk_indices_and_lens: its samples and builders for the generic tests."""

import inspect

import numpy as np
import pytest

import dsv4kv

L = dsv4kv.layout

NAME = "compute_global_topk_indices_and_lens"
_E = inspect.Parameter.empty

#: Transcribed from the seed (vllm/models/deepseek_v4/common/ops/cache_utils.py): (name, default).
SIGNATURE = [("topk_indices", _E), ("token_to_req_indices", _E), ("block_table", _E), ("block_size", _E),
             ("is_valid_token", _E)]

#: The required array arguments: None for any of them is a contract error.
REQUIRED = ["topk_indices", "token_to_req_indices", "block_table", "is_valid_token"]

#: Its part of test_signatures.py's script as a vLLM user writes it (the parts run in table order
#: and may use the variables of earlier parts and `dev`).
VLLM_SCRIPT = '''\
topk_indices = torch.tensor([[0, 5, -1, 9]] * 10, dtype=torch.int32, device=dev)
token_to_req = torch.zeros(10, dtype=torch.int32, device=dev)
is_valid = torch.ones(10, dtype=torch.bool, device=dev)
g, lens = compute_global_topk_indices_and_lens(topk_indices, token_to_req, block_table, block_size, is_valid)
assert g[0].tolist() == [64, 69, -1, 73] and lens.tolist() == [3] * 10 and g.device == k.device
'''



def valid_call(xp):
    """(function, argument dict) of a valid call; REQUIRED names entries of the dict."""
    i32 = lambda v: xp.from_np(np.array(v, np.int32))  # noqa: E731
    return dsv4kv.compute_global_topk_indices_and_lens, dict(
        topk_indices=i32([[0, 1]]), token_to_req_indices=i32([0]), block_table=i32([[0]]), block_size=64,
        is_valid_token=xp.from_np(np.ones(1, bool)))


def run_golden(xp, c):
    topk = c.p["topk"]
    full = xp.from_np(c.get("topk_indices"))
    ec = xp.from_np(np.zeros(1, np.int32))
    g, lens = dsv4kv.compute_global_topk_indices_and_lens(
        full[:, :topk], xp.from_np(c.get("token_to_req")), xp.from_np(c.get("block_table")), c.p["block_size"],
        xp.from_np(c.get("is_valid_token")), error_count=ec)
    xp.synchronize()
    return {"global_topk_indices": xp.to_np(g), "topk_lens": xp.to_np(lens), "error_count": int(xp.to_np(ec)[0])}


# ---------------------------------------------------------------------------
# Contract errors (adopted by test_errors.py, which gives the `xp` fixture)
# ---------------------------------------------------------------------------
def _raises(exc, message):
    import re

    return pytest.raises(exc, match="^" + re.escape(message) + "$")


def test_global_topk_unknown_semantics(xp):
    fn, args = valid_call(xp)
    with _raises(ValueError, "compute_global_topk_indices_and_lens: semantics must be one of seed, vllm_v4, "
                             "vllm_v41, got 'vllm'"):
        fn(**args, semantics="vllm")


def test_global_topk_semantics_must_be_a_str(xp):
    fn, args = valid_call(xp)
    with _raises(TypeError, "compute_global_topk_indices_and_lens: semantics must be a str, got int"):
        fn(**args, semantics=1)


ERROR_TESTS = [test_global_topk_unknown_semantics, test_global_topk_semantics_must_be_a_str]

#: The operation takes semantics= (spec "Semantics profiles"; test_signatures.py).
TAKES_SEMANTICS = True

#: golden file -> runner; the runner's result keys (except error_count) are golden tensor names.
GOLDEN = {"global_topk.safetensors": run_golden}


def problem(rng, pr, shared):
    """Adds this operation's random inputs to pr (its block_table is the gather's)."""
    T, R, topk = shared["T"], shared["R"], 37
    topk_idx = rng.integers(-1, 300, size=(T, topk + 5), dtype=np.int32)
    t2r = rng.integers(0, R, size=T, dtype=np.int32)
    if shared["bad_values"]:
        t2r[9] = R + 1
    valid = rng.random(T) < 0.9
    pr.update(topk_idx=topk_idx, topk=topk, t2r=t2r, valid=valid)


def preallocated(pr):
    """Output buffers the call writes into (none: it returns new ones)."""
    return {}


def sample(t, pr):
    """(args, kwargs) of torch.ops.dsv4kv's schema on the converted arrays t (test_torch_ops.py)."""
    return (t["topk_idx"][:, :pr["topk"]], t["t2r"], t["block_table"], pr["B"], t["valid"]), {}


def small_problem(ctx):
    """bench/host_cost.py's problem, small enough that the host and not the GPU sets the time:
    (args, kwargs) as the public function takes them, torch tensors from ctx (host_cost.py's)."""
    torch, dev, T, rnd = ctx["torch"], ctx["device"], ctx["T"], ctx["rnd"]
    return (rnd(-1, 1000, (T, ctx["topk"])), torch.zeros(T, dtype=torch.int32, device=dev), rnd(0, ctx["nb"], (1, 16)),
            ctx["B"], torch.ones(T, dtype=torch.bool, device=dev)), {}


def run(t, pr, ec, **kw):
    """The call on the converted arrays t (pr's and preallocated()'s); returns its outputs."""
    g, gl = dsv4kv.compute_global_topk_indices_and_lens(t["topk_idx"][:, :pr["topk"]], t["t2r"], t["block_table"],
                                                        pr["B"], t["valid"], error_count=ec, **kw)
    # out= variant: caller-provided outputs, written in place (not counted: ec holds one call's count)
    o = (g * 0 + 9, gl * 0 + 9)  # new arrays of the adapter's kind (NumPy or torch), any device
    dsv4kv.compute_global_topk_indices_and_lens(t["topk_idx"][:, :pr["topk"]], t["t2r"], t["block_table"], pr["B"],
                                                t["valid"], out=o, **kw)
    return {"g": g, "gl": gl, "g_out": o[0], "gl_out": o[1]}


# ---------------------------------------------------------------------------
# torch.ops routing (adopted by test_torch_ops.py, which skips without torch)
# ---------------------------------------------------------------------------
def test_torch_route_uses_the_registered_operator():
    """dsv4kv.* sends torch tensors through torch.ops.dsv4kv: a dispatch mode (what FakeTensor,
    torch.compile's tracing and profilers use) sees the operator, with and without out=; the
    eager shortcut (no mode active: the same kernel without the dispatcher hop) gives the
    same results."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    args = (i32([[0, 70, -1]]), i32([0]), i32([[3, 5]]), 64, torch.ones(1, dtype=torch.bool))
    with Log() as log:
        g, lens = dsv4kv.compute_global_topk_indices_and_lens(*args)
        o = (torch.empty(1, 3, dtype=torch.int32), torch.empty(1, dtype=torch.int32))
        dsv4kv.compute_global_topk_indices_and_lens(*args, out=o)
    assert [op for op in log.ops if op.startswith("dsv4kv.")] == [
        "dsv4kv.compute_global_topk_indices_and_lens.default", "dsv4kv.compute_global_topk_indices_and_lens.out"]
    assert g.tolist() == [[192, 326, -1]] and lens.tolist() == [2]
    assert o[0].tolist() == g.tolist() and o[1].tolist() == lens.tolist()
    g2, lens2 = dsv4kv.compute_global_topk_indices_and_lens(*args)  # eager shortcut
    assert torch.equal(g, g2) and torch.equal(lens, lens2)


TORCH_TESTS = [test_torch_route_uses_the_registered_operator]
