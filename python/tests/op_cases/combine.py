"""combine_topk_swa_indices: its samples, builders and operation-specific tests."""

import inspect

import numpy as np
import pytest

import dsv4kv

L = dsv4kv.layout

NAME = "combine_topk_swa_indices"
_E = inspect.Parameter.empty


#: Transcribed from the seed (vllm/models/deepseek_v4/common/ops/cache_utils.py): (name, default).
SIGNATURE = [("topk_indices", _E), ("query_start_loc", _E), ("seq_lens", _E), ("gather_lens", _E),
             ("window_size", _E), ("compress_ratio", _E), ("topk", _E), ("M", _E), ("N", _E), ("out", None),
             ("left_visible", None), ("right_visible", None), ("max_image_tokens", 0)]

#: The required array arguments: None for any of them is a contract error.
REQUIRED = ["topk_indices", "query_start_loc", "seq_lens", "gather_lens"]

#: Its part of test_signatures.py's script as a vLLM user writes it (the parts run in table order
#: and may use the variables of earlier parts and `dev`).
VLLM_SCRIPT = '''\
qsl = torch.tensor([0, 10], dtype=torch.int32, device=dev)
ci, cl = combine_topk_swa_indices(topk_indices, qsl, seq_lens, seq_lens, 8, 4, 4, 1024, 512)
assert ci.shape == (10, 128) and ci.dtype == torch.int32 and cl[9].item() == 2 + 8
ci2, cl2 = combine_topk_swa_indices(topk_indices, qsl, seq_lens, seq_lens, 8, 4, 4, 1024, 512, (ci, cl))
assert ci2 is ci
'''



def inputs(xp):
    """The four index arrays of a valid 3-token, 1-request problem."""
    i32 = lambda v: xp.from_np(np.array(v, np.int32))  # noqa: E731
    return i32(np.zeros((3, 4))), i32([0, 3]), i32([3]), i32([3])


def valid_call(xp):
    """(function, argument dict) of a valid call; REQUIRED names entries of the dict."""
    return dsv4kv.combine_topk_swa_indices, dict(zip(REQUIRED, inputs(xp)), window_size=8, compress_ratio=1, topk=4,
                                                 M=16, N=8)


def run_golden(xp, c):
    p = c.p
    full = xp.from_np(c.get("topk_indices"))
    img = bool(p["has_image"])
    ec = xp.from_np(np.zeros(1, np.int32))
    idx, lens = dsv4kv.combine_topk_swa_indices(
        full[:, :p["topk_width"]], xp.from_np(c.get("query_start_loc")), xp.from_np(c.get("seq_lens")),
        xp.from_np(c.get("gather_lens")), p["window_size"], p["compress_ratio"], p["topk"], p["M"], p["N"],
        left_visible=xp.from_np(c.get("left_visible")) if img else None,
        right_visible=xp.from_np(c.get("right_visible")) if img else None,
        max_image_tokens=p["max_image_tokens"], error_count=ec)
    xp.synchronize()
    return {"expected_combined_indices": xp.to_np(idx), "expected_combined_lens": xp.to_np(lens),
            "error_count": int(xp.to_np(ec)[0])}


#: golden file -> runner; the runner's result keys (except error_count) are golden tensor names.
GOLDEN = {f: run_golden for f in ("combine.safetensors", "combine_crafted.safetensors", "combine_edge.safetensors")}

#: Image visibility in the golden cases (test_golden.py): the arrays' name prefix and their rows.
VISIBILITY = ("", lambda c: c.get("topk_indices").shape[0])



def problem(rng, pr, shared):
    """Adds this operation's random inputs to pr (its topk_idx is the global top-k's)."""
    T = shared["T"]
    qsl = np.array([5, 5 + 40, 5 + 70, 5 + 150], np.int32)
    c_seq = np.array([300, 30, 90], np.int32)
    c_gather = np.array([200, 30, 90], np.int32)
    lv = rng.integers(0, 12, size=T, dtype=np.int32)
    rv = rng.integers(0, 6, size=T, dtype=np.int32)
    pr.update(qsl=qsl, c_seq=c_seq, c_gather=c_gather, lv=lv, rv=rv)


def preallocated(pr):
    """Output buffers the call writes into (none: it returns new ones)."""
    return {}


def sample(t, pr):
    """(args, kwargs) of torch.ops.dsv4kv's schema on the converted arrays t (test_torch_ops.py)."""
    return (t["topk_idx"], t["qsl"], t["c_seq"], t["c_gather"], 16, 4, 32, 4096, 1000, t["lv"], t["rv"], 10), {}


