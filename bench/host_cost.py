#!/usr/bin/env python3
"""Host cost per eager call: dsv4kv's Python entry points against the Triton transcription.

Usage (on the GPU machine, after `pip install .`, from the repository root):
    python3 bench/host_cost.py [--oracle-dir .oracle] [--device cuda] [--calls 2000] [--json OUT.json]

For every operation, small shapes where the host and not the GPU sets the time (each one's
small_problem() in python/tests/op_cases/<op>.py), each entry point is called back to back `--calls` times with torch CUDA tensors and no
synchronization inside the loop; host cost = loop wall time / calls (the median of --reps
loops), i.e. what one call costs the launching thread. Rows:

* ``dsv4kv``: the public function (dsv4kv.<name>: argument normalization, then torch.ops.dsv4kv);
* ``torch.ops``: torch.ops.dsv4kv.<name> called directly (dispatcher + kernel);
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


#: The operation modules of the Python tests (one per operation; each gives its small_problem()).
TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python", "tests")


def cases(torch, dsv4kv, device):
    """[(op module, args, kwargs)]: every operation's small valid problem (small_problem() of its
    python/tests/op_cases module), positional as the public functions take them, in table order."""
    sys.path.insert(0, os.path.abspath(TESTS))
    from op_cases import OPS

    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(lo, hi, shape, dtype=torch.int32):
        return torch.randint(lo, hi, shape, generator=g, dtype=dtype).to(device)

    B, nb = 64, 64
    ctx = dict(torch=torch, device=device, gen=g, rnd=rnd, B=B, nb=nb, T=64, topk=512, window=128,
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle-dir", default=".oracle")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default="", help="also write the rows to this JSON file")
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
    stream = torch.cuda.current_stream().cuda_stream if cuda else 0
    rows = []
    for m, args, kwargs in cases(torch, dsv4kv, a.device):
        op = m.NAME
        public = getattr(dsv4kv, op)
        packet = getattr(torch.ops.dsv4kv, op)
        ops_args = [x for x in args]
        variants = {
            "dsv4kv": lambda: public(*args, **kwargs),
            "torch.ops": lambda: packet(*ops_args),
            "dlpack": lambda: public(*args, stream=stream, **kwargs),
        }
        if oracle is not None:
            tfn = getattr(oracle, getattr(m, "TRITON_NAME", op), None)
            if tfn is not None:
                variants["triton"] = lambda: tfn(*args, **kwargs)
        row = {"op": op}
        for name, fn in variants.items():
            try:
                host, gpu = per_call_us(torch, fn, a.calls, a.reps, cuda)
                row[name] = {"host_us": host, "gpu_us": gpu}
            except Exception as e:  # noqa: BLE001 (a failing variant is a row, not a crash)
                row[name] = {"error": f"{type(e).__name__}: {e}"}
        rows.append(row)

    cols = ["dsv4kv", "torch.ops", "dlpack", "triton"]
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
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
