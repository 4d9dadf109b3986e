"""torch.ops.dsv4kv: every operation of the table registered with torch.library, checked by
torch.library.opcheck, traced by torch.compile(fullgraph=True) with the same bytes as eager,
captured in CUDA graphs (mode="reduce-overhead"), and run on the tensors' own device."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import dsv4kv  # noqa: E402
from dsv4kv import _ext  # noqa: E402
from _support import (  # noqa: E402
    TorchXP, cuda_skip_reason, problem_arrays, random_problem, require_cuda, run_ops, skip_without_cuda)
from op_cases import OPS as CASES, adopt  # noqa: E402

if not dsv4kv.HAS_TORCH_OPS:
    pytest.skip("dsv4kv did not register its torch operators (DSV4KV_NO_TORCH is set)", allow_module_level=True)

L = dsv4kv.layout
OPS = sorted(_ext.ops)


def _torch_specs():
    from dsv4kv import _torch

    return _torch.SPECS


def devices():
    out = ["cpu"]
    reason = cuda_skip_reason()
    out.append(pytest.param("cuda", marks=pytest.mark.skipif(reason is not None and not require_cuda(),
                                                             reason=f"GPU run: {reason}")))
    return out


def problem(device, seed=3):
    """One random problem (tests/_support.random_problem): its arrays and output buffers as torch
    tensors on `device`, and its scalars."""
    pr = random_problem(seed)
    xp = TorchXP(device)
    t = {name: xp.from_np(v) for name, v in problem_arrays(pr).items()}
    return t, {name: v for name, v in pr.items() if not isinstance(v, np.ndarray)}


def samples(device):
    """{op: (args, kwargs)} for torch.ops.dsv4kv.<op>, from each op_cases module's sample():
    positional arguments as the schema orders them, error_count as keyword. Every operation of
    the table must have one."""
    t, scalars = problem(device)
    out = {}
    for m in CASES:
        args, kwargs = m.sample(t, scalars)
        out[m.NAME] = (args, dict(kwargs, error_count=torch.zeros(1, dtype=torch.int32, device=device)))
    return out


def test_every_operation_is_registered_with_a_sample():
    assert OPS, "the extension exports no operation table"
    missing = [op for op in OPS if not hasattr(torch.ops.dsv4kv, op)]
    assert not missing, f"not registered as torch.ops.dsv4kv: {missing}"
    assert sorted(samples("cpu")) == OPS, "add an opcheck sample (sample()) to each new op_cases module"


@pytest.mark.parametrize("op", OPS)
def test_schema_has_the_python_positional_arguments(op):
    """Same names and order as the public function (a positional out= pair excepted: it is the
    .out overload's keyword-only outputs), mutated tensors declared, error_count keyword."""
    import inspect

    schema = getattr(torch.ops.dsv4kv, op).default._schema
    roles = {name: role for name, role, _ in _ext.ops[op]}
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    params = [p.name for p in inspect.signature(getattr(dsv4kv, op)).parameters.values()
              if p.kind == p.POSITIONAL_OR_KEYWORD and (p.name in roles or p.name != "out")]
    assert positional == params
    written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    want = {n for n, r in roles.items() if r in ("out", "inout") and n in params} | {"error_count"}
    assert written == want


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", OPS)
def test_opcheck(op, device):
    args, kwargs = samples(device)[op]
    packet = getattr(torch.ops.dsv4kv, op)
    torch.library.opcheck(packet.default, args, kwargs)
    if "out" in packet.overloads():
        outs = packet.default(*args, **{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                        for k, v in kwargs.items()})
        # The .out overload's output arguments: its keyword-only mutable tensors, error_count aside.
        names = [a.name for a in packet.out._schema.arguments if a.kwarg_only and a.name != "error_count"
                 and a.alias_info is not None and a.alias_info.is_write]
        out_kwargs = dict(kwargs, **{n: torch.full_like(o, 5) for n, o in zip(names, outs)})
        torch.library.opcheck(packet.out, args, out_kwargs)


def _run_all(p, ec):
    """Every public function in table order (op_cases' run(), torch tensors in, torch tensors
    out), operation i counting into ec[i]; a fresh copy of the inputs and buffers each time."""
    t, scalars = p
    t = {name: v.clone() for name, v in t.items()}
    return tuple(run_ops(t, scalars, ec).values())


def _same_bytes(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, i
        # bytes, not values: bf16 outputs hold NaNs (dequantized NaN codes), and NaN != NaN
        assert torch.equal(x.cpu().contiguous().view(torch.uint8), y.cpu().contiguous().view(torch.uint8)), \
            f"output {i} differs"


@pytest.mark.parametrize("device", devices())
def test_compile_fullgraph_matches_eager(device):
    torch._dynamo.reset()
    p = problem(device)
    ec_eager = torch.zeros(len(CASES), dtype=torch.int32, device=device)
    eager = _run_all(p, ec_eager)
    assert int(ec_eager.sum()) > 0, "the problem has out-of-range values: the counters must move"
    ec_comp = torch.zeros(len(CASES), dtype=torch.int32, device=device)
    compiled = torch.compile(_run_all, fullgraph=True)(p, ec_comp)
    _same_bytes(eager, compiled)
    assert torch.equal(ec_eager, ec_comp)


def test_compile_reduce_overhead_cuda_graphs():
    skip_without_cuda()
    torch._dynamo.reset()
    p = problem("cuda")
    ec_eager = torch.zeros(len(CASES), dtype=torch.int32, device="cuda")
    eager = _run_all(p, ec_eager)
    fn = torch.compile(_run_all, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # warm-up, record, replay
        ec = torch.zeros(len(CASES), dtype=torch.int32, device="cuda")
        got = [t.clone() for t in fn(p, ec)]
    _same_bytes(eager, got)
    assert torch.equal(ec_eager, ec)


def test_cuda_tensors_on_a_second_device_run_there():
    """Tensors on cuda:1 run on cuda:1, on that device's current stream, while cuda:0 is the
    current device; the results equal the CPU reference."""
    reason = cuda_skip_reason()
    if reason is None and torch.cuda.device_count() < 2:
        reason = f"needs 2 GPUs, found {torch.cuda.device_count()}"
    if reason is not None:
        pytest.skip(f"GPU run: {reason}")
    want = _run_all(problem("cpu"), torch.zeros(len(CASES), dtype=torch.int32))
    p = problem("cuda:1")
    torch.cuda.synchronize("cuda:1")
    side = torch.cuda.Stream(device="cuda:1")
    torch.cuda.set_stream(side)  # cuda:1's current stream (this also makes cuda:1 current) ...
    torch.cuda.set_device(0)  # ... and cuda:0 the current device again
    try:
        assert torch.cuda.current_device() == 0
        assert torch.cuda.current_stream("cuda:1") == side
        ec = torch.zeros(len(CASES), dtype=torch.int32, device="cuda:1")
        got = _run_all(p, ec)  # eager shortcut
        compiled = torch.compile(_run_all, fullgraph=True)(p, torch.zeros_like(ec))  # through the operators
        assert torch.cuda.current_device() == 0
    finally:
        torch.cuda.set_stream(torch.cuda.default_stream("cuda:1"))
        torch.cuda.set_device(0)
    side.synchronize()  # the work was queued on `side`: after this every result is final
    _same_bytes(want, got)
    _same_bytes(want, compiled)
    assert all(t.device == torch.device("cuda:1") for t in got)


def test_numpy_still_runs_through_dlpack():
    """NumPy arrays keep the direct path (no torch op) with the same results as torch CPU."""
    from _support import NumpyXP, TorchXP, assert_same, run_all

    pr = random_problem(5)
    assert_same(run_all(NumpyXP(), pr), run_all(TorchXP("cpu"), pr), "numpy vs torch.ops")


# ---------------------------------------------------------------------------
# The compiled eager fast path (dsv4kv._torch_ext, python/src/torch_ext.cpp)
# ---------------------------------------------------------------------------
def _fast():
    """dsv4kv._torch_ext as _torch.py uses it; skips where it is not built, except under
    scripts/test.sh (DSV4KV_EXPECT_TORCH_EXT=1), which builds it and requires it."""
    import os

    from dsv4kv import _torch

    if _torch._FAST is None:
        if os.environ.get("DSV4KV_EXPECT_TORCH_EXT") == "1":
            pytest.fail("DSV4KV_EXPECT_TORCH_EXT=1 but dsv4kv._torch_ext is not in use "
                        "(built without --no-build-isolation, or for another torch)")
        pytest.skip("dsv4kv._torch_ext is not built for this torch")
    return _torch._FAST


def _fields(op, values):
    """The fields of operation `op` in struct order (the fast entry's arguments) from `values`
    (by name; schema defaults for the rest, None for outputs to allocate)."""
    from dsv4kv import _torch

    spec = _torch.SPECS[op]
    full = dict(_torch._defaults(spec))
    full.update(values)
    return [full.get(name) for name, _, _ in spec.fields]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", OPS)
def test_fast_path_writes_the_bytes_of_the_dlpack_route(op, device):
    """Each operation's opcheck sample through dsv4kv._torch_ext and through the DLPack kernel
    (the route without the fast path), each on its own copy of the arguments: the same returned
    outputs, the same bytes in every tensor written in place, the same error count."""
    from dsv4kv import _torch

    fast = _fast()
    spec = _torch.SPECS[op]
    args, kwargs = samples(device)[op]
    values = dict(zip(_torch._pos(spec), args), **kwargs)
    assert int(values["error_count"].item()) == 0
    clone = lambda d: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in d.items()}  # noqa: E731
    a, b = clone(values), clone(values)
    got = getattr(fast, op)(*_fields(op, a), spec.shapes(a) if spec.returned else None, True)
    assert got is not NotImplemented, "the fast path declined a valid call of plain tensors"
    kernel = _torch._make_kernel(spec, device != "cpu", bool(spec.returned), fast=False)
    n_args = len(args)  # the sample leaves trailing defaults out, as a caller may
    want = kernel(*[b[n] for n in _torch._pos(spec)[:n_args]], **{n: b[n] for n in _torch._kw(spec) if n in b},
                  error_count=b["error_count"])
    if spec.returned:
        assert isinstance(got, tuple) and len(got) == len(spec.returned)
        assert all(t.device == values[spec.like].device and t.dtype == torch.int32 for t in got)
        _same_bytes(got, want)
    else:
        assert got is None and want is None
    names = [n for n, v in values.items() if isinstance(v, torch.Tensor)]
    _same_bytes([a[n] for n in names], [b[n] for n in names])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", [op for op in OPS if _torch_specs()[op].returned])
def test_fast_path_shape_rule_and_shared_allocation(op, device):
    """The eager route passes no shapes: the fast path takes them from the spec's C++ rule
    (allocated_shape) and allocates the outputs together. Those shapes are the Python rule's (the
    fake kernels'), the bytes those of the registered kernel's separate outputs, and the outputs
    share one storage without overlapping, each on a 64-byte boundary."""
    from dsv4kv import _torch

    spec = _torch.SPECS[op]
    assert spec.returned
    fast = _fast()
    args, kwargs = samples(device)[op]
    values = dict(zip(_torch._pos(spec), args), **kwargs)
    clone = lambda d: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in d.items()}  # noqa: E731
    a, b = clone(values), clone(values)
    together = getattr(fast, op)(*_fields(op, a), None, True)
    apart = getattr(fast, op)(*_fields(op, b), spec.shapes(b), False)
    assert together is not NotImplemented and apart is not NotImplemented
    assert [tuple(t.shape) for t in together] == [tuple(s) for s in spec.shapes(values)]
    _same_bytes(together, apart)
    storage = together[0].untyped_storage()
    assert all(t.untyped_storage().data_ptr() == storage.data_ptr() for t in together)
    assert len({t.untyped_storage().data_ptr() for t in apart}) == len(apart), "the registered kernel's outputs are separate"
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * 4) for t in together)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), f"outputs overlap: {spans}"
    assert all((start - storage.data_ptr()) % 64 == 0 for start, _ in spans)
    assert all(t.is_contiguous() and t._base is None for t in together)
    # Inputs the shape rule cannot read (topk_indices-like inputs of rank 1): declined, nothing
    # allocated or written; the public function then raises the contract's message.
    broken = clone(values)
    broken[spec.like] = broken[spec.like].reshape(-1)
    assert getattr(fast, op)(*_fields(op, broken), None, True) is NotImplemented
    with pytest.raises(ValueError, match=f"{op}: .*must have rank 2"):
        getattr(dsv4kv, op)(**broken)


