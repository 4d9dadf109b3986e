"""dequantize_and_gather_k_cache_sparse: its samples, builders and operation-specific tests.

A slot list is a dense gather of single-token requests (slot s: seq_len s % B + 1, gather_len 1,
block-table row [s // B]), byte for byte, on NumPy, torch CPU and, when available, torch CUDA;
rows of -1 and of out-of-range slots keep their contents and only the latter are counted; int32
and int64 slot ids give the same bytes."""

import inspect

import numpy as np
import pytest

import dsv4kv

NAME = "dequantize_and_gather_k_cache_sparse"
L = dsv4kv.layout
_E = inspect.Parameter.empty

#: Transcribed from vLLM PR #42504: (name, default) of the positional parameters ...
SIGNATURE = [("out", _E), ("k_cache", _E), ("slot_indices", _E), ("block_size", _E)]
#: ... and of its keyword-only ones.
KEYWORD_ONLY = [("use_fnuz", False)]

#: The required array arguments: None for any of them is a contract error.
#: The operation takes record= (spec "Cache records"; test_signatures.py).
TAKES_RECORD = True

REQUIRED = ["out", "k_cache", "slot_indices"]

#: Its part of test_signatures.py's script (after the dense gather's: the same tokens by slot).
VLLM_SCRIPT = '''\
rows = torch.full((5, 512), 7, dtype=torch.bfloat16, device=dev)
slots = torch.tensor([block_size + 2, -1, block_size, block_size + 9], dtype=torch.int64, device=dev)
dequantize_and_gather_k_cache_sparse(rows, k_cache, slots, block_size)
assert torch.equal(rows[[0, 2, 3]], out[0, [2, 0, 9]])
assert (rows[[1, 4]].float() == 7).all()
'''


def valid_call(xp):
    """(function, argument dict) of a valid call; REQUIRED names entries of the dict."""
    from _support import BF16

    return dsv4kv.dequantize_and_gather_k_cache_sparse, dict(
        out=xp.from_np(np.zeros((2, L.kHeadDim), BF16)),
        k_cache=xp.from_np(np.zeros((1, L.vllm_block_stride(64)), np.uint8)),
        slot_indices=xp.from_np(np.array([0, 5], np.int32)), block_size=64)


#: Its golden file (conformance/golden/sparse_gather.safetensors) is in the field layout, which
#: test_golden.py replays for every operation without a per-operation runner.
GOLDEN = {}


def problem(rng, pr, shared):
    """Adds this operation's slots to pr, drawing nothing from rng (the other operations' draws
    stay as they were): valid slots, -1 padding and (when bad_values) out-of-range slots."""
    cap = shared["nb"] * pr["B"]
    slots = [3, -1, pr["B"] + 1, 0, cap - 1, -1, 2 * pr["B"] + 5]
    if shared["bad_values"]:
        slots += [cap, -5, (1 << 31) - 1]
    pr.update(sparse_slots=np.array(slots, np.int32))


def preallocated(pr):
    """Output buffers the call writes into, as NumPy arrays: rows of 7 (two past the slots)."""
    from _support import BF16

    return {"sparse_out": np.full((len(pr["sparse_slots"]) + 2, L.kHeadDim), 7, np.uint16).view(BF16)}


def sample(t, pr):
    """(args, kwargs) of torch.ops.dsv4kv's schema on the converted arrays t (test_torch_ops.py)."""
    return (t["sparse_out"], t["cache"], t["sparse_slots"], pr["B"]), {}


#: bench/host_cost.py's Triton comparison point: the oracle has no sparse gather, so the one-program-
#: per-row kernel of bench/triton_bench.py (the bench's comparison point too), taking the layout dict.
TRITON_BENCH_NAME = "dequantize_and_gather_k_cache_sparse_triton"


def small_problem(ctx):
    """bench/host_cost.py's problem, small enough that the host and not the GPU sets the time:
    (args, kwargs) as the public function takes them, torch tensors from ctx (host_cost.py's)."""
    torch, B = ctx["torch"], ctx["B"]
    return (torch.empty(128, L.kHeadDim, dtype=torch.bfloat16, device=ctx["device"]), ctx["cache"],
            ctx["rnd"](0, ctx["nb"] * B, (128,)), B), {}


def run(t, pr, ec, **kw):
    """The call on the converted arrays t (pr's and preallocated()'s); returns its outputs."""
    args, kwargs = sample(t, pr)
    dsv4kv.dequantize_and_gather_k_cache_sparse(*args, **kwargs, error_count=ec, **kw)
    return {"sparse_out": t["sparse_out"]}


# ---------------------------------------------------------------------------
# Properties (adopted by test_properties.py)
# ---------------------------------------------------------------------------
FRAMEWORKS = ["numpy", "torch-cpu", "torch-cuda"]


def make_xp(framework):
    """The adapter, or a skip with the reason (torch missing; no usable CUDA, unless
    DSV4KV_REQUIRE_CUDA=1 turns that into a failure). Imported lazily: _support imports op_cases."""
    from _support import cuda_skip_reason, frameworks_available, make_xp as make, require_cuda

    if framework == "torch-cuda":
        reason = cuda_skip_reason()
        if reason is not None and not require_cuda():
            pytest.skip(f"GPU run: {reason}")
    elif framework not in frameworks_available():
        pytest.skip("torch is not installed")
    return make(framework)


