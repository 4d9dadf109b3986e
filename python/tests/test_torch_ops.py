"""torch.ops.dsv4kv: every operation of the table registered with torch.library, checked by
torch.library.opcheck, traced by torch.compile(fullgraph=True) with the same bytes as eager,
captured in CUDA graphs (mode="reduce-overhead"), and run on the tensors' own device."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import dsv4kv  # noqa: E402
from dsv4kv import _ext  # noqa: E402
from _support import cuda_skip_reason, random_problem, require_cuda  # noqa: E402

if not dsv4kv.HAS_TORCH_OPS:
    pytest.skip("dsv4kv did not register its torch operators (DSV4KV_NO_TORCH is set)", allow_module_level=True)

L = dsv4kv.layout
OPS = sorted(_ext.ops)


def devices():
    out = ["cpu"]
    reason = cuda_skip_reason()
    out.append(pytest.param("cuda", marks=pytest.mark.skipif(reason is not None and not require_cuda(),
                                                             reason=f"GPU run: {reason}")))
    return out


def problem(device, seed=3):
    """Torch tensors of one random problem (tests/_support.random_problem) on `device`."""
    pr = random_problem(seed)
    t = {}
    for name, v in pr.items():
        if isinstance(v, np.ndarray):
            if v.dtype.name == "bfloat16":
                t[name] = torch.from_numpy(v.view(np.uint16).astype(np.int16)).view(torch.bfloat16).to(device)
            else:
                t[name] = torch.from_numpy(v.copy()).to(device)
        else:
            t[name] = v
    return t


def samples(device):
    """{op: (args, kwargs)} for torch.ops.dsv4kv.<op>: positional arguments as the schema
    orders them, error_count as keyword. Every operation of the table must have one."""
    p = problem(device)
    ec = lambda: torch.zeros(1, dtype=torch.int32, device=device)  # noqa: E731
    out = torch.full((4, p["out_rows"], L.kHeadDim), 7, dtype=torch.bfloat16, device=device)
    return {
        "quantize_and_insert_k_cache": ((p["k"], p["cache"].clone(), p["slots"], p["B"]), {"error_count": ec()}),
        "dequantize_and_gather_k_cache": (
            (out, p["cache"], p["seq_lens"], p["gather_lens"], p["block_table"][:, :5], p["B"], 3),
            {"error_count": ec()}),
        "dequantize_and_gather_k_cache_sparse": (
            (torch.full((7, L.kHeadDim), 7, dtype=torch.bfloat16, device=device), p["cache"],
             torch.tensor([3, -1, p["B"] + 1, 0, -5, 1 << 30], dtype=torch.int32, device=device), p["B"]),
            {"error_count": ec()}),
        "compute_global_topk_indices_and_lens": (
            (p["topk_idx"][:, :p["topk"]], p["t2r"], p["block_table"], p["B"], p["valid"]), {"error_count": ec()}),
        "combine_topk_swa_indices": (
            (p["topk_idx"], p["qsl"], p["c_seq"], p["c_gather"], 16, 4, 32, 4096, 1000, p["lv"], p["rv"], 10),
            {"error_count": ec()}),
        "build_flashinfer_mixed_sparse_indices": (
            (p["dswa"], p["dcomp"], p["dlens"], p["ptopk"], p["m_qsl"], p["m_seq"], p["m_t2r"], p["m_bt"], 16, None,
             8, 128, 4, 22, True, p["dvalid"], 24, None, p["plv"], p["prv"], 9),
            {"error_count": ec()}),
    }


def test_every_operation_is_registered_with_a_sample():
    assert OPS, "the extension exports no operation table"
    missing = [op for op in OPS if not hasattr(torch.ops.dsv4kv, op)]
    assert not missing, f"not registered as torch.ops.dsv4kv: {missing}"
    assert sorted(samples("cpu")) == OPS, "add an opcheck sample for each new operation (samples())"


@pytest.mark.parametrize("op", OPS)
def test_schema_has_the_python_positional_arguments(op):
    """Same names and order as the public function (combine's out= pair excepted: it is the
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
        names = [a.name for a in packet.out._schema.arguments if a.kwarg_only and a.name != "error_count"]
        out_kwargs = dict(kwargs, **{n: torch.full_like(o, 5) for n, o in zip(names, outs)})
        torch.library.opcheck(packet.out, args, out_kwargs)


def _run_five(p, ec):
    """The five public functions in sequence (torch tensors in, torch tensors out)."""
    cache = p["cache"].clone()
    dsv4kv.quantize_and_insert_k_cache(p["k"], cache, p["slots"], p["B"], error_count=ec[0:1])
    out = torch.full((4, p["out_rows"], L.kHeadDim), 7, dtype=torch.bfloat16, device=cache.device)
    dsv4kv.dequantize_and_gather_k_cache(out, cache, p["seq_lens"], p["gather_lens"], p["block_table"][:, :5],
                                         p["B"], 3, error_count=ec[1:2])
    g, gl = dsv4kv.compute_global_topk_indices_and_lens(p["topk_idx"][:, :p["topk"]], p["t2r"], p["block_table"],
                                                        p["B"], p["valid"], error_count=ec[2:3])
    ci, cl = dsv4kv.combine_topk_swa_indices(p["topk_idx"], p["qsl"], p["c_seq"], p["c_gather"], 16, 4, 32, 4096,
                                             1000, left_visible=p["lv"], right_visible=p["rv"], max_image_tokens=10,
                                             error_count=ec[3:4])
    si, sl = dsv4kv.build_flashinfer_mixed_sparse_indices(
        p["dswa"], p["dcomp"], p["dlens"], p["ptopk"], p["m_qsl"], p["m_seq"], p["m_t2r"], p["m_bt"], 16, None, 8,
        128, 4, 22, decode_compressed_indices_are_local=True, decode_is_valid_token=p["dvalid"], swa_block_span=24,
        prefill_left_visible=p["plv"], prefill_right_visible=p["prv"], max_image_tokens=9, error_count=ec[4:5])
    # out= variant: caller-provided outputs, written in place
    o = (torch.full_like(g, 9), torch.full_like(gl, 9))
    dsv4kv.compute_global_topk_indices_and_lens(p["topk_idx"][:, :p["topk"]], p["t2r"], p["block_table"], p["B"],
                                                p["valid"], out=o)
    return cache, out.view(torch.int16), g, gl, ci, cl, si, sl, o[0], o[1]


def _same_bytes(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, i
        assert torch.equal(x.cpu(), y.cpu()), f"output {i} differs"


@pytest.mark.parametrize("device", devices())
def test_compile_fullgraph_matches_eager(device):
    torch._dynamo.reset()
    p = problem(device)
    ec_eager = torch.zeros(5, dtype=torch.int32, device=device)
    eager = _run_five(p, ec_eager)
    assert int(ec_eager.sum()) > 0, "the problem has out-of-range values: the counters must move"
    ec_comp = torch.zeros(5, dtype=torch.int32, device=device)
    compiled = torch.compile(_run_five, fullgraph=True)(p, ec_comp)
    _same_bytes(eager, compiled)
    assert torch.equal(ec_eager, ec_comp)


def test_compile_reduce_overhead_cuda_graphs():
    reason = cuda_skip_reason()
    if reason is not None:
        if require_cuda():
            pytest.fail(f"DSV4KV_REQUIRE_CUDA=1 but: {reason}")
        pytest.skip(f"GPU run: {reason}")
    torch._dynamo.reset()
    p = problem("cuda")
    ec_eager = torch.zeros(5, dtype=torch.int32, device="cuda")
    eager = _run_five(p, ec_eager)
    fn = torch.compile(_run_five, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # warm-up, record, replay
        ec = torch.zeros(5, dtype=torch.int32, device="cuda")
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
    want = _run_five(problem("cpu"), torch.zeros(5, dtype=torch.int32))
    p = problem("cuda:1")
    torch.cuda.synchronize("cuda:1")
    side = torch.cuda.Stream(device="cuda:1")
    torch.cuda.set_stream(side)  # cuda:1's current stream (this also makes cuda:1 current) ...
    torch.cuda.set_device(0)  # ... and cuda:0 the current device again
    try:
        assert torch.cuda.current_device() == 0
        assert torch.cuda.current_stream("cuda:1") == side
        ec = torch.zeros(5, dtype=torch.int32, device="cuda:1")
        got = _run_five(p, ec)  # eager shortcut
        compiled = torch.compile(_run_five, fullgraph=True)(p, torch.zeros_like(ec))  # through the operators
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


def test_torch_route_uses_the_registered_operator():
    """dsv4kv.* sends torch tensors through torch.ops.dsv4kv: a dispatch mode (what FakeTensor,
    torch.compile's tracing and profilers use) sees the operator, with and without out=; the
    eager shortcut (no mode active: the same kernel without the dispatcher hop) gives the
    same results."""
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
