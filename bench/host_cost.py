#!/usr/bin/env python3
"""Host cost per eager call: dsv4kv's Python entry points against the Triton transcription.

Usage (on a CUDA GPU, after `pip install --no-build-isolation .` with torch installed, so
that the compiled fast path dsv4kv._torch_ext is built; from the repository root):
    python3 bench/host_cost.py [--oracle-dir .oracle] [--device cuda] [--calls 2000] [--json OUT.json]
    python3 bench/host_cost.py --profile [--device cpu|cuda]   # stage breakdown of one call

The last lines are the host-cost figures, PASS or FAIL: the dsv4kv row <= 10 us for quantize (1
token) and global_topk (64 x 512), and below the Triton row for every operation.

For every operation, small shapes where the host and not the GPU sets the time (each one's
small_problem() in python/tests/op_cases/<op>.py), each entry point is called back to back `--calls` times with torch CUDA tensors and no
synchronization inside the loop; host cost = loop wall time / calls (the median of --reps
loops), i.e. what one call costs the launching thread. Rows:

* ``dsv4kv``: the public function (dsv4kv.<name>: argument normalization, then torch.ops.dsv4kv);
* ``torch.ops``: torch.ops.dsv4kv.<name> called directly (dispatcher + kernel);
* ``no-fast``: the public function through the torch route without the compiled fast path
  (dsv4kv._torch_ext): a DLPack capsule per tensor and torch.empty per output from Python (the
  route _torch.py generates with fast=False);
* ``dlpack``: the public function with an explicit ``stream=`` (the direct DLPack path, no
  torch.library), for comparison;
* ``triton``: the Triton transcription (dsv4_triton.py from --oracle-dir), same arguments.

With --device cpu (no GPU) the dsv4kv rows run the C++ reference and include its work; the
Triton rows are skipped. GPU time per call is printed alongside (CUDA events over the loop
divided by calls) so a host-bound row is visible as host >= GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def load_oracle(oracle_dir: str):
    path = os.path.abspath(oracle_dir)
    if not os.path.isfile(os.path.join(path, "dsv4_triton.py")):
        return None, f"{path}/dsv4_triton.py not found"
    sys.path.insert(0, path)
    try:
        import dsv4_triton  # noqa: E402
    except Exception as e:  # noqa: BLE001 (report any import failure, e.g. no triton)
        return None, f"import dsv4_triton failed: {e}"
    return dsv4_triton, ""


def load_bench_triton():
    """bench/triton_bench.py (the Triton kernels written for this bench where the oracle has none,
    e.g. the sparse gather) and the layout dict they take, or (None, None) without Triton."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import triton_bench  # noqa: E402
        from dsv4kv import layout as L
    except Exception:  # noqa: BLE001 (no Triton here: those rows are then missing, and say so)
        return None, None
    if getattr(triton_bench, "triton", None) is None:
        return None, None
    lay = {"head_dim": L.kHeadDim, "nope_dim": L.kNopeDim, "num_tiles": L.kNumTiles, "rope_bytes": L.kRopeBytes,
           "bf16_bytes": L.kBf16Bytes, "token_bytes": L.kTokenBytes}
    return triton_bench, lay


#: The operation modules of the Python tests (one per operation; each gives its small_problem()).
TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python", "tests")


def cases(torch, dsv4kv, device, tokens=64):
    """[(op module, args, kwargs)]: every operation's small valid problem (small_problem() of its
    python/tests/op_cases module), positional as the public functions take them, in table order."""
    sys.path.insert(0, os.path.abspath(TESTS))
    from op_cases import OPS

    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(lo, hi, shape, dtype=torch.int32):
        return torch.randint(lo, hi, shape, generator=g, dtype=dtype).to(device)

    B, nb = 64, 64
    ctx = dict(torch=torch, device=device, gen=g, rnd=rnd, B=B, nb=nb, T=tokens, topk=512, window=128,
               cache=torch.zeros(nb, dsv4kv.layout.vllm_block_stride(B), dtype=torch.uint8, device=device))
    return [(m, *m.small_problem(ctx)) for m in OPS]


def per_call_us(torch, fn, calls, reps, cuda):
    """Median over `reps` loops of (loop wall time / calls), and GPU time per call (events)."""
    for _ in range(20):
        fn()
    if cuda:
        torch.cuda.synchronize()
    host, gpu = [], []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        if cuda:
            end.record()
            torch.cuda.synchronize()
            gpu.append(start.elapsed_time(end) * 1e3 / calls)
        host.append((t1 - t0) * 1e6 / calls)
    return statistics.median(host), (statistics.median(gpu) if gpu else float("nan"))


