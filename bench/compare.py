#!/usr/bin/env python3
"""Pair dsv4kv_bench's JSON with triton_bench.py's JSON and check the benchmark's figures
(bench/README.md; see bench/RESULTS.md#figures-met).

Usage: python3 bench/compare.py OURS.json [TRITON.json] [--md OUT.md] [--json OUT.json]

Our time is dsv4kv_bench's graph median ("us": the op, or a chain of ops, captured in one CUDA graph
and replayed after a 256 MiB L2 flush); the Triton time is the oracle's cold_graph median for the
same key, the same method. Where the oracle has several variants of an op (e.g. the vLLM
wrapper, the kernel alone on a pre-filled buffer, the fork; the chains likewise), the fastest one
is the comparison. "same-bytes copy µs" is dsv4kv_bench's plain copy kernel over the row's minimal bytes,
"% of copy" that copy's time over ours (the "% of the same-bytes copy kernel" figure; the
cudaMemcpy ceiling stands in where a row has no copy time), "floor" the graph replay
of an empty kernel timed the same way.

Figures (each counted once in "Figures met: N of M"):
  * every row: at least 1.00x the fastest Triton variant (only when a Triton JSON is given);
  * rows moving >= 8 MB of minimal bytes: >= 90% of copy;
  * rows moving < 1 MB: within 1.0 µs of the empty-kernel graph replay;
  * the chains: decode >= 2x faster than Triton's chain, prefill >= 4x;
  * rows of a semantics profile (key ending in " semantics=<name>"): at most 3% slower than the
    row of the same key without the suffix (the seed's rules at the same shape).
A row launched with programmatic dependent launch (dsv4kv_bench --pdl: "pdl": true, key ending in
" pdl") is joined with the Triton row of its key without the suffix and held to the same figures.
Exit status: 0 when every figure is met and every row verified, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

BIG_BYTES = 8e6      # rows at or above: the copy figure
BIG_FRAC = 0.90
SMALL_BYTES = 1e6    # rows below: the floor figure
SMALL_SLACK_US = 1.0
CHAIN_SPEEDUP = {"chain decode": 2.0, "chain prefill": 4.0}
PDL_SUFFIX = " pdl"
PROFILE_MARK = " semantics="
PROFILE_SLACK = 1.03  # a profile row's time over its seed row's


def base_key(r):
    """The key a row joins on: its own, less the " pdl" suffix of a PDL variant."""
    key = r["key"]
    return key[: -len(PDL_SUFFIX)] if r.get("pdl") and key.endswith(PDL_SUFFIX) else key


def num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def f(v, prec=1, suffix=""):
    v = num(v)
    return "-" if v is None else f"{v:.{prec}f}{suffix}"


def fastest(triton_rows):
    """key -> the Triton row with the smallest cold_graph_us (rows with an error left out)."""
    best = {}
    for r in triton_rows:
        if "error" in r or num(r.get("cold_graph_us")) is None:
            continue
        if r["key"] not in best or r["cold_graph_us"] < best[r["key"]]["cold_graph_us"]:
            best[r["key"]] = r
    return best


def frac_of_copy(r, us, ceiling):
    """The same-bytes copy kernel's time over ours (the figure's ratio), or, for a row without a
    copy time, our GB/s over the copy ceiling; None without a time."""
    if not us:
        return None
    copy_us = num(r.get("same_bytes_copy_us"))
    if copy_us:
        return copy_us / us
    return r["bytes_min"] / (us * 1e-6) / 1e9 / ceiling


def seed_key(r):
    """The key of the seed's row at a profile row's shape (its key less " semantics=<name>"), or None."""
    key = base_key(r)
    i = key.find(PROFILE_MARK)
    return None if i < 0 else key[:i]  # the suffix ends every profile row's key


def judge(r, t, have_triton, ceiling, empty_us, seed_row=None):
    """[(figure text, met)] for one of our rows `r`, its fastest Triton row `t` (or None) and, for a
    semantics profile's row, the seed's row of the same shape (or None)."""
    out = []
    us = num(r.get("us")) if not r.get("error") else None
    tus = num(t.get("cold_graph_us")) if t else None
    want = CHAIN_SPEEDUP.get(base_key(r), 1.0)
    if have_triton:
        text = f"≥ {want:.2f}× Triton"
        out.append((text if tus else text + " (no Triton time)", bool(us and tus and tus / us >= want)))
    b = r.get("bytes_min") or 0
    if b >= BIG_BYTES:
        frac = frac_of_copy(r, us, ceiling)
        ok = frac is not None and frac >= BIG_FRAC
        out.append((f"≥ {BIG_FRAC * 100:.0f}% of copy", ok))
    elif b < SMALL_BYTES:
        if empty_us is None:
            out.append(("≤ floor + 1.0 µs (no floor)", False))
        else:
            out.append((f"≤ floor + {SMALL_SLACK_US:.1f} µs", bool(us) and us <= empty_us + SMALL_SLACK_US))
    if seed_key(r) is not None:
        sus = num(seed_row.get("us")) if seed_row and not seed_row.get("error") else None
        text = f"≤ {PROFILE_SLACK:.2f}× seed"
        out.append((text if sus else text + " (no seed row)", bool(us and sus and us <= PROFILE_SLACK * sus)))
    return out


def build(ours, triton, have_triton):
    """The Markdown lines and the joined rows; (lines, joined, met, total, ok)."""
    info = ours["info"]
    ceiling = info["copy_ceiling_GBps"]
    layout = info.get("layout") or {}
    aligned = layout.get("aligned_stride")
    empty_us = num(info.get("empty_kernel_graph_us"))
    best = fastest(triton.get("rows", []))
    tinfo = triton.get("info", {})
    lines = [
        f"GPU: {info.get('gpu')} · build {info.get('build_commit')} · copy ceiling {ceiling:.0f} GB/s "
        f"(dsv4kv_bench, cudaMemcpyAsync D2D) · empty-kernel graph replay {f(empty_us, 2)} µs"
        + (f"; Triton side: {f(tinfo.get('copy_ceiling_GBps'), 0)} GB/s (torch copy_), triton "
           f"{tinfo.get('triton', '?')}, torch {tinfo.get('torch', '?')}" if have_triton else "; no Triton JSON"),
        "",
        "| op | shape | our µs | Triton µs | speedup | same-bytes copy µs | % of copy | empty-kernel floor µs | met |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    joined, failing, unverified = [], [], []
    met = total = 0
    by_key = {r["key"]: r for r in ours["rows"]}
    for r in ours["rows"]:
        key = r["key"]
        t = best.get(base_key(r))
        shape = r.get("shape", key)
        if r.get("block_stride") and aligned and r["block_stride"] != aligned:
            shape += f" stride={r['block_stride']}"
        sk = seed_key(r)
        figs = judge(r, t, have_triton, ceiling, empty_us, by_key.get(sk + (PDL_SUFFIX if r.get("pdl") else ""))
                     if sk else None)
        total += len(figs)
        met += sum(1 for _, ok in figs if ok)
        failing += [f"{key} ({text})" for text, ok in figs if not ok]
        us = num(r.get("us")) if not r.get("error") else None
        tus = num(t["cold_graph_us"]) if t else None
        speed = tus / us if (tus and us) else None
        g = r["bytes_min"] / (us * 1e-6) / 1e9 if us else None
        copy_us = num(r.get("same_bytes_copy_us"))
        frac = frac_of_copy(r, us, ceiling)
        variant = f" ({t['variant']})" if t and t.get("variant") not in (None, "kernel") else ""
        if t and str(t.get("verify", "")).startswith("MISMATCH"):
            variant += " ⚠"
        verify = r.get("verify", "")
        if r.get("error") or verify not in ("ok", ""):
            unverified.append(key)
        marks = "; ".join(f"{text} {'✓' if ok else '✗'}" for text, ok in figs)
        if r.get("error"):
            marks = f"error: {r['error'][:80]}" + (f"; {marks}" if marks else "")
        elif verify not in ("ok", ""):
            marks += " ⚠ verify"
        lines.append(f"| {r['op']} | {shape} | {f(us)} | {f(tus)}{variant} | {f(speed, 2, '×')} | {f(copy_us)} | "
                     f"{f(100 * frac if frac else None, 1)} | {f(empty_us, 1)} | {marks} |")
        joined.append({"key": key, "op": r["op"], "shape": shape, "our_us": us,
                       "our_stream_us": num(r.get("stream_median_us")), "triton_us": tus,
                       "triton_variant": t.get("variant") if t else None,
                       "triton_verify": t.get("verify") if t else None,
                       "speedup": speed, "GBps": g, "frac_of_copy": frac,
                       "same_bytes_copy_us": copy_us, "empty_kernel_graph_us": empty_us,
                       "figures": [{"figure": text, "met": ok} for text, ok in figs], "verify": verify,
                       "error": r.get("error", "")})
    lines.append("")
    if failing:
        lines.append("Not met: " + "; ".join(failing) + ".")
    if have_triton:
        missing = [r["key"] for r in ours["rows"] if base_key(r) not in best]
        if missing:
            lines.append("No Triton time for: " + ", ".join(missing) + ".")
        trows = triton.get("rows", [])
        tbad = sorted({f"{r['key']} ({r.get('variant')}: {r['verify']})" for r in trows
                       if str(r.get("verify", "")).startswith("MISMATCH")})
        if tbad:
            lines.append("Triton rows that differ from dsv4kv on the same inputs (⚠): " + "; ".join(tbad) + ".")
        tnot: dict = {}
        for r in trows:
            if str(r.get("verify", "")).startswith("not run"):
                tnot.setdefault(r["verify"], []).append(r["key"])
        for why, keys in sorted(tnot.items()):
            lines.append(f"Triton byte check {why}: {', '.join(sorted(set(keys)))}.")
    if unverified:
        lines.append("Not verified against dsv4kv::reference (error or mismatch): " + ", ".join(unverified) + ".")
    lines.append("our µs: dsv4kv_bench graph median (CUDA-graph replay after a 256 MiB L2 flush, inputs rotated); "
                 "Triton µs: oracle cold_graph median, fastest variant (named when not the only kernel); "
                 "figures: ≥ 1.00× Triton on every row (chains: decode ≥ 2×, prefill ≥ 4×), ≥ 90% of copy from "
                 "8 MB, ≤ floor + 1.0 µs under 1 MB, a semantics profile's row ≤ 1.03× the seed's row of its shape.")
    lines.append("")
    lines.append(f"Figures met: {met} of {total}")  # the last line, for whoever reads only the tail
    ok = met == total and not unverified
    return lines, joined, met, total, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ours")
    ap.add_argument("triton", nargs="?", help="triton_bench.py JSON (without it: no Triton figures)")
    ap.add_argument("--md", help="also write the Markdown here")
    ap.add_argument("--json", dest="json_out", help="also write the joined table as JSON here")
    a = ap.parse_args()

    with open(a.ours) as fh:
        ours = json.load(fh)
    triton, have_triton = {"rows": [], "info": {}}, False
    if a.triton:
        try:
            with open(a.triton) as fh:
                triton = json.load(fh)
            have_triton = True
        except (OSError, json.JSONDecodeError) as e:
            print(f"compare: cannot read {a.triton}: {e}; Triton columns left empty", file=sys.stderr)
    if not ours["info"].get("layout"):
        print(f"compare: {a.ours} has no info.layout; rerun with a current dsv4kv_bench", file=sys.stderr)
        return 2
    lines, joined, met, total, ok = build(ours, triton, have_triton)
    text = "\n".join(lines)
    print(text)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(text + "\n")
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump({"copy_ceiling_GBps": ours["info"]["copy_ceiling_GBps"], "figures_met": met,
                       "figures_total": total, "rows": joined}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
