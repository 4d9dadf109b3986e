"""compute_global_topk_indices_and_lens: its samples and builders for the generic tests."""

import inspect

import numpy as np

import dsv4kv

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


def run(t, pr, ec, **kw):
    """The call on the converted arrays t (pr's and preallocated()'s); returns its outputs."""
    g, gl = dsv4kv.compute_global_topk_indices_and_lens(t["topk_idx"][:, :pr["topk"]], t["t2r"], t["block_table"],
                                                        pr["B"], t["valid"], error_count=ec, **kw)
    return {"g": g, "gl": gl}