def profile(torch, dsv4kv, device, calls, reps, cases_):
    """--profile: where the host time of one eager call goes, per operation and stage (the
    minimum over `reps` interleaved loops of `calls` calls each, so that a loaded machine
    still gives each stage's own cost). Stages of the compiled fast path (``fast:``) and of
    the DLPack route it replaces (``dlpack:``, the route _torch.py generates with fast=False)."""
    from dsv4kv import _ext, _opspec, _torch, ops

    fast_ext = _torch._FAST
    print(f"compiled fast path: {'dsv4kv._torch_ext (torch ' + fast_ext.torch_version + ')' if fast_ext else 'not built'}")
    for m, args, kwargs in cases_:
        op = m.NAME
        fn = getattr(dsv4kv, op)
        spec = _opspec.spec(fn)
        bound = spec.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        fast_route, slow_route = _torch._ROUTES[op], _torch._make_route(spec, fast=False)
        allocate = bool(spec.returned)
        shapes = spec.shapes(values) if allocate else None
        like = values[spec.like]
        outs = [torch.empty(s, dtype=torch.int32, device=like.device) for s in shapes] if allocate else []
        full = dict(values)
        full.update(zip(spec.returned, outs))
        tensors = [full[n] for n in spec.array_fields if full.get(n) is not None]
        stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else 0
        ext = getattr(_ext, op)
        dl = _torch._to_dlpack

        def ext_args():
            return [(None if full.get(f) is None else dl(full[f])) if kind in ("tensor", "counter")
                    else spec.scalar(f, full[f]) for f, _, kind in spec.fields]

        def public_dlpack():
            ops._torch_routes[fn] = slow_route
            try:
                fn(*args, **kwargs)
            finally:
                ops._torch_routes[fn] = fast_route

        stages = {"public": lambda: fn(*args, **kwargs), "fast: route(values)": lambda: fast_route(values)}
        if fast_ext is not None:
            fast_fn = getattr(fast_ext, op)
            fields = [None if f in spec.returned else values[f] for f, _, _ in spec.fields]
            # What the eager route calls: no shapes, so the C++ shape rule and one allocation.
            stages["fast: _torch_ext call"] = lambda: fast_fn(*fields, None, True)
            if allocate:
                # What the registered kernels call: Python's shapes, one at::empty per output.
                stages["fast: _torch_ext call, at::empty each"] = lambda: fast_fn(*fields, shapes, True)
                # No allocation at all: the binding, validate() and the launch.
                given = [full[f] if f in spec.returned else values[f] for f, _, _ in spec.fields]
                stages["fast: _torch_ext call, outputs given"] = lambda: fast_fn(*given, None, True)
        if allocate:
            stages["shapes rule"] = lambda: spec.shapes(values)
        stages["dlpack: public"] = public_dlpack
        stages["dlpack: route(values)"] = lambda: slow_route(values)
        if allocate:
            stages[f"dlpack: torch.empty x{len(outs)}"] = lambda: [
                torch.empty(s, dtype=torch.int32, device=like.device) for s in shapes]
        stages[f"dlpack: _to_dlpack x{len(tensors)}"] = lambda: [dl(t) for t in tensors]
        stages["dlpack: field list (with capsules)"] = ext_args
        stages["dlpack: _ext call (with capsules)"] = lambda: ext(*ext_args(), stream)
        best = {k: float("inf") for k in stages}
        for _ in range(reps):
            for k, f in stages.items():
                best[k] = min(best[k], per_call_us(torch, f, calls, 1, device == "cuda")[0])
        best["dlpack: _ext call"] = best.pop("dlpack: _ext call (with capsules)") - best["dlpack: field list (with capsules)"]
        if "fast: _torch_ext call" in best:
            best["fast: Python before the C++ call"] = best["public"] - best["fast: _torch_ext call"]
        print(f"\n{op} ({len(tensors)} tensors incl. {len(outs)} allocated outputs): host us per call")
        for k, v in best.items():
            print(f"  {k:40s} {v:8.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle-dir", default=".oracle")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default="", help="also write the rows to this JSON file")
    ap.add_argument("--profile", action="store_true",
                    help="print the host time of each stage of one call instead (fast path and DLPack route)")
    ap.add_argument("--tokens", type=int, default=64,
                    help="tokens T of the index builders' problems (64: the issue's figures)")
    a = ap.parse_args()

    import torch

    import dsv4kv

    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("host_cost: no CUDA device visible to torch (use --device cpu)", file=sys.stderr)
        return 2
    oracle, why = load_oracle(a.oracle_dir) if cuda else (None, "--device cpu")
    print(f"dsv4kv {dsv4kv.__version__} backends={dsv4kv.backends} torch {torch.__version__} device={a.device}"
          + ("" if oracle else f"; Triton rows skipped: {why}"), flush=True)
    if a.profile:
        profile(torch, dsv4kv, a.device, a.calls, a.reps, cases(torch, dsv4kv, a.device, a.tokens))
        return 0
    from dsv4kv import _opspec, _torch, ops

    print("compiled fast path: " + (f"dsv4kv._torch_ext (built for torch {_torch._FAST.torch_version})"
                                    if _torch._FAST else "not in use (no dsv4kv._torch_ext for this torch)"))
    stream = torch.cuda.current_stream().cuda_stream if cuda else 0
    bench_triton, bench_layout = load_bench_triton() if oracle is not None else (None, None)
    rows = []
    for m, args, kwargs in cases(torch, dsv4kv, a.device, a.tokens):
        op = m.NAME
        public = getattr(dsv4kv, op)
        packet = getattr(torch.ops.dsv4kv, op)
        ops_args = [x for x in args]
        fast_route, slow_route = _torch._ROUTES[op], _torch._make_route(_opspec.spec(public), fast=False)

        def no_fast(public=public, args=args, kwargs=kwargs, fast_route=fast_route, slow_route=slow_route):
            ops._torch_routes[public] = slow_route
            try:
                public(*args, **kwargs)
            finally:
                ops._torch_routes[public] = fast_route

        variants = {
            "dsv4kv": lambda: public(*args, **kwargs),
            "torch.ops": lambda: packet(*ops_args),
            "no-fast": no_fast,
            "dlpack": lambda: public(*args, stream=stream, **kwargs),
        }
        if oracle is not None:
            tfn = getattr(oracle, getattr(m, "TRITON_NAME", op), None)
            if tfn is not None:
                variants["triton"] = lambda: tfn(*args, **kwargs)
            elif getattr(m, "TRITON_BENCH_NAME", None) is not None and bench_triton is not None:
                # No oracle kernel: the comparison point of bench/triton_bench.py, same arguments.
                bfn = getattr(bench_triton, m.TRITON_BENCH_NAME)
                variants["triton"] = lambda: bfn(*args, layout=bench_layout, **kwargs)
        row = {"op": op}
        for name, fn in variants.items():
            try:
                host, gpu = per_call_us(torch, fn, a.calls, a.reps, cuda)
                row[name] = {"host_us": host, "gpu_us": gpu}
            except Exception as e:  # noqa: BLE001 (a failing variant is a row, not a crash)
                row[name] = {"error": f"{type(e).__name__}: {e}"}
        rows.append(row)

    cols = ["dsv4kv", "torch.ops", "no-fast", "dlpack", "triton"]
    print("\nhost us per eager call (GPU us per call in parentheses), median of "
          f"{a.reps} loops of {a.calls} calls")
    print(f"| op | {' | '.join(cols)} | dsv4kv / triton |")
    print("|---|" + "---|" * (len(cols) + 1))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if v is None:
                cells.append("-")
            elif "error" in v:
                cells.append("error: " + v["error"][:60])
            else:
                cells.append(f"{v['host_us']:.1f} ({v['gpu_us']:.1f})")
        ratio = "-"
        if "host_us" in r.get("dsv4kv", {}) and "host_us" in r.get("triton", {}):
            ratio = f"{r['dsv4kv']['host_us'] / r['triton']['host_us']:.2f}"
        print(f"| {r['op']} | {' | '.join(cells)} | {ratio} |")
    verdicts = figures(rows, cuda)
    for line in verdicts:
        print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "torch": torch.__version__, "rows": rows, "figures": verdicts}, f,
                      indent=1)
    return 0