def test_fast_path_declines_what_it_cannot_run_before_writing():
    """Whatever the fast path is not sure of comes back NotImplemented with nothing written (the
    DLPack route then runs it or raises the contract's error); a valid call runs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    q = _fast().quantize_and_insert_k_cache
    op = "quantize_and_insert_k_cache"

    class Sub(torch.Tensor):
        pass

    class Nothing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def call(check_modes=True, **change):
        cache = torch.zeros(2, L.vllm_block_stride(64), dtype=torch.uint8)
        values = dict(k=torch.ones(2, L.kHeadDim, dtype=torch.bfloat16), k_cache=cache,
                      slot_mapping=torch.arange(2), block_size=64, error_count=None)
        values.update(change)
        return q(*_fields(op, values), None, check_modes), values["k_cache"]

    r, cache = call()
    assert r is None and int(cache.count_nonzero()) > 0, "a valid call must run and write the cache"
    declined = {
        "NumPy array": dict(k=np.ones((2, L.kHeadDim), np.uint16)),
        "float32 tensor": dict(k=torch.ones(2, L.kHeadDim)),
        "contract error (NoPE-wide rows)": dict(k=torch.ones(2, L.kNopeDim, dtype=torch.bfloat16)),
        "tensor subclass": dict(k=torch.ones(2, L.kHeadDim, dtype=torch.bfloat16).as_subclass(Sub)),
        "meta tensor": dict(slot_mapping=torch.arange(2, device="meta")),
        "negative-bit view": dict(slot_mapping=torch._neg_view(torch.arange(2))),
        "NumPy integer scalar": dict(block_size=np.int64(64)),
        "bool for an int": dict(block_size=True),
        "int for a bool": dict(use_fnuz=0),
        "rank-2 error_count": dict(error_count=torch.zeros(1, 1, dtype=torch.int32)),
        "int64 error_count": dict(error_count=torch.zeros(1, dtype=torch.int64)),
        "missing required tensor": dict(k=None),
    }
    for why, change in declined.items():
        r, cache = call(**change)
        assert r is NotImplemented, why
        assert int(cache.count_nonzero()) == 0, f"{why}: declined but wrote the cache"
    with Nothing():
        r, cache = call()
        assert r is NotImplemented and int(cache.count_nonzero()) == 0, "a dispatch mode is active"
        r, cache = call(check_modes=False)  # a registered kernel's call: the mode already ran
        assert r is None and int(cache.count_nonzero()) > 0


def test_fast_path_keeps_out_and_routes_errors_through_dlpack():
    """out= through the fast route returns the caller's tensors themselves; a call the fast path
    declines still raises the contract's message (the DLPack route's)."""
    _fast()
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    args = (i32([[0, 70, -1]]), i32([0]), i32([[3, 5]]), 64, torch.ones(1, dtype=torch.bool))
    o = (torch.empty(1, 3, dtype=torch.int32), torch.empty(1, dtype=torch.int32))
    r = dsv4kv.compute_global_topk_indices_and_lens(*args, out=o)
    assert r[0] is o[0] and r[1] is o[1] and o[0].tolist() == [[192, 326, -1]] and o[1].tolist() == [2]
    with pytest.raises(ValueError, match="compute_global_topk_indices_and_lens: "):
        dsv4kv.compute_global_topk_indices_and_lens(i32([[0, 70, -1]]), i32([0]), i32([[3, 5]]), 0,
                                                    torch.ones(1, dtype=torch.bool))


# Each operation's own torch.ops tests (op_cases/<op>.py).
adopt(globals(), "TORCH_TESTS")