def small_problem(ctx):
    """bench/host_cost.py's problem, small enough that the host and not the GPU sets the time:
    (args, kwargs) as the public function takes them, torch tensors from ctx (host_cost.py's)."""
    torch, dev, T, topk = ctx["torch"], ctx["device"], ctx["T"], ctx["topk"]
    i32 = lambda v: torch.tensor(v, dtype=torch.int32, device=dev)  # noqa: E731
    return (ctx["rnd"](-1, 250, (T, topk)), i32([0, T]), i32([1000]), i32([1000]), ctx["window"], 4, topk, 4096,
            2048), {}


def run(t, pr, ec, **kw):
    """The call on the converted arrays t (pr's and preallocated()'s); returns its outputs."""
    ci, cl = dsv4kv.combine_topk_swa_indices(t["topk_idx"], t["qsl"], t["c_seq"], t["c_gather"], 16, 4, 32, 4096,
                                             1000, left_visible=t["lv"], right_visible=t["rv"], max_image_tokens=10,
                                             error_count=ec, **kw)
    return {"ci": ci, "cl": cl}


# ---------------------------------------------------------------------------
# Contract errors (adopted by test_errors.py, which gives the `xp` fixture)
# ---------------------------------------------------------------------------
def _raises(exc, message):
    import re

    return pytest.raises(exc, match="^" + re.escape(message) + "$")


def test_combine_visibility_pairs(xp):
    topk, qsl, seq, gather = inputs(xp)
    with _raises(ValueError, "combine_topk_swa_indices: left_visible and right_visible must be given together"):
        dsv4kv.combine_topk_swa_indices(topk, qsl, seq, gather, 8, 1, 4, 16, 8,
                                        left_visible=xp.from_np(np.zeros(3, np.int32)))


def test_combine_out_width(xp):
    topk, qsl, seq, gather = inputs(xp)
    out = (xp.from_np(np.zeros((3, 128), np.int32)), xp.from_np(np.zeros(3, np.int32)))
    with _raises(ValueError, "combine_topk_swa_indices: combined_indices must have round_up(topk + window_size + "
                             "max_image_tokens, 128) = 256 columns, got 128"):
        dsv4kv.combine_topk_swa_indices(topk, qsl, seq, gather, 125, 1, 4, 16, 8, out)


def test_combine_negative_scalar(xp):
    topk, qsl, seq, gather = inputs(xp)
    with _raises(ValueError, "combine_topk_swa_indices: window_size must be >= 1, got 0"):
        dsv4kv.combine_topk_swa_indices(topk, qsl, seq, gather, 0, 1, 4, 16, 8)


def test_combine_v41_refuses_image_windows(xp):
    topk, qsl, seq, gather = inputs(xp)
    with _raises(ValueError, "combine_topk_swa_indices: max_image_tokens must be 0 with semantics vllm_v41 (that "
                             "model has no image windows), got 6"):
        dsv4kv.combine_topk_swa_indices(topk, qsl, seq, gather, 8, 1, 4, 16, 8, max_image_tokens=6,
                                        semantics="vllm_v41")
    vis = xp.from_np(np.zeros(3, np.int32))
    with _raises(ValueError, "combine_topk_swa_indices: left_visible and right_visible must be None with semantics "
                             "vllm_v41 (that model has no image windows)"):
        dsv4kv.combine_topk_swa_indices(topk, qsl, seq, gather, 8, 1, 4, 16, 8, left_visible=vis, right_visible=vis,
                                        semantics="vllm_v41")


def test_combine_compress_ratio_zero_only_with_v41(xp):
    i32 = lambda v: xp.from_np(np.asarray(v, np.int32))  # noqa: E731
    args = (xp.from_np(np.zeros((1, 0), np.int32)), i32([0, 1]), i32([3]), i32([3]), 4, 0, 0, 10, 0)
    with _raises(ValueError, "combine_topk_swa_indices: compress_ratio must be >= 1, got 0"):
        dsv4kv.combine_topk_swa_indices(*args, semantics="vllm_v4")
    idx, lens = dsv4kv.combine_topk_swa_indices(*args, semantics="vllm_v41")
    assert xp.to_np(lens).tolist() == [3]  # the window only: positions 0 .. 2
    assert xp.to_np(idx)[0, :4].tolist() == [0, 1, 2, -1]


ERROR_TESTS = [test_combine_visibility_pairs, test_combine_out_width, test_combine_negative_scalar,
               test_combine_v41_refuses_image_windows, test_combine_compress_ratio_zero_only_with_v41]

#: The operation takes semantics= (spec "Semantics profiles"; test_signatures.py).
TAKES_SEMANTICS = True

