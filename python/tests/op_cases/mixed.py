"""build_flashinfer_mixed_sparse_indices: its samples and builders for the generic tests."""

import inspect

import numpy as np

import dsv4kv

L = dsv4kv.layout

NAME = "build_flashinfer_mixed_sparse_indices"
_E = inspect.Parameter.empty

#: Transcribed from the seed (vllm/models/deepseek_v4/common/ops/cache_utils.py): (name, default).
SIGNATURE = [
    ("decode_swa_indices", _E), ("decode_compressed_indices", _E), ("decode_compressed_topk_lens", _E),
    ("prefill_topk_indices", _E), ("query_start_loc", _E), ("seq_lens", _E), ("token_to_req_indices", _E),
    ("swa_block_table", _E), ("swa_block_size", _E), ("compressed_block_table", _E), ("compressed_block_size", _E),
    ("window_size", _E), ("compress_ratio", _E), ("topk", _E), ("decode_compressed_indices_are_local", False),
    ("decode_is_valid_token", None), ("swa_block_span", None), ("compressed_block_span", None),
    ("prefill_left_visible", None), ("prefill_right_visible", None), ("max_image_tokens", 0)]

#: The operation takes semantics= (spec "Semantics profiles"; test_signatures.py).
TAKES_SEMANTICS = True

#: The required array arguments: None for any of them is a contract error.
REQUIRED = ["decode_swa_indices", "prefill_topk_indices", "query_start_loc", "seq_lens", "token_to_req_indices",
            "swa_block_table"]

#: Its part of test_signatures.py's script as a vLLM user writes it (the parts run in table order
#: and may use the variables of earlier parts and `dev`).
VLLM_SCRIPT = '''\
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
'''



def valid_call(xp):
    """(function, argument dict) of a valid call; REQUIRED names entries of the dict."""
    i32 = lambda v: xp.from_np(np.array(v, np.int32))  # noqa: E731
    return dsv4kv.build_flashinfer_mixed_sparse_indices, dict(
        decode_swa_indices=i32(np.zeros((1, 8))), decode_compressed_indices=i32(np.zeros((1, 4))),
        decode_compressed_topk_lens=None, prefill_topk_indices=i32(np.zeros((0, 4))), query_start_loc=i32([0, 1]),
        seq_lens=i32([5]), token_to_req_indices=i32([0]), swa_block_table=i32([[0]]), swa_block_size=64,
        compressed_block_table=None, compressed_block_size=64, window_size=8, compress_ratio=4, topk=4)


def run_golden(xp, c):
    p = c.p
    opt = lambda flag, name: xp.from_np(c.get(name)) if p[flag] else None  # noqa: E731
    prefill = xp.from_np(c.get("prefill_topk_indices"))
    ec = xp.from_np(np.zeros(1, np.int32))
    idx, lens = dsv4kv.build_flashinfer_mixed_sparse_indices(
        xp.from_np(c.get("decode_swa_indices")),
        opt("has_decode_compressed", "decode_compressed_indices"),
        opt("has_decode_compressed_lens", "decode_compressed_topk_lens"),
        prefill[:, :p["prefill_topk_cols"]],
        xp.from_np(c.get("query_start_loc")),
        xp.from_np(c.get("seq_lens")),
        xp.from_np(c.get("token_to_req")),
        xp.from_np(c.get("swa_block_table")),
        p["swa_block_size"],
        opt("has_compressed_block_table", "compressed_block_table"),
        p["compressed_block_size"],
        p["window_size"],
        p["compress_ratio"],
        p["topk"],
        decode_compressed_indices_are_local=bool(p["decode_compressed_indices_are_local"]),
        decode_is_valid_token=opt("decode_compressed_indices_are_local", "decode_is_valid_token"),
        swa_block_span=p["swa_block_span"] if p["has_swa_block_span"] else None,
        compressed_block_span=p["compressed_block_span"] if p["has_compressed_block_span"] else None,
        prefill_left_visible=opt("has_image", "prefill_left_visible"),
        prefill_right_visible=opt("has_image", "prefill_right_visible"),
        max_image_tokens=p["max_image_tokens"],
        error_count=ec,
    )
    xp.synchronize()
    return {"sparse_indices": xp.to_np(idx), "sparse_topk_lens": xp.to_np(lens), "error_count": int(xp.to_np(ec)[0])}


