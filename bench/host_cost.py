#!/usr/bin/env python3
"""Host cost per eager call: dsv4kv's Python entry points against the Triton transcription.

Usage (on the GPU machine, after `pip install .`, from the repository root):
    python3 bench/host_cost.py [--oracle-dir .oracle] [--device cuda] [--calls 2000] [--json OUT.json]

For every operation, small shapes where the host and not the GPU sets the time (quantize 1
token, gather 1 request x 128 rows, global_topk 64 x 512, combine and mixed 64 tokens), each
entry point is called back to back `--calls` times with torch CUDA tensors and no
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


def cases(torch, dsv4kv, device):
    """{op: (args, kwargs)}: valid small problems, positional as the public functions take them."""
    g = torch.Generator(device="cpu").manual_seed(0)
    i32 = torch.int32

    def rnd(lo, hi, shape, dtype=i32):
        return torch.randint(lo, hi, shape, generator=g, dtype=dtype).to(device)

    B = 64
    stride = dsv4kv.layout.vllm_block_stride(B)
    nb = 64
    cache = torch.zeros(nb, stride, dtype=torch.uint8, device=device)
    head = dsv4kv.layout.kHeadDim
    T = 64
    topk = 512
    out = {}
    out["quantize_and_insert_k_cache"] = (
        (torch.randn(1, head, generator=g).to(torch.bfloat16).to(device), cache, rnd(0, nb * B, (1,), torch.int64), B),
        {})
    out["dequantize_and_gather_k_cache"] = (
        (torch.empty(1, 128, head, dtype=torch.bfloat16, device=device), cache,
         torch.tensor([128], dtype=i32, device=device), None, rnd(0, nb, (1, 2)), B, 0), {})
    out["compute_global_topk_indices_and_lens"] = (
        (rnd(-1, 1000, (T, topk)), torch.zeros(T, dtype=i32, device=device), rnd(0, nb, (1, 16)), B,
         torch.ones(T, dtype=torch.bool, device=device)), {})
    window = 128
    out["combine_topk_swa_indices"] = (
        (rnd(-1, 250, (T, topk)), torch.tensor([0, T], dtype=i32, device=device),
         torch.tensor([1000], dtype=i32, device=device), torch.tensor([1000], dtype=i32, device=device),
         window, 4, topk, 4096, 2048), {})
    D, P = T // 2, T // 2
    out["build_flashinfer_mixed_sparse_indices"] = (
        (rnd(-1, nb * B, (D, window)), None, None, rnd(-1, 200, (P, topk)),
         torch.cat([torch.arange(D + 1), torch.tensor([D + P])]).to(i32).to(device),
         torch.cat([torch.full((D,), 200), torch.tensor([300])]).to(i32).to(device),
         torch.cat([torch.arange(D), torch.full((P,), D)]).to(i32).to(device),
         rnd(0, nb, (D + 1, 8)), B, None, B, window, 4, topk), {})
    return out


TRITON_NAMES = {"dequantize_and_gather_k_cache": "dequantize_and_gather_k_cache_triton"}


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
    for op, (args, kwargs) in cases(torch, dsv4kv, a.device).items():
        public = getattr(dsv4kv, op)
        packet = getattr(torch.ops.dsv4kv, op)
        ops_args = [x for x in args]
        variants = {
            "dsv4kv": lambda: public(*args, **kwargs),
            "torch.ops": lambda: packet(*ops_args),
            "dlpack": lambda: public(*args, stream=stream, **kwargs),
        }
        if oracle is not None:
            tfn = getattr(oracle, TRITON_NAMES.get(op, op), None)
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