#: Contract errors checked in a child process (test_contract_errors_isolated.py): (label, call
#: given the child's array converter, exception type name, whole message).
ISOLATED_ERRORS = [
    ("combine out width",
     lambda conv: dsv4kv.combine_topk_swa_indices(*inputs(conv), 125, 1, 4, 16, 8,
                                                  (conv.from_np(np.zeros((3, 128), np.int32)),
                                                   conv.from_np(np.zeros(3, np.int32)))),
     "ValueError", "combine_topk_swa_indices: combined_indices must have round_up(topk + window_size + "
                   "max_image_tokens, 128) = 256 columns, got 128"),
    ("combine window 0", lambda conv: dsv4kv.combine_topk_swa_indices(*inputs(conv), 0, 1, 4, 16, 8),
     "ValueError", "combine_topk_swa_indices: window_size must be >= 1, got 0"),
]


# ---------------------------------------------------------------------------
# Triton oracle (adopted by test_oracle.py, which skips them without the oracle)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed,window,cr,topk,max_img,image",
                         [(1, 128, 4, 512, 0, False), (2, 128, 128, 1024, 0, False), (3, 8, 4, 16, 6, True),
                          (4, 64, 1, 0, 32, True), (5, 128, 4, 256, 200, True)])
def test_combine(seed, window, cr, topk, max_img, image):
    from test_oracle import K, XP, image_visibility, same

    rng = np.random.default_rng(seed)
    R = 4
    query = rng.integers(1, 60, size=R)
    seq = query + rng.integers(0, 400, size=R)
    # Gather enough rows for the window (vLLM's precondition for its unclamped formula).
    gather = np.minimum(seq, query + window - 1 + max_img + rng.integers(0, 20, size=R))
    base = int(rng.integers(0, 50))
    qsl = (base + np.concatenate([[0], np.cumsum(query)])).astype(np.int32)
    T = int(query.sum())
    N = 5000
    width = max(topk, 1) + 7
    idx = rng.integers(0, N, size=(T, width), dtype=np.int32)
    M = N + int(gather.max())
    lv, rv = image_visibility(rng, seq, query, max(max_img, 1)) if image else (None, None)
    args = [XP.from_np(idx)[:, :width], XP.from_np(qsl), XP.from_np(seq.astype(np.int32)),
            XP.from_np(gather.astype(np.int32)), window, cr, topk, M, N]
    vis = dict(left_visible=XP.from_np(lv), right_visible=XP.from_np(rv), max_image_tokens=max_img)
    i1, l1 = dsv4kv.combine_topk_swa_indices(*args, **vis)
    i2, l2 = K.combine_topk_swa_indices_fork(*args, **vis)
    same(i1, i2, "combined_indices vs fork")
    same(l1, l2, "combined_lens vs fork")
    i3, l3 = K.combine_topk_swa_indices(*args, **vis)  # vLLM's variant agrees on well-formed input
    same(i1, i3, "combined_indices vs vLLM")
    same(l1, l3, "combined_lens vs vLLM")


@pytest.mark.parametrize("seed,cr,topk,image,max_img", [(1, 1, 0, True, 6), (2, 4, 16, True, 6), (3, 4, 16, False, 6),
                                                      (4, 4, 16, True, 0), (5, 128, 64, True, 0)])
def test_combine_vllm_test_draws(seed, cr, topk, image, max_img):
    """vLLM's tests/v1/attention/test_deepseek_v4_swa_visible.py draws top-k values from [0, 4096)
    with N = 8: every non-negative value passes through as value + M*b (here compared with vLLM's
    own kernel), and visibility arrays passed with max_image_tokens == 0 are not read."""
    from test_oracle import K, XP, image_visibility, same

    rng = np.random.default_rng(seed)
    window, N = 8, 8
    seq = np.array([30, 12], np.int64)
    query = seq.copy()
    qsl = np.concatenate([[0], np.cumsum(query)]).astype(np.int32)
    T = int(query.sum())
    idx = rng.integers(0, 4096, size=(T, max(topk, 1)), dtype=np.int32)
    M = N + int(seq.max())
    if image:
        lv, rv = image_visibility(rng, seq, query, max(max_img, 1))
        if max_img == 0:  # arbitrary values that must not be read
            lv = rng.integers(-3, 40, size=T, dtype=np.int32)
            rv = rng.integers(-3, 40, size=T, dtype=np.int32)
    args = [XP.from_np(idx), XP.from_np(qsl), XP.from_np(seq.astype(np.int32)), XP.from_np(seq.astype(np.int32)),
            window, cr, topk, M, N]
    vis = dict(left_visible=XP.from_np(lv) if image else None, right_visible=XP.from_np(rv) if image else None,
               max_image_tokens=max_img)
    i1, l1 = dsv4kv.combine_topk_swa_indices(*args, **vis)
    i3, l3 = K.combine_topk_swa_indices(*args, **vis)
    same(i1, i3, "combined_indices vs vLLM")
    same(l1, l3, "combined_lens vs vLLM")


ORACLE_TESTS = [test_combine, test_combine_vllm_test_draws]