#: The host-cost figures: (operation, the most host us per eager call of the dsv4kv row,
#: the margin aimed at so that the figure holds on a busier host).
LIMITS = [("quantize_and_insert_k_cache", 10.0, 7.0), ("compute_global_topk_indices_and_lens", 10.0, 9.0)]


def figures(rows, cuda):
    """One line per host-cost figure, PASS or FAIL (CUDA only: on the CPU the rows include
    the reference's work)."""
    if not cuda:
        return ["figures: judged with --device cuda only"]
    by_op = {r["op"]: r for r in rows}
    out = []
    for op, limit, aim in LIMITS:
        v = by_op.get(op, {}).get("dsv4kv", {}).get("host_us")
        out.append(f"FIGURE {op} dsv4kv <= {limit:g} us: " +
                   ("missing" if v is None else f"{v:.1f} us {'PASS' if v <= limit else 'FAIL'}"
                    f" (aim <= {aim:g} us: {'met' if v <= aim else 'not met'})"))
    for r in rows:
        ours, triton = r.get("dsv4kv", {}).get("host_us"), r.get("triton", {}).get("host_us")
        if ours is None or triton is None:
            out.append(f"FIGURE {r['op']} dsv4kv < triton: missing (triton row: {r.get('triton', 'not run')})")
        else:
            out.append(f"FIGURE {r['op']} dsv4kv < triton: {ours:.1f} vs {triton:.1f} us "
                       f"{'PASS' if ours < triton else 'FAIL'}")
    return out


if __name__ == "__main__":
    sys.exit(main())