def sparse_problem(seed, block_size=16, num_blocks=5, n=40):
    """A cache of random bytes and `n` slots: mostly valid, some -1, some out of range."""
    rng = np.random.default_rng(seed)
    stride = L.vllm_block_stride(block_size)
    cache = rng.integers(0, 256, size=(num_blocks, stride), dtype=np.uint8)
    cap = num_blocks * block_size
    slots = rng.integers(0, cap, size=n).astype(np.int64)
    slots[rng.random(n) < 0.15] = -1
    bad = rng.random(n) < 0.15
    slots[bad] = rng.choice(np.array([cap, cap + 7, -2, -(1 << 20), (1 << 31) - 1], dtype=np.int64), size=int(bad.sum()))
    return cache, slots, block_size


def run_sparse(xp, cache, slots, bs, dtype, fnuz=False, extra_rows=2):
    from _support import BF16, bits

    n = len(slots)
    out0 = np.full((n + extra_rows, L.kHeadDim), 7, dtype=np.uint16).view(BF16)
    out, ec = xp.from_np(out0), xp.from_np(np.zeros(1, np.int32))
    dsv4kv.dequantize_and_gather_k_cache_sparse(out, xp.from_np(cache), xp.from_np(slots.astype(dtype)), bs,
                                                use_fnuz=fnuz, error_count=ec)
    xp.synchronize()
    return bits(xp.to_np(out)), int(xp.to_np(ec)[0])


def run_dense_equivalent(xp, cache, slots, bs, fnuz=False, extra_rows=2):
    """The dense gather of the single-token requests equivalent to `slots`, into [n, 1, 512] rows
    of the same buffer shape (rows >= n untouched)."""
    from _support import BF16, bits

    n = len(slots)
    seq, gat, table = np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros((max(n, 1), 1), np.int32)
    for i, s in enumerate(slots):
        if s == -1:
            continue  # length 0: nothing gathered, nothing counted
        if s < 0:
            seq[i] = -1  # malformed request: one report
            continue
        seq[i], gat[i] = s % bs + 1, 1
        table[i, 0] = min(s // bs, np.iinfo(np.int32).max)
    buf = np.full((n + extra_rows, L.kHeadDim), 7, dtype=np.uint16).view(BF16)
    out = xp.from_np(buf)
    ec = xp.from_np(np.zeros(1, np.int32))
    view = xp.strided(out, (n, 1, L.kHeadDim), (L.kHeadDim, L.kHeadDim, 1))
    dsv4kv.dequantize_and_gather_k_cache(view, xp.from_np(cache), xp.from_np(seq), xp.from_np(gat),
                                         xp.from_np(table[:n] if n else table[:0]), bs, 0, use_fnuz=fnuz,
                                         error_count=ec)
    xp.synchronize()
    return bits(xp.to_np(out)), int(xp.to_np(ec)[0])


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("fnuz", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sparse_equals_the_dense_gather_of_single_token_requests(framework, fnuz, seed):
    xp = make_xp(framework)
    cache, slots, bs = sparse_problem(seed)
    got, count = run_sparse(xp, cache, slots, bs, np.int32, fnuz)
    want, want_count = run_dense_equivalent(xp, cache, slots, bs, fnuz)
    np.testing.assert_array_equal(got, want)
    assert count == want_count
    cap = cache.shape[0] * bs
    assert count == int(((slots != -1) & ((slots < 0) | (slots >= cap))).sum()) > 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_sparse_skipped_rows_and_rows_past_n_are_untouched(framework):
    xp = make_xp(framework)
    cache, slots, bs = sparse_problem(7)
    got, _ = run_sparse(xp, cache, slots, bs, np.int64)
    cap = cache.shape[0] * bs
    skipped = (slots < 0) | (slots >= cap)
    assert skipped.any() and (slots == -1).any()
    assert (got[:len(slots)][skipped] == 7).all()
    assert (got[len(slots):] == 7).all()
    # a read row holds the token's RoPE bits, copied from the cache
    i = int(np.flatnonzero(~skipped)[0])
    blk, pos = divmod(int(slots[i]), bs)
    rope = cache[blk, L.rope_offset(pos):L.rope_offset(pos) + 2 * (L.kHeadDim - L.kNopeDim)].view(np.uint16)
    np.testing.assert_array_equal(got[i, L.kNopeDim:], rope)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_sparse_int32_and_int64_slot_ids_agree(framework):
    xp = make_xp(framework)
    cache, slots, bs = sparse_problem(11)
    a, ca = run_sparse(xp, cache, slots, bs, np.int32)
    b, cb = run_sparse(xp, cache, slots, bs, np.int64)
    np.testing.assert_array_equal(a, b)
    assert ca == cb


PROPERTY_TESTS = [test_sparse_equals_the_dense_gather_of_single_token_requests,
                  test_sparse_skipped_rows_and_rows_past_n_are_untouched, test_sparse_int32_and_int64_slot_ids_agree]


# ---------------------------------------------------------------------------
# Contract errors (adopted by test_errors.py, which gives the `xp` fixture)
# ---------------------------------------------------------------------------
def test_sparse_bad_slot_dtype_is_a_contract_error(xp):
    from _support import BF16

    cache, slots, bs = sparse_problem(1)
    out = xp.from_np(np.zeros((len(slots), L.kHeadDim), dtype=BF16))
    with pytest.raises(TypeError, match="dequantize_and_gather_k_cache_sparse: slot_indices must be int32 or int64"):
        dsv4kv.dequantize_and_gather_k_cache_sparse(out, xp.from_np(cache), xp.from_np(slots.astype(np.uint8)), bs)


ERROR_TESTS = [test_sparse_bad_slot_dtype_is_a_contract_error]