#: golden file -> runner; the runner's result keys (except error_count) are golden tensor names.
GOLDEN = {f: run_golden for f in ("flashinfer.safetensors", "flashinfer_crafted.safetensors")}

#: Image visibility in the golden cases (test_golden.py): the arrays' name prefix and their rows.
VISIBILITY = ("prefill_", lambda c: c.p["num_decode_tokens"] + c.p["num_prefill_tokens"])


def problem(rng, pr, shared):
    """Adds this operation's random inputs to pr."""
    D, P = 6, 40
    m_qsl = np.concatenate([np.arange(D + 1), D + np.array([15, 40])]).astype(np.int32)
    m_seq = np.concatenate([rng.integers(10, 300, size=D), [100, 70]]).astype(np.int32)
    m_t2r = np.concatenate([np.arange(D), np.full(15, D), np.full(25, D + 1)]).astype(np.int32)
    m_bt = rng.integers(0, 50, size=(D + 2, 8), dtype=np.int32)
    dswa = rng.integers(-1, 3000, size=(D, 130), dtype=np.int32)
    dcomp = rng.integers(-1, 200, size=(D, 20), dtype=np.int32)
    dlens = rng.integers(0, 21, size=D, dtype=np.int32)
    dvalid = rng.random(D) < 0.8
    ptopk = rng.integers(-1, 25, size=(P, 24), dtype=np.int32)
    plv = rng.integers(0, 10, size=D + P, dtype=np.int32)
    prv = rng.integers(0, 5, size=D + P, dtype=np.int32)
    pr.update(m_qsl=m_qsl, m_seq=m_seq, m_t2r=m_t2r, m_bt=m_bt, dswa=dswa, dcomp=dcomp, dlens=dlens, dvalid=dvalid,
              ptopk=ptopk, plv=plv, prv=prv)


def preallocated(pr):
    """Output buffers the call writes into (none: it returns new ones)."""
    return {}


def sample(t, pr):
    """(args, kwargs) of torch.ops.dsv4kv's schema on the converted arrays t (test_torch_ops.py)."""
    return (t["dswa"], t["dcomp"], t["dlens"], t["ptopk"], t["m_qsl"], t["m_seq"], t["m_t2r"], t["m_bt"], 16, None, 8,
            128, 4, 22, True, t["dvalid"], 24, None, t["plv"], t["prv"], 9), {}


def small_problem(ctx):
    """bench/host_cost.py's problem, small enough that the host and not the GPU sets the time:
    (args, kwargs) as the public function takes them, torch tensors from ctx (host_cost.py's)."""
    torch, dev, T, rnd, B, nb = ctx["torch"], ctx["device"], ctx["T"], ctx["rnd"], ctx["B"], ctx["nb"]
    D, P, window, topk = T // 2, T // 2, ctx["window"], ctx["topk"]
    i32 = lambda t: t.to(torch.int32).to(dev)  # noqa: E731
    return (rnd(-1, nb * B, (D, window)), None, None, rnd(-1, 200, (P, topk)),
            i32(torch.cat([torch.arange(D + 1), torch.tensor([D + P])])),
            i32(torch.cat([torch.full((D,), 200), torch.tensor([300])])),
            i32(torch.cat([torch.arange(D), torch.full((P,), D)])), rnd(0, nb, (D + 1, 8)), B, None, B, window, 4,
            topk), {}


def run(t, pr, ec, **kw):
    """The call on the converted arrays t (pr's and preallocated()'s); returns its outputs."""
    si, sl = dsv4kv.build_flashinfer_mixed_sparse_indices(
        t["dswa"], t["dcomp"], t["dlens"], t["ptopk"], t["m_qsl"], t["m_seq"], t["m_t2r"], t["m_bt"], 16, None, 8,
        128, 4, 22, decode_compressed_indices_are_local=True, decode_is_valid_token=t["dvalid"], swa_block_span=24,
        compressed_block_span=None, prefill_left_visible=t["plv"], prefill_right_visible=t["prv"],
        max_image_tokens=9, error_count=ec, **kw)
    return {"si": si, "sl": sl}
